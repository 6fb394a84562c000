"""The OpenAI stand-in (tests/images/openai-standin/standin.py) behaves like real vLLM.

It runs as a subprocess on 127.0.0.1 (no Docker) and is checked on the raw HTTP with http.client
and plain sockets, against the answers recorded from a real vLLM server
(tests/unit/fixtures/vllm-http/), then the smoke client and the openai_smoke module run against it.
"""

import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
from http.client import HTTPConnection

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.labfleet.vllm.plugins.module_utils.clients import _openai as O
from ansible_collections.labfleet.vllm.plugins.module_utils.reporting import _doctor as doctor
from ansible_collections.labfleet.vllm.plugins.modules import openai_smoke

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STANDIN = os.path.join(ROOT, "tests", "images", "openai-standin", "standin.py")
FIXTURES = os.path.join(ROOT, "tests", "unit", "fixtures", "vllm-http")
KEY = "sk-standin-test-7f3a"
# Llama-2-7b's config.json (the parts the stand-in reads: none but max_position_embeddings).
LLAMA2_7B = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 11008,
             "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
             "max_position_embeddings": 4096, "model_type": "llama", "torch_dtype": "float16",
             "vocab_size": 32000}


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Standin:
    def __init__(self, tmp_path, env=None, args=(), config=None, wait=True):
        model = tmp_path / "model"
        model.mkdir(exist_ok=True)
        (model / "config.json").write_text(json.dumps(config or LLAMA2_7B))
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        full_env = dict(os.environ)
        for name in list(full_env):
            if name.startswith("STANDIN_") or name == "VLLM_API_KEY":
                del full_env[name]
        full_env.update(env or {})
        self.argv = [sys.executable, STANDIN, "--model", str(model), "--served-model-name", "quasar",
                     "--host", "127.0.0.1", "--port", str(self.port)] + list(args)
        self.log = tmp_path / ("standin-%d.log" % self.port)
        with open(str(self.log), "w") as handle:
            self.process = subprocess.Popen(self.argv, env=full_env, stdout=handle, stderr=subprocess.STDOUT)
        if wait:
            self.wait_listening()

    def wait_listening(self, seconds=10.0):
        ends = time.monotonic() + seconds
        while time.monotonic() < ends:
            if self.process.poll() is not None:
                raise AssertionError("the stand-in exited %s: %s" % (self.process.returncode, self.log.read_text()))
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("the stand-in did not listen within %s s" % seconds)

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)

    def connection(self):
        return HTTPConnection("127.0.0.1", self.port, timeout=10)


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    server = Standin(tmp_path_factory.mktemp("standin"), args=["--api-key", KEY])
    yield server
    server.stop()


@pytest.fixture(scope="module")
def nested(tmp_path_factory):
    server = Standin(tmp_path_factory.mktemp("nested"), env={"STANDIN_ERROR_FORMAT": "nested"})
    yield server
    server.stop()


@pytest.fixture()
def start(tmp_path):
    started = []

    def run(**kwargs):
        started.append(Standin(tmp_path, **kwargs))
        return started[-1]

    yield run
    for server in started:
        server.stop()


def auth(extra=None):
    headers = {"Authorization": "Bearer " + KEY, "Content-Type": "application/json"}
    headers.update(extra or {})
    return headers


def chat(max_tokens=16, stream=True, usage=True, model="quasar"):
    body = {"model": model, "messages": [{"role": "user", "content": "Reply with the single word ready."}],
            "max_tokens": max_tokens, "stream": stream}
    if stream and usage:
        body["stream_options"] = {"include_usage": True}
    return json.dumps(body)


def sse_chunks(text):
    """The JSON chunks of an SSE body, and whether it ended with data: [DONE]."""
    events = [block[len("data: "):] for block in text.split("\n\n") if block.startswith("data: ")]
    assert events[-1] == "[DONE]", events[-1]
    return [json.loads(event) for event in events[:-1]]


def recorded(name):
    """(status, headers (lower-case names), body text) of a recorded answer."""
    with open(os.path.join(FIXTURES, name), "rb") as handle:
        raw = handle.read()
    raw = raw[raw.index(b"HTTP/1.1"):]
    head, _sep, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict((k.lower(), v.strip()) for k, v in (line.split(":", 1) for line in lines[1:]))
    return int(lines[0].split()[1]), headers, body.decode("utf-8")


def recorded_polls(name):
    """What each poll of a recorded curl loop got: "refused" or the HTTP status (other lines skipped)."""
    polls = []
    with open(os.path.join(FIXTURES, name)) as handle:
        for line in handle:
            if "Failed to connect" in line:
                polls.append("refused")
            else:
                answer = re.match(r"^[\d:.]+ (?:HTTP/1\.1 )?(\d{3})\b", line)  # "19:47:04.443 200"
                if answer:
                    polls.append(int(answer.group(1)))
    return polls


def poll_health(server):
    """One GET /health on a new connection, as curl does: "refused", (status, body), or what went wrong."""
    conn = HTTPConnection("127.0.0.1", server.port, timeout=2)
    try:
        conn.request("GET", "/health")
        response = conn.getresponse()
        return response.status, response.read()
    except ConnectionRefusedError:
        return "refused"
    except socket.timeout:
        return "hang"
    except OSError as exc:
        return "error: %r" % exc
    finally:
        conn.close()


def runs(polls):
    """The sequence with repeats collapsed: refused, refused, 200, 200 -> refused, 200."""
    return [p for i, p in enumerate(polls) if i == 0 or p != polls[i - 1]]


# ------------------------------------------------------------------ HTTP/1.1, keep-alive, chunking


def test_one_keep_alive_connection_carries_every_kind_of_answer(standin):
    conn = standin.connection()
    answers = []
    for method, path, body, headers in [
            ("GET", "/health", None, {}),
            ("GET", "/v1/models", None, auth()),
            ("POST", "/v1/chat/completions", chat(stream=True), auth()),
            ("POST", "/v1/chat/completions", chat(stream=False), auth()),
            ("GET", "/metrics", None, {}),
            ("GET", "/version", None, {})]:
        conn.request(method, path, body=body, headers=headers)
        if not answers:
            first_socket = conn.sock
        response = conn.getresponse()
        answers.append((path, response.version, response.status, response.getheader("Content-Length"),
                        response.getheader("Transfer-Encoding"), response.read()))
        assert conn.sock is first_socket, "the server closed the keep-alive connection after %s" % path
    conn.close()
    assert [a[1] for a in answers] == [11] * 6
    assert [a[2] for a in answers] == [200] * 6
    # Plain answers carry Content-Length; the stream is chunked and has none (chat_stream_usage.http).
    stream = answers[2]
    assert stream[3] is None and stream[4] == "chunked"
    for path, _v, _s, length, encoding, body in answers[:2] + answers[3:]:
        assert encoding is None and int(length) == len(body), path
    assert answers[0][5] == b""


def test_stream_framing_on_the_wire_is_chunked_and_ends_with_the_zero_chunk(standin):
    with socket.create_connection(("127.0.0.1", standin.port), timeout=10) as sock:
        body = chat(max_tokens=3).encode()
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (KEY.encode(), len(body), body))
        raw = b""
        while not raw.endswith(b"0\r\n\r\n"):
            piece = sock.recv(65536)
            assert piece, "the connection closed before the last chunk: %r" % raw[-200:]
            raw += piece
    head, _sep, rest = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert b"\r\ntransfer-encoding: chunked" in head.lower()
    assert b"content-length" not in head.lower()
    assert b"text/event-stream" in head
    # The first chunk: its size in hex, then one whole SSE event.
    size, _sep, after = rest.partition(b"\r\n")
    assert after[:int(size, 16)].startswith(b"data: {") and after[:int(size, 16)].endswith(b"\n\n")
    assert rest.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")


def test_http_1_0_client_gets_the_stream_unchunked_and_the_connection_closed(standin):
    with socket.create_connection(("127.0.0.1", standin.port), timeout=10) as sock:
        body = chat(max_tokens=2).encode()
        sock.sendall(b"POST /v1/chat/completions HTTP/1.0\r\nAuthorization: Bearer %s\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (KEY.encode(), len(body), body))
        raw = b""
        while True:
            piece = sock.recv(65536)
            if not piece:
                break
            raw += piece
    head, _sep, rest = raw.partition(b"\r\n\r\n")
    assert b"chunked" not in head.lower()
    assert rest.startswith(b"data: {") and rest.endswith(b"data: [DONE]\n\n")


# ------------------------------------------------------------------ the stream's content


def test_stream_has_empty_text_mid_stream_and_last_token_with_length(standin):
    conn = standin.connection()
    conn.request("POST", "/v1/chat/completions", body=chat(max_tokens=16), headers=auth())
    response = conn.getresponse()
    chunks = sse_chunks(response.read().decode("utf-8"))
    conn.close()
    # Like chat_stream_usage.http: the role chunk, the tokens, then choices [] with usage.
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 16
    tokens = chunks[1:-1]
    assert len(tokens) == 16
    texts = [c["choices"][0]["delta"]["content"] for c in tokens]
    # Empty text in the middle, between tokens with text (the held-back UTF-8 character).
    empty = [i for i, text in enumerate(texts) if text == ""]
    assert empty and all(0 < i < len(texts) - 1 for i in empty)
    assert all(texts[i + 1] for i in empty)
    assert any(ord(ch) > 127 for text in texts for ch in text)
    # finish_reason "length" with the last token, in the same chunk; none before.
    last = tokens[-1]["choices"][0]
    assert last["finish_reason"] == "length" and last["delta"]["content"] != ""
    assert all(c["choices"][0]["finish_reason"] is None for c in tokens[:-1])


def test_recorded_vllm_stream_has_the_same_shape():
    """The check above, on the real server's answer (so the stand-in imitates what vLLM does)."""
    _status, headers, body = recorded("chat_stream_nousage.http")
    assert headers["transfer-encoding"] == "chunked"
    chunks = sse_chunks(body)
    texts = [c["choices"][0]["delta"].get("content") for c in chunks]
    assert texts[0] == "" and "" in texts[1:-1]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length" and texts[-1] != ""


def test_completions_stream_has_no_role_chunk(standin):
    conn = standin.connection()
    body = json.dumps({"model": "quasar", "prompt": "Once", "max_tokens": 5, "stream": True})
    conn.request("POST", "/v1/completions", body=body, headers=auth())
    chunks = sse_chunks(conn.getresponse().read().decode("utf-8"))
    conn.close()
    assert [c["object"] for c in chunks] == ["text_completion"] * 5
    assert chunks[0]["choices"][0]["text"] == "ready"
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_plain_answer_holds_all_text_and_usage(standin):
    conn = standin.connection()
    conn.request("POST", "/v1/chat/completions", body=chat(max_tokens=5, stream=False), headers=auth())
    response = conn.getresponse()
    answer = json.loads(response.read())
    conn.close()
    assert response.getheader("Content-Type") == "application/json"
    assert answer["choices"][0]["message"]["content"] == "ready and serving caf\u00e9"
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["usage"] == {"prompt_tokens": 8, "total_tokens": 13, "completion_tokens": 5}


# ------------------------------------------------------------------ errors


def request(server, method, path, body=None, headers=None):
    conn = server.connection()
    conn.request(method, path, body=body, headers=headers or {})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response, data


def test_max_tokens_zero_is_400_in_the_flat_0_8_5_form(standin):
    response, data = request(standin, "POST", "/v1/chat/completions", chat(max_tokens=0, stream=False), auth())
    assert response.status == 400
    assert json.loads(data) == {"object": "error", "message": "max_tokens must be at least 1, got 0.",
                                "type": "BadRequestError", "param": None, "code": 400}


@pytest.mark.parametrize("bad", [-3, "16", 1.5, True])
def test_other_bad_max_tokens_are_400(standin, bad):
    body = json.dumps({"model": "quasar", "messages": [], "max_tokens": bad})
    response, data = request(standin, "POST", "/v1/chat/completions", body, auth())
    assert response.status == 400 and "max_tokens" in json.loads(data)["message"]


def test_max_tokens_beyond_the_context_is_400(standin):
    response, data = request(standin, "POST", "/v1/chat/completions", chat(max_tokens=5000, stream=False), auth())
    assert response.status == 400
    assert "maximum context length is 4096 tokens. However, you requested 5008 tokens" in json.loads(data)["message"]


def test_nested_error_bodies_like_newer_releases(nested):
    server = nested
    response, data = request(server, "POST", "/v1/chat/completions", chat(max_tokens=0, stream=False),
                             {"Content-Type": "application/json"})
    _status, _headers, reference = recorded("chat_maxtokens0.http")
    assert response.status == 400
    assert json.loads(data) == json.loads(reference)
    response, data = request(server, "POST", "/v1/chat/completions", chat(model="nosuch", stream=False))
    answer = json.loads(data)
    assert response.status == 404 and set(answer) == {"error"}
    assert set(answer["error"]) == set(json.loads(recorded("chat_wrongmodel.http")[2])["error"])
    assert answer["error"]["message"].startswith("The model `nosuch` does not exist.")


def test_wrong_model_is_404_flat(standin):
    response, data = request(standin, "POST", "/v1/chat/completions", chat(model="nosuch"), auth())
    assert response.status == 404
    assert json.loads(data) == {"object": "error", "message": "The model `nosuch` does not exist.",
                                "type": "NotFoundError", "param": None, "code": 404}


def test_head_health_is_405_like_vllm(standin):
    status, headers, _body = recorded("health_head.http")
    response, data = request(standin, "HEAD", "/health")
    assert response.status == status == 405
    assert response.getheader("Allow") == headers["allow"] == "GET"
    assert int(response.getheader("Content-Length")) == int(headers["content-length"]) == 31
    assert data == b""


@pytest.mark.parametrize("method, path, allow", [
    ("POST", "/health", "GET"), ("DELETE", "/v1/models", "GET"), ("GET", "/v1/chat/completions", "POST"),
    ("PUT", "/version", "GET"), ("OPTIONS", "/health", "GET")])
def test_other_methods_not_allowed(standin, method, path, allow):
    response, data = request(standin, method, path, body="{}" if method in ("POST", "PUT") else None,
                             headers=auth())
    assert response.status == 405 and response.getheader("Allow") == allow
    assert json.loads(data) == {"detail": "Method Not Allowed"}


def test_unknown_route_and_missing_key_match_the_recordings(standin):
    response, data = request(standin, "GET", "/nope")
    assert (response.status, data.decode()) == recorded("notfound.http")[0::2]
    response, data = request(standin, "GET", "/v1/models")
    assert (response.status, data.decode()) == recorded("models_nokey.http")[0::2]
    response, data = request(standin, "POST", "/v1/chat/completions", chat(), {"Authorization": "Bearer wrong"})
    assert response.status == 401 and json.loads(data) == {"error": "Unauthorized"}


def test_early_answer_keeps_the_connection_in_step(standin):
    """A 401 before the body was looked at: the body is still read, so the next request works."""
    conn = standin.connection()
    conn.request("POST", "/v1/chat/completions", body=chat(), headers={"Content-Type": "application/json"})
    first = conn.getresponse()
    first.read()
    conn.request("GET", "/health")
    second = conn.getresponse()
    second.read()
    conn.close()
    assert (first.status, second.status) == (401, 200)


# ------------------------------------------------------------------ metrics, models, version


def test_metrics_carry_model_name_and_engine_labels(standin):
    response, data = request(standin, "GET", "/metrics")
    assert response.status == 200
    samples = [(name, labels) for name, labels in O.metric_samples(data) if name.startswith("vllm:")]
    assert ("vllm:num_requests_running", {"model_name": "quasar", "engine": "0"}) in samples
    assert all(labels.get("model_name") == "quasar" and labels.get("engine") == "0" for _n, labels in samples)
    # The recorded server labels the same metric the same way (in the other order).
    recorded_samples = O.metric_samples(recorded("metrics.http")[2])
    assert ("vllm:num_requests_running", {"engine": "0", "model_name": "quasar"}) in recorded_samples


def test_models_and_version(standin):
    response, data = request(standin, "GET", "/v1/models", headers=auth())
    listing = json.loads(data)
    assert response.status == 200 and [m["id"] for m in listing["data"]] == ["quasar"]
    assert listing["data"][0]["max_model_len"] == 4096
    response, data = request(standin, "GET", "/version")
    assert json.loads(data) == {"version": "0.0.0-standin"}


def test_models_listing_has_the_fields_of_the_recording(standin):
    # models.http (vLLM 0.32): the same fields as 0.8.5's ModelCard and ModelPermission
    # (vllm/entrypoints/openai/protocol.py), one permission per model (serving_models.py).
    status, headers, body = recorded("models.http")
    response, data = request(standin, "GET", "/v1/models", headers=auth())
    assert response.status == status == 200
    assert response.getheader("Content-Type") == headers["content-type"] == "application/json"
    listing, reference = json.loads(data), json.loads(body)
    assert set(listing) == set(reference) and listing["object"] == reference["object"] == "list"
    card, real_card = listing["data"][0], reference["data"][0]
    assert set(card) == set(real_card)
    for name in ("object", "owned_by", "parent"):
        assert card[name] == real_card[name], name
    assert card["root"].endswith("/model") and isinstance(card["created"], int)
    assert len(card["permission"]) == len(real_card["permission"]) == 1
    permission, real_permission = card["permission"][0], real_card["permission"][0]
    assert set(permission) == set(real_permission)
    assert {k: v for k, v in permission.items() if k not in ("id", "created")} == \
        {k: v for k, v in real_permission.items() if k not in ("id", "created")}
    assert permission["id"].startswith("modelperm-") and isinstance(permission["created"], int)


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_ping_answers_like_the_recording(standin, method):
    # ping.http: 200, Content-Length 0, no Content-Type; 0.8.5 takes GET and POST (api_server.py /ping).
    status, headers, body = recorded("ping.http")
    response, data = request(standin, method, "/ping", body="" if method == "POST" else None)
    assert response.status == status == 200
    assert response.getheader("Content-Length") == headers["content-length"] == "0"
    assert response.getheader("Content-Type") is None and "content-type" not in headers
    assert data == body.encode() == b""


# ------------------------------------------------------------------ the STANDIN_* knobs still work


def test_knobs_no_tokens_fail_health_version_and_key_from_env(start):
    server = start(env={"STANDIN_NO_TOKENS": "1", "STANDIN_FAIL_HEALTH": "1", "STANDIN_VERSION": "2-notokens",
                        "VLLM_API_KEY": KEY})
    response, data = request(server, "GET", "/health")
    assert response.status == 500 and "STANDIN_FAIL_HEALTH" in json.loads(data)["message"]
    assert json.loads(request(server, "GET", "/version")[1]) == {"version": "2-notokens"}
    assert request(server, "GET", "/v1/models")[0].status == 401
    response, data = request(server, "POST", "/v1/chat/completions", chat(max_tokens=4), auth())
    chunks = sse_chunks(data.decode())
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == ""
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["usage"]["completion_tokens"] == 0


def test_knobs_start_delay_and_exit_after(start):
    # Each knob's time counts from the stand-in's start: it cannot come sooner, and it comes later
    # only by the interpreter's start (0.05 s idle, 0.2 s on a loaded machine), far from twice it.
    delay, exit_after = 1.0, 2.0
    began = time.monotonic()
    server = start(env={"STANDIN_START_DELAY": "%g" % delay, "STANDIN_EXIT_AFTER": "%g" % exit_after}, wait=False)
    server.wait_listening()
    listening = time.monotonic() - began
    assert delay <= listening < 2 * delay, listening
    assert request(server, "GET", "/health")[0].status == 200
    assert server.process.wait(10) == 0
    gone = time.monotonic() - began
    assert exit_after <= gone < 2 * exit_after, gone
    assert "exiting with status 0" in server.log.read_text()


def test_no_listener_until_the_model_is_loaded_then_health_is_200(start):
    # health_during_startup.txt: curl is refused while vLLM loads the model (no listener yet), then
    # gets 200; never a 5xx or a hang in between. The stand-in is polled the same way, faster.
    assert runs(recorded_polls("health_during_startup.txt")) == ["refused", 200]
    began = time.monotonic()
    server = start(env={"STANDIN_START_DELAY": "1.5"}, wait=False)
    polls, refused_at, ends = [], 0.0, began + 15
    while polls[-3:] != [(200, b"")] * 3 and time.monotonic() < ends:
        polls.append(poll_health(server))
        if polls[-1] == "refused":
            refused_at = time.monotonic() - began
        time.sleep(0.1)
    assert runs(polls) == ["refused", (200, b"")], runs(polls)
    # Refused for the whole load, not only while the interpreter starts: a socket that listened
    # early would queue the polls and answer them late, with no refusal after the first 0.3 s.
    assert refused_at >= 1.2, (refused_at, polls)


def test_engine_death_health_200_then_refused_and_exit_0(start):
    # health_after_engine_kill.txt: 200 while the engine lives; after it is killed the API server exits
    # with status 0 and connections are refused. STANDIN_EXIT_AFTER plays it (STANDIN_EXIT_CODE unset).
    assert runs(recorded_polls("health_after_engine_kill.txt")) == [200, "refused"]
    server = start(env={"STANDIN_EXIT_AFTER": "1.5"})
    polls, ends = [], time.monotonic() + 15
    while polls[-5:] != ["refused"] * 5 and time.monotonic() < ends:
        polls.append(poll_health(server))
        time.sleep(0.1)
    assert runs(polls) == [(200, b""), "refused"], runs(polls)
    assert server.process.wait(5) == 0


def test_sigterm_cuts_an_inflight_stream_and_refuses_new_connections(start):
    # vLLM 0.8.5's serve_http (vllm/entrypoints/launcher.py) cancels the server task on SIGTERM: a
    # stream in progress ends without data: [DONE] and without the last (zero-length) chunk, and the
    # process exits 0. Slow tokens (0.2 s each, 40 of them: 8 s) keep the stream going meanwhile.
    server = start(env={"STANDIN_ITL_MS": "200"}, args=["--api-key", KEY])
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        body = chat(max_tokens=40).encode()
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                     % (KEY.encode(), len(body), body))
        raw = b""
        while raw.count(b"data: {") < 3:  # the role chunk and two tokens
            piece = sock.recv(65536)
            assert piece, raw
            raw += piece
        server.process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        try:
            while True:
                piece = sock.recv(65536)
                if not piece:
                    break
                raw += piece
        except (ConnectionResetError, socket.timeout):  # a reset also ends it; a silent hang fails below
            pass
        cut_after = time.monotonic() - signalled
    assert cut_after < 2, "the stream went on %.1f s after SIGTERM" % cut_after
    assert raw.startswith(b"HTTP/1.1 200") and b"data: [DONE]" not in raw
    assert not raw.endswith(b"0\r\n\r\n")
    assert server.process.wait(5) == 0
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", server.port), timeout=2).close()


def test_knob_exit_code(start):
    # STANDIN_EXIT_CODE: the status STANDIN_EXIT_AFTER exits with (the 2-exit1 image: a crashed server, F1).
    server = start(env={"STANDIN_START_DELAY": "5", "STANDIN_EXIT_AFTER": "0.5", "STANDIN_EXIT_CODE": "1"}, wait=False)
    assert server.process.wait(10) == 1
    assert "exiting with status 1" in server.log.read_text()


# A real torch 2.6 watchdog line, as users reported it (modelscope/DiffSynth-Studio issue 458), and the
# shape every such line has: the stand-in's lines must have it too.
REAL_WATCHDOG_LINE = ("[rank4]:[E318 07:39:53.792630246 ProcessGroupNCCL.cpp:616] [Rank 4] Watchdog caught collective "
                      "operation timeout: WorkNCCL(SeqNum=610, OpType=COALESCED, NumelIn=56320, NumelOut=450560, "
                      "Timeout(ms)=600000) ran for 600086 milliseconds before timing out.")
WATCHDOG_SHAPE = re.compile(r"^\[rank(\d+)\]:\[E\d{3,4} \d\d:\d\d:\d\d\.\d{9} ProcessGroupNCCL\.cpp:\d+\] \[Rank \1\] "
                            r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=\d+, OpType=[A-Z_]+, "
                            r"NumelIn=\d+, NumelOut=\d+, Timeout\(ms\)=(\d+)\) ran for (\d+) milliseconds before "
                            r"timing out\.$")


def test_knob_nccl_hang_ends_like_torchs_watchdog(start):
    # STANDIN_NCCL_HANG_MS with TP 2 (F14): never listens, logs each rank's watchdog timeout in torch's
    # shape after the timeout, and dies with SIGABRT's status; the doctor reads it as gated(nccl).
    assert WATCHDOG_SHAPE.match(REAL_WATCHDOG_LINE)
    began = time.monotonic()
    server = start(env={"STANDIN_NCCL_HANG_MS": "1500"}, args=["--tensor-parallel-size", "2"], wait=False)
    with pytest.raises(OSError):
        time.sleep(0.8)
        socket.create_connection(("127.0.0.1", server.port), timeout=0.5).close()
    assert server.process.wait(10) == 134
    assert time.monotonic() - began >= 1.5
    text = server.log.read_text()
    matches = [WATCHDOG_SHAPE.match(line) for line in text.splitlines()]
    ranks = sorted(int(m.group(1)) for m in matches if m)
    assert ranks == [0, 1], text
    assert all(int(m.group(2)) == 1500 and int(m.group(3)) > 1500 for m in matches if m), text
    assert text.rstrip().endswith("terminate called after throwing an instance of 'c10::DistBackendError'"), text
    journal = doctor.classify_journal(text)
    assert journal["states"] == ["gated(nccl)"] and len(journal["faults"]["nccl_timeout"]) == 2, journal


def test_knob_nccl_hang_needs_tensor_parallelism(start):
    # One GPU: no collective to hang in, so the server listens and answers.
    server = start(env={"STANDIN_NCCL_HANG_MS": "60000"})
    assert request(server, "GET", "/health")[0].status == 200


def test_knobs_unknown_flag_exits_2_and_nvfp4_is_refused(start, tmp_path):
    server = start(args=["--no-such-flag"], wait=False)
    assert server.process.wait(10) == 2
    nvfp4 = dict(LLAMA2_7B, quantization_config={"quant_method": "modelopt", "quant_algo": "NVFP4"})
    server = start(config=nvfp4, wait=False)
    assert server.process.wait(10) == 1
    assert "modelopt_fp4 is not supported for the current GPU" in server.log.read_text()


# ------------------------------------------------------------------ GPTQ: what vLLM 0.8.5's gptq method takes

GPTQ_CONFIG = dict(LLAMA2_7B, quantization_config={"quant_method": "gptq", "bits": 4, "group_size": 32,
                                                   "desc_act": False, "sym": False})


def gptq_layer(prefix, out_features, in_features, group=32):
    """A repacked linear layer's tensors (GPTQ layout): name -> (dtype, shape)."""
    groups = in_features // group
    return {prefix + ".qweight": ("I32", [in_features // 8, out_features]),
            prefix + ".qzeros": ("I32", [groups, out_features // 8]),
            prefix + ".scales": ("F16", [groups, out_features]),
            prefix + ".g_idx": ("I32", [in_features])}


def write_weights(model_dir, tensors):
    """A safetensors file of ``tensors`` (name -> (dtype, shape)) with zero data."""
    header, offset = {}, 0
    for name, (dtype, shape) in sorted(tensors.items()):
        size = {"I32": 4, "F16": 2, "BF16": 2, "U8": 1}[dtype]
        for dim in shape:
            size *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode("utf-8")
    model_dir.mkdir(exist_ok=True)
    for old in model_dir.glob("*.safetensors"):
        old.unlink()
    (model_dir / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)


def gptq_tensors(**changes):
    tensors = {"model.embed_tokens.weight": ("F16", [64, 256]), "lm_head.weight": ("F16", [64, 256])}
    tensors.update(gptq_layer("model.layers.0.self_attn.o_proj", 256, 256))
    tensors.update(gptq_layer("model.layers.0.mlp.down_proj", 256, 512))
    tensors.update(gptq_layer("model.layers.0.mlp.gate_proj", 512, 256))
    tensors.update(changes)
    return dict((k, v) for k, v in tensors.items() if v is not None)


@pytest.mark.parametrize("args", [["--quantization", "gptq", "--dtype", "float16", "--tensor-parallel-size", "2"],
                                  ["--dtype", "half"]])
def test_a_gptq_checkpoint_is_served(start, tmp_path, args):
    write_weights(tmp_path / "model", gptq_tensors())
    server = start(config=GPTQ_CONFIG, args=args)
    assert request(server, "GET", "/health")[0].status == 200
    assert "with the gptq method" in server.log.read_text()


NVFP4_CONFIG = dict(LLAMA2_7B, quantization_config={"quant_method": "modelopt", "quant_algo": "NVFP4"})
_QC = GPTQ_CONFIG["quantization_config"]


@pytest.mark.parametrize("config, tensors, args, says", [
    (NVFP4_CONFIG, gptq_tensors(), [], "Quantization method specified in the model config (modelopt) does not match "
                                       "the quantization method specified in the `quantization` argument (gptq)"),
    (LLAMA2_7B, gptq_tensors(), [], "Cannot find the config file for gptq"),
    (dict(GPTQ_CONFIG, quantization_config=dict(_QC, bits=5)), gptq_tensors(), [],
     "only 2/3/4/8-bit weight quantization is supported for GPTQ, but got 5 bits"),
    (dict(GPTQ_CONFIG, quantization_config=dict(_QC, bits=8)), gptq_tensors(), [], "4-bit GPTQ only"),
    (dict(GPTQ_CONFIG, quantization_config=dict((k, v) for k, v in _QC.items() if k != "desc_act")), gptq_tensors(),
     [], "Cannot find any of ['desc_act'] in the model's quantization config"),
    (GPTQ_CONFIG, gptq_tensors(), ["--dtype", "bfloat16"],
     "torch.bfloat16 is not supported for quantization method gptq"),
    (GPTQ_CONFIG, gptq_tensors(**{"model.layers.0.self_attn.q_proj.weight": ("F16", [256, 256])}), [],
     "KeyError: 'model.layers.0.self_attn.q_proj.weight'"),
    # down_proj's 512 inputs over TP 4 are 128 per GPU: fine for group 32; over TP 32 they are 16.
    (GPTQ_CONFIG, gptq_tensors(), ["--tensor-parallel-size", "32"],
     "The input size is not aligned with the quantized weight shape"),
    (GPTQ_CONFIG, gptq_tensors(**gptq_layer("model.layers.0.mlp.up_proj", 516, 256)), ["--tensor-parallel-size", "2"],
     "The output size is not aligned with the quantized weight shape"),
    (GPTQ_CONFIG, gptq_tensors(**{"model.layers.0.mlp.down_proj.scales": ("F16", [8, 128])}), [],
     "model.layers.0.mlp.down_proj.scales must be F16 [16, 256]"),
    (GPTQ_CONFIG, gptq_tensors(**{"model.layers.0.mlp.down_proj.qzeros": None}), [],
     "model.layers.0.mlp.down_proj.qzeros must be I32 [16, 32]"),
    (GPTQ_CONFIG, {"model.embed_tokens.weight": ("F16", [64, 256])}, [], "no qweight tensor"),
])
def test_what_vllms_gptq_method_refuses_the_stand_in_refuses(start, tmp_path, config, tensors, args, says):
    write_weights(tmp_path / "model", tensors)
    server = start(config=config, args=["--quantization", "gptq"] + args, wait=False)
    assert server.process.wait(10) == 1
    assert says in server.log.read_text()


# ------------------------------------------------------------------ the smoke client and module against it


def test_smoke_client_reads_the_standin_stream(standin):
    result = O.chat_completion(standin.url + "/v1/chat/completions", O.chat_body("quasar", "hi", 16),
                               O.auth_headers(KEY), timeout=10)
    assert result["error"] is None and result["done"] is True
    assert result["tokens"] == 16                       # the usage chunk's count
    assert result["finish_reason"] == "length"
    assert result["text"].startswith("ready and serving caf\u00e9 from the stand-in \u2713")
    assert 0 < result["ttft_s"] <= result["latency_s"]
    no_usage = dict(O.chat_body("quasar", "hi", 16))
    del no_usage["stream_options"]
    fallback = O.chat_completion(standin.url + "/v1/chat/completions", no_usage, O.auth_headers(KEY), timeout=10)
    # Without usage: the chunks with text (16 tokens, 2 of them with their text held back).
    assert fallback["tokens"] == 14 and fallback["text"] == result["text"]


@pytest.mark.parametrize("fmt", ["flat", "nested"])
def test_smoke_client_reports_the_max_tokens_0_message_in_both_forms(standin, nested, fmt):
    server = nested if fmt == "nested" else standin
    body = O.chat_body("quasar", "hi", 1, stream=True)
    body["max_tokens"] = 0
    result = O.chat_completion(server.url + "/v1/chat/completions", body, O.auth_headers(KEY), timeout=10)
    assert result["status"] == 400
    assert result["error"].startswith("HTTP 400: max_tokens must be at least 1, got 0.")
    assert "BadRequestError" in result["error"]


def run_module(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            openai_smoke.main()
    out = capsys.readouterr().out
    return exc.value.code, json.loads(out), out


@pytest.mark.parametrize("stream", [True, False])
def test_openai_smoke_module_passes_against_the_standin(standin, capsys, stream):
    rc, result, raw = run_module(capsys, {"url": standin.url, "model": "quasar", "api_key": KEY, "stream": stream,
                                          "check_metrics": True, "interval": 0.2, "request_timeout": 10})
    assert rc == 0, result
    assert result["completion_tokens"] == 16 and result["finish_reason"] == "length"
    assert result["models"] == ["quasar"] and result["metrics"] >= 5 and result["metrics_models"] == ["quasar"]
    assert result["ttft_s"] is not None and result["text"].startswith("ready and serving")
    assert KEY not in raw


def test_openai_smoke_module_fails_on_the_no_tokens_version(start, capsys):
    server = start(env={"STANDIN_NO_TOKENS": "1"})
    rc, result, _raw = run_module(capsys, {"url": server.url, "model": "quasar", "interval": 0.2})
    assert rc == 1 and "returned no tokens (finish_reason stop)" in result["msg"]
    assert result["completion_tokens"] == 0 and result["ttft_s"] is None


def test_knob_hang_completions(start, capsys):
    # STANDIN_HANG_COMPLETIONS (the 2-hangs image, F2): /health and /v1/models answer, a completion is
    # held unanswered until the client gives up; the smoke test fails by its request_timeout, naming it.
    server = start(env={"STANDIN_HANG_COMPLETIONS": "1"})
    assert request(server, "GET", "/health")[0].status == 200
    assert request(server, "GET", "/v1/models", headers=auth())[0].status == 200
    began = time.monotonic()
    rc, result, _raw = run_module(capsys, {"url": server.url, "model": "quasar", "api_key": KEY, "interval": 0.2,
                                           "request_timeout": 1})
    took = time.monotonic() - began
    assert rc == 1, result
    assert result["msg"].startswith("POST %s/v1/chat/completions failed: no complete answer" % server.url), result
    assert "raise request_timeout (now 1 s)" in result["msg"], result
    assert result["health"]["ok"] and result["models"] == ["quasar"] and result["completion_tokens"] == 0
    assert 1 <= took < 5, took
    # The stand-in saw the request, held it, and let it go when the client closed the connection.
    ends = time.monotonic() + 5
    while "closed the held completion request" not in server.log.read_text() and time.monotonic() < ends:
        time.sleep(0.1)
    log_text = server.log.read_text()
    assert "holding the completion request unanswered" in log_text
    assert "closed the held completion request" in log_text
    assert server.process.poll() is None
