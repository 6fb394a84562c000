# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet report's outcomes and document (plugins/module_utils/reporting/_report.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.reporting import _report as R

ALLOWED = {"host": "gpu01", "verdict": "allowed", "state": "ok", "reasons": [], "warnings": [],
           "gpu_count": 2, "gpu_models": ["Tesla V100-PCIE-32GB"], "probe_only": False,
           "rollout_plan": "keep driver 550.54.14; deploy vllm", "plan": {"summary": "32.0 GiB per GPU"}}
REFUSED = dict(ALLOWED, verdict="refused", state="no_gpu",
               reasons=[{"code": "NO_GPU", "message": "no NVIDIA GPU was found"},
                        {"code": "INSUFFICIENT_VRAM", "message": "too small"}])
INSTANCE = {"name": "vllm", "port": 8000, "status": "deployed",
            "argv": ["--tensor-parallel-size", "2", "--enforce-eager"],
            "health_s": 41.5, "ttft_s": 0.25, "completion_tokens": 16, "latency_s": 2.0}
DEPLOYED = {"status": "deployed", "image": "vllm/vllm-openai:v0.8.5", "image_digest": "sha256:abc",
            "model_path": "/srv/models/model", "instances": [INSTANCE]}
ROLLED_BACK = {"status": "rolled_back", "image": "vllm/vllm-openai:v0.9.0", "image_digest": "sha256:new",
               "failed_instance": "vllm", "failed_task": "smoke test", "msg": "no token within 60 s",
               "restored_image": "sha256:old", "journal_tail": ["line 1", "CUDA error: out of memory"],
               "instances": []}


def rec(**kw):
    base = {"host": "gpu01", "reachable": True, "preflight": ALLOWED, "driver": None, "runtime": None,
            "server": None, "rollout": None}
    base.update(kw)
    return base


def outcome(mode="rollout", **kw):
    return R.host_outcome(rec(**kw), mode)[0]


# ---- every outcome ---------------------------------------------------------------------------

def test_no_preflight_reachable_is_no_data():
    assert outcome(preflight=None) == "no_data"


def test_no_preflight_unreachable_is_unreachable():
    assert outcome(preflight=None, reachable=False) == "unreachable"


def test_refused_names_the_codes():
    name, detail, _extra = R.host_outcome(rec(preflight=REFUSED), "rollout")
    assert name == "refused"
    assert "NO_GPU, INSUFFICIENT_VRAM" in detail


def test_probe_only_refused_is_refused():
    name, detail, _extra = R.host_outcome(rec(preflight=dict(REFUSED, probe_only=True)), "rollout")
    assert name == "refused"
    assert detail.startswith("Probe only; refused")


def test_preflight_mode_allowed_is_planned():
    name, detail, _extra = R.host_outcome(rec(), "preflight")
    assert name == "planned"
    assert "keep driver 550.54.14" in detail


def test_probe_only_allowed_host_is_planned_in_a_rollout():
    assert outcome(preflight=dict(ALLOWED, probe_only=True)) == "planned"


def test_rolled_back_keeps_the_why_and_the_journal():
    rollout = {"state": "failed", "step": "server", "msg": "vllm failed", "batch": 1}
    name, detail, extra = R.host_outcome(rec(server=ROLLED_BACK, rollout=rollout), "rollout")
    assert name == "rolled_back"
    assert "no token within 60 s" in detail
    assert extra["failure"]["journal_tail"] == ["line 1", "CUDA error: out of memory"]
    assert extra["failure"]["restored_image"] == "sha256:old"
    assert extra["failure"]["step"] == "server"
    assert extra["serving"] is None


def test_journal_tail_may_be_absent_or_a_string():
    server = dict(ROLLED_BACK)
    del server["journal_tail"]
    assert R.host_outcome(rec(server=server), "rollout")[2]["failure"]["journal_tail"] == []
    server["journal_tail"] = "a\nb"
    assert R.host_outcome(rec(server=server), "rollout")[2]["failure"]["journal_tail"] == ["a", "b"]


@pytest.mark.parametrize("status", ["failed", "not_retried"])
def test_server_failed_or_not_retried_is_failed(status):
    name, detail, extra = R.host_outcome(rec(server={"status": status, "msg": "boom"}), "rollout")
    assert name == "failed"
    assert extra["failure"]["step"] == "server"
    assert "server step" in detail


def test_rollout_failed_at_the_driver_step_is_failed_with_step_and_msg():
    name, detail, extra = R.host_outcome(
        rec(rollout={"state": "failed", "step": "driver", "msg": "dkms build failed", "batch": 2,
                     "task": "Install the driver packages"}), "rollout")
    assert name == "failed"
    assert detail == "Failed at the driver step: dkms build failed."
    assert extra["failure"]["step"] == "driver"
    assert extra["failure"]["failed_task"] == "Install the driver packages"
    assert extra["failure"]["journal_tail"] == []


def test_pending_reboot():
    name, detail, _extra = R.host_outcome(
        rec(driver={"status": "pending_reboot", "msg": "reboot needed: nouveau is loaded"}), "rollout")
    assert name == "pending_reboot"
    assert "nouveau" in detail


def test_not_reached_names_the_batch():
    name, detail, _extra = R.host_outcome(rec(rollout={"state": "not_reached", "batch": 3}), "rollout")
    assert name == "not_reached"
    assert "(3)" in detail


def test_reachable_lost_after_preflight_is_unreachable():
    assert outcome(reachable=False) == "unreachable"
    assert outcome(reachable=False, driver={"status": "ok"}) == "unreachable"


def test_deployed_carries_the_serving_figures():
    name, _detail, extra = R.host_outcome(rec(server=DEPLOYED, rollout={"state": "ok", "batch": 1}), "rollout")
    assert name == "deployed"
    sv = extra["serving"]
    assert sv["image_digest"] == "sha256:abc"
    assert sv["model_path"] == "/srv/models/model"
    inst = sv["instances"][0]
    assert inst["flags"] == "--tensor-parallel-size 2 --enforce-eager"
    assert inst["ttft_s"] == 0.25
    assert inst["health_s"] == 41.5
    assert inst["tokens_per_s"] == 8.0


def test_serving_from_an_fp16_copy_says_so():
    copy = {"source": "/srv/models/model", "path": "/srv/models/model-fp16", "changed": True,
            "layout": "modelopt", "output_bytes": 16060522496, "tensors_dequantized": 224}
    server = dict(DEPLOYED, serving_path="fp16_fallback", served_model_path="/srv/models/model-fp16", fp16_copy=copy)
    sv = R.host_outcome(rec(server=server), "rollout")[2]["serving"]
    assert sv["serving_path"] == "fp16_fallback"
    assert sv["model_path"] == "/srv/models/model"
    assert sv["served_model_path"] == "/srv/models/model-fp16"
    assert sv["fp16_copy"] == copy
    # A record from before serving paths: the model path is what was served, no copy.
    old = R.host_outcome(rec(server=DEPLOYED), "rollout")[2]["serving"]
    assert old["served_model_path"] == "/srv/models/model"
    assert old["serving_path"] is None and old["fp16_copy"] is None
    assert old["gptq_copy"] is None and old["gptq_copy_detail"] is None


# The plan's serving.gptq_repack as the preflight records it (serving_repack), and the server's copy.
REPACK = {"group_size": 64, "bits_per_weight": 4.32, "repacked_bytes": 41129623552,
          "expected_error": {"rel_rms": 0.0812, "max_abs_rel": 0.31, "source": "benchmarks/nvfp4_repack.py"}}
GPTQ_COPY = {"source": "/srv/models/model", "path": "/srv/models/model-gptq64", "changed": True, "group_size": 64,
             "bits_per_weight": 4.32, "output_bytes": 41129623552, "planned_bytes": 41129623552,
             "expected_error": REPACK["expected_error"], "measured_error": {"rel_rms": 0.0805, "max_abs": 0.02}}


def test_serving_label_names_the_repacks_group_size_bits_and_expected_error():
    assert R.serving_label("gptq_repack", REPACK) == \
        "gptq_repack (group size 64, ~4.3 bits per weight, expected error 8.1%)"
    unmeasured = dict(REPACK, expected_error={"rel_rms": None, "source": "provisional: not measured yet"})
    assert R.serving_label("gptq_repack", unmeasured) == \
        "gptq_repack (group size 64, ~4.3 bits per weight, expected error not measured yet)"
    # Other paths, and a record without the plan's repack, keep their plain name.
    assert R.serving_label("fp16_fallback", REPACK) == "fp16_fallback"
    assert R.serving_label("gptq_repack", None) == "gptq_repack"
    assert R.serving_label(None, None) is None
    # Nonsense figures are left out rather than printed.
    assert R.serving_label("gptq_repack", {"group_size": "x", "bits_per_weight": float("nan")}) == \
        "gptq_repack (expected error not measured yet)"


def test_serving_from_a_gptq_copy_says_so():
    server = dict(DEPLOYED, serving_path="gptq_repack", served_model_path="/srv/models/model-gptq64",
                  gptq_copy=GPTQ_COPY)
    sv = R.host_outcome(rec(server=server), "rollout")[2]["serving"]
    assert sv["serving_path"] == "gptq_repack" and sv["fp16_copy"] is None
    assert sv["gptq_copy"] == GPTQ_COPY
    assert sv["gptq_copy_detail"] == (
        "/srv/models/model-gptq64 of the NVFP4 checkpoint /srv/models/model (made by this run, group size 64, "
        "~4.3 bits per weight, 41129623552 bytes, expected error 8.1% (benchmarks/nvfp4_repack.py), measured 8.1%), "
        "served with --quantization gptq")
    kept = R.gptq_copy_detail(dict(GPTQ_COPY, changed="False", output_bytes=None, measured_error=None))
    assert "(kept from an earlier run, group size 64, ~4.3 bits per weight, 41129623552 bytes, expected" in kept
    entry = R.host_entry(rec(server=server, preflight=dict(rec()["preflight"], serving_path="gptq_repack",
                                                           serving_repack=REPACK)))
    assert entry["serving_label"] == "gptq_repack (group size 64, ~4.3 bits per weight, expected error 8.1%)"


def test_unchanged_is_serving():
    name, detail, extra = R.host_outcome(rec(server=dict(DEPLOYED, status="unchanged")), "rollout")
    assert name == "serving"
    assert "nothing changed" in detail
    assert extra["serving"]["instances"]


def test_check_mode():
    assert outcome(server={"status": "check_mode"}) == "check_mode"


def test_unknown_says_what_is_missing():
    name, detail, _extra = R.host_outcome(rec(), "rollout")
    assert name == "unknown"
    assert "vllm_server_result" in detail and "labfleet_rollout" in detail
    assert "'weird'" in R.host_outcome(rec(server={"status": "weird"}), "rollout")[1]
    assert "recorded no result" in R.host_outcome(rec(rollout={"state": "ok"}), "rollout")[1]
    assert "no verdict" in R.host_outcome(rec(preflight={"host": "x", "state": "ok"}), "rollout")[1]


# ---- precedence --------------------------------------------------------------------------------

def test_refused_wins_over_everything_after_it():
    assert outcome(preflight=REFUSED, server=ROLLED_BACK, reachable=False,
                   rollout={"state": "failed", "step": "server"}) == "refused"


def test_refused_wins_over_preflight_mode():
    assert outcome("preflight", preflight=REFUSED) == "refused"


def test_preflight_mode_wins_over_role_results():
    assert outcome("preflight", server=DEPLOYED, driver={"status": "pending_reboot"}) == "planned"


def test_rolled_back_wins_over_failed_rollout_record_and_pending_reboot():
    assert outcome(server=ROLLED_BACK, rollout={"state": "failed"}, driver={"status": "pending_reboot"}) \
        == "rolled_back"


def test_failed_wins_over_pending_reboot_and_unreachable():
    assert outcome(rollout={"state": "failed", "step": "runtime"}, driver={"status": "pending_reboot"},
                   reachable=False) == "failed"


def test_pending_reboot_wins_over_not_reached_unreachable_and_deployed():
    assert outcome(driver={"status": "pending_reboot"}, rollout={"state": "not_reached"},
                   reachable=False, server=DEPLOYED) == "pending_reboot"


def test_not_reached_wins_over_unreachable():
    assert outcome(rollout={"state": "not_reached"}, reachable=False) == "not_reached"


def test_unreachable_wins_over_deployed():
    assert outcome(server=DEPLOYED, reachable=False) == "unreachable"


def test_the_outcome_table_lists_every_word_once():
    assert len(set(R.OUTCOME_NAMES)) == len(R.OUTCOME_NAMES) == 12


# ---- tokens/s ----------------------------------------------------------------------------------

@pytest.mark.parametrize("tokens, latency, expected", [
    (16, 2.0, 8.0),
    (10, 3, 3.33),
    ("16", "4", 4.0),
    (0, 2.0, 0.0),
    (16, 0, None),
    (16, 0.0, None),
    (16, -1, None),
    (None, 2.0, None),
    (16, None, None),
    (None, None, None),
    (-1, 2.0, None),
    ("abc", 2.0, None),
    (True, 2.0, None),
])
def test_tokens_per_s(tokens, latency, expected):
    assert R.tokens_per_s(tokens, latency) == expected


def test_instance_without_figures_has_null_rate():
    server = dict(DEPLOYED, instances=[{"name": "vllm", "port": 8000, "status": "deployed", "argv": None}])
    inst = R.host_outcome(rec(server=server), "rollout")[2]["serving"]["instances"][0]
    assert inst["tokens_per_s"] is None and inst["ttft_s"] is None and inst["flags"] == ""


# ---- the document ------------------------------------------------------------------------------

def test_entry_keeps_the_preflight_fields_and_adds_the_outcome():
    entry = R.host_entry(rec(server=DEPLOYED, driver={"status": "ok"}), "rollout")
    for key, value in ALLOWED.items():
        assert entry[key] == value
    assert entry["outcome"] == "deployed"
    assert entry["outcome_detail"].endswith(".")
    assert entry["rollout"] == {"driver": {"status": "ok"}, "runtime": None, "server": DEPLOYED, "exporter": None}
    assert entry["rollout_status"] is None
    assert entry["reachable"] is True
    assert entry["failure"] is None


def test_entry_without_preflight_is_no_data_state():
    entry = R.host_entry(rec(host="gpu09", preflight=None, reachable=False), "rollout")
    assert entry["state"] == "no_data"
    assert entry["outcome"] == "unreachable"
    assert entry["host"] == "gpu09"
    assert "No probe result" in entry["msg"]


def test_report_summary_and_order():
    doc = R.build_report([
        rec(host="b", server=DEPLOYED),
        rec(host="a", preflight=dict(REFUSED, host="a")),
        rec(host="c", server=ROLLED_BACK),
        rec(host="d", preflight=None, reachable=False),
    ], mode="rollout")
    assert doc["report_format"] == 2
    assert doc["collection"] == "labfleet.vllm"
    assert doc["mode"] == "rollout"
    assert [e["host"] for e in doc["hosts"]] == ["a", "b", "c", "d"]
    assert doc["summary"] == {
        "hosts": 4,
        "by_outcome": {"refused": 1, "deployed": 1, "rolled_back": 1, "unreachable": 1},
        "by_state": {"no_gpu": 1, "ok": 2, "no_data": 1},
        "allowed": ["b", "c"],
        "refused": ["a"],
    }
    assert [o["outcome"] for o in doc["outcomes"]] == list(R.OUTCOME_NAMES)
    json.dumps(doc, sort_keys=True)   # the JSON API: serialisable as it is


def test_preflight_only_report():
    doc = R.build_report([rec(host="gpu01"), rec(host="localhost", preflight=dict(REFUSED, probe_only=True))],
                         mode="preflight")
    assert doc["mode"] == "preflight"
    assert doc["summary"]["by_outcome"] == {"planned": 1, "refused": 1}
    assert doc["hosts"][0]["rollout"] == {"driver": None, "runtime": None, "server": None, "exporter": None}


def test_empty_and_bad_input():
    assert R.build_report([], "rollout")["summary"]["hosts"] == 0
    assert R.build_report(None, "preflight")["hosts"] == []
    with pytest.raises(ValueError, match="mode must be one of"):
        R.build_report([], "deploy")
    with pytest.raises(ValueError, match="records must be a list"):
        R.build_report({"host": "x"}, "rollout")


def test_hostile_strings_pass_through_the_document_unchanged():
    # Escaping is the renderers' job (Markdown and HTML templates); the JSON keeps the data as it came.
    hostile = '<script>alert("x")</script> | `rm -rf` [a](javascript:1)'
    entry = R.host_entry(rec(host=hostile, server=dict(ROLLED_BACK, msg=hostile, journal_tail=[hostile])),
                         "rollout")
    assert entry["host"] == hostile
    assert entry["failure"]["msg"] == hostile
    assert hostile in entry["outcome_detail"]


# --- the report's view of a host, made from the plan itself -----------------------------------------

_V100 = {"name": "Tesla V100-PCIE-32GB", "compute_capability": "7.0", "architecture": "volta",
         "memory_total_mib": 32768}


def _plan(**over):
    plan = {"plan_format": R.PLAN_FORMAT, "allowed": True, "reasons": [], "warnings": [],
            "summary": "keep the driver; deploy 1 instance",
            "target": {"driver_version": "550.54.14", "image": "vllm/vllm-openai:v0.8.5",
                       "image_digest": "sha256:" + "a" * 64, "model_path": "/srv/models/m"},
            "deployment": {"image": "vllm/vllm-openai:v0.8.5", "model_path": "/srv/models/m"},
            "policy_version": "2026.12", "steps": {"server": {"action": "deploy"}},
            "made_from": {"image": {"digest": "sha256:" + "a" * 64}, "model": {"weight_bytes": 10}}}
    plan.update(over)
    return plan


def test_the_view_is_made_from_the_plan_and_the_probes():
    nvidia = {"state": "ok", "gpus": [_V100, dict(_V100)], "driver_version": "550.54.14"}
    view = R.preflight_view({"plan": _plan(), "nvidia": nvidia, "host": {"cpu": {"isa": ["avx2"]}}}, "gpu1")
    assert view["verdict"] == "allowed"
    assert view["gpu_count"] == 2
    assert view["gpu_models"] == ["Tesla V100-PCIE-32GB"]          # each model once
    assert view["vram_mib"] == [32768, 32768]
    assert view["target"] == ("driver 550.54.14, image vllm/vllm-openai:v0.8.5 @ sha256:" + "a" * 64
                              + ", model /srv/models/m")
    assert view["policy_version"] == "2026.12"
    assert view["replanned"] == ""
    assert view["cpu_isa"] == ["avx2"]


def test_a_refused_plan_gives_a_refused_view():
    view = R.preflight_view({"plan": _plan(allowed=False, reasons=[{"code": "DRIVER_TOO_OLD_FOR_IMAGE"}])}, "h")
    assert view["verdict"] == "refused"
    assert view["reasons"] == [{"code": "DRIVER_TOO_OLD_FOR_IMAGE"}]


def test_a_re_planned_host_says_what_differed_and_how_the_verdict_went():
    old = _plan()
    new = _plan(allowed=False, made_from={"image": {"digest": "sha256:" + "b" * 64}, "model": {"weight_bytes": 10}},
                previous=old)
    text = R.preflight_view({"plan": new}, "h")["replanned"]
    assert text == ("planned again during the rollout (image differed from the preflight's); "
                    "allowed before, refused now")


def test_a_plan_of_another_layout_is_not_read_as_a_verdict():
    view = R.preflight_view({"plan": _plan(plan_format=R.PLAN_FORMAT + 1)}, "h")
    assert view["verdict"] is None
    assert "plan_format %d" % (R.PLAN_FORMAT + 1) in view["msg"]
    assert "run the preflight again" in view["msg"]


def test_a_record_with_the_plan_gets_its_view_and_its_outcome():
    record = {"host": "gpu1", "reachable": True,
              "preflight": {"plan": _plan(allowed=False, reasons=[{"code": "X"}]), "nvidia": {}, "host": {}}}
    assert R.host_outcome(record)[0] == "refused"
    assert R.host_entry(record)["verdict"] == "refused"
    probe_only = {"host": "gpu1", "preflight": {"plan": _plan(), "probe_only": True}}
    assert R.preflight_view(probe_only["preflight"], "gpu1")["probe_only"] is True


def test_the_report_reads_the_plan_format_the_gate_writes():
    from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _plan as P
    assert P.PLAN_FORMAT == R.PLAN_FORMAT


def test_model_store_view_keeps_what_stays_put():
    record = {"url": "http://store:8090", "name": "tiny-nvfp4", "revision": "r1", "manifest_sha256": "ab" * 32,
              "manifest_url": "http://store:8090/tiny-nvfp4/r1/labfleet-manifest.json", "total_bytes": 5000000,
              "fetch": {"revision": "r1+gptq-g128", "dest": "/srv/models/tiny-gptq", "bytes": 1694393},
              "disk_free_bytes": 123456789, "disk_needed_bytes": 1694393}
    view = R.model_store_view(record)
    assert view == {"url": "http://store:8090", "name": "tiny-nvfp4", "revision": "r1", "manifest_sha256": "ab" * 32,
                    "fetch": {"revision": "r1+gptq-g128", "dest": "/srv/models/tiny-gptq", "bytes": 1694393},
                    "text": "tiny-nvfp4/r1, its copy r1+gptq-g128 from http://store:8090: 0.00 GB into "
                            "/srv/models/tiny-gptq."}
    # The free disk moves between runs: a converged run must leave the report as it was.
    assert R.model_store_view(dict(record, disk_free_bytes=1)) == view
    native = R.model_store_view(dict(record, fetch={"revision": "r1", "dest": "/srv/models/m", "bytes": 2 * 10 ** 9}))
    assert native["text"] == "tiny-nvfp4/r1 from http://store:8090: 2.00 GB into /srv/models/m."
    assert R.model_store_view(None) is None and R.model_store_view({"url": ""}) is None
    assert R.model_store_view(dict(record, fetch=None))["text"] == "tiny-nvfp4/r1 from http://store:8090."


def test_the_report_entry_carries_the_model_store():
    plan = {"allowed": True, "model_store": {"url": "http://s:8090", "name": "m", "revision": "r1",
                                             "fetch": {"revision": "r1", "dest": "/srv/models/m", "bytes": 10}}}
    view = R.preflight_view({"plan": plan}, "gpu01")
    assert view["model_store"]["fetch"]["dest"] == "/srv/models/m"
    assert R.preflight_view({"plan": {"allowed": True}}, "gpu01")["model_store"] is None


def test_a_group_member_is_planned_not_rolled_out_alone():
    """A member of a host group (labfleet_group_verdict) allowed on its own is kept out of the single-host
    rollout (rollout.yml excludes labfleet_group_allowed/_refused): the report says why, not "unknown"."""
    record = rec(group={"name": "vllm_group_70b", "allowed": True})
    outcome, detail, _extra = R.host_outcome(record)
    assert outcome == "planned"
    assert "member of host group vllm_group_70b (allowed as a group)" in detail
    assert "not rolled out alone" in detail
    refused = R.host_outcome(dict(record, group={"name": "g", "allowed": False}))
    assert refused[0] == "planned" and "(refused as a group)" in refused[1]
    # Without a group the same host's outcome is what it was.
    assert R.host_outcome(dict(record, group=None))[0] == "unknown"
