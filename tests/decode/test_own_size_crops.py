"""A crop decoded at its own size (output == crop size) is PIL's exact pixels, for every crop size of small images.

The DCT scale rule once decoded 1-2 pixel sides at 5/8 (``ceil(side * 5/8) >= side``) and resized back. Here every
image height and every width from 1 to 64 occurs (64 images per subsampling, heights against a shuffled column of
widths, plus the 64x64 image). In the 64x64 image every crop size ``(h, w)`` occurs; in the others every pair of the
sides 1-5, the middle and the last two of each axis. Positions step through the image systematically (coprime
strides), so corners, edges and middles all occur; each crop is compared with PIL's decode of the file, sliced.
"""

from __future__ import annotations

import io
import shutil
import subprocess

import numpy as np
import pytest
from PIL import Image

from tests.images import encode, natural_image

pytest.importorskip("fastdata.decode._jpegcrop", reason="native JPEG kernel not built")

from fastdata.decode import native  # noqa: E402 (after the skip)
from fastdata.decode.scaling import KERNEL_SCALES, TURBOJPEG_SCALES, choose_scale, plan_region  # noqa: E402

SIDES = range(1, 65)


def _cjpeg_411(array: np.ndarray) -> bytes:
    cjpeg = shutil.which("cjpeg")
    if cjpeg is None:
        pytest.skip("cjpeg (apt-get install libjpeg-turbo-progs) is needed to make a 4:1:1 JPEG")
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="PPM")
    args = [cjpeg, "-sample", "4x1", "-quality", "90"]
    return subprocess.run(args, input=buf.getvalue(), capture_output=True, check=True).stdout


ENCODERS = {
    "444": lambda a: encode(a, "JPEG", quality=90, subsampling=0),
    "422": lambda a: encode(a, "JPEG", quality=90, subsampling=1),
    "420": lambda a: encode(a, "JPEG", quality=90, subsampling=2),
    "411": _cjpeg_411,
    "gray": lambda a: encode(a[..., 0], "JPEG", quality=90),
}


def _image_sizes() -> list[tuple[int, int]]:
    """Every height and every width 1..64 (heights paired with a fixed shuffle of the widths), and 64x64."""
    widths = np.random.default_rng(64).permutation(64) + 1
    return [(h, int(w)) for h, w in zip(SIDES, widths, strict=True)] + [(64, 64)]


def _sides(n: int, every: bool) -> list[int]:
    """Crop sides to try in an axis of ``n`` pixels: all of them, or 1-5, the middle and the last two."""
    return list(range(1, n + 1)) if every else sorted({s for s in (1, 2, 3, 4, 5, n // 2, n - 1, n) if 1 <= s <= n})


@pytest.mark.parametrize("scales", [KERNEL_SCALES, TURBOJPEG_SCALES])
def test_scale_rule_keeps_full_scale_at_own_size(scales):
    for h in SIDES:
        for w in SIDES:
            assert choose_scale(scales, h, w, h, w) == (1, 1), (h, w)
            assert plan_region((0, 0, h, w), h, w, h, w, scales)[0] == (1, 1), (h, w)
            assert plan_region((3, 5, h, w), h + 7, w + 9, h, w, scales) == ((1, 1), 3, 3 + h, 5, 5 + w), (h, w)


@pytest.mark.parametrize("subsampling", sorted(ENCODERS))
def test_own_size_crops_are_pils_pixels(subsampling):
    rng = np.random.default_rng(5)
    wrong = []
    for height, width in _image_sizes():
        data = ENCODERS[subsampling](natural_image(rng, height, width))
        reference = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        step = 0
        for h in _sides(height, every=height == 64):
            for w in _sides(width, every=width == 64 and height == 64):
                step += 1  # positions stepped through the image (coprime strides), so corners and middles all occur
                top, left = (step * 7) % (height - h + 1), (step * 11) % (width - w + 1)
                out = np.empty((h, w, 3), np.uint8)
                native.decode_crop_into(data, (top, left, h, w), out)
                if not np.array_equal(out, reference[top : top + h, left : left + w]):
                    wrong.append((height, width, top, left, h, w))
    assert not wrong, f"{len(wrong)} crops differ from PIL's pixels, e.g. (image h, w, top, left, h, w) {wrong[:5]}"
