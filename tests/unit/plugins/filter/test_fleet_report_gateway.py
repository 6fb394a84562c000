# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet report's gateway section (issue 25): each gateway's backends with the state the plans gave
them and HAProxy's view of them, the drains the rollout performed, the upgrade-under-load figures (with
and without the drain), the exporter as a Prometheus target; merged into the report on disk without
losing what a later, partial run does not carry; rendered with every value escaped."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import sys

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.labfleet.vllm.plugins.filter.fleet_report import fleet_report
from ansible_collections.labfleet.vllm.plugins.module_utils.clients import _haproxy as H
from ansible_collections.labfleet.vllm.plugins.module_utils.reporting import _gateway_report as G
from ansible_collections.labfleet.vllm.plugins.module_utils.reporting import _report as R

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_fleet_report as TF  # noqa: E402  (the templates, rendered as Ansible renders them)

PRE = {"verdict": "allowed", "state": "ok", "reasons": [], "warnings": [], "probe_only": False}
DRAIN = {"gateway": "gw1", "state": "drain", "outcome": "drained", "server": "gpu01-vllm", "backends": ["model_quasar"],
         "in_flight_at_start": 3, "in_flight_at_end": 0, "waited_s": 1.4}
LOAD = {"sent": 212, "failed": 0, "cut": 0, "refused": 0, "duration_s": 80.5, "ttft_p50_s": 0.012, "ttft_p99_s": 0.05,
        "ttft_p50_before_s": 0.011, "ttft_p99_before_s": 0.03, "drain": True, "concurrency": 4,
        "url": "http://10.0.0.9:8080", "failed_offsets_s": [], "errors": []}


def host(name, drain=None, outcome_state="ok"):
    server = {"status": "deployed", "image_digest": "sha256:abc",
              "instances": [{"name": "vllm", "port": 8000, "bind_address": "", "status": "deployed", "argv": []}],
              "drains": [dict(d, instance="vllm") for d in (drain or [])]}
    return {"host": name, "reachable": True, "preflight": PRE, "server": server,
            "rollout": {"state": outcome_state, "batch": 1, "step": "", "msg": ""}}


def gateway_result(state="ok", metrics_bind="127.0.0.1"):
    backends = [{"name": "gpu01-vllm", "host": "gpu01", "instance": "vllm", "address": "10.0.0.1", "port": 8000,
                 "model": "quasar", "state": "ready", "why": "the rollout's smoke test passed (batch 1)"},
                {"name": "gpu02-vllm", "host": "gpu02", "instance": "vllm", "address": "10.0.0.2", "port": 8000,
                 "model": "quasar", "state": "out", "why": "the rollout failed at step server: <b>rolled back</b>"}]
    servers = [{"backend": "model_quasar", "server": "gpu01-vllm", "admin": "ready", "up": True, "scur": 2, "stot": 120,
                "hrsp_5xx": 0, "status": "UP"},
               {"backend": "model_quasar", "server": "gpu02-vllm", "admin": "maint", "up": False, "scur": 0, "stot": 7,
                "hrsp_5xx": 1, "status": "MAINT"}]
    return {"state": state, "url": "http://10.0.0.9:8080", "backends": backends, "servers": servers,
            "left_out": [{"host": "gpu03", "why": "refused by the preflight (COMPUTE_CAPABILITY_TOO_LOW)"}],
            "api_keys": True, "tls": False, "metrics": "http://%s:8405/metrics" % metrics_bind,
            "metrics_endpoint": {"bind_address": metrics_bind, "port": 8405}}


def report(gateways=None, load=None, drain=None):
    records = [host("gpu01", drain=[DRAIN] if drain is None else drain), host("gpu02", outcome_state="failed")]
    return fleet_report(records, "rollout", gateways=gateways, gateway_load=load)


def test_the_section_shows_each_backend_planned_and_as_haproxy_saw_it():
    doc = report(gateways=[{"host": "gw1", "result": gateway_result(), "address": "10.0.0.9"}])
    section = doc["gateway"]
    (gw,) = section["gateways"]
    assert gw["host"] == "gw1" and gw["state"] == "ok" and gw["api_keys"] is True and gw["tls"] is False
    first, second = gw["backends"]
    assert (first["server"], first["planned"], first["admin"], first["up"], first["in_flight"], first["requests"],
            first["errors_5xx"]) == ("gpu01-vllm", "ready", "ready", True, 2, 120, 0)
    assert (second["planned"], second["admin"], second["up"], second["requests"]) == ("out", "maint", False, 7)
    assert section["summary"] == {"gateways": 1, "backends": 2, "in_rotation": 1, "drains": 1, "drains_at_bound": 0}
    assert section["drains"] == [{"host": "gpu01", "instance": "vllm", "gateway": "gw1", "outcome": "drained",
                                  "in_flight_at_start": 3, "in_flight_at_end": 0, "waited_s": 1.4}]
    assert "upgrade_under_load" not in section


def test_no_gateway_and_no_figures_is_no_section_and_an_unconfigured_gateway_is_left_out():
    assert "gateway" not in report()
    assert "gateway" not in report(gateways=[{"host": "gw1", "result": None}])
    assert "gateway" not in report(gateways=[])


def test_load_figures_go_by_the_drain_switch_and_keep_only_known_fields_of_the_right_type():
    off = dict(LOAD, drain=False, failed=9, cut=9, sent="many", secret="sk-x")
    section = report(load=[LOAD, off])["gateway"]
    assert section["upgrade_under_load"]["failed"] == 0 and section["upgrade_under_load"]["drain"] is True
    kept = section["upgrade_under_load_no_drain"]
    assert kept["failed"] == 9 and "sent" not in kept and "secret" not in kept
    assert G.load_figures({"failed": True}) is None and G.load_figures("text") is None
    assert G.load_figures({"duration_s": 3})["duration_s"] == 3.0


def test_a_drain_that_reached_its_bound_is_counted_and_shown():
    bound = dict(DRAIN, outcome="bound_reached", in_flight_at_end=2, waited_s=120.0)
    doc = report(gateways=[{"host": "gw1", "result": gateway_result()}], drain=[bound])
    assert doc["gateway"]["summary"]["drains_at_bound"] == 1
    assert "1 reached the bound (requests cut)" in TF.render("fleet-report.md.j2", doc)
    assert "<strong>bound_reached</strong>" in TF.render("fleet-report.html.j2", doc)


def test_the_exporter_is_a_target_only_where_prometheus_reaches_it():
    doc = report(gateways=[{"host": "gw1", "result": gateway_result(metrics_bind="0.0.0.0"), "address": "10.0.0.9"}])
    groups = [g for g in doc["scrape_targets"]["file_sd"] if g["labels"].get("labfleet_exporter") == "haproxy"]
    labels = {"labfleet_host": "gw1", "labfleet_instance": "haproxy", "labfleet_exporter": "haproxy"}
    assert groups == [{"targets": ["10.0.0.9:8405"], "labels": labels}]
    local = report(gateways=[{"host": "gw1", "result": gateway_result()}])
    skipped = [s for s in local["scrape_targets"]["skipped"] if s["instance"] == "haproxy"]
    assert len(skipped) == 1 and "gateway_metrics_bind_address" in skipped[0]["fix"]
    failed = report(gateways=[{"host": "gw1", "result": gateway_result(state="failed", metrics_bind="0.0.0.0")}])
    assert not [g for g in failed["scrape_targets"]["file_sd"] if g["labels"].get("labfleet_exporter") == "haproxy"]


def test_a_later_run_adds_its_figures_and_keeps_the_gateways_it_did_not_configure():
    on_disk = report(gateways=[{"host": "gw1", "result": gateway_result()}])
    later = report(load=[LOAD])  # playbooks/report.yml with fleet_report_gateway_load: no gateway configured
    merged = R.merge_report(on_disk, later)
    assert merged["gateway"]["gateways"] == on_disk["gateway"]["gateways"]
    assert merged["gateway"]["upgrade_under_load"]["sent"] == 212
    # A doctor run (no gateway, no figures) keeps both.
    again = R.merge_report(merged, report())
    assert again["gateway"] == merged["gateway"]
    # A new rollout that configured the gateway replaces the gateways, and keeps the last figures.
    fresh = report(gateways=[{"host": "gw2", "result": gateway_result()}])
    replaced = R.merge_report(merged, fresh)
    assert [g["host"] for g in replaced["gateway"]["gateways"]] == ["gw2"]
    assert replaced["gateway"]["upgrade_under_load"]["sent"] == 212


@pytest.mark.parametrize("damage", [{"gateways": "x", "drains": [], "summary": {}},
                                    {"gateways": [{"backends": "x"}], "drains": [], "summary": {}}, []])
def test_a_damaged_gateway_section_on_disk_is_replaced_and_says_so(damage):
    on_disk = dict(report(), gateway=damage)
    merged = R.merge_report(on_disk, report(load=[LOAD]))
    assert "gateway" in merged["previous_report"]
    assert merged["gateway"]["upgrade_under_load"]["sent"] == 212


def test_markdown_and_html_show_the_gateway_with_every_value_escaped():
    doc = report(gateways=[{"host": "gw1", "result": gateway_result()}], load=[LOAD, dict(LOAD, drain=False, failed=5)])
    markdown = TF.render("fleet-report.md.j2", doc)
    section = markdown[markdown.index("## Gateway"):]
    assert "Upgrade under load (drain on): 212 requests sent, **0 failed**" in section
    assert "Upgrade under load (drain OFF): 212 requests sent, **5 failed**" in section
    assert "| quasar | gpu01 / vllm | 10.0.0.1:8000 | ready | yes | 2 | 120 | 0 |" in section
    assert "| quasar | gpu02 / vllm | 10.0.0.2:8000 | out | no (maint) | 0 | 7 | 1 |" in section
    assert "| gpu01 / vllm | gw1 | drained | 3 | 0 | 1.4 |" in section
    assert "- Left out: gpu03: refused by the preflight (COMPUTE_CAPABILITY_TOO_LOW)" in section
    html = TF.render("fleet-report.html.j2", doc)
    assert '<h2 id="gateway">Gateway</h2>' in html and "<b>rolled back</b>" not in html
    assert "&lt;b&gt;rolled back&lt;/b&gt;" in html
    assert '<p class="ok">Upgrade under load (drain on)' in html and '<p class="bad">Upgrade under load (drain OFF)' in html


def test_gateways_must_be_a_list():
    with pytest.raises(AnsibleFilterError, match="gateways must be a list"):
        fleet_report([], "rollout", gateways={"host": "gw1"})


def test_the_doctor_says_why_each_backend_out_of_rotation_is_out():
    down = {"backend": "model_quasar", "server": "gpu02-vllm", "admin": "ready", "up": False, "status": "DOWN",
            "check_status": "L4CON", "addr": "10.0.0.2:8000"}
    maint = {"backend": "model_quasar", "server": "gpu01-vllm", "admin": "maint", "up": False, "status": "MAINT"}
    servers = [dict(row, diagnosis=H.diagnose(row)) for row in (maint, down)]
    doc = report(gateways=[{"host": "gw1", "result": None, "doctor": {"outcome": "query", "servers": servers}}])
    (kept, refused) = doc["gateway"]["doctor"]
    assert kept["in_rotation"] is False and "rollout failed or was rolled back" in kept["cause"]
    assert refused["cause"].startswith("nothing accepts connections at 10.0.0.2:8000") and "doctor.yml" in refused["fix"]
    markdown = TF.render("fleet-report.md.j2", doc)
    assert "Doctor (`playbooks/doctor.yml`): 0 of 2 backend server(s) in rotation." in markdown
    assert "- gw1: model_quasar/gpu02-vllm (DOWN): nothing accepts connections at 10.0.0.2:8000" in markdown
    # A later doctor run replaces the findings and keeps the gateways of the last rollout.
    on_disk = report(gateways=[{"host": "gw1", "result": gateway_result()}])
    merged = R.merge_report(on_disk, doc)
    assert merged["gateway"]["gateways"] == on_disk["gateway"]["gateways"] and len(merged["gateway"]["doctor"]) == 2


@pytest.mark.parametrize("row,words", [
    ({"admin": "drain", "backend": "b", "server": "s"}, "being drained"),
    ({"admin": "ready", "up": False, "check_status": "L7STS", "check_code": "500", "addr": "a:1"},
     "/health at a:1 answers 500, not 200"),
    ({"admin": "ready", "up": False, "check_status": "L4TOUT", "addr": "a:1"}, "does not answer the connection"),
    ({"admin": "ready", "up": False, "check_status": "INI"}, "have not passed yet (INI)"),
])
def test_each_reason_a_server_is_out(row, words):
    diagnosis = H.diagnose(row)
    assert diagnosis["in_rotation"] is False and words in diagnosis["cause"] and diagnosis["fix"], diagnosis
    assert H.diagnose({"admin": "ready", "up": True}) == {"in_rotation": True, "cause": "", "fix": ""}
