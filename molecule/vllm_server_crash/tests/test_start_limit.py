"""F9's bound (docs/testing.md, fault table): a server that keeps crashing is not restarted forever.

test_crash.py shows that systemd brings the server back after a crash. Here the crash repeats: the
container is killed (docker kill, exit 137) each time systemd has brought it back, until the unit's
start limit (StartLimitBurst starts within StartLimitIntervalSec, read from the unit systemd loaded)
is spent. systemd must then stop trying, exactly at the bound: the unit failed ("Start request
repeated too quickly"; systemd 252 keeps the last crash's result, exit-code, as the unit's Result)
after StartLimitBurst starts, no container of it left running, and the second
instance (vllm-b) untouched and answering. ``systemctl reset-failed`` then lets the admin start it
again, and it answers (so that ``molecule verify`` can run again).

The counter is flushed first (reset-failed), so that the starts of earlier tests do not count: the
test needs to know how many starts remain, not to avoid the bound.
"""

import time

import pytest

testinfra_hosts = ["vllm_hosts"]

UNIT = "vllm.service"
CONTAINER = "vllm"


def _running_container(host):
    """The Id of the running container named vllm, or ''."""
    return host.check_output("docker ps --quiet --no-trunc --filter %s", "name=^%s$" % CONTAINER)


@pytest.fixture(scope="module")
def exhausted(host, serve_again, wait_for, unit_property):
    """Kill the container each time it is back until systemd gives up; yields what was seen. Starts the
    unit again afterwards, whatever happened."""
    burst = int(unit_property("StartLimitBurst"))
    assert burst >= 1, burst
    second_before = host.check_output("docker inspect --format %s vllm-b", "{{.Id}}")
    host.check_output("systemctl reset-failed %s", UNIT)
    since = host.check_output("date +%s")
    kills, seen = 0, []
    try:
        # The running server's start was before the reset: each kill now costs one start, and the kill
        # after the burst-th start finds the limit spent.
        for _attempt in range(burst + 2):
            container = wait_for("a running %s container" % CONTAINER, lambda: _running_container(host))
            assert container not in seen, "systemd did not start a new container after the kill"
            seen.append(container)
            host.check_output("docker kill %s", container)
            kills += 1
            # Wait until systemd has either started the unit again or given up on it.
            wait_for("%s restarted or given up after kill %d" % (UNIT, kills),
                     lambda: (unit_property("ActiveState") == "failed"
                     or (_running_container(host) not in ("", container))))
            if unit_property("ActiveState") == "failed":
                break
        # Wait three RestartSec (2 s in this scenario): a unit that gave up must not come back by itself.
        time.sleep(6)
        state = {"active": unit_property("ActiveState"), "result": unit_property("Result"), "since": since,
                 "restarts": int(unit_property("NRestarts")), "container": _running_container(host),
                 "burst": burst, "kills": kills, "second_before": second_before}
        yield state
    finally:
        serve_again()


def test_systemd_gives_up_exactly_at_the_start_limit(exhausted):
    """StartLimitBurst starts, then no more: the unit is failed, and stays so."""
    assert exhausted["active"] == "failed", exhausted
    # One kill per start the limit allows, and one more that found it spent; systemd counts the refused
    # restart too.
    assert exhausted["kills"] == exhausted["burst"] + 1, exhausted
    assert exhausted["restarts"] == exhausted["burst"] + 1, exhausted
    assert exhausted["container"] == "", "a %s container runs after the unit gave up: %s" % (CONTAINER, exhausted)


def test_the_journal_says_why_it_stopped(host, exhausted):
    """systemd's own words for the bound, which the admin reads in `systemctl status`: once, at the end."""
    text = host.check_output("journalctl --no-pager --output cat --unit %s --since %s", UNIT, "@" + exhausted["since"])
    assert text.count("Start request repeated too quickly") == 1, text[-2000:]
    assert text.count("Main process exited, code=exited, status=137") == exhausted["kills"], text[-3000:]


def test_the_unit_carries_the_roles_bound(unit_property):
    """The bound systemd applied is the role's (vllm_server_start_limit_burst, _interval_sec: 5 in 600 s)."""
    assert unit_property("StartLimitBurst") == "5"
    assert unit_property("StartLimitIntervalUSec") == "10min"


def test_only_this_server_was_bounded(host, exhausted):
    """vllm-b kept its container through the crash loop and still runs."""
    assert host.service("vllm-b.service").is_running
    assert host.check_output("docker inspect --format %s vllm-b", "{{.Id}}") == exhausted["second_before"]
