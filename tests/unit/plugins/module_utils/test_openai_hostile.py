"""The smoke client (_openai) against hostile and odd servers on 127.0.0.1.

Each server is a few lines of raw socket code: what it writes is exactly what the client sees
(slow drips, keep-alive comments, silence, huge or broken bodies, non-UTF-8, NaN). The rule under
test: every request ends at its timeout, with a result or an error that says what happened; never
an exception, never an unbounded wait or read. The deadline a request gets is recorded (the
watchdog's timer, exactly the timeout), and the request must end no sooner than it and well before
twice it. Real vLLM answers (tests/unit/fixtures/vllm-http/) are replayed too.
"""

import json
import os
import socketserver
import threading
import time

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings, strategies as st

from ansible.module_utils.testing import patch_module_args

from ansible_collections.labfleet.vllm.plugins.module_utils.clients import _openai as O
from ansible_collections.labfleet.vllm.plugins.modules import openai_smoke, vllm_benchmark

# A health wait that lost its timeout fails the test instead of hanging (conftest.py).
pytestmark = pytest.mark.usefixtures("health_wait_guard")

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        "fixtures", "vllm-http")
# The timeout, in seconds, of the requests that run out of time (also the module's least
# request_timeout). Such a request must end no sooner than T (its deadline is the configured one, not
# zero) and before LATE (a doubled timeout fails): the watchdog ends it at T plus scheduling noise,
# milliseconds idle, tens of milliseconds on a loaded machine, far below the 0.9 s left.
T = 1.0
LATE = 1.9 * T
# A shorter timeout for the tests where only the socket's own timeout can end a read.
SHORT = 0.3
# Seconds after which every scenario stops dripping, pinging or keeping silent and closes its
# connection: a request that ignored its deadline ends there, far past LATE, instead of hanging.
GUARD = 10


class RawServer:
    """A TCP server whose ``scenario(request, sock, stop)`` writes raw bytes."""

    def __init__(self, scenario):
        self.stop = threading.Event()
        self.guard = threading.Timer(GUARD, self.stop.set)
        self.guard.daemon = True
        self.guard.start()
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                sock = self.request
                sock.settimeout(10)
                while not outer.stop.is_set():
                    request = read_request(sock)
                    if request is None:
                        return
                    try:
                        keep = scenario(request, sock, outer.stop)
                    except OSError:
                        return
                    if not keep:
                        return

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05})
        self.thread.daemon = True
        self.thread.start()

    def close(self):
        self.guard.cancel()
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


def read_request(sock):
    """``{method, path, headers, body}`` of one request, or None when the client is gone."""
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            piece = sock.recv(65536)
            if not piece:
                return None
            data += piece
        head, _sep, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = dict((k.strip().lower(), v.strip()) for k, v in (line.split(":", 1) for line in lines[1:]))
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            body += sock.recv(65536)
    except (OSError, ValueError):
        return None
    method, path, _version = lines[0].split(" ", 2)
    return {"method": method, "path": path, "headers": headers, "body": body}


@pytest.fixture()
def serve():
    servers = []

    def start(scenario):
        servers.append(RawServer(scenario))
        return servers[-1].url

    yield start
    for server in servers:
        server.close()


def head(status="200 OK", ctype="text/event-stream; charset=utf-8", extra=""):
    return ("HTTP/1.1 %s\r\ncontent-type: %s\r\n%s\r\n" % (status, ctype, extra)).encode()


def chunk(data):
    return b"%x\r\n%s\r\n" % (len(data), data)


def sse_text(obj):
    return ("data: %s\n\n" % json.dumps(obj, ensure_ascii=False)).encode("utf-8")


def sse(obj):
    return chunk(sse_text(obj))


def piece(text, finish=None):
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}


def plain(status, body, ctype="application/json"):
    data = body if isinstance(body, bytes) else body.encode("utf-8")
    return head(status, ctype, "content-length: %d\r\n" % len(data)) + data


def idle(stop, seconds=30):
    stop.wait(seconds)
    return False


def timed(call):
    began = time.monotonic()
    result = call()
    return result, time.monotonic() - began


CHAT = O.chat_body("quasar", "hi", 16)


# ------------------------------------------------------------------ slow drips and silence


def test_keep_alive_comments_forever_end_at_the_request_timeout(serve, armed):
    def scenario(_request, sock, stop):
        sock.sendall(head(extra="transfer-encoding: chunked\r\n"))
        sock.sendall(sse(piece("")))  # the role chunk, then nothing but pings
        while not stop.wait(0.05):
            sock.sendall(chunk(b": ping\n\n"))
        return False

    url = serve(scenario)
    result, elapsed = timed(lambda: O.chat_completion(url + "/v1/chat/completions", CHAT, timeout=T))
    assert armed == [T] and T <= elapsed < LATE, (armed, elapsed)
    assert result["timed_out"] is True and result["status"] == 200
    assert result["error"] == "no complete answer from %s/v1/chat/completions within 1 s (0 token(s) so far)" % url


def test_tokens_then_endless_pings_report_the_tokens_so_far(serve, armed):
    def scenario(_request, sock, stop):
        sock.sendall(head(extra="transfer-encoding: chunked\r\n") + sse(piece("Hel")) + sse(piece("lo")))
        while not stop.wait(0.05):
            sock.sendall(chunk(b":\n\n"))
        return False

    result, elapsed = timed(lambda: O.chat_completion(serve(scenario) + "/v", CHAT, timeout=T))
    assert armed == [T] and T <= elapsed < LATE and result["timed_out"], (armed, elapsed)
    assert "(2 token(s) so far)" in result["error"] and result["text"] == "Hello"


def test_server_that_never_answers(serve, armed):
    url = serve(lambda request, sock, stop: idle(stop))
    (status, body, error), elapsed = timed(lambda: O.http_request("GET", url + "/health", timeout=T))
    assert armed == [T] and T <= elapsed < LATE, (armed, elapsed)
    assert (status, body) == (None, b"") and error == "no complete answer from %s/health within 1 s" % url
    result, elapsed = timed(lambda: O.chat_completion(url + "/v1/chat/completions", CHAT, timeout=T))
    assert armed == [T, T] and T <= elapsed < LATE and result["timed_out"] and result["status"] is None, elapsed


def test_one_byte_at_a_time_body_is_bounded_in_total_not_per_read(serve, armed):
    """Each byte comes well within a per-read timeout: only a total deadline ends it."""
    def scenario(_request, sock, stop):
        sock.sendall(head("200 OK", "application/json", "content-length: 1000\r\n"))
        while not stop.wait(0.1):
            sock.sendall(b" ")
        return False

    (status, _body, error), elapsed = timed(lambda: O.http_request("GET", serve(scenario) + "/v1/models", timeout=T))
    assert armed == [T] and T <= elapsed < LATE, (armed, elapsed)
    assert status is None and "within 1 s" in error


def test_headers_dripped_byte_by_byte(serve, armed):
    def scenario(_request, sock, stop):
        for byte in b"HTTP/1.1 200 OK\r\nx-slow: " + b"a" * 1000:
            if stop.wait(0.05):
                break
            sock.sendall(bytes([byte]))
        return False

    (status, _body, error), elapsed = timed(lambda: O.http_request("GET", serve(scenario) + "/health", timeout=T))
    assert armed == [T] and T <= elapsed < LATE, (armed, elapsed)
    assert status is None and "within 1 s" in error


def test_slow_but_steady_stream_within_the_timeout_passes(serve):
    def scenario(_request, sock, _stop):
        sock.sendall(head(extra="transfer-encoding: chunked\r\n"))
        for word in ("a", "b", "c", "d"):
            time.sleep(0.1)
            sock.sendall(sse(piece(word)))
        sock.sendall(sse(piece("e", "length")) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        return True

    result = O.chat_completion(serve(scenario) + "/v", CHAT, timeout=3)
    assert result["error"] is None and result["text"] == "abcde" and result["tokens"] == 5
    # The first word comes after 0.1 s, the last after 0.4 s (later only on a loaded machine).
    assert result["ttft_s"] >= 0.1 and result["latency_s"] >= 0.4, result


def test_keep_alive_stream_without_the_last_chunk_returns_at_done(serve):
    """vLLM keeps the connection open after [DONE]: the client stops at [DONE], it does not wait."""
    def scenario(_request, sock, stop):
        sock.sendall(head(extra="transfer-encoding: chunked\r\n") + sse(piece("x", "length")) +
                     sse({"choices": [], "usage": {"completion_tokens": 1}}) + chunk(b"data: [DONE]\n\n"))
        return idle(stop)

    result, elapsed = timed(lambda: O.chat_completion(serve(scenario) + "/v", CHAT, timeout=5))
    assert elapsed < 1 and result["error"] is None and result["done"] and result["tokens"] == 1


def last_token_then_silence(_request, sock, stop):
    sock.sendall(head(extra="transfer-encoding: chunked\r\n") + sse(piece("x", "length")))
    return idle(stop)


def test_no_done_after_the_last_token_on_a_kept_connection_times_out(serve, armed):
    result, elapsed = timed(lambda: O.chat_completion(serve(last_token_then_silence) + "/v", CHAT, timeout=T))
    assert armed == [T] and T <= elapsed < LATE, (armed, elapsed)
    assert result["timed_out"] and result["error"].endswith("within 1 s (1 token(s) so far)"), result


def test_a_read_ended_by_the_sockets_own_timeout_is_the_timeout_too(serve, armed_held):
    """The socket's own timeout is as long as the watchdog's and may end a read before the timer
    thread has run (on a loaded machine it did): that is the request's timeout all the same, not a
    read error. Here the timer never fires, so only the socket's timeout ends the reads."""
    started = armed_held
    url = serve(last_token_then_silence)
    result, elapsed = timed(lambda: O.chat_completion(url + "/v", CHAT, timeout=SHORT))
    assert started == [SHORT] and SHORT <= elapsed < 1.9 * SHORT, (started, elapsed)
    assert result["timed_out"] is True and result["text"] == "x", result
    assert result["error"] == "no complete answer from %s/v within 0.3 s (1 token(s) so far)" % url

    def head_then_silence(_request, sock, stop):
        sock.sendall(head("200 OK", "application/json", "content-length: 100\r\n") + b'{"data": [')
        return idle(stop)

    url = serve(head_then_silence)
    (status, body, error), elapsed = timed(lambda: O.http_request("GET", url + "/v1/models", timeout=SHORT))
    assert started == [SHORT, SHORT] and SHORT <= elapsed < 1.9 * SHORT, (started, elapsed)
    assert (status, body, error) == (None, b"", "no complete answer from %s/v1/models within 0.3 s" % url)


# ------------------------------------------------------------------ huge and broken bodies


def test_huge_plain_body_is_read_up_to_the_limit(serve):
    def scenario(_request, sock, stop):
        sock.sendall(head("200 OK", "application/json", "content-length: 100000000000\r\n"))
        block = b"[" * 65536
        while not stop.is_set():
            sock.sendall(block)
        return False

    url = serve(scenario)
    (status, body, error), elapsed = timed(lambda: O.http_request("GET", url + "/metrics", timeout=10))
    assert elapsed < 5 and status is None and body == b""
    assert error == "%s/metrics: the answer is larger than %d bytes; stopped reading" % (url, O.MAX_BODY_BYTES)
    status, _body, error = O.http_request("GET", url + "/metrics", timeout=10, limit=1000)
    assert status is None and "larger than 1000 bytes" in error


def test_endless_sse_line_is_bounded(serve):
    def scenario(_request, sock, stop):
        sock.sendall(head(extra="transfer-encoding: chunked\r\n") + chunk(b"data: {\"x\": \""))
        while not stop.is_set():
            sock.sendall(chunk(b"y" * 65536))
        return False

    result, elapsed = timed(lambda: O.chat_completion(serve(scenario) + "/v", CHAT, timeout=10))
    assert elapsed < 5
    assert result["error"] == "stream: a line of the stream is longer than %d bytes" % O.MAX_LINE_BYTES


def test_body_shorter_than_its_content_length(serve):
    def scenario(_request, sock, _stop):
        sock.sendall(head("200 OK", "application/json", "content-length: 100\r\n") + b'{"data": []}')
        return False  # closes the connection 88 bytes early

    status, _body, error = O.http_request("GET", serve(scenario) + "/v1/models", timeout=5)
    assert status is None and "ended 88 bytes before its Content-Length" in error


def test_stream_cut_in_the_middle_is_an_error(serve):
    def scenario(_request, sock, _stop):
        sock.sendall(head(extra="transfer-encoding: chunked\r\n") + sse(piece("a")) + b"40\r\ndata: {")
        return False

    result = O.chat_completion(serve(scenario) + "/v", CHAT, timeout=5)
    assert result["error"].startswith("reading the answer failed: IncompleteRead") and result["text"] == "a"


def test_stream_closed_cleanly_without_done_is_an_error(serve):
    """Whole chunks and a proper end of the chunked body, but no [DONE]: the server stopped mid-answer."""
    def scenario(_request, sock, _stop):
        sock.sendall(head(extra="transfer-encoding: chunked\r\n") + sse(piece("a")) + sse(piece("b")) + b"0\r\n\r\n")
        return False

    result = O.chat_completion(serve(scenario) + "/v", CHAT, timeout=5)
    assert result["done"] is False and result["timed_out"] is False and result["text"] == "ab"
    assert result["error"].startswith("the stream ended without data: [DONE] after 2 chunk(s)")


def test_non_utf8_bytes(serve):
    def scenario(request, sock, _stop):
        if json.loads(request["body"]).get("stream"):
            sock.sendall(head(extra="transfer-encoding: chunked\r\n") +
                         chunk(b'data: {"choices": [{"delta": {"content": "ok\xff\xfe"}, "finish_reason": "length"}]}\n\n') +
                         chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        else:
            sock.sendall(plain("200 OK", b'{"choices": [{"message": {"content": "\xff"}}]}'))
        return True

    url = serve(scenario)
    streamed = O.chat_completion(url + "/v", CHAT, timeout=5)
    assert streamed["error"] is None and streamed["text"] == "ok\ufffd\ufffd" and streamed["tokens"] == 1
    whole = O.chat_completion(url + "/v", O.chat_body("quasar", "hi", 16, stream=False), timeout=5)
    assert whole["error"].startswith("completion not JSON (") and "utf-8" in whole["error"]


def test_nan_and_nonsense_numbers_in_json(serve):
    def scenario(request, sock, _stop):
        if json.loads(request["body"]).get("stream"):
            sock.sendall(head(extra="transfer-encoding: chunked\r\n") +
                         chunk(b'data: {"choices": [{"delta": {"content": NaN}}]}\n\n') +
                         chunk(b'data: {"choices": [{"delta": {"content": "a"}, "finish_reason": 7}]}\n\n') +
                         chunk(b'data: {"choices": [], "usage": {"completion_tokens": NaN}}\n\n') +
                         chunk(b'data: {"choices": [], "usage": {"completion_tokens": true}}\n\n') +
                         chunk(b'data: {"choices": [], "usage": {"completion_tokens": -4}}\n\n') +
                         chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        else:
            sock.sendall(plain("200 OK", b'{"choices": [{"message": {"content": Infinity}}], '
                                         b'"usage": {"completion_tokens": 1e400}}'))
        return True

    url = serve(scenario)
    streamed = O.chat_completion(url + "/v", CHAT, timeout=5)
    # No usable usage: the chunks with text; the finish reason 7 is no finish reason.
    assert streamed["error"] is None and streamed["tokens"] == 1 and streamed["finish_reason"] is None
    whole = O.chat_completion(url + "/v", O.chat_body("quasar", "hi", 16, stream=False), timeout=5)
    assert whole["error"] is None and whole["tokens"] == 0 and whole["text"] == ""


def test_deeply_nested_json_is_an_error_not_a_recursion_error(serve):
    url = serve(lambda request, sock, stop: sock.sendall(plain("200 OK", "[" * 200000)) or True)
    status, body, error = O.http_request("GET", url + "/v1/models", timeout=5)
    assert status == 200 and error is None
    listing, error = O.parse_json(body)
    assert listing is None and error.startswith("not JSON (")
    result = O.chat_completion(url + "/v", O.chat_body("quasar", "hi", 16, stream=False), timeout=5)
    assert result["error"].startswith("completion not JSON")


def test_line_separators_inside_json_strings_do_not_cut_the_line(serve):
    """vLLM writes non-ASCII unescaped; U+2028 and U+0085 are no SSE line ends."""
    def scenario(_request, sock, _stop):
        sock.sendall(head(extra="transfer-encoding: chunked\r\n") + sse(piece("a\u2028b\u0085c\u000bd", "stop")) +
                     chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        return True

    result = O.chat_completion(serve(scenario) + "/v", CHAT, timeout=5)
    assert result["error"] is None and result["text"] == "a\u2028b\u0085c\u000bd"


def test_events_split_anywhere_across_reads():
    data = ('data: {"choices": [{"delta": {"content": "caf\u00e9 \u2713"}}]}\r\n\r\n'
            ': ping\r\n\r\ndata: [DONE]\r\n\r\n').encode("utf-8")
    for size in (1, 2, 3, 7):
        pieces = [data[i:i + size] for i in range(0, len(data), size)]
        result = O.read_chat_stream(pieces, 0.0, lambda: 0.0)
        assert result["text"] == "caf\u00e9 \u2713" and result["done"] and result["error"] is None, size


# ------------------------------------------------------------------ empty-text chunks, TTFT, token count


def test_ttft_and_token_fallback_skip_empty_chunks(serve):
    def scenario(_request, sock, _stop):
        sock.sendall(head(extra="transfer-encoding: chunked\r\n") + sse(piece("")))
        for _held in range(3):  # the detokenizer holding back an incomplete UTF-8 character
            time.sleep(0.1)
            sock.sendall(sse(piece("")))
        sock.sendall(sse(piece("\u00e9")) + sse(piece("")) + sse(piece(" ok", "length")) +
                     chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        return True

    body = O.chat_body("quasar", "hi", 6)
    del body["stream_options"]
    result = O.chat_completion(serve(scenario) + "/v", body, timeout=5)
    assert result["error"] is None and result["text"] == "\u00e9 ok"
    assert result["tokens"] == 2                    # chunks with text only
    assert result["ttft_s"] >= 0.3                  # not the role chunk, not the empty ones
    assert result["finish_reason"] == "length"


# ------------------------------------------------------------------ error bodies


@pytest.mark.parametrize("body, message", [
    ('{"object":"error","message":"max_tokens must be at least 1, got 0.","type":"BadRequestError",'
     '"param":null,"code":400}', "max_tokens must be at least 1, got 0. (BadRequestError, 400)"),
    ('{"error":{"message":"The model `x` does not exist.","type":"NotFoundError","param":"model","code":404}}',
     "The model `x` does not exist. (NotFoundError, 404)"),
    ('{"error":"Unauthorized"}', "Unauthorized"),
    ('{"detail":"Not Found"}', "Not Found"),
    ('{"detail":[{"loc":["body","max_tokens"],"msg":"bad"}]}', '[{"loc": ["body", "max_tokens"], "msg": "bad"}]'),
    ('{"message": "engine dead"}', "engine dead"),
    ('{"error": {"code": 500}}', '{"code": 500}'),
    ("<html>Bad Gateway</html>", "<html>Bad Gateway</html>"),
    ("", "(empty body)"),
    ("[" * 5000, "[" * 297 + "..."),
])
def test_error_message_reads_every_error_shape(body, message):
    assert O.error_message(body) == message
    assert O.error_message(body.encode()) == message


def test_error_bodies_over_http_flat_nested_and_in_stream(serve):
    def scenario(request, sock, _stop):
        if request["path"] == "/flat":
            sock.sendall(plain("400 Bad Request", '{"object":"error","message":"flat one","type":"BadRequestError",'
                                                  '"param":null,"code":400}'))
        elif request["path"] == "/nested":
            sock.sendall(plain("404 Not Found", '{"error":{"message":"nested one","type":"NotFoundError",'
                                                '"param":"model","code":404}}'))
        else:  # an error inside a stream: data: {"error": {...}} (0.8.5 serving_engine.py:112-123)
            sock.sendall(head(extra="transfer-encoding: chunked\r\n") + sse(piece("a")) +
                         sse({"error": {"object": "error", "message": "engine died", "type": "InternalServerError",
                                        "param": None, "code": 500}}) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        return True

    url = serve(scenario)
    assert O.chat_completion(url + "/flat", CHAT, timeout=5)["error"] == "HTTP 400: flat one (BadRequestError, 400)"
    assert O.chat_completion(url + "/nested", CHAT, timeout=5)["error"] == "HTTP 404: nested one (NotFoundError, 404)"
    streamed = O.chat_completion(url + "/stream", CHAT, timeout=5)
    assert streamed["error"] == "server error in stream: engine died (InternalServerError, 500)"


# ------------------------------------------------------------------ real vLLM answers, replayed


def recorded(name):
    with open(os.path.join(FIXTURES, name), "rb") as handle:
        raw = handle.read()
    raw = raw[raw.index(b"HTTP/1.1"):]
    top, _sep, body = raw.partition(b"\r\n\r\n")
    return top, body


def replay(name):
    """A scenario that answers with the recorded answer, re-chunked when it was chunked."""
    top, body = recorded(name)

    def scenario(_request, sock, stop):
        if b"transfer-encoding: chunked" in top:
            sock.sendall(top + b"\r\n\r\n")
            for event in body.split(b"\n\n")[:-1]:
                sock.sendall(chunk(event + b"\n\n"))
            sock.sendall(b"0\r\n\r\n")
        else:
            sock.sendall(top + b"\r\n\r\n" + body)
        return True

    return scenario


@pytest.mark.parametrize("name, tokens, text_start, finish", [
    ("chat_stream_usage.http", 10, " he(od he", "stop"),
    ("chat_stream_nousage.http", 12, "ply\f was", "length"),   # no usage: the 12 chunks with text of 16
])
def test_recorded_vllm_streams(serve, name, tokens, text_start, finish):
    result = O.chat_completion(serve(replay(name)) + "/v1/chat/completions", CHAT, timeout=5)
    assert result["error"] is None and result["done"]
    assert result["tokens"] == tokens and result["finish_reason"] == finish
    assert result["text"].startswith(text_start)


def test_recorded_vllm_text_completion_stream(serve):
    result = O.chat_completion(serve(replay("completions_stream_usage.http")) + "/v1/completions", CHAT, timeout=5)
    assert result["error"] is None and result["tokens"] == 16 and result["finish_reason"] == "length"


@pytest.mark.parametrize("name, message", [
    ("chat_maxtokens0.http", "HTTP 400: max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0) "
                             "(BadRequestError, 400)"),
    ("chat_wrongmodel.http", "HTTP 404: The model `nosuch` does not exist. Valid aliases: quasar. (NotFoundError, 404)"),
    ("models_nokey.http", "HTTP 401: Unauthorized"),
])
def test_recorded_vllm_errors(serve, name, message):
    assert O.chat_completion(serve(replay(name)) + "/v", CHAT, timeout=5)["error"] == message


def test_recorded_vllm_plain_answer_and_metrics(serve):
    result = O.chat_completion(serve(replay("chat_nostream.http")) + "/v",
                               O.chat_body("quasar", "hi", 4, stream=False), timeout=5)
    assert result["error"] is None and result["tokens"] == 4 and result["finish_reason"] == "length"
    status, body, error = O.http_request("GET", serve(replay("metrics.http")) + "/metrics", timeout=5)
    assert (status, error) == (200, None) and len(body) == 51658
    samples = [(n, labels) for n, labels in O.metric_samples(body) if n.startswith("vllm:")]
    assert ("vllm:num_requests_running", {"engine": "0", "model_name": "quasar"}) in samples
    assert set(labels.get("model_name") for _n, labels in samples) - {None} == {"quasar"}


# ------------------------------------------------------------------ the module's bounds


def run_module(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            openai_smoke.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def healthy_then(completion):
    def scenario(request, sock, stop):
        if request["path"] == "/health":
            sock.sendall(plain("200 OK", ""))
        elif request["path"] == "/v1/models":
            sock.sendall(plain("200 OK", '{"object":"list","data":[{"id":"quasar"}]}'))
        else:
            return completion(request, sock, stop)
        return True
    return scenario


def test_module_fails_within_request_timeout_on_a_dripping_completion(serve, capsys, armed):
    def drip(_request, sock, stop):
        sock.sendall(head(extra="transfer-encoding: chunked\r\n"))
        while not stop.wait(0.05):
            sock.sendall(chunk(b": ping\n\n"))
        return False

    url = serve(healthy_then(drip))
    (rc, result), elapsed = timed(lambda: run_module(capsys, {"url": url, "model": "quasar", "request_timeout": T}))
    # /health, /v1/models (both answer at once), the completion: each bounded by request_timeout.
    assert rc == 1 and armed == [T, T, T] and T <= elapsed < LATE, (armed, elapsed)
    assert result["msg"] == ("POST %s/v1/chat/completions failed: no complete answer from %s/v1/chat/completions "
                             "within 1 s (0 token(s) so far); raise request_timeout (now 1 s) if the server is only "
                             "slow" % (url, url))


def test_module_fails_within_request_timeout_on_silent_models(serve, capsys, armed):
    def scenario(request, sock, stop):
        if request["path"] == "/health":
            sock.sendall(plain("200 OK", ""))
            return True
        return idle(stop)

    url = serve(scenario)
    (rc, result), elapsed = timed(lambda: run_module(capsys, {"url": url, "model": "quasar", "request_timeout": T}))
    assert rc == 1 and armed == [T, T] and T <= elapsed < LATE, (armed, elapsed)
    assert "GET %s/v1/models failed: no complete answer" % url in result["msg"]
    assert "raise request_timeout (now 1 s)" in result["msg"]


def test_module_health_wait_is_bounded_by_health_timeout_with_a_silent_server(serve, capsys, armed):
    url = serve(lambda request, sock, stop: idle(stop))
    (rc, result), elapsed = timed(lambda: run_module(capsys, {"url": url, "model": "quasar", "health_timeout": T,
                                                              "request_timeout": T, "interval": 0.1}))
    # One health check of request_timeout s, which uses up health_timeout: no second one.
    assert rc == 1 and armed == [T] and T <= elapsed < LATE, (armed, elapsed)
    assert "No healthy answer from %s/health within 1 s (health_timeout)" % url in result["msg"]
    assert "no complete answer from %s/health within 1 s" % url in result["msg"]


def test_module_reports_nested_model_error(serve, capsys):
    def completion(_request, sock, _stop):
        sock.sendall(plain("404 Not Found", '{"error":{"message":"The model `quasar` does not exist.",'
                                            '"type":"NotFoundError","param":"model","code":404}}'))
        return True

    rc, result = run_module(capsys, {"url": serve(healthy_then(completion)), "model": "quasar"})
    assert rc == 1 and result["msg"].endswith("failed: HTTP 404: The model `quasar` does not exist. (NotFoundError, 404)")


def test_module_metrics_with_engine_and_model_name_labels(serve, capsys):
    def completion(request, sock, stop):
        if request["path"] == "/metrics":
            top, body = recorded("metrics.http")
            sock.sendall(top + b"\r\n\r\n" + body)
            return True
        sock.sendall(plain("200 OK", '{"choices":[{"message":{"content":"ready"},"finish_reason":"stop"}],'
                                     '"usage":{"completion_tokens":1}}'))
        return True

    rc, result = run_module(capsys, {"url": serve(healthy_then(completion)), "model": "quasar", "stream": False,
                                     "check_metrics": True})
    assert rc == 0, result
    assert result["metrics_models"] == ["quasar"] and result["metrics"] > 20


# ------------------------------------------------------------------ one deadline, whatever the server does (issue 24)
#
# Properties over a drawn misbehaviour: how the answer is framed (chunked or Content-Length on a kept
# connection; chunked, Content-Length, until-close or HTTP/1.0 with Connection: close, after which
# http.client keeps no socket on the connection), what the server does once the headers are out
# (keep-alive comments, one byte at a time, nothing), how often, and after how many tokens. Every
# request ends by its deadline (DT) plus scheduling noise (MARGIN), with a message naming the
# deadline; the servers give up after HOLD seconds, so a request that ignores its deadline fails the
# property instead of hanging. No shrinking: each example costs real seconds, and a failing one
# HOLD seconds.

DT = 0.5
MARGIN = 0.45
HOLD = 3.0
FRAMINGS = ("chunked", "length", "chunked+close", "length+close", "until-close", "http/1.0")
MISBEHAVIOURS = ("comments", "drip", "silence")
REAL_TIME = settings(max_examples=12, deadline=None, database=None, phases=(Phase.explicit, Phase.generate),
                     suppress_health_check=list(HealthCheck))


def framed_head(framing, status="200 OK", ctype="text/event-stream; charset=utf-8"):
    extra = {"chunked": "transfer-encoding: chunked\r\n", "length": "content-length: 1000000\r\n",
             "until-close": "connection: close\r\n", "http/1.0": ""}
    lines = extra.get(framing) or extra[framing.split("+")[0]] + "connection: close\r\n"
    version = "HTTP/1.0" if framing == "http/1.0" else "HTTP/1.1"
    return ("%s %s\r\ncontent-type: %s\r\n%s\r\n" % (version, status, ctype, lines)).encode()


def framed(framing, data):
    return chunk(data) if framing.startswith("chunked") else data


def misbehaving(framing, kind, interval, tokens=0, delay=0.0):
    """A scenario: after ``delay`` s the headers and ``tokens`` tokens, then ``kind`` every ``interval`` s
    for HOLD s (a chunked drip is one chunk of a million bytes, sent a byte at a time)."""
    def scenario(_request, sock, stop):
        if stop.wait(delay):
            return False
        sock.sendall(framed_head(framing) + framed(framing, sse_text(piece("t"))) * tokens)
        if kind == "drip" and framing.startswith("chunked"):
            sock.sendall(b"%x\r\n" % 1000000)
        ends = time.monotonic() + HOLD
        while time.monotonic() < ends and not stop.wait(interval):
            if kind != "silence":
                sock.sendall(b" " if kind == "drip" else framed(framing, b": ping\n\n"))
        return False
    return scenario


class Misbehaving:
    """A RawServer running one scenario, for one hypothesis example (function fixtures outlive examples)."""

    def __init__(self, scenario):
        self.server = RawServer(scenario)
        self.url = self.server.url

    def __enter__(self):
        return self

    def __exit__(self, *_exc):
        self.server.close()


def ask(client, url, timeout=DT):
    """One request of ``client`` (http_request, chat_completion or the benchmark's stream_request) as
    ``(timed_out, error)``, and its seconds."""
    began = time.monotonic()
    if client == "http_request":
        status, _body, error = O.http_request("GET", url, timeout=timeout)
        outcome = (status is None and (error or "").startswith("no complete answer"), error)
    elif client == "chat_completion":
        result = O.chat_completion(url, CHAT, timeout=timeout)
        outcome = (result["timed_out"], result["error"])
    else:
        result = vllm_benchmark.stream_request(url, json.dumps(CHAT).encode(), {}, timeout)
        outcome = (result["timed_out"], result["error"])
    return outcome, time.monotonic() - began


CLIENTS = ("http_request", "chat_completion", "stream_request")


@REAL_TIME
@given(framing=st.sampled_from(FRAMINGS), kind=st.sampled_from(MISBEHAVIOURS), interval=st.floats(0.01, 0.2),
       tokens=st.integers(0, 3), client=st.sampled_from(CLIENTS))
# The cases: keep-alive comments forever, a body dripped a byte at a time, each on a kept
# connection and after Connection: close (http.client then drops its socket from the connection).
@example(framing="chunked", kind="comments", interval=0.05, tokens=1, client="chat_completion")
@example(framing="chunked+close", kind="comments", interval=0.05, tokens=1, client="chat_completion")
@example(framing="length", kind="drip", interval=0.05, tokens=0, client="http_request")
@example(framing="length+close", kind="drip", interval=0.05, tokens=0, client="http_request")
@example(framing="until-close", kind="comments", interval=0.05, tokens=2, client="stream_request")
def test_every_request_ends_at_its_deadline_whatever_the_body_does(framing, kind, interval, tokens, client):
    """Keep-alive comments forever, a body dripped a byte at a time (each read well within any
    per-read timeout), or silence, on a kept connection or after Connection: close."""
    with Misbehaving(misbehaving(framing, kind, interval, tokens)) as server:
        url = server.url + "/v1/chat/completions"
        (timed_out, error), elapsed = ask(client, url)
    assert elapsed < DT + MARGIN, (elapsed, error)
    assert timed_out and error.startswith(O.timeout_message(url, DT)), error
    assert "within 0.5 s" in error


@REAL_TIME
@given(framing=st.sampled_from(FRAMINGS), kind=st.sampled_from(MISBEHAVIOURS + ("at once",)),
       delay=st.floats(0.0, 2 * DT), interval=st.floats(0.01, 0.2))
@example(framing="length", kind="at once", delay=0.9, interval=0.05)
@example(framing="length", kind="drip", delay=0.2, interval=0.05)
@example(framing="http/1.0", kind="drip", delay=0.2, interval=0.05)
def test_a_slow_health_check_ends_at_its_deadline(framing, kind, delay, interval):
    """/health answering late, or its headers in time and its body slowly (or never)."""
    def health(request, sock, stop):
        if kind != "at once":
            return misbehaving(framing, kind, interval, 0, delay)(request, sock, stop)
        if not stop.wait(delay):
            sock.sendall(plain("200 OK", ""))
        return False

    with Misbehaving(health) as server:
        url = server.url + "/health"
        (status, _body, error), elapsed = timed(lambda: O.http_request("GET", url, timeout=DT))
    assert elapsed < DT + MARGIN, (elapsed, error)
    if kind == "at once" and delay < DT - 0.2:
        assert (status, error) == (200, None)
    elif kind != "at once" or delay > DT + 0.05:
        assert (status, error) == (None, O.timeout_message(url, DT))


@REAL_TIME
@given(framing=st.sampled_from(FRAMINGS), cut=st.floats(0.0, 1.0), client=st.sampled_from(CLIENTS))
def test_a_connection_closed_anywhere_in_the_answer_ends_it_at_once(framing, cut, client):
    """The server closes its connection after any number of bytes of a complete answer: the request
    ends there, long before its deadline (for the benchmark an error unless the whole answer came)."""
    events = [sse_text(piece("a")), sse_text(piece("b", "length")), b"data: [DONE]\n\n"]
    body = b"".join(framed(framing, event) for event in events) + (b"0\r\n\r\n" if framing.startswith("chunked") else b"")
    whole = framed_head(framing).replace(b"1000000", b"%d" % len(body)) + body
    sent = whole[:int(round(cut * len(whole)))]

    def scenario(_request, sock, _stop):
        sock.sendall(sent)
        return False

    with Misbehaving(scenario) as server:
        (timed_out, error), elapsed = ask(client, server.url + "/v1/chat/completions", timeout=10)
    assert elapsed < DT + MARGIN and not timed_out, (elapsed, error)
    if sent == whole:
        assert error is None
    elif client == "stream_request":  # the others take a body cut where no length was promised as whole
        assert error, "a stream cut before its end is an error"


# ------------------------------------------------------------------ the modules' deadlines (issue 24)


@REAL_TIME
@given(step=st.sampled_from(("/health", "/v1/models", "/v1/chat/completions")), framing=st.sampled_from(FRAMINGS),
       kind=st.sampled_from(MISBEHAVIOURS), interval=st.floats(0.01, 0.2), health_timeout=st.sampled_from([0, 0.5]))
def test_openai_smoke_fails_by_its_deadlines_whatever_a_step_does(capsys, step, framing, kind, interval, health_timeout):
    """request_timeout 1 s; /health misbehaving uses up health_timeout and its one check of 1 s."""
    bad = misbehaving(framing, kind, interval)

    def scenario(request, sock, stop):
        if request["path"] == step:
            return bad(request, sock, stop)
        return healthy_then(bad)(request, sock, stop)

    with Misbehaving(scenario) as server:
        url = server.url
        (rc, result), elapsed = timed(lambda: run_module(capsys, {
            "url": url, "model": "quasar", "request_timeout": 1, "health_timeout": health_timeout, "interval": 0.1}))
    assert rc == 1 and result["failed"] and elapsed < 1 + health_timeout + MARGIN, (elapsed, result["msg"])
    late = "no complete answer from %s%s within 1 s" % (url, step)
    if step == "/health":
        assert result["msg"].startswith("No healthy answer from %s/health within %g s (health_timeout): " % (
            url, health_timeout)) and late in result["msg"], result["msg"]
    else:
        assert late in result["msg"] and result["msg"].endswith("; raise request_timeout (now 1 s) if the server "
                                                                "is only slow"), result["msg"]


def run_benchmark(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            vllm_benchmark.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


@REAL_TIME
@given(framing=st.sampled_from(FRAMINGS), kind=st.sampled_from(MISBEHAVIOURS), interval=st.floats(0.01, 0.2),
       tokens=st.integers(0, 2), warmup=st.booleans())
def test_vllm_benchmark_fails_by_its_deadline_whatever_the_stream_does(capsys, framing, kind, interval, tokens, warmup):
    with Misbehaving(misbehaving(framing, kind, interval, tokens)) as server:
        url = server.url
        (rc, result), elapsed = timed(lambda: run_benchmark(capsys, {
            "url": url, "model": "quasar", "concurrency": [1], "runs": 1, "max_tokens": 4, "warmup": warmup,
            "request_timeout": 1, "total_timeout": 60}))
    assert rc == 1 and result["failed"] and elapsed < 1 + MARGIN, (elapsed, result["msg"])
    assert "no complete answer from %s/v1/chat/completions within 1 s (%d token event(s) so far); raise " \
           "request_timeout (now 1 s)" % (url, tokens) in result["msg"], result["msg"]
