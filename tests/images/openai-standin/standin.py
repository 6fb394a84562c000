# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A stand-in for vLLM's OpenAI-compatible API server (test fixture of labfleet.vllm, never deployed).

It takes the command line the vllm_server role's unit passes to vLLM and checks it the way vLLM's
argparse does: an unknown flag or a bad value prints a usage error and exits 2. Then it serves
/health, /version, /v1/models, /v1/chat/completions (plain and streamed as server-sent events),
/v1/completions and /metrics, with canned tokens. /v1/* need the API key (--api-key or
VLLM_API_KEY) when one is set; /health and /metrics do not, as in vLLM.

Behaviour knobs (environment):
  STANDIN_START_DELAY=S   sleep S seconds before listening (a slow model load)
  STANDIN_FAIL_HEALTH=1   /health answers 500 (an engine that never becomes healthy)
  STANDIN_EXIT_AFTER=S    exit S seconds after the start, load time included (vLLM can exit 0
                          on a fatal error), with status STANDIN_EXIT_CODE (default 0)
  STANDIN_EXIT_CODE=N     the exit status of STANDIN_EXIT_AFTER (0-255; 1: a crashed server)
  STANDIN_NO_TOKENS=1     completions carry no tokens
  STANDIN_HANG_COMPLETIONS=1  /health, /version, /v1/models and /metrics answer as usual, but a
                          completion is never answered: the request is read and the connection held
                          open, without a byte, until the client closes it (an engine that is
                          healthy but whose generation hangs)
  STANDIN_NCCL_HANG_MS=MS with --tensor-parallel-size above 1: the first all-reduce (vLLM's memory
                          profiling pass) never completes, so the server never listens; after MS
                          milliseconds each rank's NCCL watchdog logs the timeout as torch 2.6 does
                          (ProcessGroupNCCL.cpp; the default timeout is 600000) and takes the process
                          down: exit status 134, SIGABRT's (F14 of docs/testing.md). Without tensor
                          parallelism there is no collective and the variable does nothing.
  STANDIN_VERSION=V       what /version reports and the startup log shows
  STANDIN_COMPUTE_CAPABILITY=N  the GPU it plays (default 70, a V100): an NVFP4 checkpoint needs 100
                          and is refused at start the way vLLM 0.8.5 refuses it (vllm/config.py:3803-3809)

GPTQ (vLLM 0.8.5's gptq method, which runs on a V100): a checkpoint is served as GPTQ when
--quantization gptq is given or its config.json quantization_config says quant_method gptq. Then,
like vLLM, it refuses a --quantization gptq whose checkpoint declares another method ("Quantization
method specified in the model config (...) does not match ...", vllm/config.py:815-820) or none
("Cannot find the config file for gptq", model_loader/weight_utils.py get_quant_config), a config
without bits, group_size or desc_act ("Cannot find any of [...]", GPTQConfig.from_config), a dtype
other than float16 ("... is not supported for quantization method gptq"), a linear weight stored
unpacked (KeyError on the checkpoint's name: the gptq model has qweight there), and a layer whose
input is not a multiple of the group size or whose output is not a multiple of 8 ("The input/output
size is not aligned with the quantized weight shape", gptq.py create_weights). Stricter than vLLM
(which would load garbage without a word): only 4-bit, and every qweight needs its qzeros and scales
with the shapes [in/group, out/8] and [in/group, out].
  STANDIN_ERROR_FORMAT=F  "flat" (default, vLLM 0.8.5) or "nested" (newer releases) error bodies
  STANDIN_TTFT_MS=MS      a stream's first token comes MS milliseconds after the request was read
                          (default 10)
  STANDIN_ITL_MS=MS       then one token every MS milliseconds (default 10). Tokens follow a fixed
                          schedule (first + n x MS), so the injected times do not drift; the benchmark's
                          accuracy test measures against them.

It answers like a real vLLM server (the recorded answers in ../shared/reference/vllm-http/ and
the vLLM sources named below; all verified):
- HTTP/1.1 with keep-alive (idle connections closed after 5 s, vllm-0.8.5
  vllm/entrypoints/openai/api_server.py:97 TIMEOUT_KEEP_ALIVE); plain answers carry Content-Length,
  streams use Transfer-Encoding: chunked (chat_stream_*.http); an HTTP/1.0 client gets the stream
  without chunking and the connection closed.
- streams carry chunks with empty text in the middle (the detokenizer holds back text ending in an
  incomplete UTF-8 character, vllm-0.8.5 vllm/transformers_utils/detokenizer_utils.py:180); with
  finish_reason "length" the last token and the finish reason share one chunk
  (vllm-0.8.5 vllm/entrypoints/openai/serving_chat.py:763-830; chat_stream_nousage.http); with
  stream_options.include_usage a last chunk has "choices": [] and "usage"; then data: [DONE].
- max_tokens 0 (or below 1) is a 400 (vllm-0.8.5 vllm/sampling_params.py:420-422; chat_maxtokens0.http).
- error bodies: flat {"object": "error", "message", "type", "param", "code"} as 0.8.5 sends them
  (vllm-0.8.5 vllm/entrypoints/openai/protocol.py:79-84, serving_engine.py:103-110); nested
  {"error": {"message", "type", "param", "code"}} as newer releases do (vllm-0.19.1
  vllm/entrypoints/openai/engine/protocol.py:58-66; chat_maxtokens0.http, chat_wrongmodel.http
  recorded from a newer release). A missing or wrong key: 401 {"error": "Unauthorized"} in both
  (models_nokey.http); an unknown route: 404 {"detail": "Not Found"} (notfound.http); a method a
  route does not take (HEAD /health): 405 {"detail": "Method Not Allowed"} with Allow
  (health_head.http).
- no listener until the model is loaded: connections are refused, then /health is 200 with an empty
  body (health_during_startup.txt); after STANDIN_EXIT_AFTER's exit they are refused again
  (health_after_engine_kill.txt: vLLM exits 0 seconds after its engine dies).
- SIGTERM (or SIGINT): exit 0 at once, as vLLM 0.8.5's serve_http cancels its server task
  (vllm/entrypoints/launcher.py): a stream in flight ends without data: [DONE] and without the
  terminating zero-length chunk, and new connections are refused (read from the source: no recording).
- /v1/models entries carry 0.8.5's ModelCard fields, with one ModelPermission (models.http).
- metrics carry the model_name and engine labels (vllm-0.8.5 vllm/v1/metrics/loggers.py:141-145,
  in that order; metrics.http).
Standard library only; Python 3.11 (Debian bookworm's python3). With --distributed-executor-backend ray it
joins a Ray cluster (standin_ray.py; Ray from PyPI, in the image's "-ray" tags only).
"""

import argparse
import glob
import select
import socket
import json
import os
import re
import signal
import struct
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, HTTPServer
from socketserver import ThreadingMixIn

# The text each generated token adds. "" is a token whose text the detokenizer holds back (it ends
# in an incomplete UTF-8 character); the whole character comes with the next token.
PIECES = ["ready", " and", " serving", "", " caf\u00e9", " from", " the", "", " stand-in", " \u2713", " server",
          " on", " port", " 8000"]
# The routes and the methods they take (vllm-0.8.5 vllm/entrypoints/openai/api_server.py:339-342, 391-489).
ROUTES = {"/health": ("GET",), "/ping": ("GET", "POST"), "/version": ("GET",), "/v1/models": ("GET",),
          "/metrics": ("GET",), "/v1/chat/completions": ("POST",), "/v1/completions": ("POST",)}
# Largest request body read (uvicorn has no such limit; a test fixture needs one).
MAX_REQUEST = 16 * 1024 * 1024
STATS = {"requests": 0, "generation_tokens": 0, "prompt_tokens": 0, "ttft_sum": 0.0}
LOCK = threading.Lock()


def log(message):
    sys.stderr.write("INFO %s [standin] %s\n" % (time.strftime("%m-%d %H:%M:%S"), message))
    sys.stderr.flush()


def positive_float(text):
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError("must be in (0, 1], got %s" % text)
    return value


def model_len(text):
    """vLLM 0.8.5 also accepts suffixes: 32k = 32000, 32K = 32768."""
    factors = {"k": 1000, "K": 1024, "m": 1000000, "M": 1048576}
    text = text.strip()
    if text[-1:] in factors:
        return int(float(text[:-1]) * factors[text[-1]])
    return int(text)


def build_parser():
    parser = argparse.ArgumentParser(prog="api_server.py", description="vLLM OpenAI-compatible server (stand-in)")
    parser.add_argument("--model", required=True)
    parser.add_argument("--served-model-name", nargs="+")
    parser.add_argument("--host", default=None)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    parser.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    parser.add_argument("--dtype", default="auto", choices=["auto", "half", "float16", "bfloat16", "float", "float32"])
    parser.add_argument("--kv-cache-dtype", default="auto", choices=["auto", "fp8", "fp8_e4m3", "fp8_e5m2"])
    parser.add_argument("--quantization", "-q", default=None, choices=[
        "aqlm", "awq", "deepspeedfp", "tpu_int8", "fp8", "ptpc_fp8", "fbgemm_fp8", "modelopt", "nvfp4", "marlin",
        "bitblas", "gguf", "gptq_marlin_24", "gptq_marlin", "gptq_bitblas", "awq_marlin", "gptq",
        "compressed-tensors", "bitsandbytes", "qqq", "hqq", "experts_int8", "neuron_quant", "ipex", "quark",
        "moe_wna16", "torchao"])
    parser.add_argument("--gpu-memory-utilization", type=positive_float, default=0.9)
    parser.add_argument("--max-model-len", type=model_len, default=None)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--cpu-offload-gb", type=float, default=0)
    parser.add_argument("--swap-space", type=float, default=4)
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--disable-log-stats", action="store_true")
    parser.add_argument("--disable-log-requests", action="store_true")
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--disable-custom-all-reduce", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    # vLLM takes a file path or the template itself (vllm@0.8.5: vllm/entrypoints/openai/cli_args.py).
    parser.add_argument("--chat-template", default=None)
    # vllm@0.8.5: vllm/engine/arg_utils.py (DistributedExecutorBackend); "ray" joins the cluster of
    # RAY_ADDRESS (standin_ray.py).
    parser.add_argument("--distributed-executor-backend", default=None,
                        choices=["ray", "mp", "uni", "external_launcher"])
    return parser


class Server(ThreadingMixIn, HTTPServer):
    # The exit on SIGTERM must not wait for handler threads: vLLM 0.8.5 cuts the streams in flight.
    daemon_threads = True
    allow_reuse_address = True
    # vLLM's uvicorn listens with a backlog of 2048; socketserver's default of 5 resets connections
    # when a benchmark opens 32 at once.
    request_queue_size = 2048


def model_len_limit(args):
    """--max-model-len, else the checkpoint's max_position_embeddings, else 4096 (a stand-in's guess)."""
    if args.max_model_len:
        return args.max_model_len
    try:
        with open(os.path.join(args.model, "config.json")) as handle:
            value = json.load(handle).get("max_position_embeddings")
    except (IOError, OSError, ValueError, AttributeError):
        value = None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 4096


def model_card(name, root, max_model_len):
    """One /v1/models entry: vLLM 0.8.5's ModelCard with one default ModelPermission
    (vllm/entrypoints/openai/protocol.py, serving_models.py show_available_models; models.http)."""
    now = int(time.time())
    permission = {"id": "modelperm-%s" % uuid.uuid4().hex, "object": "model_permission", "created": now,
                  "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
                  "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
                  "organization": "*", "group": None, "is_blocking": False}
    return {"id": name, "object": "model", "created": now, "owned_by": "vllm", "root": root, "parent": None,
            "max_model_len": max_model_len, "permission": [permission]}


def delay_ms(name, default):
    """Seconds from a STANDIN_*_MS variable (0 to 600000 ms); a bad value ends the stand-in."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default / 1000.0
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 600000:
        log("ERROR: %s must be a number of milliseconds from 0 to 600000, got %r" % (name, text))
        sys.exit(2)
    return value / 1000.0


def make_handler(args, api_key, served, pipeline=None):
    no_tokens = os.environ.get("STANDIN_NO_TOKENS", "") not in ("", "0")
    hang_completions = os.environ.get("STANDIN_HANG_COMPLETIONS", "") not in ("", "0")
    first_token_s = delay_ms("STANDIN_TTFT_MS", 10)
    token_interval_s = delay_ms("STANDIN_ITL_MS", 10)
    fail_health = os.environ.get("STANDIN_FAIL_HEALTH", "") not in ("", "0")
    version = os.environ.get("STANDIN_VERSION", "0.0.0-standin")
    nested_errors = os.environ.get("STANDIN_ERROR_FORMAT", "flat").strip().lower() == "nested"
    max_model_len = model_len_limit(args)
    prompt_tokens = 8

    class Handler(BaseHTTPRequestHandler):
        server_version = "standin"
        protocol_version = "HTTP/1.1"  # keep-alive, chunked streams
        timeout = 5  # an idle keep-alive connection is closed after 5 s, as vLLM 0.8.5's uvicorn does

        def log_message(self, fmt, *values):  # one line per request, never the headers
            log("%s - %s" % (self.address_string(), fmt % values))

        def send_body(self, status, body, content_type, headers=()):
            self.send_response(status)
            if content_type:
                self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":  # a HEAD answer has the headers of the body, not the body
                self.wfile.write(body)

        def send_json(self, status, payload, headers=()):
            # Compact and unescaped, like Starlette's JSONResponse (notfound.http: {"detail":"Not Found"}).
            self.send_body(status, json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8"),
                           "application/json", headers)

        def error(self, status, message, kind, param=None, value=None):
            if nested_errors:
                # Newer releases name the parameter, also in the message (vllm-0.19.1
                # vllm/exceptions.py:29-36; chat_maxtokens0.http).
                if param is not None and value is not None:
                    message = "%s (parameter=%s, value=%s)" % (message, param, value)
                self.send_json(status, {"error": {"message": message, "type": kind, "param": param, "code": status}})
            else:
                # 0.8.5: create_error_response sets no param (serving_engine.py:103-110).
                self.send_json(status, {"object": "error", "message": message, "type": kind, "param": None,
                                        "code": status})

        def read_body(self):
            """The request body (Content-Length or chunked), always read whole so that the next request
            on a keep-alive connection starts where it should; None when it cannot be read."""
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                parts, total = [], 0
                while True:
                    line = self.rfile.readline(1024)
                    try:
                        size = int(line.split(b";", 1)[0].strip() or b"x", 16)
                    except ValueError:
                        return None
                    if size == 0:
                        while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                            pass
                        return b"".join(parts)
                    total += size
                    if total > MAX_REQUEST:
                        return None
                    parts.append(self.rfile.read(size))
                    self.rfile.readline(1024)
            try:
                length = int(self.headers.get("Content-Length", "0") or 0)
            except ValueError:
                return None
            if not 0 <= length <= MAX_REQUEST:
                return None
            return self.rfile.read(length) if length else b""

        def route(self):
            """The path, or None after answering 401 / 404 / 405 (vLLM's key check comes first)."""
            path = self.path.split("?", 1)[0]
            if api_key and path.startswith("/v1") and self.command != "OPTIONS" and \
                    self.headers.get("Authorization", "") != "Bearer %s" % api_key:
                self.send_json(401, {"error": "Unauthorized"})
                return None
            if path not in ROUTES:
                self.send_json(404, {"detail": "Not Found"})
                return None
            if self.command not in ROUTES[path]:
                self.send_json(405, {"detail": "Method Not Allowed"}, [("Allow", ", ".join(ROUTES[path]))])
                return None
            return path

        def other_method(self):
            if self.command in ("POST", "PUT", "PATCH", "DELETE") and self.read_body() is None:
                self.close_connection = True
            self.route()

        do_HEAD = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = other_method  # noqa: N815

        def do_GET(self):  # noqa: N802 (http.server's naming)
            path = self.route()
            if path in ("/health", "/ping"):
                if fail_health:
                    self.error(500, "engine is not healthy (STANDIN_FAIL_HEALTH)", "InternalServerError")
                else:
                    self.send_body(200, b"", None)
            elif path == "/version":
                self.send_json(200, {"version": version})
            elif path == "/v1/models":
                self.send_json(200, {"object": "list", "data": [model_card(name, args.model, max_model_len)
                                                                for name in served]})
            elif path == "/metrics":
                self.send_metrics()

        def send_metrics(self):
            with LOCK:
                stats = dict(STATS)
            # vLLM 0.8.5 names the labels model_name, engine (loggers.py:141-145); the text format
            # writes them in that order.
            label = 'model_name="%s",engine="0"' % served[0]
            lines = [
                "# HELP vllm:num_requests_running Number of requests in model execution batches.",
                "# TYPE vllm:num_requests_running gauge",
                "vllm:num_requests_running{%s} 0.0" % label,
                "# TYPE vllm:num_requests_waiting gauge",
                "vllm:num_requests_waiting{%s} 0.0" % label,
                "# TYPE vllm:gpu_cache_usage_perc gauge",
                "vllm:gpu_cache_usage_perc{%s} 0.0" % label,
                "# TYPE vllm:generation_tokens_total counter",
                "vllm:generation_tokens_total{%s} %d.0" % (label, stats["generation_tokens"]),
                "# TYPE vllm:prompt_tokens_total counter",
                "vllm:prompt_tokens_total{%s} %d.0" % (label, stats["prompt_tokens"]),
                "# TYPE vllm:time_to_first_token_seconds histogram",
                'vllm:time_to_first_token_seconds_bucket{%s,le="+Inf"} %d.0' % (label, stats["requests"]),
                "vllm:time_to_first_token_seconds_count{%s} %d.0" % (label, stats["requests"]),
                "vllm:time_to_first_token_seconds_sum{%s} %.4f" % (label, stats["ttft_sum"]),
            ]
            self.send_body(200, ("\n".join(lines) + "\n").encode("utf-8"), "text/plain; version=0.0.4; charset=utf-8")

        def do_POST(self):  # noqa: N802
            raw = self.read_body()  # first, so that an early answer leaves the connection usable
            if raw is None:
                self.close_connection = True
            path = self.route()
            if path is None:
                return
            if path == "/ping":
                self.do_GET()
                return
            try:
                if raw is None:
                    raise ValueError("the body cannot be read")
                request = json.loads(raw.decode("utf-8"))
                if not isinstance(request, dict):
                    raise ValueError("the body is not a JSON object")
            except ValueError as exc:
                self.error(400, "invalid JSON body: %s" % exc, "BadRequestError")
                return
            if request.get("model") not in served:
                self.error(404, "The model `%s` does not exist." % request.get("model"), "NotFoundError", "model")
                return
            chat = path == "/v1/chat/completions"
            if chat and not isinstance(request.get("messages"), list):
                self.error(400, "messages must be a list", "BadRequestError", "messages")
                return
            # vLLM 0.8.5 takes max_completion_tokens or max_tokens (protocol.py:429); a value below 1
            # fails in SamplingParams (sampling_params.py:420-422). Absent, vLLM generates up to the end
            # of the context for a chat; the stand-in stops at 16, like /v1/completions (protocol.py:740).
            max_tokens = request.get("max_completion_tokens") or request.get("max_tokens")
            if max_tokens is None:
                max_tokens = 16
            if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
                self.error(400, "max_tokens must be an integer, got %r" % (max_tokens,), "BadRequestError",
                           "max_tokens")
                return
            if max_tokens < 1:
                self.error(400, "max_tokens must be at least 1, got %d." % max_tokens, "BadRequestError",
                           "max_tokens", max_tokens)
                return
            if prompt_tokens + max_tokens > max_model_len:  # vllm-0.8.5 serving_engine.py:258-265
                numbers = (max_model_len, prompt_tokens + max_tokens, prompt_tokens, max_tokens)
                self.error(400, "This model's maximum context length is %d tokens. However, you requested %d "
                           "tokens (%d in the messages, %d in the completion). Please reduce the length of the "
                           "messages or completion." % numbers, "BadRequestError")
                return
            if hang_completions:
                self.hang()
                return
            started = time.monotonic()
            if pipeline is not None:  # --distributed-executor-backend ray: through every stage (standin_ray.py)
                pipeline.forward(uuid.uuid4().hex[:8])
            tokens = [] if no_tokens else [PIECES[i % len(PIECES)] for i in range(max_tokens)]
            with LOCK:
                STATS["requests"] += 1
                STATS["generation_tokens"] += len(tokens)
                STATS["prompt_tokens"] += prompt_tokens
            usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + len(tokens),
                     "completion_tokens": len(tokens)}
            if request.get("stream"):
                try:
                    self.stream(request, tokens, chat, started, usage)
                except (BrokenPipeError, ConnectionResetError):
                    log("the client went away during the stream")
                    self.close_connection = True
            else:
                text = "".join(tokens)
                choice = ({"index": 0, "message": {"role": "assistant", "content": text},
                           "finish_reason": "length" if tokens else "stop"} if chat else
                          {"index": 0, "text": text, "finish_reason": "length" if tokens else "stop"})
                self.send_json(200, {"id": "chatcmpl-%s" % uuid.uuid4().hex, "object":
                                     "chat.completion" if chat else "text_completion",
                                     "created": int(time.time()), "model": request["model"], "choices": [choice],
                                     "usage": usage})

        def hang(self):
            """STANDIN_HANG_COMPLETIONS: answer nothing, hold the connection until the client closes it."""
            log("holding the completion request unanswered (STANDIN_HANG_COMPLETIONS)")
            self.close_connection = True
            while True:
                readable, _w, _x = select.select([self.connection], [], [], 1.0)
                if not readable:
                    continue
                try:
                    data = self.connection.recv(4096, socket.MSG_PEEK)
                except OSError:
                    data = b""
                if not data:
                    log("the client closed the held completion request")
                    return
                time.sleep(0.5)  # more bytes from the client (a pipelined request): still no answer

        def stream(self, request, tokens, chat, started, usage):
            chunked = self.request_version != "HTTP/1.0"
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            if chunked:
                self.send_header("Transfer-Encoding", "chunked")
            else:  # an HTTP/1.0 client: the end of the stream is the end of the connection
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            ident = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
            kind = "chat.completion.chunk" if chat else "text_completion"

            def write(data):
                if chunked:
                    data = b"%x\r\n%s\r\n" % (len(data), data)
                self.wfile.write(data)
                self.wfile.flush()

            def send(payload):
                write(("data: %s\n\n" % json.dumps(payload, ensure_ascii=False, separators=(",", ":"))).encode("utf-8"))

            def chunk(delta_or_text, finish=None):
                choice = {"index": 0, "finish_reason": finish}
                if chat:
                    choice["delta"] = delta_or_text
                else:
                    choice["text"] = delta_or_text
                return {"id": ident, "object": kind, "created": int(time.time()), "model": request["model"],
                        "choices": [choice]}

            if chat:
                send(chunk({"role": "assistant", "content": ""}))
            for index, token in enumerate(tokens):
                pause = started + first_token_s + index * token_interval_s - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                if index == 0:
                    with LOCK:
                        STATS["ttft_sum"] += time.monotonic() - started
                # The last token carries finish_reason "length" (it used up max_tokens).
                finish = "length" if index == len(tokens) - 1 else None
                send(chunk({"content": token} if chat else token, finish=finish))
            if not tokens:
                send(chunk({"content": ""} if chat else "", finish="stop"))
            options = request.get("stream_options") or {}
            if isinstance(options, dict) and options.get("include_usage"):
                send({"id": ident, "object": kind, "created": int(time.time()), "model": request["model"],
                      "choices": [], "usage": usage})
            write(b"data: [DONE]\n\n")
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

    return Handler


def quantization_config(model_dir):
    """config.json's quantization_config ({} when there is none or it cannot be read)."""
    try:
        with open(os.path.join(model_dir, "config.json")) as handle:
            quant = json.load(handle).get("quantization_config") or {}
    except (IOError, OSError, ValueError, AttributeError):
        return {}
    return quant if isinstance(quant, dict) else {}


def quant_method(model_dir):
    """config.json's quantization_config quant_method, lower case, or None."""
    return str(quantization_config(model_dir).get("quant_method") or "").lower() or None


def nvfp4_method(model_dir):
    """The NVFP4 quantization a checkpoint declares (vLLM's name for it), or None."""
    try:
        with open(os.path.join(model_dir, "config.json")) as handle:
            config = json.load(handle)
    except (IOError, OSError, ValueError):
        return None
    quant = config.get("quantization_config") or {}
    try:
        with open(os.path.join(model_dir, "hf_quant_config.json")) as handle:
            quant = dict(quant, **(json.load(handle).get("quantization") or {}))
    except (IOError, OSError, ValueError):
        pass
    if str(quant.get("quant_algo", "")).upper() == "NVFP4" or quant.get("quant_method") in ("nvfp4", "modelopt_fp4"):
        return "modelopt_fp4"
    if quant.get("format") == "nvfp4-pack-quantized" or any(
            isinstance(g, dict) and g.get("format") == "nvfp4-pack-quantized"
            for g in (quant.get("config_groups") or {}).values()):
        return "compressed-tensors"
    return None


# The layers vLLM splits along the input under tensor parallelism (RowParallelLinear); the others
# (qkv, gate/up) split the output.
ROW_PARALLEL = ("o_proj", "down_proj")
# The longest safetensors header read (safetensors' own limit).
MAX_HEADER = 100000000


def safetensors_tensors(model_dir):
    """{name: (dtype, shape)} of every *.safetensors file in model_dir (headers only)."""
    tensors = {}
    for path in sorted(glob.glob(os.path.join(model_dir, "*.safetensors"))):
        with open(path, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            if length > MAX_HEADER:
                raise ValueError("%s: header of %d bytes is not a safetensors header" % (path, length))
            header = json.loads(handle.read(length).decode("utf-8"))
        for name, info in header.items():
            if name != "__metadata__":
                tensors[name] = (info["dtype"], list(info["shape"]))
    return tensors


def gptq_refusal(model_dir, args):
    """What vLLM 0.8.5's gptq method says about serving model_dir with these arguments (None: it
    serves it). Only asked when --quantization gptq is given or the config declares gptq."""
    quant = quantization_config(model_dir)
    declared = quant_method(model_dir) or nvfp4_method(model_dir)
    if declared and declared != "gptq":
        return ("ValueError: Quantization method specified in the model config (%s) does not match the "
                "quantization method specified in the `quantization` argument (gptq)." % declared)
    if not declared:
        return "ValueError: Cannot find the config file for gptq"
    for key in ("bits", "group_size", "desc_act"):
        if key not in quant:
            return "ValueError: Cannot find any of ['%s'] in the model's quantization config." % key
    bits, group = quant["bits"], quant["group_size"]
    if bits not in (2, 3, 4, 8):
        return ("ValueError: Currently, only 2/3/4/8-bit weight quantization is supported for GPTQ, but got %s "
                "bits." % bits)
    if bits != 4:
        return "ERROR: the stand-in serves 4-bit GPTQ only, got %s bits" % bits
    if args.dtype in ("bfloat16", "float", "float32"):
        name = "float32" if args.dtype == "float" else args.dtype
        return ("ValueError: torch.%s is not supported for quantization method gptq. Supported dtypes: "
                "[torch.float16]" % name)
    try:
        tensors = safetensors_tensors(model_dir)
    except (IOError, OSError, ValueError, KeyError, TypeError, struct.error) as exc:
        return "ERROR: cannot read the safetensors headers: %s" % exc
    unpacked = sorted(n for n, (dtype, shape) in tensors.items()
                      if re.search(r"_proj\.weight$", n) and len(shape) == 2)
    if unpacked:
        return "KeyError: '%s'" % unpacked[0]
    layers = sorted(n[:-len(".qweight")] for n in tensors if n.endswith(".qweight"))
    if not layers:
        return "ERROR: no qweight tensor: not a GPTQ checkpoint"
    tp = args.tensor_parallel_size
    for layer in layers:
        qweight = tensors[layer + ".qweight"]
        if qweight[0] != "I32" or len(qweight[1]) != 2:
            return "ERROR: %s.qweight must be int32 [in/8, out], got %s %s" % (layer, qweight[0], qweight[1])
        inputs, outputs = qweight[1][0] * 8, qweight[1][1]
        row = layer.rsplit(".", 1)[-1] in ROW_PARALLEL
        if (inputs // tp if row else inputs) % group:
            return ("ValueError: The input size is not aligned with the quantized weight shape. This can be caused "
                    "by too large tensor parallel size.")
        if (outputs if row else outputs // tp) % 8:
            return ("ValueError: The output size is not aligned with the quantized weight shape. This can be caused "
                    "by too large tensor parallel size.")
        groups = -(-inputs // group)
        for part, dtype, shape in (("qzeros", "I32", [groups, outputs // 8]), ("scales", "F16", [groups, outputs])):
            if tensors.get("%s.%s" % (layer, part)) != (dtype, shape):
                return ("ERROR: %s.%s must be %s %s, got %s (vLLM would load garbage)"
                        % (layer, part, dtype, shape, tensors.get("%s.%s" % (layer, part))))
    return None


def nccl_hang(world_size, timeout_s):
    """Hang in the first all-reduce, then end as torch's NCCL watchdog ends a process (never returns).

    The lines are torch 2.6's (ProcessGroupNCCL.cpp, e.g. as reported in modelscope/DiffSynth-Studio
    issue 458 and XPixelGroup/BasicSR issue 737): every rank logs the timed-out work, then takes the
    process down with std::terminate (SIGABRT: the container's exit status is 134).
    """
    log("world_size=%d; NCCL version 2.21.5+cuda12.4; memory profiling: the first forward pass, "
        "all-reduce across %d ranks" % (world_size, world_size))
    time.sleep(timeout_s)
    timeout_ms = int(round(timeout_s * 1000))
    numel = 8388608
    for rank in range(world_size):
        stamp = "E%s.%06d000" % (time.strftime("%m%d %H:%M:%S"), rank)
        work = ("WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=%d, NumelOut=%d, Timeout(ms)=%d)"
                % (numel, numel, timeout_ms))
        for source, text in (
                ("616", "[Rank %d] Watchdog caught collective operation timeout: %s ran for %d milliseconds "
                        "before timing out." % (rank, work, timeout_ms + 43)),
                ("1785", "[PG ID 0 PG GUID 0(default_pg) Rank %d] Exception (either an error or timeout) detected "
                         "by watchdog at work: 1, last enqueued NCCL work: 1, last completed NCCL work: 0." % rank),
                ("630", "[Rank %d] Some NCCL operations have failed or timed out. Due to the asynchronous nature of "
                        "CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data." % rank),
                ("636", "[Rank %d] To avoid data inconsistency, we are taking the entire process down." % rank)):
            sys.stderr.write("[rank%d]:[%s ProcessGroupNCCL.cpp:%s] %s\n" % (rank, stamp, source, text))
    sys.stderr.write("terminate called after throwing an instance of 'c10::DistBackendError'\n")
    sys.stderr.flush()
    os._exit(134)  # pylint: disable=protected-access


def main(argv=None):
    args = build_parser().parse_args(argv)  # exits 2 on an unknown flag, like vLLM
    if args.model.startswith("/") and not os.path.isfile(os.path.join(args.model, "config.json")):
        log("ERROR: %s has no config.json: not a model directory" % args.model)
        return 1
    capability = int(os.environ.get("STANDIN_COMPUTE_CAPABILITY", "70") or 70)
    method = nvfp4_method(args.model) if args.model.startswith("/") else None
    gptq = args.model.startswith("/") and (args.quantization == "gptq" or quant_method(args.model) == "gptq")
    if gptq:
        refusal = gptq_refusal(args.model, args)
        if refusal:
            log("ERROR: %s" % refusal)
            return 1
        log("Loading the GPTQ checkpoint %s with the gptq method (exllama kernels)" % args.model)
    elif method and capability < 100:
        log("ERROR: ValueError: The quantization method %s is not supported for the current GPU. Minimum "
            "capability: 100. Current capability: %d." % (method, capability))
        return 1
    api_key = args.api_key or os.environ.get("VLLM_API_KEY") or None
    served = args.served_model_name or [args.model]
    shown = {k: v for k, v in sorted(vars(args).items()) if k != "api_key"}
    log("stand-in vLLM %s; args: %s; api key %s" % (os.environ.get("STANDIN_VERSION", "0.0.0-standin"),
                                                    json.dumps(shown, sort_keys=True),
                                                    "set" if api_key else "not set"))

    def stop(signum, _frame):
        # vLLM 0.8.5's serve_http cancels the server task on SIGTERM (vllm/entrypoints/launcher.py):
        # no drain. SystemExit ends serve_forever; the handler threads are daemons, so the process
        # exits 0 at once, its sockets close, and a stream in flight ends without [DONE] or its last chunk.
        log("received signal %d, shutting down" % signum)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    exit_after = float(os.environ.get("STANDIN_EXIT_AFTER", "0") or 0)
    exit_code = int(os.environ.get("STANDIN_EXIT_CODE", "0") or 0) & 0xFF
    if exit_after > 0:
        def leave():
            log("fatal error (STANDIN_EXIT_AFTER=%s s); exiting with status %d" % (exit_after, exit_code))
            os._exit(exit_code)  # pylint: disable=protected-access
        timer = threading.Timer(exit_after, leave)
        timer.daemon = True
        timer.start()
    delay = float(os.environ.get("STANDIN_START_DELAY", "0") or 0)
    if delay > 0:
        log("loading the model (STANDIN_START_DELAY=%s s)" % delay)
        time.sleep(delay)
    nccl_hang_s = delay_ms("STANDIN_NCCL_HANG_MS", 0)
    if nccl_hang_s > 0 and args.tensor_parallel_size > 1:
        nccl_hang(args.tensor_parallel_size, nccl_hang_s)
    pipeline = None
    if args.distributed_executor_backend == "ray":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import standin_ray  # pylint: disable=import-outside-toplevel
        pipeline = standin_ray.start(args.tensor_parallel_size, args.pipeline_parallel_size)
    server = Server((args.host or "0.0.0.0", args.port), make_handler(args, api_key, served, pipeline))
    log("Uvicorn running on http://%s:%d (stand-in)" % (args.host or "0.0.0.0", args.port))
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
