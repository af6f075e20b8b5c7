"""The tutorials' sample data: a small labelled image folder, made in a second (not a tutorial page itself).

Each tutorial imports it (``from sample_images import make_images``); run a tutorial from this folder, or copy this
file beside it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image


def make_images(folder: Path, classes=("red", "green", "blue"), per_class=100, seed=0) -> None:
    """``folder/<class>/<n>.jpg``: smooth, photo-like pictures whose dominant colour is the class."""
    rng = np.random.default_rng(seed)
    for label, name in enumerate(classes):
        (folder / name).mkdir(parents=True, exist_ok=True)
        for n in range(per_class):
            h, w = rng.integers(96, 161, size=2)
            yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
            picture = 60 + 50 * np.sin(2 * np.pi * (rng.uniform(0.5, 2) * xx + rng.uniform(0.5, 2) * yy))[..., None]
            picture = np.repeat(picture, 3, axis=2)
            picture[..., label] += 40
            picture += rng.normal(0, 20, picture.shape)
            Image.fromarray(np.clip(picture, 0, 255).astype(np.uint8)).save(folder / name / f"{n}.jpg", quality=90)
