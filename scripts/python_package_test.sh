#!/usr/bin/env bash
# The exlr8 Python package (python/): installed with pip into a throwaway
# virtual environment, then its tests (python/tests) against the real
# binaries: exlr8d-stage --memory host holders over a cache exlr8d pulled
# from exlr8-hubsim serving the shared fixture, exlr8d serve for the REST
# client, and holders written in the tests.
#
# Usage: scripts/python_package_test.sh BUILD_DIR FIXTURE_DIR [VENV_DIR]
#   BUILD_DIR holds bin/exlr8d, bin/exlr8d-stage and bin/exlr8-hubsim.
#   VENV_DIR (default BUILD_DIR/py-venv) is created afresh on each run with
#   python3 -m venv; pip installs ./python (no dependencies) and pytest and
#   xxhash from PyPI, and numpy if it can (its tests skip without it).
# Exit status: 0 passed, 1 a test failed, 77 skipped (no python3 or venv,
# or pip could not install pytest and xxhash: offline; ctest shows SKIP).
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 BUILD_DIR FIXTURE_DIR [VENV_DIR]" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
fixture=$2
venv=${3:-$build/py-venv}
here=$(cd "$(dirname "$0")/.." && pwd)

skip() {
  echo "SKIP: $*" >&2
  exit 77
}

for b in exlr8d exlr8d-stage exlr8-hubsim; do
  [[ -x $build/bin/$b ]] || { echo "python_package_test: $build/bin/$b is not executable" >&2; exit 1; }
done
[[ -d $fixture ]] || { echo "python_package_test: fixture $fixture missing" >&2; exit 1; }
command -v python3 >/dev/null || skip "python3 not found"

rm -rf "$venv"
python3 -m venv "$venv" || skip "python3 -m venv failed (install python3-venv)"
pip=("$venv/bin/pip" --disable-pip-version-check --quiet)
"${pip[@]}" install pytest xxhash || skip "pip could not install pytest and xxhash (offline?)"
"${pip[@]}" install numpy || echo "python_package_test: no numpy from PyPI; its tests skip"
# The package itself: what a user runs (pip install ./python), from a copy so
# that no build/ or egg-info lands in the source tree.
src=$(mktemp -d "${TMPDIR:-/tmp}/exlr8-py.XXXXXX")
trap 'rm -rf "$src"' EXIT
cp -r "$here/python/." "$src/"
# A build/ left in python/ by a manual pip run would be reused by setuptools
# (same mtimes after the copy), installing stale modules.
rm -rf "$src/build" "$src"/src/*.egg-info
"${pip[@]}" install "$src" || "${pip[@]}" install --no-build-isolation "$src" ||
  { echo "python_package_test: pip install ./python failed" >&2; exit 1; }
"$venv/bin/python" -c 'import exlr8, sys; assert "numpy" not in sys.modules and "torch" not in sys.modules'

cd "$src"  # the tests import the installed package, not python/src
EXLR8_BIN_DIR=$build/bin EXLR8_FIXTURE=$fixture EXLR8_SOURCE_DIR=$here \
  "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider tests
