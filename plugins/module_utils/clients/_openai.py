# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A small client for OpenAI-compatible servers (vLLM's API server), standard library only.

Private to labfleet.vllm (the leading underscore): no stability promise to other collections.

- ``check_number`` / ``check_url`` / ``check_name``: option checks that never raise (NaN, inf,
  huge integers, non-ASCII digits, control characters) and say what is expected.
- ``http_request``: one HTTP request that never raises for network or HTTP errors. Its timeout
  bounds the WHOLE request (connect, headers, body), not each socket read: a watchdog shuts the
  socket (its own reference, which ``Connection: close`` cannot take away) down when the time is
  up, and each read of the body starts only before the deadline and waits at most until it, so a
  server that trickles bytes or keep-alive comments cannot hold it. Bodies are read up to a byte
  limit.
- ``iter_sse_data`` / ``stream_chunks`` / ``read_chat_stream``: server-sent events as vLLM streams
  them (``data: {json}`` blocks separated by blank lines, ending with ``data: [DONE]``; chunks with
  empty text in the middle; the last token and ``finish_reason`` in one chunk). stream_chunks is
  the one reader of a stream's chunks (the smoke test's read_chat_stream, the benchmark's
  _bench.stream_events).
- ``error_message``: the message of vLLM's error bodies, flat (0.8.5) or nested (newer releases).
- ``wait_for_health``: polls ``/health`` and a container probe, with progress lines, and stops
  early when the container exited or its unit restarted it.

HTTP goes through http.client (HTTP/1.1: keep-alive and chunked transfer encoding are decoded by
it; unit tests run local servers); the clock, sleep and the container probe are passed in, so the
health wait is tested with fakes.

What real vLLM sends (verified against ../shared/reference/vllm-http/, recorded from a vLLM
server, and the 0.8.5 / 0.19.1 sources):
- error bodies: 0.8.5 ``{"object": "error", "message", "type", "param", "code"}``
  (vllm-0.8.5 vllm/entrypoints/openai/protocol.py:79-84, returned by api_server.py:428-430);
  0.19.1 ``{"error": {"message", "type", "param", "code"}}`` (vllm-0.19.1
  vllm/entrypoints/openai/engine/protocol.py:58-66; chat_maxtokens0.http, chat_wrongmodel.http);
  errors inside a stream are ``data: {"error": {...}}`` in both (0.8.5 serving_engine.py:112-123);
  the API key middleware answers ``{"error": "Unauthorized"}`` (0.8.5 api_server.py:854-855;
  models_nokey.http); unknown routes ``{"detail": "Not Found"}`` (notfound.http).
- empty-text chunks mid-stream: the detokenizer holds back text that ends in an incomplete UTF-8
  character (vllm-0.8.5 vllm/transformers_utils/detokenizer_utils.py:180; chat_stream_*.http).
- with ``finish_reason: length`` the last token and the finish reason share one chunk
  (vllm-0.8.5 vllm/entrypoints/openai/serving_chat.py:763-830; chat_stream_nousage.http).
- metrics carry ``model_name`` and ``engine`` labels (vllm-0.8.5 vllm/v1/metrics/loggers.py:141-145;
  metrics.http). All verified.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import re
import socket
import ssl
import threading
import time

try:  # Python 3
    from http.client import HTTPConnection, HTTPException, HTTPSConnection
    from urllib.parse import urlsplit
except ImportError:  # pragma: no cover - the collection's modules need Python 3
    HTTPConnection = HTTPSConnection = None
    HTTPException = Exception
    urlsplit = None

# How much of a response body ends up in a message.
BODY_EXCERPT = 300
# Container states that end the health wait at once.
DEAD_STATES = ("exited", "dead", "restarted", "failed")
# Bounded reads. A plain answer (/health, /v1/models, a completion, /metrics: 51,658 bytes in
# metrics.http) is far below 8 MiB; a stream is bounded in bytes and, above all, in time.
MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_STREAM_BYTES = 64 * 1024 * 1024
# One SSE line (one ``data:`` chunk is about 250 bytes in chat_stream_usage.http).
MAX_LINE_BYTES = 1024 * 1024
# Generated text kept in memory (the module returns 200 characters of it).
KEEP_TEXT = 4096
# A token count above this is nonsense from the server, not a count.
MAX_TOKEN_COUNT = 10 ** 9
# Progress lines kept by wait_for_health (the first one and the newest ones).
MAX_PROGRESS_LINES = 200
READ_SIZE = 65536

_ASCII_NUMBER = re.compile(r"^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$")
_LINE_END = re.compile(b"\r\n|\r|\n")


def short(text, limit=BODY_EXCERPT):
    """One line of at most ``limit`` characters (bytes are decoded leniently)."""
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text[:limit * 4 + 16].decode("utf-8", "replace")
    try:
        text = str(text)
    except ValueError:  # an integer too long to print (Python's int max_str_digits)
        return "(too long to show)"
    text = " ".join(text[:limit * 4 + 16].split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def show_value(value):
    """A short, safe rendering of an option value for a message (never raises)."""
    if isinstance(value, bool):
        return repr(value)
    if isinstance(value, int) and abs(value) >= 10 ** 15:
        return "an integer of about %d digits" % int(value.bit_length() * 0.30103 + 1)
    if isinstance(value, float):
        return repr(value)
    return short(repr(value), 60)


def _fmt(number):
    """``120`` for 120.0, ``1000000`` for 1e6, ``0.5`` for 0.5 (for messages)."""
    if number == int(number) and abs(number) < 10 ** 15:
        return "%d" % number
    return "%g" % number


def check_number(name, value, low, high, integer=False, unit=""):
    """Convert an option value to a number in [``low``, ``high``]. Returns ``(number, None)`` or
    ``(None, message)``; never raises.

    Accepted: int, float and ASCII decimal strings (``"30"``, ``"2.5"``, ``"1e3"``). Refused with a
    message that names the option and the range: booleans, NaN, infinities, numbers out of range,
    non-integers where an integer is expected, non-ASCII digits, anything else.
    """
    kind = "an integer" if integer else "a number"
    expected = "%s must be %s from %s to %s%s" % (name, kind, _fmt(low), _fmt(high), unit and " " + unit)
    if isinstance(value, bool) or value is None:
        return None, "%s, got %s" % (expected, show_value(value))
    if isinstance(value, str):
        text = value.strip()
        if len(text) > 64 or not _ASCII_NUMBER.match(text):
            return None, "%s, got %s" % (expected, show_value(value))
        value = float(text)  # a matched ASCII number: never raises (huge -> inf)
    if isinstance(value, int):
        if value < low or value > high:
            return None, "%s, got %s" % (expected, show_value(value))
        return (int(value) if integer else float(value)), None
    if not isinstance(value, float):
        return None, "%s, got %s" % (expected, show_value(value))
    if math.isnan(value) or math.isinf(value) or value < low or value > high:
        return None, "%s, got %s" % (expected, show_value(value))
    if integer:
        if value != math.floor(value):
            return None, "%s (a whole number), got %s" % (expected, show_value(value))
        return int(value), None
    return value, None


def check_url(url):
    """None when ``url`` is a usable ``http(s)://host[:port][/path]`` base URL, else a message."""
    if not isinstance(url, str) or not url:
        return "url must be a base URL such as http://127.0.0.1:8000, got %s" % show_value(url)
    if any(ord(c) < 33 or ord(c) == 127 for c in url):
        return "url must not contain spaces or control characters, got %s" % show_value(url)
    if not url.startswith(("http://", "https://")):
        return "url must start with http:// or https://, got %s" % show_value(url)
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError when out of range or not a number
    except ValueError as exc:
        return "url has a bad host or port (%s), got %s" % (short(exc, 80), show_value(url))
    if not parts.hostname:
        return "url has no host name, got %s" % show_value(url)
    if port == 0:
        return "url has port 0, got %s" % show_value(url)
    if parts.query or parts.fragment:
        return "url must be a base URL without ?query or #fragment, got %s" % show_value(url)
    return None


def _has_control(text):
    return any(ord(c) < 32 or ord(c) == 127 for c in text)


def check_client_options(params, number_options):
    """Check and convert, in place, the options every client module of an OpenAI-compatible server
    takes: the number options (``(name, low, high, integer[, required])``; a None that is not required
    stays None), C(url), C(model) and C(api_key). Returns the first problem as a message that names
    the option (never the key's value), or None."""
    for option in number_options:
        name, low, high, integer = option[:4]
        if params[name] is None and not (option[4] if len(option) > 4 else True):
            continue
        value, error = check_number(name, params[name], low, high, integer=integer)
        if error:
            return error
        params[name] = value
    error = check_url(params["url"])
    if error:
        return error
    model = params["model"]
    if not model or _has_control(model) or len(model) > 1024:
        return "model must be the served model name (not empty, no control characters), got %r" % short(model, 80)
    if _has_control(params["api_key"] or ""):
        return "api_key contains a control character (a newline or carriage return?); give the key alone"
    return None


def client_argument_spec(**options):
    """The argument spec of a client module: C(url), C(model) and C(api_key) (the labfleet.vllm.openai_client
    doc fragment documents them) and the module's own ``options``."""
    spec = dict(url=dict(type="str", required=True), model=dict(type="str", required=True),
                api_key=dict(type="str", default="", no_log=True))
    spec.update(options)
    return spec


def checked_params(module, check):
    """The module's parameters once ``check(params)`` (which converts them in place) found no problem;
    fails the module with the problem's message otherwise."""
    problem = check(module.params)
    if problem:
        module.fail_json(msg=problem)
    return module.params


def check_name(name, value, pattern, expected):
    """None when ``value`` is empty or fully matches ``pattern``, else a message."""
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > 255 or not re.match(pattern + r"\Z", value):
        return "%s must be %s, got %s" % (name, expected, show_value(value))
    return None


def join_url(base, path):
    """``http://h:8000`` + ``/v1/models`` without doubled or missing slashes."""
    return base.rstrip("/") + "/" + path.lstrip("/")


def auth_headers(api_key=None):
    """Request headers; ``Authorization: Bearer`` only when a key is set."""
    headers = {"Accept": "application/json", "User-Agent": "labfleet-openai-smoke"}
    if api_key:
        headers["Authorization"] = "Bearer %s" % api_key
    return headers


def redact(text, secrets):
    """Replace every non-empty secret in ``text`` by ``********``."""
    if text is None:
        return text
    for secret in secrets or ():
        if secret:
            text = text.replace(secret, "********")
    return text


class Deadline:
    """A point in time ``seconds`` from now on ``clock``; ``remaining()`` may go negative."""

    def __init__(self, seconds, clock=time.monotonic):
        self.seconds = seconds
        self.clock = clock
        self.ends = clock() + seconds

    def remaining(self):
        return self.ends - self.clock()

    def expired(self):
        return self.remaining() <= 0


def timeout_message(url, seconds):
    return "no complete answer from %s within %s s" % (url, _fmt(seconds))


class Unreachable(Exception):
    """No HTTP answer: refused, reset, timed out, bad URL."""

    def __init__(self, message, timed_out=False):
        Exception.__init__(self, message)
        self.timed_out = timed_out


class _Watchdog:
    """Ends one request at its deadline, whatever the server does.

    Two ways, either enough on its own:

    - a timer thread shuts the request's socket down when the time is up: every blocking call on it
      (connect, TLS handshake, send, each read of the headers or the body) then returns at once;
    - before each read of the body the reader asks ``before_read()``, which says whether time is
      left and sets the socket's own timeout to exactly that time: a read never waits past the
      deadline, and a body dripped a byte at a time or pinged with keep-alive comments is cut at
      the first read after it.

    The watchdog keeps its own reference to the socket (``hold``): after an answer with
    ``Connection: close`` (or HTTP/1.0, or a body that ends when the connection does) http.client
    drops the socket from the connection and leaves it to the response alone. The flag is set
    before the socket is looked up, and the request checks the flag after its socket exists, so no
    order of the two threads lets a request run on past its deadline.

    ``clock`` and ``timer`` are time.monotonic and threading.Timer; unit tests pass others to see
    the deadline a request gets, or a timer that never fires.
    """

    def __init__(self, seconds, clock=time.monotonic, timer=threading.Timer):
        self.seconds = max(float(seconds), 0.0)
        self.fired = False
        self.connection = None
        self.sock = None
        self.ends = None
        self._clock = clock
        self._timer = timer(self.seconds, self._fire)
        self._timer.daemon = True

    def start(self):
        """Start the timer; the request's deadline (``ends``) is ``seconds`` from now on the clock."""
        self.ends = self._clock() + self.seconds
        self._timer.start()

    def hold(self, sock):
        """Keep the request's socket (the connection may let go of it); shut it at once when the
        timer already fired."""
        self.sock = sock
        if self.fired:
            self._fire()

    def _fire(self):
        self.fired = True
        for sock in (self.sock, getattr(self.connection, "sock", None)):
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except (OSError, ValueError):
                    pass

    def remaining(self):
        """Seconds left before the deadline (the whole timeout before ``start``); 0 once expired."""
        if self.fired:
            return 0.0
        if self.ends is None:
            return self.seconds
        return max(self.ends - self._clock(), 0.0)

    def expired(self):
        """Whether the request's time is up: the timer fired, or the deadline has passed on the clock.

        The socket's own timeout is set to the time left before each read, so a read that waited
        for it ends at or after the deadline, possibly before the timer thread ran: that read error
        is the timeout too.
        """
        return self.fired or (self.ends is not None and self._clock() >= self.ends)

    def before_read(self):
        """True when time is left for one more blocking call (a read of the body; in open_request
        also the send and the headers), with the held socket's timeout set to that time; False at
        or after the deadline."""
        if self.expired():
            return False
        if self.sock is not None:
            try:
                self.sock.settimeout(max(self.remaining(), 0.001))
            except (OSError, ValueError):  # closed meanwhile: the read reports it
                pass
        return True

    def stop(self):
        """Cancel the timer (the request ended)."""
        self._timer.cancel()


def open_request(method, url, body=None, headers=None, timeout=10.0):
    """Send one request; returns ``(connection, response, watchdog)``, raises Unreachable.

    ``timeout`` bounds the whole exchange, the body included: the caller reads the body with
    ``read_pieces``/``read_body`` given the watchdog, and then calls ``watchdog.stop()`` and
    ``connection.close()``.
    """
    watchdog = _Watchdog(timeout)
    connection = None
    try:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("not an http(s) URL")
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        if parts.scheme == "https":
            connection = HTTPSConnection(parts.hostname, parts.port, timeout=timeout,
                                         context=ssl.create_default_context())
        else:
            connection = HTTPConnection(parts.hostname, parts.port, timeout=timeout)
        watchdog.connection = connection
        watchdog.start()
        connection.connect()
        watchdog.hold(connection.sock)
        if not watchdog.before_read():
            raise socket.timeout("timed out")
        connection.request(method, path, body=body, headers=dict(headers or {}))
        if not watchdog.before_read():
            raise socket.timeout("timed out")
        return connection, connection.getresponse(), watchdog
    except (socket.timeout, OSError, ValueError, HTTPException) as exc:
        watchdog.stop()
        if connection is not None:
            connection.close()
        if watchdog.expired() or isinstance(exc, socket.timeout):
            raise Unreachable(timeout_message(url, timeout), timed_out=True)
        raise Unreachable("cannot reach %s: %s" % (url, short(exc, 200) or exc.__class__.__name__))


def read_pieces(response, limit, state, watchdog):
    """Yield what the server sends, piece by piece, at most ``limit`` bytes in all.

    Stops quietly at the end of the body; a read error, a body cut short or a body over the limit
    ends it with ``state["error"]`` set. ``watchdog`` is the request's (open_request's): no read
    starts after its deadline or waits past it; the time running out ends the body with
    ``state["error"]`` set, and the caller, seeing ``watchdog.expired()``, reports the timeout.
    """
    total = 0
    while True:
        if not watchdog.before_read():
            state["error"] = "the request's time ran out after %d bytes of the answer" % total
            return
        try:
            piece = response.read1(READ_SIZE)
        except (socket.timeout, OSError, ValueError, HTTPException) as exc:
            state["error"] = "reading the answer failed: %s" % (short(exc, 200) or exc.__class__.__name__)
            return
        if not piece:
            left = getattr(response, "length", None)
            if isinstance(left, int) and left > 0:  # Content-Length promised more than came
                state["error"] = "the answer ended %d bytes before its Content-Length" % left
            return
        total += len(piece)
        if total > limit:
            state["error"] = "the answer is larger than %d bytes; stopped reading" % limit
            return
        yield piece


def read_body(response, limit, watchdog):
    """``(body, error)`` of a whole (bounded) response body (``watchdog``: as for read_pieces)."""
    state = {"error": None}
    body = b"".join(read_pieces(response, limit, state, watchdog))
    return body, state["error"]


def http_request(method, url, payload=None, headers=None, timeout=10.0, limit=MAX_BODY_BYTES):
    """Send one request. Returns ``(status, body_bytes, error)``.

    ``status`` is the HTTP status (also for 4xx/5xx answers) or None when no complete answer came
    (refused, reset, bad URL, a body larger than ``limit`` bytes, or not all of it within
    ``timeout`` seconds, which bound the whole request); ``error`` then says why. Never raises for
    those.
    """
    data = None
    all_headers = dict(headers or {})
    if payload is not None:
        data = json.dumps(payload).encode("utf-8")
        all_headers["Content-Type"] = "application/json"
    try:
        connection, response, watchdog = open_request(method, url, data, all_headers, timeout)
    except Unreachable as exc:
        return None, b"", str(exc)
    try:
        body, error = read_body(response, limit, watchdog)
        if watchdog.expired():
            return None, b"", timeout_message(url, timeout)
        if error:
            return None, b"", "%s: %s" % (url, error)
        return response.status, body, None
    finally:
        watchdog.stop()
        connection.close()


def parse_json(body):
    """``(object, None)`` or ``(None, error)`` for a response body. Never raises (deep nesting,
    bad UTF-8 and numbers too long to convert are errors)."""
    try:
        if isinstance(body, bytes):
            body = body.decode("utf-8")
        return json.loads(body), None
    except (ValueError, UnicodeDecodeError, RecursionError, TypeError) as exc:
        return None, "not JSON (%s): %s" % (short(exc, 80), short(body, 120))


def error_message(body):
    """The message of an error answer: vLLM 0.8.5's flat ``{"object": "error", "message", "type",
    "code"}``, newer releases' nested ``{"error": {"message", ...}}``, the API key middleware's
    ``{"error": "Unauthorized"}``, FastAPI's ``{"detail": ...}``; else the start of the body.
    ``body`` is bytes, text or an already parsed object."""
    obj = body
    if isinstance(body, (bytes, str)):
        obj, error = parse_json(body)
        if error:
            return short(body) or "(empty body)"
    if isinstance(obj, dict):
        inner = obj.get("error")
        if isinstance(inner, str) and inner:
            return short(inner)
        if isinstance(inner, dict):
            obj = inner
        message = obj.get("message")
        if message is None:
            message = obj.get("detail")
        if isinstance(message, str) and message:
            extra = [str(obj[key]) for key in ("type", "code")
                     if isinstance(obj.get(key), (str, int)) and not isinstance(obj.get(key), bool)]
            return short(message) + (" (%s)" % short(", ".join(extra), 80) if extra else "")
        if message is not None:
            return short(json.dumps(message, default=str))
    try:
        return short(json.dumps(obj, default=str))
    except (ValueError, TypeError, RecursionError):
        return short(repr(obj))


def model_ids(listing):
    """The ``id`` of every entry of a ``/v1/models`` answer (``{"data": [{"id": ...}]}``)."""
    if not isinstance(listing, dict) or not isinstance(listing.get("data"), list):
        return []
    return [entry["id"] for entry in listing["data"]
            if isinstance(entry, dict) and isinstance(entry.get("id"), str)]


def chat_body(model, prompt, max_tokens=16, temperature=0.7, stream=True):
    """The request body of one short chat completion."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": int(max_tokens),
        "temperature": float(temperature),
        "stream": bool(stream),
    }
    if stream:
        # vLLM (0.8.5 and newer) then sends a last chunk with the token counts.
        body["stream_options"] = {"include_usage": True}
    return body


def iter_lines(pieces, max_line=MAX_LINE_BYTES):
    """Lines (text, without their line ends) from pieces of a byte stream (bytes or str).

    Pieces may split lines and UTF-8 characters anywhere. Lines end at CRLF, LF or CR only (the
    SSE rule): unlike ``str.splitlines`` a U+2028 or U+0085 inside a JSON string (vLLM sends
    non-ASCII text unescaped) does not cut a line. Bytes that are not UTF-8 become U+FFFD. A line
    longer than ``max_line`` bytes raises ValueError.
    """
    pending = b""
    for piece in pieces:
        if isinstance(piece, str):
            piece = piece.encode("utf-8", "surrogatepass")
        pending += piece
        start = 0
        while True:
            match = _LINE_END.search(pending, start)
            if match is None or (match.group() == b"\r" and match.end() == len(pending)):
                break  # no line end yet, or a CR that may be the first half of a CRLF
            yield pending[start:match.start()].decode("utf-8", "replace")
            start = match.end()
        pending = pending[start:]
        if len(pending) > max_line:
            raise ValueError("a line of the stream is longer than %d bytes" % max_line)
    if pending:
        for line in _LINE_END.split(pending):
            if line:
                yield line.decode("utf-8", "replace")


def iter_sse_data(pieces):
    """Yield the ``data`` of each server-sent event from pieces of the stream (bytes or str).

    Lines of one event are joined with newlines; comments (``:``, e.g. keep-alive pings) and other
    fields are skipped; an event ends at a blank line or at the end of the input.
    """
    data = []
    for line in iter_lines(pieces):
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue
        field, sep, value = line.partition(":")
        if not sep:
            field, value = line, ""
        if value.startswith(" "):
            value = value[1:]
        if field == "data":
            data.append(value)
    if data:
        yield "\n".join(data)


def stream_item(data):
    """One SSE data field of a streamed completion: ("done", None, None) for the [DONE] marker,
    ("error", None, message) for a chunk that is not JSON or carries an error object, else
    ("chunk", parsed chunk, None). Shared by the smoke test and the benchmark."""
    if data.strip() == "[DONE]":
        return "done", None, None
    chunk, error = parse_json(data)
    if error:
        return "error", None, "stream chunk %s" % error
    if isinstance(chunk, dict) and chunk.get("error"):
        return "error", None, "server error in stream: %s" % error_message(chunk)
    return "chunk", chunk, None


def delta_text(chunk):
    """The text a chat (or completion) chunk carries, '' when none."""
    if not isinstance(chunk, dict):
        return ""
    parts = []
    choices = chunk.get("choices")
    for choice in choices if isinstance(choices, list) else []:
        if not isinstance(choice, dict):
            continue
        for holder in (choice.get("delta"), choice.get("message")):
            if isinstance(holder, dict) and isinstance(holder.get("content"), str):
                parts.append(holder["content"])
        if isinstance(choice.get("text"), str):
            parts.append(choice["text"])
    return "".join(parts)


def finish_reason(chunk):
    """The first non-empty ``finish_reason`` of a chunk's (or an answer's) choices, else None."""
    choices = chunk.get("choices") if isinstance(chunk, dict) else None
    for choice in choices if isinstance(choices, list) else []:
        if isinstance(choice, dict) and isinstance(choice.get("finish_reason"), str) and choice["finish_reason"]:
            return choice["finish_reason"]
    return None


def usage_tokens(obj):
    """``usage.completion_tokens`` when it is a plausible count (an int, not a bool, not NaN)."""
    usage = obj.get("usage") if isinstance(obj, dict) else None
    count = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if isinstance(count, int) and not isinstance(count, bool) and 0 <= count <= MAX_TOKEN_COUNT:
        return count
    return None


def stream_chunks(timed_data, state):
    """Read a streamed completion and yield each chunk with its time: ``(time, chunk)``.

    ``timed_data`` yields ``(time, data)``, ``data`` the text of one server-sent event's data
    field (iter_sse_data), ``time`` whatever the caller stamps it with (the benchmark: the clock
    when the event arrived; None when the caller needs no time). Reads until ``[DONE]``, an error
    chunk or the end; a ValueError from ``timed_data`` (a line over MAX_LINE_BYTES) ends it.

    ``state`` (a dict) holds, once the stream is read: ``done`` (``[DONE]`` came), ``error`` (a
    chunk that is not JSON or carries an error, the ValueError, or the end of the data before
    ``[DONE]``; None otherwise), ``chunks``
    (the chunks read, the marker and errors not counted), ``finish_reason`` (the last non-empty
    one) and ``usage_tokens`` (the server's ``completion_tokens``, or None). The one reader of the
    stream for the smoke test (read_chat_stream) and the benchmark (_bench.stream_events).
    """
    state.update(done=False, error=None, chunks=0, finish_reason=None, usage_tokens=None)
    try:
        for when, data in timed_data:
            kind, chunk, error = stream_item(data)
            if kind == "done":
                state["done"] = True
                return
            if kind == "error":
                state["error"] = error
                return
            state["chunks"] += 1
            state["finish_reason"] = finish_reason(chunk) or state["finish_reason"]
            count = usage_tokens(chunk)
            if count is not None:
                state["usage_tokens"] = count
            yield when, chunk
    except ValueError as exc:  # a line over MAX_LINE_BYTES
        state["error"] = "stream: %s" % short(exc, 200)
    else:
        # vLLM ends every stream with [DONE]: one that ends before it was cut (a server that stopped or
        # died mid-answer), even when each chunk it sent was whole.
        state["error"] = ("the stream ended without data: [DONE] after %d chunk(s) (the server closed it before "
                          "the answer was complete)" % state["chunks"])


def read_chat_stream(lines, started, clock=time.monotonic):
    """Read a streamed chat (or text) completion. ``lines``: pieces of the stream (bytes or str);
    ``started``: ``clock()`` when the request was sent.

    Returns ``{text, tokens, content_chunks, chunks, ttft_s, done, finish_reason, error,
    usage_tokens}``. ``tokens`` is the server's ``completion_tokens`` when it sent usage, else the
    number of chunks that carried text; ``ttft_s`` is the time to the first chunk with non-empty
    text (None without one). Chunks with empty text (the role chunk, the detokenizer holding back
    an incomplete UTF-8 character) count for neither. ``text`` keeps the first KEEP_TEXT characters.
    """
    state = {}
    pieces = []
    kept = content_chunks = 0
    ttft = None
    for _when, chunk in stream_chunks(((None, data) for data in iter_sse_data(lines)), state):
        text = delta_text(chunk)
        if not text:
            continue
        if ttft is None:
            ttft = round(clock() - started, 4)
        content_chunks += 1
        if kept < KEEP_TEXT:
            pieces.append(text[:KEEP_TEXT - kept])
            kept += len(pieces[-1])
    usage = state["usage_tokens"]
    return {"text": "".join(pieces), "tokens": usage if usage is not None else content_chunks,
            "content_chunks": content_chunks, "chunks": state["chunks"], "ttft_s": ttft, "done": state["done"],
            "finish_reason": state["finish_reason"], "error": state["error"], "usage_tokens": usage}


def _plain_answer(outcome, body, started, clock):
    answer, error = parse_json(body)
    if error:
        outcome["error"] = "completion %s" % error
        return
    if isinstance(answer, dict) and answer.get("error"):
        outcome["error"] = "server error: %s" % error_message(answer)
        return
    text = delta_text(answer)
    usage = usage_tokens(answer)
    outcome.update(text=text[:KEEP_TEXT], tokens=usage if usage is not None else (1 if text else 0),
                   finish_reason=finish_reason(answer), done=True)
    if text:
        # Without streaming the first token arrives with the whole answer.
        outcome["ttft_s"] = round(clock() - started, 4)


def chat_completion(url, body, headers=None, timeout=120.0, clock=time.monotonic, limit=MAX_STREAM_BYTES):
    """POST one chat completion (streamed or not) and measure it.

    ``timeout`` bounds the whole request, the stream included. Returns ``{status, text, tokens,
    ttft_s, latency_s, finish_reason, done, timed_out, error}``; ``error`` is None when the server
    answered 200 with a complete, readable body (it may still hold no tokens); a stream is complete
    only with its ``data: [DONE]``.
    """
    all_headers = dict(headers or {})
    all_headers["Content-Type"] = "application/json"
    if body.get("stream"):
        all_headers["Accept"] = "text/event-stream"
    started = clock()
    outcome = {"status": None, "text": "", "tokens": 0, "ttft_s": None, "latency_s": None,
               "finish_reason": None, "done": False, "timed_out": False, "error": None}
    try:
        connection, response, watchdog = open_request("POST", url, json.dumps(body).encode("utf-8"), all_headers, timeout)
    except Unreachable as exc:
        outcome.update(latency_s=round(clock() - started, 4), error=str(exc), timed_out=exc.timed_out)
        return outcome
    try:
        outcome["status"] = response.status
        ctype = (response.getheader("Content-Type") or "").lower()
        if response.status != 200:
            answer, error = read_body(response, MAX_BODY_BYTES, watchdog)
            outcome["error"] = "HTTP %s: %s" % (response.status, error_message(answer) if not error else error)
        elif body.get("stream") and not ctype.startswith("application/json"):
            state = {"error": None}
            streamed = read_chat_stream(read_pieces(response, limit, state, watchdog), started, clock)
            outcome.update(text=streamed["text"], tokens=streamed["tokens"], ttft_s=streamed["ttft_s"],
                           finish_reason=streamed["finish_reason"], done=streamed["done"],
                           error=state["error"] or streamed["error"])  # a cut stream: the cause first
        else:
            answer, error = read_body(response, MAX_BODY_BYTES, watchdog)
            if error:
                outcome["error"] = error
            else:
                _plain_answer(outcome, answer, started, clock)
        if watchdog.expired() and not outcome["done"]:
            outcome["timed_out"] = True
            outcome["error"] = "%s (%d token(s) so far)" % (timeout_message(url, timeout), outcome["tokens"] or 0)
    finally:
        watchdog.stop()
        connection.close()
    outcome["latency_s"] = round(clock() - started, 4)
    return outcome


_SAMPLE_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def metric_samples(text):
    """``[(name, labels)]`` of the samples in a Prometheus text exposition.

    ``# HELP``/``# TYPE`` and malformed lines are skipped; labels may come in any order and with
    any values (vLLM 0.8.5: ``{model_name="quasar",engine="0"}``; metrics.http, newer:
    ``{engine="0",model_name="quasar"}``).
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    samples = []
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE_NAME.match(line)
        if not match:
            continue
        name, rest, labels = match.group(), line[match.end():], {}
        if rest.startswith("{"):
            position = 1
            while True:
                label = _LABEL.match(rest, position)
                if not label:
                    break
                labels[label.group(1)] = label.group(2).replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
                position = label.end()
            if not rest.startswith("}", position):
                continue
            rest = rest[position + 1:]
        if not rest[:1].isspace() or not rest.split():
            continue
        samples.append((name, labels))
    return samples


def metric_names(text):
    """Metric names in a Prometheus text exposition (``# HELP``/``# TYPE`` lines skipped)."""
    return sorted(set(name for name, _labels in metric_samples(text)))


def progress_line(elapsed, status, container):
    """``elapsed 30 s; /health: connection refused; container running; last log: ...``."""
    parts = ["elapsed %d s" % int(elapsed), "/health: %s" % status]
    if container:
        state = container.get("state") or "unknown"
        if container.get("detail"):
            state = "%s (%s)" % (state, container["detail"])
        parts.append("container %s" % state)
        if container.get("last_log"):
            parts.append("last log: %s" % short(container["last_log"], 160))
    return "; ".join(parts)


def wait_for_health(probe_health, probe_container=None, timeout=1800.0, interval=5.0, progress_every=30.0,
                    clock=time.monotonic, sleep=time.sleep, max_lines=MAX_PROGRESS_LINES):
    """Poll until ``/health`` answers 200, the container died, or ``timeout`` seconds passed.

    ``probe_health()`` returns ``(status, error)`` like ``http_request``; ``probe_container()``
    (optional) returns ``{state, detail, last_log}`` where a state in DEAD_STATES ends the wait
    at once (the container exited, or its unit restarted it). Returns ``{ok, reason, elapsed_s,
    attempts, status, container, progress}``; ``reason`` is ``healthy``, ``container_exited`` or
    ``timeout``; ``progress`` holds one line at the start, then one every ``progress_every``
    seconds, and the last state; at most ``max_lines`` of them (the first, a note of how many
    were left out, the newest).
    """
    start = clock()
    attempts = 0
    progress = []
    dropped = [0]
    next_progress = 0.0
    container = None
    status_text = "not asked yet"

    def note(line):
        progress.append(line)
        if len(progress) > max(max_lines, 3):
            del progress[1]
            dropped[0] += 1

    def done(result):
        if dropped[0]:
            progress.insert(1, "(%d progress lines left out)" % dropped[0])
        result["progress"] = progress
        return result

    while True:
        attempts += 1
        status, error = probe_health()
        elapsed = clock() - start
        status_text = "HTTP %s" % status if status is not None else (error or "no answer")
        if status == 200:
            note(progress_line(elapsed, status_text, container))
            return done({"ok": True, "reason": "healthy", "elapsed_s": round(elapsed, 3), "attempts": attempts,
                         "status": status, "container": container})
        container = probe_container() if probe_container else None
        if container and container.get("state") in DEAD_STATES:
            note(progress_line(elapsed, status_text, container))
            return done({"ok": False, "reason": "container_exited", "elapsed_s": round(elapsed, 3),
                         "attempts": attempts, "status": status, "container": container})
        if elapsed >= next_progress:
            note(progress_line(elapsed, status_text, container))
            next_progress = elapsed + progress_every
        if elapsed + interval > timeout:
            if not progress or not progress[-1].startswith("elapsed %d s" % int(elapsed)):
                note(progress_line(elapsed, status_text, container))
            return done({"ok": False, "reason": "timeout", "elapsed_s": round(elapsed, 3), "attempts": attempts,
                         "status": status, "container": container})
        sleep(interval)
