# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every module's and filter's DOCUMENTATION, EXAMPLES and RETURN is YAML that parses: what ansible-test
sanity's yamllint, ansible-doc and validate-modules read first in `make lint`, caught here in seconds
(an unquoted ": " in a description breaks all three)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import importlib
import os

import pytest
import yaml

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PLUGINS = sorted(glob.glob(os.path.join(TOP, "plugins", "modules", "*.py"))
                 + glob.glob(os.path.join(TOP, "plugins", "filter", "*.py")))


def _load(path):
    kind = os.path.basename(os.path.dirname(path))
    name = os.path.basename(path)[:-3]
    return importlib.import_module("ansible_collections.labfleet.vllm.plugins.%s.%s" % (kind, name))


@pytest.mark.parametrize("path", PLUGINS, ids=[os.path.basename(p) for p in PLUGINS])
def test_docs_parse_as_yaml(path):
    plugin = _load(path)
    for field in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
        text = getattr(plugin, field, None)
        assert isinstance(text, str) and text.strip(), "%s has no %s" % (os.path.basename(path), field)
        yaml.safe_load(text)  # raises with the line and column


def test_every_module_has_the_shared_attributes():
    """The modules' check_mode / diff_mode / platform attributes come from the labfleet.vllm.attributes
    doc fragment (plugins/doc_fragments/): ansible-doc, which merges the fragments, shows all three
    for every module, each with its support and a description."""
    import json
    import subprocess
    import sys
    modules = sorted(os.path.basename(p)[:-3] for p in PLUGINS if os.sep + "modules" + os.sep in p)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(TOP, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    doc_bin = os.path.join(os.path.dirname(sys.executable), "ansible-doc")
    out = subprocess.check_output([doc_bin, "--json"] + ["labfleet.vllm." + m for m in modules], cwd=TOP, env=env)
    docs = json.loads(out)
    assert sorted(docs) == ["labfleet.vllm." + m for m in modules]
    for name, entry in docs.items():
        attributes = entry["doc"]["attributes"]
        for key in ("check_mode", "diff_mode", "platform"):
            assert attributes[key]["support"] in ("full", "partial", "none"), (name, key)
            assert attributes[key]["description"], (name, key)
        assert attributes["check_mode"]["support"] == "full" and attributes["platform"]["platforms"] == "posix", name
