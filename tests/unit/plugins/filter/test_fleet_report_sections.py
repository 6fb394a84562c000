# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet report's doctor and benchmark sections (playbooks/doctor.yml, playbooks/benchmark.yml):
built from the records, merged host by host into the report already on disk (the last rollout's
outcomes kept), and rendered in Markdown and HTML with every host value escaped."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import sys

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.labfleet.vllm.plugins.filter.fleet_report import fleet_report
from ansible_collections.labfleet.vllm.plugins.module_utils.reporting import _doctor as D
from ansible_collections.labfleet.vllm.plugins.module_utils.reporting import _report as R

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "module_utils"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "modules"))
import test_benchmark_chart as TB  # noqa: E402  (benchmark documents)
import test_doctor as TD  # noqa: E402  (the reference host and the broken-runtime host)
import test_fleet_report as TF  # noqa: E402  (the templates, rendered as Ansible renders them)

PRE = {"verdict": "allowed", "state": "ok", "reasons": [], "warnings": [], "probe_only": False}


def healthy_doctor():
    plan_verdict = TD.verdict(TD.LLAMA_8B, TD.REFERENCE_ARGS)
    result = D.diagnose(TD.NVIDIA, TD.HOST, TD.IMAGE_085, plan_verdict, TD.healthy_raw(plan_verdict),
                        gate_inputs=TD.gate_inputs(TD.LLAMA_8B))
    return {"status": result["status"], "instances": [result]}


def broken_doctor():
    host = {"cpu": TD.XEON_V4, "disk": {}, "container": TD.CONTAINER_BROKEN}
    result = D.diagnose(TD.NO_GPU, host, None, None, {"daemon_json": TD.BROKEN_DAEMON_JSON, "dev_nodes": []})
    return {"status": result["status"], "instances": [result]}


def benchmark(host_note="", chart="benchmarks/gpu01.png"):
    now = TB.document(1.1, "2026-12-01T11:00:00Z")
    comparison = {"compared": True, "message": "compared 21 figures: 3 better, 0 worse, 18 unchanged (within 5 %)",
                  "differences": [{"field": "flags", "detail": "--max-num-seqs 32 -> 64" + host_note}],
                  "rows": [{"concurrency": 32, "metric": "aggregate_tok_s", "stat": "level", "baseline": 850.0,
                            "now": 935.0, "change_pct": 10.0, "better": "higher", "verdict": "better"}]}
    return {"chart": chart, "error": None,
            "instances": [{"name": "vllm", "url": "http://127.0.0.1:8000", "status": "measured", "msg": "",
                           "benchmark": now, "comparison": comparison, "summary": ["concurrency 1 ..."],
                           "baseline": {"status": "kept", "measured_at": "2026-12-01T10:00:00Z"}},
                          {"name": "vllm-b", "url": None, "status": "failed", "benchmark": None, "comparison": None,
                           "msg": "the container vllm-b is not running", "summary": [], "baseline": None}]}


def records(**extra):
    out = []
    for host in ("gpu01", "gpu02"):
        record = {"host": host, "reachable": True, "preflight": PRE}
        record.update(extra.get(host, {}))
        out.append(record)
    return out


def test_sections_are_built_from_the_records_that_carry_them():
    doc = fleet_report(records(gpu01={"doctor": healthy_doctor(), "benchmark": benchmark()},
                               gpu02={"doctor": broken_doctor()}), "preflight")
    assert [h["host"] for h in doc["doctor"]["hosts"]] == ["gpu01", "gpu02"]
    assert doc["doctor"]["summary"] == {"hosts": 2, "by_status": {"healthy": 1, "problem": 1}, "problem": ["gpu02"]}
    assert doc["benchmark"]["summary"] == {"hosts": 1, "instances": 2}
    assert "doctor" not in fleet_report(records(), "preflight")


def test_a_later_run_merges_its_section_host_by_host_and_keeps_the_rollouts_outcomes():
    rollout = fleet_report([dict(r, server={"status": "deployed", "instances": []}) for r in records()], "rollout")
    assert rollout["summary"]["by_outcome"] == {"deployed": 2}
    first = fleet_report(records(gpu01={"doctor": broken_doctor()}, gpu02={"doctor": broken_doctor()}), "preflight",
                         previous=json.dumps(rollout))
    assert first["summary"]["by_outcome"] == {"deployed": 2} and first["mode"] == "rollout"
    assert first["doctor"]["summary"]["problem"] == ["gpu01", "gpu02"]
    # A run limited to gpu01 replaces gpu01's entry only.
    second = fleet_report([records(gpu01={"doctor": healthy_doctor()})[0]], "preflight", previous=first)
    assert [(h["host"], h["status"]) for h in second["doctor"]["hosts"]] == [("gpu01", "healthy"), ("gpu02", "problem")]
    assert second["hosts"] == rollout["hosts"] and "benchmark" not in second
    third = fleet_report(records(gpu02={"benchmark": benchmark()}), "preflight", previous=second)
    assert third["doctor"] == second["doctor"] and [h["host"] for h in third["benchmark"]["hosts"]] == ["gpu02"]


@pytest.mark.parametrize("previous, note", [
    ("{not json", "is not JSON"),
    (json.dumps({"report_format": 1, "hosts": []}), "is not a report_format 2 document"),
    ([1, 2], "is not a report_format 2 document"),
])
def test_a_report_on_disk_that_is_not_one_is_replaced_and_says_so(previous, note):
    doc = fleet_report(records(gpu01={"doctor": healthy_doctor()}), "preflight", previous=previous)
    assert note in doc["previous_report"] and doc["mode"] == "preflight" and doc["doctor"]["hosts"][0]["host"] == "gpu01"


def test_merge_needs_a_fresh_document():
    with pytest.raises(ValueError):
        R.merge_report({}, None)
    with pytest.raises(AnsibleFilterError, match="mode must be one of"):
        fleet_report([], "doctor", previous={})


def test_markdown_doctor_section_has_each_check_with_its_fix():
    doc = fleet_report(records(gpu01={"doctor": healthy_doctor()}, gpu02={"doctor": broken_doctor()}), "preflight")
    text = TF.render("fleet-report.md.j2", doc)
    section = text[text.index("## Doctor"):]
    assert "2 host(s) diagnosed (healthy: 1, problem: 1)" in section
    assert "### gpu01: healthy" in section and "### gpu02: problem" in section
    broken = section[section.index("### gpu02"):]
    assert "| gpu_in_container | **problem** | /etc/docker/daemon.json is not valid JSON" in broken
    assert "1) repair /etc/docker/daemon.json" in broken
    assert "| tensor_parallel_pcie | healthy | Tensor parallelism 2 all-reduces over PCIe" in section
    # One table row per check and host, each with four cells.
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| check")]
    assert len(rows) == 2 * len(D.CHECKS)


def test_markdown_benchmark_section_links_the_chart_and_shows_the_change():
    doc = fleet_report(records(gpu01={"benchmark": benchmark()}), "preflight")
    text = TF.render("fleet-report.md.j2", doc)
    section = text[text.index("## Benchmark"):]
    assert "![benchmark of gpu01: TTFT and throughput vs concurrency, baseline vs now](benchmarks/gpu01.png)" in section
    assert ("- roofline: at batch 1 decoding cannot beat 112.1 tokens/s (900 GB/s of the GPU / 8030000000 weight bytes "
            "per GPU); measured 52.8 tokens/s, 47.1 % of it") in section
    assert "- A/B: compared 21 figures: 3 better, 0 worse, 18 unchanged (within 5 %); flags: --max-num-seqs 32 -&gt; 64" \
        in section
    assert "| 32 | 863.6 / 1122.7 | 20.0 / 25.0 | 33.0 | 935.0 | +10.0 % (better) |" in section
    assert "| 1 | 109.1 / 141.8 | 20.0 / 25.0 | 52.8 | 51.7 | - |" in section
    failed = section[section.index("- vllm-b"):]
    assert failed.strip() == "- vllm-b: failed: the container vllm-b is not running"


def test_html_sections_escape_host_values_and_link_the_chart_relatively():
    evil = "<script>alert(1)</script>"
    doc = fleet_report(records(gpu01={"doctor": broken_doctor(), "benchmark": benchmark(host_note=evil)}), "preflight")
    html = TF.render("fleet-report.html.j2", doc)
    assert '<h2 id="doctor">Doctor</h2>' in html and '<h2 id="benchmark">Benchmark</h2>' in html
    assert "<script" not in html and "&lt;script&gt;" in html
    assert '<img src="benchmarks/gpu01.png"' in html and "http://" not in html.replace("http://127.0.0.1:8000", "")
    assert '<tr class="d-problem"><td>gpu_in_container</td><td><strong>problem</strong></td>' in html
    assert "<td>32</td><td>863.6 / 1122.7</td>" in html and "+10.0 % (better)" in html
    # A chart name from a host is URL-encoded and escaped: no way out of the attribute.
    odd = fleet_report(records(gpu01={"benchmark": benchmark(chart='b/"x y.png')}), "preflight")
    assert '<img src="b/%22x%20y.png"' in TF.render("fleet-report.html.j2", odd)


def test_the_gpu_metrics_exporter_is_shown_and_listed_as_a_target():
    exporter = {"enabled": True, "status": "running", "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04",
                "image_id": "sha256:1", "bind_address": "10.0.0.5", "port": 9400, "metrics": 40}
    server = {"status": "deployed", "image_digest": "sha256:abc", "instances": []}
    doc = fleet_report([dict(records()[0], server=server, exporter=exporter)], "rollout")
    markdown = TF.render("fleet-report.md.j2", doc)
    assert ("- GPU metrics exporter: running (nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04), /metrics on "
            "10.0.0.5:9400") in markdown
    assert "- gpu01 / dcgm-exporter: 10.0.0.5:9400" in markdown
    assert "<li>GPU metrics exporter: running" in TF.render("fleet-report.html.j2", doc)
