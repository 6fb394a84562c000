# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for the labfleet.vllm.gpu_facts module: main() with patched arguments, and the probe
run against the fake nvidia-smi (tests/fake_gpu) so the fake and the parser cannot drift apart."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess
import sys

import pytest
import yaml

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args  # ansible-core >= 2.19 (pinned)

from ansible_collections.labfleet.vllm.plugins.module_utils.probes import _gpu
from ansible_collections.labfleet.vllm.plugins.modules import gpu_facts

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
FAKE_SMI = os.path.join(REPO, "tests", "fake_gpu", "nvidia-smi")
SCENARIOS = os.path.join(REPO, "tests", "fake_gpu", "scenarios")
GPU_FIXTURES = os.path.join(REPO, "tests", "unit", "fixtures", "gpu")


class ExitJson(Exception):
    pass


class FailJson(Exception):
    pass


def _exit_json(self, **kwargs):
    raise ExitJson(kwargs)


def _fail_json(self, **kwargs):
    kwargs["failed"] = True
    raise FailJson(kwargs)


def module_args(args):
    """Context manager exposing args to AnsibleModule."""
    return patch_module_args(args)


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A host with no GPU, no driver and no pynvml; tests add what they need."""
    sysfs = tmp_path / "sys" / "bus" / "pci" / "devices"
    sysfs.mkdir(parents=True)
    monkeypatch.setattr(_gpu, "DEFAULT_SYSFS_ROOT", str(tmp_path / "sys"))
    monkeypatch.setattr(_gpu, "DEFAULT_PROC_VERSION_PATH", str(tmp_path / "proc_version"))
    monkeypatch.setattr(_gpu, "DEFAULT_LIB_ROOT", str(tmp_path / "root"))
    monkeypatch.setattr(_gpu, "import_pynvml", lambda: None)
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", _exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", _fail_json)
    state = {"calls": [], "answers": {}, "bin": None, "timeout_bin": None}

    def run_command(self, args, **kwargs):
        state["calls"].append(list(args))
        if state["timeout_bin"] and args[0] == state["timeout_bin"]:
            args = args[3:]   # timeout --kill-after=5 N <argv>
        key = "header" if len(args) == 1 else ("topo" if args[1] == "topo" else "query")
        return state["answers"].get(key, (1, "", "unexpected call"))

    def get_bin_path(self, name, required=False, opt_dirs=None):
        assert name in ("nvidia-smi", "timeout")
        return state["bin"] if name == "nvidia-smi" else state["timeout_bin"]

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", get_bin_path)
    return state


def run_main(args):
    with module_args(args):
        with pytest.raises((ExitJson, FailJson)) as caught:
            gpu_facts.main()
    return caught.value.args[0]


def fixture_text(case, name):
    with open(os.path.join(GPU_FIXTURES, case, name)) as handle:
        return handle.read()


def v100_answers():
    return {
        "query": (0, fixture_text("v100x2_pcie_550", "query.csv"), ""),
        "header": (0, fixture_text("v100x2_pcie_550", "nvidia-smi.txt"), ""),
        "topo": (0, fixture_text("v100x2_pcie_550", "topo.txt"), ""),
    }


# --------------------------------------------------------------------------------------------
# main()
# --------------------------------------------------------------------------------------------

def test_main_two_v100(host):
    host["bin"] = "/usr/bin/nvidia-smi"
    host["answers"] = v100_answers()
    result = run_main({})
    assert result["changed"] is False
    assert "failed" not in result
    nvidia = result["ansible_facts"]["nvidia"]
    assert nvidia["state"] == "ok" and nvidia["present"] is True and nvidia["count"] == 2
    assert nvidia["gpus"][1]["compute_capability"] == "7.0"
    assert nvidia["topology"]["pairs"] == [{"a": 0, "b": 1, "link": "SYS"}]
    queried = host["calls"][0]
    assert queried[0] == "/usr/bin/nvidia-smi"
    assert queried[1].startswith("--query-gpu=index,name,")
    assert queried[2] == "--format=csv,noheader,nounits"


def test_main_bounds_each_call_with_timeout(host):
    host["bin"] = "/usr/bin/nvidia-smi"
    host["timeout_bin"] = "/usr/bin/timeout"
    host["answers"] = v100_answers()
    result = run_main({"timeout": 20})
    assert result["ansible_facts"]["nvidia"]["state"] == "ok"
    assert host["calls"] and all(call[:3] == ["/usr/bin/timeout", "--kill-after=5", "20"] for call in host["calls"])


def test_main_hung_nvidia_smi_is_a_probe_error_that_says_so(host):
    host["bin"] = "/usr/bin/nvidia-smi"
    host["timeout_bin"] = "/usr/bin/timeout"
    host["answers"] = {"query": (124, "", ""), "header": (124, "", ""), "topo": (124, "", "")}
    result = run_main({"timeout": 7})
    nvidia = result["ansible_facts"]["nvidia"]
    assert "failed" not in result
    assert nvidia["state"] == "probe_error"
    assert "did not answer within 7 s" in nvidia["msg"]


@pytest.mark.parametrize("value", [0, -1, -0.5, float("nan"), float("inf"), float("-inf"), 3601, "1e400", 10 ** 400])
def test_main_timeout_without_a_finite_positive_bound_is_refused(host, value):
    """A negative timeout used to mean "no limit"; 0, NaN and infinities are refused too (issue 13)."""
    host["bin"] = "/usr/bin/nvidia-smi"
    host["timeout_bin"] = "/usr/bin/timeout"
    host["answers"] = v100_answers()
    result = run_main({"timeout": value})
    assert result["failed"] is True
    assert result["msg"].startswith("timeout must be a number of seconds greater than 0 and at most 3600")
    assert host["calls"] == []


def test_main_fractional_timeout_reaches_coreutils(host):
    host["bin"] = "/usr/bin/nvidia-smi"
    host["timeout_bin"] = "/usr/bin/timeout"
    host["answers"] = v100_answers()
    result = run_main({"timeout": 2.5})
    assert result["ansible_facts"]["nvidia"]["state"] == "ok"
    assert all(call[:3] == ["/usr/bin/timeout", "--kill-after=5", "2.5"] for call in host["calls"])


def test_main_without_coreutils_timeout_says_the_calls_are_unbounded(host):
    host["bin"] = "/usr/bin/nvidia-smi"
    host["answers"] = v100_answers()
    nvidia = run_main({})["ansible_facts"]["nvidia"]
    assert nvidia["state"] == "ok"
    assert nvidia["probes"][-1]["outcome"] == "unbounded" and "coreutils" in nvidia["probes"][-1]["detail"]


def test_main_check_mode_reads_the_same(host):
    host["bin"] = "/usr/bin/nvidia-smi"
    host["answers"] = v100_answers()
    normal = run_main({})
    host["calls"][:] = []
    checked = run_main({"_ansible_check_mode": True})
    assert checked == normal
    # only read-only calls: the query, the banner and the topology
    assert [call[1:2] for call in host["calls"]] == [[host["calls"][0][1]], [], ["topo"]]


def test_main_one_gpu_lost_is_a_state_not_a_failure(host):
    host["bin"] = "/usr/bin/nvidia-smi"
    lost_line = "Unable to determine the device handle for GPU 0000:3B:00.0: GPU is lost.  Reboot the system to recover this GPU\n"
    rows = fixture_text("v100x2_pcie_550", "query.csv").splitlines()
    host["answers"] = {"query": (15, lost_line + rows[1] + "\n", ""), "header": (15, lost_line, "")}
    result = run_main({})
    assert "failed" not in result and result["changed"] is False
    nvidia = result["ansible_facts"]["nvidia"]
    assert nvidia["state"] == "gpu_lost" and nvidia["present"] is False
    assert nvidia["count"] == 1 and nvidia["gpus"][0]["pci_bus_id"] == "0000:d8:00.0"
    assert nvidia["lost_gpus"] == [{"bus_id": "0000:3b:00.0", "index": 0, "source": "nvidia_smi",
                                    "message": "GPU is lost.  Reboot the system to recover this GPU"}]
    assert "reboot the host" in nvidia["msg"]


def test_main_no_gpu_no_driver(host):
    result = run_main({})
    nvidia = result["ansible_facts"]["nvidia"]
    assert nvidia["state"] == "no_gpu" and nvidia["present"] is False and nvidia["backend"] == "pci"
    assert host["calls"] == []


def test_main_forced_nvml_without_pynvml_fails(host):
    result = run_main({"backend": "nvml"})
    assert result["failed"] is True
    assert "nvidia-ml-py" in result["msg"]


def test_main_forced_nvidia_smi_missing_fails(host):
    result = run_main({"backend": "nvidia_smi"})
    assert result["failed"] is True
    assert "nvidia-smi was not found" in result["msg"]


def test_main_forced_nvidia_smi_bad_path_fails(host, tmp_path):
    result = run_main({"backend": "nvidia_smi", "nvidia_smi": str(tmp_path / "nope")})
    assert result["failed"] is True
    assert str(tmp_path / "nope") in result["msg"]


def test_main_forced_pci_without_sysfs_fails(host, monkeypatch, tmp_path):
    monkeypatch.setattr(_gpu, "DEFAULT_SYSFS_ROOT", str(tmp_path / "nosys"))
    result = run_main({"backend": "pci"})
    assert result["failed"] is True
    assert "bus/pci/devices" in result["msg"]


def test_main_auto_with_bad_path_is_a_state(host, tmp_path):
    result = run_main({"nvidia_smi": str(tmp_path / "nope")})
    nvidia = result["ansible_facts"]["nvidia"]
    assert "failed" not in result
    assert nvidia["state"] == "no_gpu"
    assert nvidia["probes"][0]["detail"].endswith("is not an executable file")


def test_main_invalid_choice_fails(host):
    result = run_main({"backend": "cuda"})
    assert result["failed"] is True
    assert "backend" in result["msg"]


def test_main_unexpected_error_is_probe_error(host, monkeypatch):
    def explode(**kwargs):
        raise RuntimeError("boom")
    monkeypatch.setattr(gpu_facts, "probe", explode)
    result = run_main({})
    nvidia = result["ansible_facts"]["nvidia"]
    assert nvidia["state"] == "probe_error" and "boom" in nvidia["msg"]
    assert set(nvidia) == set(_gpu.base_facts())


# --------------------------------------------------------------------------------------------
# Documentation matches the code
# --------------------------------------------------------------------------------------------

def test_documentation_matches_argument_spec():
    doc = yaml.safe_load(gpu_facts.DOCUMENTATION)
    options = doc["options"]
    assert set(options) == set(gpu_facts.ARGUMENT_SPEC)
    for name, spec in gpu_facts.ARGUMENT_SPEC.items():
        assert options[name]["type"] == spec["type"]
        assert options[name].get("default") == spec.get("default")
        assert options[name].get("choices") == spec.get("choices")
    assert str(doc["version_added"]) == "0.1.0"
    yaml.safe_load(gpu_facts.EXAMPLES)


def test_return_documents_every_fact():
    ret = yaml.safe_load(gpu_facts.RETURN)
    nvidia = ret["ansible_facts"]["contains"]["nvidia"]["contains"]
    assert set(nvidia) == set(_gpu.base_facts())
    assert set(nvidia["gpus"]["contains"]) == set(_gpu.new_gpu("pci"))
    assert set(nvidia["state"]["choices"]) == set(_gpu.STATES)
    assert set(nvidia["lost_gpus"]["contains"]) == set(_gpu.new_lost(None, None, "", "pci"))
    for name, entry in nvidia.items():
        assert {"description", "returned", "type", "sample"} <= set(entry), name
    for name, entry in nvidia["gpus"]["contains"].items():
        assert {"description", "returned", "type", "sample"} <= set(entry), name


# --------------------------------------------------------------------------------------------
# The fake nvidia-smi (used by Molecule) against the real parser
# --------------------------------------------------------------------------------------------

def fake_runner(scenario):
    env = dict(os.environ, LABFLEET_FAKE_GPU_DIR=os.path.join(SCENARIOS, scenario))

    def run(argv):
        proc = subprocess.Popen([sys.executable, FAKE_SMI] + list(argv[1:]), env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
        out, err = proc.communicate()
        return proc.returncode, out, err
    return run


def probe_fake(tmp_path, scenario):
    return _gpu.probe(run_command=fake_runner(scenario), nvidia_smi="nvidia-smi", nvml_loader=lambda: None,
                      sysfs_root=str(tmp_path), proc_version_path=str(tmp_path / "none"), lib_root=str(tmp_path))


FAKE_EXPECT = {
    "v100x2_pcie": dict(state="ok", present=True, count=2, nvlink=False, driver_version="550.54.14",
                        cuda_driver_version="12.4"),
    "r590_v100": dict(state="ok", present=True, count=2, nvlink=False, driver_version="590.44.01",
                      cuda_driver_version="13.1"),
    "p100": dict(state="ok", present=True, count=1, driver_version="535.183.01", cuda_driver_version="12.2"),
    "r470_v100": dict(state="ok", present=True, count=2, driver_version="470.182.03", cuda_driver_version="11.4"),
    "no_gpu": dict(state="no_gpu", present=False, count=0, backend="nvidia_smi"),
    "not_loaded": dict(state="driver_not_loaded", present=False, count=0),
    "mismatch": dict(state="driver_library_mismatch", present=False, driver_library_mismatch=True,
                     library_version="550.90"),
    "v100x2_one_lost": dict(state="gpu_lost", present=False, count=1, backend="nvidia_smi",
                            driver_version="550.54.14", cuda_driver_version=None,
                            lost_gpus=[{"bus_id": "0000:3b:00.0", "index": 0, "source": "nvidia_smi",
                                        "message": "GPU is lost.  Reboot the system to recover this GPU"}]),
}


def test_every_fake_scenario_is_covered():
    assert sorted(os.listdir(SCENARIOS)) == sorted(FAKE_EXPECT)


@pytest.mark.parametrize("scenario", sorted(FAKE_EXPECT))
def test_fake_nvidia_smi_scenarios(tmp_path, scenario):
    facts = probe_fake(tmp_path, scenario)
    for key, value in FAKE_EXPECT[scenario].items():
        assert facts[key] == value, "%s: %s is %r" % (scenario, key, facts[key])
    assert facts["msg"]


def test_fake_v100_details(tmp_path):
    facts = probe_fake(tmp_path, "v100x2_pcie")
    assert [gpu["compute_capability"] for gpu in facts["gpus"]] == ["7.0", "7.0"]
    assert facts["gpus"][0]["pci_bus_id"] == "0000:3b:00.0"
    assert facts["gpus"][0]["memory_total_mib"] == 32768
    assert facts["topology"]["pairs"] == [{"a": 0, "b": 1, "link": "SYS"}]


def test_fake_one_lost_keeps_the_healthy_gpu(tmp_path):
    facts = probe_fake(tmp_path, "v100x2_one_lost")
    assert [(gpu["index"], gpu["pci_bus_id"]) for gpu in facts["gpus"]] == [(1, "0000:d8:00.0")]
    assert facts["msg"].startswith("1 NVIDIA GPU(s) fell off the bus (Xid 79): 0000:3b:00.0 (GPU 0)")
    rc, out, _err = fake_runner("v100x2_one_lost")(["nvidia-smi", "topo", "-m"])
    assert rc == 15 and out.startswith("Unable to determine the device handle for GPU 0000:3B:00.0: GPU is lost.")


def test_fake_r470_falls_back_to_table(tmp_path):
    facts = probe_fake(tmp_path, "r470_v100")
    assert [gpu["compute_capability"] for gpu in facts["gpus"]] == ["7.0", "7.0"]
    assert "compute_cap" in facts["probes"][1]["detail"]


def test_fake_unknown_field_answers_like_the_real_one():
    rc, out, _err = fake_runner("v100x2_pcie")(["nvidia-smi", "--query-gpu=index,bogus", "--format=csv"])
    assert rc == 2
    assert out.startswith('Field "bogus" is not a valid field to query.')


def test_fake_units_and_header_without_nounits():
    rc, out, _err = fake_runner("p100")(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv"])
    assert rc == 0
    assert out.splitlines() == ["name, memory.total [MiB]", "Tesla P100-PCIE-16GB, 16384 MiB"]


def test_main_with_fake_nvidia_smi_binary(host, monkeypatch):
    """End to end through AnsibleModule.run_command with the fake as the nvidia_smi option."""
    monkeypatch.undo()  # real run_command / get_bin_path, then re-apply what the host fixture set
    monkeypatch.setattr(_gpu, "import_pynvml", lambda: None)
    monkeypatch.setattr(_gpu, "DEFAULT_PROC_VERSION_PATH", "/nonexistent/proc/driver/nvidia/version")
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", _exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", _fail_json)
    if not os.access(FAKE_SMI, os.X_OK):
        pytest.skip("fake nvidia-smi is not executable in this checkout")
    monkeypatch.setenv("LABFLEET_FAKE_GPU_DIR", os.path.join(SCENARIOS, "v100x2_pcie"))
    result = run_main({"backend": "nvidia_smi", "nvidia_smi": FAKE_SMI})
    nvidia = result["ansible_facts"]["nvidia"]
    assert nvidia["state"] == "ok" and nvidia["backend"] == "nvidia_smi" and nvidia["count"] == 2
