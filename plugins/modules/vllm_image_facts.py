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
    C(docker_bin) that does not exist, output docker should never print) or when a docker command
    runs past its time limit (O(timeout)); an absent image or a missing Docker are reported in
    RV(image.state).
  - Every docker command it runs is bounded in time; the task ends within about O(timeout) seconds
    per command (plus 3 x O(probe_timeout) for the probe), never waits without limit.
author:
  - labfleet maintainers (@labfleet)
options:
  image:
    description:
      - Image reference, C([registry/]name[:tag][@sha256:digest]) or an image id C(sha256:...).
      - Printable ASCII only; a reference with whitespace, a newline or another control character, or
        a non-ASCII character is refused.
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
        vLLM when its quantization list cannot be read from source), from V(1) to V(3600).
      - The probe container as a whole may run for O(timeout) + 3 x O(probe_timeout) seconds.
    type: int
    default: 300
  timeout:
    description:
      - Seconds each docker command may run, from V(1) to V(3600) - C(docker image inspect), the
        registry read (C(docker buildx imagetools inspect)) and the GPU check container; the probe
        container gets O(timeout) + 3 x O(probe_timeout) (its three steps are bounded inside the image).
      - A command still running then is stopped (SIGTERM, which C(docker run) passes to the container,
        then SIGKILL 5 seconds later; a probe or GPU check container left behind is removed with
        C(docker rm -f)) and the task fails with a message naming the command and this option. Every
        process the command started that still holds its output is stopped with it, so a wrapper
        that leaves a child running cannot keep the task waiting.
    type: int
    default: 120
    version_added: 0.1.0
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
extends_documentation_fragment:
  - labfleet.vllm.attributes
  - labfleet.vllm.attributes.read_only
attributes:
  check_mode:
    details:
      - C(docker image inspect) and the registry read are read-only; the probe and GPU check
        containers run with C(--rm) and C(--network none), write nothing outside themselves and are
        removed when they exit, so they run in check mode as well.
  platform:
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
      description: Observations (profile notes, arch gaps), and values read from the image that were
        ignored because they are not of the expected shape (for example a C(CUDA_VERSION) with
        non-ASCII digits); each of those is also a warning.
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

import binascii
import json
import os
import platform
import unicodedata

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.labfleet.vllm.plugins.module_utils.clients._bounded import (
    absurd_number,
    module_within_depth,
    run_bounded,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.probes._image import (
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
TIMEOUT_MAX = 3600
# docker rm -f of a container left behind by a stopped command: a short, fixed bound of its own.
CLEANUP_TIMEOUT = 30
INT_OPTIONS = ("timeout", "probe_timeout")


def container_name(kind):
    """A name of our own for a probe/GPU check container, so one left behind by a timeout can be removed."""
    return "labfleet-%s-%s" % (kind, binascii.hexlify(os.urandom(6)).decode("ascii"))


def run_docker(module, docker, argv, limit, what, option, container=None):
    """Run one docker command within ``limit`` seconds; on expiry remove ``container`` (if any) and fail
    naming the command and the option that sets the limit."""
    rc, out, err, timed_out = run_bounded(module, [docker] + argv, limit)
    if not timed_out:
        return rc, out, err
    cleanup = ""
    if container:
        rm_rc, rm_out, rm_err, rm_late = run_bounded(module, [docker, "rm", "-f", container], CLEANUP_TIMEOUT)
        if rm_late or rm_rc != 0:
            said = "no answer within %d s" % CLEANUP_TIMEOUT if rm_late else \
                ((rm_err or rm_out).strip() or "exit %s" % rm_rc)
            cleanup = (" The container %s may still exist: remove it with `docker rm -f %s` (docker said: %s)."
                       % (container, container, said))
        else:
            cleanup = " Its container %s was removed." % container
    module.fail_json(
        msg="vllm_image_facts: `docker %s` (%s) did not finish within %d s and was stopped; %s.%s"
            % (" ".join(argv[:2]), what, limit, option, cleanup),
        cmd=[docker] + [a if len(a) < 200 else a[:60] + "..." for a in argv], rc=rc, stdout=out, stderr=err,
        timeout=limit)


def run_probe(module, docker, target, probe_timeout, timeout):
    """Run the probe container; {ran, ok, error, ...probe fields}."""
    name = container_name("probe")
    limit = timeout + 3 * probe_timeout
    argv = ["run", "--rm", "--network", "none", "--label", PROBE_LABEL, "--name", name, "--entrypoint", "python3",
            target, "-c", PROBE_SCRIPT, str(probe_timeout)]
    rc, out, err = run_docker(module, docker, argv, limit, "the in-image probe of %s" % target,
                              "it may run timeout + 3 x probe_timeout (%d + 3 x %d s): raise timeout or probe_timeout "
                              "if the image is just slow to import torch, or set probe: false"
                              % (timeout, probe_timeout), container=name)
    try:
        data = parse_probe_output(out)
    except ValueError as exc:
        said = informative_line("%s\n%s" % (err or "", out or ""), ("executable file not found",))
        hint = " (the image has no python3 on its PATH)" if "executable file not found" in said else ""
        return {"ran": True, "ok": False, "rc": rc,
                "error": "the probe printed no report%s: %s; docker said: %s" % (hint, exc, said or "nothing")}
    data.update({"ran": True, "ok": rc == 0 and data.get("vllm_version") is not None, "rc": rc})
    if data.get("vllm_version") is None:
        data["error"] = ("the vllm package in the image (%s) has no readable version" % data["vllm_path"]
                         if data.get("vllm_path") else "no vllm package found in the image's python3")
    return data


def run_gpu_check(module, docker, target, timeout):
    name = container_name("gpu-check")
    argv = ["run", "--rm", "--network", "none", "--gpus", "all", "--label", PROBE_LABEL, "--name", name,
            "--entrypoint", "python3", target, "-c", GPU_CHECK_SCRIPT]
    rc, out, err = run_docker(module, docker, argv, timeout, "the GPU check in %s" % target,
                              "raise timeout (now %d s) if the image is just slow to start, or set gpu_check: false"
                              % timeout, container=name)
    return classify_gpu_check(rc, out, err)


def _host_platform():
    machine = platform.machine().lower()
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)
    return "linux/%s" % arch


def read_registry(module, docker, ref, timeout):
    """{ran, ok, error, ...registry fields} from docker buildx imagetools inspect."""
    rc, out, err = run_docker(module, docker, ["buildx", "imagetools", "inspect", "--format", "{{json .}}", ref],
                              timeout, "the registry read of %s" % ref,
                              "raise timeout (now %d s) if the registry is just slow, or set registry_config: false"
                              % timeout)
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
        if any(unicodedata.category(ch) in ("Cc", "Zl", "Zp", "Cs") for ch in given):
            module.fail_json(msg="docker_bin must be a file path without control characters, got %s; point it at the "
                                 "docker CLI or leave it unset to use the one on PATH" % json.dumps(given))
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
    for name in INT_OPTIONS:
        value = module.params[name]
        if not 1 <= value <= TIMEOUT_MAX:
            module.fail_json(msg="%s must be a whole number of seconds from 1 to %d, got %s"
                                 % (name, TIMEOUT_MAX, value if abs(value) < 10 ** 30 else
                                    "a number of about %d digits" % int(abs(value).bit_length() * 0.30103 + 1)))
    timeout = module.params["timeout"]
    profile_key, profile = lookup_profile(ref)
    docker, docker_error = find_docker(module)
    inspect = None
    state = "docker_unavailable"
    if docker:
        rc, out, err = run_docker(module, docker, ["image", "inspect", ref], timeout, "reading the image on this host",
                                  "raise timeout (now %d s) if the Docker daemon is just slow, or check it with "
                                  "`systemctl status docker`" % timeout)
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
            probe = run_probe(module, docker, target, module.params["probe_timeout"], timeout)
            if not probe.get("ok"):
                module.warn("the in-image probe of %s did not complete: %s" % (
                    ref, probe.get("error") or "; ".join(probe.get("errors") or []) or "exit %s" % probe.get("rc")))
        else:
            probe["reason"] = "probe is false"
        if module.params["gpu_check"]:
            gpu = run_gpu_check(module, docker, target, timeout)
            if not gpu.get("ok"):
                module.warn("GPU check in %s failed (%s): %s%s" % (
                    ref, gpu.get("category"), gpu.get("message"), (". Fix: %s" % gpu["fix"]) if gpu.get("fix") else ""))
    else:
        reason = "the image is not on this host" if state == "absent" else "docker is not available"
        probe["reason"] = reason
        if module.params["gpu_check"]:
            gpu["reason"] = reason
        if module.params["registry_config"] and docker:
            registry = read_registry(module, docker, ref, timeout)
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
    for observed in (inspect or {}, probe, registry):
        for note in observed.get("ignored") or []:
            module.warn("%s: %s" % (ref, note))
    if state != "present" and not profile and not registry.get("ok"):
        module.warn("no shipped profile matches %s and the image is not on this host, so the gate gets no image "
                    "facts: pull the image first, set registry_config: true, or use a profiled image (%s)"
                    % (ref, ", ".join(sorted(PROFILES))))
    for mismatch in image["profile_mismatches"]:
        module.warn("%s: the shipped profile says %s = %r but the image (%s) has %r; the observed value is used"
                    % (ref, mismatch["field"], mismatch["profile"], mismatch["source"], mismatch["observed"]))
    module.exit_json(changed=False, image=image)


def argument_spec(int_type="int"):
    """The options; ``int_type="raw"`` only to report an infinite number (see make_module)."""
    return dict(
        image=dict(type="str", required=True),
        docker_bin=dict(type="path"),
        probe=dict(type="bool", default=True),
        probe_timeout=dict(type=int_type, default=300),
        timeout=dict(type=int_type, default=120),
        gpu_check=dict(type="bool", default=False),
        registry_config=dict(type="bool", default=False),
    )


def make_module():
    """AnsibleModule, never a traceback: options nested hundreds of levels deep fail naming the bound
    (module_within_depth), and so do the numbers ansible-core raises for (see _make_module)."""
    return module_within_depth(_make_module, "vllm_image_facts", "its options are strings, numbers and booleans: give "
                                                                 "image as a reference such as vllm/vllm-openai:v0.8.5")


def _make_module():
    """ansible-core raises for two numbers itself: OverflowError converting an infinite float to int
    (``timeout: .inf``), and ValueError logging an int of more than 4300 digits (``timeout: "1e5000"``).
    The options are then read again as given, and the task fails naming the option."""
    try:
        return AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    except (OverflowError, ValueError):
        module = AnsibleModule(argument_spec=argument_spec("raw"), supports_check_mode=True)
        names = [name for name in INT_OPTIONS if absurd_number(module.params[name])]
        module.fail_json(msg="%s must be a whole number of seconds from 1 to %d, got an infinite or absurdly large "
                             "value" % (" and ".join(names) or "timeout or probe_timeout", TIMEOUT_MAX))


def main():
    module = make_module()
    try:
        run_module(module)
    except Exception as exc:  # pylint: disable=broad-except
        module.fail_json(msg="vllm_image_facts: unexpected error for image %s: %s: %s"
                             % (module.params.get("image"), type(exc).__name__, exc))


if __name__ == "__main__":
    main()
