# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release.
"""The host's installed NVIDIA driver packages, as the package manager lists them (read-only).

Parsers of ``dpkg-query`` and ``rpm -qa`` listings and of dnf's version locks, which packages
belong to the driver, and which driver version they carry. labfleet.vllm.host_facts reads them
for the preflight (the plan decides the driver step from them, decisions/_plan.py); the
nvidia_driver role's package plan (decisions/_driver.py) reads them again just before it
changes anything, to check that the host is still what the plan was made from.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# Packages that belong to the driver: held (dpkg) / version-locked (dnf) after installation and
# kept away from unattended upgrades. Regular expressions matched at the start of the name.
DRIVER_PACKAGE_PATTERNS = (
    r"nvidia",
    r"libnvidia",
    r"cuda-drivers",
    r"libcuda1($|:)",
    r"firmware-nvidia",
    r"xserver-xorg-video-nvidia",
    r"libxnvctrl",
    r"linux-(modules|objects|signatures)-nvidia",
    r"kmod-nvidia",
)
# Packages whose version is the driver's version, in order of preference: the installed driver
# version is read from the first one present.
VERSION_ANCHORS = (
    r"nvidia-kernel-dkms", r"nvidia-open-kernel-dkms", r"nvidia-kernel-open-dkms",
    r"nvidia-dkms-\d+(-server)?(-open)?", r"nvidia-headless-no-dkms-\d+", r"kmod-nvidia.*",
    r"nvidia-driver-cuda", r"libnvidia-ml1", r"libnvidia-compute-\d+(-server)?", r"nvidia-smi",
    r"nvidia-utils-\d+(-server)?", r"cuda-drivers-\d+", r"nvidia-driver",
)

_UPSTREAM_RE = re.compile(r"^(?:\d{1,9}:)?(\d{3}\.\d{1,3}(?:\.\d{1,3})?)(?:[-~+][^\x00-\x1f\x7f]*)?\Z", re.ASCII)


def upstream_version(package_version):
    """The driver version inside a package version, or None.

    "550.163.01-2" (Debian), "550.163.01-0ubuntu0.24.04.1" (Ubuntu), "3:550.163.01-1.el9" (EL),
    "1:550.54.14-1" -> "550.163.01" / "550.54.14"; "20240109+1" -> None.
    """
    if not isinstance(package_version, str):
        return None
    match = _UPSTREAM_RE.match(package_version.strip())
    return match.group(1) if match else None


def parse_dpkg_query(text):
    """{name: {"version", "held"}} of installed packages.

    Input: ``dpkg-query -W -f '${db:Status-Want} ${db:Status-Status} ${binary:Package} ${Version}\\n'``.
    The architecture qualifier (":amd64") is dropped.
    """
    packages = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) != 4:
            continue
        want, status, name, version = parts
        if status not in ("installed", "half-configured", "unpacked", "triggers-awaited", "triggers-pending"):
            continue
        packages[name.split(":", 1)[0]] = {"version": version, "held": want == "hold"}
    return packages


def parse_rpm_query(text, locked_text=""):
    """{name: {"version", "held"}} from ``rpm -qa --qf '%{NAME} %{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n'``.

    ``locked_text``: ``dnf versionlock list`` output; a package listed there counts as held.
    """
    locked = set()
    for line in (locked_text or "").splitlines():
        entry = line.strip()
        match = re.match(r"^([A-Za-z0-9_.+-]+?)-(?:\d+:)?[0-9][^-]*-[^-]+$", entry)
        if match:
            locked.add(match.group(1))
    packages = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        name, version = parts
        packages[name] = {"version": version, "held": name in locked}
    return packages


def is_driver_package(name):
    return any(re.match(pattern, name) for pattern in DRIVER_PACKAGE_PATTERNS)


def driver_packages(installed):
    """Sorted names of the installed packages that belong to the driver."""
    return sorted(name for name in installed if is_driver_package(name))


def installed_driver_version(installed):
    """The driver version the installed packages carry, or None."""
    for anchor in VERSION_ANCHORS:
        for name in sorted(installed):
            if re.match(r"^%s\Z" % anchor, name, re.ASCII):
                version = upstream_version(installed[name]["version"])
                if version:
                    return version
    return None


# What host_facts runs: the listing commands and dnf's version-lock file.
DPKG_QUERY_ARGV = ["dpkg-query", "-W", "-f", "${db:Status-Want} ${db:Status-Status} ${binary:Package} ${Version}\n"]
RPM_QUERY_ARGV = ["rpm", "-qa", "--qf", "%{NAME} %{EPOCHNUM}:%{VERSION}-%{RELEASE}\n"]
VERSIONLOCK_LIST = "/etc/dnf/plugins/versionlock.list"


def read_driver_packages(run_command, which, read_text=None, versionlock_path=VERSIONLOCK_LIST):
    """The driver packages the host's package manager lists.

    ``run_command(argv) -> (rc, stdout, stderr)``; ``which(name) -> path or None``;
    ``read_text(path) -> text`` (raises OSError when absent). Returns {"manager" (dpkg | rpm |
    None: neither found), "installed_version" (the driver version the packages carry, or None),
    "packages" (sorted driver package names), "held" (those held or version-locked), "error"
    (why the listing failed, or None)}. dpkg is asked first: a Debian host with rpm installed
    still manages its driver with dpkg.
    """
    out = {"manager": None, "installed_version": None, "packages": [], "held": [], "error": None}
    if which("dpkg-query"):
        out["manager"] = "dpkg"
        rc, stdout, stderr = run_command(DPKG_QUERY_ARGV)
        installed = parse_dpkg_query(stdout) if rc == 0 else None
    elif which("rpm"):
        out["manager"] = "rpm"
        rc, stdout, stderr = run_command(RPM_QUERY_ARGV)
        locks = ""
        if read_text is not None:
            try:
                locks = read_text(versionlock_path)
            except (IOError, OSError, ValueError):
                locks = ""
        installed = parse_rpm_query(stdout, locks) if rc == 0 else None
    else:
        return out
    if installed is None:
        lines = (stderr or stdout or "").strip().splitlines()
        out["error"] = "%s exited %s: %s" % (out["manager"], rc, lines[-1][:200] if lines else "no output")
        return out
    names = driver_packages(installed)
    out.update(installed_version=installed_driver_version(installed), packages=names,
               held=[n for n in names if installed[n]["held"]])
    return out
