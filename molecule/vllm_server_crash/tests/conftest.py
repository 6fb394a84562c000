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
def unit_property(host):
    """``unit_property(prop, unit="vllm.service")``: a property of the unit as ``systemctl show`` gives it."""

    def _property(prop, unit="vllm.service"):
        return host.check_output("systemctl show --property %s --value %s", prop, unit)

    return _property


@pytest.fixture(scope="module")
def smoke(call_module):
    """``smoke(url, model, **extra)``: wait for the server at url to be healthy, list model and return a
    token (openai_smoke, with ``extra`` as its further arguments); fails the test otherwise; returns the result."""

    def _smoke(url, model, **extra):
        # openai_smoke is the collection's own module (the same health wait, model list and streamed
        # completion the role runs after a deployment), so it runs on the host through Ansible. The API key
        # is passed as a template of the inventory variable: its value never enters this process, a command
        # line or a message (the module returns it masked).
        args = {"url": url, "model": model, "api_key": "{{ vllm_server_api_key }}", "interval": 1}
        args.update(extra)
        result = call_module("labfleet.vllm.openai_smoke", args)
        shown = dict((key, value) for key, value in result.items() if key != "invocation")
        assert not shown.get("failed"), "openai_smoke %s (%s): %s" % (url, model, shown)
        assert int(shown["completion_tokens"]) >= 1, shown
        return result

    return _smoke


@pytest.fixture(scope="module")
def serve_again(host, smoke, default_address):
    """``serve_again()``: clear the first instance's failed state and start counter, restart it, and wait
    until it answers a completion."""

    def _serve_again():
        host.check_output("systemctl reset-failed vllm.service")
        host.check_output("systemctl restart vllm.service")
        smoke("http://%s:8000" % default_address, "quasar", health_timeout=60)

    return _serve_again
