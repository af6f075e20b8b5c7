#!/usr/bin/env python
"""The per-sample path against the batch path, images/s on one core, same packed records, same crops.

An ImageNet-like folder (made under ``--data-dir`` if missing) is packed with the default options (JPEGs transcoded
to restart intervals), then, pinned to one core, alternating within each round:

- ``transform(bytes)``: the public ``RandomResizedCrop(224)(data)`` on each record's bytes (read beforehand);
- ``ds[i]``: ``ShardDataset(pack, transform=RandomResizedCrop(224))[i]`` (record read included);
- ``getitems``: ``ds.__getitems__`` on batches of 256 indices with ``decode_threads=1`` (one batch call; record
  reads and the new batch tensor included), which is what a DataLoader worker calls;
- ``getitems-per-record``: ``ds.__getitems__`` decoding record by record (``transform.decode_into`` per slot),
  the alternative to the batch call it takes with ``decode_threads=1``;
- ``batch-call``: the same batches forced through the one-kernel-call-per-batch path
  (:func:`fastdata.datasets.batch_decode.decode_batch_into`) into a reused array (record reads included, no new tensor).

Within a round the methods alternate batch by batch (order rotating), each seeding torch's RNG identically before
its batch, so all of them decode the same crops of the same records and a change of load hits them alike. Time is
the process's CPU time by default (images per CPU-second: being descheduled on a busy machine does not count);
``--clock wall`` measures wall time (the same on a quiet machine). Prints the median img/s (and range) of the
rounds and the median per-round ratios of the per-sample paths to the batch paths (goal: >= 0.95).

Usage::

    python bench/kernel.py per-sample                       # 1,000 images, 5 rounds, about a minute
    python bench/kernel.py per-sample --images 3000 --repeats 7
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from imagenet_like import make_images  # noqa: E402 (a neighbour in bench/_lib, on sys.path)

from fastdata._util.cpus import pin_to_one_core  # noqa: E402
from fastdata.bench.measure import RESAMPLE  # noqa: E402 (the resample the dated results were measured with)
from fastdata.datasets import shard_dataset as dataset_module  # noqa: E402
from fastdata.datasets.batch_decode import decode_batch_into  # noqa: E402
from fastdata.datasets.shard_dataset import ShardDataset  # noqa: E402
from fastdata.packing.packer import pack  # noqa: E402
from fastdata.transforms import RandomResizedCrop  # noqa: E402

BATCH = 256


def _prepare(data_dir: Path, images: int) -> Path:
    folder = data_dir / f"imagenet-like-{images}"
    if not (folder.is_dir() and any(folder.iterdir())):
        make_images(folder, images, "imagenet", 100)
    packed = data_dir / f"imagenet-like-{images}-default-pack"
    if not (packed / "manifest.json").is_file():
        pack(folder, packed, format="tfrecord", progress=False, overwrite=True)
    return packed


def _methods(root: Path) -> tuple[dict, int]:
    """Each method decodes the records ``[start, stop)`` (one batch's worth)."""
    transform = RandomResizedCrop(224, resample=RESAMPLE)
    dataset = ShardDataset(root, transform=transform, decode_threads=1)
    datas = [dataset.read(i)[0] for i in range(len(dataset))]
    batch_out = np.empty((BATCH, 224, 224, 3), np.uint8)

    def per_sample(start: int, stop: int) -> None:
        for data in datas[start:stop]:
            transform(data)

    def getitem(start: int, stop: int) -> None:
        for i in range(start, stop):
            dataset[i]

    def getitems(start: int, stop: int) -> None:
        dataset.__getitems__(list(range(start, stop)))

    def per_record(t, datas_, slots, rngs, threads) -> None:
        for slot, (data, rng) in enumerate(zip(datas_, rngs, strict=False)):
            t.decode_into(data, slots[slot], rng=rng)

    def getitems_per_record(start: int, stop: int) -> None:  # __getitems__ decoding record by record
        real = dataset_module.decode_all_into
        dataset_module.decode_all_into = per_record
        try:
            dataset.__getitems__(list(range(start, stop)))
        finally:
            dataset_module.decode_all_into = real

    def batch_call(start: int, stop: int) -> None:
        chunk = [dataset.read(i)[0] for i in range(start, stop)]
        decode_batch_into(transform, chunk, batch_out[: len(chunk)], [None] * len(chunk))

    return {
        "transform(bytes)": per_sample,
        "ds[i]": getitem,
        "getitems": getitems,
        "getitems-per-record": getitems_per_record,
        "batch-call": batch_call,
    }, len(datas)


def measure(root: Path, repeats: int, clock=time.process_time) -> tuple[dict[str, list[float]], int]:
    """img/s per method and round. Within a round the methods alternate batch by batch (the order rotating), each
    decoding the same batch of records with torch's RNG seeded the same, so a load change hits all of them alike."""
    methods, n = _methods(root)
    names = list(methods)
    for fn in methods.values():  # warm-up: page cache, decompressors, scratch buffers
        for start in range(0, n, BATCH):
            fn(start, min(start + BATCH, n))
    rates: dict[str, list[float]] = {name: [] for name in methods}
    for round_ in range(repeats):
        seconds = dict.fromkeys(methods, 0.0)
        for b, start in enumerate(range(0, n, BATCH)):
            for k in range(len(names)):
                name = names[(b + round_ + k) % len(names)]
                torch.manual_seed(round_ * 100_003 + b)
                began = clock()
                methods[name](start, min(start + BATCH, n))
                seconds[name] += clock() - began
        for name in methods:
            rates[name].append(n / seconds[name])
    return rates, n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data", help="where the data set is (or is made)")
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--clock",
        choices=("cpu", "wall"),
        default="cpu",
        help="cpu: the process's CPU time (images per CPU-second, robust on a busy machine); wall",
    )
    parser.add_argument("--core", type=int, default=None, help="the core to pin to (default: the last usable one)")
    parser.add_argument("--json", type=Path, default=None, help="write the rates and the ratios here")
    args = parser.parse_args(argv)
    pin_to_one_core(args.core)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    rates, n = measure(_prepare(args.data_dir, args.images), args.repeats, clock)
    print(
        f"{n} ImageNet-like records (default pack), RandomResizedCrop(224), one core, {args.repeats} rounds "
        f"alternating per batch of {BATCH}, median img/s of {args.clock} time (range):"
    )
    for name, r in rates.items():
        print(f"  {name:20s} {statistics.median(r):7.0f}  ({min(r):.0f}-{max(r):.0f})")
    ratios = {}
    for a in ("transform(bytes)", "ds[i]", "getitems"):
        for b in ("getitems", "getitems-per-record", "batch-call"):
            if a == b:
                continue
            ratios[f"{a} / {b}"] = ratio = statistics.median(x / y for x, y in zip(rates[a], rates[b], strict=False))
            print(f"  {a} / {b}: {ratio:.3f}" + ("  (goal >= 0.95)" if b == "getitems" else ""))
    if args.json:
        args.json.write_text(
            json.dumps(
                {"images": n, "repeats": args.repeats, "clock": args.clock, "rates": rates, "ratios": ratios}, indent=2
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
