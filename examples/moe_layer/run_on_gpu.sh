#!/usr/bin/env bash
# The moe_layer examples on device memory, self-checking: the shared
# fixture served by exlr8-hubsim, every rank of TP 3 pulled by `exlr8d pull`
# and held on GPU 0 by `exlr8d-stage --memory device --lease v2 --hold`,
# then the C++ example (--memory device: the weights written into device
# memory by exlr8_lease_half_weights, the partial outputs by its kernels)
# and the Python example (torch on the lease's GPU) over the sockets, each
# compared with tests/examples/moe_reference (format/ on the release files).
#
# Usage: examples/moe_layer/run_on_gpu.sh BUILD_DIR
#   BUILD_DIR: a build tree configured with CUDA (bin/exlr8d, bin/exlr8d-stage,
#   bin/exlr8-hubsim, bin/moe_layer, tests/moe_reference,
#   client/exlr8client/libexlr8client.so); its bin/ is accepted too.
#   PYTHON (default /opt/torch/.venv/bin/python: torch + numpy) runs the
#   Python example with the package from python/src (EXLR8_PYTHONPATH=""
#   uses the one installed in PYTHON's environment instead); EXLR8_FIXTURE and
#   EXLR8_GOLDEN override the shared fixture's paths. MEMORY=host runs the
#   same steps on host-memory holders (no GPU needed: a check of this script).
# Exit status 0: both examples match the reference; else the failing step's.
set -euo pipefail

[[ $# -eq 1 ]] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
build=$(cd "$1" && pwd)
[[ -x $build/exlr8d && ! -x $build/bin/exlr8d ]] && build=$(cd "$build/.." && pwd)
here=$(cd "$(dirname "$0")/../.." && pwd)
fixture=${EXLR8_FIXTURE:-$here/../shared/fixtures/exlr8-tiny}
golden=${EXLR8_GOLDEN:-$here/../shared/fixtures/golden}
python=${PYTHON:-/opt/torch/.venv/bin/python}
memory=${MEMORY:-device}
case $memory in
  device) stage_memory=(--memory device --lease v2 --device 0) ;;
  host) stage_memory=(--memory host) ;;
  *) echo "run_on_gpu: MEMORY must be device or host" >&2; exit 2 ;;
esac
library=$build/client/exlr8client/libexlr8client.so
for f in bin/exlr8d bin/exlr8d-stage bin/exlr8-hubsim bin/moe_layer tests/moe_reference; do
  [[ -x $build/$f ]] || { echo "run_on_gpu: $build/$f is not built" >&2; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/moe-gpu.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

"$build/bin/exlr8-hubsim" --repo "exlr8/test=$fixture" --port-file "$work/ports" >"$work/hubsim.log" 2>&1 &
pids+=($!)
for _ in $(seq 300); do [[ -s $work/ports ]] && break; sleep 0.1; done
hub=$(tr ' ' '\n' <"$work/ports" | sed -n 's/^hub=//p')
[[ -n $hub ]] || { echo "run_on_gpu: exlr8-hubsim did not start" >&2; cat "$work/hubsim.log" >&2; exit 1; }

tp=3
socks=()
for r in $(seq 0 $((tp - 1))); do
  "$build/bin/exlr8d" pull --repo exlr8/test --manifest home --tp $tp --rank "$r" --endpoint "$hub" \
    --cache "$work/cache" --no-progress >"$work/pull$r.log" 2>&1 ||
    { echo "run_on_gpu: pull of rank $r failed" >&2; cat "$work/pull$r.log" >&2; exit 1; }
done
for r in $(seq 0 $((tp - 1))); do
  sock=$work/rank$r.sock
  "$build/bin/exlr8d-stage" --cache "$work/cache" --repo exlr8/test --manifest home --tp $tp --rank "$r" \
    "${stage_memory[@]}" --hold "$sock" --release-wait 20 >"$work/stage$r.log" 2>&1 &
  pids+=($!)
  socks+=("$sock")
done
for r in $(seq 0 $((tp - 1))); do
  for _ in $(seq 1200); do grep -q "holding:" "$work/stage$r.log" && break; sleep 0.1; done
  grep -q "holding:" "$work/stage$r.log" || { echo "run_on_gpu: rank $r not held" >&2; cat "$work/stage$r.log" >&2; exit 1; }
done

reference() {  # reference LAYER OUT
  "$build/tests/moe_reference" --release "$fixture" --manifest home --layer "$1" --seed 7 --golden "$golden" \
    --compare "$2"
}
status=0
for layer in 3 4; do
  echo "== C++ example, $memory memory, layer $layer"
  "$build/bin/moe_layer" --memory "$memory" --layer $layer --seed 7 --out "$work/cpp$layer.f32" "${socks[@]}"
  reference $layer "$work/cpp$layer.f32" || status=1
done
if [[ -x $python ]]; then
  echo "== Python example, $memory memory, layer 3"
  PYTHONPATH=${EXLR8_PYTHONPATH-$here/python/src} "$python" -c 'import exlr8; print("exlr8 from", exlr8.__file__)'
  PYTHONPATH=${EXLR8_PYTHONPATH-$here/python/src} EXLR8CLIENT_LIBRARY=$library \
    "$python" "$here/examples/moe_layer/moe_layer.py" --layer 3 --seed 7 --out "$work/py3.f32" "${socks[@]}"
  reference 3 "$work/py3.f32" || status=1
else
  echo "run_on_gpu: $python not found: the Python example did not run" >&2
  status=1
fi
[[ $status -eq 0 ]] && echo "run_on_gpu: PASS ($memory memory: C++ layers 3 and 4, Python layer 3)" ||
  echo "run_on_gpu: FAIL" >&2
exit $status
