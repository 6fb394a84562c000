# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""labfleet.vllm.vllm_image_facts with docker replaced by recorded answers."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args  # ansible-core >= 2.19 (pinned)

from ansible_collections.labfleet.vllm.plugins.module_utils.probes import _image as I
from ansible_collections.labfleet.vllm.plugins.modules import vllm_image_facts

try:
    from unittest import mock
except ImportError:  # pragma: no cover
    import mock


FIX = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "image")
NOT_FOUND = (1, "[]", "Error response from daemon: no such image: %s: No such image: %s")


def fixture(name):
    with open(os.path.join(FIX, name)) as handle:
        return handle.read()


class Docker(object):
    """A fake docker CLI: answers by subcommand, records every argv."""

    def __init__(self, inspect=NOT_FOUND, probe=(0, "", ""), gpu=(0, "", ""), registry=(0, "", "")):
        self.answers = {"inspect": inspect, "probe": probe, "gpu": gpu, "registry": registry}
        self.calls = []

    def __call__(self, argv, **kwargs):
        self.calls.append(list(argv))
        if argv[1:3] == ["image", "inspect"]:
            kind = "inspect"
        elif argv[1] == "run":
            kind = "gpu" if "--gpus" in argv else "probe"
        elif argv[1] == "buildx":
            kind = "registry"
        else:
            raise AssertionError("unexpected docker call %r" % argv)
        rc, out, err = self.answers[kind]
        if "%s" in err:
            err = err % (argv[-1], argv[-1])
        return rc, out, err

    def kinds(self):
        return [("inspect" if c[1] == "image" else "registry" if c[1] == "buildx" else
                 "gpu" if "--gpus" in c else "probe") for c in self.calls]


def run(args, capsys, docker=None, bin_path="/usr/bin/docker"):
    docker = docker or Docker()
    with patch_module_args(args):
        with mock.patch.object(basic.AnsibleModule, "run_command", side_effect=docker), \
                mock.patch.object(basic.AnsibleModule, "get_bin_path", return_value=bin_path):
            with pytest.raises(SystemExit):
                vllm_image_facts.main()
    return json.loads(capsys.readouterr().out), docker


def warnings_of(result):
    return [w if isinstance(w, str) else json.dumps(w) for w in result.get("warnings") or []]


def present_0_8_5():
    return Docker(inspect=(0, fixture("inspect_vllm_v0.8.5.json"), ""), probe=(0, fixture("probe_vllm_v0.8.5.txt"), ""))


def test_present_image_is_inspected_and_probed(capsys):
    result, docker = run({"image": "vllm/vllm-openai:v0.8.5"}, capsys, present_0_8_5())
    image = result["image"]
    assert result["changed"] is False and not result.get("failed")
    assert (image["state"], image["profile_matched"], image["profile"]) == ("present", True, "vllm/vllm-openai:v0.8.5")
    assert image["profile_mismatches"] == [] and image["probe"]["ok"] is True
    assert image["gate"] == {"cuda_version": "12.4.0", "require_cuda": I.REQUIRE_CUDA_12_4,
                             "arch_list": ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0"],
                             "quantization_methods": I.QUANT_0_8_5, "vllm_version": "0.8.5"}
    assert docker.kinds() == ["inspect", "probe"]
    probe_argv = docker.calls[1]
    assert probe_argv[:6] == ["/usr/bin/docker", "run", "--rm", "--network", "none", "--label"]
    assert probe_argv[probe_argv.index("--entrypoint") + 1] == "python3"
    assert "sha256:" + "85" * 32 in probe_argv and "--gpus" not in probe_argv
    assert probe_argv[-3:] == ["-c", I.PROBE_SCRIPT, "300"]


def test_absent_image_returns_the_profile(capsys):
    result, docker = run({"image": "docker.io/vllm/vllm-openai:v0.19.1"}, capsys)
    image = result["image"]
    assert (image["state"], image["profile"]) == ("absent", "vllm/vllm-openai:v0.19.1")
    assert image["gate"]["cuda_version"] == "12.9.1" and "7.0" in image["gate"]["arch_list"]
    assert image["probe"] == {"ran": False, "reason": "the image is not on this host"}
    assert docker.kinds() == ["inspect"]
    assert image["profile_confidence"]["require_cuda"] == "inferred"


def test_absent_unknown_image_warns_and_returns_empty_gate(capsys):
    result = run({"image": "lab/vllm:custom"}, capsys)[0]
    assert not result.get("failed")
    assert set(result["image"]["gate"].values()) == {None}
    assert any("no shipped profile matches lab/vllm:custom" in w for w in warnings_of(result))


def test_no_docker_cli_still_answers_from_the_profile(capsys):
    result, docker = run({"image": "vllm/vllm-openai:v0.20.0"}, capsys, bin_path=None)
    image = result["image"]
    assert image["state"] == "docker_unavailable" and docker.calls == []
    assert "7.0" not in image["gate"]["arch_list"] and image["gate"]["vllm_version"] == "0.20.0"
    assert "docker CLI is not installed" in image["docker_error"]


def test_daemon_down(capsys):
    docker = Docker(inspect=(1, "", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
                                    "Is the docker daemon running?"))
    result = run({"image": "vllm/vllm-openai:v0.8.5"}, capsys, docker)[0]
    assert result["image"]["state"] == "docker_unavailable"
    assert "systemctl start docker" in result["image"]["docker_error"]
    assert result["image"]["gate"]["vllm_version"] == "0.8.5"


def test_probe_false_skips_the_container(capsys):
    docker = Docker(inspect=(0, fixture("inspect_vllm_v0.8.5.json"), ""))
    result = run({"image": "vllm/vllm-openai:v0.8.5", "probe": False}, capsys, docker)[0]
    assert docker.kinds() == ["inspect"]
    assert result["image"]["sources"]["quantization_methods"] == "profile"
    assert result["image"]["sources"]["cuda_version"] == "inspect"


def test_probe_failure_is_a_warning(capsys):
    docker = Docker(inspect=(0, fixture("inspect_vllm_v0.8.5.json"), ""),
                    probe=(127, "", "docker: Error response from daemon: failed to create shim task: OCI runtime "
                                    "create failed: exec: \"python3\": executable file not found in $PATH: unknown\n"
                                    "\nRun 'docker run --help' for more information\n"))
    result = run({"image": "vllm/vllm-openai:v0.8.5"}, capsys, docker)[0]
    image = result["image"]
    assert not result.get("failed") and image["probe"]["ok"] is False
    assert "no python3 on its PATH" in image["probe"]["error"]
    assert any("in-image probe" in w for w in warnings_of(result))
    assert image["sources"]["vllm_version"] == "profile"


def test_check_mode_runs_the_harmless_probe(capsys):
    result, docker = run({"image": "vllm/vllm-openai:v0.8.5", "_ansible_check_mode": True}, capsys, present_0_8_5())
    assert docker.kinds() == ["inspect", "probe"]
    assert result["changed"] is False and result["image"]["probe"]["ok"] is True


@pytest.mark.parametrize("answer,category,ok", [
    ((0, fixture("gpu_check_ok.stdout"), ""), "ok", True),
    ((0, fixture("gpu_check_no_kernel_image.stdout"), ""), "no_kernel_image", False),
    ((125, "", fixture("gpu_check_no_runtime.stderr")), "no_gpu_runtime", False),
])
def test_gpu_check(capsys, answer, category, ok):
    docker = present_0_8_5()
    docker.answers["gpu"] = answer
    result = run({"image": "vllm/vllm-openai:v0.8.5", "gpu_check": True}, capsys, docker)[0]
    gpu = result["image"]["gpu_check"]
    assert (gpu["category"], gpu["ok"]) == (category, ok)
    assert docker.kinds() == ["inspect", "probe", "gpu"]
    gpu_argv = docker.calls[2]
    assert gpu_argv[gpu_argv.index("--gpus") + 1] == "all" and "--rm" in gpu_argv
    assert any("GPU check" in w for w in warnings_of(result)) != ok


def test_gpu_check_needs_the_image(capsys):
    result, docker = run({"image": "vllm/vllm-openai:v0.8.5", "gpu_check": True}, capsys)
    assert result["image"]["gpu_check"] == {"ran": False, "reason": "the image is not on this host"}
    assert docker.kinds() == ["inspect"]


def test_registry_config_for_an_absent_image(capsys):
    docker = Docker(registry=(0, fixture("registry_index.json"), ""))
    with mock.patch.object(vllm_image_facts, "_host_platform", return_value="linux/amd64"):
        result = run({"image": "registry.example.org/ml/vllm-openai:2026.1", "registry_config": True}, capsys, docker)[0]
    image = result["image"]
    assert docker.kinds() == ["inspect", "registry"]
    assert docker.calls[1][2:6] == ["imagetools", "inspect", "--format", "{{json .}}"]
    assert image["registry"] == {"ran": True, "ok": True, "platform": "linux/amd64"}
    assert image["sources"]["cuda_version"] == "registry" and image["cuda_version"] == "12.9.1"
    assert image["vllm_arch_list"][0] == "7.0" and image["digest"] == "sha256:" + "ef" * 32
    assert not any("no shipped profile" in w for w in warnings_of(result))


def test_registry_config_without_buildx(capsys):
    docker = Docker(registry=(125, "", "unknown flag: --format\n\nUsage:  docker [OPTIONS] COMMAND [ARG...]\n"))
    result = run({"image": "vllm/vllm-openai:v0.8.5", "registry_config": True}, capsys, docker)[0]
    assert not result.get("failed")
    assert "docker-buildx-plugin" in result["image"]["registry"]["error"]
    assert result["image"]["sources"]["cuda_version"] == "profile"


def test_image_0_20_0_present_lacks_volta_and_hides_secrets(capsys):
    docker = Docker(inspect=(0, fixture("inspect_vllm_v0.20.0.json"), ""), probe=(0, fixture("probe_vllm_v0.20.0.txt"), ""))
    result = run({"image": "vllm/vllm-openai:v0.20.0"}, capsys, docker)[0]
    image = result["image"]
    assert "7.0" not in image["gate"]["arch_list"] and image["gate"]["arch_list"][0] == "7.5"
    assert image["sources"]["vllm_arch_list"] == "inspect:TORCH_CUDA_ARCH_LIST"
    assert "hf_placeholder_not_a_real_token" not in json.dumps(result)
    assert image["profile_mismatches"] == []


def test_profile_mismatch_is_warned(capsys):
    probe = fixture("probe_vllm_v0.8.5.txt").replace('"vllm_version": "0.8.5"', '"vllm_version": "0.8.5.post1"')
    docker = Docker(inspect=(0, fixture("inspect_vllm_v0.8.5.json"), ""), probe=(0, probe, ""))
    result = run({"image": "vllm/vllm-openai:v0.8.5"}, capsys, docker)[0]
    assert result["image"]["gate"]["vllm_version"] == "0.8.5.post1"
    assert any("shipped profile says vllm_version" in w for w in warnings_of(result))


@pytest.mark.parametrize("args,fragment", [
    ({"image": "Not A Ref"}, "whitespace"),
    ({"image": "vllm/vllm-openai:v0.8.5", "docker_bin": "/nonexistent/docker"}, "is not an executable file"),
    ({"image": "vllm/vllm-openai:v0.8.5", "probe_timeout": 0}, "probe_timeout"),
])
def test_misuse_fails_with_a_fix(capsys, args, fragment):
    result = run(args, capsys)[0]
    assert result["failed"] is True and fragment in result["msg"]


def test_garbage_from_docker_inspect_fails_cleanly(capsys):
    result = run({"image": "vllm/vllm-openai:v0.8.5"}, capsys, Docker(inspect=(0, "<html>proxy error</html>", "")))[0]
    assert result["failed"] is True
    assert "docker image inspect printed no JSON" in result["msg"] and "by hand" in result["msg"]
    assert "Traceback" not in json.dumps(result)


def test_unexpected_error_is_not_a_traceback(capsys):
    with mock.patch.object(vllm_image_facts, "merge_image_facts", side_effect=KeyError("boom")):
        result = run({"image": "vllm/vllm-openai:v0.8.5"}, capsys)[0]
    assert result["failed"] is True and "unexpected error" in result["msg"] and "KeyError" in result["msg"]
