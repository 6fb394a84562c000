"""nvidia_driver_refused: the three refusals left the host exactly as it was.

converge ran the requests the collection must refuse (R595 on Volta, the open kernel modules on
Volta, a stale plan, R550 over a driver that no package installed) and checked each refusal's reason there; this
verifier asks the host whether anything the driver role installs or writes appeared anyway.
"""

testinfra_hosts = ["vllm_hosts"]

# dpkg-query patterns of the packages any driver installation brings (Debian's, NVIDIA's CUDA
# repository's and the metapackages').
DRIVER_PACKAGE_PATTERNS = ["*nvidia*", "libcuda*", "cuda-drivers*"]

# Everything labfleet.vllm.nvidia_driver writes (roles/nvidia_driver/vars/main.yml): package
# sources, keyring, version pin, unattended-upgrades blacklist, nouveau blacklist, the
# nvidia-persistenced drop-in and the role's state directory (downloaded repository key).
ROLE_PATHS = [
    "/etc/apt/sources.list.d/labfleet-nvidia-cuda.sources",
    "/etc/apt/sources.list.d/labfleet-debian-nonfree.sources",
    "/etc/apt/keyrings/labfleet-nvidia-cuda.asc",
    "/etc/apt/keyrings/labfleet-nvidia-cuda.gpg",
    "/etc/apt/preferences.d/labfleet-nvidia-driver",
    "/etc/apt/apt.conf.d/51labfleet-nvidia-driver",
    "/etc/modprobe.d/labfleet-blacklist-nouveau.conf",
    "/etc/systemd/system/nvidia-persistenced.service.d",
    "/var/lib/labfleet/nvidia_driver",
]


# What prepare registered with dpkg (tests/fake_gpu/scenarios/v100x2_pcie/scenario.json), per host.
FIXTURE_PACKAGES = {
    "refused-packaged": ["installed libnvidia-ml1 550.54.14-1", "installed nvidia-smi 550.54.14-1"],
    "refused-unpackaged": [],
}


def test_no_driver_package_installed(host):
    """No package of any driver is installed but prepare's empty fixture packages, at their versions
    (the fake nvidia-smi of prepare is no package)."""
    cmd = host.run("dpkg-query -W -f %s %s %s %s", "${db:Status-Status} ${Package} ${Version}\n",
                   *DRIVER_PACKAGE_PATTERNS)
    # rc 1: some pattern matches no package, which is what is expected.
    assert cmd.rc in (0, 1), "dpkg-query failed (rc %d): %s" % (cmd.rc, cmd.stderr)
    installed = sorted(line for line in cmd.stdout.splitlines() if line.startswith("installed "))
    assert installed == FIXTURE_PACKAGES[host.backend.get_hostname()], cmd.stdout


def test_nothing_written(host):
    """No source, keyring, pin, configuration file or state directory of the role exists."""
    present = [path for path in ROLE_PATHS if host.file(path).exists]
    assert present == [], "the refused role left these behind: %s" % present
