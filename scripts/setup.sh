#!/usr/bin/env bash
# Installs every build and test dependency from Debian's packages. Idempotent.
# Usage: scripts/setup.sh            (build + test deps)
#        EXLR8_SETUP_BENCH=1 scripts/setup.sh   (also nginx, aria2 for bench/)
set -euo pipefail

pkgs=(
  build-essential cmake pkg-config git
  libcurl4-openssl-dev      # range fetcher (libcurl multi)
  libboost1.81-dev          # Beast, Asio, JSON (REST, hub simulator)
  libssl-dev                # SHA-256 / SHA-1 through EVP
  libxxhash-dev xxhash      # XXH64 checksums; xxhsum is the benchmark baseline
  libsqlite3-dev            # cache index
  libgtest-dev libgmock-dev # tests
  clang libclang-rt-14-dev  # libFuzzer targets
  python3 python3-venv      # huggingface_hub compatibility test
  curl
)
if [[ "${EXLR8_SETUP_BENCH:-0}" == 1 ]]; then
  pkgs+=(nginx-light aria2 time bc)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO=sudo
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi
