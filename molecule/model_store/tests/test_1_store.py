"""The model store and the distribution of weights (molecule/model_store/molecule.yml).

Bytes per host come from the store's nginx access log (its own count of what it sent), not from
what the fetching module says it received; the faults run against the real nginx.
"""

import json

STORE = "http://127.0.0.1:8090"
testinfra_hosts = ["store"]
ACCESS_LOG = "/var/log/labfleet-model-store/access.log"
COPY = "r1+gptq-g128"
SERVING_HOSTS = ("fetch-a", "fetch-b", "fetch-c")
# The reason code the gate gives a host whose disk cannot hold what it would fetch.
DISK_CODE = "INSUFFICIENT_DISK"

FETCH = (
    "import sys, urllib.request, urllib.error\n"
    "url, method, rng, out = sys.argv[1:5]\n"
    "req = urllib.request.Request(url, method=method, data=b'x' if method == 'PUT' else None)\n"
    "if rng != '-': req.add_header('Range', 'bytes=' + rng)\n"
    "try:\n"
    "    resp = urllib.request.urlopen(req, timeout=30)\n"
    "except urllib.error.HTTPError as err:\n"
    "    print(err.code); sys.exit(0)\n"
    "body = resp.read()\n"
    "if out != '-':\n"
    "    open(out, 'wb').write(body)\n"
    "    print(resp.status, len(body))\n"
    "else:\n"
    "    sys.stdout.write(str(resp.status) + '\\n' + body.decode())\n"
)


def _get(host, url, method="GET", rng="-", out="-"):
    """(status, body text) of a request made on ``host`` with its python3 (the images have no curl)."""
    text = host.check_output("python3 -c %s %s %s %s %s", FETCH, url, method, rng, out)
    status, _sep, body = text.partition("\n")
    return int(status.split()[0]), (body if out == "-" else status)


def _inventory_host(runner, name):
    import testinfra  # pylint: disable=import-outside-toplevel

    return testinfra.get_host("ansible://%s?ansible_inventory=%s" % (name, runner), sudo=False)


def _store(inventory_file):
    return _inventory_host(inventory_file, "store")


def _manifest(store, name, revision):
    status, text = _get(store, "%s/%s/%s/labfleet-manifest.json" % (STORE, name, revision))
    assert status == 200, (name, revision, status)
    digest = store.check_output("sha256sum /srv/labfleet/model-store/%s/%s/labfleet-manifest.json", name, revision)
    return json.loads(text), digest.split()[0]


def _address(inventory_file, name):
    found = _inventory_host(inventory_file, name).interface.default("inet").addresses
    assert found, "%s has no IPv4 address" % name
    return found[0]


def _log(store):
    """[(client, method, path, status, bytes, range)] from the store's access log."""
    rows = []
    for line in store.check_output("cat %s", ACCESS_LOG).splitlines():
        client, rest = line.split(" ", 1)
        request = rest.split('"')[1]
        method, path = request.split(" ", 1)
        tail = rest.split('"')[2].split()
        rng = rest.split('"')[3]
        rows.append((client, method, path, int(tail[0]), int(tail[1]), rng))
    return rows


def test_the_store_is_served_read_only_by_nginx(host):
    store = host
    assert store.service("labfleet-model-store").is_running
    assert store.service("labfleet-model-store").is_enabled
    assert store.socket("tcp://0.0.0.0:8090").is_listening
    text = store.file("/etc/labfleet/model-store/nginx.conf").content_string
    assert "Ansible managed" in text and "deny all;" in text
    # A range request is answered with 206 and exactly the range (resumed transfers rely on it).
    full = store.file("/srv/labfleet/model-store/synthetic/r1/config.json").content_string
    status, body = _get(store, STORE + "/synthetic/r1/config.json", rng="10-19")
    assert (status, body) == (206, full[10:20])
    # No listing, no dot-file (a revision being filled), no method but GET and HEAD.
    assert _get(store, STORE + "/synthetic/")[0] in (403, 404)
    assert _get(store, STORE + "/synthetic/.r2.tmp/config.json")[0] == 404
    assert _get(store, STORE + "/synthetic/r1/config.json", method="PUT")[0] == 403


def test_each_model_is_in_the_store_once_with_its_manifest(inventory_file):
    store = _store(inventory_file)
    for name in ("tiny-nvfp4", "synthetic"):
        manifest, _sha = _manifest(store, name, "r1")
        assert manifest["format"] == "labfleet.model-manifest/1"
        assert (manifest["name"], manifest["revision"]) == (name, "r1")
        assert manifest["total_bytes"] == sum(entry["size"] for entry in manifest["files"]) > 0
        for entry in manifest["files"]:
            path = "/srv/labfleet/model-store/%s/r1/%s" % (name, entry["path"])
            assert store.file(path).size == entry["size"]
            assert store.check_output("sha256sum %s", path).split()[0] == entry["sha256"]
        # What the gate needs, read once on the store host.
        assert manifest["gate"]["weight_bytes"] > 0


def test_the_gptq_copy_is_made_once_on_the_store_and_names_its_source(inventory_file):
    store = _store(inventory_file)
    source, source_sha = _manifest(store, "tiny-nvfp4", "r1")
    copy, _sha = _manifest(store, "tiny-nvfp4", COPY)
    assert copy["source"]["manifest_sha256"] == source_sha
    assert copy["source"]["files"] == {entry["path"]: entry["sha256"] for entry in source["files"]}
    assert copy["source"]["converter"] == "nvfp4_repack"
    assert copy["source"]["settings"]["group_size"] == 128
    assert copy["gate"]["quant_method"] == "gptq"
    # One copy in the store, none on any host: no serving host has the NVFP4 source or NumPy.
    listing = store.check_output("ls /srv/labfleet/model-store/tiny-nvfp4").split()
    assert sorted(listing) == ["r1", COPY], listing
    for name in SERVING_HOSTS:
        host = _inventory_host(inventory_file, name)
        assert not host.package("python3-numpy").is_installed
        assert not host.file("/srv/models/tiny").exists and not host.file("/srv/models/tiny.revisions").exists


def test_each_host_read_each_model_once_and_nothing_on_the_converged_run(inventory_file):
    """Bytes sent per host, by nginx's own log, over the converge and the idempotence run together."""
    store = _store(inventory_file)
    copy, _sha = _manifest(store, "tiny-nvfp4", COPY)
    synthetic, _sha = _manifest(store, "synthetic", "r1")
    rows = _log(store)
    figures = {}
    for name in SERVING_HOSTS:
        client = _address(inventory_file, name)
        mine = [row for row in rows if row[0] == client and "labfleet-manifest.json" not in row[2]]
        got = {
            "tiny-nvfp4/" + COPY: sum(row[4] for row in mine if row[2].startswith("/tiny-nvfp4/%s/" % COPY)),
            "synthetic/r1": sum(row[4] for row in mine if row[2].startswith("/synthetic/r1/")),
        }
        figures[name] = got
        assert got == {"tiny-nvfp4/" + COPY: copy["total_bytes"], "synthetic/r1": synthetic["total_bytes"]}, got
        # The source checkpoint was never read by a serving host.
        assert not [row for row in mine if row[2].startswith("/tiny-nvfp4/r1/")]
    print("bytes read from the store per host (converge + converged re-run): %s" % json.dumps(figures, sort_keys=True))


def test_the_converged_run_read_nothing_and_changed_nothing(inventory_file):
    for name in SERVING_HOSTS:
        host = _inventory_host(inventory_file, name)
        record = json.loads(host.check_output("cat /var/tmp/labfleet-test-fetch.json"))
        for kind in ("copy", "synthetic"):
            assert record[kind]["changed"] is False, (name, kind, record[kind])
            assert record[kind]["bytes_fetched"] == 0, (name, kind, record[kind])
        print("%s converged re-run: copy %.2f s, synthetic %.2f s (verify quick)"
              % (name, record["copy"]["seconds"], record["synthetic"]["seconds"]))


def test_the_served_revision_is_published_behind_a_link(inventory_file):
    for name in SERVING_HOSTS:
        host = _inventory_host(inventory_file, name)
        link = host.file("/srv/models/tiny-gptq")
        assert link.is_symlink and link.linked_to == "/srv/models/tiny-gptq.revisions/%s" % COPY
        assert host.file("/srv/models/tiny-gptq/config.json").is_file
        assert not host.file("/srv/models/tiny-gptq.revisions/.%s.partial" % COPY).exists


def test_the_host_whose_disk_cannot_hold_the_model_was_refused_before_any_transfer(inventory_file):
    store = _store(inventory_file)
    host = _inventory_host(inventory_file, "fetch-small")
    assert not host.file("/srv/models/tiny-gptq").exists
    assert not host.file("/srv/models/tiny-gptq.revisions").exists
    client = _address(inventory_file, "fetch-small")
    # It read the manifest (the preflight judges from it) and nothing else.
    paths = {row[2] for row in _log(store) if row[0] == client}
    assert paths <= {"/tiny-nvfp4/r1/labfleet-manifest.json"}, paths


def test_the_report_says_why_the_small_host_was_refused(fleet_report, report_entry):
    report, _markdown = fleet_report
    entry = report_entry(report, "fetch-small")
    assert entry["verdict"] == "refused", entry
    assert DISK_CODE in [reason["code"] for reason in entry["reasons"]], entry["reasons"]
    for name in SERVING_HOSTS:
        assert report_entry(report, name)["verdict"] == "allowed", name


def test_the_report_shows_where_each_host_gets_its_model(fleet_report, report_entry):
    report, markdown = fleet_report
    entry = report_entry(report, "fetch-a")
    assert entry["model_store"]["fetch"] == {"revision": COPY, "dest": "/srv/models/tiny-gptq",
                                             "bytes": entry["model_store"]["fetch"]["bytes"]}
    assert entry["model_store"]["fetch"]["bytes"] > 0
    assert "model store: tiny-nvfp4/r1, its copy %s from http://" % COPY in markdown
