# -*- coding: utf-8 -*-
# Copyright: (c) 2026, labfleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the doctor said about this machine (make check-gpu, stage doctor).

Reads the fleet report that playbooks/doctor.yml wrote for localhost and the GPUs nvidia-smi lists
(``nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader``), prints the doctor's verdict per check and
says whether the doctor identified the GPUs: the probe state ``ok`` and the same GPU models, count and compute
capabilities as nvidia-smi. A check that needs Docker (the GPUs-in-containers check, the test containers) on
a machine without a working Docker is shown as such; it does not fail this stage, which asks whether the
doctor runs and sees the GPU, not whether the machine is ready to serve.

    python doctor_check.py REPORT.json SMI.csv [--docker yes|no]

Exit status 0 when the doctor identified the GPUs, 1 otherwise (the reasons printed), 2 for unusable input.
"""

from __future__ import absolute_import, division, print_function

import argparse
import json
import sys

# The doctor's checks whose evidence comes from Docker (docs/doctor.md).
DOCKER_CHECKS = ("gpu_in_container",)


def read_smi(text):
    """[(name, compute capability)] from `nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader`."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, _sep, cc = line.rpartition(",")
        gpus.append((name.strip(), cc.strip()))
    return gpus


def judge(report, smi_gpus, docker=True, host="localhost"):
    """(ok, lines): the doctor's findings for ``host`` and whether it identified the GPUs nvidia-smi lists."""
    lines = []
    problems = []
    hosts = [h for h in report.get("hosts") or [] if h.get("host") == host]
    if not hosts:
        return False, ["the report lists no host %s" % host]
    entry = hosts[0]
    models = sorted(entry.get("gpu_models") or [])
    ccs = sorted(entry.get("compute_capabilities") or [])
    lines.append("probe: state %s via %s; %s GPU(s): %s, compute capability %s; driver %s (CUDA %s)" % (
        entry.get("state"), entry.get("backend"), entry.get("gpu_count"), ", ".join(models) or "-",
        "/".join(ccs) or "-", entry.get("driver_version"), entry.get("cuda_driver_version")))
    if entry.get("state") != "ok":
        problems.append("the probe state is %s, not ok: %s" % (entry.get("state"), entry.get("msg")))
    want_models = sorted(set(name for name, _cc in smi_gpus))
    want_ccs = sorted(set(cc for _name, cc in smi_gpus))
    if models != want_models:
        problems.append("the doctor saw GPU model(s) %s, nvidia-smi lists %s" % (models, want_models))
    if ccs != want_ccs:
        problems.append("the doctor saw compute capability %s, nvidia-smi says %s" % (ccs, want_ccs))
    if entry.get("gpu_count") != len(smi_gpus):
        problems.append("the doctor counted %s GPU(s), nvidia-smi lists %d" % (entry.get("gpu_count"), len(smi_gpus)))
    if entry.get("verdict"):
        codes = ", ".join(reason.get("code", "?") for reason in entry.get("reasons") or []) or "none"
        serving = entry.get("serving_path") or "-"
        lines.append("gate: %s, serving path %s (reasons: %s)" % (entry.get("verdict"), serving, codes))
    doctor_hosts = [h for h in ((report.get("doctor") or {}).get("hosts") or []) if h.get("host") == host]
    if not doctor_hosts:
        problems.append("the report has no doctor section for %s" % host)
    else:
        lines.append("doctor: %s" % doctor_hosts[0].get("status"))
        for instance in doctor_hosts[0].get("instances") or []:
            for finding in instance.get("findings") or []:
                note = ""
                if finding.get("check") in DOCKER_CHECKS and not docker:
                    note = " [needs Docker, which this machine lacks: not judged here]"
                cause = " ".join(str(finding.get("cause") or "").split())
                if len(cause) > 240:
                    cause = cause[:237] + "..."
                lines.append("  %s: %s%s: %s" % (finding.get("check"), finding.get("status"), note, cause))
    for problem in problems:
        lines.append("NOT IDENTIFIED: " + problem)
    return not problems, lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report")
    parser.add_argument("smi")
    parser.add_argument("--docker", choices=("yes", "no"), default="yes")
    parser.add_argument("--host", default="localhost")
    args = parser.parse_args(argv)
    try:
        with open(args.report) as handle:
            report = json.load(handle)
        with open(args.smi) as handle:
            smi = read_smi(handle.read())
    except (IOError, OSError, ValueError) as exc:
        print("doctor_check: %s" % exc, file=sys.stderr)
        return 2
    ok, lines = judge(report, smi, docker=args.docker == "yes", host=args.host)
    for line in lines:
        print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
