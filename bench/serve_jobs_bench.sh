#!/usr/bin/env bash
# Several jobs at once in `exlr8d serve`: a large pull is asked for, then at
# once a small pull of another repo. With --max-jobs 1 (the baseline: the
# queue strictly in order, one job at a time) the small job waits for the
# large one; with the default (4) it runs beside it. Both
# runs share one --limit-rate, which stands for the node's link, so the total
# time should not change; what changes is when the small job is ready.
#
#   bench/serve_jobs_bench.sh [BIN_DIR]     BIN_DIR default: build-release/bin
#   ROUNDS=5 RATE=200M bench/serve_jobs_bench.sh   (defaults: 3 rounds, 300M)
set -euo pipefail
bin=${1:-build-release/bin}
rounds=${ROUNDS:-3}
rate=${RATE:-300M}
work=$(mktemp -d /tmp/exlr8-serve-jobs-bench.XXXXXX)
sim=""
srv=""
trap 'kill $sim $srv 2>/dev/null || true; rm -rf "$work"' EXIT

"$bin/exlr8" synth "$work/large" --seed 42 --hidden 1024 --halves 16 --experts 16 --moe-layers 3-6 \
  --dense-layers 0-2 --vocab 4096 > /dev/null
"$bin/exlr8" synth "$work/small" --seed 7 --hidden 256 --halves 16 --experts 4 --moe-layers 1-2 \
  --dense-layers 0 --vocab 1024 > /dev/null
"$bin/exlr8-hubsim" --repo bench/large="$work/large" --repo bench/small="$work/small" --port-file "$work/ports" \
  > "$work/hubsim.log" 2>&1 &
sim=$!
for _ in $(seq 200); do [[ -s "$work/ports" ]] && break; sleep 0.05; done
hub=$(sed -n 's/.*hub=\([^ ]*\).*/\1/p' "$work/ports")
now() { date +%s.%N; }
echo "large release $(du -sh --apparent-size "$work/large" | cut -f1), small $(du -sh --apparent-size "$work/small" |
  cut -f1); TP 4 rank 1 under home of each; --limit-rate $rate; $rounds rounds, $(nproc) cores"

state_of() { curl -sS "${auth[@]}" "$1/v1/jobs/$2" | sed -n 's/.*"state":"\([a-z]*\)".*/\1/p'; }

# One round: prints "SMALL_READY_S BOTH_READY_S".
round() {
  local max_jobs=$1 cache=$work/cache api t0 small_s="" large_s="" s l
  rm -rf "$cache"
  "$bin/exlr8d" serve --cache "$cache" --endpoint "$hub" --no-socket --listen 127.0.0.1:0 --limit-rate "$rate" \
    --max-jobs "$max_jobs" > "$work/serve.out" 2> "$work/serve.log" &
  srv=$!
  for _ in $(seq 200); do grep -q listening "$work/serve.out" 2> /dev/null && break; sleep 0.02; done
  api=$(sed -n 's#.*\(http://127\.0\.0\.1:[0-9]*\).*#\1#p' "$work/serve.out")
  # --listen wants the token serve made in the cache, and JSON bodies (docs/OPERATIONS.md)
  auth=(-H "Authorization: Bearer $(cat "$cache/exlr8d.api-token")" -H 'Content-Type: application/json')
  t0=$(now)
  curl -sS "${auth[@]}" -X POST "$api/v1/pulls" -d '{"repo":"bench/large","manifest":"home","tp":4,"rank":1}' > /dev/null
  curl -sS "${auth[@]}" -X POST "$api/v1/pulls" -d '{"repo":"bench/small","manifest":"home","tp":4,"rank":1}' > /dev/null
  while [[ -z $small_s || -z $large_s ]]; do
    sleep 0.01
    if [[ -z $large_s ]]; then
      l=$(state_of "$api" 1)
      [[ $l == failed || $l == cancelled ]] && { echo "the large job ended $l" >&2; cat "$work/serve.log" >&2; exit 1; }
      [[ $l == done ]] && large_s=$(echo "$(now) - $t0" | bc -l)
    fi
    if [[ -z $small_s ]]; then
      s=$(state_of "$api" 2)
      [[ $s == failed || $s == cancelled ]] && { echo "the small job ended $s" >&2; cat "$work/serve.log" >&2; exit 1; }
      [[ $s == done ]] && small_s=$(echo "$(now) - $t0" | bc -l)
    fi
  done
  kill $srv
  wait $srv 2> /dev/null || true
  srv=""
  local both=$large_s
  (($(echo "$small_s > $large_s" | bc -l))) && both=$small_s
  echo "$small_s $both"
}

serial_small=()
serial_both=()
conc_small=()
conc_both=()
for i in $(seq "$rounds"); do
  read -r a b < <(round 1)
  read -r c d < <(round 4)
  serial_small+=("$a")
  serial_both+=("$b")
  conc_small+=("$c")
  conc_both+=("$d")
  printf 'round %d: --max-jobs 1: small ready %.3f s, both %.3f s; --max-jobs 4: small ready %.3f s, both %.3f s\n' \
    "$i" "$a" "$b" "$c" "$d"
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
ms1=$(median "${serial_small[@]}")
mb1=$(median "${serial_both[@]}")
ms4=$(median "${conc_small[@]}")
mb4=$(median "${conc_both[@]}")
printf 'medians: small job ready %.3f s with --max-jobs 4 vs %.3f s with 1 (%.1fx sooner); both ready %.3f s vs %.3f s (%.2fx)\n' \
  "$ms4" "$ms1" "$(echo "$ms1 / $ms4" | bc -l)" "$mb4" "$mb1" "$(echo "$mb4 / $mb1" | bc -l)"
