# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Tests of the verdict snapshot tooling itself (not part of the unit suite it records).

Run with ``.venv/bin/python -m pytest tests/verdicts`` (``make verdict-snapshot`` does, before it
replays the baselines).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest

from tests.verdicts import codec
from tests.verdicts.entry_points import ENTRY_POINTS
from tests.verdicts.module_harness import module_view

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _script():
    spec = importlib.util.spec_from_file_location("verdict_snapshot", os.path.join(TOP, "scripts", "verdict_snapshot.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCRIPT = _script()

# deploy_gate's reference case (tests/unit/plugins/modules/test_deploy_gate.py): 2x V100, vLLM 0.8.5.
V100 = {"name": "Tesla V100-PCIE-32GB", "compute_capability": "7.0", "memory_total_mib": 32768}
MODULE_ARGS = {
    "gpus": [V100, V100], "driver_version": "550.54.14", "nvlink": False,
    "image": {"cuda_version": "12.4.1", "arch_list": "7.0 7.5 8.0 8.6 8.9 9.0+PTX", "vllm_version": "0.8.5"},
    "model": {"weight_bytes": 16060522496, "num_hidden_layers": 32, "num_key_value_heads": 8, "head_dim": 128},
    "vllm": {"tensor_parallel_size": 2, "dtype": "bfloat16", "max_model_len": 8192},
}


def _same(a, b):
    """Equality that holds NaN equal to NaN and tells tuples from lists and sets from frozensets."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("value", [
    None, True, 0, -1, 10 ** 400, 0.1, -0.0, float("nan"), float("inf"), float("-inf"), "", u"\uff15\uff15\uff10",
    u"\x00\u2028", (1, (2, "3")), [], [(7, 0)], {"b": 1, "a": 2}, {1: "x", None: "y", (1, 2): "z"},
    {"$tuple": [1]}, {"$float": "nan"}, set(["b", "a"]), frozenset([1, 2]), datetime.date(2026, 11, 30),
    datetime.datetime(2026, 11, 30, 12, 0), b"\x00\xff", bytearray(b"ab"),
], ids=repr)
def test_values_come_back_as_they_were(value):
    encoded, lossy, opaque = codec.encode({"x": value})
    assert (lossy, opaque) == ([], [])
    back = codec.decode(json.loads(codec.ordered(encoded)))
    assert _same(back, {"x": value})


def test_what_cannot_be_replayed_is_named():
    loop = []
    loop.append(loop)
    encoded, _lossy, opaque = codec.encode({"a": object(), "b": loop})
    assert opaque == ["list", "object"]
    with pytest.raises(ValueError):
        codec.decode(encoded)


def test_subclasses_are_kept_as_their_base_type_and_named():
    class Text(str):
        pass

    encoded, lossy, opaque = codec.encode({"k": Text("v")})
    assert (encoded, lossy, opaque) == ({"k": "v"}, ["Text"], [])


def test_inputs_are_keyed_in_their_order_and_outcomes_compared_without_it():
    one, two = codec.encode({"a": 1, "b": 2})[0], codec.encode({"b": 2, "a": 1})[0]
    assert codec.input_key("e", one) != codec.input_key("e", two)
    assert codec.input_key("e", one) == codec.input_key("e", codec.encode({"a": 1, "b": 2})[0])
    assert codec.input_key("e", one) != codec.input_key("f", one)
    assert codec.canonical(one) == codec.canonical(two)


def test_exceptions_are_kept_by_class_name_and_message():
    outcome = codec.encode_outcome(raised=ValueError("gpus: expected a list"))[0]
    assert outcome == {"raise": {"type": "ValueError", "message": "gpus: expected a list"}}


def test_a_compressed_snapshot_has_the_same_bytes_each_time(tmp_path):
    records = [{"entry": "b", "key": "2", "outcome": {}}, {"entry": "a", "key": "9", "outcome": {"return": 1}}]
    first, second = tmp_path / "one.jsonl.gz", tmp_path / "two.jsonl.gz"
    codec.write_snapshot(str(first), records)
    codec.write_snapshot(str(second), list(reversed(records)))
    assert first.read_bytes() == second.read_bytes()
    assert [r["entry"] for r in codec.read_snapshot(str(first))] == ["a", "b"]


def test_merging_counts_calls_and_finds_conflicts():
    rec = {"entry": "e", "key": "k", "outcome": {"return": 1}, "tests": ["t1"], "calls": 1}
    merged, conflicts = codec.merge_records([rec, dict(rec, tests=["t2"]), dict(rec, outcome={"return": 2})])
    assert conflicts == [("e", "k")]
    assert merged[0]["calls"] == 3 and merged[0]["tests"] == ["t1", "t2"]


def _record(entry, kwargs, pinned=None):
    func = ENTRY_POINTS[entry].resolve()[1]
    inputs = codec.encode({"kwargs": kwargs})[0]
    call_kwargs = dict(kwargs, **(pinned or {}))
    rec = {"entry": entry, "key": codec.input_key(entry, inputs), "inputs": inputs,
           "outcome": codec.encode_outcome(returned=func(**call_kwargs))[0]}
    if pinned:
        rec["pinned"] = codec.encode(pinned)[0]
    return rec


def test_replay_tells_identical_from_changed_outcomes():
    rec = _record("gate.evaluate", {"gpus": [V100], "driver_version": "550.54.14"},
                  pinned={"today": datetime.date(2026, 11, 30)})
    assert SCRIPT.replay_record(rec, {})[0] == "identical"
    changed = json.loads(json.dumps(rec))
    changed["outcome"]["return"]["warnings"][0]["message"] += "!"
    assert SCRIPT.replay_record(changed, {})[0] == "differ"
    assert SCRIPT.replay_record(dict(rec, entry="gone"), {})[0] == "skipped"


def test_the_date_a_recording_used_is_the_date_replayed():
    # R580's end of life (2028-08 in _policy.py) is still ahead at the first date and past at the second.
    rec = _record("gate.evaluate", {"gpus": [V100], "driver_version": "580.95.05"},
                  pinned={"today": datetime.date(2026, 11, 30)})
    later = dict(rec, pinned=codec.encode({"today": datetime.date(2030, 1, 1)})[0])
    assert SCRIPT.replay_record(rec, {})[0] == "identical"
    assert SCRIPT.replay_record(later, {})[0] == "differ"


def _callback_file(directory, lines):
    os.makedirs(directory)
    with open(os.path.join(directory, "scenario-1.jsonl"), "w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(json.dumps(line) + "\n")


def test_a_molecule_recording_replays_through_the_module(tmp_path):
    entry = ENTRY_POINTS["deploy_gate"]
    module, main = entry.resolve()
    from tests.verdicts.module_harness import run_module  # pylint: disable=import-outside-toplevel
    ok = run_module(module, main, MODULE_ARGS, {"measure_fp16_copy": lambda r: None,
                                                "measure_gptq_copy": lambda r: None})
    assert ok["allowed"] is True
    # As the callback sees them: Ansible's keys beside the module's, the invocation's module_args.
    seen = dict(ok, invocation={"module_args": MODULE_ARGS}, _ansible_no_log=False)
    refused_args = {"gpus": "nope"}
    refused = {"changed": False, "msg": "Elements value for option 'gpus' is of type str and we were unable to convert "
                                        "to dict: dictionary requested, could not parse JSON or key=value",
               "invocation": {"module_args": {"gpus": []}}, "exception": "(traceback)"}
    base = {"scenario": "s", "host": "h", "task": "t", "date": datetime.date.today().isoformat(),
            "args_from": "invocation"}
    _callback_file(str(tmp_path / "rec"), [
        dict(base, failed=False, args=MODULE_ARGS, task_args=MODULE_ARGS, result=seen),
        dict(base, failed=True, args={"gpus": []}, task_args=refused_args, result=refused),
        dict(base, failed=True, args_from="task", args={}, task_args={}, result={"msg": "MODULE FAILURE"}),
    ])
    records, not_run = SCRIPT.molecule_records(str(tmp_path / "rec"))
    assert not_run == ["molecule:s:h:t"]
    assert [SCRIPT.replay_record(r, {})[0] for r in records] == ["identical", "identical"]
    assert module_view(refused, True) == {"failed": True, "msg": refused["msg"]}


def test_the_recorder_records_a_test_file_and_its_replay_is_identical(tmp_path):
    out = str(tmp_path / "unit.jsonl")
    status = SCRIPT.main(["record", "-o", out, "--", "tests/unit/plugins/modules/test_deploy_gate.py", "-k",
                          "reference_deployment"])
    assert status == 0
    records = codec.read_snapshot(out)
    assert [r["entry"] for r in records] == ["plan.plan"]
    assert SCRIPT.main(["replay", out]) == 0


def test_the_recorder_is_off_unless_asked():
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.verdicts.recorder", "-q", "-p", "no:cacheprovider",
                           "tests/unit/plugins/modules/test_deploy_gate.py", "-k", "reference_deployment"],
                          cwd=TOP, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verdict snapshot" not in proc.stdout
