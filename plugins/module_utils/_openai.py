# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A small client for OpenAI-compatible servers (vLLM's API server), standard library only.

Private to labfleet.vllm (the leading underscore): no stability promise to other collections.

- ``http_request``: one HTTP request that never raises for network or HTTP errors.
- ``iter_sse_data`` / ``read_chat_stream``: server-sent events as vLLM streams them
  (``data: {json}`` blocks separated by blank lines, ending with ``data: [DONE]``).
- ``wait_for_health``: polls ``/health`` and a container probe, with progress lines, and stops
  early when the container exited or its unit restarted it.

HTTP goes through http.client (unit tests run a local server); the clock, sleep and the container
probe are passed in, so the health wait is tested with fakes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import socket
import ssl
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


def short(text, limit=BODY_EXCERPT):
    """One line of at most ``limit`` characters (bytes are decoded leniently)."""
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


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


class _Unreachable(Exception):
    """No HTTP answer: refused, reset, timed out, bad URL."""


def _open(method, url, body=None, headers=None, timeout=10.0):
    """Send one request with http.client; returns ``(connection, response)``, raises _Unreachable."""
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
        connection.request(method, path, body=body, headers=dict(headers or {}))
        return connection, connection.getresponse()
    except (socket.timeout, OSError, ValueError, HTTPException) as exc:
        raise _Unreachable("cannot reach %s: %s" % (url, short(exc, 200) or exc.__class__.__name__))


def http_request(method, url, payload=None, headers=None, timeout=10.0):
    """Send one request. Returns ``(status, body_bytes, error)``.

    ``status`` is the HTTP status (also for 4xx/5xx answers) or None when no answer came
    (refused, reset, timeout, bad URL); ``error`` then says why. Never raises for those.
    """
    data = None
    all_headers = dict(headers or {})
    if payload is not None:
        data = json.dumps(payload).encode("utf-8")
        all_headers["Content-Type"] = "application/json"
    try:
        connection, response = _open(method, url, data, all_headers, timeout)
    except _Unreachable as exc:
        return None, b"", str(exc)
    try:
        return response.status, response.read(), None
    except (socket.timeout, OSError, HTTPException) as exc:
        return None, b"", "reading %s failed: %s" % (url, short(exc, 200) or exc.__class__.__name__)
    finally:
        connection.close()


def parse_json(body):
    """``(object, None)`` or ``(None, error)`` for a response body."""
    try:
        if isinstance(body, bytes):
            body = body.decode("utf-8")
        return json.loads(body), None
    except (ValueError, UnicodeDecodeError) as exc:
        return None, "not JSON (%s): %s" % (short(exc, 80), short(body, 120))


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


def _split_lines(items):
    """Each item (one read of the stream, bytes or str) as lines without their line ends."""
    for raw in items:
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        yield from text.splitlines()


def iter_sse_data(lines):
    """Yield the ``data`` of each server-sent event from an iterable of lines (bytes or str).

    Lines of one event are joined with newlines; comments (``:``) and other fields are
    skipped; an event ends at a blank line or at the end of the input.
    """
    data = []
    for raw in _split_lines(lines):
        line = raw
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


def delta_text(chunk):
    """The text a chat (or completion) chunk carries, '' when none."""
    if not isinstance(chunk, dict):
        return ""
    parts = []
    for choice in chunk.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        for holder in (choice.get("delta"), choice.get("message")):
            if isinstance(holder, dict) and isinstance(holder.get("content"), str):
                parts.append(holder["content"])
        if isinstance(choice.get("text"), str):
            parts.append(choice["text"])
    return "".join(parts)


def _finish_reason(chunk):
    for choice in (chunk.get("choices") or []) if isinstance(chunk, dict) else []:
        if isinstance(choice, dict) and choice.get("finish_reason"):
            return choice["finish_reason"]
    return None


def _usage_tokens(obj):
    usage = obj.get("usage") if isinstance(obj, dict) else None
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        return usage["completion_tokens"]
    return None


def read_chat_stream(lines, started, clock=time.monotonic):
    """Read a streamed chat completion. ``started``: ``clock()`` when the request was sent.

    Returns ``{text, tokens, content_chunks, chunks, ttft_s, done, finish_reason, error}``;
    ``tokens`` is the server's ``completion_tokens`` when it sent usage, else the number of chunks
    that carried text; ``ttft_s`` is the time to the first chunk with text (None without one).
    """
    result = {"text": "", "tokens": 0, "content_chunks": 0, "chunks": 0, "ttft_s": None,
              "done": False, "finish_reason": None, "error": None, "usage_tokens": None}
    pieces = []
    for data in iter_sse_data(lines):
        if data.strip() == "[DONE]":
            result["done"] = True
            break
        chunk, error = parse_json(data)
        if error:
            result["error"] = "stream chunk %s" % error
            break
        if isinstance(chunk, dict) and chunk.get("error"):
            result["error"] = "server error in stream: %s" % short(json.dumps(chunk["error"]), 200)
            break
        result["chunks"] += 1
        text = delta_text(chunk)
        if text:
            if result["ttft_s"] is None:
                result["ttft_s"] = round(clock() - started, 4)
            result["content_chunks"] += 1
            pieces.append(text)
        result["finish_reason"] = _finish_reason(chunk) or result["finish_reason"]
        usage = _usage_tokens(chunk)
        if usage is not None:
            result["usage_tokens"] = usage
    result["text"] = "".join(pieces)
    result["tokens"] = result["usage_tokens"] if result["usage_tokens"] is not None else result["content_chunks"]
    return result


def chat_completion(url, body, headers=None, timeout=120.0, clock=time.monotonic):
    """POST one chat completion (streamed or not) and measure it.

    Returns ``{status, text, tokens, ttft_s, latency_s, finish_reason, error}``; ``error`` is None
    when the server answered 200 with a readable body (it may still hold no tokens).
    """
    all_headers = dict(headers or {})
    all_headers["Content-Type"] = "application/json"
    if body.get("stream"):
        all_headers["Accept"] = "text/event-stream"
    started = clock()
    outcome = {"status": None, "text": "", "tokens": 0, "ttft_s": None, "latency_s": None,
               "finish_reason": None, "error": None}
    try:
        connection, response = _open("POST", url, json.dumps(body).encode("utf-8"), all_headers, timeout)
    except _Unreachable as exc:
        outcome.update(latency_s=round(clock() - started, 4), error=str(exc))
        return outcome
    try:
        outcome["status"] = response.status
        if response.status != 200:
            outcome["error"] = "HTTP %s: %s" % (response.status, short(response.read()))
        elif body.get("stream"):
            streamed = read_chat_stream(response, started, clock)
            outcome.update(text=streamed["text"], tokens=streamed["tokens"], ttft_s=streamed["ttft_s"],
                           finish_reason=streamed["finish_reason"], error=streamed["error"])
        else:
            answer, error = parse_json(response.read())
            if error:
                outcome["error"] = "completion %s" % error
            else:
                text = delta_text(answer)
                usage = _usage_tokens(answer)
                outcome.update(text=text, tokens=usage if usage is not None else (1 if text else 0),
                               finish_reason=_finish_reason(answer))
                if text:
                    # Without streaming the first token arrives with the whole answer.
                    outcome["ttft_s"] = round(clock() - started, 4)
    except (socket.timeout, OSError, HTTPException) as exc:
        outcome["error"] = "reading the answer failed: %s" % (short(exc, 200) or exc.__class__.__name__)
    finally:
        connection.close()
    outcome["latency_s"] = round(clock() - started, 4)
    return outcome


def metric_names(text):
    """Metric names in a Prometheus text exposition (``# HELP``/``# TYPE`` lines skipped)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    names = set()
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name:
            names.add(name)
    return sorted(names)


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
                    clock=time.monotonic, sleep=time.sleep):
    """Poll until ``/health`` answers 200, the container died, or ``timeout`` seconds passed.

    ``probe_health()`` returns ``(status, error)`` like ``http_request``; ``probe_container()``
    (optional) returns ``{state, detail, last_log}`` where a state in DEAD_STATES ends the wait
    at once (the container exited, or its unit restarted it). Returns ``{ok, reason, elapsed_s,
    attempts, status, container, progress}``; ``reason`` is ``healthy``, ``container_exited`` or
    ``timeout``; ``progress`` holds one line at the start, then one every ``progress_every``
    seconds, and the last state.
    """
    start = clock()
    attempts = 0
    progress = []
    next_progress = 0.0
    container = None
    status_text = "not asked yet"
    while True:
        attempts += 1
        status, error = probe_health()
        elapsed = clock() - start
        status_text = "HTTP %s" % status if status is not None else (error or "no answer")
        if status == 200:
            progress.append(progress_line(elapsed, status_text, container))
            return {"ok": True, "reason": "healthy", "elapsed_s": round(elapsed, 3), "attempts": attempts,
                    "status": status, "container": container, "progress": progress}
        container = probe_container() if probe_container else None
        if container and container.get("state") in DEAD_STATES:
            progress.append(progress_line(elapsed, status_text, container))
            return {"ok": False, "reason": "container_exited", "elapsed_s": round(elapsed, 3),
                    "attempts": attempts, "status": status, "container": container, "progress": progress}
        if elapsed >= next_progress:
            progress.append(progress_line(elapsed, status_text, container))
            next_progress = elapsed + progress_every
        if elapsed + interval > timeout:
            if not progress or not progress[-1].startswith("elapsed %d s" % int(elapsed)):
                progress.append(progress_line(elapsed, status_text, container))
            return {"ok": False, "reason": "timeout", "elapsed_s": round(elapsed, 3), "attempts": attempts,
                    "status": status, "container": container, "progress": progress}
        sleep(interval)
