# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Prometheus scrape targets from the fleet report (plugins/module_utils/reporting/_metrics.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.reporting import _metrics as M
from ansible_collections.labfleet.vllm.plugins.module_utils.reporting import _report as R

ALLOWED = {"host": "gpu01", "verdict": "allowed", "state": "ok", "reasons": [], "warnings": [],
           "gpu_count": 2, "probe_only": False}


def instance(name="vllm", port=8000, bind="10.0.0.5", status="deployed"):
    return {"name": name, "port": port, "bind_address": bind, "status": status,
            "argv": ["--tensor-parallel-size", "2"], "health_s": 1.0, "ttft_s": 0.1,
            "completion_tokens": 8, "latency_s": 0.5}


def server(*instances, status="deployed"):
    return {"status": status, "image": "vllm/vllm-openai:v0.8.5", "image_digest": "sha256:abc",
            "model_path": "/srv/models/m", "instances": list(instances)}


def record(host="gpu01", srv=None, address=None, preflight=None):
    rec = {"host": host, "reachable": True, "preflight": dict(preflight or ALLOWED, host=host),
           "server": srv, "driver": None, "runtime": None, "rollout": None}
    if address:
        rec["address"] = address
    return rec


def targets(records):
    doc = R.build_report(records, "rollout")
    return doc["scrape_targets"]


def test_published_instance_is_a_target_with_labels():
    st = targets([record(srv=server(instance()))])
    assert st["file_sd"] == [{"targets": ["10.0.0.5:8000"],
                              "labels": {"labfleet_host": "gpu01", "labfleet_instance": "vllm",
                                         "labfleet_image_digest": "sha256:abc"}}]
    assert st["skipped"] == []
    # What Prometheus reads: a JSON list of groups with string targets and string labels.
    parsed = json.loads(json.dumps(st["file_sd"]))
    assert all(isinstance(t, str) for g in parsed for t in g["targets"])
    assert all(isinstance(v, str) for g in parsed for v in g["labels"].values())


def test_loopback_instance_is_skipped_with_the_fix():
    st = targets([record(srv=server(instance(bind="127.0.0.1")))])
    assert st["file_sd"] == []
    assert len(st["skipped"]) == 1
    skip = st["skipped"][0]
    assert (skip["host"], skip["instance"]) == ("gpu01", "vllm")
    assert "127.0.0.1 only" in skip["reason"]
    assert "vllm_server_expose: true" in skip["fix"] and "127.0.0.1:8000" in skip["fix"]


@pytest.mark.parametrize("bind", ["::1", "[::1]", "127.0.0.53", "localhost"])
def test_every_loopback_form_is_skipped(bind):
    assert M.is_loopback(bind)
    assert targets([record(srv=server(instance(bind=bind)))])["file_sd"] == []


def test_any_address_uses_the_hosts_ansible_host():
    st = targets([record(srv=server(instance(bind="0.0.0.0")), address="gpu01.lab.example")])
    assert st["file_sd"][0]["targets"] == ["gpu01.lab.example:8000"]
    # Without an address the inventory name stands in.
    st = targets([record(srv=server(instance(bind="0.0.0.0")))])
    assert st["file_sd"][0]["targets"] == ["gpu01:8000"]


def test_ipv6_address_in_brackets():
    st = targets([record(srv=server(instance(bind="fd00::5")))])
    assert st["file_sd"][0]["targets"] == ["[fd00::5]:8000"]


def test_two_instances_two_groups_unchanged_counts_as_serving():
    srv = server(instance(), instance(name="vllm-b", port=8001, status="unchanged"), status="unchanged")
    st = targets([record(srv=srv)])
    assert [g["targets"] for g in st["file_sd"]] == [["10.0.0.5:8000"], ["10.0.0.5:8001"]]
    assert [g["labels"]["labfleet_instance"] for g in st["file_sd"]] == ["vllm", "vllm-b"]


def test_refused_rolled_back_and_failed_hosts_are_not_targets():
    refused = dict(ALLOWED, verdict="refused", reasons=[{"code": "NO_GPU", "message": "no GPU"}])
    rolled = server(instance(), status="rolled_back")
    recs = [record("a", srv=server(instance()), preflight=refused), record("b", srv=rolled),
            record("c", srv=server(instance(status="failed"), status="failed"))]
    st = targets(recs)
    assert st == {"file_sd": [], "skipped": []}


def test_record_without_bind_address_or_port_is_skipped_not_guessed():
    old = instance()
    del old["bind_address"]
    st = targets([record(srv=server(old))])
    assert st["file_sd"] == [] and "was not recorded" in st["skipped"][0]["reason"]
    for port in (None, 0, 70000, "x", True):
        st = targets([record(srv=server(instance(port=port)))])
        assert st["file_sd"] == [], port
        assert "no valid port" in st["skipped"][0]["reason"], port


def test_hosts_in_report_order():
    recs = [record("gpu02", srv=server(instance(bind="10.0.0.6"))), record("gpu01", srv=server(instance()))]
    st = targets(recs)
    assert [g["labels"]["labfleet_host"] for g in st["file_sd"]] == ["gpu01", "gpu02"]


def test_direct_call_tolerates_garbage():
    assert M.scrape_targets(None) == {"file_sd": [], "skipped": []}
    assert M.scrape_targets([None, "x", {"outcome": "deployed", "serving": "nope"}]) == {"file_sd": [], "skipped": []}


def test_a_specific_address_wins_over_the_hosts_ansible_host():
    st = targets([record(srv=server(instance(bind="10.0.0.5")), address="gpu01.lab.example")])
    assert st["file_sd"][0]["targets"] == ["10.0.0.5:8000"]


def exporter_record(exporter, srv=None):
    rec = record(srv=srv or server(instance()), address="gpu01.lab.example")
    rec["exporter"] = exporter
    return rec


def test_a_running_dcgm_exporter_is_a_target_of_its_own():
    running = {"enabled": True, "status": "running", "bind_address": "0.0.0.0", "port": 9400,
               "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04"}
    st = targets([exporter_record(running)])
    assert st["file_sd"][1] == {"targets": ["gpu01.lab.example:9400"],
                                "labels": {"labfleet_host": "gpu01", "labfleet_instance": "dcgm-exporter",
                                           "labfleet_exporter": "dcgm"}}
    # On loopback (the role's default) it is skipped with the fix that names the role's variables.
    st = targets([exporter_record(dict(running, bind_address="127.0.0.1"))])
    assert [g["labels"]["labfleet_instance"] for g in st["file_sd"]] == ["vllm"]
    assert st["skipped"][0]["instance"] == "dcgm-exporter"
    assert "dcgm_exporter_bind_address with dcgm_exporter_expose: true" in st["skipped"][0]["fix"]
    assert "target 127.0.0.1:9400" in st["skipped"][0]["fix"]


@pytest.mark.parametrize("exporter", [
    {"enabled": False, "status": "disabled"},
    {"enabled": True, "status": "check_mode", "bind_address": "0.0.0.0", "port": 9400},
    None,
    "running",
])
def test_an_exporter_that_does_not_run_is_no_target(exporter):
    st = targets([exporter_record(exporter)])
    assert [g["labels"]["labfleet_instance"] for g in st["file_sd"]] == ["vllm"] and st["skipped"] == []
