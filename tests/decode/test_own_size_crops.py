"""A crop decoded at its own size is PIL's exact pixels: every crop size from 1x1 to 64x64, every sampling.

The DCT scale rule must never decode at a reduced scale that leaves the crop's size unchanged (``ceil(2 * 5/8)`` is
2: a 2-pixel side at 5/8 has the same pixel count as at full scale, but blurred pixels). Issue 39, item 2.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from tests.decode.test_native import _cjpeg
from tests.images import natural_image

pytest.importorskip("fastdata.decode._jpegcrop", reason="native JPEG kernel not built (python setup.py build_ext)")

from fastdata.decode import get_decoder, native  # noqa: E402 (after the skip)
from fastdata.decode.scaling import choose_scale, plan_region  # noqa: E402

SAMPLINGS = {
    "444": ("-sample", "1x1"),
    "422": ("-sample", "2x1"),
    "420": ("-sample", "2x2"),
    "411": ("-sample", "4x1"),
    "gray": ("-grayscale",),
}


def _jpeg(array: np.ndarray, sampling: str) -> bytes:
    return _cjpeg(array, *SAMPLINGS[sampling], "-quality", "90")


def _pil(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def test_the_scale_rule_never_takes_a_scale_that_keeps_the_size() -> None:
    """Every box up to 64x64 decoded at its own size plans full scale, in both planners."""
    for h in range(1, 65):
        for w in range(1, 65):
            assert choose_scale(native.NATIVE_SCALES, h, w, h, w) == (1, 1), (h, w)
            scale, y0, y1, x0, x1 = plan_region((3, 5, h, w), 80, 80, h, w, native.NATIVE_SCALES)
            assert scale == (1, 1) and (y1 - y0, x1 - x0) == (h, w), (h, w)


@pytest.mark.parametrize("sampling", list(SAMPLINGS))
def test_every_crop_size_at_its_own_size_is_pils_pixels(sampling: str) -> None:
    """Every (h, w) in 1..64 x 1..64, at offsets that walk the positions inside an MCU, through the native kernel
    (the batch call plans with the same ``plan_region``, tested above) equals PIL's decode of the file, cropped."""
    image = natural_image(np.random.default_rng(39), 83, 87)
    data = _jpeg(image, sampling)
    reference = _pil(data)
    decoder = get_decoder("native")
    bad = []
    out = {}
    for h in range(1, 65):
        for w in range(1, 65):
            top, left = (h * 7 + w) % (83 - h + 1), (w * 5 + h * 3) % (87 - w + 1)
            slot = out.setdefault((h, w), np.empty((h, w, 3), np.uint8))
            native.decode_crop_into(data, (top, left, h, w), slot)
            if not np.array_equal(slot, reference[top : top + h, left : left + w]):
                diff = int(np.abs(slot.astype(int) - reference[top : top + h, left : left + w]).max())
                bad.append(((top, left, h, w), diff))
            if (h * w) % 97 == 0:  # the generic decoder path (choose_scale) too, on a spread of sizes
                decoder.decode_crop_into(data, (top, left, h, w), slot)
                if not np.array_equal(slot, reference[top : top + h, left : left + w]):
                    bad.append((("decoder", top, left, h, w), -1))
    assert not bad, f"{len(bad)} of 4096 crops differ from PIL's pixels (box, max |diff|), e.g. {bad[:8]}"


@pytest.mark.parametrize("size", [(1, 1), (2, 3), (7, 5), (16, 16)])
@pytest.mark.parametrize("sampling", list(SAMPLINGS))
def test_every_crop_of_a_tiny_image_is_pils_pixels(size: tuple[int, int], sampling: str) -> None:
    """Every box of every position of tiny images (the sizes the regression was found on), at its own size."""
    height, width = size
    data = _jpeg(natural_image(np.random.default_rng(height * 100 + width), height, width), sampling)
    reference = _pil(data)
    bad = []
    for top in range(height):
        for left in range(width):
            for h in range(1, height - top + 1):
                for w in range(1, width - left + 1):
                    slot = np.empty((h, w, 3), np.uint8)
                    native.decode_crop_into(data, (top, left, h, w), slot)
                    if not np.array_equal(slot, reference[top : top + h, left : left + w]):
                        bad.append((top, left, h, w))
    assert not bad, f"{len(bad)} crops of the {height}x{width} image differ from PIL's pixels, e.g. {bad[:8]}"
