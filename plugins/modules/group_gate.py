#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: group_gate
short_description: Plan one model across a group of hosts (pipeline parallel over Ray), and say why not
version_added: 0.1.0
description:
  - A pure decision with no side effects, the group counterpart of M(labfleet.vllm.deploy_gate). From each
    member's own one-host verdict (M(labfleet.vllm.deploy_gate) of that host alone, with
    C(tensor_parallel_size) set to its GPUs), its GPUs, driver, image digest and network interfaces, the
    model (M(labfleet.vllm.model_facts)), the group's vLLM arguments and the network's reachability, the
    module returns one plan object, C(group) - whether the group can serve the model together (C(allowed)),
    the C(reasons) for a refusal (each with the C(member) it concerns), the C(stages) (each member's layers,
    weights, reserve and KV cache per GPU), the group's KV tokens, the network checks and the serving path
    chosen against the GPTQ repack on one host, with both alternatives' figures.
  - "The stages follow vLLM 0.8.5 (C(vllm/distributed/utils.py) C(get_pp_indices)): an even split of the
    decoder layers, the remainder one layer each to the stages before the last; the embeddings load on the
    first stage and C(lm_head) on the last; the leader holds stage 0. docs/deploy_gate.md, section One model
    across hosts, explains every figure and code."
  - "Reason codes: V(GROUP_MEMBER_REFUSED) a member's own verdict refuses it for more than the memory the
    group plans; V(GROUP_GPUS_DIFFER), V(GROUP_DRIVER_DIFFERS), V(GROUP_IMAGE_DIFFERS), V(GROUP_MODEL_DIFFERS)
    the members are not identical; V(GROUP_PARALLEL_MISMATCH) pipeline x tensor parallel is not the group's
    GPUs, or a stage is not one member; V(GROUP_STAGE_DOES_NOT_FIT) a stage's weights and one
    C(max_model_len) sequence do not fit; V(GROUP_STAGES_UNPLANNED) the model's shapes are unknown;
    V(GROUP_NCCL_INTERFACE_UNSET), V(GROUP_NCCL_INTERFACE_MISSING), V(GROUP_MTU_MISMATCH) the NCCL
    interface; V(GROUP_MEMBERS_UNREACHABLE) two members do not reach each other; V(GROUP_MEMBER_DISK) the FP16
    copy the group serves does not fit on a member's disk; V(GROUP_INSTANCES_NOT_ONE) a member's request has more
    or fewer than one vLLM instance."
  - "Warning codes: V(GROUP_REACHABILITY_UNKNOWN), V(GROUP_MEMORY_PLAN_INCOMPLETE), V(GROUP_NOT_NEEDED)."
  - The module never fails for a "no" verdict; it fails only when an input is malformed, and then the
    message names the field and what is expected.
  - The preflight calls it for each group of C(labfleet_host_groups) (the preflight role's entry point C(group)); no role starts the Ray cluster yet.
author:
  - labfleet maintainers (@labfleet)
extends_documentation_fragment:
  - labfleet.vllm.attributes
  - labfleet.vllm.attributes.read_only
attributes:
  platform:
    description: Pure Python; runs on the controller or any host.
options:
  members:
    description:
      - "The group's hosts, at least two. Each C(name) (str, the inventory name), C(address) (str, the
        address the members reach it at), C(verdict) (dict, its own one-host verdict - C(allowed), C(reasons),
        and C(serving_path), C(serving), C(deployment), C(instances), C(model_store) as M(labfleet.vllm.deploy_gate)
        returns them; without C(deployment) and C(instances) no member share is made), C(gpus) (list of
        C(name), C(compute_capability), C(memory_total_mib)), C(driver_version) (str), C(image_digest) (str),
        C(interfaces) (dict, interface name to MTU), C(model_digest) (str, optional)."
    type: list
    elements: dict
    required: true
  model:
    description:
      - The model as M(labfleet.vllm.model_facts) reports it (the gate's model input); an NVFP4 checkpoint is
        planned as its FP16 copy.
    type: dict
    required: true
  vllm:
    description:
      - "The group's vLLM arguments - C(tensor_parallel_size) (default the GPUs of one member),
        C(pipeline_parallel_size) (default the members), C(dtype), C(gpu_memory_utilization),
        C(max_model_len), C(max_num_seqs), C(kv_cache_dtype), C(enforce_eager), and C(vllm_version) (the
        image's release, default 0.8.5)."
    type: dict
    default: {}
  network:
    description:
      - "C(nccl_interface) (str, the interface NCCL_SOCKET_IFNAME names, on every member) and C(pairs) (list of
        C(from), C(to), C(reachable) (bool; null when the probe could not tell: unknown), C(closed_ports) (list)) -
        a result per pair of members, either way or both (M(labfleet.vllm.group_port_probe) gives them)."
    type: dict
    default: {}
  leader:
    description:
      - The member that runs the Ray head and vLLM (stage 0); default the first member.
    type: str
  policy:
    description:
      - Overrides merged over the shipped policy, as for M(labfleet.vllm.deploy_gate).
    type: dict
    default: {}
notes:
  - Check mode gives the same plan (the module changes nothing).
seealso:
  - module: labfleet.vllm.deploy_gate
"""

EXAMPLES = r"""
- name: Plan the 70B across the three V100 hosts of the group
  labfleet.vllm.group_gate:
    members: "{{ groups['llama70b'] | map('extract', hostvars) | map(attribute='group_member') | list }}"
    model: "{{ model_facts_result.gate }}"
    vllm:
      tensor_parallel_size: 2
      pipeline_parallel_size: 3
      dtype: float16
      gpu_memory_utilization: 0.92
      max_model_len: 32768
      max_num_seqs: 32
    network:
      nccl_interface: ens1f0
      pairs: "{{ group_reachability }}"
  delegate_to: localhost
  run_once: true
  register: group_plan

- name: Stop when the group cannot serve it
  ansible.builtin.assert:
    that: group_plan.group.allowed
    fail_msg: "{{ group_plan.group.reasons | map(attribute='message') | join('; ') }}"
"""

RETURN = r"""
group:
  description:
    - The plan of the group, one object.
  returned: success
  type: dict
  contains:
    allowed:
      description: Whether the group can serve the model together (no reasons).
      type: bool
      sample: true
    reasons:
      description: Why not, each C(code), C(message) (what to change) and C(member) (null for the group).
      type: list
      elements: dict
    warnings:
      description: What does not block the group, each C(code), C(message), C(member).
      type: list
      elements: dict
    members:
      description: The members in stage order, each C(name), C(address), C(allowed) (its own verdict), C(codes), C(gpus).
      type: list
      elements: dict
    leader:
      description: The member of stage 0, which runs the Ray head and vLLM.
      type: str
      sample: gpu1
    tp:
      description: tensor_parallel_size.
      type: int
      sample: 2
    pp:
      description: pipeline_parallel_size.
      type: int
      sample: 3
    stages:
      description:
        - "Per stage C(stage), C(member), C(layers) ([first, last]), C(layer_count), C(weight_bytes),
          C(weight_bytes_per_gpu), C(reserve_bytes_per_gpu), C(usable_bytes_per_gpu),
          C(kv_bytes_per_token_per_gpu), C(kv_bytes_per_gpu), C(kv_tokens), C(embeddings), C(lm_head), C(fits)."
      type: list
      elements: dict
    kv_tokens:
      description: The group's KV cache in tokens (the smallest stage's).
      type: int
      sample: 44885
    memory:
      description: The memory plan's common figures (dtype, utilization, GPU memory, reserve and how it was modelled, usable).
      type: dict
    network:
      description: C(nccl_interface), C(mtu), C(mtus), C(pairs) (each C(members), C(reachable)), C(addresses), C(ports) (the ports Ray and NCCL need).
      type: dict
    choice:
      description:
        - "C(chosen) (V(group), V(gptq_repack), V(one_host) or null), C(serving_path), C(hosts), C(why) and
          C(alternatives) (C(fp16_group), C(gptq_one_host), each with its size, size per GPU, KV tokens and
          expected error)."
      type: dict
    member_plans:
      description:
        - "Each member's share of an allowed group, by name (empty when the group is refused): what the group
          rollout applies over the member's own plan - C(allowed), C(reasons), C(serving_path), C(deployment) (its
          C(serving_path) and C(serving_model_path), the directory the unit mounts), C(serving), C(instances) (the one
          instance with the group's C(argv): PP x TP over Ray, the group's dtype and max_model_len, no
          C(--quantization) for the FP16 copy), C(model_store) (fetching the copy's revision C(<revision>+fp16) when
          the group serves the FP16 copy), C(stage) (C(stage), C(layers), C(leader)), C(tolerated_codes) (the codes
          that refuse the member alone but not its group) and C(why)."
        - A member whose own plan is the GPTQ repack (or refused for memory) thus stages and serves the FP16 copy
          across the group.
      type: dict
      sample: {"gpu1": {"serving_path": "fp16_fallback", "deployment": {"serving_model_path": "/srv/models/llama-70b-nvfp4-fp16"}}}
    vllm_args:
      description: The flags the leader's vLLM gets for the group.
      type: dict
      sample: {"tensor_parallel_size": 2, "pipeline_parallel_size": 3, "distributed_executor_backend": "ray"}
    summary:
      description: The plan in one line.
      type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._group import GateInputError, plan_group


def main():
    module = AnsibleModule(
        argument_spec=dict(
            members=dict(type="list", elements="dict", required=True),
            model=dict(type="dict", required=True),
            vllm=dict(type="dict", default={}),
            network=dict(type="dict", default={}),
            leader=dict(type="str"),
            policy=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        group = plan_group(params["members"], params["model"], params["vllm"], network=params["network"],
                           leader=params["leader"], policy_overrides=params["policy"])
    except GateInputError as exc:
        module.fail_json(msg="group_gate: invalid input: %s" % exc)
    module.exit_json(changed=False, group=group)


if __name__ == "__main__":
    main()
