# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.ray_status module instead.
"""The Ray cluster of a host group as the local ``labfleet-ray`` container sees it.

The ray_cluster role runs Ray in a container (host network, the vLLM image's own Ray) on every
member of a group. ``docker exec -i <container> python3 - <seconds>`` with RAY_SCRIPT on stdin
connects to that cluster (``ray.init(address="auto")``) and prints one JSON line: the nodes
(``ray.nodes()``: NodeID, NodeManagerAddress, Alive, Resources["GPU"], NodeManagerPort), Ray's
version and the GCS address. parse_script_output() reads that line out of whatever else the exec
printed; judge() compares the nodes with the members the group expects; ray_status() runs the
two commands (the container's state, then the script) through a ``run(argv, data) -> (rc, out,
err, timed_out)`` callable, so that tests replay recorded answers.

Pure: no Ansible imports; the only I/O is through ``run``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math

# The container the ray_cluster role names, and its systemd unit.
RAY_CONTAINER = "labfleet-ray"
RAY_UNIT = "labfleet-ray.service"

# Run inside the container with ``python3 - <seconds>``: its own watchdog ends it before the caller's
# bound, since stopping ``docker exec`` does not stop what it started in the container.
RAY_SCRIPT = r'''
import json
import os
import sys
import threading

LIMIT = int(sys.argv[1]) if len(sys.argv) > 1 else 25


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def expire():
    emit({"error": "timeout", "detail": "Ray did not answer within %d s" % LIMIT})
    os._exit(3)


WATCHDOG = threading.Timer(LIMIT, expire)
WATCHDOG.daemon = True
WATCHDOG.start()
try:
    import ray
except Exception as exc:
    emit({"error": "import", "detail": "%s: %s" % (type(exc).__name__, exc)})
    sys.exit(2)
try:
    ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
    nodes = []
    for node in ray.nodes():
        nodes.append({"node_id": node.get("NodeID"), "address": node.get("NodeManagerAddress"),
                      "alive": bool(node.get("Alive")), "gpus": (node.get("Resources") or {}).get("GPU", 0),
                      "node_manager_port": node.get("NodeManagerPort")})
    try:
        gcs = ray.get_runtime_context().gcs_address
    except Exception:
        gcs = None
    emit({"nodes": nodes, "ray_version": ray.__version__, "gcs_address": gcs})
except Exception as exc:
    emit({"error": "connect", "detail": "%s: %s" % (type(exc).__name__, " ".join(str(exc).split())[:400])})
    sys.exit(1)
finally:
    try:
        ray.shutdown()
    except Exception:
        pass
'''

# Seconds the script's own watchdog leaves the caller's bound for docker exec to start and to end.
SCRIPT_MARGIN = 3


class RayStatusError(Exception):
    """Docker or the container is not there to ask (the module fails, unless told not to)."""


def _clip(text, limit=300):
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _gpus(value):
    """Ray's GPU resource (a float) as an int when it is whole; 0 for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return 0
    return int(value) if float(value).is_integer() else float(value)


def _node(item):
    item = item if isinstance(item, dict) else {}
    port = item.get("node_manager_port")
    return {"node_id": str(item.get("node_id") or ""), "address": str(item.get("address") or ""),
            "alive": item.get("alive") is True, "gpus": _gpus(item.get("gpus")),
            "node_manager_port": port if isinstance(port, int) and not isinstance(port, bool) else None}


def exec_argv(docker_bin, container, limit):
    """``docker exec -i <container> python3 - <seconds>``: RAY_SCRIPT goes on stdin."""
    return [docker_bin, "exec", "-i", container, "python3", "-", str(max(1, int(limit) - SCRIPT_MARGIN))]


def inspect_argv(docker_bin, container):
    return [docker_bin, "container", "inspect", "--format", "{{.State.Status}}", container]


def parse_script_output(rc, out, err):
    """RAY_SCRIPT's answer: {"nodes", "ray_version", "gcs_address"} or {"error", "detail"}; the last
    stdout line that is a JSON object with either key wins (Ray may print its own lines too)."""
    for line in reversed(str(out or "").splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("nodes"), list):
            return {"nodes": [_node(n) for n in doc["nodes"]], "ray_version": str(doc.get("ray_version") or ""),
                    "gcs_address": str(doc.get("gcs_address") or "")}
        if isinstance(doc, dict) and doc.get("error"):
            return {"error": str(doc["error"]), "detail": _clip(doc.get("detail"))}
    detail = _clip(err) or _clip(out) or "no output"
    return {"error": "no_answer", "detail": "exit %s: %s" % (rc, detail)}


def classify_docker_error(err, container):
    """(kind, sentence) for a failed docker command: absent, docker (the engine does not answer) or other."""
    text = _clip(err)
    low = text.lower()
    if "no such container" in low or "no such object" in low:
        return "absent", "container %s does not exist" % container
    if "is not running" in low or "is restarting" in low or "is paused" in low:
        return "not_running", "container %s is not running (%s)" % (container, text)
    if "cannot connect to the docker daemon" in low or "permission denied" in low or "is the docker daemon running" in low:
        return "docker", "Docker does not answer (%s)" % text
    return "other", text or "docker failed without a message"


def _unit_fix(where, gcs):
    return ("start %s there (systemctl status labfleet-ray; journalctl -u labfleet-ray) and check that it reaches %s"
            % (RAY_UNIT, gcs or "the leader's Ray GCS port") if where else "")


def judge(nodes, expect_members=None, expect_gpus=None, gcs_address=None):
    """Compare the cluster's nodes with the group's members.

    ``nodes``: parse_script_output()'s nodes. ``expect_members``: [{name, address, gpus}];
    ``expect_gpus``: the GPUs the plan needs. Returns {gpus_total, alive_count, members (with
    expect_members: name, address, gpus_expected, gpus_seen, alive), missing (names), unexpected
    (addresses of alive nodes no member has), issues ([{code, member, text}]), ready}.
    Codes: RAY_MEMBER_MISSING, RAY_MEMBER_DEAD, RAY_MEMBER_GPUS_SHORT, RAY_GPUS_SHORT.
    """
    nodes = [_node(n) for n in nodes or []]
    alive = [n for n in nodes if n["alive"]]
    gpus_total = _gpus(sum(n["gpus"] for n in alive))
    members, missing, issues = [], [], []
    for item in expect_members or []:
        item = item if isinstance(item, dict) else {}
        name, address = str(item.get("name") or ""), str(item.get("address") or "")
        expected = _gpus(item.get("gpus"))
        live = [n for n in alive if n["address"] == address]
        seen = _gpus(sum(n["gpus"] for n in live))
        members.append({"name": name, "address": address, "gpus_expected": expected, "gpus_seen": seen,
                        "alive": bool(live)})
        where = "member %s (%s)" % (name, address)
        if not live:
            missing.append(name)
            dead = any(n["address"] == address for n in nodes)
            issues.append({"code": "RAY_MEMBER_DEAD" if dead else "RAY_MEMBER_MISSING", "member": name,
                           "text": "%s %s: %s" % (where, "left the Ray cluster (its node is dead)" if dead
                                                  else "is not in the Ray cluster", _unit_fix(True, gcs_address))})
        elif seen < expected:
            issues.append({"code": "RAY_MEMBER_GPUS_SHORT", "member": name,
                           "text": "%s shows %s of its %s GPUs in Ray: check that the container sees them "
                                   "(docker exec %s nvidia-smi -L) and that its unit starts Ray with --num-gpus %s, "
                                   "then systemctl restart labfleet-ray there" % (where, seen, expected,
                                                                                  RAY_CONTAINER, expected)})
    known = set(m["address"] for m in members)
    unexpected = sorted(set(n["address"] for n in alive if members and n["address"] not in known))
    if expect_gpus is not None and gpus_total < expect_gpus:
        text = ("the Ray cluster shows %s GPUs on %d live node(s), the plan needs %s: bring every member's "
                "labfleet-ray.service up with all its GPUs" % (gpus_total, len(alive), expect_gpus))
        issues.append({"code": "RAY_GPUS_SHORT", "member": None, "text": text})
    return {"gpus_total": gpus_total, "alive_count": len(alive), "members": members, "missing": missing,
            "unexpected": unexpected, "issues": issues, "ready": not issues}


def _result(**values):
    base = {"nodes": [], "gpus_total": 0, "alive_count": 0, "members": [], "missing": [], "unexpected": [],
            "ready": False, "problems": [], "ray_version": None, "gcs_address": None, "answered": False,
            "container_state": None, "issues": []}
    base.update(values)
    return base


def ray_status(run, docker_bin, container=RAY_CONTAINER, expect_members=None, expect_gpus=None, timeout=30):
    """Ask the local Ray container about its cluster and judge the answer.

    ``run(argv, data, limit) -> (rc, out, err, timed_out)``. Raises RayStatusError (with what to fix)
    when Docker does not answer or the container is absent or not running; every other failure
    (Ray not up in the container, a timeout, an answer that is not JSON) is a result with ``ready``
    false and ``problems`` that say what to do.
    """
    rc, out, err, late = run(inspect_argv(docker_bin, container), None, timeout)
    state = str(out or "").strip()
    if late:
        raise RayStatusError("`docker container inspect %s` did not answer within %d s: check Docker "
                             "(systemctl status docker)" % (container, timeout))
    if rc != 0:
        kind, text = classify_docker_error(err or out, container)
        fix = ("start Docker (systemctl status docker)" if kind == "docker"
               else "start %s (systemctl start %s; journalctl -u %s), which the labfleet.vllm.ray_cluster role "
                    "installs" % (RAY_UNIT, RAY_UNIT, RAY_UNIT))
        raise RayStatusError("%s: %s" % (text, fix))
    if state != "running":
        raise RayStatusError("container %s is %s, not running: systemctl restart %s (journalctl -u %s says why it "
                             "stopped)" % (container, state or "in an unknown state", RAY_UNIT, RAY_UNIT))
    rc, out, err, late = run(exec_argv(docker_bin, container, timeout), RAY_SCRIPT, timeout)
    answer = parse_script_output(rc, out, err)
    if "error" in answer:
        if late and answer["error"] == "no_answer":
            answer = {"error": "timeout", "detail": "docker exec did not end within %d s" % timeout}
        kind, text = classify_docker_error(err, container) if answer["error"] == "no_answer" else (None, None)
        if kind in ("absent", "not_running", "docker"):
            raise RayStatusError("%s: systemctl restart %s" % (text, RAY_UNIT))
        fix = {"import": "the image has no usable Ray (the group needs the vLLM image with its Ray; check the "
                         "image of %s)" % RAY_UNIT,
               "connect": "Ray is not running in %s or cannot reach its head: systemctl restart %s and read "
                          "journalctl -u %s (on a worker, check that it reaches the leader's Ray GCS port)"
                          % (container, RAY_UNIT, RAY_UNIT),
               "timeout": "Ray did not answer in time: the head may be unreachable or overloaded; read "
                          "journalctl -u %s and retry with a larger timeout" % RAY_UNIT}.get(
            answer["error"], "read journalctl -u %s; the command's output is in the problem" % RAY_UNIT)
        return _result(container_state=state, problems=["Ray in container %s did not answer (%s: %s): %s" % (
            container, answer["error"], answer["detail"], fix)])
    judged = judge(answer["nodes"], expect_members, expect_gpus, answer["gcs_address"])
    return _result(nodes=answer["nodes"], gpus_total=judged["gpus_total"], alive_count=judged["alive_count"],
                   members=judged["members"] if expect_members is not None else [], missing=judged["missing"],
                   unexpected=judged["unexpected"], ready=judged["ready"],
                   problems=[i["text"] for i in judged["issues"]], issues=judged["issues"],
                   ray_version=answer["ray_version"], gcs_address=answer["gcs_address"] or None,
                   answered=True, container_state=state)
