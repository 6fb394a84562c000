# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the fleet report's "scrape_targets" section instead.
#
# Prometheus scrape targets of the fleet: from the fleet report's host entries, one file_sd target
# group per vLLM instance that serves. vLLM answers Prometheus text on GET /metrics of its API port
# without the API key: in 0.8.5, vllm/entrypoints/openai/api_server.py:339-343 mounts the metrics
# app beside the API routes, and the --api-key middleware (api_server.py:852) lets every path that
# does not start with /v1 through (verified in the 0.8.5 sources). An instance published on loopback (the role's safe
# default) cannot be scraped from another machine: it is listed as skipped, with what to change.
# Pure: no I/O, no Ansible.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress

from ansible_collections.labfleet.vllm.plugins.module_utils.formats._unit import is_loopback as unit_is_loopback

# Host outcomes whose instances serve (docs/fleet_report.md): deployed now, or already serving.
SERVING_OUTCOMES = ("deployed", "serving")
# Instance statuses that mean the container answered the smoke test in this run.
SERVING_STATUSES = ("deployed", "unchanged")


def _ip(address):
    """The address as an ipaddress object (text form, brackets allowed), None for a name."""
    try:
        return ipaddress.ip_address(str(address or "").strip().strip("[]"))
    except ValueError:
        return None


def is_loopback(address):
    """_unit.is_loopback (127.0.0.0/8, ::1, localhost) of a recorded address, brackets, spaces and case aside."""
    return unit_is_loopback(str(address or "").strip().strip("[]").lower())


def is_any_address(address):
    """True for an address that means every address of the host (0.0.0.0, ::), or none given."""
    if not str(address or "").strip().strip("[]"):
        return True
    ip = _ip(address)
    return ip is not None and ip.is_unspecified


def target(address, port):
    """'host:port' for Prometheus; an IPv6 literal goes in brackets."""
    text = str(address).strip().strip("[]")
    if ":" in text:
        text = "[%s]" % text
    return "%s:%d" % (text, int(port))


def _valid_port(port):
    try:
        value = int(port)
    except (TypeError, ValueError):
        return None
    if isinstance(port, bool) or not 1 <= value <= 65535:
        return None
    return value


# The exporter's name in the targets (its unit and container are called so).
DCGM_INSTANCE = "dcgm-exporter"


def _mapping(value):
    return value if isinstance(value, dict) else {}


def target_or_skip(groups, skipped, host, name, port, bind, addresses, labels, expose_fix):
    """Add one scrape target group for ``name`` on ``host`` (published on ``bind``:``port``) to
    ``groups``, or a {host, instance, reason, fix} entry to ``skipped`` when Prometheus cannot reach it."""
    port_value = _valid_port(port)
    if port_value is None:
        skipped.append({"host": host, "instance": name, "reason": "no valid port was recorded (%r)" % (port,),
                        "fix": "re-run the rollout with this collection's version, which records the port"})
        return
    if bind is None:
        skipped.append({"host": host, "instance": name,
                        "reason": "the published address was not recorded (a rollout by an older release)",
                        "fix": "re-run site.yml; the role records the address it publishes on"})
        return
    if is_loopback(bind):
        skipped.append({"host": host, "instance": name,
                        "reason": "published on %s only, so /metrics is reachable from the host itself and nowhere else" % bind,
                        "fix": "scrape it with an agent on the host (target %s), or publish it on another address (%s)"
                               % (target(bind, port_value), expose_fix)})
        return
    address = (addresses.get(host) or host) if is_any_address(bind) else bind
    merged = {"labfleet_host": host, "labfleet_instance": name}
    merged.update(labels)
    groups.append({"targets": [target(address, port_value)], "labels": merged})


def scrape_targets(entries, addresses=None):
    """The fleet's scrape targets from the report's host entries.

    ``addresses`` maps a host name to the address Prometheus reaches it at (ansible_host); it is
    used when an instance is published on every address (0.0.0.0). Returns a dict:
    ``file_sd``: the list Prometheus' file_sd_configs reads, one group per vLLM instance, labelled with
    the host, the instance and the served image digest, and one per running dcgm-exporter (instance
    dcgm-exporter, label labfleet_exporter=dcgm); ``skipped``: one entry per such target that cannot
    be scraped (host, instance, reason, fix).
    """
    addresses = addresses if isinstance(addresses, dict) else {}
    groups = []
    skipped = []
    for entry in entries or []:
        if not isinstance(entry, dict) or entry.get("outcome") not in SERVING_OUTCOMES:
            continue
        serving = _mapping(entry.get("serving"))
        host = str(entry.get("host"))
        for inst in serving.get("instances") or []:
            if not isinstance(inst, dict) or inst.get("status") not in SERVING_STATUSES:
                continue
            target_or_skip(groups, skipped, host, str(inst.get("name")), inst.get("port"), inst.get("bind_address"),
                           addresses, {"labfleet_image_digest": str(serving.get("image_digest") or "")},
                           "vllm_server_bind_address with vllm_server_expose: true")
        exporter = _mapping(_mapping(entry.get("rollout")).get("exporter"))
        if exporter.get("enabled") is True and exporter.get("status") == "running":
            target_or_skip(groups, skipped, host, DCGM_INSTANCE, exporter.get("port"), exporter.get("bind_address"),
                           addresses, {"labfleet_exporter": "dcgm"},
                           "dcgm_exporter_bind_address with dcgm_exporter_expose: true")
    return {"file_sd": groups, "skipped": skipped}
