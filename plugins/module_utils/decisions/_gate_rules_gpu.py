# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.deploy_gate module instead.
"""Gate rules about the GPUs themselves: the image's vLLM version, lost GPUs, the GPUs present,
their compute capability against vLLM's minimum, their architectures, and the GPU count against
the parallelism. Each rule is ``rule_x(facts) -> Findings`` (_gate_facts); _gate_rules.RULES
lists them with their codes and sources.

Pure logic: no Ansible imports, no I/O.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate_facts import (
    clip,
    finding,
    findings,
    gpu_label,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._policy import (
    arch_for_cc,
    describe_behaviour,
    format_cc,
    parse_cc,
    parse_version,
    vllm_min_cc,
)


def _assumed_behaviour(facts):
    """'memory profile: ...; dtype auto: ...; ...' of the release-behaviour row the gate used."""
    labels = (("memory_profile", "memory profile"), ("dtype_auto", "dtype auto"),
              ("quant_marlin", "GPTQ/AWQ on Marlin"), ("forward_compat", "forward compatibility"))
    row = facts.behaviour or {}
    return "; ".join("%s: %s" % (label, describe_behaviour(kind, row[kind]["value"]))
                     for kind, label in labels if kind in row)


_HOW = {"line": "the row of its minor line", "older": "the newest row before it",
        "oldest": "the oldest row (it is older than every row)"}


def rule_vllm_version(facts):
    """VLLM_VERSION_UNKNOWN: image.vllm_version is given but is no version number (judged as the
    default release's behaviour); RELEASE_BEHAVIOUR_ASSUMED: a version without a row of its own in
    the policy's release-behaviour table, judged by another release's row, which the warning names."""
    if facts.image["vllm_version_text"] and facts.version is None:
        return findings(warnings=[finding(
            "VLLM_VERSION_UNKNOWN",
            "image.vllm_version %r is not a version number; version-dependent checks used the most "
            "lenient values, and the release behaviour of vLLM %s (the reference release) was assumed"
            % (facts.image["vllm_version_text"], facts.behaviour_key))])
    if facts.version is not None and facts.behaviour_how is not None and facts.behaviour_key:
        return findings(warnings=[finding(
            "RELEASE_BEHAVIOUR_ASSUMED",
            "vLLM %s has no row in the policy's release-behaviour table, so the gate judged it as vLLM %s "
            "behaves (%s): %s; check these against the release's source, or deploy a release the table "
            "has" % (".".join(str(p) for p in facts.version), facts.behaviour_key, _HOW.get(facts.behaviour_how, "?"),
                     _assumed_behaviour(facts)))])
    return findings()


def rule_lost_gpus(facts):
    """GPU_LOST: gpu_facts found a GPU that fell off the bus (Xid 79)."""
    lost = facts.lost_gpus
    if not lost:
        return findings()
    names = ", ".join((g["bus_id"] or "a GPU at an unknown bus address")
                      + (" (GPU %d)" % g["index"] if g["index"] is not None else "") for g in lost)
    said = lost[0]["message"]
    healthy = len(facts.gpus)
    tp = facts.args["tensor_parallel_size"] or 1
    pp = facts.args["pipeline_parallel_size"] or 1
    fewer = ""
    if healthy:
        fewer = ("; or plan on the %d healthy GPU%s: give the instance those GPUs and set "
                 "tensor_parallel_size x pipeline_parallel_size to at most %d (now %d)"
                 % (healthy, "" if healthy == 1 else "s", healthy, tp * pp))
    return findings(reasons=[finding(
        "GPU_LOST",
        "%s fell off the bus%s (Xid 79: the driver no longer reaches %s; lspci shows it as rev ff): "
        "reboot the host to recover it, and if it drops again check its power, seating and "
        "temperature%s" % (names, " (nvidia-smi: '%s')" % clip(said, 120) if said else "",
                           "it" if len(lost) == 1 else "them", fewer))])


def rule_gpus(facts):
    """NO_GPU, COMPUTE_CAPABILITY_UNKNOWN, HETEROGENEOUS_GPUS, GPU_MEMORY_UNEVEN: the GPUs present
    (none is no reason of its own when GPU_LOST explains it)."""
    if not facts.gpus and facts.lost_gpus:
        return findings()
    if not facts.gpus:
        return findings(reasons=[finding(
            "NO_GPU", "no NVIDIA GPU was found on this host; vLLM's CUDA image needs at least "
                      "one: check that the GPU is seated and visible (lspci, gpu_facts) or "
                      "leave this host out of the deployment")])
    reasons, warnings = [], []
    for gpu in facts.gpus:
        if gpu["cc"] is None:
            reasons.append(finding(
                "COMPUTE_CAPABILITY_UNKNOWN",
                "%s has no known compute capability, so nothing can be checked for it: "
                "install the NVIDIA driver (the probe then reads it from nvidia-smi) or set "
                "compute_capability for this GPU" % gpu["name"]))
    if len(facts.distinct) > 1:
        reasons.append(finding(
            "HETEROGENEOUS_GPUS",
            "the host mixes %s; vLLM's tensor/pipeline parallel workers need identical GPUs: "
            "restrict the deployment to GPUs of one kind (docker --gpus device=...)"
            % " and ".join(gpu_label(g) for g in facts.distinct)))
    memories = [g["memory_mib"] for g in facts.known if g["memory_mib"]]
    if memories and min(memories) < 0.95 * max(memories):
        warnings.append(finding(
            "GPU_MEMORY_UNEVEN",
            "GPU memory sizes differ (%d to %d MiB); the memory plan uses the smallest, and so "
            "does vLLM's KV cache" % (min(memories), max(memories))))
    return findings(reasons, warnings)


def _last_release_for(policy, cc):
    """The first vLLM release (a vllm_min_compute_capability key) whose minimum is above ``cc``."""
    for since in sorted(policy["vllm_min_compute_capability"], key=lambda s: parse_version(s) or (0,)):
        entry = policy["vllm_min_compute_capability"][since]
        value = parse_cc(entry.get("min_cc") if isinstance(entry, dict) else entry)
        if value is not None and cc < value:
            return since
    return None


def rule_compute_capability(facts):
    """COMPUTE_CAPABILITY_TOO_LOW: a GPU below the image's vLLM minimum (or the policy's
    min_compute_capability); the message names the last release line that still runs it."""
    setting = facts.settings.get("min_compute_capability")
    need = parse_cc(setting) if setting else vllm_min_cc(facts.policy, facts.version)
    floor = vllm_min_cc(facts.policy, None)
    reasons = []
    for gpu in facts.distinct:
        if not gpu["cc"] < need:
            continue
        if not setting and not gpu["cc"] < floor:
            last = _last_release_for(facts.policy, gpu["cc"])
            hint = "use an older vLLM image"
            if last:
                hint = "use a vLLM release before %s (e.g. vllm/vllm-openai:v0.19.1, the last line " \
                       "with compute capability %s kernels)" % (last, format_cc(floor))
            reasons.append(finding(
                "COMPUTE_CAPABILITY_TOO_LOW",
                "%s is below %s's minimum compute capability %s: %s"
                % (gpu_label(gpu), facts.vllm_label, format_cc(need), hint)))
        else:
            source = "the policy's min_compute_capability" if setting else "vLLM's minimum"
            reasons.append(finding(
                "COMPUTE_CAPABILITY_TOO_LOW",
                "%s is below %s (%s); vLLM cannot run on it: deploy on GPUs with compute "
                "capability %s or higher (e.g. V100, T4, A100) or leave this host out"
                % (gpu_label(gpu), source, format_cc(need), format_cc(need))))
    return findings(reasons)


def rule_architectures(facts):
    """Decides ``arch_keys`` (the policy's architectures of the GPUs); ARCH_UNKNOWN for a compute
    capability the policy maps to none."""
    keys, warnings = [], []
    for gpu in facts.distinct:
        key = arch_for_cc(facts.policy, gpu["cc"])
        if key is None:
            warnings.append(finding("ARCH_UNKNOWN", "%s maps to no architecture in the policy; driver-branch checks "
                                                    "were skipped for it (extend policy.architectures)" % gpu_label(gpu)))
        elif key not in keys:
            keys.append(key)
    return findings(warnings=warnings, arch_keys=tuple(keys))


def rule_parallel(facts):
    """TENSOR_PARALLEL_EXCEEDS_GPUS: more ranks than GPUs; PCIE_WITHOUT_P2P: tensor parallelism
    without NVLink."""
    tp = facts.args["tensor_parallel_size"] or 1
    pp = facts.args["pipeline_parallel_size"] or 1
    needed = tp * pp
    count = len(facts.gpus)
    reasons, warnings = [], []
    if facts.gpus and needed > count:
        reasons.append(finding(
            "TENSOR_PARALLEL_EXCEEDS_GPUS",
            "tensor_parallel_size %d x pipeline_parallel_size %d needs %d GPUs but the host has %d: "
            "set tensor_parallel_size to %d or less (with pipeline_parallel_size 1)"
            % (tp, pp, needed, count, count)))
    if tp > 1 and facts.nvlink is False:
        warnings.append(finding(
            "PCIE_WITHOUT_P2P",
            "tensor_parallel_size %d all-reduces over PCIe on every layer (no NVLink between the "
            "GPUs): tensor parallelism helps the model fit, not speed; larger batches "
            "(max_num_seqs) amortise it" % tp))
    return findings(reasons, warnings)
