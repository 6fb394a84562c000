# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""deploy_gate with request.model_store (issue 26), through the module's main(): the store's answer
as the preflight's GET returned it, the manifest's gate as the model (and made_from.model), the disk
of <model_path>.revisions/<revision> measured on the host, refusals that are not failures."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "module_utils"))
import test_deploy_gate as TG  # noqa: E402  (the module runner and the reference host)
import test_plan_model_store as TS  # noqa: E402  (the store, its manifest and answers)


def args(tmp_path, store_answer, **changes):
    model_path = str(tmp_path / "models" / "model")
    vllm_args = dict((k, v) for k, v in TG.REFERENCE["vllm"].items() if k != "served_model_name")
    request = {"model_path": model_path, "model_store": dict(TS.STORE), "driver": {"manage": False},
               "served_model_name": "quasar", "vllm_args": dict(vllm_args, dtype="float16")}
    out = dict(TG.REFERENCE, model={}, vllm={}, request=request, model_store=store_answer)
    out.update(changes)
    return out


def the_answer():
    """What the role passes: the GET's status, content and msg, nothing measured."""
    full = TS.answer()
    return dict((k, full[k]) for k in ("status", "content", "msg"))


def test_the_manifest_is_judged_and_the_disk_measured_on_the_host(tmp_path):
    kind, result = TG.run_module(args(tmp_path, the_answer()))
    assert kind == "exit", result
    verdict = result["verdict"]
    assert verdict["allowed"], verdict["reasons"]
    record = verdict["model_store"]
    assert record["fetch"] == {"revision": "2026-11-30", "dest": str(tmp_path / "models" / "model"),
                               "bytes": 16 * TS.GB}
    assert isinstance(record["disk_free_bytes"], int) and record["disk_free_bytes"] > 0
    assert record["disk_needed_bytes"] == 16 * TS.GB
    assert verdict["steps"]["model"]["action"] == "fetch"
    # What the plan was made from: the manifest's gate, the model the doctor asks the gate about again.
    assert verdict["made_from"]["model"] == TS.F.LLAMA_8B_BF16


def test_a_revision_already_on_the_host_is_kept(tmp_path):
    done = tmp_path / "models" / "model.revisions" / "2026-11-30"
    done.mkdir(parents=True)
    # Published by the fetch: its state file is in the revision's directory.
    (done / ".labfleet-fetch.json").write_text("{}")
    kind, result = TG.run_module(args(tmp_path, the_answer()))
    assert kind == "exit"
    assert result["verdict"]["model_store"]["disk_needed_bytes"] == 0
    assert result["verdict"]["steps"]["model"]["action"] == "keep"


def test_too_little_disk_is_a_refusal_not_a_failure(tmp_path):
    kind, result = TG.run_module(args(tmp_path, dict(the_answer(), disk_free_bytes=TS.GB)), check_mode=True)
    assert kind == "exit"
    assert TG._codes(result["verdict"]["reasons"]) == ["INSUFFICIENT_DISK"]


def test_an_unreachable_store_is_a_refusal_not_a_failure(tmp_path):
    kind, result = TG.run_module(args(tmp_path, {"status": -1, "msg": "Request failed: timed out"}))
    assert kind == "exit"
    verdict = result["verdict"]
    assert TG._codes(verdict["reasons"])[0] == "MODEL_STORE_UNREACHABLE"
    assert "timed out" in verdict["reasons"][0]["message"]
    assert verdict["model_store"]["fetch"] is None
    assert verdict["made_from"]["model"] == {}


def test_an_invalid_manifest_is_a_refusal_not_a_failure(tmp_path):
    kind, result = TG.run_module(args(tmp_path, {"status": 200, "content": "<html>store</html>", "msg": "OK"}))
    assert kind == "exit"
    assert TG._codes(result["verdict"]["reasons"])[0] == "MODEL_MANIFEST_INVALID"


def test_a_bad_store_url_fails_with_what_to_fix(tmp_path):
    bad = args(tmp_path, the_answer())
    bad["request"]["model_store"]["url"] = "http://admin:pw@models.lab"
    kind, result = TG.run_module(bad)
    assert kind == "fail"
    assert result["msg"].startswith("deploy_gate: invalid input: request.model_store.url: no credentials")


def test_without_a_store_nothing_is_measured_and_the_record_is_null(tmp_path):
    plain = args(tmp_path, None, model=TG.REFERENCE["model"])
    plain["request"].pop("model_store")
    kind, result = TG.run_module(plain)
    assert kind == "exit"
    assert result["verdict"]["model_store"] is None
    assert result["verdict"]["made_from"]["model"] == TG.REFERENCE["model"]
