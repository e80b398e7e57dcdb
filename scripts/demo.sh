#!/usr/bin/env bash
# The main job on the embedded default: synthesize a small EXLR8 release, serve
# it from a local Hugging Face stand-in (tests/hubsim: hub on 127.0.0.1, signed
# CDN URLs on 127.0.0.2), pull rank 1 of TP 4 under the home manifest with
# `exlr8d pull`, then read the cache with the offline tools, damage a byte and
# let `exlr8d verify` and the next pull mend it; last, ask `exlr8d serve`
# over its REST API to pull rank 2 as a job.
#
#   scripts/demo.sh              setup + build + demo (work files in ./out/demo)
#   EXLR8_SKIP_SETUP=1 ...       skip apt-get
#   EXLR8_CMAKE_ARGS="..."       more cmake arguments (scripts/test.sh: -DEXLR8_WERROR=ON)
#   EXLR8_DEMO_BIN=DIR ...       use the exlr8, exlr8d and exlr8-hubsim in DIR, build nothing
set -euo pipefail
cd "$(dirname "$0")/.."
work=${EXLR8_DEMO_DIR:-$PWD/out/demo}
jobs=$(nproc)

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
# Bytes as every exlr8/exlr8d output writes them (format/units.h HumanBytes):
# decimal units, two decimals ("516.96 MB"), so the demo shows one unit system.
human_bytes() {
  awk -v b="$1" 'BEGIN { split("B kB MB GB TB PB", u, " "); v = b; i = 1
    while (v >= 1000 && i < 6) { v /= 1000; i++ }
    if (i == 1) printf "%d B\n", b; else printf "%.2f %s\n", v, u[i] }'
}
# The size of a directory tree: apparent (the files' lengths, as the release's
# size counts them) or on disk (the blocks allocated).
tree_bytes() {
  if [[ $1 == apparent ]]; then find "$2" -type f -printf '%s\n' | awk '{ s += $1 } END { printf "%d\n", s }'
  else du -s -B1 "$2" | cut -f1; fi
}

if [[ "${EXLR8_SKIP_SETUP:-0}" != 1 ]]; then
  say "setup (Debian packages)"
  scripts/setup.sh
fi
mkdir -p "$work"
if [[ -n "${EXLR8_DEMO_BIN:-}" ]]; then
  bin=$EXLR8_DEMO_BIN
  say "binaries from $bin"
else
  say "build (Release) in build-release/"
  # shellcheck disable=SC2086  # EXLR8_CMAKE_ARGS is a list of arguments
  cmake -S . -B build-release -DCMAKE_BUILD_TYPE=Release -DEXLR8_BUILD_TESTS=ON ${EXLR8_CMAKE_ARGS:-} >/dev/null
  if ! cmake --build build-release -j"$jobs" --target exlr8 exlr8d exlr8-hubsim > "$work/build.log" 2>&1; then
    cat "$work/build.log"
    exit 1
  fi
  echo "  built exlr8, exlr8d, exlr8-hubsim"
  bin=$PWD/build-release/bin
fi

rm -rf "$work/release" "$work/cache" "$work/ports"
say "synthesize a release: 4 MoE layers x 16 experts, hidden 1024, widths 2/3/4, shared expert 3/4"
"$bin/exlr8" synth "$work/release" --seed 42 --hidden 1024 --halves 16 --experts 16 --moe-layers 3-6 \
  --dense-layers 0-2 --vocab 4096
echo "  release size: $(human_bytes "$(tree_bytes apparent "$work/release")")"

say "serve it from the hub stand-in"
"$bin/exlr8-hubsim" --repo demo/glm-mini="$work/release" --port-file "$work/ports" > "$work/hubsim.log" 2>&1 &
sim=$!
trap 'kill $sim 2>/dev/null || true' EXIT
for _ in $(seq 100); do [[ -s "$work/ports" ]] && break; sleep 0.1; done
hub=$(sed -n 's/.*hub=\([^ ]*\).*/\1/p' "$work/ports")
echo "  hub at $hub ($(cat "$work/ports"))"

say "what rank 1 of TP 4 needs under 'home' (planned from the local copy)"
"$bin/exlr8" plan "$work/release" --manifest home --tp 4 --rank 1

say "exlr8d pull demo/glm-mini --manifest home --tp 4 --rank 1"
"$bin/exlr8d" pull demo/glm-mini --manifest home --tp 4 --rank 1 --endpoint "$hub" --cache "$work/cache"

root=$(ls -d "$work"/cache/demo/glm-mini/*/)
say "the cache is a partial mirror: $root"
echo "  apparent size: $(human_bytes "$(tree_bytes apparent "$root")")"
echo "  on disk:       $(human_bytes "$(tree_bytes disk "$root")")  (holes where other ranks' halves are)"

say "verify rank 1's bytes in the cache with the offline verifier"
"$bin/exlr8" verify "$root" --manifest home --tp 4 --rank 1

say "decode one of rank 1's halves from the cache (layer 3, expert 0, gate, half 2)"
k=$(python3 -c "import json;print(json.load(open('$root/manifests/exlr8-manifest-home.json'))['layers']['3']['gate'][0][2])")
"$bin/exlr8" decode "$root" --layer 3 --expert 0 --proj gate --half 2 --width "$k" --out "$work/half.f32"
python3 - "$work/half.f32" <<'PY'
import struct, sys, math
data = open(sys.argv[1], 'rb').read()
vals = struct.unpack('<%df' % (len(data) // 4), data)
print(f"  {len(vals)} weights (hidden x 128), max |w| {max(abs(v) for v in vals):.4f}, "
      f"rms {math.sqrt(sum(v*v for v in vals)/len(vals)):.4f}")
PY

say "pull again: everything is reused, nothing is fetched"
"$bin/exlr8d" pull demo/glm-mini --manifest home --tp 4 --rank 1 --endpoint "$hub" --cache "$work/cache" \
  --no-progress | grep -E "fetched|reused|verified"
say "a byte rots on disk: exlr8d verify finds it, forgets that half, and the next pull fetches exactly it"
read -r rotten_file rotten_offset rotten_half < <("$bin/exlr8" plan "$work/release" --manifest home --tp 4 --rank 1 \
  --json | python3 -c '
import json, sys
f = [f for f in json.load(sys.stdin)["files"] if f.get("ranges")][0]
h = [r for r in f["ranges"] if "xxh64" in r][0]
print(f["path"], h["offset"] + 100, h["what"].replace(" ", "_"))')
printf '\x5a' | dd of="$root/$rotten_file" bs=1 seek="$rotten_offset" conv=notrunc status=none
echo "  flipped byte $rotten_offset of $rotten_file (in ${rotten_half//_/ })"
"$bin/exlr8d" verify --cache "$work/cache" --no-progress && { echo "verify missed it"; exit 1; }
"$bin/exlr8d" pull demo/glm-mini --manifest home --tp 4 --rank 1 --endpoint "$hub" --cache "$work/cache" \
  --no-progress | grep -E "fetched|verified"
"$bin/exlr8d" verify --cache "$work/cache" --no-progress

say "what the cache holds (exlr8d list; the same report is GET /v1/filesets of exlr8d serve)"
"$bin/exlr8d" list --cache "$work/cache"

say "exlr8d serve: ask its REST API for rank 2 as a job, and watch it run"
"$bin/exlr8d" serve --cache "$work/cache" --endpoint "$hub" --no-socket --listen 127.0.0.1:0 \
  > "$work/serve.out" 2> "$work/serve.log" &
srv=$!
trap 'kill $sim $srv 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q listening "$work/serve.out" 2>/dev/null && break; sleep 0.1; done
api=$(sed -n 's#.*\(http://127\.0\.0\.1:[0-9]*\).*#\1#p' "$work/serve.out")
# --listen wants the token serve made in the cache, and JSON bodies (docs/OPERATIONS.md)
auth=(-H "Authorization: Bearer $(cat "$work/cache/exlr8d.api-token")" -H 'Content-Type: application/json')
echo "  $(cat "$work/serve.out")"
echo "  GET $api/v1/ranks?repo=demo/glm-mini&manifest=home&tp=4&rank=2 (is rank 2 here? not yet)"
echo "  $(curl -sS "${auth[@]}" "$api/v1/ranks?repo=demo/glm-mini&manifest=home&tp=4&rank=2")"
echo "  POST $api/v1/pulls"
curl -sS "${auth[@]}" -X POST "$api/v1/pulls" -d '{"repo":"demo/glm-mini","manifest":"home","tp":4,"rank":2,"pin":"demo"}'
echo
state=queued
for _ in $(seq 600); do
  job=$(curl -sS "${auth[@]}" "$api/v1/jobs/1")
  state=$(python3 - "$job" <<'PY'
import json, sys
def human(b):  # as format/units.h HumanBytes writes bytes
    units = ["B", "kB", "MB", "GB", "TB", "PB"]
    v, i = float(b), 0
    while v >= 1000 and i < 5:
        v, i = v / 1000, i + 1
    return f"{b} B" if i == 0 else f"{v:.2f} {units[i]}"
j = json.loads(sys.argv[1])["job"]
p = j.get("progress")
if p:
    have = p["bytes_reused"] + p["bytes_verified"]
    print(f"  job 1 {j['state']}: {p['phase']}, {human(have)} of {human(p['bytes_planned'])}", file=sys.stderr)
print(j["state"])
PY
)
  [[ $state == queued || $state == running ]] || break
  sleep 0.2
done
echo "  GET $api/v1/jobs/1"
echo "  $job"
echo "  GET $api/metrics (Prometheus text; a few of its lines)"
curl -sS "${auth[@]}" "$api/metrics" | grep -E '^exlr8d_(fileset_verified_bytes|jobs\{state="done"|received_bytes_total|verified_bytes_total|http_requests_total)' |
  sed 's/^/    /'
kill $srv; wait $srv 2>/dev/null || true
[[ $state == done ]] || { echo "job 1 ended $state"; cat "$work/serve.log"; exit 1; }
"$bin/exlr8d" list --cache "$work/cache"
say "is rank 2 all there now? (exlr8d status; exit 0: every byte of its plan is verified in the cache)"
"$bin/exlr8d" status demo/glm-mini --manifest home --tp 4 --rank 2 --cache "$work/cache"
say "done"
