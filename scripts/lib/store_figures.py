# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The model store's figures from a bench-store run (scripts/bench-store.sh writes the inputs).

    python3 scripts/lib/store_figures.py DIR

DIR holds: access-converge.log and access-all.log (the store's nginx access log after the converge
and after the converged re-run), addresses ("host ip" lines), manifest-<model>.json, fetch-<host>.json
(each host's fetch results of the converged re-run), steps ("step milliseconds" lines), converge.log and
idempotence.log (Molecule's output). Prints one table and the conversions; writes DIR/result.json.
"""

from __future__ import absolute_import, division, print_function

import json
import os
import re
import sys

MODELS = (("tiny-nvfp4", "/tiny-nvfp4/r1+gptq-g128/"), ("synthetic", "/synthetic/r1/"))
CONVERTER_TASK = re.compile(r"^TASK \[.*(Repack the NVFP4 checkpoint|Dequantize the NVFP4 checkpoint)")


def read_log(path):
    """{client: {prefix: bytes}} of the files (not the manifests) sent, by nginx's own count."""
    sent = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            parts = line.split('"')
            client = line.split(" ", 1)[0]
            uri = parts[1].split(" ", 1)[1]
            nbytes = int(parts[2].split()[1])
            if uri.endswith("/labfleet-manifest.json"):
                continue
            for name, prefix in MODELS:
                if uri.startswith(prefix):
                    per = sent.setdefault(client, {})
                    per[name] = per.get(name, 0) + nbytes
    return sent


def conversions(path):
    """Converter tasks that changed something, in one Molecule log."""
    count, inside = 0, False
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("TASK ["):
                inside = bool(CONVERTER_TASK.match(line))
            elif inside and line.startswith("changed: ["):
                count += 1
    return count


def main(out):
    with open(os.path.join(out, "addresses"), encoding="utf-8") as handle:
        addresses = dict(line.split() for line in handle if line.strip())
    sizes = {}
    for name, _prefix in MODELS:
        with open(os.path.join(out, "manifest-%s.json" % name), encoding="utf-8") as handle:
            sizes[name] = json.load(handle)["total_bytes"]
    first = read_log(os.path.join(out, "access-converge.log"))
    both = read_log(os.path.join(out, "access-all.log"))
    steps = {}
    with open(os.path.join(out, "steps"), encoding="utf-8") as handle:
        for line in handle:
            step, millis = line.split()
            steps[step] = int(millis) / 1000.0
    rows, result = [], {"sizes": sizes, "hosts": {}, "steps_s": steps}
    for host in sorted(addresses):
        ip = addresses[host]
        record = {}
        for name, _prefix in MODELS:
            got_first = first.get(ip, {}).get(name, 0)
            got_rerun = both.get(ip, {}).get(name, 0) - got_first
            record[name] = {"first_run": got_first, "converged_rerun": got_rerun}
        fetch_path = os.path.join(out, "fetch-%s.json" % host)
        if os.path.exists(fetch_path):
            with open(fetch_path, encoding="utf-8") as handle:
                fetched = json.load(handle)
            record["rerun_fetch_s"] = {"tiny-nvfp4": fetched["copy"]["seconds"], "synthetic": fetched["synthetic"]["seconds"]}
        result["hosts"][host] = record
        rows.append((host, record))
    made = conversions(os.path.join(out, "converge.log")) + conversions(os.path.join(out, "idempotence.log"))
    result["conversions"] = made

    print("model store: GPTQ copy of the tiny NVFP4 checkpoint %d bytes, synthetic model %d bytes (%.2f GB)"
          % (sizes["tiny-nvfp4"], sizes["synthetic"], sizes["synthetic"] / 1e9))
    print("%-12s %22s %22s %18s %18s %s" % ("host", "GPTQ copy: first run", "synthetic: first run",
                                            "GPTQ copy: re-run", "synthetic: re-run", "re-run fetch s"))
    for host, record in rows:
        seconds = record.get("rerun_fetch_s")
        print("%-12s %22d %22d %18d %18d %s" % (
            host, record["tiny-nvfp4"]["first_run"], record["synthetic"]["first_run"],
            record["tiny-nvfp4"]["converged_rerun"], record["synthetic"]["converged_rerun"],
            "%.2f / %.2f" % (seconds["tiny-nvfp4"], seconds["synthetic"]) if seconds else "-"))
    print("converged re-run of the whole converge (preflight, store, fetches; Molecule idempotence): %.1f s"
          % steps.get("idempotence", float("nan")))
    print("first run (converge): %.1f s" % steps.get("converge", float("nan")))
    print("conversions: %d (converter tasks that changed something, on any host, over both runs; goal 1 per copy)" % made)
    with open(os.path.join(out, "result.json"), "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
