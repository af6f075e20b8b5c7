#!/usr/bin/env python
"""PNG decode speed, Pillow against OpenCV, on the PNGs of the ImageNet-like benchmark set.

The 10k set of ``tools/make_imagenet_like.py`` holds about 1% PNGs (RGB and some grayscale,
zlib level 1, 450 KB on average). Only those are made here (``make_image(seed, index)`` for
the indexes whose spec says PNG), so nothing else is written. For each image the best of
``--repeats`` runs is kept, which removes most of the noise of a shared machine; the pixels
of the two decoders are compared too. Usage: ``python bench/kernel.py png [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import make_imagenet_like  # noqa: E402

from fastdata.decode import get_decoder  # noqa: E402


def pillow_rgb(data: bytes) -> np.ndarray:
    """``Image.open(f).convert("RGB")`` as a writable array (what fastdata returns)."""
    with Image.open(io.BytesIO(data)) as image:
        image.load()
        return np.array(image if image.mode == "RGB" else image.convert("RGB"))


def opencv_rgb(data: bytes) -> np.ndarray:
    """``cv2.imdecode`` to RGB."""
    return cv2.cvtColor(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)


def best_ms(decoders: dict[str, Callable[[bytes], np.ndarray]], images: list[bytes], repeats: int) -> dict[str, float]:
    """Per decoder, the mean over the images of its best-of-``repeats`` time in milliseconds.

    The decoders take turns on each image, so a load change on the machine hits them alike.
    """
    totals = dict.fromkeys(decoders, 0.0)
    for data in images:
        best = dict.fromkeys(decoders, float("inf"))
        for _ in range(repeats):
            for name, decode in decoders.items():
                start = time.perf_counter()
                decode(data)
                best[name] = min(best[name], time.perf_counter() - start)
        for name in decoders:
            totals[name] += best[name]
    return {name: 1000 * total / len(images) for name, total in totals.items()}


def main(argv: list[str] | None = None) -> int:
    """Print the PNG count, their size, the per-image decode times and whether the pixels agree."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-images", type=int, default=10_000, help="size of the set the PNGs come from")
    parser.add_argument("--seed", type=int, default=0, help="the set's seed (default 0, as the benchmark)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per image; the best is kept")
    args = parser.parse_args(argv)
    indexes = [i for i in range(args.num_images) if make_imagenet_like.image_spec(args.seed, i).png]
    images = [make_imagenet_like.make_image(args.seed, i)[1] for i in indexes]
    opened = [Image.open(io.BytesIO(d)) for d in images]
    gray = sum(image.mode == "L" for image in opened)
    kilobytes = np.mean([len(d) for d in images]) / 1e3
    kilopixels = np.mean([image.size[0] * image.size[1] for image in opened]) / 1e3
    print(
        f"{len(images)} PNGs of {args.num_images} ({gray} grayscale), "
        f"{kilobytes:.0f} KB and {kilopixels:.0f} kpx on average"
    )
    same = sum(np.array_equal(pillow_rgb(d), opencv_rgb(d)) for d in images)
    print(f"identical pixels: {same} of {len(images)}")
    decoders = {"Pillow": pillow_rgb, "OpenCV": opencv_rgb, "fastdata (auto)": get_decoder("auto").decode}
    for name, ms in best_ms(decoders, images, args.repeats).items():
        print(f"{name:<16} {ms:6.2f} ms per PNG  ({1000 / ms:6.1f} PNG/s, one core)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
