#!/usr/bin/env bash
# Installs the Debian packages strata needs to build, test and run.
# Idempotent: asks apt only for packages that are missing, so a warm machine
# pays one dpkg query and nothing else.
set -euo pipefail

packages=(
  build-essential cmake pkg-config clang libclang-rt-14-dev clang-format
  librocksdb-dev liburing-dev libfuse3-dev fuse3 libxxhash-dev
  libzstd-dev zlib1g-dev libssl-dev erofs-utils
  python3 python3-pytest
  util-linux procps psmisc iproute2 e2fsprogs xfsprogs
  libjson-c-dev docker-registry skopeo debootstrap busybox-static zstd
  libseccomp-dev crun musl-tools nftables libnftables-dev
  qemu-system-x86 umoci
)

# Debian 12's kernel for the tests that boot a VM (scripts/testvm.sh:
# cgroup v2 only, which this machine cannot have beside its v1 controllers).
# Downloaded once, not installed; a failure here (no archive) only makes
# those tests skip.
prepare_testvm() {
  "$(dirname "$0")/testvm.sh" prepare || echo "install-deps: no test VM kernel (its tests will skip)" >&2
}

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  prepare_testvm
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
prepare_testvm
