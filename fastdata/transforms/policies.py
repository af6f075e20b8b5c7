"""Augmentation policies on the uint8 crop at decode time.

Torchvision v2's ``RandAugment``, ``TrivialAugmentWide``
and ``AutoAugment`` (ImageNet policy), and DeiT III's ``ThreeAugment``.

Each draws its ops and magnitudes per image from the sample's generator, with torchvision's distributions (an op
uniformly from the policy's space, signed magnitudes negated with probability 1/2, torchvision's magnitude bins),
and applies them with the uint8 ops of :mod:`fastdata.transforms.uint8_colour` and
:mod:`fastdata.transforms.uint8_geometry` as torchvision v2 does on a uint8 tensor (same op set, magnitudes, fill
and centre). ``RandAugment.from_config("rand-m9-mstd0.5-inc1")`` builds timm's RandAugment instead
(:class:`~fastdata.transforms.timm_augment.TimmRandAugment`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fastdata.transforms import uint8_colour as colour
from fastdata.transforms.augment import ColorJitter, check_fill, check_interpolation
from fastdata.transforms.compose import ImageAugment
from fastdata.transforms.policy_tables import (
    TV_AUTOAUGMENT,
    TV_IMAGENET_POLICY,
    TV_RANDAUGMENT,
    TV_TRIVIAL_WIDE,
    apply_op,
    tv_arg,
    tv_bins,
)
from fastdata.transforms.timm_augment import TimmRandAugment

__all__ = ["AutoAugment", "RandAugment", "ThreeAugment", "TrivialAugmentWide"]

Fill = Sequence[float] | float | None


def _check_bins(value: Any, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return value


class _TorchvisionPolicy(ImageAugment):
    """The shared part of the decode-time policies.

    The fill colour and interpolation of torchvision's ``_AutoAugmentBase``; :meth:`draw` picks the entries of
    :attr:`SPACE` an image gets, :meth:`apply` applies them as torchvision does.
    """

    SPACE: dict = {}  # noqa: RUF012 - each policy's table, never mutated

    def __init__(self, interpolation: Any, fill: Fill) -> None:
        self.interpolation = check_interpolation(interpolation, ("nearest", "bilinear"))
        self.fill = fill
        self._fill = check_fill(fill)

    def draw(self, rng: np.random.Generator, height: int, width: int) -> list[tuple[str, float]]:
        """The ``(entry, signed magnitude)`` pairs one image gets, in order (torchvision's names and magnitudes)."""
        raise NotImplementedError

    def _magnitude(
        self, name: str, bin_index: int | None, num_bins: int, height: int, width: int, rng: np.random.Generator
    ) -> float:
        bins = tv_bins(self.SPACE, name, num_bins, height, width)
        if bins is None:
            return 0.0
        assert bin_index is not None, f"{name} takes a magnitude: its policy entry gives a bin"
        magnitude = float(bins[bin_index])
        return -magnitude if self.SPACE[name][2] and rng.random() <= 0.5 else magnitude

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:  # noqa: D102
        for name, magnitude in self.draw(rng, image.shape[0], image.shape[1]):
            op = self.SPACE[name][0]
            image = apply_op(
                image, op, tv_arg(op, magnitude), flavour="tv", interpolation=self.interpolation, fill=self._fill
            )
        return image

    def _extra_repr(self) -> str:
        return f"interpolation={self.interpolation!r}, fill={self.fill!r}"


class RandAugment(_TorchvisionPolicy):
    """torchvision v2's ``RandAugment`` on the uint8 crop.

    ``num_ops`` ops, each uniformly from torchvision's 14
    (Identity, ShearX/Y, TranslateX/Y, Rotate, Brightness, Color, Contrast, Sharpness, Posterize, Solarize,
    AutoContrast, Equalize), at magnitude bin ``magnitude`` of ``num_magnitude_bins``, signed ops negated with
    probability 1/2.

    Args:
        num_ops: ops per image.
        magnitude: the magnitude bin, ``0 <= magnitude < num_magnitude_bins``.
        num_magnitude_bins: the number of magnitude bins.
        interpolation: ``"nearest"`` (torchvision's default) or ``"bilinear"`` (or an ``InterpolationMode``).
        fill: the colour of pixels a geometric op brings in (None: black; a number; 3 numbers, 0..255).

    Raises:
        ValueError: a bad ``num_ops``, ``magnitude``, bins, interpolation or fill.

    Example::

        DecodeCompose([RandomResizedCrop(224), RandomHorizontalFlip(), RandAugment(2, 9)])
        DecodeCompose([RandomResizedCrop(224), RandAugment.from_config("rand-m9-mstd0.5-inc1")])  # timm's
    """

    SPACE = TV_RANDAUGMENT

    def __init__(
        self,
        num_ops: int = 2,
        magnitude: int = 9,
        num_magnitude_bins: int = 31,
        interpolation: Any = "nearest",
        fill: Fill = None,
    ) -> None:
        super().__init__(interpolation, fill)
        self.num_ops = _check_bins(num_ops, "num_ops", 0)
        self.num_magnitude_bins = _check_bins(num_magnitude_bins, "num_magnitude_bins", 2)
        self.magnitude = _check_bins(magnitude, "magnitude", 0)
        if magnitude >= num_magnitude_bins:
            raise ValueError(f"magnitude must be below num_magnitude_bins={num_magnitude_bins}, got {magnitude}")
        self._names = tuple(self.SPACE)

    @classmethod
    def from_config(cls, config: str, **kwargs: Any) -> TimmRandAugment:
        """Timm's RandAugment from its config string (``"rand-m9-mstd0.5-inc1"``), as ``create_transform`` builds it.

        The geometric ops interpolate bilinearly by default, as ``timm.data.create_transform(...,
        auto_augment=config)`` does (its ``interpolation="bilinear"``) and as fastdata's timm ``create_loader`` does.
        timm's ``train.py`` passes ``--train-interpolation random`` instead (bilinear or bicubic per op): pass
        ``interpolation="random"`` to get that. See :class:`~fastdata.transforms.timm_augment.TimmRandAugment` (what
        this returns; its own ``from_config`` keeps ``rand_augment_transform``'s default, ``"random"``) for the
        sections and keyword arguments.
        """
        kwargs.setdefault("interpolation", "bilinear")
        return TimmRandAugment.from_config(config, **kwargs)

    def draw(self, rng: np.random.Generator, height: int, width: int) -> list[tuple[str, float]]:  # noqa: D102
        names = [self._names[int(rng.random() * len(self._names))] for _ in range(self.num_ops)]
        return [
            (name, self._magnitude(name, self.magnitude, self.num_magnitude_bins, height, width, rng)) for name in names
        ]

    def _extra_repr(self) -> str:
        return (
            f"num_ops={self.num_ops}, magnitude={self.magnitude}, num_magnitude_bins={self.num_magnitude_bins}, "
            + super()._extra_repr()
        )


class TrivialAugmentWide(_TorchvisionPolicy):
    """torchvision v2's ``TrivialAugmentWide`` on the uint8 crop.

    One op uniformly from its 14, at a magnitude bin
    drawn uniformly from ``num_magnitude_bins`` (the wide ranges: shear 0.99, translate 32 px, rotate 135 degrees).

    Args:
        num_magnitude_bins: the number of magnitude bins.
        interpolation: ``"nearest"`` (default) or ``"bilinear"``.
        fill: the fill colour of geometric ops (None: black).

    Raises:
        ValueError: a bad number of bins, interpolation or fill.
    """

    SPACE = TV_TRIVIAL_WIDE

    def __init__(self, num_magnitude_bins: int = 31, interpolation: Any = "nearest", fill: Fill = None) -> None:
        super().__init__(interpolation, fill)
        self.num_magnitude_bins = _check_bins(num_magnitude_bins, "num_magnitude_bins", 2)
        self._names = tuple(self.SPACE)

    def draw(self, rng: np.random.Generator, height: int, width: int) -> list[tuple[str, float]]:  # noqa: D102
        name = self._names[int(rng.random() * len(self._names))]
        bin_index = int(rng.random() * self.num_magnitude_bins)
        return [(name, self._magnitude(name, bin_index, self.num_magnitude_bins, height, width, rng))]

    def _extra_repr(self) -> str:
        return f"num_magnitude_bins={self.num_magnitude_bins}, " + super()._extra_repr()


class AutoAugment(_TorchvisionPolicy):
    """torchvision v2's ``AutoAugment`` (ImageNet policy) on the uint8 crop.

    torchvision v2's ``AutoAugment`` with the ImageNet policy on the uint8 crop: one of its 25 sub-policies
    uniformly, each of its two ops applied with its probability at its bin of 10.

    Args:
        policy: ``"imagenet"`` (or torchvision's ``AutoAugmentPolicy.IMAGENET``).
        interpolation: ``"nearest"`` (default) or ``"bilinear"``.
        fill: the fill colour of geometric ops (None: black).

    Raises:
        ValueError: another policy, a bad interpolation or fill.
    """

    POLICY = TV_IMAGENET_POLICY
    SPACE = TV_AUTOAUGMENT

    def __init__(self, policy: Any = "imagenet", interpolation: Any = "nearest", fill: Fill = None) -> None:
        super().__init__(interpolation, fill)
        name = getattr(policy, "value", policy)
        if not isinstance(name, str) or name.lower() != "imagenet":
            raise ValueError(f"policy must be 'imagenet' (AutoAugmentPolicy.IMAGENET), got {policy!r}")
        self.policy = "imagenet"

    def draw(self, rng: np.random.Generator, height: int, width: int) -> list[tuple[str, float]]:  # noqa: D102
        pair = self.POLICY[int(rng.random() * len(self.POLICY))]
        return [
            (name, self._magnitude(name, bin_index, 10, height, width, rng))
            for name, probability, bin_index in pair
            if rng.random() <= probability
        ]

    def _extra_repr(self) -> str:
        return f"policy={self.policy!r}, " + super()._extra_repr()


class ThreeAugment(ImageAugment):
    """DeiT III's 3-Augment on the uint8 crop.

    One of grayscale (PIL's ``L``), solarize (threshold 128) or PIL's
    ``GaussianBlur`` (radius uniform in ``blur_radius``), uniformly, then ``ColorJitter(x, x, x)`` with
    ``x = color_jitter`` (0: none), all as DeiT III runs them on PIL images.

    Args:
        color_jitter: the brightness/contrast/saturation jitter after the choice (DeiT III's default 0.3).
        blur_radius: the range of the blur's radius (DeiT III's 0.1..2.0).

    Raises:
        ValueError: a negative jitter or a bad radius range.
    """

    def __init__(self, color_jitter: float = 0.3, blur_radius: tuple[float, float] = (0.1, 2.0)) -> None:
        low, high = (float(v) for v in blur_radius)
        if not 0 < low <= high:
            raise ValueError(f"blur_radius must satisfy 0 < min <= max, got {blur_radius!r}")
        self.blur_radius = (low, high)
        self.color_jitter = float(color_jitter)
        self._jitter = ColorJitter(self.color_jitter, self.color_jitter, self.color_jitter) if color_jitter else None

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:  # noqa: D102
        choice = int(rng.integers(3))
        if choice == 0:
            image = colour.grayscale(image, "pil")
        elif choice == 1:
            image = colour.apply_lut(image, colour.solarize_lut(128))
        else:
            image = colour.gaussian_blur(image, float(rng.uniform(*self.blur_radius)))
        return image if self._jitter is None else self._jitter.apply(image, rng)

    def _extra_repr(self) -> str:
        return f"color_jitter={self.color_jitter}, blur_radius={self.blur_radius}"
