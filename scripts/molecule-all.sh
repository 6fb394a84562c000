#!/usr/bin/env bash
# Run `molecule test` for every scenario under molecule/ (or the ones named), MOLECULE_JOBS at a
# time (default 2), the longest first; go on after a failure, and end with one summary line:
# "molecule: N passed, M failed".
#
#   scripts/molecule-all.sh [SCENARIO...]          MOLECULE_JOBS=1 runs them one after the other
#
# Each scenario writes its whole output to .cache/molecule-logs/<scenario>.log; when it ends, this
# prints "=== molecule scenario <s>: passed|FAILED in N s" with the log's tail when it passed and the
# whole log when it failed. The order comes from the durations of the last run
# (.cache/molecule-logs/durations) or, on a fresh clone, from the estimates below; a scenario with
# neither is started first.
#
# Scenarios run side by side share only the Docker engine and the controller's files. Instances are
# named after their scenario (or by the scenario's own platform names), ephemeral directories are
# per scenario, and what the scenarios build on the controller (the stand-in image tarballs,
# tests/images/openai-standin/build.sh) is built under a lock; `make molecule` builds it first.
#
# Each scenario's steps are timed (scripts/molecule_steps.py: .cache/molecule-logs/<scenario>.steps),
# and .cache/molecule-logs/summary gets one line per scenario: "<scenario> passed|FAILED <seconds>
# <step>=<seconds> ...", which `make test`'s closing table reads.
#
# Nothing is left in Docker: every platform is created with keep_volumes false and the label
# org.labfleet.scenario=<scenario> (molecule.yml), so destroy removes its anonymous volumes; after a
# scenario ends (passed, failed or interrupted) any container still carrying its label is removed
# with its volumes, and said so.
#
# The secrets the scenarios use are canaries (molecule/shared/secret-canaries, one per line): a
# scenario whose output (Ansible's, at the verbosity and with the --diff its molecule.yml asks for)
# holds one of them fails, whatever its own result.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "${top}" || exit 1

jobs=${MOLECULE_JOBS:-2}
[[ "${jobs}" =~ ^[1-9][0-9]*$ ]] || { echo "molecule-all.sh: MOLECULE_JOBS must be a positive number" >&2; exit 2; }
tail_lines=${MOLECULE_TAIL_LINES:-15}
logdir="${top}/.cache/molecule-logs"
mkdir -p "${logdir}"
durations="${logdir}/durations"

scenarios=("$@")
if [ ${#scenarios[@]} -eq 0 ]; then
  for f in molecule/*/molecule.yml; do scenarios+=("$(basename "$(dirname "$f")")"); done
fi

# Seconds a scenario took on a 2-core CI machine, one at a time; only the order matters.
declare -A estimate=(
  [container_runtime_bookworm]=118 [container_runtime_broken]=58 [container_runtime_trixie]=122
  [nvidia_driver_bookworm_repo]=84 [nvidia_driver_refused]=48 [nvidia_driver_trixie]=120
  [model_store]=90 [preflight_hosts]=64 [preflight_target]=55 [site_rollout]=366
  [vllm_server_crash]=98 [vllm_server_default]=118 [vllm_server_rollback]=200 [ray_group]=900
)
if [ -f "${durations}" ]; then
  while read -r name secs; do
    [[ "${secs}" =~ ^[0-9]+$ ]] && estimate[${name}]=${secs}
  done <"${durations}"
fi
# Longest first (unknown ones, e.g. a new scenario, before all), ties by name.
mapfile -t scenarios < <(
  for s in "${scenarios[@]}"; do printf '%s %s\n' "${estimate[${s}]:-99999}" "${s}"; done \
    | sort -k1,1nr -k2,2 | awk '{print $2}')

declare -A pid_scenario=() started=()
: >"${logdir}/summary"
passed=0 failed=0 failures=() running=0 next=0 new_durations=()

# Remove what a scenario's destroy left in Docker (a run that was killed, a destroy that failed).
sweep() {
  local s=$1 ids
  ids=$(docker ps -aq --filter "label=org.labfleet.scenario=${s}" 2>/dev/null) || return 0
  [ -n "${ids}" ] || return 0
  echo "molecule-all.sh: ${s} left $(grep -c . <<<"${ids}") container(s) behind; removing them with their volumes"
  # shellcheck disable=SC2086 # one ID a word
  docker rm -fv ${ids} >/dev/null 2>&1 || true
}

# Each scenario runs as a job of its own process group (set -m), so that stopping it stops the
# playbooks it started too, before its containers are swept.
set -m
stop_all() {
  trap - INT TERM
  echo "molecule-all.sh: interrupted; stopping the running scenarios" >&2
  for pid in "${!pid_scenario[@]}"; do kill -TERM -- "-${pid}" 2>/dev/null; done
  wait
  sleep 2
  for pid in "${!pid_scenario[@]}"; do sweep "${pid_scenario[${pid}]}"; done
  exit 130
}
trap stop_all INT TERM

start_one() {
  local s=$1
  echo "=== molecule scenario ${s}: started ($(date +%T), log ${logdir#"${top}/"}/${s}.log)"
  started[${s}]=$(date +%s)
  ( set -o pipefail
    molecule test -s "${s}" </dev/null 2>&1 \
      | python3 "${top}/scripts/molecule_steps.py" "${logdir}/${s}.log" "${logdir}/${s}.steps" ) &
  pid_scenario[$!]=${s}
  running=$((running + 1))
}

echo "=== molecule: ${#scenarios[@]} scenarios, ${jobs} at a time: ${scenarios[*]}"
all_start=$(date +%s)
while [ "${next}" -lt ${#scenarios[@]} ] || [ "${running}" -gt 0 ]; do
  while [ "${running}" -lt "${jobs}" ] && [ "${next}" -lt ${#scenarios[@]} ]; do
    start_one "${scenarios[${next}]}"
    next=$((next + 1))
  done
  done_pid=
  wait -n -p done_pid
  rc=$?
  [ -n "${done_pid}" ] || continue
  s=${pid_scenario[${done_pid}]}
  unset "pid_scenario[${done_pid}]"
  running=$((running - 1))
  secs=$(( $(date +%s) - ${started[${s}]} ))
  if [ "${rc}" -eq 0 ] && [ -f molecule/shared/secret-canaries ] \
      && grep -n -F -f <(grep -v '^#' molecule/shared/secret-canaries | grep .) "${logdir}/${s}.log" >"${logdir}/${s}.leaks"; then
    echo "molecule-all.sh: ${s}: a secret canary appears in its output (lines in ${logdir#"${top}/"}/${s}.leaks):" \
      "a task prints a secret" >>"${logdir}/${s}.log"
    rc=1
  fi
  if [ "${rc}" -eq 0 ]; then
    passed=$((passed + 1)); verdict=passed
    new_durations+=("${s} ${secs}")
    echo "--- ${s}: last ${tail_lines} lines of ${logdir#"${top}/"}/${s}.log"
    tail -n "${tail_lines}" "${logdir}/${s}.log"
  else
    failed=$((failed + 1)); verdict=FAILED; failures+=("${s}")
    echo "--- ${s}: ${logdir#"${top}/"}/${s}.log (exit ${rc})"
    cat "${logdir}/${s}.log"
  fi
  echo "=== molecule scenario ${s}: ${verdict} in ${secs} s"
  sweep "${s}"
  echo "${s} ${verdict} ${secs} $(tr ' ' '=' <"${logdir}/${s}.steps" 2>/dev/null | paste -sd' ')" >>"${logdir}/summary"
done

# Remember how long each passed scenario took, for the order of the next run.
if [ ${#new_durations[@]} -gt 0 ]; then
  { printf '%s\n' "${new_durations[@]}"
    [ -f "${durations}" ] && cat "${durations}"; } | awk '!seen[$1]++' >"${durations}.tmp" \
    && mv -f "${durations}.tmp" "${durations}"
fi

echo "molecule: wall time $(( $(date +%s) - all_start )) s with ${jobs} at a time"
[ ${#failures[@]} -eq 0 ] || echo "molecule: failed scenarios: ${failures[*]}"
echo "molecule: ${passed} passed, ${failed} failed"
[ "${failed}" -eq 0 ]
