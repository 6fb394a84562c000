# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.deploy_gate module instead.
"""The gate's inputs: every argument of _gate.evaluate() checked and normalised
(:func:`validate_inputs`), one function per input group (GPUs, driver, image, model, vLLM
arguments), and the coercions _plan uses for its request. Malformed input raises
:class:`GateInputError`, whose message names the field and what is expected.

Pure logic: no Ansible imports, no I/O.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import re

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gpu_input import gpu_compute_capability, gpu_entries
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._vllm_startup import expand_human_int
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._policy import (
    DTYPE_ALIASES,
    KV_CACHE_DTYPES,
    PolicyError,
    canonical_quant,
    coerce_bool,
    coerce_int,
    cuda_version_from_nvml,
    has_control_chars,
    is_ascii_digits,
    merge_policy,
    parse_arch,
    parse_driver_version,
    parse_require_cuda,
    parse_version,
    short_repr,
    type_name,
)

VLLM_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")

_MAX_INT = 2 ** 62


class GateInputError(ValueError):
    """Malformed gate input; the message names the field and what is expected."""


# ---------------------------------------------------------------------------------------------
# Input validation
# ---------------------------------------------------------------------------------------------


def _tname(value):
    """The type name of ``value`` for a message ("str", "list")."""
    return type_name(value)


def short_text(value):
    """``value`` for a message, shortened (_policy.short_repr)."""
    return short_repr(value)


def _to_int(value, where, minimum=0, maximum=_MAX_INT):
    """An integer in [minimum, maximum] or None (_policy.coerce_int), else GateInputError naming ``where``."""
    return coerce_int(value, where, minimum=minimum, maximum=maximum, error=GateInputError)


def _to_number(value, where, minimum=0.0, maximum=1e18, exclusive_min=False):
    """A finite float in the range (ASCII digits only in a string) or None, else GateInputError."""
    if value is None:
        return None
    result = None
    if isinstance(value, bool):
        result = None
    elif isinstance(value, (int, float)):
        result = float(value) if abs(value) < 1e300 else None
    elif isinstance(value, str) and re.match(r"^\s*(?:[0-9]{1,19}(?:\.[0-9]{0,19})?|\.[0-9]{1,19})\s*\Z", value,
                                             re.ASCII):
        result = float(value)
    if result is None or not math.isfinite(result):
        raise GateInputError("%s: expected a number, got %s" % (where, short_text(value)))
    too_low = result <= minimum if exclusive_min else result < minimum
    if too_low or result > maximum:
        raise GateInputError("%s: expected a number %s %g and <= %g, got %g"
                             % (where, ">" if exclusive_min else ">=", minimum, maximum, result))
    return result


def to_bool(value, where):
    """True, False or None (_policy.coerce_bool), else GateInputError naming ``where``."""
    return coerce_bool(value, where, error=GateInputError)


def to_str(value, where, allow_numbers=True):
    """A string or None; a number becomes its text when ``allow_numbers``; else GateInputError."""
    if value is None or isinstance(value, str):
        return value
    if allow_numbers and isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(value) if isinstance(value, float) else str(value)
    raise GateInputError("%s: expected a string, got %s" % (where, _tname(value)))


def to_mapping(value, where, expected):
    """A mapping with string keys ({} for None), else GateInputError naming ``where`` and ``expected``."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise GateInputError("%s: expected a mapping (%s), got %s" % (where, expected, _tname(value)))
    for key in value:
        if not isinstance(key, str):
            raise GateInputError("%s: keys must be strings, got %s" % (where, short_text(key)))
    return value


# Plain ints beyond this are no vLLM argument (its largest are byte counts far below 2**63).
_MAX_ARG_INT = 2 ** 63


def image_gate_view(image):
    """The gate's ``image`` input from what labfleet.vllm.vllm_image_facts returned (its ``image``):
    the ``gate`` part with the image's ``state``, ``reference``, ``digest``, ``env`` and
    ``profile_matched`` beside it (the plan's image step reads them). A mapping without ``gate`` is
    the gate's input already and is returned as it is; so is anything that is not a mapping (the
    gate reports it)."""
    if not isinstance(image, dict) or "gate" not in image:
        return image
    view = dict(to_mapping(image.get("gate"), "image.gate", "cuda_version, arch_list, vllm_version, ..."))
    view.update(state=image.get("state"), reference=image.get("reference"), digest=image.get("digest"),
                profile_matched=image.get("profile_matched", False), env=image.get("env") or {})
    return view


def check_plain_value(value, where, depth=0):
    """Raise GateInputError unless ``value`` (a value passed through to effective_vllm, an argv or a
    unit; lists and mappings are walked) is free of control characters (newline, carriage return,
    NUL, any C0/C1 character or DEL) in its strings and mapping keys, of NaN and infinities, and of
    integers beyond 2**63. The message names ``where`` (``vllm.max_model_len``)."""
    if depth > 32:
        raise GateInputError("%s: nested more than 32 levels deep; expected a scalar, list or mapping" % where)
    if isinstance(value, str):
        if has_control_chars(value):
            raise GateInputError("%s: expected a one-line value without control characters (newline, carriage "
                                 "return, NUL, tab ...), got %s" % (where, short_text(value)))
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise GateInputError("%s: expected a finite number, got %s" % (where, short_text(value)))
    elif isinstance(value, int) and not isinstance(value, bool):
        if abs(value) >= _MAX_ARG_INT:
            raise GateInputError("%s: expected an integer below 2**63, got one of %d bits"
                                 % (where, value.bit_length()))
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and has_control_chars(key):
                raise GateInputError("%s: expected keys without control characters, got %s" % (where, short_text(key)))
            check_plain_value(item, "%s.%s" % (where, key), depth + 1)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            check_plain_value(item, "%s[%d]" % (where, index), depth + 1)
    return value


def _to_str_list(value, where, what):
    """A list of strings; a single string is split on whitespace, ';' and ','."""
    if value is None:
        return None
    if isinstance(value, str):
        return [part for part in re.split(r"[\s;,]+", value) if part]
    if not isinstance(value, (list, tuple)):
        raise GateInputError("%s: expected a list of %s, got %s" % (where, what, _tname(value)))
    out = []
    for index, item in enumerate(value):
        item = to_str(item, "%s[%d]" % (where, index))
        if item is None:
            raise GateInputError("%s[%d]: expected %s, got null" % (where, index, what))
        out.append(item)
    return out


def _human_int(value, where):
    """max_model_len: an integer or vLLM's human-readable form ("32k" = 32000, "32K" = 32768)."""
    return _to_int(expand_human_int(value), where, minimum=1, maximum=2 ** 40)


def parse_arch_entry(text, where):
    """Torch-style arch entry -> list of (cc, kind, exact). kind: 'sass' or 'ptx' (read by
    _policy.parse_arch)."""
    parsed = parse_arch(text)
    if parsed is None:
        raise GateInputError("%s: cannot read arch entry %r; expected forms like '7.0', '9.0+PTX', "
                             "'sm_70' or 'compute_70'" % (where, text))
    major, minor, suffix, sass, ptx = parsed
    exact = suffix == "a"
    entries = [((major, minor), "sass", exact)] if sass else []
    if ptx:
        entries.append(((major, minor), "ptx", exact))
    return entries


def _cuda_driver_tuple(value, where):
    """cuda_driver_version: "12.4" or NVML's integer 12040 -> (12, 4)."""
    if value is None or value == "":
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        if 1000 <= value < 100000:
            return cuda_version_from_nvml(value)
        raise GateInputError("%s: expected a CUDA version like '12.4' or NVML's 12040, got %d" % (where, value))
    text = to_str(value, where)
    if is_ascii_digits(text.strip()) and len(text.strip()) <= 6 and 1000 <= int(text.strip()) < 100000:
        return cuda_version_from_nvml(int(text.strip()))
    parsed = parse_version(text)
    if parsed is None or not re.match(r"^\s*[0-9]{1,9}\.[0-9]{1,9}(\.[0-9]{1,9})?\s*\Z", text, re.ASCII):
        raise GateInputError("%s: expected a CUDA version like '12.4', got %s" % (where, short_text(value)))
    return parsed[:2]


_BUS_ID_RE = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")


def _lost_gpus(value):
    """lost_gpus: GPUs that fell off the bus (gpu_facts' lost_gpus): [{bus_id, index, message}]."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise GateInputError("lost_gpus: expected a list of mappings with bus_id (gpu_facts' lost_gpus), got %s"
                             % _tname(value))
    out = []
    for index, item in enumerate(value):
        where = "lost_gpus[%d]" % index
        if not isinstance(item, dict):
            raise GateInputError("%s: expected a mapping with bus_id, index and message, got %s" % (where, _tname(item)))
        bus_id = to_str(item.get("bus_id"), where + ".bus_id", allow_numbers=False)
        # null: the driver said a GPU is lost but no address could be matched to it (gpu_facts).
        if bus_id is not None and not _BUS_ID_RE.match(bus_id.strip()):
            raise GateInputError("%s.bus_id: expected a PCI bus ID like '0000:02:00.0' or null, got %s"
                                 % (where, short_text(item.get("bus_id"))))
        gpu_index = _to_int(item.get("index"), where + ".index", minimum=0, maximum=4096)
        message = to_str(item.get("message"), where + ".message", allow_numbers=False)
        out.append({"bus_id": bus_id.strip() if bus_id else None, "index": gpu_index,
                    "message": (message or "").strip()})
    return out


def _gpu_inputs(gpus):
    """gpus: gpu_facts' entries -> [{name, cc, memory_mib, brand}] (cc a tuple or None)."""
    norm_gpus = []
    expected = "name, compute_capability and memory_total_mib"
    for index, where, gpu in gpu_entries(gpus, expected, GateInputError):
        name = to_str(gpu.get("name"), where + ".name") or "GPU %d" % index
        if has_control_chars(name.strip()):
            raise GateInputError("%s.name: expected a one-line GPU name, got %s" % (where, short_text(name)))
        cc = gpu_compute_capability(gpu, "compute_capability", where, "a string like '7.0' (major.minor)",
                                    GateInputError)
        memory = _to_int(gpu.get("memory_total_mib"), where + ".memory_total_mib", minimum=1,
                         maximum=2 ** 31)
        brand = to_str(gpu.get("brand"), where + ".brand", allow_numbers=False)
        norm_gpus.append({"name": name.strip() or "GPU %d" % index, "cc": cc, "memory_mib": memory,
                          "brand": brand.strip().lower() if brand else None})
    return norm_gpus


def _driver_inputs(driver_version, cuda_driver_version, nvlink, driver_library_mismatch):
    """The driver's inputs -> {driver, driver_text, cuda_driver, nvlink, driver_library_mismatch}."""
    out = {}
    if driver_version is None or (isinstance(driver_version, str) and driver_version.strip() == ""):
        out["driver"] = None
        out["driver_text"] = None
    else:
        text = to_str(driver_version, "driver_version")
        parsed = parse_driver_version(text)
        if parsed is None:
            raise GateInputError("driver_version: expected an NVIDIA driver version like '550.54.14', "
                                 "got %s" % short_text(driver_version))
        out["driver"] = parsed
        out["driver_text"] = text.strip().lstrip("rR")
    out["cuda_driver"] = _cuda_driver_tuple(cuda_driver_version, "cuda_driver_version")
    out["nvlink"] = to_bool(nvlink, "nvlink")
    out["driver_library_mismatch"] = bool(to_bool(driver_library_mismatch, "driver_library_mismatch"))
    return out


def _image_cuda_inputs(image):
    """image.cuda_version and image.require_cuda -> {cuda, require_text, require}."""
    img = {}
    cuda_text = to_str(image.get("cuda_version"), "image.cuda_version")
    img["cuda"] = None
    if cuda_text not in (None, ""):
        parsed = parse_version(cuda_text)
        if parsed is None or not re.match(r"^\s*[vV]?[0-9]{1,9}\.[0-9]{1,9}(\.[0-9]{1,9})*\s*\Z", cuda_text,
                                          re.ASCII):
            raise GateInputError("image.cuda_version: expected a CUDA version like '12.4.1', got %s"
                                 % short_text(image.get("cuda_version")))
        img["cuda"] = parsed
    require = to_str(image.get("require_cuda"), "image.require_cuda", allow_numbers=False)
    img["require_text"] = require.strip() if require else None
    if img["require_text"] and has_control_chars(img["require_text"]):
        raise GateInputError("image.require_cuda: expected one line like 'cuda>=12.4 brand=tesla,driver>=470', "
                             "got %s" % short_text(require))
    img["require"] = None
    if img["require_text"]:
        try:
            img["require"] = parse_require_cuda(img["require_text"])
        except PolicyError as exc:
            raise GateInputError("image.require_cuda: %s" % exc)
    return img


def _image_inputs(image):
    """image (vllm_image_facts) -> {cuda, require_text, require, arch_list_text, arch, quant_methods,
    vllm_version_text, vllm_version}."""
    image = to_mapping(image, "image", "cuda_version, require_cuda, arch_list, quantization_methods, vllm_version")
    img = _image_cuda_inputs(image)
    arch_list = _to_str_list(image.get("arch_list"), "image.arch_list", "arch entries like '7.0'")
    img["arch_list_text"] = arch_list
    img["arch"] = None
    if arch_list:
        parsed_arch = []
        for index, entry in enumerate(arch_list):
            parsed_arch.extend(parse_arch_entry(entry, "image.arch_list[%d]" % index))
        img["arch"] = parsed_arch
    methods = _to_str_list(image.get("quantization_methods"), "image.quantization_methods",
                           "method names like 'gptq'")
    img["quant_methods"] = [m for m in (canonical_quant(x) for x in methods) if m] if methods is not None else None
    version_text = to_str(image.get("vllm_version"), "image.vllm_version")
    if version_text and has_control_chars(version_text.strip()):
        raise GateInputError("image.vllm_version: expected a one-line version like '0.8.5', got %s"
                             % short_text(version_text))
    img["vllm_version_text"] = version_text.strip() if version_text else None
    img["vllm_version"] = parse_version(version_text) if version_text else None
    if img["vllm_version"] is not None and len(img["vllm_version"]) < 2:
        img["vllm_version"] = None
    return img


def _model_inputs(model):
    """model (model_facts) -> (normalised facts, the mapping as given)."""
    model = to_mapping(model, "model", "weight_bytes, param_count, quant_method, num_hidden_layers, num_key_value_heads, "
                       "head_dim, max_position_embeddings, torch_dtype")
    mdl = {}
    mdl["weight_bytes"] = _to_int(model.get("weight_bytes"), "model.weight_bytes", minimum=0)
    param_count = _to_number(model.get("param_count"), "model.param_count", minimum=0.0, maximum=1e16)
    mdl["param_count"] = int(param_count) if param_count is not None else None
    mdl["quant_method_text"] = to_str(model.get("quant_method"), "model.quant_method", allow_numbers=False)
    mdl["quant_method"] = canonical_quant(mdl["quant_method_text"])
    scheme = to_str(model.get("quant_scheme"), "model.quant_scheme", allow_numbers=False)
    mdl["quant_scheme"] = scheme.strip().lower() if scheme and scheme.strip() else None
    for key in ("quant_sym", "quant_desc_act", "quant_zero_point"):
        # GPTQ / AWQ quantization_config keys vLLM's Marlin conversion reads (model_facts).
        mdl[key] = to_bool(model.get(key), "model.%s" % key)
    for key in ("num_hidden_layers", "num_key_value_heads", "head_dim", "max_position_embeddings",
                "num_attention_heads", "hidden_size", "intermediate_size", "vocab_size"):
        mdl[key] = _to_int(model.get(key), "model.%s" % key, minimum=1, maximum=2 ** 40)
    torch_dtype = to_str(model.get("torch_dtype"), "model.torch_dtype", allow_numbers=False)
    mdl["torch_dtype"] = None
    if torch_dtype:
        name = torch_dtype.strip().lower()
        if name.startswith("torch."):
            name = name[6:]
        mdl["torch_dtype"] = DTYPE_ALIASES.get(name, name)
    # model_facts failed on the directory (a shard its index names is missing, a malformed file):
    # its message, which names the file. The preflight passes it; the rule model_files refuses.
    unreadable = to_str(model.get("unreadable"), "model.unreadable", allow_numbers=False)
    mdl["unreadable"] = unreadable.strip()[:1000] if unreadable and unreadable.strip() else None
    return mdl, dict(model)


def _dtype_input(vllm):
    """vllm.dtype, lower case without "torch.", one of VLLM_DTYPES (None when not given)."""
    dtype = to_str(vllm.get("dtype"), "vllm.dtype", allow_numbers=False)
    if dtype is not None:
        dtype = dtype.strip().lower()
        if dtype.startswith("torch."):
            dtype = dtype[6:]
        if dtype not in VLLM_DTYPES:
            raise GateInputError("vllm.dtype: expected one of %s, got %s" % (", ".join(VLLM_DTYPES), short_text(dtype)))
    return dtype


def _kv_cache_dtype_input(vllm):
    """vllm.kv_cache_dtype, lower case, one of _policy.KV_CACHE_DTYPES (None when not given)."""
    kv_dtype = to_str(vllm.get("kv_cache_dtype"), "vllm.kv_cache_dtype", allow_numbers=False)
    if kv_dtype is not None:
        kv_dtype = kv_dtype.strip().lower()
        kv_dtype = DTYPE_ALIASES.get(kv_dtype, kv_dtype)
        if kv_dtype not in KV_CACHE_DTYPES:
            raise GateInputError("vllm.kv_cache_dtype: expected one of %s, got %s"
                                 % (", ".join(sorted(KV_CACHE_DTYPES)), short_text(kv_dtype)))
    return kv_dtype


def _vllm_inputs(vllm):
    """vllm (the vLLM arguments) -> (the arguments the gate reads, normalised; the mapping as given).
    The other keys pass through to effective_vllm (and a unit's argv): one-line, finite values."""
    vllm = to_mapping(vllm, "vllm", "tensor_parallel_size, pipeline_parallel_size, dtype, quantization, max_model_len, "
                      "max_num_seqs, gpu_memory_utilization, kv_cache_dtype, cpu_offload_gb")
    args = {}
    args["tensor_parallel_size"] = _to_int(vllm.get("tensor_parallel_size"), "vllm.tensor_parallel_size",
                                           minimum=1, maximum=4096)
    args["pipeline_parallel_size"] = _to_int(vllm.get("pipeline_parallel_size"),
                                             "vllm.pipeline_parallel_size", minimum=1, maximum=4096)
    args["dtype"] = _dtype_input(vllm)
    quant = to_str(vllm.get("quantization"), "vllm.quantization", allow_numbers=False)
    args["quantization_text"] = quant
    args["quantization"] = canonical_quant(quant)
    args["max_model_len"] = _human_int(vllm.get("max_model_len"), "vllm.max_model_len") \
        if vllm.get("max_model_len") is not None else None
    args["max_num_seqs"] = _to_int(vllm.get("max_num_seqs"), "vllm.max_num_seqs", minimum=1, maximum=2 ** 31)
    args["gpu_memory_utilization"] = _to_number(vllm.get("gpu_memory_utilization"),
                                                "vllm.gpu_memory_utilization", minimum=0.0, maximum=1.0,
                                                exclusive_min=True)
    args["kv_cache_dtype"] = _kv_cache_dtype_input(vllm)
    args["cpu_offload_gb"] = _to_number(vllm.get("cpu_offload_gb"), "vllm.cpu_offload_gb", minimum=0.0,
                                        maximum=1e6)
    for key, value in vllm.items():
        check_plain_value({key: value}, "vllm")
    return args, dict(vllm)


def validate_inputs(gpus=None, driver_version=None, image=None, model=None, vllm=None,
                    policy_overrides=None, nvlink=None, driver_library_mismatch=False,
                    cuda_driver_version=None, lost_gpus=None, require_cuda_enforced=None,
                    runtime_mode_why=None):
    """Check and normalize every gate input. Returns a dict; raises GateInputError naming the
    field and what is expected. Unknown keys inside gpus[], image, model and vllm are ignored
    (vllm's are passed through to effective_vllm). The groups are checked in this order (the
    first malformed field is the one named): GPUs, lost GPUs, runtime mode, driver, image, model,
    vLLM arguments, policy."""
    out = {"gpus": _gpu_inputs(gpus), "lost_gpus": _lost_gpus(lost_gpus),
           "require_cuda_enforced": to_bool(require_cuda_enforced, "require_cuda_enforced")}
    why = to_str(runtime_mode_why, "runtime_mode_why", allow_numbers=False)
    out["runtime_mode_why"] = why.strip() if why else None
    out.update(_driver_inputs(driver_version, cuda_driver_version, nvlink, driver_library_mismatch))
    out["image"] = _image_inputs(image)
    out["model"], out["model_raw"] = _model_inputs(model)
    out["vllm"], out["vllm_raw"] = _vllm_inputs(vllm)
    try:
        out["policy"] = merge_policy(policy_overrides)
    except PolicyError as exc:
        raise GateInputError(str(exc))
    return out


def input_errors_only(func, *args, **kwargs):
    """Call ``func`` and let only GateInputError out: a PolicyError becomes one, and so does any
    other exception (a defensive net: validation is meant to make it unreachable)."""
    try:
        return func(*args, **kwargs)
    except GateInputError:
        raise
    except PolicyError as exc:
        raise GateInputError(str(exc))
    except Exception as exc:  # pylint: disable=broad-except
        raise GateInputError("could not evaluate the inputs (%s: %s); check the types of gpus, image, "
                             "model, vllm and request" % (type(exc).__name__, exc))
