#!/usr/bin/env bash
# A rank staged on the GPU through `exlr8d serve` (POST /v1/stages, then GET
# every 10 ms until "holding") against the baseline of the same holder
# started by hand (`exlr8d-stage --hold`, until it prints "holding"), in one
# run: what the API's process management costs on top of reading, checking,
# uploading and GPU-checking the rank. Then how long a DELETE takes to
# "released" with no lessee, and with a holder that still reads or stages
# (DELETE as soon as it reports "reading"), against the full stage time
# (what such a DELETE waited before a stop could end a step). Needs a CUDA
# device, curl and bc.
#
#   bench/stage_api_bench.sh [BIN_DIR]      BIN_DIR default: build-release/bin
#   ROUNDS=5 bench/stage_api_bench.sh       (default 3 rounds)
set -euo pipefail
bin=${1:-build-release/bin}
rounds=${ROUNDS:-3}
work=$(mktemp -d /tmp/exlr8-stage-api-bench.XXXXXX)
sim=""
srv=""
holder=""
trap 'kill $sim $srv $holder 2>/dev/null || true; rm -rf "$work"' EXIT

"$bin/exlr8" synth "$work/release" --seed 7 --hidden 4096 --halves 16 --experts 64 --moe-layers 3-6 \
  --dense-layers 0-0 --vocab 4096 > /dev/null
"$bin/exlr8-hubsim" --repo bench/r="$work/release" --port-file "$work/ports" > "$work/hubsim.log" 2>&1 &
sim=$!
for _ in $(seq 300); do [[ -s "$work/ports" ]] && break; sleep 0.05; done
hub=$(sed -n 's/.*hub=\([^ ]*\).*/\1/p' "$work/ports")
echo "release $(du -sh --apparent-size "$work/release" | cut -f1)"
"$bin/exlr8d" pull --repo bench/r --manifest home --tp 4 --rank 1 --endpoint "$hub" --cache "$work/cache" \
  --no-progress | grep -E "planned"
kill $sim; sim=""
now() { date +%s.%N; }
for round in $(seq "$rounds"); do
  t0=$(now)
  "$bin/exlr8d-stage" --cache "$work/cache" --repo bench/r --manifest home --tp 4 --rank 1 \
    --hold "$work/direct.sock" > "$work/direct.log" 2>&1 &
  holder=$!
  until grep -q "^holding" "$work/direct.log" 2>/dev/null; do
    kill -0 $holder 2>/dev/null || { cat "$work/direct.log"; exit 1; }
    sleep 0.01
  done
  t1=$(now)
  kill -TERM $holder; wait $holder || true; holder=""
  direct=$(echo "$t1 - $t0" | bc)

  "$bin/exlr8d" serve --cache "$work/cache" --no-socket --listen 127.0.0.1:0 > "$work/serve.out" 2> "$work/serve.err" &
  srv=$!
  until grep -q listening "$work/serve.out" 2>/dev/null; do sleep 0.01; done
  url=$(sed -n 's/.*\(http:[^ ]*\) .*/\1/p' "$work/serve.out")
  # --listen wants the token serve made in the cache, and JSON bodies (docs/OPERATIONS.md)
  auth=(-H "Authorization: Bearer $(cat "$work/cache/exlr8d.api-token")" -H 'Content-Type: application/json')
  t0=$(now)
  id=$(curl -s "${auth[@]}" -X POST "$url/v1/stages" -d '{"repo":"bench/r","manifest":"home","tp":4,"rank":1}' |
       sed -n 's/^{"stage":{"id":\([0-9]*\),.*/\1/p')
  until curl -s "${auth[@]}" "$url/v1/stages/$id" | grep -q '"state":"holding"'; do
    if curl -s "${auth[@]}" "$url/v1/stages/$id" | grep -q '"state":"\(failed\|died\)"'; then curl -s "${auth[@]}" "$url/v1/stages/$id"; exit 1; fi
    sleep 0.01
  done
  t1=$(now)
  api=$(echo "$t1 - $t0" | bc)
  [[ $round == 1 ]] && { curl -s "${auth[@]}" "$url/v1/stages/$id" | head -c 1200; echo; }
  t2=$(now)
  curl -s "${auth[@]}" -X DELETE "$url/v1/stages/$id" > /dev/null
  until curl -s "${auth[@]}" "$url/v1/stages/$id" | grep -q '"state":"released"'; do sleep 0.01; done
  released=$(echo "$(now) - $t2" | bc)
  # told to stop while it still reads the rank
  id=$(curl -s "${auth[@]}" -X POST "$url/v1/stages" -d '{"repo":"bench/r","manifest":"home","tp":4,"rank":1}' |
       sed -n 's/^{"stage":{"id":\([0-9]*\),.*/\1/p')
  until curl -s "${auth[@]}" "$url/v1/stages/$id" | grep -q '"state":"\(reading\|staging\|holding\)"'; do sleep 0.002; done
  t2=$(now)
  curl -s "${auth[@]}" -X DELETE "$url/v1/stages/$id" > /dev/null
  until curl -s "${auth[@]}" "$url/v1/stages/$id" | grep -q '"state":"released"'; do sleep 0.01; done
  stopped=$(echo "$(now) - $t2" | bc)
  during=$(curl -s "${auth[@]}" "$url/v1/stages/$id" | sed -n 's/.*"stopped_while":"\([a-z]*\)".*/\1/p')
  printf 'round %d: by hand %.3f s, through POST /v1/stages %.3f s (%.3fx); released %.3f s after DELETE;' \
    "$round" "$direct" "$api" "$(echo "scale=4; $api / $direct" | bc)" "$released"
  printf ' DELETE while %s: released %.3f s after it\n' "${during:-holding (not stopped early)}" "$stopped"
  kill -TERM $srv; wait $srv || true; srv=""
done
