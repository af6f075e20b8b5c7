#!/usr/bin/env python
"""Restart-interval decode against today's region decode and cv2, on one core, same images, same crops.

For every JPEG of an ImageNet-like set, a torchvision ``RandomResizedCrop(224)`` box is drawn once (torch seed 0).
Each image is also transcoded losslessly with ``jpegtran -optimize -restart K`` (K = 1 and 2 MCUs per interval, and
one MCU row), the layout fastdata's packer writes. Methods, alternating within each round, on one pinned core:

- ``cv2``: ``cv2.imdecode`` of the original file + crop + ``cv2.resize``;
- ``region``: fastdata's kernel on the original file (decodes from the top down to the crop's last row);
- ``region-1B``: the same kernel on the K=1 transcode with the splice turned off (what the markers alone cost);
- ``splice-1B``, ``splice-2B``, ``splice-row``: the kernel on the transcodes, decoding only the crop's intervals
  (an image whose intervals do not tile its rows, e.g. K=2 on an odd number of MCUs, takes the region path);
- ``splice-pack``, ``batch-pack``: the records ``fastdata pack`` stores (K by its rule and the size fit; a file the
  fit keeps unchanged is the original), per image and in batches;
- ``batch-1B``: the K=1 transcodes in batches of 256 through one kernel call each
  (:func:`fastdata.datasets.batch_decode.decode_batch_into`, one thread), as ``ShardDataset.__getitems__`` decodes them.

Prints img/s (median and range of the rounds), the median ratios, the sizes of the transcodes and how many decodes
took the splice. Needs ``jpegtran`` (apt-get install libjpeg-turbo-progs).

Usage::

    python bench/kernel.py intervals                         # 1,000 ImageNet-like images, 5 rounds
    python bench/kernel.py intervals --images 3000 --repeats 7 --json bench/results/kernel-intervals.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import cv2  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from fastdata._util.cpus import pin_to_one_core  # noqa: E402
from fastdata.bench.measure import RESAMPLE  # noqa: E402 (the resample the dated results were measured with)
from fastdata.datasets import batch_decode  # noqa: E402
from fastdata.datasets.batch_decode import decode_batch_into  # noqa: E402
from fastdata.decode import is_jpeg, native  # noqa: E402
from fastdata.decode.scaling import resize_into  # noqa: E402
from fastdata.packing.transcode import transcode_jpeg  # noqa: E402
from fastdata.transforms import RandomResizedCrop  # noqa: E402

SIZE = 224
RESTARTS = {"1B": "1B", "2B": "2B", "row": "1"}


def _cv2_crop(data: bytes, box, out: np.ndarray) -> None:
    top, left, height, width = box
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    resize_into(cv2.cvtColor(bgr[top : top + height, left : left + width], cv2.COLOR_BGR2RGB), out, RESAMPLE)


def load_jpegs(folder: Path, count: int) -> list[bytes]:
    """The first ``count`` JPEGs under ``folder``, generating an ImageNet-like set there first if it is empty."""
    if not (folder.is_dir() and any(folder.iterdir())):
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "tools" / "make_imagenet_like.py"),
                str(folder),
                "--num-images",
                str(count),
                "--num-classes",
                str(min(100, count)),
                "--profile",
                "imagenet",
                "--quiet",
            ],
            check=True,
        )
    datas = [p.read_bytes() for p in sorted(p for p in folder.rglob("*") if p.is_file())]
    return [d for d in datas if is_jpeg(d)][:count]


def _transcode(data: bytes, restart: str) -> bytes:
    return subprocess.run(
        ["jpegtran", "-optimize", "-restart", restart], input=data, capture_output=True, check=True
    ).stdout


def _native(splice: bool):
    def run(data: bytes, box, out: np.ndarray) -> None:
        decompressor = native._decompressor()
        decompressor.splice = splice
        try:
            native.decode_crop_into(data, box, out, resample=RESAMPLE)
        finally:
            decompressor.splice = True

    return run


def _batch_spliced() -> int:
    return sum(d.spliced for d in batch_decode._decompressors(1))


class _FixedBoxes(RandomResizedCrop):
    """RandomResizedCrop whose crops are the benchmark's precomputed boxes, in order."""

    def __init__(self, boxes) -> None:
        super().__init__(SIZE, decoder="native", resample=RESAMPLE)
        self.boxes, self.next = boxes, 0

    def _params(self, height, width, rng):
        box = self.boxes[self.next % len(self.boxes)]
        self.next += 1
        return box


def _batches(boxes, batch: int = 256):
    transform = _FixedBoxes(boxes)
    out = np.empty((batch, SIZE, SIZE, 3), np.uint8)

    def run_all(datas: list[bytes]) -> None:
        transform.next = 0
        for start in range(0, len(datas), batch):
            chunk = datas[start : start + batch]
            decode_batch_into(transform, chunk, out[: len(chunk)], [None] * len(chunk))

    return run_all


def measure(originals: list[bytes], repeats: int) -> dict:
    """img/s per method (median/min/max of ``repeats`` alternating rounds), ratios, sizes, splice counts."""
    transcoded = {name: [_transcode(d, k) for d in originals] for name, k in RESTARTS.items()}
    transcoded["pack"] = [transcode_jpeg(d) or d for d in originals]  # what `fastdata pack` stores (size fit included)
    torch.manual_seed(0)
    boxes = [RandomResizedCrop.get_params(*native.read_header(d)[:2], (0.08, 1.0), (3 / 4, 4 / 3)) for d in originals]
    methods = {
        "cv2": (originals, _cv2_crop),
        "region": (originals, _native(True)),
        "region-1B": (transcoded["1B"], _native(False)),
        **{f"splice-{name}": (datas, _native(True)) for name, datas in transcoded.items()},
        "batch-1B": (transcoded["1B"], None),
        "batch-pack": (transcoded["pack"], None),
    }
    run_batches = _batches(boxes)
    out = np.empty((SIZE, SIZE, 3), np.uint8)
    spliced = {}
    for name, (datas, fn) in methods.items():  # warm-up, and whether the splice was taken
        before = native.spliced_count() + _batch_spliced()
        if fn is None:
            run_batches(datas)
        else:
            for data, box in zip(datas, boxes, strict=False):
                fn(data, box, out)
        spliced[name] = native.spliced_count() + _batch_spliced() - before
    rates: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(repeats):
        for name, (datas, fn) in methods.items():
            start = time.perf_counter()
            if fn is None:
                run_batches(datas)
            else:
                for data, box in zip(datas, boxes, strict=False):
                    fn(data, box, out)
            rates[name].append(len(datas) / (time.perf_counter() - start))
    result = {
        name: {"median": statistics.median(r), "min": min(r), "max": max(r), "spliced": spliced[name]}
        for name, r in rates.items()
    }
    ratios = {}
    for name in methods:
        ratios[f"{name}/cv2"] = statistics.median(a / b for a, b in zip(rates[name], rates["cv2"], strict=False))
        ratios[f"{name}/region"] = statistics.median(a / b for a, b in zip(rates[name], rates["region"], strict=False))
    original_bytes = sum(map(len, originals))
    sizes = {name: sum(map(len, datas)) / original_bytes for name, datas in transcoded.items()}
    return {
        "images": len(originals),
        "repeats": repeats,
        "methods": result,
        "ratios": ratios,
        "size_vs_original": sizes,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data", help="where the data set is (or is made)")
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--core", type=int, default=None, help="the core to pin to (default: the last usable one)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    if shutil.which("jpegtran") is None:
        sys.exit("jpegtran is missing: apt-get install libjpeg-turbo-progs")
    pin_to_one_core(args.core)
    r = measure(load_jpegs(args.data_dir / f"imagenet-like-{args.images}", args.images), args.repeats)
    print(f"{r['images']} ImageNet-like JPEGs, RandomResizedCrop({SIZE}), one core, {r['repeats']} alternating rounds:")
    for name, m in r["methods"].items():
        print(
            f"  {name:12s} {m['median']:7.0f} img/s ({m['min']:.0f}-{m['max']:.0f})  spliced {m['spliced']}"
            f"  x{r['ratios'][f'{name}/cv2']:.2f} cv2  x{r['ratios'][f'{name}/region']:.2f} region"
        )
    print("  transcode size / original: " + ", ".join(f"{k} {v:.3f}" for k, v in r["size_vs_original"].items()))
    if args.json:
        args.json.write_text(json.dumps(r, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
