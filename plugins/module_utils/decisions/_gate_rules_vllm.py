# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.deploy_gate module instead.
"""Gate rules about what vLLM does with the model on these GPUs: the serving and KV cache dtypes
(:func:`rule_dtype`, which auto-fixes the effective arguments), the quantization method (one rule
per check: the request against the checkpoint, the method's minimum compute capability, the
compressed-tensors scheme, the activation dtype, the GPTQ group size, the image's methods) and
vLLM's own startup validation (:func:`rule_startup`, _vllm_startup.startup_checks). Every rule
takes the one frozen GateFacts and returns Findings, without Ansible or I/O; its row in
_gate_rules.RULES names the codes it emits and where its knowledge comes from.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate_facts import enforce_eager, finding, findings, gpu_label, quant_method
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate_inputs import GateInputError
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._vllm_startup import StartupInputError, startup_checks
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._policy import (
    DTYPE_ALIASES,
    FP8_KV_CACHE_VERIFIED_MIN_CC,
    canonical_quant,
    compare_versions,
    ct_scheme_need,
    format_cc,
    kv_cache_dtypes_for,
    parse_cc,
    parse_version,
    resolve_quant,
    value_for_version,
)

# Hints appended to QUANTIZATION_UNSUPPORTED_ON_ARCH for methods with a known way out.
_QUANT_HINTS = {
    "modelopt_fp4": "or serve an FP16 copy of the NVFP4 checkpoint without quantization (about 4x the weight "
                    "memory): the plan does that by itself where it fits (request.serving_path auto; "
                    "labfleet.vllm.nvfp4_dequantize converts it)",
}
_CT_KEYS = ("compressed_tensors",)


# ---------------------------------------------------------------------------------------------
# dtype
# ---------------------------------------------------------------------------------------------


def _serving_dtype(facts, gpu, auto_fix):
    """The served dtype on ``gpu``: (reasons, warnings, fixes, final dtype, has bfloat16). dtype
    auto/bfloat16 below bfloat16's compute capability becomes float16 when auto_fix is on."""
    dtypes = facts.policy["dtypes"]
    requested = facts.args["dtype"] or "auto"
    name = DTYPE_ALIASES.get(requested, requested)
    torch_dtype = facts.model["torch_dtype"]
    bf16_need = parse_cc(dtypes.get("bfloat16", {}).get("min_cc", "8.0"))
    if name == "auto":
        if torch_dtype in ("float32",):
            resolved = "float16"
        elif torch_dtype in dtypes:
            resolved = torch_dtype
        else:
            resolved = None
    else:
        resolved = name
    has_bf16 = not gpu["cc"] < bf16_need
    reasons, warnings, fixes = [], [], {}
    if not has_bf16 and (resolved == "bfloat16" or (name == "auto" and resolved is None)):
        what = "dtype %s" % requested if name != "auto" else (
            "dtype auto (the checkpoint is bfloat16)" if resolved == "bfloat16"
            else "dtype auto (checkpoint dtype unknown)")
        if auto_fix:
            fixes["dtype"] = "float16"
            warnings.append(finding("DTYPE_AUTOFIXED", "%s has no bfloat16; %s was changed to float16 (--dtype float16)"
                                    % (gpu_label(gpu), what)))
        elif resolved == "bfloat16":
            reasons.append(finding("DTYPE_UNSUPPORTED",
                                   "%s has no bfloat16; use --dtype float16 (vllm.dtype: float16)" % gpu_label(gpu)))
        else:
            warnings.append(finding(
                "DTYPE_AUTO_UNRESOLVED",
                "%s has no bfloat16 and the checkpoint dtype is unknown: if it is bfloat16, older vLLM "
                "releases refuse to start; set vllm.dtype to float16" % gpu_label(gpu)))
    effective = fixes.get("dtype", facts.effective.get("dtype"))
    final = effective if effective == "float16" else resolved
    if final in dtypes and final != "bfloat16" and gpu["cc"] < parse_cc(dtypes[final]["min_cc"]):
        reasons.append(finding("DTYPE_UNSUPPORTED", "%s does not support %s (needs compute capability %s): use --dtype "
                                                    "float32" % (gpu_label(gpu), final, dtypes[final]["min_cc"])))
    return reasons, warnings, fixes, final, has_bf16


def _kv_cache_dtype(facts, gpu, auto_fix, final, has_bf16):
    """The KV cache dtype on ``gpu`` with the served dtype ``final``: (reasons, warnings, fixes).
    bfloat16 below bfloat16's compute capability, and float16/bfloat16 where the release does not
    take them but the KV cache follows the served dtype anyway, become auto when auto_fix is on."""
    kv = facts.args["kv_cache_dtype"]
    accepted, release = kv_cache_dtypes_for(facts.policy.get("kv_cache_dtypes_by_release") or {}, facts.version)
    served = final if final in ("float16", "bfloat16", "float32") else None
    reasons, warnings, fixes = [], [], {}
    if kv == "bfloat16" and not has_bf16:
        if auto_fix:
            fixes["kv_cache_dtype"] = "auto"
            warnings.append(finding("DTYPE_AUTOFIXED", "%s has no bfloat16; kv_cache_dtype bfloat16 was changed to auto "
                                                       "(the KV cache follows the served dtype%s)"
                                    % (gpu_label(gpu), ", float16" if served in (None, "float16") else ", " + served)))
            kv = None
        else:
            reasons.append(finding("DTYPE_UNSUPPORTED", "%s has no bfloat16; set vllm.kv_cache_dtype to auto (the KV "
                                                        "cache then follows the served dtype)" % gpu_label(gpu)))
    if kv and accepted is not None and kv not in accepted:
        words = ("--kv-cache-dtype %s is not a value %s accepts (it takes %s: vllm@%s CacheDType), so its "
                 "argument parser stops before the engine starts" % (kv, facts.vllm_label, ", ".join(accepted), release))
        if auto_fix and kv in ("float16", "bfloat16") and (served is None or served == kv):
            fixes["kv_cache_dtype"] = "auto"
            warnings.append(finding("DTYPE_AUTOFIXED", "%s; kv_cache_dtype %s was changed to auto, which keeps the KV "
                                                       "cache in the served dtype %s" % (words, kv, served or kv)))
        else:
            reasons.append(finding("KV_CACHE_DTYPE_UNSUPPORTED", "%s: set vllm.kv_cache_dtype to auto (the served dtype) "
                                                                 "or one of those values" % words))
    if kv and kv.startswith("fp8") and gpu["cc"] < parse_cc(FP8_KV_CACHE_VERIFIED_MIN_CC):
        warnings.append(finding("KV_CACHE_DTYPE_UNVERIFIED",
                                "an FP8 KV cache (kv_cache_dtype %s) on %s is not verified to work; use auto if vLLM "
                                "fails to start" % (kv, gpu_label(gpu))))
    return reasons, warnings, fixes


def rule_dtype(facts):
    """DTYPE_UNSUPPORTED, KV_CACHE_DTYPE_UNSUPPORTED, DTYPE_AUTOFIXED, DTYPE_AUTO_UNRESOLVED,
    KV_CACHE_DTYPE_UNVERIFIED on the lowest GPU. With policy auto_fix (default on) it decides
    ``effective`` (dtype float16, kv_cache_dtype auto) instead of refusing."""
    gpu = facts.lowest
    if gpu is None:
        return findings()
    auto_fix = facts.settings.get("auto_fix", True)
    reasons, warnings, fixes, final, has_bf16 = _serving_dtype(facts, gpu, auto_fix)
    kv_reasons, kv_warnings, kv_fixes = _kv_cache_dtype(facts, gpu, auto_fix, final, has_bf16)
    fixes.update(kv_fixes)
    if not fixes:
        return findings(reasons + kv_reasons, warnings + kv_warnings)
    return findings(reasons + kv_reasons, warnings + kv_warnings, effective=dict(facts.effective, **fixes))


# ---------------------------------------------------------------------------------------------
# Quantization
# ---------------------------------------------------------------------------------------------


def _quantization(facts):
    """(policy key, policy entry, method as written) of the deployment's quantization; None for none."""
    method, text = quant_method(facts)
    if method is None:
        return None
    key, entry = resolve_quant(facts.policy, method)
    return key, entry, text


def _quant_family(key):
    """gptq for gptq/gptq_marlin/marlin, awq for awq/awq_marlin; other keys as they are."""
    if key is None:
        return None
    if key == "marlin":
        return "gptq"
    return key[:-len("_marlin")] if key.endswith("_marlin") else key


def rule_quantization_mismatch(facts):
    """QUANTIZATION_MISMATCH: vllm.quantization of another family than the checkpoint's quant_method."""
    requested = facts.args["quantization"]
    declared = facts.model["quant_method"]
    if not requested or not declared:
        return findings()
    if _quant_family(resolve_quant(facts.policy, requested)[0]) == _quant_family(resolve_quant(facts.policy, declared)[0]):
        return findings()
    asked, read = facts.args["quantization_text"], facts.model["quant_method_text"]
    return findings([finding(
        "QUANTIZATION_MISMATCH",
        "vllm.quantization %s differs from the checkpoint's quant_method %s, and vLLM refuses "
        "that at startup ('Quantization method specified in the model config (%s) does not "
        "match the quantization method specified in the `quantization` argument (%s)', "
        "vllm@0.8.5:vllm/config.py:815-820): drop vllm.quantization (vLLM reads the "
        "checkpoint's) or set it to %s" % (asked, read, read, asked, read))])


def _usable_methods(policy, cc, version):
    """The policy's methods (compressed-tensors aside) whose minimum compute capability ``cc`` meets."""
    names = []
    for key, entry in sorted(policy["quantization"].items()):
        if key in _CT_KEYS:
            continue
        need = value_for_version(entry.get("min_cc", {}), version)
        if need is not None and need <= cc:
            names.append(key)
    return names


def _method_below_need(facts):
    """(key, entry, text, need) when the method's minimum compute capability in this vLLM is above
    the lowest GPU's, else None."""
    quant = _quantization(facts)
    gpu = facts.lowest
    if quant is None or quant[1] is None or gpu is None:
        return None
    need = value_for_version(quant[1].get("min_cc", {}), facts.version)
    if need is not None and gpu["cc"] < need:
        return quant + (need,)
    return None


def rule_quantization_known(facts):
    """QUANTIZATION_UNKNOWN_TO_POLICY: the method is not in the policy (its needs go unchecked)."""
    quant = _quantization(facts)
    if quant is None or quant[1] is not None:
        return findings()
    return findings(warnings=[finding(
        "QUANTIZATION_UNKNOWN_TO_POLICY",
        "quantization method %s is not in the policy, so its compute capability needs were not "
        "checked (add it under policy.quantization)" % quant[2])])


def rule_quantization_arch(facts):
    """QUANTIZATION_UNSUPPORTED_ON_ARCH: the method needs a higher compute capability in this
    vLLM than the lowest GPU's (policy quantization[*].min_cc per release)."""
    below = _method_below_need(facts)
    if below is None:
        return findings()
    key, entry, text, need = below
    gpu = facts.lowest
    usable = _usable_methods(facts.policy, gpu["cc"], facts.version)
    alternatives = "use %s, or an unquantized float16 model" % (", ".join(usable) if usable else "no quantization")
    if key in ("gptq_marlin", "marlin"):
        alternatives = "use quantization gptq (exllama kernels) instead, or " + alternatives[4:]
    elif key == "awq_marlin":
        alternatives = "the AWQ GEMM path needs 7.5 too; " + alternatives
    hint = _QUANT_HINTS.get(key)
    if hint:
        alternatives += ", " + hint
    return findings([finding(
        "QUANTIZATION_UNSUPPORTED_ON_ARCH",
        "%s (%s) needs compute capability %s in %s and %s is below it: on compute "
        "capability %s %s" % (entry.get("label", key), text, format_cc(need), facts.vllm_label,
                              gpu_label(gpu), format_cc(gpu["cc"]), alternatives))])


def _known_scheme(facts, gpu, scheme, schemes, where, way_out):
    """A known compressed-tensors scheme on ``gpu``: (reasons, warnings)."""
    entry = schemes[scheme]
    kind, need = ct_scheme_need(entry, facts.version)
    if kind == "cc" and entry.get("fallback") and gpu["cc"] < need:
        fallback = schemes.get(entry["fallback"], {})
        kind, need = ct_scheme_need(fallback, facts.version)
        below = format_cc(ct_scheme_need(entry, facts.version)[1])
        label = "%s (falls back to %s below %s)" % (entry.get("label", scheme), fallback.get("label"), below)
    else:
        label = entry.get("label", scheme)
    if kind == "absent":
        return [finding("QUANTIZATION_UNKNOWN_TO_IMAGE",
                        "the checkpoint is compressed-tensors %s and %s has no such scheme ('No "
                        "compressed-tensors compatible scheme was found' at model load): use an image "
                        "whose vLLM has it, or %s" % (label, facts.vllm_label, way_out))], []
    if kind == "cc" and gpu["cc"] < need:
        if scheme == "nvfp4":
            way_out = ("dequantize the NVFP4 checkpoint to float16 and serve that without "
                       "quantization, or " + way_out)
        return [finding("QUANTIZATION_UNSUPPORTED_ON_ARCH",
                        "the checkpoint is compressed-tensors %s, which needs compute capability %s in %s, "
                        "and %s is below it: vLLM stops at model load ('The quantization method "
                        "compressed-tensors is not supported for the current GPU. Min capability: %d'): %s"
                        % (label, format_cc(need), facts.vllm_label, where, need[0] * 10 + need[1], way_out))], []
    if kind in ("unknown", "unchecked"):
        return [], [finding("QUANTIZATION_SCHEME_UNCHECKED",
                            "compressed-tensors %s: %s; check that %s runs it" % (
                                label, "its kernel is chosen at model load" if kind == "unchecked"
                                else "its minimum compute capability differs between vLLM releases and the "
                                     "image's vLLM version is unknown", where))]
    return [], []


def _unknown_scheme(facts, gpu, scheme, schemes, where, way_out):
    """A scheme not read, mixed or new: refused when every scheme of this release needs more than
    ``gpu`` has, else unchecked. (reasons, warnings)."""
    needs = []
    open_ended = False
    for name in sorted(schemes):
        kind, need = ct_scheme_need(schemes[name], facts.version)
        if kind == "cc":
            needs.append((need, name))
        elif kind in ("unchecked", "unknown"):
            open_ended = True
    what = "scheme %s" % scheme if scheme else "an unknown scheme"
    if needs and not open_ended and all(gpu["cc"] < n for n, _name in needs):
        return [finding("QUANTIZATION_UNSUPPORTED_ON_ARCH",
                        "the checkpoint is compressed-tensors (%s) and every compressed-tensors scheme of %s needs "
                        "compute capability %s or more (%s), above %s: %s"
                        % (what, facts.vllm_label, format_cc(min(n for n, _name in needs)),
                           ", ".join("%s %s" % (name, format_cc(n)) for n, name in needs), where, way_out))], []
    return [], [finding("QUANTIZATION_SCHEME_UNCHECKED",
                        "the checkpoint is compressed-tensors (%s): its scheme could not be judged for %s "
                        "(run model_facts on the model directory so the gate reads quantization_config)"
                        % (what, where))]


def rule_compressed_tensors_scheme(facts):
    """compressed-tensors: the scheme decides (CompressedTensorsConfig._check_scheme_supported raises
    at model load when the GPU is below the scheme's get_min_capability). QUANTIZATION_UNKNOWN_TO_IMAGE
    (the release has no such scheme), QUANTIZATION_UNSUPPORTED_ON_ARCH, QUANTIZATION_SCHEME_UNCHECKED.
    Judged only when the method's own minimum (rule_quantization_arch) passed."""
    quant = _quantization(facts)
    gpu = facts.lowest
    if quant is None or quant[1] is None or gpu is None or quant[0] not in _CT_KEYS or _method_below_need(facts):
        return findings()
    schemes = facts.policy.get("compressed_tensors_schemes", {})
    scheme = facts.model["quant_scheme"]
    where = "%s (compute capability %s)" % (gpu_label(gpu), format_cc(gpu["cc"]))
    way_out = ("serve a GPTQ checkpoint of the same model (exllama kernels run on 6.0+) or the "
               "unquantized float16 model")
    judge = _known_scheme if scheme in schemes else _unknown_scheme
    reasons, warnings = judge(facts, gpu, scheme, schemes, where, way_out)
    return findings(reasons, warnings)


def _value_since(table, version):
    """The value of the newest "since" key at or below ``version`` (the first key's value when the
    version is older or unknown)."""
    rows = sorted(((parse_version(k), k) for k in table if parse_version(k)), key=lambda r: r[0] + (0,) * 8)
    if not rows:
        return None
    chosen = rows[0][1]
    if version is not None:
        for parsed, key in rows:
            if compare_versions(version, parsed) >= 0:
                chosen = key
    return table[chosen]


def rule_quantization_act_dtype(facts):
    """QUANTIZATION_DTYPE_UNSUPPORTED: the method does not run with the served dtype (policy
    quantization[*].act_dtypes, get_supported_act_dtypes; after rule_dtype's auto-fix)."""
    quant = _quantization(facts)
    if quant is None or quant[1] is None or not quant[1].get("act_dtypes"):
        return findings()
    key, entry, text = quant
    allowed = _value_since(entry["act_dtypes"], facts.version)
    if allowed is None:
        return findings()
    dtype = facts.effective.get("dtype")
    dtype = dtype.strip().lower() if isinstance(dtype, str) else "auto"
    dtype = DTYPE_ALIASES.get(dtype, dtype)
    if dtype == "auto":
        torch_dtype = facts.model["torch_dtype"]
        if torch_dtype is None:
            return findings()
        dtype = "float16" if torch_dtype == "float32" else torch_dtype
    if dtype in allowed:
        return findings()
    return findings([finding(
        "QUANTIZATION_DTYPE_UNSUPPORTED",
        "%s (%s) runs only with dtype %s in %s and the deployment serves %s: vLLM stops at startup "
        "('%s is not supported for quantization method %s'): set vllm.dtype to %s"
        % (entry.get("label", key), text, " or ".join(allowed), facts.vllm_label, dtype,
           "torch." + dtype, text, allowed[0]))])


def rule_quant_group_size(facts):
    """QUANT_GROUP_SIZE_UNSUPPORTED: GPTQ's exllama kernels step through the rows in fixed blocks
    and change groups only at a block's start (policy group_size_multiple): any other group size
    serves wrong tokens."""
    quant = _quantization(facts)
    if quant is None or quant[1] is None:
        return findings()
    key, entry, text = quant
    multiple = entry.get("group_size_multiple")
    group = facts.model_raw.get("quant_group_size")
    if not multiple or isinstance(group, bool) or not isinstance(group, int) or group <= 0 or group % multiple == 0:
        return findings()
    return findings([finding(
        "QUANT_GROUP_SIZE_UNSUPPORTED",
        "%s, quantization %s, with group_size %d: the 4-bit kernels of %s move to the next group only every %d rows "
        "(csrc/quantization/gptq/q_gemm.cu), so rows of one group are scaled with another group's "
        "scale and zero: the server starts and answers wrong tokens, without an error; use a "
        "checkpoint quantized with a group_size that is a multiple of %d"
        % (entry.get("label", key), text, group, facts.vllm_label, multiple, multiple))])


def _quant_in_image(key, entry, image_methods):
    """Whether the image's vLLM lists the method (its policy key or an alias)."""
    names = set([key])
    if entry is not None:
        names.update(canonical_quant(a) for a in entry.get("aliases", []) or [])
    return bool(names & set(image_methods))


def rule_quantization_in_image(facts):
    """QUANTIZATION_UNKNOWN_TO_IMAGE: the image's vLLM does not list the method."""
    quant = _quantization(facts)
    methods = facts.image["quant_methods"]
    if quant is None or methods is None or _quant_in_image(quant[0], quant[1], methods):
        return findings()
    key, _entry, text = quant
    hint = ", or dequantize the checkpoint to float16 and drop quantization" if key == "modelopt_fp4" else ""
    return findings([finding(
        "QUANTIZATION_UNKNOWN_TO_IMAGE",
        "%s does not know quantization method %s ('Unknown quantization method'); it knows: %s: "
        "use an image whose vLLM has it%s"
        % (facts.vllm_label if facts.image["vllm_version_text"] else "the image's vLLM", text,
           ", ".join(methods) if methods else "none", hint))])


# ---------------------------------------------------------------------------------------------
# vLLM's startup validation
# ---------------------------------------------------------------------------------------------


def rule_startup(facts):
    """vLLM's startup validation for what the probes know (_vllm_startup.startup_checks): config
    divisibility by tensor parallelism, context length with rope scaling, scheduler limits, block
    and head sizes of the attention backend the GPU gets, per-release flags. Reads the effective
    arguments (after rule_dtype) and enforce_eager (_gate_facts.enforce_eager)."""
    args = dict(facts.effective)
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "max_model_len", "max_num_seqs",
                "gpu_memory_utilization", "cpu_offload_gb"):
        if facts.args.get(key) is not None:
            args[key] = facts.args[key]
    if not isinstance(args.get("enforce_eager"), bool):
        args["enforce_eager"] = enforce_eager(facts)
    args["quantization"] = facts.args["quantization_text"]
    gpus = [{"cc": g["cc"], "memory_mib": g["memory_mib"], "name": g["name"]} for g in facts.known]
    try:
        found = startup_checks(facts.model_raw, args, gpus, facts.version)
    except StartupInputError as exc:
        raise GateInputError(str(exc))
    return findings([finding(i["code"], i["message"]) for i in found if i["level"] == "reason"],
                    [finding(i["code"], i["message"]) for i in found if i["level"] != "reason"])
