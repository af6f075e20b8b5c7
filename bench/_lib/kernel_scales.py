#!/usr/bin/env python
"""DCT scales between the powers of two: the crop decoded at M/8 (M = 1..8) against today's 1/8-1/4-1/2-1 choice.

libjpeg-turbo decodes at any M/8 (``scale_num``/``scale_denom``): a crop that needs 5/8 of its pixels is decoded at
5/8 instead of 1, so fewer pixels are made and the resize has less to read. Only 1/8, 1/4, 1/2 and 1 have SIMD
IDCTs (the others are plain C), so it has to be measured. On the records ``fastdata pack`` stores (an ImageNet-like
folder made under ``--data-dir`` if missing, packed with the defaults), one torchvision ``RandomResizedCrop(224)``
box per record (torch seed 0), pinned to one core, the policies alternate record by record (the order rotating
each round), each decoding the record's box into the same 224x224 slot:

- ``pow2``: the smallest of 1/8, 1/4, 1/2, 1 that keeps the crop at least 224 (what fastdata shipped);
- ``m8``: the smallest M/8, M = 1..8;
- ``shipped``: the smallest of ``fastdata.decode.native.NATIVE_SCALES`` (what the kernel uses now);
- ``m8-M`` (printed per M): the records where ``m8`` picks M/8, each policy timed on just those.

Time is the process's CPU time by default (images per CPU-second; being descheduled on a busy machine does not
count); ``--clock wall`` measures wall time. Prints img/s (median and range of the rounds) and, per M, the median
per-round ratio of ``m8`` to ``pow2`` on the records that M applies to.

Usage::

    python bench/kernel.py scales                          # 1,000 images, 5 rounds
    python bench/kernel.py scales --images 3000 --repeats 7 --json bench/results/kernel-scales.json
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
from kernel_per_sample import _prepare  # noqa: E402 (its neighbour in bench/_lib, on sys.path)

from fastdata._util.cpus import pin_to_one_core  # noqa: E402
from fastdata.bench.measure import RESAMPLE  # noqa: E402 (the resample the dated results were measured with)
from fastdata.datasets.shard_dataset import ShardDataset  # noqa: E402
from fastdata.decode import native  # noqa: E402
from fastdata.decode.scaling import TURBOJPEG_SCALES, choose_scale, resize_into, scaled_box, scaled_size  # noqa: E402
from fastdata.transforms import RandomResizedCrop  # noqa: E402

SIZE = 224
POLICIES = {"pow2": ((1, 8), (1, 4), (1, 2), (1, 1)), "m8": TURBOJPEG_SCALES, "shipped": native.NATIVE_SCALES}


def _eighths(scale: tuple[int, int]) -> int:
    return scale[0] * 8 // scale[1]


def crop_into(data: bytes, box, out: np.ndarray, scale: tuple[int, int], header) -> None:
    """``native.decode_crop_into`` at a given scale: the region at that scale, resized into ``out``."""
    height, width = header
    y0, y1, x0, x1 = scaled_box(box, scale, scaled_size(height, width, scale))
    rows, cols = y1 - y0, x1 - x0
    if (rows, cols) == out.shape[:2]:
        native._region(data, scale, y0, y1, x0, x1, out, True)
        return
    region = native._scratch(rows * cols * 3)[: rows * cols * 3].reshape(rows, cols, 3)
    native._region(data, scale, y0, y1, x0, x1, region, True)
    resize_into(region, out, RESAMPLE)


def plan(root: Path) -> list[tuple[bytes, tuple, tuple, dict[str, tuple[int, int]]]]:
    """Every JPEG record: its bytes, header size, box, and the scale each policy picks."""
    dataset = ShardDataset(root)
    transform = RandomResizedCrop(SIZE, resample=RESAMPLE)
    torch.manual_seed(0)
    records = []
    for i in range(len(dataset)):
        data = dataset.read(i)[0]
        try:
            header = native.read_header(data)[:2]
        except Exception:  # noqa: BLE001 - PNG records: not what this measures
            continue
        box = transform._params(header[0], header[1], None)
        scales = {name: choose_scale(scales, box[2], box[3], SIZE, SIZE) for name, scales in POLICIES.items()}
        records.append((data, header, box, scales))
    return records


def measure(records, repeats: int, clock) -> dict[str, list[float]]:
    """img/s per policy and round, and per ``m8-M`` group the seconds of each policy on that group's records."""
    out = np.empty((SIZE, SIZE, 3), np.uint8)
    names = list(POLICIES)
    for data, header, box, scales in records:  # warm-up
        for name in names:
            crop_into(data, box, out, scales[name], header)
    rates: dict[str, list[float]] = {name: [] for name in names}
    groups: dict[int, dict[str, list[float]]] = {}
    for round_ in range(repeats):
        seconds = dict.fromkeys(names, 0.0)
        by_m: dict[int, dict[str, float]] = {}
        for k, (data, header, box, scales) in enumerate(records):
            m = _eighths(scales["m8"])
            for j in range(len(names)):
                name = names[(k + round_ + j) % len(names)]
                began = clock()
                crop_into(data, box, out, scales[name], header)
                spent = clock() - began
                seconds[name] += spent
                by_m.setdefault(m, dict.fromkeys(names, 0.0))[name] += spent
        for name in names:
            rates[name].append(len(records) / seconds[name])
        for m, spent in by_m.items():
            for name in names:
                groups.setdefault(m, {n: [] for n in names})[name].append(spent[name])
    return {"rates": rates, "groups": groups}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data", help="where the data set is (or is made)")
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    parser.add_argument("--core", type=int, default=None, help="the core to pin to (default: the last usable one)")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args(argv)
    pin_to_one_core(args.core)
    records = plan(_prepare(args.data_dir, args.images))
    result = measure(records, args.repeats, time.process_time if args.clock == "cpu" else time.perf_counter)
    counts: dict[int, int] = {}
    for *_, scales in records:
        counts[_eighths(scales["m8"])] = counts.get(_eighths(scales["m8"]), 0) + 1
    print(
        f"{len(records)} JPEG records (default pack), RandomResizedCrop({SIZE}) boxes, one core, {args.repeats} "
        f"rounds alternating per record, img/s of {args.clock} time, median (range):"
    )
    for name, r in result["rates"].items():
        print(f"  {name:6s} {statistics.median(r):7.0f}  ({min(r):.0f}-{max(r):.0f})")
    for name in ("m8", "shipped"):
        ratio = statistics.median(a / b for a, b in zip(result["rates"][name], result["rates"]["pow2"], strict=False))
        print(f"  {name} / pow2: {ratio:.3f}")
    print(f"shipped scales: {', '.join(f'{n}/{d}' for n, d in native.NATIVE_SCALES)}")
    print("per M/8 that m8 picks: records, pow2 ms/record, m8 ms/record, m8 / pow2 speed (median of rounds)")
    table = {}
    for m in sorted(result["groups"]):
        g, n = result["groups"][m], counts[m]
        ratio = statistics.median(p / q for p, q in zip(g["pow2"], g["m8"], strict=False))
        table[m] = {
            "records": n,
            "pow2_ms": 1e3 * statistics.median(g["pow2"]) / n,
            "m8_ms": 1e3 * statistics.median(g["m8"]) / n,
            "m8_speedup": ratio,
        }
        print(f"  {m}/8  {n:5d}  {table[m]['pow2_ms']:.3f}  {table[m]['m8_ms']:.3f}  {ratio:.3f}x")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "records": len(records),
                    "repeats": args.repeats,
                    "clock": args.clock,
                    "rates": result["rates"],
                    "per_m": table,
                },
                indent=2,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
