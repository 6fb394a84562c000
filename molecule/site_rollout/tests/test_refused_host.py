"""site_rollout, on the refused P100 host: the gate refused it, so no role ever touched it."""

import pytest

testinfra_hosts = ["rollout-p100"]


@pytest.mark.parametrize("path", ["/usr/bin/docker", "/etc/systemd/system/vllm.service"])
def test_refused_host_was_never_touched(host, path):
    """Neither Docker (container_runtime role) nor the vllm unit (vllm_server role) is there."""
    found = host.file(path)
    assert not found.exists and not found.is_symlink, "%s exists on the refused host" % path
