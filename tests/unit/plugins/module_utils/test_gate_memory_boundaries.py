# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Boundary tests for every memory comparison of the gate (issue 22, part 5).

Each comparison of bytes, MiB, GiB, tokens or disk in the gate (_gate_rules_memory.py), _vllm_memory.py and _plan.py is
tried exactly on its boundary (the model that fits to the byte, the context that fits to the
token) and one unit to each side, and each test says which side vLLM 0.8.5 is on, with its source
(paths inside the release sdist, as in facts.md and docs/deploy_gate.md). Inputs are built with
the modules' own constants; the expected numbers are worked out here by hand.

The fixed frame: one V100 32 GB, gpu_memory_utilization 0.5 and policy reserve_mib 1536, so the
usable memory is 32768 MiB x 0.5 - 1536 MiB = 14848 MiB to the byte (no float rounding, no
modelled reserve moving with max_model_len). Llama-3.1-8B's config.json (32 layers, 8 KV heads,
head_dim 128) in float16 holds 2 x 32 x 8 x 128 x 2 = 131072 bytes of KV cache per token
(facts.md section 8), so an 8192-token sequence is exactly 1 GiB.

How vLLM 0.8.5 decides, the sources the tests below cite:

- V0 (every GPU below compute capability 8.0, so the V100): vllm/worker/worker.py
  determine_num_available_blocks: available = total x gpu_memory_utilization - (weights + profile
  peak + non-torch memory); num_gpu_blocks = max(int(available // cache_block_size), 0); then
  raise_if_cache_size_invalid raises "No available memory for the cache blocks" when
  num_gpu_blocks <= 0, and "The model's max seq len (L) is larger than the maximum number of tokens
  that can be stored in KV cache (N)" when L > block_size x (num_gpu_blocks // pipeline_parallel_size).
- V1 (0.8.5 on 8.0 and up): vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory raises
  when available_memory <= 0 and when needed_memory > available_memory, needed_memory being
  FullAttentionSpec.max_memory_usage_bytes = cdiv(max_model_len, block_size) x page_size_bytes
  (vllm/v1/kv_cache_interface.py).

So in both engines a context whose KV cache needs exactly the memory left fits, and no KV memory
at all is a refusal. Both count whole blocks (16 tokens by default); the contexts here are
multiples of 16, where the gate's byte count and vLLM's block count agree exactly.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import os
import sys

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.converters import _gptq
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _plan as P
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge import _policy
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge import _vllm_memory as VM
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate import GateInputError, evaluate

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_plan_fp16_fallback as TF  # noqa: E402  (the Llama-3.1-8B config.json and its NVFP4 checkpoint's facts)

TODAY = datetime.date(2026, 9, 1)
MIB = 1024 ** 2
GIB = 1024 ** 3

V100 = {"name": "Tesla V100-PCIE-32GB", "compute_capability": "7.0", "memory_total_mib": 32768}
# vllm/vllm-openai:v0.8.5 as released: CUDA_VERSION=12.4.0 (_policy.VLLM_RELEASES["0.8.5"]).
IMAGE_0_8_5 = {"cuda_version": "12.4.0", "require_cuda": _policy.require_cuda_string("12.4"),
               "arch_list": ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0+PTX"],
               "quantization_methods": _policy.VLLM_RELEASES["0.8.5"]["quantization_methods"],
               "vllm_version": "0.8.5"}
# meta-llama/Llama-3.1-8B-Instruct config.json, as the serving-path tests type it.
LLAMA_8B = TF.LLAMA
# The same without num_hidden_layers: the KV cache per token is unknown, only the weights are judged.
NO_KV_SHAPE = dict((k, v) for k, v in LLAMA_8B.items() if k != "num_hidden_layers")

RESERVE_MIB = 1536
USABLE = (32768 // 2 - RESERVE_MIB) * MIB            # 14848 MiB
PER_TOKEN = 2 * 32 * 8 * 128 * 2                     # 128 KiB
CONTEXT = 8192
SEQ = CONTEXT * PER_TOKEN                            # 1 GiB
ARGS = {"tensor_parallel_size": 1, "dtype": "float16", "gpu_memory_utilization": 0.5, "max_model_len": CONTEXT,
        "max_num_seqs": 8}


def gate(weights, model=None, gpus=1, reserve_mib=RESERVE_MIB, **vllm):
    model = LLAMA_8B if model is None else model
    args = dict(ARGS, **vllm)
    memories = gpus if isinstance(gpus, list) else [32768] * gpus
    return evaluate(gpus=[dict(V100, memory_total_mib=m) for m in memories], driver_version="580.95.05",
                    image=IMAGE_0_8_5, model=dict(model, weight_bytes=weights), vllm=args,
                    policy_overrides={"reserve_mib": reserve_mib}, today=TODAY)


def codes(items):
    return [item["code"] for item in items]


def vram_message(result):
    found = [r["message"] for r in result["reasons"] if r["code"] == "INSUFFICIENT_VRAM"]
    assert len(found) == 1, result["reasons"]
    return found[0]


# --- _gate_rules_memory: weights against the usable memory ----------------------------------


@pytest.mark.parametrize("tp, offload_gb, weights, per_gpu, allowed", [
    (1, 0, USABLE, USABLE, True),
    (1, 0, USABLE + 1, USABLE + 1, False),
    # TP 2: each GPU holds ceil(weights / 2).
    (2, 0, 2 * USABLE, USABLE, True),
    (2, 0, 2 * USABLE + 1, USABLE + 1, False),
    # cpu_offload_gb 0.5: vLLM offloads int(0.5 x 1024**3) bytes per GPU (vllm/worker/model_runner.py
    # set_cpu_offload_max_bytes), parameter by parameter until that much is on the CPU
    # (vllm/model_executor/models/utils.py maybe_offload_to_cpu: at least that much).
    (1, 0.5, USABLE + GIB // 2, USABLE, True),
    (1, 0.5, USABLE + GIB // 2 + 1, USABLE + 1, False),
    # Offloading more than there is leaves 0 bytes on the GPU, not less (vLLM's loop runs out of
    # parameters), and the whole usable memory to the KV cache.
    (1, 2, GIB, 0, True),
])
def test_weights_that_fill_the_usable_memory_to_the_byte_pass_the_weights_check(tp, offload_gb, weights, per_gpu, allowed):
    """_gate_rules_memory._fit `per_gpu > usable`: weights equal to the usable memory pass, one byte more
    is INSUFFICIENT_VRAM for the weights.

    vLLM has no comparison of the weights alone: it subtracts them with the profile peak from
    total x util and sizes the KV cache from the rest (vllm/worker/worker.py
    determine_num_available_blocks), so the rule is modelled on that subtraction. Weights over the
    budget leave a negative rest, which vLLM clamps to 0 blocks and refuses ("No available memory
    for the cache blocks", raise_if_cache_size_invalid) when the weights load at all. Weights
    exactly equal to the budget leave 0 bytes: that is a KV-cache refusal, not a weights one, so
    the weights check lets equality through to the KV check below (next test). Here the KV shape
    is unknown, so only the weights are judged (MEMORY_PLAN_INCOMPLETE).
    """
    result = gate(weights, model=NO_KV_SHAPE, gpus=tp, tensor_parallel_size=tp, cpu_offload_gb=offload_gb)
    plan = result["plan"]
    assert plan["usable_bytes_per_gpu"] == USABLE
    assert plan["weights_bytes_per_gpu"] == per_gpu
    assert plan["kv_cache_bytes_per_gpu"] == max(0, USABLE - per_gpu)
    assert result["allowed"] is allowed, result["reasons"]
    if allowed:
        assert "MEMORY_PLAN_INCOMPLETE" in codes(result["warnings"])
    else:
        assert codes(result["reasons"]) == ["INSUFFICIENT_VRAM"]
        assert vram_message(result).startswith("the weights need 14.5 GiB per GPU")


@pytest.mark.parametrize("weights, kv_budget, which", [
    (USABLE - 1, 1, "the KV cache for one 8192-token sequence"),
    (USABLE, 0, "the KV cache for one 8192-token sequence"),
    (USABLE + 1, 0, "the weights need"),
    (USABLE + SEQ, 0, "the weights need"),
])
def test_weights_that_leave_no_kv_memory_are_refused_as_vllm_refuses_them(weights, kv_budget, which):
    """With the KV shape known, weights that fill the usable memory exactly are refused by the KV
    check: 0 bytes left, and vLLM 0.8.5 stops with "No available memory for the cache blocks"
    (V0 vllm/worker/worker.py raise_if_cache_size_invalid: num_gpu_blocks <= 0; V1
    vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory: available_memory <= 0). The
    budget left is clamped at 0 as vLLM clamps num_gpu_blocks = max(num_gpu_blocks, 0)."""
    result = gate(weights)
    plan = result["plan"]
    assert plan["kv_cache_bytes_per_gpu"] == kv_budget
    assert plan["kv_cache_tokens"] == 0
    assert plan["fits_one_sequence"] is False and plan["max_concurrent_full_sequences"] == 0
    assert codes(result["reasons"]) == ["INSUFFICIENT_VRAM"]
    assert vram_message(result).startswith(which)


# --- _gate_rules_memory: one max_model_len sequence of KV cache --------------------------------


@pytest.mark.parametrize("weights, max_model_len, allowed, kv_tokens, concurrent", [
    (USABLE - SEQ, CONTEXT, True, CONTEXT, 1),                   # fits to the byte
    (USABLE - SEQ + 1, CONTEXT, False, CONTEXT - 1, 0),          # one byte short
    (USABLE - SEQ, CONTEXT + 16, False, CONTEXT, 0),             # one block more
    (USABLE - SEQ, CONTEXT + 1, False, CONTEXT, 0),              # one token more
    (USABLE - SEQ, CONTEXT - 16, True, CONTEXT, 1),
    # max_concurrent_full_sequences is the budget // one sequence: 2 exactly, then 1.
    (USABLE - 2 * SEQ, CONTEXT, True, 2 * CONTEXT, 2),
    (USABLE - 2 * SEQ + 1, CONTEXT, True, 2 * CONTEXT - 1, 1),
])
def test_a_context_that_fits_to_the_token_is_allowed(weights, max_model_len, allowed, kv_tokens, concurrent):
    """_gate_rules_memory._fit `seq_bytes <= kv_budget`: a sequence whose KV cache needs exactly the
    memory left fits. vLLM 0.8.5 is on the same side: V0 raises only when max_model_len >
    block_size x num_gpu_blocks (vllm/worker/worker.py raise_if_cache_size_invalid, "The model's
    max seq len ... is larger than the maximum number of tokens that can be stored in KV cache"),
    V1 only when needed_memory > available_memory (vllm/v1/core/kv_cache_utils.py
    check_enough_kv_cache_memory). 8192 tokens are 512 whole blocks of 16, so vLLM's
    num_gpu_blocks = 1 GiB // (16 x 128 KiB) = 512 holds exactly max_model_len; one byte less
    leaves 511 blocks (8176 tokens) and one token more needs 513."""
    result = gate(weights, max_model_len=max_model_len)
    plan = result["plan"]
    assert plan["kv_cache_bytes_per_gpu"] == USABLE - weights
    assert plan["sequence_kv_bytes_per_gpu"] == max_model_len * PER_TOKEN
    assert plan["kv_cache_tokens"] == kv_tokens
    assert plan["fits_one_sequence"] is allowed
    assert plan["max_concurrent_full_sequences"] == concurrent
    assert result["allowed"] is allowed, result["reasons"]
    if not allowed:
        assert vram_message(result).startswith("the KV cache for one %d-token sequence" % max_model_len)


@pytest.mark.parametrize("kv_tokens, suggested", [
    (16, 16), (1023, 1008), (1024, 1024), (2047, 1024), (2048, 2048),
])
def test_the_suggested_max_model_len_is_whole_blocks_that_fit(kv_tokens, suggested):
    """The KV refusal suggests the tokens left rounded down to 1024 (from 1024 tokens up) or to 16
    below that: whole 16-token blocks, vLLM 0.8.5's block_size when none is given
    (vllm/platforms/cuda.py check_and_update_config), so the suggestion also fits in vLLM's block
    count (V0: block_size x num_gpu_blocks). At exactly 1024 tokens both roundings give 1024 (a `>` there would change
    nothing). The suggested context fits with the same weights."""
    weights = USABLE - kv_tokens * PER_TOKEN
    result = gate(weights)
    assert result["plan"]["kv_cache_tokens"] == kv_tokens
    assert "lower max_model_len to %d or less" % suggested in vram_message(result)
    again = gate(weights, max_model_len=suggested)
    assert again["allowed"] is True, again["reasons"]


@pytest.mark.parametrize("weights, offload_gb, reserve_mib, gpus_hint, offload_hint", [
    # One byte, one GiB and one GiB + 1 byte over: offload ceil(over / GiB + offload + 1) GiB.
    (USABLE + 1, 0, RESERVE_MIB, 2, 2),
    (USABLE + GIB, 0, RESERVE_MIB, 2, 2),
    (USABLE + GIB + 1, 0, RESERVE_MIB, 2, 3),
    (2 * USABLE, 0, RESERVE_MIB, 2, 16),
    (2 * USABLE + 1, 0, RESERVE_MIB, 3, 16),
    # Already offloading 1 GiB and one byte over: 1 more GiB, plus the spare one.
    (USABLE + GIB + 1, 1, RESERVE_MIB, 2, 3),
    # A reserve that takes the whole budget: no GPU count can help, only the offload is named.
    (GIB, 0, 32768 // 2, None, 2),
])
def test_the_ways_out_of_a_weights_refusal(weights, offload_gb, reserve_mib, gpus_hint, offload_hint):
    """The weights refusal names the GPU count ceil(weights / (usable + offload)) when usable > 0,
    and cpu_offload_gb ceil((per_gpu - usable) / GiB + offload + 1): the smallest whole GiB
    that fits plus one spare. Either way out, taken, passes the weights check (vLLM: with N GPUs
    each holds weights / N, and --cpu-offload-gb moves at least that many bytes off the GPU)."""
    result = gate(weights, model=NO_KV_SHAPE, reserve_mib=reserve_mib, cpu_offload_gb=offload_gb)
    text = vram_message(result)
    assert "offload at least %d GiB per GPU to CPU memory" % offload_hint in text
    if gpus_hint is None:
        assert result["plan"]["usable_bytes_per_gpu"] == 0
        assert "spread it over" not in text
    else:
        assert "spread it over %d or more such GPUs" % gpus_hint in text
        spread = gate(weights, model=NO_KV_SHAPE, reserve_mib=reserve_mib, cpu_offload_gb=offload_gb, gpus=gpus_hint,
                      tensor_parallel_size=gpus_hint)
        assert "INSUFFICIENT_VRAM" not in codes(spread["reasons"]), spread["reasons"]
        narrower = gate(weights, model=NO_KV_SHAPE, reserve_mib=reserve_mib, cpu_offload_gb=offload_gb,
                        gpus=gpus_hint - 1, tensor_parallel_size=gpus_hint - 1)
        assert "INSUFFICIENT_VRAM" in codes(narrower["reasons"])
    offloaded = gate(weights, model=NO_KV_SHAPE, reserve_mib=reserve_mib, cpu_offload_gb=offload_hint)
    assert "INSUFFICIENT_VRAM" not in codes(offloaded["reasons"]), offloaded["reasons"]


@pytest.mark.parametrize("reserve_mib, usable", [
    (32768 // 2 - 1, MIB), (32768 // 2, 0), (32768 // 2 + 1, 0),
])
def test_usable_memory_is_never_negative(reserve_mib, usable):
    """usable = max(0, total x util - reserve): a reserve beyond the budget leaves 0, not less, as
    vLLM's num_gpu_blocks = max(num_gpu_blocks, 0) (vllm/worker/worker.py
    determine_num_available_blocks); any weights are then refused."""
    result = gate(1, reserve_mib=reserve_mib)
    assert result["plan"]["usable_bytes_per_gpu"] == usable
    assert result["plan"]["kv_cache_bytes_per_gpu"] == max(0, usable - 1)
    assert codes(result["reasons"]) == ["INSUFFICIENT_VRAM"]


@pytest.mark.parametrize("tp, per_token", [
    (1, 2 * 28 * 2 * 128 * 2), (2, 2 * 28 * 1 * 128 * 2), (4, 2 * 28 * 1 * 128 * 2),
])
def test_kv_heads_are_replicated_when_tensor_parallel_exceeds_them(tp, per_token):
    """max(1, kv_heads // tp): at tp == kv_heads each GPU holds one KV head, and above it still one
    (replicated), never 0: vllm/config.py ModelConfig.get_num_kv_heads returns
    max(1, total_num_kv_heads // tensor_parallel_size) (facts.md section 8).
    Qwen/Qwen2.5-1.5B-Instruct config.json: 28 layers, 12 heads, 2 KV heads, head_dim 128."""
    qwen = {"num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2, "hidden_size": 1536,
            "intermediate_size": 8960, "vocab_size": 151936, "max_position_embeddings": 32768,
            "torch_dtype": "bfloat16", "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}
    result = gate(3 * 10 ** 9, model=qwen, gpus=tp, tensor_parallel_size=tp)
    assert result["plan"]["kv_bytes_per_token_per_gpu"] == per_token


@pytest.mark.parametrize("memories, uneven", [
    ([20000, 19000], False), ([20000, 18999], True), ([19000, 20000], False),
])
def test_the_plan_uses_the_smallest_gpu_and_warns_below_95_percent(memories, uneven):
    """The plan sizes every GPU like the smallest, as vLLM does: the executor takes the minimum of
    the workers' block counts (vllm/executor/executor_base.py determine_num_available_blocks).
    GPU_MEMORY_UNEVEN is the gate's own threshold (vLLM has none): smallest < 0.95 x largest, so
    19000 MiB next to 20000 MiB (exactly 95%) is even and 18999 MiB is not."""
    result = gate(10 ** 9, gpus=memories, tensor_parallel_size=2)
    assert result["plan"]["gpu_memory_total_bytes"] == min(memories) * MIB
    assert ("GPU_MEMORY_UNEVEN" in codes(result["warnings"])) is uneven


@pytest.mark.parametrize("key, value, ok", [
    ("gpu_memory_utilization", 1.0, True),
    ("gpu_memory_utilization", 1.000001, False),
    ("gpu_memory_utilization", 0.000001, True),
    ("gpu_memory_utilization", 0, False),
    ("cpu_offload_gb", 0, True),
    ("cpu_offload_gb", -0.000001, False),
])
def test_memory_arguments_at_their_bounds(key, value, ok):
    """vLLM 0.8.5 takes gpu_memory_utilization 1.0 and refuses more ("GPU memory utilization must
    be less than 1.0", raised on > 1.0 in vllm/config.py CacheConfig._verify_args), and takes
    cpu_offload_gb 0 and refuses less ("CPU offload space must be non-negative", < 0, same place).
    gpu_memory_utilization 0 starts in 0.8.5 but leaves no KV cache; the gate refuses it as input."""
    if ok:
        gate(10 ** 9, **{key: value})
    else:
        with pytest.raises(GateInputError, match="vllm.%s" % key):
            gate(10 ** 9, **{key: value})


# --- _vllm_memory.profile_reserve: the profile run's size ------------------------------------------


def reserve(version=(0, 8, 5), cc=(7, 0), **args):
    base = {"max_model_len": CONTEXT, "max_num_seqs": 8, "tensor_parallel_size": 1, "enforce_eager": True,
            "compute_capability": cc, "gpu_memory_mib": 32768}
    base.update(args)
    keys = ("hidden_size", "intermediate_size", "vocab_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "head_dim")
    model = dict((k, LLAMA_8B[k]) for k in keys)
    return VM.profile_reserve(dict(model, dtype_bytes=2), base, version)


@pytest.mark.parametrize("max_model_len, chunked, tokens", [
    (2047, False, 2048), (2048, False, 2048), (2049, False, 2049),
    (32768, False, 32768), (32769, True, 2048),
])
def test_v0_profiles_max_model_len_tokens_up_to_32k_and_2048_above(max_model_len, chunked, tokens):
    """vLLM 0.8.5 V0 turns chunked prefill on by default only for max_model_len > 32768
    (vllm/engine/arg_utils.py:1505, use_long_context), so 32768 is still profiled whole; without
    chunked prefill SchedulerConfig sets max_num_batched_tokens = max(max_model_len, 2048)
    (vllm/config.py:68, 1967-1984), with it 2048."""
    result = reserve(max_model_len=max_model_len)
    assert (result["engine"], result["chunked_prefill"], result["profile_tokens"]) == ("v0", chunked, tokens)


@pytest.mark.parametrize("batched, seqs, rows", [(256, 256, 256), (256, 257, 256), (257, 256, 256)])
def test_v0_profile_rows_never_exceed_the_profile_tokens(batched, seqs, rows):
    """profile_run spreads max_num_batched_tokens over max_num_seqs prompts
    (vllm/worker/model_runner.py:1233-1237); vLLM refuses fewer tokens than sequences
    (vllm/config.py SchedulerConfig._verify_args: max_num_batched_tokens < max_num_seqs raises), so
    equal is the smallest it takes and the model clamps the rows below it."""
    result = reserve(max_num_batched_tokens=batched, max_num_seqs=seqs)
    assert (result["profile_tokens"], result["profile_seqs"]) == (batched, rows)


@pytest.mark.parametrize("memory_mib, tokens, rows", [(70 * 1024 - 1, 2048, 256), (70 * 1024, 8192, 1024)])
def test_v1_0_8_5_takes_the_large_defaults_from_70_gib(memory_mib, tokens, rows):
    """vLLM 0.8.5's V1 defaults (compute capability 8.0 and up): 8192 tokens and 1024 sequences for
    the OpenAI server when the device has >= 70 GiB (vllm/engine/arg_utils.py:1596,
    `device_memory >= 70 * GiB_bytes`), 2048 and 256 below."""
    result = reserve(cc=(8, 0), gpu_memory_mib=memory_mib, max_num_seqs=None)
    assert (result["engine"], result["profile_tokens"], result["profile_seqs"]) == ("v1", tokens, rows)


@pytest.mark.parametrize("chunked, max_model_len, seqs, tokens", [
    (False, 2048, 8, 2048), (False, 2049, 8, 2049),
    (True, 1023, 2, 2046), (True, 1024, 2, 2048), (True, 1025, 2, 2048),
])
def test_v1_0_19_1_profile_tokens_at_their_clamps(chunked, max_model_len, seqs, tokens):
    """vLLM 0.19.1: without chunked prefill max_num_batched_tokens is raised to max_model_len
    (vllm/engine/arg_utils.py:2107-2114), and it is clamped to max_num_seqs x max_model_len
    (arg_utils.py:2180-2230); the default on a GPU under 70 GiB is 2048."""
    result = reserve(version=(0, 19, 1), enable_chunked_prefill=chunked, max_model_len=max_model_len, max_num_seqs=seqs)
    assert (result["profile_tokens"], result["profile_seqs"]) == (tokens, min(seqs, tokens))


@pytest.mark.parametrize("rows, per_element", [(1, 32), (2, 50), (127, 50), (128, 38)])
def test_the_sort_scratch_per_logit_changes_at_2_and_128_rows(rows, per_element):
    """Bytes per logit element at V0's full-vocabulary sort, float16 logits: 2 (logits) + 4 (the
    float32 copy, vllm/model_executor/layers/sampler.py:270) + the larger of the sort (4 values + 8
    indices + scratch) and the masks after it (26). PyTorch's scratch (aten SortStable.cu, third
    party): 12 bytes for one row, 32 for 2 to 127 rows, 20 from 128 rows (segmented sort)."""
    assert VM._sort_bytes_per_element(rows, 2) == per_element


@pytest.mark.parametrize("seqs, triton", [(7, False), (8, True)])
def test_0_19_1_uses_the_triton_sampler_from_8_rows(seqs, triton):
    """vLLM 0.19.1 samples with the Triton top-k/top-p kernel (a cached buffer of
    min(pow2(rows), SMs) x vocab float32) from 8 rows (vllm/v1/sample/ops/topk_topp_sampler.py:251)."""
    sources = reserve(version=(0, 19, 1), max_num_seqs=seqs, max_num_batched_tokens=2048)["sources"]
    assert any("topk_topp_triton.py" in s for s in sources) is triton


@pytest.mark.parametrize("n, power", [(1, 1), (8, 8), (9, 16)])
def test_the_triton_buffer_rows_round_up_to_a_power_of_two(n, power):
    assert VM._next_pow2(n) == power


@pytest.mark.parametrize("version, tp, non_torch, nccl", [
    ((0, 8, 5), 1, 256, None), ((0, 8, 5), 2, 512, None), ((0, 19, 1), 1, 256, None), ((0, 19, 1), 2, 256, 256),
])
def test_multi_gpu_memory_starts_at_two_gpus(version, tp, non_torch, nccl):
    """V0 with more than one GPU adds NCCL and custom all-reduce buffers after the baseline snapshot
    (vllm/distributed/device_communicators/custom_all_reduce.py:56,156-161): the multi-GPU constant;
    0.19.1 initialises NCCL before it, outside the budget (v1/worker/gpu_worker.py:254-283)."""
    result = reserve(version=version, tensor_parallel_size=tp, max_num_batched_tokens=2048)
    assert result["parts"]["non_torch"] == non_torch * MIB
    assert result["outside_budget"].get("nccl") == (nccl * MIB if nccl else None)


@pytest.mark.parametrize("layers, graphs_mib", [(18, 256), (19, 19 * 14)])
def test_cuda_graphs_outside_the_budget_are_at_least_256_mib(layers, graphs_mib):
    """CUDA graphs (enforce_eager off) are captured after the KV cache in V0 (vllm/worker/worker.py:
    357-358): 14 MiB per layer, at least 256 MiB (vllm#11349, inferred)."""
    result = reserve(enforce_eager=False, max_num_batched_tokens=2048)
    assert result["outside_budget"]["cuda_graphs"] == 32 * 14 * MIB
    model = dict(LLAMA_8B, num_hidden_layers=layers, dtype_bytes=2)
    small = VM.profile_reserve(model, {"max_model_len": CONTEXT, "compute_capability": (7, 0)}, (0, 8, 5))
    assert small["outside_budget"]["cuda_graphs"] == graphs_mib * MIB


@pytest.mark.parametrize("value, parsed", [(2 ** 53, 2 ** 53), (2 ** 53 + 1, None), (1, 1), (0, None)])
def test_counts_beyond_2_53_are_not_read(value, parsed):
    assert VM._positive_int(value) == parsed


# --- _plan: the FP16 copy and the GPTQ repack of an NVFP4 checkpoint --------------------------------

# nvidia/Llama-3.1-8B-Instruct-FP4 (ModelOpt NVFP4): native is refused on a V100 with vLLM 0.8.5
# (nvfp4 needs 10.0), which sends the plan to the FP16 copy, then to the GPTQ repack.
NVFP4_8B = TF.LLAMA_8B_NVFP4
SHAPES_8B = TF.decoder_shapes(4096, 32, 32, 8, 14336)


def linear_bytes(group):
    return sum(s["count"] * _gptq.repacked_tensor_bytes(s["out_features"], s["in_features"], group) for s in SHAPES_8B)


def shaped(other):
    """NVFP4_8B with its shapes, and ``other`` bytes kept float16 in the GPTQ copy."""
    return dict(NVFP4_8B, nvfp4_linear_shapes=SHAPES_8B, nvfp4_other_bytes=other)


def other_for(group, tokens):
    """nvfp4_other_bytes that make the GPTQ copy at ``group`` leave exactly ``tokens`` of KV cache."""
    return USABLE - tokens * PER_TOKEN - linear_bytes(group)


def plan(model, max_model_len=CONTEXT, gpus=None, fp16_copy=None, gptq_copy=None, instances=None, **req):
    request = {"image": "vllm/vllm-openai:v0.8.5", "model_path": "/srv/models/m", "served_model_name": "m",
               "vllm_args": dict(ARGS, max_model_len=max_model_len),
               "instances": instances or [{"name": "vllm", "port": 8000, "gpus": "all"}],
               "driver": {"manage": True, "branch": "580"}}
    request.update(req)
    return P.plan(gpus=gpus or [dict(V100, index=0)], driver_version="580.95.05", image=dict(IMAGE_0_8_5),
                  model=model, request=request, policy_overrides={"reserve_mib": RESERVE_MIB}, today=TODAY,
                  fp16_copy=fp16_copy, gptq_copy=gptq_copy)


@pytest.mark.parametrize("fp16_bytes, max_model_len, path", [
    (USABLE - SEQ, CONTEXT, "fp16_fallback"),
    (USABLE - SEQ + 1, CONTEXT, None),
    (USABLE - SEQ, CONTEXT + 16, None),
])
def test_the_fp16_copy_is_taken_when_it_fits_to_the_byte(fp16_bytes, max_model_len, path):
    """The FP16 copy is judged by the same memory plan (weights, then one max_model_len sequence,
    `seq_bytes <= kv_budget`): exactly fitting, it is served; one byte or one block more and,
    without the NVFP4 shapes to size a GPTQ copy, the host is refused. vLLM 0.8.5's side is that of
    test_a_context_that_fits_to_the_token_is_allowed."""
    verdict = plan(dict(NVFP4_8B, fp16_weight_bytes=fp16_bytes), max_model_len=max_model_len)
    assert verdict["serving_path"] == path, verdict["reasons"]
    if path:
        assert verdict["allowed"] is True and verdict["plan"]["kv_cache_tokens"] == max_model_len
    else:
        assert codes(verdict["reasons"]) == ["QUANTIZATION_UNSUPPORTED_ON_ARCH", "INSUFFICIENT_VRAM"]


@pytest.mark.parametrize("extra, max_model_len, group", [
    (0, CONTEXT, 32), (1, CONTEXT, 64), (0, CONTEXT + 16, 64), (0, CONTEXT - 16, 32),
])
def test_the_smallest_gptq_group_that_fits_to_the_byte_is_taken(extra, max_model_len, group):
    """Group 16 is refused by the kernel rule; group 32, sized to leave exactly CONTEXT tokens of KV
    cache, is taken; one byte more of the copy, or one block more of context, and group 64 (smaller)
    is. Same comparison and vLLM side as the FP16 copy."""
    verdict = plan(shaped(other_for(32, CONTEXT) + extra), max_model_len=max_model_len)
    assert verdict["serving_path"] == "gptq_repack", verdict["reasons"]
    repack = verdict["serving"]["gptq_repack"]
    assert repack["group_size"] == group
    tried = dict((c["group_size"], c) for c in repack["candidates"])
    assert tried[32]["kv_cache_tokens"] == CONTEXT - (1 if extra else 0)
    assert tried[32]["allowed"] is (group == 32)


@pytest.mark.parametrize("kv_tokens, suggested", [(1023, 1008), (1024, 1024)])
def test_no_group_fits_suggests_the_largest_groups_context(kv_tokens, suggested):
    """When no group size fits a 32768-token context, the refusal suggests group 128's KV tokens
    rounded down to 1024 (from 1024 up) or 16, as the gate's own KV refusal does; taken, that
    context fits with group 128 exactly."""
    model = shaped(other_for(128, kv_tokens))
    verdict = plan(model, max_model_len=32768)
    assert verdict["allowed"] is False
    assert "vllm_args.max_model_len: %d or less (group size 128)" % suggested in vram_message(verdict)
    again = plan(model, max_model_len=suggested)
    assert again["serving"]["gptq_repack"]["group_size"] == 128, again["reasons"]


def test_the_repack_counts_the_tightest_instance():
    """With several instances a group size's KV tokens are the smallest instance's (the one that
    decides whether one sequence fits): a 16 GB V100 next to a 32 GB one."""
    gpus = [dict(V100, index=0), dict(V100, index=1, name="Tesla V100-PCIE-16GB", memory_total_mib=16384)]
    instances = [{"name": "big", "port": 8000, "gpus": [0]}, {"name": "small", "port": 8001, "gpus": [1]}]
    other = other_for(32, CONTEXT) - 8 * GIB         # group 32 leaves 8 GiB more on the 32 GB GPU
    verdict = plan(shaped(other), max_model_len=1024, gpus=gpus, instances=instances, serving_path="gptq_repack",
                   gptq_group_size=32)
    small = (32768 // 4 - RESERVE_MIB) * MIB - (linear_bytes(32) + other)
    tokens = [i["memory_plan"]["kv_cache_tokens"] for i in verdict["instances"]]
    assert tokens == [CONTEXT + 8 * GIB // PER_TOKEN, small // PER_TOKEN]
    assert verdict["serving"]["gptq_repack"]["kv_cache_tokens"] == small // PER_TOKEN


@pytest.mark.parametrize("short", [0, 1])
@pytest.mark.parametrize("kind", ["fp16", "gptq"])
def test_a_copy_that_fills_the_free_disk_to_the_byte_fits(kind, short):
    """_plan._copy_disk `free < needed`: a copy exactly as large as the free space fits, one byte
    less free is INSUFFICIENT_DISK. vLLM has no part here; the rule is the converter's, which runs
    later and refuses on the same side (_nvfp4.py convert: `if free < output_bytes: raise`)."""
    if kind == "fp16":
        needed = USABLE - SEQ
        verdict = plan(dict(NVFP4_8B, fp16_weight_bytes=needed), fp16_copy={"disk_free_bytes": needed - short})
    else:
        model = shaped(other_for(32, CONTEXT))
        needed = linear_bytes(32) + model["nvfp4_other_bytes"]
        verdict = plan(model, gptq_copy={"disk_free_bytes": needed - short})
    assert verdict["serving"]["%s_copy" % kind]["disk_needed_bytes"] == needed
    assert ("INSUFFICIENT_DISK" in codes(verdict["reasons"])) is bool(short)
    assert verdict["allowed"] is not short


@pytest.mark.parametrize("per_gpu, seq, ranks, size, offload, gpus", [
    (USABLE - SEQ, SEQ, 1, USABLE - SEQ, None, None),            # fits: no way out needed
    (USABLE - SEQ + 1, SEQ, 1, USABLE - SEQ + 1, 2, 2),          # one byte over
    (USABLE - SEQ + GIB, SEQ, 1, USABLE, 2, 2),                  # one GiB over
    (USABLE - SEQ + GIB + 1, SEQ, 1, USABLE + 1, 3, 2),
    (1, USABLE, 1, 1, 2, None),                                  # no room left for weights
    (USABLE - SEQ + 1, SEQ, 2, 2 * (USABLE - SEQ), 2, None),     # 2 GPUs of room: as many as now
    (USABLE - SEQ + 1, SEQ, 2, 2 * (USABLE - SEQ) + 1, 2, 3),
])
def test_the_ways_out_of_a_copys_vram_refusal(per_gpu, seq, ranks, size, offload, gpus):
    """_plan._vram_ways: cpu_offload_gb ceil(short / GiB) + 1 when weights + one sequence exceed the
    usable memory (`short > 0`), and the GPU count ceil(size / room) when there is room
    (`room > 0`) and it is more than now (`needed > ranks`)."""
    ways = P._vram_ways({"gpus_used": ranks, "weights_bytes_per_gpu": per_gpu, "usable_bytes_per_gpu": USABLE,
                         "sequence_kv_bytes_per_gpu": seq}, size)
    expected = []
    if offload:
        expected.append("vllm_args.cpu_offload_gb: %d (--cpu-offload-gb %d" % (offload, offload))
    if gpus:
        expected.append("%d or more such GPUs (tensor_parallel_size)" % gpus)
    assert [w[:len(e)] for w, e in zip(ways, expected)] == expected and len(ways) == len(expected)


@pytest.mark.parametrize("field, value, ok", [
    ("nvfp4_other_bytes", 2 ** 62, True), ("nvfp4_other_bytes", 2 ** 62 + 1, False),
    ("out_features", 2 ** 40, True), ("out_features", 2 ** 40 + 1, False),
])
def test_copy_sizes_beyond_their_bounds_are_input_errors(field, value, ok):
    shape = {"out_features": 4096, "in_features": 4096, "count": 1}
    model = {"nvfp4_linear_shapes": [dict(shape, **{field: value}) if field != "nvfp4_other_bytes" else shape],
             "nvfp4_other_bytes": value if field == "nvfp4_other_bytes" else 0}
    if ok:
        assert P.linear_shapes(model)[1] == model["nvfp4_other_bytes"]
    else:
        with pytest.raises(GateInputError, match=field):
            P.linear_shapes(model)
