#!/usr/bin/env python
"""What reading a manifest of many shards costs: ``Manifest.load(compact=True)`` of a synthetic manifest.

Each round, in a fresh process per measurement, alternating: the column-at-a-time check (what fastdata does) and the
entry-at-a-time walk it falls back to for a bad entry (what every load did before). Reports the JSON parse and the
check separately (wall s) and the process's peak RSS (MB). The manifest is written with every optional field (an LMDB
pack's sidecar fields), ``indent=2`` as ``fastdata pack`` writes it, to a temporary folder.

Usage::

    python bench/scale.py manifest [--shards 1000000] [--rounds 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import json, resource, sys, time
from fastdata.formats import manifest
from fastdata.formats.manifest_validation import parse_json
if sys.argv[2] == "walk":
    manifest.shard_columns = lambda entries, fields: None  # the walk every load took before
path = sys.argv[1]
start = time.perf_counter()
data = parse_json(open(path, "rb").read(), path)
parsed = time.perf_counter()
table = manifest.Manifest.from_dict(data, source=path, compact=True).shards
done = time.perf_counter()
assert len(table) == int(sys.argv[3])
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"parse_s": parsed - start, "check_s": done - parsed, "peak_mb": peak}))
"""


def write_manifest(path: Path, shards: int) -> None:
    entries = [
        {
            "path": f"shard-{k:07d}.lmdb",
            "num_samples": 1000,
            "nbytes": 110_000_000 + k,
            "crc32c": f"{k * 2654435761 % 2**32:08x}",
            "index": f"shard-{k:07d}.loc",
            "index_nbytes": 16_000,
            "index_crc32c": f"{k:08x}",
            "meta_crc32c": f"{~k % 2**32:08x}",
            "transcoded": 1000,
        }
        for k in range(shards)
    ]
    data = {"version": 1, "format": "lmdb", "classes": ["a"], "shards": entries, "num_samples": 1000 * shards}
    path.write_text(json.dumps(data, indent=2, sort_keys=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"columns": [], "walk": []}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "manifest.json"
        write_manifest(path, args.shards)
        print(f"{args.shards:,} shards: manifest.json of {path.stat().st_size / 1e6:.0f} MB")
        for r in range(args.rounds):
            for mode in ("columns", "walk") if r % 2 == 0 else ("walk", "columns"):
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, str(path), mode, str(args.shards)],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                runs[mode].append(json.loads(out))
                print(f"round {r + 1} {mode:7s} {runs[mode][-1]}", flush=True)
    from fastdata.bench.machine import machine_info

    result: dict[str, object] = {"machine": machine_info(), "shards": args.shards, "rounds": args.rounds, "loads": runs}
    for mode, rows in runs.items():
        for key in ("parse_s", "check_s", "peak_mb"):
            result[f"{mode}_{key}"] = statistics.median(row[key] for row in rows)
    speedups = [w["check_s"] / c["check_s"] for w, c in zip(runs["walk"], runs["columns"], strict=True)]
    result["check_speedup_range"] = [min(speedups), max(speedups)]
    print(
        f"check: columns {result['columns_check_s']:.2f} s, walk {result['walk_check_s']:.2f} s "
        f"({min(speedups):.1f}-{max(speedups):.1f}x); parse {result['columns_parse_s']:.2f} s; "
        f"peak RSS columns {result['columns_peak_mb']:.0f} MB, walk {result['walk_peak_mb']:.0f} MB"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
