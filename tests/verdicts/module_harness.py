# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Run a module's main() in this process on given arguments, for the verdict replay (test-only)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import json
from unittest import mock

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args


# What Ansible (or the callback) has in a task result beside what the module returned.
_ANSIBLE_KEYS = ("invocation", "warnings", "deprecations", "exception", "item", "ansible_loop_var", "skipped_reason")


def module_view(result, failed):
    """A module's result as the verdict snapshot compares it, from main() here or from a task result.

    Leaves out Ansible's own keys (``_ansible_*``, invocation, warnings, a loop's item ...) and the
    traceback of a failure; ``failed`` is true or absent, and a failed result has no ``changed``
    (Ansible adds ``changed: false`` to it, main()'s fail_json does not).
    """
    out = dict((k, v) for k, v in result.items() if not k.startswith("_ansible") and k not in _ANSIBLE_KEYS)
    out.pop("failed", None)
    if failed:
        out["failed"] = True
        if out.get("changed") is False:
            del out["changed"]
    return out


class _Done(Exception):
    """Raised by the patched exit_json/fail_json to carry the module's result out of main()."""

    def __init__(self, result):
        """Keep the result."""
        Exception.__init__(self, "module finished")
        self.result = result


def _exit_json(_module, **kwargs):
    raise _Done(kwargs)


def _fail_json(_module, msg, **kwargs):
    kwargs["msg"] = msg
    kwargs["failed"] = True
    raise _Done(kwargs)


def run_module(module, main, args, patches=None):
    """The result of ``main()`` (a module's entry point) run with ``args`` as its parameters.

    ``patches``: {attribute of ``module``: replacement} for the time of the call. The result goes
    through JSON as Ansible carries it (tuples become lists) and module_view(); a main() that
    returns without exit_json or fail_json raises AssertionError.
    """
    with contextlib.ExitStack() as stack:
        stack.enter_context(patch_module_args(dict(args)))
        stack.enter_context(mock.patch.object(basic.AnsibleModule, "exit_json", _exit_json))
        stack.enter_context(mock.patch.object(basic.AnsibleModule, "fail_json", _fail_json))
        for name, value in (patches or {}).items():
            stack.enter_context(mock.patch.object(module, name, value))
        try:
            main()
        except _Done as done:
            result = json.loads(json.dumps(done.result))
            return module_view(result, bool(result.get("failed")))
    raise AssertionError("%s returned without exit_json or fail_json" % module.__name__)
