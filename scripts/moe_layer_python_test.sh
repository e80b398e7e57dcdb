#!/usr/bin/env bash
# examples/moe_layer/moe_layer.py against the reference: a throwaway venv
# with the exlr8 package (pip install ./python) and numpy from PyPI, then
# moe_layer_test's Python case (every rank of the fixture held by
# exlr8d-stage in host memory; the weights from libexlr8client through
# ctypes, EXLR8CLIENT_LIBRARY).
#
# Usage: scripts/moe_layer_python_test.sh BUILD_DIR MOE_LAYER_TEST LIBEXLR8CLIENT [VENV_DIR]
# Exit status: 0 passed, 1 failed, 77 skipped (no python3 or venv, or pip
# could not install numpy: offline; ctest shows SKIP).
set -euo pipefail

if [[ $# -lt 3 ]]; then
  echo "usage: $0 BUILD_DIR MOE_LAYER_TEST LIBEXLR8CLIENT [VENV_DIR]" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
test_bin=$(realpath "$2")
library=$(realpath "$3")
venv=${4:-$build/moe-venv}
here=$(cd "$(dirname "$0")/.." && pwd)

skip() {
  echo "SKIP: $*" >&2
  exit 77
}

[[ -x $test_bin ]] || { echo "moe_layer_python_test: $test_bin is not executable" >&2; exit 1; }
[[ -f $library ]] || { echo "moe_layer_python_test: $library missing" >&2; exit 1; }
command -v python3 >/dev/null || skip "python3 not found"

rm -rf "$venv"
python3 -m venv "$venv" || skip "python3 -m venv failed (install python3-venv)"
pip=("$venv/bin/pip" --disable-pip-version-check --quiet)
"${pip[@]}" install numpy || skip "pip could not install numpy (offline?)"
src=$(mktemp -d "${TMPDIR:-/tmp}/exlr8-moe.XXXXXX")
trap 'rm -rf "$src"' EXIT
cp -r "$here/python/." "$src/"
"${pip[@]}" install "$src" || "${pip[@]}" install --no-build-isolation "$src" ||
  { echo "moe_layer_python_test: pip install ./python failed" >&2; exit 1; }

out=$(cd "$src" && EXLR8_MOE_PYTHON=$venv/bin/python EXLR8CLIENT_LIBRARY=$library \
  "$test_bin" --gtest_filter=MoeLayerTest.ThePythonExampleMatchesTheReference 2>&1) || { echo "$out"; exit 1; }
echo "$out"
# A skip would pass silently: the case must have run.
grep -q '\[  PASSED  \] 1 test' <<<"$out" && ! grep -q '\[  SKIPPED \]' <<<"$out" ||
  { echo "moe_layer_python_test: the Python case did not run" >&2; exit 1; }
