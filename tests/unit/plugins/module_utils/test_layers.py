# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The floors of plugins/module_utils/ (each sub-package's __init__.py says what belongs there).

- Every module_utils file lives in one floor's sub-package.
- A floor imports only from floors below it or from its own sub-package (no import runs back up).
- No file imports a private name (``_x``) of another file: what another file needs is public there.
  A private *module* (``_gate``) is how a file is named, not a private name in it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ast
import glob
import os

import pytest

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
MU_DIR = os.path.join(TOP, "plugins", "module_utils")
MU = "ansible_collections.labfleet.vllm.plugins.module_utils"

# Bottom to top. Floors on the same level may import each other (acyclic; Python would refuse a cycle
# at import time anyway).
FLOORS = {"knowledge": 0, "formats": 1, "clients": 1, "converters": 2, "probes": 3, "decisions": 4, "store": 4, "reporting": 5}
TOP_FLOOR = 6  # plugins/modules, plugins/filter


def _plugin_files():
    files = sorted(glob.glob(os.path.join(TOP, "plugins", "**", "*.py"), recursive=True))
    assert files
    return files


def _floor_of_file(path):
    rel = os.path.relpath(path, MU_DIR)
    if rel.startswith(".."):
        return TOP_FLOOR, None
    package = rel.split(os.sep)[0]
    return FLOORS.get(package), package


def _imports(path):
    """(module path below module_utils, [names]) for each import of the collection's module_utils."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(MU):
            below = node.module[len(MU):].lstrip(".")
            yield node.lineno, below, [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(MU + "."):
                    yield node.lineno, alias.name[len(MU) + 1:], []


def test_every_module_utils_file_is_in_a_floor():
    loose = [os.path.relpath(p, TOP) for p in glob.glob(os.path.join(MU_DIR, "*.py"))]
    assert loose == [], "module_utils files outside a floor's sub-package: %r" % loose
    packages = sorted(d for d in os.listdir(MU_DIR) if os.path.isdir(os.path.join(MU_DIR, d)) and d != "__pycache__")
    assert packages == sorted(FLOORS), packages
    for package in packages:
        init = os.path.join(MU_DIR, package, "__init__.py")
        with open(init, encoding="utf-8") as handle:
            text = handle.read()
        assert '"""Floor' in text and ("May import" in text or "Imports nothing" in text), init


@pytest.mark.parametrize("path", _plugin_files(), ids=lambda p: os.path.relpath(p, TOP))
def test_no_import_runs_up_and_no_private_name_crosses_a_file(path):
    floor, package = _floor_of_file(path)
    if floor is None:
        pytest.skip("not a floor (the package's __init__ at module_utils' top)")
    problems = []
    for line, below, names in _imports(path):
        parts = below.split(".") if below else []
        target_package = parts[0] if parts else None
        if target_package not in FLOORS:
            problems.append("line %d: imports %s outside the floors" % (line, below or MU))
            continue
        target_floor = FLOORS[target_package]
        if target_floor > floor:
            problems.append("line %d: floor %s (%d) imports %s from floor %s (%d), above it"
                            % (line, package or "plugins", floor, below, target_package, target_floor))
        if len(parts) == 2:  # from <floor>._module import names
            private = [n for n in names if n.startswith("_")]
            if private:
                problems.append("line %d: imports private name(s) %s of %s" % (line, ", ".join(private), below))
    assert not problems, "\n".join(problems)
