#!/usr/bin/env bash
# Build the systemd-enabled Debian base images the Molecule scenarios boot, offline from any
# container registry: debootstrap a root filesystem from the Debian mirror, then `docker import` it.
#
#   molecule/images/build.sh [bookworm] [trixie]      (default: both)
#
# An image is rebuilt only when it is missing or was built from another version of this recipe
# (label org.labfleet.recipe). To use a published image instead, set
# LABFLEET_MOLECULE_IMAGE_<SUITE> (e.g. LABFLEET_MOLECULE_IMAGE_BOOKWORM=registry.example/debian-systemd:12):
# it is pulled when absent and nothing is built for that suite.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
mirror="${LABFLEET_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
repo="${LABFLEET_MOLECULE_IMAGE_REPO:-labfleet/molecule-debian}"
packages="systemd,systemd-sysv,dbus,python3,python3-apt,ca-certificates,iproute2,procps,kmod,sudo"
recipe=$( { cat "$0"; echo "$mirror $packages"; } | sha256sum | cut -c1-16)

log() { printf 'images: %s\n' "$*" >&2; }

suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(bookworm trixie)

need_debootstrap() {
  command -v debootstrap >/dev/null 2>&1 && return 0
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    log "debootstrap is missing; install it (apt-get install debootstrap) or set LABFLEET_MOLECULE_IMAGE_<SUITE>."
    exit 1
  fi
  log "installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null 2>&1 || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
}

build_one() {
  local suite=$1 tag="${repo}:$1" root
  root=$(mktemp -d "${TMPDIR:-/var/tmp}/labfleet-rootfs-${suite}.XXXXXX")
  trap 'rm -rf "${root}"' RETURN
  log "debootstrap ${suite} from ${mirror} (about a minute)"
  if ! debootstrap --variant=minbase --include="${packages}" "${suite}" "${root}" "${mirror}" \
      >"${root}.log" 2>&1; then
    tail -n 20 "${root}.log" >&2
    log "debootstrap ${suite} failed (log above)"
    return 1
  fi
  rm -f "${root}.log"
  # Lean image: no package cache, no documentation.
  rm -rf "${root}"/var/cache/apt/archives/*.deb "${root}"/usr/share/doc/* "${root}"/usr/share/man/*
  echo "molecule-${suite}" >"${root}/etc/hostname"
  tar -C "${root}" --numeric-owner -c . | docker import \
    --change 'ENV container=docker' \
    --change 'CMD ["/lib/systemd/systemd"]' \
    --change "LABEL org.labfleet.recipe=${recipe} org.labfleet.suite=${suite}" \
    - "${tag}" >/dev/null
  log "built ${tag}"
}

pids=()
for suite in "${suites[@]}"; do
  var="LABFLEET_MOLECULE_IMAGE_$(echo "${suite}" | tr '[:lower:]' '[:upper:]')"
  if [ -n "${!var:-}" ]; then
    docker image inspect "${!var}" >/dev/null 2>&1 || docker pull "${!var}"
    log "${suite}: using ${!var} (from ${var})"
    continue
  fi
  have=$(docker image inspect --format '{{ index .Config.Labels "org.labfleet.recipe" }}' "${repo}:${suite}" 2>/dev/null || true)
  if [ "${have}" = "${recipe}" ]; then
    log "${repo}:${suite} is up to date"
    continue
  fi
  need_debootstrap
  build_one "${suite}" &
  pids+=($!)
done

rc=0
for pid in "${pids[@]}"; do wait "${pid}" || rc=1; done
exit "${rc}"
