# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""make check-gpu's gpu_facts comparison (tests/gpu/gpu_facts_check.py) without a GPU: the GPU's answers from
the fake nvidia-smi's recorded scenarios (tests/fake_gpu/), an nvidia-smi -q -x file and NVML answers built
from the same scenario; the module's facts from the collection's own probe against the same fake."""

from __future__ import absolute_import, division, print_function

import copy
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.probes import _gpu

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "gpu"))

import gpu_facts_check as check  # noqa: E402  pylint: disable=wrong-import-position

FAKE_SMI = os.path.join(REPO, "tests", "fake_gpu", "nvidia-smi")
SCENARIOS = os.path.join(REPO, "tests", "fake_gpu", "scenarios")
XML = os.path.join(REPO, "tests", "unit", "fixtures", "gpu_check", "v100x2_pcie.xml")
MIB = 1024 * 1024


def scenario_runner(name, xml=None):
    """A runner that asks the fake nvidia-smi of scenario ``name``; ``-q -x`` answers ``xml`` when given."""
    env = dict(os.environ, LABFLEET_FAKE_GPU_DIR=os.path.join(SCENARIOS, name), LC_ALL="C")

    def runner(argv):
        if xml is not None and list(argv[1:]) == ["-q", "-x"]:
            with open(xml) as handle:
                return 0, handle.read(), ""
        proc = subprocess.run([FAKE_SMI] + list(argv[1:]), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                              timeout=60, check=False)
        return proc.returncode, proc.stdout.decode(), proc.stderr.decode()
    return runner


def nvml_answer(name, cuda=12040):
    """What read_nvml() returns on the scenario's GPUs (built from its gpus.json)."""
    with open(os.path.join(SCENARIOS, name, "gpus.json")) as handle:
        gpus = json.load(handle)
    answer = {"driver_version": gpus[0]["driver_version"], "cuda_driver_version_int": cuda, "count": len(gpus),
              "gpus": []}
    for gpu in gpus:
        cc = gpu.get("compute_cap", "7.0").split(".")
        answer["gpus"].append({"index": int(gpu["index"]), "name": gpu["name"], "uuid": gpu["uuid"],
                               "pci_bus_id": gpu["pci.bus_id"], "compute_capability": [int(cc[0]), int(cc[1])],
                               "memory_total_bytes": int(gpu["memory.total"]) * MIB})
    return answer


_CACHE = {}


def _cached(key, make):
    """Each scenario asked once per session (every call of the fake nvidia-smi starts a Python)."""
    if key not in _CACHE:
        _CACHE[key] = make()
    return copy.deepcopy(_CACHE[key])


def module_facts(name, backend="nvidia_smi"):
    """What gpu_facts returns on the scenario (the collection's probe, with the fake nvidia-smi)."""
    def make():
        if backend == "nvidia_smi":
            return _gpu.probe(backend="nvidia_smi", run_command=scenario_runner(name), nvidia_smi=FAKE_SMI,
                              nvml_loader=lambda: None, sysfs_root="/nonexistent-sysfs",
                              proc_version_path="/nonexistent", lib_root="/nonexistent")
        return _gpu.probe(backend="nvml", nvml_loader=lambda: FakePynvml(nvml_answer(name)),
                          sysfs_root="/nonexistent-sysfs", proc_version_path="/nonexistent", lib_root="/nonexistent")
    return _cached(("facts", name, backend), make)


class FakeNVMLError(Exception):
    def __init__(self, value):
        super(FakeNVMLError, self).__init__(value)
        self.value = value


class _Struct(object):
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


class FakePynvml(object):
    """pynvml's calls that gpu_facts makes, answering from a read_nvml()-shaped dict (handles are indexes)."""

    NVMLError = FakeNVMLError

    def __init__(self, answer):
        self.answer = answer

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlSystemGetDriverVersion(self):
        return self.answer["driver_version"]

    def nvmlSystemGetCudaDriverVersion_v2(self):
        return self.answer["cuda_driver_version_int"]

    def nvmlDeviceGetCount(self):
        return self.answer["count"]

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def _gpu(self, handle):
        return self.answer["gpus"][handle]

    def nvmlDeviceGetName(self, handle):
        return self._gpu(handle)["name"]

    def nvmlDeviceGetUUID(self, handle):
        return self._gpu(handle)["uuid"]

    def nvmlDeviceGetPciInfo(self, handle):
        return _Struct(busId=self._gpu(handle)["pci_bus_id"], pciDeviceId=0x1DB610DE)

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        return tuple(self._gpu(handle)["compute_capability"])

    def nvmlDeviceGetMemoryInfo(self, handle):
        total = self._gpu(handle)["memory_total_bytes"]
        return _Struct(total=total, free=total - 274 * MIB, used=274 * MIB)

    def nvmlDeviceGetTopologyCommonAncestor(self, h1, h2):
        return 50  # SYS, as the v100x2_pcie scenario's topo -m says


def raw_of(name, xml=None):
    return _cached(("raw", name, xml), lambda: check.collect(FAKE_SMI, runner=scenario_runner(name, xml),
                                                             nvml_reader=lambda: nvml_answer(name)))


def sources_of(name, xml=None):
    return check.sources_from_raw(raw_of(name, xml))


def results(rows):
    return dict(((row["path"], row["field"], row["gpu"]), row["result"]) for row in rows)


# ---------------------------------------------------------------------------------------------------------
# The GPU's answers
# ---------------------------------------------------------------------------------------------------------

def test_sources_of_the_v100_scenario():
    sources = sources_of("v100x2_pcie", XML)
    assert set(sources) == {"csv", "banner", "xml", "topo", "nvml"}
    assert not any("error" in source for source in sources.values())
    assert sources["csv"]["count"] == 2 and sources["csv"]["driver_version"] == "550.54.14"
    assert sources["csv"]["gpus"][1] == {"index": 1, "name": "Tesla V100-PCIE-32GB",
                                         "uuid": "GPU-b82e4d07-91c3-4f6a-a5d2-7c0e19f48b63",
                                         "pci_bus_id": "0000:d8:00.0", "compute_capability": "7.0",
                                         "memory_total_mib": 32768}
    assert sources["banner"] == {"cuda_driver_version": "12.4"}
    assert sources["xml"]["count"] == 2 and sources["xml"]["cuda_driver_version"] == "12.4"
    assert sources["xml"]["gpus"][0]["pci_bus_id"] == "0000:3b:00.0"
    assert sources["xml"]["gpus"][0]["memory_total_mib"] == 32768
    assert sources["topo"] == {"topology": {"0-1": "SYS"}}
    assert sources["nvml"]["cuda_driver_version"] == "12.4"
    assert sources["nvml"]["gpus"][0]["compute_capability"] == "7.0"


def test_a_source_that_does_not_answer_is_named_with_why():
    sources = sources_of("v100x2_pcie")  # the fake has no -q -x
    assert "Invalid combination" in sources["xml"]["error"]
    raw = raw_of("v100x2_pcie")
    raw["nvml"] = {"error": "cannot load libnvidia-ml.so.1"}
    assert check.sources_from_raw(raw)["nvml"] == {"error": "cannot load libnvidia-ml.so.1"}


def test_a_driver_without_compute_cap_is_asked_without_it():
    raw = check.collect(FAKE_SMI, runner=scenario_runner("r470_v100"), nvml_reader=lambda: {"error": "none"})
    assert "compute_cap" not in raw["csv"]["fields"] and raw["csv"]["rc"] == 0
    source = check.sources_from_raw(raw)["csv"]
    assert source["count"] == 2 and source["gpus"][0]["compute_capability"] is None


def test_unreadable_answers_are_errors_not_tracebacks():
    raw = {"csv": {"rc": 0, "stdout": "0, only, three\n"}, "banner": {"rc": 9, "stdout": "", "stderr": "gone"},
           "xml": {"rc": 0, "stdout": "<nvidia_smi_log><gpu"}, "topo": {"rc": 0, "stdout": "no matrix"},
           "nvml": {"count": 1}}
    sources = check.sources_from_raw(raw)
    assert all("error" in source for source in sources.values()), sources
    assert sources["banner"]["error"] == "exit 9: gone"


@pytest.mark.parametrize("text,expected", [
    ("00000000:3B:00.0", "0000:3b:00.0"), ("0000:d8:00.0", "0000:d8:00.0"), ("3b:00.0", None), ("", None),
    ("00000000:3B:00.8", None),
])
def test_bus_id(text, expected):
    assert check.bus_id(text) == expected


def test_topology_with_nic_columns_and_nvlink():
    text = ("\tGPU0\tGPU1\tGPU2\tNIC0\tCPU Affinity\tNUMA Affinity\n"
            "GPU0\t X \tNV12\tSOC\tPXB\t0-31\t0\n"
            "GPU1\tNV12\t X \tPHB\tSYS\t0-31\t0\n"
            "GPU2\tSOC\tPHB\t X \tSYS\t32-63\t1\n"
            "NIC0\tPXB\tSYS\tSYS\t X\n\nLegend:\n  X    = Self\n")
    assert check.read_topo({"stdout": text}) == {"topology": {"0-1": "NV12", "0-2": "SYS", "1-2": "PHB"}}


# ---------------------------------------------------------------------------------------------------------
# The comparison
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("scenario", ["v100x2_pcie", "r590_v100", "p100", "r470_v100"])
def test_the_module_matches_every_recorded_scenario(scenario):
    sources = sources_of(scenario, XML if scenario == "v100x2_pcie" else None)
    if scenario != "v100x2_pcie":
        sources["nvml"] = {"error": "not built for this scenario"}
    rows, ok = check.compare({"nvidia_smi": module_facts(scenario)}, sources)
    assert ok, [row for row in rows if row["result"] != "ok"]
    compared = set(row["field"] for row in rows if row["result"] == "ok")
    assert {"count", "driver_version", "name", "uuid", "pci_bus_id", "memory_total_mib"} <= compared


def test_both_backends_match_the_v100_scenario():
    sources = sources_of("v100x2_pcie", XML)
    facts = {"nvidia_smi": module_facts("v100x2_pcie"), "nvml": module_facts("v100x2_pcie", "nvml")}
    assert facts["nvml"]["backend"] == "nvml" and facts["nvml"]["state"] == "ok"
    rows, ok = check.compare(facts, sources)
    assert ok, [row for row in rows if row["result"] != "ok"]
    table = results(rows)
    for path in ("nvml", "nvidia_smi"):
        for field in ("name", "uuid", "pci_bus_id", "compute_capability", "memory_total_mib"):
            assert table[(path, field, "0")] == "ok" and table[(path, field, "1")] == "ok"
        assert table[(path, "topology", "0-1")] == "ok"
        assert table[(path, "cuda_driver_version", "")] == "ok"
    name_row = [row for row in rows if row["path"] == "nvml" and row["field"] == "name" and row["gpu"] == "0"][0]
    assert set(name_row["answers"]) == {"csv", "xml", "nvml"}


def _mutated(facts, change):
    facts = copy.deepcopy(facts)
    change(facts)
    return facts


@pytest.mark.parametrize("what,change,key", [
    ("name", lambda f: f["gpus"][0].update(name="Tesla V100-SXM2-32GB"), ("nvidia_smi", "name", "0")),
    ("uuid", lambda f: f["gpus"][1].update(uuid="GPU-00000000"), ("nvidia_smi", "uuid", "1")),
    ("bus", lambda f: f["gpus"][0].update(pci_bus_id="0000:3c:00.0"), ("nvidia_smi", "pci_bus_id", "0")),
    ("cc", lambda f: f["gpus"][1].update(compute_capability="7.5"), ("nvidia_smi", "compute_capability", "1")),
    ("memory", lambda f: f["gpus"][0].update(memory_total_mib=32766), ("nvidia_smi", "memory_total_mib", "0")),
    ("driver", lambda f: f.update(driver_version="550.54.15"), ("nvidia_smi", "driver_version", "")),
    ("cuda", lambda f: f.update(cuda_driver_version="12.5"), ("nvidia_smi", "cuda_driver_version", "")),
    ("count", lambda f: f.update(count=3), ("nvidia_smi", "count", "")),
    ("topology", lambda f: f["topology"]["pairs"][0].update(link="PHB"), ("nvidia_smi", "topology", "0-1")),
    ("state", lambda f: f.update(state="probe_error"), ("nvidia_smi", "state", "")),
    ("backend", lambda f: f.update(backend="pci"), ("nvidia_smi", "state", "")),
    ("missing GPU", lambda f: f.update(gpus=f["gpus"][:1]), ("nvidia_smi", "gpu", "0000:d8:00.0")),
    ("unread field", lambda f: f["gpus"][0].update(uuid=None), ("nvidia_smi", "uuid", "0")),
])
def test_every_field_that_differs_is_a_mismatch(what, change, key):
    sources = sources_of("v100x2_pcie", XML)
    rows, ok = check.compare({"nvidia_smi": _mutated(module_facts("v100x2_pcie"), change)}, sources)
    assert not ok, what
    assert results(rows)[key] == "MISMATCH", (what, [row for row in rows if row["result"] != "ok"])


def test_memory_may_differ_by_one_mib_between_nvidia_smi_and_nvml():
    sources = sources_of("v100x2_pcie", XML)
    facts = _mutated(module_facts("v100x2_pcie"), lambda f: f["gpus"][0].update(memory_total_mib=32767))
    _rows, ok = check.compare({"nvidia_smi": facts}, sources)
    assert ok


def test_a_backend_that_failed_is_a_mismatch_with_its_message():
    rows, ok = check.compare({"nvml": {"error": "backend=nvml needs the Python package nvidia-ml-py"}},
                             sources_of("v100x2_pcie"))
    assert not ok and "nvidia-ml-py" in rows[0]["note"]


def test_one_gpu_has_no_topology_to_compare():
    raw = raw_of("p100")
    raw["nvml"] = {"error": "none"}
    raw["topo"] = {"rc": 0, "stdout": "\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-19\t0\n\nLegend:\n"}
    sources = check.sources_from_raw(raw)
    rows, ok = check.compare({"nvidia_smi": module_facts("p100")}, sources)
    assert ok
    topology = [row for row in rows if row["field"] == "topology"]
    assert topology and all(row["result"] == "ok" for row in topology)


def test_render_prints_every_row_and_the_silent_sources():
    sources = sources_of("v100x2_pcie")
    rows, _ok = check.compare({"nvidia_smi": module_facts("v100x2_pcie")}, sources)
    lines = check.render(rows, sources)
    assert lines[0].split()[:3] == ["path", "field", "gpu"]
    assert len(lines) == 1 + len(rows) + 1  # header, rows, xml did not answer
    assert any("csv=Tesla V100-PCIE-32GB" in line and line.rstrip().endswith("ok") for line in lines)
    assert lines[-1].startswith("source xml did not answer")


def test_main_compare_exit_status_and_json(tmp_path):
    raw = raw_of("v100x2_pcie", XML)
    (tmp_path / "raw.json").write_text(json.dumps(raw))
    facts = module_facts("v100x2_pcie")
    (tmp_path / "smi.json").write_text(json.dumps(facts))
    out = tmp_path / "rows.json"
    assert check.main(["compare", str(tmp_path / "raw.json"), "--facts", "nvidia_smi=%s" % (tmp_path / "smi.json"),
                       "--json", str(out)]) == 0
    assert json.loads(out.read_text())["ok"] is True
    facts["gpus"][0]["name"] = "NVIDIA H200"
    (tmp_path / "smi.json").write_text(json.dumps(facts))
    assert check.main(["compare", str(tmp_path / "raw.json"), "--facts",
                       "nvidia_smi=%s" % (tmp_path / "smi.json")]) == 1
    with pytest.raises(SystemExit):
        check.main(["compare", str(tmp_path / "raw.json"), "--facts", "pci=%s" % (tmp_path / "smi.json")])


def test_probe_without_ansible_is_the_module_probe(tmp_path, monkeypatch):
    monkeypatch.setenv("LABFLEET_FAKE_GPU_DIR", os.path.join(SCENARIOS, "v100x2_pcie"))
    facts = check.probe_direct("nvidia_smi", FAKE_SMI)
    assert facts["state"] == "ok" and facts["backend"] == "nvidia_smi" and facts["count"] == 2
    assert "nvidia-smi was not found" in check.probe_direct("nvidia_smi", None)["error"]


def test_read_nvml_without_the_library_says_so():
    answer = check.read_nvml("libnvidia-ml-absent.so.1")
    assert answer.keys() == {"error"} and "cannot load" in answer["error"]
