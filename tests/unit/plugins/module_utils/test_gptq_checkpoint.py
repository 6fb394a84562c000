# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""NVFP4 checkpoint -> GPTQ checkpoint (_gptq.repack_checkpoint) end to end.

A real tiny ModelOpt NVFP4 model (tests/fake_model/make_model.py --nvfp4 modelopt) is repacked and
read back by this file's own safetensors reader and GPTQ decoder (struct/json and integer shifts;
no code shared with the collection), compared with the exact NVFP4 values decoded bit field by bit
field (test_nvfp4's references). Then the manifest, the atomic output and hostile inputs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib.util
import json
import math
import os
import struct
import subprocess
import sys

import pytest

np = pytest.importorskip("numpy", reason="numpy is not installed (pip install numpy; it is in requirements-dev.txt)")

from ansible_collections.labfleet.vllm.plugins.module_utils.converters import _gptq  # noqa: E402
from ansible_collections.labfleet.vllm.plugins.module_utils.formats import _nvfp4  # noqa: E402
from ansible_collections.labfleet.vllm.plugins.module_utils.probes._model import read_model_dir  # noqa: E402
from ansible_collections.labfleet.vllm.plugins.module_utils.formats._nvfp4 import Nvfp4Error  # noqa: E402

_HERE = os.path.dirname(os.path.abspath(__file__))
MAKE_MODEL = os.path.join(_HERE, "..", "..", "..", "fake_model", "make_model.py")


# test_gptq's references (and through them test_nvfp4's), loaded by path as the module tests do
_SPEC = importlib.util.spec_from_file_location("labfleet_test_gptq_refs", os.path.join(_HERE, "test_gptq.py"))
R = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(R)
T = R.T
LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
_DTYPES = {"I32": "<i4", "F16": "<f2", "F32": "<f4", "U8": "u1", "F8_E4M3": "u1", "BF16": "<u2", "I64": "<i8"}


def read_dir(path):
    """{name: (safetensors dtype, array)} of every shard named by the index (own reader)."""
    with open(os.path.join(path, "model.safetensors.index.json")) as handle:
        index = json.load(handle)
    out = {}
    for shard in sorted(set(index["weight_map"].values())):
        with open(os.path.join(path, shard), "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length).decode("utf-8"))
            data = handle.read()
        header.pop("__metadata__", None)
        for name, info in header.items():
            begin, end = info["data_offsets"]
            assert index["weight_map"][name] == shard
            out[name] = (info["dtype"], np.frombuffer(data[begin:end], dtype=_DTYPES[info["dtype"]]).reshape(info["shape"]))
    assert sorted(out) == sorted(index["weight_map"])
    assert index["metadata"]["total_size"] == sum(a.nbytes for _d, a in out.values())
    return out


def decode(qweight, qzeros, scales, g_idx):
    """float64 [N, K] = scale * (code - (stored zero + 1)) with int64 shifts (GPTQ v1, as vLLM reads it)."""
    words = qweight.astype(np.int64) & 0xFFFFFFFF
    k = np.arange(words.shape[0] * 8)
    codes = (words[k // 8, :] >> (4 * (k % 8))[:, None]) & 0xF                 # [K, N]
    zwords = qzeros.astype(np.int64) & 0xFFFFFFFF
    n = np.arange(zwords.shape[1] * 8)
    zeros = ((zwords[:, n // 8] >> (4 * (n % 8))[None, :]) & 0xF) + 1            # [G, N]
    group = g_idx.astype(np.int64)
    return (scales.astype(np.float64)[group] * (codes - zeros[group])).T


def bf16_values(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("gptq_tiny")
    src, dest = str(root / "src"), str(root / "gptq")
    proc = subprocess.run([sys.executable, MAKE_MODEL, src, "--preset", "tiny-llama", "--nvfp4", "modelopt"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout
    result = _gptq.repack_checkpoint(src, dest, group_size=32, max_shard_size="1MB")
    return src, dest, result


def test_tiny_model_repacked_in_vllms_gptq_layout(tiny):
    src, dest, result = tiny
    assert result["changed"] is True and result["layout"] == "modelopt" and result["group_size"] == 32
    assert result["tensors_repacked"] == 14 and result["tensors_dequantized"] == 0
    assert result["tensors_copied"] == 7                       # embed, lm_head, model.norm, 2 x 2 norms
    assert result["files_copied"] == ["generation_config.json", "tokenizer_config.json"]
    assert result["files_skipped"] == ["hf_quant_config.json"]
    assert len(result["shards"]) == 2 and result["tensor_parallel_sizes"] == [1, 2, 4, 8]
    source = read_dir(src)
    out = read_dir(dest)
    err2 = ref2 = 0.0
    for layer in range(2):
        for linear in LINEARS:
            prefix = "model.layers.%d.%s" % (layer, linear)
            _d, packed = source[prefix + ".weight"]
            _d, scale = source[prefix + ".weight_scale"]
            _d, scale_2 = source[prefix + ".weight_scale_2"]
            n, k = packed.shape[0], packed.shape[1] * 2
            shapes = dict((part, (out[prefix + "." + part][0], list(out[prefix + "." + part][1].shape)))
                          for part in ("qweight", "qzeros", "scales", "g_idx"))
            assert shapes == {"qweight": ("I32", [k // 8, n]), "qzeros": ("I32", [k // 32, n // 8]),
                              "scales": ("F16", [k // 32, n]), "g_idx": ("I32", [k])}
            for gone in (".weight", ".weight_scale", ".weight_scale_2", ".input_scale"):
                assert prefix + gone not in out
            arrays = [out[prefix + "." + part][1] for part in ("qweight", "qzeros", "scales", "g_idx")]
            assert arrays[3].tolist() == [i // 32 for i in range(k)]
            nibbles = (arrays[1].astype(np.int64)[:, :, None] >> (4 * np.arange(8))) & 0xF
            assert nibbles.max() <= 14                             # stored zeros 0..14 (effective 1..15)
            got = decode(*arrays)
            exact = R.ref_nvfp4(packed, scale, float(scale_2))
            err2 += float(((got - exact) ** 2).sum())
            ref2 += float((exact ** 2).sum())
            assert R.rel_rms(got, exact) < 0.09, prefix
            # the converter's own float16 dequantization is the exact decoded value rounded once
            assert (_gptq.dequantize_gptq(*arrays) == got.astype(np.float16)).all()
    assert abs(result["error"]["rel_rms"] - math.sqrt(err2 / ref2)) < 1e-6
    assert result["error"]["method"] == "search" and result["error"]["worst_tensor"]["tensor"].startswith("model.layers.")
    for name in ("model.embed_tokens.weight", "lm_head.weight", "model.norm.weight",
                 "model.layers.1.input_layernorm.weight"):
        dtype, values = out[name]
        assert dtype == "F16"
        assert (values == bf16_values(source[name][1]).astype(np.float16)).all()
    weights = sum(out[p][1].nbytes for p in out if p.rsplit(".", 1)[-1] in ("qweight", "qzeros", "scales", "g_idx"))
    assert result["bits_per_weight"] == round(weights * 8.0 / result["repacked_weights"], 4)
    assert result["repacked_weights"] == 2 * (65536 + 32768 + 32768 + 65536 + 3 * 131072)


def test_tiny_model_config_and_files(tiny):
    src, dest, result = tiny
    with open(os.path.join(dest, "config.json")) as handle:
        config = json.load(handle)
    assert config["quantization_config"] == {"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": False,
                                             "sym": False, "lm_head": False, "checkpoint_format": "gptq"}
    assert result["quantization_config"] == config["quantization_config"]
    assert _gptq.loader_problems(config["quantization_config"]) == []
    assert config["torch_dtype"] == "float16" and config["num_hidden_layers"] == 2
    assert sorted(os.listdir(dest)) == sorted(result["shards"] + [
        "config.json", "generation_config.json", "model.safetensors.index.json", "nvfp4_repack_manifest.json",
        "tokenizer_config.json"])
    model = read_model_dir(dest)          # model_facts' reader: a GPTQ int4 model of the same parameters
    assert (model["quant_method"], model["quant_bits"], model["quant_group_size"]) == ("gptq", 4, 32)
    assert model["param_count_logical"] == read_model_dir(src)["param_count_logical"]
    total = sum(os.path.getsize(os.path.join(dest, f)) for f in result["shards"] + result["files_copied"])
    assert result["output_bytes"] == total


def test_rerun_is_a_no_op_with_the_recorded_error(tiny):
    src, dest, result = tiny
    again = _gptq.repack_checkpoint(src, dest, group_size=32, max_shard_size="1MB")
    assert again["changed"] is False and again["error"] == result["error"]
    assert _gptq.repack_checkpoint(src, dest, group_size=32, max_shard_size="1MB", check_mode=True)["changed"] is False
    assert _gptq.repack_checkpoint(src, dest, group_size=64, max_shard_size="1MB", check_mode=True)["changed"] is True


def test_an_fp16_copy_is_not_overwritten(tiny, tmp_path):
    src = tiny[0]
    fp16 = str(tmp_path / "fp16")
    _nvfp4.convert_checkpoint(src, fp16)
    with pytest.raises(Nvfp4Error, match="not empty and holds no nvfp4_repack_manifest.json"):
        _gptq.repack_checkpoint(src, fp16)


def test_group_size_16_refused_for_vllm(tiny, tmp_path):
    with pytest.raises(Nvfp4Error, match=r"^group_size=16: vLLM's gptq method \(exllama kernels\) moves to the next "
                                         r"group only every 32 input rows .* use 32, 64, 128$"):
        _gptq.repack_checkpoint(tiny[0], str(tmp_path / "g16"), group_size=16, check_mode=True)
    assert _gptq.VLLM_GROUP_SIZES == (32, 64, 128)


def test_group_size_16_and_128(tiny, tmp_path):
    src = tiny[0]
    source = read_dir(src)
    for group in (16, 128):
        dest = str(tmp_path / ("g%d" % group))
        result = _gptq.repack_checkpoint(src, dest, group_size=group, for_vllm=False)   # 16: for other loaders
        out = read_dir(dest)
        prefix = "model.layers.1.mlp.down_proj"
        arrays = [out[prefix + "." + part][1] for part in ("qweight", "qzeros", "scales", "g_idx")]
        assert arrays[2].shape == (512 // group, 256)
        exact = R.ref_nvfp4(source[prefix + ".weight"][1], source[prefix + ".weight_scale"][1],
                            float(source[prefix + ".weight_scale_2"][1]))
        assert R.rel_rms(decode(*arrays), exact) < {16: 0.07, 128: 0.12}[group]
        assert result["bits_per_weight"] > 4


# ---------------------------------------------------------------------------------------------
# Small checkpoints written here
# ---------------------------------------------------------------------------------------------

CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1,
          "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 16,
          "torch_dtype": "bfloat16"}


def small_checkpoint(root, layout="compressed_tensors", shapes=None, extra=(), lm_head_nvfp4=False):
    """One-shard NVFP4 checkpoint of Gaussian layers {prefix: (out, in)}; returns {prefix: (packed, scale, ts)}."""
    shapes = shapes or {"model.layers.0.self_attn.q_proj": (64, 64), "model.layers.0.mlp.down_proj": (64, 128)}
    if lm_head_nvfp4:
        shapes = dict(shapes, lm_head=(16, 64))
    os.makedirs(root)
    tensors, truth = [("model.embed_tokens.weight", "BF16", T.to_bf16(np.full((16, 64), 0.5, np.float32)))], {}
    for i, (prefix, (rows, cols)) in enumerate(sorted(shapes.items())):
        packed, scale, scale_2 = R.gaussian_layer(rows, cols, seed=i)
        if layout == "modelopt":
            truth[prefix] = (packed, scale, float(scale_2))
            tensors += [(prefix + ".weight", "U8", packed), (prefix + ".weight_scale", "F8_E4M3", scale),
                        (prefix + ".weight_scale_2", "F32", np.array(scale_2))]
        else:
            global_scale = np.float32(1.0) / scale_2
            truth[prefix] = (packed, scale, float(global_scale))
            tensors += [(prefix + ".weight_packed", "U8", packed), (prefix + ".weight_scale", "F8_E4M3", scale),
                        (prefix + ".weight_global_scale", "F32", np.array([global_scale]))]
    tensors += list(extra)
    T.write_st(os.path.join(root, "model.safetensors"), tensors)
    config = dict(CONFIG)
    if layout == "modelopt":
        with open(os.path.join(root, "hf_quant_config.json"), "w") as handle:
            json.dump({"quantization": {"quant_algo": "NVFP4", "group_size": 16}}, handle)
    else:
        config["quantization_config"] = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"}
    with open(os.path.join(root, "config.json"), "w") as handle:
        json.dump(config, handle)
    with open(os.path.join(root, "tokenizer.json"), "w") as handle:
        handle.write('{"version": "1.0"}')
    return truth


def test_compressed_tensors_layout(tmp_path):
    src, dest = str(tmp_path / "src"), str(tmp_path / "out")
    truth = small_checkpoint(src)
    result = _gptq.repack_checkpoint(src, dest, group_size=32)
    assert result["layout"] == "compressed_tensors" and result["tensors_repacked"] == 2
    out = read_dir(dest)
    for prefix, (packed, scale, global_scale) in truth.items():
        arrays = [out[prefix + "." + part][1] for part in ("qweight", "qzeros", "scales", "g_idx")]
        exact = R.ref_nvfp4(packed, scale, global_scale, divide=True)
        assert R.rel_rms(decode(*arrays), exact) < 0.079
    assert result["files_copied"] == ["tokenizer.json"]


def test_lm_head_in_nvfp4_becomes_float16(tmp_path):
    src, dest = str(tmp_path / "src"), str(tmp_path / "out")
    truth = small_checkpoint(src, layout="modelopt", lm_head_nvfp4=True)
    result = _gptq.repack_checkpoint(src, dest, group_size=32)
    assert result["tensors_repacked"] == 2 and result["tensors_dequantized"] == 1
    dtype, head = read_dir(dest)["lm_head.weight"]
    packed, scale, scale_2 = truth["lm_head"]
    assert dtype == "F16" and T.same_bits(head, T.ref_dequant(packed, scale, scale_2, False))


def test_unquantized_linear_refused(tmp_path):
    src = str(tmp_path / "src")
    extra = [("model.layers.0.self_attn.o_proj.weight", "BF16", T.to_bf16(np.zeros((64, 64), np.float32)))]
    small_checkpoint(src, extra=extra)
    with pytest.raises(Nvfp4Error, match=r"model.layers.0.self_attn.o_proj.weight: not NVFP4 in the checkpoint, but "
                                         r"vLLM's gptq loader expects every linear layer repacked .*nvfp4_dequantize"):
        _gptq.repack_checkpoint(src, str(tmp_path / "out"), check_mode=True)


@pytest.mark.parametrize("shape, group, message", [
    ((64, 48), 32, "model.layers.0.mlp.down_proj: in_features 48 is not a multiple of group_size 32"),
    ((60, 64), 32, "model.layers.0.mlp.down_proj: out_features 60 is not a multiple of 8"),
])
def test_odd_layer_refused_before_writing(tmp_path, shape, group, message):
    src, dest = str(tmp_path / "src"), str(tmp_path / "out")
    small_checkpoint(src, shapes={"model.layers.0.mlp.down_proj": shape})
    with pytest.raises(Nvfp4Error, match=message):
        _gptq.repack_checkpoint(src, dest, group_size=group, check_mode=True)
    assert not os.path.exists(dest)


def test_bad_group_size(tmp_path):
    with pytest.raises(Nvfp4Error, match="group_size=24 is not one of 16, 32, 64, 128"):
        _gptq.repack_checkpoint(str(tmp_path), str(tmp_path / "out"), group_size=24)
    assert _gptq.group_size_option("64") == 64
    with pytest.raises(Nvfp4Error, match="group_size='1e2' is not one of"):
        _gptq.group_size_option("1e2")


def test_nan_scale_in_checkpoint_leaves_nothing(tmp_path):
    src, dest = str(tmp_path / "src"), str(tmp_path / "out")
    truth = small_checkpoint(src, layout="modelopt")
    packed, scale, scale_2 = truth["model.layers.0.mlp.down_proj"]
    scale = scale.copy()
    scale[3, 1] = 0xFF
    q = truth["model.layers.0.self_attn.q_proj"]
    tensors = [("model.embed_tokens.weight", "BF16", T.to_bf16(np.full((16, 64), 0.5, np.float32))),
               ("model.layers.0.mlp.down_proj.weight", "U8", packed),
               ("model.layers.0.mlp.down_proj.weight_scale", "F8_E4M3", scale),
               ("model.layers.0.mlp.down_proj.weight_scale_2", "F32", np.array(np.float32(scale_2))),
               ("model.layers.0.self_attn.q_proj.weight", "U8", q[0]),
               ("model.layers.0.self_attn.q_proj.weight_scale", "F8_E4M3", q[1]),
               ("model.layers.0.self_attn.q_proj.weight_scale_2", "F32", np.array(np.float32(q[2])))]
    T.write_st(os.path.join(src, "model.safetensors"), tensors)
    with pytest.raises(Nvfp4Error, match=r"model.layers.0.mlp.down_proj.weight: NVFP4 value at row 3, column 16 is "
                                         r"not finite"):
        _gptq.repack_checkpoint(src, dest)
    assert not os.path.exists(dest)
    assert [n for n in os.listdir(str(tmp_path)) if "nvfp4-tmp" in n] == []


def test_interrupted_run_leaves_nothing(tmp_path, monkeypatch):
    src, dest = str(tmp_path / "src"), str(tmp_path / "out")
    small_checkpoint(src)

    def boom(*args, **kwargs):
        raise KeyboardInterrupt()

    monkeypatch.setattr(_gptq, "fit_groups", boom)
    with pytest.raises(KeyboardInterrupt):
        _gptq.repack_checkpoint(src, dest)
    monkeypatch.undo()
    assert not os.path.exists(dest) and [n for n in os.listdir(str(tmp_path)) if "nvfp4-tmp" in n] == []
    assert _gptq.repack_checkpoint(src, dest)["changed"] is True


def test_disk_short(tmp_path, monkeypatch):
    src, dest = str(tmp_path / "src"), str(tmp_path / "out")
    small_checkpoint(src)
    need = _gptq.repack_checkpoint(src, dest, check_mode=True)["output_bytes"]
    monkeypatch.setattr(_nvfp4, "disk_free_bytes", lambda path: 100)
    with pytest.raises(Nvfp4Error, match="not enough disk space for the GPTQ copy: it needs %d bytes" % need):
        _gptq.repack_checkpoint(src, dest)


# ---------------------------------------------------------------------------------------------
# Hostile inputs: special files, huge shapes, deep JSON end in clear errors, never a hang
# ---------------------------------------------------------------------------------------------


def test_config_json_fifo_refused_without_hanging(tmp_path):
    src = str(tmp_path / "src")
    small_checkpoint(src)
    os.remove(os.path.join(src, "config.json"))
    os.mkfifo(os.path.join(src, "config.json"))
    with pytest.raises(Nvfp4Error, match="config.json: is a FIFO \\(named pipe\\), not a regular file"):
        _gptq.repack_checkpoint(src, str(tmp_path / "out"))


def test_shard_linked_to_a_device_refused(tmp_path):
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero on this system")
    src = str(tmp_path / "src")
    small_checkpoint(src)
    os.symlink("/dev/zero", os.path.join(src, "model-extra.safetensors"))
    with pytest.raises(Nvfp4Error, match="model-extra.safetensors: is a device, not a regular file"):
        _gptq.repack_checkpoint(src, str(tmp_path / "out"))


def test_tokenizer_fifo_is_not_copied(tmp_path):
    src, dest = str(tmp_path / "src"), str(tmp_path / "out")
    small_checkpoint(src)
    os.mkfifo(os.path.join(src, "tokenizer_config.json"))
    result = _gptq.repack_checkpoint(src, dest)
    assert result["files_copied"] == ["tokenizer.json"] and "tokenizer_config.json" not in os.listdir(dest)


def test_huge_shape_refused(tmp_path):
    src = str(tmp_path / "src")
    small_checkpoint(src)
    header = {"model.layers.0.mlp.up_proj.weight": {"dtype": "U8", "shape": [1 << 40, 1 << 20],
                                                    "data_offsets": [0, 1 << 60]}}
    raw = json.dumps(header).encode("utf-8")
    with open(os.path.join(src, "model-huge.safetensors"), "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)) + raw)
    with pytest.raises(Nvfp4Error, match="model-huge.safetensors: tensor 'model.layers.0.mlp.up_proj.weight' lies "
                                         "outside the file"):
        _gptq.repack_checkpoint(src, str(tmp_path / "out"))


def test_deeply_nested_config_refused(tmp_path):
    src = str(tmp_path / "src")
    small_checkpoint(src)
    with open(os.path.join(src, "config.json"), "w") as handle:
        handle.write("[" * 100000 + "]" * 100000)
    with pytest.raises(Nvfp4Error, match="config.json: cannot be read as JSON"):
        _gptq.repack_checkpoint(src, str(tmp_path / "out"))


def test_index_naming_a_number_refused(tmp_path):
    src = str(tmp_path / "src")
    small_checkpoint(src)
    with open(os.path.join(src, "model.safetensors.index.json"), "w") as handle:
        json.dump({"weight_map": {"a": "model.safetensors", "b": 7}}, handle)
    with pytest.raises(Nvfp4Error, match="weight_map names 7, which is not a plain file name"):
        _gptq.repack_checkpoint(src, str(tmp_path / "out"))
