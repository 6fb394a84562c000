# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet report's host groups (issue 27): the section ``groups`` in JSON, a few lines in
Markdown and HTML, from the fact labfleet_group_verdict the preflight's group play leaves on every
member (here the reference 70B across three 2x V100 hosts, scripts/plan-group.py --reference)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import importlib.util
import os
import sys

from ansible_collections.labfleet.vllm.plugins.filter.fleet_report import fleet_report
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._group import plan_group
from ansible_collections.labfleet.vllm.plugins.module_utils.reporting._report import group_section

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_fleet_report import SAMPLE, TOP, render  # noqa: E402  (the templates, rendered as Ansible renders them)


def _reference_group():
    spec = importlib.util.spec_from_file_location("plan_group_script", os.path.join(TOP, "scripts", "plan-group.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    inputs = module.reference_inputs()
    plan = plan_group(inputs["members"], inputs["model"], inputs["vllm"], network=inputs["network"])
    return dict(plan, name="vllm_group_70b")


def _records(plan):
    records = copy.deepcopy(SAMPLE["records"])
    for record in records[:3]:
        record["group"] = plan
    return records


def test_the_groups_section_holds_each_group_once():
    plan = _reference_group()
    section = group_section(_records(plan))
    assert len(section) == 1
    group = section[0]
    assert group["name"] == "vllm_group_70b" and group["allowed"] is True
    assert group["members"] == ["gpu1", "gpu2", "gpu3"] and group["leader"] == "gpu1"
    assert (group["pp"], group["tp"], group["kv_tokens"]) == (3, 2, plan["kv_tokens"])
    assert [(s["member"], s["layers"], s["layer_count"]) for s in group["stages"]] == [
        ("gpu1", [0, 26], 27), ("gpu2", [27, 53], 27), ("gpu3", [54, 79], 26)]
    assert group["choice"]["chosen"] == "group" and group["choice"]["serving_path"] == "fp16_fallback"
    assert group["reasons"] == [] and group["warnings"] == []


def test_no_group_no_section():
    doc = fleet_report(copy.deepcopy(SAMPLE["records"]), SAMPLE["mode"])
    assert "groups" not in doc
    assert "Host groups" not in render("fleet-report.md.j2", doc)
    assert "Host groups" not in render("fleet-report.html.j2", doc)


def test_markdown_and_html_show_the_group():
    plan = _reference_group()
    doc = fleet_report(_records(plan), SAMPLE["mode"])
    assert [g["name"] for g in doc["groups"]] == ["vllm_group_70b"]
    markdown = render("fleet-report.md.j2", doc)
    assert "### vllm_group_70b: allowed" in markdown
    assert "- members gpu1, gpu2, gpu3, leader gpu1; PP 3 x TP 2; KV cache for %d tokens" % plan["kv_tokens"] in markdown
    assert "- stage 0 on gpu1: layers 0-26 (27)," in markdown
    assert "- stage 2 on gpu3: layers 54-79 (26)," in markdown
    assert "- serving path: fp16_fallback (group): the FP16 form across the group is lossless" in markdown
    html = render("fleet-report.html.j2", doc)
    assert '<h2 id="groups">Host groups</h2>' in html and "<h3>vllm_group_70b: allowed</h3>" in html
    assert "<li>stage 1 on gpu2: layers 27-53 (27)," in html
    # What each member stages as its share: the FP16 copy (its own plan alone would take the GPTQ repack).
    assert "tokens; stages fp16_fallback at /srv/models/llama-70b-nvfp4-fp16\n" in markdown
    assert "; stages fp16_fallback at <code>/srv/models/llama-70b-nvfp4-fp16</code></li>" in html
    assert [s["serving_path"] for s in doc["groups"][0]["stages"]] == ["fp16_fallback"] * 3


def test_a_refused_group_names_its_reasons():
    plan = _reference_group()
    plan.update(allowed=False, reasons=[{"code": "GROUP_MTU_MISMATCH", "member": None, "message": "<b>mtu</b>"}],
                warnings=[{"code": "GROUP_REACHABILITY_UNKNOWN"}, {"code": "GROUP_REACHABILITY_UNKNOWN"}])
    doc = fleet_report(_records(plan), SAMPLE["mode"])
    markdown = render("fleet-report.md.j2", doc)
    assert "### vllm_group_70b: refused" in markdown
    assert "- reason GROUP_MTU_MISMATCH: &lt;b&gt;mtu&lt;/b&gt;" in markdown
    assert "- warnings: GROUP_REACHABILITY_UNKNOWN\n" in markdown
    html = render("fleet-report.html.j2", doc)
    assert "<li>reason GROUP_MTU_MISMATCH: &lt;b&gt;mtu&lt;/b&gt;</li>" in html


def test_the_groups_rollout_is_one_state_from_its_members():
    plan = _reference_group()
    records = _records(plan)
    for record, name in zip(records[:3], ("gpu1", "gpu2", "gpu3")):
        record["host"] = name
        record["rollout"] = {"state": "ok", "step": "", "msg": "", "batch": 1}
    assert group_section(records)[0]["rollout"]["state"] == "ok"
    records[2]["rollout"] = {"state": "failed", "step": "ray", "msg": "Unable to start service labfleet-ray", "batch": 1}
    records[0]["rollout"] = {"state": "failed", "step": "ray", "msg": "host group vllm_group_70b failed", "batch": 1}
    group = group_section(records)[0]
    assert group["rollout"]["state"] == "failed"
    assert [(m["member"], m["state"], m["step"]) for m in group["rollout"]["members"]] == [
        ("gpu1", "failed", "ray"), ("gpu2", "ok", None), ("gpu3", "failed", "ray")]
    doc = fleet_report(records, SAMPLE["mode"])
    markdown = render("fleet-report.md.j2", doc)
    assert "- rollout: failed; gpu1 failed at step ray: host group vllm_group_70b failed; gpu3 failed at step ray: " \
        "Unable to start service labfleet-ray" in markdown
    assert "<li>rollout: failed; gpu1 failed at step ray" in render("fleet-report.html.j2", doc)
    del records[0]["rollout"], records[1]["rollout"], records[2]["rollout"]
    assert group_section(records)[0]["rollout"] == {"state": None, "members": []}


def test_a_ray_worker_of_a_rolled_out_group_is_deployed_or_serving_not_unknown():
    from ansible_collections.labfleet.vllm.plugins.module_utils.reporting._report import host_entry
    plan = dict(_reference_group(), name="vllm_group_70b")
    allowed = {"plan": {"allowed": True, "reasons": [], "warnings": []}, "nvidia": {}, "host": {}}
    worker = {"host": "gpu2", "reachable": True, "preflight": allowed, "group": plan,
              "rollout": {"state": "ok", "step": "", "msg": "", "batch": 1, "changed": True}}
    entry = host_entry(worker)
    assert entry["outcome"] == "deployed", entry["outcome_detail"]
    assert "A Ray worker of host group vllm_group_70b (stage 1), (re)started by this run" in entry["outcome_detail"]
    assert "through its leader gpu1" in entry["outcome_detail"]
    worker["rollout"]["changed"] = False
    assert host_entry(worker)["outcome"] == "serving"
    # Refused alone only for the memory its allowed group plans: judged by the group's rollout, not "refused".
    alone = {"plan": {"allowed": False, "reasons": [{"code": "INSUFFICIENT_VRAM", "message": "x"}], "warnings": []},
             "nvidia": {}, "host": {}}
    assert host_entry(dict(worker, preflight=alone))["outcome"] == "serving"
    # Before the group's rollout (or with the group refused) it stays refused.
    assert host_entry(dict(worker, preflight=alone, rollout=None))["outcome"] == "refused"
    assert host_entry(dict(worker, preflight=alone, group=dict(plan, allowed=False)))["outcome"] == "refused"
    # A failed group rollout is the member's failure.
    failed = dict(worker, rollout={"state": "failed", "step": "ray", "msg": "host group vllm_group_70b failed"})
    assert host_entry(failed)["outcome"] == "failed"
