#!/usr/bin/env bash
# What the test bed leaves in Docker: containers, volumes (anonymous ones included), networks and
# disk use, before and after `make test`.
#
#   scripts/docker-footprint.sh show  LABEL          one line: counts and `docker system df` sizes
#   scripts/docker-footprint.sh save  DIR            show "before", and keep the lists of IDs in DIR
#   scripts/docker-footprint.sh check DIR            show "after"; name every container, volume and
#                                                    network that is new since `save`; exit 1 if any
#
# Images and the build cache are caches the test bed keeps on purpose (the base images, the
# stand-in images; `make clean-images` removes them): they are shown, and a second run must not grow
# them, but a first run on a fresh machine builds them. Containers, volumes and networks must be
# exactly what they were: each scenario removes its own on destroy, also when it fails.
set -euo pipefail

ids() {  # the sorted IDs of one kind of Docker object
  case $1 in
    containers) docker ps -aq --no-trunc ;;
    volumes) docker volume ls -q ;;
    # By name, without the three Docker itself makes (a first run may install Docker).
    networks) docker network ls --format '{{.Name}}' | grep -vxE 'bridge|host|none' || true ;;
    images) docker images -aq --no-trunc ;;
  esac | sort -u
}

show() {
  local label=$1 line kind
  if ! docker info >/dev/null 2>&1; then
    echo "docker footprint (${label}): no Docker engine answers (nothing in Docker)"
    return 0
  fi
  line="docker footprint (${label}):"
  for kind in containers volumes networks images; do
    line+=" ${kind} $(ids "${kind}" | grep -c . || true),"
  done
  # "Images 1.9GB, Containers 0B, Local Volumes 0B, Build Cache 0B" (disk use).
  line+=" disk: $(docker system df --format '{{.Type}} {{.Size}}' | paste -sd, | sed 's/,/, /g')"
  echo "${line}"
}

case ${1:-} in
  show) show "${2:-now}" ;;
  save)
    dir=${2:?usage: docker-footprint.sh save DIR}
    mkdir -p "${dir}"
    show before | tee "${dir}/before.txt"
    if docker info >/dev/null 2>&1; then
      for kind in containers volumes networks images; do ids "${kind}" >"${dir}/${kind}"; done
    else
      for kind in containers volumes networks images; do : >"${dir}/${kind}"; done
    fi
    ;;
  check)
    dir=${2:?usage: docker-footprint.sh check DIR}
    cat "${dir}/before.txt"
    show after
    docker info >/dev/null 2>&1 || exit 0
    # A container that a `docker run --rm` or a destroy is still removing is not left behind: give
    # Docker up to 30 s to finish what it started before judging.
    for _ in $(seq 30); do
      [ -z "$(comm -13 "${dir}/containers" <(ids containers))" ] && break
      sleep 1
    done
    leaked=0
    for kind in containers volumes networks; do
      new=$(comm -13 "${dir}/${kind}" <(ids "${kind}"))
      if [ -n "${new}" ]; then
        leaked=1
        echo "docker footprint: LEFT BEHIND: $(grep -c . <<<"${new}") ${kind}:"
        while read -r id; do
          case ${kind} in
            # Everything that says where it came from: name, image, state, creation time, labels, command.
            containers) docker inspect --format '  {{.Name}} image={{.Config.Image}} state={{.State.Status}}
    created={{.Created}} labels={{json .Config.Labels}} cmd={{json .Config.Cmd}}' "${id}" 2>/dev/null \
                          || echo "  ${id} (gone while being listed)" ;;
            *) echo "  ${id}" ;;
          esac
        done <<<"${new}"
      fi
    done
    new_images=$(comm -13 "${dir}/images" <(ids images) | grep -c . || true)
    echo "docker footprint: new images since before: ${new_images} (caches: base and stand-in images)"
    if [ "${leaked}" -eq 0 ]; then
      echo "docker footprint: containers, volumes and networks as before"
    fi
    exit "${leaked}"
    ;;
  *) echo "usage: docker-footprint.sh show LABEL | save DIR | check DIR" >&2; exit 2 ;;
esac
