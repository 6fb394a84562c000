# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The plan's serving path for NVFP4 checkpoints: native, or the FP16 copy (fp16_fallback) when
the image's vLLM has no NVFP4 kernels for the GPUs and the copy fits (plugins/module_utils/_plan.py).

Model figures are typed from the public config.json files of meta-llama/Llama-3.1-8B-Instruct and
Llama-3.3-70B-Instruct (their NVFP4 versions, nvidia/Llama-3.1-8B-Instruct-FP4 and
nvidia/Llama-3.3-70B-Instruct-FP4, keep the shapes), param counts as model_facts reports them
(param_count_logical: 8,030,261,248 and 70,553,706,496; FP16 = x 2 bytes).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils import _plan as P
from ansible_collections.labfleet.vllm.plugins.module_utils import _policy
from ansible_collections.labfleet.vllm.plugins.module_utils._gate import GateInputError

TODAY = datetime.date(2026, 12, 1)
V100 = {"index": 0, "name": "Tesla V100-PCIE-32GB", "compute_capability": "7.0", "memory_total_mib": 32768}
GPUS = [V100, dict(V100, index=1)]
L40S = {"index": 0, "name": "NVIDIA L40S", "compute_capability": "8.9", "memory_total_mib": 46068}
IMAGE_0_8_5 = {"cuda_version": "12.4.0", "arch_list": ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0+PTX"],
               "vllm_version": "0.8.5", "require_cuda": "cuda>=12.4 brand=tesla,driver>=470,driver<471",
               "quantization_methods": _policy.VLLM_RELEASES["0.8.5"]["quantization_methods"],
               "state": "absent", "profile_matched": True, "reference": "vllm/vllm-openai:v0.8.5"}
IMAGE_0_19_1 = {"cuda_version": "12.9.1", "require_cuda": _policy.require_cuda_string("12.9"),
                "arch_list": ["7.0", "7.5", "8.0", "8.9", "9.0", "10.0", "12.0"],
                "quantization_methods": _policy.VLLM_RELEASES["0.19.1"]["quantization_methods"],
                "vllm_version": "0.19.1"}
LLAMA = {"num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "hidden_size": 4096,
         "intermediate_size": 14336, "vocab_size": 128256, "num_hidden_layers": 32,
         "max_position_embeddings": 131072, "torch_dtype": "bfloat16", "model_type": "llama",
         "architectures": ["LlamaForCausalLM"]}
# ModelOpt NVFP4 (hf_quant_config.json quant_algo NVFP4): model_facts' gate input.
LLAMA_8B_NVFP4 = dict(LLAMA, quant_method="modelopt_fp4", quant_bits=4, quant_group_size=16,
                      weight_bytes=5_960_000_000, param_count=8_030_261_248, fp16_weight_bytes=16_060_522_496)
LLAMA_70B_NVFP4 = dict(LLAMA, num_attention_heads=64, hidden_size=8192, intermediate_size=28672,
                       num_hidden_layers=80, quant_method="modelopt_fp4", quant_bits=4, quant_group_size=16,
                       weight_bytes=42_700_000_000, param_count=70_553_706_496,
                       fp16_weight_bytes=141_107_412_992)
# mistralai/Mistral-7B-Instruct-v0.3 as a compressed-tensors nvfp4 checkpoint (llm-compressor).
MISTRAL_7B_NVFP4 = {"num_hidden_layers": 32, "num_key_value_heads": 8, "head_dim": 128, "num_attention_heads": 32,
                    "hidden_size": 4096, "intermediate_size": 14336, "vocab_size": 32768,
                    "max_position_embeddings": 32768, "torch_dtype": "bfloat16", "model_type": "mistral",
                    "quant_method": "compressed-tensors", "quant_scheme": "nvfp4", "weight_bytes": 4_300_000_000,
                    "param_count": 7_248_023_552, "fp16_weight_bytes": 14_496_047_104}
LLAMA_8B_BF16 = dict(LLAMA, weight_bytes=16_060_522_496, param_count=8_030_261_248,
                     fp16_weight_bytes=16_060_522_496)
ARGS = {"tensor_parallel_size": 2, "dtype": "float16", "gpu_memory_utilization": 0.92, "max_model_len": 32768,
        "max_num_seqs": 32}
ROOMY = {"complete": False, "disk_free_bytes": 500 * 10 ** 9}


def request(**changes):
    base = {"image": "vllm/vllm-openai:v0.8.5", "model_path": "/srv/models/model", "served_model_name": "quasar",
            "vllm_args": dict(ARGS), "instances": [{"name": "vllm", "port": 8000, "gpus": "all"}],
            "driver": {"manage": True, "branch": "550"}}
    base.update(changes)
    return base


_DEFAULT = object()


def run(model=None, gpus=None, image=None, req=None, fp16_copy=_DEFAULT, driver="550.54.14"):
    return P.plan(gpus=GPUS if gpus is None else gpus, driver_version=driver,
                  image=IMAGE_0_8_5 if image is None else image, model=LLAMA_8B_NVFP4 if model is None else model,
                  request=request() if req is None else req, nvlink=False, today=TODAY,
                  fp16_copy=dict(ROOMY) if fp16_copy is _DEFAULT else fp16_copy)


def codes(items):
    return [item["code"] for item in items]


def message(items, code):
    found = [item["message"] for item in items if item["code"] == code]
    assert found, "%s not in %s" % (code, items)
    return found[0]


# --- the reference host: 2x V100 32 GB, vLLM 0.8.5 ----------------------------------------------


def test_a_7b_class_nvfp4_checkpoint_on_two_v100s_is_served_from_its_fp16_copy():
    verdict = run()
    assert verdict["allowed"] is True, verdict["reasons"]
    assert verdict["serving_path"] == "fp16_fallback"
    serving = verdict["serving"]
    assert serving["tried"] == ["native", "fp16_fallback"]
    assert serving["model_path"] == "/srv/models/model-fp16"
    assert serving["source_model_path"] == "/srv/models/model"
    assert serving["fp16_weight_bytes"] == 16_060_522_496
    assert "QUANTIZATION_UNSUPPORTED_ON_ARCH" in serving["why"]
    # The unit mounts the copy; the argv has no --quantization and keeps the request's flags.
    assert verdict["deployment"]["serving_model_path"] == "/srv/models/model-fp16"
    assert verdict["deployment"]["model_path"] == "/srv/models/model"
    argv = verdict["instances"][0]["argv"]
    assert "--quantization" not in argv
    assert argv[:4] == ["--tensor-parallel-size", "2", "--dtype", "float16"]
    assert "--enforce-eager" in argv
    # The memory plan is the FP16 one: 16.06 GB over two GPUs.
    assert verdict["plan"]["weights_bytes_per_gpu"] == 16_060_522_496 // 2
    assert verdict["plan"]["fits_one_sequence"] is True
    assert "NVFP4_FP16_FALLBACK" in codes(verdict["warnings"])
    step = verdict["steps"]["model"]["fp16_copy"]
    assert step["action"] == "convert" and step["dest"] == "/srv/models/model-fp16"
    assert "dequantize NVFP4 to FP16 at /srv/models/model-fp16" in verdict["summary"]


def test_the_reference_deployments_70b_nvfp4_is_refused_with_the_numbers_and_the_alternatives():
    verdict = run(model=LLAMA_70B_NVFP4)
    assert verdict["allowed"] is False
    assert verdict["serving_path"] is None
    assert codes(verdict["reasons"]) == ["QUANTIZATION_UNSUPPORTED_ON_ARCH", "INSUFFICIENT_VRAM"]
    text = message(verdict["reasons"], "INSUFFICIENT_VRAM")
    # ~141 GB in FP16, per GPU and usable figures, and every way out with its size.
    assert "141.1 GB (131.4 GiB)" in text
    assert "65.7 GiB per GPU over 2 GPUs" in text
    assert "GPTQ-int4 checkpoint of the same model: about 17.1 GiB of weights per GPU" in text
    assert "compute capability 6.0 and up" in text
    assert "cpu_offload_gb: 47" in text and "94 GiB of host RAM in all" in text
    assert "7 or more such GPUs" in text
    assert verdict["serving"]["tried"] == ["native", "fp16_fallback"]
    assert "FP16 fallback is refused too (INSUFFICIENT_VRAM)" in verdict["serving"]["why"]
    assert verdict["deployment"]["serving_model_path"] is None
    assert verdict["summary"].startswith("refused (QUANTIZATION_UNSUPPORTED_ON_ARCH, INSUFFICIENT_VRAM)")


def test_the_suggested_offload_would_make_the_fp16_copy_fit():
    # The figure the refusal gives is enough: with it, the same host plans the fallback.
    req = request(vllm_args=dict(ARGS, cpu_offload_gb=47))
    verdict = run(model=LLAMA_70B_NVFP4, req=req)
    assert verdict["allowed"] is True, verdict["reasons"]
    assert verdict["serving_path"] == "fp16_fallback"
    assert "--cpu-offload-gb" in verdict["instances"][0]["argv"]
    short = run(model=LLAMA_70B_NVFP4, req=request(vllm_args=dict(ARGS, cpu_offload_gb=40)))
    assert "INSUFFICIENT_VRAM" in codes(short["reasons"])


def test_compressed_tensors_nvfp4_falls_back_on_either_release():
    # 0.8.5 has no nvfp4 scheme at all; 0.19.1 has one from compute capability 7.5.
    old = run(model=MISTRAL_7B_NVFP4)
    assert old["serving_path"] == "fp16_fallback", old["reasons"]
    assert "QUANTIZATION_UNKNOWN_TO_IMAGE" in old["serving"]["why"]
    new = run(model=MISTRAL_7B_NVFP4, image=IMAGE_0_19_1, driver="580.95.05",
              req=request(image="vllm/vllm-openai:v0.19.1", driver={"manage": True, "branch": "580"}))
    assert new["serving_path"] == "fp16_fallback", new["reasons"]
    assert "QUANTIZATION_UNSUPPORTED_ON_ARCH" in new["serving"]["why"]
    assert new["plan"]["weights_bytes_per_gpu"] == 14_496_047_104 // 2


def test_where_the_image_has_nvfp4_kernels_the_checkpoint_is_served_natively():
    req = request(image="vllm/vllm-openai:v0.19.1", driver={"manage": True, "branch": "580"},
                  vllm_args=dict(ARGS, tensor_parallel_size=1))
    verdict = run(gpus=[L40S], image=IMAGE_0_19_1, driver="580.95.05", req=req)
    assert verdict["allowed"] is True, verdict["reasons"]
    assert verdict["serving_path"] == "native"
    assert verdict["serving"]["tried"] == ["native"]
    assert verdict["deployment"]["serving_model_path"] == "/srv/models/model"
    assert "fp16_copy" not in verdict["steps"]["model"]
    assert "NVFP4_FP16_FALLBACK" not in codes(verdict["warnings"])


def test_an_unquantized_checkpoint_is_always_native():
    verdict = run(model=LLAMA_8B_BF16)
    assert verdict["allowed"] is True and verdict["serving_path"] == "native"
    assert verdict["serving"]["fp16_model_path"] is None
    assert verdict["serving"]["why"] == "the checkpoint is served as it is (not quantized)"
    # Refused for another reason (too little memory for 16 GB on one small GPU): the serving path says nothing.
    small = dict(V100, memory_total_mib=8192)
    refused = run(model=LLAMA_8B_BF16, gpus=[small], req=request(vllm_args=dict(ARGS, tensor_parallel_size=1)))
    assert refused["allowed"] is False and refused["serving"]["why"] is None


# --- the request's serving_path and fp16_model_path --------------------------------------------------


def test_serving_path_native_keeps_the_refusal_and_says_the_fallback_was_not_considered():
    verdict = run(req=request(serving_path="native"))
    assert verdict["allowed"] is False
    assert codes(verdict["reasons"]) == ["QUANTIZATION_UNSUPPORTED_ON_ARCH"]
    assert "not considered" in verdict["serving"]["why"]
    assert verdict["serving"]["tried"] == ["native"]


def test_serving_path_fp16_fallback_is_taken_even_where_native_would_work():
    req = request(image="vllm/vllm-openai:v0.19.1", driver={"manage": True, "branch": "580"},
                  vllm_args=dict(ARGS, tensor_parallel_size=1), serving_path="fp16_fallback")
    verdict = run(gpus=[L40S], image=IMAGE_0_19_1, driver="580.95.05", req=req)
    assert verdict["serving_path"] == "fp16_fallback", verdict["reasons"]
    assert verdict["serving"]["tried"] == ["fp16_fallback"]
    assert "request.serving_path is fp16_fallback" in verdict["serving"]["why"]


def test_serving_path_fp16_fallback_on_a_checkpoint_that_is_not_nvfp4_is_refused():
    verdict = run(model=LLAMA_8B_BF16, req=request(serving_path="fp16_fallback"))
    assert verdict["allowed"] is False
    text = message(verdict["reasons"], "FP16_FALLBACK_NOT_APPLICABLE")
    assert "is not NVFP4" in text and "set request.serving_path to auto or native" in text
    assert verdict["steps"]["model"]["action"] == "refuse"


def test_fp16_model_path_names_where_the_copy_goes():
    verdict = run(req=request(fp16_model_path="/data/fp16/llama-8b/"))
    assert verdict["deployment"]["serving_model_path"] == "/data/fp16/llama-8b"
    assert P.fp16_copy_path("/srv/models/model/") == "/srv/models/model-fp16"
    assert P.fp16_copy_path("/srv/models/model", "/x") == "/x"
    assert P.fp16_copy_path(None) is None


@pytest.mark.parametrize("changes, fragment", [
    ({"serving_path": "fastest"}, "request.serving_path: expected one of auto, native, fp16_fallback"),
    ({"serving_path": 1}, "request.serving_path"),
    ({"fp16_model_path": "models/copy"}, "request.fp16_model_path: expected an absolute one-line path"),
    ({"fp16_model_path": "/srv/models/model/fp16"}, "must be outside request.model_path"),
    ({"fp16_model_path": "/srv/models/model"}, "must be outside request.model_path"),
    ({"fp16_model_path": "/srv"}, "must be outside request.model_path"),
    ({"fp16_model_path": "/srv/x\n"}, "request.fp16_model_path"),
])
def test_malformed_serving_requests_name_the_field(changes, fragment):
    with pytest.raises(GateInputError) as err:
        run(req=request(**changes))
    assert fragment in str(err.value)


# --- disk ---------------------------------------------------------------------------------------------


def test_a_copy_that_does_not_fit_on_disk_is_refused_with_the_numbers():
    verdict = run(fp16_copy={"complete": False, "disk_free_bytes": 10 * 10 ** 9})
    assert verdict["allowed"] is False
    assert codes(verdict["reasons"]) == ["QUANTIZATION_UNSUPPORTED_ON_ARCH", "INSUFFICIENT_DISK"]
    text = message(verdict["reasons"], "INSUFFICIENT_DISK")
    assert "about 16.1 GB (15.0 GiB) at /srv/models/model-fp16" in text
    assert "10.0 GB (9.3 GiB) free" in text and "free 6.1 GB" in text
    assert "request.fp16_model_path" in text
    assert verdict["steps"]["model"]["action"] == "refuse"


def test_a_finished_copy_needs_no_disk_and_is_kept():
    verdict = run(fp16_copy={"complete": True, "disk_free_bytes": 1})
    assert verdict["allowed"] is True, verdict["reasons"]
    assert verdict["steps"]["model"]["fp16_copy"]["action"] == "keep"
    assert verdict["serving"]["fp16_copy"]["disk_needed_bytes"] == 0
    assert "keep the FP16 copy at /srv/models/model-fp16" in verdict["summary"]


def test_unknown_free_disk_is_a_warning_not_a_refusal():
    verdict = run(fp16_copy=None)
    assert verdict["allowed"] is True
    assert "the converter checks it before it writes anything" in message(verdict["warnings"],
                                                                          "FP16_COPY_DISK_UNCHECKED")


# --- several instances ---------------------------------------------------------------------------------


def test_every_instance_serves_the_same_copy():
    req = request(vllm_args=dict(ARGS, tensor_parallel_size=1),
                  instances=[{"name": "a", "port": 8000, "gpus": [0]}, {"name": "b", "port": 8001, "gpus": [1]}])
    verdict = run(req=req)
    assert verdict["serving_path"] == "fp16_fallback", verdict["reasons"]
    assert [i["allowed"] for i in verdict["instances"]] == [True, True]
    assert all("--quantization" not in i["argv"] for i in verdict["instances"])
    # 16.06 GB on one 32 GB V100 each.
    assert [i["memory_plan"]["weights_bytes_per_gpu"] for i in verdict["instances"]] == [16_060_522_496] * 2


def test_the_plan_without_fp16_weight_bytes_uses_the_parameter_count():
    model = dict(LLAMA_8B_NVFP4)
    del model["fp16_weight_bytes"]
    verdict = run(model=model)
    assert verdict["serving_path"] == "fp16_fallback"
    assert verdict["serving"]["fp16_weight_bytes"] == 8_030_261_248 * 2


def test_is_nvfp4_reads_every_spelling():
    policy = _policy.merge_policy(None)
    assert P.is_nvfp4(policy, {"quant_method": "modelopt_fp4"})
    assert P.is_nvfp4(policy, {"quant_method": "nvfp4"})          # 0.8.5's name, the reference quant_config
    assert P.is_nvfp4(policy, {"quant_method": "compressed-tensors", "quant_scheme": "nvfp4"})
    assert not P.is_nvfp4(policy, {"quant_method": "compressed-tensors", "quant_scheme": "w4a16"})
    assert not P.is_nvfp4(policy, {"quant_method": "gptq"})
    assert not P.is_nvfp4(policy, {})
