#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: model_facts
short_description: Read a model directory's config, quantization and safetensors headers
version_added: 0.1.0
description:
  - Reads a Hugging Face style model directory the way vLLM will load it, without loading it, and
    reports what the deployment gate (M(labfleet.vllm.deploy_gate)) needs.
  - C(config.json) gives the architecture (C(model_type), hidden size, layers, attention and
    key/value heads, head dimension, context length, C(torch_dtype)); multimodal configs are read
    from their nested C(text_config).
  - The quantization description is read wherever it lives (C(config.json) C(quantization_config),
    ModelOpt's C(hf_quant_config.json), C(quant_config.json) or C(quantize_config.json)) and
    normalised to a vLLM C(--quantization) method name.
  - Only the JSON header of each C(*.safetensors) file is read (and C(model.safetensors.index.json)
    when present), never the tensor data, to compute the exact weight bytes and parameter count.
  - Also reports the free disk space of the filesystem holding the model, and warns when the directory
    or a file in it is world-writable or owned by a user other than root and the one running the module.
  - A missing or malformed file fails the task with a message naming the file and what is wrong. So does
    a file that is not a regular file (a FIFO, a device, a directory; symbolic links are followed only to
    regular files), a JSON file above 16 MB (64 MB for C(model.safetensors.index.json)), JSON nested
    deeper than Python's reader allows, and a C(config.json) number outside the range real models use
    (for example C(num_hidden_layers) from 1 to 4096); the message names the field and the range.
author:
  - labfleet maintainers (@labfleet)
options:
  path:
    description:
      - The model directory (the one holding C(config.json) and the weights).
    type: path
    required: true
  min_free_disk_gb:
    description:
      - Free space (in GB, 10^9 bytes) wanted on the model's filesystem for temporary files, logs
        and outputs. Less gives a warning, not a failure.
      - A finite number from 0 to 1000000 (1 PB); NaN, infinities and negative values fail the task.
    type: float
    default: 100
  missing:
    description:
      - What a O(path) that does not exist, or is not a directory, does.
      - V(fail) fails the task with a message naming the path.
      - V(report) returns C(present=false) and an empty C(model) instead, and the caller judges it (the
        preflight does, and the deployment gate refuses a host without its model or plans the model's
        staging). It saves the caller a M(ansible.builtin.stat) of the directory first, a module call
        per host.
      - A directory that exists but holds a missing or malformed file fails the task either way.
    type: str
    choices: [fail, report]
    default: fail
extends_documentation_fragment:
  - labfleet.vllm.attributes
  - labfleet.vllm.attributes.read_only
attributes:
  platform:
    description: Runs on the host that holds the model directory.
notes:
  - C(param_count) counts the elements the files store (a uint8 holding two 4-bit values counts
    once; scales and zero points count). C(param_count_logical) estimates the model's parameters
    (packed 4-bit containers unpacked, quantization scales and zero points left out) and is null
    when the bit width is not declared. C(model.gate.param_count) is the logical estimate when
    there is one, else C(param_count).
seealso:
  - module: labfleet.vllm.vllm_image_facts
  - module: labfleet.vllm.deploy_gate
"""

EXAMPLES = r"""
- name: Read the model directory
  labfleet.vllm.model_facts:
    path: /data/model
  register: __vllm_model

- name: Feed the gate
  labfleet.vllm.deploy_gate:
    model: "{{ __vllm_model.model.gate }}"
    # ... gpus, driver_version, image, vllm
  register: __vllm_verdict

- name: Read the model if the host has it (no model directory is not a failure)
  labfleet.vllm.model_facts:
    path: /data/model
    missing: report
  register: __vllm_model

- name: Want more headroom on the model disk
  labfleet.vllm.model_facts:
    path: /data/model
    min_free_disk_gb: 200
"""

RETURN = r"""
present:
  description: Whether O(path) is a directory. False only with O(missing=report), and C(model) is then empty.
  returned: success
  type: bool
  sample: true
model:
  description: What the model directory holds (empty when C(present) is false).
  returned: success
  type: dict
  contains:
    path:
      description: The directory read.
      type: str
      sample: /data/model
    model_type:
      description: C(model_type) of C(config.json).
      type: str
      sample: llama
    architectures:
      description: C(architectures) of C(config.json).
      type: list
      elements: str
      sample: [LlamaForCausalLM]
    hidden_size:
      description: Hidden size.
      type: int
      sample: 8192
    num_hidden_layers:
      description: Transformer layers.
      type: int
      sample: 80
    num_attention_heads:
      description: Attention heads.
      type: int
      sample: 64
    num_key_value_heads:
      description: Key/value heads (defaults to the attention heads).
      type: int
      sample: 8
    head_dim:
      description: Head dimension (defaults to hidden_size / num_attention_heads).
      type: int
      sample: 128
    max_position_embeddings:
      description: Context length the model declares.
      type: int
      sample: 131072
    torch_dtype:
      description: Unquantized dtype (C(config.json), else the dominant float dtype of the weights).
      type: str
      sample: bfloat16
    vocab_size:
      description: Vocabulary size.
      type: int
      sample: 128256
    intermediate_size:
      description: The MLP's intermediate size (vLLM splits it across tensor-parallel GPUs).
      type: int
      sample: 28672
    model_max_length:
      description: C(model_max_length) of C(config.json) (Command-R style context key); null when absent.
      type: int
    rope_scaling:
      description: C(rope_scaling) of C(config.json) (or C(rope_parameters)) as declared; null when absent.
      type: dict
      sample: {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}
    sliding_window:
      description: C(sliding_window) of C(config.json) (an int, a per-layer list, or null).
      type: raw
      sample: 4096
    use_sliding_window:
      description: C(use_sliding_window) of C(config.json) (Qwen2 style switch); null when absent.
      type: bool
    text_config_used:
      description: Whether the architecture numbers came from a nested C(text_config).
      type: bool
    quantized:
      description: Whether a quantization description was found.
      type: bool
    quant_method:
      description: vLLM C(--quantization) name (null when unquantized; the raw name, lowercased,
        when no vLLM release knows it).
      type: str
      sample: modelopt_fp4
    quant_method_aliases:
      description: Names vLLM releases used for the same loader (C(nvfp4) in 0.8.5 is
        C(modelopt_fp4) later).
      type: list
      elements: str
    quant_method_known:
      description: Whether some vLLM release accepts C(quant_method).
      type: bool
    quant_source:
      description: Where the description was found.
      type: str
      sample: quant_config.json
    quant_source_read_by_vllm:
      description: Whether vLLM reads the description from that place for that method (null when
        this probe cannot tell).
      type: bool
    quant_format:
      description: Weight format (C(nvfp4), C(fp8), C(int4), ...).
      type: str
    quant_bits:
      description: Bits per quantized weight.
      type: int
    quant_group_size:
      description: Block or group size.
      type: raw
    quant_scale_bits:
      description: Bits per block scale, where declared.
      type: int
    quant_scheme:
      description: compressed-tensors scheme (C(wna16), C(w8a8_int8), C(w8a8_fp8), C(nvfp4), ...).
      type: str
    quant_sym:
      description:
        - GPTQ/AWQ (and their Marlin variants, moe_wna16) - C(sym) of config.json's C(quantization_config),
          where vLLM's Marlin conversion reads it (C(GPTQMarlinConfig.is_gptq_marlin_compatible) - C(true) is
          needed). Null when the key is absent there or the description is in another file.
      type: bool
    quant_desc_act:
      description:
        - GPTQ - C(desc_act) of config.json's C(quantization_config) (act-order); vLLM converts to C(gptq_marlin)
          only when it is declared. Null when absent there or the description is in another file.
      type: bool
    quant_zero_point:
      description:
        - AWQ - C(zero_point) of config.json's C(quantization_config); vLLM converts to C(awq_marlin) only
          when it is C(true). Null when absent there or the description is in another file.
      type: bool
    weight_bytes:
      description: Exact tensor bytes of the weights vLLM loads (sum of the safetensors data spans).
      type: int
      sample: 19327352832
    weight_file_bytes:
      description: Size of the weight files on disk (headers included).
      type: int
    weight_files:
      description: Per file - name, file_bytes, data_bytes, tensors.
      type: list
      elements: dict
    weight_index:
      description: C(model.safetensors.index.json) when the weights are sharded, else null.
      type: str
    tensor_count:
      description: Number of tensors.
      type: int
    dtypes:
      description: safetensors dtypes seen.
      type: list
      elements: str
      sample: [BF16, F32, F8_E4M3, U8]
    dtype_bytes:
      description: Tensor bytes per dtype.
      type: dict
    param_count:
      description: Stored elements of all tensors, from their shapes.
      type: int
    param_count_logical:
      description: Estimated model parameters (packed containers unpacked, quantization auxiliaries
        left out); null when it cannot be done honestly.
      type: int
    param_count_method:
      description: How C(param_count_logical) was obtained (C(stored), C(unpacked),
        C(stored_without_aux), C(unknown)).
      type: str
    fp16_weight_bytes:
      description: C(param_count_logical) x 2, the size after dequantizing to fp16.
      type: int
    nvfp4_linear_shapes:
      description:
        - "The NVFP4 linear weights of an NVFP4 checkpoint, counted per shape (C(out_features),
          C(in_features), C(count)): a packed uint8 C(weight) (ModelOpt) or C(weight_packed)
          (compressed-tensors) [out, in/2] with its float8_e4m3 block scale [out, in/16]. Null for
          other checkpoints."
        - The deployment gate sizes the GPTQ int4 copy (serving path V(gptq_repack)) from it.
      type: list
      elements: dict
    nvfp4_other_bytes:
      description: What an NVFP4 checkpoint's converted copy keeps besides those weights (embeddings,
        norms, an unquantized lm_head; float tensors as float16, quantization scales left out); null
        for other checkpoints.
      type: int
    gptq_repack_bytes:
      description: The size of the GPTQ int4 copy M(labfleet.vllm.nvfp4_repack) writes, per group size
        (C(group_size), C(bytes)); null for checkpoints that are not NVFP4.
      type: list
      elements: dict
    disk_free_bytes:
      description: Bytes available to unprivileged users on the model's filesystem.
      type: int
    disk_total_bytes:
      description: Size of that filesystem.
      type: int
    disk_free_gb:
      description: C(disk_free_bytes) in GB (10^9 bytes).
      type: float
    disk_free_ok:
      description: Whether C(disk_free_gb) reaches O(min_free_disk_gb).
      type: bool
    has_tokenizer:
      description: Whether a tokenizer file is present.
      type: bool
    has_generation_config:
      description: Whether C(generation_config.json) is present.
      type: bool
    world_writable:
      description:
        - The model directory and the regular files in it that any local user may write (mode o+w);
          empty when none. Each gives a warning that says to run C(chmod -R o-w) on the directory.
      type: list
      elements: str
      sample: ["/data/model", "/data/model/config.json"]
    foreign_owned:
      description:
        - The model directory and the regular files in it owned by a user who is neither root nor the
          user running the module; empty when none. Each gives a warning.
      type: list
      elements: str
      sample: []
    notes:
      description: Observations that are not failures (also issued as warnings).
      type: list
      elements: str
    gate:
      description: Exactly the keys the C(model) option of M(labfleet.vllm.deploy_gate) takes
        (weight_bytes, param_count, quant_method, quant_scheme, quant_bits, quant_group_size,
        quant_sym, quant_desc_act, quant_zero_point, num_hidden_layers, num_key_value_heads, head_dim, max_position_embeddings, torch_dtype, and
        for vLLM's startup checks hidden_size, num_attention_heads, intermediate_size, vocab_size,
        model_type, architectures, rope_scaling, sliding_window, use_sliding_window, model_max_length,
        text_config_used, and for the NVFP4 serving paths fp16_weight_bytes, nvfp4_linear_shapes and
        nvfp4_other_bytes).
      type: dict
"""

import math

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.labfleet.vllm.plugins.module_utils.probes._model import (
    ModelDirMissing,
    ModelFileError,
    read_model_dir,
)


# 1 PB: more is no disk a model host has (a typo or a unit mix-up, bytes for GB).
MAX_MIN_FREE_DISK_GB = 1000000


ARGUMENT_SPEC = dict(
    path=dict(type="path", required=True),
    min_free_disk_gb=dict(type="float", default=100),
    missing=dict(type="str", choices=["fail", "report"], default="fail"),
)


def _bad_minimum(value):
    return ("min_free_disk_gb must be a finite number of GB from 0 to %d, got %s; set it to the free space the "
            "host needs, e.g. 100" % (MAX_MIN_FREE_DISK_GB, value))


def main():
    try:
        module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    except OverflowError:
        # ansible-core converts a float option with float(), which raises OverflowError (not the
        # TypeError it reports) for an integer beyond the float range: read it raw to say so.
        module = AnsibleModule(argument_spec=dict(ARGUMENT_SPEC, min_free_disk_gb=dict(type="raw")),
                               supports_check_mode=True)
        raw = module.params["min_free_disk_gb"]
        module.fail_json(msg=_bad_minimum("an integer of %d digits" % len(str(abs(raw))) if isinstance(raw, int)
                                          else repr(raw)[:80]))
    path = module.params["path"]
    minimum = module.params["min_free_disk_gb"]
    if not math.isfinite(minimum) or not 0 <= minimum <= MAX_MIN_FREE_DISK_GB:
        module.fail_json(msg=_bad_minimum(minimum))
    try:
        model = read_model_dir(path)
    except ModelFileError as exc:
        if isinstance(exc, ModelDirMissing) and module.params["missing"] == "report":
            module.exit_json(changed=False, present=False, model={})
        module.fail_json(msg="model_facts: %s" % exc, file=exc.path, problem=exc.problem)
    except Exception as exc:  # pylint: disable=broad-except
        module.fail_json(msg="model_facts: unexpected error reading %s: %s: %s" % (path, type(exc).__name__, exc))

    model["disk_free_gb"] = round(model["disk_free_bytes"] / 1e9, 2)
    model["disk_free_ok"] = model["disk_free_gb"] >= minimum
    if not model["disk_free_ok"]:
        module.warn("only %.1f GB free on the filesystem holding %s; keep at least %g GB free for temporary files, "
                    "logs and outputs (set min_free_disk_gb to change the threshold)"
                    % (model["disk_free_gb"], path, minimum))
    for note in model["notes"]:
        module.warn(note)
    module.exit_json(changed=False, present=True, model=model)


if __name__ == "__main__":
    main()
