# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The doctor's cross-host checks (reporting/_doctor_group.py) on the reference group - three 2x V100
hosts, 80 layers as 27/27/26 - healthy, then each failure: a member out of Ray or short of GPUs, the
NCCL interface missing, down or with another MTU, a closed port, a stopped stage and server, a
member not diagnosed, a bad group.json; and the two filters that carry them into the role."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json

import pytest

from ansible_collections.labfleet.vllm.plugins.filter.doctor_group import doctor_group
from ansible_collections.labfleet.vllm.plugins.filter.doctor_group_record import doctor_group_record
from ansible_collections.labfleet.vllm.plugins.module_utils.reporting import _doctor_group as D

ADDRESSES = {"gpu1": "10.0.0.11", "gpu2": "10.0.0.12", "gpu3": "10.0.0.13"}
GROUP_JSON = {"name": "llama70b", "member": "gpu1", "leader": "gpu1", "leader_address": "10.0.0.11", "port": 6379,
              "members": [{"name": n, "address": a, "gpus": 2} for n, a in sorted(ADDRESSES.items())],
              "stages": [{"stage": 0, "member": "gpu1", "layers": [0, 26]},
                         {"stage": 1, "member": "gpu2", "layers": [27, 53]},
                         {"stage": 2, "member": "gpu3", "layers": [54, 79]}],
              "nccl_interface": "ens1f0", "mtu": 9000, "gpus_total": 6, "tp": 2, "pp": 3,
              "image_id": "sha256:" + "ab" * 32}
GROUP = D.parse_group_record(json.dumps(GROUP_JSON))


def ray(addresses=tuple(sorted(ADDRESSES.values())), gpus=None):
    gpus = gpus or {}
    return {"answered": True, "ray_version": "2.44.1", "gcs_address": "10.0.0.11:6379", "problems": [],
            "nodes": [{"node_id": a, "address": a, "alive": True, "gpus": gpus.get(a, 2),
                       "node_manager_port": 40000 + n} for n, a in enumerate(addresses)]}


def record(name, **changes):
    rec = {"member": name, "group": dict(GROUP, member=name),
           "interface": {"name": "ens1f0", "read": True, "mtu": 9000, "operstate": "up", "flags": "0x1003",
                         "error": ""},
           "interfaces": [], "ray_unit": "active", "ray_container": "running", "ray_journal": [],
           "vllm": {}, "ray": None,
           "probes": [{"to": "gpu1", "address": "10.0.0.11", "port": 6379, "what": "the Ray GCS", "open": True,
                       "msg": ""}]}
    if name == "gpu1":
        rec["vllm"] = {"instance": "vllm", "unit": "active", "container": "running", "journal": []}
        rec["ray"] = ray()
        rec["probes"] += [{"to": m, "address": ADDRESSES[m], "port": 40000 + n, "what": "the Ray node manager",
                           "open": True, "msg": ""} for n, m in ((1, "gpu2"), (2, "gpu3"))]
    rec.update(changes)
    return rec


def records(**changes):
    out = dict((name, record(name)) for name in ADDRESSES)
    for name, change in changes.items():
        if change is None:
            del out[name]
        else:
            out[name].update(change)
    return out


def by_check(entry):
    return dict((f["check"], f) for f in entry["findings"])


def codes(found):
    return [(i["code"], i["member"]) for i in found["evidence"]["items"]]


def test_the_reference_group_is_healthy():
    entry = D.diagnose_group(GROUP, records())
    assert entry["status"] == "healthy" and entry["instance"] == "group llama70b" and entry["leader"] == "gpu1"
    found = by_check(entry)
    assert list(found) == list(D.GROUP_CHECKS)
    assert found["ray_membership"]["cause"].startswith("all 3 members are in the Ray cluster with their GPUs (6 of")
    assert found["nccl_interface"]["cause"] == "ens1f0 is up on all 3 members with MTU 9000"
    assert "5 connection(s)" in found["group_ports"]["cause"]
    assert found["stage_stopped"]["cause"].startswith("all 3 stages run")


def test_a_member_missing_from_ray_names_it_and_what_to_do():
    leader = record("gpu1", ray=ray(addresses=("10.0.0.11", "10.0.0.12")))
    leader["probes"] = leader["probes"][:2]
    found = by_check(D.diagnose_group(GROUP, records(gpu1=leader)))
    ray_finding = found["ray_membership"]
    assert ray_finding["status"] == "problem"
    assert codes(ray_finding) == [("RAY_MEMBER_MISSING", "gpu3"), ("RAY_GPUS_SHORT", None)]
    assert "member gpu3 (10.0.0.13) is not in the Ray cluster" in ray_finding["cause"]
    assert "on gpu3: start labfleet-ray.service there" in ray_finding["fix"]
    # The leader cannot probe a node Ray does not list: unknown, pointing at the membership.
    assert codes(found["group_ports"]) == [("GROUP_PORT_CLOSED", "gpu3")]
    assert found["group_ports"]["status"] == "unknown"


def test_a_member_short_of_gpus():
    leader = record("gpu1", ray=ray(gpus={"10.0.0.12": 1}))
    found = by_check(D.diagnose_group(GROUP, records(gpu1=leader)))
    assert codes(found["ray_membership"]) == [("RAY_MEMBER_GPUS_SHORT", "gpu2"), ("RAY_GPUS_SHORT", None)]
    assert "shows 1 of its 2 GPUs" in found["ray_membership"]["cause"]


def test_ray_that_does_not_answer_on_the_leader():
    leader = record("gpu1", ray={"answered": False, "problems": ["container labfleet-ray is exited, not running"]})
    found = by_check(D.diagnose_group(GROUP, records(gpu1=leader)))
    assert codes(found["ray_membership"]) == [("RAY_NOT_ANSWERING", "gpu1")]
    assert "exited" in found["ray_membership"]["cause"]


def test_nccl_interface_missing_down_and_mtu():
    gpu2 = {"interface": {"name": "ens1f0", "read": False, "error": "No such file"}, "interfaces": ["eth0", "lo"]}
    gpu3 = {"interface": {"name": "ens1f0", "read": True, "mtu": 1500, "operstate": "down", "flags": "0x1002"}}
    found = by_check(D.diagnose_group(GROUP, records(gpu2=gpu2, gpu3=gpu3)))["nccl_interface"]
    assert found["status"] == "problem"
    assert codes(found) == [("NCCL_INTERFACE_MISSING", "gpu2"), ("NCCL_INTERFACE_DOWN", "gpu3"),
                            ("NCCL_MTU_MISMATCH", None)]
    assert "member gpu2 has no interface ens1f0 (it has eth0, lo)" in found["cause"]
    assert "down (down, administratively down)" in found["cause"]
    assert "gpu1 9000, gpu3 1500" in found["cause"]


def test_one_mtu_that_is_not_the_planned_one_and_an_unknown_operstate():
    iface = {"name": "ens1f0", "read": True, "mtu": 1500, "operstate": "unknown", "flags": "0x1003"}
    found = by_check(D.diagnose_group(GROUP, records(**dict((n, {"interface": iface}) for n in ADDRESSES))))
    assert codes(found["nccl_interface"]) == [("NCCL_MTU_NOT_PLANNED", None)]
    no_mtu = dict(GROUP, mtu=None)
    assert by_check(D.diagnose_group(no_mtu, records(**dict((n, {"interface": iface}) for n in ADDRESSES))))[
        "nccl_interface"]["status"] == "healthy"


def test_no_interface_named_is_not_applicable():
    found = by_check(D.diagnose_group(dict(GROUP, nccl_interface=""), records()))["nccl_interface"]
    assert found["status"] == "not_applicable"


def test_closed_ports_name_both_ends():
    gpu3 = record("gpu3")
    gpu3["probes"][0].update(open=False, msg="Timeout when waiting for 10.0.0.11:6379")
    leader = record("gpu1")
    leader["probes"][1].update(open=False, msg="Timeout when waiting for 10.0.0.12:40001")
    found = by_check(D.diagnose_group(GROUP, records(gpu1=leader, gpu3=gpu3)))["group_ports"]
    assert found["status"] == "problem"
    assert codes(found) == [("GROUP_PORT_CLOSED", "gpu1"), ("GROUP_PORT_CLOSED", "gpu3")]
    assert "gpu1 cannot reach the Ray node manager of gpu2 at 10.0.0.12:40001" in found["cause"]
    assert "gpu3 cannot reach the leader's Ray GCS port at 10.0.0.11:6379" in found["cause"]
    assert "open TCP 6379 on gpu1 for gpu3" in found["fix"]


def test_a_stopped_stage_and_server():
    gpu2 = {"ray_unit": "failed", "ray_container": "exited",
            "ray_journal": ["Started labfleet-ray", "ray.exceptions.RaySystemError: GCS unreachable",
                            "labfleet-ray.service: Failed with result 'exit-code'."]}
    leader = record("gpu1")
    leader["vllm"] = {"instance": "vllm", "unit": "inactive", "container": "absent", "journal": ["Stopped vllm"]}
    found = by_check(D.diagnose_group(GROUP, records(gpu1=leader, gpu2=gpu2)))["stage_stopped"]
    assert codes(found) == [("STAGE_STOPPED", "gpu2"), ("GROUP_SERVER_STOPPED", "gpu1")]
    assert found["cause"].startswith("stage 1 (member gpu2, layers 27-53) stopped: labfleet-ray.service is failed, "
                                     "container labfleet-ray is exited; its journal ends: Started labfleet-ray | ")
    assert "vllm.service on the leader gpu1 stopped" in found["cause"]
    assert "on gpu2: journalctl -u labfleet-ray.service -n 50" in found["fix"]


def test_a_member_not_diagnosed_is_unknown_and_other_groups_records_are_ignored():
    other = record("gpu3")
    other["group"] = dict(other["group"], name="another")
    entry = D.diagnose_group(GROUP, records(gpu3=other))
    assert entry["status"] == "unknown"
    assert all(("MEMBER_NOT_DIAGNOSED", "gpu3") in codes(f) for f in entry["findings"][1:])
    entry = D.diagnose_group(GROUP, records(gpu1=None))
    assert codes(by_check(entry)["ray_membership"]) == [("MEMBER_NOT_DIAGNOSED", "gpu1")]


@pytest.mark.parametrize("change, words", [
    ({"port": "6379"}, "port"),
    ({"members": []}, "members"),
    ({"leader": "gpu9"}, "leader gpu9"),
    ({"nccl_interface": "../../etc"}, "nccl_interface"),
    ({"stages": [{"stage": 0, "member": "gpu1", "layers": [0]}]}, "stages[0].layers"),
])
def test_a_bad_group_record_names_the_field(change, words):
    doc = dict(copy.deepcopy(GROUP_JSON), **change)
    with pytest.raises(D.GroupRecordError) as info:
        D.parse_group_record(json.dumps(doc))
    assert words in str(info.value)


def test_a_record_without_the_plan_figures_counts_the_members_gpus():
    doc = dict(copy.deepcopy(GROUP_JSON), gpus_total=None, tp=None, pp=None, mtu=None, name="")
    group = D.parse_group_record(json.dumps(doc))
    assert group["gpus_total"] == 6 and group["name"] == "(unnamed)" and group["mtu"] is None


def test_the_filters():
    assert doctor_group_record("{not json")["group"] is None
    parsed = doctor_group_record(json.dumps(GROUP_JSON))
    assert parsed["error"] is None and parsed["group"]["leader"] == "gpu1"
    out = doctor_group(records(), parsed, "gpu1")
    assert out["entry"]["status"] == "healthy" and len(out["lines"]) == 4
    assert out["lines"][0].startswith("ray_membership: healthy: all 3 members")
    bad = doctor_group({}, doctor_group_record("[]"), "gpu2")
    assert bad["entry"]["status"] == "problem"
    assert codes(bad["entry"]["findings"][0]) == [("GROUP_RECORD_INVALID", "gpu2")]
    assert "Fix: run the rollout again for the group" in bad["lines"][0]
