# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.deploy_gate module instead.
#
# The deployment gate: pure functions, no Ansible imports, no I/O. evaluate() decides from the
# policy data (_policy.py) and the probes' facts whether a vLLM deployment can work on a host,
# and why not. It raises GateInputError (and nothing else) on malformed input.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import math
import re

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gpu_input import gpu_compute_capability, gpu_entries
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._vllm_memory import profile_reserve
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._vllm_startup import (
    STARTUP_REASON_CODES,
    STARTUP_WARNING_CODES,
    StartupInputError,
    expand_human_int,
    startup_checks,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._policy import (
    POLICY_VERSION,
    DTYPE_ALIASES,
    FP8_KV_CACHE_VERIFIED_MIN_CC,
    KV_CACHE_DTYPES,
    PolicyError,
    arch_for_cc,
    arch_reach,
    canonical_quant,
    coerce_bool,
    coerce_int,
    compare_versions,
    ct_scheme_need,
    cuda_version_from_nvml,
    kv_cache_dtypes_for,
    driver_branch_eol,
    evaluate_require_cuda,
    format_cc,
    has_control_chars,
    is_ascii_digits,
    format_require_alternative,
    max_cuda_for_branch,
    merge_policy,
    parse_cc,
    parse_driver_version,
    parse_arch,
    parse_require_cuda,
    parse_version,
    resolve_quant,
    short_repr,
    toolkit_entry,
    type_name,
    value_for_version,
    vllm_min_cc,
)

GIB = 1024 ** 3
MIB = 1024 ** 2

# Every code the gate can emit, with its meaning (documentation and tests read these tables).
REASON_CODES = {
    "NO_GPU": "No NVIDIA GPU was found on the host.",
    "GPU_LOST": "A GPU fell off the bus (Xid 79, 'GPU is lost'); only a reboot brings it back.",
    "COMPUTE_CAPABILITY_UNKNOWN": "A GPU's compute capability is unknown (unidentified device).",
    "COMPUTE_CAPABILITY_TOO_LOW": "A GPU is below the minimum compute capability of the requested vLLM.",
    "HETEROGENEOUS_GPUS": "The host mixes GPUs of different compute capabilities.",
    "DRIVER_LIBRARY_MISMATCH": "The loaded kernel module and the driver libraries differ (upgrade without reboot).",
    "DRIVER_BRANCH_UNSUPPORTED_FOR_ARCH": "The installed driver branch does not drive the GPU's architecture.",
    "DRIVER_BRANCH_NOT_ALLOWED": "The driver branch is not in the policy's allowed_driver_branches.",
    "DRIVER_TOO_OLD_FOR_IMAGE": "The driver cannot run the image's CUDA (NVIDIA_REQUIRE_CUDA or the "
                                "minor-version-compatibility floor).",
    "IMAGE_LACKS_ARCH": "The image has no kernels (SASS or usable PTX) for the GPU's compute capability.",
    "PTX_NEWER_THAN_DRIVER": "The GPU is reached only through PTX that is newer than the driver can JIT-compile.",
    "DTYPE_UNSUPPORTED": "The requested dtype (or KV cache dtype) needs a higher compute capability.",
    "KV_CACHE_DTYPE_UNSUPPORTED": "The image's vLLM release does not accept the --kv-cache-dtype value.",
    "QUANTIZATION_UNSUPPORTED_ON_ARCH": "The quantization method needs a higher compute capability.",
    "QUANTIZATION_UNKNOWN_TO_IMAGE": "The image's vLLM build does not know the quantization method (or the "
                                     "checkpoint's compressed-tensors scheme).",
    "QUANTIZATION_MISMATCH": "vllm.quantization names another method than the checkpoint's quant_method.",
    "QUANTIZATION_DTYPE_UNSUPPORTED": "The quantization method does not run with the serving dtype.",
    "QUANT_GROUP_SIZE_UNSUPPORTED": "The GPTQ checkpoint's group size is one vLLM's gptq (exllama) kernels compute "
                                    "wrong (not a multiple of the rows they step by).",
    "INSUFFICIENT_VRAM": "The weights, or the KV cache of one max_model_len sequence, do not fit in GPU memory.",
    "TENSOR_PARALLEL_EXCEEDS_GPUS": "tensor_parallel_size x pipeline_parallel_size exceeds the GPU count.",
}

WARNING_CODES = {
    "DRIVER_UNKNOWN": "No driver version was given (driver absent); driver checks were skipped.",
    "DRIVER_BRANCH_EOL": "The driver branch is end of life.",
    "CUDA_MINOR_VERSION_COMPAT": "The image's CUDA is newer than the driver's; it runs through minor "
                                 "version compatibility (no JIT of newer PTX).",
    "FORWARD_COMPAT_REQUIRED": "The runtime admits the image only through its forward-compatibility "
                               "clause (cuda-compat libraries in the image, data-center GPUs only).",
    "REQUIRE_CUDA_UNDECIDED": "NVIDIA_REQUIRE_CUDA could not be decided (GPU brand or driver CUDA unknown).",
    "PTX_JIT_ONLY": "The image reaches the GPU only through PTX JIT (slow first start, no SASS).",
    "PCIE_WITHOUT_P2P": "Tensor parallelism over GPUs without NVLink: all-reduce crosses PCIe.",
    "DTYPE_AUTOFIXED": "dtype auto/bfloat16 was changed to float16 for a GPU below 8.0, or kv_cache_dtype to auto "
                       "(bfloat16 on such a GPU, or a value the release does not accept).",
    "DTYPE_AUTO_UNRESOLVED": "dtype auto with an unknown checkpoint dtype on a GPU without bfloat16.",
    "KV_CACHE_DTYPE_UNVERIFIED": "An FP8 KV cache on this compute capability is not verified.",
    "QUANTIZATION_UNKNOWN_TO_POLICY": "The quantization method is not in the policy; its needs were not checked.",
    "QUANTIZATION_SCHEME_UNCHECKED": "compressed-tensors: the scheme could not be judged (unknown scheme "
                                     "or vLLM version, or its kernel is chosen at load).",
    "MEMORY_PLAN_INCOMPLETE": "Inputs for the memory plan are missing; the VRAM check was partial.",
    "WEIGHTS_ESTIMATED": "Weight bytes were estimated from param_count.",
    "GPU_MEMORY_UNEVEN": "The GPUs differ in memory size; the plan uses the smallest.",
    "ARCH_UNKNOWN": "The compute capability maps to no architecture in the policy; driver checks skipped.",
    "VLLM_VERSION_UNKNOWN": "image.vllm_version could not be read; version-dependent checks used lenient values.",
}

# The startup checks of _vllm_startup.py (vLLM's own config validation) report through the gate.
REASON_CODES.update(STARTUP_REASON_CODES)
WARNING_CODES.update(STARTUP_WARNING_CODES)

VLLM_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")

# Hints appended to QUANTIZATION_UNSUPPORTED_ON_ARCH for methods with a known way out.
_QUANT_HINTS = {
    "modelopt_fp4": "or serve an FP16 copy of the NVFP4 checkpoint without quantization (about 4x the weight "
                    "memory): the plan does that by itself where it fits (request.serving_path auto; "
                    "labfleet.vllm.nvfp4_dequantize converts it)",
}

_MAX_INT = 2 ** 62
_CT_KEYS = ("compressed_tensors",)


class GateInputError(ValueError):
    """Malformed gate input; the message names the field and what is expected."""


# ---------------------------------------------------------------------------------------------
# Input validation
# ---------------------------------------------------------------------------------------------


def _tname(value):
    return type_name(value)


def short_text(value):
    return short_repr(value)


def _to_int(value, where, minimum=0, maximum=_MAX_INT):
    return coerce_int(value, where, minimum=minimum, maximum=maximum, error=GateInputError)


def _to_number(value, where, minimum=0.0, maximum=1e18, exclusive_min=False):
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
    return coerce_bool(value, where, error=GateInputError)


def to_str(value, where, allow_numbers=True):
    if value is None or isinstance(value, str):
        return value
    if allow_numbers and isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(value) if isinstance(value, float) else str(value)
    raise GateInputError("%s: expected a string, got %s" % (where, _tname(value)))


def to_mapping(value, where, expected):
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


def _parse_arch_entry(text, where):
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


def validate_inputs(gpus=None, driver_version=None, image=None, model=None, vllm=None,
                    policy_overrides=None, nvlink=None, driver_library_mismatch=False,
                    cuda_driver_version=None, lost_gpus=None, require_cuda_enforced=None,
                    runtime_mode_why=None):
    """Check and normalize every gate input. Returns a dict; raises GateInputError naming the
    field and what is expected. Unknown keys inside gpus[], image, model and vllm are ignored
    (vllm's are passed through to effective_vllm)."""
    out = {}

    # gpus -------------------------------------------------------------------------------------
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
    out["gpus"] = norm_gpus
    out["lost_gpus"] = _lost_gpus(lost_gpus)
    out["require_cuda_enforced"] = to_bool(require_cuda_enforced, "require_cuda_enforced")
    why = to_str(runtime_mode_why, "runtime_mode_why", allow_numbers=False)
    out["runtime_mode_why"] = why.strip() if why else None

    # driver -----------------------------------------------------------------------------------
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

    # image ------------------------------------------------------------------------------------
    image = to_mapping(image, "image", "cuda_version, require_cuda, arch_list, quantization_methods, "
                                        "vllm_version")
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
    arch_list = _to_str_list(image.get("arch_list"), "image.arch_list", "arch entries like '7.0'")
    img["arch_list_text"] = arch_list
    img["arch"] = None
    if arch_list:
        parsed_arch = []
        for index, entry in enumerate(arch_list):
            parsed_arch.extend(_parse_arch_entry(entry, "image.arch_list[%d]" % index))
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
    out["image"] = img

    # model ------------------------------------------------------------------------------------
    model = to_mapping(model, "model", "weight_bytes, param_count, quant_method, num_hidden_layers, "
                                        "num_key_value_heads, head_dim, max_position_embeddings, torch_dtype")
    mdl = {}
    mdl["weight_bytes"] = _to_int(model.get("weight_bytes"), "model.weight_bytes", minimum=0)
    param_count = _to_number(model.get("param_count"), "model.param_count", minimum=0.0, maximum=1e16)
    mdl["param_count"] = int(param_count) if param_count is not None else None
    mdl["quant_method_text"] = to_str(model.get("quant_method"), "model.quant_method", allow_numbers=False)
    mdl["quant_method"] = canonical_quant(mdl["quant_method_text"])
    scheme = to_str(model.get("quant_scheme"), "model.quant_scheme", allow_numbers=False)
    mdl["quant_scheme"] = scheme.strip().lower() if scheme and scheme.strip() else None
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
    out["model"] = mdl
    out["model_raw"] = dict(model)

    # vllm -------------------------------------------------------------------------------------
    vllm = to_mapping(vllm, "vllm", "tensor_parallel_size, pipeline_parallel_size, dtype, quantization, "
                                     "max_model_len, max_num_seqs, gpu_memory_utilization, kv_cache_dtype, "
                                     "cpu_offload_gb")
    args = {}
    args["tensor_parallel_size"] = _to_int(vllm.get("tensor_parallel_size"), "vllm.tensor_parallel_size",
                                           minimum=1, maximum=4096)
    args["pipeline_parallel_size"] = _to_int(vllm.get("pipeline_parallel_size"),
                                             "vllm.pipeline_parallel_size", minimum=1, maximum=4096)
    dtype = to_str(vllm.get("dtype"), "vllm.dtype", allow_numbers=False)
    if dtype is not None:
        dtype = dtype.strip().lower()
        if dtype.startswith("torch."):
            dtype = dtype[6:]
        if dtype not in VLLM_DTYPES:
            raise GateInputError("vllm.dtype: expected one of %s, got %s" % (", ".join(VLLM_DTYPES), short_text(dtype)))
    args["dtype"] = dtype
    quant = to_str(vllm.get("quantization"), "vllm.quantization", allow_numbers=False)
    args["quantization_text"] = quant
    args["quantization"] = canonical_quant(quant)
    args["max_model_len"] = _human_int(vllm.get("max_model_len"), "vllm.max_model_len") \
        if vllm.get("max_model_len") is not None else None
    args["max_num_seqs"] = _to_int(vllm.get("max_num_seqs"), "vllm.max_num_seqs", minimum=1, maximum=2 ** 31)
    args["gpu_memory_utilization"] = _to_number(vllm.get("gpu_memory_utilization"),
                                                "vllm.gpu_memory_utilization", minimum=0.0, maximum=1.0,
                                                exclusive_min=True)
    kv_dtype = to_str(vllm.get("kv_cache_dtype"), "vllm.kv_cache_dtype", allow_numbers=False)
    if kv_dtype is not None:
        kv_dtype = kv_dtype.strip().lower()
        kv_dtype = DTYPE_ALIASES.get(kv_dtype, kv_dtype)
        if kv_dtype not in KV_CACHE_DTYPES:
            raise GateInputError("vllm.kv_cache_dtype: expected one of %s, got %s"
                                 % (", ".join(sorted(KV_CACHE_DTYPES)), short_text(kv_dtype)))
    args["kv_cache_dtype"] = kv_dtype
    args["cpu_offload_gb"] = _to_number(vllm.get("cpu_offload_gb"), "vllm.cpu_offload_gb", minimum=0.0,
                                        maximum=1e6)
    # The other keys pass through to effective_vllm (and a unit's argv): one-line, finite values.
    for key, value in vllm.items():
        check_plain_value({key: value}, "vllm")
    out["vllm"] = args
    out["vllm_raw"] = dict(vllm)

    # policy -----------------------------------------------------------------------------------
    try:
        out["policy"] = merge_policy(policy_overrides)
    except PolicyError as exc:
        raise GateInputError(str(exc))
    return out


# ---------------------------------------------------------------------------------------------
# Helpers for evaluation
# ---------------------------------------------------------------------------------------------


def _gib(value):
    return "%.1f GiB" % (value / GIB)


def _fmt_version(parsed):
    return ".".join(str(p) for p in parsed) if parsed else "?"


def _gpu_label(gpu):
    if gpu["cc"] is None:
        return gpu["name"]
    return "%s (compute capability %s)" % (gpu["name"], format_cc(gpu["cc"]))


def _cc_less(cc, other):
    return cc < other


def infer_brands(name):
    """Candidate NVIDIA_REQUIRE_CUDA brands for a GPU name; None when it cannot be told."""
    text = (name or "").lower()
    if "tesla" in text:
        return ["tesla"]
    if "quadro rtx" in text:
        return ["quadrortx"]
    if "quadro" in text:
        return ["quadro"]
    if "geforce" in text:
        return ["geforce"]
    if "titan" in text:
        return ["titan"]
    if re.search(r"\brtx\s*(a\d|pro\b|\d{4}\s*ada)", text):
        return ["nvidiartx"]
    if text.startswith("nvidia "):
        return ["nvidia", "tesla"]
    return None


def _arch_support(entries, cc):
    """'sass', 'ptx' or None: how the image's arch entries reach compute capability cc
    (_policy.arch_reach, the one coverage rule)."""
    return arch_reach([(arch[0], arch[1], "a" if exact else "", kind == "sass", kind == "ptx")
                       for arch, kind, exact in entries], cc)


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


def _maybe_int(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, str) and is_ascii_digits(value.strip()) and len(value.strip()) <= 19:
        return int(value.strip()) or None
    return None


def _release_for(policy, version):
    if version is None:
        return None, None
    for key, entry in policy.get("vllm_releases", {}).items():
        parsed = parse_version(key)
        if parsed is not None and compare_versions(parsed, version) == 0:
            return key, entry
    return None, None


def _in_range(version, low, high):
    return compare_versions(version, low) >= 0 and compare_versions(version, high) <= 0


def _branches_with_cuda(policy, cuda):
    """Driver branches (ints, ascending) whose native CUDA is >= cuda."""
    out = []
    for key, entry in policy["driver_branches"].items():
        native = parse_version(entry.get("max_cuda_native"))
        if is_ascii_digits(str(key)) and native is not None and compare_versions(native, cuda) >= 0:
            out.append(int(key))
    return sorted(out)


def _usable_methods(policy, cc, version):
    names = []
    for key, entry in sorted(policy["quantization"].items()):
        if key in _CT_KEYS:
            continue
        need = value_for_version(entry.get("min_cc", {}), version)
        if need is not None and need <= cc:
            names.append(key)
    return names


def _quant_family(key):
    if key is None:
        return None
    if key == "marlin":
        return "gptq"
    return key[:-len("_marlin")] if key.endswith("_marlin") else key


def _quant_in_image(policy, key, entry, image_methods):
    names = set([key])
    if entry is not None:
        names.update(canonical_quant(a) for a in entry.get("aliases", []) or [])
    return bool(names & set(image_methods))


# ---------------------------------------------------------------------------------------------
# Driver requirements (what the nvidia_driver role must install for these GPUs)
# ---------------------------------------------------------------------------------------------


def _driver_requirements(policy, arch_keys, today):
    archs = [policy["architectures"][k] for k in arch_keys if k in policy["architectures"]]
    maxes = [a["max_driver_branch"] for a in archs if a.get("max_driver_branch")]
    mins = [a["min_driver_branch"] for a in archs if a.get("min_driver_branch")]
    modules = set(a.get("kernel_module", "either") for a in archs)
    max_branch = min(maxes) if maxes else None
    min_branch = max(mins) if mins else None
    if "proprietary" in modules and "open" in modules:
        module = "conflict"
    elif "proprietary" in modules:
        module = "proprietary"
    elif "open" in modules:
        module = "open"
    else:
        module = "either" if archs else None
    recommended = None
    allowed = policy["settings"].get("allowed_driver_branches")
    for key in sorted((int(k) for k in policy["driver_branches"] if is_ascii_digits(str(k))), reverse=True):
        if max_branch is not None and key > max_branch:
            continue
        if min_branch is not None and key < min_branch:
            continue
        if allowed and key not in allowed:
            continue
        if driver_branch_eol(policy, key, today)[0]:
            continue
        recommended = key
        break
    return {
        "architectures": [policy["architectures"][k].get("label", k) for k in arch_keys
                          if k in policy["architectures"]],
        "min_branch": min_branch,
        "max_branch": max_branch,
        "kernel_module": module,
        "recommended_branch": recommended,
    }


# ---------------------------------------------------------------------------------------------
# The gate
# ---------------------------------------------------------------------------------------------


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


def evaluate(gpus=None, driver_version=None, image=None, model=None, vllm=None, policy_overrides=None,
             nvlink=None, driver_library_mismatch=False, cuda_driver_version=None, today=None,
             lost_gpus=None, require_cuda_enforced=None, runtime_mode_why=None):
    """Decide whether the requested vLLM deployment can work on a host.

    Returns {allowed, reasons, warnings, effective_vllm, plan, driver_requirements,
    policy_version}; ``reasons`` and ``warnings`` are lists of {code, message}.
    Raises GateInputError, and only that, on malformed input.
    """
    return input_errors_only(_evaluate, gpus, driver_version, image, model, vllm, policy_overrides, nvlink,
                             driver_library_mismatch, cuda_driver_version, today, lost_gpus,
                             require_cuda_enforced, runtime_mode_why)


def _evaluate(gpus, driver_version, image, model, vllm, policy_overrides, nvlink, driver_library_mismatch,
              cuda_driver_version, today, lost_gpus=None, require_cuda_enforced=None, runtime_mode_why=None):
    inputs = validate_inputs(gpus=gpus, driver_version=driver_version, image=image, model=model,
                             vllm=vllm, policy_overrides=policy_overrides, nvlink=nvlink,
                             driver_library_mismatch=driver_library_mismatch,
                             cuda_driver_version=cuda_driver_version, lost_gpus=lost_gpus,
                             require_cuda_enforced=require_cuda_enforced, runtime_mode_why=runtime_mode_why)
    if today is None:
        today = datetime.date.today()
    elif not isinstance(today, datetime.date):
        raise GateInputError("today: expected a datetime.date, got %s" % _tname(today))
    return _Evaluation(inputs, today).run()


class _Evaluation:
    def __init__(self, inputs, today):
        self.inputs = inputs
        self.today = today
        self.policy = inputs["policy"]
        self.settings = self.policy["settings"]
        self.reasons = []
        self.warnings = []
        self.gpus = inputs["gpus"]
        self.known = [g for g in self.gpus if g["cc"] is not None]
        self.image = inputs["image"]
        self.model = inputs["model"]
        self.args = inputs["vllm"]
        self.effective = dict(inputs["vllm_raw"])
        self.version = self.image["vllm_version"]
        self.release_key, self.release = _release_for(self.policy, self.version)
        self.host_cuda = None
        self.host_cuda_exact = False
        self.forward_compat = False
        self.mvc_warned = False
        self.arch_keys_cache = []

    def reason(self, code, message):
        self.reasons.append({"code": code, "message": message})

    def warn(self, code, message):
        self.warnings.append({"code": code, "message": message})

    # -- distinct GPUs by compute capability (first of each) ---------------------------------
    def distinct(self):
        seen = {}
        for gpu in self.known:
            seen.setdefault(gpu["cc"], gpu)
        return [seen[cc] for cc in sorted(seen)]

    def lowest(self):
        known = self.distinct()
        return known[0] if known else None

    def vllm_label(self):
        if self.image["vllm_version_text"]:
            return "vLLM %s" % self.image["vllm_version_text"].lstrip("vV")
        return "vLLM"

    # -- checks ------------------------------------------------------------------------------
    def check_lost(self):
        lost = self.inputs["lost_gpus"]
        if not lost:
            return
        names = ", ".join((g["bus_id"] or "a GPU at an unknown bus address")
                          + (" (GPU %d)" % g["index"] if g["index"] is not None else "") for g in lost)
        said = lost[0]["message"]
        healthy = len(self.gpus)
        tp = self.args["tensor_parallel_size"] or 1
        pp = self.args["pipeline_parallel_size"] or 1
        fewer = ""
        if healthy:
            fewer = ("; or plan on the %d healthy GPU%s: give the instance those GPUs and set "
                     "tensor_parallel_size x pipeline_parallel_size to at most %d (now %d)"
                     % (healthy, "" if healthy == 1 else "s", healthy, tp * pp))
        self.reason("GPU_LOST",
                    "%s fell off the bus%s (Xid 79: the driver no longer reaches %s; lspci shows it as rev ff): "
                    "reboot the host to recover it, and if it drops again check its power, seating and "
                    "temperature%s" % (names, " (nvidia-smi: '%s')" % _clip(said, 120) if said else "",
                                       "it" if len(lost) == 1 else "them", fewer))

    def check_gpus(self):
        if not self.gpus and self.inputs["lost_gpus"]:
            return
        if not self.gpus:
            self.reason("NO_GPU", "no NVIDIA GPU was found on this host; vLLM's CUDA image needs at least "
                                  "one: check that the GPU is seated and visible (lspci, gpu_facts) or "
                                  "leave this host out of the deployment")
            return
        for gpu in self.gpus:
            if gpu["cc"] is None:
                self.reason("COMPUTE_CAPABILITY_UNKNOWN",
                            "%s has no known compute capability, so nothing can be checked for it: "
                            "install the NVIDIA driver (the probe then reads it from nvidia-smi) or set "
                            "compute_capability for this GPU" % gpu["name"])
        distinct = self.distinct()
        if len(distinct) > 1:
            self.reason("HETEROGENEOUS_GPUS",
                        "the host mixes %s; vLLM's tensor/pipeline parallel workers need identical GPUs: "
                        "restrict the deployment to GPUs of one kind (docker --gpus device=...)"
                        % " and ".join(_gpu_label(g) for g in distinct))
        memories = [g["memory_mib"] for g in self.known if g["memory_mib"]]
        if memories and min(memories) < 0.95 * max(memories):
            self.warn("GPU_MEMORY_UNEVEN",
                      "GPU memory sizes differ (%d to %d MiB); the memory plan uses the smallest, and so "
                      "does vLLM's KV cache" % (min(memories), max(memories)))

    def check_compute_capability(self):
        setting = self.settings.get("min_compute_capability")
        need = parse_cc(setting) if setting else vllm_min_cc(self.policy, self.version)
        floor = vllm_min_cc(self.policy, None)
        for gpu in self.distinct():
            if not _cc_less(gpu["cc"], need):
                continue
            if not setting and not _cc_less(gpu["cc"], floor):
                last = None
                for since in sorted(self.policy["vllm_min_compute_capability"],
                                    key=lambda s: parse_version(s) or (0,)):
                    entry = self.policy["vllm_min_compute_capability"][since]
                    value = parse_cc(entry.get("min_cc") if isinstance(entry, dict) else entry)
                    if value is not None and _cc_less(gpu["cc"], value):
                        last = since
                        break
                hint = "use an older vLLM image"
                if last:
                    hint = "use a vLLM release before %s (e.g. vllm/vllm-openai:v0.19.1, the last line " \
                           "with compute capability %s kernels)" % (last, format_cc(floor))
                self.reason("COMPUTE_CAPABILITY_TOO_LOW",
                            "%s is below %s's minimum compute capability %s: %s"
                            % (_gpu_label(gpu), self.vllm_label(), format_cc(need), hint))
            else:
                source = "the policy's min_compute_capability" if setting else "vLLM's minimum"
                self.reason("COMPUTE_CAPABILITY_TOO_LOW",
                            "%s is below %s (%s); vLLM cannot run on it: deploy on GPUs with compute "
                            "capability %s or higher (e.g. V100, T4, A100) or leave this host out"
                            % (_gpu_label(gpu), source, format_cc(need), format_cc(need)))

    def arch_keys(self):
        keys = []
        for gpu in self.distinct():
            key = arch_for_cc(self.policy, gpu["cc"])
            if key is None:
                self.warn("ARCH_UNKNOWN", "%s maps to no architecture in the policy; driver-branch checks "
                                          "were skipped for it (extend policy.architectures)" % _gpu_label(gpu))
            elif key not in keys:
                keys.append(key)
        return keys

    def check_driver(self, arch_keys):
        driver = self.inputs["driver"]
        requirements = _driver_requirements(self.policy, arch_keys, self.today)
        if self.inputs["driver_library_mismatch"]:
            self.reason("DRIVER_LIBRARY_MISMATCH",
                        "the loaded NVIDIA kernel module and the driver libraries differ (the driver was "
                        "upgraded without a reboot; NVML reports 'Driver/library version mismatch'): "
                        "reboot the host, then run the preflight again")
        if driver is None:
            advice = ""
            if requirements["max_branch"] or requirements["kernel_module"] not in (None, "either"):
                parts = []
                if requirements["max_branch"]:
                    parts.append("a branch no newer than R%d" % requirements["max_branch"])
                if requirements["kernel_module"] in ("proprietary", "open"):
                    parts.append("the %s kernel module" % requirements["kernel_module"])
                advice = "; these GPUs need %s" % " with ".join(parts)
            self.warn("DRIVER_UNKNOWN", "no driver version is known (driver not installed or not loaded): "
                                        "driver checks were skipped; install the driver and run the preflight "
                                        "again%s" % advice)
            return requirements
        branch = driver[0]
        text = self.inputs["driver_text"]
        self.host_cuda = self.inputs["cuda_driver"]
        self.host_cuda_exact = self.host_cuda is not None
        if self.host_cuda is None:
            self.host_cuda, self.host_cuda_exact = max_cuda_for_branch(self.policy, branch)
        allowed = self.settings.get("allowed_driver_branches")
        if allowed and branch not in allowed:
            self.reason("DRIVER_BRANCH_NOT_ALLOWED",
                        "driver %s (R%d) is not among the branches this policy allows (%s): install one of "
                        "them" % (text, branch, ", ".join("R%d" % b for b in allowed)))
        for key in arch_keys:
            arch = self.policy["architectures"][key]
            label = arch.get("label", key)
            gpus = [g for g in self.distinct() if arch_for_cc(self.policy, g["cc"]) == key]
            names = ", ".join(_gpu_label(g) for g in gpus)
            top = arch.get("max_driver_branch")
            bottom = arch.get("min_driver_branch")
            if top and branch > top:
                fix = "install an R%d driver" % top
                if str(top) in self.policy["driver_branches"]:
                    entry = self.policy["driver_branches"][str(top)]
                    if entry.get("designation") or entry.get("eol"):
                        extra = [entry.get("designation")] if entry.get("designation") else []
                        if isinstance(entry.get("eol"), str):
                            extra.append("EOL %s" % entry["eol"])
                        fix += " (%s)" % ", ".join(extra)
                self.reason("DRIVER_BRANCH_UNSUPPORTED_FOR_ARCH",
                            "driver %s (R%d) does not drive %s GPUs (%s): R%d is the last branch for %s; %s "
                            "with the %s kernel module" % (text, branch, label, names, top, label, fix,
                                                           arch.get("kernel_module", "matching")))
            elif bottom and branch < bottom:
                self.reason("DRIVER_BRANCH_UNSUPPORTED_FOR_ARCH",
                            "driver %s (R%d) predates %s GPUs (%s): install R%d or newer"
                            % (text, branch, label, names, bottom))
        eol, when = driver_branch_eol(self.policy, branch, self.today)
        if eol:
            advice = ""
            if requirements["recommended_branch"]:
                rec = self.policy["driver_branches"].get(str(requirements["recommended_branch"]), {})
                detail = [rec.get("designation")] if rec.get("designation") else []
                if isinstance(rec.get("eol"), str):
                    detail.append("EOL %s" % rec["eol"])
                advice = "; move to R%d%s" % (requirements["recommended_branch"],
                                              " (%s)" % ", ".join(detail) if detail else "")
                if requirements["max_branch"] == requirements["recommended_branch"]:
                    advice += ", the last branch for these GPUs"
            self.warn("DRIVER_BRANCH_EOL", "driver branch R%d is end of life (%s, NVIDIA supported-drivers "
                                           "page): no more security fixes%s" % (branch, when, advice))
        return requirements

    def image_cuda(self):
        if self.image["cuda"] is not None:
            return self.image["cuda"], "image.cuda_version"
        if self.release and parse_version(self.release.get("cuda_base")):
            return parse_version(self.release["cuda_base"]), "the policy's profile of vLLM %s" % self.release_key
        return None, None

    def check_image_driver(self):
        driver = self.inputs["driver"]
        if driver is None:
            return
        branch = driver[0]
        text = self.inputs["driver_text"]
        cuda = self.image_cuda()[0]
        host_cuda = self.host_cuda
        host_label = "CUDA %s" % _fmt_version(host_cuda[:2]) if host_cuda else "unknown CUDA level"
        if not self.host_cuda_exact and host_cuda:
            host_label = "CUDA %s or newer" % _fmt_version(host_cuda[:2])
        native_ok = None
        alternatives = self.image["require"]
        enforced = self.inputs["require_cuda_enforced"]
        mode_why = self.inputs["runtime_mode_why"]
        major = str(cuda[0]) if cuda else None
        mvc = self.policy["minor_version_compatibility"].get(major) if major else None
        floor = parse_driver_version(str(mvc["driver_min"])) if mvc else None
        if alternatives and enforced is False:
            # CDI / jit-cdi mode, or NVIDIA_DISABLE_REQUIRE: nothing reads NVIDIA_REQUIRE_CUDA; the
            # CUDA runtime in the image decides (minor-version compatibility, below).
            alternatives = None
        if alternatives:
            results = []
            for gpu in self.distinct() or [None]:
                if gpu is None:
                    brands = [None]
                elif gpu["brand"]:
                    brands = [gpu["brand"]]
                else:
                    brands = infer_brands(gpu["name"]) or [None]
                for brand in brands:
                    result, matched = evaluate_require_cuda(
                        alternatives, cuda=host_cuda, driver=driver, brand=brand,
                        arch=gpu["cc"] if gpu else None, cuda_is_lower_bound=not self.host_cuda_exact)
                    results.append((result, matched, brand, gpu))
            values = set(r[0] for r in results)
            if values == set([True]):
                native = all(any(all(c[0] in ("cuda", "arch") for c in alt) for alt in r[1]) for r in results)
                if not native and floor is not None and compare_versions(driver, floor) >= 0:
                    # The brand clause lets the runtime admit it; the CUDA runtime then runs through
                    # minor-version compatibility (the driver is at or above the major's floor): no
                    # cuda-compat libraries are involved (S-MVC).
                    native = True
                    if self.host_cuda_exact or host_cuda is None:
                        self.warn("CUDA_MINOR_VERSION_COMPAT",
                                  "the container runtime admits this image on driver %s (%s) through the clause '%s' "
                                  "of NVIDIA_REQUIRE_CUDA, and the image's CUDA %s then runs through minor-version "
                                  "compatibility (CUDA %s needs driver %s or newer): it works without the image's "
                                  "cuda-compat libraries (leave VLLM_ENABLE_CUDA_COMPATIBILITY unset), but PTX newer "
                                  "than the driver cannot be JIT-compiled; a driver with CUDA %s or newer lifts that"
                                  % (text, host_label, format_require_alternative(results[0][1][0]),
                                     _fmt_version(cuda) if cuda else "?", major, _fmt_version(floor),
                                     _fmt_version(cuda[:2]) if cuda else "?"))
                    native_ok = True
                    self.mvc_warned = True
                elif not native:
                    self.forward_compat = True
                    self.warn("FORWARD_COMPAT_REQUIRED",
                              "the container runtime admits this image on driver %s (%s) only through the clause "
                              "'%s' of NVIDIA_REQUIRE_CUDA, and the driver is below CUDA %s's minor-version-"
                              "compatibility floor (%s): the image runs only with its cuda-compat libraries, on "
                              "data-center GPUs only (vLLM >= 0.17 images: -e VLLM_ENABLE_CUDA_COMPATIBILITY=1); a "
                              "driver of %s or newer avoids this"
                              % (text, host_label, format_require_alternative(results[0][1][0]), major or "?",
                                 _fmt_version(floor) if floor else "?", _fmt_version(floor) if floor else "a newer branch"))
                    native_ok = False
                else:
                    native_ok = True
            elif False in values:
                failing = [r for r in results if r[0] is False][0]
                wanted = None
                for alt in alternatives:
                    for key, op, value in alt:
                        if key == "cuda" and op in (">=", ">"):
                            wanted = parse_version(value)
                fix = "use an image built for %s or older" % host_label.replace(" or newer", "")
                if wanted:
                    branches = _branches_with_cuda(self.policy, wanted)
                    top = self.driver_cap()
                    if top is not None:
                        branches = [b for b in branches if b <= top]
                    if branches:
                        fix = "install %s, or %s" % (_branch_advice(branches[0], top), fix)
                    elif top is not None:
                        fix = "no driver that drives these GPUs reaches CUDA %s: %s" % (_fmt_version(wanted), fix)
                if enforced:
                    who = "the container runtime will refuse to start it (%s)" % (
                        mode_why or "its legacy hook checks NVIDIA_REQUIRE_CUDA")
                else:
                    who = ("the container runtime refuses to start it in legacy mode, which checks "
                           "NVIDIA_REQUIRE_CUDA (the default with docker --gpus; this host's mode is unknown%s)"
                           % (": " + mode_why if mode_why else ""))
                if cuda is not None and floor is not None and compare_versions(driver, floor) >= 0:
                    fix += ("; or let the image run through minor-version compatibility (driver %s is at or above "
                            "CUDA %s's floor %s): run the runtime in CDI mode or set NVIDIA_DISABLE_REQUIRE=true in "
                            "the container's environment, which skip this check"
                            % (text, major, _fmt_version(floor)))
                self.reason("DRIVER_TOO_OLD_FOR_IMAGE",
                            "the image requires NVIDIA_REQUIRE_CUDA='%s' and driver %s (%s%s) matches none of "
                            "its alternatives, so %s: %s"
                            % (_clip(self.image["require_text"]), text, host_label,
                               ", brand %s" % failing[2] if failing[2] else "", who, fix))
                return
            else:
                self.warn("REQUIRE_CUDA_UNDECIDED",
                          "cannot decide whether driver %s (%s) satisfies NVIDIA_REQUIRE_CUDA='%s' (GPU brand "
                          "or the driver's CUDA level unknown): set brand on the gpus entries or pass "
                          "cuda_driver_version" % (text, host_label, _clip(self.image["require_text"])))
        if cuda is None or self.forward_compat:
            return
        if floor is not None and compare_versions(driver, floor) < 0 and native_ok is not True:
            unchecked = ""
            if enforced is False and self.image["require"]:
                unchecked = (" (NVIDIA_REQUIRE_CUDA is not checked here: %s; the CUDA runtime in the image then "
                             "fails with 'CUDA driver version is insufficient for CUDA runtime version')"
                             % (mode_why or "the runtime does not read it"))
            self.reason("DRIVER_TOO_OLD_FOR_IMAGE",
                        "the image's CUDA %s needs driver %s or newer (CUDA %s minor-version-compatibility "
                        "floor) and the host has %s%s: %s; on data-center GPUs the image's cuda-compat libraries "
                        "are the other way (vLLM >= 0.17 images: -e VLLM_ENABLE_CUDA_COMPATIBILITY=1)"
                        % (_fmt_version(cuda), _fmt_version(floor), major, text, unchecked, self.driver_fix(cuda)))
            return
        if floor is None and host_cuda is not None and compare_versions(host_cuda[:2], cuda[:2]) < 0 \
                and native_ok is not True:
            entry = toolkit_entry(self.policy, cuda)
            need = " (the toolkit ships with driver %s)" % entry["min_linux_driver"] if entry else ""
            self.reason("DRIVER_TOO_OLD_FOR_IMAGE",
                        "the image's CUDA %s is newer than driver %s (%s)%s: %s"
                        % (_fmt_version(cuda), text, host_label, need, self.driver_fix(cuda)))
            return
        if host_cuda is not None and compare_versions(host_cuda[:2], cuda[:2]) < 0:
            if not self.host_cuda_exact or self.mvc_warned:
                return
            self.warn("CUDA_MINOR_VERSION_COMPAT",
                      "the image's CUDA %s is newer than driver %s (CUDA %s): it runs through minor "
                      "version compatibility, which cannot JIT-compile PTX from the newer toolkit; a "
                      "driver with CUDA %s or newer removes the limit"
                      % (_fmt_version(cuda), text, _fmt_version(host_cuda[:2]), _fmt_version(cuda[:2])))

    def driver_cap(self):
        caps = [self.policy["architectures"][k].get("max_driver_branch") for k in self.arch_keys_cache]
        caps = [c for c in caps if c]
        return min(caps) if caps else None

    def driver_fix(self, cuda):
        branches = _branches_with_cuda(self.policy, cuda[:2])
        top = self.driver_cap()
        if top is not None:
            branches = [b for b in branches if b <= top]
        if branches:
            return "install %s" % _branch_advice(branches[0], top)
        return "use an image built for an older CUDA"

    def check_image_arch(self):
        entries = self.image["arch"]
        origin = "image.arch_list"
        if entries is None and self.release and self.release.get("vllm_arch"):
            entries = []
            for index, text in enumerate(self.release["vllm_arch"].split()):
                entries.extend(_parse_arch_entry(text, "policy vllm_releases.%s.vllm_arch[%d]"
                                                 % (self.release_key, index)))
            origin = "the policy's profile of vLLM %s" % self.release_key
        for gpu in self.distinct():
            cc = gpu["cc"]
            if entries:
                support = _arch_support(entries, cc)
                listed = " ".join(self.image["arch_list_text"]) if origin == "image.arch_list" \
                    else self.release["vllm_arch"]
                if support is None:
                    example = ""
                    if cc == (7, 0):
                        example = " (for 7.0: vllm/vllm-openai v0.8.5 on CUDA 12.4, or v0.10.2 to v0.19.1)"
                    self.reason("IMAGE_LACKS_ARCH",
                                "the image has no kernels for %s (arch list from %s: %s), so it fails with "
                                "'no kernel image is available for execution on the device': use an image "
                                "built with %s%s" % (_gpu_label(gpu), origin, listed, format_cc(cc), example))
                elif support == "ptx":
                    host = self.host_cuda if self.host_cuda_exact else None
                    cuda = self.image_cuda()[0]
                    if host and cuda and compare_versions(host[:2], cuda[:2]) < 0 and not self.forward_compat:
                        self.reason("PTX_NEWER_THAN_DRIVER",
                                    "the image reaches %s only through PTX (arch list: %s), built by CUDA %s, "
                                    "which driver %s (CUDA %s) cannot JIT-compile: use an image with SASS for "
                                    "%s or a driver with CUDA %s or newer"
                                    % (_gpu_label(gpu), listed, _fmt_version(cuda), self.inputs["driver_text"],
                                       _fmt_version(host[:2]), format_cc(cc), _fmt_version(cuda[:2])))
                    else:
                        self.warn("PTX_JIT_ONLY",
                                  "the image has no SASS for %s, only PTX (arch list: %s): the first start "
                                  "JIT-compiles every kernel (minutes, CPU heavy) and runs slower; prefer an "
                                  "image built with %s" % (_gpu_label(gpu), listed, format_cc(cc)))
            elif entries is None:
                cuda = self.image_cuda()[0]
                target = (self.policy.get("cuda_min_target_cc") or {}).get(str(cuda[0])) if cuda else None
                floor = parse_cc(target.get("min_cc")) if isinstance(target, dict) else None
                if floor is not None and _cc_less(cc, floor):
                    self.reason("IMAGE_LACKS_ARCH",
                                "the image is built with CUDA %s, which cannot generate code for compute capability "
                                "below %s, so it has no kernels for %s: use an image built with CUDA %d.x or older"
                                % (_fmt_version(cuda), format_cc(floor), _gpu_label(gpu), cuda[0] - 1))
            torch_gap = self.policy.get("torch_without_sm70") or {}
            span = torch_gap.get("range") or []
            if self.version is not None and len(span) == 2 and cc == (7, 0) \
                    and _in_range(self.version, parse_version(span[0]), parse_version(span[1])):
                already = any(r["code"] == "IMAGE_LACKS_ARCH" for r in self.reasons)
                if not already:
                    self.reason("IMAGE_LACKS_ARCH",
                                "%s ships torch built without sm_70 (torch arch list %s), so %s fails with "
                                "'no kernel image is available': use vllm/vllm-openai v0.8.5 or v0.10.2 to "
                                "v0.19.1" % (self.vllm_label(), torch_gap.get("torch_arch", "?"), _gpu_label(gpu)))

    def check_dtype(self):
        gpu = self.lowest()
        if gpu is None:
            return
        cc = gpu["cc"]
        auto_fix = self.settings.get("auto_fix", True)
        dtypes = self.policy["dtypes"]
        requested = self.args["dtype"] or "auto"
        name = DTYPE_ALIASES.get(requested, requested)
        torch_dtype = self.model["torch_dtype"]
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
        has_bf16 = not _cc_less(cc, bf16_need)
        if not has_bf16 and (resolved == "bfloat16" or (name == "auto" and resolved is None)):
            what = "dtype %s" % requested if name != "auto" else (
                "dtype auto (the checkpoint is bfloat16)" if resolved == "bfloat16"
                else "dtype auto (checkpoint dtype unknown)")
            if auto_fix:
                self.effective["dtype"] = "float16"
                self.warn("DTYPE_AUTOFIXED",
                          "%s has no bfloat16; %s was changed to float16 (--dtype float16)" % (_gpu_label(gpu), what))
            elif resolved == "bfloat16":
                self.reason("DTYPE_UNSUPPORTED",
                            "%s has no bfloat16; use --dtype float16 (vllm.dtype: float16)" % _gpu_label(gpu))
            else:
                self.warn("DTYPE_AUTO_UNRESOLVED",
                          "%s has no bfloat16 and the checkpoint dtype is unknown: if it is bfloat16, older vLLM "
                          "releases refuse to start; set vllm.dtype to float16" % _gpu_label(gpu))
        final = self.effective.get("dtype") if self.effective.get("dtype") == "float16" else resolved
        if final in dtypes and final != "bfloat16" and _cc_less(cc, parse_cc(dtypes[final]["min_cc"])):
            self.reason("DTYPE_UNSUPPORTED",
                        "%s does not support %s (needs compute capability %s): use --dtype float32"
                        % (_gpu_label(gpu), final, dtypes[final]["min_cc"]))
        kv = self.args["kv_cache_dtype"]
        accepted, release = kv_cache_dtypes_for(self.policy.get("kv_cache_dtypes_by_release") or {}, self.version)
        served = final if final in ("float16", "bfloat16", "float32") else None
        if kv == "bfloat16" and not has_bf16:
            if auto_fix:
                self.effective["kv_cache_dtype"] = "auto"
                self.warn("DTYPE_AUTOFIXED", "%s has no bfloat16; kv_cache_dtype bfloat16 was changed to auto "
                                             "(the KV cache follows the served dtype%s)"
                          % (_gpu_label(gpu), ", float16" if served in (None, "float16") else ", " + served))
                kv = None
            else:
                self.reason("DTYPE_UNSUPPORTED", "%s has no bfloat16; set vllm.kv_cache_dtype to auto (the KV cache "
                                                 "then follows the served dtype)" % _gpu_label(gpu))
        if kv and accepted is not None and kv not in accepted:
            words = ("--kv-cache-dtype %s is not a value %s accepts (it takes %s: vllm@%s CacheDType), so its "
                     "argument parser stops before the engine starts" % (kv, self.vllm_label(), ", ".join(accepted),
                                                                         release))
            if auto_fix and kv in ("float16", "bfloat16") and (served is None or served == kv):
                self.effective["kv_cache_dtype"] = "auto"
                self.warn("DTYPE_AUTOFIXED", "%s; kv_cache_dtype %s was changed to auto, which keeps the KV cache "
                                             "in the served dtype %s" % (words, kv, served or kv))
            else:
                self.reason("KV_CACHE_DTYPE_UNSUPPORTED",
                            "%s: set vllm.kv_cache_dtype to auto (the served dtype) or one of those values" % words)
        if kv and kv.startswith("fp8") and _cc_less(cc, parse_cc(FP8_KV_CACHE_VERIFIED_MIN_CC)):
            self.warn("KV_CACHE_DTYPE_UNVERIFIED",
                      "an FP8 KV cache (kv_cache_dtype %s) on %s is not verified to work; use auto if vLLM "
                      "fails to start" % (kv, _gpu_label(gpu)))

    def effective_dtype_bytes(self):
        dtype = self.effective.get("dtype")
        dtype = dtype.strip().lower() if isinstance(dtype, str) else "auto"
        dtype = DTYPE_ALIASES.get(dtype, dtype)
        if dtype == "auto":
            torch_dtype = self.model["torch_dtype"]
            dtype = "float16" if torch_dtype in (None, "float32") else torch_dtype
        entry = self.policy["dtypes"].get(dtype)
        return entry["bytes"] if entry else 2

    def quant_method(self):
        if self.args["quantization"]:
            return self.args["quantization"], self.args["quantization_text"]
        if self.model["quant_method"]:
            return self.model["quant_method"], self.model["quant_method_text"]
        return None, None

    def check_quantization(self):
        method, text = self.quant_method()
        if method is None:
            return
        key, entry = resolve_quant(self.policy, method)
        requested = self.args["quantization"]
        declared = self.model["quant_method"]
        if requested and declared:
            r_key = resolve_quant(self.policy, requested)[0]
            d_key = resolve_quant(self.policy, declared)[0]
            if _quant_family(r_key) != _quant_family(d_key):
                self.reason("QUANTIZATION_MISMATCH",
                            "vllm.quantization %s differs from the checkpoint's quant_method %s, and vLLM refuses "
                            "that at startup ('Quantization method specified in the model config (%s) does not "
                            "match the quantization method specified in the `quantization` argument (%s)', "
                            "vllm@0.8.5:vllm/config.py:815-820): drop vllm.quantization (vLLM reads the "
                            "checkpoint's) or set it to %s"
                            % (self.args["quantization_text"], self.model["quant_method_text"],
                               self.model["quant_method_text"], self.args["quantization_text"],
                               self.model["quant_method_text"]))
        if entry is None:
            self.warn("QUANTIZATION_UNKNOWN_TO_POLICY",
                      "quantization method %s is not in the policy, so its compute capability needs were not "
                      "checked (add it under policy.quantization)" % text)
        gpu = self.lowest()
        if entry is not None and gpu is not None:
            need = value_for_version(entry.get("min_cc", {}), self.version)
            if need is not None and _cc_less(gpu["cc"], need):
                usable = _usable_methods(self.policy, gpu["cc"], self.version)
                alternatives = "use %s, or an unquantized float16 model" % (
                    ", ".join(usable) if usable else "no quantization")
                if key == "gptq_marlin" or key == "marlin":
                    alternatives = "use quantization gptq (exllama kernels) instead, or " + alternatives[4:]
                elif key == "awq_marlin":
                    alternatives = "the AWQ GEMM path needs 7.5 too; " + alternatives
                hint = _QUANT_HINTS.get(key)
                if hint:
                    alternatives += ", " + hint
                self.reason("QUANTIZATION_UNSUPPORTED_ON_ARCH",
                            "%s (%s) needs compute capability %s in %s and %s is below it: on compute "
                            "capability %s %s" % (entry.get("label", key), text, format_cc(need), self.vllm_label(),
                                                  _gpu_label(gpu), format_cc(gpu["cc"]), alternatives))
            elif key in _CT_KEYS:
                self.check_ct_scheme(gpu)
        if entry is not None:
            self.check_act_dtype(key, entry, text)
            self.check_group_size(key, entry, text)
        methods = self.image["quant_methods"]
        if methods is not None and not _quant_in_image(self.policy, key, entry, methods):
            hint = ""
            if key == "modelopt_fp4":
                hint = ", or dequantize the checkpoint to float16 and drop quantization"
            self.reason("QUANTIZATION_UNKNOWN_TO_IMAGE",
                        "%s does not know quantization method %s ('Unknown quantization method'); it knows: %s: "
                        "use an image whose vLLM has it%s"
                        % (self.vllm_label() if self.image["vllm_version_text"] else "the image's vLLM", text,
                           ", ".join(methods) if methods else "none", hint))

    def check_ct_scheme(self, gpu):
        """compressed-tensors: the scheme decides (CompressedTensorsConfig._check_scheme_supported raises
        at model load when the GPU is below the scheme's get_min_capability)."""
        schemes = self.policy.get("compressed_tensors_schemes", {})
        scheme = self.model["quant_scheme"]
        where = "%s (compute capability %s)" % (_gpu_label(gpu), format_cc(gpu["cc"]))
        way_out = ("serve a GPTQ checkpoint of the same model (exllama kernels run on 6.0+) or the "
                   "unquantized float16 model")
        if scheme in schemes:
            entry = schemes[scheme]
            kind, need = ct_scheme_need(entry, self.version)
            if kind == "cc" and entry.get("fallback") and _cc_less(gpu["cc"], need):
                fallback = schemes.get(entry["fallback"], {})
                kind, need = ct_scheme_need(fallback, self.version)
                below = format_cc(ct_scheme_need(entry, self.version)[1])
                label = "%s (falls back to %s below %s)" % (entry.get("label", scheme), fallback.get("label"), below)
            else:
                label = entry.get("label", scheme)
            if kind == "absent":
                self.reason("QUANTIZATION_UNKNOWN_TO_IMAGE",
                            "the checkpoint is compressed-tensors %s and %s has no such scheme ('No "
                            "compressed-tensors compatible scheme was found' at model load): use an image "
                            "whose vLLM has it, or %s" % (label, self.vllm_label(), way_out))
            elif kind == "cc" and _cc_less(gpu["cc"], need):
                if scheme == "nvfp4":
                    way_out = ("dequantize the NVFP4 checkpoint to float16 and serve that without "
                               "quantization, or " + way_out)
                self.reason("QUANTIZATION_UNSUPPORTED_ON_ARCH",
                            "the checkpoint is compressed-tensors %s, which needs compute capability %s in %s, "
                            "and %s is below it: vLLM stops at model load ('The quantization method "
                            "compressed-tensors is not supported for the current GPU. Min capability: %d'): %s"
                            % (label, format_cc(need), self.vllm_label(), where, need[0] * 10 + need[1], way_out))
            elif kind in ("unknown", "unchecked"):
                self.warn("QUANTIZATION_SCHEME_UNCHECKED",
                          "compressed-tensors %s: %s; check that %s runs it" % (
                              label, "its kernel is chosen at model load" if kind == "unchecked"
                              else "its minimum compute capability differs between vLLM releases and the "
                                   "image's vLLM version is unknown", where))
            return
        # Scheme unknown (not read, mixed or new): refuse when every scheme of this release needs more.
        needs = []
        open_ended = False
        for name in sorted(schemes):
            kind, need = ct_scheme_need(schemes[name], self.version)
            if kind == "cc":
                needs.append((need, name))
            elif kind in ("unchecked", "unknown"):
                open_ended = True
        what = "scheme %s" % scheme if scheme else "an unknown scheme"
        if needs and not open_ended and all(_cc_less(gpu["cc"], n) for n, _name in needs):
            self.reason("QUANTIZATION_UNSUPPORTED_ON_ARCH",
                        "the checkpoint is compressed-tensors (%s) and every compressed-tensors scheme of %s needs "
                        "compute capability %s or more (%s), above %s: %s"
                        % (what, self.vllm_label(), format_cc(min(n for n, _name in needs)),
                           ", ".join("%s %s" % (name, format_cc(n)) for n, name in needs), where, way_out))
        else:
            self.warn("QUANTIZATION_SCHEME_UNCHECKED",
                      "the checkpoint is compressed-tensors (%s): its scheme could not be judged for %s "
                      "(run model_facts on the model directory so the gate reads quantization_config)"
                      % (what, where))

    def check_act_dtype(self, key, entry, text):
        table = entry.get("act_dtypes")
        if not table:
            return
        allowed = _value_since(table, self.version)
        if allowed is None:
            return
        dtype = self.effective.get("dtype")
        dtype = dtype.strip().lower() if isinstance(dtype, str) else "auto"
        dtype = DTYPE_ALIASES.get(dtype, dtype)
        if dtype == "auto":
            torch_dtype = self.model["torch_dtype"]
            if torch_dtype is None:
                return
            dtype = "float16" if torch_dtype == "float32" else torch_dtype
        if dtype not in allowed:
            self.reason("QUANTIZATION_DTYPE_UNSUPPORTED",
                        "%s (%s) runs only with dtype %s in %s and the deployment serves %s: vLLM stops at startup "
                        "('%s is not supported for quantization method %s'): set vllm.dtype to %s"
                        % (entry.get("label", key), text, " or ".join(allowed), self.vllm_label(), dtype,
                           "torch." + dtype, text, allowed[0]))

    def check_group_size(self, key, entry, text):
        """GPTQ's exllama kernels step through the rows in fixed blocks and change groups only at a
        block's start (policy group_size_multiple): any other group size serves wrong tokens."""
        multiple = entry.get("group_size_multiple")
        group = self.inputs["model_raw"].get("quant_group_size")
        if not multiple or isinstance(group, bool) or not isinstance(group, int) or group <= 0 or group % multiple == 0:
            return
        self.reason("QUANT_GROUP_SIZE_UNSUPPORTED",
                    "%s, quantization %s, with group_size %d: the 4-bit kernels of %s move to the next group only every %d rows "
                    "(csrc/quantization/gptq/q_gemm.cu), so rows of one group are scaled with another group's "
                    "scale and zero: the server starts and answers wrong tokens, without an error; use a "
                    "checkpoint quantized with a group_size that is a multiple of %d"
                    % (entry.get("label", key), text, group, self.vllm_label(), multiple, multiple))

    def check_startup(self):
        """vLLM's startup validation for what the probes know (_vllm_startup.startup_checks): config
        divisibility by tensor parallelism, context length with rope scaling, scheduler limits, block
        and head sizes of the attention backend the GPU gets, per-release flags."""
        args = dict(self.effective)
        for key in ("tensor_parallel_size", "pipeline_parallel_size", "max_model_len", "max_num_seqs",
                    "gpu_memory_utilization", "cpu_offload_gb"):
            if self.args.get(key) is not None:
                args[key] = self.args[key]
        if not isinstance(args.get("enforce_eager"), bool):
            args["enforce_eager"] = self.enforce_eager()
        args["quantization"] = self.args["quantization_text"]
        gpus = [{"cc": g["cc"], "memory_mib": g["memory_mib"], "name": g["name"]} for g in self.known]
        try:
            findings = startup_checks(self.inputs["model_raw"], args, gpus, self.version)
        except StartupInputError as exc:
            raise GateInputError(str(exc))
        for item in findings:
            if item["level"] == "reason":
                self.reason(item["code"], item["message"])
            else:
                self.warn(item["code"], item["message"])

    def check_parallel(self):
        tp = self.args["tensor_parallel_size"] or 1
        pp = self.args["pipeline_parallel_size"] or 1
        needed = tp * pp
        count = len(self.gpus)
        if self.gpus and needed > count:
            self.reason("TENSOR_PARALLEL_EXCEEDS_GPUS",
                        "tensor_parallel_size %d x pipeline_parallel_size %d needs %d GPUs but the host has %d: "
                        "set tensor_parallel_size to %d or less (with pipeline_parallel_size 1)"
                        % (tp, pp, needed, count, count))
        if tp > 1 and self.inputs["nvlink"] is False:
            self.warn("PCIE_WITHOUT_P2P",
                      "tensor_parallel_size %d all-reduces over PCIe on every layer (no NVLink between the "
                      "GPUs): tensor parallelism helps the model fit, not speed; larger batches "
                      "(max_num_seqs) amortise it" % tp)

    def memory_plan(self):
        tp = self.args["tensor_parallel_size"] or 1
        pp = self.args["pipeline_parallel_size"] or 1
        ranks = tp * pp
        util = self.args["gpu_memory_utilization"]
        if util is None:
            util = float(self.policy.get("memory", {}).get("default_gpu_memory_utilization", 0.9))
        memories = [g["memory_mib"] for g in self.known if g["memory_mib"]]
        total = min(memories) * MIB if memories else None
        profile = self.profile_reserve(min(memories) if memories else None)
        if self.settings.get("reserve_mib") is not None:
            reserve = int(self.settings["reserve_mib"]) * MIB
            reserve_source = "policy.reserve_mib"
        else:
            reserve = profile["bytes"]
            reserve_source = "modelled" if profile["complete"] else "modelled, incomplete (%s)" % ", ".join(
                profile["missing"])
        missing = []
        if self.gpus and not memories:
            missing.append("gpus[].memory_total_mib")
        usable = None
        if total is not None:
            usable = max(0, int(total * util) - reserve)

        # weights
        weights = None
        source = None
        method = self.quant_method()[0]
        q_key, q_entry = resolve_quant(self.policy, method) if method else (None, None)
        dtype_bytes = self.effective_dtype_bytes()
        if self.model["weight_bytes"] is not None:
            weights = self.model["weight_bytes"]
            source = "weight_bytes"
            disk = self.model["torch_dtype"]
            if method is None and disk in self.policy["dtypes"]:
                disk_bytes = self.policy["dtypes"][disk]["bytes"]
                if disk_bytes != dtype_bytes:
                    weights = weights * dtype_bytes // disk_bytes
                    source = "weight_bytes (rescaled from %s to the serving dtype)" % disk
        elif self.model["param_count"] is not None:
            per_param = dtype_bytes
            if method is not None:
                per_param = q_entry.get("bytes_per_param") if q_entry else None
            if per_param:
                weights = int(math.ceil(self.model["param_count"] * per_param))
                source = "param_count"
                if method is not None:
                    self.warn("WEIGHTS_ESTIMATED",
                              "weight bytes estimated as param_count x %.4g B/param for %s (%s); pass "
                              "model.weight_bytes (model_facts) for an exact plan" % (per_param, method, _gib(weights)))
            else:
                missing.append("model.weight_bytes (no bytes-per-param estimate for %s)" % method)
        else:
            missing.append("model.weight_bytes or model.param_count")
        offload = int((self.args["cpu_offload_gb"] or 0) * GIB)
        per_gpu = None
        if weights is not None:
            per_gpu = max(0, int(math.ceil(weights / ranks)) - offload)

        # KV cache per token per GPU
        layers = self.model["num_hidden_layers"]
        kv_heads = self.model["num_key_value_heads"] or self.model["num_attention_heads"]
        head_dim = self.model["head_dim"]
        if head_dim is None and self.model["hidden_size"] and self.model["num_attention_heads"]:
            head_dim = self.model["hidden_size"] // self.model["num_attention_heads"] or None
        kv = self.args["kv_cache_dtype"]
        kv_bytes = KV_CACHE_DTYPES.get(self.effective.get("kv_cache_dtype") if kv else "auto", {}).get("bytes") \
            if kv else None
        if kv_bytes is None:
            kv_bytes = dtype_bytes
        per_token = None
        if layers and kv_heads and head_dim:
            layers_per_gpu = -(-layers // pp)
            per_token = 2 * layers_per_gpu * max(1, kv_heads // tp) * head_dim * kv_bytes
        else:
            for name, value in (("model.num_hidden_layers", layers), ("model.num_key_value_heads", kv_heads),
                                ("model.head_dim", head_dim)):
                if not value:
                    missing.append(name)
        max_len = self.args["max_model_len"] or self.model["max_position_embeddings"]
        if max_len is None:
            missing.append("vllm.max_model_len or model.max_position_embeddings")

        kv_budget = None
        kv_tokens = None
        seq_bytes = None
        fits = None
        concurrent = None
        if usable is not None and per_gpu is not None:
            kv_budget = max(0, usable - per_gpu)
            budget_text = "%s x gpu_memory_utilization %.2f - %s reserve" % (_gib(total), util, _gib(reserve))
            if per_gpu > usable:
                fixes = []
                usable_total = usable
                if usable_total > 0:
                    gpus_needed = int(math.ceil(weights / max(1, usable_total + offload)))
                    if gpus_needed > ranks:
                        fixes.append("spread it over %d or more such GPUs (tensor_parallel_size)" % gpus_needed)
                if method is None and self.model["param_count"]:
                    gptq = self.policy["quantization"].get("gptq", {}).get("bytes_per_param")
                    if gptq:
                        fixes.append("use a 4-bit GPTQ checkpoint (about %s per GPU)"
                                     % _gib(self.model["param_count"] * gptq / ranks))
                fixes.append("offload at least %d GiB per GPU to CPU memory (cpu_offload_gb, slow)"
                             % int(math.ceil((per_gpu - usable) / GIB + (offload / GIB) + 1)))
                fixes.append("raise gpu_memory_utilization")
                self.reason("INSUFFICIENT_VRAM",
                            "the weights need %s per GPU (%s over %d GPU%s%s) but only %s per GPU is usable (%s): %s"
                            % (_gib(per_gpu), _gib(weights), ranks, "s" if ranks > 1 else "",
                               ", minus %s offloaded" % _gib(offload) if offload else "", _gib(usable),
                               budget_text, "; ".join(fixes)))
                fits = False
                concurrent = 0
            if per_token:
                kv_tokens = kv_budget // per_token
                if max_len:
                    seq_bytes = per_token * max_len
                    if fits is None:
                        fits = seq_bytes <= kv_budget
                        concurrent = kv_budget // seq_bytes
                        if not fits:
                            suggest = (kv_tokens // 1024) * 1024 if kv_tokens >= 1024 else (kv_tokens // 16) * 16
                            self.reason("INSUFFICIENT_VRAM",
                                        "the KV cache for one %d-token sequence needs %s per GPU but only %s is "
                                        "left after %s of weights (usable %s per GPU = %s): lower max_model_len "
                                        "to %d or less, raise gpu_memory_utilization, or add GPUs"
                                        % (max_len, _gib(seq_bytes), _gib(kv_budget), _gib(per_gpu),
                                           _gib(usable), budget_text, suggest))
        if missing and (self.gpus or self.model["weight_bytes"] is not None):
            self.warn("MEMORY_PLAN_INCOMPLETE",
                      "the memory plan is incomplete (missing %s); the VRAM check covered only what is known: "
                      "run model_facts on the model directory or fill these in" % ", ".join(missing))

        summary = self.summary(total, usable, per_gpu, per_token, max_len, fits, concurrent)
        return {
            "gpus_used": ranks,
            "tensor_parallel_size": tp,
            "pipeline_parallel_size": pp,
            "gpu_memory_total_bytes": total,
            "gpu_memory_utilization": util,
            "reserve_bytes": reserve,
            "reserve_source": reserve_source,
            "reserve_model": {"bytes": profile["bytes"], "parts": profile["parts"],
                              "profile_tokens": profile["profile_tokens"], "profile_seqs": profile["profile_seqs"],
                              "engine": profile["engine"], "chunked_prefill": profile["chunked_prefill"],
                              "complete": profile["complete"], "missing": profile["missing"],
                              "formula": profile["formula"], "outside_budget": profile.get("outside_budget")},
            "usable_bytes_per_gpu": usable,
            "weights_bytes_total": weights,
            "weights_source": source,
            "cpu_offload_bytes_per_gpu": offload,
            "weights_bytes_per_gpu": per_gpu,
            "kv_cache_dtype_bytes": kv_bytes,
            "kv_bytes_per_token_per_gpu": per_token,
            "kv_cache_bytes_per_gpu": kv_budget,
            "kv_cache_tokens": kv_tokens,
            "max_model_len": max_len,
            "sequence_kv_bytes_per_gpu": seq_bytes,
            "fits_one_sequence": fits,
            "max_concurrent_full_sequences": concurrent,
            "max_num_seqs": self.args["max_num_seqs"],
            "summary": summary,
        }

    def enforce_eager(self):
        value = self.effective.get("enforce_eager")
        if isinstance(value, bool):
            return value
        gpu = self.lowest()
        key = arch_for_cc(self.policy, gpu["cc"]) if gpu else None
        return bool(key and self.policy["architectures"][key].get("enforce_eager"))

    def profile_reserve(self, memory_mib):
        """vLLM's own non-KV reserve (the profile run's activation peak and non-torch memory),
        modelled from the model's config and the arguments (_vllm_memory.profile_reserve)."""
        raw = self.inputs["vllm_raw"]
        gpu = self.lowest()
        keys = ("hidden_size", "intermediate_size", "vocab_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim")
        model = dict((k, self.model[k]) for k in keys)
        model["dtype_bytes"] = self.effective_dtype_bytes()
        chunked = raw.get("enable_chunked_prefill")
        args = {
            "max_model_len": self.args["max_model_len"] or self.model["max_position_embeddings"],
            "max_num_seqs": self.args["max_num_seqs"],
            "max_num_batched_tokens": _maybe_int(raw.get("max_num_batched_tokens")),
            "enable_chunked_prefill": chunked if isinstance(chunked, bool) else None,
            "tensor_parallel_size": self.args["tensor_parallel_size"] or 1,
            "pipeline_parallel_size": self.args["pipeline_parallel_size"] or 1,
            "enforce_eager": self.enforce_eager(),
            "compute_capability": gpu["cc"] if gpu else None,
            "gpu_memory_mib": memory_mib,
            "gpu_name": gpu["name"] if gpu else None,
            "quantization": self.quant_method()[0],
        }
        return profile_reserve(model, args, self.version)

    @staticmethod
    def summary(total, usable, per_gpu, per_token, max_len, fits, concurrent):
        parts = []
        if total is not None:
            parts.append("%s per GPU, %s usable" % (_gib(total), _gib(usable)))
        if per_gpu is not None:
            parts.append("weights %s per GPU" % _gib(per_gpu))
        if per_token is not None:
            parts.append("KV %d KiB per token per GPU" % int(round(per_token / 1024.0)))
        if fits is not None and max_len:
            if fits:
                parts.append("%d full %d-token sequence%s fit" % (concurrent, max_len, "" if concurrent == 1 else "s"))
            else:
                parts.append("one %d-token sequence does not fit" % max_len)
        return "; ".join(parts) if parts else "not enough information for a memory plan"

    def apply_policy_codes(self):
        ignore = set(self.settings.get("ignore_codes") or [])
        promote = set(self.settings.get("promote_warnings") or [])
        kept = []
        for item in self.reasons:
            if item["code"] in ignore:
                self.warnings.append({"code": item["code"],
                                      "message": "(ignored by policy) " + item["message"]})
            else:
                kept.append(item)
        remaining = []
        for item in self.warnings:
            if item["code"] in promote and not item["message"].startswith("(ignored by policy)"):
                kept.append({"code": item["code"], "message": "(promoted by policy) " + item["message"]})
            else:
                remaining.append(item)
        self.reasons = kept
        self.warnings = remaining

    def run(self):
        if self.image["vllm_version_text"] and self.version is None:
            self.warn("VLLM_VERSION_UNKNOWN",
                      "image.vllm_version %r is not a version number; version-dependent checks used the most "
                      "lenient values" % self.image["vllm_version_text"])
        self.check_lost()
        self.check_gpus()
        self.check_compute_capability()
        self.arch_keys_cache = self.arch_keys()
        requirements = self.check_driver(self.arch_keys_cache)
        self.check_image_driver()
        self.check_image_arch()
        self.check_dtype()
        self.check_quantization()
        self.check_parallel()
        self.check_startup()
        plan = self.memory_plan()
        self.apply_policy_codes()
        return {
            "allowed": not self.reasons,
            "reasons": self.reasons,
            "warnings": self.warnings,
            "effective_vllm": self.effective,
            "plan": plan,
            "driver_requirements": requirements,
            "policy_version": POLICY_VERSION,
        }


def _branch_advice(lowest, top):
    """'driver R570 or newer' / 'driver R570 to R580' / 'driver R580' (top: the GPUs' last branch)."""
    if top is None:
        return "driver R%d or newer" % lowest
    if lowest == top:
        return "driver R%d (the last branch for these GPUs)" % top
    return "driver R%d to R%d (R%d is the last branch for these GPUs)" % (lowest, top, top)


def _clip(text, limit=80):
    return text if len(text) <= limit else text[:limit - 3] + "..."
