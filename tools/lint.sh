#!/usr/bin/env bash
# The checks a reviewer runs before reading: ruff (lint and format), and mypy over fastdata/ (pyproject.toml
# configures all three). Formatting must be clean. Lint and type findings are held to tools/lint_baseline.json,
# which only goes down: the run fails when either count grows, and says so when it fell (lower the baseline then).
# The goal is zero; the baseline records how far the code base is from it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
status=0
echo "==> ruff format --check"
"$PY" -m ruff format --check . || status=1
echo "==> ruff check"
ruff_count="$({ "$PY" -m ruff check --output-format json . || true; } | "$PY" -c 'import json, sys; print(len(json.load(sys.stdin)))')"
"$PY" -m ruff check --statistics . || true
echo "==> mypy (pyproject.toml [tool.mypy])"
mypy_out="$("$PY" -m mypy 2>&1 || true)"
echo "$mypy_out" | tail -n 1
mypy_count="$(echo "$mypy_out" | grep -c ': error: ' || true)"
"$PY" - "$ruff_count" "$mypy_count" <<'PYEOF' || status=1
import json, sys
found = {"ruff": int(sys.argv[1]), "mypy": int(sys.argv[2])}
baseline = json.load(open("tools/lint_baseline.json"))
bad = False
for tool, count in found.items():
    allowed = baseline[tool]
    print(f"{tool}: {count} findings (baseline {allowed})")
    if count > allowed:
        print(f"FAIL: {tool} has {count - allowed} new findings: fix them (`{tool}` lists them)")
        bad = True
    elif count < allowed:
        print(f"     {allowed - count} fewer than the baseline: lower it in tools/lint_baseline.json")
sys.exit(1 if bad else 0)
PYEOF
exit "$status"
