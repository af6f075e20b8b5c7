"""The decode-time policies' op tables.

One dispatcher over the uint8 ops, timm's RandAugment ops with their
magnitude-to-argument maps (``timm.data.auto_augment.LEVEL_TO_ARG``), torchvision v2's magnitude bins
(``RandAugment``, ``TrivialAugmentWide``, ``AutoAugment``) and AutoAugment's ImageNet sub-policies.

Every op is named by what it does to the pixels (``apply_op``); the tables say which op, with which argument, a
policy's entry is. Geometric arguments follow PIL's convention (:mod:`fastdata.transforms.uint8_geometry`):
torchvision's ``TranslateX`` by ``t`` pixels is ``translate_x`` by ``-t``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import torch

from fastdata.transforms import uint8_colour as colour
from fastdata.transforms import uint8_geometry as geometry

__all__ = ["GEOMETRIC", "TIMM_OPS", "TV_IMAGENET_POLICY", "apply_op", "timm_op_names", "tv_bins"]

#: Ops that resample the image (they take ``interpolation`` and ``fill``).
GEOMETRIC = frozenset({"shear_x", "shear_y", "translate_x", "translate_y", "rotate"})


def apply_op(
    image: np.ndarray, name: str, arg: float, *, flavour: str, interpolation: str, fill: tuple[int, int, int]
) -> np.ndarray:
    """Apply op ``name`` with argument ``arg`` to a uint8 ``(H, W, 3)`` image; returns the result (maybe in place).

    Raises:
        ValueError: an unknown op name.
    """
    if name in GEOMETRIC:
        if name == "rotate":
            return geometry.rotate(image, arg, interpolation, fill)
        if name == "shear_x":
            return geometry.shear_x(image, arg, interpolation, fill)
        if name == "shear_y":
            return geometry.shear_y(image, arg, interpolation, fill)
        dx, dy = (arg, 0.0) if name == "translate_x" else (0.0, arg)
        return geometry.translate(image, dx, dy, interpolation, fill)
    if name in _ENHANCE:
        return _ENHANCE[name](image, arg, flavour)
    if name in _POINT:
        return _POINT[name](image, arg)
    if name == "autocontrast":
        return colour.autocontrast(image, flavour)
    if name == "equalize":
        return colour.equalize(image)
    if name == "grayscale":
        return colour.grayscale(image, flavour)
    if name == "gaussian_blur":
        return colour.gaussian_blur(image, arg)
    if name == "hue":
        return colour.hue(image, arg)
    if name == "identity":
        return image
    raise ValueError(f"unknown op {name!r}")


_ENHANCE: dict[str, Callable] = {
    "brightness": colour.brightness,
    "contrast": colour.contrast,
    "color": colour.saturation,
    "sharpness": colour.sharpness,
}
_POINT: dict[str, Callable] = {
    "posterize": colour.posterize,
    "solarize": colour.solarize,
    "solarize_add": colour.solarize_add,
    "invert": lambda image, _: colour.invert(image),
}


# --- timm ---------------------------------------------------------------------------------------------------------
# name -> (op, level(m, hparams, negate) -> arg, or None for ops without an argument). ``negate`` is the sign coin
# (timm's ``_randomly_negate``); ``m`` is the magnitude already noised and clipped. Translations are relative to the
# image size and finished by the policy (``TranslateXRel``: the fraction of the width).
def _signed(value: float, negate: bool) -> float:
    return -value if negate else value


def _enhance(m, hp, neg):
    return m / 10.0 * 1.8 + 0.1


def _enhance_increasing(m, hp, neg):
    return max(0.1, 1.0 + _signed(m / 10.0 * 0.9, neg))


def _minmax(m, low, high):
    return max(low, min(high, low + (high - low) * (m / 10.0)))


def _solarize(m, hp, neg):
    return min(256, int(m / 10.0 * 256))


TIMM_OPS: dict[str, tuple[str, Callable | None]] = {
    "AutoContrast": ("autocontrast", None),
    "Equalize": ("equalize", None),
    "Invert": ("invert", None),
    "Rotate": ("rotate", lambda m, hp, neg: _signed(m / 10.0 * 30.0, neg)),
    "Posterize": ("posterize", lambda m, hp, neg: int(m / 10.0 * 4)),
    "PosterizeIncreasing": ("posterize", lambda m, hp, neg: 4 - int(m / 10.0 * 4)),
    "PosterizeOriginal": ("posterize", lambda m, hp, neg: int(m / 10.0 * 4) + 4),
    "Solarize": ("solarize", _solarize),
    "SolarizeIncreasing": ("solarize", lambda m, hp, neg: 256 - _solarize(m, hp, neg)),
    "SolarizeAdd": ("solarize_add", lambda m, hp, neg: min(128, int(m / 10.0 * 110))),
    "Color": ("color", _enhance),
    "ColorIncreasing": ("color", _enhance_increasing),
    "Contrast": ("contrast", _enhance),
    "ContrastIncreasing": ("contrast", _enhance_increasing),
    "Brightness": ("brightness", _enhance),
    "BrightnessIncreasing": ("brightness", _enhance_increasing),
    "Sharpness": ("sharpness", _enhance),
    "SharpnessIncreasing": ("sharpness", _enhance_increasing),
    "ShearX": ("shear_x", lambda m, hp, neg: _signed(m / 10.0 * 0.3, neg)),
    "ShearY": ("shear_y", lambda m, hp, neg: _signed(m / 10.0 * 0.3, neg)),
    "TranslateX": ("translate_x", lambda m, hp, neg: _signed(m / 10.0 * float(hp["translate_const"]), neg)),
    "TranslateY": ("translate_y", lambda m, hp, neg: _signed(m / 10.0 * float(hp["translate_const"]), neg)),
    "TranslateXRel": ("translate_x", lambda m, hp, neg: _signed(m / 10.0 * hp["translate_pct"], neg)),
    "TranslateYRel": ("translate_y", lambda m, hp, neg: _signed(m / 10.0 * hp["translate_pct"], neg)),
    "Desaturate": ("color", lambda m, hp, neg: min(1.0, max(0.0, 1.0 - _minmax(m, 0.5, 1.0)))),
    "GaussianBlur": ("gaussian_blur", lambda m, hp, neg: _minmax(m, 0.1, 2.0)),
    "GaussianBlurRand": ("gaussian_blur", lambda m, hp, neg: _minmax(m, 0.0, 1.0)),  # radius ~ U(0.1, 2 * level)
}

_TIMM_RAND = (
    "AutoContrast",
    "Equalize",
    "Invert",
    "Rotate",
    "Posterize",
    "Solarize",
    "SolarizeAdd",
    "Color",
    "Contrast",
    "Brightness",
    "Sharpness",
    "ShearX",
    "ShearY",
    "TranslateXRel",
    "TranslateYRel",
)
_TIMM_INCREASING = {
    "Posterize": "PosterizeIncreasing",
    "Solarize": "SolarizeIncreasing",
    "Color": "ColorIncreasing",
    "Contrast": "ContrastIncreasing",
    "Brightness": "BrightnessIncreasing",
    "Sharpness": "SharpnessIncreasing",
}
# timm's ``_RAND_WEIGHTED_0`` and ``_RAND_WEIGHTED_3A`` (choice weights, no replacement)
_TIMM_WEIGHTED: dict[str, dict[str, float]] = {
    "weights": {
        "Rotate": 3,
        "ShearX": 2,
        "ShearY": 2,
        "TranslateXRel": 1,
        "TranslateYRel": 1,
        "ColorIncreasing": 0.25,
        "SharpnessIncreasing": 0.25,
        "AutoContrast": 0.25,
        "SolarizeIncreasing": 0.05,
        "SolarizeAdd": 0.05,
        "ContrastIncreasing": 0.05,
        "BrightnessIncreasing": 0.05,
        "Equalize": 0.05,
        "PosterizeIncreasing": 0.05,
        "Invert": 0.05,
    },
    "3aw": {
        "SolarizeIncreasing": 6,
        "Desaturate": 6,
        "GaussianBlur": 6,
        "Rotate": 3,
        "ShearX": 2,
        "ShearY": 2,
        "PosterizeIncreasing": 1,
        "AutoContrast": 1,
        "ColorIncreasing": 1,
        "SharpnessIncreasing": 1,
        "ContrastIncreasing": 1,
        "BrightnessIncreasing": 1,
        "Equalize": 1,
        "Invert": 1,
    },
}


def timm_op_names(increasing: bool, choice: str | None) -> tuple[tuple[str, ...], np.ndarray | None]:
    """Timm's ``rand_augment_choices``: the op names of a RandAugment and their choice weights (None: uniform).

    Raises:
        ValueError: an unknown transform set ``choice``.
    """
    if choice is None:
        return tuple(_TIMM_INCREASING.get(n, n) if increasing else n for n in _TIMM_RAND), None
    if choice == "3a":
        return ("SolarizeIncreasing", "Desaturate", "GaussianBlur"), None
    if choice in _TIMM_WEIGHTED:
        names, values = zip(*_TIMM_WEIGHTED[choice].items(), strict=True)
        weights = np.array(values, np.float64)
        return tuple(names), weights / weights.sum()
    raise ValueError(f"unknown RandAugment transform set t{choice}; timm's are tweights, t3a and t3aw")


# --- torchvision --------------------------------------------------------------------------------------------------
# name -> (op, bins(num_bins, height, width) or None, signed), as torchvision v2's ``_AUGMENTATION_SPACE``s.
@functools.lru_cache(maxsize=256)
def _linspace(start: float, end: float, num_bins: int) -> tuple[float, ...]:
    return tuple(torch.linspace(start, end, num_bins).tolist())  # float32, as torchvision computes its bins


@functools.lru_cache(maxsize=64)
def _posterize_bins(num_bins: int, span: int) -> tuple[float, ...]:
    return tuple(float(v) for v in (8 - (torch.arange(num_bins) / ((num_bins - 1) / span))).round().int().tolist())


def _space(wide: bool) -> dict[str, tuple[str, Callable | None, bool]]:
    shear, translate, rotate, enhance = (0.99, None, 135.0, 0.99) if wide else (0.3, 150.0 / 331.0, 30.0, 0.9)
    lin = lambda hi: lambda n, h, w: _linspace(0.0, hi, n)  # noqa: E731
    if translate is None:
        tx, ty = lin(32.0), lin(32.0)
    else:
        tx, ty = (lambda n, h, w: _linspace(0.0, translate * w, n)), (lambda n, h, w: _linspace(0.0, translate * h, n))
    return {
        "Identity": ("identity", None, False),
        "ShearX": ("shear_x", lin(shear), True),
        "ShearY": ("shear_y", lin(shear), True),
        "TranslateX": ("translate_x", tx, True),
        "TranslateY": ("translate_y", ty, True),
        "Rotate": ("rotate", lin(rotate), True),
        "Brightness": ("brightness", lin(enhance), True),
        "Color": ("color", lin(enhance), True),
        "Contrast": ("contrast", lin(enhance), True),
        "Sharpness": ("sharpness", lin(enhance), True),
        "Posterize": ("posterize", lambda n, h, w: _posterize_bins(n, 6 if wide else 4), False),
        "Solarize": ("solarize", lambda n, h, w: _linspace(1.0, 0.0, n), False),
        "AutoContrast": ("autocontrast", None, False),
        "Equalize": ("equalize", None, False),
    }


#: torchvision v2's RandAugment (and AutoAugment's) and TrivialAugmentWide's op spaces, in torchvision's order.
TV_RANDAUGMENT = _space(wide=False)
TV_TRIVIAL_WIDE = _space(wide=True)
TV_AUTOAUGMENT = {**{k: v for k, v in TV_RANDAUGMENT.items() if k != "Identity"}, "Invert": ("invert", None, False)}


def tv_bins(space: dict, name: str, num_bins: int, height: int, width: int) -> tuple[float, ...] | None:
    """Torchvision's magnitude bins of entry ``name`` for an image of this size (None: the op takes none)."""
    bins = space[name][1]
    return None if bins is None else bins(num_bins, height, width)


def tv_arg(op: str, magnitude: float) -> float:
    """The op's argument for torchvision's (signed) ``magnitude`` (``_apply_image_or_video_transform``)."""
    if op in ("translate_x", "translate_y"):
        return -float(int(magnitude))  # translate=[int(m), 0] moves the content by +m: it samples at -m
    if op in ("brightness", "color", "contrast", "sharpness"):
        return 1.0 + magnitude
    if op == "posterize":
        return int(magnitude)
    if op == "solarize":  # the uint8 image is compared with the threshold in float32
        return float(np.float32(255.0 * magnitude))
    return magnitude


#: AutoAugment's ImageNet policy as torchvision writes it: 25 pairs of (entry, probability, magnitude bin of 10).
TV_IMAGENET_POLICY = (
    (("Posterize", 0.4, 8), ("Rotate", 0.6, 9)),
    (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
    (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
    (("Posterize", 0.6, 7), ("Posterize", 0.6, 6)),
    (("Equalize", 0.4, None), ("Solarize", 0.2, 4)),
    (("Equalize", 0.4, None), ("Rotate", 0.8, 8)),
    (("Solarize", 0.6, 3), ("Equalize", 0.6, None)),
    (("Posterize", 0.8, 5), ("Equalize", 1.0, None)),
    (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)),
    (("Equalize", 0.6, None), ("Posterize", 0.4, 6)),
    (("Rotate", 0.8, 8), ("Color", 0.4, 0)),
    (("Rotate", 0.4, 9), ("Equalize", 0.6, None)),
    (("Equalize", 0.0, None), ("Equalize", 0.8, None)),
    (("Invert", 0.6, None), ("Equalize", 1.0, None)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
    (("Color", 0.8, 8), ("Solarize", 0.8, 7)),
    (("Sharpness", 0.4, 7), ("Invert", 0.6, None)),
    (("ShearX", 0.6, 5), ("Equalize", 1.0, None)),
    (("Color", 0.4, 0), ("Equalize", 0.6, None)),
    (("Equalize", 0.4, None), ("Solarize", 0.2, 4)),
    (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
    (("Invert", 0.6, None), ("Equalize", 1.0, None)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
)
