#!/usr/bin/env bash
# Sets up, builds from scratch and runs every test. This is the README's test
# command and what CI runs (.ci/run).
#
#   scripts/test.sh            full run: setup, build, ctest, sanitizer tests (ASan+UBSan, TSan), the demo
#                              on its Release build, bounded fuzzing; every build with -DEXLR8_WERROR=ON
#   EXLR8_SKIP_SETUP=1 ...     skip apt-get (dependencies already installed)
#   EXLR8_JOBS=N ...           parallel build/test jobs (default: nproc)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
jobs=${EXLR8_JOBS:-$(nproc)}
start=$(date +%s)

step() { printf '\n==== %s (%ss)\n' "$*" "$(($(date +%s) - start))"; }

if [[ "${EXLR8_SKIP_SETUP:-0}" != 1 ]]; then
  step "setup"
  scripts/setup.sh
fi

step "build (RelWithDebInfo) in build/"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEXLR8_WERROR=ON >/dev/null
cmake --build build -j"$jobs"

step "tests"
ctest --test-dir build --output-on-failure -j"$jobs" --timeout 600

step "format/ unit tests under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/)"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DEXLR8_WERROR=ON -DEXLR8_SANITIZE=ON -DEXLR8_GPU=OFF -DEXLR8_BUILD_BENCH=OFF >/dev/null
make -C build-asan/tests/format -j"$jobs" --no-print-directory >/dev/null
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan/tests/format --output-on-failure -j"$jobs"

step "the pull engine's threaded parts under ThreadSanitizer (build-tsan/)"
# The fetch thread, the write workers, the committers and the planner meet
# in these; each test runs real transfers over loopback. The pulls run the
# real consumers on several write workers at once (and the exlr8d command,
# also built with ThreadSanitizer). The scrub hashes on several threads; the
# holder's step reporter writes from a thread of its own. pull_tls_test's
# pulls multiplex on HTTP/2, where backpressure blocks the fetch thread.
tsan_tests=(fetch_session_test offload_consumer_test range_fetcher_test commit_batcher_test cache_test
            pull_headers_test rank_reader_test scrub_test lease_server_test stage_state_test pull_tls_test)
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEXLR8_WERROR=ON -DEXLR8_TSAN=ON -DEXLR8_GPU=OFF -DEXLR8_BUILD_BENCH=OFF \
  >/dev/null
cmake --build build-tsan -j"$jobs" --target "${tsan_tests[@]}" pull_test serve_jobs_test serve_stages_test exlr8d \
  >/dev/null
for t in "${tsan_tests[@]}"; do
  TSAN_OPTIONS=halt_on_error=1 "build-tsan/tests/$t" --gtest_brief=1
done
TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/pull_test --gtest_brief=1 \
  --gtest_filter='PullTest.FaultsStillByteExact:PullTest.BackgroundJobsSettingsAllGiveTheExactPlan'
# `exlr8d serve` (built with ThreadSanitizer) running, cancelling and resuming
# jobs, and starting and releasing holders, while its API thread answers: a
# race report aborts the server, which the tests see in its exit status.
TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/serve_jobs_test --gtest_brief=1
TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/serve_stages_test --gtest_brief=1


# The README's first quick-start command, as a user runs it: its Release
# build (-O3 warns where RelWithDebInfo does not: a Release-only warning once
# broke it unseen) and the main job against the hub stand-in.
mkdir -p "$root/out"
step "the quick start's main job (scripts/demo.sh: Release build in build-release/, pull, verify, serve)"
EXLR8_SKIP_SETUP=1 EXLR8_CMAKE_ARGS=-DEXLR8_WERROR=ON EXLR8_DEMO_DIR="$root/out/demo" scripts/demo.sh >"$root/out/demo.log" 2>&1 ||
  { cat "$root/out/demo.log"; echo "scripts/demo.sh failed" >&2; exit 1; }
tail -6 "$root/out/demo.log"

if [[ -x scripts/fuzz.sh ]] && command -v clang++ >/dev/null; then
  step "bounded libFuzzer runs (build-fuzz/)"
  EXLR8_FUZZ_SECONDS=${EXLR8_FUZZ_SECONDS:-15} scripts/fuzz.sh --ci
fi

step "all tests passed"
