#!/usr/bin/env bash
# A pull run as a job of `exlr8d serve` (POST /v1/pulls, then GET /v1/jobs/1
# every 20 ms until it is done) against the same pull run by `exlr8d pull`
# (the baseline), each into a fresh cache, alternating, ROUNDS times, from one
# synthesized release served by exlr8-hubsim on loopback. What it measures is
# the cost of the daemon path: queueing, the runner taking the cache, the
# job's bookkeeping. Both use the same engine, so the ratio should be ~1.
#
#   bench/serve_bench.sh [BIN_DIR]     BIN_DIR default: build-release/bin
#   ROUNDS=5 bench/serve_bench.sh      (default 3)
set -euo pipefail
bin=${1:-build-release/bin}
rounds=${ROUNDS:-3}
work=$(mktemp -d /tmp/exlr8-serve-bench.XXXXXX)
sim=""
srv=""
trap 'kill $sim $srv 2>/dev/null || true; rm -rf "$work"' EXIT

"$bin/exlr8" synth "$work/release" --seed 42 --hidden 1024 --halves 16 --experts 16 --moe-layers 3-6 \
  --dense-layers 0-2 --vocab 4096 > /dev/null
"$bin/exlr8-hubsim" --repo bench/release="$work/release" --port-file "$work/ports" > "$work/hubsim.log" 2>&1 &
sim=$!
for _ in $(seq 200); do [[ -s "$work/ports" ]] && break; sleep 0.05; done
hub=$(sed -n 's/.*hub=\([^ ]*\).*/\1/p' "$work/ports")
now() { date +%s.%N; }
echo "release $(du -sh --apparent-size "$work/release" | cut -f1), TP 4 rank 1 under home, $rounds rounds, $(nproc) cores"

pull_s=()
serve_s=()
for i in $(seq "$rounds"); do
  rm -rf "$work/c1" "$work/c2"
  t0=$(now)
  "$bin/exlr8d" pull --repo bench/release --manifest home --tp 4 --rank 1 --endpoint "$hub" --cache "$work/c1" \
    --no-progress > /dev/null
  t1=$(now)
  "$bin/exlr8d" serve --cache "$work/c2" --endpoint "$hub" --no-socket --listen 127.0.0.1:0 \
    > "$work/serve.out" 2> "$work/serve.log" &
  srv=$!
  for _ in $(seq 200); do grep -q listening "$work/serve.out" 2> /dev/null && break; sleep 0.02; done
  api=$(sed -n 's#.*\(http://127\.0\.0\.1:[0-9]*\).*#\1#p' "$work/serve.out")
  # --listen wants the token serve made in the cache, and JSON bodies (docs/OPERATIONS.md)
  auth=(-H "Authorization: Bearer $(cat "$work/c2/exlr8d.api-token")" -H 'Content-Type: application/json')
  t2=$(now)
  curl -sS "${auth[@]}" -X POST "$api/v1/pulls" -d '{"repo":"bench/release","manifest":"home","tp":4,"rank":1}' > /dev/null
  state=""
  until [[ $state == done || $state == failed || $state == cancelled ]]; do
    sleep 0.02
    state=$(curl -sS "${auth[@]}" "$api/v1/jobs/1" | sed -n 's/.*"state":"\([a-z]*\)".*/\1/p')
  done
  t3=$(now)
  kill $srv
  wait $srv 2> /dev/null || true
  srv=""
  [[ $state == done ]] || { echo "the job ended $state"; cat "$work/serve.log"; exit 1; }
  a=$(echo "$t1 - $t0" | bc -l)
  b=$(echo "$t3 - $t2" | bc -l)
  pull_s+=("$a")
  serve_s+=("$b")
  printf 'round %d: exlr8d pull %.3f s, serve job %.3f s\n' "$i" "$a" "$b"
done
best() { printf '%s\n' "$@" | sort -g | head -1; }
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
bp=$(best "${pull_s[@]}")
bs=$(best "${serve_s[@]}")
mp=$(median "${pull_s[@]}")
ms=$(median "${serve_s[@]}")
printf 'best: exlr8d pull %.3f s, serve job %.3f s (%.2fx of the baseline time); medians %.3f s and %.3f s (%.2fx)\n' \
  "$bp" "$bs" "$(echo "$bs / $bp" | bc -l)" "$mp" "$ms" "$(echo "$ms / $mp" | bc -l)"
