# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: gateway_backends
short_description: The gateway's backend servers, from each host's plan and this run's rollout
version_added: 0.1.0
author: labfleet maintainers
description:
  - Takes one entry per vLLM host - C(host) (its inventory name), C(verdict) (its C(preflight_verdict)), C(rollout)
    (its C(labfleet_rollout), when this run rolled it out), C(server) (its C(vllm_server_result)), C(address) (the
    address the gateway reaches the host at) and C(bind_default) (its C(vllm_server_bind_address)).
  - Returns C(backends) (one per planned instance of an allowed host - C(name), C(host), C(instance), C(address),
    C(port), C(model), C(state) V(ready) or V(out), C(why)), C(models) (each served model name's HAProxy backend and
    server names) and C(left_out) (hosts and instances that are not backends, with why).
  - An instance is V(ready) only after the rollout's smoke test passed on its host (or when no rollout ran, or
    the rollout stopped before the host - the health checks judge it); a host whose rollout failed or was rolled
    back is V(out). A refused host is left out; an instance published on loopback only is left out unless the
    gateway is on its host.
options:
  _input:
    description: The host entries, in inventory order.
    type: list
    elements: dict
    required: true
  gateway_host:
    description: The inventory name of the gateway's host (an instance on loopback is reachable from it only).
    type: str
"""

EXAMPLES = r"""
- name: The backends of the gateway, from the plans
  ansible.builtin.set_fact:
    gateway_view: "{{ entries | labfleet.vllm.gateway_backends(inventory_hostname) }}"
  vars:
    entries:
      - host: gpu01
        verdict: "{{ hostvars['gpu01']['preflight_verdict'] }}"
        rollout: "{{ hostvars['gpu01']['labfleet_rollout'] | default(none) }}"
        address: 10.0.0.11
"""

RETURN = r"""
_value:
  description: C(backends), C(models) and C(left_out), as described above.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gateway import GatewayInputError, plan_backends


def gateway_backends(entries, gateway_host=None):
    """The gateway's backends from the host entries (see DOCUMENTATION)."""
    try:
        return plan_backends(entries, gateway_host)
    except GatewayInputError as err:
        raise AnsibleFilterError("labfleet.vllm.gateway_backends: %s" % err)


class FilterModule(object):
    """The gateway's backend list."""

    def filters(self):
        return {"gateway_backends": gateway_backends}
