# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Hostile input for docker_daemon_config and vllm_image_facts (issue 13).

Rule under test, for every input: the module ends within its time bound with either a sane result
or a fail_json whose message names the field and what it expects; never a traceback, never an
unbounded wait, never a write (or a success) built on nonsense. One regression test per hole, then
hypothesis properties per class: special files, deep nesting, huge numbers, NaN/inf, non-ASCII
digits, control characters, and (for the docker CLI) a command that never answers.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import io
import json
import math
import os
import re
import shutil
import signal
import stat
import tempfile
import threading
import time

import pytest
from hypothesis import HealthCheck, example, given, settings as hsettings, strategies as st

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.labfleet.vllm.plugins.module_utils.clients import _bounded
from ansible_collections.labfleet.vllm.plugins.module_utils.clients._bounded import KILL_GRACE
from ansible_collections.labfleet.vllm.plugins.module_utils.formats import _daemon_json as D
from ansible_collections.labfleet.vllm.plugins.module_utils.probes import _image as I
from ansible_collections.labfleet.vllm.plugins.modules import docker_daemon_config, nvidia_driver_plan, vllm_image_facts

try:
    from unittest import mock
except ImportError:  # pragma: no cover
    import mock

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "image")
NVIDIA = {"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}
SITE = {"data-root": "/data/docker", "log-opts": {"max-size": "100m", "max-file": "3"},
        "runtimes": {"other": {"path": "/usr/bin/other"}}}
# Non-ASCII decimal digits (Arabic-Indic, Extended Arabic-Indic, Devanagari, fullwidth): str.isdigit(),
# \d and int() all accept them.
UNICODE_DIGITS = u"\u0660\u0661\u0662\u0667\u06f0\u06f4\u0966\u0967\u096d\uff10\uff11\uff14\uff17"
HYPOTHESIS = dict(database=None, deadline=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


class TooSlow(Exception):
    pass


# Each command's time limit in the tests of a command that never answers, and the grace between its
# SIGTERM and SIGKILL as the modules document it. Such a command must end no sooner than its limit
# (the one configured, not zero) and before 1.9 x it (a doubled limit fails); a command that ignores
# SIGTERM no sooner than the limit and the grace. The limits every command got are recorded too.
LIMIT = 1
GRACE = 5


def on_time(elapsed, limit=LIMIT, grace=0):
    """Whether a bounded command that never ended by itself took its limit (plus ``grace``) and well
    under twice its limit more."""
    return limit + grace <= elapsed < 1.9 * limit + grace


@pytest.fixture()
def bounded_timers(monkeypatch):
    """The seconds of every timer run_bounded starts in the two modules (real timers, recorded): each
    command's limit, and the grace before SIGKILL once a command has outlived its limit."""
    started = []

    class Timer(threading.Timer):
        def start(self):
            started.append(self.interval)
            threading.Timer.start(self)

    def run_bounded(module, command, limit):
        return _bounded.run_bounded(module, command, limit, Timer)

    for plugin in (docker_daemon_config, vllm_image_facts):
        monkeypatch.setattr(plugin, "run_bounded", run_bounded)
    return started


@contextlib.contextmanager
def time_limit(seconds):
    """Fail (instead of hanging the suite) when the body runs past ``seconds``: a blocked open()
    of a FIFO or a docker CLI that never answers is interrupted by SIGALRM."""
    def expire(signum, frame):
        raise TooSlow("did not finish within %s s" % seconds)
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def module_args(args):
    """The module's options: a dict (encoded the way the controller encodes them), or the JSON text the
    module reads, as is: how to hand it options nested deeper than the encoder itself can go."""
    if not isinstance(args, str):
        with patch_module_args(args):
            yield
        return
    with mock.patch.object(basic, "_ANSIBLE_ARGS", args.encode()), mock.patch.object(basic, "_ANSIBLE_PROFILE", "legacy"):
        yield


def call_module(module, args, seconds=20):
    """Run ``module.main()`` with ``args`` (a dict, or the options' JSON text); (rc, result dict, elapsed s).
    The output must be one JSON object without NaN/Infinity and without a traceback."""
    out = io.StringIO()
    started = time.monotonic()
    with time_limit(seconds):
        with module_args(args):
            with contextlib.redirect_stdout(out):
                with pytest.raises(SystemExit) as exc:
                    module.main()
    text = out.getvalue()
    assert "Traceback" not in text
    result = json.loads(text)
    assert "exception" not in result
    # Ansible echoes the module's own input under "invocation" (NaN included, if that is what was given);
    # everything the module itself answers must be strict JSON.
    json.dumps(dict((k, v) for k, v in result.items() if k != "invocation"), allow_nan=False)
    return exc.value.code, result, time.monotonic() - started


# ---------------------------------------------------------------------------------------------
# docker_daemon_config
# ---------------------------------------------------------------------------------------------

def daemon(workdir, args, check_mode=False, seconds=20):
    full = {"_ansible_tmpdir": str(workdir / "tmp"), "_ansible_remote_tmp": str(workdir / "tmp"),
            "_ansible_check_mode": check_mode}
    full.update(args)
    (workdir / "tmp").mkdir(exist_ok=True)
    rc, result, dummy = call_module(docker_daemon_config, full, seconds)
    return rc, result


def snapshot(path):
    """Bytes and mtime of a file (None when missing): what 'nothing was changed' compares."""
    try:
        info = os.lstat(str(path))
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return ("special", info.st_mode, info.st_mtime_ns)
    with open(str(path), "rb") as handle:
        return handle.read(), info.st_mtime_ns


def strict_json(text):
    def refuse(name):
        raise AssertionError("%s written to daemon.json" % name)
    return json.loads(text, parse_constant=refuse)


def assert_sane_daemon_json(document):
    """An oracle independent of the module's checks: what a written daemon.json must look like."""
    assert isinstance(document, dict)
    runtimes = document.get("runtimes", {})
    assert isinstance(runtimes, dict)
    for entry in runtimes.values():
        assert isinstance(entry, dict)
        assert isinstance(entry.get("path", ""), str)
        assert isinstance(entry.get("runtimeArgs", []), list)
    assert all(isinstance(v, str) for v in document.get("log-opts", {}).values())
    assert all(isinstance(v, bool) for v in document.get("features", {}).values())

    def walk(value, depth):
        assert depth <= D.MAX_DEPTH + 1
        if isinstance(value, float):
            assert math.isfinite(value)
        elif isinstance(value, int) and not isinstance(value, bool):
            assert abs(value) <= D.INT_LIMIT
        elif isinstance(value, str):
            assert not re.search(u"[\x00-\x1f\x7f-\x9f\u2028\u2029]", value)
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(key, depth)
                walk(item, depth + 1)
        elif isinstance(value, list):
            for item in value:
                walk(item, depth + 1)
    walk(document, 0)


def fresh_dir(parent):
    """A new directory per hypothesis example (tmp_path is shared by all examples of one test)."""
    return type(parent)(tempfile.mkdtemp(dir=str(parent)))


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "tmp").mkdir()
    return tmp_path


# --- regression: one test per hole ------------------------------------------------------------

@pytest.mark.parametrize("content", [
    "[" * 100000,
    '{"a": ' * 100000 + "1" + "}" * 100000,
    '{"runtimes": ' + "[" * 40 + "]" * 40 + "}",
], ids=["100000-deep-array", "100000-deep-object", "40-deep"])
def test_deeply_nested_file_fails_clearly_instead_of_recursion_error(workdir, content):
    conf = workdir / "daemon.json"
    conf.write_text(content)
    before = snapshot(conf)
    rc, result = daemon(workdir, {"path": str(conf), "settings": NVIDIA})
    assert rc == 1 and result["changed"] is False
    assert result["msg"].startswith("%s nests arrays/objects " % conf)
    assert "more than the 32 allowed" in result["msg"] and "left untouched" in result["msg"]
    assert snapshot(conf) == before


def test_nesting_within_the_bound_still_merges(workdir):
    conf = workdir / "daemon.json"
    deep = {"x": 1}
    for dummy in range(D.MAX_DEPTH - 1):
        deep = {"x": deep}
    conf.write_text(json.dumps(deep))
    rc, result = daemon(workdir, {"path": str(conf), "settings": NVIDIA})
    assert rc == 0 and result["changed"] is True
    assert strict_json(conf.read_text())["runtimes"] == NVIDIA["runtimes"]


def test_symlink_to_dev_zero_fails_without_reading_it(workdir):
    link = workdir / "daemon.json"
    os.symlink("/dev/zero", str(link))
    rc, result = daemon(workdir, {"path": str(link), "settings": NVIDIA}, seconds=10)
    assert rc == 1
    assert result["msg"].startswith("/dev/zero is a character device, not a regular file")
    assert "nothing was changed" in result["msg"]
    assert os.readlink(str(link)) == "/dev/zero"


def test_fifo_fails_at_once_instead_of_blocking(workdir):
    fifo = workdir / "daemon.json"
    os.mkfifo(str(fifo))
    started = time.monotonic()
    rc, result = daemon(workdir, {"path": str(fifo), "settings": NVIDIA}, seconds=10)
    assert time.monotonic() - started < 10
    assert rc == 1
    assert result["msg"] == ("%s is a named pipe (FIFO), not a regular file; path must name Docker's daemon "
                             "configuration file (a regular file, or one that does not exist yet); nothing was "
                             "changed." % fifo)
    assert stat.S_ISFIFO(os.lstat(str(fifo)).st_mode)


def test_fifo_in_check_mode_fails_too(workdir):
    fifo = workdir / "daemon.json"
    os.mkfifo(str(fifo))
    rc, result = daemon(workdir, {"path": str(fifo), "settings": NVIDIA}, check_mode=True, seconds=10)
    assert rc == 1 and "named pipe" in result["msg"]


def test_oversized_file_is_refused_before_it_is_parsed(workdir):
    conf = workdir / "daemon.json"
    conf.write_text('{"labels": ["%s"]}' % ("x" * (D.MAX_BYTES + 10)))
    before = snapshot(conf)
    rc, result = daemon(workdir, {"path": str(conf), "settings": NVIDIA})
    assert rc == 1 and "more than the %d a daemon configuration file may have" % D.MAX_BYTES in result["msg"]
    assert snapshot(conf) == before


@pytest.mark.parametrize("settings", ["runtimes=nvidia", "nvidia", "runtimes=nvidia default-runtime=nvidia", ""])
def test_settings_as_a_string_is_refused_and_nothing_is_written(workdir, settings):
    conf = workdir / "daemon.json"
    conf.write_text(json.dumps(SITE))
    before = snapshot(conf)
    for check_mode in (False, True):
        rc, result = daemon(workdir, {"path": str(conf), "settings": settings}, check_mode=check_mode)
        assert rc == 1 and result["changed"] is False
        assert result["msg"].startswith("settings must be a dictionary in daemon.json's shape, for example "
                                        "{runtimes: {nvidia: {path: nvidia-container-runtime}}}; got the string ")
        assert snapshot(conf) == before
    missing = workdir / "new" / "daemon.json"
    (workdir / "new").mkdir()
    rc, result = daemon(workdir, {"path": str(missing), "settings": settings})
    assert rc == 1 and not missing.exists()


def test_settings_as_a_json_object_string_still_works(workdir):
    conf = workdir / "daemon.json"
    rc, result = daemon(workdir, {"path": str(conf), "settings": json.dumps(NVIDIA)})
    assert rc == 0 and strict_json(conf.read_text()) == NVIDIA


@pytest.mark.parametrize("settings,message", [
    ({"runtimes": "nvidia"}, "settings.runtimes must be a dictionary of runtime name -> {path: ..., runtimeArgs: "
                             "[...]}, for example {nvidia: {path: nvidia-container-runtime}}, got the string \"nvidia\""),
    ({"runtimes": ["nvidia"]}, "settings.runtimes must be a dictionary of runtime name"),
    ({"runtimes": {"nvidia": "nvidia-container-runtime"}},
     "settings.runtimes.nvidia must be a dictionary such as {path: nvidia-container-runtime}"),
    ({"runtimes": {"nvidia": {"path": 1}}}, "settings.runtimes.nvidia.path must be a non-empty string, got the number 1"),
    ({"runtimes": {"nvidia": {"path": ""}}}, "settings.runtimes.nvidia.path must be a non-empty string"),
    ({"runtimes": {"nvidia": {"path": "p", "runtimeArgs": "--debug"}}},
     "settings.runtimes.nvidia.runtimeArgs must be a list of strings, got the string \"--debug\""),
    ({"runtimes": {"nvidia": {"path": "p", "runtimeArgs": [1]}}}, "settings.runtimes.nvidia.runtimeArgs[0] must be a string"),
    ({"runtimes": {"kata": {"runtimeType": "io.containerd.kata.v2", "options": "x"}}},
     "settings.runtimes.kata.options must be a dictionary"),
    ({"default-runtime": ["nvidia"]}, "settings.default-runtime must be a non-empty string, got a list of 1 item(s)"),
    ({"features": {"cdi": "true"}}, "settings.features.cdi must be true or false, got the string \"true\""),
    ({"features": "cdi"}, "settings.features must be a dictionary of true/false values"),
    ({"log-opts": {"max-file": 3}}, "settings.log-opts.max-file must be a string, got the number 3 (Docker reads log "
                                    "options as strings only"),
    ({"debug": "yes"}, "settings.debug must be true or false, got the string \"yes\""),
    ({"mtu": "1500"}, "settings.mtu must be a whole number, got the string \"1500\""),
    ({"mtu": 1500.5}, "settings.mtu must be a whole number, got the number 1500.5"),
    ({"mtu": True}, "settings.mtu must be a whole number, got the boolean true"),
    ({"registry-mirrors": "https://mirror"}, "settings.registry-mirrors must be a list of strings"),
    ({"default-ulimits": {"nofile": {"Name": "nofile", "Soft": "64000"}}},
     "settings.default-ulimits.nofile.Soft must be a whole number"),
    ({"default-address-pools": [{"base": "172.30.0.0/16", "size": "24"}]},
     "settings.default-address-pools[0].size must be a whole number"),
    ({"default-network-opts": {"bridge": {"com.docker.network.driver.mtu": 1234}}},
     "settings.default-network-opts.bridge.\"com.docker.network.driver.mtu\" must be a string"),
    ({"default-shm-size": -1}, "settings.default-shm-size must be a size such as \"64M\""),
    ({"proxies": {"http-proxy": 80}}, "settings.proxies.http-proxy must be a string"),
    ({"x": float("nan")}, "settings.x must be a finite number (JSON has no NaN or Infinity), got the number nan"),
    ({"x": float("inf")}, "settings.x must be a finite number (JSON has no NaN or Infinity), got the number inf"),
    ({"x": [float("-inf")]}, "settings.x[0] must be a finite number"),
    ({"x": 10 ** 400}, "settings.x must be a number within 64 bits (at most 9223372036854775807 in size), got a "
                       "number of about 401 digits"),
    ({"x": "a\nb"}, "settings.x holds the control character \"\\n\" at position 1"),
    ({"data-root": "/srv\x00/docker"}, "settings.data-root holds the control character \"\\u0000\" at position 4"),
    ({"x\ty": 1}, "settings has the key \"x\\ty\", which holds the control character \"\\t\""),
    ({"labels": ["a\u2028b"]}, "settings.labels[0] holds the control character \"\\u2028\""),
], ids=lambda v: v if isinstance(v, str) and len(v) < 30 else None)
def test_settings_of_the_wrong_shape_are_refused_naming_the_field(workdir, settings, message):
    conf = workdir / "daemon.json"
    conf.write_text(json.dumps(SITE))
    before = snapshot(conf)
    rc, result = daemon(workdir, {"path": str(conf), "settings": settings})
    assert rc == 1 and result["changed"] is False
    assert result["msg"].startswith(message), result["msg"]
    assert result["msg"].endswith("nothing was changed.")
    assert snapshot(conf) == before


def test_settings_nested_too_deeply_are_refused(workdir):
    deep = "leaf"
    for dummy in range(D.MAX_DEPTH + 5):
        deep = {"k": deep}
    rc, result = daemon(workdir, {"path": str(workdir / "daemon.json"), "settings": {"x": deep}})
    assert rc == 1 and "settings.x.k" in result["msg"] and "more than 32 levels deep" in result["msg"]
    assert not (workdir / "daemon.json").exists()


@pytest.mark.parametrize("indent", [100000000, 9, -1, 2 ** 70])
def test_huge_or_negative_indent_is_refused_before_writing(workdir, indent):
    conf = workdir / "daemon.json"
    rc, result = daemon(workdir, {"path": str(conf), "settings": NVIDIA, "indent": indent})
    assert rc == 1
    assert result["msg"].startswith("indent must be a whole number of spaces from 0 to 8, got the number ")
    assert not conf.exists()


@pytest.mark.parametrize("value", [float("inf"), float("-inf")])
def test_infinite_indent_is_a_failure_not_an_overflow_traceback(workdir, value):
    rc, result = daemon(workdir, {"path": str(workdir / "daemon.json"), "settings": NVIDIA, "indent": value})
    assert rc == 1 and result["failed"] is True
    assert result["msg"].startswith("indent must be a whole number (indent 0 to 8")
    assert not (workdir / "daemon.json").exists()


def test_nan_indent_names_the_field(workdir):
    rc, result = daemon(workdir, {"path": str(workdir / "daemon.json"), "indent": float("nan")})
    assert rc == 1 and "indent" in result["msg"]


def test_indent_eight_is_the_largest_and_is_written(workdir):
    conf = workdir / "daemon.json"
    rc, result = daemon(workdir, {"path": str(conf), "settings": NVIDIA, "indent": 8})
    assert rc == 0 and conf.read_text().splitlines()[1] == ' ' * 8 + '"runtimes": {'


@pytest.mark.parametrize("content,fragment", [
    ('{"x": NaN}', "NaN is not a JSON value"),
    ('{"x": Infinity}', "Infinity is not a JSON value"),
    ('{"x": [-Infinity]}', "-Infinity is not a JSON value"),
    ('{"x": 1e999}', "the number 1e999 is beyond a 64-bit float"),
    ('{"x": %s}' % ("9" * 30), "the number %s is beyond a 64-bit integer" % ("9" * 30)),
    ('{"x": %s}' % ("9" * 100000), "is beyond a 64-bit integer"),
])
def test_nan_infinity_and_huge_numbers_in_the_file_are_refused(workdir, content, fragment):
    conf = workdir / "daemon.json"
    conf.write_text(content)
    before = snapshot(conf)
    rc, result = daemon(workdir, {"path": str(conf), "settings": NVIDIA})
    assert rc == 1 and result["msg"].startswith("%s is not valid JSON: " % conf)
    assert fragment in result["msg"] and "left untouched" in result["msg"]
    assert snapshot(conf) == before


def test_a_lone_surrogate_in_the_file_is_refused_not_a_unicode_traceback(workdir):
    conf = workdir / "daemon.json"
    conf.write_text('{"labels": ["\\ud800"]}')
    before = snapshot(conf)
    rc, result = daemon(workdir, {"path": str(conf), "settings": NVIDIA})
    assert rc == 1 and "lone UTF-16 surrogate" in result["msg"]
    assert snapshot(conf) == before


@pytest.mark.parametrize("args,message", [
    ({"path": "/etc/docker/daemon.json\n"}, "path must be a file path without control characters"),
    ({"path": "/etc/docker\x00/daemon.json"}, "path must be a file path without control characters"),
    ({"validate": "dockerd --validate\n--config-file %s"}, "validate must be one command line without control characters"),
    ({"validate": "dockerd --validate --config-file '%s"}, "validate must be a command line whose quotes are balanced, "
                                                           "got \"dockerd --validate --config-file '%s\" (No closing "
                                                           "quotation)"),
    ({"validate": "   "}, "validate must name a command"),
    ({"validate_timeout": 0}, "validate_timeout must be a whole number of seconds from 1 to 3600, got 0"),
    ({"validate_timeout": 10 ** 40}, "validate_timeout must be a whole number of seconds from 1 to 3600, got a number "
                                     "of about 41 digits"),
    ({"validate_timeout": "1e400"}, "validate_timeout must be a whole number of seconds from 1 to 3600, got a number "
                                    "of about 401 digits"),
    # ansible-core itself raises (ValueError) logging an int of more than 4300 digits: still a clear failure.
    ({"validate_timeout": "1e5000"}, "validate_timeout must be a whole number (indent 0 to 8, validate_timeout 1 to "
                                     "3600), got an infinite or absurdly large value"),
    ({"indent": "1e5000"}, "indent must be a whole number (indent 0 to 8, validate_timeout 1 to 3600), got an "
                           "infinite or absurdly large value"),
    ({"remove": [{"keys": ["default-runtime\r"]}]}, "remove[0].keys[0] holds the control character \"\\r\""),
    ({"remove": [{"keys": ["x"], "value": float("nan")}]}, "remove[0].value must be a finite number"),
])
def test_control_characters_and_bad_numbers_in_other_options(workdir, args, message):
    full = {"path": str(workdir / "daemon.json"), "settings": NVIDIA}
    full.update(args)
    rc, result = daemon(workdir, full)
    assert rc == 1 and result["msg"].startswith(message), result["msg"]
    assert os.listdir(str(workdir)) == ["tmp"]


def test_a_validate_command_that_hangs_is_stopped_and_nothing_is_written(workdir, bounded_timers):
    conf = workdir / "daemon.json"
    conf.write_text(json.dumps(SITE))
    before = snapshot(conf)
    hang = workdir / "hang.sh"
    hang.write_text("#!/bin/sh\nexec sleep 60\n")
    hang.chmod(0o755)
    started = time.monotonic()
    rc, result = daemon(workdir, {"path": str(conf), "settings": NVIDIA, "validate": "%s %%s" % hang,
                                  "validate_timeout": LIMIT}, seconds=15)
    elapsed = time.monotonic() - started
    assert bounded_timers == [LIMIT, GRACE] and on_time(elapsed), (bounded_timers, elapsed)
    assert rc == 1
    assert result["msg"].startswith("`%s %%s` (validate) did not finish within 1 s (validate_timeout) and was "
                                    "stopped; %s was left untouched." % (hang, conf))
    assert snapshot(conf) == before
    assert os.listdir(str(workdir / "tmp")) == []


# --- properties --------------------------------------------------------------------------------

control_chars = st.characters(min_codepoint=0, max_codepoint=0x9f).filter(
    lambda c: ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f)
unicode_digits = st.sampled_from(UNICODE_DIGITS)
hostile_text = st.one_of(
    st.text(max_size=12),
    st.builds(lambda a, c, b: a + c + b, st.text(max_size=4), control_chars, st.text(max_size=4)),
    st.text(alphabet=unicode_digits, min_size=1, max_size=4),
    st.builds(lambda d: "1%s.%s" % (d, d), unicode_digits),
)
hostile_numbers = st.one_of(
    st.integers(min_value=-(2 ** 70), max_value=2 ** 70),
    st.sampled_from([10 ** 30, -(10 ** 30), 10 ** 400, 2 ** 63, 2 ** 63 - 1]),
    st.floats(allow_nan=True, allow_infinity=True),
)
hostile_leaf = st.one_of(st.none(), st.booleans(), hostile_numbers, hostile_text)
hostile_json = st.recursive(
    hostile_leaf,
    lambda children: st.one_of(st.lists(children, max_size=3),
                               st.dictionaries(hostile_text, children, max_size=3)),
    max_leaves=12,
)


def nested(depth, leaf):
    value = leaf
    for index in range(depth):
        value = [value] if index % 2 else {"k": value}
    return value


# Settings aimed at the keys the module checks, and at unknown ones, with hostile values at every level.
settings_strategy = st.one_of(
    hostile_json,
    st.dictionaries(st.sampled_from(sorted(D.DAEMON_KEY_TYPES) + ["no-such-key", "x.y"]), hostile_json, max_size=4),
    st.builds(lambda v: {"runtimes": {"nvidia": v}}, hostile_json),
    st.builds(lambda v: {"runtimes": {"nvidia": {"path": v}}}, hostile_json),
    st.builds(lambda v: {"log-opts": {"max-file": v}}, hostile_json),
    st.builds(lambda d, leaf: {"x": nested(d, leaf)}, st.integers(0, 60), hostile_leaf),
    st.just(dict(NVIDIA)),
)


@hsettings(max_examples=120, **HYPOTHESIS)
@given(settings=settings_strategy, check_mode=st.booleans())
def test_property_settings_either_merge_sanely_or_fail_naming_settings(tmp_path, settings, check_mode):
    work = fresh_dir(tmp_path)
    conf = work / "daemon.json"
    conf.write_text(json.dumps(SITE, indent=2))
    before = snapshot(conf)
    rc, result = daemon(work, {"path": str(conf), "settings": settings}, check_mode=check_mode)
    if rc == 0:
        # Only a dictionary (or a JSON object as text, or nothing at all) is ever taken as settings.
        assert settings is None or isinstance(settings, dict) or settings.strip().startswith("{")
        assert_sane_daemon_json(result["config"])
        if check_mode or not result["changed"]:
            assert snapshot(conf) == before
        else:
            written = strict_json(conf.read_text())
            assert written == result["config"]
            assert_sane_daemon_json(written)
            for key, value in SITE.items():
                if not isinstance(settings, dict) or key not in settings:
                    assert written[key] == value
    else:
        assert rc == 1 and result["changed"] is False
        assert result["msg"].startswith("settings"), result["msg"]
        assert " must be " in result["msg"] or " holds the control character " in result["msg"] \
            or " has the key " in result["msg"] or " nests " in result["msg"]
        assert snapshot(conf) == before
    shutil.rmtree(str(work))


@hsettings(max_examples=80, **HYPOTHESIS)
@given(document=st.one_of(hostile_json, st.builds(nested, st.integers(0, 80), hostile_leaf)),
       mangle=st.sampled_from(["json", "allow_nan", "deep-prefix", "bom", "dup"]))
def test_property_existing_file_either_merges_or_fails_naming_the_file(tmp_path, document, mangle):
    work = fresh_dir(tmp_path)
    conf = work / "daemon.json"
    if mangle == "deep-prefix":
        text = "[" * 5000 + json.dumps(document)
    elif mangle == "bom":
        text = u"\ufeff" + json.dumps({"d": document})
    elif mangle == "dup":
        text = '{"a": 1, "a": %s}' % json.dumps(document)
    else:
        try:
            text = json.dumps({"site": document} if mangle == "json" else document, allow_nan=True)
        except ValueError:  # an int beyond Python's str() limit
            text = '{"site": %s}' % ("9" * 5000)
    conf.write_bytes(text.encode("utf-8", "surrogatepass"))
    before = snapshot(conf)
    rc, result = daemon(work, {"path": str(conf), "settings": NVIDIA})
    if rc == 0:
        written = strict_json(conf.read_text())
        assert written["runtimes"]["nvidia"] == NVIDIA["runtimes"]["nvidia"]
        for key, value in strict_json(text).items():
            if key != "runtimes":
                assert written[key] == value
    else:
        assert result["msg"].startswith(str(conf)), result["msg"]
        assert "left untouched" in result["msg"]
        assert snapshot(conf) == before
    shutil.rmtree(str(work))


@hsettings(max_examples=60, **HYPOTHESIS)
@given(indent=st.one_of(hostile_numbers, hostile_text, st.integers(-3, 12)))
def test_property_indent_is_bounded(tmp_path, indent):
    work = fresh_dir(tmp_path)
    conf = work / "daemon.json"
    rc, result = daemon(work, {"path": str(conf), "settings": NVIDIA, "indent": indent})
    if rc == 0:
        text = conf.read_text()
        assert len(text) < 400
        width = len(text.splitlines()[1]) - len(text.splitlines()[1].lstrip(" "))
        assert 0 <= width <= 8
    else:
        assert "indent" in result["msg"]
        assert not conf.exists()
    shutil.rmtree(str(work))


@hsettings(max_examples=80, **HYPOTHESIS)
@given(path=hostile_text, validate=st.one_of(hostile_text, st.sampled_from(['"', "'", "%d", "%s %s", "\\", "%", "%%s"])),
       timeout=hostile_numbers)
def test_property_string_and_number_options(tmp_path, path, validate, timeout):
    work = fresh_dir(tmp_path)
    target = str(work / ("d" + path.replace("/", "_")))
    args = {"path": target, "settings": NVIDIA, "validate": "true %s " + validate, "validate_timeout": timeout,
            "_ansible_check_mode": True}
    rc, result = daemon(work, args)
    if rc == 0:
        assert not D.control_character(target)
        assert 1 <= result["invocation"]["module_args"]["validate_timeout"] <= 3600
    else:
        assert re.match(r"^(path|validate|validate_timeout) must be |^`true %s", result["msg"]) \
            or "validate_timeout" in result["msg"], result["msg"]
    assert sorted(os.listdir(str(work))) == ["tmp"]
    shutil.rmtree(str(work))


@pytest.mark.parametrize("kind", ["fifo", "dev-zero-link", "dev-null-link", "directory", "socket", "dangling-link"])
def test_property_special_files_never_block_and_never_read(workdir, kind):
    conf = workdir / "daemon.json"
    if kind == "fifo":
        os.mkfifo(str(conf))
    elif kind == "dev-zero-link":
        os.symlink("/dev/zero", str(conf))
    elif kind == "dev-null-link":
        os.symlink("/dev/null", str(conf))
    elif kind == "directory":
        conf.mkdir()
    elif kind == "dangling-link":
        os.symlink(str(workdir / "elsewhere.json"), str(conf))
    else:
        import socket
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(conf))
    for check_mode in (True, False):
        rc, result = daemon(workdir, {"path": str(conf), "settings": NVIDIA}, check_mode=check_mode, seconds=10)
        if kind == "dangling-link":
            # A link to a file not yet there: the target is created (and the link kept), as for a missing file.
            assert rc == 0
            assert os.path.islink(str(conf))
            continue
        assert rc == 1
        expected = {"fifo": "a named pipe (FIFO)", "dev-zero-link": "a character device",
                    "dev-null-link": "a character device", "directory": "a directory",
                    "socket": "a socket"}[kind]
        assert "is %s" % expected in result["msg"] and "nothing was changed" in result["msg"]
    if kind == "dangling-link":
        assert strict_json((workdir / "elsewhere.json").read_text()) == NVIDIA


def test_pure_nesting_depth_ignores_brackets_in_strings():
    assert D.nesting_depth('{"a": "[[[[[[", "b": [1, {"c": "]]]"}]}') == (3, 25)
    assert D.nesting_depth("[" * 100000)[0] == D.MAX_DEPTH + 1
    assert D.nesting_depth('"\\"[[["')[0] == 0


def test_pure_plan_refuses_nonsense_before_parsing():
    with pytest.raises(D.SettingsError, match=r"^indent must be a whole number of spaces from 0 to 8"):
        D.plan("{}", NVIDIA, indent=10 ** 8)
    with pytest.raises(D.SettingsError, match=r"^settings\.runtimes must be"):
        D.plan("{}", {"runtimes": "nvidia"})
    with pytest.raises(D.SettingsError, match=r"^settings must be a dictionary"):
        D.plan(None, "runtimes=nvidia")
    with pytest.raises(D.DaemonJsonError, match="the key \"a\" appears twice"):
        D.check_settings('{"a": 1, "a": 2}')


# ---------------------------------------------------------------------------------------------
# vllm_image_facts
# ---------------------------------------------------------------------------------------------

NOT_FOUND = (1, "[]", "Error response from daemon: No such image: x")


def fixture(name):
    with open(os.path.join(FIX, name)) as handle:
        return handle.read()


def warnings_of(result):
    """The warning texts (ansible-core 2.19 reports each as a structured summary)."""
    return [w if isinstance(w, str) else json.dumps(w, ensure_ascii=False) for w in result.get("warnings") or []]


class Docker(object):
    """A fake docker CLI for run_command: answers by subcommand, records every argv."""

    def __init__(self, inspect=NOT_FOUND, probe=(0, "", ""), gpu=(0, "", ""), registry=(0, "", "")):
        self.answers = {"inspect": inspect, "probe": probe, "gpu": gpu, "registry": registry}
        self.calls = []

    def __call__(self, argv, **kwargs):
        self.calls.append(list(argv))
        if argv[1:3] == ["image", "inspect"]:
            kind = "inspect"
        elif argv[1] == "run":
            kind = "gpu" if "--gpus" in argv else "probe"
        elif argv[1] == "buildx":
            kind = "registry"
        else:
            raise AssertionError("unexpected docker call %r" % argv)
        return self.answers[kind]


def facts(args, docker=None, seconds=20):
    docker = docker or Docker()
    with mock.patch.object(basic.AnsibleModule, "run_command", side_effect=docker), \
            mock.patch.object(basic.AnsibleModule, "get_bin_path", return_value="/usr/bin/docker"):
        rc, result, elapsed = call_module(vllm_image_facts, args, seconds)
    return rc, result, docker


def fake_docker(tmp_path, body):
    """An executable ``docker`` in tmp_path: a shell script whose case branches answer subcommands."""
    script = tmp_path / "docker"
    script.write_text("#!/bin/sh\necho \"$*\" >> %s\n%s\n" % (tmp_path / "calls.log", body))
    script.chmod(0o755)
    return str(script)


def calls(tmp_path):
    path = tmp_path / "calls.log"
    return path.read_text().splitlines() if path.exists() else []


# --- regression: a docker command that never answers ------------------------------------------

def test_docker_image_inspect_that_hangs_fails_within_the_timeout(tmp_path, bounded_timers):
    docker = fake_docker(tmp_path, "exec sleep 60")
    rc, result, elapsed = call_module(vllm_image_facts, {"image": "vllm/vllm-openai:v0.8.5", "docker_bin": docker,
                                                         "timeout": LIMIT})
    assert bounded_timers == [LIMIT, GRACE] and on_time(elapsed), (bounded_timers, elapsed)
    assert rc == 1
    assert result["msg"] == ("vllm_image_facts: `docker image inspect` (reading the image on this host) did not finish "
                             "within 1 s and was stopped; raise timeout (now 1 s) if the Docker daemon is just slow, "
                             "or check it with `systemctl status docker`.")
    assert result["cmd"] == [docker, "image", "inspect", "vllm/vllm-openai:v0.8.5"] and result["timeout"] == 1


def test_a_docker_that_ignores_sigterm_is_killed_after_the_grace(tmp_path, bounded_timers):
    docker = fake_docker(tmp_path, "trap '' TERM\nsleep 15 &\nwait $!\nsleep 15")
    rc, result, elapsed = call_module(vllm_image_facts, {"image": "vllm/vllm-openai:v0.8.5", "docker_bin": docker,
                                                         "timeout": LIMIT})
    assert rc == 1 and "did not finish within 1 s" in result["msg"]
    assert bounded_timers == [LIMIT, GRACE] == [LIMIT, KILL_GRACE]
    assert on_time(elapsed, grace=GRACE), elapsed


def test_a_probe_that_hangs_fails_naming_both_options_and_removes_its_container(tmp_path, bounded_timers):
    inspect = tmp_path / "inspect.json"
    inspect.write_text(fixture("inspect_vllm_v0.8.5.json"))
    docker = fake_docker(tmp_path, 'case "$1 $2" in\n"image inspect") cat %s;;\n"run --rm") exec sleep 60;;\n'
                                   '"rm -f") echo "$3";;\nesac' % inspect)
    rc, result, elapsed = call_module(vllm_image_facts, {"image": "vllm/vllm-openai:v0.8.5", "docker_bin": docker,
                                                         "timeout": LIMIT, "probe_timeout": LIMIT})
    # image inspect (timeout); the probe (timeout + 3 x probe_timeout), stopped; rm -f (CLEANUP_TIMEOUT).
    probe = LIMIT + 3 * LIMIT
    assert bounded_timers == [LIMIT, probe, GRACE, vllm_image_facts.CLEANUP_TIMEOUT], bounded_timers
    assert on_time(elapsed, probe), elapsed
    assert rc == 1
    assert result["msg"].startswith("vllm_image_facts: `docker run --rm` (the in-image probe of sha256:%s) did not "
                                    "finish within 4 s and was stopped; it may run timeout + 3 x probe_timeout (1 + 3 "
                                    "x 1 s): raise timeout or probe_timeout" % ("85" * 32))
    made = [line for line in calls(tmp_path) if line.startswith("run ")][0].split()
    name = made[made.index("--name") + 1]
    assert re.match(r"^labfleet-probe-[0-9a-f]{12}$", name)
    assert "rm -f %s" % name in calls(tmp_path)
    assert result["msg"].endswith("Its container %s was removed." % name)


def test_a_gpu_check_that_hangs_fails_within_the_timeout(tmp_path, bounded_timers):
    inspect = tmp_path / "inspect.json"
    inspect.write_text(fixture("inspect_vllm_v0.8.5.json"))
    docker = fake_docker(tmp_path, 'case "$1 $2" in\n"image inspect") cat %s;;\n"run --rm") exec sleep 60;;\n'
                                   '"rm -f") exit 1;;\nesac' % inspect)
    rc, result, elapsed = call_module(vllm_image_facts, {"image": "vllm/vllm-openai:v0.8.5", "docker_bin": docker,
                                                         "timeout": LIMIT, "probe": False, "gpu_check": True})
    assert bounded_timers == [LIMIT, LIMIT, GRACE, vllm_image_facts.CLEANUP_TIMEOUT], bounded_timers
    assert rc == 1 and on_time(elapsed), elapsed
    assert "`docker run --rm` (the GPU check in sha256:" in result["msg"]
    assert "raise timeout (now 1 s) if the image is just slow to start, or set gpu_check: false" in result["msg"]
    assert "may still exist: remove it with `docker rm -f labfleet-gpu-check-" in result["msg"]


def test_a_registry_read_that_hangs_fails_within_the_timeout(tmp_path, bounded_timers):
    docker = fake_docker(tmp_path, 'case "$1" in\nimage) echo "Error: No such image: x" >&2; exit 1;;\n'
                                   'buildx) exec sleep 60;;\nesac')
    rc, result, elapsed = call_module(vllm_image_facts, {"image": "registry.example.org/ml/vllm:1", "docker_bin": docker,
                                                         "timeout": LIMIT, "registry_config": True})
    assert bounded_timers == [LIMIT, LIMIT, GRACE], bounded_timers
    assert rc == 1 and on_time(elapsed), elapsed
    assert result["msg"].startswith("vllm_image_facts: `docker buildx imagetools` (the registry read of "
                                    "registry.example.org/ml/vllm:1) did not finish within 1 s")
    assert "or set registry_config: false" in result["msg"]


def test_a_fast_docker_is_not_affected_by_the_timer(tmp_path, bounded_timers):
    docker = fake_docker(tmp_path, 'echo "Error: No such image: x" >&2; exit 1')
    rc, result, elapsed = call_module(vllm_image_facts, {"image": "vllm/vllm-openai:v0.8.5", "docker_bin": docker,
                                                         "timeout": LIMIT})
    assert rc == 0 and result["image"]["state"] == "absent" and elapsed < 5 and bounded_timers == [LIMIT]
    time.sleep(1.2)  # the (cancelled) timer must not fire into anything afterwards


# --- regression: numbers and strings ------------------------------------------------------------

@pytest.mark.parametrize("option", ["timeout", "probe_timeout"])
@pytest.mark.parametrize("value,fragment", [
    (0, "got 0"), (-1, "got -1"), (3601, "got 3601"), (10 ** 40, "got a number of about 41 digits"),
    ("1e5000", "got an infinite or absurdly large value"),
    (float("inf"), "got an infinite or absurdly large value"), (float("-inf"), "got an infinite"),
])
def test_timeouts_are_bounded_and_named(option, value, fragment):
    rc, result, docker = facts({"image": "vllm/vllm-openai:v0.8.5", option: value})
    assert rc == 1
    assert result["msg"].startswith("%s must be a whole number of seconds from 1 to 3600, " % option)
    assert fragment in result["msg"] and docker.calls == []


@pytest.mark.parametrize("option", ["timeout", "probe_timeout"])
def test_nan_timeout_names_the_option(option):
    rc, result, docker = facts({"image": "vllm/vllm-openai:v0.8.5", option: float("nan")})
    assert rc == 1 and option in result["msg"] and docker.calls == []


@pytest.mark.parametrize("image,fragment", [
    ("vllm/vllm-openai:v0.8.5\n", "contains whitespace (\"\\n\" at position 23)"),
    ("vllm/vllm-openai:v0.8.5\r", "contains whitespace"),
    ("vllm/vllm-openai:v0.8.5\x00", "contains a control character (\"\\u0000\" at position 23)"),
    ("vllm/vllm-openai:v0.8.5\x1b[31m", "contains a control character (\"\\u001b\""),
    ("evil\x07.example/vllm:1", "contains a control character"),
    ("vllm/vllm-openai:v\uff10.8.5", "contains a non-ASCII character (\"\\uff10\" at position 18)"),
    ("r\u0661\u0662.example/vllm:1", "contains a non-ASCII character"),
    ("registry.example.org:99999/vllm:1", "invalid registry 'registry.example.org:99999'"),
    ("-bad.example/vllm:1", "invalid registry '-bad.example'"),
    ("a" * 2000, "more than any valid one (1024)"),
    ("x/" + "a" * 300 + ":1", "more than docker allows (255)"),
])
def test_bad_image_references_are_refused_naming_the_field(image, fragment):
    rc, result, docker = facts({"image": image})
    assert rc == 1 and result["msg"].startswith("image: ") and fragment in result["msg"], result["msg"]
    assert docker.calls == []


def test_registry_with_port_and_ipv6_still_parse():
    assert I.parse_reference("registry.example.org:5000/ml/vllm:1")["registry"] == "registry.example.org:5000"
    assert I.parse_reference("[2001:db8::1]:5000/ml/vllm:1")["registry"] == "[2001:db8::1]:5000"
    assert I.parse_reference("localhost/vllm:1")["name"] == "localhost/vllm"


def hostile_inspect(**env_and_fields):
    data = json.loads(fixture("inspect_vllm_v0.8.5.json"))
    image = data[0]
    env = dict(item.split("=", 1) for item in image["Config"]["Env"])
    for key, value in env_and_fields.items():
        if key.isupper():
            env[key] = value
        else:
            image[key] = value
    image["Config"]["Env"] = ["%s=%s" % item for item in env.items()]
    return json.dumps(data)


@pytest.mark.parametrize("cuda", [u"\uff11\uff12.4.0", u"1\u0662.4.0", "12.4.0\n", "12.4.0 garbage", "999999.1"])
def test_non_ascii_digits_in_cuda_version_are_ignored_with_a_warning(cuda):
    docker = Docker(inspect=(0, hostile_inspect(CUDA_VERSION=cuda), ""))
    rc, result, dummy = facts({"image": "vllm/vllm-openai:v0.8.5", "probe": False}, docker)
    image = result["image"]
    assert rc == 0
    assert image["sources"]["cuda_version"] == "profile" and image["cuda_version"] == "12.4.0"
    assert any("CUDA_VERSION" in w and "is not a version (expected ASCII digits separated by dots)" in w
               for w in warnings_of(result))


def test_non_ascii_digits_in_the_arch_list_are_dropped():
    assert I.normalise_arch_list(u"\u0667.\u0660 8.0 \uff19.\uff10") == ["8.0"]
    assert I.normalise_arch_list([u"sm_\u0667\u0660", "sm_80"]) == ["8.0"]
    docker = Docker(inspect=(0, hostile_inspect(TORCH_CUDA_ARCH_LIST=u"\u0667.\u0660 8.0"), ""))
    rc, result, dummy = facts({"image": "vllm/vllm-openai:v0.8.5", "probe": False}, docker)
    assert rc == 0 and result["image"]["sources"]["vllm_arch_list"] == "profile"
    assert any("TORCH_CUDA_ARCH_LIST holds characters other than printable ASCII" in w for w in warnings_of(result))


def test_an_image_id_that_is_not_a_digest_is_never_run():
    docker = Docker(inspect=(0, hostile_inspect(Id="--privileged"), ""), probe=(0, fixture("probe_vllm_v0.8.5.txt"), ""))
    rc, result, dummy = facts({"image": "vllm/vllm-openai:v0.8.5"}, docker)
    assert rc == 0 and result["image"]["id"] is None
    probe_argv = docker.calls[1]
    assert "--privileged" not in probe_argv and probe_argv[probe_argv.index("python3") + 1] == "vllm/vllm-openai:v0.8.5"


@pytest.mark.parametrize("text,fragment", [
    ('[{"Id": "sha256:%s", "Size": NaN}]' % ("85" * 32), "NaN is not JSON"),
    ('[{"Size": Infinity}]', "Infinity is not JSON"),
    ('[{"Size": 1e999}]', "beyond a 64-bit float"),
    ('[{"Size": %s}]' % ("9" * 5000), "beyond a 64-bit integer"),
    ("[" * 100000, "nested too deeply to read"),
])
def test_nan_huge_numbers_and_deep_nesting_from_docker_fail_clearly(text, fragment):
    rc, result, dummy = facts({"image": "vllm/vllm-openai:v0.8.5"}, Docker(inspect=(0, text, "")))
    assert rc == 1 and result["msg"].startswith("vllm_image_facts: docker image inspect printed ")
    assert fragment in result["msg"] and "by hand" in result["msg"]


def test_probe_versions_with_non_ascii_digits_are_ignored():
    probe = fixture("probe_vllm_v0.8.5.txt").replace('"vllm_version": "0.8.5"', u'"vllm_version": "0.\uff18.5"')
    docker = Docker(inspect=(0, fixture("inspect_vllm_v0.8.5.json"), ""), probe=(0, probe, ""))
    rc, result, dummy = facts({"image": "vllm/vllm-openai:v0.8.5"}, docker)
    image = result["image"]
    assert rc == 0 and image["vllm_version"] == "0.8.5" and image["sources"]["vllm_version"] == "profile"
    assert any("vllm_version" in w and "is not a version" in w for w in warnings_of(result))


# --- properties --------------------------------------------------------------------------------

@hsettings(max_examples=150, **HYPOTHESIS)
@given(image=st.one_of(hostile_text, st.text(), st.builds(lambda a, b: "vllm/vllm-openai:" + a + b,
                                                          st.text(max_size=3), hostile_text)))
def test_property_any_image_string_gives_a_result_or_names_the_field(image):
    rc, result, docker = facts({"image": image})
    if rc == 0:
        assert image and all(" " < ch < "\x7f" for ch in image)
        assert result["image"]["reference"] == image
        assert docker.calls[0][1:] == ["image", "inspect", image]
    else:
        assert result["msg"].startswith("image: ") and "expected" in result["msg"], result["msg"]
        assert docker.calls == []


@hsettings(max_examples=80, **HYPOTHESIS)
@given(timeout=st.one_of(hostile_numbers, hostile_text), probe_timeout=st.one_of(hostile_numbers, st.integers(0, 4000)))
def test_property_timeouts_are_bounded(timeout, probe_timeout):
    docker = Docker(inspect=(0, fixture("inspect_vllm_v0.8.5.json"), ""), probe=(0, fixture("probe_vllm_v0.8.5.txt"), ""))
    args = {"image": "vllm/vllm-openai:v0.8.5", "timeout": timeout, "probe_timeout": probe_timeout}
    rc, result, dummy = facts(args, docker)
    if rc == 0:
        used = result["invocation"]["module_args"]
        assert 1 <= used["timeout"] <= 3600 and 1 <= used["probe_timeout"] <= 3600
        assert docker.calls[1][-1] == str(used["probe_timeout"])
    else:
        assert "timeout" in result["msg"], result["msg"]
        assert docker.calls == []


env_value = st.one_of(hostile_text, st.sampled_from(["12.4.0", "cuda>=12.4", "7.0 8.0 9.0+PTX", ""]))


@hsettings(max_examples=120, **HYPOTHESIS)
@given(cuda=env_value, require=env_value, arch=env_value, size=st.one_of(hostile_numbers, hostile_text),
       labels=hostile_json, entrypoint=hostile_json, image_id=st.one_of(hostile_text, st.just("sha256:" + "85" * 32)))
def test_property_inspect_output_never_yields_nonsense(cuda, require, arch, size, labels, entrypoint, image_id):
    data = json.loads(hostile_inspect(CUDA_VERSION=cuda, NVIDIA_REQUIRE_CUDA=require, TORCH_CUDA_ARCH_LIST=arch,
                                      Id=image_id))
    data[0]["Size"] = size
    data[0]["Config"]["Labels"] = labels
    data[0]["Config"]["Entrypoint"] = entrypoint
    try:
        text = json.dumps(data, allow_nan=True)
    except ValueError:  # an int beyond Python's str() limit
        return
    try:
        parsed = I.parse_inspect(text, "vllm/vllm-openai:v0.8.5")
    except ValueError as exc:
        assert "docker image inspect printed" in str(exc)
        return
    assert parsed["cuda_version"] is None or re.match(r"^[0-9]{1,3}(\.[0-9]{1,4}){0,3}$", parsed["cuda_version"])
    for key in ("require_cuda", "env_arch_list"):
        assert parsed[key] is None or all(" " <= ch < "\x7f" for ch in parsed[key])
    assert parsed["size"] is None or (isinstance(parsed["size"], int) and 0 <= parsed["size"] <= I.INT_LIMIT)
    assert parsed["id"] is None or re.match(r"^sha256:[0-9a-f]{64}$", parsed["id"])
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in parsed["labels"].items())
    assert parsed["entrypoint"] is None or all(isinstance(e, str) for e in parsed["entrypoint"])
    merged = I.merge_image_facts("vllm/vllm-openai:v0.8.5", "present", inspect=parsed)
    for entry in merged["arch_list"] or []:
        assert re.match(r"^[0-9]{1,2}\.[0-9][af]?(\+PTX)?$", entry)
    json.dumps(merged, allow_nan=False)


@hsettings(max_examples=120, **HYPOTHESIS)
@given(fields=st.dictionaries(st.sampled_from(["vllm_version", "torch_version", "torch_cuda_version", "python_version",
                                               "torch_arch_list", "quantization_methods", "errors", "vllm_path",
                                               "probe_version"]), hostile_json, max_size=9),
       depth=st.integers(0, 3000))
def test_property_probe_output_never_yields_nonsense(fields, depth):
    try:
        payload = json.dumps(dict(fields, nested=nested(depth, 1)) if depth > 2000 else fields, allow_nan=True)
    except (ValueError, RecursionError):
        return
    try:
        data = I.parse_probe_output("noise\n%s%s\n" % (I.PROBE_MARKER, payload))
    except ValueError as exc:
        assert "LABFLEET_PROBE_JSON" in str(exc)
        return
    for key in ("vllm_version", "torch_version", "python_version"):
        assert data[key] is None or re.match(r"^[0-9][0-9A-Za-z.+_!-]*$", data[key])
    assert data["torch_cuda_version"] is None or re.match(r"^[0-9]{1,3}(\.[0-9]{1,4}){0,3}$", data["torch_cuda_version"])
    assert data["quantization_methods"] is None or all(re.match(r"^[A-Za-z0-9_.-]+$", m)
                                                       for m in data["quantization_methods"])
    for entry in data.get("torch_arch_list") or []:
        assert re.match(r"^[0-9]{1,2}\.[0-9][af]?(\+PTX)?$", entry)
    json.dumps(data, allow_nan=False)


@hsettings(max_examples=80, **HYPOTHESIS)
@given(devices=hostile_json, ok=hostile_json)
# Found by CI: a report with "ok": true beside a number beyond any bound is refused whole, so not ok.
@example(devices=10 ** 33, ok=True)
def test_property_gpu_check_report_keeps_only_plain_fields(devices, ok):
    try:
        line = json.dumps({"ok": ok, "devices": devices}, allow_nan=True)
    except ValueError:
        return
    out = "%s%s\n" % (I.PROBE_MARKER, line)
    verdict = I.classify_gpu_check(0, out, "")
    # A report that the strict JSON reading refuses (a number beyond any bound, NaN) is no report: not ok.
    try:
        I.extract_marked_json(out)
        readable = True
    except ValueError:
        readable = False
    assert verdict["ok"] is (ok is True and readable)
    for device in verdict["devices"]:
        assert set(device) <= {"index", "name", "capability", "result", "ok", "error"}
    json.dumps(verdict, allow_nan=False)


# ---------------------------------------------------------------------------------------------
# Issue 24: options nested hundreds or thousands of levels deep, in any of the older modules
# ---------------------------------------------------------------------------------------------

def nested_text(depth, kind):
    """JSON text of ``depth`` nested objects ({"k": ...}) or arrays, around one string."""
    if kind == "object":
        return '{"k": ' * depth + '"leaf"' + "}" * depth
    return "[" * depth + '"leaf"' + "]" * depth


# (module, the options' JSON with %s where the nested value goes, what the message must name,
#  the deepest nesting the module takes there, or None when it takes none at all).
DEEP_OPTION_CASES = {
    "docker_daemon_config settings": (docker_daemon_config, '"settings": {"x": %s}', "settings", D.MAX_DEPTH - 1),
    "docker_daemon_config remove value": (docker_daemon_config, '"remove": [{"keys": ["x"], "value": %s}]', "remove",
                                          D.MAX_DEPTH),
    "vllm_image_facts image": (vllm_image_facts, '"image": %s, "docker_bin": "/nonexistent/docker"', "image", None),
    "nvidia_driver_plan request": (nvidia_driver_plan, '"request": {"command": "check_key", "fingerprint": %s}',
                                   "request", None),
}


@hsettings(max_examples=40, **HYPOTHESIS)
@given(case=st.sampled_from(sorted(DEEP_OPTION_CASES)), depth=st.integers(1, 5000), kind=st.sampled_from(["object", "array"]))
@example(case="docker_daemon_config settings", depth=500, kind="object")
@example(case="docker_daemon_config settings", depth=3000, kind="object")
@example(case="docker_daemon_config remove value", depth=700, kind="array")
@example(case="nvidia_driver_plan request", depth=450, kind="object")
@example(case="vllm_image_facts image", depth=2000, kind="array")
def test_property_options_nested_at_any_depth_end_cleanly(tmp_path, case, depth, kind):
    """However deep an option nests, the module answers with a result or a clean failure naming the
    option and the bound, never a RecursionError (in its own code or in ansible-core's reading and
    echoing of the options)."""
    module, template, field, deepest = DEEP_OPTION_CASES[case]
    work = fresh_dir(tmp_path)
    conf = work / "daemon.json"
    options = '"path": %s, "_ansible_tmpdir": %s, ' % (json.dumps(str(conf)), json.dumps(str(work))) \
        if module is docker_daemon_config else ""
    text = '{"ANSIBLE_MODULE_ARGS": {%s%s}}' % (options, template % nested_text(depth, kind))
    rc, result, elapsed = call_module(module, text, 60)
    if deepest is not None and depth <= deepest:
        assert rc == 0 and result["changed"] == (field == "settings"), result.get("msg")
        return
    if module is nvidia_driver_plan and rc == 0:
        assert depth <= 64 and "expected a full key fingerprint" in result["answer"]["error"]
        return
    assert rc == 1 and result["failed"] is True, result
    assert field in result["msg"], result["msg"]
    if module is vllm_image_facts:  # ansible-core hands a dict given as a string option over as its text
        assert result["msg"].startswith(("image: ", "vllm_image_facts: an option nests")), result["msg"]
    else:
        assert "levels deep" in result["msg"], result["msg"]
    assert not conf.exists()


# ---------------------------------------------------------------------------------------------
# Issue 24: a docker CLI that hangs, whichever command it is and however it hangs
# ---------------------------------------------------------------------------------------------

# How the fake docker hangs. The children of the last two keep printing: a command whose own process
# is stopped (or ended at once) but whose children still hold its output open must be stopped too.
HANG_WAYS = {
    "sleeps": "exec sleep 60",
    "waits for a child": "sleep 60",
    "leaves a child printing": "(echo $$ > %(pid)s; while :; do echo x; sleep 0.2; done) &\nwait",
    "ends at once, leaving a child printing": "(echo $$ > %(pid)s; while :; do echo x; sleep 0.2; done) &\nexit 0",
}
# Which command hangs: the case pattern of the fake docker, the options that make the module run it,
# the command its message names, and how long it may run (LIMIT each, the probe LIMIT + 3 x LIMIT).
HANGING_COMMANDS = {
    "image inspect": ('"image inspect"', {}, "`docker image inspect`", LIMIT),
    "probe": ('"run --rm"', {"probe": True}, "`docker run --rm` (the in-image probe", 4 * LIMIT),
    "GPU check": ('"run --rm"', {"probe": False, "gpu_check": True}, "`docker run --rm` (the GPU check", LIMIT),
    "registry read": ('"buildx imagetools"', {"registry_config": True}, "`docker buildx imagetools`", LIMIT),
    "container removal": ('"rm -f"', {"probe": True}, "`docker run --rm` (the in-image probe", 4 * LIMIT + LIMIT),
    "every command": ("*", {"probe": True, "registry_config": True}, "`docker image inspect`", LIMIT),
}


def hanging_docker(work, which, how):
    """A docker whose ``which`` command hangs ``how``; the others answer at once: image inspect with the
    fixture when the command that hangs needs the image (else "No such image"), run by hanging too when
    the container removal is the one that hangs (else at once), rm -f at once."""
    pattern = HANGING_COMMANDS[which][0]
    hang = HANG_WAYS[how] % {"pid": work / "child.pid"}
    inspect = work / "inspect.json"
    inspect.write_text(fixture("inspect_vllm_v0.8.5.json"))
    present = "cat %s" % inspect if which in ("probe", "GPU check", "container removal") else \
        'echo "Error: No such image: x" >&2; exit 1'
    run = "exec sleep 60" if which == "container removal" else 'echo "{}"'
    branches = ['%s) %s;;' % (pattern, hang), '"image inspect") %s;;' % present, '"run --rm") %s;;' % run,
                '"rm -f") echo "$3";;', '"buildx imagetools") echo "{}";;']
    return fake_docker(work, 'case "$1 $2" in\n%s\nesac' % "\n".join(branches))


def gone(pid_file, seconds=3):
    """Whether the child whose pid is in ``pid_file`` (if any was started) has ended within ``seconds``."""
    if not pid_file.exists():
        return True
    pid = int(pid_file.read_text().split()[0])
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    return False


@hsettings(max_examples=12, **HYPOTHESIS)
@given(which=st.sampled_from(sorted(HANGING_COMMANDS)), how=st.sampled_from(sorted(HANG_WAYS)))
@example(which="image inspect", how="leaves a child printing")
@example(which="every command", how="ends at once, leaving a child printing")
@example(which="container removal", how="waits for a child")
def test_property_a_docker_that_hangs_is_stopped_within_its_timeout(tmp_path, monkeypatch, which, how):
    """Whichever docker command hangs, and however, the task fails within that command's limit (and the
    container removal's) naming the command and the option to raise; no child of it is left running."""
    monkeypatch.setattr(vllm_image_facts, "CLEANUP_TIMEOUT", LIMIT)
    work = fresh_dir(tmp_path)
    dummy, options, named, limit = HANGING_COMMANDS[which]
    args = dict({"image": "vllm/vllm-openai:v0.8.5", "docker_bin": hanging_docker(work, which, how), "timeout": LIMIT,
                 "probe_timeout": LIMIT, "probe": False}, **options)
    rc, result, elapsed = call_module(vllm_image_facts, args, 30)
    assert rc == 1, result
    assert result["msg"].startswith("vllm_image_facts: %s" % named), result["msg"]
    assert "did not finish within %d s and was stopped" % (4 * LIMIT if "probe" in named else LIMIT) in result["msg"]
    assert "raise timeout" in result["msg"]
    assert elapsed < limit + 2.5, elapsed
    assert gone(work / "child.pid")
