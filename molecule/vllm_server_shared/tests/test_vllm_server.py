"""vllm_server_default: the server answers, the unit is what the role promises, the secrets stay put.

The role serves an NVFP4 checkpoint on a (fake) V100 host through its FP16 copy. This verifier
checks, on the instance: one smoke completion through the published port (the collection's
openai_smoke), that the port is published on loopback only (ss listing, a refused connection to the
host's other address, Docker's port bindings), the container's hardening, the API key guard and
the stand-in's version, the unit's text, the pinned image (lock file on the controller == the
running container's image ID), the env file's mode and owner, that the API key and the Hugging
Face token appear nowhere but the env file (systemctl show, ps, the journal, the unit), the FP16
copy (mount, config, manifest, index, bit for bit against tests/fake_model/check_fp16_copy.py), the
stand-in's refusal of the NVFP4 checkpoint itself, and the chat template's exact argv.

The scenario runs at ANSIBLE_VERBOSITY=3 and scripts/molecule-all.sh fails it when a secret shows
up in its log: no test passes a secret on a command line, and no failure prints one. pytest shows
the arguments of every function in a traceback and the operands of a failed ``assert``, so the
secrets live in an object whose repr hides them, a text that may hold a secret is never a function
argument, and its checks assert on booleans or on lists of names.
"""

import json
import os
import re

import pytest

testinfra_hosts = ["vllm_hosts"]

CONTAINER = "vllm"
PORT = 8000
BASE_URL = "http://127.0.0.1:%d" % PORT
UNIT = "/etc/systemd/system/vllm.service"
ENV_FILE = "/etc/vllm/vllm.env"
IMAGE = "labfleet/openai-standin:1"
MODEL = "/srv/models/quasar"
FP16_COPY = "/srv/models/quasar-fp16"
SECRET_VARS = ("vllm_server_api_key", "vllm_server_hf_token")
# molecule.yml's extra_args (the doubled dollar sign there is Molecule's escape for one).
CHAT_TEMPLATE = "[INST] \"$HOME\"; 100% 'x' \\ [/INST]"

# What the unit must say: the pinned image run by systemd, hardened and published on loopback only
# (the defaults), the plan's serving path (the FP16 copy, no quantization flag) and the gate's
# arguments for 2x V100 (eager mode on Volta).
UNIT_NEEDLES = (
    "Ansible managed",
    "Restart=always",
    "ExecStartPre=-/usr/bin/docker rm -f vllm",
    "ExecStop=/usr/bin/docker stop -t 60 vllm",
    "run --rm --name vllm --pull never",
    "--gpus all",
    "--ipc host",
    "--shm-size 16g",
    "-p 127.0.0.1:8000:8000",
    "--security-opt no-new-privileges",
    "--cap-drop ALL",
    "-v /srv/models/quasar-fp16:/model:ro",
    "serving path: fp16_fallback",
    "--env-file /etc/vllm/vllm.env",
    "--served-model-name quasar",
    "--tensor-parallel-size 2",
    "--dtype float16",
    "--gpu-memory-utilization 0.92",
    "--max-model-len 32768",
    "--max-num-seqs 32",
    "--enforce-eager",
)
UNIT_FORBIDDEN = ("--quantization", "CUDA_FORCE_PTX_JIT")

NVFP4_REFUSAL = "is not supported for the current GPU. Minimum capability: 100. Current capability: 70"


class Secrets:
    """The scenario's secret values, by inventory variable; its repr names the variables only."""

    def __init__(self, values):
        self._values = values

    def __repr__(self):
        return "<secrets %s>" % ", ".join(sorted(self._values))

    def empty(self):
        return [name for name, value in sorted(self._values.items()) if not value]

    def leaked_into(self, texts):
        """{where: [variable names]} for each of texts ({where: text}) that holds a secret's value."""
        found = {}
        for where, text in texts.items():
            names = [name for name, value in sorted(self._values.items()) if value in text]
            if names:
                found[where] = names
        return found


@pytest.fixture
def secrets(host):
    """The API key and the HF token the inventory sets (vllm_server_api_key, vllm_server_hf_token)."""
    variables = host.ansible.get_variables()
    return Secrets({name: str(variables.get(name) or "") for name in SECRET_VARS})


def _docker_inspect(host, template):
    return host.check_output("docker inspect --format %s %s", template, CONTAINER)


def _json_file(host, path):
    handle = host.file(path)
    assert handle.is_file, "%s is missing" % path
    return json.loads(handle.content_string)


def test_smoke_completion_through_the_published_port(call_module):
    """Health, the model list, one streamed completion and the metrics, on loopback with the key."""
    # openai_smoke is the collection's own module (what the role's smoke step runs), so it goes
    # through Ansible. The key is a template that Ansible fills in from the inventory on the
    # controller: it is on no command line, and the module's no_log hides it in the result.
    result = call_module("labfleet.vllm.openai_smoke", {
        "url": BASE_URL,
        "model": "quasar",
        "api_key": "{{ vllm_server_api_key }}",
        "health_timeout": 60,
        "interval": 1,
        "check_metrics": True,
    })
    assert not result["failed"], "openai_smoke failed: %s" % result.get("msg")
    assert result["completion_tokens"] >= 1, result
    assert result.get("ttft_s") is not None, result
    assert result["models"] == ["quasar"], result
    assert result["metrics"] >= 1, result


def test_published_on_loopback_only(host):
    """The default publishes the API on 127.0.0.1 only: no socket and no answer on the host's address."""
    listening = [spec for spec in host.socket.get_listening_sockets() if re.search(r":%d$" % PORT, spec)]
    assert listening == ["tcp://127.0.0.1:%d" % PORT], "sockets on port %d: %s" % (PORT, listening)

    facts = host.ansible("ansible.builtin.setup", "gather_subset=network")["ansible_facts"]
    address = facts.get("ansible_default_ipv4", {}).get("address")
    assert address and not address.startswith("127."), "no default IPv4 address in the facts: %s" % facts.get("ansible_default_ipv4")
    # errno 111 (ECONNREFUSED): nothing takes the connection (a timeout would hide a filtered listener).
    probe = host.run(
        "python3 -c %s %s %s",
        "import socket, sys; s = socket.socket(); s.settimeout(5); print(s.connect_ex((sys.argv[1], int(sys.argv[2]))))",
        address, str(PORT))
    assert probe.rc == 0, probe.stderr
    assert probe.stdout.strip() == "111", "connecting to %s:%d gave errno %s, not 111 (refused)" % (address, PORT, probe.stdout.strip())


def test_container_is_hardened_and_bound_to_loopback(host):
    """no-new-privileges, every capability dropped, not privileged, port 8000 bound to 127.0.0.1 only."""
    hostconfig = json.loads(_docker_inspect(host, "{{json .HostConfig}}"))
    assert "no-new-privileges" in (hostconfig.get("SecurityOpt") or []), hostconfig.get("SecurityOpt")
    cap_drop = hostconfig.get("CapDrop") or []
    assert "ALL" in cap_drop or "all" in cap_drop, cap_drop
    assert hostconfig["Privileged"] is False, hostconfig["Privileged"]
    bindings = (hostconfig.get("PortBindings") or {}).get("%d/tcp" % PORT) or []
    assert [binding["HostIp"] for binding in bindings] == ["127.0.0.1"], hostconfig.get("PortBindings")


def test_api_needs_the_key(http):
    """/v1/models without the key answers 401 (the key guard is on)."""
    status, dummy, body = http("%s/v1/models" % BASE_URL)
    assert status == 401, "GET /v1/models without a key: %s %s" % (status, body[:200])


def test_stand_in_version(http):
    """Version 1 of the stand-in serves."""
    status, dummy, body = http("%s/version" % BASE_URL)
    assert status == 200, "GET /version: %s %s" % (status, body[:200])
    assert json.loads(body)["version"] == "1", body


def test_unit_runs_the_pinned_image_with_the_gates_arguments(host, ephemeral_dir, load_yaml):
    """The unit's text, and the lock file's digest is in the unit and is the running container's image."""
    unit = host.file(UNIT)
    assert unit.is_file, "%s is missing" % UNIT
    text = unit.content_string
    missing = [needle for needle in UNIT_NEEDLES if needle not in text]
    assert not missing, "%s lacks %s" % (UNIT, missing)
    present = [needle for needle in UNIT_FORBIDDEN if needle in text]
    assert not present, "%s has %s" % (UNIT, present)

    lock = load_yaml(os.path.join(ephemeral_dir, "inventory", "vllm-image.lock.yml"))
    locked = lock[IMAGE]["digest"]
    assert re.match(r"^sha256:[0-9a-f]{64}$", locked), lock
    pinned = locked in text
    assert pinned, "%s does not run the locked image %s" % (UNIT, locked)
    running = _docker_inspect(host, "{{.Image}}").strip()
    assert running == locked, "the container runs %s, the lock file pins %s" % (running, locked)


def test_env_file_is_roots_alone(host):
    """The env file (the only place of the secrets) is mode 0600, root:root."""
    env_file = host.file(ENV_FILE)
    assert env_file.is_file, "%s is missing" % ENV_FILE
    assert env_file.mode == 0o600, "%s has mode %o" % (ENV_FILE, env_file.mode)
    assert env_file.uid == 0 and env_file.gid == 0, "%s belongs to %s:%s" % (ENV_FILE, env_file.uid, env_file.gid)


def test_secrets_appear_nowhere_else(host, secrets):
    """Neither the API key nor the HF token is in systemctl show, any command line, the journal or the unit."""
    empty = secrets.empty()
    assert not empty, "the inventory sets no value for %s" % empty
    texts = {
        "systemctl show vllm.service": host.check_output("systemctl show vllm.service"),
        "ps -eww -o args": host.check_output("ps -eww -o args"),
        "journalctl --unit vllm.service": host.check_output("journalctl --unit vllm.service --no-pager"),
        UNIT: host.file(UNIT).content_string,
    }
    # The places are the right ones: the unit is loaded and its container client is running.
    loaded = "LoadState=loaded" in texts["systemctl show vllm.service"]
    assert loaded, "systemctl show vllm.service: LoadState is not loaded"
    running = "docker run" in texts["ps -eww -o args"]
    assert running, "no `docker run` process (the unit's container client) is running"
    leaked = secrets.leaked_into(texts)
    assert not leaked, "secret values found (variable names shown): %s" % leaked


def test_serves_the_fp16_copy(host):
    """/model is the FP16 copy: float16, no quantization_config, a manifest of both input shards, an index."""
    mounts = json.loads(_docker_inspect(host, "{{json .Mounts}}"))
    sources = [mount["Source"] for mount in mounts if mount["Destination"] == "/model"]
    assert sources == [FP16_COPY], mounts

    config = _json_file(host, "%s/config.json" % FP16_COPY)
    assert "quantization_config" not in config, config["quantization_config"]
    assert config.get("torch_dtype") == "float16", config.get("torch_dtype")

    inputs = _json_file(host, "%s/nvfp4_dequantize_manifest.json" % FP16_COPY)["inputs"]
    shards = [name for name in inputs if name.endswith("safetensors")]
    assert len(shards) == 2, "the manifest's inputs: %s" % sorted(inputs)
    digests = [entry.get("sha256") for entry in inputs.values()]
    bad = [digest for digest in digests if not re.match(r"^[0-9a-f]{64}$", str(digest))]
    assert not bad, "inputs without a sha256 digest: %s" % inputs

    index = _json_file(host, "%s/model.safetensors.index.json" % FP16_COPY)
    assert len(index.get("weight_map") or {}) > 0, index


def test_fp16_copy_is_bit_identical(host, project_dir):
    """The copy equals an independent dequantization of the checkpoint, bit for bit."""
    # The checker is a plain Python script of the repository (no code shared with the collection);
    # it runs on the instance as `python3 -c <its text>`, which needs no copy and no cleanup.
    with open(os.path.join(project_dir, "tests", "fake_model", "check_fp16_copy.py"), encoding="utf-8") as handle:
        checker = handle.read()
    result = host.run("python3 -c %s %s %s", checker, MODEL, FP16_COPY)
    assert result.rc == 0, "check_fp16_copy.py exited %d: %s %s" % (result.rc, result.stdout, result.stderr)
    assert "bit-identical" in result.stdout, result.stdout


def test_stand_in_refuses_the_nvfp4_checkpoint(host):
    """Served natively, the NVFP4 checkpoint is refused the way vLLM 0.8.5 refuses it on a V100."""
    image = _docker_inspect(host, "{{.Image}}").strip()
    result = host.run("docker run --rm -v %s %s --model /model", "%s:/model:ro" % MODEL, image)
    assert result.rc != 0, "the stand-in served the NVFP4 checkpoint: %s" % result.stdout[-500:]
    assert NVFP4_REFUSAL in result.stderr, result.stderr[-2000:]


def test_chat_template_reaches_vllm_unchanged(host):
    """The chat template with quotes, $, %, ; and a backslash is one argv element, unchanged."""
    argv = json.loads(_docker_inspect(host, "{{json .Args}}"))
    assert "--chat-template" in argv, argv
    assert argv[argv.index("--chat-template") + 1] == CHAT_TEMPLATE, argv
