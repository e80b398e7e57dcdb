#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan, coverage-instrumented
# format/) in build-fuzz/ and runs each for a bounded time.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]   run each target SECONDS (default 60,
#                                           or $EXLR8_FUZZ_SECONDS), all targets
#                                           unless named (fuzz_json ...)
#   scripts/fuzz.sh --ci                    quiet output, as scripts/test.sh uses it
#   EXLR8_JOBS=N                            targets fuzzed in parallel (default: nproc)
#
# Each target starts from its seed corpus (tests/fuzz/corpus/<name>) copied to
# build-fuzz/tests/fuzz/<target>.corpus/, which keeps what the fuzzer finds,
# so repeated runs go deeper. A crash leaves build-fuzz/tests/fuzz/<target>-crash-*;
# reproduce with: build-fuzz/tests/<target> <that file>. Targets are declared
# with exlr8_add_fuzzer() in tests/fuzz/CMakeLists.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

ci=0
if [[ "${1:-}" == --ci ]]; then
  ci=1
  shift
fi
seconds=${EXLR8_FUZZ_SECONDS:-60}
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then
  seconds=$1
  shift
fi
jobs=${EXLR8_JOBS:-$(nproc)}

command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (scripts/setup.sh installs it)" >&2; exit 1; }

cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS=-Wno-unknown-warning-option \
  -DEXLR8_WERROR=ON -DEXLR8_FUZZ=ON -DEXLR8_FUZZ_SECONDS="$seconds" \
  -DEXLR8_GPU=OFF -DEXLR8_BUILD_BENCH=OFF >/dev/null

if (($#)); then
  targets=("$@")
else
  mapfile -t targets < <(ctest --test-dir build-fuzz -N -L fuzz | awk '/Test +#[0-9]+:/ {print $3}')
fi
((${#targets[@]})) || { echo "fuzz.sh: no fuzz targets registered" >&2; exit 1; }

echo "fuzz.sh: building ${targets[*]}"
cmake --build build-fuzz -j"$jobs" --target "${targets[@]}" >/dev/null

regex="^($(IFS='|'; echo "${targets[*]}"))\$"
echo "fuzz.sh: running each target for ${seconds}s"
if ((ci)); then
  ctest --test-dir build-fuzz -L fuzz -R "$regex" -j"$jobs" --output-on-failure
else
  ctest --test-dir build-fuzz -L fuzz -R "$regex" -j"$jobs" -V
fi
