# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.model_manifest module (or
# scripts/model-store.py) instead.
"""The manifest of one model revision in the store: ``<store_root>/<name>/<revision>/labfleet-manifest.json``.

Pure functions (no Ansible imports). The manifest lists every regular file of the revision directory
(relative POSIX paths, sorted) with its size and sha256, what the deployment gate needs (the ``model``
input of labfleet.vllm.deploy_gate, read by probes/_model.py), config.json and the quantization
description, and for a converted copy the source manifest it was made from. It is serialized
canonically (sorted keys, indent 1, a trailing newline), so its sha256 names exactly one content.

Files whose name (or a directory of whose path) starts with "." are state, not model files (the
store's hash cache, a fetch's state and partial downloads, ``.git``, ``.cache``): they are left out.

Hashing runs in threads, one per CPU (hashlib releases the GIL on large buffers); a file whose size
and mtime_ns equal those recorded in the hash cache ``.labfleet-hashes.json`` keeps its recorded
sha256 unless ``rehash`` is set.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import concurrent.futures
import datetime
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import time

from ansible_collections.labfleet.vllm.plugins.module_utils.formats._nvfp4 import Nvfp4Error, sha256_file
from ansible_collections.labfleet.vllm.plugins.module_utils.probes._model import (
    MAX_JSON_BYTES,
    ModelFileError,
    gate_input,
    open_regular,
    read_model_dir,
)

MANIFEST_FILE = "labfleet-manifest.json"
FORMAT = "labfleet.model-manifest/1"
# The store's cache of hashes: {path: {size, mtime_ns, sha256}} (a dot-file, so never in a manifest).
HASH_STATE_FILE = ".labfleet-hashes.json"
STATE_FORMAT = "labfleet.file-state/1"
# A manifest lists a few hundred files at most (about 150 bytes each); 64 MB is far beyond any model.
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
MAX_FILES = 100000
MAX_PATH_CHARS = 4096
MAX_COMPONENT_BYTES = 255
HASH_CHUNK = 8 * 1024 * 1024
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}\Z")
SHA256_RE = re.compile(r"[0-9a-f]{64}\Z")
MANIFEST_KEYS = ("format", "name", "revision", "created", "total_bytes", "files", "gate", "quantization",
                 "config", "source")
SOURCE_KEYS = ("name", "revision", "manifest_sha256", "files", "converter", "settings")


class StoreError(Exception):
    """Something about the store or a fetch is wrong; the message says what to fix."""


class ManifestError(StoreError):
    """A manifest (or the directory it describes) is not what the store accepts."""


def has_control(text):
    return any(ord(c) < 32 or 127 <= ord(c) < 160 for c in text)


def check_name(value, what):
    """A model name or revision: ASCII letters, digits, ".", "_", "+", "-", at most 128, not starting with a sign."""
    if not isinstance(value, str) or not NAME_RE.match(value) or value in (".", ".."):
        raise ManifestError("%s must be 1 to 128 ASCII letters, digits, \".\", \"_\", \"+\" or \"-\", starting with a "
                            "letter or digit (for example \"llama-3.1-8b\" or \"2026-01+fp16\"), found %s"
                            % (what, _short(value)))
    return value


def check_path(path, where):
    """A file path of a manifest: relative POSIX, no "..", no dot-file, no backslash, no control character."""
    problem = None
    if not isinstance(path, str) or not path:
        problem = "must be a non-empty string"
    elif len(path) > MAX_PATH_CHARS:
        problem = "is longer than %d characters" % MAX_PATH_CHARS
    elif has_control(path):
        problem = "holds a control character (or a newline)"
    elif "\\" in path:
        problem = "holds a backslash; paths use \"/\""
    elif path.startswith("/"):
        problem = "is absolute; paths are relative to the revision directory"
    else:
        for part in path.split("/"):
            if part in ("", ".", ".."):
                problem = "has an empty, \".\" or \"..\" component"
            elif part.startswith("."):
                problem = "has a component starting with \".\" (reserved for the store's state files)"
            elif len(part.encode("utf-8", "surrogateescape")) > MAX_COMPONENT_BYTES:
                problem = "has a component longer than %d bytes" % MAX_COMPONENT_BYTES
            if problem:
                break
    if problem is None and path == MANIFEST_FILE:
        problem = "is the manifest itself"
    if problem:
        raise ManifestError("%s: path %s %s; fix the manifest (rebuild it with labfleet.vllm.model_manifest)"
                            % (where, _short(path), problem))
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise ManifestError("%s: path %s is not valid UTF-8; rename the file" % (where, _short(path)))
    return path


def _short(value, limit=80):
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


# ---------------------------------------------------------------------------------------------
# Serialization and validation
# ---------------------------------------------------------------------------------------------


def dump_json(data):
    """Canonical JSON text: sorted keys, indent 1, ASCII, a trailing newline (its sha256 is stable)."""
    try:
        return json.dumps(data, sort_keys=True, indent=1, ensure_ascii=True, allow_nan=False) + "\n"
    except ValueError as exc:
        raise ManifestError("the manifest cannot be written as JSON (%s); check config.json for NaN or infinite "
                            "numbers" % exc)


def manifest_sha256(text):
    """sha256 (hex) of a manifest's text as served."""
    if isinstance(text, str):
        text = text.encode("utf-8")
    return hashlib.sha256(text).hexdigest()


def _is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 2 ** 53


def _check_sha(value, what, where):
    if not isinstance(value, str) or not SHA256_RE.match(value):
        raise ManifestError("%s: %s must be 64 lowercase hex digits (a sha256), found %s" % (where, what, _short(value)))
    return value


def _check_files(files, where):
    if not isinstance(files, list) or len(files) > MAX_FILES:
        raise ManifestError("%s: files must be a list of at most %d entries" % (where, MAX_FILES))
    seen = set()
    for pos, entry in enumerate(files):
        label = "%s: files[%d]" % (where, pos)
        if not isinstance(entry, dict) or sorted(entry) != ["path", "sha256", "size"]:
            raise ManifestError("%s must be an object with exactly path, size and sha256" % label)
        path = check_path(entry["path"], label)
        if not _is_count(entry["size"]):
            raise ManifestError("%s: size must be an integer >= 0, found %s" % (label, _short(entry["size"])))
        _check_sha(entry["sha256"], "sha256", label)
        if path in seen:
            raise ManifestError("%s: path %s is listed twice" % (label, _short(path)))
        seen.add(path)
    for path in seen:
        parts = path.split("/")
        for depth in range(1, len(parts)):
            if "/".join(parts[:depth]) in seen:
                raise ManifestError("%s: %s is listed both as a file and as a directory of %s"
                                    % (where, _short("/".join(parts[:depth])), _short(path)))


def _check_source(source, where):
    if source is None:
        return
    label = "%s: source" % where
    if not isinstance(source, dict) or sorted(source) != sorted(SOURCE_KEYS):
        raise ManifestError("%s must be null or an object with exactly %s" % (label, ", ".join(SOURCE_KEYS)))
    check_name(source["name"], "%s.name" % label)
    check_name(source["revision"], "%s.revision" % label)
    _check_sha(source["manifest_sha256"], "source.manifest_sha256", where)
    if not isinstance(source["files"], dict) or len(source["files"]) > MAX_FILES:
        raise ManifestError("%s.files must be an object {path: sha256}" % label)
    for path, digest in source["files"].items():
        check_path(path, "%s.files" % label)
        _check_sha(digest, "source.files[%s]" % _short(path), where)
    if not isinstance(source["converter"], str) or not source["converter"] or has_control(source["converter"]) \
            or len(source["converter"]) > 256:
        raise ManifestError("%s.converter must name the converter (a string of 1 to 256 characters)" % label)
    if not isinstance(source["settings"], dict):
        raise ManifestError("%s.settings must be an object (the converter's settings)" % label)


def validate_manifest(data, where):
    """Raise ManifestError unless ``data`` is a manifest of FORMAT; returns it."""
    if not isinstance(data, dict):
        raise ManifestError("%s: a manifest is a JSON object, found %s" % (where, type(data).__name__))
    if data.get("format") != FORMAT:
        raise ManifestError("%s: format must be %r, found %s; the store and this collection disagree on the manifest "
                            "format (rebuild it with this collection's labfleet.vllm.model_manifest)"
                            % (where, FORMAT, _short(data.get("format"))))
    missing = [k for k in MANIFEST_KEYS if k not in data]
    extra = sorted(k for k in data if k not in MANIFEST_KEYS)
    if missing or extra:
        problems = (["lacks %s" % ", ".join(missing)] if missing else []) \
            + (["has unknown keys %s" % ", ".join(extra)] if extra else [])
        raise ManifestError("%s: the manifest %s; rebuild it with labfleet.vllm.model_manifest"
                            % (where, "; ".join(problems)))
    check_name(data["name"], "%s: name" % where)
    check_name(data["revision"], "%s: revision" % where)
    if not isinstance(data["created"], str) or len(data["created"]) > 64 or has_control(data["created"]):
        raise ManifestError("%s: created must be an ISO date string" % where)
    _check_files(data["files"], where)
    if not _is_count(data["total_bytes"]) or data["total_bytes"] != sum(f["size"] for f in data["files"]):
        raise ManifestError("%s: total_bytes %s is not the sum of the files' sizes (%d)"
                            % (where, _short(data["total_bytes"]), sum(f["size"] for f in data["files"])))
    for key in ("gate", "quantization", "config"):
        if data[key] is not None and not isinstance(data[key], dict):
            raise ManifestError("%s: %s must be an object or null" % (where, key))
    _check_source(data["source"], where)
    return data


def parse_manifest(text, where):
    """The manifest in ``text`` (str or bytes), validated; ManifestError saying what to fix otherwise."""
    if len(text) > MAX_MANIFEST_BYTES:
        raise ManifestError("%s: the manifest is larger than %d bytes; it is not a model manifest (or is damaged)"
                            % (where, MAX_MANIFEST_BYTES))
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ManifestError("%s: the manifest is not UTF-8 text (%s)" % (where, exc))
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ManifestError("%s: the manifest is not valid JSON (%s); rebuild it with labfleet.vllm.model_manifest"
                            % (where, str(exc)[:120]))
    return validate_manifest(data, where)


def read_manifest_file(path):
    """(manifest, text) of a manifest file, or (None, None) when there is none."""
    if not os.path.lexists(path):
        return None, None
    try:
        handle, _size = open_regular(path, MAX_MANIFEST_BYTES)
        with handle:
            raw = handle.read(MAX_MANIFEST_BYTES + 1)
    except ModelFileError as exc:
        raise ManifestError(str(exc))
    except (IOError, OSError) as exc:
        raise ManifestError("%s: cannot be read (%s)" % (path, exc))
    return parse_manifest(raw, path), raw.decode("utf-8")


# ---------------------------------------------------------------------------------------------
# State files: {path: {size, mtime_ns, sha256}} of files whose sha256 was checked
# ---------------------------------------------------------------------------------------------


def read_state(path):
    """The state file's dict (``files`` always a dict); an empty state when missing or unreadable
    (a state file is a cache: losing it costs a re-hash, never a wrong answer)."""
    empty = {"format": STATE_FORMAT, "files": {}}
    try:
        handle, _size = open_regular(path, MAX_MANIFEST_BYTES)
        with handle:
            data = json.loads(handle.read(MAX_MANIFEST_BYTES + 1).decode("utf-8"))
    except (ModelFileError, IOError, OSError, ValueError, RecursionError):
        return empty
    if not isinstance(data, dict) or data.get("format") != STATE_FORMAT or not isinstance(data.get("files"), dict):
        return empty
    return data


def state_entry(info, digest):
    return {"size": info.st_size, "mtime_ns": info.st_mtime_ns, "sha256": digest}


def recorded_sha256(state, path, info):
    """The sha256 the state recorded for ``path`` if its size and mtime_ns still match ``info``, else None."""
    entry = state["files"].get(path)
    if isinstance(entry, dict) and entry.get("size") == info.st_size and entry.get("mtime_ns") == info.st_mtime_ns \
            and isinstance(entry.get("sha256"), str) and SHA256_RE.match(entry["sha256"]):
        return entry["sha256"]
    return None


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path, text, mode=0o644):
    """Write ``text`` to ``path`` through a temporary sibling, fsync'd, renamed into place."""
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=".%s.tmp-" % os.path.basename(path), dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    fsync_dir(directory)


def write_state(path, state):
    write_atomic(path, json.dumps(state, sort_keys=True, indent=1) + "\n")


# ---------------------------------------------------------------------------------------------
# Scanning and hashing a directory
# ---------------------------------------------------------------------------------------------


def scan_dir(root):
    """[(relative path, os.stat_result)] of every model file below ``root``, sorted by path.

    Dot-files and dot-directories are state and left out, so is the manifest. A symbolic link is
    followed when it points to a regular file inside ``root``; one pointing outside, to a directory or
    nowhere, a non-regular file, or a name with a control character or a backslash raises ManifestError."""
    root = os.path.abspath(root)
    real_root = os.path.realpath(root)
    found = []

    def fail(rel, problem):
        raise ManifestError("%s: %s %s; %s" % (root, _short(rel), problem, "fix or remove it, then run again"))

    def on_error(exc):
        raise ManifestError("%s: cannot be listed (%s); check its permissions" % (root, exc))

    for dirpath, dirnames, filenames in os.walk(root, onerror=on_error):
        reldir = os.path.relpath(dirpath, root)
        reldir = "" if reldir == "." else reldir.replace(os.sep, "/") + "/"
        for dirname in list(dirnames):
            full = os.path.join(dirpath, dirname)
            if dirname.startswith("."):
                dirnames.remove(dirname)
            elif os.path.islink(full):
                fail(reldir + dirname, "is a symbolic link to a directory (%s); the store keeps regular files "
                     "only" % os.readlink(full))
        dirnames.sort()
        for filename in filenames:
            rel = reldir + filename
            if filename.startswith(".") or rel == MANIFEST_FILE:
                continue
            if has_control(rel) or "\\" in rel:
                fail(rel, "has a control character, a newline or a backslash in its name")
            full = os.path.join(dirpath, filename)
            if os.path.islink(full):
                real = os.path.realpath(full)
                if not real.startswith(real_root + os.sep):
                    fail(rel, "is a symbolic link pointing outside the directory (%s)" % os.readlink(full))
            try:
                info = os.stat(full)
            except OSError as exc:
                fail(rel, "cannot be read (%s)" % exc.strerror)
            if not stat.S_ISREG(info.st_mode):
                fail(rel, "is not a regular file (a FIFO, a device or a socket)")
            try:
                check_path(rel, root)
            except ManifestError as exc:
                fail(rel, "cannot be listed in a manifest (%s)" % exc)
            found.append((rel, info))
    found.sort(key=lambda item: item[0])
    return found


def hash_one(full, info):
    """sha256 of one file, refused if it changed while hashed (size or mtime_ns)."""
    try:
        digest = sha256_file(full, HASH_CHUNK)
        after = os.stat(full)
    except (Nvfp4Error, IOError, OSError) as exc:
        raise ManifestError("%s: cannot be hashed (%s)" % (full, exc))
    if after.st_size != info.st_size or after.st_mtime_ns != info.st_mtime_ns:
        raise ManifestError("%s: changed while it was hashed; wait until nothing writes to it, then run again" % full)
    return digest


def hash_files(jobs, workers=None):
    """{key: sha256} for jobs [(key, full path, stat)], hashed in parallel threads (largest first)."""
    if not jobs:
        return {}
    workers = max(1, min(workers or os.cpu_count() or 1, len(jobs)))
    ordered = sorted(jobs, key=lambda job: -job[2].st_size)
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = dict((key, pool.submit(hash_one, full, info)) for key, full, info in ordered)
        return dict((key, future.result()) for key, future in futures.items())


def model_description(directory):
    """(gate, quantization, config) of a model directory, from probes/_model.py's reader (host facts left out)."""
    try:
        model = read_model_dir(directory)
        handle, _size = open_regular(os.path.join(directory, "config.json"), MAX_JSON_BYTES)
        with handle:
            config = json.loads(handle.read().decode("utf-8"))
    except ModelFileError as exc:
        raise ManifestError("%s; the store keeps complete model directories (config.json, weights, tokenizer)" % exc)
    except (IOError, OSError, ValueError) as exc:
        raise ManifestError("%s: config.json cannot be read (%s)" % (directory, exc))
    quantization = dict((k, v) for k, v in model.items() if k == "quantized" or k.startswith("quant_"))
    return gate_input(model), quantization, config


def build_manifest(directory, name, revision, rehash=False, source=None, created=None, workers=None, cache=None):
    """(manifest, state, stats) of ``directory``: the manifest dict (validated), the hash cache to keep
    beside it, and {hashed_bytes, hashed_files, files, seconds}. Files whose size and mtime_ns equal the
    hash cache's (``directory``'s own, or ``cache``, a state read elsewhere) keep their sha256 unless ``rehash``."""
    started = time.monotonic()
    check_name(name, "name")
    check_name(revision, "revision")
    state = cache if cache is not None else read_state(os.path.join(directory, HASH_STATE_FILE))
    listed = scan_dir(directory)
    known, jobs = {}, []
    for rel, info in listed:
        digest = None if rehash else recorded_sha256(state, rel, info)
        if digest is None:
            jobs.append((rel, os.path.join(directory, rel), info))
        else:
            known[rel] = digest
    known.update(hash_files(jobs, workers))
    gate, quantization, config = model_description(directory)
    files = [{"path": rel, "size": info.st_size, "sha256": known[rel]} for rel, info in listed]
    manifest = {
        "format": FORMAT, "name": name, "revision": revision, "created": created or utc_now(),
        "total_bytes": sum(f["size"] for f in files), "files": files,
        "gate": gate, "quantization": quantization, "config": config, "source": source,
    }
    validate_manifest(json.loads(dump_json(manifest)), os.path.join(directory, MANIFEST_FILE))
    new_state = {"format": STATE_FORMAT, "files": dict((rel, state_entry(info, known[rel])) for rel, info in listed)}
    stats = {"hashed_bytes": sum(job[2].st_size for job in jobs), "hashed_files": len(jobs), "files": len(files),
             "seconds": time.monotonic() - started}
    return manifest, new_state, stats


def same_content(one, two):
    """Whether two manifests say the same thing (``created`` aside)."""
    if one is None or two is None:
        return False
    return dict(one, created=None) == dict(two, created=None)


def same_files(one, two):
    return one is not None and two is not None and one["files"] == two["files"]


# ---------------------------------------------------------------------------------------------
# A revision of the store: manifest written (and the directory filled from src) idempotently
# ---------------------------------------------------------------------------------------------


def _names_from_path(path, name, revision):
    parent = os.path.dirname(path)
    return name or os.path.basename(parent), revision or os.path.basename(path)


def _write_manifest(path, manifest, state, check_mode):
    """Write the manifest (only when its content changed) and the hash cache; returns (changed, text)."""
    manifest_path = os.path.join(path, MANIFEST_FILE)
    old, old_text = read_manifest_file(manifest_path)
    if same_content(old, manifest):
        manifest = dict(manifest, created=old["created"])
    text = dump_json(manifest)
    changed = text != old_text
    if not check_mode:
        if changed:
            write_atomic(manifest_path, text)
        if read_state(os.path.join(path, HASH_STATE_FILE)) != state:
            write_state(os.path.join(path, HASH_STATE_FILE), state)
    return changed, text


def _copy_tree(src, dest, listed, workers=None):
    """Copy the listed files of src into dest (parallel, each fsync'd, modes 0644), keeping mtimes."""
    def copy(rel):
        target = os.path.join(dest, rel)
        parent = os.path.dirname(target)
        os.makedirs(parent, exist_ok=True)
        shutil.copyfile(os.path.join(src, rel), target)
        shutil.copystat(os.path.join(src, rel), target)
        os.chmod(target, 0o644)
        with open(target, "rb") as handle:
            os.fsync(handle.fileno())
    for rel, _info in listed:
        os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
    workers = max(1, min(workers or os.cpu_count() or 1, len(listed) or 1))
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            for future in [pool.submit(copy, rel) for rel, _info in listed]:
                future.result()
    except (IOError, OSError) as exc:
        raise ManifestError("copying %s to %s failed (%s); check the free space and permissions there"
                            % (src, dest, exc))
    for dirpath, _dirs, _files in os.walk(dest):
        os.chmod(dirpath, 0o755)
        fsync_dir(dirpath)


def _stage_from_src(path, src, name, revision, source, rehash, force, check_mode, workers):
    """ensure_revision with src: compare, copy to a temporary sibling, manifest, rename into place."""
    src = os.path.abspath(src)
    if not os.path.isdir(src):
        raise ManifestError("src=%s is not a directory; point src at the model directory to add" % src)
    if src == path or src.startswith(path + os.sep) or path.startswith(src + os.sep):
        raise ManifestError("src=%s and path=%s overlap; copy from a directory outside the store" % (src, path))
    # src's files keep the sha256 the store's copy recorded while their size and mtime_ns (copied along) match
    cache = read_state(os.path.join(path, HASH_STATE_FILE)) if os.path.isdir(path) else None
    src_manifest, _src_state, stats = build_manifest(src, name, revision, rehash, source, workers=workers, cache=cache)
    existing = None
    if os.path.lexists(path):
        if not os.path.isdir(path) or os.path.islink(path):
            raise ManifestError("path=%s exists and is not a directory; move it away" % path)
        existing, existing_state, more = build_manifest(path, name, revision, rehash, source, workers=workers)
        stats["hashed_bytes"] += more["hashed_bytes"]
        if same_files(existing, src_manifest):
            changed, text = _write_manifest(path, existing, existing_state, check_mode)
            return changed, text, existing, stats
        if not force:
            raise ManifestError("path=%s already holds revision %s with other files than src=%s; a revision never "
                                "changes once in the store: add the new files as a new revision, or set force=true "
                                "to replace it (servers that fetched it will repair to the new content)"
                                % (path, revision, src))
    if check_mode:
        return True, dump_json(src_manifest), src_manifest, stats
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".%s.tmp-" % revision, dir=parent)
    try:
        listed = scan_dir(src)
        _copy_tree(src, tmp, listed, workers)
        manifest, state, more = build_manifest(tmp, name, revision, False, source, workers=workers)
        stats["hashed_bytes"] += more["hashed_bytes"]
        if not same_files(manifest, src_manifest):
            raise ManifestError("src=%s changed while it was copied; wait until nothing writes to it, then run again"
                                % src)
        manifest = dict(manifest, created=src_manifest["created"])
        _changed, text = _write_manifest(tmp, manifest, state, False)
        os.chmod(tmp, 0o755)
        if existing is not None:
            old = tempfile.mkdtemp(prefix=".%s.replaced-" % revision, dir=parent)
            os.rename(path, os.path.join(old, revision))
            os.rename(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, path)
        fsync_dir(parent)
    finally:
        if os.path.lexists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    return True, text, manifest, stats


def ensure_revision(path, name=None, revision=None, src=None, source=None, rehash=False, force=False,
                    check_mode=False, workers=None):
    """Make ``path`` (``<store_root>/<name>/<revision>``) hold a current manifest, filling it from ``src``
    first when given. Returns {changed, manifest_path, manifest_sha256, total_bytes, files, hashed_bytes,
    gate, name, revision, seconds, manifest}."""
    started = time.monotonic()
    path = os.path.abspath(path)
    name, revision = _names_from_path(path, name, revision)
    check_name(name, "name")
    check_name(revision, "revision")
    if source is not None:
        _check_source(source, "source")
    if src:
        changed, text, manifest, stats = _stage_from_src(path, src, name, revision, source, rehash, force,
                                                         check_mode, workers)
    else:
        if not os.path.isdir(path):
            raise ManifestError("path=%s is not a directory; give the revision directory <store_root>/<name>/"
                                "<revision> (or src to fill it)" % path)
        manifest, state, stats = build_manifest(path, name, revision, rehash, source, workers=workers)
        changed, text = _write_manifest(path, manifest, state, check_mode)
    return {
        "changed": changed, "manifest_path": os.path.join(path, MANIFEST_FILE),
        "manifest_sha256": manifest_sha256(text), "total_bytes": manifest["total_bytes"],
        "files": len(manifest["files"]), "hashed_bytes": stats["hashed_bytes"], "gate": manifest["gate"],
        "name": name, "revision": revision, "seconds": round(time.monotonic() - started, 3), "manifest": manifest,
    }


def verify_revision(path, full=False, workers=None):
    """Check a store revision against its manifest: {manifest_sha256, files, total_bytes, hashed_bytes,
    seconds, missing, mismatched, extra} (lists of paths). ``full`` hashes every file; otherwise the hash
    cache is trusted for files whose size and mtime_ns it recorded."""
    started = time.monotonic()
    manifest, text = read_manifest_file(os.path.join(path, MANIFEST_FILE))
    if manifest is None:
        raise ManifestError("%s has no %s; add the revision first (python3 scripts/model-store.py add)"
                            % (path, MANIFEST_FILE))
    state = read_state(os.path.join(path, HASH_STATE_FILE))
    listed = dict(scan_dir(path))
    missing, mismatched, known, jobs = [], [], {}, []
    for entry in manifest["files"]:
        info = listed.get(entry["path"])
        if info is None:
            missing.append(entry["path"])
        elif info.st_size != entry["size"]:
            mismatched.append(entry["path"])
        else:
            digest = None if full else recorded_sha256(state, entry["path"], info)
            if digest is None:
                jobs.append((entry["path"], os.path.join(path, entry["path"]), info))
            else:
                known[entry["path"]] = digest
    known.update(hash_files(jobs, workers))
    mismatched.extend(e["path"] for e in manifest["files"] if e["path"] in known and known[e["path"]] != e["sha256"])
    wanted = set(e["path"] for e in manifest["files"])
    return {"manifest_sha256": manifest_sha256(text), "files": len(manifest["files"]),
            "total_bytes": manifest["total_bytes"], "hashed_bytes": sum(job[2].st_size for job in jobs),
            "seconds": time.monotonic() - started, "missing": missing, "mismatched": sorted(mismatched),
            "extra": sorted(p for p in listed if p not in wanted)}


def list_store(root):
    """[{name, revision, files, total_bytes, manifest_sha256, created, source}] of every revision below
    ``root`` with a manifest (a revision whose manifest is not valid gets ``error``)."""
    found = []
    for name in sorted(os.listdir(root)):
        model_dir = os.path.join(root, name)
        if name.startswith(".") or not os.path.isdir(model_dir):
            continue
        for revision in sorted(os.listdir(model_dir)):
            manifest_path = os.path.join(model_dir, revision, MANIFEST_FILE)
            if revision.startswith(".") or not os.path.lexists(manifest_path):
                continue
            row = {"name": name, "revision": revision}
            try:
                manifest, text = read_manifest_file(manifest_path)
            except ManifestError as exc:
                row["error"] = str(exc)
            else:
                source = manifest["source"]
                row.update(files=len(manifest["files"]), total_bytes=manifest["total_bytes"],
                           manifest_sha256=manifest_sha256(text), created=manifest["created"],
                           source="%s/%s" % (source["name"], source["revision"]) if source else None)
            found.append(row)
    return found
