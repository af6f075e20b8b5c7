"""Augmentation policies that draw their ops and magnitudes per image.

TrivialAugmentWide, AutoAugment (ImageNet) and
3-Augment (DeiT III); RandAugment (torchvision's and timm's) lives in :mod:`.rand_augment` and is re-exported here.

Each policy draws a plan (:mod:`.plan`) for the whole batch on the CPU from its ``generator`` (reproducible, and
reproduced on resume by restoring the generator's state), then runs it on the batch's device without a Python
loop over the images. uint8 (0..255) and float ([0, 1]) batches keep their dtype.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from typing_extensions import override

from fastdata.gpu_transforms.base import gen_repr
from fastdata.gpu_transforms.plan import PlanPolicy, op_index
from fastdata.gpu_transforms.policy_tables import _IMAGENET_POLICY, _bins, _torchvision_arg
from fastdata.gpu_transforms.rand_augment import RandAugment, TimmRandAugment, rand_augment

__all__ = ["AutoAugment", "RandAugment", "ThreeAugment", "TimmRandAugment", "TrivialAugmentWide", "rand_augment"]


class TrivialAugmentWide(PlanPolicy):
    """torchvision's TrivialAugmentWide per image: one op uniformly from 14, at a uniform magnitude bin.

    Args:
        num_magnitude_bins: Number of magnitude bins (torchvision: 31).
        interpolation: ``"nearest"`` (torchvision's default) or ``"bilinear"``.
        fill: Fill colour of the geometric ops in uint8 units (None: black).
        generator: CPU generator (None: torch's default).
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
        num_magnitude_bins: int = 31,
        *,
        interpolation: str = "nearest",
        fill: Sequence[float] | float | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(fill, interpolation, generator)
        if isinstance(num_magnitude_bins, bool) or not isinstance(num_magnitude_bins, int) or num_magnitude_bins < 2:
            raise ValueError(f"num_magnitude_bins must be an int >= 2, got {num_magnitude_bins!r}")
        self.num_magnitude_bins = num_magnitude_bins

    @override
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

    @override
    def extra_repr(self) -> str:
        return f"num_magnitude_bins={self.num_magnitude_bins}{gen_repr(self.generator)}"


class AutoAugment(PlanPolicy):
    """AutoAugment's ImageNet policy, drawn per image.

    AutoAugment's ImageNet policy as torchvision defines it, drawn per image: one of 25 sub-policies, each
    a pair of (op, probability, magnitude bin) out of 10 bins.

    Args:
        policy: Only ``"imagenet"``.
        interpolation: ``"nearest"`` (torchvision's default) or ``"bilinear"``.
        fill: Fill colour of the geometric ops in uint8 units (None: black).
        generator: CPU generator (None: torch's default).
    """

    POLICY = _IMAGENET_POLICY

    def __init__(
        self,
        policy: str = "imagenet",
        *,
        interpolation: str = "nearest",
        fill: Sequence[float] | float | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(fill, interpolation, generator)
        if policy != "imagenet":
            raise ValueError(f"policy must be 'imagenet', got {policy!r}")
        self.policy = policy

    @override
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

    @override
    def extra_repr(self) -> str:
        return f"policy={self.policy!r}{gen_repr(self.generator)}"


class ThreeAugment(PlanPolicy):
    """DeiT III's 3-Augment, drawn per image.

    DeiT III's 3-Augment per image: one of grayscale (PIL's ``convert("L")``, ``pil_grayscale`` in
    :mod:`fastdata.gpu_transforms.ops`: Pillow's bytes on uint8), solarize (threshold 128) or Gaussian blur,
    uniformly, then a
    per-image colour jitter of strength ``color_jitter`` (0: none) as torchvision's ``ColorJitter(x, x, x)``:
    brightness, contrast and saturation factors uniform in ``[max(0, 1 - x), 1 + x]``, applied in a random order
    drawn per image.

    The blur is DeiT III's: PIL's ``ImageFilter.GaussianBlur(radius)`` with the radius (PIL's sigma) uniform in
    ``blur_sigma``, which Pillow computes as three extended box blurs per axis
    (``pil_gaussian_blur`` in :mod:`fastdata.gpu_transforms.ops`): on uint8 batches each blurred image is Pillow's bytes
    exactly; a float batch's is Pillow's blur of ``round(255 * x)``, / 255.

    Args:
        color_jitter: Brightness/contrast/saturation jitter strength after the choice (DeiT III: 0.3).
        blur_sigma: Bounds of the blur's radius (DeiT III: 0.1..2.0).
        generator: CPU generator (None: torch's default).
    """

    OPS = ("pil_grayscale", "solarize", "pil_gaussian_blur")

    def __init__(
        self,
        color_jitter: float = 0.3,
        *,
        blur_sigma: tuple[float, float] = (0.1, 2.0),
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(None, "bilinear", generator)
        lo, hi = (float(s) for s in blur_sigma)
        if not 0 < lo <= hi:
            raise ValueError(f"blur_sigma must satisfy 0 < low <= high, got {blur_sigma!r}")
        if not color_jitter >= 0:
            raise ValueError(f"color_jitter must be >= 0 (0: none), got {color_jitter!r}")
        self.blur_sigma, self.color_jitter = (lo, hi), float(color_jitter)

    @override
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

    @override
    def extra_repr(self) -> str:
        return f"color_jitter={self.color_jitter}, blur_sigma={self.blur_sigma}{gen_repr(self.generator)}"
