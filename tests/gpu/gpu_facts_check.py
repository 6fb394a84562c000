# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""labfleet.vllm.gpu_facts against the GPU's own answers (make check-gpu, stage gpu_facts).

The module's facts, once through NVML and once through nvidia-smi, are compared field by field with what
the driver answers when asked directly, by code that shares nothing with the module:

  csv      nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,driver_version,compute_cap,memory.total
           --format=csv,noheader,nounits
  banner   plain nvidia-smi (its "CUDA Version:")
  xml      nvidia-smi -q -x (driver_version, cuda_version, attached_gpus, per GPU product_name, uuid,
           pci/pci_bus_id, fb_memory_usage/total)
  topo     nvidia-smi topo -m (the GPU x GPU link matrix)
  nvml     libnvidia-ml.so.1 through ctypes (nvmlSystemGetDriverVersion, nvmlSystemGetCudaDriverVersion_v2,
           nvmlDeviceGetCount_v2, and per GPU GetName, GetUUID, GetPciInfo_v3, GetCudaComputeCapability,
           GetMemoryInfo)

    python gpu_facts_check.py collect --nvidia-smi PATH --out RAW.json     the GPU's answers, as they came
    python gpu_facts_check.py compare RAW.json --facts nvml=F1.json --facts nvidia_smi=F2.json [--json OUT]
    python gpu_facts_check.py probe --backend nvml|nvidia_smi --out F.json  the module's code without Ansible

A field the module reports differently from any source that answers it is a mismatch (exit 1); memory may
differ by 1 MiB between nvidia-smi (MiB as printed) and NVML (bytes, floor-divided), nothing else may.
A source that cannot answer (no libnvidia-ml, an nvidia-smi without -q -x) is listed and left out.
Standard library only.
"""

from __future__ import absolute_import, division, print_function

import argparse
import ctypes
import json
import os
import re
import subprocess
import sys
from xml.etree import ElementTree

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(ROOT, "collections")

CSV_FIELDS = ("index", "name", "uuid", "pci.bus_id", "driver_version", "compute_cap", "memory.total")
FIELDS = ("count", "driver_version", "cuda_driver_version", "name", "uuid", "pci_bus_id", "compute_capability",
          "memory_total_mib", "topology")
PATHS = ("nvml", "nvidia_smi")
SOURCES = ("csv", "banner", "xml", "topo", "nvml")
MEMORY_SLACK_MIB = 1
COMMAND_TIMEOUT = 60

_BUS_RE = re.compile(r"([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])")
_CUDA_RE = re.compile(r"CUDA Version:\s*([0-9]+\.[0-9]+)")
_GPU_RE = re.compile(r"GPU([0-9]+)$")
_LINK_RE = re.compile(r"X|SYS|SOC|NODE|PHB|PXB|PIX|NV[0-9]+")


# ------------------------------------------------------------------------------------------------
# What the GPU answers
# ------------------------------------------------------------------------------------------------

def run(argv, timeout=COMMAND_TIMEOUT):
    """(rc, stdout, stderr) of argv; rc 124 on a timeout, 127 when it cannot start."""
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, check=False,
                              env=dict(os.environ, LC_ALL="C", LANG="C"))
    except subprocess.TimeoutExpired:
        return 124, "", "%s did not answer within %d s" % (argv[0], timeout)
    except OSError as exc:
        return 127, "", str(exc)
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")


class _PciInfo(ctypes.Structure):  # nvml.h nvmlPciInfo_t (v3)
    _fields_ = [("busIdLegacy", ctypes.c_char * 16), ("domain", ctypes.c_uint), ("bus", ctypes.c_uint),
                ("device", ctypes.c_uint), ("pciDeviceId", ctypes.c_uint), ("pciSubSystemId", ctypes.c_uint),
                ("busId", ctypes.c_char * 32)]


class _Memory(ctypes.Structure):  # nvml.h nvmlMemory_t (v1)
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def read_nvml(library="libnvidia-ml.so.1"):
    """The driver's answers through libnvidia-ml, called with ctypes (no pynvml): a dict, or {"error": why}."""
    try:
        lib = ctypes.CDLL(library)
    except OSError as exc:
        return {"error": "cannot load %s (%s)" % (library, exc)}

    def call(name, *args):
        rc = getattr(lib, name)(*args)
        if rc != 0:
            raise RuntimeError("%s returned NVML error %d" % (name, rc))

    buf = ctypes.create_string_buffer(96)
    try:
        call("nvmlInit_v2")
    except (RuntimeError, AttributeError) as exc:
        return {"error": str(exc)}
    try:
        call("nvmlSystemGetDriverVersion", buf, ctypes.c_uint(96))
        answer = {"driver_version": buf.value.decode(), "gpus": []}
        cuda = ctypes.c_int()
        call("nvmlSystemGetCudaDriverVersion_v2", ctypes.byref(cuda))
        answer["cuda_driver_version_int"] = cuda.value
        count = ctypes.c_uint()
        call("nvmlDeviceGetCount_v2", ctypes.byref(count))
        answer["count"] = count.value
        for index in range(count.value):
            handle = ctypes.c_void_p()
            call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(handle))
            gpu = {"index": index}
            call("nvmlDeviceGetName", handle, buf, ctypes.c_uint(96))
            gpu["name"] = buf.value.decode()
            call("nvmlDeviceGetUUID", handle, buf, ctypes.c_uint(96))
            gpu["uuid"] = buf.value.decode()
            pci = _PciInfo()
            call("nvmlDeviceGetPciInfo_v3", handle, ctypes.byref(pci))
            gpu["pci_bus_id"] = pci.busId.decode()
            major, minor = ctypes.c_int(), ctypes.c_int()
            call("nvmlDeviceGetCudaComputeCapability", handle, ctypes.byref(major), ctypes.byref(minor))
            gpu["compute_capability"] = [major.value, minor.value]
            memory = _Memory()
            call("nvmlDeviceGetMemoryInfo", handle, ctypes.byref(memory))
            gpu["memory_total_bytes"] = memory.total
            answer["gpus"].append(gpu)
    except (RuntimeError, AttributeError) as exc:
        return {"error": str(exc)}
    finally:
        try:
            lib.nvmlShutdown()
        except AttributeError:
            pass
    return answer


def collect(nvidia_smi, runner=run, nvml_reader=read_nvml):
    """Everything the GPU answers, raw: {name: {"argv", "rc", "stdout", "stderr"}} and "nvml". A driver that
    does not know the compute_cap query field (R470) is asked again without it ("fields" says which)."""
    fields = list(CSV_FIELDS)
    calls = [
        ("banner", [nvidia_smi]),
        ("xml", [nvidia_smi, "-q", "-x"]),
        ("topo", [nvidia_smi, "topo", "-m"]),
    ]
    raw = {}
    while True:
        argv = [nvidia_smi, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"]
        rc, out, err = runner(argv)
        if rc != 0 and "compute_cap" in fields and 'Field "compute_cap" is not a valid field' in out + err:
            fields.remove("compute_cap")
            continue
        raw["csv"] = {"argv": argv, "rc": rc, "stdout": out, "stderr": err, "fields": fields}
        break
    for name, argv in calls:
        rc, out, err = runner(argv)
        raw[name] = {"argv": argv, "rc": rc, "stdout": out, "stderr": err}
    raw["nvml"] = nvml_reader()
    return raw


# ------------------------------------------------------------------------------------------------
# Reading the answers (independent of plugins/module_utils/probes/_gpu.py)
# ------------------------------------------------------------------------------------------------

def bus_id(text):
    """'00000000:3B:00.0' or '0000:3b:00.0' -> '0000:3b:00.0'; None when it is not a bus ID."""
    match = _BUS_RE.fullmatch((text or "").strip())
    if not match:
        return None
    domain, bus, device, function = match.groups()
    return "%04x:%02x:%02x.%s" % (int(domain, 16), int(bus, 16), int(device, 16), function)


def _mib(text):
    match = re.fullmatch(r"\s*([0-9]+)\s*(MiB)?\s*", text or "")
    return int(match.group(1)) if match else None


def _answered(entry):
    return isinstance(entry, dict) and entry.get("rc") == 0 and (entry.get("stdout") or "").strip()


def _why(entry):
    if not isinstance(entry, dict):
        return "not asked"
    text = " ".join(((entry.get("stdout") or "") + " " + (entry.get("stderr") or "")).split())
    return "exit %s: %s" % (entry.get("rc"), text[:160] or "no output")


def read_csv(entry):
    fields = entry.get("fields") or CSV_FIELDS
    gpus = []
    for line in entry["stdout"].splitlines():
        if not line.strip():
            continue
        values = [value.strip() for value in line.split(",")]
        if len(values) != len(fields):
            raise ValueError("csv line %r has %d values, expected %d" % (line, len(values), len(fields)))
        row = dict(zip(fields, values))
        gpus.append({"index": int(row["index"]), "name": row["name"], "uuid": row["uuid"],
                     "pci_bus_id": bus_id(row["pci.bus_id"]), "compute_capability": row.get("compute_cap"),
                     "memory_total_mib": _mib(row["memory.total"]), "driver_version": row["driver_version"]})
    drivers = sorted(set(gpu.pop("driver_version") for gpu in gpus))
    return {"count": len(gpus), "driver_version": drivers[0] if len(drivers) == 1 else None, "gpus": gpus}


def read_banner(entry):
    match = _CUDA_RE.search(entry["stdout"])
    return {"cuda_driver_version": match.group(1) if match else None}


def read_xml(entry):
    root = ElementTree.fromstring(entry["stdout"].strip().encode("utf-8"))

    def text(node, path):
        found = node.find(path)
        return found.text.strip() if found is not None and found.text else None

    gpus = []
    for node in root.findall("gpu"):
        gpus.append({"name": text(node, "product_name"), "uuid": text(node, "uuid"),
                     "pci_bus_id": bus_id(text(node, "pci/pci_bus_id") or node.get("id")),
                     "memory_total_mib": _mib(text(node, "fb_memory_usage/total"))})
    attached = text(root, "attached_gpus")
    return {"count": int(attached) if attached and attached.isdigit() else len(gpus),
            "driver_version": text(root, "driver_version"), "cuda_driver_version": text(root, "cuda_version"),
            "gpus": gpus}


def read_topo(entry):
    """{"a-b": link} for every GPU pair of `nvidia-smi topo -m` (a < b; SOC read as SYS)."""
    lines = entry["stdout"].splitlines()
    header = None
    links = {}
    for line in lines:
        tokens = line.split()
        if header is None:
            if any(_GPU_RE.match(token) for token in tokens):
                header = []
                for token in tokens:
                    match = _GPU_RE.match(token)
                    if match:
                        header.append(int(match.group(1)))
                    elif header:
                        break
            continue
        if not tokens or tokens[0].startswith("Legend"):
            if tokens:
                break
            continue
        row = _GPU_RE.match(tokens[0])
        if not row:
            continue
        a = int(row.group(1))
        for b, cell in zip(header, tokens[1:1 + len(header)]):
            if not _LINK_RE.fullmatch(cell):
                raise ValueError("topology cell %r in row %s" % (cell, tokens[0]))
            if a < b:
                links["%d-%d" % (a, b)] = "SYS" if cell == "SOC" else cell
    if header is None:
        raise ValueError("no GPU columns in nvidia-smi topo -m")
    return {"topology": links}


def read_nvml_answer(answer):
    gpus = []
    for gpu in answer["gpus"]:
        gpus.append({"index": gpu["index"], "name": gpu["name"], "uuid": gpu["uuid"],
                     "pci_bus_id": bus_id(gpu["pci_bus_id"]),
                     "compute_capability": "%d.%d" % tuple(gpu["compute_capability"]),
                     "memory_total_mib": gpu["memory_total_bytes"] // (1024 * 1024)})
    cuda = answer.get("cuda_driver_version_int")
    return {"count": answer["count"], "driver_version": answer["driver_version"],
            "cuda_driver_version": ("%d.%d" % (cuda // 1000, (cuda % 1000) // 10)) if cuda else None,
            "gpus": gpus}


def sources_from_raw(raw):
    """{source: answer dict or {"error": why}} for csv, banner, xml, topo and nvml."""
    readers = {"csv": read_csv, "banner": read_banner, "xml": read_xml, "topo": read_topo}
    sources = {}
    for name, reader in readers.items():
        entry = raw.get(name)
        if not _answered(entry):
            sources[name] = {"error": _why(entry)}
            continue
        try:
            sources[name] = reader(entry)
        except (ValueError, KeyError, TypeError, ElementTree.ParseError) as exc:
            sources[name] = {"error": "unreadable: %s" % exc}
    nvml = raw.get("nvml") or {"error": "not asked"}
    if "error" in nvml:
        sources["nvml"] = {"error": nvml["error"]}
    else:
        try:
            sources["nvml"] = read_nvml_answer(nvml)
        except (ValueError, KeyError, TypeError) as exc:
            sources["nvml"] = {"error": "unreadable: %s" % exc}
    return sources


# ------------------------------------------------------------------------------------------------
# The comparison
# ------------------------------------------------------------------------------------------------

def _source_gpu(source, gpu_bus, gpu_index):
    """The source's entry for the module's GPU: by index where the source numbers its GPUs (csv, nvml), else
    by PCI bus ID (xml, whose bus ID then is the key and not compared)."""
    for gpu in source.get("gpus") or []:
        if "index" in gpu:
            if gpu["index"] == gpu_index:
                return gpu
        elif gpu_bus is not None and gpu.get("pci_bus_id") == gpu_bus:
            return gpu
    return None


def _agree(field, ours, theirs):
    if field == "memory_total_mib":
        return isinstance(ours, int) and isinstance(theirs, int) and abs(ours - theirs) <= MEMORY_SLACK_MIB
    return ours == theirs


def _module_topology(facts):
    links = {}
    for pair in (facts.get("topology") or {}).get("pairs") or []:
        a, b = sorted((pair["a"], pair["b"]))
        links["%d-%d" % (a, b)] = pair.get("link")
    return links


def compare(facts_by_path, sources):
    """Rows [{path, field, gpu, module, answers {source: value}, result, note}] and ok (no mismatch).

    result: ok, MISMATCH, or n/a (no source answers that field; a module value of None against an answer
    is a mismatch: the module should have read it)."""
    rows = []
    answering = dict((name, src) for name, src in sources.items() if "error" not in src)

    def add(path, field, gpu, module_value, answers, note=""):
        if not answers:
            result = "n/a"
        elif all(_agree(field, module_value, value) for value in answers.values()):
            result = "ok"
        else:
            result = "MISMATCH"
        rows.append({"path": path, "field": field, "gpu": gpu, "module": module_value, "answers": answers,
                     "result": result, "note": note})

    for path, facts in facts_by_path.items():
        if facts.get("error"):
            rows.append({"path": path, "field": "(module)", "gpu": "", "module": None, "answers": {},
                         "result": "MISMATCH", "note": facts["error"]})
            continue
        if facts.get("state") != "ok" or facts.get("backend") != path:
            rows.append({"path": path, "field": "state", "gpu": "", "module": "%s via %s" % (
                facts.get("state"), facts.get("backend")), "answers": {}, "result": "MISMATCH",
                "note": facts.get("msg") or ""})
        for field in ("count", "driver_version", "cuda_driver_version"):
            answers = dict((name, src[field]) for name, src in answering.items()
                           if field in src and src[field] is not None)
            add(path, field, "", facts.get(field), answers)
        gpus = facts.get("gpus") or []
        for gpu in gpus:
            label = str(gpu.get("index"))
            for field in ("name", "uuid", "pci_bus_id", "compute_capability", "memory_total_mib"):
                answers = {}
                for name, src in answering.items():
                    theirs = _source_gpu(src, gpu.get("pci_bus_id"), gpu.get("index"))
                    if field == "pci_bus_id" and theirs is not None and "index" not in theirs:
                        continue  # matched by its bus ID
                    if theirs is not None and theirs.get(field) is not None:
                        answers[name] = theirs[field]
                add(path, field, label, gpu.get(field), answers)
        listed = set(gpu.get("pci_bus_id") for gpu in gpus)
        for name, src in answering.items():
            for theirs in src.get("gpus") or []:
                if theirs.get("pci_bus_id") not in listed:
                    rows.append({"path": path, "field": "gpu", "gpu": theirs.get("pci_bus_id"), "module": None,
                                 "answers": {name: theirs.get("name")}, "result": "MISMATCH",
                                 "note": "a GPU the module does not list"})
        topo = answering.get("topo")
        module_links = _module_topology(facts)
        if topo is not None:
            for pair in sorted(set(module_links) | set(topo["topology"])):
                add(path, "topology", pair, module_links.get(pair),
                    {"topo": topo["topology"][pair]} if pair in topo["topology"] else {})
            if not module_links and not topo["topology"]:
                rows.append({"path": path, "field": "topology", "gpu": "", "module": "no GPU pair",
                             "answers": {"topo": "no GPU pair"}, "result": "ok", "note": ""})
    ok = not any(row["result"] == "MISMATCH" for row in rows)
    return rows, ok


def _show(value):
    if value is None:
        return "-"
    return str(value)


def render(rows, sources):
    """The field-by-field table and the sources that did not answer, as text lines."""
    header = ("path", "field", "gpu", "module", "GPU's own answers", "result")
    table = []
    for row in rows:
        answers = " ".join("%s=%s" % (name, _show(value)) for name, value in sorted(row["answers"].items()))
        table.append((row["path"], row["field"], row["gpu"], _show(row["module"]), answers or "-",
                      row["result"] + ((": " + row["note"]) if row["note"] else "")))
    widths = [min(44, max([len(header[i])] + [len(line[i]) for line in table])) for i in range(len(header) - 1)]
    lines = []
    for line in [header] + table:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(line, widths)) + "  " + line[-1])
    for name in SOURCES:
        if "error" in sources.get(name, {"error": "not asked"}):
            lines.append("source %s did not answer: %s" % (name, sources.get(name, {}).get("error", "not asked")))
    return lines


# ------------------------------------------------------------------------------------------------
# The module's code without Ansible (a machine without ansible-core)
# ------------------------------------------------------------------------------------------------

def probe_direct(backend, nvidia_smi=None):
    """What gpu_facts returns, from plugins/module_utils/probes/_gpu.py probe() with a subprocess runner (the module's
    own run_command wrapper adds coreutils timeout; this one bounds each call the same way)."""
    if COLLECTIONS not in sys.path:
        sys.path.insert(0, COLLECTIONS)
    from ansible_collections.labfleet.vllm.plugins.module_utils.probes import _gpu  # pylint: disable=import-outside-toplevel
    try:
        return _gpu.probe(backend=backend, run_command=lambda argv: run(list(argv)), nvidia_smi=nvidia_smi)
    except _gpu.BackendUnavailable as exc:
        return {"error": str(exc)}


# ------------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------------

def _load(path):
    with open(path) as handle:
        return json.load(handle)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    col = sub.add_parser("collect", help="ask the GPU (nvidia-smi and libnvidia-ml)")
    col.add_argument("--nvidia-smi", default="nvidia-smi")
    col.add_argument("--out", required=True)
    cmp_ = sub.add_parser("compare", help="the module's facts against the GPU's answers")
    cmp_.add_argument("raw")
    cmp_.add_argument("--facts", action="append", default=[], metavar="PATH=FILE",
                      help="ansible_facts.nvidia of one backend (nvml or nvidia_smi) as JSON")
    cmp_.add_argument("--json", help="write the rows and the sources as JSON")
    prb = sub.add_parser("probe", help="the module's probe without Ansible")
    prb.add_argument("--backend", choices=PATHS, required=True)
    prb.add_argument("--nvidia-smi")
    prb.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if args.command == "collect":
        with open(args.out, "w") as handle:
            json.dump(collect(args.nvidia_smi), handle, indent=1, sort_keys=True)
        return 0
    if args.command == "probe":
        with open(args.out, "w") as handle:
            json.dump(probe_direct(args.backend, args.nvidia_smi), handle, indent=1, sort_keys=True)
        return 0
    if args.command == "compare":
        facts = {}
        for item in args.facts:
            path, _sep, name = item.partition("=")
            if path not in PATHS or not name:
                parser.error("--facts takes nvml=FILE or nvidia_smi=FILE, got %r" % item)
            facts[path] = _load(name)
        sources = sources_from_raw(_load(args.raw))
        rows, ok = compare(facts, sources)
        for line in render(rows, sources):
            print(line)
        if args.json:
            with open(args.json, "w") as handle:
                json.dump({"ok": ok, "rows": rows, "sources": sources}, handle, indent=1, sort_keys=True)
        return 0 if ok else 1
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
