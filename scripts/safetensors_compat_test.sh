#!/usr/bin/env bash
# Releases written by Hugging Face's safetensors library, read by exlr8.
#
# Every other test reads releases that exlr8's own writer (or the fixture's)
# laid out. This one writes them again with the real library
# (scripts/safetensors_rewrite.py: `__metadata__` first, tensors sorted by
# dtype and name, no pads, halves moved and the index mapped to them) and
# requires that nothing exlr8 reports changes:
#   1. the shared fixture, rewritten, against the reference loader's golden
#      output (golden_test with EXLR8_GOLDEN_RELEASE): every half's tiles bit
#      for bit, every dense matrix;
#   2. `exlr8 verify` of it, and pulls of random ranks of it through
#      exlr8-hubsim with faults on, the cache byte for byte equal to it
#      (release_sweep.py --release);
#   3. synthesized releases of random geometry and dtypes, rewritten, pulled
#      and checked the same way (release_sweep.py --rewrite).
#
# Usage: scripts/safetensors_compat_test.sh BUILD_DIR GOLDEN_TEST_BIN FIXTURE_DIR [VENV_DIR]
#   BUILD_DIR holds bin/exlr8, bin/exlr8d and bin/exlr8-hubsim. VENV_DIR
#   defaults to ${TMPDIR:-/tmp}/exlr8-st-venv and is reused between runs; it
#   is created with python3 -m venv and `pip install safetensors` (PyPI)
#   when it lacks the package.
# Exit status: 0 all checks passed, 1 a check failed, 77 skipped (no
# python3/venv, or pip could not install and python3 has no safetensors of
# its own; ctest shows SKIP).
set -euo pipefail

if [[ $# -lt 3 ]]; then
  echo "usage: $0 BUILD_DIR GOLDEN_TEST_BIN FIXTURE_DIR [VENV_DIR]" >&2
  exit 2
fi
build=$1
golden_test=$2
fixture=$3
venv=${4:-${TMPDIR:-/tmp}/exlr8-st-venv}
here=$(cd "$(dirname "$0")/.." && pwd)
# The version the test was written against; the rewrite also speaks the API
# of older ones, should a system python3 have one.
pin=safetensors==0.8.0

skip() {
  echo "SKIP: $*" >&2
  exit 77
}

for b in exlr8 exlr8d exlr8-hubsim; do
  [[ -x $build/bin/$b ]] || { echo "safetensors_compat_test: $build/bin/$b is not executable" >&2; exit 1; }
done
[[ -x $golden_test ]] || { echo "safetensors_compat_test: $golden_test is not executable" >&2; exit 1; }
[[ -d $fixture ]] || { echo "safetensors_compat_test: fixture $fixture missing" >&2; exit 1; }
command -v python3 >/dev/null || skip "python3 not found"

py=$venv/bin/python
if ! "$py" -c 'import safetensors' 2>/dev/null; then
  echo "safetensors_compat_test: creating $venv and installing $pin from PyPI"
  if python3 -m venv "$venv" &&
     "$venv/bin/pip" install --quiet --disable-pip-version-check "$pin"; then
    :
  elif python3 -c 'import safetensors' 2>/dev/null; then
    py=python3
    echo "safetensors_compat_test: no PyPI; using the system's safetensors"
  else
    skip "pip could not install $pin (offline?), and python3 has none"
  fi
fi
echo "safetensors_compat_test: safetensors $("$py" -c 'import safetensors; print(safetensors.__version__)')"

work=$(mktemp -d "${TMPDIR:-/tmp}/exlr8-st-compat.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "== the fixture, written again by safetensors"
"$py" "$here/scripts/safetensors_rewrite.py" "$fixture" "$work/tiny"
# The rewrite must have moved the halves, or the checks below would only
# read the fixture's layout again.
if cmp -s "$fixture/experts/exlr8-layer-003.k2.safetensors" "$work/tiny/experts/exlr8-layer-003.k2.safetensors"; then
  echo "safetensors_compat_test: the rewritten width file is identical to the fixture's" >&2
  exit 1
fi

echo "== against the reference loader's output"
EXLR8_GOLDEN_RELEASE=$work/tiny "$golden_test" --gtest_brief=1

echo "== pulled from the simulator, with faults"
python3 "$here/scripts/release_sweep.py" --build "$build" --release "$work/tiny" --rounds 3 --seed 1 --faults

echo "== synthesized releases, written again by safetensors"
python3 "$here/scripts/release_sweep.py" --build "$build" --rewrite "$py" --rounds 6 --seed 1 --faults

echo "safetensors_compat_test: all checks passed"
