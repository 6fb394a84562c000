"""Print the gate's plan of one model across a group of hosts (pipeline parallel over Ray).

    python3 scripts/plan-group.py --reference [--json]
    python3 scripts/plan-group.py GROUP.json [--json]

--reference: the reference 70B (Llama-3.1-70B shapes, the NVFP4 checkpoint of the reference
deployment, 141.1 GB in FP16) on three hosts of 2x Tesla V100-PCIE-32GB (driver 550.54.14, one
image digest, vLLM 0.8.5), --tensor-parallel-size 2 --pipeline-parallel-size 3 --dtype float16
--gpu-memory-utilization 0.92 --max-model-len 32768 --max-num-seqs 32. Each member's own verdict
is the one-host plan (decisions/_plan.py plan(), tensor_parallel_size 2), which plans the GPTQ
repack on one host; the group plan (decisions/_group.py plan_group()) plans the FP16 copy across
the three and chooses.

GROUP.json: {"members": [...], "model": {...}, "vllm": {...}, "network": {...}, "leader": "..."}
as plan_group() takes them (docs/deploy_gate.md "One model across hosts"). Prints the plan as text
(or JSON with --json); exit status 1 when the group is refused, 2 on malformed input.
"""

import argparse
import datetime
import json
import os
import sys

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
# collections/ansible_collections/labfleet/vllm is a link to the checkout.
sys.path.insert(0, os.path.join(TOP, "collections"))

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _group  # noqa: E402
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _plan  # noqa: E402
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge import _policy  # noqa: E402

# The reference host and image (as tests/unit/plugins/module_utils/test_plan_fp16_fallback.py).
V100 = {"name": "Tesla V100-PCIE-32GB", "compute_capability": "7.0", "memory_total_mib": 32768}
IMAGE = {"cuda_version": "12.4.0", "arch_list": ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0+PTX"],
         "vllm_version": "0.8.5", "require_cuda": "cuda>=12.4 brand=tesla,driver>=470,driver<471",
         "quantization_methods": _policy.VLLM_RELEASES["0.8.5"]["quantization_methods"],
         "state": "absent", "profile_matched": True, "reference": "vllm/vllm-openai:v0.8.5"}
DIGEST = "sha256:" + "5" * 64
DRIVER = "550.54.14"
ARGS = {"tensor_parallel_size": 2, "dtype": "float16", "gpu_memory_utilization": 0.92, "max_model_len": 32768,
        "max_num_seqs": 32}
# Llama-3.1-70B (tests/fake_model/make_model.py preset llama-3.1-70b).
HIDDEN, LAYERS, HEADS, KV_HEADS, INTER, VOCAB = 8192, 80, 64, 8, 28672, 128256


def reference_model():
    """The reference NVFP4 checkpoint as model_facts reports it (its linear weights by shape, the
    float16 rest, the FP16 size = logical parameters x 2)."""
    head_dim = HIDDEN // HEADS
    kv = KV_HEADS * head_dim
    shapes = {}
    for shape in ((HIDDEN, HIDDEN), (kv, HIDDEN), (kv, HIDDEN), (HIDDEN, HIDDEN), (INTER, HIDDEN), (INTER, HIDDEN),
                  (HIDDEN, INTER)):
        shapes[shape] = shapes.get(shape, 0) + LAYERS
    linear = sum(o * i * n for (o, i), n in shapes.items())
    other_params = 2 * VOCAB * HIDDEN + (2 * LAYERS + 1) * HIDDEN
    return {"num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": head_dim, "hidden_size": HIDDEN,
            "intermediate_size": INTER, "vocab_size": VOCAB, "num_hidden_layers": LAYERS,
            "max_position_embeddings": 131072, "torch_dtype": "bfloat16", "model_type": "llama",
            "architectures": ["LlamaForCausalLM"], "quant_method": "modelopt_fp4", "quant_bits": 4,
            "quant_group_size": 16, "weight_bytes": 42_700_000_000, "param_count": linear + other_params,
            "fp16_weight_bytes": 2 * (linear + other_params),
            "nvfp4_linear_shapes": [{"out_features": o, "in_features": i, "count": n}
                                    for (o, i), n in sorted(shapes.items())],
            "nvfp4_other_bytes": 2 * other_params}


def reference_inputs():
    """plan_group()'s inputs for the reference group, each member judged alone by _plan.plan()."""
    model = reference_model()
    request = {"image": "vllm/vllm-openai:v0.8.5", "model_path": "/srv/models/llama-70b-nvfp4",
               "served_model_name": "llama-70b", "vllm_args": dict(ARGS),
               "instances": [{"name": "vllm", "port": 8000, "gpus": "all"}],
               "driver": {"manage": True, "branch": "550"}}
    gpus = [dict(V100, index=0), dict(V100, index=1)]
    roomy = {"complete": False, "disk_free_bytes": 500 * 10 ** 9}
    verdict = _plan.plan(gpus=gpus, driver_version=DRIVER, image=IMAGE, model=model, request=request, nvlink=False,
                         today=datetime.date(2026, 12, 1), fp16_copy=roomy, gptq_copy=roomy)
    members = []
    for number in range(3):
        members.append({"name": "gpu%d" % (number + 1), "address": "10.0.0.%d" % (11 + number), "verdict": verdict,
                        "gpus": gpus, "driver_version": DRIVER, "image_digest": DIGEST,
                        "interfaces": {"lo": 65536, "ens1f0": 9000}})
    names = [m["name"] for m in members]
    pairs = [{"from": a, "to": b, "reachable": True} for i, a in enumerate(names) for b in names[i + 1:]]
    return {"members": members, "model": model, "vllm": dict(ARGS, pipeline_parallel_size=3, vllm_version="0.8.5"),
            "network": {"nccl_interface": "ens1f0", "pairs": pairs}}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("group", nargs="?", help="a JSON file with members, model, vllm, network (and leader)")
    parser.add_argument("--reference", action="store_true", help="the reference 70B across three 2x V100 hosts")
    parser.add_argument("--json", action="store_true", help="print the whole plan as JSON")
    args = parser.parse_args(argv)
    if args.reference == bool(args.group):
        parser.error("give either --reference or a GROUP.json file")
    if args.reference:
        inputs = reference_inputs()
    else:
        with open(args.group, encoding="utf-8") as handle:
            inputs = json.load(handle)
        if not isinstance(inputs, dict):
            print("%s: expected a JSON object with members, model, vllm, network" % args.group, file=sys.stderr)
            return 2
    try:
        result = _group.plan_group(inputs.get("members"), inputs.get("model"), inputs.get("vllm"),
                                   network=inputs.get("network"), leader=inputs.get("leader"),
                                   policy_overrides=inputs.get("policy_overrides"))
    except _group.GateInputError as exc:
        print("error: %s" % exc, file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True, default=str))
    else:
        print("\n".join(_group.plan_text(result)))
    return 0 if result["allowed"] else 1


if __name__ == "__main__":
    sys.exit(main())
