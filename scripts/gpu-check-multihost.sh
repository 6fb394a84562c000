#!/usr/bin/env bash
# GPU check of one model across hosts (issue 27: pipeline parallel over Ray). NOT part of `make test`: it
# needs a real lab - three hosts of 2x Tesla V100 (or any hosts with identical NVIDIA GPUs), reachable by
# Ansible, declared as one host group - and it deploys onto them. Run it from this checkout, on the
# controller. It
#   1. checks the controller (ansible-core >= 2.16, ansible-playbook, ansible-inventory, python3, the
#      community.docker collection), the inventory (GROUP: an inventory group of at least two hosts of
#      vllm_hosts, named in labfleet_host_groups) and that Ansible reaches every member;
#   2. prints the gate's plan: ansible-playbook playbooks/preflight.yml -i INVENTORY (read-only; the group
#      play's summary: PP x TP, KV tokens, the serving path and why, the members' reachability probe);
#      stops when the group is refused;
#   3. deploys: ansible-playbook site.yml -i INVENTORY;
#   4. on the members: labfleet-ray.service active, /etc/labfleet/ray/group.json; on the leader:
#      `docker exec labfleet-ray ray status` shows every member's node and all gpus_total GPUs, the vLLM
#      unit and its running container carry --pipeline-parallel-size, --tensor-parallel-size and
#      --distributed-executor-backend ray as the plan says, and the per-stage layout: the plan's stages
#      (member, layers) with what the leader's vLLM log says per worker (weights loaded, KV cache blocks);
#   5. asks one completion through the leader's API (from the leader: vLLM listens on its bind address,
#      127.0.0.1 by default) and, when the inventory has vllm_gateways hosts, one through the first gateway
#      (from this machine);
#   6. runs playbooks/doctor.yml: the group's four checks (ray_membership, nccl_interface, group_ports,
#      stage_stopped) must not report a problem;
#   7. stops STOP_MEMBER's labfleet-ray.service, runs the doctor again and checks that it names the stopped
#      stage ("stage N (member X, layers a-b) stopped"), then starts it again, waits until Ray shows every
#      GPU again and the leader's vLLM server answers /health (restarting its unit once if it does not).
#      The stopped unit is started again on any exit.
#
#   scripts/gpu-check-multihost.sh [INVENTORY]
#
# Environment: INVENTORY (the inventory file or directory; or the first argument), GROUP (the host group;
# default the first of labfleet_host_groups), API_KEY_FILE (a file holding the vLLM API key,
# vllm_server_api_key; empty: no key; the key is never put on a command line: Ansible reads the file on
# the controller, the request runs on the leader with no_log), GATEWAY_API_KEY_FILE (the key the gateway
# takes, one of gateway_api_keys; default API_KEY_FILE), GATEWAY_URL (default http(s)://<first gateway's
# ansible_host>:<its gateway_port or 8080>), INSTANCE (the leader's vLLM instance: unit INSTANCE.service,
# container INSTANCE; default vllm), STOP_MEMBER (default the last member), TIMEOUT_S (each wait: Ray's
# GPUs, vLLM's /health, one completion; default 900), SKIP_DEPLOY=1 (check a group that is already
# deployed: no site.yml), KEEP=1 (keep the work directory: the playbooks' logs). Exit status 0 when every
# check passed, 1 when one failed (the summary lists them), 2 when the controller or the inventory is not
# ready.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
INVENTORY=${1:-${INVENTORY:-}}
GROUP=${GROUP:-}
API_KEY_FILE=${API_KEY_FILE:-}
GATEWAY_API_KEY_FILE=${GATEWAY_API_KEY_FILE:-$API_KEY_FILE}
GATEWAY_URL=${GATEWAY_URL:-}
INSTANCE=${INSTANCE:-vllm}
STOP_MEMBER=${STOP_MEMBER:-}
TIMEOUT_S=${TIMEOUT_S:-900}
SKIP_DEPLOY=${SKIP_DEPLOY:-0}

say() { printf 'gpu-check-multihost: %s\n' "$*"; }
usage() { say "$*" >&2; say "usage: [GROUP=...] [API_KEY_FILE=...] $0 INVENTORY" >&2; exit 2; }
failed=()
pass() { say "PASS: $*"; }
bad() { say "FAIL: $*"; failed+=("$*"); }
finish() {
    if ((${#failed[@]} == 0)); then
        say "OK: every check passed (group $GROUP, leader ${leader:-?})"
        exit 0
    fi
    say "FAILED: ${#failed[@]} check(s):"
    local item
    for item in "${failed[@]}"; do say "  - $item"; done
    exit 1
}
# A step without which the rest cannot run.
fail() { bad "$*"; finish; }

[[ -n "$INVENTORY" ]] || usage "no inventory: give INVENTORY or the first argument"
[[ -e "$INVENTORY" ]] || usage "inventory $INVENTORY does not exist"
[[ "$TIMEOUT_S" =~ ^[0-9]+$ ]] || usage "TIMEOUT_S must be a number of seconds, got $TIMEOUT_S"
for file in "$API_KEY_FILE" "$GATEWAY_API_KEY_FILE"; do
    [[ -z "$file" || -r "$file" ]] || usage "cannot read the API key file $file"
done
# Absolute paths: the playbooks run from the checkout's top.
INVENTORY=$(realpath "$INVENTORY")
[[ -z "$API_KEY_FILE" ]] || API_KEY_FILE=$(realpath "$API_KEY_FILE")
[[ -z "$GATEWAY_API_KEY_FILE" ]] || GATEWAY_API_KEY_FILE=$(realpath "$GATEWAY_API_KEY_FILE")

# The venv's Ansible (make venv), else the one on PATH.
bin() { if [[ -x "$top/.venv/bin/$1" ]]; then echo "$top/.venv/bin/$1"; else command -v "$1" || true; fi; }
ANSIBLE=${ANSIBLE:-$(bin ansible)}
ANSIBLE_PLAYBOOK=${ANSIBLE_PLAYBOOK:-$(bin ansible-playbook)}
ANSIBLE_INVENTORY=${ANSIBLE_INVENTORY:-$(bin ansible-inventory)}
PYTHON=${PYTHON:-$( [[ -x "$top/.venv/bin/python" ]] && echo "$top/.venv/bin/python" || command -v python3 || true)}

work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-multihost.XXXXXX")
chmod 700 "$work"
stopped_member=""
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
    if [[ -n "$stopped_member" ]]; then
        say "starting labfleet-ray.service on $stopped_member again (the check stopped it)"
        "$ANSIBLE" "$stopped_member" -i "$INVENTORY" -b -m ansible.builtin.systemd_service \
            -a "name=labfleet-ray.service state=started" >"$work/restart-on-exit.log" 2>&1 \
            || say "WARNING: could not start labfleet-ray.service on $stopped_member: see $work/restart-on-exit.log"
        KEEP=1
    fi
    if [[ "${KEEP:-0}" == 1 ]]; then say "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
cd "$top"
export ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0

# 1. the controller and the inventory ---------------------------------------------------------------
say "--- 1. the controller and the inventory"
for tool in ANSIBLE ANSIBLE_PLAYBOOK ANSIBLE_INVENTORY PYTHON; do
    [[ -n "${!tool}" && -x "${!tool}" ]] || usage "no ${tool,,} (make venv, or install ansible-core >= 2.16)"
done
core=$("$ANSIBLE" --version 2>/dev/null | sed -n 's/^ansible \[core \([0-9.]*\)\].*/\1/p')
"$PYTHON" -c 'import sys; v = tuple(int(x) for x in sys.argv[1].split(".")[:2]); sys.exit(v < (2, 16))' "${core:-0.0}" \
    || usage "ansible-core ${core:-unknown} is older than 2.16"
"${ANSIBLE%/*}/ansible-galaxy" collection list community.docker 2>/dev/null | grep -q '^community\.docker ' \
    || usage "the community.docker collection is missing (ansible-galaxy collection install community.docker)"
say "ansible-core $core ($ANSIBLE)"

"$ANSIBLE_INVENTORY" -i "$INVENTORY" --list >"$work/inventory.json" 2>"$work/inventory.err" \
    || { cat "$work/inventory.err" >&2; usage "ansible-inventory cannot read $INVENTORY"; }
# GROUP, its members in inventory order, the leader the preflight will choose (the first), gateways.
members=() declared="" not_vllm="" gateway="" gateway_url_default=""
inv=$("$PYTHON" - "$work/inventory.json" "$GROUP" <<'EOF'
import json, shlex, sys
inv = json.load(open(sys.argv[1]))
meta = inv.get("_meta", {}).get("hostvars", {})

def hosts(group, seen=None):
    seen = seen if seen is not None else set()
    if group in seen:
        return []
    seen.add(group)
    entry = inv.get(group) or {}
    out = list(entry.get("hosts") or [])
    for child in entry.get("children") or []:
        out += [h for h in hosts(child, seen) if h not in out]
    return out

group = sys.argv[2]
members = hosts(group) if group else []
declared = []
for name in members or list(meta):
    declared = meta.get(name, {}).get("labfleet_host_groups") or declared
    if declared:
        break
if not group:
    for name in meta:
        declared = meta[name].get("labfleet_host_groups") or []
        if declared:
            break
    group = declared[0] if declared else ""
    members = hosts(group) if group else []
vllm = hosts("vllm_hosts")
gateways = hosts("vllm_gateways")
gw = gateways[0] if gateways else ""
gw_vars = meta.get(gw, {})
scheme = "https" if gw_vars.get("gateway_tls_certificate") else "http"
gw_url = "%s://%s:%s" % (scheme, gw_vars.get("ansible_host", gw), gw_vars.get("gateway_port", 8080)) if gw else ""
print("GROUP=%s" % shlex.quote(group))
print("members=(%s)" % " ".join(shlex.quote(m) for m in members))
print("declared=%s" % shlex.quote(" ".join(declared)))
print("not_vllm=%s" % shlex.quote(" ".join(m for m in members if m not in vllm)))
print("gateway=%s" % shlex.quote(gw))
print("gateway_url_default=%s" % shlex.quote(gw_url))
EOF
)
eval "$inv"
[[ -n "$GROUP" ]] || usage "no group: set GROUP, or name one in labfleet_host_groups (docs/deploy_gate.md, Declaring a group)"
((${#members[@]} >= 2)) || usage "$GROUP is not an inventory group of at least two hosts in $INVENTORY"
[[ " $declared " == *" $GROUP "* ]] \
    || usage "$GROUP is not in labfleet_host_groups (${declared:-none}): the preflight would not plan it as a group"
[[ -z "$not_vllm" ]] || usage "members not in vllm_hosts: $not_vllm"
GATEWAY_URL=${GATEWAY_URL:-$gateway_url_default}
STOP_MEMBER=${STOP_MEMBER:-${members[${#members[@]} - 1]}}
[[ " ${members[*]} " == *" $STOP_MEMBER "* ]] || usage "STOP_MEMBER $STOP_MEMBER is not a member of $GROUP"
say "group $GROUP: ${members[*]} (the first is the leader); gateway: ${gateway:-none}"
members_pattern=$(IFS=:; echo "${members[*]}")
"$ANSIBLE" "$members_pattern" -i "$INVENTORY" -m ansible.builtin.ping >"$work/ping.log" 2>&1 \
    || { grep -E 'UNREACHABLE|FAILED' "$work/ping.log" >&2 || true; usage "Ansible does not reach every member (above)"; }
pass "the controller is ready and Ansible reaches ${members[*]}"

# 2. the gate's plan -----------------------------------------------------------------------------------
say "--- 2. the gate's plan: ansible-playbook playbooks/preflight.yml -i $INVENTORY"
rc=0
"$ANSIBLE_PLAYBOOK" -i "$INVENTORY" playbooks/preflight.yml >"$work/preflight.log" 2>&1 || rc=$?
# The group play's summary (the task "Show the group's plan"), as it printed it.
plan=$("$PYTHON" - "$work/preflight.log" "$GROUP" <<'EOF'
import sys
text = open(sys.argv[1], errors="replace").read()
start = text.find("Show the group's plan")
if start < 0:
    sys.exit(0)
block = text[start:]
end = min([i for i in (block.find("\nTASK ["), block.find("\nPLAY [")) if i > 0] or [len(block)])
print(block[:end].split("\n", 1)[-1].rstrip())
EOF
)
[[ -n "$plan" ]] && printf '%s\n' "$plan" | sed 's/^/    /'
((rc == 0)) || { tail -n 40 "$work/preflight.log"; fail "playbooks/preflight.yml exited $rc (log above)"; }
[[ "$plan" == *"$GROUP: group of ${#members[@]}"* ]] \
    || fail "the gate does not plan $GROUP as a group of ${#members[@]} (the plan above says why)"
pass "the gate plans $GROUP as one group"

# 3. the deployment ------------------------------------------------------------------------------------
if [[ "$SKIP_DEPLOY" == 1 ]]; then
    say "--- 3. the deployment: skipped (SKIP_DEPLOY=1)"
else
    say "--- 3. the deployment: ansible-playbook site.yml -i $INVENTORY (log: $work/site.log)"
    rc=0
    started=$(date +%s)
    "$ANSIBLE_PLAYBOOK" -i "$INVENTORY" site.yml >"$work/site.log" 2>&1 || rc=$?
    sed -n '/^PLAY RECAP/,$p' "$work/site.log" | sed 's/^/    /'
    ((rc == 0)) || { KEEP=1; tail -n 60 "$work/site.log"; fail "site.yml exited $rc (log above, $work/site.log)"; }
    pass "site.yml deployed in $(($(date +%s) - started)) s"
fi

# 4. what runs on the members ------------------------------------------------------------------------
# One playbook reads every member (read-only) and writes what it saw to $work/state.json on this machine.
cat >"$work/collect.yml" <<'EOF'
---
- name: Read the group's state (read-only)
  hosts: "{{ check_members }}"
  gather_facts: false
  become: true
  tasks:
    - name: The Ray unit
      ansible.builtin.command: systemctl is-active labfleet-ray.service
      register: ray_active
      changed_when: false
      failed_when: false
    - name: The group's record
      ansible.builtin.command: cat /etc/labfleet/ray/group.json
      register: group_json
      changed_when: false
      failed_when: false
    - name: Ray's view of the cluster (leader)
      ansible.builtin.command: docker exec labfleet-ray ray status
      register: ray_status
      changed_when: false
      failed_when: false
      when: inventory_hostname == check_leader
    - name: The vLLM container (leader)
      ansible.builtin.command: docker inspect {{ check_instance }}
      register: inspect
      changed_when: false
      failed_when: false
      when: inventory_hostname == check_leader
    - name: The vLLM unit (leader)
      ansible.builtin.command: systemctl cat {{ check_instance }}.service
      register: unit
      changed_when: false
      failed_when: false
      when: inventory_hostname == check_leader
    - name: The vLLM unit's log since it started (leader)
      ansible.builtin.shell: |
        set -o pipefail
        id=$(systemctl show -p InvocationID --value {{ check_instance }}.service)
        if [ -n "$id" ]; then journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID="$id"
        else journalctl --no-pager -o cat -n 5000 -u {{ check_instance }}.service; fi | tail -n 20000
      args:
        executable: /bin/bash
      register: journal
      changed_when: false
      failed_when: false
      when: inventory_hostname == check_leader
    - name: Write what was seen
      ansible.builtin.copy:
        content: >-
          {% set out = {} %}{% for name in check_members.split(':') %}{% set seen = {} %}{%
          for key in ['ray_active', 'group_json', 'ray_status', 'inspect', 'unit', 'journal'] %}{%
          set _ = seen.update({key: hostvars[name][key] | default({})}) %}{% endfor %}{%
          set _ = out.update({name: seen}) %}{% endfor %}{{ out | to_json }}
        dest: "{{ check_out }}"
        mode: "0600"
      delegate_to: localhost
      become: false
      run_once: true
EOF
collect() {  # collect LEADER OUT
    "$ANSIBLE_PLAYBOOK" -i "$INVENTORY" "$work/collect.yml" -e "check_members=$members_pattern" \
        -e "check_leader=$1" -e "check_instance=$INSTANCE" -e "check_out=$2" >"$work/collect.log" 2>&1
}
say "--- 4. the Ray cluster and the vLLM server"
leader=${members[0]}
collect "$leader" "$work/state.json" || { tail -n 30 "$work/collect.log"; fail "could not read the members (log above)"; }
# The leader as group.json names it: read again from it when it is not the first member.
recorded=$("$PYTHON" -c 'import json, sys
s = json.load(open(sys.argv[1]))
for host in s.values():
    try:
        print(json.loads(host["group_json"]["stdout"])["leader"]); break
    except Exception:
        pass' "$work/state.json")
if [[ -n "$recorded" && "$recorded" != "$leader" ]]; then
    leader=$recorded
    collect "$leader" "$work/state.json" || fail "could not read the members (log: $work/collect.log)"
fi

# Judge what was seen; print the layout; write what the completion needs ($work/ask.json).
analysis=$("$PYTHON" - "$work/state.json" "$leader" "$INSTANCE" "$work/ask.json" <<'EOF'
import json, re, sys
state, leader, instance, ask_out = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3], sys.argv[4]
out = []

def line(kind, text):
    out.append("%s\t%s" % (kind, text))

group = None
for name, host in sorted(state.items()):
    active = (host.get("ray_active") or {}).get("stdout", "").strip()
    line("PASS" if active == "active" else "FAIL", "%s: labfleet-ray.service is %s" % (name, active or "unknown"))
    try:
        record = json.loads(host["group_json"]["stdout"])
    except (KeyError, TypeError, ValueError):
        line("FAIL", "%s: /etc/labfleet/ray/group.json is missing or not JSON" % name)
        continue
    if record.get("member") != name:
        line("FAIL", "%s: group.json names member %s" % (name, record.get("member")))
    group = record if name == leader or group is None else group
if group is None:
    line("FAIL", "no member has a group.json: the group was not rolled out")
    print("\n".join(out))
    sys.exit(0)
gpus, tp, pp = group.get("gpus_total"), group.get("tp"), group.get("pp")
line("INFO", "group %s: leader %s (%s:%s), PP %s x TP %s = %s GPUs, NCCL on %s (MTU %s), image %s" % (
    group.get("name"), group.get("leader"), group.get("leader_address"), group.get("port"), pp, tp, gpus,
    group.get("nccl_interface") or "?", group.get("mtu") or "?", group.get("image_id")))

lead = state.get(leader) or {}
status = (lead.get("ray_status") or {}).get("stdout", "")
if (lead.get("ray_status") or {}).get("rc") != 0:
    line("FAIL", "docker exec labfleet-ray ray status on %s: %s" % (
        leader, ((lead.get("ray_status") or {}).get("stderr") or "no answer").strip()[:300]))
else:
    for text in status.splitlines():
        if re.search(r"node_|GPU|Active|Pending|Recent failures", text):
            line("INFO", "ray status: " + text.rstrip())
    totals = [float(m.group(2)) for m in re.finditer(r"([0-9.]+)/([0-9.]+) GPU", status)]
    active = status.split("Active:", 1)[-1].split("Pending:", 1)[0] if "Active:" in status else ""
    nodes = len(re.findall(r"^\s*\d+\s+node_", active, re.M))
    members = group.get("members") or []
    ok = totals and int(totals[0]) == gpus and nodes == len(members)
    line("PASS" if ok else "FAIL", "ray status on %s: %s of %s GPUs, %d of %d nodes active" % (
        leader, int(totals[0]) if totals else "no", gpus, nodes, len(members)))

try:
    container = json.loads(lead["inspect"]["stdout"])[0]
    argv = list(container.get("Args") or [])
    running = (container.get("State") or {}).get("Running") is True
except (KeyError, TypeError, ValueError, IndexError):
    argv, running = [], False
line("PASS" if running else "FAIL", "the vLLM container %s on %s is %s" % (instance, leader,
                                                                          "running" if running else "not running"))
unit = (lead.get("unit") or {}).get("stdout", "")

def flag(words, name):
    for i, word in enumerate(words):
        if word == name and i + 1 < len(words):
            return words[i + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return None

unit_words = unit.replace("\\\n", " ").split()
for name, want in (("--pipeline-parallel-size", pp), ("--tensor-parallel-size", tp),
                   ("--distributed-executor-backend", "ray")):
    got, in_unit = flag(argv, name), flag(unit_words, name)
    good = str(got) == str(want) and str(in_unit) == str(want)
    line("PASS" if good else "FAIL", "%s: the container's argv has %s, the unit %s, the plan %s" % (
        name, got, in_unit, want))

journal = (lead.get("journal") or {}).get("stdout", "")
ips = dict((m.get("address"), m.get("name")) for m in group.get("members") or [])
stage_of = dict((s.get("member"), s.get("stage")) for s in group.get("stages") or [])
for stage in group.get("stages") or []:
    layers = stage.get("layers") or ["?", "?"]
    line("INFO", "layout: stage %s on %s: layers %s-%s" % (stage.get("stage"), stage.get("member"), layers[0],
                                                           layers[-1]))
pattern = re.compile(r"Model loading took|model weights take|reserved for KV Cache|blocks: \d+|Maximum concurrency|"
                     r"pipeline_parallel_size=|Loading weights took")
for text in journal.splitlines():
    if not pattern.search(text):
        continue
    where = re.search(r"ip=([0-9a-fA-F.:]+)", text)
    member = ips.get(where.group(1)) if where else group.get("leader")
    line("LOG", "stage %s (%s): %s" % (stage_of.get(member, "?"), member, text.strip()[:400]))

host = flag(argv, "--host") or "127.0.0.1"
host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
port = flag(argv, "--port") or "8000"
model = flag(argv, "--served-model-name") or "/model"
json.dump({"check_url": "http://%s:%s" % ("[%s]" % host if ":" in host else host, port), "check_model": model},
          open(ask_out, "w"))
print("\n".join(out))
EOF
)
while IFS=$'\t' read -r kind text; do
    case $kind in
        PASS) pass "$text" ;;
        FAIL) bad "$text" ;;
        INFO | LOG) say "  $text" ;;
    esac
done <<<"$analysis"

# 5. one completion through the leader, and through the gateway ---------------------------------------
say "--- 5. a completion through the leader's API (asked on $leader)"
cat >"$work/ask.yml" <<'EOF'
---
- name: Ask the leader's vLLM server one completion
  hosts: "{{ check_leader }}"
  gather_facts: false
  tasks:
    - name: Ask it (the API key is read on the controller and never logged)
      ansible.builtin.uri:
        url: "{{ check_url }}/v1/completions"
        method: POST
        body_format: json
        body: {model: "{{ check_model }}", prompt: "The capital of France is", max_tokens: 16, temperature: 0}
        headers: >-
          {{ {'Authorization': 'Bearer ' ~ lookup('ansible.builtin.file', check_key_file)} if check_key_file else {} }}
        timeout: "{{ check_timeout | int }}"
        return_content: true
      register: answer
      failed_when: false
      no_log: true
    - name: Write the answer
      ansible.builtin.copy:
        content: "{{ {'status': answer.status | default(-1), 'json': answer.json | default(none), 'msg': answer.msg | default('')} | to_json }}"
        dest: "{{ check_out }}"
        mode: "0600"
      delegate_to: localhost
EOF
rc=0
"$ANSIBLE_PLAYBOOK" -i "$INVENTORY" "$work/ask.yml" -e "@$work/ask.json" -e "check_leader=$leader" \
    -e "check_key_file=$API_KEY_FILE" -e "check_timeout=$TIMEOUT_S" -e "check_out=$work/answer.json" \
    >"$work/ask.log" 2>&1 || rc=$?
answer() {  # answer FILE: the text of the first choice, or nothing
    "$PYTHON" -c 'import json, sys
a = json.load(open(sys.argv[1]))
try:
    assert a.get("status") == 200
    print(json.dumps(a["json"]["choices"][0]["text"]))
except Exception:
    sys.stderr.write("HTTP %s %s\n" % (a.get("status"), str(a.get("msg") or a.get("json"))[:300]))
    sys.exit(1)' "$1"
}
if ((rc == 0)) && text=$(answer "$work/answer.json" 2>"$work/answer.err"); then
    pass "the leader's API answered: $text"
else
    bad "no completion from the leader's API ($(cat "$work/answer.err" 2>/dev/null || tail -n 3 "$work/ask.log"))"
fi

if [[ -n "$GATEWAY_URL" ]]; then
    say "--- 5b. a completion through the gateway ($GATEWAY_URL, asked from this machine)"
    model=$("$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["check_model"])' "$work/ask.json")
    if text=$("$PYTHON" - "$GATEWAY_URL" "$model" "$GATEWAY_API_KEY_FILE" "$TIMEOUT_S" 2>"$work/gateway.err" <<'EOF'
import json, ssl, sys, urllib.request
url, model, key_file, timeout = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
headers = {"Content-Type": "application/json"}
if key_file:
    headers["Authorization"] = "Bearer " + open(key_file).read().strip()
body = json.dumps({"model": model, "prompt": "The capital of France is", "max_tokens": 16, "temperature": 0})
request = urllib.request.Request(url.rstrip("/") + "/v1/completions", body.encode(), headers)
context = ssl._create_unverified_context() if url.startswith("https") else None   # a lab's own certificate
try:
    with urllib.request.urlopen(request, timeout=timeout, context=context) as reply:
        print(json.dumps(json.load(reply)["choices"][0]["text"]))
except Exception as exc:
    sys.stderr.write("%s\n" % exc)
    sys.exit(1)
EOF
    ); then
        pass "the gateway answered: $text"
    else
        bad "no completion through the gateway $GATEWAY_URL ($(head -c 300 "$work/gateway.err"))"
    fi
fi

# 6. the doctor ---------------------------------------------------------------------------------------
doctor() {  # doctor LOG: runs playbooks/doctor.yml; prints the group's lines
    local rc=0
    "$ANSIBLE_PLAYBOOK" -i "$INVENTORY" playbooks/doctor.yml >"$1" 2>&1 || rc=$?
    grep -E "/ group $GROUP:|(ray_membership|nccl_interface|group_ports|stage_stopped): " "$1" \
        | sed 's/^[[:space:]"'"'"'-]*//' | sort -u | cut -c1-300 | sed 's/^/    /' || true
    return "$rc"
}
say "--- 6. the doctor: ansible-playbook playbooks/doctor.yml -i $INVENTORY"
if doctor "$work/doctor.log"; then
    if grep -qE "(ray_membership|nccl_interface|group_ports|stage_stopped): problem" "$work/doctor.log"; then
        bad "the doctor reports a problem in group $GROUP (lines above, $work/doctor.log)"
        KEEP=1
    elif grep -qE "stage_stopped: healthy" "$work/doctor.log"; then
        pass "the doctor finds group $GROUP healthy"
    else
        bad "the doctor printed no group checks for $GROUP (is /etc/labfleet/ray/group.json there? $work/doctor.log)"
        KEEP=1
    fi
else
    KEEP=1
    bad "playbooks/doctor.yml failed (log: $work/doctor.log)"
fi

# 7. a stage that stops --------------------------------------------------------------------------------
say "--- 7. stop labfleet-ray.service on $STOP_MEMBER; the doctor must name the stopped stage"
stopped_member=$STOP_MEMBER
"$ANSIBLE" "$STOP_MEMBER" -i "$INVENTORY" -b -m ansible.builtin.systemd_service \
    -a "name=labfleet-ray.service state=stopped" >"$work/stop.log" 2>&1 \
    || fail "could not stop labfleet-ray.service on $STOP_MEMBER ($work/stop.log)"
doctor "$work/doctor-stopped.log" || true
if grep -qE "stage [0-9]+ \(member $STOP_MEMBER, layers [0-9]+-[0-9]+\) stopped" "$work/doctor-stopped.log"; then
    pass "the doctor names the stopped stage: $(grep -oE "stage [0-9]+ \(member $STOP_MEMBER, layers [0-9]+-[0-9]+\) stopped" \
        "$work/doctor-stopped.log" | head -n 1)"
else
    KEEP=1
    bad "the doctor did not name $STOP_MEMBER's stopped stage (log: $work/doctor-stopped.log)"
fi
say "starting labfleet-ray.service on $STOP_MEMBER again"
"$ANSIBLE" "$STOP_MEMBER" -i "$INVENTORY" -b -m ansible.builtin.systemd_service \
    -a "name=labfleet-ray.service state=started" >"$work/start.log" 2>&1 \
    || fail "could not start labfleet-ray.service on $STOP_MEMBER ($work/start.log)"
stopped_member=""

gpus_total=$("$PYTHON" -c 'import json, sys
s = json.load(open(sys.argv[1]))
print(json.loads(s[sys.argv[2]]["group_json"]["stdout"])["gpus_total"])' "$work/state.json" "$leader" 2>/dev/null || echo 0)
ray_gpus() {  # the GPUs Ray on the leader shows now
    "$ANSIBLE" "$leader" -i "$INVENTORY" -b -m ansible.builtin.command -a "docker exec labfleet-ray ray status" \
        --tree "$work/tree" >/dev/null 2>&1 || true
    "$PYTHON" -c 'import json, re, sys
try:
    out = json.load(open(sys.argv[1])).get("stdout", "")
    print(int(float(re.search(r"[0-9.]+/([0-9.]+) GPU", out).group(1))))
except Exception:
    print(0)' "$work/tree/$leader"
}
healthy() {  # the leader's vLLM server answers /health (asked on the leader)
    "$ANSIBLE" "$leader" -i "$INVENTORY" -m ansible.builtin.uri -e "@$work/ask.json" \
        -a "url={{ check_url }}/health timeout=10" >/dev/null 2>&1
}
deadline=$(($(date +%s) + TIMEOUT_S))
now=0
until now=$(ray_gpus) && ((now == gpus_total)); do
    (($(date +%s) < deadline)) || break
    sleep 5
done
if ((now == gpus_total)); then
    pass "Ray shows all $gpus_total GPUs again"
else
    bad "Ray shows $now of $gpus_total GPUs $TIMEOUT_S s after $STOP_MEMBER's node was started again"
fi
if ! healthy; then
    say "the leader's vLLM server does not answer /health: restarting $INSTANCE.service on $leader (a pipeline stage's loss ends it)"
    "$ANSIBLE" "$leader" -i "$INVENTORY" -b -m ansible.builtin.systemd_service \
        -a "name=$INSTANCE.service state=restarted" >"$work/restart.log" 2>&1 || true
    deadline=$(($(date +%s) + TIMEOUT_S))
    until healthy; do
        (($(date +%s) < deadline)) || break
        sleep 10
    done
fi
if healthy; then pass "the leader's vLLM server answers /health again"; else bad "the leader's vLLM server does not answer /health"; fi

finish
