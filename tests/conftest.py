"""Shared by the unit and integration tests.

``collections/ansible_collections/labfleet/vllm`` is a link to the repository root, so putting
``collections/`` on ``sys.path`` lets the tests import the collection's plugins by their real
names, exactly as Ansible does on a host.
"""

import os
import sys

import pytest

from ansible.module_utils.common import warnings as ansible_warnings

_COLLECTIONS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "collections")
if _COLLECTIONS not in sys.path:
    sys.path.insert(0, _COLLECTIONS)


@pytest.fixture(autouse=True)
def _fresh_ansible_warnings():
    """AnsibleModule collects warnings and deprecations in module-level lists; start each test empty."""
    for name in ("_global_warnings", "_global_deprecations"):
        store = getattr(ansible_warnings, name, None)
        if store is not None:
            store.clear()
    yield
