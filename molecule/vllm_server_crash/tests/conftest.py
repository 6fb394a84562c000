"""What the fault tests of this scenario share (F9, F14: docs/testing.md): waiting for a state, and
bringing the first instance back to serving after a test broke it on purpose."""

import time

import pytest


def _wait_for(what, probe, timeout=30, interval=1):
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail("%s: not within %d s (last value %r)" % (what, timeout, value))
        time.sleep(interval)


@pytest.fixture(scope="module")
def wait_for():
    """``wait_for(what, probe, timeout=30, interval=1)``: call probe() every interval seconds until it returns
    something true, and return that; fail, saying what was awaited, after timeout seconds."""
    return _wait_for


@pytest.fixture(scope="module")
def serve_again(host, call_module, default_address):
    """``serve_again()``: clear the first instance's failed state and start counter, restart it, and wait
    until it answers a completion (openai_smoke; the API key passed as the inventory variable's template)."""

    def _serve_again():
        host.check_output("systemctl reset-failed vllm.service")
        host.check_output("systemctl restart vllm.service")
        result = call_module("labfleet.vllm.openai_smoke",
                             {"url": "http://%s:8000" % default_address, "model": "quasar",
                              "api_key": "{{ vllm_server_api_key }}", "interval": 1, "health_timeout": 60})
        assert not result.get("failed"), "the first instance does not serve again: %s" % result.get("msg")

    return _serve_again
