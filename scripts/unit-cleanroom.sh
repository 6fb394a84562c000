#!/usr/bin/env bash
# The unit suite in a clean room: a fresh container from the project's own Debian base image
# (molecule/images/build.sh, labfleet/molecule-debian:bookworm: debootstrap, Python 3.11 like the
# CI machines), holding only what the project's scripts put there. It proves that no unit test
# depends on what happens to be installed on the machine that runs it (a docker.service, a
# package, a daemon). `make test` runs the unit suite here, and only here.
#
#   scripts/unit-cleanroom.sh [pytest arguments]         default: the whole unit suite (pytest.ini)
#
# What goes in:
#   - the checkout's tracked and untracked-but-not-ignored files (what `git ls-files` lists: no
#     .venv, no .cache), copied in, not mounted, so the run cannot write to the checkout;
#   - the reference folder beside the checkout (../shared), when there is one, as the tests expect;
#   - this machine's CA bundle (read-only), so that pip trusts what this machine trusts;
#   - two download caches of the project's, bind-mounted (pip's wheels, apt's .deb files) under
#     LABFLEET_CACHE_DIR (default ~/.cache/labfleet): they only save downloads, the packages are
#     installed fresh every time. Bind mounts, not Docker volumes: nothing is left in Docker.
# Inside: apt installs what the Makefile needs (make, python3-venv), then `make unit` builds the
# project venv from requirements-dev.txt and runs pytest, as on a developer's machine.
# The container is removed on any exit (--rm, and a trap for an interrupted run).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "${top}"

image="${LABFLEET_MOLECULE_IMAGE_BOOKWORM:-${LABFLEET_MOLECULE_IMAGE_REPO:-labfleet/molecule-debian}:bookworm}"
cache="${LABFLEET_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/labfleet}"
name="labfleet-unit-cleanroom-$$"
log() { printf 'unit-cleanroom: %s\n' "$*" >&2; }

docker image inspect "${image}" >/dev/null 2>&1 \
  || { log "the base image ${image} is missing: run 'make images' first"; exit 1; }
mkdir -p "${cache}/cleanroom-pip" "${cache}/cleanroom-apt"

ca_args=()
ca=/etc/ssl/certs/ca-certificates.crt
[ -f "${ca}" ] && ca_args=(-v "${ca}:/etc/labfleet-host-ca.crt:ro" -e PIP_CERT=/etc/labfleet-host-ca.crt)

# The tree that goes in: the checkout as repo/, the reference folder beside it as shared/.
shared_args=()
[ -d "${top}/../shared/reference" ] && shared_args=(-C "${top}/.." shared/reference)

cleanup() { docker rm -f "${name}" >/dev/null 2>&1 || true; }
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM

# pytest's arguments travel as one shell-quoted string.
pytest_args=
[ $# -eq 0 ] || pytest_args=$(printf '%q ' "$@")

log "${image}: copying the checkout in, installing make and python3-venv, then make unit"
{
  git ls-files -z --cached --others --exclude-standard \
    | while IFS= read -r -d '' f; do [ -e "$f" ] || [ -L "$f" ] && printf '%s\0' "$f"; done \
    | tar --null -T - -c --transform 's,^,repo/,S' -f -
  # A second archive appended to the stream: tar -x inside reads both (--ignore-zeros).
  if [ ${#shared_args[@]} -gt 0 ]; then tar -c "${shared_args[@]}" -f -; fi
} | docker run --rm -i --name "${name}" \
      --network bridge \
      -e CI="${CI:-}" -e DEBIAN_FRONTEND=noninteractive -e PIP_DISABLE_PIP_VERSION_CHECK=1 \
      -e PYTEST_ARGS="${pytest_args}" \
      "${ca_args[@]}" \
      -v "${cache}/cleanroom-pip:/root/.cache/pip" \
      -v "${cache}/cleanroom-apt:/var/cache/apt/archives" \
      --entrypoint /bin/bash "${image}" -c '
set -euo pipefail
mkdir -p /src && cd /src && tar --ignore-zeros -x -f -
rm -f /etc/apt/apt.conf.d/docker-clean
apt-get update -qq
apt-get install -y -qq --no-install-recommends make python3-venv >/dev/null
cd /src/repo
echo "unit-cleanroom: $(. /etc/os-release; echo "${PRETTY_NAME}"), $(python3 --version), root: $(id -un);" \
  "docker.service: $(systemctl cat docker.service >/dev/null 2>&1 && echo present || echo absent);" \
  "docker: $(command -v docker || echo absent); dockerd: $(command -v dockerd || echo absent)"
make --no-print-directory venv >/dev/null
eval "exec .venv/bin/python -m pytest -p no:cacheprovider ${PYTEST_ARGS}"
'
