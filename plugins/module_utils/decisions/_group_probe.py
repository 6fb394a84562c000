# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.group_port_probe module instead.
"""The reachability probe between a host group's members: which ports each member listens on, what
each member connects to, and how the answers become the pairs group_gate judges
(``{from, to, reachable, closed_ports}``, docs/deploy_gate.md "One model across hosts").

The ports come from _group.GROUP_PORTS (the one list of what Ray and NCCL need): every fixed port
(6379, 10001 on the leader; 52365 on every member), both ends of a fixed range (10002 and
19999, Ray's worker ports), and for the ephemeral ports NCCL's sockets and torch.distributed's
store bind, one port the member's kernel picks from its ephemeral range. Ports Ray picks at random
unless pinned cannot be known before Ray runs: they are not probed.

Pure logic: no Ansible imports, no I/O.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._group import GROUP_PORTS

EPHEMERAL = "ephemeral"
_RANGE_RE = re.compile(r"^(\d{1,5})-(\d{1,5})$")


def probe_ports(leader):
    """[{port, what}] a member listens on: GROUP_PORTS' fixed ports and the ends of its fixed
    ranges, those ``on`` the leader only when ``leader``. The ephemeral port is not in the list
    (the listener asks the kernel for it: ephemeral_wanted())."""
    out = []
    for entry in GROUP_PORTS:
        if entry["on"] == "leader" and not leader:
            continue
        text = str(entry["port"])
        match = _RANGE_RE.match(text)
        if text.isdigit():
            numbers = [int(text)]
        elif match:
            numbers = [int(match.group(1)), int(match.group(2))]
        else:
            continue
        for number in numbers:
            if 0 < number < 65536 and number not in [p["port"] for p in out]:
                out.append({"port": number, "what": entry["what"]})
    return out


def ephemeral_wanted():
    """Whether GROUP_PORTS lists ports from the ephemeral range (NCCL, torch.distributed)."""
    return any(str(entry["port"]) == EPHEMERAL for entry in GROUP_PORTS)


def ephemeral_what():
    """What the ephemeral port stands for (GROUP_PORTS' text)."""
    for entry in GROUP_PORTS:
        if str(entry["port"]) == EPHEMERAL:
            return entry["what"]
    return "a port of the ephemeral range"


def _listener_ports(listener):
    """[{port, what, state, error}] of a listener result, its ephemeral port last."""
    out = [dict(p) for p in listener.get("ports") or [] if isinstance(p, dict)]
    if listener.get("ephemeral_port"):
        out.append({"port": listener["ephemeral_port"], "what": "ephemeral range: " + ephemeral_what(), "state": "listening", "error": None})
    return out


def connect_targets(source, listeners):
    """[(member, address, port)] that member ``source`` connects to: every port another member's
    listener holds (``listening``) or found held (``in_use``: Ray may run there already)."""
    out = []
    for listener in listeners:
        if not isinstance(listener, dict) or listener.get("name") == source or not listener.get("address"):
            continue
        for port in _listener_ports(listener):
            if port.get("state") in ("listening", "in_use"):
                out.append((listener["name"], listener["address"], port["port"]))
    return out


def judge_pairs(source, members, listeners, results):
    """The pairs from ``source`` to every other member, as group_gate takes them.

    members: the group's member names; listeners: the listen step's results (each ``name``,
    ``address``, ``ports`` [{port, what, state, error}], ``ephemeral_port``), a member without one
    left out; results: {(address, port): (open, error)} of the connect step.

    Each pair: {from, to, address, reachable (True: every probed port answered; False: one did not;
    None: nothing could be probed), closed_ports ([int]), unknown_ports ([int], ports the member
    could not listen on), ports ([{port, what, state, open, error}]), note}.
    """
    by_name = dict((item.get("name"), item) for item in listeners if isinstance(item, dict))
    pairs = []
    for name in members:
        if name == source:
            continue
        listener = by_name.get(name)
        pair = {"from": source, "to": name, "address": None, "reachable": None, "closed_ports": [],
                "unknown_ports": [], "ports": [], "note": None}
        pairs.append(pair)
        if not listener or not listener.get("address"):
            pair["note"] = "no listener ran on %s: its ports were not probed" % name
            continue
        pair["address"] = listener["address"]
        for port in _listener_ports(listener):
            item = {"port": port["port"], "what": port.get("what"), "state": port.get("state"), "open": None,
                    "error": port.get("error")}
            if port.get("state") in ("listening", "in_use"):
                opened, error = results.get((listener["address"], port["port"]), (False, "not tried"))
                item.update(open=bool(opened), error=error)
                if not opened:
                    pair["closed_ports"].append(port["port"])
            else:
                pair["unknown_ports"].append(port["port"])
            pair["ports"].append(item)
        probed = [p for p in pair["ports"] if p["open"] is not None]
        if pair["closed_ports"]:
            pair["reachable"] = False
            pair["note"] = "; ".join("%s: %s" % (p["port"], p["error"]) for p in probed if not p["open"])
        elif probed:
            pair["reachable"] = True
        else:
            pair["note"] = "%s could listen on none of its ports" % name
    return pairs
