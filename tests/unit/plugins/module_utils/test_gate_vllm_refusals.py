# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gate refuses what vLLM itself refuses at startup (issue 11, items 1, 3, 4, 6 and 7).

Models are described by the values of their public config.json files; the vLLM source lines each
case stands for are cited next to it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge import _policy as P
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate import GateInputError, evaluate

TODAY = datetime.date(2026, 9, 1)

V100 = {"name": "Tesla V100-PCIE-32GB", "compute_capability": "7.0", "memory_total_mib": 32768}
T4 = {"name": "Tesla T4", "compute_capability": "7.5", "memory_total_mib": 15360}
A100 = {"name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0", "memory_total_mib": 81920}
RTX3090 = {"name": "NVIDIA GeForce RTX 3090", "compute_capability": "8.6", "memory_total_mib": 24576}

IMAGE_0_8_5 = {"cuda_version": "12.4.0", "require_cuda": P.require_cuda_string("12.4"),
               "arch_list": ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0+PTX"],
               "quantization_methods": P.VLLM_RELEASES["0.8.5"]["quantization_methods"], "vllm_version": "0.8.5"}
IMAGE_0_19_1 = {"cuda_version": "12.9.1", "require_cuda": P.require_cuda_string("12.9"),
                "arch_list": ["7.0", "7.5", "8.0", "8.9", "9.0", "10.0", "12.0"],
                "quantization_methods": P.VLLM_RELEASES["0.19.1"]["quantization_methods"], "vllm_version": "0.19.1"}

# meta-llama/Llama-3.1-8B-Instruct config.json (bfloat16, GQA 32/8, 131072 positions).
LLAMA_3_1_8B = {"num_hidden_layers": 32, "num_key_value_heads": 8, "head_dim": 128, "num_attention_heads": 32,
                "hidden_size": 4096, "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
                "param_count": 8030261248}
# neuralmagic/Meta-Llama-3.1-8B-Instruct-quantized.w4a16: compressed-tensors, int4 weights, g128.
LLAMA_3_1_8B_W4A16 = dict(LLAMA_3_1_8B, quant_method="compressed-tensors", quant_scheme="wna16", quant_bits=4,
                          quant_group_size=128, weight_bytes=5700000000)
# neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8: compressed-tensors, FP8 weights and activations.
LLAMA_3_1_8B_FP8 = dict(LLAMA_3_1_8B, quant_method="compressed-tensors", quant_scheme="w8a8_fp8",
                        weight_bytes=9080000000)
# Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4 (float16 checkpoint, 28 layers, GQA 28/4).
QWEN_2_5_7B_GPTQ = {"num_hidden_layers": 28, "num_key_value_heads": 4, "head_dim": 128, "num_attention_heads": 28,
                    "hidden_size": 3584, "max_position_embeddings": 32768, "torch_dtype": "float16",
                    "quant_method": "gptq", "weight_bytes": 5580000000}
# mistralai/Mistral-7B-Instruct-v0.3 as an NVFP4 compressed-tensors checkpoint (llm-compressor).
MISTRAL_7B_NVFP4 = {"num_hidden_layers": 32, "num_key_value_heads": 8, "head_dim": 128, "num_attention_heads": 32,
                    "hidden_size": 4096, "max_position_embeddings": 32768, "torch_dtype": "bfloat16",
                    "quant_method": "compressed-tensors", "quant_scheme": "nvfp4", "weight_bytes": 4300000000}

TP1 = {"tensor_parallel_size": 1, "max_model_len": 8192, "gpu_memory_utilization": 0.9}


def gate(**kwargs):
    args = dict(gpus=[V100], driver_version="550.54.14", image=IMAGE_0_8_5, model=LLAMA_3_1_8B, vllm=TP1,
                today=TODAY)
    args.update(kwargs)
    return evaluate(**args)


def codes(result, kind="reasons"):
    return [item["code"] for item in result[kind]]


def message(result, code, kind="reasons"):
    found = [item["message"] for item in result[kind] if item["code"] == code]
    assert found, "%s not in %s" % (code, result[kind])
    return found[0]


# --- 1. compressed-tensors: the scheme decides ------------------------------------------------

def test_compressed_tensors_wna16_on_v100_is_refused_in_both_releases():
    # schemes/compressed_tensors_wNa16.py get_min_capability: 80 in 0.8.5, 75 in 0.19.1.
    result = gate(model=LLAMA_3_1_8B_W4A16)
    text = message(result, "QUANTIZATION_UNSUPPORTED_ON_ARCH")
    assert "compute capability 8.0 in vLLM 0.8.5" in text and "Min capability: 80" in text
    assert "GPTQ checkpoint" in text
    result = gate(model=LLAMA_3_1_8B_W4A16, image=IMAGE_0_19_1, driver_version="580.95.05")
    assert "compute capability 7.5 in vLLM 0.19.1" in message(result, "QUANTIZATION_UNSUPPORTED_ON_ARCH")


def test_compressed_tensors_wna16_on_t4_needs_0_19_1():
    assert "QUANTIZATION_UNSUPPORTED_ON_ARCH" in codes(gate(gpus=[T4], model=LLAMA_3_1_8B_W4A16))
    result = gate(gpus=[T4], model=LLAMA_3_1_8B_W4A16, image=IMAGE_0_19_1, driver_version="580.95.05")
    assert "QUANTIZATION_UNSUPPORTED_ON_ARCH" not in codes(result)
    assert "QUANTIZATION_SCHEME_UNCHECKED" not in codes(result, "warnings")


def test_compressed_tensors_fp8_falls_back_to_w8a16_below_8_9():
    # compressed_tensors.py:335-347 (0.8.5): W8A8 FP8 below 8.9 becomes W8A16 FP8 (Marlin, 8.0).
    result = gate(gpus=[A100], model=LLAMA_3_1_8B_FP8)
    assert "QUANTIZATION_UNSUPPORTED_ON_ARCH" not in codes(result)
    result = gate(gpus=[T4], model=LLAMA_3_1_8B_FP8)
    text = message(result, "QUANTIZATION_UNSUPPORTED_ON_ARCH")
    assert "falls back to" in text and "compute capability 8.0" in text


def test_compressed_tensors_nvfp4_has_no_scheme_in_0_8_5():
    result = gate(gpus=[A100], model=MISTRAL_7B_NVFP4)
    text = message(result, "QUANTIZATION_UNKNOWN_TO_IMAGE")
    assert "No compressed-tensors compatible scheme was found" in text
    # 0.19.1 has W4A4/W4A16 NVFP4 at 7.5: a V100 is still refused, with the dequantizing way out.
    result = gate(model=MISTRAL_7B_NVFP4, image=IMAGE_0_19_1, driver_version="580.95.05")
    assert "dequantize the NVFP4 checkpoint to float16" in message(result, "QUANTIZATION_UNSUPPORTED_ON_ARCH")


def test_compressed_tensors_scheme_whose_kernel_is_chosen_at_load_warns():
    model = dict(LLAMA_3_1_8B, quant_method="compressed-tensors", quant_scheme="w4a8_int", weight_bytes=5 * 10 ** 9)
    result = gate(gpus=[T4], model=model, image=IMAGE_0_19_1, driver_version="580.95.05")
    assert "QUANTIZATION_SCHEME_UNCHECKED" in codes(result, "warnings")
    assert "QUANTIZATION_UNSUPPORTED_ON_ARCH" not in codes(result)


def test_compressed_tensors_unknown_scheme_on_0_19_1_warns_instead_of_refusing():
    # 0.19.1 has a scheme whose own check passes on any GPU (W4A8 INT), so an unread scheme is open.
    model = dict(LLAMA_3_1_8B, quant_method="compressed-tensors", weight_bytes=5 * 10 ** 9)
    result = gate(model=model, image=IMAGE_0_19_1, driver_version="580.95.05")
    assert "QUANTIZATION_SCHEME_UNCHECKED" in codes(result, "warnings")
    assert "run model_facts" in message(result, "QUANTIZATION_SCHEME_UNCHECKED", "warnings")


def test_sparse_2of4_is_gone_in_0_19_1():
    model = dict(LLAMA_3_1_8B, quant_method="compressed-tensors", quant_scheme="sparse_2of4", weight_bytes=9 * 10 ** 9)
    result = gate(gpus=[A100], model=model, image=IMAGE_0_19_1, driver_version="580.95.05")
    assert "QUANTIZATION_UNKNOWN_TO_IMAGE" in codes(result)


@pytest.mark.parametrize("scheme,version,cc,kind", [
    ("wna16", (0, 8, 5), (8, 0), "cc"),
    ("wna16", (0, 19, 1), (7, 5), "cc"),
    ("wna16", (0, 10, 2), (8, 0), "cc"),      # between two rows: the older row (since semantics)
    ("nvfp4", (0, 8, 5), None, "absent"),
    ("nvfp4", None, None, "unknown"),         # releases differ and the version is unknown
    ("w8a8_int8", None, (7, 5), "cc"),        # same in every release
    ("w4a8_int", (0, 19, 1), None, "unchecked"),
])
def test_ct_scheme_need(scheme, version, cc, kind):
    assert P.ct_scheme_need(P.COMPRESSED_TENSORS_SCHEMES[scheme], version) == (kind, cc)


def test_every_scheme_model_facts_names_is_in_the_table():
    for scheme in ("wna16", "w8a8_fp8", "w8a16_fp8", "w8a8_int8", "nvfp4"):
        assert scheme in P.COMPRESSED_TENSORS_SCHEMES
        assert P.COMPRESSED_TENSORS_SCHEMES[scheme]["source"].startswith("vllm@")


# --- 1b. the method's activation dtypes (get_supported_act_dtypes) ----------------------------

def test_gptq_with_bfloat16_is_refused_where_bfloat16_exists():
    # gptq.py get_supported_act_dtypes -> [torch.half]; config.py:3810-3815 raises.
    result = gate(gpus=[A100], model=QWEN_2_5_7B_GPTQ, vllm=dict(TP1, dtype="bfloat16"))
    text = message(result, "QUANTIZATION_DTYPE_UNSUPPORTED")
    assert "set vllm.dtype to float16" in text and "torch.bfloat16 is not supported" in text


def test_gptq_on_v100_is_fine_once_the_dtype_is_fixed():
    result = gate(model=dict(QWEN_2_5_7B_GPTQ, torch_dtype="bfloat16"), vllm=dict(TP1, dtype="auto"))
    assert result["effective_vllm"]["dtype"] == "float16"
    assert "QUANTIZATION_DTYPE_UNSUPPORTED" not in codes(result)
    assert result["allowed"] is True, result["reasons"]


def test_gguf_float32_differs_between_releases():
    model = dict(LLAMA_3_1_8B, quant_method="gguf", weight_bytes=4900000000)
    assert "QUANTIZATION_DTYPE_UNSUPPORTED" not in codes(gate(gpus=[A100], model=model,
                                                              vllm=dict(TP1, dtype="bfloat16")))
    result = gate(gpus=[A100], model=model, vllm=dict(TP1, dtype="bfloat16"), image=IMAGE_0_19_1,
                  driver_version="580.95.05")
    assert "float16 or float32" in message(result, "QUANTIZATION_DTYPE_UNSUPPORTED")


# --- 3. NVIDIA_REQUIRE_CUDA only where the runtime reads it -----------------------------------

IMAGE_12_8 = {"cuda_version": "12.8.1", "require_cuda": P.require_cuda_string("12.8"),
              "arch_list": ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0"], "vllm_version": "0.10.2"}


def test_legacy_hook_refuses_geforce_and_says_how_to_skip_the_check():
    result = gate(gpus=[RTX3090], image=IMAGE_12_8, model=LLAMA_3_1_8B, require_cuda_enforced=True,
                  runtime_mode_why="nvidia-container-toolkit 1.17.8, docker --gpus: legacy hook")
    text = message(result, "DRIVER_TOO_OLD_FOR_IMAGE")
    assert "will refuse to start it (nvidia-container-toolkit 1.17.8, docker --gpus: legacy hook)" in text
    assert "CDI mode" in text and "NVIDIA_DISABLE_REQUIRE=true" in text


def test_cdi_mode_judges_minor_version_compatibility_instead():
    result = gate(gpus=[RTX3090], image=IMAGE_12_8, model=LLAMA_3_1_8B, require_cuda_enforced=False,
                  runtime_mode_why="CDI mode")
    assert "DRIVER_TOO_OLD_FOR_IMAGE" not in codes(result)
    assert "CUDA_MINOR_VERSION_COMPAT" in codes(result, "warnings")


def test_unknown_mode_still_refuses_but_says_legacy_mode():
    result = gate(gpus=[RTX3090], image=IMAGE_12_8, model=LLAMA_3_1_8B)
    assert "refuses to start it in legacy mode" in message(result, "DRIVER_TOO_OLD_FOR_IMAGE")


def test_cdi_mode_below_the_mvc_floor_is_refused_by_cuda_itself():
    result = gate(image=IMAGE_0_8_5, driver_version="470.256.02", require_cuda_enforced=False,
                  runtime_mode_why="CDI mode")
    text = message(result, "DRIVER_TOO_OLD_FOR_IMAGE")
    assert "NVIDIA_REQUIRE_CUDA is not checked here: CDI mode" in text
    assert "CUDA driver version is insufficient" in text
    # The legacy hook admits the same driver through the brand clause: forward compatibility.
    result = gate(image=IMAGE_0_8_5, driver_version="470.256.02", require_cuda_enforced=True)
    assert "DRIVER_TOO_OLD_FOR_IMAGE" not in codes(result)
    assert "FORWARD_COMPAT_REQUIRED" in codes(result, "warnings")


def test_r535_with_the_cuda_12_4_image_runs_through_mvc_not_forward_compat():
    # 12.4's string lists brand=tesla,driver>=535 (item 7); R535 is above CUDA 12's floor 525.
    result = gate(image=IMAGE_0_8_5, driver_version="535.261.03", require_cuda_enforced=True)
    assert "FORWARD_COMPAT_REQUIRED" not in codes(result, "warnings")
    assert "brand=tesla,driver>=535" in message(result, "CUDA_MINOR_VERSION_COMPAT", "warnings")


def test_require_cuda_enforced_must_be_a_boolean():
    with pytest.raises(GateInputError, match="require_cuda_enforced"):
        gate(require_cuda_enforced="sometimes")


# --- 4. --kv-cache-dtype per release ---------------------------------------------------------

def test_kv_cache_float16_is_not_a_0_8_5_value_and_becomes_auto():
    result = gate(vllm=dict(TP1, kv_cache_dtype="float16"))
    assert result["effective_vllm"]["kv_cache_dtype"] == "auto"
    assert any("it takes auto, fp8, fp8_e4m3, fp8_e5m2" in item["message"] for item in result["warnings"]
               if item["code"] == "DTYPE_AUTOFIXED")
    result = gate(vllm=dict(TP1, kv_cache_dtype="float16"), image=IMAGE_0_19_1, driver_version="580.95.05")
    assert result["effective_vllm"]["kv_cache_dtype"] == "float16"


def test_kv_cache_value_unknown_to_the_release_is_refused():
    result = gate(vllm=dict(TP1, kv_cache_dtype="fp8_inc"))
    assert "set vllm.kv_cache_dtype to auto" in message(result, "KV_CACHE_DTYPE_UNSUPPORTED")
    result = gate(vllm=dict(TP1, kv_cache_dtype="float16"), policy_overrides={"auto_fix": False})
    assert "KV_CACHE_DTYPE_UNSUPPORTED" in codes(result)


def test_kv_cache_bfloat16_on_v100_becomes_auto_in_every_release():
    for image, driver in ((IMAGE_0_8_5, "550.54.14"), (IMAGE_0_19_1, "580.95.05")):
        result = gate(vllm=dict(TP1, kv_cache_dtype="bfloat16"), image=image, driver_version=driver)
        assert result["effective_vllm"]["kv_cache_dtype"] == "auto"
        assert result["plan"]["kv_cache_dtype_bytes"] == 2


def test_kv_cache_dtypes_for_versions():
    table = P.KV_CACHE_DTYPES_BY_RELEASE
    assert P.kv_cache_dtypes_for(table, (0, 8, 5))[0] == ["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]
    assert "float16" in P.kv_cache_dtypes_for(table, (0, 19, 1))[0]
    assert P.kv_cache_dtypes_for(table, (0, 9, 0))[1] == "0.8.5"
    assert P.kv_cache_dtypes_for(table, None) == (None, None)
    for row in table.values():
        assert row["source"].startswith("vllm@") and row["confidence"] == "verified"


# --- 6. a GPU lost from the bus --------------------------------------------------------------

LOST = [{"bus_id": "0000:02:00.0", "index": 1,
         "message": "Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost.  Reboot the "
                    "system to recover this GPU"}]


def test_lost_gpu_is_refused_with_reboot_and_the_healthy_count():
    result = gate(gpus=[V100], lost_gpus=LOST, vllm=dict(TP1, tensor_parallel_size=2))
    text = message(result, "GPU_LOST")
    assert text.startswith("0000:02:00.0 (GPU 1) fell off the bus")
    assert "reboot the host" in text
    assert "plan on the 1 healthy GPU" in text and "(now 2)" in text
    assert "TENSOR_PARALLEL_EXCEEDS_GPUS" in codes(result)


def test_every_gpu_lost_is_not_reported_as_no_gpu():
    lost = LOST + [{"bus_id": "0000:03:00.0", "index": 0, "message": "Unknown Error"}]
    result = gate(gpus=[], lost_gpus=lost)
    assert codes(result) == ["GPU_LOST"]
    assert "0000:03:00.0 (GPU 0)" in message(result, "GPU_LOST")
    assert "healthy" not in message(result, "GPU_LOST")


def test_lost_gpu_without_a_bus_address_is_still_named():
    result = gate(gpus=[V100], lost_gpus=[{"bus_id": None, "index": None, "message": "GPU is lost"}])
    assert message(result, "GPU_LOST").startswith("a GPU at an unknown bus address fell off the bus")


@pytest.mark.parametrize("lost,fragment", [
    ("0000:02:00.0", "lost_gpus: expected a list"),
    (["0000:02:00.0"], "lost_gpus[0]: expected a mapping"),
    ([{"bus_id": "GPU 1"}], "lost_gpus[0].bus_id"),
    ([{"bus_id": 2}], "lost_gpus[0].bus_id"),
    ([{"bus_id": "0000:02:00.0", "index": -1}], "lost_gpus[0].index"),
])
def test_malformed_lost_gpus(lost, fragment):
    with pytest.raises(GateInputError) as err:
        gate(lost_gpus=lost)
    assert fragment in str(err.value)


# --- 7. small facts ------------------------------------------------------------------------------

def test_cuda_12_4_require_string_lists_r535():
    assert 535 in P.FORWARD_COMPAT_IMAGE_BRANCHES["12.4"]["branches"]
    assert "brand=tesla,driver>=535,driver<536" in P.require_cuda_string("12.4")


def test_0_20_0_arch_list_is_the_release_pipelines():
    release = P.VLLM_RELEASES["0.20.0"]
    # .buildkite/release-pipeline.yaml: CUDA_ARCH_X86: "7.5 8.0 8.6 8.9 9.0 10.0 12.0+PTX"
    assert release["vllm_arch"] == "7.5 8.0 8.6 8.9 9.0 10.0 12.0+PTX"
    assert "7.0" not in release["vllm_arch"].split()
    assert "11.0" in release["vllm_arch_dockerfile"]


# --- 2. the reserve is vLLM's own accounting, modelled -----------------------------------------

# The reference deployment: a Llama-3-70B-class GPTQ 4-bit checkpoint (hidden 8192, intermediate
# 28672, vocab 128256, 80 layers, 64/8 heads), 2x V100 32 GB, TP 2, 32K context, 32 sequences.
LLAMA_70B_GPTQ = {"num_hidden_layers": 80, "num_key_value_heads": 8, "head_dim": 128, "num_attention_heads": 64,
                  "hidden_size": 8192, "intermediate_size": 28672, "vocab_size": 128256,
                  "max_position_embeddings": 131072, "torch_dtype": "float16", "quant_method": "gptq",
                  "weight_bytes": 36 * 10 ** 9}
REFERENCE_ARGS = {"tensor_parallel_size": 2, "dtype": "float16", "gpu_memory_utilization": 0.92,
                  "max_model_len": 32768, "max_num_seqs": 32}
GIB = 1024 ** 3


def test_reference_deployment_reserve_is_modelled_from_the_profile_run():
    result = gate(gpus=[V100, V100], model=LLAMA_70B_GPTQ, vllm=REFERENCE_ARGS, nvlink=False)
    plan = result["plan"]
    model = plan["reserve_model"]
    # V0 on 7.0, chunked prefill off at 32K: the profile run is max(32768, 2048) tokens over 32 prompts.
    assert (model["engine"], model["chunked_prefill"], model["profile_tokens"], model["profile_seqs"]) == \
        ("v0", False, 32768, 32)
    assert plan["reserve_source"] == "modelled" and model["complete"] is True
    assert plan["reserve_bytes"] == model["bytes"] == sum(model["parts"].values())
    assert 4 * GIB < plan["reserve_bytes"] < 5 * GIB
    assert plan["usable_bytes_per_gpu"] == int(32 * GIB * 0.92) - plan["reserve_bytes"]
    # Still fits one full-length sequence per GPU, as the field report's deployment did (about 1.3).
    assert plan["max_concurrent_full_sequences"] == 1
    assert result["allowed"] is True, result["reasons"]


def test_reserve_grows_with_the_context_and_a_policy_constant_replaces_it():
    short = gate(gpus=[V100, V100], model=LLAMA_70B_GPTQ, vllm=dict(REFERENCE_ARGS, max_model_len=4096))
    long = gate(gpus=[V100, V100], model=LLAMA_70B_GPTQ, vllm=REFERENCE_ARGS)
    assert short["plan"]["reserve_model"]["profile_tokens"] == 4096
    assert short["plan"]["reserve_bytes"] < long["plan"]["reserve_bytes"]
    fixed = gate(gpus=[V100, V100], model=LLAMA_70B_GPTQ, vllm=REFERENCE_ARGS, policy_overrides={"reserve_mib": 2048})
    assert fixed["plan"]["reserve_bytes"] == 2048 * 1024 * 1024
    assert fixed["plan"]["reserve_source"] == "policy.reserve_mib"


def test_reserve_without_the_config_values_falls_back_and_says_so():
    model = dict((k, v) for k, v in LLAMA_70B_GPTQ.items() if k not in ("intermediate_size", "vocab_size"))
    plan = gate(gpus=[V100, V100], model=model, vllm=REFERENCE_ARGS)["plan"]
    assert plan["reserve_model"]["complete"] is False
    assert "model.intermediate_size" in plan["reserve_source"]
    assert plan["reserve_bytes"] == 1536 * 1024 * 1024
