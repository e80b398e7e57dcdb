#!/usr/bin/env bash
# The README's test command and what CI runs (.ci/run): installs what the
# build needs, builds from scratch and runs a tier of the tests.
#
#   scripts/test.sh          the default tier, about 10-11 minutes on 2 cores:
#                              build/       g++, -O1; every
#                                           unit and integration test
#                                           (ctest -LE full), the fuzz replays
#                              build-asan/  ASan + UBSan over format/ and the
#                                           other parsers, with their fuzz replays
#                              build-tsan/  clang, ThreadSanitizer and
#                                           -Wthread-safety over the threaded parts
#                              the quick start's demo on build/'s binaries
#   scripts/test.sh --full   the default tier, then the long one: the tests
#                            labelled `full` (Python compatibility, release
#                            sweeps with faults), the crash loop with 100
#                            kills, the timing-sensitive tests 3 times over,
#                            every threaded test under TSan, -Wthread-safety
#                            over every daemon source, the demo on its own
#                            Release build (-O3), libFuzzer for 60 s a target
#
#   EXLR8_SKIP_SETUP=1   skip apt-get (dependencies already installed)
#   EXLR8_JOBS=N         parallel build and test jobs (default: nproc)
#
# Every build has -DEXLR8_WERROR=ON. The slowest tests of each ctest run are
# printed at its end (and the JUnit report is in out/). docs/TESTING.md says
# which tests run where.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
jobs=${EXLR8_JOBS:-$(nproc)}
full=0
case "${1:-}" in
  --full) full=1 ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--full]" >&2; exit 2 ;;
esac
start=$(date +%s)
step() { printf '\n==== %s (%ss)\n' "$*" "$(($(date +%s) - start))"; }
mkdir -p "$root/out"

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

# A build step whose output goes to out/NAME.log, shown when it fails: a
# quiet log when all is well, the compiler's error when not.
quiet_build() {
  local name=$1
  shift
  "$@" >"$root/out/$name.log" 2>&1 || {
    tail -150 "$root/out/$name.log"
    echo "$name failed: $* (whole log in out/$name.log)" >&2
    exit 1
  }
}

# ctest over one build tree, then its slowest tests.
run_ctest() {
  local dir=$1 name=$2
  shift 2
  local status=0
  ctest --test-dir "$dir" --output-on-failure -j"$((jobs * 2))" --timeout 600 \
    --output-junit "$root/out/ctest-$name.xml" "$@" || status=$?
  python3 scripts/slowest_tests.py "$root/out/ctest-$name.xml" 5 || true
  return $status
}

# The build's packages first; clang and the rest are installed while
# build/ compiles (apt waits on the network more than on the cores).
if [[ "${EXLR8_SKIP_SETUP:-0}" != 1 ]]; then
  step "setup"
  EXLR8_SETUP_ONLY=build scripts/setup.sh
  scripts/setup.sh >"$root/out/setup-rest.log" 2>&1 &
  setup_rest=$!
fi
wait_setup() {
  [[ -z "${setup_rest:-}" ]] && return 0
  wait "$setup_rest" || { cat "$root/out/setup-rest.log"; echo "scripts/setup.sh failed" >&2; exit 1; }
  setup_rest=
}

step "build (g++ -O1) in build/"
quiet_build configure cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" -DEXLR8_WERROR=ON -DEXLR8_TEST_OPTIMIZE=-O1 -DEXLR8_GPU_PTDS_TESTS=OFF -DEXLR8_UNITY_BUILD=ON
quiet_build build cmake --build build -j"$jobs"
wait_setup

# The sanitizer trees build in the background at the lowest priority while
# build/'s tests run: the tests wait on sockets, timers and disks for about
# a third of their time, and the compilers take exactly those cycles.
#
# build-asan/: format/ whole (every reader of release bytes), the hub's
# protocol and answer checks, the REST API's query strings and the lease
# description a serving process reads, with their fuzz replays: every test
# labelled `parser` (the target exlr8_parser_tests builds them all).
#
# build-tsan/: the fetch thread, the write workers, the committers and the
# planner meet in these, over real transfers on loopback; the scrub hashes
# on several threads; the holder's step reporter and the lease server have
# threads of their own; the base's mutex, clock and atomic file tests race
# threads on purpose, and serve's scheduler tests race cancels against
# starts; the cache's catalog and extent store and the fetcher's job table
# are shared by the pull's threads. -Wthread-safety -Werror checks the
# GUARDED_BY and REQUIRES annotations of what these tests build; the long
# tier checks every daemon source (scripts/thread_safety.sh).
tsan_tests=(fetch_session_test offload_consumer_test range_fetcher_test commit_batcher_test cache_test
            header_step_test pull_progress_test pull_space_test rank_reader_test scrub_test lease_server_test lease_v2_server_test
            lease_client_test stage_state_test
            mutex_test clock_test atomic_file_test job_scheduler_test cache_owner_test catalog_test extent_store_test
            range_fetcher_fake_test range_jobs_test hub_client_fake_test)
tsan_long=(pull_headers_test pull_tls_test pull_test serve_jobs_test serve_stages_test)
tsan_build=("${tsan_tests[@]}")
((full)) && tsan_build+=("${tsan_long[@]}" exlr8d)
rm -f "$root/out/.asan-built"
set -m  # the background builds get a process group of their own, killed if this script stops early
(
  renice -n 19 -p "$BASHPID" >/dev/null
  quiet_build configure-asan cmake -S . -B build-asan "${generator[@]}" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1" \
    -DEXLR8_WERROR=ON -DEXLR8_SANITIZE=ON -DEXLR8_SANITIZE_TEST_CODE=OFF -DEXLR8_GPU=OFF -DEXLR8_BUILD_BENCH=OFF \
    -DEXLR8_TEST_OPTIMIZE=-O1 -DEXLR8_UNITY_BUILD=ON
  quiet_build build-asan cmake --build build-asan -j"$jobs" --target exlr8_parser_tests
  touch "$root/out/.asan-built"
  quiet_build configure-tsan cmake -S . -B build-tsan "${generator[@]}" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" -DEXLR8_WERROR=ON -DEXLR8_TSAN=ON \
    -DEXLR8_THREAD_SAFETY=ON -DEXLR8_GPU=OFF -DEXLR8_BUILD_BENCH=OFF -DEXLR8_TEST_OPTIMIZE=-O1 -DEXLR8_UNITY_BUILD=ON
  quiet_build build-tsan cmake --build build-tsan -j"$jobs" --target "${tsan_build[@]}"
) &
sanitizer_builds=$!
set +m
trap 'kill -- -$sanitizer_builds 2>/dev/null || true' EXIT

# The README's first quick-start command on build/'s binaries: the pull,
# verify, decode and serve a user sees.
step "the quick start's demo (scripts/demo.sh on build/'s binaries)"
EXLR8_SKIP_SETUP=1 EXLR8_DEMO_BIN="$root/build/bin" EXLR8_DEMO_DIR="$root/out/demo" scripts/demo.sh \
  >"$root/out/demo.log" 2>&1 || { cat "$root/out/demo.log"; echo "scripts/demo.sh failed" >&2; exit 1; }
tail -4 "$root/out/demo.log"
# One unit system in every output a user reads: decimal, as format/units.h
# writes it ("516.96 MB"), never "494M" or "60 MiB" beside it.
if grep -nE '(^|[^A-Za-z0-9_.-])[0-9]+(\.[0-9]+)?( ?[KMGTP]iB|[KMGTP])([^A-Za-z0-9_]|$)' "$root/out/demo.log"; then
  echo "scripts/demo.sh printed a size in another unit system (above); use HumanBytes' decimal units" >&2
  exit 1
fi

step "tests (ctest -LE full), the sanitizer trees building meanwhile"
EXLR8_TEST_TIER=default run_ctest build default -LE full

step "parsers under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/)"
until [[ -e "$root/out/.asan-built" ]]; do
  kill -0 "$sanitizer_builds" 2>/dev/null || { wait "$sanitizer_builds" || exit 1; }
  sleep 1
done
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 run_ctest build-asan asan -L parser

step "threaded parts under ThreadSanitizer, lock annotations checked (clang, build-tsan/)"
wait "$sanitizer_builds" || exit 1
trap - EXIT
# The binaries run side by side; each one's output is kept in out/ and
# shown when it fails.
mkdir -p "$root/out/tsan"
printf '%s\n' "${tsan_tests[@]}" | TSAN_OPTIONS=halt_on_error=1 xargs -P "$((jobs * 2))" -I{} sh -c \
  'build-tsan/tests/{} --gtest_brief=1 >"$0/{}.log" 2>&1 || { cat "$0/{}.log"; echo "{} failed under TSan" >&2; exit 255; }' \
  "$root/out/tsan"
echo "${#tsan_tests[@]} test binaries passed under TSan (logs in out/tsan/)"

if ((full)); then
  step "full tier: tests labelled full, the crash loop with 100 kills"
  run_ctest build full -L full
  EXLR8_CRASH_KILLS=100 run_ctest build crash -R '^PullCrashTest\.KillNineAtRandomMomentsThenResume$'
  step "full tier: timing-sensitive tests 3 times over"
  run_ctest build timing -L timing -E PullCrashTest --repeat until-fail:3

  step "full tier: -Wthread-safety over every daemon source (clang, syntax only)"
  scripts/thread_safety.sh build

  step "full tier: the whole-daemon tests under ThreadSanitizer"
  TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/pull_test --gtest_brief=1 \
    --gtest_filter='PullTest.FaultsStillByteExact:PullTest.BackgroundJobsSettingsAllGiveTheExactPlan'
  # The headers step over the hub simulator (its unit test, on the
  # in-memory hub, runs in the default tier), and `exlr8d serve` (built
  # with TSan) running, cancelling and resuming jobs
  # and starting holders while its API thread answers: a race report
  # aborts the server, which the tests see in its exit status.
  for t in pull_headers_test pull_tls_test serve_jobs_test serve_stages_test; do
    TSAN_OPTIONS=halt_on_error=1 "build-tsan/tests/$t" --gtest_brief=1
  done

  # -O3 warns where -O2 does not, so the quick start is built at -O3 too.
  step "full tier: the demo on its own Release build (build-release/, -O3)"
  EXLR8_SKIP_SETUP=1 EXLR8_CMAKE_ARGS=-DEXLR8_WERROR=ON EXLR8_DEMO_DIR="$root/out/demo-release" scripts/demo.sh \
    >"$root/out/demo-release.log" 2>&1 || { cat "$root/out/demo-release.log"; echo "scripts/demo.sh failed" >&2; exit 1; }
  tail -2 "$root/out/demo-release.log"

  if command -v clang++ >/dev/null; then
    step "full tier: libFuzzer, 60 s a target (build-fuzz/)"
    EXLR8_FUZZ_SECONDS=${EXLR8_FUZZ_SECONDS:-60} scripts/fuzz.sh --ci
  fi
fi

step "all tests passed"
