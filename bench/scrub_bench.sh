#!/usr/bin/env bash
# `exlr8d verify` (the cache checked again) against the offline verifier
# `exlr8 verify ROOT --manifest home --tp 4 --rank 1` over the same cached
# rank (the baseline: it parses every width-file header and checks every
# half's XXH64 and every dense block checksum, on one thread), in the same
# run, alternating, ROUNDS times. exlr8d verify checks the halves' XXH64 and
# the headers too, and every whole file by SHA-256 (instead of the dense
# block checksums), on one thread per core by default; it is also run with
# --threads 1.
#
# The rank comes from a synthesized release served by exlr8-hubsim on
# loopback (hidden 2048, 32 experts, MoE layers 3-10 by default: 3.9 GB; TP 4
# rank 1 under home: 0.58 GB). Mode warm: the cached bytes are in the page
# cache (every tool reads them once before the rounds). Mode cold (root
# only): the page cache is dropped before every run.
#
# GLM_SECONDS=N adds a scale check: the GLM-5.3 geometry (exlr8 synth
# --preset glm53 --index-only: 825 GB apparent, ~1 GB stored, 75 real-size
# index files), TP 4 rank 1 under down1 pulled for N seconds (then SIGINT:
# a partial cache, dense files first), then one `exlr8d verify
# --check-only` of it under /usr/bin/time: peak RSS and rate. Its width
# files are listed unhashed (never fetched whole, so it does not matter).
#
#   bench/scrub_bench.sh [BIN_DIR]     BIN_DIR default: build-release/bin
#   ROUNDS=5 MODES="warm cold" SYNTH="--hidden 1024 ..." GLM_SECONDS=60 bench/scrub_bench.sh
set -euo pipefail
bin=${1:-build-release/bin}
rounds=${ROUNDS:-3}
modes=${MODES:-warm cold}
synth=${SYNTH:---hidden 2048 --halves 16 --experts 32 --moe-layers 3-10 --dense-layers 0-2 --vocab 8192}
work=$(mktemp -d /tmp/exlr8-scrub-bench.XXXXXX)
sim=""
trap 'kill $sim 2>/dev/null || true; rm -rf "$work"' EXIT

# shellcheck disable=SC2086
"$bin/exlr8" synth "$work/release" --seed 7 $synth > /dev/null
"$bin/exlr8-hubsim" --repo bench/release="$work/release" --port-file "$work/ports" > "$work/hubsim.log" 2>&1 &
sim=$!
for _ in $(seq 200); do [[ -s "$work/ports" ]] && break; sleep 0.05; done
hub=$(sed -n 's/.*hub=\([^ ]*\).*/\1/p' "$work/ports")
"$bin/exlr8d" pull --repo bench/release --manifest home --tp 4 --rank 1 --endpoint "$hub" --cache "$work/cache" \
  --no-progress > /dev/null
kill $sim
wait $sim 2> /dev/null || true
sim=""
root=$(echo "$work"/cache/bench/release/*)
report=$("$bin/exlr8d" verify --check-only --json --cache "$work/cache")
field() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" <<< "$report"; }
recorded=$(field bytes_recorded)
echo "release $(du -sh --apparent-size "$work/release" | cut -f1), cached rank: $recorded bytes recorded" \
  "($(field whole_files) whole files, $(field halves) halves, $(field headers) headers); $(nproc) cores"

if [[ -x /usr/bin/time ]]; then
  rss=$(/usr/bin/time -f '%M' "$bin/exlr8d" verify --check-only --no-progress --cache "$work/cache" 2>&1 > /dev/null |
        tail -1)
  echo "peak RSS of exlr8d verify: $((rss / 1024)) MB"
fi

now() { date +%s.%N; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
run_scrub() { "$bin/exlr8d" verify --check-only --no-progress --cache "$work/cache" "$@" > /dev/null; }
run_baseline() { "$bin/exlr8" verify "$root" --manifest home --tp 4 --rank 1 --quiet > /dev/null; }

best() { printf '%s\n' "$@" | sort -g | head -1; }
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }

for mode in $modes; do
  if [[ $mode == cold && $(id -u) != 0 ]]; then
    echo "mode cold: skipped (dropping the page cache needs root)"
    continue
  fi
  run_scrub; run_baseline  # warm-up (and proof that both pass)
  s_all=(); s_one=(); base=()
  for i in $(seq "$rounds"); do
    for which in scrub one baseline; do
      [[ $mode == cold ]] && drop
      t0=$(now)
      case $which in
        scrub) run_scrub ;;
        one) run_scrub --threads 1 ;;
        baseline) run_baseline ;;
      esac
      t=$(echo "$(now) - $t0" | bc -l)
      case $which in scrub) s_all+=("$t") ;; one) s_one+=("$t") ;; baseline) base+=("$t") ;; esac
    done
    printf '%s round %d: exlr8d verify %.3f s, --threads 1 %.3f s, exlr8 verify (baseline) %.3f s\n' \
      "$mode" "$i" "${s_all[-1]}" "${s_one[-1]}" "${base[-1]}"
  done
  ba=$(best "${s_all[@]}"); b1=$(best "${s_one[@]}"); bb=$(best "${base[@]}")
  ma=$(median "${s_all[@]}"); mb=$(median "${base[@]}")
  printf '%s best: exlr8d verify %.3f s (%.0f MB/s), --threads 1 %.3f s, baseline %.3f s: %.2fx the baseline speed (medians %.2fx)\n' \
    "$mode" "$ba" "$(echo "$recorded / $ba / 1000000" | bc -l)" "$b1" "$bb" "$(echo "$bb / $ba" | bc -l)" \
    "$(echo "$mb / $ma" | bc -l)"
done

if [[ -n ${GLM_SECONDS:-} ]]; then
  glm=$work/glm
  "$bin/exlr8" synth "$glm" --preset glm53 --index-only --seed 1 --quiet
  "$bin/exlr8-hubsim" --repo bench/glm="$glm" --unhashed 'experts/*.k?.safetensors' --port-file "$work/glm-ports" \
    > "$work/glm-hubsim.log" 2>&1 &
  sim=$!
  for _ in $(seq 600); do [[ -s "$work/glm-ports" ]] && break; sleep 0.1; done
  hub=$(sed -n 's/.*hub=\([^ ]*\).*/\1/p' "$work/glm-ports")
  "$bin/exlr8d" pull --repo bench/glm --manifest down1 --tp 4 --rank 1 --endpoint "$hub" --cache "$work/glm-cache" \
    --no-progress > /dev/null 2> "$work/glm-pull.err" &
  pull=$!
  sleep "$GLM_SECONDS"
  kill -INT $pull 2> /dev/null || true
  wait $pull 2> /dev/null || true
  kill $sim
  wait $sim 2> /dev/null || true
  sim=""
  t0=$(now)
  /usr/bin/time -f '%M' -o "$work/glm-rss" "$bin/exlr8d" verify --check-only --json --cache "$work/glm-cache" \
    > "$work/glm-verify.json" || true
  t=$(echo "$(now) - $t0" | bc -l)
  report=$(cat "$work/glm-verify.json")
  printf 'GLM-5.3 geometry, TP 4 rank 1 (down1) pulled for %s s: %s bytes recorded (%s whole files, %s halves, %s headers, %s failed)\n' \
    "$GLM_SECONDS" "$(field bytes_recorded)" "$(field whole_files)" "$(field halves)" "$(field headers)" \
    "$(field checks_failed)"
  printf '  exlr8d verify --check-only: %.2f s, %.0f MB/s, peak RSS %d MB\n' "$t" \
    "$(echo "$(field bytes_checked) / $t / 1000000" | bc -l)" "$(( $(cat "$work/glm-rss") / 1024 ))"
fi
