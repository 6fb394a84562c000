# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Model directory reading: config.json, quantization descriptions, safetensors headers."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib.util
import json
import os
import struct

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.converters import _gptq as G
from ansible_collections.labfleet.vllm.plugins.module_utils.probes import _model as M

_BUILD = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "model", "build.py")
_spec = importlib.util.spec_from_file_location("labfleet_model_fixture_build", _BUILD)
B = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(B)


def _model(tmp_path, layout, scheme, **kwargs):
    tensors = B.model_dir(str(tmp_path), layout, scheme, **kwargs)
    return M.read_model_dir(str(tmp_path)), tensors


def _stored(tensors):
    return sum(B.numel(shape) for _name, _dtype, shape in tensors)


# --------------------------------------------------------------------------------------------
# Layouts
# --------------------------------------------------------------------------------------------


def test_reference_deployment_layout_nvfp4_quant_config(tmp_path):
    model, tensors = _model(tmp_path, "reference", "modelopt_nvfp4")
    assert model["model_type"] == "llama"
    assert (model["hidden_size"], model["num_hidden_layers"], model["num_attention_heads"]) == (256, 2, 4)
    assert (model["num_key_value_heads"], model["head_dim"]) == (2, 64)
    assert model["max_position_embeddings"] == 32768
    assert model["torch_dtype"] == "bfloat16"
    assert model["quantized"] is True
    assert model["quant_method"] == "modelopt_fp4"
    assert model["quant_method_aliases"] == ["modelopt_fp4", "nvfp4"]
    assert model["quant_raw_method"] == "nvfp4"
    assert model["quant_source"] == "quant_config.json"
    assert (model["quant_format"], model["quant_bits"], model["quant_group_size"], model["quant_scale_bits"]) == \
        ("nvfp4", 4, 16, 8)
    # vLLM's NVFP4 loaders read hf_quant_config.json, not quant_config.json: say so.
    assert model["quant_source_read_by_vllm"] is False
    assert any("hf_quant_config.json" in note for note in model["notes"])
    assert model["weight_bytes"] == B.tensor_bytes(tensors)
    assert model["weight_file_bytes"] > model["weight_bytes"]
    assert model["weight_index"] is None
    assert model["param_count"] == _stored(tensors)
    assert model["param_count_logical"] == B.logical_params()
    assert model["param_count_method"] == "unpacked"
    assert model["fp16_weight_bytes"] == 2 * B.logical_params()
    assert set(model["dtypes"]) == {"BF16", "F32", "F8_E4M3", "U8"}
    assert model["has_generation_config"] and model["has_tokenizer"]
    assert model["disk_free_bytes"] > 0 and model["disk_total_bytes"] >= model["disk_free_bytes"]
    assert set(model["gate"]) == set(M.GATE_KEYS)
    assert model["gate"]["param_count"] == B.logical_params()
    assert model["gate"]["quant_method"] == "modelopt_fp4"


def test_modelopt_hf_quant_config_nvfp4(tmp_path):
    model = _model(tmp_path, "modelopt_nvfp4", "modelopt_nvfp4")[0]
    assert model["quant_method"] == "modelopt_fp4"
    assert model["quant_source"] == "hf_quant_config.json"
    assert model["quant_source_read_by_vllm"] is True
    assert (model["quant_bits"], model["quant_group_size"]) == (4, 16)
    assert model["param_count_logical"] == B.logical_params()


def _expected_shapes():
    """The tiny model's linear weights per [out, in] shape: q and o [256, 256], k and v [128, 256],
    gate and up [512, 256], down [256, 512], in each of the 2 layers."""
    kv = B.KV_HEADS * B.HEAD_DIM
    return [{"out_features": kv, "in_features": B.HIDDEN, "count": 2 * B.LAYERS},
            {"out_features": B.HIDDEN, "in_features": B.HIDDEN, "count": 2 * B.LAYERS},
            {"out_features": B.HIDDEN, "in_features": B.INTER, "count": B.LAYERS},
            {"out_features": B.INTER, "in_features": B.HIDDEN, "count": 2 * B.LAYERS}]


@pytest.mark.parametrize("layout,scheme", [("modelopt_nvfp4", "modelopt_nvfp4"), ("reference", "modelopt_nvfp4"),
                                           ("ct_nvfp4", "ct_nvfp4")])
def test_nvfp4_linear_weights_size_the_gptq_repack(tmp_path, layout, scheme):
    model = _model(tmp_path, layout, scheme)[0]
    assert model["nvfp4_linear_shapes"] == _expected_shapes()
    # What a copy keeps besides them: embeddings, lm_head and the norms, BF16 stored as float16.
    other = (2 * B.VOCAB * B.HIDDEN + (2 * B.LAYERS + 1) * B.HIDDEN) * 2
    assert model["nvfp4_other_bytes"] == other
    assert [r["group_size"] for r in model["gptq_repack_bytes"]] == list(G.GROUP_SIZES)
    for row in model["gptq_repack_bytes"]:
        linear = sum(s["count"] * G.repacked_tensor_bytes(s["out_features"], s["in_features"], row["group_size"])
                     for s in _expected_shapes())
        assert row["bytes"] == other + linear
    # Smaller groups cost more, and every size is below the FP16 copy's.
    sizes = [r["bytes"] for r in model["gptq_repack_bytes"]]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] < model["fp16_weight_bytes"]
    assert model["gate"]["nvfp4_linear_shapes"] == _expected_shapes()
    assert model["gate"]["nvfp4_other_bytes"] == other


@pytest.mark.parametrize("layout,scheme", [("gptq", "gptq4"), ("modelopt_fp8", "fp8")])
def test_other_checkpoints_have_no_nvfp4_linear_weights(tmp_path, layout, scheme):
    model = _model(tmp_path, layout, scheme)[0]
    assert (model["nvfp4_linear_shapes"], model["nvfp4_other_bytes"], model["gptq_repack_bytes"]) == (None,) * 3


def test_nvfp4_linears_needs_the_block_scale_of_the_right_shape():
    weight = {"dtype": "U8", "shape": [256, 128], "numel": 256 * 128, "bytes": 256 * 128}
    scale = {"dtype": "F8_E4M3", "shape": [256, 16], "numel": 256 * 16, "bytes": 256 * 16}
    norm = {"dtype": "BF16", "shape": [256], "numel": 256, "bytes": 512}
    ids = {"dtype": "I64", "shape": [4], "numel": 4, "bytes": 32}
    shapes, other = M.nvfp4_linears({"a.weight": weight, "a.weight_scale": scale, "n.weight": norm, "ids": ids})
    assert shapes == [{"out_features": 256, "in_features": 256, "count": 1}]
    assert other == 512 + 32   # the norm as float16, the integer tensor as it is; the scale is dropped
    # A uint8 weight without its block scale, or with a scale of another shape, is not NVFP4.
    # An NVFP4 LM head stays float16 in the GPTQ copy: counted with the rest, not as a weight to repack.
    shapes, other = M.nvfp4_linears({"a.weight": weight, "a.weight_scale": scale, "lm_head.weight": weight,
                                     "lm_head.weight_scale": scale})
    assert shapes == [{"out_features": 256, "in_features": 256, "count": 1}] and other == 256 * 256 * 2
    assert M.nvfp4_linears({"a.weight": weight}) == ([], None)
    assert M.nvfp4_linears({"a.weight": weight, "a.weight_scale": dict(scale, shape=[256, 8])}) == ([], None)
    assert M.nvfp4_linears({"a.weight": weight, "a.weight_scale": dict(scale, dtype="F32")}) == ([], None)


def test_modelopt_hf_quant_config_fp8(tmp_path):
    model = _model(tmp_path, "modelopt_fp8", "fp8")[0]
    assert model["quant_method"] == "modelopt"
    assert (model["quant_format"], model["quant_bits"]) == ("fp8", 8)
    assert model["quant_kv_cache_algo"] == "FP8"
    assert model["param_count_logical"] == B.logical_params()
    assert model["param_count_method"] == "stored_without_aux"


@pytest.mark.parametrize("layout,scheme,method", [("gptq", "gptq4", "gptq"), ("awq", "awq4", "awq")])
def test_gptq_and_awq_quantization_config(tmp_path, layout, scheme, method):
    model, tensors = _model(tmp_path, layout, scheme)
    assert model["quant_method"] == method
    assert model["quant_source"] == "config.json:quantization_config"
    assert model["quant_source_read_by_vllm"] is True
    assert (model["quant_format"], model["quant_bits"], model["quant_group_size"]) == ("int4", 4, 128)
    # The keys vLLM's Marlin conversion reads from config.json (issue 24).
    expected = {"gptq": (True, False, None), "awq": (None, None, True)}[method]
    assert (model["quant_sym"], model["quant_desc_act"], model["quant_zero_point"]) == expected
    assert (model["gate"]["quant_sym"], model["gate"]["quant_desc_act"], model["gate"]["quant_zero_point"]) == expected
    assert model["torch_dtype"] == "float16"
    # I32 containers hold eight 4-bit values; scales, zeros and g_idx are not parameters.
    assert model["param_count_logical"] == B.logical_params()
    assert model["param_count"] == _stored(tensors)
    assert model["param_count"] < model["param_count_logical"]


def test_compressed_tensors_nvfp4(tmp_path):
    model = _model(tmp_path, "ct_nvfp4", "ct_nvfp4")[0]
    assert model["quant_method"] == "compressed-tensors"
    assert (model["quant_scheme"], model["quant_format"], model["quant_bits"]) == ("nvfp4", "nvfp4", 4)
    assert model["param_count_logical"] == B.logical_params()


def test_compressed_tensors_wna16(tmp_path):
    model = _model(tmp_path, "ct_wna16", "ct_wna16")[0]
    assert model["quant_method"] == "compressed-tensors"
    assert (model["quant_scheme"], model["quant_format"], model["quant_group_size"]) == ("wna16", "int4", 128)
    assert model["param_count_logical"] == B.logical_params()


def test_bitsandbytes_4bit(tmp_path):
    model = _model(tmp_path, "bnb", "bnb4")[0]
    assert model["quant_method"] == "bitsandbytes"
    assert (model["quant_format"], model["quant_bits"]) == ("nf4", 4)
    assert model["param_count_logical"] == B.logical_params()


def test_unquantized(tmp_path):
    model, tensors = _model(tmp_path, "plain", "BF16")
    assert model["quantized"] is False and model["quant_method"] is None
    assert model["param_count"] == model["param_count_logical"] == B.logical_params()
    assert model["weight_bytes"] == 2 * B.logical_params() == B.tensor_bytes(tensors)
    assert model["gate"]["quant_method"] is None


def test_sharded_index(tmp_path):
    model, tensors = _model(tmp_path, "plain", "BF16", shards=3)
    assert model["weight_index"] == "model.safetensors.index.json"
    assert [f["file"] for f in model["weight_files"]] == ["model-%05d-of-00003.safetensors" % i for i in (1, 2, 3)]
    assert model["weight_bytes"] == B.tensor_bytes(tensors)
    assert model["tensor_count"] == len(tensors)
    assert model["notes"] == []


def test_sharded_index_ignores_unindexed_files(tmp_path):
    B.model_dir(str(tmp_path), "plain", "BF16", shards=2)
    B.write_safetensors(str(tmp_path / "consolidated.safetensors"), [("x", "BF16", [4])])
    model = M.read_model_dir(str(tmp_path))
    assert model["weight_bytes"] == B.tensor_bytes(B.llama_tensors("BF16"))
    assert any("consolidated.safetensors" in note for note in model["notes"])


def test_multimodal_text_config(tmp_path):
    model = _model(tmp_path, "multimodal", "BF16")[0]
    assert model["model_type"] == "mistral3" and model["text_model_type"] == "mistral"
    assert model["text_config_used"] is True
    assert (model["num_hidden_layers"], model["num_key_value_heads"], model["head_dim"]) == (2, 2, 64)
    assert model["max_position_embeddings"] == 131072
    assert model["torch_dtype"] == "bfloat16"


def test_kv_heads_and_head_dim_defaults():
    arch = M.parse_config({"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32})[0]
    assert (arch["num_key_value_heads"], arch["head_dim"], arch["max_position_embeddings"]) == (32, 128, None)


def test_head_dim_null_uses_default():
    arch = M.parse_config({"hidden_size": 512, "num_attention_heads": 8, "head_dim": None})[0]
    assert arch["head_dim"] == 64


# The facts vLLM's startup checks read (_vllm_startup), from public config.json files.
_LLAMA_3_1_8B_CONFIG = {  # meta-llama/Llama-3.1-8B
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32, "max_position_embeddings": 131072,
    "vocab_size": 128256, "torch_dtype": "bfloat16",
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
}
_QWEN2_5_7B_CONFIG = {  # Qwen/Qwen2.5-7B-Instruct
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
    "num_attention_heads": 28, "num_key_value_heads": 4, "num_hidden_layers": 28, "max_position_embeddings": 32768,
    "vocab_size": 152064, "rope_scaling": None, "sliding_window": 131072, "use_sliding_window": False,
    "max_window_layers": 28, "torch_dtype": "bfloat16",
}
_MISTRAL_7B_V0_1_CONFIG = {  # mistralai/Mistral-7B-v0.1
    "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32, "max_position_embeddings": 32768,
    "vocab_size": 32000, "sliding_window": 4096, "torch_dtype": "bfloat16",
}


def test_startup_facts_llama_3_1():
    arch = M.parse_config(_LLAMA_3_1_8B_CONFIG)[0]
    assert (arch["intermediate_size"], arch["vocab_size"], arch["num_attention_heads"]) == (14336, 128256, 32)
    assert arch["rope_scaling"]["rope_type"] == "llama3" and arch["rope_scaling"]["factor"] == 8.0
    assert (arch["sliding_window"], arch["use_sliding_window"], arch["model_max_length"]) == (None, None, None)
    assert arch["architectures"] == ["LlamaForCausalLM"]


def test_startup_facts_sliding_window():
    qwen = M.parse_config(_QWEN2_5_7B_CONFIG)[0]
    assert (qwen["sliding_window"], qwen["use_sliding_window"], qwen["rope_scaling"]) == (131072, False, None)
    assert qwen["intermediate_size"] == 18944
    mistral = M.parse_config(_MISTRAL_7B_V0_1_CONFIG)[0]
    assert (mistral["sliding_window"], mistral["use_sliding_window"]) == (4096, None)
    # per-layer windows (interleaved attention) are kept as the list
    layered = M.parse_config(dict(_MISTRAL_7B_V0_1_CONFIG, sliding_window=[4096, None]))[0]
    assert layered["sliding_window"] == [4096, None]
    # Transformers v5 names it rope_parameters
    v5 = dict(_LLAMA_3_1_8B_CONFIG, rope_parameters=_LLAMA_3_1_8B_CONFIG["rope_scaling"], rope_scaling=None)
    assert M.parse_config(v5)[0]["rope_scaling"]["original_max_position_embeddings"] == 8192


def test_startup_facts_from_text_config(tmp_path):
    model = _model(tmp_path, "multimodal", "BF16")[0]
    assert (model["intermediate_size"], model["vocab_size"]) == (512, 512)
    assert model["gate"]["intermediate_size"] == 512
    assert model["gate"]["architectures"] == ["Mistral3ForConditionalGeneration"]
    assert model["gate"]["text_config_used"] is True


@pytest.mark.parametrize("key, value, problem", [
    ("rope_scaling", [8.0], "rope_scaling must be a JSON object or null"),
    ("sliding_window", "4k", "sliding_window must be an integer, a list of integers or null"),
    ("sliding_window", [4096, -1], "sliding_window must be an integer, a list of integers or null"),
    ("use_sliding_window", "no", "use_sliding_window must be true, false or null"),
    ("intermediate_size", 0, "intermediate_size must be a positive integer"),
])
def test_startup_facts_malformed(key, value, problem):
    with pytest.raises(M.ModelFileError) as err:
        M.parse_config(dict(_MISTRAL_7B_V0_1_CONFIG, **{key: value}))
    assert problem in str(err.value)


def test_torch_dtype_inferred_from_weights(tmp_path):
    B.model_dir(str(tmp_path), "plain", "F16")
    cfg = json.load(open(str(tmp_path / "config.json")))
    del cfg["torch_dtype"]
    B.write_json(str(tmp_path / "config.json"), cfg)
    model = M.read_model_dir(str(tmp_path))
    assert (model["torch_dtype"], model["torch_dtype_source"]) == ("float16", "safetensors")


# --------------------------------------------------------------------------------------------
# Quantization names and precedence
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw,expected", [
    ("nvfp4", ("modelopt_fp4", True)), ("NVFP4", ("modelopt_fp4", True)), ("modelopt_fp4", ("modelopt_fp4", True)),
    ("compressed_tensors", ("compressed-tensors", True)), ("compressed-tensors", ("compressed-tensors", True)),
    ("GPTQ", ("gptq", True)), ("awq", ("awq", True)), ("bitsandbytes", ("bitsandbytes", True)),
    ("bitnet", ("bitnet", False)),
])
def test_normalise_method(raw, expected):
    assert M.normalise_method(raw) == expected


def test_unknown_method_is_reported_not_dropped(tmp_path):
    B.model_dir(str(tmp_path), "plain", "BF16")
    B.write_json(str(tmp_path / "quant_config.json"), {"quant_method": "bitnet", "bits": 2})
    model = M.read_model_dir(str(tmp_path))
    assert (model["quantized"], model["quant_method"], model["quant_method_known"]) == (True, "bitnet", False)
    assert any("bitnet" in note for note in model["notes"])


def test_config_json_wins_over_quant_config(tmp_path):
    B.model_dir(str(tmp_path), "gptq", "gptq4")
    B.write_json(str(tmp_path / "quant_config.json"), {"quant_method": "awq", "w_bit": 4, "q_group_size": 128})
    model = M.read_model_dir(str(tmp_path))
    assert model["quant_method"] == "gptq"
    assert any("vLLM follows config.json" in note for note in model["notes"])


def test_modelopt_unknown_algo():
    q = M.quant_from_hf_quant_config({"quantization": {"quant_algo": "W4A8_AWQ"}}, "hf_quant_config.json")
    assert (q["quant_method"], q["quant_method_known"]) == ("w4a8_awq", False)


def test_autoawq_quant_config_without_method():
    q = M.quant_from_quant_config({"zero_point": True, "q_group_size": 128, "w_bit": 4, "version": "GEMM"},
                                  "quant_config.json")
    assert (q["quant_method"], q["quant_bits"], q["quant_group_size"]) == ("awq", 4, 128)


def test_quant_config_without_method_fails(tmp_path):
    B.model_dir(str(tmp_path), "plain", "BF16")
    B.write_json(str(tmp_path / "quant_config.json"), {"block_size": 16})
    with pytest.raises(M.ModelFileError) as err:
        M.read_model_dir(str(tmp_path))
    assert err.value.path.endswith("quant_config.json")
    assert "quant_method" in str(err.value)


def test_packed_weights_without_bits_give_no_logical_count():
    tensors = {"a.qweight": {"dtype": "I32", "numel": 8}, "a.scales": {"dtype": "F16", "numel": 2}}
    assert M.count_parameters(tensors, None, True) == (10, None, "unknown")
    assert M.count_parameters(tensors, 4, True) == (10, 64, "unpacked")


# --------------------------------------------------------------------------------------------
# Missing and malformed input
# --------------------------------------------------------------------------------------------


def test_missing_config_json(tmp_path):
    B.write_safetensors(str(tmp_path / "model.safetensors"), B.llama_tensors())
    with pytest.raises(M.ModelFileError) as err:
        M.read_model_dir(str(tmp_path))
    assert err.value.path == str(tmp_path / "config.json")
    assert "config.json: file is missing" in str(err.value)


def test_missing_directory(tmp_path):
    with pytest.raises(M.ModelFileError) as err:
        M.read_model_dir(str(tmp_path / "nope"))
    assert "does not exist" in str(err.value)


@pytest.mark.parametrize("text,problem", [("{\"hidden_size\": 4096,", "not valid JSON"), ("[1, 2]", "JSON object")])
def test_malformed_config_json(tmp_path, text, problem):
    B.model_dir(str(tmp_path), "plain", "BF16")
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(M.ModelFileError) as err:
        M.read_model_dir(str(tmp_path))
    assert err.value.path.endswith("config.json") and problem in str(err.value)


def test_wrong_type_names_the_key(tmp_path):
    B.model_dir(str(tmp_path), "plain", "BF16")
    cfg = json.load(open(str(tmp_path / "config.json")))
    cfg["num_hidden_layers"] = "80"
    B.write_json(str(tmp_path / "config.json"), cfg)
    with pytest.raises(M.ModelFileError) as err:
        M.read_model_dir(str(tmp_path))
    assert "num_hidden_layers must be a positive integer" in str(err.value)


def test_malformed_hf_quant_config(tmp_path):
    B.model_dir(str(tmp_path), "modelopt_nvfp4", "modelopt_nvfp4")
    (tmp_path / "hf_quant_config.json").write_text("{\"quantization\": ")
    with pytest.raises(M.ModelFileError) as err:
        M.read_model_dir(str(tmp_path))
    assert err.value.path.endswith("hf_quant_config.json")


def test_missing_weights(tmp_path):
    B.copy_layout("plain", str(tmp_path))
    with pytest.raises(M.ModelFileError) as err:
        M.read_model_dir(str(tmp_path))
    assert "no *.safetensors weight files" in str(err.value)
    (tmp_path / "pytorch_model.bin").write_bytes(b"\0")
    with pytest.raises(M.ModelFileError) as err:
        M.read_model_dir(str(tmp_path))
    assert "pytorch_model.bin" in str(err.value)


def test_index_names_missing_shard(tmp_path):
    B.model_dir(str(tmp_path), "plain", "BF16", shards=2)
    os.remove(str(tmp_path / "model-00002-of-00002.safetensors"))
    with pytest.raises(M.ModelFileError) as err:
        M.read_model_dir(str(tmp_path))
    assert err.value.path.endswith("model.safetensors.index.json")
    assert "model-00002-of-00002.safetensors" in str(err.value)


def test_index_tensor_not_in_its_shard(tmp_path):
    B.model_dir(str(tmp_path), "plain", "BF16", shards=2)
    index = json.load(open(str(tmp_path / "model.safetensors.index.json")))
    index["weight_map"]["lm_head.weight"] = "model-00001-of-00002.safetensors"
    B.write_json(str(tmp_path / "model.safetensors.index.json"), index)
    with pytest.raises(M.ModelFileError) as err:
        M.read_model_dir(str(tmp_path))
    assert "lm_head.weight" in str(err.value)


def test_index_rejects_paths(tmp_path):
    B.model_dir(str(tmp_path), "plain", "BF16", shards=2)
    B.write_json(str(tmp_path / "model.safetensors.index.json"), {"weight_map": {"x": "../../etc/passwd"}})
    with pytest.raises(M.ModelFileError) as err:
        M.read_model_dir(str(tmp_path))
    assert "plain file names" in str(err.value)


def test_truncated_safetensors_header(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", 1000) + b"{\"a\": ")
    with pytest.raises(M.ModelFileError) as err:
        M.read_safetensors_header(str(path))
    assert err.value.path == str(path) and "truncated" in str(err.value)


def test_file_shorter_than_length_word(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"\x01\x02")
    with pytest.raises(M.ModelFileError) as err:
        M.read_safetensors_header(str(path))
    assert "shorter than the 8-byte header length" in str(err.value)


def test_absurd_header_length(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", 2 ** 40) + b"{}")
    with pytest.raises(M.ModelFileError) as err:
        M.read_safetensors_header(str(path))
    assert "exceeds" in str(err.value)


def test_header_not_json(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", 8) + b"not json")
    with pytest.raises(M.ModelFileError) as err:
        M.read_safetensors_header(str(path))
    assert "not valid UTF-8 JSON" in str(err.value)


def test_truncated_tensor_data(tmp_path):
    path = str(tmp_path / "model.safetensors")
    data = B.safetensors_bytes([("a", "BF16", [64, 64])])
    with open(path, "wb") as handle:
        handle.write(data[:-100])
    with pytest.raises(M.ModelFileError) as err:
        M.read_safetensors_header(path)
    assert "truncated: tensor 'a' ends at byte 8192" in str(err.value)


def test_offsets_must_match_shape(tmp_path):
    path = tmp_path / "model.safetensors"
    header = json.dumps({"a": {"dtype": "F16", "shape": [4], "data_offsets": [0, 6]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 6)
    with pytest.raises(M.ModelFileError) as err:
        M.read_safetensors_header(str(path))
    assert "span 6 bytes but shape [4] of F16 needs 8" in str(err.value)


def test_bytes_outside_any_tensor_are_refused(tmp_path):
    path = str(tmp_path / "model.safetensors")
    B.write_safetensors(path, [("a", "F16", [4])], extra_data=b"\0" * 16)
    with pytest.raises(M.ModelFileError) as err:
        M.read_safetensors_header(path)
    assert "belong to no tensor" in str(err.value)


def test_overlapping_tensors_are_refused(tmp_path):
    path = tmp_path / "model.safetensors"
    header = json.dumps({"a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]},
                         "b": {"dtype": "U8", "shape": [8], "data_offsets": [4, 12]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 12)
    with pytest.raises(M.ModelFileError) as err:
        M.read_safetensors_header(str(path))
    assert "overlaps" in str(err.value)


def test_duplicate_tensor_across_files(tmp_path):
    B.copy_layout("plain", str(tmp_path))
    B.write_safetensors(str(tmp_path / "a.safetensors"), [("w", "BF16", [4])])
    B.write_safetensors(str(tmp_path / "b.safetensors"), [("w", "BF16", [4])])
    with pytest.raises(M.ModelFileError) as err:
        M.read_model_dir(str(tmp_path))
    assert "also stored in a.safetensors" in str(err.value)


def test_never_reads_tensor_data(tmp_path):
    """A 6 GiB sparse file: only its header is read, so this is instant and uses no memory."""
    path = str(tmp_path / "model.safetensors")
    rows = 3 * 1024 * 1024
    size = rows * 1024 * 2
    header = json.dumps({"big": {"dtype": "BF16", "shape": [rows, 1024], "data_offsets": [0, size]}}).encode()
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(header)) + header)
        handle.truncate(8 + len(header) + size)
    info = M.read_safetensors_header(path)
    assert info["data_bytes"] == rows * 1024 * 2 == info["tensors"]["big"]["bytes"]
