# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""labfleet.vllm.haproxy_server and its runtime API client (plugins/module_utils/clients/_haproxy.py):
the drain of an instance in the gateway, bounded; back in rotation; kept out; read-only in check mode.

The runtime API here answers with the captures of Debian 12's HAProxy 2.6 in tests/unit/fixtures/haproxy/
(README.md there says how they were recorded): a UNIX socket server that serves those texts, moving from
one capture to the next when the module sends the command that moved the real HAProxy there."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import socket
import sys
import threading

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.clients import _haproxy as H
from ansible_collections.labfleet.vllm.plugins.modules import haproxy_server

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_hostile_modules import run_module  # noqa: E402  (exit_json / fail_json caught)

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
CAPTURES = os.path.join(TOP, "tests", "unit", "fixtures", "haproxy")
CANARY = "model_quasar/rollout-canary-vllm"


def capture(name):
    with open(os.path.join(CAPTURES, name)) as handle:
        return handle.read()


def with_scur(stat_text, server, scur):
    """A capture of ``show stat`` with ``server``'s sessions in flight set to ``scur`` (column scur)."""
    lines = stat_text.split("\n")
    head = lines[0][2:].split(",")
    out = [lines[0]]
    for line in lines[1:]:
        cells = line.split(",")
        if len(cells) > 2 and cells[1] == server:
            cells[head.index("scur")] = str(scur)
        out.append(",".join(cells))
    return "\n".join(out)


STATES = {
    "streaming": (capture("show_stat_streaming.csv"), capture("show_servers_state_up.txt")),
    "draining": (capture("show_stat_draining.csv"), capture("show_servers_state_draining.txt")),
    "drained": (with_scur(capture("show_stat_draining.csv"), "rollout-canary-vllm", 0),
                capture("show_servers_state_draining.txt")),
    "maint": (capture("show_stat_maint.csv"), capture("show_servers_state_maint.txt")),
    "up": (capture("show_stat_down.csv"), capture("show_servers_state_down.txt")),
}


class FakeRuntimeApi(object):
    """A runtime API socket answering from the captures; ``moves`` maps a command to the state it leads to,
    ``settle`` (state, reads) moves on by itself after that many ``show stat`` reads (streams that end)."""

    def __init__(self, path, state, moves=None, settle=None, answers=None):
        self.path, self.state = path, state
        self.moves, self.settle, self.answers = moves or {}, settle or {}, answers or {}
        self.commands, self.reads = [], 0
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        self.server.listen(8)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def answer(self, command):
        if command == "show stat":
            self.reads += 1
            nxt = self.settle.get(self.state)
            text = STATES[self.state][0]
            if nxt and self.reads >= nxt[1]:
                self.state, self.reads = nxt[0], 0
            return text
        if command == "show servers state":
            return STATES[self.state][1]
        self.commands.append(command)
        if command in self.answers:
            return self.answers[command]
        if command in self.moves:
            self.state, self.reads = self.moves[command], 0
        return "\n"

    def serve(self):
        while True:
            try:
                conn, _address = self.server.accept()
            except OSError:
                return
            with conn:
                data = b""
                while not data.endswith(b"\n"):
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                conn.sendall(self.answer(data.decode().strip()).encode())

    def close(self):
        self.server.close()


@pytest.fixture()
def api(tmp_path):
    made = []

    def start(state, **kwargs):
        made.append(FakeRuntimeApi(str(tmp_path / ("admin-%d.sock" % len(made))), state, **kwargs))
        return made[-1]
    yield start
    for fake in made:
        fake.close()


def module(api_fake, **args):
    base = {"socket": api_fake.path, "interval_s": 0.1, "timeout_s": 5}
    base.update(args)
    return run_module(haproxy_server, base)


# --- the parsers, on the captures themselves ---------------------------------------------------------

def test_show_stat_is_read_as_the_servers_with_their_requests_and_status():
    rows = H.parse_stat(capture("show_stat_draining.csv"))
    assert [(r["backend"], r["server"], r["status"], r["scur"], r["stot"], r["weight"]) for r in rows] == [
        ("model_quasar", "rollout-canary-vllm", "DRAIN", 2, 4, 100),
        ("model_quasar", "rollout-second-vllm", "UP", 2, 4, 100)]
    down = dict((r["server"], r) for r in H.parse_stat(capture("show_stat_down.csv")))
    assert down["rollout-second-vllm"]["status"] == "DOWN" and down["rollout-second-vllm"]["check_status"] == "L4CON"


@pytest.mark.parametrize("name,admin,up", [("draining", "drain", True), ("maint", "maint", False), ("down", "ready", True)])
def test_show_servers_state_gives_the_administrative_and_operational_state(name, admin, up):
    states = H.parse_servers_state(capture("show_servers_state_%s.txt" % name))
    canary = states[("model_quasar", "rollout-canary-vllm")]
    assert H.admin_state(canary["admin"]) == admin and (canary["op"] == H.OP_RUNNING) is up
    assert canary["weight"] == 100


def test_other_answers_are_refused_not_guessed():
    with pytest.raises(H.RuntimeApiError, match="did not answer its CSV table"):
        H.parse_stat("Unknown command. Please enter one of the following commands only :\n")
    with pytest.raises(H.RuntimeApiError, match="did not answer its table"):
        H.parse_servers_state("Permission denied\n")
    with pytest.raises(H.RuntimeApiError, match="not understood"):
        H.parse_servers_state("1\n# be_id be_name srv_id srv_name srv_op_state srv_admin_state srv_uweight\n3 b 1 s x y z\n")


@pytest.mark.parametrize("name", ["", "a b", "a\nshow stat", "a;b", "a/b", None])
def test_a_name_that_could_be_a_second_command_is_refused(name):
    with pytest.raises(ValueError, match="not a HAProxy name"):
        H.set_state_command("model_quasar", name, "drain")


def test_commands_and_weights():
    assert H.set_state_command("model_quasar", "gpu01-vllm", "drain") == "set server model_quasar/gpu01-vllm state drain"
    assert H.set_weight_command("b", "s", 11) == "set server b/s weight 11"
    for bad in (-1, 257, 1.5, True, "10"):
        with pytest.raises(ValueError):
            H.set_weight_command("b", "s", bad)
    with pytest.raises(ValueError):
        H.set_state_command("b", "s", "disabled")
    # A 10 % share beside one server of weight 100, and beside three.
    assert H.share_weight(10, [100]) == 11 and H.share_weight(25, [100, 100, 100]) == 100
    assert H.share_weight(50, []) == 256 and H.share_weight(1, [1]) == 1
    with pytest.raises(ValueError):
        H.share_weight(100, [100])


# --- the module against the captured answers ---------------------------------------------------------

def test_drain_waits_until_the_streams_in_flight_ended(api):
    fake = api("streaming", moves={"set server %s state drain" % CANARY: "draining"}, settle={"draining": ("drained", 3)})
    kind, result = module(fake, state="drain", host="rollout-canary", wait_s=20)
    assert kind == "exit", result
    assert fake.commands == ["set server %s state drain" % CANARY]
    assert (result["outcome"], result["changed"], result["admin_before"]) == ("drained", True, "ready")
    assert (result["in_flight_at_start"], result["in_flight_at_end"]) == (2, 0) and result["waited_s"] < 10
    assert result["backends"] == ["model_quasar"] and result["server"] == "rollout-canary-vllm"
    # rollout-second-vllm took the requests meanwhile.
    assert result["others_in_rotation"] == 1


def test_drain_stops_waiting_at_its_bound_and_says_what_was_still_in_flight(api):
    fake = api("streaming", moves={"set server %s state drain" % CANARY: "draining"})
    kind, result = module(fake, state="drain", host="rollout-canary", wait_s=1)
    assert kind == "exit", result
    assert result["outcome"] == "bound_reached" and result["in_flight_at_end"] == 2
    assert 1.0 <= result["waited_s"] < 5


def test_ready_puts_it_back_and_waits_for_the_health_checks(api):
    fake = api("maint", moves={"set server %s state ready" % CANARY: "up"})
    kind, result = module(fake, state="ready", host="rollout-canary", wait_s=10)
    assert kind == "exit", result
    assert (result["outcome"], result["admin_before"], result["changed"]) == ("up", "maint", True)


def test_ready_that_the_checks_never_see_up_is_said_not_hidden(api):
    fake = api("maint", moves={"set server %s state ready" % CANARY: "maint"})
    kind, result = module(fake, state="ready", host="rollout-canary", wait_s=1)
    assert kind == "exit" and result["outcome"] == "not_up_at_bound"


def test_maint_and_a_weight(api):
    fake = api("up", moves={"set server %s state maint" % CANARY: "maint"})
    kind, result = module(fake, state="maint", host="rollout-canary")
    assert kind == "exit" and result["outcome"] == "maint" and result["changed"] is True
    kind, result = module(fake, state="ready", host="rollout-canary", weight=11)
    assert kind == "exit", result
    assert fake.commands[-2:] == ["set server %s state ready" % CANARY, "set server %s weight 11" % CANARY]


def test_check_mode_reads_and_changes_nothing(api):
    fake = api("streaming")
    kind, result = module(fake, state="drain", host="rollout-canary", wait_s=30, _ansible_check_mode=True)
    assert kind == "exit" and result["outcome"] == "would_drain" and result["changed"] is True
    assert fake.commands == [] and result["in_flight_at_start"] == 2


def test_an_unknown_server_or_no_gateway_yet_is_nothing_to_do(api, tmp_path):
    fake = api("streaming")
    kind, result = module(fake, state="drain", host="gpu99", wait_s=30)
    assert kind == "exit" and result["outcome"] == "not_in_gateway" and result["changed"] is False
    assert fake.commands == []
    kind, result = run_module(haproxy_server, {"socket": str(tmp_path / "none.sock"), "state": "drain", "host": "gpu01"})
    assert kind == "exit" and result["outcome"] == "no_gateway" and result["changed"] is False


def test_query_returns_every_server(api):
    fake = api("up")
    kind, result = module(fake, state="query")
    assert kind == "exit" and result["outcome"] == "query"
    assert [(s["server"], s["admin"], s["up"], s["status"]) for s in result["servers"]] == [
        ("rollout-canary-vllm", "ready", True, "UP"), ("rollout-second-vllm", "ready", False, "DOWN")]
    # The stopped server, as the doctor explains it: HAProxy's own L4CON and address.
    diagnosis = result["servers"][1]["diagnosis"]
    assert diagnosis["in_rotation"] is False and diagnosis["cause"].startswith(
        "nothing accepts connections at 172.17.0.3:8000"), diagnosis
    assert result["servers"][0]["diagnosis"]["in_rotation"] is True


def test_a_command_haproxy_refuses_fails_the_task_with_its_words(api):
    fake = api("streaming", answers={"set server %s state drain" % CANARY: "No such server.\n\n"})
    kind, result = module(fake, state="drain", host="rollout-canary")
    assert kind == "fail" and "No such server." in result["msg"] and "systemctl status haproxy" in result["msg"]


@pytest.mark.parametrize("args,words", [
    ({"state": "drain"}, "needs the server"),
    ({"state": "drain", "host": "a", "wait_s": -1}, "wait_s must be 0 to 86400"),
    ({"state": "drain", "host": "a", "interval_s": 0}, "interval_s must be"),
    ({"state": "drain", "host": "a", "weight": 5}, "only with state ready"),
    ({"state": "ready", "host": "a", "weight": 300}, "weight is 0 to 256"),
    ({"state": "drain", "server": "a\nshutdown sessions server b/a"}, "not a HAProxy name"),
])
def test_misuse_fails_saying_what_to_fix(api, args, words):
    fake = api("streaming")
    kind, result = module(fake, **args)
    assert kind == "fail" and words in result["msg"], result
    assert fake.commands == []


def test_a_share_of_the_traffic_is_a_weight_computed_from_the_servers_in_rotation(api):
    # rollout-second-vllm is ready and up with weight 100: a 10 % share is weight 11 (11 / 111).
    fake = api("streaming")
    kind, result = module(fake, state="ready", host="rollout-canary", share_percent=10)
    assert kind == "exit", result
    assert result["weight"] == 11 and fake.commands == ["set server %s state ready" % CANARY,
                                                        "set server %s weight 11" % CANARY]
    kind, result = module(fake, state="ready", host="rollout-canary", share_percent=10, weight=5)
    assert kind == "fail" and "without weight" in result["msg"]
    # Beside a server that is down, the canary would take everything: the weight is the highest.
    kind, result = module(api("up"), state="ready", host="rollout-canary", share_percent=10)
    assert kind == "exit" and result["weight"] == 256


def test_draining_the_last_server_in_rotation_is_said(api):
    # rollout-second-vllm is down (L4CON): draining the canary leaves no server of the model in rotation.
    fake = api("up", moves={"set server %s state drain" % CANARY: "up"})
    kind, result = module(fake, state="drain", host="rollout-canary")
    assert kind == "exit" and result["others_in_rotation"] == 0, result
