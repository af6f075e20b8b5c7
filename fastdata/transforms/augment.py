"""Decode-time augmentations of the uint8 crop.

``RandomHorizontalFlip`` and ``ColorJitter`` (torchvision's), and the
argument checks the decode-time policies share (fill colour, interpolation, probabilities).

Each is an :class:`~fastdata.transforms.compose.ImageAugment`: put it after the crop in a
:class:`~fastdata.transforms.DecodeCompose`, and it runs in the worker on the batch slot, drawing from the sample's
generator.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import cv2
import numpy as np

from fastdata.transforms import uint8_colour as colour
from fastdata.transforms.compose import ImageAugment

__all__ = ["ColorJitter", "RandomHorizontalFlip", "check_fill", "check_interpolation", "check_probability"]


def check_probability(value: Any, name: str) -> float:
    """A probability in ``[0, 1]`` (ValueError naming ``name`` otherwise)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
    return float(value)


def check_fill(fill: Any) -> tuple[int, int, int]:
    """Torchvision's ``fill`` (None: black; a number; one value per channel) as an RGB uint8 triple."""
    if fill is None:
        return 0, 0, 0
    values = [fill] if isinstance(fill, numbers.Real) else list(fill) if isinstance(fill, Sequence) else None
    if values is None or len(values) not in (1, 3) or not all(isinstance(v, numbers.Real) for v in values):
        raise ValueError(f"fill must be None, a number or 3 numbers (one per channel), got {fill!r}")
    if len(values) == 1:
        values = values * 3
    if not all(0 <= float(v) <= 255 for v in values):
        raise ValueError(f"fill must be in uint8 units (0..255), got {fill!r}")
    r, g, b = (int(round(float(v))) for v in values)
    return r, g, b


def check_interpolation(value: Any, allowed: Sequence[str]) -> str:
    """An interpolation name (a string, or torchvision's ``InterpolationMode``) among ``allowed``."""
    name = getattr(value, "value", value)
    if not isinstance(name, str) or name.lower() not in allowed:
        raise ValueError(f"interpolation must be one of {list(allowed)}, got {value!r}")
    return name.lower()


class RandomHorizontalFlip(ImageAugment):
    """torchvision's ``RandomHorizontalFlip``: mirror the image left to right with probability ``p``.

    Args:
        p: the probability of a flip.

    Raises:
        ValueError: ``p`` is not in ``[0, 1]``.
    """

    def __init__(self, p: float = 0.5) -> None:
        self.p = check_probability(p, "p")

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:  # noqa: D102
        if rng.random() < self.p:
            return cv2.flip(image, 1)
        return image

    def _extra_repr(self) -> str:
        return f"p={self.p}"


def _jitter_range(
    value: Any, name: str, center: float, bound: tuple[float, float], clip_first_on_zero: bool
) -> tuple[float, float] | None:
    """Torchvision's ``ColorJitter._check_input``: a number ``x`` is ``[center - x, center + x]``; None for a no-op."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"{name} must be non-negative, got {value!r}")
        low, high = center - float(value), center + float(value)
        if clip_first_on_zero:
            low = max(low, 0.0)
    elif isinstance(value, Sequence) and len(value) == 2:
        low, high = float(value[0]), float(value[1])
    else:
        raise ValueError(f"{name} must be a number or a (min, max) pair, got {value!r}")
    if not bound[0] <= low <= high <= bound[1]:
        raise ValueError(f"{name} must lie in [{bound[0]}, {bound[1]}] with min <= max, got {value!r}")
    return None if low == high == center else (low, high)


class ColorJitter(ImageAugment):
    """torchvision's ``ColorJitter`` as it acts on a PIL image (what timm's and DeiT's recipes run), on uint8.

    Brightness, contrast, saturation and hue factors uniform in their ranges, applied in a random order (a random
    permutation per image, as torchvision draws it). Brightness, contrast and saturation are PIL's
    ``ImageEnhance`` (exact, or within one level for saturation); hue is PIL's HSV round trip with the hue shifted
    by ``int(factor * 255)``, computed from OpenCV's float HSV (within one level for 99.9% of the pixels, a few
    levels for the rest; it is also the slowest op, about 1 ms per 224x224 image).

    Args:
        brightness: ``x`` (factor in ``[max(0, 1 - x), 1 + x]``) or ``(min, max)``; 0: off.
        contrast: as ``brightness``.
        saturation: as ``brightness``.
        hue: ``h`` (factor in ``[-h, h]``, ``h <= 0.5``) or ``(min, max)`` within ``[-0.5, 0.5]``; 0: off.

    Raises:
        ValueError: a negative value, or a range outside what torchvision accepts.
    """

    def __init__(
        self,
        brightness: float | Sequence[float] = 0,
        contrast: float | Sequence[float] = 0,
        saturation: float | Sequence[float] = 0,
        hue: float | Sequence[float] = 0,
    ) -> None:
        self.brightness = _jitter_range(brightness, "brightness", 1.0, (0.0, math.inf), True)
        self.contrast = _jitter_range(contrast, "contrast", 1.0, (0.0, math.inf), True)
        self.saturation = _jitter_range(saturation, "saturation", 1.0, (0.0, math.inf), True)
        self.hue = _jitter_range(hue, "hue", 0.0, (-0.5, 0.5), False)

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:  # noqa: D102
        order = rng.permutation(4)
        ranges = (self.brightness, self.contrast, self.saturation, self.hue)
        factors = [None if r is None else float(rng.uniform(r[0], r[1])) for r in ranges]
        for k in order:
            factor = factors[k]
            if factor is None:
                continue
            if k == 0:
                image = colour.brightness(image, factor, "pil")
            elif k == 1:
                image = colour.contrast(image, factor, "pil")
            elif k == 2:
                image = colour.saturation(image, factor, "pil")
            else:
                image = colour.hue(image, factor)
        return image

    def _extra_repr(self) -> str:
        return f"brightness={self.brightness}, contrast={self.contrast}, saturation={self.saturation}, hue={self.hue}"
