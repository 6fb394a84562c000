# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The group_port_probe module through Ansible's argument handling, on this machine's loopback: two
members listen, connect to each other and stop (the pairs come back as group_gate takes them), check
mode probes the same and reports no change, malformed input fails naming the field."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib.util
import os
import random

from ansible_collections.labfleet.vllm.plugins.modules import group_port_probe

_HERE = os.path.dirname(os.path.abspath(__file__))
_SPEC = importlib.util.spec_from_file_location("labfleet_test_hostile_modules_for_probe",
                                               os.path.join(_HERE, "test_hostile_modules.py"))
H = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(H)


def _run(**args):
    return H.run_module(group_port_probe, args)


def test_two_members_listen_connect_and_stop(tmp_path):
    net = "127.%d.%d." % (random.randint(2, 254), random.randint(1, 254))
    listeners = []
    try:
        for name, number, leader in (("gpu1", 11, True), ("gpu2", 12, False)):
            kind, result = _run(step="listen", name=name, token="t1", address=net + str(number), leader=leader,
                                seconds=60, runtime_dir=str(tmp_path))
            assert kind == "exit" and result["changed"] is False, result
            listeners.append(result["listener"])
        leader = listeners[0]
        assert [(p["port"], p["state"]) for p in leader["ports"]] == [
            (6379, "listening"), (10001, "listening"), (52365, "listening"),
            (10002, "listening"), (19999, "listening")]
        assert leader["bound_address"] == net + "11" and leader["ephemeral_port"] and leader["pid"]
        assert [p["port"] for p in listeners[1]["ports"]] == [52365, 10002, 19999]

        kind, result = _run(step="connect", name="gpu2", members=["gpu1", "gpu2"], listeners=listeners, timeout=2,
                            _ansible_check_mode=True)
        assert kind == "exit" and result["changed"] is False
        pair = result["pairs"][0]
        assert (pair["from"], pair["to"], pair["reachable"], pair["closed_ports"]) == ("gpu2", "gpu1", True, [])
        assert len(pair["ports"]) == 6
        kind, result = _run(step="connect", name="gpu1", members=["gpu1", "gpu2"], listeners=listeners)
        assert [(p["to"], p["reachable"]) for p in result["pairs"]] == [("gpu2", True)]
    finally:
        stops = [_run(step="stop", name=n, token="t1", runtime_dir=str(tmp_path)) for n in ("gpu1", "gpu2")]
    assert [(kind, result["stop"]["state"]) for kind, result in stops] == [("exit", "stopped"), ("exit", "stopped")]
    assert {a["port"] for a in stops[0][1]["stop"]["accepted"]} >= {6379, 52365}
    assert os.listdir(str(tmp_path)) == []


def test_check_mode_listens_the_same(tmp_path):
    kind, result = _run(step="listen", name="gpu1", token="t2", address="127.0.0.1", ports=[1], ephemeral=True,
                        seconds=30, runtime_dir=str(tmp_path), _ansible_check_mode=True)
    try:
        assert kind == "exit" and result["changed"] is False
        listener = result["listener"]
        # Port 1 is privileged: as root it listens, else the bind is refused and reported, not fatal.
        assert listener["ports"][0]["port"] == 1 and listener["ports"][0]["state"] in ("listening", "error")
        assert listener["ephemeral_port"] and listener["pid"]
    finally:
        kind, result = _run(step="stop", name="gpu1", token="t2", runtime_dir=str(tmp_path), _ansible_check_mode=True)
    assert kind == "exit" and result["stop"]["state"] == "stopped" and result["changed"] is False


def test_malformed_input_fails_naming_the_field(tmp_path):
    kind, result = _run(step="listen", name="gpu1", token="t3")
    assert kind == "fail" and "address" in result["msg"]
    kind, result = _run(step="listen", name="gpu1", token="../x", address="127.0.0.1", runtime_dir=str(tmp_path))
    assert kind == "fail" and "token" in result["msg"]
    kind, result = _run(step="listen", name="gpu1", token="t3", address="127.0.0.1", ports=[70000])
    assert kind == "fail" and "ports" in result["msg"] and "70000" in result["msg"]
    kind, result = _run(step="listen", name="gpu1", token="t3", address="no-such-host.invalid")
    assert kind == "fail" and "no-such-host.invalid" in result["msg"]
    kind, result = _run(step="listen", name="gpu1", token="t3", address="127.0.0.1", seconds=0)
    assert kind == "fail" and "seconds" in result["msg"]
    kind, result = _run(step="connect", name="gpu1", members=["gpu1"])
    assert kind == "fail" and "listeners" in result["msg"]
    kind, result = _run(step="connect", name="gpu1", members=["gpu1"], listeners=[], timeout=0)
    assert kind == "fail" and "timeout" in result["msg"]
    kind, result = _run(step="stop", name="gpu1")
    assert kind == "fail" and "token" in result["msg"]
    assert os.listdir(str(tmp_path)) == []


def test_stop_without_a_listener_says_so(tmp_path):
    kind, result = _run(step="stop", name="gpu9", token="never", runtime_dir=str(tmp_path))
    assert kind == "exit" and result["stop"] == {"state": "not_running", "pid": None, "accepted": []}
