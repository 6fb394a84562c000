# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Image profiles, docker inspect / probe / GPU check parsing, arch lists and the merge."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.probes import _image as I

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "..", "fixtures", "image")
FAKE_SITE = os.path.abspath(os.path.join(HERE, "..", "..", "..", "images", "fake-vllm", "site-packages"))


def fixture(name):
    with open(os.path.join(FIX, name)) as handle:
        return handle.read()


# --------------------------------------------------------------------------------------------
# References and profiles
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ref,name,tag,digest", [
    ("vllm/vllm-openai:v0.8.5", "vllm/vllm-openai", "v0.8.5", None),
    ("docker.io/vllm/vllm-openai:v0.8.5", "vllm/vllm-openai", "v0.8.5", None),
    ("registry-1.docker.io/library/ubuntu", "ubuntu", "latest", None),
    ("localhost:5000/lab/vllm:v1@sha256:" + "a" * 64, "localhost:5000/lab/vllm", "v1", "sha256:" + "a" * 64),
    ("vllm/vllm-openai@sha256:" + "b" * 64, "vllm/vllm-openai", None, "sha256:" + "b" * 64),
])
def test_parse_reference(ref, name, tag, digest):
    parsed = I.parse_reference(ref)
    assert (parsed["name"], parsed["tag"], parsed["digest"]) == (name, tag, digest)


@pytest.mark.parametrize("ref", ["", " vllm", "vllm openai", "VLLM/Openai:v1", "vllm/vllm-openai@sha256:abc",
                                 "sha256:xyz"])
def test_invalid_references(ref):
    with pytest.raises(I.ImageRefError):
        I.parse_reference(ref)


@pytest.mark.parametrize("ref,key", [
    ("vllm/vllm-openai:v0.8.5", "vllm/vllm-openai:v0.8.5"),
    ("docker.io/vllm/vllm-openai:v0.8.5", "vllm/vllm-openai:v0.8.5"),
    ("index.docker.io/vllm/vllm-openai:v0.19.1-x86_64", "vllm/vllm-openai:v0.19.1"),
    ("vllm/vllm-openai:v0.20.0", "vllm/vllm-openai:v0.20.0"),
    ("vllm/vllm-openai:v0.20.0-cu129", "vllm/vllm-openai:v0.20.0-cu129"),
    ("vllm/vllm-openai:v0.8.5@sha256:" + "c" * 64, "vllm/vllm-openai:v0.8.5"),
    ("vllm/vllm-openai:latest", None),
    ("ghcr.io/vllm/vllm-openai:v0.8.5", None),
])
def test_lookup_profile_by_tag(ref, key):
    found, profile = I.lookup_profile(ref)
    assert found == key
    assert (profile is None) == (key is None)


def test_lookup_profile_by_digest_and_copy():
    digest = "sha256:" + "d" * 64
    profiles = {"lab/vllm:x": dict(I.PROFILES["vllm/vllm-openai:v0.8.5"], tags=["x"], digests=[digest])}
    key, profile = I.lookup_profile("lab/other@" + digest, profiles)
    assert key == "lab/vllm:x"
    profile["arch_list"].append("0.0")
    assert "0.0" not in profiles["lab/vllm:x"]["arch_list"]


FIELDS = ("vllm_version", "cuda_version", "require_cuda", "arch_list", "torch_version", "torch_cuda_version",
          "torch_arch_list", "python_version", "entrypoint", "quantization_methods", "min_compute_capability")


@pytest.mark.parametrize("key", sorted(I.PROFILES))
def test_profiles_carry_source_and_confidence(key):
    profile = I.PROFILES[key]
    for field in FIELDS:
        assert field in profile, field
        assert profile["source"][field], field
        assert profile["confidence"][field] in ("verified", "third_party", "inferred", "unknown"), field
        if profile[field] is None:
            assert profile["confidence"][field] == "unknown", field
    assert profile["require_cuda"].startswith("cuda>=%s " % ".".join(profile["cuda_version"].split(".")[:2]))
    assert I.normalise_arch_list(profile["arch_list"]) == profile["arch_list"]
    assert key.rsplit(":", 1)[1] in profile["tags"]


def test_volta_is_in_0_8_5_and_0_19_1_and_gone_from_0_20_0():
    reach = dict((key, I.covers(I.effective_arch_list(p["arch_list"], p["torch_arch_list"]), (7, 0)))
                 for key, p in I.PROFILES.items())
    assert reach["vllm/vllm-openai:v0.8.5"] == "sass"
    assert reach["vllm/vllm-openai:v0.19.1"] == "sass"
    assert reach["vllm/vllm-openai:v0.20.0"] is None
    assert reach["vllm/vllm-openai:v0.20.0-cu129"] is None


def test_require_cuda_12_4_matches_the_recorded_image_env():
    inspect = I.parse_inspect(fixture("inspect_fake_vllm.json"))
    assert inspect["require_cuda"] == I.REQUIRE_CUDA_12_4
    assert I.REQUIRE_CUDA_12_4.count("brand=") == 30 and "driver>=535,driver<536" in I.REQUIRE_CUDA_12_4
    assert I.REQUIRE_CUDA_12_9.count("brand=") == 60 and "driver>=570,driver<571" in I.REQUIRE_CUDA_12_9


# --------------------------------------------------------------------------------------------
# Arch lists
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value,expected", [
    ("7.0 7.5 8.0 8.6 8.9 9.0+PTX", ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0+PTX"]),
    ("7.0;7.5;12.0+PTX", ["7.0", "7.5", "12.0+PTX"]),
    (["sm_50", "sm_70", "sm_90", "compute_90"], ["5.0", "7.0", "9.0+PTX"]),
    (["sm_120", "sm_90a", "junk"], ["9.0a", "12.0"]),
    (None, None),
])
def test_normalise_arch_list(value, expected):
    assert I.normalise_arch_list(value) == expected


@pytest.mark.parametrize("arch,cc,expected", [
    (["7.0"], (7, 0), "sass"), (["7.0"], (7, 5), "sass"), (["8.0"], (8, 9), "sass"), (["7.5"], (7, 0), None),
    (["9.0+PTX"], (12, 0), "ptx"), (["9.0"], (10, 0), None), (["9.0a"], (9, 0), "sass"), (["9.0a"], (9, 1), None),
])
def test_covers(arch, cc, expected):
    assert I.covers(arch, cc) == expected


def test_effective_arch_list_drops_what_torch_lacks():
    # vLLM 0.9.0: its kernels list 7.0, but torch 2.7 cu128 has no sm_70 and no PTX.
    assert I.effective_arch_list("7.0 7.5 8.0 8.9 9.0 10.0+PTX", "7.5 8.0 8.6 9.0 10.0 12.0") == \
        ["7.5", "8.0", "8.9", "9.0", "10.0"]
    assert I.effective_arch_list(None, "7.0 8.0") == ["7.0", "8.0"]
    assert I.effective_arch_list("7.0", None) == ["7.0"]
    assert I.effective_arch_list(None, None) is None


# --------------------------------------------------------------------------------------------
# docker image inspect and errors
# --------------------------------------------------------------------------------------------


def test_parse_inspect_recorded_fake_image():
    facts = I.parse_inspect(fixture("inspect_fake_vllm.json"), "labfleet/fake-vllm:dev")
    assert facts["cuda_version"] == "12.4.0"
    assert facts["entrypoint"] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert facts["id"].startswith("sha256:") and facts["digest"] is None
    assert facts["labels"]["org.labfleet.test-image"] == "fake-vllm"
    assert facts["env_arch_list"] is None and facts["disable_require"] is False


def test_parse_inspect_filters_secrets_and_reads_arch_env():
    facts = I.parse_inspect(fixture("inspect_vllm_v0.20.0.json"), "vllm/vllm-openai:v0.20.0")
    assert "HF_TOKEN" not in facts["env"] and "PATH" not in facts["env"]
    assert facts["env"]["VLLM_ENABLE_CUDA_COMPATIBILITY"] == "0"
    assert facts["env_arch_list"] == "7.5 8.0 8.6 8.9 9.0 10.0 12.0+PTX"
    assert facts["digest"] == "sha256:" + "cd" * 32


@pytest.mark.parametrize("text", ["", "not json", "[]", "[1]", "{\"Config\": 3}"])
def test_parse_inspect_rejects_garbage(text):
    with pytest.raises(ValueError):
        I.parse_inspect(text)


def test_pick_digest_prefers_the_repository_asked_for():
    digests = ["mirror.example.org/vllm/vllm-openai@sha256:" + "1" * 64, "vllm/vllm-openai@sha256:" + "2" * 64]
    assert I.pick_digest(digests, "docker.io/vllm/vllm-openai:v0.8.5") == "sha256:" + "2" * 64
    assert I.pick_digest(digests, "other/image") == "sha256:" + "1" * 64
    assert I.pick_digest([], "x") is None


@pytest.mark.parametrize("err,state", [
    ("Error: No such image: vllm/vllm-openai:v0.8.5", "absent"),
    ("Error response from daemon: no such image: x: No such image: x:latest", "absent"),
    ("Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?",
     "docker_unavailable"),
    ("permission denied while trying to connect to the Docker daemon socket at unix:///var/run/docker.sock",
     "docker_unavailable"),
    ("unknown flag: --bogus\nRun 'docker --help' for more information", "error"),
])
def test_classify_docker_error(err, state):
    got, message = I.classify_docker_error(1, "[]", err)
    assert got == state
    if state == "error":
        assert "unknown flag: --bogus" in message


# --------------------------------------------------------------------------------------------
# The in-image probe and the GPU check
# --------------------------------------------------------------------------------------------


def test_parse_recorded_probe_output():
    probe = I.parse_probe_output(fixture("probe_fake_vllm.txt"))
    assert (probe["vllm_version"], probe["torch_version"], probe["torch_cuda_version"]) == \
        ("0.8.5", "2.6.0+cu124", "12.4")
    assert probe["torch_arch_list"] == ["5.0", "6.0", "7.0", "7.5", "8.0", "8.6", "9.0"]
    assert probe["quantization_methods"] == I.QUANT_0_8_5
    assert probe["quantization_methods_source"] == "source"


def test_probe_output_with_noise_and_without_report():
    probe = I.parse_probe_output(fixture("probe_vllm_v0.20.0.txt"))
    assert probe["torch_arch_list"] == ["7.5", "8.0", "8.6", "9.0", "10.0", "12.0+PTX"]
    with pytest.raises(ValueError):
        I.parse_probe_output("Traceback (most recent call last):\n  ...\nImportError: no module named x\n")
    with pytest.raises(ValueError):
        I.parse_probe_output(I.PROBE_MARKER + "{broken")


def _python(script, env_extra=None, site=FAKE_SITE, args=()):
    env = dict(os.environ, PYTHONPATH=site or "", **(env_extra or {}))
    env.pop("TORCH_CUDA_ARCH_LIST", None)
    proc = subprocess.run([sys.executable, "-c", script] + list(args), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=env, universal_newlines=True, timeout=120, check=False)
    return proc


def test_probe_script_against_the_fake_packages():
    proc = _python(I.PROBE_SCRIPT, args=["60"])
    assert proc.returncode == 0, proc.stderr
    probe = I.parse_probe_output(proc.stdout)
    assert probe["vllm_version"] == "0.8.5" and probe["errors"] == []
    assert probe["torch_arch_list_source"] == "torch._C._cuda_getArchFlags"
    assert "7.0" in probe["torch_arch_list"]


def test_probe_script_falls_back_to_import(tmp_path):
    pkg = tmp_path / "vllm" / "model_executor" / "layers" / "quantization"
    pkg.mkdir(parents=True)
    for part in (tmp_path / "vllm", tmp_path / "vllm" / "model_executor", tmp_path / "vllm" / "model_executor" / "layers"):
        (part / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("QUANTIZATION_METHODS = sorted(['gptq', 'awq'])\n")
    (tmp_path / "vllm" / "version.py").write_text("__version__ = '0.0.1'\n")
    proc = _python(I.PROBE_SCRIPT, site=str(tmp_path), args=["30"])
    probe = I.parse_probe_output(proc.stdout)
    assert probe["quantization_methods"] == ["awq", "gptq"]
    assert probe["quantization_methods_source"] == "import"
    assert probe["vllm_version"] == "0.0.1" and probe["vllm_version_source"] == "version.py"


def test_gpu_check_script_against_the_fake_torch():
    ok = I.classify_gpu_check(0, _python(I.GPU_CHECK_SCRIPT, {"FAKE_TORCH_GPUS": "2"}).stdout, "")
    assert ok["ok"] and ok["category"] == "ok" and len(ok["devices"]) == 2
    proc = _python(I.GPU_CHECK_SCRIPT, {"FAKE_TORCH_GPUS": "1", "FAKE_TORCH_NO_KERNEL_IMAGE": "1"})
    bad = I.classify_gpu_check(proc.returncode, proc.stdout, proc.stderr)
    assert not bad["ok"] and bad["category"] == "no_kernel_image" and "sm_70" in bad["fix"]


@pytest.mark.parametrize("name,rc,stream,category", [
    ("gpu_check_ok.stdout", 0, "out", "ok"),
    ("gpu_check_no_kernel_image.stdout", 0, "out", "no_kernel_image"),
    ("gpu_check_no_gpu.stdout", 0, "out", "no_gpu_visible"),
    ("gpu_check_no_runtime.stderr", 125, "err", "no_gpu_runtime"),
])
def test_classify_recorded_gpu_checks(name, rc, stream, category):
    text = fixture(name)
    result = I.classify_gpu_check(rc, text if stream == "out" else "", text if stream == "err" else "")
    assert result["category"] == category
    if category == "no_gpu_runtime":
        assert "could not select device driver" in result["message"]
        assert "nvidia-container-toolkit" in result["fix"]


def test_classify_driver_too_old():
    err = ("docker: Error response from daemon: failed to create task: nvidia-container-cli: requirement error: "
           "unsatisfied condition: cuda>=12.4, please update your driver to a newer version")
    result = I.classify_gpu_check(125, "", err)
    assert result["category"] == "driver_too_old" and "cuda>=12.4" in result["message"]


# --------------------------------------------------------------------------------------------
# Registry and merge
# --------------------------------------------------------------------------------------------


def test_parse_registry_index_picks_the_host_platform():
    reg = I.parse_registry_image(fixture("registry_index.json"), "linux/amd64")
    assert reg["platform"] == "linux/amd64" and reg["digest"] == "sha256:" + "ef" * 32
    assert reg["env_arch_list"].startswith("7.0")
    arm = I.parse_registry_image(fixture("registry_index.json"), "linux/arm64")
    assert arm["env_arch_list"].startswith("8.7")
    single = I.parse_registry_image(json.dumps({"os": "linux", "architecture": "amd64",
                                                "config": {"Env": ["CUDA_VERSION=12.4.0"]}}))
    assert single["cuda_version"] == "12.4.0" and single["digest"] is None
    with pytest.raises(ValueError):
        I.parse_registry_image("{\"image\": {}}")


def test_merge_present_image_with_probe_and_profile():
    key, profile = I.lookup_profile("vllm/vllm-openai:v0.8.5")
    image = I.merge_image_facts("vllm/vllm-openai:v0.8.5", "present",
                                inspect=I.parse_inspect(fixture("inspect_vllm_v0.8.5.json"), "vllm/vllm-openai:v0.8.5"),
                                probe=I.parse_probe_output(fixture("probe_vllm_v0.8.5.txt")),
                                profile=profile, profile_key=key)
    assert image["profile_mismatches"] == []
    assert image["sources"]["vllm_version"] == "probe" and image["sources"]["cuda_version"] == "inspect"
    assert image["sources"]["vllm_arch_list"] == "profile" and image["sources"]["torch_arch_list"] == "probe"
    assert image["gate"] == {"cuda_version": "12.4.0", "require_cuda": I.REQUIRE_CUDA_12_4,
                             "arch_list": ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0"],
                             "quantization_methods": I.QUANT_0_8_5, "vllm_version": "0.8.5"}
    assert image["digest"] == "sha256:" + "ab" * 32


def test_merge_profile_only_and_tag_fallback():
    key, profile = I.lookup_profile("vllm/vllm-openai:v0.20.0")
    image = I.merge_image_facts("vllm/vllm-openai:v0.20.0", "absent", profile=profile, profile_key=key)
    assert set(image["sources"].values()) <= {"profile", "vllm_arch_list filtered by torch_arch_list"}
    assert "7.0" not in image["arch_list"] and image["min_compute_capability"] == "7.5"
    bare = I.merge_image_facts("lab/vllm:v0.9.2-custom", "absent")
    assert bare["gate"]["vllm_version"] == "0.9.2" and bare["sources"]["vllm_version"] == "tag"
    assert bare["gate"]["arch_list"] is None and bare["profile_matched"] is False


def test_merge_reports_profile_mismatch_and_arch_gap():
    key, profile = I.lookup_profile("vllm/vllm-openai:v0.8.5")
    probe = I.parse_probe_output(fixture("probe_vllm_v0.8.5.txt"))
    probe["vllm_version"] = "0.8.6"
    probe["torch_arch_list"] = ["7.5", "8.0", "9.0"]
    image = I.merge_image_facts("vllm/vllm-openai:v0.8.5", "present", probe=probe, profile=profile, profile_key=key)
    fields = [m["field"] for m in image["profile_mismatches"]]
    assert "vllm_version" in fields and "torch_arch_list" in fields
    assert "7.0" not in image["arch_list"]
    assert any("no kernel image" in note for note in image["notes"])
