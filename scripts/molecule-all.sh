#!/usr/bin/env bash
# Run `molecule test` for every scenario under molecule/ (or the ones named), one after the
# other, go on after a failure, and end with one summary line: "molecule: N passed, M failed".
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "${top}"

scenarios=("$@")
if [ ${#scenarios[@]} -eq 0 ]; then
  for f in molecule/*/molecule.yml; do scenarios+=("$(basename "$(dirname "$f")")"); done
fi

passed=0 failed=0 failures=()
for s in "${scenarios[@]}"; do
  start=$(date +%s)
  echo "=== molecule scenario ${s}"
  if molecule test -s "${s}"; then
    passed=$((passed + 1)); verdict=passed
  else
    failed=$((failed + 1)); verdict=FAILED; failures+=("${s}")
  fi
  echo "=== molecule scenario ${s}: ${verdict} in $(( $(date +%s) - start )) s"
done
[ ${#failures[@]} -eq 0 ] || echo "molecule: failed scenarios: ${failures[*]}"
echo "molecule: ${passed} passed, ${failed} failed"
[ "${failed}" -eq 0 ]
