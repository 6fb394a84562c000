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
import time

import pytest

testinfra_hosts = ["vllm_hosts"]

TAG = "2-hangs"
REQUEST_TIMEOUT = 5
SMOKE_TASK = "Wait for /health, then check /v1/models and one completion"


@pytest.fixture(scope="module")
def hang_run(host, site_with_standin):
    began = time.monotonic()
    run, report = site_with_standin(TAG, vllm_server_smoke_request_timeout=REQUEST_TIMEOUT)
    return run, report, time.monotonic() - began


def _seconds(duration):
    """Seconds of a json-callback task duration {start, end} (ISO 8601 times)."""
    start, end = (datetime.datetime.fromisoformat(duration[k].replace("Z", "+00:00")) for k in ("start", "end"))
    return (end - start).total_seconds()


def test_smoke_test_timed_out_on_the_completion(host, hang_run):
    """The smoke test saw /health and /v1/models answer, then no answer to the completion in REQUEST_TIMEOUT s."""
    run, _report, _took = hang_run
    name = host.backend.get_hostname()
    task = run.task(SMOKE_TASK, name)
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
    role_failed = run.task("Fail the host", name)["hosts"][name]
    assert "Rolled back to the previous unit, env file and image" in role_failed["msg"], role_failed["msg"]
    assert "answers again" in role_failed["msg"], role_failed["msg"]


def test_report_says_rolled_back_for_the_completion_timeout(host, hang_run, report_entry, version_2_restored):
    """The report: outcome rolled_back at the server step, the completion's timeout as the reason, version 2 restored."""
    _run, report, _took = hang_run
    failure, shown = version_2_restored(report_entry(report, host.backend.get_hostname()), TAG, report)
    assert failure["failed_task"].endswith(SMOKE_TASK), shown
    assert "/v1/chat/completions failed: no complete answer" in failure["msg"], shown
    assert "within %d s" % REQUEST_TIMEOUT in failure["msg"], shown


def test_last_good_version_serves_again(hang_run, version_2_restored):
    """After the run, version 2 runs under its unit; 2-hangs was loaded and locked, and is named nowhere in the unit."""
    assert hang_run
    version_2_restored.serving(TAG)
