#!/usr/bin/env bash
# Generate the execution environment's build context and check it (what CI can do without a
# registry: building the image itself needs the base image). Steps:
#   1. build the collection tarball into .cache/ee/dist (ansible-galaxy collection build);
#   2. ansible-builder create -f execution-environment.yml --context .cache/ee/context (a Containerfile);
#   3. check the context: the Containerfile starts from the base image and installs ansible-core and
#      ansible-runner, the galaxy requirements name this collection's tarball (present in the context,
#      same version as galaxy.yml) and community.docker, and requirements.txt / bindep.txt are the
#      collection's own.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "${top}"
bin="${top}/.venv/bin"
out="${top}/.cache/ee"
rm -rf "${out}"
mkdir -p "${out}/dist"

fail() { echo "check-ee: $*" >&2; exit 1; }

version=$("${bin}/python" -c 'import yaml; print(yaml.safe_load(open("galaxy.yml"))["version"])')
tarball="labfleet-vllm-${version}.tar.gz"
grep -q "/build/collections/${tarball}\$" ee-requirements.yml \
  || fail "ee-requirements.yml does not name ${tarball} (galaxy.yml's version is ${version}): update its first entry"

"${bin}/ansible-galaxy" collection build --output-path "${out}/dist" . >/dev/null
[ -f "${out}/dist/${tarball}" ] || fail "ansible-galaxy did not build ${tarball}"

"${bin}/ansible-builder" create -f execution-environment.yml --context "${out}/context" --output-filename Containerfile >"${out}/create.log" 2>&1 \
  || { cat "${out}/create.log" >&2; fail "ansible-builder create failed (log above)"; }

ctx="${out}/context"
cf="${ctx}/Containerfile"
[ -f "${cf}" ] || fail "no Containerfile in ${ctx}"
base=$("${bin}/python" -c 'import yaml; print(yaml.safe_load(open("execution-environment.yml"))["images"]["base_image"]["name"])')
grep -q "^ARG EE_BASE_IMAGE=\"${base}\"" "${cf}" || fail "the Containerfile does not start from ${base}"
grep -q "ansible-core==" "${cf}" || fail "the Containerfile does not install ansible-core"
grep -q "ansible-runner==" "${cf}" || fail "the Containerfile does not install ansible-runner"
grep -q "^COPY _build /build\$" "${cf}" || fail "the Containerfile does not copy the build files (the collection tarball) to /build"
[ -f "${ctx}/_build/collections/${tarball}" ] || fail "the context lacks _build/collections/${tarball}"
cmp -s ee-requirements.yml "${ctx}/_build/requirements.yml" || fail "the context's galaxy requirements differ from ee-requirements.yml"
cmp -s requirements.txt "${ctx}/_build/requirements.txt" || fail "the context's requirements.txt differs from the collection's"
cmp -s bindep.txt "${ctx}/_build/bindep.txt" || fail "the context's bindep.txt differs from the collection's"
# The tarball carries the file that tells ansible-builder what the collection needs, and the lists.
listing=$(tar -tzf "${ctx}/_build/collections/${tarball}")
for f in meta/execution-environment.yml requirements.txt bindep.txt; do
  grep -qx "${f}" <<<"${listing}" || fail "${tarball} lacks ${f}"
done
tar -xzOf "${ctx}/_build/collections/${tarball}" meta/execution-environment.yml >"${out}/meta-ee.yml"
grep -q "python: requirements.txt" "${out}/meta-ee.yml" || fail "meta/execution-environment.yml does not name requirements.txt"
grep -q "system: bindep.txt" "${out}/meta-ee.yml" || fail "meta/execution-environment.yml does not name bindep.txt"
echo "execution environment: context generated in .cache/ee/context (${tarball}, base ${base}), checked"
