"""Damaged JPEG bytes through every decode-time transform give an image or a DecodeError, nothing else."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from fastdata.decode import DecodeError
from fastdata.transforms import Decode, RandomResizedCrop, ResizeCenterCrop

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import odd_images  # noqa: E402

CORRUPTIONS = 3000


@pytest.mark.parametrize("decoder", ["auto", "opencv"])
def test_random_corruptions_give_an_image_or_a_decode_error(decoder):
    sources = list(odd_images.jpeg_variants().values())
    rng = np.random.default_rng(12 if decoder == "auto" else 13)
    transforms = [
        Decode(decoder=decoder),
        RandomResizedCrop(24, decoder=decoder),
        ResizeCenterCrop(32, 24, decoder=decoder),
    ]
    count = CORRUPTIONS if decoder == "auto" else CORRUPTIONS // 3
    images = errors = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # libjpeg's warnings for what it recovers from
        for i in range(count):
            data = odd_images.corrupt(sources[i % len(sources)], rng)
            for transform in transforms:
                try:
                    out = transform(data)
                except DecodeError:
                    errors += 1
                    continue
                assert out.dtype == np.uint8 and out.ndim == 3 and out.shape[2] == 3 and min(out.shape) > 0
                if not isinstance(transform, Decode):
                    assert out.shape[:2] == transform.size
                images += 1
    assert images > 0 and errors > 0
