# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""probes/_ray.py: what the in-container script prints (recorded from Ray 2.44.1 against a real
head), the judgment against the group's members, and ray_status() with recorded docker answers."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import subprocess
import sys

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.probes import _ray as R

MEMBERS = [{"name": "gpu1", "address": "10.0.0.11", "gpus": 2},
           {"name": "gpu2", "address": "10.0.0.12", "gpus": 2},
           {"name": "gpu3", "address": "10.0.0.13", "gpus": 2}]


def node(address, alive=True, gpus=2.0, port=43777, node_id=None):
    return {"node_id": node_id or "n-" + address, "address": address, "alive": alive, "gpus": gpus,
            "node_manager_port": port}


def answer(nodes, version="2.44.1", gcs="10.0.0.11:6379"):
    return json.dumps({"nodes": nodes, "ray_version": version, "gcs_address": gcs})


# What the script printed against `ray start --head --port 6390 --num-gpus 2` plus a worker with
# --num-gpus 1 whose raylet was then killed (Ray 2.44.1; Ray's own lines on stderr).
RECORDED = ('{"nodes": [{"node_id": "a1d2996a30ad8599f51b561a1e5c393d78f91974cb2ba6ef8bd6001a", "address": '
            '"192.0.2.2", "alive": true, "gpus": 2.0, "node_manager_port": 43777}, {"node_id": '
            '"855fa7fa0196d9dad098aced08eb668a8170e112555101b7a31b50e2", "address": "192.0.2.2", "alive": false, '
            '"gpus": 0, "node_manager_port": 38351}], "ray_version": "2.44.1", "gcs_address": "192.0.2.2:6390"}\n')
RECORDED_NO_RAY = ('{"error": "connect", "detail": "ConnectionError: Could not find any running Ray instance. Please '
                   'specify the one to connect to by setting `--address` flag or `RAY_ADDRESS` environment variable."}\n')


class Docker:
    """A recorded docker: inspect answers ``state`` (or fails with ``inspect_err``), exec answers ``out``."""

    def __init__(self, state="running", out=None, err="", rc=0, inspect_err=None, late=False):
        self.state, self.out, self.err, self.rc = state, out, err, rc
        self.inspect_err, self.late = inspect_err, late
        self.calls = []

    def __call__(self, argv, data, limit):
        self.calls.append((argv, data, limit))
        if argv[1] == "container":
            if self.inspect_err:
                return 1, "", self.inspect_err, False
            return 0, self.state + "\n", "", False
        return self.rc, self.out if self.out is not None else answer([node(m["address"]) for m in MEMBERS]), \
            self.err, self.late


def test_the_recorded_answer_parses_with_the_dead_node():
    parsed = R.parse_script_output(0, "2026-12-07 INFO worker.py:1 -- Connecting\n" + RECORDED, "")
    assert parsed["ray_version"] == "2.44.1" and parsed["gcs_address"] == "192.0.2.2:6390"
    seen = [(n["alive"], n["gpus"], n["node_manager_port"]) for n in parsed["nodes"]]
    assert seen == [(True, 2, 43777), (False, 0, 38351)]
    judged = R.judge(parsed["nodes"], [{"name": "head", "address": "192.0.2.2", "gpus": 2}], 2)
    assert judged["ready"] and judged["gpus_total"] == 2 and judged["alive_count"] == 1


@pytest.mark.parametrize("out, err, error", [
    (RECORDED_NO_RAY, "", "connect"),
    ("", "OCI runtime exec failed: exec failed: unable to start container process: exec: \"python3\": "
         "executable file not found in $PATH: unknown", "no_answer"),
    ("{not json\n", "", "no_answer"),
    ('["a list"]\n', "", "no_answer"),
    ('{"error": "timeout", "detail": "Ray did not answer within 27 s"}\n', "", "timeout"),
])
def test_answers_that_are_not_a_cluster(out, err, error):
    parsed = R.parse_script_output(1, out, err)
    assert parsed["error"] == error and parsed["detail"]


def test_all_members_alive_is_ready():
    judged = R.judge([node(m["address"]) for m in MEMBERS], MEMBERS, 6, "10.0.0.11:6379")
    assert judged["ready"] and judged["missing"] == [] and judged["gpus_total"] == 6
    assert [m["gpus_seen"] for m in judged["members"]] == [2, 2, 2]


def test_a_missing_member_is_named_with_what_to_do():
    judged = R.judge([node("10.0.0.11"), node("10.0.0.12")], MEMBERS, 6, "10.0.0.11:6379")
    assert not judged["ready"] and judged["missing"] == ["gpu3"]
    codes = [(i["code"], i["member"]) for i in judged["issues"]]
    assert codes == [("RAY_MEMBER_MISSING", "gpu3"), ("RAY_GPUS_SHORT", None)]
    assert judged["issues"][0]["text"] == (
        "member gpu3 (10.0.0.13) is not in the Ray cluster: start labfleet-ray.service there (systemctl status "
        "labfleet-ray; journalctl -u labfleet-ray) and check that it reaches 10.0.0.11:6379")


def test_a_dead_node_counts_only_when_no_live_node_replaced_it():
    nodes = [node("10.0.0.11"), node("10.0.0.12"), node("10.0.0.13", alive=False, gpus=0)]
    judged = R.judge(nodes, MEMBERS, 6)
    assert judged["issues"][0]["code"] == "RAY_MEMBER_DEAD" and "left the Ray cluster" in judged["issues"][0]["text"]
    restarted = nodes + [node("10.0.0.13", node_id="new")]
    assert R.judge(restarted, MEMBERS, 6)["ready"]


def test_a_member_short_of_gpus():
    judged = R.judge([node("10.0.0.11"), node("10.0.0.12", gpus=1.0), node("10.0.0.13")], MEMBERS, 6)
    assert not judged["ready"] and judged["missing"] == []
    codes = [(i["code"], i["member"]) for i in judged["issues"]]
    assert codes == [("RAY_MEMBER_GPUS_SHORT", "gpu2"), ("RAY_GPUS_SHORT", None)]
    assert "shows 1 of its 2 GPUs" in judged["issues"][0]["text"] and "--num-gpus 2" in judged["issues"][0]["text"]


def test_expect_gpus_alone_and_a_stale_node():
    judged = R.judge([node("10.0.0.11"), node("10.0.0.99")], None, 6)
    assert not judged["ready"] and judged["gpus_total"] == 4 and judged["members"] == []
    judged = R.judge([node(m["address"]) for m in MEMBERS] + [node("10.0.0.99")], MEMBERS, 6)
    assert judged["ready"] and judged["unexpected"] == ["10.0.0.99"]


def test_ray_status_runs_inspect_then_the_script_on_stdin():
    docker = Docker()
    result = R.ray_status(docker, "/usr/bin/docker", expect_members=MEMBERS, expect_gpus=6, timeout=30)
    assert result["ready"] and result["answered"] and result["container_state"] == "running"
    assert result["problems"] == [] and result["ray_version"] == "2.44.1"
    (inspect, _i, _l), (exec_argv, data, limit) = docker.calls
    assert inspect == ["/usr/bin/docker", "container", "inspect", "--format", "{{.State.Status}}", "labfleet-ray"]
    assert exec_argv == ["/usr/bin/docker", "exec", "-i", "labfleet-ray", "python3", "-", "27"]
    assert data == R.RAY_SCRIPT and limit == 30


def test_ray_status_not_ready_is_a_result():
    result = R.ray_status(Docker(out=answer([node("10.0.0.11")])), "docker", expect_members=MEMBERS, expect_gpus=6)
    assert result["answered"] and not result["ready"] and result["missing"] == ["gpu2", "gpu3"]
    assert len(result["problems"]) == 3


@pytest.mark.parametrize("docker, words", [
    (Docker(out=RECORDED_NO_RAY, rc=1), "Ray is not running in labfleet-ray"),
    (Docker(out="", err="garbage", rc=1), "no_answer"),
    (Docker(out="", rc=137, late=True), "did not end within 30 s"),
    (Docker(out='{"error": "import", "detail": "ModuleNotFoundError: No module named \'ray\'"}', rc=2), "no usable Ray"),
])
def test_ray_that_does_not_answer_is_not_ready_with_a_problem(docker, words):
    result = R.ray_status(docker, "docker", expect_members=MEMBERS, expect_gpus=6, timeout=30)
    assert not result["ready"] and not result["answered"] and result["container_state"] == "running"
    assert len(result["problems"]) == 1 and words in result["problems"][0], result["problems"]


@pytest.mark.parametrize("docker, words", [
    (Docker(inspect_err="Error: No such object: labfleet-ray"), "container labfleet-ray does not exist"),
    (Docker(inspect_err="Error response from daemon: No such container: labfleet-ray"), "systemctl start"),
    (Docker(state="exited"), "container labfleet-ray is exited, not running"),
    (Docker(inspect_err="Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon "
                        "running?"), "start Docker"),
    (Docker(out="", rc=1, err="Error response from daemon: container 4f2a is not running"), "is not running"),
])
def test_no_container_or_no_docker_raises_with_the_fix(docker, words):
    with pytest.raises(R.RayStatusError) as info:
        R.ray_status(docker, "docker", expect_members=MEMBERS)
    assert words in str(info.value)


def test_the_script_prints_one_json_line_and_stops_itself(tmp_path):
    """The real script with a stand-in ray package: one that answers, one that never does."""
    fake = tmp_path / "answers" / "ray"
    fake.mkdir(parents=True)
    fake.joinpath("__init__.py").write_text(
        "__version__ = '2.44.1'\n"
        "def init(**kwargs):\n    assert kwargs == {'address': 'auto', 'logging_level': 'ERROR', "
        "'log_to_driver': False}\n"
        "def nodes():\n    return [{'NodeID': 'ab', 'NodeManagerAddress': '10.0.0.11', 'Alive': True, "
        "'Resources': {'GPU': 2.0, 'CPU': 8.0}, 'NodeManagerPort': 40000}]\n"
        "class _C:\n    gcs_address = '10.0.0.11:6379'\n"
        "def get_runtime_context():\n    return _C()\n"
        "def shutdown():\n    print('shutdown')\n")
    hangs = tmp_path / "hangs" / "ray"
    hangs.mkdir(parents=True)
    hangs.joinpath("__init__.py").write_text("import time\ndef init(**kwargs):\n    time.sleep(60)\n")
    for path, limit in ((fake.parent, "20"), (hangs.parent, "1")):
        proc = subprocess.run([sys.executable, "-", limit], input=R.RAY_SCRIPT, capture_output=True, text=True,
                              env={"PYTHONPATH": str(path)}, timeout=30, check=False, cwd=str(tmp_path))
        parsed = R.parse_script_output(proc.returncode, proc.stdout, proc.stderr)
        if path == fake.parent:
            assert proc.returncode == 0 and parsed["nodes"] == [
                {"node_id": "ab", "address": "10.0.0.11", "alive": True, "gpus": 2, "node_manager_port": 40000}]
            assert parsed["gcs_address"] == "10.0.0.11:6379"
        else:
            assert proc.returncode == 3 and parsed == {"error": "timeout", "detail": "Ray did not answer within 1 s"}
