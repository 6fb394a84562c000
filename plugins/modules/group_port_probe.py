#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: group_port_probe
short_description: Probe whether the members of a host group reach each other on the ports Ray and NCCL need
version_added: 0.1.0
description:
  - The reachability probe of a host group (docs/deploy_gate.md, One model across hosts), before anything listens
    there. Three steps, each run on a member; the preflight's entry point C(group) runs them for every member and
    hands the pairs to M(labfleet.vllm.group_gate).
  - "O(step=listen): a short-lived listener on each port the group needs on this member, at its group address
    (the wildcard address when that address is not on the host): Ray GCS 6379 and the client server 10001 on the
    leader; the dashboard agent 52365, both ends of Ray's worker ports (10002, 19999) and one
    port the kernel picks from its ephemeral range (NCCL's sockets) on every member. A port that is already in use
    (Ray already runs there on a re-run) is reported V(in_use) and connected to all the same. The listener is a
    detached process that accepts and closes connections; it ends at the O(step=stop) of the same O(token), or
    after O(seconds) at the latest."
  - "O(step=connect): a TCP connection from this member to every port the other members' listeners hold
    (O(listeners): the O(step=listen) results), all at once, each within O(timeout) seconds; returns the C(pairs)
    from this member to each other one as M(labfleet.vllm.group_gate) takes them."
  - "O(step=stop): ends this O(token)'s listener of O(name) (a stop file, then SIGTERM and SIGKILL if it has not ended within
    5 seconds) and removes its files. Safe when nothing runs."
  - "The probe changes nothing lasting: it holds ports for seconds, and leaves no process and no file behind.
    It runs the same in check mode (the preflight runs in check mode)."
author:
  - labfleet maintainers (@labfleet)
extends_documentation_fragment:
  - labfleet.vllm.attributes
attributes:
  check_mode:
    support: full
    description: The probe changes nothing lasting (a listener for seconds, connections); check mode runs it the same.
  platform:
    platforms: posix
    description: Linux hosts (it forks the listener and reads C(/proc)); Python 3 on every member.
options:
  step:
    description:
      - V(listen), V(connect) or V(stop), in that order, each on every member.
    type: str
    choices: [listen, connect, stop]
    required: true
  name:
    description:
      - This member's inventory name. O(step=listen) records it in the listener (and its files' names, as
        O(step=stop) finds them); O(step=connect) leaves its own listener out and names the pairs C(from) it.
    type: str
    required: true
  token:
    description:
      - The name of one probe run (1-80 characters of C(A-Z a-z 0-9 _ . -)), the same for O(step=listen) and
        O(step=stop) on a member.
    type: str
  address:
    description:
      - O(step=listen), required. The member's group address, the one the other members connect to.
    type: str
  leader:
    description:
      - O(step=listen). Listen on the leader's ports too (Ray GCS, dashboard, client server).
    type: bool
    default: false
  ports:
    description:
      - O(step=listen). The ports to listen on instead of the group's (O(leader) is then not used).
    type: list
    elements: int
  ephemeral:
    description:
      - O(step=listen). Also listen on one port the kernel picks from its ephemeral range.
    type: bool
    default: true
  seconds:
    description:
      - O(step=listen). The listener ends after this many seconds at the latest (the preflight gives 60 + 30 per
        member), even when no O(step=stop) comes.
    type: int
    default: 120
  members:
    description:
      - O(step=connect), required. The names of every member of the group (a member without a listener gets a
        pair with C(reachable) null).
    type: list
    elements: str
  listeners:
    description:
      - O(step=connect), required. The C(listener) results of O(step=listen) on the members (each C(name),
        C(address), C(ports), C(ephemeral_port)).
    type: list
    elements: dict
  timeout:
    description:
      - O(step=connect). Seconds each connection may take (all run at once).
    type: float
    default: 3
  runtime_dir:
    description:
      - Where the listener's files live (C(labfleet-port-probe-<token>-<name>.*)).
    type: path
    default: /tmp
notes:
  - The other members must not block the ports between each other (a firewall rule that drops or rejects them is
    exactly what the probe finds); nothing needs to be installed, and no port is left open after O(step=stop).
  - Ports Ray picks at random unless pinned (node manager, object manager, ...) cannot be probed before Ray runs.
seealso:
  - module: labfleet.vllm.group_gate
"""

EXAMPLES = r"""
- name: Listen on each member
  labfleet.vllm.group_port_probe:
    step: listen
    name: "{{ item }}"
    token: "{{ probe_token }}"
    address: "{{ hostvars[item]['ansible_facts']['default_ipv4']['address'] }}"
    leader: "{{ item == groups['vllm_group_70b'] | first }}"
    seconds: 150
  delegate_to: "{{ item }}"
  loop: "{{ groups['vllm_group_70b'] }}"
  register: probe_listen

- name: Connect from each member to the others
  labfleet.vllm.group_port_probe:
    step: connect
    name: "{{ item }}"
    members: "{{ groups['vllm_group_70b'] }}"
    listeners: "{{ probe_listen.results | map(attribute='listener') | list }}"
  delegate_to: "{{ item }}"
  loop: "{{ groups['vllm_group_70b'] }}"
  register: probe_connect

- name: End the listeners
  labfleet.vllm.group_port_probe:
    step: stop
    name: "{{ item }}"
    token: "{{ probe_token }}"
  delegate_to: "{{ item }}"
  loop: "{{ groups['vllm_group_70b'] }}"

- name: The pairs group_gate takes
  ansible.builtin.debug:
    msg: "{{ probe_connect.results | map(attribute='pairs') | flatten }}"
"""

RETURN = r"""
listener:
  description: O(step=listen). What the listener holds.
  returned: step is listen
  type: dict
  contains:
    name:
      description: O(name).
      type: str
    address:
      description: O(address), where the other members connect.
      type: str
    bound_address:
      description: The address the listener bound (the wildcard address when O(address) is not on this host).
      type: str
      sample: 10.0.0.11
    pid:
      description: The listener process.
      type: int
    ports:
      description: Each C(port), C(what) it is for, C(state) (V(listening), V(in_use) or V(error)) and C(error).
      type: list
      elements: dict
    ephemeral_port:
      description: The port the kernel picked from its ephemeral range (null when not asked or not bound).
      type: int
    seconds:
      description: O(seconds).
      type: int
pairs:
  description:
    - O(step=connect). One per other member, C(from) this one - C(from), C(to), C(address), C(reachable) (true every
      probed port answered, false one did not, null nothing could be probed), C(closed_ports), C(unknown_ports)
      (ports that member could not listen on), C(ports) (each C(port), C(what), C(state), C(open), C(error)),
      C(note).
  returned: step is connect
  type: list
  elements: dict
  sample: [{"from": "gpu2", "to": "gpu1", "address": "10.0.0.11", "reachable": false, "closed_ports": [6379],
            "unknown_ports": [], "note": "6379: Connection refused"}]
stop:
  description:
    - O(step=stop). C(state) (V(stopped), V(killed) it did not end on request, V(not_running) none of this token
      ran or its deadline had passed), C(pid), C(accepted) (each C(port), C(peer) that connected).
  returned: step is stop
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._group_probe import (
    connect_targets,
    judge_pairs,
    probe_ports,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.probes._ports import (
    PortProbeError,
    bind_ports,
    connect,
    paths,
    start_listener,
    stop,
)


def _listen(module, params):
    files = paths(params["runtime_dir"], params["token"], params["name"])
    if params["ports"] is not None:
        wanted = [{"port": port, "what": "asked for"} for port in params["ports"]]
    else:
        wanted = probe_ports(params["leader"])
    bad = [p["port"] for p in wanted if not 0 < p["port"] < 65536]
    if bad:
        module.fail_json(msg="group_port_probe: ports: expected ports 1-65535, got %s" % ", ".join(str(p) for p in bad))
    if params["seconds"] < 1:
        module.fail_json(msg="group_port_probe: seconds: expected at least 1, got %d" % params["seconds"])
    try:
        bound, states, ephemeral_port, sockets = bind_ports(params["address"], [p["port"] for p in wanted],
                                                            params["ephemeral"])
    except ValueError as exc:
        module.fail_json(msg="group_port_probe: address %s: %s" % (params["address"], exc))
    what = dict((p["port"], p["what"]) for p in wanted)
    ports = [dict(s, what=what.get(s["port"])) for s in states]
    listener = {"name": params["name"], "address": params["address"], "bound_address": bound, "ports": ports,
                "ephemeral_port": ephemeral_port, "seconds": params["seconds"], "token": params["token"]}
    if sockets:
        listener["pid"] = start_listener(sockets, files, params["seconds"], listener)
    else:
        listener["pid"] = None
    return {"listener": listener}


def _connect(params):
    targets = connect_targets(params["name"], params["listeners"])
    results = connect([(address, port) for _name, address, port in targets], params["timeout"])
    return {"pairs": judge_pairs(params["name"], params["members"], params["listeners"], results)}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            step=dict(type="str", choices=["listen", "connect", "stop"], required=True),
            name=dict(type="str", required=True),
            token=dict(type="str", no_log=False),
            address=dict(type="str"),
            leader=dict(type="bool", default=False),
            ports=dict(type="list", elements="int"),
            ephemeral=dict(type="bool", default=True),
            seconds=dict(type="int", default=120),
            members=dict(type="list", elements="str"),
            listeners=dict(type="list", elements="dict"),
            timeout=dict(type="float", default=3),
            runtime_dir=dict(type="path", default="/tmp"),
        ),
        required_if=[
            ("step", "listen", ("token", "address")),
            ("step", "connect", ("members", "listeners")),
            ("step", "stop", ("token",)),
        ],
        supports_check_mode=True,
    )
    params = module.params
    if params["timeout"] <= 0:
        module.fail_json(msg="group_port_probe: timeout: expected seconds above 0, got %s" % params["timeout"])
    try:
        if params["step"] == "listen":
            result = _listen(module, params)
        elif params["step"] == "connect":
            result = _connect(params)
        else:
            result = {"stop": stop(paths(params["runtime_dir"], params["token"], params["name"]))}
    except PortProbeError as exc:
        module.fail_json(msg="group_port_probe: %s" % exc)
    except (IOError, OSError) as exc:
        module.fail_json(msg="group_port_probe: %s: %s" % (params["step"], exc))
    # Nothing lasting changes: the listener ends at stop or by its deadline.
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
