# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.nvfp4_repack module (or
# scripts/nvfp4_repack.py) instead.
"""GPTQ int4 (vLLM 0.8.5 ``gptq`` loader layout) from NVFP4 checkpoints: sizes and error figures.

The size of one repacked linear weight [out_features N, in_features K] at group size g:
``qweight`` int32 [K/8, N] (K*N/2 bytes), ``qzeros`` int32 [ceil(K/g), N/8], ``scales`` float16
[ceil(K/g), N] and ``g_idx`` int32 [K].
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Group sizes the repacker writes (a multiple of the NVFP4 block of 16 and of the 8 codes per int32).
GROUP_SIZES = (16, 32, 64, 128)
BITS = 4
PACK = 32 // BITS

# Relative RMS error of the repacked weights against the exact NVFP4 values, per group size.
# PROVISIONAL: the prototype "searched" figures (issue 15, NVFP4-quantised Gaussian weights);
# to be replaced by the figures benchmarks/nvfp4_repack.py measures.
EXPECTED_ERROR = {
    16: {"rel_rms": 0.067, "max_abs_rel": None, "source": "provisional: issue 15 prototype (searched), group 16"},
    32: {"rel_rms": 0.079, "max_abs_rel": None, "source": "provisional: issue 15 prototype (searched), group 32"},
    64: {"rel_rms": None, "max_abs_rel": None, "source": "provisional: not measured yet"},
    128: {"rel_rms": None, "max_abs_rel": None, "source": "provisional: not measured yet"},
}


def _ceil_div(a, b):
    return -(-a // b)


def repacked_tensor_bytes(out_features, in_features, group_size):
    """Bytes of qweight + qzeros + scales + g_idx for one linear weight [out_features, in_features]."""
    for label, value in (("out_features", out_features), ("in_features", in_features)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError("%s=%r must be a positive integer" % (label, value))
    if group_size not in GROUP_SIZES:
        raise ValueError("group_size=%r is not one of %s" % (group_size, ", ".join(str(g) for g in GROUP_SIZES)))
    groups = _ceil_div(in_features, group_size)
    qweight = _ceil_div(in_features, PACK) * out_features * 4
    qzeros = groups * _ceil_div(out_features, PACK) * 4
    scales = groups * out_features * 2
    g_idx = in_features * 4
    return qweight + qzeros + scales + g_idx
