# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""labfleet.vllm.model_facts as Ansible runs it: arguments in, JSON result out."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib.util
import json
import os

import pytest

from ansible.module_utils.testing import patch_module_args  # ansible-core >= 2.19 (pinned)

from ansible_collections.labfleet.vllm.plugins.module_utils.probes._model import GATE_KEYS
from ansible_collections.labfleet.vllm.plugins.modules import model_facts

_BUILD = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "model", "build.py")
_spec = importlib.util.spec_from_file_location("labfleet_model_fixture_build", _BUILD)
B = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(B)


def run(args, capsys):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            model_facts.main()
    return json.loads(capsys.readouterr().out)


def warnings_of(result):
    out = []
    for item in result.get("warnings") or []:
        out.append(item if isinstance(item, str) else json.dumps(item))
    return out


def test_reference_layout(tmp_path, capsys):
    B.model_dir(str(tmp_path), "reference", "modelopt_nvfp4")
    result = run({"path": str(tmp_path), "min_free_disk_gb": 0}, capsys)
    assert result["changed"] is False and not result.get("failed")
    model = result["model"]
    assert model["quant_method"] == "modelopt_fp4"
    assert sorted(model["gate"]) == sorted(GATE_KEYS)
    assert model["gate"]["weight_bytes"] == B.tensor_bytes(B.llama_tensors("modelopt_nvfp4"))
    assert model["disk_free_ok"] is True and model["disk_free_gb"] >= 0
    assert "ansible_facts" not in result
    assert any("hf_quant_config.json" in w for w in warnings_of(result))


def test_low_disk_is_a_warning_not_a_failure(tmp_path, capsys):
    B.model_dir(str(tmp_path), "plain", "BF16")
    result = run({"path": str(tmp_path), "min_free_disk_gb": 1e6}, capsys)
    assert not result.get("failed")
    assert result["model"]["disk_free_ok"] is False
    assert any("GB free on the filesystem holding" in w for w in warnings_of(result))


def test_missing_config_fails_naming_the_file(tmp_path, capsys):
    B.write_safetensors(str(tmp_path / "model.safetensors"), B.llama_tensors())
    result = run({"path": str(tmp_path)}, capsys)
    assert result["failed"] is True
    assert result["file"] == str(tmp_path / "config.json")
    assert "config.json: file is missing" in result["msg"]


def test_truncated_weights_fail_naming_the_file(tmp_path, capsys):
    B.copy_layout("plain", str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\"")
    result = run({"path": str(tmp_path)}, capsys)
    assert result["failed"] is True
    assert result["file"].endswith("model.safetensors") and "truncated" in result["msg"]


def test_check_mode_reads_the_same(tmp_path, capsys):
    B.model_dir(str(tmp_path), "gptq", "gptq4")
    normal = run({"path": str(tmp_path), "min_free_disk_gb": 0}, capsys)
    checked = run({"path": str(tmp_path), "min_free_disk_gb": 0, "_ansible_check_mode": True}, capsys)
    assert checked["model"]["gate"] == normal["model"]["gate"]
    assert checked["changed"] is False


def test_path_that_is_a_file(tmp_path, capsys):
    target = tmp_path / "config.json"
    target.write_text("{}")
    result = run({"path": str(target)}, capsys)
    assert result["failed"] is True and "is not a directory" in result["msg"]


def test_missing_directory_fails_by_default(tmp_path, capsys):
    result = run({"path": str(tmp_path / "absent")}, capsys)
    assert result["failed"] is True and "model directory does not exist" in result["msg"]


@pytest.mark.parametrize("kind", ["absent", "file"])
def test_missing_report_returns_no_model_instead_of_failing(tmp_path, capsys, kind):
    # The preflight's call: no model directory (or a file in its place) is the gate's to judge.
    target = tmp_path / "model"
    if kind == "file":
        target.write_text("{}")
    result = run({"path": str(target), "missing": "report", "min_free_disk_gb": 0}, capsys)
    assert not result.get("failed"), result
    assert result["changed"] is False
    assert result["present"] is False and result["model"] == {}


def test_missing_report_still_reads_a_directory_and_fails_on_a_broken_one(tmp_path, capsys):
    good = tmp_path / "good"
    good.mkdir()
    B.model_dir(str(good), "plain", "BF16")
    result = run({"path": str(good), "missing": "report", "min_free_disk_gb": 0}, capsys)
    assert result["present"] is True and sorted(result["model"]["gate"]) == sorted(GATE_KEYS)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    result = run({"path": str(broken), "missing": "report", "min_free_disk_gb": 0}, capsys)
    assert result["failed"] is True and "config.json" in result["msg"]


def test_negative_threshold_is_refused(tmp_path, capsys):
    result = run({"path": str(tmp_path), "min_free_disk_gb": -1}, capsys)
    assert result["failed"] is True and "min_free_disk_gb" in result["msg"]
