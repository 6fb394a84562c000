"""Faults of the distribution against the store's real nginx (molecule/model_store/molecule.yml).

They run after tests/test_1_store.py (whose byte counts they would change), each on fetch-a.
"""

import os

from test_1_store import COPY, _address, _get, _log, _manifest, _store

testinfra_hosts = ["fetch-a"]

REWRITE = (
    "import json\n"
    "path = '/srv/labfleet/model-store/synthetic/r2/labfleet-manifest.json'\n"
    "data = json.load(open(path))\n"
    "data['revision'] = 'r2'\n"
    "for entry in data['files']:\n"
    "    if entry['path'] == 'model.safetensors':\n"
    "        entry['sha256'] = '0' * 64\n"
    "open(path, 'w').write(json.dumps(data, indent=1, sort_keys=True) + '\\n')\n"
)


def test_an_interrupted_transfer_resumes_where_it_stopped(host, inventory_file, call_module):
    """Half of the synthetic model's weights are already in the staging file (a transfer cut there):
    the fetch asks nginx for the rest only."""
    store = _store(inventory_file)
    synthetic, _sha = _manifest(store, "synthetic", "r1")
    weights = max(synthetic["files"], key=lambda entry: entry["size"])
    half = weights["size"] // 2
    staging = "/srv/models/resume.revisions/.r1.partial"
    url = "http://%s:8090" % _address(inventory_file, "store")
    host.run_expect([0], "mkdir -p %s", staging)
    status, _info = _get(host, "%s/synthetic/r1/%s" % (url, weights["path"]), rng="0-%d" % (half - 1),
                         out="%s/%s.part" % (staging, weights["path"]))
    assert status == 206
    result = call_module("labfleet.vllm.model_fetch", {
        "url": url, "name": "synthetic", "revision": "r1",
        "dest": "/srv/models/resume"})
    assert not result.get("failed"), result
    assert result["bytes_resumed"] == half
    assert result["bytes_fetched"] == synthetic["total_bytes"] - half
    client = _address(inventory_file, "fetch-a")
    ranged = [row for row in _log(store) if row[0] == client and row[5] == "bytes=%d-" % half]
    assert ranged and ranged[-1][3] == 206 and ranged[-1][4] == weights["size"] - half, ranged
    digest = host.check_output("sha256sum /srv/models/resume/%s", weights["path"]).split()[0]
    assert digest == weights["sha256"]


def test_a_corrupted_file_is_found_and_fetched_again(host, inventory_file, call_module):
    store = _store(inventory_file)
    synthetic, _sha = _manifest(store, "synthetic", "r1")
    weights = max(synthetic["files"], key=lambda entry: entry["size"])
    target = "/srv/models/synthetic/%s" % weights["path"]
    host.run_expect([0], "printf 'garbage!' | dd of=%s bs=1 seek=4096 conv=notrunc status=none", target)
    url = "http://%s:8090" % _address(inventory_file, "store")
    result = call_module("labfleet.vllm.model_fetch", {
        "url": url, "name": "synthetic", "revision": "r1",
        "dest": "/srv/models/synthetic"})
    assert not result.get("failed"), result
    assert result["changed"] and result["files_repaired"] == [weights["path"]], result
    assert result["bytes_fetched"] == weights["size"]
    assert host.check_output("sha256sum %s", target).split()[0] == weights["sha256"]


def test_an_unreachable_store_fails_the_fetch_before_anything_changes(host, inventory_file, call_module):
    before = host.file("/srv/models/tiny-gptq").linked_to
    url = "http://%s:8091" % _address(inventory_file, "store")
    result = call_module("labfleet.vllm.model_fetch", {
        "url": url, "name": "tiny-nvfp4", "revision": COPY,
        "dest": "/srv/models/tiny-gptq"})
    assert result.get("failed"), result
    assert "cannot reach the model store" in result["msg"], result["msg"]
    assert host.file("/srv/models/tiny-gptq").linked_to == before


def test_the_preflight_refuses_a_host_when_the_store_is_unreachable(inventory_file, run_playbook, project_dir):
    store = _store(inventory_file)
    url = "http://%s:8091" % _address(inventory_file, "store")
    run = run_playbook(os.path.join(project_dir, "playbooks", "preflight.yml"),
                       extra_vars={"labfleet_test_store_url": url}, limit="fetch-a,store")
    assert "MODEL_STORE_UNREACHABLE" in run.stdout, run.stdout[-3000:]
    assert store.service("labfleet-model-store").is_running


def test_a_revision_that_fails_half_way_leaves_the_served_one_whole(host, inventory_file, call_module):
    """A new revision with a file that does not match its manifest: the fetch fails after the other files
    arrived, and the link still names the old revision, whole (a server started now reads it)."""
    store = _store(inventory_file)
    store.run_expect([0], "set -e; root=/srv/labfleet/model-store/synthetic; rm -rf $root/r2; cp -a $root/r1 $root/r2")
    # r2's manifest names a model.safetensors the store does not hold: the other files arrive (hard-linked from
    # r1, or fetched), that one is fetched, fails its sha256, is fetched again, fails again: the fetch stops.
    store.run_expect([0], "python3 -c %s", REWRITE)
    url = "http://%s:8090" % _address(inventory_file, "store")
    before = host.file("/srv/models/synthetic").linked_to
    result = call_module("labfleet.vllm.model_fetch", {
        "url": url, "name": "synthetic", "revision": "r2",
        "dest": "/srv/models/synthetic"})
    assert result.get("failed"), result
    assert "model.safetensors" in result["msg"], result["msg"]
    assert host.file("/srv/models/synthetic").linked_to == before
    synthetic, _sha = _manifest(store, "synthetic", "r1")
    for entry in synthetic["files"]:
        digest = host.check_output("sha256sum /srv/models/synthetic/%s", entry["path"]).split()[0]
        assert digest == entry["sha256"], entry["path"]
    store.run_expect([0], "rm -rf /srv/labfleet/model-store/synthetic/r2")
