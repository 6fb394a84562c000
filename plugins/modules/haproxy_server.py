#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: haproxy_server
short_description: Drain a vLLM instance in the gateway, put it back in rotation, or read the gateway's servers
version_added: 0.1.0
description:
  - Talks to the HAProxy runtime API (the admin socket the labfleet.vllm.gateway role configures) on the
    gateway host. Run it there (C(delegate_to) the gateway).
  - O(state=drain) takes one vLLM instance out of rotation (HAProxy's C(drain) state - no new request,
    the ones in flight go on), then waits until its requests in flight have ended, at most O(wait_s)
    seconds. What happened is returned (RV(outcome) C(drained), or C(bound_reached) with the requests
    still in flight at the bound); the task does not fail at the bound, the caller decides.
  - O(state=ready) puts it back in rotation and waits, at most O(wait_s) seconds, until HAProxy's
    health checks see it up (RV(outcome) C(up), or C(not_up_at_bound)). O(state=maint) keeps it out.
  - O(state=query) changes nothing and returns every server of the gateway (RV(servers)) - state,
    requests in flight and served, errors - for the fleet report.
  - A gateway host without the socket (no gateway configured yet) and a server the gateway does not
    have are not failures - RV(outcome) C(no_gateway) and C(not_in_gateway); a first rollout drains
    nothing.
  - Unlike community.general.haproxy, it honours check mode, returns how long the drain took and
    what was still in flight at the bound instead of failing there.
author:
  - labfleet maintainers (@labfleet)
options:
  state:
    description:
      - V(drain), V(ready) or V(maint) set the server's administrative state; V(query) only reads.
    type: str
    choices: [drain, ready, maint, query]
    required: true
  host:
    description:
      - Inventory name of the vLLM host. With O(instance) it names the server as the gateway role does
        (C(<host>-<instance>), other characters as C(_)). Required unless O(server) or O(state=query).
    type: str
  instance:
    description:
      - The vLLM instance on O(host) (its unit and container name).
    type: str
    default: vllm
  server:
    description:
      - The HAProxy server name itself, in place of O(host) and O(instance).
    type: str
  weight:
    description:
      - With O(state=ready), the weight to set (0 to 256; the gateway role configures 100), for example to
        give a canary a smaller share of the requests.
    type: int
  share_percent:
    description:
      - With O(state=ready), give the server this share of its backend's new requests (above 0, below 100) beside
        the other servers in rotation - its weight is computed from theirs (HAProxy balances by weight) - for
        example a canary that takes 10 % of the traffic before the next batch. Not with O(weight).
    type: float
  wait_s:
    description:
      - With O(state=drain), the most seconds to wait for the requests in flight to end; with
        O(state=ready), for the health checks to see the server up. V(0) does not wait. 0 to 86400.
    type: int
    default: 0
  interval_s:
    description:
      - Seconds between two reads of the server's state while waiting, from V(0.1) to V(60).
    type: float
    default: 1.0
  socket:
    description:
      - The runtime API's UNIX socket.
    type: path
    default: /run/haproxy/admin.sock
  timeout_s:
    description:
      - Seconds one command on the socket may take, from V(1) to V(300).
    type: int
    default: 10
extends_documentation_fragment:
  - labfleet.vllm.attributes
attributes:
  check_mode:
    description: Reads the server's state and reports what would change; sends no command that changes it.
notes:
  - The socket is root only (mode 0600); run it with C(become).
"""

EXAMPLES = r"""
- name: Drain rollout-a's instance in the gateway, waiting at most 2 minutes for its requests to end
  labfleet.vllm.haproxy_server:
    state: drain
    host: rollout-a
    instance: vllm
    wait_s: 120
  delegate_to: gateway-1
  become: true
  register: drained

- name: Put it back in rotation once its smoke test passed
  labfleet.vllm.haproxy_server:
    state: ready
    host: rollout-a
    wait_s: 30
  delegate_to: gateway-1
  become: true

- name: Read every server of the gateway
  labfleet.vllm.haproxy_server:
    state: query
  become: true
  register: gateway_servers
"""

RETURN = r"""
outcome:
  description:
    - C(drained), C(bound_reached), C(would_drain) (check mode), C(up), C(not_up_at_bound), C(would_enable),
      C(maint), C(would_maint), C(query), C(no_gateway) (no socket) or C(not_in_gateway) (no such server).
  returned: always
  type: str
  sample: drained
weight:
  description: The weight set (O(weight), or the one O(share_percent) gave); null when none was set.
  returned: always
  type: int
  sample: 11
server:
  description: The HAProxy server name.
  returned: unless O(state=query)
  type: str
  sample: rollout-a-vllm
backends:
  description: The backends the server is in (one per served model).
  returned: unless O(state=query)
  type: list
  elements: str
  sample: [model_quasar]
admin_before:
  description: The server's administrative state before (ready, drain or maint; C(none) when not found).
  returned: unless O(state=query)
  type: str
  sample: ready
in_flight_at_start:
  description: Requests in flight on the server when the command was sent.
  returned: unless O(state=query)
  type: int
  sample: 3
others_in_rotation:
  description:
    - The other servers of the same backends in rotation when the command was sent. 0 when draining means no
      other server takes its model's requests meanwhile (a batch holds every server of that model); null when
      the server was not found.
  returned: unless O(state=query)
  type: int
  sample: 1
in_flight_at_end:
  description: Requests still in flight when the module returned (after the wait, or at its bound).
  returned: unless O(state=query)
  type: int
  sample: 0
waited_s:
  description: Seconds spent waiting.
  returned: unless O(state=query)
  type: float
  sample: 4.1
servers:
  description:
    - Every server of the gateway - backend, server, addr, admin (ready, drain, maint), up (its health checks pass),
      status, check_status, check_code, scur (requests in flight), stot (served), weight, hrsp_5xx, eresp, econ - and
      its diagnosis (in_rotation, and when it is not, the cause and the fix).
  returned: always
  type: list
  elements: dict
msg:
  description: What happened, in one sentence.
  returned: always
  type: str
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.labfleet.vllm.plugins.module_utils.clients._haproxy import (
    RuntimeApiError,
    all_up,
    annotate,
    ask,
    checked_name,
    in_flight,
    others_in_rotation,
    parse_servers_state,
    parse_stat,
    set_state_command,
    set_weight_command,
    share_weight,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.decisions._gateway import server_name


def read_view(module, name):
    """(every server, this server's rows) as the runtime API says now."""
    sock, timeout = module.params["socket"], module.params["timeout_s"]
    rows = parse_stat(ask(sock, "show stat", timeout))
    states = parse_servers_state(ask(sock, "show servers state", timeout))
    everyone = annotate(rows, states)
    return everyone, [row for row in everyone if row["server"] == name] if name else []


def send(module, command):
    answer = ask(module.params["socket"], command, module.params["timeout_s"]).strip()
    # The runtime API answers an accepted "set server" with an empty line; anything else is its complaint.
    if answer:
        raise RuntimeApiError("HAProxy refused %r: %s" % (command, answer[:300]))


def wait(module, name, done):
    """Poll until ``done(view)`` or wait_s; (view, everyone, seconds waited)."""
    started = time.monotonic()
    while True:
        everyone, view = read_view(module, name)
        waited = time.monotonic() - started
        if done(view) or waited >= module.params["wait_s"]:
            return view, everyone, round(waited, 2)
        time.sleep(min(module.params["interval_s"], max(0.0, module.params["wait_s"] - waited)))


def validate(module):
    params = module.params
    if not 0 <= params["wait_s"] <= 86400:
        module.fail_json(msg="wait_s must be 0 to 86400 seconds, got %d" % params["wait_s"])
    if not 0.1 <= params["interval_s"] <= 60:
        module.fail_json(msg="interval_s must be 0.1 to 60 seconds, got %r" % params["interval_s"])
    if not 1 <= params["timeout_s"] <= 300:
        module.fail_json(msg="timeout_s must be 1 to 300 seconds, got %d" % params["timeout_s"])
    share = params["share_percent"]
    if share is not None and (params["state"] != "ready" or params["weight"] is not None or not 0 < share < 100):
        module.fail_json(msg="share_percent is above 0 and below 100, only with state ready and without weight, got %r"
                             % (params["share_percent"],))
    if params["weight"] is not None and (params["state"] != "ready" or not 0 <= params["weight"] <= 256):
        module.fail_json(msg="weight is 0 to 256 and only with state ready, got %r with state %s"
                             % (params["weight"], params["state"]))
    if params["state"] != "query" and not (params["server"] or params["host"]):
        module.fail_json(msg="state %s needs the server: give host (and instance) or server" % params["state"])
    if params["server"]:
        checked_name(params["server"], "server")


def change(module, name, view):
    """Send the commands for the requested state to every backend the server is in; the result's fields."""
    state, weight = module.params["state"], module.params["weight"]
    for row in view:
        send(module, set_state_command(row["backend"], name, state))
        if weight is not None:
            send(module, set_weight_command(row["backend"], name, weight))
    if state == "drain":
        view, everyone, waited = wait(module, name, lambda v: in_flight(v) == 0)
        outcome = "drained" if in_flight(view) == 0 else "bound_reached"
    elif state == "ready":
        view, everyone, waited = wait(module, name, all_up)
        outcome = "up" if all_up(view) else "not_up_at_bound"
    else:
        everyone, view = read_view(module, name)
        waited, outcome = 0.0, "maint"
    return {"outcome": outcome, "in_flight_at_end": in_flight(view), "waited_s": waited, "servers": everyone}


def run_module(module):
    validate(module)
    params = module.params
    name = params["server"] or (server_name(params["host"], params["instance"]) if params["host"] else "")
    result = {"changed": False, "server": name, "backends": [], "admin_before": "none", "in_flight_at_start": 0,
              "in_flight_at_end": 0, "waited_s": 0.0, "servers": [], "weight": None, "others_in_rotation": None}
    if not os.path.exists(params["socket"]):
        module.exit_json(outcome="no_gateway", msg="no HAProxy runtime API at %s (the gateway is not configured on this "
                                                   "host yet): nothing to do" % params["socket"], **result)
    everyone, view = read_view(module, name)
    result["servers"] = everyone
    if params["state"] == "query":
        module.exit_json(outcome="query", msg="%d server(s) in the gateway" % len(everyone), **result)
    if not view:
        module.exit_json(outcome="not_in_gateway", msg="the gateway has no server %s (not a backend yet): nothing to do"
                                                       % name, **result)
    others = others_in_rotation(everyone, name)
    result.update(backends=[row["backend"] for row in view], admin_before=view[0]["admin"],
                  in_flight_at_start=in_flight(view), in_flight_at_end=in_flight(view), others_in_rotation=len(others))
    if params["share_percent"] is not None:
        params["weight"] = share_weight(params["share_percent"], [row["weight"] for row in others])
    wanted = params["state"]
    result["weight"] = params["weight"]
    result["changed"] = (any(row["admin"] != wanted for row in view)
                         or (params["weight"] is not None and any(row["weight"] != params["weight"] for row in view)))
    if module.check_mode:
        module.exit_json(outcome={"drain": "would_drain", "ready": "would_enable"}.get(wanted, "would_maint"),
                         msg="check mode: %s would be set to %s" % (name, wanted), **result)
    result.update(change(module, name, view))
    module.exit_json(msg="%s: %s after %s s (%d in flight at the start, %d at the end)"
                         % (name, result["outcome"], result["waited_s"], result["in_flight_at_start"],
                            result["in_flight_at_end"]), **result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", required=True, choices=["drain", "ready", "maint", "query"]),
            host=dict(type="str"),
            instance=dict(type="str", default="vllm"),
            server=dict(type="str"),
            weight=dict(type="int"),
            share_percent=dict(type="float"),
            wait_s=dict(type="int", default=0),
            interval_s=dict(type="float", default=1.0),
            socket=dict(type="path", default="/run/haproxy/admin.sock"),
            timeout_s=dict(type="int", default=10),
        ),
        supports_check_mode=True,
    )
    try:
        run_module(module)
    except RuntimeApiError as exc:
        module.fail_json(msg="haproxy_server: %s. Is HAProxy running on this host (systemctl status haproxy), and is "
                             "this the gateway role's socket?" % exc)
    except ValueError as exc:
        module.fail_json(msg="haproxy_server: %s" % exc)


if __name__ == "__main__":
    main()
