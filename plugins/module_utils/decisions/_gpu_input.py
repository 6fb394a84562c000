# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.deploy_gate module instead.
"""The list of GPUs that the gate (_gate_inputs.validate_inputs) and vLLM's startup checks
(_vllm_startup.startup_checks) take, checked one way for both: a list of mappings, each with a
compute capability that _policy.parse_cc reads. Each caller names its own fields and its own
error class, so every message keeps its caller's words ("gpus[0].compute_capability: ...").

Pure logic: no Ansible imports, no I/O.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._policy import parse_cc, short_repr, type_name


def gpu_entries(gpus, expected, error):
    """Yield (index, where, entry) for each entry of ``gpus`` (None: no GPUs), ``where`` being
    "gpus[<index>]". Raises ``error`` when ``gpus`` is not a list ("gpus: expected a list of
    mappings with <expected>, got str") or, once the loop reaches it, when an entry is not a
    mapping ("gpus[1]: expected a mapping with <expected>, got str"): lazily, so that the caller's
    checks of gpus[0] come before the shape of gpus[1], as they did when each caller had its loop."""
    if gpus is None:
        return
    if not isinstance(gpus, (list, tuple)):
        raise error("gpus: expected a list of mappings with %s, got %s" % (expected, type_name(gpus)))
    for index, gpu in enumerate(gpus):
        where = "gpus[%d]" % index
        if not isinstance(gpu, dict):
            raise error("%s: expected a mapping with %s, got %s" % (where, expected, type_name(gpu)))
        yield index, where, gpu


def gpu_compute_capability(gpu, key, where, expected, error):
    """The compute capability under ``key`` of a GPU entry as a tuple ((7, 0)); None when absent or
    empty. Raises ``error`` ("gpus[0].cc: expected <expected>, got 'seven'") when
    _policy.parse_cc cannot read it."""
    raw = gpu.get(key)
    if raw is None or raw == "":
        return None
    cc = parse_cc(raw)
    if cc is None:
        raise error("%s.%s: expected %s, got %s" % (where, key, expected, short_repr(raw)))
    return cc
