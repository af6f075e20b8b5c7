"""Sample-mixing transforms: Mixup and CutMix with soft targets."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from fastdata.gpu_transforms.base import BatchTransform, Labels, check_generator, check_images, gen_repr

__all__ = ["CutMix", "MixUp", "Mixup"]

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

    Example::

        >>> mix = Mixup(alpha=0.2, num_classes=10, generator=torch.Generator().manual_seed(0))
        >>> images, targets = mix(torch.rand(8, 3, 32, 32), torch.arange(8))
        >>> tuple(targets.shape)
        (8, 10)
    """

    def __init__(self, *, alpha: float = 0.2, num_classes: int, generator: torch.Generator | None = None) -> None:
        super().__init__(alpha=alpha, num_classes=num_classes, generator=generator)

    def get_params(self) -> float:
        """Draw ``lam`` from Beta(alpha, alpha) with the generator."""
        return _sample_beta(self.alpha, self.generator)

    def __call__(self, images: torch.Tensor, labels: Labels = None) -> tuple[torch.Tensor, torch.Tensor]:
        check_images(images)
        targets = _soft_targets(labels, images.shape[0], self.num_classes, images.device)
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

    Example::

        >>> cut = CutMix(alpha=1.0, num_classes=10, generator=torch.Generator().manual_seed(0))
        >>> images, targets = cut(torch.rand(8, 3, 32, 32), torch.arange(8))
    """

    def __init__(self, *, alpha: float = 1.0, num_classes: int, generator: torch.Generator | None = None) -> None:
        super().__init__(alpha=alpha, num_classes=num_classes, generator=generator)

    def get_params(self, height: int, width: int) -> tuple[float, tuple[int, int, int, int]]:
        """Draw the box; return ``(lam, (y1, y2, x1, x2))`` with ``lam`` corrected to the box area."""
        cut = math.sqrt(1.0 - _sample_beta(self.alpha, self.generator))
        cut_h, cut_w = int(height * cut), int(width * cut)
        cy = int(torch.randint(0, height, (), generator=self.generator))
        cx = int(torch.randint(0, width, (), generator=self.generator))
        y1, y2 = max(cy - cut_h // 2, 0), min(cy + cut_h // 2, height)
        x1, x2 = max(cx - cut_w // 2, 0), min(cx + cut_w // 2, width)
        return 1.0 - (y2 - y1) * (x2 - x1) / (height * width), (y1, y2, x1, x2)

    def __call__(self, images: torch.Tensor, labels: Labels = None) -> tuple[torch.Tensor, torch.Tensor]:
        check_images(images)
        targets = _soft_targets(labels, images.shape[0], self.num_classes, images.device)
        lam, (y1, y2, x1, x2) = self.get_params(images.shape[-2], images.shape[-1])
        out = images.clone()
        if y2 > y1 and x2 > x1:
            out[..., y1:y2, x1:x2] = images[..., y1:y2, x1:x2].flip(0)
        return out, torch.lerp(targets.flip(0), targets, lam)


# ----------------------------------------------------------------------------- helpers


def _soft_targets(labels: Labels, batch_size: int, num_classes: int, device: torch.device) -> torch.Tensor:
    """Int labels ``[N]`` as float32 one-hot, or float soft targets ``[N, num_classes]`` as they are."""
    if labels is None:
        raise ValueError("Mixup/CutMix need labels; call transform(images, labels) with an int64 [N] tensor")
    if not isinstance(labels, torch.Tensor):
        raise TypeError(f"labels must be a torch.Tensor, got {type(labels).__name__}")
    if labels.dim() == 1 and not labels.is_floating_point() and labels.shape[0] == batch_size:
        return F.one_hot(labels.to(device=device, dtype=torch.int64), num_classes).float()
    if labels.dim() == 2 and labels.is_floating_point() and tuple(labels.shape) == (batch_size, num_classes):
        return labels.to(device)
    raise ValueError(f"labels must be int [{batch_size}] or float [{batch_size}, {num_classes}], "
                     f"got {labels.dtype} {tuple(labels.shape)}")


def _log_gamma_sample(alpha: float, generator: torch.Generator | None) -> float:
    """``log`` of one Gamma(alpha, 1) draw (Marsaglia-Tsang, boosted for alpha < 1), on the CPU."""
    log_boost = 0.0
    if alpha < 1.0:
        u = float(torch.rand((), dtype=torch.float64, generator=generator))
        log_boost = math.log(u) / alpha if u > 0 else -math.inf
        alpha += 1.0
    d = alpha - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    while True:
        x = torch.randn(16, dtype=torch.float64, generator=generator)
        u = torch.rand(16, dtype=torch.float64, generator=generator)
        v = (1.0 + c * x) ** 3
        ok = (v > 0) & (torch.log(u) < 0.5 * x * x + d - d * v + d * torch.log(v.clamp_min(1e-300)))
        if bool(ok.any()):
            return math.log(d * float(v[ok][0])) + log_boost


def _sample_beta(alpha: float, generator: torch.Generator | None) -> float:
    """One Beta(alpha, alpha) draw as ``G1 / (G1 + G2)`` from two gammas, computed in log space."""
    diff = _log_gamma_sample(alpha, generator) - _log_gamma_sample(alpha, generator)
    if diff != diff:  # both gammas underflowed (-inf - -inf): a fair coin between the two ends
        return 0.5
    return 1.0 / (1.0 + math.exp(-max(min(diff, 700.0), -700.0)))
