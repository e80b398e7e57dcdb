#!/usr/bin/env bash
# Installs every build and test dependency from Debian's packages. Idempotent.
# Usage: scripts/setup.sh            (build + test deps)
#        EXLR8_SETUP_ONLY=build scripts/setup.sh   (only what build/ needs: g++,
#                                                   CMake and the libraries)
#        EXLR8_SETUP_BENCH=1 scripts/setup.sh   (also nginx, aria2 for bench/)
set -euo pipefail

pkgs=(
  build-essential cmake ninja-build pkg-config git
  libcurl4-openssl-dev      # range fetcher (libcurl multi)
  libboost1.81-dev          # Beast, Asio, JSON (REST, hub simulator)
  libssl-dev                # SHA-256 / SHA-1 through EVP
  libxxhash-dev xxhash      # XXH64 checksums; xxhsum is the benchmark baseline
  libsqlite3-dev            # cache index
  libgtest-dev libgmock-dev # tests
)
only_build=0
[[ "${EXLR8_SETUP_ONLY:-}" == build ]] && only_build=1
if ((!only_build)); then
  pkgs+=(
    clang libclang-rt-14-dev  # ThreadSanitizer tree, libFuzzer targets
    python3 python3-venv      # huggingface_hub compatibility test
    curl openssl              # openssl: the test CA of pull_tls_test
  )
fi
if [[ "${EXLR8_SETUP_BENCH:-0}" == 1 ]]; then
  pkgs+=(nginx-light aria2 time bc)
fi

SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO=sudo

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

((only_build)) && exit 0

# nginx for the HTTPS + HTTP/2 CDN of tests/daemon/pull_tls_test.cpp: the
# binary of Debian's nginx package unpacked under .tools/ (git ignores it),
# not installed, so no nginx service is started or enabled on a developer's
# machine. The test also finds a system nginx; without either it skips,
# saying so.
tools=$(cd "$(dirname "$0")/.." && pwd)/.tools
if [[ ! -x $tools/nginx/usr/sbin/nginx ]]; then
  debs=$(mktemp -d)
  if ! (cd "$debs" && apt-get download -qq nginx 2> /dev/null); then
    $SUDO apt-get update -qq
    (cd "$debs" && apt-get download -qq nginx 2> /dev/null)
  fi
  mkdir -p "$tools/nginx"
  dpkg -x "$debs"/nginx_*.deb "$tools/nginx"
  rm -rf "$debs"
  echo "setup: nginx unpacked under $tools/nginx (for the TLS pull test)"
fi
