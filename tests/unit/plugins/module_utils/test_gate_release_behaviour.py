# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Each admitted release judged as that release behaves (issue 24, section 1).

The policy's release-behaviour table (_policy.RELEASE_BEHAVIOUR) has one row per release of
VLLM_RELEASES and one cell per behaviour the releases differ in; the gate's rules read it. One
group of tests per class, each closed as a class:

- memory profile: the engine and the profile run the release sizes the KV cache with;
- dtype auto: the release's rule, and the gate's own fix-up following it;
- quantization method per compute capability: GPTQ / AWQ on Marlin (bfloat16) where the release
  converts them, and model_facts' sym / desc_act / zero_point it needs;
- forward compatibility: only on the GPUs NVIDIA supports it on, by brand;

and the table itself (complete, sourced, rendered into docs/deploy_gate.md), and the warning for a
release without a row.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import json
import os
import re
import sys

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _vllm_startup as S
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate import evaluate
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge import _policy as P
from ansible_collections.labfleet.vllm.plugins.module_utils.probes import _model as M

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_gate_vllm_refusals as R  # noqa: E402  (its GPUs and its codes() / message() helpers)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
TODAY = datetime.date(2026, 9, 1)

V100, T4, A100, RTX3090 = R.V100, R.T4, R.A100, R.RTX3090
L4 = {"name": "NVIDIA L4", "compute_capability": "8.9", "memory_total_mib": 23034}
codes, message = R.codes, R.message
TITAN_V = {"name": "NVIDIA TITAN V", "compute_capability": "7.0", "memory_total_mib": 12288}
RTX_A6000 = {"name": "NVIDIA RTX A6000", "compute_capability": "8.6", "memory_total_mib": 49140}

# meta-llama/Llama-3.1-8B-Instruct config.json (bfloat16) with the safetensors bytes.
LLAMA_8B = {"model_type": "llama", "num_hidden_layers": 32, "num_key_value_heads": 8, "head_dim": 128,
            "num_attention_heads": 32, "hidden_size": 4096, "intermediate_size": 14336, "vocab_size": 128256,
            "max_position_embeddings": 131072, "torch_dtype": "bfloat16", "weight_bytes": 16060522496}
# google/gemma-2-2b-it config.json (bfloat16; vLLM 0.19.1 refuses float16 for gemma2).
GEMMA2_2B = {"model_type": "gemma2", "num_hidden_layers": 26, "num_key_value_heads": 4, "head_dim": 256,
             "num_attention_heads": 8, "hidden_size": 2304, "intermediate_size": 9216, "vocab_size": 256000,
             "max_position_embeddings": 8192, "torch_dtype": "bfloat16", "weight_bytes": 5228683776}
# A Llama-3.1-8B GPTQ int4 checkpoint whose config asks for bfloat16 (GPTQModel writes the base
# model's dtype), with quantization_config {bits 4, group_size 128, sym true, desc_act false}.
LLAMA_8B_GPTQ = dict(LLAMA_8B, quant_method="gptq", quant_bits=4, quant_group_size=128, quant_sym=True,
                     quant_desc_act=False, quant_zero_point=None, weight_bytes=5730000000)
# The same as an AutoAWQ checkpoint (GEMM, zero_point true).
LLAMA_8B_AWQ = dict(LLAMA_8B, quant_method="awq", quant_bits=4, quant_group_size=128, quant_sym=None,
                    quant_desc_act=None, quant_zero_point=True, weight_bytes=5730000000)

DRIVER = "580.95.05"


def image(version):
    """The shipped profile of a release, as vllm_image_facts reports an image (CUDA, require, version)."""
    cuda = P.VLLM_RELEASES[version]["cuda_base"]
    return {"cuda_version": cuda, "require_cuda": P.require_cuda_string(cuda), "vllm_version": version}


def gate(version="0.8.5", gpus=(A100,), model=None, vllm=None, driver=DRIVER, **kwargs):
    args = dict(gpus=list(gpus), driver_version=driver, image=image(version) if isinstance(version, str) else version,
                model=LLAMA_8B if model is None else model, vllm=dict({"max_model_len": 8192}, **(vllm or {})),
                today=TODAY)
    args.update(kwargs)
    return evaluate(**args)


# --- the table ----------------------------------------------------------------------------------


def test_every_release_the_policy_lists_has_a_row_with_every_behaviour():
    assert set(P.RELEASE_BEHAVIOUR) == set(P.VLLM_RELEASES)
    assert P.RELEASE_BEHAVIOUR_DEFAULT in P.RELEASE_BEHAVIOUR
    for release, row in P.RELEASE_BEHAVIOUR.items():
        assert set(row) == set(P.RELEASE_BEHAVIOUR_KINDS), release
        for kind, cell in row.items():
            assert set(cell) == {"value", "source", "confidence"}, (release, kind)
            assert cell["confidence"] in ("verified", "inferred"), (release, kind)
            assert cell["source"].strip() and cell["value"], (release, kind)


def test_every_cell_cites_its_own_release_or_the_research_notes():
    """A cell's source names a file of that release's tree (vllm@<release>:...), or facts.md's
    section (S-FACTS-*) for a behaviour read there; a verified cell never rests on another
    release's file alone."""
    for release, row in P.RELEASE_BEHAVIOUR.items():
        for kind, cell in row.items():
            own = "vllm@%s:" % release in cell["source"]
            assert own or "S-FACTS-" in cell["source"], (release, kind)
            if cell["confidence"] == "verified":
                cited = set(re.findall(r"vllm@([0-9.]+):", cell["source"]))
                assert cited <= {release} or "S-FACTS-" in cell["source"], (release, kind, cited)


def test_the_docs_carry_the_rendered_table():
    with open(os.path.join(REPO, "docs", "deploy_gate.md")) as handle:
        md = handle.read()
    assert P.render_release_behaviour_markdown() in md, "run: render_release_behaviour_markdown() into the docs"


@pytest.mark.parametrize("version,key,how", [
    ((0, 8, 5), "0.8.5", None),
    ((0, 19, 1), "0.19.1", None),
    ((0, 8, 4), "0.8.5", "line"),           # the row of its minor line
    ((0, 19, 0), "0.19.1", "line"),
    ((0, 9, 1), "0.9.0", "line"),           # the newest row of the line at or below it
    ((0, 10, 1), "0.10.1.1", "line"),       # a line whose only row is newer
    ((0, 12, 0), "0.11.1", "older"),        # no row in its line: the newest before it
    ((0, 21, 0), "0.20.0", "older"),
    ((0, 5, 4), "0.6.3", "oldest"),
    (None, "0.8.5", "default"),
])
def test_the_row_a_release_is_judged_by(version, key, how):
    found = P.release_behaviour(P.RELEASE_BEHAVIOUR, version)
    assert (found[0], found[2]) == (key, how)
    assert found[1] is P.RELEASE_BEHAVIOUR[key]


def test_a_release_without_a_row_is_warned_naming_the_release_and_the_behaviour():
    result = gate(version=dict(image("0.8.5"), vllm_version="0.8.4"))
    text = message(result, "RELEASE_BEHAVIOUR_ASSUMED", "warnings")
    assert "vLLM 0.8.4" in text and "as vLLM 0.8.5 behaves" in text
    for words in ("memory profile:", "dtype auto:", "GPTQ/AWQ on Marlin:", "forward compatibility:"):
        assert words in text
    assert "RELEASE_BEHAVIOUR_ASSUMED" not in codes(gate(), "warnings")
    assert "RELEASE_BEHAVIOUR_ASSUMED" not in codes(gate(version=dict(image("0.8.5"), vllm_version=None)), "warnings")
    unknown = gate(version=dict(image("0.8.5"), vllm_version="latest"))
    assert "vLLM 0.8.5 (the reference release)" in message(unknown, "VLLM_VERSION_UNKNOWN", "warnings")


# --- memory profile -----------------------------------------------------------------------------


def test_a_context_that_fits_under_0_8_5_is_refused_under_0_6_x_with_vllms_message():
    """On an L4 (8.9, 22.5 GiB) Llama-3.1-8B in bfloat16 with a 32768-token context: vLLM 0.8.5
    runs V1 there and profiles 2048 tokens; 0.6.3 has only V0, which keeps chunked prefill off up
    to 32768 tokens and profiles the whole context in one pass, so its activation peak leaves too
    little KV cache for one sequence."""
    vllm = {"max_model_len": 32768, "gpu_memory_utilization": 0.95}
    new = gate("0.8.5", gpus=[L4], vllm=vllm)
    old = gate("0.6.3", gpus=[L4], vllm=vllm)
    assert new["allowed"], new["reasons"]
    assert (new["plan"]["reserve_model"]["engine"], new["plan"]["reserve_model"]["profile_tokens"]) == ("v1", 2048)
    assert (old["plan"]["reserve_model"]["engine"], old["plan"]["reserve_model"]["profile_tokens"]) == ("v0", 32768)
    assert old["plan"]["reserve_bytes"] > new["plan"]["reserve_bytes"]
    assert codes(old) == ["INSUFFICIENT_VRAM"]
    text = message(old, "INSUFFICIENT_VRAM")
    assert "vLLM 0.6.3 (V0 engine, a profile run of 32768 tokens in one pass)" in text
    assert ("'The model's max seq len (32768) is larger than the maximum number of tokens that can be stored in KV "
            "cache (%d)." % old["plan"]["kv_cache_tokens"]) in text
    assert codes(gate("0.7.3", gpus=[L4], vllm=vllm)) == ["INSUFFICIENT_VRAM"]   # V1 only opt-in


def test_v1s_own_message_where_the_release_runs_v1():
    result = gate("0.8.5", gpus=[L4], vllm={"max_model_len": 65536, "gpu_memory_utilization": 0.95})
    assert "(V1 engine, a profile run of 2048 tokens) stops at startup with 'To serve at least one request" in \
        message(result, "INSUFFICIENT_VRAM")


@pytest.mark.parametrize("version,gpu,engine", [
    ("0.6.3", A100, "v0"), ("0.7.3", A100, "v0"),
    ("0.8.5", A100, "v1"), ("0.8.5", T4, "v0"),
    ("0.9.2", T4, "v0"), ("0.10.1.1", T4, "v0"),      # V1 below 8.0 only from 0.10.2 (facts.md 3.2)
    ("0.10.1.1", A100, "v1"), ("0.10.2", T4, "v1"), ("0.19.1", T4, "v1"), ("0.20.0", T4, "v1"),
])
def test_the_engine_each_release_runs(version, gpu, engine):
    gpus = [dict(gpu, memory_total_mib=81920)]
    reserve = gate(version, gpus=gpus, model=dict(LLAMA_8B, torch_dtype="float16"))["plan"]["reserve_model"]
    assert reserve["engine"] == engine


def test_0_6_3_chunks_long_prefills_by_512_tokens():
    """Above 32768 tokens V0 turns chunked prefill on; 0.6.3 then batches 512 tokens, 0.8.5 2048."""
    vllm = {"max_model_len": 65536}
    assert gate("0.6.3", vllm=vllm)["plan"]["reserve_model"]["profile_tokens"] == 512
    assert gate("0.8.5", gpus=[V100], vllm=vllm)["plan"]["reserve_model"]["profile_tokens"] == 2048


# --- dtype auto ---------------------------------------------------------------------------------


@pytest.mark.parametrize("version,gpu,model,effective,served,warning", [
    # 0.8.5 keeps the checkpoint's bfloat16 and raises below 8.0: the gate's fix-up writes float16.
    ("0.8.5", V100, LLAMA_8B, "float16", "float16", "DTYPE_AUTOFIXED"),
    ("0.8.5", V100, GEMMA2_2B, "float16", "float16", "DTYPE_AUTOFIXED"),
    # 0.19.1 falls back by itself; the gate pins what it picks: float16, but float32 for gemma2
    # (float16 refused: vllm@0.19.1:vllm/config/model.py:1922).
    ("0.19.1", V100, LLAMA_8B, "float16", "float16", "DTYPE_AUTOFIXED"),
    ("0.19.1", V100, GEMMA2_2B, "float32", "float32", "DTYPE_AUTOFIXED"),
    ("0.10.2", T4, GEMMA2_2B, "float32", "float32", "DTYPE_AUTOFIXED"),
    # float32 checkpoints: 0.8.5 serves float16, 0.19.1 the first supported dtype (bfloat16 on 8.0).
    ("0.8.5", A100, dict(LLAMA_8B, torch_dtype="float32"), "auto", "float16", None),
    ("0.19.1", A100, dict(LLAMA_8B, torch_dtype="float32"), "auto", "bfloat16", None),
    ("0.19.1", V100, dict(LLAMA_8B, torch_dtype="float32"), "auto", "float16", None),
    # 0.8.5 serves PLaMo2 in bfloat16 whatever its config says (config.py:2903-2914).
    ("0.8.5", A100, dict(LLAMA_8B, model_type="plamo2", torch_dtype="float16"), "auto", "bfloat16", None),
])
def test_dtype_auto_per_release(version, gpu, model, effective, served, warning):
    result = gate(version, gpus=[gpu], model=model, vllm={"dtype": "auto", "max_model_len": 4096})
    assert result["effective_vllm"]["dtype"] == effective
    assert result["plan"]["kv_cache_dtype_bytes"] == P.DTYPES[served]["bytes"]
    assert [w for w in codes(result, "warnings") if w.startswith("DTYPE_")] == ([warning] if warning else [])
    assert "DTYPE_UNSUPPORTED_BY_MODEL" not in codes(result)
    if warning:
        assert "changed to %s" % served in message(result, warning, "warnings")


def test_gemma2_float32_on_a_v100_is_sized_in_float32():
    """0.19.1 serves Gemma 2 in float32 on a GPU without bfloat16: the plan's weights double."""
    result = gate("0.19.1", gpus=[V100], model=GEMMA2_2B, vllm={"max_model_len": 4096})
    assert result["plan"]["weights_bytes_total"] == GEMMA2_2B["weight_bytes"] * 2
    assert "refuses float16 for gemma2" not in message(result, "DTYPE_AUTOFIXED", "warnings")
    explicit = gate("0.19.1", gpus=[V100], model=GEMMA2_2B, vllm={"dtype": "bfloat16", "max_model_len": 4096})
    assert explicit["effective_vllm"]["dtype"] == "float32"
    assert "vLLM 0.19.1 refuses float16 for gemma2" in message(explicit, "DTYPE_AUTOFIXED", "warnings")


def test_without_auto_fix_only_a_release_that_fails_is_refused():
    """auto_fix off: dtype auto of a bfloat16 checkpoint on a V100 fails in 0.8.5 (refused) and
    resolves in 0.19.1 (allowed, served in float16, the argv unchanged)."""
    off = {"auto_fix": False}
    assert codes(gate("0.8.5", gpus=[V100], vllm={"dtype": "auto"}, policy_overrides=off)) == ["DTYPE_UNSUPPORTED"]
    later = gate("0.19.1", gpus=[V100], vllm={"dtype": "auto"}, policy_overrides=off)
    assert later["allowed"], later["reasons"]
    assert later["effective_vllm"]["dtype"] == "auto"
    assert later["plan"]["weights_bytes_total"] == LLAMA_8B["weight_bytes"]
    assert codes(gate("0.19.1", gpus=[V100], vllm={"dtype": "bfloat16"}, policy_overrides=off)) == ["DTYPE_UNSUPPORTED"]


def test_the_startup_checks_refuse_float16_for_the_model_types_of_0_19_1s_row():
    """_vllm_startup's DTYPE_UNSUPPORTED_BY_MODEL list is the same fact as the 0.19.1 cell."""
    cell = P.RELEASE_BEHAVIOUR["0.19.1"]["dtype_auto"]["value"]["float16_refused_model_types"]
    assert list(S.FLOAT16_UNSUPPORTED_MODEL_TYPES_0_19_1) == cell


@pytest.mark.parametrize("rule,model_type,config,cc,expected", [
    ({"rule": "checkpoint"}, "llama", "bfloat16", (7, 0), "bfloat16"),
    ({"rule": "checkpoint"}, "llama", "float32", (8, 0), "float16"),
    ({"rule": "checkpoint", "float32_bfloat16_model_types": ["gemma2"]}, "gemma2", "float32", (8, 0), "bfloat16"),
    ({"rule": "checkpoint"}, "llama", None, (7, 0), None),
    ({"rule": "platform"}, "llama", "bfloat16", (7, 0), "float16"),
    ({"rule": "platform"}, "llama", None, (7, 5), "float16"),      # every dtype falls back to float16 there
    ({"rule": "platform"}, "llama", None, (8, 0), None),
    ({"rule": "platform", "float16_refused_model_types": ["gemma2"]}, "gemma2", "float16", (8, 0), "bfloat16"),
    ({"rule": "platform", "float16_refused_model_types": ["gemma2"]}, "gemma2", "bfloat16", (7, 5), "float32"),
    ({"rule": "platform"}, "llama", "bfloat16", None, None),
])
def test_resolve_auto_dtype(rule, model_type, config, cc, expected):
    assert P.resolve_auto_dtype(rule, model_type, config, cc)[0] == expected


# --- quantization method per compute capability ---------------------------------------------------


def test_gptq_bfloat16_on_ampere_runs_on_gptq_marlin():
    """vLLM 0.8.5 on 8.0 serves a sym GPTQ checkpoint that declares desc_act with gptq_marlin
    (GPTQMarlinConfig.override_quantization_method), which takes bfloat16."""
    for desc_act in (False, True):
        result = gate("0.8.5", model=dict(LLAMA_8B_GPTQ, quant_desc_act=desc_act))
        assert result["allowed"], result["reasons"]
        assert result["effective_vllm"].get("dtype") is None
    assert gate("0.19.1", model=LLAMA_8B_GPTQ)["allowed"]
    assert gate("0.8.5", model=LLAMA_8B_AWQ)["allowed"]


@pytest.mark.parametrize("change,why", [
    ({"quant_sym": False}, "its quantization_config has sym false (gptq_marlin needs true)"),
    ({"quant_desc_act": None}, "its quantization_config declares no desc_act"),
    ({"quant_group_size": 16}, "its group_size is 16"),
    ({"quant_bits": 3}, "its bits is 3"),
])
def test_gptq_bfloat16_is_refused_where_marlin_does_not_take_the_checkpoint(change, why):
    result = gate("0.8.5", model=dict(LLAMA_8B_GPTQ, **change))
    text = message(result, "QUANTIZATION_DTYPE_UNSUPPORTED")
    assert "vLLM 0.8.5 does not serve it with gptq_marlin: %s" % why in text
    assert "set vllm.dtype to float16" in text


def test_gptq_facts_the_model_input_lacks_keep_the_plain_kernels():
    model = dict((k, v) for k, v in LLAMA_8B_GPTQ.items() if k not in ("quant_sym", "quant_desc_act"))
    text = message(gate("0.8.5", model=model), "QUANTIZATION_DTYPE_UNSUPPORTED")
    assert "the model input does not give its sym (model_facts quant_sym)" in text


def test_forcing_the_plain_kernels_keeps_them():
    result = gate("0.8.5", model=LLAMA_8B_GPTQ, vllm={"quantization": "gptq"})
    assert "vllm.quantization gptq forces the gptq kernels" in message(result, "QUANTIZATION_DTYPE_UNSUPPORTED")
    assert gate("0.8.5", model=LLAMA_8B_GPTQ, vllm={"quantization": "gptq_marlin"})["allowed"]


def test_awq_without_zero_point_keeps_the_gemm_kernels():
    result = gate("0.8.5", model=dict(LLAMA_8B_AWQ, quant_zero_point=False))
    assert "its quantization_config has zero_point false (awq_marlin needs true)" in \
        message(result, "QUANTIZATION_DTYPE_UNSUPPORTED")


def test_below_marlins_compute_capability_the_plain_kernels_run():
    """0.8.5's Marlin needs 8.0, 0.19.1's 7.5: on a T4 (no bfloat16 anyway) the dtype fix-up makes
    float16, and gptq runs; the plan's reserve counts exllama's dequantized weight copy only there."""
    for version in ("0.8.5", "0.19.1"):
        result = gate(version, gpus=[T4], model=LLAMA_8B_GPTQ, vllm={"max_model_len": 2048})
        assert "QUANTIZATION_DTYPE_UNSUPPORTED" not in codes(result)
        assert result["effective_vllm"]["dtype"] == "float16"


def test_asking_for_marlin_on_a_checkpoint_it_cannot_take_is_vllms_mismatch():
    result = gate("0.8.5", model=dict(LLAMA_8B_GPTQ, quant_sym=False),
                  vllm={"quantization": "gptq_marlin", "dtype": "float16"})
    text = message(result, "QUANTIZATION_MISMATCH")
    assert "converts this GPTQ checkpoint to it only when it can (its quantization_config has sym false" in text
    assert "'Quantization method specified in the model config (gptq) does not match" in text
    # A key the input does not carry is no known blocker; below 8.0 the arch rule speaks.
    unknown = dict((k, v) for k, v in LLAMA_8B_GPTQ.items() if k != "quant_sym")
    assert "QUANTIZATION_MISMATCH" not in codes(gate("0.8.5", model=unknown,
                                                     vllm={"quantization": "gptq_marlin", "dtype": "float16"}))
    below = gate("0.8.5", gpus=[V100], model=LLAMA_8B_GPTQ, vllm={"quantization": "gptq_marlin"})
    assert codes(below) == ["QUANTIZATION_UNSUPPORTED_ON_ARCH"]


def test_model_facts_reads_sym_desc_act_and_zero_point_from_config_json():
    qc = {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True, "desc_act": False}
    gptq = M.quant_from_config_json(qc, "config.json")
    assert (gptq["quant_sym"], gptq["quant_desc_act"], gptq["quant_zero_point"]) == (True, False, None)
    awq = M.quant_from_config_json({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True},
                                   "config.json")
    assert (awq["quant_sym"], awq["quant_desc_act"], awq["quant_zero_point"]) == (None, None, True)
    with pytest.raises(M.ModelFileError, match="quantization_config.sym must be true or false"):
        M.quant_from_config_json(dict(qc, sym="yes"), "config.json")
    # quantize_config.json is not where vLLM's Marlin check reads them.
    legacy = M.quant_from_quant_config({"bits": 4, "group_size": 128, "sym": True, "desc_act": False},
                                       "quantize_config.json")
    assert (legacy["quant_sym"], legacy["quant_desc_act"]) == (None, None)
    assert {"quant_sym", "quant_desc_act", "quant_zero_point"} <= set(M.GATE_KEYS)


def test_model_facts_gate_input_lets_bfloat16_gptq_run_on_marlin(tmp_path):
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
              "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
              "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 131072,
              "torch_dtype": "bfloat16",
              "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True,
                                      "desc_act": True}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    header = json.dumps({"w": {"dtype": "I32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    (tmp_path / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 16)
    model = M.read_model_dir(str(tmp_path))["gate"]
    assert (model["quant_sym"], model["quant_desc_act"]) == (True, True)
    assert gate("0.8.5", model=dict(model, weight_bytes=5730000000))["allowed"]


# --- forward compatibility -----------------------------------------------------------------------


def test_a_geforce_on_an_old_driver_is_refused():
    """R470 is below CUDA 12's floor (525); the CUDA 12.4 image's NVIDIA_REQUIRE_CUDA admits it
    through brand=geforce,driver>=470, but NVIDIA's forward compatibility does not run on GeForce
    (error 804): refused. The same host with a Tesla is warned."""
    for gpu in (RTX3090, TITAN_V):
        result = gate("0.8.5", gpus=[gpu], driver="470.256.02", vllm={"dtype": "float16"})
        text = message(result, "DRIVER_TOO_OLD_FOR_IMAGE")
        assert "'forward compatibility was attempted on non supported HW'" in text
        assert "NVIDIA data-center GPUs" in text
        assert "FORWARD_COMPAT_REQUIRED" not in codes(result, "warnings")
    tesla = gate("0.8.5", gpus=[V100], driver="470.256.02", vllm={"dtype": "float16"})
    assert "DRIVER_TOO_OLD_FOR_IMAGE" not in codes(tesla)
    assert "vLLM 0.8.5's image wires them in when it is built" in message(tesla, "FORWARD_COMPAT_REQUIRED", "warnings")
    datacenter = gate("0.8.5", gpus=[A100], driver="470.256.02")
    assert "FORWARD_COMPAT_REQUIRED" in codes(datacenter, "warnings") and "DRIVER_TOO_OLD_FOR_IMAGE" not in codes(datacenter)


def test_a_professional_rtx_is_warned_that_only_select_skus_work():
    result = gate("0.8.5", gpus=[RTX_A6000], driver="470.256.02")
    assert "DRIVER_TOO_OLD_FOR_IMAGE" not in codes(result)
    assert "select NGC Server Ready SKUs" in message(result, "FORWARD_COMPAT_REQUIRED", "warnings")


def test_the_release_says_how_its_cuda_compat_libraries_come_in():
    """0.20.0's CUDA 13.0 image admits R570 on a data-center GPU through its brand clause, below
    CUDA 13's floor (580): only the cuda-compat libraries, which that image loads only on request."""
    result = gate("0.20.0", gpus=[A100], driver="570.195.03")
    assert "vLLM 0.20.0's image loads them only with -e VLLM_ENABLE_CUDA_COMPATIBILITY=1" in \
        message(result, "FORWARD_COMPAT_REQUIRED", "warnings")
    # The CUDA 13.0 image names no GeForce brand: the legacy hook refuses it already.
    assert "DRIVER_TOO_OLD_FOR_IMAGE" in codes(gate("0.20.0", gpus=[RTX3090], driver="570.195.03"))


@pytest.mark.parametrize("brand,kind", [
    ("tesla", "data_center"), ("nvidia", "data_center"), ("quadrortx", "select"), ("nvidiartx", "select"),
    ("geforce", "consumer"), ("geforcertx", "consumer"), ("titan", "consumer"), ("unknown", None), (None, None),
])
def test_forward_compat_support_by_brand(brand, kind):
    assert P.forward_compat_support(brand) == kind
