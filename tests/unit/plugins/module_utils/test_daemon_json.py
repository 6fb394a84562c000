"""Unit tests for plugins/module_utils/formats/_daemon_json.py (merging settings into Docker's daemon.json)."""

import difflib
import json

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.formats import _daemon_json
from ansible_collections.labfleet.vllm.plugins.module_utils.formats._daemon_json import DaemonJsonError

PATH = "/etc/docker/daemon.json"

# What a site typically has before the role runs: the keys nvidia-docker2 used to wipe out
# (registry mirror, log options, data root), plus a runtime of its own.
SITE = """{
  "data-root": "/data/docker",
  "registry-mirrors": ["https://mirror.lab.example:5000"],
  "log-driver": "json-file",
  "log-opts": {"max-size": "100m", "max-file": "3"},
  "live-restore": true,
  "runtimes": {"other": {"path": "/usr/bin/other"}}
}
"""

NVIDIA = {"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}


def test_unknown_keys_survive_and_nvidia_runtime_is_added_next_to_others():
    result = _daemon_json.plan(SITE, NVIDIA, path=PATH)
    after = result["after"]
    assert result["changed"] is True
    assert result["changed_keys"] == ["runtimes.nvidia"]
    assert after["runtimes"] == {"other": {"path": "/usr/bin/other"}, "nvidia": {"path": "nvidia-container-runtime"}}
    before = json.loads(SITE)
    for key in ("data-root", "registry-mirrors", "log-driver", "log-opts", "live-restore"):
        assert after[key] == before[key]
    # The existing key order is kept, new keys come last.
    assert list(after) == list(before)


def test_second_merge_is_no_change():
    first = _daemon_json.plan(SITE, NVIDIA, path=PATH)
    second = _daemon_json.plan(first["after_text"], NVIDIA, path=PATH)
    assert second["changed"] is False
    assert second["changed_keys"] == []
    assert second["before_text"] == second["after_text"]


def test_formatting_alone_is_not_a_change():
    compact = json.dumps(_daemon_json.plan(SITE, NVIDIA)["after"], separators=(",", ":"))
    assert _daemon_json.plan(compact, NVIDIA)["changed"] is False


def test_nested_runtime_keys_merge_and_unknown_runtime_keys_stay():
    # What `nvidia-ctk runtime configure` writes: an "args" key Docker itself ignores.
    ctk = '{"runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}}'
    result = _daemon_json.plan(ctk, NVIDIA)
    assert result["changed"] is False
    assert result["after"]["runtimes"]["nvidia"] == {"args": [], "path": "nvidia-container-runtime"}

    moved = _daemon_json.plan(ctk, {"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}}})
    assert moved["changed_keys"] == ["runtimes.nvidia.path"]
    assert moved["after"]["runtimes"]["nvidia"] == {"args": [], "path": "/usr/bin/nvidia-container-runtime"}


def test_lists_and_scalars_replace_as_a_whole():
    result = _daemon_json.plan(SITE, {"registry-mirrors": ["https://other.example"], "live-restore": False})
    assert result["after"]["registry-mirrors"] == ["https://other.example"]
    assert result["after"]["live-restore"] is False
    assert sorted(result["changed_keys"]) == ["live-restore", "registry-mirrors"]


def test_object_replaces_a_scalar_of_the_same_name():
    result = _daemon_json.plan('{"features": "broken"}', {"features": {"cdi": True}})
    assert result["after"] == {"features": {"cdi": True}}
    assert result["changed_keys"] == ["features"]


def test_features_cdi_merges_with_other_features():
    result = _daemon_json.plan('{"features": {"buildkit": true}}', {"features": {"cdi": True}})
    assert result["after"] == {"features": {"buildkit": True, "cdi": True}}
    assert result["changed_keys"] == ["features.cdi"]


def test_json_types_are_compared_as_json():
    # In Python True == 1; in daemon.json they are different values.
    assert _daemon_json.plan('{"debug": 1}', {"debug": True})["changed"] is True
    assert _daemon_json.plan('{"max-concurrent-downloads": 3.0}', {"max-concurrent-downloads": 3})["changed"] is False
    assert _daemon_json.plan('{"x": null}', {"x": None})["changed"] is False
    assert _daemon_json.plan('{"x": null}', {"x": ""})["changed"] is True


@pytest.mark.parametrize("text", ["", "   \n\t\n"])
def test_empty_file_is_an_empty_configuration(text):
    result = _daemon_json.plan(text, NVIDIA, path=PATH)
    assert result["before"] == {}
    assert result["changed"] is True
    assert json.loads(result["after_text"]) == NVIDIA
    assert _daemon_json.plan(text, {}, path=PATH)["changed"] is False


def test_missing_file_is_created_only_when_something_is_set():
    created = _daemon_json.plan(None, NVIDIA, path=PATH)
    assert created["changed"] is True
    assert created["before_text"] == ""
    assert json.loads(created["after_text"]) == NVIDIA
    assert _daemon_json.plan(None, {}, path=PATH)["changed"] is False


@pytest.mark.parametrize(
    "text, fragment",
    [
        ('{"data-root": "/data/docker",\n  "log-opts": {"max-size": "10m"\n}', "Expecting ',' delimiter: line 3 column 2"),
        ('{"data-root": "/data/docker",}', "Expecting property name"),
        ("{'data-root': '/data/docker'}", "Expecting property name"),
        ('{"a": 1} // comment', "Extra data"),
        ('{"max-file": NaN}', "NaN is not a JSON value"),
    ],
)
def test_invalid_json_names_the_file_and_the_error(text, fragment):
    with pytest.raises(DaemonJsonError) as err:
        _daemon_json.plan(text, NVIDIA, path=PATH)
    message = str(err.value)
    assert message.startswith("/etc/docker/daemon.json is not valid JSON: ")
    assert fragment in message
    assert "left untouched" in message


@pytest.mark.parametrize(
    "text, kind",
    [("[]", "an array"), ('"nvidia"', "a string"), ("3", "a number"), ("null", "null"), ("true", "a boolean")],
)
def test_top_level_must_be_an_object(text, kind):
    with pytest.raises(DaemonJsonError) as err:
        _daemon_json.parse_daemon_json(text, PATH)
    assert str(err.value).startswith("/etc/docker/daemon.json must hold a JSON object")
    assert kind in str(err.value)


def test_duplicate_keys_are_refused_not_silently_dropped():
    with pytest.raises(DaemonJsonError) as err:
        _daemon_json.parse_daemon_json('{"log-opts": {"max-size": "1m", "max-size": "2m"}}', PATH)
    assert '"max-size" appears twice' in str(err.value)


def test_bytes_must_be_utf8_without_bom():
    assert _daemon_json.parse_daemon_json(u'{"data-root": "/srv/d\u00f6cker"}'.encode("utf-8")) == {"data-root": u"/srv/d\u00f6cker"}
    with pytest.raises(DaemonJsonError, match="not UTF-8"):
        _daemon_json.parse_daemon_json(b'{"data-root": "/srv/d\xf6cker"}', PATH)
    with pytest.raises(DaemonJsonError, match="byte order mark"):
        _daemon_json.parse_daemon_json(u'\ufeff{}'.encode("utf-8"), PATH)


def test_remove_only_while_the_value_matches():
    doc = '{"default-runtime": "nvidia", "runtimes": {"nvidia": {"path": "x"}}}'
    removals = [{"keys": ["default-runtime"], "value": "nvidia"}]
    result = _daemon_json.plan(doc, {}, removals)
    assert "default-runtime" not in result["after"]
    assert result["changed_keys"] == ["default-runtime"]

    kept = _daemon_json.plan('{"default-runtime": "runc"}', {}, removals)
    assert kept["changed"] is False
    assert kept["after"] == {"default-runtime": "runc"}


def test_remove_nested_and_missing_paths():
    doc = '{"runtimes": {"nvidia": {"path": "x"}, "other": {"path": "y"}}, "debug": true}'
    result = _daemon_json.plan(doc, {}, [{"keys": ["runtimes", "nvidia"]}, {"keys": ["no", "such"]},
                                         {"keys": ["debug", "deeper"]}, {"keys": []}])
    assert result["after"] == {"runtimes": {"other": {"path": "y"}}, "debug": True}
    assert result["changed_keys"] == ["runtimes.nvidia"]


def test_merge_does_not_modify_its_inputs():
    current = json.loads(SITE)
    snapshot = json.loads(SITE)
    settings = {"runtimes": {"nvidia": {"path": "p"}}}
    _daemon_json.merge_settings(current, settings)
    _daemon_json.remove_keys(current, [{"keys": ["runtimes", "other"]}])
    assert current == snapshot
    assert settings == {"runtimes": {"nvidia": {"path": "p"}}}


def test_rendering_is_stable_utf8_with_a_final_newline():
    text = _daemon_json.render({"data-root": u"/srv/d\u00f6cker", "log-opts": {"max-size": "10m"}}, indent=2)
    assert text == u'{\n  "data-root": "/srv/d\u00f6cker",\n  "log-opts": {\n    "max-size": "10m"\n  }\n}\n'


def test_diff_texts_show_only_semantic_changes():
    # A compact file: a byte diff would touch every line, the module's diff only the new runtime.
    result = _daemon_json.plan('{"debug":true,"runtimes":{"other":{"path":"o"}}}', NVIDIA)
    changes = [line for line in difflib.ndiff(result["before_text"].splitlines(), result["after_text"].splitlines())
               if line[:1] in "+-"]
    assert changes == ["+         },", '+         "nvidia": {', '+             "path": "nvidia-container-runtime"']


def test_key_labels_quote_keys_with_dots():
    result = _daemon_json.plan('{"runtimes": {}}', {"runtimes": {"io.containerd.runc.v2": {"path": "runc"}}})
    assert result["changed_keys"] == ['runtimes."io.containerd.runc.v2"']
    assert _daemon_json.plan("{}", {"runtimes": {"nvidia": {"path": "p"}}})["changed_keys"] == ["runtimes"]
