# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.deploy_gate module instead.
"""vLLM's own startup validation, decided before vLLM starts.

vLLM checks its arguments against the model's config.json and the GPU while the engine starts
(config classes, engine arguments, the attention backend, the model's linear layers). Every such
check whose inputs the collection's probes know is written here as a pure decision:
:func:`startup_checks` takes the config.json facts (model_facts), the effective vLLM arguments,
the GPUs (gpu_facts) and the image's vLLM version and returns what vLLM would refuse (``reason``)
or do differently than asked (``warning``), each message with vLLM's own words and the flag to
change.

Each check is a small pure function (``check_<id>``) over one frozen input, :class:`StartupFacts`
(the validated model, arguments and GPUs with the release facts that follow from them, made once
by :func:`startup_facts`), returning its finding's message or None.

:data:`CHECKS` is the one table: every startup check read in the vLLM 0.8.5 and 0.19.1 sources
(sdists), with ``path:line`` in each release (paths relative to the sdist root), whether it is
encoded and where (here or in _gate.py), and why not when it is not; a check encoded here has its
reason or warning code and its function. :data:`STARTUP_RULES` are those rows, in the order the
findings are listed. Adding a check is one function, one row and one test.
:func:`render_checks_markdown` renders the table for docs/deploy_gate.md.

Releases: a version whose major.minor is 0.8 (at or above 0.8.5) is judged as 0.8.5, 0.19.x (at
or above 0.19.1) as 0.19.1; any other version, or None, gets only the checks both releases make
the same way (lenient) and the warning STARTUP_CHECKS_PARTIAL.

Pure logic: no Ansible imports, no I/O. Malformed input raises :class:`StartupInputError`
naming the field.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import re
from collections import namedtuple
from fractions import Fraction
from types import MappingProxyType

from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._policy import (
    DTYPE_ALIASES,
    KV_CACHE_DTYPES_BY_RELEASE,
    coerce_bool,
    coerce_int,
    compare_versions,
    format_cc,
    parse_version,
    quant_key,
    short_repr,
    type_name,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gpu_input import gpu_compute_capability, gpu_entries

# ---------------------------------------------------------------------------------------------
# Codes
# ---------------------------------------------------------------------------------------------

STARTUP_REASON_CODES = {
    "ATTENTION_HEADS_NOT_DIVISIBLE": "num_attention_heads is not divisible by tensor_parallel_size.",
    "KV_HEADS_NOT_DIVISIBLE": "num_key_value_heads and tensor_parallel_size do not divide one another.",
    "INTERMEDIATE_SIZE_NOT_DIVISIBLE": "The MLP's intermediate_size is not divisible by tensor_parallel_size.",
    "QUANT_GROUP_SIZE_NOT_ALIGNED": "A GPTQ/AWQ row-parallel layer's per-GPU input is not a multiple of the "
                                    "group size.",
    "QUANT_OUTPUT_NOT_ALIGNED": "A GPTQ layer's per-GPU output is not a multiple of the values one int32 packs.",
    "MAX_MODEL_LEN_EXCEEDS_MODEL": "max_model_len is above the context the model's config.json derives "
                                   "(max_position_embeddings with rope scaling).",
    "SLIDING_WINDOW_DISABLE_UNSUPPORTED": "disable_sliding_window with a rope-scaled model (vLLM 0.8.5).",
    "PREFIX_CACHING_WITH_SLIDING_WINDOW": "Prefix caching on a sliding-window model in vLLM 0.8.5's V0 engine.",
    "MAX_NUM_BATCHED_TOKENS_TOO_SMALL": "max_num_batched_tokens is below max_model_len (chunked prefill off) "
                                        "or below max_num_seqs.",
    "GPU_MEMORY_UTILIZATION_INVALID": "gpu_memory_utilization is not in (0, 1].",
    "CPU_OFFLOAD_GB_NEGATIVE": "cpu_offload_gb is negative.",
    "KV_CACHE_DTYPE_CONFLICTS_WITH_CHECKPOINT": "kv_cache_dtype fp8_e5m2 with a checkpoint whose quantization "
                                                "loads KV-cache scales (fp8, modelopt, compressed-tensors, quark).",
    "BLOCK_SIZE_UNSUPPORTED": "The KV-cache block_size is not one the release or its attention kernels take.",
    "HEAD_SIZE_UNSUPPORTED": "The attention backend vLLM picks for this GPU does not support the model's "
                             "head size.",
    "ATTENTION_BACKEND_UNAVAILABLE": "vLLM 0.19.1 finds no attention backend for this GPU, dtype, KV-cache "
                                     "dtype, head size and block size.",
    "DTYPE_UNSUPPORTED_BY_MODEL": "vLLM 0.19.1 refuses float16 for this model type (numerical instability).",
    "QUANTIZATION_DEPRECATED": "vLLM 0.19.1 refuses a deprecated quantization method unless "
                               "--allow-deprecated-quantization is set.",
    "VLLM_ARG_UNKNOWN_TO_IMAGE": "The image's vLLM has no such command-line flag (argparse exits).",
    "PIPELINE_PARALLEL_UNSUPPORTED_MODEL": "pipeline_parallel_size > 1 for an architecture without pipeline "
                                           "parallelism (no SupportsPP).",
}

STARTUP_WARNING_CODES = {
    "STARTUP_CHECKS_PARTIAL": "The image's vLLM version is unknown or neither 0.8.5 nor 0.19.1: only the "
                              "checks both releases share were made.",
    "ATTENTION_BACKEND_FALLBACK": "The requested block_size rules out the preferred attention backend; vLLM "
                                  "uses a slower one.",
    "CHUNKED_PREFILL_OVERRIDDEN": "enable_chunked_prefill false is ignored (0.8.5 V1 engine) or unsupported "
                                  "(0.19.1) for this model.",
}

_HERE = "_vllm_startup.py"
_GATE = "_gate.py"

# ---------------------------------------------------------------------------------------------
# Facts used by the checks (each with its source)
# ---------------------------------------------------------------------------------------------

# vllm-0.8.5/vllm/attention/ops/paged_attn.py:39 (PagedAttention.get_supported_head_sizes)
PAGED_ATTENTION_HEAD_SIZES = (32, 64, 80, 96, 112, 120, 128, 192, 256)
# vllm-0.8.5/csrc/attention/paged_attention_v1.cu:152-166 (block sizes compiled: 8, 16, 32)
PAGED_ATTENTION_BLOCK_SIZES = (8, 16, 32)
# vllm-0.8.5/vllm/v1/attention/backends/flash_attn.py:37 and attention/backends/flash_attn.py:45
FLASH_ATTN_HEAD_SIZES_0_8_5 = (32, 64, 96, 128, 160, 192, 224, 256)
# vllm-0.8.5/vllm/config.py:1290 (BlockSize Literal, argparse choices via engine/arg_utils.py:154)
BLOCK_SIZE_CHOICES_0_8_5 = (1, 8, 16, 32, 64, 128)
# vllm-0.19.1/vllm/config/model.py:1903-1909 (_FLOAT16_NOT_SUPPORTED_MODELS)
FLOAT16_UNSUPPORTED_MODEL_TYPES_0_19_1 = ("gemma2", "gemma3", "gemma3_text", "plamo2", "glm4")
# vllm-0.19.1/vllm/model_executor/layers/quantization/__init__.py:39-45
DEPRECATED_QUANTIZATION_0_19_1 = ("tpu_int8", "fbgemm_fp8", "fp_quant", "experts_int8", "petit_nvfp4")
# Quantization configs whose get_quant_method() returns a KV-cache method for Attention layers:
# 0.8.5 fp8.py:127, modelopt.py:79/230, compressed_tensors.py:97, quark.py:68;
# 0.19.1 fp8.py:205, modelopt.py:187, compressed_tensors.py:183, quark.py:148.
KV_SCALE_QUANT_METHODS = ("fp8", "modelopt", "modelopt_fp4", "compressed_tensors", "quark")
# vllm-0.8.5/vllm/config.py:479 (models whose sliding_window V0 treats as interleaved; not a
# cache-level sliding window)
INTERLEAVED_SLIDING_WINDOW_TYPES = ("gemma2", "gemma3_text", "cohere2")
# Rope types whose factor does not scale the derived length: vllm-0.8.5/vllm/config.py:3056,
# vllm-0.19.1/vllm/config/model.py:2113
_ROPE_UNSCALED = ("su", "longrope", "llama3")
# Text-generation and multimodal architectures whose class does not implement SupportsPP (a scan
# of each class's bases in vllm/model_executor/models/, spot-checked: mamba2.py, zamba2.py,
# plamo2.py, minimax_text_01.py; ouro.py, gemma3n.py). registry.py:_TEXT_GENERATION_MODELS and
# _MULTIMODAL_MODELS (0.8.5 lines 33/171, 0.19.1 lines 70/332).
NO_PIPELINE_PARALLEL_ARCHS = {
    "0.8.5": ("AriaForConditionalGeneration", "BartForConditionalGeneration", "BartModel",
              "Florence2ForConditionalGeneration", "Idefics3ForConditionalGeneration",
              "KimiVLForConditionalGeneration", "Mamba2ForCausalLM", "MiniMaxText01ForCausalLM",
              "MllamaForConditionalGeneration", "Phi4MMForCausalLM", "Plamo2ForCausalLM",
              "SmolVLMForConditionalGeneration", "WhisperForConditionalGeneration", "Zamba2ForCausalLM"),
    "0.19.1": ("AriaForConditionalGeneration", "CohereAsrForConditionalGeneration",
               "FireRedASR2ForConditionalGeneration", "FunASRForConditionalGeneration", "Gemma3nForCausalLM",
               "Gemma3nForConditionalGeneration", "IQuestLoopCoderForCausalLM", "Idefics3ForConditionalGeneration",
               "Mamba2ForCausalLM", "MiniMaxForCausalLM", "MiniMaxM1ForCausalLM", "MiniMaxText01ForCausalLM",
               "NemotronH_Nano_VL_V2", "NemotronParseForConditionalGeneration", "OuroForCausalLM",
               "PaddleOCRVLForConditionalGeneration", "Phi4MMForCausalLM", "SmolVLMForConditionalGeneration",
               "WhisperForConditionalGeneration", "Zamba2ForCausalLM"),
}
# Architectures whose class implements SupportsV0Only in 0.8.5 (is_v1_compatible is False, so the
# V1 oracle falls back to V0: engine/arg_utils.py:1402-1406): the same scan of class bases, spot-checked
# in bloom.py, mamba2.py and mllama.py.
V0_ONLY_ARCHS_0_8_5 = ("BambaForCausalLM", "BartForConditionalGeneration", "BartModel", "BloomForCausalLM",
                       "FalconMambaForCausalLM", "Florence2ForConditionalGeneration", "GritLM", "JambaForCausalLM",
                       "Mamba2ForCausalLM", "MambaForCausalLM", "MiniMaxText01ForCausalLM",
                       "MllamaForConditionalGeneration", "Plamo2ForCausalLM", "WhisperForConditionalGeneration",
                       "Zamba2ForCausalLM")
# Model types whose attention is MLA or absent: the head-size/backend checks do not apply.
_NON_STANDARD_ATTENTION = ("deepseek_v2", "deepseek_v3", "deepseek_mtp", "kimi_k2", "minicpm3", "mamba",
                           "mamba2", "falcon_mamba", "zamba2", "jamba", "minimax_text_01")

# Scheduler defaults for `vllm serve` (UsageContext.OPENAI_API_SERVER):
# 0.8.5 V1: engine/arg_utils.py:1596-1609 (>= 70 GiB: 8192 tokens / 1024 seqs, else 2048 / 256);
# 0.8.5 V0: arg_utils.py:1563 (256 seqs), config.py:68 and 1967-1985 (tokens 2048 with chunked
# prefill, else max(max_model_len, 2048)); chunked prefill above 32768 tokens: arg_utils.py:1505-1533;
# 0.19.1: engine/arg_utils.py:2053-2071 (>= 70 GiB and not A100: 8192 / 1024, else 2048 / 256),
# 2219-2240 (max with max_model_len when chunked prefill is off, min with seqs x max_model_len).
_DEFAULT_BATCHED_TOKENS_0_8_5 = 2048
_MULTIMODAL_BATCHED_TOKENS_0_8_5 = 5120  # config.py:70, applied at config.py:1991-1995
_BIG_GPU_MIB = 70 * 1024
_LONG_CONTEXT_0_8_5 = 32768

_VLLM_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
_RELEASES = ("0.8.5", "0.19.1")
_MAX_INT = 2 ** 40


class StartupInputError(ValueError):
    """Malformed input to startup_checks; the message names the field and what is expected."""


# ---------------------------------------------------------------------------------------------
# Input validation
# ---------------------------------------------------------------------------------------------


def _int(value, where, minimum=1, maximum=_MAX_INT):
    return coerce_int(value, where, minimum=minimum, maximum=maximum, error=StartupInputError)


def _bool(value, where):
    return coerce_bool(value, where, error=StartupInputError)


def _number(value, where):
    if value is None:
        return None
    result = None
    if isinstance(value, bool):
        result = None
    elif isinstance(value, (int, float)):
        # float() of an int beyond 1e308 raises OverflowError: refuse it like any non-number
        result = float(value) if isinstance(value, float) or abs(value) < 10 ** 300 else None
    elif isinstance(value, str) and re.match(r"^\s*-?([0-9]{1,19}(\.[0-9]{0,19})?|\.[0-9]{1,19})\s*\Z", value,
                                             re.ASCII):
        # ASCII digits only: float() also reads other scripts' digits, "1_0", "nan" and "inf"
        result = float(value)
    if result is None or not math.isfinite(result):
        raise StartupInputError("%s: expected a number, got %s" % (where, short_repr(value)))
    return result


def _str(value, where):
    if value is None:
        return None
    if not isinstance(value, str):
        raise StartupInputError("%s: expected a string, got %s" % (where, type_name(value)))
    return value.strip()


def _mapping(value, where):
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise StartupInputError("%s: expected a mapping, got %s" % (where, type_name(value)))
    return value


def expand_human_int(value):
    """vLLM's human-readable integer form of max_model_len ("32k" = 32000, "32K" = 32768) as an int;
    any other value is returned unchanged for the caller's own integer check (the gate's too)."""
    if isinstance(value, str):
        match = re.match(r"^\s*([0-9]{1,12})\s*([kKmMgG])\s*\Z", value, re.ASCII)
        if match:
            factor = {"k": 1000, "m": 1000 ** 2, "g": 1000 ** 3, "K": 1024, "M": 1024 ** 2,
                      "G": 1024 ** 3}[match.group(2)]
            return int(match.group(1)) * factor
    return value


def _human_int(value, where):
    return _int(expand_human_int(value), where)


def _validate_model(model):
    model = _mapping(model, "model")
    out = {}
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                "max_position_embeddings", "vocab_size", "intermediate_size", "model_max_length"):
        # context keys may hold huge sentinels (model_max_length 1e30-style): no upper bound there
        out[key] = _int(model.get(key), "model.%s" % key,
                        maximum=None if key in ("max_position_embeddings", "model_max_length") else _MAX_INT)
    group = model.get("quant_group_size")
    out["quant_group_size"] = None
    if isinstance(group, (list, tuple)):
        # an FP8 weight_block_size such as [128, 128]: not a GPTQ/AWQ group, which is all this reads
        if not all(isinstance(g, int) and not isinstance(g, bool) for g in group):
            raise StartupInputError("model.quant_group_size: expected an integer or a list of integers, got %s"
                                    % short_repr(group))
    elif group is not None:
        group = _int(group, "model.quant_group_size", minimum=-1)
        if group == 0:
            raise StartupInputError("model.quant_group_size: expected a positive integer or -1, got 0")
        out["quant_group_size"] = group
    bits = model.get("quant_bits")
    out["quant_bits"] = _int(bits, "model.quant_bits", minimum=1, maximum=64) if bits is not None else None
    for key in ("model_type", "torch_dtype", "quant_method"):
        text = _str(model.get(key), "model.%s" % key)
        out[key] = text.lower() if text else None
    if out["torch_dtype"]:
        name = out["torch_dtype"][6:] if out["torch_dtype"].startswith("torch.") else out["torch_dtype"]
        out["torch_dtype"] = DTYPE_ALIASES.get(name, name)
    archs = model.get("architectures")
    if archs is not None:
        if isinstance(archs, str):
            archs = [archs]
        if not isinstance(archs, (list, tuple)) or not all(isinstance(a, str) for a in archs):
            raise StartupInputError("model.architectures: expected a list of strings, got %s" % short_repr(archs))
        archs = tuple(a.strip() for a in archs if a.strip())
    out["architectures"] = archs or None
    out["rope_scaling"] = _validate_rope(model.get("rope_scaling"))
    window = model.get("sliding_window")
    if isinstance(window, (list, tuple)):
        values = [_int(w, "model.sliding_window[%d]" % i, minimum=0) for i, w in enumerate(window) if w is not None]
        out["sliding_window"] = None
        out["sliding_window_list"] = True
        out["sliding_window_min"] = min(values) if values else None
    else:
        out["sliding_window"] = _int(window, "model.sliding_window", minimum=0) if window is not None else None
        out["sliding_window_list"] = False
        out["sliding_window_min"] = out["sliding_window"]
    out["use_sliding_window"] = _bool(model.get("use_sliding_window"), "model.use_sliding_window")
    out["text_config_used"] = _bool(model.get("text_config_used"), "model.text_config_used")
    return out


def _validate_rope(rope):
    if rope is None:
        return None
    if not isinstance(rope, dict):
        raise StartupInputError("model.rope_scaling: expected a mapping or null, got %s" % type_name(rope))
    out = {"rope_type": None, "type": None, "factor": None, "original_max_position_embeddings": None}
    for key in ("rope_type", "type"):
        if rope.get(key) is not None:
            out[key] = _str(rope.get(key), "model.rope_scaling.%s" % key)
    if rope.get("factor") is not None:
        out["factor"] = _number(rope.get("factor"), "model.rope_scaling.factor")
        if out["factor"] <= 0:
            raise StartupInputError("model.rope_scaling.factor: expected a number > 0, got %g" % out["factor"])
    if rope.get("original_max_position_embeddings") is not None:
        out["original_max_position_embeddings"] = _int(rope.get("original_max_position_embeddings"),
                                                       "model.rope_scaling.original_max_position_embeddings")
    return out


def _validate_args(args):
    args = _mapping(args, "args")
    out = {}
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "max_num_seqs", "max_num_batched_tokens",
                "block_size"):
        out[key] = _int(args.get(key), "args.%s" % key)
    out["max_model_len"] = _human_int(args["max_model_len"], "args.max_model_len") \
        if args.get("max_model_len") is not None else None
    dtype = _str(args.get("dtype"), "args.dtype")
    if dtype:
        dtype = dtype.lower()
        dtype = dtype[6:] if dtype.startswith("torch.") else dtype
        if dtype not in _VLLM_DTYPES and dtype not in DTYPE_ALIASES:
            raise StartupInputError("args.dtype: expected one of %s, got %s"
                                    % (", ".join(_VLLM_DTYPES), short_repr(dtype)))
    out["dtype"] = DTYPE_ALIASES.get(dtype, dtype) if dtype else None
    kv = _str(args.get("kv_cache_dtype"), "args.kv_cache_dtype")
    out["kv_cache_dtype"] = kv.lower() if kv else None
    out["quantization"] = _str(args.get("quantization"), "args.quantization") or None
    for key in ("gpu_memory_utilization", "swap_space", "cpu_offload_gb"):
        out[key] = _number(args.get(key), "args.%s" % key)
    if out["swap_space"] is not None and out["swap_space"] < 0:
        raise StartupInputError("args.swap_space: expected a number >= 0, got %g" % out["swap_space"])
    for key in ("enforce_eager", "enable_chunked_prefill", "enable_prefix_caching", "disable_sliding_window",
                "allow_deprecated_quantization"):
        out[key] = _bool(args.get(key), "args.%s" % key)
    backend = _str(args.get("distributed_executor_backend"), "args.distributed_executor_backend")
    out["distributed_executor_backend"] = backend.lower() if backend else None
    return out


def _validate_gpus(gpus):
    out = []
    for _index, where, gpu in gpu_entries(gpus, "cc and memory_mib", StartupInputError):
        cc = gpu_compute_capability(gpu, "cc", where, "a compute capability like (7, 0) or '7.0'", StartupInputError)
        name = _str(gpu.get("name"), where + ".name")
        out.append({"cc": cc, "memory_mib": _int(gpu.get("memory_mib"), where + ".memory_mib"),
                    "name": name or None})
    return out


def _validate_version(version):
    if version is None:
        return None
    if isinstance(version, str):
        parsed = parse_version(version)
        if parsed is None:
            raise StartupInputError("version: expected a version like (0, 8, 5) or '0.8.5', got %s"
                                    % short_repr(version))
        return parsed
    if isinstance(version, (list, tuple)) and version and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in version):
        return tuple(version)
    raise StartupInputError("version: expected a tuple of non-negative integers like (0, 8, 5), got %s"
                            % short_repr(version))


def release_for(version):
    """"0.8.5", "0.19.1" or None: which modelled release a version tuple behaves as."""
    if version is None:
        return None
    if tuple(version[:2]) == (0, 8) and compare_versions(version, (0, 8, 5)) >= 0:
        return "0.8.5"
    if tuple(version[:2]) == (0, 19) and compare_versions(version, (0, 19, 1)) >= 0:
        return "0.19.1"
    return None


# ---------------------------------------------------------------------------------------------
# The frozen input: validated facts and what follows from them
# ---------------------------------------------------------------------------------------------

# What every check reads. ``model``, ``args`` and each GPU are read-only mappings (validated);
# the rest follows from them once:
#   release   "0.8.5", "0.19.1" or None (release_for); label "vLLM 0.8.5" (or "vLLM")
#   cc        the lowest known compute capability, or None; mem_mib the first GPU's memory or None
#   tp, pp    tensor and pipeline parallel size (1 when unset); head_size the attention head size
#   quant     the quantization method key (args first, then the checkpoint's quant_method)
#   dtype     the dtype vLLM serves with, or None (resolved_dtype); kv the KV-cache dtype ("auto")
#   engine, backend   vLLM 0.8.5's engine ("v1"/"v0") and attention backend (engine_0_8_5),
#             (None, None) on another release or without a GPU
#   max_len   max_model_len as vLLM takes it (given, else derived from config.json), or None
#   schedule  the scheduler settings vLLM resolves (a Schedule)
StartupFacts = namedtuple("StartupFacts", (
    "model", "args", "gpus", "version", "release", "label", "cc", "mem_mib", "tp", "pp", "head_size", "quant",
    "dtype", "kv", "engine", "backend", "max_len", "schedule"))

# max_num_batched_tokens, max_num_seqs and chunked prefill as vLLM resolves them (None where it
# cannot be told), and ``how``: which defaults applied, in words.
Schedule = namedtuple("Schedule", ("tokens", "seqs", "chunked", "how"))


def _frozen(mapping):
    return MappingProxyType(dict(mapping))


def _head_size(model):
    """head_dim, else hidden_size / num_attention_heads when it divides; None when unknown."""
    heads = model["num_attention_heads"]
    if model["head_dim"] is None and model["hidden_size"] and heads and model["hidden_size"] % heads == 0:
        return model["hidden_size"] // heads
    return model["head_dim"]


def startup_facts(model, args, gpus, version):
    """The frozen input of the checks (a StartupFacts) from startup_checks' arguments.

    Raises StartupInputError naming the field on malformed input.
    """
    model, args = _validate_model(model), _validate_args(args)
    gpus, version = _validate_gpus(gpus), _validate_version(version)
    if model["rope_scaling"] is not None:
        model["rope_scaling"] = _frozen(model["rope_scaling"])
    known = [g["cc"] for g in gpus if g["cc"] is not None]
    release = release_for(version)
    facts = StartupFacts(
        model=_frozen(model), args=_frozen(args), gpus=tuple(_frozen(g) for g in gpus), version=version,
        release=release, label="vLLM %s" % release if release else "vLLM", cc=min(known) if known else None,
        mem_mib=gpus[0]["memory_mib"] if gpus and gpus[0]["memory_mib"] else None,
        tp=args["tensor_parallel_size"] or 1, pp=args["pipeline_parallel_size"] or 1, head_size=_head_size(model),
        quant=quant_key(args["quantization"] or model["quant_method"]), dtype=None,
        kv=args["kv_cache_dtype"] or "auto", engine=None, backend=None, max_len=None, schedule=None)
    facts = facts._replace(dtype=resolved_dtype(facts))
    if release == "0.8.5":
        engine, backend = engine_0_8_5(facts)
        facts = facts._replace(engine=engine, backend=backend)
    facts = facts._replace(max_len=effective_max_model_len(facts))
    return facts._replace(schedule=schedule(facts))


# ---------------------------------------------------------------------------------------------
# Derived settings: how vLLM resolves what was left to it (pure functions of the facts)
# ---------------------------------------------------------------------------------------------


def _join_or(values):
    values = [str(v) for v in values]
    if not values:
        return ""
    if len(values) == 1:
        return values[0]
    return "%s or %s" % (", ".join(values[:-1]), values[-1])


def gpu_label(f):
    """"compute capability 7.0" (the lowest), or "this GPU" when none is known."""
    if f.cc is None:
        return "this GPU"
    return "compute capability %s" % format_cc(f.cc)


def resolved_dtype(f):
    """The dtype vLLM serves with ('float16', 'bfloat16', 'float32') or None if unknown."""
    requested = f.args["dtype"] or "auto"
    if requested != "auto":
        return requested
    cfg = f.model["torch_dtype"]
    if cfg not in ("float16", "bfloat16", "float32"):
        return None
    if f.release == "0.19.1":
        # vllm-0.19.1/vllm/config/model.py:1929-1970 with platforms/cuda.py:141-150
        if f.cc is None:
            return None
        supported = ["bfloat16", "float16", "float32"] if f.cc >= (8, 0) else ["float16", "float32"]
        if f.model["model_type"] in FLOAT16_UNSUPPORTED_MODEL_TYPES_0_19_1:
            supported.remove("float16")
        preferred = supported[0]
        cfg = preferred if cfg == "float32" else cfg
        return cfg if cfg in supported else preferred
    # vllm-0.8.5/vllm/config.py:2903-2914: float32 checkpoints are served in float16
    if f.model["model_type"] == "plamo2":
        return "bfloat16"
    return "float16" if cfg == "float32" else cfg


def sliding_window_active(f):
    """The cache-level sliding window vLLM uses (None when off)."""
    window = f.model["sliding_window"]
    if f.model["sliding_window_list"] or not window:
        return None
    if f.model["use_sliding_window"] is False:
        return None
    if f.model["model_type"] in INTERLEAVED_SLIDING_WINDOW_TYPES:
        return None
    if f.args["disable_sliding_window"]:
        return None
    return window


def rope_type(f):
    """The rope scaling type as vLLM names it ("su" is "longrope", "mrope" "default"), or None."""
    rope = f.model["rope_scaling"]
    if rope is None:
        return None
    rtype = rope["rope_type"] or rope["type"]
    return {"su": "longrope", "mrope": "default"}.get(rtype, rtype)


def rope_scales_length(f):
    """Whether the rope factor scales the derived length (vllm-0.8.5/vllm/config.py:3056,
    vllm-0.19.1/vllm/config/model.py:2113: not for su/longrope/llama3, nor Gemma 3)."""
    rtype = rope_type(f)
    return bool(rtype and rtype not in _ROPE_UNSCALED and "gemma3" not in (f.model["model_type"] or ""))


def derived_max_len(f):
    """(length, key) vLLM derives from config.json, or (None, None) when unknown."""
    base = f.model["max_position_embeddings"]
    key = "max_position_embeddings"
    if f.model["model_max_length"]:
        base, key = f.model["model_max_length"], "model_max_length"
    if base is None:
        return None, None
    window = f.model["sliding_window_min"]
    if f.args["disable_sliding_window"] and window and window < base and f.model["use_sliding_window"] is not False:
        base, key = window, "sliding_window"
    if rope_scales_length(f):
        rope = f.model["rope_scaling"]
        factor = rope["factor"] or 1.0
        if rope_type(f) == "yarn" and rope["original_max_position_embeddings"]:
            base = rope["original_max_position_embeddings"]
        return base * factor, key
    return base, key


def effective_max_model_len(f):
    """max_model_len as given, else the length derived from config.json; None when unknown."""
    if f.args["max_model_len"]:
        return f.args["max_model_len"]
    derived = derived_max_len(f)[0]
    return int(derived) if derived is not None else None


def multimodal(f):
    """Whether the model is multimodal (a text_config was read, or a ...ForConditionalGeneration class)."""
    archs = f.model["architectures"] or []
    return bool(f.model["text_config_used"]) or any(a.endswith("ForConditionalGeneration") for a in archs)


def v0_only_model(f):
    """Whether the architecture implements SupportsV0Only in vLLM 0.8.5."""
    archs = f.model["architectures"] or []
    return bool(archs) and archs[0] in V0_ONLY_ARCHS_0_8_5


def engine_0_8_5(f):
    """('v1'|'v0', backend) vLLM 0.8.5 uses, or (None, None) when the GPU is unknown.

    vllm-0.8.5/vllm/engine/arg_utils.py:1292-1499 (_is_v1_supported_oracle) and
    platforms/cuda.py:176-293 (get_attn_backend_cls)."""
    if f.cc is None:
        return None, None
    dtype = f.dtype or "float16"
    kv = f.kv
    fa3_fp8 = kv.startswith("fp8") and f.cc[0] == 9  # flash_attn_supports_fp8: FA3 on Hopper
    v1 = (f.cc >= (8, 0) and dtype in ("float16", "bfloat16") and (kv == "auto" or fa3_fp8)
          and (f.pp == 1 or f.args["distributed_executor_backend"] == "ray") and f.quant != "gguf"
          and not v0_only_model(f))
    if v1:
        return "v1", "FLASH_ATTN_V1"
    block = f.args["block_size"] or 16
    if (f.cc < (8, 0) or dtype not in ("float16", "bfloat16") or block % 16
            or f.head_size not in FLASH_ATTN_HEAD_SIZES_0_8_5 or (kv.startswith("fp8") and not fa3_fp8)):
        return "v0", "XFORMERS"
    return "v0", "FLASH_ATTN"


def v0_cause(f):
    """Why vLLM 0.8.5 runs its V0 engine here (engine/arg_utils.py:1292-1499)."""
    if f.cc < (8, 0):
        return "compute capability %s is below 8.0" % format_cc(f.cc)
    dtype = f.dtype or "float16"
    if dtype not in ("float16", "bfloat16"):
        return "dtype %s" % dtype
    if f.kv != "auto":
        return "kv_cache_dtype %s" % f.kv
    if f.pp > 1:
        return "pipeline parallelism without Ray"
    if v0_only_model(f):
        return "%s is a V0-only architecture" % f.model["architectures"][0]
    return "quantization gguf"


def chunked_prefill_0_8_5(f):
    """Whether vLLM 0.8.5 chunks prefills (None when it cannot be told)."""
    if f.engine == "v1":
        return True
    if f.args["enable_chunked_prefill"] is not None:
        return f.args["enable_chunked_prefill"]
    if f.max_len is None:
        return None
    # arg_utils.py:1509-1533: on by default above 32768 tokens, except multimodal or sliding window
    return bool(f.max_len > _LONG_CONTEXT_0_8_5 and not multimodal(f) and sliding_window_active(f) is None)


def big_gpu_0_19_1(f):
    """Whether vLLM 0.19.1 takes its large-GPU scheduler defaults (>= 70 GiB and not an A100), None
    when the memory is unknown."""
    if f.mem_mib is None:
        return None
    name = (f.gpus[0].get("name") or "").lower()
    a100 = "a100" in name or (not name and f.cc == (8, 0))
    return f.mem_mib >= _BIG_GPU_MIB and not a100


def _gib_text(f):
    return "%d GiB" % (f.mem_mib // 1024) if f.mem_mib else "unknown memory"


def _schedule_0_8_5(f):
    tokens, seqs, max_len = f.args["max_num_batched_tokens"], f.args["max_num_seqs"], f.max_len
    if f.engine is None:
        return Schedule(tokens, seqs, None, "vLLM 0.8.5 (engine unknown: no GPU given)")
    chunked = chunked_prefill_0_8_5(f)
    if f.engine == "v1":
        big = f.mem_mib is not None and f.mem_mib >= _BIG_GPU_MIB
        if tokens is None and f.mem_mib is not None:
            tokens = 8192 if big else 2048
        if seqs is None and f.mem_mib is not None:
            seqs = 1024 if big else 256
        return Schedule(tokens, seqs, chunked, "vLLM 0.8.5's V1 engine always chunks prefills; on a %s GPU it "
                                               "defaults to %s batched tokens and %s sequences"
                        % (_gib_text(f), 8192 if big else 2048, 1024 if big else 256))
    seqs = 256 if seqs is None else seqs
    if tokens is None and chunked is not None and max_len is not None:
        tokens = _DEFAULT_BATCHED_TOKENS_0_8_5 if chunked else max(max_len, _DEFAULT_BATCHED_TOKENS_0_8_5)
        if multimodal(f):
            tokens = max(tokens, _MULTIMODAL_BATCHED_TOKENS_0_8_5)
    return Schedule(tokens, seqs, chunked, "vLLM 0.8.5 runs its V0 engine here because %s, and that engine turns "
                                           "chunked prefill on by default only above %d tokens without a sliding "
                                           "window and defaults to 256 sequences"
                    % (v0_cause(f), _LONG_CONTEXT_0_8_5))


def _schedule_0_19_1(f):
    tokens, seqs, max_len = f.args["max_num_batched_tokens"], f.args["max_num_seqs"], f.max_len
    chunked = True if f.args["enable_chunked_prefill"] is None else f.args["enable_chunked_prefill"]
    big = big_gpu_0_19_1(f)
    default_tokens = None if big is None else (8192 if big else 2048)
    default_seqs = None if big is None else (1024 if big else 256)
    eff_seqs = seqs if seqs is not None else default_seqs
    if tokens is None and default_tokens is not None and max_len is not None and eff_seqs is not None:
        tokens = default_tokens if chunked else max(max_len, default_tokens)
        tokens = min(eff_seqs * max_len, tokens)
    if seqs is None and default_seqs is not None and tokens is not None:
        seqs = min(default_seqs, tokens)
    how = "vLLM 0.19.1 chunks prefills unless told not to"
    if big is not None:
        how += "; on a %s GPU it defaults to %d batched tokens and %d sequences" % (
            _gib_text(f), default_tokens, default_seqs)
    return Schedule(tokens, seqs, chunked, how)


def schedule(f):
    """The Schedule vLLM resolves for the release (scheduler defaults: see the note at
    _DEFAULT_BATCHED_TOKENS_0_8_5); on an unmodelled release only the values given."""
    if f.release == "0.8.5":
        return _schedule_0_8_5(f)
    if f.release == "0.19.1":
        return _schedule_0_19_1(f)
    return Schedule(f.args["max_num_batched_tokens"], f.args["max_num_seqs"], f.args["enable_chunked_prefill"],
                    "both values given")


def _kv_heads_split(kv, tp):
    """Whether num_key_value_heads ``kv`` and ``tp`` divide one another (QKVParallelLinear)."""
    return not ((tp >= kv and tp % kv) or (tp < kv and kv % tp))


def group_misaligned(f, tp):
    """(layer, input size) of the first row-parallel GPTQ/AWQ layer whose per-GPU input is not a
    multiple of the group size at tp, else None."""
    family = f.quant or ""
    family = "gptq" if family == "marlin" else (family[:-len("_marlin")] if family.endswith("_marlin") else family)
    group = f.model["quant_group_size"]
    if family not in ("gptq", "awq") or group is None or tp <= 1:  # GPTQ/AWQ and their Marlin kernels
        return None
    layers = []
    heads = f.model["num_attention_heads"]
    if heads and f.head_size:
        layers.append(("o_proj (num_attention_heads x head_dim = %d)" % (heads * f.head_size), heads * f.head_size))
    if f.model["intermediate_size"]:
        layers.append(("down_proj (intermediate_size %d)" % f.model["intermediate_size"],
                       f.model["intermediate_size"]))
    for name, size in layers:
        if size % tp:
            continue  # the divisibility checks report this
        per_gpu = size // tp
        if group == -1:
            # GPTQ: x % -1 == 0 (no constraint); AWQ takes the full input size as the group
            if family.startswith("awq") and per_gpu % size:
                return name, size
            continue
        if per_gpu % group:
            return name, size
    return None


def output_misaligned(f, tp):
    """(layer, per-GPU output, pack factor) of the first GPTQ layer whose per-GPU output is not a
    multiple of the pack factor at tp, else None (also when the bit width is not known)."""
    bits = f.model["quant_bits"]
    if f.quant != "gptq" or not bits:
        return None
    pack = Fraction(32, bits).numerator
    heads, kv, hidden, inter = (f.model["num_attention_heads"], f.model["num_key_value_heads"] or
                                f.model["num_attention_heads"], f.model["hidden_size"], f.model["intermediate_size"])
    layers = []
    if heads and kv and f.head_size and heads % tp == 0:
        per_kv = kv // tp if kv >= tp else 1
        layers.append(("qkv_proj (%d query + 2 x %d key/value heads per GPU x head_dim %d)"
                       % (heads // tp, per_kv, f.head_size), (heads // tp + 2 * per_kv) * f.head_size))
    if inter and inter % tp == 0:
        layers.append(("gate_up_proj (2 x intermediate_size %d / %d)" % (inter, tp), 2 * inter // tp))
    if hidden:
        layers.append(("o_proj and down_proj (hidden_size %d)" % hidden, hidden))
    for name, size in layers:
        if size % pack:
            return name, size, pack
    return None


def tp_breaks(f, tp):
    """Which tensor-parallel constraints ``tp`` breaks (names), for suggestions."""
    broken = []
    heads, kv = f.model["num_attention_heads"], f.model["num_key_value_heads"]
    if heads and heads % tp:
        broken.append("heads")
    if kv and not _kv_heads_split(kv, tp):
        broken.append("kv")
    if f.model["intermediate_size"] and f.model["intermediate_size"] % tp:
        broken.append("intermediate")
    if group_misaligned(f, tp):
        broken.append("group")
    if output_misaligned(f, tp):
        broken.append("output")
    return broken


def tp_suggestions(f):
    """The fix of a tensor-parallel finding: the sizes this model allows on these GPUs (up to 8 without GPUs)."""
    limit = len(f.gpus) // f.pp if f.gpus else 8
    good = [t for t in range(1, max(1, limit) + 1) if not tp_breaks(f, t)]
    if not good:
        return "no tensor_parallel_size up to %d fits this model" % max(1, limit)
    where = " (the values this model allows on %d GPU%s)" % (len(f.gpus), "s" if len(f.gpus) != 1 else "") \
        if f.gpus else " (the values up to 8 this model allows)"
    return "use tensor_parallel_size %s%s" % (_join_or(good), where)


def attention_applies(f):
    """Whether the head-size and backend checks apply (a head size is known, standard attention)."""
    return f.head_size is not None and (f.model["model_type"] or "") not in _NON_STANDARD_ATTENTION


def _kv_unsupported_fa(kv, cc):
    return kv.startswith("fp8") and cc[0] != 9 or kv not in ("auto", "float16", "bfloat16") and not kv.startswith("fp8")


def backends_0_19_1(f):
    """[(name, [reasons])] for the non-MLA backends vLLM 0.19.1 tries on CUDA, in priority order
    (vllm-0.19.1/vllm/platforms/cuda.py:51-113 and each backend's validate_configuration)."""
    cc, head, dtype, kv, block = f.cc, f.head_size, f.dtype or "float16", f.kv, f.args["block_size"]
    fp16 = dtype in ("float16", "bfloat16")
    kv_fp8 = kv in ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")
    block_bad = block is not None and block % 16  # FlashInfer's kernel block sizes 16, 32, 64: multiples of 16
    flash_attn = [why for why, broken in (
        ("compute capability not supported", cc < (8, 0)), ("dtype not supported", not fp16),
        ("head_size not supported", head % 8 or head > 256), ("kv_cache_dtype not supported", _kv_unsupported_fa(kv, cc)),
        ("block_size not supported", block_bad)) if broken]
    flashinfer = [why for why, broken in (
        ("compute capability not supported", cc < (7, 5) or cc > (12, 1)), ("dtype not supported", not fp16),
        ("head_size not supported", head not in (64, 128, 256)), ("kv_cache_dtype not supported", not kv_fp8),
        ("block_size not supported", block_bad)) if broken]
    triton = [why for why, broken in (
        ("head_size not supported", head < 32), ("kv_cache_dtype not supported", not kv_fp8),
        ("block_size not supported", block_bad)) if broken]
    flex = ["kv_cache_dtype not supported"] if kv not in ("auto", "float16", "bfloat16") else []
    order = [("FLASH_ATTN", flash_attn), ("FLASHINFER", flashinfer), ("TRITON_ATTN", triton), ("FLEX_ATTENTION", flex)]
    if cc[0] == 10:
        order = [order[1], order[0], order[2], order[3]]
    return order


def _backends_judged_0_19_1(f):
    """backends_0_19_1's list when vLLM 0.19.1's backend choice can be judged here, else None (another
    release, no GPU, MLA or no attention, or a KV-cache dtype the release lacks: KV_CACHE_DTYPE_UNKNOWN_TO_IMAGE)."""
    if f.release != "0.19.1" or f.cc is None or not attention_applies(f):
        return None
    if f.kv not in KV_CACHE_DTYPES_BY_RELEASE["0.19.1"]["values"]:
        return None
    return backends_0_19_1(f)


def _where_0_8_5(f):
    return "vLLM 0.8.5 on %s (%s engine, %s attention)" % (
        gpu_label(f), f.engine.upper(), {"FLASH_ATTN_V1": "FlashAttention", "FLASH_ATTN": "FlashAttention",
                                         "XFORMERS": "XFormers/PagedAttention"}[f.backend])


def _attention_judged_0_8_5(f):
    """Whether vLLM 0.8.5's attention checks apply: the release, a GPU (so an engine), and a block
    size argparse takes (block_size_choices reports the others)."""
    block = f.args["block_size"]
    return f.release == "0.8.5" and (block is None or block in BLOCK_SIZE_CHOICES_0_8_5) and f.engine is not None


# ---------------------------------------------------------------------------------------------
# The checks. Each is a pure function of the facts: the message of what vLLM would refuse (or do
# differently), or None. Their rows in CHECKS below give each its id, vLLM's source in each
# release and its code, in the order they report.
# ---------------------------------------------------------------------------------------------


def check_release_modelled(f):
    """A version other than 0.8.5 / 0.19.1 (or none) gets only the checks both releases share."""
    if f.release is not None:
        return None
    return ("%s: only the startup checks vLLM 0.8.5 and 0.19.1 make the same way were made (attention backend, "
            "block size, scheduler defaults and release-specific flags were not judged)"
            % ("the image's vLLM version is unknown" if f.version is None else
               "vLLM %s is neither 0.8.5 nor 0.19.1" % ".".join(str(v) for v in f.version)))


def _stopped_at_heads(f):
    """vLLM stops at the attention-heads config check; the layer checks below it are not reached."""
    heads = f.model["num_attention_heads"]
    return bool(heads and heads % f.tp)


def check_attention_heads_divisible(f):
    """ModelConfig.verify_with_parallel_config: num_attention_heads % tensor_parallel_size."""
    heads, tp = f.model["num_attention_heads"], f.tp
    if not _stopped_at_heads(f):
        return None
    return ("num_attention_heads %d is not divisible by tensor_parallel_size %d: %s raises 'Total number of attention "
            "heads (%d) must be divisible by tensor parallel size (%d).'; %s"
            % (heads, tp, f.label, heads, tp, tp_suggestions(f)))


def check_kv_heads_divisible(f):
    """QKVParallelLinear: num_key_value_heads divisible by TP, or TP by num_key_value_heads."""
    kv, tp = f.model["num_key_value_heads"], f.tp
    if _stopped_at_heads(f) or not kv or tp <= 1 or _kv_heads_split(kv, tp):
        return None
    pair = (tp, kv) if tp >= kv else (kv, tp)
    return ("num_key_value_heads %d and tensor_parallel_size %d do not divide one another: %s's QKVParallelLinear "
            "fails with AssertionError '%d is not divisible by %d' while the model loads; %s"
            % (kv, tp, f.label, pair[0], pair[1], tp_suggestions(f)))


def check_intermediate_size_divisible(f):
    """MergedColumnParallelLinear / RowParallelLinear divide intermediate_size by TP."""
    inter, tp = f.model["intermediate_size"], f.tp
    if _stopped_at_heads(f) or not inter or not inter % tp:
        return None
    return ("intermediate_size %d is not divisible by tensor_parallel_size %d: %s's MLP layers fail with "
            "AssertionError '%d is not divisible by %d' while the model loads; %s"
            % (inter, tp, f.label, inter, tp, tp_suggestions(f)))


def check_quant_group_alignment(f):
    """GPTQ/AWQ create_weights: a row-parallel layer's per-GPU input % group_size."""
    misaligned = None if _stopped_at_heads(f) else group_misaligned(f, f.tp)
    if not misaligned:
        return None
    layer, size = misaligned
    group, tp = f.model["quant_group_size"], f.tp
    return ("%s with group_size %d at tensor_parallel_size %d: %s's per-GPU input is %d, not a multiple of %d, so %s "
            "raises 'The input size is not aligned with the quantized weight shape. This can be caused by too "
            "large tensor parallel size.'; %s, or a checkpoint quantized with a padded intermediate_size"
            % (f.quant, group, tp, layer, size // tp, group, f.label, tp_suggestions(f)))


def check_quant_output_alignment(f):
    """GPTQ create_weights: a layer's per-GPU output % pack factor (32 / bits)."""
    misaligned = None if _stopped_at_heads(f) else output_misaligned(f, f.tp)
    if not misaligned:
        return None
    layer, size, pack = misaligned
    return ("%s %d-bit at tensor_parallel_size %d: %s's per-GPU output is %d, not a multiple of %d (the values one "
            "int32 packs), so %s raises 'The output size is not aligned with the quantized weight shape. This can "
            "be caused by too large tensor parallel size.'; %s"
            % (f.quant, f.model["quant_bits"], f.tp, layer, size, pack, f.label, tp_suggestions(f)))


def check_pipeline_parallel_supported(f):
    """verify_with_parallel_config: pipeline_parallel_size > 1 needs a SupportsPP model class."""
    if f.pp <= 1 or not f.model["architectures"]:
        return None
    arch = f.model["architectures"][0]
    if f.release:
        lacking = arch in NO_PIPELINE_PARALLEL_ARCHS[f.release]
    else:
        lacking = all(arch in NO_PIPELINE_PARALLEL_ARCHS[r] for r in _RELEASES)
    if not lacking:
        return None
    return ("%s has no pipeline parallelism in %s: it raises 'Pipeline parallelism is not supported for this model. "
            "Supported models implement the `SupportsPP` interface.'; set pipeline_parallel_size 1 (and spread the "
            "model with tensor_parallel_size)" % (arch, f.label))


def check_disable_sliding_window_with_rope(f):
    """vLLM 0.8.5: disable_sliding_window on a model whose rope scaling scales the length."""
    if f.release != "0.8.5" or not f.args["disable_sliding_window"] or not rope_scales_length(f):
        return None
    return ("disable_sliding_window with rope_scaling type %s: vLLM 0.8.5 raises 'Disabling sliding window is not "
            "supported for models with rope_scaling. Please raise an issue so we can investigate.'; drop "
            "disable_sliding_window" % rope_type(f))


def check_max_model_len_vs_model(f):
    """_get_and_verify_max_len: max_model_len above the length config.json derives."""
    requested = f.args["max_model_len"]
    derived, key = derived_max_len(f)
    if requested is None or derived is None or requested <= derived:
        return None
    limit = f.model["model_max_length"]
    if limit is not None and requested <= limit:
        return None
    shown = "%d" % derived
    scaled = ""
    if rope_scales_length(f):
        # vLLM multiplies by the (float) factor, so it prints the derived length as a float
        shown = repr(float(derived))
        scaled = " (%s scaled by rope_scaling %s factor %g)" % (key, rope_type(f), f.model["rope_scaling"]["factor"] or 1.0)
    return ("max_model_len %d is above the %d tokens the model's config.json allows%s: %s raises 'User-specified "
            "max_model_len (%d) is greater than the derived max_model_len (%s=%s or model_max_length=%s in model's "
            "config.json).'; lower max_model_len to %d (or extend the context with rope scaling in config.json, or "
            "set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 at your own risk)"
            % (requested, int(derived), scaled, f.label, requested, key, shown, limit, int(derived)))


def check_prefix_caching_sliding_window(f):
    """vLLM 0.8.5 CacheConfig._verify_prefix_caching: prefix caching with a sliding window on V0."""
    if f.release != "0.8.5" or not f.args["enable_prefix_caching"]:
        return None
    window = sliding_window_active(f)
    if f.engine != "v0" or not window:
        return None
    return ("enable_prefix_caching with sliding_window %d on vLLM 0.8.5's V0 engine (%s): it raises 'Prefix caching "
            "is not supported with sliding window. Run with --disable-sliding-window to use prefix caching.'; drop "
            "enable_prefix_caching (or set disable_sliding_window: true, which caps max_model_len at %d)"
            % (window, gpu_label(f), window))


def check_chunked_prefill_override(f):
    """enable_chunked_prefill false: ignored by 0.8.5's V1 engine, warned about by 0.19.1."""
    if f.args["enable_chunked_prefill"] is not False:
        return None
    if f.release == "0.8.5" and f.schedule.chunked is True:
        return ("enable_chunked_prefill false has no effect on vLLM 0.8.5's V1 engine (%s): it always chunks "
                "prefills" % gpu_label(f))
    if f.release == "0.19.1":
        return ("enable_chunked_prefill false: vLLM 0.19.1 warns 'This model does not officially support disabling "
                "chunked prefill. Disabling this manually may cause the engine to crash or produce incorrect "
                "outputs.'; leave enable_chunked_prefill unset")
    return None


def _tokens_source(f):
    tokens = f.schedule.tokens
    if f.args["max_num_batched_tokens"] is not None:
        return "max_num_batched_tokens %d" % tokens
    return "the default max_num_batched_tokens %d" % tokens


def check_max_num_batched_tokens_vs_max_model_len(f):
    """SchedulerConfig: max_num_batched_tokens < max_model_len without chunked prefill."""
    tokens, max_len = f.schedule.tokens, f.max_len
    if not f.release or tokens is None or max_len is None or f.schedule.chunked is not False or tokens >= max_len:
        return None
    return ("%s is below max_model_len %d and chunked prefill is off (%s): %s raises 'max_num_batched_tokens (%d) "
            "is smaller than max_model_len (%d). This effectively limits the maximum sequence length to "
            "max_num_batched_tokens and makes vLLM reject longer sequences. Please increase max_num_batched_tokens "
            "or decrease max_model_len.'; set max_num_batched_tokens to %d or more, lower max_model_len to %d, or "
            "set enable_chunked_prefill: true"
            % (_tokens_source(f), max_len, f.schedule.how, f.label, tokens, max_len, max_len, tokens))


def check_max_num_batched_tokens_vs_max_num_seqs(f):
    """SchedulerConfig: max_num_batched_tokens < max_num_seqs."""
    tokens, seqs = f.schedule.tokens, f.schedule.seqs
    if f.release is None and f.args["max_num_seqs"] is None:
        seqs = None  # the releases' default max_num_seqs differ: only explicit values are shared
    if tokens is None or seqs is None or tokens >= seqs:
        return None
    return ("max_num_batched_tokens %d%s is below max_num_seqs %d%s (%s): %s raises 'max_num_batched_tokens (%d) "
            "must be greater than or equal to max_num_seqs (%d).'; set max_num_batched_tokens to %d or more, or "
            "lower max_num_seqs to %d"
            % (tokens, "" if f.args["max_num_batched_tokens"] is not None else " (the default)",
               seqs, "" if f.args["max_num_seqs"] is not None else " (the default)",
               f.schedule.how, f.label, tokens, seqs, seqs, tokens))


def check_gpu_memory_utilization_range(f):
    """CacheConfig: gpu_memory_utilization in (0, 1]."""
    util = f.args["gpu_memory_utilization"]
    if util is None or 0 < util <= 1:
        return None
    said = {
        ("0.8.5", True): "vLLM 0.8.5 raises 'GPU memory utilization must be less than 1.0. Got %g.'" % util,
        ("0.8.5", False): "vLLM 0.8.5 leaves the KV cache no memory and raises 'No available memory for the cache "
                          "blocks. Try increasing `gpu_memory_utilization`'",
        ("0.19.1", True): "vLLM 0.19.1's CacheConfig refuses it (gpu_memory_utilization: le=1)",
        ("0.19.1", False): "vLLM 0.19.1's CacheConfig refuses it (gpu_memory_utilization: gt=0)",
    }.get((f.release, util > 1), "vLLM refuses it at startup")
    return ("gpu_memory_utilization %g is outside (0, 1]: %s; set gpu_memory_utilization between 0.5 and 0.95 (a "
            "fraction of each GPU's memory, not GiB)" % (util, said))


def check_cpu_offload_non_negative(f):
    """cpu_offload_gb < 0 raises (0.8.5 CacheConfig; 0.19.1 pydantic ge=0)."""
    offload = f.args["cpu_offload_gb"]
    if offload is None or offload >= 0:
        return None
    return ("cpu_offload_gb %g is negative: %s raises 'CPU offload space must be non-negative, but got %g' (0.8.5) "
            "or a validation error (0.19.1: ge=0); set cpu_offload_gb to 0 or more" % (offload, f.label, offload))


def check_kv_fp8_e5m2_with_fp8_checkpoint(f):
    """Attention layer: kv_cache_dtype fp8_e5m2 with a quantization that loads KV-cache scales.

    Whether the release accepts the value at all is the gate's KV_CACHE_DTYPE_UNSUPPORTED
    (_gate.check_dtype, which also auto-fixes float16/bfloat16 to auto)."""
    if f.args["kv_cache_dtype"] != "fp8_e5m2" or f.quant not in KV_SCALE_QUANT_METHODS:
        return None
    return ("kv_cache_dtype fp8_e5m2 with a %s checkpoint: %s raises 'fp8_e5m2 kv-cache is not supported with fp8 "
            "checkpoints.' when it builds the attention layers; use kv_cache_dtype fp8 (fp8_e4m3) or auto"
            % (f.quant, f.label))


def check_swap_space_flag(f):
    """vLLM 0.19.1's CLI has no --swap-space."""
    if f.args["swap_space"] is None or f.release != "0.19.1":
        return None
    return ("swap_space %g: vLLM 0.19.1 has no --swap-space flag (removed in 0.18.0), so `vllm serve` exits with "
            "'unrecognized arguments: --swap-space'; remove swap_space from the vLLM arguments" % f.args["swap_space"])


def check_block_size_choices(f):
    """vLLM 0.8.5's --block-size choices (the BlockSize Literal)."""
    block = f.args["block_size"]
    if f.release != "0.8.5" or block is None or block in BLOCK_SIZE_CHOICES_0_8_5:
        return None
    return ("block_size %d: vLLM 0.8.5 takes only %s (argparse exits with 'argument --block-size: invalid choice: "
            "%d'); use block_size 16 or leave it unset" % (block, _join_or(BLOCK_SIZE_CHOICES_0_8_5), block))


def check_block_size_paged_attention(f):
    """vLLM 0.8.5 V0 XFormers decode: the PagedAttention kernels' block sizes."""
    block = f.args["block_size"]
    if not _attention_judged_0_8_5(f) or block is None or f.backend != "XFORMERS" \
            or block in PAGED_ATTENTION_BLOCK_SIZES:
        return None
    return ("block_size %d on %s: the PagedAttention CUDA kernels are built for block sizes %s only, so decoding "
            "fails with 'Unsupported block size: %d' (during CUDA graph capture at startup, or on the first request "
            "with enforce_eager); use block_size 16 or leave it unset"
            % (block, _where_0_8_5(f), _join_or(PAGED_ATTENTION_BLOCK_SIZES), block))


def check_block_size_v1_flash_attn(f):
    """vLLM 0.8.5 V1 FlashAttention: block size a multiple of 16."""
    block = f.args["block_size"]
    if not _attention_judged_0_8_5(f) or block is None or f.backend != "FLASH_ATTN_V1" or not block % 16:
        return None
    return ("block_size %d on %s: it raises 'Block size must be a multiple of 16.'; use block_size 16 or leave it "
            "unset" % (block, _where_0_8_5(f)))


def check_head_size_paged_attention(f):
    """vLLM 0.8.5 V0 XFormersImpl: PagedAttention's head sizes."""
    head = f.head_size
    if not _attention_judged_0_8_5(f) or not attention_applies(f) or f.backend != "XFORMERS" \
            or head in PAGED_ATTENTION_HEAD_SIZES:
        return None
    return ("head size %d on %s: it raises 'Head size %d is not supported by PagedAttention. Supported head sizes "
            "are: [%s].'; no vLLM flag changes this: use vLLM 0.19.1 (Triton attention takes head sizes >= 32) or "
            "GPUs of compute capability 8.0 or higher"
            % (head, _where_0_8_5(f), head, ", ".join(str(s) for s in PAGED_ATTENTION_HEAD_SIZES)))


def check_head_size_v1_flash_attn(f):
    """vLLM 0.8.5 V1 FlashAttentionImpl: FlashAttention's head sizes."""
    head = f.head_size
    if not _attention_judged_0_8_5(f) or not attention_applies(f) or f.backend != "FLASH_ATTN_V1" \
            or head in FLASH_ATTN_HEAD_SIZES_0_8_5:
        return None
    fits_v0 = head in PAGED_ATTENTION_HEAD_SIZES
    return ("head size %d on %s: it raises 'Head size %d is not supported by FlashAttention. Supported head sizes "
            "are: [%s]. Set VLLM_USE_V1=0 to use another attention backend.'; %s"
            % (head, _where_0_8_5(f), head, ", ".join(str(s) for s in FLASH_ATTN_HEAD_SIZES_0_8_5),
               "set the environment variable VLLM_USE_V1=0 (the V0 engine's XFormers backend takes it) or use vLLM "
               "0.19.1" if fits_v0 else "use vLLM 0.19.1"))


def check_attention_backend_0_19_1(f):
    """vLLM 0.19.1 get_attn_backend_cls: no valid backend raises."""
    order = _backends_judged_0_19_1(f)
    if order is None or any(not why for _name, why in order):
        return None
    block = f.args["block_size"]
    reasons = "; ".join("%s: %s" % (name, ", ".join(why)) for name, why in order)
    fixes = []
    if f.kv != "auto":
        fixes.append("kv_cache_dtype auto")
    if block is not None and block % 16:
        fixes.append("block_size 16 (or unset)")
    return ("no attention backend of vLLM 0.19.1 takes head size %d, dtype %s, kv_cache_dtype %s and block_size %s "
            "on %s (%s): it raises 'No valid attention backend found'; use %s"
            % (f.head_size, f.dtype or "float16", f.kv, block if block is not None else "unset", gpu_label(f),
               reasons, " and ".join(fixes) if fixes else "a GPU of compute capability 8.0 or higher"))


def check_attention_backend_block_size_fallback(f):
    """vLLM 0.19.1: a --block-size that precludes a higher-priority backend (a warning)."""
    order = _backends_judged_0_19_1(f)
    block = f.args["block_size"]
    valid = [name for name, why in order if not why] if order is not None else []
    if not valid or block is None:
        return None
    first = [n for n, _w in order].index(valid[0])
    precluded = [name for name, why in order[:first] if why == ["block_size not supported"]]
    if not precluded:
        return None
    return ("block_size %d rules out %s on %s, so vLLM 0.19.1 uses %s ('--block-size %d precluded higher-priority "
            "backend(s)'); leave block_size unset or use a multiple of 16"
            % (block, ", ".join(precluded), gpu_label(f), valid[0], block))


def check_float16_unsupported_models(f):
    """vLLM 0.19.1 _check_valid_dtype: float16 refused for some model types."""
    model_type = f.model["model_type"]
    if f.release != "0.19.1" or f.dtype != "float16" or model_type not in FLOAT16_UNSUPPORTED_MODEL_TYPES_0_19_1:
        return None
    other = "float32" if f.cc is not None and f.cc < (8, 0) else "bfloat16 (or float32)"
    return ("dtype float16 for model_type %s: vLLM 0.19.1 raises 'The model type '%s' does not support float16. "
            "Reason: Numerical instability. Please use bfloat16 or float32 instead.'; use dtype %s (dtype auto picks "
            "it on %s)" % (model_type, model_type, other, gpu_label(f)))


def check_quant_deprecated(f):
    """vLLM 0.19.1 _verify_quantization: deprecated methods need --allow-deprecated-quantization."""
    if f.release != "0.19.1" or f.quant not in DEPRECATED_QUANTIZATION_0_19_1 or f.args["allow_deprecated_quantization"]:
        return None
    return ("quantization %s is deprecated in vLLM 0.19.1: it raises 'The quantization method %s is deprecated and "
            "will be removed in future versions of vLLM. To bypass, set `--allow-deprecated-quantization`.'; set "
            "allow_deprecated_quantization: true, or serve a checkpoint in a supported format (fp8, gptq, awq, "
            "compressed-tensors)" % (f.quant, f.quant))


# ---------------------------------------------------------------------------------------------
# The table: every check read in the sources, encoded or not. Paths are relative to the sdist root
# (vllm-0.8.5/, vllm-0.19.1/). A check encoded here has its code and its ``function`` (the rules,
# STARTUP_RULES, run in this order); one encoded in _gate.py has its code, one not encoded why not.
# Adding a check: its function above, its row here (in the order vLLM meets it), one test.
# ---------------------------------------------------------------------------------------------


def _row(check_id, what, v085, v191, code=None, encoded_in=_HERE, why_not=None, confidence="verified",
         function=None):
    return {
        "id": check_id,
        "what": what,
        "vllm_0_8_5": v085,
        "vllm_0_19_1": v191,
        "encoded": why_not is None,
        "code": code if why_not is None else None,
        "why_not": why_not,
        "encoded_in": encoded_in if why_not is None else None,
        "confidence": confidence,
        "function": function if why_not is None else None,
    }


_Q085 = "vllm/model_executor/layers/quantization/"
_Q191 = "vllm/model_executor/layers/quantization/"

CHECKS = [
    # --- the release ------------------------------------------------------------------------
    _row("release_modelled",
         "This module models vLLM 0.8.5 and 0.19.1 exactly; another version (or none) gets only the checks "
         "both releases make the same way",
         None, None, "STARTUP_CHECKS_PARTIAL", function=check_release_modelled),
    # --- parallel layout -------------------------------------------------------------------
    _row("attention_heads_divisible",
         "ModelConfig.verify_with_parallel_config: num_attention_heads % tensor_parallel_size == 0",
         "vllm/config.py:934", "vllm/config/model.py:1112", "ATTENTION_HEADS_NOT_DIVISIBLE",
         function=check_attention_heads_divisible),
    _row("kv_heads_divisible",
         "QKVParallelLinear: num_key_value_heads divisible by TP, or TP by num_key_value_heads (replicas)",
         "vllm/model_executor/layers/linear.py:835", "vllm/model_executor/layers/linear.py:1014",
         "KV_HEADS_NOT_DIVISIBLE", function=check_kv_heads_divisible),
    _row("intermediate_size_divisible",
         "MergedColumnParallelLinear / RowParallelLinear divide the MLP's intermediate_size by TP "
         "(distributed/utils.py divide() asserts)",
         "vllm/model_executor/layers/linear.py:391", "vllm/model_executor/layers/linear.py:456",
         "INTERMEDIATE_SIZE_NOT_DIVISIBLE", confidence="inferred", function=check_intermediate_size_divisible),
    _row("quant_group_alignment",
         "GPTQ/AWQ create_weights: input_size_per_partition % group_size (o_proj: heads x head_dim / TP; "
         "down_proj: intermediate_size / TP); the Marlin variants need the same",
         _Q085 + "gptq.py:146", _Q191 + "gptq.py:251", "QUANT_GROUP_SIZE_NOT_ALIGNED",
         function=check_quant_group_alignment),
    _row("quant_output_alignment",
         "GPTQ create_weights: output_size_per_partition % pack_factor (32 / bits: 8 for 4-bit); column-parallel "
         "layers (qkv_proj, gate_up_proj) split their output by TP, row-parallel ones (o_proj, down_proj) keep "
         "hidden_size",
         _Q085 + "gptq.py:152", _Q191 + "gptq.py:258", "QUANT_OUTPUT_NOT_ALIGNED", confidence="inferred",
         function=check_quant_output_alignment),
    _row("pipeline_parallel_supported",
         "verify_with_parallel_config: pipeline_parallel_size > 1 needs a SupportsPP model class",
         "vllm/config.py:945", "vllm/config/model.py:1125", "PIPELINE_PARALLEL_UNSUPPORTED_MODEL",
         function=check_pipeline_parallel_supported),
    _row("world_size_vs_gpus",
         "TP x PP above the GPU count: 0.8.5 falls to Ray and fails in the placement group; 0.19.1 raises "
         "'World size (N) is larger than the number of available GPUs'",
         "vllm/executor/ray_utils.py:329", "vllm/config/parallel.py:718", "TENSOR_PARALLEL_EXCEEDS_GPUS",
         encoded_in=_GATE),
    _row("expert_parallel_needs_moe",
         "enable_expert_parallel on a model without experts",
         "vllm/config.py:885", "vllm/config/model.py:1060",
         why_not="enable_expert_parallel is not an argument the collection passes"),
    _row("vocab_padding",
         "VocabParallelEmbedding pads vocab_size to a multiple of 64 per TP rank; never raises",
         "vllm/model_executor/layers/vocab_parallel_embedding.py:216", None,
         why_not="nothing to decide: vLLM pads the vocabulary for any tensor_parallel_size"),
    # --- context length --------------------------------------------------------------------
    _row("disable_sliding_window_with_rope",
         "disable_sliding_window on a model with rope_scaling (type not su/longrope/llama3)",
         "vllm/config.py:3060", None, "SLIDING_WINDOW_DISABLE_UNSUPPORTED",
         function=check_disable_sliding_window_with_rope),
    _row("max_model_len_vs_model",
         "_get_and_verify_max_len: max_model_len above the derived length (smallest context key, x rope "
         "factor except llama3/longrope/su, yarn from original_max_position_embeddings) raises unless "
         "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",
         "vllm/config.py:3106", "vllm/config/model.py:2178", "MAX_MODEL_LEN_EXCEEDS_MODEL",
         function=check_max_model_len_vs_model),
    _row("rope_scaling_keys",
         "patch_rope_scaling: rope_scaling without rope_type/type, or with both disagreeing",
         "vllm/transformers_utils/config.py:202", "vllm/transformers_utils/config.py:438",
         why_not="transformers' config classes rewrite rope_scaling before vLLM reads it (Qwen2.5-VL's "
                 "type mrope becomes default), so config.json alone does not decide it"),
    _row("prefix_caching_sliding_window",
         "CacheConfig._verify_prefix_caching: prefix caching with a sliding window on the V0 engine",
         "vllm/config.py:1416", None, "PREFIX_CACHING_WITH_SLIDING_WINDOW",
         function=check_prefix_caching_sliding_window),
    # --- scheduler -------------------------------------------------------------------------
    _row("chunked_prefill_override",
         "0.8.5 V1 forces enable_chunked_prefill on; 0.19.1 warns that disabling it is unsupported",
         "vllm/engine/arg_utils.py:1569", "vllm/engine/arg_utils.py:2126", "CHUNKED_PREFILL_OVERRIDDEN",
         function=check_chunked_prefill_override),
    _row("max_num_batched_tokens_vs_max_model_len",
         "SchedulerConfig: max_num_batched_tokens < max_model_len without chunked prefill (defaults: 0.8.5 "
         "V0 enables chunked prefill only above 32768 tokens without sliding window; V1 and 0.19.1 enable it)",
         "vllm/config.py:2025", "vllm/config/scheduler.py:264", "MAX_NUM_BATCHED_TOKENS_TOO_SMALL",
         function=check_max_num_batched_tokens_vs_max_model_len),
    _row("max_num_batched_tokens_vs_max_num_seqs",
         "SchedulerConfig: max_num_batched_tokens < max_num_seqs (defaults from engine/arg_utils.py by "
         "engine and GPU memory)",
         "vllm/config.py:2034", "vllm/config/scheduler.py:274", "MAX_NUM_BATCHED_TOKENS_TOO_SMALL",
         function=check_max_num_batched_tokens_vs_max_num_seqs),
    _row("max_num_batched_tokens_above_capacity",
         "0.19.1 logs a warning when max_num_batched_tokens > max_num_seqs x max_model_len",
         None, "vllm/config/scheduler.py:281",
         why_not="a log line only; vLLM starts"),
    _row("partial_prefills",
         "max_num_partial_prefills / max_long_partial_prefills / long_prefill_token_threshold checks",
         "vllm/config.py:2046", "vllm/config/scheduler.py:290",
         why_not="these scheduler arguments are not ones the collection passes"),
    # --- cache -----------------------------------------------------------------------------
    _row("gpu_memory_utilization_range",
         "CacheConfig: gpu_memory_utilization > 1.0 raises (0.8.5); pydantic gt=0, le=1 (0.19.1); 0 leaves "
         "no KV-cache memory in 0.8.5",
         "vllm/config.py:1395", "vllm/config/cache.py:41", "GPU_MEMORY_UTILIZATION_INVALID",
         function=check_gpu_memory_utilization_range),
    _row("cpu_offload_non_negative",
         "cpu_offload_gb < 0 raises (0.8.5); pydantic ge=0 (0.19.1)",
         "vllm/config.py:1391", "vllm/config/offload.py:23", "CPU_OFFLOAD_GB_NEGATIVE",
         function=check_cpu_offload_non_negative),
    _row("kv_cache_dtype_choices",
         "--kv-cache-dtype takes only the CacheDType Literal's values (argparse choices; float16/bfloat16 "
         "are 0.19.1 values)",
         "vllm/config.py:1291", "vllm/config/cache.py:14", "KV_CACHE_DTYPE_UNSUPPORTED", encoded_in=_GATE),
    _row("kv_fp8_e5m2_with_fp8_checkpoint",
         "Attention layer: kv_cache_dtype fp8_e5m2 with a quantization whose KV-cache method loads scales "
         "raises 'fp8_e5m2 kv-cache is not supported with fp8 checkpoints.'",
         "vllm/attention/layer.py:114", "vllm/model_executor/layers/attention/attention.py:166",
         "KV_CACHE_DTYPE_CONFLICTS_WITH_CHECKPOINT", function=check_kv_fp8_e5m2_with_fp8_checkpoint),
    _row("swap_space_flag",
         "--swap-space exists in 0.8.5 (CacheConfig.swap_space); 0.19.1's CLI has no such flag (only the "
         "LLM class drops the keyword), so argparse exits",
         "vllm/engine/arg_utils.py:559", "vllm/entrypoints/llm.py:261", "VLLM_ARG_UNKNOWN_TO_IMAGE",
         function=check_swap_space_flag),
    _row("swap_space_vs_host_ram",
         "CacheConfig.verify_with_parallel_config: swap_space x TP above 70% of host RAM raises 'Too large "
         "swap space'",
         "vllm/config.py:1441", None,
         why_not="needs the host's total RAM, which is not an input of startup_checks (host_facts could "
                 "pass it)"),
    # --- attention backend -----------------------------------------------------------------
    _row("engine_selection_0_8_5",
         "0.8.5 picks V1 only on compute capability >= 8.0 with kv_cache_dtype auto, dtype fp16/bf16, "
         "pipeline_parallel_size 1 and a V1-compatible architecture (else V0); V0 then picks FlashAttention "
         "or XFormers",
         "vllm/engine/arg_utils.py:1354", None, None, confidence="verified"),
    _row("block_size_choices",
         "--block-size takes only 1, 8, 16, 32, 64, 128 (BlockSize Literal, argparse choices); 0.19.1 "
         "takes any integer",
         "vllm/config.py:1290", None, "BLOCK_SIZE_UNSUPPORTED", function=check_block_size_choices),
    _row("block_size_paged_attention",
         "V0 XFormers decode (PagedAttention CUDA kernel): block sizes 8, 16, 32 only ('Unsupported block "
         "size'; hit during CUDA graph capture, or on the first request with enforce_eager)",
         "csrc/attention/paged_attention_v1.cu:165", None, "BLOCK_SIZE_UNSUPPORTED",
         function=check_block_size_paged_attention),
    _row("block_size_v1_flash_attn",
         "V1 FlashAttention: 'Block size must be a multiple of 16.'",
         "vllm/v1/attention/backends/flash_attn.py:64", None, "BLOCK_SIZE_UNSUPPORTED",
         function=check_block_size_v1_flash_attn),
    _row("head_size_paged_attention",
         "V0 XFormersImpl: head size in PagedAttention's [32, 64, 80, 96, 112, 120, 128, 192, 256]",
         "vllm/attention/backends/xformers.py:419", None, "HEAD_SIZE_UNSUPPORTED",
         function=check_head_size_paged_attention),
    _row("head_size_v1_flash_attn",
         "V1 FlashAttentionImpl: head size in [32, 64, 96, 128, 160, 192, 224, 256]",
         "vllm/v1/attention/backends/flash_attn.py:464", None, "HEAD_SIZE_UNSUPPORTED",
         function=check_head_size_v1_flash_attn),
    _row("attention_backend_0_19_1",
         "0.19.1 get_attn_backend_cls: FLASH_ATTN (cc >= 8.0, fp16/bf16, head % 8 == 0 and <= 256), "
         "FLASHINFER (cc 7.5-12.1, head 64/128/256, block 16/32/64), TRITON_ATTN (head >= 32, block % 16), "
         "FLEX_ATTENTION (KV auto/float16/bfloat16 only); none valid raises 'No valid attention backend'",
         None, "vllm/platforms/cuda.py:298", "ATTENTION_BACKEND_UNAVAILABLE",
         function=check_attention_backend_0_19_1),
    _row("attention_backend_block_size_fallback",
         "0.19.1: a user --block-size that precludes a higher-priority backend logs a warning",
         None, "vllm/platforms/cuda.py:325", "ATTENTION_BACKEND_FALLBACK",
         function=check_attention_backend_block_size_fallback),
    # --- dtype -----------------------------------------------------------------------------
    _row("bfloat16_needs_cc_8_0",
         "Worker: bfloat16 on compute capability < 8.0 raises ('use --dtype=half'); 0.19.1 resolves dtype "
         "auto to float16 there instead, explicit bfloat16 still raises",
         "vllm/worker/worker.py:546", "vllm/platforms/cuda.py:474", "DTYPE_UNSUPPORTED", encoded_in=_GATE),
    _row("float16_unsupported_models",
         "_check_valid_dtype: float16 refused for gemma2, gemma3, gemma3_text, plamo2, glm4",
         None, "vllm/config/model.py:1922", "DTYPE_UNSUPPORTED_BY_MODEL", function=check_float16_unsupported_models),
    _row("dtype_choices",
         "--dtype choices auto, half, float16, bfloat16, float, float32 ('Unknown dtype')",
         "vllm/config.py:2953", "vllm/config/model.py:1998",
         why_not="argparse choices; the gate and startup_checks refuse other values as input errors"),
    # --- quantization (encoded in _gate.py) --------------------------------------------------
    _row("quant_min_capability",
         "VllmConfig._get_quantization_config: capability < quant_config.get_min_capability()",
         "vllm/config.py:3805", "vllm/config/vllm.py:516", "QUANTIZATION_UNSUPPORTED_ON_ARCH",
         encoded_in=_GATE),
    _row("quant_min_capability_gptq", "GPTQ (exllama) get_min_capability: 6.0",
         _Q085 + "gptq.py:91", _Q191 + "gptq.py:135", "QUANTIZATION_UNSUPPORTED_ON_ARCH", encoded_in=_GATE),
    _row("quant_min_capability_gptq_marlin", "gptq_marlin get_min_capability: 8.0 (0.8.5), 7.5 (0.19.1)",
         _Q085 + "gptq_marlin.py:111", _Q191 + "gptq_marlin.py:183", "QUANTIZATION_UNSUPPORTED_ON_ARCH",
         encoded_in=_GATE),
    _row("quant_min_capability_marlin", "marlin get_min_capability: 8.0 (method removed by 0.19.1)",
         _Q085 + "marlin.py:75", None, "QUANTIZATION_UNSUPPORTED_ON_ARCH", encoded_in=_GATE),
    _row("quant_min_capability_awq", "AWQ get_min_capability: 7.5",
         _Q085 + "awq.py:54", _Q191 + "awq.py:73", "QUANTIZATION_UNSUPPORTED_ON_ARCH", encoded_in=_GATE),
    _row("quant_min_capability_awq_marlin", "awq_marlin get_min_capability: 8.0 (0.8.5), 7.5 (0.19.1)",
         _Q085 + "awq_marlin.py:84", _Q191 + "awq_marlin.py:206", "QUANTIZATION_UNSUPPORTED_ON_ARCH",
         encoded_in=_GATE),
    _row("quant_min_capability_fp8", "fp8 get_min_capability: 8.0 (0.8.5), 7.5 (0.19.1)",
         _Q085 + "fp8.py:94", _Q191 + "fp8.py:145", "QUANTIZATION_UNSUPPORTED_ON_ARCH", encoded_in=_GATE),
    _row("quant_min_capability_modelopt", "modelopt (FP8) get_min_capability: 8.9",
         _Q085 + "modelopt.py:53", _Q191 + "modelopt.py:408", "QUANTIZATION_UNSUPPORTED_ON_ARCH",
         encoded_in=_GATE),
    _row("quant_min_capability_modelopt_fp4",
         "ModelOpt NVFP4 get_min_capability: 10.0 (0.8.5 'nvfp4'), 7.5 (0.19.1 'modelopt_fp4')",
         _Q085 + "modelopt.py:195", _Q191 + "modelopt.py:1013", "QUANTIZATION_UNSUPPORTED_ON_ARCH",
         encoded_in=_GATE),
    _row("quant_min_capability_bitsandbytes", "bitsandbytes get_min_capability: 7.0",
         _Q085 + "bitsandbytes.py:67", _Q191 + "bitsandbytes.py:104", "QUANTIZATION_UNSUPPORTED_ON_ARCH",
         encoded_in=_GATE),
    _row("quant_min_capability_gguf", "GGUF get_min_capability: 6.0",
         _Q085 + "gguf.py:41", _Q191 + "gguf.py:71", "QUANTIZATION_UNSUPPORTED_ON_ARCH", encoded_in=_GATE),
    _row("quant_min_capability_compressed_tensors", "compressed-tensors config get_min_capability: 7.0",
         _Q085 + "compressed_tensors/compressed_tensors.py:71", _Q191 + "compressed_tensors/compressed_tensors.py:116",
         "QUANTIZATION_UNSUPPORTED_ON_ARCH", encoded_in=_GATE),
    _row("quant_min_capability_experts_int8", "experts_int8 get_min_capability: 8.0",
         _Q085 + "experts_int8.py:31", _Q191 + "experts_int8.py:42", "QUANTIZATION_UNSUPPORTED_ON_ARCH",
         encoded_in=_GATE),
    _row("quant_min_capability_fbgemm_fp8", "fbgemm_fp8 get_min_capability: 8.0",
         _Q085 + "fbgemm_fp8.py:49", _Q191 + "fbgemm_fp8.py:65", "QUANTIZATION_UNSUPPORTED_ON_ARCH",
         encoded_in=_GATE),
    _row("quant_min_capability_moe_wna16", "moe_wna16 get_min_capability: 7.0",
         _Q085 + "moe_wna16.py:75", _Q191 + "moe_wna16.py:97", "QUANTIZATION_UNSUPPORTED_ON_ARCH",
         encoded_in=_GATE),
    _row("quant_compressed_tensors_scheme",
         "CompressedTensorsConfig._check_scheme_supported: the scheme's own get_min_capability",
         _Q085 + "compressed_tensors/compressed_tensors.py:203", _Q191 + "compressed_tensors/compressed_tensors.py:340",
         "QUANTIZATION_UNSUPPORTED_ON_ARCH", encoded_in=_GATE),
    _row("quant_unknown_method",
         "_verify_quantization: 'Unknown quantization method' (and argparse choices for --quantization)",
         "vllm/config.py:824", "vllm/config/model.py:998", "QUANTIZATION_UNKNOWN_TO_IMAGE", encoded_in=_GATE),
    _row("quant_method_mismatch",
         "_verify_quantization: --quantization differs from the checkpoint's quant_method (after overrides)",
         "vllm/config.py:816", "vllm/config/model.py:989", "QUANTIZATION_MISMATCH", encoded_in=_GATE),
    _row("quant_act_dtypes",
         "_get_quantization_config: dtype not in get_supported_act_dtypes() (GPTQ/AWQ: float16 only)",
         "vllm/config.py:3812", "vllm/config/vllm.py:524", "QUANTIZATION_DTYPE_UNSUPPORTED", encoded_in=_GATE),
    _row("quant_deprecated",
         "_verify_quantization: fbgemm_fp8, fp_quant, experts_int8, petit_nvfp4 (tpu_int8) are deprecated "
         "and refused without --allow-deprecated-quantization",
         None, "vllm/config/model.py:1012", "QUANTIZATION_DEPRECATED", function=check_quant_deprecated),
    # --- memory (encoded in _gate.py) ----------------------------------------------------------
    _row("kv_cache_no_memory",
         "'No available memory for the cache blocks' after profiling",
         "vllm/worker/worker.py:560", "vllm/v1/core/kv_cache_utils.py:626", "INSUFFICIENT_VRAM",
         encoded_in=_GATE),
    _row("kv_cache_fits_max_model_len",
         "The KV cache must hold one max_model_len sequence (V0: worker.py:565; V1 0.8.5: "
         "v1/core/kv_cache_utils.py:545)",
         "vllm/worker/worker.py:565", "vllm/v1/core/kv_cache_utils.py:644", "INSUFFICIENT_VRAM",
         encoded_in=_GATE),
    _row("free_memory_at_start",
         "0.19.1: free GPU memory at start below gpu_memory_utilization x total raises; 0.8.5 V0 'Error in "
         "memory profiling'",
         "vllm/worker/worker.py:299", "vllm/v1/worker/utils.py:413",
         why_not="needs the GPU's free memory at start (other processes), runtime state"),
    _row("profile_activation_memory",
         "The profile run's activation and sampler peak (max_num_batched_tokens, max_num_seqs x vocab) "
         "reduces the KV-cache budget",
         "vllm/worker/worker.py:249", "vllm/v1/worker/gpu_worker.py:347",
         why_not="needs a profiling run on the GPU; the gate's memory plan covers weights and KV cache only"),
    # --- not encoded: inputs the probes do not know ---------------------------------------------
    _row("cuda_graph",
         "_verify_cuda_graph: caps max_seq_len_to_capture (0.8.5) or forces eager on ROCm; enforce_eager is "
         "read by no other startup check",
         "vllm/config.py:835", "vllm/config/model.py:1019",
         why_not="never raises on CUDA"),
    _row("bnb_8bit_eager",
         "_verify_bnb_config: bitsandbytes 8-bit forces enforce_eager (no raise)",
         "vllm/config.py:848", "vllm/config/model.py:1030",
         why_not="never raises; only switches CUDA graphs off"),
    _row("qwen2_partial_sliding_window",
         "Qwen2 with an active sliding window and max_window_layers raises 'Sliding window for some but all "
         "layers is not supported'",
         "vllm/model_executor/models/qwen2.py:279", "vllm/model_executor/models/qwen2.py:374",
         why_not="needs use_sliding_window true and max_window_layers; no public Qwen2/Qwen2.5 checkpoint "
                 "enables use_sliding_window"),
    _row("llama_activation",
         "LlamaMLP: hidden_act other than silu raises",
         "vllm/model_executor/models/llama.py:86", "vllm/model_executor/models/llama.py:112",
         why_not="hidden_act is not a probe fact; every Llama-architecture checkpoint uses silu"),
    _row("task_resolution",
         "_resolve_task / runner: the model must support the task (generate)",
         "vllm/config.py:739", "vllm/config/model.py:533",
         why_not="needs vLLM's model registry per architecture"),
    _row("tokenizer_mode",
         "_verify_tokenizer_mode: tokenizer_mode in auto/slow/mistral/custom",
         "vllm/config.py:643", None,
         why_not="tokenizer_mode is not an argument the collection passes; tokenizer files are not read"),
    _row("rope_scaling_null_factor",
         "0.19.1 falls back to factor 1.0 when rope scaling has a null factor (warning only)",
         None, "vllm/config/model.py:2123",
         why_not="a log line only"),
]

# The rules: the rows of CHECKS with a function, in the table's order (the order of the findings).
STARTUP_RULES = tuple(row for row in CHECKS if row["function"] is not None)


def run_rules(facts, rules=STARTUP_RULES):
    """The findings of ``rules`` (CHECKS rows with a function) for ``facts`` (a StartupFacts), in the
    rules' order: [{"code", "level": "reason"|"warning", "message", "check"}]."""
    findings = []
    for rule in rules:
        message = rule["function"](facts)
        if message:
            level = "warning" if rule["code"] in STARTUP_WARNING_CODES else "reason"
            findings.append({"code": rule["code"], "level": level, "message": message, "check": rule["id"]})
    return findings


def startup_checks(model, args, gpus, version):
    """What vLLM's startup validation would refuse for these inputs.

    model: config.json facts (model_facts): hidden_size, num_hidden_layers, num_attention_heads,
      num_key_value_heads, head_dim, max_position_embeddings, vocab_size, intermediate_size,
      model_type, architectures, rope_scaling, sliding_window, use_sliding_window, torch_dtype,
      quant_method, quant_group_size, model_max_length, text_config_used; any may be None or missing
      (the checks that need it are skipped).
    args: the effective vLLM arguments (tensor_parallel_size, pipeline_parallel_size, dtype,
      max_model_len, max_num_seqs, max_num_batched_tokens, gpu_memory_utilization, kv_cache_dtype,
      block_size, enforce_eager, enable_chunked_prefill, swap_space, cpu_offload_gb, quantization;
      optional enable_prefix_caching, disable_sliding_window, allow_deprecated_quantization,
      distributed_executor_backend); None means vLLM's default.
    gpus: [{"cc": (7, 0), "memory_mib": 32768}] (optional "name").
    version: the image's vLLM version as a tuple, or None (lenient).

    Returns [{"code", "level": "reason"|"warning", "message", "check"}], ``check`` an id of CHECKS.
    Raises StartupInputError naming the field on malformed input.
    """
    return run_rules(startup_facts(model, args, gpus, version))


# ---------------------------------------------------------------------------------------------
# Documentation
# ---------------------------------------------------------------------------------------------


def _cell(text):
    return (text or "").replace("|", "\\|").replace("\n", " ")


def render_checks_markdown():
    """The CHECKS table as Markdown (docs/deploy_gate.md embeds it verbatim)."""
    lines = [
        "| Check | What vLLM checks | vLLM 0.8.5 source | vLLM 0.19.1 source | Encoded |",
        "|---|---|---|---|---|",
    ]
    for row in CHECKS:
        if row["encoded"]:
            if row["code"]:
                encoded = "`%s` (`%s`)" % (row["code"], row["encoded_in"])
            else:
                encoded = "modelled in `%s` (decides which checks apply)" % row["encoded_in"]
        else:
            encoded = "not encoded: %s" % row["why_not"]
        if row["confidence"] != "verified":
            encoded += "; confidence: %s" % row["confidence"]
        lines.append("| `%s` | %s | %s | %s | %s |" % (
            row["id"], _cell(row["what"]),
            "`%s`" % row["vllm_0_8_5"] if row["vllm_0_8_5"] else "-",
            "`%s`" % row["vllm_0_19_1"] if row["vllm_0_19_1"] else "-",
            _cell(encoded)))
    return "\n".join(lines) + "\n"
