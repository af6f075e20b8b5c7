#!/usr/bin/env bash
# The GPU check in one command, for the first machine with a CUDA device: every test marked `cuda`, then the GPU
# benchmarks (bench/gpu.py prefetcher, policies, dali) on small sizes, all in under 8 minutes, written to ONE JSON
# (device, driver, versions, test counts and failures, numbers; assembled by tools/gpu_check_report.py). Run it where
# fastdata is set up (tools/setup.sh test,dali with a CUDA build of torch), or carry the missing packages as wheels in
# .whl/ (installed offline). Without a CUDA device it says so in one line and exits 0.
# Usage: bash tools/gpu_check.sh [--out FILE]     (default: bench/results/gpu-check-DATE.json)
# Time limits (worst case 45 + 180 + 50 + 90 + 90 s = 7.6 min): extensions build, tests, prefetcher, policies, dali.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
out="bench/results/gpu-check-$(date -u +%Y-%m-%d).json"
[ "${1:-}" = "--out" ] && out="$2"

if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "gpu_check: no CUDA device here (torch.cuda.is_available() is False): nothing to run"
  exit 0
fi
start=$SECONDS
# Wheels carried in .whl/ (the machine reaches no index: fastdata's dependencies, nvidia-dali) install offline.
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpu-check-site \
    .whl/*.whl && export PYTHONPATH="/tmp/gpu-check-site${PYTHONPATH:+:$PYTHONPATH}"
fi
# The C extensions are built for this Python if the ones here are for another (a build error is left to the tests).
if ! "$PY" -c 'import fastdata.loader._floatbatch' 2>/dev/null; then
  echo "==> building fastdata's extensions for $("$PY" -V)"
  timeout 45 "$PY" setup.py -q build_ext --inplace >/dev/null 2>&1 || echo "gpu_check: build_ext failed; tests will say what is missing"
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Only the files that hold cuda-marked tests are collected (a module whose imports fail elsewhere cannot stop the
# run), and a skip for another reason (say, no nvidia-dali there) is counted with its reason in the JSON, not fatal.
mapfile -t files < <(grep -rlE 'mark\.cuda|pytestmark.*cuda' tests --include='test_*.py' | sort)
echo "==> the CUDA tests (pytest -m cuda over ${#files[@]} files, at most 3 minutes)"
FASTDATA_ALLOW_SKIPS=1 timeout 180 "$PY" -m pytest -q -p no:cacheprovider -m cuda -rs --continue-on-collection-errors \
  --junitxml="$work/junit.xml" "${files[@]}" >"$work/pytest.log" 2>&1
echo "pytest exit $?" >>"$work/pytest.log"
tail -n 5 "$work/pytest.log"

bench() {  # bench NAME LIMIT ARGS...: one benchmark command, its JSON kept, its failure recorded, never fatal
  local name="$1" limit="$2"
  shift 2
  echo "==> bench/gpu.py $name (at most ${limit} s)"
  timeout "$limit" "$PY" bench/gpu.py "$name" "$@" --out "$work/$name.json" >"$work/$name.log" 2>&1 \
    || echo "exit $? after $((SECONDS - start)) s" >>"$work/$name.log"
  tail -n 2 "$work/$name.log"
}
bench prefetcher 50 --batch 256 --steps 30 --repeats 3
bench policies 90 --batch 128 --repeats 3
bench dali 90 --images 1024 --batch 128 --repeats 3

"$PY" tools/gpu_check_report.py "$work" "$out" "$((SECONDS - start))"
