# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""TEST FIXTURE ONLY: a stand-in for NVIDIA's dcgm-exporter (standard library only).

It answers GET /metrics on port 9400 with Prometheus text in dcgm-exporter's shape, one sample
per GPU of the fake GPUs' recorded answers (/etc/labfleet-fake-gpu/gpus.json, which the fake
toolkit hook mounts into a container started with --gpus). Without them it exits 1, as the real
exporter does when NVML finds no GPU ("Failed to initialize NVML"), so a unit without --gpus
fails its start. Never run it on a real host.
"""

import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GPUS = os.path.join(os.environ.get("LABFLEET_FAKE_GPU_DIR", "/etc/labfleet-fake-gpu"), "gpus.json")
FIELDS = (
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "utilization.gpu", "0"),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "memory.used", "0"),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "memory.free", "0"),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "temperature.gpu", "40"),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "power.draw", "30"),
)


def metrics(gpus):
    lines = []
    for name, kind, text, field, fallback in FIELDS:
        lines += ["# HELP %s %s" % (name, text), "# TYPE %s %s" % (name, kind)]
        for index, gpu in enumerate(gpus):
            value = str(gpu.get(field, fallback)).split()[0]
            try:
                float(value)
            except ValueError:
                value = fallback
            labels = 'gpu="%d",UUID="%s",pci_bus_id="%s",device="nvidia%d",modelName="%s",Hostname="%s"' % (
                index, gpu.get("uuid", ""), gpu.get("pci.bus_id", ""), index, gpu.get("name", ""),
                os.uname().nodename)
            lines.append("%s{%s} %s" % (name, labels, value))
    return ("\n".join(lines) + "\n").encode("utf-8")


def main():
    try:
        with open(GPUS, encoding="utf-8") as handle:
            gpus = [g for g in json.load(handle) if isinstance(g, dict) and not g.get("lost")]
    except (OSError, ValueError) as exc:
        sys.stderr.write("Failed to initialize NVML: no GPU visible (%s)\n" % exc)
        return 1
    if not gpus:
        sys.stderr.write("Failed to initialize NVML: no GPU visible\n")
        return 1
    body = metrics(gpus)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            return

    sys.stderr.write("Starting webserver on :9400 (%d GPU(s))\n" % len(gpus))
    ThreadingHTTPServer(("0.0.0.0", 9400), Handler).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
