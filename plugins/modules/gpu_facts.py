#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Read the host's NVIDIA GPUs, driver and topology as facts
version_added: 0.1.0
description:
  - Returns C(ansible_facts.nvidia) with the NVIDIA GPUs of the host (model, compute capability,
    memory, PCI address, modes), the driver and CUDA versions, the kernel module and user-space
    library versions, and the link type between every pair of GPUs (NVLink or PCIe path).
  - Backends, in the order O(backend=auto) tries them, are NVML through the Python package
    C(nvidia-ml-py) (module C(pynvml)) when it imports and the driver library loads,
    then C(nvidia-smi --query-gpu) with C(nvidia-smi topo -m), then the PCI bus in sysfs.
  - The PCI backend identifies GPUs on a host without a (working) driver from
    C(/sys/bus/pci/devices/*/{vendor,device,class}) and a built-in table of NVIDIA device IDs
    (Pascal to Blackwell data-center cards), so roles can tell what a fresh host needs.
  - A host without a GPU, a driver that is not loaded, a driver/library version mismatch, a GPU that
    fell off the bus or output that cannot be parsed are not failures. They are reported in C(state)
    with a clear C(msg). The module fails only when the backend you forced cannot be used at all.
  - "A GPU that fell off the bus (Xid 79) is reported in C(lost_gpus), not in C(gpus), from whichever
    source saw it: the C(nvidia-smi) line C(Unable to determine the device handle for GPU 0000:02:00.0:
    GPU is lost.  Reboot the system to recover this GPU) (or C(... Unknown Error)), NVML's
    C(NVML_ERROR_GPU_IS_LOST), or a PCI config space that reads all ones (C(lspci) shows C(rev ff)). The
    state is then V(gpu_lost); the healthy GPUs are still listed and counted."
  - The module only reads. It runs C(nvidia-smi) and reads files under C(/proc) and C(/sys).
author:
  - labfleet maintainers (@labfleet)
options:
  backend:
    description:
      - Where to read the GPUs from.
      - V(auto) tries NVML, then C(nvidia-smi), then the PCI bus, and reports the first answer.
      - V(nvml) fails when the Python module C(pynvml) cannot be imported on the host.
      - V(nvidia_smi) fails when C(nvidia-smi) cannot be found.
      - V(pci) reads only sysfs and never asks the driver, so RV(ansible_facts.nvidia.present) stays
        false. It fails when C(/sys/bus/pci/devices) cannot be read.
    type: str
    choices: [auto, nvml, nvidia_smi, pci]
    default: auto
  nvidia_smi:
    description:
      - Path of the C(nvidia-smi) binary.
      - By default it is looked up on E(PATH) and in C(/usr/bin), C(/usr/local/bin) and
        C(/usr/local/nvidia/bin).
    type: path
  timeout:
    description:
      - Seconds each C(nvidia-smi) call may take before it is stopped (through coreutils C(timeout)).
        A GPU that fell off the bus or a wedged driver can make C(nvidia-smi) hang; the probe then
        reports a C(probe_error) that says so instead of hanging the play.
      - A finite number greater than 0 and at most 3600. V(0), negative values, NaN and infinities
        fail the task (there is no way to wait without a limit).
    type: float
    default: 60
    version_added: 0.1.0
extends_documentation_fragment:
  - labfleet.vllm.attributes
  - labfleet.vllm.attributes.read_only
attributes:
  platform:
    description: Runs on the GPU host it probes (Linux; sysfs, NVML or nvidia-smi).
  facts:
    description: Returns facts under C(ansible_facts.nvidia).
    support: full
notes:
  - Commands run with C(LC_ALL=C). Nothing on the host is changed, in check mode or not.
  - Values a driver answers that no GPU can have are not reported as facts. A compute capability
    outside 1.0 to 20.9 (or not ASCII C(major.minor)), negative or absurd memory, a driver version
    with anything after it (V(550.54.14garbage)), two GPUs with one PCI bus ID or UUID, or more than
    64 GPUs on one host make that backend's answer a V(probe_error) whose C(msg) names the value.
  - With O(backend=pci), or when no driver answers, free memory, UUID, persistence and ECC modes
    are null, and the model and memory come from the built-in table.
seealso:
  - name: nvidia-smi documentation
    description: The C(--query-gpu) fields and the C(topo -m) legend.
    link: https://docs.nvidia.com/deploy/nvidia-smi/index.html
"""

EXAMPLES = r"""
- name: Read the NVIDIA GPUs
  labfleet.vllm.gpu_facts:

- name: Show what was found
  ansible.builtin.debug:
    msg: "{{ ansible_facts.nvidia.state }}: {{ ansible_facts.nvidia.msg }}"

- name: Stop early on hosts whose driver needs attention
  ansible.builtin.assert:
    that:
      - ansible_facts.nvidia.state in ['ok', 'no_gpu']
    fail_msg: "{{ ansible_facts.nvidia.msg }}"

- name: List the GPUs that fell off the bus (they need a reboot)
  ansible.builtin.debug:
    msg: "{{ ansible_facts.nvidia.lost_gpus | map(attribute='bus_id') | join(', ') }}"
  when: ansible_facts.nvidia.state == 'gpu_lost'

- name: Identify GPUs on a fresh host before any driver is installed
  labfleet.vllm.gpu_facts:
    backend: pci

- name: Use a nvidia-smi outside PATH
  labfleet.vllm.gpu_facts:
    backend: nvidia_smi
    nvidia_smi: /opt/nvidia/bin/nvidia-smi
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    nvidia:
      description: The NVIDIA GPUs of the host and the state of its driver.
      returned: always
      type: dict
      contains:
        present:
          description:
            - True only when a working driver (NVML or nvidia-smi) answered and listed at least one GPU,
              and no GPU fell off the bus.
            - False, without failing, when there is no GPU, no working driver or a lost GPU.
          returned: always
          type: bool
          sample: true
        state:
          description:
            - V(ok) a driver answered (or, with O(backend=pci), GPUs were found and the kernel module is loaded).
            - V(no_gpu) no NVIDIA GPU on this host.
            - V(driver_not_loaded) NVIDIA GPUs are on the PCI bus, but no driver answers for them
              (not installed, not loaded, missing tools, or a driver branch that ignores these GPUs).
            - V(driver_library_mismatch) the loaded kernel module and the user-space library differ.
            - V(probe_error) something answered, but in a way this module could not understand.
            - V(gpu_lost) at least one GPU fell off the bus (Xid 79; RV(ansible_facts.nvidia.lost_gpus) names
              it); only a reboot brings it back. The other GPUs are still in RV(ansible_facts.nvidia.gpus).
              A driver/library mismatch found at the same time keeps V(driver_library_mismatch).
          returned: always
          type: str
          choices: [ok, no_gpu, driver_not_loaded, driver_library_mismatch, probe_error, gpu_lost]
          sample: ok
        msg:
          description: One sentence saying what was found and, when needed, what to do.
          returned: always
          type: str
          sample: "Found 2 NVIDIA GPU(s) via nvidia-smi: 2x Tesla V100-PCIE-32GB, compute capability 7.0; driver 550.54.14, CUDA 12.4."
        backend:
          description:
            - Which backend the facts come from. V(none) when nothing could be read.
            - When the driver failed, the GPU list comes from V(pci).
          returned: always
          type: str
          choices: [nvml, nvidia_smi, pci, none]
          sample: nvidia_smi
        driver_version:
          description: NVIDIA driver version reported by the driver; null when no driver answered.
          returned: always
          type: str
          sample: "550.54.14"
        cuda_driver_version:
          description: Highest CUDA version the driver supports (C(CUDA Version) in the nvidia-smi banner); null when unknown.
          returned: always
          type: str
          sample: "12.4"
        kernel_module_version:
          description: Version of the loaded kernel module from C(/proc/driver/nvidia/version); null when it is not loaded.
          returned: always
          type: str
          sample: "550.54.14"
        kernel_module_type:
          description: V(proprietary) or V(open) (the open GPU kernel modules); null when the module is not loaded.
          returned: always
          type: str
          sample: proprietary
        library_version:
          description:
            - Version of the user-space library C(libnvidia-ml.so) (from NVML, from the file that
              C(libnvidia-ml.so.1) points to, or from nvidia-smi's mismatch message); null when not found.
          returned: always
          type: str
          sample: "550.54.14"
        driver_library_mismatch:
          description:
            - True when the driver reports a version mismatch, or when the kernel module and library versions differ.
          returned: always
          type: bool
          sample: false
        count:
          description: Number of GPUs in RV(ansible_facts.nvidia.gpus) (lost GPUs are not counted).
          returned: always
          type: int
          sample: 2
        gpus:
          description: The GPUs, in index order (PCI bus order when they come from the PCI bus).
          returned: always
          type: list
          elements: dict
          sample:
            - index: 0
              name: Tesla V100-PCIE-32GB
              uuid: GPU-1d2b8c39-4e1f-6a0c-8b3e-5f7a9c2d4e61
              pci_bus_id: "0000:3b:00.0"
              pci_device_id: "0x1db6"
              compute_capability: "7.0"
              architecture: Volta
              memory_total_mib: 32768
              memory_free_mib: 32494
              persistence_mode: true
              ecc_mode: Enabled
              pcie_link_gen: 3
              pcie_link_width: 16
              kernel_driver: nvidia
              source: nvidia_smi
          contains:
            index:
              description: GPU index as nvidia-smi numbers it.
              type: int
              returned: always
              sample: 0
            name:
              description: Product name (from the driver, or the PCI table model with O(backend=pci)).
              type: str
              returned: always
              sample: Tesla V100-PCIE-32GB
            uuid:
              description: GPU UUID; null without a driver.
              type: str
              returned: always
              sample: GPU-1d2b8c39-4e1f-6a0c-8b3e-5f7a9c2d4e61
            pci_bus_id:
              description: PCI address in sysfs form (domain:bus:device.function, lower case).
              type: str
              returned: always
              sample: "0000:3b:00.0"
            pci_device_id:
              description: PCI device ID (vendor 0x10de); null when the driver did not report it.
              type: str
              returned: always
              sample: "0x1db6"
            compute_capability:
              description: CUDA compute capability as a string; from the driver, else from the PCI table or the name.
              type: str
              returned: always
              sample: "7.0"
            architecture:
              description: Architecture name (Pascal, Volta, Turing, Ampere, Ada Lovelace, Hopper, Blackwell, ...).
              type: str
              returned: always
              sample: Volta
            memory_total_mib:
              description: Total memory in MiB (nominal board memory from the PCI table without a driver).
              type: int
              returned: always
              sample: 32768
            memory_free_mib:
              description: Free memory in MiB; null without a driver.
              type: int
              returned: always
              sample: 32500
            persistence_mode:
              description: Whether persistence mode is enabled; null when unknown.
              type: bool
              returned: always
              sample: true
            ecc_mode:
              description: Current ECC mode (V(Enabled) or V(Disabled)); null when not supported or unknown.
              type: str
              returned: always
              sample: Enabled
            pcie_link_gen:
              description: Current PCIe link generation; null when unknown.
              type: int
              returned: always
              sample: 3
            pcie_link_width:
              description: Current PCIe link width; null when unknown.
              type: int
              returned: always
              sample: 16
            kernel_driver:
              description: Kernel driver bound to the device in sysfs (V(nvidia), V(nouveau), V(vfio-pci)); null when none or unknown.
              type: str
              returned: always
              sample: nvidia
            source:
              description: Backend that produced this entry (V(nvml), V(nvidia_smi) or V(pci)).
              type: str
              returned: always
              sample: nvidia_smi
        lost_gpus:
          description:
            - GPUs that fell off the bus (Xid 79), in PCI bus order; empty on a healthy host.
            - Pass it to M(labfleet.vllm.deploy_gate) (option O(labfleet.vllm.deploy_gate#module:lost_gpus)),
              which refuses with V(GPU_LOST).
          returned: always
          type: list
          elements: dict
          sample:
            - bus_id: "0000:3b:00.0"
              index: 0
              message: "GPU is lost.  Reboot the system to recover this GPU"
              source: nvidia_smi
          contains:
            bus_id:
              description:
                - PCI address in sysfs form. Null only when NVML reported the GPU lost and the PCI bus
                  could not tell which one it is.
              type: str
              returned: always
              sample: "0000:3b:00.0"
            index:
              description:
                - GPU index as nvidia-smi numbers it, when the driver printed it or PCI bus order gives it
                  unambiguously; null otherwise.
              type: int
              returned: always
              sample: 0
            message:
              description: What the source said about it (the driver's words, or what the PCI config space reads).
              type: str
              returned: always
              sample: "GPU is lost.  Reboot the system to recover this GPU"
            source:
              description: Where it was seen lost (V(nvidia_smi), V(nvml) or V(pci)).
              type: str
              returned: always
              sample: nvidia_smi
        topology:
          description:
            - Link type between GPUs, as in C(nvidia-smi topo -m) (C(NV<n>) for n bonded NVLinks, C(PIX),
              C(PXB), C(PHB), C(NODE), C(SYS)). Empty without a driver. A link is null when it could not be read.
          returned: always
          type: dict
          sample: {"matrix": {"0": {"1": "PHB"}, "1": {"0": "PHB"}}, "pairs": [{"a": 0, "b": 1, "link": "PHB"}]}
          contains:
            matrix:
              description: For each GPU index (as a string), the link to every other GPU index.
              type: dict
              returned: always
              sample: {"0": {"1": "PHB"}, "1": {"0": "PHB"}}
            pairs:
              description: One entry per GPU pair with the lower index in C(a).
              type: list
              elements: dict
              returned: always
              sample: [{"a": 0, "b": 1, "link": "PHB"}]
        nvlink:
          description: True when at least one GPU pair is connected by NVLink (false when unknown).
          returned: always
          type: bool
          sample: false
        probes:
          description: What each backend answered, for troubleshooting (C(backend), C(outcome), C(detail)).
          returned: always
          type: list
          elements: dict
          sample: [{"backend": "nvml", "outcome": "unavailable", "detail": "the Python module pynvml (package nvidia-ml-py) is not installed"}]
"""

import math
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.labfleet.vllm.plugins.module_utils.probes._gpu import (
    BACKENDS,
    BackendUnavailable,
    error_facts,
    probe,
)

NVIDIA_SMI_DIRS = ["/usr/bin", "/usr/local/bin", "/usr/local/nvidia/bin"]

ARGUMENT_SPEC = dict(
    backend=dict(type="str", default="auto", choices=list(BACKENDS)),
    nvidia_smi=dict(type="path"),
    timeout=dict(type="float", default=60),
)

# An hour: nvidia-smi answers in seconds; a call that needs longer is hung.
MAX_TIMEOUT = 3600


def find_nvidia_smi(module):
    """Path of nvidia-smi to use, or None. An explicit path that is not executable counts as missing."""
    path = module.params["nvidia_smi"]
    if path:
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    return module.get_bin_path("nvidia-smi", required=False, opt_dirs=NVIDIA_SMI_DIRS)


def run_module(module):
    """Probe the host; returns (facts, error message or None)."""
    nvidia_smi = find_nvidia_smi(module)
    if module.params["backend"] == "nvidia_smi" and module.params["nvidia_smi"] and nvidia_smi is None:
        return None, "nvidia_smi=%s is not an executable file; fix the path or leave it unset to search PATH" % (
            module.params["nvidia_smi"])

    limit = module.params["timeout"]
    timeout_bin = module.get_bin_path("timeout")

    def run_command(argv):
        if timeout_bin:
            argv = [timeout_bin, "--kill-after=5", "%g" % limit] + list(argv)
        rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C", "LANG": "C"})
        if timeout_bin and rc in (124, 137):
            err = ("%s did not answer within %g s (a hung GPU or driver; look for Xid errors in dmesg)%s"
                   % (os.path.basename(argv[3]), limit, "\n" + err if err else ""))
        return rc, out, err

    try:
        facts = probe(backend=module.params["backend"], run_command=run_command, nvidia_smi=nvidia_smi)
    except BackendUnavailable as exc:
        return None, str(exc)
    except Exception as exc:  # never a traceback: an unexpected error is a state too
        facts = error_facts("%s: %s" % (exc.__class__.__name__, exc))
    if module.params["nvidia_smi"] and nvidia_smi is None:
        facts["probes"].insert(0, {"backend": "nvidia_smi", "outcome": "unavailable",
                                   "detail": "%s is not an executable file" % module.params["nvidia_smi"]})
    elif nvidia_smi and not timeout_bin and module.params["backend"] in ("auto", "nvidia_smi"):
        facts["probes"].append({"backend": "nvidia_smi", "outcome": "unbounded",
                                "detail": "coreutils timeout was not found, so the timeout option could not be "
                                          "applied to nvidia-smi; install coreutils"})
    return facts, None


def check_timeout(value, shown=None):
    """None when ``value`` (the timeout option, a float) is usable, else the message naming it."""
    if not math.isfinite(value) or not 0 < value <= MAX_TIMEOUT:
        return ("timeout must be a number of seconds greater than 0 and at most %d, got %s; a hung GPU makes "
                "nvidia-smi wait forever, so there is no unlimited setting (the default is 60)"
                % (MAX_TIMEOUT, value if shown is None else shown))
    return None


def main():
    try:
        module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    except OverflowError:
        # ansible-core converts a float option with float(), which raises OverflowError (not the
        # TypeError it reports) for an integer beyond the float range: read it raw to say so.
        module = AnsibleModule(argument_spec=dict(ARGUMENT_SPEC, timeout=dict(type="raw")), supports_check_mode=True)
        raw = module.params["timeout"]
        module.fail_json(msg=check_timeout(float("inf"), "an integer of %d digits" % len(str(abs(raw)))
                                           if isinstance(raw, int) else repr(raw)[:80]))
    problem = check_timeout(module.params["timeout"])
    if problem is not None:
        module.fail_json(msg=problem)
    facts, error = run_module(module)
    if error is not None:
        module.fail_json(msg=error)
    module.exit_json(changed=False, ansible_facts={"nvidia": facts})


if __name__ == "__main__":
    main()
