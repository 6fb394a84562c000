"""container_runtime_bookworm: what only this scenario has (udev mitigation, restart coordination).

The shared checks (daemon.json, Docker, the held toolkit, the nvidia runtime) are in
../container_runtime_shared/tests/test_container_runtime.py. Here: the udev rule that makes the
/dev/char links and the links it made, no CDI spec, Docker active and enabled, and the coordination of
Docker restarts with a vLLM rollout (a hold defers a restart, the release applies it, a stale hold is
ignored). The restart entry points are the collection's own role, so they run through Ansible
(restart.yml, with run_playbook); the hold is set up and Docker's start time read here.
"""

import os
import re

testinfra_hosts = ["vllm_hosts"]

UDEV_RULE = "/etc/udev/rules.d/71-nvidia-dev-char.rules"
UDEV_LINE = 'ACTION=="add", DEVPATH=="/bus/pci/drivers/nvidia", RUN+="/usr/bin/nvidia-ctk system create-dev-char-symlinks --create-all"'
HOLD = "/run/labfleet/docker-restart.hold"
PENDING = "/run/labfleet/docker-restart.pending"
RESTART_PLAYBOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "restart.yml")


def test_udev_rule_is_nvidias_with_the_managed_header(host):
    """The udev mitigation's rule: the managed header and NVIDIA's documented line, as a whole line."""
    rule = host.file(UDEV_RULE).content_string
    assert re.search(r"(?m)^# Ansible managed", rule), rule
    assert re.search(r"(?m)^%s$" % re.escape(UDEV_LINE), rule), rule


def test_device_nodes_got_their_char_links(host):
    """/dev/char/195:0 and 195:255 are links to the device nodes prepare made (nvidia0, nvidiactl)."""
    found = {}
    for link in ("195:0", "195:255"):
        path = "/dev/char/%s" % link
        found[link] = host.check_output("readlink %s", path) if host.file(path).is_symlink else None
    assert found == {"195:0": "../nvidia0", "195:255": "../nvidiactl"}, found


def test_no_cdi_spec_without_the_cdi_mitigation(host):
    """The udev mitigation writes no CDI spec."""
    assert not host.file("/etc/cdi/nvidia.yaml").exists


def _docker_started(host):
    """Docker's start time (monotonic microseconds): it grows with every restart."""
    value = host.check_output("systemctl show docker --property=ExecMainStartTimestampMonotonic --value")
    assert value.isdigit() and int(value) > 0, "Docker's start time: %r" % value
    return int(value)


def _run_entry_point(host, run_playbook, entry_point):
    run = run_playbook(RESTART_PLAYBOOK, extra_vars={"labfleet_test_entry_point": entry_point})
    assert run.returncode == 0, "%s failed:\n%s\n%s" % (entry_point, run.stdout[-6000:], run.stderr[-3000:])
    assert host.backend.get_hostname() in run.results("Run the entry point"), run.task_names()
    return run


def _reset_start_limit(host):
    # docker.service allows 3 starts a minute (StartLimitBurst); this test restarts it more often.
    host.check_output("systemctl reset-failed docker.service")


def test_restart_is_deferred_while_a_rollout_holds_it(host, run_playbook):
    """A hold defers the restart (pending record), the release applies it, a stale hold is ignored."""
    assert not host.file(PENDING).exists, "a pending restart is recorded before the test: %s" % host.file(PENDING).content_string
    try:
        # A rollout holds restarts; the handler asks for one.
        start_0 = _docker_started(host)
        host.check_output("install -d -m 0755 /run/labfleet && printf 'rollout in progress\\n' > %s && chmod 0644 %s", HOLD, HOLD)
        _run_entry_point(host, run_playbook, "restart_docker")
        start_1 = _docker_started(host)
        assert start_1 == start_0, "Docker restarted although a rollout held restarts"
        assert host.file(PENDING).exists, "the deferred restart was not recorded in %s" % PENDING

        # The rollout releases the hold and applies the pending restart.
        host.check_output("rm -f %s", HOLD)
        _reset_start_limit(host)
        _run_entry_point(host, run_playbook, "apply_pending_restart")
        start_2 = _docker_started(host)
        assert start_2 > start_1, "the pending restart was not done after the release"
        assert not host.file(PENDING).exists, "the pending-restart record is still there after the restart"

        # A hold three hours old (an interrupted rollout) does not block a restart; the role says so.
        host.check_output("touch -d @$(( $(date +%%s) - 10800 )) %s && chmod 0644 %s", HOLD, HOLD)
        _reset_start_limit(host)
        run = _run_entry_point(host, run_playbook, "restart_docker")
        start_3 = _docker_started(host)
        assert start_3 > start_2, "a stale hold blocked the restart"
        warning = run.results("labfleet.vllm.container_runtime : Warn about a stale hold")[host.backend.get_hostname()]
        assert not warning.get("skipped") and "older than" in warning.get("msg", ""), warning
    finally:
        host.run("rm -f %s", HOLD)


def test_docker_active_and_enabled(host):
    """Docker runs and starts at boot (after the restarts above too)."""
    docker = host.service("docker")
    assert docker.is_running
    assert docker.is_enabled
