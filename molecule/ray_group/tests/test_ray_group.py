# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The host group on a real Ray cluster (molecule/ray_group): what converge and the side effect left.

The side effect ran two site.yml: the group's upgrade to 2-ray under load through the gateway (kept in
site-upgrade.json, load-group-upgrade.json, fleet-report-upgrade.json), then the same with group-a3's Ray
node unable to start (site-member-down.json, reports/): the group failed and was rolled back to 2-ray.
"""

from __future__ import absolute_import, division, print_function

import json
import os
import re
import shutil
import subprocess
import urllib.request

import pytest
import testinfra

EPH = os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]
INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
MEMBERS = ("group-a1", "group-a2", "group-a3")


def host(name):
    return testinfra.get_host("ansible://%s?ansible_inventory=%s" % (name, INVENTORY))


def load(name):
    with open(os.path.join(EPH, name)) as handle:
        return json.load(handle)


def member_addresses():
    """The members' group addresses, as the group's record on the leader names them (in member order)."""
    record = json.loads(host("group-a1").file("/etc/labfleet/ray/group.json").content_string)
    return dict((m["name"], m["address"]) for m in record["members"])


def test_the_group_upgrade_under_load_dropped_no_request():
    run = load("site-upgrade.json")
    assert run["rc"] == 0, run["stdout"][-4000:]
    figures = load("load-group-upgrade.json")
    assert figures["sent"] >= 20, figures
    assert figures["failed"] == 0, figures
    assert re.search(r"\b0 failed\b", run["load"]), run["load"]


def test_the_leader_waited_for_every_gpu_before_its_server_restarted():
    out = load("site-upgrade.json")["stdout"]
    wait = out.index("Wait until every member's node and GPUs are in the Ray cluster")
    shown = re.search(r"Ray cluster of group vllm_group_a: 3 node\(s\), 6 GPU\(s\)", out)
    assert shown, out[wait:wait + 3000]
    restart = out.index("Restart the server (unit, env file, image or model changed", wait)
    assert wait < shown.start() < restart
    # The leader was drained in the gateway before any Ray node changed under it.
    drain = out.index("Drain the leader's instances in the gateways before the cluster changes under them")
    assert drain < out.index("Start the member's Ray node, or restart it on its new configuration")


def test_the_upgrade_report_shows_the_group_rolled_out_as_one():
    report = load("fleet-report-upgrade.json")
    group = [g for g in report["groups"] if g["name"] == "vllm_group_a"][0]
    assert group["allowed"] is True and group["leader"] == "group-a1"
    assert group["members"] == list(MEMBERS)
    assert (group["pp"], group["tp"]) == (3, 2)
    assert sorted(s["member"] for s in group["stages"]) == list(MEMBERS)
    assert group["rollout"]["state"] == "ok", group["rollout"]
    leader = [h for h in report["hosts"] if h["host"] == "group-a1"][0]
    assert leader["outcome"] == "deployed", leader["outcome_detail"]
    argv = leader["serving"]["instances"][0]["flags"]
    for flag in ("--tensor-parallel-size 2", "--pipeline-parallel-size 3", "--distributed-executor-backend ray"):
        assert flag in argv, argv
    # The Ray workers restarted on the new image: deployed, serving through the leader (not "unknown").
    for name in MEMBERS[1:]:
        worker = [h for h in report["hosts"] if h["host"] == name][0]
        assert worker["outcome"] == "deployed", worker["outcome_detail"]
        assert "A Ray worker of host group vllm_group_a" in worker["outcome_detail"], worker["outcome_detail"]
    # Each member staged its share of the group's plan (member_plans): here the checkpoint as it is.
    assert [(s["serving_path"], s["model_path"]) for s in group["stages"]] == [("native", "/srv/models/quasar")] * 3


@pytest.mark.parametrize("name", MEMBERS)
def test_each_member_runs_its_ray_node_from_the_groups_image(name):
    member = host(name)
    record = json.loads(member.file("/etc/labfleet/ray/group.json").content_string)
    assert record["leader"] == "group-a1" and record["member"] == name
    assert [m["name"] for m in record["members"]] == list(MEMBERS)
    assert [m["gpus"] for m in record["members"]] == [2, 2, 2]
    unit = member.file("/etc/systemd/system/labfleet-ray.service").content_string
    assert "--network host" in unit and "--num-gpus 2" in unit
    assert ("--head --port 6379" in unit) == (name == "group-a1")
    env = member.file("/etc/labfleet/ray/ray.env").content_string
    assert "NCCL_SOCKET_IFNAME=eth0" in env and "VLLM_HOST_IP=%s" % record["members"][MEMBERS.index(name)]["address"] in env


def test_the_leaders_server_runs_over_the_group():
    unit = host("group-a1").file("/etc/systemd/system/vllm.service").content_string
    for words in ("--network host", "RAY_ADDRESS=", "--pipeline-parallel-size 3", "--tensor-parallel-size 2",
                  "--distributed-executor-backend ray", "NCCL_SOCKET_IFNAME=eth0"):
        assert words in unit, unit
    assert " -p " not in unit


def test_a_completion_went_through_every_member():
    journal = host("group-a1").check_output("journalctl -u vllm.service --no-pager -o cat")
    assert re.search(r"connected to the Ray cluster at [0-9.]+:6379: 3 node\(s\), 6 GPU\(s\); world size 6 "
                     r"\(TP 2 x PP 3\)", journal), journal[-3000:]
    by_name = member_addresses()
    # vLLM ranks the driver's node first, then the others by IP address as a string; so does the plan.
    order = ["group-a1"] + sorted(MEMBERS[1:], key=lambda name: by_name[name])
    report = load("fleet-report-upgrade.json")
    group = [g for g in report["groups"] if g["name"] == "vllm_group_a"][0]
    assert [s["member"] for s in group["stages"]] == order
    addresses = [by_name[name] for name in order]
    paths = re.findall(r"went through stages ([0-9.]+) -> ([0-9.]+) -> ([0-9.]+)", journal)
    assert paths, journal[-3000:]
    assert list(paths[-1]) == addresses
    for rank, name in enumerate(order):
        assert re.search(r"rank %d \(stage %d, TP rank 0\) on %s GPU" % (2 * rank, rank, re.escape(addresses[rank])),
                         journal)


def test_a_member_down_fails_the_group_and_leaves_nothing_half_started():
    run = load("site-member-down.json")
    assert run["rc"] != 0
    assert "host group vllm_group_a failed: member(s)" in run["stdout"]
    assert "group-a3" in run["stdout"][run["stdout"].index("host group vllm_group_a failed"):][:400]
    report = load("reports/fleet-report.json")
    group = [g for g in report["groups"] if g["name"] == "vllm_group_a"][0]
    assert group["rollout"]["state"] == "failed"
    failed = [m["member"] for m in group["rollout"]["members"] if m["state"] == "failed"]
    assert failed == list(MEMBERS), group["rollout"]
    # Nothing of the failed version (1-ray) runs on any member; the Ray nodes that ran before are back on 2-ray.
    for name in MEMBERS:
        member = host(name)
        failed_image = member.check_output("docker image inspect --format '{{.Id}}' labfleet/openai-standin:1-ray")
        running = member.check_output("docker ps -q | xargs -r docker inspect --format '{{.Image}} {{.Name}}'")
        assert failed_image not in running, (name, running)
    assert not host("group-a3").service("labfleet-ray").is_running
    for name in ("group-a1", "group-a2"):
        unit = host(name).file("/etc/systemd/system/labfleet-ray.service").content_string
        image_id = host(name).check_output("docker image inspect --format '{{.Id}}' labfleet/openai-standin:2-ray")
        assert image_id in unit, (name, unit)
        assert host(name).service("labfleet-ray").is_running


def test_the_gateway_serves_the_model_from_the_solo_host_while_the_group_is_out():
    gateway = subprocess.check_output(["docker", "inspect", "--format",
                                       "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", "group-gateway"],
                                      text=True).strip()
    request = urllib.request.Request(
        "http://%s:8080/v1/completions" % gateway, method="POST",
        data=json.dumps({"model": "quasar", "prompt": "hi", "max_tokens": 4}).encode(),
        headers={"Authorization": "Bearer sk-gateway-canary-5b21e0d4", "Content-Type": "application/json"})
    answers = []
    for attempt in range(6):
        with urllib.request.urlopen(request, timeout=30) as answer:  # nosec - the scenario's own gateway
            answers.append((answer.status, len(json.load(answer)["choices"][0]["text"]) > 0))
        assert answers[-1] == (200, True), (attempt, answers)
    assert len(answers) == 6


@pytest.fixture(scope="module")
def doctor_run(run_playbook, project_dir, ephemeral_dir):
    """playbooks/doctor.yml in check mode on what the failed rollout left (group-a3's Ray node down)."""
    reports = os.path.join(ephemeral_dir, "reports-doctor")
    shutil.rmtree(reports, ignore_errors=True)
    shutil.copytree(os.path.join(ephemeral_dir, "reports"), reports)
    run = run_playbook(os.path.join(project_dir, "playbooks", "doctor.yml"), extra_vars={"fleet_report_dir": reports},
                       check=True)
    with open(os.path.join(reports, "fleet-report.json"), encoding="utf-8") as handle:
        return run, json.load(handle)


def test_the_doctor_names_the_stopped_stage_and_the_member_missing_from_the_cluster(doctor_run):
    run, report = doctor_run
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    group = {}
    for entry in report["doctor"]["hosts"]:
        for instance in entry["instances"]:
            if instance.get("instance") == "group vllm_group_a":
                group[entry["host"]] = dict((f["check"], f) for f in instance["findings"])
    assert sorted(group) == list(MEMBERS), sorted(group)
    leader = group["group-a1"]
    codes = [(i["code"], i.get("member")) for i in leader["ray_membership"]["evidence"]["items"]]
    assert leader["ray_membership"]["status"] == "problem" and ("RAY_MEMBER_MISSING", "group-a3") in codes, codes
    stopped = group["group-a3"]["stage_stopped"]
    assert stopped["status"] == "problem", stopped
    assert re.search(r"stage \d \(member group-a3, layers \d+-\d+\) stopped", json.dumps(stopped)), stopped
    assert group["group-a3"]["nccl_interface"]["status"] == "healthy", group["group-a3"]["nccl_interface"]
