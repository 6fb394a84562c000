# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet_report filter and the role's Markdown and HTML templates, rendered from a 6-host sample.

The templates are rendered with plain Jinja2 set up as Ansible's template module does (trim_blocks,
no autoescape: Ansible ignores an autoescape block, so the HTML template must escape every value
itself, which is what these tests check).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re

import jinja2
import pytest

from ansible.errors import AnsibleFilterError
from ansible.plugins.filter.core import comment

from ansible_collections.labfleet.vllm.plugins.filter.fleet_report import FilterModule, fleet_report
from ansible_collections.labfleet.vllm.plugins.module_utils.reporting._report import OUTCOME_NAMES

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
TEMPLATES = os.path.join(TOP, "roles", "fleet_report", "templates")
with open(os.path.join(HERE, "fixtures", "six_hosts.json"), encoding="utf-8") as _handle:
    SAMPLE = json.load(_handle)


def render(name, doc):
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), trim_blocks=True,
                             undefined=jinja2.StrictUndefined, autoescape=False)
    env.filters["comment"] = comment
    return env.get_template(name).render(__fleet_report_doc=doc, ansible_managed="Ansible managed")


@pytest.fixture(scope="module")
def doc():
    return FilterModule().filters()["fleet_report"](SAMPLE["records"], SAMPLE["mode"])


@pytest.fixture(scope="module")
def html(doc):
    return render("fleet-report.html.j2", doc)


@pytest.fixture(scope="module")
def markdown(doc):
    return render("fleet-report.md.j2", doc)


def test_the_filter_gives_each_sample_host_its_outcome(doc):
    assert {e["host"]: e["outcome"] for e in doc["hosts"]} == SAMPLE["expected"]
    assert doc["summary"]["by_outcome"] == {o: 1 for o in SAMPLE["expected"].values()}
    gpu02 = [e for e in doc["hosts"] if e["host"] == "gpu02"][0]
    assert [i["tokens_per_s"] for i in gpu02["serving"]["instances"]] == [10.0, None]


def test_the_filter_rejects_an_unknown_mode():
    with pytest.raises(AnsibleFilterError, match="mode must be one of rollout, preflight"):
        fleet_report([], "deploy")


# ---- HTML ----------------------------------------------------------------------------------------

def test_html_is_self_contained(html):
    assert html.startswith("<!DOCTYPE html>")
    for needle in ("http://", "https://", "src=", "<script", "<link", "<img", "@import", "url(", "<iframe"):
        assert needle not in html.lower(), needle
    assert not re.search(r"<[^>]*\son\w+=", html), "an event handler attribute"


def test_html_has_the_managed_comment(html):
    assert re.search(r"<!--\s*-?\s*-\s*Ansible managed", html)


def test_html_colours_every_outcome_and_has_a_legend(html):
    for outcome in OUTCOME_NAMES:
        assert re.search(r"\.o-%s \{ background: #[0-9a-f]{6}" % outcome, html), outcome
        assert '<span class="swatch o-%s">%s</span>' % (outcome, outcome) in html
    colours = re.findall(r"\.o-\w+ \{ background: (#[0-9a-f]{6})", html)
    assert len(colours) == len(set(colours)) == len(OUTCOME_NAMES)
    for host, outcome in SAMPLE["expected"].items():
        assert re.search(r'<tr class="o-%s">\s*<td><a href="#host-\d+">%s</a>' % (outcome, host), html)


def test_html_counts_per_outcome_in_the_header(html):
    for outcome in SAMPLE["expected"].values():
        assert '<span class="o-%s">%s: 1</span>' % (outcome, outcome) in html


def test_html_escapes_host_data(html):
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in html
    assert "&lt;img onerror=alert(1)&gt;" in html
    assert "&lt;soon&gt;" in html


def test_html_spells_out_reasons_and_the_rollback(html):
    assert "<li>reason <code>COMPUTE_CAPABILITY_TOO_LOW</code>: compute capability 6.0 &lt; 7.0" in html
    assert "<summary>Rolled back at the server step, instance vllm, task smoke test</summary>" in html
    pre = re.search(r"<pre>(.*?)</pre>", html, re.S).group(1)
    assert pre.splitlines()[0] == "Jan 01 vllm[1]: INFO starting"
    assert len(pre.splitlines()) == 3
    assert "--tensor-parallel-size 2 --dtype float16 --enforce-eager" in html


# ---- Markdown ------------------------------------------------------------------------------------

def _rows(markdown):
    return [line for line in markdown.splitlines() if line.startswith("| ") and not line.startswith("| host |")]


def test_markdown_table_has_one_row_per_host_with_the_same_columns(markdown):
    rows = _rows(markdown)
    assert len(rows) == 6
    for row in rows:
        assert len(re.findall(r"(?<!\\)\|", row)) == 12, row
    for host, outcome in SAMPLE["expected"].items():
        verdict = "refused" if outcome == "refused" else "allowed"
        assert re.search(r"(?m)^\| %s \| %s \| ok \| \*\*%s\*\* \|" % (host, verdict, outcome), markdown)


def test_markdown_escapes_pipes_and_html_outside_code_blocks(markdown):
    assert "a\\|b" in markdown
    for line in markdown.splitlines():
        if not line.startswith("    "):
            assert "<script" not in line and "<img" not in line, line
    assert "&lt;script&gt;" in markdown
    assert "\\[link\\](javascript:alert(1))" in markdown


def test_markdown_details(markdown):
    assert "- reason `COMPUTE_CAPABILITY_TOO_LOW`: compute capability 6.0 &lt; 7.0 | " in markdown
    assert "- warning `DRIVER_BRANCH_EOL`: R550 is end of life | upgrade to R580 &lt;soon&gt;" in markdown
    assert "- plan: keep driver 550.54.14; deploy vllm" in markdown
    # the journal tail is an indented code block after a blank line, verbatim
    assert "\n\n    Jan 01 vllm[1]: INFO starting\n    Jan 01 vllm[1]: ERROR <script>" in markdown
    assert "| sha256:1111 | --tensor-parallel-size 2 --dtype float16 --enforce-eager | 0.31 | 8.0 |" in markdown
    assert "vllm-a: 0.2; vllm-b: ?" in markdown
    assert markdown.startswith("<!--")
    assert "\n# Fleet report\n" in markdown


def test_preflight_only_report_renders():
    records = [dict(r, server=None, rollout=None, driver=None, runtime=None) for r in SAMPLE["records"]]
    doc = fleet_report(records, "preflight")
    md = render("fleet-report.md.j2", doc)
    html = render("fleet-report.html.j2", doc)
    # gpu06 left the play, but a preflight-only run rolled nothing out: it is planned, as the others
    assert doc["summary"]["by_outcome"] == {"planned": 5, "refused": 1}
    assert "(preflight run)" in md
    assert '<tr class="o-planned">' in html


def test_the_serving_path_and_the_fp16_copy_are_shown():
    why = ("NVFP4 cannot be served natively here (QUANTIZATION_UNSUPPORTED_ON_ARCH); vllm_server "
           "dequantizes the checkpoint once")
    preflight = {"verdict": "allowed", "state": "ok", "reasons": [], "warnings": [], "probe_only": False,
                 "serving_path": "fp16_fallback", "serving_why": why}
    copy = {"source": "/srv/models/m", "path": "/srv/models/m-fp16", "changed": False, "layout": "modelopt",
            "output_bytes": 3410432}
    server = {"status": "unchanged", "image": "vllm/vllm-openai:v0.8.5", "image_digest": "sha256:1",
              "model_path": "/srv/models/m", "serving_path": "fp16_fallback", "served_model_path": "/srv/models/m-fp16",
              "fp16_copy": copy, "instances": []}
    refused = {"verdict": "refused", "state": "ok", "probe_only": False, "serving_path": None,
               "serving_why": "NVFP4 cannot be served natively here, and the FP16 fallback is refused too",
               "reasons": [{"code": "INSUFFICIENT_VRAM", "message": "141.1 GB"}], "warnings": []}
    records = [{"host": "gpu01", "reachable": True, "preflight": preflight, "server": server},
               {"host": "gpu02", "reachable": True, "preflight": refused}]
    doc = fleet_report(records, "rollout")
    markdown = render("fleet-report.md.j2", doc)
    assert "- serving path: fp16_fallback: " + why in markdown
    assert ("- FP16 copy served: /srv/models/m-fp16 of the NVFP4 checkpoint /srv/models/m (kept from an earlier "
            "run, modelopt layout, 3410432 bytes)") in markdown
    assert "- serving path: refused: NVFP4 cannot be served natively here, and the FP16 fallback" in markdown
    html = render("fleet-report.html.j2", doc)
    assert "<li>serving path: fp16_fallback: " in html
    assert "<li>FP16 copy served: /srv/models/m-fp16 of the NVFP4 checkpoint /srv/models/m (kept" in html


def test_the_gptq_repack_and_its_copy_are_shown():
    why = ("NVFP4 cannot be served natively here (QUANTIZATION_UNSUPPORTED_ON_ARCH) and the FP16 fallback is refused "
           "too (INSUFFICIENT_VRAM); vllm_server repacks the checkpoint once to GPTQ int4")
    repack = {"group_size": 64, "bits_per_weight": 4.32, "expected_error": {"rel_rms": 0.0812, "source": "bench"}}
    preflight = {"verdict": "allowed", "state": "ok", "reasons": [], "warnings": [], "probe_only": False,
                 "serving_path": "gptq_repack", "serving_why": why, "serving_repack": repack}
    copy = {"source": "/srv/models/m", "path": "/srv/models/m-gptq64", "changed": True, "group_size": 64,
            "bits_per_weight": 4.32, "output_bytes": 41129623552, "expected_error": repack["expected_error"]}
    server = {"status": "deployed", "image": "vllm/vllm-openai:v0.8.5", "image_digest": "sha256:1",
              "model_path": "/srv/models/m", "serving_path": "gptq_repack", "served_model_path": "/srv/models/m-gptq64",
              "fp16_copy": None, "gptq_copy": copy, "instances": []}
    doc = fleet_report([{"host": "gpu01", "reachable": True, "preflight": preflight, "server": server}], "rollout")
    label = "gptq_repack (group size 64, ~4.3 bits per weight, expected error 8.1%)"
    served = ("/srv/models/m-gptq64 of the NVFP4 checkpoint /srv/models/m (made by this run, group size 64, ~4.3 bits "
              "per weight, 41129623552 bytes, expected error 8.1% (bench)), served with --quantization gptq")
    markdown = render("fleet-report.md.j2", doc)
    assert "- serving path: %s: %s" % (label, why) in markdown
    assert "- GPTQ copy served: " + served in markdown
    assert "FP16 copy served" not in markdown
    html = render("fleet-report.html.j2", doc)
    assert "<li>serving path: %s: %s</li>" % (label, why) in html
    assert "<li>GPTQ copy served: %s</li>" % served in html


def test_markdown_metrics_section_lists_targets_and_skipped():
    inst = {"name": "vllm", "port": 8000, "bind_address": "10.0.0.5", "status": "deployed", "argv": []}
    lo = dict(inst, name="vllm-lo", port=8001, bind_address="127.0.0.1")
    pre = {"host": "gpu01", "verdict": "allowed", "state": "ok", "reasons": [], "warnings": [], "probe_only": False}
    records = [{"host": "gpu01", "reachable": True, "preflight": pre,
                "server": {"status": "deployed", "image_digest": "sha256:abc", "instances": [inst, lo]}}]
    text = render("fleet-report.md.j2", fleet_report(records, "rollout"))
    section = text[text.index("## Metrics"):]
    assert "1 Prometheus scrape target(s)" in section
    assert "- gpu01 / vllm: 10.0.0.5:8000" in section
    assert "- not a target: gpu01 / vllm-lo: published on 127.0.0.1 only" in section
