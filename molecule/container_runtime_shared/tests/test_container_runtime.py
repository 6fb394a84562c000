"""container_runtime (shared by container_runtime_bookworm and container_runtime_trixie): the state
the role leaves on a converged host.

daemon.json keeps every key the site seeded and has the role's keys merged in (one backup of the
site's original, root-owned, 0644); the running Docker engine uses that configuration; the toolkit
packages are at the pinned version although the repository offers a newer one, and they and Docker
are held; the apt source is signed by the checked keyring; a container really runs through the
runtime registered as nvidia. What differs between the scenarios is in EXPECT, by scenario name.
"""

import json
import os
import re

testinfra_hosts = ["vllm_hosts"]

NVIDIA_RUNTIME = {"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}

# Per scenario: owned (the keys the role must have set, in daemon.json's shape, merged into the
# seeded file key by key) and default_runtime (daemon.json's default-runtime, "" for none).
EXPECT = {
    # Defaults: nvidia is registered but not the default runtime.
    "container_runtime_bookworm": {
        "owned": NVIDIA_RUNTIME,
        "default_runtime": "",
    },
    # nvidia as the default runtime, CDI on (cdi mitigation), one site setting from the role's input.
    "container_runtime_trixie": {
        "owned": dict(NVIDIA_RUNTIME, **{
            "default-runtime": "nvidia",
            "features": {"cdi": True},
            "log-opts": {"max-file": "5"},
        }),
        "default_runtime": "nvidia",
    },
}

DAEMON_JSON = "/etc/docker/daemon.json"
TOOLKIT = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools", "libnvidia-container1"]
TOOLKIT_PIN = "1.18.2-1"
TOOLKIT_NEWER = "1.19.1-1"
SOURCES = "/etc/apt/sources.list.d/labfleet-nvidia-container-toolkit.sources"
KEYRING = "/etc/apt/keyrings/labfleet-nvidia-container-toolkit.asc"
RUNTIME_LOG = "/var/log/fake-nvidia-container-runtime.log"


def _expect():
    scenario = os.environ.get("MOLECULE_SCENARIO_NAME", "")
    assert scenario in EXPECT, "no expectations for scenario %r (MOLECULE_SCENARIO_NAME); known: %s" % (scenario, sorted(EXPECT))
    return EXPECT[scenario]


def _combine(base, over):
    """Ansible's combine(recursive=true): objects merged key by key, any other value replaced."""
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _combine(merged[key], value)
        else:
            merged[key] = value
    return merged


def test_daemon_json_keeps_the_site_keys_and_has_the_roles(host, hostvars):
    """daemon.json is exactly the seeded file with the role's keys merged in (none lost, none extra)."""
    exp = _expect()
    seeded = json.loads(hostvars["labfleet_test_daemon_json"])
    daemon = json.loads(host.file(DAEMON_JSON).content_string)
    assert daemon == _combine(seeded, exp["owned"]), "daemon.json is %s; seeded %s" % (
        json.dumps(daemon, indent=2, sort_keys=True), json.dumps(seeded, indent=2, sort_keys=True))
    assert daemon.get("default-runtime", "") == exp["default_runtime"], daemon


def test_daemon_json_owner_and_mode(host):
    """daemon.json is root's and 0644, as Docker's own configuration."""
    daemon = host.file(DAEMON_JSON)
    assert daemon.is_file
    assert daemon.mode == 0o644, "mode %o" % daemon.mode
    assert daemon.user == "root", daemon.user
    assert daemon.group == "root", daemon.group


def test_one_backup_holds_the_sites_original(host, hostvars):
    """The role backed the site's file up once (daemon.json.<stamp>~), byte for byte as seeded."""
    backups = host.check_output("find /etc/docker -mindepth 1 -maxdepth 1 -type f -name 'daemon.json.*~'").split()
    assert len(backups) == 1, "backups of daemon.json: %s" % backups
    original = host.file(backups[0]).content
    assert original == hostvars["labfleet_test_daemon_json"].encode("utf-8"), original


def test_docker_runs_with_the_merged_configuration(host):
    """The running engine has the nvidia runtime, the expected default and the site's own settings."""
    exp = _expect()
    info = json.loads(host.check_output("docker info --format %s", "{{json .}}"))
    shown = json.dumps({key: info.get(key) for key in ("Runtimes", "DefaultRuntime", "DockerRootDir", "RegistryConfig")}, indent=2)
    assert "nvidia" in info["Runtimes"], shown
    assert info["DefaultRuntime"] == (exp["default_runtime"] or "runc"), shown
    assert info["DockerRootDir"] == "/srv/docker-data", shown
    assert "https://mirror.lab.example:5000/" in info["RegistryConfig"]["Mirrors"], shown


def test_toolkit_at_the_pin_and_everything_held(host):
    """The toolkit is at the pinned version though the repository offers a newer one; it and Docker are held."""
    versions = {name: host.package(name).version if host.package(name).is_installed else None for name in TOOLKIT}
    assert versions == dict.fromkeys(TOOLKIT, TOOLKIT_PIN), versions
    madison = host.check_output("apt-cache madison nvidia-container-toolkit")
    assert re.search(re.escape(TOOLKIT_NEWER), madison), "the repository should offer %s too:\n%s" % (TOOLKIT_NEWER, madison)
    assert host.package("docker.io").is_installed
    selections = host.check_output("dpkg --get-selections %s %s %s %s %s", *(TOOLKIT + ["docker.io"])).splitlines()
    states = {line.split()[0].split(":")[0]: line.split()[-1] for line in selections}
    assert len(selections) == 5, selections
    assert states == dict.fromkeys(TOOLKIT + ["docker.io"], "hold"), selections


def test_apt_source_signed_by_the_checked_keyring(host, hostvars):
    """The deb822 source names the keyring the role checked, and the configured repository's URL."""
    sources = host.file(SOURCES).content_string
    assert re.search(r"(?m)^Signed-By: %s$" % re.escape(KEYRING), sources), sources
    uri = "%s/amd64" % hostvars["container_runtime_toolkit_repo_url"]
    assert re.search(r"(?m)^URIs: %s$" % re.escape(uri), sources), sources


def test_container_runs_through_the_nvidia_runtime(host, tiny_image):
    """docker run --runtime nvidia works, and Docker really called the runtime registered as nvidia."""
    before = int(host.check_output("cat %s 2>/dev/null | wc -l", RUNTIME_LOG))
    run = host.run("docker run --rm --network none --runtime nvidia %s /usr/bin/true", tiny_image)
    assert run.rc == 0, run.stderr
    # Only this run's lines: an earlier call (the converge's) must not make the check pass.
    new_lines = host.check_output("tail -n +%s %s", str(before + 1), RUNTIME_LOG)
    assert re.search(r"nvidia-container-runtime .*create", new_lines), new_lines
