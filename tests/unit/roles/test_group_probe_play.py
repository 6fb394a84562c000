# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The reachability probe of the preflight's group play (labfleet.vllm.group_port_probe), run offline.

The three stand-in members of test_host_group_play.py (connection local) get addresses of their own on
this machine's loopback (127.A.B.11-13: every 127/8 address is local on Linux; a fresh A.B per test
keeps one test's TIME_WAIT sockets out of the next), and the play runs with
preflight_group_probe_network: true. A port of a member that is held by a socket that does not listen
stands for a closed port (the connection is refused); a port held by a listening socket for Ray that
already runs there on a re-run.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import importlib.util
import os
import random
import socket

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
_SPEC = importlib.util.spec_from_file_location("labfleet_test_host_group_play_for_probe",
                                               os.path.join(_HERE, "test_host_group_play.py"))
H = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(H)

LEADER_PORTS = (6379, 10001, 52365, 10002, 19999)
MEMBER_PORTS = (52365, 10002, 19999)


@pytest.fixture()
def network():
    """A /24 of loopback addresses no earlier test used (127.A.B.)."""
    return "127.%d.%d." % (random.randint(2, 254), random.randint(1, 254))


def _held(address, port, listen):
    sock = socket.socket()
    if listen:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((address, port))
    if listen:
        sock.listen(4)
    return sock


def _nothing_left(network):
    """No listener of the probe holds a port any more, and it left no file in /tmp."""
    for number, ports in ((11, LEADER_PORTS), (12, MEMBER_PORTS), (13, MEMBER_PORTS)):
        for port in ports:
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("%s%d" % (network, number), port))
                sock.listen(1)   # EADDRINUSE here if a listener were left
            finally:
                sock.close()
    assert glob.glob("/tmp/labfleet-port-probe-vllm_group_70b-*") == []


def test_members_that_reach_each_other_are_planned_with_every_pair_known(tmp_path, network):
    output, left = H.run_group_play(tmp_path, probe=True, network=network)
    plan = left["gpu1"]["verdict"]
    assert plan["allowed"] is True, plan["reasons"]
    assert plan["warnings"] == []
    assert [p["reachable"] for p in plan["network"]["pairs"]] == [True, True, True]
    probe = plan["network_probe"]
    assert probe["enabled"] is True and probe["error"] == ""
    assert sorted((p["from"], p["to"]) for p in probe["pairs"]) == [
        ("gpu1", "gpu2"), ("gpu1", "gpu3"), ("gpu2", "gpu1"), ("gpu2", "gpu3"), ("gpu3", "gpu1"), ("gpu3", "gpu2")]
    to_leader = [p for p in probe["pairs"] if p["to"] == "gpu1"]
    for pair in to_leader:
        assert pair["address"] == network + "11"
        # the leader's ports, the members', and one port of the kernel's ephemeral range, all answered
        assert [p["port"] for p in pair["ports"]][:5] == list(LEADER_PORTS)
        assert len(pair["ports"]) == 6 and pair["ports"][5]["port"] >= 1024
        assert all(p["open"] for p in pair["ports"])
    assert all(len(p["ports"]) == 4 for p in probe["pairs"] if p["to"] != "gpu1")
    assert "reachability probed: 6 of 6 ordered pairs reach each other" in output
    _nothing_left(network)


def test_a_closed_port_refuses_the_group_naming_both_members_and_the_port(tmp_path, network):
    """gpu3's 52365 is held by a socket that does not listen (closed: refused); the leader's 6379 by one that
    listens, as Ray already running there on a re-run (in use, connected to all the same: it answers)."""
    blocker = _held(network + "13", 52365, listen=False)
    ray = _held(network + "11", 6379, listen=True)
    try:
        output, left = H.run_group_play(tmp_path, probe=True, network=network)
        ray.settimeout(1)
        # The probe's connections reached the listener that was there (its backlog holds them).
        assert ray.accept()[1][0].startswith("127.")
    finally:
        blocker.close()
        ray.close()
    plan = left["gpu2"]["verdict"]
    assert plan["allowed"] is False
    assert [(r["code"], r["member"]) for r in plan["reasons"]] == [("GROUP_MEMBERS_UNREACHABLE", "gpu1"),
                                                                   ("GROUP_MEMBERS_UNREACHABLE", "gpu2")]
    assert "gpu1 does not reach gpu3 (closed: 52365)" in plan["reasons"][0]["message"]
    assert "gpu2 does not reach gpu3 (closed: 52365)" in plan["reasons"][1]["message"]
    assert [p["reachable"] for p in plan["network"]["pairs"]] == [True, False, False]
    assert all("labfleet_group_refused" in left[name]["groups"] for name in H.MEMBERS)
    assert plan["choice"]["chosen"] == "gptq_repack"
    flat = " ".join(output.split())   # the debug output wraps long lines
    assert "gpu1 -> gpu3 (%s13) closed 52365" % network in flat
    gcs = [p for pair in plan["network_probe"]["pairs"] if pair["to"] == "gpu1" for p in pair["ports"]
           if p["port"] == 6379]
    assert [(p["state"], p["open"]) for p in gcs] == [("in_use", True), ("in_use", True)]
    to_gpu3 = [p for p in plan["network_probe"]["pairs"] if p["to"] == "gpu3"]
    assert [(p["from"], p["reachable"], p["closed_ports"]) for p in to_gpu3] == [
        ("gpu1", False, [52365]), ("gpu2", False, [52365])]
    assert "refused" in to_gpu3[0]["note"]


def test_check_mode_probes_the_same(tmp_path, network):
    output, left = H.run_group_play(tmp_path, probe=True, network=network, check=True)
    plan = left["gpu3"]["verdict"]
    assert plan["allowed"] is True and plan["warnings"] == []
    assert len(plan["network_probe"]["pairs"]) == 6
    assert "reachability probed: 6 of 6" in output
    _nothing_left(network)
