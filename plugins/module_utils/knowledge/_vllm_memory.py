# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.deploy_gate module instead.
"""A model of what vLLM itself subtracts, besides the weights, before it sizes the KV cache.

vLLM sizes the KV cache per GPU as

    KV = total_memory * gpu_memory_utilization - weights - torch_peak_increase - non_torch_increase

(V0: vllm@0.8.5 worker/worker.py:253-256 with utils.py:2246-2249; V1: vllm@0.19.1
v1/worker/gpu_worker.py:384-421 with utils/mem_utils.py:274-279). ``torch_peak_increase`` is the
PyTorch allocator's peak during one dummy forward pass (the *profile run*) and
``non_torch_increase`` is memory the process took outside PyTorch since the worker's baseline
snapshot. profile_reserve() estimates those two terms (the "reserve") without a GPU, from the
model's config.json and the vLLM arguments, so that the deployment gate can predict the KV cache.

The model, step by step (every step cites the release source it was read from):

1. Engine. vLLM 0.8.5 runs V1 only on compute capability >= 8.0; a V100 (7.0) gets V0
   (engine/arg_utils.py:1106-1121, 1350-1356). vLLM 0.19.1 has V1 only.
2. Profile tokens T and sequences R.
   - 0.8.5 V0: chunked prefill defaults to on only for max_model_len > 32768
     (arg_utils.py:1501-1533); max_num_seqs defaults to 256 (:1562-1563). SchedulerConfig then sets
     max_num_batched_tokens = max(max_model_len, 2048) without chunked prefill and 2048 with it
     (config.py:68, 1967-1984). profile_run() spreads T = max_num_batched_tokens prompt tokens over
     R = max_num_seqs prompts (worker/model_runner.py:1233-1237, 1310-1314).
   - 0.8.5 V1 (compute capability >= 8.0): T = 8192 (>= 70 GiB GPUs) or 2048 for the OpenAI server
     (16384 / 8192 for the LLM class), R = min(T, max_num_seqs) with max_num_seqs 1024 / 256
     (arg_utils.py:1565-1627, v1/worker/gpu_model_runner.py:1456-1460).
   - 0.19.1: chunked prefill on by default; the same per-usage-context defaults (A100s excluded from
     the large ones), max_num_batched_tokens clamped to max_num_seqs * max_model_len, and raised to
     max_model_len when chunked prefill is off (engine/arg_utils.py:2024-2105, 2107-2114,
     2180-2230); R = min(T, max_num_seqs) (v1/worker/gpu_model_runner.py:5286).
3. The forward pass of a dense Llama-like decoder (Llama, Mistral, Qwen2: llama.py:90-94, 198-208,
   267-287, 363-367). The layers run one after another, so the peak is the largest set of tensors
   alive at one moment of one layer, in units of T x dtype_bytes (H hidden, I' = intermediate/tp,
   Q = heads/tp * head_dim, QKV = Q + 2 * max(1, kv_heads/tp) * head_dim):
     - alive throughout: the residual, the layer input (still referenced by the model's loop) and,
       in the MLP half, the attention output: 2H before the MLP, 3H in it (the RMSNorm with a
       residual works in place: layers/layernorm.py:32-42);
     - qkv_proj: 2H + QKV; attn_core: 2H + QKV + 2Q (V0 XFormers, the only V0 backend below 8.0:
       platforms/cuda.py:238-243, attention/backends/xformers.py:545, 736-743); 0.19.1 skips
       attention in the profile run and keeps only the output buffer Q
       (v1/attention/backends/triton_attn.py:443-445);
     - o_proj: 2H + QKV + Q + H, and with tp > 1 o_proj_all_reduce: 2H + QKV + Q + 2H (the
       all-reduce is out of place: distributed/parallel_state.py:333-359, pynccl.py:122);
     - mlp_up: 3H + 2I' (gate_up); mlp_act: 3H + 3I' (+ the SiluAndMul output,
       layers/activation.py:78-81); mlp_down: 3H + I' + H, and with tp > 1
       mlp_down_all_reduce: 3H + I' + 2H.
   GPTQ (exllama kernel) and AWQ below compute capability 8.0 dequantize each weight to a
   temporary fp16 copy during the GEMM (csrc/quantization/gptq/q_gemm.cu:1830,
   layers/quantization/awq.py:174-177); with args["quantization"] set, that copy is added to the
   GEMM moments.
4. The logits and the sampler. Logits are computed only for the last token of each prompt
   (logits_processor.py:127-138, sampling_metadata.py:281-290), so they are R x vocab, while the
   model output T x H is still referenced. V0 samples only on the driver (rank 0:
   worker/model_runner.py:1810-1821), with top_k = vocab - 1 and top_p 0.99 (:1266-1268): the
   logits are copied to float32 (sampler.py:270) and fully sorted (float32 values + int64 indices,
   sampler.py:387-413). PyTorch's sort allocates scratch: 8 B/element of indices plus cub's
   alternate key/value buffers (12 B) for >= 128 rows, int2 pairs twice plus a key copy plus cub's
   buffers (32 B) for 2-127 rows (pytorch aten/src/ATen/native/cuda/SortStable.cu, third party).
   Bytes per logit element: dtype + 4 + 12 + scratch at the sort, dtype + 30 after the top-k/top-p
   masks, whichever is larger. 0.19.1 with >= 8 rows uses a Triton top-k/top-p kernel in place
   (v1/sample/ops/topk_topp_sampler.py:251) with a cached buffer of min(pow2(R), SMs) x vocab
   float32 (topk_topp_triton.py:1017-1018), then float32 probs and the exponential noise
   (topk_topp_sampler.py:112, 325-346): dtype + 12 bytes per element.
5. Around the pass: the cuBLAS workspace PyTorch allocates through its caching allocator at the
   first GEMM (8 MiB + 128 KiB, 32 MiB on Hopper, plus 1 MiB for cuBLASLt; pytorch
   CublasHandlePool.cpp, third party) counts in the torch peak; the non-torch increase (lazily
   loaded kernels, cuBLAS handles and, in V0 with more than one GPU, the NCCL communicators and the
   custom all-reduce buffers: device_communicators/custom_all_reduce.py:56, 156-161) is a measured
   constant (NON_TORCH_*; seen at 0.16-0.23 GiB on one GPU and 0.20-0.73 GiB with two or more).
6. Outside the budget (not subtracted by vLLM, but the GPU must hold it next to total*util): the
   CUDA context (the V0 baseline snapshot is taken after it exists: worker/worker.py:177-181), in
   0.19.1 also NCCL (initialised before the snapshot: v1/worker/gpu_worker.py:254-283, and
   startup refuses when free memory is below total*util: v1/worker/utils.py:403-423), and CUDA
   graphs when enforce_eager is off (captured after the KV cache in V0: worker/worker.py:357-358;
   measured but subtracted in 0.19.1 only with VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1:
   gpu_worker.py:379-399). vLLM 0.8.5's V1 worker is different: it subtracts the absolute torch
   peak plus ALL non-torch memory, the CUDA context included (v1/worker/gpu_worker.py:165-212).

Calibration: vllm-project/vllm#10511 logged a V0 "PyTorch activation peak memory 1.26GiB" for
Meta-Llama-3-8B at its default 8192 tokens / 256 sequences on an H100, at TP 1 and TP 2 alike; this
model gives 1287 MiB (1.257 GiB) for both (the sampler moment dominates). What remains an estimate:
the non-torch constants, the CUDA context, the CUDA graph figure, models that are not dense
Llama-like decoders (MoE, MLA, multimodal encoders are not modelled) and torch.compile (0.19.1
without enforce_eager: the eager figure is used as an upper bound).

Pure: no I/O, no Ansible imports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import re

from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._gpu_models import SMS_BY_CC

MIB = 1024 ** 2
GIB = 1024 ** 3

# The old fixed reserve (ACTIVATION_RESERVE_MIB in _policy.py), used when the model's dimensions
# are unknown.
FALLBACK_RESERVE_MIB = 1536

_V085 = "vllm@0.8.5:vllm/"
_V0191 = "vllm@0.19.1:vllm/"

# Every line this model rests on, keyed for the per-result "sources" list. All "verified" (read in
# the release sources, vllm-project/vllm at the tags v0.8.5 and v0.19.1) unless the text says otherwise.
_SRC = (
    ("budget_v0", _V085 + "worker/worker.py:253-256"),
    ("profile_v0", _V085 + "worker/worker.py:246-249"),
    ("baseline_v0", _V085 + "worker/worker.py:177-186"),
    ("graphs_v0", _V085 + "worker/worker.py:357-358"),
    ("profiling_v0", _V085 + "utils.py:2176-2249"),
    ("min_blocks_v0", _V085 + "executor/executor_base.py:103-106"),
    ("oracle_v1", _V085 + "engine/arg_utils.py:1106-1121"),
    ("oracle_cc", _V085 + "engine/arg_utils.py:1350-1356"),
    ("defaults_v0", _V085 + "engine/arg_utils.py:1501-1563"),
    ("defaults_v1_085", _V085 + "engine/arg_utils.py:1565-1627"),
    ("sched_v0", _V085 + "config.py:1967-1984"),
    ("sched_const_v0", _V085 + "config.py:68"),
    ("profile_run_v0", _V085 + "worker/model_runner.py:1233-1237"),
    ("dummy_run_v0", _V085 + "worker/model_runner.py:1266-1268"),
    ("seq_split_v0", _V085 + "worker/model_runner.py:1310-1314"),
    ("driver_sampler_v0", _V085 + "worker/model_runner.py:1810-1821"),
    ("prune_logits", _V085 + "model_executor/layers/logits_processor.py:127-138"),
    ("sample_rows", _V085 + "model_executor/sampling_metadata.py:281-290"),
    ("sampler_f32_v0", _V085 + "model_executor/layers/sampler.py:270"),
    ("sampler_sort_v0", _V085 + "model_executor/layers/sampler.py:387-413"),
    ("sampler_probs_v0", _V085 + "model_executor/layers/sampler.py:282-284"),
    ("xformers_v0", _V085 + "platforms/cuda.py:238-243"),
    ("xformers_out", _V085 + "attention/backends/xformers.py:545"),
    ("xformers_fwd", _V085 + "attention/backends/xformers.py:736-743"),
    ("llama_mlp", _V085 + "model_executor/models/llama.py:90-94"),
    ("llama_attn", _V085 + "model_executor/models/llama.py:198-208"),
    ("llama_layer", _V085 + "model_executor/models/llama.py:267-287"),
    ("llama_loop", _V085 + "model_executor/models/llama.py:363-367"),
    ("rmsnorm_inplace", _V085 + "model_executor/layers/layernorm.py:32-42"),
    ("silu_out", _V085 + "model_executor/layers/activation.py:78-81"),
    ("allreduce_oop", _V085 + "distributed/parallel_state.py:333-359"),
    ("pynccl_out", _V085 + "distributed/device_communicators/pynccl.py:122"),
    ("custom_ar", _V085 + "distributed/device_communicators/custom_all_reduce.py:56,156-161"),
    ("gptq_temp", "vllm@0.8.5:csrc/quantization/gptq/q_gemm.cu:1830"),
    ("awq_temp", _V085 + "model_executor/layers/quantization/awq.py:174-177"),
    ("budget_v1_085", _V085 + "v1/worker/gpu_worker.py:165-212"),
    ("dummy_run_v1_085", _V085 + "v1/worker/gpu_model_runner.py:1456-1460"),
    ("sampler_v1_085", _V085 + "v1/sample/ops/topk_topp_sampler.py:31-49,189-210"),
    ("budget_v1", _V0191 + "v1/worker/gpu_worker.py:384-421"),
    ("graphs_v1", _V0191 + "v1/worker/gpu_worker.py:379-399"),
    ("baseline_v1", _V0191 + "v1/worker/gpu_worker.py:254-283"),
    ("request_v1", _V0191 + "v1/worker/utils.py:403-423"),
    ("profiling_v1", _V0191 + "utils/mem_utils.py:274-279"),
    ("defaults_v1", _V0191 + "engine/arg_utils.py:2024-2105"),
    ("chunked_v1", _V0191 + "engine/arg_utils.py:2107-2114"),
    ("batched_v1", _V0191 + "engine/arg_utils.py:2180-2230"),
    ("eager_v1", _V0191 + "config/vllm.py:847-853"),
    ("tokens_v1", _V0191 + "v1/worker/gpu_model_runner.py:437-438"),
    ("reqs_v1", _V0191 + "v1/worker/gpu_model_runner.py:5286"),
    ("profile_run_v1", _V0191 + "v1/worker/gpu_model_runner.py:5782-5789"),
    ("last_tokens_v1", _V0191 + "v1/worker/gpu_model_runner.py:5549-5553"),
    ("dummy_sampler_v1", _V0191 + "v1/worker/gpu_model_runner.py:5556-5597"),
    ("attn_skip_v1", _V0191 + "v1/attention/backends/triton_attn.py:443-445"),
    ("sampler_f32_v1", _V0191 + "v1/sample/sampler.py:90"),
    ("sampler_triton_v1", _V0191 + "v1/sample/ops/topk_topp_sampler.py:251"),
    ("sampler_probs_v1", _V0191 + "v1/sample/ops/topk_topp_sampler.py:112,325-346"),
    ("triton_buffer_v1", _V0191 + "v1/sample/ops/topk_topp_triton.py:1017-1018"),
    ("llama_v1", _V0191 + "model_executor/models/llama.py:118-120,228-232,323-333"),
)
_SOURCE = dict(_SRC)

# Third-party observations the constants below rest on.
_OBSERVED = (
    "https://github.com/vllm-project/vllm/pull/10511 (V0 Llama-3-8B, 8192 tokens, 256 seqs, H100: "
    "PyTorch activation peak 1.26GiB at TP 1 and TP 2)",
    "https://github.com/vllm-project/vllm/pull/12126 (V0, one H100: non_torch_memory 0.16GiB)",
    "https://github.com/InternLM/turbomind/issues/14 (vLLM V0 on a V100: non_torch_memory 0.23GiB)",
    "https://github.com/vllm-project/vllm/pull/14447 (V0 0.8.x, TP > 1 on 24 GB GPUs: "
    "non_torch_memory 0.20GiB)",
    "https://github.com/nlzy/vllm-gfx906/issues/10 (V0 fork on ROCm, TP 2: non_torch_memory 0.59-0.73GiB)",
    "https://github.com/vllm-project/vllm/pull/11349 (V0 Llama-3.2-1B: 'Graph capturing finished "
    "in 14 secs, took 0.21 GiB')",
    "pytorch/pytorch aten/src/ATen/native/cuda/SortStable.cu (sort scratch buffers) and "
    "aten/src/ATen/cuda/CublasHandlePool.cpp (cuBLAS workspace 4096*1024*2 + 16*1024*8 bytes, "
    "4096*8*1024 on sm90; cuBLASLt 1 MiB)",
)

# Every cited line and observation, for the gate's report.
MEMORY_MODEL_SOURCES = [citation for _key, citation in _SRC] + list(_OBSERVED)


def _constant(value, confidence, source):
    """One named constant of the model: its value, how sure (verified, third_party, inferred), where it comes from."""
    return {"value": value, "confidence": confidence, "source": source}


# The named constants: value, how sure, where it comes from.
CONSTANTS = {
    "non_torch_single_gpu_mib": _constant(256, "third_party", "observed 0.16 GiB (vllm#12126, H100) and 0.23 GiB "
                                                              "(InternLM/turbomind#14, V100) for one GPU; rounded up"),
    "non_torch_multi_gpu_v0_mib": _constant(
        512, "third_party", "V0 with tp*pp > 1 adds NCCL communicators and custom all-reduce buffers after the baseline "
                            "snapshot: observed 0.20 GiB (vllm#14447, CUDA) and 0.59-0.73 GiB (nlzy/vllm-gfx906#10, ROCm); "
                            "PCIe V100 pairs not measured"),
    "cuda_context_mib": _constant(512, "inferred", "CUDA context with lazy module loading (PyTorch default); outside vLLM's "
                                                   "budget except in vLLM 0.8.5's V1 worker"),
    "nccl_outside_budget_mib": _constant(256, "inferred", "0.19.1 initialises NCCL before the baseline snapshot, so it is "
                                                          "outside the budget"),
    "cuda_graph_mib_per_layer": _constant(14, "inferred", "extrapolated from 0.21 GiB for a 16-layer 1B model (vllm#11349); "
                                                          "at least 256 MiB"),
    "cublas_workspace_bytes": _constant(4096 * 1024 * 2 + 16 * 1024 * 8, "third_party",
                                        "PyTorch default cuBLAS workspace below sm90 (32 MiB on sm90), plus 1 MiB cuBLASLt"),
    "fallback_reserve_mib": _constant(FALLBACK_RESERVE_MIB, "inferred", "the previous fixed reserve "
                                                                        "(_policy.ACTIVATION_RESERVE_MIB)"),
}

_CUBLASLT_BYTES = 1024 * 1024
_CUBLAS_SM90_BYTES = 4096 * 8 * 1024
_CUDA_GRAPH_MIN_MIB = 256

# Streaming multiprocessors per compute capability (the Triton sampler buffer has at most one row
# per SM): the largest count of the GPU model table's boards of that capability (_gpu_models.SMS_BY_CC);
# a capability without a recorded count takes the largest count of the table (B200's 148).
_SMS_UNKNOWN = max(SMS_BY_CC.values())

_V0_DEFAULT_MAX_NUM_SEQS = 256           # 0.8.5 engine/arg_utils.py:1562-1563
_V0_DEFAULT_BATCHED_TOKENS = 2048        # 0.8.5 config.py:68
_V0_LONG_CONTEXT = 32768                 # 0.8.5 engine/arg_utils.py:1505
_LARGE_GPU_MIB = 70 * 1024               # 70 GiB: 0.8.5 arg_utils.py:1596, 0.19.1 arg_utils.py:2053
# (tokens for LLM class, tokens for the OpenAI server, max_num_seqs) per size class.
_V1_DEFAULTS = {"large": (16384, 8192, 1024), "small": (8192, 2048, 256)}
_FULL_SORT_ROWS = 128                    # SortStable.cu: segmented sort from 128 rows up
_TRITON_MIN_ROWS = 8                     # 0.19.1 topk_topp_sampler.py:251


# Beyond this no count in the model is real (and the byte sums would overflow a float).
_MAX_COUNT = 2 ** 53


def _positive_int(value):
    """An int > 0 from an int, a finite float or a string of ASCII digits, else None (bools, NaN,
    infinities, other scripts' digits, "1_000" and numbers beyond 2**53 are junk: None)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip(" \t")
        value = int(text) if re.match(r"^[0-9]{1,16}\Z", text, re.ASCII) else None
    if isinstance(value, float):
        value = int(value) if math.isfinite(value) else None
    if not isinstance(value, int):
        return None
    return value if 0 < value <= _MAX_COUNT else None


def _version_line(version):
    """The release whose sources are modelled: '0.8.5' for None and releases before 0.10, else
    '0.19.1'. Releases in between are approximated by the nearer line, not read."""
    if not version:
        return "0.8.5"
    if isinstance(version, str):
        version = version.split(".")
    try:
        parts = tuple(int(re.match(r"[0-9]{1,12}", str(p), re.ASCII).group(0)) for p in list(version)[:3])
    except (TypeError, ValueError, AttributeError):
        return "0.8.5"
    return "0.8.5" if parts < (0, 10, 0) else "0.19.1"


def _capability(value):
    """(major, minor) from a tuple, list or '7.0' string, else None."""
    if value is None:
        return None
    if isinstance(value, str):
        value = value.strip().split(".")
        if not all(re.match(r"^[0-9]{1,2}\Z", part, re.ASCII) for part in value):
            return None     # other scripts' digits, "1_0", signs and spaces are no compute capability
    try:
        major = int(value[0])
        minor = int(value[1]) if len(value) > 1 else 0
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return (major, minor)


def _ceil_div(a, b):
    return -(-a // b)


def _next_pow2(n):
    power = 1
    while power < n:
        power *= 2
    return power


def _mib(value):
    return "%.1f MiB" % (value / MIB)


class _Inputs(object):
    """The model and argument fields, normalised, with what was missing."""

    def __init__(self, model, args):
        model = model or {}
        args = args or {}
        self.missing = []
        self.hidden = _positive_int(model.get("hidden_size"))
        self.inter = _positive_int(model.get("intermediate_size"))
        self.vocab = _positive_int(model.get("vocab_size"))
        for name, value in (("hidden_size", self.hidden), ("intermediate_size", self.inter),
                            ("vocab_size", self.vocab)):
            if value is None:
                self.missing.append("model.%s" % name)
        self.critical_missing = bool(self.missing)
        self.layers = _positive_int(model.get("num_hidden_layers"))
        self.heads = _positive_int(model.get("num_attention_heads"))
        self.kv_heads = _positive_int(model.get("num_key_value_heads"))
        self.head_dim = _positive_int(model.get("head_dim"))
        self.dtype_bytes = _positive_int(model.get("dtype_bytes"))
        if self.dtype_bytes is None:
            self.dtype_bytes = 2
            self.missing.append("model.dtype_bytes")
        self.sliding_window = bool(model.get("sliding_window"))

        self.max_model_len = _positive_int(args.get("max_model_len"))
        self.max_num_seqs = _positive_int(args.get("max_num_seqs"))
        self.max_batched = _positive_int(args.get("max_num_batched_tokens"))
        chunked = args.get("enable_chunked_prefill")
        self.chunked = None if chunked is None else bool(chunked)
        self.tp = _positive_int(args.get("tensor_parallel_size")) or 1
        self.pp = _positive_int(args.get("pipeline_parallel_size")) or 1
        self.enforce_eager = bool(args.get("enforce_eager"))
        self.cc = _capability(args.get("compute_capability"))
        use_v1 = args.get("vllm_use_v1")
        self.use_v1 = None if use_v1 is None else bool(use_v1)
        self.v0_chunked_tokens = _positive_int(args.get("v0_chunked_batched_tokens"))
        self.gpu_mib = _positive_int(args.get("gpu_memory_mib"))
        self.gpu_name = str(args.get("gpu_name") or "").lower()
        self.llm_class = str(args.get("usage_context") or "").lower() in ("llm_class", "llm")
        self.quant = str(args.get("quantization") or "").lower()
        self.cudagraph_env = bool(args.get("memory_profiler_estimate_cudagraphs"))

    def note_missing(self, name):
        if name not in self.missing:
            self.missing.append(name)


def _engine(inputs, line, used):
    if inputs.use_v1 is not None:
        # The caller knows the engine (VLLM_USE_V1, or a release's engine rule: a release of the
        # 0.19.1 line before 0.10.2 still runs V0 below compute capability 8.0).
        used.append("oracle_v1")
        return "v1" if inputs.use_v1 else "v0"
    if line == "0.19.1":
        return "v1"
    used.extend(["oracle_v1", "oracle_cc"])
    if inputs.cc is None:
        inputs.note_missing("args.compute_capability")
        return "v0"
    return "v1" if inputs.cc >= (8, 0) else "v0"


def _v1_defaults(inputs, line):
    """(default tokens, default max_num_seqs) for the V1 engine's usage context and GPU size."""
    large = inputs.gpu_mib is not None and inputs.gpu_mib >= _LARGE_GPU_MIB
    if line == "0.19.1" and "a100" in inputs.gpu_name:
        large = False
    llm_tokens, server_tokens, seqs = _V1_DEFAULTS["large" if large else "small"]
    return (llm_tokens if inputs.llm_class else server_tokens), seqs


def _schedule(inputs, line, engine, used):
    """(profile tokens or None, profile rows or None, chunked prefill)."""
    if engine == "v0":
        used.extend(["defaults_v0", "sched_v0", "sched_const_v0", "profile_run_v0", "seq_split_v0"])
        chunked = inputs.chunked
        if chunked is None:
            if inputs.max_model_len is None:
                chunked = False
            else:
                chunked = inputs.max_model_len > _V0_LONG_CONTEXT and not inputs.sliding_window
        seqs = inputs.max_num_seqs or _V0_DEFAULT_MAX_NUM_SEQS
        tokens = inputs.max_batched
        if tokens is None:
            if chunked:
                tokens = inputs.v0_chunked_tokens or _V0_DEFAULT_BATCHED_TOKENS
            elif inputs.max_model_len is not None:
                tokens = max(inputs.max_model_len, _V0_DEFAULT_BATCHED_TOKENS)
            else:
                inputs.note_missing("args.max_model_len")
                return None, seqs, chunked
        # vLLM refuses max_num_batched_tokens < max_num_seqs (config.py _verify_args); clamp here.
        return tokens, min(seqs, tokens), chunked

    default_tokens, default_seqs = _v1_defaults(inputs, line)
    if line == "0.8.5":
        used.extend(["defaults_v1_085", "dummy_run_v1_085"])
        if (inputs.max_batched is None or inputs.max_num_seqs is None) and inputs.gpu_mib is None:
            inputs.note_missing("args.gpu_memory_mib")
        tokens = inputs.max_batched or default_tokens
        seqs = inputs.max_num_seqs or default_seqs
        return tokens, min(seqs, tokens), True

    used.extend(["defaults_v1", "chunked_v1", "batched_v1", "tokens_v1", "reqs_v1"])
    chunked = True if inputs.chunked is None else inputs.chunked
    if (inputs.max_batched is None or inputs.max_num_seqs is None) and inputs.gpu_mib is None:
        inputs.note_missing("args.gpu_memory_mib")
    seqs = inputs.max_num_seqs or default_seqs
    tokens = inputs.max_batched
    if tokens is None:
        tokens = default_tokens
        if inputs.max_model_len is None:
            inputs.note_missing("args.max_model_len")
        else:
            if not chunked:
                tokens = max(inputs.max_model_len, tokens)
            tokens = min(seqs * inputs.max_model_len, tokens)
    if inputs.max_num_seqs is None:
        seqs = min(seqs, tokens)
    return tokens, min(seqs, tokens), chunked


def _dequant_temps(inputs, dims, used):
    """Bytes of the temporary fp16 weight copy per GEMM, or zeros when none is made."""
    zero = {"qkv": 0, "o": 0, "up": 0, "down": 0}
    below_ampere = inputs.cc is None or inputs.cc < (8, 0)
    if not below_ampere or inputs.quant not in ("gptq", "awq"):
        return zero
    used.append("gptq_temp" if inputs.quant == "gptq" else "awq_temp")
    hidden, inter, q_size, qkv = dims
    return {"qkv": hidden * qkv * 2, "o": q_size * hidden * 2, "up": hidden * 2 * inter * 2,
            "down": inter * hidden * 2}


def _forward_moments(inputs, engine, line, tokens, used):
    """Bytes alive at each candidate moment of one decoder layer (the largest is the peak)."""
    tp = inputs.tp
    hidden = inputs.hidden
    heads = inputs.heads
    if heads is None:
        inputs.note_missing("model.num_attention_heads")
    head_dim = inputs.head_dim
    if head_dim is None:
        head_dim = hidden // heads if heads else None
    if heads is None or not head_dim:
        # Unknown attention shape: assume full multi-head attention over the hidden size.
        q_total = hidden
        kv_per_gpu = _ceil_div(hidden, tp)
        q_size = _ceil_div(q_total, tp)
    else:
        kv_heads = inputs.kv_heads or heads
        q_size = _ceil_div(heads, tp) * head_dim
        kv_per_gpu = max(1, kv_heads // tp) * head_dim
    qkv = q_size + 2 * kv_per_gpu
    inter = _ceil_div(inputs.inter, tp)
    unit = tokens * inputs.dtype_bytes
    temps = _dequant_temps(inputs, (hidden, inter, q_size, qkv), used)
    attn_outputs = 2 * q_size if engine == "v0" else q_size
    used.extend(["llama_mlp", "llama_attn", "llama_layer", "llama_loop", "rmsnorm_inplace", "silu_out"])
    if tp > 1:
        used.extend(["allreduce_oop", "pynccl_out"])
    if engine == "v0":
        used.extend(["xformers_v0", "xformers_out", "xformers_fwd"])
    elif line == "0.19.1":
        used.extend(["attn_skip_v1", "llama_v1"])
    moments = {
        "qkv_proj": (2 * hidden + qkv) * unit + temps["qkv"],
        "attn_core": (2 * hidden + qkv + attn_outputs) * unit,
        "o_proj": (2 * hidden + qkv + q_size + hidden) * unit + temps["o"],
        "mlp_up": (3 * hidden + 2 * inter) * unit + temps["up"],
        "mlp_act": (3 * hidden + 3 * inter) * unit,
        "mlp_down": (3 * hidden + inter + hidden) * unit + temps["down"],
    }
    if tp > 1:
        # The all-reduce returns a new tensor while its input is still referenced.
        moments["o_proj_all_reduce"] = (2 * hidden + qkv + q_size + 2 * hidden) * unit
        moments["mlp_down_all_reduce"] = (3 * hidden + inter + 2 * hidden) * unit
    return moments


def _sort_bytes_per_element(rows, dtype_bytes):
    """Bytes per logit element while the full-vocabulary torch sort runs (V0 and small batches)."""
    f32_copy = 0 if dtype_bytes == 4 else 4
    if rows >= _FULL_SORT_ROWS:
        scratch = 8 + 12
    elif rows >= 2:
        scratch = 8 + 8 + 4 + 12
    else:
        scratch = 12
    at_sort = 4 + 8 + scratch
    after_masks = 4 + 8 + 1 + 4 + 4 + 1 + 4
    return dtype_bytes + f32_copy + max(at_sort, after_masks)


def _sampler_moment(inputs, engine, line, tokens, rows, used):
    """Bytes alive while the dummy sampler runs: the model output T x H plus the logit temporaries."""
    model_output = tokens * inputs.hidden * inputs.dtype_bytes
    elements = rows * inputs.vocab
    used.extend(["prune_logits", "sample_rows"])
    if line == "0.19.1" and rows >= _TRITON_MIN_ROWS:
        used.extend(["profile_run_v1", "last_tokens_v1", "dummy_sampler_v1", "sampler_f32_v1",
                     "sampler_triton_v1", "sampler_probs_v1", "triton_buffer_v1"])
        sms = SMS_BY_CC.get(inputs.cc, _SMS_UNKNOWN) if inputs.cc else _SMS_UNKNOWN
        buffer_rows = min(_next_pow2(rows), sms)
        per_element = inputs.dtype_bytes + (0 if inputs.dtype_bytes == 4 else 4) + 4 + 4
        return model_output + elements * per_element + buffer_rows * inputs.vocab * 4
    if engine == "v0":
        used.extend(["dummy_run_v0", "driver_sampler_v0", "sampler_f32_v0", "sampler_sort_v0",
                     "sampler_probs_v0"])
    elif line == "0.8.5":
        used.append("sampler_v1_085")
    else:
        used.extend(["profile_run_v1", "last_tokens_v1", "dummy_sampler_v1", "sampler_f32_v1"])
    return model_output + elements * _sort_bytes_per_element(rows, inputs.dtype_bytes)


def _cublas_bytes(inputs):
    if inputs.cc is not None and inputs.cc >= (9, 0):
        return _CUBLAS_SM90_BYTES + _CUBLASLT_BYTES
    return CONSTANTS["cublas_workspace_bytes"]["value"] + _CUBLASLT_BYTES


def _cuda_graph_bytes(inputs):
    layers = inputs.layers
    if layers is None:
        return _CUDA_GRAPH_MIN_MIB * MIB
    per_gpu = _ceil_div(layers, inputs.pp)
    return max(_CUDA_GRAPH_MIN_MIB, CONSTANTS["cuda_graph_mib_per_layer"]["value"] * per_gpu) * MIB


def _sources(used):
    seen = []
    for key in used:
        citation = _SOURCE[key]
        if citation not in seen:
            seen.append(citation)
    return seen


def profile_reserve(model, args, version=None):
    """Estimate the memory vLLM subtracts per GPU besides the weights before sizing the KV cache.

    model: hidden_size, intermediate_size, vocab_size, num_hidden_layers, num_attention_heads,
        num_key_value_heads, head_dim, dtype_bytes (ints; any may be None; optional sliding_window).
    args: max_model_len, max_num_seqs, max_num_batched_tokens (None = vLLM's default),
        enable_chunked_prefill (None = default), tensor_parallel_size, pipeline_parallel_size,
        enforce_eager, compute_capability ((7, 0) or "7.0"). Optional: gpu_memory_mib and gpu_name
        (the V1 defaults depend on them; unknown = below 70 GiB), usage_context ("openai_api_server",
        the default, or "llm_class"), quantization (e.g. "gptq", "awq"), vllm_use_v1 (VLLM_USE_V1),
        memory_profiler_estimate_cudagraphs (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1, 0.19.1),
        v0_chunked_batched_tokens (the V0 engine's max_num_batched_tokens with chunked prefill in the
        release: 2048 in 0.8.5, the default; a release's row in _policy.RELEASE_BEHAVIOUR says).
        vllm_use_v1 decides the engine for either line when given.
    version: (major, minor, patch) of vLLM; None = the 0.8.5 line.

    Returns {"bytes", "parts", "profile_tokens", "profile_seqs", "engine", "chunked_prefill",
    "complete", "missing", "formula", "sources"} as documented in the module docstring, plus
    "moments" (bytes alive at each candidate moment of the profile run), "outside_budget" (memory
    the GPU must also hold that vLLM does not subtract) and "confidence" (per part). "bytes" is the
    sum of "parts".
    """
    inputs = _Inputs(model, args)
    line = _version_line(version)
    used = []
    engine = _engine(inputs, line, used)
    tokens, rows, chunked = _schedule(inputs, line, engine, used)
    if engine == "v0":
        used.extend(["budget_v0", "profile_v0", "baseline_v0", "profiling_v0", "min_blocks_v0"])
    elif line == "0.8.5":
        used.append("budget_v1_085")
    else:
        used.extend(["budget_v1", "baseline_v1", "request_v1", "profiling_v1", "eager_v1", "graphs_v1"])
    ranks = inputs.tp * inputs.pp

    outside = {}
    confidence = {}
    parts = {}
    if engine == "v1" and line == "0.8.5":
        parts["cuda_context"] = CONSTANTS["cuda_context_mib"]["value"] * MIB
        confidence["cuda_context"] = CONSTANTS["cuda_context_mib"]["confidence"]
    else:
        outside["cuda_context"] = CONSTANTS["cuda_context_mib"]["value"] * MIB
        if line == "0.19.1" and ranks > 1:
            outside["nccl"] = CONSTANTS["nccl_outside_budget_mib"]["value"] * MIB
    graphs = 0 if inputs.enforce_eager else _cuda_graph_bytes(inputs)
    if graphs:
        if line == "0.19.1" and inputs.cudagraph_env:
            parts["cuda_graphs"] = graphs
            confidence["cuda_graphs"] = CONSTANTS["cuda_graph_mib_per_layer"]["confidence"]
        else:
            outside["cuda_graphs"] = graphs
        if engine == "v0":
            used.append("graphs_v0")

    result = {"profile_tokens": tokens, "profile_seqs": rows, "engine": engine,
              "chunked_prefill": chunked, "outside_budget": outside, "moments": {}}

    if inputs.critical_missing or tokens is None:
        parts = {"fallback_constant": FALLBACK_RESERVE_MIB * MIB}
        confidence = {"fallback_constant": "inferred"}
        result.update({
            "bytes": parts["fallback_constant"], "parts": parts, "complete": False,
            "missing": list(inputs.missing), "confidence": confidence,
            "formula": "fixed %d MiB per GPU (the old reserve): %s unknown, the profile run cannot be "
                       "modelled" % (FALLBACK_RESERVE_MIB, ", ".join(inputs.missing)),
            "sources": _sources(used)})
        return result

    moments = _forward_moments(inputs, engine, line, tokens, used)
    moments["sampler"] = _sampler_moment(inputs, engine, line, tokens, rows, used)
    peak_name = max(sorted(moments), key=lambda name: moments[name])
    if ranks > 1 and engine == "v0":
        non_torch_key = "non_torch_multi_gpu_v0_mib"
        used.append("custom_ar")
    else:
        non_torch_key = "non_torch_single_gpu_mib"
    parts["activation_peak"] = moments[peak_name]
    parts["cublas_workspace"] = _cublas_bytes(inputs)
    parts["non_torch"] = CONSTANTS[non_torch_key]["value"] * MIB
    confidence.update({"activation_peak": "inferred",
                       "cublas_workspace": CONSTANTS["cublas_workspace_bytes"]["confidence"],
                       "non_torch": CONSTANTS[non_torch_key]["confidence"]})
    total = sum(parts.values())
    notes = []
    if line == "0.19.1" and not inputs.enforce_eager:
        notes.append("torch.compile is on: eager figure used as an upper bound")
    if graphs and "cuda_graphs" in outside:
        notes.append("CUDA graphs (~%s) come on top, outside gpu_memory_utilization" % _mib(graphs))
    formula = ("%s (vLLM %s line) profile run: %d tokens over %d sequences%s; activation peak = "
               "largest moment '%s' %s; + cuBLAS workspace %s + non-torch %s%s = %s per GPU%s" % (
                   engine.upper(), line, tokens, rows, ", chunked prefill" if chunked else "",
                   peak_name, _mib(moments[peak_name]), _mib(parts["cublas_workspace"]),
                   _mib(parts["non_torch"]),
                   "".join(" + %s %s" % (name.replace("_", " "), _mib(parts[name]))
                           for name in ("cuda_context", "cuda_graphs") if name in parts),
                   _mib(total), "; " + "; ".join(notes) if notes else ""))
    result.update({
        "bytes": total, "parts": parts, "moments": moments, "complete": not inputs.missing,
        "missing": list(inputs.missing), "confidence": confidence, "formula": formula,
        "sources": _sources(used)})
    return result
