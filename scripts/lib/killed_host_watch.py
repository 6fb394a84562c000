# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The sandbox's killed-host measurement (scripts/demo.sh, issue 25): docker kill of one host's vLLM
server while scripts/gateway-load.py streams through the gateway, then watch, every 0.2 s, what the
gateway's HAProxy says of that server (its runtime API, in the gateway container) and whether the
server answers /health again. Prints JSON: requests in flight on it at the kill, when the gateway
marked it DOWN, when it served again, when it was back in rotation (seconds from the kill).

    killed_host_watch.py GATEWAY_CONTAINER HOST_CONTAINER HOST_IP LOAD_PID
"""

from __future__ import absolute_import, division, print_function

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

ASK = ("import socket,sys\n"
       "s=socket.socket(socket.AF_UNIX)\ns.connect('/run/haproxy/admin.sock')\ns.sendall(b'show stat\\n')\n"
       "d=b''\nwhile True:\n c=s.recv(65536)\n if not c: break\n d+=c\nsys.stdout.write(d.decode())\n")


def stat(gateway, server):
    out = subprocess.run(["docker", "exec", gateway, "python3", "-c", ASK], capture_output=True, text=True,
                         check=False).stdout
    lines = out.lstrip("# ").splitlines()
    if not lines:
        return {}
    head = lines[0].split(",")
    for line in lines[1:]:
        row = dict(zip(head, line.split(",")))
        if row.get("svname") == server:
            return row
    return {}


def healthy(ip):
    try:
        return urllib.request.urlopen("http://%s:8000/health" % ip, timeout=1).status == 200
    except Exception:  # pylint: disable=broad-except  # refused, reset, timeout: not serving
        return False


def main(gateway, host, ip, load_pid):
    server = host + "-vllm"
    in_flight = int(stat(gateway, server).get("scur") or 0)
    os.kill(load_pid, signal.SIGUSR1)
    started = time.monotonic()
    subprocess.run(["docker", "exec", host, "docker", "kill", "vllm"], check=True, capture_output=True)
    down = serving = up = None
    while time.monotonic() - started < 90 and up is None:
        status = stat(gateway, server).get("status", "")
        now = round(time.monotonic() - started, 2)
        if down is None and status.startswith("DOWN"):
            down = now
        if down is not None and serving is None and healthy(ip):
            serving = round(time.monotonic() - started, 2)
        if down is not None and status == "UP":
            up = now
        time.sleep(0.2)
    json.dump({"in_flight_at_kill": in_flight, "marked_down_s": down, "serving_again_s": serving,
               "in_rotation_s": up}, sys.stdout)
    return 0 if up is not None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
