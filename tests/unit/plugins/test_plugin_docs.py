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
