"""nvidia_driver_bookworm_repo: R550 from (a stand-in for) NVIDIA's CUDA repository on Debian 12.

The repository is trusted through the verified key only (deb822 source signed by the role's
keyring), the pin keeps R550 installed and the candidate although R590 is offered, the three
packages of NVIDIA's compute set are installed at 550.163.01 and held, and a key with another
fingerprint is refused before anything changes. The checks shared with nvidia_driver_trixie
(holds, upgrade simulation, unattended upgrades, nouveau, persistence mode) are in
molecule/nvidia_driver_common/tests/.
"""

import os
import re

testinfra_hosts = ["vllm_hosts"]

REPO_URL = "file:///srv/labfleet-fake-cuda/debian12/x86_64/"
REPO_KEY = "/srv/labfleet-fake-cuda/labfleet-test-key.asc"
KEYRING = "/etc/apt/keyrings/labfleet-nvidia-cuda.asc"
SOURCE = "/etc/apt/sources.list.d/labfleet-nvidia-cuda.sources"
PIN = "/etc/apt/preferences.d/labfleet-nvidia-driver"
VERSION = "550.163.01-1"
OFFERED = "590.48.01-1"
PACKAGES = ["nvidia-driver-cuda", "nvidia-kernel-dkms", "nvidia-persistenced"]
WRONG_FINGERPRINT = "0000111122223333444455556666777788889999"


def _policy(host, *packages):
    """apt-cache policy, per package: {name: text of its block}."""
    out = host.check_output("apt-cache policy %s" % " ".join(["%s"] * len(packages)), *packages)
    parts = re.split(r"(?m)^(\S+):$", out)
    return dict(zip(parts[1::2], parts[2::2]))


def test_source_signed_by_the_role_keyring_only(managed_file):
    """The deb822 source names the stand-in repository and trusts the role's keyring only."""
    text = managed_file(SOURCE)
    assert re.search(r"(?m)^Types: deb$", text), text
    assert re.search(r"(?m)^URIs: %s$" % re.escape(REPO_URL), text), text
    assert re.search(r"(?m)^Suites: /$", text), text
    assert re.search(r"(?m)^Signed-By: %s$" % re.escape(KEYRING), text), text


def test_keyring_is_the_verified_key(host):
    """The keyring is the repository's key, byte for byte."""
    keyring = host.file(KEYRING)
    assert keyring.is_file, "%s is missing" % KEYRING
    assert (keyring.user, keyring.group, keyring.mode) == ("root", "root", 0o644), "%s:%s %04o" % (
        keyring.user, keyring.group, keyring.mode)
    assert keyring.sha256sum == host.file(REPO_KEY).sha256sum


def test_no_debian_nonfree_source(host):
    """The CUDA repository path adds no Debian non-free source."""
    assert not host.file("/etc/apt/sources.list.d/labfleet-debian-nonfree.sources").exists


def test_pin_keeps_the_branch(managed_file):
    """The pin holds every version of branch 550 (the request names no exact version)."""
    text = managed_file(PIN)
    assert re.search(r"(?m)^Pin: version 550\.\*$", text), text


def test_r550_installed_and_candidate_although_r590_offered(host):
    """apt sees R590 in the repository but keeps R550 installed and as the candidate."""
    policy = _policy(host, "nvidia-driver-cuda", "nvidia-kernel-dkms")
    assert sorted(policy) == ["nvidia-driver-cuda", "nvidia-kernel-dkms"], policy
    for name, text in policy.items():
        assert re.search(r"(?m)^\s+Installed: %s$" % re.escape(VERSION), text), "%s:%s" % (name, text)
        assert re.search(r"(?m)^\s+Candidate: %s$" % re.escape(VERSION), text), "%s:%s" % (name, text)
        assert re.search(r"(?m)^\s+%s " % re.escape(OFFERED), text), "%s: R590 not offered:%s" % (name, text)


def test_compute_packages_installed_and_held(dpkg_packages):
    """NVIDIA's compute set is installed at 550.163.01 and held; the open module is not installed."""
    for name in PACKAGES:
        found = dpkg_packages.get(name, {})
        assert (found.get("version"), found.get("want"), found.get("status")) == (VERSION, "hold", "installed"), (
            "%s: %s" % (name, found or "unknown to dpkg"))
    open_module = dpkg_packages.get("nvidia-kernel-open-dkms")
    assert open_module is None or not open_module["version"], open_module


def test_wrong_fingerprint_refused_before_any_change(host, run_playbook):
    """The role, given another fingerprint, stops at the key check; the keyring and source stay untouched.

    This needs the collection's role run with an input it must refuse, so it goes through a small
    playbook (wrong_fingerprint.yml) that records how the role ended.
    """
    paths = [KEYRING, SOURCE]
    before = [(host.file(path).sha256sum, host.file(path).mtime) for path in paths]
    name = host.backend.get_hostname()
    run = run_playbook(os.path.join(os.path.dirname(__file__), "wrong_fingerprint.yml"), limit=name)
    assert run.returncode == 0, "%s\n%s" % (run.stdout, run.stderr)
    refusal = run.results("Report how the role ended")[name]["__refusal"]
    assert refusal["failed"], refusal
    assert "Refuse a key with another fingerprint" in refusal["task"], refusal
    assert "expected %s" % WRONG_FINGERPRINT in refusal["msg"], refusal
    after = [(host.file(path).sha256sum, host.file(path).mtime) for path in paths]
    assert after == before, "the refused run changed %s" % [p for p, b, a in zip(paths, before, after) if b != a]
