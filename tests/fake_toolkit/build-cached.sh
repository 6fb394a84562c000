#!/usr/bin/env bash
# TEST FIXTURE ONLY. Build the fake NVIDIA repository (build-repo.sh) once on the controller, inside a
# throw-away container of the project's Debian base image (which gets gpg and apt-utils there, not in
# the test instances), and keep it in OUTDIR for every scenario of the run: each scenario's prepare
# step then copies it into its instances with `docker cp` instead of installing gpg, building and
# removing gpg again on every host.
#
#   tests/fake_toolkit/build-cached.sh OUTDIR VERSION...      e.g. .cache/fake-nvidia-repo 1.18.2 1.19.1
#
# OUTDIR is rebuilt only when this fixture (bin/, the scripts) or the versions changed (OUTDIR/.recipe);
# scenarios that run side by side call this at the same time: one builds (a lock), the others wait.
# Prints "<OUTDIR> built|unchanged, key <fingerprint>".
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build-cached.sh OUTDIR VERSION...}
shift
[ $# -gt 0 ] || { echo "usage: build-cached.sh OUTDIR VERSION..." >&2; exit 2; }
image="${LABFLEET_MOLECULE_IMAGE_BOOKWORM:-${LABFLEET_MOLECULE_IMAGE_REPO:-labfleet/molecule-debian}:bookworm}"
mkdir -p "$(dirname "${out}")"
out=$(cd "$(dirname "${out}")" && pwd)/$(basename "${out}")
exec 9>"${out}.lock"
flock 9

recipe=$( { cd "${here}" && find . -type f ! -name '*.md' | sort | xargs sha256sum; echo "$*"; } | sha256sum | cut -c1-16)
if [ -f "${out}/fingerprint" ] && [ "$(cat "${out}/.recipe" 2>/dev/null)" = "${recipe}" ]; then
  echo "${out} unchanged, key $(cat "${out}/fingerprint")"
  exit 0
fi

rm -rf "${out}.tmp"
mkdir -p "${out}.tmp"
# --rm: nothing stays in Docker; the output directory is a bind mount, so the files land on the
# controller. They are made by root in the container; chmod keeps them readable.
docker run --rm --network bridge -v "${here}:/fixture:ro" -v "${out}.tmp:/out" --entrypoint /bin/sh "${image}" -c '
  set -e
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends gpg gpg-agent apt-utils >/dev/null
  /fixture/build-repo.sh /out "$@" >/dev/null
  chmod -R a+rX /out' sh "$@"
echo "${recipe}" >"${out}.tmp/.recipe"
rm -rf "${out}"
mv "${out}.tmp" "${out}"
echo "${out} built, key $(cat "${out}/fingerprint")"
