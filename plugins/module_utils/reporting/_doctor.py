# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use playbooks/doctor.yml instead.
"""The doctor: why a vLLM host misbehaves, for the five failures of the reference deployment.

Each check takes what the probes and the plan already return (gpu_facts' ``ansible_facts.nvidia``,
host_facts' ``labfleet_host``, vllm_image_facts' ``image``, deploy_gate's verdict and one of its
``instances``) plus a few raw texts the doctor playbook collects read-only (the journal tail of
the vLLM unit, /etc/docker/daemon.json, a ``docker run --rm --gpus all <image> nvidia-smi -L``
attempt, ``nvidia-smi topo -m`` and ``topo -p2p r``, ``lspci -vvv`` ACS lines, /proc/cmdline, the
CDI specs, the /dev/nvidia* nodes, the container's NCCL_/CUDA_ environment). It decides nothing the
probes or the gate already decide: arch coverage comes from _policy.covers/arch_reach, the GPU
path from _host.require_cuda_enforcement, container failures from _image.classify_gpu_check,
daemon.json from _daemon_json.parse_daemon_json and memory from the gate's memory plan (and, for
the settings that fit, from _gate.evaluate run again with other settings).

Every check returns one finding::

    {"check": one of CHECKS, "status": one of STATUSES, "cause": one sentence with the evidence,
     "fix": what to change (package and version, flag and value, file and key, command),
     "evidence": {...}}

``unknown`` says in ``fix`` what to collect; ``not_applicable`` says why. diagnose() runs all five;
summary_lines() gives a person one line per check; the fleet report's doctor section
(roles/fleet_report/templates) renders the results of several hosts.

Facts carry their source and a confidence (verified: read in the primary source; third_party;
inferred) in SOURCES; findings list the keys they rest on in ``evidence["sources"]``.

Pure: no I/O, no Ansible imports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import re

from ansible_collections.labfleet.vllm.plugins.module_utils.formats._daemon_json import DaemonJsonError, parse_daemon_json
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate import GateInputError, evaluate
from ansible_collections.labfleet.vllm.plugins.module_utils.probes._gpu import ParseError, parse_topology
from ansible_collections.labfleet.vllm.plugins.module_utils.probes._host import first_version, require_cuda_enforcement
from ansible_collections.labfleet.vllm.plugins.module_utils.probes._image import classify_gpu_check
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._plan import arg_key
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._vllm_startup import expand_human_int
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._policy import (
    TOOL_VERSIONS,
    TOOLKIT_PACKAGES,
    arch_reach,
    covers,
    parse_arch,
    parse_cc,
    tool_version,
)

CHECKS = ("gpu_in_container", "illegal_instruction", "no_kernel_image", "out_of_memory", "tensor_parallel_pcie")
STATUSES = ("healthy", "problem", "unknown", "not_applicable")
GIB = 1024 ** 3
# The toolkit release the doctor's fixes name (the container_runtime role's default pin).
_TOOLKIT = TOOL_VERSIONS["toolkit_tested"]["version"]

# Where each fact comes from and how sure it is.
SOURCES = {
    "docker_gpus": (TOOL_VERSIONS["docker_gpus"]["source"], TOOL_VERSIONS["docker_gpus"]["confidence"]),
    "toolkit_min": (TOOL_VERSIONS["toolkit_min"]["source"], TOOL_VERSIONS["toolkit_min"]["confidence"]),
    "toolkit_pin": ("roles/container_runtime/defaults/main.yml container_runtime_toolkit_version %s; the four "
                    "packages are pinned together (facts.md section 5)" % _TOOLKIT, "verified"),
    "daemon_json": ("dockerd refuses to start with a daemon.json it cannot parse "
                    "(docs.docker.com/reference/cli/dockerd/#daemon-configuration-file; `dockerd --validate`, "
                    "Docker 23 and later)", "third_party"),
    "runtime_configure": ("NVIDIA/nvidia-container-toolkit cmd/nvidia-ctk/runtime/configure/configure.go, "
                          "pkg/config/engine/docker/docker.go: `nvidia-ctk runtime configure --runtime=docker` "
                          "adds runtimes.nvidia to /etc/docker/daemon.json (facts.md section 5)", "verified"),
    "gpu_path": ("plugins/module_utils/probes/_host.py require_cuda_enforcement (how docker --gpus reaches the GPUs, "
                 "and when it is blocked)", "verified"),
    "dev_char": ("NVIDIA/nvidia-container-toolkit#48, NVIDIA/nvidia-docker#1671: containers lose their GPUs "
                 "('Failed to initialize NVML: Unknown Error') after systemctl daemon-reload without the "
                 "/dev/char links; `nvidia-ctk system create-dev-char-symlinks --create-all` "
                 "(reliability.md section 0.3)", "third_party"),
    "device_nodes": ("libnvidia-container gives a container /dev/nvidiactl, /dev/nvidia-uvm and /dev/nvidia<N> "
                     "per GPU; `nvidia-modprobe -u -c=0` creates the uvm nodes (NVIDIA driver README, "
                     "nvidia-modprobe)", "third_party"),
    "cdi_generate": ("NVIDIA/cloud-native-docs container-toolkit/cdi-support.md: `nvidia-ctk cdi generate "
                     "--output=/etc/cdi/nvidia.yaml`, regenerate after a driver upgrade; nvidia-cdi-refresh from "
                     "toolkit %s (facts.md section 5)" % TOOL_VERSIONS["toolkit_cdi_refresh"]["version"], "verified"),
    "cdi_stale": ("NVIDIA/nvidia-container-toolkit#856, #1611, #1517 and NVIDIA/NemoClaw PR #4733: a CDI spec "
                  "left from another driver or GPU set (anchors.md (d)8)", "third_party"),
    "gpu_check": ("plugins/module_utils/probes/_image.py classify_gpu_check (what docker and CUDA print, and the fix)",
                  "verified"),
    "vllm_cuda_build": ("vllm@0.8.5:CMakeLists.txt:88-89 and vllm@0.19.1:CMakeLists.txt:110-111 include "
                        "cmake/cpu_extension.cmake (the -mavx* flags) only for VLLM_TARGET_DEVICE cpu, so vLLM's own "
                        "CUDA build asks for no x86 extension", "verified"),
    "cuda_image_wheels": ("the other x86 binaries of a CUDA image (torch, numpy, ...) pick AVX2/AVX-512 code at run "
                          "time; not checked per library", "inferred"),
    "vllm_cpu_085": ("vllm@0.8.5:cmake/cpu_extension.cmake:76-107 (-mavx512f -mavx512vl -mavx512bw -mavx512dq when "
                     "the build host has AVX-512 and VLLM_CPU_DISABLE_AVX512 is not true, else -mavx2), :140 (FATAL "
                     "without either); docker/Dockerfile.cpu:65-67", "verified"),
    "vllm_cpu_085_release": ("vllm-project/vllm#18660: the v0.8.5.post1 CPU release image dies with SIGILL "
                             "(vinserti64x4) on a CPU without AVX-512", "third_party"),
    "vllm_cpu_0191": ("vllm@0.19.1:cmake/cpu_extension.cmake:98-112,414-448 (an _C_AVX2 build with -mavx2 -mf16c "
                      "next to the AVX-512 ones, picked at run time); "
                      "docs/getting_started/installation/cpu.x86.inc.md:10,21", "verified"),
    "sigill": ("signal(7): SIGILL is 4; a process killed by signal n exits 128+n in the shell and through "
               "`docker run` (132); systemd logs code=dumped, status=4/ILL", "third_party"),
    "invalid_opcode": ("kernel log 'traps: <process>[pid] trap invalid opcode ... in <library>' names the library "
                       "(abetlen/llama-cpp-python#839)", "third_party"),
    "vm_cpu": ("a virtual CPU model can hide AVX2 from the guest; CPU passthrough fixed it "
               "(Mintplex-Labs/anything-llm#1331)", "third_party"),
    "arch_reach": ("plugins/module_utils/knowledge/_policy.py arch_reach/covers: SASS for X.Y runs on X.Z with Z >= Y, PTX for "
                   "X.Y is JIT-compiled for any arch >= X.Y", "verified"),
    "no_kernel_image": ("vllm-project/vllm#19185, #5547, #4187 (V100: 'no kernel image is available for execution "
                        "on the device'), reliability.md section 3; the gate's IMAGE_LACKS_ARCH", "third_party"),
    "image_profiles": ("shared/reference/facts.md section 3.1: vLLM 0.8.5 (CUDA 12.4) and 0.10.2-0.19.1 ship sm_70 "
                       "kernels, 0.9.0-0.10.1.1 ship torch cu128 without sm_70, 0.20.0 starts at 7.5", "verified"),
    "marlin_arch": ("vllm@0.8.5:CMakeLists.txt:303,630 (Marlin and Marlin MoE kernels built for 8.0;8.6;8.7;8.9;9.0;"
                    "10.0;10.1;12.0 only)", "verified"),
    "force_ptx_jit": ("CUDA Programming Guide, 'CUDA Environment Variables': CUDA_FORCE_PTX_JIT=1 makes the driver "
                      "ignore embedded binary code and JIT-compile embedded PTX; a kernel without PTX fails to load. "
                      "Without matching SASS the driver JIT-compiles PTX by itself", "third_party"),
    "jit_cache": ("NVIDIA blog 'CUDA Pro Tip: Understand Fat Binaries and JIT Caching' (CUDA_CACHE_PATH, "
                  "CUDA_CACHE_MAXSIZE; anchors.md (c)12)", "third_party"),
    "ptx_toolchain": ("cudaErrorUnsupportedPtxVersion: a driver cannot JIT-compile PTX from a newer toolkit "
                      "(facts.md section 1.2; vllm@0.17.0 docs/usage/troubleshooting.md)", "verified"),
    "memory_plan": ("plugins/module_utils/decisions/_gate.py memory_plan and _vllm_memory.profile_reserve: budget = total x "
                    "gpu_memory_utilization, reserve (activation peak, cuBLAS, non-torch), outside_budget (CUDA "
                    "context, CUDA graphs, NCCL)", "verified"),
    "oom_cache_v0": ("vllm@0.8.5:vllm/worker/worker.py:559-570 ('No available memory for the cache blocks'; 'The "
                     "model's max seq len (X) is larger than the maximum number of tokens that can be stored in KV "
                     "cache (Y)')", "verified"),
    "oom_cache_v1": ("vllm@0.8.5:vllm/v1/core/kv_cache_utils.py:526-552 and vllm@0.19.1:vllm/v1/core/"
                     "kv_cache_utils.py:619-648 ('To serve at least one request ... KV cache is needed, which is "
                     "larger than the available KV cache memory')", "verified"),
    "oom_free_memory": ("vllm@0.19.1:vllm/v1/worker/utils.py:403-421 ('Free memory on device ... on startup is less "
                        "than desired GPU memory utilization')", "verified"),
    "oom_cudagraph": ("vllm@0.8.5:vllm/worker/model_runner.py:1450-1457 (out of memory during cudagraph capture: "
                      "decrease gpu_memory_utilization, use eager mode or lower max_num_seqs)", "verified"),
    "oom_sampler": ("vllm@0.8.5:vllm/v1/worker/gpu_model_runner.py:1546-1552 and vllm@0.19.1:vllm/v1/worker/"
                    "gpu_model_runner.py:5599-5606 ('CUDA out of memory occurred when warming up sampler')",
                    "verified"),
    "oom_weights": ("vllm@0.19.1:vllm/v1/worker/gpu_model_runner.py:4809-4818 ('Failed to load model - not enough "
                    "GPU memory')", "verified"),
    "oom_torch": ("pytorch c10/cuda/CUDACachingAllocator.cpp: 'CUDA out of memory. Tried to allocate X. GPU n has a "
                  "total capacity of T of which F is free'", "third_party"),
    "serving": ("vllm@0.8.5:vllm/entrypoints/openai/api_server.py:1090 and vllm@0.19.1:vllm/entrypoints/openai/"
                "api_server.py:596,641 ('Starting vLLM API server on' / 'Starting vLLM server on')", "verified"),
    "oom_reference": ("shared/reference/reference-deployment.md failure 4: OOM under load at gpu_memory_utilization "
                      "0.92, max_num_seqs 32, max_model_len 32768 on 2x V100; lowering max_num_seqs first costs the "
                      "least throughput", "third_party"),
    "load_margin": ("the doctor keeps one more activation peak of the plan's profile run free outside the budget, "
                    "for load peaks the profile run does not see (allocator fragmentation, sampling buffers); it "
                    "flags the reference deployment's 0.92/32/32768 that ran out of memory under load", "inferred"),
    "nccl_watchdog": ("pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp: '[Rank n] Watchdog caught "
                      "collective operation timeout: WorkNCCL(...) ran for N milliseconds before timing out'",
                      "third_party"),
    "engine_timeout": ("vllm@0.8.5:vllm/engine/async_llm_engine.py:856,876-878 and vllm/envs.py:274-275 ('Engine "
                       "iteration timed out. This should never happen!' after VLLM_ENGINE_ITERATION_TIMEOUT_S=60)",
                       "verified"),
    "rpc_timeout": ("vllm@0.8.5:vllm/v1/executor/multiproc_executor.py:193 and vllm@0.19.1:vllm/v1/executor/"
                    "multiproc_executor.py:378 ('RPC call to <method> timed out.')", "verified"),
    "shm_broadcast": ("vllm@0.19.1:vllm/distributed/device_communicators/shm_broadcast.py:83-89,564-567 ('No "
                      "available shared memory broadcast block found in 60 seconds. This typically happens when "
                      "some processes are hanging'); debug level in 0.8.5 (:366-370)", "verified"),
    "metrics_stall": ("vllm@0.8.5:vllm/engine/metrics.py:478-496 and vllm@0.19.1:vllm/v1/metrics/loggers.py:198-224: "
                      "the 'Avg generation throughput' line is logged at info while this or the last interval had "
                      "tokens, then at debug, so a last line with Running >= 1 and 0.0 tokens/s is a server that "
                      "stopped producing tokens", "inferred"),
    "nccl_p2p_disable": ("NCCL environment variables (docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html): "
                         "NCCL_P2P_DISABLE=1 turns off the P2P transport (NVLink or PCI); vllm@0.19.1:"
                         "docs/usage/troubleshooting.md:175 (a temporary workaround that may cost performance); "
                         "vllm-project/vllm#5484", "third_party"),
    "nccl_p2p_level": ("NCCL env.html: NCCL_P2P_LEVEL (LOC, NVL, PIX, PXB, PHB, SYS) is the farthest path P2P is "
                       "used over; NVL fixed vllm-project/vllm#8087", "third_party"),
    "nccl_ib_disable": ("NCCL env.html: NCCL_IB_DISABLE=1 keeps NCCL off InfiniBand/RoCE; per-host override for "
                        "PCIe boxes without InfiniBand (reliability.md section 3)", "third_party"),
    "nccl_debug": ("vllm@0.19.1:docs/usage/troubleshooting.md:40,140-175 (NCCL_DEBUG=TRACE, the NCCL sanity "
                   "script run with torchrun)", "verified"),
    "custom_all_reduce": ("vllm@0.8.5:vllm/distributed/device_communicators/custom_all_reduce.py:129-150 (vLLM's own "
                          "all-reduce over CUDA IPC runs on two PCIe GPUs when its P2P test passes); "
                          "--disable-custom-all-reduce helped in vllm-project/vllm#5484", "verified"),
    "acs_iommu": ("NCCL user guide, Troubleshooting, 'PCI Access Control Services (ACS)': IOMMU/VT-d can redirect "
                  "all PCI point-to-point traffic to the CPU root complex (a large slowdown or a hang); `sudo lspci "
                  "-vvv | grep ACSCtl` shows SrcValid+; disable ACS in the BIOS (VT-d) or with setpci "
                  "ECAP_ACS+0x6.w=0000", "third_party"),
    "topo_p2p": ("NCCL user guide, GPU troubleshooting: `nvidia-smi topo -p2p <p|r|w|n>` prints the P2P status "
                 "matrix (OK, CNS, GNS, TNS, NS, U)", "third_party"),
    "topo_legend": ("nvidia-smi topo -m legend (facts.md section 7): SYS crosses the SMP interconnect (QPI/UPI), "
                    "NODE host bridges in a NUMA node, PHB a host bridge, PXB/PIX PCIe bridges, NV# NVLink",
                    "verified"),
    "shm_size": ("vllm-project/vllm PR #1125, #1710, #1771: a small /dev/shm hangs or crashes tensor parallelism; "
                 "--ipc=host or --shm-size (reliability.md section 3)", "third_party"),
    "pcie_tp": ("shared/reference/reference-deployment.md failure 5: two cards slower than one over PCIe; TP 2 is "
                "about fitting, larger batches amortise the all-reduce", "third_party"),
}

# The journal's fault list: (fault, pattern, source key). A line counts for the first fault whose
# pattern it matches, so the specific patterns come before the generic ones.
JOURNAL_FAULTS = (
    ("illegal_instruction", r"Illegal instruction|\bSIGILL\b|status=4/ILL|status=132/|trap invalid opcode", "sigill"),
    ("no_kernel_image", r"no kernel image is available for execution on the device", "no_kernel_image"),
    ("ptx_unsupported", r"provided PTX was compiled with an unsupported toolchain", "ptx_toolchain"),
    ("oom_free_memory", r"Free memory on device .{0,80} is less than desired GPU memory utilization", "oom_free_memory"),
    ("oom_no_cache_blocks", r"No available memory for the cache blocks", "oom_cache_v0"),
    ("oom_max_model_len", r"is larger than the maximum number of tokens that can be stored in KV cache|"
                          r"KV cache is needed, which is larger than the available KV cache memory", "oom_cache_v1"),
    ("oom_sampler", r"CUDA out of memory occurred when warming up sampler", "oom_sampler"),
    ("oom_weights", r"Failed to load model - not enough GPU memory", "oom_weights"),
    ("oom_cuda", r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory", "oom_torch"),
    ("nccl_timeout", r"Watchdog caught collective operation timeout", "nccl_watchdog"),
    ("nccl_error", r"NCCL error|nccl(?:System|Internal|UnhandledCuda|Remote)Error", "nccl_debug"),
    ("engine_timeout", r"Engine iteration timed out", "engine_timeout"),
    ("rpc_timeout", r"RPC call to \S+ timed out", "rpc_timeout"),
    ("shm_broadcast_wait", r"No available shared memory broadcast block found", "shm_broadcast"),
    ("shm_too_small", r"ncclShmOpen|Error while creating shared memory segment|Fatal Python error: Bus error", "shm_size"),
    ("nccl_warn", r"NCCL WARN", "nccl_debug"),
)
_FAULT_RES = tuple((fault, re.compile(pattern), source) for fault, pattern, source in JOURNAL_FAULTS)
OOM_FAULTS = ("oom_free_memory", "oom_no_cache_blocks", "oom_max_model_len", "oom_sampler", "oom_weights", "oom_cuda")
HANG_FAULTS = ("nccl_timeout", "nccl_error", "engine_timeout", "rpc_timeout", "shm_broadcast_wait")
# What each fault means for the unit, in the fault list's words (reliability.md appendix A).
FAULT_STATES = dict([("illegal_instruction", "crashed(sigill)"), ("no_kernel_image", "failed(no_kernel_image)"),
                     ("ptx_unsupported", "failed(no_kernel_image)")] +
                    [(name, "failed(oom)") for name in OOM_FAULTS] +
                    [(name, "gated(nccl)") for name in HANG_FAULTS + ("stall",)] +
                    [("shm_too_small", "failed(shm)")])

# journalctl's "short"/"short-iso" prefix: time, host, unit[pid].
_JOURNAL_PREFIX_RE = re.compile(r"^\S+(?: [0-9]{1,2} [0-9:]{8})? \S+ [^\s:]+(?:\[[0-9]+\])?: ")
_SERVING_RE = re.compile(r"Starting vLLM (?:API )?server on")
_CUDAGRAPH_RE = re.compile(r"Capturing (?:cudagraphs|CUDA graph)", re.I)
_METRICS_RE = re.compile(r"Avg prompt throughput: ([0-9.]+) tokens/s, Avg generation throughput: ([0-9.]+) tokens/s, "
                         r"Running: ([0-9]+) reqs")
_OPCODE_LIB_RE = re.compile(r"trap invalid opcode.* in ([A-Za-z0-9_.+-]+)\[")
_TRIED_RE = re.compile(r"Tried to allocate ([0-9.]+) (GiB|MiB|KiB)")
_FREE_RE = re.compile(r"of which ([0-9.]+) (GiB|MiB|KiB|bytes) (?:is )?free|([0-9.]+) (GiB|MiB) free")
_FREE_MEMORY_RE = re.compile(r"Free memory on device \S+ \(([0-9.]+)/([0-9.]+) GiB\) on startup is less than desired "
                             r"GPU memory utilization \(([0-9.]+), ([0-9.]+) GiB\)")
_MAX_LEN_RE = re.compile(r"max seq len \(([0-9]+)\) is larger than the maximum number of tokens that can be stored "
                         r"in KV cache \(([0-9]+)\)|estimated maximum model length is ([0-9]+)")
_SMI_L_RE = re.compile(r"^GPU ([0-9]{1,4}): (.+?) \(UUID: (GPU-[0-9A-Fa-f-]{8,64})\)", re.M)
_UUID_RE = re.compile(r"GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_LIB_VERSION_RE = re.compile(r"lib(?:cuda|nvidia-ml)\.so\.([0-9]{2,4}\.[0-9]{1,3}(?:\.[0-9]{1,3})?)")
_DEV_NODE_RE = re.compile(r"/dev/nvidia([0-9]{1,3})\b")
# A device's name in a YAML spec ("- name: x" or, as nvidia-ctk writes it, "  name: x" after containerEdits).
_CDI_NAME_RE = re.compile(r"""^\s*(?:-\s+)?name:\s*["']?([^"'\s]+)""", re.M)
_ACS_DEVICE_RE = re.compile(r"^((?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(.*)$")
_UNITS = {"bytes": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": GIB}

# Flags that only tell the unit what to do (no value), as vllm serve takes them.
_BOOL_FLAGS = ("enforce_eager", "disable_custom_all_reduce", "disable_log_stats", "enable_prefix_caching",
               "enable_chunked_prefill", "trust_remote_code")
# The numeric flags the doctor reads: (type, lowest, highest), the gate's bounds (vllm.* in
# _gate_inputs); gpu_memory_utilization must be above its lowest. A value outside them, or one that
# is no number, is one vLLM refuses (or no host has): the checks that read it say so.
_NUMBER_FLAGS = {"gpu_memory_utilization": (float, 0.0, 1.0), "max_num_seqs": (int, 1, 2 ** 31),
                 "max_model_len": (int, 1, 2 ** 40), "tensor_parallel_size": (int, 1, 4096),
                 "pipeline_parallel_size": (int, 1, 4096), "max_num_batched_tokens": (int, 1, 2 ** 40),
                 "cpu_offload_gb": (float, 0.0, 1e6)}
_INT_TEXT_RE = re.compile(r"^[0-9]{1,19}\Z", re.ASCII)
_FLOAT_TEXT_RE = re.compile(r"^(?:[0-9]{1,19}\.?[0-9]{0,19}|\.[0-9]{1,19})(?:[eE][+-]?[0-9]{1,3})?\Z", re.ASCII)
# The largest figure read from a journal line (GiB, tokens/s, a token count); a larger one is not read.
_JOURNAL_LIMIT = 1e15
_ENV_PREFIXES = ("NCCL_", "CUDA_", "VLLM_", "TORCH_", "NVIDIA_", "PYTORCH_")
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
_GATE_KEYS = ("gpus", "driver_version", "image", "model", "policy_overrides", "nvlink", "driver_library_mismatch",
              "cuda_driver_version", "today", "lost_gpus", "require_cuda_enforced", "runtime_mode_why")
# How many times the OOM search may ask the gate (about 7 ms each).
MAX_EVALUATIONS = 160


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------

def _mapping(value):
    return value if isinstance(value, dict) else {}


def _clip(text, limit=300):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _gib(value):
    return "%.2f GiB" % (value / float(GIB))


def _version(text):
    """(major, minor, patch) of the first version in ``text``, or None."""
    found = first_version(text) if isinstance(text, str) else None
    if not found:
        return None
    parts = [int(p) for p in found.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))[:3]


def _lines(text):
    if text is None:
        return None
    if isinstance(text, (list, tuple)):
        return [str(line) for line in text]
    return str(text).splitlines()


def finding(check, status, cause, fix, evidence=None, sources=()):
    """One finding; ``sources`` are SOURCES keys, resolved into evidence["sources"]."""
    evidence = dict(evidence or {})
    cited = []
    for key in sources:
        if key in SOURCES and key not in [c["key"] for c in cited]:
            text, confidence = SOURCES[key]
            cited.append({"key": key, "source": text, "confidence": confidence})
    evidence["sources"] = cited
    return {"check": check, "status": status, "cause": cause, "fix": fix, "evidence": evidence}


def _join_fixes(fixes):
    fixes = [f for f in fixes if f]
    if len(fixes) <= 1:
        return fixes[0] if fixes else ""
    return " ".join("%d) %s" % (pos + 1, fix.rstrip(".;")) + ";" for pos, fix in enumerate(fixes))[:-1] + "."


def _sentence(parts):
    parts = [p.rstrip(". ") for p in parts if p]
    if not parts:
        return ""
    text = "; ".join(parts) + "."
    return text[0].upper() + text[1:]


def container_env(value):
    """The container's environment (dict, or an env file's NAME=value text) reduced to the NCCL_, CUDA_,
    VLLM_, TORCH_, NVIDIA_ and PYTORCH_ variables; names that look like secrets are dropped."""
    pairs = {}
    if isinstance(value, dict):
        pairs = dict((str(k), "" if v is None else str(v)) for k, v in value.items())
    elif isinstance(value, str):
        for line in value.splitlines():
            line = line.strip()
            if not line or line.startswith("#") or "=" not in line:
                continue
            name, _sep, val = line.partition("=")
            pairs[name.strip()] = val.strip()
    return dict((k, v) for k, v in pairs.items()
                if k.startswith(_ENV_PREFIXES) and not any(word in k.upper() for word in _SECRET_WORDS))


def arg_number(key, value):
    """The number of the numeric vLLM flag ``key`` (an _NUMBER_FLAGS key) from ``value`` (a number, or
    the text of an argv: ASCII digits, max_model_len's "32k" form too), or None when vLLM would refuse
    it or it is outside the gate's bounds."""
    kind, lowest, highest = _NUMBER_FLAGS[key]
    if isinstance(value, str):
        text = value.strip()
        if key == "max_model_len":
            text = str(expand_human_int(text))
        pattern = _INT_TEXT_RE if kind is int else _FLOAT_TEXT_RE
        value = kind(text) if pattern.match(text) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (isinstance(value, float) and (not math.isfinite(value) or (kind is int and value != int(value)))):
        return None
    if value < lowest or value > highest or (key == "gpu_memory_utilization" and value <= lowest):
        return None
    return kind(value)


def expected_number(key):
    """What vLLM takes for the numeric flag ``key``, in words."""
    kind, lowest, highest = _NUMBER_FLAGS[key]
    if kind is int:
        return "an integer from %d to %d" % (lowest, highest)
    side = "above" if key == "gpu_memory_utilization" else "from"
    return "a number %s %g and at most %g" % (side, lowest, highest)


def parse_vllm_argv(argv):
    """vLLM arguments (the part of the unit's command after the image) as a dict with underscored
    names: numbers for the memory and parallelism flags (their text when vLLM would refuse it, see
    arg_number), True for flags without a value."""
    if isinstance(argv, str):
        argv = argv.split()
    args = {}
    items = [str(a) for a in (argv or [])]
    pos = 0
    while pos < len(items):
        item = items[pos]
        pos += 1
        if not item.startswith("--"):
            continue
        name, sep, value = item[2:].partition("=")
        key = arg_key(name)
        if key in _BOOL_FLAGS and not sep:
            args[key] = True
            continue
        if not sep:
            if pos < len(items) and not items[pos].startswith("--"):
                value = items[pos]
                pos += 1
            else:
                args[key] = True
                continue
        number = arg_number(key, value) if key in _NUMBER_FLAGS else None
        args[key] = value if number is None else number
    return args


def parse_gpu_list(text):
    """``nvidia-smi -L`` lines: [{index, name, uuid}]."""
    return [{"index": int(m.group(1)), "name": m.group(2).strip(), "uuid": m.group(3)}
            for m in _SMI_L_RE.finditer(text or "")]


def _journal_number(text):
    """A figure of a journal line (digits and dots) as a float, or None when it does not parse or is beyond _JOURNAL_LIMIT."""
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) and number <= _JOURNAL_LIMIT else None


def _bytes(number, unit):
    number = _journal_number(number)
    return None if number is None else int(number * _UNITS[unit])


# ---------------------------------------------------------------------------------------------
# The journal
# ---------------------------------------------------------------------------------------------

def classify_journal(text):
    """Read the vLLM unit's journal tail (text or lines).

    Returns ``{"lines", "faults": {fault: [{"line", "text"}]}, "states", "serving_line",
    "cudagraph_line", "metrics_lines", "stall", "last_metrics"}`` (line numbers count from 0), or
    None when there is no journal. ``stall`` is the last throughput line when it shows requests
    running and no token produced (see SOURCES["metrics_stall"]).
    """
    lines = _lines(text)
    if lines is None:
        return None
    faults = {}
    serving = None
    cudagraph = None
    metrics = []
    for number, line in enumerate(lines):
        if serving is None and _SERVING_RE.search(line):
            serving = number
        if cudagraph is None and _CUDAGRAPH_RE.search(line):
            cudagraph = number
        match = _METRICS_RE.search(line)
        figures = [_journal_number(match.group(n)) for n in (1, 2, 3)] if match else [None]
        if None not in figures:
            # A throughput line whose figures do not parse is not read as one.
            metrics.append({"line": number, "prompt_tps": figures[0], "generation_tps": figures[1],
                            "running": int(figures[2]), "text": _clip(_JOURNAL_PREFIX_RE.sub("", line))})
        for fault, pattern, _source in _FAULT_RES:
            if pattern.search(line):
                faults.setdefault(fault, []).append({"line": number, "text": _clip(_JOURNAL_PREFIX_RE.sub("", line))})
                break
    stall = None
    if metrics:
        last = metrics[-1]
        if last["running"] > 0 and last["generation_tps"] == 0.0 and last["prompt_tps"] == 0.0:
            stall = last
    states = []
    for fault in list(faults) + (["stall"] if stall else []):
        state = FAULT_STATES.get(fault)
        if state and state not in states:
            states.append(state)
    return {"lines": len(lines), "faults": faults, "states": states, "serving_line": serving,
            "cudagraph_line": cudagraph, "metrics_lines": len(metrics), "stall": stall,
            "last_metrics": metrics[-1] if metrics else None}


def _first_line(journal, names):
    """The first journal line of any of the faults ``names``, or None."""
    found = []
    for name in names:
        found.extend((journal or {}).get("faults", {}).get(name, []))
    return min(found, key=lambda item: item["line"]) if found else None


# ---------------------------------------------------------------------------------------------
# 1. GPU not visible in containers
# ---------------------------------------------------------------------------------------------

def _cdi_text_summary(text):
    names = []
    try:
        doc = json.loads(text) if text.lstrip().startswith("{") else None
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        kind = doc.get("kind")
        names = [d.get("name") for d in doc.get("devices") or []
                 if isinstance(d, dict) and isinstance(d.get("name"), str)]
    else:
        match = re.search(r"""^\s*["']?kind["']?\s*:\s*["']?([A-Za-z0-9._-]+/[A-Za-z0-9._-]+)""", text, re.M)
        kind = match.group(1) if match else None
        names = _CDI_NAME_RE.findall(text)
    return {"kind": kind if isinstance(kind, str) else None, "devices": names,
            "uuids": sorted(set(_UUID_RE.findall(text))),
            "driver_versions": sorted(set(_LIB_VERSION_RE.findall(text))),
            "device_nodes": sorted(set(int(n) for n in _DEV_NODE_RE.findall(text)))}


def _cdi_problems(specs, gpus, driver_version):
    """What is wrong with the NVIDIA CDI specs ([{path, text}]) for these GPUs and driver."""
    problems = []
    summaries = []
    uuids = set(g.get("uuid") for g in gpus if g.get("uuid"))
    for spec in specs:
        if not isinstance(spec, dict) or not isinstance(spec.get("text"), str):
            continue
        summary = _cdi_text_summary(spec["text"])
        summary["path"] = spec.get("path")
        if summary["kind"] not in (None, "nvidia.com/gpu"):
            continue
        summaries.append(summary)
        where = summary["path"] or "a CDI spec"
        stale = [v for v in summary["driver_versions"] if driver_version and v != driver_version]
        if stale:
            problems.append("%s was made for driver %s, the host runs %s" % (where, ", ".join(stale), driver_version))
        index_names = set(n for n in summary["devices"] if n != "all" and ":" not in n and not n.startswith("GPU-"))
        spec_uuids = set(summary["uuids"])
        if spec_uuids and uuids and spec_uuids != uuids:
            extra = sorted(spec_uuids - uuids)
            lacking = sorted(uuids - spec_uuids)
            problems.append("%s lists %s%s%s" % (
                where, "GPU(s) this host does not have (%s)" % ", ".join(extra) if extra else "",
                " and " if extra and lacking else "",
                "not the host's %s" % ", ".join(lacking) if lacking else ""))
        elif index_names and gpus and len(index_names) != len(gpus):
            problems.append("%s defines %d GPU device(s), the host has %d" % (where, len(index_names), len(gpus)))
        if summary["devices"] and "all" not in summary["devices"]:
            problems.append("%s defines no nvidia.com/gpu=all device" % where)
    return problems, summaries


def _daemon_json_state(text, path):
    """("valid", None) when daemon.json's ``text`` parses as dockerd reads it, else (what is wrong, the fix)."""
    try:
        parse_daemon_json(text, path)
        return "valid", None
    except DaemonJsonError as exc:
        message = str(exc).split("; fix or remove", 1)[0].split(" (the file was left", 1)[0]
        return message, ("repair %s (keep its keys), check it with `dockerd --validate --config-file %s` (Docker 23 "
                         "and later), then `systemctl restart docker`; the container_runtime role merges "
                         "runtimes.nvidia into it only once it parses" % (path, path))


def _container_stack(container, docker, toolkit, daemon_json_path, image):
    """What host_facts' ``container`` facts say is wrong with Docker, the toolkit, the nvidia runtime
    and the path docker run --gpus takes: {problems, fixes, sources, gpu_path (mode and why, or None)}."""
    problems, fixes, sources, gpu_path = [], [], [], None
    if not container.get("docker_client_version") and not container.get("docker_server_version"):
        problems.append("Docker is not installed (no docker CLI on the host)")
        fixes.append("install Docker with the labfleet.vllm.container_runtime role (or `apt-get install docker.io`)")
    elif not container.get("docker_server_version"):
        problems.append("the Docker engine does not answer (%s)"
                        % (container.get("docker_error") or "no server version").rstrip("."))
        fixes.append("start it and read why it stopped: `systemctl status docker`, `journalctl -u docker -n 50`")
    elif _version(docker) is not None and _version(docker) < tool_version("docker_gpus"):
        needs = TOOL_VERSIONS["docker_gpus"]["version"]
        problems.append("Docker %s has no --gpus option (it needs %s)" % (docker, needs))
        fixes.append("upgrade Docker to %s or newer; until then run the container with --runtime=nvidia -e "
                     "NVIDIA_VISIBLE_DEVICES=all -e NVIDIA_DRIVER_CAPABILITIES=compute,utility" % needs)
        sources.append("docker_gpus")
    if not toolkit:
        problems.append("the NVIDIA Container Toolkit is not installed (no nvidia-ctk or nvidia-container-cli)")
        fixes.append("install nvidia-container-toolkit %s (%s and %s, all =%s-1, from NVIDIA's repository), e.g. "
                     "with the labfleet.vllm.container_runtime role (container_runtime_toolkit_version: \"%s\"), "
                     "then `nvidia-ctk runtime configure --runtime=docker` and `systemctl restart docker`"
                     % (_TOOLKIT, ", ".join(TOOLKIT_PACKAGES[:-1]), TOOLKIT_PACKAGES[-1], _TOOLKIT, _TOOLKIT))
        sources.extend(["toolkit_pin", "runtime_configure"])
    elif _version(toolkit) is not None and _version(toolkit) < tool_version("toolkit_min"):
        problems.append("NVIDIA Container Toolkit %s is older than %s" % (toolkit, TOOL_VERSIONS["toolkit_min"]["version"]))
        fixes.append("upgrade nvidia-container-toolkit and its three sibling packages to %s-1 "
                     "(container_runtime_toolkit_version: \"%s\")" % (_TOOLKIT, _TOOLKIT))
        sources.extend(["toolkit_min", "toolkit_pin"])
    runtimes = container.get("docker_runtimes") or {}
    if container.get("docker_config_source") and docker and "nvidia" not in runtimes:
        problems.append("Docker lists no nvidia runtime (runtimes: %s, from %s)"
                        % (", ".join(sorted(runtimes)) or "none", container["docker_config_source"]))
        fixes.append("`nvidia-ctk runtime configure --runtime=docker` (adds runtimes.nvidia.path = "
                     "nvidia-container-runtime to %s) and `systemctl restart docker`, or rerun the "
                     "container_runtime role" % daemon_json_path)
        sources.append("runtime_configure")
    if toolkit and docker and container.get("docker_server_version"):
        image_env = _mapping(_mapping(image).get("env")) or None
        path = require_cuda_enforcement(container, gpu_run_args=["--gpus", "all"], image_env=image_env)
        gpu_path = {"mode": path.get("mode"), "why": path.get("why")}
        if path.get("blocked"):
            problems.append("docker run --gpus all cannot start a GPU container here: %s" % path["blocked"].split(";", 1)[0])
            fixes.append(path["blocked"])
    return {"problems": problems, "fixes": fixes, "sources": sources, "gpu_path": gpu_path}


def _container_test(gpu_test, host_uuids, fixes):
    """What ``docker run --rm --gpus all <image> nvidia-smi -L`` showed ({rc, stdout, stderr}, or None when
    it did not run), against the host's GPU UUIDs; ``fixes`` (read only) keeps a fix from being given twice.
    Returns {ok (None: no test), seen, problems, fixes, sources, evidence}."""
    found = {"ok": None, "seen": [], "problems": [], "fixes": [], "sources": [], "evidence": {}}
    if not isinstance(gpu_test, dict) or gpu_test.get("rc") is None:
        return found
    out = gpu_test.get("stdout") or ""
    seen = found["seen"] = parse_gpu_list(out)
    found["evidence"]["container_gpus"] = [g["uuid"] for g in seen]
    if gpu_test.get("rc") == 0 and seen:
        seen_uuids = sorted(g["uuid"] for g in seen)
        found["ok"] = not (host_uuids and seen_uuids != host_uuids)
        if not found["ok"]:
            found["problems"].append("a --gpus all container lists %d GPU(s) (%s), the host %d (%s)"
                                     % (len(seen), ", ".join(seen_uuids), len(host_uuids), ", ".join(host_uuids)))
            found["fixes"].append("look for NVIDIA_VISIBLE_DEVICES in the image (`docker image inspect`) and the unit's "
                                  "env file, keep the instance's gpus at all, and regenerate the CDI spec "
                                  "(`nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`)")
        return found
    found["ok"] = False
    result = classify_gpu_check(gpu_test.get("rc"), out, gpu_test.get("stderr") or "")
    found["evidence"]["container_test"] = {"rc": gpu_test.get("rc"), "category": result["category"],
                                           "message": result["message"]}
    found["problems"].append("`docker run --rm --gpus all <image> nvidia-smi -L` failed (exit %s): %s"
                             % (gpu_test.get("rc"), _clip(result["message"], 200)))
    if result.get("fix") and not any(result["fix"] in f for f in fixes):
        found["fixes"].append(result["fix"])
    found["sources"].append("gpu_check")
    return found


def check_gpu_in_container(nvidia=None, host=None, daemon_json=None, daemon_json_path="/etc/docker/daemon.json",
                           gpu_test=None, dev_nodes=None, dev_char_missing=None, cdi_specs=None, image=None,
                           verdict=None):
    """Why a container would not see the host's GPUs.

    ``nvidia``: gpu_facts' ansible_facts.nvidia. ``host``: host_facts' labfleet_host (its
    ``container`` part is read). ``daemon_json``: the text of ``daemon_json_path`` (None: not read or
    absent). ``gpu_test``: {rc, stdout, stderr} of ``docker run --rm --gpus all <image> nvidia-smi -L``.
    ``dev_nodes``: the /dev/nvidia* names. ``dev_char_missing``: /dev/char links the NVIDIA nodes lack
    (the container_runtime role's check). ``cdi_specs``: [{path, text}] of the CDI spec files.
    ``image``: vllm_image_facts' image (its gpu_check). ``verdict``: deploy_gate's plan (its
    container_runtime verdict).
    """
    nvidia = _mapping(nvidia)
    container = _mapping(_mapping(host).get("container"))
    problems, fixes, sources = [], [], ["gpu_path"]
    evidence = {}
    collect = []
    gpus = [g for g in nvidia.get("gpus") or [] if isinstance(g, dict)]
    host_uuids = sorted(g["uuid"] for g in gpus if g.get("uuid"))
    state = nvidia.get("state")
    evidence.update(gpu_state=state, host_gpu_count=len(gpus), host_gpu_uuids=host_uuids)

    # daemon.json first: dockerd does not start with a file it cannot parse.
    if isinstance(daemon_json, (str, bytes)):
        evidence["daemon_json"], fix = _daemon_json_state(daemon_json, daemon_json_path)
        if fix:
            problems.append("%s, so dockerd will not start with it" % evidence["daemon_json"])
            fixes.append(fix)
            sources.append("daemon_json")

    docker = container.get("docker_server_version") or container.get("docker_client_version")
    toolkit = container.get("toolkit_version") or container.get("nvidia_ctk_version") or \
        container.get("nvidia_container_cli_version")
    evidence.update(docker=docker, docker_server=container.get("docker_server_version"), toolkit=toolkit,
                    runtimes=sorted(container.get("docker_runtimes") or {}),
                    docker_config_source=container.get("docker_config_source"))
    if not container:
        collect.append("labfleet.vllm.host_facts (Docker and toolkit versions, runtimes)")
    else:
        found = _container_stack(container, docker, toolkit, daemon_json_path, image)
        problems.extend(found["problems"])
        fixes.extend(found["fixes"])
        sources.extend(found["sources"])
        if found["gpu_path"] is not None:
            evidence["gpu_path"] = found["gpu_path"]
    runtime = _mapping(_mapping(verdict).get("container_runtime"))
    if runtime.get("blocked") and not any(runtime["blocked"] in f for f in fixes):
        problems.append("the plan's runtime check blocks GPU containers (GPU_RUNTIME_BLOCKED)")
        fixes.append(runtime["blocked"])

    # The driver on the host: a container sees at most what the host sees.
    if state in ("driver_not_loaded", "driver_library_mismatch", "gpu_lost", "probe_error"):
        problems.append("the host's own driver does not answer (gpu_facts: %s: %s)"
                        % (state, _clip(nvidia.get("msg"), 200)))
        fixes.append({
            "driver_not_loaded": "install and load the driver with the labfleet.vllm.nvidia_driver role "
                                 "(or `modprobe nvidia`)",
            "driver_library_mismatch": "reboot so the loaded kernel module (%s) matches the library (%s)"
                                       % (nvidia.get("kernel_module_version"), nvidia.get("library_version")),
            "gpu_lost": "reboot the host: a GPU fell off the bus (Xid 79)",
            "probe_error": "run `nvidia-smi` on the host and fix what it reports",
        }[state])
    elif state is None:
        collect.append("labfleet.vllm.gpu_facts")

    # Device nodes and /dev/char links.
    if state == "ok" and dev_nodes is not None:
        names = [str(n).rsplit("/", 1)[-1] for n in dev_nodes]
        numbered = sorted(int(n[6:]) for n in names if re.match(r"^nvidia[0-9]{1,3}$", n))
        missing = [n for n in ("nvidiactl", "nvidia-uvm") if n not in names]
        evidence["dev_nodes"] = sorted(names)
        if len(numbered) < len(gpus):
            missing.append("%d of /dev/nvidia0..%d" % (len(gpus) - len(numbered), len(gpus) - 1))
        if missing:
            problems.append("device nodes are missing: /dev/%s" % ", /dev/".join(missing))
            fixes.append("create them: `nvidia-modprobe -u -c=0` (uvm nodes) or run `nvidia-smi` once as root; the "
                         "nvidia-persistenced service keeps them")
            sources.append("device_nodes")
    if dev_char_missing:
        problems.append("the NVIDIA device nodes lack their /dev/char links (%s), so containers lose the GPUs "
                        "after `systemctl daemon-reload` ('Failed to initialize NVML: Unknown Error')"
                        % ", ".join(str(p) for p in list(dev_char_missing)[:4]))
        fixes.append("`nvidia-ctk system create-dev-char-symlinks --create-all` now and the udev rule at boot "
                     "(container_runtime_nvml_mitigation: udev)")
        sources.append("dev_char")

    # CDI specs.
    if cdi_specs:
        cdi_problems, summaries = _cdi_problems(cdi_specs, gpus, nvidia.get("driver_version"))
        evidence["cdi_specs"] = summaries
        mode = (evidence.get("gpu_path") or {}).get("mode") or runtime.get("mode")
        if cdi_problems:
            if mode == "cdi" or mode is None:
                problems.extend(cdi_problems)
                fixes.append("regenerate the spec: `nvidia-ctk cdi generate --output=%s` (toolkit %s and later: "
                             "`systemctl restart nvidia-cdi-refresh.service` for /var/run/cdi/nvidia.yaml)"
                             % (next((s["path"] for s in summaries if s.get("path")), "/etc/cdi/nvidia.yaml"),
                                TOOL_VERSIONS["toolkit_cdi_refresh"]["version"]))
                sources.extend(["cdi_generate", "cdi_stale"])
            else:
                evidence["cdi_unused_problems"] = cdi_problems

    # What a container actually saw.
    tested = _container_test(gpu_test, host_uuids, fixes)
    test_ok, seen = tested["ok"], tested["seen"]
    problems.extend(tested["problems"])
    fixes.extend(tested["fixes"])
    sources.extend(tested["sources"])
    evidence.update(tested["evidence"])
    check = _mapping(_mapping(image).get("gpu_check"))
    blocking = ("no_gpu_runtime", "no_gpu_visible", "driver_too_old", "driver_library_mismatch")
    if check.get("ran") and check.get("category") in blocking:
        test_ok = False
        problems.append("the image's GPU check (vllm_image_facts gpu_check) failed: %s: %s"
                        % (check["category"], _clip(check.get("message"), 200)))
        if check.get("fix") and not any(check["fix"] in f for f in fixes):
            fixes.append(check["fix"])
        sources.append("gpu_check")
    elif check.get("ran") and check.get("category") in ("ok", "no_kernel_image") and test_ok is None:
        test_ok = True
        evidence["image_gpu_check"] = check.get("category")

    if problems:
        return finding("gpu_in_container", "problem", _sentence(problems), _join_fixes(fixes), evidence, sources)
    if collect:
        return finding("gpu_in_container", "unknown",
                       "Not enough facts to tell whether containers see the GPUs.",
                       "collect: %s; the text of %s; `ls /dev/nvidia*`; and `docker run --rm --gpus all <image> "
                       "nvidia-smi -L` where an image is present" % ("; ".join(collect), daemon_json_path),
                       evidence, sources)
    if state == "no_gpu":
        return finding("gpu_in_container", "not_applicable",
                       "No NVIDIA GPU on this host (gpu_facts: no_gpu); Docker %s and toolkit %s are in order."
                       % (docker, toolkit), "", evidence, sources)
    said = "Docker %s with runtimes %s, NVIDIA Container Toolkit %s" % (
        docker, ", ".join(evidence["runtimes"]) or "none", toolkit)
    if test_ok:
        what = "the image's GPU check ran CUDA on the GPUs"
        if seen:
            listed = ", ".join(g["uuid"] for g in seen)
            what = "a --gpus all container lists the host's %d GPU(s) (%s)" % (len(seen), listed)
        return finding("gpu_in_container", "healthy", "%s; %s." % (what[0].upper() + what[1:], said), "",
                       evidence, sources)
    checked = ["the GPU path is not blocked"] + (["the device nodes are in place"] if dev_nodes is not None else [])
    return finding("gpu_in_container", "healthy",
                   "%s; %s; no test container ran." % (said, ", ".join(checked)),
                   "", evidence, sources)


# ---------------------------------------------------------------------------------------------
# 2. Illegal instruction
# ---------------------------------------------------------------------------------------------

def image_cpu_needs(image):
    """The x86 instruction-set flags (as /proc/cpuinfo names them) an image's binaries need.

    Returns {"flags", "kind" (cuda or cpu), "why", "sources"} or None when the image is unknown.
    An explicit ``image["cpu_flags_required"]`` list wins.
    """
    image = _mapping(image)
    if not image:
        return None
    if isinstance(image.get("cpu_flags_required"), list):
        return {"flags": [str(f) for f in image["cpu_flags_required"]], "kind": "declared",
                "why": "the image facts declare them", "sources": []}
    ref = str(image.get("reference") or "")
    env = _mapping(image.get("env"))
    repo = ref.split("@", 1)[0].rsplit(":", 1)[0] if "/" in ref or ":" in ref else ref
    is_cpu = ("cpu" in repo.rsplit("/", 1)[-1].lower() or any(k.startswith("VLLM_CPU_") for k in env)
              or str(env.get("VLLM_TARGET_DEVICE", "")).lower() == "cpu")
    if not is_cpu:
        if not (ref or image.get("arch_list") or image.get("cuda_version")):
            return None
        return {"flags": [], "kind": "cuda",
                "why": "vLLM's CUDA build compiles cpu_extension.cmake, the one with -mavx* flags, only for CPU "
                       "targets",
                "sources": ["vllm_cuda_build", "cuda_image_wheels"]}
    version = _version(image.get("vllm_version") or "")
    if version is not None and version >= (0, 17, 0):
        return {"flags": ["avx2", "f16c"], "kind": "cpu",
                "why": "vLLM %d.%d CPU builds carry an AVX2 kernel next to the AVX-512 ones and pick one at run time"
                       % version[:2], "sources": ["vllm_cpu_0191"]}
    if str(env.get("VLLM_CPU_DISABLE_AVX512", "")).lower() == "true":
        return {"flags": ["avx2"], "kind": "cpu", "why": "built with VLLM_CPU_DISABLE_AVX512=true (-mavx2)",
                "sources": ["vllm_cpu_085"]}
    return {"flags": ["avx512f", "avx512vl", "avx512bw", "avx512dq"], "kind": "cpu",
            "why": "vLLM CPU builds before 0.17 compile for AVX-512 when the build host has it, as the release "
                   "images are", "sources": ["vllm_cpu_085", "vllm_cpu_085_release"]}


def check_illegal_instruction(host=None, image=None, journal=None, kernel_log=None):
    """"Illegal instruction": the CPU's flags (host_facts' labfleet_host.cpu) against what the image
    needs, and SIGILL in the journal (text or classify_journal's result) or the kernel log."""
    cpu = _mapping(_mapping(host).get("cpu"))
    flags = cpu.get("flags") if isinstance(cpu.get("flags"), list) else None
    if flags is None and isinstance(cpu.get("isa"), dict):
        flags = [name for name, present in cpu["isa"].items() if present]
    journal = journal if isinstance(journal, dict) or journal is None else classify_journal(journal)
    needs = image_cpu_needs(image)
    ref = _mapping(image).get("reference") or "the image"
    sig = _first_line(journal, ["illegal_instruction"])
    library = None
    for text in ([sig["text"]] if sig else []) + (_lines(kernel_log) or []):
        match = _OPCODE_LIB_RE.search(text)
        if match:
            library = match.group(1)
            break
    sources = ["sigill"] + (needs["sources"] if needs else [])
    evidence = {"cpu_model": cpu.get("model"), "sigill_line": sig["text"] if sig else None, "library": library,
                "image": ref, "image_needs": needs["flags"] if needs else None}
    interesting = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq")
    have = [f for f in interesting if flags is not None and f in flags]
    lack_interesting = [f for f in interesting if flags is not None and f not in flags]
    evidence["cpu_has"] = have
    missing = [f for f in (needs["flags"] if needs else []) if flags is not None and f not in flags]
    evidence["missing"] = missing
    cpu_text = "%s has %s%s" % (cpu.get("model") or "this CPU", ", ".join(have) or "none of AVX/AVX2/AVX-512",
                                " but not %s" % ", ".join(lack_interesting) if lack_interesting else "")
    if needs and needs["kind"] == "cpu":
        fix_image = ("use a build this CPU can run: vLLM 0.17 or newer CPU wheels/images (they pick an AVX2 kernel at "
                     "run time), or build the 0.8.x CPU image with `docker build -f docker/Dockerfile.cpu --build-arg "
                     "VLLM_CPU_DISABLE_AVX512=true`")
    else:
        fix_image = ("find the library that faulted (`journalctl -k | grep 'invalid opcode'` names it) and pin an "
                     "image whose binaries target this CPU (vllm/vllm-openai v0.8.5, the reference deployment's, "
                     "runs on a Xeon without AVX-512)")
    fix_vm = "on a virtual machine give the guest the host's CPU flags (libvirt <cpu mode='host-passthrough'/>)"
    if sig or missing:
        if sig and missing:
            cause = ("The vLLM container died with SIGILL (journal: '%s'): %s needs %s (%s) and %s"
                     % (_clip(sig["text"], 160), ref, ", ".join(needs["flags"]), needs["why"], cpu_text))
        elif sig:
            cause = ("The vLLM container died with SIGILL (journal: '%s') although %s needs nothing this CPU lacks "
                     "(%s): a binary in the image (%s) was built for a newer CPU; %s"
                     % (_clip(sig["text"], 160), ref, needs["why"] if needs else "its needs are unknown",
                        library or "see the kernel log", cpu_text))
            if flags is None:
                cause += "; the CPU flags were not collected"
        else:
            cause = ("%s needs %s (%s) and %s, so it will die with 'Illegal instruction' while loading"
                     % (ref, ", ".join(needs["flags"]), needs["why"], cpu_text))
        sources.extend(["invalid_opcode", "vm_cpu"])
        return finding("illegal_instruction", "problem", cause.rstrip(".") + ".", _join_fixes([fix_image, fix_vm]),
                       evidence, sources)
    if flags is None:
        return finding("illegal_instruction", "unknown", "The CPU's instruction-set flags are not known.",
                       "collect: labfleet.vllm.host_facts (the flags of /proc/cpuinfo)", evidence, sources)
    if needs is None:
        if journal and journal.get("serving_line") is not None:
            return finding("illegal_instruction", "healthy",
                           "The server started (journal line %d) and the journal shows no SIGILL; %s."
                           % (journal["serving_line"], cpu_text), "", evidence, sources + ["serving"])
        return finding("illegal_instruction", "unknown",
                       "What the image needs is unknown and the journal does not show the server start.",
                       "collect: labfleet.vllm.vllm_image_facts for the image and `journalctl -u <vllm unit> -n 200`",
                       evidence, sources)
    return finding("illegal_instruction", "healthy",
                   "%s needs %s (%s); %s%s." % (
                       ref, ", ".join(needs["flags"]) or "no x86 extension", needs["why"], cpu_text,
                       "; the journal shows no SIGILL" if journal else ""),
                   "", evidence, sources)


# ---------------------------------------------------------------------------------------------
# 3. no kernel image
# ---------------------------------------------------------------------------------------------

def _ptx_only(arch_list):
    """The parsed entries of ``arch_list`` that carry PTX, without their SASS (what CUDA_FORCE_PTX_JIT leaves)."""
    entries = []
    for text in arch_list or []:
        parsed = parse_arch(text)
        if parsed and parsed[4]:
            entries.append((parsed[0], parsed[1], parsed[2], False, True))
    return entries


def check_no_kernel_image(nvidia=None, image=None, journal=None, env=None, verdict=None, ptx_jit_test=None):
    """"no kernel image is available": the image's arch list (vllm_image_facts' image.arch_list, vLLM's
    list filtered by torch's) against each GPU's compute capability (SASS, PTX only, none), with
    CUDA_FORCE_PTX_JIT from the container's ``env`` (or the image's). ``ptx_jit_test``: the opt-in
    {rc, stdout, stderr} of the image's GPU check run with -e CUDA_FORCE_PTX_JIT=1."""
    nvidia = _mapping(nvidia)
    image = _mapping(image)
    journal = journal if isinstance(journal, dict) or journal is None else classify_journal(journal)
    ref = image.get("reference") or "the image"
    arch = image.get("arch_list")
    if arch is None:
        arch = _mapping(image.get("gate")).get("arch_list")
    env = dict(container_env(_mapping(image.get("env"))), **container_env(env))
    force = str(env.get("CUDA_FORCE_PTX_JIT", "")).strip() == "1"
    journal_line = _first_line(journal, ["no_kernel_image", "ptx_unsupported"])
    ccs = []
    for gpu in nvidia.get("gpus") or []:
        cc = parse_cc(_mapping(gpu).get("compute_capability"))
        if cc is not None and (cc, gpu.get("name")) not in ccs:
            ccs.append((cc, gpu.get("name")))
    sources = ["arch_reach", "no_kernel_image"]
    evidence = {"image": ref, "arch_list": arch, "arch_source": _mapping(image.get("sources")).get("arch_list"),
                "cuda_force_ptx_jit": force, "journal_line": journal_line["text"] if journal_line else None,
                "gpus": ["%s (%d.%d)" % (name, cc[0], cc[1]) for cc, name in ccs]}
    gate_codes = [dict(item, kind=kind) for kind in ("reasons", "warnings")
                  for item in _mapping(verdict).get(kind) or []
                  if _mapping(item).get("code") in ("IMAGE_LACKS_ARCH", "PTX_NEWER_THAN_DRIVER", "PTX_JIT_ONLY")]
    evidence["gate"] = [{"code": g["code"], "message": g.get("message")} for g in gate_codes]
    jit = None
    if isinstance(ptx_jit_test, dict) and ptx_jit_test.get("rc") is not None:
        jit = classify_gpu_check(ptx_jit_test["rc"], ptx_jit_test.get("stdout") or "", ptx_jit_test.get("stderr") or "")
        evidence["ptx_jit_test"] = {"category": jit["category"], "message": jit["message"]}
        sources.append("force_ptx_jit")
    if nvidia.get("state") == "no_gpu":
        return finding("no_kernel_image", "not_applicable", "No NVIDIA GPU on this host (gpu_facts: no_gpu).", "",
                       evidence, sources)
    fix_image = ("use an image with kernels for %s: vllm/vllm-openai:v0.8.5 (CUDA 12.4) or a v0.10.2-v0.19.1 release "
                 "(preflight_deployment.image)" % ", ".join("sm_%d%d" % cc for cc, _name in ccs or [((7, 0), None)]))
    if not ccs or not arch:
        if journal_line:
            return finding("no_kernel_image", "problem",
                           "The journal says '%s'; the image's arch list or the GPUs' compute capability was not "
                           "collected to say which." % journal_line["text"],
                           _join_fixes([fix_image, "collect labfleet.vllm.vllm_image_facts (probe: true) and "
                                        "labfleet.vllm.gpu_facts to see the arch gap"]),
                           evidence, sources + ["image_profiles"])
        missing = (["labfleet.vllm.gpu_facts (compute capability)"] if not ccs else []) + \
            (["labfleet.vllm.vllm_image_facts with probe: true (the arch list)"] if not arch else [])
        return finding("no_kernel_image", "unknown",
                       "The GPUs' compute capability or the image's arch list is not known.",
                       "collect: %s" % "; ".join(missing), evidence, sources)
    ptx_entries = _ptx_only(arch)
    reaches = []
    for cc, name in ccs:
        reach = covers(arch, cc)
        forced = arch_reach(ptx_entries, cc) if force else reach
        reaches.append({"gpu": name, "cc": "%d.%d" % cc, "reach": reach, "with_force_ptx_jit": forced})
    evidence["reach"] = reaches
    listed = " ".join(arch)
    lacking = [r for r in reaches if r["reach"] is None]
    forced_out = [r for r in reaches if r["reach"] is not None and r["with_force_ptx_jit"] is None]
    if lacking:
        r = lacking[0]
        cause = ("%s's arch list (%s) has no SASS for %s and no PTX at or below it, so %s (CC %s) fails with 'no "
                 "kernel image is available for execution on the device'%s"
                 % (ref, listed, r["cc"], r["gpu"], r["cc"],
                    "; the journal shows it" if journal_line else ""))
        fix = _join_fixes([fix_image, "CUDA_FORCE_PTX_JIT=1 cannot help: the image carries no PTX for %s or older"
                           % r["cc"]])
        return finding("no_kernel_image", "problem", cause + ".", fix, evidence, sources + ["image_profiles"])
    if forced_out:
        r = forced_out[0]
        cause = ("CUDA_FORCE_PTX_JIT=1 is set, which makes the driver ignore the image's SASS for %s, and %s carries "
                 "PTX only for %s (arch list %s), so %s has no kernel"
                 % (r["cc"], ref, ", ".join("%d.%d" % e[:2] for e in ptx_entries) or "no arch", listed, r["gpu"]))
        return finding("no_kernel_image", "problem", cause + ".",
                       "remove CUDA_FORCE_PTX_JIT from the container (vllm_server_force_ptx_jit: false, and from "
                       "vllm_server_env / the instance's env)", evidence, sources + ["force_ptx_jit"])
    host_cuda = _version(nvidia.get("cuda_driver_version") or "")
    image_cuda = _version(image.get("cuda_version") or "")
    via_ptx = [r for r in reaches if r["with_force_ptx_jit"] == "ptx"]
    if via_ptx and host_cuda and image_cuda and host_cuda[:2] < image_cuda[:2]:
        r = via_ptx[0]
        cause = ("%s reaches %s (CC %s) only through PTX built by CUDA %s, which driver %s (CUDA %d.%d) cannot "
                 "JIT-compile ('the provided PTX was compiled with an unsupported toolchain')"
                 % (ref, r["gpu"], r["cc"], image.get("cuda_version"), nvidia.get("driver_version"),
                    host_cuda[0], host_cuda[1]))
        return finding("no_kernel_image", "problem", cause + ".",
                       _join_fixes([fix_image, "install a driver with CUDA %d.%d or newer (nvidia_driver role)"
                                    % image_cuda[:2]]), evidence, sources + ["ptx_toolchain"])
    if journal_line:
        cause = ("The journal says '%s' although %s's arch list (%s, from %s) reaches every GPU: a kernel outside that "
                 "list (a quantization kernel such as Marlin, built for 8.0 and newer) or an image on the host that "
                 "differs from the profile"
                 % (journal_line["text"], ref, listed, evidence["arch_source"] or "the facts"))
        return finding("no_kernel_image", "problem", cause + ".",
                       _join_fixes(["run labfleet.vllm.vllm_image_facts with probe: true and gpu_check: true on "
                                    "the host to read the real arch list",
                                    "use --quantization gptq (not gptq_marlin/awq_marlin) on compute capability "
                                    "below 8.0", fix_image]),
                       evidence, sources + ["image_profiles", "marlin_arch"])
    if jit is not None and jit.get("category") not in (None, "ok"):
        evidence["ptx_jit_note"] = ("the opt-in CUDA_FORCE_PTX_JIT=1 test failed (%s): the image's PTX does not run on "
                                    "this GPU, so only its SASS does" % jit["category"])
    if via_ptx:
        r = via_ptx[0]
        why = "CUDA_FORCE_PTX_JIT=1 is set" if force and r["reach"] == "sass" else "the image has no SASS for it"
        cause = ("%s reaches %s (CC %s) only through PTX JIT (%s; arch list %s): the first start JIT-compiles every "
                 "kernel (minutes, CPU heavy)%s" % (ref, r["gpu"], r["cc"], why, listed,
                                                    "; the opt-in JIT test passed" if jit and jit["ok"] else ""))
        fixes = ["keep the JIT cache across restarts: the unit already points CUDA_CACHE_PATH at /root/.cache/nv on "
                 "the vllm_server_cache_dir volume; set CUDA_CACHE_MAXSIZE=4294967296 in vllm_server_env so every "
                 "compiled kernel fits"]
        if force and r["reach"] == "sass":
            fixes.insert(0, "remove CUDA_FORCE_PTX_JIT (vllm_server_force_ptx_jit: false): the SASS for %s is "
                            "faster and needs no JIT" % r["cc"])
        else:
            fixes.insert(0, "prefer an image with SASS for %s" % r["cc"])
        return finding("no_kernel_image", "healthy", cause + ".", _join_fixes(fixes), evidence,
                       sources + ["force_ptx_jit", "jit_cache"])
    gpus_text = ", ".join("%s (CC %s)" % (r["gpu"], r["cc"]) for r in reaches)
    return finding("no_kernel_image", "healthy",
                   "%s's arch list (%s) has SASS for %s%s%s." % (
                       ref, listed, gpus_text, "; the journal shows no 'no kernel image'" if journal else "",
                       "; CUDA_FORCE_PTX_JIT is not set" if not force else ""),
                   "", evidence, sources)


# ---------------------------------------------------------------------------------------------
# 4. Out of memory
# ---------------------------------------------------------------------------------------------

def memory_fit(plan):
    """How the gate's memory plan of one instance fits, per GPU: the headroom outside vLLM's budget
    (total x (1 - gpu_memory_utilization)) against what must live there (the plan's outside_budget:
    CUDA context, CUDA graphs, NCCL) and, under load, one more activation peak (SOURCES["load_margin"]).
    None when the plan has no totals."""
    plan = _mapping(plan)
    total = plan.get("gpu_memory_total_bytes")
    util = plan.get("gpu_memory_utilization")
    if isinstance(total, bool) or not isinstance(total, int) or not 0 < total < 2 ** 62 or \
            isinstance(util, bool) or not isinstance(util, (int, float)) or not 0 < util <= 1:
        return None
    reserve = _mapping(plan.get("reserve_model"))
    outside = sum(v for v in _mapping(reserve.get("outside_budget")).values() if isinstance(v, (int, float)))
    parts = _mapping(reserve.get("parts"))
    margin = parts.get("activation_peak") or parts.get("fallback_constant") or 0
    headroom = total - int(total * util)
    fits = plan.get("fits_one_sequence")
    return {
        "total": total, "util": util, "headroom": headroom, "outside": int(outside), "margin": int(margin),
        "outside_parts": dict(_mapping(reserve.get("outside_budget"))),
        "fits_one_sequence": fits, "kv_cache_bytes": plan.get("kv_cache_bytes_per_gpu"),
        "kv_tokens": plan.get("kv_cache_tokens"), "concurrent": plan.get("max_concurrent_full_sequences"),
        "max_model_len": plan.get("max_model_len"), "max_num_seqs": plan.get("max_num_seqs"),
        "startup_ok": fits is True and headroom >= outside,
        "load_ok": fits is True and headroom >= outside + margin,
        "spare": headroom - int(outside) - int(margin),
    }


def _util_steps(start, stop):
    """gpu_memory_utilization values from ``start`` to ``stop`` (either way) in steps of 0.01."""
    first, last = int(round(start * 100)), int(round(stop * 100))
    step = 1 if last >= first else -1
    return [v / 100.0 for v in range(first, last + step, step)]


def _halves(value, floor):
    result = [value]
    while value and value // 2 >= floor:
        value //= 2
        result.append(value)
    return result


def _memory_candidates(args, kind, top_util=None):
    """Settings to try, in the order of what they cost (SOURCES["oom_reference"]: max_num_seqs first)."""
    util = float(args.get("gpu_memory_utilization") or 0.9)
    seqs = int(args.get("max_num_seqs") or 256)
    mlen = int(args["max_model_len"]) if args.get("max_model_len") else None
    lens = _halves(mlen, 2048) if mlen else [None]

    def with_len(candidate, length):
        if length:
            candidate["max_model_len"] = length
        return candidate

    if kind == "cudagraph":
        yield dict(args, enforce_eager=True)
        for u in _util_steps(util - 0.01, max(0.5, util - 0.2)):
            yield dict(args, gpu_memory_utilization=u)
    elif kind == "free_memory":
        top = min(util, top_util) if top_util else util
        for length in lens:
            for u in _util_steps(top, max(0.5, top - 0.2)):
                yield with_len(dict(args, gpu_memory_utilization=u), length)
    elif kind == "startup_kv":
        for length in lens:
            for count in _halves(seqs, 1)[:3]:
                for u in _util_steps(util, 0.98):
                    yield with_len(dict(args, gpu_memory_utilization=u, max_num_seqs=count), length)
    elif kind == "sampler":
        for count in _halves(seqs, 1)[1:]:
            yield dict(args, max_num_seqs=count)
    else:
        for length in lens:
            for u in _util_steps(util, max(0.5, util - 0.2)):
                yield with_len(dict(args, gpu_memory_utilization=u, max_num_seqs=max(1, seqs // 2)), length)


def suggest_memory_settings(gate_inputs, args, kind="load", required_spare=None, free_bytes=None):
    """Settings that fit, found by asking the gate (_gate.evaluate) about nearby settings.

    ``gate_inputs``: evaluate()'s keyword arguments for the instance (gpus, driver_version, image,
    model, ...). ``args``: the vLLM arguments in use. ``kind``: "load" (out of memory under load: halve
    max_num_seqs, then lower gpu_memory_utilization, then halve max_model_len), "startup_kv" (no room
    for the KV cache: raise gpu_memory_utilization, then halve max_num_seqs and max_model_len),
    "cudagraph" (enforce_eager first), "free_memory" (gpu_memory_utilization at most ``free_bytes`` /
    total), "sampler" (halve max_num_seqs). A candidate fits when memory_fit() says load_ok (with at
    least ``required_spare`` bytes spare) and differs from ``args``. Returns {"args", "changed", "fit",
    "evaluations"} or None.
    """
    base = dict((k, v) for k, v in _mapping(gate_inputs).items() if k in _GATE_KEYS)
    if not base.get("model") or not base.get("gpus"):
        return None
    args = dict(args)
    memories = [_mapping(g).get("memory_total_mib") for g in base["gpus"]]
    memories = [m for m in memories if isinstance(m, int) and m > 0]
    top_util = None
    if kind == "free_memory":
        if not memories or not free_bytes:
            return None
        top_util = math.floor(float(free_bytes) / (min(memories) * 1024 * 1024) * 100) / 100.0
    evaluations = 0
    for candidate in _memory_candidates(args, kind, top_util):
        if candidate == args:
            continue
        if evaluations >= MAX_EVALUATIONS:
            break
        evaluations += 1
        try:
            verdict = evaluate(vllm=candidate, **base)
        except GateInputError:
            continue
        if any(r.get("code") == "INSUFFICIENT_VRAM" for r in verdict.get("reasons") or []):
            continue
        fit = memory_fit(verdict.get("plan"))
        if not fit or not fit["load_ok"] or (required_spare is not None and fit["spare"] < required_spare):
            continue
        changed = [k for k in ("gpu_memory_utilization", "max_num_seqs", "max_model_len", "enforce_eager")
                   if candidate.get(k) != args.get(k)]
        return {"args": candidate, "changed": changed, "fit": fit, "evaluations": evaluations}
    return None


_ARG_FLAGS = {"gpu_memory_utilization": "--gpu-memory-utilization", "max_num_seqs": "--max-num-seqs",
              "max_model_len": "--max-model-len", "enforce_eager": "--enforce-eager"}


def _describe_suggestion(suggestion, args):
    fit = suggestion["fit"]
    new = suggestion["args"]
    parts = []
    flags = []
    for key in suggestion["changed"]:
        if key == "enforce_eager":
            continue
        parts.append("%s %s (was %s)" % (key, new[key], args.get(key)))
        flags.append("%s %s" % (_ARG_FLAGS[key], new[key]))
    what = []
    if parts:
        what.append("%s in preflight_deployment.vllm_args" % ", ".join(parts))
    if "enforce_eager" in suggestion["changed"]:
        what.append("preflight_deployment.enforce_eager: true")
        flags.append("--enforce-eager")
    return ("set %s (flags %s): the plan then keeps %s of KV cache per GPU (%s "
            "tokens, %s full %s-token sequence(s)) and leaves %s per GPU outside the budget for %s%s"
            % (" and ".join(what), " ".join(flags), _gib(fit["kv_cache_bytes"] or 0), fit["kv_tokens"],
               fit["concurrent"], fit["max_model_len"], _gib(fit["headroom"]), _outside_text(fit),
               " + a %s load margin" % _gib(fit["margin"]) if fit["margin"] else ""))


_OUTSIDE_NAMES = {"cuda_context": "CUDA context", "cuda_graphs": "CUDA graphs", "nccl": "NCCL"}


def _outside_text(fit):
    parts = ["%s %s" % (_gib(v), _OUTSIDE_NAMES.get(k, k.replace("_", " ")))
             for k, v in sorted(fit["outside_parts"].items())]
    return " + ".join(parts) or "nothing"


_MEMORY_KEYS = ("gpu_memory_utilization", "max_num_seqs", "max_model_len", "tensor_parallel_size")


def _instance_args(instance, deployed):
    """The vLLM arguments in force: the plan's, or the running unit's (``deployed``, from
    parse_vllm_argv) where given, with what differs, and those vLLM would refuse. A memory flag the
    unit does not pass takes vLLM's default (None here); a switch it does not pass is off.

    Returns (args, drift, refused): a memory or parallelism value vLLM refuses (arg_number) is None
    in ``args`` and in ``refused`` {key: (its text, where it comes from)}."""
    args = dict(_mapping(_mapping(instance).get("vllm_args")))
    drift = {}
    origin = "the plan's vllm_args"
    if deployed is not None:
        origin = "the running unit's arguments"
        for key in _MEMORY_KEYS:
            value = deployed.get(key)
            if args.get(key) != value:
                drift[key] = [args.get(key), value]
            args[key] = value
        for key in ("enforce_eager", "disable_custom_all_reduce", "disable_log_stats"):
            value = bool(deployed.get(key))
            if bool(args.get(key)) != value:
                drift[key] = [bool(args.get(key)), value]
            args[key] = value
    refused = {}
    for key in _MEMORY_KEYS:
        if args.get(key) is not None:
            number = arg_number(key, args[key])
            if number is None:
                refused[key] = (_clip(args[key], 60), origin)
            args[key] = number
    return args, drift, refused


def _refused_args(check, refused, keys, evidence, sources):
    """The finding of ``check`` when an argument it reads (``keys``) is one vLLM refuses, else None."""
    named = [key for key in keys if key in refused]
    if not named:
        return None
    evidence["refused_args"] = dict((key, refused[key][0]) for key in named)
    cause = "; ".join("%s passes --%s %r, and vLLM takes %s there" % (
        refused[key][1][0].upper() + refused[key][1][1:], key.replace("_", "-"), refused[key][0],
        expected_number(key)) for key in named)
    fix = ("set %s in preflight_deployment.vllm_args to what vLLM takes (%s) and deploy again (site.yml); the unit's "
           "own arguments: `systemctl cat <vllm unit>`" % (" and ".join(named), "; ".join(
               "%s: %s" % (key, expected_number(key)) for key in named)))
    return finding(check, "problem", cause + ": the server cannot start with it.", fix, evidence, sources)


def _oom_kind(journal, oom_line):
    name = None
    for fault in OOM_FAULTS:
        for item in journal["faults"].get(fault, []):
            if item["line"] == oom_line["line"]:
                name = fault
    serving = journal.get("serving_line")
    under_load = serving is not None and oom_line["line"] > serving
    graph = journal.get("cudagraph_line")
    if name == "oom_free_memory":
        return "free_memory", False
    if name in ("oom_no_cache_blocks", "oom_max_model_len"):
        return "startup_kv", False
    if name == "oom_sampler":
        return "sampler", False
    if name == "oom_weights":
        return "weights", False
    if not under_load and graph is not None and oom_line["line"] > graph:
        return "cudagraph", False
    return "load", under_load


def check_out_of_memory(instance=None, journal=None, deployed_args=None, gate_inputs=None, nvidia=None):
    """Out of memory at start or under load: the plan's memory figures (deploy_gate's
    ``instances[].memory_plan``) against the deployed settings (``deployed_args``: parse_vllm_argv of
    the running unit, or None for the planned ones), the journal's OOM lines, and settings that fit,
    found with _gate.evaluate when ``gate_inputs`` (evaluate's arguments: gpus, driver_version, image,
    model, ...) are given."""
    instance = _mapping(instance)
    journal = journal if isinstance(journal, dict) or journal is None else classify_journal(journal)
    plan = _mapping(instance.get("memory_plan"))
    args, drift, refused = _instance_args(instance, deployed_args)
    sources = ["memory_plan"]
    evidence = {"instance": instance.get("name"), "args": dict((k, args.get(k)) for k in
                                                               ("gpu_memory_utilization", "max_num_seqs",
                                                                "max_model_len", "tensor_parallel_size",
                                                                "enforce_eager")),
                "deployed_differs_from_plan": drift}
    if _mapping(nvidia).get("state") == "no_gpu":
        return finding("out_of_memory", "not_applicable", "No NVIDIA GPU on this host (gpu_facts: no_gpu).", "",
                       evidence, sources)
    bad = _refused_args("out_of_memory", refused, _MEMORY_KEYS, evidence, sources)
    if bad:
        return bad
    oom_line = _first_line(journal, OOM_FAULTS)
    if oom_line:
        evidence["journal_line"] = oom_line["text"]
    outside = _mapping(_mapping(plan.get("reserve_model")).get("outside_budget"))
    # The plan judged the planned arguments; the running ones (drift), or CUDA graphs the plan left out
    # (enforce_eager false on the instance, eager in the gate's own profile), are judged again.
    rejudge = "deployed arguments differ" if drift else (
        "enforce_eager is false but the plan has no CUDA graphs" if plan and args.get("enforce_eager") is False
        and "cuda_graphs" not in outside else None)
    if rejudge and gate_inputs:
        try:
            rerun = evaluate(vllm=args, **dict((k, v) for k, v in gate_inputs.items() if k in _GATE_KEYS))
        except GateInputError:
            rerun = None
        if rerun:
            plan = _mapping(rerun.get("plan"))
            evidence["plan_rejudged"] = rejudge
    fit = memory_fit(plan)
    if fit is None:
        if oom_line:
            return finding("out_of_memory", "problem",
                           "The journal shows '%s', and there is no memory plan to size the fix." % oom_line["text"],
                           "lower max_num_seqs first, then gpu_memory_utilization and max_model_len "
                           "(preflight_deployment.vllm_args); collect the plan (labfleet.vllm.deploy_gate, "
                           "preflight_verdict.instances[].memory_plan) for exact values",
                           evidence, sources + ["oom_reference"])
        return finding("out_of_memory", "unknown", "There is no memory plan for this instance.",
                       "collect: the deploy_gate plan (preflight_verdict.instances[].memory_plan) and "
                       "`journalctl -u <vllm unit> -n 200`", evidence, sources)
    evidence["plan"] = dict((k, fit[k]) for k in ("total", "util", "headroom", "outside", "margin", "kv_cache_bytes",
                                                  "kv_tokens", "concurrent", "fits_one_sequence", "startup_ok",
                                                  "load_ok"))
    plan_text = ("plan: %s x %.2f, weights %s, KV cache %s per GPU (%s full %s-token sequence(s)), %s outside the "
                 "budget for %s" % (_gib(fit["total"]), fit["util"], _gib(plan.get("weights_bytes_per_gpu") or 0),
                                    _gib(fit["kv_cache_bytes"] or 0), fit["concurrent"], fit["max_model_len"],
                                    _gib(fit["headroom"]), _outside_text(fit)))
    kind = None
    under_load = False
    required = None
    if oom_line:
        kind, under_load = _oom_kind(journal, oom_line)
        sources.append({"free_memory": "oom_free_memory", "startup_kv": "oom_cache_v0", "sampler": "oom_sampler",
                        "weights": "oom_weights", "cudagraph": "oom_cudagraph", "load": "oom_torch"}[kind])
        if kind == "load" and fit["load_ok"]:
            # The model says it fits and it still ran out: ask for more room than now.
            tried = _TRIED_RE.search(oom_line["text"])
            shortfall = (_bytes(tried.group(1), tried.group(2)) if tried else 0) or 0
            free = _FREE_RE.search(oom_line["text"])
            free_bytes = _bytes(free.group(1) or free.group(3), free.group(2) or free.group(4)) if free else None
            if shortfall and free_bytes is not None:
                shortfall -= free_bytes
            required = fit["spare"] + max(shortfall, int(0.02 * fit["total"]))
    elif plan.get("fits_one_sequence") is False or any(
            _mapping(r).get("code") == "INSUFFICIENT_VRAM" for r in instance.get("reasons") or []):
        kind = "startup_kv"
    elif not fit["startup_ok"]:
        kind = "cudagraph" if "cuda_graphs" in fit["outside_parts"] else "load"
    if kind is None:
        note = ""
        fix = ""
        if not fit["load_ok"]:
            note = ("; under a load peak the %s outside the budget is below the %s the doctor keeps (%s + one more "
                    "%s activation peak)" % (_gib(fit["headroom"]), _gib(fit["outside"] + fit["margin"]),
                                             _outside_text(fit), _gib(fit["margin"])))
            sources.extend(["load_margin", "oom_reference"])
            suggestion = suggest_memory_settings(gate_inputs, args, "load") if gate_inputs else None
            if suggestion:
                evidence["if_oom_under_load"] = suggestion["args"]
                fix = "nothing now; if it runs out of memory under load: " + _describe_suggestion(suggestion, args)
        return finding("out_of_memory", "healthy", "No out-of-memory line in the journal; %s%s." % (plan_text, note),
                       fix, evidence, sources)
    sources.extend(["load_margin", "oom_reference"])
    suggestion = None
    if kind != "weights" and gate_inputs:
        free_bytes = None
        if kind == "free_memory":
            match = _FREE_MEMORY_RE.search(oom_line["text"])
            free_gib = _journal_number(match.group(1)) if match else None
            free_bytes = int(free_gib * GIB) - fit["outside"] if free_gib is not None else None
        suggestion = suggest_memory_settings(gate_inputs, args, kind, required_spare=required, free_bytes=free_bytes)
    if oom_line:
        when = "under load (after the server started)" if under_load else "at startup"
        cause = "The journal shows an out-of-memory error %s: '%s'; %s" % (
            when, _clip(oom_line["text"], 200), plan_text)
    elif kind == "startup_kv":
        cause = ("The plan leaves no room for one full %s-token sequence: %s; vLLM stops at startup ('No available "
                 "memory for the cache blocks' or 'max seq len ... larger than ... KV cache')"
                 % (fit["max_model_len"], plan_text))
        sources.extend(["oom_cache_v0", "oom_cache_v1"])
    else:
        cause = "The %s outside the budget does not hold %s: %s" % (
            _gib(fit["headroom"]), _outside_text(fit), plan_text)
        sources.append("oom_cudagraph")
    fixes = []
    match = _MAX_LEN_RE.search(oom_line["text"]) if oom_line else None
    limit = arg_number("max_model_len", match.group(2) or match.group(3)) if match else None
    if limit:
        fixes.append("max_model_len %s or less (vLLM's own estimate of what the KV cache holds)" % int(limit))
    if suggestion:
        fixes.append(_describe_suggestion(suggestion, args))
        evidence["suggested"] = suggestion["args"]
    elif kind == "weights":
        fixes.append("the weights do not fit: raise tensor_parallel_size, use a 4-bit GPTQ checkpoint, or offload "
                     "(cpu_offload_gb); see the gate's INSUFFICIENT_VRAM message")
    elif kind == "free_memory":
        fixes.append("stop the other processes on the GPU (`nvidia-smi --query-compute-apps=pid,process_name,"
                     "used_memory --format=csv`) or lower gpu_memory_utilization below free/total")
    else:
        fixes.append("lower max_num_seqs first (e.g. %s -> %s), then gpu_memory_utilization (%.2f -> %.2f) and "
                     "max_model_len (%s -> %s) in preflight_deployment.vllm_args%s"
                     % (args.get("max_num_seqs"), max(1, int(args.get("max_num_seqs") or 2) // 2),
                        fit["util"], max(0.5, fit["util"] - 0.04), fit["max_model_len"],
                        (fit["max_model_len"] or 0) // 2,
                        "; pass gate_inputs for values checked against the plan" if not gate_inputs else
                        "; no nearby setting fits the plan: add GPUs or a smaller checkpoint"))
    if kind == "cudagraph" and not args.get("enforce_eager") and \
            "enforce_eager" not in (suggestion or {}).get("changed", []):
        fixes.insert(0, "enforce_eager: true (preflight_deployment.enforce_eager; --enforce-eager): CUDA graphs are "
                        "captured outside the budget")
    return finding("out_of_memory", "problem", cause.rstrip(".") + ".", _join_fixes(fixes), evidence, sources)


# ---------------------------------------------------------------------------------------------
# 5. Tensor parallelism over PCIe
# ---------------------------------------------------------------------------------------------

def parse_acs(text):
    """``lspci -vvv`` text: {bdf: {"name", "enabled", "flags"}} for the devices with an ACSCtl line;
    enabled when SrcValid+, ReqRedir+ or CmpltRedir+ (SOURCES["acs_iommu"])."""
    result = {}
    current = None
    for line in (text or "").splitlines():
        match = _ACS_DEVICE_RE.match(line)
        if match and not line[:1].isspace():
            current = (match.group(1).lower(), _clip(match.group(2), 120))
            continue
        if "ACSCtl:" in line:
            flags = line.split("ACSCtl:", 1)[1].split()
            name = current[0] if current else "device %d" % len(result)
            result[name] = {"name": current[1] if current else None, "flags": flags,
                            "enabled": any(f in flags for f in ("SrcValid+", "ReqRedir+", "CmpltRedir+"))}
    return result


def iommu_mode(cmdline):
    """From /proc/cmdline: "passthrough" (iommu=pt), "on" (intel_iommu=on / amd_iommu=on without pt),
    "off" or None (not set on the command line)."""
    if not isinstance(cmdline, str):
        return None
    words = cmdline.split()
    if "iommu=pt" in words:
        return "passthrough"
    if any(w in words for w in ("intel_iommu=on", "amd_iommu=on", "amd_iommu=force_isolation")):
        return "on"
    if any(w in words for w in ("intel_iommu=off", "amd_iommu=off", "iommu=off")):
        return "off"
    return None


def _pairs(nvidia, topo_text, indices):
    topology = _mapping(_mapping(nvidia).get("topology"))
    pairs = [p for p in topology.get("pairs") or [] if isinstance(p, dict)]
    if not [p for p in pairs if p.get("link")] and topo_text:
        try:
            parsed, _nvlink = parse_topology(topo_text)
            pairs = parsed["pairs"]
        except ParseError:
            pairs = []
    chosen = set(indices)
    return [p for p in pairs if p.get("a") in chosen and p.get("b") in chosen]


def _journal_hang(journal):
    """The first hang the classified journal shows: {fault, text} of a HANG_FAULTS fault, else of a stall, else None."""
    for fault in HANG_FAULTS:
        items = _mapping(journal).get("faults", {}).get(fault) if journal else None
        if items:
            return {"fault": fault, "text": items[0]["text"]}
    if journal and journal.get("stall"):
        return {"fault": "stall", "text": journal["stall"]["text"]}
    return None


def check_tensor_parallel_pcie(instance=None, nvidia=None, journal=None, topo_matrix=None, topo_p2p=None,
                               lspci_acs=None, kernel_cmdline=None, env=None, deployed_args=None):
    """Slow or hanging tensor parallelism: NVLink or PCIe between the instance's GPUs (gpu_facts'
    topology, or ``nvidia-smi topo -m`` text), P2P status (``nvidia-smi topo -p2p r``), ACS on PCIe
    bridges (``lspci -vvv``), the IOMMU (/proc/cmdline), the NCCL variables already set (``env``), and
    a hang in the journal: the fault list's gated(nccl) state (NCCL watchdog, engine/RPC timeouts,
    shared-memory broadcast waits, or a server that stopped producing tokens)."""
    instance = _mapping(instance)
    journal = journal if isinstance(journal, dict) or journal is None else classify_journal(journal)
    args, _drift, refused = _instance_args(instance, deployed_args)
    tp = args.get("tensor_parallel_size") or 1
    env = container_env(env)
    nccl = dict((k, v) for k, v in env.items() if k.startswith("NCCL_"))
    indices = list(instance.get("gpu_indices") or [])[:tp] or list(range(tp))
    sources = ["topo_legend"]
    evidence = {"tensor_parallel_size": tp, "gpu_indices": indices, "nccl_env": nccl,
                "disable_custom_all_reduce": bool(args.get("disable_custom_all_reduce"))}
    if _mapping(nvidia).get("state") == "no_gpu":
        return finding("tensor_parallel_pcie", "not_applicable", "No NVIDIA GPU on this host (gpu_facts: no_gpu).", "",
                       evidence, sources)
    bad = _refused_args("tensor_parallel_pcie", refused, ["tensor_parallel_size"], evidence, sources)
    if bad:
        return bad
    if not args:
        return finding("tensor_parallel_pcie", "unknown", "The instance's vLLM arguments are not known.",
                       "collect: the deploy_gate plan (preflight_verdict.instances[]) or the running unit's "
                       "arguments (`systemctl cat <vllm unit>`)", evidence, sources)
    if tp <= 1:
        return finding("tensor_parallel_pcie", "not_applicable",
                       "tensor_parallel_size is %d: no all-reduce between GPUs." % tp, "", evidence, sources)
    pairs = _pairs(nvidia, topo_matrix, indices)
    links = sorted(set(p["link"] for p in pairs if p.get("link")))
    nvlink = bool(pairs) and all(str(p.get("link") or "").startswith("NV") for p in pairs)
    evidence.update(links=links, nvlink=nvlink)
    p2p = {}
    if topo_p2p:
        try:
            parsed, _unused = parse_topology(topo_p2p)
            p2p = dict(("%d-%d" % (p["a"], p["b"]), p["link"]) for p in parsed["pairs"]
                       if p["a"] in indices and p["b"] in indices)
        except ParseError:
            p2p = {}
        sources.append("topo_p2p")
    evidence["p2p"] = p2p
    acs = parse_acs(lspci_acs) if lspci_acs else {}
    acs_on = sorted(bdf for bdf, entry in acs.items() if entry["enabled"])
    evidence["acs_enabled_on"] = acs_on
    iommu = iommu_mode(kernel_cmdline)
    evidence["iommu"] = iommu
    hang = _journal_hang(journal)
    shm = _first_line(journal, ["shm_too_small"])
    link_text = "%s between GPU %s" % ("/".join(links) or "an unknown link", " and ".join(str(i) for i in indices))
    p2p_disabled = nccl.get("NCCL_P2P_DISABLE") == "1" or nccl.get("NCCL_P2P_LEVEL") in ("LOC", "NVL", "0")
    p2p_bad = sorted(k for k, v in p2p.items() if v != "OK")
    tries = []
    if not p2p_disabled:
        tries.append("NCCL_P2P_DISABLE=\"1\" in the instance's env (preflight_deployment.instances[].env, or "
                     "vllm_server_env): NCCL stops copying GPU to GPU over PCIe and stages through host shared "
                     "memory, which avoids broken P2P (ACS, IOMMU) and costs all-reduce bandwidth on every layer")
        tries.append("NCCL_P2P_LEVEL=\"NVL\" instead of NCCL_P2P_DISABLE (P2P only over NVLink, so none on this "
                     "host; the fix of vllm#8087), same cost")
        sources.extend(["nccl_p2p_disable", "nccl_p2p_level"])
    if not args.get("disable_custom_all_reduce"):
        tries.append("--disable-custom-all-reduce (preflight_deployment.extra_args): vLLM's own all-reduce over CUDA "
                     "IPC P2P buffers is not used; small all-reduces get slightly slower")
        sources.append("custom_all_reduce")
    if nccl.get("NCCL_IB_DISABLE") != "1":
        tries.append("NCCL_IB_DISABLE=\"1\": one host and no InfiniBand, so NCCL stops probing IB/RoCE devices; no "
                     "cost here")
        sources.append("nccl_ib_disable")
    tries.append("NCCL_DEBUG=\"INFO\" for one start shows each channel's transport ('via P2P/IPC' or 'via SHM'); "
                 "the NCCL sanity script of vLLM's troubleshooting guide (`NCCL_DEBUG=TRACE torchrun "
                 "--nproc-per-node=%d test.py`) tests the GPUs without vLLM" % tp)
    sources.append("nccl_debug")
    hardware = []
    if acs_on and (iommu in (None, "on")):
        hardware.append("disable ACS on the PCIe bridges (%s): VT-d/IOMMU off in the BIOS, or `setpci -s <bdf> "
                        "ECAP_ACS+0x6.w=0000` on each after every boot; `iommu=pt` on the kernel command line keeps "
                        "the IOMMU out of the device path" % ", ".join(acs_on[:4]))
        sources.append("acs_iommu")
    if shm:
        hardware.append("give the container a large /dev/shm: vllm_server_ipc_host: true or vllm_server_shm_size: 16g "
                        "(journal: '%s')" % _clip(shm["text"], 120))
        sources.append("shm_size")
    if hang:
        evidence.update(state="gated(nccl)", hang=hang)
        sources.append({"nccl_timeout": "nccl_watchdog", "nccl_error": "nccl_debug", "engine_timeout": "engine_timeout",
                        "rpc_timeout": "rpc_timeout", "shm_broadcast_wait": "shm_broadcast",
                        "stall": "metrics_stall"}[hang["fault"]])
        what = ("stopped producing tokens (last throughput line: '%s')" % _clip(hang["text"], 160)
                if hang["fault"] == "stall" else "hangs in a collective (journal: '%s')" % _clip(hang["text"], 160))
        cause = "The server with tensor_parallel_size %d over %s %s: gated(nccl)" % (tp, link_text, what)
        extra = []
        if acs_on:
            extra.append("ACS is enabled on %s" % ", ".join(acs_on[:4]))
        if iommu == "on":
            extra.append("the IOMMU is on (kernel command line)")
        if p2p_disabled:
            extra.append("P2P is already off (%s)" % ", ".join("%s=%s" % kv for kv in sorted(nccl.items())))
        if extra:
            cause += "; " + "; ".join(extra)
        return finding("tensor_parallel_pcie", "problem", cause + ".",
                       "try in this order, one change and one restart at a time: " + _join_fixes(hardware + tries),
                       evidence, sources)
    if not pairs and not journal:
        return finding("tensor_parallel_pcie", "unknown",
                       "The link between the instance's GPUs is not known and there is no journal.",
                       "collect: `nvidia-smi topo -m`, `nvidia-smi topo -p2p r`, `lspci -vvv` (ACSCtl lines), "
                       "/proc/cmdline and `journalctl -u <vllm unit> -n 200`", evidence, sources)
    risk = []
    if not nvlink and not p2p_disabled:
        if acs_on and p2p and not p2p_bad and iommu != "passthrough":
            risk.append("the driver reports P2P OK between GPU %s while ACS is enabled on %s%s: NCCL's P2P copies "
                        "are redirected through the root complex (slow) or hang"
                        % (" and ".join(str(i) for i in indices), ", ".join(acs_on[:4]),
                           " and the IOMMU is on" if iommu == "on" else ""))
        elif acs_on and iommu == "on":
            risk.append("ACS is enabled on %s and the IOMMU is on: P2P traffic between the GPUs is redirected to "
                        "the CPU root complex" % ", ".join(acs_on[:4]))
    if risk:
        sources.append("acs_iommu")
        fix = _join_fixes(hardware or ["disable ACS (VT-d off in the BIOS) or set iommu=pt"])
        fix = fix.rstrip(".") + ". Meanwhile, or where the BIOS cannot be changed: " + tries[0] + "."
        return finding("tensor_parallel_pcie", "problem",
                       "Tensor parallelism %d over %s: %s." % (tp, link_text, "; ".join(risk)), fix, evidence, sources)
    if nvlink:
        return finding("tensor_parallel_pcie", "healthy",
                       "GPUs %s are linked by NVLink (%s); no hang in the journal." %
                       (" and ".join(str(i) for i in indices), "/".join(links)), "", evidence, sources)
    sources.append("pcie_tp")
    where = {"SYS": "across the CPU sockets, so NCCL stages through host memory",
             "NODE": "across host bridges of one NUMA node", "PHB": "through the CPU's host bridge",
             "PXB": "through PCIe switches", "PIX": "through one PCIe switch"}
    detail = "; ".join("%s: %s" % (link, where[link]) for link in links if link in where)
    parts = ["Tensor parallelism %d all-reduces over PCIe on every layer (%s%s)"
             % (tp, link_text, ", %s" % detail if detail else "")]
    if p2p:
        parts.append("P2P status %s" % ", ".join("%s %s" % kv for kv in sorted(p2p.items())))
    if nccl:
        parts.append("NCCL settings %s" % ", ".join("%s=%s" % kv for kv in sorted(nccl.items())))
    if journal and journal.get("last_metrics"):
        last = journal["last_metrics"]
        parts.append("the last throughput line shows %.1f tokens/s with %d running"
                     % (last["generation_tps"], last["running"]))
    elif journal and args.get("disable_log_stats"):
        parts.append("--disable-log-stats hides the throughput lines a stall shows in")
    parts.append("no hang in the journal" if journal else "no journal was read")
    return finding("tensor_parallel_pcie", "healthy", _sentence(parts),
                   "nothing to fix; for throughput raise max_num_seqs so larger batches amortise the all-reduce "
                   "(tensor parallelism here is for fitting the model, not for speed)", evidence, sources)


# ---------------------------------------------------------------------------------------------
# All five, and the report section
# ---------------------------------------------------------------------------------------------

def _pick_instance(verdict, name=None):
    instances = [i for i in _mapping(verdict).get("instances") or [] if isinstance(i, dict)]
    if name is not None:
        for inst in instances:
            if inst.get("name") == name:
                return inst
        return None
    return instances[0] if instances else None


def overall_status(findings):
    """problem if any check has one; else unknown if any is unknown; else healthy (not_applicable
    ignored); not_applicable when every check is."""
    statuses = [f["status"] for f in findings]
    for status in ("problem", "unknown", "healthy"):
        if status in statuses:
            return status
    return "not_applicable"


def diagnose(nvidia=None, host=None, image=None, verdict=None, raw=None, gate_inputs=None, instance=None):
    """All five checks for one host and one vLLM instance.

    ``nvidia``, ``host``, ``image``, ``verdict``: what gpu_facts, host_facts, vllm_image_facts and
    deploy_gate return. ``raw`` (all optional): journal (text or lines of the instance's unit),
    kernel_log, daemon_json (text; None when absent), daemon_json_path, gpu_test and ptx_jit_test
    ({rc, stdout, stderr}), topo_matrix, topo_p2p, lspci_acs, kernel_cmdline (texts), cdi_specs
    ([{path, text}]), dev_nodes and dev_char_missing (lists), container_env (dict or env-file text),
    deployed_argv (the vLLM arguments of the running unit). ``gate_inputs``: deploy_gate's inputs
    (evaluate()'s arguments) for the OOM fix values. ``instance``: the instance name (default: the
    plan's first).

    Returns {"status", "instance", "findings": [five findings in CHECKS order], "journal_states"}.
    """
    raw = _mapping(raw)
    journal = classify_journal(raw.get("journal"))
    inst = _pick_instance(verdict, instance)
    deployed = parse_vllm_argv(raw.get("deployed_argv")) if raw.get("deployed_argv") else None
    env = container_env(raw.get("container_env"))
    inputs = None
    if gate_inputs:
        inputs = dict(gate_inputs)
        gpus = [g for g in _mapping(nvidia).get("gpus") or [] if isinstance(g, dict)]
        if "gpus" not in inputs and gpus:
            inputs["gpus"] = gpus
        if inst and inst.get("gpu_indices") and inputs.get("gpus"):
            chosen = [g for g in inputs["gpus"] if _mapping(g).get("index") in inst["gpu_indices"]]
            inputs["gpus"] = chosen or inputs["gpus"]
    findings = [
        check_gpu_in_container(nvidia, host, daemon_json=raw.get("daemon_json"),
                               daemon_json_path=raw.get("daemon_json_path") or "/etc/docker/daemon.json",
                               gpu_test=raw.get("gpu_test"), dev_nodes=raw.get("dev_nodes"),
                               dev_char_missing=raw.get("dev_char_missing"), cdi_specs=raw.get("cdi_specs"),
                               image=image, verdict=verdict),
        check_illegal_instruction(host, image, journal, kernel_log=raw.get("kernel_log")),
        check_no_kernel_image(nvidia, image, journal, env=env, verdict=verdict, ptx_jit_test=raw.get("ptx_jit_test")),
        check_out_of_memory(inst, journal, deployed_args=deployed, gate_inputs=inputs, nvidia=nvidia),
        check_tensor_parallel_pcie(inst, nvidia, journal, topo_matrix=raw.get("topo_matrix"),
                                   topo_p2p=raw.get("topo_p2p"), lspci_acs=raw.get("lspci_acs"),
                                   kernel_cmdline=raw.get("kernel_cmdline"), env=env, deployed_args=deployed),
    ]
    return {"status": overall_status(findings), "instance": (inst or {}).get("name"), "findings": findings,
            "journal_states": (journal or {}).get("states", [])}


def summary_lines(result):
    """One line per check of a diagnose() result, for a person: "<check>: <status>: <cause> Fix: <fix>"."""
    lines = []
    for item in _mapping(result).get("findings") or []:
        item = _mapping(item)
        text = "%s: %s: %s" % (item.get("check"), item.get("status"), " ".join(str(item.get("cause") or "").split()))
        fix = " ".join(str(item.get("fix") or "").split())
        lines.append(text + (" Fix: " + fix if fix and item.get("status") in ("problem", "unknown") else ""))
    return lines
