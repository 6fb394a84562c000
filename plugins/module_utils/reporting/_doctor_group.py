# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use playbooks/doctor.yml instead.
"""The doctor's cross-host checks for a member of a host group (one model across hosts, issue 27).

Every member of a group has /etc/labfleet/ray/group.json (the ray_cluster role writes it):
the group's name, this member, the leader and its address, Ray's GCS port, the members (name,
address, GPUs), the stages (stage, member, layers), the NCCL interface and MTU. The doctor role
collects on each member a *record* of what it sees (roles/doctor/tasks/group.yml):

    {"member": name, "group": parse_group_record()'s group,
     "interface": {"name", "read", "mtu", "operstate", "flags", "error"} (the NCCL interface, from /sys/class/net),
     "interfaces": [names], "ray_unit": systemctl is-active of labfleet-ray.service,
     "ray_container": the container's state (running, exited, ..., absent), "ray_journal": [lines],
     "vllm": {"instance", "unit", "container", "journal"} (the leader only),
     "ray": the ray_status module's result (the leader only),
     "probes": [{"to", "address", "port", "what", "open", "msg"}] (TCP connects from this member)}

and diagnose_group() compares the records of every member (the play runs on all of them) into four
findings, the doctor's finding format (reporting/_doctor.py finding()), each listing its ``items``
({code, member, status, cause, fix}) in its evidence:

- ``ray_membership``: the leader's ray_status against the group's members (RAY_NOT_ANSWERING,
  RAY_MEMBER_MISSING, RAY_MEMBER_DEAD, RAY_MEMBER_GPUS_SHORT, RAY_GPUS_SHORT);
- ``nccl_interface``: the interface on every member, up, one MTU, the group's MTU
  (NCCL_INTERFACE_MISSING, NCCL_INTERFACE_DOWN, NCCL_MTU_MISMATCH, NCCL_MTU_NOT_PLANNED);
- ``group_ports``: each member to the leader's Ray GCS port, the leader to each member's Ray
  node manager port (GROUP_PORT_CLOSED);
- ``stage_stopped``: a stage whose labfleet-ray unit or container is not running, and the leader's
  vLLM unit (STAGE_STOPPED, GROUP_SERVER_STOPPED).

A member whose record is missing (not in this run, unreachable) makes the parts that need it
``unknown`` (MEMBER_NOT_DIAGNOSED); a group.json that cannot be read is GROUP_RECORD_INVALID.

Pure: no I/O, no Ansible imports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.labfleet.vllm.plugins.module_utils.probes._ray import RAY_CONTAINER, RAY_UNIT, judge
from ansible_collections.labfleet.vllm.plugins.module_utils.reporting._doctor import finding, overall_status

GROUP_CHECKS = ("ray_membership", "nccl_interface", "group_ports", "stage_stopped")
GROUP_CODES = ("GROUP_RECORD_INVALID", "MEMBER_NOT_DIAGNOSED", "RAY_NOT_ANSWERING", "RAY_MEMBER_MISSING",
               "RAY_MEMBER_DEAD", "RAY_MEMBER_GPUS_SHORT", "RAY_GPUS_SHORT", "NCCL_INTERFACE_MISSING",
               "NCCL_INTERFACE_DOWN", "NCCL_MTU_MISMATCH", "NCCL_MTU_NOT_PLANNED", "GROUP_PORT_CLOSED",
               "STAGE_STOPPED", "GROUP_SERVER_STOPPED")
GROUP_FILE = "/etc/labfleet/ray/group.json"
# An interface name as the kernel takes it (IFNAMSIZ 16 with the NUL; no "/", no white space).
_IFACE_RE = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}\Z")
_JOURNAL_HINT_LINES = 5


class GroupRecordError(ValueError):
    """group.json is not what the ray_cluster role writes."""


def _mapping(value):
    return value if isinstance(value, dict) else {}


def _clip(text, limit=300):
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _int(value, where, minimum=0, optional=False):
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise GroupRecordError("%s: expected a whole number of at least %d, got %r" % (where, minimum, value))
    return value


def _str(value, where, empty=False):
    if not isinstance(value, str) or (not value and not empty) or any(ord(ch) < 32 for ch in value):
        raise GroupRecordError("%s: expected a name without control characters, got %r" % (where, value))
    return value


def parse_group_record(text):
    """group.json (text or an already parsed mapping) checked and normalised; raises GroupRecordError
    naming the field."""
    if isinstance(text, (str, bytes)):
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise GroupRecordError("not JSON (%s)" % exc)
    else:
        doc = text
    if not isinstance(doc, dict):
        raise GroupRecordError("expected a JSON object, got %s" % type(doc).__name__)
    group = {"name": _str(doc.get("name") or "", "name", empty=True) or "(unnamed)", "member": _str(doc.get("member"), "member"),
             "leader": _str(doc.get("leader"), "leader"),
             "leader_address": _str(doc.get("leader_address"), "leader_address"),
             "port": _int(doc.get("port"), "port", 1), "mtu": _int(doc.get("mtu"), "mtu", 68, optional=True),
             "nccl_interface": _str(doc.get("nccl_interface") or "", "nccl_interface", empty=True),
             "gpus_total": _int(doc.get("gpus_total"), "gpus_total", 1, optional=True),
             "tp": _int(doc.get("tp"), "tp", 1, optional=True), "pp": _int(doc.get("pp"), "pp", 1, optional=True),
             "image_id": str(doc.get("image_id") or "")}
    if group["nccl_interface"] and not _IFACE_RE.match(group["nccl_interface"]):
        raise GroupRecordError("nccl_interface: %r is not an interface name" % group["nccl_interface"])
    members = doc.get("members")
    if not isinstance(members, list) or not members:
        raise GroupRecordError("members: expected a list of the group's hosts")
    group["members"] = [{"name": _str(_mapping(m).get("name"), "members[%d].name" % i),
                         "address": _str(_mapping(m).get("address"), "members[%d].address" % i),
                         "gpus": _int(_mapping(m).get("gpus"), "members[%d].gpus" % i)} for i, m in enumerate(members)]
    if group["gpus_total"] is None:  # a record written without the plan's figure: the members' GPUs
        group["gpus_total"] = sum(m["gpus"] for m in group["members"])
    names = [m["name"] for m in group["members"]]
    if group["leader"] not in names or group["member"] not in names:
        raise GroupRecordError("leader %s and member %s must be among the members (%s)" % (
            group["leader"], group["member"], ", ".join(names)))
    stages = []
    for index, stage in enumerate(doc.get("stages") or []):
        stage = _mapping(stage)
        layers = stage.get("layers")
        if not (isinstance(layers, list) and len(layers) == 2 and all(isinstance(v, int) for v in layers)):
            raise GroupRecordError("stages[%d].layers: expected [first, last]" % index)
        stages.append({"stage": _int(stage.get("stage"), "stages[%d].stage" % index),
                       "member": _str(stage.get("member"), "stages[%d].member" % index), "layers": list(layers)})
    group["stages"] = stages
    return group


def _item(code, member, cause, fix, status="problem"):
    return {"code": code, "member": member, "status": status, "cause": cause, "fix": fix}


def _not_diagnosed(name, what):
    return _item("MEMBER_NOT_DIAGNOSED", name, "member %s was not diagnosed in this run, so %s is not known" % (
        name, what), "run the doctor on every member of the group (no --limit that leaves %s out; it must be "
        "reachable)" % name, status="unknown")


def _finding(check, items, healthy, sources=()):
    """One finding from a check's items: problem when any item is, else unknown when any is, else healthy."""
    statuses = [i["status"] for i in items]
    status = "problem" if "problem" in statuses else ("unknown" if statuses else "healthy")
    if not items:
        return finding(check, "healthy", healthy, "", {"items": []}, sources)
    fixes = []
    for item in items:
        if item["fix"] and item["fix"] not in fixes:
            fixes.append(item["fix"])
    cause = "; ".join(i["cause"] for i in items) + "."
    fix = " ".join("%d) %s;" % (n + 1, f.rstrip(".;")) for n, f in enumerate(fixes))[:-1] + "." if len(fixes) > 1 \
        else (fixes[0] if fixes else "")
    return finding(check, status, cause, fix, {"items": items}, sources)


def check_ray_membership(group, records):
    """The leader's ray_status result against the group's members."""
    leader = group["leader"]
    record = records.get(leader)
    if record is None:
        return _finding("ray_membership", [_not_diagnosed(leader, "the Ray cluster (the leader asks Ray)")], "")
    ray = _mapping(record.get("ray"))
    if not ray.get("answered"):
        problems = ray.get("problems") or ["ray_status did not run on the leader"]
        return _finding("ray_membership", [_item(
            "RAY_NOT_ANSWERING", leader, "Ray on the leader %s did not answer: %s" % (leader, _clip(" ".join(problems))),
            "on %s: systemctl status %s; journalctl -u %s -n 50" % (leader, RAY_UNIT, RAY_UNIT))], "")
    judged = judge(ray.get("nodes") or [], group["members"], group["gpus_total"], ray.get("gcs_address")
                   or "%s:%d" % (group["leader_address"], group["port"]))
    items = []
    for issue in judged["issues"]:
        cause, _sep, fix = issue["text"].partition(": ")
        where = "on %s: " % issue["member"] if issue["member"] else ""
        items.append(_item(issue["code"], issue["member"], cause, where + fix))
    return _finding("ray_membership", items, "all %d members are in the Ray cluster with their GPUs (%s of the %d "
                    "the plan needs; Ray %s)" % (len(group["members"]), judged["gpus_total"], group["gpus_total"],
                                                 ray.get("ray_version") or "?"))


def _interface_state(iface):
    """(up, text) of an interface record read from /sys/class/net (operstate, flags)."""
    operstate = str(iface.get("operstate") or "").strip()
    try:
        admin_up = bool(int(str(iface.get("flags") or "0").strip(), 16) & 1)
    except ValueError:
        admin_up = False
    if operstate == "up" or (operstate == "unknown" and admin_up):
        return True, operstate
    return False, "%s%s" % (operstate or "not known", "" if admin_up else ", administratively down")


def check_nccl_interface(group, records):
    """The group's NCCL interface on every member: there, up, one MTU, the group's MTU when set."""
    name = group["nccl_interface"]
    if not name:
        return finding("nccl_interface", "not_applicable", "the group names no NCCL interface (NCCL picks one "
                       "itself), so there is none to compare", "", {"items": []})
    items, mtus = [], {}
    for member in group["members"]:
        who = member["name"]
        record = records.get(who)
        if record is None:
            items.append(_not_diagnosed(who, "its interface %s" % name))
            continue
        iface = _mapping(record.get("interface"))
        if not iface.get("read"):
            others = ", ".join(sorted(record.get("interfaces") or [])) or "none read"
            items.append(_item("NCCL_INTERFACE_MISSING", who, "member %s has no interface %s (it has %s)" % (
                who, name, others), "on %s: name the members' common interface for NCCL in the group "
                "(labfleet_group_nccl_interface) or give the interface that name; then restart the group" % who))
            continue
        up, state = _interface_state(iface)
        if not up:
            items.append(_item("NCCL_INTERFACE_DOWN", who, "interface %s on member %s is down (%s)" % (name, who, state),
                               "on %s: ip link set %s up and check its link (ip -s link show %s)" % (who, name, name)))
        mtus[who] = iface.get("mtu")
    if len(set(mtus.values())) > 1:
        items.append(_item("NCCL_MTU_MISMATCH", None, "the MTU of %s differs between members (%s)" % (
            name, ", ".join("%s %s" % (k, v) for k, v in sorted(mtus.items()))),
            "set one MTU on %s on every member and on the switch (ip link set %s mtu N, and in the host's network "
            "configuration), or NCCL's large messages stall" % (name, name)))
    elif mtus and group["mtu"] is not None and list(mtus.values())[0] != group["mtu"]:
        items.append(_item("NCCL_MTU_NOT_PLANNED", None, "the MTU of %s is %s on every member, the group was planned "
                           "with %s" % (name, list(mtus.values())[0], group["mtu"]),
                           "set the MTU to %s again (the switch too), or plan the group again with the preflight "
                           "so that its record says the MTU in use" % group["mtu"]))
    return _finding("nccl_interface", items, "%s is up on all %d members with MTU %s" % (
        name, len(group["members"]), ", ".join(sorted(set(str(v) for v in mtus.values())))))


def _probe_item(frm, probe, to_text):
    what = probe.get("what") or "port"
    return _item("GROUP_PORT_CLOSED", frm, "%s cannot reach %s at %s:%s (%s)" % (
        frm, to_text, probe.get("address"), probe.get("port"), _clip(probe.get("msg") or "no connection", 160)),
        "open TCP %s on %s for %s (nft list ruleset; ufw status; firewall-cmd --list-all) and check the route "
        "(ip route get %s on %s); %s" % (probe.get("port"), probe.get("to"), frm, probe.get("address"), frm, what))


def check_group_ports(group, records):
    """Each member to the leader's Ray GCS port, the leader to each member's Ray node manager port."""
    leader = group["leader"]
    items, checked = [], 0
    for member in group["members"]:
        who = member["name"]
        record = records.get(who)
        if record is None:
            items.append(_not_diagnosed(who, "whether it reaches the leader's Ray GCS port"))
            continue
        for probe in record.get("probes") or []:
            probe = _mapping(probe)
            checked += 1
            if probe.get("open"):
                continue
            to = probe.get("to")
            text = ("the leader's Ray GCS port" if to == leader and probe.get("port") == group["port"]
                    else "the Ray node manager of %s" % to)
            items.append(_probe_item(who, probe, text))
    leader_record = records.get(leader)
    if leader_record is not None:
        probed = set(_mapping(p).get("to") for p in leader_record.get("probes") or [])
        for member in group["members"]:
            if member["name"] != leader and member["name"] not in probed:
                items.append(_item("GROUP_PORT_CLOSED", member["name"], "the leader could not probe the Ray node "
                                   "manager of %s: Ray does not list a live node at %s" % (
                                       member["name"], member["address"]),
                                   "bring %s into the Ray cluster first (ray_membership)" % member["name"],
                                   status="unknown"))
    return _finding("group_ports", items, "%d connection(s) between the members opened: each member reaches the "
                    "leader's Ray GCS at %s:%d, the leader each member's Ray node manager" % (
                        checked, group["leader_address"], group["port"]))


def _running(unit, container):
    return str(unit or "").strip() == "active" and str(container or "").strip() == "running"


def _journal_hint(lines):
    lines = [_clip(line, 200) for line in (lines or []) if str(line).strip()][-_JOURNAL_HINT_LINES:]
    return " | ".join(lines)


def check_stages(group, records):
    """Each stage's labfleet-ray unit and container, and the leader's vLLM server."""
    items = []
    stages = group["stages"] or [{"stage": n, "member": m["name"], "layers": None}
                                 for n, m in enumerate(group["members"])]
    for stage in stages:
        who = stage["member"]
        label = "stage %d (member %s%s)" % (stage["stage"], who, ", layers %d-%d" % tuple(stage["layers"])
                                            if stage["layers"] else "")
        record = records.get(who)
        if record is None:
            items.append(_not_diagnosed(who, "whether %s runs" % label))
            continue
        if not _running(record.get("ray_unit"), record.get("ray_container")):
            hint = _journal_hint(record.get("ray_journal"))
            items.append(_item("STAGE_STOPPED", who, "%s stopped: %s is %s, container %s is %s%s" % (
                label, RAY_UNIT, record.get("ray_unit") or "not known", RAY_CONTAINER,
                record.get("ray_container") or "not known", "; its journal ends: " + hint if hint else ""),
                "on %s: journalctl -u %s -n 50 says why; systemctl restart %s, then restart the group's vLLM server "
                "on the leader %s (a lost stage does not come back into a running server)" % (
                    who, RAY_UNIT, RAY_UNIT, group["leader"])))
    leader = records.get(group["leader"])
    vllm = _mapping((leader or {}).get("vllm"))
    if leader is not None and vllm and not _running(vllm.get("unit"), vllm.get("container")):
        unit = "%s.service" % vllm.get("instance")
        hint = _journal_hint(vllm.get("journal"))
        items.append(_item("GROUP_SERVER_STOPPED", group["leader"], "the group's vLLM server %s on the leader %s "
                           "stopped: the unit is %s, its container %s%s" % (
                               unit, group["leader"], vllm.get("unit") or "not known",
                               vllm.get("container") or "not known", "; its journal ends: " + hint if hint else ""),
                           "on %s: journalctl -u %s -n 100 says why; once every stage runs (ray_membership "
                           "healthy), systemctl restart %s" % (group["leader"], unit, unit)))
    return _finding("stage_stopped", items, "all %d stages run (%s and its container on every member)%s" % (
        len(stages), RAY_UNIT, ", and the vLLM server on the leader" if vllm else ""))


def invalid_record(member, error, path=GROUP_FILE):
    """The entry for a member whose group.json cannot be read."""
    item = _item("GROUP_RECORD_INVALID", member, "%s cannot be read: %s" % (path, _clip(error)),
                 "run the rollout again for the group (the labfleet.vllm.ray_cluster role writes the file), or "
                 "remove the file on a host that left the group")
    entry = {"instance": "group", "group": None, "member": member, "findings": [
        _finding(check, [item], "") for check in GROUP_CHECKS], "journal_states": []}
    entry["status"] = overall_status(entry["findings"])
    return entry


def diagnose_group(group, records):
    """The four cross-host findings of a group from its members' records ({name: record}; a member
    not in it was not diagnosed). Returns a doctor instance entry: {instance ("group <name>"),
    group, member, leader, status, findings, journal_states}."""
    records = dict((k, v) for k, v in _mapping(records).items() if isinstance(v, dict)
                   and _mapping(v.get("group")).get("name", group["name"]) == group["name"])
    findings = [check_ray_membership(group, records), check_nccl_interface(group, records),
                check_group_ports(group, records), check_stages(group, records)]
    return {"instance": "group %s" % group["name"], "group": group["name"], "member": group["member"],
            "leader": group["leader"], "status": overall_status(findings), "findings": findings,
            "journal_states": []}
