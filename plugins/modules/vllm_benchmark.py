#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_benchmark
short_description: Measure a served OpenAI-compatible endpoint (vLLM) with streaming, and compare with a baseline
version_added: 0.1.0
description:
  - Sends streamed C(POST /v1/chat/completions) requests with a fixed prompt and O(max_tokens) at each
    concurrency of O(concurrency) (O(concurrency) requests at once, one thread each), O(runs) times per
    level, and measures time to first token (TTFT), the times between tokens (ITL), the output tokens/s
    of each request and the aggregate tokens/s of each level; reports p50 and p90 of each.
  - "Definitions: TTFT is the time from sending a request to the first chunk whose text is not empty (the
    role chunk and chunks whose text the server held back are skipped, as in M(labfleet.vllm.openai_smoke)).
    From that chunk on, every chunk with a text field (empty text included: a held-back token is still a
    decode step) is a token event; ITL are the gaps between consecutive token events, pooled over the
    requests of a level. Output tokens are the server's C(usage.completion_tokens) (asked for with
    C(stream_options.include_usage)), else the token events. Output tokens/s of one request = (tokens - 1)
    / (last token event - first token event): the decode speed, TTFT excluded. Aggregate tokens/s of one run
    = all its requests' output tokens / the wall time from the first request sent to the last one ended;
    the level's C(level) figure = all runs' tokens / the sum of their wall times."
  - "Percentiles are linear interpolations between the two nearest ranks (rank (n - 1) x q / 100 from 0;
    numpy's default): p50 of [1, 2, 3, 4] is 2.5, p90 3.7."
  - One warm-up request (O(warmup)) goes first and is not counted.
  - "A request whose token events arrive with a median gap under 0.1 ms got its tokens in a burst (buffered on the
    way, for example by a server that fell behind); no decode step is that short, so its ITL and tokens/s show the
    buffering. Each level counts such requests (C(burst_requests)) and the summary says so; the aggregate holds."
  - The result (RV(benchmark)) carries the model, the deployed O(flags) and O(image_digest) and the
    workload (prompt hash, O(max_tokens), O(temperature), O(ignore_eos)); save it per host and pass it as
    O(baseline) to a later run, which then compares each figure and says better, worse or unchanged
    (lower TTFT and ITL are better, higher tokens/s are better). A change of the flags followed by a
    benchmark run is the tuning loop; the comparison is refused, with the differing fields named, when the
    baseline's model, flags, image digest or workload differ, unless O(allow_differences) lists them.
  - "Roofline (when O(weight_bytes_per_gpu) is given): at batch 1 every token reads each GPU's share of the
    weights once, so decoding cannot exceed memory bandwidth per GPU / weight bytes per GPU tokens/s; the
    measured single-request speed (p50 of output tokens/s at concurrency 1) is reported as a share of it.
    The bandwidth comes from O(gpu_name) / O(pci_device_id) (vendor datasheet figures, with their sources, in
    C(plugins/module_utils/knowledge/_gpu_models.py)) or O(memory_bandwidth_gb_s)."
  - Every request is bounded as a whole by O(request_timeout) (connecting, headers, the whole stream) and the
    whole run by O(total_timeout); a request that fails, or a run that would start after the deadline, fails
    the task with the figures measured so far.
  - Read-only; changes nothing on the host or the server. Check mode runs the same requests.
extends_documentation_fragment:
  - labfleet.vllm.openai_client
  - labfleet.vllm.attributes
  - labfleet.vllm.attributes.read_only
options:
  concurrency:
    description:
      - The concurrency levels, each an integer from 1 to 256; 1 to 16 different levels, run in the order
        given. Each run of a level sends that many requests at once.
    type: list
    elements: raw
    default: [1, 8, 32]
  runs:
    description:
      - Runs per concurrency level, an integer from 1 to 100.
    type: raw
    default: 3
  prompt:
    description:
      - The user message of every request (not empty). Keep it fixed between runs you compare.
    type: str
    default: Write a detailed story about a lighthouse keeper who finds a message in a bottle.
  max_tokens:
    description:
      - C(max_tokens) of every request, an integer from 2 to 1000000 (two tokens at least, for a decode speed).
    type: raw
    default: 256
  temperature:
    description:
      - C(temperature) of every request, a number from 0 to 2.
    type: raw
    default: 0
  ignore_eos:
    description:
      - Send vLLM's C(ignore_eos) so that every request generates O(max_tokens) tokens (the same work each
        time). Turn off for servers that refuse unknown request fields.
    type: bool
    default: true
  warmup:
    description:
      - Send one request first and leave it out of the figures (the first request after a start can be slow).
    type: bool
    default: true
  request_timeout:
    description:
      - Seconds one request may take in all (connecting, headers, the whole stream), a number from 1 to 86400.
    type: raw
    default: 300
  total_timeout:
    description:
      - Seconds the whole benchmark may take, a number from 1 to 604800. A run is not started after it; each
        request's timeout is cut to what is left.
    type: raw
    default: 3600
  flags:
    description:
      - The deployed vLLM flags, recorded in the result and compared with the baseline's - the instance's
        C(argv) (a list of words such as V(--max-num-seqs), V(32)) or its C(vllm_args) (a dict; False and
        null values are left out).
    type: raw
    default: []
  image_digest:
    description:
      - The deployed image's digest (for example from M(labfleet.vllm.vllm_image_facts)), recorded and compared.
    type: str
    default: ""
  baseline:
    description:
      - A previous run's RV(benchmark) to compare with. An empty dict means none (the first run).
    type: dict
  allow_differences:
    description:
      - Identity fields that may differ from the baseline's and still be compared (the differences are shown).
        List V(flags) for the tuning loop.
    type: list
    elements: str
    choices: [model, flags, image_digest, workload]
    default: []
  noise_pct:
    description:
      - A change within this many percent counts as unchanged, a number from 0 to 100.
    type: raw
    default: 5
  gpu_name:
    description:
      - The GPU's name for the roofline's memory bandwidth, as C(gpu_facts) reports it (V(Tesla V100-PCIE-32GB),
        V(NVIDIA A100-SXM4-80GB)) or as the PCI table names it (V(Tesla V100 PCIe 32GB)).
    type: str
  pci_device_id:
    description:
      - The GPU's PCI device ID (V(0x1db6)); wins over O(gpu_name).
    type: str
  memory_bandwidth_gb_s:
    description:
      - Memory bandwidth per GPU in GB/s (10^9 bytes/s) for the roofline, a number from 1 to 100000; replaces
        the table's figure (for a GPU the table does not know).
    type: raw
  weight_bytes_per_gpu:
    description:
      - The weight bytes one GPU reads per generated token, a number from 1 to 10^15 - the model's weight bytes
        (M(labfleet.vllm.model_facts)) / C(tensor_parallel_size). With pipeline parallelism the stages work one
        after another for one request, so do not divide by the pipeline size. Without it there is no roofline.
    type: raw
author:
  - labfleet contributors (@labfleet)
notes:
  - A number option that is not a finite number in its range (C(nan), C(inf), a huge integer, a negative
    value), an empty or too long O(concurrency) list, a level above 256 or a level given twice fails at once
    with a message that names the option.
  - The load it creates is real - run it on a lab server, not on one that serves users.
seealso:
  - module: labfleet.vllm.openai_smoke
  - module: labfleet.vllm.model_facts
"""

EXAMPLES = r"""
- name: Benchmark the local vLLM server
  labfleet.vllm.vllm_benchmark:
    url: http://127.0.0.1:8000
    model: quasar
    api_key: "{{ vllm_server_api_key }}"
    concurrency: [1, 8]
    flags: "{{ preflight_verdict['instances'][0]['argv'] }}"
    image_digest: "{{ vllm_image['digest'] }}"
    gpu_name: "{{ ansible_facts['nvidia']['gpus'][0]['name'] }}"
    weight_bytes_per_gpu: "{{ (model['weight_bytes'] / 2) | int }}"
  register: bench

- name: Save it as the baseline of this host
  ansible.builtin.copy:
    content: "{{ bench.benchmark | to_nice_json }}"
    dest: "/var/lib/labfleet/benchmark-baseline.json"
    mode: "0644"

- name: After changing --max-num-seqs, compare with the baseline
  labfleet.vllm.vllm_benchmark:
    url: http://127.0.0.1:8000
    model: quasar
    concurrency: [1, 8]
    flags: "{{ preflight_verdict['instances'][0]['argv'] }}"
    image_digest: "{{ vllm_image['digest'] }}"
    baseline: "{{ lookup('ansible.builtin.file', 'baseline.json') | from_json }}"
    allow_differences: [flags]
  register: ab

- name: Show the figures and the change
  ansible.builtin.debug:
    msg: "{{ ab['summary'] }}"
"""

RETURN = r"""
benchmark:
  description:
    - The result document; save it and pass it as O(baseline) later.
    - C(levels) holds per concurrency C(ttft_s), C(itl_s) (seconds), C(request_tok_s) and C(aggregate_tok_s)
      (tokens/s), each with C(p50), C(p90), C(mean), C(min), C(max), C(count); C(aggregate_tok_s) adds
      C(level) (all tokens / all runs' wall time). Also C(runs), C(requests), C(failed), C(output_tokens),
      C(wall_s), C(burst_requests).
  returned: always (with the levels measured so far when the task fails)
  type: dict
  sample:
    schema: labfleet.vllm.benchmark/1
    model: quasar
    image_digest: sha256:0c5f...
    flags: {"tensor-parallel-size": "2", "max-num-seqs": "32", "enforce-eager": true}
    workload: {"prompt_sha256": "9b1e...", "prompt_chars": 82, "max_tokens": 256, "temperature": 0,
               "ignore_eos": true}
    concurrency: [1, 8]
    runs: 3
    levels:
      - concurrency: 1
        runs: 3
        requests: 3
        failed: 0
        output_tokens: 768
        wall_s: 40.2
        ttft_s: {"p50": 0.95, "p90": 1.1, "mean": 0.99, "min": 0.93, "max": 1.13, "count": 3}
        itl_s: {"p50": 0.05, "p90": 0.056, "mean": 0.051, "min": 0.047, "max": 0.21, "count": 765}
        request_tok_s: {"p50": 19.6, "p90": 20.1, "mean": 19.7, "min": 19.4, "max": 20.2, "count": 3}
        aggregate_tok_s: {"p50": 19.1, "p90": 19.3, "mean": 19.1, "min": 19.0, "max": 19.4, "count": 3,
                          "level": 19.1}
    roofline: {"memory_bandwidth_gb_s": 900, "weight_bytes_per_gpu": 17500000000, "bound_tok_s": 51.429,
               "measured_tok_s": 19.6, "share_pct": 38.1, "gpu": "Tesla V100 PCIe 32GB", "confidence": "third_party"}
    measured_at: "2026-03-01T10:00:00Z"
comparison:
  description:
    - The A/B comparison with O(baseline). C(compared) false with C(message) and C(refused_by) naming the
      differing fields when it was refused. Each of C(rows) is C(concurrency), C(metric), C(stat) (p50, p90;
      C(level) for aggregate_tok_s), C(baseline), C(now), C(change_pct), C(better) (lower or higher) and
      C(verdict) (better, worse, unchanged, unknown).
  returned: when O(baseline) is not empty
  type: dict
  sample:
    compared: true
    message: "compared 21 figures: 2 better, 1 worse, 18 unchanged (within 5 %)"
    differences: [{"field": "flags", "detail": "--max-num-seqs 32 -> 16"}]
    rows: [{"concurrency": 8, "metric": "aggregate_tok_s", "stat": "p50", "baseline": 35.0, "now": 41.2,
            "change_pct": 17.7, "better": "higher", "verdict": "better"}]
summary:
  description: Lines for a person - one per level, the roofline, and the A/B verdict with the largest changes.
  returned: always
  type: list
  elements: str
  sample: ["concurrency 1 (3 run(s), 3 request(s)): TTFT p50 950.0 ms p90 1100.0 ms; ITL p50 50.0 ms p90 56.0 ms;
            per request p50 19.6 tok/s; aggregate 19.1 tok/s"]
"""

import json
import threading
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._gpu_models import memory_bandwidth
from ansible_collections.labfleet.vllm.plugins.module_utils.reporting._bench import (
    MAX_CONCURRENCY,
    MAX_LEVELS,
    check_document,
    compare,
    level_figures,
    normalize_flags,
    request_figures,
    result_document,
    roofline,
    stream_events,
    summary_lines,
    workload,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.clients._openai import (
    MAX_BODY_BYTES,
    MAX_STREAM_BYTES,
    Deadline,
    open_request,
    read_body,
    read_pieces,
    Unreachable,
    auth_headers,
    chat_body,
    check_client_options,
    checked_params,
    client_argument_spec,
    check_number,
    error_message,
    iter_sse_data,
    join_url,
    short,
    timeout_message,
)

# The clock of every time the module measures and of total_timeout (unit tests run the module on a
# virtual one; each request's own timeout is kept by _openai's watchdog in real time).
CLOCK = time.monotonic
# Number options: (name, lowest, highest, integer, required). Type raw, checked by check_number:
# Ansible's own int/float conversion raises on inf or 10**400 (see openai_smoke).
NUMBER_OPTIONS = (
    ("runs", 1, 100, True, True),
    ("max_tokens", 2, 1000000, True, True),
    ("temperature", 0, 2, False, True),
    ("request_timeout", 1, 86400, False, True),
    ("total_timeout", 1, 604800, False, True),
    ("noise_pct", 0, 100, False, True),
    ("memory_bandwidth_gb_s", 1, 100000, False, False),
    ("weight_bytes_per_gpu", 1, 10 ** 15, False, False),
)
# Seconds a run's threads get beyond their request timeout to finish (the watchdog ends every
# request in time; this only bounds the join).
JOIN_SLACK = 15
# A run is not started with less time than this left before total_timeout (seconds).
MIN_RUN_TIME = 0.5
# Longest prompt sent (characters).
MAX_PROMPT = 1000000
# How many request errors a failure message shows.
SHOWN_ERRORS = 3


def _has_control(text):
    return any(ord(c) < 32 or ord(c) == 127 for c in text)


def check_params(p):
    """Convert the options in place; the first problem as a message naming the option, or None."""
    error = check_client_options(p, NUMBER_OPTIONS)
    if error:
        return error
    levels = p["concurrency"]
    if not isinstance(levels, list) or not levels or len(levels) > MAX_LEVELS:
        return ("concurrency must be a list of 1 to %d levels such as [1, 8, 32], got %s"
                % (MAX_LEVELS, "%d levels" % len(levels) if isinstance(levels, list) and levels else "an empty list"))
    converted = []
    for index, level in enumerate(levels):
        value, error = check_number("concurrency[%d]" % index, level, 1, MAX_CONCURRENCY, integer=True)
        if error:
            return error
        if value in converted:
            return "concurrency lists %d twice; give each level once" % value
        converted.append(value)
    p["concurrency"] = converted
    if not p["prompt"] or len(p["prompt"]) > MAX_PROMPT:
        return "prompt must be a text of 1 to %d characters, got %d" % (MAX_PROMPT, len(p["prompt"] or ""))
    if _has_control(p["image_digest"] or "") or len(p["image_digest"] or "") > 4096:
        return "image_digest must be an image digest such as sha256:0c5f... (no control characters), got %r" \
            % short(p["image_digest"], 80)
    flags, error = normalize_flags(p["flags"])
    if error:
        return error
    p["flags"] = flags
    if p["baseline"]:
        error = check_document(p["baseline"])
        if error:
            return error + "; pass the benchmark value a previous vllm_benchmark run returned, or {} for none"
    return None


# ------------------------------------------------------------------ measuring


def stream_request(url, body, headers, timeout, clock=time.monotonic):
    """Send one streamed chat completion and time its events.

    ``body``: the request (bytes of JSON); ``timeout`` bounds the whole request. Returns
    ``{started, ended, figures, error, timed_out, status, finish_reason}``; ``figures`` is
    _bench.request_figures' result; ``error`` is None for a complete stream with tokens.
    """
    all_headers = dict(headers or {})
    all_headers["Content-Type"] = "application/json"
    all_headers["Accept"] = "text/event-stream"
    outcome = {"started": clock(), "ended": None, "figures": None, "error": None, "timed_out": False,
               "status": None, "finish_reason": None}
    try:
        connection, response, watchdog = open_request("POST", url, body, all_headers, timeout)
    except Unreachable as exc:
        outcome.update(ended=clock(), error=str(exc), timed_out=exc.timed_out)
        return outcome
    stream = {"events": [], "usage_tokens": None, "done": False}
    try:
        outcome["status"] = response.status
        ctype = (response.getheader("Content-Type") or "").lower()
        if response.status != 200:
            answer, error = read_body(response, MAX_BODY_BYTES, watchdog)
            outcome["error"] = "HTTP %s: %s" % (response.status, error or error_message(answer))
        elif not ctype.startswith("text/event-stream"):
            read_body(response, MAX_BODY_BYTES, watchdog)
            outcome["error"] = "the answer is not a stream (Content-Type %s)" % (short(ctype, 60) or "missing")
        else:
            state = {"error": None}

            def timed():
                for data in iter_sse_data(read_pieces(response, MAX_STREAM_BYTES, state, watchdog)):
                    yield clock(), data

            stream = stream_events(timed())
            outcome["finish_reason"] = stream["finish_reason"]
            outcome["error"] = state["error"] or stream["error"]  # an end before [DONE] included
        if watchdog.expired() and not stream["done"]:
            outcome["timed_out"] = True
            outcome["error"] = "%s (%d token event(s) so far)" % (timeout_message(url, timeout), len(stream["events"]))
    finally:
        watchdog.stop()
        connection.close()
    outcome["ended"] = clock()
    outcome["figures"] = request_figures(outcome["started"], outcome["ended"], stream["events"],
                                         stream["usage_tokens"])
    if not outcome["error"] and outcome["figures"]["ttft_s"] is None:
        outcome["error"] = "the answer held no tokens (finish_reason %s)" % outcome["finish_reason"]
    return outcome


def run_once(url, body, headers, concurrency, timeout, clock=time.monotonic):
    """One run: ``concurrency`` requests at once (one thread each, released together). Returns
    ``{started, ended, requests (figures of those that succeeded), errors}``."""
    outcomes = [None] * concurrency
    barrier = threading.Barrier(concurrency)

    def worker(index):
        try:
            barrier.wait(10)
        except threading.BrokenBarrierError:
            pass
        outcomes[index] = stream_request(url, body, headers, timeout, clock)

    threads = [threading.Thread(target=worker, args=(i,), name="bench-%d" % i) for i in range(concurrency)]
    for thread in threads:
        thread.daemon = True
        thread.start()
    ends = clock() + timeout + JOIN_SLACK
    for thread in threads:
        thread.join(max(ends - clock(), 0.0))
    done = [o for o in outcomes if o is not None]
    errors = ["%s did not end within %g s" % (url, timeout + JOIN_SLACK)] * (concurrency - len(done))
    errors += [o["error"] for o in done if o["error"]]
    return {"started": min([o["started"] for o in done] or [clock()]),
            "ended": max([o["ended"] for o in done] or [clock()]),
            "requests": [o["figures"] for o in done if not o["error"]],
            "errors": errors,
            "timed_out": any(o["timed_out"] for o in done) or len(done) < concurrency}


def run_level(url, body, headers, concurrency, runs, deadline, request_timeout, clock=time.monotonic):
    """``runs`` runs at one concurrency within ``deadline`` (an _openai.Deadline). Returns ``{level,
    errors, stopped, timed_out}``: ``level`` is _bench.level_figures' result (None before any run),
    ``stopped`` True when the deadline came before a run, ``timed_out`` True when a request ran out
    of time."""
    done = []
    errors = []
    timed_out = False
    stopped = False
    for _number in range(runs):
        left = deadline.remaining()
        if left < MIN_RUN_TIME:
            stopped = True
            break
        run = run_once(url, body, headers, concurrency, min(request_timeout, left), clock)
        errors.extend(run["errors"])
        timed_out = timed_out or run["timed_out"]
        done.append(run)
    level = level_figures(concurrency, done, len(errors)) if done else None
    return {"level": level, "errors": errors, "stopped": stopped, "timed_out": timed_out}


def roofline_for(p, levels):
    """The roofline dict, or ``(None, warning)``."""
    if p["weight_bytes_per_gpu"] is None:
        if p["gpu_name"] or p["pci_device_id"] or p["memory_bandwidth_gb_s"]:
            return None, "no roofline: set weight_bytes_per_gpu (the model's weight bytes / tensor_parallel_size)"
        return None, None
    source = {}
    if p["memory_bandwidth_gb_s"] is not None:
        bandwidth = p["memory_bandwidth_gb_s"]
        source = {"gpu": p["gpu_name"] or None, "source": "memory_bandwidth_gb_s", "confidence": "given"}
    else:
        found = memory_bandwidth(p["gpu_name"], p["pci_device_id"])
        if found is None:
            return None, ("no roofline: the memory bandwidth of GPU %r (PCI device %s) is not recorded; set "
                          "memory_bandwidth_gb_s from its datasheet" % (p["gpu_name"], p["pci_device_id"]))
        bandwidth = found["gb_s"]
        source = dict((k, found[k]) for k in ("gpu", "source", "confidence"))
    single = [lv for lv in levels if lv["concurrency"] == 1]
    measured = single[0]["request_tok_s"]["p50"] if single else None
    result = roofline(bandwidth, p["weight_bytes_per_gpu"], measured)
    result.update(source)
    return result, None


def main():
    module = AnsibleModule(
        argument_spec=client_argument_spec(
            concurrency=dict(type="list", elements="raw", default=[1, 8, 32]),
            runs=dict(type="raw", default=3),
            prompt=dict(type="str", default="Write a detailed story about a lighthouse keeper who finds a message "
                                            "in a bottle."),
            max_tokens=dict(type="raw", default=256, no_log=False),
            temperature=dict(type="raw", default=0),
            ignore_eos=dict(type="bool", default=True),
            warmup=dict(type="bool", default=True),
            request_timeout=dict(type="raw", default=300),
            total_timeout=dict(type="raw", default=3600),
            flags=dict(type="raw", default=[]),
            image_digest=dict(type="str", default=""),
            baseline=dict(type="dict"),
            allow_differences=dict(type="list", elements="str", default=[],
                                   choices=["model", "flags", "image_digest", "workload"]),
            noise_pct=dict(type="raw", default=5),
            gpu_name=dict(type="str"),
            pci_device_id=dict(type="str"),
            memory_bandwidth_gb_s=dict(type="raw"),
            weight_bytes_per_gpu=dict(type="raw"),
        ),
        supports_check_mode=True,
    )
    p = checked_params(module, check_params)

    base = p["url"].rstrip("/")
    url = join_url(base, "/v1/chat/completions")
    request = chat_body(p["model"], p["prompt"], p["max_tokens"], p["temperature"], stream=True)
    if p["ignore_eos"]:
        request["ignore_eos"] = True  # vLLM's extra sampling field (vllm-0.8.5 protocol.py:277)
    body = json.dumps(request).encode("utf-8")
    headers = auth_headers(p["api_key"])
    clock = CLOCK
    deadline = Deadline(p["total_timeout"], clock)
    work = workload(p["prompt"], p["max_tokens"], p["temperature"], p["ignore_eos"])
    measured_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    levels = []

    def document():
        roof, note = roofline_for(p, levels)
        return result_document(levels, p["model"], p["flags"], p["image_digest"], work, roof, measured_at), note

    def fail(message):
        doc, _note = document()
        module.fail_json(msg=message, benchmark=doc, summary=summary_lines(doc))

    def slower(timed_out):
        return ("; raise request_timeout (now %g s) or lower max_tokens or the concurrency" % p["request_timeout"]
                if timed_out else "")

    if p["warmup"]:
        first = stream_request(url, body, headers, min(p["request_timeout"], max(deadline.remaining(), 1.0)), clock)
        if first["error"]:
            hint = " (the API key is wrong or missing)" if first["status"] == 401 else ""
            fail("The warm-up request to %s failed%s: %s%s" % (url, hint, first["error"], slower(first["timed_out"])))

    for concurrency in p["concurrency"]:
        outcome = run_level(url, body, headers, concurrency, p["runs"], deadline, p["request_timeout"], clock)
        if outcome["level"] is not None:
            levels.append(outcome["level"])
        errors = outcome["errors"]
        if outcome["stopped"] or (outcome["timed_out"] and deadline.remaining() < MIN_RUN_TIME):
            fail("The benchmark used up total_timeout (%g s) before the runs at concurrency %d ended; raise "
                 "total_timeout or lower runs, max_tokens or the concurrency levels" % (p["total_timeout"], concurrency))
        if errors:
            shown = "; ".join(sorted(set(short(e, 200) for e in errors))[:SHOWN_ERRORS])
            fail("%d of %d requests at concurrency %d failed: %s%s" % (
                len(errors), concurrency * p["runs"], concurrency, shown, slower(outcome["timed_out"])))

    doc, note = document()
    if note:
        module.warn(note)
    result = {"changed": False, "benchmark": doc}
    comparison = None
    if p["baseline"]:
        comparison = compare(p["baseline"], doc, allow=p["allow_differences"], noise_pct=p["noise_pct"])
        result["comparison"] = comparison
        if not comparison["compared"]:
            module.warn("A/B %s" % comparison["message"])
    result["summary"] = summary_lines(doc, comparison)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
