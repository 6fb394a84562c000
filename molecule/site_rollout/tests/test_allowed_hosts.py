"""site_rollout, on the two allowed hosts after the failing rollout of version 2-notokens.

Version 1 serves again on both: the canary was rolled back to it (a new container; it remembers
2-notokens as a failed version), rollout-second was never reached, so its container is the one the
side effect saw before the rollout (same start time, same image) and it remembers no failed version. No change is left half done: no pending marker, no
rollback anchor container.
"""

import json
import os
import time

import pytest

testinfra_hosts = ["rollout-canary", "rollout-second"]

STATE_DIR = "/var/lib/labfleet/vllm_server/vllm"
INSPECT_FORMAT = "{{.State.StartedAt}} {{.Image}}"


@pytest.fixture(scope="module")
def name(host):
    return host.backend.get_hostname()


@pytest.fixture(scope="module")
def running_now(host):
    """[start time, image ID] of the vllm container now."""
    return host.check_output("docker inspect --format %s %s", INSPECT_FORMAT, "vllm").split(" ")


def test_version_1_serves_on_the_host_address(host, http):
    """/version answers 1 on the host's own address (the port is published there, not on 127.0.0.1 only)."""
    facts = host.ansible("ansible.builtin.setup", "gather_subset=network")["ansible_facts"]
    url = "http://%s:8000/version" % facts["ansible_default_ipv4"]["address"]
    # As the old uri task: up to 30 tries, 1 s apart, until 200.
    for attempt in range(30):
        status, _headers, body = http(url)
        if status == 200:
            break
        if attempt < 29:
            time.sleep(1)
    assert status == 200, "%s: %s %s" % (url, status, body)
    assert json.loads(body)["version"] == "1", body


def test_container_runs_the_locked_version_1_image(running_now, ephemeral_dir, load_yaml):
    """The vllm container runs the image ID the lock file pinned for labfleet/openai-standin:1."""
    lock = load_yaml(os.path.join(ephemeral_dir, "inventory", "vllm-image.lock.yml"))
    digest = lock["labfleet/openai-standin:1"]["digest"]
    assert running_now[1] == digest, "now %s, locked %s" % (running_now, digest)


def test_only_the_canary_was_restarted(name, running_now, ephemeral_dir):
    """rollout-second was not reached: the container the side effect recorded before still runs.

    The canary ran 2-notokens and was rolled back, so its container is a new one (stronger than the
    old verify.yml, which checked the second host only).
    """
    path = os.path.join(ephemeral_dir, "before-%s.txt" % name)
    if not os.path.exists(path):
        pytest.fail("%s is missing: the side effect has not run (molecule side-effect -s site_rollout before verify)" % path)
    with open(path, encoding="utf-8") as handle:
        before = handle.read().rstrip().split(" ")
    if name == "rollout-canary":
        assert running_now[0] != before[0], "the canary's container was not restarted: now %s, before %s" % (running_now, before)
    else:
        assert running_now == before, "now %s, before %s" % (running_now, before)


def test_only_the_canary_remembers_a_failed_version(host, name):
    """The canary keeps 2-notokens (and only it) as a version that failed and was rolled back.

    rollout-second never ran a failing version, so it has no failed.json (stronger than the old
    verify.yml, which read it on the canary only).
    """
    failed = host.file("%s/failed.json" % STATE_DIR)
    if name != "rollout-canary":
        assert not failed.exists, "%s on %s: %s" % (failed.path, name, failed.content_string)
        return
    assert failed.exists, "%s is missing" % failed.path
    versions = json.loads(failed.content_string)["versions"]
    images = [value["image"] for value in versions.values()]
    assert images == ["labfleet/openai-standin:2-notokens"], versions


def test_no_change_left_half_done(host):
    """No marker of an unfinished change and no rollback anchor container is left."""
    pending = host.file("%s/pending.json" % STATE_DIR)
    assert not pending.exists and not pending.is_symlink, "%s is still there" % pending.path
    anchors = host.check_output("docker ps --all --quiet --filter %s", "label=org.labfleet.vllm.rollback-anchor")
    assert anchors == "", "rollback anchor containers left: %s" % anchors


def test_the_gpu_metrics_exporter_runs_on_the_hosts_address(host, http, managed_file):
    """dcgm_exporter (opted in): its unit active, the container from the loaded image with --gpus, and
    /metrics on the host's address answering DCGM's fields for both fake GPUs (the fake toolkit's hook
    mounted their answers into the container); nothing listens on loopback only."""
    unit = managed_file("/etc/systemd/system/dcgm-exporter.service")
    assert "--gpus all" in unit and "--security-opt no-new-privileges" in unit and "Restart=always" in unit
    assert host.service("dcgm-exporter").is_running and host.service("dcgm-exporter").is_enabled
    image = host.check_output("docker image inspect --format %s %s", "{{.Id}}", "labfleet/fake-dcgm-exporter:1")
    assert host.check_output("docker inspect --format %s %s", "{{.Image}}", "dcgm-exporter") == image
    assert image in unit, "the unit does not run the image by its ID"
    address = host.ansible("ansible.builtin.setup", "gather_subset=network")["ansible_facts"]["ansible_default_ipv4"]["address"]
    assert host.socket("tcp://%s:9400" % address).is_listening
    status, headers, body = http("http://%s:9400/metrics" % address)
    assert status == 200 and headers["content-type"].startswith("text/plain"), (status, headers)
    gpus = json.loads(host.file("/etc/labfleet-fake-gpu/gpus.json").content_string)
    samples = [line for line in body.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{")]
    assert len(samples) == 2 and all(any(g["uuid"] in s for s in samples) for g in gpus), samples
