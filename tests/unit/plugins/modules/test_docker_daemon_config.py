"""The docker_daemon_config module end to end on files in a temporary directory."""

import json
import os
import stat

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.labfleet.vllm.plugins.modules import docker_daemon_config

SITE = {
    "data-root": "/data/docker",
    "registry-mirrors": ["https://mirror.lab.example:5000"],
    "log-driver": "json-file",
    "log-opts": {"max-size": "100m", "max-file": "3"},
    "live-restore": True,
    "runtimes": {"other": {"path": "/usr/bin/other"}},
}
NVIDIA = {"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}
BROKEN = '{\n  "data-root": "/data/docker",\n  "log-opts": {"max-size": "100m"\n'


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "tmp").mkdir()
    return tmp_path


def run_module(capsys, workdir, args):
    full = {"_ansible_tmpdir": str(workdir / "tmp"), "_ansible_remote_tmp": str(workdir / "tmp")}
    full.update(args)
    with patch_module_args(full):
        with pytest.raises(SystemExit) as exc:
            docker_daemon_config.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def backups(directory, name="daemon.json"):
    return sorted(p for p in os.listdir(str(directory)) if p.startswith(name + ".") and p.endswith("~"))


def test_merge_keeps_site_keys_writes_backup_and_is_idempotent(workdir, capsys):
    conf = workdir / "daemon.json"
    conf.write_text(json.dumps(SITE, indent=2))
    rc, result = run_module(capsys, workdir, {"path": str(conf), "settings": NVIDIA, "backup": True})
    assert rc == 0
    assert result["changed"] is True
    assert result["changed_keys"] == ["runtimes.nvidia"]
    written = json.loads(conf.read_text())
    for key, value in SITE.items():
        if key != "runtimes":
            assert written[key] == value
    assert written["runtimes"] == {"other": {"path": "/usr/bin/other"}, "nvidia": {"path": "nvidia-container-runtime"}}
    assert result["config"] == written
    assert os.path.isfile(result["backup_file"])
    with open(result["backup_file"]) as handle:
        assert json.load(handle) == SITE
    assert conf.read_text().endswith("}\n")

    rc, again = run_module(capsys, workdir, {"path": str(conf), "settings": NVIDIA, "backup": True})
    assert rc == 0
    assert again["changed"] is False
    assert "backup_file" not in again
    assert len(backups(workdir)) == 1


def test_check_mode_reports_the_change_and_writes_nothing(workdir, capsys):
    conf = workdir / "daemon.json"
    original = json.dumps(SITE)
    conf.write_text(original)
    rc, result = run_module(capsys, workdir, {"path": str(conf), "settings": NVIDIA, "backup": True,
                                              "_ansible_check_mode": True})
    assert rc == 0
    assert result["changed"] is True
    assert result["config"]["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
    assert conf.read_text() == original
    assert backups(workdir) == []
    assert os.listdir(str(workdir / "tmp")) == []


def test_check_mode_does_not_create_a_missing_file(workdir, capsys):
    conf = workdir / "docker" / "daemon.json"
    rc, result = run_module(capsys, workdir, {"path": str(conf), "settings": NVIDIA, "mode": "0644",
                                              "_ansible_check_mode": True})
    assert rc == 0
    assert result["changed"] is True
    assert not conf.parent.exists()


def test_diff_shows_only_the_keys_that_change(workdir, capsys):
    conf = workdir / "daemon.json"
    conf.write_text(json.dumps(SITE, separators=(",", ":")))
    rc, result = run_module(capsys, workdir, {"path": str(conf), "settings": NVIDIA, "_ansible_diff": True,
                                              "_ansible_check_mode": True})
    assert rc == 0
    diff = result["diff"][0]
    assert diff["before_header"] == diff["after_header"] == str(conf)
    before, after = diff["before"].splitlines(), diff["after"].splitlines()
    added = [line for line in after if line not in before]
    removed = [line for line in before if line not in after]
    assert removed == []
    assert "nvidia-container-runtime" in "".join(added)
    assert not any("data-root" in line or "log-opts" in line for line in added)


def test_invalid_json_fails_naming_the_file_and_leaves_it_untouched(workdir, capsys):
    conf = workdir / "daemon.json"
    conf.write_text(BROKEN)
    before = os.stat(str(conf))
    rc, result = run_module(capsys, workdir, {"path": str(conf), "settings": NVIDIA, "backup": True})
    assert rc == 1
    assert result["failed"] is True
    assert result["changed"] is False
    assert result["msg"].startswith("%s is not valid JSON: " % conf)
    assert "line 4" in result["msg"]
    assert "Traceback" not in json.dumps(result)
    assert conf.read_text() == BROKEN
    assert os.stat(str(conf)).st_mtime_ns == before.st_mtime_ns
    assert backups(workdir) == []


def test_invalid_json_fails_in_check_mode_too(workdir, capsys):
    conf = workdir / "daemon.json"
    conf.write_text("[1, 2]")
    rc, result = run_module(capsys, workdir, {"path": str(conf), "settings": NVIDIA, "_ansible_check_mode": True})
    assert rc == 1
    assert "must hold a JSON object" in result["msg"]


def test_empty_file_gets_the_settings(workdir, capsys):
    conf = workdir / "daemon.json"
    conf.write_text("")
    rc, result = run_module(capsys, workdir, {"path": str(conf), "settings": NVIDIA})
    assert rc == 0
    assert result["changed"] is True
    assert json.loads(conf.read_text()) == NVIDIA


def test_missing_file_is_created_with_the_mode_asked(workdir, capsys):
    conf = workdir / "daemon.json"
    rc, result = run_module(capsys, workdir, {"path": str(conf), "settings": NVIDIA, "mode": "0644", "backup": True})
    assert rc == 0
    assert result["changed"] is True
    assert "backup_file" not in result
    assert stat.S_IMODE(os.stat(str(conf)).st_mode) == 0o644
    assert json.loads(conf.read_text()) == NVIDIA


def test_mode_alone_is_a_change_and_existing_mode_is_kept_otherwise(workdir, capsys):
    conf = workdir / "daemon.json"
    conf.write_text(json.dumps(NVIDIA))
    os.chmod(str(conf), 0o600)
    rc, result = run_module(capsys, workdir, {"path": str(conf), "settings": {"debug": True}})
    assert rc == 0 and result["changed"] is True
    assert stat.S_IMODE(os.stat(str(conf)).st_mode) == 0o600
    rc, result = run_module(capsys, workdir, {"path": str(conf), "settings": {"debug": True}, "mode": "0644",
                                              "_ansible_diff": True})
    assert rc == 0 and result["changed"] is True
    assert stat.S_IMODE(os.stat(str(conf)).st_mode) == 0o644
    assert any(d.get("after", {}).get("mode") == "0644" for d in result["diff"] if isinstance(d.get("after"), dict))


def test_missing_directory_is_a_clear_error(workdir, capsys):
    conf = workdir / "no-docker-yet" / "daemon.json"
    rc, result = run_module(capsys, workdir, {"path": str(conf), "settings": NVIDIA})
    assert rc == 1
    assert "does not exist" in result["msg"] and "nothing was changed" in result["msg"]


def test_a_directory_is_not_a_config_file(workdir, capsys):
    rc, result = run_module(capsys, workdir, {"path": str(workdir), "settings": NVIDIA})
    assert rc == 1
    assert "is a directory" in result["msg"]


def test_remove_default_runtime_only_while_it_is_nvidia(workdir, capsys):
    conf = workdir / "daemon.json"
    conf.write_text(json.dumps({"default-runtime": "nvidia", "runtimes": NVIDIA["runtimes"]}))
    args = {"path": str(conf), "settings": NVIDIA, "remove": [{"keys": ["default-runtime"], "value": "nvidia"}]}
    rc, result = run_module(capsys, workdir, args)
    assert rc == 0 and result["changed"] is True
    assert result["changed_keys"] == ["default-runtime"]
    assert json.loads(conf.read_text()) == NVIDIA

    conf.write_text(json.dumps({"default-runtime": "crun"}))
    rc, result = run_module(capsys, workdir, {"path": str(conf), "remove": args["remove"]})
    assert rc == 0 and result["changed"] is False


def test_validate_rejection_leaves_the_file_untouched(workdir, capsys):
    conf = workdir / "daemon.json"
    conf.write_text(json.dumps(SITE))
    rc, result = run_module(capsys, workdir, {"path": str(conf), "settings": NVIDIA, "validate": "false %s"})
    assert rc == 1
    assert "was rejected by `false %s`" in result["msg"]
    assert "left untouched" in result["msg"]
    assert json.loads(conf.read_text()) == SITE
    assert os.listdir(str(workdir / "tmp")) == []


def test_validate_runs_on_the_new_content_in_check_mode(workdir, capsys):
    conf = workdir / "daemon.json"
    conf.write_text(json.dumps(SITE))
    checker = workdir / "check.sh"
    seen = workdir / "seen.json"
    checker.write_text("#!/bin/sh\ncp \"$1\" %s\n" % seen)
    os.chmod(str(checker), 0o755)
    rc, result = run_module(capsys, workdir, {"path": str(conf), "settings": NVIDIA,
                                              "validate": "%s %%s" % checker, "_ansible_check_mode": True})
    assert rc == 0 and result["changed"] is True
    assert json.loads(seen.read_text())["runtimes"]["nvidia"] == NVIDIA["runtimes"]["nvidia"]
    assert json.loads(conf.read_text()) == SITE


def test_validate_needs_a_placeholder(workdir, capsys):
    conf = workdir / "daemon.json"
    rc, result = run_module(capsys, workdir, {"path": str(conf), "settings": NVIDIA, "validate": "dockerd --validate"})
    assert rc == 1
    assert "validate must contain %s" in result["msg"]
    assert not conf.exists()


def test_remove_needs_keys(workdir, capsys):
    rc, result = run_module(capsys, workdir, {"path": str(workdir / "daemon.json"), "remove": [{"value": "nvidia"}]})
    assert rc == 1
    assert "keys" in result["msg"]


def test_a_symlinked_file_stays_a_link(workdir, capsys):
    real = workdir / "etc-docker-daemon.json"
    real.write_text(json.dumps(SITE))
    link = workdir / "daemon.json"
    os.symlink(str(real), str(link))
    rc, result = run_module(capsys, workdir, {"path": str(link), "settings": NVIDIA})
    assert rc == 0 and result["changed"] is True
    assert os.path.islink(str(link))
    assert json.loads(real.read_text())["runtimes"]["nvidia"] == NVIDIA["runtimes"]["nvidia"]
