#!/usr/bin/env python
"""An ImageFolder of real photographs at ImageNet's sizes, cut from the photos installed packages ship.

Benchmarks on generated pictures can flatter a decoder (smooth 1/f texture compresses and decodes unlike a camera's
picture), so ``fastdata bench`` and ``bench/loaders.py threads`` are also run on real photographs. No download is
possible here, so the photographs are the colour photos scikit-image and matplotlib ship with their wheels (the
astronaut, the cat, the coffee cup, the motorcycle pair, the rocket, Grace Hopper, ...: :data:`SOURCES`). Each
output image is one random box of one of them (30-100% of its area, aspect 3:4 to 4:3), possibly mirrored, resized
with Pillow's antialiased bicubic to an ImageNet-like size (long side 500 px three times in four, else 250-1000 px),
and saved as a baseline 4:2:0 JPEG at quality 75-95: real content, re-framed, at the sizes the loaders meet in
training. Each image depends only on ``(seed, index)``; one class per source photo.

Usage: ``python tools/make_real_photos.py OUT --num-images 3000``.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import sys
from pathlib import Path

import numpy as np
from PIL import Image

#: (package, file inside its folder of sample data): the colour photographs used; a missing package is skipped.
SOURCES = (
    ("skimage", "data/astronaut.png"),
    ("skimage", "data/chelsea.png"),
    ("skimage", "data/coffee.png"),
    ("skimage", "data/motorcycle_left.png"),
    ("skimage", "data/motorcycle_right.png"),
    ("skimage", "data/rocket.jpg"),
    ("skimage", "data/hubble_deep_field.jpg"),
    ("skimage", "data/retina.jpg"),
    ("skimage", "data/ihc.png"),
    ("matplotlib", "mpl-data/sample_data/grace_hopper.jpg"),
)
QUALITIES = (75, 80, 85, 90, 95)


def source_photos() -> list[tuple[str, Image.Image]]:
    """The installed photographs of :data:`SOURCES` as RGB images, named by file stem; ``OSError`` if none."""
    photos = []
    for package, relative in SOURCES:
        spec = importlib.util.find_spec(package)  # finds the folder without importing the package
        if spec is None or not spec.submodule_search_locations:
            continue
        path = Path(next(iter(spec.submodule_search_locations))) / relative
        if path.is_file():
            with Image.open(path) as image:
                photos.append((path.stem, image.convert("RGB")))
    if not photos:
        raise OSError("no source photographs found: install scikit-image or matplotlib (pip install scikit-image)")
    return photos


def make_one(photo: Image.Image, rng: np.random.Generator) -> bytes:
    """One random re-framing of ``photo`` as JPEG bytes (see the module docstring)."""
    width, height = photo.size
    for _ in range(20):
        area = width * height * rng.uniform(0.3, 1.0)
        aspect = float(np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3))))
        w, h = round((area * aspect) ** 0.5), round((area / aspect) ** 0.5)
        if w <= width and h <= height:
            break
    else:
        w, h = width, height
    x, y = int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1))
    box = photo.crop((x, y, x + w, y + h))
    if rng.random() < 0.5:
        box = box.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    long_side = 500 if rng.random() < 0.75 else int(rng.integers(250, 1001))
    scale = long_side / max(w, h)
    box = box.resize((max(1, round(w * scale)), max(1, round(h * scale))), Image.Resampling.BICUBIC)
    out = io.BytesIO()
    box.save(out, "JPEG", quality=int(rng.choice(QUALITIES)), subsampling="4:2:0")
    return out.getvalue()


def generate(out: Path, num_images: int, seed: int = 0) -> int:
    """Write ``num_images`` JPEGs under ``out/<source>/``; returns the bytes written."""
    photos = source_photos()
    total = 0
    for index in range(num_images):
        rng = np.random.default_rng([seed, index])
        name, photo = photos[index % len(photos)]
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        data = make_one(photo, rng)
        (folder / f"{name}_{index:06d}.jpg").write_bytes(data)
        total += len(data)
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the folder to write (ImageFolder layout)")
    parser.add_argument("--num-images", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.num_images < 1:
        parser.error(f"--num-images must be >= 1, got {args.num_images}")
    try:
        total = generate(args.out, args.num_images, args.seed)
    except OSError as exc:
        print(f"make_real_photos.py: error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.num_images} photographs, {total / args.num_images / 1024:.0f} KB each on average, in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
