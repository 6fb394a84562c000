#!/usr/bin/env bash
# Fleet scale (issue 25): how the preflight's wall time, and a converged re-run of site.yml's, grow
# with the number of hosts.
#
#   scripts/bench-fleet.sh [run]   make bench-fleet   measure, print the tables, clean up
#   scripts/bench-fleet.sh clean                      remove what `run` made (containers, volumes, network, inventories)
#
# 1. The preflight. For each size of BENCH_FLEET_SIZES (default "1 4 16", run in ascending order so
#    that each size reuses the hosts of the one before), tests/sandbox/bench_fleet.yml starts that many
#    systemd containers with FAKE GPUs (bench-gpu-01..NN, network labfleet-bench, label
#    org.labfleet.bench=1) and writes .cache/bench-fleet/inventory-N/; then
#      ansible-playbook playbooks/preflight.yml -i .cache/bench-fleet/inventory-N -f 16
#    runs BENCH_FLEET_RUNS times (default 3) and the BEST (fastest) wall time counts: the run least
#    disturbed by other work on the machine. Each run must end with every host ALLOWED. Printed: a table
#    (hosts, forks, preflight s, per-host s, ratio to the smallest size, and where the CPU went), then
#    `ratio 16:1 = X.XX (goal <= 2.0): PASS|FAIL` and what limits it.
# 2. The converged re-run of site.yml (BENCH_FLEET_SITE=0 leaves it out). The preflight's hosts go;
#    for each size, tests/sandbox/bench_site.yml starts that many SERVING hosts (bench-site-01..NN: a
#    Docker engine inside each, the sandbox lab's deployment of the stand-in server) and writes
#    .cache/bench-fleet/site-inventory/; tests/sandbox/prepare.yml prepares the new ones (the demo's
#    fixtures); a first `site.yml -f 16` rolls out the hosts this size adds (timed: "first run s"), then
#      ansible-playbook site.yml -i .cache/bench-fleet/site-inventory -f 16
#    runs BENCH_FLEET_SITE_RUNS times (default 1), each of which must change nothing on any host
#    (PLAY RECAP changed=0, failed=0, unreachable=0 on every one): the converged re-run. Printed: the
#    same table for it, and its ratio 16:1 (the issue sets no goal for it; the figure is information).
# The figures go to .cache/bench-fleet/result.json, each run's log beside it. The exit status says
# whether the measurement worked, not whether the goal was met.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "${root}"
label=org.labfleet.bench=1
out=.cache/bench-fleet
# shellcheck disable=SC2086 # the sizes are words
sizes=$(printf '%s\n' ${BENCH_FLEET_SIZES:-1 4 16} | sort -n -u | tr '\n' ' ')
forks=${BENCH_FLEET_FORKS:-16}
runs=${BENCH_FLEET_RUNS:-3}
export PATH="${root}/.venv/bin:${PATH}" ANSIBLE_CONFIG="${root}/ansible.cfg" ANSIBLE_FORCE_COLOR=0 PY_COLORS=0
# The fixtures' root for the Molecule prepare playbook that bench_fleet.yml imports.
export MOLECULE_PROJECT_DIRECTORY="${root}"

started=$(date +%s)
log() { printf 'bench-fleet [+%ss]: %s\n' "$(( $(date +%s) - started ))" "$*"; }

site=${BENCH_FLEET_SITE:-1}
site_runs=${BENCH_FLEET_SITE_RUNS:-1}
site_inventory=${out}/site-inventory

run() {
  local n r inventory
  log "controller: .venv, Docker engine, base image; sizes: ${sizes}, forks ${forks}, best of ${runs} run(s)"
  make --no-print-directory -s venv
  scripts/ensure-docker.sh
  molecule/images/build.sh bookworm
  inotify_room
  mkdir -p "${out}"
  rm -f "${out}"/runs.jsonl "${out}"/result.json
  [ "${BENCH_FLEET_KEEP:-0}" = 1 ] || trap 'clean >/dev/null' EXIT

  for n in ${sizes}; do
    inventory=${out}/inventory-${n}
    log "${n} host(s): tests/sandbox/bench_fleet.yml (containers, inventory ${inventory}/, fake GPUs)"
    ansible-playbook tests/sandbox/bench_fleet.yml -i , -e "bench_fleet_size=${n}" >"${out}/lab-${n}.log" 2>&1 \
      || { tail -n 40 "${out}/lab-${n}.log"; return 1; }
    for r in $(seq "${runs}"); do
      measure preflight "${n}" "${r}" "${inventory}" || return 1
    done
  done
  [ "${site}" = 0 ] || site_run || return 1
  report
}

# The converged re-run of site.yml at each size, on serving hosts (bench-site-NN) that replace the
# preflight's (bench-gpu-NN): what a lab admin's daily `ansible-playbook site.yml` costs once the fleet is up.
site_run() {
  local n r h prepare
  log "site.yml: the preflight's hosts go; serving hosts (a Docker engine inside each) for sizes ${sizes}"
  docker ps -aq --filter "label=${label}" --filter name=bench-gpu- | xargs -r docker rm -f -v >/dev/null
  for n in ${sizes}; do
    log "${n} serving host(s): tests/sandbox/bench_site.yml (containers, volumes, inventory ${site_inventory}/)"
    ansible-playbook tests/sandbox/bench_site.yml -i localhost, -e "bench_fleet_size=${n}" >"${out}/site-lab-${n}.log" 2>&1 \
      || { tail -n 40 "${out}/site-lab-${n}.log"; return 1; }
    prepare=()
    for h in $(seq -f 'bench-site-%02g' 1 "${n}"); do
      docker exec "${h}" test -f /etc/labfleet-sandbox-prepared 2>/dev/null || prepare+=("${h}")
    done
    if [ ${#prepare[@]} -gt 0 ]; then
      log "prepare (tests/sandbox/prepare.yml: fake GPUs, fake toolkit repository, model, stand-in tarball): ${prepare[*]}"
      MOLECULE_PROJECT_DIRECTORY="${root}" ansible-playbook tests/sandbox/prepare.yml -i "${site_inventory}" \
        --limit "$(IFS=,; echo "localhost,${prepare[*]}")" >"${out}/site-prepare-${n}.log" 2>&1 \
        || { tail -n 40 "${out}/site-prepare-${n}.log"; return 1; }
    fi
    log "${n} serving host(s): site.yml, the first run (rolls out the hosts this size adds)"
    measure site-first "${n}" 1 "${site_inventory}" || return 1
    for r in $(seq "${site_runs}"); do
      measure site "${n}" "${r}" "${site_inventory}" || return 1
    done
  done
}

# Each systemd container holds about 7 inotify instances, all of them root's: Linux's default of 128 per
# user stops systemd (exit 255) in the 16th container or so when a few other systemd containers run.
inotify_room() {
  local have
  have=$(cat /proc/sys/fs/inotify/max_user_instances)
  [ "${have}" -lt 1024 ] || return 0
  if [ "$(id -u)" -eq 0 ]; then
    log "raising fs.inotify.max_user_instances from ${have} to 1024 (about 7 per systemd container)"
    sysctl -qw fs.inotify.max_user_instances=1024
  else
    log "WARNING: fs.inotify.max_user_instances is ${have}: systemd may exit in the larger fleets (raise it to 1024 as root)"
  fi
}

# One timed run of the preflight; appends a JSON line to runs.jsonl: the wall time, and the CPU the
# whole machine spent meanwhile, split into the controller (ansible-playbook, its forks and their
# `docker` CLI calls), the Docker engine (dockerd, containerd, the bench containers' shims and runc)
# and the hosts (the bench containers' cgroups: the modules' Python), the rest being "other".
# kind: preflight (playbooks/preflight.yml, every host ALLOWED), site-first (site.yml's first run at this
# size, rc 0) or site (site.yml converged: every host changed=0, failed=0, unreachable=0).
measure() {
  local kind=$1 n=$2 r=$3 inventory=$4
  python3 - "${kind}" "${n}" "${r}" "${forks}" "${inventory}" "${out}" <<'EOF'
import json, os, re, resource, subprocess, sys, time
kind, n, r, forks, inventory, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
HZ = os.sysconf("SC_CLK_TCK")

def proc_cpu(pid):  # [own, reaped children's] CPU seconds of a process
    try:
        f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
        return [(int(f[11]) + int(f[12])) / HZ, (int(f[13]) + int(f[14])) / HZ]
    except OSError:
        return [0.0, 0.0]

def cmdline(pid):
    try:
        return open("/proc/%d/cmdline" % pid, "rb").read().split(b"\0")
    except OSError:
        return []

def host_level(pid):  # not a process inside some container (Molecule's Docker-in-Docker engines)
    try:
        return "/docker/" not in open("/proc/%d/cgroup" % pid).read()
    except OSError:
        return False

ids = subprocess.run(["docker", "ps", "-q", "--no-trunc", "--filter", "label=org.labfleet.bench=1"],
                     capture_output=True, text=True, check=True).stdout.split()

def snapshot():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:8]]
    busy, idle = (v[0] + v[1] + v[2] + v[5] + v[6]) / HZ, (v[3] + v[4]) / HZ
    # A shim reaps runc and every `docker exec`'d process, whose CPU is also in the container's cgroup:
    # the engine's share is the shims' children less the hosts' (below).
    engine, shim_children = 0.0, 0.0
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        argv = cmdline(pid)
        name = os.path.basename(argv[0]).decode() if argv and argv[0] else ""
        if name in ("dockerd", "containerd") and host_level(pid):
            engine += sum(proc_cpu(pid))
        elif name == "containerd-shim-runc-v2" and any(a.decode() in ids for a in argv):
            own, children = proc_cpu(pid)
            engine, shim_children = engine + own, shim_children + children
    hosts = 0.0
    for cid in ids:  # cgroup v1 (cgroupfs), else v2 (cgroupfs or systemd driver)
        for path, scale in (("/sys/fs/cgroup/cpuacct/docker/%s/cpuacct.usage", 1e9), ("/sys/fs/cgroup/docker/%s/cpu.stat", 1e6),
                            ("/sys/fs/cgroup/system.slice/docker-%s.scope/cpu.stat", 1e6)):
            try:
                words = open(path % cid).read().split()
            except OSError:
                continue
            hosts += int(words[words.index("usage_usec") + 1] if "usage_usec" in words else words[0]) / scale
            break
    self_ = resource.getrusage(resource.RUSAGE_CHILDREN)
    return dict(busy=busy, idle=idle, engine=engine, shim_children=shim_children, hosts=hosts,
                controller=self_.ru_utime + self_.ru_stime)

load = open("/proc/loadavg").read().split()[0]
log = os.path.join(out, "%s-%d-%d.log" % (kind, n, r))
playbook = "playbooks/preflight.yml" if kind == "preflight" else "site.yml"
before, t0 = snapshot(), time.monotonic()
with open(log, "w") as f:
    rc = subprocess.run(["ansible-playbook", playbook, "-i", inventory, "-f", forks],
                        stdout=f, stderr=subprocess.STDOUT).returncode
wall, after = time.monotonic() - t0, snapshot()
cpu = {k: after[k] - before[k] for k in after}
cpu["engine"] += max(0.0, cpu.pop("shim_children") - cpu["hosts"])
cpu = {k: round(v, 1) for k, v in cpu.items()}
cpu["other"] = round(max(0.0, cpu["busy"] - cpu["engine"] - cpu["hosts"] - cpu["controller"]), 1)
text = open(log).read()
if kind == "preflight":
    good = sum(1 for line in text.splitlines() if "msg: 'bench-gpu-" in line and ": ALLOWED;" in line)
    what = "allowed"
else:  # the PLAY RECAP line of every bench host: converged is changed=0, and no host failed or unreachable
    recap = {m.group(1): {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
             for m in re.finditer(r"^(bench-site-\d+)\s*:\s*(.*)$", text, re.M)}
    ok = [h for h, c in recap.items() if c.get("failed", 1) == 0 and c.get("unreachable", 1) == 0
          and (kind == "site-first" or c.get("changed", 1) == 0)]
    good = len(ok)
    what = "rolled out" if kind == "site-first" else "converged (changed=0)"
print("  %2d host(s), %s run %d: %6.1f s, CPU %5.1f s busy (controller %.1f, engine %.1f, hosts %.1f, other %.1f), "
      "load %s before, %d/%d %s, rc %d" % (n, kind, r, wall, cpu["busy"], cpu["controller"], cpu["engine"], cpu["hosts"],
                                           cpu["other"], load, good, n, what, rc))
with open(os.path.join(out, "runs.jsonl"), "a") as f:
    f.write(json.dumps(dict(kind=kind, hosts=n, run=r, forks=int(forks), wall_s=round(wall, 2), rc=rc, good=good,
                            load_before=float(load), cpu_s=cpu)) + "\n")
if rc != 0 or good != n:
    print("  the run failed or not every host was %s: see %s" % (what, log))
    sys.exit(1)
EOF
}

# The tables, the goal line and result.json, from runs.jsonl. Each size's figure is its best (fastest) run,
# the one least disturbed by whatever else the machine ran; its CPU split comes from that run too. "own CPU"
# is the bench's own (controller + engine + hosts): it hardly depends on other load, and divided by the
# cores it is the least wall time the size can take on this machine (the "floor").
report() {
  python3 - "${out}" "$(( $(date +%s) - started ))" "$(nproc)" "${site}" <<'EOF'
import json, os, sys, time
out, elapsed, cores, site_on = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] != "0"
runs = [json.loads(line) for line in open(os.path.join(out, "runs.jsonl"))]

def table(kind, title, column):
    rows = []
    for n in sorted({r["hosts"] for r in runs if r["kind"] == kind}):
        mine = [r for r in runs if r["kind"] == kind and r["hosts"] == n]
        best = min(mine, key=lambda r: r["wall_s"])
        cpu = dict(best["cpu_s"], own=round(sum(best["cpu_s"][k] for k in ("controller", "engine", "hosts")), 1))
        first = [r["wall_s"] for r in runs if kind == "site" and r["kind"] == "site-first" and r["hosts"] == n]
        rows.append(dict(hosts=n, forks=best["forks"], wall_s=round(best["wall_s"], 1), runs_s=[r["wall_s"] for r in mine],
                         per_host_s=round(best["wall_s"] / n, 2), cpu_s=cpu, cpu_bound_floor_s=round(cpu["own"] / cores, 1),
                         load_before=[r["load_before"] for r in mine], **(dict(first_run_s=first[0]) if first else {})))
    if not rows:
        return rows
    for row in rows:
        row["ratio"] = round(row["wall_s"] / rows[0]["wall_s"], 2)
    print("\n%s, best of %d run(s), %d CPU cores" % (title, len(rows[0]["runs_s"]), cores))
    print("hosts  forks  %11s  per-host s  ratio  own CPU s (controller / engine / hosts)  floor s  other CPU s  runs s%s"
          % (column, "  first run s" if kind == "site" else ""))
    for row in rows:
        c = row["cpu_s"]
        split = "%.1f / %.1f / %.1f" % (c["controller"], c["engine"], c["hosts"])
        print("%5d  %5d  %11.1f  %10.2f  %5.2f  %9.1f (%-28s  %7.1f  %11.1f  %-6s%s" % (
            row["hosts"], row["forks"], row["wall_s"], row["per_host_s"], row["ratio"], c["own"], split + ")",
            row["cpu_bound_floor_s"], c["other"], " ".join("%.1f" % s for s in row["runs_s"]),
            "  %11.1f" % row["first_run_s"] if "first_run_s" in row else ""))
    return rows

def ratio_16_1(rows, goal):
    by = {row["hosts"]: row for row in rows}
    if 1 not in by or 16 not in by:
        print("ratio 16:1: not measured (BENCH_FLEET_SIZES holds no 1 and 16)")
        return None
    ratio = round(by[16]["wall_s"] / by[1]["wall_s"], 2)
    if goal is None:
        print("ratio 16:1 = %.2f (no goal set for it: information)" % ratio)
        return dict(ratio_16_1=ratio)
    print("ratio 16:1 = %.2f (goal <= %.1f): %s" % (ratio, goal, "PASS" if ratio <= goal else "FAIL"))
    return dict(ratio_16_1=ratio, goal=goal, passed=ratio <= goal)

def limit(rows, what):
    if len(rows) < 2:
        return None
    base, top = rows[0], rows[-1]
    span = top["hosts"] - base["hosts"]
    lim = dict(cpu_s_per_added_host=round((top["cpu_s"]["own"] - base["cpu_s"]["own"]) / span, 2),
               module_cpu_s_per_added_host=round((top["cpu_s"]["hosts"] - base["cpu_s"]["hosts"]) / span, 2),
               floor_ratio=round(top["cpu_bound_floor_s"] / base["wall_s"], 2))
    print("limit: CPU. Each host beyond %d adds %.1f CPU-s (%.1f of them its modules' Python inside the host): %.1f s of "
          "wall on %d cores. At %d hosts the bench's own CPU alone needs %.1f s, %.2f times the %d-host %s"
          % (base["hosts"], lim["cpu_s_per_added_host"], lim["module_cpu_s_per_added_host"],
             lim["cpu_s_per_added_host"] / cores, cores, top["hosts"], top["cpu_bound_floor_s"], lim["floor_ratio"],
             base["hosts"], what))
    if any(r["cpu_s"]["other"] > 0.1 * r["wall_s"] * cores for r in rows):
        print("NOTE: other processes took more than 10%% of the CPU during some size's best %s (column 'other CPU s')" % what)
    return lim

rows = table("preflight", "Fleet scale: ansible-playbook playbooks/preflight.yml", "preflight s")
goal, lim = ratio_16_1(rows, 2.0), limit(rows, "run")
result = dict(date=time.strftime("%Y-%m-%d %H:%M:%S %Z"), cores=cores, playbook="playbooks/preflight.yml",
              statistic="best of %d runs" % len(rows[0]["runs_s"]), sizes=rows, goal=goal, limit=lim)
if site_on:
    site_rows = table("site", "Converged re-run: ansible-playbook site.yml (every host changed=0; 'first run s' "
                      "rolled out the hosts the size added)", "re-run s")
    result["site_rerun"] = dict(measured=True, playbook="site.yml", sizes=site_rows, ratio=ratio_16_1(site_rows, None),
                                limit=limit(site_rows, "re-run"),
                                statistic="best of %d runs" % len(site_rows[0]["runs_s"]))
    print("(the servers' own containers inside the hosts count as 'other': their cgroups are not the hosts')")
else:
    print("site.yml re-run: not measured (BENCH_FLEET_SITE=0)")
    result["site_rerun"] = dict(measured=False, why="BENCH_FLEET_SITE=0")
result["elapsed_s"] = elapsed
json.dump(result, open(os.path.join(out, "result.json"), "w"), indent=2)
print("figures: %s/result.json; logs: %s/" % (out, out))
EOF
  log "done"
}

clean() {
  log "removing the containers, volumes and the network labelled ${label}, and the bench inventories"
  docker ps -aq --filter "label=${label}" | xargs -r docker rm -f -v >/dev/null
  docker volume ls -q --filter "label=${label}" | xargs -r docker volume rm >/dev/null
  docker network ls -q --filter "label=${label}" | xargs -r docker network rm >/dev/null
  rm -rf "${out}"/inventory-* "${out}"/reports-* "${site_inventory}" "${out}"/site-reports-*
  docker ps -a --filter "label=${label}"
  docker volume ls --filter "label=${label}"
  docker network ls --filter "label=${label}"
}

case "${1:-run}" in
  run) run ;;
  clean) clean ;;
  *) echo "usage: $0 [run|clean]" >&2; exit 2 ;;
esac
