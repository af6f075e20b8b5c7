"""The batch-transform interface, ``Compose``, and the argument checks every transform shares."""

from __future__ import annotations

import abc
import math
from collections.abc import Sequence
from typing import Any

import torch
from typing_extensions import override

__all__ = ["BatchTransform", "Compose", "Labels"]

Labels = torch.Tensor | None


class BatchTransform(abc.ABC):
    """Base of every batch transform: ``images, labels = transform(images, labels)``.

    Subclasses implement ``__call__`` and may override ``extra_repr`` for ``__repr__``.

    Example:
        >>> class Invert(BatchTransform):
        ...     def __call__(self, images, labels=None):
        ...         return 255 - images, labels
    """

    @abc.abstractmethod
    def __call__(self, images: torch.Tensor, labels: Labels = None) -> tuple[torch.Tensor, Labels]:
        """Transform a batch; return the new ``(images, labels)``."""

    def extra_repr(self) -> str:
        """The arguments shown inside ``ClassName(...)``."""
        return ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.extra_repr()})"


class Compose(BatchTransform):
    """Chain batch transforms, threading ``labels`` through each.

    Args:
        transforms: The transforms to apply in order.

    Example:
        >>> t = Compose([RandomHorizontalFlip(), Normalize((0.5,) * 3, (0.5,) * 3)])
        >>> images, labels = t(torch.zeros(2, 3, 8, 8, dtype=torch.uint8), torch.tensor([0, 1]))
    """

    def __init__(self, transforms: Sequence[BatchTransform]) -> None:
        for t in transforms:
            if not callable(t):
                raise TypeError(f"transforms must hold callables, got {t!r}; pass transform objects")
        self.transforms = list(transforms)

    @override
    def __call__(self, images: torch.Tensor, labels: Labels = None) -> tuple[torch.Tensor, Labels]:
        for t in self.transforms:
            images, labels = t(images, labels)
        return images, labels

    def __repr__(self) -> str:
        body = "".join(f"\n    {t!r}," for t in self.transforms)
        return f"Compose([{body}\n])" if body else "Compose([])"


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Move a small CPU tensor to ``device`` without blocking the host (pinned staging on CUDA)."""
    if device.type == "cpu":
        return t
    if device.type == "cuda":
        t = t.pin_memory()
    return t.to(device, non_blocking=True)


def check_images(images: object) -> None:
    if not isinstance(images, torch.Tensor):
        raise TypeError(f"images must be a torch.Tensor [N, C, H, W], got {type(images).__name__}")
    if images.dim() != 4:
        raise ValueError(
            f"images must be a batch [N, C, H, W], got shape {tuple(images.shape)}; "
            "add a batch dimension with images.unsqueeze(0)"
        )
    if images.dtype != torch.uint8 and not images.is_floating_point():
        raise TypeError(f"images must be uint8 or floating point, got {images.dtype}")


def check_float_dtype(name: str, dtype: object) -> torch.dtype:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"{name} must be a floating torch.dtype such as torch.float32, got {dtype!r}")
    return dtype


def check_prob(name: str, p: object) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {p!r}")
    return float(p)


def check_generator(generator: object) -> torch.Generator | None:
    if generator is None:
        return None
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    if generator.device.type != "cpu":
        raise ValueError(
            f"generator must be a CPU torch.Generator (parameters are drawn on the CPU), "
            f"got one on {generator.device}; use torch.Generator()"
        )
    return generator


def check_size(size: object) -> tuple[int, int]:
    values = (size,) if isinstance(size, int) else tuple(size) if isinstance(size, Sequence) else ()
    if len(values) == 1:
        values = values * 2
    if len(values) != 2 or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
        raise ValueError(f"size must be a positive int or a (height, width) pair of positive ints, got {size!r}")
    return values


def check_bounds(name: str, bounds: Any) -> tuple[float, float]:
    try:  # any object: one that is not a pair of numbers raises TypeError or ValueError here
        lo, hi = (float(b) for b in bounds)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a (low, high) pair of numbers, got {bounds!r}") from None
    if not (0 < lo <= hi and math.isfinite(hi)):
        raise ValueError(f"{name} must satisfy 0 < low <= high, got {bounds!r}; swap or fix the bounds")
    return lo, hi


def gen_repr(generator: torch.Generator | None) -> str:
    return "" if generator is None else ", generator=torch.Generator"
