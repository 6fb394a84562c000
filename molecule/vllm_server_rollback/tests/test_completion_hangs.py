"""F2 (docs/testing.md, fault table): a new version whose /health answers 200 but whose completions hang.

The real site.yml runs with the stand-in tagged 2-hangs (STANDIN_HANG_COMPLETIONS: /health and
/v1/models answer, a completion is read and held without a byte of answer), as its own
ansible-playbook, with the driver and container runtime roles' tasks skipped (as for F1), and with
the smoke test's request timeout lowered to REQUEST_TIMEOUT seconds (vllm_server_smoke_request_timeout).
The converge left version 2 serving: that is the last good version. The smoke test's one-token
completion must time out, the role must roll back to version 2, the run must end non-zero, the fleet
report must say rolled_back with the completion's timeout as the reason, and it must all end in
bounded time (the smoke task within its request timeout plus slack, not the 120 s default).

vllm_server_retry_failed is true, so that ``molecule verify`` can run again.
"""

import datetime
import json
import os
import time

import pytest

testinfra_hosts = ["vllm_hosts"]

IMAGE = "labfleet/openai-standin"
TAG = "2-hangs"
REQUEST_TIMEOUT = 5
SMOKE_TASK = "Wait for /health, then check /v1/models and one completion"


@pytest.fixture(scope="module")
def hang_run(host, run_playbook, project_dir, ephemeral_dir):
    report_dir = os.path.join(ephemeral_dir, "reports-hangs")
    extra = {
        "preflight_deployment": "{{ labfleet_test_request | combine({'image': '%s:%s'}) }}" % (IMAGE, TAG),
        "vllm_server_image_tarball": "{{ labfleet_test_tarballs }}/openai-standin-%s.tar" % TAG,
        "vllm_server_retry_failed": True,
        "vllm_server_smoke_request_timeout": REQUEST_TIMEOUT,
        "fleet_report_dir": report_dir,
    }
    began = time.monotonic()
    run = run_playbook(os.path.join(project_dir, "site.yml"), extra_vars=extra,
                       skip_tags=["nvidia_driver", "container_runtime"])
    took = time.monotonic() - began
    with open(os.path.join(report_dir, "fleet-report.json"), encoding="utf-8") as handle:
        report = json.load(handle)
    return run, report, took


@pytest.fixture(scope="module")
def lock(ephemeral_dir, load_yaml):
    return load_yaml(os.path.join(ephemeral_dir, "inventory", "vllm-image.lock.yml"))


def _digest(lock, tag):
    entry = lock.get("%s:%s" % (IMAGE, tag))
    assert entry and entry.get("digest"), "the lock file has no digest for %s:%s: %s" % (IMAGE, tag, sorted(lock))
    return entry["digest"]


def _seconds(duration):
    """Seconds of a json-callback task duration {start, end} (ISO 8601 times)."""
    start, end = (datetime.datetime.fromisoformat(duration[k].replace("Z", "+00:00")) for k in ("start", "end"))
    return (end - start).total_seconds()


def _role_task(run, name, host_name):
    """The result on host_name of the last task called name, a role's task too ("<role> : name")."""
    found = None
    for play in run.data.get("plays", []):
        for task in play.get("tasks", []):
            title = task["task"]["name"]
            if (title == name or title.endswith(" : " + name)) and host_name in task["hosts"]:
                found = task
    assert found, "no task %r ran on %s; tasks: %s" % (name, host_name, run.task_names())
    return found


def test_smoke_test_timed_out_on_the_completion(host, hang_run):
    """The smoke test saw /health and /v1/models answer, then no answer to the completion in REQUEST_TIMEOUT s."""
    run, _report, _took = hang_run
    name = host.backend.get_hostname()
    task = _role_task(run, SMOKE_TASK, name)
    smoke = task["hosts"][name]
    shown = json.dumps({k: smoke.get(k) for k in ("failed", "msg", "health", "models", "completion_tokens")})
    assert smoke.get("failed"), shown
    assert smoke["health"]["ok"] and smoke["models"] == ["quasar"], shown
    assert "/v1/chat/completions failed: no complete answer" in smoke["msg"], shown
    assert "within %d s" % REQUEST_TIMEOUT in smoke["msg"], shown
    assert "raise request_timeout (now %d s)" % REQUEST_TIMEOUT in smoke["msg"], shown
    # Bounded: the completion waited its request timeout, not the module's 120 s default.
    waited = _seconds(task["task"]["duration"])
    assert REQUEST_TIMEOUT <= waited < REQUEST_TIMEOUT + 30, waited


def test_run_fails_in_bounded_time(host, hang_run):
    """site.yml ends non-zero, failing the host in its last play (after the report), within a bound."""
    run, _report, took = hang_run
    name = host.backend.get_hostname()
    assert run.returncode not in (0, None), run.returncode
    failed = run.results("Fail the hosts whose rollout failed (the report above says what happened)")[name]
    assert failed.get("failed"), failed
    assert "step server" in failed["msg"], failed["msg"]
    assert took < 300, "site.yml took %.0f s" % took
    # The role's own failure: rolled back to the previous unit, env file and image, which answers again.
    role_failed = _role_task(run, "Fail the host", name)["hosts"][name]
    assert "Rolled back to the previous unit, env file and image" in role_failed["msg"], role_failed["msg"]
    assert "answers again" in role_failed["msg"], role_failed["msg"]


def test_report_says_rolled_back_for_the_completion_timeout(host, hang_run, report_entry, lock):
    """The report: outcome rolled_back at the server step, the completion's timeout as the reason, version 2 restored."""
    _run, report, _took = hang_run
    entry = report_entry(report, host.backend.get_hostname())
    shown = json.dumps({k: entry.get(k) for k in ("outcome", "rollout", "failure", "rollout_status")}, indent=1)
    assert entry["outcome"] == "rolled_back", shown
    assert entry["rollout"]["server"]["status"] == "rolled_back", shown
    assert entry["rollout"]["server"]["image"] == "%s:%s" % (IMAGE, TAG), shown
    assert entry["rollout_status"]["state"] == "failed", shown
    failure = entry["failure"]
    assert failure["step"] == "server", shown
    assert failure["failed_task"].endswith(SMOKE_TASK), shown
    assert "/v1/chat/completions failed: no complete answer" in failure["msg"], shown
    assert "within %d s" % REQUEST_TIMEOUT in failure["msg"], shown
    assert failure["restored_image"] == _digest(lock, "2"), shown
    assert report["summary"]["by_outcome"].get("rolled_back") == 1, report["summary"]


def test_last_good_version_serves_again(host, hang_run, lock):
    """After the run, version 2 runs under its unit; 2-hangs was loaded and locked, and is named nowhere in the unit."""
    assert hang_run
    assert host.check_output("docker inspect --format %s vllm", "{{.Image}}") == _digest(lock, "2")
    assert host.service("vllm").is_running
    unit = host.file("/etc/systemd/system/vllm.service").content_string
    assert _digest(lock, "2") in unit
    assert _digest(lock, TAG) not in unit
