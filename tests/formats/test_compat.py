"""Packs written by every earlier release stay readable (docs/versioning.md): the 0.1.0 packs of tests/data/v0.1.0
verify, and read back their images' exact pixels and labels through ShardDataset and DataLoaderX."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fastdata import DataLoaderX, ShardDataset, fast_collate
from fastdata.cli import main
from fastdata.transforms import RandomResizedCrop

OLD = Path(__file__).resolve().parents[1] / "data" / "v0.1.0"


def digest(pixels: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(pixels).tobytes()).hexdigest()


def expected() -> list[tuple[str, int]]:
    """(pixel digest, label) of each source image, label = its folder's index, as 0.1.0 packed them."""
    classes = sorted(p.name for p in (OLD / "images").iterdir())
    return sorted(
        (digest(np.asarray(Image.open(path).convert("RGB"))), classes.index(path.parent.name))
        for path in (OLD / "images").rglob("*.jpg")
    )


@pytest.mark.parametrize("fmt", ["tfrecord", "lmdb"])
def test_a_pack_written_by_0_1_0_verifies(fmt, capsys):
    assert main(["verify", str(OLD / fmt)]) == 0
    assert "12 records checked" in capsys.readouterr().out


@pytest.mark.parametrize("fmt", ["tfrecord", "lmdb"])
def test_a_pack_written_by_0_1_0_reads_its_exact_pixels_and_labels(fmt):
    dataset = ShardDataset(OLD / fmt)
    got = sorted((digest(image), int(label)) for image, label in (dataset[i] for i in range(len(dataset))))
    assert got == expected()


@pytest.mark.parametrize("fmt", ["tfrecord", "lmdb"])
def test_a_pack_written_by_0_1_0_loads_with_workers(fmt):
    loader = DataLoaderX(
        ShardDataset(OLD / fmt, transform=RandomResizedCrop(16)), batch_size=5, num_workers=2, collate_fn=fast_collate
    )
    labels = sorted(int(label) for _, batch_labels in loader for label in batch_labels)
    assert labels == sorted(label for _, label in expected())
