# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The plan's serving path for NVFP4 checkpoints: native, the FP16 copy (fp16_fallback) when the
image's vLLM has no NVFP4 kernels for the GPUs and the copy fits, else the GPTQ int4 repack
(gptq_repack) with the smallest group size that fits (plugins/module_utils/decisions/_plan.py).

Model figures are typed from the public config.json files of meta-llama/Llama-3.1-8B-Instruct and
Llama-3.3-70B-Instruct (their NVFP4 versions, nvidia/Llama-3.1-8B-Instruct-FP4 and
nvidia/Llama-3.3-70B-Instruct-FP4, keep the shapes), param counts as model_facts reports them
(param_count_logical: 8,030,261,248 and 70,553,706,496; FP16 = x 2 bytes). The NVFP4 linear
weights by shape (model_facts' nvfp4_linear_shapes) are those of a Llama decoder: q, k, v, o,
gate, up and down of every layer (ModelOpt's NVFP4 checkpoints leave lm_head out, and the
embeddings and norms are not linear weights); nvfp4_other_bytes is what stays float16 in a copy.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.converters import _gptq
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _plan as P
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge import _policy
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate import GateInputError

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


def decoder_shapes(hidden, layers, heads, kv_heads, inter):
    """nvfp4_linear_shapes of a Llama decoder, as model_facts counts them from the headers."""
    head_dim = hidden // heads
    counts = {}
    for shape in ((hidden, hidden), (kv_heads * head_dim, hidden), (kv_heads * head_dim, hidden), (hidden, hidden),
                  (inter, hidden), (inter, hidden), (hidden, inter)):
        counts[shape] = counts.get(shape, 0) + layers
    return [{"out_features": o, "in_features": i, "count": n} for (o, i), n in sorted(counts.items())]


def other_bytes(hidden, layers, vocab):
    """embed_tokens and lm_head [vocab, hidden] and the 2 x layers + 1 norms, as float16."""
    return 2 * vocab * hidden * 2 + (2 * layers + 1) * hidden * 2


# Without the shapes: what a hand-written model input (no model_facts) gives the gate.
LLAMA_70B_NVFP4_UNSHAPED = dict(LLAMA, num_attention_heads=64, hidden_size=8192, intermediate_size=28672,
                                num_hidden_layers=80, quant_method="modelopt_fp4", quant_bits=4, quant_group_size=16,
                                weight_bytes=42_700_000_000, param_count=70_553_706_496,
                                fp16_weight_bytes=141_107_412_992)
LLAMA_70B_NVFP4 = dict(LLAMA_70B_NVFP4_UNSHAPED, nvfp4_linear_shapes=decoder_shapes(8192, 80, 64, 8, 28672),
                       nvfp4_other_bytes=other_bytes(8192, 80, 128256))
LLAMA_8B_NVFP4_SHAPED = dict(LLAMA_8B_NVFP4, nvfp4_linear_shapes=decoder_shapes(4096, 32, 32, 8, 14336),
                             nvfp4_other_bytes=other_bytes(4096, 32, 128256))
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


def test_without_the_weights_shapes_the_70b_nvfp4_is_refused_with_the_numbers_and_the_alternatives():
    # A model input without nvfp4_linear_shapes cannot size a GPTQ copy: the FP16 refusal stands
    # (the reference deployment's own 70B case, with model_facts' shapes, is repacked: below).
    verdict = run(model=LLAMA_70B_NVFP4_UNSHAPED)
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
    assert "the GPTQ repack was not considered: the NVFP4 weights' shapes are unknown" in verdict["serving"]["why"]
    assert verdict["deployment"]["serving_model_path"] is None
    assert verdict["summary"].startswith("refused (QUANTIZATION_UNSUPPORTED_ON_ARCH, INSUFFICIENT_VRAM)")


def test_the_suggested_offload_would_make_the_fp16_copy_fit():
    # The figure the refusal gives is enough: with it, the same host plans the fallback.
    req = request(vllm_args=dict(ARGS, cpu_offload_gb=47))
    verdict = run(model=LLAMA_70B_NVFP4, req=req)
    assert verdict["allowed"] is True, verdict["reasons"]
    assert verdict["serving_path"] == "fp16_fallback"
    assert "--cpu-offload-gb" in verdict["instances"][0]["argv"]
    short = run(model=LLAMA_70B_NVFP4_UNSHAPED, req=request(vllm_args=dict(ARGS, cpu_offload_gb=40)))
    assert "INSUFFICIENT_VRAM" in codes(short["reasons"])
    # With the shapes, 40 GiB of offload is short for the FP16 copy but the GPTQ copy fits.
    repacked = run(model=LLAMA_70B_NVFP4, req=request(vllm_args=dict(ARGS, cpu_offload_gb=40)))
    assert repacked["serving_path"] == "gptq_repack", repacked["reasons"]


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


@pytest.mark.parametrize("path, code, what", [
    ("fp16_fallback", "FP16_FALLBACK_NOT_APPLICABLE", "dequantized"),
    ("gptq_repack", "GPTQ_REPACK_NOT_APPLICABLE", "repacked"),
])
def test_a_converted_copy_of_a_checkpoint_that_is_not_nvfp4_is_refused(path, code, what):
    verdict = run(model=LLAMA_8B_BF16, req=request(serving_path=path))
    assert verdict["allowed"] is False
    text = message(verdict["reasons"], code)
    assert "is not NVFP4" in text and "only NVFP4 checkpoints are %s" % what in text
    assert "set request.serving_path to auto or native" in text
    assert verdict["steps"]["model"]["action"] == "refuse"


def test_fp16_model_path_names_where_the_copy_goes():
    verdict = run(req=request(fp16_model_path="/data/fp16/llama-8b/"))
    assert verdict["deployment"]["serving_model_path"] == "/data/fp16/llama-8b"
    assert P.fp16_copy_path("/srv/models/model/") == "/srv/models/model-fp16"
    assert P.fp16_copy_path("/srv/models/model", "/x") == "/x"
    assert P.fp16_copy_path(None) is None


@pytest.mark.parametrize("changes, fragment", [
    ({"serving_path": "fastest"}, "request.serving_path: expected one of auto, native, fp16_fallback, gptq_repack"),
    ({"serving_path": 1}, "request.serving_path"),
    ({"fp16_model_path": "models/copy"}, "request.fp16_model_path: expected an absolute one-line path"),
    ({"fp16_model_path": "/srv/models/model/fp16"}, "must be outside request.model_path"),
    ({"fp16_model_path": "/srv/models/model"}, "must be outside request.model_path"),
    ({"fp16_model_path": "/srv"}, "must be outside request.model_path"),
    ({"fp16_model_path": "/srv/x\n"}, "request.fp16_model_path"),
    ({"gptq_model_path": "copy"}, "request.gptq_model_path: expected an absolute one-line path"),
    ({"gptq_model_path": "/srv/models/model/gptq"}, "request.gptq_model_path /srv/models/model/gptq must be outside"),
    ({"gptq_model_path": "/srv/x\r"}, "request.gptq_model_path"),
    ({"gptq_group_size": 24}, "request.gptq_group_size: expected one of 16, 32, 64, 128, or 0"),
    ({"gptq_group_size": "sixty-four"}, "request.gptq_group_size"),
    ({"gptq_group_size": True}, "request.gptq_group_size"),
    ({"gptq_group_size": 64.0}, "request.gptq_group_size"),
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


# --- the GPTQ int4 repack (gptq_repack) ------------------------------------------------------------


def repacked(model, group):
    """The GPTQ copy's bytes: every NVFP4 linear weight repacked (_gptq's size) plus what stays float16."""
    return model["nvfp4_other_bytes"] + sum(
        s["count"] * _gptq.repacked_tensor_bytes(s["out_features"], s["in_features"], group)
        for s in model["nvfp4_linear_shapes"])


def candidate(verdict, group):
    found = [c for c in verdict["serving"]["gptq_repack"]["candidates"] if c["group_size"] == group]
    assert found, verdict["serving"]["gptq_repack"]["candidates"]
    return found[0]


def test_the_reference_deployments_70b_nvfp4_is_served_from_a_gptq_repack_with_a_32k_context():
    # The reference deployment: 2x V100 32 GB, vLLM 0.8.5, --tensor-parallel-size 2 --dtype float16
    # --gpu-memory-utilization 0.92 --max-model-len 32768 --max-num-seqs 32 --enforce-eager.
    verdict = run(model=LLAMA_70B_NVFP4)
    assert verdict["allowed"] is True, verdict["reasons"]
    assert verdict["serving_path"] == "gptq_repack"
    serving = verdict["serving"]
    assert serving["tried"] == ["native", "fp16_fallback", "gptq_repack"]
    repack = serving["gptq_repack"]
    # Group 16 is one the exllama kernels compute wrong; 32 leaves too little KV cache for 32K;
    # 64 is the smallest that fits, with room for a full 32768-token sequence.
    assert repack["group_size"] == 64
    assert candidate(verdict, 16)["reasons"][0] == "QUANT_GROUP_SIZE_UNSUPPORTED"
    assert candidate(verdict, 32)["reasons"] == ["INSUFFICIENT_VRAM"]
    assert candidate(verdict, 32)["kv_cache_tokens"] < 32768
    assert [c["group_size"] for c in repack["candidates"]] == [16, 32, 64]
    assert repack["kv_cache_tokens"] >= 32768 and repack["max_model_len"] == 32768
    assert verdict["plan"]["fits_one_sequence"] is True
    # The size: every NVFP4 linear weight repacked plus the float16 rest, half of it per GPU.
    assert repack["repacked_bytes"] == repacked(LLAMA_70B_NVFP4, 64)
    assert 40e9 < repack["repacked_bytes"] < 42e9
    half = -(-repacked(LLAMA_70B_NVFP4, 64) // 2)
    assert repack["repacked_bytes_per_gpu"] == verdict["plan"]["weights_bytes_per_gpu"] == half
    assert repack["repacked_gib_per_gpu"] == round(repack["repacked_bytes_per_gpu"] / 2 ** 30, 2)
    assert 4.2 < repack["bits_per_weight"] < 4.4
    assert repack["expected_error"] == _gptq.EXPECTED_ERROR[64]
    assert repack["sized_from"] == "model.nvfp4_linear_shapes"
    # What the unit runs: the copy at /model, --quantization gptq --dtype float16, the request's flags.
    assert repack["vllm_args"] == {"quantization": "gptq", "dtype": "float16", "model": "/srv/models/model-gptq64"}
    assert serving["model_path"] == serving["gptq_model_path"] == "/srv/models/model-gptq64"
    assert verdict["deployment"]["serving_model_path"] == "/srv/models/model-gptq64"
    argv = verdict["instances"][0]["argv"]
    assert argv[:6] == ["--tensor-parallel-size", "2", "--dtype", "float16", "--quantization", "gptq"]
    for flag in ("--gpu-memory-utilization", "--max-model-len", "--max-num-seqs", "--enforce-eager"):
        assert flag in argv
    assert argv[argv.index("--max-model-len") + 1] == "32768"
    assert "NVFP4_GPTQ_REPACK" in codes(verdict["warnings"])
    assert "NVFP4_FP16_FALLBACK" not in codes(verdict["warnings"])
    why = serving["why"]
    assert "FP16 fallback is refused too (INSUFFICIENT_VRAM)" in why and "labfleet.vllm.nvfp4_repack" in why
    assert "group size 64" in why and "QUANT_GROUP_SIZE_UNSUPPORTED" in why
    assert "leaves KV cache for %d tokens at max_model_len 32768" % repack["kv_cache_tokens"] in why
    step = verdict["steps"]["model"]["gptq_copy"]
    assert step == dict(step, action="convert", dest="/srv/models/model-gptq64", group_size=64)
    assert "fp16_copy" not in verdict["steps"]["model"]
    assert serving["gptq_copy"]["disk_needed_bytes"] == repack["repacked_bytes"]
    assert "repack NVFP4 to GPTQ int4 (group size 64) at /srv/models/model-gptq64" in verdict["summary"]


def test_a_shorter_context_takes_the_smaller_group():
    # At 16K, group 32 (more accurate, larger) fits too, and the smallest group that fits wins.
    verdict = run(model=LLAMA_70B_NVFP4, req=request(vllm_args=dict(ARGS, max_model_len=16384)))
    assert verdict["serving_path"] == "gptq_repack", verdict["reasons"]
    assert verdict["serving"]["gptq_repack"]["group_size"] == 32
    assert verdict["serving"]["gptq_repack"]["expected_error"] == _gptq.EXPECTED_ERROR[32]
    assert verdict["deployment"]["serving_model_path"] == "/srv/models/model-gptq32"


def test_a_gpu_too_small_for_any_group_size_is_refused_with_each_groups_numbers():
    small = [dict(V100, name="Tesla V100-PCIE-16GB", memory_total_mib=16384),
             dict(V100, index=1, name="Tesla V100-PCIE-16GB", memory_total_mib=16384)]
    verdict = run(model=LLAMA_70B_NVFP4, gpus=small)
    assert verdict["allowed"] is False and verdict["serving_path"] is None
    assert codes(verdict["reasons"]) == ["QUANTIZATION_UNSUPPORTED_ON_ARCH", "INSUFFICIENT_VRAM"]
    assert verdict["serving"]["tried"] == ["native", "fp16_fallback", "gptq_repack"]
    assert [c["allowed"] for c in verdict["serving"]["gptq_repack"]["candidates"]] == [False] * 4
    text = message(verdict["reasons"], "INSUFFICIENT_VRAM")
    # The FP16 numbers, then each group size against the usable memory, then the ways out.
    assert "the FP16 fallback does not fit either" in text and "141.1 GB (131.4 GiB)" in text
    assert "repacked to GPTQ int4 it does not fit either at the requested max_model_len 32768" in text
    assert "group size 16: the gptq kernels compute it wrong (QUANT_GROUP_SIZE_UNSUPPORTED)" in text
    for group in (32, 64, 128):
        cand = candidate(verdict, group)
        assert "group size %d: %s" % (group, P._gb(repacked(LLAMA_70B_NVFP4, group))) in text
        assert "%.1f GiB of weights per GPU" % (cand["weights_bytes_per_gpu"] / 2 ** 30) in text
    assert "usable per GPU: %.1f GiB" % (candidate(verdict, 128)["usable_bytes_per_gpu"] / 2 ** 30) in text
    assert "vllm_args.cpu_offload_gb:" in text and "or more such GPUs" in text
    assert "no GPTQ group size works here" in verdict["serving"]["why"]
    assert verdict["deployment"]["serving_model_path"] is None
    assert verdict["summary"].startswith("refused (QUANTIZATION_UNSUPPORTED_ON_ARCH, INSUFFICIENT_VRAM)")


def test_where_the_fp16_copy_fits_the_repack_is_not_tried():
    verdict = run(model=LLAMA_8B_NVFP4_SHAPED)
    assert verdict["serving_path"] == "fp16_fallback"
    assert verdict["serving"]["tried"] == ["native", "fp16_fallback"]
    assert verdict["serving"]["gptq_repack"] is None and "gptq_copy" not in verdict["steps"]["model"]


def test_serving_path_gptq_repack_forces_the_repack():
    verdict = run(model=LLAMA_8B_NVFP4_SHAPED, req=request(serving_path="gptq_repack"))
    assert verdict["allowed"] is True, verdict["reasons"]
    assert verdict["serving_path"] == "gptq_repack"
    assert verdict["serving"]["tried"] == ["gptq_repack"]
    assert verdict["serving"]["gptq_repack"]["group_size"] == 32
    assert verdict["serving"]["why"].startswith("NVFP4 cannot be served natively here")
    # Where native works too (an L40S with vLLM 0.19.1), the request still gets the repack.
    req = request(image="vllm/vllm-openai:v0.19.1", driver={"manage": True, "branch": "580"},
                  vllm_args=dict(ARGS, tensor_parallel_size=1), serving_path="gptq_repack")
    l40s = run(model=LLAMA_8B_NVFP4_SHAPED, gpus=[L40S], image=IMAGE_0_19_1, driver="580.95.05", req=req)
    assert l40s["serving_path"] == "gptq_repack", l40s["reasons"]
    assert l40s["serving"]["why"].startswith("request.serving_path is gptq_repack; vllm_server repacks")
    assert "--quantization" in l40s["instances"][0]["argv"]


def test_the_request_names_the_group_size_and_the_copys_directory():
    req = request(serving_path="gptq_repack", gptq_group_size=128, gptq_model_path="/data/gptq/llama-8b/")
    verdict = run(model=LLAMA_8B_NVFP4_SHAPED, req=req)
    assert verdict["serving"]["gptq_repack"]["group_size"] == 128
    assert [c["group_size"] for c in verdict["serving"]["gptq_repack"]["candidates"]] == [128]
    assert verdict["deployment"]["serving_model_path"] == "/data/gptq/llama-8b"
    # A group size the kernels compute wrong is refused, not served.
    wrong = run(model=LLAMA_8B_NVFP4_SHAPED, req=request(serving_path="gptq_repack", gptq_group_size="16"))
    assert wrong["allowed"] is False
    assert "QUANT_GROUP_SIZE_UNSUPPORTED" in codes(wrong["reasons"])
    assert "multiple of 32" in message(wrong["reasons"], "QUANT_GROUP_SIZE_UNSUPPORTED")
    # 0 and "auto" leave the choice to the gate.
    for value in (0, "0", "auto", ""):
        auto = run(model=LLAMA_8B_NVFP4_SHAPED, req=request(serving_path="gptq_repack", gptq_group_size=value))
        assert auto["serving"]["gptq_repack"]["group_size"] == 32
    assert P.gptq_copy_path("/srv/models/m/", None, 64) == "/srv/models/m-gptq64"
    assert P.gptq_copy_path("/srv/models/m", "/x", 64) == "/x"
    assert P.gptq_copy_path(None, None, 64) is None and P.gptq_copy_path("/srv/m", None, None) is None


def test_a_layer_whose_input_is_not_a_multiple_of_the_group_is_not_repacked_at_that_group():
    # One layer of in_features 8208 (513 blocks of 16): group 32 does not divide it, 64 and 128 neither;
    # 16 is wrong in the kernels: no group size works, and the refusal says why for each.
    shapes = LLAMA_8B_NVFP4_SHAPED["nvfp4_linear_shapes"] + [{"out_features": 4096, "in_features": 8208, "count": 1}]
    model = dict(LLAMA_8B_NVFP4_SHAPED, nvfp4_linear_shapes=shapes)
    verdict = run(model=model, req=request(serving_path="gptq_repack"))
    assert verdict["allowed"] is False
    assert candidate(verdict, 32)["reasons"] == ["QUANT_GROUP_SIZE_NOT_ALIGNED"]
    assert "shape [4096, 8208] has in_features 8208, not a multiple of 32" in candidate(verdict, 32)["why"]
    assert "QUANT_GROUP_SIZE_NOT_ALIGNED" in codes(verdict["reasons"])


def test_a_row_parallel_input_the_group_does_not_divide_skips_that_group():
    # intermediate_size 13696 over TP 2: down_proj's per-GPU input 6848 is a multiple of 64, not of 128.
    shapes = decoder_shapes(4096, 32, 32, 8, 13696)
    model = dict(LLAMA_8B_NVFP4, intermediate_size=13696, nvfp4_linear_shapes=shapes,
                 nvfp4_other_bytes=other_bytes(4096, 32, 128256))
    verdict = run(model=model, req=request(serving_path="gptq_repack", gptq_group_size=128))
    assert "QUANT_GROUP_SIZE_NOT_ALIGNED" in codes(verdict["reasons"]), verdict["reasons"]
    assert run(model=model, req=request(serving_path="gptq_repack", gptq_group_size=64))["allowed"] is True


def test_the_gptq_copy_on_disk():
    forced = request(serving_path="gptq_repack")
    full = run(model=LLAMA_8B_NVFP4_SHAPED, req=forced, fp16_copy=None)
    assert full["allowed"] is True
    assert "the converter checks it before it writes anything" in message(full["warnings"], "GPTQ_COPY_DISK_UNCHECKED")
    size = full["serving"]["gptq_repack"]["repacked_bytes"]
    # Too little room: refused with the numbers and the request field to change.
    tight = P.plan(gpus=GPUS, driver_version="550.54.14", image=IMAGE_0_8_5, model=LLAMA_8B_NVFP4_SHAPED,
                   request=forced, nvlink=False, today=TODAY, gptq_copy={"disk_free_bytes": size // 2})
    assert codes(tight["reasons"]) == ["QUANTIZATION_UNSUPPORTED_ON_ARCH", "INSUFFICIENT_DISK"]
    text = message(tight["reasons"], "INSUFFICIENT_DISK")
    assert "the GPTQ copy of the NVFP4 checkpoint needs about %s at /srv/models/model-gptq32" % P._gb(size) in text
    assert "request.gptq_model_path" in text
    # A finished copy (its manifest is there) needs no room and is kept.
    done = P.plan(gpus=GPUS, driver_version="550.54.14", image=IMAGE_0_8_5, model=LLAMA_8B_NVFP4_SHAPED,
                  request=forced, nvlink=False, today=TODAY,
                  gptq_copy={"disk_free_bytes": 1, "complete_paths": ["/srv/models/model-gptq32"]})
    assert done["allowed"] is True, done["reasons"]
    assert done["steps"]["model"]["gptq_copy"]["action"] == "keep"
    assert done["serving"]["gptq_copy"]["disk_needed_bytes"] == 0
    assert "keep the GPTQ copy at /srv/models/model-gptq32" in done["summary"]
    with pytest.raises(GateInputError) as err:
        P.plan(gpus=GPUS, model=LLAMA_8B_NVFP4_SHAPED, request=forced, gptq_copy={"complete_paths": "/x"})
    assert "gptq_copy.complete_paths" in str(err.value)


def test_every_instance_serves_the_same_gptq_copy():
    req = request(serving_path="gptq_repack", vllm_args=dict(ARGS, tensor_parallel_size=1),
                  instances=[{"name": "a", "port": 8000, "gpus": [0]}, {"name": "b", "port": 8001, "gpus": [1]}])
    verdict = run(model=LLAMA_8B_NVFP4_SHAPED, req=req)
    assert verdict["serving_path"] == "gptq_repack", verdict["reasons"]
    assert [i["allowed"] for i in verdict["instances"]] == [True, True]
    assert all(i["argv"][:4] == ["--tensor-parallel-size", "1", "--dtype", "float16"] for i in verdict["instances"])
    assert all("--quantization" in i["argv"] for i in verdict["instances"])
    size = verdict["serving"]["gptq_repack"]["repacked_bytes"]
    assert [i["memory_plan"]["weights_bytes_per_gpu"] for i in verdict["instances"]] == [size, size]


def test_a_forced_repack_without_shapes_is_estimated_from_the_parameter_count():
    verdict = run(model=LLAMA_8B_NVFP4, req=request(serving_path="gptq_repack"))
    assert verdict["serving_path"] == "gptq_repack", verdict["reasons"]
    repack = verdict["serving"]["gptq_repack"]
    assert repack["sized_from"] == "model.param_count (estimated)" and repack["repacked_bytes"] is None
    assert "WEIGHTS_ESTIMATED" in codes(verdict["warnings"])


@pytest.mark.parametrize("shapes, fragment", [
    ("8192x8192", "model.nvfp4_linear_shapes: expected a list"),
    ([{"out_features": 8192, "in_features": 0, "count": 1}], "model.nvfp4_linear_shapes[0].in_features"),
    ([{"out_features": 8192, "in_features": 8192, "count": True}], "model.nvfp4_linear_shapes[0].count"),
    ([{"out_features": 8192.5, "in_features": 8192, "count": 1}], "model.nvfp4_linear_shapes[0].out_features"),
    ([[8192, 8192]], "model.nvfp4_linear_shapes[0]"),
    ([{"out_features": 2 ** 41, "in_features": 16, "count": 1}], "model.nvfp4_linear_shapes[0].out_features"),
])
def test_malformed_shapes_name_the_field(shapes, fragment):
    with pytest.raises(GateInputError) as err:
        run(model=dict(LLAMA_8B_NVFP4, nvfp4_linear_shapes=shapes), req=request(serving_path="gptq_repack"))
    assert fragment in str(err.value)
