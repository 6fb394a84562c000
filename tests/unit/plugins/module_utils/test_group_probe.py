# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The reachability probe between a group's members: the ports (decisions/_group_probe.py, from
_group.GROUP_PORTS), the pairs it makes of the answers, how group_gate judges them (_group._pairs:
false refuses naming both members and the ports, null is unknown), and the listener and connections
themselves (probes/_ports.py) on this machine's loopback."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import json
import os
import random
import socket
import time

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _group
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _group_probe as GP
from ansible_collections.labfleet.vllm.plugins.module_utils.probes import _ports as P

MEMBERS = ["gpu1", "gpu2", "gpu3"]


def _address():
    return "127.%d.%d.%d" % (random.randint(2, 254), random.randint(1, 254), random.randint(1, 254))


# --- the ports ------------------------------------------------------------------------------------


def test_the_ports_come_from_group_ports():
    assert [p["port"] for p in GP.probe_ports(leader=True)] == [6379, 10001, 52365, 10002, 19999]
    assert [p["port"] for p in GP.probe_ports(leader=False)] == [52365, 10002, 19999]
    assert GP.probe_ports(True)[0]["what"] == _group.GROUP_PORTS[0]["what"]
    assert GP.ephemeral_wanted() is True
    assert "NCCL" in GP.ephemeral_what()


# --- the pairs ------------------------------------------------------------------------------------


def listener(name, number, ports=(52365,), states=None, ephemeral=40000):
    states = states or {}
    return {"name": name, "address": "10.0.0.%d" % number, "ephemeral_port": ephemeral,
            "ports": [{"port": p, "what": "x", "state": states.get(p, "listening"), "error": None} for p in ports]}


LISTENERS = [listener("gpu1", 11, (6379, 52365)), listener("gpu2", 12), listener("gpu3", 13)]


def test_a_member_connects_to_every_port_the_others_hold_and_to_ports_in_use():
    mixed = [listener("gpu1", 11, (6379, 52365), {6379: "in_use"}), listener("gpu2", 12, states={52365: "error"}),
             listener("gpu3", 13, ephemeral=None)]
    assert GP.connect_targets("gpu3", mixed) == [("gpu1", "10.0.0.11", 6379), ("gpu1", "10.0.0.11", 52365),
                                                 ("gpu1", "10.0.0.11", 40000), ("gpu2", "10.0.0.12", 40000)]
    assert GP.connect_targets("gpu1", mixed) == [("gpu2", "10.0.0.12", 40000), ("gpu3", "10.0.0.13", 52365)]


def test_every_port_open_is_a_reachable_pair():
    results = dict(((address, port), (True, None)) for _n, address, port in GP.connect_targets("gpu2", LISTENERS))
    pairs = GP.judge_pairs("gpu2", MEMBERS, LISTENERS, results)
    assert [(p["from"], p["to"], p["reachable"], p["closed_ports"]) for p in pairs] == [
        ("gpu2", "gpu1", True, []), ("gpu2", "gpu3", True, [])]
    assert [p["port"] for p in pairs[0]["ports"]] == [6379, 52365, 40000]
    assert pairs[0]["ports"][2]["what"].startswith("ephemeral range: ")


def test_a_closed_port_makes_the_pair_unreachable_with_the_port_and_why():
    results = {("10.0.0.11", 6379): (False, "timed out after 3s"), ("10.0.0.11", 52365): (True, None),
               ("10.0.0.11", 40000): (False, "Connection refused")}
    pair = GP.judge_pairs("gpu2", ["gpu1", "gpu2"], LISTENERS, results)[0]
    assert pair["reachable"] is False and pair["closed_ports"] == [6379, 40000]
    assert pair["note"] == "6379: timed out after 3s; 40000: Connection refused"


def test_a_member_without_listener_or_without_a_port_is_unknown():
    gpu3 = listener("gpu3", 13, states={52365: "error"}, ephemeral=None)
    pairs = GP.judge_pairs("gpu1", MEMBERS, [LISTENERS[0], gpu3], {})
    assert [(p["to"], p["reachable"]) for p in pairs] == [("gpu2", None), ("gpu3", None)]
    assert "no listener ran on gpu2" in pairs[0]["note"]
    assert pairs[1]["unknown_ports"] == [52365] and "could listen on none" in pairs[1]["note"]


def test_a_port_not_tried_counts_as_closed():
    pair = GP.judge_pairs("gpu1", ["gpu1", "gpu2"], LISTENERS, {})[0]
    assert pair["reachable"] is False and pair["closed_ports"] == [52365, 40000]


# --- how group_gate judges the pairs (_group._pairs) ----------------------------------------------


def _network(pairs):
    members = [{"name": n, "address": "10.0.0.%d" % (11 + i)} for i, n in enumerate(MEMBERS)]
    members = [dict(m, interfaces={}) for m in members]
    return _group._pairs(members, pairs)   # pylint: disable=protected-access


def test_group_gate_refuses_an_unreachable_pair_naming_both_members_and_the_port():
    pairs = [{"from": a, "to": b, "reachable": True} for a in MEMBERS for b in MEMBERS if a != b]
    pairs[2] = {"from": "gpu2", "to": "gpu1", "reachable": False, "closed_ports": [6379]}
    checked, reasons, warnings = _network(pairs)
    assert [c["reachable"] for c in checked] == [False, True, True]
    assert [(r["code"], r["member"]) for r in reasons] == [("GROUP_MEMBERS_UNREACHABLE", "gpu2")]
    assert "gpu2 does not reach gpu1 (closed: 6379)" in reasons[0]["message"]
    assert warnings == []


def test_group_gate_takes_a_null_reachable_as_unknown_not_unreachable():
    pairs = [{"from": a, "to": b, "reachable": True} for a in MEMBERS for b in MEMBERS if a != b]
    pairs[0] = {"from": "gpu1", "to": "gpu2", "reachable": None}
    checked, reasons, warnings = _network(pairs)
    assert [c["reachable"] for c in checked] == [None, True, True]
    assert reasons == []
    assert [(w["code"], w["member"]) for w in warnings] == [("GROUP_REACHABILITY_UNKNOWN", "gpu1")]
    assert "from gpu1 to gpu2" in warnings[0]["message"]
    # one way unknown, the other unreachable: unreachable
    pairs[1] = {"from": "gpu2", "to": "gpu1", "reachable": False, "closed_ports": [6379]}
    checked, reasons, warnings = _network(pairs)
    assert checked[0]["reachable"] is False and len(reasons) == 1 and warnings == []


# --- the listener and the connections (loopback) --------------------------------------------------


def _ports_free(address, ports):
    for port in ports:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address, port))
            sock.listen(1)
        finally:
            sock.close()


def test_listen_connect_stop_on_loopback(tmp_path):
    address = _address()
    files = P.paths(str(tmp_path), "run1", "gpu1")
    bound, states, ephemeral, sockets = P.bind_ports(address, [6379, 52365])
    assert bound == address and [s["state"] for s in states] == ["listening", "listening"]
    assert ephemeral and ephemeral > 1024 and len(sockets) == 3
    pid = P.start_listener(sockets, files, 30, {"name": "gpu1"})
    with open(files["state"]) as handle:
        assert json.load(handle) == {"name": "gpu1", "pid": pid}
    results = P.connect([(address, 6379), (address, 52365), (address, ephemeral), (address, 1)], 3)
    assert results[(address, 6379)] == (True, None) and results[(address, ephemeral)] == (True, None)
    assert results[(address, 1)] == (False, os.strerror(errno.ECONNREFUSED))
    stopped = P.stop(files)
    assert stopped["state"] == "stopped" and stopped["pid"] == pid
    assert sorted(a["port"] for a in stopped["accepted"]) == sorted([6379, 52365, ephemeral])
    assert os.listdir(str(tmp_path)) == []
    _ports_free(address, [6379, 52365])
    # A second stop finds nothing and says so.
    assert P.stop(files) == {"state": "not_running", "pid": None, "accepted": []}


def test_a_port_in_use_is_reported_and_answers_through_its_owner(tmp_path):
    address = _address()
    owner = socket.socket()
    owner.bind((address, 0))
    owner.listen(4)
    port = owner.getsockname()[1]
    try:
        bound, states, _ephemeral, sockets = P.bind_ports(address, [port], ephemeral=False)
        assert states == [{"port": port, "state": "in_use", "error": os.strerror(errno.EADDRINUSE)}]
        assert sockets == []
        assert P.connect([(address, port)], 3) == {(address, port): (True, None)}
    finally:
        owner.close()
    del bound


def test_an_address_not_on_this_host_binds_the_wildcard_address():
    bound, states, ephemeral, sockets = P.bind_ports("192.0.2.1", [], ephemeral=True)
    try:
        assert socket.inet_aton(bound) == bytes(4) and states == [] and ephemeral
    finally:
        for sock in sockets:
            sock.close()
    with pytest.raises(ValueError, match="cannot resolve"):
        P.bind_ports("no-such-host.invalid", [6379])


def test_the_listener_ends_by_its_deadline_and_leaves_nothing(tmp_path):
    address = _address()
    files = P.paths(str(tmp_path), "run2", "gpu2")
    sockets = P.bind_ports(address, [52365], ephemeral=False)[3]
    pid = P.start_listener(sockets, files, 1, {})
    end = time.monotonic() + 10
    while os.path.exists(files["state"]) and time.monotonic() < end:
        time.sleep(0.05)
    assert not os.path.exists(files["state"])
    assert P.stop(files)["state"] == "not_running"
    assert os.listdir(str(tmp_path)) == []
    _ports_free(address, [52365])
    del pid


def test_a_listener_that_does_not_end_on_request_is_killed(tmp_path):
    """A state file naming a process that ignores the stop file (a sleeping child here)."""
    files = P.paths(str(tmp_path), "run3", "gpu3")
    child = os.fork()
    if child == 0:  # pragma: no cover
        time.sleep(60)
        os._exit(0)  # pylint: disable=protected-access
    try:
        with open(files["state"], "w") as handle:
            json.dump({"pid": child}, handle)
        stopped = P.stop(files, wait_s=0.3)
        assert stopped["state"] == "killed" and stopped["pid"] == child
        assert os.waitpid(child, 0)[1] != 0
        assert os.listdir(str(tmp_path)) == []
    finally:
        try:
            os.kill(child, 9)
        except OSError:
            pass


def test_connect_times_out_and_names_what_failed():
    """A listener whose accept queue is full drops new handshakes (Linux): the connection times out."""
    address = _address()
    owner = socket.socket()
    owner.bind((address, 0))
    owner.listen(0)
    port = owner.getsockname()[1]
    fillers = []
    try:
        for _count in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex((address, port))
            fillers.append(filler)
        time.sleep(0.2)
        started = time.monotonic()
        results = P.connect([(address, port), ("no-such-host.invalid", 1)], 0.5)
        assert results[(address, port)] == (False, "timed out after 0.5s")
        assert 0.4 < time.monotonic() - started < 3
        assert results[("no-such-host.invalid", 1)][0] is False
        assert "cannot resolve" in results[("no-such-host.invalid", 1)][1]
    finally:
        owner.close()
        for filler in fillers:
            filler.close()


@pytest.mark.parametrize("token", ["", "../etc", "a b", "x" * 81, None])
def test_a_bad_token_is_refused(token):
    with pytest.raises(P.PortProbeError, match="token"):
        P.paths("/tmp", token, "gpu1")
