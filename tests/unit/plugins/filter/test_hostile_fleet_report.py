# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet report with what it meets in practice and in a damaged file (issue 24): a benchmark
run whose levels lack concurrency 1 has no measured share of the roofline, and both templates
still render it ("not measured"); a damaged report on disk in update mode is replaced by this
run's report, with a warning, instead of crashing the merge or the templates."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import os
import sys
from unittest import mock

from hypothesis import HealthCheck, example, given, settings, strategies as st

from ansible_collections.labfleet.vllm.plugins.filter import fleet_report as F
from ansible_collections.labfleet.vllm.plugins.module_utils.reporting import _bench as B

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_fleet_report as TF  # noqa: E402  (the templates, rendered as Ansible renders them)
import test_fleet_report_sections as TS  # noqa: E402  (records with doctor and benchmark sections)

HYPOTHESIS = dict(max_examples=15, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
TEMPLATES = ("fleet-report.md.j2", "fleet-report.html.j2")
JUNK = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=2),
                 st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


def benchmark_without_concurrency_1(levels):
    """A vllm_benchmark result of the reference document's figures at ``levels`` (no concurrency 1):
    the roofline as vllm_benchmark computes it, with no single-request figure."""
    doc = TS.TB.document(1.1, "2026-12-01T11:00:00Z")
    template = doc["levels"][1]
    doc["levels"] = [dict(copy.deepcopy(template), concurrency=c) for c in sorted(levels)]
    doc["concurrency"] = sorted(levels)
    doc["roofline"] = B.roofline(900, 8030000000, None)
    section = TS.benchmark()
    section["instances"][0]["benchmark"] = doc
    section["instances"][0]["comparison"] = None
    return section


def render_all(doc):
    return dict((name, TF.render(name, doc)) for name in TEMPLATES)


@settings(**HYPOTHESIS)
@given(levels=st.lists(st.integers(min_value=2, max_value=B.MAX_CONCURRENCY), min_size=1, max_size=B.MAX_LEVELS,
                       unique=True))
@example(levels=[8, 32])
def test_a_benchmark_without_concurrency_1_renders_with_the_roofline_not_measured(levels):
    section = benchmark_without_concurrency_1(levels)
    assert section["instances"][0]["benchmark"]["roofline"]["measured_tok_s"] is None
    doc = F.fleet_report(TS.records(gpu01={"benchmark": section}), "preflight")
    pages = render_all(doc)
    for name, text in pages.items():
        assert "cannot beat 112.1 tokens/s" in text, name
        assert "not measured (no concurrency 1 level)" in text, name
        assert "None" not in text, name


def valid_previous():
    rollout = F.fleet_report([dict(r, server={"status": "deployed", "instances": []}) for r in TS.records()], "rollout")
    return F.fleet_report(TS.records(gpu02={"doctor": TS.broken_doctor(), "benchmark": TS.benchmark()}), "preflight",
                          previous=rollout)


PREVIOUS = valid_previous()
# Places in the report on disk that the merge and the templates read, and how far down they go.
PATHS = [(), ("report_format",), ("mode",), ("hosts",), ("hosts", 0), ("hosts", 0, "host"), ("hosts", 0, "outcome"),
         ("hosts", 0, "outcome_detail"), ("hosts", 0, "rollout"), ("hosts", 0, "rollout", "server"),
         ("hosts", 0, "serving"), ("hosts", 0, "failure"), ("hosts", 0, "reasons"), ("hosts", 0, "state"),
         ("summary",), ("summary", "hosts"), ("summary", "by_outcome"), ("summary", "by_state"),
         ("summary", "allowed"), ("scrape_targets",), ("outcomes",),
         ("doctor",), ("doctor", "hosts"), ("doctor", "hosts", 0), ("doctor", "hosts", 0, "host"),
         ("doctor", "hosts", 0, "instances"), ("doctor", "summary"),
         ("benchmark",), ("benchmark", "hosts"), ("benchmark", "hosts", 0), ("benchmark", "hosts", 0, "host"),
         ("benchmark", "hosts", 0, "instances"), ("benchmark", "hosts", 0, "instances", 0)]


def damage(document, path, junk, delete):
    doc = copy.deepcopy(document)
    if not path:
        return junk
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if delete and isinstance(parent, dict):
        parent.pop(path[-1], None)
    else:
        parent[path[-1]] = junk
    return doc


def update(previous):
    """This run's report (gpu01's doctor) merged into ``previous``, and the warnings the filter gave."""
    with mock.patch.object(F, "display", create=True) as display:
        doc = F.fleet_report(TS.records(gpu01={"doctor": TS.healthy_doctor()}), "preflight", previous=previous)
    return doc, [call.args[0] for call in display.warning.call_args_list]


@settings(**HYPOTHESIS)
@given(path=st.sampled_from(PATHS), junk=JUNK, delete=st.booleans(), as_text=st.booleans())
@example(path=("doctor", "hosts", 0, "host"), junk=None, delete=False, as_text=True)
@example(path=("benchmark", "hosts", 0, "instances"), junk=5, delete=False, as_text=True)
@example(path=("doctor", "hosts"), junk=5, delete=False, as_text=False)
@example(path=("hosts", 0, "outcome"), junk=None, delete=True, as_text=True)
def test_a_damaged_report_on_disk_is_replaced_with_a_warning(path, junk, delete, as_text):
    previous = damage(PREVIOUS, path, junk, delete)
    if previous is None and not as_text:
        return  # no report on disk: nothing to update
    doc, warnings = update(json.dumps(previous) if as_text else previous)
    render_all(doc)
    if "previous_report" in doc:
        assert warnings and "replaced" in warnings[0] and doc["mode"] == "preflight"
        assert [h["host"] for h in doc["doctor"]["hosts"]] == ["gpu01"]
    else:
        assert not warnings
        assert doc["summary"] == previous["summary"]


@settings(**HYPOTHESIS)
@given(cut=st.integers(min_value=0, max_value=len(json.dumps(PREVIOUS)) - 1))
@example(cut=1)
def test_a_truncated_report_on_disk_is_replaced_with_a_warning(cut):
    doc, warnings = update(json.dumps(PREVIOUS)[:cut])
    render_all(doc)
    assert "previous_report" in doc and warnings and "replaced" in warnings[0]


def test_an_intact_report_on_disk_is_kept_without_a_warning():
    doc, warnings = update(json.dumps(PREVIOUS))
    assert warnings == [] and "previous_report" not in doc and doc["mode"] == "rollout"
    assert [h["host"] for h in doc["doctor"]["hosts"]] == ["gpu01", "gpu02"]
    render_all(doc)
