# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.fleet_report filter instead.
#
# The fleet report: from one record per host (what the preflight found and planned, what each
# rollout role recorded, how far the rolling rollout got, whether the host was still in the play)
# build_report() works out each host's OUTCOME, one word, and the report document the
# fleet_report role writes as JSON and renders as Markdown and HTML. Pure: no I/O, no Ansible.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import re

from ansible_collections.labfleet.vllm.plugins.module_utils.reporting._gateway_report import (
    LOAD_KEYS,
    gateway_section,
    gateway_targets,
    section_damage as gateway_damage,
)
from ansible_collections.labfleet.vllm.plugins.module_utils.reporting._metrics import scrape_targets

REPORT_FORMAT = 2

MODES = ("rollout", "preflight")

# Every outcome word, in the order the rules are tried (the first that applies wins), with its
# meaning. docs/fleet_report.md and the HTML legend show this table.
OUTCOMES = (
    ("unreachable", "the host went unreachable or failed without rescue during the run, before the end"),
    ("no_data", "the host is in the play but has no preflight result (the preflight did not run on it)"),
    ("refused", "the preflight refused the host (reason codes); nothing was changed on it"),
    ("planned", "allowed, but nothing was rolled out to it by this run (a preflight-only run, or a probe-only host)"),
    ("rolled_back", "the vLLM server failed its start or smoke test and the previous version was put back"),
    ("failed", "a rollout step failed on the host (driver, runtime or server) and nothing was rolled back"),
    ("pending_reboot", "the NVIDIA driver is installed, the host needs a reboot to load it"),
    ("not_reached", "the rollout stopped (failures in an earlier batch) before this host's batch"),
    ("deployed", "the vLLM server was (re)deployed by this run and answers a real completion"),
    ("serving", "already at the target: nothing changed, the vLLM server answers a real completion"),
    ("check_mode", "check mode: the rollout was only simulated"),
    ("unknown", "the records do not say what happened (the detail names what is missing)"),
)
OUTCOME_NAMES = tuple(name for name, _meaning in OUTCOMES)

_NO_PREFLIGHT_MSG = "No probe result: the host was unreachable or failed before the probe ran."


def _mapping(value):
    return value if isinstance(value, dict) else None


def _number(value):
    """A finite float from an int, float or numeric string of ASCII digits; None for anything else
    (bool, NaN, infinities, other scripts' digits and "1_000" included)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        if not re.match(r"^\s*[+-]?(?:[0-9]{1,19}(?:\.[0-9]{0,19})?|\.[0-9]{1,19})(?:[eE][+-]?[0-9]{1,3})?\s*\Z",
                        value, re.ASCII):
            return None
    elif isinstance(value, int) and abs(value) >= 10 ** 300:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def tokens_per_s(completion_tokens, latency_s):
    """End-to-end output rate of one smoke-test request: completion_tokens / latency_s.

    latency_s is the whole request (time to first token included), so this is what a client sees,
    not the decode rate. None when either figure is missing or not a number, when latency_s is not
    positive or completion_tokens is negative; 0.0 for a request that produced no token.
    Rounded to two decimals.
    """
    tokens = _number(completion_tokens)
    latency = _number(latency_s)
    if tokens is None or latency is None or latency <= 0 or tokens < 0:
        return None
    return round(tokens / latency, 2)


def flags(argv):
    """The instance's effective vLLM flags as one string (argv joined by spaces)."""
    if isinstance(argv, (list, tuple)):
        return " ".join(str(a) for a in argv)
    if argv is None:
        return ""
    return str(argv)


def _codes(items):
    out = []
    for item in items or []:
        if isinstance(item, dict) and item.get("code"):
            out.append(str(item["code"]))
        elif isinstance(item, str) and item:
            out.append(item)
    return out


def _text(value):
    return "" if value is None else str(value).strip()


def _sentence(*parts):
    """Join non-empty parts into one sentence that ends with a full stop."""
    text = " ".join(p.strip() for p in parts if p and p.strip())
    if text and text[-1] not in ".!?":
        text += "."
    return text


def _instances(server):
    out = []
    for inst in (server or {}).get("instances") or []:
        if not isinstance(inst, dict):
            continue
        out.append({
            "name": inst.get("name"),
            "port": inst.get("port"),
            "bind_address": inst.get("bind_address"),
            "status": inst.get("status"),
            "flags": flags(inst.get("argv")),
            "health_s": inst.get("health_s"),
            "ttft_s": inst.get("ttft_s"),
            "completion_tokens": inst.get("completion_tokens"),
            "latency_s": inst.get("latency_s"),
            "tokens_per_s": tokens_per_s(inst.get("completion_tokens"), inst.get("latency_s")),
        })
    return out


def _error_percent(error):
    """"7.9%" from an expected_error / measured error mapping's rel_rms (a fraction), or None."""
    rms = _number((error or {}).get("rel_rms")) if isinstance(error, dict) else None
    return None if rms is None else "%.1f%%" % (rms * 100)


def _group_and_bits(repack):
    """["group size 64", "~4.3 bits per weight"] from a repack plan or copy record (numbers only)."""
    parts = []
    group = _number(repack.get("group_size"))
    if group is not None:
        parts.append("group size %d" % group)
    bits = _number(repack.get("bits_per_weight"))
    if bits is not None:
        parts.append("~%.1f bits per weight" % bits)
    return parts


def serving_label(path, repack):
    """How the report names a serving path: gptq_repack with the plan's group size, bits per weight
    and expected error ("gptq_repack (group size 64, ~4.3 bits per weight, expected error 7.9%)");
    any other path as it is."""
    if path != "gptq_repack" or not isinstance(repack, dict):
        return path
    parts = _group_and_bits(repack)
    error = _error_percent(repack.get("expected_error"))
    parts.append("expected error %s" % error if error else "expected error not measured yet")
    return "%s (%s)" % (path, ", ".join(parts))


def gptq_copy_detail(copy):
    """The report's line about the GPTQ copy a server serves (after "GPTQ copy served: ")."""
    copy = _mapping(copy) or {}
    parts = ["made by this run" if _text(copy.get("changed")).lower() == "true" else "kept from an earlier run"]
    parts.extend(_group_and_bits(copy))
    size = _number(copy.get("output_bytes"))
    if size is None:
        size = _number(copy.get("planned_bytes"))
    if size is not None:
        parts.append("%d bytes" % size)
    expected = copy.get("expected_error") if isinstance(copy.get("expected_error"), dict) else {}
    error = _error_percent(expected)
    parts.append("expected error %s (%s)" % (error, _text(expected.get("source")) or "no source")
                 if error else "expected error not measured yet")
    measured = _error_percent(copy.get("measured_error"))
    if measured:
        parts.append("measured %s" % measured)
    return "%s of the NVFP4 checkpoint %s (%s), served with --quantization gptq" % (
        _text(copy.get("path")) or "?", _text(copy.get("source")) or "?", ", ".join(parts))


def _serving(server):
    gptq = _mapping(server.get("gptq_copy"))
    return {
        "image": server.get("image"),
        "image_digest": server.get("image_digest"),
        "model_path": server.get("model_path"),
        "serving_path": server.get("serving_path"),
        "served_model_path": server.get("served_model_path") or server.get("model_path"),
        "fp16_copy": _mapping(server.get("fp16_copy")),
        "gptq_copy": gptq,
        "gptq_copy_detail": gptq_copy_detail(gptq) if gptq else None,
        "instances": _instances(server),
    }


def _journal_tail(server):
    tail = server.get("journal_tail")
    if isinstance(tail, (list, tuple)):
        return [str(line) for line in tail]
    if isinstance(tail, str) and tail:
        return tail.splitlines()
    return []


def _failure(step, msg, server, rollout):
    server = server or {}
    return {
        "step": step,
        "msg": msg,
        "failed_instance": server.get("failed_instance"),
        "failed_task": server.get("failed_task") or rollout.get("task"),
        "image": server.get("image"),
        "image_digest": server.get("image_digest"),
        "restored_image": server.get("restored_image"),
        "journal_tail": _journal_tail(server),
    }


# The layout of the plan (deploy_gate's verdict, decisions/_plan.py PLAN_FORMAT) this report reads.
PLAN_FORMAT = 1


def _unique(values):
    """The values in their first order, each once; None and empty values left out."""
    out = []
    for value in values:
        if value not in (None, "", []) and value not in out:
            out.append(value)
    return out


def _target_text(target):
    """One line for the plan's target state: driver, image (digest), model."""
    target = _mapping(target) or {}
    parts = []
    if target.get("driver_version"):
        parts.append("driver %s" % _text(target.get("driver_version")))
    if target.get("image"):
        parts.append("image %s%s" % (_text(target.get("image")),
                                     " @ " + _text(target.get("image_digest")) if target.get("image_digest") else ""))
    if target.get("model_path"):
        parts.append("model %s" % _text(target.get("model_path")))
    return ", ".join(parts)


def _replanned_text(plan, previous):
    """What the re-check changed: which inputs differed and how the verdict went; "" when not re-planned."""
    previous = _mapping(previous)
    if previous is None:
        return ""
    old_from = _mapping(previous.get("made_from")) or {}
    new_from = _mapping(plan.get("made_from")) or {}
    changed = [key for key in sorted(set(old_from) | set(new_from)) if old_from.get(key) != new_from.get(key)]
    before = "allowed" if previous.get("allowed") else "refused"
    after = "allowed" if plan.get("allowed") else "refused"
    return "planned again during the rollout (%s differed from the preflight's); %s before, %s now" % (
        ", ".join(changed) or "nothing", before, after)


def model_store_view(record):
    """The plan's model store (preflight_verdict.model_store), without the disk figures that move between runs:
    {url, name, revision, manifest_sha256, fetch {revision, dest, bytes}, text}, or None without a store."""
    record = _mapping(record)
    if not record or not record.get("url"):
        return None
    fetch = _mapping(record.get("fetch")) or {}
    view = {key: record.get(key) for key in ("url", "name", "revision", "manifest_sha256")}
    view["fetch"] = {key: fetch.get(key) for key in ("revision", "dest", "bytes")} if fetch else None
    what = "%s/%s" % (_text(record.get("name")), _text(record.get("revision")))
    if fetch and fetch.get("revision") not in (None, record.get("revision")):
        what += ", its copy %s" % _text(fetch.get("revision"))
    size = _number(fetch.get("bytes")) if fetch else None
    where = ": %.2f GB into %s" % (size / 1e9, _text(fetch.get("dest"))) if size is not None else ""
    view["text"] = _sentence("%s from %s%s" % (what, _text(record.get("url")), where))
    return view


def preflight_view(parts, host):
    """The report's view of one host's preflight, made from what the preflight left: ``plan`` (the
    plan, the fact preflight_verdict), ``nvidia`` and ``host`` (the probes' facts, ansible_facts
    nvidia and labfleet_host) and ``probe_only``. It holds only what stays put between runs (no free
    memory or disk figures), so that writing the report is a change only when the fleet changed.
    A plan of another layout (plan_format) is not read: the view says so and carries no verdict."""
    parts = _mapping(parts) or {}
    plan = _mapping(parts.get("plan")) or {}
    nvidia = _mapping(parts.get("nvidia")) or {}
    facts = _mapping(parts.get("host")) or {}
    gpus = [g for g in (nvidia.get("gpus") or []) if isinstance(g, dict)]
    serving = _mapping(plan.get("serving")) or {}
    deployment = _mapping(plan.get("deployment")) or {}
    plan_format = plan.get("plan_format")
    readable = plan_format in (None, PLAN_FORMAT)
    view = {
        "host": host,
        "state": nvidia.get("state"),
        "msg": nvidia.get("msg"),
        "present": nvidia.get("present"),
        "backend": nvidia.get("backend"),
        "gpu_count": len(gpus),
        "lost_gpus": nvidia.get("lost_gpus") or [],
        "gpu_models": _unique(g.get("name") for g in gpus),
        "compute_capabilities": _unique(g.get("compute_capability") for g in gpus),
        "architectures": _unique(g.get("architecture") for g in gpus),
        "vram_mib": [g["memory_total_mib"] for g in gpus if g.get("memory_total_mib")],
        "driver_version": nvidia.get("driver_version"),
        "cuda_driver_version": nvidia.get("cuda_driver_version"),
        "kernel_module_version": nvidia.get("kernel_module_version"),
        "driver_library_mismatch": nvidia.get("driver_library_mismatch"),
        "nvlink": nvidia.get("nvlink"),
        "cpu_isa": (_mapping(facts.get("cpu")) or {}).get("isa"),
        "container": facts.get("container"),
        "verdict": ("allowed" if plan.get("allowed") else "refused") if readable else None,
        "probe_only": bool(parts.get("probe_only")),
        "reasons": plan.get("reasons") or [],
        "warnings": plan.get("warnings") or [],
        "plan": plan.get("plan") or {},
        "effective_vllm": plan.get("effective_vllm") or {},
        "image": deployment.get("image"),
        "model_path": deployment.get("model_path"),
        "steps": plan.get("steps") or {},
        "instances": plan.get("instances") or [],
        "rollout_plan": plan.get("summary") or "",
        "target": _target_text(plan.get("target")),
        "policy_version": plan.get("policy_version"),
        "replanned": _replanned_text(plan, plan.get("previous")),
        "serving_path": plan.get("serving_path"),
        "serving_why": serving.get("why"),
        "serving_repack": serving.get("gptq_repack"),
        "model_store": model_store_view(plan.get("model_store")),
    }
    if not readable:
        view["msg"] = _sentence(_text(view["msg"]), "The recorded plan has plan_format %s; this report reads %d: "
                                "run the preflight again with this collection." % (_text(plan_format), PLAN_FORMAT))
    return view


def _preflight_of(record):
    """The record's preflight view: made here from ``plan``/``nvidia``/``host`` (what the fleet_report
    role passes), or the view itself when a record carries one (no ``plan`` key); None when absent."""
    pre = _mapping(record.get("preflight"))
    if pre is not None and "plan" in pre and "verdict" not in pre:
        return preflight_view(pre, _text(record.get("host")) or "?")
    return pre


def host_outcome(record, mode="rollout"):
    """The outcome of one host: (outcome, outcome_detail, extra).

    extra holds ``serving`` (deployed and serving hosts: image, digest, model path and per
    instance the flags and smoke-test figures) or ``failure`` (rolled_back and failed hosts: step,
    message, failed instance and task, journal tail); each key is None where it does not apply.
    The rules are tried in the order of OUTCOMES; the first that applies wins.
    """
    record = record if isinstance(record, dict) else {}
    reachable = bool(record.get("reachable", True))
    pre = _preflight_of(record)
    driver = _mapping(record.get("driver")) or {}
    server = _mapping(record.get("server")) or {}
    rollout = _mapping(record.get("rollout")) or {}
    extra = {"serving": None, "failure": None}

    # 1. Nothing from the preflight.
    if pre is None:
        if not reachable:
            return ("unreachable", "The host was unreachable or failed before the preflight recorded anything.", extra)
        return ("no_data", "The host is in the play but has no preflight result (preflight_verdict is not set).", extra)

    verdict = pre.get("verdict")
    probe_only = bool(pre.get("probe_only"))
    group = _mapping(record.get("group"))
    # 2. Refused by the preflight (probe-only hosts included); a member refused alone for what its allowed group
    # plans (the memory) is rolled out with the group, and judged by what the rollout says below.
    if verdict == "refused" and not (group and group.get("allowed") is True and rollout.get("state")):
        codes = _codes(pre.get("reasons"))
        return ("refused", _sentence(
            "Probe only; refused" if probe_only else "Refused",
            "by the preflight (%s); nothing was changed on the host" % (", ".join(codes) or "no reason code"),
        ), extra)

    plan = _text(pre.get("rollout_plan"))
    # 3. Allowed, but this run rolled nothing out to it.
    if verdict == "allowed" and (mode == "preflight" or probe_only):
        why = ("a probe-only host, which no rollout play reaches" if probe_only
               else "this run was a preflight only")
        return ("planned", _sentence(
            "Allowed; nothing rolled out (%s)." % why, ("Plan: " + plan) if plan else ""), extra)

    # 3b. A member of a host group: planned with its group, never rolled out on its own.
    if verdict == "allowed" and group and not server and not rollout:
        return ("planned", _sentence(
            "Allowed on its own, but a member of host group %s (%s as a group);" % (
                _text(group.get("name")) or "?", "allowed" if group.get("allowed") else "refused"),
            "a group member is not rolled out alone%s," % (
                "" if group.get("allowed") else " and its group is not rolled out while refused"),
            "so nothing was changed on it"), extra)

    status = _text(server.get("status"))
    state = _text(rollout.get("state"))
    # 4. The rollout failed on the host.
    if status == "rolled_back":
        extra["failure"] = _failure(_text(rollout.get("step")) or "server", _text(server.get("msg")), server, rollout)
        return ("rolled_back", _sentence(
            "The vLLM server failed%s and was rolled back:" % (
                " in instance " + _text(server.get("failed_instance")) if server.get("failed_instance") else ""),
            _text(server.get("msg")) or "(no message)"), extra)
    if status in ("failed", "not_retried") or state == "failed":
        if state == "failed":
            step = _text(rollout.get("step")) or ("server" if status else "unknown step")
            msg = _text(rollout.get("msg")) or _text(server.get("msg"))
        else:
            step = "server"
            msg = _text(server.get("msg")) or (
                "not retried after an earlier failure" if status == "not_retried" else "")
        extra["failure"] = _failure(step, msg, server if step == "server" or status else None, rollout)
        return ("failed", _sentence("Failed at the %s step:" % step, msg or "(no message)"), extra)

    # 5. The driver is installed and waits for a reboot.
    if _text(driver.get("status")) == "pending_reboot":
        return ("pending_reboot", _sentence(
            "The NVIDIA driver waits for a reboot:", _text(driver.get("msg")) or "reboot the host to load it"), extra)

    # 6. The rollout stopped before this host's batch.
    if state == "not_reached":
        batch = rollout.get("batch")
        return ("not_reached", _sentence(
            "The rollout stopped before this host's batch%s;" % (
                " (%s)" % batch if batch is not None and batch != "" else ""),
            "nothing was changed on it", ("(" + _text(rollout.get("msg")) + ")") if rollout.get("msg") else ""), extra)

    # 7. Lost during the run.
    if not reachable:
        return ("unreachable", _sentence(
            "The host went unreachable or failed without rescue during the rollout",
            "(last vLLM server status: %s)" % status if status else ""), extra)

    # 8. The server's own word.
    if status == "deployed":
        extra["serving"] = _serving(server)
        return ("deployed", _sentence(
            "Deployed %s%s;" % (_text(server.get("image")) or "the image",
                                " (" + _text(server.get("image_digest")) + ")" if server.get("image_digest") else ""),
            "it answers a completion"), extra)
    if status == "unchanged":
        extra["serving"] = _serving(server)
        return ("serving", _sentence(
            "Already at the target (%s); nothing changed, it answers a completion" % (
                _text(server.get("image_digest")) or _text(server.get("image")) or "image unknown")), extra)
    if status == "check_mode":
        return ("check_mode", "Check mode: the rollout was simulated, nothing was changed.", extra)

    # 8b. A member of a host group that serves through its leader: a Ray worker, no server of its own; the
    # group's completion was smoke-tested on the leader before the group's rollout was ok.
    if group and state == "ok" and not status:
        share = _mapping((_mapping(group.get("member_plans")) or {}).get(record.get("host"))) or {}
        stage = (_mapping(share.get("stage")) or {}).get("stage")
        changed = rollout.get("changed") is True
        return ("deployed" if changed else "serving", _sentence(
            "A Ray worker of host group %s%s, %s;" % (
                _text(group.get("name")) or "?", " (stage %s)" % stage if stage is not None else "",
                "(re)started by this run" if changed else "unchanged by this run"),
            "the group serves through its leader %s, whose completion went through every stage" % (
                _text(group.get("leader")) or "?")), extra)

    # 9. Nothing says what happened.
    if status:
        missing = "the vLLM server status %r is not one the report knows" % status
    elif verdict not in ("allowed", "refused"):
        missing = "the preflight recorded no verdict"
    elif state:
        missing = "the rollout says %s but the vLLM server role recorded no result" % state
    else:
        missing = "no vLLM server result (vllm_server_result) and no rollout record (labfleet_rollout)"
    return ("unknown", _sentence("Outcome unknown:", missing), extra)


def host_entry(record, mode="rollout"):
    """The report entry of one host: the preflight's fields, the role results and the outcome."""
    record = record if isinstance(record, dict) else {}
    host = _text(record.get("host")) or "?"
    pre = _preflight_of(record)
    if pre is None:
        entry = {"host": host, "state": "no_data", "msg": _NO_PREFLIGHT_MSG}
    else:
        entry = dict(pre)
        entry["host"] = host
        entry.setdefault("state", "unknown")
        entry["serving_label"] = serving_label(pre.get("serving_path"), pre.get("serving_repack"))
    outcome, detail, extra = host_outcome(record, mode)
    entry.update({
        "outcome": outcome,
        "outcome_detail": detail,
        "reachable": bool(record.get("reachable", True)),
        "rollout": {
            "driver": _mapping(record.get("driver")),
            "runtime": _mapping(record.get("runtime")),
            "server": _mapping(record.get("server")),
            "exporter": _mapping(record.get("exporter")),
        },
        "rollout_status": _mapping(record.get("rollout")),
        "serving": extra["serving"],
        "failure": extra["failure"],
    })
    return entry


def _count(values):
    counts = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


# Sections that the read-only playbooks add to the report (doctor.yml, benchmark.yml): the record key
# each comes from. A later run of one of them updates its section host by host (merge_report).
SECTIONS = ("doctor", "benchmark")
_STATUS_ORDER = ("problem", "unknown", "healthy", "not_applicable")


def _section(records, key):
    """The section ``key`` from the records that carry it: {"hosts": [...], "summary": {...}}, or None."""
    hosts = []
    for record in records:
        if isinstance(record, dict) and isinstance(record.get(key), dict):
            hosts.append(dict(record[key], host=_text(record.get("host"))))
    if not hosts:
        return None
    return _section_doc(key, hosts)


def _section_doc(key, hosts):
    hosts = sorted(hosts, key=lambda h: h["host"])
    if key == "doctor":
        summary = {"hosts": len(hosts), "by_status": _count(_text(h.get("status")) or "unknown" for h in hosts),
                   "problem": [h["host"] for h in hosts if h.get("status") == "problem"]}
    else:
        summary = {"hosts": len(hosts), "instances": sum(len(h.get("instances") or []) for h in hosts)}
    return {"hosts": hosts, "summary": summary}


def merge_report(previous, fresh):
    """``previous`` (the report document already on disk) with the sections of ``fresh`` (doctor,
    benchmark) put in, host by host: a host of ``fresh``'s section replaces its entry, the others are
    kept. The rest of ``previous`` (every host's outcome of the last rollout) stays as it was. When
    ``previous`` is not a report of this format, ``fresh`` is the report (and says why)."""
    if not isinstance(fresh, dict):
        raise ValueError("fresh must be a report document")
    if previous is None:
        return dict(fresh)
    if isinstance(previous, (str, bytes)):
        try:
            previous = json.loads(previous)
        except ValueError:
            return dict(fresh, previous_report="the report on disk is not JSON, so it was replaced")
    damage = report_damage(previous)
    if damage:
        return dict(fresh, previous_report="the report on disk %s, so it was replaced" % damage)
    out = dict(previous)
    out.pop("previous_report", None)
    for key in SECTIONS:
        if not isinstance(fresh.get(key), dict):
            continue
        old = previous.get(key) or {"hosts": []}
        hosts = dict((h["host"], h) for h in old["hosts"])
        hosts.update((h["host"], h) for h in fresh[key]["hosts"])
        out[key] = _section_doc(key, list(hosts.values()))
    _merge_gateway(out, fresh.get("gateway"))
    return out


def _merge_gateway(out, fresh):
    """A later run's gateway section: its gateways replace the report's when it configured any (a doctor
    or benchmark run does not), its upgrade-under-load figures replace the report's where it has them."""
    if not isinstance(fresh, dict):
        return
    old = out.get("gateway") or {}
    merged = dict(fresh) if (not old or fresh.get("gateways")) else dict(old)
    for key in list(LOAD_KEYS.values()) + ["doctor"]:
        if fresh.get(key) is not None and fresh.get(key) != {}:
            merged[key] = fresh[key]
        elif old.get(key):
            merged[key] = old[key]
    out["gateway"] = merged


def _list_of_dicts(value, optional=True):
    return (optional and value is None) or (isinstance(value, list) and all(isinstance(v, dict) for v in value))


def _host_damage(entry):
    """What is wrong with one host entry of a report document, or None."""
    if not isinstance(entry, dict) or not isinstance(entry.get("host"), str) or not entry["host"]:
        return "is not a mapping with a host name"
    if entry.get("outcome") not in OUTCOME_NAMES or not isinstance(entry.get("outcome_detail"), str) \
            or "state" not in entry:
        return "has no outcome, outcome_detail or state"
    rollout = entry.get("rollout")
    if not isinstance(rollout, dict) or not all(k in rollout and isinstance(rollout[k], (dict, type(None)))
                                                for k in ("driver", "runtime", "server", "exporter")):
        return "has no rollout record"
    parts = ("rollout_status", "serving", "failure")
    if not all(k in entry and isinstance(entry[k], (dict, type(None))) for k in parts) \
            or not _list_of_dicts(entry.get("reasons")) or not _list_of_dicts(entry.get("warnings")):
        return "has a malformed rollout_status, serving, failure, reasons or warnings"
    return None


def _section_damage(key, section):
    """What is wrong with a doctor or benchmark section of a report document, or None."""
    if section is None:
        return None
    if not isinstance(section, dict) or not _list_of_dicts(section.get("hosts"), optional=False):
        return "is not a mapping with a list of hosts"
    for index, entry in enumerate(section["hosts"]):
        if not isinstance(entry.get("host"), str) or not entry["host"]:
            return "hosts[%d] has no host name" % index
        if not _list_of_dicts(entry.get("instances")):
            return "hosts[%d].instances is not a list of mappings" % index
    return None


def report_damage(previous):
    """Why ``previous`` (a report document read back from disk) cannot be updated - another
    report_format, or a part that the merge or the templates read missing or of the wrong type - or
    None when it can."""
    if not isinstance(previous, dict) or previous.get("report_format") != REPORT_FORMAT \
            or not isinstance(previous.get("hosts"), list):
        return "is not a report_format %d document" % REPORT_FORMAT
    summary = previous.get("summary")
    if previous.get("mode") not in MODES or not isinstance(previous.get("outcomes"), list) \
            or not isinstance(summary, dict) or not isinstance(summary.get("hosts"), int) \
            or not all(isinstance(summary.get(k), dict) for k in ("by_outcome", "by_state")) \
            or not all(isinstance(summary.get(k), list) for k in ("allowed", "refused")) \
            or not isinstance(previous.get("scrape_targets", {}), dict):
        return "is damaged (mode, outcomes, summary or scrape_targets)"
    for index, entry in enumerate(previous["hosts"]):
        problem = _host_damage(entry)
        if problem:
            return "is damaged (hosts[%d] %s)" % (index, problem)
    for key in SECTIONS:
        problem = _section_damage(key, previous.get(key))
        if problem:
            return "is damaged (%s: %s)" % (key, problem)
    problem = gateway_damage(previous.get("gateway"))
    if problem:
        return "is damaged (gateway: %s)" % problem
    return None


_GROUP_STAGE_KEYS = ("stage", "member", "layers", "layer_count", "weight_bytes_per_gpu", "kv_tokens", "fits")


def _dict(value):
    return value if isinstance(value, dict) else {}


def group_section(records):
    """The report's ``groups`` (issue 27): one entry per host group, from the members' records' ``group``
    (the fact labfleet_group_verdict that the preflight's group play leaves on every member), by name;
    [] when no record carries one."""
    seen = {}
    rollouts = {}
    for record in records or []:
        if isinstance(record, dict) and _dict(record.get("rollout")):
            rollouts[_text(record.get("host"))] = _dict(record.get("rollout"))
    for record in records or []:
        plan = _dict(record.get("group")) if isinstance(record, dict) else {}
        name = _text(plan.get("name"))
        if not name or name in seen:
            continue
        choice = _dict(plan.get("choice"))
        seen[name] = {
            "name": name,
            "allowed": plan.get("allowed") is True,
            "members": [_text(_dict(m).get("name")) for m in plan.get("members") or []],
            "leader": _text(plan.get("leader")),
            "pp": plan.get("pp"),
            "tp": plan.get("tp"),
            "kv_tokens": plan.get("kv_tokens"),
            "stages": [_group_stage(st, plan.get("member_plans")) for st in plan.get("stages") or []],
            "choice": {"chosen": choice.get("chosen"), "serving_path": choice.get("serving_path"),
                       "why": _text(choice.get("why"))},
            "reasons": [{"code": _text(_dict(r).get("code")), "member": _dict(r).get("member"),
                         "message": _text(_dict(r).get("message"))} for r in plan.get("reasons") or []],
            "warnings": _codes(plan.get("warnings")),
            "summary": _text(plan.get("summary")),
        }
        seen[name]["rollout"] = _group_rollout(seen[name]["members"], rollouts)
    return [seen[name] for name in sorted(seen)]


def _group_stage(stage, shares):
    """A stage of the group's plan, with what its member stages (its share: serving path, directory, the
    model store revision it fetches; None for a refused group)."""
    out = dict((k, _dict(stage).get(k)) for k in _GROUP_STAGE_KEYS)
    share = _dict(_dict(shares).get(_text(out["member"])))
    fetch = _dict(_dict(share.get("model_store")).get("fetch"))
    out["serving_path"] = share.get("serving_path")
    out["model_path"] = _dict(share.get("deployment")).get("serving_model_path")
    out["store_revision"] = fetch.get("revision")
    return out


def _group_rollout(members, rollouts):
    """The group's rollout in this run (playbooks/rollout-groups.yml): state ok (every member ok), failed (any
    member failed: the group fails as one), or none (not rolled out in this run); each member's state and step."""
    states = [rollouts.get(m) for m in members]
    if not any(states):
        return {"state": None, "members": []}
    each = [{"member": m, "state": _text(_dict(r).get("state")) or None, "step": _text(_dict(r).get("step")) or None,
             "msg": _text(_dict(r).get("msg"))[:300]} for m, r in zip(members, states)]
    failed = any(e["state"] == "failed" for e in each)
    done = all(e["state"] == "ok" for e in each)
    return {"state": "failed" if failed else ("ok" if done else "incomplete"), "members": each}


def build_report(records, mode="rollout", collection="labfleet.vllm", gateways=None, gateway_load=None):
    """The whole report document from a list of per-host records (see docs/fleet_report.md).

    A record's optional ``address`` (the host's ansible_host) is where Prometheus reaches an
    instance published on every address; it goes into ``scrape_targets`` only. ``gateways``: one
    record per gateway host ({host, result: its gateway_result, address}); ``gateway_load``: the
    figures of an upgrade under load (scripts/gateway-load.py); both make the ``gateway`` section.
    """
    if mode not in MODES:
        raise ValueError("mode must be one of %s, got %r" % (", ".join(MODES), mode))
    if records is None:
        records = []
    if not isinstance(records, (list, tuple)):
        raise ValueError("records must be a list of per-host records, got %s" % type(records).__name__)
    entries = sorted((host_entry(r, mode) for r in records), key=lambda e: e["host"])
    addresses = dict((_text(r.get("host")), _text(r.get("address"))) for r in records
                     if isinstance(r, dict) and _text(r.get("address")))
    doc = {
        "report_format": REPORT_FORMAT,
        "collection": collection,
        "mode": mode,
        "outcomes": [{"outcome": name, "meaning": meaning} for name, meaning in OUTCOMES],
        "hosts": entries,
        "summary": {
            "hosts": len(entries),
            "by_outcome": _count(e["outcome"] for e in entries),
            "by_state": _count(e["state"] for e in entries),
            "allowed": [e["host"] for e in entries if e.get("verdict") == "allowed"],
            "refused": [e["host"] for e in entries if e.get("verdict") == "refused"],
        },
        "scrape_targets": scrape_targets(entries, addresses),
    }
    gateway_addresses = dict((_text(r.get("host")), _text(r.get("address"))) for r in gateways or []
                             if isinstance(r, dict) and _text(r.get("address")))
    groups, skipped = gateway_targets(gateways, gateway_addresses)
    doc["scrape_targets"]["file_sd"].extend(groups)
    doc["scrape_targets"]["skipped"].extend(skipped)
    gateway = gateway_section(gateways, entries, gateway_load)
    if gateway:
        doc["gateway"] = gateway
    groups = group_section(records)
    if groups:
        doc["groups"] = groups
    for key in SECTIONS:
        section = _section(records, key)
        if section:
            doc[key] = section
    return doc
