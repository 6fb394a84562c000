"""preflight_hosts: each host's probe, read again on the host, and its entry in the fleet report.

The probe is the collection's own module (gpu_facts), so it runs through Ansible (call_module), in
check mode: it must change nothing and find what the host's fake nvidia-smi says. The report is
read on the controller, where the converge wrote it.
"""

import re

import pytest

testinfra_hosts = ["vllm_hosts"]

# What each host's probe, the gate and the report must say.
#   state, present, count, cc (compute capabilities, unique, in order), nvlink, msg_regex: the probe
#   verdict, reasons (codes that must be among the reasons), plan_regex (memory plan, allowed hosts)
EXPECT = {
    # 2x V100 PCIe, driver 550.54.14, a Llama-3.1-8B-shaped model: the reference deployment fits.
    "preflight-v100": {
        "state": "ok", "present": True, "count": 2, "cc": ["7.0"], "nvlink": False,
        "msg_regex": r"2 NVIDIA GPU",
        "verdict": "allowed", "reasons": [], "plan_regex": r"9 full 32768-token sequences fit",
    },
    # nvidia-smi installed, no GPU ("No devices were found").
    "preflight-no-gpu": {
        "state": "no_gpu", "present": False, "count": 0, "cc": [], "nvlink": False,
        "msg_regex": r"(?i)no nvidia gpu",
        "verdict": "refused", "reasons": ["NO_GPU"], "plan_regex": None,
    },
    # Driver/library version mismatch after an unattended user-space upgrade.
    "preflight-mismatch": {
        "state": "driver_library_mismatch", "present": False, "count": 0, "cc": [], "nvlink": False,
        "msg_regex": r"(?i)mismatch.*reboot|reboot.*mismatch",
        "verdict": "refused", "reasons": ["DRIVER_LIBRARY_MISMATCH"], "plan_regex": None,
    },
    # One of two V100s fell off the bus: its own state, the healthy GPU still listed, refused.
    "preflight-lost": {
        "state": "gpu_lost", "present": False, "count": 1, "cc": ["7.0"], "nvlink": False,
        "msg_regex": r"(?i)0000:3B:00.0.*lost|lost.*0000:3B:00.0",
        "verdict": "refused", "reasons": ["GPU_LOST"], "plan_regex": None,
    },
    # F8: the GPUs of preflight-v100, its model with one shard deleted: refused for the model alone.
    "preflight-shard": {
        "state": "ok", "present": True, "count": 2, "cc": ["7.0"], "nvlink": False,
        "msg_regex": r"2 NVIDIA GPU",
        "verdict": "refused", "reasons": ["MODEL_INCOMPLETE"], "plan_regex": None,
    },
}


def _unique(values):
    seen = []
    for value in values:
        if value not in seen:
            seen.append(value)
    return seen


def test_probe_reads_the_fake_gpu_without_changes(host, call_module):
    """gpu_facts in check mode changes nothing and reports the host's GPUs, state and message."""
    name = host.backend.get_hostname()
    exp = EXPECT[name]
    result = call_module("labfleet.vllm.gpu_facts", {}, check=True)
    assert not result.get("failed"), result
    assert not result.get("changed"), result
    facts = result["ansible_facts"]["nvidia"]
    assert facts["state"] == exp["state"], facts
    assert facts["present"] is exp["present"], facts
    assert facts["count"] == exp["count"], facts
    assert _unique(gpu["compute_capability"] for gpu in facts["gpus"]) == exp["cc"], facts
    assert facts["nvlink"] is exp["nvlink"], facts
    assert re.search(exp["msg_regex"], facts["msg"]), facts["msg"]


# F5 (docs/testing.md, fault table): the kernel module still loaded (the scenario's proc-version, mounted
# at /proc/driver/nvidia/version) is 550.54.14, the library nvidia-smi reports is 550.90.
MISMATCH_HOST, MISMATCH_MODULE, MISMATCH_LIBRARY = "preflight-mismatch", "550.54.14", "550.90"


def test_mismatch_refused_with_both_versions(host, call_module, fleet_report, report_entry):
    """F5: the probe and the report name the loaded module's version and the library's, the gate refuses
    with DRIVER_LIBRARY_MISMATCH, and the Markdown report lists the host as refused."""
    if host.backend.get_hostname() != MISMATCH_HOST:
        pytest.skip("the driver/library mismatch is injected on %s only" % MISMATCH_HOST)
    facts = call_module("labfleet.vllm.gpu_facts", {}, check=True)["ansible_facts"]["nvidia"]
    assert (facts["kernel_module_version"], facts["library_version"]) == (MISMATCH_MODULE, MISMATCH_LIBRARY), facts
    assert facts["driver_library_mismatch"] is True, facts
    report, markdown = fleet_report
    entry = report_entry(report, MISMATCH_HOST)
    assert entry["kernel_module_version"] == MISMATCH_MODULE, entry
    assert entry["driver_library_mismatch"] is True, entry
    assert re.search(r"kernel module \(%s\) and the user-space driver library \(%s\) do not match"
                     % (re.escape(MISMATCH_MODULE), re.escape(MISMATCH_LIBRARY)), entry["msg"]), entry["msg"]
    assert entry["verdict"] == "refused", entry
    assert "DRIVER_LIBRARY_MISMATCH" in [reason["code"] for reason in entry["reasons"]], entry["reasons"]
    assert MISMATCH_HOST in report["summary"]["refused"], report["summary"]
    assert MISMATCH_HOST not in report["summary"].get("allowed", []), report["summary"]
    assert re.search(r"(?m)^\| %s \| refused \| driver_library_mismatch \|" % re.escape(MISMATCH_HOST), markdown), markdown
    assert MISMATCH_MODULE in markdown and MISMATCH_LIBRARY in markdown, markdown
    # No deploy (test_preflight_changed_nothing_on_the_host checks the directories of every host).
    assert not host.file("/etc/systemd/system/vllm.service").exists
    assert not host.file("/etc/vllm").exists


# F8 (docs/testing.md, fault table): the shard prepare deleted from the model preflight-shard was given.
SHARD_HOST, MODEL_DIR, SHARD = "preflight-shard", "/srv/models/model", "model-00002-of-00002.safetensors"


def test_incomplete_model_refused_naming_the_shard(host, fleet_report, report_entry):
    """F8: the index still names the deleted shard; the gate refuses the host with MODEL_INCOMPLETE
    naming it (and nothing else: its GPUs are fine), the report says so, and nothing was deployed."""
    if host.backend.get_hostname() != SHARD_HOST:
        pytest.skip("the missing shard is injected on %s only" % SHARD_HOST)
    # The injection is real: the index names the shard and the shard is gone.
    assert SHARD in host.file(MODEL_DIR + "/model.safetensors.index.json").content_string
    assert not host.file("%s/%s" % (MODEL_DIR, SHARD)).exists
    report, markdown = fleet_report
    entry = report_entry(report, SHARD_HOST)
    assert entry["verdict"] == "refused" and entry["outcome"] == "refused", entry
    reasons = dict((reason["code"], reason["message"]) for reason in entry["reasons"])
    assert sorted(reasons) == ["MODEL_INCOMPLETE"], entry["reasons"]
    assert SHARD in reasons["MODEL_INCOMPLETE"] and "missing" in reasons["MODEL_INCOMPLETE"], reasons
    assert SHARD_HOST in report["summary"]["refused"], report["summary"]
    assert "reason `MODEL_INCOMPLETE`" in markdown and SHARD in markdown, markdown
    assert not host.file("/etc/systemd/system/vllm.service").exists
    assert not host.file("/etc/vllm").exists


def test_report_counts_every_host(host, fleet_report):
    """The JSON report covers exactly the inventory's hosts, counted by state."""
    hosts = host.ansible.get_variables()["groups"]["vllm_hosts"]
    report = fleet_report[0]
    assert sorted(hosts) == sorted(EXPECT), "EXPECT must cover every host of vllm_hosts: %s" % hosts
    assert report["collection"] == "labfleet.vllm"
    summary = report["summary"]
    assert summary["hosts"] == len(hosts), summary
    assert sorted(summary["by_state"]) == sorted({EXPECT[h]["state"] for h in hosts}), summary
    assert sum(summary["by_state"].values()) == len(hosts), summary


def test_report_entry_of_the_host(host, fleet_report, report_entry):
    """The host's entry: probe result, verdict, reasons (present exactly when refused), plan."""
    name = host.backend.get_hostname()
    exp = EXPECT[name]
    report = fleet_report[0]
    entry = report_entry(report, name)
    same_state = sorted(h for h, e in EXPECT.items() if e["state"] == exp["state"])
    same_verdict = sorted(h for h, e in EXPECT.items() if e["verdict"] == exp["verdict"])
    assert report["summary"]["by_state"][exp["state"]] == len(same_state), report["summary"]
    assert entry["state"] == exp["state"], entry
    assert int(entry["gpu_count"]) == exp["count"], entry
    assert entry["compute_capabilities"] == exp["cc"], entry
    assert re.search(exp["msg_regex"], entry["msg"]), entry["msg"]
    assert entry["verdict"] == exp["verdict"], entry
    codes = [reason["code"] for reason in entry["reasons"]]
    assert set(exp["reasons"]) <= set(codes), codes
    assert bool(entry["reasons"]) == (exp["verdict"] == "refused"), entry["reasons"]
    if exp["verdict"] == "allowed":
        assert re.search(exp["plan_regex"], entry["plan"]["summary"]), entry["plan"]
    assert sorted(report["summary"][exp["verdict"]]) == same_verdict, report["summary"]


def test_markdown_row_and_reasons(host, fleet_report):
    """The Markdown report has the host's table row and each of its reason codes."""
    name = host.backend.get_hostname()
    exp = EXPECT[name]
    markdown = fleet_report[1]
    row = r"(?m)^\| %s \| %s \| %s \|" % (re.escape(name), exp["verdict"], exp["state"])
    assert re.search(row, markdown), markdown
    for code in exp["reasons"]:
        assert "reason `%s`" % code in markdown, markdown
    assert re.search("ansible", markdown, re.IGNORECASE), markdown


@pytest.mark.parametrize("path", ["/etc/apt/sources.list.d", "/etc/systemd/system"])
def test_preflight_changed_nothing_on_the_host(host, path):
    """The preflight is read-only: no vLLM unit, no NVIDIA repository, no container runtime written."""
    listing = host.check_output("ls -A %s", path)
    assert "vllm" not in listing and "nvidia" not in listing and "cuda" not in listing, listing
