"""container_runtime_trixie: what only this scenario has (CDI, nvidia as default runtime, fake 2x V100).

The shared checks (daemon.json, Docker, the held toolkit, the nvidia runtime) are in
../container_runtime_shared/tests/test_container_runtime.py. Here: the CDI spec and the record of
what it was made for, no udev rule, Docker resolving the CDI device, docker_daemon_config refusing a
setting dockerd rejects (the collection's module, so through call_module), and the role's own GPU
check seeing both fake GPUs (the collection's role, so through gpu_check.yml with run_playbook).
"""

import json
import os
import re

testinfra_hosts = ["vllm_hosts"]

CDI_SPEC = "/etc/cdi/nvidia.yaml"
CDI_MADE_FOR = "/var/lib/labfleet/container_runtime/cdi-spec.made-for"
DAEMON_JSON = "/etc/docker/daemon.json"
GPU_CHECK_PLAYBOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_check.yml")
PYTHON_IMAGE = "labfleet-test/python:1"

# The role's GPU check needs an image with nvidia-smi's interpreter: one with python3, made from the
# instance's own files (no registry here); the fake CDI spec mounts the fake nvidia-smi into it.
MAKE_PYTHON_IMAGE = r"""
set -euo pipefail
tag=$1
docker image inspect "$tag" >/dev/null 2>&1 && exit 0
py=$(readlink -f /usr/bin/python3)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/usr/bin" "$stage/bin"
cp -a "$py" /usr/bin/dash "$stage/usr/bin/"
ln -s "$(basename "$py")" "$stage/usr/bin/python3"
ln -s /usr/bin/dash "$stage/bin/sh"
cp -a --parents "/usr/lib/$(basename "$py")" "$stage"
ldd "$py" /usr/bin/dash "/usr/lib/$(basename "$py")"/lib-dynload/*.so 2>/dev/null \
  | awk '/=> \// {print $3} /^\t\/lib/ {print $1}' | sort -u \
  | while read -r lib; do cp -L --parents "$lib" "$stage"; done
tar -C "$stage" -c . | docker import - "$tag" >/dev/null
"""


def test_cdi_spec_made_for_the_driver_and_the_pin(host):
    """The CDI spec names nvidia.com/gpu, comes from the host's driver, and its record says so."""
    spec = host.file(CDI_SPEC).content_string
    assert re.search(r"kind: nvidia\.com/gpu", spec), spec
    assert "NVIDIA_FAKE_CDI_DRIVER=550.54.14" in spec, spec
    made_for = host.file(CDI_MADE_FOR).content_string
    assert made_for == "driver=550.54.14 toolkit=1.18.2\n", repr(made_for)


def test_no_udev_rule_with_the_cdi_mitigation(host):
    """The cdi mitigation writes no udev rule."""
    assert not host.file("/etc/udev/rules.d/71-nvidia-dev-char.rules").exists


def test_module_refuses_a_setting_dockerd_rejects(host, call_module):
    """docker_daemon_config (check mode) runs dockerd's validation and refuses an unknown key, naming
    the command and the key; daemon.json stays as it was.

    The collection's own module, hence call_module.
    """
    before = host.file(DAEMON_JSON).content
    result = call_module("labfleet.vllm.docker_daemon_config", {
        "settings": {"no-such-option": True},
        "validate": "dockerd --validate --config-file %s",
    }, check=True)
    msg = result.get("msg", "")
    assert result.get("failed") is True, result
    assert "rejected by `dockerd --validate --config-file %s`" in msg, msg
    assert "no-such-option" in msg, msg
    assert host.file(DAEMON_JSON).content == before


def test_docker_resolves_the_cdi_device(host, tiny_image):
    """A container asking for nvidia.com/gpu=all starts: Docker finds the device in the CDI spec."""
    run = host.run("docker run --rm --network none --device nvidia.com/gpu=all %s /usr/bin/true", tiny_image)
    assert run.rc == 0, run.stderr


def test_roles_gpu_check_sees_both_gpus_through_cdi(host, run_playbook):
    """The role run again with its GPU check on: the container sees the host's two GPUs through CDI,
    nvidia is the default runtime, and nothing is left to change or to restart.

    The collection's own role, hence gpu_check.yml.
    """
    host.check_output("bash -c %s make-python-image %s", MAKE_PYTHON_IMAGE, PYTHON_IMAGE)
    run = run_playbook(GPU_CHECK_PLAYBOOK, extra_vars={"labfleet_test_verify_image": PYTHON_IMAGE})
    assert run.returncode == 0, "gpu_check.yml failed:\n%s\n%s" % (run.stdout[-6000:], run.stderr[-3000:])
    info = run.results("Show what the role found")[host.backend.get_hostname()]["container_runtime_info"]
    shown = json.dumps(info, indent=2, sort_keys=True)
    assert re.match(r"passed: the container sees 2 GPU\(s\)", info["gpu_check"]), shown
    assert info["gpu_run_args"] == ["--device", "nvidia.com/gpu=all"], shown
    assert info["default_runtime"] == "nvidia", shown
    assert info["daemon_json_changed_keys"] == [], shown
    assert info["restart_pending"] is False, shown
