#!/usr/bin/env bash
# clang's -Wthread-safety over every source of daemon/ (the whole daemon,
# exlr8d-stage included, whether or not a build tree compiles it with
# clang), as a syntax-only pass: the GUARDED_BY / REQUIRES annotations of
# daemon/base/mutex.h are checked wherever they are used.
#
#   scripts/thread_safety.sh BUILD_DIR   BUILD_DIR: a configured build tree
#                                        (for its generated headers)
# Exits non-zero, naming the file and line, on the first file that fails.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: scripts/thread_safety.sh BUILD_DIR}
cxx=${EXLR8_CLANGXX:-clang++}
flags=(-std=c++20 -fsyntax-only -Wthread-safety -Werror=thread-safety -I. -I"$build/generated" -Iclient/include
       -DEXLR8_SOURCE_DIR='""' -DEXLR8_BIN_DIR='""' -DEXLR8_SHARED_DIR='""')
# exlr8d-stage's sources name the CUDA runtime's headers.
for cuda in /usr/local/cuda/include /usr/include; do
  [[ -e $cuda/cuda_runtime_api.h ]] && { flags+=(-isystem "$cuda"); break; }
done
git ls-files 'daemon/*.cpp' | xargs -P "$(nproc)" -n 4 "$cxx" "${flags[@]}"
echo "-Wthread-safety: $(git ls-files 'daemon/*.cpp' | wc -l) daemon sources checked"
