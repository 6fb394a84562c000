# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""store_manifest_url: the preflight asks the store only for a model_store the gate can read, with the
gate's own parse of it (no second rule for the URL, the name or the revision)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.labfleet.vllm.plugins.filter.store_manifest_url import FilterModule, store_manifest_url
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate_inputs import GateInputError
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._model_store import store_request

STORE = {"url": "http://models.lab:8080/", "name": "llama-3.1-8b", "revision": "2026-11-30+fp16"}


def test_the_manifest_url_of_a_readable_store():
    assert store_manifest_url(STORE) == "http://models.lab:8080/llama-3.1-8b/2026-11-30+fp16/labfleet-manifest.json"
    assert store_manifest_url(dict(STORE, url=" https://[fd00::1]:8443/models ")) == \
        "https://[fd00::1]:8443/models/llama-3.1-8b/2026-11-30+fp16/labfleet-manifest.json"
    assert FilterModule().filters()["store_manifest_url"] is store_manifest_url


@pytest.mark.parametrize("store", [None, {}, {"url": ""}, {"url": "  ", "name": "x", "revision": "y"}])
def test_no_store_is_an_empty_answer(store):
    assert store_manifest_url(store) == ""


@pytest.mark.parametrize("store", [
    dict(STORE, url="http://user:secret@models.lab:8080"),       # credentials: never sent anywhere
    dict(STORE, url="ftp://models.lab"),
    dict(STORE, url="http://models.lab:8080/?q=1"),
    dict(STORE, url="http://models.lab:99999"),
    dict(STORE, url="http://models.lab/a/../b"),
    dict(STORE, name="../etc"),
    dict(STORE, name=""),
    dict(STORE, revision=".hidden"),
    dict(STORE, revision=20261130),                              # YAML read a number: the gate wants text
    dict(STORE, revision="r" * 129),
    dict(STORE, extra="key"),
    "http://models.lab:8080",
])
def test_a_store_the_gate_refuses_is_not_asked(store):
    # The gate refuses the same input with a message that says what to fix.
    with pytest.raises(GateInputError):
        store_request(store)
    assert store_manifest_url(store) == ""
