# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The model of vLLM's profile-run reserve (plugins/module_utils/knowledge/_vllm_memory.py).

Expected values are worked out by hand from the formula in the module docstring (moments in units
of profile tokens x dtype bytes), not by calling the function twice.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge import _vllm_memory as VM

MIB = 1024 ** 2
GIB = 1024 ** 3
CUBLAS_VOLTA = 4096 * 1024 * 2 + 16 * 1024 * 8 + 1024 * 1024     # cuBLAS + cuBLASLt, below sm90
CUBLAS_HOPPER = 4096 * 8 * 1024 + 1024 * 1024

# Public config.json values (dtype_bytes 2 = serving in float16).
LLAMA_3_70B = {"hidden_size": 8192, "intermediate_size": 28672, "vocab_size": 128256, "num_hidden_layers": 80,
               "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128, "dtype_bytes": 2}
LLAMA_3_8B = {"hidden_size": 4096, "intermediate_size": 14336, "vocab_size": 128256, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "dtype_bytes": 2}
# Qwen2.5-7B's config.json has no head_dim: 3584 / 28 = 128 is derived.
QWEN25_7B = {"hidden_size": 3584, "intermediate_size": 18944, "vocab_size": 152064, "num_hidden_layers": 28,
             "num_attention_heads": 28, "num_key_value_heads": 4, "head_dim": None, "dtype_bytes": 2}
MISTRAL_7B_V03 = {"hidden_size": 4096, "intermediate_size": 14336, "vocab_size": 32768, "num_hidden_layers": 32,
                  "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "dtype_bytes": 2}
LLAMA_2_7B = {"hidden_size": 4096, "intermediate_size": 11008, "vocab_size": 32000, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": None, "dtype_bytes": 2}

# The reference deployment: 2x V100, TP 2, fp16, 32K context, 32 sequences, eager.
REFERENCE_ARGS = {"max_model_len": 32768, "max_num_seqs": 32, "max_num_batched_tokens": None,
                  "enable_chunked_prefill": None, "tensor_parallel_size": 2, "pipeline_parallel_size": 1,
                  "enforce_eager": True, "compute_capability": (7, 0)}


def args(**changes):
    result = dict(REFERENCE_ARGS)
    result.update(changes)
    return result


# --- (a) the reference deployment ------------------------------------------------------------

def test_reference_deployment_70b_tp2_32k():
    result = VM.profile_reserve(LLAMA_3_70B, args(), (0, 8, 5))
    assert result["engine"] == "v0"
    assert result["chunked_prefill"] is False
    assert result["profile_tokens"] == 32768
    assert result["profile_seqs"] == 32
    assert result["complete"] is True and result["missing"] == []
    # Peak: the MLP after SiluAndMul, per GPU (I' = 28672 / 2 = 14336):
    # residual + layer input + MLP input (3 x 8192) + gate_up (2 x 14336) + act out (14336).
    unit = 32768 * 2
    mlp_act = (3 * 8192 + 3 * 14336) * unit
    assert mlp_act == 4224 * MIB
    assert result["moments"]["mlp_act"] == mlp_act
    assert result["parts"] == {"activation_peak": mlp_act, "cublas_workspace": CUBLAS_VOLTA,
                               "non_torch": 512 * MIB}
    assert result["bytes"] == mlp_act + CUBLAS_VOLTA + 512 * MIB == 4975624192
    # About 4.6 GiB per GPU: "low GiB", three times the old fixed 1.5 GiB.
    assert 4 * GIB < result["bytes"] < 5 * GIB
    assert "mlp_act" in result["formula"] and "4745.1 MiB" in result["formula"]


def test_reference_deployment_other_moments():
    moments = VM.profile_reserve(LLAMA_3_70B, args(), (0, 8, 5))["moments"]
    unit = 32768 * 2
    # Q = 64/2 x 128 = 4096, QKV = 4096 + 2 x (8/2 x 128) = 5120.
    assert moments["attn_core"] == (2 * 8192 + 5120 + 2 * 4096) * unit
    assert moments["o_proj_all_reduce"] == (2 * 8192 + 5120 + 4096 + 2 * 8192) * unit
    assert moments["mlp_down_all_reduce"] == (3 * 8192 + 14336 + 2 * 8192) * unit
    # Sampler on rank 0: model output T x H plus 32 x 128256 logits at 2 + 4 + 12 + 32 bytes each
    # (fp16 logits, fp32 copy, sorted values + int64 indices, sort scratch for 2-127 rows).
    assert moments["sampler"] == 32768 * 8192 * 2 + 32 * 128256 * 50
    assert max(moments.values()) == moments["mlp_act"]


def test_reference_outside_budget_and_sources():
    result = VM.profile_reserve(LLAMA_3_70B, args(), (0, 8, 5))
    assert result["outside_budget"] == {"cuda_context": 512 * MIB}
    assert sum(result["parts"].values()) == result["bytes"]
    assert "vllm@0.8.5:vllm/worker/worker.py:253-256" in result["sources"]
    assert "vllm@0.8.5:vllm/config.py:1967-1984" in result["sources"]
    assert set(result["sources"]) <= set(VM.MEMORY_MODEL_SOURCES)
    for citation in result["sources"]:
        assert re.match(r"^vllm@0\.(8\.5|19\.1):\S+:\d+", citation), citation
    assert set(result["confidence"]) == set(result["parts"])


# --- (b) 7B models at 32K on one GPU -----------------------------------------------------------

def test_qwen25_7b_tp1_32k():
    result = VM.profile_reserve(QWEN25_7B, args(tensor_parallel_size=1), (0, 8, 5))
    assert result["profile_tokens"] == 32768
    mlp_act = (3 * 3584 + 3 * 18944) * 32768 * 2
    assert result["parts"]["activation_peak"] == mlp_act
    assert result["bytes"] == mlp_act + CUBLAS_VOLTA + 256 * MIB == 4707188736
    # head_dim derived (3584 / 28 = 128): QKV = 28 x 128 + 2 x 4 x 128 = 4608.
    assert result["moments"]["qkv_proj"] == (2 * 3584 + 4608) * 32768 * 2
    assert "o_proj_all_reduce" not in result["moments"]
    assert result["complete"] is True


def test_mistral_7b_v03_tp1_32k():
    result = VM.profile_reserve(MISTRAL_7B_V03, args(tensor_parallel_size=1), (0, 8, 5))
    mlp_act = (3 * 4096 + 3 * 14336) * 32768 * 2
    assert result["bytes"] == mlp_act + CUBLAS_VOLTA + 256 * MIB == 3901882368


# --- (c) short contexts ------------------------------------------------------------------------

def test_short_context_profiles_max_model_len_tokens():
    result = VM.profile_reserve(LLAMA_2_7B, args(max_model_len=4096, max_num_seqs=None,
                                                 tensor_parallel_size=1))
    assert result["profile_tokens"] == 4096
    assert result["profile_seqs"] == 256          # V0's default max_num_seqs
    mlp_act = (3 * 4096 + 3 * 11008) * 4096 * 2
    # Sampler: 256 rows of 32000 at 2 + 4 + 12 + 20 bytes (segmented sort from 128 rows).
    assert result["moments"]["sampler"] == 4096 * 4096 * 2 + 256 * 32000 * 38
    assert result["parts"]["activation_peak"] == mlp_act


def test_very_short_context_profiles_2048_tokens():
    result = VM.profile_reserve(LLAMA_2_7B, args(max_model_len=1024, tensor_parallel_size=1))
    assert result["profile_tokens"] == 2048
    assert result["profile_seqs"] == 32


def test_long_context_turns_on_chunked_prefill_in_v0():
    result = VM.profile_reserve(LLAMA_3_70B, args(max_model_len=65536, max_num_seqs=None))
    assert result["chunked_prefill"] is True
    assert result["profile_tokens"] == 2048 and result["profile_seqs"] == 256
    # 256 x 128256 logits dominate: 38 bytes each plus the 2048 x 8192 model output.
    assert result["moments"]["sampler"] == 2048 * 8192 * 2 + 256 * 128256 * 38
    assert result["parts"]["activation_peak"] == result["moments"]["sampler"]


def test_long_context_without_chunked_prefill_profiles_everything():
    result = VM.profile_reserve(LLAMA_3_70B, args(max_model_len=65536, enable_chunked_prefill=False))
    assert result["chunked_prefill"] is False
    assert result["profile_tokens"] == 65536


def test_sliding_window_keeps_chunked_prefill_off():
    model = dict(MISTRAL_7B_V03, sliding_window=4096)
    result = VM.profile_reserve(model, args(max_model_len=65536, tensor_parallel_size=1))
    assert result["chunked_prefill"] is False and result["profile_tokens"] == 65536


def test_explicit_batched_tokens_win():
    result = VM.profile_reserve(LLAMA_3_70B, args(max_num_batched_tokens=40000))
    assert result["profile_tokens"] == 40000


# --- (d) vLLM 0.19.1 (V1, chunked prefill by default) ------------------------------------------

@pytest.mark.parametrize("memory_mib, name, llm_class, seqs, tokens", [
    (32768, "Tesla V100-PCIE-32GB", False, None, 2048),
    (81559, "NVIDIA H100 80GB HBM3", False, None, 8192),
    (81920, "NVIDIA A100-SXM4-80GB", False, None, 2048),
    (32768, "Tesla V100-PCIE-32GB", True, None, 8192),
    (32768, "Tesla V100-PCIE-32GB", False, 32, 2048),
])
def test_v1_0191_default_tokens(memory_mib, name, llm_class, seqs, tokens):
    result = VM.profile_reserve(LLAMA_3_70B, args(max_num_seqs=seqs, gpu_memory_mib=memory_mib, gpu_name=name,
                                                  usage_context="llm_class" if llm_class else None),
                                (0, 19, 1))
    assert result["engine"] == "v1"
    assert result["chunked_prefill"] is True
    assert result["profile_tokens"] == tokens
    expected_seqs = seqs or (1024 if tokens == 8192 and not llm_class else 256)
    assert result["profile_seqs"] == min(expected_seqs, tokens)
    assert result["complete"] is True


def test_v1_0191_reference_sampler_and_total():
    result = VM.profile_reserve(LLAMA_3_70B, args(max_num_seqs=None, gpu_memory_mib=32768), (0, 19, 1))
    assert (result["profile_tokens"], result["profile_seqs"]) == (2048, 256)
    # Triton top-k/top-p (>= 8 rows): fp16 logits + fp32 copy + probs + noise = 14 B per element,
    # plus the cached buffer of min(256, 80 SMs) rows of float32.
    sampler = 2048 * 8192 * 2 + 256 * 128256 * 14 + 80 * 128256 * 4
    assert result["moments"]["sampler"] == sampler
    assert result["parts"] == {"activation_peak": sampler, "cublas_workspace": CUBLAS_VOLTA,
                               "non_torch": 256 * MIB}
    # NCCL is set up before 0.19.1's baseline snapshot: outside the budget.
    assert result["outside_budget"] == {"cuda_context": 512 * MIB, "nccl": 256 * MIB}
    assert "vllm@0.19.1:vllm/v1/worker/gpu_worker.py:384-421" in result["sources"]


def test_v1_0191_without_chunked_prefill_and_clamp():
    off = VM.profile_reserve(LLAMA_3_70B, args(enable_chunked_prefill=False, gpu_memory_mib=32768), (0, 19, 1))
    assert off["chunked_prefill"] is False and off["profile_tokens"] == 32768
    tiny = VM.profile_reserve(LLAMA_3_70B, args(max_model_len=1024, max_num_seqs=1, gpu_memory_mib=32768),
                              "0.19.1")
    assert tiny["profile_tokens"] == 1024 and tiny["profile_seqs"] == 1


def test_v1_0191_unknown_gpu_memory_is_flagged():
    result = VM.profile_reserve(LLAMA_3_70B, args(max_num_seqs=None), (0, 19, 1))
    assert result["profile_tokens"] == 2048
    assert result["missing"] == ["args.gpu_memory_mib"] and result["complete"] is False


def test_v1_in_0_8_5_on_ampere_counts_the_context():
    result = VM.profile_reserve(LLAMA_3_70B, args(compute_capability=(8, 0), max_num_seqs=None,
                                                  gpu_memory_mib=81920), (0, 8, 5))
    assert result["engine"] == "v1" and result["chunked_prefill"] is True
    assert (result["profile_tokens"], result["profile_seqs"]) == (8192, 1024)
    assert result["parts"]["cuda_context"] == 512 * MIB
    assert "cuda_context" not in result["outside_budget"]
    assert "vllm@0.8.5:vllm/v1/worker/gpu_worker.py:165-212" in result["sources"]


@pytest.mark.parametrize("version, line", [(None, "0.8.5"), ((0, 9, 2), "0.8.5"), ("0.19.1", "0.19.1"),
                                           ((0, 20, 0), "0.19.1"), ("0.10.1rc1", "0.19.1")])
def test_version_lines(version, line):
    result = VM.profile_reserve(LLAMA_3_70B, args(gpu_memory_mib=32768), version)
    assert ("vLLM %s line" % line) in result["formula"]


# --- (e) missing inputs ------------------------------------------------------------------------

@pytest.mark.parametrize("field", ["hidden_size", "intermediate_size", "vocab_size"])
def test_missing_dimension_falls_back_to_the_old_constant(field):
    model = dict(LLAMA_3_70B)
    model[field] = None
    result = VM.profile_reserve(model, args())
    assert result["bytes"] == 1536 * MIB
    assert result["parts"] == {"fallback_constant": 1536 * MIB}
    assert result["complete"] is False
    assert result["missing"] == ["model.%s" % field]
    assert result["profile_tokens"] == 32768          # still known from the arguments
    assert "1536 MiB" in result["formula"]


def test_missing_max_model_len_in_v0_falls_back():
    result = VM.profile_reserve(LLAMA_3_70B, args(max_model_len=None))
    assert result["bytes"] == 1536 * MIB and result["profile_tokens"] is None
    assert "args.max_model_len" in result["missing"]


def test_missing_minor_fields_are_assumed_and_listed():
    model = dict(LLAMA_3_70B, dtype_bytes=None, num_attention_heads=None)
    result = VM.profile_reserve(model, args(compute_capability=None))
    assert result["engine"] == "v0"                  # unknown capability: V0 assumed
    assert result["complete"] is False
    assert set(result["missing"]) == {"model.dtype_bytes", "model.num_attention_heads",
                                      "args.compute_capability"}
    # dtype 2 assumed; the MLP moment does not depend on the attention shape.
    assert result["parts"]["activation_peak"] == (3 * 8192 + 3 * 14336) * 32768 * 2


def test_empty_inputs_do_not_raise():
    result = VM.profile_reserve({}, {})
    assert result["bytes"] == 1536 * MIB and result["complete"] is False


# --- (f) monotonic -----------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(a=st.integers(min_value=1, max_value=32768), b=st.integers(min_value=1, max_value=32768),
       seqs=st.sampled_from([1, 8, 32, 256]))
def test_reserve_grows_with_max_model_len(a, b, seqs):
    low, high = sorted((a, b))
    first = VM.profile_reserve(LLAMA_3_70B, args(max_model_len=low, max_num_seqs=seqs))
    second = VM.profile_reserve(LLAMA_3_70B, args(max_model_len=high, max_num_seqs=seqs))
    assert first["bytes"] <= second["bytes"]


@settings(max_examples=60, deadline=None)
@given(a=st.integers(min_value=1000, max_value=300000), b=st.integers(min_value=1000, max_value=300000),
       seqs=st.sampled_from([1, 32, 256]), version=st.sampled_from([(0, 8, 5), (0, 19, 1)]))
def test_reserve_grows_with_vocab(a, b, seqs, version):
    low, high = sorted((a, b))
    common = args(max_num_seqs=seqs, tensor_parallel_size=1, gpu_memory_mib=32768)
    first = VM.profile_reserve(dict(QWEN25_7B, vocab_size=low), common, version)
    second = VM.profile_reserve(dict(QWEN25_7B, vocab_size=high), common, version)
    assert first["bytes"] <= second["bytes"]


def test_reserve_strictly_grows_across_the_reference_contexts():
    values = [VM.profile_reserve(LLAMA_3_70B, args(max_model_len=n))["bytes"] for n in (4096, 8192, 16384, 32768)]
    assert values == sorted(values) and len(set(values)) == 4


# --- calibration against a logged profile run ---------------------------------------------------

@pytest.mark.parametrize("tp", [1, 2])
def test_calibration_llama3_8b_v0_h100(tp):
    """vllm-project/vllm#10511: V0, Meta-Llama-3-8B, 8192 tokens / 256 sequences on an H100 logged
    'PyTorch activation peak memory 1.26GiB' at TP 1 and TP 2 (two decimals)."""
    result = VM.profile_reserve(LLAMA_3_8B, {"max_model_len": 8192, "tensor_parallel_size": tp,
                                             "compute_capability": (9, 0), "vllm_use_v1": False})
    torch_peak = result["parts"]["activation_peak"] + result["parts"]["cublas_workspace"]
    assert result["parts"]["cublas_workspace"] == CUBLAS_HOPPER
    assert result["moments"]["sampler"] == result["parts"]["activation_peak"]
    assert 1.255 * GIB <= torch_peak < 1.265 * GIB


# --- quantization and CUDA graphs --------------------------------------------------------------

def test_gptq_on_volta_adds_the_dequantized_weight():
    plain = VM.profile_reserve(LLAMA_3_70B, args(max_model_len=2048))
    gptq = VM.profile_reserve(LLAMA_3_70B, args(max_model_len=2048, quantization="gptq"))
    unit = 2048 * 2
    # gate_up GEMM: 3H + 2I' activations plus the fp16 copy of the 8192 x 28672 weight shard.
    mlp_up = (3 * 8192 + 2 * 14336) * unit + 8192 * 28672 * 2
    assert gptq["moments"]["mlp_up"] == mlp_up
    assert gptq["parts"]["activation_peak"] == mlp_up > plain["parts"]["activation_peak"]
    assert "vllm@0.8.5:csrc/quantization/gptq/q_gemm.cu:1830" in gptq["sources"]
    ampere = VM.profile_reserve(LLAMA_3_70B, args(max_model_len=2048, quantization="gptq",
                                                  compute_capability=(8, 0), vllm_use_v1=False))
    assert ampere["moments"]["mlp_up"] == (3 * 8192 + 2 * 14336) * unit   # gptq_marlin: no copy


def test_cuda_graphs_are_outside_the_budget():
    result = VM.profile_reserve(LLAMA_3_70B, args(enforce_eager=False))
    assert result["outside_budget"]["cuda_graphs"] == 80 * 14 * MIB
    assert "cuda_graphs" not in result["parts"]
    assert result["bytes"] == VM.profile_reserve(LLAMA_3_70B, args())["bytes"]
    assert "outside gpu_memory_utilization" in result["formula"]
    opted_in = VM.profile_reserve(LLAMA_3_70B, args(enforce_eager=False, gpu_memory_mib=32768,
                                                    memory_profiler_estimate_cudagraphs=True), (0, 19, 1))
    assert opted_in["parts"]["cuda_graphs"] == 80 * 14 * MIB
    assert "torch.compile" in opted_in["formula"]


def test_constants_carry_source_and_confidence():
    for name, entry in VM.CONSTANTS.items():
        assert entry["confidence"] in ("verified", "third_party", "inferred"), name
        assert entry["source"], name
    assert VM.MEMORY_MODEL_SOURCES and len(VM.MEMORY_MODEL_SOURCES) == len(set(VM.MEMORY_MODEL_SOURCES))
