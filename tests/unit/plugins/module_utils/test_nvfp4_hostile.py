# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Hostile safetensors headers and arguments for the converters (issue 24, part 2).

Each class of damage the safetensors format forbids (safetensors/src/tensor.rs, Metadata::validate:
offsets that must tile the data section, known dtypes, whole non-negative dimensions) and each
inconsistency between an index and its shards must end in Nvfp4Error naming what to fix, never in
a copy that is published, a traceback or an OverflowError. Both converters share the reading
(convert() in _nvfp4.py), so each case is run through both targets."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest

np = pytest.importorskip("numpy")

from ansible_collections.labfleet.vllm.plugins.module_utils.converters import _gptq  # noqa: E402
from ansible_collections.labfleet.vllm.plugins.module_utils.formats import _nvfp4  # noqa: E402
from ansible_collections.labfleet.vllm.plugins.module_utils.formats._nvfp4 import Nvfp4Error  # noqa: E402
from test_nvfp4 import write_st  # noqa: E402  (the hand-written safetensors writer, beside this file)

SHARD = "model-00001-of-00001.safetensors"
CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
          "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 1,
          "intermediate_size": 48, "vocab_size": 10, "max_position_embeddings": 128, "torch_dtype": "bfloat16"}
_NP = {"U8": np.uint8, "F8_E4M3": np.uint8, "F32": np.float32, "F16": np.float16, "I64": np.int64}


def _tensors():
    rng = np.random.RandomState(0)
    layer = "model.layers.0.self_attn.q_proj"
    return [(layer + ".weight", "U8", rng.randint(0, 256, size=(32, 16)).astype(np.uint8)),
            (layer + ".weight_scale", "F8_E4M3", rng.randint(0x20, 0x60, size=(32, 2)).astype(np.uint8)),
            (layer + ".weight_scale_2", "F32", np.array(0.01, np.float32)),
            ("model.norm.weight", "F32", np.linspace(0.5, 1.5, 32).astype(np.float32)),
            ("lm_head.weight", "F16", np.full((10, 32), 0.25, np.float16))]


def _checkpoint(root, tensors=None, edit=None, extra=b"", weight_map=None):
    os.makedirs(root)
    tensors = _tensors() if tensors is None else tensors
    write_st(os.path.join(root, SHARD), tensors, edit, extra)
    with open(os.path.join(root, "config.json"), "w") as handle:
        json.dump(CONFIG, handle)
    with open(os.path.join(root, "hf_quant_config.json"), "w") as handle:
        json.dump({"quantization": {"quant_algo": "NVFP4", "group_size": 16}}, handle)
    if weight_map is None:
        weight_map = dict((name, SHARD) for name, _dtype, _arr in tensors)
    with open(os.path.join(root, "model.safetensors.index.json"), "w") as handle:
        json.dump({"metadata": {}, "weight_map": weight_map}, handle)
    return root


def _fp16(src, dest, **kw):
    return _nvfp4.convert_checkpoint(src, dest, **kw)


def _gptq_repack(src, dest, **kw):
    return _gptq.repack_checkpoint(src, dest, group_size=32, **kw)


CONVERTERS = pytest.mark.parametrize("convert", [_fp16, _gptq_repack], ids=["dequantize", "repack"])


def _refused(tmp_path, convert, match, **kw):
    src = _checkpoint(str(tmp_path / "src"), **kw)
    dest = str(tmp_path / "out")
    with pytest.raises(Nvfp4Error, match=match):
        convert(src, dest)
    assert not os.path.exists(dest)
    assert [n for n in os.listdir(str(tmp_path)) if "nvfp4-tmp" in n] == []


def _shift(name, by):
    def edit(header):
        header[name]["data_offsets"] = [o + by for o in header[name]["data_offsets"]]
    return edit


@CONVERTERS
def test_the_intact_checkpoint_converts_and_reads_back(tmp_path, convert):
    """The control case: the same checkpoint, undamaged, converts, and its copy passes the strict reader."""
    src = _checkpoint(str(tmp_path / "src"))
    result = convert(src, str(tmp_path / "out"))
    assert result["changed"] is True
    for shard in result["shards"]:
        header = _nvfp4.read_header(os.path.join(str(tmp_path / "out"), shard))
        assert header["tensors"]


@CONVERTERS
def test_overlapping_byte_ranges_are_refused(tmp_path, convert):
    # lm_head is the last tensor; moving it 8 bytes back makes it overlap model.norm.weight (and leaves 8 bytes over).
    _refused(tmp_path, convert, "overlaps the tensor before it", edit=_shift("lm_head.weight", -8))


@CONVERTERS
def test_a_gap_between_byte_ranges_is_refused(tmp_path, convert):
    _refused(tmp_path, convert, "leaves a gap of 4 bytes", edit=_shift("lm_head.weight", 4), extra=b"\0" * 4)


@CONVERTERS
def test_bytes_after_the_last_tensor_are_refused(tmp_path, convert):
    _refused(tmp_path, convert, "8 bytes after the last tensor belong to no tensor", extra=b"\0" * 8)


@CONVERTERS
@pytest.mark.parametrize("dtype", ["F17", "float16", "", None, 7])
def test_an_unknown_dtype_is_refused(tmp_path, convert, dtype):
    def edit(header):
        header["model.norm.weight"]["dtype"] = dtype
    _refused(tmp_path, convert, "not a safetensors dtype this converter knows", edit=edit)


@CONVERTERS
@pytest.mark.parametrize("shape", [[-32], [True] * 1, ["32"], [32.0], [1.5], [None]])
def test_a_dimension_that_is_not_a_whole_number_is_refused(tmp_path, convert, shape):
    def edit(header):
        header["model.norm.weight"]["shape"] = shape
    _refused(tmp_path, convert, "every dimension must be a whole number of 0 or more", edit=edit)


@CONVERTERS
@pytest.mark.parametrize("offsets", [[-4, 124], [8, 4], [0], ["0", "128"], [0, 128, 256]])
def test_malformed_data_offsets_are_refused(tmp_path, convert, offsets):
    def edit(header):
        header["model.norm.weight"]["data_offsets"] = offsets
    _refused(tmp_path, convert, "data_offsets", edit=edit)


@CONVERTERS
def test_an_index_entry_missing_from_its_shard_is_refused(tmp_path, convert):
    weight_map = dict((name, SHARD) for name, _dtype, _arr in _tensors())
    weight_map["model.layers.0.mlp.up_proj.weight"] = SHARD
    _refused(tmp_path, convert, "places tensor 'model.layers.0.mlp.up_proj.weight' in %s, but that shard's header "
             "has no such tensor" % SHARD, weight_map=weight_map)


@CONVERTERS
@pytest.mark.parametrize("dtype", ["U8", "F16", "F32"])
def test_a_block_scale_of_the_wrong_dtype_is_refused(tmp_path, convert, dtype):
    tensors = _tensors()
    name, _dtype, arr = tensors[1]
    tensors[1] = (name, dtype, arr.astype(_NP[dtype]))
    _refused(tmp_path, convert, "block scale %s is %s" % (name, dtype), tensors=tensors)


@CONVERTERS
def test_a_per_tensor_scale_of_the_wrong_dtype_is_refused(tmp_path, convert):
    tensors = _tensors()
    name, _dtype, _arr = tensors[2]
    tensors[2] = (name, "I64", np.array(1, np.int64))
    _refused(tmp_path, convert, "per-tensor scale %s is I64" % name, tensors=tensors)


@pytest.mark.parametrize("text", ["9" * 400 + "GB", "9" * 400, 10 ** 400, "9" * 20 + "TiB"])
def test_a_huge_max_shard_size_is_refused_not_an_overflow(text):
    with pytest.raises(Nvfp4Error, match="max_shard_size=.* is too large"):
        _nvfp4.parse_size(text)


def test_the_largest_max_shard_size_is_taken():
    assert _nvfp4.parse_size(_nvfp4.MAX_COUNT) == _nvfp4.MAX_COUNT
    assert _nvfp4.parse_size("0.5KB") == 500


def test_a_copy_that_does_not_read_back_is_not_published(tmp_path, monkeypatch):
    """verify_copy runs before the rename: a shard damaged after writing leaves no copy behind."""
    src = _checkpoint(str(tmp_path / "src"))
    real = _nvfp4.verify_copy

    def damage_then_verify(directory, weight_map, outputs):
        with open(os.path.join(directory, SHARD), "ab") as handle:
            handle.write(b"\0" * 8)
        outputs[SHARD]["size"] += 8
        return real(directory, weight_map, outputs)

    monkeypatch.setattr(_nvfp4, "verify_copy", damage_then_verify)
    with pytest.raises(Nvfp4Error, match="belong to no tensor"):
        _nvfp4.convert_checkpoint(src, str(tmp_path / "out"))
    assert not os.path.exists(str(tmp_path / "out"))
    assert [n for n in os.listdir(str(tmp_path)) if "nvfp4-tmp" in n] == []
