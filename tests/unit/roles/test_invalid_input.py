# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every role refuses bad input by name, before it does anything (the tests_invalid_input of
linux-system-roles, for all nine roles).

Each case runs `ansible-playbook --check` on localhost (connection local, no facts gathered) with a
play that includes one role and gives it one wrong-typed or invalid variable. The role's first task,
the argument validation from its meta/argument_specs.yml, must fail the play with a message that
names the variable, and no task of the role may run: nothing on this machine is changed (the
validation is an action on the controller; Ansible's temporary files go to tmp_path).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil
import subprocess
import sys

import pytest

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
# The ansible-playbook of the venv that runs the tests (make venv), else the one on PATH.
PLAYBOOK_BIN = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
if not os.path.exists(PLAYBOOK_BIN):
    PLAYBOOK_BIN = shutil.which("ansible-playbook") or PLAYBOOK_BIN

# role -> (variable, bad value, what the message says about it besides its name)
CASES = {
    "preflight": ("preflight_deployment", "vllm/vllm-openai:v0.8.5", "unable to convert to dict"),
    "nvidia_driver": ("nvidia_driver_reboot", "sometimes", "must be one of: auto, never, always"),
    "container_runtime": ("container_runtime_docker_source", "snap", "must be one of: distro, docker"),
    "vllm_server": ("vllm_server_image_source", "rsync", "must be one of: pull, tarball"),
    "dcgm_exporter": ("dcgm_exporter_enabled", "perhaps", "unable to convert to bool"),
    "doctor": ("doctor_timeout", "soon", "unable to convert to int"),
    "benchmark": ("benchmark_runs", "many", "unable to convert to int"),
    "fleet_report": ("fleet_report_formats", ["pdf"], "must be one or more of: json, markdown, html"),
    "gateway": ("gateway_port", "https", "unable to convert to int"),
    "model_store": ("model_store_convert", "maybe", "unable to convert to bool"),
    "ray_cluster": ("ray_cluster_port", "gcs", "unable to convert to int"),
}

# More cases of one role: (role, variable, bad value, what the message says besides the variable's name).
MORE_CASES = [
    # A misspelt key of the model store (issue 26) is refused before the preflight asks any store.
    ("preflight", "preflight_deployment",
     {"model_store": {"url": "http://models.lab:8080", "name": "quasar", "revison": "2026-11-30"}},
     "preflight_deployment.model_store.revison. Supported parameters include: name, revision, url"),
    # The reachability probe between a host group's members (issue 27): a switch.
    ("preflight", "preflight_group_probe_network", "perhaps", "unable to convert to bool"),
    # vllm_server's fetch from the store: quick or full.
    ("vllm_server", "vllm_server_model_verify", "sometimes", "must be one of: quick, full"),
]


def test_every_role_has_a_case():
    assert sorted(CASES) == sorted(d for d in os.listdir(os.path.join(TOP, "roles"))
                                   if os.path.isdir(os.path.join(TOP, "roles", d)))


@pytest.mark.parametrize("role,variable,value,says", [(role,) + CASES[role] for role in sorted(CASES)] + MORE_CASES)
def test_role_refuses_bad_input_by_name(role, variable, value, says, tmp_path):
    marker = tmp_path / "a task of the role ran"
    play = [{
        "name": "Feed %s a bad %s" % (role, variable),
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "tasks": [
            {"name": "Include the role", "ansible.builtin.include_role": {"name": "labfleet.vllm." + role},
             "vars": {variable: value}},
            {"name": "Not reached", "ansible.builtin.copy": {"content": "", "dest": str(marker), "mode": "0600"}},
        ],
    }]
    playbook = tmp_path / "play.yml"
    playbook.write_text(json.dumps(play))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(TOP, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "local"), ANSIBLE_REMOTE_TEMP=str(tmp_path / "remote"),
               ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    done = subprocess.run([PLAYBOOK_BIN, "--check", "-i", "localhost,", str(playbook)], cwd=TOP, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=120,
                          check=False)
    out = done.stdout
    assert done.returncode == 2, out
    assert "Validation of arguments failed" in out, out
    # A key inside a dict variable is named with the variable's: preflight_deployment.model_store.x.
    assert "'%s'" % variable in out or " %s " % variable in out or "%s." % variable in out, out
    assert says in out, out
    # The include itself is the one task that is ok; of the role only its validation ran.
    tasks = [line for line in out.splitlines() if line.startswith("TASK [")]
    assert tasks[0].startswith("TASK [Include the role]") and len(tasks) == 2, tasks
    assert tasks[1].startswith("TASK [labfleet.vllm.%s : Validating arguments against arg spec 'main'" % role), tasks
    assert "ok=1 " in out and "changed=0 " in out and "failed=1 " in out, out
    assert not marker.exists()
