# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.gateway_backends filter instead.
"""The gateway's backends, from the plans: which vLLM instance of which host serves which model, at
which address, and whether it may take requests now.

The plans (each host's ``preflight_verdict``) say which hosts serve and with which instances; the
rollout of this run (``labfleet_rollout``) says which of them passed their smoke test. Nothing here
is a second list of hosts: a host that is not in the plans is not a backend.

Readiness (issue 25): an instance is put in rotation only after the rollout's smoke test passed on
it, because vLLM's /health can answer before a completion works. So:

- rollout state ``ok`` (every role, the smoke test included, passed on the host): ``ready``;
- ``failed`` (rolled back, or failed at a step): ``out``, with the step and message, until a later
  rollout passes on it;
- ``not_reached`` (a stopped rollout left the host untouched): ``ready``, serving what it served
  before; the gateway's health checks still judge it;
- no rollout in this run (the gateway's playbook run alone): ``ready``, the health checks judge it.

Addresses: the address the instance is published on (what the vllm_server role recorded this run,
else the instance's ``bind_address`` in the plan, else the host's address from its facts; a host
whose address is not known is left out, with why). An instance published
on loopback only is reachable from a gateway on the same host only; from any other it is left out,
with the variables to set.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import re

_NAME_RE = re.compile(r"[^A-Za-z0-9_.-]+")
_LOOPBACK_RE = re.compile(r"^(127\.|::1$|localhost$)")
DEFAULT_PORT = 8000


class GatewayInputError(ValueError):
    """An input the backend list cannot be made from (the message says which and what to give)."""


def server_name(host, instance):
    """The HAProxy server name of a host's instance: ``<host>-<instance>``, other characters as ``_``."""
    return _NAME_RE.sub("_", "%s-%s" % (host, instance))


def backend_name(model):
    """The HAProxy backend of a served model name: ``model_<name>``, other characters as ``_``."""
    return "model_" + _NAME_RE.sub("_", str(model))


def _mapping(value, where):
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise GatewayInputError("%s: expected a mapping, got %s" % (where, type(value).__name__))
    return value


def _port(value, where):
    if value in (None, ""):
        return DEFAULT_PORT
    if isinstance(value, bool):
        raise GatewayInputError("%s: expected a port number, got %r" % (where, value))
    try:
        port = int(str(value).strip())
    except ValueError:
        raise GatewayInputError("%s: expected a port number, got %r" % (where, value))
    if not 1 <= port <= 65535:
        raise GatewayInputError("%s: a port is 1 to 65535, got %d" % (where, port))
    return port


def readiness(rollout):
    """(state, why) of a host's instances from its rollout record (see the module's docstring)."""
    rollout = rollout or {}
    state = rollout.get("state")
    if state == "ok":
        return "ready", "the rollout's smoke test passed (batch %s)" % rollout.get("batch", "?")
    if state == "failed":
        return "out", "the rollout failed at step %s: %s" % (rollout.get("step") or "?", str(rollout.get("msg") or "")[:200])
    if state == "not_reached":
        return "ready", "not reached by this rollout (it stopped before); it serves what it served, health checks judge it"
    if state in (None, ""):
        return "ready", "no rollout in this run; the health checks judge it"
    return "out", "the rollout did not finish on this host (state %s)" % state


def _recorded(server, name):
    """What the vllm_server role recorded for the instance this run ({port, bind_address}), else {}."""
    for item in _mapping(server, "server").get("instances") or []:
        if isinstance(item, dict) and item.get("name") == name:
            return item
    return {}


def _unspecified(bind):
    """True for an empty bind address or an unspecified one (every address of the host)."""
    if not bind:
        return True
    try:
        return ipaddress.ip_address(bind).is_unspecified
    except ValueError:
        return False


def _address(bind, host_address):
    """The address to reach an instance published on ``bind``: the bind address, or the host's for a wildcard."""
    bind = "" if bind is None else str(bind).strip()
    return host_address if _unspecified(bind) else bind


def host_backends(entry, gateway_host=None):
    """(backends, left_out) of one host: ``entry`` is {host, verdict, rollout, server, address, bind_default,
    group (the host group's plan, labfleet_group_verdict, when the host is a member of one)}."""
    entry = _mapping(entry, "host entry")
    host = str(entry.get("host") or "")
    if not host:
        raise GatewayInputError("host entry: no host name (give each entry's inventory_hostname as host)")
    verdict = _mapping(entry.get("verdict"), "%s: verdict" % host)
    if not verdict:
        return [], [{"host": host, "why": "no plan (run the preflight in the same run: site.yml does)"}]
    group = _mapping(entry.get("group"), "%s: group" % host)
    if group:
        # A host group (issue 27) serves through its leader's instances only; the group's plan decides.
        if not group.get("allowed"):
            return [], [{"host": host, "why": "a member of host group %s, which the preflight refused"
                         % (group.get("name") or "?")}]
        if str(group.get("leader") or "") != host:
            return [], [{"host": host, "why": "a member of host group %s: it serves through the group's leader %s"
                         % (group.get("name") or "?", group.get("leader") or "?")}]
    elif not verdict.get("allowed"):
        codes = ", ".join(r.get("code", "?") for r in verdict.get("reasons") or [] if isinstance(r, dict))
        return [], [{"host": host, "why": "refused by the preflight%s" % (" (%s)" % codes if codes else "")}]
    state, why = readiness(_mapping(entry.get("rollout"), "%s: rollout" % host))
    host_address = str(entry.get("address") or "")
    backends, left_out = [], []
    for index, inst in enumerate(verdict.get("instances") or []):
        inst = _mapping(inst, "%s: verdict.instances[%d]" % (host, index))
        name = str(inst.get("name") or "vllm")
        recorded = _recorded(entry.get("server"), name)
        bind = recorded.get("bind_address", inst.get("bind_address", entry.get("bind_default")))
        address = _address(bind, host_address)
        if not address:
            left_out.append({"host": host, "instance": name,
                             "why": "its address is unknown: the rollout did not record one in this run and its "
                                    "network facts could not be read (is it down or unreachable?)"})
            continue
        if _LOOPBACK_RE.match(address) and host != gateway_host:
            left_out.append({"host": host, "instance": name,
                             "why": "published on loopback (%s) only, which the gateway on %s cannot reach: set "
                                    "vllm_server_bind_address to the host's private address and vllm_server_expose: "
                                    "true" % (address, gateway_host or "another host")})
            continue
        backends.append({
            "name": server_name(host, name), "host": host, "instance": name, "address": address,
            "port": _port(recorded.get("port", inst.get("port")), "%s: instance %s port" % (host, name)),
            "model": str(inst.get("served_model_name") or _mapping(verdict.get("deployment"), "deployment").get(
                "served_model_name") or name),
            "state": state, "why": why,
        })
    return backends, left_out


def plan_backends(entries, gateway_host=None):
    """The gateway's view of the fleet: {backends, models, left_out}.

    ``models`` maps each served model name to its HAProxy backend and server names (a request is routed
    by the ``model`` of its body; a model served nowhere gets no backend). Hosts in inventory order.
    """
    if not isinstance(entries, (list, tuple)):
        raise GatewayInputError("expected a list of host entries, got %s" % type(entries).__name__)
    backends, left_out = [], []
    for entry in entries:
        more, out = host_backends(entry, gateway_host)
        backends.extend(more)
        left_out.extend(out)
    seen = set()
    for item in backends:
        if item["name"] in seen:
            raise GatewayInputError("two instances make the same HAProxy server name %s: rename one instance" % item["name"])
        seen.add(item["name"])
    models = {}
    for item in backends:
        model = models.setdefault(item["model"], {"backend": backend_name(item["model"]), "servers": []})
        model["servers"].append(item["name"])
    return {"backends": backends, "models": models, "left_out": left_out}
