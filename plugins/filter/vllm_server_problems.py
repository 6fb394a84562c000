# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: vllm_server_problems
short_description: Check the values the vllm_server role renders into units, command lines and env files
version_added: 0.1.0
author: labfleet maintainers
description:
  - Returns one sentence per problem, naming the variable and what to change; an empty list when every value is
    safe to render. Secrets are never quoted in a message.
  - A value with a control character (a newline ends a unit line, and systemd would read the rest as a new
    directive) is refused everywhere; paths must be absolute and plain; the image must be repository[:tag].
  - C(docker_args) that give the container the host (C(--privileged), C(--pid host), C(--network host), a bind
    mount of C(/), C(/etc), the Docker socket, dangerous C(--cap-add), unconfined C(--security-opt)) are refused
    unless C(allow_host_access) is true; C(-e VLLM_API_KEY=...) and C(--api-key) in vLLM's argv are always
    refused (a key on a command line is visible to C(ps) and C(docker inspect)).
  - An env mapping may not set C(VLLM_API_KEY), C(HF_TOKEN) or C(HUGGING_FACE_HUB_TOKEN); names are shell-style.
  - A bind address beyond loopback needs C(expose); without an API key it also needs C(expose_without_api_key).
options:
  _input:
    description:
      - C(docker_bin), C(shm_size), C(cache_dir), C(config_dir), C(state_dir), C(model_path),
        C(serving_model_path), C(image), C(docker_args), C(allow_host_access), C(env), C(api_key), C(hf_token),
        C(expose), C(expose_without_api_key), C(default_bind), C(instances) (each C(name),
        C(served_model_name), C(port), C(bind_address), C(cuda_visible_devices), C(gpus), C(env), C(argv)) and
        C(instance_defaults) (merged under each instance).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Refuse values that would break the unit
  ansible.builtin.assert:
    that: problems | length == 0
    fail_msg: "{{ problems | join('; ') }}"
  vars:
    problems: "{{ {'docker_bin': '/usr/bin/docker', 'docker_args': ['--privileged']} | labfleet.vllm.vllm_server_problems }}"
"""

RETURN = r"""
_value:
  description: One sentence per problem; empty when there is none.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.labfleet.vllm.plugins.module_utils.formats._unit import problems


def vllm_server_problems(values):
    """The problems of the values vllm_server renders (an empty list when none)."""
    if not isinstance(values, dict):
        raise AnsibleFilterError("labfleet.vllm.vllm_server_problems expects a mapping, got %s" % type(values).__name__)
    return problems(values)


class FilterModule(object):
    """The vllm_server value checks."""

    def filters(self):
        return {"vllm_server_problems": vllm_server_problems}
