"""Unit tests for plugins/module_utils/probes/_host.py (CPU flags, free disk, container stack, and whether
the container runtime enforces NVIDIA_REQUIRE_CUDA)."""

import collections
import errno
import json

import pytest

from ansible_collections.labfleet.vllm.plugins.module_utils.probes import _host

# Shape of /proc/cpuinfo on a dual-socket Broadwell Xeon (the X99/C612 class of the reference
# deployment): AVX2 and FMA, no AVX-512. Two logical CPUs are enough for the parser.
BROADWELL = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz
physical id\t: 0
flags\t\t: fpu vme sse4_2 avx avx2 fma f16c bmi2
processor\t: 1
model name\t: Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz
physical id\t: 1
flags\t\t: fpu vme sse4_2 avx avx2 fma f16c
"""

SKYLAKE_SP = """processor\t: 0
model name\t: Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz
physical id\t: 0
flags\t\t: sse4_2 avx avx2 fma f16c avx512f avx512bw avx512_vnni
"""


def test_cpuinfo_broadwell_has_avx2_not_avx512():
    cpu = _host.parse_cpuinfo(BROADWELL)
    assert cpu["model"].startswith("Intel(R) Xeon(R) CPU E5-2680 v4")
    assert cpu["logical_cpus"] == 2
    assert cpu["sockets"] == 2
    assert cpu["isa"]["avx2"] is True
    assert cpu["isa"]["avx512f"] is False


def test_cpuinfo_flags_are_the_intersection():
    # bmi2 is on CPU 0 only: a process may land on CPU 1, so it is not reported.
    assert "bmi2" not in _host.parse_cpuinfo(BROADWELL)["flags"]


def test_cpuinfo_avx512():
    assert _host.parse_cpuinfo(SKYLAKE_SP)["isa"]["avx512f"] is True


def test_cpuinfo_empty_text():
    cpu = _host.parse_cpuinfo("")
    assert cpu["flags"] == [] and cpu["logical_cpus"] == 0 and cpu["sockets"] == 0
    assert not any(cpu["isa"].values())


StatVfs = collections.namedtuple("StatVfs", "f_bavail f_frsize f_blocks")


def test_disk_free_measures_nearest_existing_parent():
    existing = {"/", "/srv"}
    seen = []

    def statvfs(path):
        seen.append(path)
        return StatVfs(f_bavail=2 * 1024 * 256, f_frsize=4096, f_blocks=8 * 1024 * 256)

    result = _host.disk_free("/srv/models/llama", statvfs=statvfs, exists=existing.__contains__)
    assert seen == ["/srv"]
    assert result == {"path": "/srv/models/llama", "measured_at": "/srv", "exists": False,
                      "free_mib": 2048, "total_mib": 8192}


def test_disk_free_existing_path():
    result = _host.disk_free("/", statvfs=lambda p: StatVfs(1, 1024 * 1024, 3), exists=lambda p: True)
    assert result["exists"] is True and result["free_mib"] == 1 and result["total_mib"] == 3


def _runner(answers):
    def run(argv):
        return answers[argv[0]]
    return run


def _files(files):
    """read_text and listdir over a dict path -> text (missing paths raise ENOENT)."""
    def read_text(path):
        if path not in files:
            raise IOError(errno.ENOENT, "No such file or directory", path)
        return files[path]

    def listdir(path):
        prefix = path.rstrip("/") + "/"
        names = [name[len(prefix):] for name in files if name.startswith(prefix) and "/" not in name[len(prefix):]]
        if not names:
            raise OSError(errno.ENOENT, "No such file or directory", path)
        return names
    return read_text, listdir


# /etc/nvidia-container-runtime/config.toml as nvidia-ctk 1.18.2's postinst leaves it (the layout of
# `nvidia-ctk config default`; cmd/nvidia-ctk-installer/main_test.go at v1.18.2 shows the same keys).
CONFIG_TOML_1_18 = """#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"
#swarm-resource = "DOCKER_RESOURCE_GPU"

[nvidia-container-cli]
#debug = "/var/log/nvidia-container-toolkit.log"
environment = []
#ldcache = "/etc/ld.so.cache"
ldconfig = "@/sbin/ldconfig"
load-kmods = true
#no-cgroups = false
#path = "/usr/bin/nvidia-container-cli"
#root = "/run/nvidia/driver"
#user = "root:video"

[nvidia-container-runtime]
#debug = "/var/log/nvidia-container-runtime.log"
log-level = "info"
mode = "auto"
runtimes = ["docker-runc", "runc", "crun"]

[nvidia-container-runtime.modes]

[nvidia-container-runtime.modes.cdi]
annotation-prefixes = ["cdi.k8s.io/"]
default-kind = "nvidia.com/gpu"
spec-dirs = ["/etc/cdi", "/var/run/cdi"]

[nvidia-container-runtime.modes.csv]
mount-spec-path = "/etc/nvidia-container-runtime/host-files-for-container.d"

[nvidia-container-runtime-hook]
path = "nvidia-container-runtime-hook"
skip-mode-detection = false

[nvidia-ctk]
path = "nvidia-ctk"
"""

# Start of what `nvidia-ctk cdi generate` (and nvidia-cdi-refresh) writes for a one-GPU host.
CDI_SPEC = """---
cdiVersion: 0.5.0
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  deviceNodes:
  - path: /dev/nvidiactl
devices:
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: "0"
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: all
kind: nvidia.com/gpu
"""

DOCKER_INFO_26 = json.dumps({"ServerVersion": "26.1.5+dfsg1", "DefaultRuntime": "runc",
                             "Runtimes": {"nvidia": {"path": "nvidia-container-runtime"}, "runc": {"path": "runc"}},
                             "CDISpecDirs": ["/etc/cdi", "/var/run/cdi"]})


def test_container_stack_all_present():
    answers = {
        "/usr/bin/docker": (0, "26.1.5|26.1.5\n", ""),
        "/usr/bin/nvidia-container-cli": (0, "cli-version: 1.17.8\nlib-version: 1.17.8\n", ""),
        "/usr/bin/nvidia-ctk": (0, "NVIDIA Container Toolkit CLI version 1.17.8\ncommit: abc\n", ""),
    }
    calls = []

    def run(argv):
        calls.append(argv)
        if argv[1] == "info":
            return 0, DOCKER_INFO_26, ""
        return answers[argv[0]]
    read_text, listdir = _files({"/etc/nvidia-container-runtime/config.toml": CONFIG_TOML_1_18,
                                 "/var/run/cdi/nvidia.yaml": CDI_SPEC, "/var/run/cdi/README": "not a spec"})
    result = _host.container_stack(run, lambda name: "/usr/bin/" + name, read_text, listdir)
    assert ["/usr/bin/docker", "info", "--format", "{{json .}}"] in calls
    assert result == {
        "docker_client_version": "26.1.5",
        "docker_server_version": "26.1.5",
        "docker_error": None,
        "nvidia_container_cli_version": "1.17.8",
        "nvidia_ctk_version": "1.17.8",
        "toolkit_version": "1.17.8",
        "nvidia_container_runtime_hook": "/usr/bin/nvidia-container-runtime-hook",
        "nvidia_cdi_hook": "/usr/bin/nvidia-cdi-hook",
        "toolkit_config": {"path": "/etc/nvidia-container-runtime/config.toml", "exists": True, "error": None,
                           "mode": "auto", "disable_require": False, "skip_mode_detection": False},
        "nvidia_runtime_mode": "legacy",
        "docker_config_source": "docker info",
        "docker_default_runtime": "runc",
        "docker_runtimes": {"nvidia": "nvidia-container-runtime", "runc": "runc"},
        "docker_cdi_enabled": True,
        "docker_cdi_spec_dirs": ["/etc/cdi", "/var/run/cdi"],
        "cdi_specs": [{"path": "/var/run/cdi/nvidia.yaml", "kind": "nvidia.com/gpu", "has_all": True}],
    }


def test_container_stack_engine_down():
    answers = {"/usr/bin/docker": (1, "20.10.24|", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock."
                                   " Is the docker daemon running?\n")}
    daemon_json = '{"default-runtime": "nvidia", "runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}'
    read_text, listdir = _files({"/etc/docker/daemon.json": daemon_json})
    result = _host.container_stack(_runner(answers), lambda name: "/usr/bin/docker" if name == "docker" else None,
                                   read_text, listdir)
    assert result["docker_client_version"] == "20.10.24"
    assert result["docker_server_version"] is None
    assert "Is the docker daemon running?" in result["docker_error"]
    assert result["nvidia_container_cli_version"] is None
    # No `docker info` without an engine: daemon.json says what it will start with (20.10: no CDI).
    assert result["docker_config_source"] == "daemon.json"
    assert result["docker_default_runtime"] == "nvidia"
    assert result["docker_cdi_enabled"] is False


def test_container_stack_nothing_installed():
    read_text, listdir = _files({})
    result = _host.container_stack(_runner({}), lambda name: None, read_text, listdir)
    assert result["toolkit_config"] == {"path": "/etc/nvidia-container-runtime/config.toml", "exists": False,
                                        "error": None, "mode": None, "disable_require": None,
                                        "skip_mode_detection": None}
    assert result["cdi_specs"] == [] and result["docker_runtimes"] == {}
    others = dict((k, v) for k, v in result.items() if k not in ("toolkit_config", "cdi_specs", "docker_runtimes"))
    assert set(others.values()) == {None}


# --- config.toml, runtime mode, Docker's runtime configuration, CDI specs ----------------------------

def test_parse_toml_sections_reads_the_keys_that_matter():
    sections = _host.parse_toml_sections(CONFIG_TOML_1_18)
    assert sections[""]["disable-require"] is False
    assert sections["nvidia-container-runtime"]["mode"] == "auto"
    assert sections["nvidia-container-runtime"]["runtimes"] == ["docker-runc", "runc", "crun"]
    assert sections["nvidia-container-runtime.modes.cdi"]["spec-dirs"] == ["/etc/cdi", "/var/run/cdi"]
    assert sections["nvidia-container-runtime-hook"]["skip-mode-detection"] is False
    # Commented-out keys are not read.
    assert "debug" not in sections["nvidia-container-cli"]


def test_parse_toml_sections_comments_quotes_and_multiline_arrays():
    text = ('[nvidia-container-runtime]\nmode = "cdi" # was auto\nruntimes = [\n  "runc",  # first\n  "crun",\n]\n'
            "log-level = 'debug'\n[ \"nvidia-container-runtime-hook\" ]\nskip-mode-detection = true\n")
    sections = _host.parse_toml_sections(text)
    assert sections["nvidia-container-runtime"] == {"mode": "cdi", "runtimes": ["runc", "crun"], "log-level": "debug"}
    assert sections["nvidia-container-runtime-hook"] == {"skip-mode-detection": True}


def test_toolkit_config_default_file():
    read_text, _listdir = _files({"/etc/nvidia-container-runtime/config.toml": CONFIG_TOML_1_18})
    config = _host.toolkit_config(read_text)
    assert (config["exists"], config["mode"], config["disable_require"], config["skip_mode_detection"]) == \
        (True, "auto", False, False)


def test_toolkit_config_commented_mode_is_not_set():
    read_text, _listdir = _files({"/c.toml": '[nvidia-container-runtime]\n#mode = "cdi"\n'})
    assert _host.toolkit_config(read_text, "/c.toml")["mode"] is None


def test_toolkit_config_unreadable_says_so():
    def read_text(path):
        raise IOError(errno.EACCES, "Permission denied", path)
    config = _host.toolkit_config(read_text)
    assert config["exists"] is True and config["mode"] is None
    assert "Permission denied" in config["error"]


@pytest.mark.parametrize("version,configured,expected", [
    ("1.17.8", None, "legacy"), ("1.17.8", "auto", "legacy"), ("1.14.6", "auto", "legacy"),
    ("1.18.0", "auto", "jit-cdi"), ("1.18.2", None, "jit-cdi"), ("1.19.1", "auto", "jit-cdi"),
    ("1.18.2", "legacy", "legacy"), ("1.17.8", "cdi", "cdi"), (None, "auto", None), (None, "legacy", "legacy"),
])
def test_nvidia_runtime_mode(version, configured, expected):
    assert _host.nvidia_runtime_mode(version, configured)[0] == expected


def test_docker_runtime_config_from_info():
    config = _host.docker_runtime_config(json.loads(DOCKER_INFO_26))
    assert config == {"source": "docker info", "default_runtime": "runc",
                      "runtimes": {"nvidia": "nvidia-container-runtime", "runc": "runc"},
                      "cdi_enabled": True, "cdi_spec_dirs": ["/etc/cdi", "/var/run/cdi"]}
    off = _host.docker_runtime_config({"ServerVersion": "27.5.1", "DefaultRuntime": "runc", "CDISpecDirs": []})
    assert off["cdi_enabled"] is False
    # Docker 20.10 has no CDISpecDirs (no CDI before 25.0).
    old = _host.docker_runtime_config({"ServerVersion": "20.10.24+dfsg1", "DefaultRuntime": "runc", "Runtimes": {}})
    assert old["cdi_enabled"] is False and old["cdi_spec_dirs"] is None


@pytest.mark.parametrize("daemon_json,version,expected", [
    ({"features": {"cdi": True}}, "26.1.5", True),
    ({}, "26.1.5", False),           # 25.0 - 28.1: only with features.cdi: true
    ({}, "28.2.0", True),            # 28.2 and later: on unless turned off
    ({"features": {"cdi": False}}, "29.2.1", False),
    ({"features": {"cdi": True}}, "20.10.24", False),
    ({}, None, None),
])
def test_docker_runtime_config_from_daemon_json(daemon_json, version, expected):
    config = _host.docker_runtime_config(None, daemon_json, version)
    assert config["source"] == "daemon.json"
    assert config["default_runtime"] == "runc"
    assert config["cdi_enabled"] is expected


def test_cdi_specs_kind_and_all():
    read_text, listdir = _files({
        "/etc/cdi/nvidia.yaml": CDI_SPEC,
        "/etc/cdi/vendor.json": '{"cdiVersion": "0.6.0", "kind": "vendor.com/device", "devices": [{"name": "d0"}]}',
        "/etc/cdi/notes.txt": "kind: nvidia.com/gpu",
    })
    assert _host.cdi_specs(["/etc/cdi", "/var/run/cdi", "/etc/cdi"], listdir, read_text) == [
        {"path": "/etc/cdi/nvidia.yaml", "kind": "nvidia.com/gpu", "has_all": True},
        {"path": "/etc/cdi/vendor.json", "kind": "vendor.com/device", "has_all": False},
    ]


# --- require_cuda_enforcement ----------------------------------------------------------------------

def _facts(toolkit="1.18.2", mode=None, default_runtime="runc", docker="26.1.5", cdi_enabled=True,
           specs=(), disable_require=False, skip=False, runtimes=None):
    return {
        "docker_server_version": docker, "docker_client_version": docker,
        "toolkit_version": toolkit, "nvidia_ctk_version": toolkit,
        "nvidia_container_runtime_hook": "/usr/bin/nvidia-container-runtime-hook",
        "nvidia_cdi_hook": "/usr/bin/nvidia-cdi-hook",
        "toolkit_config": {"path": "/etc/nvidia-container-runtime/config.toml", "exists": True, "error": None,
                           "mode": mode, "disable_require": disable_require, "skip_mode_detection": skip},
        "docker_default_runtime": default_runtime,
        "docker_runtimes": runtimes or {"nvidia": "nvidia-container-runtime", "runc": "runc"},
        "docker_cdi_enabled": cdi_enabled,
        "cdi_specs": [{"path": "/var/run/cdi/nvidia.yaml", "kind": "nvidia.com/gpu", "has_all": True}
                      for _spec in specs],
    }


GPUS = ["--gpus", "all"]
CDI = ["--device", "nvidia.com/gpu=all"]
IMAGE_ENV = {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_REQUIRE_CUDA": "cuda>=12.4 brand=tesla,driver>=535,driver<536"}


def test_legacy_through_gpus_under_runc():
    # Debian 13 (docker.io 26.1) with the role's defaults: --gpus under runc runs the hook.
    result = _host.require_cuda_enforcement(_facts(), GPUS, IMAGE_ENV)
    assert (result["enforced"], result["mode"], result["disabled_by"], result["blocked"]) == (True, "legacy", None, None)
    assert "nvidia-container-cli --require" in result["why"]


def test_cdi_device_is_not_enforced():
    result = _host.require_cuda_enforcement(_facts(), CDI, IMAGE_ENV)
    assert (result["enforced"], result["mode"], result["blocked"]) == (False, "cdi", None)
    assert "#1470" in result["why"]


def test_cdi_device_with_cdi_off_is_blocked_but_not_enforced():
    result = _host.require_cuda_enforcement(_facts(cdi_enabled=False), CDI, IMAGE_ENV)
    assert result["enforced"] is False
    assert "features.cdi: true" in result["blocked"]


def test_cdi_device_under_legacy_nvidia_runtime_with_an_old_toolkit_is_undecided():
    # Specs from toolkit < 1.15 lack NVIDIA_VISIBLE_DEVICES=void, so the legacy hook may run too.
    result = _host.require_cuda_enforcement(_facts(toolkit="1.14.6", default_runtime="nvidia"), CDI, IMAGE_ENV)
    assert result["enforced"] is None and result["mode"] == "cdi"
    new = _host.require_cuda_enforcement(_facts(toolkit="1.17.8", default_runtime="nvidia"), CDI, IMAGE_ENV)
    assert new["enforced"] is False and "NVIDIA_VISIBLE_DEVICES=void" in new["why"]


@pytest.mark.parametrize("toolkit,enforced,mode", [("1.17.8", True, "legacy"), ("1.18.2", False, "jit-cdi"),
                                                   ("1.19.1", False, "jit-cdi")])
def test_runtime_nvidia_with_mode_auto(toolkit, enforced, mode):
    by_flag = _host.require_cuda_enforcement(_facts(toolkit=toolkit), ["--runtime", "nvidia"] + GPUS, IMAGE_ENV)
    by_default = _host.require_cuda_enforcement(_facts(toolkit=toolkit, default_runtime="nvidia"), GPUS, IMAGE_ENV)
    for result in (by_flag, by_default):
        assert (result["enforced"], result["mode"]) == (enforced, mode)
        assert toolkit in result["why"]


@pytest.mark.parametrize("mode,toolkit,enforced", [("legacy", "1.18.2", True), ("cdi", "1.18.2", False),
                                                   ("jit-cdi", "1.18.2", False), ("cdi", "1.17.8", False),
                                                   ("csv", "1.18.2", True)])
def test_runtime_nvidia_with_an_explicit_mode(mode, toolkit, enforced):
    result = _host.require_cuda_enforcement(_facts(toolkit=toolkit, mode=mode), ["--runtime=nvidia", "--gpus=all"],
                                            IMAGE_ENV)
    assert (result["enforced"], result["mode"], result["blocked"]) == (enforced, mode, None)


def test_jit_cdi_before_1_18_is_blocked():
    result = _host.require_cuda_enforcement(_facts(toolkit="1.17.8", mode="jit-cdi", default_runtime="nvidia"),
                                            GPUS, IMAGE_ENV)
    assert result["enforced"] is None and "invalid runtime mode" in result["blocked"]


def test_cdi_mode_before_1_17_5_keeps_the_hook_that_refuses():
    result = _host.require_cuda_enforcement(_facts(toolkit="1.17.4", mode="cdi", default_runtime="nvidia"),
                                            GPUS, IMAGE_ENV)
    assert result["enforced"] is None and "1.17.5" in result["blocked"]


def test_gpus_under_runc_with_mode_cdi_is_refused_by_the_hook():
    result = _host.require_cuda_enforcement(_facts(mode="cdi"), GPUS, IMAGE_ENV)
    assert result["enforced"] is None and result["mode"] == "cdi"
    assert "--runtime nvidia" in result["blocked"] and "not supported" in result["blocked"]
    skipped = _host.require_cuda_enforcement(_facts(mode="cdi", skip=True), GPUS, IMAGE_ENV)
    assert (skipped["enforced"], skipped["mode"]) == (True, "legacy")


def test_forced_mode_runtime_executables():
    runtimes = {"nvidia": "/usr/bin/nvidia-container-runtime.cdi", "nvidia-legacy": "nvidia-container-runtime.legacy"}
    cdi = _host.require_cuda_enforcement(_facts(toolkit="1.17.8", runtimes=runtimes), ["--runtime", "nvidia"] + GPUS)
    legacy = _host.require_cuda_enforcement(_facts(runtimes=runtimes), ["--runtime", "nvidia-legacy"] + GPUS)
    assert (cdi["enforced"], cdi["mode"]) == (False, "cdi")
    assert (legacy["enforced"], legacy["mode"]) == (True, "legacy")


@pytest.mark.parametrize("docker,specs,enforced,mode", [("29.2.0", 1, False, "cdi"), ("29.2.0", 0, True, "legacy"),
                                                        ("29.1.5", 1, True, "legacy"), ("28.5.2", 1, True, "legacy")])
def test_gpus_mapped_to_cdi_from_docker_29_2(docker, specs, enforced, mode):
    result = _host.require_cuda_enforcement(_facts(docker=docker, specs=range(specs)), GPUS, IMAGE_ENV)
    assert (result["enforced"], result["mode"]) == (enforced, mode)


def test_gpus_on_docker_29_2_without_nvidia_cdi_hook_uses_the_hook():
    facts = _facts(docker="29.2.1", specs=[1])
    facts["nvidia_cdi_hook"] = None
    assert _host.require_cuda_enforcement(facts, GPUS, IMAGE_ENV)["enforced"] is True


@pytest.mark.parametrize("image_value,run_value,enforced,disabled_by", [
    ("true", None, False, "NVIDIA_DISABLE_REQUIRE in the image"),
    ("1", None, False, "NVIDIA_DISABLE_REQUIRE in the image"),
    ("True", None, False, "NVIDIA_DISABLE_REQUIRE in the image"),
    ("false", None, True, None),
    ("yes", None, True, None),          # strconv.ParseBool refuses "yes": not disabled
    (None, "1", False, "NVIDIA_DISABLE_REQUIRE in the container env"),
    (None, "true", False, "NVIDIA_DISABLE_REQUIRE in the container env"),
    ("true", "false", True, None),      # the container's env replaces the image's value
    ("false", "1", False, "NVIDIA_DISABLE_REQUIRE in the container env"),
])
def test_nvidia_disable_require(image_value, run_value, enforced, disabled_by):
    image_env = dict(IMAGE_ENV)
    if image_value is not None:
        image_env["NVIDIA_DISABLE_REQUIRE"] = image_value
    run_env = {"NVIDIA_DISABLE_REQUIRE": run_value} if run_value is not None else None
    result = _host.require_cuda_enforcement(_facts(), GPUS, image_env, run_env)
    assert (result["enforced"], result["disabled_by"]) == (enforced, disabled_by)
    if disabled_by:
        assert result["mode"] == "legacy" and "switches the requirement check off" in result["why"]


def test_nvidia_disable_require_from_docker_args_and_config_toml():
    by_arg = _host.require_cuda_enforcement(_facts(), GPUS + ["-e", "NVIDIA_DISABLE_REQUIRE=1"], IMAGE_ENV)
    assert (by_arg["enforced"], by_arg["disabled_by"]) == (False, "NVIDIA_DISABLE_REQUIRE in the container env")
    by_config = _host.require_cuda_enforcement(_facts(disable_require=True), GPUS, IMAGE_ENV)
    assert by_config["enforced"] is False
    assert by_config["disabled_by"] == "disable-require = true in /etc/nvidia-container-runtime/config.toml"
    # It also settles a case that is otherwise unknown.
    unknown = _host.require_cuda_enforcement({}, None, dict(IMAGE_ENV, NVIDIA_DISABLE_REQUIRE="1"))
    assert (unknown["enforced"], unknown["disabled_by"]) == (False, "NVIDIA_DISABLE_REQUIRE in the image")


def test_unknown_inputs():
    no_args = _host.require_cuda_enforcement(_facts(), None, IMAGE_ENV)
    assert no_args["enforced"] is None and "gpu_run_args" in no_args["why"]
    no_facts = _host.require_cuda_enforcement({}, GPUS, IMAGE_ENV)
    assert no_facts["enforced"] is None and no_facts["mode"] is None
    unreadable = _facts()
    unreadable["toolkit_config"] = {"path": "/etc/nvidia-container-runtime/config.toml", "exists": True,
                                    "error": "cannot read it: Permission denied", "mode": None}
    assert _host.require_cuda_enforcement(unreadable, GPUS, IMAGE_ENV)["enforced"] is None


def test_no_gpu_arguments():
    # The nvidia runtime still gives GPUs from the image's NVIDIA_VISIBLE_DEVICES=all.
    legacy = _host.require_cuda_enforcement(_facts(toolkit="1.17.8", default_runtime="nvidia"), [], IMAGE_ENV)
    assert (legacy["enforced"], legacy["mode"]) == (True, "legacy")
    unknown_env = _host.require_cuda_enforcement(_facts(toolkit="1.17.8", default_runtime="nvidia"), [], None)
    assert unknown_env["enforced"] is None
    void = _host.require_cuda_enforcement(_facts(default_runtime="nvidia"), ["-e", "NVIDIA_VISIBLE_DEVICES=void"],
                                          IMAGE_ENV)
    assert void["enforced"] is False
    runc = _host.require_cuda_enforcement(_facts(), [], IMAGE_ENV)
    assert (runc["enforced"], runc["mode"]) == (False, None)


def test_accepts_the_whole_host_facts():
    result = _host.require_cuda_enforcement({"cpu": {}, "container": _facts(toolkit="1.17.8")},
                                            ["--runtime", "nvidia", "--gpus", '"device=0,1"'], IMAGE_ENV)
    assert (result["enforced"], result["mode"]) == (True, "legacy")
    assert '--gpus "device=0,1"' in result["why"]


@pytest.mark.parametrize("text,expected", [("Docker version 20.10.24+dfsg1, build 297e128", "20.10.24"),
                                           ("version: 1.14.3", "1.14.3"), ("", None), ("no digits", None)])
def test_first_version(text, expected):
    assert _host.first_version(text) == expected
