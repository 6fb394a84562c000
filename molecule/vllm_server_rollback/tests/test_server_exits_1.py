"""F1 (docs/testing.md, fault table): a new version whose server exits 1 before it listens.

The real site.yml runs with the stand-in tagged 2-exit1 (exits with status 1 three seconds into its
"model load"), as its own ansible-playbook, with the driver and container runtime roles' tasks
skipped (--skip-tags: this scenario's host has Docker from its image and fake GPUs, the roles' own
scenarios test them). The converge left version 2 serving: that is the last good version. The run
must end non-zero; the fleet report it wrote must show the host rolled_back at the server step with
version 2's image restored; and version 2 must be serving again under its unit.

vllm_server_retry_failed is true, so that ``molecule verify`` can run again (the host remembers
2-exit1 failed and would otherwise not try it again).
"""

import json
import os
import re

import pytest

testinfra_hosts = ["vllm_hosts"]

IMAGE = "labfleet/openai-standin"
TAG = "2-exit1"


@pytest.fixture(scope="module")
def exit1_run(host, run_playbook, project_dir, ephemeral_dir):
    report_dir = os.path.join(ephemeral_dir, "reports-exit1")
    extra = {
        "preflight_deployment": "{{ labfleet_test_request | combine({'image': '%s:%s'}) }}" % (IMAGE, TAG),
        "vllm_server_image_tarball": "{{ labfleet_test_tarballs }}/openai-standin-%s.tar" % TAG,
        "vllm_server_retry_failed": True,
        "fleet_report_dir": report_dir,
    }
    run = run_playbook(os.path.join(project_dir, "site.yml"), extra_vars=extra,
                       skip_tags=["nvidia_driver", "container_runtime"])
    with open(os.path.join(report_dir, "fleet-report.json"), encoding="utf-8") as handle:
        report = json.load(handle)
    return run, report


@pytest.fixture(scope="module")
def lock(ephemeral_dir, load_yaml):
    return load_yaml(os.path.join(ephemeral_dir, "inventory", "vllm-image.lock.yml"))


def _digest(lock, tag):
    entry = lock.get("%s:%s" % (IMAGE, tag))
    assert entry and entry.get("digest"), "the lock file has no digest for %s:%s: %s" % (IMAGE, tag, sorted(lock))
    return entry["digest"]


def test_run_fails(host, exit1_run):
    """site.yml ends non-zero, failing the host in its last play (after the report)."""
    run, _report = exit1_run
    name = host.backend.get_hostname()
    assert run.returncode not in (0, None), run.returncode
    failed = run.results("Fail the hosts whose rollout failed (the report above says what happened)")[name]
    assert failed.get("failed"), failed
    assert "step server" in failed["msg"], failed["msg"]


def test_report_says_rolled_back(host, exit1_run, report_entry, lock):
    """The report: outcome rolled_back at the server step, why, and version 2's image restored."""
    _run, report = exit1_run
    entry = report_entry(report, host.backend.get_hostname())
    shown = json.dumps({k: entry.get(k) for k in ("outcome", "rollout", "failure", "rollout_status")}, indent=1)
    assert entry["outcome"] == "rolled_back", shown
    assert entry["rollout"]["server"]["status"] == "rolled_back", shown
    assert entry["rollout"]["server"]["image"] == "%s:%s" % (IMAGE, TAG), shown
    assert entry["rollout_status"]["state"] == "failed", shown
    failure = entry["failure"]
    assert failure["step"] == "server", shown
    assert "exited before it became healthy" in failure["msg"], shown
    assert failure["restored_image"] == _digest(lock, "2"), shown
    assert re.search(r"exiting with status 1|status=1/FAILURE", "\n".join(failure["journal_tail"])), shown
    assert report["summary"]["by_outcome"].get("rolled_back") == 1, report["summary"]


def test_last_good_version_serves_again(host, exit1_run, lock):
    """After the run, version 2 (the last good one) runs under its unit; 2-exit1 was loaded and locked."""
    assert exit1_run
    assert host.check_output("docker inspect --format %s vllm", "{{.Image}}") == _digest(lock, "2")
    assert host.service("vllm").is_running
    unit = host.file("/etc/systemd/system/vllm.service").content_string
    assert _digest(lock, "2") in unit
    assert _digest(lock, TAG) not in unit
