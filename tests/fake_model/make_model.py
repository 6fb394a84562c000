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

    make_model.py DIR [--preset llama-3.1-8b|llama-3.1-70b] [--torch-dtype float16|bfloat16]
                      [--quant-config JSON]
"""

import argparse
import json
import os
import struct

PRESETS = {
    # Shapes as published in the models' config.json files.
    "llama-3.1-8b": dict(hidden=4096, layers=32, heads=32, kv_heads=8, inter=14336, vocab=128256, ctx=131072),
    "llama-3.1-70b": dict(hidden=8192, layers=80, heads=64, kv_heads=8, inter=28672, vocab=128256, ctx=131072),
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir")
    parser.add_argument("--preset", default="llama-3.1-8b", choices=sorted(PRESETS))
    parser.add_argument("--torch-dtype", default="bfloat16")
    parser.add_argument("--quant-config", default=None, help="JSON written to quant_config.json")
    args = parser.parse_args()
    p = PRESETS[args.preset]
    os.makedirs(args.dir, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": p["hidden"],
        "intermediate_size": p["inter"], "num_hidden_layers": p["layers"], "num_attention_heads": p["heads"],
        "num_key_value_heads": p["kv_heads"], "max_position_embeddings": p["ctx"], "vocab_size": p["vocab"],
        "torch_dtype": args.torch_dtype, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    }
    with open(os.path.join(args.dir, "config.json"), "w") as handle:
        json.dump(config, handle, indent=2)
    if args.quant_config:
        with open(os.path.join(args.dir, "quant_config.json"), "w") as handle:
            json.dump(json.loads(args.quant_config), handle, indent=2)
    write_safetensors(os.path.join(args.dir, "model.safetensors"), list(tensors(p)))


if __name__ == "__main__":
    main()
