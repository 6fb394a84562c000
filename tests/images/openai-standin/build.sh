#!/usr/bin/env bash
# Test fixture of labfleet.vllm: build the OpenAI stand-in images on the local Docker engine and
# write each as a `docker save` tarball, the form an air-gapped lab gets its vLLM image in.
#
#   tests/images/openai-standin/build.sh OUTDIR [TAG...]
#
# Tags: 1 (healthy), 2 (healthy, a newer version), 2-notokens (answers /health and /v1/models, completions carry no tokens),
# 2-exits (exits 0 three seconds into a 30-second "model load", before it listens), 2-exit1 (the same,
# with exit status 1: a crashed server), 2-hangs (answers /health and /v1/models, never answers a
# completion: it holds the connection), 2-noarch70 (healthy, but its TORCH_CUDA_ARCH_LIST lacks 7.0:
# no kernels for a V100), any of them with "-ray" (1-ray, 2-ray: Ray from PyPI added, the `ray` command on
# PATH; ray-constraints.txt); dcgm-exporter builds
# the fake dcgm-exporter instead (labfleet/fake-dcgm-exporter:1, fake-dcgm-exporter-1.tar). Default: 1 2-notokens 2-exits.
# A tarball is rewritten only when the image changed; prints one line per tag:
#   "<tag> <image id> <tarball> built|unchanged".
# Molecule scenarios that run side by side call this at the same time with the same OUTDIR: one
# at a time builds (a lock on OUTDIR/.build.lock), and a tarball appears whole (renamed into place).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build.sh OUTDIR [TAG...]}
shift
tags=("$@")
[ ${#tags[@]} -gt 0 ] || tags=(1 2-notokens 2-exits)
base=${LABFLEET_STANDIN_BASE:-${LABFLEET_MOLECULE_IMAGE_BOOKWORM:-labfleet/molecule-debian:bookworm}}
mkdir -p "${out}"
exec 9>"${out}/.build.lock"
flock 9

# Ray for the "-ray" tags, installed once per constraints file into OUTDIR/ray-site-<hash> (pip's own cache
# keeps the wheels): CPython 3.11 manylinux wheels, whatever the build machine's Python.
ray_site() {
  local sum site
  sum=$(sha256sum "${here}/ray-constraints.txt" | cut -c1-12)
  site="${out}/ray-site-${sum}"
  if [ ! -f "${site}/.complete" ]; then
    rm -rf "${site}" "${site}.tmp"
    local py="${LABFLEET_PIP_PYTHON:-python3}"
    # An interpreter without pip (Debian's python3 without python3-pip): pip from a venv of its own.
    if ! "${py}" -m pip --version >/dev/null 2>&1; then
      [ -x "${out}/pip-venv/bin/python" ] || "${py}" -m venv "${out}/pip-venv" >&2
      py="${out}/pip-venv/bin/python"
    fi
    "${py}" -m pip install -q --disable-pip-version-check --only-binary=:all: --no-compile \
      --python-version 3.11 --implementation cp --platform manylinux2014_x86_64 \
      --target "${site}.tmp" -c "${here}/ray-constraints.txt" ray >&2
    touch "${site}.tmp/.complete"
    mv "${site}.tmp" "${site}"
  fi
  echo "${site}"
}

for tag in "${tags[@]}"; do
  context="${here}" image="labfleet/openai-standin:${tag}" tarball="${out}/openai-standin-${tag}.tar"
  ray=""
  case "${tag}" in
    # A stand-in with Ray (the group's image: --distributed-executor-backend ray, `ray start` on every
    # member): the tag's stand-in (1-ray: version 1, 2-ray: version 2) plus Ray from PyPI.
    *-ray) ray="${tag%-ray}" ;;
  esac
  case "${tag%-ray}" in
    # Not an OpenAI stand-in: the fake dcgm-exporter (tests/images/fake-dcgm-exporter), built the same way.
    dcgm-exporter)
      args=() context="${here}/../fake-dcgm-exporter" image="labfleet/fake-dcgm-exporter:1"
      tarball="${out}/fake-dcgm-exporter-1.tar" ;;
    1) args=(--build-arg STANDIN_VERSION=1) ;;
    2) args=(--build-arg STANDIN_VERSION=2) ;;
    2-notokens) args=(--build-arg STANDIN_VERSION=2 --build-arg STANDIN_NO_TOKENS=1) ;;
    2-exits) args=(--build-arg STANDIN_VERSION=2 --build-arg STANDIN_START_DELAY=30 --build-arg STANDIN_EXIT_AFTER=3) ;;
    2-exit1) args=(--build-arg STANDIN_VERSION=2 --build-arg STANDIN_START_DELAY=30 --build-arg STANDIN_EXIT_AFTER=3
                   --build-arg STANDIN_EXIT_CODE=1) ;;
    2-hangs) args=(--build-arg STANDIN_VERSION=2 --build-arg STANDIN_HANG_COMPLETIONS=1) ;;
    2-noarch70) args=(--build-arg STANDIN_VERSION=2 --build-arg "STANDIN_TORCH_CUDA_ARCH_LIST=7.5 8.0 8.6 8.9 9.0+PTX") ;;
    *) echo "build.sh: unknown tag ${tag}" >&2; exit 2 ;;
  esac
  if [ -n "${ray}" ]; then
    docker build -q --build-arg BASE_IMAGE="${base}" "${args[@]}" -t "labfleet/openai-standin:${ray}" "${context}" >/dev/null
    site=$(ray_site)
    ctx=$(mktemp -d)
    cp -a "${site}" "${ctx}/ray-site"
    rm -f "${ctx}/ray-site/.complete"
    rm -rf "${ctx}/ray-site/bin"
    cp "${here}/Dockerfile.ray" "${ctx}/Dockerfile"
    docker build -q --build-arg STANDIN_IMAGE="labfleet/openai-standin:${ray}" -t "${image}" "${ctx}" >/dev/null
    rm -rf "${ctx}"
  else
    docker build -q --build-arg BASE_IMAGE="${base}" "${args[@]}" -t "${image}" "${context}" >/dev/null
  fi
  id=$(docker image inspect --format '{{.Id}}' "${image}")
  if [ -f "${tarball}" ] && [ "$(cat "${tarball}.id" 2>/dev/null)" = "${id}" ]; then
    echo "${tag} ${id} ${tarball} unchanged"
    continue
  fi
  docker save -o "${tarball}.tmp" "${image}"
  chmod 0644 "${tarball}.tmp"
  mv -f "${tarball}.tmp" "${tarball}"
  echo "${id}" >"${tarball}.id.tmp"
  mv -f "${tarball}.id.tmp" "${tarball}.id"
  echo "${tag} ${id} ${tarball} built"
done
# A stand-in rebuilt from a changed context leaves its old image untagged; the stand-ins carry the base
# image's label org.labfleet.recipe, so this removes such leftovers and nothing else of the machine's.
docker image prune -f --filter label=org.labfleet.recipe >/dev/null 2>&1 || true
