"""preflight_target: the gate judges the target state, and refused hosts are left untouched.

The plans are read from the fleet report on the controller; the hosts are asked whether the rollout
play (which targets the allowed hosts only) reached them.
"""

import re


def _codes(items):
    return [item["code"] for item in items]


def _instance(entry, name):
    found = [instance for instance in entry["instances"] if instance["name"] == name]
    assert len(found) == 1, entry["instances"]
    return found[0]


def test_replace_driver_allowed(fleet_report, report_entry):
    """R590 installed, R580 requested with allow_change: allowed, the plan replaces the driver."""
    entry = report_entry(fleet_report[0], "target-replace")
    assert entry["verdict"] == "allowed", entry
    assert entry["driver_version"] == "590.44.01", entry
    assert entry["reasons"] == [], entry["reasons"]
    driver = entry["steps"]["driver"]
    assert driver["action"] == "replace", driver
    assert driver["current"] == "590.44.01", driver
    assert driver["target"] == "580", driver
    assert driver["branch"] == 580, driver
    assert re.search(r"replace driver 590\.44\.01 with R580", entry["rollout_plan"]), entry["rollout_plan"]
    assert entry["instances"][0]["enforce_eager"] is True, entry["instances"][0]
    assert "--enforce-eager" in entry["instances"][0]["argv"], entry["instances"][0]["argv"]


def test_unmanaged_driver_refused(fleet_report, report_entry):
    """The same host with the driver role off: the plan keeps R590, which does not drive Volta."""
    entry = report_entry(fleet_report[0], "target-unmanaged")
    assert entry["verdict"] == "refused", entry
    assert "DRIVER_BRANCH_UNSUPPORTED_FOR_ARCH" in _codes(entry["reasons"]), entry["reasons"]
    reason = [r for r in entry["reasons"] if r["code"] == "DRIVER_BRANCH_UNSUPPORTED_FOR_ARCH"][0]
    assert "590.44.01" in reason["message"], reason
    driver = entry["steps"]["driver"]
    assert driver["action"] == "refuse", driver
    assert driver["planned_action"] == "keep", driver
    assert driver["managed"] is False, driver
    assert "DRIVER_NOT_MANAGED" in _codes(entry["warnings"]), entry["warnings"]


def test_oversized_instance_refused(fleet_report, report_entry):
    """An instance asking for more GPUs than the host has: refused, the message names the instance."""
    entry = report_entry(fleet_report[0], "target-oversized")
    assert entry["verdict"] == "refused", entry
    assert _codes(entry["reasons"]) == ["TENSOR_PARALLEL_EXCEEDS_GPUS"], entry["reasons"]
    message = entry["reasons"][0]["message"]
    assert message.startswith("instance vllm-big:"), message
    assert "needs 8 GPUs but the host has 2" in message, message
    assert _instance(entry, "vllm")["allowed"] is True, entry["instances"]
    assert _instance(entry, "vllm-big")["allowed"] is False, entry["instances"]
    assert entry["steps"]["server"]["action"] == "refuse", entry["steps"]["server"]


def test_report_lists_plan_and_refusals(fleet_report):
    """The summary and the Markdown report show the allowed plan and both refusals."""
    report, markdown = fleet_report
    assert report["summary"]["allowed"] == ["target-replace"], report["summary"]
    assert report["summary"]["refused"] == ["target-oversized", "target-unmanaged"], report["summary"]
    assert re.search(r"(?m)^\| target-replace \| allowed \|", markdown), markdown
    assert re.search(r"- plan: replace driver 590\.44\.01 with R580", markdown), markdown
    assert "reason `DRIVER_BRANCH_UNSUPPORTED_FOR_ARCH`" in markdown, markdown
    assert "reason `TENSOR_PARALLEL_EXCEEDS_GPUS`" in markdown, markdown


def test_only_the_allowed_host_was_reached(host):
    """The rollout play ran on the allowed host only; the refused hosts carry no mark."""
    name = host.backend.get_hostname()
    reached = name == "target-replace"
    mark = host.file("/var/tmp/labfleet-rollout-reached")
    assert mark.exists is reached, "%s: rollout mark exists=%s" % (name, mark.exists)
    if reached:
        assert mark.content_string == "reached\n"
        assert mark.mode == 0o644
