# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The host's driver packages as host_facts reads them (plugins/module_utils/probes/_packages.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.probes import _packages as P

# dpkg-query of a Debian 13 host with Debian's nvidia-driver 550.163.01, one package held.
DPKG = (
    "install installed libc6:amd64 2.41-12\n"
    "hold installed nvidia-kernel-dkms 550.163.01-2\n"
    "install installed libnvidia-ml1:amd64 550.163.01-2\n"
    "deinstall config-files nvidia-smi 535.247.01-1~deb12u1\n"
)
RPM = "kernel 0:5.14.0-570.el9\nkmod-nvidia-latest-dkms 3:550.163.01-1.el9\nnvidia-driver 3:550.163.01-1.el9\n"
LOCKS = "# added by dnf versionlock\nkmod-nvidia-latest-dkms-3:550.163.01-1.el9.*\n"


def fake_host(tools, answers, files=None):
    """(run_command, which, read_text) over a dict of tool -> (rc, stdout, stderr); records argv."""
    calls = []

    def run_command(argv):
        calls.append(list(argv))
        return answers[argv[0]]

    def which(name):
        return "/usr/bin/" + name if name in tools else None

    def read_text(path):
        if files is None or path not in files:
            raise IOError("no such file: %s" % path)
        return files[path]

    return run_command, which, read_text, calls


def test_dpkg_listing_gives_the_installed_driver_and_its_holds():
    run, which, read, calls = fake_host({"dpkg-query", "rpm"}, {"dpkg-query": (0, DPKG, "")})
    facts = P.read_driver_packages(run, which, read)
    assert facts == {"manager": "dpkg", "installed_version": "550.163.01", "error": None,
                     "packages": ["libnvidia-ml1", "nvidia-kernel-dkms"], "held": ["nvidia-kernel-dkms"]}
    # dpkg is asked first even with rpm installed; a removed package's leftover configuration is not installed
    assert calls == [P.DPKG_QUERY_ARGV]


def test_rpm_listing_reads_the_version_locks():
    run, which, read, calls = fake_host({"rpm"}, {"rpm": (0, RPM, "")}, {P.VERSIONLOCK_LIST: LOCKS})
    facts = P.read_driver_packages(run, which, read)
    assert (facts["manager"], facts["installed_version"]) == ("rpm", "550.163.01")
    assert facts["packages"] == ["kmod-nvidia-latest-dkms", "nvidia-driver"]
    assert facts["held"] == ["kmod-nvidia-latest-dkms"] and calls == [P.RPM_QUERY_ARGV]
    # without the lock file nothing counts as held
    run, which, read, unused_calls = fake_host({"rpm"}, {"rpm": (0, RPM, "")})
    assert P.read_driver_packages(run, which, read)["held"] == []


def test_no_package_manager_and_no_driver_package():
    run, which, read, calls = fake_host(set(), {})
    assert P.read_driver_packages(run, which, read) == {
        "manager": None, "installed_version": None, "packages": [], "held": [], "error": None}
    assert calls == []
    run, which, read, unused_calls = fake_host({"dpkg-query"}, {"dpkg-query": (0, "install installed libc6 2.41-12\n", "")})
    facts = P.read_driver_packages(run, which, read)
    assert (facts["installed_version"], facts["packages"], facts["error"]) == (None, [], None)


@pytest.mark.parametrize("answer,expected", [
    ((2, "", "dpkg-query: error: parsing file '/var/lib/dpkg/status' near line 12\n"),
     "dpkg exited 2: dpkg-query: error: parsing file '/var/lib/dpkg/status' near line 12"),
    ((1, "", ""), "dpkg exited 1: no output"),
])
def test_a_failed_listing_is_reported_not_read_as_no_driver(answer, expected):
    """A broken package database must not look like "no driver installed" (the plan would install over it)."""
    run, which, read, unused_calls = fake_host({"dpkg-query"}, {"dpkg-query": answer})
    facts = P.read_driver_packages(run, which, read)
    assert facts["error"] == expected and facts["installed_version"] is None


def test_hostile_listing_lines_are_skipped():
    text = "garbage\n\x00\x00\ninstall installed nvidia-smi 5\uff15\uff150.1-1\ninstall installed nvidia-smi\n"
    run, which, read, unused_calls = fake_host({"dpkg-query"}, {"dpkg-query": (0, text, "")})
    facts = P.read_driver_packages(run, which, read)
    assert facts["packages"] == ["nvidia-smi"] and facts["installed_version"] is None
