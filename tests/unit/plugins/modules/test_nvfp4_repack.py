# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""labfleet.vllm.nvfp4_repack as Ansible runs it, and scripts/nvfp4_repack.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib.util
import json
import os

import pytest

pytest.importorskip("numpy", reason="numpy is not installed (pip install numpy; it is in requirements-dev.txt)")

from ansible.module_utils.testing import patch_module_args  # noqa: E402  ansible-core >= 2.19 (pinned)

from ansible_collections.labfleet.vllm.plugins.module_utils.formats import _nvfp4  # noqa: E402
from ansible_collections.labfleet.vllm.plugins.modules import nvfp4_repack  # noqa: E402

_HERE = os.path.dirname(__file__)
_SPEC = importlib.util.spec_from_file_location("labfleet_test_gptq_checkpoint",
                                               os.path.join(_HERE, "..", "module_utils", "test_gptq_checkpoint.py"))
C = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(C)
_SPEC = importlib.util.spec_from_file_location("labfleet_nvfp4_repack_script",
                                               os.path.join(_HERE, "..", "..", "..", "..", "scripts", "nvfp4_repack.py"))
SCRIPT = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(SCRIPT)


def run(args, capsys, check_mode=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            nvfp4_repack.main()
    return json.loads(capsys.readouterr().out)


def check_layers(dest, truth, group, divide):
    out = C.read_dir(dest)
    for prefix, (packed, scale, tensor_scale) in truth.items():
        arrays = [out[prefix + "." + part][1] for part in ("qweight", "qzeros", "scales", "g_idx")]
        assert arrays[2].shape[0] == packed.shape[1] * 2 // group
        exact = C.R.ref_nvfp4(packed, scale, tensor_scale, divide=divide)
        assert C.R.rel_rms(C.decode(*arrays), exact) < {32: 0.079, 64: 0.095}[group]


@pytest.mark.parametrize("layout", ["modelopt", "compressed_tensors"])
def test_converts_then_no_op(tmp_path, capsys, layout):
    src, dest = str(tmp_path / "src"), str(tmp_path / "out")
    truth = C.small_checkpoint(src, layout=layout)
    result = run({"src": src, "dest": dest}, capsys)
    assert not result.get("failed"), result
    assert result["changed"] is True and result["layout"] == layout and result["tensors_repacked"] == 2
    assert result["group_size"] == 32 and 4.6 < result["bits_per_weight"] < 5.2
    assert 0 < result["error"]["rel_rms"] < 0.079
    check_layers(dest, truth, 32, layout == "compressed_tensors")
    again = run({"src": src, "dest": dest, "group_size": 32, "layout": layout}, capsys)
    assert again["changed"] is False and again["error"] == result["error"]
    other = run({"src": src, "dest": dest, "group_size": 64}, capsys)
    assert other["changed"] is True and other["group_size"] == 64
    check_layers(dest, truth, 64, layout == "compressed_tensors")


def test_check_mode_writes_nothing(tmp_path, capsys):
    src, dest = str(tmp_path / "src"), str(tmp_path / "out")
    C.small_checkpoint(src)
    before = sorted(os.listdir(str(tmp_path)))
    result = run({"src": src, "dest": dest, "max_shard_size": "1000B"}, capsys, check_mode=True)
    assert result["changed"] is True and len(result["shards"]) == 3 and result["group_size"] == 32
    # down_proj's 128 inputs split 8 ways leave 16 per GPU, less than a group of 32
    assert "error" not in result and result["tensor_parallel_sizes"] == [1, 2, 4]
    assert sorted(os.listdir(str(tmp_path))) == before


def test_error_messages(tmp_path, capsys, monkeypatch):
    src = str(tmp_path / "src")
    C.small_checkpoint(src, shapes={"model.layers.0.mlp.down_proj": (64, 48)})
    result = run({"src": src, "dest": str(tmp_path / "out"), "group_size": 32}, capsys)
    assert result["failed"] is True
    assert result["msg"].startswith("nvfp4_repack: model.layers.0.mlp.down_proj: in_features 48 is not a multiple of "
                                    "group_size 32")
    for group in (16, 48):      # 16: vLLM's gptq kernels compute it wrong, so it is not a choice
        result = run({"src": src, "dest": str(tmp_path / "out"), "group_size": group}, capsys)
        assert result["failed"] is True and "group_size" in result["msg"] and "32, 64, 128" in result["msg"]
    monkeypatch.setattr(_nvfp4, "HAS_NUMPY", False)
    result = run({"src": src, "dest": str(tmp_path / "out")}, capsys)
    assert result["failed"] is True and result["msg"].startswith("nvfp4_repack: numpy is required")
    assert "python3-numpy" in result["msg"]


def test_script(tmp_path, capsys):
    src, dest = str(tmp_path / "src"), str(tmp_path / "out")
    truth = C.small_checkpoint(src, layout="modelopt")
    assert SCRIPT.main([src, dest, "--check"]) == 0
    assert json.loads(capsys.readouterr().out)["changed"] is True and not os.path.exists(dest)
    assert SCRIPT.main([src, dest, "--group-size", "64", "--max-shard-size", "2KB"]) == 0
    assert json.loads(capsys.readouterr().out)["tensors_repacked"] == 2
    check_layers(dest, truth, 64, False)
    assert SCRIPT.main([src, dest, "--group-size", "16"]) == 1
    assert "nvfp4_repack: group_size=16: vLLM's gptq method (exllama kernels)" in capsys.readouterr().err
    assert SCRIPT.main([src, dest, "--group-size", "20"]) == 1
    assert "group_size='20' is not one of 32, 64, 128" in capsys.readouterr().err
    assert SCRIPT.main([src, dest, "--layout", "compressed_tensors"]) == 1
    assert "no NVFP4 layer in the compressed_tensors layout" in capsys.readouterr().err
