"""F16 (docs/testing.md, fault table): a public bind address without the opt-in is refused by the role itself.

public_bind.yml runs the real labfleet.vllm.vllm_server (after the preflight planned a new instance,
vllm-public on port 8001) with vllm_server_bind_address 0.0.0.0 and vllm_server_expose false, and
records how it ended. The role must stop at its input check with the refusal message, and nothing may
change: no unit or env file of the new instance, no container of it, the serving instance's unit, env
file and container untouched, and no task of the run reported a change.
"""

import os

testinfra_hosts = ["vllm_hosts"]

PLAYBOOK = os.path.join(os.path.dirname(__file__), "public_bind.yml")
CHECK_TASK = "Check every value that reaches a unit, a command line or an env file (nothing changes otherwise)"
SERVING = ["/etc/systemd/system/vllm.service", "/etc/vllm/vllm.env"]


def _container(host, name):
    """'<image id> <started at>' of a container, or None when there is none of that name."""
    result = host.run("docker inspect --format %s %s", "{{.Image}} {{.State.StartedAt}}", name)
    return result.stdout.strip() if result.rc == 0 else None


def test_public_bind_refused_before_any_change(host, run_playbook):
    name = host.backend.get_hostname()
    before = [(host.file(path).sha256sum, host.file(path).mtime) for path in SERVING]
    serving = _container(host, "vllm")
    assert serving, "the converge left no vllm container to compare with"

    run = run_playbook(PLAYBOOK, limit=name)
    assert run.returncode == 0, "%s\n%s" % (run.stdout[-4000:], run.stderr[-2000:])
    refusal = run.results("Report how the role ended")[name]["__refusal"]
    assert refusal["failed"], refusal
    assert CHECK_TASK in refusal["task"], refusal
    assert "instance vllm-public would publish the API on 0.0.0.0, beyond this host" in refusal["msg"], refusal
    assert "set vllm_server_expose: true" in refusal["msg"], refusal
    assert "nothing was changed" in refusal["msg"], refusal
    assert run.changed_tasks() == [], run.changed_tasks()

    for path in ("/etc/systemd/system/vllm-public.service", "/etc/vllm/vllm-public.env"):
        assert not host.file(path).exists, "the refused run wrote %s" % path
    assert _container(host, "vllm-public") is None, "the refused run created the container vllm-public"
    assert "8001" not in host.check_output("docker ps --format %s", "{{.Ports}}")
    after = [(host.file(path).sha256sum, host.file(path).mtime) for path in SERVING]
    assert after == before, "the refused run changed %s" % [p for p, b, a in zip(SERVING, before, after) if b != a]
    assert _container(host, "vllm") == serving, "the serving container was replaced or restarted"
