# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests for plugins/module_utils/probes/_gpu.py and _gpu_models.py over recorded outputs.

Every folder under tests/unit/fixtures/gpu/ is one host (see its README.md); NVML is a fake module.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest

try:
    from hypothesis import given, settings, strategies as st
except ImportError:  # hypothesis is in requirements-dev.txt; without it only one test is skipped
    given = None

from ansible_collections.labfleet.vllm.plugins.module_utils.probes import _gpu
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge import _gpu_models

GPU_FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "gpu")
CASES = sorted(
    name for name in os.listdir(GPU_FIXTURES) if os.path.isfile(os.path.join(GPU_FIXTURES, name, "case.json"))
)
FACT_KEYS = set(_gpu.base_facts())
GPU_KEYS = set(_gpu.new_gpu("pci"))
LOST_KEYS = set(_gpu.new_lost(None, None, "", "pci"))
NVIDIA_SMI = "/usr/bin/nvidia-smi"


# --------------------------------------------------------------------------------------------
# Harness: a fake host built from a case folder
# --------------------------------------------------------------------------------------------

def load_case(name):
    with open(os.path.join(GPU_FIXTURES, name, "case.json")) as handle:
        return json.load(handle)


def answer_text(name, answer):
    if "stdout_file" in answer:
        with open(os.path.join(GPU_FIXTURES, name, answer["stdout_file"])) as handle:
            return handle.read()
    return answer.get("stdout", "")


class FakeRunner:
    """run_command stand-in answering from a case's "commands"."""

    def __init__(self, name, commands):
        self.name = name
        self.commands = commands
        self.calls = []

    @staticmethod
    def key(argv):
        args = argv[1:]
        if not args:
            return "header"
        if args[:2] == ["topo", "-m"]:
            return "topo"
        query = [arg for arg in args if arg.startswith("--query-gpu=")]
        if query:
            fields = query[0].split("=", 1)[1].split(",")
            return "query" if "compute_cap" in fields else "query_no_compute_cap"
        return "other"

    def __call__(self, argv):
        key = self.key(argv)
        self.calls.append(key)
        answer = self.commands.get(key) or self.commands.get("all")
        if answer is None and key == "query_no_compute_cap":
            answer = self.commands.get("query")
        if answer is None:
            return 1, "", "unexpected call %r" % (argv,)
        return answer["rc"], answer_text(self.name, answer), answer.get("stderr", "")


def build_host(tmp_path, name, case):
    """Fake /sys, /proc/driver/nvidia/version and lib dir; returns probe() keyword arguments."""
    sysfs = tmp_path / "sys"
    devices = sysfs / "bus" / "pci" / "devices"
    devices.mkdir(parents=True)
    drivers = sysfs / "bus" / "pci" / "drivers"
    drivers.mkdir(parents=True)
    for dev in case.get("pci", []):
        path = devices / dev["bus_id"]
        path.mkdir()
        (path / "vendor").write_text(dev.get("vendor", "0x10de") + "\n")
        (path / "device").write_text(dev["device"] + "\n")
        (path / "class").write_text(dev["class"] + "\n")
        if "link_speed" in dev:
            (path / "current_link_speed").write_text(dev["link_speed"] + "\n")
        if "link_width" in dev:
            (path / "current_link_width").write_text(dev["link_width"] + "\n")
        for attribute in ("revision", "modalias", "power_state"):
            if attribute in dev:
                (path / attribute).write_text(dev[attribute] + "\n")
        if "config_hex" in dev:
            (path / "config").write_bytes(bytes(bytearray.fromhex(dev["config_hex"])))
        if dev.get("driver"):
            target = drivers / dev["driver"]
            target.mkdir(exist_ok=True)
            os.symlink(str(target), str(path / "driver"))
    proc_path = tmp_path / "proc_version"
    if case.get("proc_version_file"):
        with open(os.path.join(GPU_FIXTURES, name, case["proc_version_file"])) as handle:
            proc_path.write_text(handle.read())
    lib_root = tmp_path / "root"
    lib_dir = lib_root / "usr" / "lib" / "x86_64-linux-gnu"
    lib_dir.mkdir(parents=True)
    for lib in case.get("libraries", []):
        (lib_dir / lib).write_text("")
    if case.get("library_link"):
        os.symlink(case["library_link"], str(lib_dir / "libnvidia-ml.so.1"))
    return dict(sysfs_root=str(sysfs), proc_version_path=str(proc_path), lib_root=str(lib_root))


def run_case(tmp_path, name, nvml=None, backend=None):
    case = load_case(name)
    runner = FakeRunner(name, case.get("commands", {}))
    facts = _gpu.probe(
        backend=backend or case.get("backend", "auto"),
        run_command=runner,
        nvidia_smi=NVIDIA_SMI if case.get("nvidia_smi", True) else None,
        nvml_loader=lambda: nvml,
        **build_host(tmp_path, name, case)
    )
    return case, facts, runner


def check_shape(facts):
    """Invariants every answer must keep, whatever the host."""
    assert set(facts) == FACT_KEYS
    assert facts["state"] in _gpu.STATES
    assert facts["backend"] in ("nvml", "nvidia_smi", "pci", "none")
    assert isinstance(facts["msg"], str) and facts["msg"].strip()
    assert facts["count"] == len(facts["gpus"])
    assert facts["present"] == (facts["state"] == "ok" and facts["backend"] in ("nvml", "nvidia_smi")
                                and facts["count"] > 0)
    for gpu in facts["gpus"]:
        assert set(gpu) == GPU_KEYS
        assert gpu["source"] in ("nvml", "nvidia_smi", "pci")
    assert set(facts["topology"]) == {"matrix", "pairs"}
    n = len(facts["topology"]["matrix"])
    assert len(facts["topology"]["pairs"]) == n * (n - 1) // 2
    assert isinstance(facts["nvlink"], bool)
    assert isinstance(facts["driver_library_mismatch"], bool)
    assert isinstance(facts["lost_gpus"], list)
    for lost in facts["lost_gpus"]:
        assert set(lost) == LOST_KEYS
        assert lost["source"] in _gpu.LOST_SOURCES
        assert isinstance(lost["message"], str) and lost["message"]
        assert lost["bus_id"] not in [gpu["pci_bus_id"] for gpu in facts["gpus"]]
    if facts["lost_gpus"]:
        assert facts["state"] in ("gpu_lost", "driver_library_mismatch")
        assert facts["present"] is False
    json.dumps(facts)  # must be plain JSON


# --------------------------------------------------------------------------------------------
# Recorded hosts
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", CASES)
def test_recorded_host(tmp_path, name):
    case, facts, runner = run_case(tmp_path, name)
    check_shape(facts)
    for key, value in case.get("expect", {}).items():
        assert facts[key] == value, "%s: %s is %r, expected %r" % (name, key, facts[key], value)
    for pos, expected in enumerate(case.get("expect_gpus", [])):
        gpu = facts["gpus"][pos] if expected.get("index") is None else [
            g for g in facts["gpus"] if g["index"] == expected["index"]][0]
        for key, value in expected.items():
            assert gpu[key] == value, "%s: gpu %s %s is %r, expected %r" % (name, gpu["index"], key, gpu[key], value)
    for pair, link in case.get("expect_links", {}).items():
        a, b = pair.split("-")
        assert facts["topology"]["matrix"][a][b] == link
        assert facts["topology"]["matrix"][b][a] == link
    for text in case.get("expect_msg", []):
        assert text in facts["msg"], "%s: %r not in msg %r" % (name, text, facts["msg"])
    if "expect_probe_detail" in case:
        details = " ".join(probe["detail"] for probe in facts["probes"])
        assert case["expect_probe_detail"] in details
    if "expect_commands" in case:
        assert runner.calls == case["expect_commands"]


def test_v100x2_message_and_probes(tmp_path):
    _case, facts, runner = run_case(tmp_path, "v100x2_pcie_550")
    assert facts["msg"] == ("Found 2 NVIDIA GPU(s) via nvidia-smi: 2x Tesla V100-PCIE-32GB, compute capability 7.0; "
                            "driver 550.54.14, CUDA 12.4.")
    assert runner.calls == ["query", "header", "topo"]
    assert [p["backend"] for p in facts["probes"]] == ["nvml", "nvidia_smi", "pci"]
    assert facts["probes"][0]["outcome"] == "unavailable"
    assert facts["probes"][1]["outcome"] == "ok"


def test_dgx1_every_pair_has_a_link(tmp_path):
    _case, facts, _runner = run_case(tmp_path, "v100x8_sxm2_nvlink")
    pairs = facts["topology"]["pairs"]
    assert len(pairs) == 28
    links = [pair["link"] for pair in pairs]
    assert set(links) == {"NV1", "NV2", "SYS"}
    # Each V100 has 6 NVLinks: NV1 + NV1 + NV2 + NV2 per row of the hybrid cube-mesh.
    for gpu in range(8):
        row = facts["topology"]["matrix"][str(gpu)]
        assert sum(int(link[2:]) for link in row.values() if link.startswith("NV")) == 6
    assert "NIC0" not in facts["topology"]["matrix"]


def test_r470_asks_again_without_compute_cap(tmp_path):
    _case, facts, runner = run_case(tmp_path, "r470_no_compute_cap")
    assert runner.calls[:2] == ["query", "query_no_compute_cap"]
    assert all(gpu["compute_capability"] == "7.0" for gpu in facts["gpus"])


def test_forced_pci_with_module_loaded_is_ok_but_not_present(tmp_path):
    _case, facts, runner = run_case(tmp_path, "v100x2_pcie_550", backend="pci")
    check_shape(facts)
    assert runner.calls == []
    assert facts["state"] == "ok" and facts["present"] is False and facts["backend"] == "pci"
    assert facts["gpus"][0]["name"] == "Tesla V100 PCIe 32GB"
    assert facts["gpus"][0]["source"] == "pci"


def test_forced_pci_without_sysfs_is_unavailable(tmp_path):
    with pytest.raises(_gpu.BackendUnavailable):
        _gpu.probe(backend="pci", sysfs_root=str(tmp_path / "missing"), proc_version_path=str(tmp_path / "x"),
                   lib_root=str(tmp_path))


def test_forced_backends_unavailable(tmp_path):
    kwargs = dict(sysfs_root=str(tmp_path), proc_version_path=str(tmp_path / "x"), lib_root=str(tmp_path))
    with pytest.raises(_gpu.BackendUnavailable, match="nvidia-ml-py"):
        _gpu.probe(backend="nvml", nvml_loader=lambda: None, **kwargs)
    with pytest.raises(_gpu.BackendUnavailable, match="nvidia-smi was not found"):
        _gpu.probe(backend="nvidia_smi", nvidia_smi=None, nvml_loader=lambda: None, **kwargs)
    with pytest.raises(_gpu.BackendUnavailable, match="backend must be"):
        _gpu.probe(backend="cuda", **kwargs)


def test_nothing_readable_at_all(tmp_path):
    facts = _gpu.probe(nvml_loader=lambda: None, sysfs_root=str(tmp_path / "nosys"),
                       proc_version_path=str(tmp_path / "x"), lib_root=str(tmp_path))
    check_shape(facts)
    assert facts["state"] == "no_gpu" and facts["backend"] == "none"
    assert "could not be read" in facts["msg"]


# --------------------------------------------------------------------------------------------
# NVML through a fake pynvml module
# --------------------------------------------------------------------------------------------

GIB = 1024 * 1024 * 1024
UNSUPPORTED = object()


class FakeNVMLError(Exception):
    TEXT = {3: "Not Supported", 6: "Not Found", 9: "Driver Not Loaded", 12: "NVML Shared Library Not Found",
            15: "GPU is lost", 18: "RM has detected an NVML/RM version mismatch."}

    def __init__(self, value):
        super(FakeNVMLError, self).__init__(value)
        self.value = value

    def __str__(self):
        return self.TEXT.get(self.value, "Unknown Error")


class Struct:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


def v100_pcie(bus, uuid):
    return dict(name="Tesla V100-PCIE-32GB", uuid=uuid, bus=bus, device_id=0x1DB610DE, cc=(7, 0),
                total=32 * GIB, free=31 * GIB, persistence=1, ecc=[1, 1], gen=3, width=16)


class FakeNvml:
    """Enough of pynvml's API for the probe; handles are GPU indexes."""

    NVMLError = FakeNVMLError

    def __init__(self, gpus, init_error=None, count_error=None, handle_error=None, nvlinks=None,
                 ancestors=None, p2p=None, driver="550.54.14", cuda=12040, nvml_version="12.550.54.14",
                 explode=None, lost=()):
        self.gpus = gpus
        self.lost = set(lost)  # handles whose every getter answers NVML_ERROR_GPU_IS_LOST
        self.init_error = init_error
        self.count_error = count_error
        self.handle_error = handle_error
        self.nvlinks = nvlinks or {}
        self.ancestors = ancestors or {}
        self.p2p = p2p or {}
        self.driver = driver
        self.cuda = cuda
        self.nvml_version = nvml_version
        self.explode = explode
        self.shutdown_called = False
        self.p2p_indexes = []

    def _value(self, handle, key):
        if handle in self.lost:
            raise FakeNVMLError(15)
        value = self.gpus[handle][key]
        if value is UNSUPPORTED:
            raise FakeNVMLError(3)
        return value

    def nvmlInit(self):
        if self.init_error is not None:
            raise FakeNVMLError(self.init_error)

    def nvmlShutdown(self):
        self.shutdown_called = True

    def nvmlSystemGetDriverVersion(self):
        return self.driver

    def nvmlSystemGetNVMLVersion(self):
        return self.nvml_version

    def nvmlSystemGetCudaDriverVersion_v2(self):
        return self.cuda

    def nvmlDeviceGetCount(self):
        if self.count_error is not None:
            raise FakeNVMLError(self.count_error)
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        if self.handle_error is not None and index == self.handle_error[0]:
            raise FakeNVMLError(self.handle_error[1])
        return index

    def nvmlDeviceGetName(self, handle):
        if self.explode == "name":
            raise TypeError("binding broke")
        return self._value(handle, "name").encode()  # old bindings return bytes

    def nvmlDeviceGetUUID(self, handle):
        return self._value(handle, "uuid")

    def nvmlDeviceGetPciInfo(self, handle):
        return Struct(busId=self._value(handle, "bus").encode(), pciDeviceId=self._value(handle, "device_id"))

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        return self._value(handle, "cc")

    def nvmlDeviceGetMemoryInfo(self, handle):
        return Struct(total=self._value(handle, "total"), free=self._value(handle, "free"), used=0)

    def nvmlDeviceGetPersistenceMode(self, handle):
        return self._value(handle, "persistence")

    def nvmlDeviceGetEccMode(self, handle):
        return self._value(handle, "ecc")

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle):
        return self._value(handle, "gen")

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle):
        return self._value(handle, "width")

    def nvmlDeviceGetNvLinkState(self, handle, link):
        if handle not in self.nvlinks:
            raise FakeNVMLError(3)
        if link >= len(self.nvlinks[handle]):
            raise FakeNVMLError(2)
        return 1

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle, link):
        return Struct(busId=self.nvlinks[handle][link])

    def nvmlDeviceGetP2PStatus(self, h1, h2, index):
        # The real binding passes the index to ctypes: a tuple (nvidia-ml-py's
        # NVML_P2P_CAPS_INDEX_READ = 0,) raises TypeError there.
        if not isinstance(index, int) or isinstance(index, bool):
            raise TypeError("p2p index must be an int, got %r" % (index,))
        self.p2p_indexes.append(index)
        return self.p2p.get((min(h1, h2), max(h1, h2)), 5)

    def nvmlDeviceGetTopologyCommonAncestor(self, h1, h2):
        level = self.ancestors.get((min(h1, h2), max(h1, h2)), 30)
        if level is UNSUPPORTED:
            raise FakeNVMLError(3)
        return level


def nvml_probe(tmp_path, nvml, case="v100x2_pcie_550", backend="auto"):
    return run_case(tmp_path, case, nvml=nvml, backend=backend)


def test_nvml_two_v100_pcie(tmp_path):
    nvml = FakeNvml([v100_pcie("00000000:3B:00.0", "GPU-a"), v100_pcie("00000000:D8:00.0", "GPU-b")],
                    ancestors={(0, 1): 50})
    _case, facts, runner = nvml_probe(tmp_path, nvml)
    check_shape(facts)
    assert runner.calls == []  # NVML answered, nvidia-smi was not needed
    assert facts["state"] == "ok" and facts["present"] and facts["backend"] == "nvml"
    assert facts["driver_version"] == "550.54.14" and facts["cuda_driver_version"] == "12.4"
    assert facts["library_version"] == "550.54.14" and facts["driver_library_mismatch"] is False
    gpu = facts["gpus"][0]
    assert gpu == {
        "index": 0, "name": "Tesla V100-PCIE-32GB", "uuid": "GPU-a", "pci_bus_id": "0000:3b:00.0",
        "pci_device_id": "0x1db6", "compute_capability": "7.0", "architecture": "Volta",
        "memory_total_mib": 32768, "memory_free_mib": 31744, "persistence_mode": True, "ecc_mode": "Enabled",
        "pcie_link_gen": 3, "pcie_link_width": 16, "kernel_driver": "nvidia", "source": "nvml",
    }
    assert facts["topology"]["pairs"] == [{"a": 0, "b": 1, "link": "SYS"}]
    assert facts["nvlink"] is False
    assert nvml.shutdown_called
    assert nvml.p2p_indexes == [2]


def test_nvml_direct_nvlink_counts(tmp_path):
    buses = ["00000000:06:00.0", "00000000:07:00.0", "00000000:0A:00.0"]
    gpus = [v100_pcie(bus, "GPU-%d" % i) for i, bus in enumerate(buses)]
    nvlinks = {0: [b"00000000:07:00.0", b"00000000:0A:00.0", b"00000000:0A:00.0"],
               1: [b"00000000:06:00.0"], 2: [b"00000000:06:00.0", b"00000000:06:00.0"]}
    nvml = FakeNvml(gpus, nvlinks=nvlinks, ancestors={(1, 2): 20})
    _case, facts, _runner = nvml_probe(tmp_path, nvml)
    matrix = facts["topology"]["matrix"]
    assert matrix["0"] == {"1": "NV1", "2": "NV2"}
    assert matrix["1"]["2"] == "PXB"
    assert facts["nvlink"] is True


def test_nvml_nvswitch_through_p2p(tmp_path):
    gpus = [v100_pcie("00000000:%02X:00.0" % (0x18 + i), "GPU-%d" % i) for i in range(2)]
    switch = [b"00000000:C1:00.0"] * 18
    nvml = FakeNvml(gpus, nvlinks={0: switch, 1: switch}, p2p={(0, 1): 0})
    _case, facts, _runner = nvml_probe(tmp_path, nvml)
    assert facts["topology"]["pairs"] == [{"a": 0, "b": 1, "link": "NV18"}]
    assert facts["nvlink"] is True


@pytest.mark.parametrize("code, state", [
    (9, "driver_not_loaded"),
    (18, "driver_library_mismatch"),
])
def test_nvml_init_errors_become_states(tmp_path, code, state):
    nvml = FakeNvml([], init_error=code)
    _case, facts, runner = nvml_probe(tmp_path, nvml, case="not_loaded")
    check_shape(facts)
    assert runner.calls == []  # the driver's word is final; nvidia-smi would say the same
    assert facts["state"] == state
    assert facts["backend"] == "pci" and facts["count"] == 2
    assert facts["gpus"][0]["compute_capability"] == "7.0"
    assert facts["probes"][0]["outcome"] == state


def test_nvml_library_missing_falls_back_to_nvidia_smi(tmp_path):
    nvml = FakeNvml([], init_error=12)
    _case, facts, runner = nvml_probe(tmp_path, nvml)
    assert facts["state"] == "ok" and facts["backend"] == "nvidia_smi"
    assert facts["probes"][0] == {"backend": "nvml", "outcome": "unavailable",
                                  "detail": "NVML nvmlInit failed: NVML Shared Library Not Found (NVML error 12)"}
    assert runner.calls[0] == "query"


def test_nvml_library_missing_forced_is_a_state(tmp_path):
    nvml = FakeNvml([], init_error=12)
    _case, facts, _runner = nvml_probe(tmp_path, nvml, case="no_smi_pci_v100", backend="nvml")
    assert facts["state"] == "driver_not_loaded" and facts["count"] == 1


def test_nvml_zero_gpus_is_no_gpu(tmp_path):
    _case, facts, _runner = nvml_probe(tmp_path, FakeNvml([]), case="bare_host")
    assert facts["state"] == "no_gpu" and facts["backend"] == "nvml" and facts["present"] is False


def test_nvml_not_supported_values_are_null(tmp_path):
    gpu = v100_pcie("00000000:00:1E.0", UNSUPPORTED)
    gpu.update(persistence=UNSUPPORTED, ecc=UNSUPPORTED, gen=UNSUPPORTED, width=UNSUPPORTED, cc=UNSUPPORTED)
    nvml = FakeNvml([gpu])

    def cuda_not_supported():
        raise FakeNVMLError(3)
    nvml.nvmlSystemGetCudaDriverVersion_v2 = cuda_not_supported
    _case, facts, _runner = nvml_probe(tmp_path, nvml, case="bare_host")
    check_shape(facts)
    got = facts["gpus"][0]
    assert got["uuid"] is None and got["persistence_mode"] is None and got["ecc_mode"] is None
    assert got["pcie_link_gen"] is None and got["pcie_link_width"] is None
    assert got["compute_capability"] == "7.0"  # from the PCI table (device 0x1db6)
    assert facts["cuda_driver_version"] is None


def test_nvml_unexpected_exception_falls_back_to_nvidia_smi(tmp_path):
    nvml = FakeNvml([v100_pcie("00000000:3B:00.0", "GPU-a")], explode="name")
    _case, facts, _runner = nvml_probe(tmp_path, nvml)
    assert facts["state"] == "ok" and facts["backend"] == "nvidia_smi"
    assert facts["probes"][0]["outcome"] == "probe_error"
    assert "TypeError" in facts["probes"][0]["detail"]


def test_nvml_error_without_nvidia_smi_is_probe_error(tmp_path):
    nvml = FakeNvml([v100_pcie("00000000:86:00.0", "GPU-a")], handle_error=(0, 999))
    _case, facts, _runner = nvml_probe(tmp_path, nvml, case="no_smi_pci_v100")
    check_shape(facts)
    assert facts["state"] == "probe_error"
    assert "Unknown Error (NVML error 999)" in facts["msg"]
    assert facts["count"] == 1 and facts["backend"] == "pci"


def test_nvml_only_gpu_lost_takes_its_bus_id_from_pci(tmp_path):
    nvml = FakeNvml([v100_pcie("00000000:86:00.0", "GPU-a")], handle_error=(0, 15))
    case, facts, _runner = nvml_probe(tmp_path, nvml, case="no_smi_pci_v100")
    check_shape(facts)
    bus = case["pci"][0]["bus_id"]
    assert facts["state"] == "gpu_lost" and facts["backend"] == "nvml" and facts["count"] == 0
    assert facts["lost_gpus"] == [{"bus_id": bus, "index": 0, "source": "nvml",
                                   "message": "nvmlDeviceGetHandleByIndex(0): GPU is lost (NVML error 15)"}]
    assert "NVML lists no working GPU" in facts["msg"]
    assert facts["probes"][0]["outcome"] == "gpu_lost"


def test_nvml_library_version_differs_from_kernel(tmp_path):
    nvml = FakeNvml([v100_pcie("00000000:3B:00.0", "GPU-a"), v100_pcie("00000000:D8:00.0", "GPU-b")],
                    nvml_version="12.550.90.07")
    _case, facts, _runner = nvml_probe(tmp_path, nvml)
    assert facts["state"] == "ok"
    assert facts["driver_library_mismatch"] is True
    assert "Warning" in facts["msg"]


def test_real_pynvml_is_compatible(tmp_path):
    """The installed nvidia-ml-py behaves as the probe expects (errors have .value, P2P gotcha)."""
    pynvml = pytest.importorskip("pynvml")
    if os.path.exists("/proc/driver/nvidia/version"):
        pytest.skip("a real NVIDIA driver is loaded here; this test expects a host without one")
    assert isinstance(_gpu.NVML_P2P_CAPS_INDEX_NVLINK, int)
    assert pynvml.NVML_P2P_CAPS_INDEX_NVLINK == _gpu.NVML_P2P_CAPS_INDEX_NVLINK
    assert pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH == _gpu.NVML_ERROR_LIB_RM_VERSION_MISMATCH
    assert pynvml.NVML_ERROR_DRIVER_NOT_LOADED == _gpu.NVML_ERROR_DRIVER_NOT_LOADED
    assert pynvml.NVML_ERROR_LIBRARY_NOT_FOUND == _gpu.NVML_ERROR_LIBRARY_NOT_FOUND
    _case, facts, _runner = run_case(tmp_path, "v100x2_pcie_550", nvml=pynvml)
    assert facts["probes"][0]["outcome"] == "unavailable"
    assert facts["state"] == "ok" and facts["backend"] == "nvidia_smi"


# --------------------------------------------------------------------------------------------
# Parsers
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("raw, expected", [
    ("[N/A]", None), ("[Not Supported]", None), ("N/A", None), ("[Insufficient Permissions]", None),
    ("[Unknown Error]", None), ("  Enabled ", "Enabled"), ("", None), (None, None), (b"7.0", "7.0"),
])
def test_clean_value(raw, expected):
    assert _gpu.clean_value(raw) == expected


@pytest.mark.parametrize("raw, expected", [
    ("00000000:3B:00.0", "0000:3b:00.0"), ("0000:d8:00.0", "0000:d8:00.0"), (b"00000001:AF:1F.7", "0001:af:1f.7"),
    ("[N/A]", None),
])
def test_normalize_bus_id(raw, expected):
    assert _gpu.normalize_bus_id(raw) == expected


def test_normalize_bus_id_rejects_garbage():
    with pytest.raises(_gpu.ParseError):
        _gpu.normalize_bus_id("GPU-0")


def test_parse_query_gpu_wrong_column_count():
    with pytest.raises(_gpu.ParseError, match="expected 3"):
        _gpu.parse_query_gpu("0, Tesla T4\n", ["index", "name", "memory.total"])


def test_parse_query_gpu_non_numeric_memory():
    with pytest.raises(_gpu.ParseError, match="memory.total"):
        _gpu.parse_query_gpu("0, Tesla T4, lots\n", ["index", "name", "memory.total"])


def test_parse_query_gpu_accepts_units_and_blank_lines():
    gpus, driver = _gpu.parse_query_gpu("\n0, Tesla T4, 15360 MiB\n\n", ["index", "name", "memory.total"])
    assert driver is None
    assert gpus[0]["memory_total_mib"] == 15360
    assert gpus[0]["compute_capability"] == "7.5"  # from the name, no device id asked


def test_parse_query_gpu_duplicate_index():
    with pytest.raises(_gpu.ParseError, match="duplicate"):
        _gpu.parse_query_gpu("0, A\n0, B\n", ["index", "name"])


def test_parse_smi_header_variants():
    assert _gpu.parse_smi_header("| NVIDIA-SMI 580.126.20             Driver Version: 580.126.20     "
                                 "CUDA Version: 13.0     |") == {
        "smi_version": "580.126.20", "driver_version": "580.126.20", "cuda_driver_version": "13.0"}
    assert _gpu.parse_smi_header("garbage")["cuda_driver_version"] is None


def test_parse_topology_old_driver_soc_and_nic_columns():
    text = ("        GPU0    GPU1    GPU2    GPU3    mlx4_0  CPU Affinity\n"
            "GPU0     X      PIX     PHB     SOC     PHB     0-9,20-29\n"
            "GPU1    PIX      X      PHB     SOC     PHB     0-9,20-29\n"
            "GPU2    PHB     PHB      X      SOC     PHB     0-9,20-29\n"
            "GPU3    SOC     SOC     SOC      X      SOC     10-19,30-39\n"
            "mlx4_0  PHB     PHB     PHB     SOC      X\n")
    topology, nvlink = _gpu.parse_topology(text)
    assert nvlink is False
    assert topology["matrix"]["0"] == {"1": "PIX", "2": "PHB", "3": "SYS"}
    assert "mlx4_0" not in topology["matrix"]


def test_parse_topology_with_ansi_and_single_gpu():
    text = "\t\x1b[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\nGPU0\t X \t0-63\t0\t\tN/A\n"
    topology, nvlink = _gpu.parse_topology(text)
    assert topology == {"matrix": {"0": {}}, "pairs": []} and nvlink is False


@pytest.mark.parametrize("text", [
    "", "No devices were found\n", "GPU0 GPU1\nGPU0 X\n", "\tGPU0\tGPU1\nGPU0\t X \t0-19,40-59\n",
    "\tGPU0\tGPU1\nGPU0\tPHB\t X \n",
])
def test_parse_topology_garbage(text):
    with pytest.raises(_gpu.ParseError):
        _gpu.parse_topology(text)


@pytest.mark.parametrize("rc, text, state", [
    (9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
        "latest NVIDIA driver is installed and running.", "driver_not_loaded"),
    (18, "Failed to initialize NVML: Driver/library version mismatch", "driver_library_mismatch"),
    (6, "No devices were found", "no_gpu"),
    (18, "", "driver_library_mismatch"),
    (9, "", "driver_not_loaded"),
    (255, "Unknown Error", "probe_error"),
    (1, "Segmentation fault", "probe_error"),
])
def test_classify_smi_failure(rc, text, state):
    assert _gpu.classify_smi_failure(rc, text) == state


@pytest.mark.parametrize("text, expected", [
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n"
     "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n", ("550.54.14", "proprietary")),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  565.57.01  Release Build  "
     "(dvs-builder@U16-A24-9-2)  Thu Oct 10 12:15:00 UTC 2024\n", ("565.57.01", "open")),
    ("NVRM version: NVIDIA UNIX aarch64 Kernel Module  550.54.14  Thu Feb 22 01:25:25 UTC 2024\n",
     ("550.54.14", "proprietary")),
    ("", (None, None)),
    ("something else\n", (None, None)),
])
def test_parse_proc_version(text, expected):
    assert _gpu.parse_proc_version(text) == expected


def test_library_version_prefers_the_so1_target(tmp_path):
    lib = tmp_path / "usr" / "lib64"
    lib.mkdir(parents=True)
    for name in ("libnvidia-ml.so.550.54.14", "libnvidia-ml.so.535.161.08", "libnvidia-ml.so"):
        (lib / name).write_text("")
    assert _gpu.read_library_version(str(tmp_path)) == "550.54.14"  # highest without a link
    os.symlink("libnvidia-ml.so.535.161.08", str(lib / "libnvidia-ml.so.1"))
    assert _gpu.read_library_version(str(tmp_path)) == "535.161.08"
    assert _gpu.read_library_version(str(tmp_path / "nothing")) is None


@pytest.mark.parametrize("value, expected", [(12040, "12.4"), (11040, "11.4"), (13000, "13.0"), (0, None),
                                             (None, None), ("x", None)])
def test_cuda_version_from_int(value, expected):
    assert _gpu.cuda_version_from_int(value) == expected


def test_nvml_library_version():
    assert _gpu.nvml_library_version("12.550.54.14") == "550.54.14"
    assert _gpu.nvml_library_version("11.470.82.01") == "470.82.01"
    assert _gpu.nvml_library_version("12") is None


def test_pci_ignores_audio_nvswitch_and_other_vendors(tmp_path):
    case = {"pci": [
        {"bus_id": "0000:3b:00.0", "device": "0x1db6", "class": "0x030200", "driver": "vfio-pci",
         "link_speed": "2.5 GT/s PCIe", "link_width": "8"},
        {"bus_id": "0000:3b:00.1", "device": "0x10f0", "class": "0x040300"},
        {"bus_id": "0000:c1:00.0", "device": "0x1af1", "class": "0x068000"},
        {"bus_id": "0000:00:02.0", "vendor": "0x8086", "device": "0x3e92", "class": "0x030000"},
        {"bus_id": "0000:af:00.0", "device": "0xffff", "class": "0x030000", "link_speed": "Unknown"},
    ]}
    host = build_host(tmp_path, "none", case)
    readable, gpus = _gpu.read_pci(host["sysfs_root"])
    assert readable is True
    assert [gpu["pci_bus_id"] for gpu in gpus] == ["0000:3b:00.0", "0000:af:00.0"]
    assert gpus[0]["kernel_driver"] == "vfio-pci" and gpus[0]["pcie_link_gen"] == 1 and gpus[0]["pcie_link_width"] == 8
    assert gpus[1]["name"] == "NVIDIA device 0xffff" and gpus[1]["compute_capability"] is None
    assert gpus[1]["pcie_link_gen"] is None


# --------------------------------------------------------------------------------------------
# PCI ID table
# --------------------------------------------------------------------------------------------

REQUIRED_MODELS = {
    "15f7": "6.0", "15f8": "6.0", "15f9": "6.0",  # P100 PCIe 12/16 GB, SXM2
    "1db4": "7.0", "1db6": "7.0", "1db1": "7.0", "1db5": "7.0", "1df6": "7.0", "1db7": "7.0", "1db8": "7.0",
    "1eb8": "7.5",  # T4
    "2236": "8.6", "20b7": "8.0",  # A10, A30
    "20b0": "8.0", "20b1": "8.0", "20b2": "8.0", "20b5": "8.0",  # A100 40/80 SXM4/PCIe
    "27b8": "8.9", "26b5": "8.9", "26b9": "8.9",  # L4, L40, L40S
    "2330": "9.0", "2331": "9.0", "2321": "9.0",  # H100 SXM5, PCIe, NVL
    "2335": "9.0", "233b": "9.0",  # H200
}


def test_pci_table_covers_the_data_center_cards():
    for device_id, cc in REQUIRED_MODELS.items():
        entry = _gpu_models.lookup_device(device_id)
        assert entry is not None, device_id
        assert entry["compute_capability"] == cc, device_id


def test_pci_table_is_consistent():
    for device_id, entry in _gpu_models.PCI_DEVICES.items():
        assert len(device_id) == 4 and device_id == device_id.lower()
        assert _gpu_models.CC_ARCHITECTURE[entry["compute_capability"]] == entry["architecture"]
        assert entry["memory_mib"] is None or entry["memory_mib"] % 1024 == 0


def test_gpu_model_table_has_one_row_per_board_and_one_board_per_id():
    models = [row["model"] for row in _gpu_models.GPU_MODELS]
    assert len(models) == len(set(models))
    ids = [device_id for row in _gpu_models.GPU_MODELS for device_id in row["pci_ids"]]
    assert len(ids) == len(set(ids)) == len(_gpu_models.PCI_DEVICES)
    for row in _gpu_models.GPU_MODELS:
        assert row["compute_capability"] in _gpu_models.CC_ARCHITECTURE, row["model"]
        assert row["sms"] is None or 1 <= row["sms"] <= 200, row["model"]
    # every name rule points at a row
    for pattern, model in _gpu_models.MODEL_NAME_PATTERNS:
        assert model is None or model in _gpu_models.MODELS, pattern.pattern


def test_gpu_model_rows_and_family_names_agree():
    """A row's name, read by the family rules, gives the row's compute capability (where a family
    rule knows the name at all)."""
    for row in _gpu_models.GPU_MODELS:
        cc = _gpu_models.compute_capability_from_name(row["model"])
        assert cc in (None, row["compute_capability"]), row["model"]


def test_sms_by_cc_is_what_the_memory_model_read_before():
    """The memory model's per-capability SM counts (its own literal before the one table)."""
    assert _gpu_models.SMS_BY_CC == {(7, 0): 80, (7, 5): 72, (8, 0): 108, (8, 6): 84, (8, 9): 142, (9, 0): 132,
                                     (10, 0): 148}
    assert max(_gpu_models.SMS_BY_CC.values()) == 148


@pytest.mark.parametrize("value, expected", [
    ("0x1DB610DE", "1db6"), (0x1DB610DE, "1db6"), ("1db6", "1db6"), ("0x1db6", "1db6"), (0x1db6, "1db6"),
    ("0x1DB61002", None), ("zz", None), (None, None), ("", None), (True, None),
])
def test_normalize_device_id(value, expected):
    assert _gpu_models.normalize_device_id(value) == expected


@pytest.mark.parametrize("name, cc", [
    ("Tesla V100-PCIE-32GB", "7.0"), ("Tesla V100S-PCIE-32GB", "7.0"), ("Tesla V100-SXM2-16GB", "7.0"),
    ("Tesla P100-PCIE-16GB", "6.0"), ("Tesla P40", "6.1"), ("Tesla P4", "6.1"), ("Tesla T4", "7.5"),
    ("NVIDIA A100-SXM4-80GB", "8.0"), ("NVIDIA A100 80GB PCIe", "8.0"), ("NVIDIA A30", "8.0"), ("NVIDIA A10", "8.6"),
    ("NVIDIA A10G", "8.6"), ("NVIDIA A40", "8.6"), ("NVIDIA L4", "8.9"), ("NVIDIA L40S", "8.9"),
    ("NVIDIA RTX 6000 Ada Generation", "8.9"), ("Quadro RTX 6000", "7.5"), ("NVIDIA H100 80GB HBM3", "9.0"),
    ("NVIDIA H100 NVL", "9.0"), ("NVIDIA H200", "9.0"), ("NVIDIA B200", "10.0"), ("Some Unknown Card", None),
    (None, None),
])
def test_compute_capability_from_name(name, cc):
    assert _gpu_models.compute_capability_from_name(name) == cc


@pytest.mark.parametrize("cc, arch", [
    ("6.0", "Pascal"), ("6.1", "Pascal"), ("7.0", "Volta"), ("7.2", "Volta"), ("7.5", "Turing"), ("8.0", "Ampere"),
    ("8.6", "Ampere"), ("8.7", "Ampere"), ("8.9", "Ada Lovelace"), ("9.0", "Hopper"), ("10.0", "Blackwell"),
    ("12.0", "Blackwell"), ("1.0", None), (None, None),
])
def test_architecture_for(cc, arch):
    assert _gpu_models.architecture_for(cc) == arch


# --------------------------------------------------------------------------------------------
# Robustness: whatever nvidia-smi prints, the probe answers with a state, never a traceback
# --------------------------------------------------------------------------------------------

if given is None:
    def test_probe_never_raises():
        pytest.skip("hypothesis is not installed")
else:
    @settings(max_examples=150, deadline=None)
    @given(
        rc=st.sampled_from([0, 0, 0, 2, 6, 9, 15, 18, 255]),
        query=st.text(alphabet=st.sampled_from(list("0123456789abcdefX, .:[]/-\nNAV\t")), max_size=200),
        topo=st.text(max_size=200),
        header=st.text(max_size=120),
    )
    def test_probe_never_raises(rc, query, topo, header):
        def runner(argv):
            if argv[1:] == []:
                return 0, header, ""
            if argv[1:3] == ["topo", "-m"]:
                return 0, topo, ""
            return rc, query, ""

        facts = _gpu.probe(run_command=runner, nvidia_smi=NVIDIA_SMI, nvml_loader=lambda: None,
                           sysfs_root="/nonexistent-sysfs", proc_version_path="/nonexistent-proc",
                           lib_root="/nonexistent-root")
        check_shape(facts)


# --------------------------------------------------------------------------------------------
# A GPU that fell off the bus (Xid 79)
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("line, bus_id, index, message", [
    # JosephKJ/OWOD#81 (plain nvidia-smi)
    ("Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost.  Reboot the system to recover "
     "this GPU", "0000:02:00.0", None, "GPU is lost.  Reboot the system to recover this GPU"),
    # NVIDIA/nvidia-docker#1553
    ("Unable to determine the device handle for GPU 0000:09:00.0: Unknown Error", "0000:09:00.0", None,
     "Unknown Error"),
    # NVIDIA/nvidia-container-toolkit#69 (no space after GPU)
    ("Unable to determine the device handle for GPU0000:65:00.0: Unknown Error", "0000:65:00.0", None,
     "Unknown Error"),
    # NVIDIA/open-gpu-kernel-modules#1342 (R610: the index first)
    ("Unable to determine the device handle for GPU0: 0000:09:00.0: Unknown Error", "0000:09:00.0", 0,
     "Unknown Error"),
    ("\x1b[1mUnable to determine the device handle for GPU 00000000:3B:00.0: GPU is lost\x1b[0m", "0000:3b:00.0",
     None, "GPU is lost"),
])
def test_split_lost_lines_spellings(line, bus_id, index, message):
    lost, rest = _gpu.split_lost_lines("0, Tesla T4\n" + line + "\n")
    assert lost == [{"bus_id": bus_id, "index": index, "message": message, "source": "nvidia_smi"}]
    assert rest == "0, Tesla T4"


def test_split_lost_lines_leaves_other_text():
    assert _gpu.split_lost_lines("No devices were found\n") == ([], "No devices were found")
    assert _gpu.split_lost_lines("Unable to determine the device handle for GPU: oops\n")[0] == []


@pytest.mark.parametrize("rc, text, state", [
    (15, "", "gpu_lost"),
    (15, "Unable to determine the device handle for gpu: GPU is lost", "gpu_lost"),
    (1, "NVRM: GPU has fallen off the bus", "gpu_lost"),
    (15, "Segmentation fault", "probe_error"),
])
def test_classify_smi_failure_gpu_lost(rc, text, state):
    assert _gpu.classify_smi_failure(rc, text) == state


def test_lost_gpu_probes_and_message(tmp_path):
    _case, facts, _runner = run_case(tmp_path, "v100x2_one_lost")
    assert facts["msg"] == (
        "1 NVIDIA GPU(s) fell off the bus (Xid 79): 0000:3b:00.0 (GPU 0) [nvidia-smi: GPU is lost.  Reboot the "
        "system to recover this GPU]; reboot the host to bring it back, and if it happens again check the GPU's "
        "power cables, seating and cooling. 1 other GPU(s) answer via nvidia-smi: 1x Tesla V100-PCIE-32GB, compute "
        "capability 7.0; driver 550.54.14, CUDA unknown. Until the reboot a deployment on this host can use only "
        "those: set tensor_parallel_size x pipeline_parallel_size to at most 1.")
    smi = facts["probes"][1]
    assert smi["backend"] == "nvidia_smi" and smi["outcome"] == "gpu_lost"
    assert smi["detail"].startswith("1 GPU(s); 1 lost; nvidia-smi exited 15 (a GPU fell off the bus)")
    assert facts["probes"][2] == {"backend": "pci", "outcome": "gpu_lost",
                                  "detail": "2 NVIDIA display device(s), 1 not answering"}


def test_lost_cell_in_a_query_row(tmp_path):
    """A GPU lost after its handle opened: its cells read [GPU is lost]; the row is not a GPU."""
    row = "1, [GPU is lost], [GPU is lost], 00000000:D8:00.0, " + ", ".join(["[GPU is lost]"] * 9)
    healthy = _gpu_row_v100()
    answers = {"query": {"rc": 0, "stdout": healthy + "\n" + row + "\n"}, "header": {"rc": 0, "stdout": ""}}
    runner = FakeRunner("v100x2_pcie_550", answers)
    facts = _gpu.probe(run_command=runner, nvidia_smi=NVIDIA_SMI, nvml_loader=lambda: None,
                       sysfs_root=str(tmp_path / "nosys"), proc_version_path=str(tmp_path / "x"),
                       lib_root=str(tmp_path))
    check_shape(facts)
    assert facts["state"] == "gpu_lost" and facts["count"] == 1
    assert facts["lost_gpus"] == [{"bus_id": "0000:d8:00.0", "index": 1, "message": "GPU is lost",
                                   "source": "nvidia_smi"}]


def _gpu_row_v100():
    with open(os.path.join(GPU_FIXTURES, "v100x2_pcie_550", "query.csv")) as handle:
        return handle.read().splitlines()[0]


def test_nvml_one_of_two_lost(tmp_path):
    nvml = FakeNvml([v100_pcie("00000000:3B:00.0", "GPU-a"), v100_pcie("00000000:D8:00.0", "GPU-b")],
                    handle_error=(0, 15))
    _case, facts, runner = nvml_probe(tmp_path, nvml)
    check_shape(facts)
    assert runner.calls == []  # NVML answered: the healthy GPU is listed, the lost one named
    assert facts["state"] == "gpu_lost" and facts["backend"] == "nvml" and facts["present"] is False
    assert [gpu["pci_bus_id"] for gpu in facts["gpus"]] == ["0000:d8:00.0"]
    assert facts["gpus"][0]["index"] == 1
    assert facts["lost_gpus"] == [{"bus_id": "0000:3b:00.0", "index": 0, "source": "nvml",
                                   "message": "nvmlDeviceGetHandleByIndex(0): GPU is lost (NVML error 15)"}]
    assert facts["topology"] == {"matrix": {"1": {}}, "pairs": []}
    assert "1 other GPU(s) answer via NVML" in facts["msg"]


def test_nvml_gpu_lost_after_its_handle_opened(tmp_path):
    nvml = FakeNvml([v100_pcie("00000000:3B:00.0", "GPU-a"), v100_pcie("00000000:D8:00.0", "GPU-b")], lost={1})
    _case, facts, _runner = nvml_probe(tmp_path, nvml)
    check_shape(facts)
    assert facts["count"] == 1 and facts["gpus"][0]["pci_bus_id"] == "0000:3b:00.0"
    assert facts["lost_gpus"] == [{"bus_id": "0000:d8:00.0", "index": 1, "source": "nvml",
                                   "message": "nvmlDeviceGetName: GPU is lost (NVML error 15)"}]


def test_nvml_lost_at_count_lets_nvidia_smi_name_the_gpu(tmp_path):
    nvml = FakeNvml([], count_error=15)
    _case, facts, runner = nvml_probe(tmp_path, nvml, case="v100x2_one_lost")
    check_shape(facts)
    assert runner.calls[0] == "query"
    assert facts["backend"] == "nvidia_smi" and facts["state"] == "gpu_lost"
    assert facts["probes"][0]["outcome"] == "gpu_lost"
    assert [lost["bus_id"] for lost in facts["lost_gpus"]] == ["0000:3b:00.0"]


def test_nvml_lost_and_nothing_else_answers_is_gpu_lost(tmp_path):
    nvml = FakeNvml([], count_error=15)
    case = load_case("pci_rev_ff")
    facts = _gpu.probe(nvml_loader=lambda: nvml, **build_host(tmp_path, "pci_rev_ff", case))
    check_shape(facts)
    assert facts["state"] == "gpu_lost" and facts["backend"] == "pci"
    assert [lost["source"] for lost in facts["lost_gpus"]] == ["pci"]
    assert "(the driver: NVML nvmlDeviceGetCount failed: GPU is lost (NVML error 15))" in facts["msg"]


def test_driver_gpu_listed_healthy_is_not_lost_whatever_sysfs_says(tmp_path):
    case = load_case("v100x2_pcie_550")
    case["pci"][0].update(revision="0xff")
    host = build_host(tmp_path, "v100x2_pcie_550", case)
    facts = _gpu.probe(run_command=FakeRunner("v100x2_pcie_550", case["commands"]), nvidia_smi=NVIDIA_SMI,
                       nvml_loader=lambda: None, **host)
    check_shape(facts)
    assert facts["state"] == "ok" and facts["lost_gpus"] == [] and facts["count"] == 2


def test_pci_lost_gpu_reading_all_ones_is_found_by_modalias_or_driver(tmp_path):
    case = {"pci": [
        # vendor/class re-read from the dead device; the cached modalias still names it
        {"bus_id": "0000:3b:00.0", "vendor": "0xffff", "device": "0xffff", "class": "0xffffff",
         "modalias": "pci:v000010DEd00001DB6sv000010DEsd00001212bc03sc02i00", "config_hex": "ffffffff"},
        # the same without modalias, bound to nvidia
        {"bus_id": "0000:5e:00.0", "vendor": "0xffff", "device": "0xffff", "class": "0xffffff", "driver": "nvidia"},
        # its audio function: lost too, but not a GPU
        {"bus_id": "0000:5e:00.1", "vendor": "0xffff", "device": "0xffff", "class": "0xffffff",
         "modalias": "pci:v000010DEd000010F0sv000010DEsd00001212bc04sc03i00", "driver": "snd_hda_intel"},
        # another vendor's dead device: not ours
        {"bus_id": "0000:86:00.0", "vendor": "0xffff", "device": "0xffff", "class": "0xffffff"},
        # a notebook GPU powered off by the kernel reads all ones too, and is not lost
        {"bus_id": "0000:af:00.0", "device": "0x1db6", "class": "0x030200", "revision": "0xff",
         "power_state": "D3cold"},
        {"bus_id": "0000:d8:00.0", "device": "0x1db6", "class": "0x030200", "revision": "0xa1",
         "config_hex": "de10b61d"},
    ]}
    host = build_host(tmp_path, "none", case)
    readable, gpus, lost = _gpu.read_pci_devices(host["sysfs_root"])
    assert readable is True
    assert [(item["bus_id"], item["index"], item["source"]) for item in lost] == [
        ("0000:3b:00.0", 0, "pci"), ("0000:5e:00.0", 1, "pci")]
    assert lost[0]["message"] == ("the device no longer answers on the PCI bus (vendor 0xffff, class 0xffffff, "
                                  "config space all 0xff; lspci shows it as rev ff)")
    assert [(gpu["pci_bus_id"], gpu["index"]) for gpu in gpus] == [("0000:af:00.0", 2), ("0000:d8:00.0", 3)]
    assert _gpu.read_pci(host["sysfs_root"]) == (True, gpus)


def test_merge_lost_fills_bus_ids_and_indices():
    healthy = [dict(_gpu.new_gpu("nvml", 1), pci_bus_id="0000:5e:00.0")]
    pci_gpus = [dict(_gpu.new_gpu("pci", 1), pci_bus_id="0000:5e:00.0"),
                dict(_gpu.new_gpu("pci", 2), pci_bus_id="0000:86:00.0")]
    pci_lost = [_gpu.new_lost("0000:3b:00.0", 0, "dead", "pci")]
    nvml_lost = [_gpu.new_lost(None, 0, "GPU is lost", "nvml")]
    # one unnamed NVML GPU, one dead PCI device: that is it, with NVML's words
    assert _gpu.merge_lost(nvml_lost, healthy, pci_gpus, pci_lost) == [
        {"bus_id": "0000:3b:00.0", "index": 0, "message": "GPU is lost", "source": "nvml"}]
    # a dead PCI device the driver did not mention is added; a listed GPU never is
    assert _gpu.merge_lost([], healthy, pci_gpus, pci_lost + [_gpu.new_lost("0000:5e:00.0", 1, "x", "pci")]) == [
        {"bus_id": "0000:3b:00.0", "index": 0, "message": "dead", "source": "pci"}]
    # two unnamed GPUs and one candidate: no guess, and the dead device is not counted a third time
    two = [_gpu.new_lost(None, 0, "a", "nvml"), _gpu.new_lost(None, 2, "b", "nvml")]
    assert [(item["bus_id"], item["index"]) for item in _gpu.merge_lost(two, healthy, pci_gpus[:1], pci_lost)] == [
        (None, 0), (None, 2)]
    # indices that disagree with PCI order are not inferred
    odd = [dict(_gpu.new_gpu("nvml", 0), pci_bus_id="0000:5e:00.0")]
    assert _gpu.merge_lost([_gpu.new_lost("0000:3b:00.0", None, "x", "nvidia_smi")], odd, [], [])[0]["index"] is None
