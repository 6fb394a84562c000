# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.nvfp4_dequantize module (or
# scripts/nvfp4_dequantize.py) instead.
"""Read an NVFP4 checkpoint (ModelOpt or compressed-tensors layout) and convert it, streaming.

The reader (safetensors headers, tensor loading, layout detection, the e2m1/e4m3 tables, weight
files, manifest, atomic output) and the conversion driver ``convert()`` are shared by the FP16
dequantizer (``Fp16Target``, ``convert_checkpoint``) and the GPTQ repacker (_gptq.py ``GptqTarget``).

Formats (all from ../shared/reference/facts.md section 4, confidence "verified"):

- FP4 E2M1 element: sign in bit 3, magnitude bits index ``[0, .5, 1, 1.5, 2, 3, 4, 6]``
  (ModelOpt ``nvfp4_tensor.py`` ``e2m1_values``; vLLM 0.19.1
  ``model_executor/layers/quantization/utils/nvfp4_emulation_utils.py`` ``kE2M1ToFloat``).
- Two elements per uint8, element 2i in the low nibble, 2i+1 in the high nibble; packed weight
  ``[N, K/2]`` (ModelOpt ``(q[..., 1::2] << 4) | q[..., 0::2]``; vLLM ``break_fp4_bytes``).
- Block scale per 16 elements along K: float8_e4m3fn ``[N, K/16]``, row-major, not swizzled in the
  checkpoint (vLLM swizzles internally only).
- ModelOpt: ``W = e2m1 * (float(weight_scale) * weight_scale_2)`` (``NVFP4QTensor.dequantize``:
  ``per_block_scale = scale * double_scale``).
- compressed-tensors ``nvfp4-pack-quantized``: ``W = e2m1 * (float(weight_scale) /
  weight_global_scale)`` (the global scale is a divisor; vLLM ``dequantize_to_dtype``:
  ``fp4 * (sf_fp32 / global_scale)``).

Arithmetic (the contract the tests check bit for bit): the block scale is computed once in
float32 (``scale_fp32 * scale_2`` or ``scale_fp32 / global_scale``, one float32 rounding), the
element is ``e2m1_fp32 * block_scale`` in float32 (one more rounding), and the result is cast
once to float16 with IEEE round-to-nearest-even (numpy ``astype``). Values beyond float16's range
become +-inf (only possible if the original weights exceeded it). NaN: E2M1 has no NaN;
float8_e4m3fn codes 0x7F and 0xFF are NaN and make their whole 16-element block NaN (NaN * x is
NaN, also for x = 0), which the float16 cast keeps. A non-finite or zero per-tensor scale is
refused (it would turn the whole tensor into inf/NaN), naming the tensor.

The converter reads one tensor at a time through ``numpy.memmap``, cuts it into pieces of
BUFFER_BYTES of output that worker threads (one per CPU, at most MAX_WORKERS; numpy's gathers
release the GIL) fill in reusable buffers, and a writer thread writes the pieces in order into the
output shard, so memory is bounded by the buffers ((workers + 4) x BUFFER_BYTES, plus an index
scratch of GATHER_BLOCKS x 88 bytes per thread), not the model, and the bytes do not depend on the
number of threads.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import concurrent.futures
import functools
import hashlib
import json
import os
import re
import shutil
import stat
import struct
import queue
import tempfile
import threading
from decimal import Decimal

from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._policy import quant_key, quant_text

try:
    import numpy as np
    HAS_NUMPY = True
    NUMPY_IMPORT_ERROR = None
except ImportError as _exc:  # pragma: no cover - exercised by ansible-test's import sanity test
    np = None
    HAS_NUMPY = False
    NUMPY_IMPORT_ERROR = _exc

CONVERTER_VERSION = "1"
MANIFEST_FILE = "nvfp4_dequantize_manifest.json"
INDEX_FILE = "model.safetensors.index.json"
BLOCK = 16
# Elements per row block of iter_dequantized (the arrays it yields).
BLOCK_ELEMENTS = 1 << 22
# Output bytes of one piece of work of the converter: a worker thread fills a buffer of this size, the
# writer thread writes it with one call. A few MiB: the buffers of 2 workers ((2 + 4) x 4 MiB) fit in the
# bench machine's 32 MiB L3 cache, so the writer copies from the cache; few enough pieces that their
# handing over (a future, a queue) costs nothing measurable.
BUFFER_BYTES = 4 << 20
# NVFP4 blocks (16 elements, 8 packed bytes) gathered by one numpy call: its index scratch (64 bytes a
# block in intp, 16 in uint16, 8 of scale lanes: 2.75 MiB a thread) and its output (1 MiB) stay in the
# cache; measured on the bench machine, 8192 to 65536 blocks are within 15% of each other (numpy calls
# and their Python overhead against cache misses).
GATHER_BLOCKS = 1 << 15
# Most worker threads of one conversion (each holds its index scratch; the buffers grow with them).
MAX_WORKERS = 8
MAX_HEADER_BYTES = 100000000
# The largest max_shard_size taken (2**53 bytes: exact in JSON numbers and in other readers' floats).
MAX_COUNT = 2 ** 53
LAYOUTS = ("auto", "modelopt", "compressed_tensors")
# config.json, the index and the quantization descriptions are read whole, up to this size.
MAX_JSON_BYTES = 64 << 20

# FP4 E2M1, code -> value; bit 3 is the sign (facts.md section 4, verified).
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
               -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)

# Bytes per element of the safetensors dtypes this converter reads or writes.
DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
               "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4,
               "I64": 8, "U64": 8, "F64": 8}
_NUMPY_DTYPES = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "F8_E4M3": "uint8", "F8_E5M2": "uint8",
                 "F8_E8M0": "uint8", "I16": "<i2", "U16": "<u2", "F16": "<f2", "BF16": "<u2",
                 "I32": "<i4", "U32": "<u4", "F32": "<f4", "I64": "<i8", "U64": "<u8", "F64": "<f8"}
# Float weights converted to float16; everything else (integer buffers, bool, F16, F64) is kept.
_TO_FP16 = ("BF16", "F32")

# Tensors of a quantized layer that the FP16 model no longer needs (suffix after the layer name).
_MODELOPT_AUX = ("weight_scale", "weight_scale_2", "input_scale")
_CT_AUX = ("weight_scale", "weight_global_scale", "input_global_scale", "weight_zero_point", "weight_shape")
# Quantized-KV-cache and activation scales: meaningless without --quantization, dropped.
_KV_SCALES = ("k_scale", "v_scale", "q_scale", "prob_scale")

# Files copied unchanged into the output (the rest is listed in files_skipped).
_COPY_PATTERNS = (r"tokenizer.*", r"generation_config\.json", r"special_tokens_map\.json", r"added_tokens\.json",
                  r"vocab\..*", r"merges\.txt", r".*\.tiktoken", r"chat_template.*", r"preprocessor_config\.json",
                  r"processor_config\.json", r"README(\..*)?", r"LICENSE.*", r"NOTICE.*")
# Quantization descriptions that must not follow the FP16 weights (vLLM would read them).
_QUANT_FILES = ("hf_quant_config.json", "quant_config.json", "quantize_config.json")
# How the quantization descriptions say NVFP4 (is_nvfp4_algo, is_nvfp4_group, is_nvfp4_method; model_facts reads
# the same descriptions with them): ModelOpt's quant_algo, compressed-tensors' weight format.
NVFP4_ALGO = "NVFP4"
CT_NVFP4_FORMAT = "nvfp4-pack-quantized"

_SIZE_UNITS = {"": 1, "B": 1, "KB": 10 ** 3, "MB": 10 ** 6, "GB": 10 ** 9, "TB": 10 ** 12,
               "KIB": 2 ** 10, "MIB": 2 ** 20, "GIB": 2 ** 30, "TIB": 2 ** 40}


def is_nvfp4_algo(algo):
    """True when a ModelOpt ``quant_algo`` (hf_quant_config.json, config.json) names NVFP4, in any case."""
    return isinstance(algo, str) and algo.upper() == NVFP4_ALGO


def is_nvfp4_group(fmt, weight_bits=None, weight_type=None, group_size=None):
    """True for a compressed-tensors config group of NVFP4 weights: its ``format`` says so, or its weights
    are 4-bit floats in groups of BLOCK (16)."""
    return fmt == CT_NVFP4_FORMAT or (weight_bits == 4 and weight_type == "float" and group_size == BLOCK)


def is_nvfp4_method(name):
    """True for a quant_method name that means ModelOpt NVFP4 in any spelling the policy knows ("nvfp4",
    "fp4", "modelopt_fp4", "nvfp4-pack-quantized"; _policy.quant_key, the one normaliser)."""
    return isinstance(name, str) and quant_key(name) == "modelopt_fp4"


def _compressed_tensors_nvfp4(qc):
    """True when a compressed-tensors quantization_config declares NVFP4 weights (top-level format or a group)."""
    top = qc.get("format")
    groups = qc.get("config_groups") or {}
    for group in groups.values() if isinstance(groups, dict) else []:
        if isinstance(group, dict):
            weights = group.get("weights") if isinstance(group.get("weights"), dict) else {}
            if is_nvfp4_group(group.get("format") or top, weights.get("num_bits"), weights.get("type"),
                              weights.get("group_size")):
                return True
    return top == CT_NVFP4_FORMAT


class Nvfp4Error(Exception):
    """The checkpoint cannot be converted; the message says what is wrong and what to change."""


def _need_numpy():
    if not HAS_NUMPY:
        raise Nvfp4Error("numpy is required to dequantize NVFP4 (install python3-numpy or `pip install numpy` "
                         "on the host that runs the conversion): %s" % NUMPY_IMPORT_ERROR)


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------


def e4m3_table():
    """float32[256]: float8_e4m3fn code -> value.

    1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is subnormal
    (mantissa/8 * 2^-6); no infinities; 0x7F and 0xFF (exponent and mantissa all ones) are NaN;
    max finite 448 (OCP FP8 spec, torch.float8_e4m3fn).
    """
    _need_numpy()
    codes = np.arange(256, dtype=np.int32)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exponent = (codes >> 3) & 0xF
    mantissa = (codes & 0x7).astype(np.float64)
    normal = (1.0 + mantissa / 8.0) * np.exp2(exponent.astype(np.float64) - 7.0)
    subnormal = mantissa / 8.0 * 2.0 ** -6
    values = sign * np.where(exponent == 0, subnormal, normal)
    values[(codes & 0x7F) == 0x7F] = np.nan
    return values.astype(np.float32)


def byte_lut(dtype="float32"):
    """[256, 2] table: packed byte -> (value of the low nibble = element 2i, high nibble = 2i+1)."""
    _need_numpy()
    e2m1 = np.array(E2M1_VALUES, dtype=np.float32)
    codes = np.arange(256)
    return np.stack([e2m1[codes & 0xF], e2m1[codes >> 4]], axis=1).astype(dtype)


_CACHE = {}


def _tables():
    if not _CACHE:
        # Both float32 values of a byte as one 8-byte word: one gather per byte (the memory order of
        # the pair is kept by the two views, so this does not depend on the host's endianness).
        _CACHE["lut"] = np.ascontiguousarray(byte_lut(np.float32)).view(np.uint64).reshape(256)
        _CACHE["e4m3"] = e4m3_table()
    return _CACHE["lut"], _CACHE["e4m3"]


def float_pairs():
    """float32 [256, 2]: packed byte -> e2m1 values of its low (element 2i) and high nibble (cached)."""
    lut, _e4m3 = _tables()
    return lut.view(np.float32).reshape(256, 2)


# ---------------------------------------------------------------------------------------------
# Dequantization
# ---------------------------------------------------------------------------------------------


def _check_shapes(packed, scale, name):
    if packed.ndim != 2 or scale.ndim != 2:
        raise Nvfp4Error("%s: packed weight and block scale must be 2-D, found shapes %r and %r"
                         % (name, tuple(packed.shape), tuple(scale.shape)))
    rows, half = packed.shape
    cols = half * 2
    if cols % BLOCK:
        raise Nvfp4Error("%s: %d input features is not a multiple of the NVFP4 block size %d" % (name, cols, BLOCK))
    if tuple(scale.shape) != (rows, cols // BLOCK):
        raise Nvfp4Error("%s: block scale shape %r does not match packed weight %r (expected %r: one scale per "
                         "16 elements, row-major, not swizzled)"
                         % (name, tuple(scale.shape), tuple(packed.shape), (rows, cols // BLOCK)))
    return rows, cols


def _per_tensor(value, name):
    value = np.float32(np.asarray(value, dtype=np.float32).reshape(-1)[0]) if np.size(value) == 1 else None
    if value is None:
        raise Nvfp4Error("%s: the per-tensor scale must hold exactly one value" % name)
    if not np.isfinite(value) or value == 0:
        raise Nvfp4Error("%s: per-tensor scale is %r; the checkpoint is damaged (a zero or non-finite global "
                         "scale makes the whole tensor inf/NaN). Re-download or re-quantize it." % (name, float(value)))
    return value


def block_scale_table(e4m3, tensor_scale, divide):
    """float32[256]: block-scale code -> block scale, one float32 rounding: e4m3 x tensor scale
    (ModelOpt) or e4m3 / tensor scale (compressed-tensors, ``divide``)."""
    block_scale = np.array(e4m3, dtype=np.float32)
    if divide:
        np.divide(block_scale, np.float32(tensor_scale), out=block_scale)
    else:
        np.multiply(block_scale, np.float32(tensor_scale), out=block_scale)
    return block_scale


def layer_block_scales(scale, tensor_scale, divide, name="tensor"):
    """float32 [256] block-scale table of one layer: the per-tensor scale checked (refused when zero,
    non-finite or not a single value, naming the tensor), then block_scale_table."""
    _need_numpy()
    _lut, e4m3 = _tables()
    with np.errstate(over="ignore", invalid="ignore"):
        return block_scale_table(e4m3, _per_tensor(tensor_scale, name), divide)


def pair_lut(e4m3, tensor_scale, divide, dtype=None):
    """uint32 [256 scale codes, 256 packed bytes]: the two float16 results of one packed byte under
    one block-scale code as one 4-byte word (element 2i, the low nibble, first in memory), so that a
    gathered array of them viewed as float16 is the dequantized row.

    Each entry is computed exactly like the element-wise definition: the block scale in float32
    (e4m3 x tensor scale, or e4m3 / tensor scale), times the e2m1 value in float32, one cast to
    float16. Only 65536 products exist per tensor, so the tensor itself needs one gather per byte.
    ``dtype``: the float16 byte order of the words (default native; "<f2" for safetensors).
    """
    lut, _e4m3 = _tables()
    block_scale = block_scale_table(e4m3, tensor_scale, divide)
    pairs = lut.view(np.float32).reshape(256, 2)          # [byte, (low, high)] e2m1 values
    values = pairs[None, :, :] * block_scale[:, None, None]   # float32 [scale, byte, 2]
    # [scale, byte, 2] float16, contiguous: viewing each pair as one 4-byte word keeps the memory
    # order of the two halves, so the gathered words viewed as float16 do not depend on endianness.
    return np.ascontiguousarray(values.astype(dtype or np.float16)).view(np.uint32).reshape(256, 256)


def _layer_table(tensor_scale, divide, name, dtype=None):
    """pair_lut of one layer, flat (index = scale code << 8 | packed byte), its per-tensor scale checked."""
    _lut, e4m3 = _tables()
    tensor_scale = _per_tensor(tensor_scale, name)
    with np.errstate(over="ignore", invalid="ignore"):
        return pair_lut(e4m3, tensor_scale, divide, dtype).reshape(-1)


_SCRATCH = threading.local()


# The block scale code shifted into the high byte of each of the four uint16 lanes of a uint64.
_HIGH_LANES = 0x0100010001000100


def gather_blocks(table, packed_blocks, scale_codes, out):
    """out[g] = table[scale_codes[g] << 8 | packed_blocks[g]] for every NVFP4 block g: packed_blocks
    uint8 [n, 8], scale_codes uint8 [n], out uint32 [n, 8] (the 16 float16 results of each block).

    GATHER_BLOCKS blocks per numpy call, in scratch buffers of the calling thread. The index is built
    in uint16 (the byte, then the code times 0x0100 in each uint16 lane of a uint64: one operation per
    four indices, none broadcast over 8) and widened to intp for numpy's take, whose intp indices and
    mode="clip" (every index is below 65536 by construction) skip both the index conversion and the
    bounds check. Measured on the bench machine: 1.4x the speed of building the intp index directly."""
    scratch = getattr(_SCRATCH, "buffers", None)
    if scratch is None or scratch[0].shape[0] < GATHER_BLOCKS:
        scratch = _SCRATCH.buffers = (np.empty((GATHER_BLOCKS, BLOCK // 2), dtype=np.intp),
                                      np.empty((GATHER_BLOCKS, BLOCK // 2), dtype=np.uint16),
                                      np.empty(GATHER_BLOCKS, dtype=np.uint64))
    index, index16, high = scratch
    total = scale_codes.shape[0]
    for g0 in range(0, total, GATHER_BLOCKS):
        g1 = min(total, g0 + GATHER_BLOCKS)
        m = g1 - g0
        # index = scale code << 8 | packed byte; one scale code covers 16 elements = 8 bytes
        np.copyto(index16[:m], packed_blocks[g0:g1], casting="safe")
        np.multiply(scale_codes[g0:g1], np.uint64(_HIGH_LANES), out=high[:m], dtype=np.uint64)
        lanes = index16[:m].view(np.uint64)
        np.bitwise_or(lanes[:, 0], high[:m], out=lanes[:, 0])
        np.bitwise_or(lanes[:, 1], high[:m], out=lanes[:, 1])
        np.copyto(index[:m], index16[:m], casting="safe")
        np.take(table, index[:m], out=out[g0:g1], mode="clip")


def iter_dequantized(packed, scale, tensor_scale, divide, name="tensor", reuse=True):
    """Yield float16 row blocks of the dequantized tensor (see the module docstring for the math);
    with ``reuse`` each block is only valid until the next one is asked for (the buffers are reused),
    without it every block is a new array (for a consumer that keeps blocks, like a writer thread).

    ``divide`` False: block scale = scale * tensor_scale (ModelOpt); True: scale / tensor_scale
    (compressed-tensors). One table lookup per packed byte (pair_lut, gather_blocks).
    """
    _need_numpy()
    rows, cols = _check_shapes(packed, scale, name)
    table = _layer_table(tensor_scale, divide, name)
    step = max(1, BLOCK_ELEMENTS // max(cols, 1))
    nblk = cols // BLOCK
    words = np.empty((min(step, rows) * nblk, BLOCK // 2), dtype=np.uint32) if reuse else None
    for r0 in range(0, rows, step):
        n = min(rows, r0 + step) - r0
        # with reuse, the block is a view of a buffer reused by the next iteration: consume it first
        out = words[:n * nblk] if reuse else np.empty((n * nblk, BLOCK // 2), dtype=np.uint32)
        gather_blocks(table, np.asarray(packed[r0:r0 + n], dtype=np.uint8).reshape(-1, BLOCK // 2),
                      np.asarray(scale[r0:r0 + n], dtype=np.uint8).reshape(-1), out)
        yield out.view(np.float16).reshape(n, cols)


def _dequantize(packed, scale, tensor_scale, divide):
    _need_numpy()
    packed = np.asarray(packed)
    rows, cols = _check_shapes(packed, np.asarray(scale), "tensor")
    out = np.empty((rows, cols), dtype=np.float16)
    r0 = 0
    for block in iter_dequantized(packed, np.asarray(scale), tensor_scale, divide):
        out[r0:r0 + block.shape[0]] = block
        r0 += block.shape[0]
    return out


def dequantize_modelopt(packed, scale, scale_2):
    """uint8 [rows, cols/2], e4m3 bytes [rows, cols/16], float -> float16 [rows, cols]
    (value = e2m1 * (scale * scale_2))."""
    return _dequantize(packed, scale, scale_2, False)


def dequantize_compressed_tensors(packed, scale, global_scale):
    """uint8 [rows, cols/2], e4m3 bytes [rows, cols/16], float -> float16 [rows, cols]
    (value = e2m1 * (scale / global_scale))."""
    return _dequantize(packed, scale, global_scale, True)


# ---------------------------------------------------------------------------------------------
# safetensors
# ---------------------------------------------------------------------------------------------


def read_header(path):
    """{"path", "data_start", "file_bytes", "tensors": {name: {dtype, shape, offsets}}} of one file."""
    try:
        with open_regular(path) as handle:
            size = os.fstat(handle.fileno()).st_size
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise Nvfp4Error("%s: truncated (shorter than the 8-byte header length); re-download it" % path)
            (length,) = struct.unpack("<Q", prefix)
            if length == 0 or length > MAX_HEADER_BYTES or length > size - 8:
                raise Nvfp4Error("%s: header length %d is impossible for a %d-byte file: not a safetensors file, "
                                 "or truncated; re-download it" % (path, length, size))
            raw = handle.read(length)
        header = json.loads(raw.decode("utf-8"))
    except (IOError, OSError) as exc:
        raise Nvfp4Error("%s: cannot be read (%s)" % (path, exc))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise Nvfp4Error("%s: header is not valid JSON (%s); re-download it" % (path, exc))
    if not isinstance(header, dict):
        raise Nvfp4Error("%s: header must be a JSON object" % path)
    header.pop("__metadata__", None)
    data_start = 8 + length
    tensors = dict((name, _header_entry(path, name, info)) for name, info in header.items())
    _check_tiling(path, tensors, size - data_start)
    return {"path": path, "data_start": data_start, "file_bytes": size, "tensors": tensors}


def _is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _header_entry(path, name, info):
    """One tensor's entry of a safetensors header, checked as the safetensors library checks it
    (safetensors/src/tensor.rs, Metadata::validate): a known dtype, a shape of non-negative whole
    numbers, data_offsets [begin, end] with begin <= end spanning exactly shape x dtype size."""
    if not isinstance(info, dict) or not isinstance(info.get("shape"), list) \
            or not isinstance(info.get("data_offsets"), list) or len(info["data_offsets"]) != 2:
        raise Nvfp4Error("%s: tensor %r has a malformed entry (needs dtype, shape, data_offsets [begin, end]); "
                         "re-download it" % (path, name))
    dtype, shape, offsets = info.get("dtype"), info["shape"], info["data_offsets"]
    if dtype not in DTYPE_BYTES:
        raise Nvfp4Error("%s: tensor %r has dtype %r, which is not a safetensors dtype this converter knows (%s); "
                         "the file is damaged or not a checkpoint this converter handles"
                         % (path, name, dtype, ", ".join(sorted(DTYPE_BYTES))))
    if not all(_is_count(dim) for dim in shape):
        raise Nvfp4Error("%s: tensor %r has shape %r; every dimension must be a whole number of 0 or more; "
                         "re-download it" % (path, name, shape))
    if not all(_is_count(offset) for offset in offsets) or offsets[0] > offsets[1]:
        raise Nvfp4Error("%s: tensor %r has data_offsets %r; they must be whole numbers with begin <= end; "
                         "re-download it" % (path, name, offsets))
    numel = 1
    for dim in shape:
        numel *= dim
    if offsets[1] - offsets[0] != numel * DTYPE_BYTES[dtype]:
        raise Nvfp4Error("%s: tensor %r spans %d bytes but shape %r of %s needs %d"
                         % (path, name, offsets[1] - offsets[0], shape, dtype, numel * DTYPE_BYTES[dtype]))
    return {"dtype": dtype, "shape": list(shape), "offsets": list(offsets), "file": path}


def _check_tiling(path, tensors, data_bytes):
    """The tensors' byte ranges tile the data section: sorted by offset, each begins where the one
    before ends, the first at 0 and the last at the end of the file (safetensors refuses anything
    else: InvalidOffset, MetadataIncompleteBuffer), so no two tensors share bytes and none are unread."""
    end = 0
    for name in sorted(tensors, key=lambda n: (tensors[n]["offsets"][0], tensors[n]["offsets"][1], n)):
        begin, stop = tensors[name]["offsets"]
        if stop > data_bytes:
            raise Nvfp4Error("%s: tensor %r lies outside the file (its data ends at byte %d of %d; truncated?); "
                             "re-download it" % (path, name, stop, data_bytes))
        if begin != end:
            what = "overlaps the tensor before it" if begin < end else "leaves a gap of %d bytes before it" % (begin - end)
            raise Nvfp4Error("%s: tensor %r (bytes %d-%d of the data) %s: the byte ranges of a safetensors file "
                             "must tile its data; the file is damaged, re-download it" % (path, name, begin, stop, what))
        end = stop
    if end != data_bytes:
        raise Nvfp4Error("%s: %d bytes after the last tensor belong to no tensor (the tensors end at %d of %d); "
                         "the file is damaged, re-download it" % (path, data_bytes - end, end, data_bytes))


def load_tensor(header, name):
    """numpy array (read-only memmap) of one tensor; F8/BF16 come back as their raw uint8/uint16 bits."""
    _need_numpy()
    info = header["tensors"][name]
    dtype = _NUMPY_DTYPES.get(info["dtype"])
    if dtype is None:
        raise Nvfp4Error("%s: tensor %r has dtype %s, which this converter cannot read"
                         % (header["path"], name, info["dtype"]))
    begin, end = info["offsets"]
    if end == begin:
        return np.zeros(info["shape"], dtype=dtype)
    arr = np.memmap(header["path"], dtype=np.uint8, mode="r", offset=header["data_start"] + begin,
                    shape=(end - begin,))
    return arr.view(dtype).reshape(info["shape"])


def _header_bytes(entries):
    """Serialized header (padded with spaces to 8 bytes, as safetensors does) for [(name, dtype, shape, nbytes)]."""
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, shape, nbytes in entries:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


def write_safetensors(path, tensors):
    """Write {name: numpy array} (dtype from the array: float16 F16, float32 F32, uint8 U8 ...)."""
    _need_numpy()
    rev = {"bool": "BOOL", "uint8": "U8", "int8": "I8", "int16": "I16", "uint16": "U16", "float16": "F16",
           "int32": "I32", "uint32": "U32", "float32": "F32", "int64": "I64", "uint64": "U64", "float64": "F64"}
    names = sorted(tensors)
    entries = [(n, rev[str(tensors[n].dtype)], tensors[n].shape, tensors[n].nbytes) for n in names]
    with open(path, "wb") as handle:
        handle.write(_header_bytes(entries))
        for n in names:
            handle.write(np.ascontiguousarray(tensors[n]).astype(tensors[n].dtype.newbyteorder("<")).tobytes())


# ---------------------------------------------------------------------------------------------
# Layout detection
# ---------------------------------------------------------------------------------------------


def open_regular(path):
    """A binary handle on ``path`` if it is a regular file. A FIFO, a device or a socket (a named
    pipe, /dev/zero linked in) is refused without blocking: opened with O_NONBLOCK, then fstat of
    what was opened (so a swap after a check cannot slip one in)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except (IOError, OSError) as exc:
        raise Nvfp4Error("%s: cannot be read (%s)" % (path, exc))
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
                else "not a regular file")
        raise Nvfp4Error("%s: is %s, not a regular file; a checkpoint holds regular files only" % (path, kind))
    return os.fdopen(fd, "rb")


def _read_json(path):
    try:
        with open_regular(path) as handle:
            raw = handle.read(MAX_JSON_BYTES + 1)
        if len(raw) > MAX_JSON_BYTES:
            raise Nvfp4Error("%s: larger than %d bytes, not a model description; check the file" % (path, MAX_JSON_BYTES))
        data = json.loads(raw.decode("utf-8"))
    except (IOError, OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise Nvfp4Error("%s: cannot be read as JSON (%s)" % (path, exc))
    if not isinstance(data, dict):
        raise Nvfp4Error("%s: must hold a JSON object" % path)
    return data


def _weight_files(model_dir):
    index = os.path.join(model_dir, INDEX_FILE)
    if os.path.exists(index):
        weight_map = _read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise Nvfp4Error("%s: weight_map must be a non-empty object" % index)
        for name in weight_map.values():
            if not isinstance(name, str) or "/" in name or name in (".", ".."):
                raise Nvfp4Error("%s: weight_map names %r, which is not a plain file name" % (index, name))
        files = sorted(set(weight_map.values()))
        for name in files:
            if not os.path.exists(os.path.join(model_dir, name)):
                raise Nvfp4Error("%s: shard %s listed in %s is missing; finish the download" % (model_dir, name, INDEX_FILE))
        return files
    files = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
    if not files:
        raise Nvfp4Error("%s: no *.safetensors files; src must be the directory holding the NVFP4 checkpoint's "
                         "weights and config.json" % model_dir)
    return files


def _tensor_names(headers):
    names = []
    for header in headers:
        names.extend(header["tensors"])
    return sorted(names)


def _layout_from_names(names):
    suffixes = set(n.rsplit(".", 1)[-1] for n in names)
    if "weight_packed" in suffixes and "weight_global_scale" in suffixes:
        return "compressed_tensors"
    if "weight_scale_2" in suffixes:
        return "modelopt"
    return None


def _names_hint(names):
    shown = ", ".join(names[:12])
    return "%s%s" % (shown, " ... (%d in all)" % len(names) if len(names) > 12 else "")


def detect_layout(model_dir, headers=None):
    """"modelopt" or "compressed_tensors", from the quantization description (and tensor names)."""
    if headers is None:
        headers = [read_header(os.path.join(model_dir, f)) for f in _weight_files(model_dir)]
    names = _tensor_names(headers)
    found = None
    described = []
    hf_quant = os.path.join(model_dir, "hf_quant_config.json")
    if os.path.exists(hf_quant):
        quant = _read_json(hf_quant).get("quantization") or {}
        described.append("hf_quant_config.json quant_algo=%r" % quant.get("quant_algo"))
        if is_nvfp4_algo(quant.get("quant_algo")):
            found = "modelopt"
    config_path = os.path.join(model_dir, "config.json")
    if found is None and os.path.exists(config_path):
        qc = _read_json(config_path).get("quantization_config")
        if isinstance(qc, dict):
            method = quant_text(str(qc.get("quant_method", "")))
            described.append("config.json quantization_config quant_method=%r format=%r"
                             % (qc.get("quant_method"), qc.get("format")))
            if method == "modelopt" and is_nvfp4_algo(qc.get("quant_algo")):
                found = "modelopt"
            elif method == "compressed_tensors" and _compressed_tensors_nvfp4(qc):
                found = "compressed_tensors"
    qc_path = os.path.join(model_dir, "quant_config.json")
    if found is None and os.path.exists(qc_path):
        qc = _read_json(qc_path)
        described.append("quant_config.json quant_method=%r block_size=%r scale_bits=%r"
                         % (qc.get("quant_method"), qc.get("block_size"), qc.get("scale_bits")))
        if (is_nvfp4_method(qc.get("quant_method")) and qc.get("block_size", BLOCK) == BLOCK
                and qc.get("scale_bits", 8) == 8):
            found = _layout_from_names(names)
            if found is None:
                raise Nvfp4Error("%s: quant_config.json declares NVFP4 but the tensors match neither layout (ModelOpt: "
                                 "<layer>.weight + weight_scale + weight_scale_2; compressed-tensors: weight_packed + "
                                 "weight_scale + weight_global_scale). Tensors found: %s"
                                 % (model_dir, _names_hint(names)))
    if found is None:
        raise Nvfp4Error("%s: not recognised as an NVFP4 checkpoint (%s). Expected hf_quant_config.json with quant_algo "
                         "NVFP4, config.json quantization_config (modelopt NVFP4 or compressed-tensors "
                         "nvfp4-pack-quantized) or quant_config.json with quant_method nvfp4; set layout=modelopt or "
                         "layout=compressed_tensors if the tensors follow one of them. Tensors found: %s"
                         % (model_dir, "; ".join(described) or "no quantization description", _names_hint(names)))
    return found


# ---------------------------------------------------------------------------------------------
# Conversion plan
# ---------------------------------------------------------------------------------------------


def parse_size(text):
    """"5GB" -> 5 * 10**9, "512MiB" -> 512 * 2**20, 1000 -> 1000 (bytes)."""
    if isinstance(text, int) and not isinstance(text, bool):
        value, unit = text, ""
    else:
        match = re.match(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$", str(text))
        if not match or match.group(2).upper() not in _SIZE_UNITS:
            raise Nvfp4Error("max_shard_size=%r is not a size; use e.g. \"5GB\", \"500MB\" or \"2GiB\"" % (text,))
        value, unit = Decimal(match.group(1)), match.group(2).upper()
    size = int(value * _SIZE_UNITS[unit])
    if size <= 0:
        raise Nvfp4Error("max_shard_size=%r must be more than 0 bytes" % (text,))
    if size > MAX_COUNT:
        raise Nvfp4Error("max_shard_size=%r is too large; use at most %d bytes, e.g. \"5GB\"" % (text, MAX_COUNT))
    return size


def _split_name(name):
    """"a.b.weight" -> ("a.b", "weight"); "weight" -> ("", "weight")."""
    cut = name.rfind(".")
    return name[:cut] if cut >= 0 else "", name[cut + 1:]


def _entry(name, kind, dtype, shape, nbytes, inputs):
    """One unit of output: tensors written together into one shard (``parts``: name, dtype, shape, bytes)."""
    return {"name": name, "kind": kind, "bytes": nbytes, "inputs": inputs,
            "parts": [(name, dtype, list(shape), nbytes)]}


def _plan(src, layout, headers, layer_entry):
    """Output entries in input order (see _entry); ``layer_entry(prefix, inputs, shape)`` makes the
    entry of one NVFP4 layer, ``inputs`` being its (packed, block scale, per-tensor scale) names and
    ``shape`` the packed weight's [out_features, in_features / 2]."""
    where = {}
    for header in headers:
        for name in header["tensors"]:
            where[name] = header
    if layout == "modelopt":
        packed_suffix, scale_suffix, tensor_suffix, aux = "weight", "weight_scale", "weight_scale_2", _MODELOPT_AUX
    else:
        packed_suffix, scale_suffix, tensor_suffix, aux = "weight_packed", "weight_scale", "weight_global_scale", _CT_AUX
    quantized = {}
    for name, header in where.items():
        prefix, last = _split_name(name)
        info = header["tensors"][name]
        if last == packed_suffix and info["dtype"] == "U8":
            scale_name, tensor_name = "%s.%s" % (prefix, scale_suffix), "%s.%s" % (prefix, tensor_suffix)
            if scale_name in where and tensor_name in where:
                _check_scale_dtypes(src, layout, (name, scale_name, tensor_name), where)
                quantized[prefix] = (name, scale_name, tensor_name)
            elif layout == "compressed_tensors" or scale_name in where:
                raise Nvfp4Error("%s: tensor %s is packed NVFP4 but %s or %s is missing; the checkpoint is incomplete "
                                 "or not in the %s layout (set layout to the other one, or re-download)"
                                 % (src, name, scale_name, tensor_name, layout))
    if not quantized:
        raise Nvfp4Error("%s: no NVFP4 layer in the %s layout (expected <layer>.%s uint8 with %s and %s). Tensors "
                         "found: %s. Set layout to the other value or check src."
                         % (src, layout, packed_suffix, scale_suffix, tensor_suffix, _names_hint(sorted(where))))
    skip = set()
    for prefix, triple in quantized.items():
        skip.update(triple)
        skip.update("%s.%s" % (prefix, a) for a in aux)
    out = []
    for header in headers:
        ordered = sorted(header["tensors"], key=lambda n: header["tensors"][n]["offsets"][0])
        for name in ordered:
            info = header["tensors"][name]
            prefix, last = _split_name(name)
            if prefix in quantized and name == quantized[prefix][0]:
                if len(info["shape"]) != 2:
                    raise Nvfp4Error("%s: tensor %s must be 2-D [out, in/2], found shape %r"
                                     % (src, name, info["shape"]))
                out.append(layer_entry(prefix, quantized[prefix], list(info["shape"])))
            elif name in skip or last in _KV_SCALES:
                continue
            elif info["dtype"] in ("F8_E4M3", "F8_E5M2"):
                raise Nvfp4Error("%s: tensor %s is %s but belongs to no NVFP4 layer (mixed-precision checkpoint?); "
                                 "this converter handles NVFP4 layers only" % (src, name, info["dtype"]))
            else:
                dtype = "F16" if info["dtype"] in _TO_FP16 else info["dtype"]
                numel = 1
                for dim in info["shape"]:
                    numel *= dim
                if dtype in DTYPE_BYTES:
                    nbytes = numel * DTYPE_BYTES[dtype]
                else:
                    nbytes = info["offsets"][1] - info["offsets"][0]
                out.append(_entry(name, "cast" if dtype != info["dtype"] else "copy", dtype, info["shape"], nbytes,
                                  (name,)))
    return out, where


# The dtypes an NVFP4 layer's block scale and per-tensor scale are stored in (ModelOpt's exporter and
# compressed-tensors both write float8_e4m3fn block scales and float32 per-tensor scales; BF16 and F16
# per-tensor scales are read too). A block scale of another dtype would be read as the wrong codes.
_BLOCK_SCALE_DTYPES = ("F8_E4M3",)
_TENSOR_SCALE_DTYPES = ("F32", "BF16", "F16")


def _check_scale_dtypes(src, layout, inputs, where):
    _packed, scale_name, tensor_name = inputs
    scale_dtype = where[scale_name]["tensors"][scale_name]["dtype"]
    tensor_dtype = where[tensor_name]["tensors"][tensor_name]["dtype"]
    if scale_dtype not in _BLOCK_SCALE_DTYPES:
        raise Nvfp4Error("%s: block scale %s is %s, but an NVFP4 layer's block scales are %s in the %s layout; "
                         "the checkpoint is damaged or not NVFP4 (re-download it, or set layout to the other one)"
                         % (src, scale_name, scale_dtype, " or ".join(_BLOCK_SCALE_DTYPES), layout))
    if tensor_dtype not in _TENSOR_SCALE_DTYPES:
        raise Nvfp4Error("%s: per-tensor scale %s is %s, but it must be one of %s in the %s layout; the checkpoint "
                         "is damaged or not NVFP4 (re-download it)"
                         % (src, tensor_name, tensor_dtype, ", ".join(_TENSOR_SCALE_DTYPES), layout))


def check_index(model_dir, files, headers):
    """Every tensor the index places in a shard is in that shard's header (a loader looks for it
    there); raises Nvfp4Error naming the first that is not. Nothing to check without an index."""
    index = os.path.join(model_dir, INDEX_FILE)
    if not os.path.exists(index):
        return
    by_file = dict((name, header) for name, header in zip(files, headers))
    weight_map = _read_json(index).get("weight_map") or {}
    for tensor, shard in sorted(weight_map.items()):
        header = by_file.get(shard)
        if header is not None and tensor not in header["tensors"]:
            raise Nvfp4Error("%s: %s places tensor %r in %s, but that shard's header has no such tensor; the "
                             "download is incomplete or mixes two revisions, re-download it"
                             % (model_dir, INDEX_FILE, tensor, shard))


def verify_copy(directory, weight_map, outputs):
    """Read back a written copy before it is published: every shard is a valid safetensors file (the
    checks of read_header: known dtypes, byte ranges that tile the data, the file's exact size),
    holds exactly the tensors the index places in it, and has the size the manifest records.
    Raises Nvfp4Error (the copy is then not published)."""
    for shard in sorted(set(weight_map.values())):
        path = os.path.join(directory, shard)
        header = read_header(path)
        listed = set(name for name, where in weight_map.items() if where == shard)
        if set(header["tensors"]) != listed:
            raise Nvfp4Error("internal error: the written shard %s holds %d tensors, its index %d; nothing was "
                             "published" % (shard, len(header["tensors"]), len(listed)))
        if header["file_bytes"] != outputs.get(shard, {}).get("size"):
            raise Nvfp4Error("internal error: the written shard %s has %d bytes, the manifest %r; nothing was "
                             "published" % (shard, header["file_bytes"], outputs.get(shard, {}).get("size")))


def _shards(tensors, max_shard):
    shards, current, size = [], [], 0
    for tensor in tensors:
        if current and size + tensor["bytes"] > max_shard:
            shards.append(current)
            current, size = [], 0
        current.append(tensor)
        size += tensor["bytes"]
    if current:
        shards.append(current)
    total = len(shards)
    return [("model-%05d-of-%05d.safetensors" % (i + 1, total), shard) for i, shard in enumerate(shards)]


def _shard_header(shard):
    return _header_bytes([part for entry in shard for part in entry["parts"]])


def _copy_files(src):
    copy, skipped = [], []
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        if not os.path.isfile(path) or name.endswith(".safetensors") or name in (INDEX_FILE, "config.json"):
            continue
        if name not in _QUANT_FILES and any(re.match(p + r"\Z", name) for p in _COPY_PATTERNS):
            copy.append(name)
        else:
            skipped.append(name)
    return copy, skipped


def sha256_file(path, chunk=1 << 23):
    digest = hashlib.sha256()
    with open_regular(path) as handle:
        while True:
            data = handle.read(chunk)
            if not data:
                break
            digest.update(data)
    return digest.hexdigest()


def disk_free_bytes(path):
    """Bytes available to unprivileged users on the filesystem holding ``path`` (tests replace this)."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _input_unchanged(recorded, entry, verify):
    """Whether an input is the one a finished copy was made from: its size and sha256 as recorded; with
    verify "quick", an input whose size and modification time are those recorded when it was hashed is
    taken as unchanged without reading it (a converged run of a 70B checkpoint: a stat per file instead of
    minutes of hashing); "full", or a manifest without the time, hashes it."""
    if verify == "quick" and recorded.get("mtime_ns") is not None:
        try:
            info = os.stat(entry["path"])
        except OSError:
            return False
        if info.st_size == recorded.get("size") and info.st_mtime_ns == recorded.get("mtime_ns"):
            return True
    return recorded.get("sha256") == sha256_file(entry["path"])


def _finished_manifest(dest, inputs, settings, manifest_file, version, verify="quick"):
    """The manifest when dest holds a finished conversion of exactly these inputs (sizes, then sha256 or, with
    verify "quick", the size and modification time recorded when it was hashed), else None."""
    path = os.path.join(dest, manifest_file)
    if not os.path.isfile(path):
        return None
    try:
        manifest = _read_json(path)
    except Nvfp4Error:
        return None
    if manifest.get("converter_version") != version or manifest.get("settings") != settings:
        return None
    recorded = manifest.get("inputs") or {}
    if not isinstance(recorded, dict) or sorted(recorded) != sorted(inputs) \
            or any(not isinstance(recorded[n], dict) or recorded[n].get("size") != inputs[n]["size"] for n in inputs):
        return None
    outputs = manifest.get("outputs") or {}
    if not isinstance(outputs, dict):
        return None
    for name, entry in outputs.items():
        out = os.path.join(dest, name)
        if not isinstance(entry, dict) or not os.path.isfile(out) or os.path.getsize(out) != entry.get("size"):
            return None
    if all(_input_unchanged(recorded[n], inputs[n], verify) for n in inputs):
        return manifest
    return None


# ---------------------------------------------------------------------------------------------
# Conversion
# ---------------------------------------------------------------------------------------------


def default_workers():
    """Threads that convert at the same time (numpy releases the GIL in its loops): the CPUs this
    process may use, at most MAX_WORKERS."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(MAX_WORKERS, cpus))


class _BlockWriter(object):
    """Writes to a file from a second thread, so that converting the next piece overlaps writing
    the last one (file writes and numpy's gathers both release the GIL).

    ``write(data)`` hands over bytes; ``compute(nbytes, fill)`` has one of ``workers`` threads run
    ``fill(out)`` on a reused uint8 buffer ``out`` of nbytes (at most BUFFER_BYTES), whose bytes
    are written next. Everything is written in the order it was handed over, whatever thread ends
    first. Memory: at most workers + depth + 1 buffers. ``tell()`` counts what was handed over; an
    error of a fill is raised (as it was raised) on the next call, one of the writer thread on the
    next call or on close(). abort() stops without writing what is pending."""

    def __init__(self, handle, depth=3, workers=1):
        self.handle = handle
        self.offset = handle.tell()
        self.queue = queue.Queue(maxsize=depth)
        self.errors = []
        self.workers = max(1, int(workers))
        self.pool = None
        self.pending = collections.deque()
        self.free = queue.Queue()
        self.buffers = 0
        self.most = self.workers + depth + 1
        self.stopped = False
        self.thread = threading.Thread(target=self._run, name="nvfp4-writer")
        self.thread.daemon = True
        self.thread.start()

    def _run(self):
        while True:
            item = self.queue.get()
            if item is None:
                return
            data, buffer = item
            if not self.errors:
                try:
                    self.handle.write(data)
                except (IOError, OSError) as exc:
                    self.errors.append(exc)
            if buffer is not None:
                self.free.put(buffer)

    def _raise(self):
        if self.errors:
            raise Nvfp4Error("writing %s failed (%s); check the free space and permissions there"
                             % (getattr(self.handle, "name", "the output"), self.errors[0]))

    def _flush(self, keep):
        """Hand the oldest pieces of work, once done, to the writer until ``keep`` are left."""
        while len(self.pending) > keep:
            future, out, buffer = self.pending[0]
            future.result()
            self.pending.popleft()
            self.queue.put((out, buffer))

    def _buffer(self):
        # Free now, or a new one while fewer than self.most exist; else one the writer frees (at most
        # workers - 1 pending + depth queued + 1 being written are in use here: one comes back).
        try:
            return self.free.get_nowait()
        except queue.Empty:
            if self.buffers < self.most:
                self.buffers += 1
                return np.empty(BUFFER_BYTES, dtype=np.uint8)
        return self.free.get()

    def write(self, data):
        self._flush(0)
        self._raise()
        view = memoryview(data)
        self.offset += view.nbytes
        self.queue.put((view, None))

    def compute(self, nbytes, fill):
        self._flush(self.workers - 1)
        self._raise()
        buffer = self._buffer()
        out = buffer[:nbytes]
        if self.workers == 1:
            fill(out)
            self.queue.put((out, buffer))
        else:
            if self.pool is None:
                self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=self.workers,
                                                                  thread_name_prefix="nvfp4-convert")
            self.pending.append((self.pool.submit(fill, out), out, buffer))
        self.offset += nbytes

    def tell(self):
        return self.offset

    def _stop(self):
        if self.stopped:
            return
        self.stopped = True
        for future, _out, _buffer in self.pending:
            future.cancel()
        if self.pool is not None:
            self.pool.shutdown(wait=True)
        self.pending.clear()
        self.queue.put(None)
        self.thread.join()

    def close(self):
        try:
            self._flush(0)
        finally:
            self._stop()
        self._raise()

    def abort(self):
        self._stop()


def load_layer(where, inputs, layout):
    """(packed uint8 [out, in/2], block-scale codes uint8 [out, in/16], per-tensor scale as float32
    array, divide) of one NVFP4 layer; ``divide``: the per-tensor scale divides (compressed-tensors)."""
    packed_name, scale_name, tensor_name = inputs
    packed = load_tensor(where[packed_name], packed_name)
    scale = load_tensor(where[scale_name], scale_name)
    tensor_scale = np.asarray(load_tensor(where[tensor_name], tensor_name))
    if where[tensor_name]["tensors"][tensor_name]["dtype"] == "BF16":
        tensor_scale = _bf16_to_f32(tensor_scale)
    return packed, scale, tensor_scale, layout == "compressed_tensors"


def _write_tensor(handle, tensor, where):
    """A tensor that is not an NVFP4 layer: copied byte for byte, or cast to float16."""
    name = tensor["inputs"][0]
    header = where[name]
    info = header["tensors"][name]
    if tensor["kind"] == "copy":
        begin, end = info["offsets"]
        with open_regular(header["path"]) as source:
            source.seek(header["data_start"] + begin)
            left = end - begin
            while left:
                data = source.read(min(left, 1 << 24))
                if not data:
                    raise Nvfp4Error("%s: truncated while reading %s; re-download it" % (header["path"], name))
                handle.write(data)
                left -= len(data)
        return
    arr = load_tensor(header, name).reshape(-1)
    step = BUFFER_BYTES // 2
    for i in range(0, arr.shape[0], step):
        part = arr[i:i + step]
        handle.compute(part.shape[0] * 2, functools.partial(_fill_fp16, part, info["dtype"] == "BF16"))


def _fill_fp16(part, bf16, out):
    """out (uint8, 2 bytes an element) = part (float32, or bfloat16 bits) cast to little-endian float16."""
    with np.errstate(over="ignore"):  # a worker thread has numpy's default error state
        part = _bf16_to_f32(part) if bf16 else np.asarray(part)
        np.copyto(out.view("<f2"), part, casting="same_kind")


def _fill_dequantized(table, packed_blocks, scale_codes, out):
    """out (uint8, 32 bytes a block) = the float16 values of NVFP4 blocks (gather_blocks)."""
    gather_blocks(table, packed_blocks, scale_codes, out.view(np.uint32).reshape(-1, BLOCK // 2))


def _bf16_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


def _hashed(hasher, hashes, errors, inputs):
    hasher.join()
    if errors:
        raise Nvfp4Error("an input file could not be read for its checksum (%s); check the checkpoint directory"
                         % errors[0])
    return dict((n, {"size": e["size"], "sha256": hashes[n], "mtime_ns": e.get("mtime_ns")}) for n, e in inputs.items())


def drop_quantization(config):
    """config.json of the converted copy: no quantization_config (top level and text_config), float16."""
    config.pop("quantization_config", None)
    config["torch_dtype"] = "float16"
    if isinstance(config.get("text_config"), dict):
        config["text_config"].pop("quantization_config", None)
        if "torch_dtype" in config["text_config"]:
            config["text_config"]["torch_dtype"] = "float16"
    return config


class Fp16Target(object):
    """What the dequantizer writes for an NVFP4 layer: one float16 ``<layer>.weight``.

    A target tells ``convert()`` how to plan, write and describe the NVFP4 layers; everything else
    (reading, copying the other tensors, sharding, manifest, atomic rename) is shared."""

    label = "FP16 copy"
    layer_kind = "dequant"

    def __init__(self):
        self.manifest_file = MANIFEST_FILE
        self.version = CONVERTER_VERSION

    def settings(self):
        return {}

    def layer_entry(self, prefix, inputs, shape):
        rows, half = shape
        return _entry("%s.weight" % prefix, self.layer_kind, "F16", [rows, half * 2], rows * half * 2 * 2, inputs)

    def write_layer(self, handle, entry, where, layout):
        packed, scale, tensor_scale, divide = load_layer(where, entry["inputs"], layout)
        name = entry["inputs"][0]
        _check_shapes(packed, scale, name)
        # safetensors is little-endian: the table's words hold little-endian float16 on any host
        table = _layer_table(tensor_scale, divide, name, "<f2")
        packed_blocks, scale_codes = packed.reshape(-1, BLOCK // 2), scale.reshape(-1)
        step = BUFFER_BYTES // (BLOCK * 2)
        for g0 in range(0, scale_codes.shape[0], step):
            g1 = min(scale_codes.shape[0], g0 + step)
            handle.compute((g1 - g0) * BLOCK * 2,
                           functools.partial(_fill_dequantized, table, packed_blocks[g0:g1], scale_codes[g0:g1]))

    def edit_config(self, config):
        return drop_quantization(config)

    def describe(self, result, entries):
        result["tensors_dequantized"] = sum(1 for t in entries if t["kind"] == self.layer_kind)

    def manifest_extra(self):
        return {}

    def recorded(self, result, manifest):
        """A finished copy was found: what its manifest adds to the result."""

    def finished(self, result):
        """The conversion ran: what this run adds to the result."""


def _input_entry(path):
    """{path, size, mtime_ns} of an input, read before it is hashed (a file changed after it was hashed
    then fails the quick check of a later run and is hashed again)."""
    info = os.stat(path)
    return {"path": path, "size": info.st_size, "mtime_ns": info.st_mtime_ns}


def convert(src, dest, target, layout="auto", max_shard_size="5GB", check_mode=False, workers=None,
            verify="quick"):
    """Convert the NVFP4 checkpoint in ``src`` into ``dest`` as ``target`` says (Fp16Target, or the
    GPTQ repacker's target): streaming, checked for disk space first, written to a temporary
    directory next to dest and renamed into place, a manifest making a re-run a no-op. ``workers``:
    the threads that fill the output's pieces (default default_workers(); the bytes do not depend on it).
    ``verify``: how a finished copy's inputs are checked on a re-run, "quick" (size and modification time
    against those recorded when they were hashed; a stat per file) or "full" (every input hashed again).

    Returns {changed, layout, tensors_copied, tensors_dropped, output_bytes, shards (list of file
    names), manifest (path), files_copied, files_skipped, disk_free_bytes, src, dest} and what the
    target adds (target.describe / recorded / finished).
    """
    _need_numpy()
    src = os.path.abspath(src)
    dest = os.path.abspath(dest)
    if layout not in LAYOUTS:
        raise Nvfp4Error("layout=%r is not one of %s" % (layout, ", ".join(LAYOUTS)))
    if not os.path.isdir(src):
        raise Nvfp4Error("src=%s is not a directory; point src at the NVFP4 checkpoint directory" % src)
    if dest == src or dest.startswith(src + os.sep):
        raise Nvfp4Error("dest=%s must be outside src=%s; choose another dest" % (dest, src))
    max_shard = parse_size(max_shard_size)
    files = _weight_files(src)
    headers = [read_header(os.path.join(src, f)) for f in files]
    check_index(src, files, headers)
    if layout == "auto":
        layout = detect_layout(src, headers)
    tensors, where = _plan(src, layout, headers, target.layer_entry)
    shards = _shards(tensors, max_shard)
    copy, skipped = _copy_files(src)
    config_path = os.path.join(src, "config.json")
    if not os.path.exists(config_path):
        raise Nvfp4Error("%s: config.json is missing; src must be a complete Hugging Face model directory" % src)
    config = _read_json(config_path)

    input_names = list(files) + ["config.json"] + copy
    if os.path.exists(os.path.join(src, INDEX_FILE)):
        input_names.append(INDEX_FILE)
    inputs = dict((n, _input_entry(os.path.join(src, n))) for n in input_names)
    settings = {"layout": layout, "max_shard_size": max_shard}
    settings.update(target.settings())
    output_bytes = sum(t["bytes"] for t in tensors)
    output_bytes += sum(len(_shard_header(s)) for _name, s in shards)
    output_bytes += sum(inputs[n]["size"] for n in copy)
    manifest_path = os.path.join(dest, target.manifest_file)
    result = {"layout": layout, "tensors_copied": sum(1 for t in tensors if t["kind"] in ("copy", "cast")),
              "tensors_dropped": sum(len(h["tensors"]) for h in headers) - sum(len(t["inputs"]) for t in tensors),
              "output_bytes": output_bytes, "shards": [shard[0] for shard in shards],
              "manifest": manifest_path, "files_copied": copy, "files_skipped": skipped,
              "src": src, "dest": dest}
    target.describe(result, tensors)

    if os.path.exists(dest):
        if not os.path.isdir(dest):
            raise Nvfp4Error("dest=%s exists and is not a directory; choose another dest" % dest)
        manifest = _finished_manifest(dest, inputs, settings, target.manifest_file, target.version, verify)
        if manifest is not None:
            result["changed"] = False
            target.recorded(result, manifest)
            return result
        if os.listdir(dest) and not os.path.isfile(manifest_path):
            raise Nvfp4Error("dest=%s exists, is not empty and holds no %s (not a conversion of ours); remove it or "
                             "choose another dest" % (dest, target.manifest_file))
    parent = os.path.dirname(dest)
    if not os.path.isdir(parent):
        raise Nvfp4Error("the parent directory of dest=%s does not exist; create %s first" % (dest, parent))
    free = disk_free_bytes(parent)
    result["disk_free_bytes"] = free
    if free < output_bytes:
        raise Nvfp4Error("not enough disk space for the %s: it needs %d bytes (%.2f GB) on the filesystem of "
                         "%s but only %d bytes (%.2f GB) are free; free %.2f GB there or set dest to a larger "
                         "filesystem" % (target.label, output_bytes, output_bytes / 1e9, parent, free, free / 1e9,
                                         (output_bytes - free) / 1e9))
    result["changed"] = True
    if check_mode:
        return result

    # The manifest's input checksums are computed in a second thread while the conversion runs
    # (hashlib releases the GIL), instead of reading every input once more at the end.
    hashes, hash_errors = {}, []

    def _hash_inputs():
        try:
            for input_name, entry in inputs.items():
                hashes[input_name] = sha256_file(entry["path"])
        except (IOError, OSError, Nvfp4Error) as exc:
            hash_errors.append(exc)

    hasher = threading.Thread(target=_hash_inputs, name="nvfp4-sha256")
    hasher.daemon = True
    hasher.start()
    tmp = tempfile.mkdtemp(prefix=".%s.nvfp4-tmp-" % os.path.basename(dest), dir=parent)
    try:
        weight_map, outputs = {}, {}
        for shard_name, shard in shards:
            path = os.path.join(tmp, shard_name)
            with open(path, "wb") as raw:
                raw.write(_shard_header(shard))
                handle = _BlockWriter(raw, workers=workers or default_workers())
                try:
                    for tensor in shard:
                        start = handle.tell()
                        if tensor["kind"] in ("copy", "cast"):
                            _write_tensor(handle, tensor, where)
                        else:
                            target.write_layer(handle, tensor, where, layout)
                        if handle.tell() - start != tensor["bytes"]:
                            raise Nvfp4Error("internal error: %s wrote %d bytes, expected %d"
                                             % (tensor["name"], handle.tell() - start, tensor["bytes"]))
                        weight_map.update((part[0], shard_name) for part in tensor["parts"])
                except BaseException:
                    handle.abort()
                    raise
                handle.close()
            outputs[shard_name] = {"size": os.path.getsize(path)}
        index = {"metadata": {"total_size": sum(t["bytes"] for t in tensors)}, "weight_map": weight_map}
        with open(os.path.join(tmp, INDEX_FILE), "w") as handle:
            json.dump(index, handle, indent=2, sort_keys=True)
        config = target.edit_config(config)
        with open(os.path.join(tmp, "config.json"), "w") as handle:
            json.dump(config, handle, indent=2, sort_keys=True)
        for name in copy:
            with open_regular(os.path.join(src, name)) as source, open(os.path.join(tmp, name), "wb") as out:
                shutil.copyfileobj(source, out, 1 << 20)
        for name in (INDEX_FILE, "config.json"):
            outputs[name] = {"size": os.path.getsize(os.path.join(tmp, name))}
        verify_copy(tmp, weight_map, outputs)
        manifest = {"converter_version": target.version, "settings": settings, "outputs": outputs,
                    "inputs": _hashed(hasher, hashes, hash_errors, inputs)}
        manifest.update(target.manifest_extra())
        with open(os.path.join(tmp, target.manifest_file), "w") as handle:
            json.dump(manifest, handle, indent=2, sort_keys=True)
        # mkdtemp made the directory 0700; the copy gets the checkpoint directory's permissions.
        os.chmod(tmp, os.stat(src).st_mode & 0o7777)
        old = None
        if os.path.exists(dest):
            old = tempfile.mkdtemp(prefix=".%s.nvfp4-old-" % os.path.basename(dest), dir=parent)
            os.rename(dest, os.path.join(old, "d"))
        os.rename(tmp, dest)
        if old:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    target.finished(result)
    return result


def convert_checkpoint(src, dest, layout="auto", max_shard_size="5GB", check_mode=False, workers=None,
                       verify="quick"):
    """Convert the NVFP4 checkpoint in ``src`` to an FP16 one in ``dest`` (``workers``: see convert).

    Returns {changed, layout, tensors_dequantized, tensors_copied, tensors_dropped, output_bytes,
    shards (list of file names), manifest (path), files_copied, files_skipped, disk_free_bytes}.
    """
    return convert(src, dest, Fp16Target(), layout=layout, max_shard_size=max_shard_size, check_mode=check_mode,
                   workers=workers, verify=verify)


# ---------------------------------------------------------------------------------------------
# The converters' module and script entry points (nvfp4_dequantize, nvfp4_repack)
# ---------------------------------------------------------------------------------------------

def argument_spec(**extra):
    """AnsibleModule argument_spec of a converter module: src, dest, layout, max_shard_size, verify and ``extra``."""
    spec = dict(src=dict(type="path", required=True), dest=dict(type="path", required=True),
                layout=dict(type="str", default="auto", choices=list(LAYOUTS)),
                max_shard_size=dict(type="str", default="5GB"),
                verify=dict(type="str", default="quick", choices=["quick", "full"]))
    spec.update(extra)
    return spec


def run_module(module, name, convert):
    """exit_json with ``convert()``'s result, or fail_json naming the module: numpy missing (with the
    package to install), an Nvfp4Error, an OS error (with what to check)."""
    if not HAS_NUMPY:
        module.fail_json(msg="%s: numpy is required on the host that runs the conversion (on Debian/Ubuntu: apt-get "
                             "install python3-numpy; or pip install numpy)" % name, exception=str(NUMPY_IMPORT_ERROR))
    try:
        result = convert()
    except Nvfp4Error as exc:
        module.fail_json(msg="%s: %s" % (name, exc))
    except (IOError, OSError) as exc:
        module.fail_json(msg="%s: %s: %s (check permissions and free space of src and dest)"
                         % (name, type(exc).__name__, exc))
    module.exit_json(**result)


def run_script(name, convert, out, err):
    """A converter script's exit status: ``convert()``'s result printed as JSON to ``out`` (0), or
    the message to ``err`` (1)."""
    if not HAS_NUMPY:
        err.write("%s: numpy is required: install python3-numpy (or pip install numpy)\n" % name)
        return 1
    try:
        result = convert()
    except Nvfp4Error as exc:
        err.write("%s: %s\n" % (name, exc))
        return 1
    out.write(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return 0
