# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.haproxy_server module instead.
"""HAProxy's runtime API (the admin socket of the gateway role): what a server's state is, and the
commands that drain it, put it back in rotation or keep it out.

Pure functions over the text the socket answers (``show stat``: CSV; ``show servers state``: one
line per server), so the unit tests run them on recorded answers; ``ask`` is the only I/O.

HAProxy's states (management guide, "show servers state"; configuration manual 5.2 "disabled"):
an administrative state (set by the runtime API or the configuration: ready, drain, maint) and an
operational state (from the health checks: running or stopped). ``show stat``'s ``status`` column
mixes both (UP, DOWN, DRAIN, MAINT, "UP 1/2" while a check is rising...); ``scur`` is the sessions
in flight on the server, ``stot`` the sessions it has served since HAProxy started.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import csv
import socket

# The characters HAProxy allows in proxy and server names; anything else is refused before it is
# written to the socket (a newline or ';' would be a second command).
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:-")

# srv_admin_state bits (HAProxy's include/haproxy/server-t.h, SRV_ADMF_*).
ADMIN_FMAINT = 0x01
ADMIN_IMAINT = 0x02
ADMIN_CMAINT = 0x04
ADMIN_FDRAIN = 0x08
ADMIN_IDRAIN = 0x10
ADMIN_RMAINT = 0x20
ADMIN_HMAINT = 0x40
_MAINT = ADMIN_FMAINT | ADMIN_IMAINT | ADMIN_CMAINT | ADMIN_RMAINT | ADMIN_HMAINT
_DRAIN = ADMIN_FDRAIN | ADMIN_IDRAIN
# srv_op_state (SRV_ST_*): 0 stopped, 1 starting, 2 running, 3 stopping.
OP_RUNNING = 2

STATES = ("drain", "ready", "maint")


class RuntimeApiError(Exception):
    """The socket could not be used, or it answered something that is not the expected table."""


def checked_name(value, what):
    """``value`` as a proxy or server name for a runtime command; ValueError when it could inject a command."""
    value = "" if value is None else str(value)
    if not value or any(ch not in _NAME_CHARS for ch in value):
        raise ValueError("%s %r is not a HAProxy name (letters, digits, '_', '.', ':', '-' only)" % (what, value))
    return value


def set_state_command(backend, server, state):
    """The runtime command that sets ``backend/server``'s administrative state to drain, ready or maint."""
    if state not in STATES:
        raise ValueError("state must be one of %s, got %r" % (", ".join(STATES), state))
    return "set server %s/%s state %s" % (checked_name(backend, "backend"), checked_name(server, "server"), state)


def set_weight_command(backend, server, weight):
    """The runtime command that sets ``backend/server``'s weight (0 to 256)."""
    if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= 256:
        raise ValueError("a HAProxy weight is an integer from 0 to 256, got %r" % (weight,))
    return "set server %s/%s weight %d" % (checked_name(backend, "backend"), checked_name(server, "server"), weight)


def _int(value):
    try:
        return int(str(value).strip() or 0)
    except ValueError:
        return 0


def parse_stat(text):
    """The servers of ``show stat``'s CSV: [{backend, server, status, scur, stot, weight, hrsp_5xx, eresp,
    econ, check_status}] (the FRONTEND and BACKEND rows left out). RuntimeApiError when it is not that table."""
    text = text or ""
    if not text.startswith("# pxname,svname,"):
        raise RuntimeApiError("'show stat' did not answer its CSV table: %r" % text[:200])
    rows = []
    for row in csv.DictReader(text[2:].splitlines()):
        if row.get("svname") in ("FRONTEND", "BACKEND") or not row.get("pxname"):
            continue
        rows.append({"backend": row["pxname"], "server": row["svname"], "status": row.get("status") or "",
                     "scur": _int(row.get("scur")), "stot": _int(row.get("stot")), "weight": _int(row.get("weight")),
                     "hrsp_5xx": _int(row.get("hrsp_5xx")), "eresp": _int(row.get("eresp")),
                     "econ": _int(row.get("econ")), "check_status": row.get("check_status") or "",
                     "check_code": row.get("check_code") or "", "addr": row.get("addr") or ""})
    return rows


def parse_servers_state(text):
    """``show servers state``: {(backend, server): {admin, op, weight}}. RuntimeApiError when it is not that table."""
    lines = [line for line in (text or "").splitlines() if line.strip()]
    if not lines or not lines[0].strip().isdigit():
        raise RuntimeApiError("'show servers state' did not answer its table: %r" % (text or "")[:200])
    header = None
    out = {}
    for line in lines[1:]:
        if line.startswith("#"):
            header = line[1:].split()
            continue
        if header is None:
            raise RuntimeApiError("'show servers state' has no header line before its rows")
        row = dict(zip(header, line.split()))
        try:
            key = (row["be_name"], row["srv_name"])
            out[key] = {"admin": int(row["srv_admin_state"]), "op": int(row["srv_op_state"]),
                        "weight": int(row["srv_uweight"])}
        except (KeyError, ValueError):
            raise RuntimeApiError("'show servers state' row not understood: %r" % line[:200])
    return out


def admin_state(admin):
    """'maint', 'drain' or 'ready' from srv_admin_state's bits (maintenance wins over drain)."""
    if admin & _MAINT:
        return "maint"
    if admin & _DRAIN:
        return "drain"
    return "ready"


def annotate(stat_rows, states):
    """Every server row of ``show stat`` with its administrative and operational state (from ``show servers
    state``) and why it is out of rotation when it is: [{backend, server, admin, up, status, scur, stot, weight,
    ..., diagnosis}]."""
    out = []
    for row in stat_rows:
        state = states.get((row["backend"], row["server"]), {})
        item = dict(row)
        item["admin"] = admin_state(state.get("admin", 0))
        item["up"] = state.get("op") == OP_RUNNING
        item["diagnosis"] = diagnose(item)
        out.append(item)
    return out


def others_in_rotation(rows, server):
    """The rows of the other servers in rotation (ready, checks passing) in the backends ``server`` is in."""
    backends = set(row["backend"] for row in rows if row["server"] == server)
    return [row for row in rows if row["backend"] in backends and row["server"] != server
            and row["admin"] == "ready" and row["up"]]


# Why the health checks judge a server down (show stat's check_status), and what to look at.
_CHECK_CAUSES = {
    "L4CON": ("nothing accepts connections at %(addr)s: the server is not running, or not listening yet (vLLM "
              "listens only once the model is loaded)",
              "on the host: systemctl status and journalctl -u of the instance's unit; playbooks/doctor.yml "
              "--limit <host> names the fault"),
    "L4TOUT": ("%(addr)s does not answer the connection within the check's time: the host is down or a firewall "
               "drops the packets", "check the network from the gateway to %(addr)s (nc -zv) and the host"),
    "L7TOUT": ("%(addr)s accepts the connection but /health does not answer in time: the server is hung",
               "the instance's journal; restart its unit (the doctor's checks name the fault)"),
    "L7STS": ("/health at %(addr)s answers %(code)s, not 200: the server runs but its engine is not healthy "
              "(vLLM answers 500 once its engine died)",
              "the instance's journal (playbooks/doctor.yml names the fault); restart its unit"),
    "L7RSP": ("%(addr)s answers /health with something that is not HTTP: another program holds the port?",
              "ss -ltnp on the host: which process listens on the port"),
    "SOCKERR": ("a socket error reaching %(addr)s (no route, address unreachable?)",
                "check the address the gateway has for the host (its plan and facts) and the routes"),
}


def diagnose(row):
    """{in_rotation, cause, fix} of one server row (with its admin and up, as annotate gives them): why it takes
    no request."""
    if row.get("admin") == "maint":
        return {"in_rotation": False,
                "cause": "kept out of rotation (maintenance): its host's rollout failed or was rolled back, or the "
                         "configuration disables it until a rollout passes on it",
                "fix": "the fleet report's failure for the host says why; fix it and run site.yml again (it puts the "
                       "server back after its smoke test passes)"}
    if row.get("admin") == "drain":
        return {"in_rotation": False,
                "cause": "being drained: a rollout is changing it (or an interrupted rollout left it drained)",
                "fix": "let the rollout finish; if none runs, run site.yml again, or 'set server %s/%s state ready' "
                       "on the gateway's runtime API" % (row.get("backend"), row.get("server"))}
    if row.get("up"):
        return {"in_rotation": True, "cause": "", "fix": ""}
    status = row.get("check_status") or ""
    cause, fix = _CHECK_CAUSES.get(status, ("its health checks have not passed yet (%s)" % (status or "no check yet"),
                                            "wait two health-check intervals; if it stays down, the instance's "
                                            "journal"))
    values = {"addr": row.get("addr") or "its address", "code": row.get("check_code") or "?"}
    return {"in_rotation": False, "cause": cause % values, "fix": fix % values}


def in_flight(view):
    """Requests in flight on the server, over every backend it is in."""
    return sum(item["scur"] for item in view)


def all_up(view):
    """True when every row of the server is in rotation: administratively ready and its checks passing."""
    return bool(view) and all(item["admin"] == "ready" and item["up"] for item in view)


def share_weight(share_percent, other_weights):
    """The weight that gives a server ``share_percent`` of a backend's new requests beside servers of
    ``other_weights`` (HAProxy balances by weight): w / (w + sum(others)) = share. 1 to 256."""
    if isinstance(share_percent, bool) or not 0 < float(share_percent) < 100:
        raise ValueError("a traffic share is a percentage above 0 and below 100, got %r" % (share_percent,))
    others = sum(w for w in other_weights if w > 0)
    if not others:
        return 256
    share = float(share_percent) / 100.0
    return max(1, min(256, int(round(share * others / (1.0 - share)))))


def ask(path, command, timeout):
    """Send one command to the runtime API at ``path`` (a UNIX socket) and return its whole answer."""
    if "\n" in command or ";" in command:
        raise ValueError("one runtime command at a time, without ';' or a newline: %r" % command)
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(timeout)
    try:
        client.connect(path)
        client.sendall((command + "\n").encode("ascii"))
        chunks = []
        while True:
            chunk = client.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    except (OSError, socket.timeout) as exc:
        raise RuntimeApiError("HAProxy's runtime API at %s: %s: %s" % (path, command.split(" ")[0], exc))
    finally:
        client.close()
    return b"".join(chunks).decode("utf-8", "replace")
