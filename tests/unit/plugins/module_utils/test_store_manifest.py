# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""plugins/module_utils/store/_manifest.py: the manifest of a store revision - every model file with
size and sha256, the gate's input, canonical text; hashes reused from the cache; strict parsing."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import importlib.util
import json
import os

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.probes._model import GATE_KEYS
from ansible_collections.labfleet.vllm.plugins.module_utils.store import _manifest as M

_BUILD = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "model", "build.py")
_spec = importlib.util.spec_from_file_location("labfleet_model_fixture_build_store", _BUILD)
B = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(B)

SHA = "a" * 64


def model(path, extra=None):
    os.makedirs(path, exist_ok=True)
    B.model_dir(path, "plain", "BF16")
    for rel, data in (extra or {}).items():
        full = os.path.join(path, rel)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as handle:
            handle.write(data)
    return path


def sizes(path):
    return sum(info.st_size for _rel, info in M.scan_dir(path))


def good_manifest():
    return {"format": M.FORMAT, "name": "m", "revision": "r1", "created": "2026-01-01T00:00:00Z", "total_bytes": 3,
            "files": [{"path": "config.json", "size": 3, "sha256": SHA}], "gate": {}, "quantization": {},
            "config": {}, "source": None}


def test_manifest_lists_every_file_with_sha256_and_the_gate(tmp_path):
    extra = {"sub/dir/extra.bin": b"x" * 1000, ".git/HEAD": b"ref", ".cache/state": b"s", "sub/.hidden": b"h"}
    path = model(str(tmp_path / "llama" / "r1"), extra)
    result = M.ensure_revision(path)
    assert result["changed"] and result["name"] == "llama" and result["revision"] == "r1"
    text = open(result["manifest_path"]).read()
    assert M.manifest_sha256(text) == result["manifest_sha256"]
    assert text == M.dump_json(json.loads(text)) and text.endswith("}\n")
    manifest = M.parse_manifest(text, "test")
    paths = [f["path"] for f in manifest["files"]]
    assert paths == sorted(paths) == ["config.json", "model.safetensors", "sub/dir/extra.bin", "tokenizer_config.json"]
    assert result["total_bytes"] == sizes(path) == manifest["total_bytes"]
    assert result["hashed_bytes"] == sizes(path)
    extra = [f for f in manifest["files"] if f["path"] == "sub/dir/extra.bin"][0]
    assert extra["sha256"] == M.hashlib.sha256(b"x" * 1000).hexdigest()
    assert sorted(manifest["gate"]) == sorted(GATE_KEYS) and manifest["gate"]["num_hidden_layers"] == 2
    assert "disk_free_bytes" not in manifest["gate"] and manifest["quantization"]["quantized"] is False
    assert manifest["config"]["model_type"] == "llama" and manifest["source"] is None


def test_rerun_is_converged_and_reuses_hashes_until_a_file_changes(tmp_path):
    path = model(str(tmp_path / "m" / "r1"))
    first = M.ensure_revision(path)
    created = json.load(open(first["manifest_path"]))["created"]
    again = M.ensure_revision(path)
    assert not again["changed"] and again["hashed_bytes"] == 0
    assert again["manifest_sha256"] == first["manifest_sha256"]
    # a touched file is hashed again, its content is the same: no change, created kept
    os.utime(os.path.join(path, "config.json"), ns=(1, 1))
    touched = M.ensure_revision(path)
    assert not touched["changed"] and touched["hashed_bytes"] == os.path.getsize(os.path.join(path, "config.json"))
    assert json.load(open(first["manifest_path"]))["created"] == created
    assert M.ensure_revision(path, rehash=True)["hashed_bytes"] == sizes(path)
    with open(os.path.join(path, "tokenizer_config.json"), "a") as handle:
        handle.write(" ")
    changed = M.ensure_revision(path)
    assert changed["changed"] and changed["manifest_sha256"] != first["manifest_sha256"]


def test_check_mode_writes_nothing(tmp_path):
    path = model(str(tmp_path / "m" / "r1"))
    result = M.ensure_revision(path, check_mode=True)
    assert result["changed"] and sorted(os.listdir(path)) == ["config.json", "model.safetensors",
                                                              "tokenizer_config.json"]
    src = model(str(tmp_path / "src"))
    result = M.ensure_revision(str(tmp_path / "m" / "r2"), src=src, check_mode=True)
    assert result["changed"] and not os.path.exists(str(tmp_path / "m" / "r2"))


def test_src_is_copied_whole_and_idempotently(tmp_path):
    src = model(str(tmp_path / "src"), {"sub/a.bin": b"a" * 100})
    dest = str(tmp_path / "store" / "m" / "r1")
    result = M.ensure_revision(dest, src=src)
    assert result["changed"] and result["files"] == 4
    assert sorted(os.listdir(os.path.dirname(dest))) == ["r1"]  # no temporary sibling left
    assert open(os.path.join(dest, "sub", "a.bin"), "rb").read() == b"a" * 100
    again = M.ensure_revision(dest, src=src)
    assert not again["changed"] and again["manifest_sha256"] == result["manifest_sha256"]
    with open(os.path.join(src, "sub", "a.bin"), "wb") as handle:
        handle.write(b"b" * 100)
    with pytest.raises(M.ManifestError, match="other files than src.*new revision, or set force"):
        M.ensure_revision(dest, src=src)
    assert open(os.path.join(dest, "sub", "a.bin"), "rb").read() == b"a" * 100
    forced = M.ensure_revision(dest, src=src, force=True)
    assert forced["changed"] and open(os.path.join(dest, "sub", "a.bin"), "rb").read() == b"b" * 100
    assert sorted(os.listdir(os.path.dirname(dest))) == ["r1"]


def test_converted_copy_names_its_source(tmp_path):
    src_rev = M.ensure_revision(model(str(tmp_path / "m" / "r1")))
    source = {"name": "m", "revision": "r1", "manifest_sha256": src_rev["manifest_sha256"],
              "files": {"model.safetensors": SHA}, "converter": "labfleet.vllm.nvfp4_dequantize",
              "settings": {"max_shard_size": "5GB"}}
    fp16 = M.ensure_revision(model(str(tmp_path / "m" / "r1+fp16")), source=source)
    assert fp16["revision"] == "r1+fp16"
    assert M.read_manifest_file(fp16["manifest_path"])[0]["source"] == source
    with pytest.raises(M.ManifestError, match="manifest_sha256 must be 64"):
        M.ensure_revision(str(tmp_path / "m" / "r1+fp16"), source=dict(source, manifest_sha256="xyz"))
    with pytest.raises(M.ManifestError, match="source must be null or an object"):
        M.ensure_revision(str(tmp_path / "m" / "r1+fp16"), source={"name": "m"})


@pytest.mark.parametrize("name", ["", "-x", ".", "..", "a/b", "a b", "a\nb", "x" * 129, u"caf\u00e9", None])
def test_names_and_revisions_follow_the_rule(name):
    with pytest.raises(M.ManifestError, match="ASCII letters"):
        M.check_name(name, "revision")


@pytest.mark.parametrize("name", ["llama-3.1-8b", "2026-01+fp16", "r1+gptq-g128", "A_b", "x" * 128])
def test_good_names(name):
    assert M.check_name(name, "name") == name


@pytest.mark.parametrize("path,problem", [
    ("../etc/passwd", "\"..\""), ("a/../../b", "\"..\""), ("/etc/passwd", "absolute"), ("a\\b", "backslash"),
    ("a\nb", "control"), ("a\x00b", "control"), ("", "non-empty"), ("a//b", "empty"), ("./a", "\".\""),
    (".labfleet-fetch.json", "reserved"), ("x/a.part/.y", "reserved"), (M.MANIFEST_FILE, "manifest itself"),
    ("a" * 300, "longer than 255"),
])
def test_parse_manifest_refuses_unsafe_paths(path, problem):
    data = good_manifest()
    data["files"][0]["path"] = path
    with pytest.raises(M.ManifestError) as info:
        M.parse_manifest(json.dumps(data), "store")
    assert problem in str(info.value) and "store" in str(info.value)


@pytest.mark.parametrize("change,problem", [
    (lambda d: d.update(format="other/1"), "format must be"),
    (lambda d: d["files"][0].update(size=-1), "size must be an integer >= 0"),
    (lambda d: d["files"][0].update(size=True), "size must be an integer"),
    (lambda d: d["files"][0].update(sha256="ABC"), "64 lowercase hex"),
    (lambda d: d["files"].append(dict(d["files"][0])), "listed twice"),
    (lambda d: d["files"].append({"path": "config.json/x", "size": 0, "sha256": SHA}), "both as a file"),
    (lambda d: d.update(total_bytes=4), "total_bytes"),
    (lambda d: d.pop("gate"), "lacks gate"),
    (lambda d: d.update(extra=1), "unknown keys extra"),
    (lambda d: d.update(name="../x"), "name must be"),
    (lambda d: d["files"][0].update(mode=1), "exactly path, size and sha256"),
    (lambda d: d.update(source={"name": "m"}), "source must be null"),
])
def test_parse_manifest_is_strict(change, problem):
    data = good_manifest()
    change(data)
    with pytest.raises(M.ManifestError, match=problem):
        M.parse_manifest(json.dumps(data), "store")


def test_parse_manifest_refuses_non_json_and_huge_text():
    assert M.parse_manifest(json.dumps(good_manifest()), "x")["name"] == "m"
    for text, problem in (("{", "not valid JSON"), (b"\xff", "not UTF-8"), ("[]", "JSON object"),
                          ("[" * 100000, "not valid JSON"), (" " * (M.MAX_MANIFEST_BYTES + 1), "larger than")):
        with pytest.raises(M.ManifestError, match=problem):
            M.parse_manifest(text, "x")


def test_canonical_text_is_stable():
    one = good_manifest()
    two = json.loads(json.dumps(one, indent=4))
    assert M.manifest_sha256(M.dump_json(one)) == M.manifest_sha256(M.dump_json(copy.deepcopy(two)))
    with pytest.raises(M.ManifestError, match="NaN"):
        M.dump_json({"x": float("nan")})


def test_scan_refuses_links_out_special_files_and_odd_names(tmp_path):
    path = model(str(tmp_path / "m" / "r1"))
    os.symlink("config.json", os.path.join(path, "linked.json"))  # inside: listed, content followed
    assert "linked.json" in [rel for rel, _info in M.scan_dir(path)]
    outside = str(tmp_path / "secret")
    open(outside, "w").write("s")
    os.symlink(outside, os.path.join(path, "out.json"))
    with pytest.raises(M.ManifestError, match="pointing outside"):
        M.ensure_revision(path)
    os.unlink(os.path.join(path, "out.json"))
    os.mkfifo(os.path.join(path, "pipe"))
    with pytest.raises(M.ManifestError, match="not a regular file"):
        M.ensure_revision(path)
    os.unlink(os.path.join(path, "pipe"))
    open(os.path.join(path, "bad\nname"), "w").write("x")
    with pytest.raises(M.ManifestError, match="control character"):
        M.ensure_revision(path)
    os.unlink(os.path.join(path, "bad\nname"))
    os.symlink(str(tmp_path), os.path.join(path, "dirlink"))
    with pytest.raises(M.ManifestError, match="link to a directory"):
        M.ensure_revision(path)


def test_a_directory_that_is_no_model_is_refused(tmp_path):
    path = str(tmp_path / "m" / "r1")
    os.makedirs(path)
    open(os.path.join(path, "weights.bin"), "w").write("x")
    with pytest.raises(M.ManifestError, match="config.json.*complete model directories"):
        M.ensure_revision(path)
    with pytest.raises(M.ManifestError, match="is not a directory"):
        M.ensure_revision(str(tmp_path / "m" / "missing"))


def test_state_file_is_a_cache(tmp_path):
    path = model(str(tmp_path / "m" / "r1"))
    M.ensure_revision(path)
    with open(os.path.join(path, M.HASH_STATE_FILE), "w") as handle:
        handle.write("{broken")
    result = M.ensure_revision(path)
    assert not result["changed"] and result["hashed_bytes"] == sizes(path)


def test_hashing_runs_in_parallel_threads(tmp_path, monkeypatch):
    path = model(str(tmp_path / "m" / "r1"), dict(("w%d.bin" % i, b"w" * 5000) for i in range(8)))
    import threading
    seen = set()
    real = M.hash_one

    def spy(full, info):
        seen.add(threading.current_thread().name)
        return real(full, info)

    monkeypatch.setattr(M, "hash_one", spy)
    monkeypatch.setattr(M.os, "cpu_count", lambda: 4)
    manifest, _state, stats = M.build_manifest(path, "m", "r1")
    assert stats["hashed_files"] == len(manifest["files"]) == 11 and len(seen) >= 1
    assert all(name.startswith("ThreadPoolExecutor") for name in seen)


def test_rerun_with_src_hashes_nothing(tmp_path):
    src = model(str(tmp_path / "src"))
    dest = str(tmp_path / "store" / "m" / "r1")
    M.ensure_revision(dest, src=src)
    again = M.ensure_revision(dest, src=src)
    assert not again["changed"] and again["hashed_bytes"] == 0


def test_verify_revision_finds_missing_damaged_and_extra_files(tmp_path):
    path = model(str(tmp_path / "m" / "r1"), {"a.bin": b"a" * 100, "b.bin": b"b" * 100})
    M.ensure_revision(path)
    ok = M.verify_revision(path)
    assert (ok["missing"], ok["mismatched"], ok["extra"], ok["hashed_bytes"]) == ([], [], [], 0)
    assert M.verify_revision(path, full=True)["hashed_bytes"] == sizes(path)
    os.unlink(os.path.join(path, "a.bin"))
    info = os.stat(os.path.join(path, "b.bin"))
    with open(os.path.join(path, "b.bin"), "wb") as handle:
        handle.write(b"c" * 100)
    os.utime(os.path.join(path, "b.bin"), ns=(info.st_atime_ns, info.st_mtime_ns))
    open(os.path.join(path, "new.bin"), "w").write("n")
    quick = M.verify_revision(path)
    assert quick["missing"] == ["a.bin"] and quick["mismatched"] == [] and quick["extra"] == ["new.bin"]
    assert M.verify_revision(path, full=True)["mismatched"] == ["b.bin"]
    with pytest.raises(M.ManifestError, match="add the revision first"):
        M.verify_revision(str(tmp_path / "m"))


def test_model_store_script(tmp_path, capsys):
    script = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "scripts", "model-store.py")
    with open(script) as handle:
        assert not handle.readline().startswith("#!")
    spec = importlib.util.spec_from_file_location("labfleet_model_store_script", script)
    S = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(S)
    src = model(str(tmp_path / "src"))
    root = str(tmp_path / "store")
    assert S.main(["add", src, "--store", root, "--name", "m", "--revision", "r1"]) == 0
    assert capsys.readouterr().out.startswith("added m/r1: 3 files, 2.9 MB, manifest sha256 ")
    assert S.main(["add", src, "--store", root, "--name", "m", "--revision", "r1"]) == 0
    assert "unchanged m/r1" in capsys.readouterr().out
    assert S.main(["verify", "--store", root, "--name", "m", "--revision", "r1", "--full"]) == 0
    assert "GB/s" in capsys.readouterr().out
    assert S.main(["list", "--store", root]) == 0
    assert capsys.readouterr().out.startswith("m/r1: 3 files, 2.9 MB, sha256 ")
    with open(os.path.join(root, "m", "r1", "config.json"), "a") as handle:
        handle.write(" ")
    assert S.main(["verify", "--store", root, "--name", "m", "--revision", "r1"]) == 1
    assert "damaged (size or sha256): config.json" in capsys.readouterr().out
    assert S.main(["add", src, "--store", root, "--name", "m", "--revision", "../x"]) == 1
    assert "revision must be" in capsys.readouterr().err
