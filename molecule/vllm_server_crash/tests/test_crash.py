"""vllm_server_crash: systemd brings the server back after each kind of crash, and only this server.

The tests run in file order and change the instance in that order, like the crashes they stand for:
the container is killed (SIGKILL, exit 137), then the server exits 0 by itself (vLLM does on some
fatal errors), then the unit is stopped and a stale container named vllm is left behind. After each,
systemd (Restart=always, ExecStartPre removing a stale container) must bring the same image back and
the server must answer again; ``systemctl stop`` must leave no container. The second instance
(vllm-b: port 8001, GPU 1, TP 1) must keep its container and answer throughout, and its unit must
carry its own GPU, port, device order and tensor parallelism.

Each test leaves the server running (the third starts the unit again even when a check of it fails),
so ``molecule verify`` can run again on the same instance.
"""

import time

import pytest

testinfra_hosts = ["vllm_hosts"]

UNIT = "vllm.service"
CONTAINER = "vllm"
# The first instance's port and served model name (molecule.yml), then the second's.
PORT, MODEL = 8000, "quasar"
PORT_B, MODEL_B = 8001, "quasar-b"


def _redact(text, canaries):
    """Text for an assertion message, each secret canary replaced (a journal or a unit could hold one)."""
    for canary in canaries:
        text = text.replace(canary, "<secret>")
    return text


def _container(host, name=CONTAINER):
    """(Id, Image) of the container of that name."""
    ident, image = host.check_output("docker inspect --format %s %s", "{{.Id}} {{.Image}}", name).split()
    return ident, image


@pytest.fixture(scope="module")
def url(default_address):
    """Base URL of the first instance."""
    return "http://%s:%d" % (default_address, PORT)


@pytest.fixture(scope="module")
def serving(host):
    """The first instance's container when the tests start: (Id, Image); the unit must be running."""
    assert host.service(UNIT).is_running, "%s is not running before the crashes" % UNIT
    # The unit allows 5 starts in 600 s (StartLimitBurst, StartLimitIntervalSec) and these tests cause 3
    # (2 restarts, 1 start): flush the counter, so that the converge's and an earlier verify's starts do
    # not count against this run (reset-failed also sets NRestarts back to 0; each test reads it first).
    host.check_output("systemctl reset-failed %s", UNIT)
    return _container(host)


@pytest.fixture(scope="module")
def second_before(host):
    """The second instance's container Id when the tests start."""
    assert host.service("vllm-b.service").is_running, "vllm-b.service is not running before the crashes"
    return _container(host, "vllm-b")[0]


def test_killed_container_comes_back_with_the_same_image(host, smoke, unit_property, url, serving, second_before,
                                                         wait_for):
    """docker kill (SIGKILL, exit 137): systemd restarts the unit, a new container of the same image answers."""
    before_id, image = serving
    assert second_before  # read now, before any crash; compared in the last test
    restarts = int(unit_property("NRestarts"))
    host.check_output("docker kill %s", CONTAINER)
    wait_for("%s restarted after docker kill (NRestarts above %d)" % (UNIT, restarts),
             lambda: int(unit_property("NRestarts")) > restarts)
    smoke(url, MODEL, unit=UNIT, container=CONTAINER, health_timeout=60)
    after_id, after_image = _container(host)
    assert after_id != before_id, "the killed container %s still runs" % before_id
    assert after_image == image, "the unit came back with image %s instead of %s" % (after_image, image)


def test_clean_exit_is_restarted_too(host, smoke, unit_property, url, secret_canaries, wait_for):
    """The server exits 0 (its SIGTERM handler): Restart=always restarts it all the same, and it answers."""
    restarts = int(unit_property("NRestarts"))
    since = host.check_output("date +%s")
    host.check_output("docker exec %s python3 -c %s", CONTAINER, "import os, signal; os.kill(1, signal.SIGTERM)")
    wait_for("%s restarted although the server exited 0 (NRestarts above %d)" % (UNIT, restarts),
             lambda: int(unit_property("NRestarts")) > restarts)

    # The exit was a clean one: the server logged its own shutdown (only this run's journal is read).
    # Canaries replaced before the assertion: pytest shows the compared text when it fails.
    def journal():
        text = host.check_output("journalctl --unit %s --no-pager --output cat --since %s", UNIT, "@" + since)
        return _redact(text, secret_canaries)

    text = journal()
    if "received signal 15, shutting down" not in text:
        time.sleep(3)  # journald may still be writing the unit's last lines
        text = journal()
    assert "received signal 15, shutting down" in text, "no clean shutdown in the journal of %s since @%s" % (UNIT, since)
    smoke(url, MODEL, unit=UNIT, container=CONTAINER, health_timeout=60)


def test_stop_leaves_nothing_and_a_stale_container_does_not_block_the_start(host, smoke, url, serving):
    """systemctl stop removes the container; a stale container named vllm is removed by ExecStartPre."""
    image = serving[1]
    host.check_output("systemctl stop %s", UNIT)
    try:
        left = host.check_output("docker ps --all --quiet --filter %s", "name=^%s$" % CONTAINER)
        assert left == "", "containers named %s left after systemctl stop: %s" % (CONTAINER, left)
        stale = host.check_output("docker create --name %s %s --model /nonexistent", CONTAINER, image)
    finally:
        # Started again whatever happened above: the next test, and the next verify, need it.
        host.check_output("systemctl start %s", UNIT)
    smoke(url, MODEL, unit=UNIT, container=CONTAINER, health_timeout=60)
    final_id = _container(host)[0]
    assert final_id != stale, "the stale container %s runs instead of a new one" % stale


def test_second_instance_undisturbed(host, smoke, default_address, second_before):
    """vllm-b kept its container through the crashes above and answers on its own port, as quasar-b."""
    smoke("http://%s:%d" % (default_address, PORT_B), MODEL_B, health_timeout=30)
    second_now = _container(host, "vllm-b")[0]
    assert second_now == second_before, "vllm-b's container changed (%s, before %s)" % (second_now, second_before)


@pytest.mark.parametrize("expected", [
    "--gpus '\"device=1\"'",  # its own GPU
    ":8001:8000",  # its own port
    "-e CUDA_VISIBLE_DEVICES=0",  # device order inside the container
    "--tensor-parallel-size 1",  # its own tensor parallelism
    "--served-model-name quasar-b",
    "--env-file /etc/vllm/vllm-b.env",  # its own env file (the API key lives there, not in the unit)
])
def test_second_unit_has_its_own_settings(host, expected, secret_canaries):
    """The second unit runs its container with its own GPU, port, device order, TP, name and env file."""
    unit = host.file("/etc/systemd/system/vllm-b.service")
    assert unit.is_file, "/etc/systemd/system/vllm-b.service is missing"
    text = _redact(unit.content_string, secret_canaries)
    assert expected in text, "%r is not in vllm-b.service:\n%s" % (expected, text)
