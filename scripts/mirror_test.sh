#!/usr/bin/env bash
# The Hugging Face mirror of deploy/nginx/hf-mirror.conf, tested: the hub
# simulator behind TLS (nginx terminating TLS for its hub as
# "huggingface.co" on 127.0.0.3 and for its CDN as "cdn.hubsim.test" on
# 127.0.0.4, certificates of a CA made here), the shipped mirror config on
# 127.0.0.5 (templated only for addresses, ports, paths, the CA and the
# simulated CDN's allowlist entry), and exlr8d nodes that know nothing but
# `--endpoint https://MIRROR`.
#
# Wave 1: four nodes pull ranks 0, 0, 1 and 2 of TP 4 at once. Each node's
# bytes must match the release exactly (and `exlr8d verify` pass), and the
# bytes the simulator's CDN served must be <= 1.1x the union of the three
# distinct ranks' plans. Wave 2: four new nodes, the same ranks: 0 bytes
# from the CDN. Prints the measured ratios.
#
# Usage: scripts/mirror_test.sh BIN_DIR
#   BIN_DIR holds exlr8, exlr8d and exlr8-hubsim. nginx: $EXLR8_NGINX, else
#   .tools/nginx (scripts/setup.sh), else /usr/sbin/nginx. MIRROR_SLICE=16k
#   overrides the slice size (to measure others); MIRROR_KEEP=1 keeps the
#   work directory.
# Exit status: 0 passed, 1 failed, 77 skipped (no nginx with the slice
# module, no openssl or python3; ctest shows SKIP).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
bin=$(cd "${1:?usage: $0 BIN_DIR}" && pwd)
skip() {
  echo "SKIP: $*" >&2
  exit 77
}
fail() {
  echo "mirror_test: FAIL: $*" >&2
  exit 1
}

nginx=
for c in "${EXLR8_NGINX:-}" "$here/.tools/nginx/usr/sbin/nginx" /usr/sbin/nginx /usr/local/sbin/nginx; do
  [[ -n $c && -x $c ]] && { nginx=$c; break; }
done
[[ -n $nginx ]] || skip "needs nginx (scripts/setup.sh unpacks Debian's under .tools/nginx)"
"$nginx" -V 2>&1 | grep -q -- --with-http_slice_module || skip "$nginx lacks the slice module (ngx_http_slice_module)"
"$nginx" -V 2>&1 | grep -q -- --with-http_ssl_module || skip "$nginx lacks the SSL module"
command -v openssl > /dev/null || skip "needs the openssl tool"
command -v python3 > /dev/null || skip "needs python3"
for b in exlr8 exlr8d exlr8-hubsim; do [[ -x $bin/$b ]] || fail "$bin/$b is not built"; done

w=$(mktemp -d "${TMPDIR:-/tmp}/exlr8-mirror-test.XXXXXX")
chmod 755 "$w"  # nginx workers may run as another user
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2> /dev/null || true; done
  if [[ ${MIRROR_KEEP:-0} == 1 ]]; then
    echo "mirror_test: kept $w"
  else  # nginx's workers may still be closing cache files
    for _ in 1 2 3 4 5; do rm -rf "$w" 2> /dev/null && break; sleep 0.5; done
  fi
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket, sys; s = socket.socket(); s.bind((sys.argv[1], 0)); print(s.getsockname()[1])' "$1"
}
wait_port() {  # wait_port ADDR PORT WHAT LOG
  for _ in $(seq 200); do
    python3 -c 'import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 0.2)' "$1" "$2" \
      2> /dev/null && return 0
    sleep 0.05
  done
  fail "$3 did not start on $1:$2: $(cat "$4" 2> /dev/null)"
}

# A release of about 470 MB whose halves are near GLM-5.3's (hidden 4096:
# 128-256 KiB each), a rank's plan 70 MB, 50 MB of it halves.
repo=exlr8/mirror
rel=$w/release
"$bin/exlr8" synth "$rel" --seed 29 --hidden 4096 --halves 16 --experts 8 --moe-layers 0-1 \
  --dense-layers none --vocab 512 > /dev/null

# The test CA, and one certificate of it for every TLS server here.
pki=$w/pki
mkdir -p "$pki"
(
  cd "$pki"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=exlr8-mirror-test-ca \
    -keyout ca-key.pem -out ca.pem
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=exlr8-mirror-test \
    -keyout key.pem -out req.pem
  printf 'subjectAltName=DNS:huggingface.co,DNS:cdn.hubsim.test,IP:127.0.0.5\n' > ext.cnf
  openssl x509 -req -in req.pem -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 2 -extfile ext.cnf -out cert.pem
) > "$w/openssl.log" 2>&1 || fail "openssl: $(cat "$w/openssl.log")"

# The simulator: every file an LFS file, so every byte a node gets comes
# from the CDN; small tree pages, so listings follow the Link header.
token=hf_exlr8_mirror_token
"$bin/exlr8-hubsim" --repo "$repo=$rel" --hub 127.0.0.1:0 --cdn 127.0.0.2:0 --port-file "$w/sim.ports" \
  --token "$token" --lfs-threshold 1 --tree-page-size 10 > "$w/sim.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do [[ -s $w/sim.ports ]] && break; sleep 0.05; done
[[ -s $w/sim.ports ]] || fail "the simulator did not start: $(cat "$w/sim.log")"
read -r sim_hub sim_cdn < <(sed -e 's/hub=//' -e 's/cdn=//' "$w/sim.ports")

common_http() {  # the parts of an nginx.conf around a server's include
  local d=$1
  cat << EOF
daemon off;
worker_processes 2;
$([[ $(id -u) == 0 ]] && echo 'user root root;')
pid $d/nginx.pid;
error_log $d/error.log warn;
events { worker_connections 1024; }
http {
  default_type application/octet-stream;
  client_body_temp_path $d/client_body;
  proxy_temp_path $d/proxy;
  fastcgi_temp_path $d/fastcgi;
  uwsgi_temp_path $d/uwsgi;
  scgi_temp_path $d/scgi;
  log_format m '\$server_port \$status \$upstream_cache_status "\$http_range" \$body_bytes_sent "\$request_uri"';
  access_log $d/access.log m;
EOF
}

# "The internet": the simulator's hub as https://huggingface.co and its CDN
# as https://cdn.hubsim.test, as the real ones look to a mirror.
front_hub=$(free_port 127.0.0.3)
front_cdn=$(free_port 127.0.0.4)
fd=$w/front
mkdir -p "$fd"
{
  common_http "$fd"
  cat << EOF
  ssl_certificate $pki/cert.pem;
  ssl_certificate_key $pki/key.pem;
  map \$upstream_http_link \$front_link {
    default \$upstream_http_link;
    "~^<http://[^/]+(?<rest>/.*)\$" "<https://huggingface.co\$rest";
  }
  server {
    listen 127.0.0.3:$front_hub ssl http2;
    location / {
      proxy_pass $sim_hub;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_redirect $sim_cdn/ https://cdn.hubsim.test/;
      proxy_hide_header Link;
      add_header Link \$front_link always;
    }
  }
  server {
    listen 127.0.0.4:$front_cdn ssl http2;
    location / {
      proxy_pass $sim_cdn;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
EOF
} > "$fd/nginx.conf"
"$nginx" -p "$fd/" -c "$fd/nginx.conf" -e "$fd/error.log" > "$fd/stdout.log" 2>&1 &
pids+=($!)
wait_port 127.0.0.3 "$front_hub" "the front nginx" "$fd/error.log"
wait_port 127.0.0.4 "$front_cdn" "the front nginx" "$fd/error.log"

# The mirror: the shipped config, templated.
mirror_hub=$(free_port 127.0.0.5)
mirror_cdn=$(free_port 127.0.0.5)
md=$w/mirror
mkdir -p "$md/cache"
shipped=$here/deploy/nginx/hf-mirror.conf
template() {  # template FROM TO: replace a fixed string, which must be there
  grep -qF -- "$1" "$md/hf-mirror.conf" || fail "$shipped no longer has '$1' (update this test's template)"
  python3 -c 'import sys; p, a, b = sys.argv[1:]; s = open(p).read(); open(p, "w").write(s.replace(a, b))' \
    "$md/hf-mirror.conf" "$1" "$2"
}
cp "$shipped" "$md/hf-mirror.conf"
template /var/cache/nginx/hf-mirror "$md/cache"
template /etc/nginx/hf-mirror/ "$pki/"
template /etc/ssl/certs/ca-certificates.crt "$pki/ca.pem"
template "listen 443 " "listen 127.0.0.5:$mirror_hub "
template "listen 8443 " "listen 127.0.0.5:$mirror_cdn "
# shellcheck disable=SC2016 # nginx's $host, not the shell's
template 'https://$host:8443/' "https://\$host:$mirror_cdn/"
template "server huggingface.co:443;" "server 127.0.0.3:$front_hub;"
template "    cdn-lfs.huggingface.co   hf_cdn_lfs;" "    cdn-lfs.huggingface.co   hf_cdn_lfs;
    cdn.hubsim.test          hf_cdn_hubsim;"
printf 'upstream hf_cdn_hubsim {\n    server 127.0.0.4:%s;\n    keepalive 32;\n}\n' "$front_cdn" >> "$md/hf-mirror.conf"
[[ -n ${MIRROR_SLICE:-} ]] && template "slice 32k;" "slice $MIRROR_SLICE;"
slice=$(sed -n 's/^ *slice \([^;]*\);/\1/p' "$md/hf-mirror.conf")
# The shipped names still resolve in its upstreams: point them at nothing
# reachable here (the test has no DNS), as a host file would.
for h in cdn-lfs.huggingface.co cdn-lfs.hf.co cdn-lfs-us-1.hf.co cdn-lfs-eu-1.hf.co cas-bridge.xethub.hf.co; do
  template "server $h:443;" "server 127.0.0.9:9;"
done
{
  common_http "$md"
  echo "  include $md/hf-mirror.conf;"
  echo "}"
} > "$md/nginx.conf"
"$nginx" -t -p "$md/" -c "$md/nginx.conf" -e "$md/error.log" > "$md/check.log" 2>&1 ||
  fail "nginx refuses the shipped config: $(cat "$md/check.log")"
"$nginx" -p "$md/" -c "$md/nginx.conf" -e "$md/error.log" > "$md/stdout.log" 2>&1 &
pids+=($!)
wait_port 127.0.0.5 "$mirror_hub" "the mirror" "$md/error.log"
wait_port 127.0.0.5 "$mirror_cdn" "the mirror" "$md/error.log"
endpoint=https://127.0.0.5:$mirror_hub

stats() { python3 -c 'import json, sys, urllib.request
s = json.load(urllib.request.urlopen(sys.argv[1] + "/_sim/stats"))
print(s["cdn"]["bytes_served"], s["cdn"]["with_authorization"], s["signed_urls_issued"])' "$sim_hub"; }

# The plans: bytes of each rank, and of the union of ranks 0, 1 and 2.
for r in 0 1 2; do "$bin/exlr8" plan "$rel" --manifest home --tp 4 --rank $r --json > "$w/plan$r.json"; done
read -r union plan0 plan1 plan2 < <(python3 - "$w"/plan{0,1,2}.json << 'EOF'
import json, sys
spans, totals = {}, []
for p in sys.argv[1:]:
    plan = json.load(open(p))
    t = 0
    for f in plan["files"]:
        for a, b in f["requests"]:
            spans.setdefault(f["path"], []).append((a, b))
            t += b
    totals.append(t)
union = 0
for rs in spans.values():
    end = -1
    for a, n in sorted(rs):
        lo, hi = max(a, end), a + n
        if hi > lo: union += hi - lo
        end = max(end, hi)
print(union, *totals)
EOF
)

# A wave: four nodes pull ranks 0, 0, 1 and 2 at once, through the mirror
# alone; every one must succeed, `exlr8d verify` must pass and its bytes
# must equal the release's at every range of its plan.
wave() {
  local n=$1 i r rc=0 wpids=()
  local ranks=(0 0 1 2)
  for i in 0 1 2 3; do
    r=${ranks[$i]}
    HF_TOKEN=$token CURL_CA_BUNDLE=$pki/ca.pem "$bin/exlr8d" pull --repo "$repo" --manifest home --tp 4 --rank "$r" \
      --endpoint "$endpoint" --cache "$w/node$n.$i" --no-progress --json > "$w/pull$n.$i.json" 2> "$w/pull$n.$i.err" &
    wpids+=($!)
  done
  for i in 0 1 2 3; do
    wait "${wpids[$i]}" || {
      echo "node $n.$i (rank ${ranks[$i]}) failed:" >&2
      cat "$w/pull$n.$i.err" >&2
      rc=1
    }
  done
  ((rc == 0)) || fail "a pull of wave $n failed; mirror: $(tail -5 "$md/error.log")"
  for i in 0 1 2 3; do
    "$bin/exlr8d" verify --cache "$w/node$n.$i" --check-only > "$w/verify$n.$i.log" 2>&1 ||
      fail "exlr8d verify of node $n.$i: $(cat "$w/verify$n.$i.log")"
    python3 - "$rel" "$w/node$n.$i/$repo" "$w/plan${ranks[$i]}.json" << 'EOF' || fail "node $n.$i's bytes differ"
import json, os, sys
rel, cache, plan = sys.argv[1], sys.argv[2], json.load(open(sys.argv[3]))
(commit,) = os.listdir(cache)
for f in plan["files"]:
    with open(os.path.join(rel, f["path"]), "rb") as a, open(os.path.join(cache, commit, f["path"]), "rb") as b:
        for off, n in f["requests"]:
            a.seek(off); b.seek(off)
            if a.read(n) != b.read(n):
                sys.exit(f"{f['path']} [{off}, +{n}) differs from the release")
EOF
  done
}

read -r cdn0 auth0 signed0 < <(stats)
t0=$(date +%s.%N)
wave 1
t1=$(date +%s.%N)
read -r cdn1 _ signed1 < <(stats)
wave 2
t2=$(date +%s.%N)
read -r cdn2 auth2 signed2 < <(stats)

# Upstream answers are checked. While the CDN ignores Range (a 200 with the
# whole file) or answers a 206 whose Content-Range is off by one, a range
# through the mirror is the right bytes or an error, never other bytes, and
# nothing of the bad answer is cached: once the CDN is right again the same
# range is fetched from it again and is right. The ranges are inside rank
# 3's halves, which no node pulled.
command -v curl > /dev/null || fail "needs curl"
"$bin/exlr8" plan "$rel" --manifest home --tp 4 --rank 3 --json > "$w/plan3.json"
mapfile -t probes < <(python3 - "$w"/plan{3,0,1,2}.json << 'EOF'
import json, sys
plans = [json.load(open(p)) for p in sys.argv[1:]]
taken = {}
for plan in plans[1:]:
    for f in plan["files"]:
        taken.setdefault(f["path"], []).extend(f["requests"])
found = []
for f in plans[0]["files"]:
    runs = []  # rank 3's adjacent ranges (halves) merged
    for a, n in sorted(f["requests"]):
        if runs and runs[-1][1] == a:
            runs[-1][1] = a + n
        else:
            runs.append([a, a + n])
    for a, e in runs:
        m = (a + e) // 2 // 4096 * 4096
        if all(b + k <= m - 131072 or b >= m + 4096 + 131072 for b, k in taken.get(f["path"], [])):
            taken.setdefault(f["path"], []).append((m, 4096))  # the next probe far from this one
            found.append(f"{f['path']} {m}")
            if len(found) == 2:
                print("\n".join(found))
                sys.exit(0)
sys.exit("no two ranges of rank 3 far from ranks 0-2")
EOF
)
((${#probes[@]} == 2)) || fail "found no ranges to probe the mirror's checks with"
curl_m() { curl -s --cacert "$pki/ca.pem" "$@"; }
faults() { curl -s -o /dev/null -X POST --data "$1" "$sim_hub/_sim/faults" || fail "cannot set the simulator's faults"; }
sim_stat() { python3 -c 'import json, sys, urllib.request
s = json.load(urllib.request.urlopen(sys.argv[1] + "/_sim/stats"))
print(s["cdn"]["bytes_served"] if sys.argv[2] == "bytes" else s["faults"][sys.argv[2]])' "$sim_hub" "$1"; }
# A CDN host outside the allowlist is refused: the mirror is no open proxy.
code=$(curl_m -o /dev/null -w '%{http_code}' "https://127.0.0.5:$mirror_cdn/_cdn/127.0.0.4:$front_cdn/$repo/x" || true)
[[ $code == 403 ]] || fail "the mirror answered $code, not 403, for a CDN host outside its allowlist"
i=0
for fault in ignore_range wrong_content_range; do
  read -r probe_path probe_off <<< "${probes[$i]}"
  i=$((i + 1))
  probe_end=$((probe_off + 4095))
  probe_url=$(curl_m -o /dev/null -I -w '%{redirect_url}' -H "Authorization: Bearer $token" \
    "$endpoint/$repo/resolve/main/$probe_path")
  [[ $probe_url == "https://127.0.0.5:$mirror_cdn/_cdn/cdn.hubsim.test/"* ]] ||
    fail "the mirror's /resolve/ redirect of $probe_path is '$probe_url', not to its CDN port"
  python3 -c 'import sys; f = open(sys.argv[1], "rb"); f.seek(int(sys.argv[2])); sys.stdout.buffer.write(f.read(4096))' \
    "$rel/$probe_path" "$probe_off" > "$w/probe.want"
  injected=$(sim_stat "$fault")
  faults "{\"$fault\":1,\"hosts\":\"cdn\"}"
  code=$(curl_m -o "$w/probe.got" -r "$probe_off-$probe_end" -w '%{http_code}' "$probe_url" || true)
  faults '{"hosts":"cdn"}'
  (($(sim_stat "$fault") > injected)) || fail "the simulator's CDN injected no $fault"
  if [[ $code == 206 ]] && cmp -s "$w/probe.got" "$w/probe.want"; then
    outcome="the right bytes"
  elif [[ $code == 206 || $code == 200 ]]; then
    fail "with the CDN's fault $fault the mirror answered $code with other bytes"
  else
    outcome="no range (${code:-no answer})"
  fi
  before=$(sim_stat bytes)
  code=$(curl_m -o "$w/probe.got" -r "$probe_off-$probe_end" -w '%{http_code}' "$probe_url" || true)
  if [[ $code != 206 ]] || ! cmp -s "$w/probe.got" "$w/probe.want"; then
    fail "after the CDN's $fault the mirror answered $code and other bytes: it cached a bad answer"
  fi
  (($(sim_stat bytes) > before)) || fail "after the CDN's $fault the mirror answered from its cache: it kept a bad answer"
  echo "mirror_test: the CDN's $fault: the mirror gave $outcome and cached none of it"
done

up1=$((cdn1 - cdn0))
up2=$((cdn2 - cdn1))
delivered=$((2 * plan0 + plan1 + plan2))
hits=$(grep -c " HIT " "$md/access.log" || true)
python3 - "$slice" "$up1" "$up2" "$union" "$delivered" "$t0" "$t1" "$t2" "$hits" << 'EOF'
import sys
slice_, up1, up2, union, delivered = sys.argv[1], *map(int, sys.argv[2:6])
t0, t1, t2 = map(float, sys.argv[6:9])
print(f"mirror_test: slice {slice_}; union of the plans of ranks 0, 1, 2: {union:,} B; "
      f"delivered per wave: {delivered:,} B")
print(f"mirror_test: wave 1: upstream CDN {up1:,} B = {up1 / union:.3f}x the union "
      f"({up1 / delivered:.3f}x delivered), {t1 - t0:.1f} s")
print(f"mirror_test: wave 2: upstream CDN {up2:,} B = {up2 / union:.3f}x the union, {t2 - t1:.1f} s; "
      f"mirror cache HIT lines {sys.argv[9]}")
EOF
((auth2 - auth0 == 0)) || fail "the CDN got $((auth2 - auth0)) requests with an Authorization header"
((signed1 > signed0 && signed2 > signed1)) || fail "the hub signed no CDN URL in a wave: the CDN was not used"
python3 -c 'import sys; sys.exit(0 if int(sys.argv[1]) <= 1.1 * int(sys.argv[2]) else 1)' "$up1" "$union" ||
  fail "wave 1 took $up1 B from the CDN, more than 1.1x the union of the plans ($union B)"
((up1 >= union)) || fail "wave 1 took $up1 B from the CDN, less than the union of the plans ($union B)"
((up2 == 0)) || fail "wave 2 took $up2 B from the CDN; a warm mirror must serve every byte"
echo "mirror_test: passed"
