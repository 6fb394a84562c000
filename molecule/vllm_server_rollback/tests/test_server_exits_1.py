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

import re

import pytest

testinfra_hosts = ["vllm_hosts"]

TAG = "2-exit1"


@pytest.fixture(scope="module")
def exit1_run(host, site_with_standin):
    return site_with_standin(TAG)


def test_run_fails(host, exit1_run):
    """site.yml ends non-zero, failing the host in its last play (after the report)."""
    run, _report = exit1_run
    name = host.backend.get_hostname()
    assert run.returncode not in (0, None), run.returncode
    failed = run.results("Fail the hosts whose rollout failed (the report above says what happened)")[name]
    assert failed.get("failed"), failed
    assert "step server" in failed["msg"], failed["msg"]


def test_report_says_rolled_back(host, exit1_run, report_entry, version_2_restored):
    """The report: outcome rolled_back at the server step, why, and version 2's image restored."""
    _run, report = exit1_run
    failure, shown = version_2_restored(report_entry(report, host.backend.get_hostname()), TAG, report)
    assert "exited before it became healthy" in failure["msg"], shown
    assert re.search(r"exiting with status 1|status=1/FAILURE", "\n".join(failure["journal_tail"])), shown


def test_last_good_version_serves_again(exit1_run, version_2_restored):
    """After the run, version 2 (the last good one) runs under its unit; 2-exit1 was loaded and locked."""
    assert exit1_run
    version_2_restored.serving(TAG)
