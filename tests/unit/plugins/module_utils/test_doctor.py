# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The doctor's diagnosis core (plugins/module_utils/reporting/_doctor.py).

Inputs are shaped as the probes and the plan return them: gpu_facts' ansible_facts.nvidia (the 2x
Tesla V100-PCIE-32GB dual-socket host of tests/unit/fixtures/gpu/v100x2_pcie_550), host_facts'
labfleet_host, vllm_image_facts' image, and a real plan from _plan.plan for public model configs
(Llama-3.1-8B; Llama-3.1-70B in 4-bit GPTQ). The raw texts are what the doctor playbook collects:
journal tails in journalctl's short-iso format, nvidia-smi -L, topo -m/-p2p, lspci -vvv, a CDI spec.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.reporting import _doctor as D
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _gate
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _plan as P

TODAY = datetime.date(2026, 11, 30)
UUID0 = "GPU-6f1c2a9e-3b7d-4c58-9e21-0a4d8b7c3e15"
UUID1 = "GPU-b82e4d07-91c3-4f6a-a5d2-7c0e19f48b63"
GPU0 = {"index": 0, "name": "Tesla V100-PCIE-32GB", "uuid": UUID0, "pci_bus_id": "0000:3b:00.0",
        "pci_device_id": "0x1db6", "compute_capability": "7.0", "architecture": "Volta", "memory_total_mib": 32768,
        "memory_free_mib": 32494, "persistence_mode": True, "ecc_mode": "Enabled", "pcie_link_gen": 3,
        "pcie_link_width": 16, "kernel_driver": "nvidia", "source": "nvidia_smi"}
GPU1 = dict(GPU0, index=1, uuid=UUID1, pci_bus_id="0000:d8:00.0")
# gpu_facts on the reference host: two V100s on two CPU sockets (SYS), driver 550.54.14.
NVIDIA = {"present": True, "state": "ok", "backend": "nvidia_smi",
          "msg": "Found 2 NVIDIA GPU(s) via nvidia-smi: 2x Tesla V100-PCIE-32GB, compute capability 7.0; "
                 "driver 550.54.14, CUDA 12.4.",
          "driver_version": "550.54.14", "cuda_driver_version": "12.4", "kernel_module_version": "550.54.14",
          "kernel_module_type": "proprietary", "library_version": "550.54.14", "driver_library_mismatch": False,
          "count": 2, "gpus": [GPU0, GPU1], "lost_gpus": [], "nvlink": False,
          "topology": {"matrix": {"0": {"1": "SYS"}, "1": {"0": "SYS"}}, "pairs": [{"a": 0, "b": 1, "link": "SYS"}]}}
NO_GPU = {"present": False, "state": "no_gpu", "backend": "pci", "msg": "No NVIDIA GPU on this host.",
          "driver_version": None, "cuda_driver_version": None, "count": 0, "gpus": [], "lost_gpus": [],
          "nvlink": False, "topology": {"matrix": {}, "pairs": []}}
XEON_V4 = {"model": "Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz", "logical_cpus": 56, "sockets": 2,
           "flags": ["fpu", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "bmi2", "aes"],
           "isa": {"sse4_2": True, "avx": True, "avx2": True, "fma": True, "f16c": True, "avx512f": False,
                   "avx512bw": False, "avx512_vnni": False, "amx_tile": False}}
TOOLKIT_CONFIG = {"path": "/etc/nvidia-container-runtime/config.toml", "exists": True, "error": None, "mode": None,
                  "disable_require": None, "skip_mode_detection": None}
# host_facts' container part on the reference host: Docker 26.1.5, toolkit 1.17.8, nvidia runtime registered.
CONTAINER_OK = {"docker_client_version": "26.1.5", "docker_server_version": "26.1.5", "docker_error": None,
                "nvidia_container_cli_version": "1.17.8", "nvidia_ctk_version": "1.17.8", "toolkit_version": "1.17.8",
                "nvidia_container_runtime_hook": "/usr/bin/nvidia-container-runtime-hook",
                "nvidia_cdi_hook": "/usr/bin/nvidia-cdi-hook", "toolkit_config": TOOLKIT_CONFIG,
                "nvidia_runtime_mode": "legacy", "docker_config_source": "docker info",
                "docker_default_runtime": "runc",
                "docker_runtimes": {"nvidia": "nvidia-container-runtime", "runc": "runc"},
                "docker_cdi_enabled": False, "docker_cdi_spec_dirs": [], "cdi_specs": []}
HOST = {"cpu": XEON_V4, "disk": {}, "container": CONTAINER_OK}
# host_facts in molecule/container_runtime_broken: no Docker, no toolkit, and a daemon.json that does not
# parse (so docker_config_source is null).
CONTAINER_BROKEN = {"docker_client_version": None, "docker_server_version": None, "docker_error": None,
                    "nvidia_container_cli_version": None, "nvidia_ctk_version": None, "toolkit_version": None,
                    "nvidia_container_runtime_hook": None, "nvidia_cdi_hook": None,
                    "toolkit_config": dict(TOOLKIT_CONFIG, exists=False), "nvidia_runtime_mode": None,
                    "docker_config_source": None, "docker_default_runtime": None, "docker_runtimes": {},
                    "docker_cdi_enabled": None, "docker_cdi_spec_dirs": None, "cdi_specs": []}
BROKEN_DAEMON_JSON = '{\n  "data-root": "/srv/docker-data",\n  "log-opts": {"max-size": "100m"\n}\n'
NVIDIA_CTK_DAEMON_JSON = ('{\n    "runtimes": {\n        "nvidia": {\n            "args": [],\n'
                          '            "path": "nvidia-container-runtime"\n        }\n    }\n}\n')
IMAGE_085 = {"reference": "vllm/vllm-openai:v0.8.5", "state": "present", "profile_matched": True,
             "vllm_version": "0.8.5", "cuda_version": "12.4.0",
             "require_cuda": "cuda>=12.4 brand=tesla,driver>=470,driver<471",
             "arch_list": ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0+PTX"],
             "vllm_arch_list": ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0+PTX"],
             "torch_arch_list": ["5.0", "6.0", "7.0", "7.5", "8.0", "8.6", "9.0"],
             "env": {"CUDA_VERSION": "12.4.0", "NVIDIA_REQUIRE_CUDA": "cuda>=12.4 brand=tesla,driver>=470,driver<471"},
             "sources": {"arch_list": "vllm_arch_list filtered by torch_arch_list"}, "gpu_check": {"ran": False}}
IMAGE_020 = {"reference": "vllm/vllm-openai:v0.20.0", "state": "present", "vllm_version": "0.20.0",
             "cuda_version": "13.0.2", "arch_list": ["7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "11.0", "12.0+PTX"],
             "env": {"CUDA_VERSION": "13.0.2"}, "sources": {"arch_list": "vllm_arch_list"}}
CPU_IMAGE_085 = {"reference": "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.8.5.post1", "state": "present",
                 "vllm_version": "0.8.5.post1", "env": {"VLLM_CPU_DISABLE_AVX512": ""}}
# Llama-3.1-8B's config.json, weights as stored (bf16 safetensors).
LLAMA_8B = {"weight_bytes": 16060522496, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
            "head_dim": 128, "hidden_size": 4096, "intermediate_size": 14336, "vocab_size": 128256,
            "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}
# Llama-3.1-70B's config.json with 4-bit GPTQ weights (about 39.9 GB, g128).
LLAMA_70B_GPTQ = {"weight_bytes": 39900000000, "num_hidden_layers": 80, "num_attention_heads": 64,
                  "num_key_value_heads": 8, "head_dim": 128, "hidden_size": 8192, "intermediate_size": 28672,
                  "vocab_size": 128256, "max_position_embeddings": 131072, "torch_dtype": "float16",
                  "quant_method": "gptq", "quant_bits": 4, "quant_group_size": 128}
REFERENCE_ARGS = {"tensor_parallel_size": 2, "dtype": "float16", "gpu_memory_utilization": 0.92,
                  "max_model_len": 32768, "max_num_seqs": 32}
GPTQ_ARGS = dict(REFERENCE_ARGS, quantization="gptq")

PREFIX = "2026-11-30T%s+0000 gpu01 docker[2211]: "
SERVING = PREFIX % "09:12:01" + ("INFO 11-30 09:12:01 [api_server.py:1090] Starting vLLM API server on "
                                 "http://0.0.0.0:8000")
BUSY = PREFIX % "09:13:10" + ("INFO 11-30 09:13:10 [metrics.py:486] Avg prompt throughput: 212.4 tokens/s, Avg "
                              "generation throughput: 35.2 tokens/s, Running: 8 reqs, Swapped: 0 reqs, Pending: 0 "
                              "reqs, GPU KV cache usage: 4.1%, CPU KV cache usage: 0.0%.")
IDLE = PREFIX % "09:13:15" + ("INFO 11-30 09:13:15 [metrics.py:486] Avg prompt throughput: 0.0 tokens/s, Avg "
                              "generation throughput: 0.0 tokens/s, Running: 0 reqs, Swapped: 0 reqs, Pending: 0 "
                              "reqs, GPU KV cache usage: 0.0%, CPU KV cache usage: 0.0%.")
STALLED = IDLE.replace("Running: 0 reqs", "Running: 8 reqs")
TORCH_OOM = PREFIX % "10:40:11" + ("ERROR 11-30 10:40:11 [engine.py:160] torch.OutOfMemoryError: CUDA out of "
                                   "memory. Tried to allocate 1.96 GiB. GPU 1 has a total capacity of 31.74 GiB of "
                                   "which 1.12 GiB is free.")
HEALTHY_JOURNAL = [PREFIX % "09:10:02" + "INFO 11-30 09:10:02 [config.py:689] This model supports multiple tasks",
                   SERVING, BUSY, IDLE]
SMI_L = "GPU 0: Tesla V100-PCIE-32GB (UUID: %s)\nGPU 1: Tesla V100-PCIE-32GB (UUID: %s)\n" % (UUID0, UUID1)
TOPO_P2P_SYS = (" \tGPU0\tGPU1\t\n GPU0\tX\tCNS\t\n GPU1\tCNS\tX\t\n\nLegend:\n\n  X    = Self\n"
                "  OK   = Status Ok\n  CNS  = Chipset not supported\n")
DEV_NODES = ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
             "/dev/nvidia-modeset"]


def request(args, gpus="all"):
    return {"image": "vllm/vllm-openai:v0.8.5", "image_digest": "", "model_path": "/srv/models/model",
            "served_model_name": "quasar", "vllm_args": dict(args), "enforce_eager": "auto", "extra_args": [],
            "instances": [{"name": "vllm", "port": 8000, "gpus": gpus}],
            "driver": {"manage": True, "branch": "550", "version": "", "allow_change": False}}


def verdict(model, args, gpus="all"):
    """The plan deploy_gate records (preflight_verdict) for this request on the reference host."""
    return P.plan(gpus=NVIDIA["gpus"], driver_version="550.54.14", image=IMAGE_085, model=model,
                  request=request(args, gpus), nvlink=False, today=TODAY,
                  host={"docker_server_version": "26.1.5", "nvidia_ctk_version": "1.17.8"})


def gate_inputs(model):
    return {"gpus": NVIDIA["gpus"], "driver_version": "550.54.14", "image": IMAGE_085, "model": model,
            "nvlink": False, "today": TODAY}


def statuses(result):
    return dict((f["check"], f["status"]) for f in result["findings"])


def fits_under_load(model, gpus, args):
    """Independent re-check of a suggestion: the gate's plan for it, judged by memory_fit."""
    plan = _gate.evaluate(gpus=gpus, driver_version="550.54.14", image=IMAGE_085, model=model, vllm=args,
                          nvlink=False, today=TODAY)["plan"]
    return D.memory_fit(plan)


def healthy_raw(plan_verdict):
    return {"journal": HEALTHY_JOURNAL, "daemon_json": NVIDIA_CTK_DAEMON_JSON,
            "gpu_test": {"rc": 0, "stdout": SMI_L, "stderr": ""}, "dev_nodes": DEV_NODES,
            "topo_p2p": TOPO_P2P_SYS, "kernel_cmdline": "BOOT_IMAGE=/vmlinuz-6.1.0-28-amd64 ro quiet",
            "container_env": "HF_HUB_OFFLINE=1\nVLLM_NO_USAGE_STATS=1\nVLLM_API_KEY=sk-secret\n",
            "deployed_argv": plan_verdict["instances"][0]["argv"]}


# --- the reference host, healthy, and the broken-runtime scenario ---------------------------------------------


def test_reference_host_is_healthy_on_all_five_checks():
    plan_verdict = verdict(LLAMA_8B, REFERENCE_ARGS)
    result = D.diagnose(NVIDIA, HOST, IMAGE_085, plan_verdict, healthy_raw(plan_verdict),
                        gate_inputs=gate_inputs(LLAMA_8B))
    assert statuses(result) == dict((check, "healthy") for check in D.CHECKS)
    assert [f["check"] for f in result["findings"]] == list(D.CHECKS)
    assert result["status"] == "healthy" and result["instance"] == "vllm" and result["journal_states"] == []
    gpu, isa, kernel, oom, tp = result["findings"]
    assert UUID0 in gpu["cause"] and UUID1 in gpu["cause"] and "Docker 26.1.5" in gpu["cause"]
    assert "Toolkit 1.17.8" in gpu["cause"]
    assert "has avx, avx2, fma, f16c but not avx512f" in isa["cause"]
    assert "SASS for Tesla V100-PCIE-32GB (CC 7.0)" in kernel["cause"]
    assert "32.00 GiB x 0.92" in oom["cause"] and "9 full 32768-token" in oom["cause"]
    assert "SYS between GPU 0 and 1" in tp["cause"] and "P2P status 0-1 CNS" in tp["cause"]
    # The secret in the env file never reaches the evidence.
    assert tp["evidence"]["nccl_env"] == {}
    assert "sk-secret" not in repr(result)


def test_broken_runtime_scenario_names_the_cause_and_the_fix():
    """The state molecule/container_runtime_broken leaves: invalid daemon.json, no Docker, no toolkit, no GPU."""
    host = {"cpu": XEON_V4, "disk": {}, "container": CONTAINER_BROKEN}
    result = D.diagnose(NO_GPU, host, None, None, {"daemon_json": BROKEN_DAEMON_JSON, "dev_nodes": []})
    assert statuses(result) == {"gpu_in_container": "problem", "illegal_instruction": "unknown",
                                "no_kernel_image": "not_applicable", "out_of_memory": "not_applicable",
                                "tensor_parallel_pcie": "not_applicable"}
    assert result["status"] == "problem"
    gpu = result["findings"][0]
    assert gpu["cause"].startswith("/etc/docker/daemon.json is not valid JSON: Expecting ',' delimiter: "
                                   "line 5 column 1")
    assert "Docker is not installed" in gpu["cause"]
    assert "the NVIDIA Container Toolkit is not installed" in gpu["cause"]
    assert "dockerd --validate --config-file /etc/docker/daemon.json" in gpu["fix"]
    assert "nvidia-container-toolkit 1.18.2" in gpu["fix"] and "=1.18.2-1" in gpu["fix"]
    assert "nvidia-ctk runtime configure --runtime=docker" in gpu["fix"]
    assert gpu["fix"].startswith("1) repair /etc/docker/daemon.json")
    assert result["findings"][1]["fix"].startswith("collect: labfleet.vllm.vllm_image_facts")


def test_missing_inputs_are_unknown_and_say_what_to_collect():
    result = D.diagnose()
    assert statuses(result) == dict((check, "unknown") for check in D.CHECKS)
    for item in result["findings"]:
        assert item["fix"].startswith("collect: "), item
    assert "labfleet.vllm.host_facts" in result["findings"][0]["fix"]
    assert "nvidia-smi topo -m" in D.check_tensor_parallel_pcie(
        verdict(LLAMA_8B, REFERENCE_ARGS)["instances"][0], dict(NVIDIA, topology={"pairs": []}))["fix"]


# --- 1. GPU not visible in containers -------------------------------------------------------------------------


def test_old_toolkit_and_no_nvidia_runtime():
    container = dict(CONTAINER_OK, toolkit_version="1.13.5", nvidia_ctk_version="1.13.5",
                     nvidia_container_cli_version="1.13.5", docker_runtimes={"runc": "runc"})
    item = D.check_gpu_in_container(NVIDIA, {"container": container})
    assert item["status"] == "problem"
    assert item["cause"] == ("NVIDIA Container Toolkit 1.13.5 is older than 1.14; Docker lists no nvidia runtime "
                             "(runtimes: runc, from docker info).")
    assert "to 1.18.2-1" in item["fix"] and "runtimes.nvidia.path = nvidia-container-runtime" in item["fix"]
    assert {"toolkit_min", "runtime_configure"} <= set(s["key"] for s in item["evidence"]["sources"])


def test_old_docker_without_gpus_flag():
    container = dict(CONTAINER_OK, docker_server_version="18.09.9", docker_client_version="18.09.9")
    item = D.check_gpu_in_container(NVIDIA, {"container": container})
    assert item["status"] == "problem"
    assert "Docker 18.09.9 has no --gpus option (it needs 19.03)" in item["cause"]
    assert "NVIDIA_VISIBLE_DEVICES=all -e NVIDIA_DRIVER_CAPABILITIES=compute,utility" in item["fix"]


def test_docker_installed_but_engine_down():
    # The engine does not answer, so host_facts read the runtimes from daemon.json.
    container = dict(CONTAINER_OK, docker_server_version=None, docker_config_source="daemon.json",
                     docker_runtimes={},
                     docker_error="Cannot connect to the Docker daemon at unix:///var/run/docker.sock.")
    item = D.check_gpu_in_container(NVIDIA, {"container": container}, daemon_json='{"data-root": "/srv/docker"}')
    assert item["status"] == "problem"
    assert item["evidence"]["daemon_json"] == "valid"
    assert "Docker lists no nvidia runtime (runtimes: none, from daemon.json)" in item["cause"]
    assert item["cause"].startswith("The Docker engine does not answer (Cannot connect to the Docker daemon at "
                                    "unix:///var/run/docker.sock);")
    assert "journalctl -u docker" in item["fix"]


def test_test_container_refused_by_docker():
    stderr = 'docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].\n'
    item = D.check_gpu_in_container(NVIDIA, {"container": CONTAINER_OK},
                                    gpu_test={"rc": 125, "stdout": "", "stderr": stderr})
    assert item["status"] == "problem"
    assert item["cause"].startswith("`docker run --rm --gpus all <image> nvidia-smi -L` failed (exit 125): docker: "
                                    "Error response from daemon: could not select device driver")
    assert "nvidia-ctk runtime configure --runtime=docker" in item["fix"]
    assert item["evidence"]["container_test"]["category"] == "no_gpu_runtime"


def test_test_container_sees_fewer_gpus_than_the_host():
    out = "GPU 0: Tesla V100-PCIE-32GB (UUID: %s)\n" % UUID0
    item = D.check_gpu_in_container(NVIDIA, {"container": CONTAINER_OK}, gpu_test={"rc": 0, "stdout": out})
    assert item["status"] == "problem"
    assert "lists 1 GPU(s) (%s), the host 2 (%s, %s)" % (UUID0, UUID0, UUID1) in item["cause"]


def test_missing_uvm_node_and_dev_char_links():
    item = D.check_gpu_in_container(NVIDIA, {"container": CONTAINER_OK},
                                    dev_nodes=["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"],
                                    dev_char_missing=["/dev/char/195:0", "/dev/char/195:255"])
    assert item["status"] == "problem"
    assert item["cause"].startswith("Device nodes are missing: /dev/nvidia-uvm; the NVIDIA device nodes lack their "
                                    "/dev/char links (/dev/char/195:0, /dev/char/195:255)")
    assert "nvidia-modprobe -u -c=0" in item["fix"]
    assert "nvidia-ctk system create-dev-char-symlinks --create-all" in item["fix"]


def test_driver_library_mismatch_on_the_host():
    nvidia = dict(NVIDIA, state="driver_library_mismatch", kernel_module_version="550.90.07",
                  library_version="550.107.02", msg="Failed to initialize NVML: Driver/library version mismatch")
    item = D.check_gpu_in_container(nvidia, {"container": CONTAINER_OK})
    assert item["status"] == "problem"
    assert "reboot so the loaded kernel module (550.90.07) matches the library (550.107.02)" in item["fix"]


CDI_SPEC_STALE = """---
cdiVersion: 0.5.0
containerEdits:
  deviceNodes:
  - path: /dev/nvidiactl
  - path: /dev/nvidia-uvm
  mounts:
  - containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.535.183.01
    hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.535.183.01
    options: [ro, nosuid, nodev, bind]
devices:
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: "0"
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: GPU-6f1c2a9e-3b7d-4c58-9e21-0a4d8b7c3e15
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia1
  name: "1"
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia1
  name: GPU-0d3c9b71-5e2a-4f88-b1c6-2a7e4d9f0c58
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
    - path: /dev/nvidia1
  name: all
kind: nvidia.com/gpu
"""


def test_stale_cdi_spec_matters_when_docker_maps_gpus_to_cdi():
    # Docker 29.2 with CDI on, nvidia-cdi-hook and an NVIDIA spec: --gpus goes through CDI (moby#50228).
    container = dict(CONTAINER_OK, docker_server_version="29.2.1", docker_client_version="29.2.1",
                     toolkit_version="1.18.2", nvidia_ctk_version="1.18.2", docker_cdi_enabled=True,
                     docker_cdi_spec_dirs=["/etc/cdi", "/var/run/cdi"],
                     cdi_specs=[{"path": "/etc/cdi/nvidia.yaml", "kind": "nvidia.com/gpu", "has_all": True}])
    specs = [{"path": "/etc/cdi/nvidia.yaml", "text": CDI_SPEC_STALE}]
    item = D.check_gpu_in_container(NVIDIA, {"container": container}, cdi_specs=specs)
    assert item["status"] == "problem"
    assert item["evidence"]["gpu_path"]["mode"] == "cdi"
    assert item["evidence"]["cdi_specs"][0]["devices"] == [
        "0", UUID0, "1", "GPU-0d3c9b71-5e2a-4f88-b1c6-2a7e4d9f0c58", "all"]
    assert "/etc/cdi/nvidia.yaml was made for driver 535.183.01, the host runs 550.54.14" in item["cause"]
    assert "GPU(s) this host does not have (GPU-0d3c9b71-5e2a-4f88-b1c6-2a7e4d9f0c58)" in item["cause"]
    assert "not the host's %s" % UUID1 in item["cause"]
    assert "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml" in item["fix"]
    # With Docker 26 and the legacy hook the static spec is not used: noted, not a problem.
    item = D.check_gpu_in_container(NVIDIA, {"container": CONTAINER_OK}, cdi_specs=specs,
                                    gpu_test={"rc": 0, "stdout": SMI_L})
    assert item["status"] == "healthy"
    assert len(item["evidence"]["cdi_unused_problems"]) == 2


def test_cdi_spec_without_all_and_with_one_gpu_of_two():
    spec = ('{"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": [{"name": "0", "containerEdits": '
            '{"deviceNodes": [{"path": "/dev/nvidia0"}]}}], "containerEdits": {}}')
    container = dict(CONTAINER_OK, docker_server_version="29.2.1", docker_client_version="29.2.1",
                     toolkit_version="1.18.2", docker_cdi_enabled=True,
                     cdi_specs=[{"path": "/var/run/cdi/nvidia.json", "kind": "nvidia.com/gpu", "has_all": False}])
    item = D.check_gpu_in_container(NVIDIA, {"container": container},
                                    cdi_specs=[{"path": "/var/run/cdi/nvidia.json", "text": spec}])
    assert item["status"] == "problem"
    assert ("/var/run/cdi/nvidia.json defines 1 GPU device(s), the host has 2; /var/run/cdi/nvidia.json defines no "
            "nvidia.com/gpu=all device") in item["cause"]


# --- 2. Illegal instruction -----------------------------------------------------------------------------------

SIGILL_JOURNAL = [
    PREFIX % "09:10:02" + "/usr/local/bin/vllm: line 8:     7 Illegal instruction     (core dumped) python3 -m "
                          "vllm.entrypoints.openai.api_server",
    "2026-11-30T09:10:02+0000 gpu01 systemd[1]: vllm.service: Main process exited, code=exited, status=132/n/a",
]


def test_avx512_cpu_image_on_a_broadwell_xeon_dies_with_sigill():
    item = D.check_illegal_instruction(HOST, CPU_IMAGE_085, SIGILL_JOURNAL)
    assert item["status"] == "problem"
    assert item["cause"].startswith("The vLLM container died with SIGILL (journal: '/usr/local/bin/vllm: line 8: 7 "
                                    "Illegal instruction (core dumped)")
    assert "needs avx512f, avx512vl, avx512bw, avx512dq" in item["cause"]
    assert "Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz has avx, avx2, fma, f16c but not avx512f" in item["cause"]
    assert item["evidence"]["missing"] == ["avx512f", "avx512vl", "avx512bw", "avx512dq"]
    assert "--build-arg VLLM_CPU_DISABLE_AVX512=true" in item["fix"]
    assert "host-passthrough" in item["fix"]
    # Without a journal the same mismatch is predicted.
    predicted = D.check_illegal_instruction(HOST, CPU_IMAGE_085, None)
    assert predicted["status"] == "problem"
    assert "so it will die with 'Illegal instruction' while loading" in predicted["cause"]


def test_sigill_from_a_cuda_image_names_the_faulting_library():
    kernel = ["Nov 30 09:10:02 gpu01 kernel: traps: python3[2299] trap invalid opcode ip:7f4aa44a4e94 "
              "sp:7ffceec92e60 error:0 in libcustom_ops.so[7f4aa448a000+9f000]"]
    item = D.check_illegal_instruction(HOST, IMAGE_085, SIGILL_JOURNAL, kernel_log=kernel)
    assert item["status"] == "problem"
    assert item["evidence"]["library"] == "libcustom_ops.so"
    assert "a binary in the image (libcustom_ops.so) was built for a newer CPU" in item["cause"]
    assert "journalctl -k | grep 'invalid opcode'" in item["fix"]


def test_avx2_cpu_image_of_0_19_runs_on_the_broadwell_xeon():
    image = dict(CPU_IMAGE_085, reference="vllm/vllm-openai-cpu:v0.19.1", vllm_version="0.19.1", env={})
    item = D.check_illegal_instruction(HOST, image, None)
    assert item["status"] == "healthy"
    assert item["evidence"]["image_needs"] == ["avx2", "f16c"] and item["evidence"]["missing"] == []


def test_image_needs_rules():
    assert D.image_cpu_needs(IMAGE_085)["flags"] == []
    assert D.image_cpu_needs(dict(CPU_IMAGE_085, env={"VLLM_CPU_DISABLE_AVX512": "true"}))["flags"] == ["avx2"]
    assert D.image_cpu_needs({"reference": "x", "cpu_flags_required": ["avx512f"]})["flags"] == ["avx512f"]
    assert D.image_cpu_needs(None) is None


def test_no_cpu_flags_is_unknown():
    item = D.check_illegal_instruction({"container": CONTAINER_OK}, IMAGE_085, None)
    assert item["status"] == "unknown" and "/proc/cpuinfo" in item["fix"]


# --- 3. no kernel image ---------------------------------------------------------------------------------------

NO_KERNEL = [PREFIX % "09:10:42" + "RuntimeError: CUDA error: no kernel image is available for execution on the "
                                   "device"]


def test_image_without_sm70_on_v100():
    item = D.check_no_kernel_image(NVIDIA, IMAGE_020, NO_KERNEL)
    assert item["status"] == "problem"
    assert item["cause"] == ("vllm/vllm-openai:v0.20.0's arch list (7.5 8.0 8.6 8.9 9.0 10.0 11.0 12.0+PTX) has no "
                             "SASS for 7.0 and no PTX at or below it, so Tesla V100-PCIE-32GB (CC 7.0) fails with 'no "
                             "kernel image is available for execution on the device'; the journal shows it.")
    assert "vllm/vllm-openai:v0.8.5 (CUDA 12.4)" in item["fix"] and "sm_70" in item["fix"]
    assert "CUDA_FORCE_PTX_JIT=1 cannot help" in item["fix"]
    assert item["evidence"]["reach"] == [{"gpu": "Tesla V100-PCIE-32GB", "cc": "7.0", "reach": None,
                                          "with_force_ptx_jit": None}]


def test_ptx_only_image_is_jit_compiled_when_the_driver_can():
    image = dict(IMAGE_085, reference="registry.lab/vllm-openai:sm60-ptx", arch_list=["6.0", "6.1+PTX"])
    item = D.check_no_kernel_image(NVIDIA, image, HEALTHY_JOURNAL)
    assert item["status"] == "healthy"
    assert "only through PTX JIT (the image has no SASS for it; arch list 6.0 6.1+PTX)" in item["cause"]
    assert "CUDA_CACHE_PATH" in item["fix"] and "CUDA_CACHE_MAXSIZE" in item["fix"]
    # PTX from CUDA 12.8 cannot be compiled by the R550 driver (CUDA 12.4).
    item = D.check_no_kernel_image(NVIDIA, dict(image, cuda_version="12.8.1"), None)
    assert item["status"] == "problem"
    assert "built by CUDA 12.8.1, which driver 550.54.14 (CUDA 12.4) cannot JIT-compile" in item["cause"]
    assert "a driver with CUDA 12.8 or newer" in item["fix"]


def test_force_ptx_jit_without_ptx_for_volta():
    item = D.check_no_kernel_image(NVIDIA, IMAGE_085, None, env="CUDA_FORCE_PTX_JIT=1\nHF_HUB_OFFLINE=1\n")
    assert item["status"] == "problem"
    assert "carries PTX only for 9.0" in item["cause"]
    assert "vllm_server_force_ptx_jit: false" in item["fix"]
    assert item["evidence"]["reach"][0] == {
        "gpu": "Tesla V100-PCIE-32GB", "cc": "7.0", "reach": "sass", "with_force_ptx_jit": None}


def test_force_ptx_jit_with_ptx_works_but_costs_the_first_start():
    image = dict(IMAGE_085, arch_list=["7.0+PTX", "8.0"])
    item = D.check_no_kernel_image(NVIDIA, image, None, env={"CUDA_FORCE_PTX_JIT": "1"})
    assert item["status"] == "healthy"
    assert "CUDA_FORCE_PTX_JIT=1 is set" in item["cause"]
    assert item["fix"].startswith("1) remove CUDA_FORCE_PTX_JIT (vllm_server_force_ptx_jit: false)")


def test_journal_says_no_kernel_image_although_the_arch_list_has_sm70():
    item = D.check_no_kernel_image(NVIDIA, IMAGE_085, NO_KERNEL)
    assert item["status"] == "problem"
    assert "although vllm/vllm-openai:v0.8.5's arch list (7.0 7.5 8.0 8.6 8.9 9.0+PTX" in item["cause"]
    assert "Marlin" in item["cause"]
    assert "probe: true and gpu_check: true" in item["fix"] and "gptq_marlin" in item["fix"]


def test_opt_in_ptx_jit_test_is_recorded():
    out = open_fixture("gpu_check_no_kernel_image.stdout")
    item = D.check_no_kernel_image(NVIDIA, IMAGE_085, None, ptx_jit_test={"rc": 1, "stdout": out, "stderr": ""})
    assert item["status"] == "healthy"
    assert item["evidence"]["ptx_jit_test"]["category"] == "no_kernel_image"
    assert "only its SASS does" in item["evidence"]["ptx_jit_note"]


def test_unknown_arch_list_with_journal_evidence_is_a_problem():
    item = D.check_no_kernel_image(NVIDIA, {"reference": "vllm/vllm-openai:v0.9.0"}, NO_KERNEL)
    assert item["status"] == "problem"
    assert "collect labfleet.vllm.vllm_image_facts (probe: true)" in item["fix"]
    assert D.check_no_kernel_image(NVIDIA, {"reference": "vllm/vllm-openai:v0.9.0"}, None)["status"] == "unknown"


def open_fixture(name):
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "image", name)
    with open(path) as handle:
        return handle.read()


# --- 4. Out of memory -----------------------------------------------------------------------------------------


def test_oom_under_load_on_the_reference_70b_gptq_gives_settings_that_fit():
    plan_verdict = verdict(LLAMA_70B_GPTQ, GPTQ_ARGS)
    instance = plan_verdict["instances"][0]
    item = D.check_out_of_memory(instance, [SERVING, BUSY, TORCH_OOM], gate_inputs=gate_inputs(LLAMA_70B_GPTQ),
                                 nvidia=NVIDIA)
    assert item["status"] == "problem"
    assert item["cause"].startswith("The journal shows an out-of-memory error under load (after the server started): "
                                    "'ERROR 11-30 10:40:11 [engine.py:160] torch.OutOfMemoryError: CUDA out of memory. "
                                    "Tried to allocate 1.96 GiB.")
    assert "weights 18.58 GiB" in item["cause"]
    suggested = item["evidence"]["suggested"]
    assert (suggested["gpu_memory_utilization"], suggested["max_num_seqs"], suggested["max_model_len"]) == \
        (0.91, 16, 16384)
    assert ("set gpu_memory_utilization 0.91 (was 0.92), max_num_seqs 16 (was 32), max_model_len 16384 (was 32768)"
            in item["fix"])
    assert "--gpu-memory-utilization 0.91 --max-num-seqs 16 --max-model-len 16384" in item["fix"]
    fit = fits_under_load(LLAMA_70B_GPTQ, NVIDIA["gpus"], suggested)
    assert fit["load_ok"] is True and fit["fits_one_sequence"] is True


def test_the_same_settings_without_oom_in_the_journal_are_healthy_with_a_warning():
    plan_verdict = verdict(LLAMA_70B_GPTQ, GPTQ_ARGS)
    item = D.check_out_of_memory(plan_verdict["instances"][0], [SERVING, BUSY],
                                 gate_inputs=gate_inputs(LLAMA_70B_GPTQ), nvidia=NVIDIA)
    assert item["status"] == "healthy"
    assert "under a load peak the 2.56 GiB outside the budget is below the 4.62 GiB the doctor keeps" in item["cause"]
    assert item["fix"].startswith("nothing now; if it runs out of memory under load: set gpu_memory_utilization 0.91")


def test_no_cache_blocks_at_startup():
    args = dict(GPTQ_ARGS, gpu_memory_utilization=0.80)
    plan_verdict = verdict(LLAMA_70B_GPTQ, args)
    assert plan_verdict["instances"][0]["memory_plan"]["fits_one_sequence"] is False
    line = PREFIX % "09:11:40" + ("ValueError: No available memory for the cache blocks. Try increasing "
                                  "`gpu_memory_utilization` when initializing the engine.")
    item = D.check_out_of_memory(plan_verdict["instances"][0], [line], gate_inputs=gate_inputs(LLAMA_70B_GPTQ),
                                 nvidia=NVIDIA)
    assert item["status"] == "problem"
    assert "at startup" in item["cause"]
    assert item["evidence"]["suggested"]["max_model_len"] == 16384
    assert item["evidence"]["suggested"]["gpu_memory_utilization"] == 0.80
    assert "max_model_len 16384 (was 32768)" in item["fix"]
    assert fits_under_load(LLAMA_70B_GPTQ, NVIDIA["gpus"], item["evidence"]["suggested"])["load_ok"] is True
    # The plan alone predicts it, without a journal.
    predicted = D.check_out_of_memory(plan_verdict["instances"][0], None, gate_inputs=gate_inputs(LLAMA_70B_GPTQ),
                                      nvidia=NVIDIA)
    assert predicted["status"] == "problem"
    assert predicted["cause"].startswith("The plan leaves no room for one full 32768-token sequence")
    assert predicted["evidence"]["suggested"] == item["evidence"]["suggested"]


def test_max_model_len_larger_than_the_kv_cache_quotes_vllms_estimate():
    args = dict(GPTQ_ARGS, gpu_memory_utilization=0.80)
    line = PREFIX % "09:11:40" + ("ValueError: The model's max seq len (32768) is larger than the maximum number of "
                                  "tokens that can be stored in KV cache (15232). Try increasing "
                                  "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
                                  "engine.")
    item = D.check_out_of_memory(verdict(LLAMA_70B_GPTQ, args)["instances"][0], [line],
                                 gate_inputs=gate_inputs(LLAMA_70B_GPTQ), nvidia=NVIDIA)
    assert item["status"] == "problem"
    assert item["fix"].startswith("1) max_model_len 15232 or less")


def test_free_memory_below_the_requested_share():
    args = {"tensor_parallel_size": 1, "dtype": "float16", "gpu_memory_utilization": 0.92, "max_model_len": 8192,
            "max_num_seqs": 64}
    plan_verdict = verdict(LLAMA_8B, args, gpus=[0])
    line = PREFIX % "09:11:02" + ("ValueError: Free memory on device cuda:0 (20.12/31.74 GiB) on startup is less "
                                  "than desired GPU memory utilization (0.92, 29.20 GiB). Decrease GPU memory "
                                  "utilization or reduce GPU memory used by other processes.")
    item = D.check_out_of_memory(plan_verdict["instances"][0], [line], gate_inputs=gate_inputs(LLAMA_8B),
                                 nvidia=NVIDIA)
    assert item["status"] == "problem"
    assert item["evidence"]["suggested"]["gpu_memory_utilization"] == 0.61
    assert "gpu_memory_utilization 0.61 (was 0.92)" in item["fix"]
    assert "oom_free_memory" in [s["key"] for s in item["evidence"]["sources"]]


def test_cudagraph_capture_oom_suggests_eager_mode():
    args = {"tensor_parallel_size": 1, "dtype": "float16", "gpu_memory_utilization": 0.92, "max_model_len": 8192,
            "max_num_seqs": 64}
    req = request(args, gpus=[0])
    req["enforce_eager"] = False
    plan_verdict = P.plan(gpus=NVIDIA["gpus"], driver_version="550.54.14", image=IMAGE_085, model=LLAMA_8B,
                          request=req, nvlink=False, today=TODAY)
    instance = plan_verdict["instances"][0]
    assert instance["enforce_eager"] is False
    journal = [PREFIX % "09:11:50" + ("INFO 11-30 09:11:50 [model_runner.py:1450] Capturing cudagraphs for decoding. "
                                      "This may lead to unexpected consequences if the model is not static."),
               PREFIX % "09:11:58" + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB."]
    item = D.check_out_of_memory(instance, journal, gate_inputs=gate_inputs(LLAMA_8B), nvidia=NVIDIA)
    assert item["status"] == "problem"
    assert "at startup" in item["cause"]
    # The plan was judged again with the CUDA graphs the instance's enforce_eager false brings.
    assert item["evidence"]["plan_rejudged"] == "enforce_eager is false but the plan has no CUDA graphs"
    assert "0.44 GiB CUDA graphs" in item["cause"]
    assert item["evidence"]["suggested"] == dict(instance["vllm_args"], enforce_eager=True)
    assert item["fix"].startswith("set preflight_deployment.enforce_eager: true (flags --enforce-eager): the plan "
                                  "then keeps 13.38 GiB of KV cache per GPU")
    assert "oom_cudagraph" in [s["key"] for s in item["evidence"]["sources"]]


def test_deployed_settings_that_differ_from_the_plan_are_judged():
    plan_verdict = verdict(LLAMA_8B, REFERENCE_ARGS)
    argv = ["--tensor-parallel-size", "2", "--dtype", "float16", "--gpu-memory-utilization=0.97",
            "--max-model-len", "32768", "--max-num-seqs", "32", "--enforce-eager"]
    item = D.check_out_of_memory(plan_verdict["instances"][0], [SERVING, BUSY],
                                 deployed_args=D.parse_vllm_argv(argv), gate_inputs=gate_inputs(LLAMA_8B),
                                 nvidia=NVIDIA)
    assert item["evidence"]["deployed_differs_from_plan"] == {"gpu_memory_utilization": [0.92, 0.97]}
    assert item["evidence"]["plan"]["util"] == 0.97
    assert "32.00 GiB x 0.97" in item["cause"]


def test_no_plan_is_unknown_and_a_journal_oom_without_plan_is_a_problem():
    assert D.check_out_of_memory(None, None)["status"] == "unknown"
    item = D.check_out_of_memory(None, [SERVING, TORCH_OOM])
    assert item["status"] == "problem"
    assert "lower max_num_seqs first" in item["fix"] and "memory_plan" in item["fix"]


def test_memory_fit_reads_the_plan():
    plan = verdict(LLAMA_8B, REFERENCE_ARGS)["instances"][0]["memory_plan"]
    fit = D.memory_fit(plan)
    assert fit["total"] == 32 * 1024 ** 3
    assert fit["headroom"] == 32 * 1024 ** 3 - int(32 * 1024 ** 3 * 0.92)
    assert fit["outside"] == 512 * 1024 ** 2 and fit["outside_parts"] == {"cuda_context": 512 * 1024 ** 2}
    assert fit["margin"] == plan["reserve_model"]["parts"]["activation_peak"]
    assert (fit["startup_ok"], fit["load_ok"]) == (True, False)
    assert D.memory_fit({}) is None


# --- 5. Tensor parallelism over PCIe --------------------------------------------------------------------------

ACS_LSPCI = """00:00.0 Host bridge: Intel Corporation Xeon E7 v4/Xeon E5 v4/Xeon E3 v4/Xeon D DMI2 (rev 01)
3a:00.0 PCI bridge: Intel Corporation Sky Lake-E PCI Express Root Port A (rev 07) (prog-if 00 [Normal decode])
\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-
\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-
3b:00.0 3D controller: NVIDIA Corporation GV100GL [Tesla V100 PCIe 32GB] (rev a1)
5d:00.0 PCI bridge: Intel Corporation Sky Lake-E PCI Express Root Port C (rev 07) (prog-if 00 [Normal decode])
\t\tACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-
"""
TOPO_P2P_OK = " \tGPU0\tGPU1\t\n GPU0\tX\tOK\t\n GPU1\tOK\tX\t\n\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n"


def tp_instance():
    return verdict(LLAMA_8B, REFERENCE_ARGS)["instances"][0]


def test_engine_iteration_timeout_is_gated_nccl_with_settings_to_try():
    hang = PREFIX % "11:02:10" + ("ERROR 11-30 11:02:10 [async_llm_engine.py:878] Engine iteration timed out. This "
                                  "should never happen!")
    item = D.check_tensor_parallel_pcie(tp_instance(), NVIDIA, [SERVING, BUSY, hang])
    assert item["status"] == "problem"
    assert item["evidence"]["state"] == "gated(nccl)" and item["evidence"]["hang"]["fault"] == "engine_timeout"
    assert "hangs in a collective (journal: 'ERROR 11-30 11:02:10 [async_llm_engine.py:878] Engine iteration timed " \
           "out." in item["cause"]
    fix = item["fix"]
    assert fix.startswith("try in this order, one change and one restart at a time: 1) NCCL_P2P_DISABLE=\"1\"")
    for text in ('NCCL_P2P_LEVEL="NVL"', "--disable-custom-all-reduce", 'NCCL_IB_DISABLE="1"', 'NCCL_DEBUG="INFO"',
                 "torchrun --nproc-per-node=2"):
        assert text in fix
    assert fix.index("NCCL_P2P_DISABLE") < fix.index("--disable-custom-all-reduce") < fix.index("NCCL_IB_DISABLE")
    assert "engine_timeout" in [s["key"] for s in item["evidence"]["sources"]]


def test_nccl_watchdog_timeout():
    line = ("[rank1]:[E1130 11:02:10.433063423 ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=8812, OpType=ALLREDUCE, NumelIn=8388608, NumelOut=8388608, "
            "Timeout(ms)=600000) ran for 600081 milliseconds before timing out.")
    item = D.check_tensor_parallel_pcie(tp_instance(), NVIDIA, [SERVING, line])
    assert item["status"] == "problem" and item["evidence"]["hang"]["fault"] == "nccl_timeout"


def test_a_server_that_stopped_producing_tokens_with_p2p_already_off():
    item = D.check_tensor_parallel_pcie(tp_instance(), NVIDIA, [SERVING, BUSY, STALLED],
                                        env={"NCCL_P2P_DISABLE": "1", "HF_TOKEN": "hf_x"})
    assert item["status"] == "problem"
    assert item["evidence"]["state"] == "gated(nccl)" and item["evidence"]["hang"]["fault"] == "stall"
    assert "stopped producing tokens" in item["cause"] and "P2P is already off (NCCL_P2P_DISABLE=1)" in item["cause"]
    assert "NCCL_P2P_DISABLE" not in item["fix"] and "NCCL_P2P_LEVEL" not in item["fix"]
    assert item["fix"].startswith("try in this order, one change and one restart at a time: 1) "
                                  "--disable-custom-all-reduce")


def test_acs_on_the_root_port_with_the_iommu_on():
    nvidia = dict(NVIDIA, topology={"matrix": {"0": {"1": "PHB"}, "1": {"0": "PHB"}},
                                    "pairs": [{"a": 0, "b": 1, "link": "PHB"}]})
    item = D.check_tensor_parallel_pcie(tp_instance(), nvidia, [SERVING, BUSY], topo_p2p=TOPO_P2P_OK,
                                        lspci_acs=ACS_LSPCI, kernel_cmdline="ro quiet intel_iommu=on")
    assert item["status"] == "problem"
    assert item["evidence"]["acs_enabled_on"] == ["3a:00.0"] and item["evidence"]["iommu"] == "on"
    assert item["cause"] == ("Tensor parallelism 2 over PHB between GPU 0 and 1: the driver reports P2P OK between "
                             "GPU 0 and 1 while ACS is enabled on 3a:00.0 and the IOMMU is on: NCCL's P2P copies are "
                             "redirected through the root complex (slow) or hang.")
    assert "ECAP_ACS+0x6.w=0000" in item["fix"] and "iommu=pt" in item["fix"]
    assert 'Meanwhile, or where the BIOS cannot be changed: NCCL_P2P_DISABLE="1"' in item["fix"]


def test_nvlink_pair_is_healthy_and_single_gpu_is_not_applicable():
    nvidia = dict(NVIDIA, nvlink=True, topology={"matrix": {}, "pairs": [{"a": 0, "b": 1, "link": "NV2"}]})
    item = D.check_tensor_parallel_pcie(tp_instance(), nvidia, [SERVING, BUSY])
    assert item["status"] == "healthy" and item["cause"] == ("GPUs 0 and 1 are linked by NVLink (NV2); no hang in the "
                                                             "journal.")
    single = verdict(LLAMA_8B, dict(REFERENCE_ARGS, tensor_parallel_size=1), gpus=[0])["instances"][0]
    item = D.check_tensor_parallel_pcie(single, NVIDIA, [SERVING])
    assert item["status"] == "not_applicable" and "tensor_parallel_size is 1" in item["cause"]


def test_topology_from_raw_topo_text_when_the_facts_lack_it():
    topo = ("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \tPIX\t0-19\t0\t\tN/A\n"
            "GPU1\tPIX\t X \t0-19\t0\t\tN/A\n\nLegend:\n\n  X    = Self\n")
    item = D.check_tensor_parallel_pcie(tp_instance(), dict(NVIDIA, topology={"pairs": []}), [SERVING, BUSY, IDLE],
                                        topo_matrix=topo)
    assert item["status"] == "healthy"
    assert item["evidence"]["links"] == ["PIX"] and "PIX: through one PCIe switch" in item["cause"]


def test_small_shm_adds_the_ipc_fix():
    shm = ("gpu01:2211:2290 [1] include/shm.h:28 NCCL WARN Error while creating shared memory segment "
           "/dev/shm/nccl-SqyhGX (size 9637888)")
    lines = [SERVING, PREFIX % "09:20:00" + shm,
             PREFIX % "09:30:00" + "ERROR 11-30 09:30:00 [async_llm_engine.py:878] Engine iteration timed out."]
    item = D.check_tensor_parallel_pcie(tp_instance(), NVIDIA, lines)
    assert item["status"] == "problem"
    assert "vllm_server_ipc_host: true or vllm_server_shm_size: 16g" in item["fix"]


# --- journal, parsers, report ---------------------------------------------------------------------------------


def test_classify_journal_states_and_markers():
    journal = D.classify_journal(SIGILL_JOURNAL + NO_KERNEL + [SERVING, TORCH_OOM, BUSY, STALLED])
    assert sorted(journal["faults"]) == ["illegal_instruction", "no_kernel_image", "oom_cuda"]
    assert journal["states"] == ["crashed(sigill)", "failed(no_kernel_image)", "failed(oom)", "gated(nccl)"]
    assert journal["serving_line"] == 3 and journal["metrics_lines"] == 2
    assert journal["stall"]["running"] == 8 and journal["stall"]["generation_tps"] == 0.0
    expected = "vllm.service: Main process exited, code=exited, status=132/n/a"
    assert journal["faults"]["illegal_instruction"][1]["text"] == expected
    assert D.classify_journal(None) is None
    assert D.classify_journal(HEALTHY_JOURNAL)["stall"] is None


def test_sampler_warmup_oom_is_classified_before_the_generic_oom():
    line = ("RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy requests. Please try "
            "lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.")
    assert list(D.classify_journal([line])["faults"]) == ["oom_sampler"]


def test_parse_vllm_argv_and_container_env():
    args = D.parse_vllm_argv(["--model", "/model", "--tensor-parallel-size", "2", "--gpu-memory-utilization=0.92",
                              "--max-num-seqs", "32", "--enforce-eager", "--disable-log-stats",
                              "--served-model-name", "quasar"])
    assert args == {"model": "/model", "tensor_parallel_size": 2, "gpu_memory_utilization": 0.92,
                    "max_num_seqs": 32, "enforce_eager": True, "disable_log_stats": True,
                    "served_model_name": "quasar"}
    env = D.container_env("# managed\nNCCL_P2P_DISABLE=1\nVLLM_API_KEY=sk-1\nHF_TOKEN=hf_1\nCUDA_FORCE_PTX_JIT=1\n")
    assert env == {"NCCL_P2P_DISABLE": "1", "CUDA_FORCE_PTX_JIT": "1"}
    assert D.parse_gpu_list(SMI_L) == [{"index": 0, "name": "Tesla V100-PCIE-32GB", "uuid": UUID0},
                                       {"index": 1, "name": "Tesla V100-PCIE-32GB", "uuid": UUID1}]


def test_acs_and_iommu_parsers():
    assert D.parse_acs(ACS_LSPCI) == {
        "3a:00.0": {"name": ("PCI bridge: Intel Corporation Sky Lake-E PCI Express Root Port A (rev 07) (prog-if 00 "
                             "[Normal decode])"),
                    "flags": ["SrcValid+", "TransBlk-", "ReqRedir+", "CmpltRedir+", "UpstreamFwd+", "EgressCtrl-",
                              "DirectTrans-"], "enabled": True},
        "5d:00.0": {"name": ("PCI bridge: Intel Corporation Sky Lake-E PCI Express Root Port C (rev 07) (prog-if 00 "
                             "[Normal decode])"),
                    "flags": ["SrcValid-", "TransBlk-", "ReqRedir-", "CmpltRedir-", "UpstreamFwd-", "EgressCtrl-",
                              "DirectTrans-"], "enabled": False}}
    assert D.iommu_mode("ro intel_iommu=on iommu=pt") == "passthrough"
    assert D.iommu_mode("ro amd_iommu=on") == "on"
    assert D.iommu_mode("ro quiet") is None


def test_every_fact_has_a_source_and_a_confidence():
    for key, (text, confidence) in D.SOURCES.items():
        assert text and confidence in ("verified", "third_party", "inferred"), key
    for _fault, _pattern, source in D.JOURNAL_FAULTS:
        assert source in D.SOURCES
    plan_verdict = verdict(LLAMA_8B, REFERENCE_ARGS)
    result = D.diagnose(NVIDIA, HOST, IMAGE_085, plan_verdict, healthy_raw(plan_verdict))
    for item in result["findings"]:
        assert item["evidence"]["sources"], item["check"]


@pytest.mark.parametrize("findings,expected", [
    ([{"status": "healthy"}, {"status": "not_applicable"}], "healthy"),
    ([{"status": "healthy"}, {"status": "unknown"}], "unknown"),
    ([{"status": "unknown"}, {"status": "problem"}], "problem"),
    ([{"status": "not_applicable"}], "not_applicable"),
])
def test_overall_status(findings, expected):
    assert D.overall_status(findings) == expected
