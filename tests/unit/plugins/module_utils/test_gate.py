# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit and property tests for the deployment gate (_gate.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import datetime
import os

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _gate as G
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate import GateInputError, evaluate
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge import _policy as P

TODAY = datetime.date(2026, 9, 1)
GIB = 1024 ** 3

V100 = {"name": "Tesla V100-PCIE-32GB", "compute_capability": "7.0", "memory_total_mib": 32768,
        "architecture": "Volta", "uuid": "GPU-0000", "index": 0}
P100 = {"name": "Tesla P100-PCIE-16GB", "compute_capability": "6.0", "memory_total_mib": 16384}
T4 = {"name": "Tesla T4", "compute_capability": "7.5", "memory_total_mib": 15360}
A100 = {"name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0", "memory_total_mib": 81920}

# Image facts come from the policy, where they are written once (the 0.8.5 image is CUDA 12.4.0 and
# its NVIDIA_REQUIRE_CUDA lists the 470, 525 and 535 branches).
RELEASE_0_8_5 = P.VLLM_RELEASES["0.8.5"]
REQUIRE_12_4 = RELEASE_0_8_5["require_cuda"]
REQUIRE_12_8 = P.require_cuda_string("12.8")
QUANT_0_8_5 = list(RELEASE_0_8_5["quantization_methods"])
IMAGE_0_8_5 = {"cuda_version": RELEASE_0_8_5["cuda_base"], "require_cuda": REQUIRE_12_4,
               "arch_list": RELEASE_0_8_5["vllm_arch"].split(),
               "quantization_methods": QUANT_0_8_5, "vllm_version": "0.8.5", "digest": "sha256:abc"}
LLAMA_8B = {"param_count": 8030261248, "weight_bytes": 16060522496, "num_hidden_layers": 32,
            "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 8192,
            "torch_dtype": "bfloat16", "model_type": "llama"}
LLAMA_70B = {"param_count": 70553706496, "num_hidden_layers": 80, "num_key_value_heads": 8, "head_dim": 128,
             "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}
FP16_TP2 = {"tensor_parallel_size": 2, "dtype": "float16", "gpu_memory_utilization": 0.92, "max_model_len": 8192,
            "max_num_seqs": 32}


def gate(**kwargs):
    args = dict(gpus=[V100, V100], driver_version="550.54.14", image=IMAGE_0_8_5, model=LLAMA_8B,
                vllm=FP16_TP2, nvlink=False, today=TODAY)
    args.update(kwargs)
    return evaluate(**args)


def codes(result, kind="reasons"):
    return [item["code"] for item in result[kind]]


def message(result, code, kind="reasons"):
    found = [item["message"] for item in result[kind] if item["code"] == code]
    assert found, "%s not in %s" % (code, result[kind])
    return found[0]


# --- acceptance cases of issue 3 ---------------------------------------------------------------

def test_reference_v100_fp16_is_allowed():
    result = gate()
    assert result["allowed"] is True, result["reasons"]
    assert result["reasons"] == []
    assert result["effective_vllm"]["dtype"] == "float16"
    assert "DTYPE_AUTOFIXED" not in codes(result, "warnings")
    assert set(result) >= {"allowed", "reasons", "warnings", "effective_vllm", "plan"}
    assert result["plan"]["fits_one_sequence"] is True


def test_v100_bfloat16_is_autofixed():
    result = gate(vllm=dict(FP16_TP2, dtype="bfloat16"))
    assert result["allowed"] is True
    assert result["effective_vllm"]["dtype"] == "float16"
    text = message(result, "DTYPE_AUTOFIXED", "warnings")
    assert "Tesla V100-PCIE-32GB (compute capability 7.0) has no bfloat16" in text
    assert "float16" in text


def test_v100_bfloat16_refused_when_auto_fix_off():
    result = gate(vllm=dict(FP16_TP2, dtype="bfloat16"), policy_overrides={"auto_fix": False})
    assert result["allowed"] is False
    assert codes(result) == ["DTYPE_UNSUPPORTED"]
    assert message(result, "DTYPE_UNSUPPORTED") == (
        "Tesla V100-PCIE-32GB (compute capability 7.0) has no bfloat16; use --dtype float16 "
        "(vllm.dtype: float16)")
    assert result["effective_vllm"]["dtype"] == "bfloat16"


def test_v100_awq_is_refused():
    result = gate(model=dict(LLAMA_8B, quant_method="awq", weight_bytes=5 * 10 ** 9))
    assert "QUANTIZATION_UNSUPPORTED_ON_ARCH" in codes(result)
    text = message(result, "QUANTIZATION_UNSUPPORTED_ON_ARCH")
    assert "7.5" in text and "gptq" in text and "gguf" in text and "bitsandbytes" in text


def test_p100_is_refused():
    result = gate(gpus=[P100])
    assert "COMPUTE_CAPABILITY_TOO_LOW" in codes(result)
    text = message(result, "COMPUTE_CAPABILITY_TOO_LOW")
    assert "Tesla P100-PCIE-16GB (compute capability 6.0)" in text and "7.0" in text


@pytest.mark.parametrize("driver", ["595.71.05", "595.45.04", "590.44.01"])
def test_v100_on_r590_plus_is_refused(driver):
    result = gate(driver_version=driver)
    assert "DRIVER_BRANCH_UNSUPPORTED_FOR_ARCH" in codes(result)
    text = message(result, "DRIVER_BRANCH_UNSUPPORTED_FOR_ARCH")
    assert "R580" in text and "Volta" in text and "proprietary" in text


def test_arch_list_without_7_0_is_refused():
    result = gate(image=dict(IMAGE_0_8_5, arch_list=["7.5", "8.0", "8.6", "9.0"]))
    assert "IMAGE_LACKS_ARCH" in codes(result)
    assert "no kernel image is available" in message(result, "IMAGE_LACKS_ARCH")


def test_tensor_parallel_4_on_2_gpus_is_refused():
    result = gate(vllm=dict(FP16_TP2, tensor_parallel_size=4))
    assert "TENSOR_PARALLEL_EXCEEDS_GPUS" in codes(result)
    assert "set tensor_parallel_size to 2" in message(result, "TENSOR_PARALLEL_EXCEEDS_GPUS")


def test_70b_fp16_on_2x32gb_is_refused_with_numbers():
    result = gate(model=LLAMA_70B, vllm=dict(FP16_TP2, max_model_len=32768))
    assert result["allowed"] is False
    assert "INSUFFICIENT_VRAM" in codes(result)
    text = message(result, "INSUFFICIENT_VRAM")
    # 70.55e9 params x 2 bytes = 131.4 GiB, 65.7 GiB per GPU; 32 GiB x 0.92 - 1.5 GiB = 27.9 GiB usable
    assert "65.7 GiB per GPU" in text
    assert "131.4 GiB" in text
    assert "27.9 GiB per GPU is usable" in text
    assert "GPTQ" in text
    plan = result["plan"]
    assert plan["weights_bytes_total"] == 70553706496 * 2
    assert plan["weights_source"] == "param_count"
    assert plan["fits_one_sequence"] is False
    assert plan["max_concurrent_full_sequences"] == 0


# --- GPUs --------------------------------------------------------------------------------------

def test_no_gpu():
    result = gate(gpus=[])
    assert codes(result) == ["NO_GPU"]


def test_heterogeneous_gpus():
    result = gate(gpus=[V100, T4])
    assert "HETEROGENEOUS_GPUS" in codes(result)


def test_uneven_memory_warns_and_plans_with_smallest():
    small = dict(V100, name="Tesla V100-PCIE-16GB", memory_total_mib=16384)
    result = gate(gpus=[V100, small])
    assert "GPU_MEMORY_UNEVEN" in codes(result, "warnings")
    assert result["plan"]["gpu_memory_total_bytes"] == 16384 * 1024 * 1024


def test_unknown_compute_capability_is_a_reason_not_an_error():
    result = gate(gpus=[{"name": "NVIDIA Device 1db6", "compute_capability": None, "memory_total_mib": 32768}])
    assert "COMPUTE_CAPABILITY_UNKNOWN" in codes(result)


def test_policy_min_compute_capability():
    result = gate(policy_overrides={"min_compute_capability": "7.5"})
    assert "COMPUTE_CAPABILITY_TOO_LOW" in codes(result)
    assert "7.5" in message(result, "COMPUTE_CAPABILITY_TOO_LOW")


def test_vllm_0_20_needs_7_5():
    image = {"cuda_version": "13.0.2", "vllm_version": "0.20.0"}
    result = gate(image=image, driver_version="580.95.05")
    assert "COMPUTE_CAPABILITY_TOO_LOW" in codes(result)
    assert "v0.19.1" in message(result, "COMPUTE_CAPABILITY_TOO_LOW")
    # the policy's profile of 0.20.0 supplies the arch list (no 7.0)
    assert "IMAGE_LACKS_ARCH" in codes(result)


def test_vllm_0_19_1_on_v100_with_r580_is_allowed():
    image = {"cuda_version": "12.9.1", "arch_list": "7.0;7.5;8.0;8.9;9.0;10.0;12.0", "vllm_version": "0.19.1"}
    result = gate(image=image, driver_version="580.95.05")
    assert result["allowed"] is True, result["reasons"]
    assert "DRIVER_BRANCH_EOL" not in codes(result, "warnings")


def test_vllm_0_9_0_torch_without_sm70():
    result = gate(image={"vllm_version": "0.9.0", "cuda_version": "12.8.1"}, driver_version="580.95.05")
    assert "IMAGE_LACKS_ARCH" in codes(result)
    assert "torch" in message(result, "IMAGE_LACKS_ARCH")


# --- driver ------------------------------------------------------------------------------------

def test_driver_library_mismatch():
    result = gate(driver_library_mismatch=True)
    assert "DRIVER_LIBRARY_MISMATCH" in codes(result)
    assert "reboot" in message(result, "DRIVER_LIBRARY_MISMATCH")


def test_driver_unknown_warns_and_reports_requirements():
    result = gate(driver_version=None)
    assert result["allowed"] is True
    assert "DRIVER_UNKNOWN" in codes(result, "warnings")
    assert "R580" in message(result, "DRIVER_UNKNOWN", "warnings")
    assert result["driver_requirements"] == {"architectures": ["Volta"], "min_branch": None,
                                             "max_branch": 580, "kernel_module": "proprietary",
                                             "recommended_branch": 580}


def test_r550_is_end_of_life():
    result = gate()
    text = message(result, "DRIVER_BRANCH_EOL", "warnings")
    assert "R550" in text and "R580" in text


def test_r580_is_not_end_of_life_in_2026():
    result = gate(driver_version="580.95.05")
    assert "DRIVER_BRANCH_EOL" not in codes(result, "warnings")


def test_allowed_driver_branches():
    result = gate(policy_overrides={"allowed_driver_branches": [580]})
    assert "DRIVER_BRANCH_NOT_ALLOWED" in codes(result)


def test_kepler_driver_limit_and_blackwell_floor():
    kepler = {"name": "Tesla K80", "compute_capability": "3.7", "memory_total_mib": 12288}
    result = gate(gpus=[kepler], driver_version="535.104.05", vllm={})
    assert "DRIVER_BRANCH_UNSUPPORTED_FOR_ARCH" in codes(result)
    assert "R470" in message(result, "DRIVER_BRANCH_UNSUPPORTED_FOR_ARCH")
    blackwell = {"name": "NVIDIA B200", "compute_capability": "10.0", "memory_total_mib": 183359}
    result = gate(gpus=[blackwell], driver_version="550.54.14", vllm={})
    assert "DRIVER_BRANCH_UNSUPPORTED_FOR_ARCH" in codes(result)
    assert "R570 or newer" in message(result, "DRIVER_BRANCH_UNSUPPORTED_FOR_ARCH")


def test_require_cuda_rejects_geforce_on_r550():
    gpu = {"name": "NVIDIA GeForce RTX 3090", "compute_capability": "8.6", "memory_total_mib": 24576}
    image = {"cuda_version": "12.8.1", "require_cuda": REQUIRE_12_8}
    result = gate(gpus=[gpu], image=image, vllm={})
    assert "DRIVER_TOO_OLD_FOR_IMAGE" in codes(result)
    text = message(result, "DRIVER_TOO_OLD_FOR_IMAGE")
    assert "R570 or newer" in text and "geforce" in text


def test_require_cuda_admits_tesla_on_r550_and_it_runs_through_minor_version_compat():
    # The brand clause admits it; R550 is above CUDA 12's MVC floor (525), so no cuda-compat
    # libraries are involved and VLLM_ENABLE_CUDA_COMPATIBILITY must not be advised.
    image = {"cuda_version": "12.8.1", "require_cuda": REQUIRE_12_8, "arch_list": "7.0 7.5 8.0"}
    result = gate(image=image)
    assert "DRIVER_TOO_OLD_FOR_IMAGE" not in codes(result)
    assert "FORWARD_COMPAT_REQUIRED" not in codes(result, "warnings")
    assert codes(result, "warnings").count("CUDA_MINOR_VERSION_COMPAT") == 1
    text = message(result, "CUDA_MINOR_VERSION_COMPAT", "warnings")
    assert "brand=tesla,driver>=550,driver<551" in text
    assert "leave VLLM_ENABLE_CUDA_COMPATIBILITY unset" in text


def test_require_cuda_admits_tesla_on_r470_only_through_forward_compat():
    # R470 is below CUDA 12's MVC floor: only the image's cuda-compat libraries make it run.
    image = {"cuda_version": "12.8.1", "require_cuda": REQUIRE_12_8, "arch_list": "7.0 7.5 8.0"}
    result = gate(image=image, driver_version="470.256.02")
    assert "DRIVER_TOO_OLD_FOR_IMAGE" not in codes(result)
    text = message(result, "FORWARD_COMPAT_REQUIRED", "warnings")
    assert "VLLM_ENABLE_CUDA_COMPATIBILITY=1" in text and "525" in text


def test_require_cuda_brand_from_gpu_entry():
    image = {"cuda_version": "12.8.1", "require_cuda": REQUIRE_12_8}
    gpu = dict(V100, name="Some renamed card", brand="geforce")
    result = gate(gpus=[gpu], image=image, vllm={})
    assert "DRIVER_TOO_OLD_FOR_IMAGE" in codes(result)


def test_require_cuda_undecided_for_unknown_brand():
    image = {"cuda_version": "12.8.1", "require_cuda": "cuda>=12.8 brand=tesla,driver>=550,driver<551"}
    gpu = dict(V100, name="Mystery GPU")
    result = gate(gpus=[gpu], image=image, vllm={})
    assert "REQUIRE_CUDA_UNDECIDED" in codes(result, "warnings")
    assert result["allowed"] is True


def test_cuda_13_image_on_r550_is_below_the_mvc_floor():
    result = gate(image={"cuda_version": "13.0.2"}, vllm={})
    assert "DRIVER_TOO_OLD_FOR_IMAGE" in codes(result)
    assert "580" in message(result, "DRIVER_TOO_OLD_FOR_IMAGE")


def test_cuda_13_image_has_no_volta_code():
    result = gate(image={"cuda_version": "13.0.2"}, driver_version="580.95.05", vllm={})
    assert "IMAGE_LACKS_ARCH" in codes(result)
    assert "CUDA 12.x or older" in message(result, "IMAGE_LACKS_ARCH")
    result = gate(gpus=[T4], image={"cuda_version": "13.0.2"}, driver_version="580.95.05", vllm={})
    assert "IMAGE_LACKS_ARCH" not in codes(result)


def test_cuda_12_image_on_r470_without_require_string():
    result = gate(image={"cuda_version": "12.4.1"}, driver_version="470.82.01", vllm={})
    assert "DRIVER_TOO_OLD_FOR_IMAGE" in codes(result)


def test_cuda_12_9_image_on_r550_runs_through_mvc():
    result = gate(image={"cuda_version": "12.9.1", "arch_list": "7.0 8.0"})
    assert result["allowed"] is True
    assert "CUDA_MINOR_VERSION_COMPAT" in codes(result, "warnings")


def test_cuda_driver_version_from_nvml_integer():
    result = gate(image={"cuda_version": "12.9.1", "arch_list": "7.0"}, cuda_driver_version=12040)
    assert "CUDA_MINOR_VERSION_COMPAT" in codes(result, "warnings")
    result = gate(image={"cuda_version": "12.4.1", "arch_list": "7.0"}, cuda_driver_version="12.4")
    assert "CUDA_MINOR_VERSION_COMPAT" not in codes(result, "warnings")


# --- image architectures -----------------------------------------------------------------------

@pytest.mark.parametrize("arch_list", [["sm_70", "sm_80"], "7.0;8.0", [7.0, 8.0], ["sm_60", "sm_70"]])
def test_arch_list_forms(arch_list):
    result = gate(image=dict(IMAGE_0_8_5, arch_list=arch_list))
    assert "IMAGE_LACKS_ARCH" not in codes(result)
    assert "PTX_JIT_ONLY" not in codes(result, "warnings")


def test_ptx_only_reach_warns():
    result = gate(image=dict(IMAGE_0_8_5, arch_list=["6.0+PTX", "8.0"]))
    assert result["allowed"] is True
    assert "PTX_JIT_ONLY" in codes(result, "warnings")


def test_compute_entry_is_ptx_only():
    result = gate(image=dict(IMAGE_0_8_5, arch_list=["compute_70", "sm_80"]))
    assert "PTX_JIT_ONLY" in codes(result, "warnings")


def test_ptx_newer_than_driver_is_refused():
    image = {"cuda_version": "12.9.1", "arch_list": ["6.0+PTX", "8.0"]}
    result = gate(image=image)
    assert "PTX_NEWER_THAN_DRIVER" in codes(result)


def test_sass_binary_compatibility_within_major():
    # sm_70 SASS runs on 7.5; sm_90a runs only on 9.0 exactly; 9.0 SASS does not run on 8.x
    result = gate(gpus=[T4], image=dict(IMAGE_0_8_5, arch_list=["7.0"]))
    assert "IMAGE_LACKS_ARCH" not in codes(result)
    result = gate(gpus=[A100], image=dict(IMAGE_0_8_5, arch_list=["sm_90a", "9.0"]), vllm={})
    assert "IMAGE_LACKS_ARCH" in codes(result)


# --- dtype -------------------------------------------------------------------------------------

def test_dtype_auto_with_bf16_checkpoint_is_autofixed():
    result = gate(vllm=dict(FP16_TP2, dtype="auto"))
    assert result["effective_vllm"]["dtype"] == "float16"
    assert "DTYPE_AUTOFIXED" in codes(result, "warnings")


def test_dtype_missing_counts_as_auto():
    vllm = dict(FP16_TP2)
    del vllm["dtype"]
    result = gate(vllm=vllm)
    assert result["effective_vllm"]["dtype"] == "float16"


def test_dtype_auto_with_fp16_checkpoint_needs_no_fix():
    result = gate(vllm=dict(FP16_TP2, dtype="auto"), model=dict(LLAMA_8B, torch_dtype="float16"))
    assert result["effective_vllm"]["dtype"] == "auto"
    assert result["warnings"] == [w for w in result["warnings"] if w["code"] != "DTYPE_AUTOFIXED"]


def test_dtype_auto_unknown_checkpoint_with_auto_fix_off():
    model = dict(LLAMA_8B)
    del model["torch_dtype"]
    result = gate(vllm=dict(FP16_TP2, dtype="auto"), model=model, policy_overrides={"auto_fix": False})
    assert result["allowed"] is True
    assert "DTYPE_AUTO_UNRESOLVED" in codes(result, "warnings")


def test_bfloat16_on_a100_is_kept():
    result = gate(gpus=[A100], vllm={"dtype": "bfloat16"})
    assert result["effective_vllm"]["dtype"] == "bfloat16"
    assert "DTYPE_AUTOFIXED" not in codes(result, "warnings")


def test_kv_cache_dtype_bf16_autofixed_and_fp8_unverified():
    result = gate(vllm=dict(FP16_TP2, kv_cache_dtype="bfloat16"))
    # 0.8.5's --kv-cache-dtype has no float16: auto keeps the cache in the served float16.
    assert result["effective_vllm"]["kv_cache_dtype"] == "auto"
    assert result["plan"]["kv_cache_dtype_bytes"] == 2
    result = gate(vllm=dict(FP16_TP2, kv_cache_dtype="fp8"))
    assert "KV_CACHE_DTYPE_UNVERIFIED" in codes(result, "warnings")
    assert result["plan"]["kv_cache_dtype_bytes"] == 1


# --- quantization ------------------------------------------------------------------------------

def test_gptq_on_v100_is_allowed_but_marlin_is_not():
    model = dict(LLAMA_8B, quant_method="gptq", weight_bytes=5 * 10 ** 9)
    assert gate(model=model)["allowed"] is True
    result = gate(model=model, vllm=dict(FP16_TP2, quantization="gptq_marlin"))
    assert "QUANTIZATION_UNSUPPORTED_ON_ARCH" in codes(result)
    assert "use quantization gptq" in message(result, "QUANTIZATION_UNSUPPORTED_ON_ARCH")


def test_a_gptq_group_size_the_exllama_kernels_compute_wrong_is_refused():
    # The 4-bit kernels change groups every 32 rows only (policy quantization.gptq.group_size_multiple).
    model = dict(LLAMA_8B, quant_method="gptq", quant_bits=4, quant_group_size=16, weight_bytes=5 * 10 ** 9)
    result = gate(model=model)
    assert codes(result) == ["QUANT_GROUP_SIZE_UNSUPPORTED"]
    text = message(result, "QUANT_GROUP_SIZE_UNSUPPORTED")
    assert "group_size 16" in text and "every 32 rows" in text and "answers wrong tokens" in text
    for group in (32, 64, 128, -1):
        assert gate(model=dict(model, quant_group_size=group))["allowed"] is True, group
    # AWQ has no such rule.
    assert "QUANT_GROUP_SIZE_UNSUPPORTED" not in codes(gate(model=dict(model, quant_method="awq")))


def test_nvfp4_on_v100_suggests_dequantizing():
    model = dict(LLAMA_70B, quant_method="modelopt_fp4", weight_bytes=40 * 10 ** 9)
    result = gate(model=model, vllm=dict(FP16_TP2, max_model_len=32768))
    assert "QUANTIZATION_UNKNOWN_TO_IMAGE" not in codes(result)  # 0.8.5 knows it as nvfp4
    text = message(result, "QUANTIZATION_UNSUPPORTED_ON_ARCH")
    assert "10.0" in text and "serve an FP16 copy of the NVFP4 checkpoint" in text
    # The module it names exists.
    assert "labfleet.vllm.nvfp4_dequantize" in text
    assert os.path.isfile(os.path.join(os.path.dirname(G.__file__), "..", "..", "modules", "nvfp4_dequantize.py"))


def test_quantization_unknown_to_image():
    model = dict(LLAMA_8B, quant_method="mxfp4", weight_bytes=5 * 10 ** 9)
    result = gate(model=model)
    assert "QUANTIZATION_UNKNOWN_TO_IMAGE" in codes(result)
    assert "QUANTIZATION_UNKNOWN_TO_POLICY" in codes(result, "warnings")


def test_compressed_tensors_of_unknown_scheme_is_refused_on_volta_in_0_8_5():
    # Every compressed-tensors scheme of 0.8.5 needs 7.5 or more: the scheme need not be known.
    model = dict(LLAMA_8B, quant_method="compressed-tensors", weight_bytes=5 * 10 ** 9)
    result = gate(model=model)
    assert "QUANTIZATION_UNSUPPORTED_ON_ARCH" in codes(result)
    assert "w8a8_int8 7.5" in message(result, "QUANTIZATION_UNSUPPORTED_ON_ARCH")
    assert "QUANTIZATION_UNKNOWN_TO_IMAGE" not in codes(result)


def test_quantization_mismatch_is_refused():
    model = dict(LLAMA_8B, quant_method="gptq", weight_bytes=5 * 10 ** 9)
    result = gate(model=model, vllm=dict(FP16_TP2, quantization="bitsandbytes"))
    assert "QUANTIZATION_MISMATCH" in codes(result)
    assert "drop vllm.quantization" in message(result, "QUANTIZATION_MISMATCH")


def test_policy_can_lower_a_quantization_floor():
    model = dict(LLAMA_8B, quant_method="awq", weight_bytes=5 * 10 ** 9)
    result = gate(model=model, policy_overrides={"quantization": {"awq": {"min_cc": {"0.8.5": "7.0"}}}})
    assert "QUANTIZATION_UNSUPPORTED_ON_ARCH" not in codes(result)


# --- topology ----------------------------------------------------------------------------------

def test_pcie_without_p2p_only_with_tensor_parallelism_and_no_nvlink():
    assert "PCIE_WITHOUT_P2P" in codes(gate(nvlink=False), "warnings")
    assert "PCIE_WITHOUT_P2P" not in codes(gate(nvlink=True), "warnings")
    assert "PCIE_WITHOUT_P2P" not in codes(gate(nvlink=None), "warnings")
    assert "PCIE_WITHOUT_P2P" not in codes(gate(vllm=dict(FP16_TP2, tensor_parallel_size=1)), "warnings")


# --- memory plan -------------------------------------------------------------------------------

def test_reference_deployment_plan():
    model = dict(LLAMA_70B, quant_method="gptq", weight_bytes=36 * 10 ** 9)
    result = gate(model=model, vllm=dict(FP16_TP2, max_model_len=32768))
    plan = result["plan"]
    assert result["allowed"] is True, result["reasons"]
    assert plan["weights_bytes_per_gpu"] == 18 * 10 ** 9
    assert plan["kv_bytes_per_token_per_gpu"] == 2 * 80 * 4 * 128 * 2 == 163840
    assert plan["usable_bytes_per_gpu"] == int(32 * GIB * 0.92) - 1536 * 1024 * 1024
    assert plan["sequence_kv_bytes_per_gpu"] == 163840 * 32768
    assert plan["fits_one_sequence"] is True
    assert plan["max_concurrent_full_sequences"] == 2
    assert plan["kv_cache_tokens"] == (plan["usable_bytes_per_gpu"] - 18 * 10 ** 9) // 163840


def test_kv_heads_replicated_when_tp_exceeds_them():
    model = dict(LLAMA_8B, num_key_value_heads=2)
    result = gate(gpus=[V100] * 4, vllm=dict(FP16_TP2, tensor_parallel_size=4))
    assert result["plan"]["kv_bytes_per_token_per_gpu"] == 2 * 32 * 2 * 128 * 2
    result = gate(gpus=[V100] * 4, model=model, vllm=dict(FP16_TP2, tensor_parallel_size=4))
    assert result["plan"]["kv_bytes_per_token_per_gpu"] == 2 * 32 * 1 * 128 * 2


def test_pipeline_parallel_splits_layers_and_weights():
    result = gate(vllm=dict(FP16_TP2, tensor_parallel_size=1, pipeline_parallel_size=2))
    plan = result["plan"]
    assert plan["kv_bytes_per_token_per_gpu"] == 2 * 16 * 8 * 128 * 2
    assert plan["weights_bytes_per_gpu"] == 16060522496 // 2
    assert plan["gpus_used"] == 2


def test_one_sequence_that_does_not_fit_suggests_a_max_model_len():
    result = gate(gpus=[V100], model=dict(LLAMA_8B, max_position_embeddings=131072),
                  vllm={"dtype": "float16", "max_model_len": 131072})
    assert "INSUFFICIENT_VRAM" in codes(result)
    text = message(result, "INSUFFICIENT_VRAM")
    assert "131072-token sequence" in text and "lower max_model_len to" in text
    assert result["plan"]["fits_one_sequence"] is False


def test_cpu_offload_reduces_weights_per_gpu():
    result = gate(vllm=dict(FP16_TP2, cpu_offload_gb=2))
    assert result["plan"]["weights_bytes_per_gpu"] == 16060522496 // 2 - 2 * GIB
    assert result["plan"]["cpu_offload_bytes_per_gpu"] == 2 * GIB


def test_reserve_is_a_policy_setting():
    result = gate(policy_overrides={"reserve_mib": 0})
    assert result["plan"]["reserve_bytes"] == 0
    assert result["plan"]["usable_bytes_per_gpu"] == int(32 * GIB * 0.92)


def test_weights_estimated_for_quantized_models_without_weight_bytes():
    model = dict(LLAMA_70B, quant_method="gptq")
    result = gate(model=model, vllm=dict(FP16_TP2, max_model_len=16384))
    assert "WEIGHTS_ESTIMATED" in codes(result, "warnings")
    assert result["plan"]["weights_bytes_total"] == int(round(70553706496 * 0.52))


def test_fp32_checkpoint_weights_rescaled_to_serving_dtype():
    model = dict(LLAMA_8B, torch_dtype="float32", weight_bytes=32121044992)
    result = gate(model=model)
    assert result["plan"]["weights_bytes_total"] == 16060522496


def test_memory_plan_incomplete_without_model():
    result = gate(model=None)
    assert "MEMORY_PLAN_INCOMPLETE" in codes(result, "warnings")
    assert result["plan"]["weights_bytes_total"] is None
    assert result["allowed"] is True


def test_max_model_len_above_model_limit_is_refused():
    # vLLM's _get_and_verify_max_len raises (the startup checks, _vllm_startup.py).
    result = gate(vllm=dict(FP16_TP2, max_model_len="16K"))
    assert result["plan"]["max_model_len"] == 16384
    assert "MAX_MODEL_LEN_EXCEEDS_MODEL" in codes(result)


def test_default_gpu_memory_utilization_and_model_length():
    result = gate(vllm={"tensor_parallel_size": 2})
    assert result["plan"]["gpu_memory_utilization"] == 0.9
    assert result["plan"]["max_model_len"] == 8192


# --- policy code handling, pass-through, purity -------------------------------------------------

def test_ignore_and_promote_codes():
    result = gate(gpus=[P100], policy_overrides={"ignore_codes": ["COMPUTE_CAPABILITY_TOO_LOW"]})
    assert "COMPUTE_CAPABILITY_TOO_LOW" not in codes(result)
    assert message(result, "COMPUTE_CAPABILITY_TOO_LOW", "warnings").startswith("(ignored by policy)")
    result = gate(policy_overrides={"promote_warnings": ["DRIVER_BRANCH_EOL"]})
    assert codes(result) == ["DRIVER_BRANCH_EOL"]
    assert result["allowed"] is False


def test_effective_vllm_passes_extra_keys_through():
    result = gate(vllm=dict(FP16_TP2, dtype="bfloat16", served_model_name="quasar", enforce_eager=True))
    assert result["effective_vllm"]["served_model_name"] == "quasar"
    assert result["effective_vllm"]["enforce_eager"] is True


def test_inputs_are_not_mutated():
    vllm = dict(FP16_TP2, dtype="bfloat16")
    before = copy.deepcopy((vllm, IMAGE_0_8_5, LLAMA_8B, V100))
    gate(vllm=vllm)
    assert (vllm, IMAGE_0_8_5, LLAMA_8B, V100) == before


def test_every_emitted_code_is_documented():
    module_path = os.path.join(os.path.dirname(G.__file__), "..", "..", "modules", "deploy_gate.py")
    with open(module_path) as handle:
        doc = handle.read()
    docs_path = os.path.join(os.path.dirname(G.__file__), "..", "..", "..", "docs", "deploy_gate.md")
    with open(docs_path) as handle:
        md = handle.read()
    for code in list(G.REASON_CODES) + list(G.WARNING_CODES):
        assert "V(%s)" % code in doc, code
        assert "`%s`" % code in md, code
    issue_reasons = ["NO_GPU", "COMPUTE_CAPABILITY_TOO_LOW", "DRIVER_BRANCH_UNSUPPORTED_FOR_ARCH",
                     "DRIVER_TOO_OLD_FOR_IMAGE", "IMAGE_LACKS_ARCH", "DTYPE_UNSUPPORTED",
                     "QUANTIZATION_UNSUPPORTED_ON_ARCH", "QUANTIZATION_UNKNOWN_TO_IMAGE", "INSUFFICIENT_VRAM",
                     "TENSOR_PARALLEL_EXCEEDS_GPUS", "HETEROGENEOUS_GPUS", "DRIVER_LIBRARY_MISMATCH"]
    issue_warnings = ["DRIVER_BRANCH_EOL", "PTX_JIT_ONLY", "PCIE_WITHOUT_P2P", "DTYPE_AUTOFIXED"]
    assert set(issue_reasons) <= set(G.REASON_CODES)
    assert set(issue_warnings) <= set(G.WARNING_CODES)


# --- input validation --------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,fragment", [
    (dict(gpus="two V100"), "gpus: expected a list"),
    (dict(gpus=["V100"]), "gpus[0]: expected a mapping"),
    (dict(gpus=[dict(V100, compute_capability="seven")]), "gpus[0].compute_capability"),
    (dict(gpus=[dict(V100, memory_total_mib=-1)]), "gpus[0].memory_total_mib"),
    (dict(gpus=[dict(V100, memory_total_mib="32 GB")]), "gpus[0].memory_total_mib"),
    (dict(gpus=[dict(V100, name=["x"])]), "gpus[0].name"),
    (dict(driver_version="five-fifty"), "driver_version"),
    (dict(driver_version=["550"]), "driver_version"),
    (dict(cuda_driver_version="twelve"), "cuda_driver_version"),
    (dict(image="vllm/vllm-openai:v0.8.5"), "image: expected a mapping"),
    (dict(image={"cuda_version": "twelve"}), "image.cuda_version"),
    (dict(image={"arch_list": ["7.0", "volta"]}), "image.arch_list[1]"),
    (dict(image={"arch_list": 7}), "image.arch_list"),
    (dict(image={"require_cuda": "cuda>>12"}), "image.require_cuda"),
    (dict(image={"quantization_methods": [None]}), "image.quantization_methods[0]"),
    (dict(model={"weight_bytes": "lots"}), "model.weight_bytes"),
    (dict(model={"param_count": -3}), "model.param_count"),
    (dict(model={"num_hidden_layers": 0}), "model.num_hidden_layers"),
    (dict(model={"torch_dtype": 16}), "model.torch_dtype"),
    (dict(vllm={"dtype": "int8"}), "vllm.dtype"),
    (dict(vllm={"tensor_parallel_size": 0}), "vllm.tensor_parallel_size"),
    (dict(vllm={"tensor_parallel_size": True}), "vllm.tensor_parallel_size"),
    (dict(vllm={"gpu_memory_utilization": 1.5}), "vllm.gpu_memory_utilization"),
    (dict(vllm={"gpu_memory_utilization": float("nan")}), "vllm.gpu_memory_utilization"),
    (dict(vllm={"max_model_len": "long"}), "vllm.max_model_len"),
    (dict(vllm={"kv_cache_dtype": "int4"}), "vllm.kv_cache_dtype"),
    (dict(vllm={"cpu_offload_gb": -1}), "vllm.cpu_offload_gb"),
    (dict(nvlink="maybe"), "nvlink"),
    (dict(policy_overrides={"auto_fix": "perhaps"}), "policy.auto_fix"),
    (dict(policy_overrides=[1]), "policy"),
    (dict(today="2026-01-01"), "today"),
])
def test_malformed_input_raises_gate_input_error(kwargs, fragment):
    with pytest.raises(GateInputError) as info:
        gate(**kwargs)
    assert fragment in str(info.value)
    assert "could not evaluate" not in str(info.value)


def test_validate_inputs_is_separate_and_normalizes():
    out = G.validate_inputs(gpus=[V100], driver_version="570.26", vllm={"tensor_parallel_size": "2"},
                            image={"arch_list": "7.0 9.0+PTX"})
    assert out["driver"] == (570, 26)
    assert out["vllm"]["tensor_parallel_size"] == 2
    assert ((9, 0), "ptx", False) in out["image"]["arch"]
    assert out["gpus"][0]["cc"] == (7, 0)


# --- property tests: evaluate never raises anything but GateInputError --------------------------

_scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2 ** 70), max_value=2 ** 70),
                     st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                     st.sampled_from(["7.0", "550.54.14", "auto", "bfloat16", "9.0+PTX", "sm_70", "32k", "gptq",
                                      "awq", "0.8.5", "12.4.1", "cuda>=12.4", "-1", "1e400", ""]))
_json = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                     max_leaves=12)
_gpu = st.fixed_dictionaries({}, optional={"name": _json, "compute_capability": _json, "memory_total_mib": _json,
                                           "brand": _json})
_image = st.fixed_dictionaries({}, optional={k: _json for k in (
    "cuda_version", "require_cuda", "arch_list", "quantization_methods", "vllm_version")})
_model = st.fixed_dictionaries({}, optional={k: _json for k in (
    "weight_bytes", "param_count", "quant_method", "num_hidden_layers", "num_key_value_heads", "head_dim",
    "max_position_embeddings", "torch_dtype")})
_vllm = st.fixed_dictionaries({}, optional={k: _json for k in (
    "tensor_parallel_size", "pipeline_parallel_size", "dtype", "quantization", "max_model_len", "max_num_seqs",
    "gpu_memory_utilization", "kv_cache_dtype", "cpu_offload_gb")})


@settings(max_examples=300, deadline=None, database=None)
@given(gpus=st.one_of(_json, st.lists(st.one_of(_gpu, _json), max_size=3)), driver=_json,
       image=st.one_of(_image, _json), model=st.one_of(_model, _json), vllm=st.one_of(_vllm, _json),
       nvlink=_json, mismatch=_json)
def test_property_evaluate_only_raises_gate_input_error(gpus, driver, image, model, vllm, nvlink, mismatch):
    try:
        result = evaluate(gpus=gpus, driver_version=driver, image=image, model=model, vllm=vllm,
                          nvlink=nvlink, driver_library_mismatch=mismatch, today=TODAY)
    except GateInputError as exc:
        assert str(exc) and "could not evaluate" not in str(exc)
        return
    assert isinstance(result["allowed"], bool)
    assert result["allowed"] == (not result["reasons"])
    for item in result["reasons"] + result["warnings"]:
        assert item["code"] in G.REASON_CODES or item["code"] in G.WARNING_CODES
        assert isinstance(item["message"], str) and item["message"]


@settings(max_examples=200, deadline=None, database=None)
@given(cc=st.sampled_from(["3.7", "5.2", "6.0", "6.1", "7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0"]),
       count=st.integers(min_value=1, max_value=8),
       memory=st.integers(min_value=1024, max_value=200000),
       driver=st.sampled_from([None, "470.82.01", "535.104.05", "550.54.14", "570.26", "580.95.05",
                               "595.71.05", "610.1"]),
       tp=st.integers(min_value=1, max_value=8), dtype=st.sampled_from(list(G.VLLM_DTYPES)),
       quant=st.sampled_from([None, "gptq", "awq", "fp8", "gguf", "modelopt_fp4", "compressed-tensors", "xyz"]),
       version=st.sampled_from([None, "0.8.5", "0.10.2", "0.19.1", "0.20.0", "latest"]),
       params=st.integers(min_value=10 ** 8, max_value=10 ** 12), max_len=st.integers(min_value=1, max_value=2 ** 20))
def test_property_well_formed_inputs_always_give_a_verdict(cc, count, memory, driver, tp, dtype, quant, version,
                                                           params, max_len):
    gpus = [{"name": "GPU", "compute_capability": cc, "memory_total_mib": memory}] * count
    result = evaluate(gpus=gpus, driver_version=driver, image={"vllm_version": version},
                      model=dict(LLAMA_8B, param_count=params, weight_bytes=None, quant_method=quant),
                      vllm={"tensor_parallel_size": tp, "dtype": dtype, "max_model_len": max_len},
                      nvlink=False, today=TODAY)
    assert result["allowed"] == (not result["reasons"])
    if tp > count:
        assert "TENSOR_PARALLEL_EXCEEDS_GPUS" in codes(result)
    if result["effective_vllm"].get("dtype") == "bfloat16":
        assert cc not in ("3.7", "5.2", "6.0", "6.1", "7.0", "7.5")


_policy_sections = st.dictionaries(st.sampled_from(["600", "R610", "abc", "volta", "awq", "bfloat16", "12.4.1",
                                                    "0.30.0", "12"]),
                                   st.one_of(_json, st.dictionaries(st.sampled_from(
                                       ["min_cc", "max_cuda_native", "eol", "cc", "max_driver_branch",
                                        "min_driver_branch", "kernel_module", "bytes", "bytes_per_param", "aliases",
                                        "min_linux_driver", "mvc_floor", "driver_min", "source"]), _json,
                                       max_size=4)), max_size=3)
_policy = st.one_of(_json, st.fixed_dictionaries({}, optional=dict(
    [(k, _json) for k in ("auto_fix", "min_compute_capability", "allowed_driver_branches", "reserve_mib",
                          "ignore_codes", "promote_warnings", "fatal")]
    + [(k, _policy_sections) for k in ("cuda_toolkits", "minor_version_compatibility", "driver_branches",
                                       "architectures", "dtypes", "quantization", "vllm_min_compute_capability")])))


@settings(max_examples=300, deadline=None, database=None)
@given(policy=_policy)
def test_property_malformed_policy_only_raises_gate_input_error(policy):
    try:
        result = gate(policy_overrides=policy, model=dict(LLAMA_8B, quant_method="awq"))
    except GateInputError as exc:
        assert str(exc) and "could not evaluate" not in str(exc)
        return
    assert result["allowed"] == (not result["reasons"])
