#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvfp4_repack
short_description: Repack an NVFP4 checkpoint into a GPTQ int4 one for vLLM's gptq kernels, once, on the host
version_added: 0.1.0
description:
  - Reads an NVFP4 checkpoint directory (ModelOpt or compressed-tensors layout) tensor by tensor
    and writes a GPTQ 4-bit copy that vLLM serves with C(--quantization gptq) on GPUs without FP4
    kernels (the C(gptq) method needs compute capability 6.0, so Volta serves it). The copy keeps
    about 4.2 to 4.6 bits per weight (group size 128 to 32) instead of the 16 of an FP16 copy.
  - Each NVFP4 weight is decoded exactly (E2M1 code times the float8_e4m3fn block scale and the
    per-tensor scale, in float32, the arithmetic of M(labfleet.vllm.nvfp4_dequantize)); per group of
    O(group_size) inputs a scale and a zero point are chosen to minimise the squared error against
    those values (a least-squares search over steps of the E2M1 lattice, never worse than plain
    min/max).
  - The output is the layout of vLLM 0.8.5's C(gptq) loader - C(qweight) int32 [in/8, out],
    C(qzeros) int32 [in/group, out/8] (stored zero = zero - 1, GPTQ v1), C(scales) float16,
    C(g_idx) int32 - and a C(quantization_config) in C(config.json) with C(quant_method=gptq),
    C(bits=4), the C(group_size), C(desc_act=false), C(sym=false) and C(checkpoint_format=gptq).
    The LM head and the layers that were not NVFP4 are written as float16; tokenizer and generation
    files are copied.
  - The output is written to a temporary directory next to O(dest) and renamed into place only
    when complete; a manifest (C(nvfp4_repack_manifest.json)) records the size and SHA-256 of every
    input, the settings and the measured error, so running again with the same inputs and settings
    changes nothing. The free space on O(dest)'s filesystem is checked before anything is written.
author:
  - labfleet maintainers (@labfleet)
extends_documentation_fragment:
  - labfleet.vllm.nvfp4_checkpoint
  - labfleet.vllm.attributes
options:
  dest:
    description:
      - The GPTQ output directory. It must not exist, be empty, or hold an earlier output of this
        module (which is replaced when the inputs or settings changed). Its parent directory must
        exist. A directory holding an FP16 copy of M(labfleet.vllm.nvfp4_dequantize) is refused.
    type: path
    required: true
  group_size:
    description:
      - Inputs sharing one scale and zero point. Smaller groups are more accurate and larger (32
        about 4.6 bits per weight, 64 about 4.3, 128 about 4.2). Every linear layer's input
        features must be a multiple of it (vLLM's loader refuses partial groups, also per GPU under
        tensor parallelism).
      - Group size 16 (one NVFP4 block, the most accurate) is not offered, because vLLM's gptq
        (exllama) 4-bit kernels move to the next group only every 32 input rows, so vLLM would serve
        a group-16 copy with wrong weights and no error.
    type: int
    choices: [32, 64, 128]
    default: 32
attributes:
  check_mode:
    description: Reports the layout, the layers, the output size, the bits per weight and whether a conversion would run; writes nothing.
notes:
  - The same conversion is available outside Ansible as C(python scripts/nvfp4_repack.py SRC DEST --group-size 32).
  - A checkpoint with a linear layer that is not NVFP4 is refused (vLLM's gptq loader would look
    for its C(qweight)); a layer whose shape the loader refuses (outputs not a multiple of 8, inputs
    not a multiple of O(group_size)) is refused naming it.
  - The error figures are measured against the exact NVFP4 values, not against the original
    weights, which the NVFP4 checkpoint no longer holds (docs/nvfp4.md, "Repacking to GPTQ").
seealso:
  - module: labfleet.vllm.nvfp4_dequantize
  - module: labfleet.vllm.deploy_gate
"""

EXAMPLES = r"""
- name: Repack the NVFP4 checkpoint for V100 hosts (GPTQ int4, group size 32)
  labfleet.vllm.nvfp4_repack:
    src: /data/models/Llama-3.3-70B-Instruct-FP4
    dest: /data/models/Llama-3.3-70B-Instruct-FP4-gptq32
    group_size: 32
  register: __vllm_gptq

- name: Show what the copy costs in accuracy
  ansible.builtin.debug:
    msg: "{{ __vllm_gptq.bits_per_weight }} bits/weight, relative RMS error {{ __vllm_gptq.error.rel_rms }}"

- name: Plan only (no writing)
  labfleet.vllm.nvfp4_repack:
    src: /data/models/model-nvfp4
    dest: /data/models/model-gptq16
    group_size: 16
    layout: compressed_tensors
  check_mode: true
"""

RETURN = r"""
dest:
  description: The output directory (absolute).
  returned: success
  type: str
  sample: /data/models/Llama-3.3-70B-Instruct-FP4-gptq32
group_size:
  description: The group size written.
  returned: success
  type: int
  sample: 32
layout:
  description: The NVFP4 layout read.
  returned: success
  type: str
  sample: modelopt
tensors_repacked:
  description: NVFP4 linear layers written as GPTQ (qweight, qzeros, scales, g_idx each).
  returned: success
  type: int
  sample: 560
tensors_dequantized:
  description: NVFP4 layers written as float16 instead (the LM head; vLLM's gptq config leaves it unquantized).
  returned: success
  type: int
  sample: 0
tensors_copied:
  description: Other tensors written (float ones cast to float16, integer ones unchanged).
  returned: success
  type: int
  sample: 163
tensors_dropped:
  description: Input tensors neither written nor used (activation and KV-cache scales).
  returned: success
  type: int
  sample: 560
repacked_weights:
  description: Weights in the repacked layers.
  returned: success
  type: int
  sample: 68451041280
bits_per_weight:
  description: Bits per weight of the repacked layers (codes, float16 scales, zero points and g_idx).
  returned: success
  type: float
  sample: 4.628
output_bytes:
  description: Bytes the output takes (tensors, headers and copied files).
  returned: success
  type: int
  sample: 43800000000
shards:
  description: Output shard file names.
  returned: success
  type: list
  elements: str
  sample: [model-00001-of-00009.safetensors]
manifest:
  description: Path of the manifest that makes a re-run a no-op.
  returned: success
  type: str
  sample: /data/models/Llama-3.3-70B-Instruct-FP4-gptq32/nvfp4_repack_manifest.json
quantization_config:
  description: The quantization_config written to config.json.
  returned: success
  type: dict
  sample: {quant_method: gptq, bits: 4, group_size: 32, desc_act: false, sym: false, lm_head: false, checkpoint_format: gptq}
tensor_parallel_sizes:
  description: Tensor-parallel sizes (of 1, 2, 4, 8) at which vLLM's gptq loader accepts every repacked layer.
  returned: success
  type: list
  elements: int
  sample: [1, 2, 4, 8]
error:
  description:
    - Error of the repacked weights against the exact NVFP4 values, over all repacked layers.
    - C(rel_rms) is sqrt(sum of squared errors / sum of squared NVFP4 values); C(max_abs) the
      largest absolute error; C(max_abs_rel) that divided by the largest NVFP4 value; C(worst_tensor)
      the layer with the largest relative RMS error and its figures.
  returned: when this run converted, or from the manifest of a finished copy
  type: dict
  sample: {rel_rms: 0.0756, max_abs: 0.0104, max_abs_rel: 0.093, method: search,
           worst_tensor: {tensor: model.layers.0.self_attn.q_proj, rel_rms: 0.0758, max_abs: 0.0104, max_abs_rel: 0.093}}
files_copied:
  description: Tokenizer, generation and other side files copied unchanged.
  returned: success
  type: list
  elements: str
  sample: [generation_config.json, tokenizer.json, tokenizer_config.json]
files_skipped:
  description: Files of O(src) not copied (quantization descriptions, other weight formats ...).
  returned: success
  type: list
  elements: str
  sample: [hf_quant_config.json]
disk_free_bytes:
  description: Free bytes found on O(dest)'s filesystem (absent when nothing had to be converted).
  returned: when a conversion was needed
  type: int
  sample: 500000000000
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.labfleet.vllm.plugins.module_utils.converters import _gptq
from ansible_collections.labfleet.vllm.plugins.module_utils.formats import _nvfp4


def main():
    module = AnsibleModule(
        argument_spec=_nvfp4.argument_spec(group_size=dict(type="int", default=32, choices=list(_gptq.VLLM_GROUP_SIZES))),
        supports_check_mode=True,
    )
    params = module.params
    _nvfp4.run_module(module, "nvfp4_repack", lambda: _gptq.repack_checkpoint(
        params["src"], params["dest"], group_size=params["group_size"], layout=params["layout"],
        max_shard_size=params["max_shard_size"], check_mode=module.check_mode, verify=params["verify"]))


if __name__ == "__main__":
    main()
