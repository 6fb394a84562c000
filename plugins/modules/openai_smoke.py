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
  - The API key (O(api_key)) is sent as a bearer token when set and is never returned.
  - Changes nothing on the host or the server; check mode runs the same read-only requests.
options:
  url:
    description:
      - Base URL of the server, for example C(http://10.0.0.5:8000).
    type: str
    required: true
  model:
    description:
      - The served model name that C(/v1/models) must list and the completion asks for.
    type: str
    required: true
  api_key:
    description:
      - API key of the server (vLLM's C(--api-key) or C(VLLM_API_KEY)); empty for none.
    type: str
    default: ""
  health_timeout:
    description:
      - Seconds to wait for C(/health) to answer 200. A 70B model on two V100s can take many minutes.
    type: int
    default: 1800
  interval:
    description:
      - Seconds between two health checks.
    type: float
    default: 5
  progress_interval:
    description:
      - Seconds between two progress lines while waiting.
    type: float
    default: 30
  request_timeout:
    description:
      - Seconds one request may take (the completion included).
    type: float
    default: 120
  prompt:
    description:
      - The user message of the smoke completion.
    type: str
    default: Reply with the single word ready.
  max_tokens:
    description:
      - C(max_tokens) of the smoke completion.
    type: int
    default: 16
  temperature:
    description:
      - C(temperature) of the smoke completion.
    type: float
    default: 0.7
  stream:
    description:
      - Stream the completion (server-sent events), which measures the real time to the first token.
    type: bool
    default: true
  check_metrics:
    description:
      - Also require C(GET /metrics) to answer 200 with at least one C(vllm:) metric.
    type: bool
    default: false
  container:
    description:
      - Docker container name whose state and last log line go into the progress lines; a container
        that exited ends the wait.
    type: str
  unit:
    description:
      - systemd unit that runs the container; when it restarts (C(NRestarts) grows) or fails during the
        wait, the wait ends.
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
  description: Seconds from sending the completion to the first chunk with text.
  returned: when a token came
  type: float
  sample: 0.93
latency_s:
  description: Seconds from sending the completion to its end.
  returned: when the completion was sent
  type: float
  sample: 1.71
completion_tokens:
  description: Tokens generated (the server's usage count, else the chunks that carried text).
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
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.labfleet.vllm.plugins.module_utils._openai import (
    auth_headers,
    chat_body,
    chat_completion,
    http_request,
    join_url,
    metric_names,
    model_ids,
    parse_json,
    short,
    wait_for_health,
)


def container_probe(module, unit, container, docker_bin):
    """A probe for wait_for_health: the unit's restarts and the container's state and last log line."""
    baseline = {}

    def unit_state():
        rc, out, _err = module.run_command(["systemctl", "show", "-p", "ActiveState", "-p", "SubState",
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
            rc, out, _err = module.run_command([docker_bin, "inspect", "--format",
                                                "{{.State.Status}} {{.State.ExitCode}}", container])
            if rc == 0 and out.strip():
                status, _sep, code = out.strip().partition(" ")
                if info["state"] == "unknown":
                    info["state"] = status
                    if status in ("exited", "dead"):
                        info["detail"] = "exit code %s" % code
            elif info["state"] == "unknown":
                info["state"] = "missing"
            rc, out, err = module.run_command([docker_bin, "logs", "--tail", "1", container])
            if rc == 0:
                lines = [line for line in (err or out).splitlines() if line.strip()]
                info["last_log"] = lines[-1] if lines else ""
        return info

    return probe


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            model=dict(type="str", required=True),
            api_key=dict(type="str", default="", no_log=True),
            health_timeout=dict(type="int", default=1800),
            interval=dict(type="float", default=5),
            progress_interval=dict(type="float", default=30),
            request_timeout=dict(type="float", default=120),
            prompt=dict(type="str", default="Reply with the single word ready."),
            max_tokens=dict(type="int", default=16, no_log=False),
            temperature=dict(type="float", default=0.7),
            stream=dict(type="bool", default=True),
            check_metrics=dict(type="bool", default=False),
            container=dict(type="str"),
            unit=dict(type="str"),
            docker_bin=dict(type="str", default="docker"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not p["url"].startswith(("http://", "https://")):
        module.fail_json(msg="url must start with http:// or https://, got %r" % p["url"])
    if p["health_timeout"] < 0 or p["interval"] <= 0 or p["max_tokens"] < 1:
        module.fail_json(msg="health_timeout must be >= 0, interval > 0 and max_tokens >= 1")

    headers = auth_headers(p["api_key"])
    result = {"changed": False}
    docker_bin = module.get_bin_path(p["docker_bin"]) or p["docker_bin"]
    probe = container_probe(module, p["unit"], p["container"], docker_bin) if (p["unit"] or p["container"]) else None

    def health():
        status, _body, error = http_request("GET", join_url(p["url"], "/health"), headers=headers,
                                            timeout=min(p["request_timeout"], 10))
        return status, error

    waited = wait_for_health(health, probe, timeout=p["health_timeout"], interval=p["interval"],
                             progress_every=p["progress_interval"], clock=time.monotonic, sleep=time.sleep)
    result["progress"] = waited.pop("progress")
    result["health"] = {k: waited[k] for k in ("ok", "reason", "elapsed_s", "attempts", "status")}
    if not waited["ok"]:
        last = result["progress"][-1] if result["progress"] else ""
        if waited["reason"] == "container_exited":
            detail = (waited.get("container") or {}).get("detail") or "the container exited"
            module.fail_json(msg="The server's container exited before it became healthy (%s): %s"
                             % (detail, last), **result)
        module.fail_json(msg="No healthy answer from %s/health within %d s: %s"
                         % (p["url"].rstrip("/"), p["health_timeout"], last), **result)

    status, body, error = http_request("GET", join_url(p["url"], "/v1/models"), headers=headers,
                                       timeout=p["request_timeout"])
    if status != 200:
        hint = " (the API key is wrong or missing)" if status == 401 else ""
        answer = status if status is not None else error
        module.fail_json(msg="GET /v1/models answered %s%s: %s" % (answer, hint, short(body)), **result)
    listing, error = parse_json(body)
    if error:
        module.fail_json(msg="GET /v1/models: %s" % error, **result)
    result["models"] = model_ids(listing)
    if p["model"] not in result["models"]:
        module.fail_json(msg="GET /v1/models does not list the served model name %r (it lists %s)"
                         % (p["model"], ", ".join(result["models"]) or "nothing"), **result)

    answer = chat_completion(join_url(p["url"], "/v1/chat/completions"),
                             chat_body(p["model"], p["prompt"], p["max_tokens"], p["temperature"], p["stream"]),
                             headers=headers, timeout=p["request_timeout"])
    result.update(ttft_s=answer["ttft_s"], latency_s=answer["latency_s"], completion_tokens=answer["tokens"],
                  text=answer["text"][:200], finish_reason=answer["finish_reason"])
    if answer["error"]:
        module.fail_json(msg="POST /v1/chat/completions failed: %s" % answer["error"], **result)
    if answer["tokens"] < 1:
        module.fail_json(msg="POST /v1/chat/completions answered %s but returned no tokens (finish_reason %s)"
                         % (answer["status"], answer["finish_reason"]), **result)

    if p["check_metrics"]:
        status, body, error = http_request("GET", join_url(p["url"], "/metrics"), timeout=p["request_timeout"])
        names = [name for name in metric_names(body) if name.startswith("vllm:")] if status == 200 else []
        result["metrics"] = len(names)
        if not names:
            module.fail_json(msg="GET /metrics answered %s without any vllm: metric"
                             % (status if status is not None else error), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
