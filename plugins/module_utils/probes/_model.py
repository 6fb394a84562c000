# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.model_facts module instead.
"""Read a model directory without loading it: config, quantization description, weights.

Pure functions (no Ansible imports). The safetensors files are never read past their JSON
header: the weight bytes and the parameter count come from the header's ``data_offsets`` and
``shape`` entries.

Every missing or malformed input raises :class:`ModelFileError`, whose message names the file and
says what is wrong with it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import os
import re
import stat
import struct

from ansible_collections.labfleet.vllm.plugins.module_utils.converters._gptq import GROUP_SIZES, repacked_tensor_bytes
# The NVFP4 layers the repacker writes as float16 instead (the LM head).
from ansible_collections.labfleet.vllm.plugins.module_utils.converters._gptq import FP16_LAYERS as GPTQ_FP16_LAYERS
from ansible_collections.labfleet.vllm.plugins.module_utils.formats._nvfp4 import BLOCK as NVFP4_BLOCK
from ansible_collections.labfleet.vllm.plugins.module_utils.formats._nvfp4 import NVFP4_ALGO, is_nvfp4_group
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._policy import (
    KNOWN_VLLM_QUANT_METHODS,
    QUANTIZATION,
    quant_text,
    vllm_quant_name,
)

# safetensors refuses headers above 100,000,000 bytes (its MAX_HEADER_SIZE); a larger length
# word means the file is not a safetensors file (or is damaged), so nothing is read past it.
MAX_HEADER_BYTES = 100000000

INDEX_FILE = "model.safetensors.index.json"

# Size caps for the JSON files read whole (a FIFO, a device or a multi-GB file named config.json
# must not hang the probe or exhaust memory). A real config.json or quantization description is a
# few KB; model.safetensors.index.json grows with the tensor count: about 100 bytes per tensor,
# so some MB for the largest public checkpoints (confidence: inferred from public repositories).
MAX_JSON_BYTES = 16 * 1024 * 1024
MAX_INDEX_BYTES = 64 * 1024 * 1024
# No field of a model config needs more digits than this. A longer JSON integer is never given to
# int() (quadratic on Pythons without the int-digits limit of CVE-2020-10735): it becomes a HugeInt,
# which every field check refuses, naming the field.
MAX_JSON_INT_DIGITS = 40

# Plausible ranges of the config.json integers the probe reports (inclusive). The largest public
# values are far below: hidden_size 16384 and 126 layers (Llama-3.1-405B), 128 heads, head_dim 256
# (Gemma 2), vocab 262144 (Gemma 3), intermediate 53248 (Llama-3.1-405B), context 10485760
# (Llama 4 Scout) (confidence: inferred from the public config.json files). A value outside is
# nonsense, and a gate fed with it would plan on nonsense.
# Context lengths (every key a config or tokenizer spells it with) up to 2**30; layers and heads up to 2**12.
_CONTEXT_KEYS = ("max_position_embeddings", "max_sequence_length", "seq_length", "n_positions", "model_max_length")
CONFIG_INT_LIMITS = dict(
    [(key, (1, 2 ** 30)) for key in _CONTEXT_KEYS]
    + [(key, (1, 2 ** 12)) for key in ("num_hidden_layers", "num_attention_heads", "num_key_value_heads")],
    hidden_size=(1, 2 ** 20), head_dim=(1, 2 ** 14), vocab_size=(1, 2 ** 24), intermediate_size=(1, 2 ** 22))
SLIDING_WINDOW_MAX = 2 ** 31
# Quantization integers: bit widths, and group/block sizes (-1 is GPTQ's "one group per channel").
QUANT_BITS_RANGE = (1, 64)
QUANT_GROUP_RANGE = (-1, 2 ** 20)

# safetensors tensors: at most this many dimensions, each at most MAX_TENSOR_DIM. Checkpoint tensors
# have 0 to 5 dimensions, none near 2**48 elements (confidence: inferred).
MAX_TENSOR_DIMS = 64
MAX_TENSOR_DIM = 2 ** 48
# An unknown dtype is still checked against its data span: between 1 and 256 bits per element.
UNKNOWN_DTYPE_BITS = (1, 256)

# Names config.json uses for dtypes, model types, architectures and quantization methods: ASCII
# letters and digits with "_", ".", "-" (no control characters, no non-ASCII digits such as U+FF15
# that Python's int() or isdigit() would take for digits).
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")
_DTYPE_RE = re.compile(r"[A-Z0-9][A-Z0-9_]{0,31}")

# Bits per element of each safetensors dtype. The sub-byte float dtypes (F4, F6_*) are packed.
DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32,
    "I64": 64, "U64": 64, "F64": 64, "C64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}

# Integer dtypes that quantized checkpoints use as containers for several packed low-bit values.
PACKED_CONTAINER_DTYPES = ("U8", "I8", "I16", "U16", "I32", "U32", "I64", "U64")

# Names (last dotted component) of tensors that hold quantized weights in a packed container.
PACKED_WEIGHT_NAMES = ("qweight", "weight_packed")

# Names (last dotted component) of quantization auxiliaries: scales, zero points, group indices,
# global scales, KV-cache scales and bitsandbytes state. They are stored elements but not model
# parameters, so the logical parameter estimate leaves them out.
AUX_TENSOR_NAMES = (
    "weight_scale", "weight_scale_2", "weight_scale_inv", "weight_global_scale",
    "input_scale", "input_global_scale", "output_scale",
    "weight_zero_point", "weight_g_idx", "weight_shape",
    "qzeros", "scales", "g_idx", "zeros",
    "k_scale", "v_scale", "q_scale", "prob_scale",
    "absmax", "quant_map", "nested_absmax", "nested_quant_map", "SCB", "weight_format",
)

# Float dtypes of unquantized checkpoints, as config.json spells them.
_SAFETENSORS_TO_TORCH_DTYPE = {"F16": "float16", "BF16": "bfloat16", "F32": "float32"}

# Every name that some vLLM release accepts for --quantization, and the names one vLLM loader had
# in different releases (the ModelOpt NVFP4 config is "nvfp4" in 0.8.5 and "modelopt_fp4" from
# about 0.9 on): both derived from the policy (VLLM_RELEASES' quantization_methods, QUANTIZATION's
# aliases), where they are written down once.
KNOWN_VLLM_METHODS = KNOWN_VLLM_QUANT_METHODS
METHOD_ALIASES = dict((key, [key] + list(entry["aliases"])) for key, entry in QUANTIZATION.items()
                      if entry.get("aliases"))

# ModelOpt quant_algo -> (vLLM method, weight format, bits).
_MODELOPT_ALGOS = {
    "FP8": ("modelopt", "fp8", 8),
    NVFP4_ALGO: ("modelopt_fp4", "nvfp4", 4),
    "MXFP8": ("modelopt_mxfp8", "mxfp8", 8),
    "MIXED_PRECISION": ("modelopt_mixed", None, None),
}


class ModelFileError(Exception):
    """A file of the model directory is missing or malformed.

    ``path`` is the file (or directory) concerned, ``problem`` what is wrong with it; the message
    is ``"<path>: <problem>"``.
    """

    def __init__(self, path, problem):
        self.path = path
        self.problem = problem
        super(ModelFileError, self).__init__("%s: %s" % (path, problem))


class ModelDirMissing(ModelFileError):
    """The model directory itself does not exist or is not a directory (read_model_dir)."""


# ---------------------------------------------------------------------------------------------
# JSON files
# ---------------------------------------------------------------------------------------------


def _kind(mode):
    """What a non-regular file is, for messages."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path, max_bytes=None):
    """Open ``path`` for reading if it is a regular file (symbolic links followed only to regular
    files), no larger than ``max_bytes``. Returns ``(file object, size)``.

    Checked with os.stat before opening, so a FIFO or a device (/dev/zero linked in) is never
    opened (opening a FIFO waits for a writer; reading /dev/zero never ends), and again with
    fstat on the descriptor, opened non-blocking, in case the path was swapped in between.
    """
    try:
        before = os.stat(path)
    except OSError as exc:
        if os.path.islink(path):
            raise ModelFileError(path, "is a symbolic link to %s, which does not exist (or cannot be reached: %s)"
                                 % (os.readlink(path), exc.strerror))
        if not os.path.lexists(path):
            raise ModelFileError(path, "file is missing")
        raise ModelFileError(path, "cannot be read (%s)" % exc)
    if not stat.S_ISREG(before.st_mode):
        raise ModelFileError(path, "is %s, not a regular file; replace it with the file itself" % _kind(before.st_mode))
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise ModelFileError(path, "cannot be read (%s)" % exc)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ModelFileError(path, "is %s, not a regular file; replace it with the file itself" % _kind(info.st_mode))
        if max_bytes is not None and info.st_size > max_bytes:
            raise ModelFileError(path, "is %d bytes, more than the %d bytes this probe reads for such a file; it is "
                                 "not a model configuration (or is damaged)" % (info.st_size, max_bytes))
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    return handle, info.st_size


class HugeInt(object):
    """Stands for a JSON integer of more than MAX_JSON_INT_DIGITS digits, never converted with
    int(). It is no int, so every field check refuses it and names the field; nothing returns it."""

    __slots__ = ("digits", "negative")

    def __init__(self, digits, negative):
        self.digits = digits
        self.negative = negative

    def __repr__(self):
        return "%s integer of %d digits" % ("a negative" if self.negative else "an", self.digits)


def _json_int(text):
    """json parse_int hook: ASCII digits only; more than MAX_JSON_INT_DIGITS of them give a HugeInt."""
    digits = text[1:] if text.startswith("-") else text
    if not digits or any(c not in "0123456789" for c in digits):
        raise ValueError("%r is not an ASCII integer" % text[:40])
    if len(digits) > MAX_JSON_INT_DIGITS:
        return HugeInt(len(digits), text.startswith("-"))
    return int(text)


def parse_json_text(text, path, what="is not valid JSON"):
    """json.loads with the integer hook; ModelFileError for malformed, over-long or too deeply
    nested JSON (RecursionError)."""
    try:
        return json.loads(text, parse_int=_json_int)
    except RecursionError:
        raise ModelFileError(path, "%s: it nests arrays or objects deeper than Python's JSON reader allows "
                             "(a model configuration nests a few levels)" % what)
    except ValueError as exc:
        raise ModelFileError(path, "%s (%s)" % (what, _clip(str(exc))))


def read_json_object(path, max_bytes=MAX_JSON_BYTES):
    """Return the JSON object stored in ``path``; ModelFileError if missing, not a regular file,
    larger than ``max_bytes``, unreadable, not JSON or not a JSON object."""
    handle, _size = open_regular(path, max_bytes)
    try:
        with handle:
            raw = handle.read(max_bytes + 1)
    except (IOError, OSError) as exc:
        raise ModelFileError(path, "cannot be read (%s)" % exc)
    if len(raw) > max_bytes:
        raise ModelFileError(path, "holds more than the %d bytes this probe reads for such a file" % max_bytes)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelFileError(path, "is not UTF-8 text (%s)" % exc)
    data = parse_json_text(text, path)
    if not isinstance(data, dict):
        raise ModelFileError(path, "must hold a JSON object, found %s" % type(data).__name__)
    return data


def _clip(text, limit=120):
    text = str(text)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _short(value, limit=80):
    """repr of a value for a message, clipped (a hostile value can be huge)."""
    if isinstance(value, (dict, list)):
        return "a JSON %s of %d entries" % ("object" if isinstance(value, dict) else "array", len(value))
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** 30:
        return "an integer of %d digits" % len(str(abs(value)))
    if isinstance(value, HugeInt):
        return repr(value)
    return _clip(repr(value), limit)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _positive_int(cfg, key, path, where=""):
    """cfg[key] as an int within CONFIG_INT_LIMITS[key], None when absent or null; ModelFileError
    naming the field and the expected range otherwise (bools, floats, NaN, strings included)."""
    value = cfg.get(key)
    if value is None:
        return None
    low, high = CONFIG_INT_LIMITS.get(key, (1, 2 ** 31))
    if not _is_int(value) or not low <= value <= high:
        raise ModelFileError(path, "%s%s must be a positive integer (%d to %d), found %s"
                             % (where, key, low, high, _short(value)))
    return value


def _has_control(text):
    return any(ord(c) < 32 or 127 <= ord(c) < 160 for c in text)


def _name(value, key, path, where="", example="llama"):
    """A name-like string of config.json (dtype, model type, quantization method): None when absent;
    ModelFileError naming the field unless it is ASCII letters, digits, "_", "." and "-"."""
    if value is None:
        return None
    if not isinstance(value, str) or _has_control(value) or not _NAME_RE.fullmatch(value.strip()):
        raise ModelFileError(path, "%s%s must be a name like \"%s\" (ASCII letters, digits, \"_\", \".\" or \"-\", at "
                             "most 128 characters), found %s" % (where, key, example, _short(value)))
    return value


def _scalar_ok(value):
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, int):
        return abs(value) <= 2 ** 53
    if isinstance(value, float):
        return math.isfinite(value) and abs(value) <= 1e15
    if isinstance(value, str):
        return len(value) <= 256 and not _has_control(value)
    return False


# ---------------------------------------------------------------------------------------------
# config.json
# ---------------------------------------------------------------------------------------------

# Alternative names some architectures use for the context length.
_CONTEXT_KEYS = ("max_position_embeddings", "max_sequence_length", "seq_length", "n_positions")


def parse_config(cfg, path="config.json"):
    """Architecture facts from a parsed config.json.

    Multimodal configs keep the language model's numbers in a nested ``text_config``; those are
    used when the top level lacks them. ``num_key_value_heads`` defaults to the attention heads
    (no grouped-query attention) and ``head_dim`` to ``hidden_size / num_attention_heads``.
    """
    notes = []
    text_cfg = cfg.get("text_config")
    if text_cfg is not None and not isinstance(text_cfg, dict):
        raise ModelFileError(path, "text_config must be a JSON object, found %r" % type(text_cfg).__name__)
    arch_cfg = cfg
    where = ""
    if text_cfg and cfg.get("num_hidden_layers") is None and text_cfg.get("num_hidden_layers") is not None:
        arch_cfg = text_cfg
        where = "text_config."

    hidden_size = _positive_int(arch_cfg, "hidden_size", path, where)
    layers = _positive_int(arch_cfg, "num_hidden_layers", path, where)
    heads = _positive_int(arch_cfg, "num_attention_heads", path, where)
    kv_heads = _positive_int(arch_cfg, "num_key_value_heads", path, where)
    if kv_heads is None:
        kv_heads = heads
    head_dim = _positive_int(arch_cfg, "head_dim", path, where)
    if head_dim is None and hidden_size is not None and heads is not None:
        if hidden_size % heads:
            raise ModelFileError(path, "%shidden_size %d is not a multiple of num_attention_heads %d and no "
                                 "head_dim is given" % (where, hidden_size, heads))
        head_dim = hidden_size // heads
    context = None
    for key in _CONTEXT_KEYS:
        context = _positive_int(arch_cfg, key, path, where)
        if context is None and arch_cfg is not cfg:
            context = _positive_int(cfg, key, path)
        if context is not None:
            if key != "max_position_embeddings":
                notes.append("%s: context length taken from %s" % (os.path.basename(path), key))
            break

    torch_dtype = None
    for source in (cfg, text_cfg or {}):
        for key in ("torch_dtype", "dtype"):
            value = source.get(key)
            if value is None:
                continue
            if not isinstance(value, str):
                raise ModelFileError(path, "%s must be a string like \"bfloat16\", found %s" % (key, _short(value)))
            torch_dtype = _name(value, key, path, "" if source is cfg else "text_config.", "bfloat16")
            break
        if torch_dtype is not None:
            break

    model_type = _name(cfg.get("model_type"), "model_type", path)
    text_model_type = _name(text_cfg.get("model_type"), "model_type", path, "text_config.") if text_cfg else None
    architectures = cfg.get("architectures")
    if architectures is not None and (not isinstance(architectures, list) or len(architectures) > 64
                                      or not all(isinstance(a, str) for a in architectures)):
        raise ModelFileError(path, "architectures must be a list of at most 64 strings, found %s"
                             % _short(architectures))
    for pos, arch in enumerate(architectures or []):
        _name(arch, "architectures[%d]" % pos, path, example="LlamaForCausalLM")
    vocab_size = _positive_int(arch_cfg, "vocab_size", path, where)
    if vocab_size is None and arch_cfg is not cfg:
        vocab_size = _positive_int(cfg, "vocab_size", path)
    intermediate_size = _positive_int(arch_cfg, "intermediate_size", path, where)
    model_max_length = arch_cfg.get("model_max_length")
    if _is_int(model_max_length) and model_max_length > CONFIG_INT_LIMITS["model_max_length"][1]:
        # Tokenizers write int(1e30) for "no limit" (transformers' VERY_LARGE_INTEGER); optional, so ignored.
        notes.append("%s: %smodel_max_length %s is above %d, which no model reaches; ignored (no limit)"
                     % (os.path.basename(path), where, _short(model_max_length),
                        CONFIG_INT_LIMITS["model_max_length"][1]))
        model_max_length = None
    else:
        model_max_length = _positive_int(arch_cfg, "model_max_length", path, where)
    rope_scaling, sliding_window, use_sliding_window = _startup_facts(arch_cfg, path, where)

    return {
        "model_type": model_type,
        "text_model_type": text_model_type,
        "architectures": architectures,
        "hidden_size": hidden_size,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "max_position_embeddings": context,
        "torch_dtype": torch_dtype,
        "vocab_size": vocab_size,
        "intermediate_size": intermediate_size,
        "model_max_length": model_max_length,
        "rope_scaling": rope_scaling,
        "sliding_window": sliding_window,
        "use_sliding_window": use_sliding_window,
        "text_config_used": arch_cfg is not cfg,
    }, notes


def _check_rope(rope, label, path, nested):
    """rope_scaling / rope_parameters values: finite numbers, short strings, booleans, nulls, lists
    of numbers; with ``nested``, also one level of such objects (Transformers v5 keeps one
    rope_parameters object per attention type). ModelFileError naming the entry otherwise."""
    if len(rope) > 256:
        raise ModelFileError(path, "%s has %d entries; a rope configuration has a few" % (label, len(rope)))
    for name, value in rope.items():
        where = "%s.%s" % (label, _clip(name, 64))
        if nested and isinstance(value, dict) and len(value) <= 256:
            _check_rope(value, where, path, nested=False)
            continue
        ok = _scalar_ok(value) or (isinstance(value, list) and len(value) <= 4096
                                   and all(_scalar_ok(v) and not isinstance(v, str) for v in value))
        if len(name) > 64 or _has_control(name) or not ok:
            label = _clip(repr(where)[1:-1], 100)
            raise ModelFileError(path, "%s must be a finite number, a string without control characters, true, "
                                 "false, null or a list of numbers, found %s" % (label, _short(value)))


def _startup_facts(arch_cfg, path, where=""):
    """(rope_scaling, sliding_window, use_sliding_window) as config.json declares them, for vLLM's
    startup checks (_vllm_startup): rope_scaling (or Transformers v5's rope_parameters) a dict or
    None; sliding_window an int, a per-layer list of ints/nulls, or None; use_sliding_window a bool
    or None."""
    rope = arch_cfg.get("rope_scaling")
    key = "rope_scaling"
    if rope is None and arch_cfg.get("rope_parameters") is not None:
        rope, key = arch_cfg.get("rope_parameters"), "rope_parameters"
    if rope is not None and not isinstance(rope, dict):
        raise ModelFileError(path, "%s%s must be a JSON object or null, found %s" % (where, key, _short(rope)))
    _check_rope(rope or {}, "%s%s" % (where, key), path, nested=True)
    window = arch_cfg.get("sliding_window")

    def window_ok(w):
        return _is_int(w) and 0 <= w <= SLIDING_WINDOW_MAX

    if (isinstance(window, list) and (len(window) > 2 ** 12 or not all(w is None or window_ok(w) for w in window))) \
            or (window is not None and not isinstance(window, list) and not window_ok(window)):
        raise ModelFileError(path, "%ssliding_window must be an integer, a list of integers or null (each from 0 to "
                             "%d; a list has one entry per layer), found %s" % (where, SLIDING_WINDOW_MAX, _short(window)))
    use = arch_cfg.get("use_sliding_window")
    if use is not None and not isinstance(use, bool):
        raise ModelFileError(path, "%suse_sliding_window must be true, false or null, found %s" % (where, _short(use)))
    return (dict(rope) if rope is not None else None), (list(window) if isinstance(window, list) else window), use


# ---------------------------------------------------------------------------------------------
# Quantization description
# ---------------------------------------------------------------------------------------------


def normalise_method(raw):
    """(vLLM --quantization name, known) for a method name as a checkpoint spells it.

    ``known`` is False for names no vLLM release accepts; the name is then returned lowercased so
    the gate reports it as unknown to the image instead of taking the model for unquantized.
    The normalisation is the policy's (vllm_quant_name), shared with the deployment gate.
    """
    return vllm_quant_name(raw)


def _empty_quant():
    return {
        "quantized": False, "quant_method": None, "quant_method_aliases": [], "quant_method_known": None,
        "quant_raw_method": None, "quant_source": None, "quant_format": None, "quant_bits": None,
        "quant_group_size": None, "quant_scale_bits": None, "quant_scheme": None,
        "quant_source_read_by_vllm": None, "quant_sym": None, "quant_desc_act": None, "quant_zero_point": None,
    }


def _quant(raw, source, method=None, known=None, fmt=None, bits=None, group=None, scale_bits=None, scheme=None):
    if method is None:
        method, known = normalise_method(raw)
    q = _empty_quant()
    q.update({
        "quantized": True, "quant_method": method, "quant_method_aliases": list(METHOD_ALIASES.get(method, [method])),
        "quant_method_known": known, "quant_raw_method": raw, "quant_source": source, "quant_format": fmt,
        "quant_bits": bits, "quant_group_size": group, "quant_scale_bits": scale_bits, "quant_scheme": scheme,
    })
    return q


def _opt_int(data, key, path, where="", limits=None):
    """data[key] as an int within ``limits`` (default: a group size, -1 or 1..2**20; bit widths pass
    QUANT_BITS_RANGE); None when absent or null; ModelFileError naming the field otherwise."""
    value = data.get(key)
    if value is None:
        return None
    if limits is None:
        limits = QUANT_BITS_RANGE if "bit" in key else QUANT_GROUP_RANGE
    low, high = limits
    if not _is_int(value) or not low <= value <= high or (value == 0 and low < 0):
        expected = "-1 or an integer from 1 to %d" % high if low < 0 else "an integer from %d to %d" % (low, high)
        raise ModelFileError(path, "%s%s must be %s, found %s" % (where, key, expected, _short(value)))
    return value


def _opt_bool(data, key, path, where=""):
    """data[key] as true or false; None when absent or null; ModelFileError naming the field otherwise."""
    value = data.get(key)
    if value is None or isinstance(value, bool):
        return value
    raise ModelFileError(path, "%s%s must be true or false, found %s" % (where, key, _short(value)))


# The quantization_config keys of GPTQ / AWQ checkpoints vLLM's Marlin conversion reads from
# config.json (GPTQMarlinConfig.is_gptq_marlin_compatible: sym, desc_act; AWQMarlinConfig.
# is_awq_marlin_compatible: zero_point), reported as quant_<key>.
MARLIN_KEYS = ("sym", "desc_act", "zero_point")


def _compressed_tensors(qc, source, path):
    """compressed-tensors: the scheme of the config groups (wna16, w8a8_int8, w8a8_fp8, nvfp4)."""
    groups = qc.get("config_groups") or {}
    if not isinstance(groups, dict):
        raise ModelFileError(path, "quantization_config.config_groups must be an object")
    top_format = _name(qc.get("format"), "format", path, "quantization_config.", "pack-quantized")
    schemes = set()
    bits_seen = set()
    group_sizes = set()
    formats = set()
    for name, group in groups.items():
        where = "quantization_config.config_groups.%s." % name
        if not isinstance(group, dict):
            raise ModelFileError(path, "%s must be an object" % where[:-1])
        weights = group.get("weights") or {}
        acts = group.get("input_activations") or {}
        if not isinstance(weights, dict) or not isinstance(acts, dict):
            raise ModelFileError(path, "%sweights and input_activations must be objects or null" % where)
        w_bits = _opt_int(weights, "num_bits", path, where + "weights.")
        a_bits = _opt_int(acts, "num_bits", path, where + "input_activations.")
        w_type = _name(weights.get("type"), "type", path, where + "weights.", "int") or "int"
        a_type = _name(acts.get("type"), "type", path, where + "input_activations.", "float") or "int"
        group_size = _opt_int(weights, "group_size", path, where + "weights.")
        fmt = _name(group.get("format"), "format", path, where, "pack-quantized") or top_format
        if w_bits is not None:
            bits_seen.add(w_bits)
        if group_size is not None:
            group_sizes.add(group_size)
        if is_nvfp4_group(fmt, w_bits, w_type, group_size):
            schemes.add("nvfp4")
            formats.add("nvfp4")
        elif w_type == "float" and w_bits == 8:
            schemes.add("w8a8_fp8" if (a_bits == 8 and a_type == "float") else "w8a16_fp8")
            formats.add("fp8")
        elif w_type == "int" and w_bits is not None and not acts:
            schemes.add("wna16")
            formats.add("int%d" % w_bits)
        elif w_type == "int" and w_bits == 8 and a_bits == 8 and a_type == "int":
            schemes.add("w8a8_int8")
            formats.add("int8")
        else:
            schemes.add("w%sa%s_%s" % (w_bits, a_bits if a_bits else 16, w_type))
            formats.add("%s%s" % (w_type, w_bits))
    scheme = schemes.pop() if len(schemes) == 1 else ("mixed" if schemes else None)
    fmt = formats.pop() if len(formats) == 1 else ("mixed" if formats else None)
    bits = bits_seen.pop() if len(bits_seen) == 1 else None
    group = group_sizes.pop() if len(group_sizes) == 1 else None
    scale_bits = 8 if scheme == "nvfp4" else None
    return _quant(qc.get("quant_method"), source, "compressed-tensors", True, fmt, bits, group, scale_bits, scheme)


def _modelopt(algo, source, path, group=None):
    if not isinstance(algo, str) or not algo:
        raise ModelFileError(path, "quant_algo must be a non-empty string like \"NVFP4\" or \"FP8\", found %s"
                             % _short(algo))
    _name(algo, "quant_algo", path, example="NVFP4")
    entry = _MODELOPT_ALGOS.get(algo.upper())
    if entry is None:
        return _quant(algo, source, quant_text(algo), False)
    method, fmt, bits = entry
    scale_bits = 8 if method == "modelopt_fp4" else None
    return _quant(algo, source, method, True, fmt, bits, group, scale_bits)


def quant_from_config_json(qc, path, key="quantization_config"):
    """The quantization_config (or older compression_config) object of config.json."""
    if not isinstance(qc, dict):
        raise ModelFileError(path, "%s must be a JSON object" % key)
    raw = qc.get("quant_method")
    if raw is None and key == "compression_config":
        raw = "compressed-tensors"
    if not isinstance(raw, str) or not raw.strip():
        raise ModelFileError(path, "%s has no quant_method string" % key)
    _name(raw, "quant_method", path, key + ".", "gptq")
    source = "%s:%s" % (os.path.basename(path), key)
    key = quant_text(raw)
    if key == "compressed_tensors":
        return _compressed_tensors(qc, source, path)
    if key == "modelopt":
        return _modelopt(qc.get("quant_algo"), source, path, _opt_int(qc, "group_size", path))
    if key == "bitsandbytes":
        if qc.get("load_in_4bit"):
            kind = _name(qc.get("bnb_4bit_quant_type"), "bnb_4bit_quant_type", path, "quantization_config.", "nf4")
            return _quant(raw, source, fmt=kind or "nf4", bits=4)
        if qc.get("load_in_8bit"):
            return _quant(raw, source, fmt="int8", bits=8)
        return _quant(raw, source)
    bits = _opt_int(qc, "bits", path, "quantization_config.")
    if bits is None:
        bits = _opt_int(qc, "w_bit", path, "quantization_config.")
    group = _opt_int(qc, "group_size", path, "quantization_config.")
    if group is None:
        group = _opt_int(qc, "q_group_size", path, "quantization_config.")
    if key in ("gptq", "awq", "gptq_marlin", "awq_marlin", "marlin", "moe_wna16"):
        q = _quant(raw, source, fmt=("int%d" % bits) if bits else None, bits=bits, group=group)
        for name in MARLIN_KEYS:
            q["quant_%s" % name] = _opt_bool(qc, name, path, "quantization_config.")
        return q
    if key in ("fp8", "fbgemm_fp8"):
        block = qc.get("weight_block_size")
        if block is not None and (not isinstance(block, list) or not 1 <= len(block) <= 4
                                  or not all(_is_int(b) and 1 <= b <= QUANT_GROUP_RANGE[1] for b in block)):
            raise ModelFileError(path, "quantization_config.weight_block_size must be a list of 1 to 4 integers from "
                                 "1 to %d (e.g. [128, 128]) or null, found %s" % (QUANT_GROUP_RANGE[1], _short(block)))
        return _quant(raw, source, fmt="fp8", bits=8, group=block)
    if key in ("mxfp4", "gpt_oss_mxfp4"):
        return _quant(raw, source, fmt="mxfp4", bits=4, group=32)
    method, known = normalise_method(raw)
    if method == "modelopt_fp4":
        return _quant(raw, source, fmt="nvfp4", bits=4, group=group or 16, scale_bits=8)
    return _quant(raw, source, fmt=None, bits=bits, group=group)


def quant_from_hf_quant_config(data, path):
    """ModelOpt's hf_quant_config.json: {"producer": ..., "quantization": {"quant_algo": ...}}."""
    quant = data.get("quantization")
    if not isinstance(quant, dict):
        raise ModelFileError(path, "has no \"quantization\" object (ModelOpt writes "
                             "{\"quantization\": {\"quant_algo\": ...}})")
    group = _opt_int(quant, "group_size", path, "quantization.")
    q = _modelopt(quant.get("quant_algo"), os.path.basename(path), path, group)
    if q["quant_method"] == "modelopt_fp4" and group is None:
        q["quant_group_size"] = 16
    kv = quant.get("kv_cache_quant_algo")
    q["quant_kv_cache_algo"] = _name(kv, "kv_cache_quant_algo", path, "quantization.", "FP8") \
        if isinstance(kv, str) else None
    return q


def quant_from_quant_config(data, path):
    """quant_config.json / quantize_config.json.

    The reference deployment's layout ``{"quant_method": "nvfp4", "block_size": 16,
    "scale_bits": 8}``, AutoAWQ's ``{"w_bit": 4, "q_group_size": 128, ...}`` and AutoGPTQ's
    ``{"bits": 4, "group_size": 128, ...}``.
    """
    source = os.path.basename(path)
    raw = data.get("quant_method")
    if raw is not None and (not isinstance(raw, str) or not raw.strip()):
        raise ModelFileError(path, "quant_method must be a non-empty string, found %s" % _short(raw))
    _name(raw, "quant_method", path, example="nvfp4")
    bits = _opt_int(data, "bits", path)
    if bits is None:
        bits = _opt_int(data, "w_bit", path)
    group = _opt_int(data, "block_size", path)
    if group is None:
        group = _opt_int(data, "group_size", path)
    if group is None:
        group = _opt_int(data, "q_group_size", path)
    scale_bits = _opt_int(data, "scale_bits", path)
    if raw is None:
        if "w_bit" in data or "q_group_size" in data:
            raw = "awq"
        elif "bits" in data and "group_size" in data:
            raw = "gptq"
        else:
            raise ModelFileError(path, "declares no quant_method (expected e.g. {\"quant_method\": \"nvfp4\", "
                                 "\"block_size\": 16, \"scale_bits\": 8})")
    method, known = normalise_method(raw)
    fmt = None
    if method == "modelopt_fp4":
        fmt = "nvfp4"
        bits = bits or 4
        scale_bits = scale_bits or 8
        group = group or 16
    elif method in ("gptq", "awq") and bits:
        fmt = "int%d" % bits
    elif method == "fp8":
        fmt = "fp8"
        bits = bits or 8
    return _quant(raw, source, method, known, fmt, bits, group, scale_bits)


# Files vLLM looks for besides config.json's quantization_config (get_config_filenames() of each
# method's config class in vllm 0.8.5 and 0.19.1).
VLLM_CONFIG_FILES = {
    "modelopt": ("hf_quant_config.json",),
    "modelopt_fp4": ("hf_quant_config.json",),
    "modelopt_mxfp8": ("hf_quant_config.json",),
    "modelopt_mixed": ("hf_quant_config.json",),
    "gptq": ("quantize_config.json",),
    "gptq_marlin": ("quantize_config.json",),
    "marlin": ("quantize_config.json",),
    "moe_wna16": ("quantize_config.json",),
    "awq": ("quant_config.json", "quantize_config.json"),
    "awq_marlin": ("quantize_config.json",),
}


def source_read_by_vllm(source, method):
    """Whether vLLM finds a description at ``source`` for ``method`` (None: cannot tell)."""
    if source is None:
        return None
    if source.startswith("config.json:"):
        return True
    if method not in VLLM_CONFIG_FILES:
        return None
    return source in VLLM_CONFIG_FILES[method]


def read_quantization(model_dir, cfg, config_path):
    """The quantization description wherever it lives, normalised, plus notes.

    Precedence follows vLLM: config.json ``quantization_config`` first, then ModelOpt's
    hf_quant_config.json, then quant_config.json / quantize_config.json. Every file present is
    parsed (a malformed one raises even when another file wins); disagreements become notes.
    """
    found = []
    text_cfg = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else {}
    for key, holder in (("quantization_config", cfg), ("quantization_config", text_cfg),
                        ("compression_config", cfg)):
        if holder.get(key) is not None:
            q = quant_from_config_json(holder[key], config_path, key)
            if holder is text_cfg:
                q["quant_source"] = "config.json:text_config.%s" % key
            found.append(q)
            break
    hf_path = os.path.join(model_dir, "hf_quant_config.json")
    if os.path.lexists(hf_path):
        found.append(quant_from_hf_quant_config(read_json_object(hf_path), hf_path))
    for name in ("quant_config.json", "quantize_config.json"):
        qpath = os.path.join(model_dir, name)
        if os.path.lexists(qpath):
            found.append(quant_from_quant_config(read_json_object(qpath), qpath))
    notes = []
    if not found:
        return _empty_quant(), notes
    chosen = found[0]
    for other in found[1:]:
        if other["quant_method"] != chosen["quant_method"]:
            notes.append("%s says %s but %s says %s; vLLM follows %s" % (
                chosen["quant_source"], chosen["quant_method"], other["quant_source"], other["quant_method"],
                chosen["quant_source"]))
        else:
            for key in ("quant_format", "quant_bits", "quant_group_size", "quant_scale_bits"):
                if chosen.get(key) is None and other.get(key) is not None:
                    chosen[key] = other[key]
    chosen["quant_source_read_by_vllm"] = source_read_by_vllm(chosen["quant_source"], chosen["quant_method"])
    if chosen["quant_source_read_by_vllm"] is False:
        notes.append("%s describes %s, but vLLM's %s loader reads its description from %s, not from %s: "
                     "native loading needs that file (or a vLLM build with its own loader); dequantizing to "
                     "fp16 works with any build" % (
                         chosen["quant_source"], chosen["quant_method"], chosen["quant_method"],
                         " or ".join(["config.json quantization_config"] + list(VLLM_CONFIG_FILES.get(
                             chosen["quant_method"], ()))), chosen["quant_source"]))
    if chosen["quant_method_known"] is False:
        notes.append("%s names quantization method %r, which no vLLM release known to this probe accepts"
                     % (chosen["quant_source"], chosen["quant_raw_method"]))
    return chosen, notes


# ---------------------------------------------------------------------------------------------
# safetensors headers
# ---------------------------------------------------------------------------------------------


def read_safetensors_header(path, max_header_bytes=MAX_HEADER_BYTES):
    """Parse the header of one safetensors file (never its tensor data).

    Layout: an 8-byte little-endian unsigned header length N, N bytes of UTF-8 JSON mapping tensor
    names to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets relative to the data
    area after the header), optionally ``"__metadata__"``, then the data area.

    Returns ``{"file", "file_bytes", "header_bytes", "data_bytes", "tensors": {name: {...}},
    "metadata"}``. Raises ModelFileError for truncated files, absurd header lengths, malformed JSON
    and offsets that do not match the shapes or the data area (safetensors refuses such files too).
    """
    handle, file_bytes = open_regular(path)
    try:
        with handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise ModelFileError(path, "truncated: %d bytes, shorter than the 8-byte header length" % len(prefix))
            (length,) = struct.unpack("<Q", prefix)
            if length == 0:
                raise ModelFileError(path, "header length is 0: not a safetensors file")
            if length > max_header_bytes:
                raise ModelFileError(path, "header length %d exceeds the %d-byte limit: not a safetensors "
                                     "file, or damaged" % (length, max_header_bytes))
            if length > file_bytes - 8:
                raise ModelFileError(path, "truncated: header claims %d bytes but only %d follow the length "
                                     "word" % (length, file_bytes - 8))
            raw = handle.read(length)
    except (IOError, OSError) as exc:
        raise ModelFileError(path, "cannot be read (%s)" % exc)
    if len(raw) < length:
        raise ModelFileError(path, "truncated: header claims %d bytes, read %d" % (length, len(raw)))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelFileError(path, "header is not valid UTF-8 JSON (%s)" % exc)
    header = parse_json_text(text, path, "header is not valid UTF-8 JSON")
    if not isinstance(header, dict):
        raise ModelFileError(path, "header must be a JSON object")
    data_bytes = file_bytes - 8 - length
    metadata = header.pop("__metadata__", None)
    if metadata is not None and not isinstance(metadata, dict):
        raise ModelFileError(path, "__metadata__ must be an object")
    tensors = {}
    spans = []
    for name, info in header.items():
        label = _clip(repr(name), 100)
        if not isinstance(info, dict):
            raise ModelFileError(path, "tensor %s: entry must be an object" % label)
        dtype = info.get("dtype")
        shape = info.get("shape")
        offsets = info.get("data_offsets")
        if not isinstance(dtype, str) or not _DTYPE_RE.fullmatch(dtype):
            raise ModelFileError(path, "tensor %s: dtype must be a safetensors dtype name like \"BF16\" (capital "
                                 "ASCII letters, digits and _), found %s" % (label, _short(dtype)))
        if (not isinstance(shape, list) or len(shape) > MAX_TENSOR_DIMS
                or not all(_is_int(d) and 0 <= d <= MAX_TENSOR_DIM for d in shape)):
            raise ModelFileError(path, "tensor %s: shape must be a list of at most %d integers from 0 to %d, found %s"
                                 % (label, MAX_TENSOR_DIMS, MAX_TENSOR_DIM, _short(shape)))
        if (not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_int(o) for o in offsets)
                or offsets[0] < 0 or offsets[1] < offsets[0]):
            raise ModelFileError(path, "tensor %s: data_offsets must be [begin, end] with 0 <= begin <= end" % label)
        if offsets[1] > data_bytes:
            raise ModelFileError(path, "truncated: tensor %s ends at byte %s of the data area but the file "
                                 "holds only %d data bytes" % (label, _short(offsets[1]), data_bytes))
        numel = 1
        for dim in shape:
            numel *= dim
        span = offsets[1] - offsets[0]
        bits = DTYPE_BITS.get(dtype)
        if bits is not None and span != (numel * bits + 7) // 8:
            raise ModelFileError(path, "tensor %s: data_offsets span %d bytes but shape %s of %s needs %s"
                                 % (label, span, _clip(repr(shape), 100), dtype, _short((numel * bits + 7) // 8)))
        low, high = UNKNOWN_DTYPE_BITS
        if bits is None and (numel * low > span * 8 or span * 8 > numel * high):
            # The file size bounds the span (checked above), and with it the element count.
            raise ModelFileError(path, "tensor %s: dtype %s is unknown to this probe, and its data_offsets span %d "
                                 "bytes for shape %s (%s elements): not %d to %d bits per element, so the shape "
                                 "does not fit the data" % (label, dtype, span, _clip(repr(shape), 100),
                                                            _short(numel), low, high))
        tensors[name] = {"dtype": dtype, "shape": shape, "numel": numel, "bytes": span,
                         "dtype_known": bits is not None}
        spans.append((offsets[0], offsets[1], name))
    spans.sort()
    position = 0
    for begin, end, name in spans:
        if begin != position:
            if begin < position:
                raise ModelFileError(path, "tensor %r overlaps the tensor before it in the data area" % name)
            raise ModelFileError(path, "%d bytes of the data area before tensor %r belong to no tensor"
                                 % (begin - position, name))
        position = end
    if position != data_bytes:
        raise ModelFileError(path, "%d bytes at the end of the data area belong to no tensor (safetensors "
                             "refuses such files)" % (data_bytes - position))
    return {"file": path, "file_bytes": file_bytes, "header_bytes": 8 + length, "data_bytes": data_bytes,
            "tensors": tensors, "metadata": metadata}


def read_index(path):
    """model.safetensors.index.json: (weight_map {tensor: shard file name}, total_size or None)."""
    data = read_json_object(path, MAX_INDEX_BYTES)
    weight_map = data.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ModelFileError(path, "weight_map must be a non-empty object of tensor name -> shard file")
    for tensor, shard in weight_map.items():
        if not isinstance(shard, str) or not shard:
            raise ModelFileError(path, "weight_map[%s] must be a file name" % _clip(repr(tensor), 100))
        if "/" in shard or "\\" in shard or shard in (".", "..") or _has_control(shard) or len(shard) > 255:
            raise ModelFileError(path, "weight_map[%s] = %s: shards must be plain file names in the model "
                                 "directory (no path separators or control characters, at most 255 characters)"
                                 % (_clip(repr(tensor), 100), _clip(repr(shard), 100)))
    total = None
    metadata = data.get("metadata")
    if isinstance(metadata, dict) and _is_int(metadata.get("total_size")) and 0 <= metadata["total_size"] <= 2 ** 62:
        total = metadata["total_size"]
    return weight_map, total


def _last_component(name):
    return name.rsplit(".", 1)[-1]


def _is_aux(name):
    return _last_component(name) in AUX_TENSOR_NAMES or ".quant_state." in name


def count_parameters(tensors, quant_bits=None, quantized=False):
    """(stored elements, logical estimate or None, how) over ``{name: {"dtype", "numel"}}``.

    ``stored`` counts every element of every tensor as the file stores it, so a uint8 tensor
    holding two 4-bit values counts once and scales count too. ``logical`` estimates the model's
    parameters: packed containers (``qweight``, ``weight_packed``, or an integer-typed ``weight``
    in a quantized checkpoint) count ``container bits / quantization bits`` values per element,
    and quantization auxiliaries (scales, zero points, group indices, bitsandbytes state) are left
    out. It is None when the checkpoint is quantized but its bit width is unknown, or a container
    does not divide evenly.
    """
    stored = 0
    logical = 0
    unknown = False
    unpacked = False
    for name, info in tensors.items():
        numel = info["numel"]
        stored += numel
        if not quantized:
            logical += numel
            continue
        if _is_aux(name):
            continue
        dtype = info["dtype"]
        last = _last_component(name)
        packed = dtype in PACKED_CONTAINER_DTYPES and (last in PACKED_WEIGHT_NAMES or last == "weight")
        if not packed:
            logical += numel
            continue
        container = DTYPE_BITS[dtype]
        if not quant_bits or (numel * container) % quant_bits:
            unknown = True
            continue
        logical += numel * container // quant_bits
        unpacked = unpacked or container != quant_bits
    if unknown:
        return stored, None, "unknown"
    if not quantized:
        return stored, logical, "stored"
    return stored, logical, ("unpacked" if unpacked else "stored_without_aux")


# The float dtypes a converted copy (nvfp4_dequantize's FP16 copy, nvfp4_repack's GPTQ copy) stores as
# float16; other tensors are copied as they are.
_FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")
# The prefix of an NVFP4 block scale's dtype, and the elements one packed byte holds.
_NVFP4_SCALE_DTYPE = "F8_E4M3"
_NVFP4_PER_BYTE = 2


def nvfp4_linears(tensors):
    """The NVFP4 linear weights among ``{name: {"dtype", "shape", "bytes"}}`` and what else a converted
    copy keeps: (shapes, other_bytes).

    An NVFP4 linear weight is a packed uint8 ``<layer>.weight`` (ModelOpt) or ``<layer>.weight_packed``
    (compressed-tensors) [out, in/2] with a float8_e4m3 block scale ``<layer>.weight_scale`` [out, in/16]
    (facts.md section 4). ``shapes`` counts them per shape: [{"out_features", "in_features", "count"}],
    sorted; an NVFP4 LM head is not among them (the repacker writes it as float16). ``other_bytes``
    is what the rest takes in the copy (quantization auxiliaries such as scales, global scales and
    KV-cache scales left out): float tensors and an NVFP4 LM head as float16 (2 bytes an element),
    other tensors as they are. ([], None) when there is no NVFP4 weight.
    """
    counts = {}
    linear = set()
    fp16 = 0
    for name, info in tensors.items():
        prefix, _dot, last = name.rpartition(".")
        if last not in ("weight", "weight_packed") or info["dtype"] != "U8" or len(info["shape"]) != 2:
            continue
        scale = tensors.get((prefix + "." if prefix else "") + "weight_scale")
        rows, packed = info["shape"]
        in_features = packed * _NVFP4_PER_BYTE
        if (not scale or not scale["dtype"].startswith(_NVFP4_SCALE_DTYPE) or rows <= 0 or packed <= 0
                or list(scale["shape"]) != [rows, in_features // NVFP4_BLOCK] or in_features % NVFP4_BLOCK):
            continue
        linear.add(name)
        if prefix.rsplit(".", 1)[-1] in GPTQ_FP16_LAYERS:
            fp16 += rows * in_features * 2
            continue
        key = (rows, in_features)
        counts[key] = counts.get(key, 0) + 1
    if not counts:
        return [], None
    other = fp16
    for name, info in tensors.items():
        if name in linear or _is_aux(name):
            continue
        other += info["numel"] * 2 if info["dtype"] in _FLOAT_DTYPES else info["bytes"]
    shapes = [{"out_features": out, "in_features": inp, "count": n} for (out, inp), n in sorted(counts.items())]
    return shapes, other


def repacked_model_bytes(shapes, other_bytes, group_size):
    """Bytes of the GPTQ int4 copy at ``group_size``: each NVFP4 linear weight repacked
    (_gptq.repacked_tensor_bytes) plus the tensors the copy keeps (``other_bytes``)."""
    total = other_bytes or 0
    for shape in shapes:
        total += shape["count"] * repacked_tensor_bytes(shape["out_features"], shape["in_features"], group_size)
    return total


def read_weights(model_dir, max_header_bytes=MAX_HEADER_BYTES):
    """Headers of the weights vLLM would load: the shards named by model.safetensors.index.json
    when it exists, otherwise every ``*.safetensors`` file of the directory (not recursive)."""
    notes = []
    index_path = os.path.join(model_dir, INDEX_FILE)
    try:
        names = sorted(os.listdir(model_dir))
    except OSError as exc:
        raise ModelFileError(model_dir, "cannot list the directory (%s)" % exc)
    present = [n for n in names if n.endswith(".safetensors") and os.path.isfile(os.path.join(model_dir, n))]
    weight_map = None
    total_size = None
    if os.path.lexists(index_path):
        weight_map, total_size = read_index(index_path)
        shards = sorted(set(weight_map.values()))
        for shard in shards:
            if not os.path.lexists(os.path.join(model_dir, shard)):
                raise ModelFileError(index_path, "names shard %s, which is missing from %s" % (shard, model_dir))
        extra = sorted(set(present) - set(shards))
        if extra:
            notes.append("%s not named in %s; vLLM ignores them, so they are not counted"
                         % (", ".join(extra), INDEX_FILE))
    else:
        # vLLM globs *.safetensors: whatever carries the name is loaded, so a FIFO, a device, a
        # directory or a dangling link among them fails here (open_regular), never hangs.
        shards = [n for n in names if n.endswith(".safetensors")]
    if not shards:
        others = [n for n in names if n.endswith((".bin", ".pt", ".pth", ".gguf"))]
        hint = (" (found %s, which this probe does not read)" % ", ".join(others[:5])) if others else ""
        raise ModelFileError(model_dir, "no *.safetensors weight files%s" % hint)
    headers = []
    for shard in shards:
        headers.append(read_safetensors_header(os.path.join(model_dir, shard), max_header_bytes))
    if weight_map is not None:
        by_file = dict((os.path.basename(h["file"]), h) for h in headers)
        for tensor, shard in sorted(weight_map.items()):
            if tensor not in by_file[shard]["tensors"]:
                raise ModelFileError(index_path, "says tensor %r is in %s, but that file's header has no such "
                                     "tensor" % (tensor, shard))
        data_total = sum(h["data_bytes"] for h in headers)
        if total_size is not None and total_size != data_total:
            notes.append("%s metadata.total_size is %d but the shards hold %d tensor bytes"
                         % (INDEX_FILE, total_size, data_total))
    seen = {}
    for header in headers:
        for tensor in header["tensors"]:
            if tensor in seen:
                raise ModelFileError(header["file"], "tensor %r is also stored in %s" % (tensor, seen[tensor]))
            seen[tensor] = os.path.basename(header["file"])
    return headers, (INDEX_FILE if weight_map is not None else None), notes


# ---------------------------------------------------------------------------------------------
# Disk
# ---------------------------------------------------------------------------------------------


def disk_usage(path):
    """{free_bytes (available to unprivileged users), total_bytes} of the filesystem holding path."""
    try:
        st = os.statvfs(path)
    except OSError as exc:
        raise ModelFileError(path, "cannot stat the filesystem (%s)" % exc)
    return {"disk_free_bytes": st.f_bavail * st.f_frsize, "disk_total_bytes": st.f_blocks * st.f_frsize}


# ---------------------------------------------------------------------------------------------
# Permissions
# ---------------------------------------------------------------------------------------------


def permission_problems(model_dir, euid=None):
    """(world_writable, foreign_owned): sorted paths among ``model_dir`` and the regular files in it
    (symbolic links followed, as vLLM follows them) that any local user may change (mode o+w), and
    that belong to a user who is neither root nor the user running the probe (``euid``, default
    the effective uid). Either lets someone else swap the weights or the config (a chat template,
    a tokenizer, a quantization description) under the server."""
    euid = os.geteuid() if euid is None else euid
    writable = []
    foreign = []
    try:
        names = sorted(os.listdir(model_dir))
    except OSError:
        names = []
    for path in [model_dir] + [os.path.join(model_dir, n) for n in names]:
        try:
            info = os.stat(path)
        except OSError:
            continue
        if path != model_dir and not stat.S_ISREG(info.st_mode):
            continue
        if info.st_mode & stat.S_IWOTH:
            writable.append(path)
        if info.st_uid not in (0, euid):
            foreign.append(path)
    return writable, foreign


def _some(paths, limit=5):
    shown = ", ".join(paths[:limit])
    return shown + (" and %d more" % (len(paths) - limit) if len(paths) > limit else "")


def permission_notes(model_dir, writable, foreign, euid=None):
    """Warnings (what is wrong and the command that fixes it) for permission_problems' lists."""
    euid = os.geteuid() if euid is None else euid
    notes = []
    if writable:
        notes.append("%s world-writable: any local user can replace the weights or the configuration vLLM loads; "
                     "remove the write permission for others (chmod -R o-w %s)" % (_some(writable), model_dir))
    if foreign:
        notes.append("%s owned by another user (neither root nor uid %d, which runs this probe): that user can "
                     "change the model under the server; give it to root or the deploying user (chown -R root: %s)"
                     % (_some(foreign), euid, model_dir))
    return notes


# ---------------------------------------------------------------------------------------------
# The whole directory
# ---------------------------------------------------------------------------------------------

GATE_KEYS = ("weight_bytes", "param_count", "quant_method", "quant_scheme", "quant_bits", "quant_group_size",
             # the GPTQ / AWQ keys vLLM's Marlin conversion reads (the gate's quantization rules)
             "quant_sym", "quant_desc_act", "quant_zero_point",
             "num_hidden_layers", "num_key_value_heads", "head_dim", "max_position_embeddings", "torch_dtype",
             # config.json facts vLLM's startup checks read (_vllm_startup.startup_checks)
             "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size", "model_type", "architectures",
             "rope_scaling", "sliding_window", "use_sliding_window", "model_max_length", "text_config_used",
             # the size of an FP16 copy (the plan's NVFP4 fallback)
             "fp16_weight_bytes",
             # the NVFP4 linear weights by shape and the rest of a converted copy (the plan's GPTQ repack)
             "nvfp4_linear_shapes", "nvfp4_other_bytes")


def gate_input(model):
    """The dict labfleet.vllm.deploy_gate takes as its ``model`` option."""
    gate = dict((key, model.get(key)) for key in GATE_KEYS)
    if model.get("param_count_logical") is not None:
        gate["param_count"] = model["param_count_logical"]
    return gate


def read_model_dir(model_dir, max_header_bytes=MAX_HEADER_BYTES):
    """Everything model_facts reports about ``model_dir`` (see the module's RETURN)."""
    if not os.path.exists(model_dir):
        raise ModelDirMissing(model_dir, "model directory does not exist")
    if not os.path.isdir(model_dir):
        raise ModelDirMissing(model_dir, "is not a directory (give the directory holding config.json)")
    config_path = os.path.join(model_dir, "config.json")
    cfg = read_json_object(config_path)
    model = {"path": model_dir}
    arch, notes = parse_config(cfg, config_path)
    model.update(arch)
    quant, quant_notes = read_quantization(model_dir, cfg, config_path)
    model.update(quant)
    notes.extend(quant_notes)

    headers, index_name, weight_notes = read_weights(model_dir, max_header_bytes)
    notes.extend(weight_notes)
    tensors = {}
    dtype_elements = {}
    dtype_bytes = {}
    for header in headers:
        for name, info in header["tensors"].items():
            tensors[name] = info
            dtype_elements[info["dtype"]] = dtype_elements.get(info["dtype"], 0) + info["numel"]
            dtype_bytes[info["dtype"]] = dtype_bytes.get(info["dtype"], 0) + info["bytes"]
    unknown_dtypes = sorted(d for d in dtype_elements if d not in DTYPE_BITS)
    if unknown_dtypes:
        notes.append("dtypes %s are unknown to this probe; their sizes were taken from data_offsets unchecked"
                     % ", ".join(unknown_dtypes))
    stored, logical, how = count_parameters(tensors, model["quant_bits"], model["quantized"])
    model.update({
        "weight_index": index_name,
        "weight_files": [{"file": os.path.basename(h["file"]), "file_bytes": h["file_bytes"],
                          "data_bytes": h["data_bytes"], "tensors": len(h["tensors"])} for h in headers],
        "weight_bytes": sum(h["data_bytes"] for h in headers),
        "weight_file_bytes": sum(h["file_bytes"] for h in headers),
        "tensor_count": len(tensors),
        "dtypes": sorted(dtype_elements),
        "dtype_bytes": dtype_bytes,
        "param_count": stored,
        "param_count_logical": logical,
        "param_count_method": how,
        "fp16_weight_bytes": logical * 2 if logical is not None else None,
    })
    shapes, other = nvfp4_linears(tensors) if model["quant_format"] == "nvfp4" else ([], None)
    model["nvfp4_linear_shapes"] = shapes if shapes else None
    model["nvfp4_other_bytes"] = other
    model["gptq_repack_bytes"] = [{"group_size": g, "bytes": repacked_model_bytes(shapes, other, g)}
                                  for g in GROUP_SIZES] if shapes else None
    if model["quantized"] and logical is None:
        notes.append("param_count_logical unknown: the quantization bit width is not declared, so packed "
                     "weights cannot be unpacked honestly")
    model["torch_dtype_source"] = "config.json" if model["torch_dtype"] else None
    if model["torch_dtype"] is None:
        floats = dict((d, b) for d, b in dtype_bytes.items() if d in _SAFETENSORS_TO_TORCH_DTYPE)
        if floats:
            dominant = max(sorted(floats), key=lambda d: floats[d])
            model["torch_dtype"] = _SAFETENSORS_TO_TORCH_DTYPE[dominant]
            model["torch_dtype_source"] = "safetensors"
            notes.append("config.json declares no torch_dtype; %s taken from the dominant float dtype of the "
                         "weights" % model["torch_dtype"])
    model["has_generation_config"] = os.path.isfile(os.path.join(model_dir, "generation_config.json"))
    model["has_tokenizer"] = any(os.path.isfile(os.path.join(model_dir, n))
                                 for n in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json"))
    if not model["has_tokenizer"]:
        notes.append("no tokenizer.json, tokenizer.model or tokenizer_config.json in %s; vLLM needs a tokenizer "
                     "(or --tokenizer pointing elsewhere)" % model_dir)
    model.update(disk_usage(model_dir))
    model["world_writable"], model["foreign_owned"] = permission_problems(model_dir)
    notes.extend(permission_notes(model_dir, model["world_writable"], model["foreign_owned"]))
    model["notes"] = notes
    model["gate"] = gate_input(model)
    return model
