"""The C extension ``fastdata.transforms._lut``: lookup tables applied in place (one table, or one per channel), each
kernel this CPU runs (``_lut.KERNELS``) against numpy's indexing, and the colour ops that use it against OpenCV's
``cv2.LUT`` path."""

from __future__ import annotations

import numpy as np
import pytest

from fastdata.transforms import _lut
from fastdata.transforms import uint8_colour as colour
from tests.transforms.test_uint8_ops import IMAGES

RNG = np.random.default_rng(11)
ONE = RNG.integers(0, 256, 256, np.uint8)
THREE = RNG.integers(0, 256, (3, 256), np.uint8)
# sizes around the fast kernel's 64-byte steps and the 192 bytes after which its channel pattern repeats
SHAPES = [
    (0, 5, 3),
    (1, 1, 3),
    (1, 21, 3),
    (1, 22, 3),
    (2, 32, 3),
    (5, 13, 3),
    (64, 1, 3),
    (65, 3, 3),
    (224, 224, 3),
    (7,),
    (64,),
    (129,),
]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("kernel", _lut.KERNELS)
def test_each_kernel_is_table_indexing(shape, kernel):
    image = RNG.integers(0, 256, shape, np.uint8)
    image.flat[: min(image.size, 256)] = np.arange(256, dtype=np.uint8)[: image.size]  # every value, where it fits
    out = image.copy()
    assert _lut.apply(out, ONE, kernel=kernel) is None
    assert np.array_equal(out, ONE[image])
    if len(shape) == 3:
        out = image.copy()
        _lut.apply(out, THREE, kernel=kernel)
        assert np.array_equal(out, THREE[np.arange(3), image])


def test_the_default_kernel_is_the_last_and_all_write_the_same_bytes():
    image = IMAGES[0]
    outs = []
    for kernel in (None, *_lut.KERNELS):
        out = image.copy()
        _lut.apply(out, THREE, kernel=kernel)
        outs.append(out)
    assert _lut.KERNELS[0] == "baseline" and all(np.array_equal(out, outs[0]) for out in outs[1:])


GOOD = np.zeros((4, 5, 3), np.uint8)


@pytest.mark.parametrize(
    "image, table, kernel, error, match",
    [
        (GOOD.tolist(), ONE, None, TypeError, "image must be a uint8 numpy array"),
        (GOOD.astype(np.int16), ONE, None, TypeError, "image must be uint8"),
        (GOOD[:, ::2], ONE, None, ValueError, "image must be C-contiguous"),
        (np.frombuffer(bytes(60), np.uint8).reshape(4, 5, 3), ONE, None, ValueError, "image must be writable"),
        (GOOD, ONE.astype(np.int32), None, TypeError, "table must be uint8"),
        (GOOD, ONE[:255], None, ValueError, r"table must have shape \(256,\) or \(3, 256\)"),
        (GOOD, THREE[:2], None, ValueError, r"table must have shape"),
        (GOOD, np.zeros((256, 3), np.uint8), None, ValueError, r"table must have shape"),
        (
            GOOD[..., :2].copy(),
            THREE,
            None,
            ValueError,
            r"a \(3, 256\) table .* needs an RGB image of shape \(H, W, 3\)",
        ),
        (np.zeros(300, np.uint8), THREE, None, ValueError, "needs an RGB image"),
        (GOOD, ONE, "avx9", ValueError, r"kernel must be one of _lut.KERNELS \(baseline.*\), got 'avx9'"),
        (GOOD, ONE, 3, TypeError, "must be str or None"),
    ],
)
def test_bad_input_is_refused_in_one_line(image, table, kernel, error, match):
    with pytest.raises(error, match=match) as info:
        _lut.apply(image, table, kernel=kernel)
    assert "\n" not in str(info.value)


def test_a_table_inside_the_image_is_refused():
    buffer = np.zeros(1024, np.uint8)
    with pytest.raises(ValueError, match="table must not overlap image"):
        _lut.apply(buffer, buffer[100:356])


@pytest.mark.parametrize(
    "op",
    [
        "brightness",
        "contrast pil",
        "contrast tv",
        "autocontrast pil",
        "autocontrast tv",
        "equalize",
        "apply_lut per channel",
    ],
)
def test_the_colour_ops_give_opencvs_bytes_with_or_without_the_extension(op, monkeypatch):
    """The ops use ``_lut`` where its fast kernel runs (else ``cv2.LUT``); hiding the extension gives the same."""
    name, *flavour = op.split()
    run = {
        "brightness": lambda im: colour.brightness(im, 1.37),
        "contrast": lambda im: colour.contrast(im, 0.61, *flavour),
        "autocontrast": lambda im: colour.autocontrast(im, *flavour),
        "equalize": colour.equalize,
        "apply_lut": lambda im: colour.apply_lut(im, np.ascontiguousarray(THREE.T[None])),
    }[name]
    images = IMAGES + [np.clip(IMAGES[0] // 3 + 40, 0, 255).astype(np.uint8), IMAGES[1][:1, :3].copy()]
    fast = [run(image.copy()) for image in images]
    monkeypatch.setattr(colour, "_lut", None)
    for image, ours in zip(images, fast, strict=False):
        assert np.array_equal(ours, run(image.copy()))
