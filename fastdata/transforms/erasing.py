"""timm's ``RandomErasing`` on the uint8 crop, at decode time.

timm erases boxes of the NORMALIZED image with zeros (``const``), one normal colour per box (``rand``) or normal
noise per pixel (``pixel``). Here the image is still uint8, so each mode writes the uint8 value that normalizes to
timm's: with ``Normalize(mean, std)`` after it (as :class:`~fastdata.DataPrefetcher` or
:class:`~fastdata.NormalizeCollate` apply), ``v = round(255 * (mean + std * z))`` becomes ``z``:

- ``const``: ``z = 0``, the mean colour (``(124, 116, 104)`` for ImageNet's mean);
- ``rand``: ``z ~ N(0, 1)`` per channel, one colour for the box;
- ``pixel``: ``z ~ N(0, 1)`` per pixel and channel.

Two things differ from timm's: ``z`` is quantized to the uint8 grid (a step of ``1 / (255 std)``, about 0.017), and
draws outside what uint8 can hold are clipped to 0 or 255 (with ImageNet's statistics ``z`` below -2.12, -2.04,
-1.80 or above 2.25, 2.43, 2.64 for R, G, B: about 2-4% of the draws per channel). The boxes (count, area, aspect,
position) are drawn as timm draws them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from fastdata.transforms.augment import check_probability
from fastdata.transforms.compose import ImageAugment

__all__ = ["RandomErasing"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
_MODES = ("const", "rand", "pixel")


class RandomErasing(ImageAugment):
    """timm's ``RandomErasing`` (``timm.data.random_erasing``) on the uint8 image (see the module docstring).

    With probability ``probability``, erase ``count`` boxes (``count`` uniform in ``[min_count, max_count]``),
    each of area uniform in ``[min_area, max_area] / count`` of the image and aspect log-uniform in
    ``[min_aspect, max_aspect]``, ten tries each to fit inside the image.

    Args:
        probability: probability of erasing an image.
        min_area: smallest box area, as a fraction of the image.
        max_area: largest box area, as a fraction of the image.
        min_aspect: smallest aspect ratio (height / width) of a box.
        max_aspect: largest aspect ratio (None: ``1 / min_aspect``).
        mode: ``"const"``, ``"rand"`` or ``"pixel"`` (see the module docstring).
        min_count: fewest boxes.
        max_count: most boxes (None: ``min_count``).
        mean: the per-channel mean (0..1) of the ``Normalize`` that follows.
        std: the per-channel standard deviation of the ``Normalize`` that follows.

    Raises:
        ValueError: a probability outside [0, 1], a bad area, aspect or count range, an unknown mode, or a bad
            mean/std.
    """

    def __init__(
        self,
        probability: float = 0.5,
        min_area: float = 0.02,
        max_area: float = 1 / 3,
        min_aspect: float = 0.3,
        max_aspect: float | None = None,
        mode: str = "const",
        min_count: int = 1,
        max_count: int | None = None,
        *,
        mean: Sequence[float] = IMAGENET_MEAN,
        std: Sequence[float] = IMAGENET_STD,
    ) -> None:
        self.probability = check_probability(probability, "probability")
        if not 0 < min_area <= max_area <= 1:
            raise ValueError(f"need 0 < min_area <= max_area <= 1, got min_area={min_area!r}, max_area={max_area!r}")
        max_aspect = 1 / min_aspect if max_aspect is None else max_aspect
        if not 0 < min_aspect <= max_aspect:
            raise ValueError(f"need 0 < min_aspect <= max_aspect, got {min_aspect!r}, {max_aspect!r}")
        mode = (mode or "const").lower()
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
        max_count = min_count if max_count is None else max_count
        if not (isinstance(min_count, int) and isinstance(max_count, int) and 1 <= min_count <= max_count):
            raise ValueError(f"need ints 1 <= min_count <= max_count, got {min_count!r}, {max_count!r}")
        mean_a, std_a = np.asarray(mean, np.float64), np.asarray(std, np.float64)
        if mean_a.shape != (3,) or std_a.shape != (3,) or not (std_a > 0).all():
            raise ValueError(f"mean and std must be 3 values each (std > 0), in 0..1 units, got {mean!r}, {std!r}")
        self.min_area, self.max_area = float(min_area), float(max_area)
        self.min_aspect, self.max_aspect = float(min_aspect), float(max_aspect)
        self.log_aspect_ratio = (math.log(self.min_aspect), math.log(self.max_aspect))
        self.mode, self.min_count, self.max_count = mode, min_count, max_count
        self.mean, self.std = tuple(mean_a.tolist()), tuple(std_a.tolist())
        self._offset = (255.0 * mean_a).astype(np.float32)
        self._scale = (255.0 * std_a).astype(np.float32)

    def colour(self, z: np.ndarray) -> np.ndarray:
        """The uint8 values that normalize to ``z`` (normalized units), rounded and clipped."""
        return np.clip(np.rint(z * self._scale + self._offset), 0, 255).astype(np.uint8)

    def boxes(self, height: int, width: int, rng: np.random.Generator) -> list[tuple[int, int, int, int]]:
        """The ``(top, left, h, w)`` boxes one image gets (none when the coin says no), drawn as timm draws them."""
        if rng.random() > self.probability:
            return []
        area = height * width
        count = (
            self.min_count
            if self.min_count == self.max_count
            else int(rng.integers(self.min_count, self.max_count + 1))
        )
        boxes = []
        for _ in range(count):
            for _attempt in range(10):
                target_area = rng.uniform(self.min_area, self.max_area) * area / count
                aspect = math.exp(rng.uniform(*self.log_aspect_ratio))
                h = int(round(math.sqrt(target_area * aspect)))
                w = int(round(math.sqrt(target_area / aspect)))
                if w < width and h < height:
                    top = int(rng.integers(0, height - h + 1))
                    left = int(rng.integers(0, width - w + 1))
                    boxes.append((top, left, h, w))
                    break
        return boxes

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:  # noqa: D102
        for top, left, h, w in self.boxes(image.shape[0], image.shape[1], rng):
            region = image[top : top + h, left : left + w]
            if self.mode == "const":
                region[...] = self.colour(np.zeros(3, np.float32))
            elif self.mode == "rand":
                region[...] = self.colour(rng.standard_normal(3, dtype=np.float32))
            else:
                region[...] = self.colour(rng.standard_normal((h, w, 3), dtype=np.float32))
        return image

    def _extra_repr(self) -> str:
        return (
            f"probability={self.probability}, mode={self.mode!r}, count=({self.min_count}, {self.max_count}), "
            f"area=({self.min_area}, {self.max_area:.4g})"
        )
