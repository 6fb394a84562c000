# -*- coding: utf-8 -*-
# PRIVATE to the labfleet.vllm collection. No compatibility promise; do not import from other
# collections. Used by plugins/module_utils/probes/_gpu.py and the gpu_facts module.
#
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""NVIDIA PCI device ID table and compute capability -> architecture map.

Device IDs and model names were checked against the PCI ID Repository (pci.ids,
https://pci-ids.ucw.cz/), GitHub copy pciutils/pciids at commit
c1c12547d626ebf05fd0223144ad87fab5e95d06 ("Version: 2026.08.22"), vendor block ``10de``.
Model strings below are the bracketed names from that file.

Architecture names come from _policy.ARCHITECTURES. Compute capabilities follow NVIDIA's CUDA
GPU list (chip family -> CC: GP100 6.0, GP10x 6.1, GV100 7.0, TU10x 7.5, GA100 8.0, GA10x 8.6,
AD10x 8.9, GH100 9.0, GB100/GB102 10.0, GB20x 12.0). ``memory_mib`` is the *nominal* board
memory (marketing GiB x 1024); the driver reports slightly less for some boards (e.g. a T4 shows
15360 MiB, an H100 PCIe 81559 MiB), so treat it as a size class, not as the usable amount.
``None`` means not recorded here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._policy import ARCHITECTURES, architecture_label

NVIDIA_VENDOR_ID = "10de"

# Compute capability -> architecture name, derived from the policy's ARCHITECTURES (the one table
# of architectures and their compute capabilities; Jetson parts 6.2/7.2/8.7 keep their generation
# name there). Kept as a dict for callers that index it.
CC_ARCHITECTURE = dict((cc, entry["label"]) for entry in ARCHITECTURES.values() for cc in entry["cc"])

_GIB = 1024


def _entry(model, cc, mem_gib):
    return {
        "model": model,
        "architecture": architecture_label(cc),
        "compute_capability": cc,
        "memory_mib": None if mem_gib is None else int(mem_gib * _GIB),
    }


# Key: lower-case 4-digit PCI device ID (vendor 0x10de). Source: pci.ids as stated above.
PCI_DEVICES = {
    # Kepler (for identification only: its last driver branch is R470)
    "102d": _entry("Tesla K80", "3.7", 12),
    # Pascal
    "15f7": _entry("Tesla P100 PCIe 12GB", "6.0", 12),
    "15f8": _entry("Tesla P100 PCIe 16GB", "6.0", 16),
    "15f9": _entry("Tesla P100 SXM2 16GB", "6.0", 16),
    "15fc": _entry("Tesla P100-DGXS-16GB", "6.0", 16),
    "1b38": _entry("Tesla P40", "6.1", 24),
    "1bb3": _entry("Tesla P4", "6.1", 8),
    # Volta
    "1d81": _entry("TITAN V", "7.0", 12),
    "1db1": _entry("Tesla V100 SXM2 16GB", "7.0", 16),
    "1db2": _entry("Tesla V100 DGXS 16GB", "7.0", 16),
    "1db3": _entry("Tesla V100 FHHL 16GB", "7.0", 16),
    "1db4": _entry("Tesla V100 PCIe 16GB", "7.0", 16),
    "1db5": _entry("Tesla V100 SXM2 32GB", "7.0", 32),
    "1db6": _entry("Tesla V100 PCIe 32GB", "7.0", 32),
    "1db7": _entry("Tesla V100 DGXS 32GB", "7.0", 32),
    "1db8": _entry("Tesla V100 SXM3 32GB", "7.0", 32),
    "1dba": _entry("Quadro GV100", "7.0", 32),
    "1df5": _entry("Tesla V100 SXM2 16GB", "7.0", 16),
    "1df6": _entry("Tesla V100S PCIe 32GB", "7.0", 32),
    # Turing
    "1eb8": _entry("Tesla T4", "7.5", 16),
    "1e30": _entry("Quadro RTX 6000/8000", "7.5", None),
    # Ampere (GA100: 8.0)
    "20b0": _entry("A100 SXM4 40GB", "8.0", 40),
    "20b1": _entry("A100 PCIe 40GB", "8.0", 40),
    "20b2": _entry("A100 SXM4 80GB", "8.0", 80),
    "20b3": _entry("A100-SXM-64GB", "8.0", 64),
    "20b5": _entry("A100 PCIe 80GB", "8.0", 80),
    "20b7": _entry("A30 PCIe", "8.0", 24),
    "20f1": _entry("A100 PCIe 40GB", "8.0", 40),
    "20f3": _entry("A800-SXM4-80GB", "8.0", 80),
    "20f5": _entry("A800 80GB PCIe", "8.0", 80),
    # Ampere (GA10x: 8.6)
    "2230": _entry("RTX A6000", "8.6", 48),
    "2235": _entry("A40", "8.6", 48),
    "2236": _entry("A10", "8.6", 24),
    "2237": _entry("A10G", "8.6", 24),
    "25b6": _entry("A2 / A16", "8.6", None),
    # Ada
    "26b1": _entry("RTX 6000 Ada Generation", "8.9", 48),
    "26b5": _entry("L40", "8.9", 48),
    "26b9": _entry("L40S", "8.9", 48),
    "27b8": _entry("L4", "8.9", 24),
    # Hopper
    "2321": _entry("H100 NVL (H100L 94GB)", "9.0", 94),
    "2322": _entry("H800 PCIe", "9.0", 80),
    "2324": _entry("H800", "9.0", 80),
    "2330": _entry("H100 SXM5 80GB", "9.0", 80),
    "2331": _entry("H100 PCIe", "9.0", 80),
    "2335": _entry("H200 SXM 141GB", "9.0", 141),
    "2337": _entry("H100 SXM5 64GB", "9.0", 64),
    "2338": _entry("H100 SXM5 96GB", "9.0", 96),
    "2339": _entry("H100 SXM5 94GB", "9.0", 94),
    "233b": _entry("H200 NVL", "9.0", 141),
    # Blackwell (memory not recorded: several board configurations share an ID)
    "2901": _entry("B200", "10.0", None),
    "2bb5": _entry("RTX PRO 6000 Blackwell Server Edition", "12.0", 96),
}

# Fallback when only a marketing name is known (nvidia-smi on R470 without compute_cap and
# without pci.device_id): first match wins, so the more specific patterns come first.
NAME_PATTERNS = [
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
    """Return a copy of the table entry for a PCI device ID (any spelling), or None."""
    key = normalize_device_id(device_id)
    if key is None or key not in PCI_DEVICES:
        return None
    return dict(PCI_DEVICES[key])


def compute_capability_from_name(name):
    """Best-effort compute capability ("7.0") from a GPU product name, or None."""
    if not name:
        return None
    for pattern, cc in NAME_PATTERNS:
        if pattern.search(name):
            return cc
    return None


def architecture_for(compute_capability):
    """Architecture name for a compute capability string such as "7.0"; None when unknown."""
    if compute_capability is None:
        return None
    return architecture_label(str(compute_capability).strip())
