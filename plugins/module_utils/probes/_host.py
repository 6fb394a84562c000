# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
#
# PRIVATE to the labfleet.vllm collection: no compatibility promise for other users.
"""Host facts the later checks need besides the GPUs: CPU flags, free disk, container stack.

Pure functions. Commands are run through a ``run_command(argv) -> (rc, out, err)`` callable and
files are read below a ``root`` so tests can replay recorded answers.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import stat

from ansible_collections.labfleet.vllm.plugins.module_utils.knowledge._policy import TOOL_VERSIONS, tool_version

# Instruction-set extensions worth reporting: prebuilt inference images are compiled for some of
# them, and a host without them dies with "Illegal instruction" while loading.
CPU_FLAGS_OF_INTEREST = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "amx_tile")

# ASCII digits ([0-9]: \d would take other scripts' digits, which int() then reads), each part at most
# 9 digits (int() refuses over 4300), and never cut out of a longer number: the lookarounds (\d of
# any script) keep "1.1" out of "\uff12\uff17.1.1" and "1.5" out of "21.5".
_VERSION_RE = re.compile(r"(?<![\d.])([0-9]{1,9}\.[0-9]{1,9}(?:\.[0-9]{1,9})?)(?:\.[0-9]{1,9})*(?!\d)")

# The NVIDIA Container Toolkit's configuration (hook and runtime read the same file).
TOOLKIT_CONFIG_PATH = "/etc/nvidia-container-runtime/config.toml"
# Where Docker (cdi.DefaultSpecDirs) and the toolkit's cdi mode look for CDI specs.
CDI_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")


def parse_cpuinfo(text):
    """Return ``{model, flags, sockets, logical_cpus}`` from /proc/cpuinfo text.

    ``flags`` is the intersection of every processor's flags, since a process may be scheduled on
    any of them.
    """
    flag_sets = []
    model = None
    physical_ids = set()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        value = value.strip()
        if key == "flags":
            flag_sets.append(set(value.split()))
        elif key == "model name" and model is None:
            model = value
        elif key == "physical id":
            physical_ids.add(value)
    flags = set.intersection(*flag_sets) if flag_sets else set()
    return {
        "model": model,
        "flags": sorted(flags),
        "logical_cpus": len(flag_sets),
        "sockets": len(physical_ids) or (1 if flag_sets else 0),
        "isa": dict((name, name in flags) for name in CPU_FLAGS_OF_INTEREST),
    }


def nearest_existing(path, exists=os.path.exists):
    """The path itself when it exists, else its closest existing parent ("/" at worst)."""
    path = os.path.abspath(path)
    while not exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def disk_free(path, statvfs=os.statvfs, exists=os.path.exists):
    """Free and total space (MiB) of the filesystem that holds ``path`` (or would hold it)."""
    probe = nearest_existing(path, exists)
    st = statvfs(probe)
    mib = 1024 * 1024
    return {
        "path": path,
        "measured_at": probe,
        "exists": probe == os.path.abspath(path),
        "free_mib": st.f_bavail * st.f_frsize // mib,
        "total_mib": st.f_blocks * st.f_frsize // mib,
    }


def first_version(text):
    """The first "X.Y" or "X.Y.Z" of ASCII digits in ``text``, or None (also for a non-string)."""
    if not isinstance(text, str):
        return None
    match = _VERSION_RE.search(text)
    return match.group(1) if match else None


def container_stack(run_command, which, read_text=None, listdir=None, toolkit_config_path=TOOLKIT_CONFIG_PATH,
                    daemon_json_path="/etc/docker/daemon.json", cdi_dirs=CDI_SPEC_DIRS):
    """Docker engine and nvidia-container-toolkit versions, and what decides how a container gets
    its GPUs (so whether NVIDIA_REQUIRE_CUDA is checked). Each value null when absent or unknown.

    ``which(name)`` returns an executable's path or None; ``read_text(path)`` a file's text (raises
    IOError/OSError); ``listdir(path)`` a directory's names.
    """
    read_text = read_text or _read_text
    listdir = listdir or os.listdir
    result = {
        "docker_client_version": None,
        "docker_server_version": None,
        "docker_error": None,
        "nvidia_container_cli_version": None,
        "nvidia_ctk_version": None,
    }
    docker = which("docker")
    if docker:
        rc, out, err = run_command([docker, "version", "--format", "{{.Client.Version}}|{{.Server.Version}}"])
        client, _sep, server = (out or "").strip().partition("|")
        result["docker_client_version"] = first_version(client)
        result["docker_server_version"] = first_version(server)
        if rc != 0:
            lines = (err or out or "").strip().splitlines()
            result["docker_error"] = lines[-1] if lines else "docker version exited %d" % rc
    cli = which("nvidia-container-cli")
    if cli:
        rc, out, _err = run_command([cli, "--version"])
        if rc == 0:
            # "cli-version: 1.17.8" or "version: 1.14.3" on older releases
            match = re.search(r"version:\s*([0-9]{1,9}\.[0-9]{1,9}\.[0-9]{1,9})(?![0-9])", out or "", re.ASCII)
            result["nvidia_container_cli_version"] = match.group(1) if match else first_version(out)
    ctk = which("nvidia-ctk")
    if ctk:
        rc, out, _err = run_command([ctk, "--version"])
        if rc == 0:
            result["nvidia_ctk_version"] = first_version(out)

    # The toolkit's packages share one version (the role pins all four together).
    result["toolkit_version"] = result["nvidia_ctk_version"] or result["nvidia_container_cli_version"]
    # dockerd offers --gpus only when it finds nvidia-container-runtime-hook on its PATH, and from
    # Docker 29.2 maps --gpus to CDI when nvidia-cdi-hook is there too (moby
    # daemon/devices_nvidia_linux.go:60-101 at docker-v29.2.0). nvidia-cdi-hook ships from 1.16.0.
    result["nvidia_container_runtime_hook"] = which("nvidia-container-runtime-hook")
    result["nvidia_cdi_hook"] = which("nvidia-cdi-hook")
    result["toolkit_config"] = toolkit_config(read_text, toolkit_config_path)
    mode, _why = nvidia_runtime_mode(result["toolkit_version"], result["toolkit_config"]["mode"])
    result["nvidia_runtime_mode"] = None if result["toolkit_config"]["error"] else mode

    info = None
    if docker and result["docker_server_version"]:
        rc, out, _err = run_command([docker, "info", "--format", "{{json .}}"])
        if rc == 0:
            try:
                info = json.loads(out or "")
            except ValueError:
                info = None
    daemon_json = None
    if not isinstance(info, dict):
        try:
            daemon_json = json.loads(read_text(daemon_json_path) or "{}")
        except (IOError, OSError, ValueError):
            daemon_json = None
    docker_config = docker_runtime_config(info, daemon_json,
                                          result["docker_server_version"] or result["docker_client_version"])
    result["docker_config_source"] = docker_config["source"]
    result["docker_default_runtime"] = docker_config["default_runtime"]
    result["docker_runtimes"] = docker_config["runtimes"]
    result["docker_cdi_enabled"] = docker_config["cdi_enabled"]
    result["docker_cdi_spec_dirs"] = docker_config["cdi_spec_dirs"]
    result["cdi_specs"] = cdi_specs(list(cdi_dirs) + list(docker_config["cdi_spec_dirs"] or []), listdir, read_text)
    return result


# --- What decides whether NVIDIA_REQUIRE_CUDA is enforced -----------------------------------------
#
# Only two code paths of the NVIDIA Container Toolkit evaluate NVIDIA_REQUIRE_* (all verified in
# NVIDIA/nvidia-container-toolkit, tags v1.14.6 ... v1.20.0, and NVIDIA/libnvidia-container):
# - the legacy prestart hook: nvidia-container-runtime-hook passes every NVIDIA_REQUIRE_* value as
#   `--require=` to `nvidia-container-cli configure` (cmd/nvidia-container-runtime-hook/main.go:145-147
#   at v1.18.2), which evaluates the cuda/driver/arch/brand DSL per visible GPU and fails with
#   "requirement error: unsatisfied condition" (libnvidia-container src/cli/configure.c,
#   configure_command(), "Check the container requirements");
# - the runtime's csv mode (Tegra/Jetson only): internal/modifier/csv.go:77-107 at v1.18.2 checks the
#   cuda and arch properties itself.
# The cdi and jit-cdi modes never read them (no caller of GetRequirements outside those two, at v1.18.2,
# v1.20.0 and main of 2026-08-21; NVIDIA/nvidia-container-toolkit#1470, open: "At present CDI mode does
# not support checking of the NVIDIA_REQUIRE_ envvars").
# NVIDIA_DISABLE_REQUIRE switches both checks off when Go's strconv.ParseBool reads it as true
# (internal/config/image/cuda_image.go:136-146 at v1.18.2), and so does `disable-require = true` at the
# top of config.toml (internal/config/config.go:62, internal/config/image/builder.go:62-63).

NVIDIA_RUNTIME_MODES = ("auto", "legacy", "cdi", "jit-cdi", "csv")

# Go's strconv.ParseBool: anything else is an error, which HasDisableRequire treats as false.
# Go strconv.ParseBool true values (how the toolkit reads NVIDIA_DISABLE_REQUIRE).
GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")

_TOOLKIT_FACTS = "NVIDIA/nvidia-container-toolkit"
# Toolkit releases the messages name (TOOL_VERSIONS).
_JIT_CDI = TOOL_VERSIONS["toolkit_jit_cdi"]["version"]
_HOOK_REMOVED = TOOL_VERSIONS["toolkit_hook_removed"]["version"]


def _version_tuple(text):
    version = first_version(text) if text else None
    if not version:
        return None
    return tuple(int(part) for part in version.split("."))


def _at_least(version, minimum):
    """True/False when ``version`` (text) is known, else None."""
    parsed = _version_tuple(version)
    if parsed is None:
        return None
    padded = parsed + (0,) * (3 - len(parsed))
    return padded >= minimum


def _strip_toml_comment(line):
    quote = None
    for index, char in enumerate(line):
        if quote:
            if char == "\\" and quote == '"':
                continue
            if char == quote and (quote == "'" or line[index - 1] != "\\"):
                quote = None
        elif char in ("'", '"'):
            quote = char
        elif char == "#":
            return line[:index]
    return line


def _toml_value(text):
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in ("'", '"'):
        inner = text[1:-1]
        return inner.replace('\\"', '"').replace("\\\\", "\\") if text[0] == '"' else inner
    if text in ("true", "false"):
        return text == "true"
    if re.match(r"^[+-]?[0-9]{1,18}\Z", text, re.ASCII):
        return int(text)
    if text.startswith("[") and text.endswith("]"):
        items = re.findall(r'"((?:[^"\\]|\\.)*)"|\'([^\']*)\'', text)
        return [double or single for double, single in items]
    return text


def parse_toml_sections(text):
    """A minimal reader for the NVIDIA Container Toolkit's config.toml.

    Returns ``{section: {key: value}}`` ("" is the top level; nested tables keep their dotted name,
    e.g. "nvidia-container-runtime.modes.cdi"). Values: strings, booleans, integers and arrays of
    strings; anything else is kept as its text. Enough for the keys read here, not a TOML parser.
    """
    sections = {"": {}}
    current = ""
    pending_key = None
    pending = ""
    for raw in (text or "").splitlines():
        line = _strip_toml_comment(raw).strip()
        if pending_key is not None:
            pending += " " + line
            if pending.count("[") <= pending.count("]"):
                sections[current][pending_key] = _toml_value(pending)
                pending_key = None
            continue
        if not line:
            continue
        header = re.match(r"^\[\[?\s*([^\]]+?)\s*\]\]?$", line)
        if header:
            current = ".".join(part.strip().strip('"') for part in header.group(1).split("."))
            sections.setdefault(current, {})
            continue
        key, sep, value = line.partition("=")
        if not sep:
            continue
        key = key.strip().strip('"').strip("'")
        value = value.strip()
        if value.startswith("[") and value.count("[") > value.count("]"):
            pending_key, pending = key, value
            continue
        sections[current][key] = _toml_value(value)
    return sections


def toolkit_config(read_text, path=TOOLKIT_CONFIG_PATH):
    """The settings of the toolkit's config.toml that decide where NVIDIA_REQUIRE_CUDA is checked.

    ``mode`` is null when the file or the key is absent: the toolkit then uses "auto"
    (internal/config/config.go:120 at v1.18.2). ``read_text(path)`` returns the text or raises
    IOError/OSError.
    """
    result = {"path": path, "exists": False, "error": None, "mode": None, "disable_require": None,
              "skip_mode_detection": None}
    try:
        text = read_text(path)
    except (IOError, OSError) as exc:
        if getattr(exc, "errno", None) != 2:
            result["exists"] = True
            result["error"] = "cannot read %s: %s" % (path, exc)
        return result
    result["exists"] = True
    sections = parse_toml_sections(text)
    mode = sections.get("nvidia-container-runtime", {}).get("mode")
    result["mode"] = mode if isinstance(mode, str) else None
    disable = sections.get("", {}).get("disable-require")
    result["disable_require"] = disable if isinstance(disable, bool) else None
    skip = sections.get("nvidia-container-runtime-hook", {}).get("skip-mode-detection")
    result["skip_mode_detection"] = skip if isinstance(skip, bool) else None
    return result


def nvidia_runtime_mode(toolkit_version, configured_mode=None):
    """What the nvidia runtime (nvidia-container-runtime) resolves its mode to on an x86 host.

    "auto" is "legacy" up to toolkit 1.17 (internal/info/auto.go:49-55 at v1.17.8) and "jit-cdi" from
    1.18.0 (auto.go:87-99 and 129-135 at v1.18.2, CHANGELOG v1.18.0-rc.1 "Default to jit-cdi mode in
    the nvidia runtime"). Tegra (Jetson) resolves to "csv" and is not considered. Returns
    ``(mode, why)``; mode is None when the toolkit version is needed and unknown.
    """
    configured = (configured_mode or "auto").strip()
    if configured != "auto":
        return configured, "mode = \"%s\" in %s" % (configured, TOOLKIT_CONFIG_PATH)
    newer = _at_least(toolkit_version, tool_version("toolkit_jit_cdi"))
    if newer is None:
        return None, "mode \"auto\" and the toolkit version is unknown"
    if newer:
        return "jit-cdi", "mode \"auto\" resolves to jit-cdi from toolkit %s (toolkit %s)" % (_JIT_CDI, toolkit_version)
    return "legacy", "mode \"auto\" resolves to legacy before toolkit %s (toolkit %s)" % (_JIT_CDI, toolkit_version)


def docker_runtime_config(info=None, daemon_json=None, docker_version=None):
    """Default runtime, runtimes (name -> path) and CDI state, from `docker info` when the engine
    answers, else from daemon.json (parsed dict).

    ``cdi_enabled``: Docker 25.0 to 28.1 enable CDI only with features.cdi: true (moby
    cmd/dockerd/daemon.go:271 at v28.1.1); from 28.2 it is on unless features.cdi: false
    (cdiEnabled(), cmd/dockerd/daemon.go:1064-1072 at v28.2.0). `docker info` reports CDISpecDirs
    empty exactly when CDI is off (cmd/dockerd/daemon.go:607-617 at v25.0.0).
    """
    result = {"source": None, "default_runtime": None, "runtimes": {}, "cdi_enabled": None,
              "cdi_spec_dirs": None}
    if isinstance(info, dict) and info:
        result["source"] = "docker info"
        result["default_runtime"] = info.get("DefaultRuntime") or None
        runtimes = info.get("Runtimes") or {}
        result["runtimes"] = dict((name, (spec or {}).get("path") if isinstance(spec, dict) else None)
                                  for name, spec in runtimes.items())
        version = info.get("ServerVersion") or docker_version
        if "CDISpecDirs" in info:
            dirs = list(info.get("CDISpecDirs") or [])
            result["cdi_spec_dirs"] = dirs
            result["cdi_enabled"] = bool(dirs)
        elif _at_least(version, tool_version("docker_cdi")) is False:
            result["cdi_enabled"] = False
        return result
    if isinstance(daemon_json, dict):
        result["source"] = "daemon.json"
        result["default_runtime"] = daemon_json.get("default-runtime") or "runc"
        runtimes = daemon_json.get("runtimes") or {}
        result["runtimes"] = dict((name, (spec or {}).get("path") if isinstance(spec, dict) else None)
                                  for name, spec in runtimes.items())
        features = daemon_json.get("features") or {}
        flag = features.get("cdi") if isinstance(features, dict) else None
        supported = _at_least(docker_version, tool_version("docker_cdi"))
        on_by_default = _at_least(docker_version, tool_version("docker_cdi_default"))
        if supported is False or flag is False:
            result["cdi_enabled"] = False
        elif flag is True:
            result["cdi_enabled"] = True if supported else None
        else:
            result["cdi_enabled"] = on_by_default
        dirs = daemon_json.get("cdi-spec-dirs")
        if isinstance(dirs, list):
            result["cdi_spec_dirs"] = [d for d in dirs if isinstance(d, str)]
    return result


_CDI_KIND_RE = re.compile(r"""^\s*["']?kind["']?\s*:\s*["']?([A-Za-z0-9._-]+/[A-Za-z0-9._-]+)""", re.M)
_CDI_ALL_RE = re.compile(r"""["']?name["']?\s*:\s*["']?all["']?\s*[,}]?\s*$""", re.M)


def _cdi_spec_summary(text):
    """Kind and whether the device "all" is defined, from a JSON spec or a YAML one (read by pattern)."""
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            devices = doc.get("devices") if isinstance(doc.get("devices"), list) else []
            kind = doc.get("kind")
            return {"kind": kind if isinstance(kind, str) else None,
                    "has_all": any(isinstance(d, dict) and d.get("name") == "all" for d in devices)}
    match = _CDI_KIND_RE.search(text)
    return {"kind": match.group(1) if match else None, "has_all": bool(_CDI_ALL_RE.search(text))}


def cdi_spec_paths(dirs, listdir):
    """The CDI spec files (*.yaml, *.yml, *.json: what the CDI library loads) in ``dirs``, in order;
    a directory that cannot be listed is skipped."""
    seen = set()
    for directory in dirs:
        if directory in seen:
            continue
        seen.add(directory)
        try:
            names = sorted(listdir(directory))
        except (IOError, OSError):
            continue
        for name in names:
            if name.endswith((".yaml", ".yml", ".json")):
                yield directory.rstrip("/") + "/" + name


def cdi_specs(dirs, listdir, read_text):
    """CDI spec files in ``dirs``: path, kind and whether the spec defines the device "all"."""
    found = []
    for path in cdi_spec_paths(dirs, listdir):
        try:
            text = read_text(path)
        except (IOError, OSError):
            continue
        found.append(dict([("path", path)] + list(_cdi_spec_summary(text or "").items())))
    return found


# The largest text file read (/proc/cpuinfo of a 1000-CPU host is about 1.5 MB).
MAX_TEXT_CHARS = 16 * 1024 * 1024


def read_regular_text(path, limit=MAX_TEXT_CHARS):
    """A regular file's text, at most ``limit`` characters. A FIFO, a device (/dev/zero), a socket or
    a longer file raises IOError instead of blocking or filling memory; /proc files are regular."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise IOError("%s is not a regular file" % path)
    with open(path, encoding="utf-8", errors="replace") as handle:
        text = handle.read(limit + 1)
    if len(text) > limit:
        raise IOError("%s is longer than %d characters" % (path, limit))
    return text


def _read_text(path):
    return read_regular_text(path)


_CDI_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*=\S+$")
_UNSET = object()
_HOOK_REFUSAL = ("invoking the NVIDIA Container Runtime Hook directly (e.g. specifying the docker --gpus "
                 "flag) is not supported")


def _docker_gpu_request(args):
    """What `docker run` arguments ask for: --gpus, CDI device names, --runtime, and -e/--env."""
    request = {"gpus": None, "cdi_devices": [], "runtime": None, "env": {}}
    args = [str(arg) for arg in args]
    index = 0
    while index < len(args):
        arg = args[index]
        value = None
        if arg.startswith("--") and "=" in arg:
            name, _sep, value = arg.partition("=")
        elif arg.startswith("-e") and not arg.startswith("--") and len(arg) > 2:
            name, value = "-e", arg[2:]
        else:
            name = arg
        if name in ("--gpus", "--device", "--runtime", "-e", "--env"):
            if value is None:
                index += 1
                value = args[index] if index < len(args) else ""
            if name == "--gpus":
                request["gpus"] = value
            elif name == "--device" and _CDI_NAME_RE.match(value):
                request["cdi_devices"].append(value)
            elif name == "--runtime":
                request["runtime"] = value
            elif name in ("-e", "--env"):
                key, sep, env_value = value.partition("=")
                if sep:
                    request["env"][key] = env_value
        index += 1
    return request


def _runtime_kind(name, runtimes):
    """(is the NVIDIA runtime, mode forced by its executable) for a Docker runtime name."""
    if not name:
        return None, None
    path = (runtimes or {}).get(name) or ""
    base = path.rstrip("/").rsplit("/", 1)[-1]
    if name == "nvidia" or base.startswith("nvidia-container-runtime"):
        # nvidia-container-runtime.cdi / .legacy force their mode (cmd/nvidia-container-runtime.cdi/main.go:27).
        if base.endswith(".cdi"):
            return True, "cdi"
        if base.endswith(".legacy"):
            return True, "legacy"
        return True, None
    return False, None


def _verdict(enforced, mode, why, blocked=None):
    return {"enforced": enforced, "mode": mode, "why": why, "blocked": blocked}


def _hook_mode(cfg):
    """The mode nvidia-container-runtime-hook accepts when Docker's --gpus runs it: "auto" means legacy
    (cmd/nvidia-container-runtime-hook/hook_config.go:127-143 at v1.18.2; main.go:85-87 at v1.17.8)."""
    if cfg.get("error"):
        return None
    if cfg.get("skip_mode_detection") is True:
        return "legacy"
    return cfg.get("mode") or "auto"


def _through_nvidia_runtime(toolkit, mode, mode_why, runtime, what):
    """Verdict when the nvidia runtime handles a container that asks for GPUs through ``what``."""
    if mode is None:
        return _verdict(None, None, "the %s runtime handles %s, and its mode is unknown (%s); read "
                        "`nvidia-ctk --version` and %s" % (runtime, what, mode_why, TOOLKIT_CONFIG_PATH))
    if mode in ("legacy", "csv"):
        where = ("its legacy mode runs nvidia-container-runtime-hook, which passes NVIDIA_REQUIRE_* to "
                 "nvidia-container-cli --require" if mode == "legacy" else
                 "its csv mode (Jetson) checks NVIDIA_REQUIRE_* itself (cuda and arch only)")
        return _verdict(True, mode, "the %s runtime handles %s in %s mode (%s): %s, so the runtime refuses an "
                        "image whose NVIDIA_REQUIRE_CUDA the driver does not satisfy"
                        % (runtime, what, mode, mode_why, where))
    if mode in ("cdi", "jit-cdi"):
        if mode == "jit-cdi" and _at_least(toolkit, tool_version("toolkit_jit_cdi")) is False:
            return _verdict(None, mode, "mode \"jit-cdi\" does not exist before toolkit %s (toolkit %s)"
                            % (_JIT_CDI, toolkit), "the nvidia runtime stops every container with \"invalid runtime "
                            "mode: jit-cdi\"; set mode = \"auto\" in %s or install toolkit %s or newer"
                            % (TOOLKIT_CONFIG_PATH, _JIT_CDI))
        removes_hook = _at_least(toolkit, tool_version("toolkit_hook_removed"))
        if what.startswith("--gpus") and removes_hook is not True:
            if removes_hook is None:
                return _verdict(None, mode, "the %s runtime is in %s mode (%s) and the toolkit version is "
                                "unknown: before %s it leaves Docker's hook in place, which then refuses "
                                "to run" % (runtime, mode, mode_why, _HOOK_REMOVED))
            return _verdict(None, mode, "the %s runtime is in %s mode (%s) but toolkit %s leaves the hook "
                            "that --gpus adds in place" % (runtime, mode, mode_why, toolkit),
                            "the hook stops the container (\"%s\"); upgrade the toolkit to %s or newer, or "
                            "use --device nvidia.com/gpu=all" % (_HOOK_REFUSAL, _HOOK_REMOVED))
        return _verdict(False, mode, "the %s runtime handles %s in %s mode (%s): it injects the GPUs through CDI "
                        "(jit-cdi makes the spec on the fly) and removes nvidia-container-runtime-hook, and no CDI path reads "
                        "NVIDIA_REQUIRE_* (NVIDIA/nvidia-container-toolkit#1470), so the runtime will not refuse "
                        "the image for its CUDA version" % (runtime, what, mode, mode_why))
    return _verdict(None, mode, "the %s runtime has an unknown mode \"%s\" (%s); valid: %s"
                    % (runtime, mode, mode_why, ", ".join(NVIDIA_RUNTIME_MODES)))


def _through_hook(cfg, what):
    """Verdict when Docker runs nvidia-container-runtime-hook under a runtime that is not NVIDIA's."""
    mode = _hook_mode(cfg)
    if mode is None:
        return _verdict(None, None, "%s runs nvidia-container-runtime-hook, but %s could not be read (%s)"
                        % (what, cfg.get("path") or TOOLKIT_CONFIG_PATH, cfg.get("error")))
    if mode in ("auto", "legacy"):
        return _verdict(True, "legacy", "%s makes Docker run nvidia-container-runtime-hook as a prestart hook; "
                        "it resolves mode \"%s\" to legacy and passes NVIDIA_REQUIRE_* to nvidia-container-cli "
                        "--require, so the runtime refuses an image whose NVIDIA_REQUIRE_CUDA the driver does "
                        "not satisfy" % (what, mode))
    return _verdict(None, mode, "%s makes Docker run nvidia-container-runtime-hook, and mode = \"%s\" in %s"
                    % (what, mode, cfg.get("path") or TOOLKIT_CONFIG_PATH),
                    "the hook stops the container (\"%s\"); run it with --runtime nvidia, or set mode = \"auto\" "
                    "in %s, or give the GPUs with --device nvidia.com/gpu=all"
                    % (_HOOK_REFUSAL, cfg.get("path") or TOOLKIT_CONFIG_PATH))


def _gpus_through_cdi(facts):
    """Whether Docker maps --gpus to CDI devices: Docker 29.2 or later, CDI on, nvidia-cdi-hook on
    dockerd's PATH and a spec of kind nvidia.com/gpu (moby daemon/devices_nvidia_linux.go:60-101 and
    210-250 at docker-v29.2.0, moby/moby#50228; it falls back to the hook when injection fails)."""
    version = facts.get("docker_server_version") or facts.get("docker_client_version")
    new_enough = _at_least(version, tool_version("docker_gpus_cdi"))
    if new_enough is False:
        return False
    cdi_on = facts.get("docker_cdi_enabled")
    hook = facts.get("nvidia_cdi_hook", _UNSET)
    specs = facts.get("cdi_specs")
    has_spec = None if specs is None else any((spec or {}).get("kind") == "nvidia.com/gpu" for spec in specs)
    if cdi_on is False or hook is None or has_spec is False:
        return False
    if new_enough and cdi_on and hook not in (None, _UNSET) and has_spec:
        return True
    return None


def _enforcement_path(facts, request, image_env):
    """Verdict for the way ``request`` gives the container its GPUs, before NVIDIA_DISABLE_REQUIRE."""
    toolkit = facts.get("toolkit_version") or facts.get("nvidia_ctk_version") or facts.get("nvidia_container_cli_version")
    cfg = facts.get("toolkit_config") or {}
    runtime = request["runtime"] or facts.get("docker_default_runtime")
    is_nvidia, forced = _runtime_kind(runtime, facts.get("docker_runtimes"))
    if forced:
        mode, mode_why = forced, "its executable forces it"
    elif cfg.get("error"):
        mode, mode_why = None, cfg["error"]
    else:
        mode, mode_why = nvidia_runtime_mode(toolkit, cfg.get("mode"))

    if request["cdi_devices"] and not request["gpus"]:
        what = "--device %s" % ",".join(request["cdi_devices"])
        blocked = None
        if facts.get("docker_cdi_enabled") is False:
            blocked = ("Docker has CDI off, so it cannot resolve %s; set features.cdi: true in daemon.json "
                       "(Docker %s or newer)" % (what, TOOL_VERSIONS["docker_cdi"]["version"]))
        if is_nvidia and mode == "legacy" and _at_least(toolkit, tool_version("toolkit_cdi_void")) is not True:
            return _verdict(None, "cdi", "%s goes through CDI, but the %s runtime is in legacy mode and a CDI spec "
                            "from toolkit %s may not set NVIDIA_VISIBLE_DEVICES=void (added in %s, "
                            "pkg/nvcdi/lib.go:176 at v1.15.0), so its hook may run and check NVIDIA_REQUIRE_CUDA"
                            % (what, runtime, toolkit or "(unknown)", TOOL_VERSIONS["toolkit_cdi_void"]["version"]), blocked)
        if is_nvidia and mode == "csv":
            return _verdict(None, "csv", "%s goes through CDI while the %s runtime is in csv mode (Jetson), a "
                            "combination not worked out here" % (what, runtime), blocked)
        extra = ""
        if is_nvidia and mode == "legacy":
            extra = ("; the %s runtime's legacy hook finds NVIDIA_VISIBLE_DEVICES=void, set by the spec, and "
                     "does nothing" % runtime)
        return _verdict(False, "cdi", "%s gives the container its GPUs through CDI: Docker applies the spec and no "
                        "nvidia-container-cli runs, and no CDI path reads NVIDIA_REQUIRE_* "
                        "(NVIDIA/nvidia-container-toolkit#1470)%s, so the runtime will not refuse the image for its "
                        "CUDA version" % (what, extra), blocked)

    if request["gpus"]:
        what = "--gpus %s" % request["gpus"]
        via_cdi = _gpus_through_cdi(facts)
        cdi_verdict = _verdict(False, "cdi", "Docker %s maps %s to the CDI device nvidia.com/gpu (nvidia-cdi-hook "
                               "and an NVIDIA CDI spec are present; moby/moby#50228, Docker 29.2 and later), and no "
                               "CDI path reads NVIDIA_REQUIRE_* (NVIDIA/nvidia-container-toolkit#1470), so the runtime "
                               "will not refuse the image for its CUDA version"
                               % (facts.get("docker_server_version") or facts.get("docker_client_version"), what))
        if via_cdi:
            return cdi_verdict
        if is_nvidia is None:
            hook = _through_hook(cfg, what)
            both = [hook, _through_nvidia_runtime(toolkit, mode, mode_why, "nvidia", what)]
            if both[0]["enforced"] is not None and both[0]["enforced"] == both[1]["enforced"]:
                verdict = hook
            else:
                verdict = _verdict(None, None, "Docker's default runtime is unknown (runc: %s; nvidia: %s)"
                                   % (both[0]["why"], both[1]["why"]))
        elif is_nvidia:
            verdict = _through_nvidia_runtime(toolkit, mode, mode_why, runtime, what)
        else:
            if facts.get("nvidia_container_runtime_hook", _UNSET) is None and via_cdi is False:
                return _verdict(None, None, "%s needs nvidia-container-runtime-hook on dockerd's PATH" % what,
                                "Docker refuses --gpus (could not select device driver \"\" with capabilities: "
                                "[[gpu]]); install nvidia-container-toolkit and restart Docker")
            verdict = _through_hook(cfg, what)
        if via_cdi is None and verdict["enforced"] is not False:
            return _verdict(None, None, "Docker %s may map %s to CDI (Docker 29.2 and later do when CDI is on, "
                            "nvidia-cdi-hook is installed and an NVIDIA CDI spec exists), and whether it does is "
                            "unknown here; if it does not: %s"
                            % (facts.get("docker_server_version") or facts.get("docker_client_version") or "(version unknown)",
                               what, verdict["why"]), verdict["blocked"])
        return verdict

    # No --gpus and no CDI device: only the nvidia runtime can still give GPUs, from NVIDIA_VISIBLE_DEVICES.
    if is_nvidia is False:
        return _verdict(False, None, "the container asks for no GPU (no --gpus, no CDI device) and runs under %s, "
                        "so it gets no GPU and nothing checks NVIDIA_REQUIRE_CUDA" % runtime)
    visible = request["env"].get("NVIDIA_VISIBLE_DEVICES", _UNSET)
    if visible is _UNSET:
        visible = _UNSET if image_env is None else image_env.get("NVIDIA_VISIBLE_DEVICES", "")
    if is_nvidia is None or visible is _UNSET:
        return _verdict(None, None, "the container asks for no GPU through Docker; whether the nvidia runtime gives "
                        "it GPUs from NVIDIA_VISIBLE_DEVICES is unknown (default runtime: %s)" % (runtime or "unknown"))
    if visible.strip() in ("", "void"):
        return _verdict(False, None, "the container asks for no GPU and NVIDIA_VISIBLE_DEVICES is unset or void, "
                        "so nothing checks NVIDIA_REQUIRE_CUDA")
    return _through_nvidia_runtime(toolkit, mode, mode_why, runtime,
                                   "NVIDIA_VISIBLE_DEVICES=%s" % visible)


def require_cuda_enforcement(host, gpu_run_args=None, image_env=None, run_env=None):
    """Will the container runtime refuse an image whose NVIDIA_REQUIRE_CUDA the driver does not meet?

    ``host``: the host facts (``labfleet_host`` or its ``container`` part, see container_stack; keys may be
    overridden with the target state, e.g. ``toolkit_version`` the role will install). ``gpu_run_args``:
    the `docker run` arguments that give the GPUs (``["--gpus", "all"]``, ``["--device",
    "nvidia.com/gpu=all"]``, may include ``--runtime`` and ``-e``); None when unknown. ``image_env`` and
    ``run_env``: the image's and the container's environment (dicts).

    Returns ``{"enforced": True|False|None, "mode": "legacy"|"cdi"|"jit-cdi"|"csv"|None, "why": text,
    "disabled_by": text|None, "blocked": text|None}``. ``enforced`` None means it cannot be told from
    what is known; ``blocked`` says when the container would not start at all with these arguments,
    whatever its CUDA (and what to change).
    """
    facts = host if isinstance(host, dict) else {}
    if isinstance(facts.get("container"), dict):
        facts = facts["container"]
    image_env = image_env if isinstance(image_env, dict) else None
    container_env = {}
    if gpu_run_args is None:
        verdict = _verdict(None, None, "how the container gets its GPUs is unknown; pass the docker run "
                           "arguments (container_runtime_info.gpu_run_args, e.g. ['--gpus', 'all'])")
    else:
        request = _docker_gpu_request(gpu_run_args)
        container_env.update(request["env"])
        container_env.update(dict((str(k), str(v)) for k, v in (run_env or {}).items()))
        request["env"] = container_env
        verdict = _enforcement_path(facts, request, image_env)
    if run_env and gpu_run_args is None:
        container_env.update(dict((str(k), str(v)) for k, v in run_env.items()))

    # The container's environment overrides the image's (Docker merges by name), then config.toml.
    disabled_by = None
    if "NVIDIA_DISABLE_REQUIRE" in container_env:
        value = container_env["NVIDIA_DISABLE_REQUIRE"]
        if value.strip() in GO_TRUE:
            disabled_by = "NVIDIA_DISABLE_REQUIRE in the container env"
    elif image_env and "NVIDIA_DISABLE_REQUIRE" in image_env:
        value = str(image_env["NVIDIA_DISABLE_REQUIRE"])
        if value.strip() in GO_TRUE:
            disabled_by = "NVIDIA_DISABLE_REQUIRE in the image"
    config = facts.get("toolkit_config") or {}
    if disabled_by is None and config.get("disable_require") is True:
        disabled_by = "disable-require = true in %s" % (config.get("path") or TOOLKIT_CONFIG_PATH)
    if disabled_by:
        shown = ("NVIDIA_DISABLE_REQUIRE=%s" % value) if disabled_by.startswith("NVIDIA_") else disabled_by
        verdict = dict(verdict)
        verdict["why"] = ("%s (%s) switches the requirement check off, in the legacy hook and in csv mode alike, "
                          "so the runtime will not refuse the image for its CUDA version; the way the GPUs are "
                          "given: %s" % (shown, disabled_by, verdict["why"]))
        verdict["enforced"] = False
    verdict["disabled_by"] = disabled_by
    return verdict
