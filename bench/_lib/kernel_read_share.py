#!/usr/bin/env python
"""What the Python-side record reads cost inside a thread-mode batch, beside the decode (GIL released).

``worker_mode="thread"`` decodes with the GIL released (the native kernel), but a batch's records are still read in
Python: ``ShardDataset.read_batch`` (``os.pread`` per record, the TFRecord framing CRCs or the LMDB record CRC32C
through ``google_crc32c``, the label checks, numpy bookkeeping), mostly holding the GIL. That part is serial across
loader threads. For each pack (TFRecord, LMDB) and each batch of a shuffled pass this measures, in one thread,
``read_batch`` and the decode of the same records (``decode_all_into``, crop + resize into the batch buffer), CPU
time of the thread (``time.thread_time``), alternating, and prints per image: read us, decode us, the read share
``s = read / (read + decode)``, and the ceiling it puts on N threads (Amdahl: ``1 / (s + (1 - s) / N)``) if reads
held the GIL throughout. Moving the reads into the native call (``pread`` + CRC32C + decode, GIL released) removes
that serial share; this is the number that says how much it is worth.

Usage::

    python bench/kernel.py read-share                                # 3,000 images, batch 256: about a minute
    python bench/kernel.py read-share --images 200 --batch-size 32   # a smoke test
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from imagenet_like import make_images  # noqa: E402 (a neighbour in bench/_lib, on sys.path)

from fastdata.bench.measure import RESAMPLE  # noqa: E402 (the resample the dated results were measured with)
from fastdata.datasets.batch_decode import decode_all_into, sample_generators  # noqa: E402
from fastdata.datasets.shard_dataset import ShardDataset  # noqa: E402
from fastdata.packing.packer import pack  # noqa: E402
from fastdata.sampler.seeding import keyed_indices  # noqa: E402
from fastdata.transforms import RandomResizedCrop  # noqa: E402


def _prepare(data_dir: Path, images: int) -> dict[str, Path]:
    folder = data_dir / f"imagenet-like-{images}"
    if not (folder.is_dir() and any(folder.iterdir())):
        make_images(folder, images, "imagenet", min(100, images))
    roots = {}
    for fmt in ("tfrecord", "lmdb"):
        roots[fmt] = data_dir / f"imagenet-like-{images}-default-{fmt}"
        if not (roots[fmt] / "manifest.json").is_file():
            pack(folder, roots[fmt], format=fmt, progress=False, overwrite=True)
    return roots


def _measure(root: Path, batch: int, size: int) -> tuple[list[float], list[float]]:
    """Per batch of a shuffled pass: (read us per image, decode us per image), thread CPU time."""
    dataset = ShardDataset(root, transform=RandomResizedCrop(size, resample=RESAMPLE))
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(0)).tolist()
    batches = [order[k : k + batch] for k in range(0, len(order) - batch + 1, batch)]
    out = np.empty((batch, size, size, 3), np.uint8)
    reads, decodes = [], []
    for indices in keyed_indices(batches, 1, 0, batched=True):
        start = time.thread_time()
        datas, _ = dataset.read_batch(indices)
        middle = time.thread_time()
        decode_all_into(dataset.transform, datas, out, sample_generators(indices))
        end = time.thread_time()
        reads.append((middle - start) * 1e6 / len(indices))
        decodes.append((end - middle) * 1e6 / len(indices))
    return reads, decodes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data")
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    roots = _prepare(args.data_dir, args.images)
    results: dict[str, tuple[list[float], list[float]]] = {fmt: ([], []) for fmt in roots}
    for _ in range(args.rounds):
        for fmt, root in roots.items():  # alternating
            reads, decodes = _measure(root, args.batch_size, args.size)
            results[fmt][0].extend(reads)
            results[fmt][1].extend(decodes)
    print(f"{args.images} ImageNet-like images, batch {args.batch_size}, RandomResizedCrop({args.size}), one thread")
    print(f"{'pack':<9} {'read us/img':>11} {'decode us/img':>13} {'read share':>10} {'ceiling N=2,4,8,16':>24}")
    for fmt, (reads, decodes) in results.items():
        read, decode = statistics.median(reads), statistics.median(decodes)
        share = read / (read + decode)
        ceiling = ", ".join(f"{1 / (share + (1 - share) / n):.1f}" for n in (2, 4, 8, 16))
        print(f"{fmt:<9} {read:>11.1f} {decode:>13.1f} {share:>10.1%} {ceiling:>24}")
    print("ceiling: the speed-up N loader threads can reach if the reads hold the GIL throughout (Amdahl)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
