#!/bin/bash
# A stand-in for `exlr8d-stage --hold SOCKET --state-dir DIR`, for the tests
# of exlr8d serve's stage routes on machines without a GPU. It speaks only
# the holder's side of daemon/stage/stage_state.h: it locks DIR/holder.lock
# for its life (writing its pid there), reports "reading", then "holding"
# with a lease path, and on SIGTERM "releasing", then "released" (SIGUSR1:
# see the trap). It reports what it holds as the real one does for its
# --lease (v2: "memory", "regions" and in device memory the GPU's UUID as
# "device"; v1: the GPU's name as "device"), and the options it was given
# as "args": memory, lease, device and check ("-" when not given).
# EXLR8_FAKE_HOLDER_PARK=STEP: stays in STEP (e.g. "hashing") instead of
# going on to "holding". The real holder runs in
# tests/daemon/serve_stages_test.cpp (host memory everywhere, device memory
# where there is a GPU).
set -u
dir="" hold="" memory="-" lease="-" device="-" check="-"
while [ $# -gt 0 ]; do
  case "$1" in
    --state-dir) dir=$2; shift 2 ;;
    --hold) hold=$2; shift 2 ;;
    --memory) memory=$2; shift 2 ;;
    --lease) lease=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --check) check=$2; shift 2 ;;
    *) shift ;;
  esac
done
[ -n "$dir" ] || { echo "fake holder: no --state-dir" >&2; exit 2; }
exec 9>"$dir/holder.lock"
# A reader's probe may hold a shared lock for an instant: wait that out.
flock -w 2 9 || { echo "fake holder: $dir/holder.lock is taken" >&2; exit 7; }
echo $$ >&9
state() {
  printf '{"state":"%s","pid":%d,"updated":%s%s}\n' "$1" $$ "$(date +%s%3N)" "${2:-}" >"$dir/state.json.tmp" &&
    mv "$dir/state.json.tmp" "$dir/state.json"
}
state reading
park=${EXLR8_FAKE_HOLDER_PARK:-}
if [ -n "$park" ]; then
  trap 'state released ",\"stopped_while\":\"'"$park"'\",\"exit_status\":130"; exit 130' TERM
  state "$park" ",\"done_bytes\":1,\"total_bytes\":2"
  while :; do
    sleep 0.1 9>&- &
    wait $!
  done
fi
trap 'state releasing ",\"lessees\":[]"; state released; echo released; exit 0' TERM
# SIGUSR1: let go of the lock, then exit 3 half a second later. That is the
# moment of every holder's death, widened: the kernel drops a dying
# process's locks before its parent can reap it.
trap 'exec 9>&-; sleep 0.5; exit 3' USR1
# hf_token_set: whether the server passed its hub token on (it must not).
token=0
[ -n "${HF_TOKEN:-}${HUGGING_FACE_HUB_TOKEN:-}${HF_TOKEN_PATH:-}" ] && token=1
held=",\"device\":\"NVIDIA Fake\""
if [ "$lease" != v1 ]; then
  held=",\"memory\":\"$memory\",\"regions\":7"
  [ "$memory" = device ] && held="$held,\"device\":\"GPU-00000000-1111-2222-3333-444444444444\""
fi
args=",\"args\":[\"$memory\",\"$lease\",\"$device\",\"$check\"]"
state holding ",\"lease\":\"$hold\",\"bytes\":123$held,\"upload_gb_per_s\":1.5,\"hf_token_set\":$token$args,\"lessees\":[]"
echo "holding: the rank is leased on $hold"
# The sleeps must not inherit the lock: a holder killed with -9 lets go at once.
while :; do
  sleep 0.1 9>&- &
  wait $!
done
