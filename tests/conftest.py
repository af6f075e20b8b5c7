"""Shared fixtures: small but real image folders (odd sizes, grayscale, PNG, a corrupt file), packed."""

from __future__ import annotations

from pathlib import Path

import pytest

import tests.torchvision_shim  # noqa: F401 - before any test imports torchvision
from tests.images import ImageFolderInfo, make_image_folder


@pytest.fixture(scope="session")
def image_folder(tmp_path_factory) -> ImageFolderInfo:
    """An image folder with good images of every awkward kind plus three bad files."""
    return make_image_folder(tmp_path_factory.mktemp("src"))


@pytest.fixture(scope="session")
def clean_image_folder(tmp_path_factory) -> ImageFolderInfo:
    """The same folder without bad files."""
    return make_image_folder(tmp_path_factory.mktemp("clean_src"), with_bad=False)


@pytest.fixture(scope="session", params=["tfrecord", "lmdb"])
def packed(request, image_folder, tmp_path_factory) -> tuple[Path, ImageFolderInfo]:
    """``image_folder`` packed in each format (5 samples per shard, so several shards)."""
    from fastdata.packing.packer import pack

    out = tmp_path_factory.mktemp(f"packed_{request.param}")
    pack(image_folder.root, out, format=request.param, samples_per_shard=5, workers=0, progress=False)
    return out, image_folder
