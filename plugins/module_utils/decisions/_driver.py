# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. It serves the labfleet.vllm.nvidia_driver role.
"""How the nvidia_driver role installs, holds and reboots for: pure functions, standard library only.

* which packages carry a driver branch on each supported distribution, per source (the
  distribution's own archive or NVIDIA's CUDA repository) and kernel-module flavour
  (proprietary or open);
* parsing of driver versions and branches (the package-manager listings: probes/_packages.py);
* the rules for the driver action (keep / install / change / refuse: decide_action), the
  kernel-module flavour (choose_flavour) and the package source (choose_source). The preflight's
  plan applies them, once (decisions/_plan.py, plan_driver); this role's package plan (plan())
  carries out the plan's driver step and only checks that the host is still what the step was
  planned from ("stale plan" otherwise);
* whether the host needs a reboot (and may have one);
* OpenPGP fingerprints of a repository key, so the role checks the key it downloads without
  needing gpg on the host.

Which branch drives which GPU, and which kernel-module flavour a GPU needs, is the deployment
gate's policy (_policy.py); the architecture names in this file's messages come from the same
policy table (_policy.kernel_module_labels).

The role asks through the module labfleet.vllm.nvidia_driver_plan, which passes one request
dict to run(); the answer carries ``error`` when the request cannot be satisfied. Unit tests call
the functions directly.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import binascii
import hashlib
import re

from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._policy import (
    kernel_module_labels,
    parse_driver_version,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.probes._packages import (
    driver_packages,
    installed_driver_version,
    parse_dpkg_query,
    parse_rpm_query,
)

# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------

# Supported distributions. ``native``: driver branches the distribution's own archive ships
# (and that this role installs from it); ``family``: the package manager.
#   Debian 12 ships 535 and Debian 13 ships 550.163.01 in non-free (packages.debian.org).
#   Ubuntu ships Canonical's "-server" builds of the data-center branches; 535-server and
#   570-server became transitional packages that pull 580-server, so only 550 and 580 are taken
#   from Ubuntu (facts.md section 6).
#   EL 9 has no driver in its own repositories: NVIDIA's CUDA repository (dnf module streams).
DISTROS = {
    "debian12": {"label": "Debian 12", "family": "apt", "repo_dir": "debian12", "native": (535,)},
    "debian13": {"label": "Debian 13", "family": "apt", "repo_dir": "debian13", "native": (550,)},
    "ubuntu2204": {"label": "Ubuntu 22.04", "family": "apt", "repo_dir": "ubuntu2204", "native": (550, 580)},
    "ubuntu2404": {"label": "Ubuntu 24.04", "family": "apt", "repo_dir": "ubuntu2404", "native": (550, 580)},
    "rhel9": {"label": "EL 9", "family": "dnf", "repo_dir": "rhel9", "native": ()},
}

EL_DISTRIBUTIONS = ("RedHat", "Rocky", "AlmaLinux", "CentOS", "OracleLinux")

# NVIDIA CUDA repository: architecture directory and signing key per package family.
CUDA_REPO_ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "sbsa", "arm64": "sbsa"}
CUDA_REPO_KEYS = {
    # "cudatools <cudatools@nvidia.com>", key 3bf863cc (the 2022 key, enrolled by cuda-keyring 1.1).
    "apt": {"file": "3bf863cc.pub", "fingerprint": "EB693B3035CD5710E231E123A4B469963BF863CC"},
    # Key D42D0685 of the RHEL repositories. Its full fingerprint was not found in any source
    # read for this role, so none is shipped: the user states it (nvidia_driver_cuda_repo_key_fingerprint).
    "dnf": {"file": "D42D0685.pub", "fingerprint": None},
}
# Repositories signed with another key than their family's. NVIDIA keeps the 2022 key on the
# repositories it already signed with it, and signs the Debian 13 repository (new in 2025) with a
# new key: Debian 13's apt (sqv) rejects 3bf863cc's SHA-1 self-signature from 2026-02-01
# ("Signing key on EB693B30... is not bound ... SHA1 is not considered secure"), so that key
# cannot sign for it. Sources: NVIDIA/cuda-repo-management#30, #34 and #39 (maintainer: "only a new
# key for Debian 13"); the full fingerprint from two independent third-party setups that pin it.
CUDA_REPO_KEYS_BY_DISTRO = {
    "debian13": {"file": "8793F200.pub", "fingerprint": "02182E60104FCDC26EAE1B8597A5D4CB8793F200",
                 "source": "NVIDIA/cuda-repo-management#30, #34, #39; fingerprint: third-party copies",
                 "confidence": "third_party"},
}


def cuda_repo_key(key):
    """The signing key ({file, fingerprint}) of NVIDIA's CUDA repository for distribution ``key``."""
    if key in CUDA_REPO_KEYS_BY_DISTRO:
        return CUDA_REPO_KEYS_BY_DISTRO[key]
    return CUDA_REPO_KEYS[DISTROS[key]["family"]]


# Packages per (distribution family/source) and flavour. "{b}" is the branch. A name that ends in
# "=" carries the driver's own version (so an exact version pins it); others are left to the
# package manager (they come from other source packages with their own version numbers).
PACKAGE_SETS = {
    # Debian's own nvidia-graphics-drivers (contrib/non-free): the compute pieces only, without
    # the X server and GL stack that the "nvidia-driver" metapackage pulls in.
    ("debian", "distro"): {
        "proprietary": ["nvidia-kernel-dkms=", "firmware-nvidia-gsp=", "libcuda1=", "libnvidia-ml1=",
                        "libnvidia-cfg1=", "libnvidia-ptxjitcompiler1=", "libnvidia-nvvm4=",
                        "nvidia-smi=", "nvidia-persistenced", "nvidia-modprobe"],
        "open": ["nvidia-open-kernel-dkms=", "firmware-nvidia-gsp=", "libcuda1=", "libnvidia-ml1=",
                 "libnvidia-cfg1=", "libnvidia-ptxjitcompiler1=", "libnvidia-nvvm4=",
                 "nvidia-smi=", "nvidia-persistenced", "nvidia-modprobe"],
    },
    # NVIDIA's Debian repository, compute-only ("headless") set of the driver installation guide.
    ("debian", "cuda_repo"): {
        "proprietary": ["nvidia-driver-cuda=", "nvidia-kernel-dkms=", "nvidia-persistenced="],
        "open": ["nvidia-driver-cuda=", "nvidia-kernel-open-dkms=", "nvidia-persistenced="],
    },
    # Canonical's data-center builds (DKMS).
    ("ubuntu", "distro"): {
        "proprietary": ["nvidia-headless-{b}-server=", "nvidia-utils-{b}-server="],
        "open": ["nvidia-headless-{b}-server-open=", "nvidia-utils-{b}-server="],
    },
    # NVIDIA's Ubuntu repository (branch in the package names up to R580).
    ("ubuntu", "cuda_repo"): {
        "proprietary": ["nvidia-headless-{b}=", "nvidia-utils-{b}="],
        "open": ["nvidia-headless-{b}-open=", "nvidia-utils-{b}="],
    },
}
# From R590 NVIDIA's Ubuntu repository drops the branch from package names (NVIDIA driver
# installation guide, "Ubuntu 590 and later packages"); this role does not map those yet.
UBUNTU_CUDA_REPO_LAST_NAMED_BRANCH = 580

# EL: the dnf module stream of NVIDIA's repository, per flavour (facts.md section 6).
EL_STREAMS = {"proprietary": "{b}-dkms", "open": "{b}-open"}
EL_EXACT = {"proprietary": ["nvidia-driver-cuda-{v}", "kmod-nvidia-latest-dkms-{v}"],
            "open": ["nvidia-driver-cuda-{v}", "kmod-nvidia-open-dkms-{v}"]}

# The same list for Unattended-Upgrade::Package-Blacklist (Python regular expressions, matched
# from the start of the package name).
UNATTENDED_BLACKLIST = (
    "nvidia", "libnvidia", "cuda-drivers", "libcuda1$", "firmware-nvidia", "xserver-xorg-video-nvidia",
    "libxnvctrl", "linux-modules-nvidia", "linux-objects-nvidia", "linux-signatures-nvidia",
)
# apt_preferences(5) globs of the packages the version pin applies to.
PIN_GLOBS = ("nvidia-*", "libnvidia-*", "libcuda1", "cuda-drivers*", "firmware-nvidia-gsp*",
             "xserver-xorg-video-nvidia*", "libxnvctrl*")

CONTAINER_TYPES = ("docker", "podman", "container", "containerd", "lxc", "openvz", "systemd-nspawn")

REBOOT_POLICIES = ("auto", "never", "always")
SOURCES = ("auto", "distro", "cuda_repo")
FLAVOURS = ("auto", "proprietary", "open")


class DriverInputError(ValueError):
    """A request this role cannot satisfy; the message says what to change."""


# ---------------------------------------------------------------------------------------------
# Versions
# ---------------------------------------------------------------------------------------------

# A kernel release as `uname -r` prints it (ansible_kernel): it becomes a package name.
_KERNEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+~-]{0,127}\Z")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _driver_parts(text):
    """A driver version's text read by the one reader of it (_policy.parse_driver_version: ASCII
    digits only, an optional R), with the digit count of each part as typed: (tuple, [digits...])
    or (None, None)."""
    if not isinstance(text, str):
        return None, None
    text = text.strip()
    parsed = parse_driver_version(text)
    if parsed is None:
        return None, None
    return parsed, [len(part) for part in text.lstrip("rR").split(".")]


def parse_branch(value):
    """A driver branch as an int: 550, "550", "R550", "550.163.01" -> 550 (three digits, then at
    most two more parts). The plan's driver step carries it parsed; this checks it again."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    parsed, digits = _driver_parts(value)
    if parsed is None or digits[0] != 3 or len(parsed) > 3:
        raise DriverInputError("preflight_deployment.driver.branch: expected a branch like '550' or 'R580', got %r" % (value,))
    return parsed[0]


def parse_exact_version(value):
    """An exact driver version ("550.163.01", "570.26") or None for empty."""
    if value is None:
        return None
    text = str(value).strip()
    if text == "":
        return None
    parsed, digits = _driver_parts(text)
    if (parsed is None or text[0] in "rR" or len(parsed) not in (2, 3) or digits[0] != 3
            or max(digits[1:]) > 3):
        raise DriverInputError("preflight_deployment.driver.version: expected an exact driver version like '550.163.01' "
                               "(no package revision), got %r" % (value,))
    return text


def version_tuple(text):
    return parse_driver_version(text)


def branch_of(version):
    """550 for "550.163.01"; None for None."""
    return parse_driver_version(version)[0] if version else None


def version_matches(installed, branch, exact):
    """Whether an installed driver version is the one asked for (exact version, else branch)."""
    if not installed:
        return False
    if exact:
        return installed == exact
    return branch_of(installed) == branch


# ---------------------------------------------------------------------------------------------
# Distribution, source, flavour, packages
# ---------------------------------------------------------------------------------------------


def distro_key(distribution, major_version, version=None):
    """"debian13", "ubuntu2404", "rhel9" ... from Ansible's distribution facts; raise if unsupported."""
    dist = distribution.strip() if isinstance(distribution, str) else ""
    major = str(major_version or "").strip()
    key = None
    if dist == "Debian" and major in ("12", "13"):
        key = "debian" + major
    elif dist == "Ubuntu":
        ver = str(version or "").strip()
        if ver in ("22.04", "24.04"):
            key = "ubuntu" + ver.replace(".", "")
    elif dist in EL_DISTRIBUTIONS and major == "9":
        key = "rhel9"
    if key is None:
        raise DriverInputError(
            "%s %s is not supported by the nvidia_driver role; supported: %s"
            % (dist or "unknown distribution", version or major or "",
               ", ".join(DISTROS[k]["label"] for k in sorted(DISTROS))))
    return key


def package_family(key):
    """"debian", "ubuntu" or "el"."""
    if key.startswith("debian"):
        return "debian"
    if key.startswith("ubuntu"):
        return "ubuntu"
    return "el"


def choose_source(key, branch, requested="auto"):
    """("distro" | "cuda_repo", why) for a branch on a distribution."""
    if requested not in SOURCES:
        raise DriverInputError("preflight_deployment.driver.source: expected one of %s, got %r" % (", ".join(SOURCES), requested))
    info = DISTROS[key]
    native = branch in info["native"]
    if requested == "distro":
        if not native:
            shipped = ", ".join("R%d" % b for b in info["native"]) or "no driver branch"
            raise DriverInputError(
                "%s's own archive has %s usable for R%d; set preflight_deployment.driver.source to cuda_repo (NVIDIA's "
                "repository) or choose one of its branches" % (info["label"], shipped, branch))
        return "distro", "R%d from %s's own archive (driver.source=distro)" % (branch, info["label"])
    if requested == "cuda_repo":
        if package_family(key) == "ubuntu" and branch > UBUNTU_CUDA_REPO_LAST_NAMED_BRANCH:
            raise DriverInputError(
                "NVIDIA's Ubuntu repository renamed its driver packages from R590 on and this role does not "
                "map them yet; use preflight_deployment.driver.source=distro (Canonical's -server packages) if Ubuntu ships R%d"
                % branch)
        return "cuda_repo", "R%d from NVIDIA's CUDA repository (driver.source=cuda_repo)" % branch
    if native:
        return "distro", "R%d is shipped by %s's own archive" % (branch, info["label"])
    if package_family(key) == "ubuntu" and branch > UBUNTU_CUDA_REPO_LAST_NAMED_BRANCH:
        raise DriverInputError(
            "R%d is not taken from Ubuntu's archive by this role and NVIDIA's Ubuntu repository names it "
            "differently; choose R550 or R580" % branch)
    return "cuda_repo", "%s's own archive has no R%d; NVIDIA's CUDA repository is used" % (info["label"], branch)


def _join(names):
    """"A, B and C"."""
    return names[0] if len(names) == 1 else "%s and %s" % (", ".join(names[:-1]), names[-1])


def choose_flavour(requested, required):
    """The kernel-module flavour to install.

    ``requested``: the role variable (auto, proprietary, open). ``required``: what the gate says
    the host's GPUs need (driver_requirements.kernel_module: proprietary, open, either, conflict,
    or None when no GPU could be identified).
    """
    if requested not in FLAVOURS:
        raise DriverInputError("preflight_deployment.driver.kernel_module: expected one of %s, got %r"
                               % (", ".join(FLAVOURS), requested))
    labels = kernel_module_labels()
    proprietary_only = _join(labels["proprietary_only"])
    if required == "conflict":
        raise DriverInputError(
            "the host mixes GPUs that need the proprietary kernel module (%s) with GPUs that "
            "need the open one; no single driver flavour drives both" % ", ".join(labels["proprietary_only"]))
    if requested == "auto":
        if required == "open":
            return "open"
        if required in ("proprietary", "either"):
            return "proprietary"
        raise DriverInputError(
            "the GPUs of this host could not be identified, so the kernel-module flavour cannot be chosen; set "
            "preflight_deployment.driver.kernel_module to proprietary (%s to %s) or open (%s and newer)"
            % (labels["proprietary_ok"][0], labels["proprietary_ok"][-1], labels["open_ok"][0]))
    if requested == "open" and required == "proprietary":
        raise DriverInputError(
            "preflight_deployment.driver.kernel_module=open, but the open GPU kernel modules do not support this host's GPUs "
            "(%s need the proprietary module); use proprietary or auto" % proprietary_only)
    if requested == "proprietary" and required == "open":
        raise DriverInputError(
            "preflight_deployment.driver.kernel_module=proprietary, but this host's GPUs need the open GPU kernel modules; "
            "use open or auto")
    return requested


def packages_for(key, source, branch, flavour, version=None):
    """Package specifications for the package manager.

    apt: "name" or "name=<version>-*" when an exact version is asked for; dnf: the module stream
    "@nvidia-driver:<stream>" and, for an exact version, "name-<version>" entries.
    """
    family = package_family(key)
    if family == "el":
        specs = ["@nvidia-driver:%s" % EL_STREAMS[flavour].format(b=branch)]
        if version:
            specs.extend(name.format(v=version) for name in EL_EXACT[flavour])
        return specs
    names = PACKAGE_SETS[(family, source)][flavour]
    specs = []
    for name in names:
        pinned = name.endswith("=")
        name = name.rstrip("=").format(b=branch)
        specs.append("%s=%s-*" % (name, version) if (pinned and version) else name)
    return specs


def package_names(specs):
    """Bare names of apt/dnf specifications ("nvidia-smi=550.163.01-*" -> "nvidia-smi")."""
    names = []
    for spec in specs:
        if spec.startswith("@"):
            continue
        names.append(spec.split("=", 1)[0])
    return names


def header_packages(key, kernel):
    """Kernel headers for DKMS builds against the running kernel."""
    if not kernel:
        return []
    if not isinstance(kernel, str) or not _KERNEL_RE.match(kernel):
        raise DriverInputError("kernel: expected a kernel release like '6.1.0-28-amd64' (ansible_kernel), got %r"
                               % (kernel,))
    if package_family(key) == "el":
        return ["kernel-devel-%s" % kernel]
    return ["linux-headers-%s" % kernel]


def apt_pin(branch, version=None):
    """The apt_preferences(5) version pattern that keeps the driver on its branch (or version)."""
    return ("%s-*" % version) if version else ("%d.*" % branch)


def cuda_repo(key, architecture, base_url, key_url="", fingerprint=""):
    """URL, key URL and expected fingerprint of NVIDIA's CUDA repository for this host."""
    arch = CUDA_REPO_ARCH.get(str(architecture or "").strip())
    if arch is None:
        raise DriverInputError("NVIDIA's CUDA repository has no packages for the %r architecture" % (architecture,))
    base = str(base_url or "").strip().rstrip("/")
    if not base:
        raise DriverInputError("nvidia_driver_cuda_repo_base_url is empty")
    for name, value in (("nvidia_driver_cuda_repo_base_url", base), ("nvidia_driver_cuda_repo_key_url", key_url)):
        if value and (_CONTROL_RE.search(str(value)) or " " in str(value).strip()):
            raise DriverInputError("%s: expected one URL without spaces or control characters, got %r" % (name, value))
    url = "%s/%s/%s/" % (base, DISTROS[key]["repo_dir"], arch)
    known = cuda_repo_key(key)
    expected = normalize_fingerprint(fingerprint) if fingerprint else known["fingerprint"]
    if expected is None:
        raise DriverInputError(
            "no fingerprint is known for the key of NVIDIA's %s repository (%s); set "
            "nvidia_driver_cuda_repo_key_fingerprint to its full fingerprint, read on a trusted machine with "
            "'gpg --show-keys %s'" % (DISTROS[key]["label"], known["file"], known["file"]))
    return {
        "url": url,
        "key_url": str(key_url).strip() if key_url else url + known["file"],
        "fingerprint": expected,
    }


# ---------------------------------------------------------------------------------------------
# Decisions
# ---------------------------------------------------------------------------------------------


def decide_action(installed_version, branch, version=None, allow_change=False, unmanaged_version=None):
    """What to do with the driver: {"action": install|keep|change|refuse, "msg"}.

    ``installed_version``: the driver version of the installed packages (None: none installed).
    ``unmanaged_version``: a driver that answers (nvidia-smi/NVML) although no driver package is
    installed, e.g. one from NVIDIA's .run installer.
    A different version than the one asked for is changed only with allow_change: an upgrade or
    downgrade is an explicit choice, never the side effect of a re-run.
    """
    wanted = version or ("R%d" % branch)
    if installed_version is None:
        if unmanaged_version:
            return {"action": "refuse",
                    "msg": "driver %s is loaded but no driver package is installed (installed with NVIDIA's .run "
                           "installer?); remove it (nvidia-uninstall) before this role installs %s from packages"
                           % (unmanaged_version, wanted)}
        return {"action": "install", "msg": "no NVIDIA driver installed; installing %s" % wanted}
    if version_matches(installed_version, branch, version):
        return {"action": "keep", "msg": "driver %s installed, as asked (%s)" % (installed_version, wanted)}
    if branch_of(installed_version) == branch:
        what = "an upgrade" if version_tuple(version) > version_tuple(installed_version) else "a downgrade"
        what += " within R%d" % branch
    else:
        what = "a branch change from R%d to R%d" % (branch_of(installed_version), branch)
    if not allow_change:
        return {"action": "refuse",
                "msg": "driver %s is installed but %s is asked for: %s, which this role makes only when "
                       "preflight_deployment.driver.allow_change is true (then it unholds, changes, re-holds and reboots)"
                       % (installed_version, wanted, what)}
    return {"action": "change", "msg": "changing driver %s to %s (%s, preflight_deployment.driver.allow_change)"
                                       % (installed_version, wanted, what)}


def is_container(virtualization_type, virtualization_role):
    """Whether the host is a container (no kernel of its own: no module loading, no reboot)."""
    return (str(virtualization_role or "") == "guest"
            and str(virtualization_type or "").lower() in CONTAINER_TYPES)


def reboot_decision(policy, installed_version, kernel_module_version, nouveau_loaded=False,
                    in_container=False, changed=False):
    """Whether the host needs a reboot, whether it may have one now, and why.

    Needed when nouveau is loaded, or when the loaded NVIDIA kernel module is not the installed
    driver (a new or changed driver, or a module that is not loaded at all). ``changed``: the role
    changed the driver or the nouveau configuration on this run; with policy "always" that alone
    is reason enough. A container never reboots (it has no kernel of its own): the reboot stays
    pending for the real host.
    Returns {"needed", "reboot", "pending", "reasons", "msg"}.
    """
    if policy not in REBOOT_POLICIES:
        raise DriverInputError("nvidia_driver_reboot: expected one of %s, got %r" % (", ".join(REBOOT_POLICIES), policy))
    reasons = []
    if nouveau_loaded and not in_container:
        reasons.append("the nouveau kernel module is loaded")
    if installed_version:
        if not kernel_module_version:
            reasons.append("the NVIDIA kernel module is not loaded (driver %s installed)" % installed_version)
        elif kernel_module_version != installed_version:
            reasons.append("the loaded NVIDIA kernel module is %s but driver %s is installed"
                           % (kernel_module_version, installed_version))
    if policy == "always" and changed and not reasons:
        reasons.append("the driver configuration changed (nvidia_driver_reboot=always)")
    needed = bool(reasons)
    may = policy in ("auto", "always") and not in_container
    reboot = needed and may
    pending = needed and not may
    if not needed:
        msg = "no reboot needed"
    elif reboot:
        msg = "rebooting: " + "; ".join(reasons)
    elif in_container:
        msg = ("reboot pending: %s; this is a container, whose kernel belongs to the host, so the module cannot "
               "be loaded here" % "; ".join(reasons))
    else:
        msg = "reboot pending (nvidia_driver_reboot=never): %s; reboot the host to load the driver" % "; ".join(reasons)
    return {"needed": needed, "reboot": reboot, "pending": pending, "reasons": reasons, "msg": msg}


# ---------------------------------------------------------------------------------------------
# OpenPGP key fingerprints (RFC 4880 / RFC 9580), for checking a downloaded repository key
# ---------------------------------------------------------------------------------------------


def normalize_fingerprint(text):
    """Upper-case hex without spaces or "0x"; raise when it is not 40 or 64 hex digits."""
    value = re.sub(r"\s+", "", str(text or "")).upper()
    if value.startswith("0X"):
        value = value[2:]
    if not re.match(r"^([0-9A-F]{40}|[0-9A-F]{64})$", value):
        raise DriverInputError("expected a full key fingerprint (40 hex digits), got %r" % (text,))
    return value


def dearmor(data):
    """Binary OpenPGP data from ASCII armor (or the input itself when it is not armored)."""
    text = data.decode("ascii", "replace") if isinstance(data, bytes) else data
    if "-----BEGIN PGP" not in text:
        # Text that is not armored stands for its bytes; beyond Latin-1 it can be no binary key at all.
        return data if isinstance(data, bytes) else data.encode("latin-1", "replace"), False
    body = text.split("-----BEGIN PGP", 1)[1]
    lines = body.splitlines()[1:]
    # Skip armor headers (up to the first empty line), stop at the checksum or END line.
    payload = []
    in_headers = True
    for line in lines:
        stripped = line.strip()
        if in_headers:
            if stripped == "":
                in_headers = False
            elif ":" not in stripped:
                in_headers = False
                payload.append(stripped)
            continue
        if stripped.startswith("-----END PGP") or stripped.startswith("="):
            break
        payload.append(stripped)
    try:
        return base64.b64decode("".join(payload)), True
    except (binascii.Error, ValueError):
        raise DriverInputError("the repository key is ASCII-armored but its body is not valid base64")


# The shortest public-key packet body of each version (RFC 9580 5.5.2): version, creation time and
# algorithm (v4); v5/v6 add the four-octet length of the key material.
_KEY_BODY_MIN = {4: 6, 5: 10, 6: 10}
# A v4 fingerprint hashes the packet's length in two octets (RFC 4880 12.2): no v4 key is longer.
_V4_BODY_MAX = 0xFFFF


def _truncated(pos, need, size):
    return DriverInputError("the repository key is truncated or not an OpenPGP key: the packet at byte %d needs "
                            "%d more byte(s), the file ends after %d; download the key again" % (pos, need, size))


def _take(data, pos, count, start):
    """``data[pos:pos + count]``, or DriverInputError naming the packet at ``start`` when the file ends first."""
    chunk = data[pos:pos + count]
    if len(chunk) != count:
        raise _truncated(start, pos + count - len(data), len(data))
    return chunk


def _packet_length(data, pos, header, start):
    """(body length, body position) of the packet whose header octet is at ``start``."""
    if header & 0x40:  # new format
        first = _take(data, pos, 1, start)[0]
        if first < 192:
            return first, pos + 1
        if first < 224:
            return ((first - 192) << 8) + _take(data, pos + 1, 1, start)[0] + 192, pos + 2
        if first == 255:
            return int.from_bytes(_take(data, pos + 1, 4, start), "big"), pos + 5
        raise DriverInputError("the repository key uses partial packet lengths, which keys never do")
    kind = header & 0x03  # old format
    if kind == 3:
        return len(data) - pos, pos
    width = (1, 2, 4)[kind]
    return int.from_bytes(_take(data, pos, width, start), "big"), pos + width


def _packets(data):
    """(tag, body) for each OpenPGP packet of a binary key; DriverInputError for a header that is not
    one, or a packet cut short."""
    pos = 0
    while pos < len(data):
        start, header = pos, data[pos]
        if not header & 0x80:
            raise DriverInputError("the repository key is not an OpenPGP key (bad packet header at byte %d)" % pos)
        tag = header & 0x3F if header & 0x40 else (header >> 2) & 0x0F
        length, pos = _packet_length(data, pos + 1, header, start)
        body = _take(data, pos, length, start)
        pos += length
        yield tag, body


def _invalid_key_packet(version, size, expected):
    return DriverInputError("the repository key has an invalid key packet: a version %d public key of %d byte(s), "
                            "expected %s; download the key again" % (version, size, expected))


def key_fingerprints(data):
    """Fingerprints of the primary keys in an OpenPGP public key file (armored or binary).

    Returns {"fingerprints": [...], "armored": bool}. v4 keys: SHA-1 over 0x99, a two-byte length
    and the public-key packet; v6 keys: SHA-256 over 0x9B, a four-byte length and the packet.
    """
    binary, armored = dearmor(data)
    fingerprints = []
    for tag, body in _packets(bytearray(binary)):
        if tag != 6 or not body:
            continue
        version = body[0]
        if version not in _KEY_BODY_MIN:
            raise DriverInputError("the repository key is an OpenPGP version %d key, which is not supported" % version)
        if len(body) < _KEY_BODY_MIN[version]:
            raise _invalid_key_packet(version, len(body), "at least %d" % _KEY_BODY_MIN[version])
        if version == 4:
            if len(body) > _V4_BODY_MAX:
                raise _invalid_key_packet(version, len(body), "at most %d" % _V4_BODY_MAX)
            digest = hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + bytes(body)).hexdigest()
        else:
            prefix = b"\x9a" if version == 5 else b"\x9b"
            digest = hashlib.sha256(prefix + len(body).to_bytes(4, "big") + bytes(body)).hexdigest()
        fingerprints.append(digest.upper())
    if not fingerprints:
        raise DriverInputError("the repository key file holds no OpenPGP public key")
    return {"fingerprints": fingerprints, "armored": armored}


def check_key(data, expected):
    """{"ok", "fingerprints", "armored", "msg"}: ok when the file holds exactly the expected key."""
    expected = normalize_fingerprint(expected)
    try:
        found = key_fingerprints(data)
    except DriverInputError as exc:
        return {"ok": False, "fingerprints": [], "armored": False, "msg": str(exc)}
    ok = found["fingerprints"] == [expected]
    if ok:
        msg = "repository key %s verified" % expected
    else:
        msg = ("the downloaded repository key has fingerprint(s) %s, expected %s; the key (or a mirror) is not "
               "the one configured: nothing was trusted. Check nvidia_driver_cuda_repo_key_url and "
               "nvidia_driver_cuda_repo_key_fingerprint" % (", ".join(found["fingerprints"]), expected))
    return {"ok": ok, "fingerprints": found["fingerprints"], "armored": found["armored"], "msg": msg}


# ---------------------------------------------------------------------------------------------
# Requests from the role
# ---------------------------------------------------------------------------------------------


def _opt_str(value):
    """A string value, or None for None, "" and the texts "None"/"null" a template may render."""
    if value is None:
        return None
    text = str(value).strip()
    return None if text in ("", "None", "null") else text


def _bool(value):
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1", "on")
    return bool(value)


def _installed(request):
    for key in ("rpm_query", "versionlock_list", "dpkg_query"):
        if request.get(key) is not None and not isinstance(request.get(key), str):
            raise DriverInputError("%s: expected the command's output as text, got %s" % (key, type(request[key]).__name__))
    if _opt_str(request.get("rpm_query")) is not None:
        return parse_rpm_query(request.get("rpm_query"), request.get("versionlock_list") or "")
    return parse_dpkg_query(request.get("dpkg_query") or "")


def _planned_step(request):
    """The preflight plan's driver step (preflight_verdict.steps.driver), checked for what the role needs."""
    step = request.get("step")
    if not isinstance(step, dict):
        raise DriverInputError("step: expected the driver step of the preflight's plan (preflight_verdict.steps.driver), "
                               "got %s: run the preflight role first, in the same play" % type(step).__name__)
    missing = [k for k in ("action", "branch", "kernel_module", "source", "distro", "installed") if k not in step]
    if missing:
        raise DriverInputError("the preflight's driver step has no %s: it was planned without the host's driver packages "
                               "(an older preflight?); run the preflight role of this collection first (nothing was "
                               "changed)" % ", ".join(missing))
    if step["action"] not in _ROLE_ACTIONS:
        raise DriverInputError("the preflight's driver step says %r, expected one of %s"
                               % (step["action"], ", ".join(sorted(_ROLE_ACTIONS))))
    return step


# The plan's driver actions, as this role's package plan names them.
_ROLE_ACTIONS = {"keep": "keep", "install": "install", "replace": "change", "refuse": "refuse"}


def plan(request):
    """How the role carries out the preflight's driver step: packages, pins, repository. Decides
    nothing the step decided (the action, kernel-module flavour and source: _plan.plan_driver);
    refuses with a "stale plan" message when the host is no longer what the step was planned
    from (another distribution, other installed driver packages). Raises DriverInputError."""
    key = distro_key(request.get("distribution"), request.get("distribution_major_version"),
                     request.get("distribution_version"))
    headers = header_packages(key, request.get("kernel"))
    step = _planned_step(request)
    branch = parse_branch(step["branch"])
    version = parse_exact_version(_opt_str(step.get("version")))
    installed = _installed(request)
    installed_version = installed_driver_version(installed)
    stale = []
    if key != step["distro"]:
        stale.append("the plan was made for %s, this host is %s" % (step["distro"], key))
    if installed_version != step["installed"]:
        stale.append("the plan was made when the driver packages carried %s, now they carry %s"
                     % (step["installed"] or "no driver", installed_version or "no driver"))
    if stale:
        raise DriverInputError("stale plan: %s; run the preflight again to plan from the host as it is now (nothing "
                               "was changed)" % "; ".join(stale))
    action = _ROLE_ACTIONS[step["action"]]
    if action != "refuse" and (step["source"] is None or step["kernel_module"] is None):
        raise DriverInputError("the preflight's driver step chose no %s: the plan refused this host; read its reasons "
                               "(nothing was changed)" % ("package source" if step["source"] is None else "kernel module"))
    source, flavour = step["source"], step["kernel_module"]
    # A driver that is kept stays at its installed version: packages added to the set later (or
    # missing after an interrupted run) must come at that version, not the branch's newest.
    effective = version
    if action == "keep" and not version:
        effective = installed_version
    family = DISTROS[key]["family"]
    result = {
        "distro": key,
        "distro_label": DISTROS[key]["label"],
        "family": family,
        "branch": branch,
        "version": version,
        "wanted": version or "R%d" % branch,
        "package_version": effective,
        "source": source,
        "source_why": step.get("source_why"),
        "kernel_module": flavour,
        "packages": packages_for(key, source, branch, flavour, effective) if source and flavour else [],
        "headers": headers,
        "installed_version": installed_version,
        "installed_driver_packages": driver_packages(installed),
        "held_driver_packages": sorted(n for n in driver_packages(installed) if installed[n]["held"]),
        "action": action,
        "action_msg": step.get("why") or "",
        "apt_pin": apt_pin(branch, version) if family == "apt" else None,
        "apt_pin_globs": list(PIN_GLOBS),
        "unattended_blacklist": list(UNATTENDED_BLACKLIST),
        "repo": None,
        "in_container": is_container(request.get("virtualization_type"), request.get("virtualization_role")),
    }
    result["package_names"] = package_names(result["packages"])
    if source == "cuda_repo":
        result["repo"] = cuda_repo(key, request.get("architecture"), request.get("cuda_repo_base_url"),
                                   _opt_str(request.get("cuda_repo_key_url")),
                                   _opt_str(request.get("cuda_repo_key_fingerprint")))
    if family == "dnf" and flavour:
        result["el_stream"] = EL_STREAMS[flavour].format(b=branch)
    return result


def assess(request):
    """After installation: what to hold, whether the right driver is installed, whether to reboot."""
    branch = parse_branch(request.get("branch"))
    version = parse_exact_version(_opt_str(request.get("version")))
    installed = _installed(request)
    installed_version = installed_driver_version(installed)
    names = driver_packages(installed)
    in_container = _bool(request.get("in_container"))
    problems = []
    if _bool(request.get("expect_installed")) and not version_matches(installed_version, branch, version):
        problems.append("after installation the driver packages carry %s, not %s (a transitional package or a "
                        "repository without this version?)"
                        % (installed_version or "no driver version", version or "R%d" % branch))
    decision = reboot_decision(_opt_str(request.get("reboot_policy")) or "auto", installed_version,
                               _opt_str(request.get("kernel_module_version")), _bool(request.get("nouveau_loaded")),
                               in_container, _bool(request.get("changed")))
    return {
        "installed_version": installed_version,
        "driver_packages": names,
        "to_hold": [n for n in names if not installed[n]["held"]],
        "held": [n for n in names if installed[n]["held"]],
        "problems": problems,
        "reboot": decision,
    }


def check_key_request(request):
    try:
        data = base64.b64decode(request.get("content_b64") or "", validate=True)
    except (binascii.Error, ValueError, TypeError):
        raise DriverInputError("the repository key content is not base64")
    return check_key(data, request.get("fingerprint"))


COMMANDS = {"plan": plan, "assess": assess, "check_key": check_key_request}


def run(request):
    """Answer one request dict {"command": ..., ...}: the command's result, or {"error": msg}."""
    if not isinstance(request, dict) or request.get("command") not in COMMANDS:
        return {"error": "expected a request with command one of %s" % ", ".join(sorted(COMMANDS))}
    try:
        return COMMANDS[request["command"]](request)
    except DriverInputError as exc:
        return {"error": str(exc)}
