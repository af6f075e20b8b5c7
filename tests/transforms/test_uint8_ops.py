"""The uint8 ops against their references, op by op and magnitude by magnitude: PIL (what timm runs) and torchvision v2
on uint8 tensors. Lookup-table ops are exact; blends, warps and blurs within one level (away from the image border,
and where a nearest-neighbour sample is not a tie)."""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest
import torch
from PIL import Image, ImageEnhance, ImageFilter, ImageOps
from torchvision.transforms import functional as F1  # the test set-up installs torchvision (tools/setup.sh test)
from torchvision.transforms.v2 import functional as F

from fastdata.transforms import uint8_colour as colour
from fastdata.transforms import uint8_geometry as geometry
from tests.images import natural_image


def photos(n: int = 4, height: int = 72, width: int = 88) -> list[np.ndarray]:
    """Photo-like crops: smooth gradients and noise, plus sharp-edged shapes (the hard case for resampling)."""
    rng = np.random.default_rng(5)
    out = []
    for _ in range(n):
        image = natural_image(rng, height, width)
        for _ in range(3):
            x0, y0 = (int(v) for v in rng.integers(0, [width - 10, height - 10]))
            colour_ = tuple(int(v) for v in rng.integers(0, 256, 3))
            cv2.rectangle(image, (x0, y0), (x0 + int(rng.integers(5, 30)), y0 + int(rng.integers(5, 30))), colour_, -1)
        out.append(image)
    out.append(np.zeros((height, width, 3), np.uint8) + np.array([10, 200, 90], np.uint8))  # one value per channel
    return out


IMAGES = photos()


def pil(fn, image: np.ndarray, *args) -> np.ndarray:
    return np.asarray(fn(Image.fromarray(image), *args))


def tv(fn, image: np.ndarray, *args) -> np.ndarray:
    return fn(torch.from_numpy(image).permute(2, 0, 1).contiguous(), *args).permute(1, 2, 0).numpy()


def diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a.astype(np.int16) - b.astype(np.int16))


FACTORS = [0.0, 0.1, 0.37, 0.55, 1.0, 1.23, 1.45, 1.9, 1.99]


# ------------------------------------------------------------------------------------------ lookup tables: exact


@pytest.mark.parametrize("factor", FACTORS)
def test_brightness_is_exactly_pil_and_torchvision(factor):
    for image in IMAGES:
        assert np.array_equal(
            colour.brightness(image.copy(), factor, "pil"),
            pil(lambda im: ImageEnhance.Brightness(im).enhance(factor), image),
        )
        assert np.array_equal(colour.brightness(image.copy(), factor, "tv"), tv(F.adjust_brightness, image, factor))


@pytest.mark.parametrize("factor", FACTORS)
def test_contrast_is_pil_exactly_and_torchvision_within_one_level(factor):
    for image in IMAGES:
        assert np.array_equal(
            colour.contrast(image.copy(), factor, "pil"),
            pil(lambda im: ImageEnhance.Contrast(im).enhance(factor), image),
        )
        assert diff(colour.contrast(image.copy(), factor, "tv"), tv(F.adjust_contrast, image, factor)).max() <= 1


@pytest.mark.parametrize("bits", range(1, 9))
def test_posterize_is_exact(bits):
    for image in IMAGES:
        ours = colour.apply_lut(image.copy(), colour.posterize_lut(bits))
        assert np.array_equal(ours, pil(ImageOps.posterize, image, bits))
        assert np.array_equal(ours, tv(F.posterize, image, bits))
    assert not colour.apply_lut(IMAGES[0].copy(), colour.posterize_lut(0)).any()  # 0 bits: black, as torchvision


@pytest.mark.parametrize("threshold", [0, 1, 77, 128, 178.5, 255, 256])
def test_solarize_and_invert_are_exact(threshold):
    for image in IMAGES:
        ours = colour.apply_lut(image.copy(), colour.solarize_lut(threshold))
        if float(threshold).is_integer():
            assert np.array_equal(ours, pil(ImageOps.solarize, image, int(threshold)))
        if threshold <= 255:  # torchvision refuses thresholds above the dtype's maximum; timm's 256 inverts nothing
            assert np.array_equal(ours, tv(F.solarize, image, threshold))
        assert np.array_equal(colour.apply_lut(image.copy(), colour.invert_lut()), tv(F.invert, image))


def test_solarize_add_is_timms():
    import timm.data.auto_augment as timm_aa

    for add in (0, 33, 110, 128):
        for image in IMAGES:
            assert np.array_equal(
                colour.apply_lut(image.copy(), colour.solarize_add_lut(add)), pil(timm_aa.solarize_add, image, add)
            )


EVERY_VALUE = np.arange(256 * 3, dtype=np.int64).reshape(16, 16, 3).astype(np.uint8)  # each value in each channel


@pytest.mark.parametrize(
    "op, table, args",
    [
        *[(colour.posterize, colour.posterize_lut, (bits,)) for bits in (-3, 0, 1, 2, 3, 4, 7, 8, 9, 4.0)],
        *[
            (colour.solarize, colour.solarize_lut, (t,))
            for t in (
                -5,
                0,
                0.5,
                1,
                77,
                127.5,
                128,
                178.5,
                254.9,
                255,
                256,
                1e9,
                float("inf"),
                float("-inf"),
                float("nan"),
                np.float32(229.5),
            )
        ],
        *[(colour.solarize_add, colour.solarize_add_lut, (add,)) for add in (-20, 0, 1, 33, 99.0, 110, 128, 255, 300)],
        *[(colour.solarize_add, colour.solarize_add_lut, (40, t)) for t in (-1, 0, 1, 64, 200.5, 255, 256, 1000)],
        (lambda image: colour.invert(image), colour.invert_lut, ()),
    ],
    ids=str,
)
def test_the_bitwise_point_ops_are_their_tables(op, table, args):
    """posterize, solarize, solarize-add and invert (what the policies run) give their lookup table's bytes, in
    place, for every value in every channel and every argument, edge cases included."""
    for image in (EVERY_VALUE, IMAGES[0], IMAGES[0][:1, :1]):
        work = image.copy()
        expected = colour.apply_lut(image.copy(), table(*args))
        assert op(work, *args) is work
        assert np.array_equal(work, expected), args


def test_autocontrast_and_equalize_are_exact():
    for image in IMAGES + [np.clip(IMAGES[0] // 3 + 40, 0, 255).astype(np.uint8)]:
        assert np.array_equal(colour.autocontrast(image.copy(), "pil"), pil(ImageOps.autocontrast, image))
        assert np.array_equal(colour.autocontrast(image.copy(), "tv"), tv(F.autocontrast, image))
        assert np.array_equal(colour.equalize(image.copy()), pil(ImageOps.equalize, image))
        assert np.array_equal(colour.equalize(image.copy()), tv(F.equalize, image))


# --------------------------------------------------------------------------------- blends: within one level


@pytest.mark.parametrize("factor", FACTORS)
def test_saturation_and_sharpness_within_one_level(factor):
    for image in IMAGES:
        assert (
            diff(
                colour.saturation(image.copy(), factor, "pil"),
                pil(lambda im: ImageEnhance.Color(im).enhance(factor), image),
            ).max()
            <= 1
        )
        assert diff(colour.saturation(image.copy(), factor, "tv"), tv(F.adjust_saturation, image, factor)).max() <= 1
        assert (
            diff(
                colour.sharpness(image.copy(), factor, "pil"),
                pil(lambda im: ImageEnhance.Sharpness(im).enhance(factor), image),
            ).max()
            <= 1
        )
        assert diff(colour.sharpness(image.copy(), factor, "tv"), tv(F.adjust_sharpness, image, factor)).max() <= 1


@pytest.mark.parametrize("size", [(3, 3), (3, 8), (7, 4), (72, 88), (224, 224)], ids=str)
def test_sharpness_smooths_exactly_as_pils_smooth_filter(size):
    """The image sharpness blends with: PIL's ``ImageFilter.SMOOTH``, byte for byte (a 16-bit box sum and the
    centre, divided by 13 and rounded), on photos, noise, and the extremes."""
    h, w = size
    rng = np.random.default_rng(h * w)
    images = [
        rng.integers(0, 256, (h, w, 3), np.uint8),
        np.full((h, w, 3), 255, np.uint8),
        np.zeros((h, w, 3), np.uint8),
        (rng.integers(0, 2, (h, w, 3)) * 255).astype(np.uint8),
    ]
    if h >= 16:
        images.append(natural_image(rng, h, w))
    for image in images:
        assert np.array_equal(colour._smooth(image), pil(lambda im: im.filter(ImageFilter.SMOOTH), image))


def test_grayscale_is_pils_l_within_one_level():
    for image in IMAGES:
        ours = colour.grayscale(image.copy(), "pil")
        assert (ours[..., 0] == ours[..., 1]).all() and (ours[..., 0] == ours[..., 2]).all()
        assert diff(ours, pil(lambda im: im.convert("L").convert("RGB"), image)).max() <= 1


@pytest.mark.parametrize("radius", [0.1, 0.3, 0.5, 0.77, 1.0, 1.37, 2.0])
def test_gaussian_blur_is_pils_box_blur(radius):
    """PIL's 24-bit fixed point decides near-ties that float32 cannot: a few pixels in 10,000 are 2 levels off."""
    d = np.concatenate(
        [
            diff(
                colour.gaussian_blur(image.copy(), radius),
                pil(lambda im: im.filter(ImageFilter.GaussianBlur(radius)), image),
            ).ravel()
            for image in IMAGES
        ]
    )
    assert d.max() <= 2 and np.mean(d > 1) < 1e-3 and np.mean(d == 0) > 0.85


@pytest.mark.parametrize("factor", [-0.5, -0.21, 0.0, 0.05, 0.33, 0.5])
def test_hue_is_torchvisions_pil_hue_within_one_level_but_a_few_pixels(factor):
    d = np.concatenate(
        [diff(colour.hue(image.copy(), factor), pil(F1.adjust_hue, image, factor)).ravel() for image in IMAGES]
    )
    assert np.mean(d > 1) < 5e-3 and d.max() <= 6 and np.mean(d == 0) > 0.99


def test_hue_rejects_factors_outside_half():
    with pytest.raises(ValueError, match="hue factor"):
        colour.hue(IMAGES[0].copy(), 0.6)


# ------------------------------------------------------------------------------------------------- geometry


def rotation(degrees: float, width: int, height: int) -> tuple:
    angle = -math.radians(degrees)
    a, b = round(math.cos(angle), 15), round(math.sin(angle), 15)
    cx, cy = width / 2.0, height / 2.0
    return (a, b, a * -cx + b * -cy + cx, -b, a, -b * -cx + a * -cy + cy)


def sample_points(coeffs: tuple, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Where each output pixel's centre samples the input (PIL's convention)."""
    a, b, c, d, e, f = coeffs
    yy, xx = np.mgrid[0:height, 0:width] + 0.5
    return a * xx + b * yy + c, d * xx + e * yy + f


def interior(coeffs: tuple, height: int, width: int, margin: float = 2.5) -> np.ndarray:
    x, y = sample_points(coeffs, height, width)
    return (x >= margin) & (x < width - margin) & (y >= margin) & (y < height - margin)


def ties(coeffs: tuple, height: int, width: int, tolerance: float = 2e-3) -> np.ndarray:
    """Pixels whose nearest-neighbour sample is a tie (a sample point on a pixel edge, to within the references'
    precision: torchvision's float32 grid, OpenCV's 1/1024 pixel): either neighbour is right."""
    x, y = sample_points(coeffs, height, width)
    return (np.abs(x - np.round(x)) < tolerance) | (np.abs(y - np.round(y)) < tolerance)


GEOMETRIC = {  # name -> PIL coefficients for an image of (height, width)
    "shear_x 0.27": lambda h, w: (1, 0.27, 0, 0, 1, 0),
    "shear_x -0.09": lambda h, w: (1, -0.09, 0, 0, 1, 0),
    "shear_y -0.2": lambda h, w: (1, 0, 0, -0.2, 1, 0),
    "shear_y 0.3": lambda h, w: (1, 0, 0, 0.3, 1, 0),
    "translate_x 17.3": lambda h, w: (1, 0, 17.3, 0, 1, 0),
    "translate_x -40": lambda h, w: (1, 0, -40, 0, 1, 0),
    "translate_y -9.6": lambda h, w: (1, 0, 0, 0, 1, -9.6),
    "translate_y 0.4": lambda h, w: (1, 0, 0, 0, 1, 0.4),
    "rotate 23": lambda h, w: rotation(23.0, w, h),
    "rotate -135": lambda h, w: rotation(-135.0, w, h),
}
RESAMPLE = {"nearest": Image.NEAREST, "bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
@pytest.mark.parametrize("name", list(GEOMETRIC))
def test_warps_match_pil_inside_the_image(name, interpolation):
    fill = (124, 116, 104)
    for image in IMAGES:
        h, w = image.shape[:2]
        coeffs = GEOMETRIC[name](h, w)
        ours = geometry.affine(image, coeffs, interpolation, fill)
        ref = pil(
            lambda im: im.transform((w, h), Image.AFFINE, coeffs, resample=RESAMPLE[interpolation], fillcolor=fill),  # noqa: B023 (called within this iteration)
            image,
        )
        d = diff(ours, ref).max(axis=2)
        inside = interior(coeffs, h, w) & (~ties(coeffs, h, w) if interpolation == "nearest" else True)
        assert d[inside].max() <= 1, (name, interpolation)
        outside = np.array([sample_points(coeffs, h, w)[0], sample_points(coeffs, h, w)[1]])
        far = (outside[0] < -1.5) | (outside[0] > w + 1.5) | (outside[1] < -1.5) | (outside[1] > h + 1.5)
        assert (ours[far] == fill).all()  # pixels mapping well outside are the fill colour


@pytest.mark.parametrize("name", [n for n in GEOMETRIC if n.startswith("translate")])
def test_translations_match_pils_bicubic_inside_the_image(name):
    """Translations are one-dimensional: fastdata filters with PIL's own bicubic kernel (Keys, a = -1). Rotations and
    shears: test_affine_bicubic.py."""
    for image in IMAGES:
        h, w = image.shape[:2]
        coeffs = GEOMETRIC[name](h, w)
        ours = geometry.affine(image, coeffs, "bicubic", (0, 0, 0))
        ref = pil(lambda im: im.transform((w, h), Image.AFFINE, coeffs, resample=Image.BICUBIC), image)  # noqa: B023 (called within this iteration)
        assert diff(ours, ref).max(axis=2)[interior(coeffs, h, w, margin=0.5)].max() <= 1


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
@pytest.mark.parametrize("shear", [-0.3, -0.09, 0.21, 0.99])
def test_shear_matches_torchvision(shear, interpolation):
    mode = F.InterpolationMode(interpolation)
    for image in IMAGES:
        h, w = image.shape[:2]
        for axis, coeffs in ((0, (1, shear, 0, 0, 1, 0)), (1, (1, 0, 0, shear, 1, 0))):
            ours = (geometry.shear_x if axis == 0 else geometry.shear_y)(image, shear, interpolation, (0, 0, 0))
            angles = [math.degrees(math.atan(shear)), 0.0][:: 1 if axis == 0 else -1]
            ref = tv(
                lambda t: F.affine(
                    t,
                    angle=0.0,
                    translate=[0, 0],
                    scale=1.0,
                    shear=angles,  # noqa: B023 (called within this iteration)
                    interpolation=mode,
                    center=[0, 0],
                ),
                image,
            )
            inside = interior(coeffs, h, w) & (~ties(coeffs, h, w) if interpolation == "nearest" else True)
            assert diff(ours, ref).max(axis=2)[inside].max() <= 1


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
@pytest.mark.parametrize("degrees", [-135.0, -30.0, 9.0, 29.0])
def test_rotate_matches_torchvision(degrees, interpolation):
    for image in IMAGES:
        h, w = image.shape[:2]
        coeffs = rotation(degrees, w, h)
        ours = geometry.rotate(image, degrees, interpolation, (7, 8, 9))
        ref = tv(
            lambda t: F.rotate(t, degrees, interpolation=F.InterpolationMode(interpolation), fill=[7, 8, 9]), image
        )
        inside = interior(coeffs, h, w) & (~ties(coeffs, h, w) if interpolation == "nearest" else True)
        assert diff(ours, ref).max(axis=2)[inside].max() <= 1


@pytest.mark.parametrize("pixels", [-50, -1, 3, 31])
def test_whole_pixel_translation_matches_torchvision_exactly(pixels):
    """torchvision's ``translate=[t, 0]`` moves the content by ``t``: fastdata's ``translate(-t)``."""
    for image in IMAGES:
        for axis in (0, 1):
            ours = geometry.translate(
                image, -pixels if axis == 0 else 0.0, 0.0 if axis == 0 else -pixels, "nearest", (1, 2, 3)
            )
            moved = [pixels, 0] if axis == 0 else [0, pixels]
            ref = tv(
                lambda t: F.affine(
                    t,
                    angle=0.0,
                    translate=moved,  # noqa: B023 (called within this iteration)
                    scale=1.0,
                    shear=[0.0, 0.0],
                    interpolation=F.InterpolationMode.NEAREST,
                    fill=[1, 2, 3],
                ),
                image,
            )
            assert np.array_equal(ours, ref)


def test_hflip_mirrors():
    image = IMAGES[0]
    assert np.array_equal(geometry.hflip(image), image[:, ::-1])
