"""vllm_server_crash: both instances serve the GPTQ int4 repack of the NVFP4 checkpoint.

The request forces serving_path gptq_repack on a small real ModelOpt NVFP4 checkpoint
(tests/fake_model/make_model.py tiny-llama --nvfp4 modelopt); the gate plans group size 32, the role
makes the copy once with labfleet.vllm.nvfp4_repack at /srv/models/quasar-gptq32 and the units mount
it with the plan's --quantization gptq --dtype float16. Checked here, after the crash tests (which
leave both servers running): each unit's text and container (argv, read-only mount of the copy),
the copy (config.json says gptq 4-bit group 32, every repacked layer has qweight, qzeros, scales and
g_idx in the safetensors headers and no NVFP4 tensor is left, the manifest hashes the inputs), the
API answering from it, and the stand-in refusing the NVFP4 checkpoint itself with --quantization gptq
as vLLM 0.8.5 does.
"""

import json
import re

import pytest

testinfra_hosts = ["vllm_hosts"]

MODEL = "/srv/models/quasar"
COPY = "/srv/models/quasar-gptq32"
MANIFEST = COPY + "/nvfp4_repack_manifest.json"
# The units and their containers (molecule.yml's instances), with their tensor parallelism.
INSTANCES = (("vllm", 8000, "quasar", "2"), ("vllm-b", 8001, "quasar-b", "1"))
MISMATCH = ("Quantization method specified in the model config (modelopt) does not match the quantization "
            "method specified in the `quantization` argument (gptq)")

# Prints {name: [dtype, shape]} of every safetensors file in a directory (headers only).
HEADERS = (
    "import glob, json, struct, sys\n"
    "out = {}\n"
    "for path in sorted(glob.glob(sys.argv[1] + '/*.safetensors')):\n"
    "    with open(path, 'rb') as handle:\n"
    "        (length,) = struct.unpack('<Q', handle.read(8))\n"
    "        header = json.loads(handle.read(length))\n"
    "    header.pop('__metadata__', None)\n"
    "    out.update((name, [info['dtype'], info['shape']]) for name, info in header.items())\n"
    "print(json.dumps(out))\n"
)


def _json_file(host, path):
    handle = host.file(path)
    assert handle.is_file, "%s is missing" % path
    return json.loads(handle.content_string)


@pytest.mark.parametrize("name, port, served, tp", INSTANCES)
def test_each_unit_serves_the_gptq_copy_with_quantization_gptq(host, name, port, served, tp):
    unit = host.file("/etc/systemd/system/%s.service" % name)
    assert unit.is_file, "%s.service is missing" % name
    text = unit.content_string
    needles = ["serving path: gptq_repack, the GPTQ int4 copy (group size 32, --quantization gptq) of the NVFP4 "
               "checkpoint %s" % MODEL, "-v %s:/model:ro" % COPY, "--quantization gptq", "--dtype float16",
               "--tensor-parallel-size %s" % tp, "--served-model-name %s" % served]
    missing = [needle for needle in needles if needle not in text]
    assert not missing, "%s.service lacks %s" % (name, missing)
    assert "-v %s:/model" % MODEL not in text, "%s.service mounts the NVFP4 checkpoint itself" % name


@pytest.mark.parametrize("name, port, served, tp", INSTANCES)
def test_each_container_runs_on_the_mounted_copy(host, name, port, served, tp):
    mounts = json.loads(host.check_output("docker inspect --format %s %s", "{{json .Mounts}}", name))
    model = [mount for mount in mounts if mount["Destination"] == "/model"]
    assert [(m["Source"], m["RW"]) for m in model] == [(COPY, False)], mounts
    argv = json.loads(host.check_output("docker inspect --format %s %s", "{{json .Args}}", name))
    assert argv[argv.index("--quantization") + 1] == "gptq", argv
    assert argv[argv.index("--model") + 1] == "/model", argv


def test_the_copy_is_a_gptq_checkpoint(host):
    config = _json_file(host, COPY + "/config.json")
    quant = config.get("quantization_config") or {}
    assert (quant.get("quant_method"), quant.get("bits"), quant.get("group_size"), quant.get("desc_act")) == \
        ("gptq", 4, 32, False), quant
    tensors = json.loads(host.check_output("python3 -c %s %s", HEADERS, COPY))
    layers = sorted(name[:-len(".qweight")] for name in tensors if name.endswith(".qweight"))
    # tiny-llama: 2 layers x (q, k, v, o, gate, up, down)
    assert len(layers) == 14, layers
    for layer in layers:
        (_dtype, (packed, outputs)) = tensors[layer + ".qweight"]
        groups = packed * 8 // 32
        assert tensors[layer + ".qweight"][0] == "I32", layer
        assert tensors[layer + ".qzeros"] == ["I32", [groups, outputs // 8]], layer
        assert tensors[layer + ".scales"] == ["F16", [groups, outputs]], layer
        assert tensors[layer + ".g_idx"] == ["I32", [packed * 8]], layer
    left = [name for name in tensors if re.search(r"\.(weight_scale|weight_scale_2|input_scale)$", name)
            or (name.endswith("_proj.weight"))]
    assert not left, "NVFP4 or unpacked linear tensors left in the copy: %s" % left
    assert tensors["lm_head.weight"][0] == "F16", tensors["lm_head.weight"]


def test_the_manifest_of_the_copy_hashes_its_inputs(host):
    manifest = _json_file(host, MANIFEST)
    text = json.dumps(manifest)
    assert "model-00001-of-00002.safetensors" in text and "model-00002-of-00002.safetensors" in text, manifest
    assert re.search(r'"[0-9a-f]{64}"', text), "no sha256 digest in %s" % MANIFEST


@pytest.mark.parametrize("name, port, served, tp", INSTANCES)
def test_the_api_answers_from_the_copy(call_module, default_address, name, port, served, tp):
    result = call_module("labfleet.vllm.openai_smoke", {
        "url": "http://%s:%d" % (default_address, port), "model": served,
        "api_key": "{{ vllm_server_api_key }}", "health_timeout": 60, "interval": 1})
    assert not result["failed"], "openai_smoke %s: %s" % (name, result.get("msg"))
    assert result["completion_tokens"] >= 1 and result["models"] == [served], result


def test_the_stand_in_refuses_the_nvfp4_checkpoint_with_quantization_gptq(host):
    """vLLM 0.8.5 refuses --quantization gptq on a checkpoint that declares another method."""
    image = host.check_output("docker inspect --format %s %s", "{{.Image}}", "vllm").strip()
    result = host.run("docker run --rm -v %s %s --model /model --quantization gptq", "%s:/model:ro" % MODEL, image)
    assert result.rc != 0, "the stand-in served the NVFP4 checkpoint as GPTQ: %s" % result.stdout[-500:]
    assert MISMATCH in result.stderr, result.stderr[-2000:]
