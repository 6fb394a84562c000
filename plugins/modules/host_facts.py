#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: host_facts
short_description: Read the host facts a vLLM rollout depends on besides the GPUs
version_added: 0.1.0
description:
  - Reads the CPU's instruction-set flags from C(/proc/cpuinfo) (prebuilt inference images that
    need AVX2 or AVX-512 die with C(Illegal instruction) on hosts without them).
  - Measures free space on the filesystems that hold (or would hold) the given paths, such as the
    model directory and Docker's data root. A path that does not exist yet is measured on its
    closest existing parent.
  - Reports the Docker engine and nvidia-container-toolkit versions when they are installed.
  - Reports the installed NVIDIA driver packages and the driver version they carry, as C(dpkg-query)
    or C(rpm) list them (and dnf's version locks), so that the preflight's plan decides the driver
    step from what is installed, not only from what is loaded.
  - Reports what decides whether the container runtime checks an image's C(NVIDIA_REQUIRE_CUDA), namely the
    toolkit's mode (C(/etc/nvidia-container-runtime/config.toml)), Docker's default runtime and CDI
    state (C(docker info), or C(/etc/docker/daemon.json) when the engine does not answer) and the
    CDI specs present.
  - Changes nothing; check mode is supported.
options:
  disk_paths:
    description:
      - Paths to measure, keyed by a label of your choice (for example C(model) and C(docker)).
    type: dict
    default: {}
  cpuinfo_path:
    description:
      - Where to read the CPU description.
    type: path
    default: /proc/cpuinfo
extends_documentation_fragment:
  - labfleet.vllm.attributes
  - labfleet.vllm.attributes.read_only
attributes:
  platform:
    description: Runs on the host it describes (Linux; C(/proc/cpuinfo), C(statvfs), Docker's CLI).
author:
  - labfleet contributors (@labfleet)
notes:
  - Returns its result as the fact C(labfleet_host).
"""

EXAMPLES = r"""
- name: Read CPU flags, free disk and container stack versions
  labfleet.vllm.host_facts:
    disk_paths:
      model: /srv/models/llama
      docker: /var/lib/docker

- name: Refuse hosts without AVX2
  ansible.builtin.assert:
    that: ansible_facts['labfleet_host']['cpu']['isa']['avx2']
    fail_msg: This image needs a CPU with AVX2.
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: complex
  contains:
    labfleet_host:
      description: What was read.
      returned: always
      type: complex
      contains:
        cpu:
          description: CPU model, flags common to every logical CPU, socket and CPU counts, and C(isa),
            a map of the flags that matter for prebuilt images (C(avx2), C(avx512f), ...) to booleans.
          returned: always
          type: dict
          sample: {"model": "Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz", "logical_cpus": 56, "sockets": 2,
                   "flags": ["avx", "avx2", "fma"], "isa": {"avx2": true, "avx512f": false}}
        disk:
          description: Per label, C(path), C(measured_at) (the closest existing directory), C(exists),
            C(free_mib) and C(total_mib).
          returned: always
          type: dict
          sample: {"model": {"path": "/srv/models/llama", "measured_at": "/srv", "exists": false,
                   "free_mib": 812345, "total_mib": 937000}}
        driver_packages:
          description:
            - C(manager) (V(dpkg), V(rpm), or null when neither is installed), C(installed_version) (the driver
              version the packages carry, null when no driver package is installed), C(packages) (the installed
              packages that belong to the driver), C(held) (those held or version-locked) and C(error) (why the
              listing failed, else null).
          returned: always
          type: dict
          sample: {"manager": "dpkg", "installed_version": "550.163.01", "error": null,
                   "packages": ["libcuda1", "libnvidia-ml1", "nvidia-kernel-dkms", "nvidia-smi"],
                   "held": ["libcuda1", "libnvidia-ml1", "nvidia-kernel-dkms", "nvidia-smi"]}
        container:
          description:
            - Docker client and server versions, the last line of Docker's error when the engine does
              not answer, and the nvidia-container-cli and nvidia-ctk versions; each null when absent.
            - What decides whether the runtime checks the image's C(NVIDIA_REQUIRE_CUDA) (see
              docs/container_runtime.md), each null when unknown. C(toolkit_version);
              C(nvidia_container_runtime_hook) and C(nvidia_cdi_hook) (paths, null when not installed);
              C(toolkit_config) (C(path), C(exists), C(error), C(mode) (null = not set, which means auto),
              C(disable_require), C(skip_mode_detection) from C(/etc/nvidia-container-runtime/config.toml));
              C(nvidia_runtime_mode) (what the nvidia runtime resolves its mode to; auto is legacy before
              toolkit 1.18 and jit-cdi from 1.18); C(docker_config_source) (C(docker info), or C(daemon.json)
              when the engine does not answer), C(docker_default_runtime), C(docker_runtimes) (name to path),
              C(docker_cdi_enabled), C(docker_cdi_spec_dirs); C(cdi_specs) (C(path), C(kind), C(has_all)
              for each spec in C(/etc/cdi), C(/var/run/cdi) and Docker's spec directories).
          returned: always
          type: dict
          sample: {"docker_client_version": "26.1.5", "docker_server_version": "26.1.5", "docker_error": null,
                   "nvidia_container_cli_version": "1.18.2", "nvidia_ctk_version": "1.18.2",
                   "toolkit_version": "1.18.2",
                   "nvidia_container_runtime_hook": "/usr/bin/nvidia-container-runtime-hook",
                   "nvidia_cdi_hook": "/usr/bin/nvidia-cdi-hook",
                   "toolkit_config": {"path": "/etc/nvidia-container-runtime/config.toml", "exists": true,
                                      "error": null, "mode": "auto", "disable_require": false,
                                      "skip_mode_detection": false},
                   "nvidia_runtime_mode": "jit-cdi", "docker_config_source": "docker info",
                   "docker_default_runtime": "runc",
                   "docker_runtimes": {"nvidia": "nvidia-container-runtime", "runc": "runc"},
                   "docker_cdi_enabled": true, "docker_cdi_spec_dirs": ["/etc/cdi", "/var/run/cdi"],
                   "cdi_specs": [{"path": "/var/run/cdi/nvidia.yaml", "kind": "nvidia.com/gpu", "has_all": true}]}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.labfleet.vllm.plugins.module_utils.probes._host import (
    container_stack,
    disk_free,
    parse_cpuinfo,
    read_regular_text,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.probes._packages import read_driver_packages
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._policy import has_control_chars


def main():
    module = AnsibleModule(
        argument_spec=dict(
            disk_paths=dict(type="dict", default={}),
            cpuinfo_path=dict(type="path", default="/proc/cpuinfo"),
        ),
        supports_check_mode=True,
    )
    try:
        # a regular file only: a FIFO would block and /dev/zero never ends
        cpu = parse_cpuinfo(read_regular_text(module.params["cpuinfo_path"]))
    except (IOError, OSError, ValueError) as exc:
        module.fail_json(msg="Cannot read %s (%s); point cpuinfo_path at a readable regular file such as "
                         "/proc/cpuinfo." % (module.params["cpuinfo_path"], exc))

    disk = {}
    for label, path in sorted(module.params["disk_paths"].items()):
        if not isinstance(path, str) or not path.startswith("/"):
            module.fail_json(msg="disk_paths.%s must be an absolute path, got %r." % (label, path))
        if has_control_chars(path) or has_control_chars(label):
            module.fail_json(msg="disk_paths.%s must be an absolute one-line path without control characters "
                             "(newline, NUL, ...), got %r." % (label.encode("unicode_escape").decode("ascii"), path))
        try:
            disk[label] = disk_free(path)
        except (OSError, ValueError) as exc:
            module.fail_json(msg="Cannot measure free space for disk_paths.%s (%s): %s" % (label, path, exc))

    def run(argv):
        return module.run_command(argv, environ_update={"LC_ALL": "C"})

    container = container_stack(run, module.get_bin_path)
    packages = read_driver_packages(run, module.get_bin_path, read_regular_text)
    module.exit_json(changed=False, ansible_facts={"labfleet_host": {
        "cpu": cpu, "disk": disk, "container": container, "driver_packages": packages}})


if __name__ == "__main__":
    main()
