#!/usr/bin/env python
"""Threads in one process against worker processes: uint8 batches per second and total PSS.

An ImageNet-like folder (made if missing) is transcoded with ``jpegtran -optimize -restart 1B`` (``--restart none``
keeps the originals) and packed as TFRecord. Then, for each N in ``--threads``, two loaders of the same dataset
(``RandomResizedCrop(224)``, batch 256, ``fast_collate``, persistent workers) read full passes:

- ``threads-N``: ``ShardDataset(..., decode_threads=N)`` with ``num_workers=0`` (one process, N decoding threads);
- ``workers-N``: ``decode_threads=1`` with ``num_workers=N`` (N worker processes).

Each measurement runs in a fresh process (one warm-up pass, then one timed pass), alternating the loaders for
``--repeats`` rounds; the median images/s and the peak PSS of that process and its workers (psutil) are printed.

Usage::

    python bench/batch_threads.py                          # 1,000 images, N = 1, 2, 4
    python bench/batch_threads.py --images 3000 --threads 1,2,4,8 --repeats 5
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fastdata.bench.measure import MemorySampler, run_isolated  # noqa: E402
from fastdata.dataset import ShardDataset  # noqa: E402
from fastdata.loader.collate import fast_collate  # noqa: E402
from fastdata.loader.dataloader import DataLoaderX  # noqa: E402
from fastdata.packing.packer import pack  # noqa: E402
from fastdata.transforms import RandomResizedCrop  # noqa: E402


def _prepare(data_dir: Path, images: int, restart: str) -> Path:
    folder = data_dir / f"imagenet-like-{images}"
    if not (folder.is_dir() and any(folder.iterdir())):
        subprocess.run([sys.executable, str(ROOT / "tools" / "make_imagenet_like.py"), str(folder), "--num-images",
                        str(images), "--num-classes", "100", "--profile", "imagenet", "--quiet"], check=True)
    packed = data_dir / f"imagenet-like-{images}-restart-{restart}-tfrecord"
    if (packed / "manifest.json").is_file():
        return packed
    source = folder
    if restart != "none":
        source = data_dir / f"imagenet-like-{images}-restart-{restart}"
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            target = source / path.relative_to(folder)
            target.parent.mkdir(parents=True, exist_ok=True)
            data = path.read_bytes()
            if data[:3] == b"\xff\xd8\xff":
                data = subprocess.run(["jpegtran", "-optimize", "-restart", restart], input=data,
                                      capture_output=True, check=True).stdout
            target.write_bytes(data)
    pack(source, packed, format="tfrecord", progress=False, overwrite=True)
    return packed


def _measure(root: Path, threads: int, workers: int) -> tuple[float, float | None]:
    """In a fresh process: a warm-up pass, then (images/s, peak PSS MB of the process and its workers) of one pass."""
    dataset = ShardDataset(root, transform=RandomResizedCrop(224), decode_threads=threads)
    loader = DataLoaderX(dataset, 256, shuffle=True, num_workers=workers, collate_fn=fast_collate,
                         persistent_workers=workers > 0)
    with MemorySampler(interval=0.1) as memory:
        for passes in range(2):
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
    parser.add_argument("--restart", default="1B", help="jpegtran -restart value, or none")
    args = parser.parse_args(argv)
    if args.restart != "none" and shutil.which("jpegtran") is None:
        sys.exit("jpegtran is missing: apt-get install libjpeg-turbo-progs")
    root = _prepare(args.data_dir, args.images, args.restart)
    configs = {}
    for n in (int(v) for v in args.threads.split(",")):
        configs[f"threads-{n}"] = (n, 0)
        configs[f"workers-{n}"] = (1, n)
    rates: dict[str, list[float]] = {name: [] for name in configs}
    pss: dict[str, float] = {}
    for _ in range(args.repeats):
        for name, (threads, workers) in configs.items():
            rate, peak = run_isolated(_measure, root, threads, workers)
            rates[name].append(rate)
            pss[name] = max(pss.get(name, 0.0), peak or 0.0)
    print(f"{args.images} ImageNet-like images (restart {args.restart}), RandomResizedCrop(224), batch 256, uint8, "
          f"median of {args.repeats} passes:")
    for name, r in rates.items():
        print(f"  {name:11s} {statistics.median(r):7.0f} img/s ({min(r):.0f}-{max(r):.0f})  peak PSS {pss[name]:6.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
