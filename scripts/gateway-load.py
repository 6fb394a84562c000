# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A bounded load generator for the gateway (issue 25): streamed chat completions through one
OpenAI-compatible address, N at a time, while something else happens (an upgrade, a killed host).

    scripts/gateway-load.py --url http://10.0.0.5:8080 --model quasar --concurrency 4 \\
        --key-file inventories/sandbox/group_vars/vllm_hosts/api_key.yml --out load.json

It runs until SIGTERM or SIGINT (or --duration seconds, --max-requests requests, or --stop-file
appears): then it lets
the requests in flight end (at most --grace seconds), prints one line and writes the figures as JSON
(--out). SIGUSR1 marks "the change begins": the figures are split into before and during/after.

A request counts as failed unless it got a 200 and a whole stream (its final [DONE]): ``refused``
(no answer: connection refused or reset before a byte, a 5xx or other status) and ``cut`` (the
stream began and ended early). Time to first token: from sending the request to the first chunk
that carries text. Only loopback or private addresses are accepted (it is a test tool for the lab's
own network). The API key is read from a file (YAML ``<name>: <key>`` or the key alone) or the
environment (LABFLEET_LOAD_API_KEY), never from the command line.
"""

from __future__ import absolute_import, division, print_function

import argparse
import http.client
import ipaddress
import json
import os
import signal
import socket
import sys
import threading
import time
from urllib.parse import urlsplit


def percentile(values, pct):
    """The ``pct`` percentile (nearest rank) of ``values``, or None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, int(-(-pct * len(ordered) // 100)))
    return round(ordered[min(rank, len(ordered)) - 1], 4)


def summarise(results, mark):
    """The figures of a list of request results ({start, ok, kind, ttft_s}), split at ``mark`` (a
    monotonic time, or None)."""
    before = [r for r in results if mark is not None and r["start"] < mark]
    during = [r for r in results if mark is None or r["start"] >= mark]
    failed = [r for r in results if not r["ok"]]

    def ttfts(rows):
        return [r["ttft_s"] for r in rows if r["ttft_s"] is not None]
    return {"sent": len(results), "failed": len(failed),
            "cut": len([r for r in failed if r["kind"] == "cut"]),
            "refused": len([r for r in failed if r["kind"] == "refused"]),
            "sent_before": len(before), "failed_before": len([r for r in before if not r["ok"]]),
            "ttft_p50_s": percentile(ttfts(during), 50), "ttft_p99_s": percentile(ttfts(during), 99),
            "ttft_p50_before_s": percentile(ttfts(before), 50), "ttft_p99_before_s": percentile(ttfts(before), 99),
            "errors": sorted(set(r["error"] for r in failed if r.get("error")))[:10],
            # When each failed request began, in seconds from the mark (negative: before it).
            "failed_offsets_s": [round(r["start"] - mark, 2) for r in failed][:50] if mark is not None else []}


def read_stream(response, started):
    """(complete, ttft_s) of a server-sent-events chat stream."""
    ttft = None
    for raw in response:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return True, ttft
        if ttft is None:
            try:
                choice = (json.loads(data).get("choices") or [{}])[0]
            except ValueError:
                continue
            if (choice.get("delta") or {}).get("content"):
                ttft = time.monotonic() - started
    return False, ttft


def one_request(target, body, headers, timeout):
    """Send one streamed completion; its result record."""
    started = time.monotonic()
    record = {"start": started, "ok": False, "kind": "refused", "ttft_s": None, "error": None}
    conn = http.client.HTTPConnection(target[0], target[1], timeout=timeout)
    try:
        conn.request("POST", "/v1/chat/completions", body=body, headers=headers)
        response = conn.getresponse()
        if response.status != 200:
            record["error"] = "HTTP %d" % response.status
            response.read()
            return record
        record["kind"] = "cut"
        complete, record["ttft_s"] = read_stream(response, started)
        record["ok"] = complete
        if not complete:
            record["error"] = "stream ended without [DONE]"
    except (OSError, http.client.HTTPException, socket.timeout) as exc:
        record["error"] = type(exc).__name__
    finally:
        conn.close()
    return record


class Load(object):
    """N workers that send requests one after the other until told to stop."""

    def __init__(self, args, key):
        parts = urlsplit(args.url)
        self.target = (parts.hostname, parts.port or 80)
        self.args = args
        self.body = json.dumps({"model": args.model, "stream": True, "max_tokens": args.max_tokens,
                                "messages": [{"role": "user", "content": "Count to a hundred."}]})
        self.headers = {"Content-Type": "application/json"}
        if key:
            self.headers["Authorization"] = "Bearer " + key
        self.results = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.mark = None
        self.started = time.monotonic()

    def worker(self):
        while not self.stopping.is_set():
            with self.lock:
                if self.args.max_requests and len(self.results) >= self.args.max_requests:
                    return
            record = one_request(self.target, self.body, self.headers, self.args.timeout)
            with self.lock:
                self.results.append(record)
            if record["kind"] == "refused" and not record["ok"]:
                # A client's pause after a refusal, not a tight loop of failures.
                self.stopping.wait(0.1)

    def run(self):
        threads = [threading.Thread(target=self.worker, daemon=True) for _worker in range(self.args.concurrency)]
        for thread in threads:
            thread.start()
        deadline = self.started + self.args.duration if self.args.duration else None
        while any(t.is_alive() for t in threads) and not self.stopping.is_set():
            if deadline and time.monotonic() >= deadline:
                break
            if self.args.stop_file and os.path.exists(self.args.stop_file):
                break
            time.sleep(0.1)
        self.stopping.set()
        for thread in threads:
            thread.join(self.args.grace)
        with self.lock:
            figures = summarise(list(self.results), self.mark)
        figures.update(duration_s=round(time.monotonic() - self.started, 1), concurrency=self.args.concurrency,
                       url=self.args.url, drain={"on": True, "off": False}.get(self.args.drain))
        return figures


def read_key(path, name):
    if path:
        with open(path) as handle:
            text = handle.read()
        for line in text.splitlines():
            if line.strip().startswith(name + ":"):
                return line.split(":", 1)[1].strip().strip("'\"")
        return text.strip()
    return os.environ.get("LABFLEET_LOAD_API_KEY", "")


def check_url(url):
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise SystemExit("gateway-load: --url must be http://<address>:<port>, got %r" % url)
    try:
        address = ipaddress.ip_address(socket.gethostbyname(parts.hostname))
    except (OSError, ValueError) as exc:
        raise SystemExit("gateway-load: cannot resolve %s: %s" % (parts.hostname, exc))
    if not (address.is_loopback or address.is_private):
        raise SystemExit("gateway-load: %s is not a loopback or private address; this tool only loads the lab's "
                         "own network" % address)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--url", required=True, help="the gateway, http://ADDRESS:PORT")
    parser.add_argument("--model", required=True)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--duration", type=float, default=0, help="stop after this many seconds (0: on a signal)")
    parser.add_argument("--max-requests", type=int, default=0, help="stop after this many requests (0: no bound)")
    parser.add_argument("--stop-file", help="stop when this file exists (for a caller that cannot send a signal)")
    parser.add_argument("--timeout", type=float, default=60, help="seconds one request may stay silent")
    parser.add_argument("--grace", type=float, default=30, help="seconds the requests in flight get at the stop")
    parser.add_argument("--key-file", help="YAML file with the key under --key-name, or the key alone")
    parser.add_argument("--key-name", default="vllm_server_api_key")
    parser.add_argument("--drain", choices=["on", "off", "none"], default="none",
                        help="whether the change measured drains the gateway (for the record; none: not an upgrade)")
    parser.add_argument("--label", default="upgrade under load", help="the printed line's first words")
    parser.add_argument("--out", help="write the figures here as JSON")
    args = parser.parse_args(argv)
    if not 1 <= args.concurrency <= 256 or not 1 <= args.max_tokens <= 4096:
        parser.error("--concurrency is 1 to 256 and --max-tokens 1 to 4096")
    return args


def main(argv=None):
    args = parse_args(argv)
    check_url(args.url)
    load = Load(args, read_key(args.key_file, args.key_name))
    signal.signal(signal.SIGTERM, lambda *_: load.stopping.set())
    signal.signal(signal.SIGINT, lambda *_: load.stopping.set())
    signal.signal(signal.SIGUSR1, lambda *_: setattr(load, "mark", time.monotonic()))
    figures = load.run()
    print("%s%s: %d sent, %d failed (%d cut, %d refused); time to first token p50 %s s, p99 %s s "
          "(before the change: %d sent, %d failed, p50 %s s, p99 %s s)"
          % (args.label, "" if args.drain == "none" else " (drain %s)" % args.drain, figures["sent"], figures["failed"], figures["cut"], figures["refused"],
             figures["ttft_p50_s"], figures["ttft_p99_s"], figures["sent_before"], figures["failed_before"],
             figures["ttft_p50_before_s"], figures["ttft_p99_before_s"]))
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(figures, handle, indent=2, sort_keys=True)
            handle.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
