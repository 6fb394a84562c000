# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""labfleet.vllm.model_fetch and plugins/module_utils/store/_fetch.py against a store served over HTTP
the way nginx serves it (range requests answered 206 with Content-Range, 416 beyond the end): first
fetch, converged re-run, resumed download, repairs, pinning, atomic publish and pruning."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import http.server
import importlib.util
import os
import shutil
import socket
import sys
import threading
import urllib.parse

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.store import _fetch as F
from ansible_collections.labfleet.vllm.plugins.module_utils.store import _manifest as M
from ansible_collections.labfleet.vllm.plugins.modules import model_fetch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_hostile_modules import run_module  # noqa: E402  (exit_json / fail_json caught)

_BUILD = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "model", "build.py")
_spec = importlib.util.spec_from_file_location("labfleet_model_fixture_build_fetch", _BUILD)
B = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(B)

CHUNK = 256 * 1024
WEIGHTS = "model.safetensors"


class Handler(http.server.BaseHTTPRequestHandler):
    """GET of the store's files as nginx answers: 200, or 206 + Content-Range for ``Range: bytes=N-``,
    416 when N is at or beyond the end; drops the connection after ``drop_after[path]`` body bytes."""

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):  # noqa: N802  (http.server's name)
        store = self.server.store
        path = urllib.parse.unquote(self.path)
        full = os.path.join(store.root, path.lstrip("/"))
        record = {"path": path, "range": self.headers.get("Range"), "status": None, "sent": 0}
        store.requests.append(record)
        if ".." in path.split("/") or not os.path.isfile(full):
            record["status"] = 404
            self.send_error(404)
            return
        size = os.path.getsize(full)
        start = 0
        wanted = self.headers.get("Range")
        if wanted and not store.ignore_range:
            start = int(wanted.split("=", 1)[1].split("-", 1)[0])
            if start >= size:
                record["status"] = 416
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % size)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, size - 1, size))
            record["status"] = 206
        else:
            self.send_response(200)
            record["status"] = 200
        self.send_header("Content-Length", str(size - start))
        self.end_headers()
        limit = store.drop_after.pop(path, None)
        with open(full, "rb") as handle:
            handle.seek(start)
            while True:
                data = handle.read(16384)
                if not data:
                    break
                if limit is not None and record["sent"] + len(data) > limit:
                    data = data[:limit - record["sent"]]
                    self.wfile.write(data)
                    record["sent"] += len(data)
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(data)
                record["sent"] += len(data)


class Store(object):
    def __init__(self, root):
        self.root = root
        self.requests = []
        self.drop_after = {}
        self.ignore_range = False
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.store = self
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()
        self.url = "http://127.0.0.1:%d/models" % self.server.server_address[1]
        self.root_prefix = "/models"

    def add(self, name, revision, extra=None):
        src = os.path.join(self.root, ".src-%s-%s" % (name, revision))
        os.makedirs(src)
        B.model_dir(src, "plain", "BF16")
        for rel, data in (extra or {}).items():
            with open(os.path.join(src, rel), "wb") as handle:
                handle.write(data)
        result = M.ensure_revision(os.path.join(self.root, "models", name, revision), src=src)
        shutil.rmtree(src)
        return result

    def file(self, name, revision, rel):
        return os.path.join(self.root, "models", name, revision, rel)

    def sent(self, suffix=None):
        return sum(r["sent"] for r in self.requests if suffix is None or r["path"].endswith(suffix))

    def model_bytes_sent(self):
        return sum(r["sent"] for r in self.requests if not r["path"].endswith(M.MANIFEST_FILE))

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def store(tmp_path):
    served = Store(str(tmp_path / "store"))
    yield served
    served.close()


def listing(revs):
    """The entries of <dest>.revisions but the fetch's lock file."""
    return sorted(e for e in os.listdir(revs) if e != ".lock")


def fetch(store, dest, revision="r1", **kwargs):
    kwargs.setdefault("chunk_size", CHUNK)
    return F.fetch_revision(store.url, "m", revision, str(dest), **kwargs)


def failure(store, dest, revision="r1", **kwargs):
    with pytest.raises(F.FetchError) as info:
        fetch(store, dest, revision, **kwargs)
    return info.value


def test_first_fetch_then_converged(store, tmp_path):
    added = store.add("m", "r1")
    dest = tmp_path / "srv" / "model"
    result = fetch(store, dest)
    assert result["changed"] and result["bytes_fetched"] == added["total_bytes"] == store.model_bytes_sent()
    assert result["files_fetched"] == added["files"] == 3 and result["files_verified"] == 0
    assert result["manifest_sha256"] == added["manifest_sha256"] and result["previous"] is None
    assert os.readlink(str(dest)) == "model.revisions/r1" and result["path"] == str(tmp_path / "srv" / "model.revisions"
                                                                                    / "r1")
    for rel in ("config.json", WEIGHTS):
        assert open(str(dest / rel), "rb").read() == open(store.file("m", "r1", rel), "rb").read()
    assert listing(str(tmp_path / "srv" / "model.revisions")) == ["r1"]  # no staging left
    store.requests[:] = []
    again = fetch(store, dest)
    assert not again["changed"] and again["bytes_fetched"] == 0 and again["files_verified"] == 3
    assert [r["path"] for r in store.requests] == ["/models/m/r1/" + M.MANIFEST_FILE]
    assert again["pruned"] == [] and again["files_repaired"] == []


def test_interrupted_download_fails_clearly_and_resumes(store, tmp_path):
    added = store.add("m", "r1")
    dest = tmp_path / "model"
    store.drop_after["/models/m/r1/" + WEIGHTS] = 1000000
    err = failure(store, dest)
    assert "stopped after" in str(err) and "run again: the fetch resumes from byte" in str(err) and WEIGHTS in str(err)
    assert not os.path.lexists(str(dest))  # nothing published
    part = os.path.join(str(dest) + ".revisions", ".r1.partial", WEIGHTS + ".part")
    kept = os.path.getsize(part)
    assert 1000000 - CHUNK <= kept <= 1000000
    first_sent = store.model_bytes_sent()
    result = fetch(store, dest)
    size = os.path.getsize(store.file("m", "r1", WEIGHTS))
    ranged = [r for r in store.requests if r["range"]]
    assert ranged == [{"path": "/models/m/r1/" + WEIGHTS, "range": "bytes=%d-" % kept, "status": 206,
                       "sent": size - kept}]
    assert result["bytes_resumed"] == kept and result["restarts"] == 0
    resent = first_sent + result["bytes_fetched"] - added["total_bytes"]
    assert 0 <= resent <= CHUNK
    assert open(str(dest / WEIGHTS), "rb").read() == open(store.file("m", "r1", WEIGHTS), "rb").read()


def test_a_store_that_ignores_ranges_starts_over(store, tmp_path):
    store.add("m", "r1")
    dest = tmp_path / "model"
    store.drop_after["/models/m/r1/" + WEIGHTS] = 500000
    failure(store, dest)
    store.ignore_range = True
    result = fetch(store, dest)
    assert result["restarts"] == 1 and result["bytes_resumed"] == 0
    assert open(str(dest / WEIGHTS), "rb").read() == open(store.file("m", "r1", WEIGHTS), "rb").read()


def test_damaged_file_is_repaired_copy_on_write(store, tmp_path):
    store.add("m", "r1")
    dest = tmp_path / "model"
    fetch(store, dest)
    revision_dir = os.path.realpath(str(dest))
    weights = os.path.join(revision_dir, WEIGHTS)
    config_inode = os.stat(os.path.join(revision_dir, "config.json")).st_ino
    before = os.stat(weights)
    with open(weights, "r+b") as handle:  # same size, other bytes, mtime moves
        handle.seek(100)
        handle.write(b"\xff" * 16)
    result = fetch(store, dest)
    assert result["changed"] and result["files_repaired"] == [WEIGHTS]
    assert result["bytes_fetched"] == before.st_size and result["files_verified"] == 2
    assert os.readlink(str(dest)) == "model.revisions/r1"
    repaired = os.path.join(os.path.realpath(str(dest)), WEIGHTS)
    assert open(repaired, "rb").read() == open(store.file("m", "r1", WEIGHTS), "rb").read()
    assert os.stat(repaired).st_ino != before.st_ino  # a new file, not written into the served one
    assert os.stat(os.path.join(revision_dir, "config.json")).st_ino == config_inode  # good files hard-linked
    aside = [e for e in listing(str(dest) + ".revisions") if ".replaced-" in e]
    assert len(aside) == 1  # the damaged copy is kept until the next fetch
    assert fetch(store, dest)["changed"] and not [e for e in listing(str(dest) + ".revisions")
                                                  if e.startswith(".")]


def test_damage_with_mtime_restored_is_seen_only_by_full_verify(store, tmp_path):
    store.add("m", "r1")
    dest = tmp_path / "model"
    fetch(store, dest)
    weights = os.path.join(os.path.realpath(str(dest)), WEIGHTS)
    info = os.stat(weights)
    with open(weights, "r+b") as handle:
        handle.seek(5000)
        handle.write(b"\x00\x01\x02")
    os.utime(weights, ns=(info.st_atime_ns, info.st_mtime_ns))
    quick = fetch(store, dest)
    assert not quick["changed"] and quick["bytes_fetched"] == 0
    full = fetch(store, dest, verify="full")
    assert full["changed"] and full["files_repaired"] == [WEIGHTS] and full["bytes_fetched"] == info.st_size
    assert full["verify"] == "full"
    assert open(os.path.join(str(dest), WEIGHTS), "rb").read() == open(store.file("m", "r1", WEIGHTS), "rb").read()
    cleanup = fetch(store, dest, verify="full")  # removes the damaged copy moved aside, fetches nothing
    assert cleanup["changed"] and cleanup["bytes_fetched"] == 0 and cleanup["files_verified"] == 3
    assert not fetch(store, dest, verify="full")["changed"]


def test_unreachable_store_and_missing_revision_change_nothing(store, tmp_path):
    store.add("m", "r1")
    dest = tmp_path / "model"
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    with pytest.raises(F.FetchError) as info:
        F.fetch_revision("http://user:secret@127.0.0.1:%d/models" % port, "m", "r1", str(dest), timeout=5)
    msg = str(info.value)
    assert msg.startswith("cannot reach the model store at http://127.0.0.1:%d/models (" % port)
    assert "playbooks/model-store.yml" in msg and "secret" not in msg
    err = failure(store, dest, revision="r9")
    assert "HTTP 404" in str(err) and "no revision r9 of m" in str(err)
    assert os.listdir(str(tmp_path)) == ["store"]


def test_manifest_pin(store, tmp_path):
    added = store.add("m", "r1")
    dest = tmp_path / "model"
    err = failure(store, dest, manifest_sha256_pin="0" * 64)
    assert "the preflight judged another manifest" in str(err) and added["manifest_sha256"] in str(err)
    assert not os.path.lexists(str(dest) + ".revisions")
    assert fetch(store, dest, manifest_sha256_pin=added["manifest_sha256"].upper())["changed"]


def test_link_switches_only_when_the_new_revision_is_complete(store, tmp_path):
    store.add("m", "r1")
    store.add("m", "r2", {"extra.bin": b"2" * 300000})
    dest = tmp_path / "model"
    fetch(store, dest)
    store.drop_after["/models/m/r2/extra.bin"] = 100000
    failure(store, dest, revision="r2")
    assert os.readlink(str(dest)) == "model.revisions/r1"
    assert listing(str(dest) + ".revisions") == [".r2.partial", "r1"]
    result = fetch(store, dest, revision="r2")
    assert os.readlink(str(dest)) == "model.revisions/r2" and result["previous"] == "r1"
    # the files r1 shares were hard-linked from it before the drop and are kept; extra.bin resumed
    assert result["files_verified"] == 3 and result["files_fetched"] == 1 and result["files_reused"] == 0
    assert result["bytes_resumed"] > 0 and result["bytes_fetched"] <= 300000 - result["bytes_resumed"] + CHUNK


def test_prune_keeps_previous_new_and_protected(store, tmp_path):
    for rev in ("r1", "r2", "r3", "r4"):
        store.add("m", rev, {"rev.txt": rev.encode()})
    dest = tmp_path / "model"
    revs = str(dest) + ".revisions"
    assert fetch(store, dest, "r1")["pruned"] == []
    assert fetch(store, dest, "r2")["pruned"] == []
    result = fetch(store, dest, "r3")
    assert result["pruned"] == ["r1"] and listing(revs) == ["r2", "r3"]
    result = fetch(store, dest, "r4", keep_revisions=1)  # the previous one stays even so
    assert result["pruned"] == ["r2"] and listing(revs) == ["r3", "r4"]
    result = fetch(store, dest, "r1", keep_revisions=1, protect=["r3"])
    assert result["pruned"] == [] and listing(revs) == ["r1", "r3", "r4"]
    result = fetch(store, dest, "r1", keep_revisions=1)  # the link pointed to r1 already: r4 is no longer previous
    assert result["pruned"] == ["r4", "r3"] and listing(revs) == ["r1"]


def test_a_real_directory_or_file_at_dest_is_refused(store, tmp_path):
    store.add("m", "r1")
    dest = tmp_path / "model"
    dest.mkdir()
    (dest / "config.json").write_text("{}")
    err = failure(store, dest)
    assert str(err) == ("%s is a directory the store does not manage; move it away (or set the model path "
                        "elsewhere) - nothing was changed" % dest)
    assert sorted(os.listdir(str(tmp_path))) == ["model", "store"] and store.requests == []
    os.unlink(str(dest / "config.json"))
    os.rmdir(str(dest))
    dest.write_text("x")
    assert "is a file the store does not manage" in str(failure(store, dest))


def test_path_traversal_in_a_manifest_is_refused(store, tmp_path):
    store.add("m", "r1")
    manifest_path = store.file("m", "r1", M.MANIFEST_FILE)
    text = open(manifest_path).read().replace('"path": "config.json"', '"path": "../../../evil"')
    with open(manifest_path, "w") as handle:
        handle.write(text)
    dest = tmp_path / "model"
    err = failure(store, dest)
    assert "the store's manifest is not usable" in str(err) and "\"..\"" in str(err)
    assert os.listdir(str(tmp_path)) == ["store"]


def test_check_mode_writes_nothing(store, tmp_path):
    added = store.add("m", "r1")
    dest = tmp_path / "model"
    result = fetch(store, dest, check_mode=True)
    assert result["changed"] and result["bytes_fetched"] == 0 and result["pending_bytes"] == added["total_bytes"]
    assert sorted(result["pending"]) == ["config.json", WEIGHTS, "tokenizer_config.json"]
    assert os.listdir(str(tmp_path)) == ["store"]
    fetch(store, dest)
    result = fetch(store, dest, check_mode=True, verify="full")
    assert not result["changed"] and result["pending"] == [] and result["files_verified"] == 3


def test_not_enough_disk_fails_before_fetching(store, tmp_path):
    store.add("m", "r1")
    dest = tmp_path / "model"
    err = failure(store, dest, free_bytes=lambda path: 1000)
    assert "not enough free disk" in str(err) and "1000 free" in str(err)
    assert store.model_bytes_sent() == 0 and os.listdir(str(tmp_path)) == ["store"]
    store.add("m", "r2", {"rev.txt": b"two"})
    fetch(store, dest)
    # a later revision needs only what no fetched revision holds
    assert fetch(store, dest, "r2", free_bytes=lambda path: F.DISK_MARGIN + 3)["files_reused"] == 3
    store.add("m", "r3", {"rev.txt": b"three", "big.bin": b"b" * 5000})
    err = failure(store, dest, "r3", free_bytes=lambda path: F.DISK_MARGIN + 5004)
    assert "5005 bytes still to fetch" in str(err) and os.readlink(str(dest)) == "model.revisions/r2"


def test_a_file_the_store_serves_wrong_fails_naming_it(store, tmp_path):
    store.add("m", "r1")
    with open(store.file("m", "r1", "config.json"), "a") as handle:
        handle.write(" ")
    err = failure(store, tmp_path / "model")
    assert "config.json of m revision r1" in str(err) and "twice" in str(err) and err.progress["restarts"] == 1
    assert not os.path.lexists(str(tmp_path / "model"))


def test_options_are_checked():
    for kwargs, problem in ((dict(url="ftp://x/"), "http:// or https://"), (dict(revision="../x"), "revision must be"),
                            (dict(dest="relative"), "absolute path"), (dict(keep_revisions=0), "1 or more"),
                            (dict(verify="slow"), "verify="), (dict(manifest_sha256_pin="xyz"), "64 hex"),
                            (dict(chunk_size=10), "chunk_size"), (dict(protect=["a/b"]), "protect")):
        args = dict(url="http://store/", name="m", revision="r1", dest="/srv/model")
        args.update(kwargs)
        with pytest.raises(F.StoreError, match=problem):
            F.fetch_revision(**args)


def test_module_runs_and_fails_with_its_counters(store, tmp_path):
    added = store.add("m", "r1")
    dest = str(tmp_path / "model")
    args = {"url": store.url, "name": "m", "revision": "r1", "dest": dest, "chunk_size": CHUNK,
            "headers": {"Authorization": "Bearer s3cret"}}
    store.drop_after["/models/m/r1/" + WEIGHTS] = 200000
    kind, result = run_module(model_fetch, args)
    assert kind == "fail" and result["msg"].startswith("model_fetch: the download of") and result["bytes_fetched"] > 0
    kind, result = run_module(model_fetch, args)
    assert kind == "exit" and result["changed"] and result["bytes_resumed"] > 0
    assert sorted(result) == sorted(["changed", "revision", "path", "previous", "manifest_sha256", "bytes_fetched",
                                     "bytes_resumed", "restarts", "files_fetched", "files_verified", "files_reused", "files_repaired",
                                     "verify", "seconds", "pruned", "pending", "pending_bytes"])
    assert "s3cret" not in repr(result) and result["manifest_sha256"] == added["manifest_sha256"]
    kind, result = run_module(model_fetch, dict(args, _ansible_check_mode=True))
    assert kind == "exit" and not result["changed"]


def test_repair_of_a_revision_the_link_does_not_point_at(store, tmp_path):
    store.add("m", "r1")
    store.add("m", "r2", {"rev.txt": b"2"})
    dest = tmp_path / "model"
    fetch(store, dest, "r1")
    fetch(store, dest, "r2")
    old = os.path.join(str(dest) + ".revisions", "r1", "tokenizer_config.json")
    with open(old, "a") as handle:
        handle.write("x")
    result = fetch(store, dest, "r1")
    assert result["files_repaired"] == ["tokenizer_config.json"] and result["previous"] == "r2"
    # r2 got r1's file as a hard link, so it is damaged too: fetched, not reused
    assert result["files_reused"] == 0 and result["files_verified"] == 2
    assert result["bytes_fetched"] == os.path.getsize(store.file("m", "r1", "tokenizer_config.json"))
    assert os.readlink(str(dest)) == "model.revisions/r1"
    assert open(os.path.join(str(dest), "tokenizer_config.json")).read() == \
        open(store.file("m", "r1", "tokenizer_config.json")).read()


def test_files_another_revision_holds_are_hard_linked_not_fetched(store, tmp_path):
    store.add("m", "r1")
    store.add("m", "r2", {"rev.txt": b"two"})
    dest = tmp_path / "model"
    fetch(store, dest, "r1")
    result = fetch(store, dest, "r2", check_mode=True)
    assert result["pending"] == ["rev.txt"] and result["pending_bytes"] == 3
    result = fetch(store, dest, "r2")
    assert result["files_reused"] == 3 and result["files_fetched"] == 1 and result["bytes_fetched"] == 3
    revs = str(dest) + ".revisions"
    assert os.stat(os.path.join(revs, "r1", WEIGHTS)).st_ino == os.stat(os.path.join(revs, "r2", WEIGHTS)).st_ino
    # a damaged copy in r1 is not reused (its mtime moved): r3 fetches that file
    store.add("m", "r3", {"rev.txt": b"three"})
    with open(os.path.join(revs, "r2", "tokenizer_config.json"), "a") as handle:
        handle.write(" ")
    result = fetch(store, dest, "r3", verify="full")
    assert result["files_reused"] == 2 and result["files_fetched"] == 2


def test_a_second_fetch_of_the_same_dest_waits_for_the_lock(store, tmp_path):
    import fcntl
    store.add("m", "r1")
    dest = tmp_path / "model"
    os.makedirs(str(dest) + ".revisions")
    with open(os.path.join(str(dest) + ".revisions", ".lock"), "w") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        err = failure(store, dest, timeout=1)
        assert "another fetch of %s" % dest in str(err) and not os.path.lexists(str(dest))
        assert fetch(store, dest, check_mode=True)["changed"]  # check mode takes no lock
    assert fetch(store, dest)["changed"]
