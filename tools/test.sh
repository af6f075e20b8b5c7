#!/usr/bin/env bash
# Set everything up, then the lint and type checks and the whole test suite (this is what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh test,dali,dev,docs
lint=0
bash tools/lint.sh || lint=$?
tests=0
python3 -m pytest -q "$@" || tests=$?
if [ "$tests" -eq 5 ]; then  # pytest's own code for "no tests ran"
  echo "FAIL: pytest collected no tests" >&2
fi
if [ "$lint" -ne 0 ]; then
  echo "FAIL: tools/lint.sh found problems (above)" >&2
  [ "$tests" -eq 0 ] && tests=1
fi
exit "$tests"
