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
  STANDIN_EXIT_AFTER=S    exit 0 S seconds after the start, load time included (vLLM can exit 0
                          on a fatal error)
  STANDIN_NO_TOKENS=1     completions carry no tokens
  STANDIN_VERSION=V       what /version reports and the startup log shows
  STANDIN_COMPUTE_CAPABILITY=N  the GPU it plays (default 70, a V100): an NVFP4 checkpoint needs 100
                          and is refused at start the way vLLM 0.8.5 refuses it (vllm/config.py:3803-3809)
Standard library only.
"""

import argparse
import json
import os
import signal
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, HTTPServer
from socketserver import ThreadingMixIn

WORDS = ["ready", "and", "serving", "from", "the", "stand-in", "server", "on", "port", "8000"]
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
    return parser


class Server(ThreadingMixIn, HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def make_handler(args, api_key, served):
    no_tokens = os.environ.get("STANDIN_NO_TOKENS", "") not in ("", "0")
    fail_health = os.environ.get("STANDIN_FAIL_HEALTH", "") not in ("", "0")
    version = os.environ.get("STANDIN_VERSION", "0.0.0-standin")

    class Handler(BaseHTTPRequestHandler):
        server_version = "standin"

        def log_message(self, fmt, *values):  # one line per request, never the headers
            log("%s - %s" % (self.address_string(), fmt % values))

        def send_json(self, status, payload):
            body = json.dumps(payload).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def error(self, status, message, kind):
            self.send_json(status, {"object": "error", "message": message, "type": kind, "param": None,
                                    "code": status})

        def authorized(self):
            if not api_key or not self.path.startswith("/v1"):
                return True
            if self.headers.get("Authorization", "") == "Bearer %s" % api_key:
                return True
            self.send_json(401, {"error": "Unauthorized"})
            return False

        def do_GET(self):  # noqa: N802 (http.server's naming)
            if not self.authorized():
                return
            path = self.path.split("?", 1)[0]
            if path == "/health":
                if fail_health:
                    self.error(500, "engine is not healthy (STANDIN_FAIL_HEALTH)", "InternalServerError")
                else:
                    self.send_response(200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
            elif path == "/version":
                self.send_json(200, {"version": version})
            elif path == "/v1/models":
                self.send_json(200, {"object": "list", "data": [
                    {"id": name, "object": "model", "created": int(time.time()), "owned_by": "vllm",
                     "root": args.model, "parent": None, "max_model_len": args.max_model_len}
                    for name in served]})
            elif path == "/metrics":
                self.send_metrics()
            else:
                self.error(404, "Not Found", "NotFoundError")

        def send_metrics(self):
            with LOCK:
                stats = dict(STATS)
            label = 'model_name="%s"' % served[0]
            lines = [
                "# HELP vllm:num_requests_running Number of requests currently running.",
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
            body = ("\n".join(lines) + "\n").encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):  # noqa: N802
            if not self.authorized():
                return
            path = self.path.split("?", 1)[0]
            if path not in ("/v1/chat/completions", "/v1/completions"):
                self.error(404, "Not Found", "NotFoundError")
                return
            try:
                length = int(self.headers.get("Content-Length", "0"))
                request = json.loads(self.rfile.read(length).decode("utf-8"))
                if not isinstance(request, dict):
                    raise ValueError("the body is not a JSON object")
            except ValueError as exc:
                self.error(400, "invalid JSON body: %s" % exc, "BadRequestError")
                return
            if request.get("model") not in served:
                self.error(404, "The model `%s` does not exist." % request.get("model"), "NotFoundError")
                return
            chat = path == "/v1/chat/completions"
            if chat and not isinstance(request.get("messages"), list):
                self.error(400, "messages must be a list", "BadRequestError")
                return
            max_tokens = request.get("max_tokens") or 16
            if not isinstance(max_tokens, int) or max_tokens < 1:
                self.error(400, "max_tokens must be a positive integer", "BadRequestError")
                return
            started = time.monotonic()
            tokens = [] if no_tokens else [WORDS[i % len(WORDS)] + " " for i in range(max_tokens)]
            with LOCK:
                STATS["requests"] += 1
                STATS["generation_tokens"] += len(tokens)
                STATS["prompt_tokens"] += 8
            if request.get("stream"):
                self.stream(request, tokens, chat, started)
            else:
                text = "".join(tokens)
                choice = ({"index": 0, "message": {"role": "assistant", "content": text},
                           "finish_reason": "length" if tokens else "stop"} if chat else
                          {"index": 0, "text": text, "finish_reason": "length" if tokens else "stop"})
                self.send_json(200, {"id": "chatcmpl-%s" % uuid.uuid4().hex, "object":
                                     "chat.completion" if chat else "text_completion",
                                     "created": int(time.time()), "model": request["model"], "choices": [choice],
                                     "usage": {"prompt_tokens": 8, "completion_tokens": len(tokens),
                                               "total_tokens": 8 + len(tokens)}})

        def stream(self, request, tokens, chat, started):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            ident = "chatcmpl-%s" % uuid.uuid4().hex
            kind = "chat.completion.chunk" if chat else "text_completion"

            def send(payload):
                self.wfile.write(("data: %s\n\n" % json.dumps(payload)).encode("utf-8"))
                self.wfile.flush()

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
                time.sleep(0.01)
                if index == 0:
                    with LOCK:
                        STATS["ttft_sum"] += time.monotonic() - started
                send(chunk({"content": token} if chat else token))
            send(chunk({} if chat else "", finish="length" if tokens else "stop"))
            options = request.get("stream_options") or {}
            if options.get("include_usage"):
                send({"id": ident, "object": kind, "created": int(time.time()), "model": request["model"],
                      "choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": len(tokens),
                                               "total_tokens": 8 + len(tokens)}})
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

    return Handler


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


def main(argv=None):
    args = build_parser().parse_args(argv)  # exits 2 on an unknown flag, like vLLM
    if args.model.startswith("/") and not os.path.isfile(os.path.join(args.model, "config.json")):
        log("ERROR: %s has no config.json: not a model directory" % args.model)
        return 1
    capability = int(os.environ.get("STANDIN_COMPUTE_CAPABILITY", "70") or 70)
    method = nvfp4_method(args.model) if args.model.startswith("/") else None
    if method and capability < 100:
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
        log("received signal %d, shutting down" % signum)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    exit_after = float(os.environ.get("STANDIN_EXIT_AFTER", "0") or 0)
    if exit_after > 0:
        def leave():
            log("fatal error (STANDIN_EXIT_AFTER=%s s); exiting with status 0" % exit_after)
            os._exit(0)  # pylint: disable=protected-access
        timer = threading.Timer(exit_after, leave)
        timer.daemon = True
        timer.start()
    delay = float(os.environ.get("STANDIN_START_DELAY", "0") or 0)
    if delay > 0:
        log("loading the model (STANDIN_START_DELAY=%s s)" % delay)
        time.sleep(delay)
    server = Server((args.host or "0.0.0.0", args.port), make_handler(args, api_key, served))
    log("Uvicorn running on http://%s:%d (stand-in)" % (args.host or "0.0.0.0", args.port))
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
