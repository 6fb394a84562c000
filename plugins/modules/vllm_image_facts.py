#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: vllm_image_facts
short_description: Report what a vLLM container image needs and supports
version_added: 0.1.0
description:
  - Reports, for one vLLM image, what the deployment gate (M(labfleet.vllm.deploy_gate)) needs - the
    CUDA version, C(NVIDIA_REQUIRE_CUDA), the GPU architectures its kernels cover, the quantization
    methods its vLLM knows and the vLLM version.
  - When the image is on the host, C(docker image inspect) gives the digest, C(CUDA_VERSION),
    C(NVIDIA_REQUIRE_CUDA), labels and entrypoint; then, unless O(probe=false), the image is run once
    with its entrypoint replaced by C(python3 -c <probe>) (C(--rm), C(--network none), no GPU) to read
    the vLLM version, torch's version and compiled arch list and vLLM's quantization method names.
  - When the image is not on the host (the usual case on a fresh host), the shipped profile of a
    known image is returned so the gate still works before the pull (RV(image.profile_matched)).
    With O(registry_config=true) the image config is read from the registry without pulling layers.
  - With O(gpu_check=true) (opt-in, GPU hosts) one tiny CUDA operation runs in the image with
    C(--gpus all), which catches "no kernel image is available for execution on the device" before
    the deployment.
  - Never changes anything on the host. The task fails only on misuse (an invalid reference, a
    C(docker_bin) that does not exist, output docker should never print); an absent image or a
    missing Docker are reported in RV(image.state).
author:
  - labfleet maintainers (@labfleet)
options:
  image:
    description:
      - Image reference, C([registry/]name[:tag][@sha256:digest]) or an image id C(sha256:...).
    type: str
    required: true
  docker_bin:
    description:
      - Path of the docker CLI. Default - C(docker) found on E(PATH).
    type: path
  probe:
    description:
      - Run the image once (no GPU, no network, removed afterwards) to read versions, the arch list
        and the quantization methods from inside it.
    type: bool
    default: true
  probe_timeout:
    description:
      - Seconds the in-image probe allows each of its slow steps (importing torch, and importing
        vLLM when its quantization list cannot be read from source).
    type: int
    default: 300
  gpu_check:
    description:
      - Also run one tiny CUDA operation in the image with C(--gpus all) and report whether it
        worked. Needs a GPU host with the NVIDIA container toolkit.
    type: bool
    default: false
  registry_config:
    description:
      - When the image is not on the host, read its config from the registry with
        C(docker buildx imagetools inspect) (no layers are pulled; registry credentials stay in
        Docker's own configuration). Needs the buildx plugin and network access to the registry.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: Nothing is changed on the host, so everything runs in check mode too.
    details:
      - C(docker image inspect) and the registry read are read-only; the probe and GPU check
        containers run with C(--rm) and C(--network none), write nothing outside themselves and are
        removed when they exit, so they run in check mode as well.
  diff_mode:
    support: none
    description: Nothing to diff.
  platform:
    support: full
    platforms: posix
    description: Runs on the Docker host.
notes:
  - RV(image.arch_list) is vLLM's kernel arch list (from C(TORCH_CUDA_ARCH_LIST) in the image or the
    profile) filtered by the arch list of the torch inside the image - both must reach a GPU for
    the image to run on it.
  - The GPU check exercises torch's kernels, not every vLLM kernel.
seealso:
  - module: labfleet.vllm.model_facts
  - module: labfleet.vllm.deploy_gate
"""

EXAMPLES = r"""
- name: Image facts (profile before the pull, probe after it)
  labfleet.vllm.vllm_image_facts:
    image: vllm/vllm-openai:v0.8.5
  register: __vllm_image

- name: Feed the gate
  labfleet.vllm.deploy_gate:
    image: "{{ __vllm_image.image.gate }}"
    # ... gpus, driver_version, model, vllm
  register: __vllm_verdict

- name: After the pull, on a GPU host, also run one CUDA operation in the image
  labfleet.vllm.vllm_image_facts:
    image: vllm/vllm-openai:v0.8.5
    gpu_check: true
  register: __vllm_image_checked

- name: Read an unknown image's config from the registry without pulling it
  labfleet.vllm.vllm_image_facts:
    image: registry.example.org/ml/vllm-openai:2026.1
    registry_config: true
"""

RETURN = r"""
image:
  description: What is known about the image, merged from inspect, probe, registry and profile.
  returned: success
  type: dict
  contains:
    reference:
      description: The O(image) asked for.
      type: str
    state:
      description: C(present) (on this host), C(absent) (not on this host) or C(docker_unavailable)
        (no docker CLI, or the daemon does not answer).
      type: str
      sample: present
    docker_error:
      description: What docker said when it could not answer, with the fix.
      type: str
    profile_matched:
      description: Whether a shipped profile matches the reference.
      type: bool
    profile:
      description: Key of the matched profile.
      type: str
      sample: vllm/vllm-openai:v0.8.5
    profile_confidence:
      description: Confidence of each profile field (verified, third_party, inferred, unknown).
      type: dict
    profile_source:
      description: Source of each profile field.
      type: dict
    profile_mismatches:
      description: Fields where an observation contradicts the profile (field, profile, observed, source).
      type: list
      elements: dict
    vllm_version:
      description: vLLM version (probe, else profile, else the tag).
      type: str
      sample: 0.8.5
    cuda_version:
      description: C(CUDA_VERSION) of the image.
      type: str
      sample: 12.4.0
    require_cuda:
      description: C(NVIDIA_REQUIRE_CUDA) of the image (space = OR, comma = AND).
      type: str
    disable_require:
      description: Whether the image sets C(NVIDIA_DISABLE_REQUIRE).
      type: bool
    arch_list:
      description: Architectures the image can run on (vLLM's list filtered by torch's), torch notation.
      type: list
      elements: str
      sample: ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0"]
    vllm_arch_list:
      description: vLLM's kernel arch list.
      type: list
      elements: str
    torch_arch_list:
      description: torch's compiled arch list.
      type: list
      elements: str
    torch_version:
      description: torch version in the image.
      type: str
    torch_cuda_version:
      description: CUDA version torch was built with.
      type: str
    quantization_methods:
      description: The C(--quantization) names this vLLM build knows.
      type: list
      elements: str
    min_compute_capability:
      description: vLLM's documented minimum compute capability (profile).
      type: str
    entrypoint:
      description: The image entrypoint.
      type: list
      elements: str
    digest:
      description: Repository digest (C(sha256:...)).
      type: str
    id:
      description: Local image id.
      type: str
    repo_tags:
      description: Local tags.
      type: list
      elements: str
    repo_digests:
      description: Local repository digests.
      type: list
      elements: str
    labels:
      description: Image labels.
      type: dict
    env:
      description: The image's CUDA, NVIDIA, torch, vLLM and Python variables (never ones named like secrets).
      type: dict
    sources:
      description: Where each field came from (probe, inspect, registry, profile, tag).
      type: dict
    notes:
      description: Observations (profile notes, arch gaps).
      type: list
      elements: str
    probe:
      description: The in-image probe - ran, ok, error, errors, and where the arch and quantization
        lists came from.
      type: dict
    gpu_check:
      description: The GPU check - ran, ok, category (ok, no_kernel_image, driver_too_old,
        no_gpu_runtime, no_gpu_visible, ptx_unsupported, cuda_compat_unsupported,
        cuda_compat_mismatch, driver_library_mismatch, error), message, fix, devices.
      type: dict
    registry:
      description: The registry read - ran, ok, error, platform.
      type: dict
    gate:
      description: Exactly the keys the C(image) option of M(labfleet.vllm.deploy_gate) takes
        (cuda_version, require_cuda, arch_list, quantization_methods, vllm_version).
      type: dict
"""

import os
import platform

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.labfleet.vllm.plugins.module_utils._image import (
    GPU_CHECK_SCRIPT,
    PROBE_SCRIPT,
    PROFILES,
    ImageRefError,
    classify_docker_error,
    classify_gpu_check,
    informative_line,
    lookup_profile,
    merge_image_facts,
    parse_inspect,
    parse_probe_output,
    parse_reference,
    parse_registry_image,
)

PROBE_LABEL = "org.labfleet.probe=vllm_image_facts"


def run_probe(module, docker, target, timeout):
    """Run the probe container; {ran, ok, error, ...probe fields}."""
    argv = [docker, "run", "--rm", "--network", "none", "--label", PROBE_LABEL, "--entrypoint", "python3",
            target, "-c", PROBE_SCRIPT, str(timeout)]
    rc, out, err = module.run_command(argv)
    try:
        data = parse_probe_output(out)
    except ValueError as exc:
        said = informative_line("%s\n%s" % (err or "", out or ""), ("executable file not found",))
        hint = " (the image has no python3 on its PATH)" if "executable file not found" in said else ""
        return {"ran": True, "ok": False, "rc": rc,
                "error": "the probe printed no report%s: %s; docker said: %s" % (hint, exc, said or "nothing")}
    data.update({"ran": True, "ok": rc == 0 and data.get("vllm_version") is not None, "rc": rc})
    if data.get("vllm_version") is None:
        data["error"] = "no vllm package found in the image's python3"
    return data


def run_gpu_check(module, docker, target):
    argv = [docker, "run", "--rm", "--network", "none", "--gpus", "all", "--label", PROBE_LABEL,
            "--entrypoint", "python3", target, "-c", GPU_CHECK_SCRIPT]
    rc, out, err = module.run_command(argv)
    return classify_gpu_check(rc, out, err)


def _host_platform():
    machine = platform.machine().lower()
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)
    return "linux/%s" % arch


def read_registry(module, docker, ref):
    """{ran, ok, error, ...registry fields} from docker buildx imagetools inspect."""
    rc, out, err = module.run_command([docker, "buildx", "imagetools", "inspect", "--format", "{{json .}}", ref])
    if rc != 0:
        text = "%s\n%s" % (err or "", out or "")
        message = informative_line(text) or "exit %s" % rc
        if any(f in text.lower() for f in ("unknown command", "is not a docker command", "unknown flag")):
            message = ("docker buildx is not available (%s); install the docker-buildx-plugin package or leave "
                       "registry_config false" % message)
        return {"ran": True, "ok": False, "error": "could not read the image config from the registry: %s" % message}
    try:
        data = parse_registry_image(out, _host_platform())
    except ValueError as exc:
        return {"ran": True, "ok": False, "error": "could not read the image config from the registry: %s" % exc}
    data.update({"ran": True, "ok": True})
    return data


def find_docker(module):
    """(path or None, message)."""
    given = module.params["docker_bin"]
    if given:
        if not (os.path.isfile(given) and os.access(given, os.X_OK)):
            module.fail_json(msg="docker_bin %s is not an executable file; point it at the docker CLI or leave it "
                                 "unset to use the one on PATH" % given)
        return given, None
    found = module.get_bin_path("docker")
    if not found:
        return None, ("the docker CLI is not installed on this host (normal before the container runtime role "
                      "runs); only the shipped profile is reported")
    return found, None


def run_module(module):
    ref = module.params["image"]
    try:
        parse_reference(ref)
    except ImageRefError as exc:
        module.fail_json(msg="image: %s" % exc)
    if module.params["probe_timeout"] < 1:
        module.fail_json(msg="probe_timeout must be at least 1 second, got %s" % module.params["probe_timeout"])
    profile_key, profile = lookup_profile(ref)
    docker, docker_error = find_docker(module)
    inspect = None
    state = "docker_unavailable"
    if docker:
        rc, out, err = module.run_command([docker, "image", "inspect", ref])
        if rc == 0:
            try:
                inspect = parse_inspect(out, ref)
            except ValueError as exc:
                module.fail_json(msg="vllm_image_facts: %s; run `docker image inspect %s` by hand to see why"
                                     % (exc, ref))
            state = "present"
        else:
            state, docker_error = classify_docker_error(rc, out, err)
            if state == "error":
                module.fail_json(msg="vllm_image_facts: `docker image inspect %s` failed: %s" % (ref, docker_error))
            if state == "absent":
                docker_error = None

    probe = {"ran": False}
    gpu = {"ran": False}
    registry = {"ran": False}
    target = (inspect or {}).get("id") or ref
    if state == "present":
        if module.params["probe"]:
            probe = run_probe(module, docker, target, module.params["probe_timeout"])
            if not probe.get("ok"):
                module.warn("the in-image probe of %s did not complete: %s" % (
                    ref, probe.get("error") or "; ".join(probe.get("errors") or []) or "exit %s" % probe.get("rc")))
        else:
            probe["reason"] = "probe is false"
        if module.params["gpu_check"]:
            gpu = run_gpu_check(module, docker, target)
            if not gpu.get("ok"):
                module.warn("GPU check in %s failed (%s): %s%s" % (
                    ref, gpu.get("category"), gpu.get("message"), (". Fix: %s" % gpu["fix"]) if gpu.get("fix") else ""))
    else:
        reason = "the image is not on this host" if state == "absent" else "docker is not available"
        probe["reason"] = reason
        if module.params["gpu_check"]:
            gpu["reason"] = reason
        if module.params["registry_config"] and docker:
            registry = read_registry(module, docker, ref)
            if not registry.get("ok"):
                module.warn(registry["error"])

    image = merge_image_facts(ref, state, inspect=inspect, probe=probe if probe.get("ran") else None,
                              registry=registry if registry.get("ok") else None, profile=profile,
                              profile_key=profile_key)
    image["docker_error"] = docker_error
    image["probe"] = dict((k, probe.get(k)) for k in (
        "ran", "ok", "rc", "error", "errors", "reason", "python_version", "vllm_path", "quantization_methods_source",
        "torch_arch_list_source", "torch_arch_list_raw") if k in probe)
    image["gpu_check"] = gpu
    image["registry"] = dict((k, registry.get(k)) for k in ("ran", "ok", "error", "platform") if k in registry)
    if docker_error:
        module.warn(docker_error)
    if state != "present" and not profile and not registry.get("ok"):
        module.warn("no shipped profile matches %s and the image is not on this host, so the gate gets no image "
                    "facts: pull the image first, set registry_config: true, or use a profiled image (%s)"
                    % (ref, ", ".join(sorted(PROFILES))))
    for mismatch in image["profile_mismatches"]:
        module.warn("%s: the shipped profile says %s = %r but the image (%s) has %r; the observed value is used"
                    % (ref, mismatch["field"], mismatch["profile"], mismatch["source"], mismatch["observed"]))
    module.exit_json(changed=False, image=image)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type="str", required=True),
            docker_bin=dict(type="path"),
            probe=dict(type="bool", default=True),
            probe_timeout=dict(type="int", default=300),
            gpu_check=dict(type="bool", default=False),
            registry_config=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    try:
        run_module(module)
    except Exception as exc:  # pylint: disable=broad-except
        module.fail_json(msg="vllm_image_facts: unexpected error for image %s: %s: %s"
                             % (module.params.get("image"), type(exc).__name__, exc))


if __name__ == "__main__":
    main()
