# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# PRIVATE to the labfleet.vllm collection: no compatibility promise for other users.
"""Host facts the later checks need besides the GPUs: CPU flags, free disk, container stack.

Pure functions. Commands are run through a ``run_command(argv) -> (rc, out, err)`` callable and
files are read below a ``root`` so tests can replay recorded answers.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

# Instruction-set extensions worth reporting: prebuilt inference images are compiled for some of
# them, and a host without them dies with "Illegal instruction" while loading.
CPU_FLAGS_OF_INTEREST = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "amx_tile")

_VERSION_RE = re.compile(r"(\d+\.\d+(?:\.\d+)?)")


def parse_cpuinfo(text):
    """Return ``{model, flags, sockets, logical_cpus}`` from /proc/cpuinfo text.

    ``flags`` is the intersection of every processor's flags, since a process may be scheduled on
    any of them.
    """
    flag_sets = []
    model = None
    physical_ids = set()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        value = value.strip()
        if key == "flags":
            flag_sets.append(set(value.split()))
        elif key == "model name" and model is None:
            model = value
        elif key == "physical id":
            physical_ids.add(value)
    flags = set.intersection(*flag_sets) if flag_sets else set()
    return {
        "model": model,
        "flags": sorted(flags),
        "logical_cpus": len(flag_sets),
        "sockets": len(physical_ids) or (1 if flag_sets else 0),
        "isa": dict((name, name in flags) for name in CPU_FLAGS_OF_INTEREST),
    }


def nearest_existing(path, exists=os.path.exists):
    """The path itself when it exists, else its closest existing parent ("/" at worst)."""
    path = os.path.abspath(path)
    while not exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def disk_free(path, statvfs=os.statvfs, exists=os.path.exists):
    """Free and total space (MiB) of the filesystem that holds ``path`` (or would hold it)."""
    probe = nearest_existing(path, exists)
    st = statvfs(probe)
    mib = 1024 * 1024
    return {
        "path": path,
        "measured_at": probe,
        "exists": probe == os.path.abspath(path),
        "free_mib": st.f_bavail * st.f_frsize // mib,
        "total_mib": st.f_blocks * st.f_frsize // mib,
    }


def first_version(text):
    match = _VERSION_RE.search(text or "")
    return match.group(1) if match else None


def container_stack(run_command, which):
    """Versions of the Docker engine and nvidia-container-toolkit, each null when absent.

    ``which(name)`` returns an executable's path or None.
    """
    result = {
        "docker_client_version": None,
        "docker_server_version": None,
        "docker_error": None,
        "nvidia_container_cli_version": None,
        "nvidia_ctk_version": None,
    }
    docker = which("docker")
    if docker:
        rc, out, err = run_command([docker, "version", "--format", "{{.Client.Version}}|{{.Server.Version}}"])
        client, _sep, server = (out or "").strip().partition("|")
        result["docker_client_version"] = first_version(client)
        result["docker_server_version"] = first_version(server)
        if rc != 0:
            lines = (err or out or "").strip().splitlines()
            result["docker_error"] = lines[-1] if lines else "docker version exited %d" % rc
    cli = which("nvidia-container-cli")
    if cli:
        rc, out, _err = run_command([cli, "--version"])
        if rc == 0:
            # "cli-version: 1.17.8" or "version: 1.14.3" on older releases
            match = re.search(r"version:\s*(\d+\.\d+\.\d+)", out or "")
            result["nvidia_container_cli_version"] = match.group(1) if match else first_version(out)
    ctk = which("nvidia-ctk")
    if ctk:
        rc, out, _err = run_command([ctk, "--version"])
        if rc == 0:
            result["nvidia_ctk_version"] = first_version(out)
    return result
