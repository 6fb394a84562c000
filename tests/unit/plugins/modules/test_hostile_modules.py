# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Hostile input through the entry points of deploy_gate, host_facts and nvidia_driver_plan (issue 13):
each ends with a result or fail_json naming the field, never a traceback or a wait without end."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.labfleet.vllm.plugins.modules import deploy_gate, host_facts, nvidia_driver_plan

V100 = {"name": "Tesla V100-PCIE-32GB", "compute_capability": "7.0", "memory_total_mib": 32768}
# vllm/vllm-openai:v0.8.5 and Llama-3.1-8B-Instruct, as in test_deploy_gate.py.
IMAGE = {"cuda_version": "12.4.1", "arch_list": "7.0 7.5 8.0 8.6 8.9 9.0+PTX", "vllm_version": "0.8.5",
         "require_cuda": "cuda>=12.4 brand=tesla,driver>=470,driver<471"}
MODEL = {"weight_bytes": 16060522496, "num_hidden_layers": 32, "num_key_value_heads": 8, "head_dim": 128,
         "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}


class _Exit(Exception):
    def __init__(self, kind, result):
        Exception.__init__(self, kind)
        self.kind = kind
        self.result = result


def _exit_json(self, **kwargs):
    raise _Exit("exit", kwargs)


def _fail_json(self, msg, **kwargs):
    kwargs["msg"] = msg
    raise _Exit("fail", kwargs)


def run_module(module, args):
    with patch_module_args(args), \
            mock.patch.object(basic.AnsibleModule, "exit_json", _exit_json), \
            mock.patch.object(basic.AnsibleModule, "fail_json", _fail_json):
        try:
            module.main()
        except _Exit as done:
            return done.kind, done.result
    raise AssertionError("the module returned without exit_json or fail_json")


def gate(**changes):
    args = {"gpus": [V100, V100], "driver_version": "550.54.14", "image": IMAGE, "model": MODEL, "nvlink": False}
    args.update(changes)
    return run_module(deploy_gate, args)


def test_deploy_gate_refuses_the_issue_cases_naming_the_field():
    kind, result = gate(driver_version=u"\uff15\uff15\uff10.54.14")
    assert kind == "fail" and "driver_version" in result["msg"]
    kind, result = gate(vllm={"max_model_len": "32768\nExecStartPre=/bin/sh"})
    assert kind == "fail" and "vllm.max_model_len" in result["msg"]
    kind, result = gate(vllm={"gpu_memory_utilization": "nan"})
    assert kind == "fail" and "vllm.gpu_memory_utilization" in result["msg"]


@pytest.mark.parametrize("path", ["/srv/models/llama\x00", "/srv/models/\nllama"])
def test_deploy_gate_with_a_control_character_in_model_path_fails_cleanly(path):
    kind, result = gate(request={"model_path": path, "image": "vllm/vllm-openai:v0.8.5"})
    assert kind == "fail", result
    assert "request.model_path" in result["msg"] and "control characters" in result["msg"]
    assert deploy_gate.measure_fp16_copy({"model_path": path}) is None
    assert deploy_gate.measure_gptq_copy({"model_path": path}) is None


def test_host_facts_refuses_special_files_instead_of_hanging(tmp_path):
    fifo = str(tmp_path / "cpuinfo")
    os.mkfifo(fifo)
    kind, result = run_module(host_facts, {"cpuinfo_path": fifo})
    assert kind == "fail" and "not a regular file" in result["msg"] and "cpuinfo_path" in result["msg"]
    if os.path.exists("/dev/zero"):
        kind, result = run_module(host_facts, {"cpuinfo_path": "/dev/zero"})
        assert kind == "fail" and "not a regular file" in result["msg"]


def test_host_facts_refuses_a_disk_path_with_a_newline(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: avx avx2\n")
    kind, result = run_module(host_facts, {"cpuinfo_path": str(cpuinfo), "disk_paths": {"model": "/srv/\nmodels"}})
    assert kind == "fail" and "disk_paths.model" in result["msg"] and "control characters" in result["msg"]


def test_nvidia_driver_plan_answers_hostile_input_with_an_error():
    request = {"command": "plan", "distribution": ["Debian"], "distribution_major_version": "12", "branch": "550"}
    kind, result = run_module(nvidia_driver_plan, {"request": request})
    assert kind == "exit" and "is not supported by the nvidia_driver role" in result["answer"]["error"]
    step = {"action": "install", "branch": u"\uff15\uff15\uff10", "version": None, "kernel_module": "proprietary",
            "source": "cuda_repo", "distro": "debian12", "installed": None}
    request = dict(request, distribution="Debian", step=step)
    kind, result = run_module(nvidia_driver_plan, {"request": request})
    assert kind == "exit" and "preflight_deployment.driver.branch" in result["answer"]["error"]
    kind, result = run_module(nvidia_driver_plan, {"request": dict(request, step=dict(step, action="upgrade"))})
    assert kind == "exit" and "the preflight's driver step says 'upgrade'" in result["answer"]["error"]
    request = dict(request, command="assess", branch="550", dpkg_query=12)
    kind, result = run_module(nvidia_driver_plan, {"request": request})
    assert kind == "exit" and result["answer"]["error"].startswith("dpkg_query: expected")
