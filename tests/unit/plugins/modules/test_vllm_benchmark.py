# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vllm_benchmark: its accuracy against the OpenAI stand-in with injected delays, the module end to
end, and its argument checks (hostile input fails with the option named)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import signal
import socket
import subprocess
import sys
import time
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
# Tolerances. The client's clock starts before connecting and the stand-in's after reading the
# request, so the measured TTFT is the injected one plus the request's trip (about 1 ms here);
# 10 ms leaves room for a busy CI machine. Token times follow a fixed schedule in the stand-in,
# so the mean and the median gap are within a few ms even when single gaps jitter.
TTFT_TOL_S = 0.010
ITL_TOL_S = 0.005


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


# ------------------------------------------------------------------ accuracy


@pytest.mark.parametrize("concurrency", [1, 4])
def test_measures_the_injected_ttft_and_inter_token_time(slow_standin, concurrency):
    deadline = O.Deadline(60)
    outcome = vllm_benchmark.run_level(slow_standin.url + "/v1/chat/completions", body(), O.auth_headers(KEY),
                                       concurrency, 2, deadline, request_timeout=10)
    assert outcome["errors"] == [] and outcome["stopped"] is False and outcome["timed_out"] is False
    level = outcome["level"]
    counts = (level["concurrency"], level["runs"], level["requests"], level["failed"])
    assert counts == (concurrency, 2, 2 * concurrency, 0)
    assert level["output_tokens"] == 2 * concurrency * TOKENS
    ttft, itl, rate, aggregate = level["ttft_s"], level["itl_s"], level["request_tok_s"], level["aggregate_tok_s"]
    injected_ttft, injected_itl = TTFT_MS / 1000.0, ITL_MS / 1000.0
    # TTFT: never below the injected time (minus clock granularity); the median within 10 ms above
    # it; the tail (p90 of 2 or 8 requests) within 25 ms, a lone outlier on a busy machine within 100.
    assert injected_ttft - 0.001 <= ttft["min"] and ttft["p50"] <= injected_ttft + TTFT_TOL_S, ttft
    assert ttft["min"] <= ttft["p50"] <= ttft["p90"] <= ttft["max"], ttft
    assert ttft["p90"] <= injected_ttft + 2.5 * TTFT_TOL_S and ttft["max"] <= injected_ttft + 0.1, ttft
    # ITL: every gap of every request (15 per request).
    assert itl["count"] == 2 * concurrency * (TOKENS - 1)
    assert abs(itl["mean"] - injected_itl) <= ITL_TOL_S, itl
    assert abs(itl["p50"] - injected_itl) <= ITL_TOL_S, itl
    assert itl["min"] <= itl["p50"] <= itl["p90"] <= itl["max"]
    # Per request: 15 tokens after the first in 15 x 20 ms = 50 tok/s.
    assert rate["count"] == 2 * concurrency
    assert rate["p50"] == pytest.approx(1.0 / injected_itl, rel=0.1), rate
    # Aggregate: each run is `concurrency` requests side by side, each TTFT + 15 ITL long, so
    # concurrency x 16 tokens / 0.45 s (142 tok/s at 4); i.e. concurrency x the per-request rate x
    # the share of a request's time spent decoding, with 16 tokens in place of 15.
    latency = injected_ttft + (TOKENS - 1) * injected_itl
    expected = concurrency * TOKENS / latency
    assert aggregate["level"] == pytest.approx(expected, rel=0.1), aggregate
    assert aggregate["level"] == pytest.approx(concurrency * rate["p50"] * (TOKENS / (TOKENS - 1.0))
                                               * ((TOKENS - 1) * injected_itl / latency), rel=0.1)
    assert aggregate["min"] <= aggregate["p50"] <= aggregate["p90"] <= aggregate["max"]


def test_single_request_figures_match_the_stand_in(slow_standin):
    outcome = vllm_benchmark.stream_request(slow_standin.url + "/v1/chat/completions", body(), O.auth_headers(KEY),
                                            timeout=10)
    assert outcome["error"] is None and outcome["status"] == 200 and outcome["finish_reason"] == "length"
    figures = outcome["figures"]
    # The stand-in's stream holds 2 held-back tokens among its 16: still 16 token events.
    assert figures["tokens"] == figures["token_events"] == TOKENS
    assert abs(figures["ttft_s"] - TTFT_MS / 1000.0) <= TTFT_TOL_S
    assert abs(figures["itl_mean_s"] - ITL_MS / 1000.0) <= ITL_TOL_S
    assert figures["latency_s"] >= figures["ttft_s"] + figures["decode_s"]


def test_a_wrong_key_and_nothing_listening_are_errors(slow_standin):
    wrong = vllm_benchmark.stream_request(slow_standin.url + "/v1/chat/completions", body(),
                                          O.auth_headers("wrong"), timeout=5)
    assert wrong["status"] == 401 and wrong["error"] == "HTTP 401: Unauthorized"
    gone = vllm_benchmark.stream_request("http://127.0.0.1:9/v1/chat/completions", body(), {}, timeout=5)
    assert gone["status"] is None and gone["error"].startswith("cannot reach http://127.0.0.1:9")


def test_a_request_timeout_is_reported(slow_standin):
    cut = vllm_benchmark.stream_request(slow_standin.url + "/v1/chat/completions", body(), O.auth_headers(KEY),
                                        timeout=0.25)
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


def test_module_measures_saves_and_compares_in_check_mode(slow_standin, capsys):
    kind, first = run_module(base_args(slow_standin, _ansible_check_mode=True, gpu_name="Tesla V100-PCIE-32GB",
                                       weight_bytes_per_gpu=17500000000))
    assert kind == "exit", first
    assert first["changed"] is False
    doc = first["benchmark"]
    assert doc["concurrency"] == [1, 2] and [lv["requests"] for lv in doc["levels"]] == [1, 2]
    assert doc["flags"] == {"tensor-parallel-size": "2", "max-num-seqs": "32"}
    assert doc["workload"]["max_tokens"] == 4 and doc["workload"]["ignore_eos"] is True
    assert abs(doc["levels"][0]["ttft_s"]["p50"] - TTFT_MS / 1000.0) <= TTFT_TOL_S
    roof = doc["roofline"]
    assert roof["gpu"] == "Tesla V100 PCIe 32GB" and roof["bound_tok_s"] == 51.429
    assert roof["share_pct"] == pytest.approx(roof["measured_tok_s"] / 51.429 * 100, abs=0.1)
    assert first["summary"][0].startswith("concurrency 1 (1 run(s), 1 request(s)): TTFT p50 1")
    saved = json.loads(json.dumps(doc))
    kind, second = run_module(base_args(slow_standin, baseline=saved, flags=["--tensor-parallel-size", "2",
                                                                             "--max-num-seqs", "16"]))
    assert kind == "exit"
    assert second["comparison"]["compared"] is False and second["comparison"]["refused_by"] == ["flags"]
    assert any("A/B not compared" in w for w in second.get("warnings", []))
    kind, third = run_module(base_args(slow_standin, baseline=saved, allow_differences=["flags"],
                                       flags=["--tensor-parallel-size", "2", "--max-num-seqs", "16"], noise_pct=50))
    assert kind == "exit"
    comparison = third["comparison"]
    assert comparison["compared"] is True and "--max-num-seqs 32 -> 16" in comparison["message"]
    # Same server, same delays: every figure within 50 %.
    assert comparison["counts"]["worse"] == 0 and comparison["counts"]["better"] == 0
    assert third["summary"][-1].startswith("A/B: compared 18 figures")
    assert KEY not in json.dumps([first, second, third]) + capsys.readouterr().out


def test_module_fails_with_the_figures_when_the_deadline_comes(slow_standin):
    # Each run takes about 0.21 s (4 tokens); 2 s are used up after about 7 of the 20 runs.
    kind, result = run_module(base_args(slow_standin, concurrency=[1], runs=20, total_timeout=2, warmup=False))
    assert kind == "fail"
    assert result["msg"].startswith("The benchmark used up total_timeout (2 s) before the runs at concurrency 1 "
                                    "ended; raise total_timeout")
    assert 1 <= result["benchmark"]["levels"][0]["runs"] < 20


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
