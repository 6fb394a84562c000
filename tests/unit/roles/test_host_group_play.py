# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The preflight's host group play (playbooks/preflight-groups.yml, issue 27), run offline.

Three stand-in members (connection local) get what the preflight leaves on a host - the facts of
gpu_facts (ansible_facts.nvidia, two V100s) and of the network subset (a module of this test returns
them), and the plan preflight_verdict (the one-host plan of scripts/plan-group.py --reference, with
made_from as deploy_gate records it) - then the group play plans the group and each member's
labfleet_group_verdict and groups are written to a file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib.util
import json
import os
import shutil
import subprocess
import sys

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PLAYBOOK_BIN = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
if not os.path.exists(PLAYBOOK_BIN):
    PLAYBOOK_BIN = shutil.which("ansible-playbook") or PLAYBOOK_BIN
MEMBERS = ("gpu1", "gpu2", "gpu3")

FAKE_FACTS = '''#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule
module = AnsibleModule(argument_spec=dict(facts=dict(type="dict", required=True)), supports_check_mode=True)
module.exit_json(changed=False, ansible_facts=module.params["facts"])
'''


def _reference():
    spec = importlib.util.spec_from_file_location("plan_group_script", os.path.join(TOP, "scripts", "plan-group.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    inputs = module.reference_inputs()
    verdict = dict(inputs["members"][0]["verdict"])
    verdict["made_from"] = {"model": inputs["model"],
                            "image": dict(module.IMAGE, digest=module.DIGEST)}
    return verdict, module


def _facts(number, mtu, gpus, network="10.0.0."):
    address = "%s%d" % (network, 11 + number)
    return {"nvidia": {"gpus": gpus, "driver_version": "550.54.14", "count": len(gpus)},
            "interfaces": ["lo", "ens1f0"], "lo": {"mtu": 65536}, "ens1f0": {"mtu": mtu, "ipv4": {"address": address}},
            "default_ipv4": {"address": address, "interface": "ens1f0"}}


def run_group_play(tmp_path, groups=("vllm_group_70b",), mtus=(9000, 9000, 9000), unplanned=(), allowed=(),
                   rollout=False, probe=False, network="10.0.0.", check=False, then=None):
    """Run the group play on the stand-in members (then playbooks/rollout.yml when ``rollout``); returns
    (output, {member: {verdict, groups}}). ``probe``: the reachability probe (preflight_group_probe_network),
    off unless a test runs it: the members' addresses (``network`` + 11, 12, 13) must then be on this machine
    (127.0.0.x: test_group_probe_play.py). ``check``: ansible-playbook --check (the file of what the play left is
    written all the same)."""
    verdict, module = _reference()
    gpus = [dict(module.V100, index=0), dict(module.V100, index=1)]
    library = tmp_path / "library"
    library.mkdir()
    (library / "fake_facts.py").write_text(FAKE_FACTS)
    out = tmp_path / "out"
    out.mkdir()
    hostvars = {}
    for number, name in enumerate(MEMBERS):
        hostvars[name] = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                          "test_facts": _facts(number, mtus[number], gpus, network),
                          "test_verdict": None if name in unplanned else verdict}
    inventory = {"all": {
        "hosts": {"localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}},
        "vars": {"labfleet_host_groups": list(groups)},
        "children": {
            "vllm_hosts": {"hosts": hostvars},
            "vllm_group_70b": {"hosts": dict((name, {}) for name in MEMBERS),
                               "vars": {"labfleet_group_nccl_interface": "ens1f0",
                                        "preflight_group_probe_network": probe,
                                        "preflight_deployment": {"vllm_args": dict(module.ARGS)}}}}}}
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    before = [{"name": "What the preflight leaves on each member", "hosts": "vllm_hosts", "gather_facts": False,
               "tasks": [{"name": "The probes' facts", "fake_facts": {"facts": "{{ test_facts }}"}},
                         {"name": "The plan", "ansible.builtin.set_fact": {"preflight_verdict": "{{ test_verdict }}"},
                          "when": "test_verdict is not none"},
                         {"name": "The group of the allowed", "ansible.builtin.group_by": {"key": "labfleet_allowed"},
                          "when": "inventory_hostname in %s" % json.dumps(list(allowed))}]}]
    after = [{"name": "Write what the group play left", "hosts": "vllm_hosts", "gather_facts": False,
              "tasks": [{"name": "Write it", "delegate_to": "localhost", "check_mode": False, "ansible.builtin.copy": {
                  "content": "{{ {'verdict': labfleet_group_verdict | default(none), 'groups': group_names} | to_json }}",
                  "dest": str(out) + "/{{ inventory_hostname }}.json", "mode": "0600"}}]}]
    (tmp_path / "before.yml").write_text(json.dumps(before))
    (tmp_path / "after.yml").write_text(json.dumps(after))
    play = [{"ansible.builtin.import_playbook": str(tmp_path / "before.yml")},
            {"ansible.builtin.import_playbook": os.path.join(TOP, "playbooks", "preflight-groups.yml")}]
    if rollout:
        play.append({"ansible.builtin.import_playbook": os.path.join(TOP, "playbooks", "rollout.yml")})
    if then:
        (tmp_path / "then.yml").write_text(json.dumps(then))
        play.append({"ansible.builtin.import_playbook": str(tmp_path / "then.yml")})
    play.append({"ansible.builtin.import_playbook": str(tmp_path / "after.yml")})
    (tmp_path / "play.yml").write_text(json.dumps(play))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(TOP, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LIBRARY=str(library), ANSIBLE_LOCAL_TEMP=str(tmp_path / "local"),
               ANSIBLE_REMOTE_TEMP=str(tmp_path / "remote"))
    done = subprocess.run([PLAYBOOK_BIN, "-i", str(tmp_path / "inventory.json"), str(tmp_path / "play.yml")]
                          + (["--check"] if check else []), cwd=TOP,
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                          timeout=240, check=False)
    assert done.returncode == 0, done.stdout
    left = dict((name, json.loads((out / ("%s.json" % name)).read_text())) for name in MEMBERS)
    return done.stdout, left


def test_the_reference_group_is_planned_as_one_and_recorded_on_every_member(tmp_path):
    output, left = run_group_play(tmp_path)
    plan = left["gpu1"]["verdict"]
    assert plan["name"] == "vllm_group_70b" and plan["allowed"] is True, plan["reasons"]
    assert plan["leader"] == "gpu1" and (plan["pp"], plan["tp"]) == (3, 2)
    assert [s["layer_count"] for s in plan["stages"]] == [27, 27, 26]
    assert [s["member"] for s in plan["stages"]] == list(MEMBERS)
    assert plan["choice"]["chosen"] == "group" and plan["network"]["mtu"] == 9000
    assert plan["network"]["addresses"] == {"gpu1": "10.0.0.11", "gpu2": "10.0.0.12", "gpu3": "10.0.0.13"}
    assert set(w["code"] for w in plan["warnings"]) == {"GROUP_REACHABILITY_UNKNOWN"}
    for name in MEMBERS:
        assert left[name]["verdict"] == plan
        assert "labfleet_group_allowed" in left[name]["groups"]
    assert "vllm_group_70b: group of 3: PP 3 x TP 2" in output
    # Each member's share: the FP16 copy its own plan (the GPTQ repack) does not take, the group's argv.
    assert sorted(plan["member_plans"]) == list(MEMBERS)
    share = plan["member_plans"]["gpu3"]
    assert share["serving_path"] == "fp16_fallback"
    assert share["deployment"]["serving_model_path"] == "/srv/models/llama-70b-nvfp4-fp16"
    assert share["stage"]["layers"] == [54, 79]
    argv = share["instances"][0]["argv"]
    assert "--quantization" not in argv and argv[argv.index("--pipeline-parallel-size") + 1] == "3"


def test_an_mtu_that_differs_refuses_the_group_and_every_member(tmp_path):
    left = run_group_play(tmp_path, mtus=(9000, 9000, 1500))[1]
    plan = left["gpu3"]["verdict"]
    assert plan["allowed"] is False
    assert [r["code"] for r in plan["reasons"]] == ["GROUP_MTU_MISMATCH"]
    for name in MEMBERS:
        assert "labfleet_group_refused" in left[name]["groups"], left[name]
        assert left[name]["verdict"]["allowed"] is False


def test_a_member_without_a_plan_refuses_the_group_by_name(tmp_path):
    left = run_group_play(tmp_path, unplanned=("gpu2",))[1]
    plan = left["gpu1"]["verdict"]
    assert plan["allowed"] is False and plan["leader"] == "gpu1"
    assert [(r["code"], r["member"]) for r in plan["reasons"]] == [("GROUP_MEMBER_REFUSED", "gpu2")]
    assert all("labfleet_group_refused" in left[name]["groups"] for name in MEMBERS)


def test_no_group_is_a_no_op(tmp_path):
    output, left = run_group_play(tmp_path, groups=())
    assert all(left[name] == {"verdict": None, "groups": ["vllm_group_70b", "vllm_hosts"]} for name in MEMBERS), left
    assert "skipping: [gpu1]" in output
    # The play adds no host to the run (the controller is not in the recap): a run's stats stay its hosts'.
    recap = output[output.index("PLAY RECAP"):]
    assert "localhost" not in recap, recap


def test_the_rollout_leaves_the_members_out_even_where_their_own_plan_allows_them(tmp_path):
    """gpu1 and gpu3 were allowed on their own (joined labfleet_allowed): the rollout ends the play for them
    before any role (a member serves only with its group), and records no rollout state."""
    output, left = run_group_play(tmp_path, allowed=("gpu1", "gpu3"), rollout=True)
    assert left["gpu1"]["verdict"]["allowed"] is True
    assert "Leave a member of a host group out" in output
    assert "TASK [Decide whether the rollout goes on with this batch]" not in output
    assert "TASK [Driver]" not in output


def test_the_vllm_server_role_takes_each_members_share_over_its_own_plan(tmp_path):
    """What the vllm_server role reads of the plan (its vars/main.yml) on a member given its share, as
    playbooks/rollout-groups.yml passes it (vllm_server_group.plan): the FP16 copy, not the member's own
    GPTQ repack; the stage entry point's vllm_server_group (no ray_address) is not the leader's server."""
    values = ("{{ {'path': __vllm_server_serving_path, 'fallback': __vllm_server_fallback | bool, "
              "'repack': __vllm_server_repack | bool, 'mount': __vllm_server_serving_model_path | trim, "
              "'argv': __vllm_server_instances | map(attribute='argv') | list, "
              "'group_on': __vllm_server_group_on | bool, 'own': preflight_verdict['serving_path']} | to_json }}")
    read = {"name": "Its internal values",
            "ansible.builtin.include_vars": {"file": os.path.join(TOP, "roles", "vllm_server", "vars", "main.yml")}}
    write = {"name": "Write them", "delegate_to": "localhost",
             "ansible.builtin.copy": {"content": values, "dest": str(tmp_path) + "/share-{{ inventory_hostname }}.json",
                                      "mode": "0600"},
             "vars": {"vllm_server_group": {"name": "vllm_group_70b",
                                            "plan": "{{ labfleet_group_verdict['member_plans'][inventory_hostname] }}"}}}
    then = [{"name": "What the vllm_server role reads on each member", "hosts": "vllm_hosts", "gather_facts": False,
             "tasks": [read, write]}]
    run_group_play(tmp_path, then=then)
    for name in MEMBERS:
        seen = json.loads((tmp_path / ("share-%s.json" % name)).read_text())
        assert seen["own"] == "gptq_repack"
        assert (seen["path"], seen["fallback"], seen["repack"]) == ("fp16_fallback", True, False), seen
        assert seen["mount"] == "/srv/models/llama-70b-nvfp4-fp16"
        assert seen["group_on"] is False
        [argv] = seen["argv"]
        assert "--quantization" not in argv and argv[argv.index("--pipeline-parallel-size") + 1] == "3"
