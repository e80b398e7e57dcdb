#!/usr/bin/env bash
# Pull benchmarks, on loopback only. The release files
# are served by nginx (sendfile, keep-alive) on 127.0.0.2; the hub API by
# exlr8-hubsim on 127.0.0.1 with --cdn-base pointing /resolve/ at nginx.
# Every number comes with a baseline measured in the same run against the
# same server.
#
#   A  synthesized release (hidden 2048, 32 experts, MoE layers 3-10: 3.9 GB),
#      TP 4 rank 1 under the home manifest, rounds in alternating order, each
#      run into a new directory, best of the rounds:
#        exlr8d pull --jobs 16        (verifies and records every byte)
#        curl --parallel --parallel-max 16 of the SAME ranges (from
#             `exlr8 plan --json`), one output file per range, no checks
#        aria2c -x16 -s16 -j16 of every file of the release
#      mode cold (RUNS rounds): page cache dropped before each run (root);
#      mode warm (WARM_RUNS rounds, exlr8d and curl): dropped, then the release
#      read once, so nginx serves from memory and the clients are compared.
#      -> throughput ratio exlr8d/curl (target >= 1.0), time-to-ready ratio
#         aria2c/exlr8d against the byte ratio release/rank, /resolve/ per pull
#   C  A/B of exlr8d settings on part A's release and servers (instead of
#      part A's rounds): VARIANTS, ';'-separated sets of pull options ("" =
#      the defaults; a set may start with BIN=PATH to run another exlr8d
#      build, e.g. the last commit's), each run ROUNDS times per mode in MODES (cold and/or
#      warm, as in A) beside curl, order rotating; prints every run (with what it read from and wrote to
#      the disk under the work directory, /sys/class/block/DEV/stat) and the
#      median and best per variant. TMPFS=DIR also runs exlr8d (defaults)
#      and curl writing into DIR (a tmpfs: no disk writes of their own),
#      which tells what the disk costs from the rest.
#   B  GLM-5.3 geometry (exlr8 synth --preset glm53 --index-only: 825 GB
#      apparent, ~1 GB stored), exlr8d pull --tp 4 --rank 1 under
#      /usr/bin/time -v, stopped with SIGINT after B_SECONDS or once its cache
#      grew by B_MAX_GB: peak RSS (target < 256 MB), halves/s, and the time
#      from start to the first half request (nginx access log); first with an
#      empty cache, then again with the metadata and whole files cached (so
#      the second start is planning at full scale through the pull path).
#
#   bench/pull_bench.sh [BUILD_DIR]        (default build/; Release build)
# Environment: PARTS="A B" (or C), RUNS=3, WARM_RUNS=2, VARIANTS, MODES="warm cold",
#   ROUNDS=3, TMPFS (part C), B_SECONDS=60, B_MAX_GB_COLD=8 (the dense
#   files alone are 5.9 GB), B_MAX_GB=4, B_WRAP (part B: e.g. heaptrack),
#   B_JOBS=auto (part B's --jobs; auto: none, the adaptive limit),
#   EXLR8_BENCH_DIR (work directory, default a new /tmp/exlr8-pull-bench.*;
#   it is deleted at the end), NGINX_BIN=/usr/sbin/nginx (else the one
#   scripts/setup.sh unpacks under .tools/; not NGINX: nginx itself reads
#   that variable, as inherited sockets).
# Needs: nginx (nginx-light), curl, aria2c, python3; 15 GB free.
set -euo pipefail
cd "$(dirname "$0")/.."
repo_root=$PWD
bin=$(cd "${1:-build}/bin" && pwd)
parts=${PARTS:-A B}
runs=${RUNS:-3}
warm_runs=${WARM_RUNS:-2}
b_seconds=${B_SECONDS:-60}
b_max_gb_cold=${B_MAX_GB_COLD:-8}
b_max_gb=${B_MAX_GB:-4}
nginx_bin=${NGINX_BIN:-/usr/sbin/nginx}
# scripts/setup.sh unpacks one under .tools/ for the TLS test: use it when
# the system has none.
[[ -z ${NGINX_BIN:-} && ! -x $nginx_bin && -x $repo_root/.tools/nginx/usr/sbin/nginx ]] &&
  nginx_bin=$repo_root/.tools/nginx/usr/sbin/nginx
tool=$repo_root/bench/pull_bench_tool.py

for t in "$bin/exlr8" "$bin/exlr8d" "$bin/exlr8-hubsim" "$nginx_bin" curl python3 /usr/bin/time bc; do
  command -v "$t" > /dev/null || { echo "pull_bench: missing $t (scripts/setup.sh with EXLR8_SETUP_BENCH=1)"; exit 2; }
done
# aria2c is only the baseline of the time-to-ready comparison; without it
# (a machine with no package registry) that comparison is skipped.
have_aria2=1
command -v aria2c > /dev/null || { have_aria2=0; echo "pull_bench: no aria2c: the time-to-ready comparison is skipped"; }

w=${EXLR8_BENCH_DIR:-$(mktemp -d /tmp/exlr8-pull-bench.XXXXXX)}
mkdir -p "$w"
chmod 755 "$w"  # nginx workers run as an unprivileged user
free_kb=$(df -Pk "$w" | awk 'NR==2 {print $4}')
if (( free_kb < 15 * 1024 * 1024 )); then
  echo "pull_bench: only $((free_kb / 1024 / 1024)) GB free under $w; needs 15 GB"
  exit 2
fi

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2> /dev/null || true; done
  rm -rf "$w"
}
trap cleanup EXIT

say() { printf '\n== %s\n' "$*"; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
cache_kb() {
  local k
  k=$(du -sk "$w/cache" 2> /dev/null | cut -f1 || true)
  echo "${k:-0}"
}
now() { date +%s.%N; }
# Drops the page cache (root only); sets $cache_state.
cache_state=warm
drop_caches() {
  sync
  if [[ -w /proc/sys/vm/drop_caches ]] && echo 3 > /proc/sys/vm/drop_caches 2> /dev/null; then
    cache_state=cold
  else
    cache_state=warm
  fi
}
# The block device under the work directory, and its sectors read and
# written so far (/sys/class/block/DEV/stat): what a run cost the disk.
disk_dev=$(basename "$(df --output=source "$w" | tail -1)")
disk_sectors() {
  if [[ -r /sys/class/block/$disk_dev/stat ]]; then awk '{print $3, $7}' "/sys/class/block/$disk_dev/stat"; else echo "0 0"; fi
}
# disk_delta "R0 W0" "R1 W1": "disk read X MB, wrote Y MB".
disk_delta() {
  local a b
  read -r -a a <<< "$1"
  read -r -a b <<< "$2"
  echo "disk read $(((b[0] - a[0]) * 512 / 1000000)) MB, wrote $(((b[1] - a[1]) * 512 / 1000000)) MB"
}
# TRACE=1 (parts A and C): for every exlr8d and curl run, a timeline in
# 100 ms steps of what nginx served (from its access log, one line per
# answer with $request_time) and what the disk read and wrote (sampled every
# 10 ms), printed to $w/trace and to stderr: where the two clients' runs part.
trace_pid=
trace_start() {
  [[ ${TRACE:-0} == 1 ]] || return 0
  [[ -f $w/ngx/access.log ]] && : > "$w/ngx/access.log"
  python3 "$tool" disk-sample "/sys/class/block/$disk_dev/stat" > "$w/disk.trace" 2> "$w/disk.trace.started" &
  trace_pid=$!
  until [[ -s $w/disk.trace.started ]]; do sleep 0.01; done  # its first sample before the run starts
}
trace_stop() {  # trace_stop T0 T1 LABEL
  [[ ${TRACE:-0} == 1 && -n $trace_pid ]] || return 0
  kill "$trace_pid" 2> /dev/null || true
  wait "$trace_pid" 2> /dev/null || true
  trace_pid=
  python3 "$tool" timeline "$w/ngx/access.log" "$w/disk.trace" "$1" "$2" "$3" | tee -a "$w/trace" >&2
}
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.2", 0)); print(s.getsockname()[1])'
}

# start_nginx ROOT LOG: nginx in the foreground (no system service) serving
# ROOT on 127.0.0.2:$nginx_port; LOG "on" writes $w/ngx/access.log with $msec.
nginx_pid=
start_nginx() {
  local root=$1 log=$2
  stop_nginx
  rm -rf "$w/ngx"
  mkdir -p "$w/ngx"
  nginx_port=$(free_port)
  local access="access_log off;"
  if [[ $log == trace ]]; then  # unbuffered: read right after each run
    access="log_format t '\$msec \$request_time \$body_bytes_sent \"\$uri\"';
  access_log $w/ngx/access.log t;"
  elif [[ $log == on ]]; then
    access="log_format t '\$msec \"\$uri\" \"\$http_range\" \$status \$body_bytes_sent';
  access_log $w/ngx/access.log t buffer=256k flush=1s;"
  fi
  cat > "$w/ngx/nginx.conf" << EOF
daemon off;
worker_processes $(nproc);
pid $w/ngx/nginx.pid;
error_log $w/ngx/error.log warn;
events { worker_connections 1024; }
http {
  default_type application/octet-stream;
  $access
  sendfile on;
  tcp_nopush on;
  keepalive_timeout 65;
  keepalive_requests 1000000;
  client_body_temp_path $w/ngx/body;
  proxy_temp_path $w/ngx/proxy;
  fastcgi_temp_path $w/ngx/fastcgi;
  uwsgi_temp_path $w/ngx/uwsgi;
  scgi_temp_path $w/ngx/scgi;
  server {
    listen 127.0.0.2:$nginx_port;
    root $root;
    location / { }
  }
}
EOF
  "$nginx_bin" -p "$w/ngx" -c "$w/ngx/nginx.conf" -e "$w/ngx/error.log" &
  nginx_pid=$!
  pids+=("$nginx_pid")
  for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.2:$nginx_port/" && return 0
    sleep 0.1
  done
  echo "pull_bench: nginx did not start"; cat "$w/ngx/error.log"; exit 1
}
stop_nginx() {
  if [[ -n $nginx_pid ]]; then
    kill "$nginx_pid" 2> /dev/null || true
    wait "$nginx_pid" 2> /dev/null || true
    nginx_pid=
  fi
}

# start_hubsim ROOT [extra flags]: the hub API, LFS resolves -> nginx.
sim_pid=
start_hubsim() {
  local root=$1
  shift
  stop_hubsim
  rm -f "$w/ports"
  "$bin/exlr8-hubsim" --repo bench/pull="$root" --cdn-base "http://127.0.0.2:$nginx_port" --port-file "$w/ports" \
    "$@" > "$w/hubsim.log" 2>&1 &
  sim_pid=$!
  pids+=("$sim_pid")
  for _ in $(seq 1200); do
    [[ -s "$w/ports" ]] && break
    kill -0 "$sim_pid" 2> /dev/null || { cat "$w/hubsim.log"; exit 1; }
    sleep 0.1
  done
  hub=$(sed -n 's/.*hub=\([^ ]*\).*/\1/p' "$w/ports")
}
stop_hubsim() {
  if [[ -n $sim_pid ]]; then
    kill "$sim_pid" 2> /dev/null || true
    wait "$sim_pid" 2> /dev/null || true
    sim_pid=
  fi
}

pull_args=(--repo bench/pull --manifest home --tp 4 --rank 1 --jobs 16)
# PULL_EXTRA: more exlr8d pull options to compare (e.g. "--background-jobs 8").
read -r -a pull_extra <<< "${PULL_EXTRA:-}"
# B_WRAP: a command part B's pulls run under, e.g. "heaptrack -o DIR/pull"
# (peak RSS then includes the wrapper's own).
read -r -a b_wrap <<< "${B_WRAP:-}"
pull_args+=("${pull_extra[@]}")
echo "pull_bench: $(nproc) cores, load $(load), work dir $w ($((free_kb / 1024 / 1024)) GB free)"
q=/sys/class/block/$disk_dev/queue
[[ -d $q ]] || q=/sys/class/block/$(basename "$(readlink -f "/sys/class/block/$disk_dev/..")")/queue
echo "  disk $disk_dev: scheduler $(cat "$q/scheduler" 2> /dev/null), read_ahead_kb $(cat "$q/read_ahead_kb" 2> /dev/null)," \
  "wbt_lat_usec $(cat "$q/wbt_lat_usec" 2> /dev/null), nr_requests $(cat "$q/nr_requests" 2> /dev/null)"
echo "  $("$nginx_bin" -v 2>&1), $(curl --version | head -1 | cut -d' ' -f1-2), $( ((have_aria2)) && aria2c --version | head -1)"

# ---------------------------------------------------------------- part A --
if [[ " $parts " == *" A "* || " $parts " == *" C "* ]]; then
  rel=$w/release
  say "A: synthesize a 3.9 GB release (hidden 2048, 32 experts, MoE layers 3-10, widths 2/3/4)"
  "$bin/exlr8" synth "$rel" --seed 7 --hidden 2048 --halves 16 --experts 32 --moe-layers 3-10 --dense-layers 0-2 \
    --vocab 16384 --quiet
  "$bin/exlr8" plan "$rel" --manifest home --tp 4 --rank 1 --json > "$w/plan.json"
  plan_bytes=$(python3 "$tool" get "$w/plan.json" bytes)
  release_bytes=$(find "$rel" -type f -printf '%s\n' | paste -sd+ - | bc)
  n_files=$(find "$rel" -type f | wc -l)
  echo "  release $release_bytes bytes in $n_files files; TP 4 rank 1 needs $plan_bytes bytes"

  start_nginx "$rel" "$( [[ ${TRACE:-0} == 1 ]] && echo trace || echo off)"
  start_hubsim "$rel"
  echo "  nginx http://127.0.0.2:$nginx_port (root $rel), hub $hub"
  python3 "$tool" curl-config "$w/plan.json" "http://127.0.0.2:$nginx_port" "$w/curl.out" > "$w/curl.cfg" \
    2> "$w/curl.count"
  read -r curl_requests curl_bytes < "$w/curl.count"
  (cd "$rel" && find . -type f | sed 's|^\./||' | sort) | while read -r p; do
    printf 'http://127.0.0.2:%s/%s\n  out=%s\n' "$nginx_port" "$p" "$p"
  done > "$w/aria.list"
  echo "  curl config: $curl_requests ranges, $curl_bytes bytes"

  # Every run writes into a new directory, kept until the end of part A:
  # deleting thousands of files makes ext4 scan the recently freed inodes
  # when the next run creates files (curl creates one per range), which
  # would slow the baseline for minutes.
  n_run=0  # advanced by round() (the runs themselves are in subshells)
  # prepare MODE: empty the page cache (when root); in mode "warm", then read
  # the release once, so nginx serves from memory and the run measures the
  # client; in mode "cold" nginx reads the disk as the client writes it.
  prepare() {
    drop_caches
    if [[ $1 == warm ]]; then cat "$rel"/*/* "$rel"/*.json > /dev/null; fi
  }
  out_root=$w/out  # part C points it at TMPFS for some runs
  run_exlr8d() {
    local mode=$1 l t0 t1 dir
    dir=$out_root/exlr8d.$n_run
    prepare "$mode"
    curl -s -X POST "$hub/_sim/reset" > /dev/null
    l=$(load)
    local io0
    io0=$(disk_sectors)
    trace_start
    t0=$(now)
    /usr/bin/time -f '%M %U %S' -o "$w/time.txt" "${exe:-$bin/exlr8d}" pull "${pull_args[@]}" --endpoint "$hub" --cache "$dir" \
      --no-progress --json > "$w/pull.json"
    t1=$(now)
    trace_stop "$t0" "$t1" "exlr8d $mode"
    disk_delta "$io0" "$(disk_sectors)" > "$w/io"
    local rss user sys
    read -r rss user sys < "$w/time.txt"
    echo "$user $sys" | awk '{printf "cpu %.2f s (user %.2f, sys %.2f)", $1 + $2, $1, $2}' > "$w/cpu"
    curl -s "$hub/_sim/stats" > "$w/stats.json"
    python3 - "$w/pull.json" "$w/stats.json" "$t0" "$t1" "$rss" "$l" "$mode/$cache_state" << 'PY'
import json, sys
p = json.load(open(sys.argv[1])); st = json.load(open(sys.argv[2]))
wall = float(sys.argv[4]) - float(sys.argv[3])
assert p["complete"], "exlr8d pull did not complete"
# Fresh: nothing reused, nothing retried; fetched = planned plus the second
# fetch of each width-file header (recorded only when two fetches agree).
assert p["bytes_reused"] == 0 and p["retries"] == 0, "not a fresh, clean pull"
assert p["bytes_planned"] <= p["bytes_fetched"] <= 1.02 * p["bytes_planned"], "fetched %d of %d planned" % (
    p["bytes_fetched"], p["bytes_planned"])
print("exlr8d %.3f %d %d %d %d %s %s %s %.3f" % (wall, p["bytes_fetched"], p["resolves"], st["resolve"],
      int(sys.argv[5]), p["requests"], sys.argv[7], sys.argv[6].replace(" ", "/"), p["elapsed_s"]))
ph = p.get("phase_s", {})
with open(sys.argv[1] + ".phases", "a") as f:
    f.write("  [%s] %.3f s: %s\n" % (sys.argv[7], p["elapsed_s"], ", ".join("%s %.3f" % kv for kv in ph.items() if kv[1] >= 0.0005)))
PY
  }
  run_curl() {
    local mode=$1 l t0 t1 got dir
    dir=$out_root/curl.$n_run
    mkdir -p "$dir"
    sed "s|^output = \"$w/curl.out/|output = \"$dir/|" "$w/curl.cfg" > "$w/curl.run.cfg"
    prepare "$mode"
    l=$(load)
    local io0
    io0=$(disk_sectors)
    trace_start
    t0=$(now)
    /usr/bin/time -f '%U %S' -o "$w/time.txt" \
      curl --parallel --parallel-max 16 -sS --no-progress-meter --fail -K "$w/curl.run.cfg"
    t1=$(now)
    trace_stop "$t0" "$t1" "curl $mode"
    disk_delta "$io0" "$(disk_sectors)" > "$w/io"
    awk '{printf "cpu %.2f s (user %.2f, sys %.2f)", $1 + $2, $1, $2}' "$w/time.txt" > "$w/cpu"
    # exlr8d's bytes are on stable storage when it exits; curl's are not:
    # also note when they are (syncfs of the file system they are on).
    sync -f "$dir"
    t2=$(now)
    got=$(find "$dir" -type f -printf '%s\n' | paste -sd+ - | bc)
    [[ $got == "$curl_bytes" ]] || { echo "curl fetched $got bytes, expected $curl_bytes"; exit 1; }
    echo "curl $(echo "$t1 - $t0" | bc) $got - - - $curl_requests $mode/$cache_state ${l// //} -"
    echo "curl+sync $(echo "$t2 - $t0" | bc) $got - - - $curl_requests $mode/$cache_state ${l// //} -"
  }
  run_aria2() {
    local mode=$1 l t0 t1 got
    rm -rf "$w/aria.out"  # 58 files: no inode-scan effect worth noting
    prepare "$mode"
    l=$(load)
    t0=$(now)
    aria2c -i "$w/aria.list" -d "$w/aria.out" -x16 -s16 -j16 --file-allocation=none --allow-overwrite=true \
      --auto-file-renaming=false --console-log-level=warn --summary-interval=0 -q
    t1=$(now)
    got=$(find "$w/aria.out" -type f -printf '%s\n' | paste -sd+ - | bc)
    [[ $got == "$release_bytes" ]] || { echo "aria2c fetched $got bytes, expected $release_bytes"; exit 1; }
    rm -rf "$w/aria.out"
    echo "aria2c $(echo "$t1 - $t0" | bc) $got - - - $n_files $mode/$cache_state ${l// //} -"
  }

  : > "$w/rows"
  round() {  # round MODE I TOOL...
    local mode=$1 i=$2 t f
    shift 2
    local order=("$@")
    if ((i % 2 == 0)); then order=(); for ((k = $# ; k > 0; k--)); do order+=("${!k}"); done; fi
    for t in "${order[@]}"; do
      n_run=$((n_run + 1))
      "run_$t" "$mode" > "$w/row"
      cat "$w/row" >> "$w/rows"
      while read -r -a f; do
        printf '  %-9s %8.3f %12s %9s %9s %7s %8s %-12s %-15s %s\n' "${f[@]}"
      done < "$w/row"
    done
  }
  header() {
    printf '  %-9s %8s %12s %9s %9s %7s %8s %-12s %-15s %s\n' tool wall_s bytes resolves sim_res rss_kB requests \
      mode/cache load job_s
  }
  if [[ " $parts " == *" C "* ]]; then
    mapfile -t variants < <(printf '%s' "${VARIANTS:-}" | tr ';' '\n'; echo)  # keeps empty sets
    base_args=("${pull_args[@]}")
    tools=()
    for ((k = 0; k < ${#variants[@]}; k++)); do tools+=("v$k"); done
    tools+=(curl)
    [[ -n ${TMPFS:-} ]] && tools+=(tmpfs tmpfs-curl)
    : > "$w/ab"
    for mode in ${MODES:-warm cold}; do
      say "C: ${ROUNDS:-3} rounds, mode $mode"
      for ((i = 0; i < ${ROUNDS:-3}; i++)); do
        for ((k = 0; k < ${#tools[@]}; k++)); do
          t=${tools[$(((k + i) % ${#tools[@]}))]}  # rotate the order each round
          n_run=$((n_run + 1))
          out_root=$w/out
          pull_args=("${base_args[@]}")
          case $t in
            v*)
              label="exlr8d ${variants[${t#v}]:-(defaults)}"
              read -r -a extra <<< "${variants[${t#v}]}"
              exe=
              if [[ ${extra[0]:-} == BIN=* ]]; then exe=${extra[0]#BIN=}; extra=("${extra[@]:1}"); fi
              pull_args+=("${extra[@]}")
              ;;
            curl) label="curl" ;;
            tmpfs) label="exlr8d into $TMPFS"; exe=; out_root=$TMPFS/exlr8-pull-bench.$$ ;;
            tmpfs-curl) label="curl into $TMPFS"; out_root=$TMPFS/exlr8-pull-bench.$$ ;;
          esac
          mkdir -p "$out_root"
          if [[ $t == *curl ]]; then run_curl "$mode" > "$w/row"; else run_exlr8d "$mode" > "$w/row"; fi
          read -r -a f < "$w/row"
          printf '%s\t%s\t%s\n' "$mode" "$label" "${f[1]}" >> "$w/ab"
          printf '  %-6s %-44s %8.3f s  %s  [%s; %s]\n' "$mode" "$label" "${f[1]}" "$(tail -1 "$w/pull.json.phases" 2> /dev/null |
            sed 's/.*s: //; s/resolve [0-9.]*, list [0-9.]*, //')" "$(cat "$w/io")" "$(cat "$w/cpu")"
          [[ $t == v* || $t == tmpfs ]] && rm -rf "$out_root/exlr8d.$n_run"  # 48 files: cheap to delete
          [[ $out_root != "$w/out" ]] && rm -rf "$out_root"
          : > "$w/pull.json.phases"
        done
      done
    done
    say "C: results (wall time of the whole process; ratio = curl's median / the variant's median)"
    python3 - "$w/ab" << 'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    mode, label, t = line.rstrip("\n").split("\t")
    runs[(mode, label)].append(float(t))
for (mode, label), v in runs.items():
    c = runs.get((mode, "curl"))
    ratio = "  %.2fx curl" % (statistics.median(c) / statistics.median(v)) if c and not label.startswith("curl") else ""
    print("  %-6s %-44s median %.3f s  best %.3f s  (n=%d)%s" % (mode, label, statistics.median(v), min(v), len(v), ratio))
PY
  fi
  if [[ " $parts " == *" A "* ]]; then
    say "A: $runs rounds, mode cold: page cache dropped before each run (order alternates)"
    header
    cold_tools=(exlr8d curl)
    ((have_aria2)) && cold_tools+=(aria2)
    for ((i = 1; i <= runs; i++)); do round cold "$i" "${cold_tools[@]}"; done
    say "A: $warm_runs rounds, mode warm: page cache dropped, then the release read once (nginx serves from memory)"
    header
    for ((i = 1; i <= warm_runs; i++)); do round warm "$i" exlr8d curl; done

    say "A: where each exlr8d pull spent its time (phase_s of its summary)"
    cat "$w/pull.json.phases"
    say "A: results (best of the runs of each mode; wall time of the whole process)"
    python3 - "$w/rows" "$plan_bytes" "$release_bytes" "$n_files" << 'PY'
import sys
rows = [l.split() for l in open(sys.argv[1])]
plan, release, files = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
mb = lambda b, s: b / s / 1e6
def best(tool, mode):
    v = [float(r[1]) for r in rows if r[0] == tool and r[7].startswith(mode + "/")]
    return min(v) if v else None
def best_job(mode):
    v = [float(r[9]) for r in rows if r[0] == "exlr8d" and r[7].startswith(mode + "/")]
    return min(v) if v else None
requests = [r[6] for r in rows if r[0] == "curl"][0]
print("  1. throughput, TP 4 rank 1 of the home manifest (%d bytes, %s ranges):" % (plan, requests))
for mode in ("cold", "warm"):
    e, c = best("exlr8d", mode), best("curl", mode)
    if e is None or c is None: continue
    print("     [%s] exlr8d pull --jobs 16 (verified, durable, recorded) %6.3f s %7.1f MB/s (inside the job: %.3f s)"
          % (mode, e, mb(plan, e), best_job(mode)))
    cs = best("curl+sync", mode)
    print("     [%s] curl --parallel --parallel-max 16 (no checks)        %6.3f s %7.1f MB/s" % (mode, c, mb(plan, c)))
    print("     [%s]   ... until its bytes are on disk too (+ sync -f)     %6.3f s %7.1f MB/s" % (mode, cs, mb(plan, cs)))
    print("     [%s] ratio exlr8d/curl throughput: %.2fx (target >= 1.0x); against curl + sync: %.2fx" % (mode, c / e, cs / e))
e, a = best("exlr8d", "cold"), best("aria2c", "cold")
if e and a:
    print("  2. time until the rank is ready [cold] vs aria2c -x16 -s16 -j16 of the whole release (%d bytes, %d files):" % (release, files))
    print("     aria2c %.3f s (%.1f MB/s); time ratio aria2c/exlr8d %.2fx; byte ratio release/rank %.2fx (target: time ratio >= byte ratio)"
          % (a, mb(release, a), a / e, release / plan))
ex = [r for r in rows if r[0] == "exlr8d"]
print("  3. /resolve/ per pull: exlr8d summary %s, simulator counter %s, for %d files (target <= files + a few)"
      % ("/".join(sorted(set(r[3] for r in ex))), "/".join(sorted(set(r[4] for r in ex))), files))
print("     peak RSS of exlr8d pull: %d kB (max over runs)" % max(int(r[5]) for r in ex))
PY
  fi
  stop_hubsim
  stop_nginx
  rm -rf "$rel" "$w/out" "$w/aria.out"
fi

# ---------------------------------------------------------------- part B --
if [[ " $parts " == *" B "* ]]; then
  glm=$w/glm
  say "B: synthesize the GLM-5.3 geometry, index-only (sparse width files)"
  "$bin/exlr8" synth "$glm" --preset glm53 --index-only --seed 1 --quiet
  echo "  $(du -sh "$glm" | cut -f1) stored, $(du -sh --apparent-size "$glm" | cut -f1) apparent"
  # exlr8d refuses to start a pull that cannot fit on the disk (CheckSpace):
  # if home's share does not fit, use down1 (the same ~230,000 ranges, at
  # 2.25 instead of 3.25 bits), and say so.
  b_manifest=${B_MANIFEST:-home}
  t0=$(now)
  "$bin/exlr8" plan "$glm" --manifest "$b_manifest" --tp 4 --rank 1 --json > "$w/glm-plan.json"
  t1=$(now)
  need=$(python3 "$tool" get "$w/glm-plan.json" bytes)
  avail=$(( $(df -Pk "$w" | awk 'NR==2 {print $4}') * 1024 ))
  if (( avail < need + (2 << 30) )); then
    echo "  manifest $b_manifest needs $need bytes, $avail free: exlr8d would refuse (correctly); using down1"
    b_manifest=down1
    t0=$(now)
    "$bin/exlr8" plan "$glm" --manifest "$b_manifest" --tp 4 --rank 1 --json > "$w/glm-plan.json"
    t1=$(now)
  fi
  # B_JOBS: part B's --jobs; "auto" (the default) gives none: the adaptive
  # limit, which may grow to 128 transfers in flight, is what memory must bear.
  b_jobs=()
  [[ ${B_JOBS:-auto} != auto ]] && b_jobs=(--jobs "$B_JOBS")
  b_args=(--repo bench/pull --manifest "$b_manifest" --tp 4 --rank 1 "${b_jobs[@]}" "${pull_extra[@]}")
  python3 - "$w/glm-plan.json" "$(echo "$t1 - $t0" | bc)" << 'PY'
import json, sys
p = json.load(open(sys.argv[1])); t = p["totals"]
print("  plan of %s (exlr8 plan --json, from local files): %s s; %d bytes, %d requests, %d routed + %d shared halves, %d files"
      % (p["manifest"], sys.argv[2], p["bytes"], t["requests"], t["routed_halves"], t["shared_halves"], len(p["files"])))
PY
  start_nginx "$glm" on
  t0=$(now)
  start_hubsim "$glm" --unhashed 'experts/*.k?.safetensors'
  echo "  hub $hub up in $(echo "$(now) - $t0" | bc | cut -c1-5) s (width files listed unhashed); nginx logs \$msec"

  # find_pull PID: the exlr8d process among PID's descendants (breadth first).
  find_pull() {
    local pids=$1 p
    while [[ -n $pids ]]; do
      for p in ${pids//,/ }; do
        if [[ $(ps -o comm= -p "$p") == exlr8d ]]; then echo "$p"; return; fi
      done
      pids=$(pgrep -d, -P "$pids" || true)
    done
  }

  # pull_b LABEL: one bounded exlr8d pull under /usr/bin/time -v.
  pull_b() {
    local label=$1 max_gb=$2 grown t0 t1 rc=0 start_kb child
    : > "$w/ngx/access.log"
    start_kb=$(cache_kb)
    drop_caches
    local l
    l=$(load)
    t0=$(now)
    /usr/bin/time -v -o "$w/timev.txt" "${b_wrap[@]}" "$bin/exlr8d" pull "${b_args[@]}" --endpoint "$hub" --cache "$w/cache" \
      > "$w/pull-b.out" 2> "$w/pull-b.err" &
    local tp=$!
    local why="time limit ${b_seconds}s"
    while kill -0 "$tp" 2> /dev/null; do
      sleep 1
      grown=$(( $(cache_kb) - start_kb ))
      if (( grown > max_gb * 1024 * 1024 )); then why="cache grew ${max_gb} GB"; break; fi
      if (( $(echo "$(now) - $t0 > $b_seconds" | bc) )); then break; fi
      avail=$(df -Pk "$w" | awk 'NR==2 {print $4}')
      if (( avail < 5 * 1024 * 1024 )); then why="disk nearly full"; break; fi
    done
    t1=$(now)
    # SIGINT to the pull itself (the child of /usr/bin/time, or further down
    # under B_WRAP), which cancels.
    child=$(find_pull "$tp")
    if [[ -n $child ]]; then kill -INT "$child" 2> /dev/null || true; fi
    wait "$tp" || rc=$?
    sleep 1.5  # nginx flushes its log buffer every second
    echo "  [$label] stopped after $(echo "$t1 - $t0" | bc | cut -c1-5) s ($why), exit $rc, cache page state $cache_state, load $l"
    grep -hE "exlr8d pull: |in flight" "$w/pull-b.err" "$w/pull-b.out" | tail -3 | sed "s/^/    /"
    rss=$(awk -F: '/Maximum resident set size/ {gsub(/ /, "", $2); print $2}' "$w/timev.txt")
    python3 "$tool" half-log "$w/glm-plan.json" "$w/ngx/access.log" "$t0" > "$w/half.json"
    python3 - "$w/half.json" "$rss" << 'PY'
import json, sys
h = json.load(open(sys.argv[1])); rss = int(sys.argv[2])
print("    peak RSS %d kB = %.1f MB (target < 256 MB)" % (rss, rss / 1024))
print("    first half request %s s after start; %d half requests logged, %s halves/s from first to last; statuses %s"
      % (h["first_half_s"], h["half_requests"], h["half_requests_per_s"], h["statuses"]))
PY
    echo "    cache: $(du -sh "$w/cache" | cut -f1) on disk; $(df -h "$w" | awk 'NR==2 {print $4}') free"
  }
  say "B: exlr8d pull ${b_args[*]}, empty cache"
  pull_b "cold cache" "$b_max_gb_cold"
  say "B: again, index files / manifests / dense files / headers already verified in the cache"
  pull_b "metadata cached" "$b_max_gb"
  stop_hubsim
  stop_nginx
fi
say "done (work dir $w removed)"
