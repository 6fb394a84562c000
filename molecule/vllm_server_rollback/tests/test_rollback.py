"""vllm_server_rollback: after the converge's failing versions and the interrupted deployment, version 2 serves.

The converge deployed version 1, then two failing versions that were rolled back (its own rescue
blocks assert that), then killed a deployment of version 2 half-way and ran it again. What must be
left: version 2 answers (health, model list, a completion; ``GET /version`` says 2), the running
container is the image the lock file recorded for version 2, the unit names that image and neither
version 1 nor the failed 2-notokens, every build that was loaded (2-exits too) is in the lock file,
and the env file that went through the rollbacks is still root's alone (0600).

Nothing here changes the instance; ``molecule verify`` can run again.
"""

import json
import os

import pytest

testinfra_hosts = ["vllm_hosts"]

PORT, MODEL = 8000, "quasar"
IMAGE = "labfleet/openai-standin"
UNIT_PATH = "/etc/systemd/system/vllm.service"
ENV_PATH = "/etc/vllm/vllm.env"


def _redact(text, canaries):
    """Text for an assertion message, each secret canary replaced (a unit could hold one by mistake)."""
    for canary in canaries:
        text = text.replace(canary, "<secret>")
    return text


@pytest.fixture(scope="module")
def lock(ephemeral_dir, load_yaml):
    """The image lock file the role keeps on the controller, next to the inventory: {image: {digest: ...}}."""
    return load_yaml(os.path.join(ephemeral_dir, "inventory", "vllm-image.lock.yml"))


@pytest.fixture(scope="module")
def unit_text(host, secret_canaries):
    """The unit as it is now (secret canaries replaced, so that it can be shown)."""
    unit = host.file(UNIT_PATH)
    assert unit.is_file, "%s is missing" % UNIT_PATH
    return _redact(unit.content_string, secret_canaries)


def _digest(lock, tag):
    entry = lock.get("%s:%s" % (IMAGE, tag))
    assert entry and entry.get("digest"), "the lock file has no digest for %s:%s: %s" % (IMAGE, tag, lock)
    return entry["digest"]


def test_version_2_answers(host, call_module, default_address, http):
    """The server answers a completion (at least one token) and says it is version 2."""
    url = "http://%s:%d" % (default_address, PORT)
    # openai_smoke is the collection's own module (the same health wait, model list and streamed
    # completion the role runs after a deployment), so it runs on the host through Ansible. The API key
    # is passed as a template of the inventory variable: its value never enters this process, a command
    # line or a message (the module returns it masked).
    result = call_module("labfleet.vllm.openai_smoke", {
        "url": url, "model": MODEL, "api_key": "{{ vllm_server_api_key }}", "health_timeout": 60, "interval": 1})
    shown = dict((key, value) for key, value in result.items() if key != "invocation")
    assert not shown.get("failed"), "openai_smoke %s: %s" % (url, shown)
    assert int(shown["completion_tokens"]) >= 1, shown
    # /version is not behind the API key.
    status, body = http(url + "/version")[::2]  # (status, headers, body): the headers are not checked
    assert status == 200, "GET %s/version answered %s: %s" % (url, status, body)
    assert json.loads(body)["version"] == "2", body


def test_running_container_is_the_locked_version_2(host, lock):
    """The container runs the image ID the lock file recorded for version 2."""
    image = host.check_output("docker inspect --format %s vllm", "{{.Image}}")
    assert image == _digest(lock, "2"), "vllm runs %s; the lock file: %s" % (image, lock)


def test_unit_names_version_2_only(lock, unit_text):
    """The unit starts version 2 by its locked digest, neither version 1 nor the failed 2-notokens."""
    assert _digest(lock, "2") in unit_text, unit_text
    assert _digest(lock, "1") not in unit_text, unit_text
    assert _digest(lock, "2-notokens") not in unit_text, unit_text


def test_every_loaded_build_is_locked(lock):
    """2-exits, which never became healthy, was locked all the same."""
    assert "%s:2-exits" % IMAGE in lock, sorted(lock)


def test_env_file_is_root_only(host):
    """The env file (it holds the API key) kept mode 0600, owned by root, through the rollbacks."""
    env = host.file(ENV_PATH)
    assert env.is_file, "%s is missing" % ENV_PATH
    assert env.mode == 0o600, "%s has mode %o" % (ENV_PATH, env.mode)
    assert env.user == "root", "%s belongs to %s" % (ENV_PATH, env.user)
