"""RandAugment, torchvision's and timm's, drawn per image on the CPU and run on the batch as one plan.

:class:`RandAugment` has the signature and the behaviour of ``torchvision.transforms.v2.RandAugment``: ``num_ops``
ops per image from torchvision's 14 (Identity included), at magnitude bin ``magnitude`` of ``num_magnitude_bins``,
signed ops negated half of the time. :class:`TimmRandAugment` is timm's (``rand_augment_transform``): built from a
config string such as ``"rand-m9-mstd0.5-inc1"`` by :meth:`RandAugment.from_config` or :func:`rand_augment`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from typing_extensions import override

from fastdata.gpu_transforms.base import gen_repr
from fastdata.gpu_transforms.plan import PlanPolicy, op_index, signed
from fastdata.gpu_transforms.policy_tables import _RAND_INCREASING, _RAND_OPS, _TIMM_OPS, _bins, _torchvision_arg
from fastdata.transforms.timm_augment import parse_rand_config

__all__ = ["RandAugment", "TimmRandAugment", "rand_augment"]


class RandAugment(PlanPolicy):
    """torchvision's RandAugment, drawn per image.

    torchvision's RandAugment per image: ``num_ops`` ops in a row, each chosen uniformly (with replacement) from
    Identity, ShearX, ShearY, TranslateX, TranslateY, Rotate, Brightness, Color, Contrast, Sharpness, Posterize,
    Solarize, AutoContrast and Equalize, at torchvision's magnitude bin ``magnitude`` of ``num_magnitude_bins`` for
    every op; the shears, translations, rotation and the four enhance ops are negated with probability 1/2.

    At ``magnitude=9`` of 31 bins: rotation ±9 degrees, shear ±0.09, translation ±(150/331 * 9/30) of the image
    size in whole pixels, enhance factors 1 ± 0.27, posterize to 7 bits, solarize above 0.7 of white. Each image's
    result is torchvision's ops applied to it with those draws. Same signature and defaults as torchvision's (fill
    in uint8 units); timm's RandAugment (``"rand-m9-mstd0.5-inc1"``: each op applied with probability 0.5, Invert and
    SolarizeAdd instead of Identity, magnitudes out of 10) is :class:`TimmRandAugment`, from :meth:`from_config`.

    Args:
        num_ops: Ops per image, >= 0.
        magnitude: The magnitude bin of every op, ``0 .. num_magnitude_bins - 1``.
        num_magnitude_bins: Bins over each op's range (torchvision: 31).
        interpolation: ``"nearest"`` (torchvision's default) or ``"bilinear"`` (or torchvision's ``InterpolationMode``).
        fill: Fill colour of the geometric ops in uint8 units, or None for black.
        generator: CPU generator for the draws (None: torch's default).

    Example:
        >>> ra = RandAugment(num_ops=2, magnitude=9, generator=torch.Generator().manual_seed(0))
        >>> images, labels = ra(torch.zeros(8, 3, 32, 32, dtype=torch.uint8), None)
    """

    OPS = (
        "identity",
        "shear_x",
        "shear_y",
        "translate_x",
        "translate_y",
        "rotate",
        "brightness",
        "color",
        "contrast",
        "sharpness",
        "posterize",
        "solarize",
        "autocontrast",
        "equalize",
    )

    def __init__(
        self,
        num_ops: int = 2,
        magnitude: int = 9,
        num_magnitude_bins: int = 31,
        interpolation: object = "nearest",
        fill: Sequence[float] | float | None = None,
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(fill, interpolation, generator)
        if isinstance(num_ops, bool) or not isinstance(num_ops, int) or num_ops < 0:
            raise ValueError(f"num_ops must be an int >= 0, got {num_ops!r}")
        if isinstance(num_magnitude_bins, bool) or not isinstance(num_magnitude_bins, int) or num_magnitude_bins < 2:
            raise ValueError(
                f"num_magnitude_bins must be an int >= 2, got {num_magnitude_bins!r}; timm's "
                "magnitude_std/increasing/prob belong to TimmRandAugment (RandAugment.from_config)"
            )
        if isinstance(magnitude, bool) or not isinstance(magnitude, int) or not 0 <= magnitude < num_magnitude_bins:
            raise ValueError(f"magnitude must be an int bin in 0..{num_magnitude_bins - 1}, got {magnitude!r}")
        self.num_ops, self.magnitude, self.num_magnitude_bins = num_ops, magnitude, num_magnitude_bins

    @staticmethod
    def from_config(config: str, **kwargs) -> TimmRandAugment:
        """Timm's RandAugment from its config string, e.g. ``"rand-m9-mstd0.5-inc1"``: a :class:`TimmRandAugment`."""
        return TimmRandAugment.from_config(config, **kwargs)

    @override
    def get_plan(self, batch_size: int, height: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        shape = (self.num_ops, batch_size)
        choice = torch.randint(len(self.OPS), shape, generator=self.generator)
        negate = self._rand(*shape) <= 0.5
        op = torch.zeros(shape, dtype=torch.int64)
        arg = torch.zeros(shape, dtype=torch.float64)
        for k, name in enumerate(self.OPS):
            bins = _bins(name, self.num_magnitude_bins, height, width, wide=False)
            value = (
                torch.zeros_like(arg)
                if bins is None
                else _torchvision_arg(name, bins[self.magnitude].expand(shape), negate)
            )
            op = torch.where(choice == k, op_index(name), op)
            arg = torch.where(choice == k, value, arg)
        return op, arg

    @override
    def extra_repr(self) -> str:
        return (
            f"num_ops={self.num_ops}, magnitude={self.magnitude}, num_magnitude_bins={self.num_magnitude_bins}, "
            f"interpolation={self.interpolation!r}, fill={self.fill}{gen_repr(self.generator)}"
        )


class TimmRandAugment(PlanPolicy):
    """timm's RandAugment, drawn per image.

    timm's RandAugment (``rand_augment_transform``), drawn per image: ``num_ops`` ops chosen uniformly (with
    replacement) from timm's 15 (no Identity; Invert and SolarizeAdd), each applied with probability ``prob`` (so
    about one op per image at timm's 0.5) at a magnitude ``~ N(magnitude, magnitude_std)`` clipped to
    ``[0, magnitude_max]`` out of 10 (at 9: rotation 27 degrees). torchvision's RandAugment is :class:`RandAugment`.

    The ops, their order and their magnitude-to-argument maps are timm's (``increasing`` picks the variants whose
    strength grows with the magnitude). Differences from timm: geometric ops interpolate bilinearly (timm picks
    bilinear or bicubic at random, in PIL) and translations are relative to the image size (``translate_pct``).

    Args:
        num_ops: Ops per image (timm's ``n``), >= 1.
        magnitude: Mean magnitude (timm's ``m``), 0..magnitude_max.
        magnitude_std: Std of the magnitude noise (``mstd``); ``inf`` draws uniformly in ``[0, magnitude]``.
        increasing: Use the ``*Increasing`` ops (``inc1``).
        prob: Probability of applying each chosen op (timm's ``p``, default 0.5).
        magnitude_max: Upper clip of the magnitude (``mmax``).
        translate_pct: Largest translation as a fraction of the image size.
        fill: Fill colour of the geometric ops in uint8 units (timm: the ImageNet mean), or None for black.
        interpolation: ``"bilinear"`` or ``"nearest"``.
        generator: CPU generator for the draws (None: torch's default).

    Example:
        >>> ra = TimmRandAugment.from_config("rand-m9-mstd0.5-inc1", generator=torch.Generator().manual_seed(0))
        >>> images, labels = ra(torch.zeros(8, 3, 32, 32, dtype=torch.uint8), None)
    """

    def __init__(
        self,
        num_ops: int = 2,
        magnitude: float = 9,
        magnitude_std: float = 0.0,
        increasing: bool = False,
        *,
        prob: float = 0.5,
        magnitude_max: float = 10.0,
        translate_pct: float = 0.45,
        fill: Sequence[float] | float | None = (124, 116, 104),
        interpolation: str = "bilinear",
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(fill, interpolation, generator)
        if isinstance(num_ops, bool) or not isinstance(num_ops, int) or num_ops < 1:
            raise ValueError(f"num_ops must be an int >= 1, got {num_ops!r}")
        if not magnitude_std >= 0:
            raise ValueError(f"magnitude_std must be >= 0 (inf: uniform), got {magnitude_std!r}")
        if not 0 <= prob <= 1:
            raise ValueError(f"prob must be in [0, 1], got {prob!r}")
        self.num_ops, self.magnitude, self.magnitude_std = num_ops, float(magnitude), float(magnitude_std)
        self.increasing, self.prob, self.magnitude_max = bool(increasing), float(prob), float(magnitude_max)
        self.translate_pct = float(translate_pct)
        self.op_names = tuple(_RAND_INCREASING.get(name, name) if increasing else name for name in _RAND_OPS)

    @classmethod
    def from_config(cls, config: str, **kwargs) -> TimmRandAugment:
        """Build from timm's config string, e.g. ``"rand-m9-mstd0.5-inc1"`` (sections m, n, p, mstd, mmax, inc)."""
        args: dict = {"num_ops": 2, "magnitude": 10.0, **parse_rand_config(config)}
        if "transforms" in args:
            raise ValueError(
                f"the batched TimmRandAugment has timm's default op set only; drop the t section of "
                f"{config!r} (or use fastdata.transforms.RandAugment.from_config at decode time)"
            )
        args["magnitude"] = float(args["magnitude"])
        if "magnitude_max" in args:
            args["magnitude_max"] = float(args["magnitude_max"])
        return cls(**{**args, **kwargs})

    def get_magnitudes(self, shape: tuple[int, ...]) -> torch.Tensor:
        """Draw float64 magnitudes of ``shape``, noised and clipped like timm's ``AugmentOp``."""
        if self.magnitude_std == math.inf:
            m = self._rand(*shape) * self.magnitude
        elif self.magnitude_std > 0:
            m = self.magnitude + self.magnitude_std * torch.randn(*shape, dtype=torch.float64, generator=self.generator)
        else:
            m = torch.full(shape, self.magnitude, dtype=torch.float64)
        return m.clamp(0.0, self.magnitude_max)

    @override
    def get_plan(self, batch_size: int, height: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        shape = (self.num_ops, batch_size)
        choice = torch.randint(len(self.op_names), shape, generator=self.generator)
        applied = self._rand(*shape) < self.prob
        m, neg = self.get_magnitudes(shape), self._rand(*shape) < 0.5
        op = torch.full(shape, -1, dtype=torch.int64)
        arg = torch.zeros(shape, dtype=torch.float64)
        for k, name in enumerate(self.op_names):
            chosen = (choice == k) & applied
            plan_op, level = _TIMM_OPS[name]
            if name in ("TranslateXRel", "TranslateYRel"):
                size = width if name == "TranslateXRel" else height
                value = signed(m / 10 * self.translate_pct, neg) * size
            else:
                value = level(m, neg) if level is not None else torch.zeros_like(m)
            op = torch.where(chosen, op_index(plan_op), op)
            arg = torch.where(chosen, value, arg)
        return op, arg

    @override
    def extra_repr(self) -> str:
        return (
            f"num_ops={self.num_ops}, magnitude={self.magnitude}, magnitude_std={self.magnitude_std}, "
            f"increasing={self.increasing}, prob={self.prob}{gen_repr(self.generator)}"
        )


def rand_augment(config: str, **kwargs) -> TimmRandAugment:
    """``TimmRandAugment.from_config(config, **kwargs)``: timm's ``rand_augment_transform`` spelling."""
    return TimmRandAugment.from_config(config, **kwargs)
