# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.deploy_gate module instead.
"""The gate's memory rule: the memory plan per GPU (docs/deploy_gate.md "Memory plan", vLLM's
own accounting): the usable memory after gpu_memory_utilization and vLLM's modelled non-KV
reserve (_vllm_memory.profile_reserve), the weights per GPU, the KV cache per token and whether
one max_model_len sequence fits. :func:`rule_memory_plan` is ``rule_x(facts) -> Findings``
(_gate_facts) and decides ``plan``; each part of the plan is its own small function.

Pure logic: no Ansible imports, no I/O.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate_facts import (
    GIB,
    MIB,
    behaviour_value,
    effective_dtype_bytes,
    enforce_eager,
    finding,
    findings,
    gib,
    quant_method,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._policy import (
    KV_CACHE_DTYPES,
    KV_CACHE_TOO_SMALL,
    is_ascii_digits,
    parse_version,
    resolve_quant,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._vllm_memory import profile_reserve

_PROFILE_MODEL_KEYS = ("hidden_size", "intermediate_size", "vocab_size", "num_hidden_layers", "num_attention_heads",
                       "num_key_value_heads", "head_dim")


def _maybe_int(value):
    """A positive integer (an int or a string of ASCII digits), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, str) and is_ascii_digits(value.strip()) and len(value.strip()) <= 19:
        return int(value.strip()) or None
    return None


def _parallel(facts):
    """(tensor_parallel_size, pipeline_parallel_size), 1 when not given."""
    return facts.args["tensor_parallel_size"] or 1, facts.args["pipeline_parallel_size"] or 1


def _max_len(facts):
    """vllm.max_model_len, else the model's max_position_embeddings (None when neither)."""
    return facts.args["max_model_len"] or facts.model["max_position_embeddings"]


def _release_engine(facts):
    """The engine the image's release runs on the lowest GPU (policy release_behaviour
    memory_profile engine): True for V1, False for V0, None when the GPU is unknown."""
    engine = behaviour_value(facts, "memory_profile").get("engine")
    if engine == "v1_from_8_0":
        return facts.lowest["cc"] >= (8, 0) if facts.lowest else None
    return {"v0": False, "v1": True}.get(engine)


def gate_profile_reserve(facts, memory_mib):
    """vLLM's own non-KV reserve (the profile run's activation peak and non-torch memory),
    modelled from the model's config and the arguments (_vllm_memory.profile_reserve) as the
    image's release runs it (policy release_behaviour memory_profile: the engine, the modelled
    line's profile run, V0's chunked-prefill batch)."""
    profile = behaviour_value(facts, "memory_profile")
    raw = facts.vllm_raw
    gpu = facts.lowest
    model = dict((k, facts.model[k]) for k in _PROFILE_MODEL_KEYS)
    model["dtype_bytes"] = effective_dtype_bytes(facts)
    chunked = raw.get("enable_chunked_prefill")
    tp, pp = _parallel(facts)
    args = {
        "max_model_len": _max_len(facts),
        "max_num_seqs": facts.args["max_num_seqs"],
        "max_num_batched_tokens": _maybe_int(raw.get("max_num_batched_tokens")),
        "enable_chunked_prefill": chunked if isinstance(chunked, bool) else None,
        "tensor_parallel_size": tp,
        "pipeline_parallel_size": pp,
        "enforce_eager": enforce_eager(facts),
        "compute_capability": gpu["cc"] if gpu else None,
        "gpu_memory_mib": memory_mib,
        "gpu_name": gpu["name"] if gpu else None,
        "quantization": quant_method(facts)[0],
        "vllm_use_v1": _release_engine(facts),
        "v0_chunked_batched_tokens": profile.get("v0_chunked_tokens"),
    }
    line = parse_version(profile["line"]) if profile.get("line") else facts.version
    return profile_reserve(model, args, line)


def _budget(facts):
    """The memory per GPU: {util, total, profile, reserve, reserve_source, usable, missing}
    (the smallest GPU; usable = total x gpu_memory_utilization - reserve)."""
    util = facts.args["gpu_memory_utilization"]
    if util is None:
        util = float(facts.policy.get("memory", {}).get("default_gpu_memory_utilization", 0.9))
    memories = [g["memory_mib"] for g in facts.known if g["memory_mib"]]
    total = min(memories) * MIB if memories else None
    profile = gate_profile_reserve(facts, min(memories) if memories else None)
    if facts.settings.get("reserve_mib") is not None:
        reserve = int(facts.settings["reserve_mib"]) * MIB
        reserve_source = "policy.reserve_mib"
    else:
        reserve = profile["bytes"]
        reserve_source = "modelled" if profile["complete"] else "modelled, incomplete (%s)" % ", ".join(
            profile["missing"])
    usable = max(0, int(total * util) - reserve) if total is not None else None
    return {"util": util, "total": total, "profile": profile, "reserve": reserve, "reserve_source": reserve_source,
            "usable": usable, "missing": ["gpus[].memory_total_mib"] if facts.gpus and not memories else []}


def _weights(facts):
    """The weights of all GPUs: (bytes or None, source, warnings, missing). model.weight_bytes
    (rescaled to the serving dtype for an unquantized checkpoint stored in another), else
    param_count x bytes per parameter (the method's estimate when quantized: WEIGHTS_ESTIMATED)."""
    method = quant_method(facts)[0]
    q_entry = resolve_quant(facts.policy, method)[1] if method else None
    dtype_bytes = effective_dtype_bytes(facts)
    model = facts.model
    if model["weight_bytes"] is not None:
        weights = model["weight_bytes"]
        disk = model["torch_dtype"]
        if method is None and disk in facts.policy["dtypes"]:
            disk_bytes = facts.policy["dtypes"][disk]["bytes"]
            if disk_bytes != dtype_bytes:
                return (weights * dtype_bytes // disk_bytes,
                        "weight_bytes (rescaled from %s to the serving dtype)" % disk, [], [])
        return weights, "weight_bytes", [], []
    if model["param_count"] is None:
        return None, None, [], ["model.weight_bytes or model.param_count"]
    per_param = dtype_bytes
    if method is not None:
        per_param = q_entry.get("bytes_per_param") if q_entry else None
    if not per_param:
        return None, None, [], ["model.weight_bytes (no bytes-per-param estimate for %s)" % method]
    weights = int(math.ceil(model["param_count"] * per_param))
    warnings = []
    if method is not None:
        warnings.append(finding("WEIGHTS_ESTIMATED",
                                "weight bytes estimated as param_count x %.4g B/param for %s (%s); pass "
                                "model.weight_bytes (model_facts) for an exact plan" % (per_param, method, gib(weights))))
    return weights, "param_count", warnings, []


def _kv_per_token(facts):
    """The KV cache per token per GPU: (KV dtype bytes, bytes per token or None, missing)."""
    tp, pp = _parallel(facts)
    model = facts.model
    layers = model["num_hidden_layers"]
    kv_heads = model["num_key_value_heads"] or model["num_attention_heads"]
    head_dim = model["head_dim"]
    if head_dim is None and model["hidden_size"] and model["num_attention_heads"]:
        head_dim = model["hidden_size"] // model["num_attention_heads"] or None
    kv = facts.args["kv_cache_dtype"]
    kv_bytes = KV_CACHE_DTYPES.get(facts.effective.get("kv_cache_dtype") if kv else "auto", {}).get("bytes") \
        if kv else None
    if kv_bytes is None:
        kv_bytes = effective_dtype_bytes(facts)
    if layers and kv_heads and head_dim:
        layers_per_gpu = -(-layers // pp)
        return kv_bytes, 2 * layers_per_gpu * max(1, kv_heads // tp) * head_dim * kv_bytes, []
    missing = [name for name, value in (("model.num_hidden_layers", layers), ("model.num_key_value_heads", kv_heads),
                                        ("model.head_dim", head_dim)) if not value]
    return kv_bytes, None, missing


def _weights_too_big(facts, budget, weights, per_gpu, offload):
    """INSUFFICIENT_VRAM for weights larger than the usable memory per GPU, with the ways out."""
    tp, pp = _parallel(facts)
    ranks = tp * pp
    usable = budget["usable"]
    fixes = []
    if usable > 0:
        gpus_needed = int(math.ceil(weights / max(1, usable + offload)))
        if gpus_needed > ranks:
            fixes.append("spread it over %d or more such GPUs (tensor_parallel_size)" % gpus_needed)
    if quant_method(facts)[0] is None and facts.model["param_count"]:
        gptq = facts.policy["quantization"].get("gptq", {}).get("bytes_per_param")
        if gptq:
            fixes.append("use a 4-bit GPTQ checkpoint (about %s per GPU)" % gib(facts.model["param_count"] * gptq / ranks))
    fixes.append("offload at least %d GiB per GPU to CPU memory (cpu_offload_gb, slow)"
                 % int(math.ceil((per_gpu - usable) / GIB + (offload / GIB) + 1)))
    fixes.append("raise gpu_memory_utilization")
    return finding("INSUFFICIENT_VRAM",
                   "the weights need %s per GPU (%s over %d GPU%s%s) but only %s per GPU is usable (%s): %s"
                   % (gib(per_gpu), gib(weights), ranks, "s" if ranks > 1 else "",
                      ", minus %s offloaded" % gib(offload) if offload else "", gib(usable),
                      _budget_text(budget), "; ".join(fixes)))


def _budget_text(budget):
    """'32.0 GiB x gpu_memory_utilization 0.92 - 4.6 GiB reserve'."""
    return "%s x gpu_memory_utilization %.2f - %s reserve" % (gib(budget["total"]), budget["util"],
                                                              gib(budget["reserve"]))


def _vllm_says(facts, budget, fit, max_len):
    """'; vLLM 0.6.3 (V0 engine, a profile run of 32768 tokens) stops at startup with "..."' (the
    engine's own error, policy KV_CACHE_TOO_SMALL), or '' when the engine is not known."""
    profile = budget["profile"]
    said = KV_CACHE_TOO_SMALL.get(profile.get("engine"))
    if said is None or budget["reserve_source"] == "policy.reserve_mib":
        return ""
    text = said["text"].format(max_len=max_len, tokens=fit["kv_cache_tokens"],
                               needed="%.2f" % (fit["sequence_kv_bytes_per_gpu"] / GIB),
                               available="%.2f" % (fit["kv_cache_bytes_per_gpu"] / GIB))
    run = ""
    if profile.get("profile_tokens"):
        run = ", a profile run of %d tokens%s" % (profile["profile_tokens"], " in one pass" if not profile.get(
            "chunked_prefill") else "")
    return "; %s (%s engine%s) stops at startup with '%s'" % (facts.vllm_label, profile["engine"].upper(), run, text)


def _sequence_too_long(facts, budget, fit, max_len):
    """INSUFFICIENT_VRAM for a KV cache of one max_model_len sequence larger than what is left,
    with the max_model_len that fits and what the release's engine says."""
    kv_tokens = fit["kv_cache_tokens"]
    suggest = (kv_tokens // 1024) * 1024 if kv_tokens >= 1024 else (kv_tokens // 16) * 16
    return finding("INSUFFICIENT_VRAM",
                   "the KV cache for one %d-token sequence needs %s per GPU but only %s is "
                   "left after %s of weights (usable %s per GPU = %s): lower max_model_len "
                   "to %d or less, raise gpu_memory_utilization, or add GPUs%s"
                   % (max_len, gib(fit["sequence_kv_bytes_per_gpu"]), gib(fit["kv_cache_bytes_per_gpu"]),
                      gib(fit["weights_bytes_per_gpu"]), gib(budget["usable"]), _budget_text(budget), suggest,
                      _vllm_says(facts, budget, fit, max_len)))


def _fit(facts, budget, weights, per_gpu, offload, per_token):
    """What fits with the weights in place: ({kv_cache_bytes_per_gpu, kv_cache_tokens,
    sequence_kv_bytes_per_gpu, fits_one_sequence, max_concurrent_full_sequences,
    weights_bytes_per_gpu}, INSUFFICIENT_VRAM reasons)."""
    fit = {"kv_cache_bytes_per_gpu": None, "kv_cache_tokens": None, "sequence_kv_bytes_per_gpu": None,
           "fits_one_sequence": None, "max_concurrent_full_sequences": None, "weights_bytes_per_gpu": per_gpu}
    usable = budget["usable"]
    if usable is None or per_gpu is None:
        return fit, []
    reasons = []
    fit["kv_cache_bytes_per_gpu"] = kv_budget = max(0, usable - per_gpu)
    if per_gpu > usable:
        reasons.append(_weights_too_big(facts, budget, weights, per_gpu, offload))
        fit.update(fits_one_sequence=False, max_concurrent_full_sequences=0)
    max_len = _max_len(facts)
    if per_token:
        fit["kv_cache_tokens"] = kv_budget // per_token
        if max_len:
            fit["sequence_kv_bytes_per_gpu"] = seq_bytes = per_token * max_len
            if fit["fits_one_sequence"] is None:
                fit.update(fits_one_sequence=seq_bytes <= kv_budget, max_concurrent_full_sequences=kv_budget // seq_bytes)
                if not fit["fits_one_sequence"]:
                    reasons.append(_sequence_too_long(facts, budget, fit, max_len))
    return fit, reasons


def summary(total, usable, per_gpu, per_token, max_len, fits, concurrent):
    """The memory plan in one line ('32.0 GiB per GPU, 24.8 GiB usable; weights ...')."""
    parts = []
    if total is not None:
        parts.append("%s per GPU, %s usable" % (gib(total), gib(usable)))
    if per_gpu is not None:
        parts.append("weights %s per GPU" % gib(per_gpu))
    if per_token is not None:
        parts.append("KV %d KiB per token per GPU" % int(round(per_token / 1024.0)))
    if fits is not None and max_len:
        if fits:
            parts.append("%d full %d-token sequence%s fit" % (concurrent, max_len, "" if concurrent == 1 else "s"))
        else:
            parts.append("one %d-token sequence does not fit" % max_len)
    return "; ".join(parts) if parts else "not enough information for a memory plan"


def _reserve_model(profile):
    """The plan's reserve_model: the modelled reserve's parts and how it was modelled."""
    keys = ("bytes", "parts", "profile_tokens", "profile_seqs", "engine", "chunked_prefill", "complete", "missing",
            "formula")
    out = dict((k, profile[k]) for k in keys)
    out["outside_budget"] = profile.get("outside_budget")
    return out


def rule_memory_plan(facts):
    """INSUFFICIENT_VRAM, WEIGHTS_ESTIMATED, MEMORY_PLAN_INCOMPLETE; decides ``plan`` (the memory
    plan; reads the effective dtype and KV cache dtype after rule_dtype)."""
    tp, pp = _parallel(facts)
    budget = _budget(facts)
    weights, source, warnings, weight_missing = _weights(facts)
    offload = int((facts.args["cpu_offload_gb"] or 0) * GIB)
    per_gpu = max(0, int(math.ceil(weights / (tp * pp))) - offload) if weights is not None else None
    kv_bytes, per_token, kv_missing = _kv_per_token(facts)
    max_len = _max_len(facts)
    missing = budget["missing"] + weight_missing + kv_missing
    if max_len is None:
        missing.append("vllm.max_model_len or model.max_position_embeddings")
    fit, reasons = _fit(facts, budget, weights, per_gpu, offload, per_token)
    if missing and (facts.gpus or facts.model["weight_bytes"] is not None):
        warnings.append(finding("MEMORY_PLAN_INCOMPLETE",
                                "the memory plan is incomplete (missing %s); the VRAM check covered only what is known: "
                                "run model_facts on the model directory or fill these in" % ", ".join(missing)))
    plan = {
        "gpus_used": tp * pp,
        "tensor_parallel_size": tp,
        "pipeline_parallel_size": pp,
        "gpu_memory_total_bytes": budget["total"],
        "gpu_memory_utilization": budget["util"],
        "reserve_bytes": budget["reserve"],
        "reserve_source": budget["reserve_source"],
        "reserve_model": _reserve_model(budget["profile"]),
        "usable_bytes_per_gpu": budget["usable"],
        "weights_bytes_total": weights,
        "weights_source": source,
        "cpu_offload_bytes_per_gpu": offload,
        "weights_bytes_per_gpu": per_gpu,
        "kv_cache_dtype_bytes": kv_bytes,
        "kv_bytes_per_token_per_gpu": per_token,
        "kv_cache_bytes_per_gpu": fit["kv_cache_bytes_per_gpu"],
        "kv_cache_tokens": fit["kv_cache_tokens"],
        "max_model_len": max_len,
        "sequence_kv_bytes_per_gpu": fit["sequence_kv_bytes_per_gpu"],
        "fits_one_sequence": fit["fits_one_sequence"],
        "max_concurrent_full_sequences": fit["max_concurrent_full_sequences"],
        "max_num_seqs": facts.args["max_num_seqs"],
        "summary": summary(budget["total"], budget["usable"], per_gpu, per_token, max_len, fit["fits_one_sequence"],
                           fit["max_concurrent_full_sequences"]),
    }
    return findings(reasons, warnings, plan=plan)
