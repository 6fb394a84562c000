"""The host_facts module end to end, with its arguments patched in as Ansible would pass them."""

import json

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.labfleet.vllm.plugins.modules import host_facts


def run_module(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            host_facts.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def test_reads_cpu_disk_and_container(tmp_path, capsys):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: avx avx2 fma\n")
    rc, result = run_module(capsys, {
        "cpuinfo_path": str(cpuinfo),
        "disk_paths": {"model": str(tmp_path / "not" / "yet"), "here": str(tmp_path)},
        "_ansible_check_mode": True,
    })
    assert rc == 0
    assert result["changed"] is False
    facts = result["ansible_facts"]["labfleet_host"]
    assert facts["cpu"]["model"] == "Test CPU"
    assert facts["cpu"]["isa"]["avx2"] is True and facts["cpu"]["isa"]["avx512f"] is False
    assert facts["disk"]["model"]["measured_at"] == str(tmp_path)
    assert facts["disk"]["model"]["exists"] is False
    assert facts["disk"]["here"]["exists"] is True
    assert facts["disk"]["here"]["free_mib"] <= facts["disk"]["here"]["total_mib"]
    assert set(facts["container"]) >= {"docker_server_version", "nvidia_container_cli_version", "toolkit_version",
                                       "toolkit_config", "nvidia_runtime_mode", "docker_default_runtime",
                                       "docker_cdi_enabled", "cdi_specs"}
    assert facts["container"]["toolkit_config"]["path"] == "/etc/nvidia-container-runtime/config.toml"
    # This machine's own package database (Debian: dpkg): read, never changed.
    packages = facts["driver_packages"]
    assert set(packages) == {"manager", "installed_version", "packages", "held", "error"}
    assert packages["manager"] in ("dpkg", "rpm", None) and packages["error"] is None


def test_relative_disk_path_is_refused_with_a_fix(tmp_path, capsys):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("")
    rc, result = run_module(capsys, {"cpuinfo_path": str(cpuinfo), "disk_paths": {"model": "models"}})
    assert rc == 1
    assert result["failed"] is True
    assert "disk_paths.model must be an absolute path" in result["msg"]


def test_unreadable_cpuinfo_says_what_to_fix(tmp_path, capsys):
    rc, result = run_module(capsys, {"cpuinfo_path": str(tmp_path / "missing")})
    assert rc == 1
    assert "cpuinfo_path" in result["msg"]
