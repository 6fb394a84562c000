"""Shared by the unit and integration tests.

``collections/ansible_collections/labfleet/vllm`` is a link to the repository root, so putting
``collections/`` on ``sys.path`` lets the tests import the collection's plugins by their real
names, exactly as Ansible does on a host.
"""

import os
import sys

import pytest
from hypothesis import settings

from ansible.module_utils import _internal as ansible_internal
from ansible.module_utils.common import warnings as ansible_warnings

_COLLECTIONS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "collections")
if _COLLECTIONS not in sys.path:
    sys.path.insert(0, _COLLECTIONS)

# The property tests explore new random inputs on every run on a developer's machine (and keep what
# failed in .hypothesis/). Under CI (CI set, as .ci/run's callers do) they run a fixed, derandomized
# set: a gate that passes or fails on the same commit every time. A counterexample found locally
# becomes an @example of its test.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(autouse=True)
def _fresh_ansible_warnings(monkeypatch):
    """AnsibleModule collects warnings and deprecations in module-level lists; start each test empty.

    Importing controller code (ansible.errors: the filter plugins and their tests do) sets ansible's
    process-wide ``is_controller`` switch, after which a module's warnings go to the controller's
    display instead of its result. Modules run on the host, so every test starts on the host side;
    a test of controller code imports what it needs and so sets the switch itself.
    """
    monkeypatch.setattr(ansible_internal, "is_controller", False)
    for name in ("_global_warnings", "_global_deprecations"):
        store = getattr(ansible_warnings, name, None)
        if store is not None:
            store.clear()
    yield
