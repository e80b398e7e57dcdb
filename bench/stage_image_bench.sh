#!/usr/bin/env bash
# A rank's whole image staged into device memory from a warm cache:
# synthesizes a release of several GB (exlr8 synth), pulls TP 1 rank 0
# through the hub simulator into a cache under WORK, then runs
# stage_image_bench (upload vs a pinned cudaMemcpyAsync of the same bytes,
# GPU hash GB/s, decode, total stage time, a CSV line) and exlr8d-stage
# --memory device --lease v2 once (its per-second progress and proof).
#
#   bench/stage_image_bench.sh WORK [BIN_DIR (default build/bin)]
#   SYNTH="..." overrides the release's shape (default below: a release whose TP 1 rank is 9.84 GB); CHECK=all decodes every half; REPS (default 3).
# WORK is kept (the cache can be reused: stage_image_bench --cache WORK/cache
# --repo bench/r --manifest home --tp 1 --rank 0).
set -euo pipefail
work=${1:?usage: stage_image_bench.sh WORK [BIN_DIR]}
bin=$(cd "${2:-build/bin}" && pwd)
synth_flags=${SYNTH:---seed 7 --hidden 4096 --halves 16 --experts 120 --moe-layers 3-10 --dense-layers 0-2 --vocab 16384}
mkdir -p "$work"
work=$(cd "$work" && pwd)
sim=""
trap 'kill $sim 2>/dev/null || true' EXIT

if [[ ! -e "$work/cache.done" ]]; then
  echo "synthesizing: exlr8 synth $synth_flags"
  rm -rf "$work/release"
  # shellcheck disable=SC2086
  "$bin/exlr8" synth "$work/release" $synth_flags --quiet
  du -sh "$work/release"
  "$bin/exlr8-hubsim" --repo bench/r="$work/release" --port-file "$work/ports" > "$work/hubsim.log" 2>&1 &
  sim=$!
  for _ in $(seq 300); do [[ -s "$work/ports" ]] && break; sleep 0.05; done
  hub=$(sed -n 's/.*hub=\([^ ]*\).*/\1/p' "$work/ports")
  rm -rf "$work/cache"
  "$bin/exlr8d" pull --repo bench/r --manifest home --tp 1 --rank 0 --endpoint "$hub" --cache "$work/cache" \
    --no-progress
  kill $sim; sim=""
  touch "$work/cache.done"
fi
# Warm the page cache (the target is "from a warm page cache").
find "$work/cache" -type f -exec cat {} + > /dev/null

check=()
[[ "${CHECK:-}" == all ]] && check=(--check all)
"$bin/stage_image_bench" --cache "$work/cache" --repo bench/r --manifest home --tp 1 --rank 0 \
  --reps "${REPS:-3}" "${check[@]}"
"$bin/exlr8d-stage" --cache "$work/cache" --repo bench/r --manifest home --tp 1 --rank 0 \
  --memory device --lease v2 "${check[@]}"
