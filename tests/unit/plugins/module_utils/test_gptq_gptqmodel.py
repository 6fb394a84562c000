# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Our GPTQ output against a maintained GPTQ package: GPTQModel's CPU torch kernel.

GPTQModel (pinned in the Makefile's ``bench-gptq-compat`` target: gptqmodel 7.7.0 on torch
2.13.0+cpu) reads a GPTQ "v1" checkpoint the way its loader does
(gptqmodel/models/loader.py: FORMAT.GPTQ -> ``convert_gptq_v1_to_v2_format``): each layer's
``TorchLinear`` (gptqmodel/nn_modules/qlinear/torch.py) gets qweight, qzeros, scales and g_idx,
``convert_gptq_v1_to_v2_format_module`` (gptqmodel/utils/model.py) adds 0x11111111 to every qzeros
word, and ``dequantize_weight()`` computes ``scales[g_idx] * (weight - zeros[g_idx])`` in float16.
Its result must equal ours (``_gptq.dequantize_gptq``: the exact product rounded once to float16,
what vLLM's exllama reconstruction computes with ``__hmul2``) bit for bit, for every layer of the
repacked tiny NVFP4 model and for random layers at every group size. Its config parser
(``QuantizeConfig.from_quant_config``) must read our quantization_config as 4-bit, our group
size, asymmetric, in order, format GPTQ (v1).

The whole-model loader ``GPTQModel.load`` is not used: it refuses every ``sym: false`` v1
checkpoint not produced by GPTQModel >= 0.9.0 (loader.py, "Loading of a sym=False model with
format=FORMAT.GPTQ is only supported if produced by gptqmodel version >= 0.9.0"), because old
AutoGPTQ packers stored a zero of 0 as -1. Ours stores 0 .. 14 only (effective zeros 1 .. 15; see
_gptq.ZERO_MAX), which the last test shows is the range on which GPTQModel's word-wise + 1 and
vLLM's nibble-wise + 1 agree.

Without torch and gptqmodel (the collection's own .venv has neither) the module is skipped with the
reason; with LABFLEET_GPTQ_COMPAT=1 (set by ``make bench-gptq-compat``) a failing import is an error
instead, so that target cannot pass by skipping.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib
import json
import os
import subprocess
import sys

import pytest

_INSTALL_HINT = ("`make compat` (a stage of make test) installs torch==2.13.0+cpu and gptqmodel==7.7.0 into its "
                 "own venv and runs this file there")
if os.environ.get("LABFLEET_GPTQ_COMPAT") == "1":
    import torch  # a broken install must fail here, not skip
    importlib.import_module("gptqmodel")
else:
    torch = pytest.importorskip("torch", reason="torch is not installed in this environment; %s" % _INSTALL_HINT,
                                exc_type=ImportError)
    pytest.importorskip("gptqmodel", reason="gptqmodel is not installed (or does not import) in this environment; %s"
                        % _INSTALL_HINT, exc_type=ImportError)

import numpy as np  # noqa: E402
from gptqmodel.nn_modules.qlinear.torch import TorchLinear  # noqa: E402
from gptqmodel.quantization import FORMAT, QuantizeConfig  # noqa: E402
from gptqmodel.utils.model import convert_gptq_v1_to_v2_format_module  # noqa: E402

from ansible_collections.labfleet.vllm.plugins.module_utils.converters import _gptq  # noqa: E402
from ansible_collections.labfleet.vllm.plugins.module_utils.formats import _nvfp4  # noqa: E402

MAKE_MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "fake_model", "make_model.py")
PARTS = ("qweight", "qzeros", "scales", "g_idx")


def gptqmodel_dequantize(arrays, group):
    """float16 [K, N] from GPTQModel's TorchLinear, fed a v1 layer as its loader feeds it."""
    k, n = arrays["qweight"].shape[0] * 8, arrays["qweight"].shape[1]
    layer = TorchLinear(bits=4, group_size=group, sym=False, desc_act=False, in_features=k, out_features=n, bias=False)
    for part in PARTS:
        getattr(layer, part).copy_(torch.from_numpy(np.ascontiguousarray(arrays[part])))
    convert_gptq_v1_to_v2_format_module(layer, bits=4, pack_dtype=torch.int32)
    layer.eval()
    with torch.no_grad():
        return layer.dequantize_weight().numpy()


def same_bits(ours_nk, theirs_kn):
    return ours_nk.shape == theirs_kn.T.shape and (ours_nk.view(np.uint16) == theirs_kn.T.view(np.uint16)).all()


def read_layers(path):
    with open(os.path.join(path, "model.safetensors.index.json")) as handle:
        weight_map = json.load(handle)["weight_map"]
    headers = dict((shard, _nvfp4.read_header(os.path.join(path, shard))) for shard in set(weight_map.values()))
    layers = {}
    for name, shard in weight_map.items():
        prefix, part = name.rsplit(".", 1)
        if part in PARTS:
            layers.setdefault(prefix, {})[part] = np.array(_nvfp4.load_tensor(headers[shard], name))
    return layers


@pytest.fixture(scope="module")
def repacked(tmp_path_factory):
    root = tmp_path_factory.mktemp("gptqmodel_compat")
    src, dest = str(root / "src"), str(root / "gptq")
    proc = subprocess.run([sys.executable, MAKE_MODEL, src, "--preset", "tiny-llama", "--nvfp4", "modelopt"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout
    result = _gptq.repack_checkpoint(src, dest, group_size=32)
    return dest, result


def test_every_layer_of_the_tiny_model_bit_for_bit(repacked):
    dest, result = repacked
    layers = read_layers(dest)
    assert len(layers) == result["tensors_repacked"] == 14
    for prefix, arrays in sorted(layers.items()):
        ours = _gptq.dequantize_gptq(arrays["qweight"], arrays["qzeros"], arrays["scales"], arrays["g_idx"])
        theirs = gptqmodel_dequantize(arrays, 32)
        assert theirs.dtype == np.float16
        assert same_bits(ours, theirs), prefix


def test_our_quantization_config_as_gptqmodel_reads_it(repacked):
    dest = repacked[0]
    with open(os.path.join(dest, "config.json")) as handle:
        qc = json.load(handle)["quantization_config"]
    parsed = QuantizeConfig.from_quant_config(qc)
    assert (parsed.bits, parsed.group_size, parsed.sym, parsed.desc_act) == (4, 32, False, False)
    assert parsed.format == FORMAT.GPTQ


@pytest.mark.parametrize("group", _gptq.GROUP_SIZES)
def test_random_layers_at_every_group_size(group):
    rng = np.random.RandomState(group)
    packed = rng.randint(0, 256, size=(24, 128)).astype(np.uint8)        # [N=24, K=256]
    scale = rng.randint(0x28, 0x50, size=(24, 16)).astype(np.uint8)
    arrays, _stats = _gptq.repack_layer(packed, scale, np.float32(3e-3), False, group)
    assert int(_gptq.unpack_qzeros(arrays["qzeros"]).max()) <= 14
    ours = _gptq.dequantize_gptq(arrays["qweight"], arrays["qzeros"], arrays["scales"], arrays["g_idx"])
    assert same_bits(ours, gptqmodel_dequantize(arrays, group))


def test_a_stored_zero_of_15_is_read_differently_so_we_never_write_it():
    codes = np.tile(np.arange(16, dtype=np.uint8), 2).reshape(32, 1).repeat(8, axis=1)       # K=32, N=8
    stored = np.array([[15, 3, 3, 3, 3, 3, 3, 3], [14, 0, 0, 0, 0, 0, 0, 0]], dtype=np.uint8)     # 2 groups of 16
    arrays = {"qweight": _gptq.pack_qweight(codes), "qzeros": _gptq.pack_qzeros(stored),
              "scales": np.ones((2, 8), dtype=np.float16), "g_idx": (np.arange(32) // 16).astype(np.int32)}
    theirs = gptqmodel_dequantize(arrays, 16).T.astype(np.float64)             # [N, K]
    vllm = _gptq.dequantize_gptq(arrays["qweight"], arrays["qzeros"], arrays["scales"]).astype(np.float64)
    # group 1 (stored 14, 0): both read zero 15 and 1
    assert (theirs[:, 16:] == vllm[:, 16:]).all()
    # group 0: vLLM reads 15 + 1 = 16 for output 0 and 4 for the others; GPTQModel's + 0x11111111 carries
    assert (vllm[0, :16] == np.arange(16) - 16).all() and (vllm[1, :16] == np.arange(16) - 4).all()
    assert (theirs[0, :16] != vllm[0, :16]).any() and (theirs[1, :16] != vllm[1, :16]).any()
