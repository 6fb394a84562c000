# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.nvfp4_repack module (or
# scripts/nvfp4_repack.py) instead.
"""Repack an NVFP4 checkpoint into GPTQ int4 groups for vLLM's ``gptq`` loader, streaming.

The layout, read from vLLM v0.8.5 ``vllm/model_executor/layers/quantization/gptq.py``
(``GPTQLinearMethod.create_weights``) and ``csrc/quantization/gptq/q_gemm.cu`` (exllama kernels),
for a linear weight W [N out_features, K in_features] at group size g:

- ``qweight`` int32 [K/8, N]: ``qweight[i, n]`` holds the 4-bit codes of W[n, 8i .. 8i+7], code of
  input 8i+j in bits 4j .. 4j+3 (packed along the input dimension, packed_dim 0).
- ``qzeros`` int32 [K/g, N/8]: ``qzeros[k, m]`` holds the stored zero points of outputs 8m .. 8m+7,
  output 8m+j in bits 4j .. 4j+3 (packed along the output dimension, packed_dim 1).
- ``scales`` float16 [K/g, N] (params_dtype; vLLM serves gptq in float16 only).
- ``g_idx`` int32 [K] = k // g: created by the loader, so the checkpoint must hold it; with
  ``desc_act: false`` the loader replaces it by an empty tensor (groups in order).
- Weight = scale * (code - (stored_zero + 1)): the kernels add 1 to every stored zero
  (``dequant_4bit_8_prep_zero(zeros[0] + 1, ...)``; the GPTQ "v1" checkpoint convention, whose
  packer stores zero - 1). The 0.8.5 loader reads no ``checkpoint_format``: a "gptq_v2"
  checkpoint (zero stored as is) is silently read one step off. So the effective zero is 1 .. 16,
  never 0; the repacker writes 1 .. 15 (ZERO_MAX: a stored 15 is read differently elsewhere).
- The loader refuses ``input_size_per_partition % group_size != 0`` and
  ``output_size_per_partition % 8 != 0`` (also under tensor parallelism: column-parallel layers
  split N, row-parallel layers split K); 2, 3, 4 and 8 bits exist, this repacker writes 4.

The NVFP4 values come from plugins/module_utils/formats/_nvfp4.py (the same reader and arithmetic as the
dequantizer): value = e2m1 code x float32 block scale (e4m3 x / or / per-tensor scale). Per group,
scale s and zero z are chosen to minimise the squared error against those exact values: candidate
steps on the e2m1 lattice of the group (amax/6 x 0.45 .. 1.0, a min/max candidate among them),
each candidate's assignment refitted by least squares (s = sum(v (q - z)) / sum((q - z)^2), the
error in closed form), the best one refined (zero +-1, two Lloyd rounds), then s rounded to float16
and the codes re-rounded with the stored s. See docs/nvfp4.md ("Repacking to GPTQ").
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import concurrent.futures
import math
import re

from ansible_collections.labfleet.vllm.plugins.module_utils.formats import _nvfp4
from ansible_collections.labfleet.vllm.plugins.module_utils.formats._nvfp4 import Nvfp4Error
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._policy import QUANTIZATION as _QUANTIZATION

np = _nvfp4.np

# Group sizes the repacker writes (a multiple of the NVFP4 block of 16 and of the 8 codes per int32).
GROUP_SIZES = (16, 32, 64, 128)
# Those vLLM's gptq kernels compute right: its 4-bit exllama kernels change groups only every
# group_size_multiple rows (the knowledge base, _policy.QUANTIZATION["gptq"], source S-VLLM-EXLLAMA),
# so a group-16 copy is a valid GPTQ checkpoint that vLLM would serve with wrong weights.
VLLM_GROUP_MULTIPLE = _QUANTIZATION["gptq"]["group_size_multiple"]
VLLM_GROUP_SIZES = tuple(g for g in GROUP_SIZES if g % VLLM_GROUP_MULTIPLE == 0)
BITS = 4
PACK = 32 // BITS
MAXQ = (1 << BITS) - 1
# The kernels' zero-point offset of a GPTQ "v1" checkpoint (effective zero = stored + 1).
ZERO_OFFSET = {"gptq": 1, "gptq_v2": 0}
CHECKPOINT_FORMAT = "gptq"
# Effective zero points the repacker writes: 1 .. 15, stored 0 .. 14. vLLM's kernels read a stored
# 15 as 16 (nibble + 1), but GPTQModel (and transformers through it) turns v1 into v2 by adding
# 0x11111111 to the whole int32 word, so a stored 15 carries into the next output's zero there
# (gptqmodel 7.7.0 utils/model.py convert_gptq_v1_to_v2_format_module). A zero of 16 only serves a
# group with no value above -1 step, so leaving it out costs nothing measurable.
ZERO_MIN, ZERO_MAX = 1, MAXQ

MANIFEST_FILE = "nvfp4_repack_manifest.json"
REPACK_VERSION = "1"
# NVFP4 elements decoded and searched at a time (float32 work buffers of a few times this size).
TILE_ELEMENTS = 1 << 18
# Elements of one column slab (its codes are kept as uint8 until its qweight rows are written).
SLAB_ELEMENTS = 1 << 22
# Candidate steps of the search, in units of the group's amax / 6 (the NVFP4 block scale when the
# group's largest code is 6): measured on NVFP4-quantised Gaussian weights, the refitted optimum
# lies between 0.45 and 1.0 at every group size (docs/nvfp4.md).
SEARCH_STEPS = tuple(0.45 * (1.0 / 0.45) ** (i / 11.0) for i in range(12))
# Tensor-parallel sizes reported as possible for the output (vLLM's loader refuses the others).
TP_SIZES = (1, 2, 4, 8)
# Linear layers vLLM splits along the input dimension (row-parallel) in the Llama family; other
# layers split the output dimension. Names not listed here are checked both ways.
_ROW_PARALLEL = ("o_proj", "down_proj", "dense", "out_proj", "fc2", "w2", "wo", "c_proj")
_COLUMN_PARALLEL = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "qkv_proj", "gate_up_proj",
                    "query_key_value", "fc1", "w1", "w3", "c_attn", "c_fc")
# Layers that stay float16: vLLM's gptq config quantizes the LM head only with lm_head: true.
FP16_LAYERS = ("lm_head",)

# Error of the repacked weights against the exact NVFP4 values, per group size, as measured by
# benchmarks/nvfp4_repack.py (`make bench-repack`, seed 15; docs/performance.md, "NVFP4 -> GPTQ
# repacker"): a ModelOpt-quantised NVFP4 layer of Gaussian rows (log-normal row scales; 1024 x 4096
# gate_proj sample, 4.2 M weights), the converter's search. rel_rms = sqrt(sum err^2 / sum w^2);
# max_abs_rel = max |err| / max |w| over the sample (it grows with the sample's size). Issue 15's
# prototype: 0.067 (group 16) and 0.079 (group 32) searched, 0.073 and 0.084 min/max.
_MEASURED = "benchmarks/nvfp4_repack.py (make bench-repack), NVFP4-quantised Gaussian rows, search"
EXPECTED_ERROR = {
    16: {"rel_rms": 0.0608, "max_abs_rel": 0.093,
         "source": _MEASURED + " (group 16 is not served right by vLLM's gptq kernels: VLLM_GROUP_SIZES)"},
    32: {"rel_rms": 0.0757, "max_abs_rel": 0.106, "source": _MEASURED},
    64: {"rel_rms": 0.0872, "max_abs_rel": 0.127, "source": _MEASURED},
    128: {"rel_rms": 0.0958, "max_abs_rel": 0.198, "source": _MEASURED},
}


def _ceil_div(a, b):
    return -(-a // b)


def repacked_tensor_bytes(out_features, in_features, group_size):
    """Bytes of qweight + qzeros + scales + g_idx for one linear weight [out_features, in_features]."""
    for label, value in (("out_features", out_features), ("in_features", in_features)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError("%s=%r must be a positive integer" % (label, value))
    if group_size not in GROUP_SIZES or isinstance(group_size, bool):
        raise ValueError("group_size=%r is not one of %s" % (group_size, ", ".join(str(g) for g in GROUP_SIZES)))
    groups = _ceil_div(in_features, group_size)
    qweight = _ceil_div(in_features, PACK) * out_features * 4
    qzeros = groups * _ceil_div(out_features, PACK) * 4
    scales = groups * out_features * 2
    g_idx = in_features * 4
    return qweight + qzeros + scales + g_idx


def parallel_split(name):
    """"row", "column" or None (unknown: check both) for a linear layer name like model.layers.0.mlp.down_proj."""
    last = name.rsplit(".", 1)[-1]
    if last in _ROW_PARALLEL:
        return "row"
    if last in _COLUMN_PARALLEL:
        return "column"
    return None


def shape_problems(name, out_features, in_features, group_size, tensor_parallel=1):
    """What vLLM's gptq loader refuses for this layer at this tensor-parallel size (empty when it loads).

    Column-parallel layers split out_features (each part a multiple of 8, the qzeros packing),
    row-parallel ones split in_features (each part a whole number of groups); without tensor
    parallelism both rules apply to the whole layer."""
    problems = []
    split = parallel_split(name) if tensor_parallel > 1 else None
    out_part = out_features // tensor_parallel if split in ("column", None) else out_features
    in_part = in_features // tensor_parallel if split in ("row", None) else in_features
    if tensor_parallel > 1 and split in ("column", None) and out_features % tensor_parallel:
        problems.append("%s: out_features %d does not split into %d equal parts" % (name, out_features, tensor_parallel))
    elif out_part % PACK:
        problems.append("%s: out_features %d%s is not a multiple of %d (vLLM's gptq loader packs 8 zero points per "
                        "int32 along the outputs and refuses it)"
                        % (name, out_part, " per GPU" if out_part != out_features else "", PACK))
    if tensor_parallel > 1 and split in ("row", None) and in_features % tensor_parallel:
        problems.append("%s: in_features %d does not split into %d equal parts" % (name, in_features, tensor_parallel))
    elif in_part % group_size:
        problems.append("%s: in_features %d%s is not a multiple of group_size %d (vLLM's gptq loader needs whole "
                        "groups and refuses it)%s"
                        % (name, in_part, " per GPU" if in_part != in_features else "", group_size,
                           "; choose a group_size that divides it" if in_part % 16 == 0 else ""))
    return problems


# ---------------------------------------------------------------------------------------------
# Packing (GPTQ v1, as vLLM's gptq loader and kernels read it)
# ---------------------------------------------------------------------------------------------


def _pack(values, axis, what):
    """uint8 4-bit values [R, C] -> int32 with 8 of them per word along ``axis`` (0: rows, 1:
    columns), the first of each 8 in bits 0..3, the j-th in bits 4j..4j+3."""
    values = np.asarray(values)
    if values.ndim != 2 or values.shape[axis] % PACK:
        raise Nvfp4Error("%s: shape %r, the packed dimension must be a multiple of %d" % (what, values.shape, PACK))
    if values.size and (values.min() < 0 or values.max() > MAXQ):
        raise Nvfp4Error("%s: values must lie in 0..%d" % (what, MAXQ))
    rows, cols = values.shape
    if axis == 0:
        parts = values.reshape(rows // PACK, PACK, cols).transpose(1, 0, 2)
    else:
        parts = values.reshape(rows, cols // PACK, PACK).transpose(2, 0, 1)
    out = np.zeros(parts.shape[1:], dtype=np.uint32)
    for j in range(PACK):
        out |= parts[j].astype(np.uint32) << np.uint32(BITS * j)
    return out.view(np.int32)


def _unpack(words, axis):
    words = np.asarray(words).view(np.uint32)
    rows, cols = words.shape
    out = np.empty((PACK, rows, cols), dtype=np.uint8)
    for j in range(PACK):
        out[j] = (words >> np.uint32(BITS * j)) & np.uint32(MAXQ)
    if axis == 0:
        return out.transpose(1, 0, 2).reshape(rows * PACK, cols)
    return out.transpose(1, 2, 0).reshape(rows, cols * PACK)


def pack_qweight(codes):
    """uint8 codes [K, N] (0..15, input-major) -> qweight int32 [K/8, N], input 8i+j in bits 4j..4j+3."""
    return _pack(codes, 0, "qweight")


def unpack_qweight(qweight):
    """qweight int32 [K/8, N] -> uint8 codes [K, N]."""
    return _unpack(qweight, 0)


def pack_qzeros(stored):
    """uint8 stored zero points [G, N] (0..15) -> qzeros int32 [G, N/8], output 8m+j in bits 4j..4j+3."""
    return _pack(stored, 1, "qzeros")


def unpack_qzeros(qzeros):
    """qzeros int32 [G, N/8] -> uint8 stored zero points [G, N]."""
    return _unpack(qzeros, 1)


def stored_zeros(zeros, checkpoint_format=CHECKPOINT_FORMAT):
    """Effective zero points (what the weight subtracts) -> the 4-bit values a checkpoint stores.

    "gptq" (v1, what vLLM's gptq kernels read): stored = zero - 1, so only 1..16 can be stored; a
    zero of 0 would wrap to 15 and be read as 16. "gptq_v2": stored = zero, 0..15."""
    offset = _zero_offset(checkpoint_format)
    zeros = np.asarray(zeros)
    low, high = offset, MAXQ + offset
    if zeros.size and (zeros.min() < low or zeros.max() > high):
        raise Nvfp4Error("zero points must lie in %d..%d for checkpoint_format %s (found %d..%d)"
                         % (low, high, checkpoint_format, zeros.min(), zeros.max()))
    return (zeros - offset).astype(np.uint8)


def _zero_offset(checkpoint_format):
    if checkpoint_format not in ZERO_OFFSET:
        raise Nvfp4Error("checkpoint_format=%r is not one of %s" % (checkpoint_format, ", ".join(sorted(ZERO_OFFSET))))
    return ZERO_OFFSET[checkpoint_format]


def loader_problems(quantization_config):
    """What vLLM 0.8.5's gptq loader does wrong with (or refuses in) this quantization_config; empty
    when it serves it as written. The loader reads bits, group_size, desc_act (required) and lm_head,
    dynamic (optional); it reads no checkpoint_format and always adds 1 to the stored zeros."""
    qc = quantization_config if isinstance(quantization_config, dict) else {}
    problems = []
    if str(qc.get("quant_method", "")).lower() != "gptq":
        problems.append("quant_method is %r, not gptq" % (qc.get("quant_method"),))
    for key in ("bits", "group_size", "desc_act"):
        if key not in qc:
            problems.append("%s is missing (the loader requires it)" % key)
    if "bits" in qc and qc["bits"] not in (2, 3, 4, 8):
        problems.append("bits=%r: the loader supports 2, 3, 4 and 8" % (qc["bits"],))
    group = qc.get("group_size")
    if "group_size" in qc and (isinstance(group, bool) or not isinstance(group, int) or (group <= 0 and group != -1)):
        problems.append("group_size=%r is not a positive integer or -1" % (group,))
    fmt = qc.get("checkpoint_format", CHECKPOINT_FORMAT)
    if fmt != CHECKPOINT_FORMAT:
        problems.append("checkpoint_format=%r: vLLM 0.8.5 ignores it and reads every zero point as stored + 1 "
                        "(GPTQ v1), so a %s checkpoint would be served one quantization step off" % (fmt, fmt))
    return problems


def dequantize_gptq(qweight, qzeros, scales, g_idx=None, checkpoint_format=CHECKPOINT_FORMAT):
    """float16 [N, K] (the nn.Linear weight) of a GPTQ 4-bit layer: scale * (code - zero), the
    product of the float16 scale and the small integer computed exactly and rounded once to float16,
    as a float16 multiply does (the exllama reconstruction's __hmul2, a torch fp16 multiply)."""
    codes = unpack_qweight(qweight).astype(np.int32)                      # [K, N]
    zeros = unpack_qzeros(qzeros).astype(np.int32) + _zero_offset(checkpoint_format)   # [G, N]
    scales = np.asarray(scales, dtype=np.float16)
    rows = codes.shape[0]
    if g_idx is None:
        group = rows // zeros.shape[0]
        g_idx = np.arange(rows) // group
    g_idx = np.asarray(g_idx, dtype=np.int64)
    step = (codes - zeros[g_idx]).astype(np.float32)
    return (scales[g_idx].astype(np.float32) * step).astype(np.float16).T


# ---------------------------------------------------------------------------------------------
# Choosing scale and zero per group
# ---------------------------------------------------------------------------------------------


def _refit(u, t, z, tot, su, work):
    """Codes of u [G, g] at step t and zero z (float32 [G]), their least-squares step and its squared error."""
    g = u.shape[1]
    inv = np.divide(1.0, t, out=np.zeros_like(t), where=t > 0)
    np.multiply(u, inv[:, None], out=work)
    np.add(work, z[:, None], out=work)
    np.rint(work, out=work)
    np.clip(work, 0, MAXQ, out=work)
    vq = np.einsum("ij,ij->i", u, work)
    qq = np.einsum("ij,ij->i", work, work)
    sq = np.einsum("ij->i", work)   # several times faster than sum(axis=1) on short rows
    num = vq - z * su
    den = qq - 2.0 * z * sq + g * z * z
    ok = (num > 0) & (den > 0) & (t > 0)
    step = np.divide(num, den, out=np.zeros_like(num), where=ok)
    err = tot - num * step
    return ok, step, err


def minmax_candidate(u):
    """(step, zero) of plain min/max quantization per group (GPTQ's RTN baseline): the range
    [min(x, 0), max(x, 0)] in 15 steps, zero = round(-min / step) kept in ZERO_MIN .. ZERO_MAX."""
    low = np.minimum(u.min(axis=1), 0)
    high = np.maximum(u.max(axis=1), 0)
    t = ((high - low) / MAXQ).astype(np.float32)
    zero = np.divide(-low, t, out=np.zeros_like(t), where=t > 0)
    return t, np.clip(np.rint(zero), ZERO_MIN, ZERO_MAX).astype(np.float32)


def fit_groups(u, method="search"):
    """Step t and effective zero z (float32 [G], z in ZERO_MIN..ZERO_MAX = 1..15) per group of u (float32 [G, g]) so
    that t * (q - z), q = clip(round(u / t + z), 0, 15), is close to u in the least-squares sense.

    method "minmax": the min/max baseline; "search": the candidates described in the module
    docstring, never worse (in the refitted error) than min/max. A group of zeros gets t = 0."""
    u = np.ascontiguousarray(u, dtype=np.float32)
    count = u.shape[0]
    tot = np.einsum("ij,ij->i", u, u)
    su = np.einsum("ij->i", u)
    work = np.empty_like(u)
    best_err = np.full(count, np.inf, dtype=np.float32)
    best_t = np.zeros(count, dtype=np.float32)
    best_z = np.full(count, 8.0, dtype=np.float32)

    def consider(t, z):
        with np.errstate(over="ignore", invalid="ignore"):   # a step too small for 1/t: its codes are NaN, not ok
            ok, step, err = _refit(u, t, z, tot, su, work)
        better = ok & (err < best_err)
        np.copyto(best_err, err, where=better)
        np.copyto(best_t, step, where=better)
        np.copyto(best_z, z, where=better)

    t, z = minmax_candidate(u)
    if method == "minmax":
        return t, z
    if method != "search":
        raise ValueError("method=%r is not minmax or search" % (method,))
    consider(t, z)
    low, high = u.min(axis=1), u.max(axis=1)
    middle = (low + high) * np.float32(0.5)
    unit = np.maximum(high, -low) / np.float32(6.0)
    for factor in SEARCH_STEPS:
        t = unit * np.float32(factor)
        zero = np.divide(-middle, t, out=np.zeros_like(t), where=t > 0) + np.float32(MAXQ / 2.0)
        consider(t, np.clip(np.rint(zero), ZERO_MIN, ZERO_MAX).astype(np.float32))
    for shift in (-1.0, 1.0):
        consider(best_t.copy(), np.clip(best_z + np.float32(shift), ZERO_MIN, ZERO_MAX))
    for _round in range(2):
        consider(best_t.copy(), best_z.copy())
    return best_t, best_z


# ---------------------------------------------------------------------------------------------
# One layer
# ---------------------------------------------------------------------------------------------


class ErrorStats(object):
    """Squared error, squared reference, largest error and largest reference of repacked weights."""

    def __init__(self):
        self.err2 = 0.0
        self.ref2 = 0.0
        self.max_err = 0.0
        self.max_ref = 0.0
        self.count = 0

    def add(self, deq, ref):
        diff = deq - ref
        self.err2 += float(np.einsum("ij,ij->", diff, diff, dtype=np.float64))
        self.ref2 += float(np.einsum("ij,ij->", ref, ref, dtype=np.float64))
        if diff.size:
            self.max_err = max(self.max_err, float(np.abs(diff).max()))
            self.max_ref = max(self.max_ref, float(np.abs(ref).max()))
        self.count += diff.size

    def merge(self, other):
        self.err2 += other.err2
        self.ref2 += other.ref2
        self.max_err = max(self.max_err, other.max_err)
        self.max_ref = max(self.max_ref, other.max_ref)
        self.count += other.count

    def summary(self):
        """{rel_rms, max_abs, max_abs_rel}: sqrt(sum err^2 / sum ref^2), max |err|, max |err| / max |ref|."""
        return {"rel_rms": math.sqrt(self.err2 / self.ref2) if self.ref2 > 0 else 0.0,
                "max_abs": self.max_err, "max_abs_rel": self.max_err / self.max_ref if self.max_ref > 0 else 0.0}


def _nan_position(values, name, r0, c0):
    rows, cols = np.nonzero(~np.isfinite(values))
    return Nvfp4Error("%s: NVFP4 value at row %d, column %d is not finite (a NaN block-scale code 0x7F/0xFF, or a "
                      "block scale beyond float32): GPTQ int4 cannot represent it. The checkpoint is damaged; "
                      "re-download or re-quantize it (nvfp4_dequantize keeps NaN blocks as NaN)"
                      % (name, r0 + int(rows[0]), c0 + int(cols[0])))


def _tile(packed, scale_codes, table, group_size, method, name, r0, c0, stats):
    """Codes uint8 [n, w], stored zeros uint8 [n, w/g] and float16 scales [n, w/g] of one tile."""
    lut = _nvfp4.float_pairs()
    values = lut[np.asarray(packed)].reshape(packed.shape[0], -1)          # e2m1 values [n, w]
    rows, width = values.shape
    block = table[np.asarray(scale_codes)]                                  # block scales [n, w/16]
    np.multiply(values.reshape(rows, -1, _nvfp4.BLOCK), block[:, :, None], out=values.reshape(rows, -1, _nvfp4.BLOCK))
    if not np.isfinite(block).all() or not np.isfinite(values).all():
        raise _nan_position(values, name, r0, c0)
    per = group_size // _nvfp4.BLOCK
    top = np.abs(block).reshape(rows, width // group_size, per).max(axis=2)            # [n, w/g]
    if not np.isfinite(top).all():
        raise _nan_position(values, name, r0, c0)
    inv_top = np.divide(np.float32(1.0), top, out=np.zeros_like(top), where=top > 0)
    u = (values.reshape(rows, -1, group_size) * inv_top[:, :, None]).reshape(-1, group_size)
    step, zero = fit_groups(u, method)
    with np.errstate(over="ignore"):
        scale16 = (step * top.reshape(-1)).astype(np.float16)
    if not np.isfinite(scale16).all():
        where = int(np.nonzero(~np.isfinite(scale16))[0][0])
        raise Nvfp4Error("%s: the GPTQ scale of the group at row %d, column %d exceeds float16 (%.3g > 65504): "
                         "the weights are too large for a float16 GPTQ checkpoint"
                         % (name, r0 + where // (width // group_size), c0 + (where % (width // group_size)) * group_size,
                            float(step[where] * top.reshape(-1)[where])))
    s32 = scale16.astype(np.float32).reshape(rows, -1)
    inv = np.divide(np.float32(1.0), s32, out=np.zeros_like(s32), where=s32 != 0)
    z = zero.reshape(rows, -1)
    grouped = values.reshape(rows, -1, group_size)
    codes = grouped * inv[:, :, None]
    codes += z[:, :, None]
    np.rint(codes, out=codes)
    np.clip(codes, 0, MAXQ, out=codes)
    deq = (codes - z[:, :, None]) * s32[:, :, None]
    stats.add(deq.reshape(rows, width), values)
    return codes.astype(np.uint8).reshape(rows, width), stored_zeros(z.astype(np.int32)), scale16.reshape(rows, -1)


# Threads that search tiles at the same time (numpy releases the GIL in its loops): the CPUs this
# process may use, at most _nvfp4.MAX_WORKERS (the FP16 converter's workers count the same way).
default_workers = _nvfp4.default_workers


def repack_layer(packed, scale_codes, tensor_scale, divide, group_size, name="tensor", method="search",
                 write=None, stats=None, workers=None):
    """Repack one NVFP4 layer (uint8 [N, K/2], e4m3 codes [N, K/16], per-tensor scale) into GPTQ.

    ``write(bytes-like)`` receives qweight, qzeros, scales and g_idx in that order, little-endian,
    exactly as repacked_tensor_bytes counts them, column slab by column slab (memory: one slab of
    uint8 codes, the float16 scales and zeros of the layer, float32 tiles of TILE_ELEMENTS); without
    it the arrays are returned. ``stats`` (ErrorStats) accumulates the error against the exact NVFP4
    values. ``workers`` threads (default default_workers()) search the tiles of a slab; the output
    does not depend on their number. Returns {qweight, qzeros, scales, g_idx} (arrays, or None when
    written) and stats."""
    _nvfp4._need_numpy()
    rows, in_features = _nvfp4._check_shapes(packed, scale_codes, name)
    if group_size not in GROUP_SIZES:
        raise Nvfp4Error("group_size=%r is not one of %s" % (group_size, ", ".join(str(g) for g in GROUP_SIZES)))
    problems = shape_problems(name, rows, in_features, group_size)
    if rows == 0 or in_features == 0:
        problems.append("%s: the layer has no elements (shape [%d, %d])" % (name, rows, in_features))
    if problems:
        raise Nvfp4Error("; ".join(problems))
    table = _nvfp4.layer_block_scales(scale_codes, tensor_scale, divide, name)
    stats = stats if stats is not None else ErrorStats()
    groups = in_features // group_size
    scales = np.empty((groups, rows), dtype=np.float16)
    zeros = np.empty((groups, rows), dtype=np.uint8)
    kept = [] if write is None else None
    width = min(in_features, max(group_size, (SLAB_ELEMENTS // rows) // group_size * group_size))
    tile_rows = max(1, TILE_ELEMENTS // width)
    workers = max(1, int(workers or default_workers()))
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers) if workers > 1 else None
    try:
        for c0 in range(0, in_features, width):
            c1 = min(in_features, c0 + width)
            slab = np.empty((rows, c1 - c0), dtype=np.uint8)
            tiles = []
            for r0 in range(0, rows, tile_rows):
                r1 = min(rows, r0 + tile_rows)
                job = (packed[r0:r1, c0 // 2:c1 // 2], scale_codes[r0:r1, c0 // _nvfp4.BLOCK:c1 // _nvfp4.BLOCK],
                       table, group_size, method, name, r0, c0, ErrorStats())
                tiles.append((r0, r1, job[-1], pool.submit(_tile, *job) if pool else job))
            # in order, so that the bytes and the error sums do not depend on the threads
            for r0, r1, tile_stats, work in tiles:
                codes, stored, scale16 = work.result() if pool else _tile(*work)
                stats.merge(tile_stats)
                slab[r0:r1] = codes
                zeros[c0 // group_size:c1 // group_size, r0:r1] = stored.T
                scales[c0 // group_size:c1 // group_size, r0:r1] = scale16.T
            words = pack_qweight(slab.T).astype("<i4", copy=False)
            if write is None:
                kept.append(words)
            else:
                write(np.ascontiguousarray(words))
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
    qzeros = pack_qzeros(zeros).astype("<i4", copy=False)
    g_idx = (np.arange(in_features, dtype=np.int64) // group_size).astype("<i4")
    if write is None:
        return {"qweight": np.concatenate(kept, axis=0), "qzeros": qzeros, "scales": scales, "g_idx": g_idx}, stats
    for array in (qzeros, scales.astype("<f2", copy=False), g_idx):
        write(np.ascontiguousarray(array))
    return {"qweight": None, "qzeros": None, "scales": None, "g_idx": None}, stats


# ---------------------------------------------------------------------------------------------
# The checkpoint
# ---------------------------------------------------------------------------------------------


def quantization_config(group_size):
    """config.json quantization_config of the repacked checkpoint (what vLLM's gptq loader reads;
    sym false: the zeros are chosen per group, which also keeps gptq_marlin, symmetric-only, away)."""
    return {"quant_method": "gptq", "bits": BITS, "group_size": group_size, "desc_act": False, "sym": False,
            "lm_head": False, "checkpoint_format": CHECKPOINT_FORMAT}


class GptqTarget(object):
    """The repacker's part of _nvfp4.convert: an NVFP4 layer becomes qweight, qzeros, scales, g_idx
    (the LM head becomes a float16 weight, through the dequantizer's target)."""

    label = "GPTQ copy"
    layer_kind = "repack"

    def __init__(self, group_size, method="search"):
        if isinstance(group_size, bool) or group_size not in GROUP_SIZES:
            raise Nvfp4Error("group_size=%r is not one of %s" % (group_size, ", ".join(str(g) for g in GROUP_SIZES)))
        self.group_size = group_size
        self.method = method
        self.manifest_file = MANIFEST_FILE
        self.version = REPACK_VERSION
        self.fp16 = _nvfp4.Fp16Target()
        self.stats = ErrorStats()
        self.worst = None
        self.problems = []

    def settings(self):
        return {"group_size": self.group_size, "method": self.method}

    def layer_entry(self, prefix, inputs, shape):
        rows, half = shape
        cols = half * 2
        if prefix.rsplit(".", 1)[-1] in FP16_LAYERS:
            return self.fp16.layer_entry(prefix, inputs, shape)
        problems = shape_problems(prefix, rows, cols, self.group_size)
        if rows == 0 or cols == 0:
            problems.append("%s: the layer has no elements (shape [%d, %d])" % (prefix, rows, cols))
        if problems:
            raise Nvfp4Error("%s; vLLM's gptq loader could not load this layer, so it is not repacked" % "; ".join(problems))
        groups = cols // self.group_size
        parts = [("%s.qweight" % prefix, "I32", [cols // PACK, rows], cols // PACK * rows * 4),
                 ("%s.qzeros" % prefix, "I32", [groups, rows // PACK], groups * rows // PACK * 4),
                 ("%s.scales" % prefix, "F16", [groups, rows], groups * rows * 2),
                 ("%s.g_idx" % prefix, "I32", [cols], cols * 4)]
        total = sum(p[3] for p in parts)
        if total != repacked_tensor_bytes(rows, cols, self.group_size):
            raise Nvfp4Error("internal error: %s: %d bytes planned, repacked_tensor_bytes says %d"
                             % (prefix, total, repacked_tensor_bytes(rows, cols, self.group_size)))
        return {"name": prefix, "kind": self.layer_kind, "bytes": total, "inputs": inputs, "parts": parts,
                "layer_shape": (rows, cols)}

    def write_layer(self, handle, entry, where, layout):
        if entry["kind"] != self.layer_kind:
            self.fp16.write_layer(handle, entry, where, layout)
            return
        packed, scale, tensor_scale, divide = _nvfp4.load_layer(where, entry["inputs"], layout)
        stats = ErrorStats()
        repack_layer(packed, scale, tensor_scale, divide, self.group_size, name=entry["inputs"][0], method=self.method,
                     write=handle.write, stats=stats)
        self.stats.merge(stats)
        figures = stats.summary()
        if self.worst is None or figures["rel_rms"] > self.worst["rel_rms"]:
            self.worst = dict(figures, tensor=entry["name"])

    def edit_config(self, config):
        config = _nvfp4.drop_quantization(config)
        config["quantization_config"] = quantization_config(self.group_size)
        return config

    def describe(self, result, entries):
        """The plan's figures; refuses a checkpoint whose copy vLLM could not load."""
        plain = [t["name"] for t in entries if t["kind"] in ("copy", "cast") and len(t["parts"][0][2]) == 2
                 and t["name"].endswith(".weight") and parallel_split(t["name"][:-len(".weight")]) is not None]
        if plain:
            raise Nvfp4Error("%s: not NVFP4 in the checkpoint, but vLLM's gptq loader expects every linear layer "
                             "repacked (it would look for %s.qweight and fail); this checkpoint cannot become a GPTQ "
                             "copy. Serve it through the FP16 copy (labfleet.vllm.nvfp4_dequantize) instead"
                             % (_nvfp4._names_hint(plain), plain[0][:-len(".weight")]))
        repacked = [t for t in entries if t["kind"] == self.layer_kind]
        weights = sum(t["layer_shape"][0] * t["layer_shape"][1] for t in repacked)
        result["group_size"] = self.group_size
        result["tensors_repacked"] = len(repacked)
        result["tensors_dequantized"] = sum(1 for t in entries if t["kind"] == self.fp16.layer_kind)
        result["repacked_weights"] = weights
        result["bits_per_weight"] = round(sum(t["bytes"] for t in repacked) * 8.0 / weights, 4) if weights else None
        result["quantization_config"] = quantization_config(self.group_size)
        result["tensor_parallel_sizes"] = [tp for tp in TP_SIZES if not any(
            shape_problems(t["name"], t["layer_shape"][0], t["layer_shape"][1], self.group_size, tp)
            for t in repacked)]

    def manifest_extra(self):
        return {"error": self._error()}

    def _error(self):
        figures = self.stats.summary()
        figures["worst_tensor"] = self.worst
        figures["method"] = self.method
        return figures

    def recorded(self, result, manifest):
        if isinstance(manifest.get("error"), dict):
            result["error"] = manifest["error"]

    def finished(self, result):
        result["error"] = self._error()


def vllm_group_problem(group_size):
    """Why vLLM's gptq kernels would serve a copy of this group size wrong, or None."""
    if group_size in GROUP_SIZES and group_size % VLLM_GROUP_MULTIPLE:
        return ("group_size=%d: vLLM's gptq method (exllama kernels) moves to the next group only every %d input rows "
                "(csrc/quantization/gptq/q_gemm.cu), so a group-%d copy would be served with another group's scales "
                "and zeros, wrong tokens without an error; use %s"
                % (group_size, VLLM_GROUP_MULTIPLE, group_size, ", ".join(str(g) for g in VLLM_GROUP_SIZES)))
    return None


def repack_checkpoint(src, dest, group_size=32, layout="auto", max_shard_size="5GB", check_mode=False,
                      method="search", for_vllm=True, verify="quick"):
    """Repack the NVFP4 checkpoint in ``src`` into a GPTQ int4 one in ``dest`` (vLLM ``--quantization gptq``).

    Returns what _nvfp4.convert returns plus group_size, tensors_repacked, tensors_dequantized (the
    LM head, kept float16), repacked_weights, bits_per_weight (of the repacked layers: codes, scales,
    zeros and g_idx), quantization_config, tensor_parallel_sizes (of 1, 2, 4, 8: those vLLM's
    loader accepts for every layer) and, after a conversion or from a finished copy's manifest,
    error {rel_rms, max_abs, max_abs_rel, worst_tensor, method} against the exact NVFP4 values.
    ``for_vllm`` (the module's and the script's case) refuses the group sizes vLLM's gptq kernels
    compute wrong (vllm_group_problem); the benchmark measures them too. ``verify``: see _nvfp4.convert.
    """
    problem = vllm_group_problem(group_size) if for_vllm else None
    if problem:
        raise Nvfp4Error(problem)
    return _nvfp4.convert(src, dest, GptqTarget(group_size, method), layout=layout, max_shard_size=max_shard_size,
                          check_mode=check_mode, verify=verify)


def group_size_option(value):
    """The group_size option of the script: "32" or 32 -> 32, anything else refused."""
    text = str(value).strip()
    if not re.match(r"^[0-9]{1,4}$", text) or int(text) not in GROUP_SIZES:
        raise Nvfp4Error("group_size=%r is not one of %s" % (value, ", ".join(str(g) for g in VLLM_GROUP_SIZES)))
    return int(text)
