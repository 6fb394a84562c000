# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.deploy_gate module instead.
"""What every gate rule reads and returns (the rules: _gate_rules.RULES).

- :class:`GateFacts`: one frozen input per evaluation: the validated inputs (_gate_inputs), the
  policy, and what follows from them (the GPUs with a known compute capability, one GPU per
  compute capability, the lowest, the policy's row for the image's vLLM release and the
  release-behaviour row it is judged by: ``behaviour`` with ``behaviour_key``, and ``behaviour_how``
  None when it is the release's own row, else how it was chosen, _policy.release_behaviour). The fields
  under "decided by rules" start empty; the runner (_gate_rules.run_rules) derives a new
  GateFacts from a rule's ``decided`` before the next rule runs (``facts.replace(...)``), so a
  later rule reads what an earlier one decided (the effective arguments after an auto-fix, the
  driver's CUDA level) from its input, never from shared state.
- :class:`Findings`: what a rule returns: its reasons and warnings ({code, message}) and the
  facts it decided.
- Helpers more than one rule uses (labels, the quantization method, the serving dtype's bytes)
  and :func:`resolve_enforce_eager`, THE enforce_eager rule that the gate and the plan share.

Pure logic: no Ansible imports, no I/O.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from collections import namedtuple
from types import MappingProxyType

from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._policy import (
    DTYPE_ALIASES,
    arch_for_cc,
    compare_versions,
    format_cc,
    parse_version,
    release_behaviour,
)

GIB = 1024 ** 3
MIB = 1024 ** 2

# The inputs (validated), in GateFacts' field order.
_INPUT_FIELDS = (
    "policy", "settings", "today",
    "gpus", "known", "distinct", "lowest", "lost_gpus",
    "driver", "driver_text", "cuda_driver", "nvlink", "driver_library_mismatch", "require_cuda_enforced",
    "runtime_mode_why",
    "image", "version", "release_key", "release", "behaviour_key", "behaviour", "behaviour_how",
    "model", "model_raw", "args", "vllm_raw",
)
# Decided by rules, with their value before any rule ran.
DECIDED_DEFAULTS = (
    ("effective", None),             # the vLLM arguments after auto-fixes (starts as the request's)
    ("served_dtype", None),          # the dtype vLLM serves in (after dtype auto and the fix), None: unknown
    ("arch_keys", ()),               # the policy's architectures of the GPUs
    ("driver_requirements", None),   # what the driver must be for these GPUs
    ("host_cuda", None),             # the driver's CUDA level (tuple)
    ("host_cuda_exact", False),      # ... as reported (True) or the branch's lower bound (False)
    ("forward_compat", False),       # the image runs only through its cuda-compat libraries
    ("plan", None),                  # the memory plan
)


class GateFacts(namedtuple("GateFacts", _INPUT_FIELDS + tuple(name for name, _default in DECIDED_DEFAULTS))):
    """The frozen input of every gate rule (see the module docstring for the fields)."""

    __slots__ = ()

    def replace(self, **changes):
        """A new GateFacts with ``changes``; ``effective`` stays read-only."""
        if "effective" in changes:
            changes["effective"] = MappingProxyType(dict(changes["effective"]))
        return self._replace(**changes)

    @property
    def vllm_label(self):
        """'vLLM 0.8.5' (the image's version as given) or 'vLLM'."""
        if self.image["vllm_version_text"]:
            return "vLLM %s" % self.image["vllm_version_text"].lstrip("vV")
        return "vLLM"


Findings = namedtuple("Findings", ("reasons", "warnings", "decided"))


def findings(reasons=(), warnings=(), **decided):
    """A rule's answer: reasons and warnings ({code, message}, in the order found) and the
    GateFacts fields it decided (``effective=...``)."""
    return Findings(tuple(reasons), tuple(warnings), decided)


def finding(code, message):
    """One reason or warning."""
    return {"code": code, "message": message}


def release_for(policy, version):
    """(key, entry) of the policy's vllm_releases row for ``version`` (same version), else (None, None)."""
    if version is None:
        return None, None
    for key, entry in policy.get("vllm_releases", {}).items():
        parsed = parse_version(key)
        if parsed is not None and compare_versions(parsed, version) == 0:
            return key, entry
    return None, None


def _distinct(known):
    """One GPU per compute capability (the first of each), lowest first."""
    seen = {}
    for gpu in known:
        seen.setdefault(gpu["cc"], gpu)
    return tuple(seen[cc] for cc in sorted(seen))


def gate_facts(inputs, today):
    """The GateFacts of one evaluation from _gate_inputs.validate_inputs' answer and the day."""
    policy = inputs["policy"]
    known = tuple(g for g in inputs["gpus"] if g["cc"] is not None)
    distinct = _distinct(known)
    version = inputs["image"]["vllm_version"]
    release_key, release = release_for(policy, version)
    behaviour_key, behaviour, behaviour_how = release_behaviour(policy.get("release_behaviour") or {}, version)
    values = dict((name, inputs.get(name)) for name in _INPUT_FIELDS)
    values.update(policy=policy, settings=policy["settings"], today=today, args=inputs["vllm"],
                  gpus=tuple(inputs["gpus"]), known=known,
                  distinct=distinct, lowest=distinct[0] if distinct else None,
                  lost_gpus=tuple(inputs["lost_gpus"]), version=version, release_key=release_key, release=release,
                  behaviour_key=behaviour_key, behaviour=behaviour, behaviour_how=behaviour_how)
    values.update(DECIDED_DEFAULTS)
    values["effective"] = MappingProxyType(dict(inputs["vllm_raw"]))
    return GateFacts(**values)


# ---------------------------------------------------------------------------------------------
# Helpers of more than one rule
# ---------------------------------------------------------------------------------------------


def gib(value):
    """'16.8 GiB'."""
    return "%.1f GiB" % (value / GIB)


def fmt_version(parsed):
    """(12, 4, 1) -> '12.4.1'; '?' when unknown."""
    return ".".join(str(p) for p in parsed) if parsed else "?"


def gpu_label(gpu):
    """'Tesla V100-PCIE-32GB (compute capability 7.0)', or the name alone when it is unknown."""
    if gpu["cc"] is None:
        return gpu["name"]
    return "%s (compute capability %s)" % (gpu["name"], format_cc(gpu["cc"]))


def clip(text, limit=80):
    """``text`` cut to ``limit`` characters with '...'."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def quant_method(facts):
    """(canonical method, as written) the deployment quantizes with: vllm.quantization, else the
    checkpoint's quant_method; (None, None) for none."""
    if facts.args["quantization"]:
        return facts.args["quantization"], facts.args["quantization_text"]
    if facts.model["quant_method"]:
        return facts.model["quant_method"], facts.model["quant_method_text"]
    return None, None


def behaviour_value(facts, kind):
    """The value of the release-behaviour cell ``kind`` (memory_profile, dtype_auto, quant_marlin,
    forward_compat) the image's release is judged by; {} when the policy has none."""
    cell = (facts.behaviour or {}).get(kind) or {}
    return cell.get("value") or {}


def served_dtype(facts):
    """The dtype vLLM serves in: the dtype rule's decision (``served_dtype``), else the effective
    dtype, auto following the checkpoint (float32: float16); None when unknown."""
    if facts.served_dtype:
        return facts.served_dtype
    dtype = facts.effective.get("dtype")
    dtype = dtype.strip().lower() if isinstance(dtype, str) else "auto"
    dtype = DTYPE_ALIASES.get(dtype, dtype)
    if dtype == "auto":
        torch_dtype = facts.model["torch_dtype"]
        return "float16" if torch_dtype == "float32" else torch_dtype
    return dtype


def effective_dtype_bytes(facts):
    """Bytes per element of the dtype the deployment serves in (served_dtype; unknown: float16)."""
    entry = facts.policy["dtypes"].get(served_dtype(facts) or "float16")
    return entry["bytes"] if entry else 2


def resolve_enforce_eager(setting, policy, compute_capabilities):
    """THE enforce_eager rule, for one vLLM instance: (on, why).

    ``setting`` True or False (the request's, or vllm.enforce_eager) stands ("set by the request").
    Anything else is auto: on when the policy's architecture of ANY of the instance's GPUs
    (``compute_capabilities``: tuples, None for unknown) sets ``enforce_eager`` (Volta:
    architectures.volta.enforce_eager, S-REFDEPLOY, S-VLLM-CUDAGRAPH). vLLM's --enforce-eager is
    one engine flag for all the instance's workers, so one GPU that needs eager mode makes the
    whole instance eager. _plan calls this for each instance's argv, the gate for the memory plan
    and the startup checks."""
    if setting is True or setting is False:
        return setting, "set by the request"
    keys = []
    for cc in compute_capabilities:
        key = arch_for_cc(policy, cc) if cc else None
        if key and key not in keys:
            keys.append(key)
    eager = [k for k in keys if policy["architectures"][k].get("enforce_eager")]
    if eager:
        labels = ", ".join(policy["architectures"][k].get("label", k) for k in eager)
        return True, "auto: on for %s (%s)" % (labels, policy["architectures"][eager[0]].get(
            "enforce_eager_why", "the policy's architecture table"))
    return False, "auto: CUDA graphs stay on for these GPUs"


def enforce_eager(facts):
    """Whether the instance runs eager (resolve_enforce_eager over its GPUs and vllm.enforce_eager)."""
    setting = facts.effective.get("enforce_eager")
    return resolve_enforce_eager(setting if isinstance(setting, bool) else None, facts.policy,
                                 [g["cc"] for g in facts.known])[0]
