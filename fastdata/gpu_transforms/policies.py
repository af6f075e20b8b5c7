"""Augmentation policies that draw their ops and magnitudes per image: RandAugment (timm), TrivialAugmentWide,
AutoAugment (ImageNet) and 3-Augment (DeiT III).

Each policy draws a plan (:mod:`.plan`) for the whole batch on the CPU from its ``generator`` (reproducible, and
reproduced on resume by restoring the generator's state), then runs it on the batch's device without a Python
loop over the images. uint8 (0..255) and float ([0, 1]) batches keep their dtype.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import torch

from fastdata.gpu_transforms.base import BatchTransform, Labels, check_generator, check_images, gen_repr
from fastdata.gpu_transforms.plan import apply_plan, op_index, signed
from fastdata.gpu_transforms.policy_tables import (
    _IMAGENET_POLICY, _RAND_INCREASING, _RAND_OPS, _TIMM_OPS, _bins, _torchvision_arg,
)

__all__ = ["AutoAugment", "RandAugment", "ThreeAugment", "TrivialAugmentWide", "rand_augment"]


class _PlanPolicy(BatchTransform):
    """Shared part: the fill colour, the interpolation and the generator; ``get_plan`` draws the plan."""

    blur_kernel = 9

    def __init__(self, fill: Sequence[float] | float | None, interpolation: str,
                 generator: torch.Generator | None) -> None:
        if interpolation not in ("nearest", "bilinear"):
            raise ValueError(f"interpolation must be 'nearest' or 'bilinear', got {interpolation!r}")
        self.interpolation = interpolation
        self.fill = None if fill is None else tuple(float(f) for f in (fill if isinstance(fill, Sequence) else [fill]))
        self.generator = check_generator(generator)

    def get_plan(self, batch_size: int, height: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Draw CPU tensors ``(op, arg)`` ``[slots, batch_size]`` (see :mod:`fastdata.gpu_transforms.plan`)."""
        raise NotImplementedError

    def __call__(self, images: torch.Tensor, labels: Labels = None) -> tuple[torch.Tensor, Labels]:
        check_images(images)
        n, c, h, w = images.shape
        op, arg = self.get_plan(n, h, w)
        fill = None
        if self.fill is not None:
            fill = torch.tensor(self.fill * c if len(self.fill) == 1 else self.fill, dtype=torch.float64)
            if fill.numel() != c:
                raise ValueError(f"fill has {fill.numel()} values but images have {c} channels; pass one per channel")
        return apply_plan(images, op, arg, fill=fill, interpolation=self.interpolation,
                          blur_kernel=self.blur_kernel), labels

    def _rand(self, *shape: int) -> torch.Tensor:
        return torch.rand(*shape, dtype=torch.float64, generator=self.generator)


class RandAugment(_PlanPolicy):
    """timm's RandAugment, drawn per image: ``num_ops`` ops chosen uniformly (with replacement), each applied with
    probability ``prob`` at a magnitude ``~ N(magnitude, magnitude_std)`` clipped to ``[0, magnitude_max]``.

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

    Example::

        >>> ra = RandAugment.from_config("rand-m9-mstd0.5-inc1", generator=torch.Generator().manual_seed(0))
        >>> images, labels = ra(torch.zeros(8, 3, 32, 32, dtype=torch.uint8), None)
    """

    def __init__(self, num_ops: int = 2, magnitude: float = 9, magnitude_std: float = 0.0, increasing: bool = False,
                 *, prob: float = 0.5, magnitude_max: float = 10.0, translate_pct: float = 0.45,
                 fill: Sequence[float] | float | None = (124, 116, 104), interpolation: str = "bilinear",
                 generator: torch.Generator | None = None) -> None:
        super().__init__(fill, interpolation, generator)
        if isinstance(num_ops, bool) or not isinstance(num_ops, int) or num_ops < 1:
            raise ValueError(f"num_ops must be an int >= 1, got {num_ops!r}")
        if not 0 <= magnitude_std:
            raise ValueError(f"magnitude_std must be >= 0 (inf: uniform), got {magnitude_std!r}")
        if not 0 <= prob <= 1:
            raise ValueError(f"prob must be in [0, 1], got {prob!r}")
        self.num_ops, self.magnitude, self.magnitude_std = num_ops, float(magnitude), float(magnitude_std)
        self.increasing, self.prob, self.magnitude_max = bool(increasing), float(prob), float(magnitude_max)
        self.translate_pct = float(translate_pct)
        self.op_names = tuple(_RAND_INCREASING.get(name, name) if increasing else name for name in _RAND_OPS)

    @classmethod
    def from_config(cls, config: str, **kwargs) -> RandAugment:
        """Build from timm's config string, e.g. ``"rand-m9-mstd0.5-inc1"`` (sections m, n, p, mstd, mmax, inc)."""
        sections = config.split("-")
        if sections[0] != "rand":
            raise ValueError(f"a RandAugment config starts with 'rand', got {config!r}; e.g. 'rand-m9-mstd0.5-inc1'")
        args: dict = {"num_ops": 2, "magnitude": 10.0}
        for section in sections[1:]:
            match = re.fullmatch(r"([a-z]+)(\d.*)", section)
            if match is None:
                raise ValueError(f"cannot read section {section!r} of {config!r}; use m<int>, n<int>, p<float>, "
                                 "mstd<float>, mmax<int> or inc<0|1>")
            key, value = match.groups()
            if key == "m":
                args["magnitude"] = float(int(value))
            elif key == "n":
                args["num_ops"] = int(value)
            elif key == "p":
                args["prob"] = float(value)
            elif key == "mstd":
                args["magnitude_std"] = math.inf if float(value) > 100 else float(value)
            elif key == "mmax":
                args["magnitude_max"] = float(int(value))
            elif key == "inc":
                args["increasing"] = bool(int(value))
            else:
                raise ValueError(f"unknown section {section!r} in {config!r}; known: m, n, p, mstd, mmax, inc")
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

    def extra_repr(self) -> str:
        return (f"num_ops={self.num_ops}, magnitude={self.magnitude}, magnitude_std={self.magnitude_std}, "
                f"increasing={self.increasing}, prob={self.prob}{gen_repr(self.generator)}")


def rand_augment(config: str, **kwargs) -> RandAugment:
    """``RandAugment.from_config(config, **kwargs)``: timm's ``rand_augment_transform`` spelling."""
    return RandAugment.from_config(config, **kwargs)


class TrivialAugmentWide(_PlanPolicy):
    """torchvision's TrivialAugmentWide per image: one op uniformly from 14, at a uniform magnitude bin.

    Args:
        num_magnitude_bins: Number of magnitude bins (torchvision: 31).
        interpolation: ``"nearest"`` (torchvision's default) or ``"bilinear"``.
        fill: Fill colour of the geometric ops in uint8 units (None: black).
        generator: CPU generator (None: torch's default).
    """

    OPS = ("identity", "shear_x", "shear_y", "translate_x", "translate_y", "rotate", "brightness", "color",
           "contrast", "sharpness", "posterize", "solarize", "autocontrast", "equalize")

    def __init__(self, num_magnitude_bins: int = 31, *, interpolation: str = "nearest",
                 fill: Sequence[float] | float | None = None, generator: torch.Generator | None = None) -> None:
        super().__init__(fill, interpolation, generator)
        if isinstance(num_magnitude_bins, bool) or not isinstance(num_magnitude_bins, int) or num_magnitude_bins < 2:
            raise ValueError(f"num_magnitude_bins must be an int >= 2, got {num_magnitude_bins!r}")
        self.num_magnitude_bins = num_magnitude_bins

    def get_plan(self, batch_size: int, height: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        choice = torch.randint(len(self.OPS), (1, batch_size), generator=self.generator)
        bin_ = torch.randint(self.num_magnitude_bins, (1, batch_size), generator=self.generator)
        negate = self._rand(1, batch_size) <= 0.5
        op = torch.zeros(1, batch_size, dtype=torch.int64)
        arg = torch.zeros(1, batch_size, dtype=torch.float64)
        for k, name in enumerate(self.OPS):
            bins = _bins(name, self.num_magnitude_bins, height, width, wide=True)
            value = torch.zeros_like(arg) if bins is None else _torchvision_arg(name, bins[bin_], negate)
            op = torch.where(choice == k, op_index(name), op)
            arg = torch.where(choice == k, value, arg)
        return op, arg

    def extra_repr(self) -> str:
        return f"num_magnitude_bins={self.num_magnitude_bins}{gen_repr(self.generator)}"


class AutoAugment(_PlanPolicy):
    """AutoAugment's ImageNet policy as torchvision defines it, drawn per image: one of 25 sub-policies, each
    a pair of (op, probability, magnitude bin) out of 10 bins.

    Args:
        policy: Only ``"imagenet"``.
        interpolation: ``"nearest"`` (torchvision's default) or ``"bilinear"``.
        fill: Fill colour of the geometric ops in uint8 units (None: black).
        generator: CPU generator (None: torch's default).
    """

    POLICY = _IMAGENET_POLICY

    def __init__(self, policy: str = "imagenet", *, interpolation: str = "nearest",
                 fill: Sequence[float] | float | None = None, generator: torch.Generator | None = None) -> None:
        super().__init__(fill, interpolation, generator)
        if policy != "imagenet":
            raise ValueError(f"policy must be 'imagenet', got {policy!r}")
        self.policy = policy

    def get_plan(self, batch_size: int, height: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        sub = torch.randint(len(self.POLICY), (batch_size,), generator=self.generator)
        coin = self._rand(2, batch_size)
        negate = self._rand(2, batch_size) <= 0.5
        op = torch.full((2, batch_size), -1, dtype=torch.int64)
        arg = torch.zeros(2, batch_size, dtype=torch.float64)
        for k, pair in enumerate(self.POLICY):
            for slot, (name, p, bin_) in enumerate(pair):
                chosen = (sub == k) & (coin[slot] <= p)
                bins = _bins(name, 10, height, width, wide=False)
                value = 0.0 if bins is None else _torchvision_arg(name, bins[bin_].expand(batch_size), negate[slot])
                op[slot] = torch.where(chosen, op_index(name), op[slot])
                arg[slot] = torch.where(chosen, value, arg[slot])
        return op, arg

    def extra_repr(self) -> str:
        return f"policy={self.policy!r}{gen_repr(self.generator)}"


class ThreeAugment(_PlanPolicy):
    """DeiT III's 3-Augment per image: one of grayscale, solarize (threshold 128) or Gaussian blur, uniformly, then a
    per-image colour jitter of strength ``color_jitter`` (0: none) as torchvision's ``ColorJitter(x, x, x)``:
    brightness, contrast and saturation factors uniform in ``[max(0, 1 - x), 1 + x]``, applied in a random order
    drawn per image.

    The blur is DeiT III's: PIL's ``ImageFilter.GaussianBlur(radius)`` with the radius (PIL's sigma) uniform in
    ``blur_sigma``, which Pillow computes as three extended box blurs per axis
    (:func:`~fastdata.gpu_transforms.ops.pil_gaussian_blur`): on uint8 batches each blurred image is Pillow's bytes
    exactly; a float batch's is Pillow's blur of ``round(255 * x)``, / 255.

    Args:
        color_jitter: Brightness/contrast/saturation jitter strength after the choice (DeiT III: 0.3).
        blur_sigma: Bounds of the blur's radius (DeiT III: 0.1..2.0).
        generator: CPU generator (None: torch's default).
    """

    OPS = ("grayscale", "solarize", "pil_gaussian_blur")

    def __init__(self, color_jitter: float = 0.3, *, blur_sigma: tuple[float, float] = (0.1, 2.0),
                 generator: torch.Generator | None = None) -> None:
        super().__init__(None, "bilinear", generator)
        lo, hi = (float(s) for s in blur_sigma)
        if not 0 < lo <= hi:
            raise ValueError(f"blur_sigma must satisfy 0 < low <= high, got {blur_sigma!r}")
        if not 0 <= color_jitter:
            raise ValueError(f"color_jitter must be >= 0 (0: none), got {color_jitter!r}")
        self.blur_sigma, self.color_jitter = (lo, hi), float(color_jitter)

    def get_plan(self, batch_size: int, height: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        choice = torch.randint(3, (1, batch_size), generator=self.generator)
        sigma = self.blur_sigma[0] + (self.blur_sigma[1] - self.blur_sigma[0]) * self._rand(1, batch_size)
        ids = torch.tensor([op_index(name) for name in self.OPS])
        op, arg = ids[choice], torch.where(choice == 1, 128.0, torch.where(choice == 2, sigma, 0.0))
        if not self.color_jitter:
            return op, arg
        lo, hi = max(0.0, 1.0 - self.color_jitter), 1.0 + self.color_jitter
        factors = lo + (hi - lo) * self._rand(3, batch_size)  # brightness, contrast, saturation
        order = torch.argsort(self._rand(batch_size, 3), dim=1).T  # [3 slots, n]: a random order per image
        jitter_ids = torch.tensor([op_index(name) for name in ("brightness", "contrast", "color")])
        return torch.cat([op, jitter_ids[order]]), torch.cat([arg, factors.gather(0, order)])

    def extra_repr(self) -> str:
        return f"color_jitter={self.color_jitter}, blur_sigma={self.blur_sigma}{gen_repr(self.generator)}"
