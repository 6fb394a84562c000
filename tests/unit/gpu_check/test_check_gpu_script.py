# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""scripts/check-gpu.sh (make check-gpu) on machines without a GPU: it skips at once with the reason and exit
0; with the fake nvidia-smi (tests/fake_gpu/) it runs its gpu_facts stage through Ansible and judges the
module's answers, NVML skipped for want of libnvidia-ml."""

from __future__ import absolute_import, division, print_function

import json
import os
import subprocess

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SCRIPT = os.path.join(REPO, "scripts", "check-gpu.sh")
FAKE_SMI = os.path.join(REPO, "tests", "fake_gpu", "nvidia-smi")
SCENARIOS = os.path.join(REPO, "tests", "fake_gpu", "scenarios")


def run(tmp_path, env=None, smi=None, timeout=120):
    """The script with its results in tmp_path/work and, when ``smi`` names a scenario, the fake nvidia-smi
    first on PATH; returns (exit status, output, the summary JSON)."""
    work = tmp_path / "work"
    environ = dict(os.environ, GPU_CHECK_WORK=str(work), OUT=str(tmp_path / "out"))
    environ.pop("PYTHON", None)
    if smi is not None:
        bindir = tmp_path / "bin"
        bindir.mkdir(exist_ok=True)
        link = bindir / "nvidia-smi"
        if not link.exists():
            link.symlink_to(FAKE_SMI)
        environ["PATH"] = "%s:%s" % (bindir, environ["PATH"])
        environ["LABFLEET_FAKE_GPU_DIR"] = os.path.join(SCENARIOS, smi)
    environ.update(env or {})
    proc = subprocess.run(["bash", SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=environ,
                          timeout=timeout, cwd=str(tmp_path), check=False)
    with open(str(work / "check-gpu.json")) as handle:
        summary = json.load(handle)
    return proc.returncode, proc.stdout.decode(), summary


def test_no_nvidia_smi_skips_at_once_with_the_reason(tmp_path):
    rc, out, summary = run(tmp_path, env={"GPU_CHECK_NVIDIA_SMI": "nvidia-smi-not-installed-here"})
    assert rc == 0
    assert out.strip() == ("SKIPPED: no NVIDIA GPU: nvidia-smi-not-installed-here not found (no NVIDIA driver "
                           "utilities on PATH)")
    assert summary["result"] == "skipped" and summary["stages"] == []
    assert summary["skip_reason"].startswith("no NVIDIA GPU: nvidia-smi-not-installed-here not found")
    out_dir = tmp_path / "out"
    assert (out_dir / "check-gpu.log").read_text() == out and json.loads((out_dir / "check-gpu.json").read_text())


@pytest.mark.parametrize("scenario,words", [
    ("not_loaded", "-L failed (exit 9): NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"),
    ("no_gpu", "-L failed (exit 6): No devices were found"),
    ("mismatch", "-L failed (exit 18): Failed to initialize NVML: Driver/library version mismatch"),
])
def test_a_failing_nvidia_smi_skips_with_its_words(tmp_path, scenario, words):
    rc, out, summary = run(tmp_path, smi=scenario)
    assert rc == 0 and out.startswith("SKIPPED: no NVIDIA GPU: ") and words in out, out
    assert summary["result"] == "skipped"


def test_the_work_folder_is_never_the_checkout(tmp_path):
    proc = subprocess.run(["bash", SCRIPT], env=dict(os.environ, GPU_CHECK_WORK=REPO), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=60, check=False)
    assert proc.returncode == 2 and b"would be emptied" in proc.stdout
    assert os.path.exists(os.path.join(REPO, "README.md"))


@pytest.mark.skipif(not os.path.exists(os.path.join(REPO, ".venv", "bin", "ansible-playbook")),
                    reason="the stage runs the module with the project venv's ansible-playbook (make venv)")
def test_gpu_facts_stage_on_the_fake_gpu(tmp_path):
    """The whole gpu_facts stage on the recorded 2x V100 host: collect, the module through ansible-playbook for
    both backends, the comparison; NVML is skipped (no libnvidia-ml here) and nvidia-smi passes."""
    rc, out, summary = run(tmp_path, smi="v100x2_pcie", env={"GPU_CHECK_STAGES": "gpu_facts"}, timeout=300)
    assert rc == 0, out
    stages = dict((stage["stage"], stage) for stage in summary["stages"])
    assert stages["gpu_facts/nvidia_smi"]["result"] == "PASS", out
    assert stages["gpu_facts/nvml"]["result"] == "SKIP" and "libnvidia-ml" in stages["gpu_facts/nvml"]["reason"]
    assert summary["result"] == "passed" and "Tesla V100-PCIE-32GB" in summary["gpu"]
    assert "nvidia_smi  topology             0-1  SYS" in out
    assert (tmp_path / "out" / "check-gpu" / "gpu_facts" / "compare-nvidia_smi.json").exists()


# The daemon_reload stage (F10) against a fake docker and a fake systemctl: docker's `exec ... nvidia-smi -L`
# answers with the recorded GPU list until the fake daemon-reload has "rewritten the device cgroup" (when
# FAKE_F10_LOSE is set), then with NVML's error, as a container without the mitigation does.
FAKE_DOCKER = r"""#!/bin/sh
state=${FAKE_F10_STATE:?}
case "$1" in
  info) exit 0 ;;
  image) exit 0 ;;
  run) echo "$*" >"$state/run"; echo 0123456789ab; exit 0 ;;
  exec)
    if [ -e "$state/lost" ]; then echo "Failed to initialize NVML: Unknown Error"; exit 255; fi
    echo "GPU 0: Tesla V100-PCIE-32GB (UUID: GPU-a)"; echo "GPU 1: Tesla V100-PCIE-32GB (UUID: GPU-b)"; exit 0 ;;
  rm) echo "$*" >>"$state/rm"; exit 0 ;;
esac
exit 1
"""
FAKE_SYSTEMCTL = r"""#!/bin/sh
[ "$1" = daemon-reload ] || exit 1
echo reloaded >>"${FAKE_F10_STATE:?}/reloads"
if [ -n "$FAKE_F10_LOSE" ]; then : >"$FAKE_F10_STATE/lost"; fi
"""


def daemon_reload_stage(tmp_path, lose):
    state = tmp_path / "state"
    state.mkdir()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in (("docker", FAKE_DOCKER), ("systemctl", FAKE_SYSTEMCTL)):
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    env = {"GPU_CHECK_STAGES": "daemon_reload", "FAKE_F10_STATE": str(state), "GPU_CHECK_F10_WAIT_S": "0",
           "FAKE_F10_LOSE": "1" if lose else "", "PATH": "%s:%s" % (bindir, os.environ["PATH"])}
    rc, out, summary = run(tmp_path, smi="v100x2_pcie", env=env)
    return rc, out, dict((s["stage"], s) for s in summary["stages"]), state


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the stage runs systemctl daemon-reload only as root")


@needs_root
def test_daemon_reload_stage_passes_when_the_container_keeps_its_gpus(tmp_path):
    rc, out, stages, state = daemon_reload_stage(tmp_path, lose=False)
    assert rc == 0, out
    stage = stages["daemon_reload"]
    assert stage["result"] == "PASS" and "kept its 2 GPU(s) through systemctl daemon-reload" in stage["reason"], out
    assert (state / "reloads").read_text() == "reloaded\n"
    assert "--gpus all" in (state / "run").read_text() and "rm -f labfleet-gpu-check-f10-" in (state / "rm").read_text()


@needs_root
def test_daemon_reload_stage_fails_when_the_container_loses_its_gpus(tmp_path):
    rc, out, stages, state = daemon_reload_stage(tmp_path, lose=True)
    assert rc != 0, out
    stage = stages["daemon_reload"]
    assert stage["result"] == "FAIL", out
    assert "lost its GPUs (nvidia-smi -L exit 255: Failed to initialize NVML: Unknown Error)" in stage["reason"]
    assert "container_runtime role's mitigation" in stage["reason"]
    # The test container is removed, failed or not.
    assert "rm -f labfleet-gpu-check-f10-" in (state / "rm").read_text()


def test_daemon_reload_stage_skips_without_docker(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "docker").write_text("#!/bin/sh\nexit 1\n")
    (bindir / "docker").chmod(0o755)
    rc, out, summary = run(tmp_path, smi="v100x2_pcie", env={"GPU_CHECK_STAGES": "daemon_reload",
                                                             "PATH": "%s:%s" % (bindir, os.environ["PATH"])})
    stage = dict((s["stage"], s) for s in summary["stages"])["daemon_reload"]
    assert rc == 0 and stage["result"] == "SKIP" and "Docker does not answer here" in stage["reason"], out
