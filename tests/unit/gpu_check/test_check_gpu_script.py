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
