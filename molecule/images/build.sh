#!/usr/bin/env bash
# Build the systemd-enabled Debian base images the Molecule scenarios boot, offline from any
# container registry: debootstrap a root filesystem from the Debian mirror, then `docker import` it.
#
#   molecule/images/build.sh [bookworm] [trixie] [bookworm-docker]      (default: all three)
#
# bookworm-docker is bookworm with Debian's Docker engine (docker.io) installed, for the scenarios
# that run containers inside their instance (vllm_server_*): their prepare step then finds it
# installed instead of downloading and installing it each time. It also holds the test fixture's
# no-op nvidia-container-runtime-hook (the file molecule/vllm_server_shared/prepare.yml installs), so
# that Docker starts with it and prepare finds nothing to change and no Docker to restart; where the
# container_runtime role installs the fake toolkit (site_rollout), its package replaces that file
# (/usr/bin, where the real toolkit puts its hook). It is a
# second layer on the bookworm image, installed with apt from the mirror that image uses
# (`docker run` + `docker commit`). Scenarios that test installing Docker (container_runtime_*) keep
# the plain image.
#
# An image is rebuilt only when it is missing or was built from another version of this recipe
# (label org.labfleet.recipe; for bookworm-docker, of this recipe and of its bookworm image). To
# use a published image instead, set LABFLEET_MOLECULE_IMAGE_<SUITE> (e.g.
# LABFLEET_MOLECULE_IMAGE_BOOKWORM=registry.example/debian-systemd:12,
# LABFLEET_MOLECULE_IMAGE_BOOKWORM_DOCKER=registry.example/debian-systemd-docker:12): it is pulled
# when absent and nothing is built for it. bookworm-docker is built on
# LABFLEET_MOLECULE_IMAGE_BOOKWORM when that one is set and LABFLEET_MOLECULE_IMAGE_BOOKWORM_DOCKER is not.
set -euo pipefail

mirror="${LABFLEET_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
repo="${LABFLEET_MOLECULE_IMAGE_REPO:-labfleet/molecule-debian}"
packages="systemd,systemd-sysv,dbus,python3,python3-apt,ca-certificates,iproute2,procps,kmod,sudo"

# The variants: NAME, the suite it is built on, and the packages it adds.
declare -A variant_base=([bookworm-docker]=bookworm)
declare -A variant_packages=([bookworm-docker]=docker.io)
# A command run after the packages (test fixtures the variant's scenarios would install anyway).
declare -A variant_setup=([bookworm-docker]="printf '%s\n' '#!/bin/sh' \
  '# labfleet.vllm test fixture: Docker'\''s --gpus calls this OCI prestart hook; no GPU here.' 'exit 0' \
  >/usr/bin/nvidia-container-runtime-hook && chmod 0755 /usr/bin/nvidia-container-runtime-hook")

log() { printf 'images: %s\n' "$*" >&2; }

suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(bookworm trixie bookworm-docker)

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
# What a base image is made from: build_one (this recipe) and its inputs.
recipe=$( { declare -f build_one; echo "$mirror $packages"; } | sha256sum | cut -c1-16)

# The image a name stands for: LABFLEET_MOLECULE_IMAGE_<NAME> when set, else ${repo}:<name>.
image_var() { echo "LABFLEET_MOLECULE_IMAGE_$(echo "$1" | tr '[:lower:]-' '[:upper:]_')"; }
image_of() { local var; var=$(image_var "$1"); echo "${!var:-${repo}:$1}"; }
recipe_of() { docker image inspect --format '{{ index .Config.Labels "org.labfleet.recipe" }}' "$1" 2>/dev/null || true; }

# A base suite: a published image (pulled when absent), or built by debootstrap when out of date.
ensure_suite() {
  local suite=$1 var
  var=$(image_var "${suite}")
  if [ -n "${!var:-}" ]; then
    docker image inspect "${!var}" >/dev/null 2>&1 || docker pull "${!var}"
    log "${suite}: using ${!var} (from ${var})"
    return 0
  fi
  if [ "$(recipe_of "${repo}:${suite}")" = "${recipe}" ]; then
    log "${repo}:${suite} is up to date"
    return 0
  fi
  ( build_one "${suite}" )  # in a subshell: its RETURN trap stays there
}

# A variant: the base suite's image plus variant_packages, installed by apt in a container.
ensure_variant() {
  local name=$1 base tag="${repo}:$1" var want box
  var=$(image_var "${name}")
  if [ -n "${!var:-}" ]; then
    docker image inspect "${!var}" >/dev/null 2>&1 || docker pull "${!var}"
    log "${name}: using ${!var} (from ${var})"
    return 0
  fi
  base=$(image_of "${variant_base[${name}]}")
  want=$( { declare -f ensure_variant; docker image inspect --format '{{.Id}}' "${base}"; echo "${variant_packages[${name}]}"
            echo "${variant_setup[${name}]:-}"; } \
    | sha256sum | cut -c1-16)
  if [ "$(recipe_of "${tag}")" = "${want}" ]; then
    log "${tag} is up to date"
    return 0
  fi
  log "${name}: ${base} + ${variant_packages[${name}]} (apt, about a minute)"
  box="labfleet-image-build-${name}-$$"
  # The package lists stay in the image: a prepare step's apt cache_valid_time may find them fresh.
  if ! docker run --name "${box}" "${base}" /bin/sh -c "export DEBIAN_FRONTEND=noninteractive \
       && apt-get update -qq && apt-get install -y -qq --no-install-recommends ${variant_packages[${name}]} \
       && rm -rf /var/cache/apt/archives/*.deb /usr/share/doc/* /usr/share/man/* \
       && ${variant_setup[${name}]:-true}" >"/tmp/${box}.log" 2>&1 \
    || ! docker commit \
      --change 'CMD ["/lib/systemd/systemd"]' \
      --change "LABEL org.labfleet.recipe=${want} org.labfleet.suite=${variant_base[${name}]} org.labfleet.variant=${name}" \
      "${box}" "${tag}" >>"/tmp/${box}.log" 2>&1; then
    tail -n 20 "/tmp/${box}.log" >&2
    rm -f "/tmp/${box}.log"
    docker rm -f "${box}" >/dev/null 2>&1 || true
    log "${name}: installing ${variant_packages[${name}]} failed (log above)"
    return 1
  fi
  rm -f "/tmp/${box}.log"
  docker rm -f "${box}" >/dev/null 2>&1 || true
  log "built ${tag}"
}

# One job a base suite (in parallel), each followed by the variants asked for on it.
declare -A wanted=()
for name in "${suites[@]}"; do
  if [ -n "${variant_base[${name}]:-}" ]; then
    wanted[${variant_base[${name}]}]+=" ${name}"
  elif [ "${name}" = bookworm ] || [ "${name}" = trixie ]; then
    wanted[${name}]+=""
  else
    log "unknown image ${name} (bookworm, trixie, ${!variant_base[*]})"
    exit 2
  fi
done
for suite in "${!wanted[@]}"; do
  var=$(image_var "${suite}")
  if [ -z "${!var:-}" ] && [ "$(recipe_of "${repo}:${suite}")" != "${recipe}" ]; then
    need_debootstrap
  fi
done

pids=()
for suite in "${!wanted[@]}"; do
  (
    ensure_suite "${suite}"
    for name in ${wanted[${suite}]}; do ensure_variant "${name}"; done
  ) &
  pids+=($!)
done

rc=0
for pid in "${pids[@]}"; do wait "${pid}" || rc=1; done
# An image rebuilt from a new recipe leaves its old self untagged: remove such leftovers (only the
# project's: they carry the recipe label), so that Docker's disk use does not grow run after run.
docker image prune -f --filter label=org.labfleet.recipe >/dev/null 2>&1 || true
exit "${rc}"
