# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release.
#
# Bounds the modules share: an external command stopped after a time limit, and the option
# values that break ansible-core's own number handling before a module sees them.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import decimal
import math
import threading

# Seconds between SIGTERM and SIGKILL for a command past its limit.
KILL_GRACE = 5


def run_bounded(module, command, limit, timer=threading.Timer):
    """``module.run_command(command)`` stopped after ``limit`` seconds: (rc, out, err, timed_out).

    A timer sends SIGTERM when the limit passes (``docker run`` passes it on to the container,
    --sig-proxy defaults to true: docker/cli docs/reference/commandline/container_run.md:100) and
    SIGKILL KILL_GRACE seconds later; run_command returns once the process is gone and its pipes
    are quiet. ``timer`` makes the timers (threading.Timer's signature; unit tests pass one that
    records the seconds and fires when told).
    """
    timers = []
    expired = []

    def signal_process(process, kill):
        try:
            if kill:
                process.kill()
            else:
                process.terminate()
        except OSError:
            pass

    def arm(process):
        def expire():
            if process.poll() is not None:  # it ended just in time
                return
            expired.append(True)
            signal_process(process, False)
            later = timer(KILL_GRACE, signal_process, (process, True))
            later.daemon = True
            timers.append(later)
            later.start()
        first = timer(limit, expire)
        first.daemon = True
        timers.append(first)
        first.start()

    try:
        rc, out, err = module.run_command(command, before_communicate_callback=arm)
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
