"""Unit tests for plugins/module_utils/_host.py (CPU flags, free disk, container stack)."""

import collections

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils import _host

# Shape of /proc/cpuinfo on a dual-socket Broadwell Xeon (the X99/C612 class of the reference
# deployment): AVX2 and FMA, no AVX-512. Two logical CPUs are enough for the parser.
BROADWELL = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz
physical id\t: 0
flags\t\t: fpu vme sse4_2 avx avx2 fma f16c bmi2
processor\t: 1
model name\t: Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz
physical id\t: 1
flags\t\t: fpu vme sse4_2 avx avx2 fma f16c
"""

SKYLAKE_SP = """processor\t: 0
model name\t: Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz
physical id\t: 0
flags\t\t: sse4_2 avx avx2 fma f16c avx512f avx512bw avx512_vnni
"""


def test_cpuinfo_broadwell_has_avx2_not_avx512():
    cpu = _host.parse_cpuinfo(BROADWELL)
    assert cpu["model"].startswith("Intel(R) Xeon(R) CPU E5-2680 v4")
    assert cpu["logical_cpus"] == 2
    assert cpu["sockets"] == 2
    assert cpu["isa"]["avx2"] is True
    assert cpu["isa"]["avx512f"] is False


def test_cpuinfo_flags_are_the_intersection():
    # bmi2 is on CPU 0 only: a process may land on CPU 1, so it is not reported.
    assert "bmi2" not in _host.parse_cpuinfo(BROADWELL)["flags"]


def test_cpuinfo_avx512():
    assert _host.parse_cpuinfo(SKYLAKE_SP)["isa"]["avx512f"] is True


def test_cpuinfo_empty_text():
    cpu = _host.parse_cpuinfo("")
    assert cpu["flags"] == [] and cpu["logical_cpus"] == 0 and cpu["sockets"] == 0
    assert not any(cpu["isa"].values())


StatVfs = collections.namedtuple("StatVfs", "f_bavail f_frsize f_blocks")


def test_disk_free_measures_nearest_existing_parent():
    existing = {"/", "/srv"}
    seen = []

    def statvfs(path):
        seen.append(path)
        return StatVfs(f_bavail=2 * 1024 * 256, f_frsize=4096, f_blocks=8 * 1024 * 256)

    result = _host.disk_free("/srv/models/llama", statvfs=statvfs, exists=existing.__contains__)
    assert seen == ["/srv"]
    assert result == {"path": "/srv/models/llama", "measured_at": "/srv", "exists": False,
                      "free_mib": 2048, "total_mib": 8192}


def test_disk_free_existing_path():
    result = _host.disk_free("/", statvfs=lambda p: StatVfs(1, 1024 * 1024, 3), exists=lambda p: True)
    assert result["exists"] is True and result["free_mib"] == 1 and result["total_mib"] == 3


def _runner(answers):
    def run(argv):
        return answers[argv[0]]
    return run


def test_container_stack_all_present():
    answers = {
        "/usr/bin/docker": (0, "26.1.5|26.1.5\n", ""),
        "/usr/bin/nvidia-container-cli": (0, "cli-version: 1.17.8\nlib-version: 1.17.8\n", ""),
        "/usr/bin/nvidia-ctk": (0, "NVIDIA Container Toolkit CLI version 1.17.8\ncommit: abc\n", ""),
    }
    result = _host.container_stack(_runner(answers), lambda name: "/usr/bin/" + name)
    assert result == {
        "docker_client_version": "26.1.5",
        "docker_server_version": "26.1.5",
        "docker_error": None,
        "nvidia_container_cli_version": "1.17.8",
        "nvidia_ctk_version": "1.17.8",
    }


def test_container_stack_engine_down():
    answers = {"/usr/bin/docker": (1, "20.10.24|", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock."
                                   " Is the docker daemon running?\n")}
    result = _host.container_stack(_runner(answers), lambda name: "/usr/bin/docker" if name == "docker" else None)
    assert result["docker_client_version"] == "20.10.24"
    assert result["docker_server_version"] is None
    assert "Is the docker daemon running?" in result["docker_error"]
    assert result["nvidia_container_cli_version"] is None


def test_container_stack_nothing_installed():
    result = _host.container_stack(_runner({}), lambda name: None)
    assert set(result.values()) == {None}


@pytest.mark.parametrize("text,expected", [("Docker version 20.10.24+dfsg1, build 297e128", "20.10.24"),
                                           ("version: 1.14.3", "1.14.3"), ("", None), ("no digits", None)])
def test_first_version(text, expected):
    assert _host.first_version(text) == expected
