"""F14 (docs/testing.md, fault table): an NCCL all-reduce that hangs with tensor parallelism 2.

The first instance (vllm: TP 2 over the fake V100s' PCIe, no NVLink) is restarted with
STANDIN_NCCL_HANG_MS in its env file: like vLLM 0.8.5 whose first all-reduce never completes, the
stand-in never listens, and after the timeout each rank's NCCL watchdog logs the timed-out work in
torch 2.6's words and takes the process down (exit 134); systemd restarts it, and it hangs again.
While it hangs, the admin's own read-only playbook (playbooks/doctor.yml, in check mode) must read
the fault from the unit's real journal and say gated(nccl), with the watchdog line as evidence and
the NCCL settings to try in order (reliability.md, appendix A: F14 gated(nccl) with suggested
overrides). The second instance (vllm-b, TP 1) has no collective and must stay healthy.

The env file is restored afterwards, whatever happened, and the server answers again, so that
``molecule verify`` can run again.
"""

import json
import os
import shutil
import pytest

testinfra_hosts = ["vllm_hosts"]

UNIT = "vllm.service"
ENV_FILE = "/etc/vllm/vllm.env"
SAVED = "/root/vllm.env.before-f14"
# Long enough that the doctor reads the journal while the server hangs for the second time (one
# watchdog timeout already logged), short enough to stay far from the unit's start limit (5 in 600 s).
HANG_MS = 20000
WATCHDOG = "Watchdog caught collective operation timeout"
DIAGNOSE = "Diagnose the five failures for each instance (read-only)"


def _journal_since(host, since):
    return host.check_output("journalctl --unit %s --no-pager --output cat --since %s", UNIT, "@" + since)


@pytest.fixture(scope="module")
def hanging(host, serve_again, wait_for):
    """The first instance restarted with the hang; yields (since, journal text with the watchdog lines).
    Restores the env file and the serving server afterwards."""
    host.check_output("cp -p %s %s", ENV_FILE, SAVED)
    try:
        host.check_output("sh -c %s", "printf 'STANDIN_NCCL_HANG_MS=%d\\n' >> %s" % (HANG_MS, ENV_FILE))
        since = host.check_output("date +%s")
        host.check_output("systemctl reset-failed %s", UNIT)
        host.check_output("systemctl restart %s", UNIT)

        def watchdog_logged():
            text = _journal_since(host, since)
            return text if WATCHDOG in text else ""

        text = wait_for("the NCCL watchdog's timeout in the journal of %s" % UNIT, watchdog_logged,
                        timeout=HANG_MS / 1000 + 60)
        yield since, text
    finally:
        host.check_output("mv -f %s %s", SAVED, ENV_FILE)
        serve_again()


@pytest.fixture(scope="module")
def doctor_run(hanging, run_playbook, project_dir, ephemeral_dir):
    """playbooks/doctor.yml in check mode while the server hangs; (run, fleet-report.json)."""
    report_dir = os.path.join(ephemeral_dir, "reports-f14")
    shutil.rmtree(report_dir, ignore_errors=True)
    run = run_playbook(os.path.join(project_dir, "playbooks", "doctor.yml"),
                       extra_vars={"fleet_report_dir": report_dir}, check=True)
    with open(os.path.join(report_dir, "fleet-report.json"), encoding="utf-8") as handle:
        return run, json.load(handle)


def _diagnosis(run, host, instance):
    name = host.backend.get_hostname()
    looped = run.task(DIAGNOSE, name)["hosts"][name]["results"]
    runs = [r for r in looped if r["__doctor_instance"] == instance]
    assert len(runs) == 1, [r["__doctor_instance"] for r in looped]
    return runs[0]["doctor"]


def test_the_hang_is_real_the_server_never_listens_and_dies_like_torch(host, hanging, wait_for):
    """The unit's journal has each rank's watchdog timeout and the abort; nothing listens on the port."""
    since, text = hanging
    assert "[Rank 0] %s" % WATCHDOG in text and "[Rank 1] %s" % WATCHDOG in text, text[-3000:]
    assert "terminate called after throwing an instance of 'c10::DistBackendError'" in text, text[-3000:]
    assert "Uvicorn running" not in text, "the hanging server listened"

    # The process went down with SIGABRT's status, and systemd took it as a failure to restart. systemd logs
    # the exit after the abort's lines (the docker client passes the status on), so it is awaited: on a busy
    # machine it came a moment after the watchdog line that the fixture waits for (CI on 54f877f).
    def exit_logged():
        journal = host.check_output("journalctl --unit %s --no-pager --since @%s", UNIT, since)
        return journal if "status=134" in journal else ""

    assert "status=134" in wait_for("systemd's exit status 134 of %s" % UNIT, exit_logged, timeout=60)


def test_doctor_says_gated_nccl_from_the_real_journal(host, doctor_run, secret_canaries):
    """The doctor's tensor_parallel_pcie check: problem, gated(nccl), the watchdog line as evidence, the
    overrides to try in order; the host's status is problem; check mode changed nothing."""
    run, _report = doctor_run
    shown = "rc %s\n%s" % (run.returncode, run.stderr[-3000:])
    for canary in secret_canaries:
        shown = shown.replace(canary, "<secret>")
    assert run.returncode == 0, shown
    assert run.changed_tasks(skip_plays=["Add the doctor section to the fleet report"]) == []
    doctor = _diagnosis(run, host, "vllm")
    assert doctor["status"] == "problem", doctor
    assert "gated(nccl)" in doctor["journal_states"], doctor["journal_states"]
    tp = [f for f in doctor["findings"] if f["check"] == "tensor_parallel_pcie"][0]
    assert tp["status"] == "problem", tp
    assert tp["evidence"]["state"] == "gated(nccl)", tp["evidence"]
    assert tp["evidence"]["hang"]["fault"] == "nccl_timeout", tp["evidence"]["hang"]
    assert WATCHDOG in tp["evidence"]["hang"]["text"], tp["evidence"]["hang"]
    assert "tensor_parallel_size 2" in tp["cause"], tp["cause"]
    assert tp["fix"].startswith("try in this order, one change and one restart at a time: 1) NCCL_P2P_DISABLE"), tp["fix"]
    assert "--disable-custom-all-reduce" in tp["fix"], tp["fix"]
    # The hang is not blamed on the model's memory, the kernels or the CPU. (gpu_in_container is this
    # scenario's own problem, not the hang's: its host has no NVIDIA Container Toolkit, only fake GPUs.)
    others = dict((f["check"], f["status"]) for f in doctor["findings"])
    assert [others[c] for c in ("illegal_instruction", "no_kernel_image", "out_of_memory")] == ["healthy"] * 3, others


def test_the_report_names_the_hang_and_the_tp1_instance_stays_healthy(host, doctor_run):
    """The fleet report's doctor section says problem for the host; vllm-b (TP 1) shows no hang and no fault."""
    run, report = doctor_run
    entry = [h for h in report["doctor"]["hosts"] if h["host"] == host.backend.get_hostname()]
    assert len(entry) == 1 and entry[0]["status"] == "problem", report["doctor"]
    second = _diagnosis(run, host, "vllm-b")
    statuses = dict((f["check"], f["status"]) for f in second["findings"])
    assert statuses["tensor_parallel_pcie"] in ("healthy", "not_applicable"), statuses
    assert [statuses[c] for c in ("illegal_instruction", "no_kernel_image", "out_of_memory")] == ["healthy"] * 3, statuses
    assert second["journal_states"] == [], second["journal_states"]
