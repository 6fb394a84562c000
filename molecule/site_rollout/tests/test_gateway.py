"""site_rollout's gateway (rollout-gateway, group vllm_gateways): HAProxy from Debian's packages in front of
the fleet, after the converge, the idempotence run and the side effect (version 2-notokens: the canary's
smoke test failed and it was rolled back; rollout-second was not reached and serves version 1).

- HAProxy is Debian's package, running, its configuration valid (haproxy -c);
- the backends are the plans' serving hosts: the canary (its rollout failed) written disabled and out of
  rotation in the runtime API, rollout-second up; the refused P100 host is no backend;
- a completion through the gateway with the gateway's key is served (the gateway sends the servers their
  own key); another key gets the gateway's own 401; /health needs no key;
- the runtime API socket, the keys' digests and the servers' key are root's only, and no key is in the
  configuration or the keys file;
- HAProxy's Prometheus exporter answers, where Debian's build has it;
- the side effect ran under load (scripts/gateway-load.py through the gateway): the canary was drained
  before it changed, rolled back and kept out, and not one request failed; the report's gateway section
  shows the backends and that drain.
"""

import json
import os

import pytest

testinfra_hosts = ["vllm_gateways"]

CONFIG = "/etc/haproxy/haproxy.cfg"
SOCKET = "/run/haproxy/admin.sock"
CANARY, SECOND = "rollout-canary-vllm", "rollout-second-vllm"
URL = "http://127.0.0.1:8080"

# `show servers state <backend>` through the runtime API socket: {server name: (operational, admin) state}.
SHOW_STATE = (
    "import json, socket, sys\n"
    "s = socket.socket(socket.AF_UNIX)\n"
    "s.connect(sys.argv[1])\n"
    "s.sendall(('show servers state %s\\n' % sys.argv[2]).encode())\n"
    "data = b''\n"
    "while True:\n"
    "    chunk = s.recv(65536)\n"
    "    if not chunk:\n"
    "        break\n"
    "    data += chunk\n"
    "rows = [l.split() for l in data.decode().splitlines() if l and not l.startswith('#') and ' ' in l]\n"
    "print(json.dumps({r[3]: [int(r[5]), int(r[6])] for r in rows if len(r) > 6}))\n"
)
SRV_RUNNING = 2  # srv_op_state: 0 stopped, 1 starting, 2 running, 3 stopping
SRV_ADMF_CMAINT = 0x04  # srv_admin_state: maintenance set by the configuration ("disabled")


def _states(host):
    return json.loads(host.check_output("python3 -c %s %s %s", SHOW_STATE, SOCKET, "model_quasar"))


def test_haproxy_is_debians_package_running_with_a_valid_configuration(host):
    assert host.package("haproxy").is_installed
    assert host.service("haproxy").is_running and host.service("haproxy").is_enabled
    check = host.run("haproxy -c -f %s", CONFIG)
    assert check.rc == 0, check.stdout + check.stderr


def test_the_backends_are_the_plans_serving_hosts(host):
    text = host.file(CONFIG).content_string
    servers = [line.split()[1] for line in text.splitlines() if line.strip().startswith("server ")]
    assert servers == [CANARY, SECOND], text
    assert "rollout-p100" not in servers
    canary = [line for line in text.splitlines() if line.strip().startswith("server %s " % CANARY)][0]
    second = [line for line in text.splitlines() if line.strip().startswith("server %s " % SECOND)][0]
    assert canary.rstrip().endswith(" check disabled"), canary
    assert second.rstrip().endswith(" check"), second
    assert "the rollout failed at step server" in text
    assert "option httpchk GET /health" in text and "retry-on conn-failure empty-response" in text


def test_the_rolled_back_canary_is_out_of_rotation_and_the_second_host_up(host):
    states = _states(host)
    assert sorted(states) == [CANARY, SECOND], states
    assert states[CANARY][1] & SRV_ADMF_CMAINT, states  # disabled by the configuration
    assert states[SECOND] == [SRV_RUNNING, 0], states


def test_a_completion_goes_through_the_gateway_with_the_gateways_key(call_module):
    result = call_module("labfleet.vllm.openai_smoke",
                         {"url": URL, "model": "quasar", "api_key": "{{ gateway_api_keys[0] }}",
                          "interval": 1, "health_timeout": 30})
    shown = dict((k, v) for k, v in result.items() if k != "invocation")
    assert not shown.get("failed"), shown
    assert shown["models"] == ["quasar"] and int(shown["completion_tokens"]) >= 1, shown


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer not-a-key-of-this-lab"}])
def test_another_key_gets_the_gateways_own_401(http, headers):
    status, hdrs, body = http(URL + "/v1/models", headers=headers)
    assert status == 401 and json.loads(body) == {"error": "Unauthorized"}, (status, body)
    # HAProxy answered it (the stand-in's answers carry its Server header).
    assert "server" not in hdrs, hdrs


def test_health_needs_no_key(http):
    status, _hdrs, body = http(URL + "/health")
    assert status == 200 and body == "", (status, body)


def test_secrets_are_root_only_and_written_nowhere_in_clear(host, secret_canaries):
    sock = host.file(SOCKET)
    assert sock.is_socket and sock.user == "root" and sock.mode == 0o600, (sock.user, oct(sock.mode))
    for path in ("/etc/haproxy/labfleet-api-keys.sha256", "/etc/haproxy/labfleet-backend.env"):
        item = host.file(path)
        assert item.user == "root" and item.mode == 0o600, (path, item.user, oct(item.mode))
    texts = [host.file(CONFIG).content_string, host.file("/etc/haproxy/labfleet-api-keys.sha256").content_string,
             host.file("/etc/haproxy/labfleet-models.map").content_string]
    assert not [s for s in secret_canaries if any(s in t for t in texts)], "a secret is in the gateway's files"
    lines = host.file("/etc/haproxy/labfleet-api-keys.sha256").content_string.splitlines()
    digests = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert len(digests) == 1 and len(digests[0]) == 64, "one SHA-256 digest per key"


def test_haproxys_prometheus_exporter_answers(host, http):
    if "prometheus-exporter" not in host.check_output("haproxy -vv"):
        pytest.skip("this HAProxy build has no Prometheus exporter")
    status, _hdrs, body = http("http://127.0.0.1:8405/metrics")
    assert status == 200 and 'haproxy_server_status{proxy="model_quasar",server="rollout-second-vllm"' in body, body[:500]


def _eph_json(ephemeral_dir, name):
    path = os.path.join(ephemeral_dir, name)
    if not os.path.exists(path):
        pytest.fail("%s is missing: the side effect has not run (molecule side-effect -s site_rollout)" % path)
    with open(path) as handle:
        return json.load(handle)


def test_the_failed_upgrade_under_load_dropped_no_request(ephemeral_dir):
    """scripts/gateway-load.py streamed completions through the gateway for the whole side effect: the canary
    was drained before it changed, its smoke test failed, it was rolled back and kept out of rotation."""
    figures = _eph_json(ephemeral_dir, "load-under-rollout.json")
    with open(os.path.join(ephemeral_dir, "load-under-rollout.txt")) as handle:
        line = handle.read()
    assert figures["sent"] >= 20 and figures["failed"] == 0, (figures, line)
    assert "%d sent, 0 failed" % figures["sent"] in line


def test_the_report_shows_the_gateway_and_the_canarys_drain(ephemeral_dir):
    doc = _eph_json(ephemeral_dir, os.path.join("reports", "fleet-report.json"))
    section = doc["gateway"]
    (gateway,) = section["gateways"]
    backends = dict((b["server"], b) for b in gateway["backends"])
    assert gateway["host"] == "rollout-gateway" and gateway["state"] == "ok" and gateway["api_keys"] is True
    assert backends[CANARY]["planned"] == "out" and backends[CANARY]["admin"] == "maint", backends[CANARY]
    assert backends[SECOND]["planned"] == "ready" and backends[SECOND]["admin"] == "ready", backends[SECOND]
    # Requests served since HAProxy last (re)started: the reload that wrote the canary disabled reset them.
    assert isinstance(backends[SECOND]["requests"], int) and isinstance(backends[CANARY]["requests"], int)
    (drain,) = section["drains"]
    assert (drain["host"], drain["gateway"], drain["outcome"]) == ("rollout-canary", "rollout-gateway", "drained"), drain
    assert drain["in_flight_at_end"] == 0 and 0 <= drain["waited_s"] < 120, drain
