#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: deploy_gate
short_description: Decide whether a vLLM deployment can work on a host, and say why not
version_added: 0.1.0
description:
  - A pure decision with no side effects. From the host's GPUs and driver (as reported by
    M(labfleet.vllm.gpu_facts)), the image (M(labfleet.vllm.vllm_image_facts) or a shipped image
    profile), the model (M(labfleet.vllm.model_facts)) and the requested vLLM arguments, the module
    returns one plan object, C(verdict) - whether it can (C(allowed)), the C(reasons) for a refusal and
    the C(warnings), each with a message that says what to change, the vLLM arguments after automatic
    fixes (C(effective_vllm)), a memory plan (C(plan)) and what the rollout will do (C(steps), C(instances)).
  - The compatibility policy ships with the collection as Python data in module_utils (so it travels
    with the module to any host) and has a source for every entry. The O(policy) option overrides
    or extends it.
  - "With O(request) the verdict is a plan of the host's target state: the gate judges the driver the
    M(labfleet.vllm.nvidia_driver) role will install, keep or replace (not only the installed one), the
    image the rollout will pull, and every instance's own arguments, and returns per step (C(driver),
    C(runtime), C(image), C(model), C(server)) what will happen and why, and per instance the effective vLLM
    arguments (C(enforce_eager) included) and the argv the server's unit runs. Without O(request) the
    installed driver is judged as it is, as before."
  - The module never fails for a "no" verdict; it fails only when an input is malformed, and then
    the message names the field and what is expected.
  - Extra keys in the O(gpus) entries and in O(image), O(model) and O(vllm) are ignored, so the
    probes' results can be passed straight in; extra keys of O(vllm) are passed through to
    C(effective_vllm).
  - "Reason codes (refusal): V(NO_GPU) no NVIDIA GPU on the host;
    V(GPU_LOST) a GPU fell off the bus (Xid 79, 'GPU is lost'): reboot, or plan on the healthy GPUs;
    V(COMPUTE_CAPABILITY_UNKNOWN) a GPU could not be identified (no compute capability);
    V(COMPUTE_CAPABILITY_TOO_LOW) a GPU is below vLLM's minimum compute capability (7.0; 7.5 from vLLM 0.20)
    or the policy's C(policy.min_compute_capability);
    V(HETEROGENEOUS_GPUS) GPUs of different compute capabilities on one host;
    V(MODEL_INCOMPLETE) a file of the model directory is missing or malformed (C(model.unreadable): a shard
    that C(model.safetensors.index.json) names, C(config.json), a safetensors header);
    V(DRIVER_LIBRARY_MISMATCH) the kernel module and the driver libraries differ (reboot needed);
    V(DRIVER_BRANCH_UNSUPPORTED_FOR_ARCH) the driver branch does not drive the GPU architecture
    (R590 and newer drop Maxwell, Pascal and Volta; R470 is the last for Kepler);
    V(DRIVER_BRANCH_NOT_ALLOWED) the branch is not in C(policy.allowed_driver_branches);
    V(DRIVER_TOO_OLD_FOR_IMAGE) the image's C(NVIDIA_REQUIRE_CUDA) rejects the driver, or the driver is
    below the image's CUDA minor-version-compatibility floor (525 for CUDA 12, 580 for CUDA 13) where only
    forward compatibility could run it and the GPU cannot use it (GeForce, TITAN: NVIDIA supports it on
    data-center GPUs only);
    V(IMAGE_LACKS_ARCH) the image has no kernels (SASS or PTX) for the GPU;
    V(PTX_NEWER_THAN_DRIVER) the GPU is reached only through PTX that the driver is too old to JIT-compile;
    V(DTYPE_UNSUPPORTED) the dtype or KV cache dtype needs a higher compute capability (bfloat16 needs 8.0)
    and auto-fix is off; V(KV_CACHE_DTYPE_UNSUPPORTED) the image's vLLM release does not accept the
    C(vllm.kv_cache_dtype) value (0.8.5 takes auto, fp8, fp8_e4m3, fp8_e5m2); V(QUANTIZATION_UNSUPPORTED_ON_ARCH) the quantization method needs a higher compute
    capability (AWQ 7.5, Marlin 7.5/8.0, FP8 7.5/8.0, NVFP4 7.5/10.0);
    V(QUANTIZATION_UNKNOWN_TO_IMAGE) the image's vLLM does not know the quantization method (or the
    checkpoint's compressed-tensors scheme); V(QUANTIZATION_MISMATCH) C(vllm.quantization) names another
    method than the checkpoint's (vLLM refuses it); V(QUANTIZATION_DTYPE_UNSUPPORTED) the method does not
    run with the serving dtype (GPTQ and AWQ need float16); V(QUANT_GROUP_SIZE_UNSUPPORTED) a GPTQ checkpoint's
    group size is not a multiple of 32, which vLLM's gptq (exllama) kernels compute wrong;
    V(INSUFFICIENT_VRAM) the weights per GPU, or the KV cache of one C(vllm.max_model_len) sequence, do not fit;
    V(TENSOR_PARALLEL_EXCEEDS_GPUS) tensor_parallel_size x pipeline_parallel_size exceeds the GPU count
    (of the instance, with O(request));
    V(DRIVER_CHANGE_NOT_ALLOWED) the request asks for another driver than the installed one without
    C(request.driver.allow_change); V(DRIVER_NOT_FROM_PACKAGES) a driver answers but no driver package is installed;
    V(DRIVER_KERNEL_MODULE_UNSUITABLE) C(request.driver.kernel_module) cannot drive the GPUs (or cannot be chosen);
    V(DRIVER_SOURCE_UNAVAILABLE) no source the nvidia_driver role uses ships the branch for the host's
    distribution; V(DRIVER_PACKAGES_UNREADABLE) the host's package manager could not list its packages;
    V(INSTANCE_GPUS_UNAVAILABLE) an instance names a GPU index the host lacks;
    V(FP16_FALLBACK_NOT_APPLICABLE) and V(GPTQ_REPACK_NOT_APPLICABLE) C(request.serving_path) is V(fp16_fallback)
    or V(gptq_repack) but the checkpoint is not NVFP4; V(INSUFFICIENT_DISK) the FP16 or GPTQ copy of an NVFP4
    checkpoint, or the model revision fetched from the model store (O(request) C(model_store)), does not fit on
    the filesystem it goes to; V(MODEL_STORE_UNREACHABLE) the host could not read the revision's manifest from the
    model store (no answer, a timeout, an HTTP error other than 404); V(MODEL_NOT_IN_STORE) the store answered 404:
    it has no such name or revision; V(MODEL_MANIFEST_INVALID) the store's manifest is not a
    C(labfleet.model-manifest/1) document for that name and revision;
    V(GPU_RUNTIME_BLOCKED) the host's NVIDIA container runtime would not start a C(--gpus) container at all
    (from O(host), see C(container_runtime) in the result)."
  - "Reason codes from vLLM's startup validation (docs/deploy_gate.md lists each check with its source
    lines): V(ATTENTION_HEADS_NOT_DIVISIBLE) num_attention_heads is not divisible by tensor_parallel_size;
    V(KV_HEADS_NOT_DIVISIBLE) num_key_value_heads and tensor_parallel_size do not divide one another;
    V(INTERMEDIATE_SIZE_NOT_DIVISIBLE) the MLP's intermediate_size is not divisible by tensor_parallel_size;
    V(QUANT_GROUP_SIZE_NOT_ALIGNED) a GPTQ/AWQ row-parallel layer's per-GPU input is not a multiple of the group
    size; V(QUANT_OUTPUT_NOT_ALIGNED) a GPTQ layer's per-GPU output is not a multiple of the values one int32
    packs (8 for 4-bit); V(MAX_MODEL_LEN_EXCEEDS_MODEL) max_model_len is above the context the model's config.json derives
    (max_position_embeddings with rope scaling); V(SLIDING_WINDOW_DISABLE_UNSUPPORTED) disable_sliding_window
    with a rope-scaled model (vLLM 0.8.5); V(PREFIX_CACHING_WITH_SLIDING_WINDOW) prefix caching on a
    sliding-window model in vLLM 0.8.5's V0 engine; V(MAX_NUM_BATCHED_TOKENS_TOO_SMALL) max_num_batched_tokens
    is below max_model_len (chunked prefill off) or below max_num_seqs; V(GPU_MEMORY_UTILIZATION_INVALID)
    gpu_memory_utilization is not in (0, 1]; V(CPU_OFFLOAD_GB_NEGATIVE) cpu_offload_gb is negative;
    V(KV_CACHE_DTYPE_CONFLICTS_WITH_CHECKPOINT) kv_cache_dtype fp8_e5m2 with a checkpoint whose quantization
    loads KV-cache scales (fp8, modelopt, compressed-tensors, quark); V(BLOCK_SIZE_UNSUPPORTED) the KV-cache
    block_size is not one the release or its attention kernels take; V(HEAD_SIZE_UNSUPPORTED) the attention
    backend vLLM picks for this GPU does not support the model's head size; V(ATTENTION_BACKEND_UNAVAILABLE)
    vLLM 0.19.1 finds no attention backend for this GPU, dtype, KV-cache dtype, head size and block size;
    V(DTYPE_UNSUPPORTED_BY_MODEL) vLLM 0.19.1 refuses float16 for this model type (numerical instability);
    V(QUANTIZATION_DEPRECATED) vLLM 0.19.1 refuses a deprecated quantization method unless
    C(--allow-deprecated-quantization) is set; V(VLLM_ARG_UNKNOWN_TO_IMAGE) the image's vLLM has no such
    command-line flag (argparse exits); V(PIPELINE_PARALLEL_UNSUPPORTED_MODEL) pipeline_parallel_size > 1 for an
    architecture without pipeline parallelism (no SupportsPP)."
  - "Warning codes from vLLM's startup validation: V(STARTUP_CHECKS_PARTIAL) the image's vLLM version is unknown
    or neither 0.8.5 nor 0.19.1: only the checks both releases share were made; V(ATTENTION_BACKEND_FALLBACK)
    the requested block_size rules out the preferred attention backend; vLLM uses a slower one;
    V(CHUNKED_PREFILL_OVERRIDDEN) enable_chunked_prefill false is ignored (0.8.5 V1 engine) or unsupported
    (0.19.1) for this model."
  - "Warning codes: V(DRIVER_UNKNOWN) no driver version (driver absent), driver checks skipped;
    V(DRIVER_BRANCH_EOL) the driver branch is end of life;
    V(CUDA_MINOR_VERSION_COMPAT) the image's CUDA is newer than the driver's and runs through minor version
    compatibility; V(FORWARD_COMPAT_REQUIRED) the image is admitted only through a forward-compatibility
    clause (cuda-compat libraries; a data-center GPU, or a professional one where only select SKUs work -
    on a GeForce or TITAN that is V(DRIVER_TOO_OLD_FOR_IMAGE)); V(REQUIRE_CUDA_UNDECIDED) C(NVIDIA_REQUIRE_CUDA) could
    not be decided (brand or CUDA level unknown); V(PTX_JIT_ONLY) the image reaches the GPU only through PTX;
    V(PCIE_WITHOUT_P2P) tensor parallelism without NVLink; V(DTYPE_AUTOFIXED) dtype auto/bfloat16 was
    changed on a GPU below 8.0 to the dtype the release falls back to (float16, or float32 where the release
    refuses float16 for the model type), or kv_cache_dtype to auto (bfloat16 there, or a value the release
    does not accept); V(DTYPE_AUTO_UNRESOLVED) dtype auto
    with an unknown checkpoint dtype on a GPU without bfloat16 and auto-fix off;
    V(KV_CACHE_DTYPE_UNVERIFIED) an FP8 KV cache below compute capability 8.0 is not verified;
    V(QUANTIZATION_UNKNOWN_TO_POLICY) the method is not in the policy, not checked;
    V(QUANTIZATION_SCHEME_UNCHECKED) a compressed-tensors scheme could not be judged;
    V(MEMORY_PLAN_INCOMPLETE) inputs for the memory plan are missing; V(WEIGHTS_ESTIMATED) weight bytes
    estimated from param_count; V(GPU_MEMORY_UNEVEN) the GPUs differ in memory size;
    V(ARCH_UNKNOWN) the compute capability maps to no architecture in the policy;
    V(VLLM_VERSION_UNKNOWN) image.vllm_version is not a version number (judged as the reference release,
    0.8.5, behaves); V(RELEASE_BEHAVIOUR_ASSUMED) the image's vLLM release has no row in the policy's
    release-behaviour table and was judged as the release the message names behaves;
    V(DRIVER_NOT_MANAGED) C(request.driver.manage) is false, the installed driver was judged;
    V(NVFP4_FP16_FALLBACK) the NVFP4 checkpoint is served from its FP16 copy; V(NVFP4_GPTQ_REPACK) it is served
    from its GPTQ int4 copy (C(--quantization gptq)); V(FP16_COPY_DISK_UNCHECKED) and V(GPTQ_COPY_DISK_UNCHECKED)
    the free disk space where the copy goes is unknown (the converter checks it); V(MODEL_DISK_UNCHECKED) the free
    disk space where the model revision from the store goes is unknown (the fetch checks it)."
  - "Memory plan: usable bytes per GPU = memory_total x gpu_memory_utilization (default 0.9) minus the
    reserve vLLM itself subtracts, modelled per model and arguments from vLLM's profile run (the
    activation peak of max_num_batched_tokens tokens, the logits and sampler, cuBLAS and NCCL; 1536 MiB
    when the model's hidden, intermediate or vocabulary size is unknown; C(policy.reserve_mib) replaces
    it by a constant); weights per GPU = weights / (tensor_parallel_size x
    pipeline_parallel_size) - cpu_offload_gb; KV bytes per token per GPU = 2 x ceil(layers /
    pipeline_parallel_size) x max(1, kv_heads // tensor_parallel_size) x head_dim x KV dtype bytes.
    See docs/deploy_gate.md."
author:
  - labfleet maintainers (@labfleet)
extends_documentation_fragment:
  - labfleet.vllm.attributes
  - labfleet.vllm.attributes.read_only
attributes:
  platform:
    description: Pure Python; runs on the controller or any host.
options:
  gpus:
    description:
      - The host's GPUs, for example C(ansible_facts.nvidia.gpus) from M(labfleet.vllm.gpu_facts).
      - "Each entry: C(name) (str), C(compute_capability) (str, V(7.0); null when unknown),
        C(memory_total_mib) (int) and optionally C(brand) (str, the NVML brand such as V(tesla), used for
        C(NVIDIA_REQUIRE_CUDA); guessed from the name when absent). Other keys are ignored."
      - An empty list gives the reason V(NO_GPU).
    type: list
    elements: dict
    default: []
  driver_version:
    description:
      - The loaded NVIDIA driver version, for example V(550.54.14), V(570.26) or V(595.71.05).
      - Omit (or pass an empty string) on a host without a driver; driver checks are then skipped with
        the warning V(DRIVER_UNKNOWN).
    type: str
  cuda_driver_version:
    description:
      - The CUDA version the driver supports (V(12.4), or NVML's integer form V(12040)), as reported by
        M(labfleet.vllm.gpu_facts). When omitted it is taken from the policy's driver-branch table.
    type: str
  nvlink:
    description:
      - Whether the GPUs are connected by NVLink. V(false) with tensor parallelism gives the warning
        V(PCIE_WITHOUT_P2P); omit when unknown.
    type: bool
  driver_library_mismatch:
    description:
      - The probe saw "Driver/library version mismatch" (driver upgraded without reboot). V(true) gives
        the reason V(DRIVER_LIBRARY_MISMATCH).
    type: bool
    default: false
  lost_gpus:
    description:
      - GPUs that fell off the bus (Xid 79), as M(labfleet.vllm.gpu_facts) reports them in
        C(ansible_facts.nvidia.lost_gpus) (its state V(gpu_lost)); they are not in O(gpus).
      - "Each entry: C(bus_id) (str, the PCI address, V(0000:02:00.0)), C(index) (int or null, the GPU
        index) and C(message) (str, what the driver said). Other keys (C(source)) are ignored."
      - A non-empty list gives the reason V(GPU_LOST), which names the GPUs and says what the healthy ones
        in O(gpus) allow until the reboot.
    type: list
    elements: dict
    default: []
  image:
    description:
      - "What is known about the vLLM image; every key optional: C(cuda_version) (str, V(12.4.0)),
        C(require_cuda) (str, the image's C(NVIDIA_REQUIRE_CUDA), for example
        V(cuda>=12.4 brand=tesla,driver>=470,driver<471); a space means OR, a comma AND),
        C(arch_list) (list of str or one string, torch style V(7.0), V(9.0+PTX), V(sm_70), V(compute_70)),
        C(quantization_methods) (list of str), C(vllm_version) (str, V(0.8.5))."
      - When C(vllm_version) names a release the policy knows, its CUDA version and arch list fill in
        missing C(cuda_version) and C(arch_list).
      - The C(image) result of M(labfleet.vllm.vllm_image_facts) can be passed as it is (a mapping with a
        C(gate) key) - its C(gate) part is judged, with its C(state), C(reference), C(digest), C(env) and
        C(profile_matched) for the plan's image step - and is then recorded whole in C(verdict.made_from.image).
    type: dict
    default: {}
  model:
    description:
      - "What is known about the model (for example from M(labfleet.vllm.model_facts)); every key optional:
        C(weight_bytes) (int, bytes of the weights), C(param_count) (int), C(quant_method) (str),
        C(num_hidden_layers), C(num_key_value_heads), C(head_dim), C(max_position_embeddings) (int),
        C(torch_dtype) (str, V(bfloat16)). C(num_attention_heads) and C(hidden_size) are used when
        C(num_key_value_heads) or C(head_dim) are missing. C(quant_bits), C(quant_group_size), C(quant_sym),
        C(quant_desc_act) and C(quant_zero_point) decide whether the release serves a GPTQ or AWQ checkpoint
        with its Marlin kernels (which take bfloat16); C(model_type) decides its C(dtype=auto) rule.
        C(unreadable) (str): M(labfleet.vllm.model_facts) failed on the directory, with this message (it names
        the file); it gives the reason V(MODEL_INCOMPLETE)."
      - Without C(weight_bytes) the weights are estimated as C(param_count) x the dtype's bytes (or the
        quantization method's bytes per parameter, warning V(WEIGHTS_ESTIMATED)).
    type: dict
    default: {}
  vllm:
    description:
      - "The requested vLLM arguments (names as in C(vllm serve) with underscores): C(tensor_parallel_size),
        C(pipeline_parallel_size) (int, default 1), C(dtype) (V(auto), V(half), V(float16), V(bfloat16),
        V(float), V(float32)), C(quantization) (str), C(max_model_len) (int, or V(32k)/V(32K)),
        C(max_num_seqs) (int), C(gpu_memory_utilization) (float in (0, 1], default 0.9),
        C(kv_cache_dtype) (str), C(cpu_offload_gb) (float GiB per GPU). Other keys pass through to
        C(effective_vllm) unchanged."
      - "Numbers are read in ASCII digits only (no full-width or Arabic-Indic digits, no V(1_000)). A key or
        value with a control character (newline, carriage return, NUL, tab, any C0/C1 character or DEL), a NaN
        or infinite number or an integer beyond 2**63 is refused, naming the key; so are such values anywhere
        in O(request)."
    type: dict
    default: {}
  policy:
    description:
      - "Overrides merged over the shipped policy. Settings: C(auto_fix) (bool, default true: change dtype
        auto/bfloat16 to float16 below 8.0 instead of refusing with V(DTYPE_UNSUPPORTED)),
        C(min_compute_capability) (str, replaces vLLM's minimum), C(allowed_driver_branches) (list of int),
        C(reserve_mib) (int MiB, default null = modelled from the profile run), C(ignore_codes) (reason codes demoted to warnings),
        C(promote_warnings) (warning codes promoted to reasons), C(fatal) (bool, read by the preflight role)."
      - "Data sections, deep-merged over the shipped tables: C(cuda_toolkits), C(minor_version_compatibility),
        C(driver_branches), C(architectures), C(dtypes), C(quantization), C(vllm_min_compute_capability)."
    type: dict
    default: {}
  request:
    description:
      - "The deployment request, the one variable tree of the inventory (the preflight role's
        C(preflight_deployment)). Keys, all optional: C(image) (str, repository:tag), C(image_digest)
        (str, C(sha256:...)), C(model_path) (str), C(served_model_name) (str), C(vllm_args) (dict, merged over
        O(vllm)), C(enforce_eager) (V(auto), V(true) or V(false); V(auto) follows the policy's architecture
        table: on for Volta), C(extra_args) (list of str, appended to every instance's argv),
        C(instances) (list; each C(name) (unit and container name), C(gpus) (V(all), an index or a list of
        indices), C(vllm_args) (dict, merged over the request's), C(enforce_eager), C(extra_args); other keys
        such as C(port) pass through), C(driver) (C(manage) (bool, default true), C(branch) (str, V(550)),
        C(version) (str, exact), C(allow_change) (bool, default false), C(kernel_module) (V(auto), V(proprietary)
        or V(open)), C(source) (V(auto), V(distro) or V(cuda_repo))), C(serving_path) (V(auto), V(native),
        V(fp16_fallback) or V(gptq_repack); V(auto) serves an NVFP4 checkpoint the image's vLLM has no NVFP4
        kernels for from an FP16 copy when that fits in VRAM and on disk, else from a GPTQ int4 repack with the
        smallest group size that fits), C(fp16_model_path) (str, where the FP16 copy goes; default
        C(model_path) with V(-fp16) appended), C(gptq_model_path) (str, where the GPTQ copy goes; default
        C(model_path) with V(-gptq) and the group size appended), C(gptq_group_size) (int, V(16), V(32), V(64) or
        V(128); V(0) or empty, the gate picks the smallest that fits), C(model_store) (C(url), C(name), C(revision);
        C(url) V(http://models.lab:8080), http or https with host, optional port and path, no credentials, empty for
        no store; C(name) and C(revision) one path segment of letters, digits and C(. _ + -), at most 128; see
        O(model_store))."
      - O(driver_version) is then the installed driver; the gate judges the driver the plan leaves on the host.
    type: dict
  host:
    description:
      - The host's container stack as M(labfleet.vllm.host_facts) reports it (C(docker_server_version),
        C(nvidia_ctk_version), C(toolkit_config), C(docker_default_runtime), C(cdi_specs), ...), for the plan's
        C(runtime) step and to tell whether the runtime checks the image's C(NVIDIA_REQUIRE_CUDA) (only the
        toolkit's legacy hook does; CDI and jit-cdi modes and C(NVIDIA_DISABLE_REQUIRE) in C(image.env) skip it).
      - C(driver_packages) (as host_facts reports it) and C(distribution) (C(name), C(major_version) and
        C(version) from Ansible's distribution facts) let the plan decide the driver step from the installed packages,
        with the kernel-module flavour and package source the nvidia_driver role installs; without them the step
        is decided from the loaded driver (O(driver_version)) and carries no flavour or source.
      - Other keys are ignored.
    type: dict
    default: {}
  fp16_copy:
    description:
      - The directory of the FP16 copy of an NVFP4 checkpoint (O(request) C(fp16_model_path)) for the NVFP4
        fallback's disk check; C(complete) (bool, a finished copy is there) and C(disk_free_bytes) (int, free
        space of the filesystem it goes to).
      - When omitted and O(request) is given, the module measures both on the host (the manifest of
        M(labfleet.vllm.nvfp4_dequantize) in the directory; the free space of its closest existing parent).
    type: dict
  gptq_copy:
    description:
      - The directories of the GPTQ int4 copy of an NVFP4 checkpoint (O(request) C(gptq_model_path), else one
        per group size, C(model_path) with V(-gptq<group size>) appended) for the repack's disk check;
        C(complete_paths) (list of str, the directories that hold a finished copy) and C(disk_free_bytes) (int,
        free space of the filesystem they go to).
      - When omitted and O(request) is given, the module measures both on the host (the manifest of
        M(labfleet.vllm.nvfp4_repack) in each directory; the free space of the closest existing parent).
    type: dict
  model_store:
    description:
      - "With O(request) C(model_store): the model store's answer for the revision's manifest
        (C(<url>/<name>/<revision>/labfleet-manifest.json)), as the preflight's M(ansible.builtin.uri) GET from the
        host returned it - C(status) (int; -1 for no answer), C(content) (str, the manifest's text as served) and
        C(msg) (str). Other keys are ignored."
      - When O(model) is empty, the manifest's C(gate) is the model the plan judges (and is recorded as
        C(verdict.made_from.model)). No answer, a status other than 200 or a manifest that cannot be read refuses
        the host (V(MODEL_STORE_UNREACHABLE), V(MODEL_NOT_IN_STORE), V(MODEL_MANIFEST_INVALID)).
      - C(disk_free_bytes) (int) and C(complete) (bool, the revision is published at
        C(<model_path>.revisions/<revision>), the fetch's state file C(.labfleet-fetch.json) is in it) describe where a
        natively served revision is fetched to; when omitted the module measures them on the host (the free space of
        the closest existing parent). A converted copy's disk is that of O(fp16_copy) or
        O(gptq_copy).
    type: dict
notes:
  - The policy's data, its sources and confidence levels are in
    C(plugins/module_utils/knowledge/_policy.py); docs/deploy_gate.md explains the codes and the memory plan.
seealso:
  - module: labfleet.vllm.gpu_facts
  - module: labfleet.vllm.model_facts
  - module: labfleet.vllm.vllm_image_facts
"""

EXAMPLES = r"""
- name: Gate the reference deployment (2x V100 32 GB, R550, CUDA 12.4 image)
  labfleet.vllm.deploy_gate:
    gpus: "{{ ansible_facts.nvidia.gpus }}"
    driver_version: "{{ ansible_facts.nvidia.driver_version }}"
    nvlink: "{{ ansible_facts.nvidia.nvlink }}"
    driver_library_mismatch: "{{ ansible_facts.nvidia.driver_library_mismatch | default(false) }}"
    lost_gpus: "{{ ansible_facts.nvidia.lost_gpus | default([]) }}"
    image:
      cuda_version: "12.4.0"
      arch_list: "7.0 7.5 8.0 8.6 8.9 9.0+PTX"
      vllm_version: "0.8.5"
    model:
      param_count: 8030261248
      num_hidden_layers: 32
      num_key_value_heads: 8
      head_dim: 128
      max_position_embeddings: 131072
      torch_dtype: bfloat16
    vllm:
      tensor_parallel_size: 2
      dtype: auto
      gpu_memory_utilization: 0.92
      max_model_len: 32768
      max_num_seqs: 32
  register: gate

- name: Record the verdict for later roles and the fleet report
  ansible.builtin.set_fact:
    labfleet_verdict: "{{ gate.verdict }}"

- name: Refuse with auto-fix off and only R580 allowed
  labfleet.vllm.deploy_gate:
    gpus:
      - name: Tesla V100-PCIE-32GB
        compute_capability: "7.0"
        memory_total_mib: 32768
    driver_version: "580.95.05"
    vllm:
      dtype: bfloat16
    policy:
      auto_fix: false
      allowed_driver_branches: [580]
  register: strict_gate
"""

RETURN = r"""
verdict:
  description:
    - The plan of the host, the one object the preflight records (the fact C(preflight_verdict)) and the
      rollout roles, the doctor, the benchmark and the fleet report read; docs/design.md lists who reads
      each field. Every field is returned once, here.
    - C(made_from) holds what the plan was made from (the module's inputs), so that a later step can tell
      whether the host still matches it.
  returned: success
  type: dict
  contains:
      allowed:
        description: Whether the deployment can work on this host (no reasons).
        returned: success
        type: bool
        sample: true
      reasons:
        description: Why the deployment cannot work; each message says what to change. Empty when allowed.
        returned: success
        type: list
        elements: dict
        contains:
          code:
            description: An UPPER_SNAKE reason code (listed in the description); codes are never renamed.
            type: str
            sample: QUANTIZATION_UNSUPPORTED_ON_ARCH
          message:
            description: What is wrong and what to change.
            type: str
        sample:
          - code: COMPUTE_CAPABILITY_TOO_LOW
            message: "Tesla P100-PCIE-16GB (compute capability 6.0) is below vLLM's minimum (7.0) ..."
      warnings:
        description:
          - Things that do not block the deployment but deserve attention, each C({code, message}).
        returned: success
        type: list
        elements: dict
        sample:
          - code: DTYPE_AUTOFIXED
            message: "Tesla V100-PCIE-32GB (compute capability 7.0) has no bfloat16; dtype bfloat16 was changed to float16"
      effective_vllm:
        description: The O(vllm) arguments after automatic fixes (for example C(dtype) V(float16) on compute capability 7.x).
        returned: success
        type: dict
        sample: {"tensor_parallel_size": 2, "dtype": "float16", "max_model_len": 32768}
      plan:
        description:
          - The memory plan; sizes in bytes, per GPU unless named total; null where the inputs do not tell.
        returned: success
        type: dict
        contains:
          gpus_used:
            description: tensor_parallel_size x pipeline_parallel_size.
            type: int
          gpu_memory_total_bytes:
            description: Memory of the smallest GPU.
            type: int
          gpu_memory_utilization:
            description: The fraction used (default 0.9).
            type: float
          reserve_bytes:
            description: The activation/overhead reserve subtracted per GPU.
            type: int
          reserve_source:
            description: V(modelled), V(modelled, incomplete (missing fields)) or V(policy.reserve_mib).
            type: str
          reserve_model:
            description:
              - The modelled reserve (C(bytes), C(parts), C(profile_tokens), C(profile_seqs), C(engine),
                C(chunked_prefill), C(complete), C(missing), C(formula), C(outside_budget)), also when
                C(policy.reserve_mib) replaces it.
            type: dict
          usable_bytes_per_gpu:
            description: total x gpu_memory_utilization - reserve.
            type: int
          weights_bytes_total:
            description: Weight bytes of the whole model in GPU memory.
            type: int
          weights_source:
            description: Where weights_bytes_total came from (V(weight_bytes) or V(param_count)).
            type: str
          weights_bytes_per_gpu:
            description: Weights per GPU after the tensor/pipeline split and CPU offload.
            type: int
          cpu_offload_bytes_per_gpu:
            description: cpu_offload_gb in bytes.
            type: int
          kv_cache_dtype_bytes:
            description: Bytes per KV element.
            type: int
          kv_bytes_per_token_per_gpu:
            description: KV cache bytes one token needs on each GPU.
            type: int
          kv_cache_bytes_per_gpu:
            description: Usable memory left for the KV cache after the weights.
            type: int
          kv_cache_tokens:
            description: Tokens the KV cache can hold.
            type: int
          max_model_len:
            description: The sequence length planned for.
            type: int
          sequence_kv_bytes_per_gpu:
            description: KV bytes of one max_model_len sequence per GPU.
            type: int
          fits_one_sequence:
            description: Whether the weights and one full-length sequence fit.
            type: bool
          max_concurrent_full_sequences:
            description: How many full-length sequences fit in the KV cache at once.
            type: int
          max_num_seqs:
            description: The requested max_num_seqs, for comparison.
            type: int
          summary:
            description: One line for the fleet report.
            type: str
        sample:
          gpus_used: 2
          usable_bytes_per_gpu: 30000346562
          weights_bytes_per_gpu: 18000000000
          kv_bytes_per_token_per_gpu: 163840
          fits_one_sequence: true
          max_concurrent_full_sequences: 2
      driver_requirements:
        description: What a driver for these GPUs must be (for the nvidia_driver role).
        returned: success
        type: dict
        contains:
          architectures:
            description: Architecture names of the GPUs.
            type: list
            elements: str
          min_branch:
            description: Oldest branch that drives them (null = no limit known).
            type: int
          max_branch:
            description: Newest branch that drives them (580 for Volta; null = no limit).
            type: int
          kernel_module:
            description: V(proprietary), V(open), V(either) or V(conflict).
            type: str
          recommended_branch:
            description: The newest supported (not end-of-life) branch within the limits.
            type: int
        sample: {"architectures": ["Volta"], "min_branch": null, "max_branch": 580,
                 "kernel_module": "proprietary", "recommended_branch": 580}
      container_runtime:
        description:
          - Whether the container runtime checks the image's C(NVIDIA_REQUIRE_CUDA) for a container started with
            C(docker --gpus) (how vllm_server gives GPUs), worked out from O(host) and C(image.env).
          - "C(enforced) true, false or null (unknown: judged as the legacy hook would), C(mode) (V(legacy), V(cdi),
            V(jit-cdi), V(csv) or null), C(why), C(disabled_by) (where C(NVIDIA_DISABLE_REQUIRE) switched it off) and
            C(blocked) (why such a container would not start at all; the reason V(GPU_RUNTIME_BLOCKED))."
        returned: success
        type: dict
        sample: {"enforced": true, "mode": "legacy", "blocked": null, "disabled_by": null,
                 "why": "--gpus all makes Docker run nvidia-container-runtime-hook ..."}
      policy_version:
        description: Version of the shipped policy data.
        returned: success
        type: str
        sample: "1.0.0"
      steps:
        description:
          - What the rollout will do on the host, per step C(driver), C(runtime), C(image), C(model), C(server).
          - "Each has C(action) and C(why). Actions: driver V(keep), V(install), V(replace) (C(current) ->
            C(target)) or V(refuse); runtime V(keep) or V(install); image V(keep) or V(pull) (C(ref), C(digest),
            C(judged_from)); model V(keep) or V(stage) (C(path)), with a model store V(fetch) or V(keep) (C(path),
            C(dest), C(name), C(revision), C(store); a copy's step V(fetch), not V(convert)); server V(deploy)
            (C(instances)). On a refused host
            every step is V(refuse) (C(reasons): the codes that block it) or V(skip), with C(planned_action)."
          - "With C(host.driver_packages) and C(host.distribution) the driver step also carries C(installed) (the
            driver version the installed packages carry), C(kernel_module), C(source), C(source_why), C(distro) and
            C(problems) (the driver refusals, C(code) and C(message)): what the nvidia_driver role installs, decided
            here only."
        returned: success
        type: dict
        sample:
          driver: {action: replace, current: "590.44.01", target: "580", branch: 580, managed: true,
                   why: "driver 590.44.01 is replaced by R580 (request.driver.allow_change is true)"}
          image: {action: pull, ref: "vllm/vllm-openai:v0.8.5", judged_from: "the shipped profile of vllm/vllm-openai:v0.8.5"}
      instances:
        description:
          - One entry per instance of the request (one instance C(vllm) on all GPUs without O(request)), with the
            request's own keys (C(name), C(port), ...) and C(allowed), C(reasons), C(warnings), C(gpu_indices),
            C(gpu_count), C(vllm_args) (effective, C(enforce_eager) included), C(enforce_eager),
            C(enforce_eager_why), C(argv) (the vLLM arguments the unit runs), C(served_model_name),
            C(memory_plan) (as RV(verdict.plan)).
        returned: success
        type: list
        elements: dict
      serving_path:
        description:
          - How the model is served when allowed, V(native) (the checkpoint as it is), V(fp16_fallback) (an NVFP4
            checkpoint from its FP16 copy) or V(gptq_repack) (from its GPTQ int4 copy, C(--quantization gptq); see
            RV(verdict.serving)); null when refused.
        returned: success
        type: str
        sample: native
      serving:
        description:
          - The serving path decision (C(path), C(why), C(tried), C(model_path) (the directory the unit mounts),
            C(source_model_path), C(fp16_model_path), C(fp16_weight_bytes), C(fp16_copy) (C(path), C(complete),
            C(disk_free_bytes), C(disk_needed_bytes)), C(gptq_model_path), C(gptq_copy) (as C(fp16_copy)),
            C(gptq_repack), C(fp16_fallback)).
          - C(fp16_fallback) (when the FP16 copy was tried, whether taken or not; else null) - C(model_path),
            C(weight_bytes), C(copy) (as C(fp16_copy)), C(disk_problem) (the INSUFFICIENT_DISK reason it would have,
            or null) and C(disk_warning). A host group serves this copy across its members when one host cannot.
          - "C(gptq_repack) (when the repack was planned or tried): C(group_size), C(bits_per_weight), C(model_path),
            C(repacked_bytes), C(repacked_bytes_per_gpu), C(repacked_gib_per_gpu), C(sized_from), C(expected_error)
            (C(rel_rms), C(max_abs_rel), C(source): the converter's measured error against the exact NVFP4 values),
            C(kv_cache_tokens) (the KV cache the memory plan leaves, in tokens), C(max_model_len), C(vllm_args)
            (C(quantization) V(gptq), C(dtype) V(float16), C(model) the copy) and C(candidates) (every group size
            tried, smallest first: C(group_size), C(allowed), C(reasons), C(why), C(repacked_bytes), C(bits_per_weight),
            C(weights_bytes_per_gpu), C(sequence_kv_bytes_per_gpu), C(usable_bytes_per_gpu), C(kv_cache_tokens),
            C(expected_error))."
        returned: success
        type: dict
      target:
        description: The state the plan leaves on the host (C(driver_version), C(driver_branch), C(image),
          C(image_digest), C(model_path)).
        returned: success
        type: dict
      deployment:
        description: The request's image, image_digest, model_path, served_model_name and instance_names.
        returned: success
        type: dict
      summary:
        description: One line saying what the rollout will do on the host.
        returned: success
        type: str
      plan_format:
        description: Version of the plan's layout (1).
        returned: success
        type: int
      made_from:
        description:
          - The inputs the plan was made from (C(gpus), C(driver_version), C(cuda_driver_version), C(nvlink),
            C(driver_library_mismatch), C(lost_gpus), C(image), C(model), C(policy), C(host)), as given.
          - The vllm_server role compares C(image) and C(model) with what it finds on the host and plans again
            when they differ; the doctor asks the gate about other memory settings with them.
        returned: success
        type: dict
      model_store:
        description:
          - "What the host fetches from the model store (O(request) C(model_store)); null without a store.
            C(url), C(name), C(revision) (the request's), C(manifest_url), C(manifest_sha256) (sha256 of the manifest's
            text as served; null when it was not read), C(total_bytes) (the revision's, from its manifest),
            C(fetch) (C(revision) - the revision itself, or the copy the store's converter makes once,
            V(<revision>+fp16) or V(<revision>+gptq-g<G>) - C(dest), the directory the unit serves, and C(bytes), the
            planned size; null when the manifest was not read), C(disk_free_bytes) and C(disk_needed_bytes) (0 when
            it is already on the host)."
        returned: success
        type: dict
        sample: {"url": "http://models.lab:8080", "name": "quasar", "revision": "2026-11-30",
                 "manifest_url": "http://models.lab:8080/quasar/2026-11-30/labfleet-manifest.json",
                 "manifest_sha256": "9f2c...", "total_bytes": 5960000000,
                 "fetch": {"revision": "2026-11-30+fp16", "dest": "/srv/models/model-fp16", "bytes": 16060522496},
                 "disk_free_bytes": 500000000000, "disk_needed_bytes": 16060522496}
      previous:
        description:
          - Only in a plan made again by the preflight role's re-check entry (C(tasks_from=recheck)) - the plan
            it replaced (without its own C(previous)), so that both plans stay on record.
        returned: when re-planned
        type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate import GateInputError
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate_inputs import image_gate_view
from ansible_collections.labfleet.vllm.plugins.module_utils.probes._host import nearest_existing
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._policy import has_control_chars
# labfleet.vllm.nvfp4_repack's manifest in a finished GPTQ copy.
from ansible_collections.labfleet.vllm.plugins.module_utils.converters._gptq import GROUP_SIZES, MANIFEST_FILE as GPTQ_COPY_MANIFEST
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._model_store import revision_dir, store_model
# The fetch's state file: in a revision's directory once the fetch published it there.
from ansible_collections.labfleet.vllm.plugins.module_utils.store._fetch import STATE_FILE as FETCH_STATE_FILE
from ansible_collections.labfleet.vllm.plugins.module_utils.store._manifest import NAME_RE as STORE_NAME_RE
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._plan import (
    FP16_COPY_MANIFEST,
    fp16_copy_path,
    gptq_copy_path,
    plan,
)


def _model_path(request):
    """request.model_path when it is an absolute one-line path, else None."""
    model_path = request.get("model_path") if isinstance(request, dict) else None
    if not isinstance(model_path, str) or not model_path.strip().startswith("/") or has_control_chars(model_path):
        return None     # the plan reports the malformed path (a NUL would make os.statvfs raise)
    return model_path.strip()


def _copy_paths(request, key):
    """(model_path, the request's own path for the copy or None), or None when either is unusable."""
    model_path = _model_path(request)
    if model_path is None:
        return None
    given = request.get(key)
    if given is not None and not (isinstance(given, str) and (not given.strip() or given.strip().startswith("/"))
                                  and not has_control_chars(given)):
        return None
    return model_path, given.strip().rstrip("/") if given and given.strip() else None


def _free_bytes(path):
    try:
        st = os.statvfs(nearest_existing(path))
    except (OSError, ValueError):
        return None
    return st.f_bavail * st.f_frsize


def measure_fp16_copy(request):
    """{complete, disk_free_bytes} of the FP16 copy's directory named by the request; None when the
    request names no model path."""
    paths = _copy_paths(request, "fp16_model_path")
    if paths is None:
        return None
    path = fp16_copy_path(*paths)
    free = _free_bytes(path)
    return {"complete": free is not None and os.path.isfile(os.path.join(path, FP16_COPY_MANIFEST)),
            "disk_free_bytes": free}


def measure_gptq_copy(request):
    """{complete_paths, disk_free_bytes} of the GPTQ copy's directories (the request's, or one per
    group size); None when the request names no model path."""
    paths = _copy_paths(request, "gptq_model_path")
    if paths is None:
        return None
    candidates = sorted(set(gptq_copy_path(paths[0], paths[1], group) for group in GROUP_SIZES))
    free = _free_bytes(candidates[0])
    return {"complete_paths": [p for p in candidates if free is not None
                               and os.path.isfile(os.path.join(p, GPTQ_COPY_MANIFEST))],
            "disk_free_bytes": free}


def measure_model_store(request, answer):
    """The store's answer (the preflight's GET of the manifest) with what is measured on the host
    beside it where the caller did not give it: disk_free_bytes (the filesystem of
    <model_path>.revisions/<revision>) and complete (published there: the fetch's state file is in it). The
    answer as given when the request names no usable model path or store revision."""
    answer = dict(answer) if isinstance(answer, dict) else answer
    model_path = _model_path(request)
    store = request.get("model_store") if isinstance(request, dict) else None
    revision = store.get("revision") if isinstance(store, dict) else None
    if not isinstance(answer, dict) or model_path is None or not isinstance(revision, str) \
            or not STORE_NAME_RE.match(revision.strip()) or revision.strip() in (".", ".."):
        return answer
    where = revision_dir(model_path, revision.strip())
    if answer.get("disk_free_bytes") is None:
        answer["disk_free_bytes"] = _free_bytes(where)
    if answer.get("complete") is None:
        answer["complete"] = os.path.isfile(os.path.join(where, FETCH_STATE_FILE))
    return answer


# The inputs a plan records as what it was made from (verdict.made_from).
MADE_FROM = ("gpus", "driver_version", "cuda_driver_version", "nvlink", "driver_library_mismatch", "lost_gpus",
             "image", "model", "policy", "host")


def main():
    module = AnsibleModule(
        argument_spec=dict(
            gpus=dict(type="list", elements="dict", default=[]),
            driver_version=dict(type="str"),
            cuda_driver_version=dict(type="str"),
            nvlink=dict(type="bool"),
            driver_library_mismatch=dict(type="bool", default=False),
            lost_gpus=dict(type="list", elements="dict", default=[]),
            image=dict(type="dict", default={}),
            model=dict(type="dict", default={}),
            vllm=dict(type="dict", default={}),
            policy=dict(type="dict", default={}),
            request=dict(type="dict"),
            host=dict(type="dict", default={}),
            fp16_copy=dict(type="dict"),
            gptq_copy=dict(type="dict"),
            model_store=dict(type="dict"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    # With request.model_store and no model read on the host, the plan judges the store's manifest.
    model = store_model(params["model"], params["request"], params["model_store"])
    try:
        verdict = plan(
            gpus=params["gpus"],
            driver_version=params["driver_version"],
            image=image_gate_view(params["image"]),
            model=model,
            vllm=params["vllm"],
            policy_overrides=params["policy"],
            nvlink=params["nvlink"],
            driver_library_mismatch=params["driver_library_mismatch"],
            cuda_driver_version=params["cuda_driver_version"],
            request=params["request"],
            host=params["host"],
            lost_gpus=params["lost_gpus"],
            fp16_copy=params["fp16_copy"] if params["fp16_copy"] is not None else measure_fp16_copy(params["request"]),
            gptq_copy=params["gptq_copy"] if params["gptq_copy"] is not None else measure_gptq_copy(params["request"]),
            model_store=measure_model_store(params["request"], params["model_store"]),
        )
    except GateInputError as exc:
        module.fail_json(msg="deploy_gate: invalid input: %s" % exc)

    verdict["made_from"] = dict((key, params[key]) for key in MADE_FROM)
    verdict["made_from"]["model"] = model
    module.exit_json(changed=False, verdict=verdict)


if __name__ == "__main__":
    main()
