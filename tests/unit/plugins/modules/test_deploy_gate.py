# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Tests of the labfleet.vllm.deploy_gate module through its entry point (main())."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
from unittest import mock

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.labfleet.vllm.plugins.modules import deploy_gate

V100 = {"name": "Tesla V100-PCIE-32GB", "compute_capability": "7.0", "memory_total_mib": 32768,
        "architecture": "Volta", "uuid": "GPU-1", "pci_bus_id": "00000000:3B:00.0"}
REFERENCE = {
    "gpus": [V100, dict(V100, uuid="GPU-2")],
    "driver_version": "550.54.14",
    "nvlink": False,
    "image": {"cuda_version": "12.4.1", "arch_list": "7.0 7.5 8.0 8.6 8.9 9.0+PTX", "vllm_version": "0.8.5",
              "require_cuda": "cuda>=12.4 brand=tesla,driver>=470,driver<471"},
    "model": {"weight_bytes": 16060522496, "num_hidden_layers": 32, "num_key_value_heads": 8, "head_dim": 128,
              "max_position_embeddings": 8192, "torch_dtype": "bfloat16"},
    "vllm": {"tensor_parallel_size": 2, "dtype": "bfloat16", "gpu_memory_utilization": 0.92,
             "max_model_len": 8192, "served_model_name": "quasar"},
}


class _Exit(Exception):
    def __init__(self, kind, result):
        Exception.__init__(self, kind)
        self.kind = kind
        self.result = result


def _exit_json(self, **kwargs):
    raise _Exit("exit", kwargs)


def _fail_json(self, msg, **kwargs):
    kwargs["msg"] = msg
    kwargs["failed"] = True
    raise _Exit("fail", kwargs)


def run_module(args, check_mode=False):
    args = dict(args)
    if check_mode:
        args["_ansible_check_mode"] = True
    with patch_module_args(args), \
            mock.patch.object(basic.AnsibleModule, "exit_json", _exit_json), \
            mock.patch.object(basic.AnsibleModule, "fail_json", _fail_json):
        try:
            deploy_gate.main()
        except _Exit as done:
            return done.kind, done.result
    raise AssertionError("the module returned without exit_json or fail_json")


def _codes(items):
    return [item["code"] for item in items]


def test_reference_deployment_through_the_module():
    kind, result = run_module(REFERENCE)
    assert kind == "exit"
    assert result["changed"] is False
    assert result["verdict"]["allowed"] is True
    assert result["verdict"]["reasons"] == []
    assert "DTYPE_AUTOFIXED" in _codes(result["verdict"]["warnings"])
    assert "PCIE_WITHOUT_P2P" in _codes(result["verdict"]["warnings"])
    assert result["verdict"]["effective_vllm"]["dtype"] == "float16"
    assert result["verdict"]["effective_vllm"]["served_model_name"] == "quasar"
    assert result["verdict"]["plan"]["kv_bytes_per_token_per_gpu"] == 2 * 32 * 4 * 128 * 2
    assert result["verdict"]["driver_requirements"]["max_branch"] == 580
    verdict = result["verdict"]
    assert set(verdict) >= {"allowed", "reasons", "warnings", "effective_vllm", "plan", "made_from"}
    # One plan object: nothing of it is returned a second time beside it.
    assert set(result) == {"changed", "verdict"}


def test_check_mode_gives_the_same_verdict():
    normal = run_module(REFERENCE)[1]
    kind, checked = run_module(REFERENCE, check_mode=True)
    assert kind == "exit"
    assert checked["verdict"] == normal["verdict"]


def test_refusal_is_not_a_failure():
    args = dict(REFERENCE, gpus=[{"name": "Tesla P100-PCIE-16GB", "compute_capability": "6.0",
                                  "memory_total_mib": 16384}])
    kind, result = run_module(args)
    assert kind == "exit"
    assert result["verdict"]["allowed"] is False
    assert "COMPUTE_CAPABILITY_TOO_LOW" in _codes(result["verdict"]["reasons"])


def test_policy_option_reaches_the_gate():
    kind, result = run_module(dict(REFERENCE, policy={"auto_fix": False}))
    assert kind == "exit"
    assert _codes(result["verdict"]["reasons"]) == ["DTYPE_UNSUPPORTED"]


def test_driver_library_mismatch_option():
    kind, result = run_module(dict(REFERENCE, driver_library_mismatch=True))
    assert "DRIVER_LIBRARY_MISMATCH" in _codes(result["verdict"]["reasons"])


def test_no_driver_on_a_fresh_host():
    args = dict(REFERENCE)
    del args["driver_version"]
    kind, result = run_module(args)
    assert kind == "exit"
    assert "DRIVER_UNKNOWN" in _codes(result["verdict"]["warnings"])


def test_defaults_give_no_gpu():
    kind, result = run_module({})
    assert kind == "exit"
    assert _codes(result["verdict"]["reasons"]) == ["NO_GPU"]


def test_one_gpu_lost_refuses_with_gpu_lost():
    """gpu_facts on a 2x V100 host whose first GPU fell off the bus: one healthy GPU, one lost."""
    lost = [{"bus_id": "0000:3b:00.0", "index": 0, "source": "nvidia_smi",
             "message": "GPU is lost.  Reboot the system to recover this GPU"}]
    kind, result = run_module(dict(REFERENCE, gpus=[dict(V100, uuid="GPU-2")], lost_gpus=lost))
    assert kind == "exit"
    assert result["verdict"]["allowed"] is False
    assert _codes(result["verdict"]["reasons"])[0] == "GPU_LOST"
    message = result["verdict"]["reasons"][0]["message"]
    assert message.startswith("0000:3b:00.0 (GPU 0) fell off the bus (nvidia-smi: 'GPU is lost.")
    assert "reboot the host" in message
    assert "plan on the 1 healthy GPU" in message and "at most 1 (now 2)" in message
    # the healthy GPU alone cannot carry tensor_parallel_size 2 either
    assert "TENSOR_PARALLEL_EXCEEDS_GPUS" in _codes(result["verdict"]["reasons"])
    assert result["verdict"]["instances"][0]["allowed"] is False


def test_lost_gpus_default_changes_nothing():
    kind, result = run_module(dict(REFERENCE, lost_gpus=[]))
    assert kind == "exit" and result["verdict"]["allowed"] is True


def test_malformed_lost_gpus_fail_with_a_message():
    kind, result = run_module(dict(REFERENCE, lost_gpus=[{"bus_id": "GPU-0", "index": 0, "message": "x"}]))
    assert kind == "fail"
    assert "lost_gpus[0].bus_id" in result["msg"]


@pytest.mark.parametrize("patch,fragment", [
    ({"gpus": [{"name": "x", "compute_capability": "seven", "memory_total_mib": 1}]}, "gpus[0].compute_capability"),
    ({"driver_version": "banana"}, "driver_version"),
    ({"vllm": {"gpu_memory_utilization": 2}}, "vllm.gpu_memory_utilization"),
    ({"image": {"arch_list": ["7.0", "volta"]}}, "image.arch_list[1]"),
    ({"policy": {"unknown_setting": 1}}, "unknown key"),
])
def test_malformed_input_fails_with_a_message(patch, fragment):
    kind, result = run_module(dict(REFERENCE, **patch))
    assert kind == "fail"
    assert result["msg"].startswith("deploy_gate: invalid input: ")
    assert fragment in result["msg"]
    assert "exception" not in result


def test_argument_spec_errors_are_clean():
    kind, result = run_module(dict(REFERENCE, gpus="not a list of dicts"))
    assert kind == "fail"
    assert "gpus" in result["msg"]


def test_documentation_parses_and_matches_argument_spec():
    doc = yaml.safe_load(deploy_gate.DOCUMENTATION)
    assert doc["module"] == "deploy_gate"
    assert str(doc["version_added"]) == "0.1.0"
    assert set(doc["options"]) == {"gpus", "driver_version", "cuda_driver_version", "nvlink",
                                   "driver_library_mismatch", "lost_gpus", "image", "model", "vllm", "policy",
                                   "request", "host", "fp16_copy", "gptq_copy", "model_store"}
    yaml.safe_load(deploy_gate.EXAMPLES)
    returned = yaml.safe_load(deploy_gate.RETURN)
    # One object, every field once: nothing beside the verdict, and what it contains is what it returns.
    assert set(returned) == {"verdict"}
    documented = set(returned["verdict"]["contains"])
    kind, result = run_module(dict(REFERENCE))
    assert kind == "exit"
    assert set(result) - {"changed"} == {"verdict"}
    # `previous` is added by the preflight role's re-check, never by the module.
    assert returned["verdict"]["contains"]["previous"]["returned"] == "when re-planned"
    assert set(result["verdict"]) == documented - {"previous"}, set(result["verdict"]) ^ documented
    made_from_doc = " ".join(returned["verdict"]["contains"]["made_from"]["description"])
    assert all("C(%s)" % key in made_from_doc for key in deploy_gate.MADE_FROM)


# --- property tests: malformed values through the entry point -----------------------------------

_scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2 ** 64), max_value=2 ** 64),
                     st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=10),
                     st.sampled_from(["7.0", "550.54.14", "auto", "bfloat16", "9.0+PTX", "sm_70", "compute_70",
                                      "32k", "gptq", "0.8.5", "12.4.1", "cuda>=12.4", "a=b", "{}", "[]"]))
_json = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                     max_leaves=10)


def _dict_of(keys):
    return st.fixed_dictionaries({}, optional={k: _json for k in keys})


_GPU_KEYS = ("name", "compute_capability", "memory_total_mib", "brand", "architecture")
_IMAGE_KEYS = ("cuda_version", "require_cuda", "arch_list", "quantization_methods", "vllm_version")
_MODEL_KEYS = ("weight_bytes", "param_count", "quant_method", "num_hidden_layers", "num_key_value_heads",
               "head_dim", "max_position_embeddings", "torch_dtype")
_VLLM_KEYS = ("tensor_parallel_size", "pipeline_parallel_size", "dtype", "quantization", "max_model_len",
              "max_num_seqs", "gpu_memory_utilization", "kv_cache_dtype", "cpu_offload_gb")


def _assert_clean(kind, result):
    text = json.dumps(result, default=str)
    assert "Traceback" not in text
    assert "exception" not in result
    if kind == "fail":
        assert isinstance(result["msg"], str) and result["msg"].strip()
        assert "could not evaluate" not in result["msg"]
    else:
        assert isinstance(result["verdict"]["allowed"], bool)
        assert result["verdict"]["allowed"] == (not result["verdict"]["reasons"])


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpus=st.one_of(_json, st.lists(st.one_of(_dict_of(_GPU_KEYS), _json), max_size=3)))
def test_property_malformed_gpus(gpus):
    _assert_clean(*run_module(dict(REFERENCE, gpus=gpus)))


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(image=st.one_of(_dict_of(_IMAGE_KEYS), _json))
def test_property_malformed_image(image):
    _assert_clean(*run_module(dict(REFERENCE, image=image)))


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.one_of(_dict_of(_MODEL_KEYS), _json))
def test_property_malformed_model(model):
    _assert_clean(*run_module(dict(REFERENCE, model=model)))


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(vllm=st.one_of(_dict_of(_VLLM_KEYS), _json))
def test_property_malformed_vllm(vllm):
    _assert_clean(*run_module(dict(REFERENCE, vllm=vllm)))


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(driver=_json, nvlink=_json, mismatch=_json, policy=_json)
def test_property_malformed_scalars_and_policy(driver, nvlink, mismatch, policy):
    _assert_clean(*run_module(dict(REFERENCE, driver_version=driver, nvlink=nvlink,
                                   driver_library_mismatch=mismatch, policy=policy)))


def test_the_fp16_copys_directory_is_measured_on_the_host(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    measured = deploy_gate.measure_fp16_copy({"model_path": str(model)})
    # The copy does not exist yet: its closest existing parent is measured.
    assert measured["complete"] is False
    assert isinstance(measured["disk_free_bytes"], int) and measured["disk_free_bytes"] > 0
    copy = tmp_path / "model-fp16"
    copy.mkdir()
    (copy / "nvfp4_dequantize_manifest.json").write_text("{}")
    assert deploy_gate.measure_fp16_copy({"model_path": str(model) + "/"})["complete"] is True
    elsewhere = tmp_path / "elsewhere"
    assert deploy_gate.measure_fp16_copy({"model_path": str(model),
                                          "fp16_model_path": str(elsewhere)})["complete"] is False
    # Nothing to measure without an absolute model path, or with a malformed copy path (the plan names it).
    assert deploy_gate.measure_fp16_copy({}) is None
    assert deploy_gate.measure_fp16_copy({"model_path": "relative"}) is None
    assert deploy_gate.measure_fp16_copy({"model_path": str(model), "fp16_model_path": "x"}) is None
    assert deploy_gate.measure_fp16_copy(None) is None
    # The preflight's default fp16_model_path "" means the default directory, which is measured.
    assert deploy_gate.measure_fp16_copy({"model_path": str(model), "fp16_model_path": ""})["complete"] is True


def test_the_gptq_copys_directories_are_measured_on_the_host(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    measured = deploy_gate.measure_gptq_copy({"model_path": str(model), "gptq_model_path": ""})
    assert measured["complete_paths"] == []
    assert isinstance(measured["disk_free_bytes"], int) and measured["disk_free_bytes"] > 0
    # One directory per group size by default: a finished copy is known by its manifest.
    done = tmp_path / "model-gptq64"
    done.mkdir()
    (done / "nvfp4_repack_manifest.json").write_text("{}")
    (tmp_path / "model-gptq32").mkdir()
    assert deploy_gate.measure_gptq_copy({"model_path": str(model)})["complete_paths"] == [str(done)]
    # The request's own directory is the only one looked at.
    assert deploy_gate.measure_gptq_copy({"model_path": str(model),
                                          "gptq_model_path": str(done) + "/"})["complete_paths"] == [str(done)]
    assert deploy_gate.measure_gptq_copy({"model_path": str(model),
                                          "gptq_model_path": str(tmp_path / "x")})["complete_paths"] == []
    assert deploy_gate.measure_gptq_copy({"model_path": str(model), "gptq_model_path": "rel"}) is None
    assert deploy_gate.measure_gptq_copy({"model_path": "/srv/\x00m"}) is None
    assert deploy_gate.measure_gptq_copy(None) is None


def test_the_plan_records_what_it_was_made_from():
    """made_from holds the module's inputs as given (the image whole, as vllm_image_facts returned it)."""
    facts = {"state": "present", "reference": "vllm/vllm-openai:v0.8.5", "digest": "sha256:" + "a" * 64,
             "profile_matched": True, "env": {"NVIDIA_REQUIRE_CUDA": "cuda>=12.4"},
             "arch_list": ["7.0"], "gate": {"vllm_version": "0.8.5", "cuda_version": "12.4.0"}}
    kind, result = run_module(dict(REFERENCE, image=facts))
    assert kind == "exit"
    made_from = result["verdict"]["made_from"]
    assert made_from["image"] == facts
    assert made_from["gpus"] == REFERENCE["gpus"]
    assert made_from["model"] == REFERENCE["model"]
    assert set(made_from) == set(deploy_gate.MADE_FROM)


def test_image_facts_are_judged_as_their_gate_view():
    """Passing vllm_image_facts' image whole gives the verdict its gate view gives."""
    facts = {"state": "absent", "reference": "vllm/vllm-openai:v0.8.5", "digest": None, "profile_matched": True,
             "env": {}, "gate": {"vllm_version": "0.8.5", "cuda_version": "12.4.0"}}
    view = dict(facts["gate"], state="absent", reference=facts["reference"], digest=None, profile_matched=True, env={})
    whole = run_module(dict(REFERENCE, image=facts))[1]["verdict"]
    as_view = run_module(dict(REFERENCE, image=view))[1]["verdict"]
    whole.pop("made_from")
    as_view.pop("made_from")
    assert whole == as_view
