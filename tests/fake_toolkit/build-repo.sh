#!/bin/sh
# TEST FIXTURE ONLY. Build a signed, flat apt repository of FAKE NVIDIA Container Toolkit packages
# (nvidia-container-toolkit, nvidia-container-toolkit-base, libnvidia-container-tools,
# libnvidia-container1), laid out like NVIDIA's (…/stable/deb/<arch>/), for labfleet.vllm's Molecule
# scenarios: NVIDIA's real repository cannot be reached from CI. Run inside the test instance:
#
#   build-repo.sh OUTDIR VERSION...      e.g.  build-repo.sh /srv/fake-nvidia-repo 1.18.2 1.19.1
#
# Writes OUTDIR/stable/deb/<arch>/{*.deb,Packages,Release,InRelease,Release.gpg}, the public key
# OUTDIR/gpgkey (ASCII-armored, like https://nvidia.github.io/libnvidia-container/gpgkey) and its
# fingerprint in OUTDIR/fingerprint. Needs dpkg-deb, apt-ftparchive (apt-utils) and gpg.
#
# Copyright: (c) 2026, labfleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
set -eu

[ $# -ge 2 ] || { echo "usage: $0 OUTDIR VERSION..." >&2; exit 2; }
out=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
arch=$(dpkg --print-architecture)
repo="${out}/stable/deb/${arch}"
work=$(mktemp -d)
trap 'rm -rf "${work}"' EXIT
mkdir -p "${repo}"

# One package: build_deb NAME VERSION DEPENDS [FILE...] (FILEs from bin/, installed in /usr/bin).
build_deb() {
  name=$1 version=$2 depends=$3
  shift 3
  root="${work}/${name}_${version}"
  mkdir -p "${root}/DEBIAN" "${root}/usr/share/doc/${name}"
  for tool in "$@"; do
    mkdir -p "${root}/usr/bin"
    sed "s/@VERSION@/${version}/g" "${here}/bin/${tool}" >"${root}/usr/bin/${tool}"
    chmod 0755 "${root}/usr/bin/${tool}"
  done
  printf 'FAKE package built by labfleet.vllm tests/fake_toolkit (a test fixture, not NVIDIA software).\n' \
    >"${root}/usr/share/doc/${name}/README.fake"
  {
    printf 'Package: %s\nVersion: %s-1\nArchitecture: %s\n' "${name}" "${version}" "${arch}"
    printf 'Maintainer: labfleet test fixture <fake-nvidia@labfleet.invalid>\n'
    [ -z "${depends}" ] || printf 'Depends: %s\n' "${depends}"
    printf 'Section: utils\nPriority: optional\n'
    printf 'Description: FAKE %s for labfleet.vllm Molecule tests\n' "${name}"
    printf ' Test fixture only: shell scripts that imitate a few NVIDIA commands. Not NVIDIA software.\n'
  } >"${root}/DEBIAN/control"
  dpkg-deb --root-owner-group --build "${root}" "${repo}/${name}_${version}-1_${arch}.deb" >/dev/null
}

for v in "$@"; do
  build_deb libnvidia-container1 "${v}" ""
  build_deb libnvidia-container-tools "${v}" "libnvidia-container1 (>= ${v}-1)" nvidia-container-cli
  build_deb nvidia-container-toolkit-base "${v}" "" nvidia-ctk nvidia-container-runtime
  build_deb nvidia-container-toolkit "${v}" \
    "nvidia-container-toolkit-base (= ${v}-1), libnvidia-container-tools (>= ${v}-1), libnvidia-container-tools (<< 2.0.0)" \
    nvidia-container-runtime-hook
done

# A signing key of its own, in a throw-away keyring.
export GNUPGHOME="${work}/gnupg"
mkdir -m 0700 "${GNUPGHOME}"
gpg --batch --quiet --passphrase '' --quick-gen-key 'labfleet FAKE NVIDIA repository (test fixture) <fake-nvidia@labfleet.invalid>' \
  default sign never 2>/dev/null
gpg --batch --armor --export >"${out}/gpgkey"
gpg --batch --with-colons --fingerprint | awk -F: '$1 == "fpr" { print $10; exit }' >"${out}/fingerprint"

cd "${repo}"
apt-ftparchive packages . >Packages
apt-ftparchive -o APT::FTPArchive::Release::Origin='labfleet fake NVIDIA' \
  -o APT::FTPArchive::Release::Label='labfleet fake NVIDIA' release . >"${work}/Release"
mv "${work}/Release" Release
gpg --batch --quiet --yes --clearsign -o InRelease Release
gpg --batch --quiet --yes --armor --detach-sign -o Release.gpg Release
echo "fake NVIDIA repository: ${repo} ($(find . -name '*.deb' | wc -l) packages), key $(cat "${out}/fingerprint")"
