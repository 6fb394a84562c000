# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.deploy_gate module instead.
#
# The deployment plan: the gate judging the TARGET state of a host. From the request (the one
# variable tree in the inventory: image, model, vLLM arguments, instances, driver) and what the
# probes found, plan() works out what the rollout will leave on the host (the driver the
# nvidia_driver role installs or keeps, the image that will be pulled, every instance's
# arguments), asks _gate.evaluate() about that state once per instance, and returns one verdict
# that is also a plan: per step (driver, runtime, image, model, server) what will happen and why,
# and per instance the effective vLLM arguments (enforce_eager included) and the argv the unit
# runs. Roles carry the plan out; they decide nothing of their own. Pure: no I/O, no Ansible.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import math
import re

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate import (
    GIB,
    GateInputError,
    input_errors_only,
    short_text,
    to_bool,
    to_mapping,
    to_str,
    check_plain_value,
    evaluate,
    resolve_enforce_eager,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._driver import (
    choose_flavour,
    choose_source,
    decide_action,
    distro_key,
    DriverInputError,
    FLAVOURS as DRIVER_FLAVOURS,
    SOURCES as DRIVER_SOURCES,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.converters._gptq import (
    BITS as GPTQ_BITS,
    EXPECTED_ERROR as GPTQ_EXPECTED_ERROR,
    GROUP_SIZES as GPTQ_GROUP_SIZES,
    repacked_tensor_bytes,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._model_store import (
    STORE_REASON_CODES,
    STORE_WARNING_CODES,
    fetch_record,
    read_store,
    store_request,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.probes._host import require_cuda_enforcement
from ansible_collections.labfleet.vllm.plugins.module_utils.probes._model import repacked_model_bytes
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._policy import (
    has_control_chars,
    is_ascii_digits,
    merge_policy,
    parse_cc,
    parse_driver_version,
    PolicyError,
    resolve_quant,
)

PLAN_FORMAT = 1

# Codes this module adds to the gate's (never renamed).
PLAN_REASON_CODES = {
    "DRIVER_CHANGE_NOT_ALLOWED": "The request asks for another driver than the installed one and does not allow "
                                 "the nvidia_driver role to replace it.",
    "DRIVER_NOT_FROM_PACKAGES": "A driver answers on the host but no driver package is installed (NVIDIA's .run "
                                "installer?): the nvidia_driver role does not install packages over it.",
    "DRIVER_KERNEL_MODULE_UNSUITABLE": "The requested kernel-module flavour (request.driver.kernel_module) cannot "
                                       "drive the host's GPUs, or their flavour cannot be chosen.",
    "DRIVER_SOURCE_UNAVAILABLE": "No package source the nvidia_driver role uses ships the requested driver branch "
                                 "for the host's distribution (request.driver.source), or the distribution is not "
                                 "supported.",
    "DRIVER_PACKAGES_UNREADABLE": "The host's package manager could not list the installed packages, so the driver "
                                  "step cannot be planned.",
    "INSTANCE_GPUS_UNAVAILABLE": "An instance asks for GPUs the host does not have.",
    "GPU_RUNTIME_BLOCKED": "The host's NVIDIA container runtime configuration would not start a container "
                           "with GPUs the way vllm_server asks for them (docker --gpus).",
    "FP16_FALLBACK_NOT_APPLICABLE": "request.serving_path is fp16_fallback but the checkpoint is not NVFP4.",
    "GPTQ_REPACK_NOT_APPLICABLE": "request.serving_path is gptq_repack but the checkpoint is not NVFP4.",
    "INSUFFICIENT_DISK": "The FP16 or GPTQ copy of an NVFP4 checkpoint, or the model revision fetched from the model "
                         "store, does not fit on the filesystem it goes to.",
}
# The model store's reasons and warning (request.model_store; _model_store.py).
PLAN_REASON_CODES.update(STORE_REASON_CODES)
PLAN_WARNING_CODES = {
    "DRIVER_NOT_MANAGED": "The driver is not managed by the rollout; the gate judged the installed one.",
    "NVFP4_FP16_FALLBACK": "The NVFP4 checkpoint cannot be served natively here; vllm_server dequantizes it to an "
                           "FP16 copy once and serves that (4x the weight memory).",
    "FP16_COPY_DISK_UNCHECKED": "The free disk space for the FP16 copy is unknown; the converter checks it "
                                "before it writes anything.",
    "NVFP4_GPTQ_REPACK": "The NVFP4 checkpoint cannot be served natively here and its FP16 copy does not fit; "
                         "vllm_server repacks it once to a GPTQ int4 copy and serves that with --quantization gptq "
                         "(about 4.2 to 5.3 bits per weight, a small accuracy cost).",
    "GPTQ_COPY_DISK_UNCHECKED": "The free disk space for the GPTQ copy is unknown; the converter checks it "
                                "before it writes anything.",
}
PLAN_WARNING_CODES.update(STORE_WARNING_CODES)

# How the checkpoint is served (request.serving_path; plan serving_path): as it is, or (an NVFP4
# checkpoint on GPUs the image's vLLM has no FP4 kernels for) from a copy made once on the host:
# FP16 (labfleet.vllm.nvfp4_dequantize) or GPTQ int4 (labfleet.vllm.nvfp4_repack). "auto": native
# when the gate allows it, else the FP16 fallback when the checkpoint is NVFP4 and the copy fits in
# VRAM and on disk, else the GPTQ repack with the smallest group size that fits.
SERVING_PATHS = ("auto", "native", "fp16_fallback", "gptq_repack")
# The serving paths that serve a converted copy of the checkpoint.
CONVERTED_PATHS = ("fp16_fallback", "gptq_repack")
# The native refusals an FP16 copy gets around: no FP4 kernels for these GPUs in the image's vLLM.
FALLBACK_TRIGGERS = ("QUANTIZATION_UNSUPPORTED_ON_ARCH", "QUANTIZATION_UNKNOWN_TO_IMAGE",
                     "QUANTIZATION_DTYPE_UNSUPPORTED")
# The model keys that describe the quantization; the FP16 copy has none of them.
_QUANT_MODEL_KEYS = ("quant_method", "quant_scheme", "quant_bits", "quant_group_size")
# labfleet.vllm.nvfp4_dequantize's manifest in a finished FP16 copy (_nvfp4.MANIFEST_FILE).
FP16_COPY_MANIFEST = "nvfp4_dequantize_manifest.json"
FP16_COPY_SUFFIX = "-fp16"
# The GPTQ copy's default directory: model_path + "-gptq" + the group size.
GPTQ_COPY_SUFFIX = "-gptq"
# The vLLM arguments the GPTQ copy is served with: vLLM's gptq method (exllama kernels), which runs
# in float16 only (policy QUANTIZATION gptq act_dtypes).
REPACK_VLLM_ARGS = {"quantization": "gptq", "dtype": "float16"}
# Which step a reason code blocks (the others are reported as not run).
STEP_OF_CODE = {
    "DRIVER_LIBRARY_MISMATCH": "driver",
    "DRIVER_BRANCH_UNSUPPORTED_FOR_ARCH": "driver",
    "DRIVER_BRANCH_NOT_ALLOWED": "driver",
    "DRIVER_CHANGE_NOT_ALLOWED": "driver",
    "DRIVER_NOT_FROM_PACKAGES": "driver",
    "DRIVER_KERNEL_MODULE_UNSUITABLE": "driver",
    "DRIVER_SOURCE_UNAVAILABLE": "driver",
    "DRIVER_PACKAGES_UNREADABLE": "driver",
    "GPU_RUNTIME_BLOCKED": "runtime",
    "DRIVER_TOO_OLD_FOR_IMAGE": "image",
    "IMAGE_LACKS_ARCH": "image",
    "PTX_NEWER_THAN_DRIVER": "image",
    "QUANTIZATION_UNKNOWN_TO_IMAGE": "image",
    "COMPUTE_CAPABILITY_TOO_LOW": "image",
    "FP16_FALLBACK_NOT_APPLICABLE": "model",
    "GPTQ_REPACK_NOT_APPLICABLE": "model",
    "INSUFFICIENT_DISK": "model",
    "MODEL_INCOMPLETE": "model",
    "MODEL_STORE_UNREACHABLE": "model",
    "MODEL_NOT_IN_STORE": "model",
    "MODEL_MANIFEST_INVALID": "model",
}
STEPS = ("driver", "runtime", "image", "model", "server")

# How vllm_server's unit gives a container its GPUs (templates/vllm.service.j2: --gpus with the
# instance's device list); require_cuda_enforcement reads the path from these arguments.
GPU_RUN_ARGS = ("--gpus", "all")

# vLLM arguments the unit sets itself from other request fields: never in vllm_args.
RESERVED_ARGS = {
    "model": "the model is mounted at /model from request.model_path",
    "served_model_name": "set served_model_name on the request or on the instance",
    "port": "set port on the instance",
    "host": "the container listens on all its addresses; set bind_address on the instance",
    "api_key": "a secret never goes on a command line: use the server role's API key variable (env file)",
}
# The order the unit lists the common flags in; other keys follow alphabetically.
FLAG_ORDER = ("tensor_parallel_size", "pipeline_parallel_size", "dtype", "quantization", "kv_cache_dtype",
              "gpu_memory_utilization", "max_model_len", "max_num_seqs", "cpu_offload_gb")
_ARG_KEY_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}\Z")
_INSTANCE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
# Instance keys this module validates itself; the others pass through to the unit (checked for
# control characters and non-finite numbers here, for the rest by the vllm_server role).
_INSTANCE_OWN_KEYS = ("name", "gpus", "vllm_args", "enforce_eager", "extra_args")
# The host facts shown as versions in the runtime step.
_HOST_VERSION_KEYS = ("docker_server_version", "docker_client_version", "nvidia_ctk_version",
                      "nvidia_container_cli_version", "toolkit_version")
_DEFAULT_INSTANCE = {"name": "vllm", "gpus": "all"}


# ---------------------------------------------------------------------------------------------
# The request
# ---------------------------------------------------------------------------------------------


def _enforce_eager_value(value, where):
    if value is None:
        return "auto"
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    result = to_bool(value, where)
    return "auto" if result is None else result


def _str_list(value, where):
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise GateInputError("%s: expected a list of strings, got %s" % (where, type(value).__name__))
    out = []
    for index, item in enumerate(value):
        text = to_str(item, "%s[%d]" % (where, index))
        if text is None or has_control_chars(text) or (isinstance(item, float) and not math.isfinite(item)):
            raise GateInputError("%s[%d]: expected a one-line string without control characters (newline, "
                                 "carriage return, NUL, tab ...), got %s" % (where, index, short_text(item)))
        out.append(text)
    return out


def _gpu_selection(value, where):
    """'all', or a sorted list of GPU indices from an int, a list or a '0,1' string."""
    if value is None:
        return "all"
    if isinstance(value, str):
        text = value.strip().lower()
        if text.startswith("device="):
            text = text[len("device="):]
        if text in ("all", ""):
            return "all"
        parts = [p for p in re.split(r"[\s,]+", text, flags=re.ASCII) if p]
        if not parts or not all(is_ascii_digits(p) and len(p) <= 4 for p in parts):
            raise GateInputError("%s: expected 'all', a GPU index or a list of indices like [0, 1], got %s"
                                 % (where, short_text(value)))
        return sorted(set(int(p) for p in parts))
    if isinstance(value, bool):
        raise GateInputError("%s: expected 'all' or GPU indices, got %s" % (where, short_text(value)))
    if isinstance(value, int):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise GateInputError("%s: expected 'all' or a non-empty list of GPU indices, got %s" % (where, short_text(value)))
    out = []
    for index, item in enumerate(value):
        if isinstance(item, bool) or not (isinstance(item, int) or (isinstance(item, str) and is_ascii_digits(item.strip())
                                                                    and len(item.strip()) <= 4)):
            raise GateInputError("%s[%d]: expected a GPU index (integer >= 0), got %s" % (where, index, short_text(item)))
        number = int(item)
        if number < 0 or number > 4095:
            raise GateInputError("%s[%d]: expected a GPU index between 0 and 4095, got %d" % (where, index, number))
        out.append(number)
    return sorted(set(out))


def _check_args(args, where, strict=True):
    """vLLM arguments: string keys like max_model_len, one-line scalar values; no reserved key.
    Not ``strict`` (deploy_gate's older ``vllm`` option): any keys, passed through as documented.
    Both: no control character in a key or a string value, no NaN or infinity, no integer beyond
    2**63 (each reaches effective_vllm and the unit's argv)."""
    args = to_mapping(args, where, "vLLM argument names with underscores, e.g. max_model_len")
    for key, value in args.items():
        if has_control_chars(key) or not key.strip():
            raise GateInputError("%s: argument names are one line without control characters, like max_model_len, "
                                 "got %s" % (where, short_text(key)))
        check_plain_value(value, "%s.%s" % (where, key))
    for key, value in args.items() if strict else ():
        if not _ARG_KEY_RE.match(key):
            raise GateInputError("%s: argument names are lower case with underscores (max_model_len), got %s"
                                 % (where, short_text(key)))
        if key in RESERVED_ARGS:
            raise GateInputError("%s.%s: not a vLLM argument to set here: %s" % (where, key, RESERVED_ARGS[key]))
        if isinstance(value, (dict, list, tuple)):
            raise GateInputError("%s.%s: expected a scalar value (string, number or bool), got %s; pass "
                                 "structured values as extra_args" % (where, key, type(value).__name__))
    return dict(args)


def fp16_copy_path(model_path, fp16_model_path=None):
    """Where the FP16 copy of an NVFP4 checkpoint goes: request.fp16_model_path, else the model
    directory's path with "-fp16" appended (beside it, so usually on the same filesystem)."""
    if fp16_model_path:
        return fp16_model_path
    if not model_path or not model_path.rstrip("/"):
        return None
    return model_path.rstrip("/") + FP16_COPY_SUFFIX


def gptq_copy_path(model_path, gptq_model_path=None, group_size=None):
    """Where the GPTQ copy of an NVFP4 checkpoint goes: request.gptq_model_path, else the model
    directory's path with "-gptq<group size>" appended (beside it)."""
    if gptq_model_path:
        return gptq_model_path
    if not model_path or not model_path.rstrip("/") or not group_size:
        return None
    return "%s%s%d" % (model_path.rstrip("/"), GPTQ_COPY_SUFFIX, group_size)


def _copy_path(request, key, model_path, example, what):
    """request[key], a directory for a converted copy: None, or an absolute one-line path outside
    model_path (and not above it)."""
    raw = to_str(request.get(key), "request.%s" % key, allow_numbers=False)
    text = raw.strip() if raw and raw.strip() else None
    if text is None:
        return None
    if has_control_chars(raw) or not text.startswith("/"):
        raise GateInputError("request.%s: expected an absolute one-line path (e.g. %s), got %s"
                             % (key, example, short_text(text)))
    text = text.rstrip("/") or "/"
    if model_path:
        src = model_path.rstrip("/")
        if text == src or text.startswith(src + "/") or src.startswith(text + "/") or text == "/":
            raise GateInputError("request.%s %s must be outside request.model_path %s (and not a directory above "
                                 "it): the %s is written beside the checkpoint, never into it"
                                 % (key, text, model_path, what))
    return text


def _group_size(value):
    """request.gptq_group_size: None (the gate picks), or one of the repacker's group sizes."""
    if value is None or (isinstance(value, str) and value.strip() in ("", "0", "auto")):
        return None
    number = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and is_ascii_digits(value.strip()) and len(value.strip()) <= 4:
        number = int(value.strip())
    if number == 0:
        return None
    if number not in GPTQ_GROUP_SIZES:
        raise GateInputError("request.gptq_group_size: expected one of %s, or 0 (the gate picks the smallest that "
                             "fits), got %s" % (", ".join(str(g) for g in GPTQ_GROUP_SIZES), short_text(value)))
    return number


def _serving_request(request, model_path):
    mode = to_str(request.get("serving_path"), "request.serving_path", allow_numbers=False)
    mode = (mode or "auto").strip().lower()
    if mode not in SERVING_PATHS:
        raise GateInputError("request.serving_path: expected one of %s, got %s"
                             % (", ".join(SERVING_PATHS), short_text(request.get("serving_path"))))
    fp16 = fp16_copy_path(model_path, _copy_path(request, "fp16_model_path", model_path, "/srv/models/model-fp16",
                                                 "FP16 copy"))
    gptq = _copy_path(request, "gptq_model_path", model_path, "/srv/models/model-gptq", "GPTQ copy")
    return mode, fp16, gptq, _group_size(request.get("gptq_group_size"))


def normalize_request(request, vllm=None):
    """The request as the gate plans it, with every key filled in; raises GateInputError.

    ``vllm`` (deploy_gate's older option) is the base of the vLLM arguments; the request's own
    ``vllm_args`` are merged over it.
    """
    request = to_mapping(request, "request", "image, image_digest, model_path, served_model_name, vllm_args, "
                                             "enforce_eager, extra_args, instances, driver, serving_path, "
                                             "fp16_model_path, gptq_model_path, gptq_group_size, model_store")
    out = {}
    for key in ("image", "image_digest", "model_path", "served_model_name"):
        text = to_str(request.get(key), "request.%s" % key, allow_numbers=False)
        if text is not None and has_control_chars(text):
            raise GateInputError("request.%s: expected a one-line string without control characters (newline, "
                                 "carriage return, NUL, tab ...), got %s" % (key, short_text(text)))
        out[key] = text.strip() if text and text.strip() else None
    if out["image_digest"] and not re.match(r"^sha256:[0-9a-f]{64}\Z", out["image_digest"]):
        raise GateInputError("request.image_digest: expected sha256:<64 lower-case hex digits>, got %s"
                             % short_text(out["image_digest"]))
    (out["serving_path"], out["fp16_model_path"], out["gptq_model_path"],
     out["gptq_group_size"]) = _serving_request(request, out["model_path"])
    out["model_store"] = store_request(request.get("model_store"))
    if out["model_store"] and not out["model_path"]:
        raise GateInputError("request.model_path: the model store's revisions are fetched to request.model_path "
                             "(request.model_store.url is set): give the model directory, e.g. /srv/models/model")
    base = _check_args(vllm, "vllm", strict=False)
    base.update(_check_args(request.get("vllm_args"), "request.vllm_args"))
    out["enforce_eager"] = _enforce_eager_value(base.pop("enforce_eager", request.get("enforce_eager")),
                                                "request.enforce_eager")
    out["vllm_args"] = base
    out["extra_args"] = _str_list(request.get("extra_args"), "request.extra_args")

    driver = to_mapping(request.get("driver"), "request.driver", "manage, branch, version, allow_change")
    manage = to_bool(driver.get("manage"), "request.driver.manage")
    branch_text = to_str(driver.get("branch"), "request.driver.branch")
    branch = None
    if branch_text not in (None, ""):
        parsed = parse_driver_version(branch_text)
        if parsed is None or len(parsed) != 1:
            raise GateInputError("request.driver.branch: expected a driver branch like '550' or 'R580', got %s"
                                 % short_text(driver.get("branch")))
        branch = parsed[0]
    version_text = to_str(driver.get("version"), "request.driver.version")
    version = None
    if version_text not in (None, ""):
        parsed = parse_driver_version(version_text)
        if parsed is None or len(parsed) < 2:
            raise GateInputError("request.driver.version: expected an exact driver version like '550.163.01', got %s"
                                 % short_text(driver.get("version")))
        if branch is not None and parsed[0] != branch:
            raise GateInputError("request.driver.version %s is not on request.driver.branch R%d: make them agree "
                                 "or leave one empty" % (version_text.strip(), branch))
        version = version_text.strip().lstrip("rR")
        branch = parsed[0]
    out["driver"] = {
        "manage": True if manage is None else manage,
        "branch": branch,
        "version": version,
        "allow_change": bool(to_bool(driver.get("allow_change"), "request.driver.allow_change")),
        "kernel_module": _choice(driver.get("kernel_module"), "request.driver.kernel_module", DRIVER_FLAVOURS),
        "source": _choice(driver.get("source"), "request.driver.source", DRIVER_SOURCES),
    }

    instances = request.get("instances")
    if instances is None:
        instances = [dict(_DEFAULT_INSTANCE)]
    if not isinstance(instances, (list, tuple)) or not instances:
        raise GateInputError("request.instances: expected a non-empty list of instances ({name, port, gpus, "
                             "vllm_args, ...}), got %s" % short_text(instances))
    names = set()
    normalized = []
    for index, item in enumerate(instances):
        where = "request.instances[%d]" % index
        item = to_mapping(item, where, "name, port, gpus, vllm_args, extra_args, ...")
        name = to_str(item.get("name"), where + ".name", allow_numbers=False)
        if not name or not _INSTANCE_NAME_RE.match(name):
            raise GateInputError("%s.name: expected a unit/container name (letters, digits, . _ -), got %s"
                                 % (where, short_text(item.get("name"))))
        if name in names:
            raise GateInputError("%s.name: %s is used twice; instance names must be unique" % (where, name))
        names.add(name)
        for key, value in item.items():
            if key not in _INSTANCE_OWN_KEYS:
                # bind_address, port, served_model_name, env ...: they reach the unit as they are.
                check_plain_value({key: value}, where)
        entry = dict(item)
        entry["name"] = name
        entry["gpus"] = _gpu_selection(item.get("gpus"), where + ".gpus")
        own = _check_args(item.get("vllm_args"), where + ".vllm_args")
        eager = own.pop("enforce_eager", item.get("enforce_eager", out["enforce_eager"]))
        entry["enforce_eager"] = _enforce_eager_value(eager, where + ".enforce_eager")
        entry["own_vllm_args"] = own
        entry["extra_args"] = out["extra_args"] + _str_list(item.get("extra_args"), where + ".extra_args")
        entry.pop("vllm_args", None)
        normalized.append(entry)
    out["instances"] = normalized
    return out


# ---------------------------------------------------------------------------------------------
# The driver step
# ---------------------------------------------------------------------------------------------


def _choice(value, where, choices):
    """One of ``choices`` (the first, "auto", for None or empty)."""
    text = to_str(value, where)
    if text in (None, ""):
        return choices[0]
    if text.strip() not in choices:
        raise GateInputError("%s: expected one of %s, got %s" % (where, ", ".join(choices), short_text(value)))
    return text.strip()


def plan_driver(current, want, recommended_branch=None, has_gpus=True, packages=None, required_kernel_module=None,
                distribution=None):
    """What the nvidia_driver role will do, and the driver the host will have after it.

    ``current``: the loaded driver version text or None; ``want``: the request's driver
    (normalized). ``packages``: the host's driver packages as labfleet.vllm.host_facts reads them
    ({manager, installed_version, packages, held, error}), None when unknown (the action is then
    decided from the loaded driver). With ``packages``, ``required_kernel_module`` (the gate's
    driver_requirements.kernel_module) and ``distribution`` ({name, major_version, version},
    Ansible's distribution facts) the step also carries how the role installs: kernel_module,
    source, distro. Returns a step dict: action (keep | install | replace | refuse), current,
    target (the version or branch the gate judges), branch, version, managed, why; with
    ``packages`` also installed, kernel_module, source, source_why, distro and problems (the
    refusals, {code, message}).
    """
    parsed = parse_driver_version(current) if current else None
    current_text = current.strip().lstrip("rR") if parsed else None
    step = {"managed": want["manage"], "current": current_text, "branch": None, "version": None}
    if not has_gpus:
        step.update(action="keep", target=current_text, managed=False,
                    why="no NVIDIA GPU on the host: there is no driver to install")
        return step
    if not want["manage"]:
        step.update(action="keep", target=current_text, branch=parsed[0] if parsed else None,
                    version=current_text,
                    why="the driver is not managed by this rollout (request.driver.manage is false): the "
                        "installed one stays and is what the gate judges")
        return step
    branch = want["branch"] or recommended_branch
    version = want["version"]
    if branch is None:
        step.update(action="keep", target=current_text, branch=parsed[0] if parsed else None,
                    version=current_text,
                    why="no driver branch requested and none recommended for these GPUs: nothing to install")
        return step
    step.update(branch=branch, version=version)
    if packages is not None:
        return _driver_step_from_packages(step, want, packages, required_kernel_module, distribution)
    wanted = version or str(branch)
    label = _driver_label(want, branch, version)
    # One rule for the action, the one the nvidia_driver role's package plan applied before (decide_action).
    action = _ACTIONS[decide_action(current_text, branch, version, want["allow_change"])["action"]]
    if action == "install":
        step.update(action="install", target=wanted, why="no driver answers on the host: the role installs %s" % label)
    elif action == "keep":
        step.update(action="keep", target=current_text,
                    why="driver %s is already on the requested branch R%d" % (current_text, branch))
    elif action == "replace":
        step.update(action="replace", target=wanted,
                    why="driver %s is replaced by %s (request.driver.allow_change is true)" % (current_text, label))
    else:
        # Judged as requested, so that what is wrong with the request shows up beside this reason.
        step.update(action="refuse", target=wanted, why=_change_refused(current_text, label))
    return step


# decide_action's answers, as the plan names them.
_ACTIONS = {"install": "install", "keep": "keep", "change": "replace", "refuse": "refuse"}


def _driver_label(want, branch, version):
    label = version or "R%d" % branch
    if not want["branch"] and not version:
        label += " (the newest supported branch for these GPUs)"
    return label


def _change_refused(installed, label):
    return ("driver %s is installed but the request asks for %s, and request.driver.allow_change is false: set it "
            "to true to let the nvidia_driver role replace the driver (nothing was changed)" % (installed, label))


def _driver_step_from_packages(step, want, packages, required_kernel_module, distribution):
    """plan_driver's step when the host's driver packages are known: the action follows the installed
    packages (what the role manages; a driver installed but not loaded yet is kept), a loaded driver
    that no package installed is refused, and the kernel-module flavour and package source are
    chosen here, once (the nvidia_driver role installs what this step says)."""
    branch, version = step["branch"], step["version"]
    label = _driver_label(want, branch, version)
    wanted = version or str(branch)
    problems = []
    error = _opt_text(packages.get("error"))
    installed = _opt_text(packages.get("installed_version"))
    if installed is not None and parse_driver_version(installed) is None:
        raise GateInputError("host.driver_packages.installed_version: expected a driver version like '550.163.01' "
                             "(host_facts reports it), or null, got %s" % short_text(installed))
    step["installed"] = installed
    if error:
        problems.append({"code": "DRIVER_PACKAGES_UNREADABLE",
                         "message": "the installed packages could not be listed (%s), so the driver step cannot be "
                                    "planned: repair the package database (dpkg --audit / rpm --rebuilddb), then run "
                                    "the preflight again" % error})
    decision = decide_action(installed, branch, version, want["allow_change"],
                             None if installed else step["current"])
    action = _ACTIONS[decision["action"]]
    if action == "install":
        why = "no NVIDIA driver package is installed: the role installs %s" % label
    elif action == "keep":
        why = "driver %s is installed, on the requested %s" % (installed, "version" if version else "branch R%d" % branch)
        if step["current"] != installed:
            why += " (%s: the role reboots the host to load it)" % (
                "not loaded yet" if not step["current"] else "driver %s is still loaded" % step["current"])
    elif action == "replace":
        why = "driver %s is replaced by %s (request.driver.allow_change is true)" % (installed, label)
    elif installed:
        why = _change_refused(installed, label)
        problems.append({"code": "DRIVER_CHANGE_NOT_ALLOWED", "message": why})
    else:
        why = decision["msg"]
        problems.append({"code": "DRIVER_NOT_FROM_PACKAGES", "message": why})
    step.update(target=installed if action == "keep" else wanted, why=why)
    step.update(kernel_module=None, source=None, source_why=None, distro=None)
    try:
        step["kernel_module"] = choose_flavour(want["kernel_module"], required_kernel_module)
    except DriverInputError as exc:
        problems.append({"code": "DRIVER_KERNEL_MODULE_UNSUITABLE", "message": str(exc)})
    try:
        distribution = to_mapping(distribution, "host.distribution", "name, major_version, version")
        step["distro"] = distro_key(distribution.get("name"), distribution.get("major_version"),
                                    distribution.get("version"))
        step["source"], step["source_why"] = choose_source(step["distro"], branch, want["source"])
    except DriverInputError as exc:
        problems.append({"code": "DRIVER_SOURCE_UNAVAILABLE", "message": str(exc)})
    # A refusal for the flavour or the source blocks the step through its reason codes (_steps),
    # which keeps the action decided here as planned_action.
    step["action"] = action
    step["problems"] = problems
    return step


def _opt_text(value):
    if value is None or (isinstance(value, str) and value.strip() == ""):
        return None
    if not isinstance(value, str) or has_control_chars(value) or len(value) > 400:
        raise GateInputError("host.driver_packages: expected short one-line texts, got %s" % short_text(value))
    return value.strip()


# ---------------------------------------------------------------------------------------------
# Instances
# ---------------------------------------------------------------------------------------------


def _indices(gpus):
    """Each GPU's index (its ``index`` key, else its position)."""
    out = []
    for position, gpu in enumerate(gpus):
        index = gpu.get("index") if isinstance(gpu, dict) else None
        if isinstance(index, str) and is_ascii_digits(index.strip()) and len(index.strip()) <= 4:
            index = int(index)
        out.append(index if isinstance(index, int) and not isinstance(index, bool) else position)
    return out


def _select_gpus(gpus, selection):
    """(the instance's GPUs, missing indices)."""
    if selection == "all":
        return list(gpus), []
    by_index = dict(zip(_indices(gpus), gpus))
    chosen = [by_index[i] for i in selection if i in by_index]
    missing = [i for i in selection if i not in by_index]
    return chosen, missing


def _flag(key):
    return "--" + key.replace("_", "-")


def arg_key(flag):
    """The vllm_args key of a command-line flag ("--max-num-seqs" -> "max_num_seqs"): argparse's
    dest, the inverse of the flag vllm_argv writes for a key."""
    return str(flag).lstrip("-").replace("-", "_")


def vllm_argv(args, enforce_eager, extra_args):
    """The vLLM command-line arguments for effective ``args`` (every key; None and False are left
    out, True is a bare flag), then --enforce-eager when on, then extra_args as they are."""
    keys = [k for k in FLAG_ORDER if k in args] + sorted(k for k in args if k not in FLAG_ORDER)
    argv = []
    for key in keys:
        value = args[key]
        if value is None or value is False or (isinstance(value, str) and value.strip() == ""):
            continue
        if value is True:
            argv.append(_flag(key))
            continue
        argv.extend([_flag(key), repr(value) if isinstance(value, float) else str(value)])
    if enforce_eager is True:
        argv.append("--enforce-eager")
    argv.extend(extra_args)
    return argv


# ---------------------------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------------------------


def _prefix(items, name, many):
    if not many:
        return [dict(i) for i in items]
    return [{"code": i["code"], "message": "instance %s: %s" % (name, i["message"])} for i in items]


def _add_unique(target, items):
    seen = set((i["code"], i["message"]) for i in target)
    for item in items:
        key = (item["code"], item["message"])
        if key not in seen:
            seen.add(key)
            target.append(item)


def _is_version_text(text):
    """A version as the host facts report it: printable ASCII without spaces ("27.1.1", "1.18.0-rc.1")."""
    return re.match(r"^[0-9A-Za-z.+~_-]{0,64}\Z", text) is not None


def _version_of(value):
    if value in (None, ""):
        return None
    return value


def plan(gpus=None, driver_version=None, image=None, model=None, vllm=None, policy_overrides=None,
         nvlink=None, driver_library_mismatch=False, cuda_driver_version=None, request=None, host=None,
         today=None, lost_gpus=None, fp16_copy=None, gptq_copy=None, model_store=None):
    """The verdict as a plan of the target state. Returns evaluate()'s keys (allowed, reasons,
    warnings, effective_vllm, plan, driver_requirements, policy_version) for the first instance
    and the whole host, plus steps, instances, serving_path, serving, target, deployment and
    summary. ``fp16_copy`` ({complete, disk_free_bytes}) describes the FP16 copy's directory
    (request.fp16_model_path) for the NVFP4 fallback, ``gptq_copy`` ({complete_paths (the GPTQ copy
    directories with a finished manifest), disk_free_bytes}) the GPTQ copy's for the repack.
    ``model_store`` (with request.model_store): the store's answer for the revision's manifest
    ({status, content, msg}, the preflight's GET from the host) and {disk_free_bytes, complete} of
    <model_path>.revisions/<revision>; the manifest's ``gate`` is the model when ``model`` is empty.
    Raises GateInputError, and only that, on malformed input."""
    return input_errors_only(_plan, gpus, driver_version, image, model, vllm, policy_overrides, nvlink,
                             driver_library_mismatch, cuda_driver_version, request, host, today, lost_gpus,
                             fp16_copy, gptq_copy, model_store)


def _plan(gpus, driver_version, image, model, vllm, policy_overrides, nvlink, driver_library_mismatch,
          cuda_driver_version, request, host, today, lost_gpus=None, fp16_copy=None, gptq_copy=None,
          model_store=None):
    if today is None:
        today = datetime.date.today()
    # Without a request (deploy_gate's older callers) the installed driver is judged as it is.
    legacy = request is None
    req = normalize_request({"driver": {"manage": False}} if legacy else request, vllm)
    host = to_mapping(host, "host", "docker_server_version, nvidia_ctk_version, ...")
    for key in _HOST_VERSION_KEYS:
        value = host.get(key)
        if value is not None and not (isinstance(value, str) and _is_version_text(value)):
            raise GateInputError("host.%s: expected a version like '1.17.8' (host_facts reports it), or null, got %s"
                                 % (key, short_text(value)))
    image = to_mapping(image, "image", "cuda_version, require_cuda, arch_list, quantization_methods, vllm_version")
    model = to_mapping(model, "model", "weight_bytes, num_hidden_layers, ...")
    # With a model store the manifest's gate is the model, unless the caller read the model itself.
    store = req["model_store"]
    store_read = read_store(store, model_store) if store else None
    if store_read and store_read["manifest"] and not model:
        model = dict(store_read["manifest"]["gate"])
    fp16_copy = to_mapping(fp16_copy, "fp16_copy", "complete, disk_free_bytes")
    gptq_copy = to_mapping(gptq_copy, "gptq_copy", "complete_paths, disk_free_bytes")
    if gptq_copy.get("complete_paths") is not None:
        gptq_copy["complete_paths"] = _str_list(gptq_copy["complete_paths"], "gptq_copy.complete_paths")
    gpus = gpus if gpus is not None else []
    if not isinstance(gpus, (list, tuple)):
        raise GateInputError("gpus: expected a list of mappings with name, compute_capability and "
                             "memory_total_mib, got %s" % type(gpus).__name__)
    try:
        policy = merge_policy(policy_overrides)
    except PolicyError as exc:
        raise GateInputError(str(exc))
    # Does the runtime check NVIDIA_REQUIRE_CUDA? vllm_server gives containers their GPUs with
    # docker --gpus; the image's environment (NVIDIA_DISABLE_REQUIRE) and the toolkit's mode decide.
    image_env = image.get("env") if isinstance(image.get("env"), dict) else None
    runtime = require_cuda_enforcement(host, gpu_run_args=list(GPU_RUN_ARGS), image_env=image_env)
    toolkit_keys = ("toolkit_version", "nvidia_ctk_version", "nvidia_container_cli_version")
    if runtime["enforced"] is None and not any(host.get(k) for k in toolkit_keys):
        runtime["why"] = ("no NVIDIA container toolkit on the host yet; the container_runtime role installs it, "
                          "and with Docker's default runtime runc, docker --gpus runs its legacy hook")
    common = dict(image=image, model=model, policy_overrides=policy_overrides, nvlink=nvlink, today=today,
                  lost_gpus=lost_gpus, require_cuda_enforced=runtime["enforced"], runtime_mode_why=runtime["why"])

    # The driver the host will have: what the nvidia_driver role installs, keeps or replaces.
    current = to_str(driver_version, "driver_version")
    probe = evaluate(gpus=gpus, driver_version=current, cuda_driver_version=cuda_driver_version,
                     driver_library_mismatch=driver_library_mismatch, vllm=req["vllm_args"], **common)
    requirements = probe["driver_requirements"]
    packages = host.get("driver_packages")
    if packages is not None:
        packages = to_mapping(packages, "host.driver_packages", "manager, installed_version, packages, error")
    driver_step = plan_driver(current, req["driver"], requirements.get("recommended_branch"),
                              has_gpus=bool(gpus or lost_gpus), packages=packages,
                              required_kernel_module=requirements.get("kernel_module"),
                              distribution=host.get("distribution"))
    keep = driver_step["action"] == "keep"
    target_driver = driver_step["target"]
    # The loaded driver's CUDA version holds for the target only when that driver stays loaded; a
    # kept driver's library mismatch is judged as found (the host is refused until it is rebooted).
    target = dict(driver_version=target_driver,
                  cuda_driver_version=cuda_driver_version if keep and target_driver == driver_step["current"] else None,
                  driver_library_mismatch=driver_library_mismatch if keep else False)

    reasons, warnings = [], []
    if store_read and store_read["reason"]:
        reasons.append(store_read["reason"])
    if runtime.get("blocked"):
        reasons.append({"code": "GPU_RUNTIME_BLOCKED", "message": runtime["blocked"]})
    if "problems" in driver_step:
        reasons.extend(dict(p) for p in driver_step["problems"])
    elif driver_step["action"] == "refuse":
        reasons.append({"code": "DRIVER_CHANGE_NOT_ALLOWED", "message": driver_step["why"]})
    if not req["driver"]["manage"] and gpus and not legacy:
        warnings.append({"code": "DRIVER_NOT_MANAGED", "message": driver_step["why"]})
    judge = dict(req=req, gpus=gpus, policy=policy, common=common, target=target)
    native = _judge_instances(**judge)
    serving = _serving_path(req, model, native, judge, fp16_copy, gptq_copy)
    chosen = serving.pop("judged")
    quiet = serving.pop("quiet", False)
    instances = chosen["instances"]
    first = chosen["first"]
    _add_unique(reasons, serving.pop("reasons"))
    _add_unique(reasons, chosen["reasons"])
    _add_unique(warnings, serving.pop("warnings"))
    _add_unique(warnings, chosen["warnings"])
    store_record = None
    if store:
        store_record, store_reasons, store_warnings = fetch_record(store, store_read, serving, model_store)
        _add_unique(reasons, store_reasons)
        _add_unique(warnings, store_warnings)
    allowed = not reasons

    if not allowed:
        serving["path"] = None
        if quiet:
            # Refused for reasons that have nothing to do with how the checkpoint is served.
            serving["why"] = None
    steps = _steps(req, driver_step, image, model, host, instances, reasons, allowed, serving, store_record)
    deployment = dict((k, req[k]) for k in ("image", "image_digest", "model_path", "served_model_name"))
    deployment["instance_names"] = [i["name"] for i in instances]
    # What the unit mounts at /model: the checkpoint, or its FP16 copy.
    deployment["serving_path"] = serving["path"]
    deployment["serving_model_path"] = serving["model_path"] if allowed else None
    out = {
        "allowed": allowed,
        "reasons": reasons,
        "warnings": warnings,
        "effective_vllm": first["effective_vllm"],
        "plan": first["plan"],
        "driver_requirements": requirements,
        "policy_version": first["policy_version"],
        "plan_format": PLAN_FORMAT,
        "steps": steps,
        "instances": instances,
        "serving_path": serving["path"],
        "serving": serving,
        "target": {
            "driver_version": target_driver,
            "driver_branch": driver_step["branch"],
            "image": req["image"],
            "image_digest": req["image_digest"],
            "model_path": req["model_path"],
        },
        "deployment": deployment,
        "container_runtime": runtime,
        "model_store": store_record,
    }
    out["summary"] = summary(out)
    return out


def is_nvfp4(policy, model):
    """Whether the checkpoint described by the gate's ``model`` input is NVFP4 (ModelOpt's
    quant_algo NVFP4, the reference deployment's quant_config.json, or compressed-tensors nvfp4)."""
    method = model.get("quant_method") if isinstance(model, dict) else None
    if not isinstance(method, str) or not method.strip():
        return False
    key = resolve_quant(policy, method)[0]
    if key == "modelopt_fp4":
        return True
    scheme = model.get("quant_scheme")
    return key == "compressed_tensors" and isinstance(scheme, str) and scheme.strip().lower() == "nvfp4"


def _positive_int(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)) and value > 0 and (isinstance(value, int) or math.isfinite(value)):
        return int(value)
    if isinstance(value, str) and is_ascii_digits(value.strip()) and len(value.strip()) <= 19 and int(value) > 0:
        return int(value)
    return None


def _gb(value):
    return "%.1f GB (%.1f GiB)" % (value / 1e9, value / float(GIB))


def _gib(value):
    return "%.1f GiB" % (value / float(GIB))


def _gptq_note(policy, params, ranks):
    entry = resolve_quant(policy, "gptq")[1] or {}
    per_param = entry.get("bytes_per_param")
    if not params or not per_param:
        return None
    needs = [parse_cc(v) for v in (entry.get("min_cc") or {}).values() if v]
    needs = [n for n in needs if n]
    runs = " (GPTQ's exllama kernels run on compute capability %d.%d and up)" % min(needs) if needs else ""
    return ("a GPTQ-int4 checkpoint of the same model: about %s of weights per GPU over %d GPU%s%s"
            % (_gib(params * per_param / ranks), ranks, "" if ranks == 1 else "s", runs))


def _budget_text(plan_):
    return "%s x gpu_memory_utilization %.2f - %s reserve" % (
        _gib(plan_.get("gpu_memory_total_bytes") or 0), plan_.get("gpu_memory_utilization") or 0,
        _gib(plan_.get("reserve_bytes") or 0))


def _vram_ways(plan_, size, gptq=None):
    """The ways out of INSUFFICIENT_VRAM for weights of ``size`` bytes planned as ``plan_``: CPU
    offload with the amount, and the GPU count that would fit (``gptq``: a note to put first)."""
    ranks = plan_.get("gpus_used") or 1
    per_gpu = plan_.get("weights_bytes_per_gpu") or 0
    usable = plan_.get("usable_bytes_per_gpu") or 0
    seq = plan_.get("sequence_kv_bytes_per_gpu") or 0
    ways = [gptq] if gptq else []
    short = per_gpu + seq - usable
    if short > 0:
        offload = int(-(-short // GIB)) + 1
        ways.append("vllm_args.cpu_offload_gb: %d (--cpu-offload-gb %d, per GPU: %d GiB of host RAM in all, and "
                    "every forward pass streams the offloaded weights over PCIe, so it is slow)"
                    % (offload, offload, offload * ranks))
    room = usable - seq
    if room > 0 and size:
        needed = int(-(-size // room))
        if needed > ranks:
            ways.append("%d or more such GPUs (tensor_parallel_size)" % needed)
    return ways


def _fallback_vram_text(plan_, fp16_bytes):
    """The FP16 copy's INSUFFICIENT_VRAM numbers (None when the memory plan lacks them)."""
    ranks = plan_.get("gpus_used") or 1
    per_gpu = plan_.get("weights_bytes_per_gpu")
    usable = plan_.get("usable_bytes_per_gpu")
    if per_gpu is None or usable is None or plan_.get("gpu_memory_total_bytes") is None:
        return None
    size = fp16_bytes if fp16_bytes else per_gpu * ranks
    return ("the FP16 fallback does not fit either: dequantized to FP16 the weights are %s, %s per GPU over %d "
            "GPU%s, and one %s-token sequence of KV cache adds %s per GPU, but only %s per GPU is usable (%s)"
            % (_gb(size), _gib(per_gpu), ranks, "" if ranks == 1 else "s", plan_.get("max_model_len") or "?",
               _gib(plan_.get("sequence_kv_bytes_per_gpu") or 0), _gib(usable), _budget_text(plan_)))


def _fallback_vram_message(plan_, fp16_bytes, params, policy):
    """INSUFFICIENT_VRAM for the FP16 copy: the numbers and the ways out."""
    text = _fallback_vram_text(plan_, fp16_bytes)
    if text is None:
        return None
    size = fp16_bytes if fp16_bytes else plan_["weights_bytes_per_gpu"] * (plan_.get("gpus_used") or 1)
    ways = _vram_ways(plan_, size, _gptq_note(policy, params, plan_.get("gpus_used") or 1))
    return text + ". Alternatives: " + "; ".join(ways) if ways else text


def _fallback_model(model):
    """The gate's model input for the FP16 copy: no quantization, float16, FP16 weight bytes."""
    copy = dict(model)
    for key in _QUANT_MODEL_KEYS:
        copy[key] = None
    copy["torch_dtype"] = "float16"
    fp16 = _positive_int(model.get("fp16_weight_bytes"))
    params = _positive_int(model.get("param_count"))
    copy["weight_bytes"] = fp16 if fp16 else (params * 2 if params else None)
    return copy, copy["weight_bytes"], params


# ---------------------------------------------------------------------------------------------
# The GPTQ repack of an NVFP4 checkpoint
# ---------------------------------------------------------------------------------------------

# The model_facts keys that size the GPTQ copy; at most this many distinct shapes are read.
_MAX_SHAPES = 4096


def linear_shapes(model):
    """model.nvfp4_linear_shapes checked ([{out_features, in_features, count}], positive ints) and
    model.nvfp4_other_bytes, or (None, None) when the shapes are not given; raises GateInputError."""
    shapes = model.get("nvfp4_linear_shapes")
    if shapes is None or shapes == []:
        return None, None
    if not isinstance(shapes, (list, tuple)) or len(shapes) > _MAX_SHAPES:
        raise GateInputError("model.nvfp4_linear_shapes: expected a list of at most %d {out_features, in_features, "
                             "count} (model_facts reports it), got %s" % (_MAX_SHAPES, short_text(shapes)))
    out = []
    for index, item in enumerate(shapes):
        where = "model.nvfp4_linear_shapes[%d]" % index
        item = to_mapping(item, where, "out_features, in_features, count")
        entry = {}
        for key in ("out_features", "in_features", "count"):
            value = item.get(key)
            number = _positive_int(value) if not isinstance(value, float) else None
            if number is None or number > 2 ** 40:
                raise GateInputError("%s.%s: expected a positive integer, got %s" % (where, key, short_text(value)))
            entry[key] = number
        out.append(entry)
    other = model.get("nvfp4_other_bytes")
    other_bytes = 0 if other in (None, 0) else _positive_int(other) if not isinstance(other, float) else None
    if other_bytes is None or other_bytes > 2 ** 62:
        raise GateInputError("model.nvfp4_other_bytes: expected bytes (an integer >= 0), got %s" % short_text(other))
    return out, other_bytes


def _bits_per_weight(shapes, group_size):
    """Bits per weight of the repacked NVFP4 linear weights (qweight, qzeros, scales, g_idx)."""
    params = sum(s["count"] * s["out_features"] * s["in_features"] for s in shapes)
    stored = sum(s["count"] * repacked_tensor_bytes(s["out_features"], s["in_features"], group_size) for s in shapes)
    return round(stored * 8.0 / params, 2) if params else None


def _repack_model(model, group_size, size):
    """The gate's model input for the GPTQ copy: gptq 4-bit at ``group_size``, float16, ``size`` bytes."""
    copy = dict(model)
    for key in _QUANT_MODEL_KEYS:
        copy[key] = None
    copy.update(quant_method="gptq", quant_bits=GPTQ_BITS, quant_group_size=group_size, torch_dtype="float16",
                weight_bytes=size)
    return copy


def served_model(model, verdict):
    """The gate's model input for what the plan serves: the checkpoint itself, its FP16 copy
    (fp16_fallback) or its GPTQ copy at the plan's group size and size (gptq_repack). For a later
    question to the gate about the deployed model (the doctor's memory settings that fit)."""
    path = (verdict or {}).get("serving_path")
    if not isinstance(model, dict) or not model:
        return model
    if path == "fp16_fallback":
        return _fallback_model(model)[0]
    repack = ((verdict or {}).get("serving") or {}).get("gptq_repack") or {}
    if path == "gptq_repack" and repack.get("group_size") and repack.get("repacked_bytes"):
        return _repack_model(model, repack["group_size"], repack["repacked_bytes"])
    return model


def _error_text(error):
    rms = (error or {}).get("rel_rms")
    return ("expected error %.1f%% relative RMS against the NVFP4 weights (%s)" % (rms * 100, error.get("source"))
            if isinstance(rms, (int, float)) else "expected error not measured yet (%s)"
            % ((error or {}).get("source") or "no figure"))


def _candidate(group, judged, size, shapes, extra_reasons):
    plans = [i["memory_plan"] for i in judged["instances"]]
    first = plans[0] if plans else {}
    tokens = [p.get("kv_cache_tokens") for p in plans if p.get("kv_cache_tokens") is not None]
    reasons = list(extra_reasons) + list(judged["reasons"])
    return {
        "group_size": group,
        "allowed": not reasons,
        "reasons": [r["code"] for r in reasons],
        "why": reasons[0]["message"] if reasons else "fits",
        "repacked_bytes": size,
        "bits_per_weight": _bits_per_weight(shapes, group) if shapes else None,
        "weights_bytes_per_gpu": first.get("weights_bytes_per_gpu"),
        "sequence_kv_bytes_per_gpu": first.get("sequence_kv_bytes_per_gpu"),
        "usable_bytes_per_gpu": first.get("usable_bytes_per_gpu"),
        "kv_cache_tokens": min(tokens) if tokens else None,
        "expected_error": dict(GPTQ_EXPECTED_ERROR.get(group) or {}),
        "_judged": judged,
        "_reasons": reasons,
    }


def _repack_candidates(req, model, judge):
    """Every group size tried for the GPTQ copy, smallest first, until one fits: (candidates, shapes)."""
    shapes, other = linear_shapes(model)
    groups = [req["gptq_group_size"]] if req["gptq_group_size"] else list(GPTQ_GROUP_SIZES)
    out = []
    for group in groups:
        size = repacked_model_bytes(shapes, other, group) if shapes else None
        misaligned = [s for s in shapes or () if s["in_features"] % group]
        extra = []
        if misaligned:
            s = misaligned[0]
            extra.append({
                "code": "QUANT_GROUP_SIZE_NOT_ALIGNED",
                "message": "group size %d: %d NVFP4 linear weight%s of shape [%d, %d] %s in_features %d, not a "
                           "multiple of %d, so vLLM's gptq create_weights raises 'The input size is not aligned with "
                           "the quantized weight shape'" % (group, s["count"], "" if s["count"] == 1 else "s",
                                                            s["out_features"], s["in_features"],
                                                            "has" if s["count"] == 1 else "have", s["in_features"],
                                                            group)})
        judged = _judge_instances(model=_repack_model(model, group, size), set_args=REPACK_VLLM_ARGS, **judge)
        out.append(_candidate(group, judged, size, shapes, extra))
        if out[-1]["allowed"]:
            break
    return out, shapes


# How the candidate list names a group size's refusal.
_CANDIDATE_WORDS = {
    "QUANT_GROUP_SIZE_UNSUPPORTED": "the gptq kernels compute it wrong",
    "QUANT_GROUP_SIZE_NOT_ALIGNED": "a layer's input is not a multiple of it",
    "QUANT_OUTPUT_NOT_ALIGNED": "a layer's output is not a multiple of 8",
}


def _candidate_text(cand):
    """One group size's outcome in a few words (the kernel or shape refusal first, then the memory)."""
    group = cand["group_size"]
    if cand["allowed"]:
        return "group size %d fits (KV cache for %s tokens)" % (group, cand["kv_cache_tokens"])
    words = ["%s (%s)" % (_CANDIDATE_WORDS[c], c) if c in _CANDIDATE_WORDS else c
             for c in cand["reasons"] if c != "INSUFFICIENT_VRAM"]
    if "INSUFFICIENT_VRAM" in cand["reasons"] and cand["weights_bytes_per_gpu"] is not None:
        size = "%s, " % _gb(cand["repacked_bytes"]) if cand["repacked_bytes"] else ""
        words.append("%s%s of weights per GPU + %s for one sequence leave KV cache for %s tokens"
                     % (size, _gib(cand["weights_bytes_per_gpu"]), _gib(cand["sequence_kv_bytes_per_gpu"] or 0),
                        cand["kv_cache_tokens"] if cand["kv_cache_tokens"] is not None else "no"))
    elif "INSUFFICIENT_VRAM" in cand["reasons"]:
        words.append("INSUFFICIENT_VRAM")
    return "group size %d: %s" % (group, "; ".join(words))


def _repack_vram_message(cands, fallback_text):
    """INSUFFICIENT_VRAM when no group size fits: what each needs against what is usable, the ways out."""
    sized = [c for c in cands if c["weights_bytes_per_gpu"] is not None]
    last = sized[-1] if sized else cands[-1]
    plan_ = last["_judged"]["first"]["plan"] if last["_judged"]["first"] else {}
    text = ("repacked to GPTQ int4 it does not fit either at the requested max_model_len %s: %s; usable per GPU: "
            "%s (%s)" % (plan_.get("max_model_len") or "?", "; ".join(_candidate_text(c) for c in cands),
                         _gib(plan_.get("usable_bytes_per_gpu") or 0), _budget_text(plan_)))
    if fallback_text:
        text = fallback_text + "; " + text
    ways = _vram_ways(plan_, last["repacked_bytes"]) if plan_ else []
    tokens = last["kv_cache_tokens"]
    if tokens:
        ways.append("vllm_args.max_model_len: %d or less (group size %d)" % (
            (tokens // 1024) * 1024 if tokens >= 1024 else (tokens // 16) * 16, last["group_size"]))
    return text + ". Alternatives: " + "; ".join(ways) if ways else text


def _copy_disk(kind, dest, needed, measured, field, unchecked_code):
    """The disk side of a converted copy at ``dest`` (``kind``: "FP16 copy" or "GPTQ copy"):
    (record, text, reason or None, warning or None). ``measured``: {complete, disk_free_bytes}."""
    measured = dict(measured or {})
    complete = measured.get("complete") is True or dest in (measured.get("complete_paths") or ())
    free = _positive_int(measured.get("disk_free_bytes")) if measured.get("disk_free_bytes") != 0 else 0
    record = {"path": dest, "complete": complete, "disk_free_bytes": free,
              "disk_needed_bytes": 0 if complete else needed}
    if complete:
        return record, ("the %s at %s is already complete (its manifest is there; the converter re-checks it)"
                        % (kind, dest)), None, None
    if needed is None:
        return record, "the %s's size is unknown until model_facts reads the checkpoint" % kind, None, None
    text = "about %s goes to %s" % (_gb(needed), dest)
    if free is None:
        return record, text, None, {
            "code": unchecked_code,
            "message": "the free disk space at %s is unknown, so the gate could not check that the %s (about %s) "
                       "fits; the converter checks it before it writes anything" % (dest, kind, _gb(needed))}
    if free < needed:
        return record, text, {
            "code": "INSUFFICIENT_DISK",
            "message": "the %s of the NVFP4 checkpoint needs about %s at %s, but that filesystem has %s free: free "
                       "%s there or set %s to a directory on a larger filesystem"
                       % (kind, _gb(needed), dest, _gb(free), _gb(needed - free), field)}, None
    return record, text, None, None


def _fp16_option(req, model, judge, fp16_copy, native_why):
    """The FP16 copy as a serving path: {judged, reasons, warnings, why, fields, ok}."""
    policy = judge["policy"]
    dest = req["fp16_model_path"]
    fb_model, fp16_bytes, params = _fallback_model(model)

    def note(memory_plan):
        return _fallback_vram_message(memory_plan, fp16_bytes, params, policy)

    judged = _judge_instances(model=fb_model, drop_args=("quantization",), vram_note=note, **judge)
    record, disk, disk_reason, disk_warning = _copy_disk("FP16 copy", dest, fp16_bytes, fp16_copy,
                                                         "request.fp16_model_path", "FP16_COPY_DISK_UNCHECKED")
    option = {"judged": judged, "reasons": [], "warnings": [], "ok": False, "fp16_bytes": fp16_bytes,
              "fields": {"path": "fp16_fallback", "model_path": dest, "fp16_model_path": dest,
                         "fp16_weight_bytes": fp16_bytes, "fp16_copy": record},
              # The FP16 copy as tried, kept in the plan whichever path is taken: a host group serves it
              # across its members when one host cannot (decisions/_group.py member_share).
              "tried_record": {"model_path": dest, "weight_bytes": fp16_bytes, "copy": record,
                               "disk_problem": disk_reason, "disk_warning": disk_warning}}
    if judged["reasons"]:
        option["why"] = "the FP16 fallback is refused too (%s)" % ", ".join(
            sorted(set(r["code"] for r in judged["reasons"])))
        return option
    if disk_reason:
        option["reasons"].append(disk_reason)
        option["why"] = "the FP16 copy does not fit on disk"
        return option
    if disk_warning:
        option["warnings"].append(disk_warning)
    option["ok"] = True
    option["why"] = ("%s; vllm_server dequantizes the checkpoint once with labfleet.vllm.nvfp4_dequantize and "
                     "serves the FP16 copy without --quantization (%s)" % (native_why, disk))
    option["warnings"].append({"code": "NVFP4_FP16_FALLBACK", "message": option["why"]})
    return option


def _repack_option(req, model, judge, gptq_copy, native_why, fallback):
    """The GPTQ int4 copy as a serving path: {judged, reasons, warnings, why, fields, ok}; ``fallback``
    is the FP16 option it comes after (None when the request forces the repack)."""
    cands, shapes = _repack_candidates(req, model, judge)
    chosen = cands[-1] if cands[-1]["allowed"] else None
    sized = [c for c in cands if c["weights_bytes_per_gpu"] is not None]
    shown = chosen or (sized[-1] if sized else cands[-1])
    group = shown["group_size"]
    dest = gptq_copy_path(req["model_path"], req["gptq_model_path"], group)
    record, disk, disk_reason, disk_warning = _copy_disk("GPTQ copy", dest, shown["repacked_bytes"], gptq_copy,
                                                         "request.gptq_model_path", "GPTQ_COPY_DISK_UNCHECKED")
    judged = shown["_judged"]
    plan_ = judged["first"]["plan"] if judged["first"] else {}
    repack = {
        "group_size": group,
        "bits_per_weight": shown["bits_per_weight"],
        "model_path": dest,
        "repacked_bytes": shown["repacked_bytes"],
        "repacked_bytes_per_gpu": plan_.get("weights_bytes_per_gpu"),
        "repacked_gib_per_gpu": round(plan_["weights_bytes_per_gpu"] / float(GIB), 2)
        if plan_.get("weights_bytes_per_gpu") is not None else None,
        "sized_from": "model.nvfp4_linear_shapes" if shapes else "model.param_count (estimated)",
        "expected_error": shown["expected_error"],
        "kv_cache_tokens": shown["kv_cache_tokens"],
        "max_model_len": plan_.get("max_model_len"),
        "vllm_args": dict(REPACK_VLLM_ARGS, model=dest),
        "candidates": [dict((k, v) for k, v in c.items() if not k.startswith("_")) for c in cands],
    }
    option = {"judged": judged, "reasons": [], "warnings": [], "ok": False,
              "fields": {"path": "gptq_repack", "model_path": dest, "gptq_model_path": dest, "gptq_copy": record,
                         "gptq_repack": repack}}
    if chosen is None:
        fallback_text = None
        if fallback is not None and fallback["judged"]["first"]:
            fallback_text = _fallback_vram_text(fallback["judged"]["first"]["plan"], fallback["fp16_bytes"])
        message = _repack_vram_message(cands, fallback_text)
        reasons = [dict(r, message=message) if r["code"] == "INSUFFICIENT_VRAM" else r for r in shown["_reasons"]]
        # The candidate's own reasons (alignment) and the instances' go through as the judged ones.
        option["judged"] = dict(judged, reasons=[])
        option["reasons"] = reasons
        option["why"] = "no GPTQ group size works here (%s)" % "; ".join(_candidate_text(c) for c in cands)
        return option
    if disk_reason:
        option["reasons"].append(disk_reason)
        option["why"] = "the GPTQ copy (group size %d) does not fit on disk" % group
        return option
    if disk_warning:
        option["warnings"].append(disk_warning)
    skipped = "; ".join(_candidate_text(c) for c in cands[:-1])
    size = _gb(repack["repacked_bytes"]) if repack["repacked_bytes"] else "size unknown"
    if repack["repacked_bytes_per_gpu"] is not None:
        size += ", %s per GPU" % _gib(repack["repacked_bytes_per_gpu"])
    option["ok"] = True
    option["why"] = (
        "%s%s; vllm_server repacks the checkpoint once to GPTQ int4 with labfleet.vllm.nvfp4_repack and serves it "
        "with --quantization gptq --dtype float16: group size %d (%s, ~%s bits per weight, %s) leaves KV cache for "
        "%s tokens at max_model_len %s%s; %s"
        % (native_why, " and " + fallback["why"] if fallback is not None else "", group, size,
           repack["bits_per_weight"] if repack["bits_per_weight"] is not None else "?",
           _error_text(repack["expected_error"]), repack["kv_cache_tokens"], repack["max_model_len"] or "?",
           "; smaller group sizes do not work here (%s)" % skipped if skipped else "", disk))
    option["warnings"].append({"code": "NVFP4_GPTQ_REPACK", "message": option["why"]})
    return option


def _serving_path(req, model, native, judge, fp16_copy, gptq_copy=None):
    """How the checkpoint is served: {path, why, model_path (the directory the unit mounts),
    source_model_path, fp16_model_path, fp16_weight_bytes, fp16_copy, gptq_model_path, gptq_copy,
    gptq_repack, tried, fp16_fallback (the FP16 copy as tried, whether taken or not: {model_path,
    weight_bytes, copy, disk_problem, disk_warning}, or None), reasons, warnings, judged (the
    instances' verdicts this path stands on)}."""
    policy = judge["policy"]
    mode = req["serving_path"]
    source = req["model_path"]
    nvfp4 = is_nvfp4(policy, model)
    native_codes = set(r["code"] for r in native["reasons"])
    triggers = [c for c in FALLBACK_TRIGGERS if c in native_codes]
    out = {"path": "native", "model_path": source, "source_model_path": source, "fp16_model_path": None,
           "fp16_weight_bytes": None, "fp16_copy": None, "gptq_model_path": None, "gptq_copy": None,
           "gptq_repack": None, "tried": ["native"], "fp16_fallback": None, "reasons": [], "warnings": [],
           "judged": native}
    method = model.get("quant_method") or "none"
    if mode in CONVERTED_PATHS and model and not nvfp4:
        code, what = ("FP16_FALLBACK_NOT_APPLICABLE", "dequantized") if mode == "fp16_fallback" else (
            "GPTQ_REPACK_NOT_APPLICABLE", "repacked")
        out["reasons"].append({
            "code": code,
            "message": "request.serving_path is %s, but the checkpoint at %s is not NVFP4 (quant_method %s) "
                       "and only NVFP4 checkpoints are %s: set request.serving_path to auto or native"
                       % (mode, source, method, what)})
        out["why"] = "the checkpoint is not NVFP4, so there is no %s to take" % (
            "FP16 fallback" if mode == "fp16_fallback" else "GPTQ repack")
        return out
    if not (mode in CONVERTED_PATHS or (mode == "auto" and nvfp4 and triggers)):
        if nvfp4 and triggers:
            out["why"] = ("as it is, as request.serving_path says; the FP16 fallback and the GPTQ repack were not "
                          "considered (set request.serving_path to auto to let the gate plan them)")
        elif nvfp4:
            out["why"] = "the image's vLLM has NVFP4 kernels for these GPUs"
            out["quiet"] = True
        else:
            out["quiet"] = True
            out["why"] = "the checkpoint is served as it is (%s)" % (
                "quantization %s" % method if model.get("quant_method") else "not quantized")
        return out

    native_why = ("NVFP4 cannot be served natively here (%s)" % ", ".join(triggers) if triggers
                  else "request.serving_path is %s" % mode)
    # The native refusal stays on record beside whatever a converted copy is refused for.
    native_reasons = [r for r in native["reasons"] if r["code"] in triggers]
    out["tried"] = [] if mode in CONVERTED_PATHS else ["native"]
    fallback = None
    if mode != "gptq_repack":
        fallback = _fp16_option(req, model, judge, fp16_copy, native_why)
        out["tried"].append("fp16_fallback")
        out["fp16_fallback"] = fallback["tried_record"]
        if fallback["ok"] or mode == "fp16_fallback":
            return _take(out, fallback, native_reasons, native_why)
        if linear_shapes(model)[0] is None and not req["gptq_group_size"]:
            # Without the NVFP4 weights' shapes the GPTQ copy cannot be sized: the FP16 refusal stands.
            fallback["why"] += (", and the GPTQ repack was not considered: the NVFP4 weights' shapes are unknown "
                                "(model.nvfp4_linear_shapes, which model_facts reads from the safetensors headers)")
            return _take(out, fallback, native_reasons, native_why)
    repack = _repack_option(req, model, judge, gptq_copy, native_why, fallback)
    out["tried"].append("gptq_repack")
    return _take(out, repack, native_reasons, native_why, fallback)


def _take(out, option, native_reasons, native_why, fallback=None):
    """Fill ``out`` with the option taken (or refused): its fields, reasons, warnings and why."""
    out.update(option["fields"])
    out["judged"] = option["judged"]
    if option["ok"]:
        out["why"] = option["why"]
        out["warnings"].extend(option["warnings"])
        return out
    if option["reasons"] or option["judged"]["reasons"]:
        _add_unique(out["reasons"], native_reasons)
    out["reasons"].extend(option["reasons"])
    parts = [native_why]
    if fallback is not None:
        parts.append(fallback["why"])
    parts.append(option["why"])
    out["why"] = ", and ".join(parts)
    return out


def _judge_instances(req, gpus, policy, common, target, model=None, drop_args=(), vram_note=None, set_args=None):
    """evaluate() once per instance of the request: {instances, reasons, warnings, first}.
    ``model`` replaces the model of ``common`` (a converted copy); ``drop_args`` are vLLM arguments
    left out (quantization for the FP16 copy), ``set_args`` vLLM arguments set over the request's
    (quantization gptq and dtype float16 for the GPTQ copy); ``vram_note(memory_plan)`` rewrites the
    message of INSUFFICIENT_VRAM (None: keep it)."""
    reasons, warnings, instances = [], [], []
    many = len(req["instances"]) > 1
    first = None
    base = dict(common, **target)
    if model is not None:
        base["model"] = model
    for inst in req["instances"]:
        chosen, missing = _select_gpus(gpus, inst["gpus"])
        args = dict(req["vllm_args"])
        args.update(inst["own_vllm_args"])
        for key in drop_args:
            args.pop(key, None)
        args.update(set_args or {})
        verdict = evaluate(gpus=chosen, vllm=args, **base)
        inst_reasons = list(verdict["reasons"])
        if missing:
            # The host has GPUs, only not the ones named: that is the reason, not NO_GPU.
            inst_reasons = [r for r in inst_reasons if r["code"] != "NO_GPU" or not gpus]
            have = ", ".join(str(i) for i in _indices(gpus)) or "none"
            inst_reasons.insert(0, {
                "code": "INSTANCE_GPUS_UNAVAILABLE",
                "message": "GPU index %s is not on this host (its GPU indices: %s): set this instance's gpus "
                           "to indices that exist, or 'all'" % (", ".join(str(m) for m in missing), have)})
        if vram_note is not None:
            text = vram_note(verdict["plan"])
            if text:
                inst_reasons = [dict(r, message=text) if r["code"] == "INSUFFICIENT_VRAM" else r
                                for r in inst_reasons]
        eager, eager_why = resolve_enforce_eager(
            inst["enforce_eager"], policy,
            [parse_cc(g.get("compute_capability")) if isinstance(g, dict) else None for g in chosen])
        effective = dict(verdict["effective_vllm"])
        entry = dict((k, v) for k, v in inst.items() if k not in ("own_vllm_args", "enforce_eager"))
        entry.update(
            allowed=not inst_reasons,
            gpu_indices=_indices(chosen),
            gpu_count=len(chosen),
            vllm_args=dict(effective, enforce_eager=eager),
            enforce_eager=eager,
            enforce_eager_why=eager_why,
            argv=vllm_argv(effective, eager, inst["extra_args"]),
            served_model_name=inst.get("served_model_name") or req["served_model_name"],
            memory_plan=verdict["plan"],
            reasons=inst_reasons,
            warnings=verdict["warnings"],
        )
        instances.append(entry)
        _add_unique(reasons, _prefix(inst_reasons, inst["name"], many))
        _add_unique(warnings, _prefix(verdict["warnings"], inst["name"], many))
        if first is None:
            first = verdict
    return {"instances": instances, "reasons": reasons, "warnings": warnings, "first": first}


def _blocked(step, reasons, allowed):
    if allowed:
        return None
    codes = [r["code"] for r in reasons if STEP_OF_CODE.get(r["code"], "server") == step]
    return codes


def _copy_step(copy, dest, kind, convert_why):
    """The model step's record of a converted copy: keep a complete one, else convert."""
    complete = bool((copy or {}).get("complete"))
    return {"action": "keep" if complete else "convert", "dest": dest,
            "why": "the %s at %s is complete; the converter re-checks its manifest" % (kind, dest) if complete
            else convert_why}


def _store_step(step, store):
    """The model step when the model comes from the model store (request.model_store): fetch what
    the plan serves, the revision or the copy the store's converter makes once, or keep it."""
    fetch = store["fetch"]
    what = "%s/%s" % (store["name"], fetch["revision"])
    complete = store["disk_needed_bytes"] == 0
    size = "%.1f GB" % (fetch["bytes"] / 1e9) if fetch["bytes"] is not None else "size unknown"
    step.update(action="keep" if complete else "fetch", dest=fetch["dest"], name=store["name"],
                revision=fetch["revision"], store=store["url"],
                why="%s from the model store is already on the host at %s" % (what, fetch["dest"]) if complete
                else "%s (%s) is fetched from the model store %s to %s before the server starts"
                % (what, size, store["url"], fetch["dest"]))
    for key in ("fp16_copy", "gptq_copy"):
        if step.get(key):
            # Converted once on the store's host, after the preflight: nothing is converted here.
            step[key].update(action=step["action"], why="the model store's converter makes %s once from %s/%s; "
                             "this host fetches it, it converts nothing" % (what, store["name"], store["revision"]))


def _steps(req, driver_step, image, model, host, instances, reasons, allowed, serving=None, store=None):
    steps = {}
    driver = dict(driver_step)
    steps["driver"] = driver

    docker = _version_of(host.get("docker_server_version")) or _version_of(host.get("docker_client_version"))
    toolkit = _version_of(host.get("nvidia_ctk_version")) or _version_of(host.get("nvidia_container_cli_version"))
    if docker and toolkit:
        steps["runtime"] = {"action": "keep", "current": {"docker": docker, "toolkit": toolkit},
                            "why": "Docker %s and the NVIDIA Container Toolkit %s are installed: the "
                                   "container_runtime role keeps them and merges daemon.json" % (docker, toolkit)}
    else:
        missing = [n for n, v in (("Docker", docker), ("the NVIDIA Container Toolkit", toolkit)) if not v]
        steps["runtime"] = {"action": "install", "current": {"docker": docker, "toolkit": toolkit},
                            "why": "the container_runtime role installs %s" % " and ".join(missing)}

    state = image.get("state")
    ref = req["image"] or image.get("reference")
    judged = "the image on the host" if state == "present" else (
        "the shipped profile of %s" % ref if image.get("profile_matched") else "nothing known about the image yet")
    if state == "present":
        steps["image"] = {"action": "keep", "ref": ref, "digest": req["image_digest"] or image.get("digest"),
                          "judged_from": judged, "why": "%s is on the host" % ref}
    else:
        steps["image"] = {"action": "pull", "ref": ref, "digest": req["image_digest"], "judged_from": judged,
                          "why": "%s is not on the host yet: the vllm_server role pulls or loads it%s, then the "
                                 "gate checks it again" % (ref, " (pinned %s)" % req["image_digest"]
                                                           if req["image_digest"] else "")}

    present = bool(model)
    steps["model"] = {"action": "keep" if present else "stage", "path": req["model_path"],
                      "why": ("the model at %s was read (%s)" % (req["model_path"], ", ".join(sorted(model))[:120])
                              if present else "no model at %s yet: the vllm_server role stages it (or it must be "
                                              "there before the server starts), then the gate checks it again"
                              % req["model_path"])}
    if serving and serving.get("fp16_model_path"):
        steps["model"]["fp16_copy"] = _copy_step(
            serving["fp16_copy"], serving["fp16_model_path"], "FP16 copy",
            "vllm_server dequantizes the NVFP4 checkpoint %s to FP16 at %s (labfleet.vllm.nvfp4_dequantize) before the "
            "server starts" % (req["model_path"], serving["fp16_model_path"]))
    if serving and serving.get("gptq_model_path"):
        group = (serving.get("gptq_repack") or {}).get("group_size")
        steps["model"]["gptq_copy"] = _copy_step(
            serving["gptq_copy"], serving["gptq_model_path"], "GPTQ copy",
            "vllm_server repacks the NVFP4 checkpoint %s to GPTQ int4 (group size %s) at %s "
            "(labfleet.vllm.nvfp4_repack) before the server starts" % (req["model_path"], group,
                                                                       serving["gptq_model_path"]))
        steps["model"]["gptq_copy"]["group_size"] = group

    if store and store.get("fetch"):
        _store_step(steps["model"], store)

    steps["server"] = {"action": "deploy", "instances": [i["name"] for i in instances],
                       "why": "the vllm_server role writes one unit per instance with the argv of this plan, "
                              "restarts it when it changed, and smoke-tests it"}
    for name in STEPS:
        codes = _blocked(name, reasons, allowed)
        if codes is None:
            continue
        steps[name]["planned_action"] = steps[name]["action"]
        steps[name]["action"] = "refuse" if codes else "skip"
        steps[name]["reasons"] = codes
    return steps


def summary(verdict):
    """One line: what the rollout will do on this host."""
    steps = verdict["steps"]
    if not verdict["allowed"]:
        return "refused (%s): nothing changes" % ", ".join(r["code"] for r in verdict["reasons"])
    driver = steps["driver"]
    target = driver["target"] if driver["version"] else "R%s" % driver["branch"]
    parts = []
    if driver["action"] == "install":
        parts.append("install driver %s" % target)
    elif driver["action"] == "replace":
        parts.append("replace driver %s with %s" % (driver["current"], target))
    elif driver["current"]:
        parts.append("keep driver %s" % driver["current"])
    parts.append("%s Docker + toolkit" % steps["runtime"]["action"])
    parts.append("%s %s" % (steps["image"]["action"], steps["image"]["ref"] or "the image"))
    model = steps["model"]
    parts.append("%s %s/%s from the model store %s %s" % (model["action"], model["name"], model["revision"],
                                                          "to" if model["action"] == "fetch" else "at", model["dest"])
                 if "revision" in model else "%s model %s" % (model["action"], model["path"] or "?"))
    # A copy from the model store is the model part above; one made on the host is said here.
    store = "revision" in model
    copy = model.get("fp16_copy")
    if copy and not store:
        parts.append(("dequantize NVFP4 to FP16 at %s" if copy["action"] == "convert" else "keep the FP16 copy at %s")
                     % copy["dest"])
    copy = model.get("gptq_copy")
    if copy and not store:
        parts.append(("repack NVFP4 to GPTQ int4 (group size %s) at %s" % (copy["group_size"], copy["dest"])
                      if copy["action"] == "convert" else "keep the GPTQ copy at %s" % copy["dest"]))
    parts.append("deploy %s" % ", ".join(
        "%s (%s)" % (i["name"], " ".join(i["argv"])) for i in verdict["instances"]))
    return "; ".join(parts)
