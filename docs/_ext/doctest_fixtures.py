"""The names the docstring examples use, for ``sphinx-build -b doctest`` (``doctest_global_setup`` in conf.py).

The examples run in a temporary folder holding ``images/`` (an image folder: 2 classes x 40 small JPEGs) and
``packed/`` (that folder packed by :func:`fastdata.pack` into TFRecord shards, its other options left at their
defaults), made once per build process.
``dataset`` is a :class:`fastdata.ShardDataset` over ``packed/`` with a 32-pixel crop, ``loader`` a
:class:`fastdata.DataLoaderX` over it; ``model``, ``criterion`` and ``train_step`` stand for a training loop's.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader

import fastdata
from fastdata import *  # noqa: F403 - the examples use the public names unqualified

__all__ = [  # noqa: F405 - the public names come from fastdata's star import
    "DataLoader",
    "criterion",
    "dataset",
    "enter_workspace",
    "loader",
    "model",
    "torch",
    "train_step",
    *fastdata.__all__,
]

CLASSES = ("cat", "dog")
IMAGES_PER_CLASS = 40


def make_images(root: Path, seed: int = 0) -> Path:
    """``root/images/<class>/<n>.jpg``: 2 classes x 40 JPEGs, 64 to 160 pixels a side."""
    rng = np.random.default_rng(seed)
    folder = root / "images"
    for label, name in enumerate(CLASSES):
        (folder / name).mkdir(parents=True, exist_ok=True)
        for n in range(IMAGES_PER_CLASS):
            h, w = (int(v) for v in rng.integers(64, 161, size=2))
            base = np.array([200, 60, 60] if label == 0 else [60, 60, 200], dtype=np.int16)
            pixels = np.clip(base + rng.integers(-40, 41, size=(h, w, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(folder / name / f"{n}.jpg", quality=90)
    return folder


@functools.cache
def workspace() -> Path:
    """The temporary folder with ``images/`` and ``packed/`` (made on the first call, removed at exit)."""
    root = Path(tempfile.mkdtemp(prefix="fastdata-doctest-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    make_images(root)
    fastdata.pack(root / "images", root / "packed", format="tfrecord", progress=False)
    return root


def enter_workspace() -> Path:
    """Change into :func:`workspace` (the examples use relative paths)."""
    root = workspace()
    os.chdir(root)
    return root


dataset = fastdata.ShardDataset(workspace() / "packed", transform=fastdata.transforms.RandomResizedCrop(32))
loader = fastdata.DataLoaderX(dataset, batch_size=8, shuffle=True, collate_fn=fastdata.fast_collate)
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, len(CLASSES)))
criterion = torch.nn.CrossEntropyLoss()


def train_step(batch: object) -> None:
    """A training step that does nothing (the examples show the loop around it)."""
