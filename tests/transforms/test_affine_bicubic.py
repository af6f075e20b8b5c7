"""Bicubic rotate and shear against PIL's affine bicubic (what timm runs for half of its geometric draws).

The C extension ``fastdata.transforms._affine`` is PIL's kernel (Keys, a = -1, clamped taps, the fill decided per
pixel): within one level of PIL away from the edge of the region whose sample points fall inside the image (1-pixel
strip), and the strip itself bounded. Without the extension the warp falls back to OpenCV's cubic (a = -0.75)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from PIL import Image

from fastdata.transforms import _affine
from fastdata.transforms import uint8_geometry as geometry
from tests.images import natural_image
from tests.transforms.test_uint8_ops import IMAGES, diff, photos, rotation, sample_points

SIZES = [(72, 88), (61, 47), (224, 224), (1, 1), (2, 3), (3, 2), (5, 4)]
FILLS = [(124, 116, 104), (0, 0, 0), (255, 3, 77), (10, 200, 90)]


def image_of(height: int, width: int, seed: int) -> np.ndarray:
    """A photo-like crop with sharp edges where there is room for them, else noise; seed 3: one flat colour."""
    if seed == 3:
        return np.zeros((height, width, 3), np.uint8) + np.array([10, 200, 91], np.uint8)
    if height >= 16 and width >= 16:
        return photos(1, height, width)[0] if seed == 0 else natural_image(np.random.default_rng(seed), height, width)
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), np.uint8)


def regions(coeffs: tuple, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """PIL's per-pixel rule (the sample point inside ``[0, W) x [0, H)``), and the 1-pixel strip on both sides of the
    edge of that region."""
    x, y = sample_points(coeffs, height, width)
    valid = ((x >= 0) & (x < width) & (y >= 0) & (y < height)).astype(np.uint8)
    kernel = np.ones((3, 3), np.uint8)
    strip = cv2.dilate(valid, kernel).astype(bool) & ~cv2.erode(valid, kernel).astype(bool)
    return valid.astype(bool), strip


def check_against_pil(ours: np.ndarray, ref: np.ndarray, coeffs: tuple, fill: tuple) -> tuple[int, int, int]:
    """Asserts the agreement; returns (pixels off by more than 0 off the strip, pixels off the strip, strip pixels
    off by more than 1)."""
    h, w = ours.shape[:2]
    valid, strip = regions(coeffs, h, w)
    d = diff(ours, ref).max(axis=2)
    assert d[~strip].max(initial=0) <= 1
    assert (ours[~valid & ~strip] == fill).all()  # the fill colour, exactly, where PIL fills
    far_off = int((d[strip] > 1).sum())
    assert far_off <= 0.01 * max(1, int(strip.sum()))  # the strip: at most 1% more than a level off
    return int((d[~strip] > 0).sum()), int((~strip).sum()), far_off


@pytest.mark.parametrize("size", SIZES, ids=[f"{h}x{w}" for h, w in SIZES])
def test_bicubic_rotate_and_shear_are_pils_within_one_level(size):
    h, w = size
    off = total = 0
    for seed, fill in enumerate(FILLS):
        image = image_of(h, w, seed)
        pil_image = Image.fromarray(image)
        for degrees in (-135.0, -30.0, -7.3, 0.5, 13.0, 29.5, 90.0):
            ours = geometry.rotate(image, degrees, "bicubic", fill)
            ref = np.asarray(pil_image.rotate(degrees, resample=Image.BICUBIC, fillcolor=fill))
            counts = check_against_pil(ours, ref, rotation(degrees, w, h), fill)
            off, total = off + counts[0], total + counts[1]
        for factor in (-0.3, -0.13, 0.05, 0.21, 0.3, 1.7):
            for op, coeffs in (
                (geometry.shear_x, (1, factor, 0, 0, 1, 0)),
                (geometry.shear_y, (1, 0, 0, factor, 1, 0)),
            ):
                ours = op(image, factor, "bicubic", fill)
                ref = np.asarray(
                    pil_image.transform((w, h), Image.AFFINE, coeffs, resample=Image.BICUBIC, fillcolor=fill)
                )
                counts = check_against_pil(ours, ref, coeffs, fill)
                off, total = off + counts[0], total + counts[1]
    if h * w >= 256:  # PIL's kernel, not a near one: float32 rounding flips a few truncations only
        assert off <= 2e-3 * total


def test_a_strided_view_warps_as_its_copy():
    image = IMAGES[0]
    view = image[::2, ::-1]  # neither C-contiguous nor positive strides
    coeffs = (1, 0.27, 0, 0, 1, 0)
    ref = np.asarray(
        Image.fromarray(np.ascontiguousarray(view)).transform(
            view.shape[1::-1], Image.AFFINE, coeffs, resample=Image.BICUBIC
        )
    )
    ours = geometry.shear_x(view, 0.27, "bicubic", (0, 0, 0))
    assert np.array_equal(ours, geometry.shear_x(np.ascontiguousarray(view), 0.27, "bicubic", (0, 0, 0)))
    check_against_pil(ours, ref, coeffs, (0, 0, 0))


@pytest.mark.parametrize("hide", ["attribute", "FASTDATA_NATIVE=0"])
def test_without_the_extension_bicubic_falls_back_to_opencvs_cubic(hide, monkeypatch):
    """The documented fallback: OpenCV's cubic (a = -0.75) against PIL's (a = -1), a few levels at edges."""
    shear = geometry.shear_x(IMAGES[0], 0.27, "bicubic", (9, 8, 7))  # the extension's: not OpenCV's
    matrix = np.array([[1.0, 0.27, 0.5 * 0.27], [0.0, 1.0, 0.0]])
    opencv = cv2.warpAffine(
        IMAGES[0],
        matrix,
        IMAGES[0].shape[1::-1],
        flags=cv2.INTER_CUBIC | cv2.WARP_INVERSE_MAP,
        borderMode=cv2.BORDER_CONSTANT,
        borderValue=(9, 8, 7, 0),
    )
    assert not np.array_equal(shear, opencv)
    if hide == "attribute":
        monkeypatch.setattr(geometry, "_affine", None)
    else:
        monkeypatch.setenv("FASTDATA_NATIVE", "0")
    for coeffs in ((1, 0.27, 0, 0, 1, 0), rotation(23.0, 88, 72)):
        for image in IMAGES[:4]:
            h, w = image.shape[:2]
            ours = geometry.affine(image, coeffs, "bicubic", (9, 8, 7))
            a, b, c, d, e, f = coeffs
            matrix = np.array([[a, b, c + 0.5 * (a + b - 1.0)], [d, e, f + 0.5 * (d + e - 1.0)]])
            opencv = cv2.warpAffine(
                image,
                matrix,
                (w, h),
                flags=cv2.INTER_CUBIC | cv2.WARP_INVERSE_MAP,
                borderMode=cv2.BORDER_CONSTANT,
                borderValue=(9, 8, 7, 0),
            )
            assert np.array_equal(ours, opencv)
            ref = np.asarray(Image.fromarray(image).transform((w, h), Image.AFFINE, coeffs, resample=Image.BICUBIC))
            x, y = sample_points(coeffs, h, w)
            inside = (x >= 2.5) & (x < w - 2.5) & (y >= 2.5) & (y < h - 2.5)
            d = diff(ours, ref)[inside]
            assert d.mean() < 1.0 and d.max() <= 24


# Maps whose rows take each path of the kernel: rotations (4 x 4 taps), shears along x (every row's fraction down is
# 0: the taps of one input row), along y (no fraction across: one column), scales and mirrors of one axis (one row or
# column, its columns not consecutive), and maps mixing everything.
MAPS = [
    ("rotate 29.5", None),
    ("rotate -131", None),
    ("shear_x 0.3", (1, 0.3, 0, 0, 1, 0)),
    ("shear_x -1.7", (1, -1.7, 0.4, 0, 1, 0)),
    ("shear_y 0.21", (1, 0, 0, 0.21, 1, 0)),
    ("shear_y -0.3", (1, 0, 0, -0.3, 1, 2.0)),
    ("scale x", (1.37, 0.2, -3.1, 0, 1, 0)),
    ("mirror x", (-0.8, 0, 40.2, 0, 1, -1)),
    ("scale y", (1, 0, 2, 0.1, 0.63, 1.7)),
    ("mirror y", (1, 0, -1, -0.05, -1.2, 50.5)),
    ("any", (0.9, -0.35, 7.3, 0.41, 1.1, -6.2)),
]


@pytest.mark.parametrize(
    "size", SIZES + [(9, 224), (224, 7)], ids=[f"{h}x{w}" for h, w in SIZES + [(9, 224), (224, 7)]]
)
def test_every_kernel_is_pils_and_they_write_the_same_bytes(size):
    """Each kernel this CPU runs (``_affine.KERNELS``: the one-pixel baseline, AVX2's two pixels per vector,
    AVX-512's four) against PIL on maps that take each of the kernel's paths, and against each other byte for byte."""
    h, w = size
    for seed, fill in enumerate(FILLS):
        image = image_of(h, w, seed)
        pil_image = Image.fromarray(image)
        for name, coeffs in MAPS:
            coeffs = coeffs or rotation(float(name.split()[1]), w, h)
            ref = np.asarray(pil_image.transform((w, h), Image.AFFINE, coeffs, resample=Image.BICUBIC, fillcolor=fill))
            outs = []
            for kernel in _affine.KERNELS:
                out = np.full_like(image, 7)
                _affine.bicubic(image, out, coeffs, fill, kernel=kernel)
                check_against_pil(out, ref, coeffs, fill)
                outs.append(out)
            assert all(np.array_equal(out, outs[0]) for out in outs[1:]), (name, _affine.KERNELS)


def test_the_default_kernel_is_the_last_one():
    image = IMAGES[1]
    coeffs = rotation(17.0, image.shape[1], image.shape[0])
    default, last = np.empty_like(image), np.empty_like(image)
    _affine.bicubic(image, default, coeffs, (1, 2, 3))
    _affine.bicubic(image, last, coeffs, (1, 2, 3), kernel=_affine.KERNELS[-1])
    assert _affine.KERNELS[0] == "baseline" and np.array_equal(default, last)


GOOD = np.zeros((4, 5, 3), np.uint8)
COEFFS = (1.0, 0.2, 0.0, 0.0, 1.0, 0.0)


@pytest.mark.parametrize(
    "image, out, coeffs, fill, error, match",
    [
        (GOOD[:, ::2], np.zeros((4, 3, 3), np.uint8), COEFFS, (0, 0, 0), ValueError, "C-contiguous"),
        (GOOD.astype(np.float32), GOOD.copy(), COEFFS, (0, 0, 0), TypeError, "uint8"),
        (GOOD.astype(np.int8), GOOD.copy(), COEFFS, (0, 0, 0), TypeError, "uint8"),
        (GOOD[..., 0], GOOD.copy(), COEFFS, (0, 0, 0), ValueError, r"\(H, W, 3\)"),
        (np.zeros((4, 5, 4), np.uint8), GOOD.copy(), COEFFS, (0, 0, 0), ValueError, r"\(H, W, 3\)"),
        (GOOD.tolist(), GOOD.copy(), COEFFS, (0, 0, 0), TypeError, "numpy array"),
        (GOOD, np.zeros((5, 4, 3), np.uint8), COEFFS, (0, 0, 0), ValueError, "out must have the image's shape"),
        (GOOD, np.zeros((4, 10, 3), np.uint8)[:, ::2], COEFFS, (0, 0, 0), ValueError, "C-contiguous"),
        (GOOD, GOOD.astype(np.float64), COEFFS, (0, 0, 0), TypeError, "uint8"),
        (GOOD, np.frombuffer(bytes(60), np.uint8).reshape(4, 5, 3), COEFFS, (0, 0, 0), ValueError, "writable"),
        (GOOD, GOOD, COEFFS, (0, 0, 0), ValueError, "overlap"),
        (GOOD, GOOD.copy(), (1.0, float("nan"), 0, 0, 1, 0), (0, 0, 0), ValueError, "finite"),
        (GOOD, GOOD.copy(), (1.0, 0, float("inf"), 0, 1, 0), (0, 0, 0), ValueError, "finite"),
        (GOOD, GOOD.copy(), COEFFS, (0, 256, 0), ValueError, "0..255"),
        (GOOD, GOOD.copy(), COEFFS, (-1, 0, 0), ValueError, "0..255"),
        (GOOD, GOOD.copy(), COEFFS[:5], (0, 0, 0), TypeError, "length 6"),
        (GOOD, GOOD.copy(), COEFFS, (0, 0), TypeError, "length 3"),
    ],
)
def test_the_c_entry_point_refuses_bad_input_in_one_line(image, out, coeffs, fill, error, match):
    with pytest.raises(error, match=match) as info:
        _affine.bicubic(image, out, coeffs, fill)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "kernel, error, match",
    [
        ("avx1024", ValueError, r"kernel must be one of _affine.KERNELS \(baseline.*\), got 'avx1024'"),
        ("", ValueError, "kernel must be one of"),
        (2, TypeError, "must be str or None"),
    ],
)
def test_an_unknown_kernel_is_refused_in_one_line(kernel, error, match):
    with pytest.raises(error, match=match) as info:
        _affine.bicubic(GOOD, GOOD.copy(), COEFFS, (0, 0, 0), kernel=kernel)
    assert "\n" not in str(info.value)


def test_the_c_entry_point_writes_out_and_leaves_the_image():
    image = IMAGES[0].copy()
    before = image.copy()
    out = np.empty_like(image)
    assert _affine.bicubic(image, out, (1.0, -0.3, 0.0, 0.0, 1.0, 0.0), (1, 2, 3)) is None
    assert np.array_equal(image, before)
    assert np.array_equal(out, geometry.shear_x(image, -0.3, "bicubic", (1, 2, 3)))
    empty = np.zeros((0, 4, 3), np.uint8)
    _affine.bicubic(empty, np.zeros_like(empty), COEFFS, (0, 0, 0))  # nothing to do, no crash
