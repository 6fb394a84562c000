#!/bin/sh
# TEST FIXTURE ONLY (molecule scenario nvidia_driver_bookworm_repo): build a signed stand-in for
# NVIDIA's Debian 12 CUDA repository, because the real one cannot be reached from CI. It holds
# empty packages with NVIDIA's names in two branches, 550.163.01 and 590.48.01, and
# nvidia-driver-cuda accepts any kernel module >= 550 (as NVIDIA's cuda-drivers-580 accepted 590),
# so only the role's version pin keeps the host on R550. The signing key is generated here and
# thrown away; its public part and fingerprint are left next to the repository.
#   build_fake_cuda_repo.sh [root]      (default /srv/labfleet-fake-cuda)
set -eu

root="${1:-/srv/labfleet-fake-cuda}"
repo="${root}/debian12/x86_64"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
GNUPGHOME="${work}/gnupg"
export GNUPGHOME
mkdir -m 700 "${GNUPGHOME}"
mkdir -p "${repo}"

# stand_in NAME VERSION [DEPENDS]
stand_in() {
  dir="${work}/$1_$2"
  mkdir -p "${dir}/DEBIAN" "${dir}/usr/share/doc/$1"
  {
    echo "Package: $1"
    echo "Version: $2"
    echo "Architecture: amd64"
    echo "Maintainer: labfleet tests <tests@labfleet.invalid>"
    if [ -n "${3:-}" ]; then echo "Depends: $3"; fi
    echo "Description: labfleet test stand-in for NVIDIA's $1 (no driver inside)"
  } > "${dir}/DEBIAN/control"
  echo "Test fixture of labfleet.vllm; not NVIDIA's package." > "${dir}/usr/share/doc/$1/README"
  if [ "$1" = nvidia-persistenced ]; then
    mkdir -p "${dir}/usr/bin" "${dir}/usr/lib/systemd/system"
    printf '#!/bin/sh\necho "stand-in nvidia-persistenced: no driver" >&2\nexit 1\n' > "${dir}/usr/bin/nvidia-persistenced"
    chmod 0755 "${dir}/usr/bin/nvidia-persistenced"
    printf '[Unit]\nDescription=NVIDIA Persistence Daemon (test stand-in)\n\n[Service]\nType=forking\nExecStart=/usr/bin/nvidia-persistenced --user nvpd\n\n[Install]\nWantedBy=multi-user.target\n' \
      > "${dir}/usr/lib/systemd/system/nvidia-persistenced.service"
  fi
  dpkg-deb --build --root-owner-group "${dir}" "${repo}/$1_$2_amd64.deb" > /dev/null
}

for version in 550.163.01-1 590.48.01-1; do
  stand_in nvidia-kernel-dkms "${version}"
  stand_in nvidia-kernel-open-dkms "${version}"
  stand_in nvidia-persistenced "${version}"
  stand_in nvidia-driver-cuda "${version}" "nvidia-kernel-dkms (>= 550.0) | nvidia-kernel-open-dkms (>= 550.0)"
done

cd "${repo}"
apt-ftparchive packages . > Packages
gzip -9kn Packages
apt-ftparchive -o APT::FTPArchive::Release::Origin=labfleet-test \
  -o APT::FTPArchive::Release::Label="labfleet stand-in for NVIDIA CUDA" release . > Release
gpg --batch --quiet --passphrase '' --quick-gen-key \
  'labfleet molecule stand-in repository <tests@labfleet.invalid>' ed25519 sign never
gpg --batch --quiet --yes --clearsign -o InRelease Release
gpg --armor --export > "${root}/labfleet-test-key.asc"
gpg --with-colons --fingerprint | awk -F: '$1 == "fpr" { print $10; exit }' > "${root}/fingerprint"
chmod -R a+rX "${root}"
