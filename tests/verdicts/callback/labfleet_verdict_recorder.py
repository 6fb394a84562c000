# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Ansible callback: record every labfleet.vllm.deploy_gate call for the verdict snapshot (test-only)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: labfleet_verdict_recorder
type: notification
short_description: Record each labfleet.vllm.deploy_gate call (arguments and result) as a JSON line
description:
  - Test-only (tests/verdicts/README.md). Molecule's provisioner puts this directory on
    E(ANSIBLE_CALLBACK_PLUGINS) (.config/molecule/config.yml); the plugin needs no enabling, so it
    also records the playbooks the verifiers run with their own callback settings.
  - It does nothing unless E(LABFLEET_VERDICT_DIR) names a directory. Then each ansible-playbook
    process appends one line per deploy_gate result to C(<scenario>-<pid>.jsonl) there
    (E(MOLECULE_SCENARIO_NAME), or C(ansible) outside Molecule) with the task's module arguments
    (C(invocation.module_args)), its result, the host, the task and the date.
  - It never writes to stdout (the verifiers parse the json callback's stdout).
    C(scripts/verdict_snapshot.py import-molecule) turns the files into a snapshot for C(replay).
"""

import datetime
import json
import os

from ansible.plugins.callback import CallbackBase

_ACTIONS = ("labfleet.vllm.deploy_gate", "deploy_gate")


def _plain(value):
    """json.dumps' fallback for what is not JSON already (sets, other objects): a list, or its text."""
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    return str(value)


class CallbackModule(CallbackBase):
    """Append each deploy_gate result to LABFLEET_VERDICT_DIR/<scenario>-<pid>.jsonl."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "labfleet_verdict_recorder"
    CALLBACK_NEEDS_ENABLED = False

    def __init__(self, *args, **kwargs):
        """Read LABFLEET_VERDICT_DIR once; without it the plugin stays inert."""
        super(CallbackModule, self).__init__(*args, **kwargs)
        self.directory = os.environ.get("LABFLEET_VERDICT_DIR") or None
        self.scenario = os.environ.get("MOLECULE_SCENARIO_NAME") or "ansible"
        self.playbook = None
        self.play = None

    def v2_playbook_on_start(self, playbook):
        """Remember the playbook's file name."""
        self.playbook = os.path.basename(getattr(playbook, "_file_name", "") or "")

    def v2_playbook_on_play_start(self, play):
        """Remember the play's name."""
        self.play = play.get_name()

    def v2_runner_on_ok(self, result):
        """A task finished on a host."""
        self._record(result, failed=False)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        """A task failed on a host (deploy_gate fails on malformed input)."""
        self._record(result, failed=True)

    def v2_runner_item_on_ok(self, result):
        """One item of a looped task finished."""
        self._record(result, failed=False)

    def v2_runner_item_on_failed(self, result):
        """One item of a looped task failed."""
        self._record(result, failed=True)

    def _record(self, result, failed):
        if not self.directory:
            return
        task = result._task  # pylint: disable=protected-access
        action = getattr(task, "resolved_action", None) or task.action
        if action not in _ACTIONS:
            return
        res = dict(result._result)  # pylint: disable=protected-access
        if "results" in res and isinstance(res["results"], list):
            return  # a loop's summary: its items were recorded one by one
        invocation = res.get("invocation") or {}
        line = {
            "scenario": self.scenario,
            "playbook": self.playbook,
            "play": self.play,
            "task": task.get_name(),
            "host": result._host.get_name(),  # pylint: disable=protected-access
            "date": datetime.date.today().isoformat(),
            "failed": failed,
            "args_from": "invocation" if "module_args" in invocation else "task",
            "args": invocation.get("module_args", task.args),
            # What the task passed (templated): where the module refused its arguments, the
            # invocation holds only what survived the validation.
            "task_args": dict((k, v) for k, v in task.args.items() if not k.startswith("_ansible")),
            "result": res,
        }
        try:
            text = json.dumps(line, default=_plain, sort_keys=False)
            os.makedirs(self.directory, exist_ok=True)
            path = os.path.join(self.directory, "%s-%d.jsonl" % (self.scenario, os.getpid()))
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(text + "\n")
        except (OSError, TypeError, ValueError) as exc:
            self._display.warning("labfleet_verdict_recorder: could not record a deploy_gate result: %s" % exc)
