# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What vllm_server renders into a unit, a command line and an env file (module_utils/formats/_unit.py),
and the unit template itself, rendered with hostile values and checked by systemd-analyze verify."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import subprocess

import jinja2
import pytest
from hypothesis import given, settings, strategies as st

from ansible.plugins.filter.core import FilterModule as CoreFilters
from ansible.plugins.test.core import TestModule as CoreTests

from ansible_collections.labfleet.vllm.plugins.filter.vllm_server_problems import vllm_server_problems
from ansible_collections.labfleet.vllm.plugins.module_utils.formats import _unit as U

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
TEMPLATES = os.path.join(TOP, "roles", "vllm_server", "templates")
KEY = "sk-test-key-31337"
INSTANCE = {"name": "vllm", "served_model_name": "quasar", "port": 8000, "bind_address": "127.0.0.1",
            "cuda_visible_devices": "", "gpus": "all", "env": {},
            "argv": ["--tensor-parallel-size", "2", "--dtype", "float16", "--enforce-eager"]}


def values(**changes):
    base = {"docker_bin": "/usr/bin/docker", "shm_size": "16g", "cache_dir": "/var/cache/vllm",
            "config_dir": "/etc/vllm", "state_dir": "/var/lib/labfleet/vllm_server",
            "model_path": "/srv/models/quasar", "serving_model_path": "/srv/models/quasar",
            "image": "vllm/vllm-openai:v0.8.5", "docker_args": ["--cap-drop=ALL"], "allow_host_access": False,
            "env": {"HF_HUB_OFFLINE": "1"}, "api_key": KEY, "hf_token": "", "expose": False,
            "expose_without_api_key": False, "default_bind": "127.0.0.1", "instances": [dict(INSTANCE)],
            "instance_defaults": {"port": 8000, "bind_address": "127.0.0.1", "gpus": "all",
                                  "cuda_visible_devices": "", "env": {}}}
    base.update(changes)
    return base


def inst(**changes):
    out = dict(INSTANCE)
    out.update(changes)
    return out


def test_the_defaults_have_no_problem():
    assert U.problems(values()) == []
    assert vllm_server_problems(values()) == []


# --- control characters: every value that reaches a unit, an argv or an env file ----------------------


@pytest.mark.parametrize("changes, name", [
    ({"docker_bin": "/usr/bin/docker\nExecStartPre=/bin/sh -c id"}, "vllm_server_docker_bin"),
    ({"shm_size": "16g\n"}, "vllm_server_shm_size"),
    ({"cache_dir": "/var/cache/vllm\r"}, "vllm_server_cache_dir"),
    ({"config_dir": "/etc/vllm\t"}, "vllm_server_config_dir"),
    ({"state_dir": "/var/lib/x\x00"}, "vllm_server_state_dir"),
    ({"model_path": "/srv/models/q\nExecStartPre=/bin/true"}, "preflight_deployment.model_path"),
    ({"serving_model_path": "/srv/models/q-fp16\x1b[31m"}, "serving model path"),
    ({"image": "vllm/vllm-openai:v0.8.5\n"}, "preflight_deployment.image"),
    ({"docker_args": ["--ulimit", "memlock=-1\nExecStop=/bin/true"]}, "vllm_server_docker_args[1]"),
    ({"env": {"A": "1\nB=2"}}, "vllm_server_env.A"),
    ({"env": {"A": "x\r"}}, "vllm_server_env.A"),
    ({"instances": [inst(argv=["--chat-template", "{{ x }}\nExecStartPre=/bin/true"])]}, "argv"),
    ({"instances": [inst(served_model_name="quasar\n")]}, "served_model_name"),
    ({"instances": [inst(env={"X": "a\u0085b"})]}, "instance vllm: env.X"),
])
def test_a_control_character_anywhere_is_refused_naming_the_variable(changes, name):
    found = U.problems(values(**changes))
    assert found, changes
    assert any(name in p and "control character" in p for p in found), found


@pytest.mark.parametrize("secret", ["api_key", "hf_token"])
@pytest.mark.parametrize("bad", ["\n", "\r", "\x00", "\t", "\x7f"])
def test_a_secret_with_a_control_character_is_refused_without_quoting_it(secret, bad):
    value = "sk-%s-canary%sx" % (secret, bad)
    found = U.problems(values(**{secret: value}))
    assert any(("vllm_server_%s holds a control character" % secret) in p for p in found), found
    assert not any("canary" in p for p in found)


@pytest.mark.parametrize("changes, fragment", [
    ({"docker_bin": "docker"}, "vllm_server_docker_bin must be an absolute path"),
    ({"model_path": "/srv/models/a:b"}, "no ':'"),
    ({"model_path": "/srv/my models/q"}, "preflight_deployment.model_path must be an absolute path"),
    ({"shm_size": "16 GiB"}, "vllm_server_shm_size must be a size"),
    ({"image": "Vllm/Image;rm"}, "preflight_deployment.image must be repository[:tag]"),
    ({"instances": [inst(cuda_visible_devices="0;1")]}, "cuda_visible_devices must be GPU indices or UUIDs"),
    ({"instances": [inst(gpus=[0, -1])]}, "gpus must be 'all' or GPU indices"),
    ({"instances": [inst(gpus="some")]}, "gpus must be 'all' or GPU indices"),
])
def test_malformed_values_are_refused(changes, fragment):
    assert any(fragment in p for p in U.problems(values(**changes)))


# --- env files: names, and no secrets from the plain env ----------------------------------------------------


@pytest.mark.parametrize("env, fragment", [
    ({"VLLM_API_KEY": ""}, "sets VLLM_API_KEY"),
    ({"VLLM_API_KEY": "other"}, "sets VLLM_API_KEY"),
    ({"HF_TOKEN": "hf_x"}, "sets HF_TOKEN"),
    ({"HUGGING_FACE_HUB_TOKEN": "hf_x"}, "sets HUGGING_FACE_HUB_TOKEN"),
    ({"1BAD": "x"}, "is not an environment variable name"),
    ({"A-B": "x"}, "is not an environment variable name"),
    ({"A B": "x"}, "is not an environment variable name"),
    ({"A": {"nested": 1}}, "must be a string or a number"),
])
def test_env_mappings_cannot_set_secrets_or_bad_names(env, fragment):
    for where, changes in (("vllm_server_env", {"env": env}), ("instance vllm: env", {"instances": [inst(env=env)]})):
        found = U.problems(values(**changes))
        assert any(p.startswith(where) and fragment in p for p in found), (where, found)


def test_env_must_be_a_mapping():
    assert U.env_problems(["A=1"], "vllm_server_env") == ["vllm_server_env must be a mapping of NAME: value, got list"]


# --- no key on a command line ---------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["--api-key", KEY], ["--api-key=" + KEY]])
def test_api_key_in_the_vllm_arguments_is_refused(argv):
    found = U.problems(values(instances=[inst(argv=INSTANCE["argv"] + argv)]))
    assert any("has --api-key" in p and "vllm_server_api_key" in p for p in found), found
    assert not any(KEY in p for p in found)


@pytest.mark.parametrize("args", [["-e", "VLLM_API_KEY=" + KEY], ["--env=HF_TOKEN=hf_x"], ["--env", "HF_TOKEN"]])
def test_secrets_in_docker_args_are_refused_even_with_host_access(args):
    found = U.problems(values(docker_args=args, allow_host_access=True))
    assert any("puts a secret on docker's command line" in p for p in found), found
    assert not any(KEY in p for p in found)


# --- docker args that give the container the host -------------------------------------------------------------


@pytest.mark.parametrize("args, fragment", [
    (["--privileged"], "every device and capability"),
    (["--privileged=true"], "every device and capability"),
    (["--pid", "host"], "host's pid namespace"),
    (["--pid=host"], "host's pid namespace"),
    (["--network=host"], "every address of the host"),
    (["--net", "host"], "every address of the host"),
    (["--userns=host"], "host's userns namespace"),
    (["--cap-add", "SYS_ADMIN"], "adds a capability"),
    (["--cap-add=ALL"], "adds a capability"),
    (["--cap-add=cap_sys_module"], "adds a capability"),
    (["--security-opt", "seccomp=unconfined"], "turns off a confinement"),
    (["--security-opt=apparmor=unconfined"], "turns off a confinement"),
    (["--security-opt", "no-new-privileges=false"], "turns off a confinement"),
    (["-v", "/:/host"], "mounts the host's /"),
    (["-v", "//:/host:ro"], "mounts the host's /"),
    (["--volume=/etc:/etc2"], "mounts the host's /etc"),
    (["-v", "/var/run/docker.sock:/var/run/docker.sock"], "/var/run/docker.sock"),
    (["--mount", "type=bind,source=/,target=/h"], "mounts the host's /"),
    (["--mount=type=bind,src=/root/,dst=/r"], "mounts the host's /root"),
])
def test_docker_args_that_give_the_container_the_host_are_refused_unless_allowed(args, fragment):
    found = U.problems(values(docker_args=args))
    assert any(fragment in p and "vllm_server_allow_host_access" in p for p in found), found
    assert U.problems(values(docker_args=args, allow_host_access=True)) == []


@pytest.mark.parametrize("args", [["--ulimit", "memlock=-1"], ["--privileged=false"], ["--pid", "container:x"],
                                  ["-v", "/srv/data:/data:ro"], ["--cap-add", "IPC_LOCK"],
                                  ["--security-opt", "no-new-privileges"], ["--network", "labnet"]])
def test_ordinary_docker_args_pass(args):
    assert U.problems(values(docker_args=args)) == []


def test_docker_args_must_be_a_list_of_strings():
    assert U.docker_args_problems("--privileged") == ["vllm_server_docker_args must be a list of strings, got str"]
    assert "must be a string" in U.docker_args_problems([{"a": 1}])[0]


# --- where the API is published -------------------------------------------------------------------------------


def test_loopback_is_the_default_and_needs_no_opt_in():
    for address in ("127.0.0.1", "127.0.0.53", "::1"):
        assert U.problems(values(default_bind=address, instances=[inst(bind_address="")], api_key="")) == []


def test_publishing_beyond_loopback_needs_expose_and_without_a_key_a_second_opt_in():
    beyond = [inst(bind_address="0.0.0.0")]
    found = U.problems(values(instances=beyond))
    assert any("set vllm_server_expose: true" in p for p in found), found
    assert U.problems(values(instances=beyond, expose=True)) == []
    found = U.problems(values(instances=beyond, expose=True, api_key=""))
    assert any("without an API key" in p and "vllm_server_expose_without_api_key" in p for p in found), found
    assert U.problems(values(instances=beyond, expose=True, api_key="", expose_without_api_key=True)) == []
    # The instance's own address wins over the role's default.
    assert U.problems(values(default_bind="192.0.2.10", instances=[inst(bind_address="127.0.0.1")])) == []
    # An instance without its own address takes the role's (instance_defaults, as the role merges them).
    role_default = values(default_bind="192.0.2.10", instance_defaults={"bind_address": "192.0.2.10"},
                          instances=[{"name": "a", "served_model_name": "q", "argv": []}])
    assert any("instance a would publish the API on 192.0.2.10" in p for p in U.problems(role_default))


@pytest.mark.parametrize("address", ["localhost.example", "300.1.1.1", "127.0.0.1:8000", "0.0.0.0\n"])
def test_a_bind_address_must_be_an_ip_address(address):
    assert any("the bind address" in p for p in U.problems(values(instances=[inst(bind_address=address)])))


# --- property: never an exception; a control character is always caught -----------------------------------


_TEXT = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x2FF), max_size=40)
_FIELDS = ("docker_bin", "shm_size", "cache_dir", "config_dir", "state_dir", "model_path", "serving_model_path",
           "image", "api_key", "hf_token")


@settings(max_examples=300, deadline=None)
@given(field=st.sampled_from(_FIELDS), text=_TEXT)
def test_any_text_in_any_field_gives_problems_never_an_exception(field, text):
    found = U.problems(values(**{field: text}))
    assert isinstance(found, list)
    if U.has_control(text):
        assert found


@settings(max_examples=200, deadline=None)
@given(args=st.lists(_TEXT, max_size=6), env=st.dictionaries(_TEXT, _TEXT, max_size=4),
       argv=st.lists(_TEXT, max_size=6), bind=_TEXT)
def test_any_args_env_and_argv_give_problems_never_an_exception(args, env, argv, bind):
    found = U.problems(values(docker_args=args, env=env, instances=[inst(argv=argv, bind_address=bind)]))
    if any(U.has_control(x) for x in args + argv + list(env) + list(env.values()) + [bind]):
        assert found


# --- the unit template with hostile values ---------------------------------------------------------------------

HOSTILE_TEMPLATE = "{% for m in messages %}{{ m['role'] }}: \"$HOME\"; 100% 'x' \\ {% endfor %}"


def render_unit(tmp_path, argv, docker_args=(), bind="127.0.0.1", **extra):
    docker = tmp_path / "docker"
    docker.write_text("#!/bin/sh\nexit 0\n")
    docker.chmod(0o755)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), trim_blocks=True,
                             undefined=jinja2.StrictUndefined, autoescape=False)
    env.filters.update(CoreFilters().filters())
    env.tests.update(CoreTests().tests())
    context = {
        "ansible_managed": "Ansible managed", "__vllm_server_i": dict(inst(argv=list(argv), bind_address=bind)),
        "__vllm_server_image_ref": "vllm/vllm-openai:v0.8.5", "__vllm_server_image_digest": "sha256:" + "a" * 64,
        "__vllm_server_serving_model_path": "/srv/models/quasar", "__vllm_server_model_path": "/srv/models/quasar",
        "__vllm_server_model_fingerprint": "config.json sha256 " + "b" * 64, "__vllm_server_fallback": False,
        "__vllm_server_repack": False, "__vllm_server_repack_plan": {},
        "__vllm_server_i_env_path": "/etc/vllm/vllm.env", "__vllm_server_image_id": "sha256:" + "c" * 64,
        "__vllm_server_pull_ref": "vllm/vllm-openai:v0.8.5", "vllm_server_docker_bin": str(docker),
        "vllm_server_start_limit_interval_sec": 600, "vllm_server_start_limit_burst": 5,
        "vllm_server_restart_sec": 10, "vllm_server_timeout_start_sec": 3600, "vllm_server_stop_timeout": 60,
        "vllm_server_ipc_host": True, "vllm_server_shm_size": "16g", "vllm_server_no_new_privileges": True,
        "vllm_server_cap_drop": ["ALL"], "vllm_server_cache_dir": "/var/cache/vllm",
        "vllm_server_docker_args": list(docker_args), "__vllm_server_group_on": False, "vllm_server_group": {},
    }
    context.update(extra)
    unit = tmp_path / "vllm.service"
    unit.write_text(env.get_template("vllm.service.j2").render(**context))
    return unit


# The units vllm.service names that are not part of systemd itself: Docker's, which exists only where Docker is
# installed. verify() puts a stub of it on a unit search path of the test's own (SYSTEMD_UNIT_PATH; the trailing
# colon keeps systemd's own directories after it), so the check does not depend on what this machine has installed.
STUB_UNITS = {"docker.service": "[Unit]\nDescription=test stub of Docker's docker.service\n\n"
                                "[Service]\nType=oneshot\nExecStart=%s\n"}


def verify(unit):
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    stubs = unit.parent / "stub-units"
    stubs.mkdir(exist_ok=True)
    for name, text in STUB_UNITS.items():
        (stubs / name).write_text(text % shutil.which("true"))
    env = dict(os.environ, SYSTEMD_UNIT_PATH="%s:" % stubs)
    return subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60,
                          check=False, env=env)


def test_the_unit_with_quotes_percent_dollar_and_semicolons_passes_systemd_analyze_verify(tmp_path):
    argv = ["--tensor-parallel-size", "2", "--chat-template", HOSTILE_TEMPLATE, "--served-model-name-x",
            "a b;c", "--tokenizer", "/srv/models/tok%i$USER"]
    docker_args = ["--label", "owner=lab; team \"gpu\" 100%", "--ulimit", "memlock=-1"]
    problems = U.problems(values(docker_args=docker_args, instances=[inst(argv=argv)]))
    assert problems == []
    unit = render_unit(tmp_path, argv, docker_args)
    result = verify(unit)
    assert result.returncode == 0, result.stdout + result.stderr
    text = unit.read_text()
    # Specifiers and variables are escaped, so systemd passes them to docker literally.
    assert "100%%" in text and "$$HOME" in text and "tok%%i$$USER" in text
    assert "--security-opt no-new-privileges" in text and "--cap-drop ALL" in text
    assert "-p 127.0.0.1:8000:8000" in text


def test_the_units_comment_says_the_serving_path(tmp_path):
    argv = ["--tensor-parallel-size", "2", "--dtype", "float16", "--quantization", "gptq"]
    text = render_unit(tmp_path, argv, __vllm_server_repack=True, __vllm_server_repack_plan={"group_size": 64},
                       __vllm_server_serving_model_path="/srv/models/quasar-gptq64").read_text()
    assert ("# serving path: gptq_repack, the GPTQ int4 copy (group size 64, --quantization gptq) of the NVFP4 "
            "checkpoint /srv/models/quasar") in text
    assert "-v /srv/models/quasar-gptq64:/model:ro" in text and "--quantization gptq" in text
    fp16 = render_unit(tmp_path, ["--dtype", "float16"], __vllm_server_fallback=True).read_text()
    assert "# serving path: fp16_fallback, the FP16 copy of the NVFP4 checkpoint /srv/models/quasar" in fp16
    assert "serving path" not in render_unit(tmp_path, ["--dtype", "float16"]).read_text()


def test_an_ipv6_bind_address_is_bracketed(tmp_path):
    text = render_unit(tmp_path, ["--dtype", "float16"], bind="::1").read_text()
    assert "-p '[::1]:8000:8000'" in text or "-p [::1]:8000:8000" in text


def test_a_newline_in_an_argument_would_inject_a_directive_and_is_refused_first(tmp_path):
    argv = ["--chat-template", "x'\nExecStartPre=/bin/touch /tmp/pwned\n#"]
    # What the check keeps out of the template:
    assert any("control character" in p for p in U.problems(values(instances=[inst(argv=argv)])))
    # What the template would make of it: a second ExecStartPre line of the attacker's.
    unit = render_unit(tmp_path, argv)
    assert "\nExecStartPre=/bin/touch /tmp/pwned" in unit.read_text()


# --- a host group's leader (issue 27): the group's parallelism over Ray, on the host network -------------


GROUP = {"name": "big", "args": {"tensor_parallel_size": 2, "pipeline_parallel_size": 3,
                                 "distributed_executor_backend": "ray"},
         "ray_address": "10.0.0.11:6379", "host_ip": "10.0.0.11", "ray_temp_dir": "/var/lib/labfleet/ray/tmp",
         "nccl_interface": "ens1f0", "revision": "0123abcd"}


def group_instances(instances, group):
    """vars/main.yml's __vllm_server_instances, rendered as Ansible renders it (native types)."""
    import yaml  # pylint: disable=import-outside-toplevel
    with open(os.path.join(TOP, "roles", "vllm_server", "vars", "main.yml")) as handle:
        role_vars = yaml.safe_load(handle)
    env = jinja2.Environment(undefined=jinja2.Undefined)  # Ansible's default filter takes a missing key
    env.filters.update(CoreFilters().filters())
    env.tests.update(CoreTests().tests())
    context = {"vllm_server_group": group, "__vllm_server_plan_instances": instances,
               "__vllm_server_group_flags": role_vars["__vllm_server_group_flags"]}
    context["__vllm_server_group_on"] = env.from_string(role_vars["__vllm_server_group_on"]).render(**context) == "True"
    context["__vllm_server_group_argv"] = eval(  # pylint: disable=eval-used  # a list literal Jinja printed
        env.from_string(role_vars["__vllm_server_group_argv"]).render(**context))
    return eval(env.from_string(role_vars["__vllm_server_instances"]).render(**context))  # pylint: disable=eval-used


def test_the_leaders_argv_takes_the_groups_parallelism_instead_of_its_own():
    plan = [inst(argv=["--tensor-parallel-size", "2", "--dtype", "float16", "-pp", "1", "--enforce-eager",
                       "--distributed-executor-backend", "mp", "--max-model-len", "32768"])]
    out = group_instances(plan, GROUP)
    assert out[0]["argv"] == ["--dtype", "float16", "--enforce-eager", "--max-model-len", "32768",
                              "--distributed-executor-backend", "ray", "--pipeline-parallel-size", "3",
                              "--tensor-parallel-size", "2"]
    assert group_instances(plan, {}) == plan


def test_the_leaders_unit_runs_on_the_host_network_with_the_ray_address(tmp_path):
    argv = ["--dtype", "float16", "--distributed-executor-backend", "ray", "--pipeline-parallel-size", "3",
            "--tensor-parallel-size", "2"]
    unit = render_unit(tmp_path, argv, bind="10.0.0.11", __vllm_server_group_on=True, vllm_server_group=GROUP)
    result = verify(unit)
    assert result.returncode == 0, result.stdout + result.stderr
    text = unit.read_text()
    assert "--network host" in text and " -p " not in text
    for words in ("-e RAY_ADDRESS=10.0.0.11:6379", "-e VLLM_HOST_IP=10.0.0.11", "-e NCCL_SOCKET_IFNAME=ens1f0",
                  "-e GLOO_SOCKET_IFNAME=ens1f0", "--host 10.0.0.11 --port 8000",
                  "-v /var/lib/labfleet/ray/tmp:/tmp/ray", "--pipeline-parallel-size 3",
                  "# Host group big, leader", "cluster revision 0123abcd"):
        assert words in text, text
    assert "\n  --port 8000\n" not in text
