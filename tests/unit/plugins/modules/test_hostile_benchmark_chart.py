# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Hostile input for benchmark_chart (issue 24): figures that overflow once converted (seconds to
milliseconds) or scaled for the axis, text that matplotlib would read as TeX mathtext ('$'), and
more concurrency levels, instances or larger concurrencies than a vllm_benchmark result has. The
module ends with a PNG or a fail_json naming the field and what it expects; never a traceback,
never minutes of drawing."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import os
import sys
import time
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from ansible_collections.labfleet.vllm.plugins.module_utils.reporting._bench import MAX_CONCURRENCY, MAX_LEVELS

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_benchmark_chart as TB  # noqa: E402  (the documents and the module runner)

pytest.importorskip("matplotlib.pyplot")

# Each drawing takes about half a second: few examples for the properties that draw.
DRAWS = dict(max_examples=12, deadline=None, database=None,
             suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
REFUSALS = dict(max_examples=20, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
# Where a figure sits in a level (metric, statistic), the roofline's bound aside.
FIGURES = [("ttft_s", "p50"), ("ttft_s", "p90"), ("request_tok_s", "p50"), ("aggregate_tok_s", "level")]
# The most instances one chart draws (a host's GPUs, one instance each at most).
MAX_INSTANCES = 16
# The characters mathtext treats specially, and some text around them.
TEX = "$\\{}^_%&#~ ab1"


def chart(tmp_path, instances, title="gpu01"):
    started = time.monotonic()
    result = TB.run_module({"dest": str(tmp_path / "chart.png"), "title": title, "instances": instances})
    assert time.monotonic() - started < 20, "the chart took %.0f s" % (time.monotonic() - started)
    return result


@settings(**REFUSALS)
@given(value=st.floats(min_value=1e12, max_value=sys.float_info.max, exclude_min=True), where=st.sampled_from(FIGURES + ["roofline"]),
       sign=st.sampled_from([1, -1]))
@example(value=sys.float_info.max, where=("ttft_s", "p50"), sign=1)
@example(value=sys.float_info.max / 1.1, where="roofline", sign=1)
def test_a_figure_too_large_to_draw_fails_naming_it(tmp_path, value, where, sign):
    doc = TB.document()
    if where == "roofline":
        doc["roofline"]["bound_tok_s"] = value * sign
        field = "instances[0].benchmark.roofline.bound_tok_s"
    else:
        doc["levels"][1][where[0]][where[1]] = value * sign
        field = "instances[0].benchmark.levels[1].%s.%s" % where
    result = chart(tmp_path, [{"name": "vllm", "benchmark": doc}])
    assert result["failed"] is True, result
    assert field in result["msg"] and "at most" in result["msg"]
    assert not (tmp_path / "chart.png").exists()


@settings(**DRAWS)
@given(value=st.floats(min_value=0.0, max_value=1e9, allow_nan=False))
@example(value=1e9)
def test_a_large_but_plausible_figure_is_drawn(tmp_path, value):
    doc = TB.document()
    doc["levels"][2]["aggregate_tok_s"]["level"] = value
    doc["levels"][0]["ttft_s"]["p90"] = value
    result = chart(tmp_path, [{"name": "vllm", "benchmark": doc}])
    assert result["failed"] is False and result["width"] == 1500, result


@settings(**DRAWS)
@given(title=st.text(alphabet=st.sampled_from(TEX) | st.characters(), max_size=60),
       name=st.text(alphabet=st.sampled_from(TEX), max_size=30))
@example(title="$x^$", name="$\\frac{$")
@example(title="a $\\frac{ b$", name="_$^$")
@example(title="\\$x^\\$ \\", name="$$")
def test_tex_special_characters_in_the_title_and_names_are_drawn_as_text(tmp_path, title, name):
    result = chart(tmp_path, [{"name": name, "benchmark": TB.document(), "baseline": TB.document(0.9)}], title)
    assert result["failed"] is False, result


@settings(**REFUSALS)
@given(count=st.integers(min_value=MAX_LEVELS + 1, max_value=5000))
@example(count=3000)
def test_more_levels_than_a_benchmark_has_fail_at_once(tmp_path, count):
    doc = TB.document()
    level = doc["levels"][0]
    doc["levels"] = [dict(copy.deepcopy(level), concurrency=(i % 256) + 1) for i in range(count)]
    # Refused before anything is drawn (not timed: a clock bound flakes on a loaded machine).
    with mock.patch.object(TB.benchmark_chart, "render", side_effect=AssertionError("drew a refused input")) as drawn:
        result = chart(tmp_path, [{"name": "vllm", "benchmark": TB.document(), "baseline": doc}])
    assert not drawn.called
    assert result["failed"] is True
    assert "instances[0].baseline.levels" in result["msg"] and "at most %d" % MAX_LEVELS in result["msg"]


@settings(**REFUSALS)
@given(concurrency=st.one_of(st.integers(min_value=MAX_CONCURRENCY + 1), st.integers(max_value=-1 - 2 ** 64),
                             st.integers(min_value=2 ** 64)))
@example(concurrency=10 ** 400)
def test_a_concurrency_beyond_what_a_benchmark_runs_fails_naming_it(tmp_path, concurrency):
    doc = TB.document()
    doc["levels"][2]["concurrency"] = concurrency
    result = chart(tmp_path, [{"name": "vllm", "benchmark": doc}])
    if concurrency < 0:
        assert result["failed"] is False  # not a level: left out, as concurrency 0 or true is
    else:
        assert result["failed"] is True and "instances[0].benchmark.levels[2].concurrency" in result["msg"]
        assert "from 1 to %d" % MAX_CONCURRENCY in result["msg"]


@settings(**REFUSALS)
@given(count=st.integers(min_value=MAX_INSTANCES + 1, max_value=3000))
def test_more_instances_than_a_host_runs_fail_at_once(tmp_path, count):
    with mock.patch.object(TB.benchmark_chart, "render", side_effect=AssertionError("drew a refused input")) as drawn:
        result = chart(tmp_path, [{"name": "i%d" % i, "benchmark": TB.document()} for i in range(count)])
    assert not drawn.called
    assert result["failed"] is True and "at most %d" % MAX_INSTANCES in result["msg"]


def test_the_most_levels_and_instances_are_drawn_in_bounded_time(tmp_path):
    docs = []
    for index in range(MAX_INSTANCES):
        doc = TB.document()
        level = doc["levels"][0]
        doc["levels"] = [dict(copy.deepcopy(level), concurrency=1 + (index * MAX_LEVELS + i) % MAX_CONCURRENCY)
                         for i in range(MAX_LEVELS)]
        docs.append({"name": "n%d $" % index + "x" * 300, "benchmark": doc, "baseline": doc})
    result = chart(tmp_path, docs, title="$" * 1000)
    assert result["failed"] is False, result
