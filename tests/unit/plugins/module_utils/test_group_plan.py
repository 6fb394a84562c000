# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One model across hosts: the group plan (plugins/module_utils/decisions/_group.py).

The reference: Llama-3.1-70B (hidden 8192, 80 layers, 64 heads, 8 KV heads, intermediate 28672,
vocab 128256: tests/fake_model/make_model.py preset llama-3.1-70b) as the reference deployment's
NVFP4 checkpoint, served as its FP16 copy across three hosts of 2x V100 32 GB, TP 2, PP 3, 32K.
Expected figures are worked out here from the model's shapes and vLLM 0.8.5's rules (layer split,
embeddings first, lm_head last, KV per layer, the V0 profile run's MLP peak), not by calling the
functions under test twice.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.converters import _gptq
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _group as G
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _plan as P
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate import GateInputError
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge import _policy

MIB = 1024 ** 2
GIB = 1024 ** 3
H, LAYERS, HEADS, KV_HEADS, INTER, VOCAB = 8192, 80, 64, 8, 28672, 128256
HEAD_DIM = H // HEADS
# Parameters of one decoder layer: q and o (H x H), k and v (H x 1024), gate/up/down, two norms.
LAYER_PARAMS = 2 * H * H + 2 * H * KV_HEADS * HEAD_DIM + 3 * H * INTER + 2 * H
EMBED_PARAMS = VOCAB * H
PARAMS = LAYERS * LAYER_PARAMS + 2 * EMBED_PARAMS + H
assert PARAMS == 70_553_706_496  # model_facts' param_count_logical for Llama-3.1/3.3-70B

V100 = {"name": "Tesla V100-PCIE-32GB", "compute_capability": "7.0", "memory_total_mib": 32768}
IMAGE = {"cuda_version": "12.4.0", "arch_list": ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0+PTX"],
         "vllm_version": "0.8.5", "require_cuda": "cuda>=12.4 brand=tesla,driver>=470,driver<471",
         "quantization_methods": _policy.VLLM_RELEASES["0.8.5"]["quantization_methods"],
         "state": "absent", "profile_matched": True, "reference": "vllm/vllm-openai:v0.8.5"}
ARGS = {"tensor_parallel_size": 2, "dtype": "float16", "gpu_memory_utilization": 0.92, "max_model_len": 32768,
        "max_num_seqs": 32}
DIGEST = "sha256:" + "a" * 64


def decoder_shapes():
    counts = {}
    kv = KV_HEADS * HEAD_DIM
    for shape in ((H, H), (kv, H), (kv, H), (H, H), (INTER, H), (INTER, H), (H, INTER)):
        counts[shape] = counts.get(shape, 0) + LAYERS
    return [{"out_features": o, "in_features": i, "count": n} for (o, i), n in sorted(counts.items())]


LLAMA_70B_NVFP4 = {"num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
                   "hidden_size": H, "intermediate_size": INTER, "vocab_size": VOCAB, "num_hidden_layers": LAYERS,
                   "max_position_embeddings": 131072, "torch_dtype": "bfloat16", "model_type": "llama",
                   "architectures": ["LlamaForCausalLM"], "quant_method": "modelopt_fp4", "quant_bits": 4,
                   "quant_group_size": 16, "weight_bytes": 42_700_000_000, "param_count": PARAMS,
                   "fp16_weight_bytes": 2 * PARAMS, "nvfp4_linear_shapes": decoder_shapes(),
                   "nvfp4_other_bytes": 2 * (2 * EMBED_PARAMS + (2 * LAYERS + 1) * H)}
# The same model as a plain FP16 checkpoint (no NVFP4, so no repack on one host).
LLAMA_70B_FP16 = dict((k, v) for k, v in LLAMA_70B_NVFP4.items()
                      if not k.startswith("quant_") and not k.startswith("nvfp4_"))
LLAMA_70B_FP16.update(torch_dtype="float16", weight_bytes=2 * PARAMS)


@pytest.fixture(scope="module")
def one_host():
    """The reference host's own plan of the NVFP4 70B (TP 2): the GPTQ repack, group size 64."""
    request = {"image": "vllm/vllm-openai:v0.8.5", "model_path": "/srv/models/llama-70b", "served_model_name": "m",
               "vllm_args": dict(ARGS), "instances": [{"name": "vllm", "port": 8000, "gpus": "all"}],
               "driver": {"manage": True, "branch": "550"}}
    roomy = {"complete": False, "disk_free_bytes": 500 * 10 ** 9}
    return P.plan(gpus=[dict(V100, index=0), dict(V100, index=1)], driver_version="550.54.14", image=IMAGE,
                  model=LLAMA_70B_NVFP4, request=request, nvlink=False, today=datetime.date(2026, 12, 1),
                  fp16_copy=roomy, gptq_copy=roomy)


ALLOWED = {"allowed": True, "reasons": [], "serving_path": "gptq_repack",
           "serving": {"gptq_repack": {"group_size": 64, "repacked_bytes": 41_129_623_552,
                                       "repacked_bytes_per_gpu": 20_564_811_776, "bits_per_weight": 4.32,
                                       "kv_cache_tokens": 37051, "expected_error": dict(_gptq.EXPECTED_ERROR[64])}}}


def member(number, verdict=None, **changes):
    item = {"name": "gpu%d" % number, "address": "10.0.0.%d" % (10 + number),
            "verdict": ALLOWED if verdict is None else verdict, "gpus": [dict(V100), dict(V100)],
            "driver_version": "550.54.14", "image_digest": DIGEST, "interfaces": {"lo": 65536, "ens1f0": 9000}}
    item.update(changes)
    return item


def pairs(names, broken=()):
    return [{"from": a, "to": b, "reachable": (a, b) not in broken} for i, a in enumerate(names) for b in names[i + 1:]]


def group(members=None, model=None, vllm=None, network=None, **kwargs):
    members = members if members is not None else [member(1), member(2), member(3)]
    names = [m["name"] for m in members]
    return G.plan_group(members, LLAMA_70B_NVFP4 if model is None else model,
                        dict(ARGS, pipeline_parallel_size=len(members)) if vllm is None else vllm,
                        network={"nccl_interface": "ens1f0", "pairs": pairs(names)} if network is None else network,
                        **kwargs)


def codes(items):
    return [item["code"] for item in items]


def found(items, code):
    hits = [item for item in items if item["code"] == code]
    assert hits, "%s not in %s" % (code, items)
    return hits


# --- the reference plan --------------------------------------------------------------------------


def test_the_layers_split_as_vllm_0_8_5_does():
    # get_pp_indices: even split, the remainder to the stages before the last, second to last first.
    assert G.pp_stage_layers(80, 3) == [(0, 26), (27, 53), (54, 79)]
    assert G.pp_stage_layers(80, 4) == [(0, 19), (20, 39), (40, 59), (60, 79)]
    # DeepSeek-V3's 61 layers over 4 stages: [15, 15, 16, 15] (vllm-project/vllm#46217 'before').
    assert [b - a + 1 for a, b in G.pp_stage_layers(61, 4)] == [15, 15, 16, 15]
    assert [b - a + 1 for a, b in G.pp_stage_layers(10, 4)] == [2, 3, 3, 2]


def test_the_reference_70b_across_three_v100_hosts(one_host):
    members = [member(n, verdict=one_host) for n in (1, 2, 3)]
    result = group(members)
    assert result["allowed"] is True, result["reasons"]
    assert (result["pp"], result["tp"], result["gpus_total"], result["leader"]) == (3, 2, 6, "gpu1")
    assert result["vllm_args"] == {"tensor_parallel_size": 2, "pipeline_parallel_size": 3,
                                   "distributed_executor_backend": "ray"}

    # Weights: float16, 27 / 27 / 26 layers, the embeddings on stage 0, lm_head and the norm on stage 2.
    layer, embed = 2 * LAYER_PARAMS, 2 * EMBED_PARAMS
    stage_bytes = [27 * layer + embed, 27 * layer, 26 * layer + embed + 2 * H]
    assert sum(stage_bytes) == 2 * PARAMS == result["served"]["weight_bytes"] == 141_107_412_992
    per_gpu = [-(-b // 2) for b in stage_bytes]
    assert per_gpu == [24_153_341_952, 23_102_668_800, 23_297_695_744]
    # KV per token per GPU: 2 (K and V) x layers x 8/2 KV heads x 128 x 2 bytes.
    per_token = [2 * n * (KV_HEADS // 2) * HEAD_DIM * 2 for n in (27, 27, 26)]
    assert per_token == [55296, 55296, 53248]
    # The reserve: V0 (compute capability 7.0) profiles 32768 tokens in one pass; the peak is the MLP
    # activation (3H + 3 x intermediate/2) x tokens x 2 bytes, + cuBLAS + non-torch (512 MiB, tp*pp > 1).
    reserve = (3 * H + 3 * INTER // 2) * 32768 * 2 + (4096 * 1024 * 2 + 16 * 1024 * 8 + MIB) + 512 * MIB
    usable = int(32768 * MIB * 0.92) - reserve
    assert result["memory"]["reserve"] == reserve and result["memory"]["usable"] == usable
    tokens = [(usable - w) // t for w, t in zip(per_gpu, per_token)]
    assert tokens == [44885, 63886, 62681]
    stages = result["stages"]
    assert [s["member"] for s in stages] == ["gpu1", "gpu2", "gpu3"]
    assert [s["layers"] for s in stages] == [[0, 26], [27, 53], [54, 79]]
    assert [s["weight_bytes_per_gpu"] for s in stages] == per_gpu
    assert [s["kv_bytes_per_token_per_gpu"] for s in stages] == per_token
    assert [s["kv_bytes_per_gpu"] for s in stages] == [usable - w for w in per_gpu]
    assert [s["kv_tokens"] for s in stages] == tokens
    assert all(s["fits"] for s in stages)
    assert result["kv_tokens"] == min(tokens) == 44885
    assert result["max_concurrent_full_sequences"] == 1

    # The choice: the lossless FP16 group, with the GPTQ repack's own figures from the one-host plan.
    choice = result["choice"]
    assert (choice["chosen"], choice["serving_path"], choice["hosts"]) == ("group", "fp16_fallback", 3)
    gptq = choice["alternatives"]["gptq_one_host"]
    repack = one_host["serving"]["gptq_repack"]
    assert gptq["allowed"] is True and gptq["group_size"] == 64 == repack["group_size"]
    assert gptq["expected_error"] == _gptq.EXPECTED_ERROR[64]
    assert gptq["weight_bytes"] == repack["repacked_bytes"] and gptq["kv_tokens"] == repack["kv_cache_tokens"]
    fp16 = choice["alternatives"]["fp16_group"]
    assert fp16["weight_bytes_per_gpu"] == per_gpu[0] and fp16["kv_tokens"] == 44885 and fp16["lossless"]
    assert "lossless" in choice["why"] and "8.7%" in choice["why"]
    text = "\n".join(G.plan_text(result))
    assert "stage 0 (gpu1, layers 0-26): 27 layers + embeddings; weights 22.5 GiB per GPU" in text
    assert "KV 55296 bytes (54.0 KiB) per token per GPU" in text
    assert "group KV cache: 44885 tokens" in text
    assert "GPTQ repack on one host: fits one host: 41.1 GB of weights, 19.2 GiB per GPU" in text


def test_stages_follow_the_leader_then_the_addresses_as_strings():
    # vLLM's Ray executor: the driver's node first, then by IP address compared as text.
    members = [member(1, address="10.0.0.2"), member(2, address="10.0.0.10"), member(3, address="10.0.0.9")]
    result = group(members, leader="gpu3")
    assert [s["member"] for s in result["stages"]] == ["gpu3", "gpu2", "gpu1"]
    assert result["leader"] == "gpu3"


# --- the members ----------------------------------------------------------------------------------


def test_a_refused_member_refuses_the_group_naming_it():
    refused = {"allowed": False, "reasons": [{"code": "DRIVER_TOO_OLD_FOR_IMAGE", "message": "driver 470 < 550"}]}
    result = group([member(1), member(2, verdict=refused), member(3)])
    assert result["allowed"] is False
    item = found(result["reasons"], "GROUP_MEMBER_REFUSED")
    assert len(item) == 1 and item[0]["member"] == "gpu2"
    assert "DRIVER_TOO_OLD_FOR_IMAGE: driver 470 < 550" in item[0]["message"]
    assert result["choice"]["chosen"] == "gptq_repack"      # the leader's one-host plan still fits


def test_a_member_refused_only_for_the_memory_the_group_plans_is_not_a_refusal():
    # One host cannot hold it (INSUFFICIENT_VRAM) and has no FP4 kernels (the FP16 copy gets around it).
    alone = {"allowed": False, "reasons": [{"code": "QUANTIZATION_UNSUPPORTED_ON_ARCH", "message": "fp4"},
                                           {"code": "INSUFFICIENT_VRAM", "message": "65.7 GiB per GPU"}]}
    result = group([member(n, verdict=alone) for n in (1, 2, 3)])
    assert result["allowed"] is True, result["reasons"]
    assert result["choice"]["chosen"] == "group"
    assert result["choice"]["alternatives"]["gptq_one_host"]["planned"] is False
    # For a checkpoint that is not NVFP4 the missing kernels stand.
    plain = group([member(n, verdict=alone) for n in (1, 2, 3)], model=dict(LLAMA_70B_NVFP4, quant_method="gptq"))
    assert codes(plain["reasons"]) == ["GROUP_MEMBER_REFUSED"] * 3


@pytest.mark.parametrize("changes,code,text", [
    ({"gpus": [dict(V100, name="Tesla V100-PCIE-16GB", memory_total_mib=16384)] * 2}, "GROUP_GPUS_DIFFER",
     "16384 MiB"),
    ({"gpus": [dict(V100)] * 3}, "GROUP_GPUS_DIFFER", "3 x Tesla V100-PCIE-32GB"),
    ({"driver_version": "535.183.01"}, "GROUP_DRIVER_DIFFERS", "driver 535.183.01"),
    ({"image_digest": "sha256:" + "b" * 64}, "GROUP_IMAGE_DIFFERS", "sha256:bbbb"),
    ({"image_digest": None}, "GROUP_IMAGE_DIFFERS", "digest unknown"),
    ({"model_digest": "rev-2"}, "GROUP_MODEL_DIFFERS", "rev-2"),
])
def test_members_must_be_identical(changes, code, text):
    leader = member(1, model_digest="rev-1") if code == "GROUP_MODEL_DIFFERS" else member(1)
    result = group([leader, member(2), member(3, **changes)])
    assert result["allowed"] is False
    item = found(result["reasons"], code)
    assert item[0]["member"] == "gpu3" and text in item[0]["message"]
    assert "gpu1" in item[0]["message"]


def test_pp_times_tp_must_be_the_gpus():
    result = group(vllm=dict(ARGS, pipeline_parallel_size=2))
    assert codes(result["reasons"]) == ["GROUP_PARALLEL_MISMATCH"]
    assert "= 4 GPUs, but the group's 3 members have 6" in result["reasons"][0]["message"]
    assert result["stages"] and result["allowed"] is False
    across = group(vllm=dict(ARGS, tensor_parallel_size=3, pipeline_parallel_size=2))
    assert codes(across["reasons"]) == ["GROUP_PARALLEL_MISMATCH"]
    assert "across hosts" in across["reasons"][0]["message"]
    # Unset, tp and pp follow the group: GPUs per member, members.
    default = group(vllm={"dtype": "float16", "gpu_memory_utilization": 0.92, "max_model_len": 32768,
                          "max_num_seqs": 32})
    assert (default["tp"], default["pp"], default["allowed"]) == (2, 3, True)


def test_a_stage_that_does_not_fit_is_named_with_the_context_that_fits():
    # At 128K (chunked prefill on above 32K, so a smaller profile run) only stage 0, which also holds
    # the embeddings, runs short of KV cache for one sequence.
    result = group(vllm=dict(ARGS, pipeline_parallel_size=3, max_model_len=131072))
    assert result["allowed"] is False
    item = found(result["reasons"], "GROUP_STAGE_DOES_NOT_FIT")
    assert len(item) == 1 and item[0]["member"] == "gpu1"
    stage = result["stages"][0]
    assert stage["kv_tokens"] < 131072 and stage["kv_tokens"] * stage["kv_bytes_per_token_per_gpu"] <= \
        stage["kv_bytes_per_gpu"]
    assert "stage 0 (gpu1, layers 0-26) needs 22.5 GiB of weights + 6.8 GiB for one 131072-token sequence" in \
        item[0]["message"]
    assert "lower max_model_len to %d or less" % (stage["kv_tokens"] // 1024 * 1024) in item[0]["message"]
    assert [s["fits"] for s in result["stages"]] == [False, True, True]
    small = [dict(V100, name="Tesla V100-PCIE-16GB", memory_total_mib=16384)] * 2
    tiny = group([member(n, gpus=small) for n in (1, 2, 3)])
    assert set(codes(tiny["reasons"])) == {"GROUP_STAGE_DOES_NOT_FIT"} and len(tiny["reasons"]) == 3
    assert tiny["choice"]["chosen"] == "gptq_repack"


# --- the network ----------------------------------------------------------------------------------


def test_the_nccl_interface_must_be_on_every_member_with_one_mtu():
    result = group([member(1), member(2, interfaces={"eth0": 1500}), member(3, interfaces={"ens1f0": 1500})])
    missing = found(result["reasons"], "GROUP_NCCL_INTERFACE_MISSING")
    assert missing[0]["member"] == "gpu2" and "has no interface ens1f0 (it has eth0)" in missing[0]["message"]
    mtu = found(result["reasons"], "GROUP_MTU_MISMATCH")
    assert "gpu1 9000, gpu3 1500" in mtu[0]["message"]
    unset = group(network={"pairs": pairs(["gpu1", "gpu2", "gpu3"])})
    assert codes(unset["reasons"]) == ["GROUP_NCCL_INTERFACE_UNSET"]


def test_every_pair_must_reach_each_other():
    broken = [{"from": "gpu1", "to": "gpu2", "reachable": True},
              {"from": "gpu3", "to": "gpu1", "reachable": False, "closed_ports": [6379]}]
    result = group(network={"nccl_interface": "ens1f0", "pairs": broken})
    item = found(result["reasons"], "GROUP_MEMBERS_UNREACHABLE")
    assert item[0]["member"] == "gpu3" and "gpu3 does not reach gpu1 (closed: 6379)" in item[0]["message"]
    unknown = found(result["warnings"], "GROUP_REACHABILITY_UNKNOWN")
    assert "between gpu2 and gpu3" in unknown[0]["message"]
    assert [p["reachable"] for p in result["network"]["pairs"]] == [True, False, None]
    assert {p["port"] for p in result["network"]["ports"]} >= {"6379", "10002-19999"}
    assert "8265" not in {p["port"] for p in result["network"]["ports"]}  # the dashboard is off (ray_cluster)
    # The group refused for its network: the one-host repack is the way.
    assert result["choice"]["chosen"] == "gptq_repack"
    assert "GROUP_MEMBERS_UNREACHABLE" in result["choice"]["alternatives"]["fp16_group"]["why"]


# --- the serving path -----------------------------------------------------------------------------


def test_the_path_choice_both_ways_and_when_one_host_suffices():
    assert group()["choice"]["chosen"] == "group"
    refused_net = group(network={"nccl_interface": "ens1f0", "pairs": pairs(["gpu1", "gpu2", "gpu3"],
                                                                            broken=[("gpu1", "gpu2")])})
    assert refused_net["choice"]["chosen"] == "gptq_repack" and refused_net["choice"]["hosts"] == 1
    nothing = group([member(n, verdict={"allowed": False, "reasons": [{"code": "INSUFFICIENT_VRAM", "message": "x"}]},
                            interfaces={}) for n in (1, 2, 3)])
    assert nothing["choice"]["chosen"] is None and "nothing fits" in nothing["choice"]["why"]
    native = {"allowed": True, "reasons": [], "serving_path": "native"}
    alone = group([member(n, verdict=native) for n in (1, 2, 3)])
    assert alone["choice"]["chosen"] == "one_host"
    assert codes(alone["warnings"]) == ["GROUP_NOT_NEEDED"]


def test_a_plain_fp16_checkpoint_is_served_as_it_is_across_the_group():
    refused = {"allowed": False, "reasons": [{"code": "INSUFFICIENT_VRAM", "message": "65.7 GiB per GPU"}]}
    result = group([member(n, verdict=refused) for n in (1, 2, 3)], model=LLAMA_70B_FP16)
    assert result["allowed"] is True, result["reasons"]
    assert result["choice"]["serving_path"] == "native" and result["choice"]["chosen"] == "group"
    assert result["stages"][0]["weight_bytes_per_gpu"] == 24_153_341_952
    # Stored in float32, served in float16: rescaled as the one-host memory rule does.
    fp32 = group([member(n, verdict=refused) for n in (1, 2, 3)],
                 model=dict(LLAMA_70B_FP16, torch_dtype="float32", weight_bytes=4 * PARAMS))
    assert fp32["served"]["weight_bytes"] == 2 * PARAMS


def test_a_model_without_its_shapes_cannot_be_planned():
    dropped = ("num_hidden_layers", "weight_bytes", "param_count")
    bare = dict((k, v) for k, v in LLAMA_70B_FP16.items() if k not in dropped)
    result = group(model=bare)
    assert codes(result["reasons"]) == ["GROUP_STAGES_UNPLANNED"] and result["stages"] == []
    assert "model.num_hidden_layers, model.weight_bytes or param_count" in result["reasons"][0]["message"]
    assert result["choice"]["alternatives"]["fp16_group"]["planned"] is False
    # Without hidden/intermediate/vocab the reserve is the old constant, and the plan says so.
    rough = group(model=dict((k, v) for k, v in LLAMA_70B_FP16.items() if k != "intermediate_size"))
    assert "GROUP_MEMORY_PLAN_INCOMPLETE" in codes(rough["warnings"])
    assert rough["memory"]["reserve"] == 1536 * MIB


# --- input errors and the script ------------------------------------------------------------------


@pytest.mark.parametrize("members,text", [
    ([member(1)], "at least two hosts"),
    ([member(1), member(1)], "each name once"),
    ([member(1), member(2, verdict={})], "verdict.allowed: required"),
    ([member(1), member(2, gpus=[])], "gpus: expected a non-empty list"),
])
def test_malformed_groups_raise_gate_input_error(members, text):
    with pytest.raises(GateInputError, match=text):
        group(members)
    with pytest.raises(GateInputError, match="leader"):
        group(leader="gpu9")


SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "scripts", "plan-group.py")


def test_the_script_prints_the_reference_plan_and_reads_a_group_file(tmp_path):
    proc = subprocess.run([sys.executable, SCRIPT, "--reference"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.startswith("group of 3: PP 3 x TP 2, KV cache for 44885 tokens; serving path: fp16_fallback")
    assert "choice: group" in proc.stdout
    names = ["a", "b"]
    inputs = {"members": [member(1, name="a"), member(2, name="b")], "model": LLAMA_70B_NVFP4,
              "vllm": dict(ARGS, pipeline_parallel_size=2), "network": {"nccl_interface": "ens1f0",
                                                                        "pairs": pairs(names)}}
    path = tmp_path / "group.json"
    path.write_text(json.dumps(inputs))
    proc = subprocess.run([sys.executable, SCRIPT, str(path), "--json"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=120, check=False)
    plan = json.loads(proc.stdout)
    assert proc.returncode == 1 and plan["allowed"] is False       # 141 GB does not fit 4 V100s
    assert set(codes(plan["reasons"])) == {"GROUP_STAGE_DOES_NOT_FIT"}
    path.write_text("[]")
    proc = subprocess.run([sys.executable, SCRIPT, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=120, check=False)
    assert proc.returncode == 2


# --- each member's share (member_plans) ----------------------------------------------------------


def full_member(number, verdict, **changes):
    """A member as the preflight's group play passes it: the whole one-host verdict."""
    return member(number, verdict=verdict, address="10.0.0.%d" % (10 + number), **changes)


def test_each_member_stages_the_fp16_copy_where_its_own_plan_takes_the_repack(one_host):
    assert one_host["serving_path"] == "gptq_repack"
    tried = one_host["serving"]["fp16_fallback"]
    # The one-host plan keeps the FP16 copy it tried and refused (for VRAM), with its disk check.
    assert tried["model_path"] == "/srv/models/llama-70b-fp16"
    assert tried["weight_bytes"] == 2 * PARAMS and tried["disk_problem"] is None
    result = group([full_member(n, one_host) for n in (1, 2, 3)])
    assert result["allowed"] is True and result["choice"]["chosen"] == "group"
    assert sorted(result["member_plans"]) == ["gpu1", "gpu2", "gpu3"]
    share = result["member_plans"]["gpu2"]
    assert share["serving_path"] == "fp16_fallback" and share["allowed"] is True
    assert share["deployment"]["serving_model_path"] == "/srv/models/llama-70b-fp16"
    assert share["deployment"]["model_path"] == "/srv/models/llama-70b"       # the source, as the plan's
    assert share["serving"]["fp16_weight_bytes"] == 2 * PARAMS
    assert share["stage"] == {"stage": 1, "layers": [27, 53], "leader": False}
    assert "INSUFFICIENT_VRAM" in share["tolerated_codes"]
    [inst] = share["instances"]
    argv = inst["argv"]
    assert "--quantization" not in argv and "gptq" not in argv
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert argv[argv.index("--pipeline-parallel-size") + 1] == "3"
    assert argv[argv.index("--distributed-executor-backend") + 1] == "ray"
    assert argv[argv.index("--dtype") + 1] == "float16"
    assert argv[argv.index("--max-model-len") + 1] == "32768"
    assert argv.count("--enforce-eager") == 1
    assert inst["name"] == "vllm" and inst["port"] == 8000 and "memory_plan" not in inst
    # The member's own plan is not changed by its share.
    assert one_host["deployment"]["serving_model_path"].endswith("-gptq64")
    assert "--quantization" in one_host["instances"][0]["argv"]
    text = "\n".join(G.plan_text(result))
    assert "rollout on gpu1: stages fp16_fallback at /srv/models/llama-70b-fp16; serves vllm " in text
    assert "rollout on gpu3: stages fp16_fallback at /srv/models/llama-70b-fp16; runs a Ray worker" in text


def test_a_member_without_room_for_the_fp16_copy_refuses_the_group(one_host):
    request = {"image": "vllm/vllm-openai:v0.8.5", "model_path": "/srv/models/llama-70b", "served_model_name": "m",
               "vllm_args": dict(ARGS), "instances": [{"name": "vllm", "port": 8000, "gpus": "all"}],
               "driver": {"manage": True, "branch": "550"}}
    cramped = P.plan(gpus=[dict(V100, index=0), dict(V100, index=1)], driver_version="550.54.14", image=IMAGE,
                     model=LLAMA_70B_NVFP4, request=request, nvlink=False, today=datetime.date(2026, 12, 1),
                     fp16_copy={"complete": False, "disk_free_bytes": 100 * 10 ** 9},
                     gptq_copy={"complete": False, "disk_free_bytes": 100 * 10 ** 9})
    assert cramped["allowed"] is True and cramped["serving_path"] == "gptq_repack"   # 41 GB fits, 141 GB not
    assert cramped["serving"]["fp16_fallback"]["disk_problem"]["code"] == "INSUFFICIENT_DISK"
    result = group([full_member(1, one_host), full_member(2, cramped), full_member(3, one_host)])
    assert result["allowed"] is False and result["member_plans"] == {}
    [item] = found(result["reasons"], "GROUP_MEMBER_DISK")
    assert item["member"] == "gpu2" and "/srv/models/llama-70b-fp16" in item["message"]
    # Chosen again without the group: the GPTQ repack on one host.
    assert result["choice"]["chosen"] == "gptq_repack"
    assert "GROUP_MEMBER_DISK" in result["choice"]["alternatives"]["fp16_group"]["why"]


def test_a_group_serves_one_instance(one_host):
    two = dict(one_host, instances=[dict(one_host["instances"][0]), dict(one_host["instances"][0], name="second")])
    result = group([full_member(1, two), full_member(2, one_host), full_member(3, one_host)])
    assert result["allowed"] is False
    [item] = found(result["reasons"], "GROUP_INSTANCES_NOT_ONE")
    assert item["member"] == "gpu1" and "vllm, second" in item["message"]


def test_a_share_fetches_the_fp16_revision_from_the_model_store(one_host):
    store = {"url": "http://store:8088", "name": "llama-70b", "revision": "r1", "manifest_url": "http://store/m",
             "manifest_sha256": "c" * 64, "total_bytes": 42_700_000_000,
             "fetch": {"revision": "r1+gptq-g64", "dest": "/srv/models/llama-70b-gptq64", "bytes": 41_129_623_552}}
    stored = dict(one_host, model_store=store)
    share = group([full_member(n, stored) for n in (1, 2, 3)])["member_plans"]["gpu1"]
    assert share["model_store"]["fetch"] == {"revision": "r1+fp16", "dest": "/srv/models/llama-70b-fp16",
                                             "bytes": 2 * PARAMS}
    assert share["model_store"]["disk_needed_bytes"] == 2 * PARAMS
    assert share["model_store"]["url"] == "http://store:8088"
    assert store["fetch"]["revision"] == "r1+gptq-g64"                # the member's own record is untouched


def test_a_plain_checkpoint_refused_alone_for_memory_gets_a_native_share():
    request = {"image": "vllm/vllm-openai:v0.8.5", "model_path": "/srv/models/llama-70b-fp16ckpt",
               "served_model_name": "m", "vllm_args": dict(ARGS),
               "instances": [{"name": "vllm", "port": 8000, "gpus": "all"}],
               "driver": {"manage": True, "branch": "550"}}
    alone = P.plan(gpus=[dict(V100, index=0), dict(V100, index=1)], driver_version="550.54.14", image=IMAGE,
                   model=LLAMA_70B_FP16, request=request, nvlink=False, today=datetime.date(2026, 12, 1))
    assert alone["allowed"] is False and codes(alone["reasons"]) == ["INSUFFICIENT_VRAM"]
    result = group([full_member(n, alone) for n in (1, 2, 3)], model=LLAMA_70B_FP16)
    assert result["allowed"] is True, result["reasons"]
    share = result["member_plans"]["gpu1"]
    assert share["serving_path"] == "native" and share["allowed"] is True
    assert share["deployment"]["serving_model_path"] == "/srv/models/llama-70b-fp16ckpt"
    assert share["tolerated_codes"] == ["INSUFFICIENT_VRAM"]
    assert share["instances"][0]["argv"][:4] == ["--tensor-parallel-size", "2", "--pipeline-parallel-size", "3"]


def test_no_share_without_the_members_deployments():
    # A caller that passes only the judgement (plan-group.py's GROUP.json, say) gets the plan and no shares.
    result = group()
    assert result["allowed"] is True and result["member_plans"] == {}
