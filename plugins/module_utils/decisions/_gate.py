# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.deploy_gate module instead.
"""The deployment gate: evaluate() decides from the policy data (_policy.py) and the probes'
facts whether a vLLM deployment can work on a host, and why not. It raises GateInputError (and
nothing else) on malformed input.

How it is built:

- _gate_inputs.py checks and normalises the inputs (validate_inputs);
- _gate_facts.py makes them one frozen GateFacts (with what follows from them);
- _gate_rules.py holds THE table of rules (RULES: function, codes, source) and the runner; the
  rules are small pure functions in _gate_rules_gpu.py, _gate_rules_driver.py,
  _gate_rules_vllm.py and _gate_rules_memory.py;
- this file: the codes the gate can emit (REASON_CODES, WARNING_CODES: docs and tests read them),
  evaluate() (inputs -> facts -> rules -> the policy's ignore/promote -> the verdict), and the
  names _plan, _doctor and deploy_gate import.

Pure logic: no Ansible imports, no I/O.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate_facts import (
    GIB,
    MIB,
    gate_facts,
    resolve_enforce_eager,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate_inputs import (
    VLLM_DTYPES,
    GateInputError,
    check_plain_value,
    input_errors_only,
    short_text,
    to_bool,
    to_mapping,
    to_str,
    validate_inputs,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate_rules import (
    RULES,
    apply_policy_codes,
    run_rules,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._vllm_startup import (
    STARTUP_REASON_CODES,
    STARTUP_WARNING_CODES,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._policy import POLICY_VERSION, type_name

# What _plan, _doctor and the deploy_gate module import from the gate.
__all__ = ["GIB", "MIB", "REASON_CODES", "WARNING_CODES", "VLLM_DTYPES", "GateInputError", "check_plain_value",
           "evaluate", "input_errors_only", "resolve_enforce_eager", "short_text", "to_bool", "to_mapping",
           "to_str", "validate_inputs"]

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
    "MODEL_INCOMPLETE": "A file of the model directory is missing or malformed (model_facts failed on it: "
                        "a shard model.safetensors.index.json names, config.json, a safetensors header).",
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
    "DTYPE_AUTOFIXED": "dtype auto/bfloat16 was changed, for a GPU below 8.0, to the dtype the release falls back "
                       "to (float16; float32 where it refuses float16 for the model), or kv_cache_dtype to auto "
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
    "RELEASE_BEHAVIOUR_ASSUMED": "The image's vLLM release has no row in the policy's release-behaviour table; "
                                 "it was judged as the release the warning names behaves.",
}

# The startup checks of _vllm_startup.py (vLLM's own config validation) report through the gate.
REASON_CODES.update(STARTUP_REASON_CODES)
WARNING_CODES.update(STARTUP_WARNING_CODES)


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
    """evaluate() without its net: validate, make the facts, run RULES, apply the policy's codes."""
    inputs = validate_inputs(gpus=gpus, driver_version=driver_version, image=image, model=model,
                             vllm=vllm, policy_overrides=policy_overrides, nvlink=nvlink,
                             driver_library_mismatch=driver_library_mismatch,
                             cuda_driver_version=cuda_driver_version, lost_gpus=lost_gpus,
                             require_cuda_enforced=require_cuda_enforced, runtime_mode_why=runtime_mode_why)
    if today is None:
        today = datetime.date.today()
    elif not isinstance(today, datetime.date):
        raise GateInputError("today: expected a datetime.date, got %s" % type_name(today))
    facts, reasons, warnings = run_rules(gate_facts(inputs, today), RULES)
    reasons, warnings = apply_policy_codes(reasons, warnings, facts.settings)
    return {
        "allowed": not reasons,
        "reasons": reasons,
        "warnings": warnings,
        "effective_vllm": dict(facts.effective),
        "plan": facts.plan,
        "driver_requirements": facts.driver_requirements,
        "policy_version": POLICY_VERSION,
    }
