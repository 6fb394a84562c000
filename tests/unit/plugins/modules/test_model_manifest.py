# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""labfleet.vllm.model_manifest as Ansible runs it: arguments in, result or failure out."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib.util
import json
import os
import sys

from ansible_collections.labfleet.vllm.plugins.modules import model_manifest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_hostile_modules import run_module  # noqa: E402  (exit_json / fail_json caught)

_BUILD = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "model", "build.py")
_spec = importlib.util.spec_from_file_location("labfleet_model_fixture_build_manifest", _BUILD)
B = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(B)


def test_module_adds_a_revision_and_converges(tmp_path):
    src = str(tmp_path / "src")
    os.makedirs(src)
    B.model_dir(src, "plain", "BF16")
    path = str(tmp_path / "store" / "llama" / "2026-01")
    kind, result = run_module(model_manifest, {"path": path, "src": src})
    assert kind == "exit" and result["changed"], result
    assert sorted(result) == ["changed", "files", "gate", "hashed_bytes", "manifest_path", "manifest_sha256", "name",
                              "revision", "seconds", "total_bytes"]
    assert result["name"] == "llama" and result["revision"] == "2026-01" and result["files"] == 3
    assert result["gate"]["model_type"] == "llama"
    assert json.load(open(result["manifest_path"]))["total_bytes"] == result["total_bytes"]
    kind, again = run_module(model_manifest, {"path": path})
    assert kind == "exit" and not again["changed"] and again["hashed_bytes"] == 0
    assert again["manifest_sha256"] == result["manifest_sha256"]


def test_module_check_mode_and_failures(tmp_path):
    path = str(tmp_path / "store" / "m" / "r1")
    os.makedirs(path)
    B.model_dir(path, "plain", "BF16")
    kind, result = run_module(model_manifest, {"path": path, "_ansible_check_mode": True})
    assert kind == "exit" and result["changed"] and not os.path.exists(result["manifest_path"])
    kind, result = run_module(model_manifest, {"path": path, "revision": "../x"})
    assert kind == "fail" and "revision must be" in result["msg"] and result["msg"].startswith("model_manifest: ")
    kind, result = run_module(model_manifest, {"path": str(tmp_path / "none")})
    assert kind == "fail" and "is not a directory" in result["msg"]
