"""The openai_smoke module end to end against a small OpenAI-compatible server on 127.0.0.1."""

import json
import os
import stat
import time
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.labfleet.vllm.plugins.modules import openai_smoke

# A health wait that lost its timeout fails the test instead of hanging (conftest.py).
pytestmark = pytest.mark.usefixtures("health_wait_guard")

KEY = "sk-test-canary-4c1d"


class Handler(BaseHTTPRequestHandler):
    config = {}

    def log_message(self, *args):
        pass

    def _send(self, status, body, ctype="application/json"):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self):
        key = self.config.get("key")
        if key and self.path.startswith("/v1") and self.headers.get("Authorization") != "Bearer " + key:
            self._send(401, '{"error": "Unauthorized"}')
            return False
        return True

    def do_GET(self):  # noqa: N802
        if not self._authorized():
            return
        if self.path == "/health":
            self.config.get("on_health", lambda: None)()
            self._send(self.config.get("health", 200), "")
        elif self.path == "/v1/models":
            self._send(200, json.dumps({"data": [{"id": name} for name in self.config.get("models", ["quasar"])]}))
        elif self.path == "/metrics":
            self._send(200, self.config.get("metrics", "vllm:num_requests_running 0\n"), "text/plain")
        else:
            self._send(404, "{}")

    def do_POST(self):  # noqa: N802
        if not self._authorized():
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        words = [] if self.config.get("no_tokens") else ["ok"] * min(body["max_tokens"], 3)
        if body.get("stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for word in words:
                self.wfile.write(("data: %s\n\n" % json.dumps({"choices": [{"delta": {"content": word}}]})).encode())
            self.wfile.write(("data: %s\n\n" % json.dumps({"choices": [{"delta": {}, "finish_reason": "stop"}]})).encode())
            self.wfile.write(b"data: [DONE]\n\n")
        else:
            self._send(200, json.dumps({"choices": [{"message": {"content": " ".join(words)}, "finish_reason": "stop"}],
                                        "usage": {"completion_tokens": len(words)}}))


@pytest.fixture()
def server():
    Handler.config = {}
    httpd = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def run_module(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            openai_smoke.main()
    out = capsys.readouterr().out
    return exc.value.code, json.loads(out), out


def test_healthy_server_answers_with_tokens_and_latency(server, capsys):
    Handler.config = {"key": KEY}
    rc, result, raw = run_module(capsys, {"url": server, "model": "quasar", "api_key": KEY, "interval": 0.1})
    assert rc == 0, result
    assert result["changed"] is False
    assert result["models"] == ["quasar"]
    assert result["completion_tokens"] == 3 and result["text"] == "okokok"
    assert result["ttft_s"] is not None and result["latency_s"] >= result["ttft_s"]
    assert result["health"]["ok"] is True and result["health"]["reason"] == "healthy"
    assert result["progress"]
    assert KEY not in raw


def test_plain_completion_and_metrics(server, capsys):
    rc, result, _raw = run_module(capsys, {"url": server, "model": "quasar", "stream": False, "check_metrics": True,
                                           "_ansible_check_mode": True})
    assert rc == 0, result
    assert result["completion_tokens"] == 3 and result["metrics"] == 1


def test_metrics_without_vllm_metrics_fail(server, capsys):
    Handler.config = {"metrics": "# nothing\nprocess_cpu_seconds_total 1\n"}
    rc, result, _raw = run_module(capsys, {"url": server, "model": "quasar", "check_metrics": True})
    assert rc == 1 and "without any vllm: metric" in result["msg"]


def test_missing_key_is_explained(server, capsys):
    Handler.config = {"key": KEY}
    rc, result, _raw = run_module(capsys, {"url": server, "model": "quasar"})
    assert rc == 1 and "401" in result["msg"] and "API key" in result["msg"]


def test_wrong_key_is_never_echoed(server, capsys):
    Handler.config = {"key": KEY}
    rc, result, raw = run_module(capsys, {"url": server, "model": "quasar", "api_key": "wrong-key-99"})
    assert rc == 1 and "401" in result["msg"]
    assert "wrong-key-99" not in raw


def test_served_name_must_be_listed(server, capsys):
    Handler.config = {"models": ["other"]}
    rc, result, _raw = run_module(capsys, {"url": server, "model": "quasar"})
    assert rc == 1
    assert "does not list the served model name 'quasar' (it lists other)" in result["msg"]
    assert result["models"] == ["other"]


def test_no_tokens_fails(server, capsys):
    Handler.config = {"no_tokens": True}
    rc, result, _raw = run_module(capsys, {"url": server, "model": "quasar"})
    assert rc == 1 and "no tokens" in result["msg"]
    assert result["completion_tokens"] == 0


def test_unhealthy_server_times_out_with_progress(server, capsys):
    Handler.config = {"health": 503}
    rc, result, _raw = run_module(capsys, {"url": server, "model": "quasar", "health_timeout": 1, "interval": 0.3})
    assert rc == 1 and "No healthy answer" in result["msg"] and "HTTP 503" in result["msg"]
    assert result["health"]["reason"] == "timeout" and result["health"]["attempts"] >= 2
    # The wait ends at the last check before another would pass health_timeout: after 1 - 0.3 s, and
    # (sleeps overshooting on a loaded machine) well before twice the timeout.
    assert 1 - 0.3 < result["health"]["elapsed_s"] < 1.9, result["health"]


class VirtualTime:
    """The module's clock and sleep (openai_smoke.CLOCK, SLEEP): virtual seconds that only sleep()
    and the test move on."""

    def __init__(self, monkeypatch):
        self.now = 0.0
        self.slept = []
        monkeypatch.setattr(openai_smoke, "CLOCK", lambda: self.now)
        monkeypatch.setattr(openai_smoke, "SLEEP", self.sleep)

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds
        assert len(self.slept) < 1000, "still waiting after every timeout of these tests"


def test_health_wait_on_a_virtual_clock_checks_until_the_timeout(server, capsys, monkeypatch):
    Handler.config = {"health": 503}
    clock = VirtualTime(monkeypatch)
    rc, result, _raw = run_module(capsys, {"url": server, "model": "quasar", "health_timeout": 1, "interval": 0.3})
    # Checks at 0, 0.3, 0.6 and 0.9 s; one more would come after the timeout.
    assert rc == 1 and result["health"]["reason"] == "timeout" and result["health"]["attempts"] == 4
    assert clock.slept == [0.3] * 3 and result["health"]["elapsed_s"] == pytest.approx(0.9, abs=1e-9)
    assert "No healthy answer from %s/health within 1 s (health_timeout)" % server in result["msg"]


def test_each_request_gets_its_documented_bound(server, capsys, armed):
    # A health check takes at most 10 s of request_timeout; /v1/models and the completion all of it.
    rc, result, _raw = run_module(capsys, {"url": server, "model": "quasar", "request_timeout": 30})
    assert rc == 0, result
    assert armed == [10, 30, 30]


@pytest.mark.parametrize("used, expected", [
    (300 + 59, {"armed": [10, 1.0], "rc": 0}),     # 1 s left of 0 + 3 x 100 + 60: /v1/models gets that
    (300 + 59.6, {"armed": [10], "rc": 1}),        # 0.4 s left: not enough to ask
])
def test_the_run_is_bounded_by_health_timeout_3_request_timeouts_and_60_s(server, capsys, monkeypatch, armed, used,
                                                                          expected):
    clock = VirtualTime(monkeypatch)
    Handler.config = {"on_health": lambda: setattr(clock, "now", used)}
    rc, result, _raw = run_module(capsys, {"url": server, "model": "quasar", "health_timeout": 0,
                                           "request_timeout": 100})
    assert rc == expected["rc"] and armed[:2] == expected["armed"], (result, armed)
    if rc:
        assert result["msg"] == ("The smoke test of %s used up its overall time (360 s = health_timeout 0 + 3 x "
                                 "request_timeout 100 + 60) before GET /v1/models; raise health_timeout or "
                                 "request_timeout" % server)


def test_nothing_listening(capsys):
    rc, result, _raw = run_module(capsys, {"url": "http://127.0.0.1:9", "model": "quasar", "health_timeout": 0})
    assert rc == 1 and "cannot reach" in result["msg"]


def _fake_docker(tmp_path, status):
    path = tmp_path / "docker"
    path.write_text("#!/bin/sh\n"
                    "case \"$1\" in\n"
                    "  inspect) echo '%s' ;;\n"
                    "  logs) echo 'ValueError: fatal engine error' >&2 ;;\n"
                    "esac\n" % status)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_exited_container_fails_fast(tmp_path, capsys):
    docker = _fake_docker(tmp_path, "exited 0")
    rc, result, _raw = run_module(capsys, {"url": "http://127.0.0.1:9", "model": "quasar", "container": "vllm",
                                           "docker_bin": docker, "health_timeout": 600, "interval": 0.1})
    assert rc == 1
    assert "exited before it became healthy (exit code 0)" in result["msg"]
    assert "last log: ValueError: fatal engine error" in result["msg"]
    assert result["health"]["attempts"] == 1


def test_running_container_state_in_progress(server, tmp_path, capsys):
    docker = _fake_docker(tmp_path, "running 0")
    rc, result, _raw = run_module(capsys, {"url": server, "model": "quasar", "container": "vllm",
                                           "docker_bin": docker})
    assert rc == 0
    assert result["health"]["attempts"] == 1


@pytest.mark.parametrize("args, text", [
    ({"url": "10.0.0.1:8000"}, "must start with http"),
    ({"max_tokens": 0}, "max_tokens must be an integer from 1 to 1000000, got 0"),
])
def test_bad_arguments(args, text, capsys):
    base = {"url": "http://127.0.0.1:9", "model": "quasar"}
    base.update(args)
    rc, result, _raw = run_module(capsys, base)
    assert rc == 1 and text in result["msg"]


def test_module_documents_itself():
    assert "openai_smoke" in openai_smoke.DOCUMENTATION
    assert os.path.basename(openai_smoke.__file__) == "openai_smoke.py"


def test_overall_deadline_ends_the_run_with_the_budget_named(server, capsys, monkeypatch):
    # A budget used up by the health wait: 0 + 3 x 1 - 3 = 0 s left for /v1/models.
    monkeypatch.setattr(openai_smoke, "RUN_SLACK", -3)
    rc, result, _raw = run_module(capsys, {"url": server, "model": "quasar", "health_timeout": 0,
                                           "request_timeout": 1})
    assert rc == 1
    assert result["msg"] == ("The smoke test of %s used up its overall time (0 s = health_timeout 0 + 3 x "
                             "request_timeout 1 + -3) before GET /v1/models; raise health_timeout or "
                             "request_timeout" % server)
    assert result["health"]["ok"] is True


def test_hanging_docker_probe_is_bounded(tmp_path, capsys, monkeypatch):
    docker = tmp_path / "docker"
    docker.write_text("#!/bin/sh\nsleep 30\n")
    docker.chmod(docker.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(openai_smoke, "COMMAND_TIMEOUT", 1)
    commands = []
    run_command = basic.AnsibleModule.run_command

    def recording(self, args, **kwargs):
        commands.append(list(args))
        return run_command(self, args, **kwargs)

    monkeypatch.setattr(basic.AnsibleModule, "run_command", recording)
    began = time.monotonic()
    rc, result, _raw = run_module(capsys, {"url": "http://127.0.0.1:9", "model": "quasar", "container": "vllm",
                                           "docker_bin": str(docker), "health_timeout": 0})
    elapsed = time.monotonic() - began
    # Two docker commands (inspect, logs), each ended by coreutils' timeout after 1 s (sleep obeys its
    # SIGTERM): no sooner than 2 s, and well before twice that.
    assert [c[1:6] for c in commands] == [["-k", "2", "1", str(docker), "inspect"],
                                          ["-k", "2", "1", str(docker), "logs"]]
    assert rc == 1 and 2 <= elapsed < 2 * 1.9, elapsed
    assert "container missing" in result["msg"]


def test_container_commands_are_bounded_to_10_s_and_2_s_more_for_sigkill():
    module = mock.Mock()
    module.get_bin_path.return_value = "/usr/bin/timeout"
    module.run_command.return_value = (0, "", "")
    assert openai_smoke.run_bounded(module, ["docker", "logs", "vllm"], check_rc=False) == (0, "", "")
    module.run_command.assert_called_once_with(["/usr/bin/timeout", "-k", "2", "10", "docker", "logs", "vllm"],
                                               check_rc=False)
    module.get_bin_path.return_value = None     # no coreutils timeout: the command as it is
    openai_smoke.run_bounded(module, ["docker", "logs", "vllm"])
    assert module.run_command.call_args[0][0] == ["docker", "logs", "vllm"]
