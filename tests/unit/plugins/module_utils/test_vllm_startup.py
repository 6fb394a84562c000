# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""vLLM's startup validation decided ahead of time (_vllm_startup): each encoded check with a
passing and a failing case built from a public model's config.json."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _vllm_startup as S

# --------------------------------------------------------------------------------------------
# Public config.json values (the fields the checks read), typed in from the model repositories
# --------------------------------------------------------------------------------------------

LLAMA_2_7B = {  # meta-llama/Llama-2-7b-hf
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
    "num_attention_heads": 32, "num_key_value_heads": 32, "num_hidden_layers": 32, "max_position_embeddings": 4096,
    "vocab_size": 32000, "rope_scaling": None, "torch_dtype": "float16",
}
_LLAMA3_ROPE = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192, "rope_type": "llama3"}
LLAMA_3_1_8B = {  # meta-llama/Llama-3.1-8B
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32, "max_position_embeddings": 131072,
    "vocab_size": 128256, "rope_scaling": _LLAMA3_ROPE, "torch_dtype": "bfloat16",
}
LLAMA_3_1_70B = dict(LLAMA_3_1_8B, hidden_size=8192, intermediate_size=28672, num_attention_heads=64,
                     num_hidden_layers=80)  # meta-llama/Llama-3.1-70B
LLAMA_3_1_405B_FP8 = dict(  # meta-llama/Llama-3.1-405B-Instruct-FP8 (quant_method fbgemm_fp8)
    LLAMA_3_1_8B, hidden_size=16384, intermediate_size=53248, num_attention_heads=128, num_hidden_layers=126,
    quant_method="fbgemm_fp8")
LLAMA_3_8B_FP8 = dict(  # neuralmagic/Meta-Llama-3-8B-Instruct-FP8 (quant_method fp8)
    LLAMA_3_1_8B, max_position_embeddings=8192, rope_scaling=None, quant_method="fp8")
LLAMA_2_7B_AWQ = dict(LLAMA_2_7B, quant_method="awq", quant_group_size=128)  # TheBloke/Llama-2-7B-AWQ
QWEN2_5_7B = {  # Qwen/Qwen2.5-7B-Instruct
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
    "num_attention_heads": 28, "num_key_value_heads": 4, "num_hidden_layers": 28, "max_position_embeddings": 32768,
    "vocab_size": 152064, "rope_scaling": None, "sliding_window": 131072, "use_sliding_window": False,
    "torch_dtype": "bfloat16",
}
# The YaRN block Qwen's model card tells users to add for contexts above 32768 tokens.
QWEN2_5_7B_YARN = dict(QWEN2_5_7B, rope_scaling={"factor": 4.0, "original_max_position_embeddings": 32768,
                                                 "type": "yarn"})
QWEN2_5_14B = dict(QWEN2_5_7B, hidden_size=5120, intermediate_size=13824, num_attention_heads=40,
                   num_key_value_heads=8, num_hidden_layers=48)  # Qwen/Qwen2.5-14B-Instruct
QWEN2_5_72B = dict(QWEN2_5_7B, hidden_size=8192, intermediate_size=29568, num_attention_heads=64,
                   num_key_value_heads=8, num_hidden_layers=80)  # Qwen/Qwen2.5-72B-Instruct
QWEN2_5_72B_AWQ = dict(QWEN2_5_72B, intermediate_size=29696, quant_method="awq", quant_group_size=128,
                       torch_dtype="float16")  # Qwen/Qwen2.5-72B-Instruct-AWQ (padded intermediate_size)
MISTRAL_7B_V01 = {  # mistralai/Mistral-7B-v0.1
    "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32, "max_position_embeddings": 32768,
    "vocab_size": 32000, "sliding_window": 4096, "rope_scaling": None, "torch_dtype": "bfloat16",
}
MISTRAL_7B_V03 = dict(MISTRAL_7B_V01, vocab_size=32768, sliding_window=None)  # mistralai/Mistral-7B-v0.3
PHI_2 = {  # microsoft/phi-2 (head size 2560 / 32 = 80)
    "architectures": ["PhiForCausalLM"], "model_type": "phi", "hidden_size": 2560, "intermediate_size": 10240,
    "num_attention_heads": 32, "num_key_value_heads": 32, "num_hidden_layers": 32, "max_position_embeddings": 2048,
    "vocab_size": 51200, "torch_dtype": "float16",
}
STABLELM_2_12B = {  # stabilityai/stablelm-2-12b (head size 5120 / 32 = 160)
    "architectures": ["StableLmForCausalLM"], "model_type": "stablelm", "hidden_size": 5120,
    "intermediate_size": 13824, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 40,
    "max_position_embeddings": 4096, "vocab_size": 100352, "torch_dtype": "bfloat16",
}
GEMMA_2_9B = {  # google/gemma-2-9b-it
    "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336,
    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "num_hidden_layers": 42,
    "max_position_embeddings": 8192, "vocab_size": 256000, "sliding_window": 4096, "torch_dtype": "bfloat16",
}
MAMBA_CODESTRAL = {  # mistralai/Mamba-Codestral-7B-v0.1
    "architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2", "hidden_size": 4096, "num_hidden_layers": 64,
    "vocab_size": 32768,
}

V085 = (0, 8, 5)
V191 = (0, 19, 1)


def _gpus(count, cc, memory_mib, name=None):
    gpu = {"cc": cc, "memory_mib": memory_mib}
    if name:
        gpu["name"] = name
    return [dict(gpu) for _index in range(count)]


V100 = _gpus(8, (7, 0), 32768)           # Tesla V100-SXM2-32GB
A100_40 = _gpus(8, (8, 0), 40960)        # A100-SXM4-40GB
A100_80 = _gpus(8, (8, 0), 81920)        # A100-SXM4-80GB
H200 = _gpus(8, (9, 0), 143771)          # H200 (141 GB)


def run(model, args, gpus, version):
    return S.startup_checks(model, args, gpus, version)


def codes(result, level="reason"):
    return [item["code"] for item in result if item["level"] == level]


def only(result, code):
    found = [item for item in result if item["code"] == code]
    assert len(found) == 1, result
    return found[0]


# --------------------------------------------------------------------------------------------
# Tensor parallelism
# --------------------------------------------------------------------------------------------


def test_attention_heads_not_divisible_llama_2_tp3():
    result = run(LLAMA_2_7B, {"tensor_parallel_size": 3}, V100[:4], V085)
    item = only(result, "ATTENTION_HEADS_NOT_DIVISIBLE")
    assert item["check"] == "attention_heads_divisible" and item["level"] == "reason"
    assert "Total number of attention heads (32) must be divisible by tensor parallel size (3)" in item["message"]
    assert "use tensor_parallel_size 1, 2 or 4" in item["message"]
    # vLLM stops at this config check: the layer checks are not reported on top of it
    assert codes(result) == ["ATTENTION_HEADS_NOT_DIVISIBLE"]


@pytest.mark.parametrize("version", [V085, V191, None])
def test_attention_heads_divisible_passes(version):
    assert codes(run(LLAMA_2_7B, {"tensor_parallel_size": 4}, V100[:4], version)) == []


def test_kv_heads_not_divisible_qwen2_5_7b_tp7():
    result = run(QWEN2_5_7B, {"tensor_parallel_size": 7}, V100, V191)
    item = only(result, "KV_HEADS_NOT_DIVISIBLE")
    assert "num_key_value_heads 4 and tensor_parallel_size 7" in item["message"]
    assert "'7 is not divisible by 4'" in item["message"]
    assert "use tensor_parallel_size 1, 2 or 4" in item["message"]
    assert "ATTENTION_HEADS_NOT_DIVISIBLE" not in codes(result)


def test_kv_heads_replicated_passes_llama_3_1_8b_tp8():
    # 8 KV heads over 8 GPUs, and 28 heads over TP 4 (one KV head per GPU) both divide
    assert codes(run(LLAMA_3_1_8B, {"tensor_parallel_size": 8}, H200, V191)) == []
    assert codes(run(QWEN2_5_7B, {"tensor_parallel_size": 4}, V100[:4], V085)) == []


def test_intermediate_size_not_divisible_qwen2_5_7b_tp28():
    # 28 heads and 4 KV heads allow TP 28, but 18944 / 28 does not divide
    result = run(QWEN2_5_7B, {"tensor_parallel_size": 28}, [], None)
    item = only(result, "INTERMEDIATE_SIZE_NOT_DIVISIBLE")
    assert "intermediate_size 18944 is not divisible by tensor_parallel_size 28" in item["message"]
    assert item["check"] == "intermediate_size_divisible"


def test_intermediate_size_divisible_passes_qwen2_5_14b_tp8():
    assert codes(run(QWEN2_5_14B, {"tensor_parallel_size": 8}, A100_80, V191)) == []


def test_quant_group_not_aligned_llama_2_7b_awq_tp4():
    # down_proj: 11008 / 4 = 2752, not a multiple of group_size 128
    result = run(LLAMA_2_7B_AWQ, {"tensor_parallel_size": 4}, A100_40, V085)
    item = only(result, "QUANT_GROUP_SIZE_NOT_ALIGNED")
    assert "per-GPU input is 2752, not a multiple of 128" in item["message"]
    assert "The input size is not aligned with the quantized weight shape" in item["message"]
    assert "use tensor_parallel_size 1 or 2" in item["message"]


def test_quant_group_aligned_passes():
    assert codes(run(LLAMA_2_7B_AWQ, {"tensor_parallel_size": 2}, A100_40, V085)) == []
    # Qwen pads intermediate_size to 29696 in its 4-bit 72B checkpoints: 29696 / 8 = 3712 = 29 x 128
    assert codes(run(QWEN2_5_72B_AWQ, {"tensor_parallel_size": 8}, A100_80, V191)) == []
    # the unpadded 29568 / 8 = 3696 would not be
    unpadded = dict(QWEN2_5_72B_AWQ, intermediate_size=29568)
    assert codes(run(unpadded, {"tensor_parallel_size": 8}, A100_80, V191)) == ["QUANT_GROUP_SIZE_NOT_ALIGNED"]


def test_quant_output_not_aligned_gptq():
    # gate_up_proj's per-GPU output 2 x 14337 = 28674 is not a multiple of the 8 codes one int32 packs
    # (group -1: no input constraint, so only the output check speaks).
    model = dict(LLAMA_2_7B, quant_method="gptq", quant_bits=4, quant_group_size=-1, intermediate_size=28674)
    item = only(run(model, {"tensor_parallel_size": 2}, V100, V085), "QUANT_OUTPUT_NOT_ALIGNED")
    assert "gate_up_proj (2 x intermediate_size 28674 / 2)'s per-GPU output is 28674, not a multiple of 8" \
        in item["message"]
    assert "The output size is not aligned with the quantized weight shape" in item["message"]
    # Without a bit width the pack factor is unknown, and the check is skipped, never guessed.
    assert codes(run(dict(model, quant_bits=None), {"tensor_parallel_size": 2}, V100, V085)) == []
    # The repacked reference model (hidden 8192, 64 heads, 8 KV heads, 28672) passes at TP 2.
    llama70 = dict(LLAMA_2_7B, hidden_size=8192, num_attention_heads=64, num_key_value_heads=8,
                   intermediate_size=28672, quant_method="gptq", quant_bits=4, quant_group_size=64)
    assert codes(run(llama70, {"tensor_parallel_size": 2}, V100, V085)) == []


def test_pipeline_parallel_unsupported_mamba2():
    result = run(MAMBA_CODESTRAL, {"pipeline_parallel_size": 2}, A100_80, V085)
    item = only(result, "PIPELINE_PARALLEL_UNSUPPORTED_MODEL")
    assert "Mamba2ForCausalLM has no pipeline parallelism in vLLM 0.8.5" in item["message"]
    assert "set pipeline_parallel_size 1" in item["message"]
    # both releases lack it, so an unknown version reports it too
    unknown = run(MAMBA_CODESTRAL, {"pipeline_parallel_size": 2}, A100_80, None)
    assert "PIPELINE_PARALLEL_UNSUPPORTED_MODEL" in codes(unknown)


def test_pipeline_parallel_supported_llama_3_1_70b():
    assert codes(run(LLAMA_3_1_70B, {"tensor_parallel_size": 4, "pipeline_parallel_size": 2}, A100_80, V085)) == []


# --------------------------------------------------------------------------------------------
# Context length
# --------------------------------------------------------------------------------------------


def test_max_model_len_exceeds_llama_2():
    result = run(LLAMA_2_7B, {"max_model_len": 8192}, V100[:1], V085)
    item = only(result, "MAX_MODEL_LEN_EXCEEDS_MODEL")
    assert item["level"] == "reason"
    assert ("User-specified max_model_len (8192) is greater than the derived max_model_len "
            "(max_position_embeddings=4096 or model_max_length=None") in item["message"]
    assert "lower max_model_len to 4096" in item["message"]


def test_max_model_len_within_llama_2_passes():
    assert codes(run(LLAMA_2_7B, {"max_model_len": 4096}, V100[:1], V085)) == []
    assert codes(run(LLAMA_2_7B, {"max_model_len": "4K"}, V100[:1], V191)) == []


def test_llama3_rope_does_not_scale_the_limit():
    assert codes(run(LLAMA_3_1_8B, {"max_model_len": 131072, "dtype": "float16"}, A100_80, V191)) == []
    item = only(run(LLAMA_3_1_8B, {"max_model_len": 262144}, A100_80, V191), "MAX_MODEL_LEN_EXCEEDS_MODEL")
    assert "lower max_model_len to 131072" in item["message"]


def test_yarn_rope_scales_the_limit_qwen2_5_7b():
    assert codes(run(QWEN2_5_7B_YARN, {"max_model_len": 131072}, A100_80, V191)) == []
    item = only(run(QWEN2_5_7B_YARN, {"max_model_len": 200000}, A100_80, V085), "MAX_MODEL_LEN_EXCEEDS_MODEL")
    # vLLM multiplies by the float factor and prints the derived length as a float
    assert "derived max_model_len (max_position_embeddings=131072.0 or" in item["message"]
    assert "scaled by rope_scaling yarn factor 4" in item["message"]
    item = only(run(QWEN2_5_7B, {"max_model_len": 65536}, A100_80, V191), "MAX_MODEL_LEN_EXCEEDS_MODEL")
    assert "lower max_model_len to 32768" in item["message"]


def test_disable_sliding_window_caps_the_limit_mistral_v0_1():
    args = {"max_model_len": 8192, "disable_sliding_window": True}
    item = only(run(MISTRAL_7B_V01, args, A100_80, V191), "MAX_MODEL_LEN_EXCEEDS_MODEL")
    assert "sliding_window=4096" in item["message"]
    assert codes(run(MISTRAL_7B_V01, {"max_model_len": 8192}, A100_80, V191)) == []


def test_disable_sliding_window_with_yarn_refused_by_0_8_5():
    item = only(run(QWEN2_5_7B_YARN, {"disable_sliding_window": True, "max_model_len": 32768}, A100_80, V085),
                "SLIDING_WINDOW_DISABLE_UNSUPPORTED")
    assert "Disabling sliding window is not supported for models with rope_scaling" in item["message"]
    # llama3 rope scaling is exempt, and 0.19.1 dropped the check
    assert codes(run(LLAMA_3_1_8B, {"disable_sliding_window": True, "max_model_len": 8192}, A100_80, V085)) == []
    assert codes(run(QWEN2_5_7B_YARN, {"disable_sliding_window": True, "max_model_len": 32768}, A100_80,
                     V191)) == []


def test_prefix_caching_with_sliding_window_on_v100_0_8_5():
    args = {"enable_prefix_caching": True, "max_model_len": 4096}
    item = only(run(MISTRAL_7B_V01, args, V100[:1], V085), "PREFIX_CACHING_WITH_SLIDING_WINDOW")
    assert "Prefix caching is not supported with sliding window" in item["message"]
    assert codes(run(MISTRAL_7B_V03, args, V100[:1], V085)) == []
    # Qwen2.5 declares a sliding window but use_sliding_window false
    assert codes(run(QWEN2_5_7B, args, V100[:1], V085)) == []
    # V1 (compute capability 8.0+) takes prefix caching with a sliding window
    assert codes(run(MISTRAL_7B_V01, args, A100_80, V085)) == []


# --------------------------------------------------------------------------------------------
# Scheduler
# --------------------------------------------------------------------------------------------


def test_max_num_batched_tokens_below_max_model_len_v100_0_8_5():
    # Mistral 7B v0.1: 32768 tokens is not above 32768 and it has a sliding window, so the V0
    # engine leaves chunked prefill off
    result = run(MISTRAL_7B_V01, {"max_num_batched_tokens": 8192, "dtype": "float16"}, V100[:1], V085)
    item = only(result, "MAX_NUM_BATCHED_TOKENS_TOO_SMALL")
    assert item["check"] == "max_num_batched_tokens_vs_max_model_len"
    assert "max_num_batched_tokens (8192) is smaller than max_model_len (32768)" in item["message"]
    assert "runs its V0 engine here because compute capability 7.0 is below 8.0" in item["message"]
    assert "set max_num_batched_tokens to 32768 or more, lower max_model_len to 8192" in item["message"]


def test_max_num_batched_tokens_passes_with_chunked_prefill():
    args = {"max_num_batched_tokens": 8192, "dtype": "float16"}
    assert codes(run(MISTRAL_7B_V01, dict(args, enable_chunked_prefill=True), V100[:1], V085)) == []
    # Llama 3.1's 131072 tokens turn chunked prefill on by default in 0.8.5's V0 engine
    assert codes(run(LLAMA_3_1_8B, args, V100[:1], V085)) == []
    # 0.19.1 chunks prefills by default
    assert codes(run(MISTRAL_7B_V01, args, V100[:1], V191)) == []
    # the defaults never trip it
    assert codes(run(MISTRAL_7B_V01, {"dtype": "float16"}, V100[:1], V085)) == []


def test_max_num_seqs_above_default_batched_tokens():
    # A100 40GB: 2048 batched tokens by default in 0.8.5's V1 engine and in 0.19.1
    for version in (V085, V191):
        item = only(run(LLAMA_3_1_8B, {"max_num_seqs": 4096}, A100_40, version), "MAX_NUM_BATCHED_TOKENS_TOO_SMALL")
        assert item["check"] == "max_num_batched_tokens_vs_max_num_seqs"
        assert "max_num_batched_tokens (2048) must be greater than or equal to max_num_seqs (4096)" in item["message"]
    assert codes(run(LLAMA_3_1_8B, {"max_num_seqs": 512}, A100_40, V085)) == []
    # an H200 defaults to 8192 batched tokens
    assert codes(run(LLAMA_3_1_8B, {"max_num_seqs": 4096}, H200, V191)) == []


def test_explicit_batched_tokens_below_seqs_is_shared():
    args = {"max_num_batched_tokens": 256, "max_num_seqs": 512, "max_model_len": 256}
    assert "MAX_NUM_BATCHED_TOKENS_TOO_SMALL" in codes(run(LLAMA_3_1_8B, args, A100_80, None))
    assert codes(run(LLAMA_3_1_8B, dict(args, max_num_seqs=256), A100_80, None)) == []


def test_chunked_prefill_false_ignored_by_0_8_5_v1():
    result = run(LLAMA_3_1_8B, {"enable_chunked_prefill": False, "max_model_len": 8192}, A100_80, V085)
    assert codes(result) == []
    assert codes(result, "warning") == ["CHUNKED_PREFILL_OVERRIDDEN"]
    assert codes(run(LLAMA_3_1_8B, {"max_model_len": 8192}, A100_80, V085), "warning") == []


# --------------------------------------------------------------------------------------------
# Cache arguments
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [1.5, 0])
def test_gpu_memory_utilization_out_of_range(value):
    item = only(run(LLAMA_3_1_8B, {"gpu_memory_utilization": value}, A100_80, V191),
                "GPU_MEMORY_UTILIZATION_INVALID")
    assert "outside (0, 1]" in item["message"]


def test_gpu_memory_utilization_in_range_passes():
    assert codes(run(LLAMA_3_1_8B, {"gpu_memory_utilization": 0.9}, A100_80, V191)) == []


def test_cpu_offload_negative():
    item = only(run(LLAMA_3_1_8B, {"cpu_offload_gb": -4}, A100_80, V085), "CPU_OFFLOAD_GB_NEGATIVE")
    assert "CPU offload space must be non-negative" in item["message"]
    assert codes(run(LLAMA_3_1_8B, {"cpu_offload_gb": 8}, A100_80, V085)) == []


def test_fp8_e5m2_kv_cache_with_fp8_checkpoint():
    item = only(run(LLAMA_3_8B_FP8, {"kv_cache_dtype": "fp8_e5m2"}, H200, V191),
                "KV_CACHE_DTYPE_CONFLICTS_WITH_CHECKPOINT")
    assert "fp8_e5m2 kv-cache is not supported with fp8 checkpoints." in item["message"]
    assert codes(run(LLAMA_3_8B_FP8, {"kv_cache_dtype": "fp8_e4m3"}, H200, V191)) == []
    # an unquantized model takes fp8_e5m2
    assert codes(run(LLAMA_3_1_8B, {"kv_cache_dtype": "fp8_e5m2"}, H200, V191)) == []


def test_swap_space_flag_removed_in_0_19_1():
    item = only(run(LLAMA_3_1_8B, {"swap_space": 4}, A100_80, V191), "VLLM_ARG_UNKNOWN_TO_IMAGE")
    assert "unrecognized arguments: --swap-space" in item["message"]
    assert codes(run(LLAMA_3_1_8B, {"swap_space": 4}, A100_80, V085)) == []
    assert codes(run(LLAMA_3_1_8B, {"swap_space": None}, A100_80, V191)) == []


# --------------------------------------------------------------------------------------------
# Attention backend: block size and head size
# --------------------------------------------------------------------------------------------


def test_block_size_64_on_v100_0_8_5_paged_attention():
    item = only(run(LLAMA_3_1_8B, {"block_size": 64, "dtype": "float16"}, V100, V085), "BLOCK_SIZE_UNSUPPORTED")
    assert item["check"] == "block_size_paged_attention"
    assert "'Unsupported block size: 64'" in item["message"]
    assert codes(run(LLAMA_3_1_8B, {"block_size": 32, "dtype": "float16"}, V100, V085)) == []


def test_block_size_not_multiple_of_16_on_0_8_5_v1():
    item = only(run(LLAMA_3_1_8B, {"block_size": 8}, A100_80, V085), "BLOCK_SIZE_UNSUPPORTED")
    assert item["check"] == "block_size_v1_flash_attn"
    assert "Block size must be a multiple of 16." in item["message"]
    assert codes(run(LLAMA_3_1_8B, {"block_size": 128}, A100_80, V085)) == []
    # an fp8 KV cache sends 0.8.5 to V0, whose XFormers kernels take block size 8
    assert codes(run(LLAMA_3_1_8B, {"block_size": 8, "kv_cache_dtype": "fp8"}, A100_80, V085)) == []


def test_v0_only_architecture_keeps_0_8_5_on_v0():
    # bigscience/bloom-7b1 (its config names heads n_head, so model_facts reports no head count)
    bloom = {"architectures": ["BloomForCausalLM"], "model_type": "bloom", "hidden_size": 4096, "vocab_size": 250880,
             "torch_dtype": "bfloat16"}
    assert codes(run(bloom, {"block_size": 8}, A100_80, V085)) == []
    # the same block size on a V1 architecture is refused
    assert codes(run(MISTRAL_7B_V03, {"block_size": 8}, A100_80, V085)) == ["BLOCK_SIZE_UNSUPPORTED"]


def test_block_size_outside_0_8_5_choices():
    item = only(run(LLAMA_3_1_8B, {"block_size": 24}, A100_80, V085), "BLOCK_SIZE_UNSUPPORTED")
    assert item["check"] == "block_size_choices"
    assert "invalid choice: 24" in item["message"]


def test_block_size_8_on_v100_0_19_1_falls_back_to_flex():
    result = run(LLAMA_3_1_8B, {"block_size": 8}, V100, V191)
    assert codes(result) == []
    item = only(result, "ATTENTION_BACKEND_FALLBACK")
    assert item["level"] == "warning"
    assert "rules out TRITON_ATTN" in item["message"] and "uses FLEX_ATTENTION" in item["message"]
    assert codes(run(LLAMA_3_1_8B, {"block_size": 16}, V100, V191), "warning") == []


def test_no_attention_backend_fp8_kv_and_block_8_on_v100_0_19_1():
    item = only(run(LLAMA_3_1_8B, {"block_size": 8, "kv_cache_dtype": "fp8"}, V100, V191),
                "ATTENTION_BACKEND_UNAVAILABLE")
    assert "No valid attention backend found" in item["message"]
    assert "FLEX_ATTENTION: kv_cache_dtype not supported" in item["message"]
    assert "use kv_cache_dtype auto and block_size 16 (or unset)" in item["message"]
    assert codes(run(LLAMA_3_1_8B, {"block_size": 16, "kv_cache_dtype": "fp8"}, V100, V191)) == []


def test_head_size_80_refused_by_0_8_5_v1_flash_attention():
    item = only(run(PHI_2, {}, A100_80, V085), "HEAD_SIZE_UNSUPPORTED")
    assert item["check"] == "head_size_v1_flash_attn"
    assert "Head size 80 is not supported by FlashAttention" in item["message"]
    assert "VLLM_USE_V1=0" in item["message"]
    # the V0 engine's PagedAttention takes 80 (V100), and so does 0.19.1's FlashAttention
    assert codes(run(PHI_2, {}, V100, V085)) == []
    assert codes(run(PHI_2, {}, A100_80, V191)) == []


def test_head_size_160_refused_by_paged_attention_on_v100():
    item = only(run(STABLELM_2_12B, {"dtype": "float16"}, V100, V085), "HEAD_SIZE_UNSUPPORTED")
    assert item["check"] == "head_size_paged_attention"
    assert "Head size 160 is not supported by PagedAttention" in item["message"]
    assert codes(run(STABLELM_2_12B, {}, A100_80, V085)) == []           # V1 FlashAttention has 160
    assert codes(run(STABLELM_2_12B, {"dtype": "float16"}, V100, V191)) == []  # Triton attention


# --------------------------------------------------------------------------------------------
# dtype and quantization
# --------------------------------------------------------------------------------------------


def test_gemma2_float16_refused_by_0_19_1():
    item = only(run(GEMMA_2_9B, {"dtype": "float16"}, V100, V191), "DTYPE_UNSUPPORTED_BY_MODEL")
    assert "The model type 'gemma2' does not support float16" in item["message"]
    assert "use dtype float32" in item["message"]
    assert codes(run(GEMMA_2_9B, {"dtype": "float32"}, V100, V191)) == []
    assert codes(run(GEMMA_2_9B, {"dtype": "auto"}, A100_80, V191)) == []
    assert codes(run(GEMMA_2_9B, {"dtype": "float16"}, V100, V085)) == []


def test_deprecated_quantization_refused_by_0_19_1():
    item = only(run(LLAMA_3_1_405B_FP8, {"tensor_parallel_size": 8}, H200, V191), "QUANTIZATION_DEPRECATED")
    assert "set `--allow-deprecated-quantization`" in item["message"]
    assert codes(run(LLAMA_3_1_405B_FP8, {"tensor_parallel_size": 8, "allow_deprecated_quantization": True},
                     H200, V191)) == []
    assert codes(run(LLAMA_3_1_405B_FP8, {"tensor_parallel_size": 8}, H200, V085)) == []


# --------------------------------------------------------------------------------------------
# Versions and inputs
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version, text", [(None, "version is unknown"), ((0, 10, 2), "vLLM 0.10.2 is neither")])
def test_unmodelled_versions_are_lenient(version, text):
    result = run(LLAMA_3_1_8B, {"block_size": 64, "swap_space": 4, "kv_cache_dtype": "float16"}, V100, version)
    assert codes(result) == []
    assert text in only(result, "STARTUP_CHECKS_PARTIAL")["message"]


@pytest.mark.parametrize("version, release", [
    ((0, 8, 5), "0.8.5"), ((0, 8, 5, 1), "0.8.5"), ((0, 8, 4), None), ((0, 19, 1), "0.19.1"), ((0, 19, 2), "0.19.1"),
    ((0, 19, 0), None), ((0, 20, 0), None), (None, None)])
def test_release_for(version, release):
    assert S.release_for(version) == release


def test_version_as_string():
    assert codes(run(LLAMA_2_7B, {"max_model_len": 8192}, V100[:1], "0.8.5")) == ["MAX_MODEL_LEN_EXCEEDS_MODEL"]


@pytest.mark.parametrize("model, args, gpus, version, field", [
    (dict(LLAMA_2_7B, hidden_size="big"), {}, V100, V085, "model.hidden_size"),
    (dict(LLAMA_2_7B, architectures="LlamaForCausalLM "), {"dtype": "fp64"}, V100, V085, "args.dtype"),
    (dict(LLAMA_2_7B, rope_scaling=[8.0]), {}, V100, V085, "model.rope_scaling"),
    (dict(LLAMA_2_7B, sliding_window=-1), {}, V100, V085, "model.sliding_window"),
    (dict(LLAMA_2_7B, use_sliding_window="maybe"), {}, V100, V085, "model.use_sliding_window"),
    (dict(LLAMA_2_7B_AWQ, quant_group_size="128g"), {}, V100, V085, "model.quant_group_size"),
    (dict(LLAMA_2_7B_AWQ, quant_group_size=[128, "x"]), {}, V100, V085, "model.quant_group_size"),
    (LLAMA_2_7B, {"tensor_parallel_size": 0}, V100, V085, "args.tensor_parallel_size"),
    (LLAMA_2_7B, {"enforce_eager": "sometimes"}, V100, V085, "args.enforce_eager"),
    (LLAMA_2_7B, {"gpu_memory_utilization": "most"}, V100, V085, "args.gpu_memory_utilization"),
    (LLAMA_2_7B, {}, [{"cc": "seven", "memory_mib": 1}], V085, "gpus[0].cc"),
    (LLAMA_2_7B, {}, [{"cc": (7, 0), "memory_mib": 0}], V085, "gpus[0].memory_mib"),
    (LLAMA_2_7B, {}, "V100", V085, "gpus"),
    (LLAMA_2_7B, {}, V100, "latest", "version"),
    (LLAMA_2_7B, {}, V100, (0, "8"), "version"),
    ("llama", {}, V100, V085, "model"),
])
def test_input_errors_name_the_field(model, args, gpus, version, field):
    with pytest.raises(S.StartupInputError) as err:
        run(model, args, gpus, version)
    assert str(err.value).startswith(field + ":")


def test_fp8_block_size_list_is_not_a_group():
    # model_facts reports an FP8 checkpoint's weight_block_size [128, 128] as quant_group_size
    model = dict(LLAMA_3_8B_FP8, quant_group_size=[128, 128])
    assert codes(run(model, {"tensor_parallel_size": 8}, H200, V191)) == []


def test_missing_facts_skip_checks():
    assert run({}, {}, [], None) == [only(run({}, {}, [], None), "STARTUP_CHECKS_PARTIAL")]
    assert codes(run({"num_attention_heads": 32}, {"tensor_parallel_size": 2, "max_model_len": 10 ** 6}, [], V085)) == []


# --------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------

_REF = re.compile(r"^(vllm|csrc)/[\w/.-]+\.(py|cu):\d+$")
_KEYS = {"id", "what", "vllm_0_8_5", "vllm_0_19_1", "encoded", "code", "why_not", "encoded_in", "confidence",
         "function"}


def test_checks_table_is_well_formed():
    ids = [row["id"] for row in S.CHECKS]
    assert len(ids) == len(set(ids))
    all_codes = set(S.STARTUP_REASON_CODES) | set(S.STARTUP_WARNING_CODES)
    used = set()
    for row in S.CHECKS:
        assert set(row) == _KEYS, row["id"]
        for key in ("vllm_0_8_5", "vllm_0_19_1"):
            assert row[key] is None or _REF.match(row[key]), (row["id"], row[key])
        assert row["confidence"] in ("verified", "inferred", "third_party")
        if row["encoded"]:
            assert row["why_not"] is None and row["encoded_in"] in ("_vllm_startup.py", "_gate.py")
            if row["encoded_in"] == "_vllm_startup.py" and row["code"]:
                assert row["code"] in all_codes, row["id"]
                used.add(row["code"])
        else:
            assert row["code"] is None and row["why_not"]
    assert used == all_codes
    assert not set(S.STARTUP_REASON_CODES) & set(S.STARTUP_WARNING_CODES)


def test_checks_cover_what_the_brief_names():
    by_code = {}
    for row in S.CHECKS:
        by_code.setdefault(row["code"], []).append(row)
    for code in ("QUANTIZATION_UNSUPPORTED_ON_ARCH", "QUANTIZATION_UNKNOWN_TO_IMAGE", "QUANTIZATION_MISMATCH",
                 "DTYPE_UNSUPPORTED", "TENSOR_PARALLEL_EXCEEDS_GPUS", "INSUFFICIENT_VRAM"):
        assert by_code[code] and all(r["encoded_in"] == "_gate.py" and r["encoded"] for r in by_code[code])
    assert len([r for r in S.CHECKS if r["id"].startswith("quant_min_capability_")]) >= 12


def test_emitted_items_match_their_check_rows():
    rows = dict((row["id"], row) for row in S.CHECKS)
    cases = [
        (LLAMA_2_7B, {"tensor_parallel_size": 3, "max_model_len": 8192}, V100[:4], V085),
        (MISTRAL_7B_V01, {"max_num_batched_tokens": 8192, "block_size": 64, "enable_prefix_caching": True}, V100,
         V085),
        (PHI_2, {"max_num_seqs": 4096, "gpu_memory_utilization": 2, "cpu_offload_gb": -1}, A100_40, V085),
        (LLAMA_3_1_8B, {"block_size": 8, "enable_chunked_prefill": False, "swap_space": 4}, V100, V191),
        (LLAMA_3_8B_FP8, {"kv_cache_dtype": "fp8_e5m2"}, H200, V191),
        (GEMMA_2_9B, {"dtype": "float16"}, V100, None),
    ]
    seen = set()
    for model, args, gpus, version in cases:
        for item in run(model, args, gpus, version):
            assert set(item) == {"code", "level", "message", "check"}
            row = rows[item["check"]]
            assert row["code"] == item["code"] and row["encoded_in"] == "_vllm_startup.py"
            expected = "reason" if item["code"] in S.STARTUP_REASON_CODES else "warning"
            assert item["level"] == expected
            seen.add(item["code"])
    assert len(seen) >= 10


def test_every_check_encoded_here_is_a_rule_with_its_function():
    here = [row for row in S.CHECKS if row["encoded_in"] == "_vllm_startup.py" and row["code"]]
    assert list(S.STARTUP_RULES) == here
    functions = [row["function"] for row in S.CHECKS if row["function"] is not None]
    assert len(functions) == len(set(functions)) == len(here)
    for row in here:
        assert row["function"].__name__ == "check_" + row["id"]
        assert row["function"].__doc__, row["id"]


def test_the_facts_are_frozen_and_the_rules_pure():
    facts = S.startup_facts(dict(QWEN2_5_7B_YARN), {"tensor_parallel_size": 3, "block_size": 8}, V100[:4], V085)
    assert (facts.release, facts.tp, facts.engine, facts.backend, facts.head_size) == ("0.8.5", 3, "v0", "XFORMERS", 128)
    assert facts.max_len == 131072 and facts.schedule.seqs == 256
    with pytest.raises(TypeError):
        facts.model["num_attention_heads"] = 27
    with pytest.raises(TypeError):
        facts.model["rope_scaling"]["factor"] = 1.0
    with pytest.raises(TypeError):
        facts.gpus[0]["cc"] = (8, 0)
    with pytest.raises(AttributeError):
        facts.tp = 4
    # A check reads only the facts: the same answer each time, and a table of one rule gives one finding.
    assert S.check_kv_heads_divisible(facts) is None and S.check_intermediate_size_divisible(facts) is None
    assert "num_attention_heads 28" in S.check_attention_heads_divisible(facts)
    mine = [row for row in S.STARTUP_RULES if row["id"] == "attention_heads_divisible"]
    assert [item["code"] for item in S.run_rules(facts, mine)] == ["ATTENTION_HEADS_NOT_DIVISIBLE"]
    assert S.run_rules(facts) == run(QWEN2_5_7B_YARN, {"tensor_parallel_size": 3, "block_size": 8}, V100[:4], V085)


def test_docs_embed_the_rendered_table():
    table = S.render_checks_markdown()
    assert table.count("\n") == len(S.CHECKS) + 2
    assert "| `attention_heads_divisible` |" in table and "`vllm/config.py:934`" in table
    docs = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "docs", "deploy_gate.md")
    with open(docs) as handle:
        text = handle.read()
    assert table in text, "docs/deploy_gate.md is out of date: paste render_checks_markdown() into it"
