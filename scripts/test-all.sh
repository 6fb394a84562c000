#!/usr/bin/env bash
# `make test`: every check of the project, in stages, each timed; ends with a table of each stage's
# and each Molecule scenario's seconds and the total (also written to .cache/test-logs/timing.md,
# the table docs/performance.md keeps).
#
# The stages, in order (a stage that fails does not stop the ones after it; the exit status is 1 if
# any failed):
#   footprint before   Docker's containers / volumes / networks / disk use (scripts/docker-footprint.sh)
#   docker + images    the Docker engine (scripts/ensure-docker.sh), the base images (molecule/images/
#                      build.sh) and the stand-in images, then
#   unit (clean room)  the unit suite in a fresh container of the project's base image, with only
#                      what the project's scripts install (scripts/unit-cleanroom.sh): both in the
#                      background, beside venv and lint, which need no Docker (two cores: one each)
#   venv, lint         yamllint, ansible-lint, argspecs, funclength, changelog-lint, sanity, ee (on this machine)
#   integration        pytest against the Docker engine (tests/integration)
#   compat             the checks against the real libraries (torch, compressed-tensors, gptqmodel),
#                      from their pinned venv, cached outside the checkout (make compat); the venv is
#                      made or checked in the background from the start (make compat-venv)
#   molecule           every scenario, MOLECULE_JOBS at a time (scripts/molecule-all.sh)
#   footprint after    the same counts; a container, volume or network left behind fails the run
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "${top}" || exit 1
logs="${top}/.cache/test-logs"
rm -rf "${logs}"
mkdir -p "${logs}"
make=(make --no-print-directory)

rows=()     # "stage|seconds|result|detail"
failed=()
t_all=$(date +%s)

record() {  # NAME SECONDS RC [DETAIL]
  local result=passed
  [ "$3" -eq 0 ] || { result=FAILED; failed+=("$1"); }
  rows+=("$1|$2|${result}|${4:-}")
  echo "=== stage $1: ${result} in $2 s"
}

stage() {  # NAME COMMAND...: run in the foreground
  local name=$1 start rc
  shift
  echo "=== stage ${name}: started $(date +%T)"
  start=$(date +%s)
  "$@"
  rc=$?
  record "${name}" $(( $(date +%s) - start )) "${rc}"
  return "${rc}"
}

stage "footprint before" scripts/docker-footprint.sh save "${logs}/footprint"

# Beside venv and lint (which need no Docker): Docker, the base images and the stand-in images (network
# and disk bound), then the unit suite in its clean room (a container: it touches neither .venv nor the
# checkout). Its output is kept in a log and shown when it has ended.
echo "=== stage docker + images, then unit (clean room): started $(date +%T) in the background" \
  "(logs ${logs#"${top}/"}/images.log, ${logs#"${top}/"}/unit.log)"
bg_start=$(date +%s)
(
  "${make[@]}" docker images standin-images >"${logs}/images.log" 2>&1
  echo "$? $(( $(date +%s) - bg_start ))" >"${logs}/images.result"
  unit_start=$(date +%s)
  if [ "$(cut -d' ' -f1 "${logs}/images.result")" -eq 0 ]; then
    scripts/unit-cleanroom.sh >"${logs}/unit.log" 2>&1
    echo "$? $(( $(date +%s) - unit_start ))" >"${logs}/unit.result"
  else
    echo "unit-cleanroom: not run: the images stage failed" >"${logs}/unit.log"
    echo "1 0" >"${logs}/unit.result"
  fi
) &
bg_pid=$!
# The compat venv (torch and the other real libraries; cached outside the checkout, so usually there
# already): pip's download and unpacking, beside the rest too.
compat_start=$(date +%s)
( "${make[@]}" compat-venv >"${logs}/compat-venv.log" 2>&1
  echo "$? $(( $(date +%s) - compat_start ))" >"${logs}/compat-venv.result" ) &
compat_pid=$!

stage venv "${make[@]}" venv
for t in yamllint ansible-lint argspecs funclength changelog-lint sanity ee; do
  stage "lint: ${t}" "${make[@]}" "${t}"
done

echo "=== waiting for the background stages"
wait "${bg_pid}"
cat "${logs}/images.log"
read -r rc secs <"${logs}/images.result"
record "docker + images (beside venv and lint)" "${secs}" "${rc}"
cat "${logs}/unit.log"
read -r rc secs <"${logs}/unit.result"
record "unit (clean room; beside lint)" "${secs}" "${rc}"

stage integration "${make[@]}" integration
wait "${compat_pid}"
grep -v "^WARNING: Location" "${logs}/compat-venv.log" || true
read -r rc secs <"${logs}/compat-venv.result"
record "compat venv (beside lint)" "${secs}" "${rc}"
stage compat "${make[@]}" compat
stage molecule scripts/molecule-all.sh

stage "footprint after" scripts/docker-footprint.sh check "${logs}/footprint"

total=$(( $(date +%s) - t_all ))
rc=0
[ ${#failed[@]} -eq 0 ] || rc=1

# The table: stages, then each scenario under molecule (its steps' seconds as detail).
{
  echo "| stage | seconds | result | detail |"
  echo "|---|---:|---|---|"
  for row in "${rows[@]}"; do
    IFS='|' read -r name secs result detail <<<"${row}"
    echo "| ${name} | ${secs} | ${result} | ${detail} |"
    if [ "${name}" = molecule ] && [ -f .cache/molecule-logs/summary ]; then
      sort -k3,3nr .cache/molecule-logs/summary | while read -r s verdict ssecs steps; do
        echo "| molecule: ${s} | ${ssecs} | ${verdict} | ${steps} |"
      done
    fi
  done
  echo "| **total** | **${total}** | $([ "${rc}" -eq 0 ] && echo passed || echo FAILED) | ${MOLECULE_JOBS:-2} scenarios at a time, $(nproc) CPUs |"
} >"${logs}/timing.md"
echo
echo "=== make test: seconds per stage and per Molecule scenario (wall clock)"
cat "${logs}/timing.md"
[ ${#failed[@]} -eq 0 ] || echo "make test: failed stages: ${failed[*]}"
echo "make test: total duration ${total} s, exit ${rc}"
exit "${rc}"
