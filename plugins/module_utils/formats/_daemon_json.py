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
- documents are compared parsed, never byte by byte, so formatting alone is never a change;
- nothing that Docker could not read, or that is not what the caller meant, is ever planned: the
  file and the options are bounded (size, nesting, numbers, indent), NaN and Infinity are refused,
  and the keys the module is asked to set are checked against the types Docker reads them as
  (``check_settings``), so ``settings: "runtimes=nvidia"`` is an error, never ``"runtimes": "nvidia"``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import math
import re
import unicodedata

DEFAULT_INDENT = 4

# Bounds. A real daemon.json is a few kilobytes and nests at most five levels (builder.gc.policy[]
# .filter[] in the full example of docker/cli docs/reference/dockerd.md:1058-1199, commit 28f75608;
# verified); the bounds are far above that and far below what could exhaust memory or the stack.
MAX_BYTES = 1024 * 1024
MAX_DEPTH = 32
MAX_INDENT = 8
# dockerd reads daemon.json with Go's encoding/json into int/int64 and float64 fields, so a number
# beyond 64 bits, NaN or Infinity cannot mean anything to it (inferred from Go's types).
INT_LIMIT = 2 ** 63 - 1


class DaemonJsonError(Exception):
    """The existing file cannot be used; the message names the file and says what to do."""


class SettingsError(DaemonJsonError):
    """An option (settings, remove, indent) is not what Docker can read; the message names the field."""


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
    not a JSON object; and for what is beyond the bounds: more than MAX_BYTES, arrays/objects
    nested deeper than MAX_DEPTH, NaN/Infinity, numbers beyond 64 bits.
    """
    size = len(text.encode("utf-8") if not isinstance(text, bytes) else text)
    if size > MAX_BYTES:
        raise DaemonJsonError(
            "%s is %d bytes, more than the %d a daemon configuration file may have here (a real one is a "
            "few kilobytes); check that path names the right file (the file was left untouched)."
            % (path, size, MAX_BYTES)
        )
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
    depth, where = nesting_depth(text)
    if depth > MAX_DEPTH:
        raise DaemonJsonError(
            "%s nests arrays/objects %d levels deep (%s), more than the %d allowed here (Docker's own keys "
            "nest at most 5); fix or remove the file (it was left untouched)."
            % (path, depth, _position(text, where), MAX_DEPTH)
        )
    try:
        document = json.loads(text, object_pairs_hook=_reject_duplicates(path),
                              parse_constant=_reject_constant, parse_float=_finite_float,
                              parse_int=_bounded_int)
    except RecursionError:
        # nesting_depth counts outside strings, so this is a second line of defence only.
        raise DaemonJsonError(
            "%s nests arrays/objects too deeply to read (more than %d levels allowed); fix or remove the "
            "file (it was left untouched)." % (path, MAX_DEPTH)
        )
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


def _finite_float(text):
    value = float(text)
    if math.isinf(value):
        # 1e999 is valid JSON text but Python reads it as Infinity, which would be written back as such.
        raise ValueError("the number %s is beyond a 64-bit float (Docker cannot read it)" % _clip(text))
    return value


def _bounded_int(text):
    # Checked on the text first: int() of a 100000-digit literal is slow, and refused by Python 3.11+.
    digits = text.lstrip("-")
    if len(digits) > 19 or abs(int(text)) > INT_LIMIT:
        raise ValueError("the number %s is beyond a 64-bit integer (Docker cannot read it)" % _clip(text))
    return int(text)


def _clip(text, limit=40):
    return text if len(text) <= limit else "%s...(%d characters)" % (text[:limit], len(text))


_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]')


def nesting_depth(text):
    """``(depth, offset)``: how deep arrays/objects nest in JSON ``text`` (brackets inside strings
    do not count), and where the deepest level is first reached. Linear, never recursive, so it
    can size up a hostile file before the (recursive) JSON parser sees it."""
    depth = deepest = 0
    where = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        token = match.group(0)
        if token in "[{":
            depth += 1
            if depth > deepest:
                deepest, where = depth, match.start()
                if deepest > MAX_DEPTH:
                    break
        elif token in "]}":
            depth -= 1
    return deepest, where


def _position(text, offset):
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return "line %d column %d" % (line, column)


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


# ---------------------------------------------------------------------------------------------
# Options: what the module is asked to write must be something Docker can read
# ---------------------------------------------------------------------------------------------

_SIMPLE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def control_character(text):
    """``(index, char)`` of the first character that has no place in a daemon.json value or a path
    (C0/C1 controls and DEL, line/paragraph separators, lone UTF-16 surrogates), else None."""
    for index, char in enumerate(text):
        if unicodedata.category(char) in ("Cc", "Zl", "Zp", "Cs"):
            return index, char
    return None


def describe(value):
    """How a value is named in a message: its JSON type and (a clipped) value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "the boolean %s" % ("true" if value else "false")
    if isinstance(value, int):
        return "the number %d" % value if abs(value) < 10 ** 30 else int_text(value)
    if isinstance(value, float):
        return "the number %r" % value
    if isinstance(value, str):
        return "the string %s" % _clip(json.dumps(value), 60)
    if isinstance(value, dict):
        return "a dictionary (keys: %s)" % _clip(", ".join(str(k) for k in list(value)[:8]), 60)
    if isinstance(value, (list, tuple)):
        return "a list of %d item(s)" % len(value)
    return "a %s" % type(value).__name__


def int_text(value):
    """An integer as text, or "a number of about N digits" when it is huge (Python 3.11+ refuses
    str() of an int beyond 4300 digits, and nobody reads one in a message)."""
    if abs(value) < 10 ** 30:
        return str(value)
    return "a number of about %d digits" % int(abs(value).bit_length() * 0.30103 + 1)


def _label(field, key):
    return "%s.%s" % (field, key if _SIMPLE_KEY.match(key) else json.dumps(key))


def _wrong(field, expected, value, hint=""):
    return SettingsError("%s must be %s, got %s%s; nothing was changed." % (field, expected, describe(value), hint))


def check_json_value(value, field, depth=0):
    """Raise SettingsError unless ``value`` is plain JSON Docker can read: string keys, no control
    characters, finite numbers within 64 bits, at most MAX_DEPTH levels of nesting."""
    if depth > MAX_DEPTH:
        raise SettingsError("%s nests lists/dictionaries more than %d levels deep (daemon.json's own keys nest at "
                            "most 5); flatten it; nothing was changed." % (field, MAX_DEPTH))
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if abs(value) > INT_LIMIT:
            raise _wrong(field, "a number within 64 bits (at most %d in size)" % INT_LIMIT, value)
    elif isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise _wrong(field, "a finite number (JSON has no NaN or Infinity)", value)
    elif isinstance(value, str):
        bad = control_character(value)
        if bad:
            raise SettingsError("%s holds the control character %s at position %d; daemon.json values are plain "
                                "text: remove it; nothing was changed." % (field, json.dumps(bad[1]), bad[0]))
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise SettingsError("%s has the key %r, which is not a string; daemon.json keys are strings: quote "
                                    "it; nothing was changed." % (field, key))
            bad = control_character(key)
            if bad:
                raise SettingsError("%s has the key %s, which holds the control character %s; remove it; nothing "
                                    "was changed." % (field, json.dumps(key), json.dumps(bad[1])))
            check_json_value(item, _label(field, key), depth + 1)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            check_json_value(item, "%s[%d]" % (field, index), depth + 1)
    else:
        raise _wrong(field, "a JSON value (string, number, boolean, null, list or dictionary)", value)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _bool(value, field):
    if not isinstance(value, bool):
        raise _wrong(field, "true or false", value)


def _string(value, field):
    if not isinstance(value, str):
        raise _wrong(field, "a string", value)


def _nonempty_string(value, field):
    if not isinstance(value, str) or not value.strip():
        raise _wrong(field, "a non-empty string", value)


def _integer(value, field):
    if not _is_int(value):
        raise _wrong(field, "a whole number", value)


def _string_list(value, field):
    if not isinstance(value, list):
        raise _wrong(field, "a list of strings", value)
    for index, item in enumerate(value):
        _string(item, "%s[%d]" % (field, index))


def _string_map(value, field, hint=""):
    if not isinstance(value, dict):
        raise _wrong(field, "a dictionary of strings", value)
    for key, item in value.items():
        if not isinstance(item, str):
            raise _wrong(_label(field, key), "a string", item, hint)


def _log_opts(value, field):
    # "log-opts configuration options in the daemon.json configuration file must be provided as strings"
    # (docs.docker.com/engine/logging/drivers/json-file/, note under Usage; verified).
    _string_map(value, field, " (Docker reads log options as strings only: quote numbers and booleans, "
                              "for example max-file: \"3\")")


def _map_of(value, field, expected, check):
    """A dictionary option (else ``expected`` is the message) whose every value passes ``check(item, label)``."""
    if not isinstance(value, dict):
        raise _wrong(field, expected, value)
    for key, item in value.items():
        check(item, _label(field, key))


def _object_with(fields, expected):
    """The check of one object of a map or list option: a dictionary (else ``expected`` is the message)
    whose keys of ``fields`` ((key, check) pairs) pass their check; other keys are kept as they are."""
    def check(item, entry):
        """Raise DaemonJsonError naming ``entry`` (or its key) when ``item`` is not such an object."""
        if not isinstance(item, dict):
            raise _wrong(entry, expected, item)
        for key, field_check in fields:
            if key in item:
                field_check(item[key], _label(entry, key))
    return check


def _bool_map(value, field):
    _map_of(value, field, "a dictionary of true/false values", _bool)


def _object(value, field):
    if not isinstance(value, dict):
        raise _wrong(field, "a dictionary", value)


def _size(value, field):
    # "64M" in the example; a plain number of bytes is read too (inferred: Docker's MemBytes type).
    if not (isinstance(value, str) or (_is_int(value) and value >= 0)):
        raise _wrong(field, "a size such as \"64M\" (or a number of bytes)", value)


_RUNTIME_FIELDS = (("path", _nonempty_string), ("runtimeArgs", _string_list),
                   ("runtimeType", _nonempty_string), ("options", _object))
_RUNTIME = _object_with(_RUNTIME_FIELDS, "a dictionary such as {path: nvidia-container-runtime} (a runtime's "
                                         "configuration)")
_ULIMIT = _object_with((("Name", _string), ("Soft", _integer), ("Hard", _integer)),
                       "a dictionary such as {Name: nofile, Soft: 64000, Hard: 64000}")
_ADDRESS_POOL = _object_with((("base", _string), ("size", _integer)), "a dictionary such as {base: 172.30.0.0/16, size: 24}")


def _runtimes(value, field):
    # docker/cli docs/reference/dockerd.md:431-482 (commit 28f75608; verified): "runtimes" maps a
    # runtime name to an object with "path" (and optional "runtimeArgs"), or "runtimeType" (and
    # optional "options"). Other keys (nvidia-ctk writes "args") are kept as they are.
    _map_of(value, field, "a dictionary of runtime name -> {path: ..., runtimeArgs: [...]}, for example "
                          "{nvidia: {path: nvidia-container-runtime}}", _RUNTIME)


def _ulimits(value, field):
    # {"nofile": {"Hard": 64000, "Name": "nofile", "Soft": 64000}} (dockerd.md:1107-1113; verified).
    _map_of(value, field, "a dictionary of ulimit name -> {Name, Soft, Hard}", _ULIMIT)


def _address_pools(value, field):
    # [{"base": "172.30.0.0/16", "size": 24}] (dockerd.md:1091-1100; verified).
    if not isinstance(value, list):
        raise _wrong(field, "a list of {base: CIDR, size: prefix length}", value)
    for index, pool in enumerate(value):
        _ADDRESS_POOL(pool, "%s[%d]" % (field, index))


def _network_opts(value, field):
    # {"bridge": {"com.docker.network.driver.mtu": "1234"}} (dockerd.md:1403-1410; verified).
    _map_of(value, field, "a dictionary of driver name -> {option: value}", _string_map)


# The JSON type of each key of the full Linux example in docker/cli docs/reference/dockerd.md:1058-1199
# (commit 28f75608, 2026-08-20; verified), plus cdi-spec-dirs (dockerd.md:871) and host-gateway-ips
# (dockerd.md:835). Keys not listed are passed through unchecked (Docker versions add keys; give
# validate to have dockerd check them).
DAEMON_KEY_TYPES = {
    "runtimes": _runtimes,
    "default-runtime": _nonempty_string,
    "features": _bool_map,
    "log-opts": _log_opts,
    "default-ulimits": _ulimits,
    "default-address-pools": _address_pools,
    "default-network-opts": _network_opts,
    "default-shm-size": _size,
    "builder": _object,
    "proxies": _string_map,
}
for _key in ("allow-direct-routing", "debug", "experimental", "icc", "init", "ip-forward", "ip-masq", "iptables",
             "ip6tables", "ipv6", "live-restore", "no-new-privileges", "raw-logs", "selinux-enabled", "tls",
             "tlsverify", "userland-proxy"):
    DAEMON_KEY_TYPES[_key] = _bool
for _key in ("bip", "bip6", "bridge", "bridge-accept-fwmark", "cgroup-parent", "containerd", "containerd-namespace",
             "containerd-plugins-namespace", "data-root", "default-cgroupns-mode", "default-gateway",
             "default-gateway-v6", "exec-root", "firewall-backend", "fixed-cidr", "fixed-cidr-v6", "group",
             "host-gateway-ip", "init-path", "ip", "log-driver", "log-format", "log-level", "pidfile",
             "seccomp-profile", "storage-driver", "swarm-default-advertise-addr", "tlscacert", "tlscert", "tlskey",
             "userland-proxy-path", "userns-remap"):
    DAEMON_KEY_TYPES[_key] = _string
for _key in ("authorization-plugins", "cdi-spec-dirs", "dns", "dns-opts", "dns-search", "exec-opts",
             "host-gateway-ips", "hosts", "insecure-registries", "labels", "node-generic-resources",
             "registry-mirrors", "storage-opts"):
    DAEMON_KEY_TYPES[_key] = _string_list
for _key in ("max-concurrent-downloads", "max-concurrent-uploads", "max-download-attempts", "mtu",
             "shutdown-timeout"):
    DAEMON_KEY_TYPES[_key] = _integer
del _key

_SETTINGS_EXAMPLE = "{runtimes: {nvidia: {path: nvidia-container-runtime}}}"


def check_settings(settings, field="settings"):
    """Return ``settings`` as a dict, or raise SettingsError naming the field and what it must be.

    A dict is checked as plain JSON (check_json_value) and, for the keys Docker documents, against
    the type Docker reads (DAEMON_KEY_TYPES). A string is accepted only when it is a JSON object:
    Ansible's dict type would read ``"runtimes=nvidia"`` as ``{"runtimes": "nvidia"}``, which is
    exactly the nonsense this refuses.
    """
    if settings is None:
        return {}
    if isinstance(settings, str):
        text = settings.strip()
        if not text.startswith("{"):
            raise SettingsError(
                "%s must be a dictionary in daemon.json's shape, for example %s; got %s, which is not one (text "
                "such as runtimes=nvidia is not read as key=value pairs): write it as a YAML mapping; nothing was "
                "changed." % (field, _SETTINGS_EXAMPLE, describe(settings)))
        settings = _parse_option_json(text, field)
    if not isinstance(settings, dict):
        raise _wrong(field, "a dictionary in daemon.json's shape, for example %s" % _SETTINGS_EXAMPLE, settings)
    check_json_value(settings, field)
    for key, value in settings.items():
        checker = DAEMON_KEY_TYPES.get(key)
        if checker is not None:
            checker(value, _label(field, key))
    return settings


def _parse_option_json(text, field):
    depth, where = nesting_depth(text)
    if depth > MAX_DEPTH:
        raise SettingsError("%s nests lists/dictionaries more than %d levels deep; flatten it; nothing was changed."
                            % (field, MAX_DEPTH))
    try:
        return json.loads(text, object_pairs_hook=_reject_duplicate_option_keys(field),
                          parse_constant=_reject_constant, parse_float=_finite_float, parse_int=_bounded_int)
    except (ValueError, RecursionError) as exc:
        raise SettingsError("%s is a string that is not a JSON object (%s); give a YAML mapping instead; nothing was "
                            "changed." % (field, exc))


def _reject_duplicate_option_keys(field):
    def hook(pairs):
        result = {}
        for key, value in pairs:
            if key in result:
                raise ValueError("the key %s appears twice in the same object" % json.dumps(key))
            result[key] = value
        return result
    return hook


def check_removals(removals, field="remove"):
    """Return ``removals`` (a list of {keys, value}) or raise SettingsError naming the item."""
    if removals is None:
        return []
    if not isinstance(removals, list):
        raise _wrong(field, "a list of {keys: [...], value: ...}", removals)
    for index, item in enumerate(removals):
        entry = "%s[%d]" % (field, index)
        if not isinstance(item, dict):
            raise _wrong(entry, "a dictionary {keys: [...], value: ...}", item)
        keys = item.get("keys")
        if not isinstance(keys, list):
            # An empty list removes nothing (remove_keys skips it), as before.
            raise _wrong(entry + ".keys", "a list of key names, for example [default-runtime]", keys)
        for position, key in enumerate(keys):
            _string(key, "%s.keys[%d]" % (entry, position))
        check_json_value(keys, entry + ".keys")
        check_json_value(item.get("value"), entry + ".value")
    return removals


def check_indent(indent):
    """Return ``indent`` or raise SettingsError: a whole number of spaces, 0 to MAX_INDENT."""
    if not _is_int(indent) or not 0 <= indent <= MAX_INDENT:
        raise _wrong("indent", "a whole number of spaces from 0 to %d" % MAX_INDENT, indent)
    return indent


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
    Raises SettingsError (a DaemonJsonError) when an option is not what Docker can read, and
    DaemonJsonError when the existing content is unusable or the result would be beyond the bounds;
    nothing is planned then.
    """
    settings = check_settings(settings)
    removals = check_removals(removals)
    indent = check_indent(indent)
    exists = text is not None
    before = parse_daemon_json(text, path) if exists else {}
    after, set_paths = merge_settings(before, settings)
    after, removed_paths = remove_keys(after, removals)
    changed_paths = []
    for key_path in set_paths + removed_paths:
        if key_path not in changed_paths:
            changed_paths.append(key_path)
    # A missing file is an empty configuration: it is created only when something is to be set.
    changed = not _same(before, after)
    after_text = render(after, indent)
    try:
        size = len(after_text.encode("utf-8"))
    except UnicodeEncodeError:
        # Only the file can bring one (check_settings refuses them): a "\ud800" escape, valid JSON, no text.
        raise DaemonJsonError(
            "%s holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape without its pair), which is not text; fix "
            "or remove that value (the file was left untouched)." % path
        )
    if size > MAX_BYTES:
        raise DaemonJsonError(
            "The merged configuration for %s would be %d bytes, more than the %d allowed here; check settings "
            "(nothing was changed)." % (path, size, MAX_BYTES)
        )
    return {
        "before": before,
        "after": after,
        "changed": changed,
        "changed_keys": [path_label(p) for p in changed_paths],
        "before_text": render(before, indent) if exists else "",
        "after_text": after_text,
    }
