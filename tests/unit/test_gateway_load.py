# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""scripts/gateway-load.py, the load generator of the upgrade-under-load and killed-host measurements
(issue 25): against the stand-in (whose streams, keep-alive and SIGTERM behaviour are checked against
vLLM 0.8.5's captures in test_standin.py) it counts whole streams as sent and not failed, a stream
cut by SIGTERM as cut, a refused connection as refused; its figures split at the mark (SIGUSR1); the
key never on its command line; only the lab's own addresses."""

from __future__ import absolute_import, division, print_function

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_standin import KEY, Standin  # noqa: E402  (the stand-in as a local process)

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(HERE)), "scripts", "gateway-load.py")
SPEC = importlib.util.spec_from_file_location("gateway_load", SCRIPT)
L = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(L)


def key_file(tmp_path):
    path = tmp_path / "api_key.yml"
    path.write_text("---\n# generated\nvllm_server_api_key: %s\n" % KEY)
    return str(path)


def load(tmp_path, url, *args):
    out = tmp_path / "load.json"
    argv = [sys.executable, SCRIPT, "--url", url, "--model", "quasar", "--key-file", key_file(tmp_path),
            "--out", str(out)] + list(args)
    return argv, out


def test_whole_streams_are_sent_and_none_failed_with_their_time_to_first_token(tmp_path):
    server = Standin(tmp_path, args=["--api-key", KEY], env={"STANDIN_TTFT_MS": "40"})
    try:
        argv, out = load(tmp_path, server.url, "--concurrency", "3", "--max-requests", "9", "--max-tokens", "8",
                         "--drain", "on")
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    figures = json.loads(out.read_text())
    assert figures["sent"] >= 9 and figures["failed"] == 0 and figures["cut"] == 0
    # No mark: every request is "during"; the stand-in's first token comes 40 ms after the request.
    assert 0.04 <= figures["ttft_p50_s"] < 1.0 and figures["ttft_p50_before_s"] is None
    assert "(drain on): %d sent, 0 failed" % figures["sent"] in done.stdout
    assert KEY not in " ".join(argv) and KEY not in done.stdout + done.stderr


def test_a_wrong_key_is_a_refused_request_not_a_success(tmp_path):
    server = Standin(tmp_path, args=["--api-key", "sk-another"])
    try:
        argv, out = load(tmp_path, server.url, "--concurrency", "1", "--max-requests", "2")
        subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    finally:
        server.stop()
    figures = json.loads(out.read_text())
    assert figures["failed"] == figures["sent"] == figures["refused"] >= 2 and figures["errors"] == ["HTTP 401"]


def test_sigterm_of_the_server_cuts_the_streams_in_flight_and_refuses_the_next(tmp_path):
    # Streams of 100 tokens, one every 30 ms: 3 s each, so the SIGTERM lands mid-stream (vLLM 0.8.5 does not drain).
    server = Standin(tmp_path, args=["--api-key", KEY], env={"STANDIN_ITL_MS": "30"})
    argv, out = load(tmp_path, server.url, "--concurrency", "2", "--max-tokens", "100", "--duration", "2.5",
                     "--drain", "off", "--grace", "5")
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)
        process.send_signal(signal.SIGUSR1)
        server.stop()
        stdout, stderr = process.communicate(timeout=60)
    finally:
        server.stop()
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    figures = json.loads(out.read_text())
    assert figures["cut"] == 2 and figures["refused"] >= 1 and figures["failed"] == figures["cut"] + figures["refused"]
    assert figures["drain"] is False and figures["sent_before"] == 2
    # The cut streams began before the mark (negative offsets), the refused ones after it.
    assert len([o for o in figures["failed_offsets_s"] if o < 0]) == 2
    assert "(drain off)" in stdout


def test_only_the_labs_own_addresses():
    with pytest.raises(SystemExit, match="not a loopback or private address"):
        L.check_url("http://8.8.8.8:8080")
    with pytest.raises(SystemExit, match="must be http://"):
        L.check_url("https://10.0.0.1:8080")
    L.check_url("http://127.0.0.1:8080")
    L.check_url("http://10.1.2.3:8080")


def test_figures_split_at_the_mark_with_nearest_rank_percentiles():
    rows = [{"start": 1.0, "ok": True, "kind": "refused", "ttft_s": 0.1},
            {"start": 2.0, "ok": True, "kind": "cut", "ttft_s": 0.2},
            {"start": 5.0, "ok": False, "kind": "cut", "ttft_s": 0.3, "error": "stream ended without [DONE]"},
            {"start": 6.0, "ok": True, "kind": "cut", "ttft_s": 0.5}]
    figures = L.summarise(rows, 4.0)
    assert (figures["sent"], figures["failed"], figures["cut"], figures["sent_before"]) == (4, 1, 1, 2)
    assert (figures["ttft_p50_before_s"], figures["ttft_p99_before_s"]) == (0.1, 0.2)
    assert (figures["ttft_p50_s"], figures["ttft_p99_s"]) == (0.3, 0.5)
    assert figures["failed_offsets_s"] == [1.0] and figures["errors"] == ["stream ended without [DONE]"]
    assert L.percentile([], 50) is None and L.percentile([3.0], 99) == 3.0
