#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_doctor
short_description: Diagnose a vLLM host for the five classic failures, read-only
version_added: 0.1.0
description:
  - Tells, for one vLLM instance on the host, whether each of the reference deployment's five failures applies,
    why, and what fixes it - 1. GPUs not visible inside containers, 2. "Illegal instruction" (the host CPU lacks an
    instruction set the image's binaries need), 3. "no kernel image is available" (the image's arch list does not
    reach the GPU), 4. out of memory at start or under load (with values of C(--gpu-memory-utilization),
    C(--max-num-seqs) and C(--max-model-len) that fit, found by asking the deployment gate), 5. slow or hanging
    tensor parallelism over PCIe (topology, P2P, ACS, NCCL settings, a server that stopped producing tokens).
  - It decides nothing the probes or the plan already decide - pass what M(labfleet.vllm.gpu_facts),
    M(labfleet.vllm.host_facts), M(labfleet.vllm.vllm_image_facts) and M(labfleet.vllm.deploy_gate) returned
    (the C(labfleet.vllm.preflight) role's facts); the diagnosis is in the collection's private
    C(plugins/module_utils/reporting/_doctor.py), where every fact carries its source.
  - "It reads on the host, each command bounded by O(timeout) - the instance's journal (C(journalctl -u
    <instance>.service)), the kernel log, O(daemon_json_path), the CDI specs, the C(/dev/nvidia*) nodes and their
    C(/dev/char) links, C(nvidia-smi topo -m) and C(topo -p2p r), C(lspci -vvv) (ACS), C(/proc/cmdline), the running
    container's arguments (C(docker container inspect)) and the NCCL_/CUDA_/VLLM_ variables of the instance's env
    file (names that look like secrets are never read into the result)."
  - With O(gpu_test) and O(image) on the host, it runs C(docker run --rm --network none --gpus all --entrypoint
    nvidia-smi <image> -L) to see what a container sees; with O(ptx_jit_test) also the image's CUDA check with
    C(CUDA_FORCE_PTX_JIT=1). Both containers are removed when they end, or when they time out.
  - Changes nothing on the host; check mode runs the same read-only diagnosis.
options:
  nvidia:
    description:
      - What M(labfleet.vllm.gpu_facts) put in C(ansible_facts['nvidia']).
    type: dict
    required: true
  host:
    description:
      - What M(labfleet.vllm.host_facts) put in C(ansible_facts['labfleet_host']) (CPU flags, Docker and toolkit).
    type: dict
    default: {}
  image:
    description:
      - The C(image) result of M(labfleet.vllm.vllm_image_facts) (arch list, CUDA, CPU needs, C(gpu_check)).
    type: dict
    default: {}
  verdict:
    description:
      - The plan (C(verdict)) of M(labfleet.vllm.deploy_gate), the C(preflight_verdict) fact.
    type: dict
    default: {}
  gate_inputs:
    description:
      - The deployment gate's inputs for this host, what its plan was made from (the plan's C(made_from) -
        C(gpus), C(driver_version), C(image) (as M(labfleet.vllm.vllm_image_facts) read it, or the gate's view of
        it), C(model), C(nvlink), C(cuda_driver_version), C(driver_library_mismatch), C(lost_gpus), C(policy)), so that
        the out-of-memory check can ask the gate which settings fit. Empty - no settings are suggested.
    type: dict
    default: {}
  instance:
    description:
      - The instance to diagnose (its unit is C(<instance>.service), its container C(<instance>)); default - the
        plan's first instance, else V(vllm).
    type: str
  config_dir:
    description:
      - The directory of the instances' env files (C(vllm_server_config_dir)).
    type: path
    default: /etc/vllm
  docker:
    description:
      - The docker command (a name on PATH or a path).
    type: str
    default: docker
  daemon_json_path:
    description:
      - Docker's daemon configuration file.
    type: path
    default: /etc/docker/daemon.json
  journal_lines:
    description:
      - Journal lines of the instance read (the newest), from 50 to 100000.
    type: int
    default: 2000
  gpu_test:
    description:
      - Run the C(nvidia-smi -L) test container when O(image) is on the host.
    type: bool
    default: true
  ptx_jit_test:
    description:
      - Also run the image's CUDA check with C(CUDA_FORCE_PTX_JIT=1) (discards the compiled kernels and JIT-compiles
        the PTX; slow on the first run). Off unless asked.
    type: bool
    default: false
  timeout:
    description:
      - Seconds each command (and each test container) may take, from 1 to 3600.
    type: int
    default: 120
requirements:
  - journalctl, and for the topology checks C(nvidia-smi) and C(lspci) (C(pciutils)) on the host; what is missing
    makes the checks that need it answer C(unknown) with what to collect.
extends_documentation_fragment:
  - labfleet.vllm.attributes
  - labfleet.vllm.attributes.read_only
attributes:
  platform:
    description: Runs on the GPU host it diagnoses, Python standard library only.
author:
  - labfleet maintainers (@labfleet)
notes:
  - The test containers need the image on the host; the module never pulls.
  - Run as root (C(become)) - the journal, C(lspci)'s ACS lines and the env file are root's to read.
seealso:
  - module: labfleet.vllm.deploy_gate
  - module: labfleet.vllm.gpu_facts
"""

EXAMPLES = r"""
- name: Diagnose the host's vLLM instance (after the preflight role's probes and plan)
  labfleet.vllm.vllm_doctor:
    nvidia: "{{ ansible_facts['nvidia'] }}"
    host: "{{ ansible_facts['labfleet_host'] }}"
    verdict: "{{ preflight_verdict }}"
    image: "{{ image_probe['image'] | default({}) }}"
  register: doctor

- name: Show the verdict and the fix of each check
  ansible.builtin.debug:
    msg: "{{ doctor['lines'] }}"
"""

RETURN = r"""
doctor:
  description:
    - The diagnosis - C(status) (V(problem) when any check found one, else V(unknown), V(healthy) or
      V(not_applicable)), C(instance), C(findings) (one per check, in the order above - C(check), C(status), C(cause),
      C(fix), C(evidence) with the sources the finding rests on) and C(journal_states) (fault states read in the
      journal, e.g. V(gated(nccl))).
  returned: success
  type: dict
  sample:
    status: problem
    instance: vllm
    findings:
      - check: gpu_in_container
        status: problem
        cause: "/etc/docker/daemon.json is not valid JSON: ..., so dockerd will not start with it."
        fix: "repair /etc/docker/daemon.json (keep its keys) ..."
        evidence: {}
    journal_states: []
lines:
  description: "One line per check for a person - C(<check>: <status>: <cause> Fix: <fix>)."
  returned: success
  type: list
  elements: str
collected:
  description: What was read and what could not be (field -> V(read) or why not); no content.
  returned: success
  type: dict
"""

import os
import shutil

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.labfleet.vllm.plugins.module_utils.clients._bounded import run_bounded
from ansible_collections.labfleet.vllm.plugins.module_utils.reporting._doctor import diagnose, summary_lines
from ansible_collections.labfleet.vllm.plugins.module_utils.reporting._doctor_collect import (
    CollectError,
    Collector,
    check_instance_name,
    collect,
    doctor_gate_inputs,
    test_image,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia=dict(type="dict", required=True),
            host=dict(type="dict", default={}),
            image=dict(type="dict", default={}),
            verdict=dict(type="dict", default={}),
            gate_inputs=dict(type="dict", default={}),
            instance=dict(type="str"),
            config_dir=dict(type="path", default="/etc/vllm"),
            docker=dict(type="str", default="docker"),
            daemon_json_path=dict(type="path", default="/etc/docker/daemon.json"),
            journal_lines=dict(type="int", default=2000),
            gpu_test=dict(type="bool", default=True),
            ptx_jit_test=dict(type="bool", default=False),
            timeout=dict(type="int", default=120),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not 50 <= p["journal_lines"] <= 100000:
        module.fail_json(msg="journal_lines must be from 50 to 100000, got %d" % p["journal_lines"])
    if not 1 <= p["timeout"] <= 3600:
        module.fail_json(msg="timeout must be from 1 to 3600 seconds, got %d" % p["timeout"])
    if not p["docker"] or any(ord(ch) < 32 for ch in p["docker"]):
        module.fail_json(msg="docker must be the docker command's name or path, got %r" % p["docker"])
    verdict = p["verdict"] or {}
    instances = [i for i in verdict.get("instances") or [] if isinstance(i, dict)]
    name = p["instance"] or (instances[0].get("name") if instances else None) or "vllm"
    try:
        check_instance_name(name)
    except CollectError as exc:
        module.fail_json(msg=str(exc))

    def run(argv, limit):
        try:
            rc, out, err, late = run_bounded(module, argv, limit)
        except OSError as exc:
            return 127, "", str(exc), False
        return rc, out, err, late

    collector = Collector(run, shutil.which, timeout=p["timeout"])
    raw, notes = collect(collector, name, config_dir=p["config_dir"], docker=p["docker"],
                         journal_lines=p["journal_lines"], daemon_json_path=p["daemon_json_path"],
                         image=test_image(verdict, p["image"]), gpu_test=p["gpu_test"],
                         ptx_jit_test=p["ptx_jit_test"], name_suffix=str(os.getpid()))
    result = diagnose(nvidia=p["nvidia"], host=p["host"], image=p["image"], verdict=verdict, raw=raw,
                      gate_inputs=doctor_gate_inputs(p["gate_inputs"], verdict), instance=name)
    module.exit_json(changed=False, doctor=result, lines=summary_lines(result), collected=notes)


if __name__ == "__main__":
    main()
