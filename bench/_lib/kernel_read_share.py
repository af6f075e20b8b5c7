#!/usr/bin/env python
"""What the Python-side record reads cost inside a thread-mode batch, beside the decode (GIL released).

``worker_mode="thread"`` decodes with the GIL released (the native kernel), but a batch's records are still read in
Python: ``ShardDataset.read_batch`` (``os.pread`` per record, the TFRecord framing CRCs or the LMDB record CRC32C
through ``google_crc32c``, the label checks, numpy bookkeeping), mostly holding the GIL. That part is serial across
loader threads. For each pack (TFRecord, LMDB) and each batch of a shuffled pass this measures, in one thread,
``read_batch`` and the decode of the same records (``decode_all_into``, crop + resize into the batch buffer), CPU
time of the thread (``time.thread_time``), alternating, and prints per image: read us, decode us, the read share
``s = read / (read + decode)``, and the ceiling it puts on N threads (Amdahl: ``1 / (s + (1 - s) / N)``) if reads
held the GIL throughout.

The reads run two ways, alternating batch by batch: the plain Python reads (``FASTDATA_NATIVE=0`` around
``read_batch`` only), and the batch reads of ``fastdata.formats._records`` (one call per shard, ``preadv`` and every
check in C, GIL released). For the second, the time inside the C call is counted apart: what is left is the part
that still holds the GIL, and the ceiling is computed from it.

Usage::

    python bench/kernel.py read-share                                # 3,000 images, batch 256: about a minute
    python bench/kernel.py read-share --images 200 --batch-size 32   # a smoke test
"""

from __future__ import annotations

import argparse
import os
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
from fastdata.formats import record_kernel  # noqa: E402
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


class _TimedKernel:
    """``record_kernel._records`` with the thread CPU time spent inside its calls added up (GIL released there)."""

    def __init__(self, kernel) -> None:
        self.kernel, self.seconds = kernel, 0.0

    def __getattr__(self, name: str):
        call = getattr(self.kernel, name)

        def timed(*args):
            start = time.thread_time()
            try:
                return call(*args)
            finally:
                self.seconds += time.thread_time() - start

        return timed


def _read(dataset: ShardDataset, indices: list, plain: bool) -> tuple[list, float]:
    """``read_batch(indices)``'s records and its thread CPU seconds, the plain way or through the kernel."""
    before = os.environ.get("FASTDATA_NATIVE")
    if plain:
        os.environ["FASTDATA_NATIVE"] = "0"
    start = time.thread_time()
    try:
        datas, _ = dataset.read_batch(indices)
    finally:
        if before is None:
            os.environ.pop("FASTDATA_NATIVE", None)
        else:
            os.environ["FASTDATA_NATIVE"] = before
    return datas, time.thread_time() - start


def _measure(root: Path, batch: int, size: int) -> dict[str, list[float]]:
    """Per batch of a shuffled pass, in us per image of thread CPU time: the plain read, the kernel read, the
    kernel read's part outside the C call (GIL held), and the decode."""
    dataset = ShardDataset(root, transform=RandomResizedCrop(size, resample=RESAMPLE))
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(0)).tolist()
    batches = [order[k : k + batch] for k in range(0, len(order) - batch + 1, batch)]
    out = np.empty((batch, size, size, 3), np.uint8)
    timed = _TimedKernel(record_kernel._records)
    record_kernel._records = timed  # type: ignore[assignment]  # counted, then put back
    found: dict[str, list[float]] = {"plain": [], "kernel": [], "held": [], "decode": []}
    try:
        for k, indices in enumerate(keyed_indices(batches, 1, 0, batched=True)):
            per = 1e6 / len(indices)
            for plain in (k % 2 == 0, k % 2 == 1):  # which goes first alternates
                timed.seconds = 0.0
                datas, seconds = _read(dataset, indices, plain)
                found["plain" if plain else "kernel"].append(seconds * per)
                if not plain:
                    found["held"].append((seconds - timed.seconds) * per)
            start = time.thread_time()
            decode_all_into(dataset.transform, datas, out, sample_generators(indices))
            found["decode"].append((time.thread_time() - start) * per)
    finally:
        record_kernel._records = timed.kernel
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data")
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    roots = _prepare(args.data_dir, args.images)
    if not record_kernel.native_reads():
        parser.error("the records kernel (fastdata.formats._records) is not built, or FASTDATA_NATIVE=0")
    results: dict[str, dict[str, list[float]]] = {fmt: {} for fmt in roots}
    for _ in range(args.rounds):
        for fmt, root in roots.items():  # alternating
            for key, values in _measure(root, args.batch_size, args.size).items():
                results[fmt].setdefault(key, []).extend(values)
    print(f"{args.images} ImageNet-like images, batch {args.batch_size}, RandomResizedCrop({args.size}), one thread")
    print("us of thread CPU per image, medians over batches; share: reads holding the GIL / (reads + decode)")
    print(
        f"{'pack':<9} {'plain read':>10} {'kernel read':>11} {'GIL held':>8} {'decode':>7} "
        f"{'share: plain':>12} {'kernel':>7} {'ceiling N=2,4,8,16 (kernel)':>28}"
    )
    for fmt, found in results.items():
        plain, kernel, held, decode = (statistics.median(found[k]) for k in ("plain", "kernel", "held", "decode"))
        before, after = plain / (plain + decode), held / (kernel + decode)
        ceiling = ", ".join(f"{1 / (after + (1 - after) / n):.1f}" for n in (2, 4, 8, 16))
        print(
            f"{fmt:<9} {plain:>10.1f} {kernel:>11.1f} {held:>8.1f} {decode:>7.1f} "
            f"{before:>12.1%} {after:>7.1%} {ceiling:>28}"
        )
    print("ceiling: the speed-up N loader threads can reach while that share holds the GIL (Amdahl)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
