#!/usr/bin/env bash
# An LVQ5 fileset of a 14B model's size staged on the GPU: synthesizes a
# sealed file of about 4.7 GB (34 Tetra records of 65536 x 8192, 4.5 GB of
# codes, plus Int4G128 and raw tensors; exlr8 synth --lvq5), serves it with
# the hub simulator, pulls it whole (SHA-256 and structure verified, record
# index), then stages it with exlr8d-stage twice: the default check (every
# Tetra word of the first 1 GB of codes and a seeded 1 % of the rows beyond
# decoded on the GPU in place and compared with the CPU reference) and
# --check all (every word). Prints each step's wall time and the proof.
# Target: every word of a 14B-sized file decoded on the GPU and compared
# with the CPU reference in at most 10 s on the H200 host.
#
#   bench/lvq5_stage_bench.sh WORK [BIN_DIR (default build/bin)]
# WORK is deleted first and kept after (the cache under WORK/c). RECORDS
# (default 34) sets the number of 65536 x 8192 Tetra records.
set -euo pipefail
work=${1:?usage: lvq5_stage_bench.sh WORK [BIN_DIR]}
bin=$(cd "${2:-build/bin}" && pwd)
rm -rf "$work" && mkdir -p "$work/repo"
work=$(cd "$work" && pwd)
sim=""
trap 'kill $sim 2>/dev/null || true' EXIT
timed() {
  local name=$1 t0
  shift
  t0=$(date +%s.%N)
  "$@"
  python3 -c "import sys; print(f'{sys.argv[1]}: {float(sys.argv[3]) - float(sys.argv[2]):.2f} s')" \
    "$name" "$t0" "$(date +%s.%N)"
}
tetra=$(printf '65536x8192,%.0s' $(seq "${RECORDS:-34}"))
timed synth "$bin/exlr8" synth --lvq5 "$work/repo/model-sealed.bin" --seed 3 --tetra "${tetra%,}" \
  --int4g128 4096x4096 --raw-f16 4096 --raw-q4 1000x4096/64
echo '{"model_type": "qwen3"}' > "$work/repo/config.json"
"$bin/exlr8-hubsim" --repo bench/lvq5="$work/repo" --port-file "$work/ports" > "$work/hubsim.log" 2>&1 &
sim=$!
for _ in $(seq 300); do [[ -s "$work/ports" ]] && break; sleep 0.05; done
hub=$(sed -n 's/.*hub=\([^ ]*\).*/\1/p' "$work/ports")
timed pull "$bin/exlr8d" pull bench/lvq5 --endpoint "$hub" --cache "$work/c" --no-progress
kill $sim
sim=""
find "$work/c" -type f -exec cat {} + > /dev/null  # a warm page cache
timed "stage (default check)" "$bin/exlr8d-stage" bench/lvq5 --cache "$work/c"
timed "stage --check all" "$bin/exlr8d-stage" bench/lvq5 --cache "$work/c" --check all
