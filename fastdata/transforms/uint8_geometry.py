"""Geometric ops on RGB ``uint8`` ``(H, W, 3)`` images: shear, translate, rotate, flip.

The convention is PIL's ``Image.transform(size, AFFINE, (a, b, c, d, e, f))``, which torchvision v2's ``affine`` and
``rotate`` on tensors share: the output pixel whose centre is at ``(x + 0.5, y + 0.5)`` takes the input's value at
``(a (x + 0.5) + b (y + 0.5) + c, d (x + 0.5) + e (y + 0.5) + f)`` (pixel centres at half-integers). So
``shear_x(f)`` is PIL's ``(1, f, 0, 0, 1, 0)`` and torchvision's ``affine(shear=[degrees(atan(f)), 0],
center=[0, 0])``; ``translate(dx, dy)`` samples the input at ``+dx, +dy`` (torchvision's ``translate=[t, 0]`` is
``dx = -t``); ``rotate(deg)`` turns the image counter-clockwise about its centre, as both do.

Which code warps, by interpolation:

- nearest and bilinear: ``cv2.warpAffine``. OpenCV computes coordinates in fixed point (1/32 pixel for bilinear,
  1/1024 for nearest) and rounds the result; PIL truncates. Inside the image the warp is within one level of PIL's
  and torchvision's. At the image's border OpenCV blends with the fill (as torchvision's bilinear does) where PIL
  decides per pixel, so up to a pixel-wide strip there differs.
- bicubic rotate, shear and any other affine map that is not a translation: PIL's own affine bicubic (Keys' kernel
  with ``a = -1``, taps clamped at the edge, the fill decided per pixel, the result clipped and truncated) in the C
  extension ``fastdata.transforms._affine``, within one level of PIL everywhere, the border included (0.01% of the
  pixels one level off: float32 rounding where PIL's double lands next to an integer). Without the extension (not
  built, or ``FASTDATA_NATIVE=0``) they fall back to ``cv2.warpAffine`` with ``INTER_CUBIC``: Keys' kernel with
  ``a = -0.75`` (torchvision's ``grid_sample`` kernel), a few levels (up to 17) off PIL's at edges.
- translations along one axis, every interpolation: :func:`translate` (a copy, or PIL's own 2- or 4-tap weights
  along that axis with OpenCV's filters), within one level of PIL inside the image, with or without the extension.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import cv2
import numpy as np

from fastdata._util.optional import native_disabled

try:
    from fastdata.transforms import _affine
except ImportError:  # the optional C kernel was not built: bicubic warps take OpenCV's cubic kernel
    _affine = None  # type: ignore[assignment]  # None stands for the kernel not built: every use checks it

__all__ = ["INTERPOLATIONS", "affine", "hflip", "rotate", "shear_x", "shear_y", "translate"]

#: Interpolation names and their OpenCV flags.
INTERPOLATIONS = {"nearest": cv2.INTER_NEAREST, "bilinear": cv2.INTER_LINEAR, "bicubic": cv2.INTER_CUBIC}

Fill = tuple[int, int, int]
_TRUNC = -0.5 + 1.0 / 1024  # OpenCV rounds: rounding x - 0.5 + 1/1024 truncates x >= 0, as PIL does


def _border(fill: Sequence[float]) -> tuple[float, ...]:
    return tuple(float(v) for v in fill) + (0.0,)


def affine(image: np.ndarray, coeffs: Sequence[float], interpolation: str, fill: Fill) -> np.ndarray:
    """The image warped by PIL's affine ``coeffs`` ``(a, b, c, d, e, f)`` (see the module docstring), as a new array.

    A pure translation takes a faster path (:func:`translate`). Bicubic warps are PIL's own, in the C extension
    when it is built (else OpenCV's cubic kernel: see the module docstring). Nearest and bilinear warps run on an
    RGBA copy (OpenCV's vectorized 4-channel path: about twice as fast as 3 channels, the conversions included).

    Args:
        image: uint8 ``(H, W, 3)``.
        coeffs: the output-to-input map in PIL's convention.
        interpolation: ``"nearest"``, ``"bilinear"`` or ``"bicubic"``.
        fill: the colour of pixels that map outside the image.
    """
    a, b, c, d, e, f = (float(v) for v in coeffs)
    if (a, b, d, e) == (1.0, 0.0, 0.0, 1.0) and (c == 0.0 or f == 0.0):
        return translate(image, c, f, interpolation, fill)
    if interpolation == "bicubic" and _affine is not None and not native_disabled():
        source = np.ascontiguousarray(image)  # a no-op for the usual contiguous crop
        out = np.empty_like(source)
        _affine.bicubic(source, out, (a, b, c, d, e, f), tuple(int(v) for v in fill))
        return out
    # PIL's map of pixel centres, in OpenCV's pixel-index coordinates: x_in = a x + b y + c + (a + b - 1) / 2
    matrix = np.array([[a, b, c + 0.5 * (a + b - 1.0)], [d, e, f + 0.5 * (d + e - 1.0)]], np.float64)
    height, width = image.shape[:2]
    flags = INTERPOLATIONS[interpolation] | cv2.WARP_INVERSE_MAP
    if interpolation == "bicubic":
        return cv2.warpAffine(
            image, matrix, (width, height), flags=flags, borderMode=cv2.BORDER_CONSTANT, borderValue=_border(fill)
        )
    rgba = cv2.cvtColor(image, cv2.COLOR_RGB2RGBA)
    warped = cv2.warpAffine(
        rgba, matrix, (width, height), flags=flags, borderMode=cv2.BORDER_CONSTANT, borderValue=_border(fill)
    )
    return cv2.cvtColor(warped, cv2.COLOR_RGBA2RGB)


def _cubic_weights(t: float) -> np.ndarray:
    """PIL's affine bicubic weights (Keys, ``a = -1``) of the 4 taps around a sample ``t`` past the second."""
    return np.array([-t + 2 * t * t - t**3, 1 - 2 * t * t + t**3, t + t * t - t**3, -t * t + t**3])


def translate(image: np.ndarray, dx: float, dy: float, interpolation: str, fill: Fill) -> np.ndarray:
    """PIL's ``transform(AFFINE, (1, 0, dx, 0, 1, dy))`` along one axis: ``out[y, x] = image[y + dy, x + dx]``.

    Whole pixels are a copy; a fraction is a 2-tap (bilinear) or 4-tap (PIL's bicubic kernel) filter along that
    axis, edges extended, then the copy, truncated as PIL truncates. As PIL, an output pixel whose sample point
    (its centre moved by ``dx``) falls outside the image is ``fill``.
    """
    if dx != 0.0 and dy != 0.0:
        raise ValueError("translate moves along one axis at a time")
    axis, shift = (1, dx) if dx != 0.0 else (0, dy)
    whole = math.floor(shift)
    frac = shift - whole
    if interpolation == "nearest" or frac == 0.0:
        return _shift(image, axis, int(math.floor(shift + 0.5)) if interpolation == "nearest" else whole, fill)
    size = image.shape[axis]
    first = max(0, min(size, math.ceil(-0.5 - shift)))  # the output pixels whose sample point is inside (PIL)
    last = max(first, min(size, math.ceil(size - 0.5 - shift)))
    out = np.empty_like(image)
    _fill_range(out, axis, 0, first, fill)
    _fill_range(out, axis, last, size, fill)
    if last == first:
        return out
    pad, n = 2, last - first
    padded = cv2.copyMakeBorder(image, *((0, 0, pad, pad) if axis == 1 else (pad, pad, 0, 0)), cv2.BORDER_REPLICATE)
    start = first + whole + pad  # the padded index of the first kept pixel's left tap: PIL's clamped taps, all
    along = (lambda a, b: padded[:, a:b]) if axis == 1 else (lambda a, b: padded[a:b])
    target = out[:, first:last] if axis == 1 else out[first:last]
    if interpolation == "bilinear":
        cv2.addWeighted(along(start, start + n), 1.0 - frac, along(start + 1, start + 1 + n), frac, _TRUNC, dst=target)
    else:
        kernel = _cubic_weights(frac).astype(np.float32)
        kernel = kernel[None, :] if axis == 1 else kernel[:, None]
        filtered = cv2.filter2D(
            along(start - 1, start + n + 2), -1, kernel, anchor=(0, 0), delta=_TRUNC, borderType=cv2.BORDER_REPLICATE
        )
        target[...] = filtered[:, :n] if axis == 1 else filtered[:n]
    return out


def _fill_range(out: np.ndarray, axis: int, start: int, stop: int, fill: Fill) -> None:
    if stop > start:
        rows = out[:, start:stop] if axis == 1 else out[start:stop]
        cv2.rectangle(rows, (0, 0), (rows.shape[1] - 1, rows.shape[0] - 1), tuple(int(v) for v in fill), -1)


def _shift(image: np.ndarray, axis: int, shift: int, fill: Fill) -> np.ndarray:
    """A whole-pixel translation along ``axis`` (``out[..., x] = image[..., x + shift]``), ``fill`` coming in."""
    size = image.shape[axis]
    keep = max(0, size - abs(shift))
    source = slice(max(0, shift), max(0, shift) + keep)
    border = (max(0, -shift), max(0, shift)) if keep else (0, 0)
    if not keep:
        out = np.empty_like(image)
        _fill_range(out, axis, 0, size, fill)
        return out
    part = image[:, source] if axis == 1 else image[source]
    top, bottom, left, right = (0, 0, *border) if axis == 1 else (*border, 0, 0)
    return cv2.copyMakeBorder(part, top, bottom, left, right, cv2.BORDER_CONSTANT, value=tuple(int(v) for v in fill))


def shear_x(image: np.ndarray, factor: float, interpolation: str, fill: Fill) -> np.ndarray:
    """PIL's ``transform(AFFINE, (1, factor, 0, 0, 1, 0))``: row ``y`` samples ``factor * (y + 0.5)`` to the right."""
    return affine(image, (1.0, factor, 0.0, 0.0, 1.0, 0.0), interpolation, fill)


def shear_y(image: np.ndarray, factor: float, interpolation: str, fill: Fill) -> np.ndarray:
    """PIL's ``transform(AFFINE, (1, 0, 0, factor, 1, 0))``."""
    return affine(image, (1.0, 0.0, 0.0, factor, 1.0, 0.0), interpolation, fill)


def rotate(image: np.ndarray, degrees: float, interpolation: str, fill: Fill) -> np.ndarray:
    """PIL's ``Image.rotate(degrees)`` (counter-clockwise about the centre, same size); torchvision's ``rotate``."""
    height, width = image.shape[:2]
    angle = -math.radians(degrees)
    a, b = round(math.cos(angle), 15), round(math.sin(angle), 15)
    d, e = -b, a
    cx, cy = width / 2.0, height / 2.0
    return affine(image, (a, b, a * -cx + b * -cy + cx, d, e, d * -cx + e * -cy + cy), interpolation, fill)


def hflip(image: np.ndarray) -> np.ndarray:
    """The image mirrored left to right, as a new array."""
    return cv2.flip(image, 1)
