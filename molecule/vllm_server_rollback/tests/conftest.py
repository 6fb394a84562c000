"""What the fault tests of this scenario share (F1, F2, F4: docs/testing.md): site.yml run again with
another stand-in version, and the digests the converge locked."""

import json
import os

import pytest

STANDIN = "labfleet/openai-standin"


@pytest.fixture(scope="module")
def site_with_standin(run_playbook, project_dir, ephemeral_dir):
    """Run the real site.yml as its own ansible-playbook with the stand-in ``tag`` as the new version
    (its tarball), the driver and container runtime roles' tasks skipped (this scenario's host has
    Docker from its image and fake GPUs; their own scenarios test them), and the fleet report written
    to its own folder. vllm_server_retry_failed is true, so that ``molecule verify`` can run again (the
    host remembers a failed version and would otherwise not try it again). Returns (run, report)."""

    def _run(tag, **extra_vars):
        report_dir = os.path.join(ephemeral_dir, "reports-%s" % tag)
        extra = {
            "preflight_deployment": "{{ labfleet_test_request | combine({'image': '%s:%s'}) }}" % (STANDIN, tag),
            "vllm_server_image_tarball": "{{ labfleet_test_tarballs }}/openai-standin-%s.tar" % tag,
            "vllm_server_retry_failed": True,
            "fleet_report_dir": report_dir,
        }
        extra.update(extra_vars)
        run = run_playbook(os.path.join(project_dir, "site.yml"), extra_vars=extra,
                           skip_tags=["nvidia_driver", "container_runtime"])
        with open(os.path.join(report_dir, "fleet-report.json"), encoding="utf-8") as handle:
            return run, json.load(handle)

    return _run


@pytest.fixture(scope="module")
def standin_digest(ephemeral_dir, load_yaml):
    """The digest the converge locked for a stand-in tag (inventory/vllm-image.lock.yml)."""
    lock = load_yaml(os.path.join(ephemeral_dir, "inventory", "vllm-image.lock.yml"))

    def _digest(tag):
        entry = lock.get("%s:%s" % (STANDIN, tag))
        assert entry and entry.get("digest"), "the lock file has no digest for %s:%s: %s" % (STANDIN, tag, sorted(lock))
        return entry["digest"]

    return _digest


@pytest.fixture(scope="module")
def version_2_restored(host, standin_digest):
    """``check(entry, tag, report)``: the fleet report's entry says the host rolled back from ``tag`` at the
    server step to version 2's locked digest; returns the entry's failure (for the test's own asserts) and
    the JSON it shows on a failed assert. ``serving(tag)``: version 2 runs under the unit, which does not
    name ``tag``'s digest."""

    def check(entry, tag, report):
        shown = json.dumps({k: entry.get(k) for k in ("outcome", "rollout", "failure", "rollout_status")}, indent=1)
        assert entry["outcome"] == "rolled_back", shown
        assert entry["rollout"]["server"]["status"] == "rolled_back", shown
        assert entry["rollout"]["server"]["image"] == "%s:%s" % (STANDIN, tag), shown
        assert entry["rollout_status"]["state"] == "failed", shown
        assert entry["failure"]["step"] == "server", shown
        assert entry["failure"]["restored_image"] == standin_digest("2"), shown
        assert report["summary"]["by_outcome"].get("rolled_back") == 1, report["summary"]
        return entry["failure"], shown

    def serving(tag):
        assert host.check_output("docker inspect --format %s vllm", "{{.Image}}") == standin_digest("2")
        assert host.service("vllm").is_running
        unit = host.file("/etc/systemd/system/vllm.service").content_string
        assert standin_digest("2") in unit
        assert standin_digest(tag) not in unit

    check.serving = serving
    return check
