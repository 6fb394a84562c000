# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gateway's backend list (plugins/module_utils/decisions/_gateway.py): from the plans, ready only after
the smoke test passed, refused and loopback-only instances left out with why."""

from __future__ import absolute_import, division, print_function

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.labfleet.vllm.plugins.filter.gateway_backends import gateway_backends
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _gateway as G


def verdict(allowed=True, instances=None, reasons=None, model="quasar"):
    return {"allowed": allowed, "reasons": reasons or [],
            "deployment": {"served_model_name": model},
            "instances": instances if instances is not None else [{"name": "vllm", "port": 8000}]}


def entry(host, **kwargs):
    base = {"host": host, "verdict": verdict(), "address": "10.0.0.%d" % (len(host) + 10)}
    base.update(kwargs)
    return base


def test_a_rolled_out_host_is_ready_at_the_address_its_server_was_published_on():
    server = {"instances": [{"name": "vllm", "port": 8000, "bind_address": "192.168.7.21"}]}
    view = G.plan_backends([entry("gpu01", rollout={"state": "ok", "batch": 1}, server=server)])
    assert view["backends"] == [{"name": "gpu01-vllm", "host": "gpu01", "instance": "vllm", "address": "192.168.7.21",
                                 "port": 8000, "model": "quasar", "state": "ready",
                                 "why": "the rollout's smoke test passed (batch 1)"}]
    assert view["models"] == {"quasar": {"backend": "model_quasar", "servers": ["gpu01-vllm"]}}
    assert view["left_out"] == []


@pytest.mark.parametrize("rollout,state,words", [
    ({"state": "failed", "step": "server", "msg": "rolled back to the previous unit"}, "out",
     "the rollout failed at step server: rolled back to the previous unit"),
    ({"state": "started", "step": "server"}, "out", "did not finish"),
    ({"state": "not_reached"}, "ready", "not reached by this rollout"),
    (None, "ready", "no rollout in this run"),
])
def test_readiness_follows_the_rollout(rollout, state, words):
    backend = G.plan_backends([entry("gpu01", rollout=rollout)])["backends"][0]
    assert backend["state"] == state and words in backend["why"], backend


def test_a_refused_host_and_a_host_without_a_plan_are_left_out_with_why():
    refused = entry("p100", verdict=verdict(False, reasons=[{"code": "COMPUTE_CAPABILITY_TOO_LOW", "message": "x"}]))
    view = G.plan_backends([refused, entry("new", verdict={}), entry("gpu01")])
    assert [b["host"] for b in view["backends"]] == ["gpu01"]
    assert view["left_out"] == [{"host": "p100", "why": "refused by the preflight (COMPUTE_CAPABILITY_TOO_LOW)"},
                                {"host": "new", "why": "no plan (run the preflight in the same run: site.yml does)"}]


def test_a_host_group_serves_through_its_leader_only_and_its_plan_decides():
    group = {"name": "big", "allowed": True, "leader": "gpu1"}
    refused_alone = verdict(False, reasons=[{"code": "INSUFFICIENT_VRAM", "message": "x"}])
    view = G.plan_backends([entry("gpu1", verdict=refused_alone, group=group, rollout={"state": "ok", "batch": 1}),
                            entry("gpu2", group=group, rollout={"state": "ok", "batch": 1}),
                            entry("solo")])
    assert [b["host"] for b in view["backends"]] == ["gpu1", "solo"]
    assert view["backends"][0]["state"] == "ready"
    why = "a member of host group big: it serves through the group's leader gpu1"
    assert view["left_out"] == [{"host": "gpu2", "why": why}]
    refused = G.plan_backends([entry("gpu1", group=dict(group, allowed=False))])
    assert refused["backends"] == [] and "which the preflight refused" in refused["left_out"][0]["why"]


def test_loopback_is_reachable_from_a_gateway_on_the_same_host_only():
    inst = [{"name": "vllm", "port": 8000, "bind_address": "127.0.0.1"}]
    view = G.plan_backends([entry("gpu01", verdict=verdict(instances=inst))], gateway_host="gw")
    assert view["backends"] == []
    assert "set vllm_server_bind_address to the host's private address" in view["left_out"][0]["why"]
    same = G.plan_backends([entry("gpu01", verdict=verdict(instances=inst))], gateway_host="gpu01")
    assert same["backends"][0]["address"] == "127.0.0.1"


def test_a_wildcard_bind_is_reached_at_the_hosts_address_and_the_role_default_counts():
    inst = [{"name": "vllm"}]
    view = G.plan_backends([entry("gpu01", verdict=verdict(instances=inst), bind_default="0.0.0.0", address="10.1.1.1")])
    assert (view["backends"][0]["address"], view["backends"][0]["port"]) == ("10.1.1.1", 8000)
    view = G.plan_backends([entry("gpu01", verdict=verdict(instances=inst), bind_default="127.0.0.1")], "gw")
    assert view["backends"] == [] and "loopback (127.0.0.1)" in view["left_out"][0]["why"]


def test_each_model_gets_its_backend_and_two_instances_of_a_host_are_two_servers():
    inst = [{"name": "vllm", "port": 8000, "served_model_name": "quasar"},
            {"name": "vllm-b", "port": 8001, "served_model_name": "quasar b"}]
    view = G.plan_backends([entry("gpu01", verdict=verdict(instances=inst)), entry("gpu02")])
    assert view["models"] == {"quasar": {"backend": "model_quasar", "servers": ["gpu01-vllm", "gpu02-vllm"]},
                              "quasar b": {"backend": "model_quasar_b", "servers": ["gpu01-vllm-b"]}}


@pytest.mark.parametrize("entries,words", [
    ("gpu01", "expected a list of host entries"),
    ([{"verdict": verdict()}], "no host name"),
    ([entry("gpu01", verdict=verdict(instances=[{"name": "vllm", "port": 70000}]))], "a port is 1 to 65535"),
    ([entry("gpu01", verdict=verdict(instances=[{"name": "vllm", "port": "http"}]))], "expected a port number"),
    ([entry("gpu01", verdict=verdict(instances=[{"name": "vllm", "port": True}]))], "expected a port number"),
    ([entry("gpu01", verdict="yes")], "gpu01: verdict: expected a mapping"),
    ([entry("a-b", verdict=verdict(instances=[{"name": "c"}])), entry("a", verdict=verdict(instances=[{"name": "b-c"}]))],
     "same HAProxy server name a-b-c"),
])
def test_inputs_it_cannot_use_are_refused_with_what_to_give(entries, words):
    with pytest.raises(G.GatewayInputError, match=words):
        G.plan_backends(entries)
    with pytest.raises(AnsibleFilterError, match="labfleet.vllm.gateway_backends: .*" + words):
        gateway_backends(entries)


def test_a_host_whose_address_is_unknown_is_left_out_with_why():
    view = G.plan_backends([entry("gpu01", address=None, bind_default="", rollout={"state": "not_reached"})])
    assert view["backends"] == []
    assert view["left_out"] == [{"host": "gpu01", "instance": "vllm", "why": (
        "its address is unknown: the rollout did not record one in this run and its network facts could not be "
        "read (is it down or unreachable?)")}]


def test_names_are_safe_for_haproxy():
    assert G.server_name("gpu 01", "vllm/x") == "gpu_01-vllm_x"
    assert G.backend_name("org/Model:7b") == "model_org_Model_7b"
