#!/usr/bin/env python
"""The decode kernel alone on one core: crop-region decode against full decodes, same bytes, same crops.

For every JPEG of each data set, a torchvision-style ``RandomResizedCrop(224)`` box is drawn once (torch seed 0);
then, on one pinned core, with the bytes in memory, each method turns every image into its 224x224 uint8 crop:

- ``cv2``: ``cv2.imdecode`` of the whole image + crop + ``cv2.resize`` (what a torch + OpenCV pipeline does);
- ``turbojpeg``: fastdata's previous path: PyTurboJPEG decodes the whole image at the smallest sufficient DCT
  scale, then crop + resize;
- ``native``: fastdata's C kernel: only the crop's region is decoded (``jpeg_crop_scanline`` + ``jpeg_skip_scanlines``,
  stopping after the crop's last row), at the smallest sufficient DCT scale, resized straight into a batch slot.

Methods alternate within each repeat (3 by default); the median rate is reported with the range. The data sets are
made by ``tools/make_imagenet_like.py`` if missing: ImageNet-like sizes (mean ~470x390) and large photos
(``--profile photos``, mean ~1650x1200).

Usage::

    python bench/kernel.py crop                  # writes bench/results/kernel.json
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

import cv2  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from imagenet_like import make_images  # noqa: E402 (a neighbour in bench/_lib, on sys.path)

from fastdata._util.cpus import pin_to_one_core  # noqa: E402
from fastdata.bench.measure import RESAMPLE  # noqa: E402 (the resample the dated results were measured with)
from fastdata.decode import get_decoder, is_jpeg  # noqa: E402
from fastdata.decode.scaling import resize_into  # noqa: E402
from fastdata.transforms import RandomResizedCrop  # noqa: E402

SIZE = 224
DATASETS = {"imagenet-like": ("imagenet", 3000), "photos": ("photos", 300)}


def _ensure(folder: Path, profile: str, count: int) -> None:
    if folder.is_dir() and any(folder.iterdir()):
        return
    make_images(folder, count, profile, 100)


def _load(folder: Path, limit: int) -> list[bytes]:
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    datas = [p.read_bytes() for p in files]
    return [d for d in datas if is_jpeg(d)][:limit]


def _cv2_crop(data: bytes, box: tuple[int, int, int, int], out: np.ndarray) -> None:
    top, left, height, width = box
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    resize_into(cv2.cvtColor(bgr[top : top + height, left : left + width], cv2.COLOR_BGR2RGB), out, RESAMPLE)


def measure(datas: list[bytes], repeats: int) -> dict:
    """img/s of each method on ``datas`` (one core, alternating, ``repeats`` rounds)."""
    native, turbo = get_decoder("native"), get_decoder("turbojpeg")
    torch.manual_seed(0)
    boxes = [RandomResizedCrop.get_params(*native.read_size(d), (0.08, 1.0), (3 / 4, 4 / 3)) for d in datas]
    batch = np.empty((256, SIZE, SIZE, 3), np.uint8)
    methods = {
        "cv2": lambda d, b, o: _cv2_crop(d, b, o),
        "turbojpeg": lambda d, b, o: turbo.decode_crop_into(d, b, o, resample=RESAMPLE),
        "native": lambda d, b, o: native.decode_crop_into(d, b, o, resample=RESAMPLE),
    }
    rates: dict[str, list[float]] = {name: [] for name in methods}
    for fn in methods.values():  # warm-up: allocators, scratch buffers, page cache of the code
        for i, (data, box) in enumerate(zip(datas[:50], boxes, strict=False)):
            fn(data, box, batch[i % 256])
    for _ in range(repeats):
        for name, fn in methods.items():
            start = time.perf_counter()
            for i, (data, box) in enumerate(zip(datas, boxes, strict=False)):
                fn(data, box, batch[i % 256])
            rates[name].append(len(datas) / (time.perf_counter() - start))
    result = {name: {"median": statistics.median(r), "min": min(r), "max": max(r)} for name, r in rates.items()}
    result["native_vs_cv2"] = result["native"]["median"] / result["cv2"]["median"]
    result["native_vs_turbojpeg"] = result["native"]["median"] / result["turbojpeg"]["median"]
    result["images"] = len(datas)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data", help="where the data sets are (or are made)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--core", type=int, default=None, help="the core to pin to (default: the last usable one)")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "kernel.json")
    args = parser.parse_args(argv)
    pin_to_one_core(args.core)
    results = {}
    for name, (profile, count) in DATASETS.items():
        folder = args.data_dir / f"{name}-{count}"
        _ensure(folder, profile, count)
        results[name] = measure(_load(folder, count), args.repeats)
        r = results[name]
        print(f"{name} ({r['images']} JPEGs, one core, median of {args.repeats}):")
        for method in ("cv2", "turbojpeg", "native"):
            m = r[method]
            print(f"  {method:10s} {m['median']:7.0f} img/s  ({m['min']:.0f}-{m['max']:.0f})")
        print(f"  native / cv2 = {r['native_vs_cv2']:.2f}x, native / turbojpeg = {r['native_vs_turbojpeg']:.2f}x")
    args.json.write_text(json.dumps(results, indent=2))
    print(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
