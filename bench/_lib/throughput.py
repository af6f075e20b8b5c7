#!/usr/bin/env python
"""The loader throughput comparison in one command.

Generates the realistic 10k-image ImageNet-like folder if it is missing (``tools/make_imagenet_like.py``),
then runs ``fastdata bench`` on it (every pipeline, round-robin, 3 repeats, warm page cache) and writes
``bench/results/loaders.json`` and ``bench/results/loaders.png``.

Usage::

    python bench/loaders.py throughput                      # the full comparison
    python bench/loaders.py throughput --cold --pipelines torch-pil fastdata-tfrecord --json
    bench/results/loaders-cold.json

Any flag it does not know is passed on to ``fastdata bench`` (see ``fastdata bench --help``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # works from a plain checkout too


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="other flags go to `fastdata bench`")
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "imagenet-like-10k", help="image folder")
    parser.add_argument("--num-images", type=int, default=10000, help="images to generate if --data is missing")
    parser.add_argument("--num-classes", type=int, default=100, help="classes to generate if --data is missing")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "loaders.json", help="results JSON")
    parser.add_argument(
        "--plot", type=Path, default=ROOT / "bench" / "results" / "loaders.png", help="results chart (PNG)"
    )
    args, bench_args = parser.parse_known_args(argv)
    if not args.data.is_dir() or not any(args.data.iterdir()):
        print(f"generating {args.num_images} ImageNet-like images in {args.data} ...", flush=True)
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "tools" / "make_imagenet_like.py"),
                str(args.data),
                "--num-images",
                str(args.num_images),
                "--num-classes",
                str(args.num_classes),
            ],
            check=True,
        )
    from fastdata.cli import main as fastdata_main

    return fastdata_main(["bench", str(args.data), "--json", str(args.json), "--plot", str(args.plot), *bench_args])


if __name__ == "__main__":
    sys.exit(main())
