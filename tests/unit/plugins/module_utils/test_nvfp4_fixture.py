# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Molecule NVFP4 fixture end to end: tests/fake_model/make_model.py --nvfp4 modelopt writes a
real ModelOpt checkpoint, _nvfp4.convert_checkpoint turns it into FP16, and the independent
reference tests/fake_model/check_fp16_copy.py (no code shared with the collection) accepts the
copy bit for bit and refuses a copy with one byte changed.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import struct
import subprocess
import sys

import pytest

pytest.importorskip("numpy", reason="numpy is not installed (pip install numpy; it is in requirements-dev.txt)")

from ansible_collections.labfleet.vllm.plugins.module_utils.probes._model import read_model_dir  # noqa: E402
from ansible_collections.labfleet.vllm.plugins.module_utils.formats._nvfp4 import convert_checkpoint  # noqa: E402

FAKE_MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "fake_model")
MAKE_MODEL = os.path.join(FAKE_MODEL, "make_model.py")
CHECK = os.path.join(FAKE_MODEL, "check_fp16_copy.py")

# tiny-llama (hidden 256, 2 layers, 4 heads, 2 KV heads, intermediate 512, vocab 1024):
# embed 1024*256 + lm_head 1024*256 + norm 256
# + 2 * (q 256*256 + k 128*256 + v 128*256 + o 256*256 + 3 * 512*256 + 2 norms of 256)
TINY_PARAMS = 2 * 1024 * 256 + 256 + 2 * (65536 + 32768 + 32768 + 65536 + 3 * 131072 + 512)
# embed, lm_head, model.norm + 2 * (7 Linear + 2 norms)
TINY_TENSORS = 3 + 2 * 9
LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def _run(*argv):
    proc = subprocess.run([sys.executable] + list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=300, check=False)
    return proc.returncode, proc.stdout


def _header(path):
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        return 8 + length, json.loads(handle.read(length).decode("utf-8"))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(src, dest, convert_checkpoint result) of the tiny NVFP4 model, built once for the module."""
    root = tmp_path_factory.mktemp("nvfp4_fixture")
    src, dest = str(root / "src"), str(root / "dest")
    rc, out = _run(MAKE_MODEL, src, "--preset", "tiny-llama", "--nvfp4", "modelopt")
    assert rc == 0, out
    # 1 MB shards: the FP16 copy (3.4 MB) spans several files, so the checker reads the index
    result = convert_checkpoint(src, dest, layout="auto", max_shard_size="1MB")
    return src, dest, result


def test_fixture_is_a_modelopt_nvfp4_checkpoint(checkpoint):
    src = checkpoint[0]
    _start, header = _header(os.path.join(src, "model-00001-of-00002.safetensors"))
    q = header["model.layers.0.self_attn.k_proj.weight"]
    assert (q["dtype"], q["shape"]) == ("U8", [128, 128])
    scale = header["model.layers.0.self_attn.k_proj.weight_scale"]
    assert (scale["dtype"], scale["shape"]) == ("F8_E4M3", [128, 16])
    for aux in ("weight_scale_2", "input_scale"):
        entry = header["model.layers.0.self_attn.k_proj." + aux]
        assert (entry["dtype"], entry["shape"]) == ("F32", [])
    assert header["model.embed_tokens.weight"]["dtype"] == "BF16"
    with open(os.path.join(src, "hf_quant_config.json")) as handle:
        hf_quant = json.load(handle)["quantization"]
    assert (hf_quant["quant_algo"], hf_quant["group_size"]) == ("NVFP4", 16)

    model = read_model_dir(src)
    assert model["quant_method"] == "modelopt_fp4"
    assert (model["quant_format"], model["quant_bits"], model["quant_group_size"]) == ("nvfp4", 4, 16)
    assert model["quant_source"] == "config.json:quantization_config"
    assert model["param_count_logical"] == TINY_PARAMS == 1705216
    assert model["fp16_weight_bytes"] == 2 * TINY_PARAMS
    assert model["max_position_embeddings"] == 32768
    assert model["has_tokenizer"] and model["has_generation_config"]


def test_fixture_data_is_deterministic_and_not_empty(checkpoint, tmp_path):
    src = checkpoint[0]
    again = str(tmp_path / "again")
    rc, out = _run(MAKE_MODEL, again, "--preset", "tiny-llama", "--nvfp4", "modelopt")
    assert rc == 0, out
    for shard in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        with open(os.path.join(src, shard), "rb") as one, open(os.path.join(again, shard), "rb") as two:
            first = one.read()
            assert first == two.read()
        start, header = _header(os.path.join(src, shard))
        for name, info in header.items():
            if name.endswith(".weight_scale"):
                begin, end = info["data_offsets"]
                codes = bytearray(first[start + begin:start + end])
                assert 0x7F not in codes and 0xFF not in codes
                assert sum(1 for c in codes if c >= 0x30) > 0.95 * len(codes)


def test_fp16_copy_is_bit_identical_to_the_reference(checkpoint):
    src, dest, result = checkpoint
    assert result["layout"] == "modelopt"
    assert result["tensors_dequantized"] == 2 * len(LINEARS)
    assert result["tensors_copied"] == TINY_TENSORS - 2 * len(LINEARS)
    assert result["files_copied"] == ["generation_config.json", "tokenizer_config.json"]
    assert result["files_skipped"] == ["hf_quant_config.json"]
    assert len(result["shards"]) == 4
    rc, out = _run(CHECK, src, dest)
    assert rc == 0, out
    summary = "checked %d tensors, %d elements, bit-identical" % (TINY_TENSORS, TINY_PARAMS)
    assert summary == "checked 21 tensors, 1705216 elements, bit-identical"
    assert out.strip().splitlines()[-1] == summary

    model = read_model_dir(dest)
    assert model["quantized"] is False
    assert model["torch_dtype"] == "float16"
    assert model["weight_bytes"] == read_model_dir(src)["fp16_weight_bytes"] == 2 * TINY_PARAMS


def _copy_tree(src, dest):
    os.makedirs(dest)
    for name in os.listdir(src):
        with open(os.path.join(src, name), "rb") as one, open(os.path.join(dest, name), "wb") as two:
            two.write(one.read())


def test_checker_refuses_one_flipped_byte(checkpoint, tmp_path):
    src, dest = checkpoint[0], checkpoint[1]
    broken = str(tmp_path / "broken")
    _copy_tree(dest, broken)
    with open(os.path.join(broken, "model.safetensors.index.json")) as handle:
        weight_map = json.load(handle)["weight_map"]
    name = "model.layers.1.mlp.up_proj.weight"
    shard = os.path.join(broken, weight_map[name])
    start, header = _header(shard)
    begin = header[name]["data_offsets"][0]
    # element (3, 17) of the [512, 256] float16 tensor: flip its high byte's lowest bit (exponent)
    offset = start + begin + 2 * (3 * 256 + 17) + 1
    with open(shard, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)[0]
        handle.seek(offset)
        handle.write(bytes([byte ^ 0x01]))
    rc, out = _run(CHECK, src, broken)
    assert rc == 1, out
    assert out.startswith("MISMATCH %s at (3, 17):" % name), out
    assert "1 of 131072 elements differ" in out


def test_checker_refuses_a_config_that_still_declares_quantization(checkpoint, tmp_path):
    src, dest = checkpoint[0], checkpoint[1]
    broken = str(tmp_path / "broken")
    _copy_tree(dest, broken)
    with open(os.path.join(src, "config.json")) as handle:
        config = json.load(handle)
    config["torch_dtype"] = "float16"
    with open(os.path.join(broken, "config.json"), "w") as handle:
        json.dump(config, handle)
    rc, out = _run(CHECK, src, broken)
    assert rc == 1, out
    assert out.strip() == "MISMATCH DEST config.json still holds quantization_config"
