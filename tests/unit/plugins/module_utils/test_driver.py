# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for the nvidia_driver role's pure helper (_driver.py).

The Ubuntu and EL paths of the role are not run in CI (no such Molecule images); what they install
is decided here, so these tests pin the package names, module streams, repository URLs and keys
the role resolves on those distributions.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import json
import os

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings as hsettings, strategies as st

from ansible.module_utils.testing import patch_module_args

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _driver as D
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._plan import normalize_request, plan_driver
from ansible_collections.labfleet.vllm.plugins.module_utils.probes import _packages as P
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate import GateInputError, evaluate
from ansible_collections.labfleet.vllm.plugins.modules import nvidia_driver_plan

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
ROLE = os.path.join(REPO, "roles", "nvidia_driver")

# A throwaway ed25519 public key made for these tests with
#   gpg --quick-gen-key 'labfleet unit test key <test@labfleet.invalid>' ed25519 sign never
# gpg --with-colons --fingerprint printed fpr:::::::::575E3EF2D416350B325BCFFFD8166E74F673B9B0:
TEST_KEY_ASC = """-----BEGIN PGP PUBLIC KEY BLOCK-----

mDMEawvuhBYJKwYBBAHaRw8BAQdA5pawww9UEJ9lNknuCLeHjBa3+OEMJOjnwfDC
rlIyvli0LmxhYmZsZWV0IHVuaXQgdGVzdCBrZXkgPHRlc3RAbGFiZmxlZXQuaW52
YWxpZD6IkAQTFggAOBYhBFdePvLUFjULMlvP/9gWbnT2c7mwBQJrC+6EAhsDBQsJ
CAcCBhUKCQgLAgQWAgMBAh4BAheAAAoJENgWbnT2c7mw8UQA/Rv6IM3UXsybZDXW
ywtlZSmP4NN3UIK2WYtgasOJHmuiAP9NFW95FMSOqIdj24cbIqzCxvz+luxhQsYt
IWsaLNeFDA==
=1kaZ
-----END PGP PUBLIC KEY BLOCK-----
"""
TEST_KEY_FPR = "575E3EF2D416350B325BCFFFD8166E74F673B9B0"
NVIDIA_APT_FPR = "EB693B3035CD5710E231E123A4B469963BF863CC"

# dpkg-query -W -f '${db:Status-Want} ${db:Status-Status} ${binary:Package} ${Version}\n' on a
# Debian 13 host after the role installed Debian's R550 (recorded in the trixie Molecule scenario).
DPKG_TRIXIE = """\
install installed apt 3.0.3
hold installed firmware-nvidia-gsp 550.163.01-2
hold installed libcuda1:amd64 550.163.01-2
install installed libcudart12:amd64 12.4.127~12.4.1-2
hold installed libnvidia-ml1:amd64 550.163.01-2
install installed nvidia-kernel-common 20240109+1
hold installed nvidia-kernel-dkms 550.163.01-2
install installed nvidia-modprobe 570.133.07-1
install installed nvidia-persistenced 550.163.01-1
hold installed nvidia-smi 550.163.01-2
install installed nvidia-support 20240109+1
deinstall config-files nvidia-open-kernel-dkms 550.163.01-2
"""

DPKG_UBUNTU = """\
install installed libnvidia-compute-550-server:amd64 550.163.01-0ubuntu0.24.04.1
install installed nvidia-dkms-550-server 550.163.01-0ubuntu0.24.04.1
install installed nvidia-headless-550-server 550.163.01-0ubuntu0.24.04.1
install installed nvidia-utils-550-server 550.163.01-0ubuntu0.24.04.1
install installed nvidia-kernel-common-550-server 550.163.01-0ubuntu0.24.04.1
"""

RPM_EL = """\
kmod-nvidia-latest-dkms 3:550.163.01-1.el9
nvidia-driver 3:550.163.01-1.el9
nvidia-driver-cuda 3:550.163.01-1.el9
nvidia-persistenced 3:550.163.01-1.el9
dkms 0:3.1.5-1.el9
"""
VERSIONLOCK_EL = """\
# Added lock on Mon Jan  5 10:00:00 2026
kmod-nvidia-latest-dkms-3:550.163.01-1.el9.*
nvidia-driver-3:550.163.01-1.el9.*
"""


def defaults():
    with open(os.path.join(ROLE, "defaults", "main.yml")) as handle:
        return yaml.safe_load(handle)


# --- versions ------------------------------------------------------------------------------------

@pytest.mark.parametrize("value,expected", [
    ("550", 550), (550, 550), ("R580", 580), ("r535", 535), (" 570 ", 570), ("550.163.01", 550), ("595.71.05", 595),
])
def test_parse_branch(value, expected):
    assert D.parse_branch(value) == expected


@pytest.mark.parametrize("value", ["", "latest", "55", "5500", True, None, "550-server", "R"])
def test_parse_branch_rejects(value):
    with pytest.raises(D.DriverInputError, match="preflight_deployment.driver.branch"):
        D.parse_branch(value)


@pytest.mark.parametrize("value,expected", [
    ("550.163.01", "550.163.01"), ("570.26", "570.26"), ("", None), (None, None), (" 580.95.05 ", "580.95.05"),
])
def test_parse_exact_version(value, expected):
    assert D.parse_exact_version(value) == expected


@pytest.mark.parametrize("value", ["550", "550.163.01-2", "R550.54.14", "550.x"])
def test_parse_exact_version_rejects(value):
    with pytest.raises(D.DriverInputError, match="preflight_deployment.driver.version"):
        D.parse_exact_version(value)


@pytest.mark.parametrize("package_version,expected", [
    ("550.163.01-2", "550.163.01"),                  # Debian
    ("550.163.01-0ubuntu0.24.04.1", "550.163.01"),   # Ubuntu
    ("3:550.163.01-1.el9", "550.163.01"),            # EL, with epoch
    ("550.163.01-4~bpo13+1", "550.163.01"),          # Debian backports
    ("570.26-1", "570.26"),
    ("20240109+1", None),                            # nvidia-support, not a driver version
    ("12.4.127~12.4.1-2", None),                     # CUDA runtime
    (None, None),
])
def test_upstream_version(package_version, expected):
    assert P.upstream_version(package_version) == expected


def test_version_matches():
    assert D.version_matches("550.163.01", 550, None)
    assert D.version_matches("550.163.01", 550, "550.163.01")
    assert not D.version_matches("550.54.14", 550, "550.163.01")
    assert not D.version_matches("580.95.05", 550, None)
    assert not D.version_matches(None, 550, None)


# --- distributions and sources -----------------------------------------------------------------

@pytest.mark.parametrize("facts,expected", [
    (("Debian", "12", "12.11"), "debian12"),
    (("Debian", "13", "13.1"), "debian13"),
    (("Ubuntu", "22", "22.04"), "ubuntu2204"),
    (("Ubuntu", "24", "24.04"), "ubuntu2404"),
    (("Rocky", "9", "9.6"), "rhel9"),
    (("RedHat", "9", "9.4"), "rhel9"),
    (("AlmaLinux", "9", "9.5"), "rhel9"),
])
def test_distro_key(facts, expected):
    assert D.distro_key(*facts) == expected


@pytest.mark.parametrize("facts", [
    ("Debian", "11", "11.9"), ("Ubuntu", "20", "20.04"), ("Rocky", "8", "8.10"), ("Fedora", "41", "41"), (None, None, None),
])
def test_distro_key_rejects_unsupported(facts):
    with pytest.raises(D.DriverInputError, match="not supported by the nvidia_driver role; supported: "):
        D.distro_key(*facts)


@pytest.mark.parametrize("key,branch,expected", [
    ("debian13", 550, "distro"),     # trixie ships 550.163.01
    ("debian13", 580, "cuda_repo"),
    ("debian12", 550, "cuda_repo"),  # bookworm ships 535 only
    ("debian12", 535, "distro"),
    ("ubuntu2204", 550, "distro"),   # nvidia-*-550-server
    ("ubuntu2404", 580, "distro"),
    ("ubuntu2404", 535, "cuda_repo"),  # Canonical's 535-server is transitional to 580
    ("ubuntu2204", 570, "cuda_repo"),
    ("rhel9", 550, "cuda_repo"),
    ("rhel9", 580, "cuda_repo"),
])
def test_choose_source_auto(key, branch, expected):
    assert D.choose_source(key, branch, "auto")[0] == expected


def test_choose_source_explicit():
    assert D.choose_source("debian13", 550, "cuda_repo")[0] == "cuda_repo"
    assert D.choose_source("ubuntu2204", 550, "cuda_repo")[0] == "cuda_repo"
    with pytest.raises(D.DriverInputError, match="Debian 12's own archive has R535 usable for R550"):
        D.choose_source("debian12", 550, "distro")
    with pytest.raises(D.DriverInputError, match="EL 9's own archive has no driver branch"):
        D.choose_source("rhel9", 550, "distro")
    with pytest.raises(D.DriverInputError, match="preflight_deployment.driver.source"):
        D.choose_source("debian13", 550, "ppa")


def test_ubuntu_cuda_repo_stops_at_r580():
    with pytest.raises(D.DriverInputError, match="R590"):
        D.choose_source("ubuntu2404", 595, "cuda_repo")
    with pytest.raises(D.DriverInputError, match="choose R550 or R580"):
        D.choose_source("ubuntu2404", 595, "auto")


# --- kernel-module flavour ---------------------------------------------------------------------

@pytest.mark.parametrize("requested,required,expected", [
    ("auto", "proprietary", "proprietary"),   # Volta, Pascal, Maxwell
    ("auto", "either", "proprietary"),        # Turing to Hopper
    ("auto", "open", "open"),                 # Blackwell
    ("open", "either", "open"),
    ("proprietary", "either", "proprietary"),
    ("proprietary", "proprietary", "proprietary"),
    ("open", None, "open"),                   # unknown GPU, explicit choice
])
def test_choose_flavour(requested, required, expected):
    assert D.choose_flavour(requested, required) == expected


@pytest.mark.parametrize("requested,required,message", [
    ("open", "proprietary", "open GPU kernel modules do not support this host's GPUs"),
    ("proprietary", "open", "need the open GPU kernel modules"),
    ("auto", "conflict", "no single driver flavour"),
    ("auto", None, "could not be identified"),
    ("closed", "either", "preflight_deployment.driver.kernel_module"),
])
def test_choose_flavour_refuses(requested, required, message):
    with pytest.raises(D.DriverInputError, match=message):
        D.choose_flavour(requested, required)


def _requirements(cc, name):
    gpus = [{"name": name, "compute_capability": cc, "memory_total_mib": 32768}]
    return evaluate(gpus=gpus, driver_version="580")["driver_requirements"]["kernel_module"]


@pytest.mark.parametrize("cc,name,expected", [
    ("7.0", "Tesla V100-PCIE-32GB", "proprietary"),
    ("6.0", "Tesla P100-PCIE-16GB", "proprietary"),
    ("7.5", "Tesla T4", "proprietary"),
    ("8.0", "NVIDIA A100-SXM4-80GB", "proprietary"),
])
def test_flavour_follows_the_gate(cc, name, expected):
    """The role passes the gate's driver_requirements.kernel_module; never the open module below Turing."""
    assert D.choose_flavour("auto", _requirements(cc, name)) == expected


def test_gate_refuses_r595_on_volta():
    """The code the role acts on (preflight.yml refuses on DRIVER_BRANCH_UNSUPPORTED_FOR_ARCH)."""
    gpus = [{"name": "Tesla V100-PCIE-32GB", "compute_capability": "7.0", "memory_total_mib": 32768}]
    codes = [r["code"] for r in evaluate(gpus=gpus, driver_version="595")["reasons"]]
    assert "DRIVER_BRANCH_UNSUPPORTED_FOR_ARCH" in codes
    codes = [r["code"] for r in evaluate(gpus=gpus, driver_version="550")["reasons"]]
    assert "DRIVER_BRANCH_UNSUPPORTED_FOR_ARCH" not in codes


# --- packages per distribution, source, flavour ------------------------------------------------

PACKAGE_CASES = [
    # Debian 13, Debian's own R550
    ("debian13", "distro", 550, "proprietary", None,
     ["nvidia-kernel-dkms", "firmware-nvidia-gsp", "libcuda1", "libnvidia-ml1", "libnvidia-cfg1",
      "libnvidia-ptxjitcompiler1", "libnvidia-nvvm4", "nvidia-smi", "nvidia-persistenced", "nvidia-modprobe"]),
    ("debian13", "distro", 550, "open", None,
     ["nvidia-open-kernel-dkms", "firmware-nvidia-gsp", "libcuda1", "libnvidia-ml1", "libnvidia-cfg1",
      "libnvidia-ptxjitcompiler1", "libnvidia-nvvm4", "nvidia-smi", "nvidia-persistenced", "nvidia-modprobe"]),
    ("debian13", "distro", 550, "proprietary", "550.163.01",
     ["nvidia-kernel-dkms=550.163.01-*", "firmware-nvidia-gsp=550.163.01-*", "libcuda1=550.163.01-*",
      "libnvidia-ml1=550.163.01-*", "libnvidia-cfg1=550.163.01-*", "libnvidia-ptxjitcompiler1=550.163.01-*",
      "libnvidia-nvvm4=550.163.01-*", "nvidia-smi=550.163.01-*", "nvidia-persistenced", "nvidia-modprobe"]),
    # Debian 12, NVIDIA's repository
    ("debian12", "cuda_repo", 550, "proprietary", None, ["nvidia-driver-cuda", "nvidia-kernel-dkms", "nvidia-persistenced"]),
    ("debian12", "cuda_repo", 580, "open", "580.95.05",
     ["nvidia-driver-cuda=580.95.05-*", "nvidia-kernel-open-dkms=580.95.05-*", "nvidia-persistenced=580.95.05-*"]),
    # Ubuntu, Canonical's -server packages
    ("ubuntu2204", "distro", 550, "proprietary", None, ["nvidia-headless-550-server", "nvidia-utils-550-server"]),
    ("ubuntu2404", "distro", 580, "proprietary", None, ["nvidia-headless-580-server", "nvidia-utils-580-server"]),
    ("ubuntu2404", "distro", 580, "open", None, ["nvidia-headless-580-server-open", "nvidia-utils-580-server"]),
    ("ubuntu2404", "distro", 550, "proprietary", "550.163.01",
     ["nvidia-headless-550-server=550.163.01-*", "nvidia-utils-550-server=550.163.01-*"]),
    # Ubuntu, NVIDIA's repository
    ("ubuntu2204", "cuda_repo", 570, "proprietary", None, ["nvidia-headless-570", "nvidia-utils-570"]),
    ("ubuntu2404", "cuda_repo", 580, "open", None, ["nvidia-headless-580-open", "nvidia-utils-580"]),
    # EL 9, dnf module streams of NVIDIA's repository
    ("rhel9", "cuda_repo", 550, "proprietary", None, ["@nvidia-driver:550-dkms"]),
    ("rhel9", "cuda_repo", 580, "open", None, ["@nvidia-driver:580-open"]),
    ("rhel9", "cuda_repo", 550, "proprietary", "550.163.01",
     ["@nvidia-driver:550-dkms", "nvidia-driver-cuda-550.163.01", "kmod-nvidia-latest-dkms-550.163.01"]),
    ("rhel9", "cuda_repo", 580, "open", "580.95.05",
     ["@nvidia-driver:580-open", "nvidia-driver-cuda-580.95.05", "kmod-nvidia-open-dkms-580.95.05"]),
]


@pytest.mark.parametrize("key,source,branch,flavour,version,expected", PACKAGE_CASES,
                         ids=["%s-%s-%s-%s-%s" % case[:5] for case in PACKAGE_CASES])
def test_packages_for(key, source, branch, flavour, version, expected):
    assert D.packages_for(key, source, branch, flavour, version) == expected


def test_no_open_module_package_for_proprietary_and_vice_versa():
    for (family, source), sets in D.PACKAGE_SETS.items():
        proprietary = " ".join(sets["proprietary"])
        assert "open" not in proprietary, (family, source)
        assert any("open" in name for name in sets["open"]), (family, source)


def test_package_names():
    assert D.package_names(["@nvidia-driver:550-dkms", "nvidia-smi=550.163.01-*", "nvidia-modprobe"]) == \
        ["nvidia-smi", "nvidia-modprobe"]


def test_header_packages():
    assert D.header_packages("debian13", "6.12.48+deb13-amd64") == ["linux-headers-6.12.48+deb13-amd64"]
    assert D.header_packages("ubuntu2404", "6.8.0-87-generic") == ["linux-headers-6.8.0-87-generic"]
    assert D.header_packages("rhel9", "5.14.0-570.el9.x86_64") == ["kernel-devel-5.14.0-570.el9.x86_64"]
    assert D.header_packages("debian13", "") == []


def test_apt_pin():
    assert D.apt_pin(550) == "550.*"
    assert D.apt_pin(550, "550.163.01") == "550.163.01-*"


# --- NVIDIA's CUDA repository -------------------------------------------------------------------

def test_cuda_repo_apt_defaults():
    repo = D.cuda_repo("debian12", "x86_64", "https://developer.download.nvidia.com/compute/cuda/repos")
    assert repo == {
        "url": "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/",
        "key_url": "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/3bf863cc.pub",
        "fingerprint": NVIDIA_APT_FPR,
    }
    repo = D.cuda_repo("ubuntu2404", "aarch64", "https://mirror.example/cuda/")
    assert repo["url"] == "https://mirror.example/cuda/ubuntu2404/sbsa/"
    assert repo["key_url"] == "https://mirror.example/cuda/ubuntu2404/sbsa/3bf863cc.pub"


@pytest.mark.parametrize("distro,key_file,fingerprint", [
    # Debian 13's repository is signed with NVIDIA's 2025 key (NVIDIA/cuda-repo-management#39):
    # Debian 13's apt rejects the SHA-1 binding of the 2022 key from 2026-02-01 (#30, #34).
    ("debian13", "8793F200.pub", "02182E60104FCDC26EAE1B8597A5D4CB8793F200"),
    ("debian12", "3bf863cc.pub", "EB693B3035CD5710E231E123A4B469963BF863CC"),
    ("ubuntu2204", "3bf863cc.pub", "EB693B3035CD5710E231E123A4B469963BF863CC"),
    ("ubuntu2404", "3bf863cc.pub", "EB693B3035CD5710E231E123A4B469963BF863CC"),
    ("rhel9", "D42D0685.pub", None),
])
def test_cuda_repo_key_per_distribution(distro, key_file, fingerprint):
    assert D.cuda_repo_key(distro)["file"] == key_file
    assert D.cuda_repo_key(distro)["fingerprint"] == fingerprint
    if fingerprint:
        repo = D.cuda_repo(distro, "x86_64", "https://developer.download.nvidia.com/compute/cuda/repos")
        assert repo["key_url"] == ("https://developer.download.nvidia.com/compute/cuda/repos/%s/x86_64/%s"
                                   % (distro, key_file))
        assert repo["fingerprint"] == fingerprint


def test_every_distribution_has_a_repository_key():
    for distro in D.DISTROS:
        assert D.cuda_repo_key(distro)["file"].endswith(".pub"), distro


def test_cuda_repo_overrides():
    repo = D.cuda_repo("ubuntu2204", "x86_64", "file:///srv/mirror", "file:///srv/key.asc", "0x" + TEST_KEY_FPR.lower())
    assert repo["url"] == "file:///srv/mirror/ubuntu2204/x86_64/"
    assert repo["key_url"] == "file:///srv/key.asc"
    assert repo["fingerprint"] == TEST_KEY_FPR


def test_cuda_repo_el_needs_a_fingerprint():
    with pytest.raises(D.DriverInputError, match="set nvidia_driver_cuda_repo_key_fingerprint"):
        D.cuda_repo("rhel9", "x86_64", "https://developer.download.nvidia.com/compute/cuda/repos")
    repo = D.cuda_repo("rhel9", "x86_64", "https://developer.download.nvidia.com/compute/cuda/repos", "",
                       "AAAA BBBB CCCC DDDD EEEE  FFFF 0000 1111 2222 3333")
    assert repo["url"].endswith("/rhel9/x86_64/")
    assert repo["key_url"].endswith("/rhel9/x86_64/D42D0685.pub")
    assert repo["fingerprint"] == "AAAABBBBCCCCDDDDEEEEFFFF0000111122223333"


@pytest.mark.parametrize("args,message", [
    (("debian12", "ppc64le", "https://x"), "ppc64le"),
    (("debian12", "x86_64", ""), "base_url is empty"),
    (("debian12", "x86_64", "https://x", "", "3BF863CC"), "full key fingerprint"),
])
def test_cuda_repo_errors(args, message):
    with pytest.raises(D.DriverInputError, match=message):
        D.cuda_repo(*args)


# --- installed packages -------------------------------------------------------------------------

def test_parse_dpkg_query():
    packages = P.parse_dpkg_query(DPKG_TRIXIE)
    assert packages["libcuda1"] == {"version": "550.163.01-2", "held": True}
    assert packages["nvidia-persistenced"] == {"version": "550.163.01-1", "held": False}
    assert "nvidia-open-kernel-dkms" not in packages  # removed, configuration files only
    assert P.parse_dpkg_query("") == {}
    assert P.parse_dpkg_query("garbage line\n") == {}


def test_parse_rpm_query_with_versionlock():
    packages = P.parse_rpm_query(RPM_EL, VERSIONLOCK_EL)
    assert packages["kmod-nvidia-latest-dkms"] == {"version": "3:550.163.01-1.el9", "held": True}
    assert packages["nvidia-driver"]["held"]
    assert not packages["nvidia-driver-cuda"]["held"]
    assert P.installed_driver_version(packages) == "550.163.01"


def test_driver_packages_are_the_ones_held():
    packages = P.parse_dpkg_query(DPKG_TRIXIE)
    names = P.driver_packages(packages)
    assert names == ["firmware-nvidia-gsp", "libcuda1", "libnvidia-ml1", "nvidia-kernel-common", "nvidia-kernel-dkms",
                     "nvidia-modprobe", "nvidia-persistenced", "nvidia-smi", "nvidia-support"]
    assert "libcudart12" not in names and "apt" not in names


@pytest.mark.parametrize("name,expected", [
    ("nvidia-kernel-dkms", True), ("libnvidia-compute-550-server", True), ("cuda-drivers-550", True),
    ("libcuda1", True), ("libcuda1:amd64", True), ("firmware-nvidia-gsp", True), ("xserver-xorg-video-nvidia", True),
    ("linux-modules-nvidia-550-server-6.8.0-87-generic", True), ("kmod-nvidia-latest-dkms", True),
    ("libcudart12", False), ("cuda-toolkit-12-4", False), ("dkms", False), ("linux-headers-amd64", False),
])
def test_is_driver_package(name, expected):
    assert P.is_driver_package(name) is expected


def test_installed_driver_version():
    assert P.installed_driver_version(P.parse_dpkg_query(DPKG_TRIXIE)) == "550.163.01"
    assert P.installed_driver_version(P.parse_dpkg_query(DPKG_UBUNTU)) == "550.163.01"
    # nvidia-modprobe and nvidia-support carry their own versions and say nothing about the driver
    only_tools = P.parse_dpkg_query("install installed nvidia-modprobe 570.133.07-1\n"
                                    "install installed nvidia-support 20240109+1\n")
    assert P.installed_driver_version(only_tools) is None
    assert P.installed_driver_version({}) is None


# --- decisions -----------------------------------------------------------------------------------

def test_decide_action_install_and_keep():
    assert D.decide_action(None, 550)["action"] == "install"
    assert D.decide_action("550.163.01", 550)["action"] == "keep"
    assert D.decide_action("550.163.01", 550, "550.163.01")["action"] == "keep"


@pytest.mark.parametrize("installed,branch,version,what", [
    ("550.54.14", 580, None, "a branch change from R550 to R580"),
    ("580.95.05", 550, None, "a branch change from R580 to R550"),
    ("550.54.14", 550, "550.163.01", "an upgrade within R550"),
    ("550.163.01", 550, "550.54.14", "a downgrade within R550"),
])
def test_decide_action_changes_only_when_allowed(installed, branch, version, what):
    refused = D.decide_action(installed, branch, version, allow_change=False)
    assert refused["action"] == "refuse"
    assert what in refused["msg"] and "preflight_deployment.driver.allow_change" in refused["msg"]
    allowed = D.decide_action(installed, branch, version, allow_change=True)
    assert allowed["action"] == "change" and what in allowed["msg"]


def test_decide_action_refuses_unmanaged_driver():
    decision = D.decide_action(None, 550, unmanaged_version="550.54.14")
    assert decision["action"] == "refuse"
    assert "driver 550.54.14 is loaded but no driver package is installed" in decision["msg"]


@pytest.mark.parametrize("vtype,vrole,expected", [
    ("docker", "guest", True), ("podman", "guest", True), ("lxc", "guest", True), ("container", "guest", True),
    ("kvm", "guest", False), ("docker", "host", False), ("", "", False), (None, None, False),
])
def test_is_container(vtype, vrole, expected):
    assert D.is_container(vtype, vrole) is expected


def test_reboot_not_needed_when_module_matches():
    decision = D.reboot_decision("auto", "550.163.01", "550.163.01")
    assert decision == {"needed": False, "reboot": False, "pending": False, "reasons": [], "msg": "no reboot needed"}
    # nothing installed: nothing to load
    assert not D.reboot_decision("auto", None, None)["needed"]


@pytest.mark.parametrize("kernel_module,nouveau,reason", [
    (None, False, "the NVIDIA kernel module is not loaded (driver 550.163.01 installed)"),
    ("550.54.14", False, "the loaded NVIDIA kernel module is 550.54.14 but driver 550.163.01 is installed"),
    ("550.163.01", True, "the nouveau kernel module is loaded"),
])
def test_reboot_needed(kernel_module, nouveau, reason):
    auto = D.reboot_decision("auto", "550.163.01", kernel_module, nouveau_loaded=nouveau)
    assert auto["needed"] and auto["reboot"] and not auto["pending"]
    assert reason in auto["reasons"]
    never = D.reboot_decision("never", "550.163.01", kernel_module, nouveau_loaded=nouveau)
    assert never["needed"] and not never["reboot"] and never["pending"]
    assert never["msg"].startswith("reboot pending (nvidia_driver_reboot=never)")


def test_reboot_never_in_a_container():
    decision = D.reboot_decision("always", "550.163.01", None, nouveau_loaded=True, in_container=True, changed=True)
    assert decision["needed"] and decision["pending"] and not decision["reboot"]
    assert decision["reasons"] == ["the NVIDIA kernel module is not loaded (driver 550.163.01 installed)"]
    assert "container" in decision["msg"]


def test_reboot_always_after_a_change():
    assert D.reboot_decision("always", "550.163.01", "550.163.01", changed=True)["reboot"]
    assert not D.reboot_decision("always", "550.163.01", "550.163.01", changed=False)["needed"]
    assert not D.reboot_decision("auto", "550.163.01", "550.163.01", changed=True)["needed"]


def test_reboot_policy_is_checked():
    with pytest.raises(D.DriverInputError, match="nvidia_driver_reboot"):
        D.reboot_decision("sometimes", None, None)


# --- key fingerprints ------------------------------------------------------------------------------

def _binary_key():
    return D.dearmor(TEST_KEY_ASC)[0]


def test_key_fingerprint_armored_and_binary():
    assert D.key_fingerprints(TEST_KEY_ASC.encode()) == {"fingerprints": [TEST_KEY_FPR], "armored": True}
    assert D.key_fingerprints(_binary_key()) == {"fingerprints": [TEST_KEY_FPR], "armored": False}


def test_key_fingerprint_new_format_packets():
    """gpg writes old-format packet headers; the same key with new-format headers has the same fingerprint."""
    data = bytearray(_binary_key())
    out = bytearray()
    for tag, body in D._packets(data):
        assert len(body) < 192
        out += bytes([0xC0 | tag, len(body)]) + bytes(body)
    assert D.key_fingerprints(bytes(out))["fingerprints"] == [TEST_KEY_FPR]


def test_key_fingerprint_two_keys():
    data = _binary_key() + _binary_key()
    assert D.key_fingerprints(data)["fingerprints"] == [TEST_KEY_FPR, TEST_KEY_FPR]
    assert not D.check_key(data, TEST_KEY_FPR)["ok"]  # exactly the expected key, nothing more


@pytest.mark.parametrize("data,message", [
    (b"", "holds no OpenPGP public key"),
    (b"hello", "not an OpenPGP key"),
    (b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n!!!!\n-----END PGP PUBLIC KEY BLOCK-----\n", "not valid base64|no OpenPGP"),
    (bytes(_binary_key()[:20]), "truncated"),
])
def test_key_fingerprint_errors(data, message):
    with pytest.raises(D.DriverInputError, match=message):
        D.key_fingerprints(data)


def test_check_key():
    good = D.check_key(TEST_KEY_ASC.encode(), " ".join(TEST_KEY_FPR[i:i + 4] for i in range(0, 40, 4)))
    assert good["ok"] and good["armored"] and good["msg"] == "repository key %s verified" % TEST_KEY_FPR
    bad = D.check_key(TEST_KEY_ASC.encode(), NVIDIA_APT_FPR)
    assert not bad["ok"]
    assert "has fingerprint(s) %s, expected %s" % (TEST_KEY_FPR, NVIDIA_APT_FPR) in bad["msg"]
    broken = D.check_key(b"hello", NVIDIA_APT_FPR)
    assert not broken["ok"] and "not an OpenPGP key" in broken["msg"]


# --- hostile repository keys (issue 24): check_key answers ok=false with a message, never raises ----

KEY_HYPOTHESIS = dict(database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _new_format(data):
    """The same packets with new-format headers (five-octet lengths, so any body fits)."""
    out = bytearray()
    for tag, body in D._packets(bytearray(data)):
        out += bytes([0xC0 | tag, 255]) + len(body).to_bytes(4, "big") + bytes(body)
    return bytes(out)


def _answer(data):
    """check_key's answer, and run()'s for the same bytes: both are dicts, neither raises."""
    result = D.check_key(data, TEST_KEY_FPR)
    assert set(result) == {"ok", "fingerprints", "armored", "msg"} and isinstance(result["msg"], str)
    if result["ok"]:
        assert result["fingerprints"] == [TEST_KEY_FPR]
    raw = data if isinstance(data, bytes) else data.encode("utf-8")
    answer = D.run({"command": "check_key", "content_b64": base64.b64encode(raw).decode(), "fingerprint": TEST_KEY_FPR})
    assert answer.get("ok") is not True or answer["fingerprints"] == [TEST_KEY_FPR]
    return result


@hsettings(max_examples=300, **KEY_HYPOTHESIS)
@given(data=st.one_of(st.binary(max_size=400), st.text(max_size=200),
                      st.builds(lambda b: ("-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n%s\n-----END PGP PUBLIC KEY BLOCK-----\n"
                                           % base64.b64encode(b).decode()).encode(), st.binary(max_size=200))))
@example(data=bytes([0xC6, 200]))                  # a two-octet new-format length cut after its first octet
@example(data=u"\u20ac")                             # text that is no key, and no Latin-1 either
def test_property_check_key_answers_any_bytes_without_raising(data):
    assert not _answer(data)["ok"]


@hsettings(max_examples=200, **KEY_HYPOTHESIS)
@given(cut=st.integers(1, len(_binary_key()) - 1), new_format=st.booleans())
@example(cut=1, new_format=False)
@example(cut=2, new_format=True)
def test_property_a_truncated_key_is_refused_as_truncated(cut, new_format):
    key = _new_format(_binary_key()) if new_format else _binary_key()
    ends, end = [], 0
    for dummy, body in D._packets(bytearray(key)):   # where each packet ends: a cut there leaves whole packets
        end = key.index(bytes(body), end) + len(body)
        ends.append(end)
    result = _answer(key[:cut])
    if cut in ends:
        assert result["ok"], result["msg"]
    else:
        assert not result["ok"] and "truncated" in result["msg"], result["msg"]


@hsettings(max_examples=300, **KEY_HYPOTHESIS)
@given(position=st.integers(0, len(_binary_key()) - 1), value=st.integers(0, 255), new_format=st.booleans())
def test_property_a_mutated_key_is_answered_never_raised(position, value, new_format):
    key = bytearray(_new_format(_binary_key()) if new_format else _binary_key())
    key[position % len(key)] = value
    _answer(bytes(key))


@hsettings(max_examples=60, **KEY_HYPOTHESIS)
@given(version=st.integers(0, 255), length=st.one_of(st.integers(0, 12), st.integers(65530, 70000)),
       old_format=st.booleans())
@example(version=4, length=70000, old_format=False)   # a v4 key packet longer than its two-octet fingerprint length
@example(version=4, length=1, old_format=True)
def test_property_key_packets_of_any_version_and_length_are_answered(version, length, old_format):
    body = bytes([version]) + bytes(length)
    header = bytes([0x9A]) + len(body).to_bytes(4, "big") if old_format else \
        bytes([0xC6, 255]) + len(body).to_bytes(4, "big")
    result = _answer(header + body)
    assert not result["ok"]
    assert "invalid key packet" in result["msg"] or "not supported" in result["msg"], result["msg"]


@pytest.mark.parametrize("value", ["3BF863CC", "xyz", "", None])
def test_normalize_fingerprint_rejects(value):
    with pytest.raises(D.DriverInputError, match="full key fingerprint"):
        D.normalize_fingerprint(value)


# --- whole requests ------------------------------------------------------------------------------

_STEP_INPUTS = ("branch", "version", "source", "kernel_module", "required_kernel_module", "allow_change",
                "loaded_driver_version")


def _step(request, **want):
    """The preflight plan's driver step for this request's host, from the real planner (_plan.plan_driver)
    with the packages host_facts would read from the request's listings."""
    installed = D._installed(request)
    packages = {"manager": "dpkg", "installed_version": P.installed_driver_version(installed),
                "packages": P.driver_packages(installed), "error": None}
    driver = normalize_request({"driver": dict(manage=True, **want)})["driver"]
    return plan_driver(want.get("loaded_driver_version"), driver, packages=packages,
                       required_kernel_module=want.get("required_kernel_module", "proprietary"),
                       distribution={"name": request["distribution"],
                                     "major_version": request["distribution_major_version"],
                                     "version": request["distribution_version"]})


def _request(**overrides):
    """A role request for the package plan, its step planned from the same host facts."""
    request = {
        "command": "plan", "distribution": "Debian", "distribution_major_version": "13",
        "distribution_version": "13.1", "architecture": "x86_64", "kernel": "6.12.48+deb13-amd64",
        "virtualization_type": "kvm", "virtualization_role": "host",
        "dpkg_query": "", "rpm_query": None, "versionlock_list": "",
        "cuda_repo_base_url": "https://developer.download.nvidia.com/compute/cuda/repos",
        "cuda_repo_key_url": "", "cuda_repo_key_fingerprint": "",
    }
    want = {"branch": "550"}
    for key in _STEP_INPUTS:
        if key in overrides:
            want[key] = overrides.pop(key)
    request.update(overrides)
    loaded = want.pop("loaded_driver_version", None)
    required = want.pop("required_kernel_module", "proprietary")
    request["step"] = _step(request, loaded_driver_version=loaded, required_kernel_module=required, **want)
    return request


def test_plan_debian13_fresh_host():
    plan = D.run(_request(version="550.163.01"))
    assert "error" not in plan
    assert plan["distro"] == "debian13" and plan["family"] == "apt" and plan["source"] == "distro"
    assert plan["action"] == "install" and plan["kernel_module"] == "proprietary"
    assert plan["packages"][0] == "nvidia-kernel-dkms=550.163.01-*"
    assert plan["headers"] == ["linux-headers-6.12.48+deb13-amd64"]
    assert plan["apt_pin"] == "550.163.01-*" and plan["repo"] is None and not plan["in_container"]
    assert plan["wanted"] == "550.163.01"


def test_plan_keeps_the_installed_version():
    """Without an exact version, a kept driver's missing packages come at the installed version."""
    plan = D.run(_request(dpkg_query=DPKG_TRIXIE))
    assert plan["action"] == "keep" and plan["installed_version"] == "550.163.01"
    assert plan["package_version"] == "550.163.01"
    assert "nvidia-smi=550.163.01-*" in plan["packages"]
    assert plan["apt_pin"] == "550.*"  # the pin follows the request, so it does not change between runs
    assert plan["held_driver_packages"] == ["firmware-nvidia-gsp", "libcuda1", "libnvidia-ml1", "nvidia-kernel-dkms",
                                            "nvidia-smi"]


def test_plan_refuses_a_branch_change_without_permission():
    plan = D.run(_request(branch="580", dpkg_query=DPKG_TRIXIE))
    assert plan["action"] == "refuse" and "R580" in plan["action_msg"] and "allow_change" in plan["action_msg"]
    plan = D.run(_request(branch="580", dpkg_query=DPKG_TRIXIE, allow_change=True))
    assert plan["action"] == "change" and plan["source"] == "cuda_repo"
    assert plan["held_driver_packages"]


def test_plan_ubuntu_and_el():
    ubuntu = D.run(_request(distribution="Ubuntu", distribution_major_version="24", distribution_version="24.04",
                            kernel="6.8.0-87-generic", dpkg_query=DPKG_UBUNTU))
    assert ubuntu["distro"] == "ubuntu2404" and ubuntu["source"] == "distro" and ubuntu["action"] == "keep"
    assert ubuntu["packages"] == ["nvidia-headless-550-server=550.163.01-*", "nvidia-utils-550-server=550.163.01-*"]
    el = D.run(_request(distribution="Rocky", distribution_major_version="9", distribution_version="9.6",
                        kernel="5.14.0-570.el9.x86_64", rpm_query=RPM_EL, versionlock_list=VERSIONLOCK_EL,
                        cuda_repo_key_fingerprint="AAAABBBBCCCCDDDDEEEEFFFF0000111122223333"))
    assert el["distro"] == "rhel9" and el["family"] == "dnf" and el["el_stream"] == "550-dkms"
    assert el["packages"] == ["@nvidia-driver:550-dkms", "nvidia-driver-cuda-550.163.01",
                              "kmod-nvidia-latest-dkms-550.163.01"]
    assert el["apt_pin"] is None and el["headers"] == ["kernel-devel-5.14.0-570.el9.x86_64"]
    assert el["held_driver_packages"] == ["kmod-nvidia-latest-dkms", "nvidia-driver"]
    assert el["repo"]["url"].endswith("/rhel9/x86_64/")


@pytest.mark.parametrize("overrides,code,message", [
    ({"distribution_major_version": "11", "distribution_version": "11.9"}, "DRIVER_SOURCE_UNAVAILABLE",
     "Debian 11.9 is not supported"),
    ({"source": "distro", "branch": "580"}, "DRIVER_SOURCE_UNAVAILABLE", "set preflight_deployment.driver.source"),
    ({"kernel_module": "open"}, "DRIVER_KERNEL_MODULE_UNSUITABLE", "open GPU kernel modules do not support"),
    ({"required_kernel_module": None}, "DRIVER_KERNEL_MODULE_UNSUITABLE", "could not be identified"),
    ({"loaded_driver_version": "550.54.14"}, "DRIVER_NOT_FROM_PACKAGES",
     "driver 550.54.14 is loaded but no driver package is installed"),
])
def test_the_plan_refuses_what_the_role_cannot_install(overrides, code, message):
    """Flavour, source and a driver no package installed are decided in the plan's driver step,
    before any change; the role's package plan never sees such a step as carried out."""
    request = _request(**overrides)
    step = request["step"]
    assert [p["code"] for p in step["problems"]] == [code]
    assert message in step["problems"][0]["message"]
    answer = D.run(request)  # never a package plan that installs: a refusal or an error that says why
    assert answer.get("action") == "refuse" or "error" in answer, answer


def test_a_step_without_the_package_decision_is_refused():
    request = _request()
    del request["step"]["source"]
    assert "planned without the host's driver packages" in D.run(request)["error"]
    request["step"] = None
    assert "run the preflight role first" in D.run(request)["error"]


@pytest.mark.parametrize("change,stale", [
    ({"dpkg_query": DPKG_TRIXIE}, "the driver packages carried no driver, now they carry 550.163.01"),
    ({"distribution_major_version": "12", "distribution_version": "12.11"}, "made for debian13, this host is debian12"),
])
def test_a_host_that_changed_since_the_plan_is_a_stale_plan(change, stale):
    """The role checks the host against what the step was planned from and changes nothing when it differs."""
    request = _request()
    request.update(change)
    error = D.run(request)["error"]
    assert error.startswith("stale plan: ") and stale in error and "nothing was changed" in error


def test_plan_needs_the_repository_fingerprint_on_el():
    error = D.run(_request(distribution="Rocky", distribution_major_version="9", distribution_version="9.6"))["error"]
    assert "nvidia_driver_cuda_repo_key_fingerprint" in error


def test_plan_in_a_container():
    plan = D.run(_request(virtualization_type="docker", virtualization_role="guest"))
    assert plan["in_container"]


def test_assess_holds_and_reboot():
    result = D.run({"command": "assess", "branch": "550", "version": "550.163.01", "dpkg_query": DPKG_TRIXIE,
                    "kernel_module_version": None, "nouveau_loaded": False, "in_container": True,
                    "reboot_policy": "auto", "changed": True, "expect_installed": True})
    assert result["installed_version"] == "550.163.01" and result["problems"] == []
    assert result["to_hold"] == ["nvidia-kernel-common", "nvidia-modprobe", "nvidia-persistenced", "nvidia-support"]
    assert "libcuda1" in result["held"]
    assert result["reboot"]["pending"] and not result["reboot"]["reboot"]


def test_assess_reports_a_wrong_installed_version():
    result = D.run({"command": "assess", "branch": "550", "version": "550.54.14", "dpkg_query": DPKG_TRIXIE,
                    "expect_installed": "True"})
    assert "carry 550.163.01, not 550.54.14" in result["problems"][0]
    # check mode: nothing was installed, nothing is compared
    result = D.run({"command": "assess", "branch": "580", "dpkg_query": "", "expect_installed": False})
    assert result["problems"] == [] and not result["reboot"]["needed"]


def test_check_key_request():
    content = base64.b64encode(TEST_KEY_ASC.encode()).decode()
    assert D.run({"command": "check_key", "content_b64": content, "fingerprint": TEST_KEY_FPR})["ok"]
    assert "base64" in D.run({"command": "check_key", "content_b64": "***", "fingerprint": TEST_KEY_FPR})["error"]


def test_run_rejects_unknown_commands():
    assert "command one of" in D.run({"command": "install"})["error"]
    assert "command one of" in D.run(["plan"])["error"]


def test_module_answers_through_run(capsys):
    """The role asks through labfleet.vllm.nvidia_driver_plan, which returns run()'s answer."""
    for request, check in ((_request(), lambda a: a["packages"][0] == "nvidia-kernel-dkms"),
                           ({"command": "install"}, lambda a: "command one of" in a["error"])):
        with patch_module_args({"request": request, "_ansible_check_mode": True}):
            with pytest.raises(SystemExit) as exc:
                nvidia_driver_plan.main()
        result = json.loads(capsys.readouterr().out)
        assert exc.value.code == 0 and result["changed"] is False
        assert check(result["answer"])


# --- the role and the helper agree --------------------------------------------------------------

def test_role_defaults_give_a_plan_on_every_supported_distribution():
    values = defaults()
    # The branch and version come from the request (the preflight role's preflight_deployment_defaults).
    with open(os.path.join(ROLE, "..", "preflight", "defaults", "main.yml")) as handle:
        driver = yaml.safe_load(handle)["preflight_deployment_defaults"]["driver"]
    for dist, major, version in (("Debian", "12", "12.11"), ("Debian", "13", "13.1"), ("Ubuntu", "22", "22.04"),
                                 ("Ubuntu", "24", "24.04")):
        plan = D.run(_request(distribution=dist, distribution_major_version=major, distribution_version=version,
                              branch=driver["branch"], version=driver["version"],
                              source=driver["source"], kernel_module=driver["kernel_module"],
                              cuda_repo_base_url=values["nvidia_driver_cuda_repo_base_url"]))
        assert "error" not in plan, (dist, major, plan)
        assert plan["branch"] == 550 and plan["kernel_module"] == "proprietary"


def _plan_choices(key):
    """The choices the plan's request accepts for request.driver.<key>, read back from its error message."""
    with pytest.raises(GateInputError) as exc:
        normalize_request({"driver": {key: "nonsense"}})
    listed = str(exc.value).split("expected one of ", 1)[1].split(", got", 1)[0]
    return tuple(listed.split(", "))


def test_argument_spec_choices_match_the_helper():
    with open(os.path.join(ROLE, "meta", "argument_specs.yml")) as handle:
        options = yaml.safe_load(handle)["argument_specs"]["main"]["options"]
    # The flavour and the source are request keys now (the plan decides them): their choices are the helper's.
    assert "nvidia_driver_source" not in options and "nvidia_driver_kernel_module" not in options
    assert _plan_choices("kernel_module") == D.FLAVOURS and _plan_choices("source") == D.SOURCES
    assert tuple(options["nvidia_driver_reboot"]["choices"]) == D.REBOOT_POLICIES
    assert NVIDIA_APT_FPR in " ".join(options["nvidia_driver_cuda_repo_key_fingerprint"]["description"])
