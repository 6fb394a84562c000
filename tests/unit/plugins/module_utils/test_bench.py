# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pure benchmark logic (plugins/module_utils/reporting/_bench.py): percentiles against hand-computed
values, per-request figures from event times, levels, the result document, A/B, the roofline and
the memory bandwidth table."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import os

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.reporting import _bench as B
from ansible_collections.labfleet.vllm.plugins.module_utils.clients._openai import iter_sse_data
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge import _gpu_models as GM
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._gpu_models import PCI_DEVICES

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        "fixtures", "vllm-http")


# ------------------------------------------------------------------ percentiles


@pytest.mark.parametrize("values, q, expected", [
    # rank h = (n - 1) q / 100 from 0; value = x[floor h] + (h - floor h) (x[floor h + 1] - x[floor h])
    ([1, 2, 3, 4], 50, 2.5),            # h = 1.5: 2 + 0.5 x 1
    ([1, 2, 3, 4], 90, 3.7),            # h = 2.7: 3 + 0.7 x 1
    ([15, 20, 35, 40, 50], 50, 35),     # h = 2: exactly the middle value
    ([15, 20, 35, 40, 50], 90, 46),     # h = 3.6: 40 + 0.6 x 10
    ([15, 20, 35, 40, 50], 25, 20),     # h = 1
    ([50, 15, 40, 20, 35], 90, 46),     # order does not matter
    ([0.8, 1.2], 90, 1.16),             # h = 0.9: 0.8 + 0.9 x 0.4
    ([7], 90, 7),
    ([1, 2, 3, 4], 0, 1),
    ([1, 2, 3, 4], 100, 4),
])
def test_percentile_by_linear_interpolation(values, q, expected):
    assert B.percentile(values, q) == pytest.approx(expected, abs=1e-12)


def test_percentile_of_nothing_and_bad_q():
    assert B.percentile([], 50) is None
    with pytest.raises(ValueError):
        B.percentile([1, 2], 101)


def test_percentile_matches_numpy_default_when_numpy_is_there():
    numpy = pytest.importorskip("numpy")
    values = [0.91, 1.07, 0.88, 1.3, 0.95, 1.01, 2.4, 0.99, 1.12]
    for q in (50, 90, 10, 99):
        assert B.percentile(values, q) == pytest.approx(float(numpy.percentile(values, q)), abs=1e-12)


def test_summarize_skips_non_numbers():
    stats = B.summarize([4, None, 1, float("nan"), 3, 2, True])
    assert stats == {"p50": 2.5, "p90": pytest.approx(3.7), "mean": 2.5, "min": 1, "max": 4, "count": 4}
    assert B.summarize([]) == {"p50": None, "p90": None, "mean": None, "min": None, "max": None, "count": 0}


# ------------------------------------------------------------------ one request


def chat(text, finish=None):
    return json.dumps({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]})


ROLE = json.dumps({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
USAGE = json.dumps({"choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": 4, "total_tokens": 12}})


def test_request_figures_skip_the_role_chunk_and_count_held_back_tokens():
    # Sent at 100.0; role chunk 100.05; tokens at 100.20, .25, .30 (text held back), .35.
    timed = [(100.05, ROLE), (100.20, chat("Hello")), (100.25, chat(" wor")), (100.30, chat("")),
             (100.35, chat("ld\u00e9", "length")), (100.36, USAGE), (100.36, "[DONE]")]
    stream = B.stream_events(iter(timed))
    assert stream["done"] is True and stream["usage_tokens"] == 4 and stream["finish_reason"] == "length"
    assert stream["chunks"] == 6
    figures = B.request_figures(100.0, 100.40, stream["events"], stream["usage_tokens"])
    assert figures["ttft_s"] == pytest.approx(0.20)
    assert figures["itl_s"] == pytest.approx([0.05, 0.05, 0.05])
    assert figures["token_events"] == 4 and figures["tokens"] == 4
    assert figures["decode_s"] == pytest.approx(0.15)
    assert figures["itl_mean_s"] == pytest.approx(0.05)
    assert figures["request_tok_s"] == pytest.approx(20.0)       # (4 - 1) / 0.15
    assert figures["latency_s"] == pytest.approx(0.40)


def test_request_figures_use_the_usage_count_when_chunks_bundle_tokens():
    events = [(1.0, "a"), (1.5, "bcd"), (2.0, "ef")]
    with_usage = B.request_figures(0.0, 2.0, events, usage_tokens=11)
    assert with_usage["tokens"] == 11 and with_usage["request_tok_s"] == pytest.approx(10.0)  # 10 / 1.0
    without = B.request_figures(0.0, 2.0, events)
    assert without["tokens"] == 3 and without["request_tok_s"] == pytest.approx(2.0)          # 2 / 1.0


def test_tokens_that_arrive_in_a_burst_are_flagged_and_counted_per_level():
    """A real vLLM stream seen by make check-real-vllm on a loaded machine: 960 tokens, every chunk
    within a millisecond after a one-second wait. The figures stay (they are what arrived), the
    request is flagged and the level's summary says what its ITL and tokens/s mean."""
    burst = [(1.0 + i * 0.000001, "t") for i in range(960)]
    figures = B.request_figures(0.0, 1.001, burst, usage_tokens=960)
    assert figures["burst"] is True and figures["request_tok_s"] > 100000
    steady = B.request_figures(0.0, 1.0, [(0.1 + i * 0.02, "t") for i in range(10)], usage_tokens=10)
    assert steady["burst"] is False
    # A median needs two gaps at least: three tokens at once are a burst, two are too few to say.
    assert B.request_figures(0.0, 1.0, [(0.5, "a"), (0.5, "b"), (0.5, "c")])["burst"] is True
    assert B.request_figures(0.0, 1.0, [(0.5, "a"), (0.5, "b")])["burst"] is False
    run = {"started": 0.0, "ended": 1.001, "requests": [figures, steady]}
    level = B.level_figures(2, [run])
    assert level["burst_requests"] == 1
    doc = {"levels": [level]}
    lines = B.summary_lines(doc)
    assert lines[1] == ("  1 of 2 request(s) at concurrency 2 got their tokens in bursts (median gap under 0.1 ms): "
                        "their ITL and tokens/s show buffering on the way, not decoding; the aggregate still holds")
    assert len(B.summary_lines({"levels": [B.level_figures(1, [dict(run, requests=[steady])])]})) == 1


def test_request_without_text_or_with_one_token_has_no_rate():
    nothing = B.request_figures(0.0, 1.0, [(0.1, ""), (0.2, "")], usage_tokens=0)
    assert nothing["ttft_s"] is None and nothing["request_tok_s"] is None and nothing["tokens"] == 0
    one = B.request_figures(0.0, 1.0, [(0.5, "x")], usage_tokens=1)
    assert one["ttft_s"] == 0.5 and one["request_tok_s"] is None and one["itl_s"] == []


def test_closing_chunks_without_text_are_no_token_events():
    closing = json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    stream = B.stream_events(iter([(1.0, chat("a")), (2.0, closing), (2.0, USAGE), (2.0, "[DONE]")]))
    assert [text for _t, text in stream["events"]] == ["a"] and stream["finish_reason"] == "stop"


def test_completions_chunks_count_too():
    stream = B.stream_events(iter([(1.0, json.dumps({"choices": [{"text": "Once"}]})),
                                   (1.1, json.dumps({"choices": [{"text": " upon"}]}))]))
    assert stream["events"] == [(1.0, "Once"), (1.1, " upon")] and stream["done"] is False


def test_stream_errors():
    error = json.dumps({"error": {"message": "engine died", "type": "InternalServerError", "code": 500}})
    stream = B.stream_events(iter([(1.0, chat("a")), (1.1, error), (1.2, chat("b"))]))
    assert stream["error"].startswith("server error in stream: engine died")
    assert len(stream["events"]) == 1
    bad = B.stream_events(iter([(1.0, "{not json")]))
    assert bad["error"].startswith("stream chunk not JSON")

    def too_long():
        yield 1.0, chat("a")
        raise ValueError("a line of the stream is longer than 1048576 bytes")

    cut = B.stream_events(too_long())
    assert cut["error"] == "stream: a line of the stream is longer than 1048576 bytes" and len(cut["events"]) == 1


def recorded_events(name):
    with open(os.path.join(FIXTURES, name), "rb") as handle:
        raw = handle.read()
    body = raw[raw.index(b"HTTP/1.1"):].partition(b"\r\n\r\n")[2]
    return B.stream_events((float(i), data) for i, data in enumerate(iter_sse_data([body])))


def test_token_events_of_real_vllm_streams_are_one_per_token():
    """Recorded from vLLM: the events from the first text on are as many as usage.completion_tokens
    (held-back tokens and the last token with finish_reason included)."""
    usage = recorded_events("chat_stream_usage.http")
    figures = B.request_figures(0.0, 20.0, usage["events"], usage["usage_tokens"])
    assert usage["usage_tokens"] == 10 and figures["token_events"] == 10 and usage["finish_reason"] == "stop"
    assert figures["ttft_s"] == 1.0   # event 0 is the role chunk
    nousage = recorded_events("chat_stream_nousage.http")
    figures = B.request_figures(0.0, 20.0, nousage["events"], nousage["usage_tokens"])
    assert nousage["usage_tokens"] is None and nousage["finish_reason"] == "length"
    assert figures["tokens"] == figures["token_events"] == 16
    assert figures["itl_s"] == [1.0] * 15 and figures["request_tok_s"] == 1.0


# ------------------------------------------------------------------ a level


def req(ttft, gaps, tokens=None):
    """Request figures for a request sent at 0 whose tokens came at ttft + gaps."""
    times = [ttft]
    for gap in gaps:
        times.append(times[-1] + gap)
    return B.request_figures(0.0, times[-1], [(t, "x") for t in times], tokens)


def test_level_figures_pool_gaps_and_aggregate_per_run():
    run1 = {"started": 0.0, "ended": 2.0, "requests": [req(0.5, [0.1] * 10), req(0.7, [0.12] * 10)]}
    run2 = {"started": 5.0, "ended": 6.0, "requests": [req(0.4, [0.05] * 10), req(0.6, [0.05] * 10)]}
    level = B.level_figures(2, [run1, run2], failed=0)
    assert (level["concurrency"], level["runs"], level["requests"], level["failed"]) == (2, 2, 4, 0)
    assert level["output_tokens"] == 44 and level["wall_s"] == 3.0
    assert level["ttft_s"]["p50"] == pytest.approx(0.55) and level["ttft_s"]["p90"] == pytest.approx(0.67)
    assert level["itl_s"]["count"] == 40 and level["itl_s"]["p50"] == pytest.approx(0.075)
    assert level["itl_s"]["mean"] == pytest.approx((0.1 + 0.12 + 0.05 + 0.05) / 4)
    # per request: 10 / 1.0, 10 / 1.2, 10 / 0.5, 10 / 0.5
    assert level["request_tok_s"]["p50"] == pytest.approx((10.0 + 20.0) / 2)
    # per run: 22 tokens / 2 s and 22 / 1 s; the level: 44 / 3 s
    assert level["aggregate_tok_s"]["p50"] == pytest.approx(16.5)
    assert level["aggregate_tok_s"]["p90"] == pytest.approx(11 + 0.9 * 11)
    assert level["aggregate_tok_s"]["level"] == pytest.approx(44 / 3.0)


# ------------------------------------------------------------------ flags and the document


def test_flags_from_argv_and_from_vllm_args_agree():
    argv = ["--model", "/model", "--served-model-name", "quasar", "--tensor-parallel-size", "2",
            "--gpu-memory-utilization", "0.92", "--max-model-len", "32768", "--enforce-eager", "--seed=-1"]
    args = {"model": "/model", "served_model_name": "quasar", "tensor_parallel_size": 2,
            "gpu_memory_utilization": 0.92, "max_model_len": 32768, "enforce_eager": True, "seed": -1,
            "quantization": None, "disable_log_stats": False}
    from_argv, error = B.normalize_flags(argv)
    assert error is None
    assert from_argv == {"model": "/model", "served-model-name": "quasar", "tensor-parallel-size": "2",
                         "gpu-memory-utilization": "0.92", "max-model-len": "32768", "enforce-eager": True,
                         "seed": "-1"}
    assert B.normalize_flags(args) == (from_argv, None)
    assert B.normalize_flags(["serve", "/model", "--dtype", "half"])[0] == {"": "serve /model", "dtype": "half"}
    assert B.normalize_flags(None) == ({}, None)
    assert B.normalize_flags("--x 1")[1].startswith("flags must be a list of command-line words or a dict")


def levels_fixture(ttft=1.0, rate=20.0, aggregate=35.0):
    def stats(value):
        return {"p50": value, "p90": value * 1.2, "mean": value, "min": value, "max": value * 1.3, "count": 3}

    level1 = {"concurrency": 1, "runs": 3, "requests": 3, "failed": 0, "output_tokens": 768, "wall_s": 40.0,
              "ttft_s": stats(ttft), "itl_s": stats(1.0 / rate), "request_tok_s": stats(rate),
              "aggregate_tok_s": dict(stats(rate * 0.95), level=rate * 0.95)}
    level8 = {"concurrency": 8, "runs": 3, "requests": 24, "failed": 0, "output_tokens": 6144, "wall_s": 176.0,
              "ttft_s": stats(ttft * 1.5), "itl_s": stats(8.0 / aggregate), "request_tok_s": stats(aggregate / 8),
              "aggregate_tok_s": dict(stats(aggregate), level=aggregate)}
    return [level1, level8]


ARGV = ["--tensor-parallel-size", "2", "--max-num-seqs", "32", "--enforce-eager"]
WORK = B.workload("Write a story.", 256, 0, True)


def doc(**changes):
    values = dict(levels=levels_fixture(), model="quasar", flags=B.normalize_flags(ARGV)[0],
                  image_digest="sha256:aaa", work=WORK)
    values.update(changes)
    return B.result_document(values["levels"], values["model"], values["flags"], values["image_digest"],
                             values["work"], measured_at="2026-03-01T10:00:00Z")


def test_result_document_and_its_check():
    result = doc()
    assert result["schema"] == "labfleet.vllm.benchmark/1" and result["concurrency"] == [1, 8]
    assert result["runs"] == 3 and result["flags"]["max-num-seqs"] == "32"
    assert result["workload"]["max_tokens"] == 256 and len(result["workload"]["prompt_sha256"]) == 64
    assert B.check_document(result) is None
    # What the module returns survives a trip through JSON (it is saved to a file).
    assert B.check_document(json.loads(json.dumps(result))) is None


@pytest.mark.parametrize("mutate, text", [
    (lambda d: d.update(levels=[]), "baseline.levels must be a list of 1 to 16 concurrency levels"),
    (lambda d: d.update(levels="x"), "baseline.levels must be a list"),
    (lambda d: d["levels"][0].update(concurrency=0), "baseline.levels[0].concurrency must be an integer from 1 to 256"),
    (lambda d: d["levels"][1].update(concurrency=1), "baseline.levels[1].concurrency 1 appears twice"),
    (lambda d: d["levels"][0]["ttft_s"].update(p50=float("nan")),
     "baseline.levels[0].ttft_s.p50 must be a finite number from 0 to 1e12 or null, got nan"),
    (lambda d: d["levels"][1]["aggregate_tok_s"].update(level=-3),
     "baseline.levels[1].aggregate_tok_s.level must be a finite number"),
    (lambda d: d["levels"][0].update(itl_s=[1, 2]), "baseline.levels[0].itl_s must be a dict of statistics"),
    (lambda d: d.update(model=5), "baseline.model must be a string"),
    (lambda d: d.update(flags=7), "baseline.flags must be a list of command-line words or a dict"),
])
def test_hostile_baselines_are_refused_with_the_field_named(mutate, text):
    bad = copy.deepcopy(doc())
    mutate(bad)
    assert text in B.check_document(bad)


def test_check_document_refuses_what_is_no_dict():
    assert B.check_document([1], "baseline") == "baseline must be a benchmark result (a dict), got list"


# ------------------------------------------------------------------ A/B


def test_ab_directions_lower_ttft_and_higher_throughput_are_better():
    before = doc()
    after = doc(levels=levels_fixture(ttft=0.8, rate=20.5, aggregate=42.0))
    result = B.compare(before, after, noise_pct=5)
    assert result["compared"] is True and result["differences"] == []
    rows = dict(((r["concurrency"], r["metric"], r["stat"]), r) for r in result["rows"])
    ttft = rows[(1, "ttft_s", "p50")]
    assert (ttft["baseline"], ttft["now"], ttft["change_pct"], ttft["verdict"]) == (1.0, 0.8, -20.0, "better")
    assert rows[(1, "request_tok_s", "p50")]["change_pct"] == 2.5
    assert rows[(1, "request_tok_s", "p50")]["verdict"] == "unchanged"       # within 5 %
    agg = rows[(8, "aggregate_tok_s", "level")]
    assert (agg["change_pct"], agg["better"], agg["verdict"]) == (20.0, "higher", "better")
    itl = rows[(8, "itl_s", "p50")]                                           # 8/35 -> 8/42: faster tokens
    assert itl["better"] == "lower" and itl["verdict"] == "better" and itl["change_pct"] == pytest.approx(-16.7)
    # 2 levels x (3 metrics x 2 stats + aggregate p50, p90, level)
    assert len(result["rows"]) == 18 and sum(result["counts"].values()) == 18
    worse = B.compare(after, before)
    assert dict(((r["concurrency"], r["metric"], r["stat"]), r["verdict"]) for r in worse["rows"])[
        (1, "ttft_s", "p50")] == "worse"
    assert worse["rows"][0]["change_pct"] == 25.0   # 0.8 -> 1.0


def test_ab_refuses_other_flags_digest_or_model_and_names_them():
    before = doc()
    new_flags = B.normalize_flags(["--tensor-parallel-size", "2", "--max-num-seqs", "16", "--max-model-len", "16384"])
    after = doc(flags=new_flags[0], image_digest="sha256:bbb")
    refused = B.compare(before, after)
    assert refused["compared"] is False and refused["rows"] == []
    assert refused["refused_by"] == ["flags", "image_digest"]
    assert "the baseline differs in flags, image_digest" in refused["message"]
    # Sorted by flag name.
    assert ("flags: removed --enforce-eager; added --max-model-len 16384; --max-num-seqs 32 -> 16"
            in refused["message"])
    assert "image_digest: 'sha256:aaa' -> 'sha256:bbb'" in refused["message"]
    assert 'set allow_differences to ["flags", "image_digest"]' in refused["message"]
    allowed = B.compare(before, after, allow=["flags", "image_digest"])
    assert allowed["compared"] is True and allowed["refused_by"] == []
    assert "--max-num-seqs 32 -> 16" in allowed["message"]
    other_model = B.compare(before, doc(model="other"), allow=["flags"])
    assert other_model["refused_by"] == ["model"] and "model: 'quasar' -> 'other'" in other_model["message"]
    other_work = B.compare(before, doc(work=B.workload("Write a story.", 128, 0, True)))
    assert other_work["refused_by"] == ["workload"] and "max_tokens 256 -> 128" in other_work["message"]


def test_ab_flags_given_as_argv_in_a_saved_baseline_compare_with_vllm_args():
    before = doc()
    before["flags"] = ARGV                       # a hand-written baseline with the argv
    now = doc(flags=B.normalize_flags({"tensor_parallel_size": 2, "max_num_seqs": 32, "enforce_eager": True,
                                       "kv_cache_dtype": None})[0])
    assert B.compare(before, now)["compared"] is True


def test_ab_levels_only_on_one_side_and_zero_baselines():
    before = doc()
    now = doc(levels=[dict(levels_fixture()[0], concurrency=4), levels_fixture()[1]])
    result = B.compare(before, now)
    assert result["only_in_baseline"] == [1] and result["only_now"] == [4]
    assert set(r["concurrency"] for r in result["rows"]) == {8}
    none_common = B.compare(before, doc(levels=[dict(levels_fixture()[0], concurrency=2)]))
    assert none_common["compared"] is False and "no concurrency level in common" in none_common["message"]
    assert B.change_pct(0, 5) is None and B.verdict("higher", None, 5) == "unknown"


# ------------------------------------------------------------------ roofline and bandwidth


def test_roofline_of_the_reference_deployment():
    """70B at 4 bits ~ 35 GB on 2 V100 PCIe (TP 2): 17.5 GB per GPU; 900 GB/s / 17.5 GB = 51.43 tok/s;
    the reference measured 16-22 tok/s for one request, 19 tok/s is 36.9 % of the bound."""
    per_gpu = B.weight_bytes_per_gpu(35 * 10 ** 9, tensor_parallel_size=2)
    assert per_gpu == 17.5e9
    bw = GM.memory_bandwidth("Tesla V100-PCIE-32GB")
    result = B.roofline(bw["gb_s"], per_gpu, 19.0)
    assert result == {"memory_bandwidth_gb_s": 900, "weight_bytes_per_gpu": 17.5e9, "bound_tok_s": 51.429,
                      "measured_tok_s": 19.0, "share_pct": 36.9}
    assert B.roofline(900, per_gpu)["share_pct"] is None


def test_roofline_llama_3_1_8b_bf16_on_one_h100_sxm():
    # Llama-3.1-8B: 8,030,261,248 parameters x 2 bytes (bf16) = 16,060,522,496 bytes (model_facts' weight_bytes).
    result = B.roofline(GM.memory_bandwidth("NVIDIA H100 80GB HBM3")["gb_s"], 16060522496, 150.0)
    assert result["bound_tok_s"] == pytest.approx(3350e9 / 16060522496, abs=1e-3)   # 208.586
    assert result["share_pct"] == pytest.approx(71.9)


@pytest.mark.parametrize("name, key, gb_s", [
    ("Tesla V100-PCIE-32GB", "Tesla V100 PCIe 32GB", 900),
    ("Tesla V100-PCIE-16GB", "Tesla V100 PCIe 16GB", 900),
    ("Tesla V100-SXM2-32GB", "Tesla V100 SXM2 32GB", 900),
    ("Tesla V100S-PCIE-32GB", "Tesla V100S PCIe 32GB", 1134),
    ("Tesla P100-PCIE-16GB", "Tesla P100 PCIe 16GB", 732),
    ("Tesla T4", "Tesla T4", 320),
    ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB", 1555),
    ("NVIDIA A100-SXM4-40GB", "A100 SXM4 40GB", 1555),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB", 2039),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB", 1935),
    ("NVIDIA A10", "A10", 600),
    ("NVIDIA A10G", "A10G", 600),
    ("NVIDIA L4", "L4", 300),
    ("NVIDIA L40S", "L40S", 864),
    ("NVIDIA H100 PCIe", "H100 PCIe", 2000),
    ("NVIDIA H100 80GB HBM3", "H100 SXM5 80GB", 3350),
    ("NVIDIA H100 NVL", "H100 NVL (H100L 94GB)", 3900),
    ("NVIDIA H200", "H200 SXM 141GB", 4800),
    ("NVIDIA GeForce RTX 3090", "GeForce RTX 3090", 936),
    ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090", 1008),
    ("tesla v100 pcie 32gb", "Tesla V100 PCIe 32GB", 900),
])
def test_bandwidth_from_nvidia_smi_names(name, key, gb_s):
    found = GM.memory_bandwidth(name)
    assert (found["gpu"], found["gb_s"]) == (key, gb_s)
    assert found["source"].startswith("https://") and found["confidence"] in ("third_party", "inferred")


@pytest.mark.parametrize("name", ["NVIDIA GeForce RTX 4090 Laptop GPU", "NVIDIA GH200 480GB", "Tesla V100-FHHL-16GB",
                                  "NVIDIA H100", "NVIDIA A100-SXM-64GB", "Tesla K80", "", None, "x" * 500])
def test_bandwidth_not_guessed_for_unknown_or_ambiguous_boards(name):
    assert GM.memory_bandwidth(name) is None


def test_bandwidth_keys_are_the_pci_table_names():
    """A GPU found on the PCI bus resolves by its device ID and by the name the PCI table gives it,
    to the same entry; every key that is a PCI table model is spelled as it is there."""
    models = set(entry["model"] for entry in PCI_DEVICES.values())
    resolved = 0
    for device_id, entry in PCI_DEVICES.items():
        if entry["model"] in GM.GPU_MEMORY_BANDWIDTH:
            resolved += 1
            assert GM.bandwidth_key(pci_device_id="0x" + device_id) == entry["model"]
            assert GM.bandwidth_key(name=entry["model"]) == entry["model"], entry["model"]
    assert resolved >= 35
    outside = sorted(k for k in GM.GPU_MEMORY_BANDWIDTH if k not in models)
    assert outside == ["GeForce RTX 3090", "GeForce RTX 3090 Ti", "GeForce RTX 4090"]
    # The device ID wins over a name that says otherwise.
    assert GM.bandwidth_key(name="Tesla T4", pci_device_id="0x1DB610DE") == "Tesla V100 PCIe 32GB"


def test_every_bandwidth_entry_has_a_source_and_a_confidence():
    for key, entry in GM.GPU_MEMORY_BANDWIDTH.items():
        assert 100 <= entry["gb_s"] <= 10000, key
        assert entry["source"].startswith("https://"), key
        assert entry["confidence"] in ("verified", "third_party", "inferred"), key
        if entry["confidence"] == "inferred":
            assert entry.get("note"), key


# ------------------------------------------------------------------ words


def test_summary_lines():
    result = doc()
    result["roofline"] = B.roofline(900, 17.5e9, 19.0)
    comparison = B.compare(result, doc(levels=levels_fixture(ttft=0.8)))
    lines = B.summary_lines(result, comparison)
    assert lines[0] == ("concurrency 1 (3 run(s), 3 request(s)): TTFT p50 1000.0 ms p90 1200.0 ms; ITL p50 50.0 ms "
                        "p90 60.0 ms; per request p50 20.0 tok/s; aggregate 19.0 tok/s")
    assert lines[2] == ("roofline: 900 GB/s / 17.50 GB per GPU -> at most 51.4 tok/s at batch 1; measured 19.0 tok/s "
                        "= 36.9 % of it")
    assert lines[3].startswith("A/B: compared 18 figures: 4 better, 0 worse, 14 unchanged")
    assert lines[4] == "  concurrency 1 ttft_s p50: 1.0 -> 0.8 (-20.0 %, better)"
