#!/usr/bin/env python
"""Packing throughput of the engines: ``--engine local`` (process pool) against ``--engine ray`` (one Ray task
per range) with the same number of CPUs, on the same images; and the per-core rate a cluster projection uses.

Generates ``--num-images`` photo-like JPEGs (640x480 by default) once, then packs them with each engine,
alternating, ``--repeats`` times per configuration: the source bytes stored unchanged (what a pack of JPEGs
does by default: read + validate = a full decode per image), and with ``--max-side 256`` (decode, resize and
re-encode: the heavy case). Ray is started once (``ray.init(num_cpus=CPUS)``, its start time reported
apart), and every engine's output is checked to be byte-identical to the local engine's.

Usage::

    python bench/pack.py engines                      # 2,000 images, 2 CPUs, 3 repeats
    python bench/pack.py engines --num-images 500 --repeats 1      # a quick check

Prints a table (median images/s, min-max), the Ray/local ratios, the per-core rate and the ImageNet-21k
projection; ``--json`` writes the numbers. Needs the ``ray`` extra. Not a test: wants the machine to itself.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # works from a plain checkout too

IMAGENET_21K = 14_197_122  # images in the ImageNet-21k (fall 2011) release
CLUSTER = (16, 32)  # nodes x cores for the projection


def make_images(root: Path, count: int, width: int, height: int) -> None:
    """``count`` photo-like JPEGs (smooth colour fields + texture), in 10 class folders."""
    import cv2
    import numpy as np

    rng = np.random.default_rng(0)
    for i in range(count):
        folder = root / f"c{i % 10}"
        folder.mkdir(parents=True, exist_ok=True)
        small = rng.integers(0, 255, (height // 16, width // 16, 3), dtype=np.uint8)
        image = cv2.resize(small, (width, height), interpolation=cv2.INTER_CUBIC)
        image = cv2.add(image, rng.integers(0, 40, image.shape, dtype=np.uint8))
        cv2.imwrite(str(folder / f"{i:06d}.jpg"), image, [cv2.IMWRITE_JPEG_QUALITY, 90])


def files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir())}


def run(src: Path, work: Path, engine: str, cpus: int, options: dict) -> tuple[float, dict[str, bytes]]:
    from fastdata.packing.packer import pack

    out = work / f"out-{engine}"
    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    manifest = pack(src, out, format="tfrecord", engine=engine, workers=cpus, progress=False, **options)
    seconds = time.perf_counter() - started
    return manifest.num_samples / seconds, files(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-images", type=int, default=2000)
    parser.add_argument("--size", default="640x480", help="WxH of the generated JPEGs")
    parser.add_argument("--cpus", type=int, default=2, help="local workers = Ray CPUs (default 2)")
    parser.add_argument("--range-size", type=int, default=100, help="samples per range (one Ray task each)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    import ray

    width, height = (int(x) for x in args.size.split("x"))
    work = Path(tempfile.mkdtemp(prefix="fastdata-pack-engines-"))
    try:
        src = work / "src"
        make_images(src, args.num_images, width, height)
        started = time.perf_counter()
        ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
        ray_start = time.perf_counter() - started
        configs = {"stored": {}, "max-side-256": {"max_side": 256}}
        rates: dict[str, dict[str, list[float]]] = {c: {"local": [], "ray": []} for c in configs}
        for name, extra in configs.items():
            options = {"range_size": args.range_size, "samples_per_shard": 500, **extra}
            for _ in range(args.repeats):
                reference = None
                for engine in ("local", "ray"):
                    rate, written = run(src, work, engine, args.cpus, options)
                    rates[name][engine].append(rate)
                    reference = reference or written
                    assert written == reference, f"{engine} wrote other bytes than the local engine ({name})"
        ray.shutdown()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(
        f"{args.num_images} JPEGs {args.size}, {args.cpus} CPUs, range size {args.range_size}, "
        f"{args.repeats} repeat(s); Ray started in {ray_start:.1f} s (not counted)"
    )
    print(f"{'config':<14}{'engine':<8}{'images/s (median)':>20}{'min-max':>18}{'vs local':>10}")
    result = {"images": args.num_images, "size": args.size, "cpus": args.cpus, "ray_start_s": ray_start, "configs": {}}
    for name, by_engine in rates.items():
        local = statistics.median(by_engine["local"])
        for engine, values in by_engine.items():
            median = statistics.median(values)
            print(
                f"{name:<14}{engine:<8}{median:>20.0f}{f'{min(values):.0f}-{max(values):.0f}':>18}"
                f"{median / local:>9.2f}x"
            )
        per_core = local / args.cpus
        cores = CLUSTER[0] * CLUSTER[1]
        hours = IMAGENET_21K / (per_core * cores) / 3600
        result["configs"][name] = {"rates": by_engine, "per_core": per_core, "projection_hours": hours}
        print(
            f"{name:<14}per core {per_core:.0f} images/s -> ImageNet-21k ({IMAGENET_21K / 1e6:.1f}M) on "
            f"{CLUSTER[0]} nodes x {CLUSTER[1]} cores: {hours * 60:.0f} min at this per-core rate"
        )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
