#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: openai_smoke
short_description: Wait for an OpenAI-compatible server (vLLM) to be healthy and check that it answers a completion
version_added: 0.1.0
description:
  - Polls C(GET /health) until it answers 200, for at most O(health_timeout) seconds, and records
    progress lines (elapsed time, the answer, the container's state and its last log line).
  - Stops at once, without waiting for the timeout, when the container exited or its systemd unit
    restarted it (O(container), O(unit)).
  - Then C(GET /v1/models) must list O(model), and one short C(POST /v1/chat/completions) must
    return at least one token. Returns the time to the first token and the total latency.
  - Every request is bounded as a whole, not per socket read - O(request_timeout) covers connecting,
    the headers and the whole body or stream, so a server that trickles bytes or keep-alive comments
    cannot hold it - and the whole run ends within O(health_timeout) + 3 x O(request_timeout) + 60
    seconds (the last health probe and the container probes, each command bounded to 10 s).
  - Reads real vLLM streams as they are - HTTP/1.1 keep-alive and chunked transfer encoding, chunks
    with empty text in the middle (the detokenizer holding back an incomplete UTF-8 character), the
    last token and C(finish_reason) in one chunk - and reports error bodies in vLLM 0.8.5's flat form
    and newer releases' nested form alike.
  - The API key (O(api_key)) is sent as a bearer token when set and is never returned.
  - Changes nothing on the host or the server; check mode runs the same read-only requests.
extends_documentation_fragment:
  - labfleet.vllm.openai_client
  - labfleet.vllm.attributes
  - labfleet.vllm.attributes.read_only
options:
  health_timeout:
    description:
      - Seconds to wait for C(/health) to answer 200. A 70B model on two V100s can take many minutes.
      - A number from 0 (one health check) to 86400.
    type: raw
    default: 1800
  interval:
    description:
      - Seconds between two health checks, a number from 0.1 to 3600.
    type: raw
    default: 5
  progress_interval:
    description:
      - Seconds between two progress lines while waiting, a number from 1 to 86400. At most 200 lines
        are kept (the first and the newest).
    type: raw
    default: 30
  request_timeout:
    description:
      - Seconds one request may take in all, a number from 1 to 86400. It bounds the whole request
        (connecting, the answer's headers and its whole body or stream), not each socket read. A health
        check takes at most 10 s of it.
    type: raw
    default: 120
  prompt:
    description:
      - The user message of the smoke completion.
    type: str
    default: Reply with the single word ready.
  max_tokens:
    description:
      - C(max_tokens) of the smoke completion, an integer from 1 to 1000000 (vLLM refuses 0 with 400).
    type: raw
    default: 16
  temperature:
    description:
      - C(temperature) of the smoke completion, a number from 0 to 2.
    type: raw
    default: 0.7
  stream:
    description:
      - Stream the completion (server-sent events), which measures the real time to the first token.
    type: bool
    default: true
  check_metrics:
    description:
      - Also require C(GET /metrics) at O(url) (the same base URL, so the bind address, loopback by
        default; C(/metrics) need not be reachable from other hosts) to answer 200 with at least one
        C(vllm:) metric. Labels are read as vLLM writes them (C(model_name), C(engine), in any order).
      - No API key is sent; C(/metrics) is not behind it.
    type: bool
    default: false
  container:
    description:
      - Docker container name whose state and last log line go into the progress lines; a container
        that exited ends the wait. Letters, digits, C(_), C(.) and C(-), starting with a letter or digit
        (Docker's rule).
    type: str
  unit:
    description:
      - systemd unit that runs the container; when it restarts (C(NRestarts) grows) or fails during the
        wait, the wait ends. A unit name such as C(vllm.service) or C(vllm@a.service), not starting with C(-).
    type: str
  docker_bin:
    description:
      - The docker client used to read the container's state and logs.
    type: str
    default: docker
author:
  - labfleet contributors (@labfleet)
notes:
  - C(/health) and C(/metrics) are not behind vLLM's API key; C(/v1/*) are.
  - A number option that is not a finite number in its range (C(nan), C(inf), a huge integer, a
    negative or zero timeout) fails at once with a message that names the option and the range.
"""

EXAMPLES = r"""
- name: Wait for vLLM and send one completion
  labfleet.vllm.openai_smoke:
    url: "http://{{ ansible_facts['default_ipv4']['address'] }}:8000"
    model: quasar
    api_key: "{{ vllm_server_api_key }}"
    container: vllm
    unit: vllm.service
    health_timeout: 3600
  register: smoke

- name: Show the latency
  ansible.builtin.debug:
    msg: "first token after {{ smoke.ttft_s }} s, {{ smoke.completion_tokens }} tokens in {{ smoke.latency_s }} s"
"""

RETURN = r"""
health:
  description: How the wait for C(/health) went.
  returned: always
  type: dict
  sample: {"ok": true, "reason": "healthy", "elapsed_s": 42.1, "attempts": 9, "status": 200}
progress:
  description: Progress lines of the wait (elapsed time, answer, container state, last log line).
  returned: always
  type: list
  elements: str
  sample: ["elapsed 0 s; /health: cannot reach http://10.0.0.5:8000/health: [Errno 111] Connection refused; container running"]
models:
  description: The model ids C(/v1/models) listed.
  returned: when the server became healthy
  type: list
  elements: str
  sample: ["quasar"]
ttft_s:
  description: Seconds from sending the completion to the first chunk with non-empty text (the role chunk
    and chunks whose text the server held back are skipped).
  returned: when a token came
  type: float
  sample: 0.93
latency_s:
  description: Seconds from sending the completion to its end.
  returned: when the completion was sent
  type: float
  sample: 1.71
completion_tokens:
  description: Tokens generated (the server's usage count, else the chunks that carried non-empty text).
  returned: when the completion was sent
  type: int
  sample: 16
text:
  description: The start of the generated text (200 characters at most).
  returned: when the completion was sent
  type: str
finish_reason:
  description: The completion's finish reason.
  returned: when the completion was sent
  type: str
  sample: length
metrics:
  description: Number of C(vllm:) metric names on C(/metrics).
  returned: when O(check_metrics=true)
  type: int
  sample: 24
metrics_models:
  description: The C(model_name) label values of the C(vllm:) metrics.
  returned: when O(check_metrics=true)
  type: list
  elements: str
  sample: ["quasar"]
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.labfleet.vllm.plugins.module_utils.clients._openai import (
    Deadline,
    auth_headers,
    chat_body,
    chat_completion,
    check_client_options,
    checked_params,
    client_argument_spec,
    check_name,
    error_message,
    http_request,
    join_url,
    metric_samples,
    model_ids,
    parse_json,
    short,
    wait_for_health,
)

# The clock and the sleep of the health wait and of the run's overall deadline (unit tests run the
# module on a virtual clock; each request's own timeout is kept by _openai's watchdog in real time).
CLOCK = time.monotonic
SLEEP = time.sleep
# Seconds one docker or systemctl command of the container probe may take (coreutils timeout).
COMMAND_TIMEOUT = 10
# Seconds one health check may take (less when request_timeout is smaller).
HEALTH_CHECK_TIMEOUT = 10
# Seconds the whole run may take beyond health_timeout + 3 x request_timeout: the last health
# check (10 s) and the container probe of the last attempt (3 commands of at most 10 s + 2 s).
RUN_SLACK = 60
# Number options: (name, lowest, highest, integer), all required. Ansible's own int/float conversion is not used
# (type raw): it raises OverflowError on inf or 10**400 instead of failing (ansible-core 2.19,
# module_utils/common/validation.py check_type_int/check_type_float; verified here).
NUMBER_OPTIONS = (
    ("health_timeout", 0, 86400, False),
    ("interval", 0.1, 3600, False),
    ("progress_interval", 1, 86400, False),
    ("request_timeout", 1, 86400, False),
    ("max_tokens", 1, 1000000, True),
    ("temperature", 0, 2, False),
)
# Docker's container names (moby daemon/names/names.go RestrictedNameChars, v28.3.0; third_party)
# and IDs; systemd unit names (letters, digits, ":-_.\" and "@" for instances, systemd.unit(5);
# inferred). Neither may start with "-", which the commands would read as an option.
CONTAINER_NAME = r"/?[A-Za-z0-9][A-Za-z0-9_.-]*"
UNIT_NAME = r"[A-Za-z0-9:_.@\\][A-Za-z0-9:_.@\\-]*"


def run_bounded(module, argv, **kwargs):
    """run_command, ended after COMMAND_TIMEOUT seconds when coreutils' timeout is there."""
    wrapper = module.get_bin_path("timeout")
    if wrapper:
        argv = [wrapper, "-k", "2", str(COMMAND_TIMEOUT)] + list(argv)
    return module.run_command(argv, **kwargs)


def container_probe(module, unit, container, docker_bin):
    """A probe for wait_for_health: the unit's restarts and the container's state and last log line."""
    baseline = {}

    def unit_state():
        rc, out, _err = run_bounded(module, ["systemctl", "show", "-p", "ActiveState", "-p", "SubState",
                                             "-p", "NRestarts", unit], environ_update={"LC_ALL": "C"})
        if rc != 0:
            return {}
        values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        return values

    if unit:
        baseline.update(unit_state())

    def probe():
        info = {"state": "unknown", "detail": "", "last_log": ""}
        if unit:
            now = unit_state()
            restarts, first = now.get("NRestarts", ""), baseline.get("NRestarts", "")
            if now.get("ActiveState") == "failed":
                info.update(state="failed", detail="unit %s failed" % unit)
                return info
            if restarts.isdigit() and first.isdigit() and int(restarts) > int(first):
                info.update(state="restarted", detail="unit %s restarted it %d time(s) during the wait"
                            % (unit, int(restarts) - int(first)))
            elif now.get("SubState") == "auto-restart":
                info.update(state="restarted", detail="unit %s is waiting to restart it" % unit)
        if container:
            rc, out, _err = run_bounded(module, [docker_bin, "inspect", "--format",
                                                 "{{.State.Status}} {{.State.ExitCode}}", container])
            if rc == 0 and out.strip():
                status, _sep, code = out.strip().partition(" ")
                if info["state"] == "unknown":
                    info["state"] = short(status, 40)
                    if status in ("exited", "dead"):
                        info["detail"] = "exit code %s" % short(code, 20)
            elif info["state"] == "unknown":
                info["state"] = "missing"
            rc, out, err = run_bounded(module, [docker_bin, "logs", "--tail", "1", container])
            if rc == 0:
                lines = [line for line in (err or out).splitlines() if line.strip()]
                info["last_log"] = lines[-1] if lines else ""
        return info

    return probe


def check_params(p):
    """Convert the number options in place; the first problem as a message, or None."""
    error = check_client_options(p, NUMBER_OPTIONS)
    if error:
        return error
    error = check_name("container", p["container"], CONTAINER_NAME,
                       "a Docker container name or ID (letters, digits, _ . -; not starting with -)")
    if error:
        return error
    return check_name("unit", p["unit"], UNIT_NAME, "a systemd unit name such as vllm.service (not starting with -)")


def main():
    module = AnsibleModule(
        argument_spec=client_argument_spec(
            health_timeout=dict(type="raw", default=1800),
            interval=dict(type="raw", default=5),
            progress_interval=dict(type="raw", default=30),
            request_timeout=dict(type="raw", default=120),
            prompt=dict(type="str", default="Reply with the single word ready."),
            max_tokens=dict(type="raw", default=16, no_log=False),
            temperature=dict(type="raw", default=0.7),
            stream=dict(type="bool", default=True),
            check_metrics=dict(type="bool", default=False),
            container=dict(type="str"),
            unit=dict(type="str"),
            docker_bin=dict(type="str", default="docker"),
        ),
        supports_check_mode=True,
    )
    p = checked_params(module, check_params)

    base = p["url"].rstrip("/")
    clock, sleep = CLOCK, SLEEP
    budget = p["health_timeout"] + 3 * p["request_timeout"] + RUN_SLACK
    run = Deadline(budget, clock)
    headers = auth_headers(p["api_key"])
    result = {"changed": False}
    docker_bin = module.get_bin_path(p["docker_bin"]) or p["docker_bin"]
    probe = container_probe(module, p["unit"], p["container"], docker_bin) if (p["unit"] or p["container"]) else None

    def slow(timed_out):
        return ("; raise request_timeout (now %g s) if the server is only slow" % p["request_timeout"]
                if timed_out else "")

    def request_time(step):
        """request_timeout, or less when the run's overall deadline is nearer."""
        left = run.remaining()
        if left < 0.5:
            module.fail_json(msg="The smoke test of %s used up its overall time (%g s = health_timeout %g + 3 x "
                                 "request_timeout %g + %d) before %s; raise health_timeout or request_timeout"
                                 % (base, budget, p["health_timeout"], p["request_timeout"], RUN_SLACK, step),
                             **result)
        return min(p["request_timeout"], left)

    def health():
        status, _body, error = http_request("GET", join_url(base, "/health"), headers=headers,
                                            timeout=min(p["request_timeout"], HEALTH_CHECK_TIMEOUT))
        return status, error

    waited = wait_for_health(health, probe, timeout=p["health_timeout"], interval=p["interval"],
                             progress_every=p["progress_interval"], clock=clock, sleep=sleep)
    result["progress"] = waited.pop("progress")
    result["health"] = {k: waited[k] for k in ("ok", "reason", "elapsed_s", "attempts", "status")}
    if not waited["ok"]:
        last = result["progress"][-1] if result["progress"] else ""
        if waited["reason"] == "container_exited":
            detail = (waited.get("container") or {}).get("detail") or "the container exited"
            module.fail_json(msg="The server's container exited before it became healthy (%s): %s"
                             % (detail, last), **result)
        module.fail_json(msg="No healthy answer from %s/health within %g s (health_timeout): %s"
                         % (base, p["health_timeout"], last), **result)

    seconds = request_time("GET /v1/models")
    status, body, error = http_request("GET", join_url(base, "/v1/models"), headers=headers, timeout=seconds)
    if status != 200:
        hint = " (the API key is wrong or missing)" if status == 401 else ""
        answer = "HTTP %s: %s" % (status, error_message(body)) if status is not None else error
        timed_out = status is None and error.startswith("no complete answer")
        module.fail_json(msg="GET %s/v1/models failed%s: %s%s" % (base, hint, answer, slow(timed_out)), **result)
    listing, error = parse_json(body)
    if error:
        module.fail_json(msg="GET %s/v1/models: %s" % (base, error), **result)
    result["models"] = model_ids(listing)
    if p["model"] not in result["models"]:
        module.fail_json(msg="GET /v1/models does not list the served model name %r (it lists %s)"
                         % (p["model"], ", ".join(result["models"]) or "nothing"), **result)

    seconds = request_time("POST /v1/chat/completions")
    answer = chat_completion(join_url(base, "/v1/chat/completions"),
                             chat_body(p["model"], p["prompt"], p["max_tokens"], p["temperature"], p["stream"]),
                             headers=headers, timeout=seconds)
    result.update(ttft_s=answer["ttft_s"], latency_s=answer["latency_s"], completion_tokens=answer["tokens"],
                  text=answer["text"][:200], finish_reason=answer["finish_reason"])
    if answer["error"]:
        module.fail_json(msg="POST %s/v1/chat/completions failed: %s%s"
                         % (base, answer["error"], slow(answer["timed_out"])), **result)
    if answer["tokens"] < 1:
        module.fail_json(msg="POST /v1/chat/completions answered %s but returned no tokens (finish_reason %s)"
                         % (answer["status"], answer["finish_reason"]), **result)

    if p["check_metrics"]:
        # Same base URL as the rest (the bind address), no API key: /metrics is not behind it.
        seconds = request_time("GET /metrics")
        status, body, error = http_request("GET", join_url(base, "/metrics"), timeout=seconds)
        samples = [(name, labels) for name, labels in metric_samples(body) if name.startswith("vllm:")] \
            if status == 200 else []
        result["metrics"] = len(set(name for name, _labels in samples))
        result["metrics_models"] = sorted(set(labels["model_name"] for _name, labels in samples
                                              if labels.get("model_name")))
        if not samples:
            answer = "HTTP %s" % status if status is not None else error
            timed_out = status is None and error.startswith("no complete answer")
            module.fail_json(msg="GET %s/metrics answered %s without any vllm: metric%s"
                             % (base, answer, slow(timed_out)), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
