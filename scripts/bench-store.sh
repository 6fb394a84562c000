#!/usr/bin/env bash
# The model store measured (issue 26; make bench-store; docs/performance.md "Model store").
#
#   scripts/bench-store.sh      run Molecule's model_store scenario with a synthetic model of about
#                               1 GB (BENCH_STORE_VOCAB, default 1000000: tiny-llama's embeddings and
#                               lm_head at that vocabulary, 1.02 GB) and print its figures
#
# The scenario's hosts: a store (nginx, the model_store role) and three fake-GPU hosts that each fetch
# the tiny NVFP4 checkpoint's GPTQ copy (made once on the store) and the synthetic model, plus a host
# whose disk cannot hold the copy. Printed, from the store's own access log (what nginx sent, not
# what the hosts say they got): bytes read from the store per host and model on the first run and on
# the converged re-run; the converged re-run's wall time (Molecule's idempotence step: the whole
# converge again) and each fetch's own seconds; the conversions made (converter tasks that changed,
# on any host, over both runs). Then the scenario's verify (the faults) and destroy.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "${root}"
out=.cache/bench-store
mkdir -p "${out}"
export LABFLEET_STORE_SYNTHETIC_VOCAB=${BENCH_STORE_VOCAB:-1000000}
export PATH="${root}/.venv/bin:${PATH}" ANSIBLE_CONFIG="${root}/ansible.cfg" ANSIBLE_FORCE_COLOR=0 PY_COLORS=0
export MOLECULE_GLOB='molecule/*/molecule.yml'

make --no-print-directory -s venv
scripts/ensure-docker.sh
molecule/images/build.sh bookworm

step() {
  local name=$1 started
  started=$(date +%s%N)
  if ! molecule "${name}" -s model_store >"${out}/${name}.log" 2>&1; then
    tail -n 60 "${out}/${name}.log"
    echo "bench-store: molecule ${name} failed (${out}/${name}.log)" >&2
    molecule destroy -s model_store >/dev/null 2>&1 || true
    exit 1
  fi
  printf '%s %d\n' "${name}" "$(( ($(date +%s%N) - started) / 1000000 ))" >>"${out}/steps"
}

rm -f "${out}/steps"
trap 'molecule destroy -s model_store >/dev/null 2>&1 || true' EXIT
step destroy
step create
step prepare
step converge
docker exec store cat /var/log/labfleet-model-store/access.log >"${out}/access-converge.log"
step idempotence
docker exec store cat /var/log/labfleet-model-store/access.log >"${out}/access-all.log"
for host in fetch-a fetch-b fetch-c fetch-small; do
  docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}' "${host}" | awk -v h="${host}" '{print h, $1}'
done >"${out}/addresses"
for name in tiny-nvfp4/r1+gptq-g128 synthetic/r1; do
  docker exec store cat "/srv/labfleet/model-store/${name}/labfleet-manifest.json" >"${out}/manifest-${name%%/*}.json"
done
for host in fetch-a fetch-b fetch-c; do
  docker exec "${host}" cat /var/tmp/labfleet-test-fetch.json >"${out}/fetch-${host}.json"
done
python3 scripts/lib/store_figures.py "${out}"
step verify
echo "bench-store: verify passed (the faults: ${out}/verify.log)"
