#!/usr/bin/env bash
# Set everything up and run the whole test suite (this is what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh test,dali
status=0
python3 -m pytest -q "$@" || status=$?
if [ "$status" -eq 5 ]; then
  echo "FAIL: pytest collected no tests" >&2
fi
exit "$status"
