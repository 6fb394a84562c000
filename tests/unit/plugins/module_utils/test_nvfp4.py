# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""NVFP4 -> FP16 dequantizer: tables, both layouts, bit-exactness, end-to-end conversion.

The references here are written independently of the code under test: E2M1 and E4M3 are decoded
bit field by bit field with math.ldexp, safetensors files are written and read with struct/json.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import functools
import json
import math
import os
import struct
import time

import pytest

np = pytest.importorskip("numpy", reason="numpy is not installed (pip install numpy; it is in requirements-dev.txt)")

from ansible_collections.labfleet.vllm.plugins.module_utils.formats import _nvfp4  # noqa: E402
from ansible_collections.labfleet.vllm.plugins.module_utils.formats._nvfp4 import (  # noqa: E402
    E2M1_VALUES,
    Nvfp4Error,
    byte_lut,
    convert_checkpoint,
    dequantize_compressed_tensors,
    dequantize_modelopt,
    detect_layout,
    e4m3_table,
)


# ---------------------------------------------------------------------------------------------
# Independent references
# ---------------------------------------------------------------------------------------------


def ref_e2m1(code):
    """FP4 E2M1: sign bit 3, exponent bits 2-1 (bias 1), mantissa bit 0; exponent 0 is subnormal."""
    sign = -1.0 if code & 0x8 else 1.0
    exp = (code >> 1) & 0x3
    man = code & 0x1
    mag = man * 0.5 if exp == 0 else math.ldexp(1.0 + man / 2.0, exp - 1)
    return sign * mag


def ref_e4m3(code):
    """float8_e4m3fn: sign bit 7, exponent bits 6-3 (bias 7), mantissa bits 2-0; S.1111.111 is NaN."""
    sign = -1.0 if code & 0x80 else 1.0
    exp = (code >> 3) & 0xF
    man = code & 0x7
    if exp == 0xF and man == 0x7:
        return float("nan")
    if exp == 0:
        return sign * math.ldexp(man, -9)  # man/8 * 2^-6
    return sign * math.ldexp(8 + man, exp - 10)  # (1 + man/8) * 2^(exp-7)


def ref_dequant(packed, scale, tensor_scale, divide):
    """Per element, float32 block scale, float32 product, one cast to float16."""
    rows, half = packed.shape
    out = np.empty((rows, half * 2), dtype=np.float16)
    ts = np.float32(tensor_scale)
    for r in range(rows):
        for c in range(half * 2):
            byte = int(packed[r, c // 2])
            nib = byte & 0xF if c % 2 == 0 else byte >> 4
            sf = np.float32(ref_e4m3(int(scale[r, c // 16])))
            block = sf / ts if divide else sf * ts
            with np.errstate(over="ignore", invalid="ignore"):
                out[r, c] = np.float16(np.float32(ref_e2m1(nib)) * block)
    return out


def pack(codes):
    """[rows, cols] nibble codes -> [rows, cols/2] bytes, element 2i in the low nibble."""
    codes = np.asarray(codes, dtype=np.uint8)
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)


def same_bits(a, b):
    return a.shape == b.shape and np.array_equal(a.view(np.uint16), b.view(np.uint16))


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", range(16))
def test_every_e2m1_code(code):
    expected = ref_e2m1(code)
    assert E2M1_VALUES[code] == expected
    assert math.copysign(1.0, E2M1_VALUES[code]) == (-1.0 if code >= 8 else 1.0)


def test_e2m1_table_matches_facts():
    assert E2M1_VALUES[:8] == (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
    assert max(abs(v) for v in E2M1_VALUES) == 6.0


def test_all_256_e4m3_codes():
    table = e4m3_table()
    assert table.dtype == np.float32 and table.shape == (256,)
    for code in range(256):
        want = ref_e4m3(code)
        if math.isnan(want):
            assert np.isnan(table[code]), code
        else:
            assert float(table[code]) == want, (code, float(table[code]), want)
            assert math.copysign(1.0, float(table[code])) == math.copysign(1.0, want)


def test_e4m3_landmarks():
    table = e4m3_table()
    assert float(table[0x7E]) == 448.0  # max finite
    assert float(table[0x38]) == 1.0
    assert float(table[0x01]) == 2.0 ** -9  # smallest subnormal
    assert float(table[0x08]) == 2.0 ** -6  # smallest normal
    assert float(table[0x80]) == 0.0 and math.copysign(1.0, float(table[0x80])) == -1.0
    assert [c for c in range(256) if np.isnan(table[c])] == [0x7F, 0xFF]
    assert not np.isinf(table).any()


def test_byte_lut_both_nibbles():
    lut = byte_lut()
    assert lut.shape == (256, 2)
    for byte in range(256):
        assert float(lut[byte, 0]) == ref_e2m1(byte & 0xF)
        assert float(lut[byte, 1]) == ref_e2m1(byte >> 4)
    assert byte_lut(np.float16).dtype == np.float16


# ---------------------------------------------------------------------------------------------
# Dequantization
# ---------------------------------------------------------------------------------------------


ONE = 0x38  # e4m3 1.0


def test_nibble_positions():
    # element 0 = low nibble (code 0x2 -> 1.0), element 1 = high nibble (code 0xF -> -6.0)
    packed = np.full((1, 8), 0xF2, dtype=np.uint8)
    scale = np.full((1, 1), ONE, dtype=np.uint8)
    out = dequantize_modelopt(packed, scale, 1.0)
    assert out.dtype == np.float16 and out.shape == (1, 16)
    assert out[0, 0::2].tolist() == [1.0] * 8
    assert out[0, 1::2].tolist() == [-6.0] * 8


def test_every_code_in_each_nibble_position():
    codes = np.array([list(range(16))], dtype=np.uint8)
    for row in (codes, codes[:, ::-1].copy()):
        out = dequantize_modelopt(pack(row), np.full((1, 1), ONE, dtype=np.uint8), 1.0)
        assert out[0].tolist() == [ref_e2m1(int(c)) for c in row[0]]


def test_modelopt_multiplies_and_ct_divides():
    packed = pack(np.full((2, 32), 0x7, dtype=np.uint8))  # 6.0
    scale = np.array([[0x40, 0x38], [0x30, 0x48]], dtype=np.uint8)  # 2, 1, 0.5, 4
    mo = dequantize_modelopt(packed, scale, 0.25)
    ct = dequantize_compressed_tensors(packed, scale, 4.0)
    assert mo[:, ::16].tolist() == [[3.0, 1.5], [0.75, 6.0]]
    assert same_bits(mo, ct)


@pytest.mark.parametrize("rows,cols", [(1, 16), (3, 16), (1, 48), (5, 80), (7, 32), (17, 144)])
@pytest.mark.parametrize("divide", [False, True])
def test_bit_identical_to_reference(rows, cols, divide):
    rng = np.random.RandomState(rows * 1000 + cols + divide)
    packed = rng.randint(0, 256, size=(rows, cols // 2)).astype(np.uint8)
    scale = rng.randint(0, 0x7F, size=(rows, cols // 16)).astype(np.uint8)  # no NaN codes, both signs below
    scale[rng.rand(*scale.shape) < 0.3] |= 0x80
    tensor_scale = float(np.float32(10.0 ** rng.uniform(-9, 1)))
    if divide:
        tensor_scale = float(np.float32(1.0 / tensor_scale))
        got = dequantize_compressed_tensors(packed, scale, tensor_scale)
    else:
        got = dequantize_modelopt(packed, scale, tensor_scale)
    want = ref_dequant(packed, scale, tensor_scale, divide)
    assert same_bits(got, want)


def test_bit_identical_across_row_blocks(monkeypatch):
    monkeypatch.setattr(_nvfp4, "BLOCK_ELEMENTS", 64)  # 2 rows of 32 per block, 5 blocks
    rng = np.random.RandomState(7)
    packed = rng.randint(0, 256, size=(9, 16)).astype(np.uint8)
    scale = rng.randint(0, 0x7F, size=(9, 2)).astype(np.uint8)
    assert same_bits(dequantize_modelopt(packed, scale, 3e-4), ref_dequant(packed, scale, 3e-4, False))


def test_bit_identical_across_gathers(monkeypatch):
    monkeypatch.setattr(_nvfp4, "GATHER_BLOCKS", 3)  # 18 blocks of 16 elements, gathered 3 at a time
    rng = np.random.RandomState(8)
    packed = rng.randint(0, 256, size=(9, 16)).astype(np.uint8)
    scale = rng.randint(0, 0x7F, size=(9, 2)).astype(np.uint8)
    assert same_bits(dequantize_compressed_tensors(packed, scale, 7.0), ref_dequant(packed, scale, 7.0, True))


def test_gather_index_every_code_and_byte(monkeypatch):
    monkeypatch.setattr(_nvfp4, "GATHER_BLOCKS", 1000)  # not a divisor of the 8192 blocks
    codes = np.repeat(np.arange(256), 32).astype(np.uint8)  # block g: code g // 32, bytes (g % 32) * 8 ...
    packed = np.tile(np.arange(256), 256).astype(np.uint8).reshape(-1, 8)
    out = np.zeros((8192, 8), dtype=np.uint32)
    _nvfp4.gather_blocks(np.arange(65536, dtype=np.uint32), packed, codes, out)
    assert (out == (codes.astype(np.uint32)[:, None] << 8 | packed)).all()


def test_fp16_subnormals_round_to_nearest_even():
    # 1.0 * 2^-9 * 2^-16 = 2^-25: exactly half of the smallest fp16 subnormal (2^-24) -> ties to even = 0
    packed = pack(np.array([[0x2] * 16]))
    out = dequantize_modelopt(packed, np.full((1, 1), 0x01, dtype=np.uint8), 2.0 ** -16)
    assert out.view(np.uint16)[0, 0] == 0
    # 1.5 * 2^-25 rounds up to 2^-24
    out = dequantize_modelopt(pack(np.array([[0x3] * 16])), np.full((1, 1), 0x01, dtype=np.uint8), 2.0 ** -16)
    assert out.view(np.uint16)[0, 0] == 1


def test_nan_scale_poisons_its_block_only():
    packed = pack(np.zeros((1, 32), dtype=np.uint8))  # all +0.0
    scale = np.array([[0x7F, ONE]], dtype=np.uint8)
    out = dequantize_modelopt(packed, scale, 1.0)
    assert np.isnan(out[0, :16]).all()
    assert (out[0, 16:] == 0).all()


def test_overflow_becomes_inf():
    packed = pack(np.full((1, 16), 0x7, dtype=np.uint8))  # 6 * 448 * 100 > 65504
    out = dequantize_modelopt(packed, np.full((1, 1), 0x7E, dtype=np.uint8), 100.0)
    assert np.isinf(out).all() and (out > 0).all()


@pytest.mark.parametrize("bad", [0.0, float("nan"), float("inf")])
def test_bad_tensor_scale_refused(bad):
    with pytest.raises(Nvfp4Error, match="per-tensor scale"):
        dequantize_compressed_tensors(np.zeros((1, 8), np.uint8), np.zeros((1, 1), np.uint8), bad)


def test_shape_errors():
    with pytest.raises(Nvfp4Error, match="multiple of the NVFP4 block size"):
        dequantize_modelopt(np.zeros((1, 4), np.uint8), np.zeros((1, 0), np.uint8), 1.0)
    with pytest.raises(Nvfp4Error, match="block scale shape"):
        dequantize_modelopt(np.zeros((2, 8), np.uint8), np.zeros((2, 2), np.uint8), 1.0)


def test_parse_size():
    assert _nvfp4.parse_size("5GB") == 5 * 10 ** 9
    assert _nvfp4.parse_size("512MiB") == 512 * 2 ** 20
    assert _nvfp4.parse_size("1000") == 1000
    with pytest.raises(Nvfp4Error, match="max_shard_size"):
        _nvfp4.parse_size("five gigs")


# ---------------------------------------------------------------------------------------------
# Synthetic checkpoints (written with struct/json, independently of the converter)
# ---------------------------------------------------------------------------------------------

_ST = {"U8": np.uint8, "F8_E4M3": np.uint8, "F32": np.float32, "F16": np.float16, "BF16": np.uint16,
       "I64": np.int64}


def write_st(path, tensors, edit=None, extra=b""):
    """tensors: list of (name, st_dtype, numpy array); raw little-endian bytes in list order.
    ``edit(header)`` may damage the header before it is written, ``extra`` bytes follow the data
    (test_nvfp4_hostile.py)."""
    header, blobs, offset = {}, [], 0
    for name, dtype, arr in tensors:
        raw = np.ascontiguousarray(arr, dtype=_ST[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(np.shape(arr)), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if edit:
        edit(header)
    text = json.dumps(header).encode("utf-8")
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(text)) + text + b"".join(blobs) + extra)


def read_st(path):
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length).decode("utf-8"))
        data = handle.read()
    header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        np_dtype = {"F16": np.float16, "I64": np.int64, "U8": np.uint8, "F32": np.float32}[info["dtype"]]
        out[name] = (info["dtype"], np.frombuffer(data[begin:end], dtype=np_dtype).reshape(info["shape"]))
    return out


def to_bf16(values):
    """float32 values exactly representable in bfloat16 -> their uint16 bits."""
    return (np.asarray(values, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


# bfloat16-exact values (at most 8 significant bits), also exact in float16
EMB = ((np.arange(320) % 256) / 8.0 - 16).astype(np.float32).reshape(10, 32)
LAYERS = ("model.layers.0.self_attn.q_proj", "model.layers.0.mlp.down_proj", "model.layers.1.self_attn.o_proj")
SHAPES = {"model.layers.0.self_attn.q_proj": (32, 32), "model.layers.0.mlp.down_proj": (3, 48),
          "model.layers.1.self_attn.o_proj": (1, 16)}
CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
          "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
          "intermediate_size": 48, "vocab_size": 10, "max_position_embeddings": 128, "torch_dtype": "bfloat16"}


def build_checkpoint(root, layout, quant_file="native", seed=0):
    """Write a small NVFP4 checkpoint in two shards; return {layer: (packed, scale, tensor_scale)}."""
    rng = np.random.RandomState(seed)
    os.makedirs(root)
    truth, shard1, shard2 = {}, [], []
    for i, layer in enumerate(LAYERS):
        rows, cols = SHAPES[layer]
        packed = rng.randint(0, 256, size=(rows, cols // 2)).astype(np.uint8)
        scale = rng.randint(0x20, 0x60, size=(rows, cols // 16)).astype(np.uint8)
        ts = np.float32(rng.uniform(1e-4, 1e-2) if layout == "modelopt" else rng.uniform(100, 10000))
        truth[layer] = (packed, scale, float(ts))
        target = shard1 if i < 2 else shard2
        if layout == "modelopt":
            target += [(layer + ".weight", "U8", packed), (layer + ".weight_scale", "F8_E4M3", scale),
                       (layer + ".weight_scale_2", "F32", np.array(ts)),
                       (layer + ".input_scale", "F32", np.array(0.5, np.float32))]
        else:
            target += [(layer + ".weight_packed", "U8", packed), (layer + ".weight_scale", "F8_E4M3", scale),
                       (layer + ".weight_global_scale", "F32", np.array([ts])),
                       (layer + ".input_global_scale", "F32", np.array([2.0], np.float32))]
    shard1.append(("model.layers.0.self_attn.k_proj.k_scale", "F32", np.array(1.0, np.float32)))
    shard1.insert(0, ("model.embed_tokens.weight", "BF16", to_bf16(EMB)))
    shard2 += [("model.norm.weight", "F32", np.linspace(0.5, 1.5, 32).astype(np.float32)),
               ("model.rotary_emb.position_ids", "I64", np.arange(5, dtype=np.int64)),
               ("lm_head.weight", "F16", np.full((10, 32), 0.25, np.float16))]
    write_st(os.path.join(root, "model-00001-of-00002.safetensors"), shard1)
    write_st(os.path.join(root, "model-00002-of-00002.safetensors"), shard2)
    weight_map = dict((n, "model-00001-of-00002.safetensors") for n, _dtype, _arr in shard1)
    weight_map.update((n, "model-00002-of-00002.safetensors") for n, _dtype, _arr in shard2)
    with open(os.path.join(root, "model.safetensors.index.json"), "w") as handle:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, handle)
    config = dict(CONFIG)
    if quant_file == "reference":
        with open(os.path.join(root, "quant_config.json"), "w") as handle:
            json.dump({"quant_method": "nvfp4", "block_size": 16, "scale_bits": 8}, handle)
    elif layout == "modelopt":
        with open(os.path.join(root, "hf_quant_config.json"), "w") as handle:
            json.dump({"producer": {"name": "modelopt", "version": "0.29.0"},
                       "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None, "group_size": 16,
                                        "exclude_modules": ["lm_head"]}}, handle)
    else:
        config["quantization_config"] = {
            "quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
            "config_groups": {"group_0": {"format": "nvfp4-pack-quantized", "targets": ["Linear"],
                                          "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group",
                                                      "group_size": 16, "symmetric": True}}},
            "ignore": ["lm_head"]}
    with open(os.path.join(root, "config.json"), "w") as handle:
        json.dump(config, handle)
    for name, text in (("tokenizer.json", '{"version": "1.0"}'), ("tokenizer_config.json", '{"bos_token": "<s>"}'),
                       ("generation_config.json", '{"do_sample": true}'), ("special_tokens_map.json", "{}"),
                       ("pytorch_model.bin", "not copied")):
        with open(os.path.join(root, name), "w") as handle:
            handle.write(text)
    return truth


def check_output(dest, layout, truth):
    with open(os.path.join(dest, "model.safetensors.index.json")) as handle:
        index = json.load(handle)
    tensors = {}
    for shard in sorted(set(index["weight_map"].values())):
        for name, value in read_st(os.path.join(dest, shard)).items():
            assert index["weight_map"][name] == shard
            tensors[name] = value
    assert sorted(tensors) == sorted(index["weight_map"])
    assert index["metadata"]["total_size"] == sum(v[1].nbytes for v in tensors.values())
    for layer, (packed, scale, ts) in truth.items():
        dtype, got = tensors.pop(layer + ".weight")
        assert dtype == "F16"
        assert same_bits(got, ref_dequant(packed, scale, ts, layout == "compressed_tensors"))
    dtype, emb = tensors.pop("model.embed_tokens.weight")
    assert dtype == "F16" and emb.tolist() == EMB.tolist()
    dtype, norm = tensors.pop("model.norm.weight")
    assert dtype == "F16" and same_bits(norm, np.linspace(0.5, 1.5, 32).astype(np.float32).astype(np.float16))
    dtype, pos = tensors.pop("model.rotary_emb.position_ids")
    assert dtype == "I64" and pos.tolist() == [0, 1, 2, 3, 4]
    dtype, head = tensors.pop("lm_head.weight")
    assert dtype == "F16" and (head == 0.25).all()
    assert tensors == {}  # scales, input scales and k_scale dropped
    with open(os.path.join(dest, "config.json")) as handle:
        config = json.load(handle)
    assert "quantization_config" not in config and config["torch_dtype"] == "float16"
    assert config["num_hidden_layers"] == 2
    files = sorted(os.listdir(dest))
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "special_tokens_map.json"):
        assert name in files
    for name in ("hf_quant_config.json", "quant_config.json", "pytorch_model.bin"):
        assert name not in files
    with open(os.path.join(dest, "tokenizer_config.json")) as handle:
        assert json.load(handle) == {"bos_token": "<s>"}


@pytest.mark.parametrize("layout", ["modelopt", "compressed_tensors"])
def test_convert_end_to_end(tmp_path, layout):
    src, dest = str(tmp_path / "src"), str(tmp_path / "out")
    truth = build_checkpoint(src, layout)
    assert detect_layout(src) == layout
    result = convert_checkpoint(src, dest)
    assert result["changed"] is True and result["layout"] == layout
    assert result["tensors_dequantized"] == 3 and result["tensors_copied"] == 4
    assert result["tensors_dropped"] == 3 + 1  # input scales and k_scale; block scales are used, not dropped
    assert result["shards"] == ["model-00001-of-00001.safetensors"]
    assert os.path.isfile(result["manifest"])
    assert result["files_skipped"] == ["hf_quant_config.json", "pytorch_model.bin"] if layout == "modelopt" \
        else result["files_skipped"] == ["pytorch_model.bin"]
    check_output(dest, layout, truth)
    assert result["output_bytes"] == sum(os.path.getsize(os.path.join(dest, f)) for f in os.listdir(dest)
                                         if f.endswith(".safetensors") or f.startswith(("tokenizer", "generation",
                                                                                        "special")))
    assert [n for n in os.listdir(str(tmp_path)) if "nvfp4-tmp" in n] == []

    again = convert_checkpoint(src, dest)
    assert again["changed"] is False


@pytest.mark.parametrize("layout", ["modelopt", "compressed_tensors"])
def test_reference_quant_config_matched_by_names(tmp_path, layout):
    src, dest = str(tmp_path / "src"), str(tmp_path / "out")
    truth = build_checkpoint(src, layout, quant_file="reference")
    assert detect_layout(src) == layout
    assert convert_checkpoint(src, dest)["layout"] == layout
    check_output(dest, layout, truth)


def test_unknown_tensor_names_listed(tmp_path):
    src = str(tmp_path / "src")
    os.makedirs(src)
    write_st(os.path.join(src, "model.safetensors"), [("blk.0.qweight_fp4", "U8", np.zeros((2, 8), np.uint8))])
    with open(os.path.join(src, "quant_config.json"), "w") as handle:
        json.dump({"quant_method": "nvfp4", "block_size": 16, "scale_bits": 8}, handle)
    with pytest.raises(Nvfp4Error, match=r"match neither layout.*blk\.0\.qweight_fp4"):
        detect_layout(src)


def test_not_nvfp4_is_refused_with_names(tmp_path):
    src = str(tmp_path / "src")
    os.makedirs(src)
    write_st(os.path.join(src, "model.safetensors"), [("model.norm.weight", "F32", np.ones(4, np.float32))])
    with open(os.path.join(src, "config.json"), "w") as handle:
        json.dump({"quantization_config": {"quant_method": "gptq", "bits": 4}}, handle)
    with pytest.raises(Nvfp4Error, match=r"not recognised as an NVFP4 checkpoint.*'gptq'.*model\.norm\.weight"):
        convert_checkpoint(src, str(tmp_path / "out"))


def test_wrong_forced_layout(tmp_path):
    src = str(tmp_path / "src")
    build_checkpoint(src, "modelopt")
    with pytest.raises(Nvfp4Error, match="no NVFP4 layer in the compressed_tensors layout"):
        convert_checkpoint(src, str(tmp_path / "out"), layout="compressed_tensors")


def test_sharding(tmp_path):
    src, dest = str(tmp_path / "src"), str(tmp_path / "out")
    truth = build_checkpoint(src, "modelopt")
    result = convert_checkpoint(src, dest, max_shard_size="1000B")
    assert len(result["shards"]) > 2
    assert result["shards"][0] == "model-00001-of-%05d.safetensors" % len(result["shards"])
    check_output(dest, "modelopt", truth)


def shard_bytes(dest):
    out = {}
    for name in sorted(os.listdir(dest)):
        if name.endswith(".safetensors"):
            with open(os.path.join(dest, name), "rb") as handle:
                out[name] = handle.read()
    return out


@pytest.mark.parametrize("workers", [1, 3])
@pytest.mark.parametrize("layout", ["modelopt", "compressed_tensors"])
def test_pieces_and_threads_do_not_change_the_bytes(tmp_path, monkeypatch, layout, workers):
    src = str(tmp_path / "src")
    truth = build_checkpoint(src, layout)
    convert_checkpoint(src, str(tmp_path / "whole"), workers=1)
    # pieces of 64 bytes (2 NVFP4 blocks, 32 float16 of a cast tensor), gathered 1 block at a time
    monkeypatch.setattr(_nvfp4, "BUFFER_BYTES", 64)
    monkeypatch.setattr(_nvfp4, "GATHER_BLOCKS", 1)
    dest = str(tmp_path / "pieces")
    convert_checkpoint(src, dest, workers=workers, max_shard_size="3000B")
    check_output(dest, layout, truth)
    convert_checkpoint(src, str(tmp_path / "one-shard"), workers=workers)
    assert shard_bytes(str(tmp_path / "one-shard")) == shard_bytes(str(tmp_path / "whole"))


def test_block_writer_writes_in_order_with_bounded_buffers(tmp_path, monkeypatch):
    monkeypatch.setattr(_nvfp4, "BUFFER_BYTES", 16)

    def fill(value, out):
        time.sleep(0.001 * (value % 3))  # later pieces often finish first
        out[:] = value

    expected = b""
    with open(str(tmp_path / "out"), "wb") as raw:
        writer = _nvfp4._BlockWriter(raw, depth=2, workers=3)
        for i in range(120):
            nbytes = 1 + i % 16
            writer.compute(nbytes, functools.partial(fill, i))
            expected += bytes([i]) * nbytes
            if i % 40 == 0:
                writer.write(b"marker")
                expected += b"marker"
        assert writer.tell() == len(expected)
        writer.close()
    assert writer.buffers <= 3 + 2 + 1
    assert (tmp_path / "out").read_bytes() == expected


@pytest.mark.parametrize("workers", [1, 3])
def test_a_failing_piece_stops_the_conversion(tmp_path, monkeypatch, workers):
    src, dest = str(tmp_path / "src"), str(tmp_path / "out")
    build_checkpoint(src, "compressed_tensors")
    monkeypatch.setattr(_nvfp4, "BUFFER_BYTES", 64)
    calls = []
    fill = _nvfp4._fill_dequantized

    def fail_once(*args):
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt()
        fill(*args)

    monkeypatch.setattr(_nvfp4, "_fill_dequantized", fail_once)
    with pytest.raises(KeyboardInterrupt):
        convert_checkpoint(src, dest, workers=workers)
    assert not os.path.exists(dest)
    assert os.listdir(str(tmp_path)) == ["src"]


def test_changed_input_reconverts(tmp_path):
    src, dest = str(tmp_path / "src"), str(tmp_path / "out")
    build_checkpoint(src, "modelopt")
    convert_checkpoint(src, dest)
    truth = build_checkpoint(str(tmp_path / "src2"), "modelopt", seed=1)
    for name in os.listdir(str(tmp_path / "src2")):  # same sizes, other bytes: only sha256 can tell
        os.replace(str(tmp_path / "src2" / name), os.path.join(src, name))
    assert convert_checkpoint(src, dest)["changed"] is True
    check_output(dest, "modelopt", truth)
    assert [n for n in os.listdir(str(tmp_path)) if n.startswith(".out.")] == []


def test_interrupted_run_is_not_a_finished_one(tmp_path, monkeypatch):
    src, dest = str(tmp_path / "src"), str(tmp_path / "out")
    truth = build_checkpoint(src, "modelopt")

    def boom(*args, **kwargs):
        raise KeyboardInterrupt()

    monkeypatch.setattr(_nvfp4, "_bf16_to_f32", boom)  # dies half way through the shard
    with pytest.raises(KeyboardInterrupt):
        convert_checkpoint(src, dest)
    monkeypatch.undo()
    assert not os.path.exists(dest)
    assert [n for n in os.listdir(str(tmp_path)) if "nvfp4-tmp" in n] == []
    # a temp dir left by a killed run (manifest included) is never taken for dest
    stale = tmp_path / ".out.nvfp4-tmp-killed"
    stale.mkdir()
    (stale / _nvfp4.MANIFEST_FILE).write_text("{}")
    result = convert_checkpoint(src, dest)
    assert result["changed"] is True
    check_output(dest, "modelopt", truth)


def test_dest_with_missing_shard_is_redone(tmp_path):
    src, dest = str(tmp_path / "src"), str(tmp_path / "out")
    truth = build_checkpoint(src, "modelopt")
    result = convert_checkpoint(src, dest)
    os.remove(os.path.join(dest, result["shards"][0]))
    assert convert_checkpoint(src, dest)["changed"] is True
    check_output(dest, "modelopt", truth)


def test_foreign_dest_refused(tmp_path):
    src, dest = str(tmp_path / "src"), tmp_path / "out"
    build_checkpoint(src, "modelopt")
    dest.mkdir()
    (dest / "config.json").write_text("{}")
    with pytest.raises(Nvfp4Error, match="not empty and holds no nvfp4_dequantize_manifest.json"):
        convert_checkpoint(src, str(dest))
    assert os.listdir(str(dest)) == ["config.json"]


def test_disk_short(tmp_path, monkeypatch):
    src, dest = str(tmp_path / "src"), str(tmp_path / "out")
    build_checkpoint(src, "compressed_tensors")
    need = convert_checkpoint(src, dest, check_mode=True)["output_bytes"]
    monkeypatch.setattr(_nvfp4, "disk_free_bytes", lambda path: 1000)
    with pytest.raises(Nvfp4Error) as err:
        convert_checkpoint(src, dest)
    msg = str(err.value)
    assert "not enough disk space" in msg and "needs %d bytes" % need in msg and "only 1000 bytes" in msg
    assert "set dest to a larger filesystem" in msg
    assert not os.path.exists(dest)


def test_check_mode_writes_nothing(tmp_path):
    src, dest = str(tmp_path / "src"), str(tmp_path / "out")
    build_checkpoint(src, "modelopt")
    before = sorted(os.listdir(str(tmp_path)))
    result = convert_checkpoint(src, dest, check_mode=True)
    assert result["changed"] is True and result["tensors_dequantized"] == 3
    assert result["output_bytes"] > 2 * (32 * 32 + 3 * 48 + 16)
    assert sorted(os.listdir(str(tmp_path))) == before
    convert_checkpoint(src, dest)
    assert convert_checkpoint(src, dest, check_mode=True)["changed"] is False


def test_dest_inside_src_refused(tmp_path):
    src = str(tmp_path / "src")
    build_checkpoint(src, "modelopt")
    with pytest.raises(Nvfp4Error, match="must be outside src"):
        convert_checkpoint(src, os.path.join(src, "fp16"))
