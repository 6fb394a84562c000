# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.model_fetch module instead.
"""Fetch one revision of the model store onto a serving host and publish it atomically.

Layout on the serving host (``dest`` is the model path the vLLM container bind-mounts)::

    <dest>                       symbolic link -> <basename(dest)>.revisions/<revision>
    <dest>.revisions/<revision>/ a published revision: the manifest's files and .labfleet-fetch.json
    <dest>.revisions/.<revision>.partial/   the staging directory of a fetch (kept to resume)

- The manifest ``<url>/<name>/<revision>/labfleet-manifest.json`` is read and validated before
  anything is written.
- A file is taken as it is when verified: ``quick`` - its size and mtime_ns equal those the state file
  recorded after its sha256 was checked; ``full`` - hashed again. Otherwise it is downloaded into
  ``<file>.part`` in the staging directory, resumed with ``Range: bytes=<n>-`` when a .part is there
  (206 with a matching Content-Range expected; a 200 starts over), written and fsync'd chunk by chunk,
  hashed as it comes, and checked (size, sha256) before it is renamed to its name. A mismatch starts
  the file over once, then fails naming it. A file another published revision holds with the same
  sha256 and size (verified there) is hard-linked instead of fetched (``files_reused``); so a damaged
  shared file shows in both revisions, and each repairs it into a new file.
- A damaged file of a published revision is repaired copy-on-write: a new staging directory gets
  hard links of the good files and the file fetched again, and is published whole; a directory a
  server may be reading is never written into. When the link points at the revision being repaired,
  it points at the repaired copy (under a bridge name) before the damaged directory is moved aside, and
  at ``<revision>`` again once the repaired copy is in place there: it never dangles.
- Publish: state file written, everything fsync'd, staging renamed to ``<revision>``, then the link
  switched atomically (a link to a temporary name in the same directory, renamed over ``dest``).
- Prune: at most ``keep_revisions`` revisions are kept, and never the one just published, the one the
  link pointed to before (a running container may still read it) or one named in ``protect``. The
  oldest (by the time their fetch published them) go first. Staging directories (``.<revision>.partial``)
  are kept so that an interrupted fetch resumes; a damaged copy moved aside by a repair
  (``.<revision>.replaced-*``) and a bridge left by an interrupted repair are removed by the next fetch.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import fcntl
import hashlib
import http.client
import os
import shutil
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request

from ansible_collections.labfleet.vllm.plugins.module_utils.formats._nvfp4 import disk_free_bytes
from ansible_collections.labfleet.vllm.plugins.module_utils.store._manifest import (
    MANIFEST_FILE,
    MAX_MANIFEST_BYTES,
    SHA256_RE,
    STATE_FORMAT,
    ManifestError,
    StoreError,
    check_name,
    check_path,
    fsync_dir,
    hash_files,
    manifest_sha256,
    parse_manifest,
    read_state,
    recorded_sha256,
    state_entry,
    utc_now,
    write_state,
)

STATE_FILE = ".labfleet-fetch.json"
PART_SUFFIX = ".part"
DEFAULT_CHUNK = 8 * 1024 * 1024
MIN_CHUNK = 4096
MAX_CHUNK = 1024 * 1024 * 1024
# Free space kept beyond the bytes still to fetch (the state file, directory blocks, rounding).
DISK_MARGIN = 64 * 1024 * 1024
VERIFY_MODES = ("quick", "full")
STORE_HINT = "check that the store host's nginx runs (playbooks/model-store.yml) and the url"


class FetchError(StoreError):
    """A fetch failed; ``progress`` holds the counters so far (bytes fetched and resumed, restarts)."""

    def __init__(self, msg, progress=None):
        super(FetchError, self).__init__(msg)
        self.progress = progress or {}


def display_url(url):
    """The URL without user:password (never in a message or a result)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = "%s:%d" % (host, parts.port)
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def file_url(base, name, revision, path):
    quoted = "/".join(urllib.parse.quote(part, safe="") for part in [name, revision] + path.split("/"))
    return "%s/%s" % (base.rstrip("/"), quoted)


def check_options(url, name, revision, dest, keep_revisions, verify, pin, timeout, chunk_size, protect):
    parts = urllib.parse.urlsplit(url or "")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FetchError("url=%s must be the store's http:// or https:// base URL (for example "
                         "http://store.lab:8080/models)" % display_url(url or ""))
    check_name(name, "name")
    check_name(revision, "revision")
    for item in protect or ():
        check_name(item, "protect[]")
    if not isinstance(dest, str) or not os.path.isabs(dest) or os.path.normpath(dest) in ("/", "//"):
        raise FetchError("dest=%r must be an absolute path (the model path the container mounts), not /" % (dest,))
    if any(ord(c) < 32 for c in dest):
        raise FetchError("dest must not hold control characters")
    if not isinstance(keep_revisions, int) or keep_revisions < 1:
        raise FetchError("keep_revisions=%r must be 1 or more" % (keep_revisions,))
    if verify not in VERIFY_MODES:
        raise FetchError("verify=%r must be one of %s" % (verify, ", ".join(VERIFY_MODES)))
    if pin is not None and (not isinstance(pin, str) or not SHA256_RE.match(pin.lower())):
        raise FetchError("manifest_sha256=%r must be 64 hex digits (the manifest_sha256 the preflight reported)"
                         % (pin,))
    if not 0 < timeout <= 3600:
        raise FetchError("timeout=%r must be 1 to 3600 seconds" % (timeout,))
    if not MIN_CHUNK <= chunk_size <= MAX_CHUNK:
        raise FetchError("chunk_size=%r must be %d to %d bytes" % (chunk_size, MIN_CHUNK, MAX_CHUNK))


class Transfer(object):
    """The download of one file (a mixin of Fetch: uses its open(), fail(), progress, chunk_size, shown)."""

    def _resume_prefix(self, part, size):
        """(sha256 object over the .part's bytes, their count); a .part longer than the file is dropped."""
        digest = hashlib.sha256()
        try:
            have = os.lstat(part).st_size
        except OSError:
            return digest, 0
        if have > size:
            os.unlink(part)
            return digest, 0
        with open(part, "rb") as handle:
            while True:
                data = handle.read(self.chunk_size)
                if not data:
                    break
                digest.update(data)
        return digest, have

    def _request(self, url, rel, have, size):
        """The response for the file from byte ``have``; (response, have) - have is 0 when it starts over."""
        ranged = have > 0
        try:
            response = self.open(url, {"Range": "bytes=%d-" % have} if ranged else None)
        except urllib.error.HTTPError as exc:
            if exc.code == 416 and ranged:
                self.progress["restarts"] += 1
                return self._request(url, rel, 0, size)
            self.fail("the model store at %s answered HTTP %d (%s) for %s of %s revision %s; check the file on the "
                      "store host (python3 scripts/model-store.py verify)" % (self.shown, exc.code, exc.reason, rel,
                                                                              self.name, self.revision))
        except (urllib.error.URLError, http.client.HTTPException, socket.timeout, OSError) as exc:
            self.fail("cannot reach the model store at %s while fetching %s (%s): %s; run again to resume"
                      % (self.shown, rel, getattr(exc, "reason", exc), STORE_HINT))
        if ranged and response.status == 206:
            wanted = "bytes %d-%d/%d" % (have, size - 1, size)
            if (response.headers.get("Content-Range") or "").strip() == wanted:
                return response, have
        if response.status not in (200, 206) or (response.status == 206 and not ranged):
            response.close()
            self.fail("the model store at %s answered HTTP %d for %s; expected 200 or 206"
                      % (self.shown, response.status, rel))
        if ranged:
            # a 200 (the store ignores ranges) or a Content-Range for other bytes: start over
            self.progress["restarts"] += 1
            if response.status != 200:
                response.close()
                return self._request(url, rel, 0, size)
        return response, 0

    def _stream(self, response, part, have, digest, rel, size):
        """Append the response's body to ``part`` (flushed and fsync'd per chunk); returns the bytes held."""
        with response, open(part, "ab" if have else "wb") as handle:
            while have <= size:
                try:
                    data = response.read(self.chunk_size)
                except http.client.IncompleteRead as exc:
                    self._write(handle, exc.partial, digest, part)
                    self.stopped(rel, have + len(exc.partial), size, part, "the connection closed early")
                except (http.client.HTTPException, socket.timeout, OSError) as exc:
                    self.stopped(rel, have, size, part, "%s: %s" % (type(exc).__name__, exc))
                if not data:
                    break
                self._write(handle, data, digest, part)
                have += len(data)
        return have

    def stopped(self, rel, have, size, part, reason):
        self.fail("the download of %s from %s stopped after %d of %d bytes (%s); run again: the fetch resumes from "
                  "byte %d (kept in %s)" % (rel, self.shown, have, size, reason, have, part))

    def _write(self, handle, data, digest, part):
        try:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        except OSError as exc:
            self.fail("writing %s failed (%s); check the free space and permissions of %s" % (part, exc, self.revs))
        digest.update(data)
        self.progress["bytes_fetched"] += len(data)

    def download(self, entry, directory):
        """Fetch one file into ``directory`` through ``<file>.part``: resumed, hashed, checked, renamed."""
        rel, size = entry["path"], entry["size"]
        final = os.path.join(directory, rel)
        part = final + PART_SUFFIX
        os.makedirs(os.path.dirname(final), exist_ok=True)
        url = file_url(self.base, self.name, self.revision, rel)
        for attempt in (1, 2):
            digest, have = self._resume_prefix(part, size)
            if have < size or size == 0:
                response, start = self._request(url, rel, have, size)
                if start != have:
                    digest, have = hashlib.sha256(), 0
                self.progress["bytes_resumed"] += have
                have = self._stream(response, part, have, digest, rel, size)
                if have < size:
                    self.stopped(rel, have, size, part, "the store closed the connection")
            else:
                self.progress["bytes_resumed"] += have
            if have == size and digest.hexdigest() == entry["sha256"]:
                os.replace(part, final)
                self.progress["files_fetched"] += 1
                return
            os.unlink(part)
            if attempt == 2:
                self.fail("%s of %s revision %s: the store sent %d bytes with sha256 %s, the manifest says %d bytes "
                          "with sha256 %s, twice; check the file on the store host (python3 scripts/model-store.py "
                          "verify --full) and rebuild its manifest" % (rel, self.name, self.revision, have,
                                                                       digest.hexdigest(), size, entry["sha256"]))
            self.progress["restarts"] += 1


class Fetch(Transfer):
    """One run of a fetch: the options, the HTTP opener and the counters."""

    def __init__(self, url, name, revision, dest, timeout=60, chunk_size=DEFAULT_CHUNK, headers=None,
                 validate_certs=True, verify="quick"):
        self.base = url.rstrip("/")
        self.shown = display_url(self.base)
        self.name, self.revision = name, revision
        self.dest = os.path.normpath(dest)
        self.revs = self.dest + ".revisions"
        self.final = os.path.join(self.revs, revision)
        self.staging = os.path.join(self.revs, ".%s.partial" % revision)
        self.link_target = "%s.revisions/%s" % (os.path.basename(self.dest), revision)
        self.timeout, self.chunk_size, self.verify = timeout, chunk_size, verify
        self.headers = dict(headers or {})
        context = ssl.create_default_context()
        if not validate_certs:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        self.opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context))
        self.progress = {"bytes_fetched": 0, "bytes_resumed": 0, "restarts": 0, "files_fetched": 0,
                         "files_verified": 0, "files_reused": 0, "files_repaired": []}

    def fail(self, msg):
        raise FetchError(msg, dict(self.progress))

    # -- HTTP ------------------------------------------------------------------------------

    def open(self, url, extra=None):
        headers = dict(self.headers)
        headers["Accept-Encoding"] = "identity"
        headers.update(extra or {})
        return self.opener.open(urllib.request.Request(url, headers=headers), timeout=self.timeout)

    def read_manifest(self):
        url = file_url(self.base, self.name, self.revision, MANIFEST_FILE)
        shown = display_url(url)
        try:
            with self.open(url) as response:
                raw = response.read(MAX_MANIFEST_BYTES + 1)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                self.fail("the model store at %s has no revision %s of %s (HTTP 404 for %s): add it on the store host "
                          "(labfleet.vllm.model_manifest, or python3 scripts/model-store.py add) or correct name and "
                          "revision" % (self.shown, self.revision, self.name, shown))
            self.fail("the model store at %s answered HTTP %d (%s) for %s; %s"
                      % (self.shown, exc.code, exc.reason, shown, STORE_HINT))
        except (urllib.error.URLError, http.client.HTTPException, socket.timeout, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            self.fail("cannot reach the model store at %s (%s): %s" % (self.shown, reason, STORE_HINT))
        try:
            manifest = parse_manifest(raw, shown)
        except ManifestError as exc:
            self.fail("the store's manifest is not usable: %s" % exc)
        if manifest["name"] != self.name or manifest["revision"] != self.revision:
            self.fail("%s describes %s revision %s, not %s revision %s; rebuild the store's manifest "
                      "(labfleet.vllm.model_manifest)" % (shown, manifest["name"], manifest["revision"], self.name,
                                                          self.revision))
        return manifest, manifest_sha256(raw)

    # -- verification ------------------------------------------------------------------------

    def good_files(self, directory, files, state):
        """{path: stat} of the manifest's files that ``directory`` holds verified (quick or full)."""
        good, jobs = {}, []
        for entry in files:
            full = os.path.join(directory, entry["path"])
            try:
                info = os.lstat(full)
            except OSError:
                continue
            if not _is_regular(info) or info.st_size != entry["size"]:
                continue
            if self.verify == "quick":
                if recorded_sha256(state, entry["path"], info) == entry["sha256"]:
                    good[entry["path"]] = info
            else:
                jobs.append((entry["path"], full, info))
        if jobs:
            try:
                hashes = hash_files(jobs)
            except ManifestError as exc:
                self.fail("verifying %s failed: %s" % (directory, exc))
            wanted = dict((entry["path"], entry["sha256"]) for entry in files)
            good.update((rel, info) for rel, _full, info in jobs if hashes[rel] == wanted[rel])
        return good

    def verified_copy(self, path, entry):
        """``path`` (a file of another revision with the entry's sha256 and size) when still good: quick
        trusts the other revision's state (already checked by reusable_files), full hashes it."""
        if path is None or self.verify == "quick":
            return path
        try:
            info = os.lstat(path)
            return path if hash_files([(path, path, info)])[path] == entry["sha256"] else None
        except (OSError, ManifestError):
            return None


def _is_regular(info):
    return info.st_mode & 0o170000 == 0o100000


def link_revision(dest, revision_of_bridge=True):
    """The revision ``dest`` links to (``<base>.revisions/<revision>``, or a repair's bridge), else None."""
    if not os.path.islink(dest):
        return None
    target = os.readlink(dest)
    prefix = os.path.basename(dest) + ".revisions/"
    if target.startswith(dest + ".revisions/"):
        target = os.path.basename(dest) + target[len(dest):]
    if not target.startswith(prefix):
        return None
    rest = target[len(prefix):].rstrip("/")
    if revision_of_bridge and rest.startswith(".") and rest.endswith(".bridge"):
        rest = rest[1:-len(".bridge")]
    return rest if "/" not in rest and rest else None


def switch_link(dest, target):
    """Point ``dest`` at ``target`` atomically (a link to a temporary name renamed over it); whether it moved."""
    if os.path.islink(dest) and os.readlink(dest) == target:
        return False
    tmp = os.path.join(os.path.dirname(dest), ".%s.link-%d" % (os.path.basename(dest), os.getpid()))
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, dest)
    fsync_dir(os.path.dirname(dest))
    return True


def _listed_files(directory):
    """Relative paths of the files below ``directory`` (dot-files and dot-directories left out)."""
    found = set()
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        rel = os.path.relpath(dirpath, directory)
        for filename in filenames:
            if not filename.startswith("."):
                found.add(filename if rel == "." else "%s/%s" % (rel.replace(os.sep, "/"), filename))
    return found


def _fsync_tree(directory):
    for dirpath, _dirs, _files in os.walk(directory, topdown=False):
        fsync_dir(dirpath)


def _link_or_copy(src, dst):
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if os.path.lexists(dst):
        os.unlink(dst)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _hardlink_tree(src, dst):
    """A copy of ``src`` made of hard links (state file included)."""
    for dirpath, _dirs, filenames in os.walk(src):
        for filename in filenames:
            full = os.path.join(dirpath, filename)
            _link_or_copy(full, os.path.join(dst, os.path.relpath(full, src)))


def reusable_files(run):
    """{(sha256, size): path} of the files of the other published revisions under ``run.revs`` whose size and
    mtime_ns are those their fetch recorded after checking their sha256: hard-linked instead of fetched
    again (a revision shares its tokenizer, or most of its files, with the one before)."""
    found = {}
    if not os.path.isdir(run.revs):
        return found
    for entry in sorted(os.listdir(run.revs)):
        directory = os.path.join(run.revs, entry)
        if entry.startswith(".") or entry == run.revision or os.path.islink(directory) or not os.path.isdir(directory):
            continue
        state = read_state(os.path.join(directory, STATE_FILE))
        for rel in sorted(state["files"]):
            try:
                check_path(rel, directory)
                info = os.lstat(os.path.join(directory, rel))
            except (ManifestError, OSError):
                continue
            digest = recorded_sha256(state, rel, info) if _is_regular(info) else None
            if digest:
                found.setdefault((digest, info.st_size), os.path.join(directory, rel))
    return found


def _free_base(path):
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def _published_at(path):
    for candidate in (os.path.join(path, STATE_FILE), path):
        try:
            return os.stat(candidate).st_mtime_ns
        except OSError:
            continue
    return 0


def prune_plan(revs, keep_revisions, keep, publishing):
    """(revisions to remove, leftover directories to remove) once ``publishing`` is published: the oldest
    published beyond keep_revisions, never one in ``keep``; leftovers are the copies earlier repairs moved
    aside and their bridges (read before this run makes its own)."""
    if not os.path.isdir(revs):
        return [], []
    revisions, leftovers = [], []
    for entry in sorted(os.listdir(revs)):
        full = os.path.join(revs, entry)
        if os.path.islink(full) or not os.path.isdir(full):
            continue
        if not entry.startswith("."):
            revisions.append(entry)
        elif ".replaced-" in entry or entry.endswith(".bridge"):
            leftovers.append(entry)
    kept = set(r for r in revisions if r in keep) | set([publishing])
    others = sorted((r for r in revisions if r not in keep), key=lambda r: -_published_at(os.path.join(revs, r)))
    room = max(0, keep_revisions - len(kept))
    return others[room:], leftovers


def fetch_revision(url, name, revision, dest, keep_revisions=2, verify="quick", manifest_sha256_pin=None,
                   timeout=60, chunk_size=DEFAULT_CHUNK, headers=None, validate_certs=True, protect=None,
                   check_mode=False, free_bytes=disk_free_bytes):
    """Fetch, verify, publish and prune (see the module docstring). Returns the result dict of
    labfleet.vllm.model_fetch; raises FetchError (or ManifestError) saying what to fix."""
    started = time.monotonic()
    started_ns = time.time_ns()
    manifest_sha256_pin = manifest_sha256_pin.strip().lower() if isinstance(manifest_sha256_pin, str) else None
    check_options(url, name, revision, dest, keep_revisions, verify, manifest_sha256_pin or None, timeout, chunk_size,
                  protect)
    run = Fetch(url, name, revision, dest, timeout, chunk_size, headers, validate_certs, verify)
    if os.path.lexists(run.dest) and not os.path.islink(run.dest):
        kind = "a directory" if os.path.isdir(run.dest) else "a file"
        run.fail("%s is %s the store does not manage; move it away (or set the model path elsewhere) - nothing was "
                 "changed" % (run.dest, kind))
    manifest, sha = run.read_manifest()
    if manifest_sha256_pin and sha != manifest_sha256_pin:
        run.fail("the store's manifest of %s revision %s has sha256 %s, but manifest_sha256 pins %s: the preflight "
                 "judged another manifest; run the preflight again (it reads the store's manifest) or restore that "
                 "manifest on the store - nothing was changed" % (name, revision, sha, manifest_sha256_pin))
    if check_mode:
        return _plan_and_apply(run, manifest, sha, keep_revisions, protect, True, free_bytes, started, started_ns)
    if not os.path.isdir(run.revs):
        # a first fetch needs every byte: refused before the lock creates <dest>.revisions
        _check_free(run, manifest["total_bytes"], free_bytes)
    with revisions_lock(run):
        return _plan_and_apply(run, manifest, sha, keep_revisions, protect, False, free_bytes, started, started_ns)


@contextlib.contextmanager
def revisions_lock(run):
    """An exclusive lock on ``<dest>.revisions/.lock`` (flock) for the fetch's writes; another fetch of the
    same dest waits for it as long as ``timeout``, then this one fails."""
    os.makedirs(run.revs, mode=0o755, exist_ok=True)
    fd = os.open(os.path.join(run.revs, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + run.timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() >= deadline:
                    run.fail("another fetch of %s holds %s for more than %d s; wait until it ends (or stop it), then "
                             "run again" % (run.dest, os.path.join(run.revs, ".lock"), run.timeout))
                time.sleep(0.2)
        yield
    finally:
        os.close(fd)


def _plan_and_apply(run, manifest, sha, keep_revisions, protect, check_mode, free_bytes, started, started_ns):
    """What fetch_revision does once the manifest is read: plan, and unless check_mode fetch, publish, prune."""
    name, revision, verify = run.name, run.revision, run.verify
    previous = link_revision(run.dest)
    files = manifest["files"]
    wanted = set(f["path"] for f in files)

    final_state = read_state(os.path.join(run.final, STATE_FILE)) if os.path.isdir(run.final) else None
    good_final = run.good_files(run.final, files, final_state) if final_state is not None else {}
    complete = final_state is not None and len(good_final) == len(files) \
        and _listed_files(run.final) <= wanted
    plan = {"link": [], "keep": [], "fetch": []}
    if complete:
        run.progress["files_verified"] = len(files)
    else:
        staged_state = read_state(os.path.join(run.staging, STATE_FILE)) if os.path.isdir(run.staging) else None
        good_staged = run.good_files(run.staging, files, staged_state) if staged_state is not None else {}
        elsewhere = reusable_files(run)
        for entry in files:
            if entry["path"] in good_staged:
                plan["keep"].append(entry)
            elif entry["path"] in good_final:
                plan["link"].append((entry, os.path.join(run.final, entry["path"])))
            else:
                if final_state is not None and os.path.lexists(os.path.join(run.final, entry["path"])):
                    run.progress["files_repaired"].append(entry["path"])
                other = run.verified_copy(elsewhere.get((entry["sha256"], entry["size"])), entry)
                if other:
                    plan["link"].append((entry, other))
                    run.progress["files_reused"] += 1
                else:
                    plan["fetch"].append(entry)
        run.progress["files_verified"] = len(plan["keep"]) + len(plan["link"]) - run.progress["files_reused"]
    pending_bytes = sum(e["size"] - _part_size(run.staging, e) for e in plan["fetch"])
    keep = set([revision] + ([previous] if previous else []) + list(protect or []))
    pruned, leftovers = prune_plan(run.revs, keep_revisions, keep, revision)
    link_moves = not (os.path.islink(run.dest) and os.readlink(run.dest) == run.link_target)
    state_stale = complete and final_state.get("manifest_sha256") != sha
    result = dict(run.progress, revision=revision, path=run.final, previous=previous, manifest_sha256=sha,
                  verify=verify, pruned=pruned, pending=[e["path"] for e in plan["fetch"]],
                  pending_bytes=pending_bytes)
    changed = bool(not complete or link_moves or pruned or leftovers or state_stale)
    if check_mode:
        result.update(changed=changed, seconds=round(time.monotonic() - started, 3))
        return result

    if not complete:
        _check_free(run, pending_bytes, free_bytes)
        _fill_staging(run, plan, files, sha)
        _publish(run, previous == revision and os.path.isdir(run.final), started_ns)
    elif state_stale:
        state = dict(final_state, manifest_sha256=sha, name=name, revision=revision)
        write_state(os.path.join(run.final, STATE_FILE), state)
    switch_link(run.dest, run.link_target)
    for entry in pruned:
        shutil.rmtree(os.path.join(run.revs, entry))
    for entry in leftovers:
        shutil.rmtree(os.path.join(run.revs, entry), ignore_errors=True)
    result.update(run.progress, changed=changed, path=os.path.realpath(run.dest), pending=[], pending_bytes=0,
                  seconds=round(time.monotonic() - started, 3))
    return result


def _part_size(staging, entry):
    try:
        have = os.lstat(os.path.join(staging, entry["path"]) + PART_SUFFIX).st_size
    except OSError:
        return 0
    return have if have <= entry["size"] else 0


def _check_free(run, pending_bytes, free_bytes):
    if not pending_bytes:
        return
    base = _free_base(run.revs)
    free = free_bytes(base)
    if free < pending_bytes + DISK_MARGIN:
        run.fail("not enough free disk for %s revision %s on the filesystem of %s: %d bytes still to fetch (plus a "
                 "margin of %d), %d free; free some space (or set keep_revisions lower) - nothing was fetched"
                 % (run.name, run.revision, base, pending_bytes, DISK_MARGIN, free))


def _fill_staging(run, plan, files, sha):
    """Bring every file into the staging directory (hard links of good files, downloads of the rest)."""
    os.makedirs(run.staging, mode=0o755, exist_ok=True)
    state_path = os.path.join(run.staging, STATE_FILE)
    state = read_state(state_path)
    state.update(format=STATE_FORMAT, name=run.name, revision=run.revision, manifest_sha256=sha)
    for entry, source in plan["link"]:
        _link_or_copy(source, os.path.join(run.staging, entry["path"]))
        state["files"][entry["path"]] = state_entry(os.lstat(os.path.join(run.staging, entry["path"])),
                                                    entry["sha256"])
    write_state(state_path, state)
    for entry in plan["fetch"]:
        state["files"].pop(entry["path"], None)
        run.download(entry, run.staging)
        state["files"][entry["path"]] = state_entry(os.lstat(os.path.join(run.staging, entry["path"])),
                                                    entry["sha256"])
        write_state(state_path, state)
    wanted = set(f["path"] for f in files)
    for extra in _listed_files(run.staging) - wanted:
        os.unlink(os.path.join(run.staging, extra))
    state["files"] = dict((k, v) for k, v in state["files"].items() if k in wanted)
    state["published"] = utc_now()
    write_state(state_path, state)
    _fsync_tree(run.staging)


def _publish(run, serving, started_ns):
    """Rename the staging directory to the revision; a repaired revision replaces the damaged one
    without the link ever dangling (``serving``: the link points at it)."""
    if not os.path.isdir(run.final):
        os.rename(run.staging, run.final)
        fsync_dir(run.revs)
        return
    aside = os.path.join(run.revs, ".%s.replaced-%d" % (run.revision, started_ns))
    if not serving:
        os.rename(run.final, aside)
        os.rename(run.staging, run.final)
        fsync_dir(run.revs)
        return
    bridge = os.path.join(run.revs, ".%s.bridge" % run.revision)
    if os.path.lexists(bridge):
        shutil.rmtree(bridge)
    os.rename(run.staging, bridge)
    switch_link(run.dest, "%s.revisions/%s" % (os.path.basename(run.dest), os.path.basename(bridge)))
    os.rename(run.final, aside)
    _hardlink_tree(bridge, run.staging)
    _fsync_tree(run.staging)
    os.rename(run.staging, run.final)
    fsync_dir(run.revs)
    switch_link(run.dest, run.link_target)
    shutil.rmtree(bridge)
