# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.deploy_gate module instead.
"""One model across hosts: the gate's plan of a group of hosts that serve one model together
with pipeline parallelism over Ray (vLLM 0.8.5: ``--tensor-parallel-size`` GPUs inside each host,
``--pipeline-parallel-size`` hosts, ``--distributed-executor-backend ray``), and the serving path it
chooses against the GPTQ repack on one host (docs/deploy_gate.md "One model across hosts").

plan_group() takes each member's own one-host verdict (the plan of that host alone, judged with
tensor_parallel_size = its GPUs), its GPU facts, driver, image digest and network facts, the
model's gate facts and the group's vLLM arguments, and returns one verdict for the group:
members, the leader, the stages (layers, bytes per GPU, KV tokens), the network checks and the
serving path chosen, with the alternatives' figures.

What it rests on (read in the vllm-0.8.5 sdist from PyPI, sha256 c7e04d10...cf9a82):

- the layers of each stage: vllm/distributed/utils.py:70-115 ``get_pp_indices``: an even split,
  the remainder one layer each to the stages before the last, from the second to last backwards
  (lines 100-105: ``for i in range(2, remaining_layers + 2): partitions[-i] += 1``), so 80 layers
  over 3 stages are 27, 27, 26; a stage's rank is ``(rank // tp) % pp`` (config.py:1103-1107);
- the embeddings load on the first stage (and on the last with tied embeddings), the final norm
  and lm_head on the last (model_executor/models/llama.py:311-332, 500-526);
- each stage's KV cache holds its own layers (worker/cache_engine.py:120-144) and the engine takes
  the smallest block count of all workers (executor/executor_base.py:103-106): the group's KV
  tokens are the minimum over the stages;
- the workers' ranks: the leader's (driver's) node first, then the other nodes by IP address as a
  string (executor/ray_distributed_executor.py:264-285), so stage 0 is the leader's;
- the reserve (the profile run's activation peak, cuBLAS, non-torch memory): the one-host
  memory model, _vllm_memory.profile_reserve, with the group's tp and pp. It counts the sampler
  moment on every stage, an upper bound for the stages before the last.

Pure logic: no Ansible imports, no I/O.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate import (
    GIB,
    MIB,
    GateInputError,
    input_errors_only,
    resolve_enforce_eager,
    short_text,
    to_mapping,
    to_str,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._model_store import copy_revision
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._plan import (
    FALLBACK_TRIGGERS,
    is_nvfp4,
    served_model,
    vllm_argv,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._policy import (
    DTYPE_ALIASES,
    KV_CACHE_DTYPES,
    RELEASE_BEHAVIOUR_DEFAULT,
    merge_policy,
    parse_cc,
    parse_version,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._vllm_memory import profile_reserve

GROUP_REASON_CODES = {
    "GROUP_MEMBER_REFUSED": "A member's own one-host verdict refuses it (for another reason than the memory the "
                            "group plans): the group is refused, naming the member and its reasons.",
    "GROUP_GPUS_DIFFER": "The members' GPUs differ (model, compute capability, memory or count).",
    "GROUP_DRIVER_DIFFERS": "The members run different NVIDIA driver versions.",
    "GROUP_IMAGE_DIFFERS": "The members' vLLM images differ by digest (or a digest is unknown).",
    "GROUP_MODEL_DIFFERS": "The members' copies of the model differ (model_digest).",
    "GROUP_PARALLEL_MISMATCH": "pipeline_parallel_size x tensor_parallel_size is not the group's GPU count, or a "
                               "stage would not be one member's GPUs.",
    "GROUP_STAGE_DOES_NOT_FIT": "A stage's weights, activations and the KV cache of one max_model_len sequence do "
                                "not fit in its GPUs' memory.",
    "GROUP_STAGES_UNPLANNED": "The model's layers, KV heads, head size or weight bytes are unknown, so the stages' "
                              "memory cannot be planned.",
    "GROUP_NCCL_INTERFACE_UNSET": "The group names no network interface for NCCL.",
    "GROUP_NCCL_INTERFACE_MISSING": "The interface named for NCCL is not on a member.",
    "GROUP_MTU_MISMATCH": "The NCCL interface's MTU differs between members.",
    "GROUP_MEMBERS_UNREACHABLE": "Two members do not reach each other on the ports Ray and NCCL need.",
    "GROUP_MEMBER_DISK": "The FP16 copy the group serves does not fit on a member's disk (every member holds the "
                         "whole copy; each stage loads its layers from it).",
    "GROUP_INSTANCES_NOT_ONE": "A member's request has more or fewer than one vLLM instance; a group serves one, on "
                               "its leader, over every member's GPUs.",
}
GROUP_WARNING_CODES = {
    "GROUP_REACHABILITY_UNKNOWN": "No reachability result for a pair of members; the network check is partial.",
    "GROUP_MEMORY_PLAN_INCOMPLETE": "The profile run could not be modelled (hidden size, intermediate size or vocab "
                                    "unknown); the stages use the fallback reserve.",
    "GROUP_NOT_NEEDED": "One host serves the model losslessly on its own; the group is not needed.",
}

# One-host refusals the group plans itself: the memory (each stage is planned here) and, when the
# group serves an NVFP4 checkpoint's FP16 copy, the missing FP4 kernels the copy gets around.
GROUP_PLANNED_CODES = ("INSUFFICIENT_VRAM",)

# The ports members need open between each other (Ray 2.x defaults, as vLLM 0.8.5's
# examples/online_serving/run_cluster.sh starts Ray: `ray start --head --port=6379`, workers
# `--address=<head>:6379`, host networking). Sources: https://docs.ray.io/en/latest/ray-core/configure.html
# ("Ports configurations") and https://docs.ray.io/en/latest/cluster/cli.html (ray start); NCCL's
# sockets (bootstrap and, without InfiniBand, data) bind ephemeral ports on NCCL_SOCKET_IFNAME;
# vLLM's Ray executor sets up torch.distributed at tcp://<leader>:<a free port>
# (vllm@0.8.5:vllm/executor/ray_distributed_executor.py:377-378, utils.py:626; VLLM_PORT pins it).
GROUP_PORTS = (
    {"port": "6379", "on": "leader", "what": "Ray GCS server (ray start --head --port)"},
    {"port": "10001", "on": "leader", "what": "Ray client server (--ray-client-server-port)"},
    {"port": "52365", "on": "every member", "what": "Ray dashboard agent (--dashboard-agent-listen-port)"},
    {"port": "random unless pinned", "on": "every member",
     "what": "Ray node manager, object manager, dashboard agent gRPC, runtime env agent, metrics export "
             "(--node-manager-port, --object-manager-port, --dashboard-agent-grpc-port, --runtime-env-agent-port, "
             "--metrics-export-port)"},
    {"port": "10002-19999", "on": "every member", "what": "Ray worker processes (--min-worker-port/--max-worker-port)"},
    {"port": "ephemeral", "on": "every member",
     "what": "NCCL bootstrap and socket transport on NCCL_SOCKET_IFNAME, and torch.distributed's TCP store on the "
             "leader (VLLM_PORT pins its first port)"},
)

_MODEL_DIMS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
               "vocab_size", "intermediate_size")


def _int(value, where, required=False):
    """A positive int (or None when absent and not required); else GateInputError."""
    if value is None or value == "":
        if required:
            raise GateInputError("%s: required, a positive integer" % where)
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise GateInputError("%s: expected a positive integer, got %s" % (where, short_text(value)))
    try:
        number = float(value)
    except ValueError:
        raise GateInputError("%s: expected a positive integer, got %s" % (where, short_text(value)))
    if not math.isfinite(number) or number <= 0 or number != int(number):
        raise GateInputError("%s: expected a positive integer, got %s" % (where, short_text(value)))
    return int(number)


def _gib(value):
    return "%.1f GiB" % (value / float(GIB))


def _gb(value):
    return "%.1f GB" % (value / 1e9)


def pp_stage_layers(layers, pp):
    """[(first, last)] decoder layers of each of ``pp`` stages, as vLLM 0.8.5's get_pp_indices
    splits them (vllm/distributed/utils.py:100-115); a stage with no layer has (first, first - 1)."""
    parts = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        parts[-i] += 1
    out = []
    start = 0
    for count in parts:
        out.append((start, start + count - 1))
        start += count
    return out


# ---------------------------------------------------------------------------------------------
# The inputs
# ---------------------------------------------------------------------------------------------


def _member(item, index):
    where = "members[%d]" % index
    item = to_mapping(item, where, "name, address, verdict, gpus, driver_version, image_digest, interfaces")
    name = to_str(item.get("name"), where + ".name")
    if not name:
        raise GateInputError("%s.name: required (the inventory host name)" % where)
    verdict = to_mapping(item.get("verdict"), where + ".verdict", "allowed, reasons (the member's one-host verdict)")
    if not isinstance(verdict.get("allowed"), bool):
        raise GateInputError("%s.verdict.allowed: required, true or false (judge the member alone first: "
                             "deploy_gate with tensor_parallel_size = its GPUs)" % where)
    gpus = item.get("gpus")
    if not isinstance(gpus, list) or not gpus:
        raise GateInputError("%s.gpus: expected a non-empty list of {name, compute_capability, memory_total_mib}"
                             % where)
    parsed = []
    for number, gpu in enumerate(gpus):
        gwhere = "%s.gpus[%d]" % (where, number)
        gpu = to_mapping(gpu, gwhere, "name, compute_capability, memory_total_mib")
        parsed.append({"name": to_str(gpu.get("name"), gwhere + ".name") or "?",
                       "cc": parse_cc(gpu.get("compute_capability")),
                       "memory_mib": _int(gpu.get("memory_total_mib"), gwhere + ".memory_total_mib", True)})
    interfaces = to_mapping(item.get("interfaces"), where + ".interfaces", "{name: mtu}")
    return {
        "name": name,
        "address": to_str(item.get("address"), where + ".address") or name,
        "verdict": verdict,
        "gpus": parsed,
        "driver_version": to_str(item.get("driver_version"), where + ".driver_version"),
        "image_digest": to_str(item.get("image_digest"), where + ".image_digest", allow_numbers=False),
        "model_digest": to_str(item.get("model_digest"), where + ".model_digest", allow_numbers=False),
        "interfaces": dict((str(k), _int(v, "%s.interfaces.%s" % (where, k))) for k, v in interfaces.items()),
    }


def _members(members, leader):
    if not isinstance(members, list) or len(members) < 2:
        raise GateInputError("members: expected a list of at least two hosts (a group of one is a host: use "
                             "deploy_gate), got %s" % short_text(members))
    parsed = [_member(item, index) for index, item in enumerate(members)]
    names = [m["name"] for m in parsed]
    if len(set(names)) != len(names):
        raise GateInputError("members: each name once, got %s" % ", ".join(names))
    leader = leader or names[0]
    if leader not in names:
        raise GateInputError("leader: %s is not a member (%s)" % (short_text(leader), ", ".join(names)))
    first = [m for m in parsed if m["name"] == leader]
    # vLLM's Ray executor ranks the driver's node first, then the others by IP address as a string.
    others = sorted((m for m in parsed if m["name"] != leader), key=lambda m: m["address"])
    return first + others


# ---------------------------------------------------------------------------------------------
# The rules
# ---------------------------------------------------------------------------------------------


def _reason(code, message, member=None):
    return {"code": code, "message": message, "member": member}


def _planned_codes(nvfp4_copy):
    return GROUP_PLANNED_CODES + (FALLBACK_TRIGGERS if nvfp4_copy else ())


def _member_reasons(members, nvfp4_copy):
    """GROUP_MEMBER_REFUSED for each member whose own verdict refuses it for more than the memory."""
    out = []
    planned = _planned_codes(nvfp4_copy)
    for member in members:
        verdict = member["verdict"]
        if verdict["allowed"]:
            continue
        reasons = [r for r in verdict.get("reasons") or [] if isinstance(r, dict)]
        left = [r for r in reasons if r.get("code") not in planned]
        if reasons and not left:
            continue
        if not reasons:
            left = [{"code": "?", "message": "refused without reasons"}]
        out.append(_reason("GROUP_MEMBER_REFUSED", "member %s is refused on its own: %s; fix that host (its "
                           "deploy_gate verdict) or take it out of the group" % (member["name"], "; ".join(
                               "%s: %s" % (r.get("code"), r.get("message")) for r in left)), member["name"]))
    return out


def _gpu_signature(member):
    gpus = member["gpus"]
    return (len(gpus), tuple(sorted(set(g["name"] for g in gpus))), tuple(sorted(set(str(g["cc"]) for g in gpus))),
            tuple(sorted(set(g["memory_mib"] for g in gpus))))


def _gpu_text(member):
    count, names, ccs, memories = _gpu_signature(member)
    return "%d x %s (compute capability %s, %s MiB)" % (count, "/".join(names), "/".join(
        c.replace(", ", ".").strip("()") for c in ccs), "/".join(str(m) for m in memories))


def _identical(members):
    """GROUP_GPUS_DIFFER, GROUP_DRIVER_DIFFERS, GROUP_IMAGE_DIFFERS, GROUP_MODEL_DIFFERS."""
    out = []
    leader = members[0]
    checks = (
        ("GROUP_GPUS_DIFFER", _gpu_signature, _gpu_text, "give the group hosts with the same GPUs, or leave this "
                                                         "one out"),
        ("GROUP_DRIVER_DIFFERS", lambda m: m["driver_version"], lambda m: "driver %s" % (m["driver_version"] or "unknown"),
         "install the same driver on every member (nvidia_driver with one version for the group)"),
        ("GROUP_IMAGE_DIFFERS", lambda m: m["image_digest"], lambda m: "image %s" % (m["image_digest"] or
                                                                                     "digest unknown"),
         "pin one image digest for the group (vllm_server_image_digest); every member runs the same Ray and vLLM"),
    )
    for code, key, text, fix in checks:
        for member in members[1:]:
            if key(member) != key(leader) or key(member) is None:
                out.append(_reason(code, "member %s has %s, the leader %s has %s: %s" % (
                    member["name"], text(member), leader["name"], text(leader), fix), member["name"]))
    digests = set(m["model_digest"] for m in members if m["model_digest"])
    if len(digests) > 1:
        for member in members[1:]:
            if member["model_digest"] and member["model_digest"] != leader["model_digest"]:
                out.append(_reason("GROUP_MODEL_DIFFERS", "member %s holds model %s, the leader %s holds %s: put the "
                                   "same revision on every member (model_store)" % (
                                       member["name"], member["model_digest"], leader["name"],
                                       leader["model_digest"] or "unknown"), member["name"]))
    return out


def _parallel(members, vllm):
    """(tp, pp, reasons): tp = GPUs per member, pp = members, unless the arguments say otherwise."""
    per_host = len(members[0]["gpus"])
    total = sum(len(m["gpus"]) for m in members)
    tp = _int(vllm.get("tensor_parallel_size"), "vllm.tensor_parallel_size") or per_host
    pp = _int(vllm.get("pipeline_parallel_size"), "vllm.pipeline_parallel_size") or len(members)
    reasons = []
    if tp * pp != total:
        reasons.append(_reason("GROUP_PARALLEL_MISMATCH", "pipeline_parallel_size %d x tensor_parallel_size %d = %d "
                               "GPUs, but the group's %d members have %d: set tensor_parallel_size to the GPUs of one "
                               "member (%d) and pipeline_parallel_size to the members (%d)"
                               % (pp, tp, tp * pp, len(members), total, per_host, len(members))))
    elif tp != per_host or pp != len(members):
        reasons.append(_reason("GROUP_PARALLEL_MISMATCH", "tensor_parallel_size %d over members of %d GPUs would put "
                               "a stage's all-reduce across hosts: set tensor_parallel_size %d and "
                               "pipeline_parallel_size %d (one stage per member)" % (tp, per_host, per_host,
                                                                                     len(members))))
    return tp, pp, reasons


def _pairs(members, pairs):
    """The reachability of every pair of members: (checked pairs, reasons, warnings)."""
    reasons = []
    warnings = []
    checked = []
    entries = []
    for index, item in enumerate(pairs or []):
        item = to_mapping(item, "network.pairs[%d]" % index, "from, to, reachable, closed_ports")
        entries.append(item)
    for i, left in enumerate(members):
        for right in members[i + 1:]:
            found = [e for e in entries if set((e.get("from"), e.get("to"))) == set((left["name"], right["name"]))]
            if not found:
                warnings.append(_reason("GROUP_REACHABILITY_UNKNOWN", "no reachability result between %s and %s: "
                                        "check the ports Ray and NCCL need (GROUP_PORTS) both ways"
                                        % (left["name"], right["name"]), left["name"]))
                checked.append({"members": [left["name"], right["name"]], "reachable": None})
                continue
            # reachable None: the probe could not tell (e.g. no listener ran on the member); anything
            # else but True is a failed probe.
            bad = [e for e in found if e.get("reachable") is not True and e.get("reachable") is not None]
            unknown = [e for e in found if e.get("reachable") is None]
            checked.append({"members": [left["name"], right["name"]],
                            "reachable": False if bad else (None if unknown else True)})
            for entry in unknown if not bad else []:
                warnings.append(_reason("GROUP_REACHABILITY_UNKNOWN", "no reachability result from %s to %s: "
                                        "check the ports Ray and NCCL need (GROUP_PORTS) that way" % (
                                            entry.get("from"), entry.get("to")), entry.get("from")))
            for entry in bad:
                closed = entry.get("closed_ports") or []
                reasons.append(_reason("GROUP_MEMBERS_UNREACHABLE", "%s does not reach %s%s: open the ports Ray and "
                                       "NCCL need between the members (Ray GCS 6379 on the leader, the Ray node and "
                                       "worker ports, NCCL's on the NCCL interface) or fix the route" % (
                                           entry.get("from"), entry.get("to"),
                                           " (closed: %s)" % ", ".join(str(p) for p in closed) if closed else ""),
                                       entry.get("from")))
    return checked, reasons, warnings


def _network(members, network):
    """{nccl_interface, mtu, pairs, ports}, reasons, warnings."""
    network = to_mapping(network, "network", "nccl_interface, pairs")
    name = to_str(network.get("nccl_interface"), "network.nccl_interface", allow_numbers=False)
    reasons = []
    mtus = {}
    if not name:
        reasons.append(_reason("GROUP_NCCL_INTERFACE_UNSET", "the group names no interface for NCCL: set "
                               "network.nccl_interface (NCCL_SOCKET_IFNAME, the same name on every member)"))
    else:
        for member in members:
            if name not in member["interfaces"]:
                reasons.append(_reason("GROUP_NCCL_INTERFACE_MISSING", "member %s has no interface %s (it has %s): "
                                       "name the members' common interface for NCCL, or rename it on that host"
                                       % (member["name"], name, ", ".join(sorted(member["interfaces"])) or "none"),
                                       member["name"]))
            else:
                mtus[member["name"]] = member["interfaces"][name]
        if len(set(mtus.values())) > 1:
            reasons.append(_reason("GROUP_MTU_MISMATCH", "the MTU of %s differs between members (%s): set one MTU on "
                                   "every member (and the switch), or NCCL's large messages stall" % (
                                       name, ", ".join("%s %s" % (k, v) for k, v in sorted(mtus.items())))))
    checked, pair_reasons, warnings = _pairs(members, network.get("pairs"))
    mtu = list(mtus.values())[0] if len(set(mtus.values())) == 1 else None
    return ({"nccl_interface": name, "mtu": mtu, "mtus": mtus, "pairs": checked,
             "addresses": dict((m["name"], m["address"]) for m in members), "ports": [dict(p) for p in GROUP_PORTS]},
            reasons + pair_reasons, warnings)


# ---------------------------------------------------------------------------------------------
# The stages' memory
# ---------------------------------------------------------------------------------------------


def _served(policy, model):
    """(the model the group serves, whether it is an NVFP4 checkpoint's FP16 copy): the FP16 copy
    of an NVFP4 checkpoint (_plan.served_model, as the one-host fp16_fallback path), else the
    checkpoint as it is."""
    if is_nvfp4(policy, model):
        return served_model(model, {"serving_path": "fp16_fallback"}), True
    return dict(model), False


def _dtype_name(vllm, served, cc, policy):
    """The dtype the group serves in: vllm.dtype, or for auto the checkpoint's (float16 for bfloat16
    below compute capability 8.0, as the one-host gate's DTYPE_AUTOFIXED)."""
    name = (to_str(vllm.get("dtype"), "vllm.dtype", allow_numbers=False) or "auto").strip().lower()
    name = DTYPE_ALIASES.get(name, name)
    if name == "auto":
        disk = str(served.get("torch_dtype") or "float16").lower()
        name = DTYPE_ALIASES.get(disk, disk)
        if name == "bfloat16" and cc is not None and cc < (8, 0):
            name = "float16"
    if name not in policy["dtypes"]:
        raise GateInputError("vllm.dtype: expected one of auto, %s, got %s"
                             % (", ".join(sorted(policy["dtypes"])), short_text(vllm.get("dtype"))))
    return name


def _dims(served):
    dims = dict((k, _int(served.get(k), "model." + k)) for k in _MODEL_DIMS)
    if dims["head_dim"] is None and dims["hidden_size"] and dims["num_attention_heads"]:
        dims["head_dim"] = dims["hidden_size"] // dims["num_attention_heads"]
    if dims["num_key_value_heads"] is None:
        dims["num_key_value_heads"] = dims["num_attention_heads"]
    return dims


def _total_weights(served, policy, dtype_bytes):
    """The weights the group serves, in bytes (weight_bytes rescaled to the serving dtype for an
    unquantized checkpoint stored in another, as the one-host memory rule), or None."""
    weights = _int(served.get("weight_bytes"), "model.weight_bytes")
    if weights is None:
        params = _int(served.get("param_count"), "model.param_count")
        return params * dtype_bytes if params and not served.get("quant_method") else None
    disk = policy["dtypes"].get(DTYPE_ALIASES.get(str(served.get("torch_dtype")), str(served.get("torch_dtype"))))
    if not served.get("quant_method") and disk and disk["bytes"] != dtype_bytes:
        return weights * dtype_bytes // disk["bytes"]
    return weights


def _split(served, dims, total, dtype_bytes):
    """(bytes per decoder layer, embeddings on the first stage, lm_head + final norm on the last):
    the embeddings and lm_head are vocab x hidden each (with tied embeddings the checkpoint holds
    one, and the last stage loads its own copy), the final norm hidden, the rest even per layer."""
    vocab, hidden, layers = dims["vocab_size"], dims["hidden_size"], dims["num_hidden_layers"]
    embed = vocab * hidden * dtype_bytes if vocab and hidden else 0
    norm = hidden * dtype_bytes if hidden else 0
    tied = served.get("tie_word_embeddings") is True
    body = total - embed - norm - (0 if tied else embed)
    if body <= 0:
        return total / float(layers), 0, 0
    return body / float(layers), embed, embed + norm


def _reserve(served, dims, vllm, policy, group):
    """vLLM's non-KV reserve per GPU, as the one-host gate models it (_vllm_memory.profile_reserve)
    for the group's tp and pp."""
    model = dict((k, dims[k]) for k in _MODEL_DIMS)
    model["dtype_bytes"] = group["dtype_bytes"]
    chunked = vllm.get("enable_chunked_prefill")
    eager = vllm.get("enforce_eager")
    args = {
        "max_model_len": group["max_model_len"],
        "max_num_seqs": _int(vllm.get("max_num_seqs"), "vllm.max_num_seqs"),
        "max_num_batched_tokens": _int(vllm.get("max_num_batched_tokens"), "vllm.max_num_batched_tokens"),
        "enable_chunked_prefill": chunked if isinstance(chunked, bool) else None,
        "tensor_parallel_size": group["tp"],
        "pipeline_parallel_size": group["pp"],
        "enforce_eager": resolve_enforce_eager(eager if isinstance(eager, bool) else None, policy, [group["cc"]])[0],
        "compute_capability": group["cc"],
        "gpu_memory_mib": group["memory_mib"],
        "gpu_name": group["gpu_name"],
        "quantization": served.get("quant_method"),
    }
    return profile_reserve(model, args, group["version"])


def _stage_text(stage):
    return "stage %d (%s, layers %d-%d)" % (stage["stage"], stage["member"], stage["layers"][0], stage["layers"][1])


def _stages(members, dims, weights, group, per_token_layer):
    """Each stage's layers and memory per GPU, and GROUP_STAGE_DOES_NOT_FIT for those that do not fit."""
    per_layer, first_extra, last_extra = weights
    tp, usable, max_len = group["tp"], group["usable"], group["max_model_len"]
    stages = []
    reasons = []
    bounds = pp_stage_layers(dims["num_hidden_layers"], group["pp"])
    for index, (first, last) in enumerate(bounds):
        count = last - first + 1
        stage_bytes = int(round(per_layer * count)) + (first_extra if index == 0 else 0) + (
            last_extra if index == len(bounds) - 1 else 0)
        per_gpu = -(-stage_bytes // tp)
        per_token = per_token_layer * count
        kv_bytes = max(0, usable - per_gpu)
        stage = {"stage": index, "member": members[index]["name"] if index < len(members) else None,
                 "layers": [first, last], "layer_count": count, "weight_bytes": stage_bytes,
                 "weight_bytes_per_gpu": per_gpu, "reserve_bytes_per_gpu": group["reserve"],
                 "usable_bytes_per_gpu": usable, "kv_bytes_per_token_per_gpu": per_token,
                 "kv_bytes_per_gpu": kv_bytes, "kv_tokens": kv_bytes // per_token if per_token else None,
                 "embeddings": index == 0, "lm_head": index == len(bounds) - 1}
        stage["fits"] = bool(count) and per_gpu <= usable and (not max_len or per_token * max_len <= kv_bytes)
        stages.append(stage)
        if count == 0:
            reasons.append(_reason("GROUP_PARALLEL_MISMATCH", "%s has no decoder layer: %d layers over %d stages; "
                                   "use fewer members" % (_stage_text(stage), dims["num_hidden_layers"], group["pp"]),
                                   stage["member"]))
        elif not stage["fits"]:
            seq = per_token * max_len if max_len else 0
            tokens = stage["kv_tokens"] or 0
            reasons.append(_reason("GROUP_STAGE_DOES_NOT_FIT", "%s needs %s of weights + %s for one %s-token sequence "
                                   "per GPU, but %s per GPU is usable (%s x gpu_memory_utilization %.2f - %s reserve): "
                                   "lower max_model_len to %d or less, raise gpu_memory_utilization, or add members"
                                   % (_stage_text(stage), _gib(per_gpu), _gib(seq), max_len or "?", _gib(usable),
                                      _gib(group["memory_mib"] * MIB), group["util"], _gib(group["reserve"]),
                                      (tokens // 1024) * 1024 if tokens >= 1024 else (tokens // 16) * 16),
                                   stage["member"]))
    return stages, reasons


def _memory(members, served, vllm, policy, tp, pp):
    """The group's memory plan: {dtype, util, memory, reserve, usable, stages, kv_tokens, ...} and
    its reasons and warnings."""
    gpus = [g for m in members for g in m["gpus"]]
    ccs = [g["cc"] for g in gpus if g["cc"] is not None]
    dims = _dims(served)
    dtype = _dtype_name(vllm, served, min(ccs) if ccs else None, policy)
    dtype_bytes = policy["dtypes"][dtype]["bytes"]
    util = vllm.get("gpu_memory_utilization")
    util = float(util) if isinstance(util, (int, float)) and not isinstance(util, bool) and 0 < util <= 1 else float(
        policy.get("memory", {}).get("default_gpu_memory_utilization", 0.9))
    version = parse_version(members[0]["verdict"].get("vllm_version") or vllm.get("vllm_version")
                            or RELEASE_BEHAVIOUR_DEFAULT)
    memory_mib = min(g["memory_mib"] for g in gpus)
    group = {"tp": tp, "pp": pp, "dtype": dtype, "dtype_bytes": dtype_bytes, "util": util, "memory_mib": memory_mib,
             "cc": min(ccs) if ccs else None, "gpu_name": gpus[0]["name"], "version": version,
             "max_model_len": _int(vllm.get("max_model_len"), "vllm.max_model_len")
             or _int(served.get("max_position_embeddings"), "model.max_position_embeddings")}
    missing = [k for k in ("num_hidden_layers", "num_key_value_heads", "head_dim") if not dims[k]]
    total = _total_weights(served, policy, dtype_bytes)
    if total is None:
        missing.append("weight_bytes or param_count")
    if missing:
        return group, [_reason("GROUP_STAGES_UNPLANNED", "the stages cannot be planned without model.%s: run "
                               "model_facts on the model directory" % ", model.".join(missing))], []
    profile = _reserve(served, dims, vllm, policy, group)
    group["reserve"] = profile["bytes"]
    group["reserve_formula"] = profile["formula"]
    group["usable"] = max(0, int(memory_mib * MIB * util) - profile["bytes"])
    kv_name = str(vllm.get("kv_cache_dtype") or "auto").lower()
    kv_bytes = (KV_CACHE_DTYPES.get(kv_name) or {}).get("bytes") or dtype_bytes
    per_token_layer = 2 * max(1, dims["num_key_value_heads"] // tp) * dims["head_dim"] * kv_bytes
    group.update(weight_bytes=total, kv_dtype_bytes=kv_bytes, kv_bytes_per_token_per_layer=per_token_layer)
    stages, reasons = _stages(members, dims, _split(served, dims, total, dtype_bytes), group, per_token_layer)
    warnings = []
    if not profile["complete"]:
        warnings.append(_reason("GROUP_MEMORY_PLAN_INCOMPLETE", "the reserve is %s" % profile["formula"]))
    return dict(group, stages=stages), reasons, warnings


# ---------------------------------------------------------------------------------------------
# The serving path: the FP16 form across the group, or the GPTQ repack on one host
# ---------------------------------------------------------------------------------------------


def _gptq_alternative(verdict):
    """The GPTQ int4 repack on one host, from that host's own plan (_plan's serving.gptq_repack)."""
    repack = (verdict.get("serving") or {}).get("gptq_repack") or {}
    if not repack:
        return {"planned": False, "allowed": False, "hosts": 1,
                "why": "the one-host plan has no GPTQ repack (only an NVFP4 checkpoint is repacked, and only when "
                       "its FP16 copy does not fit one host)"}
    error = repack.get("expected_error") or {}
    allowed = verdict.get("allowed") is True and verdict.get("serving_path") == "gptq_repack"
    return {"planned": True, "allowed": allowed, "hosts": 1, "path": "gptq_repack",
            "group_size": repack.get("group_size"), "bits_per_weight": repack.get("bits_per_weight"),
            "weight_bytes": repack.get("repacked_bytes"), "weight_bytes_per_gpu": repack.get("repacked_bytes_per_gpu"),
            "kv_tokens": repack.get("kv_cache_tokens"), "expected_error": dict(error),
            "lossless": False,
            "why": "fits one host" if allowed else "refused on one host (%s)" % (", ".join(
                sorted(set(r.get("code", "?") for r in verdict.get("reasons") or []))) or "no reasons given")}


def _group_alternative(result, nvfp4_copy):
    stages = result["stages"]
    return {"planned": bool(stages), "allowed": result["allowed"], "hosts": len(result["members"]),
            "path": "fp16_fallback" if nvfp4_copy else "native",
            "weight_bytes": result["memory"].get("weight_bytes"),
            "weight_bytes_per_gpu": max(s["weight_bytes_per_gpu"] for s in stages) if stages else None,
            "kv_tokens": result["kv_tokens"], "lossless": True,
            "expected_error": {"rel_rms": 0.0, "source": "the FP16 copy holds the NVFP4 values exactly"
                               if nvfp4_copy else "the checkpoint as it is"},
            "why": "fits across %d hosts" % len(result["members"]) if result["allowed"] else "refused (%s)" % ", ".join(
                sorted(set(r["code"] for r in result["reasons"])))}


def _error_pct(alt):
    rms = (alt.get("expected_error") or {}).get("rel_rms")
    return "%.1f%%" % (rms * 100) if isinstance(rms, (int, float)) else "?"


def _alt_text(alt):
    if not alt.get("planned"):
        return alt["why"]
    per_gpu = alt.get("weight_bytes_per_gpu")
    return "%s: %s of weights%s, KV cache for %s tokens, expected error %s relative RMS%s" % (
        alt["why"], _gb(alt["weight_bytes"]) if alt.get("weight_bytes") else "?",
        ", %s per GPU" % _gib(per_gpu) if per_gpu else "", alt.get("kv_tokens"), _error_pct(alt),
        " (group size %s)" % alt["group_size"] if alt.get("group_size") else "")


def choose_path(result, one_host, nvfp4_copy):
    """The serving path: {chosen ("one_host", "group", "gptq_repack" or None), serving_path, hosts,
    why, alternatives {fp16_group, gptq_one_host}}. Policy: a host that serves the model losslessly
    alone needs no group; else the lossless FP16 form across the configured group when it fits;
    else the GPTQ repack on one host when it fits there."""
    group = _group_alternative(result, nvfp4_copy)
    gptq = _gptq_alternative(one_host)
    out = {"alternatives": {"fp16_group": group, "gptq_one_host": gptq}}
    both = "FP16 across %d hosts: %s; GPTQ on one host: %s" % (group["hosts"], _alt_text(group), _alt_text(gptq))
    if one_host.get("allowed") is True and one_host.get("serving_path") in ("native", "fp16_fallback"):
        out.update(chosen="one_host", serving_path=one_host["serving_path"], hosts=1,
                   why="one host serves it as %s on its own, without the group's network hops" % one_host[
                       "serving_path"])
    elif group["allowed"]:
        out.update(chosen="group", serving_path=group["path"], hosts=group["hosts"],
                   why="the FP16 form across the group is lossless and fits (the policy prefers it to a 4-bit repack "
                       "when a group is configured); %s" % both)
    elif gptq["allowed"]:
        out.update(chosen="gptq_repack", serving_path="gptq_repack", hosts=1,
                   why="the group is refused, the GPTQ repack fits one host; %s" % both)
    else:
        out.update(chosen=None, serving_path=None, hosts=0, why="nothing fits; %s" % both)
    return out


# ---------------------------------------------------------------------------------------------
# Each member's share: what its rollout stages and (on the leader) serves
# ---------------------------------------------------------------------------------------------


def _share_inputs(verdict):
    """The member's own plan's deployment and instances, or None when the caller passed only the
    verdict's judgement (allowed, reasons, serving): then no share is made."""
    deployment, instances = verdict.get("deployment"), verdict.get("instances")
    if not isinstance(deployment, dict) or not isinstance(instances, list):
        return None
    return deployment, [i for i in instances if isinstance(i, dict)]


def _share_copy(verdict, path):
    """(directory, bytes, disk record, disk problem) of what the member stages for ``path``: the
    FP16 copy (its own plan's, taken or as tried) or the checkpoint as it is."""
    serving = verdict.get("serving") or {}
    if path != "fp16_fallback":
        return serving.get("source_model_path") or (verdict.get("deployment") or {}).get("model_path"), None, None, None
    if verdict.get("serving_path") == "fp16_fallback":
        return serving.get("fp16_model_path"), serving.get("fp16_weight_bytes"), serving.get("fp16_copy"), None
    tried = serving.get("fp16_fallback") or {}
    return tried.get("model_path"), tried.get("weight_bytes"), tried.get("copy"), tried.get("disk_problem")


def _share_store(verdict, path, dest, size, copy):
    """The member's model_store record for its share: its own plan's, fetching the FP16 copy's
    revision (<revision>+fp16) when the group serves the copy and its own plan fetches another."""
    store = verdict.get("model_store")
    if not isinstance(store, dict) or not store.get("url") or path != "fp16_fallback" \
            or verdict.get("serving_path") == "fp16_fallback":
        return store
    copy = copy or {}
    return dict(store, fetch={"revision": copy_revision(store["revision"], "fp16"), "dest": dest, "bytes": size},
                disk_free_bytes=copy.get("disk_free_bytes"), disk_needed_bytes=copy.get("disk_needed_bytes"))


def _share_instance(inst, result, path):
    """The member's instance with the group's arguments: PP x TP over Ray, the group's dtype and
    max_model_len, no --quantization for the FP16 copy (as the one-host FP16 fallback)."""
    args = dict(inst.get("vllm_args") or {})
    eager = args.pop("enforce_eager", inst.get("enforce_eager"))
    if path == "fp16_fallback":
        args.pop("quantization", None)
    args.update(tensor_parallel_size=result["tp"], pipeline_parallel_size=result["pp"],
                distributed_executor_backend="ray")
    if result["memory"].get("dtype"):
        args["dtype"] = result["memory"]["dtype"]
    if result["max_model_len"]:
        args["max_model_len"] = result["max_model_len"]
    extra = [str(a) for a in inst.get("extra_args") or []]
    entry = dict((k, v) for k, v in inst.items() if k not in ("memory_plan", "plan", "reasons", "warnings"))
    entry.update(allowed=True, vllm_args=dict(args, enforce_eager=eager), enforce_eager=eager,
                 argv=vllm_argv(args, eager, extra))
    return entry


def _shares(ordered, result):
    """({member: share}, reasons): each member's share of an allowed group, as the rollout applies
    it over the member's own plan (preflight_verdict): allowed, serving_path, deployment (what the
    unit mounts), serving, instances (the leader's serve the group; the others' are not started),
    model_store (what the member fetches), stage ({stage, layers, leader}), tolerated_codes (what
    refuses the member alone but not the group: the rollout's recheck lets those pass) and why.
    Reasons: a member's disk without room for the FP16 copy, a request of more or fewer than one
    instance."""
    path = result["choice"].get("serving_path") if result["choice"].get("chosen") in ("group", "one_host") else None
    if not path:
        return {}, []
    shares, reasons = {}, []
    tolerated = _planned_codes(result["served"]["nvfp4_fp16_copy"])
    stages = dict((s["member"], s) for s in result["stages"])
    for member in ordered:
        verdict, name = member["verdict"], member["name"]
        inputs = _share_inputs(verdict)
        if inputs is None:
            continue
        deployment, instances = inputs
        if len(instances) != 1:
            reasons.append(_reason("GROUP_INSTANCES_NOT_ONE", "member %s's request has %d vLLM instance(s) (%s); a "
                                   "group serves one, on its leader, over every member's GPUs: give the group's "
                                   "hosts one instance with gpus: all" % (name, len(instances), ", ".join(
                                       str(i.get("name")) for i in instances) or "none"), name))
            continue
        dest, size, copy, problem = _share_copy(verdict, path)
        if problem:
            reasons.append(_reason("GROUP_MEMBER_DISK", "member %s: %s" % (name, problem.get("message")), name))
        if not dest:
            continue
        stage = stages.get(name) or {}
        shares[name] = {
            "allowed": True,
            "reasons": [],
            "serving_path": path,
            "deployment": dict(deployment, serving_path=path, serving_model_path=dest),
            "serving": dict(verdict.get("serving") or {}, path=path, model_path=dest, why=result["choice"]["why"],
                            **({"fp16_model_path": dest, "fp16_weight_bytes": size, "fp16_copy": copy}
                               if path == "fp16_fallback" else {})),
            "instances": [_share_instance(instances[0], result, path)],
            "model_store": _share_store(verdict, path, dest, size, copy),
            "stage": {"stage": stage.get("stage"), "layers": stage.get("layers"), "leader": name == result["leader"]},
            # The codes that refuse the member alone but not its group (the rollout's recheck tolerates them).
            "tolerated_codes": list(tolerated),
            "why": "member %s of host group: stage %s of %d, serving %s from %s" % (
                name, stage.get("stage"), result["pp"], path, dest),
        }
    return shares, reasons


# ---------------------------------------------------------------------------------------------
# The group's verdict
# ---------------------------------------------------------------------------------------------


def plan_group(members, model, vllm, network=None, leader=None, policy_overrides=None):
    """Plan one model across a group of hosts (pipeline parallel over Ray).

    members: [{name, address, verdict (the member's own one-host verdict: allowed, reasons, and
        _plan's serving_path, serving), gpus [{name, compute_capability, memory_total_mib}],
        driver_version, image_digest, interfaces {name: mtu}, model_digest (optional)}].
    model: the gate's model input (model_facts). vllm: the group's arguments (tensor_parallel_size
        = GPUs per member, pipeline_parallel_size = members; dtype, gpu_memory_utilization,
        max_model_len, max_num_seqs, kv_cache_dtype, enforce_eager; vllm_version: the image's release,
        whose profile run the reserve models, default 0.8.5).
    network: {nccl_interface, pairs [{from, to, reachable, closed_ports}]}. leader: a member's name
        (default: the first).

    Returns {allowed, reasons, warnings ([{code, message, member}]), members, leader, tp, pp,
    gpus_total, stages, kv_tokens, max_model_len, max_concurrent_full_sequences, memory, network,
    choice, sources, summary}. Raises GateInputError, and only that, on malformed input.
    """
    return input_errors_only(_plan_group, members, model, vllm, network, leader, policy_overrides)


def _plan_group(members, model, vllm, network, leader, policy_overrides):
    policy = merge_policy(policy_overrides)
    model = to_mapping(model, "model", "the gate's model input (model_facts)")
    vllm = to_mapping(vllm, "vllm", "tensor_parallel_size, pipeline_parallel_size, max_model_len, ...")
    ordered = _members(members, leader)
    served, nvfp4_copy = _served(policy, model)
    reasons = _member_reasons(ordered, nvfp4_copy) + _identical(ordered)
    tp, pp, parallel = _parallel(ordered, vllm)
    reasons += parallel
    memory, memory_reasons, warnings = _memory(ordered, served, vllm, policy, tp, pp)
    stages = memory.pop("stages", [])
    if not parallel:
        reasons += memory_reasons
    net, net_reasons, net_warnings = _network(ordered, network)
    reasons += net_reasons
    warnings += net_warnings
    tokens = [s["kv_tokens"] for s in stages if s["kv_tokens"] is not None]
    kv_tokens = min(tokens) if tokens and len(tokens) == len(stages) else None
    max_len = memory.get("max_model_len")
    result = {
        "allowed": not reasons,
        "reasons": reasons,
        "warnings": warnings,
        "members": [{"name": m["name"], "address": m["address"], "allowed": m["verdict"]["allowed"],
                     "codes": [r.get("code") for r in m["verdict"].get("reasons") or [] if isinstance(r, dict)],
                     "gpus": _gpu_text(m), "driver_version": m["driver_version"], "image_digest": m["image_digest"]}
                    for m in ordered],
        "leader": ordered[0]["name"],
        "tp": tp,
        "pp": pp,
        "gpus_total": sum(len(m["gpus"]) for m in ordered),
        "served": {"nvfp4_fp16_copy": nvfp4_copy, "weight_bytes": memory.get("weight_bytes")},
        "stages": stages,
        "kv_tokens": kv_tokens,
        "max_model_len": max_len,
        "max_concurrent_full_sequences": kv_tokens // max_len if kv_tokens is not None and max_len else None,
        "memory": memory,
        "network": net,
        "vllm_args": {"tensor_parallel_size": tp, "pipeline_parallel_size": pp,
                      "distributed_executor_backend": "ray"},
        "sources": ["vllm@0.8.5:vllm/distributed/utils.py:70-115", "vllm@0.8.5:vllm/config.py:1094-1112",
                    "vllm@0.8.5:vllm/model_executor/models/llama.py:311-332,500-526",
                    "vllm@0.8.5:vllm/worker/cache_engine.py:120-144",
                    "vllm@0.8.5:vllm/executor/executor_base.py:103-106",
                    "vllm@0.8.5:vllm/executor/ray_distributed_executor.py:264-285,377-378",
                    "vllm@0.8.5:examples/online_serving/run_cluster.sh",
                    "https://docs.ray.io/en/latest/ray-core/configure.html"],
    }
    result["choice"] = choose_path(result, ordered[0]["verdict"], nvfp4_copy)
    shares, share_reasons = _shares(ordered, result) if result["allowed"] else ({}, [])
    if share_reasons:
        # The group does not fit after all (a member's disk, its instances): choose again, refused.
        result["reasons"] += share_reasons
        result["allowed"] = False
        result["choice"] = choose_path(result, ordered[0]["verdict"], nvfp4_copy)
        shares = {}
    result["member_plans"] = shares
    if result["choice"]["chosen"] == "one_host":
        result["warnings"].append(_reason("GROUP_NOT_NEEDED", "%s: serve it on one host, or keep the group for "
                                          "capacity as separate instances" % result["choice"]["why"]))
    result["summary"] = summary(result)
    return result


def summary(result):
    """The group's plan in one line."""
    if not result["allowed"]:
        head = "group refused (%s)" % ", ".join(sorted(set(r["code"] for r in result["reasons"])))
    else:
        head = "group of %d: PP %d x TP %d, KV cache for %s tokens" % (len(result["members"]), result["pp"],
                                                                       result["tp"], result["kv_tokens"])
    choice = result["choice"]
    if not choice["chosen"]:
        return "%s; serving path: none fits" % head
    return "%s; serving path: %s on %d host%s" % (head, choice["serving_path"], choice["hosts"],
                                                  "" if choice["hosts"] == 1 else "s")


def plan_text(result):
    """The plan as lines of text (scripts/plan-group.py, the docs)."""
    lines = [result["summary"]]
    memory = result["memory"]
    lines.append("members: %s; leader %s; %s each" % (", ".join(m["name"] for m in result["members"]),
                                                      result["leader"], result["members"][0]["gpus"]))
    if memory.get("usable") is not None:
        lines.append("per GPU: %s x gpu_memory_utilization %.2f - reserve %s = %s usable; %s, KV %d bytes per token "
                     "per layer per GPU" % (_gib(memory["memory_mib"] * MIB), memory["util"], _gib(memory["reserve"]),
                                            _gib(memory["usable"]), memory["dtype"],
                                            memory["kv_bytes_per_token_per_layer"]))
        lines.append("weights: %s (%s) in all" % (_gb(memory["weight_bytes"]), _gib(memory["weight_bytes"])))
    for stage in result["stages"]:
        lines.append("  %s: %d layers%s%s; weights %s per GPU; KV %d bytes (%.1f KiB) per token per GPU, %s per GPU "
                     "= %s tokens%s" % (
                         _stage_text(stage), stage["layer_count"], " + embeddings" if stage["embeddings"] else "",
                         " + final norm and lm_head" if stage["lm_head"] else "", _gib(stage["weight_bytes_per_gpu"]),
                         stage["kv_bytes_per_token_per_gpu"], stage["kv_bytes_per_token_per_gpu"] / 1024.0,
                         _gib(stage["kv_bytes_per_gpu"]), stage["kv_tokens"], "" if stage["fits"] else " DOES NOT FIT"))
    if result["kv_tokens"] is not None:
        lines.append("group KV cache: %d tokens (the smallest stage's), %s full %s-token sequence(s)" % (
            result["kv_tokens"], result["max_concurrent_full_sequences"], result["max_model_len"]))
    net = result["network"]
    lines.append("network: NCCL on %s (MTU %s); pairs %s" % (net["nccl_interface"] or "?", net["mtu"] or "?", ", ".join(
        "%s<->%s %s" % (p["members"][0], p["members"][1], {True: "ok", False: "UNREACHABLE", None: "unknown"}[
            p["reachable"]]) for p in net["pairs"])))
    for item in result["reasons"]:
        lines.append("reason %s%s: %s" % (item["code"], " [%s]" % item["member"] if item.get("member") else "",
                                          item["message"]))
    for item in result["warnings"]:
        lines.append("warning %s: %s" % (item["code"], item["message"]))
    choice = result["choice"]
    lines.append("choice: %s" % (choice["chosen"] or "none"))
    for key, label in (("fp16_group", "FP16 across the group"), ("gptq_one_host", "GPTQ repack on one host")):
        lines.append("  %s: %s" % (label, _alt_text(choice["alternatives"][key])))
    lines.append("why: %s" % choice["why"].split("; ", 1)[0])
    shares = result.get("member_plans") or {}
    for name in [m["name"] for m in result["members"] if m["name"] in shares]:
        share = shares[name]
        fetch = (share.get("model_store") or {}).get("fetch") or {}
        lines.append("rollout on %s: stages %s at %s%s%s" % (
            name, share["serving_path"], share["deployment"]["serving_model_path"],
            " (fetched from the model store as revision %s)" % fetch["revision"] if fetch.get("revision") else "",
            "; serves vllm %s" % " ".join(share["instances"][0]["argv"]) if name == result["leader"]
            else "; runs a Ray worker, no server"))
    return lines
