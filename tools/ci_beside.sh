#!/usr/bin/env bash
# What .ci/run checks beside the test suite, one after the other: the wheel as a user installs it
# (tools/wheel_check.sh), then the documentation site (tools/docs.sh). Both run even if the first fails.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
status=0
bash tools/wheel_check.sh || { echo "FAIL: the wheel check (above)" >&2; status=1; }
bash tools/docs.sh || { echo "FAIL: the documentation build (above)" >&2; status=1; }
echo "==> wheel check and docs took $((SECONDS - start)) s (beside the suite)"
exit "$status"
