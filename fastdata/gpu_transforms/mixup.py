"""Sample mixing in one place: Mixup, CutMix and timm's Mixup.

Sample mixing in one place: ``Mixup`` and ``CutMix`` (torchvision v2's, soft targets) and ``MixupCutmix`` (timm's
``Mixup``: switch probability, batch / pair / elem modes, label smoothing). ``MixUp`` is an alias of ``Mixup``
(torchvision v2's spelling).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from typing_extensions import override

from fastdata.gpu_transforms.base import (
    BatchTransform,
    Labels,
    check_generator,
    check_images,
    check_prob,
    gen_repr,
    to_device,
)
from fastdata.gpu_transforms.mix_sampling import sample_beta, soft_targets

__all__ = ["CutMix", "MixParams", "MixUp", "Mixup", "MixupCutmix"]


class _BatchMix(BatchTransform):
    """Shared arguments and label handling of ``Mixup`` and ``CutMix``."""

    def __init__(self, *, alpha: float, num_classes: int, generator: torch.Generator | None) -> None:
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < math.inf:
            raise ValueError(f"alpha must be a finite number > 0, got {alpha!r}")
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"num_classes must be an int >= 1, got {num_classes!r}")
        self.alpha = float(alpha)
        self.num_classes = num_classes
        self.generator = check_generator(generator)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, num_classes={self.num_classes}{gen_repr(self.generator)}"


class Mixup(_BatchMix):
    """Blend the batch with itself reversed: ``lam * x + (1 - lam) * x.flip(0)``, ``lam ~ Beta(a, a)``.

    Labels become float32 soft targets ``[N, num_classes]`` mixed the same way. Int labels are
    one-hot encoded (on CUDA, out-of-range labels are not checked); float ``[N, num_classes]``
    soft targets are mixed as they are. uint8 images stay uint8 (rounded).

    Args:
        alpha: Beta distribution parameter, > 0.
        num_classes: Number of classes for the one-hot targets.
        generator: CPU generator for ``lam`` (None: torch's default).

    Raises:
        ValueError: On bad arguments, or at call time when ``labels`` is None or mis-shaped.

    Example:
        >>> mix = Mixup(alpha=0.2, num_classes=10, generator=torch.Generator().manual_seed(0))
        >>> images, targets = mix(torch.rand(8, 3, 32, 32), torch.arange(8))
        >>> tuple(targets.shape)
        (8, 10)
    """

    def __init__(self, *, alpha: float = 0.2, num_classes: int, generator: torch.Generator | None = None) -> None:
        super().__init__(alpha=alpha, num_classes=num_classes, generator=generator)

    def get_params(self) -> float:
        """Draw ``lam`` from Beta(alpha, alpha) with the generator."""
        return sample_beta(self.alpha, self.generator)

    @override
    def __call__(self, images: torch.Tensor, labels: Labels = None) -> tuple[torch.Tensor, torch.Tensor]:
        check_images(images)
        targets = soft_targets(labels, images.shape[0], self.num_classes, images.device)
        lam = self.get_params()
        x = images.float() if images.dtype == torch.uint8 else images
        out = torch.lerp(x.flip(0), x, lam)
        if images.dtype == torch.uint8:
            out = out.round_().to(torch.uint8)
        return out, torch.lerp(targets.flip(0), targets, lam)


MixUp = Mixup  # torchvision.transforms.v2 spelling


class CutMix(_BatchMix):
    """Paste a box from the reversed batch into each image; ``lam`` is corrected to the box area.

    The box covers ``1 - lam`` of the image for ``lam ~ Beta(alpha, alpha)``, has a uniformly
    random centre and is clipped to the image; the label weight of the original image is then
    ``1 - box_area / image_area``. Same label handling as ``Mixup``; the image dtype is kept.

    Args:
        alpha: Beta distribution parameter, > 0.
        num_classes: Number of classes for the one-hot targets.
        generator: CPU generator for ``lam`` and the box (None: torch's default).

    Raises:
        ValueError: On bad arguments, or at call time when ``labels`` is None or mis-shaped.

    Example:
        >>> cut = CutMix(alpha=1.0, num_classes=10, generator=torch.Generator().manual_seed(0))
        >>> images, targets = cut(torch.rand(8, 3, 32, 32), torch.arange(8))
    """

    def __init__(self, *, alpha: float = 1.0, num_classes: int, generator: torch.Generator | None = None) -> None:
        super().__init__(alpha=alpha, num_classes=num_classes, generator=generator)

    def get_params(self, height: int, width: int) -> tuple[float, tuple[int, int, int, int]]:
        """Draw the box; return ``(lam, (y1, y2, x1, x2))`` with ``lam`` corrected to the box area."""
        cut = math.sqrt(1.0 - sample_beta(self.alpha, self.generator))
        cut_h, cut_w = int(height * cut), int(width * cut)
        cy = int(torch.randint(0, height, (), generator=self.generator))
        cx = int(torch.randint(0, width, (), generator=self.generator))
        y1, y2 = max(cy - cut_h // 2, 0), min(cy + cut_h // 2, height)
        x1, x2 = max(cx - cut_w // 2, 0), min(cx + cut_w // 2, width)
        return 1.0 - (y2 - y1) * (x2 - x1) / (height * width), (y1, y2, x1, x2)

    @override
    def __call__(self, images: torch.Tensor, labels: Labels = None) -> tuple[torch.Tensor, torch.Tensor]:
        check_images(images)
        targets = soft_targets(labels, images.shape[0], self.num_classes, images.device)
        lam, (y1, y2, x1, x2) = self.get_params(images.shape[-2], images.shape[-1])
        out = images.clone()
        if y2 > y1 and x2 > x1:
            out[..., y1:y2, x1:x2] = images[..., y1:y2, x1:x2].flip(0)
        return out, torch.lerp(targets.flip(0), targets, lam)


_MODES = ("batch", "pair", "elem")


@dataclass
class MixParams:
    """One batch's draw (CPU tensors): each image ``i`` is mixed with image ``n - 1 - i`` (the batch reversed)."""

    lam: torch.Tensor
    """float64 ``[n]``: weight of the image's own label (box-area corrected for CutMix; 1: not mixed)."""
    cutmix: torch.Tensor
    """bool ``[n]``: CutMix (paste a box of the partner) rather than Mixup (blend)."""
    boxes: torch.Tensor
    """int64 ``[n, 4]``: ``(y_low, y_high, x_low, x_high)`` of the pasted box (empty when not CutMix)."""


class MixupCutmix(BatchTransform):
    """timm's ``Mixup``: Mixup or CutMix per call, with timm's modes.

    timm's ``Mixup``: per call, with probability ``prob``, Mixup (``lam ~ Beta(mixup_alpha)``) or CutMix
    (``lam ~ Beta(cutmix_alpha)``, a box of area ``1 - lam``), chosen with ``switch_prob`` when both are on.

    ``mode="batch"`` draws once for the batch, ``"elem"`` per image, ``"pair"`` per pair ``(i, n - 1 - i)`` (both
    get the same draw, so the batch size must be even). Each image is mixed with the reversed batch, as in timm.
    Targets become float32 ``[n, num_classes]``: one-hot with ``label_smoothing`` (``1 - s + s / K`` on,
    ``s / K`` off), mixed with weight ``lam``; each row sums to 1. uint8 images stay uint8 (rounded).

    Args:
        mixup_alpha: Beta parameter of Mixup (0: off).
        cutmix_alpha: Beta parameter of CutMix (0: off).
        prob: Probability of mixing a batch / pair / image.
        switch_prob: Probability of CutMix when both are on.
        mode: ``"batch"``, ``"pair"`` or ``"elem"``.
        correct_lam: Set ``lam`` to the box's uncovered area after clipping it to the image (timm's default).
        label_smoothing: Smoothing of the one-hot targets.
        num_classes: Number of classes.
        generator: CPU generator (None: torch's default).

    Example:
        >>> mix = MixupCutmix(0.8, 1.0, label_smoothing=0.1, num_classes=10, generator=torch.Generator().manual_seed(0))
        >>> images, targets = mix(torch.rand(8, 3, 32, 32), torch.arange(8))
    """

    def __init__(
        self,
        mixup_alpha: float = 1.0,
        cutmix_alpha: float = 0.0,
        prob: float = 1.0,
        switch_prob: float = 0.5,
        mode: str = "batch",
        correct_lam: bool = True,
        label_smoothing: float = 0.1,
        num_classes: int = 1000,
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        for name, alpha in (("mixup_alpha", mixup_alpha), ("cutmix_alpha", cutmix_alpha)):
            if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha < math.inf:
                raise ValueError(f"{name} must be a finite number >= 0 (0: off), got {alpha!r}")
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"num_classes must be an int >= 1, got {num_classes!r}")
        self.mixup_alpha, self.cutmix_alpha = float(mixup_alpha), float(cutmix_alpha)
        self.prob, self.switch_prob = check_prob("prob", prob), check_prob("switch_prob", switch_prob)
        self.label_smoothing = check_prob("label_smoothing", label_smoothing)
        self.mode, self.correct_lam, self.num_classes = mode, bool(correct_lam), num_classes
        self.generator = check_generator(generator)

    def _beta(self, alpha: float, count: int) -> torch.Tensor:
        if alpha <= 0:
            return torch.ones(count, dtype=torch.float64)
        a = torch.full((count,), alpha, dtype=torch.float64)
        g1 = torch._standard_gamma(a, generator=self.generator)
        g2 = torch._standard_gamma(a, generator=self.generator)
        total = g1 + g2
        return torch.where(total > 0, g1 / total.clamp_min(1e-300), torch.full_like(g1, 0.5))

    def draw(self, batch_size: int, height: int, width: int) -> dict[str, torch.Tensor]:
        """The raw CPU draws, one per batch, pair or image.

        The raw CPU draws, one per batch / pair / image: ``mixed``, ``cutmix``, ``lam`` (Beta, 1 where not
        mixed) and the box centre ``cy``, ``cx`` (drawn for every entry, used for CutMix only).
        """
        draws = {"batch": 1, "pair": batch_size // 2, "elem": batch_size}[self.mode]
        g = self.generator
        mixed = torch.rand(draws, dtype=torch.float64, generator=g) < self.prob
        if self.mixup_alpha > 0 and self.cutmix_alpha > 0:
            cutmix = torch.rand(draws, dtype=torch.float64, generator=g) < self.switch_prob
        else:
            cutmix = torch.full((draws,), self.cutmix_alpha > 0)
        lam = torch.where(cutmix, self._beta(self.cutmix_alpha, draws), self._beta(self.mixup_alpha, draws))
        lam = lam.float().double()  # float32 values, as timm's per-element lambdas
        cy = torch.randint(0, height, (draws,), generator=g)
        cx = torch.randint(0, width, (draws,), generator=g)
        return {
            "mixed": mixed,
            "cutmix": cutmix & mixed,
            "lam": torch.where(mixed, lam, torch.ones_like(lam)),
            "cy": cy,
            "cx": cx,
        }

    def params_from(self, raw: dict[str, torch.Tensor], batch_size: int, height: int, width: int) -> MixParams:
        """Turn :meth:`draw`'s result into per-image :class:`MixParams` (timm's box and ``lam`` correction)."""
        lam, cutmix = raw["lam"], raw["cutmix"] & (raw["lam"] < 1)
        ratio = torch.sqrt(1 - lam)
        cut_h, cut_w = torch.floor(height * ratio).long(), torch.floor(width * ratio).long()
        cy, cx = raw["cy"].long(), raw["cx"].long()
        yl, yh = (cy - cut_h // 2).clamp(0, height), (cy + (cut_h + 1) // 2).clamp(0, height)
        xl, xh = (cx - cut_w // 2).clamp(0, width), (cx + (cut_w + 1) // 2).clamp(0, width)
        boxes = torch.stack([yl, yh, xl, xh], dim=1)
        boxes = torch.where(cutmix.unsqueeze(1), boxes, torch.zeros_like(boxes))
        if self.correct_lam:
            lam = torch.where(cutmix, 1.0 - ((yh - yl) * (xh - xl)).double() / (height * width), lam)
        if self.mode == "batch":
            return MixParams(
                lam.expand(batch_size).clone(), cutmix.expand(batch_size).clone(), boxes.expand(batch_size, 4).clone()
            )
        if self.mode == "pair":
            return MixParams(
                torch.cat([lam, lam.flip(0)]), torch.cat([cutmix, cutmix.flip(0)]), torch.cat([boxes, boxes.flip(0)])
            )
        return MixParams(lam, cutmix, boxes)

    def get_params(self, batch_size: int, height: int, width: int) -> MixParams:
        """Draw the batch's :class:`MixParams` on the CPU."""
        return self.params_from(self.draw(batch_size, height, width), batch_size, height, width)

    def apply(self, images: torch.Tensor, labels: Labels, params: MixParams) -> tuple[torch.Tensor, torch.Tensor]:
        """Mix ``images`` and their targets with drawn ``params``."""
        n, _, height, width = images.shape
        device = images.device
        targets = self.smooth_targets(labels, n, device)
        work = images.dtype if images.is_floating_point() else torch.float32
        lam = to_device(params.lam.to(work), device)
        cutmix = to_device(params.cutmix, device)
        boxes = to_device(params.boxes, device)
        x = images.to(work)
        blend_w = torch.where(cutmix, torch.ones_like(lam), lam).view(n, 1, 1, 1)
        blend, paste = bool((params.lam < 1).any()), bool(params.cutmix.any())  # CPU flags: no device sync
        rows = torch.arange(height, device=device).view(1, height)
        cols = torch.arange(width, device=device).view(1, width)
        out = torch.empty_like(x)
        # on the CPU in chunks of 8 images, so the temporaries stay in the cache; on a GPU in one go
        step = 8 if device.type == "cpu" else n
        for a in range(0, n, step):
            b = min(a + step, n)
            own, partner = x[a:b], x[n - b : n - a].flip(0)  # image i is mixed with image n - 1 - i
            part = torch.lerp(partner, own, blend_w[a:b]) if blend else own.clone()
            if paste:
                box = boxes[a:b]
                in_rows = (rows >= box[:, :1]) & (rows < box[:, 1:2])
                in_cols = (cols >= box[:, 2:3]) & (cols < box[:, 3:4])
                mask = (in_rows[:, :, None] & in_cols[:, None, :] & cutmix[a:b].view(-1, 1, 1)).unsqueeze(1)
                part = torch.where(mask, partner, part)
            out[a:b] = part
        if not images.is_floating_point():
            out = out.round_().to(images.dtype)
        lam_t = lam.to(targets.dtype).view(n, 1)
        return out, targets * lam_t + targets.flip(0) * (1.0 - lam_t)

    def smooth_targets(self, labels: Labels, batch_size: int, device: torch.device) -> torch.Tensor:
        """Int labels ``[n]`` as smoothed one-hot float32 ``[n, num_classes]`` (soft targets: smoothed as well)."""
        if not isinstance(labels, torch.Tensor):
            raise ValueError("MixupCutmix needs labels; call transform(images, labels) with an int64 [N] tensor")
        s, k = self.label_smoothing, self.num_classes
        if labels.dim() == 1 and not labels.is_floating_point() and labels.shape[0] == batch_size:
            off, on = s / k, 1.0 - s + s / k
            targets = torch.full((batch_size, k), off, dtype=torch.float32, device=device)
            return targets.scatter_(1, labels.to(device=device, dtype=torch.int64).view(-1, 1), on)
        if labels.dim() == 2 and labels.is_floating_point() and tuple(labels.shape) == (batch_size, k):
            return labels.to(device=device, dtype=torch.float32) * (1.0 - s) + s / k
        raise ValueError(
            f"labels must be int [{batch_size}] or float [{batch_size}, {k}], got {labels.dtype} {tuple(labels.shape)}"
        )

    @override
    def __call__(self, images: torch.Tensor, labels: Labels = None) -> tuple[torch.Tensor, torch.Tensor]:
        check_images(images)
        if self.mode == "pair" and images.shape[0] % 2:
            raise ValueError(f"mode='pair' needs an even batch size, got {images.shape[0]}; use drop_last=True")
        return self.apply(images, labels, self.get_params(images.shape[0], images.shape[-2], images.shape[-1]))

    @override
    def extra_repr(self) -> str:
        return (
            f"mixup_alpha={self.mixup_alpha}, cutmix_alpha={self.cutmix_alpha}, prob={self.prob}, "
            f"switch_prob={self.switch_prob}, mode={self.mode!r}, label_smoothing={self.label_smoothing}, "
            f"num_classes={self.num_classes}{gen_repr(self.generator)}"
        )
