# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The verdict snapshot's value encoding, hashing and file format (test-only; see README.md here).

A recorded call's inputs must come back as the same Python values when it is replayed, so values
are encoded as JSON with tags for what JSON cannot say (a tag is a one-key object whose key starts
with ``$``):

==========================  =====================================================
Python value                encoded as
==========================  =====================================================
None, bool, str, int        itself (ints of any size: Python's json reads them back)
finite float                itself (json writes ``repr(float)``, which reads back exactly)
NaN, +inf, -inf             ``{"$float": "nan" | "inf" | "-inf"}``
tuple                       ``{"$tuple": [...]}``
set / frozenset             ``{"$set": [...]}`` / ``{"$frozenset": [...]}`` (sorted by each member's
                            canonical JSON)
dict with str keys          itself, in its own key order; keys starting with ``$`` are escaped by
                            the ``$dict`` form below
any other dict              ``{"$dict": [[key, value], ...]}``
datetime.date / .datetime   ``{"$date": "2026-11-30"}`` / ``{"$datetime": "<isoformat>"}``
bytes, bytearray            ``{"$bytes": "<base64>"}`` / ``{"$bytearray": "<base64>"}``
anything else               ``{"$opaque": "<type name>", "repr": "<repr, clipped>"}``
==========================  =====================================================

A subclass of a plain type (a str subclass, an OrderedDict) is encoded as its base type and named
in the encoder's ``lossy`` list; an ``$opaque`` value (or a reference cycle) makes the call
unreplayable, and the replay reports it as skipped instead of calling the code with something else.

Inputs are keyed and stored in their own key order (the code iterates over the dicts it is given).
Outcomes are compared in canonical form: the encoded value dumped with sorted keys, so two results
that differ only in the order of a dict's keys are the same verdict, while lists keep their order.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import datetime
import gzip
import hashlib
import io
import json
import math
import os

SNAPSHOT_FORMAT = 1
_REPR_LIMIT = 200
_MAX_DEPTH = 200


class Encoder:
    """Encodes one value tree; ``lossy`` and ``opaque`` collect the type names it could not keep."""

    def __init__(self):
        """Start with nothing lost."""
        self.lossy = set()
        self.opaque = set()
        self._active = set()

    def encode(self, value, depth=0):
        """The JSON-able tagged form of ``value`` (see the module docstring)."""
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, str):
            return self._kept(value, str)
        if isinstance(value, int):
            return self._kept(value, int)
        if isinstance(value, float):
            value = self._kept(value, float)
            if math.isnan(value):
                return {"$float": "nan"}
            if math.isinf(value):
                return {"$float": "inf" if value > 0 else "-inf"}
            return value
        if isinstance(value, datetime.datetime):
            return {"$datetime": value.isoformat()}
        if isinstance(value, datetime.date):
            return {"$date": value.isoformat()}
        if isinstance(value, (bytes, bytearray)):
            tag = "$bytearray" if isinstance(value, bytearray) else "$bytes"
            return {tag: base64.b64encode(bytes(value)).decode("ascii")}
        if depth > _MAX_DEPTH or id(value) in self._active:
            return self._opaque(value, "a reference cycle or nesting deeper than %d" % _MAX_DEPTH)
        if isinstance(value, (dict, list, tuple, set, frozenset)):
            self._active.add(id(value))
            try:
                return self._container(value, depth)
            finally:
                self._active.discard(id(value))
        return self._opaque(value, None)

    def _kept(self, value, base):
        """``value`` as its plain ``base`` type; a subclass is converted and its name noted as lossy."""
        if value.__class__ is base:
            return value
        self.lossy.add(value.__class__.__name__)
        return base(value)

    def _opaque(self, value, why):
        name = type(value).__name__
        self.opaque.add(name)
        try:
            text = repr(value)
        except Exception as exc:  # pylint: disable=broad-except
            text = "<repr raised %s>" % type(exc).__name__
        out = {"$opaque": name, "repr": text[:_REPR_LIMIT]}
        if why:
            out["why"] = why
        return out

    def _container(self, value, depth):
        for base in (dict, list, tuple, set, frozenset):
            if isinstance(value, base) and value.__class__ is not base:
                self.lossy.add(value.__class__.__name__)
        if isinstance(value, dict):
            items = list(value.items())
            if all(isinstance(k, str) and k.__class__ is str and not k.startswith("$") for k, _v in items):
                return dict((k, self.encode(v, depth + 1)) for k, v in items)
            return {"$dict": [[self.encode(k, depth + 1), self.encode(v, depth + 1)] for k, v in items]}
        if isinstance(value, list):
            return [self.encode(v, depth + 1) for v in value]
        if isinstance(value, tuple):
            return {"$tuple": [self.encode(v, depth + 1) for v in value]}
        members = [self.encode(v, depth + 1) for v in value]
        return {"$frozenset" if isinstance(value, frozenset) else "$set": sorted(members, key=canonical)}


def encode(value):
    """(encoded value, sorted lossy type names, sorted opaque type names)."""
    enc = Encoder()
    out = enc.encode(value)
    return out, sorted(enc.lossy), sorted(enc.opaque)


def decode(value):
    """The Python value of an encoded one; raises ValueError on ``$opaque`` (not replayable)."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) >= 1:
        tag = next(iter(value)) if len(value) == 1 else None
        if "$opaque" in value:
            raise ValueError("an opaque %s cannot be replayed" % value["$opaque"])
        if tag == "$float":
            return float(value[tag])
        if tag == "$tuple":
            return tuple(decode(v) for v in value[tag])
        if tag == "$set":
            return set(decode(v) for v in value[tag])
        if tag == "$frozenset":
            return frozenset(decode(v) for v in value[tag])
        if tag == "$dict":
            return dict((decode(k), decode(v)) for k, v in value[tag])
        if tag == "$date":
            return datetime.date.fromisoformat(value[tag])
        if tag == "$datetime":
            return datetime.datetime.fromisoformat(value[tag])
        if tag == "$bytes":
            return base64.b64decode(value[tag])
        if tag == "$bytearray":
            return bytearray(base64.b64decode(value[tag]))
    return dict((k, decode(v)) for k, v in value.items())


def canonical(encoded):
    """The canonical JSON text of an encoded value: sorted keys, no spaces, ASCII (\\u escapes)."""
    return json.dumps(encoded, sort_keys=True, separators=(",", ":"), allow_nan=False)


def ordered(encoded):
    """The ASCII JSON text of an encoded value in its own key order (how inputs are keyed and stored).

    Inputs keep their dicts' key order: the code iterates over them, and which of two malformed keys
    it names first is part of its verdict.
    """
    return json.dumps(encoded, separators=(",", ":"), allow_nan=False)


def input_key(entry, inputs):
    """The stable key of one call: the first 20 hex digits of sha256(entry name + ordered inputs)."""
    text = entry + "\n" + ordered(inputs)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:20]


def encode_outcome(returned=None, raised=None):
    """The recorded outcome of a call: {"return": encoded} or {"raise": {"type", "message"}}.

    Only the exception's class name is kept (not its module), so that an exception class that moves
    to another module is still the same outcome.
    """
    if raised is not None:
        try:
            message = str(raised)
        except Exception as exc:  # pylint: disable=broad-except
            message = "<str raised %s>" % type(exc).__name__
        return {"raise": {"type": type(raised).__name__, "message": message}}, [], []
    encoded, lossy, opaque = encode(returned)
    return {"return": encoded}, lossy, opaque


def pretty(encoded):
    """An encoded value as indented, key-sorted JSON lines (for diffs)."""
    return json.dumps(encoded, sort_keys=True, indent=1).splitlines()


# ---------------------------------------------------------------------------------------------
# Snapshot files: JSON lines, optionally gzip-compressed (by the name's ".gz")
# ---------------------------------------------------------------------------------------------


def read_snapshot(path):
    """The records of a snapshot file (.jsonl or .jsonl.gz), in file order."""
    opener = gzip.open if path.endswith(".gz") else io.open
    records = []
    with opener(path, "rt", encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            line = line.strip()
            if not line:
                continue
            try:
                records.append(json.loads(line))
            except ValueError as exc:
                raise ValueError("%s:%d: not a JSON line (%s)" % (path, number, exc))
    return records


def write_snapshot(path, records):
    """Write records sorted by (entry, key), one JSON line each (dicts in their own key order).

    A ``.gz`` name is written with gzip's timestamp and file name left out, so that recording the
    same verdicts twice gives the same bytes (and git sees no change).
    """
    records = sorted(records, key=lambda r: (r["entry"], r["key"]))
    data = "".join(ordered(r) + "\n" for r in records).encode("ascii")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        os.makedirs(directory)
    with open(path, "wb") as raw:
        if path.endswith(".gz"):
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as handle:
                handle.write(data)
        else:
            raw.write(data)


def merge_records(records):
    """Dedupe records by (entry, key): (merged list, conflicts).

    Records of the same call are merged (``calls`` added up, ``tests`` united, at most 3 kept).
    ``conflicts`` lists (entry, key) whose records disagree on the outcome: the same inputs gave two
    verdicts, which a deterministic gate never does.
    """
    merged, conflicts = {}, []
    for rec in records:
        ident = (rec["entry"], rec["key"])
        have = merged.get(ident)
        if have is None:
            merged[ident] = dict(rec, tests=list(rec.get("tests") or [])[:3])
            continue
        if canonical(have["outcome"]) != canonical(rec["outcome"]):
            conflicts.append(ident)
        have["calls"] = have.get("calls", 1) + rec.get("calls", 1)
        for test in rec.get("tests") or []:
            if test not in have["tests"] and len(have["tests"]) < 3:
                have["tests"].append(test)
    return list(merged.values()), sorted(set(conflicts))
