# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release.
#
# Bounds the modules share: an external command stopped after a time limit (with every process
# still holding its output), and the option values that break ansible-core's own handling before a
# module sees them (absurd numbers, options nested hundreds of levels deep).

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import decimal
import json
import math
import os
import signal
import sys
import threading

# Seconds between SIGTERM and SIGKILL for a command past its limit.
KILL_GRACE = 5


def output_holders(process):
    """Pids of the processes, other than this one, that hold ``process``'s stdout or stderr pipe open:
    the command and whatever it started, even children it left behind when it ended. While any of them
    lives, run_command keeps reading, so a command is stopped by stopping all of them. Read from
    /proc/<pid>/fd (Linux); [] where that cannot be read."""
    pipes = set()
    for stream in (getattr(process, "stdout", None), getattr(process, "stderr", None)):
        try:
            pipes.add("pipe:[%d]" % os.fstat(stream.fileno()).st_ino)
        except (AttributeError, OSError, ValueError):
            pass
    if not pipes:
        return []
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []
    holders = []
    for pid in pids:
        if pid != os.getpid() and _holds(pid, pipes):
            holders.append(pid)
    return holders


def _holds(pid, pipes):
    try:
        fds = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink("/proc/%d/fd/%s" % (pid, fd)) in pipes:
                return True
        except OSError:
            pass
    return False


def _stop(process, holders, kill):
    """SIGTERM (or SIGKILL) to the command and to every other process holding its output."""
    try:
        if kill:
            process.kill()
        else:
            process.terminate()
    except OSError:
        pass
    for pid in holders:
        if pid != getattr(process, "pid", None):
            try:
                os.kill(pid, signal.SIGKILL if kill else signal.SIGTERM)
            except OSError:
                pass


def run_bounded(module, command, limit, timer=threading.Timer, data=None):
    """``module.run_command(command)`` stopped after ``limit`` seconds: (rc, out, err, timed_out).

    A timer sends SIGTERM when the limit passes (``docker run`` passes it on to the container,
    --sig-proxy defaults to true: docker/cli docs/reference/commandline/container_run.md:100) and
    SIGKILL KILL_GRACE seconds later, to the command and to every process still holding its output
    (output_holders: children it started, even ones it left running when it ended); run_command
    returns once they are gone and the pipes are quiet. A command that ended within its limit while
    something it started still holds its output counts as timed out too. ``timer`` makes the timers
    (threading.Timer's signature; unit tests pass one that records the seconds and fires when told).
    ``data``, when given, is written to the command's stdin (run_command's ``data``).
    """
    timers = []
    expired = []

    def arm(process):
        def expire():
            holders = output_holders(process)
            if process.poll() is not None and not holders:  # it ended just in time
                return
            expired.append(True)
            _stop(process, holders, False)
            later = timer(KILL_GRACE, lambda: _stop(process, output_holders(process), True))
            later.daemon = True
            timers.append(later)
            later.start()
        first = timer(limit, expire)
        first.daemon = True
        timers.append(first)
        first.start()

    try:
        extra = {} if data is None else {"data": data}
        rc, out, err = module.run_command(command, before_communicate_callback=arm, **extra)
    finally:
        for timer in list(timers):
            timer.cancel()
    return rc, out, err, bool(expired)


def absurd_number(value):
    """Whether a raw option value is what breaks ansible-core's own int handling: an infinite
    float, or a number (or numeric text) beyond any sane bound."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, int):
        return abs(value) >= 10 ** 30
    try:
        number = decimal.Decimal(value.strip())
    except (AttributeError, ArithmeticError, ValueError):
        return False
    return not number.is_finite() or abs(number) >= 10 ** 30


# How deep any option may nest lists/dictionaries: far above what a module takes (daemon.json's keys
# nest at most 5 levels, docker_daemon_config's bound is 32), far below what ansible-core itself
# survives when it echoes the options back under "invocation" (a few hundred levels, fewer when the
# stack is already deep: its JSON encoder recurses in Python).
OPTION_DEPTH_MAX = 64


def deep_option(params, limit=OPTION_DEPTH_MAX):
    """The label (``settings.a[0].b``) of the first option value that nests lists/dictionaries more
    than ``limit`` levels deep, else None. Iterative: it never recurses, however deep the value."""
    stack = [(str(name), value, 0) for name, value in params.items()]
    while stack:
        label, value, depth = stack.pop()
        if isinstance(value, dict):
            items = [(".%s" % key, item) for key, item in value.items()]
        elif isinstance(value, (list, tuple)):
            items = [("[%d]" % index, item) for index, item in enumerate(value)]
        else:
            continue
        if depth >= limit:
            return label if len(label) <= 100 else "%s...%s" % (label[:60], label[-30:])
        stack.extend((label + step, item, depth + 1) for step, item in items)
    return None


def _from_recursion(exc):
    """Whether ``exc`` is a RecursionError or was raised because of one (ansible-core wraps its JSON
    decoder's in "Failed to decode JSON module parameters.")."""
    for dummy in range(10):
        if exc is None:
            return False
        if isinstance(exc, RecursionError):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def module_within_depth(build, name, hint, limit=OPTION_DEPTH_MAX):
    """``build()`` (the module's AnsibleModule), failing cleanly, with ``hint`` (what the options may
    hold and what to do), when an option nests more than ``limit`` levels deep: named when ansible-core
    could read the options (the echo of that option under "invocation" is left out), in general when
    it could not (its decoder, and its deepcopy of the options, run out of recursion a few hundred
    levels down; there is no AnsibleModule then, so the failure is written as fail_json writes one)."""
    try:
        module = build()
    except Exception as exc:  # pylint: disable=broad-except
        if not _from_recursion(exc):
            raise
        module = None
    if module is None:
        sys.stdout.write(json.dumps({"failed": True, "changed": False, "msg": (
            "%s: an option nests lists/dictionaries hundreds of levels deep or more, too deep for Ansible to read "
            "the task's options; %s" % (name, hint))}) + "\n")
        sys.stdout.flush()
        # No AnsibleModule could be built, so there is no fail_json to call: the JSON above is what it writes.
        sys.exit(1)  # pylint: disable=ansible-bad-function
    where = deep_option(module.params, limit)
    if where:
        echo = dict((key, value if deep_option({key: value}, limit) is None else
                     "(not echoed: nests more than %d levels deep)" % limit) for key, value in module.params.items())
        module.fail_json(msg="%s: %s nests lists/dictionaries more than %d levels deep; %s" % (name, where, limit, hint),
                         changed=False, invocation={"module_args": echo})
    return module
