"""site_rollout, on the controller: the failing rollout's run (side effect) and the fleet report it wrote.

The side effect ran site.yml with version 2-notokens as its own ansible-playbook and kept its exit
status and output in site-v2.json: the canary's smoke test failed, the canary was rolled back, the
rollout stopped before rollout-second and the run failed after writing the report. The P100 host is
refused by the gate, which is not a failure of the rollout. These checks read files under the
ephemeral directory only (no host fixture: the controller is not in the inventory).
"""

import json
import os
import re

import pytest

CANARY = "rollout-canary"
SECOND = "rollout-second"
P100 = "rollout-p100"


def _redact(text, canaries):
    """The text with every secret of the scenarios masked.

    Everything read here is masked as it is loaded: pytest shows failing values (fixture arguments,
    the operands of an assert) in its report, and no secret may appear there. None of the checks
    looks for a secret.
    """
    for secret in canaries:
        text = text.replace(secret, "<redacted>")
    return text


def _read(path, canaries):
    with open(path, encoding="utf-8") as handle:
        return _redact(handle.read(), canaries)


@pytest.fixture(scope="module")
def site_run(ephemeral_dir, secret_canaries):
    """The side effect's ansible-playbook run: {'rc', 'stdout', 'stderr'}."""
    path = os.path.join(ephemeral_dir, "site-v2.json")
    if not os.path.exists(path):
        pytest.fail("%s is missing: the side effect has not run (molecule side-effect -s site_rollout before verify)" % path)
    return json.loads(_read(path, secret_canaries))


@pytest.fixture(scope="module")
def report(ephemeral_dir, secret_canaries):
    """The fleet report the side effect's run wrote: (parsed JSON, Markdown text, HTML text)."""
    report_dir = os.path.join(ephemeral_dir, "reports")
    return (json.loads(_read(os.path.join(report_dir, "fleet-report.json"), secret_canaries)),
            _read(os.path.join(report_dir, "fleet-report.md"), secret_canaries),
            _read(os.path.join(report_dir, "fleet-report.html"), secret_canaries))


def test_run_failed_after_the_canary_stopped_the_rollout(site_run):
    """The run failed (rc 2) on the canary's server step, the rollout stopped, the report was written."""
    stdout, stderr = site_run["stdout"], site_run["stderr"]
    shown = "rc %s\n%s\n%s" % (site_run["rc"], stdout[-6000:], stderr[-2000:])
    assert site_run["rc"] == 2, shown
    assert re.search(r"Rollout failed on rollout-canary \(batch 1, step server\)", stdout), shown
    assert re.search(r"The rollout stopped before this host", stdout), shown
    assert re.search(r"Fleet report for 3 host", stdout), shown
    # Ansible writes a task's failure to stderr.
    assert re.search(r"The rollout failed here \(batch 1, step server", stderr), shown
    # The canary fails the run; the untouched host and the refused host do not.
    assert re.search(r"(?m)^rollout-canary\s+:.*failed=1", stdout), shown
    assert re.search(r"(?m)^rollout-second\s+:.*failed=0", stdout), shown
    assert re.search(r"(?m)^rollout-p100\s+:.*failed=0", stdout), shown


def test_canary_rolled_back_with_reason_and_journal(report, report_entry):
    """The canary's server step was rolled back from 2-notokens, with the reason and the journal tail."""
    canary = report_entry(report[0], CANARY)
    shown = json.dumps(canary, indent=2, sort_keys=True)
    server = canary["rollout"]["server"]
    assert canary["outcome"] == "rolled_back", shown
    assert server["status"] == "rolled_back", shown
    assert re.search(r"returned no tokens", server["msg"]), shown
    assert len(server["journal_tail"]) > 0, shown
    assert server["image"] == "labfleet/openai-standin:2-notokens", shown


def test_second_not_reached_still_allowed_with_dtype_fixed(report, report_entry):
    """rollout-second was not reached; the gate still allows it, with bfloat16 fixed to float16."""
    second = report_entry(report[0], SECOND)
    shown = json.dumps(second, indent=2, sort_keys=True)
    assert second["outcome"] == "not_reached", shown
    assert second["verdict"] == "allowed", shown
    assert "DTYPE_AUTOFIXED" in [warning["code"] for warning in second["warnings"]], shown
    assert second["effective_vllm"]["dtype"] == "float16", shown
    assert second["plan"]["fits_one_sequence"] is True, shown


def test_p100_refused_for_compute_capability(report, report_entry):
    """The P100 host is refused for compute capability 6.0, and the message names the minimum (7.0)."""
    p100 = report_entry(report[0], P100)
    shown = json.dumps(p100, indent=2, sort_keys=True)
    assert p100["outcome"] == "refused", shown
    assert p100["verdict"] == "refused", shown
    assert p100["compute_capabilities"] == ["6.0"], shown
    too_low = [reason for reason in p100["reasons"] if reason["code"] == "COMPUTE_CAPABILITY_TOO_LOW"]
    assert too_low, shown
    assert re.search(r"7\.0", too_low[0]["message"]), shown


def test_report_counts_and_spells_out_the_outcomes(report):
    """The summary counts the verdicts; Markdown and HTML name the outcomes; the HTML loads nothing remote."""
    data, markdown, html = report
    summary = data["summary"]
    assert summary["hosts"] == 3, summary
    assert summary["allowed"] == [CANARY, SECOND], summary
    assert summary["refused"] == [P100], summary
    assert "COMPUTE_CAPABILITY_TOO_LOW" in markdown, markdown
    assert "returned no tokens" in markdown, markdown
    assert re.search(r"rollout-second.*not_reached", markdown), markdown
    assert "COMPUTE_CAPABILITY_TOO_LOW" in html, html
    for outcome in ("rolled_back", "not_reached", "refused"):
        assert outcome in html, "%s missing from the HTML report:\n%s" % (outcome, html)
    remote = re.search(r"(src|href)=.(https?:)?//", html)
    assert remote is None, "the HTML report loads a remote resource: %s" % remote.group(0)


def test_scrape_targets_follow_what_serves(ephemeral_dir, report):
    """Prometheus targets: both allowed hosts' vLLM and GPU metrics exporter while they served (published
    on their own address); none after the failing rollout (canary rolled back, second not reached)."""
    with open(os.path.join(ephemeral_dir, "targets-before.json"), encoding="utf-8") as handle:
        before = json.load(handle)
    vllm = [g for g in before if g["labels"]["labfleet_instance"] == "vllm"]
    dcgm = [g for g in before if g["labels"]["labfleet_instance"] == "dcgm-exporter"]
    assert len(vllm) + len(dcgm) == len(before), before
    assert sorted(g["labels"]["labfleet_host"] for g in vllm) == [CANARY, SECOND], before
    for group in vllm:
        assert group["labels"]["labfleet_image_digest"].startswith("sha256:"), group
        assert len(group["targets"]) == 1 and re.fullmatch(r"(\d{1,3}\.){3}\d{1,3}:8000", group["targets"][0]), group
        assert not group["targets"][0].startswith("127."), group
    # The GPU metrics exporter of each allowed host, on the same address, port 9400.
    assert sorted(g["labels"]["labfleet_host"] for g in dcgm) == [CANARY, SECOND], before
    for group in dcgm:
        assert group["labels"]["labfleet_exporter"] == "dcgm", group
        address = [g for g in vllm if g["labels"]["labfleet_host"] == group["labels"]["labfleet_host"]][0]["targets"][0]
        assert group["targets"] == [address.rsplit(":", 1)[0] + ":9400"], group
    with open(os.path.join(ephemeral_dir, "reports", "prometheus-targets.json"), encoding="utf-8") as handle:
        after = json.load(handle)
    assert after == [] == report[0]["scrape_targets"]["file_sd"], after
