#!/usr/bin/env bash
# The wheel as a user gets it: install it into a fresh virtual environment outside the source tree (only the
# wheel and its PyPI dependencies, LD_LIBRARY_PATH unset) and run tools/wheel_smoke.py there: the native kernel
# active, every extension linking only the C library and the wheel's own fastdata.libs/, 50 images packed in both
# formats, read back with 2 workers and verified, `fastdata --version`.
# Usage: bash tools/wheel_check.sh [WHEEL]          (default: build one with tools/build_wheel.sh)
#        bash tools/wheel_check.sh --self-test      (the check must fail on a wheel missing a kernel or its libjpeg)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python3}"
TORCH_SPEC="${FASTDATA_TORCH_SPEC:-torch==2.13.0}"  # the CPU wheel this project's machines install

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS

wheel_env() {  # a fresh venv with torch and numpy: what every check below shares
  "$PY" -m venv "$work/venv"
  "$work/venv/bin/python" -m pip install -q --disable-pip-version-check "$TORCH_SPEC" >"$work/pip-torch.log" 2>&1 \
    || { tail -n 20 "$work/pip-torch.log" >&2; echo "ERROR: could not install $TORCH_SPEC into the venv" >&2; exit 1; }
}

check_wheel() {  # check_wheel WHEEL: install it (its dependencies from PyPI) and run the smoke program
  local wheel="$1" py="$work/venv/bin/python"
  "$py" -m pip uninstall -q -y fastdata >/dev/null 2>&1 || true
  "$py" -m pip install -q --disable-pip-version-check "$wheel" >"$work/pip.log" 2>&1 \
    || { tail -n 20 "$work/pip.log" >&2; echo "FAIL: pip install $(basename "$wheel")"; return 1; }
  rm -rf "$work/smoke" && mkdir "$work/smoke"
  cp "$repo/tools/wheel_smoke.py" "$work/smoke.py"
  # outside the repository, nothing of it on sys.path, no library path of ours
  (cd "$work/smoke" && env -u LD_LIBRARY_PATH -u PYTHONPATH "$py" -I "$work/smoke.py" "$work/smoke")
}

if [ "${1:-}" = "--self-test" ]; then
  bash "$repo/tools/build_wheel.sh" "$work/dist" >/dev/null
  wheel="$(ls "$work"/dist/fastdata-*.whl)"
  wheel_env
  status=0
  for broken in kernel lib; do
    mkdir -p "$work/$broken"
    "$PY" "$repo/tools/wheel_break.py" "$wheel" "$broken" "$work/$broken"
    if check_wheel "$(ls "$work/$broken"/*.whl)" >"$work/$broken.log" 2>&1; then
      echo "FAIL: the check passed a wheel without its $broken"; status=1
    else
      echo "ok:   the check fails a wheel without its $broken: $(grep -m1 FAIL "$work/$broken.log")"
    fi
  done
  exit "$status"
fi

if [ -n "${1:-}" ]; then
  wheel="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
else
  bash "$repo/tools/build_wheel.sh" "$work/dist"
  wheel="$(ls "$work"/dist/fastdata-*.whl)"
fi
echo "==> $(basename "$wheel"): $(du -h "$wheel" | cut -f1)"
wheel_env
check_wheel "$wheel"
echo "==> wheel check passed in $((SECONDS - start)) s"
