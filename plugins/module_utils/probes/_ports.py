# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# PRIVATE to the labfleet.vllm collection: this file is not a public API, its names and
# structure may change in any release. Use the labfleet.vllm.group_port_probe module instead.
"""TCP reachability between the members of a host group, before anything listens there.

Three steps, each run on a member (the module labfleet.vllm.group_port_probe):

- listen(): bind a short-lived listener on each port the group needs on this member (at its group
  address), and one port the kernel picks from its ephemeral range (the range NCCL's sockets use). A
  port already in use (Ray already runs there on a re-run) is reported ``in_use`` and connected to
  all the same. The sockets are handed to a detached process (double fork, new session, stdio on
  /dev/null) that accepts and closes connections until a stop file appears or its deadline passes,
  whichever is first, then closes them; nothing it does outlives the deadline.
- connect(): open a TCP connection to each (address, port), all at once (non-blocking), each with
  the same timeout; ``open`` only for a completed handshake.
- stop(): ask this run's listener to end (the stop file), wait for it, send SIGTERM (then SIGKILL)
  if it does not, and remove the run's files. Safe to call when nothing runs.

The listener's files live in ``runtime_dir``: ``labfleet-port-probe-<token>-<member>.json`` (written when it
listens: pid and ports; removed when it ends), ``.stop`` (the request to end) and ``.ended`` (what it
accepted, written when it ends on request).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import json
import os
import re
import select
import signal
import socket
import time

TOKEN_RE = re.compile(r"^[A-Za-z0-9_.-]{1,80}$")
# Seconds between the listener's looks at its stop file.
POLL_S = 0.1


class PortProbeError(Exception):
    """A probe step that cannot run at all (bad token, no fork); per-port trouble is a result."""


def paths(runtime_dir, token, name):
    """{state, stop, ended}: the files of one probe run's listener of member ``name`` (two members on
    one host, as in the tests, keep theirs apart)."""
    if not isinstance(token, str) or not TOKEN_RE.match(token):
        raise PortProbeError("token: expected 1-80 characters of A-Z a-z 0-9 _ . -, got %r" % (token,))
    if not isinstance(name, str) or not name:
        raise PortProbeError("name: required, the member's inventory name")
    safe = "".join(c if c.isalnum() or c in "_.-" else "_" for c in name)[:80]
    base = os.path.join(runtime_dir, "labfleet-port-probe-%s-%s" % (token, safe))
    return {"state": base + ".json", "stop": base + ".stop", "ended": base + ".ended"}


def _write_json(path, data):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as handle:
        json.dump(data, handle, sort_keys=True)
    os.rename(tmp, path)


def _remove(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def _family_and_host(address):
    """(socket family, numeric host) of an address or name; ValueError when it does not resolve."""
    try:
        infos = socket.getaddrinfo(address, None, socket.AF_UNSPEC, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise ValueError("cannot resolve %s: %s" % (address, exc))
    family, _type, _proto, _canon, sockaddr = infos[0]
    return family, sockaddr[0]


def _bind(family, host, port):
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(16)
    except Exception:
        sock.close()
        raise
    return sock


def bind_ports(address, ports, ephemeral=True):
    """Bind a listener on each port at ``address`` (the wildcard address of its family when
    ``address`` is not on this host). Returns (bound_address, [{port, state, error}], ephemeral
    port or None, [sockets]); state is ``listening``, ``in_use`` (something holds the port already)
    or ``error``. ValueError when the address does not resolve."""
    family, host = _family_and_host(address)
    bound = host
    try:
        _bind(family, host, 0).close()
    except OSError as exc:
        if exc.errno != errno.EADDRNOTAVAIL:
            raise ValueError("cannot listen at %s: %s" % (address, exc.strerror or exc))
        # the family's wildcard address (what a passive lookup of no host gives)
        bound = socket.getaddrinfo(None, 0, family, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)[0][4][0]
    out = []
    sockets = []
    for port in ports:
        try:
            sockets.append(_bind(family, bound, port))
            out.append({"port": port, "state": "listening", "error": None})
        except OSError as exc:
            state = "in_use" if exc.errno == errno.EADDRINUSE else "error"
            out.append({"port": port, "state": state, "error": exc.strerror or str(exc)})
    ephemeral_port = None
    if ephemeral:
        try:
            sock = _bind(family, bound, 0)
            sockets.append(sock)
            ephemeral_port = sock.getsockname()[1]
        except OSError:
            ephemeral_port = None
    return bound, out, ephemeral_port, sockets


def serve(sockets, stop_path, deadline, state_path=None, ended_path=None, clock=time.monotonic):
    """Accept and close connections on ``sockets`` until ``stop_path`` exists or ``clock()`` passes
    ``deadline``; close the sockets. Returns ([{port, peer}] accepted, ended by request: bool).
    Ended on request, writes the accepted list to ``ended_path``; either way removes ``state_path``."""
    accepted = []
    requested = False

    def accept(wait):
        ready = select.select(sockets, [], [], wait)[0]
        for sock in ready:
            try:
                conn, peer = sock.accept()
            except OSError:
                continue
            conn.close()
            if len(accepted) < 1000:
                accepted.append({"port": sock.getsockname()[1], "peer": peer[0]})
        return bool(ready)

    try:
        while clock() < deadline:
            if os.path.exists(stop_path):
                requested = True
                for _count in range(1000):   # what connected since the last look
                    if not accept(0):
                        break
                break
            accept(POLL_S)
    finally:
        for sock in sockets:
            sock.close()
        if requested and ended_path:
            try:
                _write_json(ended_path, {"accepted": accepted})
            except OSError:
                pass
        if state_path:
            _remove(state_path)
        if not requested:
            _remove(stop_path)
    return accepted, requested


def _detach(keep):
    """In the listener process: a session of its own, stdio on /dev/null, every other descriptor
    closed but ``keep`` (so the module's connection to Ansible ends when the module does)."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    keep = set(keep) | {0, 1, 2}
    try:
        limit = os.sysconf("SC_OPEN_MAX")
    except (ValueError, OSError):
        limit = 1024
    for fd in range(3, min(limit, 65536)):
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def start_listener(sockets, files, seconds, state):
    """Hand ``sockets`` to a detached listener that ends on the stop file or after ``seconds``;
    write ``state`` (with the listener's pid) to the state file. Returns the pid. The caller's
    copies of the sockets are closed."""
    _remove(files["stop"])
    _remove(files["ended"])
    read_end, write_end = os.pipe()
    try:
        child = os.fork()
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise PortProbeError("cannot start the listener: %s" % exc)
    if child == 0:  # pragma: no cover - runs in the child, measured by its effects in the tests
        code = 0
        try:
            os.close(read_end)
            os.setsid()
            grandchild = os.fork()
            if grandchild:
                os.write(write_end, str(grandchild).encode("ascii"))
            else:
                deadline = time.monotonic() + seconds
                _detach([s.fileno() for s in sockets] + [write_end])
                os.close(write_end)
                serve(sockets, files["stop"], deadline, files["state"], files["ended"])
        except BaseException:  # pylint: disable=broad-except
            code = 1
        finally:
            os._exit(code)  # pylint: disable=protected-access
    os.close(write_end)
    data = b""
    while True:
        chunk = os.read(read_end, 64)
        if not chunk:
            break
        data += chunk
    os.close(read_end)
    os.waitpid(child, 0)
    for sock in sockets:
        sock.close()
    if not data.strip().isdigit():
        raise PortProbeError("the listener did not start")
    pid = int(data)
    _write_json(files["state"], dict(state, pid=pid))
    return pid


def _alive(pid):
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM
    # A zombie (our own child, in the tests) has ended all the same.
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (IOError, OSError, IndexError):
        return True


def _wait(predicate, seconds, sleep=time.sleep, clock=time.monotonic):
    end = clock() + seconds
    while True:
        if predicate():
            return True
        if clock() >= end:
            return False
        sleep(0.05)


def stop(files, wait_s=5.0):
    """End this run's listener and remove its files. Returns {state, pid, accepted}: state
    ``stopped`` (it ended on request), ``killed`` (it did not within ``wait_s``: SIGTERM, then
    SIGKILL), ``not_running`` (no listener of this token: it never started or its deadline passed)."""
    try:
        with open(files["state"]) as handle:
            pid = int(json.load(handle).get("pid"))
    except (IOError, OSError, ValueError, TypeError, AttributeError):
        pid = None
    if pid is None:
        accepted = _read_ended(files)
        for path in files.values():
            _remove(path)
        return {"state": "stopped" if accepted is not None else "not_running", "pid": None,
                "accepted": accepted or []}
    with open(files["stop"], "w"):
        pass
    state = "stopped"
    if not _wait(lambda: not os.path.exists(files["state"]) or not _alive(pid), wait_s):
        state = "killed"
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except OSError:
                break
            if _wait(lambda: not _alive(pid), 2.0):
                break
    accepted = _read_ended(files)
    for path in files.values():
        _remove(path)
    return {"state": state, "pid": pid, "accepted": accepted or []}


def _read_ended(files):
    try:
        with open(files["ended"]) as handle:
            return json.load(handle).get("accepted") or []
    except (IOError, OSError, ValueError, AttributeError):
        return None


def connect(targets, timeout, clock=time.monotonic):
    """Try a TCP connection to every (address, port) of ``targets`` at once. Returns
    {(address, port): (open, error)}: open True when the handshake completed within ``timeout``
    seconds; else the error (refused, timed out, no route, cannot resolve)."""
    results = {}
    pending = {}
    for address, port in targets:
        key = (address, port)
        if key in results or key in pending.values():
            continue
        try:
            family, host = _family_and_host(address)
        except ValueError as exc:
            results[key] = (False, str(exc))
            continue
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        code = sock.connect_ex((host, port))
        if code == 0:
            results[key] = (True, None)
            sock.close()
        elif code in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY):
            pending[sock] = key
        else:
            results[key] = (False, os.strerror(code))
            sock.close()
    end = clock() + timeout
    try:
        while pending:
            left = end - clock()
            if left <= 0:
                break
            writable = select.select([], list(pending), [], left)[1]
            for sock in writable:
                key = pending.pop(sock)
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                results[key] = (True, None) if code == 0 else (False, os.strerror(code))
                sock.close()
    finally:
        for sock, key in pending.items():
            results[key] = (False, "timed out after %gs" % timeout)
            sock.close()
    return results
