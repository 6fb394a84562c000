# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: store_manifest_url
short_description: The URL of a model-store revision's manifest, from the request's model_store
version_added: 0.1.0
author: labfleet maintainers
description:
  - Takes the request's C(model_store) (C(url), C(name), C(revision); see the preflight role's
    C(preflight_deployment)) and returns the URL of that revision's C(labfleet-manifest.json) in the store.
  - Returns an empty string when there is no store (no C(model_store), or an empty C(url)) and when the store is
    not one the gate can read (a malformed URL, credentials in it, a name or revision outside the store's rule).
    The gate parses C(model_store) the same way (labfleet.vllm.deploy_gate) and refuses the host with a
    message that says what to fix; a caller asks the store only for a non-empty answer.
options:
  _input:
    description: The request's C(model_store), or null.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Read the revision's manifest from the store
  ansible.builtin.uri:
    url: "{{ store | labfleet.vllm.store_manifest_url }}"
    return_content: true
  when: store | labfleet.vllm.store_manifest_url | length > 0
  vars:
    store: {url: "http://models.lab:8080", name: llama-3.1-8b, revision: "2026-11-30"}
"""

RETURN = r"""
_value:
  description: The manifest's URL (C(http://models.lab:8080/llama-3.1-8b/2026-11-30/labfleet-manifest.json)), or an
    empty string as described above.
  type: str
"""

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate_inputs import GateInputError
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._model_store import store_request


def store_manifest_url(store):
    """The manifest's URL of request.model_store, '' when there is none or the gate could not read it."""
    try:
        parsed = store_request(store if store is not None else {})
    except GateInputError:
        return ""
    return parsed["manifest_url"] if parsed else ""


class FilterModule(object):
    """The model store's manifest URL."""

    def filters(self):
        return {"store_manifest_url": store_manifest_url}
