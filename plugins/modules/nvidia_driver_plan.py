#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_driver_plan
short_description: Plan, assess and key-check an NVIDIA driver installation (pure, no side effects)
version_added: 0.1.0
description:
  - How the C(labfleet.vllm.nvidia_driver) role carries out the driver step of the preflight's plan, as one
    pure function with no side effects. It says which packages carry the step's branch on this distribution,
    what to hold, the apt pin and the repository, whether the host needs a reboot and may have one, and
    whether a downloaded repository key has the expected fingerprint.
  - It decides nothing the plan decided. The action (keep, install, replace or refuse), the kernel-module
    flavour and the package source are the plan's (M(labfleet.vllm.deploy_gate), C(steps.driver)), passed in
    whole as C(step). The V(plan) command refuses a stale plan, naming what differs, when the host's
    distribution or the driver version its installed packages carry is no longer what the step was
    planned from (C(step.distro), C(step.installed)).
  - The module never fails for an answer the request cannot satisfy; the answer then carries C(error).
options:
  request:
    description:
      - The request. Its C(command) is V(plan) (before any change), V(assess) (after installation) or
        V(check_key); the other keys are that command's inputs (see the role's tasks).
    type: dict
    required: true
extends_documentation_fragment:
  - labfleet.vllm.attributes
  - labfleet.vllm.attributes.read_only
attributes:
  platform:
    description: Pure Python; runs on the host whose driver it plans.
author:
  - labfleet contributors (@labfleet)
"""

EXAMPLES = r"""
- name: Plan the driver installation
  labfleet.vllm.nvidia_driver_plan:
    request:
      command: plan
      distribution: "{{ ansible_facts['distribution'] }}"
      distribution_major_version: "{{ ansible_facts['distribution_major_version'] }}"
      distribution_version: "{{ ansible_facts['distribution_version'] }}"
      architecture: "{{ ansible_facts['architecture'] }}"
      kernel: "{{ ansible_facts['kernel'] }}"
      step: "{{ preflight_verdict['steps']['driver'] }}"
      dpkg_query: "{{ dpkg_listing.stdout }}"
  register: driver_plan

- name: Stop when the plan cannot be carried out
  ansible.builtin.fail:
    msg: "{{ driver_plan.answer.error | default(driver_plan.answer.action_msg) }}"
  when: driver_plan.answer.error is defined or driver_plan.answer.action == 'refuse'
"""

RETURN = r"""
answer:
  description:
    - The command's answer. For V(plan) among others C(packages), C(source), C(kernel_module), C(action)
      (V(keep), V(install), V(change) or V(refuse)) with C(action_msg), C(apt_pin) and C(repo); for V(assess)
      C(installed_version), C(to_hold), C(problems) and C(reboot); for V(check_key) C(ok) and C(msg).
    - C(error) instead when the request cannot be satisfied, with what to fix.
  returned: always
  type: dict
  sample: {"branch": 550, "source": "distro", "kernel_module": "proprietary", "action": "install",
           "packages": ["nvidia-kernel-dkms", "nvidia-driver"]}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.labfleet.vllm.plugins.module_utils.clients._bounded import module_within_depth
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._driver import run


def main():
    module = module_within_depth(
        lambda: AnsibleModule(argument_spec=dict(request=dict(type="dict", required=True)), supports_check_mode=True),
        "nvidia_driver_plan", "a request holds strings, numbers and the plan's driver step (a few levels): pass the "
                              "request the nvidia_driver role builds")
    module.exit_json(changed=False, answer=run(module.params["request"]))


if __name__ == "__main__":
    main()
