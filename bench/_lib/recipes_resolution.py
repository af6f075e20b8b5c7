#!/usr/bin/env python
"""Progressive resolution and multi-crop, decode-time, on one core: what a smaller crop and one decode save.

On one pinned core, with the JPEG bytes in memory, every image is turned into its crop(s) by fastdata's
decode-time transforms (the native region-decode kernel; draws from a per-image generator, the same for every
method):

- ``rrc-160`` / ``rrc-192`` / ``rrc-224``: ``RandomResizedCrop(size)``, one crop per image (ffcv's ramp trains at
  160 -> 192; the ratio to 224 is the decode-side gain of the ramp);
- ``multicrop``: ``MultiCrop`` of DINO's 2 x 224 (scale 0.4-1) + 6 x 96 (scale 0.05-0.4), one region decode of the
  union of the 8 boxes; ``multicrop-exact``: ``one_decode=False`` (one decode per DCT scale);
  ``8-separate``: the same 8 ``RandomResizedCrop``s, each decoding the image itself.

Methods take turns every 25 images (so a busy machine slows them alike); the median rate (source images per second) is
reported with the range. The data sets are made by ``tools/make_imagenet_like.py`` if missing: ImageNet-like sizes (mean
~470x390) and large photos (``--profile photos``, mean ~1650x1200).

Usage::

    python bench/recipes.py resolution           # about 2 minutes; writes bench/results/recipes-resolution.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from imagenet_like import make_images  # noqa: E402 (a neighbour in bench/_lib, on sys.path)

from fastdata._util.cpus import pin_to_one_core  # noqa: E402
from fastdata.decode import is_jpeg  # noqa: E402
from fastdata.transforms import RandomResizedCrop  # noqa: E402
from fastdata.transforms.multicrop import MultiCrop  # noqa: E402

_CHUNK = 25
DATASETS = {"imagenet-like": ("imagenet", 1000), "photos": ("photos", 150)}
DINO = [RandomResizedCrop(224, scale=(0.4, 1.0), decoder="native")] * 2 + [
    RandomResizedCrop(96, scale=(0.05, 0.4), decoder="native")
] * 6


def _ensure(folder: Path, profile: str, count: int) -> None:
    if folder.is_dir() and any(folder.iterdir()):
        return
    make_images(folder, count, profile, 100)


def _load(folder: Path, limit: int) -> list[bytes]:
    datas = [p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()]
    return [d for d in datas if is_jpeg(d)][:limit]


def _methods() -> dict[str, Callable[[bytes, np.random.Generator], None]]:
    methods: dict[str, Callable[[bytes, np.random.Generator], None]] = {}
    for size in (160, 192, 224):
        crop, out = RandomResizedCrop(size, decoder="native"), np.empty((size, size, 3), np.uint8)
        methods[f"rrc-{size}"] = lambda d, g, crop=crop, out=out: crop.decode_into(d, out, rng=g)
    outs = [np.empty((*c.size, 3), np.uint8) for c in DINO]
    one, exact = MultiCrop(DINO, decoder="native"), MultiCrop(DINO, one_decode=False, decoder="native")
    methods["multicrop"] = lambda d, g: one.decode_into_all(d, outs, rng=g)
    methods["multicrop-exact"] = lambda d, g: exact.decode_into_all(d, outs, rng=g)

    def separate(d: bytes, g: np.random.Generator) -> None:
        for crop, out in zip(DINO, outs, strict=False):
            crop.decode_into(d, out, rng=g)

    methods["8-separate"] = separate
    return methods


def measure(datas: list[bytes], repeats: int) -> dict:
    """Source images per second of each method on ``datas`` (one core, alternating, ``repeats`` rounds)."""
    methods = _methods()
    for fn in methods.values():  # warm-up: scratch buffers, code pages
        for i, data in enumerate(datas[:30]):
            fn(data, np.random.default_rng(i))
    rates: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(repeats):
        seconds = dict.fromkeys(methods, 0.0)
        for first in range(0, len(datas), _CHUNK):  # methods take turns every _CHUNK images: load hits them alike
            for name, fn in methods.items():
                start = time.perf_counter()
                for i in range(first, min(first + _CHUNK, len(datas))):
                    fn(datas[i], np.random.default_rng(i))
                seconds[name] += time.perf_counter() - start
        for name in methods:
            rates[name].append(len(datas) / seconds[name])
    result: dict = {name: {"median": statistics.median(r), "min": min(r), "max": max(r)} for name, r in rates.items()}
    med = {name: result[name]["median"] for name in methods}
    result["ratios"] = {
        "160_vs_224": med["rrc-160"] / med["rrc-224"],
        "192_vs_224": med["rrc-192"] / med["rrc-224"],
        "multicrop_vs_8_separate": med["multicrop"] / med["8-separate"],
        "multicrop_exact_vs_8_separate": med["multicrop-exact"] / med["8-separate"],
    }
    result["images"] = len(datas)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data", help="where the data sets are (or are made)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limit", type=int, default=None, help="at most this many images per data set")
    parser.add_argument("--core", type=int, default=None, help="the core to pin to (default: the last usable one)")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "recipes-resolution.json")
    args = parser.parse_args(argv)
    pin_to_one_core(args.core)
    results = {}
    for name, (profile, count) in DATASETS.items():
        folder = args.data_dir / f"{name}-{count}"
        _ensure(folder, profile, count)
        results[name] = r = measure(_load(folder, args.limit or count), args.repeats)
        print(f"{name} ({r['images']} JPEGs, one core, median of {args.repeats}, source images/s):")
        for method in ("rrc-160", "rrc-192", "rrc-224", "multicrop", "multicrop-exact", "8-separate"):
            m = r[method]
            print(f"  {method:16s} {m['median']:7.0f} img/s  ({m['min']:.0f}-{m['max']:.0f})")
        q = r["ratios"]
        print(
            f"  160 / 224 = {q['160_vs_224']:.2f}x, 192 / 224 = {q['192_vs_224']:.2f}x, multicrop / 8 separate = "
            f"{q['multicrop_vs_8_separate']:.2f}x (exact: {q['multicrop_exact_vs_8_separate']:.2f}x)"
        )
    args.json.write_text(json.dumps(results, indent=2))
    print(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
