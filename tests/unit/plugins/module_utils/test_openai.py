"""plugins/module_utils/clients/_openai.py: pure helpers, the SSE reader, the health wait, and real HTTP
against a tiny server on 127.0.0.1."""

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.clients import _openai as O


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds
        assert self.now < 10 ** 5, "still waiting after every timeout of these tests"


# ---------------------------------------------------------------- pure helpers


def test_join_url_handles_slashes():
    assert O.join_url("http://h:8000/", "/v1/models") == "http://h:8000/v1/models"
    assert O.join_url("http://h:8000", "health") == "http://h:8000/health"


def test_auth_headers_only_with_a_key():
    assert "Authorization" not in O.auth_headers("")
    assert "Authorization" not in O.auth_headers(None)
    assert O.auth_headers("k1")["Authorization"] == "Bearer k1"


def test_redact_replaces_every_secret():
    assert O.redact("key=abc and abc", ["abc", ""]) == "key=******** and ********"
    assert O.redact(None, ["x"]) is None


def test_short_flattens_and_truncates():
    assert O.short(b"a\n  b") == "a b"
    assert O.short("x" * 50, 10) == "xxxxxxx..."
    assert O.short(None) == ""


def test_parse_json_reports_what_it_got():
    assert O.parse_json(b'{"a": 1}') == ({"a": 1}, None)
    obj, error = O.parse_json(b"<html>")
    assert obj is None and "not JSON" in error and "<html>" in error


def test_model_ids_tolerates_odd_answers():
    assert O.model_ids({"data": [{"id": "quasar"}, {"id": 3}, "x", {"object": "model"}]}) == ["quasar"]
    assert O.model_ids({"data": "nope"}) == []
    assert O.model_ids(None) == []


def test_chat_body_streaming_asks_for_usage():
    body = O.chat_body("m", "hi", 4, 0.7, True)
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert "stream_options" not in O.chat_body("m", "hi", 4, 0.7, False)


def test_delta_text_reads_chat_completion_and_message_shapes():
    assert O.delta_text({"choices": [{"delta": {"content": "a"}}]}) == "a"
    assert O.delta_text({"choices": [{"text": "b"}]}) == "b"
    assert O.delta_text({"choices": [{"message": {"content": "c"}}]}) == "c"
    assert O.delta_text({"choices": [{"delta": {"role": "assistant"}}]}) == ""
    assert O.delta_text("junk") == ""


def test_metric_names_skips_comments():
    text = "# HELP x\n# TYPE vllm:a gauge\nvllm:a{m=\"q\"} 1\nvllm:b_total 2\n\n"
    assert O.metric_names(text) == ["vllm:a", "vllm:b_total"]


# ---------------------------------------------------------------- server-sent events


def test_sse_events_join_multiline_data_and_skip_comments():
    lines = [b": keep-alive\n", b"data: one\n", b"data: two\n", b"\n", b"event: x\n", b"data:three\r\n", b"\r\n",
             b"id: 5\n", b"data: last"]
    assert list(O.iter_sse_data(lines)) == ["one\ntwo", "three", "last"]


def _chunk(content=None, finish=None, usage=None):
    chunk = {"choices": [{"delta": {"content": content} if content is not None else {}, "finish_reason": finish}]}
    if usage is not None:
        chunk = {"choices": [], "usage": {"completion_tokens": usage}}
    return ("data: %s\n\n" % json.dumps(chunk)).encode()


def test_read_chat_stream_counts_tokens_and_time_to_first_token():
    clock = FakeClock()
    clock.now = 10.0

    def lines():
        yield _chunk("")           # role chunk: no text yet
        clock.now = 10.5
        yield _chunk("Hel")
        clock.now = 10.6
        yield _chunk("lo", finish="length")
        yield _chunk(usage=7)
        yield b"data: [DONE]\n\n"
        yield _chunk("after done is ignored")

    result = O.read_chat_stream(lines(), 10.0, clock)
    assert result["text"] == "Hello"
    assert result["ttft_s"] == 0.5
    assert result["tokens"] == 7          # the server's usage wins
    assert result["content_chunks"] == 2
    assert result["done"] and result["finish_reason"] == "length" and result["error"] is None


def test_read_chat_stream_without_usage_counts_chunks():
    result = O.read_chat_stream([_chunk("a"), _chunk("b"), b"data: [DONE]\n\n"], 0.0, FakeClock())
    assert result["tokens"] == 2 and result["usage_tokens"] is None


def test_read_chat_stream_with_no_tokens():
    result = O.read_chat_stream([_chunk(""), _chunk(finish="stop"), b"data: [DONE]\n\n"], 0.0, FakeClock())
    assert result["tokens"] == 0 and result["ttft_s"] is None and result["text"] == ""


def test_read_chat_stream_reports_garbage_and_server_errors():
    bad = O.read_chat_stream([b"data: {not json\n\n"], 0.0, FakeClock())
    assert "not JSON" in bad["error"]
    err = O.read_chat_stream([b'data: {"error": {"message": "boom"}}\n\n'], 0.0, FakeClock())
    assert "boom" in err["error"]


# ---------------------------------------------------------------- health wait


def test_wait_for_health_succeeds_after_refusals_with_progress():
    clock = FakeClock()
    answers = iter([(None, "connection refused")] * 3 + [(503, None), (200, None)])
    result = O.wait_for_health(lambda: next(answers), lambda: {"state": "running", "last_log": "Loading weights"},
                               timeout=100, interval=5, progress_every=10, clock=clock, sleep=clock.sleep)
    assert result["ok"] and result["reason"] == "healthy" and result["attempts"] == 5
    assert result["elapsed_s"] == 20
    assert result["progress"][0].startswith("elapsed 0 s; /health: connection refused; container running")
    assert "last log: Loading weights" in result["progress"][0]
    assert result["progress"][-1].startswith("elapsed 20 s; /health: HTTP 200")
    assert len(result["progress"]) == 3   # at 0 and 10 s, then the healthy line at 20 s


def test_wait_for_health_stops_at_once_when_the_container_exited():
    clock = FakeClock()
    states = iter([{"state": "running"}, {"state": "exited", "detail": "exit code 0", "last_log": "fatal"}])
    result = O.wait_for_health(lambda: (None, "refused"), lambda: next(states), timeout=1000, interval=5,
                               clock=clock, sleep=clock.sleep)
    assert not result["ok"] and result["reason"] == "container_exited"
    assert result["elapsed_s"] == 5 and result["attempts"] == 2
    assert "container exited (exit code 0)" in result["progress"][-1]


@pytest.mark.parametrize("state", ["restarted", "failed", "dead"])
def test_wait_for_health_dead_states(state):
    clock = FakeClock()
    result = O.wait_for_health(lambda: (None, "refused"), lambda: {"state": state}, timeout=60,
                               clock=clock, sleep=clock.sleep)
    assert result["reason"] == "container_exited" and result["attempts"] == 1


def test_wait_for_health_times_out():
    clock = FakeClock()
    result = O.wait_for_health(lambda: (500, None), None, timeout=12, interval=5, progress_every=100,
                               clock=clock, sleep=clock.sleep)
    assert not result["ok"] and result["reason"] == "timeout"
    assert result["attempts"] == 3 and result["elapsed_s"] == 10
    assert result["progress"][-1].startswith("elapsed 10 s; /health: HTTP 500")


def test_wait_for_health_keeps_the_first_and_the_newest_progress_lines():
    clock = FakeClock()
    result = O.wait_for_health(lambda: (None, "refused"), None, timeout=1000, interval=1, progress_every=1,
                               clock=clock, sleep=clock.sleep, max_lines=10)
    lines = result["progress"]
    assert len(lines) == 11 and result["attempts"] == 1001   # at 0, 1, ... 1000 s
    assert lines[0].startswith("elapsed 0 s;") and lines[1] == "(991 progress lines left out)"
    assert lines[-1].startswith("elapsed 1000 s;")


def test_deadline_counts_down_on_its_clock():
    clock = FakeClock()
    deadline = O.Deadline(10, clock)
    clock.now = 4
    assert deadline.remaining() == 6 and not deadline.expired()
    clock.now = 10
    assert deadline.expired() and deadline.remaining() == 0


class FakeSocket:
    def __init__(self):
        self.shut = []
        self.timeouts = []

    def shutdown(self, how):
        self.shut.append(how)

    def settimeout(self, seconds):
        self.timeouts.append(seconds)


def test_watchdog_deadline_is_its_seconds_from_its_start_on_its_clock(manual_timers):
    clock = FakeClock()
    clock.now = 100.0
    dog, timers = O._Watchdog(5, clock, manual_timers), manual_timers.made
    assert [t.interval for t in timers] == [5.0] and timers[0].daemon and not timers[0].started
    clock.now = 200.0
    assert not dog.expired()                      # not started: no deadline yet
    dog.start()
    assert timers[0].started and dog.ends == 205.0
    clock.now = 204.999
    assert not dog.expired()
    # The deadline passed on the clock before the timer thread ran (a socket read that ended on
    # its own timeout, which is as long): the time is up all the same.
    clock.now = 205.0
    assert dog.expired() and not dog.fired
    dog.stop()
    assert timers[0].cancelled


def test_watchdog_that_fires_shuts_the_socket_and_expires_at_once(manual_timers):
    clock = FakeClock()
    O._Watchdog(-3, clock, manual_timers)
    assert manual_timers.made[0].interval == 0.0  # a negative timeout is no time at all
    dog = O._Watchdog(30, clock, manual_timers)
    dog.connection = type("Connection", (), {"sock": FakeSocket()})()
    dog.start()
    manual_timers.made[1].fire()
    assert dog.fired and dog.expired() and clock.now < dog.ends
    assert dog.connection.sock.shut == [socket.SHUT_RDWR]


def test_watchdog_keeps_the_socket_the_connection_let_go_and_times_each_read_to_the_deadline(manual_timers):
    """After an answer with Connection: close http.client sets the connection's sock to None; the
    watchdog still shuts the socket it holds, and each read may wait only for the time left."""
    clock = FakeClock()
    clock.now = 10.0
    dog = O._Watchdog(4, clock, manual_timers)
    sock = FakeSocket()
    dog.connection = type("Connection", (), {"sock": None})()   # let go of the socket
    dog.start()
    dog.hold(sock)
    clock.now = 12.5
    assert dog.before_read() and sock.timeouts == [1.5] and dog.remaining() == 1.5
    clock.now = 14.0
    assert not dog.before_read() and sock.timeouts == [1.5] and dog.remaining() == 0.0
    manual_timers.made[0].fire()
    assert sock.shut == [socket.SHUT_RDWR]
    # A timer that fired before the socket was held shuts it as soon as it is.
    early = O._Watchdog(4, clock, manual_timers)
    early.start()
    manual_timers.made[1].fire()
    late = FakeSocket()
    early.hold(late)
    assert late.shut == [socket.SHUT_RDWR] and not early.before_read()


def test_iter_lines_handles_crlf_split_across_pieces_and_lone_cr():
    assert list(O.iter_lines([b"a\r", b"\nb\rc\n", b"\r\n", b"d"])) == ["a", "b", "c", "", "d"]
    assert list(O.iter_lines([b"caf\xc3", b"\xa9\n"])) == ["caf\u00e9"]   # a UTF-8 character split in two
    with pytest.raises(ValueError):
        list(O.iter_lines([b"x" * 20], max_line=10))


def test_metric_samples_reads_labels_in_any_order_and_skips_garbage():
    text = "\n".join([
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        'vllm:num_requests_running{model_name="quasar",engine="0"} 0.0',
        'vllm:num_requests_waiting{engine="0",model_name="quasar"} 1.0 1700000000000',
        'vllm:weird{model_name="a \\"q\\" {b}",engine="0"} 2',
        "process_open_fds 34.0",
        "vllm:no_value{engine=\"0\"}",
        "{broken} 1",
        'vllm:unclosed{engine="0" 1',
    ])
    assert O.metric_samples(text) == [
        ("vllm:num_requests_running", {"model_name": "quasar", "engine": "0"}),
        ("vllm:num_requests_waiting", {"engine": "0", "model_name": "quasar"}),
        ("vllm:weird", {"model_name": 'a "q" {b}', "engine": "0"}),
        ("process_open_fds", {}),
    ]
    assert O.metric_names(text.encode()) == ["process_open_fds", "vllm:num_requests_running",
                                             "vllm:num_requests_waiting", "vllm:weird"]


def test_check_url_and_check_name():
    assert O.check_url("http://127.0.0.1:8000") is None and O.check_url("https://h/base/") is None
    assert O.check_url("10.0.0.1:8000").startswith("url must start with http:// or https://")
    assert O.check_url("http://h:8000 ").startswith("url must not contain spaces")
    assert O.check_url("http://:8000").startswith("url has no host name")
    assert O.check_name("container", "vllm-a.1", r"[a-z0-9][a-z0-9.-]*", "x") is None
    assert O.check_name("container", "-x", r"[a-z0-9][a-z0-9.-]*", "a name") == "container must be a name, got '-x'"


def test_wait_for_health_missing_container_is_not_fatal():
    clock = FakeClock()
    answers = iter([(None, "refused"), (200, None)])
    result = O.wait_for_health(lambda: next(answers), lambda: {"state": "missing"}, timeout=30,
                               clock=clock, sleep=clock.sleep)
    assert result["ok"]


# ---------------------------------------------------------------- real HTTP on 127.0.0.1


class _Handler(BaseHTTPRequestHandler):
    mode = "ok"
    seen = []

    def log_message(self, *args):
        pass

    def _send(self, status, body, ctype="application/json"):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        if self.path == "/health":
            self._send(200, "")
        elif self.path == "/teapot":
            self._send(418, '{"error": "teapot"}')
        else:
            self._send(404, "{}")

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append((self.path, body))
        if type(self).mode == "500":
            self._send(500, '{"message": "engine dead"}')
            return
        if body.get("stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for word in ("a", "b", "c"):
                self.wfile.write(("data: %s\n\n" % json.dumps({"choices": [{"delta": {"content": word}}]})).encode())
            self.wfile.write(b"data: [DONE]\n\n")
        else:
            self._send(200, json.dumps({"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
                                        "usage": {"completion_tokens": 1}}))


@pytest.fixture()
def server():
    _Handler.mode = "ok"
    _Handler.seen = []
    httpd = HTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def test_http_request_real_answers(server):
    assert O.http_request("GET", server + "/health", headers=O.auth_headers("k"))[:2] == (200, b"")
    status, body, error = O.http_request("GET", server + "/teapot")
    assert status == 418 and b"teapot" in body and error is None
    assert _Handler.seen[0] == ("/health", "Bearer k")


def test_http_request_refused_port_is_an_error_not_an_exception():
    status, body, error = O.http_request("GET", "http://127.0.0.1:9/health", timeout=2)
    assert status is None and body == b"" and "cannot reach" in error


def test_http_request_bad_url():
    status, _body, error = O.http_request("GET", "nonsense")
    assert status is None and "cannot reach" in error


def test_chat_completion_streamed_over_http(server):
    result = O.chat_completion(server + "/v1/chat/completions", O.chat_body("m", "hi", 3), O.auth_headers("k"))
    assert result["error"] is None and result["text"] == "abc" and result["tokens"] == 3
    assert result["ttft_s"] is not None and result["latency_s"] >= result["ttft_s"]
    assert _Handler.seen[-1][1]["stream"] is True


def test_chat_completion_plain_over_http(server):
    result = O.chat_completion(server + "/v1/chat/completions", O.chat_body("m", "hi", 3, stream=False))
    assert result["text"] == "hi" and result["tokens"] == 1 and result["finish_reason"] == "stop"


def test_chat_completion_http_error(server):
    _Handler.mode = "500"
    result = O.chat_completion(server + "/v1/chat/completions", O.chat_body("m", "hi", 3))
    assert result["status"] == 500 and "engine dead" in result["error"]


def test_chat_completion_unreachable():
    result = O.chat_completion("http://127.0.0.1:9/v1/chat/completions", O.chat_body("m", "hi", 3), timeout=2)
    assert result["status"] is None and "cannot reach" in result["error"]
