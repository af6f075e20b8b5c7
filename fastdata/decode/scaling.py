"""DCT scales and the resize helpers.

Which libjpeg scale to decode at, a box mapped into the scaled pixels, and the
resize of a decoded image (or region) into the caller's ``uint8`` ``(H, W, 3)`` slot.

The resample modes (:data:`RESAMPLES`), what each gives:

- ``"antialias"`` (the default): torchvision's and timm's pictures. PIL's antialiased bilinear
  (``Image.resize(size, BILINEAR, box=...)``: a triangle filter whose support grows with the shrink, as
  torchvision's ``RandomResizedCrop`` applies it to PIL images, and ``antialias=True`` on tensors). The DCT scale
  keeps at least :data:`ANTIALIAS_HEADROOM` times the output, so a crop of an ImageNet-sized photo into 224 is
  decoded at full scale and is PIL's exact pixels; a large shrink is decoded at a reduced scale first and is close
  (``bench/kernel.py resample`` measures both, per shrink band and DCT scale).
- ``"fast"``: the resample of fastdata 0.2.0. The smallest DCT scale that keeps the output's size, then OpenCV's
  ``INTER_LINEAR`` (no antialiasing), ``INTER_AREA`` only where 2x or more shrink remains. Cheaper, and sharper
  than the reference (aliased): about 1.1-1.25x its mean absolute Laplacian.
- ``"area"``: as ``"fast"`` with ``INTER_AREA`` whenever shrinking (``antialias=True`` of 0.2.0).
- ``"linear"``: as ``"fast"`` with ``INTER_LINEAR`` always (``antialias=False`` of 0.2.0).
"""

from __future__ import annotations

from collections.abc import Iterable

import cv2
import numpy as np
import PIL
from PIL import Image

from fastdata._util.optional import native_disabled

try:  # PIL's antialiased bilinear, value for value, into the caller's slot (the PIL call below where not built)
    from fastdata.decode import _bilinear
except ImportError:
    _bilinear = None  # type: ignore[assignment]  # None stands for the extension not built: the use checks it

#: Pillow 13 orders the two passes of a resize by the shrink (vertical first where the height loses more than twice
#: as many pixels as the width); earlier Pillows always go horizontal first. ``_bilinear`` follows the installed one.
PILLOW_13 = int(PIL.__version__.split(".")[0]) >= 13

__all__ = [
    "ANTIALIAS_HEADROOM",
    "KERNEL_SCALES",
    "PILLOW_13",
    "RESAMPLES",
    "SIMD_SCALES",
    "TURBOJPEG_SCALES",
    "Box",
    "check_out",
    "choose_scale",
    "headroom",
    "interpolation",
    "plan_region",
    "resample_mode",
    "resize_into",
    "resize_to",
    "region_box",
    "scaled_box",
    "scaled_size",
]

Scale = tuple[int, int]

#: DCT scale factors with SIMD IDCTs in libjpeg-turbo (1/8 is DC-only, 1/4 and 1/2 have
#: dedicated reduced IDCTs); the default for :class:`TurboJpegDecoder`.
SIMD_SCALES: tuple[Scale, ...] = ((1, 8), (1, 4), (1, 2), (1, 1))
#: Every factor <= 1 that libjpeg-turbo offers; 3/8, 5/8, 3/4 and 7/8 use plain C IDCTs.
TURBOJPEG_SCALES: tuple[Scale, ...] = ((1, 8), (1, 4), (3, 8), (1, 2), (5, 8), (3, 4), (7, 8), (1, 1))
#: The scales fastdata decodes a crop at: the SIMD ones and 5/8. With the crop-region kernel, 5/8 beat the next
#: power of two (1.10x on the crops it applies to, one core) while 3/8, 3/4 and 7/8 lost to it (0.95x, 0.81x,
#: 0.71x; ``bench/kernel.py scales``). The kernel's fallback decodes at the same scales, so its pixels are the kernel's.
KERNEL_SCALES: tuple[Scale, ...] = ((1, 8), (1, 4), (1, 2), (5, 8), (1, 1))

Box = tuple[int, int, int, int]

#: The resample modes (see the module docstring); the first is the default.
RESAMPLES: tuple[str, ...] = ("antialias", "fast", "area", "linear")
#: With ``resample="antialias"`` the DCT scale keeps at least this many times the output's size in each direction,
#: so the antialiased resize that follows does most of the shrink and gives (nearly) the full-scale picture. With 3,
#: the 1/2-scale decodes of the ImageNet-like set's fine textures (96 outputs) came 96.0% within two levels of PIL's
#: (``bench/kernel.py resample``, 2026-11-29); with 4 a crop of an ImageNet-sized image is always decoded at full
#: scale, at 96 as at 224, and full-scale decodes cost about 2% more than the DCT-scaled ones there.
ANTIALIAS_HEADROOM = 4


def resample_mode(resample: str | None = None, antialias: bool | None = None) -> str:
    """The resample mode a ``resample=`` / ``antialias=`` pair asks for (one of :data:`RESAMPLES`).

    ``antialias`` is 0.2.0's switch, still accepted: True is ``"area"``, False ``"linear"``; None (neither given)
    is the default, ``"antialias"``.

    Raises:
        ValueError: an unknown ``resample``, or both given.
    """
    if antialias is not None:
        if resample is not None:
            raise ValueError(
                f"pass resample={resample!r} or antialias={antialias!r}, not both (antialias is 0.2.0's switch: "
                "True is resample='area', False resample='linear')"
            )
        return "area" if antialias else "linear"
    if resample is None:
        return RESAMPLES[0]
    if resample not in RESAMPLES:
        raise ValueError(f"resample must be one of {', '.join(map(repr, RESAMPLES))}, got {resample!r}")
    return resample


def headroom(resample: str) -> int:
    """How many times the output's size the DCT scale keeps for ``resample`` (:data:`ANTIALIAS_HEADROOM` or 1)."""
    return ANTIALIAS_HEADROOM if resample == "antialias" else 1


def region_box(box: Box, scale: Scale, y0: int, x0: int) -> tuple[float, float, float, float]:
    """``box`` (full-resolution ``(top, left, h, w)``) at DCT ``scale``, in a region starting at ``(y0, x0)``.

    Returns:
        PIL's ``(left, upper, right, lower)`` in the region's pixels (fractional where the scale is).
    """
    top, left, height, width = box
    f = scale[0] / scale[1]
    return left * f - x0, top * f - y0, (left + width) * f - x0, (top + height) * f - y0


def scaled_size(height: int, width: int, scale: Scale) -> tuple[int, int]:
    """The ``(height, width)`` libjpeg produces at DCT ``scale``: ``ceil(dim * num / den)``."""
    num, den = scale
    return -(-height * num // den), -(-width * num // den)


def choose_scale(scales: Iterable[Scale], height: int, width: int, min_height: int, min_width: int) -> Scale:
    """The smallest scale at which the image (or crop) still holds at least the minimum size.

    The size at a scale counts exactly (``height * num / den``), not as libjpeg rounds it up: a crop is never
    decoded smaller than the output and enlarged back, and a crop decoded at its own size (minimum == size) is
    always decoded at full scale, so it gets PIL's exact pixels (``ceil(2 * 5/8) == 2`` once decoded 2-pixel
    sides at 5/8).

    Args:
        scales: candidate ``(num, den)`` factors, e.g. ``decoder.scales``.
        height: full image (or crop) height in pixels.
        width: full image (or crop) width in pixels.
        min_height: the scaled height must stay ``>=`` this.
        min_width: the scaled width must stay ``>=`` this.

    Returns:
        The chosen ``(num, den)``; ``(1, 1)`` when no smaller factor is big enough.
    """
    for num, den in sorted(scales, key=lambda s: s[0] / s[1]):
        if num >= den:
            break
        if height * num >= min_height * den and width * num >= min_width * den:
            return num, den
    return (1, 1)


def plan_region(
    box: Box, height: int, width: int, out_h: int, out_w: int, scales: tuple[Scale, ...]
) -> tuple[Scale, int, int, int, int]:
    """The crop kernel's per-image plan: the DCT scale and the box at that scale.

    ``(scale, y0, y1, x0, x1)``: :func:`choose_scale` of ``scales`` for ``box`` and an ``out_h x out_w`` output,
    then :func:`scaled_box` of the ``height x width`` image at that scale, in one step (the per-image plan of the
    crop kernel, computed once per image; the same numbers as the two functions).

    Args:
        box: ``(top, left, h, w)`` inside the image.
        height: the full image's height.
        width: the full image's width.
        out_h: the output's height.
        out_w: the output's width.
        scales: candidate ``(num, den)`` factors, ascending (e.g. ``NATIVE_SCALES``).
    """
    top, left, box_h, box_w = box
    num, den = 1, 1
    for n, d in scales:
        if n >= d:
            break
        if box_h * n >= out_h * d and box_w * n >= out_w * d:  # exactly, as choose_scale
            num, den = n, d
            break
    rows, cols = -(-height * num // den), -(-width * num // den)
    y0, x0 = top * num // den, left * num // den
    y1 = min(max(-(-(top + box_h) * num // den), y0 + 1), rows)
    x1 = min(max(-(-(left + box_w) * num // den), x0 + 1), cols)
    return (num, den), min(y0, y1 - 1), y1, min(x0, x1 - 1), x1


def scaled_box(box: Box, scale: Scale, shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """Map a full-resolution ``(top, left, h, w)`` into a DCT-scaled image's pixels.

    The box grows outwards (floor the start, ceil the end) so it never loses content
    and keeps at least ``ceil(h * scale)`` rows; it is clamped to the scaled image.

    Returns:
        ``(y0, y1, x0, x1)``: rows ``y0:y1`` and columns ``x0:x1`` of the scaled image.
    """
    top, left, height, width = box
    num, den = scale
    y0, x0 = top * num // den, left * num // den
    y1, x1 = -(-(top + height) * num // den), -(-(left + width) * num // den)
    y1, x1 = min(max(y1, y0 + 1), shape[0]), min(max(x1, x0 + 1), shape[1])
    return min(y0, y1 - 1), y1, min(x0, x1 - 1), x1


def check_out(out: np.ndarray) -> None:
    """Raise ValueError unless ``out`` is a writable, C-contiguous uint8 ``(H, W, 3)`` array."""
    if not (
        isinstance(out, np.ndarray)
        and out.dtype == np.uint8
        and out.ndim == 3
        and out.shape[2] == 3
        and out.flags.c_contiguous
        and out.flags.writeable
    ):
        raise ValueError(
            f"out must be a writable C-contiguous uint8 (H, W, 3) array, got "
            f"{getattr(out, 'dtype', type(out).__name__)} {getattr(out, 'shape', '')}"
        )


def resize_into(
    image: np.ndarray, out: np.ndarray, resample: str, box: tuple[float, float, float, float] | None = None
) -> None:
    """Resize ``image`` (or its ``box``) into ``out``, by ``resample`` (one of :data:`RESAMPLES`).

    ``"antialias"``: PIL's antialiased bilinear of ``box`` (PIL's ``(left, upper, right, lower)``, fractional; None:
    the whole image), as ``Image.resize(size, BILINEAR, box=box)`` gives it; the filter reaches past the box into
    the image where there is image (a region decoded at a reduced scale is the box grown to whole pixels). The
    other modes resize the whole image with OpenCV, straight into ``out``: ``"area"`` ``INTER_AREA`` whenever
    shrinking, ``"linear"`` always ``INTER_LINEAR``, ``"fast"`` ``INTER_AREA`` only when shrinking by 2x or more
    (after a DCT-scaled decode the remaining shrink is below 2x, where bilinear aliases little and is several times
    faster), else ``INTER_LINEAR``. Both release the GIL while they resize.
    """
    height, width = out.shape[:2]
    if resample == "antialias":
        whole = (0.0, 0.0, float(image.shape[1]), float(image.shape[0]))
        if image.shape[:2] == (height, width) and (box is None or tuple(box) == whole):
            np.copyto(out, image)
            return
        if _bilinear is not None and not native_disabled() and image.flags.c_contiguous and out.flags.c_contiguous:
            left, upper, right, lower = whole if box is None else box
            _bilinear.resize(image, out, (float(left), float(upper), float(right), float(lower)), PILLOW_13)
            return
        resized = Image.fromarray(image).resize((width, height), Image.Resampling.BILINEAR, box=box, reducing_gap=None)
        np.copyto(out, np.asarray(resized))
        return
    if image.shape[:2] == (height, width):
        np.copyto(out, image)
        return
    rule = interpolation(image.shape[0], image.shape[1], height, width, resample)
    result = cv2.resize(image, (width, height), dst=out, interpolation=rule)
    if result is not out:  # OpenCV allocated instead (never for a matching uint8 dst): keep the contract
        np.copyto(out, result)


def interpolation(rows: int, cols: int, height: int, width: int, resample: str) -> int:
    """The OpenCV interpolation :func:`resize_into` uses for a ``rows x cols`` image into ``height x width``.

    ``resample``: ``"fast"``, ``"area"`` or ``"linear"`` (``"antialias"`` is PIL's, not OpenCV's).
    """
    shrink = height <= rows and width <= cols
    if resample == "fast":
        shrink = shrink and max(rows / height, cols / width) >= 2.0
    return cv2.INTER_AREA if shrink and resample != "linear" else cv2.INTER_LINEAR


def resize_to(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """Resize an RGB image to ``(height, width)`` in a new array.

    ``INTER_AREA`` when shrinking, else ``INTER_LINEAR``.
    """
    if image.shape[:2] == (height, width):
        return image
    out = np.empty((height, width, 3), np.uint8)
    resize_into(image, out, "area")
    return out
