"""The entry points' shared front door: ``python bench/ENTRY.py COMMAND [ARGS]`` runs ``bench/_lib/FILE.py`` as if it
had been started itself, with ``ARGS`` (and ``--help`` lists the commands, then each command's own ``--help``)."""

from __future__ import annotations

import runpy
import sys
import time
from pathlib import Path

LIB = Path(__file__).resolve().parent


def run(entry: str, doc: str, commands: dict[str, tuple[str, str]]) -> None:
    """Dispatch ``sys.argv[1]`` to its script; ``commands`` maps a name to (script in bench/_lib, one-line summary)."""
    argv = sys.argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        width = max(map(len, commands))
        listing = "\n".join(f"  {name.ljust(width)}  {summary}" for name, (_, summary) in commands.items())
        print(f"{doc.strip()}\n\nusage: python bench/{entry} COMMAND [--help | ARGS]\n\ncommands:\n{listing}")
        sys.exit(0 if argv else 2)
    name, rest = argv[0], argv[1:]
    if name not in commands:
        sys.exit(f"bench/{entry}: no command {name!r}; choose one of: {', '.join(commands)}")
    script = LIB / commands[name][0]
    sys.argv = [f"bench/{entry} {name}", *rest]
    sys.path.insert(0, str(LIB))  # the scripts import their neighbours by name
    started = time.time()
    try:
        runpy.run_path(str(script), run_name="__main__")
    finally:  # a script ends with sys.exit too: its results JSON still gets its chart
        if "--help" not in rest and "-h" not in rest:
            from charts import chart_new_results

            chart_new_results(started, argv=rest)
