#!/usr/bin/env bash
# The checks a reviewer runs before reading: ruff's formatter and linter over the tree, and mypy over fastdata/
# (pyproject.toml configures all three: [tool.ruff], [tool.mypy]). Each must report zero findings; a per-line
# exception (`# noqa: CODE - why`, `# type: ignore[code]  # why`) says why it is there.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
status=0
echo "==> ruff format --check"
"$PY" -m ruff format --check . || { echo "FAIL: run \`ruff format .\`" >&2; status=1; }
echo "==> ruff check"
"$PY" -m ruff check . || { echo "FAIL: ruff check found problems (above)" >&2; status=1; }
echo "==> mypy (pyproject.toml [tool.mypy])"
"$PY" -m mypy || { echo "FAIL: mypy found problems (above)" >&2; status=1; }
exit "$status"
