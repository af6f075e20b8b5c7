#!/usr/bin/env python
"""Redraw the benchmark charts from the results JSON files already written: one PNG beside each JSON (or in --out).

Usage::

    python bench/charts.py redraw                            # every bench/results/*.json
    python bench/charts.py redraw --out docs/_static/bench   # the copies the documentation shows
    python bench/charts.py redraw bench/results/kernel.json  # one file
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # fastdata from this checkout, for the loader chart

from charts import RESULTS, chart  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python bench/charts.py redraw", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("files", nargs="*", type=Path, help="results JSON files (default: bench/results/*.json)")
    parser.add_argument("--out", type=Path, default=None, help="folder for the PNGs (default: beside each JSON)")
    args = parser.parse_args(argv)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    for source in args.files or sorted(RESULTS.glob("*.json")):
        png = chart(source, args.out)
        print(f"{source}: {png if png else 'no chart for this file'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
