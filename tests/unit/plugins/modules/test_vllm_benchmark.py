# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vllm_benchmark: its figures against the OpenAI stand-in with injected delays, the module end to
end, and its argument checks (hostile input fails with the option named).

The figures are checked on clocks the tests drive, where they must be exactly the injected delays
whatever the machine's load: VirtualStandin answers every request with the stand-in's own stream, each
event read at the time the stand-in's schedule sends it (one request, concurrency levels, the module);
LockstepStandin sends that stream over a real socket one event at a time, each only once the client
has timed the one before (so an answer read ahead or buffered fails). Against the real stand-in, in
real time, they must be what its schedule allows, which a loaded machine cannot break: never faster.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from http.client import HTTPConnection
from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.common.warnings import get_warning_messages
from ansible.module_utils.testing import patch_module_args

from ansible_collections.labfleet.vllm.plugins.module_utils.clients import _openai as O
from ansible_collections.labfleet.vllm.plugins.doc_fragments import attributes
from ansible_collections.labfleet.vllm.plugins.modules import vllm_benchmark

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
STANDIN = os.path.join(ROOT, "tests", "images", "openai-standin", "standin.py")
KEY = "sk-bench-canary-91d2"
# Injected: first token 150 ms after the request, then one every 20 ms; 16 tokens per request.
TTFT_MS = 150.0
ITL_MS = 20.0
TOKENS = 16
INJECTED_TTFT = TTFT_MS / 1000.0
INJECTED_ITL = ITL_MS / 1000.0
# In real time the stand-in's schedule (token i sent at TTFT + i x ITL after it read the request) sets
# lower bounds only: no TTFT below the injected one (less 1 ms of clock granularity), no request of n
# tokens ending sooner than TTFT + (n - 1) ITL after it was sent, no run's aggregate above what that
# allows. How late tokens arrive is up to the machine: on a shared, loaded one the stand-in or the
# client waits for a CPU for a third of a second now and then, and a whole stream arrives in one burst.
# The exact figures, and that each event is timed as it arrives, are checked on clocks the tests drive.
LATENCY_S = INJECTED_TTFT + (TOKENS - 1) * INJECTED_ITL
SOONEST = 0.001
# Exact up to float rounding (the driven clocks add the injected delays).
EXACT = 1e-9


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Standin:
    """The stand-in server (tests/images/openai-standin/standin.py) as a local subprocess, as
    tests/unit/test_standin.py starts it."""

    def __init__(self, tmp_path, env):
        model = tmp_path / "model"
        model.mkdir(exist_ok=True)
        (model / "config.json").write_text(json.dumps({"model_type": "llama", "max_position_embeddings": 4096}))
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        full_env = dict((k, v) for k, v in os.environ.items() if not k.startswith("STANDIN_") and k != "VLLM_API_KEY")
        full_env.update(env)
        self.log = tmp_path / "standin.log"
        with open(str(self.log), "w") as handle:
            self.process = subprocess.Popen([sys.executable, STANDIN, "--model", str(model), "--served-model-name",
                                             "quasar", "--host", "127.0.0.1", "--port", str(self.port),
                                             "--api-key", KEY], env=full_env, stdout=handle,
                                            stderr=subprocess.STDOUT)
        ends = time.monotonic() + 10
        while time.monotonic() < ends:
            if self.process.poll() is not None:
                raise AssertionError("the stand-in exited: %s" % self.log.read_text())
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("the stand-in did not listen within 10 s")

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


@pytest.fixture(scope="module")
def slow_standin(tmp_path_factory):
    delays = {"STANDIN_TTFT_MS": "%g" % TTFT_MS, "STANDIN_ITL_MS": "%g" % ITL_MS}
    server = Standin(tmp_path_factory.mktemp("bench"), delays)
    yield server
    server.stop()


def body(max_tokens=TOKENS):
    return json.dumps(O.chat_body("quasar", "Write a story.", max_tokens, 0, stream=True)).encode()


# ------------------------------------------------------------------ the stand-in's stream on a virtual clock


class VirtualClock:
    """Virtual seconds from 0. Each thread has a time of its own (requests sent at once each see only
    their own stream's time pass, and the runs' threads all start at 0), or, ``shared``, all threads
    one (one request at a time: the module's total_timeout sees the runs' time pass)."""

    def __init__(self, shared=False):
        self.shared = shared
        self._now = 0.0
        self._local = threading.local()

    def __call__(self):
        return self._now if self.shared else getattr(self._local, "now", 0.0)

    def set(self, when):
        if self.shared:
            self._now = when
        else:
            self._local.now = when


RECORDED = {}


def recorded_events(standin, max_tokens):
    """The stand-in's stream for ``max_tokens`` tokens (recorded once), one SSE event (with its blank
    line) a piece: the role chunk, a chunk per token, the usage chunk, [DONE]."""
    if max_tokens not in RECORDED:
        connection = HTTPConnection("127.0.0.1", standin.port, timeout=10)
        connection.request("POST", "/v1/chat/completions", body(max_tokens), O.auth_headers(KEY))
        stream = connection.getresponse().read()
        connection.close()
        RECORDED[max_tokens] = [event + b"\n\n" for event in stream.split(b"\n\n") if event]
    return RECORDED[max_tokens]


def schedule(events, opened):
    """``[(time, event)]``: when the stand-in sends each event of a request sent at ``opened``: the
    role chunk at once, token i at TTFT + i x ITL, the usage chunk and [DONE] with the last token."""
    timed = [(opened, events[0])]
    timed += [(opened + INJECTED_TTFT + i * INJECTED_ITL, event) for i, event in enumerate(events[1:-2])]
    return timed + [(timed[-1][0], event) for event in events[-2:]]


class Replay:
    """The answer to one request in virtual time: the stand-in's recorded events, each read at the
    time the stand-in's schedule sends it. When the deadline comes first, the read ends there as a
    real one does: the watchdog's timer fires and the read finds the socket shut, or
    (``socket_timeout``) the socket's own timeout ends the read before the timer has run."""

    status = 200
    length = None

    def __init__(self, events, clock, watchdog, timer, socket_timeout=False):
        self.pieces = schedule(events, clock())
        self.clock = clock
        self.watchdog = watchdog
        self.timer = timer
        self.socket_timeout = socket_timeout

    def getheader(self, name, default=None):
        return "text/event-stream; charset=utf-8" if name.lower() == "content-type" else default

    def read1(self, _size):
        if not self.pieces:
            return b""
        when, data = self.pieces[0]
        if when > self.watchdog.ends:
            self.clock.set(self.watchdog.ends)
            if self.socket_timeout:
                raise socket.timeout("timed out")
            self.timer.fire()
            return b""
        del self.pieces[0]
        self.clock.set(when)
        return data


class VirtualStandin:
    """vllm_benchmark's requests answered in virtual time (its _open replaced): each with the real
    stand-in's stream for the request's max_tokens, recorded once. ``armed``: the timeout each request
    got; the module measures on ``clock`` (vllm_benchmark.CLOCK); ``timers``: the manual_timers
    fixture, for the watchdogs."""

    def __init__(self, standin, monkeypatch, timers, shared=False, socket_timeout=False):
        self.standin = standin
        self.timers = timers
        self.clock = VirtualClock(shared)
        self.socket_timeout = socket_timeout
        self.armed = []
        monkeypatch.setattr(vllm_benchmark, "open_request", self.open)
        monkeypatch.setattr(vllm_benchmark, "CLOCK", self.clock)

    def open(self, method, url, data=None, headers=None, timeout=10.0):
        assert (method, url.split("/", 3)[3], headers["Authorization"]) == ("POST", "v1/chat/completions",
                                                                            "Bearer " + KEY)
        self.armed.append(timeout)
        watchdog = O._Watchdog(timeout, self.clock, self.timers)
        watchdog.start()
        events = recorded_events(self.standin, json.loads(data)["max_tokens"])
        replay = Replay(events, self.clock, watchdog, watchdog._timer, self.socket_timeout)
        return mock.Mock(), replay, watchdog


class LockstepStandin:
    """The stand-in's recorded stream over a real socket (http.client, _openai's reader and watchdog
    as they are), one event at a time, on ``clock``: an event is sent only after the client has read
    the one before and stamped it with a call of the clock (stream_request calls it once as it
    starts, once per event as the event arrives, once at the end), and the clock then reads the time
    the stand-in's schedule sends the event. A client that read ahead before stamping (a buffered
    answer) leaves the server waiting: ``early`` counts the events it had to send without the stamp
    of the one before, after WAIT_S."""

    WAIT_S = 2.0

    def __init__(self, events):
        self.events = schedule(events, 0.0)
        self.now = 0.0
        self.calls = 0
        self.early = 0
        self.changed = threading.Condition()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.url = "http://127.0.0.1:%d/v1/chat/completions" % self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def clock(self):
        with self.changed:
            self.calls += 1
            self.changed.notify_all()
            return self.now

    def serve(self):
        sock, _address = self.listener.accept()
        with sock:
            data = b""
            while b"\r\n\r\n" not in data:
                data += sock.recv(65536)
            sock.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            for index, (when, event) in enumerate(self.events):
                with self.changed:
                    if not self.changed.wait_for(lambda: self.calls > index, self.WAIT_S):
                        self.early += 1
                    self.now = when
                sock.sendall(b"%x\r\n%s\r\n" % (len(event), event))
            try:  # the client stops reading at [DONE] and may reset the connection
                sock.sendall(b"0\r\n\r\n")
                sock.recv(1)
            except OSError:
                pass

    def close(self):
        self.thread.join(10)
        self.listener.close()


def test_each_event_is_timed_as_it_arrives_over_a_real_socket(slow_standin):
    server = LockstepStandin(recorded_events(slow_standin, TOKENS))
    outcome = vllm_benchmark.stream_request(server.url, body(), O.auth_headers(KEY), 10, server.clock)
    server.close()
    assert server.early == 0 and server.calls == 1 + len(server.events) + 1
    assert outcome["error"] is None and outcome["finish_reason"] == "length"
    figures = outcome["figures"]
    assert figures["tokens"] == figures["token_events"] == TOKENS
    assert figures["ttft_s"] == INJECTED_TTFT
    assert figures["itl_s"] == pytest.approx([INJECTED_ITL] * (TOKENS - 1), abs=EXACT)
    assert figures["latency_s"] == pytest.approx(LATENCY_S, abs=EXACT)


def test_the_recorded_stream_is_the_stand_ins_schedule(slow_standin):
    """Role chunk, 16 token chunks (2 with their text held back), the usage chunk, [DONE]."""
    events = recorded_events(slow_standin, TOKENS)
    assert len(events) == 1 + TOKENS + 2 and events[-1] == b"data: [DONE]\n\n"
    chunks = [json.loads(event[len(b"data: "):]) for event in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert [len(c["choices"]) for c in chunks[1:]] == [1] * TOKENS + [0] and chunks[-1]["usage"]
    assert sum(1 for c in chunks[1:-1] if c["choices"][0]["delta"]["content"] == "") == 2


@pytest.mark.parametrize("concurrency", [1, 4])
def test_figures_are_the_injected_delays_on_a_virtual_clock(slow_standin, monkeypatch, manual_timers, concurrency):
    virtual = VirtualStandin(slow_standin, monkeypatch, manual_timers)
    outcome = vllm_benchmark.run_level(slow_standin.url + "/v1/chat/completions", body(), O.auth_headers(KEY),
                                       concurrency, 2, O.Deadline(60, virtual.clock), 10, virtual.clock)
    assert outcome["errors"] == [] and outcome["stopped"] is False and outcome["timed_out"] is False
    assert virtual.armed == [10] * 2 * concurrency
    level = outcome["level"]
    assert (level["concurrency"], level["runs"], level["requests"], level["failed"]) == (concurrency, 2,
                                                                                         2 * concurrency, 0)
    assert level["output_tokens"] == 2 * concurrency * TOKENS
    latency = LATENCY_S
    assert level["wall_s"] == pytest.approx(2 * latency, abs=EXACT)
    ttft, itl, rate, aggregate = level["ttft_s"], level["itl_s"], level["request_tok_s"], level["aggregate_tok_s"]
    for stats, value, count in ((ttft, INJECTED_TTFT, 2 * concurrency),
                                (itl, INJECTED_ITL, 2 * concurrency * (TOKENS - 1)),
                                (rate, 1.0 / INJECTED_ITL, 2 * concurrency),
                                (aggregate, concurrency * TOKENS / latency, 2)):
        assert stats["count"] == count, stats
        for stat in ("p50", "p90", "mean", "min", "max"):
            assert stats[stat] == pytest.approx(value, abs=EXACT), (stat, stats)
    # Aggregate: each run is `concurrency` requests side by side, each TTFT + 15 ITL long, so
    # concurrency x 16 tokens / 0.45 s (142 tok/s at 4); i.e. concurrency x the per-request rate x
    # the share of a request's time spent decoding, with 16 tokens in place of 15.
    assert aggregate["level"] == pytest.approx(concurrency * TOKENS / latency, abs=EXACT)
    assert aggregate["level"] == pytest.approx(concurrency * rate["p50"] * (TOKENS / (TOKENS - 1.0))
                                               * ((TOKENS - 1) * INJECTED_ITL / latency), abs=EXACT)
    assert level["burst_requests"] == 0


def test_single_request_figures_on_a_virtual_clock(slow_standin, monkeypatch, manual_timers):
    virtual = VirtualStandin(slow_standin, monkeypatch, manual_timers)
    outcome = vllm_benchmark.stream_request(slow_standin.url + "/v1/chat/completions", body(), O.auth_headers(KEY),
                                            10, virtual.clock)
    assert outcome["error"] is None and outcome["status"] == 200 and outcome["finish_reason"] == "length"
    figures = outcome["figures"]
    # The stand-in's stream holds 2 held-back tokens among its 16: still 16 token events.
    assert figures["tokens"] == figures["token_events"] == TOKENS
    assert figures["ttft_s"] == pytest.approx(INJECTED_TTFT, abs=EXACT)
    assert figures["itl_s"] == pytest.approx([INJECTED_ITL] * (TOKENS - 1), abs=EXACT)
    assert figures["itl_mean_s"] == pytest.approx(INJECTED_ITL, abs=EXACT)
    assert figures["decode_s"] == pytest.approx((TOKENS - 1) * INJECTED_ITL, abs=EXACT)
    assert figures["latency_s"] == pytest.approx(figures["ttft_s"] + figures["decode_s"], abs=EXACT)
    assert figures["request_tok_s"] == pytest.approx(1.0 / INJECTED_ITL, abs=EXACT)


@pytest.mark.parametrize("socket_timeout", [False, True], ids=["the watchdog fires", "the socket times out"])
def test_a_request_timeout_on_a_virtual_clock_ends_at_its_deadline(slow_standin, monkeypatch, manual_timers,
                                                                   socket_timeout):
    # 0.26 s: the role chunk and the tokens due at 0.15, 0.17, ... 0.25 s; the one due at 0.27 s is late.
    virtual = VirtualStandin(slow_standin, monkeypatch, manual_timers, socket_timeout=socket_timeout)
    url = slow_standin.url + "/v1/chat/completions"
    cut = vllm_benchmark.stream_request(url, body(), O.auth_headers(KEY), 0.26, virtual.clock)
    assert virtual.armed == [0.26] and cut["ended"] - cut["started"] == pytest.approx(0.26, abs=EXACT)
    assert cut["timed_out"] is True and cut["status"] == 200
    assert cut["error"] == "no complete answer from %s within 0.26 s (7 token event(s) so far)" % url
    assert cut["figures"]["ttft_s"] == pytest.approx(INJECTED_TTFT, abs=EXACT)


# ------------------------------------------------------------------ the real stand-in, in real time


@pytest.mark.parametrize("concurrency", [1, 4])
def test_measures_the_injected_ttft_and_inter_token_time(slow_standin, armed, concurrency):
    deadline = O.Deadline(60)
    outcome = vllm_benchmark.run_level(slow_standin.url + "/v1/chat/completions", body(), O.auth_headers(KEY),
                                       concurrency, 2, deadline, request_timeout=10)
    assert outcome["errors"] == [] and outcome["stopped"] is False and outcome["timed_out"] is False
    assert armed == [10] * 2 * concurrency
    level = outcome["level"]
    counts = (level["concurrency"], level["runs"], level["requests"], level["failed"])
    assert counts == (concurrency, 2, 2 * concurrency, 0)
    assert level["output_tokens"] == 2 * concurrency * TOKENS
    ttft, itl, rate, aggregate = level["ttft_s"], level["itl_s"], level["request_tok_s"], level["aggregate_tok_s"]
    assert ttft["count"] == 2 * concurrency and itl["count"] == 2 * concurrency * (TOKENS - 1)
    assert INJECTED_TTFT - SOONEST <= ttft["min"] <= ttft["p50"] <= ttft["p90"] <= ttft["max"], ttft
    assert 0 <= itl["min"] <= itl["p50"] <= itl["p90"] <= itl["max"], itl
    # Per request: a stream that arrived in one burst has no decode time, hence no rate.
    assert rate["count"] <= 2 * concurrency and (rate["count"] == 0 or rate["min"] > 0), rate
    # Aggregate: no run is shorter than one request's TTFT + 15 ITL, so at most concurrency x 16
    # tokens / 0.45 s.
    most = concurrency * TOKENS / LATENCY_S
    assert level["wall_s"] >= 2 * LATENCY_S - EXACT
    assert 0 < aggregate["min"] <= aggregate["p50"] <= aggregate["p90"] <= aggregate["max"] <= most + EXACT, aggregate
    assert 0 < aggregate["level"] <= most + EXACT, aggregate


def test_single_request_figures_match_the_stand_in(slow_standin):
    outcome = vllm_benchmark.stream_request(slow_standin.url + "/v1/chat/completions", body(), O.auth_headers(KEY),
                                            timeout=10)
    assert outcome["error"] is None and outcome["status"] == 200 and outcome["finish_reason"] == "length"
    figures = outcome["figures"]
    # The stand-in's stream holds 2 held-back tokens among its 16: still 16 token events.
    assert figures["tokens"] == figures["token_events"] == TOKENS
    assert figures["ttft_s"] >= INJECTED_TTFT - SOONEST
    assert figures["latency_s"] >= max(figures["ttft_s"] + figures["decode_s"], LATENCY_S - EXACT)


def test_a_wrong_key_and_nothing_listening_are_errors(slow_standin):
    wrong = vllm_benchmark.stream_request(slow_standin.url + "/v1/chat/completions", body(),
                                          O.auth_headers("wrong"), timeout=5)
    assert wrong["status"] == 401 and wrong["error"] == "HTTP 401: Unauthorized"
    gone = vllm_benchmark.stream_request("http://127.0.0.1:9/v1/chat/completions", body(), {}, timeout=5)
    assert gone["status"] is None and gone["error"].startswith("cannot reach http://127.0.0.1:9")


def test_a_request_timeout_is_reported(slow_standin, armed):
    # The stream takes 0.45 s: a request bounded by 0.25 s ends at its deadline, before the stream's end.
    cut = vllm_benchmark.stream_request(slow_standin.url + "/v1/chat/completions", body(), O.auth_headers(KEY),
                                        timeout=0.25)
    assert armed == [0.25] and cut["ended"] - cut["started"] >= 0.25
    assert cut["timed_out"] is True
    assert cut["error"].startswith("no complete answer from %s/v1/chat/completions within 0.25 s" % slow_standin.url)


# ------------------------------------------------------------------ the module


class _Exit(Exception):
    def __init__(self, kind, result):
        Exception.__init__(self, kind)
        self.kind = kind
        self.result = result


def _exit_json(self, **kwargs):
    kwargs["warnings"] = list(get_warning_messages())
    raise _Exit("exit", kwargs)


def _fail_json(self, msg, **kwargs):
    kwargs["msg"] = msg
    raise _Exit("fail", kwargs)


def run_module(args):
    with patch_module_args(args), \
            mock.patch.object(basic.AnsibleModule, "exit_json", _exit_json), \
            mock.patch.object(basic.AnsibleModule, "fail_json", _fail_json):
        try:
            vllm_benchmark.main()
        except _Exit as done:
            return done.kind, done.result
    raise AssertionError("the module returned without exit_json or fail_json")


def base_args(server, **changes):
    args = {"url": server.url, "model": "quasar", "api_key": KEY, "concurrency": [1, 2], "runs": 1,
            "max_tokens": 4, "request_timeout": 10, "total_timeout": 60,
            "flags": ["--tensor-parallel-size", "2", "--max-num-seqs", "32"], "image_digest": "sha256:aaa"}
    args.update(changes)
    return args


def measure_save_and_compare(server, noise_pct):
    """The module three times in check mode: measure and save; against that baseline with other flags
    (refused); with the flag difference allowed (compared). Returns the three results."""
    kind, first = run_module(base_args(server, _ansible_check_mode=True, gpu_name="Tesla V100-PCIE-32GB",
                                       weight_bytes_per_gpu=17500000000))
    assert kind == "exit", first
    assert first["changed"] is False
    doc = first["benchmark"]
    assert doc["concurrency"] == [1, 2] and [lv["requests"] for lv in doc["levels"]] == [1, 2]
    assert doc["flags"] == {"tensor-parallel-size": "2", "max-num-seqs": "32"}
    assert doc["workload"]["max_tokens"] == 4 and doc["workload"]["ignore_eos"] is True
    roof = doc["roofline"]
    assert roof["gpu"] == "Tesla V100 PCIe 32GB" and roof["bound_tok_s"] == 51.429
    assert roof["share_pct"] == pytest.approx(roof["measured_tok_s"] / 51.429 * 100, abs=0.1)
    saved = json.loads(json.dumps(doc))
    kind, second = run_module(base_args(server, baseline=saved, flags=["--tensor-parallel-size", "2",
                                                                       "--max-num-seqs", "16"]))
    assert kind == "exit"
    assert second["comparison"]["compared"] is False and second["comparison"]["refused_by"] == ["flags"]
    assert any("A/B not compared" in w for w in second.get("warnings", []))
    kind, third = run_module(base_args(server, baseline=saved, allow_differences=["flags"],
                                       flags=["--tensor-parallel-size", "2", "--max-num-seqs", "16"],
                                       noise_pct=noise_pct))
    assert kind == "exit"
    comparison = third["comparison"]
    assert comparison["compared"] is True and "--max-num-seqs 32 -> 16" in comparison["message"]
    assert sum(comparison["counts"].values()) == 18 and comparison["counts"]["unknown"] == 0
    assert [line for line in third["summary"] if line.startswith("A/B: ")][0].startswith("A/B: compared 18 figures")
    return first, second, third


def test_module_measures_saves_and_compares_in_check_mode(slow_standin, capsys):
    first, second, third = measure_save_and_compare(slow_standin, noise_pct=50)
    assert first["benchmark"]["levels"][0]["ttft_s"]["p50"] >= INJECTED_TTFT - SOONEST
    assert re.match(r"concurrency 1 \(1 run\(s\), 1 request\(s\)\): TTFT p50 [0-9]+\.[0-9] ms p90 ",
                    first["summary"][0]), first["summary"][0]
    assert KEY not in json.dumps([first, second, third]) + capsys.readouterr().out


def test_module_measures_saves_and_compares_on_a_virtual_clock(slow_standin, monkeypatch, manual_timers, capsys):
    virtual = VirtualStandin(slow_standin, monkeypatch, manual_timers)
    first, second, third = measure_save_and_compare(slow_standin, noise_pct=0)
    # Each run: the warm-up and 1 + 2 requests, bounded by request_timeout.
    assert virtual.armed == [10] * 3 * 4
    assert first["summary"][0] == ("concurrency 1 (1 run(s), 1 request(s)): TTFT p50 150.0 ms p90 150.0 ms; ITL p50 "
                                   "20.0 ms p90 20.0 ms; per request p50 50.0 tok/s; aggregate 19.0 tok/s")
    assert first["benchmark"]["roofline"]["measured_tok_s"] == 50.0
    # Same server, same delays: every figure the same (and no line of figures that moved).
    assert third["comparison"]["counts"]["unchanged"] == 18
    assert third["summary"][-1].startswith("A/B: compared 18 figures: 0 better, 0 worse, 18 unchanged")
    assert KEY not in json.dumps([first, second, third]) + capsys.readouterr().out


# A run of 1 request of 4 tokens takes TTFT + 3 ITL = 0.21 s. With total_timeout 2 s and no run started
# with less than MIN_RUN_TIME (0.5 s) left, runs start at 0, 0.21, ... 1.47 s: 8 runs, never more.
RUN_S = INJECTED_TTFT + 3 * INJECTED_ITL
RUNS_IN_2_S = 8


def test_module_fails_with_the_figures_when_the_deadline_comes(slow_standin):
    kind, result = run_module(base_args(slow_standin, concurrency=[1], runs=20, total_timeout=2, warmup=False))
    assert kind == "fail"
    assert result["msg"].startswith("The benchmark used up total_timeout (2 s) before the runs at concurrency 1 "
                                    "ended; raise total_timeout")
    # In real time runs are only ever slower than the schedule: fewer, never more.
    assert 1 <= result["benchmark"]["levels"][0]["runs"] <= RUNS_IN_2_S


def test_module_deadline_on_a_virtual_clock(slow_standin, monkeypatch, manual_timers):
    virtual = VirtualStandin(slow_standin, monkeypatch, manual_timers, shared=True)
    kind, result = run_module(base_args(slow_standin, concurrency=[1], runs=20, total_timeout=2, warmup=False))
    assert kind == "fail"
    assert result["msg"].startswith("The benchmark used up total_timeout (2 s) before the runs at concurrency 1 "
                                    "ended; raise total_timeout")
    assert result["benchmark"]["levels"][0]["runs"] == RUNS_IN_2_S
    # Each request is bounded by what is left of total_timeout (less than request_timeout, 10 s).
    assert virtual.armed == pytest.approx([2 - k * RUN_S for k in range(RUNS_IN_2_S)], abs=EXACT)
    assert virtual.clock() == pytest.approx(RUNS_IN_2_S * RUN_S, abs=EXACT)


def test_module_fails_when_nothing_listens():
    server = type("S", (), {"url": "http://127.0.0.1:9"})()
    kind, result = run_module(base_args(server))
    assert kind == "fail" and result["msg"].startswith("The warm-up request to http://127.0.0.1:9/v1/chat/completions "
                                                       "failed: cannot reach")


def test_module_says_the_api_key_is_wrong(slow_standin):
    kind, result = run_module(base_args(slow_standin, api_key="wrong-key-77"))
    assert kind == "fail" and "failed (the API key is wrong or missing): HTTP 401" in result["msg"]
    assert "wrong-key-77" not in json.dumps(result)


def test_roofline_needs_the_weight_bytes_and_a_known_bandwidth(slow_standin):
    kind, result = run_module(base_args(slow_standin, concurrency=[1], gpu_name="Tesla V100-PCIE-32GB",
                                        warmup=False))
    assert kind == "exit" and result["benchmark"]["roofline"] is None
    assert any("set weight_bytes_per_gpu" in w for w in result.get("warnings", []))
    kind, result = run_module(base_args(slow_standin, concurrency=[1], gpu_name="Mystery GPU 9000",
                                        weight_bytes_per_gpu=1e9, warmup=False))
    assert any("set memory_bandwidth_gb_s from its datasheet" in w for w in result.get("warnings", []))
    kind, result = run_module(base_args(slow_standin, concurrency=[2], gpu_name="Mystery GPU 9000",
                                        memory_bandwidth_gb_s=1000, weight_bytes_per_gpu=1e9, warmup=False))
    roof = result["benchmark"]["roofline"]
    assert roof["bound_tok_s"] == 1000.0 and roof["confidence"] == "given" and roof["share_pct"] is None


# ------------------------------------------------------------------ argument checks


NOWHERE = {"url": "http://127.0.0.1:9", "model": "quasar"}


@pytest.mark.parametrize("changes, text", [
    ({"runs": float("nan")}, "runs must be an integer from 1 to 100, got nan"),
    ({"runs": 0}, "runs must be an integer from 1 to 100, got 0"),
    ({"runs": "inf"}, "runs must be an integer from 1 to 100, got 'inf'"),
    ({"max_tokens": -5}, "max_tokens must be an integer from 2 to 1000000, got -5"),
    ({"max_tokens": 1}, "max_tokens must be an integer from 2 to 1000000, got 1"),
    ({"max_tokens": 10 ** 400}, "max_tokens must be an integer from 2 to 1000000, got an integer of about 401 digits"),
    ({"max_tokens": True}, "max_tokens must be an integer from 2 to 1000000, got True"),
    ({"temperature": 3}, "temperature must be a number from 0 to 2, got 3"),
    ({"request_timeout": -1}, "request_timeout must be a number from 1 to 86400, got -1"),
    ({"total_timeout": 1e9}, "total_timeout must be a number from 1 to 604800, got 1000000000.0"),
    ({"noise_pct": float("inf")}, "noise_pct must be a number from 0 to 100, got inf"),
    ({"weight_bytes_per_gpu": float("nan")}, "weight_bytes_per_gpu must be a number from 1 to 1e+15, got nan"),
    ({"memory_bandwidth_gb_s": 0}, "memory_bandwidth_gb_s must be a number from 1 to 100000, got 0"),
    ({"concurrency": []}, "concurrency must be a list of 1 to 16 levels such as [1, 8, 32], got an empty list"),
    ({"concurrency": list(range(1, 18))}, "concurrency must be a list of 1 to 16 levels such as [1, 8, 32], got 17"),
    ({"concurrency": [1, 300]}, "concurrency[1] must be an integer from 1 to 256, got 300"),
    ({"concurrency": [1, -8]}, "concurrency[1] must be an integer from 1 to 256, got -8"),
    ({"concurrency": [2.5]}, "concurrency[0] must be an integer from 1 to 256 (a whole number), got 2.5"),
    ({"concurrency": [float("nan")]}, "concurrency[0] must be an integer from 1 to 256, got nan"),
    ({"concurrency": [8, 1, 8]}, "concurrency lists 8 twice; give each level once"),
    ({"url": "10.0.0.5:8000"}, "url must start with http:// or https://"),
    ({"model": ""}, "model must be the served model name"),
    ({"api_key": "abc\ndef"}, "api_key contains a control character"),
    ({"prompt": ""}, "prompt must be a text of 1 to 1000000 characters, got 0"),
    ({"image_digest": "sha256:a\nb"}, "image_digest must be an image digest"),
    ({"flags": 42}, "flags must be a list of command-line words or a dict of flag: value, got int"),
    ({"baseline": {"levels": []}}, "baseline.levels must be a list of 1 to 16 concurrency levels"),
    ({"baseline": {"levels": [{"concurrency": 1, "ttft_s": {"p50": float("nan")}}]}},
     "baseline.levels[0].ttft_s.p50 must be a finite number from 0 to 1e12 or null, got nan; pass the benchmark "
     "value a previous vllm_benchmark run returned, or {} for none"),
])
def test_hostile_arguments_fail_with_the_option_named(changes, text):
    args = dict(NOWHERE)
    args.update(changes)
    kind, result = run_module(args)
    assert kind == "fail"
    assert text in result["msg"]


def test_concurrency_as_strings_and_an_empty_baseline_are_fine(slow_standin):
    kind, result = run_module(base_args(slow_standin, concurrency="1,2", runs="1", baseline={}, warmup=False))
    assert kind == "exit" and result["benchmark"]["concurrency"] == [1, 2] and "comparison" not in result


def test_module_documents_itself_and_check_mode():
    assert "module: vllm_benchmark" in vllm_benchmark.DOCUMENTATION
    assert "Check mode runs the same requests." in vllm_benchmark.DOCUMENTATION
    # check mode: full, from the shared doc fragment of the modules that change nothing
    assert "- labfleet.vllm.attributes.read_only" in vllm_benchmark.DOCUMENTATION
    assert "check_mode:\n    support: full" in attributes.ModuleDocFragment.READ_ONLY
