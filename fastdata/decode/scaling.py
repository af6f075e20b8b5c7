"""DCT scales and the resize helpers.

Which libjpeg scale to decode at, a box mapped into the scaled pixels, and the
resize of a decoded image (or region) into the caller's ``uint8`` ``(H, W, 3)`` slot.
"""

from __future__ import annotations

from collections.abc import Iterable

import cv2
import numpy as np

__all__ = [
    "KERNEL_SCALES",
    "SIMD_SCALES",
    "TURBOJPEG_SCALES",
    "Box",
    "check_out",
    "choose_scale",
    "interpolation",
    "plan_region",
    "resize_into",
    "resize_to",
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


def resize_into(image: np.ndarray, out: np.ndarray, antialias: bool | None) -> None:
    """Resize ``image`` into ``out`` (OpenCV writes straight into it; the GIL is released).

    ``antialias=True``: INTER_AREA whenever shrinking; False: always INTER_LINEAR; None (auto):
    INTER_AREA only when shrinking by 2x or more, else INTER_LINEAR. After a DCT-scaled decode
    the remaining shrink is below 2x, where bilinear aliases little and is several times faster.
    """
    height, width = out.shape[:2]
    if image.shape[:2] == (height, width):
        np.copyto(out, image)
        return
    rule = interpolation(image.shape[0], image.shape[1], height, width, antialias)
    result = cv2.resize(image, (width, height), dst=out, interpolation=rule)
    if result is not out:  # OpenCV allocated instead (never for a matching uint8 dst): keep the contract
        np.copyto(out, result)


def interpolation(rows: int, cols: int, height: int, width: int, antialias: bool | None) -> int:
    """The OpenCV interpolation :func:`resize_into` uses for a ``rows x cols`` image into ``height x width``."""
    shrink = height <= rows and width <= cols
    if antialias is None:
        shrink = shrink and max(rows / height, cols / width) >= 2.0
    return cv2.INTER_AREA if shrink and antialias is not False else cv2.INTER_LINEAR


def resize_to(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """Resize an RGB image to ``(height, width)`` in a new array.

    ``INTER_AREA`` when shrinking, else ``INTER_LINEAR``.
    """
    if image.shape[:2] == (height, width):
        return image
    out = np.empty((height, width, 3), np.uint8)
    resize_into(image, out, antialias=True)
    return out
