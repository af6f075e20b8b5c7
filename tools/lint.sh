#!/usr/bin/env bash
# The checks a reviewer runs before reading: ruff (lint and format), and mypy over fastdata/ (pyproject.toml
# configures all three). Each prints what it checked and what it found; the script fails on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
status=0
echo "==> ruff check"
"$PY" -m ruff check --statistics . || status=1
echo "==> ruff format --check"
"$PY" -m ruff format --check . || status=1
echo "==> mypy (pyproject.toml [tool.mypy])"
"$PY" -m mypy || status=1
exit "$status"
