#!/usr/bin/env bash
# Run `ansible-test sanity` on this collection. ansible-test needs the collection at
# .../ansible_collections/<namespace>/<name>/, so the tracked and untracked-but-not-ignored files
# are copied into a temporary tree of that shape (the link under collections/ is left out).
#   scripts/sanity.sh [extra ansible-test arguments, e.g. --test validate-modules]
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
python="${PYTHON:-${top}/.venv/bin/python}"
ansible_test="$(dirname "${python}")/ansible-test"
pyver=$("${python}" -c 'import sys; print("%d.%d" % sys.version_info[:2])')

# ansible-test keeps its per-test virtualenvs under ~/.ansible/test; keep them in the project's
# cache instead (beside the pip cache, outside the checkout, so that a fresh clone on the same
# machine reuses them), with a pip bootstrap that works without ansible's CI file host (see the script).
export HOME="${LABFLEET_CACHE_DIR:-${HOME}/.cache/labfleet}/ansible-test-home"
mkdir -p "${HOME}/.ansible/test/cache"
# The pip version ansible-test bootstraps is pinned in its sources (pip='24.2').
for v in $(grep -ohE "pip='[0-9.]+'" "$(dirname "$("${python}" -c 'import ansible_test; print(ansible_test.__file__)')")/_internal/python_requirements.py" | tr -dc '0-9.\n' | sort -u); do
  cp "${top}/scripts/ansible-test-get-pip.py" "${HOME}/.ansible/test/cache/get_pip_${v//./_}.py"
done

work=$(mktemp -d "${TMPDIR:-/tmp}/labfleet-sanity.XXXXXX")
trap 'rm -rf "${work}"' EXIT
dest="${work}/ansible_collections/labfleet/vllm"
mkdir -p "${dest}"
(cd "${top}" && git ls-files -z --cached --others --exclude-standard \
  | grep -zv '^collections/' \
  | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done \
  | xargs -0 cp -P --parents -t "${dest}")
# ansible-test decides what to check from git; give the copy a repository of its own.
(cd "${dest}" && git init -q && git add -A && git -c user.name=sanity -c user.email=sanity@localhost commit -qm sanity)

cd "${dest}"
"${ansible_test}" sanity --python "${pyver}" --color no "$@"
