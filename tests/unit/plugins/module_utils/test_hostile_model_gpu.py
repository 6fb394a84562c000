# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Hostile input for model_facts (_model.py) and gpu_facts (_gpu.py), issue 13.

Every input ends, within a time bound, with a sane result or the module's own error naming the
field: special files (FIFO, /dev/zero, directories, huge files), deep nesting, huge numbers,
NaN/inf, non-ASCII digits and control characters. One regression test per hole the review found,
then hypothesis properties over each class.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib.util
import json
import math
import os
import shutil
import stat
import struct
import tempfile
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args  # ansible-core >= 2.19 (pinned)

from ansible_collections.labfleet.vllm.plugins.module_utils.probes import _gpu
from ansible_collections.labfleet.vllm.plugins.module_utils.probes import _model as M
from ansible_collections.labfleet.vllm.plugins.modules import gpu_facts, model_facts

_BUILD = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "model", "build.py")
_spec = importlib.util.spec_from_file_location("labfleet_model_fixture_build_hostile", _BUILD)
B = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(B)

GPU_FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "gpu")
NVIDIA_SMI = "/usr/bin/nvidia-smi"

# meta-llama/Llama-3.1-8B config.json (huggingface.co/meta-llama/Llama-3.1-8B, typed in).
LLAMA_31_8B = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
    "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0", "use_cache": True, "vocab_size": 128256,
}

# Characters each class is made of: C0/C1 controls and DEL, and digits int() takes that are not
# ASCII (fullwidth, Arabic-Indic, Devanagari, mathematical bold).
CONTROL = "".join(chr(c) for c in list(range(0, 32)) + list(range(127, 160)))
UNICODE_DIGITS = u"\uff10\uff11\uff15\uff19\u0660\u0665\u0966\u096b\U0001d7ce\U0001d7d3"
HOSTILE_TEXT = st.text(alphabet=st.sampled_from(list(CONTROL + UNICODE_DIGITS + "0123456789.-+eE xXaN_inf,[]")),
                       max_size=40)
HUGE_INTS = st.one_of(st.integers(min_value=-10 ** 50, max_value=10 ** 50),
                      st.sampled_from([10 ** 400, -10 ** 400, 2 ** 63, 2 ** 64 + 1, 2 ** 31, -1, 0]))
ODD_FLOATS = st.floats(allow_nan=True, allow_infinity=True)
HOSTILE_SCALARS = st.one_of(st.none(), st.booleans(), HUGE_INTS, ODD_FLOATS, HOSTILE_TEXT)
HOSTILE_JSON = st.recursive(HOSTILE_SCALARS,
                            lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                    st.dictionaries(HOSTILE_TEXT, inner, max_size=4)),
                            max_leaves=20)
FAST = settings(deadline=10000, max_examples=60, suppress_health_check=[HealthCheck.too_slow])


def bounded(func, seconds=10.0):
    """Run func in a daemon thread; its result, or its exception re-raised. Fails when it has not
    ended after ``seconds`` (a hang must fail the test, not freeze the suite)."""
    box = {}

    def target():
        try:
            box["result"] = func()
        except BaseException as exc:  # pylint: disable=broad-except
            box["error"] = exc

    worker = threading.Thread(target=target)
    worker.daemon = True
    start = time.monotonic()
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), "still running after %.0f s: a hang" % seconds
    box["elapsed"] = time.monotonic() - start
    if "error" in box:
        raise box["error"]
    return box["result"]


def sane_number(value, low=0, high=2 ** 62):
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


# --------------------------------------------------------------------------------------------
# Model directories
# --------------------------------------------------------------------------------------------

def model_dir(path, config=None, scheme="BF16"):
    """A complete tiny model directory (plain layout) whose config.json is ``config``."""
    if not os.path.isdir(str(path)):
        os.makedirs(str(path))
    B.model_dir(str(path), "plain", scheme)
    if config is not None:
        write_config(path, config)
    return str(path)


def write_config(path, config, name="config.json"):
    with open(os.path.join(str(path), name), "w") as handle:
        json.dump(config, handle, allow_nan=True)


def header_file(path, header, data=b""):
    raw = json.dumps(header).encode("utf-8")
    with open(str(path), "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)) + raw + data)
    return str(path)


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    """One model directory shared by the property tests (they rewrite config.json only)."""
    return model_dir(tmp_path_factory.mktemp("hostile_model"), LLAMA_31_8B)


def assert_sane_model(model):
    """What read_model_dir returns must be plain, finite, bounded JSON."""
    json.dumps(model, allow_nan=False)
    for key in ("weight_bytes", "weight_file_bytes", "param_count", "tensor_count", "disk_free_bytes"):
        assert sane_number(model[key]), key
    for key, (low, high) in M.CONFIG_INT_LIMITS.items():
        if key in model and model[key] is not None:
            assert low <= model[key] <= high, key
    assert model["param_count"] <= 8 * model["weight_bytes"]


# ---- hole: unknown dtype with a gigantic shape crashed inside exit_json --------------------------

def test_unknown_dtype_with_gigantic_shape_is_a_clear_error(tmp_path):
    model_dir(tmp_path, LLAMA_31_8B)
    os.remove(str(tmp_path / "model.safetensors"))
    header_file(tmp_path / "model.safetensors", {"w": {"dtype": "X99", "shape": [10 ** 12] * 30,
                                                       "data_offsets": [0, 8]}}, b"\0" * 8)
    with pytest.raises(M.ModelFileError) as err:
        M.read_model_dir(str(tmp_path))
    assert err.value.path.endswith("model.safetensors")
    assert "tensor 'w': dtype X99 is unknown to this probe" in err.value.problem
    assert "not 1 to 256 bits per element" in err.value.problem


def test_unknown_dtype_is_still_checked_and_counted_when_it_fits(tmp_path):
    model_dir(tmp_path, LLAMA_31_8B)
    os.remove(str(tmp_path / "model.safetensors"))
    header_file(tmp_path / "model.safetensors", {"w": {"dtype": "F12_E5M6", "shape": [4, 4],
                                                       "data_offsets": [0, 24]}}, b"\0" * 24)
    model = M.read_model_dir(str(tmp_path))
    assert model["param_count"] == 16 and model["weight_bytes"] == 24
    assert any("F12_E5M6" in note and "unknown" in note for note in model["notes"])
    assert_sane_model(model)


@pytest.mark.parametrize("shape, expected", [
    ([2 ** 49], "shape must be a list of at most 64 integers from 0 to 281474976710656"),
    ([1] * 65, "shape must be a list of at most 64 integers"),
    ([10 ** 400], "shape must be a list of at most 64 integers"),
    ([True, 2], "shape must be a list"),
    ([2 ** 48] * 64, "needs an integer of"),   # known dtype: the needed size has ~925 digits
])
def test_absurd_shapes_name_the_file_and_the_tensor(tmp_path, shape, expected):
    path = header_file(tmp_path / "x.safetensors", {"layer.w": {"dtype": "F16", "shape": shape,
                                                                "data_offsets": [0, 2]}}, b"\0\0")
    with pytest.raises(M.ModelFileError) as err:
        M.read_safetensors_header(path)
    assert err.value.path == path and "tensor 'layer.w'" in err.value.problem
    assert expected in err.value.problem
    assert len(str(err.value)) < 1000


@pytest.mark.parametrize("dtype", ["bf16", "F16\n", "F\u0661\u0666", "", "A" * 40, 16, None])
def test_dtype_names_must_be_safetensors_names(tmp_path, dtype):
    path = header_file(tmp_path / "x.safetensors", {"w": {"dtype": dtype, "shape": [1], "data_offsets": [0, 2]}},
                       b"\0\0")
    with pytest.raises(M.ModelFileError) as err:
        M.read_safetensors_header(path)
    assert "tensor 'w': dtype must be a safetensors dtype name like \"BF16\"" in err.value.problem


def test_module_fails_cleanly_on_the_gigantic_shape(tmp_path, capsys):
    model_dir(tmp_path, LLAMA_31_8B)
    os.remove(str(tmp_path / "model.safetensors"))
    header_file(tmp_path / "model.safetensors", {"w": {"dtype": "Q9", "shape": [10 ** 14] * 60,
                                                       "data_offsets": [0, 8]}}, b"\0" * 8)
    result = run_model_facts({"path": str(tmp_path), "min_free_disk_gb": 0}, capsys)
    assert result["failed"] is True and result["file"].endswith("model.safetensors")
    assert "dtype Q9 is unknown" in result["msg"]


# ---- hole: config.json integers unbounded (10**400, bool, NaN, inf) ----------------------------

@pytest.mark.parametrize("key", sorted(k for k in M.CONFIG_INT_LIMITS if k != "model_max_length"))
@pytest.mark.parametrize("value", [10 ** 400, True, 1.5, float("nan"), float("inf"), -1, 0, "32"])
def test_every_config_integer_is_bounded(tmp_path, key, value):
    config = dict(LLAMA_31_8B)
    if key in ("max_sequence_length", "seq_length", "n_positions"):
        del config["max_position_embeddings"]  # the first context key present is the one read
    config[key] = value
    model_dir(tmp_path, config)
    with pytest.raises(M.ModelFileError) as err:
        M.read_model_dir(str(tmp_path))
    low, high = M.CONFIG_INT_LIMITS[key]
    assert err.value.path.endswith("config.json")
    assert "%s must be a positive integer (%d to %d)" % (key, low, high) in err.value.problem
    assert len(err.value.problem) < 300


def test_num_hidden_layers_10_pow_400_names_field_and_range(tmp_path):
    model_dir(tmp_path, dict(LLAMA_31_8B, num_hidden_layers=10 ** 400))
    with pytest.raises(M.ModelFileError) as err:
        M.read_model_dir(str(tmp_path))
    assert err.value.problem == "num_hidden_layers must be a positive integer (1 to 4096), found an integer of 401 digits"


def test_tokenizer_sentinel_model_max_length_is_ignored_with_a_note(tmp_path):
    # transformers writes int(1e30) (VERY_LARGE_INTEGER) for "no limit".
    model = M.read_model_dir(model_dir(tmp_path, dict(LLAMA_31_8B, model_max_length=int(1e30))))
    assert model["model_max_length"] is None
    assert any("model_max_length" in note and "ignored" in note for note in model["notes"])


@pytest.mark.parametrize("value", [float("nan"), True, -5])
def test_model_max_length_nonsense_below_the_sentinel_is_an_error(tmp_path, value):
    model_dir(tmp_path, dict(LLAMA_31_8B, model_max_length=value))
    with pytest.raises(M.ModelFileError) as err:
        M.read_model_dir(str(tmp_path))
    assert "model_max_length must be a positive integer" in err.value.problem


@pytest.mark.parametrize("field, value, expected", [
    ("bits", 10 ** 400, "quantization_config.bits must be an integer from 1 to 64"),
    ("bits", 0, "quantization_config.bits must be an integer from 1 to 64"),
    ("group_size", float("nan"), "quantization_config.group_size must be -1 or an integer from 1 to 1048576"),
    ("group_size", 0, "quantization_config.group_size must be -1 or an integer from 1 to 1048576"),
    ("group_size", True, "quantization_config.group_size must be -1 or an integer"),
])
def test_quantization_integers_are_bounded(tmp_path, field, value, expected):
    config = dict(LLAMA_31_8B, quantization_config={"quant_method": "gptq", "bits": 4, "group_size": 128})
    config["quantization_config"][field] = value
    model_dir(tmp_path, config)
    with pytest.raises(M.ModelFileError) as err:
        M.read_model_dir(str(tmp_path))
    assert expected in err.value.problem


def test_gptq_per_channel_group_size_stays_valid(tmp_path):
    config = dict(LLAMA_31_8B, quantization_config={"quant_method": "gptq", "bits": 4, "group_size": -1})
    model = M.read_model_dir(model_dir(tmp_path, config))
    assert (model["quant_method"], model["quant_bits"], model["quant_group_size"]) == ("gptq", 4, -1)


@pytest.mark.parametrize("rope, expected", [
    ({"rope_type": "llama3", "factor": float("nan")}, "rope_scaling.factor must be a finite number"),
    ({"rope_type": "yarn", "factor": float("inf")}, "rope_scaling.factor must be a finite number"),
    ({"rope_type": "longrope", "short_factor": [1.0, float("nan")]}, "rope_scaling.short_factor"),
    ({"rope_type": "llama3\x1b[2J"}, "rope_scaling.rope_type"),
    ({"a": {"b": {"c": 1}}}, "rope_scaling.a.b"),
])
def test_rope_scaling_values_are_finite_and_flat(tmp_path, rope, expected):
    model_dir(tmp_path, dict(LLAMA_31_8B, rope_scaling=rope))
    with pytest.raises(M.ModelFileError) as err:
        M.read_model_dir(str(tmp_path))
    assert expected in err.value.problem


def test_transformers_v5_nested_rope_parameters_still_read(tmp_path):
    # Gemma 3 in Transformers v5 keeps one rope_parameters object per attention type.
    rope = {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}
    config = dict(LLAMA_31_8B, rope_parameters=rope)
    del config["rope_scaling"]
    model = M.read_model_dir(model_dir(tmp_path, config))
    assert model["rope_scaling"] == rope


def test_json_integer_with_thousands_of_digits_is_refused_before_int(tmp_path):
    model_dir(tmp_path)
    with open(str(tmp_path / "config.json"), "w") as handle:
        handle.write('{"num_hidden_layers": %s}' % ("9" * 100000))
    started = time.monotonic()
    with pytest.raises(M.ModelFileError) as err:
        M.read_model_dir(str(tmp_path))
    assert time.monotonic() - started < 1.0
    assert "num_hidden_layers must be a positive integer (1 to 4096), found an integer of 100000 digits" \
        in err.value.problem


# ---- hole: min_free_disk_gb nan / inf / negative ------------------------------------------------

def run_model_facts(args, capsys):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            model_facts.main()
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), -1, -0.001, 1e7, "nan", "1e400"])
def test_min_free_disk_gb_must_be_finite_and_in_range(tmp_path, capsys, value):
    model_dir(tmp_path, LLAMA_31_8B)
    result = run_model_facts({"path": str(tmp_path), "min_free_disk_gb": value}, capsys)
    assert result["failed"] is True
    assert result["msg"].startswith("min_free_disk_gb must be a finite number of GB from 0 to 1000000")


# ---- hole: world-writable model directory / files, foreign owner ------------------------------

def test_world_writable_directory_and_files_warn_with_the_fix(tmp_path, capsys):
    path = model_dir(tmp_path / "m", LLAMA_31_8B)
    os.chmod(path, 0o777)
    os.chmod(os.path.join(path, "config.json"), 0o666)
    result = run_model_facts({"path": path, "min_free_disk_gb": 0}, capsys)
    assert not result.get("failed")
    assert result["model"]["world_writable"] == [path, os.path.join(path, "config.json")]
    warnings = " ".join(w if isinstance(w, str) else json.dumps(w) for w in result.get("warnings") or [])
    assert "world-writable" in warnings and "chmod -R o-w %s" % path in warnings


def test_private_directory_has_no_permission_warning(tmp_path):
    path = model_dir(tmp_path / "m", LLAMA_31_8B)
    os.chmod(path, 0o755)
    model = M.read_model_dir(path)
    assert model["world_writable"] == [] and model["foreign_owned"] == []
    assert not any("world-writable" in note for note in model["notes"])


def test_world_writable_weight_file_through_a_symlink(tmp_path):
    path = model_dir(tmp_path / "m", LLAMA_31_8B)
    blob = tmp_path / "blob"
    shutil.move(os.path.join(path, "model.safetensors"), str(blob))
    os.symlink(str(blob), os.path.join(path, "model.safetensors"))  # the Hugging Face cache layout
    os.chmod(str(blob), 0o646)
    model = M.read_model_dir(path)
    assert model["world_writable"] == [os.path.join(path, "model.safetensors")]


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_directory_owned_by_another_user_warns(tmp_path):
    path = model_dir(tmp_path / "m", LLAMA_31_8B)
    os.chown(path, 54321, 54321)
    model = M.read_model_dir(path)
    assert model["foreign_owned"] == [path]
    assert any("owned by another user" in note and "chown -R root: %s" % path in note for note in model["notes"])


def test_permission_problems_with_an_explicit_uid(tmp_path):
    path = model_dir(tmp_path / "m", LLAMA_31_8B)
    own = os.stat(path).st_uid
    other = own + 1 if own else 1
    writable, foreign = M.permission_problems(path, euid=other)
    if own != 0:
        assert path in foreign
    assert writable == []


# ---- hole: special files (FIFO, device, directory, huge, dangling) ----------------------------

JSON_TARGETS = ("config.json", "hf_quant_config.json", "quant_config.json", "quantize_config.json",
                "model.safetensors.index.json")
SPECIAL_KINDS = ("fifo", "dev_zero", "directory", "huge", "dangling")


def make_special(path, kind, huge_bytes):
    if os.path.lexists(path):
        os.remove(path)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev_zero":
        os.symlink("/dev/zero", path)
    elif kind == "directory":
        os.mkdir(path)
    elif kind == "huge":
        with open(path, "wb") as handle:  # sparse: costs no disk
            handle.truncate(huge_bytes)
    else:
        os.symlink(path + ".nowhere", path)


@pytest.mark.parametrize("kind", SPECIAL_KINDS)
@pytest.mark.parametrize("target", JSON_TARGETS + ("model.safetensors",))
def test_special_files_fail_fast_and_clearly(tmp_path, target, kind):
    path = model_dir(tmp_path / "m", LLAMA_31_8B)
    huge = M.MAX_INDEX_BYTES + 1 if target.endswith("index.json") else M.MAX_JSON_BYTES + 1
    if target == "model.safetensors" and kind == "huge":
        huge = 8 * 1024 ** 3  # a sparse 8 GB weight file: only its header length word is read
    make_special(os.path.join(path, target), kind, huge)
    with pytest.raises(M.ModelFileError) as err:
        bounded(lambda: M.read_model_dir(path), 10)
    assert err.value.path == os.path.join(path, target)
    expected = {"fifo": "is a FIFO (named pipe), not a regular file", "dev_zero": "is a character device",
                "directory": "is a directory, not a regular file", "dangling": "is a symbolic link to",
                "huge": "bytes this probe reads for such a file"}[kind]
    if target == "model.safetensors" and kind == "huge":
        expected = "header length is 0"
    assert expected in err.value.problem


def test_index_naming_a_fifo_shard_fails_fast(tmp_path):
    path = model_dir(tmp_path / "m", LLAMA_31_8B)
    os.remove(os.path.join(path, "model.safetensors"))
    os.mkfifo(os.path.join(path, "model-00001-of-00001.safetensors"))
    B.write_json(os.path.join(path, M.INDEX_FILE), {"weight_map": {"w": "model-00001-of-00001.safetensors"}})
    with pytest.raises(M.ModelFileError) as err:
        bounded(lambda: M.read_model_dir(path), 10)
    assert "FIFO" in err.value.problem and err.value.path.endswith("model-00001-of-00001.safetensors")


def test_module_entry_point_on_a_fifo_config(tmp_path, capsys):
    path = model_dir(tmp_path / "m", LLAMA_31_8B)
    make_special(os.path.join(path, "config.json"), "fifo", 0)
    result = bounded(lambda: run_model_facts({"path": path, "min_free_disk_gb": 0}, capsys), 20)
    assert result["failed"] is True and result["file"] == os.path.join(path, "config.json")
    assert "FIFO" in result["msg"]


# ---- hole: deep nesting --------------------------------------------------------------------------

@pytest.mark.parametrize("depth", [2000, 200000])
def test_deeply_nested_config_is_a_clear_error(tmp_path, depth):
    model_dir(tmp_path)
    with open(str(tmp_path / "config.json"), "w") as handle:
        handle.write('{"num_hidden_layers": 2, "x": ' + "[" * depth + "]" * depth + "}")
    with pytest.raises(M.ModelFileError) as err:
        M.read_model_dir(str(tmp_path))
    assert "nests arrays or objects deeper than Python's JSON reader allows" in err.value.problem


def test_deeply_nested_safetensors_header_is_a_clear_error(tmp_path):
    raw = b'{"__metadata__": {"a": ' + b"[" * 50000 + b"]" * 50000 + b"}}"
    path = str(tmp_path / "x.safetensors")
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)) + raw)
    with pytest.raises(M.ModelFileError) as err:
        M.read_safetensors_header(path)
    assert "header is not valid UTF-8 JSON: it nests" in err.value.problem


# ---- hole: non-ASCII digits and control characters in names the gate parses -----------------

@pytest.mark.parametrize("key, value", [
    ("torch_dtype", u"bfloat\uff11\uff16"),
    ("torch_dtype", "bfloat16\n"),
    ("torch_dtype", "bfloat16\x00"),
    ("model_type", "llama\x1b[31m"),
    ("model_type", u"llama\u0663"),
    ("architectures", ["LlamaForCausalLM\r"]),
])
def test_names_with_control_characters_or_unicode_digits_are_refused(tmp_path, key, value):
    model_dir(tmp_path, dict(LLAMA_31_8B, **{key: value}))
    with pytest.raises(M.ModelFileError) as err:
        M.read_model_dir(str(tmp_path))
    assert "must be a name like" in err.value.problem and key in err.value.problem


@pytest.mark.parametrize("method", [u"gptq\u202e", "gptq\nfp8", u"awq\uff14"])
def test_quant_method_with_control_or_unicode_digits_is_refused(tmp_path, method):
    config = dict(LLAMA_31_8B, quantization_config={"quant_method": method, "bits": 4, "group_size": 128})
    model_dir(tmp_path, config)
    with pytest.raises(M.ModelFileError) as err:
        M.read_model_dir(str(tmp_path))
    assert "quantization_config.quant_method must be a name like" in err.value.problem


# ---- properties ---------------------------------------------------------------------------------

CONFIG_KEYS = sorted(M.CONFIG_INT_LIMITS) + ["torch_dtype", "model_type", "architectures", "rope_scaling",
                                             "sliding_window", "use_sliding_window", "text_config",
                                             "quantization_config"]


@FAST
@given(key=st.sampled_from(CONFIG_KEYS), value=HOSTILE_JSON)
def test_property_config_field_gives_sane_facts_or_names_the_field(base_dir, key, value):
    write_config(base_dir, dict(LLAMA_31_8B, **{key: value}))
    try:
        model = M.read_model_dir(base_dir)
    except M.ModelFileError as exc:
        assert exc.path.endswith("config.json")
        assert key in exc.problem or key in ("text_config", "quantization_config")
        return
    assert_sane_model(model)


@FAST
@given(depth=st.integers(min_value=1, max_value=300000), kind=st.sampled_from(["[", '{"a":']))
def test_property_any_nesting_depth_ends_cleanly(base_dir, depth, kind):
    close = "]" if kind == "[" else "}"
    with open(os.path.join(base_dir, "config.json"), "w") as handle:
        handle.write('{"num_hidden_layers": 2, "rope_scaling": ' + kind * depth + ("1" if kind != "[" else "")
                     + close * depth + "}")
    try:
        model = M.read_model_dir(base_dir)
    except M.ModelFileError as exc:
        assert "config.json" in str(exc)
        assert "rope_scaling" in exc.problem or "nests" in exc.problem
        return
    assert_sane_model(model)


@FAST
@given(dtype=st.one_of(HOSTILE_TEXT, st.sampled_from(sorted(M.DTYPE_BITS)), st.just("ZZ7")),
       shape=st.lists(HUGE_INTS, max_size=70), span=st.integers(min_value=0, max_value=64))
def test_property_safetensors_header_is_sane_or_names_the_tensor(dtype, shape, span):
    handle, path = tempfile.mkstemp(suffix=".safetensors")
    os.close(handle)
    try:
        header_file(path, {"t": {"dtype": dtype, "shape": shape, "data_offsets": [0, span]}}, b"\0" * span)
        try:
            result = M.read_safetensors_header(path)
        except M.ModelFileError as exc:
            assert exc.path == path and "'t'" in exc.problem and len(exc.problem) < 1000
            return
        info = result["tensors"]["t"]
        assert 0 <= info["numel"] <= 8 * span and info["bytes"] == span
        json.dumps(result, allow_nan=False)
    finally:
        os.remove(path)


@FAST
@given(value=st.one_of(ODD_FLOATS, HUGE_INTS, HOSTILE_TEXT))
def test_property_min_free_disk_gb_fails_naming_the_option_or_answers(base_dir, value):
    write_config(base_dir, LLAMA_31_8B)
    results = []
    with patch_module_args({"path": base_dir, "min_free_disk_gb": value}):
        with pytest.raises(SystemExit):
            with _capture(results):
                model_facts.main()
    result = results[-1]
    if result.get("failed"):
        assert "min_free_disk_gb" in result["msg"]
    else:
        assert isinstance(result["model"]["disk_free_ok"], bool)
        assert math.isfinite(result["model"]["disk_free_gb"])


class _capture(object):
    """Record what exit_json/fail_json would print (capsys is function-scoped, hypothesis is not)."""

    def __init__(self, results):
        self.results = results
        self.saved = None

    def __enter__(self):
        results = self.results
        self.saved = (basic.AnsibleModule.exit_json, basic.AnsibleModule.fail_json)

        def exit_json(module, **kwargs):
            results.append(kwargs)
            raise SystemExit(0)

        def fail_json(module, **kwargs):
            kwargs["failed"] = True
            results.append(kwargs)
            raise SystemExit(1)

        basic.AnsibleModule.exit_json, basic.AnsibleModule.fail_json = exit_json, fail_json
        return self

    def __exit__(self, *exc):
        basic.AnsibleModule.exit_json, basic.AnsibleModule.fail_json = self.saved
        return False


# --------------------------------------------------------------------------------------------
# GPUs
# --------------------------------------------------------------------------------------------

FIELDS = list(_gpu.QUERY_FIELDS)
V100_ROW = ["0", "Tesla V100-PCIE-32GB", "GPU-1d2b8c39-4e1f-6a0c-8b3e-5f7a9c2d4e61", "00000000:3B:00.0", "0x1DB610DE",
            "550.54.14", "7.0", "32768", "32494", "Enabled", "Enabled", "3", "16"]


def row(**changes):
    values = dict(zip(FIELDS, V100_ROW))
    values.update(dict((key.replace("_", "."), value) for key, value in changes.items() if "." not in key))
    return ", ".join(values[field] for field in FIELDS)


def query_text(count, bus=None):
    lines = []
    for index in range(count):
        values = dict(zip(FIELDS, V100_ROW))
        values["index"] = str(index)
        values["uuid"] = "GPU-%08d" % index
        values["pci.bus_id"] = bus or "00000000:%02X:%02X.0" % (index // 32, index % 32)
        lines.append(", ".join(values[field] for field in FIELDS))
    return "\n".join(lines) + "\n"


def topo_text(count):
    names = ["GPU%d" % i for i in range(count)]
    lines = ["\t" + "\t".join(names) + "\tCPU Affinity\tNUMA Affinity"]
    for i in range(count):
        lines.append(names[i] + "\t" + "\t".join("X" if i == j else "SYS" for j in range(count)) + "\t0-15\t0")
    return "\n".join(lines) + "\n\nLegend:\n\n  X    = Self\n"


def smi_probe(query, header="", topo="", rc=0, nvml=None):
    def runner(argv):
        if argv[1:] == []:
            return 0, header, ""
        if argv[1:3] == ["topo", "-m"]:
            return 0, topo, ""
        return rc, query, ""
    return _gpu.probe(run_command=runner, nvidia_smi=NVIDIA_SMI, nvml_loader=lambda: nvml,
                      sysfs_root="/nonexistent-sysfs", proc_version_path="/nonexistent-proc",
                      lib_root="/nonexistent-root")


def assert_sane_facts(facts):
    """Shape, and every reported value within what a GPU can have."""
    assert set(facts) == set(_gpu.base_facts())
    assert facts["state"] in _gpu.STATES and facts["msg"].strip()
    assert facts["count"] == len(facts["gpus"]) <= _gpu.MAX_GPUS
    json.dumps(facts, allow_nan=False)
    if facts["driver_version"] is not None:
        assert _gpu._DRIVER_VERSION_RE.fullmatch(facts["driver_version"])
    for gpu in facts["gpus"]:
        if gpu["compute_capability"] is not None:
            major, minor = gpu["compute_capability"].split(".")
            assert major.isdigit() and minor.isdigit() and all(c in "0123456789." for c in gpu["compute_capability"])
            assert 1 <= int(major) <= 20
        if gpu["memory_total_mib"] is not None:
            assert sane_number(gpu["memory_total_mib"], 1, _gpu.MAX_MEMORY_MIB)
        if gpu["memory_free_mib"] is not None:
            assert sane_number(gpu["memory_free_mib"], 0, gpu["memory_total_mib"] or _gpu.MAX_MEMORY_MIB)
        for key, (low, high) in (("pcie_link_gen", _gpu.PCIE_GEN_RANGE), ("pcie_link_width", _gpu.PCIE_WIDTH_RANGE)):
            assert gpu[key] is None or sane_number(gpu[key], low, high)
        for key in ("name", "uuid", "ecc_mode"):
            assert gpu[key] is None or not _gpu.has_control(gpu[key])
    buses = [gpu["pci_bus_id"] for gpu in facts["gpus"] if gpu["pci_bus_id"]]
    assert len(buses) == len(set(buses))


# ---- hole: negative memory, absurd compute capability, driver version with trailing garbage ----

@pytest.mark.parametrize("field, value, expected", [
    ("memory.total", "-1", "memory.total -1 is outside 1..16777216"),
    ("memory.total", "99999999999", "memory.total 99999999999 is outside"),
    ("memory.free", "-5", "memory.free -5 is outside 0..32768"),
    ("memory.free", "40000", "memory.free 40000 is outside 0..32768"),
    ("memory.total", "nan", "memory.total is not a number: 'nan'"),
    ("memory.total", "inf", "memory.total is not a number"),
    ("memory.total", "1e400", "memory.total is not a number"),
    ("memory.total", u"\uff13\uff12\uff17\uff16\uff18", "memory.total is not a number"),
    ("memory.total", "32_768", "memory.total is not a number"),
    ("compute_cap", "99.9", "compute capability 99.9 is outside 1.0..20.9"),
    ("compute_cap", "0.9", "compute capability 0.9 is outside"),
    ("compute_cap", "-1.0", "not a compute capability: '-1.0'"),
    ("compute_cap", "7.0.1", "not a compute capability: '7.0.1'"),
    ("compute_cap", u"\uff17.0", "not a compute capability"),
    ("driver_version", "550.54.14garbage", "not a driver version: '550.54.14garbage'"),
    ("driver_version", "550.54.14; rm -rf /", "not a driver version"),
    ("driver_version", u"\uff15\uff15\uff10.54.14", "not a driver version"),
    ("index", u"\uff10", "index is not a number"),
    ("index", "64", "index 64 is outside 0..63"),
    ("pcie.link.gen.current", "99", "pcie.link.gen.current 99 is outside 1..8"),
    ("pcie.link.width.current", "0", "pcie.link.width.current 0 is outside 1..32"),
    ("name", "Tesla\x07V100", "control character in '0, Tesla\\x07V100, GPU-1d2b"),
])
def test_values_no_gpu_has_are_never_facts(field, value, expected):
    values = dict(zip(FIELDS, V100_ROW))
    values[field] = value
    line = ", ".join(values[f] for f in FIELDS)
    with pytest.raises(_gpu.ParseError) as err:
        _gpu.parse_query_gpu(line, FIELDS)
    assert expected in str(err.value)
    facts = smi_probe(line + "\n")
    assert facts["state"] == "probe_error" and facts["present"] is False and facts["gpus"] == []
    assert expected in facts["msg"]
    assert_sane_facts(facts)


@pytest.mark.parametrize("value", ["550.54.14\n; rm -rf /", "550.54.14garbage", u"\uff15\uff15\uff10.54.14", "550"])
def test_sane_driver_version_is_a_full_ascii_match(value):
    with pytest.raises(_gpu.ParseError):
        _gpu.sane_driver_version(value)
    assert _gpu.sane_driver_version("550.54.14") == "550.54.14"


def test_banner_driver_version_with_trailing_garbage_is_unknown():
    banner = "| NVIDIA-SMI 550.54.14    Driver Version: 550.54.14garbage   CUDA Version: 12.4x     |"
    parsed = _gpu.parse_smi_header(banner)
    assert parsed["driver_version"] is None and parsed["cuda_driver_version"] is None
    assert parsed["smi_version"] == "550.54.14"
    good = "| NVIDIA-SMI 550.54.14    Driver Version: 550.54.14      CUDA Version: 12.4     |"
    assert _gpu.parse_smi_header(good)["driver_version"] == "550.54.14"


# ---- hole: 2000 GPUs took 26 s and 1.2 GB ---------------------------------------------------------

def test_two_thousand_gpus_fail_clearly_in_well_under_a_second():
    query = query_text(2000)
    started = time.monotonic()
    facts = smi_probe(query, topo=topo_text(3))
    elapsed = time.monotonic() - started
    assert elapsed < 1.0, elapsed
    assert facts["state"] == "probe_error" and facts["gpus"] == [] and facts["topology"]["pairs"] == []
    assert "2000 GPU lines; this probe handles at most 64 GPUs per host" in facts["msg"]


def test_nvml_reporting_two_thousand_gpus_fails_clearly_and_fast():
    class ManyGpus(object):
        NVMLError = Exception
        calls = 0

        def nvmlInit(self):
            pass

        def nvmlShutdown(self):
            pass

        def nvmlDeviceGetCount(self):
            return 2000

        def nvmlDeviceGetHandleByIndex(self, index):
            ManyGpus.calls += 1
            raise AssertionError("no handle is asked for")

    started = time.monotonic()
    facts = _gpu.probe(backend="nvml", nvml_loader=ManyGpus, sysfs_root="/nonexistent-sysfs",
                       proc_version_path="/nonexistent-proc", lib_root="/nonexistent-root")
    assert time.monotonic() - started < 1.0
    assert facts["state"] == "probe_error" and "NVML lists 2000 GPUs; this probe handles at most 64" in facts["msg"]
    assert ManyGpus.calls == 0


def test_the_most_gpus_allowed_build_their_topology_fast():
    started = time.monotonic()
    facts = smi_probe(query_text(_gpu.MAX_GPUS), topo=topo_text(_gpu.MAX_GPUS))
    assert time.monotonic() - started < 1.0
    assert facts["state"] == "ok" and facts["count"] == 64
    assert len(facts["topology"]["pairs"]) == 64 * 63 // 2
    assert_sane_facts(facts)


def test_topology_with_two_thousand_columns_is_not_parsed():
    with pytest.raises(_gpu.ParseError) as err:
        _gpu.parse_topology(topo_text(2000))
    assert "at most 64 GPUs" in str(err.value)


def test_pci_bus_with_many_nvidia_gpus_stops_reading_and_fails_clearly(tmp_path):
    devices = tmp_path / "sys" / "bus" / "pci" / "devices"
    devices.mkdir(parents=True)
    for number in range(200):
        path = devices / ("0000:%02x:%02x.0" % (number // 32, number % 32))
        path.mkdir()
        (path / "vendor").write_text("0x10de\n")
        (path / "device").write_text("0x1db6\n")
        (path / "class").write_text("0x030200\n")
    started = time.monotonic()
    facts = _gpu.probe(backend="pci", sysfs_root=str(tmp_path / "sys"), proc_version_path="/nonexistent-proc",
                       lib_root="/nonexistent-root")
    assert time.monotonic() - started < 1.0
    assert facts["state"] == "probe_error" and facts["gpus"] == []
    assert "the PCI bus lists more than 64 GPUs" in facts["msg"]


# ---- hole: duplicate bus IDs -----------------------------------------------------------------------

def test_duplicate_bus_ids_name_the_bus_id():
    query = query_text(2, bus="00000000:3B:00.0")
    with pytest.raises(_gpu.ParseError) as err:
        _gpu.parse_query_gpu(query, FIELDS)
    assert str(err.value) == "duplicate PCI bus ID 0000:3b:00.0: reported by GPU 0 and GPU 1"
    facts = smi_probe(query)
    assert facts["state"] == "probe_error" and "duplicate PCI bus ID 0000:3b:00.0" in facts["msg"]


def test_duplicate_uuids_are_refused():
    lines = query_text(2).splitlines()
    lines[1] = lines[1].replace("GPU-00000001", "GPU-00000000")
    with pytest.raises(_gpu.ParseError) as err:
        _gpu.parse_query_gpu("\n".join(lines), FIELDS)
    assert "duplicate UUID GPU-00000000" in str(err.value)


def test_different_driver_versions_per_gpu_are_refused():
    lines = query_text(2).splitlines()
    lines[1] = lines[1].replace("550.54.14", "535.183.01")
    with pytest.raises(_gpu.ParseError) as err:
        _gpu.parse_query_gpu("\n".join(lines), FIELDS)
    assert "different driver versions 535.183.01, 550.54.14" in str(err.value)


# ---- NVML answers --------------------------------------------------------------------------------

class _Struct(object):
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


class HostileNvml(object):
    """A pynvml stand-in answering whatever the test gives it, for two V100s."""

    NVMLError = type("NVMLError", (Exception,), {})

    def __init__(self, **values):
        self.values = dict(driver="550.54.14", count=2, total=32 * 1024 ** 3, free=31 * 1024 ** 3, cc=(7, 0),
                           buses=("00000000:3B:00.0", "00000000:D8:00.0"), gen=3, width=16, persistence=1,
                           ecc=[1, 1], name="Tesla V100-PCIE-32GB")
        self.values.update(values)

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlSystemGetDriverVersion(self):
        return self.values["driver"]

    def nvmlSystemGetCudaDriverVersion_v2(self):
        return self.values.get("cuda", 12040)

    def nvmlDeviceGetCount(self):
        return self.values["count"]

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetName(self, handle):
        return self.values["name"]

    def nvmlDeviceGetUUID(self, handle):
        return "GPU-%08d" % handle

    def nvmlDeviceGetPciInfo(self, handle):
        return _Struct(busId=self.values["buses"][handle % len(self.values["buses"])], pciDeviceId=0x1DB610DE)

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        return self.values["cc"]

    def nvmlDeviceGetMemoryInfo(self, handle):
        return _Struct(total=self.values["total"], free=self.values["free"], used=0)

    def nvmlDeviceGetPersistenceMode(self, handle):
        return self.values["persistence"]

    def nvmlDeviceGetEccMode(self, handle):
        return self.values["ecc"]

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle):
        return self.values["gen"]

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle):
        return self.values["width"]

    def nvmlDeviceGetTopologyCommonAncestor(self, first, second):
        return 50


def nvml_facts(**values):
    nvml = HostileNvml(**values)
    return _gpu.probe(backend="nvml", nvml_loader=lambda: nvml, sysfs_root="/nonexistent-sysfs",
                      proc_version_path="/nonexistent-proc", lib_root="/nonexistent-root")


def test_nvml_baseline_is_ok():
    facts = nvml_facts()
    assert facts["state"] == "ok" and facts["count"] == 2 and facts["driver_version"] == "550.54.14"
    assert_sane_facts(facts)


@pytest.mark.parametrize("values, expected", [
    (dict(total=-1), "memory total (bytes) -1 is outside"),
    (dict(total=float("nan")), "memory total (bytes) is not an integer: nan"),
    (dict(free=64 * 1024 ** 3), "memory free (bytes)"),
    (dict(cc=(99, 9)), "compute capability 99.9 is outside 1.0..20.9"),
    (dict(cc=(-1, 0)), "compute capability major -1 is outside"),
    (dict(cc=(7, 0, 1)), "is not a (major, minor) pair"),
    (dict(cc=(True, 0)), "compute capability major is not an integer: True"),
    (dict(driver="550.54.14\n; rm -rf /"), "not a driver version (nvmlSystemGetDriverVersion)"),
    (dict(driver=u"\uff15\uff15\uff10.54.14"), "not a driver version"),
    (dict(buses=("00000000:3B:00.0",)), "duplicate PCI bus ID 0000:3b:00.0: reported by GPU 0 and GPU 1"),
    (dict(count=-3), "nvmlDeviceGetCount returned -3"),
    (dict(count=u"\uff12"), "nvmlDeviceGetCount returned"),
    (dict(gen=40), "PCIe link generation 40 is outside 1..8"),
    (dict(name="V100\x1b]0;pwned\x07"), "holds control characters"),
])
def test_nvml_nonsense_is_a_probe_error_naming_the_value(values, expected):
    facts = nvml_facts(**values)
    assert facts["state"] == "probe_error" and facts["gpus"] == []
    assert expected in facts["msg"], facts["msg"]
    assert_sane_facts(facts)


@pytest.mark.parametrize("value, expected", [(12040, "12.4"), (u"\uff11\uff12\uff10\uff14\uff10", None), (-12040, None),
                                             (10 ** 400, None), (999, None), (float("nan"), None), ("12040", "12.4")])
def test_cuda_version_from_int_ascii_and_bounded(value, expected):
    assert _gpu.cuda_version_from_int(value) == expected


# ---- ASCII digits everywhere -----------------------------------------------------------------------

def test_unicode_digits_are_not_digits_anywhere():
    with pytest.raises(_gpu.ParseError):
        _gpu.to_int(u"\uff15")
    with pytest.raises(_gpu.ParseError):
        _gpu.normalize_bus_id(u"0000:3b:00.\uff10")
    assert _gpu.parse_proc_version(u"NVRM version: NVIDIA UNIX x86_64 Kernel Module  \uff15\uff15\uff10.54.14  Thu") \
        == (None, None)
    assert _gpu.library_versions_from_names([u"libnvidia-ml.so.\uff15\uff15\uff10.54.14"]) == []
    assert _gpu.library_versions_from_names(["libnvidia-ml.so.550.54.14\n"]) == []
    lost, _rest = _gpu.split_lost_lines(u"Unable to determine the device handle for GPU\uff10: 0000:02:00.0: GPU is lost")
    assert lost == []
    topology, _nvlink = _gpu.parse_topology(u"\tGPU0\tGPU\uff11\nGPU0\tX\tSYS\nGPU\uff11\tSYS\tX\n")
    assert topology == {"matrix": {"0": {}}, "pairs": []}  # "GPU１" is no GPU column or row
    gpu = _gpu.complete_gpu(dict(_gpu.new_gpu("pci"), name=u"RTX 50\uff190"))
    assert gpu["compute_capability"] is None
    assert _gpu.nvml_library_version(u"12.\uff15\uff15\uff10.54.14") is None


def test_lost_gpu_message_has_no_control_characters():
    lost, _rest = _gpu.split_lost_lines("Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost\x07\x1b]0;x")
    assert lost[0]["message"] == "GPU is lost??]0;x"


# ---- special files on the GPU side ---------------------------------------------------------------

@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "directory", "huge"])
def test_proc_version_special_files_are_not_read(tmp_path, kind):
    path = str(tmp_path / "version")
    make_special(path, kind, 10 ** 9)
    assert bounded(lambda: _gpu.read_proc_version(path), 5) == (None, None)


def test_sysfs_attribute_fifo_is_skipped_not_waited_on(tmp_path):
    devices = tmp_path / "sys" / "bus" / "pci" / "devices"
    device = devices / "0000:3b:00.0"
    device.mkdir(parents=True)
    os.mkfifo(str(device / "vendor"))
    (device / "class").write_text("0x030200\n")
    os.symlink("/dev/zero", str(device / "device"))
    readable, gpus, lost = bounded(lambda: _gpu.read_pci_devices(str(tmp_path / "sys")), 5)
    assert readable is True and gpus == [] and lost == []


# ---- properties ---------------------------------------------------------------------------------

@settings(deadline=10000, max_examples=200)
@given(field=st.sampled_from(FIELDS), value=st.one_of(HOSTILE_TEXT, HUGE_INTS.map(str), ODD_FLOATS.map(repr)))
def test_property_query_row_is_sane_or_parse_error(field, value):
    values = dict(zip(FIELDS, V100_ROW))
    values[field] = value
    text = ", ".join(values[f] for f in FIELDS)
    try:
        gpus, driver = _gpu.parse_query_gpu(text, FIELDS)
    except _gpu.ParseError:
        return
    facts = _gpu.base_facts()
    facts.update(gpus=gpus, count=len(gpus), driver_version=driver, msg="x")
    assert_sane_facts(facts)


@settings(deadline=10000, max_examples=150)
@given(rc=st.sampled_from([0, 0, 2, 6, 9, 15, 18]),
       query=st.text(alphabet=st.sampled_from(list(CONTROL + UNICODE_DIGITS + "0123456789abcdefX, .:[]/-NAVnif\n")),
                     max_size=300),
       topo=st.text(alphabet=st.sampled_from(list(CONTROL + UNICODE_DIGITS + "GPUXSYNV0123456789 \t\n")), max_size=300),
       header=HOSTILE_TEXT)
def test_property_probe_answers_sane_facts_for_any_nvidia_smi_output(rc, query, topo, header):
    facts = smi_probe(query, header="Driver Version: " + header, topo=topo, rc=rc)
    assert_sane_facts(facts)


@settings(deadline=10000, max_examples=150)
@given(key=st.sampled_from(["total", "free", "cc", "driver", "count", "gen", "width", "persistence", "ecc", "name",
                            "cuda"]),
       value=st.one_of(HUGE_INTS, ODD_FLOATS, HOSTILE_TEXT, st.none(), st.booleans(),
                       st.tuples(HUGE_INTS, HUGE_INTS), st.lists(HUGE_INTS, max_size=3)))
def test_property_nvml_answers_give_sane_facts_or_a_state(key, value):
    facts = nvml_facts(**{key: value})
    assert_sane_facts(facts)


@settings(deadline=10000, max_examples=100)
@given(value=st.one_of(ODD_FLOATS, st.floats(min_value=-1e6, max_value=1e6)))
def test_property_timeout_option_is_bounded_or_refused_naming_it(value):
    problem = gpu_facts.check_timeout(value)
    if problem is None:
        assert math.isfinite(value) and 0 < value <= gpu_facts.MAX_TIMEOUT
    else:
        assert problem.startswith("timeout must be a number of seconds greater than 0")


@settings(deadline=10000, max_examples=100)
@given(count=st.integers(min_value=0, max_value=3000))
def test_property_any_gpu_count_ends_fast_and_bounded(count):
    started = time.monotonic()
    facts = smi_probe(query_text(count), topo=topo_text(min(count, 70)))
    assert time.monotonic() - started < 1.0
    assert_sane_facts(facts)
    if count > _gpu.MAX_GPUS:
        assert facts["state"] == "probe_error" and "at most 64" in facts["msg"]
    elif count:
        assert facts["state"] == "ok" and facts["count"] == count


def test_module_with_hostile_nvidia_smi_never_tracebacks(tmp_path):
    """gpu_facts.main() end to end with an nvidia-smi that prints nonsense: a state, not a crash."""
    answers = {"query": (0, query_text(2, bus="00000000:3B:00.0"), ""), "header": (0, "", ""), "topo": (0, "", "")}
    results = []

    def run_command(self, args, **kwargs):
        args = args[3:] if args[0] == "/usr/bin/timeout" else args
        key = "header" if len(args) == 1 else ("topo" if args[1] == "topo" else "query")
        return answers[key]

    saved = (basic.AnsibleModule.run_command, basic.AnsibleModule.get_bin_path, _gpu.import_pynvml,
             _gpu.DEFAULT_SYSFS_ROOT, _gpu.DEFAULT_PROC_VERSION_PATH, _gpu.DEFAULT_LIB_ROOT)
    basic.AnsibleModule.run_command = run_command
    basic.AnsibleModule.get_bin_path = lambda self, name, required=False, opt_dirs=None: {
        "nvidia-smi": NVIDIA_SMI, "timeout": "/usr/bin/timeout"}[name]
    _gpu.import_pynvml = lambda: None
    _gpu.DEFAULT_SYSFS_ROOT = str(tmp_path / "sys")
    _gpu.DEFAULT_PROC_VERSION_PATH = str(tmp_path / "proc")
    _gpu.DEFAULT_LIB_ROOT = str(tmp_path / "root")
    try:
        with patch_module_args({}):
            with pytest.raises(SystemExit):
                with _capture(results):
                    gpu_facts.main()
    finally:
        (basic.AnsibleModule.run_command, basic.AnsibleModule.get_bin_path, _gpu.import_pynvml,
         _gpu.DEFAULT_SYSFS_ROOT, _gpu.DEFAULT_PROC_VERSION_PATH, _gpu.DEFAULT_LIB_ROOT) = saved
    nvidia = results[-1]["ansible_facts"]["nvidia"]
    assert nvidia["state"] == "probe_error" and "duplicate PCI bus ID 0000:3b:00.0" in nvidia["msg"]


def test_regular_file_check_uses_stat_not_the_name(tmp_path):
    """open_regular follows links only to regular files."""
    target = tmp_path / "real.json"
    target.write_text("{}")
    link = tmp_path / "link.json"
    os.symlink(str(target), str(link))
    handle, size = M.open_regular(str(link))
    handle.close()
    assert size == 2 and stat.S_ISLNK(os.lstat(str(link)).st_mode)
