"""Checks shared by the nvidia_driver scenarios that install a driver (nvidia_driver_trixie from
Debian's archive, nvidia_driver_bookworm_repo from the stand-in CUDA repository).

Every driver package is held and out of a full upgrade's reach, unattended upgrades skip the
driver, the version pin applies to every driver package, nouveau is blacklisted, and
nvidia-persistenced runs with persistence mode on; every file is the role's (root, 0644, marked
"Ansible managed"). What differs (versions, package sources, keyring) is in each scenario's tests/.
"""

import re

testinfra_hosts = ["vllm_hosts"]

# Package names of the driver (the role's DRIVER_PACKAGE_PATTERNS, plugins/module_utils/decisions/_driver.py).
DRIVER_PACKAGE = r"(nvidia|libnvidia|libcuda1|firmware-nvidia|cuda-drivers)"

PIN = "/etc/apt/preferences.d/labfleet-nvidia-driver"
UNATTENDED = "/etc/apt/apt.conf.d/51labfleet-nvidia-driver"
NOUVEAU = "/etc/modprobe.d/labfleet-blacklist-nouveau.conf"
PERSISTENCED_DROPIN = "/etc/systemd/system/nvidia-persistenced.service.d/labfleet.conf"
PERSISTENCED_EXEC = "/usr/bin/nvidia-persistenced --user nvpd --persistence-mode --verbose"


def test_every_driver_package_held(dpkg_packages):
    """dpkg holds every driver package it knows, so no apt run moves the driver by accident."""
    driver = {name: pkg for name, pkg in dpkg_packages.items() if re.match(DRIVER_PACKAGE, name)}
    assert any(pkg["status"] == "installed" for pkg in driver.values()), "no driver package is installed: %s" % driver
    not_held = {name: pkg for name, pkg in driver.items() if pkg["want"] != "hold"}
    assert not_held == {}, "driver packages not held: %s" % not_held


def test_full_upgrade_leaves_the_driver(host):
    """A simulated dist-upgrade would neither install, remove nor configure a driver package."""
    out = host.check_output("apt-get -s -o Debug::NoLocking=1 dist-upgrade")
    assert re.search(r"(?m)^\d+ upgraded, \d+ newly installed", out), "no simulation summary:\n%s" % out
    touched = [line for line in out.splitlines() if re.match(r"(Inst|Remv|Conf) %s" % DRIVER_PACKAGE, line)]
    assert touched == [], "an upgrade would change the driver:\n%s" % out


def test_unattended_upgrades_skip_the_driver(host, managed_file):
    """The role's apt.conf.d file blacklists the driver's packages, and apt reads it."""
    text = managed_file(UNATTENDED)
    assert '"libnvidia";' in text, text
    dump = host.check_output("apt-config dump Unattended-Upgrade::Package-Blacklist").splitlines()
    for pattern in ("nvidia", "libnvidia", "libcuda1$"):
        assert 'Unattended-Upgrade::Package-Blacklist:: "%s";' % pattern in dump, "%s missing from:\n%s" % (
            pattern, "\n".join(dump))


def test_pin_covers_the_driver_packages(managed_file):
    """The version pin applies to every driver package and wins over any other version (1001)."""
    text = managed_file(PIN)
    assert re.search(r"(?m)^Package: nvidia-\* libnvidia-\* ", text), text
    assert re.search(r"(?m)^Pin-Priority: 1001$", text), text


def test_nouveau_blacklisted(managed_file):
    """nouveau may not bind the GPUs (modprobe.d blacklist, mode setting off)."""
    text = managed_file(NOUVEAU)
    assert re.search(r"(?m)^blacklist nouveau$", text), text
    assert re.search(r"(?m)^options nouveau modeset=0$", text), text


def test_persistence_mode(host, managed_file):
    """nvidia-persistenced is enabled, and systemd runs it with persistence mode through the drop-in."""
    dropin_dir = host.file(PERSISTENCED_DROPIN.rsplit("/", 1)[0])
    assert dropin_dir.is_directory
    assert (dropin_dir.user, dropin_dir.group, dropin_dir.mode) == ("root", "root", 0o755), dropin_dir.mode
    text = managed_file(PERSISTENCED_DROPIN)
    # The empty ExecStart= clears the unit's own command line before the role's replaces it.
    assert re.search(r"(?m)^ExecStart=\n^ExecStart=%s$" % re.escape(PERSISTENCED_EXEC), text), text
    enabled = host.run("systemctl is-enabled nvidia-persistenced")
    assert enabled.stdout.strip() == "enabled", "nvidia-persistenced: %s %s" % (enabled.stdout, enabled.stderr)
    shown = host.check_output("systemctl show -p DropInPaths -p ExecStart nvidia-persistenced")
    assert PERSISTENCED_DROPIN in shown, shown
    assert "argv[]=%s ;" % PERSISTENCED_EXEC in shown, shown
