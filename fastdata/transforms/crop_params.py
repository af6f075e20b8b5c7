"""torchvision's ``RandomResizedCrop`` parameter sampling, from torch's global RNG or from a numpy Generator.

With torch's RNG the calls are torchvision's, one for one, so the same ``torch.manual_seed`` gives
the same crops as ``torchvision.transforms.RandomResizedCrop.get_params``. With a
``numpy.random.Generator`` (the per-sample generator of :mod:`fastdata.sampler.seeding`) the algorithm is
the same, driven by 40 uniforms drawn in one call.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Sequence

import numpy as np
import torch

__all__ = ["sample_crop"]

_TRIES = 10  # torchvision's RandomResizedCrop tries this many random crops before a central one
_local = threading.local()  # one reused 1-element tensor per thread for torch's uniform draws


@functools.lru_cache(maxsize=64)
def _log_ratio(ratio: tuple[float, ...], dtype: torch.dtype) -> tuple[float, float]:
    """Torchvision's ``torch.log(torch.tensor(ratio))`` bounds (in the default dtype), computed once."""
    log_ratio = torch.log(torch.tensor(ratio, dtype=dtype))
    return float(log_ratio[0]), float(log_ratio[1])


def _uniform(low: float, high: float) -> float:
    """``torch.empty(1).uniform_(low, high).item()``: the same draw from torch's RNG, without the allocation."""
    buffer = getattr(_local, "buffer", None)
    if buffer is None:
        buffer = _local.buffer = torch.empty(1)
    return buffer.uniform_(low, high).item()


def _randint(high: int) -> int:
    """Torch's ``randint`` draw, into a reused tensor.

    ``int(torch.randint(0, high, size=(1,)).item())``: the same draw (randint is ``random_(0, high)`` on a new int64
    tensor), into a reused tensor.
    """
    buffer = getattr(_local, "int_buffer", None)
    if buffer is None:
        buffer = _local.int_buffer = torch.empty(1, dtype=torch.int64)
    return int(buffer.random_(0, high).item())


def _exp_uniform(low: float, high: float) -> float:
    """``torch.exp(torch.empty(1).uniform_(low, high)).item()`` (float32 exp, as torchvision computes it)."""
    _uniform(low, high)
    return _local.buffer.exp_().item()


def _params_from_uniforms(
    height: int, width: int, scale: Sequence[float], ratio: Sequence[float], u: list[float]
) -> tuple[int, int, int, int]:
    """Torchvision's crop sampling driven by ``4 * _TRIES`` uniforms in [0, 1) (area, log ratio, top, left per try)."""
    area = height * width
    log_low, log_high = math.log(ratio[0]), math.log(ratio[1])
    for k in range(0, 4 * _TRIES, 4):
        target_area = area * (scale[0] + (scale[1] - scale[0]) * u[k])
        aspect = math.exp(log_low + (log_high - log_low) * u[k + 1])
        crop_w = int(round(math.sqrt(target_area * aspect)))
        crop_h = int(round(math.sqrt(target_area / aspect)))
        if 0 < crop_w <= width and 0 < crop_h <= height:
            top = int(u[k + 2] * (height - crop_h + 1))
            left = int(u[k + 3] * (width - crop_w + 1))
            return top, left, crop_h, crop_w
    return _central_crop(height, width, ratio)


def _central_crop(height: int, width: int, ratio: Sequence[float]) -> tuple[int, int, int, int]:
    """Torchvision's fallback: the whole image, its aspect ratio clamped to ``ratio``, centred."""
    in_ratio = width / height
    if in_ratio < min(ratio):
        crop_w, crop_h = width, max(1, min(height, int(round(width / min(ratio)))))
    elif in_ratio > max(ratio):
        crop_w, crop_h = max(1, min(width, int(round(height * max(ratio))))), height
    else:
        crop_w, crop_h = width, height
    return (height - crop_h) // 2, (width - crop_w) // 2, crop_h, crop_w


def sample_crop(
    height: int, width: int, scale: Sequence[float], ratio: Sequence[float], *, rng: np.random.Generator | None = None
) -> tuple[int, int, int, int]:
    """Sample a crop ``(top, left, h, w)`` of a ``height x width`` image the way torchvision does.

    Ten tries of a uniform area fraction in ``scale`` and a log-uniform aspect ratio in ``ratio``;
    if none fits, a central crop with the aspect ratio clamped to ``ratio``.

    Args:
        height: image height.
        width: image width.
        scale: ``(min, max)`` area fraction.
        ratio: ``(min, max)`` aspect ratio (width / height).
        rng: draw from this generator; None: from torch's global RNG as torchvision does.

    Returns:
        ``(top, left, h, w)`` inside the image, ``h, w >= 1``.
    """
    if rng is not None:
        return _params_from_uniforms(height, width, scale, ratio, rng.random(4 * _TRIES).tolist())
    area = height * width
    log_low, log_high = _log_ratio(tuple(ratio), torch.get_default_dtype())
    for _ in range(_TRIES):
        target_area = area * _uniform(scale[0], scale[1])
        aspect = _exp_uniform(log_low, log_high)
        crop_w = int(round(math.sqrt(target_area * aspect)))
        crop_h = int(round(math.sqrt(target_area / aspect)))
        if 0 < crop_w <= width and 0 < crop_h <= height:
            top = _randint(height - crop_h + 1)
            left = _randint(width - crop_w + 1)
            return top, left, crop_h, crop_w
    return _central_crop(height, width, ratio)
