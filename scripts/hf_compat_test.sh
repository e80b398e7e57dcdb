#!/usr/bin/env bash
# Runs the real huggingface_hub client against exlr8-hubsim.
#
# Usage: scripts/hf_compat_test.sh EXLR8_HUBSIM_BIN FIXTURE_DIR [VENV_DIR]
#   VENV_DIR defaults to ${TMPDIR:-/tmp}/exlr8-hf-venv and is reused between
#   runs; it is created with python3 -m venv and `pip install huggingface_hub`
#   (from PyPI) when it lacks the package.
# Exit status: 0 all checks passed, 1 a check failed or the simulator did not
# start, 77 skipped (no python3/venv, or pip could not install and python3
# has no huggingface_hub of its own; ctest shows SKIP).
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 EXLR8_HUBSIM_BIN FIXTURE_DIR [VENV_DIR]" >&2
  exit 2
fi
bin=$1
fixture=$2
venv=${3:-${TMPDIR:-/tmp}/exlr8-hf-venv}
here=$(cd "$(dirname "$0")/.." && pwd)
repo_id=exlr8/tiny
token=hf_exlr8_compat_token

skip() {
  echo "SKIP: $*" >&2
  exit 77
}

[[ -x $bin ]] || { echo "hf_compat_test: $bin is not executable" >&2; exit 1; }
[[ -d $fixture ]] || { echo "hf_compat_test: fixture $fixture missing" >&2; exit 1; }
command -v python3 >/dev/null || skip "python3 not found"

# The client: the venv's, made from PyPI when missing; where PyPI cannot be
# reached (the device machine), a huggingface_hub the system python3
# already has; else skip.
py=$venv/bin/python
if ! "$py" -c 'import huggingface_hub' 2>/dev/null; then
  echo "hf_compat_test: creating $venv and installing huggingface_hub from PyPI"
  if python3 -m venv "$venv" &&
     "$venv/bin/pip" install --quiet --disable-pip-version-check huggingface_hub; then
    :
  elif python3 -c 'import huggingface_hub' 2>/dev/null; then
    py=python3
    echo "hf_compat_test: no PyPI; using the system's huggingface_hub" \
      "$(python3 -c 'import huggingface_hub; print(huggingface_hub.__version__)')"
  else
    skip "pip could not install huggingface_hub (offline?), and python3 has none"
  fi
fi
echo "hf_compat_test: huggingface_hub $("$py" -c 'import huggingface_hub; print(huggingface_hub.__version__)')"

work=$(mktemp -d "${TMPDIR:-/tmp}/exlr8-hf-compat.XXXXXX")
pid=""
cleanup() {
  if [[ -n $pid ]]; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

"$bin" --repo "$repo_id=$fixture" --port-file "$work/ports" --token "$token" \
  --tree-page-size 5 --seed 1 >"$work/hubsim.log" 2>&1 &
pid=$!
for _ in $(seq 1 200); do
  [[ -s $work/ports ]] && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/hubsim.log" >&2; echo "hf_compat_test: exlr8-hubsim exited" >&2; exit 1; }
  sleep 0.05
done
[[ -s $work/ports ]] || { echo "hf_compat_test: no port file after 10 s" >&2; exit 1; }
read -r hub_kv cdn_kv <"$work/ports"
hub=${hub_kv#hub=}
echo "hf_compat_test: simulator at $hub (${cdn_kv#cdn=})"

HF_ENDPOINT=$hub HF_TOKEN=$token HF_HOME=$work/hf-home \
  HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_DISABLE_PROGRESS_BARS=1 HF_HUB_DISABLE_XET=1 \
  HF_HUB_ETAG_TIMEOUT=30 HF_HUB_DOWNLOAD_TIMEOUT=30 NO_PROXY='*' no_proxy='*' \
  "$py" "$here/tests/hubsim/hf_compat_test.py" "$repo_id" "$fixture"
