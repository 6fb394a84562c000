"""container_runtime_broken: the role refuses what it must not work with, and the refusals change nothing.

Two refusals, run again here through refusals.yml (the collection's own role, hence a playbook run
with run_playbook; the converge ran them first): a daemon.json that is not valid JSON (stopped in
the preflight, naming the file and the parser's error) and a repository key whose fingerprint is
not the expected one (both fingerprints shown, repository not added). Then the host's state: the
broken file byte for byte as seeded with no backup beside it, neither Docker nor the toolkit
installed, no apt source, keyring or other daemon.json written.
"""

import os
import re

testinfra_hosts = ["vllm_hosts"]

REFUSALS_PLAYBOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "refusals.yml")
WRONG_FINGERPRINT = "0000111122223333444455556666777788889999"
NOT_WRITTEN = [
    "/etc/apt/sources.list.d/labfleet-nvidia-container-toolkit.sources",
    "/etc/apt/keyrings/labfleet-nvidia-container-toolkit.asc",
    "/etc/docker-other/daemon.json",
]


def test_role_refuses_invalid_daemon_json_and_wrong_key(host, run_playbook):
    """Each case stops the role with a message that says what is wrong and what was left alone."""
    run = run_playbook(REFUSALS_PLAYBOOK)
    assert run.returncode == 0, "refusals.yml failed:\n%s\n%s" % (run.stdout[-6000:], run.stderr[-3000:])
    records = run.results("Show what stopped the role")[host.backend.get_hostname()]["msg"]

    # The preflight refuses the file, naming it and the parser's error, and leaves it alone.
    invalid = records["invalid_json"]
    assert invalid["refused"] is True, "the role went through a daemon.json that is not valid JSON"
    assert "daemon.json can be merged into" in invalid["task"], invalid
    assert invalid["msg"].startswith("/etc/docker/daemon.json is not valid JSON: "), invalid["msg"]
    assert "line 5 column 1" in invalid["msg"], invalid["msg"]
    assert "left untouched" in invalid["msg"], invalid["msg"]

    # The key check refuses the key, showing the expected fingerprint and the real one.
    real = host.file("/srv/fake-nvidia-repo/fingerprint").content_string.strip()
    assert re.fullmatch(r"[0-9A-F]{40}", real), "the test key's fingerprint: %r" % real
    wrong = records["wrong_key"]
    assert wrong["refused"] is True, "the role accepted a key whose fingerprint is not the expected one"
    assert "expected fingerprint %s, got %s" % (WRONG_FINGERPRINT, real) in wrong["msg"], wrong
    assert "repository was not added" in wrong["msg"], wrong


def test_broken_daemon_json_untouched(host, hostvars):
    """The broken file is byte for byte the seeded one, and no backup or other copy is beside it."""
    assert host.file("/etc/docker/daemon.json").content == hostvars["labfleet_test_daemon_json"].encode("utf-8")
    files = host.check_output("find /etc/docker -mindepth 1 -maxdepth 1 -name 'daemon.json*'").split()
    assert files == ["/etc/docker/daemon.json"], files


def test_nothing_installed(host):
    """Neither Docker nor the toolkit was installed."""
    for name in ("docker.io", "nvidia-container-toolkit"):
        assert not host.package(name).is_installed, "%s is installed" % name


def test_nothing_written_after_the_refused_key(host):
    """No apt source, keyring or daemon.json at the other path: the role stopped at the key."""
    written = [path for path in NOT_WRITTEN if host.file(path).exists]
    assert written == [], written
