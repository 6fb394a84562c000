# -*- coding: utf-8 -*-
# PRIVATE to the labfleet.vllm collection. No compatibility promise; do not import from other
# collections. Read by probes/_gpu.py (gpu_facts), knowledge/_vllm_memory.py and the vllm_benchmark
# module (the roofline).
#
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The GPU model table: one row per board, and the name rules that find a row.

Each row of ``GPU_MODELS`` says, for one board, what every other file reads about it:

- ``model``: the bracketed name of the PCI ID Repository (pci.ids, https://pci-ids.ucw.cz/, GitHub
  copy pciutils/pciids at commit c1c12547d626ebf05fd0223144ad87fab5e95d06, "Version: 2026.08.22",
  vendor block ``10de``); boards without a device ID here (GeForce) use their product name.
- ``pci_ids``: its device IDs (lower-case, 4 digits, vendor 0x10de), from the same file.
- ``compute_capability``: NVIDIA's CUDA GPU list (chip family -> CC: GK210 3.7, GP100 6.0, GP10x 6.1,
  GV100 7.0, TU10x 7.5, GA100 8.0, GA10x 8.6, AD10x 8.9, GH100 9.0, GB100/GB102 10.0, GB20x 12.0).
  The ``architecture`` name is derived from it (_policy.ARCHITECTURES, the one table of those).
- ``memory_gib``: the *nominal* board memory (marketing GiB); the driver reports slightly less for
  some boards (a T4 shows 15360 MiB, an H100 PCIe 81559 MiB), so it is a size class, not the usable
  amount.
- ``sms``: streaming multiprocessors (SMS_SOURCE). vLLM 0.19.1's Triton sampler buffer has at most
  one row per SM, so the memory model reads the largest count of a compute capability (SMS_BY_CC).
- ``memory_bandwidth``: GB/s (10^9 bytes per second) with its source (a vendor datasheet URL) and
  confidence (BANDWIDTH_CONFIDENCE); the benchmark's decode roofline reads it.

``None`` means not recorded here. Two name rules find a row or a compute capability from the name
a driver reports: MODEL_NAME_PATTERNS (nvidia-smi / NVML spellings -> a row, for the bandwidth) and
FAMILY_NAME_PATTERNS (product families -> a compute capability, for boards no row holds).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._policy import ARCHITECTURES, architecture_label

NVIDIA_VENDOR_ID = "10de"

SMS_SOURCE = ("NVIDIA's architecture whitepapers (Volta GV100, Turing TU102/TU104, Ampere GA100/GA102, Ada "
              "AD102/AD104, Hopper GH100, Blackwell B200) and board datasheets, as widely quoted (third_party)")
# Confidence of a bandwidth figure: "third_party" is the figure the vendor publishes, taken from
# NVIDIA's datasheets and product pages as widely quoted, not re-read in the primary document for this
# table; V100 (900), A100 (1555 / 2039) and H100 PCIe / SXM (2000 / 3350) were cross-checked against
# mirrors of those datasheets (glennklockwood.com/garden/processors/A100, the H100 PCIe product brief
# PB-11133-001_v02 "greater than 2,000 GBps"). "inferred": no figure of its own found; the same memory
# system as a sibling board (the note says which).
BANDWIDTH_CONFIDENCE = ("verified", "third_party", "inferred")

_V100_DS = "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"
_P100_PCIE_DS = "https://images.nvidia.com/content/tesla/pdf/nvidia-tesla-p100-PCIe-datasheet.pdf"
_P100_SXM2_DS = "https://images.nvidia.com/content/tesla/pdf/nvidia-tesla-p100-datasheet.pdf"
_P40_DS = "https://images.nvidia.com/content/pdf/tesla/184427-Tesla-P40-Datasheet-NV-Final-Letter-Web.pdf"
_P4_DS = "https://images.nvidia.com/content/pdf/tesla/184457-Tesla-P4-Datasheet-NV-Final-Letter-Web.pdf"
_GV100_DS = ("https://www.nvidia.com/content/dam/en-zz/Solutions/design-visualization/productspage/"
             "quadro/quadro-desktop/quadro-volta-gv100-data-sheet-us-nvidia-704619-r3-web.pdf")
_T4_DS = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf"
_A100_DS = ("https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
            "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf")
_A30_DS = "https://www.nvidia.com/content/dam/en-zz/Solutions/data-center/products/a30-gpu/pdf/a30-datasheet.pdf"
_A10_DS = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/A10-Product-Brief.pdf"
_A40_DS = "https://images.nvidia.com/content/Solutions/data-center/a40/nvidia-a40-datasheet.pdf"
_A6000_DS = ("https://www.nvidia.com/content/dam/en-zz/Solutions/design-visualization/quadro-product-"
             "literature/proviz-print-nvidia-rtx-a6000-datasheet-us-nvidia-1454980-r9-web%20(1).pdf")
_RTX30_PAGE = "https://www.nvidia.com/en-us/geforce/graphics-cards/30-series/rtx-3090-3090ti/"
_L4_DS = "https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet"
_L40_DS = "https://images.nvidia.com/content/Solutions/data-center/vgpu-L40-datasheet.pdf"
_L40S_DS = "https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413"
_RTX6000ADA_DS = ("https://www.nvidia.com/content/dam/en-zz/Solutions/design-visualization/"
                  "rtx-6000/proviz-print-rtx6000-datasheet-web-2504660.pdf")
_RTX4090_PAGE = "https://www.nvidia.com/en-us/geforce/graphics-cards/40-series/rtx-4090/"
_H100_DS = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
_H200_PAGE = "https://www.nvidia.com/en-us/data-center/h200/"


_TITAN_V_PAGE = "https://www.nvidia.com/en-us/titan/titan-v/"
_A10G_PAGE = "https://aws.amazon.com/ec2/instance-types/g5/"


def _row(model, pci_ids, cc, memory_gib, sms, gb_s, source, inferred_from=""):
    """One board of GPU_MODELS (the fields are described in the module docstring).

    ``pci_ids``: space-separated device IDs. ``gb_s`` and ``source``: the memory bandwidth and where it
    comes from (None, None: not recorded); ``inferred_from``: the sibling board whose memory system the
    figure is taken from, which makes its confidence "inferred" ("": "third_party").
    """
    bandwidth = None
    if gb_s is not None:
        bandwidth = {"gb_s": gb_s, "source": source, "confidence": "inferred" if inferred_from else "third_party"}
        if inferred_from:
            bandwidth["note"] = inferred_from
    return {"model": model, "pci_ids": tuple(pci_ids.split()), "compute_capability": cc, "memory_gib": memory_gib,
            "sms": sms, "memory_bandwidth": bandwidth}


# model, PCI device IDs, compute capability, memory GiB, SMs, bandwidth GB/s, its source, inferred from.
# Ordered by compute capability. The K80 (3.7) is there for identification only (its last driver branch
# is R470); the B200's memory is not recorded (several board configurations share its ID).
GPU_MODELS = (
    _row("Tesla K80", "102d", "3.7", 12, None, None, None, ""),
    _row("Tesla P100 PCIe 12GB", "15f7", "6.0", 12, None, 549, _P100_PCIE_DS, ""),
    _row("Tesla P100 PCIe 16GB", "15f8", "6.0", 16, None, 732, _P100_PCIE_DS, ""),
    _row("Tesla P100 SXM2 16GB", "15f9", "6.0", 16, None, 732, _P100_SXM2_DS, ""),
    _row("Tesla P100-DGXS-16GB", "15fc", "6.0", 16, None, None, None, ""),
    _row("Tesla P40", "1b38", "6.1", 24, None, 346, _P40_DS, ""),
    _row("Tesla P4", "1bb3", "6.1", 8, None, 192, _P4_DS, ""),
    _row("TITAN V", "1d81", "7.0", 12, 80, 652.8, _TITAN_V_PAGE, ""),
    _row("Tesla V100 SXM2 16GB", "1db1 1df5", "7.0", 16, 80, 900, _V100_DS, ""),
    _row("Tesla V100 DGXS 16GB", "1db2", "7.0", 16, 80, 900, _V100_DS, "the V100 SXM2 memory system (DGX Station)"),
    _row("Tesla V100 FHHL 16GB", "1db3", "7.0", 16, 80, None, None, ""),
    _row("Tesla V100 PCIe 16GB", "1db4", "7.0", 16, 80, 900, _V100_DS, ""),
    _row("Tesla V100 SXM2 32GB", "1db5", "7.0", 32, 80, 900, _V100_DS, ""),
    _row("Tesla V100 PCIe 32GB", "1db6", "7.0", 32, 80, 900, _V100_DS, ""),
    _row("Tesla V100 DGXS 32GB", "1db7", "7.0", 32, 80, 900, _V100_DS, "the V100 SXM2 memory system (DGX Station)"),
    _row("Tesla V100 SXM3 32GB", "1db8", "7.0", 32, 80, 900, _V100_DS, "the V100 SXM2 memory system (DGX-2)"),
    _row("Quadro GV100", "1dba", "7.0", 32, 80, 870, _GV100_DS, ""),
    _row("Tesla V100S PCIe 32GB", "1df6", "7.0", 32, 80, 1134, _V100_DS, ""),
    _row("Tesla T4", "1eb8", "7.5", 16, 40, 320, _T4_DS, ""),
    _row("Quadro RTX 6000/8000", "1e30", "7.5", None, 72, None, None, ""),
    _row("A100 SXM4 40GB", "20b0", "8.0", 40, 108, 1555, _A100_DS, ""),
    _row("A100 PCIe 40GB", "20b1 20f1", "8.0", 40, 108, 1555, _A100_DS, ""),
    _row("A100 SXM4 80GB", "20b2", "8.0", 80, 108, 2039, _A100_DS, ""),
    _row("A100-SXM-64GB", "20b3", "8.0", 64, None, None, None, ""),
    _row("A100 PCIe 80GB", "20b5", "8.0", 80, 108, 1935, _A100_DS, ""),
    _row("A30 PCIe", "20b7", "8.0", 24, 56, 933, _A30_DS, ""),
    _row("A800-SXM4-80GB", "20f3", "8.0", 80, 108, 2039, _A100_DS, "the A100 SXM4 80GB memory system"),
    _row("A800 80GB PCIe", "20f5", "8.0", 80, 108, 1935, _A100_DS, "the A100 80GB PCIe memory system"),
    _row("RTX A6000", "2230", "8.6", 48, 84, 768, _A6000_DS, ""),
    _row("A40", "2235", "8.6", 48, 84, 696, _A40_DS, ""),
    _row("A10", "2236", "8.6", 24, 72, 600, _A10_DS, ""),
    _row("A10G", "2237", "8.6", 24, None, 600, _A10G_PAGE, "the A10 memory system (AWS G5)"),
    _row("A2 / A16", "25b6", "8.6", None, None, None, None, ""),
    _row("GeForce RTX 3090", "", "8.6", 24, 82, 936, _RTX30_PAGE, ""),
    _row("GeForce RTX 3090 Ti", "", "8.6", 24, 84, 1008, _RTX30_PAGE, ""),
    _row("RTX 6000 Ada Generation", "26b1", "8.9", 48, 142, 960, _RTX6000ADA_DS, ""),
    _row("L40", "26b5", "8.9", 48, 142, 864, _L40_DS, ""),
    _row("L40S", "26b9", "8.9", 48, 142, 864, _L40S_DS, ""),
    _row("L4", "27b8", "8.9", 24, 58, 300, _L4_DS, ""),
    _row("GeForce RTX 4090", "", "8.9", 24, 128, 1008, _RTX4090_PAGE, ""),
    _row("H100 NVL (H100L 94GB)", "2321", "9.0", 94, 132, 3900, _H100_DS, ""),
    _row("H800 PCIe", "2322", "9.0", 80, 114, 2000, _H100_DS, "the H100 PCIe memory system"),
    _row("H800", "2324", "9.0", 80, 132, 3350, _H100_DS, "the H100 SXM5 memory system"),
    _row("H100 SXM5 80GB", "2330", "9.0", 80, 132, 3350, _H100_DS, ""),
    _row("H100 PCIe", "2331", "9.0", 80, 114, 2000, _H100_DS, ""),
    _row("H200 SXM 141GB", "2335", "9.0", 141, 132, 4800, _H200_PAGE, ""),
    _row("H100 SXM5 64GB", "2337", "9.0", 64, None, None, None, ""),
    _row("H100 SXM5 96GB", "2338", "9.0", 96, None, None, None, ""),
    _row("H100 SXM5 94GB", "2339", "9.0", 94, None, None, None, ""),
    _row("H200 NVL", "233b", "9.0", 141, 132, 4800, _H200_PAGE, ""),
    _row("B200", "2901", "10.0", None, 148, None, None, ""),
    _row("RTX PRO 6000 Blackwell Server Edition", "2bb5", "12.0", 96, None, None, None, ""),
)

# nvidia-smi / NVML names ("Tesla V100-PCIE-32GB", "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3",
# "NVIDIA GeForce RTX 4090") -> a row's model, matched on the lower-case name with - _ / ( ) , read
# as spaces. First match wins; None stops the search (a board whose row is not known from its name,
# rather than a wrong sibling).
MODEL_NAME_PATTERNS = [(re.compile(pattern), model) for pattern, model in (
    (r"\blaptop\b|\bmobile\b|\bmax q\b|\bgh200\b", None),
    (r"\bv100s\b", "Tesla V100S PCIe 32GB"),
    (r"\bv100\b.*\bfhhl\b", None),
    (r"\bv100\b.*\bsxm3\b", "Tesla V100 SXM3 32GB"),
    (r"\bv100\b.*\bsxm2\b.*\b32gb\b", "Tesla V100 SXM2 32GB"),
    (r"\bv100\b.*\bsxm2\b", "Tesla V100 SXM2 16GB"),
    (r"\bv100\b.*\bdgxs\b.*\b32gb\b", "Tesla V100 DGXS 32GB"),
    (r"\bv100\b.*\bdgxs\b", "Tesla V100 DGXS 16GB"),
    (r"\bv100\b.*\bpcie\b.*\b32gb\b", "Tesla V100 PCIe 32GB"),
    (r"\bv100\b.*\bpcie\b", "Tesla V100 PCIe 16GB"),
    (r"\btitan v\b", "TITAN V"),
    (r"\bgv100\b", "Quadro GV100"),
    (r"\bp100\b.*\bsxm2\b", "Tesla P100 SXM2 16GB"),
    (r"\bp100\b.*\b12gb\b", "Tesla P100 PCIe 12GB"),
    (r"\bp100\b.*\bpcie\b", "Tesla P100 PCIe 16GB"),
    (r"\bp40\b", "Tesla P40"),
    (r"\bp4\b", "Tesla P4"),
    (r"\bt4\b", "Tesla T4"),
    (r"\ba100\b.*\b64gb\b", None),
    (r"\ba100\b.*\b80gb\b.*\bpcie\b|\ba100\b.*\bpcie\b.*\b80gb\b", "A100 PCIe 80GB"),
    (r"\ba100\b.*\b80gb\b", "A100 SXM4 80GB"),
    (r"\ba100\b.*\bpcie\b", "A100 PCIe 40GB"),
    (r"\ba100\b.*(\bsxm\d?\b|\b40gb\b)", "A100 SXM4 40GB"),
    (r"\ba800\b.*\b40gb\b", None),
    (r"\ba800\b.*\bpcie\b", "A800 80GB PCIe"),
    (r"\ba800\b.*\bsxm\d?\b", "A800-SXM4-80GB"),
    (r"\ba30\b", "A30 PCIe"),
    (r"\ba10g\b", "A10G"),
    (r"\ba10\b", "A10"),
    (r"\ba40\b", "A40"),
    (r"\brtx a6000\b", "RTX A6000"),
    (r"\brtx 6000 ada\b", "RTX 6000 Ada Generation"),
    (r"\brtx 3090 ti\b", "GeForce RTX 3090 Ti"),
    (r"\brtx 3090\b", "GeForce RTX 3090"),
    (r"\brtx 4090\b", "GeForce RTX 4090"),
    (r"\bl40s\b", "L40S"),
    (r"\bl40\b", "L40"),
    (r"\bl4\b", "L4"),
    (r"\bh100\b.*\bnvl\b|\bh100l\b", "H100 NVL (H100L 94GB)"),
    (r"\bh100\b.*\bpcie\b", "H100 PCIe"),
    (r"\bh100\b.*\b(64|94|96)gb\b", None),
    (r"\bh100\b.*(\bsxm\d?\b|\bhbm3\b|\b80gb\b)", "H100 SXM5 80GB"),
    (r"\bh800\b.*\bpcie\b", "H800 PCIe"),
    (r"\bh800\b", "H800"),
    (r"\bh200\b.*\bnvl\b", "H200 NVL"),
    (r"\bh200\b", "H200 SXM 141GB"),
)]

# Product families -> compute capability, for a name no row is known by (nvidia-smi on R470 without
# compute_cap and without pci.device_id, GeForce and Quadro boards): first match wins, so the more
# specific patterns come first. Matched on the name as reported, case aside.
FAMILY_NAME_PATTERNS = [
    (re.compile(r"\bGH200\b|\bH(100|200|800|20)\b", re.I), "9.0"),
    (re.compile(r"\bGB200\b|\bB(100|200)\b", re.I), "10.0"),
    (re.compile(r"\bRTX PRO \d+ Blackwell\b|\bRTX 50\d0\b", re.I), "12.0"),
    (re.compile(r"\bL(4|40S?|20|2)\b|\bAda\b|\bRTX 40\d0\b", re.I), "8.9"),
    (re.compile(r"\bA(100|30|800)\b", re.I), "8.0"),
    (re.compile(r"\bA(10G?|40|2|16)\b|\bRTX A\d+|\bRTX 30\d0\b", re.I), "8.6"),
    (re.compile(r"\bT4\b|\bRTX (6000|8000|5000|4000)\b|\bRTX 20\d0\b|\bTITAN RTX\b", re.I), "7.5"),
    (re.compile(r"\bV100S?\b|\bGV100\b|\bTITAN V\b", re.I), "7.0"),
    (re.compile(r"\bP100\b|\bGP100\b", re.I), "6.0"),
    (re.compile(r"\bP(40|4|6|10)\b|\bGTX 10\d0\b|\bTITAN Xp\b", re.I), "6.1"),
    (re.compile(r"\bK80\b", re.I), "3.7"),
]

# ------------------------------------------------------------------ views of the table (derived)

# Model name -> row.
MODELS = dict((row["model"], row) for row in GPU_MODELS)

# Compute capability -> architecture name, derived from the policy's ARCHITECTURES (the one table
# of architectures and their compute capabilities; Jetson parts 6.2/7.2/8.7 keep their generation
# name there). Kept as a dict for callers that index it.
CC_ARCHITECTURE = dict((cc, entry["label"]) for entry in ARCHITECTURES.values() for cc in entry["cc"])


def _device_entry(row):
    """What a PCI device ID says about its board (the shape gpu_facts reads)."""
    return {
        "model": row["model"],
        "architecture": architecture_label(row["compute_capability"]),
        "compute_capability": row["compute_capability"],
        "memory_mib": None if row["memory_gib"] is None else int(row["memory_gib"] * 1024),
    }


# Lower-case 4-digit PCI device ID (vendor 0x10de) -> {model, architecture, compute_capability, memory_mib}.
PCI_DEVICES = dict((device_id, _device_entry(row)) for row in GPU_MODELS for device_id in row["pci_ids"])

# Model name -> {gb_s, source, confidence[, note]} for the rows whose bandwidth is recorded.
GPU_MEMORY_BANDWIDTH = dict((row["model"], row["memory_bandwidth"]) for row in GPU_MODELS
                            if row["memory_bandwidth"] is not None)


def _sms_by_cc():
    """(major, minor) -> the largest SM count among the rows of that compute capability."""
    found = {}
    for row in GPU_MODELS:
        if row["sms"] is not None:
            key = tuple(int(part) for part in row["compute_capability"].split("."))
            found[key] = max(found.get(key, 0), row["sms"])
    return found


SMS_BY_CC = _sms_by_cc()

# ------------------------------------------------------------------ lookups


def normalize_device_id(value):
    """Return the 4-digit lower-case PCI device ID from the usual spellings, or None.

    Accepts ``"0x1db6"``, ``"1DB6"``, ``0x1db6`` (int), and the nvidia-smi / NVML combined form
    ``"0x1DB610DE"`` / ``0x1DB610DE`` (device in the upper 16 bits, vendor 10de in the lower).
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    else:
        text = str(value).strip().lower()
        if text.startswith("0x"):
            text = text[2:]
        if not text or not re.match(r"^[0-9a-f]+$", text):
            return None
        number = int(text, 16)
    if number > 0xFFFF:
        if number & 0xFFFF != int(NVIDIA_VENDOR_ID, 16):
            return None
        number >>= 16
    if number < 0 or number > 0xFFFF:
        return None
    return "%04x" % number


def lookup_device(device_id):
    """Return a copy of the PCI_DEVICES entry for a PCI device ID (any spelling), or None."""
    key = normalize_device_id(device_id)
    if key is None or key not in PCI_DEVICES:
        return None
    return dict(PCI_DEVICES[key])


def compute_capability_from_name(name):
    """Best-effort compute capability ("7.0") from a GPU product name (FAMILY_NAME_PATTERNS), or None."""
    if not name:
        return None
    for pattern, cc in FAMILY_NAME_PATTERNS:
        if pattern.search(name):
            return cc
    return None


def architecture_for(compute_capability):
    """Architecture name for a compute capability string such as "7.0"; None when unknown."""
    if compute_capability is None:
        return None
    return architecture_label(str(compute_capability).strip())


_NAME_SEPARATORS = re.compile(r"[-_/(),\s]+")


def _normal_name(name):
    """A GPU name lower-cased, with - _ / ( ) , and white space read as one space."""
    return _NAME_SEPARATORS.sub(" ", name.lower()).strip()


def bandwidth_key(name=None, pci_device_id=None):
    """The GPU_MEMORY_BANDWIDTH key of a GPU, or None when its bandwidth is not recorded.

    ``pci_device_id`` (any spelling normalize_device_id takes) wins over ``name``; a name is matched
    exactly (case and separators aside) against the keys, then by MODEL_NAME_PATTERNS.
    """
    entry = lookup_device(pci_device_id) if pci_device_id is not None else None
    if entry is not None and entry["model"] in GPU_MEMORY_BANDWIDTH:
        return entry["model"]
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        return None
    wanted = _normal_name(name)
    for key in GPU_MEMORY_BANDWIDTH:
        if _normal_name(key) == wanted:
            return key
    for pattern, key in MODEL_NAME_PATTERNS:
        if pattern.search(wanted):
            return key if key in GPU_MEMORY_BANDWIDTH else None
    return None


def memory_bandwidth(name=None, pci_device_id=None):
    """``{gpu, gb_s, source, confidence[, note]}`` for a GPU, or None when not recorded."""
    key = bandwidth_key(name, pci_device_id)
    if key is None:
        return None
    found = dict(GPU_MEMORY_BANDWIDTH[key])
    found["gpu"] = key
    return found
