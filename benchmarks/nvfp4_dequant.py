# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""NVFP4 -> FP16 dequantization benchmark (issues 12 and 26; `make bench`).

Run in the compat venv (numpy + torch==2.13.0+cpu, see the Makefile's `compat-venv` target):

    make bench SIZE_GB=2

1. Writes a synthetic NVFP4 ModelOpt checkpoint (Llama-3.1-8B layer shapes, random codes, ~SIZE GB
   of packed weights) under .cache/bench/ (after checking free disk).
2. Converts it with our converter (plugins/module_utils/formats/_nvfp4.py convert_checkpoint),
   and once more with its output discarded (what the conversion costs without the file writes).
3. Converts it with a torch reference that follows vLLM 0.19.1's NVFP4 emulation dequantization
   (vllm/model_executor/layers/quantization/utils/nvfp4_emulation_utils.py: break_fp4_bytes
   lines 20-36, dequantize_to_dtype lines 49-65), writing the same output format.
4. Writes the same number of bytes to a file with numpy, in the pieces the converter writes
   (_nvfp4.BUFFER_BYTES): the file-write bound, the target's yardstick. For information also in
   64 MB pieces (the bound this benchmark used before issue 26, slower on the bench machine), and a
   copy of an output-sized buffer in memory (the memory-bandwidth bound).
Before each timed part the parent touches and frees as much memory as the part writes (--no-warm-up
skips it): on the bench machine, a VM, the first touch of a guest page costs a host page fault, and
whether the page cache's new pages had been touched decided the figures more than the code did
(writing 3.9 GB took 8 to 15 s cold, 1.3 s warm). Each part runs in its own child process, which
reports its own wall time (work only, after its imports), its CPU seconds (user and system, all its threads) and its own peak RSS (VmHWM from
/proc/self/status), so the figures do not mix.

Target (issue 26): our converter's GB/s >= 75% of the file-write bound's, in the same run.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import hashlib
import importlib.util
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# The converter is imported as the collection's scripts import it (collections/ansible_collections/labfleet/vllm
# links to this checkout): formats/_nvfp4.py imports knowledge/_policy.py by its collection name.
COLLECTIONS = os.path.join(ROOT, "collections")

# Llama-3.1-8B (config.json: hidden_size 4096, intermediate_size 14336, 32 heads, 8 KV heads,
# head_dim 128): (name, out_features, in_features) of the linear layers of one decoder layer.
HIDDEN, INTER, KV = 4096, 14336, 1024
LAYER_LINEARS = (("self_attn.q_proj", HIDDEN, HIDDEN), ("self_attn.k_proj", KV, HIDDEN),
                 ("self_attn.v_proj", KV, HIDDEN), ("self_attn.o_proj", HIDDEN, HIDDEN),
                 ("mlp.gate_proj", INTER, HIDDEN), ("mlp.up_proj", INTER, HIDDEN),
                 ("mlp.down_proj", HIDDEN, INTER))
PACKED_PER_LAYER = sum(o * i // 2 for _n, o, i in LAYER_LINEARS)
LARGEST_OUTPUT = max(o * i * 2 for _n, o, i in LAYER_LINEARS)
SHARD_BYTES = 5 * 10 ** 9
MB = 1e6
GB = 1e9

# Issue 26: the FP16 copy at >= 75% of the speed of writing the same bytes to a file (same run).
TARGET_VS_WRITE = 0.75
# The pieces of the old file-write figure (64 MB, before issue 26), shown for information.
OLD_WRITE_PIECE = 64 << 20


def load_converter():
    if COLLECTIONS not in sys.path:
        sys.path.insert(0, COLLECTIONS)
    return importlib.import_module("ansible_collections.labfleet.vllm.plugins.module_utils.formats._nvfp4")


def _proc_status_bytes(key):
    """A /proc/self/status memory line (VmHWM: peak RSS, VmRSS: current RSS) in bytes."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def vm_hwm_bytes():
    return _proc_status_bytes("VmHWM")


def vm_rss_bytes():
    return _proc_status_bytes("VmRSS")


# ---------------------------------------------------------------------------------------------
# A small streaming safetensors writer (header first, then the tensors in header order); the header
# is the converter's own (_nvfp4._header_bytes), so both write the same format
# ---------------------------------------------------------------------------------------------


def shard_plan(entries, max_bytes):
    shards, current, size = [], [], 0
    for entry in entries:
        if current and size + entry[3] > max_bytes:
            shards.append(current)
            current, size = [], 0
        current.append(entry)
        size += entry[3]
    if current:
        shards.append(current)
    return [("model-%05d-of-%05d.safetensors" % (i + 1, len(shards)), s) for i, s in enumerate(shards)]


def write_sharded(dest, entries, produce, max_bytes=SHARD_BYTES):
    """Write entries [(name, dtype, shape, nbytes)] into sharded safetensors + index.

    produce(name) yields the bytes-like pieces of that tensor.
    """
    weight_map = {}
    for shard_name, shard in shard_plan(entries, max_bytes):
        with open(os.path.join(dest, shard_name), "wb") as handle:
            handle.write(load_converter()._header_bytes(shard))  # pylint: disable=protected-access
            for name, _dtype, _shape, nbytes in shard:
                written = 0
                for piece in produce(name):
                    handle.write(piece)
                    written += memoryview(piece).nbytes
                if written != nbytes:
                    raise RuntimeError("%s: wrote %d bytes, expected %d" % (name, written, nbytes))
                weight_map[name] = shard_name
    index = {"metadata": {"total_size": sum(e[3] for e in entries)}, "weight_map": weight_map}
    with open(os.path.join(dest, "model.safetensors.index.json"), "w") as handle:
        json.dump(index, handle, indent=2, sort_keys=True)


# ---------------------------------------------------------------------------------------------
# 1. Synthetic ModelOpt NVFP4 checkpoint
# ---------------------------------------------------------------------------------------------


def generate(src, layers, seed):
    import numpy as np
    rng = np.random.default_rng(seed)
    os.makedirs(src)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
              "intermediate_size": INTER, "num_attention_heads": 32, "num_key_value_heads": 8,
              "num_hidden_layers": layers, "vocab_size": 128256, "torch_dtype": "bfloat16",
              "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}
    with open(os.path.join(src, "config.json"), "w") as handle:
        json.dump(config, handle, indent=2)
    with open(os.path.join(src, "hf_quant_config.json"), "w") as handle:
        json.dump({"producer": {"name": "modelopt", "version": "synthetic"},
                   "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None, "group_size": 16,
                                    "exclude_modules": ["lm_head"]}}, handle, indent=2)
    entries, makers = [], {}
    for layer in range(layers):
        base = "model.layers.%d" % layer
        for norm in ("input_layernorm", "post_attention_layernorm"):
            name = "%s.%s.weight" % (base, norm)
            entries.append((name, "BF16", [HIDDEN], HIDDEN * 2))
            makers[name] = ("norm", HIDDEN)
        for lin, out_f, in_f in LAYER_LINEARS:
            name = "%s.%s" % (base, lin)
            entries.append((name + ".weight", "U8", [out_f, in_f // 2], out_f * in_f // 2))
            makers[name + ".weight"] = ("packed", out_f, in_f)
            entries.append((name + ".weight_scale", "F8_E4M3", [out_f, in_f // 16], out_f * in_f // 16))
            makers[name + ".weight_scale"] = ("scale", out_f, in_f)
            entries.append((name + ".weight_scale_2", "F32", [], 4))
            makers[name + ".weight_scale_2"] = ("scale2",)
            entries.append((name + ".input_scale", "F32", [], 4))
            makers[name + ".input_scale"] = ("scale2",)
    entries.append(("model.norm.weight", "BF16", [HIDDEN], HIDDEN * 2))
    makers["model.norm.weight"] = ("norm", HIDDEN)

    def produce(name):
        kind = makers[name]
        if kind[0] == "norm":
            yield (rng.standard_normal(kind[1], dtype=np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
        elif kind[0] == "scale2":
            yield np.array([rng.uniform(1e-5, 1e-3)], dtype="<f4").tobytes()
        elif kind[0] == "packed":
            rows, half = kind[1], kind[2] // 2
            step = max(1, (32 << 20) // half)
            for r0 in range(0, rows, step):
                yield rng.integers(0, 256, size=(min(step, rows - r0), half), dtype=np.uint8).tobytes()
        else:
            # Positive finite e4m3 codes 0x01..0x7E (2^-9 .. 448), as ModelOpt's clamped scales are.
            yield rng.integers(1, 0x7F, size=(kind[1], kind[2] // 16), dtype=np.uint8).tobytes()

    write_sharded(src, entries, produce)
    for extra in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        with open(os.path.join(src, extra), "w") as handle:
            json.dump({"synthetic": True}, handle)


# ---------------------------------------------------------------------------------------------
# 3. torch reference following vLLM's NVFP4 emulation dequantization
# ---------------------------------------------------------------------------------------------

# vllm-0.19.1 vllm/model_executor/layers/quantization/utils/nvfp4_emulation_utils.py:15-17 (verified)
E2M1_MAGNITUDES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def torch_unpack_fp4(torch, packed, dtype):
    """Same algorithm as vLLM break_fp4_bytes (nvfp4_emulation_utils.py:20-36, verified): low and
    high nibbles stacked (low = element 2i first), sign bit 3, magnitude bits 0-2 looked up in the
    E2M1 table as int64 indices, times where(sign, -1, 1), reshaped to [m, 2n]."""
    m, n = packed.shape
    flat = packed.flatten()
    nibbles = torch.stack((flat & 0x0F, (flat & 0xF0) >> 4), dim=1).flatten()
    negative = (nibbles & 0x08).to(torch.bool)
    magnitude = (nibbles & 0x07).to(torch.long)
    table = torch.tensor(E2M1_MAGNITUDES, dtype=torch.float32)
    values = table[magnitude] * torch.where(negative, -1.0, 1.0)
    return values.reshape(m, n * 2).to(dtype=dtype)


def torch_dequantize(torch, packed, scale_u8, scale_2, block=16):
    """As vLLM dequantize_to_dtype (nvfp4_emulation_utils.py:49-65, verified): fp32 elements
    reshaped to [m, k/16, 16], the block scale viewed as float8_e4m3fn and widened to fp32, the
    product cast to the output dtype. Two deliberate differences: checkpoint scales are row-major,
    so convert_swizzled_to_linear (lines 39-46, for vLLM's internally swizzled copy) is not
    applied (facts.md section 4); and the ModelOpt per-tensor scale multiplies
    (ModelOpt NVFP4QTensor.dequantize: per_block_scale = scale * double_scale) where vLLM divides by
    a compressed-tensors-style divisor."""
    m, packed_k = packed.shape
    k = packed_k * 2
    elems = torch_unpack_fp4(torch, packed, torch.float32).reshape(m, k // block, block)
    block_scale = scale_u8.view(torch.float8_e4m3fn).to(torch.float32) * scale_2
    return (elems * block_scale.unsqueeze(-1)).reshape(m, k).to(torch.float16)


def torch_convert(conv, src, dest):
    import numpy as np
    import torch
    files = sorted(f for f in os.listdir(src) if f.endswith(".safetensors"))
    headers = [conv.read_header(os.path.join(src, f)) for f in files]
    where = {}
    for header in headers:
        for name in header["tensors"]:
            where[name] = header
    entries, jobs = [], {}
    for header in headers:
        for name in sorted(header["tensors"], key=lambda n: header["tensors"][n]["offsets"][0]):
            info = header["tensors"][name]
            prefix, last = name.rsplit(".", 1)
            if last == "weight" and info["dtype"] == "U8" and prefix + ".weight_scale_2" in where:
                rows, half = info["shape"]
                entries.append((name, "F16", [rows, half * 2], rows * half * 4))
                jobs[name] = ("dequant", prefix)
            elif last in ("weight_scale", "weight_scale_2", "input_scale"):
                continue
            elif info["dtype"] == "BF16":
                entries.append((name, "F16", info["shape"], info["offsets"][1] - info["offsets"][0]))
                jobs[name] = ("cast", name)
            else:
                entries.append((name, info["dtype"], info["shape"], info["offsets"][1] - info["offsets"][0]))
                jobs[name] = ("copy", name)

    def tensor(name):
        return torch.from_numpy(np.array(conv.load_tensor(where[name], name)))

    def produce(name):
        kind, key = jobs[name]
        if kind == "dequant":
            scale_2 = float(np.asarray(conv.load_tensor(where[key + ".weight_scale_2"], key + ".weight_scale_2")))
            out = torch_dequantize(torch, tensor(key + ".weight"), tensor(key + ".weight_scale"),
                                   torch.tensor(scale_2, dtype=torch.float32))
            yield out.numpy().tobytes()
        elif kind == "cast":
            yield tensor(key).view(torch.bfloat16).to(torch.float16).numpy().tobytes()
        else:
            yield np.array(conv.load_tensor(where[key], key)).tobytes()

    os.makedirs(dest)
    write_sharded(dest, entries, produce)
    for name in os.listdir(src):
        if name.startswith("tokenizer") or name == "generation_config.json":
            shutil.copyfile(os.path.join(src, name), os.path.join(dest, name))
    with open(os.path.join(src, "config.json")) as handle:
        config = json.load(handle)
    config.pop("quantization_config", None)
    config["torch_dtype"] = "float16"
    with open(os.path.join(dest, "config.json"), "w") as handle:
        json.dump(config, handle, indent=2, sort_keys=True)


# ---------------------------------------------------------------------------------------------
# Children
# ---------------------------------------------------------------------------------------------


def tree_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _s, fs in os.walk(path) for f in fs)


def child(args):
    result = {}
    if args.child == "generate":
        base = vm_rss_bytes()
        start = time.time()
        generate(args.src, args.layers, args.seed)
    elif args.child in ("ours", "ours-discard"):
        import numpy  # noqa: F401  (imported before the clock starts, like torch below)
        conv = load_converter()
        if args.child == "ours-discard":
            discard_output(conv)
        result["workers"] = args.workers or conv.default_workers()
        base = vm_rss_bytes()
        start = time.time()
        res = conv.convert_checkpoint(args.src, args.dest, workers=result["workers"])
        result["converter_result"] = {"shards": res["shards"], "output_bytes": res["output_bytes"]}
    elif args.child == "ours-profile":
        import cProfile
        import pstats
        conv = load_converter()
        base = vm_rss_bytes()
        start = time.time()
        prof = cProfile.Profile()
        prof.enable()
        conv.convert_checkpoint(args.src, args.dest)
        prof.disable()
        stats = pstats.Stats(prof, stream=sys.stderr)
        stats.sort_stats("tottime").print_stats(15)
    elif args.child == "torch":
        import torch
        conv = load_converter()
        result["torch"] = "%s, %d threads" % (torch.__version__, torch.get_num_threads())
        base = vm_rss_bytes()
        start = time.time()
        torch_convert(conv, args.src, args.dest)
    elif args.child in ("copy", "write", "write-64mb"):
        import numpy as np
        chunk = load_converter().BUFFER_BYTES if args.child == "write" else OLD_WRITE_PIECE
        src = np.ones(chunk, dtype=np.uint8)
        dst = np.empty_like(src)
        base = vm_rss_bytes()
        start = time.time()
        left = args.bytes
        if args.child == "copy":
            while left > 0:
                n = min(chunk, left)
                np.copyto(dst[:n], src[:n])
                left -= n
        else:
            with open(os.path.join(args.dest), "wb") as handle:
                while left > 0:
                    n = min(chunk, left)
                    np.copyto(dst[:n], src[:n])
                    handle.write(dst[:n])
                    left -= n
    else:
        raise SystemExit("unknown child %r" % args.child)
    result["seconds"] = time.time() - start
    used = resource.getrusage(resource.RUSAGE_SELF)
    result["cpu_user"], result["cpu_system"] = used.ru_utime, used.ru_stime
    result["peak_rss"] = vm_hwm_bytes()
    result["baseline_rss"] = base
    if args.dest and os.path.isdir(args.dest):
        result["output_bytes"] = tree_bytes(args.dest)
    print("BENCH-RESULT " + json.dumps(result))


def discard_output(conv):
    """The converter with its shard writes dropped (headers only reach the files) and the read-back
    check skipped: what the conversion costs (reading, hashing, dequantizing) without the writes."""

    class Discard(object):
        def __init__(self, raw):
            self.raw = raw

        def tell(self):
            return self.raw.tell()

        def write(self, data):
            pass

    init = conv._BlockWriter.__init__  # pylint: disable=protected-access

    def discarding(self, handle, *args, **kwargs):
        init(self, Discard(handle), *args, **kwargs)

    conv._BlockWriter.__init__ = discarding  # pylint: disable=protected-access
    conv.verify_copy = lambda *args: None


def mem_available_bytes():
    with open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def warm_up(nbytes):
    """Touch nbytes of new memory and free it, so that the next child's page cache pages are pages the
    VM's host has backed already (see the module docstring). Seconds taken."""
    import numpy as np
    start = time.time()
    np.ones(nbytes, dtype=np.uint8)
    return time.time() - start


def run_child(kind, warm=0, **kw):
    if warm:
        warm_up(warm)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", kind]
    for key, value in kw.items():
        cmd += ["--%s" % key.replace("_", "-"), str(value)]
    sys.stdout.flush()
    os.sync()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, universal_newlines=True, check=False)
    if proc.returncode != 0:
        raise SystemExit("%s failed (exit %d): %s" % (kind, proc.returncode, " ".join(cmd)))
    for line in proc.stdout.splitlines():
        if line.startswith("BENCH-RESULT "):
            return json.loads(line[len("BENCH-RESULT "):])
    raise SystemExit("%s printed no result" % kind)


# ---------------------------------------------------------------------------------------------
# Bit-identity sample
# ---------------------------------------------------------------------------------------------


def sample_digests(conv, dest, names):
    index = json.load(open(os.path.join(dest, "model.safetensors.index.json")))
    headers = {}
    out = {}
    for name in names:
        shard = index["weight_map"][name]
        if shard not in headers:
            headers[shard] = conv.read_header(os.path.join(dest, shard))
        info = headers[shard]["tensors"][name]
        arr = conv.load_tensor(headers[shard], name)
        out[name] = (info["dtype"], info["shape"], hashlib.sha256(memoryview(arr.tobytes())).hexdigest())
    return out


def cpu_model():
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except IOError:
        pass
    return platform.processor() or "unknown"


def gbps(nbytes, seconds):
    return nbytes / GB / seconds if seconds > 0 else float("inf")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--size-gb", type=float, default=2.0, help="packed NVFP4 weight bytes, GB (default 2)")
    parser.add_argument("--workdir", default=os.path.join(ROOT, ".cache", "bench"))
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--keep", action="store_true", help="keep the checkpoints afterwards")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each part; the fastest is reported")
    parser.add_argument("--profile", action="store_true", help="also run our converter under cProfile")
    parser.add_argument("--no-warm-up", action="store_true", help="do not touch and free output-sized memory "
                        "before each timed part")
    parser.add_argument("--workers", type=int, default=0, help="our converter's worker threads (default: its own "
                        "default, one per CPU)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--src", help=argparse.SUPPRESS)
    parser.add_argument("--dest", help=argparse.SUPPRESS)
    parser.add_argument("--layers", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--bytes", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)

    layers = max(1, int(round(args.size_gb * GB / PACKED_PER_LAYER)))
    packed = layers * PACKED_PER_LAYER
    in_bytes = packed * 9 // 8 + layers * 2 * HIDDEN * 2
    out_bytes = packed * 4 + (layers * 2 + 1) * HIDDEN * 2
    os.makedirs(args.workdir, exist_ok=True)
    run_dir = os.path.join(args.workdir, "run-%d" % os.getpid())
    src, ours, ref = (os.path.join(run_dir, d) for d in ("nvfp4", "fp16-ours", "fp16-torch"))
    st = os.statvfs(args.workdir)
    free = st.f_bavail * st.f_frsize
    # Input, then one FP16 output at a time (ours is hashed and removed before torch runs), + 1 GB slack.
    need = in_bytes + out_bytes + GB
    print("machine: %s, %d CPUs (nproc), %.1f GB RAM; python %s"
          % (cpu_model(), os.cpu_count(), os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GB,
             platform.python_version()))
    print("checkpoint: %d Llama-3.1-8B-shaped layers, %.2f GB packed NVFP4 (%.2f GB with scales), FP16 output %.2f GB"
          % (layers, packed / GB, in_bytes / GB, out_bytes / GB))
    print("disk: %.1f GB free under %s, this run needs %.1f GB" % (free / GB, args.workdir, need / GB))
    if free < need:
        raise SystemExit("not enough disk under %s: need %.1f GB, %.1f GB free; lower --size-gb or set --workdir"
                         % (args.workdir, need / GB, free / GB))
    warm = 0 if args.no_warm_up else out_bytes
    if warm and mem_available_bytes() < out_bytes + 2 * GB:
        print("warm-up: skipped, %.1f GB of memory available, it needs %.1f GB"
              % (mem_available_bytes() / GB, (out_bytes + 2 * GB) / GB))
        warm = 0
    elif warm:
        print("warm-up: %.2f GB touched and freed before each timed part" % (out_bytes / GB))
    os.makedirs(run_dir)
    try:
        gen = run_child("generate", src=src, layers=layers, seed=args.seed)
        print("generated in %.1f s" % gen["seconds"])
        conv = load_converter()
        sample = ["model.layers.0.%s.weight" % n for n, _o, _i in LAYER_LINEARS]
        sample += ["model.layers.%d.mlp.down_proj.weight" % (layers - 1), "model.layers.0.input_layernorm.weight",
                   "model.norm.weight"]

        res = {}
        write_path = os.path.join(run_dir, "write.bin")
        for attempt in range(args.repeat):
            # Fastest of --repeat runs (the machine is shared); peak RSS is the largest seen.
            runs = {"ours": run_child("ours", warm, src=src, dest=ours, workers=args.workers)}
            ours_digest = sample_digests(conv, ours, sample)
            shutil.rmtree(ours)
            runs["torch"] = run_child("torch", warm, src=src, dest=ref)
            ref_digest = sample_digests(conv, ref, sample)
            shutil.rmtree(ref)
            runs["ours-discard"] = run_child("ours-discard", warm, src=src, dest=ours, workers=args.workers)
            shutil.rmtree(ours)
            runs["copy"] = run_child("copy", warm, bytes=out_bytes)
            for key in ("write", "write-64mb"):
                runs[key] = run_child(key, warm, bytes=out_bytes, dest=write_path)
                os.remove(write_path)
            for key, r in runs.items():
                print("run %d %-12s %8.2f s  CPU user %6.2f s system %6.2f s  peak RSS %6.0f MB"
                      % (attempt + 1, key, r["seconds"], r["cpu_user"], r["cpu_system"], r["peak_rss"] / MB))
                if key in res:
                    r["peak_rss"] = max(r["peak_rss"], res[key]["peak_rss"])
                    if r["seconds"] > res[key]["seconds"]:
                        res[key]["peak_rss"] = r["peak_rss"]
                        continue
                res[key] = r
        if args.profile:
            run_child("ours-profile", src=src, dest=ours)
            shutil.rmtree(ours)
    finally:
        if not args.keep:
            shutil.rmtree(run_dir, ignore_errors=True)

    print("")
    workers = res["ours"]["workers"]
    print("%-50s %8s %7s %9s %9s %8s %8s" % ("", "seconds", "GB/s", "CPU user", "CPU sys", "peak RSS", "baseline"))
    labels = (("ours", "our converter (numpy, %d worker threads)" % workers),
              ("ours-discard", "our converter, output discarded (no writes)"),
              ("torch", "torch reference (vLLM emulation algorithm)"),
              ("write", "numpy write to file, %d MiB pieces (the bound)" % (conv.BUFFER_BYTES >> 20)),
              ("write-64mb", "numpy write to file, 64 MB pieces (old bound)"),
              ("copy", "numpy copy in RAM (memory-bandwidth bound)"))
    for key, label in labels:
        r = res[key]
        print("%-50s %8.2f %7.3f %9.2f %9.2f %8.0f %8.0f"
              % (label, r["seconds"], gbps(out_bytes, r["seconds"]), r["cpu_user"], r["cpu_system"],
                 r["peak_rss"] / MB, r["baseline_rss"] / MB))
    print("(GB/s = FP16 output bytes %.3f GB / wall seconds of the work, imports excluded; CPU = seconds of all "
          "the child's threads; RSS in MB; %d CPUs; %s)" % (out_bytes / GB, os.cpu_count(), res["torch"].get("torch", "")))
    ours_s = gbps(out_bytes, res["ours"]["seconds"])
    vs_write = ours_s / gbps(out_bytes, res["write"]["seconds"])
    vs_torch = ours_s / gbps(out_bytes, res["torch"]["seconds"])
    rss_limit = 1.5 * LARGEST_OUTPUT + 200 * MB
    # The converter's own buffers (_nvfp4 module docstring): (workers + 4) pieces of BUFFER_BYTES, and an
    # index scratch of GATHER_BLOCKS x 88 bytes per thread (the workers and the main thread).
    buffers = (workers + 4) * conv.BUFFER_BYTES + (workers + 1) * conv.GATHER_BLOCKS * 88
    identical = ours_digest == ref_digest
    print("")
    print("ours / file-write = %6.1f%%   target >= %.0f%%   %s"
          % (100 * vs_write, 100 * TARGET_VS_WRITE, "MET" if vs_write >= TARGET_VS_WRITE else "MISSED"))
    print("ours / torch      = %6.2fx   (information)" % vs_torch)
    print("ours / old bound  = %6.1f%%   (information: the file written in 64 MB pieces)"
          % (100 * ours_s / gbps(out_bytes, res["write-64mb"]["seconds"])))
    print("ours / copy bound = %6.1f%%   (information)" % (100 * ours_s / gbps(out_bytes, res["copy"]["seconds"])))
    print("ours peak RSS     = %6.0f MB  target <= 1.5 x %.0f MB (largest output tensor) + 200 MB = %.0f MB  %s; "
          "its buffers: (%d workers + 4) x %d MiB + index scratch = %.0f MB"
          % (res["ours"]["peak_rss"] / MB, LARGEST_OUTPUT / MB, rss_limit / MB,
             "MET" if res["ours"]["peak_rss"] <= rss_limit else "MISSED", workers, conv.BUFFER_BYTES >> 20,
             buffers / MB))
    print("ours vs torch on %d sampled tensors: %s" % (len(sample), "bit-identical" if identical else "DIFFERENT"))
    if not identical:
        for name in sample:
            if ours_digest.get(name) != ref_digest.get(name):
                print("  differs: %s ours %r torch %r" % (name, ours_digest.get(name), ref_digest.get(name)))
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
