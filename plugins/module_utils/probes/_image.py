# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.vllm_image_facts module instead.
"""vLLM image facts: shipped profiles of known images, and parsers for what the host reports.

Pure functions and data (no Ansible imports):

- ``PROFILES``: what is known about published ``vllm/vllm-openai`` images, so the deployment gate
  can decide before the image is pulled. Derived from the release table ``_policy.VLLM_RELEASES``
  (each per-release fact is written there once). Every field has a ``source`` and a ``confidence``
  (``verified``: read in the release's own source or in two independent verbatim copies;
  ``third_party``: one verbatim third-party copy; ``inferred``: derived, check before relying on it).
- ``parse_inspect``: ``docker image inspect`` JSON -> digest, CUDA_VERSION, NVIDIA_REQUIRE_CUDA, ...
- ``PROBE_SCRIPT`` / ``parse_probe_output``: the script run inside the image (python3 -c, no GPU,
  no network) and the parser of what it prints.
- ``GPU_CHECK_SCRIPT`` / ``classify_gpu_check``: the opt-in tiny CUDA operation and its verdict.
- ``merge_image_facts``: one ``image`` dict from inspect + probe + registry + profile.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import math
import re
import unicodedata

from ansible_collections.labfleet.vllm.plugins.module_utils.probes._host import GO_TRUE
from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._policy import (
    TORCH_WHEELS,
    VLLM_RELEASES,
    covers,
    parse_arch,
    require_cuda_string,
)

# ---------------------------------------------------------------------------------------------
# Profiles of published images, derived from the release table (_policy.VLLM_RELEASES)
# ---------------------------------------------------------------------------------------------

# NVIDIA_REQUIRE_CUDA of the nvidia/cuda base images (built from _policy.FORWARD_COMPAT_IMAGE_BRANCHES).
REQUIRE_CUDA_12_4 = require_cuda_string("12.4")
REQUIRE_CUDA_12_9 = require_cuda_string("12.9")
REQUIRE_CUDA_13_0 = require_cuda_string("13.0")

# --quantization names of the releases with a profile (the lists live in VLLM_RELEASES).
QUANT_0_8_5 = VLLM_RELEASES["0.8.5"]["quantization_methods"]
QUANT_0_19_1 = VLLM_RELEASES["0.19.1"]["quantization_methods"]
QUANT_0_20_0 = VLLM_RELEASES["0.20.0"]["quantization_methods"]

# Profile field <- release field (VLLM_RELEASES names; "version" is the release key itself).
PROFILE_FIELDS = (
    ("vllm_version", "version"), ("cuda_version", "cuda_base"), ("require_cuda", "require_cuda"),
    ("arch_list", "vllm_arch"), ("torch_version", "torch"), ("torch_cuda_version", "torch_cuda"),
    ("torch_arch_list", "torch_arch"), ("python_version", "python"), ("entrypoint", "entrypoint"),
    ("quantization_methods", "quantization_methods"), ("min_compute_capability", "min_cc"),
)


def _split(text):
    return text.split() if text is not None else None


def profile_from_release(version, image_key, releases=None):
    """The profile of one published image of a release (PROFILES' shape), from the release table.

    A variant image (e.g. the -cu129 build of 0.20.0) overrides the release fields it names; its
    CUDA-dependent fields (require_cuda, torch_arch) follow the override.
    """
    releases = VLLM_RELEASES if releases is None else releases
    release = releases[version]
    image = release["images"][image_key]
    fields = dict(release, version=version)
    variant = image.get("variant") or {}
    fields.update(variant)
    if "cuda_base" in variant:
        fields["require_cuda"] = require_cuda_string(fields["cuda_base"])
    if "torch_wheel" in variant:
        wheel = TORCH_WHEELS.get(variant["torch_wheel"])
        fields["torch_arch"] = wheel["arch"] if wheel else None
    field_source = dict(release.get("field_source") or {}, **(image.get("field_source") or {}))
    field_confidence = dict(release.get("field_confidence") or {}, **(image.get("field_confidence") or {}))
    profile = {"tags": list(image["tags"]), "digests": list(image.get("digests") or [])}
    profile["source"] = {}
    profile["confidence"] = {}
    for name, field in PROFILE_FIELDS:
        value = copy.deepcopy(fields.get(field))
        if name in ("arch_list", "torch_arch_list"):
            value = _split(value)
        profile[name] = value
        profile["source"][name] = field_source.get(field, release["source"])
        profile["confidence"][name] = field_confidence.get(field, release["confidence"])
    profile["require_cuda_complete"] = profile["require_cuda"] is not None
    profile["env_has_arch_list"] = bool(image.get("env_has_arch_list"))
    profile["notes"] = list(fields.get("notes") or [])
    return profile


PROFILES = dict((image_key, profile_from_release(version, image_key))
                for version, release in VLLM_RELEASES.items()
                for image_key in sorted(release.get("images") or {}))

# Registries that mean Docker Hub.
_DOCKER_HUB = ("docker.io", "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com")

_REF_RE = re.compile(
    r"^(?P<repo>[a-z0-9]+(?:[._-]+[a-z0-9]+)*(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[0-9a-f]{64}))?\Z")


# The registry part of a reference: domain-component ('.' domain-component)* or [IPv6], then an optional
# :port (distribution/reference regexp.go:61 domainNameComponent, :65 optionalPort, :91 ipv6address,
# commit 0965666a; verified). ASCII only: [0-9] and [A-Za-z], never \d or \w.
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_REGISTRY_RE = re.compile(r"^(?:%s(?:\.%s)*|\[[a-fA-F0-9:]+\])(?::(?P<port>[0-9]{1,5}))?\Z"
                          % (_DOMAIN_COMPONENT, _DOMAIN_COMPONENT))
# A repository path may have at most 255 characters (distribution/reference reference.go:62
# RepositoryNameTotalLengthMax, checked at :255; verified). A whole reference is at most
# registry (255) + path (255) + tag (128) + digest (71) and separators, so 1024 bounds every valid one.
REPOSITORY_MAX = 255
REFERENCE_MAX = 1024
_EXAMPLE_REF = "[registry/]name[:tag][@sha256:digest], for example vllm/vllm-openai:v0.8.5"


class ImageRefError(ValueError):
    """An image reference that docker would not accept."""


def _bad_character(text):
    """(index, char) of the first character that has no place in an image reference: anything but
    printable ASCII (controls, newlines, spaces, non-ASCII letters and digits such as '５')."""
    for index, char in enumerate(text):
        if not " " < char < "\x7f":
            return index, char
    return None


def parse_reference(ref):
    """Split an image reference into {registry, repository, tag, digest, name, canonical}.

    ``name`` is the short Docker Hub form ("vllm/vllm-openai"), ``canonical`` adds the tag or digest
    ("vllm/vllm-openai:v0.8.5"). A reference without tag or digest gets the tag "latest", as docker does.
    Anything but printable ASCII is refused (a newline or a control character, whitespace, a
    non-ASCII digit), and so are an over-long reference and a registry that is not a host[:port].
    """
    if not isinstance(ref, str) or not ref.strip():
        raise ImageRefError("image reference is empty; expected %s" % _EXAMPLE_REF)
    if len(ref) > REFERENCE_MAX:
        raise ImageRefError("image reference is %d characters long, more than any valid one (%d); expected %s"
                            % (len(ref), REFERENCE_MAX, _EXAMPLE_REF))
    bad = _bad_character(ref)
    if bad:
        index, char = bad
        kind = ("whitespace" if char.isspace() else "a control character" if unicodedata.category(char)[0] == "C"
                else "a non-ASCII character")
        raise ImageRefError("image reference %s contains %s (%s at position %d); expected printable ASCII, %s"
                            % (json.dumps(ref), kind, json.dumps(char), index, _EXAMPLE_REF))
    if ref.startswith("sha256:"):
        if not re.match(r"^sha256:[0-9a-f]{64}\Z", ref):
            raise ImageRefError("image id %r is not sha256: followed by 64 hex digits" % ref)
        return {"registry": None, "repository": None, "tag": None, "digest": None, "id": ref,
                "name": None, "canonical": ref}
    first, sep, rest = ref.partition("/")
    registry = None
    path = ref
    if sep and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        registry = first
        path = rest
        registry_match = _REGISTRY_RE.match(registry)
        if not registry_match or not 0 < int(registry_match.group("port") or 1) <= 65535:
            raise ImageRefError("%r has an invalid registry %r (expected host[:port], port 1-65535, or [IPv6][:port]); "
                                "expected %s" % (ref, registry, _EXAMPLE_REF))
    match = _REF_RE.match(path)
    if not match:
        raise ImageRefError("%r is not a valid image reference (expected [registry/]name[:tag][@sha256:digest], "
                            "name in lowercase)" % ref)
    repo = match.group("repo")
    tag = match.group("tag")
    digest = match.group("digest")
    if len(repo) > REPOSITORY_MAX:
        raise ImageRefError("the repository path of %r is %d characters long, more than docker allows (%d)"
                            % (ref[:80] + "...", len(repo), REPOSITORY_MAX))
    if registry is None or registry in _DOCKER_HUB:
        registry = "docker.io"
        if repo.startswith("library/"):
            name = repo[len("library/"):]
        else:
            name = repo
    else:
        name = "%s/%s" % (registry, repo)
    if tag is None and digest is None:
        tag = "latest"
    canonical = name + (":" + tag if tag else "") + ("@" + digest if digest else "")
    return {"registry": registry, "repository": repo, "tag": tag, "digest": digest, "id": None,
            "name": name, "canonical": canonical}


def lookup_profile(ref, profiles=None):
    """(profile key, profile copy) for an image reference or (None, None).

    A digest matches a profile listing it; otherwise the repository and tag must match one of the
    profile's tags. A reference with both tag and digest whose digest is not listed still matches
    by tag (docker would pull by digest, so the probe after the pull has the last word).
    """
    profiles = PROFILES if profiles is None else profiles
    try:
        parsed = parse_reference(ref)
    except ImageRefError:
        return None, None
    for key, profile in sorted(profiles.items()):
        if parsed["digest"] and parsed["digest"] in (profile.get("digests") or []):
            return key, copy.deepcopy(profile)
    for key, profile in sorted(profiles.items()):
        name = key.rsplit(":", 1)[0]
        if parsed["name"] == name and parsed["tag"] in (profile.get("tags") or []):
            return key, copy.deepcopy(profile)
    return None, None


# ---------------------------------------------------------------------------------------------
# Arch lists (parse_arch and covers, the SASS/PTX coverage rule, live in _policy.py)
# ---------------------------------------------------------------------------------------------

def split_arch_list(value):
    """An arch list as a list of entries: accepts a list, or a string split on spaces, ';' or ','."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        items = []
        for item in value:
            items.extend(split_arch_list(item) or [])
        return items
    if isinstance(value, str):
        # Printable ASCII only: parse_arch reads digits with \d and int(), which would take '７.０' for 7.0.
        return [part for part in re.split(r"[\s;,]+", value) if part and _bad_character(part) is None]
    return None


def normalise_arch_list(value):
    """Entries in torch notation ("7.0", "9.0+PTX"), sorted, merging sm_XY + compute_XY.

    A PTX-only entry (compute_XY without sm_XY) is written "X.Y+PTX" too. Unreadable entries are
    dropped.
    """
    entries = split_arch_list(value)
    if entries is None:
        return None
    found = {}
    for entry in entries:
        parsed = parse_arch(entry)
        if parsed is None:
            continue
        major, minor, suffix, sass, ptx = parsed
        key = (major, minor, suffix)
        old = found.get(key, (False, False))
        found[key] = (old[0] or sass, old[1] or ptx)
    result = []
    for (major, minor, suffix) in sorted(found):
        ptx = found[(major, minor, suffix)][1]
        result.append("%d.%d%s%s" % (major, minor, suffix, "+PTX" if ptx else ""))
    return result


def effective_arch_list(vllm_list, torch_list):
    """The arch list the image can run on: vLLM's kernel list filtered by torch's coverage.

    An entry of vLLM's list stays when torch also reaches that arch (by SASS or PTX); "+PTX" stays
    only when torch also carries PTX (both must JIT for a newer GPU). With one list unknown the
    other is returned; with both unknown, None.
    """
    vllm_norm = normalise_arch_list(vllm_list)
    torch_norm = normalise_arch_list(torch_list)
    if not vllm_norm:
        return torch_norm or None
    if not torch_norm:
        return vllm_norm
    torch_has_ptx = any(e.endswith("+PTX") for e in torch_norm)
    result = []
    for entry in vllm_norm:
        major, minor, suffix, sass, ptx = parse_arch(entry)
        if covers(torch_norm, (major, minor)) is None:
            continue
        if ptx and not torch_has_ptx:
            entry = entry[:-len("+PTX")]
        result.append(entry)
    return result


# ---------------------------------------------------------------------------------------------
# What docker and the image print: read strictly, keep only values of the expected shape
# ---------------------------------------------------------------------------------------------

# Go's encoding/json never writes NaN or Infinity, and docker's numbers fit 64 bits: anything
# else did not come from docker (inferred from Go's encoding/json).
INT_LIMIT = 2 ** 63 - 1
# CUDA_VERSION of the nvidia/cuda images is "12.4.0"-like, torch.version.cuda "12.4" (the fixtures under
# tests/unit/fixtures/image/; inferred as the general shape). ASCII digits only, bounded.
_CUDA_VERSION_RE = re.compile(r"^[0-9]{1,3}(?:\.[0-9]{1,4}){0,3}\Z")
# A package version (PEP 440 and local labels): starts with an ASCII digit, ASCII only, bounded.
_PACKAGE_VERSION_RE = re.compile(r"^[0-9][0-9A-Za-z.+_!-]{0,63}\Z")
_IMAGE_ID_RE = re.compile(r"^sha256:[0-9a-f]{64}\Z")
_METHOD_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}\Z")
# A bound on any text taken from the image (a real NVIDIA_REQUIRE_CUDA is about 1 kB), not a fact.
TEXT_MAX = 4096


def _reject_constant(name):
    raise ValueError("%s is not JSON" % name)


def _finite_float(text):
    value = float(text)
    if math.isinf(value):
        raise ValueError("the number %s is beyond a 64-bit float" % text[:40])
    return value


def _bounded_int(text):
    # Checked on the text first: int() of a 100000-digit literal is slow, and refused by Python 3.11+.
    if len(text.lstrip("-")) > 19 or abs(int(text)) > INT_LIMIT:
        raise ValueError("the number %s is beyond a 64-bit integer"
                         % (text if len(text) <= 40 else "%s...(%d digits)" % (text[:40], len(text))))
    return int(text)


def _strict_json(text):
    """json.loads without NaN/Infinity, numbers beyond 64 bits or a stack overflow (all ValueError)."""
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float, parse_int=_bounded_int)
    except RecursionError:
        raise ValueError("arrays/objects nested too deeply to read")


def loads_strict(text, what):
    """_strict_json; the ValueError says ``what`` printed no JSON, and why."""
    try:
        return _strict_json(text)
    except ValueError as exc:
        raise ValueError("%s printed no JSON (%s)" % (what, exc))


def plain_text(value, limit=TEXT_MAX):
    """``value`` when it is a string of at most ``limit`` printable ASCII characters (spaces allowed), else None."""
    if isinstance(value, str) and len(value) <= limit and all(" " <= ch < "\x7f" for ch in value):
        return value
    return None


def _string_list(value):
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _optional_string_list(value):
    """A list of strings as it is, else None (docker prints Entrypoint/Cmd as a list or null)."""
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return value
    return None


def _string_dict(value):
    if not isinstance(value, dict):
        return {}
    return dict((k, v) for k, v in value.items() if isinstance(k, str) and isinstance(v, str))


def checked_version(value, field, ignored, pattern=_PACKAGE_VERSION_RE):
    """``value`` when it matches ``pattern`` (ASCII digits, bounded); else None, with a note in ``ignored``."""
    if value is None:
        return None
    if isinstance(value, str) and pattern.match(value):
        return value
    ignored.append("%s %s is not a version (expected ASCII digits separated by dots%s); it is ignored"
                   % (field, json.dumps(value)[:80] if isinstance(value, str) else "of type %s" % type(value).__name__,
                      "" if pattern is _CUDA_VERSION_RE else ", then an optional ASCII label"))
    return None


def _checked_env_fields(env, source, ignored):
    """cuda_version, require_cuda and env_arch_list of an image's environment, each checked."""
    cuda = checked_version(env.get("CUDA_VERSION") or None, "%s CUDA_VERSION" % source, ignored, _CUDA_VERSION_RE)
    require = env.get("NVIDIA_REQUIRE_CUDA") or None
    if require is not None and plain_text(require) is None:
        ignored.append("%s NVIDIA_REQUIRE_CUDA holds characters other than printable ASCII (or is longer than %d); "
                       "it is ignored" % (source, TEXT_MAX))
        require = None
    arch = env.get("TORCH_CUDA_ARCH_LIST") or None
    if arch is not None and plain_text(arch) is None:
        ignored.append("%s TORCH_CUDA_ARCH_LIST holds characters other than printable ASCII (or is longer than %d); "
                       "it is ignored" % (source, TEXT_MAX))
        arch = None
    return {"cuda_version": cuda, "require_cuda": require, "env_arch_list": arch}


# ---------------------------------------------------------------------------------------------
# docker image inspect
# ---------------------------------------------------------------------------------------------

# Environment variables worth returning (the rest of the image's Env is not reported).
_ENV_PREFIXES = ("CUDA_", "NV_CUDA_", "NVIDIA_", "TORCH_", "VLLM_", "PYTORCH_", "NCCL_VERSION", "PYTHON")
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")


def env_to_dict(env):
    """["K=V", ...] -> {K: V} (the last one wins, as in docker)."""
    result = {}
    for item in env or []:
        if not isinstance(item, str):
            continue
        key, sep, value = item.partition("=")
        if sep:
            result[key] = value
    return result


def interesting_env(env):
    """The image variables worth reporting, never ones whose name suggests a secret."""
    return dict((k, v) for k, v in env.items()
                if k.startswith(_ENV_PREFIXES) and not any(w in k.upper() for w in _SECRET_WORDS))


def parse_inspect(text, ref=None):
    """Facts from ``docker image inspect`` output (a JSON list with one object).

    Returns {id, repo_tags, repo_digests, digest, created, architecture, os, size, env, labels,
    entrypoint, cmd, cuda_version, require_cuda, env_arch_list, ignored}. Raises ValueError when the
    text is not inspect JSON (NaN, Infinity, numbers beyond 64 bits and runaway nesting included).
    A value of the wrong shape is dropped (None, [] or {}); ``ignored`` says which, for the numbers
    the gate reads (CUDA_VERSION, NVIDIA_REQUIRE_CUDA, TORCH_CUDA_ARCH_LIST).
    """
    data = loads_strict(text, "docker image inspect")
    if isinstance(data, list):
        if not data:
            raise ValueError("docker image inspect printed an empty list")
        data = data[0]
    if not isinstance(data, dict):
        raise ValueError("docker image inspect printed %s instead of an object" % type(data).__name__)
    config = data.get("Config") or {}
    if not isinstance(config, dict):
        raise ValueError("docker image inspect: Config is not an object")
    env = env_to_dict(config.get("Env"))
    repo_digests = _string_list(data.get("RepoDigests"))
    ignored = []
    image_id = data.get("Id")
    if image_id is not None and not (isinstance(image_id, str) and _IMAGE_ID_RE.match(image_id)):
        # The id is what the probe runs: never anything but sha256:<64 hex> (a "--flag" would be an option).
        ignored.append("the image Id %s is not sha256:<64 hex digits>; the reference is used instead"
                       % json.dumps(image_id)[:80])
        image_id = None
    size = data.get("Size")
    result = {
        "id": image_id,
        "repo_tags": _string_list(data.get("RepoTags")),
        "repo_digests": repo_digests,
        "digest": pick_digest(repo_digests, ref),
        "created": plain_text(data.get("Created"), 64),
        "architecture": plain_text(data.get("Architecture"), 64),
        "os": plain_text(data.get("Os"), 64),
        "size": size if isinstance(size, int) and not isinstance(size, bool) and 0 <= size <= INT_LIMIT else None,
        "env": interesting_env(env),
        "labels": _string_dict(config.get("Labels")),
        "entrypoint": _optional_string_list(config.get("Entrypoint")),
        "cmd": _optional_string_list(config.get("Cmd")),
        # The toolkit reads it with Go's strconv.ParseBool (_host.require_cuda_enforcement).
        "disable_require": (env.get("NVIDIA_DISABLE_REQUIRE") or "").strip() in GO_TRUE,
        "ignored": ignored,
    }
    result.update(_checked_env_fields(env, "the image's", ignored))
    return result


def pick_digest(repo_digests, ref=None):
    """The sha256 digest of the RepoDigests entry for ``ref``'s repository (else the first one)."""
    wanted = None
    if ref:
        try:
            wanted = parse_reference(ref)["name"]
        except ImageRefError:
            wanted = None
    first = None
    for item in repo_digests:
        name, sep, digest = item.partition("@")
        if not sep or not _IMAGE_ID_RE.match(digest):
            continue
        first = first or digest
        try:
            if wanted and parse_reference(name)["name"] == wanted:
                return digest
        except ImageRefError:
            continue
    return first


def informative_line(text, fragments=()):
    """The line of docker's output worth quoting: one holding a fragment, else the first line that
    mentions an error, else the last non-empty line ("Run 'docker --help'" lines are skipped)."""
    lines = [line.strip() for line in (text or "").splitlines()
             if line.strip() and not line.strip().startswith(("Run 'docker", "Usage:"))]
    for fragment in fragments:
        for line in lines:
            if fragment in line.lower():
                return line
    for line in lines:
        if "error" in line.lower() or "unknown" in line.lower():
            return line
    return lines[-1] if lines else ""


def classify_docker_error(rc, out, err):
    """(state, message) for a failed docker command: absent, docker_unavailable or error."""
    text = "%s\n%s" % (out or "", err or "")
    lower = text.lower()
    if "no such image" in lower or "no such object" in lower:
        return "absent", "image is not on this host"
    if "cannot connect to the docker daemon" in lower or "is the docker daemon running" in lower:
        return "docker_unavailable", ("the Docker daemon does not answer: start it (systemctl start docker); until "
                                      "then only the shipped profile is reported")
    if "permission denied" in lower and "docker" in lower:
        return "docker_unavailable", ("permission denied talking to the Docker daemon: run the task with "
                                      "become: true or add the user to the docker group")
    return "error", "docker exited %s: %s" % (rc, informative_line(text) or "no output")


# ---------------------------------------------------------------------------------------------
# Registry (docker buildx imagetools inspect)
# ---------------------------------------------------------------------------------------------


def parse_registry_image(text, platform="linux/amd64"):
    """The image config printed by ``docker buildx imagetools inspect --format '{{json .}}'``.

    That prints ``{"name", "manifest", "image"}``; ``image`` is the config of a single-platform
    image or ``{platform: config}`` for a multi-platform index, and ``manifest.digest`` the digest
    of what the reference points at (buildx docs, "Format the output"). Returns {cuda_version,
    require_cuda, env_arch_list, entrypoint, labels, env, platform, digest}; ValueError when the
    text holds no image config (or is not strict JSON); values of the wrong shape are dropped, as
    in parse_inspect, and listed in ``ignored``.
    """
    data = loads_strict(text, "imagetools inspect")
    if not isinstance(data, dict):
        raise ValueError("imagetools inspect printed %s instead of an object" % type(data).__name__)
    digest = None
    manifest = data.get("manifest")
    if isinstance(manifest, dict) and isinstance(manifest.get("digest"), str) and _IMAGE_ID_RE.match(manifest["digest"]):
        digest = manifest["digest"]
    image = data.get("image", data)
    if not isinstance(image, dict):
        raise ValueError("imagetools inspect: image is not an object")
    chosen_platform = None
    if "config" not in image:
        candidates = dict((k, v) for k, v in image.items() if isinstance(v, dict) and "config" in v)
        if not candidates:
            raise ValueError("imagetools inspect output holds no image config")
        chosen_platform = platform if platform in candidates else sorted(candidates)[0]
        image = candidates[chosen_platform]
    config = image.get("config") or {}
    if not isinstance(config, dict):
        raise ValueError("imagetools inspect: config is not an object")
    env = env_to_dict(config.get("Env"))
    ignored = []
    result = {
        "platform": plain_text(chosen_platform or ("%s/%s" % (image.get("os"), image.get("architecture"))), 128),
        "digest": digest,
        "env": interesting_env(env),
        "entrypoint": _optional_string_list(config.get("Entrypoint")),
        "labels": _string_dict(config.get("Labels")),
        "ignored": ignored,
    }
    result.update(_checked_env_fields(env, "the registry config's", ignored))
    return result


# ---------------------------------------------------------------------------------------------
# In-image probe
# ---------------------------------------------------------------------------------------------

PROBE_MARKER = "LABFLEET_PROBE_JSON "

# Run as `python3 -c PROBE_SCRIPT <seconds>` inside the image: no GPU, no network. It never
# imports vllm itself when the quantization list can be read from source; it imports torch (no
# GPU needed) for torch.version.cuda and the compiled arch list. Python 3.6+ syntax only.
PROBE_SCRIPT = r'''
import json, os, re, signal, sys
MARK = "LABFLEET_PROBE_JSON "
r = {"probe_version": 1, "python_version": "%d.%d.%d" % sys.version_info[:3], "errors": []}
class _Late(Exception):
    pass
def _alarm(signum, frame):
    raise _Late("timed out")
try:
    budget = int(sys.argv[1]) if len(sys.argv) > 1 else 120
except ValueError:
    budget = 120
try:
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(max(1, budget))
except Exception:
    pass
def err(step, exc):
    r["errors"].append("%s: %s: %s" % (step, type(exc).__name__, exc))
def dist_version(name):
    try:
        from importlib import metadata
    except ImportError:
        try:
            import importlib_metadata as metadata
        except ImportError:
            return None
    try:
        return metadata.version(name)
    except Exception:
        return None
def literal_strings(node):
    import ast
    if isinstance(node, (ast.List, ast.Tuple)):
        out = []
        for elt in node.elts:
            if type(elt).__name__ == "Constant" and isinstance(elt.value, str):
                out.append(elt.value)
            elif type(elt).__name__ == "Str":
                out.append(elt.s)
            else:
                return None
        return out
    if isinstance(node, ast.Subscript):
        sl = node.slice
        if type(sl).__name__ == "Index":
            sl = sl.value
        return literal_strings(sl)
    return None
def methods_from_source(path):
    import ast
    with open(path) as handle:
        tree = ast.parse(handle.read())
    found = {}
    for node in tree.body:
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            name = getattr(target, "id", None)
            if name in ("QUANTIZATION_METHODS", "QuantizationMethods") and node.value is not None:
                values = literal_strings(node.value)
                if values:
                    found[name] = values
    return found.get("QUANTIZATION_METHODS") or found.get("QuantizationMethods")
r["vllm_version"] = dist_version("vllm")
r["torch_version"] = dist_version("torch")
try:
    import importlib.util
    spec = importlib.util.find_spec("vllm")
    if spec is not None and spec.submodule_search_locations:
        vdir = list(spec.submodule_search_locations)[0]
        r["vllm_path"] = vdir
        if r["vllm_version"] is None:
            for cand in ("_version.py", "version.py"):
                p = os.path.join(vdir, cand)
                if os.path.isfile(p):
                    with open(p) as handle:
                        m = re.search(r"""(?:__version__|version)\s*(?::\s*str)?\s*=\s*['"]([^'"]+)['"]""", handle.read())
                    if m:
                        r["vllm_version"] = m.group(1)
                        r["vllm_version_source"] = cand
                        break
        qpath = os.path.join(vdir, "model_executor", "layers", "quantization", "__init__.py")
        if os.path.isfile(qpath):
            try:
                methods = methods_from_source(qpath)
                if methods:
                    r["quantization_methods"] = methods
                    r["quantization_methods_source"] = "source"
            except Exception as exc:
                err("quantization source", exc)
    else:
        r["vllm_path"] = None
except Exception as exc:
    err("vllm", exc)
if r.get("vllm_path") and not r.get("quantization_methods"):
    try:
        signal.alarm(max(1, budget))
    except Exception:
        pass
    try:
        from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS
        r["quantization_methods"] = list(QUANTIZATION_METHODS)
        r["quantization_methods_source"] = "import"
    except BaseException as exc:
        err("quantization import", exc)
r["env_torch_cuda_arch_list"] = os.environ.get("TORCH_CUDA_ARCH_LIST")
r["env_cuda_version"] = os.environ.get("CUDA_VERSION")
try:
    signal.alarm(max(1, budget))
except Exception:
    pass
try:
    import torch
    r["torch_version"] = getattr(torch, "__version__", r["torch_version"])
    r["torch_cuda_version"] = getattr(getattr(torch, "version", None), "cuda", None)
    arch = []
    try:
        arch = list(torch.cuda.get_arch_list())
        src = "torch.cuda.get_arch_list"
    except Exception as exc:
        err("get_arch_list", exc)
    if not arch:
        try:
            flags = torch._C._cuda_getArchFlags()
            if flags:
                arch = flags.split()
                src = "torch._C._cuda_getArchFlags"
        except Exception as exc:
            err("_cuda_getArchFlags", exc)
    if not arch and r["env_torch_cuda_arch_list"]:
        arch = re.split(r"[\s;]+", r["env_torch_cuda_arch_list"].strip())
        src = "env:TORCH_CUDA_ARCH_LIST"
    if arch:
        r["torch_arch_list"] = arch
        r["torch_arch_list_source"] = src
except BaseException as exc:
    err("torch", exc)
try:
    signal.alarm(0)
except Exception:
    pass
sys.stdout.write("\n" + MARK + json.dumps(r, sort_keys=True) + "\n")
sys.stdout.flush()
'''

# Run as `python3 -c GPU_CHECK_SCRIPT` with --gpus all: one tiny elementwise op per visible GPU.
# It exercises torch's kernels (the "no kernel image" failure of images whose torch lacks the
# GPU's arch), not every vLLM kernel.
GPU_CHECK_SCRIPT = r'''
import json, sys
MARK = "LABFLEET_PROBE_JSON "
r = {"ok": False, "devices": []}
try:
    import torch
    r["cuda_available"] = bool(torch.cuda.is_available())
    if not r["cuda_available"]:
        r["error"] = "torch.cuda.is_available() is False: no GPU visible in the container"
    else:
        try:
            r["arch_list"] = list(torch.cuda.get_arch_list())
        except Exception:
            pass
        ok = True
        for i in range(torch.cuda.device_count()):
            dev = {"index": i, "name": torch.cuda.get_device_name(i),
                   "capability": "%d.%d" % tuple(torch.cuda.get_device_capability(i))}
            try:
                x = torch.ones(16, device="cuda:%d" % i)
                dev["result"] = float((x * 2).sum().item())
                torch.cuda.synchronize(i)
                dev["ok"] = dev["result"] == 32.0
            except Exception as exc:
                dev["ok"] = False
                dev["error"] = "%s: %s" % (type(exc).__name__, exc)
                r.setdefault("error", dev["error"])
            ok = ok and dev["ok"]
            r["devices"].append(dev)
        r["ok"] = ok and bool(r["devices"])
except BaseException as exc:
    r["error"] = "%s: %s" % (type(exc).__name__, exc)
sys.stdout.write("\n" + MARK + json.dumps(r, sort_keys=True) + "\n")
sys.stdout.flush()
'''


def extract_marked_json(text, marker=PROBE_MARKER):
    """The JSON object after the last ``marker`` line of ``text``; ValueError if none or malformed."""
    payload = None
    for line in (text or "").splitlines():
        if line.startswith(marker):
            payload = line[len(marker):]
    if payload is None:
        raise ValueError("no %r line in the output" % marker.strip())
    try:
        data = _strict_json(payload)
    except ValueError as exc:
        raise ValueError("the %s line is not JSON (%s)" % (marker.strip(), exc))
    if not isinstance(data, dict):
        raise ValueError("the %s line is not a JSON object" % marker.strip())
    return data


def parse_probe_output(text):
    """The probe's report: {vllm_version, torch_version, torch_cuda_version, torch_arch_list,
    quantization_methods, ...}. Raises ValueError when the output holds no probe line.

    What runs in the image is not trusted: versions must be ASCII version strings (else None, and a
    note in ``ignored``), quantization names plain ASCII names, other fields strings."""
    raw = extract_marked_json(text)
    ignored = []
    data = {"ignored": ignored}
    for key in ("vllm_version", "torch_version"):
        data[key] = checked_version(raw.get(key), "the probe's %s" % key, ignored)
    data["torch_cuda_version"] = checked_version(raw.get("torch_cuda_version"), "the probe's torch_cuda_version",
                                                 ignored, _CUDA_VERSION_RE)
    data["python_version"] = checked_version(raw.get("python_version"), "the probe's python_version", ignored)
    for key in ("vllm_path", "vllm_version_source", "quantization_methods_source", "torch_arch_list_source",
                "env_torch_cuda_arch_list", "env_cuda_version"):
        data[key] = raw.get(key) if isinstance(raw.get(key), str) and len(raw[key]) <= TEXT_MAX else None
    version = raw.get("probe_version")
    data["probe_version"] = version if isinstance(version, int) and not isinstance(version, bool) and \
        0 <= version < 1000 else None
    arch = raw.get("torch_arch_list")
    if isinstance(arch, str) or (isinstance(arch, list) and all(isinstance(e, str) for e in arch)):
        data["torch_arch_list_raw"] = arch
        data["torch_arch_list"] = normalise_arch_list(arch)
    methods = raw.get("quantization_methods")
    if methods is not None and not (isinstance(methods, list) and all(isinstance(m, str) and _METHOD_RE.match(m)
                                                                      for m in methods)):
        ignored.append("the probe's quantization_methods are not a list of plain names; they are ignored")
        methods = None
    data["quantization_methods"] = methods
    errors = raw.get("errors")
    data["errors"] = [e[:TEXT_MAX] for e in errors if isinstance(e, str)] if isinstance(errors, list) else []
    return data


# Text fragments of container/CUDA failures -> (category, what to do).
_GPU_FAILURES = (
    ("no kernel image is available", "no_kernel_image",
     "the image has no kernels for this GPU's architecture: use an image built for it (for a V100, sm_70: "
     "vllm/vllm-openai v0.8.5 or a 0.10.2-0.19.x release)"),
    ("unsatisfied condition: cuda", "driver_too_old",
     "the host driver is older than the image's NVIDIA_REQUIRE_CUDA allows: upgrade the driver or use an "
     "image built on an older CUDA"),
    ("could not select device driver", "no_gpu_runtime",
     "Docker has no GPU runtime: install nvidia-container-toolkit and run nvidia-ctk runtime configure "
     "--runtime=docker, then restart Docker"),
    ("unknown or invalid runtime name: nvidia", "no_gpu_runtime",
     "Docker has no 'nvidia' runtime: install nvidia-container-toolkit and configure it for Docker"),
    ("provided ptx was compiled with an unsupported toolchain", "ptx_unsupported",
     "the image's PTX is newer than the driver can JIT-compile: upgrade the driver or use an image with SASS "
     "for this GPU"),
    ("forward compatibility was attempted on non supported hw", "cuda_compat_unsupported",
     "the image's cuda-compat libraries do not support this GPU: disable forward compatibility in the image"),
    ("unsupported display driver / cuda driver combination", "cuda_compat_mismatch",
     "the container mixes the host driver with the image's cuda-compat libraries: see vLLM's "
     "VLLM_ENABLE_CUDA_COMPATIBILITY and the container toolkit's cuda-compat mode"),
    ("driver/library version mismatch", "driver_library_mismatch",
     "the loaded kernel module and the user-space driver differ: reboot (or reload the nvidia modules)"),
    ("found no nvidia driver", "no_gpu_visible",
     "no GPU is visible in the container: check the driver and nvidia-container-toolkit"),
    ("no gpu visible in the container", "no_gpu_visible",
     "no GPU is visible in the container: check the driver and nvidia-container-toolkit"),
)


_DEVICE_FIELDS = (("index", lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 4096),
                  ("name", lambda v: isinstance(v, str) and len(v) <= 256),
                  ("capability", lambda v: isinstance(v, str) and re.match(r"^[0-9]{1,2}\.[0-9]{1,2}\Z", v)),
                  ("result", lambda v: isinstance(v, float) and math.isfinite(v)),
                  ("ok", lambda v: isinstance(v, bool)),
                  ("error", lambda v: isinstance(v, str) and len(v) <= TEXT_MAX))


def _checked_devices(devices):
    """The GPU check's devices, each with only the fields of the expected shape."""
    if not isinstance(devices, list):
        return []
    result = []
    for device in devices[:4096]:
        if isinstance(device, dict):
            result.append(dict((key, device[key]) for key, ok in _DEVICE_FIELDS if key in device and ok(device[key])))
    return result


def classify_gpu_check(rc, out, err):
    """{ran, ok, category, message, devices, fix} from the GPU check container's result."""
    result = {"ran": True, "ok": False, "category": None, "message": None, "devices": [], "fix": None}
    report = None
    try:
        report = extract_marked_json(out)
    except ValueError:
        report = None
    if report is not None:
        result["devices"] = _checked_devices(report.get("devices"))
        result["ok"] = report.get("ok") is True and rc == 0
        result["message"] = report.get("error") if isinstance(report.get("error"), str) else None
        if report.get("arch_list"):
            result["arch_list"] = normalise_arch_list(report["arch_list"])
    if result["ok"]:
        result["category"] = "ok"
        return result
    raw = "%s\n%s\n%s" % (result["message"] or "", err or "", out or "")
    text = raw.lower()
    for fragment, category, fix in _GPU_FAILURES:
        if fragment in text:
            result["category"] = category
            result["fix"] = fix
            if not result["message"]:
                result["message"] = informative_line(raw, (fragment,))
            break
    else:
        result["category"] = "error"
    if not result["message"]:
        result["message"] = informative_line("%s\n%s" % (err or "", out or "")) or \
            "the GPU check container exited %s" % rc
    return result


# ---------------------------------------------------------------------------------------------
# Merge
# ---------------------------------------------------------------------------------------------

GATE_KEYS = ("cuda_version", "require_cuda", "arch_list", "quantization_methods", "vllm_version")

# [0-9], not \d: \d also matches non-ASCII digits such as '５', which int() would then accept.
_TAG_VERSION_RE = re.compile(r"^v?([0-9]+\.[0-9]+\.[0-9]+(?:\.[0-9]+)?(?:\.post[0-9]+)?)(?:\Z|[-+])")


def _first(*candidates):
    """(value, source) of the first candidate (value, source) whose value is not None/empty."""
    for value, source in candidates:
        if value not in (None, "", []):
            return value, source
    return None, None


def merge_image_facts(ref, state, inspect=None, probe=None, registry=None, profile=None, profile_key=None):
    """One ``image`` dict from what was observed, with ``sources`` naming where each field came from.

    Precedence: the probe (what runs in the image) over docker inspect (its config) over the
    registry config over the shipped profile; ``profile_mismatches`` lists fields where an
    observation contradicts the profile.
    """
    inspect = inspect or {}
    probe = probe or {}
    registry = registry or {}
    prof = profile or {}
    image = {"reference": ref, "state": state, "profile_matched": profile is not None,
             "profile": profile_key, "sources": {}, "notes": []}
    try:
        parsed = parse_reference(ref)
    except ImageRefError:
        parsed = {}

    def put(field, *candidates):
        value, source = _first(*candidates)
        image[field] = value
        if source:
            image["sources"][field] = source
        return value

    tag_version = None
    if parsed.get("tag"):
        match = _TAG_VERSION_RE.match(parsed["tag"])
        tag_version = match.group(1) if match else None
    put("vllm_version", (probe.get("vllm_version"), "probe"), (prof.get("vllm_version"), "profile"),
        (tag_version, "tag"))
    put("cuda_version", (inspect.get("cuda_version"), "inspect"), (registry.get("cuda_version"), "registry"),
        (prof.get("cuda_version"), "profile"), (probe.get("torch_cuda_version"), "probe:torch"))
    put("require_cuda", (inspect.get("require_cuda"), "inspect"), (registry.get("require_cuda"), "registry"),
        (prof.get("require_cuda"), "profile"))
    put("entrypoint", (inspect.get("entrypoint"), "inspect"), (registry.get("entrypoint"), "registry"),
        (prof.get("entrypoint"), "profile"))
    put("torch_version", (probe.get("torch_version"), "probe"), (prof.get("torch_version"), "profile"))
    put("torch_cuda_version", (probe.get("torch_cuda_version"), "probe"), (prof.get("torch_cuda_version"), "profile"))
    put("quantization_methods", (probe.get("quantization_methods"), "probe"),
        (prof.get("quantization_methods"), "profile"))
    vllm_arch = put("vllm_arch_list",
                    (normalise_arch_list(inspect.get("env_arch_list")), "inspect:TORCH_CUDA_ARCH_LIST"),
                    (normalise_arch_list(registry.get("env_arch_list")), "registry:TORCH_CUDA_ARCH_LIST"),
                    (normalise_arch_list(prof.get("arch_list")), "profile"))
    torch_arch = put("torch_arch_list", (probe.get("torch_arch_list"), "probe"),
                     (normalise_arch_list(prof.get("torch_arch_list")), "profile"))
    image["arch_list"] = effective_arch_list(vllm_arch, torch_arch)
    if image["arch_list"] is not None:
        image["sources"]["arch_list"] = "vllm_arch_list filtered by torch_arch_list" if (vllm_arch and torch_arch) \
            else ("vllm_arch_list" if vllm_arch else "torch_arch_list")
        dropped = [e for e in (vllm_arch or []) if torch_arch and
                   covers(torch_arch, parse_arch(e)[:2]) is None]
        if dropped:
            image["notes"].append("vLLM's kernels list %s but torch in the image does not reach %s; expect "
                                  "'no kernel image is available' there" % (", ".join(dropped), ", ".join(dropped)))
    image["min_compute_capability"] = prof.get("min_compute_capability")
    image["digest"] = inspect.get("digest") or registry.get("digest")
    image["id"] = inspect.get("id")
    for key in ("repo_tags", "repo_digests", "created", "architecture", "os", "size", "cmd"):
        image[key] = inspect.get(key)
    image["labels"] = inspect.get("labels") or registry.get("labels") or {}
    image["env"] = inspect.get("env") or registry.get("env") or {}
    image["disable_require"] = bool(inspect.get("disable_require"))
    for observed in (inspect, registry, probe):
        image["notes"].extend(observed.get("ignored") or [])
    if prof:
        image["profile_confidence"] = prof.get("confidence")
        image["profile_source"] = prof.get("source")
        image["notes"].extend(prof.get("notes") or [])
    image["profile_mismatches"] = profile_mismatches(prof, image) if prof else []
    image["gate"] = dict((key, image.get(key)) for key in GATE_KEYS)
    return image


def profile_mismatches(profile, image):
    """[{field, profile, observed, source}] where an observation contradicts the profile."""
    result = []
    for field in ("vllm_version", "cuda_version", "require_cuda", "torch_version", "torch_cuda_version",
                  "entrypoint"):
        source = image["sources"].get(field)
        if source in (None, "profile", "tag"):
            continue
        observed = image.get(field)
        expected = profile.get(field)
        if expected is None or observed is None:
            continue
        if field == "torch_version":
            same = str(observed).split("+", 1)[0] == str(expected).split("+", 1)[0]
        elif field == "torch_cuda_version":
            same = str(observed).split(".")[:2] == str(expected).split(".")[:2]
        else:
            same = observed == expected
        if not same:
            result.append({"field": field, "profile": expected, "observed": observed, "source": source})
    if image["sources"].get("quantization_methods") == "probe" and profile.get("quantization_methods"):
        if sorted(image["quantization_methods"]) != sorted(profile["quantization_methods"]):
            result.append({"field": "quantization_methods", "profile": profile["quantization_methods"],
                           "observed": image["quantization_methods"], "source": "probe"})
    for field, key in (("vllm_arch_list", "arch_list"), ("torch_arch_list", "torch_arch_list")):
        source = image["sources"].get(field)
        if source in (None, "profile") or not profile.get(key):
            continue
        if normalise_arch_list(profile[key]) != image.get(field):
            result.append({"field": field, "profile": normalise_arch_list(profile[key]),
                           "observed": image.get(field), "source": source})
    return result
