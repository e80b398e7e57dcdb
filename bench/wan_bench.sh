#!/usr/bin/env bash
# Pulls over an emulated long, lossy path: how many HTTP/2 connections the
# transfers should spread over (exlr8d pull --h2-streams). The real Hub's
# CDN speaks HTTP/2 over TLS, and libcurl multiplexes every transfer to one
# host on one connection unless told otherwise; over a WAN one TCP
# connection's congestion window then caps the whole pull.
#
# nginx serves the release over TLS and HTTP/2 on 127.0.0.2 (a certificate
# of a CA made here), exlr8-hubsim the hub API on 127.0.0.1 (its /resolve/
# answers with https:// CDN URLs). `tc qdisc ... netem` on the loopback
# device adds DELAY to every packet (each way: the round trip is twice it)
# and drops LOSS of them, with the loopback MTU set to 1500 like an
# Ethernet path; both are put back at the end. Per round, in rotating order,
# from a warm page cache (nginx serves from memory):
#   exlr8d pull --jobs 16 --h2-streams S   for each S in STREAMS
#   curl --parallel --parallel-max 16 of the same ranges (HTTP/2, which
#        multiplexes them on one connection, as curl does by default)
#   curl --http1.1 --parallel --parallel-max 16 (16 connections)
# and prints every run with the connections nginx saw, then medians.
#
#   bench/wan_bench.sh [BUILD_DIR]      (default build/; root, for tc and ip)
# Environment: PATHS="20ms:0% 20ms:0.05%" (DELAY:LOSS pairs), STREAMS="16 4 1",
#   ROUNDS=3, SYNTH="--hidden 1024 --experts 16 --moe-layers 1-4" (extra
#   synth flags), EXLR8_BENCH_DIR, NGINX_BIN, NETEM=off (no tc: a smoke run
#   of the script itself on plain loopback).
# Needs: root, the sch_netem kernel module, nginx, curl with HTTP/2, openssl.
set -euo pipefail
cd "$(dirname "$0")/.."
repo_root=$PWD
bin=$(cd "${1:-build}/bin" && pwd)
paths=${PATHS:-20ms:0% 20ms:0.05%}
streams_list=${STREAMS:-16 4 1}
rounds=${ROUNDS:-3}
synth_flags=${SYNTH:---hidden 1024 --experts 16 --moe-layers 1-4}
netem=${NETEM:-on}
nginx_bin=${NGINX_BIN:-/usr/sbin/nginx}
[[ -z ${NGINX_BIN:-} && ! -x $nginx_bin && -x $repo_root/.tools/nginx/usr/sbin/nginx ]] &&
  nginx_bin=$repo_root/.tools/nginx/usr/sbin/nginx
tool=$repo_root/bench/pull_bench_tool.py

for t in "$bin/exlr8" "$bin/exlr8d" "$bin/exlr8-hubsim" "$nginx_bin" curl openssl python3 tc ip; do
  command -v "$t" > /dev/null || { echo "wan_bench: missing $t"; exit 2; }
done
curl -V | grep -q HTTP2 || { echo "wan_bench: this curl has no HTTP/2"; exit 2; }

w=${EXLR8_BENCH_DIR:-$(mktemp -d /tmp/exlr8-wan-bench.XXXXXX)}
mkdir -p "$w"
chmod 755 "$w"
old_mtu=$(cat /sys/class/net/lo/mtu)
pids=()
cleanup() {
  tc qdisc del dev lo root 2> /dev/null || true
  ip link set lo mtu "$old_mtu" 2> /dev/null || true
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2> /dev/null || true; done
  rm -rf "$w"
}
trap cleanup EXIT
# Fails here, before any setup, where netem is missing.
[[ $netem == on ]] || paths=plain:none
if [[ $netem == on ]] && ! tc qdisc add dev lo root netem delay 1ms 2> "$w/tc.err"; then
  echo "wan_bench: cannot add a netem qdisc on lo: $(cat "$w/tc.err")"
  exit 2
fi
[[ $netem == on ]] && tc qdisc del dev lo root

now() { date +%s.%N; }
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.2", 0)); print(s.getsockname()[1])'
}

# The release and the rank's plan.
# shellcheck disable=SC2086
"$bin/exlr8" synth "$w/release" --seed 7 --halves 16 --dense-layers 0 --vocab 4096 $synth_flags --quiet
"$bin/exlr8" plan "$w/release" --manifest home --tp 4 --rank 1 --json > "$w/plan.json"
cat "$w"/release/*.json "$w"/release/*/* > /dev/null 2>&1 || true  # warm: nginx serves from memory

# A CA of one, for the CDN's and the hub's addresses.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=exlr8-wan-bench \
  -addext subjectAltName=IP:127.0.0.1,IP:127.0.0.2 -keyout "$w/key.pem" -out "$w/cert.pem" > /dev/null 2>&1
mkdir -p "$w/ngx"
cdn_port=$(free_port)
cat > "$w/ngx/nginx.conf" << EOF
daemon off;
worker_processes $(nproc);
pid $w/ngx/nginx.pid;
error_log $w/ngx/error.log warn;
events { worker_connections 1024; }
http {
  default_type application/octet-stream;
  log_format t '\$connection \$server_protocol \$status';
  access_log $w/ngx/access.log t;
  sendfile on;
  keepalive_requests 1000000;
  http2_max_concurrent_streams 128;
  client_body_temp_path $w/ngx/body;
  proxy_temp_path $w/ngx/proxy;
  fastcgi_temp_path $w/ngx/fastcgi;
  uwsgi_temp_path $w/ngx/uwsgi;
  scgi_temp_path $w/ngx/scgi;
  ssl_certificate $w/cert.pem;
  ssl_certificate_key $w/key.pem;
  server {
    listen 127.0.0.2:$cdn_port ssl http2;
    root $w/release;
    location / { }
  }
}
EOF
"$nginx_bin" -p "$w/ngx" -c "$w/ngx/nginx.conf" -e "$w/ngx/error.log" &
pids+=("$!")
for _ in $(seq 101); do
  curl -s -o /dev/null --cacert "$w/cert.pem" "https://127.0.0.2:$cdn_port/" && break
  sleep 0.1
done
[[ -f $w/ngx/access.log ]] || { echo "wan_bench: nginx did not start"; cat "$w/ngx/error.log"; exit 1; }
"$bin/exlr8-hubsim" --repo bench/wan="$w/release" --cdn-base "https://127.0.0.2:$cdn_port" --port-file "$w/ports" \
  > "$w/hubsim.log" 2>&1 &
pids+=("$!")
for _ in $(seq 600); do [[ -s "$w/ports" ]] && break; sleep 0.1; done
hub=$(sed -n 's/.*hub=\([^ ]*\).*/\1/p' "$w/ports")
python3 "$tool" curl-config "$w/plan.json" "https://127.0.0.2:$cdn_port" "$w/out" > "$w/curl.cfg" 2> "$w/curl.count"
read -r requests plan_bytes < "$w/curl.count"
# Per-transfer options go into every section of a config (each `next`
# starts afresh); the CA comes from the environment, which curl reads for
# every transfer.
sed 's/^url = /fail\nurl = /' "$w/curl.cfg" > "$w/curl-h2.cfg"
sed 's/^url = /fail\nhttp1.1\nurl = /' "$w/curl.cfg" > "$w/curl-h1.cfg"
export CURL_CA_BUNDLE=$w/cert.pem
echo "wan_bench: $(python3 "$tool" get "$w/plan.json" files | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))') files," \
  "$requests requests, $plan_bytes bytes of ranges (TP 4 rank 1, home); $(nproc) cores"

log_lines() { wc -l < "$w/ngx/access.log"; }
# connections_since N: distinct nginx connections in the log after line N.
connections_since() { tail -n +"$(($1 + 1))" "$w/ngx/access.log" | awk '{print $1}' | sort -u | wc -l; }

# run NAME: one timed run of NAME; appends "NAME seconds connections" to $w/results.
run() {
  local name=$1 start end before
  rm -rf "$w/cache" "$w/out"
  mkdir -p "$w/out"
  before=$(log_lines)
  start=$(now)
  case $name in
    exlr8d-*)
      "$bin/exlr8d" pull --repo bench/wan --manifest home --tp 4 --rank 1 --jobs 16 --h2-streams "${name#exlr8d-}" \
        --endpoint "$hub" --cache "$w/cache" --ca-bundle "$w/cert.pem" --no-progress --json ${PULL_FLAGS:-} > "$w/pull.json" ;;
    curl-h2) curl --parallel --parallel-max 16 -sS -K "$w/curl-h2.cfg" ;;
    curl-h1) curl --parallel --parallel-max 16 -sS -K "$w/curl-h1.cfg" ;;
  esac
  end=$(now)
  local s c
  s=$(echo "$end - $start" | bc)
  c=$(connections_since "$before")
  printf '  %-12s %7.3f s  %6.1f MB/s  %2d connections\n' "$name" "$s" "$(echo "$plan_bytes / $s / 1000000" | bc -l)" "$c"
  echo "$name $s $c" >> "$w/results"
  if [[ $name == exlr8d-* && -n ${SHOW_PHASES:-} ]]; then python3 "$tool" get "$w/pull.json" phase_s; fi
}

names=()
for s in $streams_list; do names+=("exlr8d-$s"); done
names+=(curl-h2 curl-h1)
[[ $netem == on ]] && ip link set lo mtu 1500
for p in $paths; do
  delay=${p%%:*} loss=${p#*:}
  [[ $netem == on ]] && tc qdisc add dev lo root netem delay "$delay" loss "$loss"
  if [[ $netem == on ]]; then
    printf '\n== netem delay %s each way, loss %s, MTU 1500 (load %s)\n' "$delay" "$loss" "$(cut -d' ' -f1-3 /proc/loadavg)"
  else
    printf '\n== plain loopback (NETEM=off; load %s)\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
  fi
  rm -f "$w/results"
  for ((r = 0; r < rounds; r++)); do
    echo " round $((r + 1))"
    n=${#names[@]}
    for ((i = 0; i < n; i++)); do run "${names[$(((i + r) % n))]}"; done
  done
  echo " medians:"
  for name in "${names[@]}"; do
    med=$(awk -v n="$name" '$1 == n {print $2}' "$w/results" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
    printf '  %-12s %7.3f s  %6.1f MB/s\n' "$name" "$med" "$(echo "$plan_bytes / $med / 1000000" | bc -l)"
  done
  if [[ $netem == on ]]; then tc qdisc del dev lo root; fi
done
