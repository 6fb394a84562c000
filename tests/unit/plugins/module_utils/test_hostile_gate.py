# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Hostile input to the gate, the plan and their parsers (issue 13).

Two classes: numbers in other scripts' digits (Python's \\d, str.isdigit() and int() read
"\uff15\uff15\uff10" and Arabic-Indic "\u0665\u0665\u0660" as 550, and int() takes "1_000"), and
control characters in values that reach effective_vllm, a unit's argv or the unit itself. Each
input ends with a result or a GateInputError naming the field; never a success built on either.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import math
import os
import re

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _driver as D
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _gate as G
from ansible_collections.labfleet.vllm.plugins.module_utils.probes import _host as H
from ansible_collections.labfleet.vllm.plugins.module_utils.probes import _packages as PK
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _plan as P
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge import _policy as POL
from ansible_collections.labfleet.vllm.plugins.module_utils.reporting import _report as R
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge import _vllm_memory as M
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions import _vllm_startup as S

TODAY = datetime.date(2026, 11, 30)
V100 = {"index": 0, "name": "Tesla V100-PCIE-32GB", "compute_capability": "7.0", "memory_total_mib": 32768}
GPUS = [V100, dict(V100, index=1)]
# vllm/vllm-openai:v0.8.5 as vllm_image_facts reads it (the collection's reference image).
IMAGE = {"cuda_version": "12.4.0", "arch_list": ["7.0", "7.5", "8.0", "8.6", "8.9", "9.0+PTX"],
         "vllm_version": "0.8.5", "require_cuda": "cuda>=12.4 brand=tesla,driver>=470,driver<471"}
# Llama-3.1-8B-Instruct's config.json (meta-llama/Llama-3.1-8B-Instruct) with its safetensors size.
LLAMA_8B = {"weight_bytes": 16060522496, "num_hidden_layers": 32, "num_key_value_heads": 8, "head_dim": 128,
            "num_attention_heads": 32, "hidden_size": 4096, "intermediate_size": 14336, "vocab_size": 128256,
            "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}
ARGS = {"tensor_parallel_size": 2, "dtype": "float16", "gpu_memory_utilization": 0.92, "max_model_len": 32768,
        "max_num_seqs": 32}

FULLWIDTH_550 = u"\uff15\uff15\uff10"          # "５５０"
ARABIC_550 = u"\u0665\u0665\u0660"             # "٥٥٠"
DEVANAGARI_12 = u"\u0967\u0968"                # "१२"
CONTROL = re.compile(u"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
NET = "could not evaluate the inputs"          # input_errors_only's defensive net: never the answer


def request(**changes):
    base = {"image": "vllm/vllm-openai:v0.8.5", "image_digest": "", "model_path": "/srv/models/llama-3.1-8b",
            "served_model_name": "llama", "vllm_args": dict(ARGS), "enforce_eager": "auto", "extra_args": [],
            "instances": [{"name": "vllm", "port": 8000, "gpus": "all"}],
            "driver": {"manage": True, "branch": "550", "version": "", "allow_change": False}}
    base.update(changes)
    return base


# The nvidia_driver role's plan request on a Debian 12 host (roles/nvidia_driver/defaults/main.yml).
# The preflight plan's driver step for a Debian 12 host without a driver (the role's package plan carries it out).
DRIVER_STEP = {"action": "install", "branch": 550, "version": None, "kernel_module": "proprietary",
               "source": "cuda_repo", "source_why": "Debian 12's own archive has no R550", "distro": "debian12",
               "installed": None, "why": "no NVIDIA driver package is installed: the role installs R550"}
DRIVER_PLAN = {"command": "plan", "distribution": "Debian", "distribution_major_version": "12", "step": DRIVER_STEP,
               "architecture": "x86_64", "cuda_repo_base_url": "https://developer.download.nvidia.com/compute/cuda/repos"}


def run(driver="550.54.14", req=None, **kwargs):
    kwargs.setdefault("gpus", GPUS)
    kwargs.setdefault("image", IMAGE)
    kwargs.setdefault("model", LLAMA_8B)
    return P.plan(driver_version=driver, request=request() if req is None else req, nvlink=False, today=TODAY,
                  **kwargs)


def legacy(vllm, **kwargs):
    """deploy_gate without a request: the older ``vllm`` option, passed through (strict=False)."""
    return P.plan(gpus=GPUS, driver_version=kwargs.pop("driver", "550.54.14"), image=IMAGE, model=LLAMA_8B,
                  vllm=vllm, nvlink=False, today=TODAY, **kwargs)


def refused(func, field, *args, **kwargs):
    """The GateInputError's message; it names ``field`` and is not the defensive net's."""
    with pytest.raises(G.GateInputError) as exc:
        func(*args, **kwargs)
    message = str(exc.value)
    assert field in message, message
    assert NET not in message, message
    return message


# --- non-ASCII digits ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [FULLWIDTH_550 + ".54.14", ARABIC_550 + u".\u0665\u0664.\u0661\u0664",
                                  u"550.\uff15\uff14.14", "R" + FULLWIDTH_550])
def test_driver_version_in_other_digits_is_no_driver(text):
    assert POL.parse_driver_version(text) is None
    refused(run, "driver_version", driver=text)
    refused(G.evaluate, "driver_version", gpus=GPUS, driver_version=text)


def test_the_issue_case_is_not_judged_as_r550():
    # Before: "５５０.54.14" was read as (550, 54, 14) and the plan said "keep driver ５５０.54.14" on R550.
    message = refused(legacy, "driver_version", {}, driver=FULLWIDTH_550 + ".54.14")
    assert "550.54.14" in message  # says what a driver version looks like


@pytest.mark.parametrize("key,value", [("branch", FULLWIDTH_550), ("branch", "R" + ARABIC_550),
                                       ("version", FULLWIDTH_550 + ".54.14")])
def test_requested_driver_in_other_digits_is_refused(key, value):
    driver = {"manage": True, "branch": "", "version": "", "allow_change": True}
    driver[key] = value
    refused(run, "request.driver.%s" % key, req=request(driver=driver))


@pytest.mark.parametrize("text", [u"\uff17.0", u"7.\u0660", u"\u0667", DEVANAGARI_12 + ".0", "999.0"])
def test_compute_capability_in_other_digits_is_refused(text):
    assert POL.parse_cc(text) is None
    refused(G.evaluate, "gpus[0].compute_capability", gpus=[dict(V100, compute_capability=text)])


def test_vllm_version_in_other_digits_is_unknown_not_0_8_5():
    assert POL.parse_version(u"\uff10.8.5") is None
    verdict = G.evaluate(gpus=GPUS, driver_version="550.54.14", image=dict(IMAGE, vllm_version=u"\uff10.8.5"),
                         model=LLAMA_8B, vllm=ARGS, today=TODAY)
    assert "VLLM_VERSION_UNKNOWN" in [w["code"] for w in verdict["warnings"]]


def test_version_components_are_bounded():
    assert POL.parse_version("9" * 5000) is None        # int() refuses over 4300 digits: no ValueError
    assert POL.parse_version("12.4.1") == (12, 4, 1)
    assert POL.parse_driver_version("550.54.14") == (550, 54, 14)


@pytest.mark.parametrize("value", [u"\uff13\uff12\uff17\uff16\uff18", "32_768", u"\u0663\u0662k", "32768 \u3000",
                                   float("nan"), float("inf"), 10 ** 400],
                         ids=["fullwidth", "underscore", "arabic-indic-k", "ideographic-space", "nan", "inf", "10**400"])
def test_max_model_len_takes_only_ascii_digits(value):
    refused(legacy, "vllm.max_model_len", {"max_model_len": value})
    refused(run, "max_model_len", req=request(vllm_args=dict(ARGS, max_model_len=value)))


def test_plain_numbers_still_read():
    assert POL.coerce_int(" 12 ", "x") == 12 and POL.coerce_int("12.0", "x") == 12
    assert S.expand_human_int("32k") == 32000 and S.expand_human_int("32K") == 32768
    assert S.expand_human_int(u"\uff13\uff12k") == u"\uff13\uff12k"     # left for the integer check to refuse
    for bad in ("1_000", FULLWIDTH_550, u"\u00b2", "+5", "0x10"):
        with pytest.raises(POL.PolicyError):
            POL.coerce_int(bad, "x")


@pytest.mark.parametrize("value", [u"\uff10.9", "0_9", "nan", "inf", float("nan"), float("-inf")])
def test_gpu_memory_utilization_takes_finite_ascii_numbers(value):
    refused(legacy, "vllm.gpu_memory_utilization", {"gpu_memory_utilization": value})


@pytest.mark.parametrize("value", [u"\uff11\uff12\uff10\uff14\uff10", u"\uff11\uff12.4", u"12.\u0664"])
def test_cuda_driver_version_in_other_digits_is_refused(value):
    refused(G.evaluate, "cuda_driver_version", gpus=GPUS, driver_version="550.54.14", cuda_driver_version=value)


def test_image_versions_in_other_digits_are_refused():
    refused(G.evaluate, "image.cuda_version", image=dict(IMAGE, cuda_version=u"\uff11\uff12.4.1"))
    refused(G.evaluate, "image.require_cuda", image=dict(IMAGE, require_cuda=u"cuda>=\uff11\uff12.4"))
    refused(G.evaluate, "image.arch_list[0]", image=dict(IMAGE, arch_list=[u"\uff18.0"]))
    # Under re.IGNORECASE without re.ASCII the long s (U+017F) matched "s": "ſm_70" read as sm_70.
    assert POL.parse_arch(u"\u017fm_70") is None
    assert POL.parse_arch("SM_70") == (7, 0, "", True, False)


@pytest.mark.parametrize("gpus", [u"\uff10,1", [u"\uff11"], u"device=\u0660", ["1_0"], "0\u30001"])
def test_instance_gpus_in_other_digits_are_refused(gpus):
    req = request(instances=[{"name": "vllm", "port": 8000, "gpus": gpus}])
    refused(run, "request.instances[0].gpus", req=req)


def test_policy_numbers_in_other_digits_are_refused():
    refused(G.evaluate, "policy.allowed_driver_branches[0]", policy_overrides={"allowed_driver_branches": [FULLWIDTH_550]})
    refused(G.evaluate, "policy.driver_branches", policy_overrides={"driver_branches": {ARABIC_550: {"eol": True}}})
    refused(G.evaluate, "policy.reserve_mib", policy_overrides={"reserve_mib": "1_024"})


def test_driver_role_parsers_take_only_ascii_digits():
    with pytest.raises(D.DriverInputError):
        D.parse_branch(FULLWIDTH_550)
    with pytest.raises(D.DriverInputError):
        D.parse_exact_version(FULLWIDTH_550 + ".54.14")
    assert PK.upstream_version(ARABIC_550 + ".54.14-1") is None
    assert PK.upstream_version("550.54.14-1") == "550.54.14"
    answer = D.run(dict(DRIVER_PLAN, step=dict(DRIVER_STEP, branch="R" + FULLWIDTH_550)))
    assert "preflight_deployment.driver.branch" in answer["error"]


def test_host_versions_take_only_ascii_digits():
    assert H.first_version(u"Docker version \uff12\uff17.1.1") is None
    assert H.first_version("Docker version 27.1.1, build 6312585") == "27.1.1"
    assert H.first_version(27) is None
    assert H.first_version("1" * 5000 + ".1") is None
    assert H._toml_value(u"\uff11\uff12") == u"\uff11\uff12"      # kept as text, not read as 12
    assert H._toml_value("12") == 12


def test_memory_model_and_report_take_only_finite_ascii_numbers():
    for junk in (u"\uff15", "1_000", float("inf"), float("nan"), 10 ** 400, True):
        assert M._positive_int(junk) is None, junk
    assert M._positive_int("4096") == 4096 and M._positive_int(4096.0) == 4096
    assert M._capability(u"\uff18.0") is None and M._capability("8.0") == (8, 0)
    assert R.tokens_per_s("nan", 1.0) is None
    assert R.tokens_per_s(10, "inf") is None
    assert R.tokens_per_s(u"\uff11\uff12", 1.0) is None
    assert R.tokens_per_s(10 ** 400, 1.0) is None
    assert R.tokens_per_s("12", "0.5") == 24.0


def test_startup_numbers_refuse_huge_ints_and_words():
    for value in (10 ** 400, "nan", u"\uff10.5"):
        with pytest.raises(S.StartupInputError) as exc:
            S._number(value, "args.swap_space")
        assert "args.swap_space" in str(exc.value)


# --- control characters in values that reach effective_vllm, the argv and the unit -----------------


def test_the_issue_case_newline_in_legacy_vllm_is_refused():
    message = refused(legacy, "vllm.max_model_len", {"max_model_len": "32768\nExecStartPre=/bin/sh"})
    assert "control characters" in message


@pytest.mark.parametrize("char", ["\n", "\r", "\x00", "\t", "\x1b", "\x7f", "\x85", "\x9f", u"\u2028"])
def test_every_control_character_in_a_vllm_value_is_refused(char):
    refused(legacy, "vllm.chat_template", {"chat_template": "a%sb" % char})
    refused(run, "request.vllm_args.chat_template", req=request(vllm_args=dict(ARGS, chat_template="a%sb" % char)))
    refused(G.evaluate, "vllm.chat_template", vllm={"chat_template": "a%sb" % char})


def test_control_characters_in_vllm_keys_and_nested_values_are_refused():
    refused(legacy, "vllm", {"max_model_len\n--api-key": 1})
    refused(legacy, "vllm.override_generation_config.x", {"override_generation_config": {"x": "a\nb"}})
    refused(run, "request.vllm_args", req=request(vllm_args={"max_model_len\n": 1024}))  # "$" matched before \n
    refused(run, "request.instances[0].vllm_args.swap_space",
            req=request(instances=[{"name": "vllm", "gpus": "all", "vllm_args": {"swap_space": "4\r"}}]))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), 2 ** 63, -(10 ** 400)],
                         ids=["nan", "inf", "-inf", "2**63", "-10**400"])
def test_non_finite_and_huge_numbers_in_passthrough_args_are_refused(value):
    refused(legacy, "vllm.swap_space", {"swap_space": value})
    refused(run, "request.vllm_args.swap_space", req=request(vllm_args=dict(ARGS, swap_space=value)))


@pytest.mark.parametrize("char", ["\r", "\n", "\x00", "\x1b", u"\u2029"])
def test_extra_args_with_control_characters_are_refused(char):
    refused(run, "request.extra_args[1]", req=request(extra_args=["--chat-template", "{{ x }}%s" % char]))
    refused(run, "request.instances[0].extra_args[0]",
            req=request(instances=[{"name": "vllm", "gpus": "all", "extra_args": ["--x%s" % char]}]))
    refused(run, "request.extra_args[0]", req=request(extra_args=[float("nan")]))


@pytest.mark.parametrize("key", ["image", "model_path", "served_model_name"])
@pytest.mark.parametrize("char", ["\x00", "\t", "\x1b", "\x85", u"\u2028"])
def test_request_strings_with_control_characters_are_refused(key, char):
    refused(run, "request.%s" % key, req=request(**{key: "/srv/models/a%sb" % char}))


def test_fp16_model_path_and_instance_name_with_control_characters_are_refused():
    refused(run, "request.fp16_model_path", req=request(fp16_model_path="/srv/models/x\x7f"))
    refused(run, "request.gptq_model_path", req=request(gptq_model_path="/srv/models/x\x00"))
    refused(run, "request.gptq_group_size", req=request(gptq_group_size="3\u0662"))
    refused(run, "request.instances[0].name", req=request(instances=[{"name": "vllm\n", "gpus": "all"}]))


@pytest.mark.parametrize("key,value,field", [
    ("bind_address", "127.0.0.1\nExecStartPre=/bin/sh", "request.instances[0].bind_address"),
    ("cuda_visible_devices", "0,1\r", "request.instances[0].cuda_visible_devices"),
    ("served_model_name", "llama\x00", "request.instances[0].served_model_name"),
    ("env", {"HF_HOME": "/srv/hf\nVLLM_API_KEY="}, "request.instances[0].env.HF_HOME"),
    ("env", {"A\nB": "1"}, "request.instances[0].env"),
    ("port", float("nan"), "request.instances[0].port"),
])
def test_instance_passthrough_keys_with_control_characters_are_refused(key, value, field):
    refused(run, field, req=request(instances=[{"name": "vllm", "gpus": "all", key: value}]))


def test_host_versions_shown_in_the_plan_are_one_line_ascii():
    refused(run, "host.docker_server_version", host={"docker_server_version": "27.1.1\nExecStartPre=/bin/sh"})
    refused(run, "host.nvidia_ctk_version", host={"nvidia_ctk_version": u"\uff11.17.8"})
    verdict = run(host={"docker_server_version": "27.1.1", "nvidia_ctk_version": "1.17.8"})
    assert verdict["steps"]["runtime"]["current"] == {"docker": "27.1.1", "toolkit": "1.17.8"}


def test_clean_values_still_pass_through():
    verdict = legacy(dict(ARGS, chat_template="/srv/templates/llama.jinja", swap_space=4.5,
                          override_generation_config={"temperature": 0.6}))
    assert verdict["effective_vllm"]["chat_template"] == "/srv/templates/llama.jinja"
    argv = verdict["instances"][0]["argv"]
    assert argv[argv.index("--swap-space") + 1] == "4.5"
    verdict = run(req=request(extra_args=["--chat-template", "{{ messages }}"],
                              instances=[{"name": "vllm", "gpus": [0, 1], "bind_address": "127.0.0.1",
                                          "env": {"HF_HUB_OFFLINE": "1"}}]))
    assert verdict["allowed"] is True, verdict["reasons"]
    assert verdict["instances"][0]["argv"][-2:] == ["--chat-template", "{{ messages }}"]
    assert verdict["instances"][0]["env"] == {"HF_HUB_OFFLINE": "1"}


def test_driver_role_refuses_a_kernel_release_with_a_newline():
    answer = D.run(dict(DRIVER_PLAN, kernel="6.1.0-28-amd64\nnvidia-evil"))
    assert answer["error"].startswith("kernel: expected a kernel release")
    answer = D.run(dict(DRIVER_PLAN, cuda_repo_base_url="https://developer.download.nvidia.com/\rcompute"))
    assert answer["error"].startswith("nvidia_driver_cuda_repo_base_url: expected one URL")
    answer = D.run(dict(DRIVER_PLAN, kernel="6.1.0-28-amd64"))
    assert answer["headers"] == ["linux-headers-6.1.0-28-amd64"]
    assert answer["repo"]["url"] == "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"


def test_host_text_reader_refuses_special_files(tmp_path):
    fifo = str(tmp_path / "fifo.yaml")
    os.mkfifo(fifo)
    with pytest.raises(IOError):
        H.read_regular_text(fifo)          # would block on open() for ever
    if os.path.exists("/dev/zero"):
        with pytest.raises(IOError):
            H.read_regular_text("/dev/zero")   # would never end
    big = tmp_path / "big"
    big.write_text("x" * 101)
    with pytest.raises(IOError):
        H.read_regular_text(str(big), limit=100)
    # a FIFO among the CDI specs is skipped, not waited on
    assert H.cdi_specs([str(tmp_path)], os.listdir, H._read_text) == []


# --- properties ---------------------------------------------------------------------------------------

_HOSTILE_CHARS = ["\n", "\r", "\x00", "\t", "\x1b", "\x7f", "\x85", "\x9f", u"\u2028", u"\u2029",
                  u"\uff15", u"\u0665", u"\u0967", u"\u00b2", u"\u3000", "_", " ", "."]
_hostile_text = st.text(alphabet=st.one_of(st.sampled_from(_HOSTILE_CHARS + list("0123456789rRkK")),
                                           st.characters()), max_size=12)
_GOOD = ["550", "R580", "550.54.14", "580.95.05", "32768", "32k", "0.9", "all", "0,1", "/srv/models/a",
         "vllm/vllm-openai:v0.8.5", "float16", "auto", "llama"]
_text = st.one_of(st.sampled_from(_GOOD), _hostile_text,
                  st.builds(lambda a, b: a + b, st.sampled_from(_GOOD), _hostile_text))
_number = st.one_of(st.integers(min_value=-2, max_value=70000), st.integers(min_value=2 ** 62),
                    st.just(10 ** 400), st.floats(allow_nan=True, allow_infinity=True))
_scalar = st.one_of(st.none(), st.booleans(), _text, _number)
_value = st.one_of(_scalar, st.lists(_scalar, max_size=2), st.dictionaries(_text, _scalar, max_size=2))
_ARG_KEYS = ["max_model_len", "gpu_memory_utilization", "tensor_parallel_size", "dtype", "swap_space",
             "chat_template", "max_num_seqs", "enforce_eager", "kv_cache_dtype"]
_args = st.dictionaries(st.one_of(st.sampled_from(_ARG_KEYS), _text), _value, max_size=4)


def _changes(base, fields, max_size=3):
    """``base`` with up to ``max_size`` of its fields replaced by hostile values: the others stay good, so
    the plan gets past them and each field is tried on its own as well as together."""
    pairs = st.lists(st.one_of([st.tuples(st.just(k), v) for k, v in sorted(fields.items())]), max_size=max_size)
    return st.builds(lambda items: dict(base, **dict(items)), pairs)


_instance = _changes({"name": "vllm", "port": 8000, "gpus": "all"}, {
    "name": _text, "gpus": st.one_of(_text, _number, st.lists(st.one_of(_text, _number), max_size=2)),
    "vllm_args": _args, "extra_args": st.lists(st.one_of(_text, _number), max_size=2), "bind_address": _text,
    "port": _number, "served_model_name": _text, "env": st.dictionaries(_text, _text, max_size=2),
    "enforce_eager": _scalar}, max_size=2)
_driver = _changes({"manage": True, "branch": "550", "version": "", "allow_change": False}, {
    "manage": _scalar, "branch": st.one_of(_text, _number), "version": st.one_of(_text, _number),
    "allow_change": _scalar}, max_size=2)
_request = _changes(request(), {
    "image": _text, "image_digest": _text, "model_path": _text, "served_model_name": _text,
    "vllm_args": st.builds(lambda extra: dict(ARGS, **extra), _args), "enforce_eager": _scalar,
    "extra_args": st.lists(st.one_of(_text, _number), max_size=3),
    "instances": st.lists(_instance, min_size=1, max_size=2), "driver": _driver, "serving_path": _text,
    "fp16_model_path": _text, "gptq_model_path": _text, "gptq_group_size": st.one_of(_text, _number, _scalar)})
_host = _changes({"docker_server_version": "26.1.5", "nvidia_ctk_version": "1.17.8"},
                 {"docker_server_version": _text, "nvidia_ctk_version": _text}, max_size=1)
# Mostly the reference values, sometimes hostile ones.
_driver_version = st.one_of(st.just("550.54.14"), st.just("550.54.14"), st.none(), _text, _number)
_cuda_version = st.one_of(st.none(), st.none(), st.just("12.4"), _text, _number)
_legacy_vllm = st.one_of(st.none(), st.none(), _args)


def _clean(value, where):
    """No control character in a string, no NaN/inf (walks lists and mappings)."""
    if isinstance(value, str):
        assert not CONTROL.search(value), (where, value)
    elif isinstance(value, float):
        assert math.isfinite(value), (where, value)
    elif isinstance(value, dict):
        for key, item in value.items():
            _clean(key, where)
            _clean(item, "%s.%s" % (where, key))
    elif isinstance(value, (list, tuple)):
        for item in value:
            _clean(item, where)


def _ascii_version(value, where):
    if value is None or isinstance(value, int):
        return
    assert isinstance(value, str), (where, value)
    assert re.match(r"^[0-9A-Za-z.+~_-]*\Z", value), (where, value)


def _check_verdict(verdict):
    _clean(verdict["effective_vllm"], "effective_vllm")
    for inst in verdict.get("instances", []):
        _clean(inst["vllm_args"], "instances.vllm_args")
        _clean(inst["argv"], "instances.argv")
        _clean(inst.get("env"), "instances.env")
        _clean(inst.get("bind_address"), "instances.bind_address")
        assert all(isinstance(a, str) for a in inst["argv"]), inst["argv"]
    if "target" in verdict:
        for key in ("driver_version", "driver_branch"):
            _ascii_version(verdict["target"][key], "target." + key)
        driver = verdict["steps"]["driver"]
        for key in ("current", "target", "version", "branch"):
            _ascii_version(driver.get(key), "steps.driver." + key)
        for key, value in verdict["steps"]["runtime"]["current"].items():
            _ascii_version(value, "steps.runtime.current." + key)
        _clean(verdict["deployment"], "deployment")


@settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(req=_request, vllm=_legacy_vllm, driver=_driver_version, cuda=_cuda_version, host=_host)
def test_property_plan_is_clean_or_a_named_input_error(req, vllm, driver, cuda, host):
    try:
        verdict = P.plan(gpus=GPUS, driver_version=driver, image=IMAGE, model=LLAMA_8B, vllm=vllm, request=req,
                         cuda_driver_version=cuda, host=host, nvlink=False, today=TODAY)
    except G.GateInputError as exc:
        assert NET not in str(exc), str(exc)
        return
    _check_verdict(verdict)


@settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(vllm=st.builds(lambda extra: dict(ARGS, **extra), _args), driver=_driver_version, cuda=_cuda_version,
       cc=st.one_of(st.just("7.0"), st.just("8.0"), _text, _number),
       cuda_version=st.one_of(st.just("12.4.0"), _text), vllm_version=st.one_of(st.just("0.8.5"), _text),
       require=st.one_of(st.just(IMAGE["require_cuda"]), _text),
       arch=st.one_of(st.just(IMAGE["arch_list"]), st.lists(_text, max_size=2)))
def test_property_evaluate_is_clean_or_a_named_input_error(vllm, driver, cuda, cc, cuda_version, vllm_version,
                                                           require, arch):
    gpus = [dict(V100, compute_capability=cc)]
    image = {"cuda_version": cuda_version, "vllm_version": vllm_version, "require_cuda": require,
             "arch_list": arch}
    try:
        verdict = G.evaluate(gpus=gpus, driver_version=driver, cuda_driver_version=cuda, image=image,
                             model=LLAMA_8B, vllm=vllm, today=TODAY)
    except G.GateInputError as exc:
        assert NET not in str(exc), str(exc)
        return
    _check_verdict(verdict)


@settings(max_examples=300, deadline=None, database=None)
@given(text=st.one_of(_text, st.text(max_size=12)))
def test_property_parsers_read_only_ascii_digits(text):
    stripped = text.strip()
    if POL.parse_driver_version(text) is not None:
        assert re.match(r"^[rR]?[0-9.]+\Z", stripped), text
    cc = POL.parse_cc(text)
    if cc is not None:
        assert re.match(r"^[0-9]{1,2}(\.[0-9])?\Z", stripped) and 0 <= cc[0] < 100, text
    version = POL.parse_version(text)
    if version is not None:
        assert all(0 <= part < 10 ** 12 for part in version)
        assert re.match(r"^\s*[vVrR]?[0-9]", text, re.ASCII), text
    try:
        number = POL.coerce_int(text, "x")
    except POL.PolicyError:
        number = None
    if number is not None:
        assert re.match(r"^[0-9]+(\.0*)?\Z", text.strip(" \t\r\n\f\v")), text
    expanded = S.expand_human_int(text)
    human = re.match(r"^\s*[0-9]+\s*[kKmMgG]\s*\Z", text, re.ASCII)
    assert expanded == text or (isinstance(expanded, int) and human), text
    version = H.first_version(text)
    assert version is None or re.match(r"^[0-9.]+\Z", version), text


@settings(max_examples=200, deadline=None, database=None)
@given(fields=st.fixed_dictionaries({}, optional=dict((k, st.one_of(_scalar, st.lists(_text, max_size=2))) for k in (
    "distribution", "distribution_major_version", "branch", "version", "source", "kernel_module",
    "required_kernel_module", "dpkg_query", "kernel", "architecture", "cuda_repo_base_url", "loaded_driver_version",
    "reboot_policy", "kernel_module_version"))),
    command=st.sampled_from(["plan", "assess"]))
def test_property_driver_role_answers_or_names_the_error(fields, command):
    base = dict(DRIVER_PLAN)
    base.update(fields)
    answer = D.run(dict(base, command=command))
    assert isinstance(answer, dict)
    if "error" in answer:
        assert isinstance(answer["error"], str) and answer["error"]
        return
    for name in answer.get("package_names", []) + answer.get("headers", []):
        assert re.match(r"^[A-Za-z0-9][A-Za-z0-9._+~:-]*\Z", name), name
    for key in ("branch", "version", "package_version", "installed_version"):
        _ascii_version(answer.get(key), key)
