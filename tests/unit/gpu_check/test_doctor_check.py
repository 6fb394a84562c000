# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""make check-gpu's doctor stage (tests/gpu/doctor_check.py): did the doctor run and see the GPUs nvidia-smi
lists? Reports shaped as roles/fleet_report writes them for playbooks/doctor.yml."""

from __future__ import absolute_import, division, print_function

import json
import os
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "gpu"))

import doctor_check  # noqa: E402  pylint: disable=wrong-import-position

SMI = "NVIDIA H200, 9.0\n"


def report(models=("NVIDIA H200",), ccs=("9.0",), count=1, state="ok", doctor=True):
    doc = {"report_format": 1, "hosts": [{
        "host": "localhost", "state": state, "backend": "nvml", "gpu_count": count, "gpu_models": list(models),
        "compute_capabilities": list(ccs), "driver_version": "570.124.06", "cuda_driver_version": "12.8",
        "msg": "Found 1 NVIDIA GPU(s) via NVML", "verdict": "refused", "serving_path": "fp16_fallback",
        "reasons": [{"code": "GPU_RUNTIME_BLOCKED", "message": "install nvidia-container-toolkit"}]}]}
    if doctor:
        doc["doctor"] = {"hosts": [{"host": "localhost", "status": "problem", "instances": [{"findings": [
            {"check": "gpu_in_container", "status": "problem", "cause": "No Docker engine answers. " * 20},
            {"check": "no_kernel_image", "status": "healthy", "cause": "the arch list has SASS for 9.0"},
        ]}]}], "summary": {}}
    return doc


def test_the_doctor_identified_the_gpu():
    ok, lines = doctor_check.judge(report(), doctor_check.read_smi(SMI), docker=False)
    assert ok, lines
    assert lines[0].startswith("probe: state ok via nvml; 1 GPU(s): NVIDIA H200, compute capability 9.0")
    assert "gate: refused, serving path fp16_fallback (reasons: GPU_RUNTIME_BLOCKED)" in lines
    docker_line = [line for line in lines if line.strip().startswith("gpu_in_container")][0]
    assert "needs Docker, which this machine lacks" in docker_line and docker_line.endswith("...")
    assert any(line.strip() == "no_kernel_image: healthy: the arch list has SASS for 9.0" for line in lines)


def test_with_docker_its_checks_are_shown_plainly():
    _ok, lines = doctor_check.judge(report(), doctor_check.read_smi(SMI), docker=True)
    assert not any("needs Docker" in line for line in lines)


def test_what_the_doctor_did_not_see_is_named():
    smi = doctor_check.read_smi(SMI)
    for doc, words in ((report(models=("Tesla V100-PCIE-32GB",)), "GPU model"),
                       (report(ccs=("7.0",)), "compute capability"),
                       (report(count=2), "counted 2"),
                       (report(state="no_gpu"), "state is no_gpu"),
                       (report(doctor=False), "no doctor section")):
        ok, lines = doctor_check.judge(doc, smi)
        assert not ok and any(line.startswith("NOT IDENTIFIED") and words in line for line in lines), (words, lines)
    ok, lines = doctor_check.judge({"hosts": []}, smi)
    assert not ok and lines == ["the report lists no host localhost"]


def test_read_smi_takes_names_with_commas():
    assert doctor_check.read_smi("A, B GPU, 8.6\n\nNVIDIA H200, 9.0\n") == [("A, B GPU", "8.6"), ("NVIDIA H200", "9.0")]


def test_main(tmp_path, capsys):
    (tmp_path / "report.json").write_text(json.dumps(report()))
    (tmp_path / "smi.csv").write_text(SMI)
    assert doctor_check.main([str(tmp_path / "report.json"), str(tmp_path / "smi.csv"), "--docker", "no"]) == 0
    assert "doctor: problem" in capsys.readouterr().out
    (tmp_path / "smi.csv").write_text("NVIDIA H100 80GB HBM3, 9.0\n")
    assert doctor_check.main([str(tmp_path / "report.json"), str(tmp_path / "smi.csv")]) == 1
    assert doctor_check.main([str(tmp_path / "missing.json"), str(tmp_path / "smi.csv")]) == 2
