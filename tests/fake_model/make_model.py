#!/bin/sh
# -*- coding: utf-8 -*-
# Test fixture only. Re-runs itself with python3 (Debian images have no `python`).
""":"
exec python3 "$0" "$@"
"""
# Copyright: (c) 2026, labfleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write a Llama-shaped model directory whose weights are real safetensors files with zero data.

The headers describe every tensor of the architecture, so weight bytes and parameter counts are
exact, while the data area is a sparse hole (os.truncate): an 8B model "weighs" 16 GB and takes
a few KiB of disk. Used by Molecule scenarios to give the gate a realistic model.

With ``--nvfp4 modelopt`` (tiny presets only) it writes instead a REAL ModelOpt NVFP4 checkpoint
with deterministic data (stdlib random, fixed seed): every decoder Linear weight as packed uint8
``weight`` [out, in/2] (element 2i in the low nibble), float8_e4m3fn ``weight_scale`` [out, in/16]
(safetensors "F8_E4M3"), F32 scalar ``weight_scale_2`` and ``input_scale``; embed_tokens, the norms
and lm_head stay BF16 with real bytes. Layout: ../shared/reference/facts.md section 4
(ModelOpt nvfp4_tensor.py, vLLM 0.19.1 quantization/modelopt.py from_config; "verified"). Two
shards plus model.safetensors.index.json, hf_quant_config.json, config.json quantization_config,
tokenizer_config.json and generation_config.json. tests/fake_model/check_fp16_copy.py checks an
FP16 copy of it bit for bit.

With ``--random`` (tiny presets only) it writes a plain BF16 checkpoint with random weights (stdlib
random, fixed seed) that a real engine loads and runs: scripts/check-real-vllm.sh serves one with vLLM
on the CPU. ``--vocab N`` replaces the preset's vocabulary size (to match a tokenizer's).

    make_model.py DIR [--preset llama-3.1-8b|llama-3.1-70b|tiny-llama|tiny-llama-128]
                      [--torch-dtype float16|bfloat16] [--quant-config JSON]
                      [--nvfp4 modelopt | --random] [--seed N] [--vocab N] [--shards N]
"""

import argparse
import array
import json
import os
import random
import struct
import sys

PRESETS = {
    # Shapes as published in the models' config.json files.
    "llama-3.1-8b": dict(hidden=4096, layers=32, heads=32, kv_heads=8, inter=14336, vocab=128256, ctx=131072),
    "llama-3.1-70b": dict(hidden=8192, layers=80, heads=64, kv_heads=8, inter=28672, vocab=128256, ctx=131072),
    # Not a published model: Llama-shaped but tiny (1.7 M parameters), for real-data fixtures
    # (--nvfp4); ctx 32768 so that a max_model_len of 32768 is a valid request.
    "tiny-llama": dict(hidden=256, layers=2, heads=4, kv_heads=2, inter=512, vocab=1024, ctx=32768),
    # Not a published model either: what a real engine on a CPU serves in seconds (--random, for make
    # check-real-vllm): hidden 128, head size 32 (vLLM's CPU attention needs 32 at least), 2 KV heads.
    "tiny-llama-128": dict(hidden=128, layers=4, heads=4, kv_heads=2, inter=384, vocab=512, ctx=2048),
}


def tensors(p):
    head_dim = p["hidden"] // p["heads"]
    kv = p["kv_heads"] * head_dim
    yield "model.embed_tokens.weight", [p["vocab"], p["hidden"]]
    for i in range(p["layers"]):
        pre = "model.layers.%d." % i
        yield pre + "self_attn.q_proj.weight", [p["hidden"], p["hidden"]]
        yield pre + "self_attn.k_proj.weight", [kv, p["hidden"]]
        yield pre + "self_attn.v_proj.weight", [kv, p["hidden"]]
        yield pre + "self_attn.o_proj.weight", [p["hidden"], p["hidden"]]
        yield pre + "mlp.gate_proj.weight", [p["inter"], p["hidden"]]
        yield pre + "mlp.up_proj.weight", [p["inter"], p["hidden"]]
        yield pre + "mlp.down_proj.weight", [p["hidden"], p["inter"]]
        yield pre + "input_layernorm.weight", [p["hidden"]]
        yield pre + "post_attention_layernorm.weight", [p["hidden"]]
    yield "model.norm.weight", [p["hidden"]]
    yield "lm_head.weight", [p["vocab"], p["hidden"]]


def numel(shape):
    count = 1
    for dim in shape:
        count *= dim
    return count


def check_real_size(p, option):
    """Refuse to write real weight data for a preset larger than NVFP4_MAX_PARAMS."""
    total = sum(numel(shape) for _name, shape in tensors(p))
    if total > NVFP4_MAX_PARAMS:
        raise SystemExit("%s writes real weight data; %d parameters is too many, use a tiny preset"
                         % (option, total))


def write_safetensors(path, specs, dtype="F16", width=2):
    header, offset = {}, 0
    for name, shape in specs:
        size = width
        for dim in shape:
            size *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)) + raw)
    os.truncate(path, 8 + len(raw) + offset)   # the data area stays a sparse hole
    return offset


def write_sparse_shards(directory, specs, shards):
    """The sparse weights in ``shards`` files model-0000i-of-0000n.safetensors (consecutive tensors,
    about as many in each) and the model.safetensors.index.json that names them."""
    weight_map, total_size = {}, 0
    per = -(-len(specs) // shards)
    for index in range(shards):
        shard = "model-%05d-of-%05d.safetensors" % (index + 1, shards)
        part = specs[index * per:(index + 1) * per]
        total_size += write_safetensors(os.path.join(directory, shard), part)
        weight_map.update((name, shard) for name, _shape in part)
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as handle:
        json.dump({"metadata": {"total_size": total_size}, "weight_map": weight_map}, handle, indent=2, sort_keys=True)


# --nvfp4 modelopt: a real checkpoint ------------------------------------------------------------

# The decoder Linear layers ModelOpt quantizes (the rest stays in the original dtype, BF16).
NVFP4_LAYERS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# Refuse to write real data for more parameters than this (the 8B/70B presets are sparse only).
NVFP4_MAX_PARAMS = 50 * 10 ** 6
MODELOPT_PRODUCER = {"name": "modelopt", "version": "0.29.0"}


def _le_bytes(arr):
    """array.array -> little-endian bytes (safetensors is little-endian)."""
    if sys.byteorder == "big":
        arr = array.array(arr.typecode, arr)
        arr.byteswap()
    return arr.tobytes()


def bf16_bytes(rng, numel, exp_lo, exp_hi):
    """Random BF16 values with a random sign and a biased exponent in [exp_lo, exp_hi] (127 = 2^0)."""
    out = array.array("H")
    span = exp_hi - exp_lo + 1
    for _index in range(numel):
        r = rng.getrandbits(24)
        out.append((r & 0x8000) | ((exp_lo + (r >> 16) % span) << 7) | (r & 0x7F))
    return _le_bytes(out)


def e4m3_scale_bytes(rng, numel):
    """Positive float8_e4m3fn block-scale codes: mostly normal 0x30..0x7E (0.5 .. 448, as ModelOpt's
    amax(block) / (6 * weight_scale_2) gives), about 1 % zero or subnormal (0x00..0x02); never
    0x7F/0xFF, the NaN codes."""
    out = bytearray(numel)
    for i in range(numel):
        r = rng.getrandbits(8)
        out[i] = r if r < 3 else 0x30 + r % (0x7F - 0x30)
    return bytes(out)


def f32_scalar(value):
    return struct.pack("<f", value)


def nvfp4_tensors(p, rng):
    """[(name, safetensors dtype, shape, bytes)] of a ModelOpt NVFP4 checkpoint, deterministic in rng."""
    out = []
    for name, shape in tensors(p):
        parts = name.split(".")
        if len(shape) == 2 and len(parts) > 2 and parts[-2] in NVFP4_LAYERS:
            rows, cols = shape
            prefix = name[:-len(".weight")]
            packed = rng.getrandbits(8 * rows * cols // 2).to_bytes(rows * cols // 2, "little")
            out.append((name, "U8", [rows, cols // 2], packed))
            scales = e4m3_scale_bytes(rng, rows * cols // 16)
            out.append((prefix + ".weight_scale", "F8_E4M3", [rows, cols // 16], scales))
            # amax(W) / (6 * 448) for |W| up to about 0.05 .. 0.5; amax(x) / (6 * 448) for activations
            out.append((prefix + ".weight_scale_2", "F32", [], f32_scalar(rng.uniform(2e-5, 2e-4))))
            out.append((prefix + ".input_scale", "F32", [], f32_scalar(rng.uniform(1e-3, 1e-2))))
        elif len(shape) == 1:
            out.append((name, "BF16", shape, bf16_bytes(rng, numel(shape), 126, 127)))   # norms: 0.5 .. 2
        else:
            # embed_tokens / lm_head: 2^-20 .. 2^-3, so some values fall below float16's normal range
            out.append((name, "BF16", shape, bf16_bytes(rng, numel(shape), 107, 124)))
    return out


def write_real_safetensors(path, entries):
    """Write [(name, dtype, shape, bytes)] as safetensors (wider dtypes first, then by name, as
    safetensors' own writer orders them so every tensor stays aligned)."""
    width = {"F32": 4, "BF16": 2}
    entries = sorted(entries, key=lambda e: (-width.get(e[1], 1), e[0]))
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape, data in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)) + raw)
        for entry in entries:
            handle.write(entry[3])
    return offset


def write_nvfp4_modelopt(directory, p, config, seed):
    """The ModelOpt NVFP4 checkpoint files (config.json gets its quantization_config here)."""
    check_real_size(p, "--nvfp4")
    rng = random.Random(seed)
    entries = nvfp4_tensors(p, rng)
    # two shards: embeddings and layer 0 in the first, the rest in the second (exercises the index)
    first = [e for e in entries if e[0].startswith(("model.embed_tokens.", "model.layers.0."))]
    second = [e for e in entries if not e[0].startswith(("model.embed_tokens.", "model.layers.0."))]
    weight_map, total_size = {}, 0
    for shard, part in (("model-00001-of-00002.safetensors", first), ("model-00002-of-00002.safetensors", second)):
        total_size += write_real_safetensors(os.path.join(directory, shard), part)
        weight_map.update((e[0], shard) for e in part)
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as handle:
        json.dump({"metadata": {"total_size": total_size}, "weight_map": weight_map}, handle, indent=2, sort_keys=True)
    exclude = ["lm_head"]
    # hf_quant_config.json: the legacy ModelOpt description (vLLM requires quant_algo, group_size and
    # kv_cache_quant_algo for NVFP4 there); config.json quantization_config: the newer form.
    with open(os.path.join(directory, "hf_quant_config.json"), "w") as handle:
        json.dump({"producer": MODELOPT_PRODUCER,
                   "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None, "group_size": 16,
                                    "exclude_modules": exclude}}, handle, indent=4)
    scheme = {"dynamic": False, "num_bits": 4, "type": "float", "group_size": 16}
    config["quantization_config"] = {
        "quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "ignore": exclude,
        "producer": MODELOPT_PRODUCER, "kv_cache_scheme": None,
        "config_groups": {"group_0": {"input_activations": dict(scheme), "weights": dict(scheme),
                                      "targets": ["Linear"]}},
    }
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as handle:
        json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
                   "clean_up_tokenization_spaces": True, "model_max_length": p["ctx"],
                   "tokenizer_class": "PreTrainedTokenizerFast"}, handle, indent=2)
    with open(os.path.join(directory, "generation_config.json"), "w") as handle:
        json.dump({"bos_token_id": 1, "eos_token_id": 2, "do_sample": True, "temperature": 0.6, "top_p": 0.9},
                  handle, indent=2)


# --random: a plain BF16 checkpoint a real engine serves --------------------------------------

def write_random(directory, p, seed):
    """model.safetensors with random BF16 weights: norms 0.5 .. 2, every matrix 2^-9 .. 2^-5 in
    magnitude (about the spread of an initialised model, so activations stay finite)."""
    check_real_size(p, "--random")
    rng = random.Random(seed)
    entries = []
    for name, shape in tensors(p):
        exp_lo, exp_hi = (126, 127) if len(shape) == 1 else (118, 122)
        entries.append((name, "BF16", shape, bf16_bytes(rng, numel(shape), exp_lo, exp_hi)))
    write_real_safetensors(os.path.join(directory, "model.safetensors"), entries)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir")
    parser.add_argument("--preset", default="llama-3.1-8b", choices=sorted(PRESETS))
    parser.add_argument("--torch-dtype", default="bfloat16")
    parser.add_argument("--quant-config", default=None, help="JSON written to quant_config.json")
    parser.add_argument("--nvfp4", default=None, choices=["modelopt"],
                        help="write a real NVFP4 checkpoint in this layout (tiny presets) instead of sparse zeros")
    parser.add_argument("--random", action="store_true",
                        help="write real random BF16 weights (tiny presets) instead of sparse zeros")
    parser.add_argument("--seed", type=int, default=20260101, help="random seed of the --nvfp4 / --random data")
    parser.add_argument("--vocab", type=int, default=None, help="vocabulary size instead of the preset's")
    parser.add_argument("--shards", type=int, default=1,
                        help="sparse weights in this many shards with a model.safetensors.index.json (default 1: "
                             "one model.safetensors)")
    args = parser.parse_args()
    if not 1 <= args.shards <= 99 or (args.shards > 1 and (args.nvfp4 or args.random)):
        parser.error("--shards must be from 1 to 99, and goes with the sparse weights only")
    if args.nvfp4 and args.random:
        parser.error("--nvfp4 and --random exclude each other")
    p = dict(PRESETS[args.preset])
    if args.vocab is not None:
        if not 1 <= args.vocab <= 10 ** 6:
            parser.error("--vocab must be from 1 to 1000000")
        p["vocab"] = args.vocab
    os.makedirs(args.dir, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": p["hidden"],
        "intermediate_size": p["inter"], "num_hidden_layers": p["layers"], "num_attention_heads": p["heads"],
        "num_key_value_heads": p["kv_heads"], "max_position_embeddings": p["ctx"], "vocab_size": p["vocab"],
        "torch_dtype": args.torch_dtype, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    }
    if args.nvfp4:
        write_nvfp4_modelopt(args.dir, p, config, args.seed)
    with open(os.path.join(args.dir, "config.json"), "w") as handle:
        json.dump(config, handle, indent=2)
    if args.quant_config:
        with open(os.path.join(args.dir, "quant_config.json"), "w") as handle:
            json.dump(json.loads(args.quant_config), handle, indent=2)
    if args.random:
        write_random(args.dir, p, args.seed)
    elif args.shards > 1:
        write_sparse_shards(args.dir, list(tensors(p)), args.shards)
    elif not args.nvfp4:
        write_safetensors(os.path.join(args.dir, "model.safetensors"), list(tensors(p)))


if __name__ == "__main__":
    main()
