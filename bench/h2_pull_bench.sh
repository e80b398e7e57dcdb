#!/usr/bin/env bash
# Pulls over TLS and HTTP/2, the protocol of the Hub's CDN (pull_bench.sh
# speaks plain HTTP/1.1, one connection per transfer). libcurl multiplexes
# the transfers to one host on HTTP/2 connections (--h2-streams S to each,
# default 4; S = J: all on one), so what one transfer does to its stream
# (being held back, say) the others on it may feel; and over a long, lossy
# path one TCP connection's window caps all it carries, which more
# connections spread.
#
# nginx serves the release over TLS and HTTP/2 on 127.0.0.2 (a certificate
# of a CA made here), and the hub API on 127.0.0.1, also over TLS and
# HTTP/2, proxied to exlr8-hubsim (its /resolve/ answers with https:// CDN
# URLs). Per round, in rotating order, from a warm page cache (nginx serves
# from memory), TP 4 rank 1 under home:
#   exlr8d pull --jobs J --h2-streams S    for each S in STREAMS
#   BASELINE_BIN pull --jobs J             (another exlr8d build, if given)
#   curl --parallel --parallel-max J of the same ranges (HTTP/2, which
#        multiplexes them on one connection, as curl does by default)
#   curl --http1.1 --parallel --parallel-max J (J connections)
# and prints every run with the connections nginx saw, then medians.
# With NETEM=on, each DELAY:LOSS of PATHS is emulated in turn: `tc qdisc
# ... netem` on the loopback device adds DELAY to every packet (each way:
# the round trip is twice it) and drops LOSS of them, with the loopback MTU
# at 1500 like an Ethernet path; both are put back at the end (root and the
# sch_netem kernel module).
# With PROXY=on (no root, no netem), bench/wan_proxy relays every connection
# to the CDN and to the hub instead, and each DELAY:WINDOW:RATE of PATHS is
# a path in turn: DELAY each way (every request's round trip is 2·DELAY
# longer), at most WINDOW bytes of one connection in flight (one connection
# moves at most WINDOW / (2·DELAY), as a congestion window caps it on a
# long path) and RATE bytes/s for all connections together (0: no cap).
# A model of a long path, not TCP: no loss, no slow start (wan_proxy.cpp).
#
#   bench/h2_pull_bench.sh [BUILD_DIR]      (default build/; Release build)
# Environment: STREAMS="16 4 1", JOBS=16 (transfers in flight, for exlr8d
#   and curl alike), JOBS_LIST="auto 16 32 64 128" (instead of STREAMS:
#   exlr8d with no --jobs, or --jobs N; auto-sS: no --jobs and
#   --h2-streams S; curl only with CURL=on; CSV=PREFIX
#   appends each run to PREFIX.<path>), ROUNDS=3, BASELINE_BIN=PATH, SYNTH="--hidden
#   1024 --experts 16 --moe-layers 1-4" (extra synth flags), SHOW_PHASES=1
#   (each exlr8d run's phase_s), PULL_FLAGS (extra exlr8d pull flags),
#   NETEM=on and PATHS="20ms:0% 20ms:0.05%", or PROXY=on and
#   PATHS="20ms:16M:0 20ms:1M:0", EXLR8_BENCH_DIR, NGINX_BIN.
# Needs: nginx, curl with HTTP/2, openssl, python3, bc (NETEM=on: tc, ip;
#   PROXY=on: BUILD_DIR/bin/wan_proxy).
set -euo pipefail
cd "$(dirname "$0")/.."
repo_root=$PWD
bin=$(cd "${1:-build}/bin" && pwd)
netem=${NETEM:-off}
proxy=${PROXY:-off}
[[ $netem == on && $proxy == on ]] && { echo "h2_pull_bench: NETEM=on or PROXY=on, not both"; exit 2; }
if [[ $proxy == on ]]; then paths=${PATHS:-20ms:16M:0 20ms:1M:0}; else paths=${PATHS:-20ms:0% 20ms:0.05%}; fi
streams_list=${STREAMS:-16 4 1}
jobs=${JOBS:-16}
rounds=${ROUNDS:-3}
synth_flags=${SYNTH:---hidden 1024 --experts 16 --moe-layers 1-4}
nginx_bin=${NGINX_BIN:-/usr/sbin/nginx}
[[ -z ${NGINX_BIN:-} && ! -x $nginx_bin && -x $repo_root/.tools/nginx/usr/sbin/nginx ]] &&
  nginx_bin=$repo_root/.tools/nginx/usr/sbin/nginx
tool=$repo_root/bench/pull_bench_tool.py

tools=("$bin/exlr8" "$bin/exlr8d" "$bin/exlr8-hubsim" "$nginx_bin" curl openssl python3 bc)
[[ $netem == on ]] && tools+=(tc ip)
[[ $proxy == on ]] && tools+=("$bin/wan_proxy")
for t in "${tools[@]}"; do
  command -v "$t" > /dev/null || { echo "h2_pull_bench: missing $t"; exit 2; }
done
curl -V | grep -q HTTP2 || { echo "h2_pull_bench: this curl has no HTTP/2"; exit 2; }

w=${EXLR8_BENCH_DIR:-$(mktemp -d /tmp/exlr8-h2-bench.XXXXXX)}
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
[[ $netem == on || $proxy == on ]] || paths=plain:none
if [[ $netem == on ]] && ! tc qdisc add dev lo root netem delay 1ms 2> "$w/tc.err"; then
  echo "h2_pull_bench: cannot add a netem qdisc on lo: $(cat "$w/tc.err")"
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
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=exlr8-h2-bench \
  -addext subjectAltName=IP:127.0.0.1,IP:127.0.0.2,IP:127.0.0.3 -keyout "$w/key.pem" -out "$w/cert.pem" > /dev/null 2>&1
mkdir -p "$w/ngx"
cdn_port=$(free_port)
hub_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# The simulator answers the hub API in plain HTTP; nginx puts it behind TLS
# and HTTP/2 on 127.0.0.1:hub_port, as the Hub's own API is. One tree page
# (up to 1000 files): a next-page link would name the simulator's own
# origin, which the pull rightly refuses as another host's.
"$bin/exlr8-hubsim" --repo bench/h2="$w/release" --cdn-base "https://127.0.0.2:$cdn_port" --port-file "$w/ports" \
  --tree-page-size 1000 > "$w/hubsim.log" 2>&1 &
pids+=("$!")
for _ in $(seq 600); do [[ -s "$w/ports" ]] && break; sleep 0.1; done
hubsim=$(sed -n 's/.*hub=\([^ ]*\).*/\1/p' "$w/ports")
[[ -n $hubsim ]] || { echo "h2_pull_bench: exlr8-hubsim did not start"; cat "$w/hubsim.log"; exit 1; }
hub=https://127.0.0.1:$hub_port
# With PROXY=on nginx listens on 127.0.0.3 instead, and the addresses the
# client is given (127.0.0.2:cdn_port, 127.0.0.1:hub_port) are the relays'.
ngx_cdn=127.0.0.2:$cdn_port
ngx_hub=127.0.0.1:$hub_port
if [[ $proxy == on ]]; then
  ngx_cdn=127.0.0.3:$(free_port)
  ngx_hub=127.0.0.3:$(free_port)
fi
cat > "$w/ngx/nginx.conf" << EOF
daemon off;
worker_processes $(nproc);
pid $w/ngx/nginx.pid;
error_log $w/ngx/error.log warn;
events { worker_connections 1024; }
http {
  default_type application/octet-stream;
  log_format t '\$connection \$server_protocol \$status';
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
    listen $ngx_cdn ssl http2;
    access_log $w/ngx/access.log t;
    root $w/release;
    location / { }
  }
  server {
    listen $ngx_hub ssl http2;
    access_log $w/ngx/hub.log t;
    location / { proxy_pass $hubsim; proxy_http_version 1.1; }
  }
}
EOF
"$nginx_bin" -p "$w/ngx" -c "$w/ngx/nginx.conf" -e "$w/ngx/error.log" &
pids+=("$!")
for _ in $(seq 101); do
  curl -s -o /dev/null --cacert "$w/cert.pem" "https://$ngx_cdn/" && curl -s -o /dev/null --cacert "$w/cert.pem" "https://$ngx_hub/" && break
  sleep 0.1
done
[[ -f $w/ngx/access.log ]] || { echo "h2_pull_bench: nginx did not start"; cat "$w/ngx/error.log"; exit 1; }
# PROXY=on: the relays of the current path, restarted on the same
# addresses for each.
relay_pids=()
start_relays() {  # DELAY WINDOW RATE
  rm -f "$w/relay-cdn.port" "$w/relay-hub.port"
  "$bin/wan_proxy" --listen "127.0.0.2:$cdn_port" --upstream "$ngx_cdn" --delay "$1" --window "$2" --rate "$3" \
    --port-file "$w/relay-cdn.port" 2>> "$w/relay.log" &
  relay_pids=("$!")
  "$bin/wan_proxy" --listen "127.0.0.1:$hub_port" --upstream "$ngx_hub" --delay "$1" --window "$2" --rate "$3" \
    --port-file "$w/relay-hub.port" 2>> "$w/relay.log" &
  relay_pids+=("$!")
  pids+=("${relay_pids[@]}")
  for _ in $(seq 100); do [[ -s $w/relay-cdn.port && -s $w/relay-hub.port ]] && return; sleep 0.05; done
  echo "h2_pull_bench: wan_proxy did not start"; cat "$w/relay.log"; exit 1
}
stop_relays() {
  for p in "${relay_pids[@]}"; do kill "$p" 2> /dev/null || true; wait "$p" 2> /dev/null || true; done
  relay_pids=()
}
python3 "$tool" curl-config "$w/plan.json" "https://127.0.0.2:$cdn_port" "$w/out" > "$w/curl.cfg" 2> "$w/curl.count"
read -r requests plan_bytes < "$w/curl.count"
# Per-transfer options go into every section of a config (each `next`
# starts afresh); the CA comes from the environment, which curl reads for
# every transfer.
sed 's/^url = /fail\nurl = /' "$w/curl.cfg" > "$w/curl-h2.cfg"
sed 's/^url = /fail\nhttp1.1\nurl = /' "$w/curl.cfg" > "$w/curl-h1.cfg"
export CURL_CA_BUNDLE=$w/cert.pem
echo "h2_pull_bench: $(python3 "$tool" get "$w/plan.json" files | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))') files," \
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
      "$bin/exlr8d" pull --repo bench/h2 --manifest home --tp 4 --rank 1 --jobs "$jobs" --h2-streams "${name#exlr8d-}" \
        --endpoint "$hub" --cache "$w/cache" --ca-bundle "$w/cert.pem" --no-progress --json ${PULL_FLAGS:-} > "$w/pull.json" ;;
    jobs-auto*)  # no --jobs: the adaptive limit; jobs-auto-sS: with --h2-streams S
      local streams=()
      [[ $name == jobs-auto-s* ]] && streams=(--h2-streams "${name#jobs-auto-s}")
      "$bin/exlr8d" pull --repo bench/h2 --manifest home --tp 4 --rank 1 "${streams[@]}" \
        --endpoint "$hub" --cache "$w/cache" --ca-bundle "$w/cert.pem" --no-progress --json ${PULL_FLAGS:-} > "$w/pull.json" ;;
    jobs-*)
      "$bin/exlr8d" pull --repo bench/h2 --manifest home --tp 4 --rank 1 --jobs "${name#jobs-}" \
        --endpoint "$hub" --cache "$w/cache" --ca-bundle "$w/cert.pem" --no-progress --json ${PULL_FLAGS:-} > "$w/pull.json" ;;
    baseline)
      "$BASELINE_BIN" pull --repo bench/h2 --manifest home --tp 4 --rank 1 --jobs "$jobs" \
        --endpoint "$hub" --cache "$w/cache" --ca-bundle "$w/cert.pem" --no-progress --json > "$w/pull.json" ;;
    curl-h2) curl --parallel --parallel-max "$jobs" -sS --no-progress-meter -K "$w/curl-h2.cfg" ;;
    curl-h1) curl --parallel --parallel-max "$jobs" -sS --no-progress-meter -K "$w/curl-h1.cfg" ;;
  esac
  end=$(now)
  local s c
  s=$(echo "$end - $start" | bc)
  c=$(connections_since "$before")
  printf '  %-12s %7.3f s  %6.1f MB/s  %2d connections\n' "$name" "$s" "$(echo "$plan_bytes / $s / 1000000" | bc -l)" "$c"
  echo "$name $s $c" >> "$w/results"
  if [[ $name == jobs-* ]]; then
    printf '    jobs: %s\n' "$(python3 "$tool" get "$w/pull.json" jobs)"
    [[ -n ${CSV:-} ]] && echo "$name,$s,$c,$(python3 "$tool" get "$w/pull.json" jobs | tr -d ' ,{}\"' | tr ':' '=')" >> "$CSV.$path_name"
  fi
  if [[ ($name == exlr8d-* || $name == jobs-* || $name == baseline) && -n ${SHOW_PHASES:-} ]]; then python3 "$tool" get "$w/pull.json" phase_s; fi
}

names=()
if [[ -n ${JOBS_LIST:-} ]]; then
  # JOBS_LIST="auto 16 32": exlr8d with no --jobs (auto) or --jobs N, the
  # default --h2-streams; curl only with CURL=on.
  for j in $JOBS_LIST; do names+=("jobs-$j"); done
else
  for s in $streams_list; do names+=("exlr8d-$s"); done
fi
[[ -n ${BASELINE_BIN:-} ]] && names+=(baseline)
[[ -z ${JOBS_LIST:-} || ${CURL:-off} == on ]] && names+=(curl-h2 curl-h1)
[[ $netem == on ]] && ip link set lo mtu 1500
for p in $paths; do
  delay=${p%%:*} loss=${p#*:}
  [[ $netem == on ]] && tc qdisc add dev lo root netem delay "$delay" loss "$loss"
  if [[ $netem == on ]]; then
    printf '\n== netem delay %s each way, loss %s, MTU 1500 (load %s)\n' "$delay" "$loss" "$(cut -d' ' -f1-3 /proc/loadavg)"
  elif [[ $proxy == on ]]; then
    IFS=: read -r delay window rate <<< "$p"
    [[ -n $delay && -n $window && -n $rate ]] || { echo "h2_pull_bench: PROXY=on wants PATHS of DELAY:WINDOW:RATE, got '$p'"; exit 2; }
    start_relays "$delay" "$window" "$rate"
    printf '\n== wan_proxy: delay %s each way, window %s per connection, rate %s B/s in all; --jobs %s (load %s)\n' \
      "$delay" "$window" "$rate" "$jobs" "$(cut -d' ' -f1-3 /proc/loadavg)"
  else
    printf '\n== plain loopback (NETEM=off; load %s)\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
  fi
  rm -f "$w/results"
  path_name=${p//:/_}
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
  if [[ $proxy == on ]]; then stop_relays; fi
done
