"""nvidia_driver_trixie: Debian 13's own R550 (550.163.01) installed, pinned, held and pending reboot.

Debian's compute packages are installed at the exact version with the proprietary module and
without the X server, from the role's non-free source; the pin holds that version; gpu_facts sees
the new libraries while the container cannot load the module; a check-mode run on the converged
host changes nothing and reports the host as pending reboot. The checks shared with
nvidia_driver_bookworm_repo (holds, upgrade simulation, unattended upgrades, nouveau, persistence
mode) are in molecule/nvidia_driver_common/tests/.
"""

import os
import re

testinfra_hosts = ["vllm_hosts"]

VERSION = "550.163.01"
# Debian's packages that carry the driver's own version (the role's Debian package set).
VERSIONED_PACKAGES = [
    "nvidia-kernel-dkms",
    "firmware-nvidia-gsp",
    "libcuda1",
    "libnvidia-ml1",
    "libnvidia-cfg1",
    "libnvidia-ptxjitcompiler1",
    "libnvidia-nvvm4",
    "nvidia-smi",
]
NONFREE_SOURCE = "/etc/apt/sources.list.d/labfleet-debian-nonfree.sources"
PIN = "/etc/apt/preferences.d/labfleet-nvidia-driver"


def test_compute_packages_at_the_version(dpkg_packages):
    """The compute packages are installed at 550.163.01 (nvidia-persistenced shares Debian's version)."""
    for name in VERSIONED_PACKAGES + ["nvidia-persistenced"]:
        found = dpkg_packages.get(name)
        assert found is not None and found["status"] == "installed", "%s: %s" % (name, found or "not installed")
        assert found["version"].startswith(VERSION + "-"), "%s: %s" % (name, found)


def test_nvidia_modprobe_installed(dpkg_packages):
    """nvidia-modprobe (its own version numbers) is installed too."""
    found = dpkg_packages.get("nvidia-modprobe")
    assert found is not None and found["status"] == "installed", found


def test_no_open_module_no_x_server(dpkg_packages):
    """The proprietary module only, and neither the X server nor the metapackage that pulls it in."""
    for name in ("nvidia-open-kernel-dkms", "xserver-xorg-core", "nvidia-driver"):
        assert name not in dpkg_packages, "%s: %s" % (name, dpkg_packages[name])


def test_pin_holds_the_exact_version(host, managed_file):
    """The pin names the exact version, and apt gives that version the pin's priority."""
    text = managed_file(PIN)
    assert re.search(r"(?m)^Pin: version 550\.163\.01-\*$", text), text
    policy = host.check_output("apt-cache policy nvidia-smi")
    assert re.search(r"(?m)^\s+Installed: %s-" % re.escape(VERSION), policy), policy
    assert re.search(r"%s-[0-9]+ 1001" % re.escape(VERSION), policy), policy


def test_nonfree_source(managed_file, hostvars):
    """The role's source adds contrib, non-free and non-free-firmware of trixie from the mirror."""
    text = managed_file(NONFREE_SOURCE)
    assert re.search(r"(?m)^URIs: %s$" % re.escape(hostvars["nvidia_driver_debian_mirror"]), text), text
    assert re.search(r"(?m)^Suites: trixie trixie-updates$", text), text
    assert re.search(r"(?m)^Components: contrib non-free non-free-firmware$", text), text
    assert re.search(r"(?m)^Signed-By: /usr/share/keyrings/debian-archive-keyring\.gpg$", text), text


def test_probe_sees_libraries_without_module(call_module):
    """gpu_facts: the container cannot load the module, the probe says so and sees the new libraries.

    This needs the collection's own module (labfleet.vllm.gpu_facts), run through Ansible.
    """
    result = call_module("labfleet.vllm.gpu_facts")
    assert not result.get("failed"), result
    nvidia = result["ansible_facts"]["nvidia"]
    assert nvidia["state"] == "driver_not_loaded", nvidia
    assert nvidia["count"] == 2, nvidia
    assert nvidia["library_version"] == VERSION, nvidia


def test_check_mode_changes_nothing_and_reports_pending_reboot(project_dir, run_playbook):
    """The real playbooks in check mode on the converged host: nothing to change, reboot pending.

    This needs the collection's playbooks and roles, run through Ansible (--check, json callback).
    """
    playbook = os.path.join(project_dir, "molecule", "nvidia_driver_common", "converge.yml")
    # The driver role carries out the preflight's plan; the report is not this scenario's subject.
    run = run_playbook(playbook, extra_vars={"labfleet_report_at_end": True}, check=True)
    assert run.returncode == 0, "%s\n%s" % (run.stdout, run.stderr)
    for name, stats in run.data["stats"].items():
        assert (stats["changed"], stats["failures"], stats["unreachable"]) == (0, 0, 0), "%s: %s" % (name, stats)
    # The json callback names a role's tasks "<role> : <task>".
    results = run.results("labfleet.vllm.nvidia_driver : Record the result for the fleet report")
    shown = run.results("labfleet.vllm.nvidia_driver : Show the result")
    assert sorted(shown) == sorted(results) == sorted(run.data["stats"]), (sorted(shown), sorted(run.data["stats"]))
    for name, result in results.items():
        record = result["ansible_facts"]["nvidia_driver_result"]
        assert record["status"] == "pending_reboot", record
        assert record["driver_version"] == VERSION, record
        assert record["reboot"]["pending"] is True, record
        msg = shown[name]["msg"]
        assert re.search(r"nvidia_driver pending_reboot: driver 550\.163\.01", msg), msg
        assert re.search(r"reboot pending: the NVIDIA kernel\s+module is not loaded", msg), msg
