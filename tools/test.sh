#!/usr/bin/env bash
# Set everything up, then the lint and type checks and the whole test suite (this is what CI runs).
#
# The suite keeps about one of the two cores busy on average (/usr/bin/time: 107% CPU over 23 minutes), so the
# lint and type checks run beside it, on the other core, and their report is printed after the suite's. CI puts
# more there: FASTDATA_BESIDE_TESTS, a command run after the lint (.ci/run: the wheel check, then the docs build),
# whose output follows the lint's and whose failure fails this script.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh test,dali,dev,docs
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
(
  lint=0
  bash tools/lint.sh >"$logs/lint.log" 2>&1 || lint=$?
  echo "$lint" >"$logs/lint.status"
  if [ -n "${FASTDATA_BESIDE_TESTS:-}" ]; then
    beside=0
    bash -c "$FASTDATA_BESIDE_TESTS" >"$logs/beside.log" 2>&1 || beside=$?
    echo "$beside" >"$logs/beside.status"
  fi
) &
side=$!
tests=0
python3 -m pytest -q "$@" || tests=$?
if [ "$tests" -eq 5 ]; then  # pytest's own code for "no tests ran"
  echo "FAIL: pytest collected no tests" >&2
fi
wait "$side" || true
cat "$logs/lint.log"
if [ "$(cat "$logs/lint.status" 2>/dev/null || echo 1)" -ne 0 ]; then
  echo "FAIL: tools/lint.sh found problems (above)" >&2
  [ "$tests" -eq 0 ] && tests=1
fi
if [ -n "${FASTDATA_BESIDE_TESTS:-}" ]; then
  cat "$logs/beside.log"
  if [ "$(cat "$logs/beside.status" 2>/dev/null || echo 1)" -ne 0 ]; then
    echo "FAIL: $FASTDATA_BESIDE_TESTS (above)" >&2
    [ "$tests" -eq 0 ] && tests=1
  fi
fi
exit "$tests"
