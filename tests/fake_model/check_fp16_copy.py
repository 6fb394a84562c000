#!/bin/sh
# -*- coding: utf-8 -*-
# Test fixture only. Re-runs itself with python3 (Debian images have no `python`).
""":"
exec python3 "$0" "$@"
"""
# Copyright: (c) 2026, labfleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check an FP16 copy of an NVFP4 checkpoint bit for bit against an independent reference.

    check_fp16_copy.py SRC DEST

SRC is the NVFP4 checkpoint (ModelOpt: <layer>.weight uint8 + weight_scale + weight_scale_2;
compressed-tensors: <layer>.weight_packed + weight_scale + weight_global_scale), DEST its FP16
copy (DEST/model.safetensors.index.json names the shards). Deliberately shares no code with the
collection: the safetensors headers are parsed with struct/json, FP4 E2M1 and float8_e4m3fn are
decoded from their bit fields by formula, and the arithmetic follows facts.md section 4
(../shared/reference/facts.md, "verified": ModelOpt NVFP4QTensor.dequantize, vLLM 0.19.1
nvfp4_emulation_utils.py dequantize_to_dtype):

    block = float32(e4m3(scale) * weight_scale_2)       (compressed-tensors: / weight_global_scale)
    value = float16(float32(e2m1(nibble) * block))       (round to nearest even at each step)

Each product is formed exactly in float64 (a 4-bit or 2-bit significand times a 24-bit one) and
then rounded once to float32, i.e. the correctly rounded float32 product; the compressed-tensors
quotient is a float32 division. Non-quantized BF16/F32 tensors must equal float16(value); other
dtypes must be byte-identical. Elements are compared as float16 bit patterns (a NaN matches any
NaN). DEST/config.json must hold torch_dtype float16 and no
quantization_config, and DEST must hold no quantization description file.

Prints "checked N tensors, M elements, bit-identical" and exits 0, or prints the first mismatch
and exits 1 (2: usage or unreadable input). Needs python3 and numpy (1.24 or later).
"""

import json
import os
import struct
import sys

import numpy as np

INDEX = "model.safetensors.index.json"
WIDTH = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
         "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}
KV_SCALES = ("k_scale", "v_scale", "q_scale", "prob_scale")
QUANT_FILES = ("hf_quant_config.json", "quant_config.json", "quantize_config.json")


class Mismatch(Exception):
    pass


def read_header(path):
    with open(path, "rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length).decode("utf-8"))
    header.pop("__metadata__", None)
    return 8 + length, header


def weight_files(model_dir):
    index = os.path.join(model_dir, INDEX)
    if os.path.isfile(index):
        with open(index) as handle:
            return sorted(set(json.load(handle)["weight_map"].values()))
    return sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))


class Checkpoint(object):
    """name -> (file, data start, header entry) of every tensor of a model directory."""

    def __init__(self, model_dir, files):
        self.where = {}
        for name in files:
            path = os.path.join(model_dir, name)
            start, header = read_header(path)
            for tensor, info in header.items():
                if tensor in self.where:
                    raise Mismatch("%s: tensor %s is stored twice" % (model_dir, tensor))
                self.where[tensor] = (path, start, info)

    def info(self, name):
        return self.where[name][2]

    def raw(self, name):
        path, start, info = self.where[name]
        begin, end = info["data_offsets"]
        with open(path, "rb") as handle:
            handle.seek(start + begin)
            data = handle.read(end - begin)
        if len(data) != end - begin:
            raise Mismatch("%s: tensor %s is truncated" % (path, name))
        return data

    def array(self, name, dtype):
        return np.frombuffer(self.raw(name), dtype=dtype).reshape(self.info(name)["shape"])


def e2m1(codes):
    """FP4 E2M1 by bit fields: sign bit 3, exponent bits 2-1 (bias 1), mantissa bit 0; exponent 0
    is subnormal (mantissa * 2^-1). No inf/NaN."""
    codes = codes.astype(np.int64)
    sign = np.where(codes & 0x8, -1.0, 1.0)
    exp = (codes >> 1) & 0x3
    man = (codes & 0x1).astype(np.float64)
    mag = np.where(exp == 0, man * 0.5, np.ldexp(1.0 + man / 2.0, (exp - 1).astype(np.int32)))
    return sign * mag


def e4m3(codes):
    """float8_e4m3fn by bit fields: sign bit 7, exponent bits 6-3 (bias 7), mantissa bits 2-0;
    exponent 0 is subnormal (mantissa/8 * 2^-6); S.1111.111 is NaN, there is no infinity."""
    codes = codes.astype(np.int64)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exp = (codes >> 3) & 0xF
    man = (codes & 0x7).astype(np.float64)
    mag = np.where(exp == 0, np.ldexp(man, -9), np.ldexp(8.0 + man, (exp - 10).astype(np.int32)))
    mag = np.where((exp == 0xF) & ((codes & 0x7) == 0x7), np.nan, mag)
    return sign * mag


def f32_scalar(ckpt, name):
    info = ckpt.info(name)
    if info["dtype"] == "F32":
        return np.float32(ckpt.array(name, "<f4").reshape(-1)[0])
    if info["dtype"] == "BF16":
        bits = int(ckpt.array(name, "<u2").reshape(-1)[0])
        return np.frombuffer(struct.pack("<I", bits << 16), dtype="<f4")[0]
    raise Mismatch("%s: per-tensor scale of dtype %s is not handled by this checker" % (name, info["dtype"]))


def reference_nvfp4(ckpt, packed_name, scale_name, global_name, divide):
    packed = ckpt.array(packed_name, np.uint8)
    rows, half = packed.shape
    codes = np.empty((rows, half * 2), dtype=np.uint8)
    codes[:, 0::2] = packed & 0x0F          # element 2i: low nibble
    codes[:, 1::2] = packed >> 4            # element 2i+1: high nibble
    scales = e4m3(ckpt.array(scale_name, np.uint8))
    if scales.shape != (rows, half * 2 // 16):
        raise Mismatch("%s: block scale shape %r does not fit packed weight %r"
                       % (scale_name, scales.shape, packed.shape))
    tensor_scale = f32_scalar(ckpt, global_name)
    with np.errstate(invalid="ignore", over="ignore"):
        if divide:
            block = scales.astype(np.float32) / np.float32(tensor_scale)
        else:
            block = (scales * np.float64(tensor_scale)).astype(np.float32)
        values = (e2m1(codes) * np.repeat(block.astype(np.float64), 16, axis=1)).astype(np.float32)
        return values.astype(np.float16)


def reference_plain(ckpt, name):
    dtype = ckpt.info(name)["dtype"]
    if dtype == "BF16":
        bits = ckpt.array(name, "<u2").astype(np.uint32) << 16
        with np.errstate(over="ignore"):
            return bits.view(np.float32).astype(np.float16)
    if dtype == "F32":
        with np.errstate(over="ignore"):
            return ckpt.array(name, "<f4").astype(np.float16)
    return None   # copied unchanged


def plan(src):
    """[(output name, kind, inputs)] with kind nvfp4-modelopt, nvfp4-ct or plain."""
    names = set(src.where)
    out, aux = [], set()
    for name in sorted(names):
        prefix, _dot, last = name.rpartition(".")
        modelopt = (last == "weight" and src.info(name)["dtype"] == "U8"
                    and prefix + ".weight_scale" in names and prefix + ".weight_scale_2" in names)
        ct = (last == "weight_packed" and prefix + ".weight_scale" in names
              and prefix + ".weight_global_scale" in names)
        if modelopt:
            out.append((prefix + ".weight", False, (name, prefix + ".weight_scale", prefix + ".weight_scale_2")))
            aux.update(prefix + "." + a for a in ("weight_scale", "weight_scale_2", "input_scale"))
        elif ct:
            out.append((prefix + ".weight", True, (name, prefix + ".weight_scale", prefix + ".weight_global_scale")))
            aux.update(prefix + "." + a for a in ("weight_scale", "weight_global_scale", "input_global_scale",
                                                  "weight_zero_point", "weight_shape"))
    quantized = set(o[2][0] for o in out)
    for name in sorted(names - quantized - aux):
        if name.rpartition(".")[2] not in KV_SCALES:
            out.append((name, None, (name,)))
    return sorted(out)


def first_difference(name, want, got):
    want_bits = want.reshape(-1).view(np.uint16)
    got_bits = got.reshape(-1).view(np.uint16)
    both_nan = np.isnan(want.reshape(-1)) & np.isnan(got.reshape(-1))
    bad = np.nonzero((want_bits != got_bits) & ~both_nan)[0]
    if bad.size == 0:
        return None
    i = int(bad[0])
    pos = np.unravel_index(i, want.shape)
    return ("MISMATCH %s at %r: expected 0x%04x (%r) got 0x%04x (%r); %d of %d elements differ"
            % (name, tuple(int(p) for p in pos), int(want_bits[i]), float(want.reshape(-1)[i]), int(got_bits[i]),
               float(got.reshape(-1)[i]), bad.size, want_bits.size))


def check(src_dir, dest_dir):
    with open(os.path.join(dest_dir, "config.json")) as handle:
        config = json.load(handle)
    for where, cfg in (("config.json", config), ("config.json text_config", config.get("text_config"))):
        if isinstance(cfg, dict) and "quantization_config" in cfg:
            raise Mismatch("MISMATCH DEST %s still holds quantization_config" % where)
    if config.get("torch_dtype") != "float16":
        raise Mismatch("MISMATCH DEST config.json torch_dtype is %r, expected 'float16'" % config.get("torch_dtype"))
    for name in QUANT_FILES:
        if os.path.exists(os.path.join(dest_dir, name)):
            raise Mismatch("MISMATCH DEST holds %s, a quantization description vLLM would read" % name)
    if not os.path.isfile(os.path.join(dest_dir, INDEX)):
        raise Mismatch("MISMATCH DEST has no %s" % INDEX)
    with open(os.path.join(dest_dir, INDEX)) as handle:
        weight_map = json.load(handle)["weight_map"]
    src = Checkpoint(src_dir, weight_files(src_dir))
    dest = Checkpoint(dest_dir, sorted(set(weight_map.values())))
    for name, shard in sorted(weight_map.items()):
        if name not in dest.where or os.path.basename(dest.where[name][0]) != shard:
            raise Mismatch("MISMATCH %s: the index puts it in %s, which does not hold it" % (name, shard))
    unindexed = sorted(set(dest.where) - set(weight_map))
    if unindexed:
        raise Mismatch("MISMATCH DEST shards hold tensors the index does not name: %s" % unindexed[:5])
    expected = plan(src)
    want_names = set(e[0] for e in expected)
    if want_names != set(dest.where):
        raise Mismatch("MISMATCH tensor sets differ: missing from DEST %s; unexpected in DEST %s"
                       % (sorted(want_names - set(dest.where))[:5], sorted(set(dest.where) - want_names)[:5]))
    elements = 0
    for name, divide, inputs in expected:
        info = dest.info(name)
        if divide is not None:
            want = reference_nvfp4(src, inputs[0], inputs[1], inputs[2], divide)
        else:
            want = reference_plain(src, name)
            if want is None:
                if info["dtype"] != src.info(name)["dtype"] or dest.raw(name) != src.raw(name):
                    raise Mismatch("MISMATCH %s: copied tensor differs from SRC (dtype %s -> %s or bytes)"
                                   % (name, src.info(name)["dtype"], info["dtype"]))
                elements += int(np.prod(info["shape"], dtype=np.int64))
                continue
        if info["dtype"] != "F16" or list(info["shape"]) != list(want.shape):
            raise Mismatch("MISMATCH %s: DEST has %s %r, expected F16 %r"
                           % (name, info["dtype"], info["shape"], list(want.shape)))
        diff = first_difference(name, want, dest.array(name, "<f2"))
        if diff:
            raise Mismatch(diff)
        elements += want.size
    return len(expected), elements


def main(argv):
    if len(argv) != 3:
        sys.stderr.write("usage: check_fp16_copy.py SRC DEST\n")
        return 2
    try:
        count, elements = check(argv[1], argv[2])
    except Mismatch as exc:
        print(str(exc))
        return 1
    except (IOError, OSError, ValueError, KeyError) as exc:
        print("ERROR cannot read the checkpoints: %s" % exc)
        return 2
    print("checked %d tensors, %d elements, bit-identical" % (count, elements))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
