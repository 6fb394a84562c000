# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """What the NVFP4 checkpoint converters (nvfp4_dequantize, nvfp4_repack) share: the checkpoint they
    read, its layout, the output's shard size, numpy, and where they run."""

    DOCUMENTATION = r"""
requirements:
  - numpy (C(python3-numpy) or C(pip install numpy)) on the host that runs the conversion.
options:
  src:
    description:
      - The NVFP4 checkpoint directory (holding C(config.json) and the C(*.safetensors) files).
    type: path
    required: true
  layout:
    description:
      - The checkpoint layout. V(auto) reads C(hf_quant_config.json), C(config.json)'s
        C(quantization_config) or C(quant_config.json) (the last matched by tensor names).
      - V(modelopt) is C(<layer>.weight) (uint8) + C(weight_scale) + C(weight_scale_2).
      - V(compressed_tensors) is C(<layer>.weight_packed) + C(weight_scale) + C(weight_global_scale).
    type: str
    choices: [auto, modelopt, compressed_tensors]
    default: auto
  max_shard_size:
    description:
      - Largest output shard, as bytes or with a unit (V(5GB) = 5*10^9 bytes; V(MiB), V(GiB) are
        binary). A tensor (for M(labfleet.vllm.nvfp4_repack), the tensors of one repacked layer together)
        larger than this gets a shard of its own.
    type: str
    default: 5GB
  verify:
    description:
      - How a re-run checks that a finished copy in O(dest) was made from the inputs in O(src) as they are now.
      - V(quick) compares each input's size and modification time with those the copy's manifest recorded when
        the input was hashed (a C(stat) per file); an input that differs is hashed again.
      - V(full) hashes every input again (minutes for a checkpoint of tens of GB).
      - A manifest made before this option recorded no modification times; its inputs are hashed either way.
    type: str
    choices: [quick, full]
    default: quick
attributes:
  platform:
    description: Runs on the host that holds the checkpoint.
"""
