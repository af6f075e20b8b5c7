"""What Mixup and CutMix draw and mix: Beta draws and soft targets.

One Beta(alpha, alpha) draw on the CPU from a ``torch.Generator``, and labels as soft targets.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from fastdata.gpu_transforms.base import Labels

__all__ = ["sample_beta", "soft_targets"]


def soft_targets(labels: Labels, batch_size: int, num_classes: int, device: torch.device) -> torch.Tensor:
    """Int labels ``[N]`` as float32 one-hot, or float soft targets ``[N, num_classes]`` as they are."""
    if labels is None:
        raise ValueError("Mixup/CutMix need labels; call transform(images, labels) with an int64 [N] tensor")
    if not isinstance(labels, torch.Tensor):
        raise TypeError(f"labels must be a torch.Tensor, got {type(labels).__name__}")
    if labels.dim() == 1 and not labels.is_floating_point() and labels.shape[0] == batch_size:
        return F.one_hot(labels.to(device=device, dtype=torch.int64), num_classes).float()
    if labels.dim() == 2 and labels.is_floating_point() and tuple(labels.shape) == (batch_size, num_classes):
        return labels.to(device)
    raise ValueError(
        f"labels must be int [{batch_size}] or float [{batch_size}, {num_classes}], "
        f"got {labels.dtype} {tuple(labels.shape)}"
    )


def _log_gamma_sample(alpha: float, generator: torch.Generator | None) -> float:
    """``log`` of one Gamma(alpha, 1) draw (Marsaglia-Tsang, boosted for alpha < 1), on the CPU."""
    log_boost = 0.0
    if alpha < 1.0:
        boost = float(torch.rand((), dtype=torch.float64, generator=generator))
        log_boost = math.log(boost) / alpha if boost > 0 else -math.inf
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


def sample_beta(alpha: float, generator: torch.Generator | None) -> float:
    """One Beta(alpha, alpha) draw as ``G1 / (G1 + G2)`` from two gammas, computed in log space."""
    diff = _log_gamma_sample(alpha, generator) - _log_gamma_sample(alpha, generator)
    if diff != diff:  # both gammas underflowed (-inf - -inf): a fair coin between the two ends
        return 0.5
    return 1.0 / (1.0 + math.exp(-max(min(diff, 700.0), -700.0)))
