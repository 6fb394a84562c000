# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The group_gate module: plan_group (decisions/_group.py, tested in test_group_plan.py) through
Ansible's argument handling: the plan comes back as ``group``, a refusal is not a failure, check
mode gives the same plan, malformed input fails naming the field."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib.util
import os

import yaml

from ansible_collections.labfleet.vllm.plugins.modules import group_gate

_HERE = os.path.dirname(os.path.abspath(__file__))


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# run_module (exit_json/fail_json caught) and the group plan's fixtures, loaded by path.
H = _load("labfleet_test_hostile_modules_for_group", os.path.join(_HERE, "test_hostile_modules.py"))
G = _load("labfleet_test_group_plan_for_module", os.path.join(_HERE, "..", "module_utils", "test_group_plan.py"))


def reference(**changes):
    members = [G.member(n) for n in (1, 2, 3)]
    args = {"members": members, "model": G.LLAMA_70B_NVFP4, "vllm": dict(G.ARGS, pipeline_parallel_size=3),
            "network": {"nccl_interface": "ens1f0", "pairs": G.pairs([m["name"] for m in members])}}
    args.update(changes)
    return args


def test_the_reference_group_through_the_module():
    kind, result = H.run_module(group_gate, reference())
    assert kind == "exit" and result["changed"] is False
    group = result["group"]
    assert group["allowed"] is True, group["reasons"]
    assert [s["layers"] for s in group["stages"]] == [[0, 26], [27, 53], [54, 79]]
    assert group["kv_tokens"] == 44885
    assert group["choice"]["chosen"] == "group"
    assert group["vllm_args"]["distributed_executor_backend"] == "ray"
    assert set(result) == {"changed", "group"}


def test_check_mode_gives_the_same_plan():
    normal = H.run_module(group_gate, reference())[1]
    kind, checked = H.run_module(group_gate, dict(reference(), _ansible_check_mode=True))
    assert kind == "exit" and checked["group"] == normal["group"]


def test_a_refusal_is_not_a_failure_and_names_the_member():
    refused = {"allowed": False, "reasons": [{"code": "IMAGE_LACKS_ARCH", "message": "no sm_70"}]}
    members = [G.member(1), G.member(2), G.member(3, verdict=refused)]
    kind, result = H.run_module(group_gate, reference(members=members, leader="gpu2"))
    assert kind == "exit"
    group = result["group"]
    assert group["allowed"] is False and group["leader"] == "gpu2"
    assert [(r["code"], r["member"]) for r in group["reasons"]] == [("GROUP_MEMBER_REFUSED", "gpu3")]


def test_malformed_input_fails_naming_the_field():
    kind, result = H.run_module(group_gate, reference(members=[G.member(1)]))
    assert kind == "fail" and "members: expected a list of at least two hosts" in result["msg"]
    kind, result = H.run_module(group_gate, reference(vllm={"max_model_len": "many"}))
    assert kind == "fail" and "vllm.max_model_len" in result["msg"]


def test_the_documentation_is_yaml_and_lists_every_code():
    doc = yaml.safe_load(group_gate.DOCUMENTATION)
    assert set(doc["options"]) == {"members", "model", "vllm", "network", "leader", "policy"}
    text = " ".join(doc["description"])
    for code in list(G.G.GROUP_REASON_CODES) + list(G.G.GROUP_WARNING_CODES):
        assert "V(%s)" % code in text, code
    yaml.safe_load(group_gate.EXAMPLES)
    assert "group" in yaml.safe_load(group_gate.RETURN)
