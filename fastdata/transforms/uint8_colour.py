"""Colour ops on RGB ``uint8`` ``(H, W, 3)`` images, with OpenCV and numpy, never through float images.

Each op follows one of two references, named by ``flavour``:

- ``"pil"``: PIL's ``ImageEnhance`` / ``ImageOps`` (what timm's RandAugment and torchvision's transforms run on PIL
  images). An enhancement is PIL's ``Image.blend(degenerate, image, factor)``: ``trunc(d + factor * (v - d))`` in
  float32; the grey of an image is PIL's ``L`` (0.299, 0.587, 0.114, rounded); contrast blends with the mean grey
  rounded to an int.
- ``"tv"``: torchvision v2 on a uint8 tensor: ``trunc(v * factor + d * (1 - factor))`` in float32; the grey is
  ``floor(0.2989 r + 0.587 g + 0.114 b)``; contrast blends with the float mean of that grey.

Ops whose output depends only on the pixel value (brightness, contrast, posterize, solarize, invert, autocontrast,
equalize) are a lookup table computed with the reference's own arithmetic on all 256 values and applied with
``cv2.LUT``: exact. On a CPU with AVX-512 VBMI the tables are applied by the C extension
``fastdata.transforms._lut`` instead (64 bytes at a time, a table per channel without splitting the image: the same
bytes, about ten times faster; not built, or ``FASTDATA_NATIVE=0``: ``cv2.LUT``). Posterize, solarize, solarize-add
and invert apply their tables as one or two bitwise or threshold passes (:func:`posterize`, :func:`solarize`,
:func:`solarize_add`, :func:`invert`: the same bytes, about six times faster than ``cv2.LUT``). Saturation and sharpness
blend two images with ``cv2.addWeighted`` (which rounds; an offset of ``-0.5 + 1/1024`` makes it truncate, as the
references do): within one level of the reference. PIL's Gaussian blur is its own three-pass box blur
(``ImagingGaussianBlur``), reproduced pass by pass with ``cv2.sepFilter2D`` and PIL's 24-bit fixed-point weights.

Every function takes a C-contiguous uint8 ``(H, W, 3)`` array and returns the result: the same array when it works
in place (the lookup tables), else a new one.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import cv2
import numpy as np

from fastdata._util.optional import native_disabled
from fastdata.transforms.uint8_filters import gaussian_blur, hue

try:
    from fastdata.transforms import _lut
except ImportError:  # the optional C kernel was not built: tables go through cv2.LUT
    _lut = None  # type: ignore[assignment]  # None stands for the kernel not built: every use checks it

__all__ = [
    "apply_lut",
    "autocontrast",
    "blend_lut",
    "brightness",
    "contrast",
    "equalize",
    "gaussian_blur",
    "grayscale",
    "hue",
    "invert",
    "invert_lut",
    "posterize",
    "posterize_lut",
    "saturation",
    "sharpness",
    "solarize",
    "solarize_add",
    "solarize_add_lut",
    "solarize_lut",
]

_VALUES = np.arange(256, dtype=np.float32)
_INDEX = np.arange(256, dtype=np.int64)
_TRUNC = -0.5 + 1.0 / 1024  # cv2 rounds: rounding x - 0.5 + 1/1024 truncates x >= 0 (the references truncate)


def _check_flavour(flavour: str) -> None:
    if flavour not in ("pil", "tv"):
        raise ValueError(f"flavour must be 'pil' or 'tv', got {flavour!r}")


def _native_lut(image: np.ndarray) -> bool:
    """Whether ``image``'s tables go through ``_lut``.

    Its fast kernel runs on this CPU, and the image is C-contiguous
    (else ``cv2.LUT``, as fast as ``_lut``'s one-byte-at-a-time kernel).
    """
    return _lut is not None and _lut.KERNELS[-1] != "baseline" and image.flags.c_contiguous and not native_disabled()


def apply_lut(image: np.ndarray, lut: np.ndarray) -> np.ndarray:
    """``image`` mapped through ``lut`` (256 values, or ``(1, 256, 3)`` one table per channel), in place."""
    if _native_lut(image) and image.dtype == np.uint8 and lut.dtype == np.uint8:
        _lut.apply(image, np.ascontiguousarray(lut.reshape(256, 3).T) if lut.size == 768 else lut.reshape(256))
        return image
    cv2.LUT(image, lut, dst=image)
    return image


def _frozen(values: np.ndarray) -> np.ndarray:
    """A read-only uint8 table (the cached ones are shared)."""
    table = values.astype(np.uint8)
    table.flags.writeable = False
    return table


def _to_uint8(values: np.ndarray) -> np.ndarray:
    """float32 values clipped to 0..255 and truncated, as ``(UINT8)`` and ``.to(torch.uint8)`` do."""
    return np.clip(values, 0.0, 255.0).astype(np.uint8)


def blend_lut(base: float, factor: float, flavour: str) -> np.ndarray:
    """The table of the blend of every value with a constant ``base`` by ``factor`` (see the module docstring)."""
    f, d = np.float32(factor), np.float32(base)
    if flavour == "pil":
        if factor == 1.0:  # ImagingBlend copies the image for alpha 1 (and the degenerate for alpha 0)
            return _INDEX.astype(np.uint8)
        return _to_uint8(d + f * (_VALUES - d))
    return _to_uint8(_VALUES * f + d * np.float32(1.0 - factor))


def brightness(image: np.ndarray, factor: float, flavour: str = "pil") -> np.ndarray:
    """PIL's ``ImageEnhance.Brightness`` / torchvision's ``adjust_brightness``: a blend with black."""
    return apply_lut(image, blend_lut(0.0, factor, flavour))


def _mean_grey(image: np.ndarray, flavour: str) -> float:
    """The mean grey, as PIL or torchvision computes it.

    The mean grey: PIL's ``int(mean(L) + 0.5)``; torchvision's mean of the floored grey (from the channel means:
    a floored grey is on average 0.5 below the weighted sum).
    """
    r, g, b = cv2.mean(image)[:3]
    if flavour == "pil":
        return float(int(0.299 * r + 0.587 * g + 0.114 * b + 0.5))
    return max(0.0, 0.2989 * r + 0.587 * g + 0.114 * b - 0.5)


def contrast(image: np.ndarray, factor: float, flavour: str = "pil") -> np.ndarray:
    """PIL's ``ImageEnhance.Contrast`` / torchvision's ``adjust_contrast``: a blend with the mean grey."""
    _check_flavour(flavour)
    return apply_lut(image, blend_lut(_mean_grey(image, flavour), factor, flavour))


def _grey(image: np.ndarray, flavour: str) -> np.ndarray:
    """The one-channel grey image.

    PIL's ``L`` (OpenCV's rounded 0.299/0.587/0.114 grey, within one level of it;
    torchvision floors 0.2989/0.587/0.114, within one level too, and the blends that use it stay within one).
    """
    return cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)


def grayscale(image: np.ndarray, flavour: str = "pil") -> np.ndarray:
    """PIL's ``convert("L")`` (torchvision's ``Grayscale(3)`` on a PIL image) with the grey in all three channels."""
    _check_flavour(flavour)
    return cv2.cvtColor(_grey(image, flavour), cv2.COLOR_GRAY2RGB)


def _blend_images(image: np.ndarray, degenerate: np.ndarray, factor: float, bias: float = 0.0) -> np.ndarray:
    """``trunc(clip(v * factor + (d + bias) * (1 - factor)))`` per pixel, in place into ``image``."""
    if factor == 1.0:
        return image
    factor = float(factor)
    return cv2.addWeighted(image, factor, degenerate, 1.0 - factor, _TRUNC + bias * (1.0 - factor), dst=image)


def saturation(image: np.ndarray, factor: float, flavour: str = "pil") -> np.ndarray:
    """PIL's ``ImageEnhance.Color``.

    PIL's ``ImageEnhance.Color`` / torchvision's ``adjust_saturation``: a blend with the grey image (for
    torchvision's floored grey, the rounded grey less 0.5: its mean).
    """
    return _blend_images(image, grayscale(image, flavour), factor, -0.5 if flavour == "tv" else 0.0)


def _smooth(image: np.ndarray) -> np.ndarray:
    """PIL's ``ImageFilter.SMOOTH``, exactly.

    PIL's ``ImageFilter.SMOOTH`` (``[[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13``, rounded; the border pixels the image's
    own) of an image of at least 3 x 3, exactly: 13 times each value is the 3 x 3 sum (a box filter, in 16 bits) plus 4
    times the centre, and a sum over 13 is never half-way between two integers, so OpenCV's float rounding of it is
    exact (and faster than ``cv2.filter2D`` with the kernel).
    """
    sums = cv2.boxFilter(image, cv2.CV_16U, (3, 3), normalize=False, borderType=cv2.BORDER_REPLICATE)
    centre = image.astype(np.uint16)
    cv2.add(sums, np.left_shift(centre, 2, out=centre), dst=sums)
    smooth = cv2.convertScaleAbs(sums, alpha=1.0 / 13.0)
    smooth[0], smooth[-1], smooth[:, 0], smooth[:, -1] = image[0], image[-1], image[:, 0], image[:, -1]
    return smooth


def sharpness(image: np.ndarray, factor: float, flavour: str = "pil") -> np.ndarray:
    """PIL's ``ImageEnhance.Sharpness``.

    PIL's ``ImageEnhance.Sharpness`` / torchvision's ``adjust_sharpness``: a blend with the image smoothed by
    ``[[1, 1, 1], [1, 5, 1], [1, 1, 1]] / 13`` (rounded), whose border pixels are the image's own.
    """
    _check_flavour(flavour)
    if factor == 1.0 or image.shape[0] <= 2 or image.shape[1] <= 2:
        return image
    return _blend_images(image, _smooth(image), factor)


@functools.lru_cache(maxsize=1024)
def posterize_lut(bits: int) -> np.ndarray:
    """The table keeping the ``bits`` high bits (8 or more: the identity; 0 or less: black)."""
    bits = int(bits)
    mask = 0xFF if bits >= 8 else 0 if bits <= 0 else (0xFF << (8 - bits)) & 0xFF
    return _frozen(_INDEX & mask)


@functools.lru_cache(maxsize=1024)
def solarize_lut(threshold: float) -> np.ndarray:
    """The table inverting every value ``>= threshold`` (PIL's ``ImageOps.solarize``, torchvision's ``solarize``)."""
    return _frozen(np.where(threshold <= _INDEX, 255 - _INDEX, _INDEX))


@functools.lru_cache(maxsize=1024)
def solarize_add_lut(add: int, threshold: int = 128) -> np.ndarray:
    """Timm's ``solarize_add``: ``min(255, v + add)`` for every value below ``threshold``."""
    return _frozen(np.where(threshold > _INDEX, np.minimum(255, _INDEX + int(add)), _INDEX))


@functools.lru_cache(maxsize=1024)
def invert_lut() -> np.ndarray:
    """The table ``255 - v``."""
    return _frozen(255 - _INDEX)


def posterize(image: np.ndarray, bits: int) -> np.ndarray:
    """``image`` through :func:`posterize_lut` (``bits``), in place, as one bitwise and."""
    bits = int(bits)
    if bits < 8:
        np.bitwise_and(image, (0xFF << (8 - bits)) & 0xFF if bits > 0 else 0, out=image)
    return image


def invert(image: np.ndarray) -> np.ndarray:
    """``image`` through :func:`invert_lut` (``255 - v``), in place."""
    return np.invert(image, out=image)


def _rows(image: np.ndarray) -> np.ndarray:
    """The C-contiguous image as a one-channel ``(H, W * 3)`` view (OpenCV compares one channel with a scalar)."""
    return image.reshape(image.shape[0], -1)


def solarize(image: np.ndarray, threshold: float) -> np.ndarray:
    """Solarize ``image`` in place.

    ``image`` through :func:`solarize_lut` (``threshold``), in place: the values ``>= threshold`` (for a value, at
    least its ceiling) marked by one threshold pass and inverted by an exclusive or with the mark.
    """
    if image.size == 0 or not threshold <= 255:  # above every value, or NaN: nothing to invert
        return image
    if threshold <= 0:
        return invert(image)
    rows = _rows(image)
    marked = cv2.threshold(rows, math.ceil(threshold) - 1, 255, cv2.THRESH_BINARY)[1]  # 255 where v > ceil - 1
    cv2.bitwise_xor(rows, marked, dst=rows)
    return image


def solarize_add(image: np.ndarray, add: int, threshold: int = 128) -> np.ndarray:
    """Solarize-add ``image`` in place.

    ``image`` through :func:`solarize_add_lut` (``add``, ``threshold``), in place: ``add`` put where a value is
    below ``threshold`` by one threshold pass, then a saturating add (a negative ``add`` takes the table).
    """
    add = int(add)
    if add < 0:
        return apply_lut(image, solarize_add_lut(add, threshold))
    if image.size == 0 or not threshold > 0 or add == 0:  # nothing below the threshold, or nothing to add
        return image
    rows = _rows(image)
    if threshold > 255:
        cv2.add(rows, min(add, 255), dst=rows)  # type: ignore[call-overload]  # cv2 takes a number as a scalar; its stubs list arrays only
    else:
        cv2.add(rows, cv2.threshold(rows, math.ceil(threshold) - 1, min(add, 255), cv2.THRESH_BINARY_INV)[1], dst=rows)
    return image


def _apply_tables(image: np.ndarray, planes: Sequence[np.ndarray], tables: np.ndarray) -> np.ndarray:
    """``image`` mapped through one table per channel, in place.

    ``image`` (split into ``planes``) mapped through one table per channel (``(3, 256)``), in place: by ``_lut``
    where it is fast, else three one-channel lookups and a merge (they beat OpenCV's three-channel table).
    """
    if _native_lut(image):
        _lut.apply(image, tables.astype(np.uint8))
        return image
    for plane, table in zip(planes, tables.astype(np.uint8), strict=False):
        cv2.LUT(plane, table, dst=plane)
    return cv2.merge(planes, dst=image)


def autocontrast(image: np.ndarray, flavour: str = "pil") -> np.ndarray:
    """PIL's ``ImageOps.autocontrast`` (no cutoff).

    PIL's ``ImageOps.autocontrast`` (no cutoff) / torchvision's ``autocontrast``: each channel stretched from its
    darkest to its lightest value onto 0..255 (a channel of one value is left alone).
    """
    _check_flavour(flavour)
    planes = cv2.split(image)
    low, high = (np.array(v, np.float64) for v in zip(*(cv2.minMaxLoc(p)[:2] for p in planes), strict=False))
    flat = high <= low
    span = np.where(flat, 1.0, high - low)[:, None]
    if flavour == "pil":  # Python floats, int() truncates towards zero
        scale = 255.0 / span
        tables = np.clip(np.trunc(_INDEX[None, :] * scale - low[:, None] * scale), 0, 255)
    else:  # float32: (v - min) / ((max - min) * (1 / 255))
        inv_scale = span.astype(np.float32) * np.float32(1.0 / 255)
        tables = np.clip((_VALUES[None, :] - low[:, None].astype(np.float32)) / inv_scale, 0, 255)
    return _apply_tables(image, planes, np.where(flat[:, None], _INDEX[None, :], tables))


def equalize(image: np.ndarray) -> np.ndarray:
    """PIL's ``ImageOps.equalize``.

    PIL's ``ImageOps.equalize`` (torchvision's ``equalize`` is the same): per channel, ``step`` = the pixels
    below the channel's largest value // 255, ``lut[i] = (step // 2 + cumulative[i - 1]) // step``.
    """
    planes = cv2.split(image)
    hist = np.stack([cv2.calcHist([p], [0], None, [256], [0, 256]).ravel() for p in planes]).astype(np.int64)
    last = 255 - np.argmax(hist[:, ::-1] > 0, axis=1)  # each channel's largest value
    step = (hist.sum(axis=1) - hist[np.arange(3), last]) // 255  # 0 also for a channel of one value
    cumulative = np.concatenate([np.zeros((3, 1), np.int64), np.cumsum(hist, axis=1)[:, :-1]], axis=1)
    safe = np.maximum(step, 1)[:, None]
    tables = np.where(step[:, None] > 0, np.clip((safe // 2 + cumulative) // safe, 0, 255), _INDEX[None, :])
    return _apply_tables(image, planes, tables)
