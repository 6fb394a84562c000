"""container_runtime_broken: the role refuses what it must not work with, and the refusals change nothing.

Two refusals, run again here through refusals.yml (the collection's own role, hence a playbook run
with run_playbook; the converge ran them first): a daemon.json that is not valid JSON (stopped in
the preflight, naming the file and the parser's error) and a repository key whose fingerprint is
not the expected one (both fingerprints shown, repository not added). Then the host's state: the
broken file byte for byte as seeded with no backup beside it, neither Docker nor the toolkit
installed, no apt source, keyring or other daemon.json written. Last, playbooks/doctor.yml on the
host names the cause (the file, Docker, the toolkit) and the fix, changing nothing.
"""

import json
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


def test_the_doctor_names_the_broken_runtime_and_its_fix(host, hostvars, run_playbook, project_dir, ephemeral_dir):
    """playbooks/doctor.yml on this host (in check mode): GPUs cannot reach a container, because
    daemon.json does not parse (dockerd would not start with it) and neither Docker nor the toolkit is
    installed; the fix says how to repair the file and what to install. Nothing changes."""
    report_dir = os.path.join(ephemeral_dir, "reports-doctor")
    run = run_playbook(os.path.join(project_dir, "playbooks", "doctor.yml"),
                       extra_vars={"fleet_report_dir": report_dir}, check=True)
    assert run.returncode == 0, "doctor.yml failed:\n%s\n%s" % (run.stdout[-6000:], run.stderr[-3000:])
    # Nothing changed on the host; the report play writes files on the controller only.
    assert run.changed_tasks(skip_plays=["Add the doctor section to the fleet report"]) == []
    with open(os.path.join(report_dir, "fleet-report.json"), encoding="utf-8") as handle:
        doctor = json.load(handle)["doctor"]
    entry = [h for h in doctor["hosts"] if h["host"] == host.backend.get_hostname()][0]
    gpu = entry["instances"][0]["findings"][0]
    assert entry["status"] == "problem" and (gpu["check"], gpu["status"]) == ("gpu_in_container", "problem"), gpu
    assert gpu["cause"].startswith("/etc/docker/daemon.json is not valid JSON: "), gpu["cause"]
    assert "line 5 column 1" in gpu["cause"] and "so dockerd will not start with it" in gpu["cause"]
    assert "Docker is not installed" in gpu["cause"]
    assert "the NVIDIA Container Toolkit is not installed" in gpu["cause"]
    assert gpu["fix"].startswith("1) repair /etc/docker/daemon.json (keep its keys)"), gpu["fix"]
    assert "labfleet.vllm.container_runtime role" in gpu["fix"] and "nvidia-ctk runtime configure" in gpu["fix"]
    with open(os.path.join(report_dir, "fleet-report.md"), encoding="utf-8") as handle:
        assert "| gpu_in_container | **problem** | /etc/docker/daemon.json is not valid JSON" in handle.read()
    # The diagnosis read the file and left it as it was.
    assert host.file("/etc/docker/daemon.json").content == hostvars["labfleet_test_daemon_json"].encode("utf-8")
