# -*- coding: utf-8 -*-
# PRIVATE to the labfleet.vllm collection. No compatibility promise; do not import from other
# collections. The gpu_facts module is its public face.
#
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Read a host's NVIDIA GPUs: NVML, nvidia-smi, or the PCI bus.

Everything here is a plain function without Ansible imports. Side effects are limited to what is
passed in: commands run through a ``run_command(argv) -> (rc, stdout, stderr)`` callable, NVML is
the imported ``pynvml`` module object (or a fake), and files are read under root paths given as
parameters, so unit tests can feed recorded answers.

Output formats handled (facts.md section 7):

* ``nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits``: one comma-separated line per
  GPU; unavailable values print as ``[N/A]``, ``[Not Supported]`` and the like.
* ``nvidia-smi`` (no arguments): the banner ``NVIDIA-SMI x  Driver Version: x  CUDA Version: 12.4``.
* ``nvidia-smi topo -m``: a matrix with ``GPU<n>`` rows and columns; cells ``X``, ``NV#``, ``PIX``,
  ``PXB``, ``PHB``, ``NODE``, ``SYS`` (``SOC`` in old drivers, read as ``SYS``); NIC rows and
  the CPU/NUMA affinity columns are ignored.
* ``/proc/driver/nvidia/version``: ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14 ...``
  (or ``... Open Kernel Module for x86_64  550.54.14 ...``).
* ``libnvidia-ml.so.<version>`` file names in the usual library directories.
* ``<sysfs>/bus/pci/devices/*/{vendor,device,class}`` for vendor 0x10de, class 0x03xxxx.
* A GPU that fell off the bus (Xid 79): nvidia-smi's ``Unable to determine the device handle for
  GPU 0000:02:00.0: GPU is lost.  Reboot the system to recover this GPU`` (or ``...: Unknown Error``)
  lines among the CSV rows, NVML's NVML_ERROR_GPU_IS_LOST (15), and a PCI config space that reads
  all ones (``lspci`` shows ``rev ff``). Such GPUs go to ``lost_gpus``, never to ``gpus``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import stat

from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._gpu_models import (
    NVIDIA_VENDOR_ID,
    architecture_for,
    compute_capability_from_name,
    lookup_device,
    normalize_device_id,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._policy import cuda_version_from_nvml

# States (machine-readable; documented in the module's RETURN block). Never renamed.
STATE_OK = "ok"
STATE_NO_GPU = "no_gpu"
STATE_DRIVER_NOT_LOADED = "driver_not_loaded"
STATE_MISMATCH = "driver_library_mismatch"
STATE_PROBE_ERROR = "probe_error"
STATE_GPU_LOST = "gpu_lost"
STATES = (STATE_OK, STATE_NO_GPU, STATE_DRIVER_NOT_LOADED, STATE_MISMATCH, STATE_PROBE_ERROR, STATE_GPU_LOST)

# Where a lost GPU was seen (lost_gpus[].source): the backend names the module already uses.
LOST_SOURCES = ("nvidia_smi", "nvml", "pci")

BACKENDS = ("auto", "nvml", "nvidia_smi", "pci")

# Defaults for the host paths; read at call time so tests can point them elsewhere.
DEFAULT_SYSFS_ROOT = "/sys"
DEFAULT_PROC_VERSION_PATH = "/proc/driver/nvidia/version"
DEFAULT_LIB_ROOT = "/"
LIB_DIRS = (
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib64",
    "usr/lib",
    "lib/x86_64-linux-gnu",
    "lib64",
    "usr/local/nvidia/lib64",
    "usr/local/nvidia/lib",
)

# Queried in this order. "index" and "name" are required; any other field the installed
# nvidia-smi rejects ('Field "compute_cap" is not a valid field to query.', R470) is dropped and
# the query retried. pcie.link.gen.current is deprecated in newer drivers in favour of
# pcie.link.gen.gpucurrent but still answers, and unlike the new name it exists on old drivers.
QUERY_FIELDS = (
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "pci.device_id",
    "driver_version",
    "compute_cap",
    "memory.total",
    "memory.free",
    "persistence_mode",
    "ecc.mode.current",
    "pcie.link.gen.current",
    "pcie.link.width.current",
)
REQUIRED_QUERY_FIELDS = ("index", "name")
QUERY_FORMAT = "--format=csv,noheader,nounits"

# NVML return codes (nvml.h; same numbers as pynvml's NVML_ERROR_*). Literal ints on purpose: the
# tests pass a fake pynvml module, and some constants in nvidia-ml-py are broken (see
# NVML_P2P_CAPS_INDEX_READ below).
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_FEATURE_ENABLED = 1
NVML_NVLINK_MAX_LINKS = 18  # NV18 is the most any GPU reports; the API allows up to 36.
# nvidia-ml-py 13.615.71 defines NVML_P2P_CAPS_INDEX_READ = 0, (a tuple); use plain ints.
NVML_P2P_CAPS_INDEX_NVLINK = 2
NVML_P2P_STATUS_OK = 0
NVML_TOPOLOGY_LINKS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}

# nvidia-smi exit codes match the NVML return codes for these cases.
SMI_RC_NO_DEVICES = 6
SMI_RC_DRIVER_NOT_LOADED = 9
SMI_RC_MISMATCH = 18
# nvidia-smi(1) "RETURN VALUE": 15 "GPU has fallen off the bus or has otherwise become inaccessible"
# (stored copies of the man page, see tests/unit/fixtures/gpu/README.md; confidence: third_party).
SMI_RC_GPU_LOST = 15

# Bounds on what a driver may answer before the answer counts as nonsense (a broken driver, a
# hostile or fake nvidia-smi). Values outside are never reported as facts: the backend that said
# them is a probe_error, like any output this module cannot parse.
#
# MAX_GPUS: the most GPUs one host may list. The largest single-host NVIDIA systems carry 16 (DGX-2,
# HGX-2); DGX/HGX H100, H200 and B200 carry 8; a GB200 NVL72 compute tray, one host, carries 4
# (confidence: third_party, NVIDIA's product pages). 64 leaves room, and keeps the topology (one
# entry per pair, N*(N-1)/2) at most 2016 pairs.
MAX_GPUS = 64
# An nvidia-smi answer longer than this is not the output of a host with MAX_GPUS GPUs (a query row
# is about 200 characters, a topo -m row about 8 per GPU).
MAX_OUTPUT_CHARS = 1024 * 1024
# Compute capability: major 1 to 20, minor 0 to 9. Shipping GPUs reach 12.x (Blackwell; CUDA 12.8
# and 13 release notes); 20 leaves room for generations to come (confidence: inferred).
CC_MAJOR_RANGE = (1, 20)
# Board memory in MiB: the largest GPU (B300) has 288 GB; 2**24 MiB is 16 TiB (confidence: inferred).
MAX_MEMORY_MIB = 2 ** 24
PCIE_GEN_RANGE = (1, 8)      # PCIe 1.0 to 6.0 exist; 7.0 is specified (confidence: third_party, PCI-SIG).
PCIE_WIDTH_RANGE = (1, 32)   # x1 to x32 are the link widths the PCIe specification defines.
# NVML's CUDA driver version, major * 1000 + minor * 10: CUDA 1.0 to 99.x.
CUDA_INT_RANGE = (1000, 99999)

_NA_VALUES = ("", "n/a", "na", "none", "not supported", "unknown error", "unknown")
# Every pattern below matches ASCII digits only ([0-9], never \d, which also takes "５" (U+FF15)
# and other Unicode digits that int() would then accept), and full values (fullmatch, never a
# prefix: "550.54.14garbage" is not a driver version).
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_INVALID_FIELD_RE = re.compile(r'Field "([^"]+)" is not a valid field to query', re.I | re.A)
_DRIVER_VERSION_RE = re.compile(r"[0-9]{1,5}(?:\.[0-9]{1,5}){1,3}")
_VERSION_RE = re.compile(r"(?<![0-9A-Za-z.])([0-9]{1,5}(?:\.[0-9]{1,5}){1,3})(?![0-9A-Za-z.])")
_BUS_ID_RE = re.compile(r"([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])")
_CC_RE = re.compile(r"([0-9]{1,2})\.([0-9])")
_INT_RE = re.compile(r"[+-]?[0-9]{1,18}(?:\.[0-9]{1,9})?")
_GPU_TOKEN_RE = re.compile(r"GPU([0-9]{1,4})")
_TOPO_CELL_RE = re.compile(r"X|SYS|SOC|NODE|PHB|PXB|PIX|NV[0-9]{1,3}|[A-Z][A-Z0-9]{1,5}")
_LIB_NAME_RE = re.compile(r"libnvidia-ml\.so\.([0-9]{1,5}\.[0-9]{1,5}(?:\.[0-9]{1,5})?)")
_PCIE_SPEED_GEN = ((2.5, 1), (5.0, 2), (8.0, 3), (16.0, 4), (32.0, 5), (64.0, 6))

# nvidia-smi's line for a GPU whose handle NVML cannot open (confidence: third_party, quoted in):
#   "Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost.  Reboot the system to
#    recover this GPU"                                            JosephKJ/OWOD#81 (plain nvidia-smi)
#   "Unable to determine the device handle for GPU 0000:09:00.0: Unknown Error"
#                                                                 NVIDIA/nvidia-docker#1553 (-a -i 0)
#   "Unable to determine the device handle for GPU0000:65:00.0: Unknown Error"
#                                                                 NVIDIA/nvidia-container-toolkit#69
#   "Unable to determine the device handle for GPU0: 0000:09:00.0: Unknown Error"
#                                                                 NVIDIA/open-gpu-kernel-modules#1342
# "GPU is lost" is nvmlErrorString(NVML_ERROR_GPU_IS_LOST); "Unknown Error" is what older drivers
# print for the same Xid 79 state (nvidia-docker#1553: "the GPU ... drop[ped] off the bus").
_LOST_LINE_RE = re.compile(
    r"^\s*Unable to determine the device handle for GPU\s*(?:([0-9]{1,4})\s*:\s*)?"
    r"([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}\.[0-7])\s*:\s*(.*?)\s*$",
    re.I | re.A,
)
_LOST_CELL = "[gpu is lost]"  # a --query-gpu cell for a GPU lost after its handle was opened (inferred)
_MODALIAS_RE = re.compile(r"^pci:v0000([0-9A-Fa-f]{4})d0000([0-9A-Fa-f]{4}).*bc([0-9A-Fa-f]{2})", re.I | re.A)


class ParseError(ValueError):
    """Output that does not have the expected shape."""


class ProbeFailure(Exception):
    """A backend answered, and the answer is a host state other than ok.

    ``unavailable`` marks the backend itself as missing (e.g. libnvidia-ml.so not found), so
    backend=auto goes on to the next one.
    """

    def __init__(self, state, detail, unavailable=False):
        super(ProbeFailure, self).__init__(detail)
        self.state = state
        self.detail = detail
        self.unavailable = unavailable
        self.library_version = None  # from "NVML library version: x" in a mismatch message


class BackendUnavailable(Exception):
    """The user forced a backend that this host cannot use (the module turns it into fail_json)."""


# --------------------------------------------------------------------------------------------
# Small value helpers
# --------------------------------------------------------------------------------------------

def _text(value):
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return str(value)


def clean_value(value):
    """Strip a raw value; return None for the 'no data' spellings ([N/A], [Not Supported], ...)."""
    value = _text(value)
    if value is None:
        return None
    value = value.strip()
    inner = value
    if inner.startswith("[") and inner.endswith("]"):
        # Every bracketed nvidia-smi value means "no value": [N/A], [Not Supported],
        # [Unknown Error], [Insufficient Permissions], [GPU requires reset], ...
        return None
    if inner.lower() in _NA_VALUES:
        return None
    return value


def is_ascii(text):
    """True when every character of ``text`` is ASCII (str.isascii is Python 3.7+)."""
    return all(ord(char) < 128 for char in text)


def has_control(text):
    """True when ``text`` holds a C0 control character other than a tab, DEL or a C1 control."""
    return any((ord(char) < 32 and char != "\t") or 127 <= ord(char) < 160 for char in text)


def to_int(value, what="value", minimum=None, maximum=None):
    """An integer from ASCII digits (an optional fraction is cut off: "16.0" -> 16), within
    [minimum, maximum] when given; None for the no-data spellings. ParseError naming ``what``
    otherwise: "５", "1_000", "nan", "inf" and "1e400" are not numbers here, whatever int() or
    float() would make of them."""
    value = clean_value(value)
    if value is None:
        return None
    text = value
    for unit in (" MiB", "MiB", " %", "%"):
        if text.endswith(unit):
            text = text[: -len(unit)].strip()
    if not _INT_RE.fullmatch(text):
        raise ParseError("%s is not a number: %r" % (what, _clip(value)))
    number = int(text.split(".", 1)[0])
    if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        raise ParseError("%s %d is outside %s..%s" % (what, number, minimum, maximum))
    return number


def sane_int(value, what, minimum, maximum):
    """An int answered by NVML (not a bool, float or string), within [minimum, maximum]; ParseError
    naming ``what`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParseError("%s is not an integer: %s" % (what, _clip(repr(value))))
    if not minimum <= value <= maximum:
        raise ParseError("%s %d is outside %d..%d" % (what, value, minimum, maximum))
    return value


def sane_driver_version(value, what="driver version"):
    """A driver version like 550.54.14 (ASCII digits, 2 to 4 parts, nothing before or after), or
    None for the no-data spellings; ParseError otherwise ("550.54.14garbage", "550.54.14\\n; rm")."""
    value = clean_value(value)
    if value is None:
        return None
    if not _DRIVER_VERSION_RE.fullmatch(value):
        raise ParseError("not a %s: %r (expected digits and dots like 550.54.14)" % (what, _clip(value)))
    return value


def sane_text(value, what, limit=256):
    """A text value from the driver (name, UUID, ECC mode): None for the no-data spellings;
    ParseError when it holds control characters or is longer than ``limit``."""
    value = clean_value(value)
    if value is None:
        return None
    if has_control(value) or len(value) > limit:
        raise ParseError("%s %r holds control characters or is longer than %d characters" % (what, _clip(value), limit))
    return value


def _clip(text, limit=80):
    text = str(text)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _printable(text, limit=200):
    """Driver words for a message: control characters as "?", at most ``limit`` characters."""
    text = "".join("?" if has_control(char) or char == "\t" else char for char in (text or ""))
    return _clip(text.strip(), limit)


def to_enabled(value):
    """'Enabled' -> True, 'Disabled' -> False, anything else -> None."""
    value = clean_value(value)
    if value is None:
        return None
    lowered = value.lower()
    if lowered.startswith("enabled"):
        return True
    if lowered.startswith("disabled"):
        return False
    return None


def _full_match(pattern, value, problem):
    """The match of ``pattern`` on the whole cleaned ``value``; None for the no-data spellings;
    ParseError ``problem`` (a %r format for the value) for anything else."""
    value = clean_value(value)
    if value is None:
        return None
    match = pattern.fullmatch(value)
    if not match:
        raise ParseError(problem % _clip(value))
    return match


def normalize_bus_id(value):
    """'00000000:3B:00.0' (NVML / nvidia-smi) or '0000:3b:00.0' (sysfs) -> '0000:3b:00.0'."""
    match = _full_match(_BUS_ID_RE, value, "not a PCI bus id: %r")
    if match is None:
        return None
    domain, bus, device, function = match.groups()
    return "%04x:%02x:%02x.%s" % (int(domain, 16), int(bus, 16), int(device, 16), function)


def normalize_cc(value):
    """"7.0" -> "7.0"; None for the no-data spellings. ParseError for anything but ASCII
    major.minor with the major in CC_MAJOR_RANGE ("99.9", "-1.0", "7.0.1", "７.0")."""
    match = _full_match(_CC_RE, value, "not a compute capability: %r (expected major.minor like 7.0)")
    if match is None:
        return None
    return format_cc(int(match.group(1)), int(match.group(2)))


def format_cc(major, minor):
    """"major.minor" for ints within CC_MAJOR_RANGE and 0..9; ParseError otherwise."""
    low, high = CC_MAJOR_RANGE
    if not (low <= major <= high and 0 <= minor <= 9):
        raise ParseError("compute capability %d.%d is outside %d.0..%d.9, which no GPU reports" % (major, minor, low, high))
    return "%d.%d" % (major, minor)


def cuda_version_from_int(value):
    """NVML's 12040 -> '12.4' (decoded by _policy.cuda_version_from_nvml)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and value.strip() and all(char in "0123456789" for char in value.strip()) \
            and len(value.strip()) <= 6:
        number = int(value.strip())
    else:
        return None
    if not CUDA_INT_RANGE[0] <= number <= CUDA_INT_RANGE[1]:
        return None
    return "%d.%d" % cuda_version_from_nvml(number)


def _version_key(version):
    return tuple(int(part) for part in version.split("."))


def _summary(text, limit=300):
    """Non-empty lines joined with ' / ', for messages."""
    lines = [line.strip() for line in (text or "")[:MAX_OUTPUT_CHARS].splitlines() if line.strip()]
    joined = "".join("?" if has_control(char) else char for char in " / ".join(lines)[:limit + 1])
    if len(joined) > limit:
        joined = joined[: limit - 3] + "..."
    return joined


def new_gpu(source, index=None):
    """A GPU record with every documented key present."""
    return {
        "index": index,
        "name": None,
        "uuid": None,
        "pci_bus_id": None,
        "pci_device_id": None,
        "compute_capability": None,
        "architecture": None,
        "memory_total_mib": None,
        "memory_free_mib": None,
        "persistence_mode": None,
        "ecc_mode": None,
        "pcie_link_gen": None,
        "pcie_link_width": None,
        "kernel_driver": None,
        "source": source,
    }


def new_lost(bus_id, index, message, source):
    """A lost_gpus entry: a GPU that fell off the bus (Xid 79), with the words that said so."""
    return {"bus_id": bus_id, "index": index, "message": message, "source": source}


def complete_gpu(gpu):
    """Fill compute capability / architecture from the PCI table or the name when missing."""
    entry = lookup_device(gpu.get("pci_device_id"))
    if gpu.get("compute_capability") is None:
        name = gpu.get("name")
        if entry is not None:
            gpu["compute_capability"] = entry["compute_capability"]
        elif name and is_ascii(name):  # the name patterns use \d, which takes non-ASCII digits too
            gpu["compute_capability"] = compute_capability_from_name(name)
    if gpu.get("architecture") is None:
        gpu["architecture"] = architecture_for(gpu.get("compute_capability"))
        if gpu["architecture"] is None and entry is not None:
            gpu["architecture"] = entry["architecture"]
    return gpu


# --------------------------------------------------------------------------------------------
# nvidia-smi parsers
# --------------------------------------------------------------------------------------------

def parse_query_gpu(text, fields):
    """Parse ``--query-gpu=<fields> --format=csv,noheader,nounits`` output.

    Returns ``(gpus, driver_version)``; raises ParseError when a line does not have one value per
    field, a value has the wrong type or is out of its plausible range, the output lists more than
    MAX_GPUS GPUs, or two GPUs share an index, a PCI bus ID or a UUID.
    """
    fields = list(fields)
    gpus = []
    driver_versions = []
    text = _ANSI_RE.sub("", _text(text) or "")
    if len(text) > MAX_OUTPUT_CHARS:
        raise ParseError("%d characters of output, more than a host with at most %d GPUs prints"
                         % (len(text), MAX_GPUS))
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) > MAX_GPUS:
        raise ParseError("%d GPU lines; this probe handles at most %d GPUs per host" % (len(lines), MAX_GPUS))
    for line in lines:
        if has_control(line):
            raise ParseError("control character in %r" % _clip(line.strip()))
        values = [part.strip() for part in line.split(",")]
        if len(values) != len(fields):
            raise ParseError(
                "expected %d comma-separated values, got %d in %r" % (len(fields), len(values), _clip(line.strip()))
            )
        raw = dict(zip(fields, values))
        gpu = new_gpu("nvidia_smi")
        gpu["index"] = to_int(raw.get("index"), "index", 0, MAX_GPUS - 1)
        if gpu["index"] is None:
            raise ParseError("GPU line without an index: %r" % _clip(line.strip()))
        gpu["name"] = sane_text(raw.get("name"), "name")
        gpu["uuid"] = sane_text(raw.get("uuid"), "uuid", 96)
        gpu["pci_bus_id"] = normalize_bus_id(raw.get("pci.bus_id"))
        if "pci.device_id" in raw:
            device_raw = clean_value(raw.get("pci.device_id"))
            gpu["pci_device_id"] = None
            if device_raw is not None:
                device_id = normalize_device_id(device_raw)
                if device_id is None:
                    raise ParseError("not a PCI device id: %r" % _clip(device_raw))
                gpu["pci_device_id"] = "0x" + device_id
        gpu["compute_capability"] = normalize_cc(raw.get("compute_cap"))
        gpu["memory_total_mib"] = to_int(raw.get("memory.total"), "memory.total", 1, MAX_MEMORY_MIB)
        gpu["memory_free_mib"] = to_int(raw.get("memory.free"), "memory.free", 0, gpu["memory_total_mib"]
                                        if gpu["memory_total_mib"] is not None else MAX_MEMORY_MIB)
        gpu["persistence_mode"] = to_enabled(raw.get("persistence_mode"))
        gpu["ecc_mode"] = sane_text(raw.get("ecc.mode.current"), "ecc.mode.current", 32)
        gpu["pcie_link_gen"] = to_int(raw.get("pcie.link.gen.current"), "pcie.link.gen.current", *PCIE_GEN_RANGE)
        gpu["pcie_link_width"] = to_int(raw.get("pcie.link.width.current"), "pcie.link.width.current",
                                        *PCIE_WIDTH_RANGE)
        driver = sane_driver_version(raw.get("driver_version"))
        if driver is not None:
            driver_versions.append(driver)
        gpus.append(complete_gpu(gpu))
    check_unique(gpus)
    if len(set(driver_versions)) > 1:
        raise ParseError("the GPUs report different driver versions %s; one driver serves them all"
                         % ", ".join(sorted(set(driver_versions))))
    return gpus, (driver_versions[0] if driver_versions else None)


def check_unique(gpus):
    """ParseError naming the value when two GPUs share an index, a PCI bus ID or a UUID (each GPU
    has its own: two rows with one bus ID are one GPU counted twice, or nonsense)."""
    for key, label in (("index", "index"), ("pci_bus_id", "PCI bus ID"), ("uuid", "UUID")):
        seen = {}
        for gpu in gpus:
            value = gpu.get(key)
            if value is None:
                continue
            if value in seen:
                if key == "index":
                    raise ParseError("duplicate GPU indices: %r" % [g["index"] for g in gpus])
                raise ParseError("duplicate %s %s: reported by GPU %s and GPU %s"
                                 % (label, value, seen[value], gpu.get("index")))
            seen[value] = gpu.get("index")


def parse_smi_header(text):
    """Versions from the banner of plain ``nvidia-smi``.

    Returns a dict with ``smi_version``, ``driver_version`` and ``cuda_driver_version`` (each None
    when absent; ``CUDA Version: N/A`` gives None). A version followed by anything but a space, a
    "|" or the end of the line ("550.54.14garbage") is not taken: it stays None (unknown).
    """
    text = _ANSI_RE.sub("", _text(text) or "")[:MAX_OUTPUT_CHARS]
    result = {"smi_version": None, "driver_version": None, "cuda_driver_version": None}
    end = r"(?=[ \t|]|\r?$)"
    for key, pattern in (
        ("smi_version", r"NVIDIA-SMI[ \t]+([0-9]{1,5}(?:\.[0-9]{1,5}){1,3})" + end),
        ("driver_version", r"Driver Version:[ \t]*([0-9]{1,5}(?:\.[0-9]{1,5}){1,3})" + end),
        ("cuda_driver_version", r"CUDA Version:[ \t]*([0-9]{1,2}\.[0-9]{1,2})" + end),
    ):
        match = re.search(pattern, text, re.M)
        if match:
            result[key] = match.group(1)
    return result


def _topology_from_matrix(matrix):
    """Add ``pairs`` and ``nvlink`` to a {"0": {"1": "PHB"}} matrix."""
    keys = sorted(matrix, key=int)
    pairs = []
    for pos, a in enumerate(keys):
        for b in keys[pos + 1:]:
            link = matrix[a].get(b)
            if link is None:
                link = matrix[b].get(a)
            pairs.append({"a": int(a), "b": int(b), "link": link})
    nvlink = any(pair["link"] is not None and pair["link"].startswith("NV") for pair in pairs)
    return {"matrix": matrix, "pairs": pairs}, nvlink


def empty_topology(indices=()):
    topology, _nvlink = _topology_from_matrix(dict((str(index), {}) for index in indices))
    return topology


def parse_topology(text):
    """Parse ``nvidia-smi topo -m``.

    Returns ``(topology, nvlink)`` where topology is
    ``{"matrix": {"0": {"1": "PHB"}}, "pairs": [{"a": 0, "b": 1, "link": "PHB"}]}``.
    Raises ParseError when there is no GPU matrix, a cell does not look like a link code, or the
    matrix has more than MAX_GPUS GPU columns or rows (or names one twice).
    """
    text = _ANSI_RE.sub("", _text(text) or "")
    if len(text) > MAX_OUTPUT_CHARS:
        raise ParseError("%d characters of topology, more than a host with at most %d GPUs prints"
                         % (len(text), MAX_GPUS))
    lines = text.splitlines()
    header = None
    start = 0
    for pos, line in enumerate(lines):
        tokens = line.split()
        if any(_GPU_TOKEN_RE.fullmatch(token) for token in tokens):
            header = tokens  # the first line naming a GPU is the column header
            start = pos + 1
            break
    if header is None:
        raise ParseError("no GPU column header in the topology output")
    columns = []
    for token in header:
        if token in ("CPU", "NUMA", "GPU", "Affinity", "ID"):
            break
        columns.append(token)
    gpu_columns = dict((pos, int(name[3:])) for pos, name in enumerate(columns) if _GPU_TOKEN_RE.fullmatch(name))
    if len(gpu_columns) > MAX_GPUS:
        raise ParseError("%d GPU columns; this probe handles at most %d GPUs per host" % (len(gpu_columns), MAX_GPUS))
    if len(set(gpu_columns.values())) != len(gpu_columns):
        raise ParseError("a GPU column appears twice in the topology header")
    matrix = {}
    for line in lines[start:]:
        tokens = line.split()
        if not tokens:
            continue
        if tokens[0].rstrip(":") == "Legend":
            break
        row = _GPU_TOKEN_RE.fullmatch(tokens[0])
        if not row:
            continue  # NIC rows (NIC0, mlx5_0, ...) are not GPU pairs
        if str(int(row.group(1))) in matrix or len(matrix) >= MAX_GPUS:
            raise ParseError("topology row %r appears twice, or more than %d GPU rows" % (_clip(tokens[0]), MAX_GPUS))
        values = tokens[1:1 + len(columns)]
        if len(values) < len(columns):
            raise ParseError("topology row %r has %d cells, expected %d" % (tokens[0], len(values), len(columns)))
        a = int(row.group(1))
        cells = {}
        for pos, value in enumerate(values):
            if pos not in gpu_columns:
                continue
            if not _TOPO_CELL_RE.fullmatch(value):
                raise ParseError("unexpected topology cell %r in row %r" % (_clip(value), tokens[0]))
            b = gpu_columns[pos]
            if b == a:
                continue
            if value == "X":
                raise ParseError("GPU%d is marked as itself in column GPU%d" % (a, b))
            cells[str(b)] = "SYS" if value == "SOC" else value
        matrix[str(a)] = cells
    if not matrix:
        raise ParseError("no GPU rows in the topology output")
    return _topology_from_matrix(matrix)


def split_lost_lines(text):
    """Take nvidia-smi's "Unable to determine the device handle for GPU <bus id>: <why>" lines out.

    Returns ``(lost, rest)``: lost is a list of lost_gpus entries (source nvidia_smi, index from
    the "GPU<n>: <bus id>" form or None, message the words after the bus ID), rest the other lines.
    """
    lost = []
    rest = []
    seen = set()
    for line in _ANSI_RE.sub("", _text(text) or "").splitlines():
        match = _LOST_LINE_RE.match(line)
        if not match:
            rest.append(line)
            continue
        bus_id = normalize_bus_id(match.group(2))
        if bus_id in seen:
            continue  # the same line on stdout and stderr
        seen.add(bus_id)
        index = int(match.group(1)) if match.group(1) is not None else None
        if index is not None and index >= MAX_GPUS:
            index = None  # not an index nvidia-smi gives on a host this probe handles
        lost.append(new_lost(bus_id, index, _printable(match.group(3)) or "Unknown Error", "nvidia_smi"))
    return lost, "\n".join(rest)


def _lost_rows(text, fields):
    """CSV rows whose cells say "[GPU is lost]" (the handle opened, then the GPU went away).

    Returns ``(lost, rest)`` like split_lost_lines. Rows without an index or bus ID stay in rest
    (and fail the parse, as any malformed row does).
    """
    lost = []
    rest = []
    fields = list(fields)
    for line in (text or "").splitlines():
        values = [part.strip() for part in line.split(",")]
        if len(values) != len(fields) or _LOST_CELL not in [value.lower() for value in values]:
            rest.append(line)
            continue
        raw = dict(zip(fields, values))
        try:
            index = to_int(raw.get("index"), "index", 0, MAX_GPUS - 1)
            bus_id = normalize_bus_id(raw.get("pci.bus_id"))
        except ParseError:
            rest.append(line)
            continue
        if bus_id is None:
            rest.append(line)
            continue
        lost.append(new_lost(bus_id, index, "GPU is lost", "nvidia_smi"))
    return lost, "\n".join(rest)


def classify_smi_failure(rc, text):
    """Map a failed nvidia-smi call (exit code + combined output) to a host state."""
    lowered = (text or "").lower()
    if "version mismatch" in lowered:
        return STATE_MISMATCH
    if "gpu is lost" in lowered or "fallen off the bus" in lowered:
        return STATE_GPU_LOST
    if "couldn't communicate with the nvidia driver" in lowered or "driver is not loaded" in lowered:
        return STATE_DRIVER_NOT_LOADED
    if "couldn't find libnvidia-ml.so" in lowered or "nvml shared library not found" in lowered:
        return STATE_DRIVER_NOT_LOADED
    if "no devices were found" in lowered:
        return STATE_NO_GPU
    if not lowered.strip():
        if rc == SMI_RC_MISMATCH:
            return STATE_MISMATCH
        if rc == SMI_RC_DRIVER_NOT_LOADED:
            return STATE_DRIVER_NOT_LOADED
        if rc == SMI_RC_NO_DEVICES:
            return STATE_NO_GPU
        if rc == SMI_RC_GPU_LOST:
            return STATE_GPU_LOST
    return STATE_PROBE_ERROR


def parse_nvml_library_line(text):
    """'NVML library version: 550.90' (printed by newer nvidia-smi on a mismatch) -> '550.90'."""
    match = re.search(r"NVML library version:[ \t]*([0-9]{1,5}(?:\.[0-9]{1,5}){1,3})(?![0-9A-Za-z.])",
                      (_text(text) or "")[:MAX_OUTPUT_CHARS])
    return match.group(1) if match else None


# --------------------------------------------------------------------------------------------
# Kernel module and user-space library versions
# --------------------------------------------------------------------------------------------

def parse_proc_version(text):
    """Parse /proc/driver/nvidia/version. Returns ``(version, module_type)`` or ``(None, None)``.

    module_type is ``open`` for the open GPU kernel modules, else ``proprietary``.
    """
    for line in (_text(text) or "").splitlines():
        if not line.startswith("NVRM version:"):
            continue
        tail = line.split("Kernel Module", 1)[-1]
        match = _VERSION_RE.search(tail)
        if not match:
            return None, None
        module_type = "open" if "open kernel module" in line.lower() else "proprietary"
        return match.group(1), module_type
    return None, None


def read_small_file(path, limit=4096):
    """At most ``limit`` bytes of ``path`` when it is a regular file (procfs and sysfs attributes
    are); None when it is missing, unreadable or anything else. A FIFO or a device is never opened
    (opening a FIFO waits for a writer, /dev/zero never ends), and the read is bounded."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except (IOError, OSError, ValueError):
        return None
    chunks = []
    size = 0
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        while size < limit:
            chunk = os.read(fd, limit - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except (IOError, OSError):
        return None
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_proc_version(path):
    raw = read_small_file(path, 65536)
    if raw is None:
        return None, None
    return parse_proc_version(raw.decode("utf-8", "replace"))


def library_versions_from_names(names):
    """Versions (sorted, highest last) from file names like ``libnvidia-ml.so.550.54.14``."""
    found = set()
    for name in names:
        match = _LIB_NAME_RE.fullmatch(os.path.basename(name))
        if match:
            found.add(match.group(1))
    return sorted(found, key=_version_key)


def read_library_version(root=None, lib_dirs=LIB_DIRS):
    """Version of the user-space NVML library on disk, or None.

    Prefers the file ``libnvidia-ml.so.1`` points to (what the loader uses); otherwise the highest
    ``libnvidia-ml.so.<version>`` found.
    """
    root = DEFAULT_LIB_ROOT if root is None else root
    candidates = []
    for lib_dir in lib_dirs:
        path = os.path.join(root, lib_dir)
        try:
            names = os.listdir(path)
        except (IOError, OSError):
            continue
        if "libnvidia-ml.so.1" in names:
            target = os.path.realpath(os.path.join(path, "libnvidia-ml.so.1"))
            versions = library_versions_from_names([target])
            if versions:
                return versions[-1]
        candidates.extend(library_versions_from_names(names))
    if candidates:
        return sorted(set(candidates), key=_version_key)[-1]
    return None


def nvml_library_version(nvml_version):
    """nvmlSystemGetNVMLVersion() '12.550.54.14' -> '550.54.14' (the driver part)."""
    value = clean_value(nvml_version)
    if value is None:
        return None
    parts = value.split(".")
    if len(parts) >= 3:
        version = ".".join(parts[1:])
        return version if _DRIVER_VERSION_RE.fullmatch(version) else None
    return None


# --------------------------------------------------------------------------------------------
# PCI (sysfs)
# --------------------------------------------------------------------------------------------

def _read_sysfs(path):
    raw = read_small_file(path, 4096)
    return None if raw is None else raw.decode("ascii", "replace").strip()


def _pcie_gen(speed):
    """sysfs current_link_speed '8.0 GT/s PCIe' -> 3."""
    if not speed:
        return None
    match = re.match(r"^[ \t]*([0-9]{1,3}(?:\.[0-9]{1,3})?)[ \t]*GT/s", speed)
    if not match:
        return None
    value = float(match.group(1))
    for rate, gen in _PCIE_SPEED_GEN:
        if abs(value - rate) < 0.01:
            return gen
    return None


def read_pci(sysfs_root=None):
    """NVIDIA display-class devices from ``<sysfs_root>/bus/pci/devices`` that still answer.

    Returns ``(readable, gpus)``: readable is False when the directory does not exist.
    GPUs are numbered in PCI bus order (the order nvidia-smi uses by default); a GPU that fell off
    the bus keeps its number but is left out (read_pci_devices returns it).
    """
    readable, gpus, _lost = read_pci_devices(sysfs_root)
    return readable, gpus


def _config_all_ones(path):
    """True when the first 4 bytes of the device's config space read 0xff (vendor and device
    0xffff): what a device that no longer answers returns, and what lspci shows as "rev ff"."""
    head = read_small_file(os.path.join(path, "config"), 4)
    return head == b"\xff\xff\xff\xff"


def _lost_signs(path, vendor, pci_class):
    """Why a PCI device looks fallen off the bus, or None.

    The sysfs ``vendor``/``device``/``class``/``revision`` files print values the kernel cached
    when it enumerated the device (drivers/pci/pci-sysfs.c, pci_config_attr(); verified in the
    stored torvalds/linux copy), so a lost GPU usually still reads 0x10de there; the ``config``
    file is read live from the device (lspci reads it: "rev ff"). A ``revision`` of 0xff or a
    vendor of 0xffff (kernels or tools that re-read them) count too. A device the kernel powered
    off (power_state D3cold, e.g. a notebook GPU) also reads all ones and is not lost.
    """
    power = (_read_sysfs(os.path.join(path, "power_state")) or "").strip()
    if power == "D3cold":
        return None
    signs = []
    if (_read_sysfs(os.path.join(path, "revision")) or "").lower() == "0xff":
        signs.append("revision 0xff")
    if (vendor or "").lower() == "0xffff":
        signs.append("vendor 0xffff")
    if (pci_class or "").lower() == "0xffffff":
        signs.append("class 0xffffff")
    if _config_all_ones(path):
        signs.append("config space all 0xff")
    return ", ".join(signs) if signs else None


def _modalias_ids(path):
    """(vendor, device, class byte) from the cached ``modalias``; Nones when unreadable."""
    match = _MODALIAS_RE.match(_read_sysfs(os.path.join(path, "modalias")) or "")
    if not match:
        return None, None, None
    return match.group(1).lower(), match.group(2).lower(), match.group(3).lower()


def read_pci_devices(sysfs_root=None):
    """NVIDIA display-class devices from ``<sysfs_root>/bus/pci/devices``.

    Returns ``(readable, gpus, lost)``: gpus as read_pci; lost a list of lost_gpus entries
    (source pci) for GPUs whose config space reads all ones. Both share one numbering, in PCI
    bus order over all NVIDIA display devices. Reading stops after MAX_GPUS + 1 such devices (more
    is refused by probe()), so a huge bus costs little.
    """
    sysfs_root = DEFAULT_SYSFS_ROOT if sysfs_root is None else sysfs_root
    base = os.path.join(sysfs_root, "bus", "pci", "devices")
    try:
        entries = sorted(os.listdir(base))
    except (IOError, OSError):
        return False, [], []
    gpus = []
    lost = []
    position = 0
    for entry in entries:
        if position > MAX_GPUS:
            break
        path = os.path.join(base, entry)
        vendor = _read_sysfs(os.path.join(path, "vendor"))
        pci_class = _read_sysfs(os.path.join(path, "class"))
        device_raw = _read_sysfs(os.path.join(path, "device"))
        driver = _kernel_driver(path)
        vendor_id = normalize_device_id(vendor)
        class_text = (pci_class or "").lower().replace("0x", "")
        if vendor_id != NVIDIA_VENDOR_ID and (vendor or "").lower() != "0xffff":
            continue
        if vendor_id != NVIDIA_VENDOR_ID or class_text in ("", "ffffff"):
            # The files read all ones: identify the device from the cached modalias, or by the
            # nvidia driver (it binds only to NVIDIA GPUs: display class 0x03).
            alias_vendor, alias_device, alias_class = _modalias_ids(path)
            if alias_vendor == NVIDIA_VENDOR_ID and alias_class:
                vendor_id, device_raw, class_text = alias_vendor, alias_device, alias_class
            elif driver == "nvidia":
                vendor_id, class_text = NVIDIA_VENDOR_ID, "03"
            else:
                continue
        if not class_text.startswith("03"):
            continue  # audio (0x0403), USB-C (0x0c03), NVSwitch bridges (0x0680) are not GPUs
        try:
            bus_id = normalize_bus_id(entry)
        except ParseError:
            bus_id = entry
        index = position
        position += 1
        signs = _lost_signs(path, vendor, pci_class)
        if signs is not None:
            lost.append(new_lost(bus_id, index, "the device no longer answers on the PCI bus (%s; lspci shows "
                                                "it as rev ff)" % signs, "pci"))
            continue
        gpu = new_gpu("pci", index=index)
        device_id = normalize_device_id(device_raw)
        gpu["pci_device_id"] = None if device_id is None else "0x" + device_id
        gpu["pci_bus_id"] = bus_id
        entry_data = lookup_device(device_id)
        if entry_data is not None:
            gpu["name"] = entry_data["model"]
            gpu["compute_capability"] = entry_data["compute_capability"]
            gpu["architecture"] = entry_data["architecture"]
            gpu["memory_total_mib"] = entry_data["memory_mib"]
        else:
            gpu["name"] = "NVIDIA device 0x%s" % (device_id or "????")
        gpu["pcie_link_gen"] = _pcie_gen(_read_sysfs(os.path.join(path, "current_link_speed")))
        try:
            gpu["pcie_link_width"] = to_int(_read_sysfs(os.path.join(path, "current_link_width")),
                                            "current_link_width", *PCIE_WIDTH_RANGE)
        except ParseError:
            gpu["pcie_link_width"] = None
        gpu["kernel_driver"] = driver
        gpus.append(gpu)
    return True, gpus, lost


def _kernel_driver(device_path):
    link = os.path.join(device_path, "driver")
    if os.path.islink(link):
        return os.path.basename(os.readlink(link))
    return None


# --------------------------------------------------------------------------------------------
# nvidia-smi backend
# --------------------------------------------------------------------------------------------

def read_nvidia_smi(run_command, nvidia_smi, notes=None):
    """Ask nvidia-smi. Returns a dict with driver_version, cuda_driver_version, gpus, topology,
    nvlink. Raises ProbeFailure for every answer that is not a working list of GPUs.

    ``notes`` (a list) collects non-fatal remarks (dropped fields, topology not read).
    A GPU that fell off the bus is not a failure: nvidia-smi prints an "Unable to determine the
    device handle for GPU <bus id>: ..." line for it among the CSV rows of the others and exits
    15; it goes to ``lost_gpus`` and the other GPUs are listed as usual.
    """
    notes = [] if notes is None else notes
    fields = list(QUERY_FIELDS)
    while True:
        argv = [nvidia_smi, "--query-gpu=" + ",".join(fields), QUERY_FORMAT]
        rc, out, err = run_command(argv)
        out, err = _text(out) or "", _text(err) or ""
        combined = out + "\n" + err
        if rc == 0:
            break
        invalid = _INVALID_FIELD_RE.search(combined)
        if invalid and invalid.group(1) in fields and invalid.group(1) not in REQUIRED_QUERY_FIELDS:
            fields.remove(invalid.group(1))
            notes.append("nvidia-smi does not know the query field %r; asked without it" % invalid.group(1))
            continue
        if split_lost_lines(combined)[0]:
            notes.append("nvidia-smi exited %d (a GPU fell off the bus)" % rc)
            break
        state = classify_smi_failure(rc, combined)
        failure = ProbeFailure(state, "nvidia-smi exited %d: %s" % (rc, _summary(combined) or "no output"))
        failure.library_version = parse_nvml_library_line(combined)
        raise failure
    if len(out) + len(err) > MAX_OUTPUT_CHARS:
        raise ProbeFailure(STATE_PROBE_ERROR, "nvidia-smi --query-gpu printed %d characters, more than a host with at "
                           "most %d GPUs prints; run it by hand to see what it says" % (len(out) + len(err), MAX_GPUS))
    lost, out = split_lost_lines(out)
    lost_err, _rest = split_lost_lines(err)
    lost_rows, out = _lost_rows(out, fields)
    lost = _unique_lost(lost + lost_err + lost_rows)
    if not lost and "no devices were found" in (out + err).lower():
        raise ProbeFailure(STATE_NO_GPU, "nvidia-smi: No devices were found")
    try:
        gpus, driver_version = parse_query_gpu(out, fields)
    except ParseError as exc:
        raise ProbeFailure(STATE_PROBE_ERROR, "could not parse nvidia-smi --query-gpu output (%s)" % exc)
    if len(gpus) + len(lost) > MAX_GPUS:
        raise ProbeFailure(STATE_PROBE_ERROR, too_many_gpus("nvidia-smi", len(gpus) + len(lost)))
    if not gpus and not lost:
        raise ProbeFailure(STATE_NO_GPU, "nvidia-smi listed no GPU")

    result = {
        "driver_version": driver_version,
        "cuda_driver_version": None,
        "library_version": None,
        "gpus": sorted(gpus, key=lambda gpu: gpu["index"]),
        "lost_gpus": lost,
    }
    rc, out, err = run_command([nvidia_smi])
    header = parse_smi_header(_text(out) or "")
    if header["driver_version"] is None and "Driver Version:" in (_text(out) or "")[:MAX_OUTPUT_CHARS]:
        notes.append("the nvidia-smi banner's driver version is not a version like 550.54.14; taken as unknown")
    if rc != 0 and lost:
        notes.append("plain nvidia-smi stops at the lost GPU (exit %d), so the CUDA version is unknown" % rc)
    elif rc != 0 or header["cuda_driver_version"] is None:
        notes.append("nvidia-smi did not print a CUDA version (exit %d)" % rc)
    result["cuda_driver_version"] = header["cuda_driver_version"]
    if result["driver_version"] is None:
        result["driver_version"] = header["driver_version"]

    indices = [gpu["index"] for gpu in result["gpus"]]
    result["topology"], result["nvlink"] = empty_topology(indices), False
    if len(indices) > 1:
        rc, out, err = run_command([nvidia_smi, "topo", "-m"])
        if rc != 0:
            notes.append("nvidia-smi topo -m exited %d: %s" % (rc, _summary((_text(out) or "") + (_text(err) or ""))))
        else:
            try:
                topology, nvlink = parse_topology(out)
            except ParseError as exc:
                notes.append("could not parse nvidia-smi topo -m (%s)" % exc)
            else:
                result["topology"], result["nvlink"] = _restrict_topology(topology, indices), nvlink
                result["nvlink"] = any(
                    pair["link"] is not None and pair["link"].startswith("NV")
                    for pair in result["topology"]["pairs"]
                )
    return result


def too_many_gpus(source, count):
    """The message for a host listing more GPUs than MAX_GPUS."""
    return ("%s lists %s GPUs; this probe handles at most %d per host (no NVIDIA system puts more in one host), "
            "so the answer is not trusted; run nvidia-smi -L on the host to see what it lists"
            % (source, count, MAX_GPUS))


def _unique_lost(lost):
    """One entry per bus ID (the first seen), in bus ID order."""
    seen = {}
    for item in lost:
        key = item["bus_id"] if item["bus_id"] is not None else "index %s" % item["index"]
        seen.setdefault(key, item)
    return sorted(seen.values(), key=lambda item: (item["bus_id"] or "~", item["index"] if item["index"] is not None else -1))


def _restrict_topology(topology, indices):
    """Keep only the GPUs the query listed (topo -m may show GPUs hidden by CUDA_VISIBLE...)."""
    keys = set(str(index) for index in indices)
    matrix = {}
    for a in keys:
        row = topology["matrix"].get(a, {})
        matrix[a] = dict((b, link) for b, link in row.items() if b in keys)
    restricted, _nvlink = _topology_from_matrix(matrix)
    return restricted


# --------------------------------------------------------------------------------------------
# NVML backend
# --------------------------------------------------------------------------------------------

def import_pynvml():
    """Import nvidia-ml-py's ``pynvml``; None when it is not installed."""
    try:
        import pynvml  # pylint: disable=import-outside-toplevel
    except ImportError:
        return None
    return pynvml


def _nvml_code(exc):
    value = getattr(exc, "value", None)
    if isinstance(value, int):
        return value
    return None


def _nvml_text(nvml, exc):
    try:
        text = str(exc)
    except Exception:
        text = ""
    code = _nvml_code(exc)
    if code is not None:
        return "%s (NVML error %d)" % (text or "NVML error", code)
    return text or exc.__class__.__name__


def nvml_failure(nvml, exc, where):
    """ProbeFailure for an NVML error raised by ``where`` (nvmlInit, nvmlDeviceGetCount, ...)."""
    code = _nvml_code(exc)
    detail = "NVML %s failed: %s" % (where, _nvml_text(nvml, exc))
    if code == NVML_ERROR_LIBRARY_NOT_FOUND:
        return ProbeFailure(STATE_DRIVER_NOT_LOADED, detail, unavailable=True)
    if code == NVML_ERROR_DRIVER_NOT_LOADED:
        return ProbeFailure(STATE_DRIVER_NOT_LOADED, detail)
    if code == NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return ProbeFailure(STATE_MISMATCH, detail)
    if code == NVML_ERROR_NOT_FOUND:
        return ProbeFailure(STATE_NO_GPU, detail)
    if code == NVML_ERROR_GPU_IS_LOST:
        return ProbeFailure(STATE_GPU_LOST, detail)
    return ProbeFailure(STATE_PROBE_ERROR, detail)


def read_nvml(nvml, notes=None):
    """Ask NVML through the given ``pynvml`` module object (real or fake).

    Returns the same shape as read_nvidia_smi; raises ProbeFailure otherwise.
    """
    notes = [] if notes is None else notes
    error_class = getattr(nvml, "NVMLError", Exception)
    try:
        nvml.nvmlInit()
    except error_class as exc:
        raise nvml_failure(nvml, exc, "nvmlInit")
    try:
        return _read_nvml_initialised(nvml, error_class, notes)
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def _optional(nvml, error_class, func, *args):
    """Call an NVML getter; None when the GPU does not support it (or any other NVML error)."""
    if func is None:
        return None
    try:
        return func(*args)
    except error_class:
        return None


class _GpuLost(Exception):
    """NVML said NVML_ERROR_GPU_IS_LOST for one GPU (raised inside the per-GPU reader)."""

    def __init__(self, where, text):
        super(_GpuLost, self).__init__(text)
        self.where = where
        self.text = text


def _getter(nvml, error_class, func, *args):
    """_optional for one GPU's values, except that NVML_ERROR_GPU_IS_LOST raises _GpuLost."""
    if func is None:
        return None
    try:
        return func(*args)
    except error_class as exc:
        if _nvml_code(exc) == NVML_ERROR_GPU_IS_LOST:
            raise _GpuLost(getattr(func, "__name__", "NVML"), _nvml_text(nvml, exc))
        return None


def _read_nvml_initialised(nvml, error_class, notes):
    try:
        driver = sane_driver_version(_optional(nvml, error_class, getattr(nvml, "nvmlSystemGetDriverVersion", None)),
                                     "driver version (nvmlSystemGetDriverVersion)")
    except ParseError as exc:
        raise ProbeFailure(STATE_PROBE_ERROR, "NVML answered a value this probe does not trust: %s" % exc)
    result = {
        "driver_version": driver,
        "cuda_driver_version": None,
        "library_version": nvml_library_version(
            _optional(nvml, error_class, getattr(nvml, "nvmlSystemGetNVMLVersion", None))
        ),
    }
    cuda_getter = getattr(nvml, "nvmlSystemGetCudaDriverVersion_v2", None) or getattr(
        nvml, "nvmlSystemGetCudaDriverVersion", None
    )
    result["cuda_driver_version"] = cuda_version_from_int(_optional(nvml, error_class, cuda_getter))
    try:
        count = nvml.nvmlDeviceGetCount()
    except error_class as exc:
        raise nvml_failure(nvml, exc, "nvmlDeviceGetCount")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ProbeFailure(STATE_PROBE_ERROR, "NVML answered a value this probe does not trust: nvmlDeviceGetCount "
                           "returned %s, not a GPU count" % _clip(repr(count)))
    if count == 0:
        raise ProbeFailure(STATE_NO_GPU, "NVML reports 0 GPUs")
    if count > MAX_GPUS:
        raise ProbeFailure(STATE_PROBE_ERROR, too_many_gpus("NVML", count))
    handles = []
    gpus = []
    lost = []
    for index in range(count):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except error_class as exc:
            if _nvml_code(exc) != NVML_ERROR_GPU_IS_LOST:
                raise nvml_failure(nvml, exc, "nvmlDeviceGetHandleByIndex(%d)" % index)
            # The bus ID cannot be asked of a lost handle; probe() takes it from the PCI bus.
            lost.append(new_lost(None, index, "nvmlDeviceGetHandleByIndex(%d): %s"
                                 % (index, _printable(_nvml_text(nvml, exc))), "nvml"))
            continue
        try:
            gpu = _nvml_gpu(nvml, error_class, handle, index)
        except _GpuLost as exc:
            lost.append(new_lost(None, index, "%s: %s" % (exc.where, _printable(exc.text)), "nvml"))
            continue
        except ParseError as exc:
            raise ProbeFailure(STATE_PROBE_ERROR, "NVML answered a value this probe does not trust for GPU %d: %s"
                               % (index, exc))
        handles.append(handle)
        gpus.append(gpu)
    try:
        check_unique(gpus)
    except ParseError as exc:
        raise ProbeFailure(STATE_PROBE_ERROR, "NVML answered GPUs this probe does not trust: %s" % exc)
    if lost and len(lost) == count:
        notes.append("NVML cannot reach any of its %d GPU(s)" % count)
    result["gpus"] = gpus
    result["lost_gpus"] = lost
    result["topology"], result["nvlink"] = _nvml_topology(nvml, error_class, handles, gpus, notes)
    return result


def _nvml_gpu(nvml, error_class, handle, index):
    gpu = new_gpu("nvml", index=index)
    gpu["name"] = sane_text(_getter(nvml, error_class, nvml.nvmlDeviceGetName, handle), "name")
    gpu["uuid"] = sane_text(_getter(nvml, error_class, nvml.nvmlDeviceGetUUID, handle), "uuid", 96)
    pci = _getter(nvml, error_class, nvml.nvmlDeviceGetPciInfo, handle)
    if pci is not None:
        try:
            gpu["pci_bus_id"] = normalize_bus_id(getattr(pci, "busId", None))
        except ParseError:
            gpu["pci_bus_id"] = None
        device_id = normalize_device_id(getattr(pci, "pciDeviceId", None))
        gpu["pci_device_id"] = None if device_id is None else "0x" + device_id
    cc = _optional(nvml, error_class, getattr(nvml, "nvmlDeviceGetCudaComputeCapability", None), handle)
    if cc is not None:
        if not isinstance(cc, (list, tuple)) or len(cc) != 2:
            raise ParseError("compute capability %s is not a (major, minor) pair" % _clip(repr(cc)))
        gpu["compute_capability"] = format_cc(sane_int(cc[0], "compute capability major", 0, 99),
                                              sane_int(cc[1], "compute capability minor", 0, 99))
    memory = _getter(nvml, error_class, nvml.nvmlDeviceGetMemoryInfo, handle)
    if memory is not None:
        mib = 1024 * 1024
        total = sane_int(getattr(memory, "total", None), "memory total (bytes)", mib, MAX_MEMORY_MIB * mib)
        gpu["memory_total_mib"] = total // mib
        gpu["memory_free_mib"] = sane_int(getattr(memory, "free", None), "memory free (bytes)", 0, total) // mib
    persistence = _optional(nvml, error_class, getattr(nvml, "nvmlDeviceGetPersistenceMode", None), handle)
    if persistence is not None:
        gpu["persistence_mode"] = sane_int(persistence, "persistence mode", 0, 1) == NVML_FEATURE_ENABLED
    ecc = _optional(nvml, error_class, getattr(nvml, "nvmlDeviceGetEccMode", None), handle)
    if ecc is not None:
        if not isinstance(ecc, (list, tuple)) or not ecc:
            raise ParseError("ECC mode %s is not a (current, pending) pair" % _clip(repr(ecc)))
        gpu["ecc_mode"] = "Enabled" if sane_int(ecc[0], "ECC mode", 0, 1) == NVML_FEATURE_ENABLED else "Disabled"
    gen = _optional(nvml, error_class, getattr(nvml, "nvmlDeviceGetCurrPcieLinkGeneration", None), handle)
    gpu["pcie_link_gen"] = None if gen is None else sane_int(gen, "PCIe link generation", *PCIE_GEN_RANGE)
    width = _optional(nvml, error_class, getattr(nvml, "nvmlDeviceGetCurrPcieLinkWidth", None), handle)
    gpu["pcie_link_width"] = None if width is None else sane_int(width, "PCIe link width", *PCIE_WIDTH_RANGE)
    return complete_gpu(gpu)


def _enum(value):
    """An NVML enum answer as an int; None for anything else (a bool, a float, a string)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _nvml_links(nvml, error_class, handle):
    """Active NVLinks of one GPU: {remote_bus_id: count}, total active."""
    get_state = getattr(nvml, "nvmlDeviceGetNvLinkState", None)
    get_remote = getattr(nvml, "nvmlDeviceGetNvLinkRemotePciInfo", None)
    remotes = {}
    total = 0
    if get_state is None:
        return remotes, total
    for link in range(NVML_NVLINK_MAX_LINKS):
        try:
            state = get_state(handle, link)
        except error_class:
            break  # NOT_SUPPORTED (no NVLink) or INVALID_ARGUMENT (past the last link)
        if _enum(state) != NVML_FEATURE_ENABLED:
            continue
        total += 1
        remote = _optional(nvml, error_class, get_remote, handle, link)
        try:
            bus_id = normalize_bus_id(getattr(remote, "busId", None)) if remote is not None else None
        except ParseError:
            bus_id = None
        if bus_id is not None:
            remotes[bus_id] = remotes.get(bus_id, 0) + 1
    return remotes, total


def _nvml_topology(nvml, error_class, handles, gpus, notes):
    matrix = dict((str(gpu["index"]), {}) for gpu in gpus)
    if len(handles) < 2:
        return _topology_from_matrix(matrix)
    links = [_nvml_links(nvml, error_class, handle) for handle in handles]
    p2p = getattr(nvml, "nvmlDeviceGetP2PStatus", None)
    ancestor = getattr(nvml, "nvmlDeviceGetTopologyCommonAncestor", None)
    unknown = 0
    for i in range(len(handles)):
        for j in range(i + 1, len(handles)):
            link = None
            direct = links[i][0].get(gpus[j]["pci_bus_id"], 0) if gpus[j]["pci_bus_id"] else 0
            if direct:
                link = "NV%d" % direct
            else:
                status = _optional(nvml, error_class, p2p, handles[i], handles[j], NVML_P2P_CAPS_INDEX_NVLINK)
                if _enum(status) == NVML_P2P_STATUS_OK and links[i][1] and links[j][1]:
                    # Through NVSwitch: no direct link, but NVLink peer access works.
                    link = "NV%d" % min(links[i][1], links[j][1])
            if link is None:
                level = _optional(nvml, error_class, ancestor, handles[i], handles[j])
                link = NVML_TOPOLOGY_LINKS.get(_enum(level))
            if link is None:
                unknown += 1
            a, b = str(gpus[i]["index"]), str(gpus[j]["index"])
            matrix[a][b] = link
            matrix[b][a] = link
    if unknown:
        notes.append("NVML could not tell the link type of %d GPU pair(s)" % unknown)
    return _topology_from_matrix(matrix)


# --------------------------------------------------------------------------------------------
# The probe
# --------------------------------------------------------------------------------------------

def base_facts():
    """The fact dict with every documented key, for a host where nothing was found."""
    return {
        "present": False,
        "state": STATE_NO_GPU,
        "msg": "",
        "backend": "none",
        "driver_version": None,
        "cuda_driver_version": None,
        "kernel_module_version": None,
        "kernel_module_type": None,
        "library_version": None,
        "driver_library_mismatch": False,
        "count": 0,
        "gpus": [],
        "lost_gpus": [],
        "topology": empty_topology(),
        "nvlink": False,
        "probes": [],
    }


def error_facts(detail):
    """Facts for an unexpected internal error (the module's last line of defence)."""
    facts = base_facts()
    facts["state"] = STATE_PROBE_ERROR
    facts["msg"] = "The GPU probe failed unexpectedly (%s); run 'nvidia-smi' on the host and report this." % detail
    return facts


def _describe_gpus(gpus):
    counts = []
    for gpu in gpus:
        label = gpu.get("name") or "unknown GPU"
        for item in counts:
            if item[0] == label:
                item[1] += 1
                break
        else:
            counts.append([label, 1])
    text = ", ".join("%dx %s" % (count, label) for label, count in counts)
    ccs = sorted(set(gpu["compute_capability"] for gpu in gpus if gpu.get("compute_capability")), key=_version_key)
    if ccs:
        text += ", compute capability " + "/".join(ccs)
    return text


def _merge_pci(gpus, pci_gpus):
    """Add the sysfs kernel driver (nvidia, nouveau, vfio-pci, ...) to driver-reported GPUs."""
    by_bus = dict((gpu["pci_bus_id"], gpu) for gpu in pci_gpus if gpu.get("pci_bus_id"))
    for gpu in gpus:
        found = by_bus.get(gpu.get("pci_bus_id"))
        if found is not None and gpu.get("kernel_driver") is None:
            gpu["kernel_driver"] = found.get("kernel_driver")
        if found is not None and gpu.get("pci_device_id") is None:
            gpu["pci_device_id"] = found.get("pci_device_id")
            complete_gpu(gpu)
    return gpus


def _ask_backend(name, backend, nvml_loader, run_command, nvidia_smi, notes):
    """Run one backend. Returns its answer; raises ProbeFailure (unavailable=True when the backend
    is missing) or BackendUnavailable when the user forced a backend this host does not have."""
    if name == "nvml":
        nvml = nvml_loader()
        if nvml is None:
            if backend == "nvml":
                raise BackendUnavailable(
                    "backend=nvml needs the Python package nvidia-ml-py (module pynvml) on the host; "
                    "install it for the Python that runs Ansible modules, or use backend=auto"
                )
            raise ProbeFailure(STATE_NO_GPU, "the Python module pynvml (package nvidia-ml-py) is not installed",
                               unavailable=True)
        reader, args = read_nvml, (nvml, notes)
    else:
        if not nvidia_smi or run_command is None:
            if backend == "nvidia_smi":
                raise BackendUnavailable(
                    "backend=nvidia_smi but nvidia-smi was not found; install the NVIDIA driver utilities "
                    "or give the path of the binary with the nvidia_smi option"
                )
            raise ProbeFailure(STATE_NO_GPU, "nvidia-smi was not found", unavailable=True)
        reader, args = read_nvidia_smi, (run_command, nvidia_smi, notes)
    try:
        return reader(*args)
    except ProbeFailure:
        raise
    except Exception as exc:  # a parser bug or an odd binding must not become a traceback
        raise ProbeFailure(STATE_PROBE_ERROR, "%s failed unexpectedly: %s: %s"
                           % (name, exc.__class__.__name__, exc))


def probe(backend="auto", run_command=None, nvidia_smi=None, nvml_loader=None, sysfs_root=None,
          proc_version_path=None, lib_root=None, lib_dirs=LIB_DIRS):
    """Probe the host and return the ``ansible_facts.nvidia`` dict.

    backend: auto | nvml | nvidia_smi | pci. auto tries NVML (if pynvml imports and libnvidia-ml
    loads), then nvidia-smi (if ``nvidia_smi`` is a path), then PCI.
    Raises BackendUnavailable only when a forced backend cannot be used at all.
    """
    if backend not in BACKENDS:
        raise BackendUnavailable("backend must be one of %s, got %r" % (", ".join(BACKENDS), backend))
    nvml_loader = import_pynvml if nvml_loader is None else nvml_loader
    proc_version_path = DEFAULT_PROC_VERSION_PATH if proc_version_path is None else proc_version_path

    facts = base_facts()
    probes = facts["probes"]
    facts["kernel_module_version"], facts["kernel_module_type"] = read_proc_version(proc_version_path)
    facts["library_version"] = read_library_version(lib_root, lib_dirs)
    pci_readable, pci_gpus, pci_lost = read_pci_devices(sysfs_root)
    if len(pci_gpus) + len(pci_lost) > MAX_GPUS:
        # Neither the bus nor a driver listing as many GPUs is trusted; nothing is asked or reported.
        facts["state"] = STATE_PROBE_ERROR
        facts["backend"] = "pci"
        facts["msg"] = "Could not read the NVIDIA GPUs: %s." % too_many_gpus("the PCI bus", "more than %d" % MAX_GPUS)
        probes.append({"backend": "pci", "outcome": STATE_PROBE_ERROR,
                       "detail": "more than %d NVIDIA display devices" % MAX_GPUS})
        return facts

    order = {"auto": ("nvml", "nvidia_smi"), "nvml": ("nvml",), "nvidia_smi": ("nvidia_smi",), "pci": ()}[backend]
    answer = None
    answered_by = None
    failure = None
    failed_by = None
    soft_failure = None
    for name in order:
        notes = []
        try:
            answer = _ask_backend(name, backend, nvml_loader, run_command, nvidia_smi, notes)
        except ProbeFailure as exc:
            detail = exc.detail + ((" (" + "; ".join(notes) + ")") if notes else "")
            probes.append({"backend": name, "outcome": "unavailable" if exc.unavailable else exc.state,
                           "detail": detail})
            if backend == "auto" and exc.unavailable:
                continue  # the next backend may still answer
            if backend == "auto" and name == "nvml" and exc.state in (STATE_PROBE_ERROR, STATE_GPU_LOST):
                soft_failure = (exc, name)  # kept in case nvidia-smi cannot answer either (or names the bus ID)
                continue
            failure, failed_by = exc, name
            break
        lost_count = len(answer.get("lost_gpus") or [])
        probes.append({"backend": name, "outcome": STATE_GPU_LOST if lost_count else STATE_OK,
                       "detail": "; ".join(["%d GPU(s)" % len(answer["gpus"])]
                                           + (["%d lost" % lost_count] if lost_count else []) + notes)})
        answered_by = name
        break
    if answer is None and failure is None and soft_failure is not None:
        failure, failed_by = soft_failure

    if backend == "pci" and not pci_readable:
        raise BackendUnavailable(
            "backend=pci but %s/bus/pci/devices cannot be read; use backend=auto"
            % (DEFAULT_SYSFS_ROOT if sysfs_root is None else sysfs_root)
        )
    if pci_readable:
        not_answering = (", %d not answering" % len(pci_lost)) if pci_lost else ""
        probes.append({"backend": "pci", "outcome": STATE_GPU_LOST if pci_lost else STATE_OK,
                       "detail": "%d NVIDIA display device(s)%s" % (len(pci_gpus) + len(pci_lost), not_answering)})
    else:
        probes.append({"backend": "pci", "outcome": "unavailable", "detail": "no PCI device list in sysfs"})

    if answer is not None:
        _finish_answer(facts, answer, answered_by, pci_gpus)
        lost = merge_lost(answer.get("lost_gpus") or [], facts["gpus"], pci_gpus, pci_lost)
    else:
        _finish_without_driver(facts, backend, failure, failed_by, pci_readable, pci_gpus)
        lost = [dict(item) for item in pci_lost]
    if lost:
        _report_lost(facts, lost, answered_by, pci_gpus, failure)
    facts["count"] = len(facts["gpus"])
    facts["present"] = bool(facts["state"] == STATE_OK and facts["backend"] in ("nvml", "nvidia_smi")
                            and facts["count"] > 0)
    return facts


def _versions_differ(facts):
    kernel, library = facts.get("kernel_module_version"), facts.get("library_version")
    return bool(kernel and library and kernel != library)


def _finish_answer(facts, answer, answered_by, pci_gpus):
    facts["backend"] = answered_by
    facts["driver_version"] = answer.get("driver_version")
    facts["cuda_driver_version"] = answer.get("cuda_driver_version")
    if answer.get("library_version"):
        facts["library_version"] = answer["library_version"]
    facts["gpus"] = _merge_pci(answer["gpus"], pci_gpus)
    facts["topology"] = answer["topology"]
    facts["nvlink"] = bool(answer["nvlink"])
    facts["state"] = STATE_OK
    facts["driver_library_mismatch"] = _versions_differ(facts)
    via = "NVML" if answered_by == "nvml" else "nvidia-smi"
    msg = "Found %d NVIDIA GPU(s) via %s: %s; driver %s, CUDA %s%s." % (
        len(facts["gpus"]),
        via,
        _describe_gpus(facts["gpus"]),
        facts["driver_version"] or "unknown",
        facts["cuda_driver_version"] or "unknown",
        ", NVLink" if facts["nvlink"] else "",
    )
    if facts["driver_library_mismatch"]:
        msg += (" Warning: the loaded kernel module is %s but libnvidia-ml on disk is %s; reboot (or reload the "
                "nvidia modules) before the next driver change."
                % (facts["kernel_module_version"], facts["library_version"]))
    facts["msg"] = msg


def merge_lost(lost, healthy, pci_gpus, pci_lost):
    """Combine the driver's lost GPUs with the PCI bus: fill missing bus IDs and indices, add GPUs
    only the bus shows as lost. Returns the lost_gpus list (sorted by bus ID).

    * NVML cannot say the bus ID of a lost handle: it is the PCI GPU that the driver does not list,
      preferring the ones whose config space reads all ones, when that leaves no choice.
    * An index the driver did not print (the "GPU 0000:02:00.0" form) is the GPU's position in PCI
      bus order, used only when every listed GPU's index agrees with that order (nvidia-smi numbers
      GPUs in PCI bus order by default; confidence: inferred).
    * A GPU the driver lists with its values is not lost, whatever sysfs says.
    * When some unnamed GPUs stay unnamed (more of them than candidates), the dead PCI devices are
      not added again: they are among them.
    """
    lost = [dict(item) for item in lost]
    healthy_bus = set(gpu["pci_bus_id"] for gpu in healthy if gpu.get("pci_bus_id"))
    named = set(item["bus_id"] for item in lost if item["bus_id"])
    unnamed = sorted((item for item in lost if not item["bus_id"]),
                     key=lambda item: item["index"] if item["index"] is not None else 0)
    if unnamed:
        dead = [item["bus_id"] for item in pci_lost if item["bus_id"] not in named | healthy_bus]
        others = sorted(set(gpu["pci_bus_id"] for gpu in pci_gpus if gpu.get("pci_bus_id")) - healthy_bus - named)
        for candidates in (dead, sorted(set(dead) | set(others))):
            if len(candidates) == len(unnamed):
                for item, bus_id in zip(unnamed, sorted(candidates)):
                    item["bus_id"] = bus_id
                break
    named = set(item["bus_id"] for item in lost if item["bus_id"])
    if any(not item["bus_id"] for item in lost):
        pci_lost = []  # the dead PCI devices are among the unnamed ones: do not count them twice
    for item in pci_lost:
        if item["bus_id"] not in named and item["bus_id"] not in healthy_bus:
            added = dict(item)
            added["index"] = None  # renumbered below against the driver's own numbering
            lost.append(added)
    _fill_lost_indices(lost, healthy, [gpu["pci_bus_id"] for gpu in pci_gpus] + [item["bus_id"] for item in pci_lost])
    return _unique_lost(lost)


def _fill_lost_indices(lost, healthy, pci_bus_ids):
    if not any(item["index"] is None and item["bus_id"] for item in lost):
        return
    if any(not gpu.get("pci_bus_id") or gpu.get("index") is None for gpu in healthy):
        return
    buses = sorted(set([gpu["pci_bus_id"] for gpu in healthy] + [item["bus_id"] for item in lost if item["bus_id"]]
                       + [bus for bus in pci_bus_ids if bus]))
    if any(buses.index(gpu["pci_bus_id"]) != gpu["index"] for gpu in healthy):
        return
    taken = set(gpu["index"] for gpu in healthy) | set(item["index"] for item in lost if item["index"] is not None)
    for item in lost:
        if item["index"] is None and item["bus_id"]:
            position = buses.index(item["bus_id"])
            if position not in taken:
                item["index"] = position
                taken.add(position)


def _lost_sentence(lost):
    said = {"nvidia_smi": "nvidia-smi", "nvml": "NVML", "pci": "PCI"}
    parts = []
    for item in lost:
        label = item["bus_id"] or "a GPU at an unknown PCI address"
        if item["index"] is not None:
            label += " (GPU %d)" % item["index"]
        parts.append("%s [%s: %s]" % (label, said.get(item["source"], item["source"]), item["message"]))
    return ("%d NVIDIA GPU(s) fell off the bus (Xid 79): %s; reboot the host to bring %s back, and if it happens "
            "again check the GPU's power cables, seating and cooling."
            % (len(lost), "; ".join(parts), "it" if len(lost) == 1 else "them"))


def _report_lost(facts, lost, answered_by, pci_gpus, failure=None):
    """State gpu_lost (a mismatch stays a mismatch: it needs the same reboot) and a message that
    names the lost GPUs and says what the healthy ones allow until the reboot."""
    facts["lost_gpus"] = lost
    previous = facts["state"]
    if previous != STATE_MISMATCH:
        facts["state"] = STATE_GPU_LOST
    healthy = facts["gpus"]
    lost_bus = set(item["bus_id"] for item in lost)
    said = (" (the driver: %s)" % failure.detail) if failure is not None else ""
    if answered_by is not None:
        via = "NVML" if answered_by == "nvml" else "nvidia-smi"
        if healthy:
            tail = ("%d other GPU(s) answer via %s: %s; driver %s, CUDA %s%s. Until the reboot a deployment on this "
                    "host can use only those: set tensor_parallel_size x pipeline_parallel_size to at most %d."
                    % (len(healthy), via, _describe_gpus(healthy), facts["driver_version"] or "unknown",
                       facts["cuda_driver_version"] or "unknown", ", NVLink" if facts["nvlink"] else "",
                       len(healthy)))
        else:
            unseen = [gpu for gpu in pci_gpus if gpu.get("pci_bus_id") not in lost_bus]
            tail = "%s lists no working GPU%s." % (
                via, ("; the PCI bus shows %d more NVIDIA GPU(s) (%s) that it did not reach"
                      % (len(unseen), ", ".join(gpu["pci_bus_id"] for gpu in unseen))) if unseen else "")
        if facts["driver_library_mismatch"] and previous == STATE_OK:
            tail += (" Also, the loaded kernel module is %s but libnvidia-ml on disk is %s; the reboot fixes that too."
                     % (facts["kernel_module_version"], facts["library_version"]))
    elif previous == STATE_MISMATCH or (healthy and previous != STATE_GPU_LOST):
        tail = facts["msg"]  # it already describes the other GPUs and the driver
    elif healthy:
        tail = "%d other NVIDIA GPU(s) on the PCI bus (%s)%s." % (len(healthy), _describe_gpus(healthy), said)
    else:
        tail = "No other NVIDIA GPU is on the PCI bus%s." % said
    facts["msg"] = _lost_sentence(lost) + " " + tail


def _finish_without_driver(facts, backend, failure, failed_by, pci_readable, pci_gpus):
    facts["gpus"] = pci_gpus
    facts["backend"] = "pci" if pci_readable else "none"
    if failure is not None and failure.library_version and not facts["library_version"]:
        facts["library_version"] = failure.library_version
    pci_text = _describe_gpus(pci_gpus) if pci_gpus else ""
    on_bus = ("%d NVIDIA GPU(s) on the PCI bus (%s)" % (len(pci_gpus), pci_text)) if pci_gpus else ""
    nouveau = [gpu["pci_bus_id"] for gpu in pci_gpus if gpu.get("kernel_driver") == "nouveau"]
    nouveau_hint = (" The nouveau driver is bound to %s; blacklist it before installing the NVIDIA driver."
                    % ", ".join(nouveau)) if nouveau else ""
    said = (" (%s)" % failure.detail) if failure is not None else ""
    state = failure.state if failure is not None else None

    if state == STATE_MISMATCH or (state in (None, STATE_DRIVER_NOT_LOADED, STATE_PROBE_ERROR)
                                   and _versions_differ(facts)):
        facts["state"] = STATE_MISMATCH
        facts["driver_library_mismatch"] = True
        facts["msg"] = (
            "The NVIDIA kernel module (%s) and the user-space driver library (%s) do not match%s; reboot the "
            "host (or unload and reload the nvidia kernel modules) so that both are the same version.%s"
            % (facts["kernel_module_version"] or "version unknown", facts["library_version"] or "version unknown",
               said, (" " + on_bus + ".") if on_bus else "")
        )
        return
    if state == STATE_GPU_LOST:
        facts["state"] = STATE_GPU_LOST
        facts["msg"] = (
            "The NVIDIA driver reports a GPU lost from the bus%s but did not say which; reboot the host to "
            "recover it (dmesg shows the Xid 79 line with its PCI address).%s"
            % (said, (" " + on_bus + ".") if on_bus else "")
        )
        return
    if state == STATE_PROBE_ERROR:
        facts["state"] = STATE_PROBE_ERROR
        facts["msg"] = (
            "Could not read the NVIDIA GPUs%s; run 'nvidia-smi' on the host to see the problem.%s"
            % (said, (" " + on_bus + ".") if on_bus else "")
        )
        return
    if backend == "pci" and pci_gpus:
        loaded = facts["kernel_module_version"] is not None
        facts["state"] = STATE_OK if loaded else STATE_DRIVER_NOT_LOADED
        facts["msg"] = "%s, read from PCI only (backend=pci); the NVIDIA kernel module is %s.%s" % (
            on_bus, ("loaded (%s)" % facts["kernel_module_version"]) if loaded else "not loaded", nouveau_hint)
        return
    if pci_gpus:
        # Either no driver answered, or it answered "no devices" although the bus has NVIDIA GPUs
        # (e.g. a driver branch that no longer supports them).
        facts["state"] = STATE_DRIVER_NOT_LOADED
        version = facts["kernel_module_version"] or facts["library_version"]
        if state == STATE_NO_GPU:
            reason = "the NVIDIA driver%s lists none of them%s" % ((" " + version) if version else "", said)
            advice = "this driver branch probably does not support them; install one that does"
        elif state == STATE_DRIVER_NOT_LOADED:
            reason = "the NVIDIA driver is not working%s" % said
            advice = "load it (reboot after installing, or run 'modprobe nvidia') or reinstall the driver"
        elif facts["kernel_module_version"]:
            reason = ("the kernel module %s is loaded but neither NVML nor nvidia-smi is available"
                      % facts["kernel_module_version"])
            advice = "install the driver's user-space utilities (nvidia-smi)"
        else:
            reason = "no NVIDIA driver is installed (neither NVML nor nvidia-smi is available)"
            advice = "install the NVIDIA driver"
        facts["msg"] = "%s but %s; %s.%s" % (on_bus, reason, advice, nouveau_hint)
        return
    if state == STATE_DRIVER_NOT_LOADED and not failure.unavailable:
        # The driver itself says it is not working; report that, even with nothing on the bus.
        facts["state"] = STATE_DRIVER_NOT_LOADED
        where = "no NVIDIA GPU is visible on the PCI bus" if pci_readable else "the PCI bus could not be read"
        facts["msg"] = (
            "The NVIDIA driver is installed but not working%s, and %s; install or load the driver if this host "
            "has a GPU, or remove the driver packages if it has none." % (said, where)
        )
        return
    facts["state"] = STATE_NO_GPU
    if failed_by is not None and state == STATE_NO_GPU:
        facts["backend"] = failed_by
    if pci_readable:
        facts["msg"] = ("No NVIDIA GPU found%s; there is no NVIDIA display device on the PCI bus, so there is "
                        "nothing to do on this host." % said)
    else:
        facts["msg"] = ("No NVIDIA GPU found%s; the PCI bus could not be read, so its absence is not confirmed."
                        % said)
