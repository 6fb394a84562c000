"""Fixtures shared by the tests of the plugins: timers that fire when a test says so, the deadlines
_openai's requests get, and a bound on openai_smoke's health wait."""

import threading
import time

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.clients import _openai
from ansible_collections.labfleet.vllm.plugins.modules import openai_smoke

# Seconds of real time after which openai_smoke's health wait fails the test instead of sleeping on
# (the wait of every test ends within a few seconds, or never when its timeout is gone).
HEALTH_WAIT_GUARD_S = 30


class ManualTimer:
    """threading.Timer's interface; runs its function only when the test calls fire()."""

    def __init__(self, interval, function, args=None):
        self.interval = interval
        self.function = function
        self.args = list(args or ())
        self.daemon = False
        self.started = False
        self.cancelled = False

    def start(self):
        self.started = True

    def cancel(self):
        self.cancelled = True

    def fire(self):
        self.function(*self.args)


@pytest.fixture()
def manual_timers():
    """A threading.Timer stand-in for code that takes its timer as a parameter: the timers it made
    are in its ``made`` list, and each runs its function only when the test calls its fire()."""
    made = []

    def timer(interval, function, args=None):
        made.append(ManualTimer(interval, function, args))
        return made[-1]

    timer.made = made
    return timer


def record_watchdogs(monkeypatch, fire=True):
    """Replace the timer of _openai's request watchdog by one that records the seconds it is started
    with and, with ``fire`` False, never fires (only the socket's own timeout can then end a read).
    Returns the list of those seconds, one per request that got as far as starting its watchdog."""
    started = []

    class Timer(threading.Timer):
        def start(self):
            started.append(self.interval)
            if fire:
                threading.Timer.start(self)

    real = _openai._Watchdog

    class Watchdog(real):
        def __init__(self, seconds, clock=time.monotonic, timer=Timer):
            real.__init__(self, seconds, clock, timer)

    monkeypatch.setattr(_openai, "_Watchdog", Watchdog)
    return started


@pytest.fixture()
def armed(monkeypatch):
    """The seconds each request's watchdog is started with (the real timer, recorded)."""
    return record_watchdogs(monkeypatch)


@pytest.fixture()
def armed_held(monkeypatch):
    """As ``armed``, with timers that never fire: only the socket's own timeout ends a read."""
    return record_watchdogs(monkeypatch, fire=False)


@pytest.fixture()
def health_wait_guard(monkeypatch):
    """openai_smoke's sleep between health checks (SLEEP), failing the test once it has run for
    HEALTH_WAIT_GUARD_S: a health wait that lost its timeout fails instead of hanging the suite."""
    began = time.monotonic()

    def sleep(seconds):
        assert time.monotonic() - began < HEALTH_WAIT_GUARD_S, "the health wait is still going on"
        time.sleep(seconds)

    monkeypatch.setattr(openai_smoke, "SLEEP", sleep)
