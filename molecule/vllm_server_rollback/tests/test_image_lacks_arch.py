"""F4 (docs/testing.md, fault table): an image whose arch list lacks sm_70, rolled out to a V100 host.

The stand-in tagged 2-noarch70 is version 2 built with TORCH_CUDA_ARCH_LIST "7.5 8.0 8.6 8.9 9.0+PTX"
(no 7.0, no PTX below 9.0): no kernels for this host's fake V100s (compute capability 7.0). The real
site.yml runs with it (driver and container runtime tasks skipped, as for F1). The image is not on
the host when the preflight plans (it comes as a tarball), so the preflight allows the host; the
vllm_server role loads the image, reads its arch list (vllm_image_facts) and plans the host again
(preflight's tasks_from recheck), which must refuse it with IMAGE_LACKS_ARCH before the unit, env
file or container change. The run must end non-zero with that reason in the fleet report.

The image is removed from the host first (when an earlier verify left it), so that the preflight
cannot see it and the role's re-check is what meets it; ``molecule verify`` can run again.
"""

import json

import pytest

testinfra_hosts = ["vllm_hosts"]

IMAGE = "labfleet/openai-standin"
TAG = "2-noarch70"
SERVING = ["/etc/systemd/system/vllm.service", "/etc/vllm/vllm.env"]
RECHECK_TASK = "Stop the host before anything more changes when the new plan refuses it"


def _container(host, name):
    """'<image id> <started at>' of a container, or None when there is none of that name."""
    result = host.run("docker inspect --format %s %s", "{{.Image}} {{.State.StartedAt}}", name)
    return result.stdout.strip() if result.rc == 0 else None


@pytest.fixture(scope="module")
def noarch_run(host, site_with_standin):
    host.run("docker image rm %s:%s", IMAGE, TAG)  # absent on a first verify: nothing to remove
    assert host.run("docker image inspect %s:%s", IMAGE, TAG).rc != 0
    before = {
        "files": [(host.file(path).sha256sum, host.file(path).mtime) for path in SERVING],
        "container": _container(host, "vllm"),
    }
    assert before["container"], "the converge left no vllm container to compare with"
    run, report = site_with_standin(TAG)
    return run, report, before


def test_image_on_the_host_lacks_7_0(host, noarch_run):
    """The fault is real: the image the role loaded declares an arch list without 7.0."""
    assert noarch_run
    env = host.check_output("docker image inspect --format %s %s:%s", "{{json .Config.Env}}", IMAGE, TAG)
    arch = [item for item in json.loads(env) if item.startswith("TORCH_CUDA_ARCH_LIST=")]
    assert arch == ["TORCH_CUDA_ARCH_LIST=7.5 8.0 8.6 8.9 9.0+PTX"], arch


def test_recheck_refuses_with_image_lacks_arch(host, noarch_run):
    """The role's re-check planned the host again and stopped it, naming IMAGE_LACKS_ARCH and the V100."""
    run, _report, _before = noarch_run
    name = host.backend.get_hostname()
    # The preflight could not see the image and allowed the host; the re-check is what refused it.
    preflight = run.task("Read the vLLM image (local image, else the shipped profile)", name)["hosts"][name]
    assert preflight.get("image", {}).get("state") != "present", json.dumps(preflight.get("image"))[:2000]
    stop = run.task(RECHECK_TASK, name)["hosts"][name]
    assert stop.get("failed"), stop
    assert "refused when planned again" in stop["msg"], stop["msg"]
    assert "IMAGE_LACKS_ARCH" in stop["msg"], stop["msg"]
    assert "7.5 8.0 8.6 8.9 9.0+PTX" in stop["msg"], stop["msg"]
    # Nothing of the instance was written or restarted in this run.
    ran = [title.split(" : ", 1)[-1] for title in run.task_names()]
    for task in ("Write the unit", "Write the env file (root only; it holds the secrets)",
                 "Restart the server (unit, env file, image or model changed, or a change left unfinished)"):
        assert task not in ran, task


def test_run_fails_with_the_reason_in_the_report(host, noarch_run, report_entry):
    """site.yml ends non-zero; the report shows the host refused by the re-check with IMAGE_LACKS_ARCH."""
    run, report, _before = noarch_run
    name = host.backend.get_hostname()
    assert run.returncode not in (0, None), run.returncode
    failed = run.results("Fail the hosts whose rollout failed (the report above says what happened)")[name]
    assert failed.get("failed"), failed
    assert "step server" in failed["msg"] and "IMAGE_LACKS_ARCH" in failed["msg"], failed["msg"]
    entry = report_entry(report, name)
    shown = json.dumps({k: entry.get(k) for k in ("outcome", "outcome_detail", "reasons", "replanned",
                                                  "rollout_status", "failure")}, indent=1)
    # The re-check's plan replaced the preflight's: the report calls the host refused (the outcome word
    # is the preflight's "refused", not the reference's "gated"), saying it was planned again.
    assert entry["outcome"] == "refused", shown
    assert "IMAGE_LACKS_ARCH" in [reason["code"] for reason in entry["reasons"]], shown
    assert "IMAGE_LACKS_ARCH" in entry["outcome_detail"], shown
    assert "planned again during the rollout" in entry["replanned"], shown
    assert entry["rollout_status"]["state"] == "failed", shown


def test_serving_instance_unchanged(host, noarch_run):
    """The unit, the env file and the running container (same image, same start) are as before the run."""
    _run, _report, before = noarch_run
    assert [(host.file(path).sha256sum, host.file(path).mtime) for path in SERVING] == before["files"]
    assert _container(host, "vllm") == before["container"]
    assert host.service("vllm").is_running
