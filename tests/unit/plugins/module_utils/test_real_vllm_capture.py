# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A stream captured from a real vLLM 0.32.0 (CPU build) during make check-real-vllm, replayed byte for
byte (HTTP/1.1 chunked framing included) over loopback to the smoke test's and the benchmark's clients.

tests/real_vllm/captures/chat_stream_merged.http: a streamed chat completion (max_tokens 300,
temperature 0, ignore_eos, include_usage) answered while the API server process was slowed down: vLLM's
per-request output collector merged every pending delta, so ALL 300 tokens came in ONE chunk (with
finish_reason "length"), between the role chunk and the usage chunk. The shared reference captures have
one token per chunk only. The clients must take the token count from usage (300, not 1 chunk) and the
benchmark must not make up a decode speed or inter-token times from a single token event.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import socket
import threading

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.clients._openai import chat_body, chat_completion
from ansible_collections.labfleet.vllm.plugins.modules import vllm_benchmark

CAPTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "real_vllm", "captures",
                       "chat_stream_merged.http")


@pytest.fixture()
def replay():
    """A one-connection loopback server that reads a request and answers with the captured bytes."""
    with open(CAPTURE, "rb") as handle:
        answer = handle.read()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(10)
    seen = {}

    def serve():
        conn, _addr = listener.accept()
        with conn:
            conn.settimeout(10)
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _sep, body = data.partition(b"\r\n\r\n")
            length = int([line.split(b":", 1)[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")][0])
            while len(body) < length:
                body += conn.recv(65536)
            seen["body"] = json.loads(body)
            conn.sendall(answer)

    thread = threading.Thread(target=serve)
    thread.daemon = True
    thread.start()
    yield "http://127.0.0.1:%d" % listener.getsockname()[1], seen
    thread.join(10)
    listener.close()


def test_capture_is_one_merged_chunk_as_recorded():
    with open(CAPTURE, "rb") as handle:
        raw = handle.read()
    assert raw.startswith(b"HTTP/1.1 200 OK\r\n") and b"transfer-encoding: chunked" in raw
    assert raw.count(b"data: ") == 4          # role chunk, the merged chunk, usage, [DONE]
    assert raw.count(b"\"finish_reason\":\"length\"") == 1
    assert b"\"completion_tokens\":300" in raw


def test_smoke_client_counts_the_tokens_of_a_merged_chunk(replay):
    url, seen = replay
    outcome = chat_completion(url + "/v1/chat/completions", chat_body("quasar", "hi", max_tokens=300), timeout=10)
    assert seen["body"]["stream"] is True and seen["body"]["stream_options"] == {"include_usage": True}
    assert outcome["error"] is None and outcome["status"] == 200 and outcome["done"] is True
    assert outcome["tokens"] == 300                 # usage.completion_tokens, not the one content chunk
    assert outcome["finish_reason"] == "length"     # carried by the merged chunk itself
    assert outcome["ttft_s"] is not None and outcome["text"].startswith("\t\t\t")


def test_benchmark_reads_a_merged_chunk_without_inventing_a_decode_speed(replay):
    url, _seen = replay
    body = json.dumps({"model": "quasar", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 300,
                       "stream": True, "stream_options": {"include_usage": True}}).encode("utf-8")
    outcome = vllm_benchmark.stream_request(url + "/v1/chat/completions", body, {}, 10)
    figures = outcome["figures"]
    assert outcome["error"] is None and outcome["status"] == 200 and outcome["finish_reason"] == "length"
    assert figures["tokens"] == 300 and figures["token_events"] == 1
    assert figures["ttft_s"] is not None and figures["ttft_s"] >= 0
    # one token event: no gap to measure, so no ITL and no per-request decode speed (rather than 300 / 0 s)
    assert figures["itl_s"] == [] and figures["request_tok_s"] is None and figures["itl_mean_s"] is None
