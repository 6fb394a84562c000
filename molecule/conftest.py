"""Fixtures shared by every Molecule scenario's pytest-testinfra verifier.

Molecule runs ``pytest --connection=ansible --ansible-inventory=<the scenario's inventory>`` in the
scenario's directory with the provisioner's environment (``ANSIBLE_COLLECTIONS_PATH`` names this
collection, ``MOLECULE_EPHEMERAL_DIRECTORY`` the scenario's controller-side files). testinfra's
``host`` fixture is parametrized over every host of the inventory; a test module narrows it with
``testinfra_hosts``.

What needs the collection itself (its modules, e.g. ``openai_smoke``, or one of its roles run with
inputs it must refuse) goes through Ansible from here: ``call_module`` runs one module on the host
under test and returns its result, ``run_playbook`` runs a small playbook of the scenario and
returns each task's result, so the assertions stay in Python. (Not testinfra's ``host.ansible``
for modules: it reads Ansible's tree output, which since ansible-core 2.19 has no ``failed`` key,
so a failed module passes for a successful one.)
"""

import json
import os
import subprocess
import tempfile

import pytest
import yaml


def _env(name):
    value = os.environ.get(name)
    if not value:
        pytest.fail("%s is not set: run these tests through Molecule (molecule verify -s <scenario>)" % name)
    return value


@pytest.fixture(scope="session")
def ephemeral_dir():
    """The scenario's ephemeral directory on the controller (inventory, reports, lock files)."""
    return _env("MOLECULE_EPHEMERAL_DIRECTORY")


@pytest.fixture(scope="session")
def project_dir():
    """The repository's root on the controller."""
    return _env("MOLECULE_PROJECT_DIRECTORY")


@pytest.fixture(scope="session")
def inventory_file():
    """The scenario's inventory, as Molecule wrote it."""
    return _env("MOLECULE_INVENTORY_FILE")


@pytest.fixture(scope="session")
def fleet_report(ephemeral_dir):
    """The fleet report the converge wrote on the controller: (parsed JSON, Markdown text)."""
    report_dir = os.path.join(ephemeral_dir, "reports")
    with open(os.path.join(report_dir, "fleet-report.json"), encoding="utf-8") as handle:
        report = json.load(handle)
    with open(os.path.join(report_dir, "fleet-report.md"), encoding="utf-8") as handle:
        markdown = handle.read()
    return report, markdown


def _report_entry(report, name):
    entries = [entry for entry in report["hosts"] if entry["host"] == name]
    assert len(entries) == 1, "the fleet report has %d entries for %s: %s" % (
        len(entries), name, [entry["host"] for entry in report["hosts"]])
    return entries[0]


@pytest.fixture(scope="session")
def report_entry():
    """``report_entry(report, host_name)``: the fleet report's entry for one host (fails when missing)."""
    return _report_entry


@pytest.fixture
def hostvars(host):
    """The inventory variables of the host under test (group_vars and host_vars merged)."""
    return host.ansible.get_variables()


@pytest.fixture(scope="module")
def default_address(host):
    """The host's IPv4 address on its default route (where a published, non-loopback port answers)."""
    addresses = host.interface.default("inet").addresses
    assert addresses, "the default interface of %s has no IPv4 address" % host.backend.get_hostname()
    return addresses[0]


@pytest.fixture
def dpkg_packages(host):
    """Every package dpkg knows on the host under test: {name: {arch, version, want, status}}.

    ``want`` is the selection (install, hold, deinstall, purge), ``status`` dpkg's state (installed,
    config-files, ...). Names are without their ``:arch``.
    """
    out = host.check_output("dpkg-query -W -f %s", "${binary:Package}\\t${Version}\\t${db:Status-Want}\\t${db:Status-Status}\\n")
    packages = {}
    for line in out.splitlines():
        name, version, want, status = line.split("\t")
        name, _sep, arch = name.partition(":")
        packages[name] = {"arch": arch, "version": version, "want": want, "status": status}
    return packages


@pytest.fixture
def managed_file(host):
    """``managed_file(path, mode=0o644, user='root', group='root')``: the text of a file a role
    templated, after asserting it is a regular file with that owner and mode, marked "Ansible managed"."""

    def _text(path, mode=0o644, user="root", group="root"):
        found = host.file(path)
        assert found.is_file, "%s is missing or not a regular file" % path
        assert (found.user, found.group, found.mode) == (user, group, mode), "%s: %s:%s %04o, expected %s:%s %04o" % (
            path, found.user, found.group, found.mode, user, group, mode)
        text = found.content_string
        assert "Ansible managed" in text, "%s is not marked as managed:\n%s" % (path, text)
        return text

    return _text


class PlaybookRun:
    """One ansible-playbook run: its exit status, output and per-task results (json callback)."""

    def __init__(self, returncode, stdout, stderr):
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        try:
            self.data = json.loads(stdout)
        except ValueError:
            self.data = None

    def results(self, task_name):
        """{host: result} of every task of that name (the last one wins)."""
        assert self.data is not None, "ansible-playbook printed no JSON:\n%s\n%s" % (self.stdout, self.stderr)
        found = {}
        for play in self.data.get("plays", []):
            for task in play.get("tasks", []):
                if task["task"]["name"] == task_name:
                    found.update(task["hosts"])
        assert found, "no task named %r ran; tasks: %s" % (task_name, self.task_names())
        return found

    def task(self, name, host_name):
        """The last task called ``name`` (a role's task too: "<role> : name") that ran on host_name, whole
        ({task, hosts}, the json callback's record, with its duration)."""
        found = None
        for play in (self.data or {}).get("plays", []):
            for task in play.get("tasks", []):
                title = task["task"]["name"]
                if (title == name or title.endswith(" : " + name)) and host_name in task["hosts"]:
                    found = task
        assert found, "no task %r ran on %s; tasks: %s" % (name, host_name, self.task_names())
        return found

    def changed_tasks(self, skip_plays=()):
        """[(play, task, host)] of every task result that changed, outside the plays named in ``skip_plays``."""
        found = []
        for play in (self.data or {}).get("plays", []):
            if play["play"]["name"] in skip_plays:
                continue
            for task in play.get("tasks", []):
                for host, result in task["hosts"].items():
                    if result.get("changed"):
                        found.append((play["play"]["name"], task["task"]["name"], host))
        return found

    def task_names(self):
        return [task["task"]["name"] for play in (self.data or {}).get("plays", []) for task in play.get("tasks", [])]


@pytest.fixture(scope="session")
def run_playbook(inventory_file):
    """Run a playbook of the scenario against its inventory; returns a PlaybookRun.

    For checks that need one of the collection's roles (a role run with inputs it must refuse):
    the playbook only runs the role, and the test asserts on the failed task's message.
    ``check=True`` runs it in check mode (--check), e.g. to show a converged host needs no change;
    ``skip_tags`` (a list) leaves out the tasks so tagged (--skip-tags), e.g. roles a scenario has not set up.
    """

    def _run(playbook, extra_vars=None, limit=None, check=False, skip_tags=None):
        cmd = ["ansible-playbook", "-i", inventory_file, playbook]
        if check:
            cmd.append("--check")
        if skip_tags:
            cmd += ["--skip-tags", ",".join(skip_tags)]
        if extra_vars:
            cmd += ["--extra-vars", json.dumps(extra_vars)]
        if limit:
            cmd += ["--limit", limit]
        env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_VERBOSITY="0")
        # Only the json callback on stdout (the scenarios' profile_tasks would write there too).
        env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
        return PlaybookRun(proc.returncode, proc.stdout, proc.stderr)

    return _run


@pytest.fixture(scope="module")
def call_module(host, run_playbook):
    """Run a module of the collection (or any module) on the host under test; return its result.
    Module-scoped like testinfra's ``host``, so that a module's fixtures can call it too.

    ``call_module(name, args_dict, check=False)``. The arguments go into a playbook written to a
    private temporary directory (never onto a command line: they may hold the API key), run with
    the json callback, so the result keeps ``failed`` (testinfra's ``host.ansible`` reads Ansible's
    tree output, which since ansible-core 2.19 drops it, so a failed module looked like a success).
    A failed module is returned, not raised: the test asserts on ``result['failed']`` and ``msg``.
    """

    def _call(name, args=None, check=False):
        target = host.backend.get_hostname()
        play = [{
            "name": "Call %s" % name,
            "hosts": target,
            "gather_facts": False,
            "check_mode": bool(check),
            "tasks": [{"name": "call", name: args or {}}],
        }]
        with tempfile.TemporaryDirectory(prefix="labfleet-verify-") as tmp:
            path = os.path.join(tmp, "call.yml")
            with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as handle:
                json.dump(play, handle)
            run = run_playbook(path)
        results = run.results("call")
        assert target in results, "no result for %s: %s" % (target, run.stderr[-2000:])
        result = results[target]
        result.setdefault("failed", False)
        return result

    return _call


@pytest.fixture
def http(host):
    """``http(url, method='GET', headers=None)`` asked from the host under test (loopback is its own).

    Returns (status, headers dict with lower-case names, body text). A refused connection returns
    status 0 and the error text as the body. No secret may be passed here: the command line is
    visible to the host's ``ps``; the tests that need the API key call ``openai_smoke``.
    """
    script = (
        "import json, sys, urllib.request, urllib.error\n"
        "req = urllib.request.Request(sys.argv[1], method=sys.argv[2], headers=json.loads(sys.argv[3]))\n"
        "try:\n"
        "    resp = urllib.request.urlopen(req, timeout=10)\n"
        "    status, hdrs, body = resp.status, dict(resp.headers), resp.read()\n"
        "except urllib.error.HTTPError as err:\n"
        "    status, hdrs, body = err.code, dict(err.headers), err.read()\n"
        "except OSError as err:\n"
        "    status, hdrs, body = 0, {}, str(err).encode()\n"
        "print(json.dumps([status, {k.lower(): v for k, v in hdrs.items()}, body.decode('utf-8', 'replace')]))\n"
    )

    def _get(url, method="GET", headers=None):
        out = host.check_output("python3 -c %s %s %s %s", script, url, method, json.dumps(headers or {}))
        status, hdrs, body = json.loads(out)
        return status, hdrs, body

    return _get


@pytest.fixture
def tiny_image(host):
    """A tiny Docker image on the host under test (/usr/bin/true and libc), for a test container.

    Made from the instance's own files (no registry here: ``docker import`` of a tar); built once,
    reused when it exists. Returns its tag; run it as ``docker run --rm --network none TAG /usr/bin/true``.
    """
    tag = "labfleet-test/tiny:1"
    if host.run("docker image inspect %s", tag).rc != 0:
        script = ('set -o pipefail; tar -h -C / -c usr/bin/true lib/x86_64-linux-gnu/libc.so.6 lib64/ld-linux-x86-64.so.2'
                  ' | docker import - "$1"')
        host.check_output("bash -c %s make-tiny-image %s", script, tag)
    return tag


class SecretList(list):
    """A list of secrets whose repr hides them.

    pytest prints the arguments of a failing test and of a failing fixture (``secret_canaries = [...]``):
    with this repr the values stay out of the output, where scripts/molecule-all.sh looks for them.
    """

    def __repr__(self):
        return "<%d secrets, hidden>" % len(self)

    __str__ = __repr__


@pytest.fixture(scope="session")
def secret_canaries(project_dir):
    """The secrets the scenarios use (canaries): none may appear outside the env file.

    A SecretList: iterate it to use the values; printing it shows none of them.
    """
    with open(os.path.join(project_dir, "molecule", "shared", "secret-canaries"), encoding="utf-8") as handle:
        return SecretList(line.strip() for line in handle if line.strip() and not line.startswith("#"))


@pytest.fixture(scope="session")
def load_yaml():
    """``load_yaml(path)``: a YAML file of the controller (a lock file, a rendered inventory)."""

    def _load(path):
        with open(path, encoding="utf-8") as handle:
            return yaml.safe_load(handle)

    return _load
