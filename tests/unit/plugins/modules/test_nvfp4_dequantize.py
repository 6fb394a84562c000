# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""labfleet.vllm.nvfp4_dequantize as Ansible runs it, and scripts/nvfp4_dequantize.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib.util
import json
import os

import pytest

pytest.importorskip("numpy", reason="numpy is not installed (pip install numpy; it is in requirements-dev.txt)")

from ansible.module_utils.testing import patch_module_args  # noqa: E402  ansible-core >= 2.19 (pinned)

from ansible_collections.labfleet.vllm.plugins.module_utils.formats import _nvfp4  # noqa: E402
from ansible_collections.labfleet.vllm.plugins.modules import nvfp4_dequantize  # noqa: E402

_HERE = os.path.dirname(__file__)


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


T = _load("labfleet_test_nvfp4_helpers", os.path.join(_HERE, "..", "module_utils", "test_nvfp4.py"))
SCRIPT = _load("labfleet_nvfp4_script", os.path.join(_HERE, "..", "..", "..", "..", "scripts", "nvfp4_dequantize.py"))


def run(args, capsys, check_mode=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            nvfp4_dequantize.main()
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("layout", ["modelopt", "compressed_tensors"])
def test_converts_then_no_op(tmp_path, capsys, layout):
    src, dest = str(tmp_path / "src"), str(tmp_path / "out")
    truth = T.build_checkpoint(src, layout)
    result = run({"src": src, "dest": dest}, capsys)
    assert not result.get("failed"), result
    assert result["changed"] is True and result["layout"] == layout and result["tensors_dequantized"] == 3
    T.check_output(dest, layout, truth)
    again = run({"src": src, "dest": dest, "layout": layout}, capsys)
    assert again["changed"] is False


def test_check_mode_writes_nothing(tmp_path, capsys):
    src, dest = str(tmp_path / "src"), str(tmp_path / "out")
    T.build_checkpoint(src, "modelopt")
    before = sorted(os.listdir(str(tmp_path)))
    result = run({"src": src, "dest": dest, "max_shard_size": "1000B"}, capsys, check_mode=True)
    assert result["changed"] is True and len(result["shards"]) > 2
    assert sorted(os.listdir(str(tmp_path))) == before


def test_error_message(tmp_path, capsys):
    src = str(tmp_path / "src")
    T.build_checkpoint(src, "modelopt")
    result = run({"src": src, "dest": str(tmp_path / "out"), "max_shard_size": "lots"}, capsys)
    assert result["failed"] is True
    assert result["msg"].startswith("nvfp4_dequantize: max_shard_size='lots' is not a size")


def test_missing_numpy_hint(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(_nvfp4, "HAS_NUMPY", False)
    monkeypatch.setattr(_nvfp4, "NUMPY_IMPORT_ERROR", ImportError("No module named 'numpy'"))
    result = run({"src": str(tmp_path), "dest": str(tmp_path / "out")}, capsys)
    assert result["failed"] is True
    assert "numpy" in result["msg"] and "python3-numpy" in result["msg"]


def test_script(tmp_path, capsys):
    src, dest = str(tmp_path / "src"), str(tmp_path / "out")
    truth = T.build_checkpoint(src, "compressed_tensors")
    assert SCRIPT.main([src, dest, "--check"]) == 0
    assert json.loads(capsys.readouterr().out)["changed"] is True and not os.path.exists(dest)
    assert SCRIPT.main([src, dest, "--layout", "compressed_tensors", "--max-shard-size", "2KB"]) == 0
    T.check_output(dest, "compressed_tensors", truth)
    capsys.readouterr()
    assert SCRIPT.main([src, dest, "--layout", "modelopt"]) == 1
    assert "no NVFP4 layer in the modelopt layout" in capsys.readouterr().err


def test_a_converged_run_reads_no_input_unless_asked(tmp_path, capsys, monkeypatch):
    """verify quick: a finished copy's inputs are matched by size and modification time (no byte read);
    an input touched since is hashed again (same bytes: still the same copy); verify full hashes all."""
    src, dest = str(tmp_path / "src"), str(tmp_path / "out")
    T.build_checkpoint(src, "modelopt")
    assert run({"src": src, "dest": dest}, capsys)["changed"] is True
    manifest = json.load(open(os.path.join(dest, "nvfp4_dequantize_manifest.json")))
    assert all(entry["mtime_ns"] == os.stat(os.path.join(src, name)).st_mtime_ns
               for name, entry in manifest["inputs"].items())
    hashed = []
    real = _nvfp4.sha256_file
    monkeypatch.setattr(_nvfp4, "sha256_file", lambda path, *a, **kw: hashed.append(os.path.basename(path)) or real(path))
    assert run({"src": src, "dest": dest}, capsys)["changed"] is False
    assert hashed == []
    os.utime(os.path.join(src, "config.json"))
    assert run({"src": src, "dest": dest}, capsys)["changed"] is False
    assert hashed == ["config.json"]
    del hashed[:]
    assert run({"src": src, "dest": dest, "verify": "full"}, capsys)["changed"] is False
    assert sorted(hashed) == sorted(manifest["inputs"])


def test_an_input_changed_in_place_with_its_time_restored_is_seen_only_by_full(tmp_path, capsys):
    src, dest = str(tmp_path / "src"), str(tmp_path / "out")
    T.build_checkpoint(src, "modelopt")
    assert run({"src": src, "dest": dest}, capsys)["changed"] is True
    weights = max((os.path.join(src, n) for n in os.listdir(src) if n.endswith(".safetensors")), key=os.path.getsize)
    info = os.stat(weights)
    with open(weights, "r+b") as handle:
        handle.seek(info.st_size - 1)
        last = handle.read(1)
        handle.seek(info.st_size - 1)
        handle.write(bytes([last[0] ^ 0xFF]))
    os.utime(weights, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert run({"src": src, "dest": dest}, capsys)["changed"] is False
    assert run({"src": src, "dest": dest, "verify": "full"}, capsys, check_mode=True)["changed"] is True
