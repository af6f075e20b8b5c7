"""fastdata.decode._bilinear is PIL's antialiased bilinear resize, value for value, for the installed Pillow.

Random sizes (1-120 pixels a side, shrinking and enlarging, each axis on its own), random boxes (whole, integer,
fractional), noise and smooth content: every output equals ``Image.resize(size, BILINEAR, box=box,
reducing_gap=None)``. Pillow 13 runs the vertical pass first where the height shrinks by more than twice as many
pixels as the width; both orders occur here and both must match. Then what ``resize_into`` does with it, and the
errors.
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("fastdata.decode._bilinear", reason="fastdata's C extensions are not built")

from fastdata.decode import _bilinear, scaling  # noqa: E402 (after the skip)


def _reference(image: np.ndarray, size: tuple[int, int], box: tuple[float, float, float, float]) -> np.ndarray:
    height, width = size
    resized = Image.fromarray(image).resize((width, height), Image.Resampling.BILINEAR, box=box, reducing_gap=None)
    return np.asarray(resized)


def _case(rng: np.random.Generator, t: int) -> tuple[np.ndarray, tuple[int, int], tuple[float, float, float, float]]:
    h, w = (int(v) for v in rng.integers(1, 121, 2))
    image = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    if t % 3 == 0:  # smooth content: sums near a rounding boundary are rarer in noise
        image = np.asarray(Image.fromarray(image).resize((w, h), Image.Resampling.BOX))
    size = (int(rng.integers(1, 121)), int(rng.integers(1, 121)))
    if t % 4 == 0:
        box = (0.0, 0.0, float(w), float(h))
    else:
        left, upper = rng.uniform(0, w), rng.uniform(0, h)
        right, lower = rng.uniform(left, w), rng.uniform(upper, h)
        box = (left, upper, right, lower)
        if t % 4 == 1:  # whole pixels, as torchvision's crops are
            box = tuple(float(int(v)) for v in box)  # type: ignore[assignment]
        if box[2] <= box[0] or box[3] <= box[1]:
            box = (0.0, 0.0, float(w), float(h))
    return image, size, box


def test_two_thousand_random_resizes_are_pils_values():
    rng = np.random.default_rng(0)
    orders = set()
    for t in range(2000):
        image, size, box = _case(rng, t)
        out = np.empty((*size, 3), np.uint8)
        _bilinear.resize(image, out, box, scaling.PILLOW_13)
        np.testing.assert_array_equal(out, _reference(image, size, box), err_msg=f"{image.shape} {box} -> {size}")
        h, w = image.shape[:2]
        orders.add(scaling.PILLOW_13 and h - size[0] > 0 and h - size[0] > 2 * (w - size[1]))
    assert orders == ({True, False} if scaling.PILLOW_13 else {False})


def test_imagenet_sized_crops_into_224_are_pils_values():
    """The loader's case: a photo-sized smooth image, crops of every shrink band into 224 and 96."""
    rng = np.random.default_rng(1)
    image = np.asarray(Image.fromarray(rng.integers(0, 256, (94, 125, 3), dtype=np.uint8)).resize((500, 375)))
    for top, left, h, w in [(0, 0, 375, 500), (10, 20, 300, 300), (100, 100, 150, 150), (5, 7, 60, 90)]:
        for size in (224, 96):
            box = (float(left), float(top), float(left + w), float(top + h))
            out = np.empty((size, size, 3), np.uint8)
            _bilinear.resize(image, out, box, scaling.PILLOW_13)
            np.testing.assert_array_equal(out, _reference(image, (size, size), box))


def test_resize_into_gives_the_same_values_with_and_without_the_extension(monkeypatch):
    rng = np.random.default_rng(2)
    image = rng.integers(0, 256, (90, 70, 3), dtype=np.uint8)
    native, fallback = np.empty((40, 50, 3), np.uint8), np.empty((40, 50, 3), np.uint8)
    scaling.resize_into(image, native, "antialias", (3.5, 2.25, 66.0, 80.5))
    monkeypatch.setenv("FASTDATA_NATIVE", "0")  # PIL's own call
    scaling.resize_into(image, fallback, "antialias", (3.5, 2.25, 66.0, 80.5))
    np.testing.assert_array_equal(native, fallback)


@pytest.mark.parametrize(
    ("src", "out", "box", "message"),
    [
        (np.zeros((4, 4), np.uint8), np.zeros((2, 2, 3), np.uint8), (0, 0, 4, 4), "src must be"),
        (np.zeros((4, 4, 3), np.float32), np.zeros((2, 2, 3), np.uint8), (0, 0, 4, 4), "src must be"),
        (np.zeros((4, 4, 3), np.uint8)[:, ::2], np.zeros((2, 2, 3), np.uint8), (0, 0, 2, 4), "src must be"),
        (np.zeros((4, 4, 3), np.uint8), np.zeros((0, 2, 3), np.uint8), (0, 0, 4, 4), "out must not be empty"),
        (np.zeros((4, 4, 3), np.uint8), np.zeros((2, 2, 3), np.uint8), (0, 0, 5, 4), "inside the 4x4 source"),
        (np.zeros((4, 4, 3), np.uint8), np.zeros((2, 2, 3), np.uint8), (-1, 0, 4, 4), "inside the 4x4 source"),
        (np.zeros((4, 4, 3), np.uint8), np.zeros((2, 2, 3), np.uint8), (3, 0, 1, 4), "left <= right"),
    ],
)
def test_bad_arguments_are_one_line_value_errors(src, out, box, message):
    with pytest.raises(ValueError, match=message):
        _bilinear.resize(src, out, tuple(map(float, box)), True)


def test_a_read_only_output_is_refused():
    out = np.zeros((2, 2, 3), np.uint8)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="out must be a writable"):
        _bilinear.resize(np.zeros((4, 4, 3), np.uint8), out, (0.0, 0.0, 4.0, 4.0), True)
