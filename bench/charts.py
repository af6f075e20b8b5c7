#!/usr/bin/env python
"""What do the results say at a glance? The charts of bench/results/*.json, redrawn from the JSON files (every other
entry point draws its chart itself when it writes its JSON)."""

from _lib.dispatch import run

COMMANDS = {
    "redraw": ("charts_redraw.py", "one PNG per results JSON, beside it or in --out (e.g. docs/_static/bench)"),
}

if __name__ == "__main__":
    run("charts.py", __doc__, COMMANDS)
