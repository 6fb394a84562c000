# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.deploy_gate module instead.
#
# The shipped compatibility policy, as Python data (AnsiballZ ships only ``.py`` files from
# module_utils to a managed host, so the data lives here rather than in a YAML file).
# Every entry carries a ``source`` (keys explained in SOURCES) and a ``confidence``:
#   verified     read in a primary source or in two independent verbatim copies
#   third_party  only seen in third-party copies of an NVIDIA table or page
#   inferred     derived from verified facts by reasoning; check before relying on it
# The data follows the collection's reference material (compat_matrix.yaml and facts.md);
# tests/unit/plugins/module_utils/test_policy.py checks it against compat_matrix.yaml.
#
# Besides the data this file holds three small pieces of pure logic that belong to it:
# version parsing, the NVIDIA_REQUIRE_CUDA parser/evaluator, and merge_policy(), which
# deep-merges a user's override dict over the shipped data and validates the result.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import math
import re

POLICY_VERSION = "1.0.0"

# ---------------------------------------------------------------------------------------------
# Source keys
# ---------------------------------------------------------------------------------------------
SOURCES = {
    "S-RN-TABLE3": "NVIDIA CUDA Toolkit Release Notes, Table 3 'CUDA Toolkit and Corresponding Driver "
                   "Versions', https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html "
                   "(rows read in three third-party verbatim copies)",
    "S-MVC": "https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html",
    "S-FWD": "https://docs.nvidia.com/deploy/cuda-compatibility/forward-compatibility.html",
    "S-ARCHMATRIX": "https://docs.nvidia.com/datacenter/tesla/drivers/"
                    "cuda-toolkit-driver-and-architecture-matrix.html",
    "S-DCDRV": "https://docs.nvidia.com/datacenter/tesla/drivers/"
               "supported-drivers-and-cuda-toolkit-versions.html (+ /615/ and /620/ variants)",
    "S-RUNFILE": "CUDA runfile names, e.g. cuda_13.0.2_580.95.05_linux.run (third-party copies)",
    "S-CUDAIMG": "nvidia/cuda image NVIDIA_REQUIRE_CUDA strings (third-party copies)",
    "S-CTK-DOCS": "NVIDIA/cloud-native-docs container-toolkit/docker-specialized.md "
                  "(NVIDIA_REQUIRE_*: space = OR, comma = AND)",
    "S-OPENMOD": "NVIDIA blog 'NVIDIA Transitions Fully Towards Open-Source GPU Kernel Modules'",
    "S-PT-BUILD": "pytorch/pytorch .ci/manywheel/build_cuda.sh and third-party copies",
    "S-PT-ISSUES": "pytorch/pytorch#157517, #157558, #146265, #172352",
    "S-VLLM-SDIST": "vllm-project/vllm release sources (PyPI sdists): docker/Dockerfile, docs, "
                    "vllm/platforms/cuda.py, vllm/model_executor/layers/quantization/*",
    "S-VLLM-QUANT": "vllm get_min_capability() of each quantization method, "
                    "vllm@0.8.5 and vllm@0.19.1 (facts.md section 3.7)",
    "S-VLLM-ACTDTYPE": "get_supported_act_dtypes() of each quantization method, checked by "
                       "vllm@0.8.5:vllm/config.py:3810-3815 and vllm@0.19.1:vllm/config/vllm.py:522-528 "
                       "('<dtype> is not supported for quantization method <m>')",
    "S-VLLM-PROFILE": "vLLM's profile run and KV sizing, modelled in _vllm_memory.py (vllm@0.8.5 worker/worker.py "
                      "determine_num_available_blocks, worker/model_runner.py profile_run; vllm@0.19.1 "
                      "v1/worker/gpu_worker.py determine_available_memory; MEMORY_MODEL_SOURCES lists every line)",
    "S-NIXOS-1880": "NixOS/nixos-hardware#1880 (595.71.05 refusing a Pascal GPU, '580.xx Legacy drivers')",
    "S-FACTS-3.2": "facts.md 3.2 'Engine and attention on Volta' (vLLM 0.8.5-0.10.1.1 fall back to V0 below "
                   "compute capability 8.0, 0.10.2 extends V1 to it, 0.11.0 removes V0; dtype auto on a bfloat16 "
                   "checkpoint in 0.8.5 and 0.19.1)",
    "S-FACTS-3.3": "facts.md 3.3 'Forward-compat switch' (docker/Dockerfile 'RUN ldconfig /usr/local/cuda-X.Y/compat/' "
                   "up to 0.13.0 at least; from 0.17.0 ENV VLLM_ENABLE_CUDA_COMPATIBILITY=0, opt-in with =1; "
                   "vllm#5283: error 804 on a GeForce)",
    "S-FACTS-8": "facts.md section 8 (memory planning), vllm v1/worker/gpu_worker.py "
                 "determine_available_memory, v1/kv_cache_interface.py",
    "S-SDIST-0.8.5": "vllm 0.8.5 release source (PyPI sdist): docker/Dockerfile, "
                     ".buildkite/release-pipeline.yaml (release build passes --build-arg CUDA_VERSION=12.4.0), "
                     "requirements/cuda.txt, vllm/model_executor/layers/quantization/__init__.py",
    "S-SDIST-0.19.1": "vllm 0.19.1 release source (PyPI sdist): docker/Dockerfile (x86_64 release build uses "
                      "the default torch_cuda_arch_list), .buildkite/release-pipeline.yaml, requirements/cuda.txt, "
                      "vllm/model_executor/layers/quantization/__init__.py",
    "S-SDIST-0.20.0": "vllm 0.20.0 release source (PyPI sdist): docker/Dockerfile, .buildkite/release-pipeline.yaml "
                      "(CUDA_ARCH_X86 / CUDA_ARCH_X86_CU129), .buildkite/scripts/annotate-release.sh, "
                      "requirements/cuda.txt, vllm/model_executor/layers/quantization/__init__.py",
    "S-INSPECT-0.8.5": "third-party copy of `docker inspect vllm/vllm-openai:v0.8.5` Config.Env (an experiment "
                       "write-up on NVIDIA_VISIBLE_DEVICES): CUDA_VERSION=12.4.0, the full NVIDIA_REQUIRE_CUDA",
    "S-CUDA-12.4": "third-party copies of nvidia/cuda 12.4.x image environments (same NVIDIA_REQUIRE_CUDA)",
    "S-ENV-0.16.0": "third-party `vllm collect-env` of a vllm/vllm-openai 0.16.0 container (CUDA_VERSION=12.9.1, "
                    "NVIDIA_REQUIRE_CUDA, TORCH_CUDA_ARCH_LIST)",
    "S-ENV-0.23.0": "third-party copy of the vllm/vllm-openai:v0.23.0 image environment (CUDA_VERSION=13.0.2, "
                    "NVIDIA_REQUIRE_CUDA, TORCH_CUDA_ARCH_LIST)",
    "S-FACTS-2.3": "facts.md 2.3 (PyTorch wheel arch lists, .ci/manywheel/build_cuda.sh and issues)",
    "S-DOCS": "vLLM installation docs in each release ('compute capability 7.0 or higher' through 0.19.x, "
              "'7.5 or higher' from 0.20.0)",
    "S-REFDEPLOY": "reference-deployment.md (2x V100, vLLM 0.8.5: --enforce-eager, 'CUDA graphs sometimes caused "
                   "odd memory errors on V100')",
    "S-VLLM-CUDAGRAPH": "vllm#11251, vllm#15598 (CUDA graph capture memory outside the gpu_memory_utilization budget, "
                        "'1~3 GiB per GPU')",
    "S-VLLM-EXLLAMA": "vllm csrc/quantization/gptq/q_gemm.cu (the exllama kernels of the gptq method): "
                      "gemm_half_q_half_gptq_4bit_kernel and reconstruct_exllama_4bit_kernel advance k by 32 rows "
                      "and move to the next group only at k == nextgroup, so a group size that is not a multiple "
                      "of 32 keeps one group's scales and zeros for the rows of the next (wrong results, no "
                      "error); GPTQModel disabled its ExllamaV2 kernel for group_size 16 for that "
                      "(ModelCloud/GPTQModel#1515, #1537)",
    "user": "a user override (policy option / preflight role variable)",
}

# ---------------------------------------------------------------------------------------------
# Tool versions: the releases of Docker and the NVIDIA Container Toolkit from which something a GPU
# container needs works. ``version`` is written as messages state it; tool_version() gives the
# (major, minor, patch) tuple to compare with. The container_runtime role keeps the user-facing pin
# (container_runtime_toolkit_version, default "toolkit_tested") and its own two Docker checks; a unit
# test holds them to this table.
# ---------------------------------------------------------------------------------------------
_CTK_SRC = ("NVIDIA/nvidia-container-toolkit at the tags v1.14.6 ... v1.20.0 (plugins/module_utils/probes/_host.py "
            "cites the files and lines)")
TOOL_VERSIONS = {
    "toolkit_min": {"tool": "nvidia-container-toolkit", "version": "1.14",
                    "what": "the oldest toolkit the doctor accepts: older ones leave the GPUs out of containers",
                    "source": "shared/reference/reference-deployment.md, failure 1: toolkit missing or older than 1.14 "
                              "(nvidia-container-cli -V)", "confidence": "third_party"},
    "toolkit_tested": {"tool": "nvidia-container-toolkit", "version": "1.18.2",
                       "what": "the release the container_runtime role installs and holds; TOOLKIT_PACKAGES are pinned "
                               "together at <version>-1",
                       "source": "shared/reference/facts.md section 5 (the four packages pinned together)",
                       "confidence": "verified"},
    "toolkit_cdi_void": {"tool": "nvidia-container-toolkit", "version": "1.15.0",
                         "what": "a generated CDI spec sets NVIDIA_VISIBLE_DEVICES=void, so a legacy hook does nothing",
                         "source": "NVIDIA/nvidia-container-toolkit pkg/nvcdi/lib.go:176 at v1.15.0",
                         "confidence": "verified"},
    "toolkit_hook_removed": {"tool": "nvidia-container-toolkit", "version": "1.17.5",
                             "what": "the nvidia runtime in cdi or jit-cdi mode removes the hook that docker --gpus adds",
                             "source": _CTK_SRC, "confidence": "verified"},
    "toolkit_jit_cdi": {"tool": "nvidia-container-toolkit", "version": "1.18",
                        "what": "mode \"jit-cdi\" exists, and mode \"auto\" resolves to it (legacy before)",
                        "source": "NVIDIA/nvidia-container-toolkit internal/info/auto.go:49-55 at v1.17.8, :87-99 and "
                                  "129-135 at v1.18.2, CHANGELOG v1.18.0-rc.1", "confidence": "verified"},
    "toolkit_cdi_refresh": {"tool": "nvidia-container-toolkit", "version": "1.18",
                            "what": "nvidia-cdi-refresh.service regenerates /var/run/cdi/nvidia.yaml",
                            "source": "NVIDIA/cloud-native-docs container-toolkit/cdi-support.md (facts.md section 5)",
                            "confidence": "verified"},
    "docker_gpus": {"tool": "docker", "version": "19.03", "what": "docker run --gpus",
                    "source": "NVIDIA/cloud-native-docs container-toolkit/docker-specialized.md: --gpus from Docker "
                              "19.03, else NVIDIA_VISIBLE_DEVICES (shared/reference/facts.md section 5)",
                    "confidence": "verified"},
    "docker_cdi": {"tool": "docker", "version": "25", "what": "CDI devices, with features.cdi: true in daemon.json",
                   "source": "moby cmd/dockerd/daemon.go:271 at v28.1.1, :607-617 at v25.0.0", "confidence": "verified"},
    "docker_cdi_default": {"tool": "docker", "version": "28.2", "what": "CDI on unless features.cdi: false",
                           "source": "moby cmd/dockerd/daemon.go:1064-1072 at v28.2.0 (cdiEnabled())",
                           "confidence": "verified"},
    "docker_gpus_cdi": {"tool": "docker", "version": "29.2",
                        "what": "--gpus maps to CDI devices (CDI on, nvidia-cdi-hook on dockerd's PATH, a spec of kind "
                                "nvidia.com/gpu)",
                        "source": "moby daemon/devices_nvidia_linux.go:60-101 and 210-250 at docker-v29.2.0, moby/moby#50228",
                        "confidence": "verified"},
}

# The NVIDIA Container Toolkit's packages, installed and held at one version (NVIDIA's install guide).
TOOLKIT_PACKAGES = ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
                    "libnvidia-container1")


def tool_version(key):
    """TOOL_VERSIONS[key]'s version as (major, minor, patch) ints: "19.03" -> (19, 3, 0)."""
    parts = [int(part) for part in TOOL_VERSIONS[key]["version"].split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


# ---------------------------------------------------------------------------------------------
# Minor version compatibility (MVC): an app built with any toolkit of a major family runs, with a
# limited feature set (no JIT of PTX newer than the driver), on a driver >= driver_min.
# ---------------------------------------------------------------------------------------------
MINOR_VERSION_COMPATIBILITY = {
    "11": {"driver_min": "450", "note": "11.0 needs 450.80.02+ for MVC", "source": "S-MVC",
           "confidence": "verified"},
    "12": {"driver_min": "525", "source": "S-MVC", "confidence": "verified"},
    "13": {"driver_min": "580", "source": "S-MVC", "confidence": "verified"},
}

# ---------------------------------------------------------------------------------------------
# CUDA toolkit -> minimum Linux driver (x86_64) and minor-version-compatibility floor.
# Keyed by the full toolkit version (GA = .0, U1 = .1, ...); ``label`` is the release-notes name.
# ---------------------------------------------------------------------------------------------


def _tk(label, min_driver, source="S-RN-TABLE3", confidence="verified"):
    """A toolkit row; its ``mvc_floor`` is the MINOR_VERSION_COMPATIBILITY floor of its major."""
    major = label.split(".", 1)[0]
    return {"label": label, "min_linux_driver": min_driver,
            "mvc_floor": MINOR_VERSION_COMPATIBILITY[major]["driver_min"],
            "source": source, "confidence": confidence}


CUDA_TOOLKITS = {
    "12.0.0": _tk("12.0 GA", "525.60.13"),
    "12.0.1": _tk("12.0 U1", "525.85.12"),
    "12.1.0": _tk("12.1 GA", "530.30.02"),
    "12.1.1": _tk("12.1 U1", "530.30.02"),
    "12.2.0": _tk("12.2 GA", "535.54.03"),
    "12.2.1": _tk("12.2 U1", "535.86.09"),
    "12.2.2": _tk("12.2 U2", "535.104.05"),
    "12.3.0": _tk("12.3 GA", "545.23.06"),
    "12.3.1": _tk("12.3 U1", "545.23.08"),
    "12.4.0": _tk("12.4 GA", "550.54.14"),
    "12.4.1": _tk("12.4 U1", "550.54.15"),
    "12.5.0": _tk("12.5 GA", "555.42.02"),
    "12.5.1": _tk("12.5 U1", "555.42.06"),
    "12.6.0": _tk("12.6 GA", "560.28.03"),
    "12.6.1": _tk("12.6 U1", "560.35.03"),
    "12.6.2": _tk("12.6 U2", "560.35.03"),
    "12.6.3": _tk("12.6 U3", "560.35.05"),
    # There is no CUDA 12.7 release (12.6 U3 is followed by 12.8 GA).
    "12.8.0": _tk("12.8 GA", "570.26"),
    "12.8.1": _tk("12.8 U1", "570.124.06"),
    "12.9.0": _tk("12.9 GA", "575.51.03"),
    "12.9.1": _tk("12.9 U1", "575.57.08"),
    "13.0.0": _tk("13.0 GA", "580.65.06"),
    "13.0.1": _tk("13.0 U1", "580.82.07", confidence="third_party"),
    "13.0.2": _tk("13.0 U2", "580.95.05", source="S-RN-TABLE3; S-RUNFILE"),
    "13.1.0": _tk("13.1 GA", "590.44.01", confidence="third_party"),
    "13.1.1": _tk("13.1 U1", "590.48.01", confidence="third_party"),
    "13.2.0": _tk("13.2 GA", "595.45.04", confidence="third_party"),
    "13.2.1": _tk("13.2 U1", "595.58.03", confidence="third_party"),
    "13.2.2": _tk("13.2 U2", "595.71.05", confidence="third_party"),
}

# NVIDIA_REQUIRE_CUDA of the nvidia/cuda base images, per image CUDA major.minor: the
# ``cuda>=X.Y`` clause, then one ``brand=<b>,driver>=<n>,driver<<n+1>`` alternative per branch and
# brand, branches outer, brands inner (space = OR, comma = AND; S-CTK-DOCS). The branches are those
# the string admits besides the ``cuda>=`` clause (forward compatibility through the cuda-compat
# libraries in the image; data-center GPUs). This is the one table the strings are built from
# (require_cuda_string); _image.py's REQUIRE_CUDA_* constants are built with it.
_BRANDS_CUDA_12_4 = ("tesla", "unknown", "nvidia", "nvidiartx", "geforce", "geforcertx", "quadro", "quadrortx",
                     "titan", "titanrtx")
_BRANDS_CUDA_12_8 = ("unknown", "grid", "tesla", "nvidia", "quadro", "quadrortx", "nvidiartx", "vapps", "vpc",
                     "vcs", "vws", "cloudgaming")

FORWARD_COMPAT_IMAGE_BRANCHES = {
    "12.4": {"branches": [470, 525, 535], "brands": list(_BRANDS_CUDA_12_4),
             "note": "an earlier copy was truncated after 525; the full string from the docker inspect of "
                     "vllm/vllm-openai:v0.8.5 (CUDA_VERSION=12.4.0) also lists 535",
             "source": "S-CUDAIMG; S-INSPECT-0.8.5; S-CUDA-12.4", "confidence": "verified"},
    "12.8": {"branches": [470, 535, 550, 560, 565], "brands": list(_BRANDS_CUDA_12_8), "source": "S-CUDAIMG",
             "confidence": "verified"},
    "12.9": {"branches": [535, 550, 560, 565, 570], "brands": list(_BRANDS_CUDA_12_8),
             "source": "S-CUDAIMG; S-ENV-0.16.0", "confidence": "verified"},
    "13.0": {"branches": [535, 550, 565, 570, 575], "brands": list(_BRANDS_CUDA_12_8),
             "note": "read in one third-party copy of the vllm/vllm-openai:v0.23.0 environment (nvidia/cuda 13.0.2)",
             "source": "S-ENV-0.23.0", "confidence": "third_party"},
}


def require_cuda_string(cuda, table=None):
    """The NVIDIA_REQUIRE_CUDA string of an nvidia/cuda image of CUDA ``cuda`` ("12.4" or "12.4.0"),
    built from FORWARD_COMPAT_IMAGE_BRANCHES; None when the table has no row for that CUDA."""
    table = FORWARD_COMPAT_IMAGE_BRANCHES if table is None else table
    key = ".".join(str(cuda).split(".")[:2])
    entry = table.get(key)
    if entry is None:
        return None
    words = ["cuda>=%s" % key]
    for branch in entry["branches"]:
        for brand in entry["brands"]:
            words.append("brand=%s,driver>=%d,driver<%d" % (brand, branch, branch + 1))
    return " ".join(words)


# Which GPUs forward compatibility (the cuda-compat libraries a ``brand=...,driver>=...`` clause of
# NVIDIA_REQUIRE_CUDA lets the legacy hook admit) works on, by NVIDIA_REQUIRE_CUDA brand. NVIDIA's
# CUDA Compatibility guide, section "Forward Compatibility": it "is applicable only for systems
# with NVIDIA Data Center GPUs, select NGC Server Ready SKUs of RTX cards, or Jetson boards"
# (S-FWD; facts.md 1.3, compat_matrix.yaml forward_compatibility.applies_to). Elsewhere the CUDA
# driver refuses the compat library: error 804, cudaErrorCompatNotSupportedOnDevice, "forward
# compatibility was attempted on non supported HW" (vllm#5283 on a GeForce, facts.md 3.3).
#   data_center  supported: Tesla / NVIDIA-branded data-center boards, and the vGPU brands that run on them
#   select       professional RTX / Quadro: only the NGC Server Ready SKUs; the brand cannot tell which
#   consumer     never: GeForce, GeForce RTX, TITAN
FORWARD_COMPAT_SUPPORT = {
    "data_center": {"brands": ["tesla", "nvidia", "grid", "vapps", "vpc", "vcs", "vws", "cloudgaming"],
                    "field_confidence": {"brands": "inferred"},
                    "note": "tesla and nvidia are the data-center brands NVML reports (NVML_BRAND_TESLA, "
                            "NVML_BRAND_NVIDIA); the vGPU brands are data-center boards shared by a hypervisor "
                            "(inferred: the guide names data-center GPUs, not vGPU profiles)",
                    "source": "S-FWD", "confidence": "verified"},
    "select": {"brands": ["quadro", "quadrortx", "nvidiartx"],
               "note": "only 'select NGC Server Ready SKUs of RTX cards'; the gate warns and cannot tell the SKU",
               "source": "S-FWD", "confidence": "verified"},
    "consumer": {"brands": ["geforce", "geforcertx", "titan", "titanrtx"],
                 "note": "not among the GPUs the guide lists: the compat library fails with error 804",
                 "source": "S-FWD; S-FACTS-3.3 (vllm#5283)", "confidence": "verified"},
}


def forward_compat_support(brand, table=None):
    """"data_center", "select", "consumer" or None (brand unknown) for an NVIDIA_REQUIRE_CUDA brand."""
    table = FORWARD_COMPAT_SUPPORT if table is None else table
    for kind, entry in table.items():
        if brand in entry["brands"]:
            return kind
    return None


# The lowest compute capability each CUDA major can build code for (nvcc offline targets): an
# image built with CUDA 13 carries no code for Volta (7.0) or older.
CUDA_MIN_TARGET_CC = {
    "11": {"min_cc": "3.5", "source": "S-ARCHMATRIX", "confidence": "verified"},
    "12": {"min_cc": "5.0", "source": "S-ARCHMATRIX", "confidence": "verified"},
    "13": {"min_cc": "7.5", "source": "S-ARCHMATRIX", "confidence": "verified",
           "note": "CUDA 13.0 removed offline compilation for 5.x, 6.x, 7.0 and 7.2"},
}


def _require_cuda_brands():
    """Brands named in those strings plus the consumer brands (derived from the table above)."""
    brands = []
    for key in sorted(FORWARD_COMPAT_IMAGE_BRANCHES):
        for brand in list(FORWARD_COMPAT_IMAGE_BRANCHES[key]["brands"]) + ["geforce", "titan"]:
            if brand not in brands:
                brands.append(brand)
    return brands


REQUIRE_CUDA_BRANDS = _require_cuda_brands()

# ---------------------------------------------------------------------------------------------
# Driver branches. ``max_cuda_native``: the CUDA version the driver reports (what ``cuda>=`` in
# NVIDIA_REQUIRE_CUDA is compared against). ``eol``: "YYYY-MM" (end of life from that month on),
# True (listed as end of life, date unknown) or None (supported / not known).
# Branches older than the newest one here and missing from it are treated as end of life:
# S-DCDRV says "All other previous driver branches not listed ... are end of life".
# ---------------------------------------------------------------------------------------------
DRIVER_BRANCHES = {
    "470": {"max_cuda_native": "11.4", "designation": "LTSB", "eol": True,
            "source": "S-ARCHMATRIX; S-DCDRV", "confidence": "verified"},
    "525": {"max_cuda_native": "12.0", "eol": True, "source": "S-RN-TABLE3; S-DCDRV",
            "confidence": "verified"},
    "530": {"max_cuda_native": "12.1", "eol": True, "source": "S-RN-TABLE3; S-DCDRV",
            "confidence": "inferred"},
    "535": {"max_cuda_native": "12.2", "designation": "LTSB", "eol": "2026-06",
            "source": "S-RN-TABLE3; S-DCDRV", "confidence": "verified"},
    "545": {"max_cuda_native": "12.3", "eol": True, "source": "S-RN-TABLE3; S-DCDRV",
            "confidence": "verified"},
    "550": {"max_cuda_native": "12.4", "designation": "Production Branch", "eol": True,
            "note": "listed as end of life on S-DCDRV; exact date not read",
            "source": "S-RN-TABLE3; S-DCDRV", "confidence": "verified"},
    "555": {"max_cuda_native": "12.5", "eol": True, "source": "S-RN-TABLE3; S-DCDRV",
            "confidence": "verified"},
    "560": {"max_cuda_native": "12.6", "eol": True,
            "note": "first branch whose installers default to the open kernel modules",
            "source": "S-RN-TABLE3; S-DCDRV; S-OPENMOD", "confidence": "verified"},
    "565": {"max_cuda_native": "12.7", "eol": True,
            "note": "no CUDA 12.7 toolkit exists; the 565 driver API level sits between 12.6 and 12.8",
            "source": "S-DCDRV; S-CUDAIMG", "confidence": "inferred"},
    "570": {"max_cuda_native": "12.8", "designation": "Production Branch", "eol": "2026-02",
            "source": "S-RN-TABLE3; S-DCDRV", "confidence": "verified"},
    "575": {"max_cuda_native": "12.9", "eol": True, "source": "S-RN-TABLE3; S-DCDRV",
            "confidence": "verified"},
    "580": {"max_cuda_native": "13.0", "designation": "LTSB", "eol": "2028-08",
            "note": "later page revisions (/615/, /620/) say June 2028; last branch for Maxwell, "
                    "Pascal and Volta",
            "source": "S-ARCHMATRIX; S-DCDRV; S-NIXOS-1880", "confidence": "verified"},
    "590": {"max_cuda_native": "13.1", "eol": None, "source": "S-RN-TABLE3; S-ARCHMATRIX",
            "confidence": "third_party"},
    "595": {"max_cuda_native": "13.2", "designation": "Production Branch", "eol": "2027-03",
            "source": "S-DCDRV; S-NIXOS-1880", "confidence": "verified"},
}

# ---------------------------------------------------------------------------------------------
# Architectures. ``cc``: compute capabilities; ``max_driver_branch``: the last branch that drives
# the architecture (None: ongoing); ``min_driver_branch``: the first branch that does (derived from
# the first CUDA release for the architecture; inferred); ``kernel_module``: proprietary (the open
# modules do not support it), either, or open (open modules required).
# ---------------------------------------------------------------------------------------------
ARCHITECTURES = {
    "kepler": {"label": "Kepler", "cc": ["3.0", "3.2", "3.5", "3.7"], "max_driver_branch": 470,
               "min_driver_branch": None, "last_cuda": "11.x (3.5/3.7), 10.x (3.0/3.2)",
               "kernel_module": "proprietary",
               "note": "R470 read for 3.5/3.7; for 3.0/3.2 the last branch was not read (inferred R470)",
               "source": "S-ARCHMATRIX; S-OPENMOD", "confidence": "verified"},
    "maxwell": {"label": "Maxwell", "cc": ["5.0", "5.2", "5.3"], "max_driver_branch": 580,
                "min_driver_branch": None, "last_cuda": "12.x", "kernel_module": "proprietary",
                "source": "S-ARCHMATRIX; S-NIXOS-1880; S-OPENMOD", "confidence": "verified"},
    "pascal": {"label": "Pascal", "cc": ["6.0", "6.1", "6.2"], "max_driver_branch": 580,
               "min_driver_branch": None, "last_cuda": "12.x", "kernel_module": "proprietary",
               "source": "S-ARCHMATRIX; S-NIXOS-1880; S-OPENMOD", "confidence": "verified"},
    "volta": {"label": "Volta", "cc": ["7.0", "7.2"], "max_driver_branch": 580,
              "min_driver_branch": None, "last_cuda": "12.x", "kernel_module": "proprietary",
              "enforce_eager": True,
              "enforce_eager_why": "CUDA graphs caused memory errors on V100 in the reference deployment, and "
                                   "graph capture takes 1-3 GiB per GPU outside gpu_memory_utilization",
              "note": "7.2 (Xavier) is a Jetson part; enforce_eager: S-REFDEPLOY, S-VLLM-CUDAGRAPH",
              "source": "S-ARCHMATRIX; S-NIXOS-1880; S-OPENMOD", "confidence": "verified"},
    "turing": {"label": "Turing", "cc": ["7.5"], "max_driver_branch": None, "min_driver_branch": 410,
               "last_cuda": "ongoing", "kernel_module": "either",
               "note": "min_driver_branch inferred from first CUDA 10.0",
               "source": "S-ARCHMATRIX; S-OPENMOD", "confidence": "verified"},
    "ampere": {"label": "Ampere", "cc": ["8.0", "8.6", "8.7"], "max_driver_branch": None,
               "min_driver_branch": 450, "last_cuda": "ongoing", "kernel_module": "either",
               "note": "min_driver_branch inferred from first CUDA 11.0",
               "source": "S-ARCHMATRIX; S-OPENMOD", "confidence": "verified"},
    "ada": {"label": "Ada Lovelace", "cc": ["8.9"], "max_driver_branch": None, "min_driver_branch": 520,
            "last_cuda": "ongoing", "kernel_module": "either",
            "note": "min_driver_branch inferred from first CUDA 11.8",
            "source": "S-ARCHMATRIX", "confidence": "inferred"},
    "hopper": {"label": "Hopper", "cc": ["9.0"], "max_driver_branch": None, "min_driver_branch": 520,
               "last_cuda": "ongoing", "kernel_module": "either",
               "note": "min_driver_branch inferred from first CUDA 11.8; Grace Hopper needs the open modules",
               "source": "S-ARCHMATRIX", "confidence": "inferred"},
    "blackwell": {"label": "Blackwell", "cc": ["10.0", "10.3", "11.0", "12.0", "12.1"],
                  "max_driver_branch": None, "min_driver_branch": 570, "last_cuda": "ongoing",
                  "kernel_module": "open",
                  "note": "first CUDA 12.8 (570.26); open modules required (blog, not in facts.md)",
                  "source": "S-ARCHMATRIX; S-RN-TABLE3; S-OPENMOD", "confidence": "inferred"},
}

# ---------------------------------------------------------------------------------------------
# Data types (as vLLM gates them: vllm/platforms/cuda.py supported_dtypes/check_if_supports_dtype)
# ---------------------------------------------------------------------------------------------
DTYPES = {
    "bfloat16": {"min_cc": "8.0", "bytes": 2, "source": "S-VLLM-SDIST", "confidence": "verified"},
    "float16": {"min_cc": "6.0", "bytes": 2, "note": "tensor cores from 7.0", "source": "S-VLLM-SDIST",
                "confidence": "verified"},
    "float32": {"min_cc": "0.0", "bytes": 4, "source": "S-VLLM-SDIST", "confidence": "verified"},
}
DTYPE_ALIASES = {"half": "float16", "fp16": "float16", "bf16": "bfloat16", "float": "float32",
                 "fp32": "float32"}

# KV cache dtypes (--kv-cache-dtype); "auto" follows the served dtype. ``bytes`` per element.
KV_CACHE_DTYPES = {
    "auto": {"bytes": None},
    "float16": {"bytes": 2},
    "bfloat16": {"bytes": 2},
    "fp8": {"bytes": 1},
    "fp8_e4m3": {"bytes": 1},
    "fp8_e5m2": {"bytes": 1},
    "fp8_inc": {"bytes": 1},
    "fp8_ds_mla": {"bytes": 1},
}

# The values each release's --kv-cache-dtype accepts (its CacheDType Literal; argparse rejects any
# other value before the engine starts). "since" semantics: a version gets the newest row at or
# below it; an unknown version gets "auto" only as the value every release takes.
KV_CACHE_DTYPES_BY_RELEASE = {
    "0.8.5": {"values": ["auto", "fp8", "fp8_e4m3", "fp8_e5m2"],
              "source": "vllm@0.8.5:vllm/config.py:1291 (CacheDType)", "confidence": "verified"},
    "0.19.1": {"values": ["auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"],
               "source": "vllm@0.19.1:vllm/config/cache.py:14-23 (CacheDType)", "confidence": "verified"},
    "0.20.0": {"values": ["auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla",
                          "turboquant_k8v4", "turboquant_4bit_nc"],
               "note": "the turboquant values are not modelled by the memory plan (treated like fp8 bytes: no)",
               "source": "vllm@0.20.0:vllm/config/cache.py:18-29 (CacheDType)", "confidence": "verified"},
}


def kv_cache_dtypes_for(table, version):
    """(values, release key) --kv-cache-dtype accepts in vLLM ``version`` (a tuple; None = unknown ->
    (None, None): every value is judged lenient)."""
    if version is None:
        return None, None
    rows = sorted(((parse_version(k), k) for k in table if parse_version(k)), key=lambda r: r[0] + (0,) * 8)
    chosen = None
    for parsed, key in rows:
        if compare_versions(version, parsed) >= 0:
            chosen = key
    if chosen is None and rows:
        chosen = rows[0][1]
    return (list(table[chosen]["values"]), chosen) if chosen else (None, None)


# Native FP8 GEMM and FP8 KV cache; the FP8 KV cache on sm_70 is not verified.
FP8_KV_CACHE_VERIFIED_MIN_CC = "8.0"

# ---------------------------------------------------------------------------------------------
# vLLM
# ---------------------------------------------------------------------------------------------
# Minimum compute capability per vLLM version ("since" version -> min CC). This is the one place
# the per-release minimum lives: VLLM_RELEASES[...]["min_cc"] (and so the image profiles'
# min_compute_capability) is derived from it by vllm_min_cc(); this "since" form also answers for
# versions the release table does not list, and a user may override it (policy option).
VLLM_MIN_COMPUTE_CAPABILITY = {
    "0.0.0": {"min_cc": "7.0", "source": "S-VLLM-SDIST (docs: 'compute capability 7.0 or higher', "
                                         "0.8.5 through 0.19.1)", "confidence": "verified"},
    "0.20.0": {"min_cc": "7.5", "source": "S-VLLM-SDIST (docs: 'compute capability 7.5 or higher')",
               "confidence": "verified"},
}

# Arch lists of the PyTorch CUDA wheels that vLLM images ship (TORCH_CUDA_ARCH_LIST of the wheel
# build); keys follow compat_matrix.yaml's pytorch_wheels_arch rows. A release names its wheel in
# ``torch_wheel``.
TORCH_WHEELS = {
    "2.6 cu124": {"arch": "5.0 6.0 7.0 7.5 8.0 8.6 9.0",
                  "note": "from the 2.7 cu126 build entry and 'the cu124 line ends at 2.6.0'",
                  "source": "S-PT-BUILD; S-FACTS-2.3", "confidence": "inferred"},
    "2.7 cu128": {"arch": "7.5 8.0 8.6 9.0 10.0 12.0", "note": "no sm_70 (vllm#19185: V100 'no kernel image')",
                  "source": "S-PT-ISSUES", "confidence": "verified"},
    "2.8 cu128": {"arch": "7.0 7.5 8.0 8.6 9.0 10.0 12.0", "source": "S-PT-BUILD; S-PT-ISSUES",
                  "confidence": "verified"},
    "2.8-2.10 cu129": {"arch": "7.0 7.5 8.0 8.6 9.0 10.0 12.0+PTX", "note": "libtorch drops 7.0",
                       "source": "S-PT-BUILD", "confidence": "verified"},
    "2.9+ cu130": {"arch": "7.5 8.0 8.6 9.0 10.0 12.0+PTX", "source": "S-PT-BUILD", "confidence": "verified"},
}

# Every name each release accepts for --quantization (QUANTIZATION_METHODS in
# vllm/model_executor/layers/quantization/__init__.py of the release source), in vLLM's spelling.
_QUANT_0_8_5 = [
    "aqlm", "awq", "deepspeedfp", "tpu_int8", "fp8", "ptpc_fp8", "fbgemm_fp8", "modelopt", "nvfp4", "marlin",
    "bitblas", "gguf", "gptq_marlin_24", "gptq_marlin", "gptq_bitblas", "awq_marlin", "gptq",
    "compressed-tensors", "bitsandbytes", "qqq", "hqq", "experts_int8", "neuron_quant", "ipex", "quark",
    "moe_wna16", "torchao",
]
_QUANT_0_19_1 = [
    "awq", "fp8", "fbgemm_fp8", "fp_quant", "modelopt", "modelopt_fp4", "modelopt_mxfp8", "modelopt_mixed",
    "gguf", "gptq_marlin", "awq_marlin", "gptq", "compressed-tensors", "bitsandbytes", "experts_int8", "quark",
    "moe_wna16", "torchao", "inc", "mxfp4", "mxfp8", "petit_nvfp4", "cpu_awq",
]
_QUANT_0_20_0 = [
    "awq", "fp8", "fbgemm_fp8", "fp_quant", "modelopt", "modelopt_fp4", "modelopt_mxfp8", "modelopt_mixed",
    "gguf", "gptq_marlin", "awq_marlin", "gptq", "humming", "compressed-tensors", "bitsandbytes",
    "experts_int8", "quark", "moe_wna16", "torchao", "inc", "mxfp4", "gpt_oss_mxfp4", "deepseek_v4_fp8",
    "cpu_awq", "online", "fp8_per_tensor", "fp8_per_block", "int8_per_channel_weight_only", "mxfp8",
]

# Known vllm/vllm-openai releases: the one table of per-release facts (_image.PROFILES is derived
# from it). Fields (absent = not recorded):
#   cuda_base      CUDA_VERSION of the release image (the nvidia/cuda base it is built on)
#   vllm_arch      vLLM's kernel arch list of the x86_64 release build (torch notation)
#   torch          torch version in the image; torch_cuda: its CUDA; torch_wheel: key of TORCH_WHEELS
#   python         Python of the image; entrypoint: the image's ENTRYPOINT
#   quantization_methods  the names the release accepts for --quantization
#   notes          what a user of the image should know
#   images         published tags: {"repo:tag": {tags, env_has_arch_list, digests, variant, ...}};
#                  ``variant`` overrides release fields for a variant image (e.g. a -cu129 build)
#   field_source / field_confidence  provenance per field where it differs from source/confidence
# Derived when this module loads (see _complete_releases): require_cuda (require_cuda_string of
# cuda_base), min_cc (vllm_min_cc of the version), torch_arch (TORCH_WHEELS[torch_wheel]).


def _field_source(version, **special):
    """field_source of a release read in its own sdist (S-SDIST-<version>): every field from there, but
    torch_arch (S-FACTS-2.3) and min_cc (S-DOCS), and what ``special`` names otherwise."""
    sdist = "S-SDIST-" + version
    fields = ("version", "cuda_base", "require_cuda", "vllm_arch", "torch", "torch_cuda", "torch_arch", "python",
              "entrypoint", "quantization_methods", "min_cc")
    found = dict((field, sdist) for field in fields)
    found.update(torch_arch="S-FACTS-2.3", min_cc="S-DOCS")
    found.update(special)
    return found


VLLM_RELEASES = {
    "0.6.3": {"cuda_base": "12.4.1", "torch": "2.4.0", "vllm_arch": "7.0 7.5 8.0 8.6 8.9 9.0+PTX",
              "entrypoint": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
              "source": "S-VLLM-SDIST", "confidence": "verified"},
    "0.7.3": {"cuda_base": "12.4.1", "torch": "2.5.1", "vllm_arch": "7.0 7.5 8.0 8.6 8.9 9.0+PTX",
              "source": "S-VLLM-SDIST", "confidence": "verified"},
    "0.8.5": {
        "cuda_base": "12.4.0", "torch": "2.6.0", "torch_cuda": "12.4", "torch_wheel": "2.6 cu124",
        "vllm_arch": "7.0 7.5 8.0 8.6 8.9 9.0+PTX", "python": "3.12",
        "entrypoint": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
        "quantization_methods": _QUANT_0_8_5,
        "notes": [
            "The Dockerfile's ARG CUDA_VERSION default is 12.4.1, but the release build passes "
            "--build-arg CUDA_VERSION=12.4.0, and an inspect of the published tag shows CUDA_VERSION=12.4.0.",
            "The final image sets no TORCH_CUDA_ARCH_LIST; vLLM's kernel arch list comes from the Dockerfile.",
            "On compute capability < 8.0 vLLM 0.8.5 runs the V0 engine with XFormers attention; do not set "
            "VLLM_USE_V1=1.",
            "The last release whose image is CUDA 12.4.",
        ],
        "images": {"vllm/vllm-openai:v0.8.5": {"tags": ["v0.8.5"], "env_has_arch_list": False}},
        "field_source": _field_source("0.8.5", cuda_base="S-SDIST-0.8.5; S-INSPECT-0.8.5",
                                      require_cuda="S-INSPECT-0.8.5; S-CUDA-12.4",
                                      torch_cuda="S-SDIST-0.8.5 (torch==2.6.0 from PyPI)"),
        "field_confidence": {"torch_cuda": "inferred", "torch_arch": "inferred"},
        "source": "S-VLLM-SDIST; S-SDIST-0.8.5; S-INSPECT-0.8.5", "confidence": "verified",
    },
    "0.9.0": {"cuda_base": "12.8.1", "torch": "2.7.0", "torch_wheel": "2.7 cu128",
              "vllm_arch": "7.0 7.5 8.0 8.9 9.0 10.0+PTX",
              "notes": ["torch 2.7 cu128 has no sm_70 (vllm#19185)"],
              "source": "S-VLLM-SDIST; S-PT-ISSUES", "confidence": "inferred"},
    "0.9.2": {"cuda_base": "12.8.1", "torch": "2.7.0", "torch_wheel": "2.7 cu128",
              "vllm_arch": "7.0 7.5 8.0 8.9 9.0 10.0 12.0", "notes": ["torch 2.7 cu128 has no sm_70"],
              "source": "S-VLLM-SDIST; S-PT-ISSUES", "confidence": "inferred"},
    "0.10.1.1": {"cuda_base": "12.8.1", "torch": "2.7.1", "torch_wheel": "2.7 cu128",
                 "vllm_arch": "7.0 7.5 8.0 8.9 9.0 10.0 12.0", "notes": ["torch 2.7 cu128 has no sm_70"],
                 "source": "S-VLLM-SDIST; S-PT-ISSUES", "confidence": "inferred"},
    "0.10.2": {"cuda_base": "12.8.1", "torch": "2.8.0", "vllm_arch": "7.0 7.5 8.0 8.9 9.0 10.0 12.0",
               "source": "S-VLLM-SDIST", "confidence": "verified"},
    "0.11.0": {"cuda_base": "12.8.1", "torch": "2.8.0",
               "entrypoint": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
               "source": "S-VLLM-SDIST", "confidence": "verified"},
    "0.11.1": {"cuda_base": "12.9.1", "torch": "2.9.0", "entrypoint": ["vllm", "serve"],
               "source": "S-VLLM-SDIST", "confidence": "verified"},
    "0.16.0": {"cuda_base": "12.9.1", "torch": "2.9.1", "source": "collect_env (third-party copies)",
               "confidence": "third_party"},
    "0.19.1": {
        "cuda_base": "12.9.1", "torch": "2.10.0", "torch_cuda": "12.9", "torch_wheel": "2.8-2.10 cu129",
        "vllm_arch": "7.0 7.5 8.0 8.9 9.0 10.0 12.0", "python": "3.12", "entrypoint": ["vllm", "serve"],
        "quantization_methods": _QUANT_0_19_1,
        "notes": [
            "The last vLLM release line whose docs name compute capability 7.0 (V100).",
            "The image sets VLLM_ENABLE_CUDA_COMPATIBILITY=0: the bundled cuda-compat libraries are opt-in.",
            "--swap-space was removed in 0.18.0.",
            "The aarch64 half of the tag is built for 8.7 8.9 9.0 10.0+PTX 12.0; this profile is the x86_64 one.",
        ],
        "images": {"vllm/vllm-openai:v0.19.1": {"tags": ["v0.19.1", "v0.19.1-x86_64"], "env_has_arch_list": True}},
        "field_source": _field_source("0.19.1", require_cuda="S-ENV-0.16.0 (same nvidia/cuda 12.9.1 base)",
                                      torch_cuda="S-SDIST-0.19.1 (cu129 index)"),
        "field_confidence": {"require_cuda": "inferred", "torch_arch": "inferred", "python": "inferred"},
        "source": "S-VLLM-SDIST; S-SDIST-0.19.1", "confidence": "verified",
    },
    "0.20.0": {
        "cuda_base": "13.0.2", "torch": "2.11.0", "torch_cuda": "13.0", "torch_wheel": "2.9+ cu130",
        "vllm_arch": "7.5 8.0 8.6 8.9 9.0 10.0 12.0+PTX",
        "vllm_arch_dockerfile": "7.5 8.0 8.6 8.9 9.0 10.0 11.0 12.0+PTX",
        "python": "3.12", "entrypoint": ["vllm", "serve"], "quantization_methods": _QUANT_0_20_0,
        "notes": [
            "The first release without Volta: CUDA 13 cannot build sm_70 and the docs say compute capability 7.5.",
            "The release build passes CUDA_ARCH_X86='7.5 8.0 8.6 8.9 9.0 10.0 12.0+PTX'; the Dockerfile default "
            "(with 11.0) applies to other builds.",  # see vllm_arch_dockerfile
        ],
        "images": {
            "vllm/vllm-openai:v0.20.0": {"tags": ["v0.20.0", "v0.20.0-x86_64"], "env_has_arch_list": True},
            "vllm/vllm-openai:v0.20.0-cu129": {
                "tags": ["v0.20.0-cu129", "v0.20.0-x86_64-cu129"], "env_has_arch_list": True,
                "variant": {"cuda_base": "12.9.1", "vllm_arch": "7.5 8.0 8.6 8.9 9.0 10.0 12.0", "torch_cuda": "12.9",
                            "torch_wheel": None, "notes": [
                                "The CUDA 12.9 variant of 0.20.0 still has no sm_70 kernels (CUDA_ARCH_X86_CU129 "
                                "starts at 7.5)."]},
                "field_source": {"require_cuda": "S-ENV-0.16.0 (same nvidia/cuda 12.9.1 base)",
                                 "torch_cuda": "S-SDIST-0.20.0", "torch_arch": "unknown"},
                "field_confidence": {"torch_arch": "unknown"},
            },
        },
        "field_source": _field_source("0.20.0", require_cuda="S-ENV-0.23.0 (same nvidia/cuda 13.0.2 base)",
                                      torch_cuda="S-SDIST-0.20.0 (cu130 index)"),
        "field_confidence": {"require_cuda": "inferred", "python": "inferred"},
        "source": "S-VLLM-SDIST; S-SDIST-0.20.0", "confidence": "verified",
    },
}

# The releases whose torch wheel lacks sm_70 although vLLM's own list has it: [from, to] inclusive.
# ``range`` and ``torch_arch`` are derived from VLLM_RELEASES and TORCH_WHEELS (_complete_releases).
TORCH_WITHOUT_SM70 = {
    "range": None,
    "torch_arch": None,
    "note": "images ship torch 2.7.x cu128 (TORCH_CUDA_ARCH_LIST 7.5;8.0;8.6;9.0;10.0;12.0); "
            "vllm#19185 reports 'no kernel image' on a V100",
    "source": "S-PT-ISSUES; S-VLLM-SDIST", "confidence": "inferred",
}

# ---------------------------------------------------------------------------------------------
# Quantization methods: the minimum compute capability per vLLM version (the value applies from
# that version on; a version between two listed ones gets the lower of the two, a version before
# the first gets the first; an unknown version gets the lowest listed). ``bytes_per_param``: an
# estimate of the weight bytes per parameter, used only when the model's weight_bytes is unknown.
# ---------------------------------------------------------------------------------------------


def _q(label, min_cc_0_8_5, min_cc_0_19_1, bytes_per_param, source="S-VLLM-QUANT",
       confidence="verified", aliases=None, note=None, act_dtypes=None):
    entry = {"label": label, "min_cc": {}, "bytes_per_param": bytes_per_param, "source": source,
             "confidence": confidence}
    if act_dtypes is not None:
        # The serving dtypes the method runs with (get_supported_act_dtypes), per release ("since"
        # keys); vLLM refuses any other dtype when it builds the quantization config (S-VLLM-ACTDTYPE).
        entry["act_dtypes"] = act_dtypes if isinstance(act_dtypes, dict) else {"0.8.5": list(act_dtypes)}
        entry["field_source"] = {"act_dtypes": "S-VLLM-ACTDTYPE"}
        entry["field_confidence"] = {"act_dtypes": "verified"}
    if min_cc_0_8_5 is not None:
        entry["min_cc"]["0.8.5"] = min_cc_0_8_5
    if min_cc_0_19_1 is not None:
        entry["min_cc"]["0.19.1"] = min_cc_0_19_1
    if aliases:
        entry["aliases"] = list(aliases)
    if note:
        entry["note"] = note
    return entry


_F16 = ["float16"]
_F16_BF16 = ["float16", "bfloat16"]
_ALL_DTYPES = ["float16", "bfloat16", "float32"]

QUANTIZATION = {
    "gptq": dict(_q("GPTQ (exllama kernels)", "6.0", "6.0", 0.52, act_dtypes=_F16,
                    note="4-bit g128 estimate: 0.5 B/param + scales and zeros"),
                 # The group sizes its 4-bit kernels compute right: multiples of this many rows
                 # (the gate refuses others with QUANT_GROUP_SIZE_UNSUPPORTED).
                 group_size_multiple=32,
                 field_source={"act_dtypes": "S-VLLM-ACTDTYPE", "group_size_multiple": "S-VLLM-EXLLAMA"},
                 field_confidence={"act_dtypes": "verified", "group_size_multiple": "inferred"}),
    "gptq_marlin": _q("GPTQ Marlin", "8.0", "7.5", 0.52, act_dtypes=_F16_BF16),
    "awq_marlin": _q("AWQ Marlin", "8.0", "7.5", 0.52, act_dtypes=_F16_BF16),
    "marlin": _q("Marlin", "8.0", "7.5", 0.52, act_dtypes=_F16),
    "awq": _q("AWQ", "7.5", "7.5", 0.52, act_dtypes=_F16),
    "gguf": _q("GGUF", "6.0", "6.0", 0.6, note="bytes_per_param: ~4.8-bit K-quants estimate",
               act_dtypes={"0.8.5": _ALL_DTYPES, "0.19.1": ["float16", "float32"]}),
    "bitsandbytes": _q("bitsandbytes", "7.0", "7.0", 0.53, act_dtypes=_ALL_DTYPES),
    "moe_wna16": _q("MoE WNA16", "7.0", "7.0", 0.52, act_dtypes=_F16_BF16),
    "fp8": _q("FP8 (incl. Marlin weight-only)", "8.0", "7.5", 1.0, act_dtypes=_F16_BF16),
    "fbgemm_fp8": _q("FBGEMM FP8", "8.0", "8.0", 1.0, act_dtypes=_F16_BF16),
    "experts_int8": _q("experts INT8", "8.0", "8.0", 1.0, act_dtypes=_F16_BF16),
    "modelopt": _q("ModelOpt FP8", "8.9", "8.9", 1.0, act_dtypes=_F16_BF16),
    "modelopt_fp4": _q("ModelOpt NVFP4", "10.0", "7.5", 0.5625, aliases=["nvfp4"],
                       note="registered as 'nvfp4' in 0.8.5, 'modelopt_fp4' in 0.19.1; "
                            "0.5 B/param + one fp8 scale per 16 weights"),
    "compressed_tensors": _q("compressed-tensors", "7.0", "7.0", None,
                             act_dtypes={"0.8.5": _F16_BF16, "0.19.1": _ALL_DTYPES},
                             note="the config needs 7.0; every scheme needs more (see "
                                  "COMPRESSED_TENSORS_SCHEMES)"),
}

# Checkpoint spellings of a method name that vLLM registers under another name (canonical form,
# matched after aliases; an entry ending in "*" is a prefix): (spelling, QUANTIZATION key).
QUANT_SPELLINGS = (
    ("fp4", "modelopt_fp4"),
    ("modelopt_nvfp4", "modelopt_fp4"),
    ("nvfp4*", "modelopt_fp4"),
)

# compressed-tensors schemes (the names model_facts reports as quant_scheme): the minimum compute
# capability of each scheme's get_min_capability() per release, checked by
# CompressedTensorsConfig._check_scheme_supported when the layer is created (model load), so a
# verdict "allowed" with a scheme the GPU lacks is a startup failure. ``null`` for a release: the
# release has no such scheme ("No compressed-tensors compatible scheme was found"). ``fallback``:
# the scheme vLLM picks instead when the GPU is below min_cc (w8a8 FP8 -> w8a16 FP8 Marlin).
# ``unchecked``: the scheme's own check passes everywhere; its kernel is picked at load.
_CT_085 = "vllm@0.8.5:vllm/model_executor/layers/quantization/compressed_tensors/"
_CT_191 = "vllm@0.19.1:vllm/model_executor/layers/quantization/compressed_tensors/"
COMPRESSED_TENSORS_SCHEMES = {
    "wna16": {"label": "WNA16 (int4/int8 weights, 16-bit activations; Marlin)",
              "min_cc": {"0.8.5": "8.0", "0.19.1": "7.5"},
              "source": _CT_085 + "schemes/compressed_tensors_wNa16.py:68-70; " + _CT_191
              + "schemes/compressed_tensors_wNa16.py (get_min_capability 75)", "confidence": "verified"},
    "w8a16_fp8": {"label": "W8A16 FP8 (FP8 weights, Marlin)", "min_cc": {"0.8.5": "8.0", "0.19.1": "7.5"},
                  "source": _CT_085 + "schemes/compressed_tensors_w8a16_fp8.py:32-34; " + _CT_191
                  + "schemes/compressed_tensors_w8a16_fp8.py (75)", "confidence": "verified"},
    "w8a8_fp8": {"label": "W8A8 FP8", "min_cc": {"0.8.5": "8.9", "0.19.1": "8.9"}, "fallback": "w8a16_fp8",
                 "source": _CT_085 + "schemes/compressed_tensors_w8a8_fp8.py:31-33 and compressed_tensors.py:335-347 "
                 "(falls back to W8A16 FP8 below 8.9); " + _CT_191 + "compressed_tensors.py:630",
                 "confidence": "verified"},
    "w8a8_int8": {"label": "W8A8 INT8", "min_cc": {"0.8.5": "7.5", "0.19.1": "7.5"},
                  "source": _CT_085 + "schemes/compressed_tensors_w8a8_int8.py:31-33; " + _CT_191
                  + "schemes/compressed_tensors_w8a8_int8.py (75)", "confidence": "verified"},
    "nvfp4": {"label": "NVFP4 (W4A4 / W4A16 FP4)", "min_cc": {"0.8.5": None, "0.19.1": "7.5"},
              "source": _CT_085 + "compressed_tensors.py:312-378 (no FP4 scheme; NotImplementedError 'No "
              "compressed-tensors compatible scheme was found'); " + _CT_191
              + "schemes/compressed_tensors_w4a4_nvfp4.py, compressed_tensors_w4a16_nvfp4.py (75)",
              "confidence": "verified"},
    "w4a16_mxfp4": {"label": "W4A16 MXFP4", "min_cc": {"0.8.5": None, "0.19.1": "8.0"},
                    "source": _CT_191 + "schemes/compressed_tensors_w4a16_mxfp4.py (80)", "confidence": "verified"},
    "w4a8_fp8": {"label": "W4A8 FP8", "min_cc": {"0.8.5": None, "0.19.1": "9.0"},
                 "source": _CT_191 + "schemes/compressed_tensors_w4a8_fp8.py (90)", "confidence": "verified"},
    "w4a8_int": {"label": "W4A8 INT", "min_cc": {"0.8.5": None, "0.19.1": None}, "unchecked": ["0.19.1"],
                 "source": _CT_191 + "schemes/compressed_tensors_w4a8_int.py:56-57 (returns 1: kernel chosen "
                 "at load)", "confidence": "verified"},
    "sparse_2of4": {"label": "2:4 sparse (CompressedTensors24)", "min_cc": {"0.8.5": "9.0", "0.19.1": None},
                    "source": _CT_085 + "schemes/compressed_tensors_24.py:48-50; " + _CT_191
                    + "schemes/compressed_tensors_24.py:30-31 ('Sparse24 models are no longer supported')",
                    "confidence": "verified"},
}


def ct_scheme_need(entry, version):
    """What a compressed-tensors scheme needs in vLLM ``version``: ("cc", (maj, min)), ("absent", None)
    (the release has no such scheme), ("unchecked", None) or ("unknown", None) (version unknown and the
    releases differ). A version between two rows gets the older row (the row at or below it)."""
    rows = sorted(((parse_version(k), k) for k in entry.get("min_cc", {}) if parse_version(k)),
                  key=lambda r: r[0] + (0,) * 8)
    if not rows:
        return "unknown", None
    if version is None:
        values = set(entry["min_cc"][k] for _p, k in rows)
        if len(values) != 1:
            return "unknown", None
        chosen = rows[0][1]
    else:
        chosen = rows[0][1]
        for parsed, key in rows:
            if compare_versions(version, parsed) >= 0:
                chosen = key
    if chosen in (entry.get("unchecked") or []):
        return "unchecked", None
    value = entry["min_cc"][chosen]
    if value is None:
        return "absent", None
    return "cc", parse_cc(value)


# ---------------------------------------------------------------------------------------------
# Per-release behaviour: where the releases of VLLM_RELEASES behave differently at startup
# ---------------------------------------------------------------------------------------------
# One row per release of VLLM_RELEASES (test_gate_release_behaviour keeps the keys equal), one cell per behaviour
# the gate judges by release; each cell is {value, source, confidence} (confidence as above: a
# cell is "verified" only where the rule was read in that release's source, or in facts.md for
# it; "inferred" cells carry the file to read). The rules that read it: _gate_rules_memory
# (memory_profile), _gate_rules_vllm (dtype_auto, quant_marlin), _gate_rules_driver
# (forward_compat). docs/deploy_gate.md "Each release as it behaves" is rendered from it
# (render_release_behaviour_markdown).
#
# memory_profile: the engine and the profile run vLLM sizes the KV cache with
#   engine        v0: the V0 engine only; v1_from_8_0: V1 on compute capability 8.0 and up, V0
#                 below (_is_v1_supported_oracle); v1: V1 on every GPU
#   line          the release whose profile run _vllm_memory models for it (0.8.5 or 0.19.1)
#   v0_chunked_tokens  V0's max_num_batched_tokens with chunked prefill (on by default only above
#                 32768 tokens); without it V0 profiles max(max_model_len, 2048) tokens in one pass
# dtype_auto: what --dtype auto serves in
#   rule          checkpoint: config.json's torch_dtype (float32 -> float16), whatever the GPU
#                 supports (bfloat16 below 8.0 then raises); platform: the checkpoint's dtype when
#                 the GPU supports it and the model allows it, else the first supported dtype the
#                 model allows (float32 -> that first dtype too)
#   bfloat16_model_types          (checkpoint) model types auto serves in bfloat16 whatever the config
#   float32_bfloat16_model_types  (checkpoint) model types whose float32 config becomes bfloat16
#   float16_refused_model_types   (platform) model types float16 is refused for (explicit or auto)
# quant_marlin: a GPTQ / AWQ checkpoint served by gptq_marlin / awq_marlin (float16 and bfloat16)
#   instead of gptq / awq (float16 only) when --quantization is unset (or names the Marlin method
#   or "marlin") and the GPU meets the Marlin method's minimum compute capability (policy
#   quantization, per release); per method: the bit widths, the config keys that must hold
#   (sym true; desc_act only declared; zero_point true), the group sizes (MARLIN_SUPPORTED_GROUP_SIZES)
# forward_compat: how the image's cuda-compat libraries come into play when the driver is older
#   compat_libs   build: wired in when the image is built (ldconfig), used whenever the driver is
#                 older; opt_in: only with the environment variable ``env`` set to 1
_GROUPS_MARLIN = [-1, 32, 64, 128]
_MARLIN_CONVERSION = {
    "gptq": {"to": "gptq_marlin", "bits": [4, 8], "require": {"sym": True}, "declared": ["desc_act"],
             "group_sizes": _GROUPS_MARLIN, "user_values": ["gptq_marlin", "marlin"]},
    "awq": {"to": "awq_marlin", "bits": [4], "require": {"zero_point": True}, "declared": [],
            "group_sizes": _GROUPS_MARLIN, "user_values": ["awq_marlin", "marlin"]},
}
_FLOAT16_REFUSED = ["gemma2", "gemma3", "gemma3_text", "plamo2", "glm4"]


def _at(version, path):
    """'vllm@0.8.5:vllm/config.py' (a file of that release's source tree)."""
    return "vllm@%s:%s" % (version, path)


def _cell(value, source, confidence):
    return {"value": value, "source": source, "confidence": confidence}


def _memory_cell(version, engine, line, chunked_tokens=2048):
    """An inferred memory_profile cell: the engine from S-FACTS-3.2 where it says, the profile run
    taken from ``line``'s sources."""
    value = {"engine": engine, "line": line, "v0_chunked_tokens": chunked_tokens}
    if engine == "v0":
        why = "%s (no V1 engine by default)" % _at(version, "vllm/envs.py VLLM_USE_V1")
    elif engine == "v1_from_8_0":
        why = ("S-FACTS-3.2: %s _is_v1_supported_oracle falls back to V0 below compute capability 8.0"
               % _at(version, "vllm/engine/arg_utils.py"))
    else:
        why = "S-FACTS-3.2: V1 on every compute capability from 0.10.2, V0 removed in 0.11.0"
    worker = "vllm/worker/worker.py determine_num_available_blocks" if line == "0.8.5" else \
        "vllm/v1/worker/gpu_worker.py determine_available_memory"
    return _cell(value, "%s; profile run not read for this release, modelled from %s (S-VLLM-PROFILE; to check: %s)"
                 % (why, _at(line, worker), _at(version, "vllm/engine/arg_utils.py") + " defaults"), "inferred")


def _dtype_cell(version, rule, config_path="vllm/config.py"):
    """An inferred dtype_auto cell."""
    if rule == "checkpoint":
        value = {"rule": "checkpoint", "bfloat16_model_types": [], "float32_bfloat16_model_types": ["gemma2"]}
        source = ("%s _get_and_verify_dtype (auto keeps config.json's torch_dtype, float32 becomes float16, "
                  "gemma2's float32 bfloat16); %s _check_if_gpu_supports_dtype (bfloat16 below 8.0 raises)"
                  % (_at(version, config_path), _at(version, "vllm/worker/worker.py")))
    else:
        value = {"rule": "platform", "float16_refused_model_types": list(_FLOAT16_REFUSED)}
        source = ("%s ModelConfig._get_and_verify_dtype / _resolve_auto_dtype with %s supported_dtypes "
                  "(vLLM's 'Auto fallback to float16 for pre-Ampere GPUs when detected bfloat16 config', "
                  "first in 0.9.0; the float16-refused model types as read in 0.19.1)"
                  % (_at(version, config_path), _at(version, "vllm/platforms/cuda.py")))
    return _cell(value, source, "inferred")


def _quant_cell(version, config_path="vllm/config.py"):
    """A quant_marlin cell (the conversion rule is inferred in every release; the minimum compute
    capability is the policy's quantization table, S-VLLM-QUANT)."""
    layers = "vllm/model_executor/layers/quantization/"
    return _cell(_MARLIN_CONVERSION, "%s GPTQMarlinConfig.override_quantization_method, is_gptq_marlin_compatible; "
                 "%s AWQMarlinConfig.override_quantization_method, is_awq_marlin_compatible; %s check_marlin_supported; "
                 "%s ModelConfig._verify_quantization; minimum compute capability: policy quantization (S-VLLM-QUANT)"
                 % (_at(version, layers + "gptq_marlin.py"), _at(version, layers + "awq_marlin.py"),
                    _at(version, layers + "utils/marlin_utils.py"), _at(version, config_path)), "inferred")


def _compat_cell(version, kind, confidence, dockerfile="docker/Dockerfile"):
    """A forward_compat cell."""
    if kind == "build":
        return _cell({"compat_libs": "build"}, "S-FACTS-3.3: %s 'RUN ldconfig /usr/local/cuda-X.Y/compat/' (read up "
                     "to 0.13.0)" % _at(version, dockerfile), confidence)
    return _cell({"compat_libs": "opt_in", "env": "VLLM_ENABLE_CUDA_COMPATIBILITY"},
                 "S-FACTS-3.3: from 0.17.0 %s sets ENV VLLM_ENABLE_CUDA_COMPATIBILITY=0 and vllm/env_override.py "
                 "loads the compat libraries only with =1" % _at(version, dockerfile), confidence)


RELEASE_BEHAVIOUR = {
    "0.6.3": {
        "memory_profile": _cell(
            {"engine": "v0", "line": "0.8.5", "v0_chunked_tokens": 512},
            "no V1 engine in 0.6.3 (it first ships, opt-in, in 0.7.0); %s create_engine_config (chunked prefill "
            "on by default only above 32768 tokens); %s SchedulerConfig (max(max_model_len, 2048) tokens, 512 "
            "with chunked prefill); profile run as 0.8.5's V0 (S-VLLM-PROFILE)"
            % (_at("0.6.3", "vllm/engine/arg_utils.py"), _at("0.6.3", "vllm/config.py")), "inferred"),
        "dtype_auto": _dtype_cell("0.6.3", "checkpoint"),
        "quant_marlin": _quant_cell("0.6.3"),
        "forward_compat": _compat_cell("0.6.3", "build", "verified", "Dockerfile"),
    },
    "0.7.3": {
        "memory_profile": _memory_cell("0.7.3", "v0", "0.8.5"),
        "dtype_auto": _dtype_cell("0.7.3", "checkpoint"),
        "quant_marlin": _quant_cell("0.7.3"),
        "forward_compat": _compat_cell("0.7.3", "build", "verified", "Dockerfile"),
    },
    "0.8.5": {
        "memory_profile": _cell(
            {"engine": "v1_from_8_0", "line": "0.8.5", "v0_chunked_tokens": 2048},
            "%s:1106-1121,1350-1356 (V1 only from compute capability 8.0), :1501-1563 (V0 defaults), "
            ":1565-1627 (V1 defaults); %s:68,1967-1984 (SchedulerConfig); %s:1233-1237 (profile_run); "
            "S-VLLM-PROFILE, S-FACTS-3.2" % (_at("0.8.5", "vllm/engine/arg_utils.py"), _at("0.8.5", "vllm/config.py"),
                                             _at("0.8.5", "vllm/worker/model_runner.py")), "verified"),
        "dtype_auto": _cell(
            {"rule": "checkpoint", "bfloat16_model_types": ["plamo2"], "float32_bfloat16_model_types": []},
            "%s:2903-2914 (_get_and_verify_dtype); %s:546 (bfloat16 below 8.0 raises '... --dtype=half'); "
            "S-FACTS-3.2" % (_at("0.8.5", "vllm/config.py"), _at("0.8.5", "vllm/worker/worker.py")), "verified"),
        "quant_marlin": _quant_cell("0.8.5"),
        "forward_compat": _compat_cell("0.8.5", "build", "verified"),
    },
    "0.9.0": {
        "memory_profile": _memory_cell("0.9.0", "v1_from_8_0", "0.8.5"),
        "dtype_auto": _dtype_cell("0.9.0", "platform"),
        "quant_marlin": _quant_cell("0.9.0"),
        "forward_compat": _compat_cell("0.9.0", "build", "verified"),
    },
    "0.9.2": {
        "memory_profile": _memory_cell("0.9.2", "v1_from_8_0", "0.8.5"),
        "dtype_auto": _dtype_cell("0.9.2", "platform"),
        "quant_marlin": _quant_cell("0.9.2"),
        "forward_compat": _compat_cell("0.9.2", "build", "verified"),
    },
    "0.10.1.1": {
        "memory_profile": _memory_cell("0.10.1.1", "v1_from_8_0", "0.19.1"),
        "dtype_auto": _dtype_cell("0.10.1.1", "platform"),
        "quant_marlin": _quant_cell("0.10.1.1"),
        "forward_compat": _compat_cell("0.10.1.1", "build", "verified"),
    },
    "0.10.2": {
        "memory_profile": _memory_cell("0.10.2", "v1", "0.19.1"),
        "dtype_auto": _dtype_cell("0.10.2", "platform"),
        "quant_marlin": _quant_cell("0.10.2"),
        "forward_compat": _compat_cell("0.10.2", "build", "verified"),
    },
    "0.11.0": {
        "memory_profile": _memory_cell("0.11.0", "v1", "0.19.1"),
        "dtype_auto": _dtype_cell("0.11.0", "platform", "vllm/config/model.py"),
        "quant_marlin": _quant_cell("0.11.0", "vllm/config/model.py"),
        "forward_compat": _compat_cell("0.11.0", "build", "verified"),
    },
    "0.11.1": {
        "memory_profile": _memory_cell("0.11.1", "v1", "0.19.1"),
        "dtype_auto": _dtype_cell("0.11.1", "platform", "vllm/config/model.py"),
        "quant_marlin": _quant_cell("0.11.1", "vllm/config/model.py"),
        "forward_compat": _compat_cell("0.11.1", "build", "verified"),
    },
    "0.16.0": {
        "memory_profile": _memory_cell("0.16.0", "v1", "0.19.1"),
        "dtype_auto": _dtype_cell("0.16.0", "platform", "vllm/config/model.py"),
        "quant_marlin": _quant_cell("0.16.0", "vllm/config/model.py"),
        "forward_compat": _compat_cell("0.16.0", "build", "inferred"),
    },
    "0.19.1": {
        "memory_profile": _cell(
            {"engine": "v1", "line": "0.19.1", "v0_chunked_tokens": None},
            "%s:2024-2105,2107-2114,2180-2230 (defaults, chunked prefill on); %s:384-421 (determine_available_memory); "
            "S-VLLM-PROFILE" % (_at("0.19.1", "vllm/engine/arg_utils.py"), _at("0.19.1", "vllm/v1/worker/gpu_worker.py")),
            "verified"),
        "dtype_auto": _cell(
            {"rule": "platform", "float16_refused_model_types": list(_FLOAT16_REFUSED)},
            "%s:1922 (_check_valid_dtype), :1929-1970 (_resolve_auto_dtype); %s:141-150 (supported_dtypes), :474 "
            "(explicit bfloat16 below 8.0 raises); S-FACTS-3.2" % (_at("0.19.1", "vllm/config/model.py"),
                                                                   _at("0.19.1", "vllm/platforms/cuda.py")), "verified"),
        "quant_marlin": _quant_cell("0.19.1", "vllm/config/model.py"),
        "forward_compat": _compat_cell("0.19.1", "opt_in", "verified"),
    },
    "0.20.0": {
        "memory_profile": _memory_cell("0.20.0", "v1", "0.19.1"),
        "dtype_auto": _dtype_cell("0.20.0", "platform", "vllm/config/model.py"),
        "quant_marlin": _quant_cell("0.20.0", "vllm/config/model.py"),
        "forward_compat": _compat_cell("0.20.0", "opt_in", "inferred"),
    },
}

# What vLLM says when the KV cache left after the profile run cannot hold one max_model_len
# sequence, per engine ({max_len}, {tokens}: the KV cache in tokens; {needed}, {available}: GiB).
KV_CACHE_TOO_SMALL = {
    "v0": {"text": "The model's max seq len ({max_len}) is larger than the maximum number of tokens that can be "
                   "stored in KV cache ({tokens}). Try increasing `gpu_memory_utilization` or decreasing "
                   "`max_model_len` when initializing the engine.",
           "source": "vllm@0.8.5:vllm/worker/worker.py:559-570 (raise_if_cache_size_invalid; the doctor's "
                     "oom_cache_v0); the V0 worker of 0.6.3 and 0.7.3 is taken to say the same (inferred)",
           "confidence": "verified"},
    "v1": {"text": "To serve at least one request with the models's max seq len ({max_len}), ({needed} GiB KV "
                   "cache is needed, which is larger than the available KV cache memory ({available} GiB).",
           "source": "vllm@0.8.5:vllm/v1/core/kv_cache_utils.py:526-552; vllm@0.19.1:vllm/v1/core/kv_cache_utils.py:"
                     "619-648 (check_enough_kv_cache_memory; the doctor's oom_cache_v1 read 'To serve at least one "
                     "request ... KV cache is needed, which is larger than the available KV cache memory'; the rest "
                     "of the wording is inferred)",
           "confidence": "inferred"},
}

# The release an image of unknown version is judged as (no warning when the image gives no
# version; VLLM_VERSION_UNKNOWN when it gives one that does not parse): the reference
# deployment's release (S-REFDEPLOY), which the memory model assumed for an unknown version before.
RELEASE_BEHAVIOUR_DEFAULT = "0.8.5"

RELEASE_BEHAVIOUR_KINDS = ("memory_profile", "dtype_auto", "quant_marlin", "forward_compat")


def release_behaviour(table, version):
    """(key, row, how) of the release-behaviour row that judges vLLM ``version`` (a tuple or None).

    ``how``: None (the release's own row), "line" (no row of its own: the row of its minor line,
    e.g. 0.8.4 -> 0.8.5, the newest at or below it when the line has several), "older" (the newest
    row below it), "oldest" (older than every row: the oldest) or "default" (version unknown:
    RELEASE_BEHAVIOUR_DEFAULT). Behaviour changes between minor lines, rarely within one.
    """
    rows = sorted(((parse_version(k), k) for k in table if parse_version(k)), key=lambda r: r[0] + (0,) * 8)
    if version is None or not rows:
        key = RELEASE_BEHAVIOUR_DEFAULT if RELEASE_BEHAVIOUR_DEFAULT in table else (rows[0][1] if rows else None)
        return key, table.get(key), "default"
    for parsed, key in rows:
        if compare_versions(parsed, version) == 0:
            return key, table[key], None
    line = [(p, k) for p, k in rows if tuple(p[:2]) == tuple(version[:2])]
    if line:
        below = [k for p, k in line if compare_versions(p, version) < 0]
        key = below[-1] if below else line[0][1]
        return key, table[key], "line"
    below = [k for p, k in rows if compare_versions(p, version) < 0]
    if below:
        return below[-1], table[below[-1]], "older"
    return rows[0][1], table[rows[0][1]], "oldest"


def supported_dtypes(cc, dtypes=None):
    """The dtypes a CUDA GPU of compute capability ``cc`` computes in, preferred first (vLLM's
    CudaPlatform.supported_dtypes: bfloat16, float16, float32 from 8.0; float16, float32 from 6.0;
    derived from DTYPES' min_cc)."""
    dtypes = DTYPES if dtypes is None else dtypes
    return [name for name in ("bfloat16", "float16", "float32")
            if name in dtypes and parse_cc(dtypes[name]["min_cc"]) is not None
            and not cc < parse_cc(dtypes[name]["min_cc"])]


def resolve_auto_dtype(rule, model_type, config_dtype, cc, dtypes=None):
    """What ``--dtype auto`` serves in, by a release's dtype_auto cell value ``rule``: (dtype or None, why).

    config_dtype: config.json's torch_dtype ("float16", "bfloat16", "float32"; None: unknown);
    cc: the GPU's compute capability tuple (None: unknown). None when it cannot be told.
    """
    if rule.get("rule") == "platform":
        if cc is None:
            return None, "the GPU is unknown"
        supported = [d for d in supported_dtypes(cc, dtypes) if not (
            d == "float16" and model_type in rule.get("float16_refused_model_types", []))]
        if not supported:
            return None, "no dtype is supported"
        preferred = supported[0]
        if config_dtype in (None, "float32") and (config_dtype == "float32" or "bfloat16" not in supported):
            # A float32 config is cast to the preferred dtype; an unknown one ends there too on a GPU
            # without bfloat16 (every dtype it could ask for falls back to the preferred one).
            return preferred, "%s, so the first dtype the GPU supports%s" % (
                "a float32 checkpoint is cast" if config_dtype == "float32" else "any checkpoint dtype falls back",
                " that %s allows" % model_type if model_type in rule.get("float16_refused_model_types", []) else "")
        if config_dtype is None:
            return None, "the checkpoint's dtype is unknown"
        if config_dtype in supported:
            return config_dtype, "the checkpoint's dtype"
        return preferred, "%s, so the first dtype the GPU supports%s" % (
            "float16 is refused for %s" % model_type if config_dtype == "float16" and "float16" in supported_dtypes(
                cc, dtypes) else "the GPU lacks the checkpoint's %s" % config_dtype,
            " that %s allows" % model_type if model_type in rule.get("float16_refused_model_types", []) else "")
    if model_type in rule.get("bfloat16_model_types", []):
        return "bfloat16", "always bfloat16 for %s" % model_type
    if config_dtype == "float32":
        if model_type in rule.get("float32_bfloat16_model_types", []):
            return "bfloat16", "float32 becomes bfloat16 for %s" % model_type
        return "float16", "float32 becomes float16"
    if config_dtype is None:
        return None, "the checkpoint's dtype is unknown"
    return config_dtype, "the checkpoint's dtype"


def describe_behaviour(kind, value):
    """One line that says what a release-behaviour cell means (docs and the gate's warnings)."""
    if kind == "memory_profile":
        engine = {"v0": "the V0 engine only", "v1": "the V1 engine",
                  "v1_from_8_0": "V1 from compute capability 8.0, V0 below"}.get(value.get("engine"), "?")
        chunked = value.get("v0_chunked_tokens")
        v0 = (", V0 profiles max(max_model_len, 2048) tokens in one pass (chunked prefill, %d tokens, only above "
              "32768)" % chunked) if value.get("engine") != "v1" and chunked else ""
        return "%s%s; profile run modelled from vLLM %s" % (engine, v0, value.get("line"))
    if kind == "dtype_auto":
        if value.get("rule") == "platform":
            refused = value.get("float16_refused_model_types") or []
            tail = "; float16 refused for %s (float32 below 8.0)" % ", ".join(refused) if refused else ""
            return ("auto follows the GPU: the checkpoint's dtype where supported, else the first supported "
                    "(bfloat16 -> float16 below 8.0)%s" % tail)
        extra = ["%s always bfloat16" % m for m in value.get("bfloat16_model_types") or []]
        extra += ["%s float32 -> bfloat16" % m for m in value.get("float32_bfloat16_model_types") or []]
        return "auto keeps the checkpoint's dtype (float32 -> float16%s); bfloat16 below 8.0 fails" % (
            "; " + ", ".join(extra) if extra else "")
    if kind == "quant_marlin":
        parts = []
        for method in sorted(value):
            conv = value[method]
            needs = ["%s %s" % (k, str(v).lower()) for k, v in sorted(conv.get("require", {}).items())]
            needs += ["%s declared" % k for k in conv.get("declared", [])]
            parts.append("%s -> %s (%s bits, %s, group %s)" % (
                method, conv["to"], "/".join(str(b) for b in conv["bits"]), ", ".join(needs),
                "/".join(str(g) for g in conv["group_sizes"])))
        return "; ".join(parts) + " without a forcing --quantization, from the Marlin method's minimum compute capability"
    if kind == "forward_compat":
        if value.get("compat_libs") == "opt_in":
            return "cuda-compat libraries only with %s=1" % value.get("env")
        return "cuda-compat libraries wired in at build (used whenever the driver is older)"
    return "?"


def render_release_behaviour_markdown(table=None):
    """docs/deploy_gate.md's release x behaviour tables (one per behaviour), from RELEASE_BEHAVIOUR."""
    table = RELEASE_BEHAVIOUR if table is None else table
    titles = {"memory_profile": "Memory profile (engine, profile run)", "dtype_auto": "`dtype: auto`",
              "quant_marlin": "GPTQ / AWQ served by Marlin", "forward_compat": "Forward compatibility (cuda-compat)"}
    keys = sorted(table, key=lambda k: parse_version(k) + (0,) * 8)
    lines = []
    for kind in RELEASE_BEHAVIOUR_KINDS:
        lines.extend(["### %s" % titles[kind], "", "| release | behaviour | confidence | source |", "|---|---|---|---|"])
        for key in keys:
            cell = table[key][kind]
            lines.append("| %s | %s | %s | %s |" % (key, describe_behaviour(kind, cell["value"]).replace("|", "\\|"),
                                                    cell["confidence"], cell["source"].replace("|", "\\|")))
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


# ---------------------------------------------------------------------------------------------
# Memory planning
# ---------------------------------------------------------------------------------------------
# vLLM sizes the KV cache as total * gpu_memory_utilization minus (weights + the peak activation
# of a profile run + non-torch allocations such as cuBLAS workspaces and NCCL). The gate models
# that reserve from the model's config and the arguments (_vllm_memory.profile_reserve, every step
# cited from vLLM 0.8.5 and 0.19.1); ``reserve_mib`` replaces the model by a constant. When the
# config values the model needs are missing, _vllm_memory falls back to its own constant.
ACTIVATION_RESERVE_MIB = None

MEMORY = {
    "reserve_mib": ACTIVATION_RESERVE_MIB,
    "default_gpu_memory_utilization": 0.9,
    "source": "S-FACTS-8; S-VLLM-PROFILE",
    "confidence": "inferred",
}

# ---------------------------------------------------------------------------------------------
# Settings a user may override (flat keys of the override dict)
# ---------------------------------------------------------------------------------------------
DEFAULT_SETTINGS = {
    # Replace dtype auto/bfloat16 by float16 on GPUs below 8.0 (warning DTYPE_AUTOFIXED) instead of
    # refusing (reason DTYPE_UNSUPPORTED).
    "auto_fix": True,
    # A minimum compute capability that replaces vLLM's per-version minimum (e.g. "7.5").
    "min_compute_capability": None,
    # Driver branches the site allows (list of ints, e.g. [580]); None = any.
    "allowed_driver_branches": None,
    # Activation/overhead reserve per GPU in MiB; None: modelled per model and arguments
    # (_vllm_memory.profile_reserve).
    "reserve_mib": ACTIVATION_RESERVE_MIB,
    # Reason codes to demote to warnings (escape hatch for a site that knows better).
    "ignore_codes": [],
    # Warning codes to promote to reasons (a stricter site).
    "promote_warnings": [],
    # Read by the preflight role (fail the play instead of ending the host); the gate ignores it.
    "fatal": False,
}

# Sections of the shipped data a user may extend or override (deep merge: dicts merge key by key,
# anything else replaces).
DATA_SECTIONS = ("cuda_toolkits", "minor_version_compatibility", "driver_branches", "architectures",
                 "dtypes", "quantization", "vllm_min_compute_capability")

SHIPPED = {
    "version": POLICY_VERSION,
    "settings": DEFAULT_SETTINGS,
    "cuda_toolkits": CUDA_TOOLKITS,
    "minor_version_compatibility": MINOR_VERSION_COMPATIBILITY,
    "driver_branches": DRIVER_BRANCHES,
    "architectures": ARCHITECTURES,
    "dtypes": DTYPES,
    "quantization": QUANTIZATION,
    "vllm_min_compute_capability": VLLM_MIN_COMPUTE_CAPABILITY,
    "vllm_releases": VLLM_RELEASES,
    "torch_without_sm70": TORCH_WITHOUT_SM70,
    "compressed_tensors_schemes": COMPRESSED_TENSORS_SCHEMES,
    "kv_cache_dtypes_by_release": KV_CACHE_DTYPES_BY_RELEASE,
    "forward_compat_image_branches": FORWARD_COMPAT_IMAGE_BRANCHES,
    "forward_compat_support": FORWARD_COMPAT_SUPPORT,
    "release_behaviour": RELEASE_BEHAVIOUR,
    "cuda_min_target_cc": CUDA_MIN_TARGET_CC,
    "memory": MEMORY,
}


class PolicyError(ValueError):
    """The policy overrides are malformed; the message names the key and what is expected."""


# ---------------------------------------------------------------------------------------------
# Version helpers
# ---------------------------------------------------------------------------------------------
# Every number the policy and the gate read is ASCII: re.ASCII keeps \d and \s from matching other
# scripts' digits and spaces ("\uff15\uff15\uff10" is no driver branch, although int() reads it), components are
# bounded (int() refuses strings of more than 4300 digits) and \Z ends a match at the very end
# ("$" also matches before a trailing newline).
_VERSION_RE = re.compile(r"^\s*[vVrR]?([0-9]{1,12}(?:\.[0-9]{1,12})*)(?![0-9])", re.ASCII)
_STRICT_DRIVER_RE = re.compile(r"^[rR]?[0-9]{1,9}(?:\.[0-9]{1,9}){0,3}\Z", re.ASCII)
_CC_RE = re.compile(r"^([0-9]{1,2})\.([0-9])\Z", re.ASCII)
_DIGITS_RE = re.compile(r"^[0-9]+\Z", re.ASCII)
# Control characters: C0 (U+0000-U+001F), DEL (U+007F), C1 (U+0080-U+009F), and the Unicode line and
# paragraph separators (U+2028, U+2029), which Python's str.splitlines() and JavaScript/YAML readers
# treat as line breaks. None of them belongs in a value that reaches an argv, a unit or an env file.
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def is_ascii_digits(text):
    """Whether ``text`` is a non-empty string of the ASCII digits 0-9 only (str.isdigit() also
    accepts other scripts' digits, superscripts and the like)."""
    return isinstance(text, str) and bool(_DIGITS_RE.match(text))


def has_control_chars(text):
    """Whether a string holds a control character (C0, DEL, C1, U+2028 or U+2029)."""
    return isinstance(text, str) and bool(_CONTROL_RE.search(text))


def parse_version(text):
    """Leading numeric components of a version string as a tuple of ints, or None.

    "550.54.14" -> (550, 54, 14); "v0.8.5.post1" -> (0, 8, 5); "12.4.1" -> (12, 4, 1).
    """
    if isinstance(text, bool) or text is None:
        return None
    if isinstance(text, int):
        return (text,) if 0 <= text < 10 ** 12 else None
    if isinstance(text, float):
        text = repr(text)
    if not isinstance(text, str):
        return None
    match = _VERSION_RE.match(text)
    if not match:
        return None
    return tuple(int(part) for part in match.group(1).split("."))


def parse_driver_version(text):
    """An NVIDIA driver version ("550.54.14", "570.26", "595.71.05", "R580") as an int tuple."""
    if not isinstance(text, str) or not _STRICT_DRIVER_RE.match(text.strip()):
        return None
    return parse_version(text.strip())


def compare_versions(left, right):
    """-1, 0 or 1 comparing two int tuples, the shorter padded with zeros."""
    width = max(len(left), len(right))
    a = tuple(left) + (0,) * (width - len(left))
    b = tuple(right) + (0,) * (width - len(right))
    return (a > b) - (a < b)


def parse_cc(value):
    """A compute capability ("7.0", 7.0, "12", (7, 0)) as (major, minor), or None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        return (value[0], value[1]) if 0 <= value[0] < 100 and 0 <= value[1] < 10 else None
    if isinstance(value, int):
        return (value, 0) if 0 <= value < 100 else None
    if isinstance(value, float):
        if math.isnan(value) or value < 0 or value >= 100:
            return None
        value = repr(value)
    if not isinstance(value, str):
        return None
    text = value.strip()
    if is_ascii_digits(text) and len(text) <= 2:
        return (int(text), 0)
    match = _CC_RE.match(text)
    if not match:
        return None
    return (int(match.group(1)), int(match.group(2)))


def format_cc(cc):
    return "%d.%d" % cc


def cuda_version_from_nvml(number):
    """NVML's integer CUDA driver version as (major, minor): 12040 -> (12, 4).

    nvmlSystemGetCudaDriverVersion encodes major * 1000 + minor * 10. The one decoder: gpu_facts
    (_gpu.cuda_version_from_int) and the gate (cuda_driver_version) both call it.
    """
    return (number // 1000, (number % 1000) // 10)


# ---------------------------------------------------------------------------------------------
# Arch lists: which compute capabilities an image's kernels reach
# ---------------------------------------------------------------------------------------------
_ARCH_RE = re.compile(r"^(?:(?P<kind>sm|compute)_(?P<cc>\d{2,3})(?P<suffix>[af]?)|"
                      r"(?P<major>\d{1,2})\.(?P<minor>\d)(?P<suffix2>[af]?))(?P<ptx>\+PTX)?\Z",
                      re.IGNORECASE | re.ASCII)


def parse_arch(entry):
    """One arch entry -> (major, minor, suffix, sass, ptx), or None if unreadable.

    Accepts torch's notation ("7.0", "9.0+PTX", "9.0a") and nvcc's ("sm_70", "compute_90",
    "sm_90a"). "X.Y+PTX" (or "sm_XY+PTX") means SASS and PTX for X.Y; "compute_XY" PTX only.
    """
    if not isinstance(entry, str):
        return None
    match = _ARCH_RE.match(entry.strip())
    if not match:
        return None
    plus_ptx = bool(match.group("ptx"))
    if match.group("kind"):
        digits = match.group("cc")
        compute = match.group("kind").lower() == "compute"
        return (int(digits[:-1]), int(digits[-1]), match.group("suffix").lower(), not compute,
                compute or plus_ptx)
    return (int(match.group("major")), int(match.group("minor")), match.group("suffix2").lower(), True,
            plus_ptx)


def arch_reach(entries, cc):
    """How parsed arch entries (parse_arch tuples) reach compute capability ``cc``: "sass", "ptx" or None.

    SASS for X.Y runs on X.Z with Z >= Y (same major); PTX for X.Y is JIT-compiled for any arch
    >= X.Y. Arch-specific builds ("9.0a", SASS or PTX) run only on their own arch. The one
    implementation of the rule: _image.covers and the gate's _arch_support call it.
    """
    ptx = False
    for major, minor, suffix, sass, has_ptx in entries:
        exact = suffix == "a"
        if sass and ((exact and (major, minor) == cc) or (not exact and major == cc[0] and minor <= cc[1])):
            return "sass"
        if has_ptx and ((exact and (major, minor) == cc) or (not exact and (major, minor) <= cc)):
            ptx = True
    return "ptx" if ptx else None


def covers(arch_list, cc):
    """How an arch list (strings; unreadable entries ignored) reaches ``cc``: "sass", "ptx" or None."""
    return arch_reach([p for p in (parse_arch(e) for e in arch_list or []) if p is not None], cc)


# ---------------------------------------------------------------------------------------------
# Architecture names
# ---------------------------------------------------------------------------------------------


def architecture_label(compute_capability, architectures=None):
    """The architecture label ("Volta", "Ada Lovelace") of a compute capability listed in
    ARCHITECTURES (exact match on the ``cc`` lists), or None."""
    cc = parse_cc(compute_capability)
    if cc is None:
        return None
    for entry in (ARCHITECTURES if architectures is None else architectures).values():
        if any(parse_cc(text) == cc for text in entry.get("cc", [])):
            return entry.get("label")
    return None


def kernel_module_labels(architectures=None, oldest_branch=None):
    """Labels of the architectures a current driver branch drives, by kernel-module need:
    {"proprietary_only": [...], "proprietary_ok": [...], "open_ok": [...]}, oldest first.

    Architectures whose last driver branch is older than ``oldest_branch`` (default: the oldest
    branch of DRIVER_BRANCHES that is not end of life) are left out.
    """
    architectures = ARCHITECTURES if architectures is None else architectures
    if oldest_branch is None:
        alive = [int(k) for k, e in DRIVER_BRANCHES.items() if e.get("eol") is not True]
        oldest_branch = min(alive) if alive else 0
    rows = []
    for entry in architectures.values():
        top = entry.get("max_driver_branch")
        ccs = [parse_cc(c) for c in entry.get("cc", []) if parse_cc(c)]
        if (top is not None and top < oldest_branch) or not ccs:
            continue
        rows.append((min(ccs), entry.get("label"), entry.get("kernel_module", "either")))
    rows.sort()
    return {
        "proprietary_only": [row[1] for row in rows if row[2] == "proprietary"],
        "proprietary_ok": [row[1] for row in rows if row[2] in ("proprietary", "either")],
        "open_ok": [row[1] for row in rows if row[2] in ("open", "either")],
    }


# ---------------------------------------------------------------------------------------------
# NVIDIA_REQUIRE_CUDA
# ---------------------------------------------------------------------------------------------
# The container runtime (nvidia-container-cli) evaluates NVIDIA_REQUIRE_* strings: constraints
# separated by spaces are ORed, constraints joined by commas are ANDed. Keys: cuda (the CUDA
# version the host driver supports), driver (the driver version), arch (compute capability),
# brand (the GPU brand). Example:
#   "cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471"
# = cuda>=12.4 OR (brand=tesla AND 470<=driver<471) OR (brand=unknown AND 470<=driver<471)

_REQ_RE = re.compile(r"^(cuda|driver|arch|brand)(>=|<=|==|!=|=|>|<)(.+)\Z", re.ASCII)
REQUIRE_KEYS = ("cuda", "driver", "arch", "brand")


def parse_require_cuda(text):
    """Parse an NVIDIA_REQUIRE_CUDA string into a list of OR-alternatives, each a list of
    (key, op, value) AND-constraints. Raises PolicyError naming the bad token."""
    if not isinstance(text, str):
        raise PolicyError("expected a string like 'cuda>=12.4 brand=tesla,driver>=470,driver<471', "
                          "got %s" % type(text).__name__)
    alternatives = []
    for clause in text.split():
        constraints = []
        for token in clause.split(","):
            token = token.strip()
            if not token:
                continue
            match = _REQ_RE.match(token)
            if not match:
                raise PolicyError("cannot read constraint %r: expected <cuda|driver|arch|brand>"
                                  "<op><value> with op one of >= <= > < = == !=" % token)
            key, op, value = match.groups()
            if op == "==":
                op = "="
            if key in ("cuda", "driver") and parse_version(value) is None:
                raise PolicyError("constraint %r: %s needs a version number" % (token, key))
            if key == "arch" and parse_cc(value) is None:
                raise PolicyError("constraint %r: arch needs a compute capability like 7.0" % token)
            if key == "brand" and op not in ("=", "!="):
                raise PolicyError("constraint %r: brand only takes = or !=" % token)
            constraints.append((key, op, value.lower() if key == "brand" else value))
        if constraints:
            alternatives.append(constraints)
    return alternatives


def _cmp_op(cmp, op):
    return {"=": cmp == 0, "!=": cmp != 0, ">=": cmp >= 0, "<=": cmp <= 0, ">": cmp > 0,
            "<": cmp < 0}[op]


def _eval_constraint(constraint, host, cuda_is_lower_bound=False):
    key, op, value = constraint
    have = host.get(key)
    if have is None:
        return None
    if key == "cuda" and cuda_is_lower_bound:
        # Only a lower bound is known: ">=" / ">" can be proven true, nothing else decided.
        if op in (">=", ">") and _cmp_op(compare_versions(have, parse_version(value)), op):
            return True
        return None
    if key == "brand":
        return (have == value) if op == "=" else (have != value)
    if key == "arch":
        want = parse_cc(value)
        cmp = (have > want) - (have < want)
        return _cmp_op(cmp, op)
    return _cmp_op(compare_versions(have, parse_version(value)), op)


def evaluate_require_cuda(alternatives, cuda=None, driver=None, brand=None, arch=None,
                          cuda_is_lower_bound=False):
    """Evaluate parsed alternatives against a host (three-valued: True, False, None = unknown).

    ``cuda`` and ``driver`` are int tuples (parse_version), ``brand`` a lower-case string,
    ``arch`` a (major, minor) tuple; None means unknown. With ``cuda_is_lower_bound`` the
    driver's CUDA level is only known to be at least ``cuda``. Returns (result, matched) where
    matched is the list of alternatives that evaluated True.
    """
    host = {"cuda": cuda, "driver": driver, "brand": brand, "arch": arch}
    matched = []
    any_unknown = False
    for alternative in alternatives:
        value = True
        for constraint in alternative:
            result = _eval_constraint(constraint, host, cuda_is_lower_bound)
            if result is False:
                value = False
                break
            if result is None:
                value = None
        if value is True:
            matched.append(alternative)
        elif value is None:
            any_unknown = True
    if not alternatives:
        return True, []
    if matched:
        return True, matched
    return (None if any_unknown else False), []


def format_require_alternative(alternative):
    return ",".join("%s%s%s" % c for c in alternative)


# ---------------------------------------------------------------------------------------------
# Lookups used by the gate
# ---------------------------------------------------------------------------------------------


def arch_for_cc(policy, cc):
    """The architecture key for a (major, minor) compute capability, or None."""
    best = None
    for key, entry in policy["architectures"].items():
        for text in entry.get("cc", []):
            known = parse_cc(text)
            if known == cc:
                return key
            if known and known[0] == cc[0] and known[1] <= cc[1]:
                if best is None or known > best[0]:
                    best = (known, key)
    return best[1] if best else None


def value_for_version(table, version):
    """Pick a CC from {"since-version": cc-string} for a vLLM version tuple (None = unknown).

    Exact or newest listed version <= version; strictly between two listed versions -> the lower
    CC of the two; before the first -> the first; unknown version -> the lowest listed.
    """
    points = []
    for since, value in table.items():
        parsed_since = parse_version(since)
        parsed_value = parse_cc(value)
        if parsed_since is not None and parsed_value is not None:
            points.append((parsed_since, parsed_value))
    if not points:
        return None
    points.sort(key=lambda p: p[0] + (0,) * (8 - len(p[0])))
    if version is None:
        return min(p[1] for p in points)
    previous = None
    for since, value in points:
        cmp = compare_versions(version, since)
        if cmp == 0:
            return value
        if cmp < 0:
            if previous is None:
                return value
            return min(previous, value)
        previous = value
    return previous


def vllm_min_cc(policy, version):
    """vLLM's minimum compute capability for a version tuple; "since" semantics, no interpolation."""
    points = []
    for since, entry in policy["vllm_min_compute_capability"].items():
        parsed_since = parse_version(since)
        parsed_value = parse_cc(entry.get("min_cc") if isinstance(entry, dict) else entry)
        if parsed_since is not None and parsed_value is not None:
            points.append((parsed_since, parsed_value))
    points.sort(key=lambda p: p[0] + (0,) * (8 - len(p[0])))
    if not points:
        return (7, 0)
    if version is None:
        return points[0][1]
    chosen = points[0][1]
    for since, value in points:
        if compare_versions(version, since) >= 0:
            chosen = value
    return chosen


def quant_text(name):
    """A method name in canonical spelling: stripped, lower case, "-" as "_"."""
    return name.strip().lower().replace("-", "_")


def canonical_quant(name):
    """Canonical key of a quantization method name ("compressed-tensors" -> "compressed_tensors");
    None for a non-string or a word meaning no method ("", none, null, no, false)."""
    if not isinstance(name, str):
        return None
    key = quant_text(name)
    if key in ("", "none", "null", "no", "false"):
        return None
    return key


def quant_key(name, table=None):
    """The QUANTIZATION key a method name means, following aliases and QUANT_SPELLINGS
    ("nvfp4", "NVFP4", "modelopt_nvfp4" -> "modelopt_fp4"); the canonical name when the table has
    no entry for it; None for no method. The one normaliser: the gate (resolve_quant) and
    model_facts (vllm_quant_name) both call it."""
    key = canonical_quant(name)
    if key is None:
        return None
    table = QUANTIZATION if table is None else table
    if key in table:
        return key
    for other, entry in table.items():
        if key in [canonical_quant(a) for a in entry.get("aliases", []) or []]:
            return other
    for prefix, target in QUANT_SPELLINGS:
        if key == prefix or (prefix.endswith("*") and key.startswith(prefix[:-1])):
            if target in table:
                return target
    return key


def resolve_quant(policy, name):
    """(key, entry) for a method name, following aliases; (canonical, None) if unknown."""
    key = quant_key(name, policy["quantization"])
    if key is None:
        return None, None
    return key, policy["quantization"].get(key)


def vllm_quant_name(name):
    """(vLLM's --quantization spelling, known) for a method name as a checkpoint spells it.

    "compressed_tensors" -> ("compressed-tensors", True), "nvfp4" -> ("modelopt_fp4", True);
    ``known`` is False for names no release in VLLM_RELEASES accepts (returned lower-cased,
    "-" as "_").
    """
    key = quant_key(name)
    if key is None:
        return quant_text(name), False
    spelled = VLLM_QUANT_SPELLING.get(key, key)
    return spelled, spelled in KNOWN_VLLM_QUANT_METHODS


def driver_branch_eol(policy, branch, today):
    """(is_eol, when-text) for a driver branch int at a datetime.date."""
    table = policy["driver_branches"]
    entry = table.get(str(branch))
    if entry is None:
        known = sorted(int(k) for k in table if is_ascii_digits(str(k)))
        supported = [b for b in known if table[str(b)].get("eol") not in (True,)]
        newest_supported = max(supported) if supported else None
        if newest_supported is not None and branch < newest_supported:
            return True, "not listed among NVIDIA's supported branches"
        return False, None
    eol = entry.get("eol")
    if eol is True:
        return True, "listed as end of life"
    if isinstance(eol, str):
        parsed = parse_version(eol.replace("-", "."))
        if parsed and len(parsed) >= 2 and (today.year, today.month) >= (parsed[0], parsed[1]):
            return True, "end of life since %s" % eol
        return False, eol
    return False, None


def max_cuda_for_branch(policy, branch):
    """(cuda tuple, exact) that a driver branch reports natively, or (None, False).

    For a branch missing from the table the newest known branch below it gives a lower bound.
    """
    table = policy["driver_branches"]
    entry = table.get(str(branch))
    if entry and parse_version(entry.get("max_cuda_native")):
        return parse_version(entry["max_cuda_native"]), True
    below = [int(k) for k in table if is_ascii_digits(str(k)) and int(k) < branch
             and parse_version(table[k].get("max_cuda_native"))]
    if below:
        return parse_version(table[str(max(below))]["max_cuda_native"]), False
    return None, False


def toolkit_entry(policy, cuda_version):
    """The cuda_toolkits entry for a version tuple (12, 4) / (12, 4, 1), or None."""
    if cuda_version is None:
        return None
    key = "%d.%d.%d" % (cuda_version + (0, 0, 0))[:3]
    return policy["cuda_toolkits"].get(key)


# ---------------------------------------------------------------------------------------------
# Overrides: merge and validate
# ---------------------------------------------------------------------------------------------


def _deep_merge(base, override):
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _deep_merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base


def type_name(value):
    return type(value).__name__


def short_repr(value):
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_ASCII_SPACE = " \t\r\n\f\v"

# Input coercion, shared by the policy overrides (PolicyError) and the gate's inputs (the gate
# passes GateInputError): the one copy of these rules.


def coerce_int(value, where, minimum=0, maximum=None, error=PolicyError):
    """An int from an int, an integral float or a string of ASCII digits ("12", " 12 ", "12.0");
    None stays None. Raises ``error`` naming ``where`` otherwise (other scripts' digits, "1_000",
    NaN and infinities included) or outside [minimum, maximum]."""
    if value is None:
        return None
    result = None
    if isinstance(value, bool):
        result = None
    elif isinstance(value, int):
        result = value
    elif isinstance(value, float):
        if math.isfinite(value) and value == int(value):
            result = int(value)
    elif isinstance(value, str):
        text = value.strip(_ASCII_SPACE)
        if re.match(r"^[0-9]{1,19}\Z", text):
            result = int(text)
        elif re.match(r"^[0-9]{1,19}\.0*\Z", text):
            result = int(text.split(".")[0])
    if result is None:
        raise error("%s: expected an integer, got %s" % (where, short_repr(value)))
    if maximum is None:
        if minimum is not None and result < minimum:
            raise error("%s: expected an integer >= %d, got %d" % (where, minimum, result))
    elif result < minimum or result > maximum:
        raise error("%s: expected an integer between %d and %d, got %d" % (where, minimum, maximum, result))
    return result


def coerce_bool(value, where, error=PolicyError):
    """True/False from a bool, 0/1 or true/yes/on/1 / false/no/off/0; None (and "", none, null)
    gives None. Raises ``error`` naming ``where`` otherwise."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("true", "yes", "on", "1"):
            return True
        if text in ("false", "no", "off", "0"):
            return False
        if text in ("", "none", "null"):
            return None
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise error("%s: expected true or false, got %s" % (where, short_repr(value)))


def _as_bool(value, where):
    result = coerce_bool(value, where)
    if result is None:
        raise PolicyError("%s: expected true or false, got %r" % (where, value))
    return result


def _as_int(value, where, minimum=None):
    if value is None:
        raise PolicyError("%s: expected an integer, got None" % where)
    return coerce_int(value, where, minimum=minimum)


def _check_cc_text(value, where):
    if parse_cc(value) is None:
        raise PolicyError("%s: expected a compute capability like '7.0', got %r" % (where, value))


def _check_version_text(value, where, what="a version like '12.4'"):
    if isinstance(value, bool) or parse_version(value) is None:
        raise PolicyError("%s: expected %s, got %r" % (where, what, value))


def _normalize_settings(settings):
    out = {}
    out["auto_fix"] = _as_bool(settings.get("auto_fix"), "policy.auto_fix")
    out["fatal"] = _as_bool(settings.get("fatal"), "policy.fatal")
    mcc = settings.get("min_compute_capability")
    if mcc is not None:
        _check_cc_text(mcc, "policy.min_compute_capability")
        mcc = format_cc(parse_cc(mcc))
    out["min_compute_capability"] = mcc
    branches = settings.get("allowed_driver_branches")
    if branches is not None:
        if not isinstance(branches, (list, tuple)):
            raise PolicyError("policy.allowed_driver_branches: expected a list of driver branch numbers "
                              "like [580], got %r" % (branches,))
        normalized = []
        for index, item in enumerate(branches):
            where = "policy.allowed_driver_branches[%d]" % index
            if isinstance(item, str) and item.strip()[:1] in ("r", "R"):
                item = item.strip()[1:]
            normalized.append(_as_int(item, where, minimum=1))
        branches = normalized
    out["allowed_driver_branches"] = branches
    out["reserve_mib"] = coerce_int(settings.get("reserve_mib"), "policy.reserve_mib", minimum=0)
    for name in ("ignore_codes", "promote_warnings"):
        codes = settings.get(name)
        if codes is None:
            codes = []
        if isinstance(codes, str):
            codes = [codes]
        if not isinstance(codes, (list, tuple)) or not all(isinstance(c, str) for c in codes):
            raise PolicyError("policy.%s: expected a list of UPPER_SNAKE codes, got %r" % (name, codes))
        out[name] = [c.strip().upper() for c in codes]
    return out


def _check_driver_field(entry, field, where, expected):
    """PolicyError naming ``where``.``field`` unless it reads as a driver version or branch."""
    if parse_driver_version(str(entry.get(field, ""))) is None:
        raise PolicyError("%s.%s: expected %s, got %r" % (where, field, expected, entry.get(field)))


def _validate_sections(policy):
    for key, entry in policy["cuda_toolkits"].items():
        where = "policy.cuda_toolkits.%s" % key
        _check_version_text(key, where, "a CUDA version key like '12.4.1'")
        if not isinstance(entry, dict):
            raise PolicyError("%s: expected a mapping with min_linux_driver and mvc_floor" % where)
        _check_driver_field(entry, "min_linux_driver", where, "a driver version like '550.54.14'")
        _check_driver_field(entry, "mvc_floor", where, "a driver branch like '525'")
    for key, entry in policy["minor_version_compatibility"].items():
        where = "policy.minor_version_compatibility.%s" % key
        if not is_ascii_digits(str(key)) or not isinstance(entry, dict):
            raise PolicyError("%s: expected a CUDA major version key ('12') with a mapping value" % where)
        _check_driver_field(entry, "driver_min", where, "a driver branch like '525'")
    for key, entry in policy["driver_branches"].items():
        where = "policy.driver_branches.%s" % key
        if not is_ascii_digits(str(key)) or not isinstance(entry, dict):
            raise PolicyError("%s: expected a branch number key ('580') with a mapping value" % where)
        if entry.get("max_cuda_native") is not None:
            _check_version_text(entry["max_cuda_native"], where + ".max_cuda_native")
        eol = entry.get("eol")
        if eol is not None and eol is not True and eol is not False:
            parsed = parse_version(str(eol).replace("-", "."))
            if not isinstance(eol, str) or not parsed or len(parsed) < 2:
                raise PolicyError("%s.eol: expected 'YYYY-MM', true or null, got %r" % (where, eol))
    for key, entry in policy["architectures"].items():
        where = "policy.architectures.%s" % key
        if not isinstance(entry, dict):
            raise PolicyError("%s: expected a mapping" % where)
        ccs = entry.get("cc", [])
        if not isinstance(ccs, (list, tuple)):
            raise PolicyError("%s.cc: expected a list of compute capabilities" % where)
        for index, text in enumerate(ccs):
            _check_cc_text(text, "%s.cc[%d]" % (where, index))
        for name in ("max_driver_branch", "min_driver_branch"):
            if entry.get(name) is not None:
                entry[name] = _as_int(entry[name], "%s.%s" % (where, name), minimum=1)
        if entry.get("kernel_module", "either") not in ("proprietary", "open", "either"):
            raise PolicyError("%s.kernel_module: expected proprietary, open or either, got %r"
                              % (where, entry.get("kernel_module")))
    for key, entry in policy["dtypes"].items():
        where = "policy.dtypes.%s" % key
        if not isinstance(entry, dict):
            raise PolicyError("%s: expected a mapping with min_cc and bytes" % where)
        _check_cc_text(entry.get("min_cc"), where + ".min_cc")
        entry["bytes"] = _as_int(entry.get("bytes"), where + ".bytes", minimum=1)
    for key, entry in policy["quantization"].items():
        where = "policy.quantization.%s" % key
        if not isinstance(entry, dict) or not isinstance(entry.get("min_cc"), dict) or not entry["min_cc"]:
            raise PolicyError("%s: expected a mapping with min_cc: {vllm-version: '7.5', ...}" % where)
        for since, value in entry["min_cc"].items():
            _check_version_text(since, "%s.min_cc key" % where, "a vLLM version like '0.8.5'")
            _check_cc_text(value, "%s.min_cc.%s" % (where, since))
        bpp = entry.get("bytes_per_param")
        if bpp is not None and (isinstance(bpp, bool) or not isinstance(bpp, (int, float)) or not bpp > 0):
            raise PolicyError("%s.bytes_per_param: expected a positive number or null, got %r" % (where, bpp))
        aliases = entry.get("aliases", [])
        if aliases is not None and (not isinstance(aliases, (list, tuple))
                                    or not all(isinstance(a, str) for a in aliases)):
            raise PolicyError("%s.aliases: expected a list of names" % where)
    for since, entry in policy["vllm_min_compute_capability"].items():
        where = "policy.vllm_min_compute_capability.%s" % since
        _check_version_text(since, where, "a vLLM version key like '0.20.0'")
        value = entry.get("min_cc") if isinstance(entry, dict) else entry
        _check_cc_text(value, where + ".min_cc")


def merge_policy(overrides=None):
    """Return the effective policy: the shipped data with ``overrides`` merged over it.

    ``overrides`` keys (all optional):
      settings (flat): auto_fix, min_compute_capability, allowed_driver_branches, reserve_mib,
                       ignore_codes, promote_warnings, fatal
      data sections (deep merge over the shipped tables of the same name): cuda_toolkits,
        minor_version_compatibility, driver_branches, architectures, dtypes, quantization,
        vllm_min_compute_capability
    Entries added or changed by the user get ``source: user`` and ``confidence: user`` unless
    they say otherwise. Raises PolicyError with the offending key on malformed input.
    """
    policy = copy.deepcopy(SHIPPED)
    if overrides is None:
        overrides = {}
    if not isinstance(overrides, dict):
        raise PolicyError("policy: expected a mapping of overrides, got %s" % type_name(overrides))
    allowed = set(DEFAULT_SETTINGS) | set(DATA_SECTIONS)
    for key in overrides:
        if key not in allowed:
            raise PolicyError("policy: unknown key %r; known keys: %s" % (key, ", ".join(sorted(allowed))))
    for key in DEFAULT_SETTINGS:
        if key in overrides and overrides[key] is not None:
            policy["settings"][key] = copy.deepcopy(overrides[key])
    for section in DATA_SECTIONS:
        if section not in overrides or overrides[section] is None:
            continue
        value = overrides[section]
        if not isinstance(value, dict):
            raise PolicyError("policy.%s: expected a mapping, got %s" % (section, type_name(value)))
        normalized = {}
        for key, entry in value.items():
            skey = str(key)
            if section in ("driver_branches", "minor_version_compatibility") and skey[:1] in ("r", "R"):
                skey = skey[1:]
            if isinstance(entry, dict):
                entry = dict(entry)
                if skey not in policy[section]:
                    entry.setdefault("source", "user")
                    entry.setdefault("confidence", "user")
                elif isinstance(policy[section][skey], dict):
                    changed = [k for k in entry if k not in ("source", "confidence", "note")]
                    if changed:
                        entry.setdefault("source", "user")
                        entry.setdefault("confidence", "user")
            normalized[skey] = entry
        _deep_merge(policy[section], normalized)
    policy["settings"] = _normalize_settings(policy["settings"])
    _validate_sections(policy)
    return policy


# ---------------------------------------------------------------------------------------------
# Derived data: filled in once when this module loads, from the tables above (never restated)
# ---------------------------------------------------------------------------------------------


def _complete_releases():
    """Fill the derived fields of VLLM_RELEASES and TORCH_WITHOUT_SM70 (see their comments)."""
    since = {"vllm_min_compute_capability": VLLM_MIN_COMPUTE_CAPABILITY}
    without_sm70 = []
    for key, entry in VLLM_RELEASES.items():
        entry["require_cuda"] = require_cuda_string(entry["cuda_base"])
        entry["min_cc"] = format_cc(vllm_min_cc(since, parse_version(key)))
        wheel = TORCH_WHEELS.get(entry.get("torch_wheel"))
        entry["torch_arch"] = wheel["arch"] if wheel else None
        vllm_arch = (entry.get("vllm_arch") or "").split()
        if wheel and covers(vllm_arch, (7, 0)) == "sass" and covers(wheel["arch"].split(), (7, 0)) is None:
            without_sm70.append((parse_version(key), key, wheel["arch"]))
    without_sm70.sort()
    if without_sm70:
        TORCH_WITHOUT_SM70["range"] = [without_sm70[0][1], without_sm70[-1][1]]
        TORCH_WITHOUT_SM70["torch_arch"] = without_sm70[0][2]


def _quant_spellings():
    """(canonical key -> vLLM spelling, every spelling) over the releases' quantization_methods."""
    spelling = {}
    for entry in VLLM_RELEASES.values():
        for name in entry.get("quantization_methods") or []:
            spelling.setdefault(canonical_quant(name), name)
    return spelling, frozenset(spelling.values())


_complete_releases()
VLLM_QUANT_SPELLING, KNOWN_VLLM_QUANT_METHODS = _quant_spellings()
