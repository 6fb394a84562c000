"""site_rollout, after the rollout: the read-only playbooks on the fleet it left.

- playbooks/doctor.yml, in check mode: the canary (2x V100, Docker and the fake toolkit from the
  container_runtime role, the stand-in serving) is healthy on all five checks, its --gpus test
  container seeing both fake GPUs (the fake toolkit's hook mounts the fake nvidia-smi, as the real
  one mounts the driver's); the refused P100 host, which the rollout never touched, has a problem
  named with its fix (no Docker, no toolkit); the gateway says why it keeps the rolled-back canary out
  of rotation. Nothing changes on any host; the report on the
  controller gets a doctor section and keeps the rollout's outcomes.
- playbooks/benchmark.yml, twice: the first run saves each serving instance's baseline, the second
  compares with it (A/B); each host gets a chart (a valid PNG) that the report links; the refused
  host says why there is nothing to measure.
Both write into a copy of the side effect's report (reports-ops/), so the report checks of
test_rollout_report.py read the rollout's own report. No secret appears in their output.
"""

import json
import os
import shutil
import struct
import zlib

import pytest

CANARY = "rollout-canary"
SECOND = "rollout-second"
P100 = "rollout-p100"
GATEWAY = "rollout-gateway"
BENCH = {"benchmark_concurrency": [1, 4], "benchmark_runs": 2, "benchmark_max_tokens": 16}


def _masked(text, canaries):
    for secret in canaries:
        text = text.replace(secret, "<redacted>")
    return text


def _shown(run, canaries):
    return _masked("rc %s\n%s\n%s" % (run.returncode, run.stdout[-6000:], run.stderr[-3000:]), canaries)


@pytest.fixture(scope="module")
def ops_dirs(ephemeral_dir):
    """(report dir, results dir): a copy of the rollout's report, and an empty results directory."""
    reports = os.path.join(ephemeral_dir, "reports-ops")
    results = os.path.join(ephemeral_dir, "benchmark-results")
    for path in (reports, results):
        shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(os.path.join(ephemeral_dir, "reports"), reports)
    return reports, results


def _report(report_dir, canaries):
    with open(os.path.join(report_dir, "fleet-report.json"), encoding="utf-8") as handle:
        doc = json.loads(_masked(handle.read(), canaries))
    with open(os.path.join(report_dir, "fleet-report.md"), encoding="utf-8") as handle:
        markdown = _masked(handle.read(), canaries)
    return doc, markdown


@pytest.fixture(scope="module")
def doctor_run(run_playbook, project_dir, ops_dirs):
    return run_playbook(os.path.join(project_dir, "playbooks", "doctor.yml"),
                        extra_vars={"fleet_report_dir": ops_dirs[0]}, check=True)


@pytest.fixture(scope="module")
def bench_runs(run_playbook, project_dir, ops_dirs, doctor_run):
    playbook = os.path.join(project_dir, "playbooks", "benchmark.yml")
    extra = dict(BENCH, fleet_report_dir=ops_dirs[0], benchmark_results_dir=ops_dirs[1])
    return run_playbook(playbook, extra_vars=extra), run_playbook(playbook, extra_vars=extra)


def _doctor_host(doc, name):
    found = [h for h in doc["doctor"]["hosts"] if h["host"] == name]
    assert len(found) == 1, [h["host"] for h in doc["doctor"]["hosts"]]
    return found[0]


def test_doctor_ran_in_check_mode_and_changed_nothing(doctor_run, secret_canaries):
    assert doctor_run.returncode == 0, _shown(doctor_run, secret_canaries)
    stats = doctor_run.data["stats"]
    assert sorted(stats) == [CANARY, GATEWAY, P100, SECOND]
    assert all(s["failures"] == 0 for s in stats.values()), stats
    # Nothing changed on a host; the report play writes files on the controller only.
    assert doctor_run.changed_tasks(skip_plays=["Add the doctor section to the fleet report"]) == []


def test_doctor_says_the_canary_is_healthy(doctor_run, ops_dirs, secret_canaries):
    doc, markdown = _report(ops_dirs[0], secret_canaries)
    canary = _doctor_host(doc, CANARY)
    findings = canary["instances"][0]["findings"]
    shown = json.dumps([(f["check"], f["status"], f["cause"], f["fix"]) for f in findings], indent=1)
    assert canary["status"] == "healthy", shown
    assert [f["check"] for f in findings] == ["gpu_in_container", "illegal_instruction", "no_kernel_image",
                                              "out_of_memory", "tensor_parallel_pcie"]
    assert all(f["status"] in ("healthy", "not_applicable") for f in findings), shown
    gpu = findings[0]
    assert gpu["cause"].startswith("A --gpus all container lists the host's 2 GPU(s)"), gpu["cause"]
    assert "### %s: healthy" % CANARY in markdown


def test_doctor_says_why_the_gateway_keeps_the_rolled_back_canary_out(doctor_run, ops_dirs, secret_canaries):
    doc, markdown = _report(ops_dirs[0], secret_canaries)
    findings = dict((f["server"], f) for f in doc["gateway"]["doctor"])
    canary, second = findings["rollout-canary-vllm"], findings["rollout-second-vllm"]
    assert canary["in_rotation"] is False and canary["status"] == "MAINT", canary
    assert "rollout failed or was rolled back" in canary["cause"] and "run site.yml again" in canary["fix"], canary
    assert second["in_rotation"] is True, second
    assert "1 of 2 backend server(s) in rotation" in markdown
    assert "model_quasar/rollout-canary-vllm (MAINT): kept out of rotation" in doctor_run.stdout


def test_doctor_names_the_untouched_p100_hosts_problem_and_fix(doctor_run, ops_dirs, secret_canaries):
    doc, markdown = _report(ops_dirs[0], secret_canaries)
    p100 = _doctor_host(doc, P100)
    gpu = p100["instances"][0]["findings"][0]
    assert p100["status"] == "problem" and gpu["status"] == "problem", gpu
    assert "Docker is not installed" in gpu["cause"], gpu["cause"]
    assert "labfleet.vllm.container_runtime role" in gpu["fix"], gpu["fix"]
    assert "| gpu_in_container | **problem** | " in markdown[markdown.index("### %s: problem" % P100):]


def test_the_report_keeps_the_rollouts_outcomes(doctor_run, ephemeral_dir, ops_dirs, secret_canaries):
    doc, _markdown = _report(ops_dirs[0], secret_canaries)
    rollout, _md = _report(os.path.join(ephemeral_dir, "reports"), secret_canaries)
    assert doc["hosts"] == rollout["hosts"] and doc["mode"] == "rollout"
    assert doc["doctor"]["summary"]["by_status"] == {"healthy": 2, "problem": 1}, doc["doctor"]["summary"]


def _png_size(path):
    with open(path, "rb") as handle:
        data = handle.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "%s is not a PNG" % path
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and zlib.crc32(data[12:16 + length]) & 0xffffffff == struct.unpack(
        ">I", data[16 + length:20 + length])[0], "%s: bad IHDR chunk" % path
    return struct.unpack(">II", data[16:24])


def test_benchmark_saves_a_baseline_then_compares_with_it(bench_runs, ops_dirs, secret_canaries):
    first, second = bench_runs
    assert first.returncode == 0, _shown(first, secret_canaries)
    assert second.returncode == 0, _shown(second, secret_canaries)
    for name in (CANARY, SECOND):
        folder = os.path.join(ops_dirs[1], name, "vllm")
        with open(os.path.join(folder, "baseline.json"), encoding="utf-8") as handle:
            baseline = json.load(handle)
        with open(os.path.join(folder, "latest.json"), encoding="utf-8") as handle:
            latest = json.load(handle)
        assert [lv["concurrency"] for lv in latest["levels"]] == [1, 4]
        assert all(lv["failed"] == 0 and lv["requests"] == 2 * lv["concurrency"] for lv in latest["levels"])
        assert latest["measured_at"] >= baseline["measured_at"]
        assert len(os.listdir(os.path.join(folder, "history"))) >= 1
        # The deployed flags, read from the running container (names without dashes).
        assert latest["image_digest"].startswith("sha256:") and latest["flags"]["served-model-name"] == "quasar"
    doc, _markdown = _report(ops_dirs[0], secret_canaries)
    canary = [h for h in doc["benchmark"]["hosts"] if h["host"] == CANARY][0]
    inst = canary["instances"][0]
    assert inst["status"] == "measured" and inst["baseline"]["status"] == "kept", inst
    assert inst["comparison"]["compared"] is True, inst["comparison"]


def test_each_serving_host_has_a_chart_the_report_links(bench_runs, ops_dirs, secret_canaries):
    doc, markdown = _report(ops_dirs[0], secret_canaries)
    for name in (CANARY, SECOND):
        entry = [h for h in doc["benchmark"]["hosts"] if h["host"] == name][0]
        assert entry["chart"] == "benchmarks/%s.png" % name
        assert _png_size(os.path.join(ops_dirs[0], entry["chart"])) == (1500, 480)
        assert "![benchmark of %s: TTFT and throughput vs concurrency, baseline vs now](benchmarks/%s.png)" % (
            name, name) in markdown
    p100 = [h for h in doc["benchmark"]["hosts"] if h["host"] == P100][0]
    assert p100["chart"] is None and "the gate refused this host (COMPUTE_CAPABILITY_TOO_LOW" in p100["error"]
    with open(os.path.join(ops_dirs[0], "fleet-report.html"), encoding="utf-8") as handle:
        assert '<img src="benchmarks/%s.png"' % CANARY in handle.read()


def test_no_secret_in_the_output_of_either(doctor_run, bench_runs, secret_canaries):
    for run in (doctor_run,) + tuple(bench_runs):
        leaked = [s for s in secret_canaries if s in run.stdout or s in run.stderr]
        assert not leaked, "a secret is in the output of a read-only playbook"
