# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Hostile input for the doctor (issue 24): journal lines whose numbers do not parse, and a stopped
container whose vLLM arguments vLLM itself would refuse (a tensor-parallel size that is no number,
zero or absurd; memory flags likewise). These are the hosts a doctor is for: diagnose() answers
with its five findings, the broken argument named as a problem with what to set, in bounded time;
never a traceback, never a memory error, never a healthy verdict on arguments vLLM refuses."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import sys
import time

from hypothesis import HealthCheck, example, given, settings, strategies as st

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._vllm_startup import expand_human_int
from ansible_collections.labfleet.vllm.plugins.module_utils.reporting import _doctor as D

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_doctor as TD  # noqa: E402  (the reference host, its plan and its journal)

HYPOTHESIS = dict(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
PLAN = TD.verdict(TD.LLAMA_8B, TD.REFERENCE_ARGS)
ARGV = list(PLAN["instances"][0]["argv"])
# Journal lines with a number the doctor reads, the number replaced by {}.
NUMBER_LINES = [
    TD.BUSY.replace("212.4", "{}"),
    TD.BUSY.replace("35.2", "{}"),
    TD.STALLED.replace("Running: 8", "Running: {}"),
    TD.TORCH_OOM.replace("1.96", "{}"),
    TD.TORCH_OOM.replace("1.12", "{}"),
    "ERROR ValueError: Free memory on device cuda:0 ({}/31.74 GiB) on startup is less than desired GPU memory "
    "utilization (0.92, 29.20 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
    "ERROR ValueError: The model's max seq len ({}) is larger than the maximum number of tokens that can be stored "
    "in KV cache (1024). Try increasing `gpu_memory_utilization` or decreasing `max_model_len`",
]
NUMBERS = st.text(alphabet="0123456789.", min_size=1, max_size=400)
# Values vLLM's argument parser refuses, or that no host has, for an integer flag.
NOT_A_COUNT = st.one_of(
    st.text(max_size=30).filter(lambda t: not t.strip().isdigit()),
    st.integers(max_value=0).map(str),
    st.integers(min_value=4097, max_value=10 ** 40).map(str),
    st.sampled_from(["1e3", "2.0", "inf", "nan", "10**12", "0x2", "", "-", "two"]),
)


# diagnose()'s verdict when none is given (None is a verdict of its own: a host without a plan).
_THE_PLAN = "the plan"


def diagnose(argv=None, journal=None, verdict=_THE_PLAN, gate_inputs=True):
    if verdict is _THE_PLAN:
        verdict = PLAN
    raw = TD.healthy_raw(PLAN)
    if argv is not None:
        raw["deployed_argv"] = argv
    if journal is not None:
        raw["journal"] = journal
    started = time.monotonic()
    result = D.diagnose(TD.NVIDIA, TD.HOST, TD.IMAGE_085, verdict, raw,
                        gate_inputs=TD.gate_inputs(TD.LLAMA_8B) if gate_inputs else None)
    assert time.monotonic() - started < 10
    assert [f["check"] for f in result["findings"]] == list(D.CHECKS)
    assert all(f["status"] in D.STATUSES for f in result["findings"])
    assert result["status"] in D.STATUSES
    assert all(isinstance(line, str) for line in D.summary_lines(result))
    return result


def with_flag(flag, value, argv=None):
    argv = list(ARGV if argv is None else argv)
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    return argv


@settings(**HYPOTHESIS)
@given(line=st.sampled_from(NUMBER_LINES), number=NUMBERS, before=st.sampled_from([[], [TD.SERVING]]))
@example(line=NUMBER_LINES[0], number="1.2.3", before=[TD.SERVING])
@example(line=NUMBER_LINES[1], number=".", before=[TD.SERVING])
@example(line=NUMBER_LINES[3], number="9" * 400, before=[TD.SERVING])
@example(line=NUMBER_LINES[5], number="1..2", before=[])
def test_a_journal_number_that_does_not_parse_is_not_read(line, number, before):
    result = diagnose(journal=before + [line.format(number)])
    journal = D.classify_journal(before + [line.format(number)])
    if journal["last_metrics"]:
        assert all(isinstance(journal["last_metrics"][k], (int, float)) for k in ("prompt_tps", "generation_tps"))
    assert result["findings"][3]["status"] in ("problem", "healthy")


@settings(**HYPOTHESIS)
@given(lines=st.lists(st.text(max_size=200), max_size=20), line=st.sampled_from(NUMBER_LINES), number=NUMBERS)
def test_any_journal_text_gives_five_findings(lines, line, number):
    diagnose(journal=lines + [line.format(number)])


@settings(**HYPOTHESIS)
@given(value=NOT_A_COUNT, verdict=st.sampled_from([PLAN, None]), spelling=st.sampled_from(["separate", "equals"]))
@example(value=str(10 ** 12), verdict=None, spelling="separate")
@example(value="abc", verdict=PLAN, spelling="separate")
@example(value="0", verdict=PLAN, spelling="equals")
@example(value="1e3", verdict=None, spelling="equals")
def test_a_tensor_parallel_size_vllm_refuses_is_a_problem_that_says_what_to_set(value, verdict, spelling):
    argv = [a for a in ARGV if a != "--tensor-parallel-size" and a != "2"]
    argv += ["--tensor-parallel-size=%s" % value] if spelling == "equals" else ["--tensor-parallel-size", value]
    if value.startswith("--"):
        return  # another flag, not a value: vLLM reads --tensor-parallel-size without one
    result = diagnose(argv=argv, verdict=verdict)
    tp = result["findings"][4]
    assert tp["status"] == "problem", tp
    assert "--tensor-parallel-size" in tp["cause"] and "tensor_parallel_size" in tp["fix"]
    assert "from 1 to 4096" in tp["cause"]
    if verdict is not None:
        assert result["findings"][3]["status"] == "problem"


@settings(**HYPOTHESIS)
@given(flag=st.sampled_from(["--max-num-seqs", "--max-model-len", "--gpu-memory-utilization"]),
       value=st.one_of(NOT_A_COUNT, st.sampled_from(["1e300", "1.5", "-0.5", str(2 ** 64), "9" * 400])),
       journal=st.sampled_from([[TD.SERVING, TD.BUSY, TD.TORCH_OOM],
                                ["INFO x", "ERROR ValueError: No available memory for the cache blocks. Try "
                                 "increasing `gpu_memory_utilization` when initializing the engine."],
                                TD.HEALTHY_JOURNAL]))
@example(flag="--max-num-seqs", value="abc", journal=[TD.SERVING, TD.BUSY, TD.TORCH_OOM])
@example(flag="--gpu-memory-utilization", value="1e300",
         journal=["ERROR ValueError: No available memory for the cache blocks. Try increasing."])
def test_a_memory_flag_vllm_refuses_is_a_problem_of_the_memory_check(flag, value, journal):
    if value.startswith("--"):
        return
    result = diagnose(argv=with_flag(flag, value), journal=journal)
    oom = result["findings"][3]
    if accepted(flag, value):
        assert flag not in oom["cause"], oom
    else:
        assert oom["status"] == "problem" and flag in oom["cause"], oom
        assert flag.lstrip("-").replace("-", "_") in oom["fix"]


def accepted(flag, value):
    """Whether vLLM (and the gate's bounds) take ``value`` for ``flag``."""
    if flag == "--gpu-memory-utilization":
        return bool(re.match(r"^[0-9]*\.?[0-9]+\Z", value)) and 0 < float(value) <= 1
    if flag == "--max-model-len":
        value = str(expand_human_int(value))
    limit = 2 ** 31 if flag == "--max-num-seqs" else 2 ** 40
    return bool(re.match(r"^[0-9]+\Z", value)) and 1 <= int(value) <= limit


def test_the_flags_vllm_takes_are_read_as_numbers():
    args = D.parse_vllm_argv(with_flag("--tensor-parallel-size", "4096", with_flag("--max-model-len", "32k")))
    assert args["tensor_parallel_size"] == 4096 and args["max_model_len"] == 32000
    result = diagnose(argv=with_flag("--max-model-len", "32K"))
    assert result["findings"][3]["status"] != "problem" or "--max-model-len" not in result["findings"][3]["cause"]
