"""PIL's Gaussian blur and torchvision's hue shift on the uint8 crop, exactly as they compute them.

Re-exported by :mod:`fastdata.transforms.uint8_colour`, where the other colour ops live.
"""

from __future__ import annotations

import math

import cv2
import numpy as np

__all__ = ["gaussian_blur", "hue"]


def _box_radius(radius: float, passes: int) -> float:
    """PIL's ``_gaussian_blur_radius``: the box radius of ``passes`` box blurs of standard deviation ``radius``."""
    sigma2 = np.float32(radius) * np.float32(radius) / np.float32(passes)
    length = np.sqrt(np.float32(12.0) * sigma2 + np.float32(1.0))
    whole = np.floor((length - np.float32(1.0)) / np.float32(2.0))
    part = (2 * whole + 1) * (whole * (whole + 1) - 3 * sigma2)
    part /= 6 * (sigma2 - (whole + 1) * (whole + 1))
    return float(np.float32(whole + part))


def _box_kernel(radius: float) -> np.ndarray:
    """PIL's box of a fractional ``radius``: ``2r + 1`` taps of ``ww`` and two outer taps of ``fw`` (/ 2**24)."""
    whole = int(radius)
    ww = int((1 << 24) / np.float32(radius * 2 + 1))
    fw = ((1 << 24) - (whole * 2 + 1) * ww) // 2
    return np.array([fw] + [ww] * (2 * whole + 1) + [fw], np.float64) / float(1 << 24)


def gaussian_blur(image: np.ndarray, radius: float, passes: int = 3) -> np.ndarray:
    """PIL's ``ImageFilter.GaussianBlur(radius)``.

    ``passes`` box blurs along the rows, then along the columns, each
    rounded to uint8, edges extended (``ImagingGaussianBlur``).
    """
    if radius <= 0:
        return image
    kernel = _box_kernel(_box_radius(radius, passes))
    one = np.ones(1, np.float64)
    out = image
    for _ in range(passes):
        out = cv2.sepFilter2D(out, -1, kernel, one, delta=1.0 / (1 << 25), borderType=cv2.BORDER_REPLICATE)
    for _ in range(passes):
        out = cv2.sepFilter2D(out, -1, one, kernel, delta=1.0 / (1 << 25), borderType=cv2.BORDER_REPLICATE)
    return out


def hue(image: np.ndarray, factor: float) -> np.ndarray:
    """Torchvision's ``adjust_hue`` on a PIL image.

    PIL's HSV (hue and saturation truncated to 0..255), the hue
    shifted by ``int(factor * 255)`` with wrap-around, back to RGB (PIL rounds). Computed from OpenCV's float HSV.
    """
    if not -0.5 <= factor <= 0.5:
        raise ValueError(f"hue factor must be in [-0.5, 0.5], got {factor!r}")
    hsv = cv2.cvtColor(image.astype(np.float32), cv2.COLOR_RGB2HSV)  # hue in degrees, saturation in [0, 1]
    shift = math.trunc(factor * 255) & 0xFF
    h, s = hsv[:, :, 0], hsv[:, :, 1]
    levels = np.floor(h * np.float32(255.0 / 360.0))
    np.add(levels, np.float32(shift), out=levels)
    np.subtract(levels, np.float32(256.0), out=levels, where=levels >= 256.0)
    np.multiply(levels, np.float32(360.0 / 255.0), out=h)
    np.multiply(np.floor(s * np.float32(255.0)), np.float32(1.0 / 255.0), out=s)
    rgb = cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB)
    return cv2.convertScaleAbs(rgb, dst=image)
