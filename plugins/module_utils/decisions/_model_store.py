# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.deploy_gate module instead.
"""The model store as the plan sees it (issue 26): the request's ``model_store`` ({url, name,
revision}), the store's answer for the revision's manifest (``<url>/<name>/<revision>/
labfleet-manifest.json``, read by the preflight from the host itself), and what the host will
fetch: the revision itself when it serves the checkpoint natively, else the FP16 or GPTQ copy the
store's converter makes once (``<revision>+fp16``, ``<revision>+gptq-g<G>``).

- :func:`store_request` checks the request key (raises GateInputError naming what to fix);
- :func:`read_store` judges the store's answer: the manifest, or the reason the host is refused
  (MODEL_STORE_UNREACHABLE, MODEL_NOT_IN_STORE, MODEL_MANIFEST_INVALID);
- :func:`store_model` is the gate's model input (the manifest's ``gate`` when the caller has none);
- :func:`fetch_record` is the plan's ``model_store`` record and the disk check of what is fetched
  (INSUFFICIENT_DISK before any transfer; a converted copy's disk is the plan's copy check, reused).

Pure logic: no Ansible imports, no I/O.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gate_inputs import (
    GateInputError,
    short_text,
    to_mapping,
    to_str,
)
# What the fetch keeps free beyond the bytes it writes.
from ansible_collections.labfleet.vllm.plugins.module_utils.store._fetch import DISK_MARGIN as FETCH_DISK_MARGIN
from ansible_collections.labfleet.vllm.plugins.module_utils.store._manifest import (
    MANIFEST_FILE,
    ManifestError,
    check_name,
    manifest_sha256,
    parse_manifest,
)

# A serving host keeps each fetched revision under <model_path>.revisions/<revision>/ (store/_fetch.py).
REVISIONS_SUFFIX = ".revisions"

STORE_REASON_CODES = {
    "MODEL_STORE_UNREACHABLE": "The host could not read the model's manifest from the model store "
                               "(request.model_store.url): no answer, a timeout or an HTTP error other than 404.",
    "MODEL_NOT_IN_STORE": "The model store answered 404 for the manifest of request.model_store.name / revision: "
                          "the store holds no such revision.",
    "MODEL_MANIFEST_INVALID": "The model store's manifest of the revision is not a labfleet.model-manifest/1 "
                              "document for that name and revision (not JSON, a field missing or wrong, the "
                              "files' sizes not adding up to total_bytes).",
}
STORE_WARNING_CODES = {
    "MODEL_DISK_UNCHECKED": "The free disk space where the model revision from the store goes is unknown; the "
                            "fetch checks it before it writes anything.",
}

# http(s)://host[:port][/path], no credentials, query or fragment; host a DNS name, IPv4 or [IPv6].
_URL_RE = re.compile(r"^(https?)://(\[[0-9A-Fa-f:.]{2,45}\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?)"
                     r"(?::([0-9]{1,5}))?(/[A-Za-z0-9._~/-]*)?\Z")
_URL_EXAMPLE = "http://models.lab:8080"


def _segment(value, key):
    """request.model_store.name or .revision: the store's own rule for them (store/_manifest.py)."""
    text = to_str(value, "request.model_store.%s" % key, allow_numbers=False)
    try:
        return check_name(text.strip() if text else "", "request.model_store.%s (the model's %s in the store)"
                          % (key, key))
    except ManifestError as exc:
        raise GateInputError(str(exc))


def _store_url(value):
    text = to_str(value, "request.model_store.url", allow_numbers=False)
    text = (text or "").strip().rstrip("/")
    authority = text.split("://", 1)[1].split("/", 1)[0] if "://" in text else ""
    if "@" in authority:
        raise GateInputError("request.model_store.url: no credentials in the URL (user:password@ would be stored in "
                             "the plan and in logs); give the store's address alone, e.g. %s, got %s"
                             % (_URL_EXAMPLE, short_text(value)))
    match = _URL_RE.match(text)
    port = int(match.group(3)) if match and match.group(3) else None
    path = match.group(4) if match else None
    if match is None or (port is not None and not 0 < port < 65536) or (path and "/../" in path + "/"):
        raise GateInputError("request.model_store.url: expected the store's address http(s)://host[:port] (an "
                             "optional path, no credentials, query or fragment), e.g. %s, or empty for no store, "
                             "got %s" % (_URL_EXAMPLE, short_text(value)))
    return text


def store_request(value):
    """request.model_store: None (no store: url empty or the key absent), else {url (without a
    trailing slash), name, revision, manifest_url}; raises GateInputError naming what to fix."""
    store = to_mapping(value, "request.model_store", "url, name, revision")
    unknown = sorted(set(store) - set(("url", "name", "revision")))
    if unknown:
        raise GateInputError("request.model_store: unknown key %s; the keys are url, name and revision"
                             % ", ".join(unknown))
    url = to_str(store.get("url"), "request.model_store.url", allow_numbers=False)
    if not url or not url.strip():
        return None
    out = {"url": _store_url(url), "name": _segment(store.get("name"), "name"),
           "revision": _segment(store.get("revision"), "revision")}
    out["manifest_url"] = "%s/%s/%s/%s" % (out["url"], out["name"], out["revision"], MANIFEST_FILE)
    return out


def revision_dir(model_path, revision):
    """Where a serving host keeps ``revision``: <model_path>.revisions/<revision>."""
    return "%s%s/%s" % (model_path.rstrip("/"), REVISIONS_SUFFIX, revision)


def copy_revision(revision, kind, group_size=None):
    """The store's revision of a converted copy: <revision>+fp16, <revision>+gptq-g<G>."""
    return "%s+fp16" % revision if kind == "fp16" else "%s+gptq-g%s" % (revision, group_size)


# ---------------------------------------------------------------------------------------------
# The store's answer
# ---------------------------------------------------------------------------------------------


def read_manifest(content, store):
    """The manifest of ``store``'s revision from its text as served (the store's own strict parse,
    store/_manifest.py), for that name and revision and with the gate's model input; raises
    ManifestError saying what is wrong."""
    data = parse_manifest(content, store["manifest_url"])
    for key in ("name", "revision"):
        if data[key] != store[key]:
            raise ManifestError("%s: the manifest's %s is %s, the request's %s (the store's directory and its "
                                "manifest disagree)" % (store["manifest_url"], key, short_text(data[key]), store[key]))
    if not data["gate"]:
        raise ManifestError("%s: the manifest has no gate (the model input model_facts reads from the revision), so "
                            "the host cannot be planned from it" % store["manifest_url"])
    return data


def _status(answer):
    status = answer.get("status")
    if isinstance(status, str) and status.strip().lstrip("-").isdigit():
        status = int(status)
    return status if isinstance(status, int) and not isinstance(status, bool) else None


def _answer_text(answer, status):
    msg = answer.get("msg")
    msg = " ".join(msg.split())[:300] if isinstance(msg, str) and msg.strip() else None
    if status is None or status < 0:
        return msg or "no answer recorded (the preflight did not ask the store)"
    return "HTTP %d%s" % (status, ": %s" % msg if msg else "")


def read_store(store, answer):
    """The store's answer for ``store``'s manifest (``answer``: {status, content, msg} of the
    preflight's ansible.builtin.uri GET): {manifest, manifest_sha256, reason}, manifest None and
    reason a {code, message} when the host must be refused for it."""
    answer = to_mapping(answer, "model_store", "status, content, msg (the preflight's GET of the manifest)")
    status = _status(answer)
    content = answer.get("content")
    out = {"manifest": None, "manifest_sha256": None, "reason": None}
    where = "%s (the manifest of %s/%s)" % (store["manifest_url"], store["name"], store["revision"])
    if status == 404:
        out["reason"] = {"code": "MODEL_NOT_IN_STORE", "message": (
            "the model store at %s has no %s/%s: %s answered 404. Check request.model_store.name and revision "
            "against the store (the revision must be published there before the preflight)"
            % (store["url"], store["name"], store["revision"], store["manifest_url"]))}
    elif status != 200 or not isinstance(content, str):
        out["reason"] = {"code": "MODEL_STORE_UNREACHABLE", "message": (
            "this host could not read %s (%s): check that the model store at %s is up and that this host reaches it "
            "(address, DNS, firewall, proxy); the host fetches its weights from there"
            % (where, _answer_text(answer, status) if status != 200 else "HTTP 200 without content", store["url"]))}
    else:
        out["manifest_sha256"] = manifest_sha256(content)
        try:
            out["manifest"] = read_manifest(content, store)
        except ManifestError as exc:
            out["reason"] = {"code": "MODEL_MANIFEST_INVALID", "message": (
                "the model store's manifest of %s/%s cannot be used: %s. Publish the revision again with the store's "
                "tools (or fix request.model_store to name a revision the store holds)"
                % (store["name"], store["revision"], str(exc).rstrip(".")))}
    return out


def store_model(model, request, answer):
    """The gate's model input: ``model`` when given, else the store's manifest ``gate`` (None
    errors: the plan reports them)."""
    if model or not isinstance(request, dict):
        return model
    try:
        store = store_request(request.get("model_store"))
        read = read_store(store, answer) if store else {}
    except GateInputError:
        return model
    return (read.get("manifest") or {}).get("gate") or model


# ---------------------------------------------------------------------------------------------
# What the host fetches, and whether it fits
# ---------------------------------------------------------------------------------------------


def _fetched(serving, store):
    """(kind, revision, dest, planned bytes, the copy's disk record or None) of what the host fetches."""
    repack = serving.get("gptq_repack") or {}
    if serving.get("gptq_model_path"):
        return ("gptq", copy_revision(store["revision"], "gptq", repack.get("group_size")),
                serving["gptq_model_path"], repack.get("repacked_bytes"), serving.get("gptq_copy") or {})
    if serving.get("fp16_model_path"):
        return ("fp16", copy_revision(store["revision"], "fp16"), serving["fp16_model_path"],
                serving.get("fp16_weight_bytes"), serving.get("fp16_copy") or {})
    return "native", store["revision"], serving.get("source_model_path"), None, None


def _gb(value):
    return "%.1f GB" % (value / 1e9)


def fetch_record(store, read, serving, measured):
    """The plan's ``model_store`` record and the native fetch's disk findings: (record, reasons,
    warnings). ``read``: read_store's answer; ``serving``: the plan's serving decision (its copy
    records hold the copy's disk check, made by the plan); ``measured``: {disk_free_bytes,
    complete: published there, the fetch's state file is in it} of <model_path>.revisions/<revision> on the host."""
    manifest = read["manifest"]
    record = {"url": store["url"], "name": store["name"], "revision": store["revision"],
              "manifest_url": store["manifest_url"], "manifest_sha256": read["manifest_sha256"],
              "total_bytes": manifest["total_bytes"] if manifest else None,
              "fetch": None, "disk_free_bytes": None, "disk_needed_bytes": None}
    if manifest is None:
        return record, [], []
    kind, revision, dest, planned, copy = _fetched(serving, store)
    if copy is not None:
        # The copy's disk (free where it goes, complete or not, INSUFFICIENT_DISK) is the plan's copy check.
        record["fetch"] = {"revision": revision, "dest": dest, "bytes": planned}
        record.update(disk_free_bytes=copy.get("disk_free_bytes"), disk_needed_bytes=copy.get("disk_needed_bytes"))
        return record, [], []
    measured = measured or {}
    free = measured.get("disk_free_bytes")
    free = free if isinstance(free, int) and not isinstance(free, bool) and free >= 0 else None
    needed = 0 if measured.get("complete") is True else manifest["total_bytes"]
    record["fetch"] = {"revision": revision, "dest": dest, "bytes": manifest["total_bytes"]}
    record.update(disk_free_bytes=free, disk_needed_bytes=needed)
    where = revision_dir(dest, revision) if dest else "the model path"
    if needed and free is None:
        return record, [], [{"code": "MODEL_DISK_UNCHECKED", "message": (
            "the free disk space at %s is unknown, so the plan could not check that %s/%s (%s) fits; the fetch "
            "checks it before it writes anything" % (where, store["name"], revision, _gb(needed)))}]
    if needed and free < needed + FETCH_DISK_MARGIN:
        values = (store["name"], revision, _gb(needed), needed, FETCH_DISK_MARGIN // (1024 * 1024), where, _gb(free),
                  free, _gb(needed + FETCH_DISK_MARGIN - free))
        return record, [{"code": "INSUFFICIENT_DISK", "message": (
            "%s/%s from the model store needs %s (%d bytes, its manifest's total_bytes, and the fetch keeps %d MiB "
            "free) at %s, but that filesystem has %s (%d bytes) free: free %s there, or set request.model_path to a "
            "directory on a larger filesystem" % values)}], []
    return record, [], []
