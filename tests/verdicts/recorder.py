# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""pytest plugin: record every verdict the unit suite asks of the decision entry points (test-only).

Off unless asked: load it with ``-p tests.verdicts.recorder`` and name the output with
``--verdict-record=PATH`` (``scripts/verdict_snapshot.py record`` does both, with CI=1 so that the
property tests run their fixed, derandomized examples). Without ``--verdict-record`` it does nothing.

While the suite runs, each callable of entry_points.ENTRY_POINTS is replaced (in its own module and
in every collection module that imported it by name) by a wrapper that records the call: its inputs
as bound keyword arguments, encoded (codec.py) at call time, before the code can change them, and
its outcome (the encoded return value, or the exception's class name and message). Only outermost
calls are recorded: the evaluate() calls that plan() makes are part of plan()'s verdict, so a
refactor that changes how plan() uses evaluate() does not change the snapshot's set of calls.
Calls with the same inputs are recorded once (with a count); two different outcomes for the same
inputs are reported as conflicts.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import functools
import inspect
import os
import sys
import threading

from tests.verdicts import codec
from tests.verdicts.entry_points import ENTRY_POINTS, PINNERS

_TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_COLLECTION_PREFIX = "ansible_collections.labfleet.vllm."


class Recorder:
    """The calls recorded so far, and the wrappers installed to record them."""

    def __init__(self, path):
        """Record into ``path`` (written when the session ends)."""
        self.path = path
        self.records = {}
        self.conflicts = {}
        self.calls = 0
        self.test = "<collection>"
        self.installed = []
        self._local = threading.local()

    # -- wrapping -------------------------------------------------------------------------------

    def install(self):
        """Wrap every recorded entry point where it is defined and wherever it was imported by name."""
        collections = os.path.join(_TOP, "collections")
        if collections not in sys.path:
            sys.path.insert(0, collections)
        for name, entry in sorted(ENTRY_POINTS.items()):
            if not entry.record:
                continue
            module, func = entry.resolve()
            wrapper = self.wrap(name, entry, func)
            for loaded in list(sys.modules.values()):
                if loaded is None or not getattr(loaded, "__name__", "").startswith(_COLLECTION_PREFIX):
                    continue
                for attr, value in list(vars(loaded).items()):
                    if value is func:
                        self.installed.append((loaded, attr, func))
                        setattr(loaded, attr, wrapper)
            if getattr(module, entry.target.split(":")[1]) is not wrapper:
                raise RuntimeError("verdict recorder: could not wrap %s" % entry.target)

    def uninstall(self):
        """Put the original callables back."""
        for module, attr, func in reversed(self.installed):
            setattr(module, attr, func)
        self.installed = []

    def wrap(self, name, entry, func):
        """The recording wrapper of one entry point's callable."""
        signature = inspect.signature(func)

        @functools.wraps(func)
        def recording(*args, **kwargs):
            if getattr(self._local, "depth", 0):
                return func(*args, **kwargs)
            call = self.inputs(entry, signature, args, kwargs)
            self._local.depth = 1
            try:
                result = func(*args, **kwargs)
            except Exception as exc:
                self.add(name, call, codec.encode_outcome(raised=exc))
                raise
            finally:
                self._local.depth = 0
            self.add(name, call, codec.encode_outcome(returned=result))
            return result

        return recording

    @staticmethod
    def inputs(entry, signature, args, kwargs):
        """(encoded inputs, encoded pinned values, lossy names, opaque names) of one call."""
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            raw = {"args": list(args), "kwargs": dict(kwargs)}
            named = dict(kwargs)
        else:
            raw = {"kwargs": dict(bound.arguments)}
            named = raw["kwargs"]
        pinned = {}
        for param in entry.pin:
            if named.get(param) is None:
                pinned[param] = PINNERS[param]()
        inputs, lossy, opaque = codec.encode(raw)
        encoded_pins = codec.encode(pinned)[0]
        return inputs, encoded_pins, lossy, opaque

    # -- collecting -----------------------------------------------------------------------------

    def add(self, name, call, outcome):
        """Add one call (inputs from inputs(), outcome from codec.encode_outcome) to the records."""
        inputs, pinned, lossy, opaque = call
        encoded, out_lossy, out_opaque = outcome
        self.calls += 1
        key = codec.input_key(name, inputs)
        record = {"entry": name, "key": key, "inputs": inputs, "outcome": encoded, "tests": [self.test], "calls": 1}
        if pinned:
            record["pinned"] = pinned
        if lossy or out_lossy:
            record["lossy"] = sorted(set(lossy) | set(out_lossy))
        if opaque:
            record["unreplayable"] = "opaque inputs: %s" % ", ".join(opaque)
        if out_opaque:
            record["opaque_outcome"] = sorted(out_opaque)
        have = self.records.get((name, key))
        if have is None:
            self.records[(name, key)] = record
            return
        have["calls"] += 1
        if self.test not in have["tests"] and len(have["tests"]) < 3:
            have["tests"].append(self.test)
        if codec.canonical(have["outcome"]) != codec.canonical(encoded):
            self.conflicts.setdefault((name, key), []).append({"test": self.test, "outcome": encoded})

    def write(self):
        """Write the snapshot file; returns {entry: count}."""
        records = list(self.records.values())
        for ident, others in self.conflicts.items():
            self.records[ident]["conflicts"] = others[:3]
        codec.write_snapshot(self.path, records)
        counts = {}
        for rec in records:
            counts[rec["entry"]] = counts.get(rec["entry"], 0) + 1
        return counts


_RECORDER = []


def pytest_addoption(parser):
    """--verdict-record=PATH: where the snapshot goes (.jsonl, or .jsonl.gz compressed)."""
    parser.addoption("--verdict-record", default=None, metavar="PATH",
                     help="record every verdict of the decision entry points (tests/verdicts) into PATH")


def pytest_configure(config):
    """Install the wrappers when --verdict-record is given."""
    path = config.getoption("--verdict-record")
    if not path:
        return
    recorder = Recorder(os.path.abspath(path))
    recorder.install()
    _RECORDER.append(recorder)


def pytest_runtest_setup(item):
    """Name the test that the next calls belong to."""
    if _RECORDER:
        _RECORDER[0].test = item.nodeid


def pytest_sessionfinish(session, exitstatus):  # pylint: disable=unused-argument
    """Write the snapshot and take the wrappers out."""
    if not _RECORDER:
        return
    recorder = _RECORDER[0]
    recorder.uninstall()
    recorder.counts = recorder.write()


def pytest_terminal_summary(terminalreporter):
    """One line per entry point: the distinct calls recorded; and the conflicts, if any."""
    if not _RECORDER:
        return
    recorder = _RECORDER[0]
    counts = getattr(recorder, "counts", {})
    terminalreporter.write_sep("-", "verdict snapshot: %s" % recorder.path)
    for name in sorted(counts):
        terminalreporter.write_line("%-28s %6d distinct calls" % (name, counts[name]))
    terminalreporter.write_line("%-28s %6d distinct calls (%d calls in all)" % ("total", sum(counts.values()), recorder.calls))
    if recorder.conflicts:
        terminalreporter.write_line("CONFLICTS (same inputs, different outcomes): %d" % len(recorder.conflicts))
        for name, key in sorted(recorder.conflicts)[:10]:
            terminalreporter.write_line("  %s %s" % (name, key))
