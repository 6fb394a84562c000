# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.vllm_server_problems filter instead.
#
# What vllm_server puts into a systemd unit, a `docker run` command line and a docker --env-file:
# every value is checked here before a template sees it, so that no value can break the unit
# (a newline ends a line; systemd then reads the rest as a new directive), give the container the
# host, or put a secret on a command line. problems() returns one sentence per problem, naming the
# variable and what to change; secrets are never quoted. Pure: no I/O, no Ansible.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import re

# Keys a docker --env-file must not set from vllm_server_env or an instance's env: the secrets
# come from vllm_server_api_key and vllm_server_hf_token only.
SECRET_ENV = ("VLLM_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$", re.ASCII)
_PATH_RE = re.compile(r"^/[A-Za-z0-9._/@+=,-]*$", re.ASCII)
_SHM_RE = re.compile(r"^[0-9]{1,12}[bkmgBKMG]?$", re.ASCII)
_IMAGE_RE = re.compile(r"^[a-z0-9][a-z0-9._/:@-]{0,254}$", re.ASCII)
_DEVICES_RE = re.compile(r"^[A-Za-z0-9,-]{0,512}$", re.ASCII)
# C0 and C1 control characters and DEL: none may reach a unit, a command line or an env file.
_CONTROL_RE = re.compile(u"[\x00-\x1f\x7f-\x9f]")

# docker run arguments that hand the container the host (refused unless vllm_server_allow_host_access).
_HOST_NAMESPACES = ("--pid", "--uts", "--userns", "--network", "--net", "--cgroupns")
_DANGEROUS_CAPS = ("ALL", "SYS_ADMIN", "SYS_MODULE", "SYS_RAWIO", "SYS_PTRACE", "DAC_READ_SEARCH", "SYS_BOOT",
                   "NET_ADMIN", "BPF", "PERFMON", "SYS_TIME", "MAC_ADMIN", "MAC_OVERRIDE")
_UNCONFINED = ("seccomp=unconfined", "seccomp:unconfined", "apparmor=unconfined", "apparmor:unconfined",
               "label=disable", "label:disable", "no-new-privileges=false", "no-new-privileges:false",
               "systempaths=unconfined")
# Host paths a bind mount must not expose (the root, the Docker socket, system state).
_HOST_PATHS = ("/", "/etc", "/root", "/proc", "/sys", "/dev", "/boot", "/var/run/docker.sock",
               "/run/docker.sock", "/var/lib/docker", "/run", "/var/run", "/home", "/usr", "/bin", "/sbin",
               "/lib", "/var/lib/labfleet")
_FLAGS_WITH_VALUES = ("-v", "--volume", "--mount", "-e", "--env", "--cap-add", "--security-opt", "--device") \
    + _HOST_NAMESPACES


def _show(value, limit=60):
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def has_control(value):
    """True when the text form of value holds a control character (newline, CR, NUL, tab, ESC...)."""
    return bool(_CONTROL_RE.search(u"%s" % (value,)))


def _one_line(name, value, problems, secret=False):
    if value is None:
        return False
    if has_control(value):
        problems.append("%s holds a control character (newline, carriage return, tab or similar)%s: give it on "
                        "one line of printable characters" % (name, "" if secret else " in %s" % _show(value)))
        return False
    return True


def _path(name, value, problems, empty_ok=False):
    if value in (None, "") and empty_ok:
        return
    if not _one_line(name, value, problems):
        return
    if not isinstance(value, str) or not _PATH_RE.match(value):
        problems.append("%s must be an absolute path of letters, digits and . _ / @ + = , - only (no spaces, no "
                        "':', which docker -v reads as a separator), got %s" % (name, _show(value)))


def bind_problem(address):
    """None when address is '' (the host's default address) or an IP address literal, else why not."""
    if address in (None, ""):
        return None
    if has_control(address):
        return "holds a control character"
    try:
        ipaddress.ip_address(u"%s" % (address,))
    except ValueError:
        return "is not an IP address (e.g. 127.0.0.1, 0.0.0.0 or 192.0.2.10)"
    return None


def is_loopback(address):
    """True for 127.0.0.0/8, ::1 and 'localhost'."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(u"%s" % (address,)).is_loopback
    except ValueError:
        return False


def _mount_source(flag, value):
    if flag == "--mount":
        for part in value.split(","):
            key, _sep, val = part.partition("=")
            if key.strip() in ("source", "src"):
                return val.strip()
        return None
    return value.split(":", 1)[0]


def _norm_path(path):
    path = re.sub(r"/+", "/", path)
    return path.rstrip("/") or "/"


def docker_args_problems(args, allow_host_access=False):
    """Problems of vllm_server_docker_args: control characters, secrets in argv, and (unless
    allow_host_access) anything that gives the container the host."""
    problems = []
    if args is None:
        return problems
    if not isinstance(args, (list, tuple)):
        return ["vllm_server_docker_args must be a list of strings, got %s" % type(args).__name__]
    items = []
    for index, item in enumerate(args):
        if not isinstance(item, (str, int)) or isinstance(item, bool):
            problems.append("vllm_server_docker_args[%d] must be a string, got %s" % (index, type(item).__name__))
            continue
        if _one_line("vllm_server_docker_args[%d]" % index, item, problems):
            items.append(u"%s" % item)
    index = 0
    while index < len(items):
        word = items[index]
        flag, sep, value = word.partition("=")
        if not sep:
            value = None
            if flag in _FLAGS_WITH_VALUES and index + 1 < len(items):
                value = items[index + 1]
                index += 1
        index += 1
        where = "vllm_server_docker_args (%s)" % (flag if value is None else "%s %s" % (flag, value))
        if flag in ("-e", "--env") and value is not None:
            name = value.split("=", 1)[0]
            if name in SECRET_ENV:
                problems.append("%s puts a secret on docker's command line, where ps and docker inspect show it: "
                                "set vllm_server_api_key / vllm_server_hf_token instead (they go to the root-only "
                                "env file)" % flag)
            continue
        if allow_host_access:
            continue
        why = None
        if flag == "--privileged" and (value is None or value.lower() != "false"):
            why = "gives the container every device and capability of the host"
        elif flag in _HOST_NAMESPACES and value is not None and value.lower() == "host":
            why = "shares the host's %s namespace" % flag.lstrip("-")
            if flag in ("--network", "--net"):
                why += " (the API then listens on every address of the host, whatever the bind address)"
        elif flag == "--cap-add" and value is not None and value.upper().replace("CAP_", "") in _DANGEROUS_CAPS:
            why = "adds a capability that reaches the host (%s)" % value
        elif flag == "--security-opt" and value is not None and value.lower() in _UNCONFINED:
            why = "turns off a confinement of the container (%s)" % value
        elif flag in ("-v", "--volume", "--mount") and value is not None:
            source = _mount_source(flag, value)
            if source and source.startswith("/") and _norm_path(source) in _HOST_PATHS:
                why = "mounts the host's %s into the container" % _norm_path(source)
        if why:
            problems.append("%s %s; vllm_server refuses it unless vllm_server_allow_host_access is true" % (where, why))
    return problems


def argv_problems(argv, where):
    """vLLM's argv: one line per word, and no --api-key (argv is visible to ps and docker inspect)."""
    problems = []
    for index, word in enumerate(argv or []):
        if not _one_line("%s[%d]" % (where, index), word, problems):
            continue
        text = u"%s" % (word,)
        if text == "--api-key" or text.startswith("--api-key="):
            problems.append("%s has --api-key: a key on the command line is visible to ps, docker inspect and the "
                            "journal; set vllm_server_api_key instead (it goes to the root-only env file as "
                            "VLLM_API_KEY)" % where)
    return problems


def env_problems(env, where):
    """An env mapping bound for docker --env-file: NAME=value lines, no secrets."""
    problems = []
    if env in (None, ""):
        return problems
    if not isinstance(env, dict):
        return ["%s must be a mapping of NAME: value, got %s" % (where, type(env).__name__)]
    for key in sorted(env, key=lambda k: u"%s" % (k,)):
        value = env[key]
        if not isinstance(key, str) or not _ENV_NAME_RE.match(key):
            problems.append("%s: %s is not an environment variable name (letters, digits and _, not starting with a "
                            "digit)" % (where, _show(key)))
            continue
        if key in SECRET_ENV:
            problems.append("%s sets %s: secrets come from vllm_server_api_key and vllm_server_hf_token only (the "
                            "role writes them itself); remove it" % (where, key))
            continue
        if isinstance(value, (dict, list, tuple)):
            problems.append("%s.%s must be a string or a number, got %s" % (where, key, type(value).__name__))
            continue
        _one_line("%s.%s" % (where, key), "" if value is None else value, problems)
    return problems


def problems(values):
    """Every problem of the values vllm_server renders into units, command lines and env files.

    ``values``: docker_bin, shm_size, cache_dir, config_dir, state_dir, model_path,
    serving_model_path, image, docker_args, allow_host_access, env, api_key, hf_token, expose,
    expose_without_api_key, default_bind, instances (each: name, served_model_name, port,
    bind_address, cuda_visible_devices, gpus, env, argv) and instance_defaults (merged under
    each instance, as the role does).
    """
    out = []
    values = values if isinstance(values, dict) else {}
    _path("vllm_server_docker_bin", values.get("docker_bin"), out)
    shm = values.get("shm_size")
    if _one_line("vllm_server_shm_size", shm, out) and shm is not None and not _SHM_RE.match(u"%s" % (shm,)):
        out.append("vllm_server_shm_size must be a size like 16g, 512m or a number of bytes, got %s" % _show(shm))
    for key in ("cache_dir", "config_dir", "state_dir"):
        _path("vllm_server_%s" % key, values.get(key), out)
    _path("preflight_deployment.model_path", values.get("model_path"), out)
    _path("the plan's serving model path (preflight_deployment.fp16_model_path or gptq_model_path)",
          values.get("serving_model_path"), out, empty_ok=True)
    image = values.get("image")
    if _one_line("preflight_deployment.image", image, out) and image and not _IMAGE_RE.match(u"%s" % image):
        out.append("preflight_deployment.image must be repository[:tag] in lower case (letters, digits, . _ / : -), "
                   "got %s" % _show(image))
    out.extend(docker_args_problems(values.get("docker_args"), bool(values.get("allow_host_access"))))
    out.extend(env_problems(values.get("env"), "vllm_server_env"))
    for name in ("api_key", "hf_token"):
        _one_line("vllm_server_%s" % name, values.get(name) or "", out, secret=True)
    expose = bool(values.get("expose"))
    without_key = bool(values.get("expose_without_api_key"))
    has_key = bool(values.get("api_key"))
    defaults = values.get("instance_defaults") if isinstance(values.get("instance_defaults"), dict) else {}
    for inst in values.get("instances") or []:
        inst = dict(defaults, **inst) if isinstance(inst, dict) else dict(defaults)
        name = inst.get("name") or "?"
        where = "instance %s" % name
        address = inst.get("bind_address")
        if address in (None, ""):
            address = values.get("default_bind")
        why = bind_problem(address)
        if why:
            out.append("%s: the bind address %s %s" % (where, _show(address), why))
        elif address not in (None, "") and not is_loopback(address):
            if not expose:
                out.append("%s would publish the API on %s, beyond this host: set vllm_server_expose: true to "
                           "allow that (vLLM's /metrics, /health and /version answer there without a key), or "
                           "bind it to 127.0.0.1 (vllm_server_bind_address) behind a proxy" % (where, address))
            elif not has_key and not without_key:
                out.append("%s would publish the API on %s without an API key: set vllm_server_api_key, or also "
                           "set vllm_server_expose_without_api_key: true to serve it open" % (where, address))
        devices = inst.get("cuda_visible_devices")
        if devices not in (None, "") and not _DEVICES_RE.match(u"%s" % (devices,)):
            out.append("%s: cuda_visible_devices must be GPU indices or UUIDs separated by commas, got %s"
                       % (where, _show(devices)))
        gpus = inst.get("gpus")
        if isinstance(gpus, (list, tuple)):
            if not all(isinstance(g, int) and not isinstance(g, bool) and 0 <= g < 4096 for g in gpus):
                out.append("%s: gpus must be 'all' or GPU indices, got %s" % (where, _show(gpus)))
        elif gpus not in (None, "all"):
            out.append("%s: gpus must be 'all' or GPU indices, got %s" % (where, _show(gpus)))
        _one_line("%s: served_model_name" % where, inst.get("served_model_name"), out)
        out.extend(env_problems(inst.get("env"), "%s: env" % where))
        out.extend(argv_problems(inst.get("argv"), "%s: argv (vllm_args and extra_args)" % where))
    return out
