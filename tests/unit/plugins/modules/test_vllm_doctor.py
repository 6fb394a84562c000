# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""vllm_doctor: what it reads on a host (plugins/module_utils/reporting/_doctor_collect.py, against a recorded
host) and the module end to end: the reference host healthy, the broken-runtime host named with the
fix, secrets never in the result, every command bounded, hostile options refused."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import stat
import sys
from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.labfleet.vllm.plugins.module_utils.reporting import _doctor_collect as C
from ansible_collections.labfleet.vllm.plugins.modules import vllm_doctor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils"))
import test_doctor as TD  # noqa: E402  (the doctor core's fixtures: the reference host and its plan)

SECRET = "sk-doctor-canary-5e1f"
ENV_FILE = "HF_HUB_OFFLINE=1\nNCCL_P2P_DISABLE=1\nVLLM_API_KEY=%s\nHF_TOKEN=hf_doctor_canary\n" % SECRET


class FakeHost(object):
    """A recorded host: files, directories, device nodes and command answers. ``answers`` maps a
    command (the argv after the tool, joined by spaces, matched by prefix) to (rc, out, err, timed_out)."""

    def __init__(self, files=None, dirs=None, nodes=None, tools=None, answers=None):
        self.files = dict(files or {})
        self.dirs = dict(dirs or {})
        self.nodes = dict(nodes or {})
        self.tools = set(tools or [])
        self.answers = dict(answers or {})
        self.links = set()
        self.calls = []

    def which(self, name):
        return "/usr/bin/" + name if name in self.tools else None

    def run(self, argv, limit):
        self.calls.append((list(argv), limit))
        tool = os.path.basename(argv[0])
        line = " ".join([tool] + list(argv[1:]))
        for prefix in sorted(self.answers, key=len, reverse=True):
            if line.startswith(prefix):
                return self.answers[prefix]
        return 1, "", "%s: no recorded answer for %r" % (tool, line), False

    def read_text(self, path):
        if path not in self.files:
            raise IOError("No such file: %s" % path)
        value = self.files[path]
        if isinstance(value, Exception):
            raise value
        return value

    def listdir(self, path):
        if path == "/dev":
            return sorted(set(list(self.nodes) + ["null", "zero", "char"]))
        if path not in self.dirs:
            raise OSError("No such directory: %s" % path)
        return list(self.dirs[path])

    def lstat(self, path):
        major, minor = self.nodes[path.rsplit("/", 1)[-1]]
        return _chr(major, minor)

    def exists(self, path):
        return path in self.files or path in self.dirs or path in self.links

    def collector(self, timeout=60):
        return C.Collector(self.run, self.which, read_text=self.read_text, listdir=self.listdir, lstat=self.lstat,
                           exists=self.exists, timeout=timeout)


def _chr(major, minor):
    class Info(object):
        st_mode = stat.S_IFCHR | 0o666
        st_rdev = os.makedev(major, minor)
    return Info()


def reference_host(plan_verdict):
    """The reference host after a rollout: the unit's journal, daemon.json with the nvidia runtime,
    device nodes with their /dev/char links, the running container, the image present."""
    argv = ["--model", "/model", "--served-model-name", "quasar"] + plan_verdict["instances"][0]["argv"] + \
        ["--port", "8000"]
    host = FakeHost(
        files={"/etc/docker/daemon.json": TD.NVIDIA_CTK_DAEMON_JSON, "/proc/cmdline": "BOOT_IMAGE=/vmlinuz ro quiet\n",
               "/etc/vllm/vllm.env": ENV_FILE},
        dirs={"/etc/cdi": []},
        nodes={"nvidia0": (195, 0), "nvidia1": (195, 1), "nvidiactl": (195, 255), "nvidia-uvm": (507, 0)},
        tools=["journalctl", "nvidia-smi", "docker", "lspci"],
        answers={
            "journalctl -u vllm.service": (0, "\n".join(TD.HEALTHY_JOURNAL) + "\n", "", False),
            "journalctl -k": (0, "2026-11-30T09:00:00+0000 gpu01 kernel: Linux version 6.1.0\n", "", False),
            "nvidia-smi topo -m": (0, "\tGPU0\tGPU1\nGPU0\t X \tSYS\nGPU1\tSYS\t X \n", "", False),
            "nvidia-smi topo -p2p r": (0, TD.TOPO_P2P_SYS, "", False),
            "lspci -vvv": (0, "3b:00.0 3D controller: NVIDIA Corporation GV100GL [Tesla V100 PCIe 32GB]\n", "", False),
            "docker container inspect": (0, json.dumps(argv) + "\n", "", False),
            "docker image inspect": (0, "sha256:0c5f\n", "", False),
            "docker run --rm --network none --gpus all": (0, TD.SMI_L, "", False),
        })
    host.links = set("/dev/char/%d:%d" % n for n in host.nodes.values())
    return host


# ------------------------------------------------------------------ the collector


def test_collect_reads_every_piece_of_the_reference_host():
    plan_verdict = TD.verdict(TD.LLAMA_8B, TD.REFERENCE_ARGS)
    host = reference_host(plan_verdict)
    raw, notes = C.collect(host.collector(), "vllm", image="vllm/vllm-openai:v0.8.5")
    assert raw["journal"].splitlines() == TD.HEALTHY_JOURNAL
    assert raw["daemon_json"] == TD.NVIDIA_CTK_DAEMON_JSON
    assert raw["dev_nodes"] == ["nvidia-uvm", "nvidia0", "nvidia1", "nvidiactl"] and raw["dev_char_missing"] == []
    assert raw["topo_p2p"] == TD.TOPO_P2P_SYS and raw["kernel_cmdline"].startswith("BOOT_IMAGE")
    assert raw["deployed_argv"][:2] == ["--model", "/model"]
    assert raw["gpu_test"] == {"rc": 0, "stdout": TD.SMI_L, "stderr": ""}
    assert raw["cdi_specs"] == [] and "ptx_jit_test" not in raw
    # The kernel log keeps only the lines that can matter (none here).
    assert raw["kernel_log"] == ""
    # The test container: removed when it ends, no network, nvidia-smi -L as entry point.
    runs = [argv for argv, _limit in host.calls if argv[1:3] == ["run", "--rm"]]
    assert len(runs) == 1 and runs[0][3:7] == ["--network", "none", "--gpus", "all"]
    assert runs[0][-3:] == ["nvidia-smi", "vllm/vllm-openai:v0.8.5", "-L"]
    # Every command ran under the time limit.
    assert all(limit == 60 for _argv, limit in host.calls)
    assert notes["journal"] == "read" and notes["gpu_test"] == "ran (exit 0)"


def test_missing_tools_files_and_links_are_noted_not_fatal():
    host = FakeHost(nodes={"nvidia0": (195, 0), "nvidiactl": (195, 255)}, tools=[])
    raw, notes = C.collect(host.collector(), "vllm", image="vllm/vllm-openai:v0.8.5")
    assert "journal" not in raw and "daemon_json" not in raw and "gpu_test" not in raw
    assert raw["dev_char_missing"] == ["/dev/char/195:0", "/dev/char/195:255"]
    assert notes["journal"] == "journalctl is not on this host's PATH"
    assert notes["daemon_json"] == "/etc/docker/daemon.json does not exist"
    assert notes["docker"] == "docker is not on this host's PATH"
    assert notes["topo_matrix"] == "nvidia-smi is not on this host's PATH"


def test_a_test_container_past_its_time_is_removed():
    plan_verdict = TD.verdict(TD.LLAMA_8B, TD.REFERENCE_ARGS)
    host = reference_host(plan_verdict)
    host.answers["docker run --rm --network none --gpus all"] = (-15, "", "", True)
    host.answers["docker rm -f"] = (0, "", "", False)
    raw, notes = C.collect(host.collector(timeout=7), "vllm", image="img:1", name_suffix="42")
    assert "gpu_test" not in raw
    assert notes["gpu_test"] == "the test container did not end within 7 s and was removed"
    assert ["/usr/bin/docker", "rm", "-f", "labfleet-doctor-gpus-42"] in [argv for argv, _l in host.calls]


def test_ptx_jit_test_only_when_asked_and_image_absent_means_no_container():
    plan_verdict = TD.verdict(TD.LLAMA_8B, TD.REFERENCE_ARGS)
    host = reference_host(plan_verdict)
    raw, _notes = C.collect(host.collector(), "vllm", image="img:1", ptx_jit_test=True)
    jit = [argv for argv, _l in host.calls if "CUDA_FORCE_PTX_JIT=1" in argv]
    assert len(jit) == 1 and "ptx_jit_test" in raw
    host = reference_host(plan_verdict)
    host.answers["docker image inspect"] = (1, "", "Error: No such image: img:1", False)
    raw, notes = C.collect(host.collector(), "vllm", image="img:1", ptx_jit_test=True)
    assert "gpu_test" not in raw and "ptx_jit_test" not in raw
    assert notes["image"] == "the image img:1 is not on this host, so no test container ran"
    assert not [argv for argv, _l in host.calls if argv[1:2] == ["run"]]


@pytest.mark.parametrize("name", ["", "vllm\nExecStartPre=/bin/sh", "../etc/passwd", "a b", "x" * 65, None, 3])
def test_instance_names_that_are_not_the_roles_are_refused(name):
    with pytest.raises(C.CollectError, match="instance must be"):
        C.check_instance_name(name)


def test_special_or_unreadable_files_are_noted():
    host = FakeHost(files={"/etc/docker/daemon.json": IOError("/etc/docker/daemon.json is not a regular file")})
    raw, notes = C.collect(host.collector(), "vllm")
    assert "daemon_json" not in raw
    assert notes["daemon_json"] == "/etc/docker/daemon.json could not be read: /etc/docker/daemon.json is not a regular file"


def test_gate_inputs_keep_evaluates_keys_and_judge_the_fp16_copy():
    model = {"weight_bytes": 5000000000, "param_count": 8000000000, "quant_method": "modelopt_fp4",
             "fp16_weight_bytes": 16000000000, "num_hidden_layers": 32}
    inputs = C.doctor_gate_inputs({"gpus": [], "model": model, "request": {"x": 1}, "policy": {"auto_fix": False}},
                                  {"serving_path": "fp16_fallback"})
    assert sorted(inputs) == ["gpus", "model", "policy_overrides"]
    assert inputs["model"]["weight_bytes"] == 16000000000 and inputs["model"]["quant_method"] is None
    repacked = C.doctor_gate_inputs({"gpus": [], "model": model}, {
        "serving_path": "gptq_repack", "serving": {"gptq_repack": {"group_size": 64, "repacked_bytes": 4300000000}}})
    assert (repacked["model"]["quant_method"], repacked["model"]["quant_group_size"]) == ("gptq", 64)
    assert repacked["model"]["weight_bytes"] == 4300000000 and repacked["model"]["torch_dtype"] == "float16"
    assert C.doctor_gate_inputs({"gpus": [], "model": model}, {"serving_path": "native"})["model"] == model
    assert C.doctor_gate_inputs({"gpus": []}, {}) == {}
    assert C.test_image({"deployment": {"image": "vllm/vllm-openai:v0.8.5"}}, {}) == "vllm/vllm-openai:v0.8.5"
    assert C.test_image({}, {"reference": "bad ref\n"}) is None


# ------------------------------------------------------------------ the module


class _Exit(Exception):
    pass


def _exit_json(self, **kwargs):
    kwargs.setdefault("failed", False)
    raise _Exit(kwargs)


def _fail_json(self, **kwargs):
    kwargs["failed"] = True
    raise _Exit(kwargs)


def run_module(args, host):
    with patch_module_args(args), \
            mock.patch.object(basic.AnsibleModule, "exit_json", _exit_json), \
            mock.patch.object(basic.AnsibleModule, "fail_json", _fail_json), \
            mock.patch.object(vllm_doctor, "Collector", lambda run, which, timeout: host.collector(timeout)):
        with pytest.raises(_Exit) as caught:
            vllm_doctor.main()
    return caught.value.args[0]


def test_module_on_the_reference_host_is_healthy_and_keeps_secrets_out():
    plan_verdict = TD.verdict(TD.LLAMA_8B, TD.REFERENCE_ARGS)
    host = reference_host(plan_verdict)
    result = run_module({"nvidia": TD.NVIDIA, "host": TD.HOST, "image": TD.IMAGE_085, "verdict": plan_verdict,
                         "gate_inputs": TD.gate_inputs(TD.LLAMA_8B)}, host)
    assert result["failed"] is False and result["changed"] is False
    assert result["doctor"]["status"] == "healthy", result["lines"]
    assert [line.split(":", 2)[:2] for line in result["lines"]] == [[c, " healthy"] for c in TD.D.CHECKS]
    # The env file is read for its NCCL_ variables; the key and the token never reach the result.
    assert result["doctor"]["findings"][4]["evidence"]["nccl_env"] == {"NCCL_P2P_DISABLE": "1"}
    text = json.dumps(result)
    assert SECRET not in text and "hf_doctor_canary" not in text
    assert result["collected"]["container_env"] == "read"


def test_module_on_the_broken_runtime_host_names_the_cause_and_the_fix():
    host = FakeHost(files={"/etc/docker/daemon.json": TD.BROKEN_DAEMON_JSON}, tools=["journalctl"],
                    answers={"journalctl": (0, "-- No entries --\n", "", False)})
    result = run_module({"nvidia": TD.NO_GPU, "host": {"cpu": TD.XEON_V4, "container": TD.CONTAINER_BROKEN}}, host)
    assert result["doctor"]["status"] == "problem" and result["doctor"]["instance"] is None
    first = result["lines"][0]
    assert first.startswith("gpu_in_container: problem: /etc/docker/daemon.json is not valid JSON")
    assert "Fix: 1) repair /etc/docker/daemon.json" in first and "nvidia-ctk runtime configure" in first


@pytest.mark.parametrize("args, message", [
    ({"journal_lines": 10}, "journal_lines must be from 50 to 100000"),
    ({"timeout": 0}, "timeout must be from 1 to 3600"),
    ({"instance": "vllm\nExecStartPre=/bin/true"}, "instance must be"),
    ({"docker": "docker\n--help"}, "docker must be"),
])
def test_module_refuses_hostile_options(args, message):
    result = run_module(dict({"nvidia": TD.NVIDIA}, **args), FakeHost())
    assert result["failed"] is True and message in result["msg"]


def test_cdi_specs_are_read_from_both_directories():
    host = FakeHost(files={"/etc/cdi/nvidia.yaml": "kind: nvidia.com/gpu\n", "/var/run/cdi/x.json": '{"kind": "a/b"}'},
                    dirs={"/etc/cdi": ["nvidia.yaml", "README"], "/var/run/cdi": ["x.json", "broken.yaml"]})
    raw, notes = C.collect(host.collector(), "vllm")
    assert raw["cdi_specs"] == [{"path": "/etc/cdi/nvidia.yaml", "text": "kind: nvidia.com/gpu\n"},
                                {"path": "/var/run/cdi/x.json", "text": '{"kind": "a/b"}'}]
    assert notes["cdi_specs"] == "read (2 spec(s))" and "could not be read" in notes["cdi_specs:/var/run/cdi/broken.yaml"]
