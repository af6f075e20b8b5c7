#!/usr/bin/env python
"""Threads in one process against worker processes: uint8 batches per second and total PSS.

An ImageNet-like folder (made if missing) is packed as TFRecord with pack's defaults (JPEGs re-coded with restart
intervals; ``--keep-bytes`` stores the originals). Then, for each N in ``--threads``, two loaders of the same dataset
(``RandomResizedCrop(224)``, batch 256, ``fast_collate``, persistent workers) read full passes:

- ``threads-N``: ``ShardDataset(..., decode_threads=N)`` with ``num_workers=0`` (one process, N decoding threads);
- ``workers-N``: ``decode_threads=1`` with ``num_workers=N`` (N worker processes).

Each measurement runs in a fresh process (one warm-up pass, then one timed pass), alternating the loaders for
``--repeats`` rounds. The table gives, per N, the median images/s (and range) and the peak PSS of that process and
its workers (psutil, summed) for both, and their ratios. N above the usable CPUs is skipped.

Usage::

    python bench/loaders.py threads                          # 1,000 images, N = 1, 2, 4, 3 rounds: about 2-4 minutes
    python bench/loaders.py threads --images 3000 --threads 1,2,4,8 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from imagenet_like import make_images  # noqa: E402 (a neighbour in bench/_lib, on sys.path)

from fastdata.bench.measure import MemorySampler, run_isolated  # noqa: E402
from fastdata.datasets.shard_dataset import ShardDataset  # noqa: E402
from fastdata.loader.collate import fast_collate  # noqa: E402
from fastdata.loader.dataloader import DataLoaderX  # noqa: E402
from fastdata.packing.packer import pack  # noqa: E402
from fastdata.transforms import RandomResizedCrop  # noqa: E402


def _prepare(data_dir: Path, images: int, keep_bytes: bool) -> Path:
    folder = data_dir / f"imagenet-like-{images}"
    if not (folder.is_dir() and any(folder.iterdir())):
        make_images(folder, images, "imagenet", 100)
    packed = data_dir / f"imagenet-like-{images}-{'keep-bytes' if keep_bytes else 'default'}-tfrecord"
    if not (packed / "manifest.json").is_file():
        pack(folder, packed, format="tfrecord", progress=False, overwrite=True, keep_bytes=keep_bytes)
    return packed


def _measure(root: Path, threads: int, workers: int) -> tuple[float, float | None]:
    """In a fresh process: a warm-up pass, then (images/s, peak PSS MB of the process and its workers) of one pass."""
    dataset = ShardDataset(root, transform=RandomResizedCrop(224), decode_threads=threads)
    loader = DataLoaderX(
        dataset, 256, shuffle=True, num_workers=workers, collate_fn=fast_collate, persistent_workers=workers > 0
    )
    with MemorySampler(interval=0.1) as memory:
        for _passes in range(2):
            start, count = time.perf_counter(), 0
            for images, _ in loader:
                count += images.shape[0]
        rate = count / (time.perf_counter() - start)
    return rate, memory.peak_pss_mb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data")
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--threads", default="1,2,4", help="comma-separated N")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep-bytes", action="store_true", help="pack the source JPEGs unchanged")
    args = parser.parse_args(argv)
    root = _prepare(args.data_dir, args.images, args.keep_bytes)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    counts = [n for n in (int(v) for v in args.threads.split(",")) if n <= usable]
    configs = {}
    for n in counts:
        configs[f"threads-{n}"] = (n, 0)
        configs[f"workers-{n}"] = (1, n)
    rates: dict[str, list[float]] = {name: [] for name in configs}
    pss: dict[str, float] = {}
    for _ in range(args.repeats):
        for name, (threads, workers) in configs.items():
            rate, peak = run_isolated(_measure, root, threads, workers)
            rates[name].append(rate)
            pss[name] = max(pss.get(name, 0.0), peak or 0.0)
    print(
        f"{args.images} ImageNet-like images ({'keep-bytes' if args.keep_bytes else 'default'} pack, TFRecord), "
        f"RandomResizedCrop(224), batch 256, uint8, median of {args.repeats} passes (range); {usable} usable CPUs"
    )
    print(
        f"{'N':>3} | {'threads img/s':>22} {'PSS MB':>7} | {'workers img/s':>22} {'PSS MB':>7} | "
        f"{'img/s t/w':>9} {'PSS t/w':>8}"
    )
    for n in counts:
        t, w = rates[f"threads-{n}"], rates[f"workers-{n}"]
        tm, wm = statistics.median(t), statistics.median(w)
        tp, wp = pss[f"threads-{n}"], pss[f"workers-{n}"]
        print(
            f"{n:>3} | {tm:>7.0f} ({min(t):>5.0f}-{max(t):>5.0f}) {tp:>7.0f} | {wm:>7.0f} ({min(w):>5.0f}-"
            f"{max(w):>5.0f}) {wp:>7.0f} | {tm / wm:>9.2f} {tp / wp if wp else float('nan'):>8.2f}"
        )
    print(
        "threads: ShardDataset(decode_threads=N), num_workers=0; workers: decode_threads=1, num_workers=N; "
        "PSS: peak of the process and its workers"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
