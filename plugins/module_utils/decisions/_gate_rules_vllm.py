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

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate_facts import (
    behaviour_value,
    enforce_eager,
    finding,
    findings,
    gpu_label,
    quant_method,
    served_dtype,
)
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
    resolve_auto_dtype,
    resolve_quant,
    supported_dtypes,
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


def _model_type(facts):
    """config.json's model_type as vLLM compares it, or None."""
    model_type = facts.model_raw.get("model_type")
    return model_type.strip() if isinstance(model_type, str) and model_type.strip() else None


def _auto_fix_warning(facts, gpu, what, target, rule, model_type):
    """DTYPE_AUTOFIXED for a dtype the release would refuse on ``gpu`` (no bfloat16)."""
    why = ""
    if target != "float16" and model_type in rule.get("float16_refused_model_types", []):
        why = " (%s refuses float16 for %s: numerical instability)" % (facts.vllm_label, model_type)
    return finding("DTYPE_AUTOFIXED", "%s has no bfloat16; %s was changed to %s (--dtype %s)%s"
                   % (gpu_label(gpu), what, target, target, why))


def _serving_dtype(facts, gpu, auto_fix):
    """The served dtype on ``gpu`` by the release's dtype_auto rule (policy release_behaviour):
    (reasons, warnings, fixes, final dtype or None, has bfloat16). Where the release would fail
    (bfloat16 on a GPU without it: asked for, or dtype auto of a bfloat16 checkpoint in a release
    that keeps the checkpoint's dtype) auto_fix writes the dtype the release falls back to
    (float16, or float32 for a model it refuses float16 for); where the release resolves auto by
    itself to another dtype than the checkpoint's on such a GPU, auto_fix pins what it picks."""
    dtypes = facts.policy["dtypes"]
    rule = behaviour_value(facts, "dtype_auto") or {"rule": "checkpoint"}
    platform = rule.get("rule") == "platform"
    model_type = _model_type(facts)
    requested = facts.args["dtype"] or "auto"
    name = DTYPE_ALIASES.get(requested, requested)
    torch_dtype = facts.model["torch_dtype"] if facts.model["torch_dtype"] in dtypes else None
    if name == "auto":
        resolved, how = resolve_auto_dtype(rule, model_type, torch_dtype, gpu["cc"], dtypes)
    else:
        resolved, how = name, None
    fallback = (resolve_auto_dtype(rule, model_type, "float32", gpu["cc"], dtypes)[0] if platform else None) or "float16"
    has_bf16 = "bfloat16" in supported_dtypes(gpu["cc"], dtypes)
    reasons, warnings, fixes = [], [], {}
    if not has_bf16 and (resolved == "bfloat16" or (name == "auto" and resolved is None)):
        what = "dtype %s" % requested if name != "auto" else (
            "dtype auto (the checkpoint is bfloat16)" if resolved == "bfloat16"
            else "dtype auto (checkpoint dtype unknown)")
        if auto_fix:
            fixes["dtype"] = fallback
            warnings.append(_auto_fix_warning(facts, gpu, what, fixes["dtype"], rule, model_type))
        elif resolved == "bfloat16":
            reasons.append(finding("DTYPE_UNSUPPORTED", "%s has no bfloat16; use --dtype %s (vllm.dtype: %s)"
                                   % (gpu_label(gpu), fallback, fallback)))
        else:
            warnings.append(finding(
                "DTYPE_AUTO_UNRESOLVED",
                "%s has no bfloat16 and the checkpoint dtype is unknown: if it is bfloat16, older vLLM "
                "releases refuse to start; set vllm.dtype to float16" % gpu_label(gpu)))
    elif (platform and name == "auto" and auto_fix and not has_bf16 and resolved and resolved != torch_dtype
          and not (torch_dtype == "float32" and resolved == "float16")):
        fixes["dtype"] = resolved
        warnings.append(finding(
            "DTYPE_AUTOFIXED", "%s has no bfloat16; dtype auto (%s) was changed to %s (--dtype %s), the dtype %s "
                               "itself resolves auto to on this GPU: %s" % (
                                   gpu_label(gpu), "the checkpoint is %s" % torch_dtype if torch_dtype
                                   else "checkpoint dtype unknown", resolved, resolved, facts.vllm_label, how)))
    final = fixes.get("dtype") or resolved
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


def rule_model_files(facts):
    """MODEL_INCOMPLETE: model_facts could not read the model directory (model.unreadable, its message
    naming the file: a shard the index names that is missing, a malformed header or config)."""
    why = facts.model.get("unreadable")
    if not why:
        return findings()
    return findings(reasons=[finding(
        "MODEL_INCOMPLETE",
        "the model directory cannot be served as it is: %s. Copy the model again (every file its "
        "model.safetensors.index.json names), then run the preflight again" % why.rstrip("."))])


def rule_dtype(facts):
    """DTYPE_UNSUPPORTED, KV_CACHE_DTYPE_UNSUPPORTED, DTYPE_AUTOFIXED, DTYPE_AUTO_UNRESOLVED,
    KV_CACHE_DTYPE_UNVERIFIED on the lowest GPU, by the release's dtype auto rule (policy
    release_behaviour dtype_auto). Decides ``served_dtype`` (the dtype vLLM serves in, when known)
    and, with policy auto_fix (default on), ``effective`` (dtype the release's fallback,
    kv_cache_dtype auto) instead of refusing."""
    gpu = facts.lowest
    if gpu is None:
        return findings()
    auto_fix = facts.settings.get("auto_fix", True)
    reasons, warnings, fixes, final, has_bf16 = _serving_dtype(facts, gpu, auto_fix)
    kv_reasons, kv_warnings, kv_fixes = _kv_cache_dtype(facts, gpu, auto_fix, final, has_bf16)
    fixes.update(kv_fixes)
    decided = {"served_dtype": final} if final else {}
    if fixes:
        decided["effective"] = dict(facts.effective, **fixes)
    return findings(reasons + kv_reasons, warnings + kv_warnings, **decided)


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
    asked, read = facts.args["quantization_text"], facts.model["quant_method_text"]
    words = ("vLLM refuses that at startup ('Quantization method specified in the model config (%s) does not "
             "match the quantization method specified in the `quantization` argument (%s)', "
             "vllm@0.8.5:vllm/config.py:815-820)" % (read, asked))
    requested_key = resolve_quant(facts.policy, requested)[0]
    family, conv = _marlin_family(facts)
    if family and requested_key in conv["user_values"]:
        # vLLM takes the Marlin method only when the checkpoint converts to it (the override). A
        # compute capability below it is QUANTIZATION_UNSUPPORTED_ON_ARCH's; a key the model input
        # does not carry is not known to block it.
        blocker, kind = _marlin_blocker(facts, family, conv)
        if kind != "checkpoint":
            return findings()
        return findings([finding(
            "QUANTIZATION_MISMATCH",
            "vllm.quantization %s asks for %s, but %s converts this %s checkpoint to it only when it can (%s), "
            "so the method stays %s and %s: drop vllm.quantization, or set it to %s"
            % (asked, conv["to"], facts.vllm_label, family.upper(), blocker, read, words, read))])
    if _quant_family(requested_key) == _quant_family(resolve_quant(facts.policy, declared)[0]):
        return findings()
    return findings([finding(
        "QUANTIZATION_MISMATCH",
        "vllm.quantization %s differs from the checkpoint's quant_method %s, and %s: drop vllm.quantization (vLLM "
        "reads the checkpoint's) or set it to %s" % (asked, read, words, read))])


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


def _plain_int(value):
    """An int that is no bool, else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _marlin_blocker(facts, family, conv):
    """Why the release does not serve this GPTQ/AWQ checkpoint with its Marlin method on the lowest
    GPU: (None, None) when it does, else (the reason in words, its kind): "cc" (the GPU is below
    the Marlin method's minimum), "checkpoint" (the quantization config rules it out, or leaves out
    a key vLLM needs: model_facts reports such a key as null) or "unknown" (the model input does
    not carry the key at all)."""
    gpu = facts.lowest
    to_entry = resolve_quant(facts.policy, conv["to"])[1]
    need = value_for_version(to_entry.get("min_cc", {}), facts.version) if to_entry else None
    if gpu is None or need is None:
        return "the GPU or %s's minimum compute capability is unknown" % conv["to"], "unknown"
    if gpu["cc"] < need:
        return "%s needs compute capability %s in %s" % (conv["to"], format_cc(need), facts.vllm_label), "cc"
    raw = facts.model_raw

    def missing(field, label):
        if field not in raw:
            return "the model input does not give its %s (model_facts %s)" % (label, field), "unknown"
        return "its quantization_config declares no %s" % label, "checkpoint"

    for field, label, values in (("quant_bits", "bits", conv["bits"]),
                                 ("quant_group_size", "group_size", conv["group_sizes"])):
        value = _plain_int(raw.get(field))
        if value is None:
            return missing(field, label)
        if value not in values:
            return "its %s is %d, not %s" % (label, value, " or ".join(str(v) for v in values)), "checkpoint"
    for key, want in sorted(conv.get("require", {}).items()):
        value = facts.model["quant_%s" % key]
        if value is None:
            return missing("quant_%s" % key, key)
        if value is not want:
            return "its quantization_config has %s %s (%s needs %s)" % (
                key, str(value).lower(), conv["to"], str(want).lower()), "checkpoint"
    for key in conv.get("declared", []):
        if facts.model["quant_%s" % key] is None:
            return missing("quant_%s" % key, key)
    return None, None


def _marlin_family(facts):
    """(family, conversion) when the checkpoint is GPTQ or AWQ and the release converts such
    checkpoints (policy release_behaviour quant_marlin), else (None, None)."""
    declared = resolve_quant(facts.policy, facts.model["quant_method"])[0] if facts.model["quant_method"] else None
    conv = behaviour_value(facts, "quant_marlin").get(declared) if declared else None
    return (declared, conv) if conv else (None, None)


def served_quant(facts):
    """What the release serves the checkpoint with: (policy key, entry, as written, note) or None.

    A GPTQ / AWQ checkpoint goes to gptq_marlin / awq_marlin when vllm.quantization is unset or
    names the Marlin method (GPTQMarlinConfig / AWQMarlinConfig.override_quantization_method) and
    _marlin_blocker finds nothing; ``note`` then says so. Otherwise the method as requested or
    declared (_quantization), with ``note`` why Marlin was not used (None when it does not apply).
    """
    quant = _quantization(facts)
    if quant is None:
        return None
    family, conv = _marlin_family(facts)
    user = facts.args["quantization"]
    if family is None or (user is not None and user not in [family] + list(conv["user_values"])):
        return quant + (None,)
    if user == family:
        return quant + ("vllm.quantization %s forces the %s kernels; without it %s would be considered"
                        % (facts.args["quantization_text"], family, conv["to"]),)
    blocker = _marlin_blocker(facts, family, conv)[0]
    if blocker:
        return quant + ("%s does not serve it with %s: %s" % (facts.vllm_label, conv["to"], blocker),)
    key, entry = resolve_quant(facts.policy, conv["to"])
    return key, entry, conv["to"], ("%s serves this %s checkpoint with %s (the checkpoint meets its conditions on "
                                    "%s)" % (facts.vllm_label, family.upper(), conv["to"], gpu_label(facts.lowest)))


def rule_quantization_act_dtype(facts):
    """QUANTIZATION_DTYPE_UNSUPPORTED: the method the release serves with (served_quant: GPTQ/AWQ
    on Marlin where the release converts them) does not run with the served dtype (policy
    quantization[*].act_dtypes, get_supported_act_dtypes; after rule_dtype: served_dtype)."""
    quant = served_quant(facts)
    if quant is None or quant[1] is None or not quant[1].get("act_dtypes"):
        return findings()
    key, entry, text, note = quant
    allowed = _value_since(entry["act_dtypes"], facts.version)
    if allowed is None:
        return findings()
    dtype = served_dtype(facts)
    if dtype is None or dtype in allowed:
        return findings()
    way_out = "set vllm.dtype to %s" % allowed[0]
    family, conv = _marlin_family(facts)
    marlin = resolve_quant(facts.policy, conv["to"])[1] if conv else None
    if note and marlin and dtype in (_value_since(marlin.get("act_dtypes") or {}, facts.version) or []):
        # The Marlin method would take this dtype: say why it does not serve the checkpoint.
        way_out += " (%s)" % note
    return findings([finding(
        "QUANTIZATION_DTYPE_UNSUPPORTED",
        "%s (%s) runs only with dtype %s in %s and the deployment serves %s: vLLM stops at startup "
        "('%s is not supported for quantization method %s'): %s"
        % (entry.get("label", key), text, " or ".join(allowed), facts.vllm_label, dtype,
           "torch." + dtype, text, way_out))])


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
