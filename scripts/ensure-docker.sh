#!/usr/bin/env bash
# Make sure a Docker engine answers on this machine, for the Molecule tests.
# 1. An engine that already answers is used as it is.
# 2. Else, as root: install Debian's docker.io if dockerd is missing, then start the engine
#    (through systemd when systemd runs this machine, else as a background dockerd).
# 3. Else: stop with a message that says what to do.
set -euo pipefail

log() { printf 'ensure-docker: %s\n' "$*" >&2; }

if docker info >/dev/null 2>&1; then
  log "Docker engine answers ($(docker info --format '{{.ServerVersion}}' 2>/dev/null))."
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  log "no Docker engine answers and this is not root, so it cannot be installed or started here."
  log "Start one yourself (e.g. 'sudo systemctl start docker') or run 'make test' as root."
  exit 1
fi

if ! command -v dockerd >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 || { log "dockerd is missing and apt-get is not available: install a Docker engine first."; exit 1; }
  log "installing Debian's docker.io (the engine is missing)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends docker.io >/dev/null
fi

if [ -d /run/systemd/system ] && systemctl cat docker.service >/dev/null 2>&1; then
  log "starting docker.service"
  systemctl start docker.service || true
fi

if ! docker info >/dev/null 2>&1; then
  logfile="${LABFLEET_DOCKERD_LOG:-/var/log/labfleet-dockerd.log}"
  log "starting dockerd in the background (log: ${logfile})"
  # containerd is started by dockerd itself when no system containerd runs.
  setsid nohup dockerd >"${logfile}" 2>&1 </dev/null &
fi

for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then
    log "Docker engine answers ($(docker info --format '{{.ServerVersion}}'))."
    exit 0
  fi
  sleep 1
done
log "the Docker engine did not answer within 60 s; see ${logfile:-the docker.service journal}."
exit 1
