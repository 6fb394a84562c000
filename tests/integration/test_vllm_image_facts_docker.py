# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""vllm_image_facts against a real Docker engine and the fake vLLM image (tests/images/fake-vllm).

    pytest -m docker tests/integration

Skipped when no Docker engine answers or the base image is absent. The base image defaults to
labfleet/molecule-debian:bookworm (the project builds it offline); LABFLEET_FAKE_VLLM_BASE
overrides it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil
import subprocess
import uuid

import pytest

from ansible.module_utils.testing import patch_module_args  # ansible-core >= 2.19 (pinned)

from ansible_collections.labfleet.vllm.plugins.module_utils.probes import _image as I
from ansible_collections.labfleet.vllm.plugins.modules import vllm_image_facts


pytestmark = pytest.mark.docker

BASE_IMAGE = os.environ.get("LABFLEET_FAKE_VLLM_BASE", "labfleet/molecule-debian:bookworm")
_REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CONTEXT = os.path.join(_REPO, "tests", "images", "fake-vllm")


def _docker(*args, **kwargs):
    return subprocess.run(["docker"] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=kwargs.get("timeout", 120), check=False)


@pytest.fixture(scope="module")
def fake_image():
    if shutil.which("docker") is None:
        pytest.skip("no docker CLI on PATH")
    try:
        info = _docker("info", "--format", "{{.ServerVersion}}", timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip("no Docker engine answers (%s)" % exc)
    if info.returncode != 0:
        pytest.skip("no Docker engine answers: %s" % (info.stderr.strip().splitlines() or ["docker info failed"])[-1])
    if _docker("image", "inspect", BASE_IMAGE).returncode != 0:
        pytest.skip("base image %s is absent; build the project's base images first (or set "
                    "LABFLEET_FAKE_VLLM_BASE to an image with python3)" % BASE_IMAGE)
    tag = "labfleet/fake-vllm:test-%s" % uuid.uuid4().hex[:8]
    built = _docker("build", "-q", "-t", tag, "--build-arg", "BASE_IMAGE=%s" % BASE_IMAGE, CONTEXT, timeout=600)
    assert built.returncode == 0, built.stderr
    yield tag
    _docker("image", "rm", "-f", tag)


def run_module(args, capsys):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            vllm_image_facts.main()
    return json.loads(capsys.readouterr().out)


def test_inspect_and_probe_the_fake_image(fake_image, capsys):
    result = run_module({"image": fake_image, "probe_timeout": 60}, capsys)
    assert not result.get("failed"), result.get("msg")
    image = result["image"]
    assert image["state"] == "present" and image["profile_matched"] is False
    assert image["probe"]["ok"] is True, image["probe"]
    assert image["gate"]["cuda_version"] == "12.4.0"
    assert image["gate"]["require_cuda"] == I.REQUIRE_CUDA_12_4
    assert image["gate"]["vllm_version"] == "0.8.5"
    assert image["gate"]["quantization_methods"] == I.QUANT_0_8_5
    assert "7.0" in image["gate"]["arch_list"]
    assert image["torch_cuda_version"] == "12.4"
    assert image["entrypoint"] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert image["probe"]["quantization_methods_source"] == "source"
    # The probe container was removed (--rm).
    left = _docker("ps", "-a", "--filter", "label=%s" % vllm_image_facts.PROBE_LABEL, "--format", "{{.ID}}")
    assert left.stdout.strip() == ""


def test_check_mode_gives_the_same_facts(fake_image, capsys):
    normal = run_module({"image": fake_image}, capsys)
    checked = run_module({"image": fake_image, "_ansible_check_mode": True}, capsys)
    assert checked["image"]["gate"] == normal["image"]["gate"]


def test_gpu_check_reports_a_category(fake_image, capsys):
    result = run_module({"image": fake_image, "gpu_check": True}, capsys)
    gpu = result["image"]["gpu_check"]
    assert gpu["ran"] is True
    # Without the NVIDIA runtime Docker refuses --gpus; with it the fake torch sees no GPU.
    assert gpu["category"] in ("no_gpu_runtime", "no_gpu_visible", "ok", "error"), gpu


def test_absent_profiled_image_uses_the_profile(fake_image, capsys):
    ref = "vllm/vllm-openai:v0.8.5"
    if _docker("image", "inspect", ref).returncode == 0:
        pytest.skip("%s is present on this host" % ref)
    result = run_module({"image": ref}, capsys)
    image = result["image"]
    assert (image["state"], image["profile_matched"]) == ("absent", True)
    assert image["gate"]["cuda_version"] == "12.4.0" and "7.0" in image["gate"]["arch_list"]
