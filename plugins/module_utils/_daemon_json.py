# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: no compatibility promise for other users.
"""Merge settings into Docker's daemon.json key by key, keeping every key nobody asked to change.

Pure functions: text in, documents and text out. The module (plugins/modules/docker_daemon_config.py)
does the file handling around them, and the unit tests call them directly.

Rules:
- an empty (or whitespace-only) file is an empty configuration;
- a file that is not JSON, holds duplicate keys, or whose top level is not an object is refused with
  a message naming the file, and nothing is written;
- settings are merged recursively: where both the existing value and the wanted value are objects,
  their keys are merged one by one (so ``runtimes.nvidia`` is added next to ``runtimes.other``);
  any other wanted value (string, number, list, null) replaces the existing one as a whole;
- removals name a key path and, optionally, the value it must have to be removed;
- documents are compared parsed, never byte by byte, so formatting alone is never a change.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json

DEFAULT_INDENT = 4


class DaemonJsonError(Exception):
    """The existing file cannot be used; the message names the file and says what to do."""


def _reject_duplicates(path):
    def hook(pairs):
        result = {}
        for key, value in pairs:
            if key in result:
                raise DaemonJsonError(
                    "%s is not valid for Docker: the key %s appears twice in the same object; "
                    "remove one of them (the file was left untouched)." % (path, json.dumps(key))
                )
            result[key] = value
        return result
    return hook


def parse_daemon_json(text, path="daemon.json"):
    """Return the configuration held by ``text`` as a dict.

    ``text`` may be ``bytes`` or ``str``. Raises DaemonJsonError for anything Docker would refuse
    to start with: bytes that are not UTF-8, invalid JSON, duplicate keys, or a top level that is
    not a JSON object.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DaemonJsonError(
                "%s is not valid JSON: it is not UTF-8 text (%s); fix or remove the file "
                "(it was left untouched)." % (path, exc)
            )
    if text.startswith(u"\ufeff"):
        raise DaemonJsonError(
            "%s is not valid JSON: it starts with a byte order mark, which Docker refuses; save it "
            "as UTF-8 without BOM (the file was left untouched)." % path
        )
    if not text.strip():
        return {}
    try:
        document = json.loads(text, object_pairs_hook=_reject_duplicates(path),
                              parse_constant=_reject_constant)
    except ValueError as exc:
        # json.JSONDecodeError is a ValueError; its message already says "line L column C".
        raise DaemonJsonError(
            "%s is not valid JSON: %s; fix or remove the file (it was left untouched)." % (path, exc)
        )
    if not isinstance(document, dict):
        raise DaemonJsonError(
            "%s must hold a JSON object ({...}) at the top level, found %s; fix or remove the file "
            "(it was left untouched)." % (path, _json_type(document))
        )
    return document


def _reject_constant(name):
    # Python's json reads NaN and Infinity; JSON (and Docker's Go parser) does not.
    raise ValueError("%s is not a JSON value" % name)


def _json_type(value):
    if isinstance(value, list):
        return "an array"
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return "a number"
    return "a string"


def merge_settings(current, settings, _prefix=()):
    """Return ``(merged, changed_paths)`` with ``settings`` merged into a copy of ``current``.

    Objects are merged key by key, recursively; every other value replaces the existing one.
    ``changed_paths`` lists the key paths (tuples) whose value changed, in the order met: the
    deepest existing object's new or changed key (``runtimes.nvidia`` when ``runtimes`` existed,
    ``runtimes`` when it did not).
    ``current`` is not modified.
    """
    merged = copy.deepcopy(current)
    changed = []
    for key, wanted in settings.items():
        path = _prefix + (key,)
        if key in merged and isinstance(merged[key], dict) and isinstance(wanted, dict):
            sub, sub_changed = merge_settings(merged[key], wanted, path)
            merged[key] = sub
            changed.extend(sub_changed)
        elif key not in merged or not _same(merged[key], wanted):
            merged[key] = copy.deepcopy(wanted)
            changed.append(path)
    return merged, changed


def _same(left, right):
    """JSON-level equality: ``true`` is not ``1`` (as it is in Python), ``3`` is ``3.0``."""
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    if isinstance(left, dict) and isinstance(right, dict):
        return set(left) == set(right) and all(_same(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(_same(a, b) for a, b in zip(left, right))
    if isinstance(left, (int, float)) and isinstance(right, (int, float)):
        return left == right
    return type(left) is type(right) and left == right


_ANY = object()


def remove_keys(current, removals):
    """Return ``(result, removed_paths)`` with the given keys removed from a copy of ``current``.

    ``removals`` is a list of dicts ``{"keys": [k1, k2, ...], "value": v}``. A key path that does
    not exist is ignored. When ``value`` is present and not None, the key is removed only if it
    holds exactly that value (e.g. remove ``default-runtime`` only while it is ``nvidia``). An
    object left empty by a removal is kept (it may be meaningful to its owner).
    """
    result = copy.deepcopy(current)
    removed = []
    for item in removals:
        keys = list(item.get("keys") or [])
        if not keys:
            continue
        wanted_value = item.get("value", _ANY)
        if wanted_value is None:
            wanted_value = _ANY
        parent = result
        for key in keys[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
            if not isinstance(parent, dict):
                break
        if not isinstance(parent, dict) or keys[-1] not in parent:
            continue
        if wanted_value is not _ANY and not _same(parent[keys[-1]], wanted_value):
            continue
        del parent[keys[-1]]
        removed.append(tuple(keys))
    return result, removed


def render(document, indent=DEFAULT_INDENT):
    """Serialise a configuration the way the module writes it: UTF-8 text, a final newline."""
    return json.dumps(document, indent=indent, ensure_ascii=False) + "\n"


def path_label(path):
    """Human-readable label of a key path: ``runtimes.nvidia``; keys with dots are quoted."""
    return ".".join(json.dumps(key) if "." in key else key for key in path)


def plan(text, settings=None, removals=None, path="daemon.json", indent=DEFAULT_INDENT):
    """Work out what writing ``settings``/``removals`` into the file content ``text`` means.

    ``text`` is None when the file does not exist (it then counts as ``{}`` and is created only
    when there is something to set). Returns a dict with ``before`` and ``after``
    (documents), ``changed`` (bool), ``changed_keys`` (labels of the key paths that change) and
    ``before_text`` / ``after_text`` (both rendered the same way, for a diff that shows only the
    keys that change, never formatting). ``after_text`` is what the file must contain.
    Raises DaemonJsonError when the existing content is unusable.
    """
    exists = text is not None
    before = parse_daemon_json(text, path) if exists else {}
    after, set_paths = merge_settings(before, settings or {})
    after, removed_paths = remove_keys(after, removals or [])
    changed_paths = []
    for key_path in set_paths + removed_paths:
        if key_path not in changed_paths:
            changed_paths.append(key_path)
    # A missing file is an empty configuration: it is created only when something is to be set.
    changed = not _same(before, after)
    return {
        "before": before,
        "after": after,
        "changed": changed,
        "changed_keys": [path_label(p) for p in changed_paths],
        "before_text": render(before, indent) if exists else "",
        "after_text": render(after, indent),
    }
