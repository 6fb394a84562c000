"""Make ``ansible_collections.labfleet.vllm`` importable from this checkout.

``collections/ansible_collections/labfleet/vllm`` is a link to the repository root, so putting
``collections/`` on ``sys.path`` lets unit tests import the collection's plugins by their real
names, exactly as Ansible does on a host.
"""

import os
import sys

_REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
_COLLECTIONS = os.path.join(_REPO, "collections")
if _COLLECTIONS not in sys.path:
    sys.path.insert(0, _COLLECTIONS)

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
