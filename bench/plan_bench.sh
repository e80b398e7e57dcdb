#!/usr/bin/env bash
# Planning one rank of a GLM-5.3-geometry release (75 MoE layers x 256 experts,
# widths 2/3/4, shared expert 3/4) from local index files.
# Targets: < 1 s and < 200 MB peak RSS.
# Baseline in the same run: reading every index file once (cat > /dev/null).
#
#   bench/plan_bench.sh [BUILD_DIR]     (default build/)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build}/bin
dir=$(mktemp -d /tmp/exlr8-plan-bench.XXXXXX)
trap 'rm -rf "$dir"' EXIT

t0=$(date +%s.%N)
"$bin/exlr8" synth "$dir" --preset glm53 --index-only --seed 1 --quiet
t1=$(date +%s.%N)
printf 'synth --preset glm53 --index-only: %.2f s, %s on disk (%s apparent)\n' "$(echo "$t1 - $t0" | bc)" \
  "$(du -sh "$dir" | cut -f1)" "$(du -sh --apparent-size "$dir" | cut -f1)"

cat "$dir"/experts/*.index.safetensors > /dev/null  # warm the page cache
measure() {  # prints "seconds maxrss_kB"
  /usr/bin/time -f '%e %M' -o "$dir/time.txt" "$@" > /dev/null
  cat "$dir/time.txt"
}
best_cat=999 best_plan=999 rss=0
for i in 1 2 3; do
  read -r s _ < <(measure sh -c "cat $dir/experts/*.index.safetensors")
  best_cat=$(echo "if ($s < $best_cat) $s else $best_cat" | bc)
  read -r s m < <(measure "$bin/exlr8" plan "$dir" --manifest home --tp 4 --rank 1 --json)
  best_plan=$(echo "if ($s < $best_plan) $s else $best_plan" | bc)
  rss=$m
done
"$bin/exlr8" plan "$dir" --manifest home --tp 4 --rank 1 | sed 's/^/  /'
printf 'baseline: cat of all 75 index files   %6.2f s\n' "$best_cat"
printf 'exlr8 plan --tp 4 --rank 1 --json     %6.2f s   peak RSS %d MB   (targets: < 1 s, < 200 MB)\n' \
  "$best_plan" "$((rss / 1024))"
