#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvfp4_dequantize
short_description: Convert an NVFP4 checkpoint to an FP16 one, once, on the host
version_added: 0.1.0
description:
  - Reads an NVFP4 checkpoint directory (ModelOpt or compressed-tensors layout) tensor by tensor
    and writes an FP16 copy that vLLM serves without C(--quantization), for GPUs without FP4
    kernels (Volta, Turing). The FP16 copy takes about 4 times the space of the packed weights.
  - Each FP4 E2M1 element is multiplied by its float8_e4m3fn block scale and the per-tensor scale
    in float32 (ModelOpt multiplies by C(weight_scale_2), compressed-tensors divides by
    C(weight_global_scale)) and cast once to float16, round to nearest even.
  - Other float tensors in bfloat16 or float32 are cast to float16; integer buffers and float16
    tensors are copied unchanged; activation and KV-cache scales of the quantized layers are dropped.
  - The output (sharded safetensors, C(model.safetensors.index.json), C(config.json) without
    C(quantization_config) and with C(torch_dtype=float16), tokenizer and generation files) is
    written to a temporary directory next to O(dest) and renamed into place only when complete.
  - A manifest in O(dest) records the size and SHA-256 of every input file; running again on a
    finished O(dest) with the same inputs changes nothing.
  - The free space on O(dest)'s filesystem is checked before anything is written.
author:
  - labfleet maintainers (@labfleet)
extends_documentation_fragment:
  - labfleet.vllm.nvfp4_checkpoint
  - labfleet.vllm.attributes
options:
  dest:
    description:
      - The FP16 output directory. It must not exist, be empty, or hold an earlier output of this
        module (which is replaced when the inputs changed). Its parent directory must exist.
    type: path
    required: true
attributes:
  check_mode:
    description: Reports the layout, the tensors, the output size and whether a conversion would run; writes nothing.
notes:
  - The same conversion is available outside Ansible as C(python scripts/nvfp4_dequantize.py SRC DEST).
  - Only NVFP4 layers are converted; a checkpoint with other float8 layers is refused.
seealso:
  - module: labfleet.vllm.model_facts
  - module: labfleet.vllm.deploy_gate
"""

EXAMPLES = r"""
- name: Convert the NVFP4 checkpoint to FP16 for a V100 host
  labfleet.vllm.nvfp4_dequantize:
    src: /data/models/Llama-3.1-8B-Instruct-FP4
    dest: /data/models/Llama-3.1-8B-Instruct-FP4-fp16
  register: __vllm_fp16

- name: Force the compressed-tensors layout and use 2 GB shards
  labfleet.vllm.nvfp4_dequantize:
    src: /data/models/model-nvfp4
    dest: /data/models/model-fp16
    layout: compressed_tensors
    max_shard_size: 2GB
"""

RETURN = r"""
layout:
  description: The layout converted.
  returned: success
  type: str
  sample: modelopt
tensors_dequantized:
  description: NVFP4 weights written as float16.
  returned: success
  type: int
  sample: 224
tensors_copied:
  description: Other tensors written (float ones cast to float16, integer ones unchanged).
  returned: success
  type: int
  sample: 67
tensors_dropped:
  description: Input tensors neither written nor used (activation scales of the quantized layers, KV-cache scales).
  returned: success
  type: int
  sample: 224
output_bytes:
  description: Bytes the output takes (tensors, headers and copied files).
  returned: success
  type: int
  sample: 16060522496
shards:
  description: Output shard file names.
  returned: success
  type: list
  elements: str
  sample: [model-00001-of-00004.safetensors]
manifest:
  description: Path of the manifest that makes a re-run a no-op.
  returned: success
  type: str
  sample: /data/models/model-fp16/nvfp4_dequantize_manifest.json
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

from ansible_collections.labfleet.vllm.plugins.module_utils.formats import _nvfp4


def main():
    module = AnsibleModule(argument_spec=_nvfp4.argument_spec(), supports_check_mode=True)
    params = module.params
    _nvfp4.run_module(module, "nvfp4_dequantize", lambda: _nvfp4.convert_checkpoint(
        params["src"], params["dest"], layout=params["layout"], max_shard_size=params["max_shard_size"],
        check_mode=module.check_mode, verify=params["verify"]))


if __name__ == "__main__":
    main()
