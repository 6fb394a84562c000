#!/usr/bin/env bash
# The sandbox lab: labfleet.vllm end to end on this machine, no GPU needed (docs/demo.md).
#
#   scripts/demo.sh [up]        make demo             start the lab and run site.yml on it
#   scripts/demo.sh clean       make demo-clean       remove everything `up` made
#   scripts/demo.sh screenshot  make demo-screenshot  docs/images/fleet-report.png (and -gateway.png) from the HTML report
#
# `up` installs what it needs (.venv, a Docker engine, the Debian 12 base image), starts three
# systemd containers with FAKE GPUs (test fixtures from tests/) and a gateway container, writes
# inventories/sandbox/, prepares the hosts (tests/sandbox/prepare.yml), then runs the real product command
#   ansible-playbook site.yml -i inventories/sandbox
# calls the served API once per deployed host and once through the gateway, and checks each host's
# outcome in the report. Then, while scripts/gateway-load.py streams completions through the gateway:
# site.yml rolls the fleet to stand-in version 2 (the drain on: 0 failed expected), and back to 1 with
# the drain off (the failures the drain prevents); the figures go into the report; one host's server is
# killed (docker kill) and the gateway routes around it. Last, the read-only playbooks on the lab it
# left: playbooks/doctor.yml (a verdict and the fix per check, per host) and playbooks/benchmark.yml
# (baseline or A/B, a chart per serving host), and checks that the report links each chart.
# Everything it starts carries the label org.labfleet.demo=1. A second `up` reuses the
# containers, the image and the tarball.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "${root}"
label=org.labfleet.demo=1
network=labfleet-demo
inventory=inventories/sandbox
hosts=(demo-v100-a demo-p100 demo-v100-b)
# The switch for a host group (make demo DEMO_GROUP=1): three more 2x V100 hosts serving the model
# together over a real Ray cluster (pipeline parallel 3 x tensor parallel 2; docs/groups.md).
demo_group=${DEMO_GROUP:-0}
case "${demo_group}" in 1|true|yes|on) demo_group=1 ;; *) demo_group=0 ;; esac
[ "${demo_group}" = 0 ] || hosts+=(demo-group-1 demo-group-2 demo-group-3)
gateway=demo-gateway
# Streams at a time through the gateway while the fleet is upgraded or a host is killed.
load_concurrency=4
export PATH="${root}/.venv/bin:${PATH}" ANSIBLE_CONFIG="${root}/ansible.cfg" ANSIBLE_FORCE_COLOR=0 PY_COLORS=0

started=$(date +%s)
log() { printf '\ndemo [+%ss]: %s\n' "$(( $(date +%s) - started ))" "$*"; }

up() {
  local prepare=() tarball=.cache/sandbox/openai-standin-2.tar h

  log "controller: .venv, Docker engine, base image"
  make --no-print-directory -s venv
  scripts/ensure-docker.sh
  molecule/images/build.sh bookworm

  log "the lab: network ${network}, containers ${hosts[*]}, inventory ${inventory}/"
  ansible-playbook tests/sandbox/lab.yml -i localhost, -e labfleet_demo_group="$([ "${demo_group}" = 1 ] && echo true || echo false)"

  for h in "${hosts[@]}"; do
    docker exec "${h}" test -f /etc/labfleet-sandbox-prepared 2>/dev/null || prepare+=("${h}")
  done
  if [ ${#prepare[@]} -gt 0 ] || [ ! -f "${tarball}" ]; then
    log "prepare (test fixtures: fake GPUs, fake toolkit repository, model, stand-in tarball): ${prepare[*]:-controller only}"
    # The Molecule prepare playbooks that tests/sandbox/prepare.yml reuses find the fixtures here.
    MOLECULE_PROJECT_DIRECTORY="${root}" ansible-playbook tests/sandbox/prepare.yml -i "${inventory}" \
      --limit "$(IFS=,; echo "localhost,${prepare[*]:-}")"
  else
    log "prepare: every host is prepared already and the tarball exists"
  fi

  log "ansible-playbook site.yml -i ${inventory}"
  local rc=0
  ansible-playbook site.yml -i "${inventory}" || rc=$?

  log "the served API, from this controller"
  for h in $(report_allowed); do
    call_api "${h}" "$(container_ip "${h}")" 8000 || rc=1
  done

  log "outcome per host (expected: ${inventory}/hosts.yml, found: reports/fleet-report.json)"
  check_outcomes || rc=1
  if [ "${demo_group}" = 1 ]; then
    log "the host group vllm_group_demo: planned as one, rolled out as one, a completion through every member"
    check_group || rc=1
  fi

  mkdir -p .cache/sandbox
  log "the gateway (${gateway}): one address for the fleet"
  call_api "${gateway}" "$(container_ip "${gateway}")" 8080 || rc=1

  log "upgrade under load without the drain (vllm_server_drain=false): site.yml rolls every serving host to stand-in version 2 while ${load_concurrency} streams run through the gateway - the failures the drain prevents"
  upgrade_under_load 2 off || rc=1
  log "the same with the drain (and the canary's 10 % share), back to version 1"
  upgrade_under_load 1 on || rc=1
  log "the figures into the report (playbooks/report.yml with fleet_report_update)"
  ansible-playbook playbooks/report.yml -i "${inventory}" -e fleet_report_update=true \
    -e @.cache/sandbox/gateway-load-vars.json >.cache/sandbox/report-update.log 2>&1 \
    || { tail -n 20 .cache/sandbox/report-update.log; rc=1; }

  log "a host killed under load (docker kill of demo-v100-a's server)"
  killed_host demo-v100-a || rc=1

  log "ansible-playbook playbooks/doctor.yml -i ${inventory} --check (read-only diagnosis)"
  ansible-playbook playbooks/doctor.yml -i "${inventory}" --check >.cache/sandbox/doctor.log 2>&1 \
    || { tail -n 40 .cache/sandbox/doctor.log; rc=1; }
  report_doctor || rc=1

  log "ansible-playbook playbooks/benchmark.yml -i ${inventory} (streamed load; the first run is the baseline)"
  ansible-playbook playbooks/benchmark.yml -i "${inventory}" >.cache/sandbox/benchmark.log 2>&1 \
    || { tail -n 40 .cache/sandbox/benchmark.log; rc=1; }
  check_charts || rc=1

  log "the fleet report"
  for f in reports/fleet-report.md reports/fleet-report.html reports/benchmarks/*.png; do
    [ -f "${f}" ] && echo "  ${root}/${f}"
  done
  local outcome="done"
  [ "${rc}" -eq 0 ] || outcome=FAILED
  echo "demo: ${outcome} in $(( $(date +%s) - started )) s"
  return "${rc}"
}

container_ip() {
  docker inspect --format "{{ (index .NetworkSettings.Networks \"${network}\").IPAddress }}" "$1"
}

# site.yml to stand-in version $1 with the drain on|off ($2) while scripts/gateway-load.py streams
# completions through the gateway; its line is printed and its figures kept for the report.
upgrade_under_load() {
  local version=$1 drain=$2 pid rc=0 out=".cache/sandbox/upgrade-under-load-$2.json"
  python3 scripts/gateway-load.py --url "http://$(container_ip "${gateway}"):8080" --model quasar \
    --concurrency "${load_concurrency}" --max-tokens 100 --drain "${drain}" --out "${out}" \
    --key-file "${inventory}/group_vars/vllm_hosts/api_key.yml" &
  pid=$!
  sleep 5
  kill -USR1 "${pid}"
  # With the drain, the canary also takes a 10 % share of the requests for 5 s before the next batch.
  ansible-playbook site.yml -i "${inventory}" -e labfleet_sandbox_version="${version}" \
    -e vllm_server_drain="$([ "${drain}" = on ] && echo true || echo false)" \
    -e labfleet_rollout_canary_share="$([ "${drain}" = on ] && echo 10 || echo 0)" -e labfleet_rollout_canary_soak_s=5 \
    >".cache/sandbox/upgrade-${drain}.log" 2>&1 || { tail -n 30 ".cache/sandbox/upgrade-${drain}.log"; rc=1; }
  python3 - reports/fleet-report.json <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
for d in (doc.get("gateway") or {}).get("drains", []):
    print("  drain of %s/%s in %s: %s after %s s (%s in flight at the start, %s at the end)" % (
        d["host"], d["instance"], d["gateway"], d["outcome"], d["waited_s"], d["in_flight_at_start"], d["in_flight_at_end"]))
for h in doc["hosts"]:
    canary = (h.get("rollout_status") or {}).get("canary")
    if canary:
        print("  canary %s: a %s %% share (weight %s) for %s s: %s request(s), %s error(s)" % (
            h["host"], canary["share_percent"], canary["weights"], canary["soak_s"], canary["requests"], canary["errors"]))
EOF
  sleep 3
  kill -TERM "${pid}"
  wait "${pid}" || rc=1
  python3 - .cache/sandbox/upgrade-under-load-on.json .cache/sandbox/upgrade-under-load-off.json \
    .cache/sandbox/gateway-load-vars.json <<'EOF'
import json, os, sys
runs = [json.load(open(p)) for p in sys.argv[1:3] if os.path.exists(p)]
json.dump({"fleet_report_gateway_load": runs}, open(sys.argv[3], "w"))
EOF
  # With the drain, nothing may fail.
  if [ "${drain}" = on ] && ! python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["failed"] != 0)' "${out}"; then
    echo "  EXPECTED 0 failed with the drain"
    rc=1
  fi
  return "${rc}"
}

# docker kill of host $1's server under load: failed requests (at most those in flight on it), when the
# gateway stopped sending it requests, and that it came back only after it served again.
killed_host() {
  local host=$1 pid rc=0 out=.cache/sandbox/killed-host.json
  python3 scripts/gateway-load.py --url "http://$(container_ip "${gateway}"):8080" --model quasar \
    --concurrency "${load_concurrency}" --max-tokens 100 --label "host killed under load" --out "${out}" \
    --key-file "${inventory}/group_vars/vllm_hosts/api_key.yml" &
  pid=$!
  sleep 4
  python3 scripts/lib/killed_host_watch.py "${gateway}" "${host}" "$(container_ip "${host}")" "${pid}" \
    >.cache/sandbox/killed-host-watch.json || rc=1
  sleep 3
  kill -TERM "${pid}"
  wait "${pid}" || rc=1
  python3 - "${out}" .cache/sandbox/killed-host-watch.json <<'EOF' || rc=1
import json, sys
load, watch = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
interval_s = 1.0  # gateway_health_interval_ms of the sandbox's vllm_gateways
late = [o for o in load["failed_offsets_s"] if o > 2 * interval_s]
ok = (load["failed"] <= watch["in_flight_at_kill"] and not late and watch["in_rotation_s"] is not None
      and watch["serving_again_s"] is not None and watch["in_rotation_s"] >= watch["serving_again_s"])
print("  %d request(s) in flight on it at the kill, %d failed (they began at %s s from the kill; none may begin later "
      "than 2 health-check intervals, %.0f s); the gateway marked it DOWN after %s s; it served again (its /health) "
      "after %s s and was back in rotation after %s s: %s"
      % (watch["in_flight_at_kill"], load["failed"], load["failed_offsets_s"], 2 * interval_s, watch["marked_down_s"],
         watch["serving_again_s"], watch["in_rotation_s"], "as expected" if ok else "NOT AS EXPECTED"))
sys.exit(0 if ok else 1)
EOF
  return "${rc}"
}

# The hosts the report says are allowed (the ones site.yml deployed to), but a host group's Ray workers:
# the group serves through its leader (check_group calls it).
report_allowed() {
  python3 - reports/fleet-report.json <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
workers = set(m for g in doc.get("groups", []) for m in g["members"] if m != g["leader"])
print(" ".join(h for h in doc["summary"]["allowed"] if h not in workers))
EOF
}

# One chat completion with the API key, as a client of the lab would make it.
call_api() {
  python3 - "$1" "$2" "$3" "${inventory}/group_vars/vllm_hosts/api_key.yml" <<'EOF'
import json, sys, urllib.request, yaml
host, ip, port, key_file = sys.argv[1:]
key = yaml.safe_load(open(key_file))["vllm_server_api_key"]
url = "http://%s:%s/v1/chat/completions" % (ip, port)
body = {"model": "quasar", "max_tokens": 16, "messages": [{"role": "user", "content": "Say hello to the lab."}]}
req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                             headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
try:
    with urllib.request.urlopen(req, timeout=30) as resp:
        answer = json.load(resp)
except Exception as exc:  # noqa: BLE001 (any failure is the demo's failure, said in one line)
    print("  %s: POST %s failed: %s" % (host, url, exc))
    sys.exit(1)
print("  %s: POST %s -> %r (%s tokens)" % (host, url, answer["choices"][0]["message"]["content"],
                                           answer.get("usage", {}).get("completion_tokens")))
EOF
}

# Each host's verdict and codes in the report against labfleet_demo_expect in the inventory.
check_outcomes() {
  python3 - "${inventory}/hosts.yml" reports/fleet-report.json <<'EOF'
import json, sys, yaml
hosts_file, report_file = sys.argv[1:]
group = yaml.safe_load(open(hosts_file))["vllm_hosts"]
inventory = dict(group["hosts"])
for child in (group.get("children") or {}).values():   # the host group (DEMO_GROUP=1)
    inventory.update(child["hosts"])
expect = {host: hostvars["labfleet_demo_expect"] for host, hostvars in inventory.items()}
report = {h["host"]: h for h in json.load(open(report_file))["hosts"]}
ok = True
for host, want in expect.items():
    verdict, *codes = want.split()
    got = report.get(host, {})
    found = [r["code"] for r in got.get("reasons", [])] + [w["code"] for w in got.get("warnings", [])]
    # An allowed host must also serve: deployed by this run, or already serving (a second run).
    outcome = got.get("outcome", got.get("verdict", "missing"))
    good = (got.get("verdict") == verdict and all(c in found for c in codes)
            and (verdict != "allowed" or outcome in ("deployed", "serving")))
    ok &= good
    print("  %-12s %-8s %-10s %-48s %s" % (host, got.get("verdict", "missing"), outcome, ", ".join(found) or "-",
                                           "as expected" if good else "EXPECTED " + want))
sys.exit(0 if ok else 1)
EOF
}

# The host group (DEMO_GROUP=1): the report's groups section (allowed, each stage and what its member staged,
# the rollout ok), the leader's server over the group (its flags), one completion on the leader, and the
# path it took through every member's stage (the stand-in's journal on the leader).
check_group() {
  local leader=demo-group-1 rc=0
  python3 - reports/fleet-report.json <<'EOF' || rc=1
import json, sys
doc = json.load(open(sys.argv[1]))
groups = [g for g in doc.get("groups", []) if g["name"] == "vllm_group_demo"]
if not groups:
    print("  the report has no group vllm_group_demo")
    sys.exit(1)
g = groups[0]
print("  %s: %s; %s" % (g["name"], "allowed" if g["allowed"] else "REFUSED", g["summary"]))
for st in g["stages"]:
    print("  stage %s on %s: layers %s-%s, %.1f GiB of weights per GPU, KV cache for %s tokens; stages %s at %s" % (
        st["stage"], st["member"], st["layers"][0], st["layers"][1], (st["weight_bytes_per_gpu"] or 0) / 2 ** 30,
        st["kv_tokens"], st["serving_path"], st["model_path"]))
rollout = g.get("rollout") or {}
hosts = dict((h["host"], h) for h in doc["hosts"])
leader = hosts.get(g["leader"]) or {}
flags = ((leader.get("serving") or {}).get("instances") or [{}])[0].get("flags", "")
print("  rollout: %s; leader %s: %s; flags: %s" % (rollout.get("state"), g["leader"], leader.get("outcome"), flags))
for name in g["members"][1:]:
    entry = hosts.get(name) or {}
    print("  %s: %s (%s)" % (name, entry.get("outcome"), entry.get("outcome_detail", "")[:140]))
ok = (g["allowed"] and rollout.get("state") == "ok" and leader.get("outcome") in ("deployed", "serving")
      and "--pipeline-parallel-size 3" in flags and "--distributed-executor-backend ray" in flags)
sys.exit(0 if ok else 1)
EOF
  call_api "${leader}" "$(container_ip "${leader}")" 8000 || rc=1
  # The stand-in logs the path of each completion through the stages (standin_ray.py).
  docker exec "${leader}" journalctl -u vllm.service --no-pager -o cat 2>/dev/null | grep "went through stages" \
    | tail -n 1 | sed 's/^/  /' | grep . || { echo "  the leader's journal shows no completion through the stages"; rc=1; }
  return "${rc}"
}

# Each host's doctor status and its first problem, from the report's doctor section.
report_doctor() {
  python3 - reports/fleet-report.json <<'EOF'
import json, sys
doctor = json.load(open(sys.argv[1])).get("doctor")
if not doctor:
    print("  the report has no doctor section")
    sys.exit(1)
for entry in doctor["hosts"]:
    problems = [f for i in entry["instances"] for f in i["findings"] if f["status"] == "problem"]
    said = ("; first problem: %s: %s" % (problems[0]["check"], problems[0]["cause"][:150])) if problems else ""
    print("  %-12s %s%s" % (entry["host"], entry["status"], said))
EOF
}

# Every serving host was measured, its chart is a PNG, and the report links it.
check_charts() {
  python3 - reports <<'EOF'
import json, os, sys
folder = sys.argv[1]
doc = json.load(open(os.path.join(folder, "fleet-report.json")))
markdown = open(os.path.join(folder, "fleet-report.md")).read()
# A host group's Ray workers serve through the group's leader, which is measured for the group.
workers = set(m for g in doc.get("groups", []) for m in g["members"] if m != g["leader"])
serving = [h["host"] for h in doc["hosts"] if h["outcome"] in ("deployed", "serving") and h["host"] not in workers]
bench = dict((h["host"], h) for h in (doc.get("benchmark") or {}).get("hosts", []))
ok = bool(serving)
for host in serving:
    entry = bench.get(host) or {}
    chart = entry.get("chart")
    path = os.path.join(folder, chart) if chart else None
    png = bool(path) and os.path.isfile(path) and open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    linked = bool(chart) and ("](%s)" % chart) in markdown
    levels = [lv for i in entry.get("instances", []) if i.get("benchmark") for lv in i["benchmark"]["levels"]]
    good = png and linked and levels
    ok &= bool(good)
    figures = ", ".join("c%d %.0f tok/s" % (lv["concurrency"], lv["aggregate_tok_s"]["level"] or 0) for lv in levels)
    print("  %-12s chart %s (%s), %s" % (host, path if png else "MISSING", "linked" if linked else "NOT LINKED",
                                         figures or "not measured"))
sys.exit(0 if ok else 1)
EOF
}

clean() {
  log "before: docker ps -a / docker volume ls / docker network ls --filter label=${label}"
  show
  log "removing the lab's containers (with their volumes), volumes, network and inventory"
  docker ps -aq --filter "label=${label}" | xargs -r docker rm -f -v >/dev/null
  docker volume ls -q --filter "label=${label}" | xargs -r docker volume rm >/dev/null
  docker network ls -q --filter "label=${label}" | xargs -r docker network rm >/dev/null
  # Everything under inventories/sandbox/ is generated, except its README.
  find "${inventory}" -mindepth 1 -maxdepth 1 ! -name README.md -exec rm -rf {} +
  log "after:"
  show
  echo "  ${inventory}/ holds: $(find "${inventory}" -mindepth 1 -printf '%P ')"
  echo "demo-clean: kept the caches shared with 'make test': .venv, the base and stand-in images, .cache/, reports/"
}

show() {
  docker ps -a --filter "label=${label}"
  docker volume ls --filter "label=${label}"
  docker network ls --filter "label=${label}"
}

screenshot() {
  local html=reports/fleet-report.html out=docs/images/fleet-report.png browser
  [ -f "${html}" ] || { echo "demo-screenshot: ${html} does not exist; run 'make demo' first" >&2; exit 1; }
  browser=$(command -v chromium || command -v chromium-browser || true)
  if [ -z "${browser}" ]; then
    log "installing Debian's chromium"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    browser=$(command -v chromium)
  fi
  mkdir -p "$(dirname "${out}")"
  "${browser}" --headless --no-sandbox --disable-gpu --hide-scrollbars --screenshot="${out}" \
    --window-size=1800,1000 "file://${root}/${html}" 2>/dev/null
  echo "demo-screenshot: ${root}/${out}"
  # The gateway section alone: the page's head and that section, in a copy (headless chromium does not
  # scroll to an anchor before it takes the picture).
  python3 - "${html}" .cache/sandbox/fleet-report-gateway.html <<'EOF'
import sys
page = open(sys.argv[1], encoding="utf-8").read()
start = page.index('<h2 id="gateway">')
end = min([i for i in (page.find('<h2 id="doctor">', start), page.find('<h2 id="benchmark">', start)) if i > 0]
          or [page.index("</body>")])
head = page[:page.index("<body>") + len("<body>")]
open(sys.argv[2], "w", encoding="utf-8").write(head + page[start:end] + "</body></html>\n")
EOF
  "${browser}" --headless --no-sandbox --disable-gpu --hide-scrollbars --screenshot="${out%.png}-gateway.png" \
    --window-size=1800,900 "file://${root}/.cache/sandbox/fleet-report-gateway.html" 2>/dev/null
  echo "demo-screenshot: ${root}/${out%.png}-gateway.png"
}

case "${1:-up}" in
  up) up ;;
  clean) clean ;;
  screenshot) screenshot ;;
  *) echo "usage: $0 [up|clean|screenshot]" >&2; exit 2 ;;
esac
