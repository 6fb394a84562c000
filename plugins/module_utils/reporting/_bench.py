# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The figures of a serving benchmark, A/B against a saved baseline, and the decode roofline.

Private to labfleet.vllm (the leading underscore): no stability promise to other collections.
Pure: no I/O, no clock. The vllm_benchmark module streams the requests (with _openai's client)
and hands the arrival times of the stream's events to these functions.

Definitions (the module's DOCUMENTATION repeats them):

- Percentiles: linear interpolation between the two nearest ranks of the sorted values, rank
  ``h = (n - 1) * q / 100`` counted from 0 (numpy's default ``method="linear"``, Hyndman and Fan's
  definition 7). ``[1, 2, 3, 4]``: p50 2.5, p90 3.7. No values: None.
- TTFT: from sending the request to the first chunk whose text is not empty. The role chunk and a
  chunk whose text the detokenizer held back (an incomplete UTF-8 character, vllm-0.8.5
  vllm/transformers_utils/detokenizer_utils.py:180) carry no text and are skipped, as openai_smoke
  does (_openai.read_chat_stream).
- Token events: from that first chunk on, every chunk that carries a choice with a text field
  (``delta.content`` or ``text``), empty text included: a held-back token is still a decode step.
  The usage chunk (``choices: []``) and a closing ``delta: {}`` carry none.
- Inter-token times (ITL): the gaps between consecutive token events.
- Output tokens: the server's ``usage.completion_tokens`` when it sent one (the module asks for it
  with ``stream_options.include_usage``), else the number of token events.
- Output tokens/s of one request: (output tokens - 1) / (last token event - first token event):
  the decode speed, TTFT excluded (the inverse of vLLM's TPOT, vllm-0.8.5
  benchmarks/benchmark_serving.py:170-174). None below two tokens.
- Aggregate tokens/s of one run of a concurrency level (``concurrency`` requests sent at once):
  the output tokens of all its requests / the wall time from the first request sent to the last
  one ended. For the level: all its runs' tokens / the sum of their wall times (``level``), and
  p50/p90 over the runs.
- Roofline (batch 1): every generated token reads each GPU's share of the weights once, so the
  decode speed cannot exceed memory bandwidth per GPU / weight bytes per GPU (with tensor
  parallelism the GPUs read their shares at the same time). KV cache, activations and all-reduce
  are left out, so real decoding reaches a part of it; the share says how much.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import math

from ansible_collections.labfleet.vllm.plugins.module_utils.clients._openai import stream_chunks

SCHEMA = "labfleet.vllm.benchmark/1"
# The highest concurrency a level may have (threads on the host) and the most levels per run.
MAX_CONCURRENCY = 256
MAX_LEVELS = 16
# Statistics kept for each metric.
STATS = ("p50", "p90", "mean", "min", "max", "count")
# The metrics of a level, and which way is better.
LOWER = "lower"
HIGHER = "higher"
METRICS = (
    ("ttft_s", LOWER),
    ("itl_s", LOWER),
    ("request_tok_s", HIGHER),
    ("aggregate_tok_s", HIGHER),
)
# The statistics compared against a baseline (aggregate_tok_s also compares its "level" value).
COMPARED_STATS = ("p50", "p90")
# Fields of a result document that must match a baseline's unless allowed.
IDENTITY_FIELDS = ("model", "flags", "image_digest", "workload")
# Limits on a baseline document (it comes from a file the user keeps).
MAX_TEXT = 4096
MAX_FLAGS = 512

_GB = 10 ** 9


# ------------------------------------------------------------------ statistics


def _finite(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def percentile(values, q):
    """The ``q``-th percentile (0-100) of ``values`` by linear interpolation (numpy's default);
    None for no values."""
    data = sorted(values)
    if not data:
        return None
    if not 0 <= q <= 100:
        raise ValueError("q must be from 0 to 100, got %r" % (q,))
    rank = (len(data) - 1) * q / 100.0
    low = int(math.floor(rank))
    high = min(low + 1, len(data) - 1)
    return data[low] + (rank - low) * (data[high] - data[low])


def summarize(values):
    """``{p50, p90, mean, min, max, count}`` of numbers (all None but count 0 for none)."""
    data = [v for v in values if _finite(v)]
    if not data:
        return {"p50": None, "p90": None, "mean": None, "min": None, "max": None, "count": 0}
    return {"p50": percentile(data, 50), "p90": percentile(data, 90), "mean": sum(data) / len(data),
            "min": min(data), "max": max(data), "count": len(data)}


# ------------------------------------------------------------------ one request


def chunk_text(chunk):
    """The text a streamed chunk carries ('' for a held-back token), or None when no choice has a
    text field (the usage chunk, a ``delta: {}`` closing chunk, an error)."""
    choices = chunk.get("choices") if isinstance(chunk, dict) else None
    found = None
    for choice in choices if isinstance(choices, list) else []:
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if isinstance(delta, dict) and isinstance(delta.get("content"), str):
            found = (found or "") + delta["content"]
        if isinstance(choice.get("text"), str):
            found = (found or "") + choice["text"]
    return found


def stream_events(timed_data):
    """Read a stream's SSE data, each with the time it arrived: ``timed_data`` yields ``(time,
    data)`` (the text after ``data:`` of one event). Reads until ``[DONE]``, an error chunk or the
    end; a ValueError from the iterator (a line too long), or the end before ``[DONE]``, sets
    ``error`` (the reading is _openai.stream_chunks').

    Returns ``{events: [(time, text)], usage_tokens, done, finish_reason, error, chunks}``;
    ``events`` holds the chunks that carry a text field (see chunk_text), in order.
    """
    state = {}
    events = []
    for when, chunk in stream_chunks(timed_data, state):
        text = chunk_text(chunk)
        if text is not None:
            events.append((when, text))
    return {"events": events, "usage_tokens": state["usage_tokens"], "done": state["done"],
            "finish_reason": state["finish_reason"], "error": state["error"], "chunks": state["chunks"]}


# A median gap between token events below this (seconds) is no decode step (a GPU decode step of any
# model takes a millisecond or more): the tokens were buffered on the way (the server falling behind
# and flushing, a proxy) and arrived in a burst, so the request's ITL and tokens/s say nothing of decoding.
BURST_GAP_S = 0.0001


def request_figures(started, ended, events, usage_tokens=None):
    """The figures of one streamed request from the times of its events (see the module docstring).

    ``started``: when the request was sent; ``ended``: when its stream ended; ``events``: ``[(time,
    text)]`` as stream_events returns them; ``usage_tokens``: the server's count, or None.

    Returns ``{ttft_s, tokens, token_events, itl_s: [gaps], itl_mean_s, decode_s, request_tok_s,
    latency_s, burst}``; ``ttft_s`` is None without a chunk with text (then no token figures);
    ``burst`` is True when the median gap is under BURST_GAP_S (the tokens arrived in a burst).
    """
    figures = {"ttft_s": None, "tokens": usage_tokens if usage_tokens is not None else 0, "token_events": 0,
               "itl_s": [], "itl_mean_s": None, "decode_s": None, "request_tok_s": None,
               "latency_s": ended - started}
    first = next((i for i, (_when, text) in enumerate(events) if text), None)
    if first is None:
        return figures
    times = [when for when, _text in events[first:]]
    tokens = usage_tokens if usage_tokens is not None else len(times)
    decode = times[-1] - times[0]
    figures.update(ttft_s=times[0] - started, tokens=tokens, token_events=len(times),
                   itl_s=[b - a for a, b in zip(times, times[1:])], decode_s=decode)
    if tokens > 1 and decode > 0:
        figures["itl_mean_s"] = decode / (tokens - 1)
        figures["request_tok_s"] = (tokens - 1) / decode
    gaps = sorted(figures["itl_s"])
    figures["burst"] = len(gaps) >= 2 and gaps[len(gaps) // 2] < BURST_GAP_S
    return figures


# ------------------------------------------------------------------ a concurrency level


def run_figures(started, ended, requests):
    """One run of a level: its requests (request_figures results) sent at once, the run from
    ``started`` (the first sent) to ``ended`` (the last ended). Returns ``{wall_s, output_tokens,
    aggregate_tok_s}`` (aggregate None when the wall time is not positive)."""
    tokens = sum(r["tokens"] for r in requests)
    wall = ended - started
    return {"wall_s": wall, "output_tokens": tokens, "aggregate_tok_s": tokens / wall if wall > 0 else None}


def level_figures(concurrency, runs, failed=0):
    """The figures of a concurrency level from its runs: ``[{started, ended, requests}]`` with
    the requests that succeeded (``failed`` counts the others).

    Returns ``{concurrency, runs, requests, failed, output_tokens, wall_s, ttft_s, itl_s,
    request_tok_s, aggregate_tok_s}``; the metrics are summarize() dicts (ITL over every gap of
    every request, the others per request or per run); aggregate_tok_s adds ``level`` (all
    tokens / all runs' wall time).
    """
    requests = [r for run in runs for r in run["requests"]]
    per_run = [run_figures(run["started"], run["ended"], run["requests"]) for run in runs]
    tokens = sum(r["output_tokens"] for r in per_run)
    wall = sum(r["wall_s"] for r in per_run)
    aggregate = summarize([r["aggregate_tok_s"] for r in per_run])
    aggregate["level"] = tokens / wall if wall > 0 else None
    return {
        "concurrency": concurrency,
        "runs": len(runs),
        "requests": len(requests),
        "failed": failed,
        "output_tokens": tokens,
        "wall_s": wall,
        "ttft_s": summarize([r["ttft_s"] for r in requests]),
        "itl_s": summarize([gap for r in requests for gap in r["itl_s"]]),
        "request_tok_s": summarize([r["request_tok_s"] for r in requests]),
        "aggregate_tok_s": aggregate,
        "burst_requests": sum(1 for r in requests if r.get("burst")),
    }


# ------------------------------------------------------------------ flags, the document


def _is_number(text):
    try:
        float(text)
        return True
    except ValueError:
        return False


def _is_flag(token):
    return token.startswith("-") and len(token) > 1 and not _is_number(token)


def _flag_value(value):
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return " ".join(_flag_value(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def normalize_flags(flags):
    """The deployed vLLM flags as ``{name: value}`` (names without dashes, ``_`` read as ``-``;
    a bare flag is True). Takes an argv list (``["--max-num-seqs", "32", "--enforce-eager"]``,
    ``--x=y`` too; words that are no flag's value go under ``""``), or a dict like the plan's
    ``vllm_args`` (False and None left out, as the unit's argv leaves them out). Returns
    ``(flags, None)`` or ``(None, message)``."""
    if flags is None:
        return {}, None
    out = {}
    if isinstance(flags, dict):
        if len(flags) > MAX_FLAGS:
            return None, "flags has %d entries; at most %d" % (len(flags), MAX_FLAGS)
        for name, value in flags.items():
            if value is None or value is False:
                continue
            key = str(name).lstrip("-").replace("_", "-")
            out[key] = True if value is True else _flag_value(value)
        return out, None
    if not isinstance(flags, (list, tuple)):
        return None, "flags must be a list of command-line words or a dict of flag: value, got %s" % \
            type(flags).__name__
    if len(flags) > 2 * MAX_FLAGS:
        return None, "flags has %d words; at most %d" % (len(flags), 2 * MAX_FLAGS)
    words = [_flag_value(w) for w in flags]
    loose = []
    index = 0
    while index < len(words):
        word = words[index]
        if _is_flag(word):
            name, sep, value = word.lstrip("-").partition("=")
            name = name.replace("_", "-")
            if sep:
                out[name] = value
            elif index + 1 < len(words) and not _is_flag(words[index + 1]):
                out[name] = words[index + 1]
                index += 1
            else:
                out[name] = True
        else:
            loose.append(word)
        index += 1
    if loose:
        out[""] = " ".join(loose)
    return out, None


def workload(prompt, max_tokens, temperature, ignore_eos):
    """What the requests asked for (the prompt by its SHA-256 and length)."""
    return {"prompt_sha256": hashlib.sha256(prompt.encode("utf-8", "surrogatepass")).hexdigest(),
            "prompt_chars": len(prompt), "max_tokens": max_tokens, "temperature": temperature,
            "ignore_eos": ignore_eos}


def _rounded(value, digits):
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return dict((k, _rounded(v, digits) if k != "count" else v) for k, v in value.items())
    return value


def rounded_level(level):
    """A level with seconds kept to the microsecond and rates to 1/1000 token/s."""
    out = dict(level)
    for name in ("ttft_s", "itl_s", "wall_s"):
        out[name] = _rounded(level[name], 6)
    for name in ("request_tok_s", "aggregate_tok_s"):
        out[name] = _rounded(level[name], 3)
    return out


def result_document(levels, model, flags, image_digest, work, roofline_result=None, measured_at=None):
    """The result of one benchmark of one host, as saved for later A/B runs.

    ``levels``: level_figures results; ``flags``: as normalize_flags returns them; ``work``: as
    workload() returns it; ``roofline_result``: roofline() or None."""
    return {
        "schema": SCHEMA,
        "model": model,
        "image_digest": image_digest or "",
        "flags": flags,
        "workload": work,
        "concurrency": [level["concurrency"] for level in levels],
        "runs": max([level["runs"] for level in levels] or [0]),
        "levels": [rounded_level(level) for level in levels],
        "roofline": roofline_result,
        "measured_at": measured_at,
    }


def check_document(doc, name="baseline"):
    """None when ``doc`` can be compared (a result_document, possibly read back from a file), else a
    message naming the first bad field."""
    if not isinstance(doc, dict):
        return "%s must be a benchmark result (a dict), got %s" % (name, type(doc).__name__)
    for field in ("model", "image_digest"):
        value = doc.get(field)
        if value is not None and (not isinstance(value, str) or len(value) > MAX_TEXT):
            return "%s.%s must be a string (at most %d characters)" % (name, field, MAX_TEXT)
    if doc.get("flags") is not None:
        _flags, error = normalize_flags(doc["flags"])
        if error:
            return "%s.%s" % (name, error)
    if doc.get("workload") is not None and not isinstance(doc["workload"], dict):
        return "%s.workload must be a dict" % name
    levels = doc.get("levels")
    if not isinstance(levels, list) or not levels or len(levels) > MAX_LEVELS:
        return ("%s.levels must be a list of 1 to %d concurrency levels (a saved vllm_benchmark result's "
                "benchmark); got %s" % (name, MAX_LEVELS, type(levels).__name__ if not isinstance(levels, list)
                                        else "%d entries" % len(levels)))
    seen = set()
    for index, level in enumerate(levels):
        where = "%s.levels[%d]" % (name, index)
        if not isinstance(level, dict):
            return "%s must be a dict" % where
        concurrency = level.get("concurrency")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or \
                not 1 <= concurrency <= MAX_CONCURRENCY:
            return "%s.concurrency must be an integer from 1 to %d" % (where, MAX_CONCURRENCY)
        if concurrency in seen:
            return "%s.concurrency %d appears twice" % (where, concurrency)
        seen.add(concurrency)
        for metric, _better in METRICS:
            stats = level.get(metric)
            if stats is None:
                continue
            if not isinstance(stats, dict):
                return "%s.%s must be a dict of statistics (p50, p90, ...)" % (where, metric)
            for stat in COMPARED_STATS + ("level",):
                value = stats.get(stat)
                if value is not None and (not _finite(value) or value < 0 or value > 1e12):
                    return "%s.%s.%s must be a finite number from 0 to 1e12 or null, got %s" % (
                        where, metric, stat, _show(value))
    return None


def _show(value):
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ------------------------------------------------------------------ A/B


def _describe_flags(old, new):
    old = old or {}
    new = new or {}

    def show(name, value):
        flag = ("--" + name) if name else "(arguments)"
        return flag if value is True else "%s %s" % (flag, value)

    parts = []
    for name in sorted(set(old) | set(new)):
        if name not in new:
            parts.append("removed %s" % show(name, old[name]))
        elif name not in old:
            parts.append("added %s" % show(name, new[name]))
        elif old[name] != new[name]:
            before = "on" if old[name] is True else old[name]
            after = "on" if new[name] is True else new[name]
            parts.append("--%s %s -> %s" % (name, before, after))
    return "; ".join(parts)


def _describe(field, old, new):
    if field == "flags":
        return _describe_flags(old, new)
    if field == "workload":
        old, new = old or {}, new or {}
        parts = ["%s %s -> %s" % (k, _show(old.get(k)), _show(new.get(k)))
                 for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
        return "; ".join(parts)
    return "%s -> %s" % (_show(old), _show(new))


def identity_differences(baseline, current):
    """``[{field, baseline, now, detail}]`` for each of IDENTITY_FIELDS that differs."""
    found = []
    for field in IDENTITY_FIELDS:
        old, new = baseline.get(field), current.get(field)
        if field == "flags":
            old = normalize_flags(old)[0]
        if field in ("model", "image_digest"):
            old, new = old or "", new or ""
        if old != new:
            found.append({"field": field, "baseline": old, "now": new, "detail": _describe(field, old, new)})
    return found


def change_pct(old, new):
    """(new - old) / old in percent; None when either is missing or old is 0."""
    if not _finite(old) or not _finite(new) or old == 0:
        return None
    return (new - old) / old * 100.0


def verdict(better, change, noise_pct):
    """One of better, worse, unchanged (within +-noise_pct) or unknown (no change figure)."""
    if change is None:
        return "unknown"
    if abs(change) <= noise_pct:
        return "unchanged"
    improved = change < 0 if better == LOWER else change > 0
    return "better" if improved else "worse"


def compare(baseline, current, allow=(), noise_pct=5.0):
    """Compare a result document with a saved one (check_document must have passed on it).

    Identity fields (model, flags, image digest, workload) that differ and are not in ``allow``
    refuse the comparison. Returns ``{compared, differences, refused_by, message, rows,
    only_in_baseline, only_now, counts}``; a row is ``{concurrency, metric, stat, baseline, now,
    change_pct, better, verdict}`` with ``better`` "lower" or "higher".
    """
    differences = identity_differences(baseline, current)
    refused = [d["field"] for d in differences if d["field"] not in allow]
    counts = {"better": 0, "worse": 0, "unchanged": 0, "unknown": 0}
    result = {"compared": False, "differences": differences, "refused_by": refused, "rows": [],
              "only_in_baseline": [], "only_now": [], "counts": counts}
    if refused:
        details = " | ".join("%s: %s" % (d["field"], d["detail"]) for d in differences if d["field"] in refused)
        result["message"] = ("not compared: the baseline differs in %s (%s); benchmark against a baseline of the "
                             "same deployment, or set allow_differences to %s to compare anyway"
                             % (", ".join(refused), details, json.dumps(sorted(set(refused) | set(allow)))))
        return result
    old_levels = dict((lv["concurrency"], lv) for lv in baseline["levels"])
    new_levels = dict((lv["concurrency"], lv) for lv in current["levels"])
    result["only_in_baseline"] = sorted(set(old_levels) - set(new_levels))
    result["only_now"] = sorted(set(new_levels) - set(old_levels))
    for concurrency in sorted(set(old_levels) & set(new_levels)):
        for metric, better in METRICS:
            stats = COMPARED_STATS + (("level",) if metric == "aggregate_tok_s" else ())
            for stat in stats:
                old = (old_levels[concurrency].get(metric) or {}).get(stat)
                new = (new_levels[concurrency].get(metric) or {}).get(stat)
                change = change_pct(old, new)
                row = {"concurrency": concurrency, "metric": metric, "stat": stat, "baseline": old, "now": new,
                       "change_pct": None if change is None else round(change, 1), "better": better,
                       "verdict": verdict(better, change, noise_pct)}
                result["counts"][row["verdict"]] += 1
                result["rows"].append(row)
    result["compared"] = bool(result["rows"])
    allowed = [d for d in differences if d["field"] in allow]
    note = "; with %s" % " | ".join("%s: %s" % (d["field"], d["detail"]) for d in allowed) if allowed else ""
    if result["compared"]:
        result["message"] = "compared %d figures: %d better, %d worse, %d unchanged (within %g %%)%s" % (
            len(result["rows"]), result["counts"]["better"], result["counts"]["worse"],
            result["counts"]["unchanged"], noise_pct, note)
    else:
        result["message"] = ("not compared: no concurrency level in common (baseline %s, now %s); run the levels "
                             "of the baseline" % (sorted(old_levels), sorted(new_levels)))
    return result


# ------------------------------------------------------------------ roofline


def weight_bytes_per_gpu(weight_bytes, tensor_parallel_size=1):
    """The weight bytes one GPU reads per generated token: its tensor-parallel share. (With
    pipeline parallelism the stages work one after another for one request: do not divide by the
    pipeline size.)"""
    return weight_bytes / tensor_parallel_size


def roofline(bandwidth_gb_s, weight_bytes_gpu, measured_tok_s=None):
    """The batch-1 decode bound and the measured share of it.

    Returns ``{memory_bandwidth_gb_s, weight_bytes_per_gpu, bound_tok_s, measured_tok_s,
    share_pct}``; ``share_pct`` is None without a measured speed."""
    bound = bandwidth_gb_s * _GB / weight_bytes_gpu
    share = measured_tok_s / bound * 100.0 if _finite(measured_tok_s) else None
    return {"memory_bandwidth_gb_s": bandwidth_gb_s, "weight_bytes_per_gpu": weight_bytes_gpu,
            "bound_tok_s": round(bound, 3), "measured_tok_s": None if share is None else round(measured_tok_s, 3),
            "share_pct": None if share is None else round(share, 1)}


# ------------------------------------------------------------------ words


def _ms(seconds):
    return "-" if seconds is None else "%.1f ms" % (seconds * 1000.0)


def _rate(value):
    return "-" if value is None else "%.1f tok/s" % value


def summary_lines(doc, comparison=None):
    """Lines for a person: one per level, the roofline, the A/B verdict and its largest changes."""
    lines = []
    for level in doc["levels"]:
        lines.append("concurrency %d (%d run(s), %d request(s)%s): TTFT p50 %s p90 %s; ITL p50 %s p90 %s; "
                     "per request p50 %s; aggregate %s" % (
                         level["concurrency"], level["runs"], level["requests"],
                         ", %d failed" % level["failed"] if level.get("failed") else "",
                         _ms(level["ttft_s"]["p50"]), _ms(level["ttft_s"]["p90"]), _ms(level["itl_s"]["p50"]),
                         _ms(level["itl_s"]["p90"]), _rate(level["request_tok_s"]["p50"]),
                         _rate(level["aggregate_tok_s"]["level"])))
        if level.get("burst_requests"):
            lines.append("  %d of %d request(s) at concurrency %d got their tokens in bursts (median gap under %g ms): "
                         "their ITL and tokens/s show buffering on the way, not decoding; the aggregate still holds"
                         % (level["burst_requests"], level["requests"], level["concurrency"], BURST_GAP_S * 1000))
    roof = doc.get("roofline")
    if roof:
        share = ("measured %s = %s %% of it" % (_rate(roof["measured_tok_s"]), roof["share_pct"])
                 if roof.get("share_pct") is not None else "no single-request figure (add concurrency 1)")
        lines.append("roofline: %s / %.2f GB per GPU -> at most %s at batch 1; %s" % (
            "%g GB/s" % roof["memory_bandwidth_gb_s"], roof["weight_bytes_per_gpu"] / float(_GB),
            _rate(roof["bound_tok_s"]), share))
    if comparison is not None:
        lines.append("A/B: %s" % comparison["message"])
        moved = [r for r in comparison["rows"] if r["verdict"] in ("better", "worse")]
        moved.sort(key=lambda r: -abs(r["change_pct"]))
        for row in moved[:6]:
            lines.append("  concurrency %d %s %s: %s -> %s (%+.1f %%, %s)" % (
                row["concurrency"], row["metric"], row["stat"], _show(row["baseline"]), _show(row["now"]),
                row["change_pct"], row["verdict"]))
    return lines
