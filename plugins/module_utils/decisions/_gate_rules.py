# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.deploy_gate module instead.
"""THE table of the gate's rules, in the order they run, and the runner.

Each rule is a pure function ``rule_x(facts) -> Findings`` over one frozen
:class:`_gate_facts.GateFacts`. Its row says which reason and warning codes it may emit, which
GateFacts fields it decides (the runner derives the next rules' input from them:
``facts.replace(**decided)``), and where its knowledge comes from. To add a rule: write the
function (in the _gate_rules_<theme>.py it belongs to), add its row here where it must run, and
a test (docs/design.md, "The gate as rules"; test_gate_rules.py checks every row's codes are
documented and that a rule emits only its own).

Pure logic: no Ansible imports, no I/O.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from collections import namedtuple

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate_rules_driver import (
    rule_driver,
    rule_image_arch,
    rule_image_cuda,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate_rules_gpu import (
    rule_architectures,
    rule_compute_capability,
    rule_gpus,
    rule_lost_gpus,
    rule_parallel,
    rule_vllm_version,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate_rules_memory import rule_memory_plan
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate_rules_vllm import (
    rule_compressed_tensors_scheme,
    rule_dtype,
    rule_model_files,
    rule_quant_group_size,
    rule_quantization_act_dtype,
    rule_quantization_arch,
    rule_quantization_in_image,
    rule_quantization_known,
    rule_quantization_mismatch,
    rule_startup,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._vllm_startup import (
    STARTUP_REASON_CODES,
    STARTUP_WARNING_CODES,
)

Rule = namedtuple("Rule", ("name", "check", "reasons", "warnings", "decides", "source"))

RULES = (
    Rule("vllm_version", rule_vllm_version, (), ("VLLM_VERSION_UNKNOWN", "RELEASE_BEHAVIOUR_ASSUMED"), (),
         "image.vllm_version (vllm_image_facts); version tables fall back to their most lenient row; policy "
         "release_behaviour (the row a release without its own is judged by: _policy.release_behaviour)"),
    Rule("model_files", rule_model_files, ("MODEL_INCOMPLETE",), (), (),
         "model_facts: every file of the model directory present and well-formed (the shards "
         "model.safetensors.index.json names, config.json, the safetensors headers); its failure message"),
    Rule("lost_gpus", rule_lost_gpus, ("GPU_LOST",), (), (),
         "gpu_facts lost_gpus: nvidia-smi 'GPU is lost', Xid 79 (NVIDIA Xid catalogue)"),
    Rule("gpus", rule_gpus, ("NO_GPU", "COMPUTE_CAPABILITY_UNKNOWN", "HETEROGENEOUS_GPUS"), ("GPU_MEMORY_UNEVEN",), (),
         "gpu_facts (NVML, or the PCI ID table without a driver); vLLM's parallel workers need identical GPUs"),
    Rule("compute_capability", rule_compute_capability, ("COMPUTE_CAPABILITY_TOO_LOW",), (), (),
         "policy vllm_min_compute_capability (vLLM's CUDA arch lists per release), settings.min_compute_capability"),
    Rule("architectures", rule_architectures, (), ("ARCH_UNKNOWN",), ("arch_keys",),
         "policy architectures[*].cc"),
    Rule("driver", rule_driver,
         ("DRIVER_LIBRARY_MISMATCH", "DRIVER_BRANCH_NOT_ALLOWED", "DRIVER_BRANCH_UNSUPPORTED_FOR_ARCH"),
         ("DRIVER_UNKNOWN", "DRIVER_BRANCH_EOL"), ("driver_requirements", "host_cuda", "host_cuda_exact"),
         "policy architectures[*].max/min_driver_branch and kernel_module (S-ARCHMATRIX, S-OPENMOD), driver_branches "
         "(NVIDIA supported-drivers page), settings.allowed_driver_branches; NVML's driver/library mismatch"),
    Rule("image_cuda", rule_image_cuda, ("DRIVER_TOO_OLD_FOR_IMAGE",),
         ("CUDA_MINOR_VERSION_COMPAT", "FORWARD_COMPAT_REQUIRED", "REQUIRE_CUDA_UNDECIDED"), ("forward_compat",),
         "image NVIDIA_REQUIRE_CUDA as the container toolkit's legacy hook reads it (host_facts "
         "require_cuda_enforcement); policy minor_version_compatibility and cuda_toolkits (S-MVC), "
         "forward_compat_support (S-FWD: data-center GPUs only) and release_behaviour forward_compat"),
    Rule("image_arch", rule_image_arch, ("IMAGE_LACKS_ARCH", "PTX_NEWER_THAN_DRIVER"), ("PTX_JIT_ONLY",), (),
         "image arch list (vllm_image_facts) or policy vllm_releases[*].vllm_arch; policy cuda_min_target_cc, "
         "torch_without_sm70"),
    Rule("dtype", rule_dtype, ("DTYPE_UNSUPPORTED", "KV_CACHE_DTYPE_UNSUPPORTED"),
         ("DTYPE_AUTOFIXED", "DTYPE_AUTO_UNRESOLVED", "KV_CACHE_DTYPE_UNVERIFIED"), ("effective", "served_dtype"),
         "policy release_behaviour dtype_auto (_get_and_verify_dtype / _resolve_auto_dtype per release), "
         "dtypes[*].min_cc, kv_cache_dtypes_by_release (vLLM CacheDType), FP8_KV_CACHE_VERIFIED_MIN_CC; "
         "settings.auto_fix"),
    Rule("quantization_mismatch", rule_quantization_mismatch, ("QUANTIZATION_MISMATCH",), (), (),
         "vllm@0.8.5:vllm/config.py:815-820 (ModelConfig._verify_quantization); policy release_behaviour "
         "quant_marlin (a Marlin method asked for that the checkpoint does not convert to)"),
    Rule("quantization_known", rule_quantization_known, (), ("QUANTIZATION_UNKNOWN_TO_POLICY",), (),
         "policy quantization"),
    Rule("quantization_arch", rule_quantization_arch, ("QUANTIZATION_UNSUPPORTED_ON_ARCH",), (), (),
         "policy quantization[*].min_cc per release (each method's get_min_capability)"),
    Rule("compressed_tensors_scheme", rule_compressed_tensors_scheme,
         ("QUANTIZATION_UNKNOWN_TO_IMAGE", "QUANTIZATION_UNSUPPORTED_ON_ARCH"), ("QUANTIZATION_SCHEME_UNCHECKED",), (),
         "policy compressed_tensors_schemes (CompressedTensorsConfig._check_scheme_supported); model_facts quant_scheme"),
    Rule("quantization_act_dtype", rule_quantization_act_dtype, ("QUANTIZATION_DTYPE_UNSUPPORTED",), (), (),
         "policy quantization[*].act_dtypes (get_supported_act_dtypes; vllm@0.8.5:vllm/config.py:3810-3815) of the "
         "method the release serves with (release_behaviour quant_marlin: GPTQ/AWQ on gptq_marlin/awq_marlin)"),
    Rule("quant_group_size", rule_quant_group_size, ("QUANT_GROUP_SIZE_UNSUPPORTED",), (), (),
         "policy quantization.gptq.group_size_multiple (csrc/quantization/gptq/q_gemm.cu)"),
    Rule("quantization_in_image", rule_quantization_in_image, ("QUANTIZATION_UNKNOWN_TO_IMAGE",), (), (),
         "image quantization_methods (vllm_image_facts: the image's vLLM QUANTIZATION_METHODS)"),
    Rule("parallel", rule_parallel, ("TENSOR_PARALLEL_EXCEEDS_GPUS",), ("PCIE_WITHOUT_P2P",), (),
         "vLLM's world size (tensor x pipeline parallel) against the GPU count; gpu_facts nvlink (nvidia-smi topo)"),
    Rule("startup", rule_startup, tuple(STARTUP_REASON_CODES), tuple(STARTUP_WARNING_CODES), (),
         "_vllm_startup.CHECKS: vLLM 0.8.5 / 0.19.1 startup validation, path:line per check"),
    Rule("memory_plan", rule_memory_plan, ("INSUFFICIENT_VRAM",), ("WEIGHTS_ESTIMATED", "MEMORY_PLAN_INCOMPLETE"),
         ("plan",),
         "_vllm_memory.profile_reserve (vLLM's determine_num_available_blocks) as the release runs it (policy "
         "release_behaviour memory_profile: engine, profile run), policy memory, dtypes, KV_CACHE_TOO_SMALL and "
         "quantization[*].bytes_per_param; docs/deploy_gate.md 'Memory plan'"),
)


def run_rules(facts, rules):
    """Run ``rules`` in order over ``facts``: (the last GateFacts, reasons, warnings), reasons and
    warnings in the order the rules found them. Before the next rule runs, a rule's ``decided``
    fields replace those of its input (a new GateFacts; nothing is changed in place)."""
    reasons, warnings = [], []
    for rule in rules:
        found = rule.check(facts)
        reasons.extend(found.reasons)
        warnings.extend(found.warnings)
        if found.decided:
            facts = facts.replace(**found.decided)
    return facts, reasons, warnings


def apply_policy_codes(reasons, warnings, settings):
    """The policy's last word (settings.ignore_codes, settings.promote_warnings): (reasons,
    warnings). An ignored reason becomes a warning '(ignored by policy) ...', a promoted warning a
    reason '(promoted by policy) ...' (never one that was just ignored)."""
    ignore = set(settings.get("ignore_codes") or [])
    promote = set(settings.get("promote_warnings") or [])
    kept = []
    warnings = list(warnings)
    for item in reasons:
        if item["code"] in ignore:
            warnings.append({"code": item["code"], "message": "(ignored by policy) " + item["message"]})
        else:
            kept.append(item)
    remaining = []
    for item in warnings:
        if item["code"] in promote and not item["message"].startswith("(ignored by policy)"):
            kept.append({"code": item["code"], "message": "(promoted by policy) " + item["message"]})
        else:
            remaining.append(item)
    return kept, remaining
