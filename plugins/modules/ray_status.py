#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: ray_status
short_description: Read a host group's Ray cluster from the local Ray container, and say whether it is ready
version_added: 0.1.0
description:
  - Asks the Ray cluster of a host group (pipeline parallel over Ray, issue 27) as the local Ray container sees it -
    the container the C(labfleet.vllm.ray_cluster) role runs on every member (C(labfleet-ray.service), host network,
    the vLLM image's own Ray).
  - "It runs C(docker container inspect) on the container, then C(docker exec -i <container> python3 - <seconds>)
    with a short script on stdin that calls C(ray.init(address=\"auto\")) and C(ray.nodes()) and prints one JSON
    line - each node's ID, address (C(NodeManagerAddress)), whether it is alive, its GPUs (C(Resources[\"GPU\"])) and
    its node manager port. The script stops itself before O(timeout), since ending C(docker exec) does not end what it
    started in the container."
  - With O(expect_members) and O(expect_gpus), it compares the cluster with the group - every member alive at its
    address with its GPUs, the GPUs the plan needs - and returns RV(ready) and RV(problems), plain sentences that say
    what to fix. A cluster that is not ready is not a failure (the rollout calls the module in an C(until) loop, the
    doctor reads its problems).
  - It fails only when Docker is missing or does not answer, or the container is absent or not running, and then the
    message says what to fix; with O(fail_on_absent=false) those are a RV(ready) V(false) with the problem instead.
  - Changes nothing; check mode runs the same read-only commands and returns the same result.
options:
  container:
    description:
      - The Ray container's name.
    type: str
    default: labfleet-ray
  docker_bin:
    description:
      - The docker command, a path or a name looked up on E(PATH).
    type: path
    default: /usr/bin/docker
  expect_members:
    description:
      - The group's members, each C(name) (str, the inventory name), C(address) (str, the address its Ray node
        runs at, C(--node-ip-address)) and C(gpus) (int, the GPUs it gives Ray). Omitted - no member is judged.
    type: list
    elements: dict
  expect_gpus:
    description:
      - The GPUs the plan needs in the cluster (pipeline x tensor parallel); RV(ready) is false while the live
        nodes show fewer.
    type: int
  timeout:
    description:
      - Seconds each docker command may take, from 5 to 600.
    type: int
    default: 30
  fail_on_absent:
    description:
      - Fail when Docker is missing or does not answer, or the container is absent or not running. V(false) - return
        RV(ready) V(false) with the problem instead (what the doctor wants).
    type: bool
    default: true
requirements:
  - Docker on the host and the Ray container the C(labfleet.vllm.ray_cluster) role runs (C(python3) with Ray in it).
extends_documentation_fragment:
  - labfleet.vllm.attributes
  - labfleet.vllm.attributes.read_only
attributes:
  platform:
    description: Runs on a member of a host group, Python standard library only; Ray runs in the container.
author:
  - labfleet maintainers (@labfleet)
notes:
  - Run as root (C(become)) or as a user of the C(docker) group.
  - A node that restarted leaves its old node in Ray's table, dead; a member counts as in the cluster when a live
    node is at its address.
seealso:
  - module: labfleet.vllm.group_gate
"""

EXAMPLES = r"""
- name: Wait until every member of the group is in the Ray cluster with its GPUs (on the leader)
  labfleet.vllm.ray_status:
    expect_members: "{{ group_record['members'] }}"
    expect_gpus: "{{ group_record['gpus_total'] }}"
  register: ray
  until: ray['ready']
  retries: 30
  delay: 10

- name: Read the cluster without failing when the container is down (the doctor)
  labfleet.vllm.ray_status:
    expect_members:
      - {name: gpu1, address: 10.0.0.11, gpus: 2}
      - {name: gpu2, address: 10.0.0.12, gpus: 2}
      - {name: gpu3, address: 10.0.0.13, gpus: 2}
    expect_gpus: 6
    fail_on_absent: false
  register: ray

- name: Say what to fix
  ansible.builtin.debug:
    msg: "{{ ray['problems'] }}"
  when: not ray['ready']
"""

RETURN = r"""
ready:
  description:
    - Whether the container answered, every member of O(expect_members) has a live node at its address with its GPUs
      and the live nodes show at least O(expect_gpus) GPUs.
  returned: always
  type: bool
  sample: true
problems:
  description: Why it is not ready, each a sentence that says what to fix.
  returned: always
  type: list
  elements: str
  sample:
    - "member gpu3 (10.0.0.13) is not in the Ray cluster: start labfleet-ray.service there (systemctl status
      labfleet-ray; journalctl -u labfleet-ray) and check that it reaches 10.0.0.11:6379"
nodes:
  description: Every node Ray knows, live or dead - C(node_id), C(address), C(alive), C(gpus), C(node_manager_port).
  returned: always
  type: list
  elements: dict
  sample:
    - {node_id: a1d2996a30ad8599f51b561a1e5c393d78f91974cb2ba6ef8bd6001a, address: 10.0.0.11, alive: true, gpus: 2,
       node_manager_port: 43777}
gpus_total:
  description: The GPUs of the live nodes.
  returned: always
  type: int
  sample: 6
alive_count:
  description: The live nodes.
  returned: always
  type: int
  sample: 3
members:
  description:
    - With O(expect_members), one entry per member - C(name), C(address), C(gpus_expected), C(gpus_seen) (the GPUs of
      the live nodes at its address), C(alive).
  returned: always
  type: list
  elements: dict
missing:
  description: The names of the members with no live node at their address.
  returned: always
  type: list
  elements: str
  sample: [gpu3]
unexpected:
  description: With O(expect_members), the addresses of live nodes that no member has (a stale host in the cluster).
  returned: always
  type: list
  elements: str
issues:
  description:
    - RV(problems) of the comparison with their codes - C(code) (V(RAY_MEMBER_MISSING), V(RAY_MEMBER_DEAD),
      V(RAY_MEMBER_GPUS_SHORT), V(RAY_GPUS_SHORT)), C(member) (null for the cluster) and C(text).
  returned: always
  type: list
  elements: dict
answered:
  description: Whether Ray in the container answered (false - RV(problems) says why).
  returned: always
  type: bool
ray_version:
  description: The container's Ray version, when it answered.
  returned: always
  type: str
  sample: 2.44.1
gcs_address:
  description: The Ray GCS address the container's node uses (the leader's C(address:port)), when it answered.
  returned: always
  type: str
  sample: "10.0.0.11:6379"
container_state:
  description: The container's state as C(docker container inspect) reports it (V(running) when it was asked).
  returned: always
  type: str
  sample: running
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.labfleet.vllm.plugins.module_utils.clients._bounded import run_bounded
from ansible_collections.labfleet.vllm.plugins.module_utils.probes._ray import RayStatusError, ray_status


def _members(module, items):
    """expect_members checked: each a name, an address and a GPU count."""
    if items is None:
        return None
    members = []
    for index, item in enumerate(items):
        name, address, gpus = item.get("name"), item.get("address"), item.get("gpus")
        if not isinstance(name, str) or not name or not isinstance(address, str) or not address:
            module.fail_json(msg="expect_members[%d] needs a name and an address (strings), got %r" % (index, item))
        if isinstance(gpus, str) and gpus.isdigit():
            gpus = int(gpus)
        if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
            module.fail_json(msg="expect_members[%d].gpus must be a whole number of GPUs, got %r" % (index, gpus))
        members.append({"name": name, "address": address, "gpus": gpus})
    return members


def _docker(module, docker_bin):
    """The docker command's path, or None when it is not there."""
    if os.sep not in docker_bin:
        return module.get_bin_path(docker_bin)
    return docker_bin if os.path.isfile(docker_bin) and os.access(docker_bin, os.X_OK) else None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            container=dict(type="str", default="labfleet-ray"),
            docker_bin=dict(type="path", default="/usr/bin/docker"),
            expect_members=dict(type="list", elements="dict"),
            expect_gpus=dict(type="int"),
            timeout=dict(type="int", default=30),
            fail_on_absent=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not 5 <= p["timeout"] <= 600:
        module.fail_json(msg="timeout must be from 5 to 600 seconds, got %d" % p["timeout"])
    if not p["container"] or any(ord(ch) < 33 for ch in p["container"]) or p["container"].startswith("-"):
        module.fail_json(msg="container must be a container name, got %r" % p["container"])
    if p["expect_gpus"] is not None and p["expect_gpus"] < 0:
        module.fail_json(msg="expect_gpus must be 0 or more, got %d" % p["expect_gpus"])
    members = _members(module, p["expect_members"])
    empty = dict(changed=False, ready=False, nodes=[], gpus_total=0, alive_count=0, members=[], missing=[],
                 unexpected=[], issues=[], answered=False, ray_version=None, gcs_address=None, container_state=None)
    docker = _docker(module, p["docker_bin"])
    if docker is None:
        msg = "docker is not at %s: install Docker (the labfleet.vllm.container_runtime role) or set docker_bin" % (
            p["docker_bin"])
        if p["fail_on_absent"]:
            module.fail_json(msg=msg, **empty)
        module.exit_json(problems=[msg], **empty)

    def run(argv, data, limit):
        try:
            return run_bounded(module, argv, limit, data=data)
        except OSError as exc:
            return 127, "", str(exc), False

    try:
        result = ray_status(run, docker, p["container"], expect_members=members, expect_gpus=p["expect_gpus"],
                            timeout=p["timeout"])
    except RayStatusError as exc:
        if p["fail_on_absent"]:
            module.fail_json(msg=str(exc), **empty)
        module.exit_json(problems=[str(exc)], **empty)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
