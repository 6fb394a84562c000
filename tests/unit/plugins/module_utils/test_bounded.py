"""plugins/module_utils/clients/_bounded.py: run_bounded's timers, driven by hand (no process, no waiting)."""

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.clients import _bounded


class FakeProcess:
    """What run_command hands to before_communicate_callback: poll(), terminate(), kill()."""

    def __init__(self, gone_on=None):
        self.signals = []
        self.returncode = None
        self.gone_on = gone_on or ()

    def poll(self):
        return self.returncode

    def signal(self, name):
        if name in self.gone_on:
            raise OSError(3, "No such process")
        self.signals.append(name)

    def terminate(self):
        self.signal("TERM")

    def kill(self):
        self.signal("KILL")


class FakeModule:
    """run_command: arms the callback with ``process``, then runs ``meanwhile`` (the time the command
    takes: the test fires the timers there) and answers ``answer``."""

    def __init__(self, process, meanwhile, answer=(0, "out", "err")):
        self.process = process
        self.meanwhile = meanwhile
        self.answer = answer
        self.commands = []

    def run_command(self, command, before_communicate_callback=None):
        self.commands.append(command)
        before_communicate_callback(self.process)
        self.meanwhile()
        return self.answer


def test_a_command_past_its_limit_gets_sigterm_then_sigkill_after_the_grace(manual_timers):
    process = FakeProcess()

    def meanwhile():
        limit, = manual_timers.made
        assert (limit.interval, limit.started, limit.daemon) == (7, True, True)
        assert process.signals == []
        limit.fire()                                      # 7 s passed
        assert process.signals == ["TERM"]
        grace = manual_timers.made[1]
        assert (grace.interval, grace.started, grace.daemon) == (5, True, True)
        grace.fire()                                      # 5 s more
        assert process.signals == ["TERM", "KILL"]
        process.returncode = -9

    module = FakeModule(process, meanwhile, (-9, "", ""))
    assert _bounded.run_bounded(module, ["docker", "run"], 7, manual_timers) == (-9, "", "", True)
    assert module.commands == [["docker", "run"]]
    assert _bounded.KILL_GRACE == 5                       # as the modules document: SIGKILL 5 seconds later
    assert all(timer.cancelled for timer in manual_timers.made)


def test_a_command_that_ends_within_its_limit_is_left_alone(manual_timers):
    process = FakeProcess()
    module = FakeModule(process, lambda: None)
    assert _bounded.run_bounded(module, ["true"], 30, manual_timers) == (0, "out", "err", False)
    assert [t.interval for t in manual_timers.made] == [30] and manual_timers.made[0].cancelled
    assert process.signals == []


def test_a_command_that_ended_just_as_its_limit_passed_is_not_signalled(manual_timers):
    process = FakeProcess()

    def meanwhile():
        process.returncode = 0
        manual_timers.made[0].fire()

    assert _bounded.run_bounded(FakeModule(process, meanwhile), ["true"], 1, manual_timers) == (0, "out", "err", False)
    assert process.signals == [] and len(manual_timers.made) == 1


@pytest.mark.parametrize("gone_on", [("TERM",), ("KILL",)])
def test_a_process_gone_before_its_signal_is_no_error(manual_timers, gone_on):
    process = FakeProcess(gone_on)

    def meanwhile():
        manual_timers.made[0].fire()
        manual_timers.made[1].fire()

    assert _bounded.run_bounded(FakeModule(process, meanwhile), ["x"], 1, manual_timers)[3] is True
    assert process.signals == [name for name in ("TERM", "KILL") if name not in gone_on]
