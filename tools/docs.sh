#!/usr/bin/env bash
# Build the documentation site into docs/_build/html/ (open docs/_build/html/index.html), offline, with every
# warning an error (-W --keep-going) and every cross-reference checked (-n); the tutorials in examples/ run as part
# of the build (sphinx-gallery). Then run every `>>>` example of the rendered docstrings and pages (doctest
# builder), and check the built reference against the code (tests/docs/test_reference.py). Installs the `docs`
# extra only when Sphinx or one of its extensions is missing.
# Usage: bash tools/docs.sh [extra sphinx-build options]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
start=$SECONDS

if ! "$PY" -c 'import sphinx, furo, myst_parser, sphinx_gallery' >/dev/null 2>&1; then
  echo "==> installing the docs extra (Sphinx, furo, MyST, sphinx-gallery)"
  bash tools/setup.sh docs
fi

# The fastdata of this checkout (docs/conf.py puts it first on sys.path; the tutorials and doctests import it too).
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export MPLBACKEND=Agg  # the tutorials' charts are drawn without a display
# Sphinx reads the project's files in one process (-j1): two cores are better spent on the tutorials' workers.
opts=(-W --keep-going -n -q -d docs/_build/doctrees "$@")

status=0
"$PY" -m sphinx -b html "${opts[@]}" docs docs/_build/html || status=$?
echo "==> html: docs/_build/html/index.html after $((SECONDS - start)) s"
# The doctest builder reuses the html build's environment (same -d): only the examples run again.
"$PY" -m sphinx -b doctest "${opts[@]}" docs docs/_build/doctest || { [ "$status" -eq 0 ] && status=1; }
summary="$(sed -n '/^Doctest summary/,$p' docs/_build/doctest/output.txt | grep -E '^ *[0-9]+ (tests|failures in tests)$' \
  | tr -s ' ' | paste -sd, - || true)"
echo "==> doctests: ${summary:-none ran} (docs/_build/doctest/output.txt)"
# The reference against the code, now with the freshly built index (objects.inv) as well.
"$PY" -m pytest -q -p no:cacheprovider tests/docs/test_reference.py || { [ "$status" -eq 0 ] && status=1; }
echo "==> docs took $((SECONDS - start)) s"
exit "$status"
