# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ray_status module: probes/_ray.py (test_ray_probe.py under module_utils) through Ansible's
argument handling, with a fake run_command: a cluster that is not ready is a result, a missing
container or docker fails unless fail_on_absent is false, check mode runs the same."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib.util
import json
import os
from unittest import mock

import yaml

from ansible.module_utils import basic

from ansible_collections.labfleet.vllm.plugins.module_utils.probes import _ray as R
from ansible_collections.labfleet.vllm.plugins.modules import ray_status

# run_module (exit_json/fail_json caught), loaded by path as test_group_gate.py does.
_SPEC = importlib.util.spec_from_file_location(
    "labfleet_test_hostile_modules_for_ray", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                          "test_hostile_modules.py"))
H = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(H)

MEMBERS = [{"name": "gpu1", "address": "10.0.0.11", "gpus": 2},
           {"name": "gpu2", "address": "10.0.0.12", "gpus": 2},
           {"name": "gpu3", "address": "10.0.0.13", "gpus": 2}]


def _nodes(addresses):
    return json.dumps({"nodes": [{"node_id": a, "address": a, "alive": True, "gpus": 2.0, "node_manager_port": 40000}
                                 for a in addresses], "ray_version": "2.44.1", "gcs_address": "10.0.0.11:6379"})


def run(args, inspect=(0, "running\n", ""), exec_answer=None, docker_exists=True):
    calls = []

    def run_command(self, argv, **kwargs):
        calls.append((argv, kwargs.get("data")))
        if argv[1] == "container":
            return inspect
        return exec_answer or (0, _nodes(m["address"] for m in MEMBERS) + "\n", "")

    with mock.patch.object(basic.AnsibleModule, "run_command", run_command), \
            mock.patch.object(ray_status, "_docker", lambda module, path: "/usr/bin/docker" if docker_exists else None):
        kind, result = H.run_module(ray_status, args)
    return kind, result, calls


def test_a_ready_cluster():
    kind, result, calls = run({"expect_members": MEMBERS, "expect_gpus": 6})
    assert kind == "exit" and result["changed"] is False and result["ready"] is True
    assert result["gpus_total"] == 6 and result["alive_count"] == 3 and result["missing"] == []
    assert [m["gpus_seen"] for m in result["members"]] == [2, 2, 2] and result["problems"] == []
    assert calls[1][0][:6] == ["/usr/bin/docker", "exec", "-i", "labfleet-ray", "python3", "-"]
    assert calls[1][1] == R.RAY_SCRIPT


def test_a_missing_member_is_not_a_failure():
    kind, result, _c = run({"expect_members": MEMBERS, "expect_gpus": 6},
                           exec_answer=(0, _nodes(["10.0.0.11", "10.0.0.12"]), ""))
    assert kind == "exit" and result["ready"] is False and result["missing"] == ["gpu3"]
    assert result["problems"][0].startswith("member gpu3 (10.0.0.13) is not in the Ray cluster")


def test_check_mode_runs_the_same_read_only_commands():
    normal = run({"expect_members": MEMBERS})
    checked = run({"expect_members": MEMBERS, "_ansible_check_mode": True})
    assert checked[0] == "exit" and checked[1] == normal[1] and checked[2] == normal[2]


def test_absent_container_fails_unless_told_not_to():
    absent = (1, "", "Error: No such object: labfleet-ray")
    kind, result, _c = run({"expect_members": MEMBERS}, inspect=absent)
    assert kind == "fail" and "container labfleet-ray does not exist" in result["msg"]
    assert "systemctl start labfleet-ray.service" in result["msg"]
    kind, result, _c = run({"expect_members": MEMBERS, "fail_on_absent": False}, inspect=absent)
    assert kind == "exit" and result["ready"] is False and "does not exist" in result["problems"][0]


def test_missing_docker_fails_unless_told_not_to():
    kind, result, calls = run({}, docker_exists=False)
    assert kind == "fail" and "docker is not at /usr/bin/docker" in result["msg"] and calls == []
    kind, result, calls = run({"fail_on_absent": False}, docker_exists=False)
    assert kind == "exit" and result["ready"] is False and calls == []


def test_ray_that_does_not_answer():
    kind, result, _c = run({"expect_members": MEMBERS}, exec_answer=(1, "", "Traceback ... boom"))
    assert kind == "exit" and result["answered"] is False and result["ready"] is False
    assert "did not answer" in result["problems"][0]


def test_bad_options_fail_naming_them():
    assert "timeout" in run({"timeout": 1})[1]["msg"]
    assert "container" in run({"container": "-it"})[1]["msg"]
    assert "expect_members[0]" in run({"expect_members": [{"name": "gpu1"}]})[1]["msg"]
    assert "expect_members[0].gpus" in run({"expect_members": [dict(MEMBERS[0], gpus="two")]})[1]["msg"]


def test_the_documentation_matches_the_arguments():
    doc = yaml.safe_load(ray_status.DOCUMENTATION)
    assert set(doc["options"]) == {"container", "docker_bin", "expect_members", "expect_gpus", "timeout",
                                   "fail_on_absent"}
    kind, result, _c = run({"expect_members": MEMBERS})
    assert set(yaml.safe_load(ray_status.RETURN)) == set(result) - {"changed"}
    yaml.safe_load(ray_status.EXAMPLES)
