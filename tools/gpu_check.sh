#!/usr/bin/env bash
# The GPU check in one command, for the first machine with a CUDA device: every test marked `cuda`, then the GPU
# benchmarks (bench/gpu.py prefetcher, policies, dali) on small sizes, all in under 8 minutes, written to ONE JSON
# (device, driver, versions, test counts and failures, numbers). Run it where fastdata is set up (tools/setup.sh
# test,dali with a CUDA build of torch). Without a CUDA device it says so in one line and exits 0.
# Usage: bash tools/gpu_check.sh [--out FILE]     (default: bench/results/gpu-check-DATE.json)
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
out="bench/results/gpu-check-$(date -u +%Y-%m-%d).json"
[ "${1:-}" = "--out" ] && out="$2"

if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "gpu_check: no CUDA device here (torch.cuda.is_available() is False): nothing to run"
  exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
start=$SECONDS

echo "==> the CUDA tests (pytest -m cuda, at most 4 minutes)"
timeout 240 "$PY" -m pytest -q -p no:cacheprovider -m cuda --junitxml="$work/junit.xml" tests \
  >"$work/pytest.log" 2>&1
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
bench prefetcher 60 --batch 256 --steps 30 --repeats 3
bench policies 120 --batch 128 --repeats 3
bench dali 120 --images 1024 --batch 128 --repeats 3

"$PY" - "$work" "$out" "$((SECONDS - start))" <<'PYEOF'
import json, platform, subprocess, sys, xml.etree.ElementTree as ET
from pathlib import Path
import torch

work, out, seconds = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
def smi(field):
    try:
        done = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30)
        return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired):
        return None
try:
    import nvidia.dali as dali
    dali_version = dali.__version__
except ImportError:
    dali_version = None
tests = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0, "failing": []}
junit = work / "junit.xml"
if junit.exists():
    for case in ET.parse(junit).getroot().iter("testcase"):
        ident = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        if "failure" in kinds or "error" in kinds:
            tests["failed" if "failure" in kinds else "errors"] += 1
            tests["failing"].append(ident)
        elif "skipped" in kinds:
            tests["skipped"] += 1
        else:
            tests["passed"] += 1
else:
    tests["failing"].append("pytest wrote no report: " + (work / "pytest.log").read_text()[-500:])
benchmarks = {}
for name in ("prefetcher", "policies", "dali"):
    path = work / f"{name}.json"
    log = work / f"{name}.log"
    benchmarks[name] = json.loads(path.read_text()) if path.exists() else {
        "error": log.read_text()[-800:] if log.exists() else "did not run"}
report = {
    "device": torch.cuda.get_device_name(),
    "capability": list(torch.cuda.get_device_capability()),
    "driver": smi("driver_version"),
    "memory_total": smi("memory.total"),
    "cuda": torch.version.cuda,
    "torch": torch.__version__,
    "dali": dali_version,
    "python": platform.python_version(),
    "seconds": seconds,
    "tests": tests,
    "benchmarks": benchmarks,
}
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text(json.dumps(report, indent=1) + "\n")
print(f"==> {out}: {report['device']}, driver {report['driver']}; cuda tests {tests['passed']} passed, "
      f"{tests['failed'] + tests['errors']} failed, {tests['skipped']} skipped; {seconds} s")
PYEOF
