# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The request is written once: its defaults live in the preflight role (preflight_deployment_defaults),
and the shipped lab inventory and the sandbox's say only what they choose."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import os

import yaml

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
# What the shipped lab chooses of the request (its values happen to be the reference deployment's).
LAB_CHOICES = ("image", "model_path")


class _Loader(yaml.SafeLoader):
    """YAML as Ansible reads it here: ``!unsafe`` is a string that is never templated."""


_Loader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))


def _load(*parts):
    with open(os.path.join(TOP, *parts)) as handle:
        return yaml.load(handle, Loader=_Loader)  # noqa: S506 (a SafeLoader with one more string tag)


def _role_defaults():
    found = {}
    for path in glob.glob(os.path.join(TOP, "roles", "*", "defaults", "main.yml")):
        found.update(_load(os.path.relpath(path, TOP)) or {})
    return found


def test_the_lab_inventory_sets_only_role_variables_and_changes_what_it_sets():
    lab = _load("inventories", "lab", "group_vars", "vllm_hosts.yml")
    defaults = _role_defaults()
    assert sorted(set(lab) - set(defaults)) == [], "not a role variable"
    restated = [name for name, value in lab.items() if name != "preflight_deployment" and value == defaults[name]]
    assert restated == [], "the lab inventory restates role defaults: %r" % restated


def test_the_lab_request_holds_only_the_labs_choices():
    request = _load("inventories", "lab", "group_vars", "vllm_hosts.yml")["preflight_deployment"]
    reference = _role_defaults()["preflight_deployment_defaults"]
    assert set(request) <= set(reference)
    restated = [key for key, value in request.items() if value == reference[key] and key not in LAB_CHOICES]
    assert restated == [], "the lab's request restates defaults: %r" % restated
    assert _role_defaults()["preflight_deployment"] == {}


def test_the_sandbox_request_holds_only_its_choices():
    play = _load("tests", "sandbox", "lab.yml")[0]
    request = play["vars"]["__sandbox_request"]
    reference = _role_defaults()["preflight_deployment_defaults"]
    assert set(request) <= set(reference)
    assert [key for key, value in request.items() if value == reference[key]] == []
