#!/usr/bin/env bash
# How long exlr8d-stage takes to read a pulled rank back from the cache
# (every half located among the cache's verified extents, its XXH64
# checked again) before it uploads anything, on a release of many small
# halves, where locating them, not hashing them, is the work. The baseline
# is another build of exlr8d-stage (BASE_BIN, e.g. the previous commit's),
# run on the same cache in the same run, rounds alternating. Each time is
# the one exlr8d-stage prints ("read N halves ... in X s"); without a GPU
# it then stops with exit 4, which is fine here. It times the halves-only
# reader, lease v1 (`--lease v1`, deprecated: a BASE_BIN from before the
# option existed needs the line below without it).
#
#   BASE_BIN=/path/to/old/bin bench/rank_read_bench.sh [BIN_DIR]   (default build-release/bin)
#   ROUNDS=5 (default 3)
# The release: hidden 128, 16 halves, 256 experts, MoE layers 3-12, width 2
# only: TP 1 rank 0 is 123,360 halves in 505 MB.
set -euo pipefail
bin=$(cd "${1:-build-release/bin}" && pwd)
base=${BASE_BIN:?BASE_BIN must name the bin directory of the baseline build}
rounds=${ROUNDS:-3}
work=$(mktemp -d /tmp/exlr8-rank-read-bench.XXXXXX)
sim=""
trap 'kill $sim 2>/dev/null || true; rm -rf "$work"' EXIT

"$bin/exlr8" synth "$work/release" --seed 3 --hidden 128 --halves 16 --experts 256 --moe-layers 3-12 \
  --dense-layers 0-0 --widths 2 --shared-widths 2 --vocab 1024 > /dev/null
"$bin/exlr8-hubsim" --repo bench/r="$work/release" --port-file "$work/ports" > "$work/hubsim.log" 2>&1 &
sim=$!
for _ in $(seq 300); do [[ -s "$work/ports" ]] && break; sleep 0.05; done
hub=$(sed -n 's/.*hub=\([^ ]*\).*/\1/p' "$work/ports")
"$bin/exlr8d" pull --repo bench/r --manifest home --tp 1 --rank 0 --endpoint "$hub" --cache "$work/cache" \
  --no-progress | grep -E "planned"
kill $sim; sim=""

read_time() {  # $1: bin dir; prints the read's seconds (exit 4 without a GPU is expected)
  { "$1/exlr8d-stage" --cache "$work/cache" --repo bench/r --manifest home --tp 1 --rank 0 --lease v1 --check 0 2>&1 || true; } |
    sed -n 's/^read .* in \([0-9.]*\) s$/\1/p'
}
for round in $(seq "$rounds"); do
  if (( round % 2 )); then b=$(read_time "$base"); n=$(read_time "$bin"); else n=$(read_time "$bin"); b=$(read_time "$base"); fi
  printf 'round %d: baseline %s s, this build %s s (%.1fx)\n' "$round" "$b" "$n" "$(echo "scale=3; $b / $n" | bc)"
done
