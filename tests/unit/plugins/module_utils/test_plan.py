# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The plan: the gate judging the target state (plugins/module_utils/decisions/_plan.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _gate
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _plan as P

TODAY = datetime.date(2026, 11, 30)
V100 = {"index": 0, "name": "Tesla V100-PCIE-32GB", "compute_capability": "7.0", "memory_total_mib": 32768}
GPUS = [V100, dict(V100, index=1)]
A100 = {"index": 0, "name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0", "memory_total_mib": 81920}
IMAGE_0_8_5 = {"cuda_version": "12.4.0", "arch_list": ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0+PTX"],
               "vllm_version": "0.8.5", "require_cuda": "cuda>=12.4 brand=tesla,driver>=470,driver<471",
               "state": "absent", "profile_matched": True, "reference": "vllm/vllm-openai:v0.8.5"}
MODEL_8B = {"weight_bytes": 16060522496, "num_hidden_layers": 32, "num_key_value_heads": 8, "head_dim": 128,
            "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}
ARGS = {"tensor_parallel_size": 2, "dtype": "float16", "gpu_memory_utilization": 0.92, "max_model_len": 32768,
        "max_num_seqs": 32}


def request(**changes):
    base = {"image": "vllm/vllm-openai:v0.8.5", "image_digest": "", "model_path": "/srv/models/model",
            "served_model_name": "quasar", "vllm_args": dict(ARGS), "enforce_eager": "auto", "extra_args": [],
            "instances": [{"name": "vllm", "port": 8000, "gpus": "all"}],
            "driver": {"manage": True, "branch": "550", "version": "", "allow_change": False}}
    base.update(changes)
    return base


def run(driver="550.54.14", gpus=None, image=None, model=None, req=None, **kwargs):
    return P.plan(gpus=GPUS if gpus is None else gpus, driver_version=driver,
                  image=IMAGE_0_8_5 if image is None else image, model=MODEL_8B if model is None else model,
                  request=request() if req is None else req, nvlink=False, today=TODAY, **kwargs)


def codes(items):
    return [item["code"] for item in items]


# --- the driver step: the target state, not the installed one ---------------------------------------


def test_reference_deployment_keeps_the_driver_and_plans_every_step():
    verdict = run(host={"docker_server_version": "26.1.5", "nvidia_ctk_version": "1.17.8"})
    assert verdict["allowed"] is True, verdict["reasons"]
    steps = verdict["steps"]
    assert steps["driver"]["action"] == "keep" and steps["driver"]["target"] == "550.54.14"
    assert steps["runtime"]["action"] == "keep"
    assert steps["image"]["action"] == "pull" and steps["image"]["judged_from"].startswith("the shipped profile")
    assert steps["model"]["action"] == "keep"
    assert steps["server"] == dict(steps["server"], action="deploy", instances=["vllm"])
    assert verdict["serving_path"] == "native"
    assert verdict["target"]["driver_version"] == "550.54.14"
    assert verdict["summary"].startswith("keep driver 550.54.14; keep Docker + toolkit; pull vllm/vllm-openai:v0.8.5")


def test_r590_installed_r580_requested_with_allow_change_is_allowed_with_a_replace_step():
    req = request(driver={"manage": True, "branch": "580", "allow_change": True})
    verdict = run(driver="590.44.01", req=req)
    assert verdict["allowed"] is True, verdict["reasons"]
    step = verdict["steps"]["driver"]
    assert (step["action"], step["current"], step["target"], step["branch"]) == ("replace", "590.44.01", "580", 580)
    assert "replace driver 590.44.01 with R580" in verdict["summary"]
    # The gate judged R580, so the driver step carries R580's limits, not R590's refusal.
    assert "DRIVER_BRANCH_UNSUPPORTED_FOR_ARCH" not in codes(verdict["reasons"])


def test_the_same_host_with_the_driver_role_off_is_refused_for_the_installed_driver():
    req = request(driver={"manage": False, "branch": "580"})
    verdict = run(driver="590.44.01", req=req)
    assert verdict["allowed"] is False
    assert "DRIVER_BRANCH_UNSUPPORTED_FOR_ARCH" in codes(verdict["reasons"])
    assert "DRIVER_NOT_MANAGED" in codes(verdict["warnings"])
    step = verdict["steps"]["driver"]
    assert step["action"] == "refuse" and step["planned_action"] == "keep"
    assert step["reasons"] == ["DRIVER_BRANCH_UNSUPPORTED_FOR_ARCH"]
    assert verdict["steps"]["server"]["action"] == "skip"
    assert verdict["summary"].startswith("refused (DRIVER_BRANCH_UNSUPPORTED_FOR_ARCH)")


def test_another_driver_without_allow_change_is_refused_before_any_change():
    verdict = run(driver="550.54.14", req=request(driver={"manage": True, "branch": "580"}))
    assert codes(verdict["reasons"]) == ["DRIVER_CHANGE_NOT_ALLOWED"]
    assert "allow_change" in verdict["reasons"][0]["message"]
    assert verdict["steps"]["driver"]["planned_action"] == "refuse"


def test_a_refused_change_is_judged_as_requested():
    verdict = run(driver="550.54.14", req=request(driver={"manage": True, "branch": "595"}))
    assert set(codes(verdict["reasons"])) == {"DRIVER_CHANGE_NOT_ALLOWED", "DRIVER_BRANCH_UNSUPPORTED_FOR_ARCH"}


# --- the driver step from the installed packages (host_facts' driver_packages): decided once -------

DEBIAN12 = {"name": "Debian", "major_version": "12", "version": "12.11"}


def packaged(installed="550.54.14", error=None, distribution=None):
    """host= for plan(): the driver packages as host_facts reads them, and the distribution."""
    return {"driver_packages": {"manager": "dpkg", "installed_version": installed, "error": error,
                                "packages": ["libnvidia-ml1", "nvidia-smi"] if installed else []},
            "distribution": DEBIAN12 if distribution is None else distribution}


def test_with_the_packages_known_the_step_says_how_the_role_installs():
    verdict = run(host=packaged())
    assert verdict["allowed"] is True, verdict["reasons"]
    step = verdict["steps"]["driver"]
    assert (step["action"], step["installed"], step["target"]) == ("keep", "550.54.14", "550.54.14")
    assert (step["kernel_module"], step["source"], step["distro"]) == ("proprietary", "cuda_repo", "debian12")
    assert step["problems"] == [] and "Debian 12's own archive has no R550" in step["source_why"]
    # the same verdict as from the loaded driver alone, but for the step's added keys
    legacy = run()
    assert dict((k, v) for k, v in step.items() if k in legacy["steps"]["driver"]) == dict(
        legacy["steps"]["driver"], why=step["why"])
    assert verdict["target"] == legacy["target"] and verdict["instances"] == legacy["instances"]


def test_a_driver_installed_but_not_loaded_is_kept_and_judged_as_installed():
    """The trixie container's state: nvidia-driver 550.163.01 installed, no module loaded."""
    verdict = run(driver=None, host=packaged("550.163.01"))
    step = verdict["steps"]["driver"]
    assert (step["action"], step["current"], step["target"]) == ("keep", None, "550.163.01")
    assert "not loaded yet" in step["why"] and "reboots" in step["why"]
    assert verdict["target"]["driver_version"] == "550.163.01" and verdict["allowed"] is True


def test_an_upgrade_not_yet_loaded_is_judged_as_the_installed_driver():
    verdict = run(driver="550.54.14", cuda_driver_version="12.4", host=packaged("550.163.01"))
    step = verdict["steps"]["driver"]
    assert (step["action"], step["target"]) == ("keep", "550.163.01")
    assert "driver 550.54.14 is still loaded" in step["why"]


def test_the_installed_packages_not_the_loaded_driver_decide_a_change():
    verdict = run(driver="550.54.14", host=packaged("580.95.05"))
    assert codes(verdict["reasons"]) == ["DRIVER_CHANGE_NOT_ALLOWED"]
    assert "driver 580.95.05 is installed but the request asks for R550" in verdict["reasons"][0]["message"]


@pytest.mark.parametrize("driver,host,change,code,text", [
    ("550.54.14", packaged(None), {}, "DRIVER_NOT_FROM_PACKAGES",
     "driver 550.54.14 is loaded but no driver package is installed"),
    ("550.54.14", packaged(), {"kernel_module": "open"}, "DRIVER_KERNEL_MODULE_UNSUITABLE",
     "open GPU kernel modules do not support"),
    ("550.54.14", packaged(), {"source": "distro"}, "DRIVER_SOURCE_UNAVAILABLE",
     "Debian 12's own archive has R535 usable for R550"),
    ("550.54.14", packaged(distribution={"name": "Debian", "major_version": "11", "version": "11.9"}), {},
     "DRIVER_SOURCE_UNAVAILABLE", "is not supported by the nvidia_driver role"),
    ("550.54.14", packaged(error="dpkg exited 2: database locked"), {}, "DRIVER_PACKAGES_UNREADABLE",
     "dpkg exited 2: database locked"),
])
def test_what_the_role_could_not_install_is_refused_by_the_plan(driver, host, change, code, text):
    """Each of these was a refusal of the nvidia_driver role, after the preflight had allowed the host."""
    req = request(driver=dict({"manage": True, "branch": "550"}, **change))
    verdict = run(driver=driver, host=host, req=req)
    assert verdict["allowed"] is False and code in codes(verdict["reasons"])
    assert text in [r for r in verdict["reasons"] if r["code"] == code][0]["message"]
    step = verdict["steps"]["driver"]
    assert step["action"] == "refuse" and code in step["reasons"]
    assert verdict["steps"]["server"]["action"] == "skip"


@pytest.mark.parametrize("host,req,where", [
    ({"driver_packages": "550"}, None, "host.driver_packages"),
    (packaged("550\n54"), None, "host.driver_packages"),
    (packaged("banana"), None, "host.driver_packages.installed_version"),
    (packaged(), request(driver={"manage": True, "branch": "550", "kernel_module": "closed"}),
     "request.driver.kernel_module"),
    (packaged(), request(driver={"manage": True, "branch": "550", "source": ["distro"]}), "request.driver.source"),
])
def test_malformed_driver_package_facts_and_choices_are_input_errors(host, req, where):
    with pytest.raises(_gate.GateInputError, match=where.replace(".", r"\.")):
        run(host=host, req=req)


def test_a_host_without_a_driver_is_judged_with_the_driver_it_will_get():
    verdict = run(driver=None, req=request(driver={"manage": True, "version": "550.163.01"}))
    assert verdict["allowed"] is True, verdict["reasons"]
    assert verdict["steps"]["driver"]["action"] == "install"
    assert verdict["target"]["driver_version"] == "550.163.01"
    assert "DRIVER_UNKNOWN" not in codes(verdict["warnings"])
    assert verdict["summary"].startswith("install driver 550.163.01")


def test_no_branch_requested_takes_the_gates_recommendation():
    verdict = run(driver=None, req=request(driver={"manage": True}))
    assert verdict["steps"]["driver"]["branch"] == verdict["driver_requirements"]["recommended_branch"] == 580


def test_installed_driver_on_the_requested_branch_is_kept_with_its_cuda_level():
    verdict = run(driver="550.54.14", cuda_driver_version="12.4", driver_library_mismatch=True)
    assert verdict["steps"]["driver"]["planned_action"] == "keep"
    # The mismatch belongs to the driver that stays, so it still refuses, at the driver step.
    assert codes(verdict["reasons"]) == ["DRIVER_LIBRARY_MISMATCH"]
    assert verdict["steps"]["driver"]["action"] == "refuse"


def test_a_replaced_driver_does_not_carry_the_old_drivers_mismatch():
    req = request(driver={"manage": True, "branch": "580", "allow_change": True})
    verdict = run(driver="550.54.14", req=req, driver_library_mismatch=True, cuda_driver_version="12.4")
    assert verdict["allowed"] is True, verdict["reasons"]


def test_plan_driver_directly():
    want = {"manage": True, "branch": 550, "version": "550.163.01", "allow_change": False}
    assert P.plan_driver("550.163.01", want)["action"] == "keep"
    assert P.plan_driver("550.54.14", want)["action"] == "refuse"
    assert P.plan_driver("550.54.14", dict(want, allow_change=True))["action"] == "replace"
    assert P.plan_driver(None, want)["target"] == "550.163.01"
    assert P.plan_driver(None, dict(want, branch=None, version=None), 580)["target"] == "580"


# --- instances: every instance's own arguments are judged ---------------------------------------------


def test_an_instance_asking_for_more_gpus_than_the_host_has_is_refused():
    req = request(instances=[{"name": "vllm", "port": 8000, "gpus": "all"},
                             {"name": "big", "port": 8001, "gpus": "all",
                              "vllm_args": {"tensor_parallel_size": 8, "dtype": "bfloat16"}}])
    verdict = run(req=req)
    assert verdict["allowed"] is False
    assert codes(verdict["reasons"]) == ["TENSOR_PARALLEL_EXCEEDS_GPUS"]
    assert verdict["reasons"][0]["message"].startswith("instance big: ")
    first, big = verdict["instances"]
    assert first["allowed"] is True and big["allowed"] is False
    assert big["vllm_args"]["dtype"] == "float16"  # auto-fixed for Volta, per instance
    assert verdict["steps"]["server"]["action"] == "refuse"


def test_an_instance_on_one_gpu_is_judged_on_that_gpu():
    req = request(instances=[{"name": "a", "port": 8000, "gpus": [1], "vllm_args": {"tensor_parallel_size": 2}}])
    verdict = run(req=req)
    assert codes(verdict["reasons"]) == ["TENSOR_PARALLEL_EXCEEDS_GPUS"]
    assert "has 1" in verdict["reasons"][0]["message"]
    assert verdict["instances"][0]["gpu_indices"] == [1]


def test_one_gpu_lost_refuses_the_plan_with_gpu_lost():
    """2x V100, GPU 0 fell off the bus: gpu_facts lists GPU 1 only and names GPU 0 in lost_gpus."""
    lost = [{"bus_id": "0000:3b:00.0", "index": 0, "message": "GPU is lost.  Reboot the system to recover this GPU",
             "source": "nvidia_smi"}]
    verdict = run(gpus=[dict(V100, index=1)], lost_gpus=lost)
    assert verdict["allowed"] is False
    assert codes(verdict["reasons"])[0] == "GPU_LOST"
    assert verdict["reasons"][0]["message"].startswith("0000:3b:00.0 (GPU 0) fell off the bus")
    instance = verdict["instances"][0]
    assert instance["allowed"] is False and instance["gpu_indices"] == [1]
    assert "GPU_LOST" in codes(instance["reasons"])
    assert verdict["serving_path"] is None
    # with one instance on the healthy GPU and tensor_parallel_size 1, GPU_LOST alone still refuses
    req = request(vllm_args=dict(ARGS, tensor_parallel_size=1), instances=[{"name": "vllm", "port": 8000, "gpus": [1]}])
    alone = run(gpus=[dict(V100, index=1)], lost_gpus=lost, req=req)
    assert codes(alone["reasons"]) == ["GPU_LOST"]
    assert "plan on the 1 healthy GPU" in alone["reasons"][0]["message"]
    # and without the lost GPU the same request is allowed
    assert run(gpus=[dict(V100, index=1)], req=req)["allowed"] is True


def test_an_instance_naming_a_missing_gpu_is_refused():
    req = request(instances=[{"name": "a", "port": 8000, "gpus": "2,3", "vllm_args": {"tensor_parallel_size": 1}}])
    verdict = run(req=req)
    assert "INSTANCE_GPUS_UNAVAILABLE" in codes(verdict["reasons"])
    assert "GPU index 2, 3 is not on this host (its GPU indices: 0, 1)" in verdict["reasons"][0]["message"]
    assert "NO_GPU" not in codes(verdict["reasons"])


def test_a_host_without_gpus_plans_no_driver():
    verdict = run(gpus=[], driver=None, model={})
    assert codes(verdict["reasons"]) == ["NO_GPU"]
    step = verdict["steps"]["driver"]
    assert step["planned_action"] == "keep" and step["target"] is None and not step["managed"]
    assert "DRIVER_BRANCH_EOL" not in codes(verdict["warnings"])


def test_argv_carries_every_effective_argument_and_enforce_eager_on_volta():
    req = request(vllm_args=dict(ARGS, dtype="bfloat16", disable_log_stats=True, swap_space=4,
                                 enable_prefix_caching=False), extra_args=["--seed", "1"])
    verdict = run(req=req)
    instance = verdict["instances"][0]
    argv = instance["argv"]
    assert argv[:4] == ["--tensor-parallel-size", "2", "--dtype", "float16"]
    assert "--disable-log-stats" in argv and "--swap-space" in argv
    assert "--enable-prefix-caching" not in argv
    assert instance["enforce_eager"] is True and instance["vllm_args"]["enforce_eager"] is True
    assert argv[-3:] == ["--enforce-eager", "--seed", "1"]
    assert "Volta" in instance["enforce_eager_why"]


def test_enforce_eager_follows_the_architecture_or_the_request():
    a100 = [A100]
    req = request(vllm_args={"tensor_parallel_size": 1})
    assert run(gpus=a100, model={}, req=req)["instances"][0]["enforce_eager"] is False
    req = request(vllm_args={"tensor_parallel_size": 1}, enforce_eager=True)
    assert run(gpus=a100, model={}, req=req)["instances"][0]["enforce_eager"] is True
    req = request(instances=[{"name": "v", "port": 8000, "gpus": "all", "enforce_eager": "false"}])
    assert "--enforce-eager" not in run(req=req)["instances"][0]["argv"]


def test_instance_keys_pass_through_for_the_server_role():
    req = request(instances=[{"name": "b", "port": 8001, "gpus": [1], "cuda_visible_devices": "0",
                              "served_model_name": "quasar-b", "vllm_args": {"tensor_parallel_size": 1}}])
    instance = run(req=req)["instances"][0]
    assert (instance["port"], instance["cuda_visible_devices"], instance["served_model_name"]) == (8001, "0", "quasar-b")
    assert instance["gpus"] == [1]


# --- compatibility: without a request the gate works as it always did ---------------------------------


def test_without_a_request_the_verdict_keys_are_the_gates():
    kwargs = dict(gpus=GPUS, driver_version="550.54.14", image=IMAGE_0_8_5, model=MODEL_8B, nvlink=False,
                  vllm=dict(ARGS, dtype="bfloat16", served_model_name="quasar"), today=TODAY)
    old = _gate.evaluate(**kwargs)
    new = P.plan(**kwargs)
    for key in ("allowed", "reasons", "warnings", "effective_vllm", "plan", "driver_requirements", "policy_version"):
        assert new[key] == old[key], key
    assert new["steps"]["driver"]["action"] == "keep" and not new["steps"]["driver"]["managed"]
    assert "DRIVER_NOT_MANAGED" not in codes(new["warnings"])


# --- malformed requests ---------------------------------------------------------------------------------


@pytest.mark.parametrize("changes, fragment", [
    ({"vllm_args": {"port": 9000}}, "request.vllm_args.port"),
    ({"vllm_args": {"api_key": "x"}}, "never goes on a command line"),
    ({"vllm_args": {"Bad-Key": 1}}, "lower case with underscores"),
    ({"vllm_args": {"seed": "1\n--evil"}}, "one-line value"),
    ({"vllm_args": {"override": {"a": 1}}}, "scalar value"),
    ({"instances": []}, "request.instances"),
    ({"instances": [{"name": "a b"}]}, "request.instances[0].name"),
    ({"instances": [{"name": "a"}, {"name": "a"}]}, "used twice"),
    ({"instances": [{"name": "a", "gpus": "first"}]}, "request.instances[0].gpus"),
    ({"instances": [{"name": "a", "gpus": [-1]}]}, "request.instances[0].gpus[0]"),
    ({"driver": {"branch": "R5x0"}}, "request.driver.branch"),
    ({"driver": {"branch": "550", "version": "580.95.05"}}, "is not on request.driver.branch R550"),
    ({"driver": {"allow_change": "perhaps"}}, "request.driver.allow_change"),
    ({"image_digest": "sha256:abc"}, "request.image_digest"),
    ({"enforce_eager": "sometimes"}, "request.enforce_eager"),
    ({"extra_args": "--x"}, "request.extra_args"),
])
def test_malformed_requests_name_the_field(changes, fragment):
    with pytest.raises(_gate.GateInputError) as info:
        run(req=request(**changes))
    assert fragment in str(info.value)


_values = st.one_of(st.none(), st.booleans(), st.integers(-5, 5000), st.text(max_size=8),
                    st.lists(st.integers(-1, 3), max_size=3),
                    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(["image", "image_digest", "model_path", "vllm_args", "instances",
                                        "driver", "enforce_eager", "extra_args", "served_model_name"]),
                       _values, max_size=4))
def test_any_request_gives_a_plan_or_a_clear_input_error(changes):
    try:
        verdict = run(req=request(**changes))
    except _gate.GateInputError as exc:
        assert str(exc)
        return
    assert set(P.STEPS) <= set(verdict["steps"])
    assert verdict["allowed"] == (verdict["reasons"] == [])


# --- the runtime's reading of NVIDIA_REQUIRE_CUDA (issue 11 item 3) ---------------------------------

RTX3090 = {"index": 0, "name": "NVIDIA GeForce RTX 3090", "compute_capability": "8.6", "memory_total_mib": 24576}
IMAGE_12_8 = {"cuda_version": "12.8.1", "arch_list": ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0"],
              "vllm_version": "0.10.2",
              "require_cuda": "cuda>=12.8 brand=tesla,driver>=550,driver<551 brand=nvidia,driver>=550,driver<551"}
TOOLKIT_1_18 = {"docker_server_version": "26.1.5", "toolkit_version": "1.18.2", "nvidia_ctk_version": "1.18.2",
                "nvidia_container_runtime_hook": "/usr/bin/nvidia-container-runtime-hook",
                "toolkit_config": {"path": "/etc/nvidia-container-runtime/config.toml", "exists": True,
                                   "error": None, "mode": None, "disable_require": False,
                                   "skip_mode_detection": False},
                "docker_default_runtime": "runc", "docker_runtimes": {"runc": "runc"}, "docker_cdi_enabled": False,
                "cdi_specs": []}


def test_docker_gpus_goes_through_the_legacy_hook_which_refuses_a_geforce():
    result = run(gpus=[RTX3090], image=IMAGE_12_8, host=TOOLKIT_1_18,
                 req=request(vllm_args=dict(ARGS, tensor_parallel_size=1, max_model_len=8192)))
    assert result["container_runtime"]["enforced"] is True
    assert "will refuse to start it" in [r["message"] for r in result["reasons"]
                                         if r["code"] == "DRIVER_TOO_OLD_FOR_IMAGE"][0]


def test_nvidia_disable_require_in_the_image_lets_minor_version_compat_decide():
    image = dict(IMAGE_12_8, env={"NVIDIA_DISABLE_REQUIRE": "true"})
    result = run(gpus=[RTX3090], image=image, host=TOOLKIT_1_18,
                 req=request(vllm_args=dict(ARGS, tensor_parallel_size=1, max_model_len=8192)))
    assert result["container_runtime"]["enforced"] is False
    assert result["container_runtime"]["disabled_by"] == "NVIDIA_DISABLE_REQUIRE in the image"
    assert "DRIVER_TOO_OLD_FOR_IMAGE" not in codes(result["reasons"])
    assert "CUDA_MINOR_VERSION_COMPAT" in codes(result["warnings"])


def test_a_runtime_that_would_not_start_a_gpus_container_is_refused_at_the_runtime_step():
    # mode = "cdi" in config.toml: the hook that docker --gpus runs refuses to work.
    host = dict(TOOLKIT_1_18, toolkit_config=dict(TOOLKIT_1_18["toolkit_config"], mode="cdi"))
    result = run(host=host)
    assert "GPU_RUNTIME_BLOCKED" in codes(result["reasons"])
    text = [r["message"] for r in result["reasons"] if r["code"] == "GPU_RUNTIME_BLOCKED"][0]
    assert 'set mode = "auto"' in text
    assert result["steps"]["runtime"]["action"] == "refuse"
    assert result["steps"]["runtime"]["reasons"] == ["GPU_RUNTIME_BLOCKED"]
