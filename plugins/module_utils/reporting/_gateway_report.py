# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.fleet_report filter instead.
"""The fleet report's gateway section (issue 25): each gateway with its backends - the state the
plans and the rollout gave them, what HAProxy saw when the gateway was configured (in rotation or
not, requests in flight and served, 5xx answers) - the drains the rollout performed, and the figures
of an upgrade under load when a load generator measured one."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.labfleet.vllm.plugins.module_utils.reporting._metrics import target_or_skip

# The upgrade-under-load figures the report keeps (scripts/gateway-load.py writes them), and their types.
LOAD_FIELDS = (("sent", int), ("failed", int), ("cut", int), ("refused", int), ("duration_s", float),
               ("ttft_p50_s", float), ("ttft_p99_s", float), ("ttft_p50_before_s", float),
               ("ttft_p99_before_s", float), ("drain", bool), ("concurrency", int), ("url", str))


# Where a run's figures go in the section, by whether the drain was on.
LOAD_KEYS = {True: "upgrade_under_load", False: "upgrade_under_load_no_drain"}


def _mapping(value):
    return value if isinstance(value, dict) else {}


def _list(value):
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _live(servers, name):
    """HAProxy's view of server ``name`` (from the gateway's query): {admin, up, in_flight, requests, errors_5xx}."""
    rows = [row for row in servers if row.get("server") == name]
    if not rows:
        return {"admin": None, "up": None, "in_flight": None, "requests": None, "errors_5xx": None, "diagnosis": None}
    out = [_mapping(row.get("diagnosis")) for row in rows if not _mapping(row.get("diagnosis")).get("in_rotation", True)]
    return {"admin": rows[0].get("admin"), "up": all(row.get("up") is True for row in rows),
            "in_flight": sum(int(row.get("scur") or 0) for row in rows),
            "requests": sum(int(row.get("stot") or 0) for row in rows),
            "errors_5xx": sum(int(row.get("hrsp_5xx") or 0) for row in rows),
            "diagnosis": out[0] if out else None}


def _gateway(record):
    result = _mapping(record.get("result"))
    servers = _list(result.get("servers"))
    backends = []
    for backend in _list(result.get("backends")):
        item = {"model": backend.get("model"), "host": backend.get("host"), "instance": backend.get("instance"),
                "server": backend.get("name"), "address": backend.get("address"), "port": backend.get("port"),
                "planned": backend.get("state"), "why": backend.get("why")}
        item.update(_live(servers, backend.get("name")))
        backends.append(item)
    return {"host": str(record.get("host") or ""), "state": result.get("state") or "not_configured",
            "url": result.get("url"), "tls": result.get("tls") is True, "api_keys": result.get("api_keys") is True,
            "metrics": result.get("metrics"), "backends": backends, "left_out": _list(result.get("left_out")),
            "msg": result.get("msg")}


def drains(entries):
    """Every drain the rollout performed (its hosts' vllm_server_result drains, rolled-back hosts included)."""
    out = []
    for entry in entries or []:
        server = _mapping(_mapping(entry.get("rollout")).get("server"))
        for drain in _list(server.get("drains")):
            out.append({"host": entry.get("host"), "instance": drain.get("instance"), "gateway": drain.get("gateway"),
                        "outcome": drain.get("outcome"), "in_flight_at_start": drain.get("in_flight_at_start"),
                        "in_flight_at_end": drain.get("in_flight_at_end"), "waited_s": drain.get("waited_s")})
    return out


def load_figures(value):
    """The upgrade-under-load figures kept from ``value`` (known fields of the right type only), or None."""
    value = _mapping(value)
    out = {}
    for name, kind in LOAD_FIELDS:
        item = value.get(name)
        if kind is float and isinstance(item, int) and not isinstance(item, bool):
            item = float(item)
        if isinstance(item, kind) and not (kind is int and isinstance(item, bool)):
            out[name] = item
    return out or None


def load_sections(load):
    """{report key: figures} of one figures mapping or a list of them: a run with the drain on is
    ``upgrade_under_load``, one with it off ``upgrade_under_load_no_drain`` (the failures the drain prevents)."""
    out = {}
    for item in load if isinstance(load, list) else [load]:
        figures = load_figures(item)
        if figures:
            out[LOAD_KEYS[figures.get("drain", True)]] = figures
    return out


def gateway_section(records, entries, load=None):
    """The report's ``gateway`` section from the gateway hosts' records ({host, result: gateway_result,
    address}; a gateway this run did not configure has no result and is left out) and the report's host
    entries, or None when there is no gateway and no load figure."""
    gateways = sorted((_gateway(r) for r in _list(records) if isinstance(r.get("result"), dict)),
                      key=lambda g: g["host"])
    figures = load_sections(load)
    doctor = doctor_findings(records)
    if not gateways and not figures and doctor is None:
        return None
    performed = drains(entries)
    backends = [b for g in gateways for b in g["backends"]]
    section = {"gateways": gateways, "drains": performed,
               "summary": {"gateways": len(gateways), "backends": len(backends),
                           "in_rotation": len([b for b in backends if b["admin"] == "ready" and b["up"]]),
                           "drains": len(performed),
                           "drains_at_bound": len([d for d in performed if d["outcome"] == "bound_reached"])}}
    section.update(figures)
    if doctor is not None:
        section["doctor"] = doctor
    return section


def doctor_findings(records):
    """What playbooks/doctor.yml found on each gateway (its gateway_doctor_result: HAProxy's servers, each with
    its diagnosis): [{gateway, backend, server, in_rotation, status, check_status, cause, fix}], or None when no
    record carries one."""
    found = None
    for record in _list(records):
        result = record.get("doctor")
        if not isinstance(result, dict):
            continue
        found = found or []
        for row in _list(result.get("servers")):
            diagnosis = _mapping(row.get("diagnosis"))
            found.append({"gateway": str(record.get("host") or ""), "backend": row.get("backend"),
                          "server": row.get("server"), "in_rotation": diagnosis.get("in_rotation") is True,
                          "status": row.get("status"), "check_status": row.get("check_status"),
                          "cause": diagnosis.get("cause") or "", "fix": diagnosis.get("fix") or ""})
    return found


def gateway_targets(records, addresses):
    """(file_sd groups, skipped) for each configured gateway's HAProxy exporter."""
    groups, skipped = [], []
    for record in _list(records):
        result = _mapping(record.get("result"))
        metrics = _mapping(result.get("metrics_endpoint"))
        if result.get("state") != "ok" or not metrics:
            continue
        host = str(record.get("host") or "")
        target_or_skip(groups, skipped, host, "haproxy", metrics.get("port"), metrics.get("bind_address"),
                       addresses, {"labfleet_exporter": "haproxy"}, "gateway_metrics_bind_address")
    return groups, skipped


def section_damage(section):
    """What is wrong with a gateway section read back from disk, or None."""
    if section is None:
        return None
    if not isinstance(section, dict) or not isinstance(section.get("gateways"), list) \
            or not isinstance(section.get("drains"), list) or not isinstance(section.get("summary"), dict):
        return "is not a mapping with gateways, drains and summary"
    for index, gateway in enumerate(section["gateways"]):
        if not isinstance(gateway, dict) or not isinstance(gateway.get("backends"), list) \
                or not all(isinstance(b, dict) for b in gateway["backends"]):
            return "gateways[%d] has no list of backends" % index
    return None
