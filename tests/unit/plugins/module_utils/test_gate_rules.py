# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gate as rules (docs/design.md, "The gate as rules").

_gate_rules.RULES is THE table of the gate's rules: each row a pure function over one frozen
GateFacts, the codes it may emit, the facts it decides and its source. Adding a rule is one
function, one row and one test; what every row gets checked for free is here:

- its codes are the gate's (REASON_CODES / WARNING_CODES) and documented (docs/deploy_gate.md and
  the deploy_gate module's RETURN docs), and every code of the gate belongs to a row;
- over every gate input the verdict snapshot recorded (tests/verdicts/baseline-unit.jsonl.gz,
  2,310 calls of evaluate() and plan()) and the cases below, a rule emits only its row's codes and
  decides only its row's facts, and each row's code is emitted by it at least once (the startup
  row's own codes are tested in test_vllm_startup.py);
- the facts are frozen.

The example of docs/design.md is test_rule_parallel_alone: one rule tested on its own.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import datetime
import importlib.util
import os
import sys

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _gate as G
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _gate_facts as GF
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _gate_rules as GR
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate_inputs import validate_inputs
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate_rules_gpu import rule_parallel
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._plan import plan
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge import _policy as P

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_gate_vllm_refusals as R  # noqa: E402  (its GPUs, image and Llama-3.1-8B facts)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
TODAY = datetime.date(2026, 9, 1)
V100, IMAGE_0_8_5 = R.V100, R.IMAGE_0_8_5
P100 = dict(V100, name="Tesla P100-PCIE-16GB", compute_capability="6.0", memory_total_mib=16384)
# Llama-3.1-8B with what the reserve model needs (intermediate and vocabulary size).
LLAMA_8B = dict(R.LLAMA_3_1_8B, intermediate_size=14336, vocab_size=128256)
# Cases the recorded corpus lacks (a compute capability the policy maps to no architecture; a
# release without a row of its own in the policy's release-behaviour table).
EXTRA_CASES = [
    dict(gpus=[dict(V100, compute_capability="4.0", name="GPU of an unknown architecture")], image=IMAGE_0_8_5),
    dict(gpus=[V100], image=dict(IMAGE_0_8_5, vllm_version="0.8.4")),
    # model_facts failed on the directory (not in the recorded baseline: the code is newer).
    dict(gpus=[V100], image=IMAGE_0_8_5, model={"unreadable": "/m/model.safetensors.index.json: names shard x"}),
]


def facts_for(**inputs):
    """The GateFacts evaluate() makes for these inputs (before any rule ran)."""
    return GF.gate_facts(validate_inputs(**inputs), TODAY)


def _codec():
    """tests/verdicts/codec.py (the verdict snapshot's file format), loaded from its path."""
    spec = importlib.util.spec_from_file_location("verdict_codec", os.path.join(REPO, "tests", "verdicts", "codec.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _recorded_calls():
    """(function, kwargs) of every evaluate() and plan() call in the unit suite's verdict snapshot."""
    path = os.path.join(REPO, "tests", "verdicts", "baseline-unit.jsonl.gz")
    if not os.path.exists(path):
        return []
    codec = _codec()
    calls = []
    for record in codec.read_snapshot(path):
        func = {"gate.evaluate": G.evaluate, "plan.plan": plan}.get(record["entry"])
        if func is None:
            continue
        kwargs = codec.decode(record["inputs"])["kwargs"]
        pinned = codec.decode(record.get("pinned") or {})
        if kwargs.get("today") is None and pinned.get("today") is not None:
            kwargs["today"] = pinned["today"]
        calls.append((func, kwargs))
    return calls


# --- the table --------------------------------------------------------------------------------


def test_every_row_is_a_named_documented_pure_rule():
    names = [rule.name for rule in GR.RULES]
    assert len(names) == len(set(names)), names
    decidable = set(name for name, _default in GF.DECIDED_DEFAULTS)
    for rule in GR.RULES:
        assert callable(rule.check) and rule.check.__doc__, rule.name
        assert rule.source.strip(), rule.name
        assert set(rule.decides) <= decidable, rule.name
        assert not set(rule.reasons) & set(rule.warnings), rule.name


def test_every_row_s_codes_are_the_gate_s_and_documented():
    with open(os.path.join(REPO, "docs", "deploy_gate.md")) as handle:
        md = handle.read()
    with open(os.path.join(REPO, "plugins", "modules", "deploy_gate.py")) as handle:
        module_doc = handle.read()
    for rule in GR.RULES:
        assert set(rule.reasons) <= set(G.REASON_CODES), rule.name
        assert set(rule.warnings) <= set(G.WARNING_CODES), rule.name
        for code in rule.reasons + rule.warnings:
            assert "`%s`" % code in md, (rule.name, code)
            assert "V(%s)" % code in module_doc, (rule.name, code)


def test_every_code_of_the_gate_belongs_to_a_row():
    reasons = set(code for rule in GR.RULES for code in rule.reasons)
    warnings = set(code for rule in GR.RULES for code in rule.warnings)
    assert reasons == set(G.REASON_CODES)
    assert warnings == set(G.WARNING_CODES)


def test_the_table_runs_in_the_order_each_rule_needs():
    """A rule that reads a decided fact runs after the row that decides it (the runner hands each
    rule the facts the rules above it decided)."""
    order = [rule.name for rule in GR.RULES]
    deciders = dict((field, rule.name) for rule in GR.RULES for field in rule.decides)
    needs = {"driver": ["arch_keys"], "image_cuda": ["host_cuda"], "image_arch": ["forward_compat"],
             "quantization_act_dtype": ["effective", "served_dtype"], "startup": ["effective"],
             "memory_plan": ["effective", "served_dtype"]}
    for name, fields in needs.items():
        for field in fields:
            assert order.index(deciders[field]) < order.index(name), (name, field)
    assert order[-1] == "memory_plan"


# --- each rule emits only its own codes ---------------------------------------------------------


def _watching(monkeypatch):
    """Replace _gate.RULES by rules that record (rule, level, code) and the decided fields they emit."""
    seen = collections.defaultdict(set)

    def watch(rule):
        def check(facts):
            found = rule.check(facts)
            seen[rule.name].update(("reason", item["code"]) for item in found.reasons)
            seen[rule.name].update(("warning", item["code"]) for item in found.warnings)
            seen[rule.name].update(("decides", field) for field in found.decided)
            return found
        return rule._replace(check=check)

    monkeypatch.setattr(G, "RULES", tuple(watch(rule) for rule in GR.RULES))
    return seen


def test_each_rule_emits_only_the_codes_and_facts_of_its_row(monkeypatch):
    seen = _watching(monkeypatch)
    calls = _recorded_calls() + [(G.evaluate, dict(case, today=TODAY)) for case in EXTRA_CASES]
    for func, kwargs in calls:
        try:
            func(**kwargs)
        except G.GateInputError:
            pass
    assert len(calls) > len(EXTRA_CASES) or not os.path.exists(os.path.join(REPO, "tests", "verdicts"))
    for rule in GR.RULES:
        declared = set([("reason", c) for c in rule.reasons] + [("warning", c) for c in rule.warnings]
                       + [("decides", f) for f in rule.decides])
        assert seen[rule.name] <= declared, (rule.name, sorted(seen[rule.name] - declared))
        if rule.name != "startup" and calls[len(EXTRA_CASES):]:
            assert declared <= seen[rule.name], (rule.name, "never emitted", sorted(declared - seen[rule.name]))


# --- the facts are frozen -------------------------------------------------------------------------


def test_the_facts_are_frozen_and_a_rule_s_decision_makes_new_facts():
    facts = facts_for(gpus=[V100, V100], image=IMAGE_0_8_5, vllm={"dtype": "bfloat16"})
    with pytest.raises(AttributeError):
        facts.effective = {}
    with pytest.raises(TypeError):
        facts.effective["dtype"] = "float16"
    found = GR.RULES[[r.name for r in GR.RULES].index("dtype")].check(facts)
    assert found.decided["effective"]["dtype"] == "float16"
    after = facts.replace(**found.decided)
    assert facts.effective["dtype"] == "bfloat16" and after.effective["dtype"] == "float16"


# --- the example of docs/design.md: one rule on its own -----------------------------------------


def test_rule_parallel_alone():
    facts = facts_for(gpus=[V100, V100], nvlink=False, vllm={"tensor_parallel_size": 4})
    found = rule_parallel(facts)
    assert [r["code"] for r in found.reasons] == ["TENSOR_PARALLEL_EXCEEDS_GPUS"]
    assert [w["code"] for w in found.warnings] == ["PCIE_WITHOUT_P2P"]
    assert found.decided == {}
    assert rule_parallel(facts_for(gpus=[V100, V100], nvlink=True, vllm={"tensor_parallel_size": 2})) == GF.findings()


SHARD_MISSING = ("/srv/models/m/model.safetensors.index.json: names shard model-00002-of-00002.safetensors, "
                 "which is missing from /srv/models/m")


def test_rule_model_files_alone():
    """model.unreadable (model_facts' message) is refused as MODEL_INCOMPLETE, the message quoted."""
    found = GR.rule_model_files(facts_for(gpus=[V100], model=dict(LLAMA_8B, unreadable=SHARD_MISSING)))
    assert [r["code"] for r in found.reasons] == ["MODEL_INCOMPLETE"]
    assert SHARD_MISSING in found.reasons[0]["message"]
    assert (found.warnings, found.decided) == ((), {})
    assert GR.rule_model_files(facts_for(gpus=[V100], model=LLAMA_8B)) == GF.findings()
    assert GR.rule_model_files(facts_for(gpus=[V100], model=dict(LLAMA_8B, unreadable="  "))) == GF.findings()


def test_an_incomplete_model_refuses_the_host_at_the_model_step():
    verdict = G.evaluate(gpus=[V100, V100], image=IMAGE_0_8_5, model={"unreadable": SHARD_MISSING},
                         vllm={"tensor_parallel_size": 2, "dtype": "float16", "max_model_len": 8192}, today=TODAY)
    assert verdict["allowed"] is False
    assert "MODEL_INCOMPLETE" in [r["code"] for r in verdict["reasons"]]
    with pytest.raises(G.GateInputError, match="model.unreadable"):
        G.evaluate(gpus=[V100], image=IMAGE_0_8_5, model={"unreadable": 3}, today=TODAY)


# --- one enforce_eager rule for the gate and the plan ---------------------------------------------


@pytest.mark.parametrize("setting,gpus,expected", [
    (None, [(7, 0)], True),                      # Volta: architectures.volta.enforce_eager
    (None, [(8, 0)], False),
    (None, [(6, 0), (7, 0)], True),              # any GPU of the instance that needs it, not only the lowest
    (None, [(7, 0), (8, 0)], True),
    (None, [None, (8, 0)], False),               # an unknown compute capability counts for nothing
    (True, [(8, 0)], True),                      # the request stands
    (False, [(7, 0)], False),
])
def test_resolve_enforce_eager(setting, gpus, expected):
    on, why = GF.resolve_enforce_eager(setting, P.merge_policy(None), gpus)
    assert on is expected
    assert why == "set by the request" if setting is not None else why.startswith("auto: ")


def test_the_gate_and_the_plan_decide_enforce_eager_alike_on_a_mixed_host():
    """P100 + V100 (refused, but planned): the plan's argv runs eager because the V100 needs it,
    and the gate's memory plan counts no CUDA graphs for the same reason."""
    kwargs = dict(gpus=[dict(P100, index=0), dict(V100, index=1)], driver_version="580.95.05", image=IMAGE_0_8_5,
                  model=LLAMA_8B, vllm={"dtype": "float16", "max_model_len": 4096}, today=TODAY)
    instance = plan(**kwargs)["instances"][0]
    verdict = G.evaluate(**kwargs)
    assert instance["enforce_eager"] is True and "--enforce-eager" in instance["argv"]
    reserve = verdict["plan"]["reserve_model"]
    assert "cuda_graphs" not in reserve["parts"] and "cuda_graphs" not in (reserve["outside_budget"] or {})
