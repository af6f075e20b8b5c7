"""Geometric transforms: per-sample horizontal flip and RandomResizedCrop (one ``grid_sample``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from typing_extensions import override

from fastdata.gpu_transforms.base import (
    BatchTransform,
    Labels,
    check_bounds,
    check_generator,
    check_images,
    check_prob,
    check_size,
    gen_repr,
    to_device,
)

__all__ = ["RandomHorizontalFlip", "RandomResizedCrop"]


class RandomHorizontalFlip(BatchTransform):
    """Flip each image left-right independently with probability ``p``.

    Args:
        p: Probability of flipping one image, in [0, 1].
        generator: CPU generator for the per-sample coin flips (None: torch's default).

    Example:
        >>> flip = RandomHorizontalFlip(0.5, generator=torch.Generator().manual_seed(0))
        >>> images, labels = flip(torch.rand(8, 3, 32, 32), None)
    """

    def __init__(self, p: float = 0.5, *, generator: torch.Generator | None = None) -> None:
        self.p = check_prob("p", p)
        self.generator = check_generator(generator)

    def get_params(self, batch_size: int) -> torch.Tensor:
        """Draw the CPU bool mask ``[batch_size]`` of images to flip."""
        return torch.rand(batch_size, generator=self.generator) < self.p

    @override
    def __call__(self, images: torch.Tensor, labels: Labels = None) -> tuple[torch.Tensor, Labels]:
        check_images(images)
        if self.p == 0.0:
            return images, labels
        if self.p == 1.0:
            return images.flip(-1), labels
        mask = self.get_params(images.shape[0])
        if not images.is_cuda:  # on the CPU, flip only the chosen images (nonzero needs no device sync here)
            chosen = mask.nonzero().flatten()
            out = images.clone()
            out[chosen] = images[chosen].flip(-1)
            return out, labels
        mask = to_device(mask, images.device).view(-1, 1, 1, 1)
        return torch.where(mask, images.flip(-1), images), labels

    @override
    def extra_repr(self) -> str:
        return f"p={self.p}{gen_repr(self.generator)}"


class RandomResizedCrop(BatchTransform):
    """Crop a random box per image and resize it to ``size`` with one batched ``grid_sample``.

    Boxes follow torchvision's algorithm (10 tries of area/log-ratio sampling, then the central
    crop), drawn for the whole batch at once (all 10 tries are always drawn). Resampling is
    bilinear with ``align_corners=False`` and sample positions clamped to the box, which equals
    cropping then ``F.interpolate(..., mode="bilinear", align_corners=False)`` per image.

    uint8 input gives float32 in [0, 1] (the /255 is applied to the small output); float input
    keeps its dtype (float16/bfloat16 are resampled in float32).

    Args:
        size: Output size, an int (square) or ``(height, width)``.
        scale: Bounds of the crop area as a fraction of the image area, ``0 < lo <= hi``.
        ratio: Bounds of the crop aspect ratio (width / height), ``0 < lo <= hi``.
        antialias: Only ``False`` is supported (``grid_sample`` has no antialiasing); the option
            exists so torchvision-style calls that pass it keep working.
        generator: CPU generator for the boxes (None: torch's default).

    Raises:
        ValueError: On a bad ``size``, ``scale`` or ``ratio``, or ``antialias=True``.

    Example:
        >>> rrc = RandomResizedCrop(224, generator=torch.Generator().manual_seed(0))
        >>> images, _ = rrc(torch.zeros(4, 3, 300, 400, dtype=torch.uint8))
        >>> tuple(images.shape)
        (4, 3, 224, 224)
    """

    def __init__(
        self,
        size: int | Sequence[int],
        scale: tuple[float, float] = (0.08, 1.0),
        ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
        *,
        antialias: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        self.size = check_size(size)
        self.scale = check_bounds("scale", scale)
        self.ratio = check_bounds("ratio", ratio)
        if antialias:
            raise ValueError(
                "antialias=True is not supported by the batched grid_sample crop; pass antialias=False "
                "(or downscale at decode time with fastdata.transforms)"
            )
        self.antialias = False
        self.generator = check_generator(generator)

    def get_params(self, height: int, width: int, batch_size: int) -> torch.Tensor:
        """Draw crop boxes; return a CPU int64 tensor ``[batch_size, 4]`` of ``(top, left, h, w)``."""
        area = height * width
        log_lo, log_hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        u = torch.rand(2, batch_size, 10, dtype=torch.float64, generator=self.generator)
        target = area * (self.scale[0] + (self.scale[1] - self.scale[0]) * u[0])
        aspect = torch.exp(log_lo + (log_hi - log_lo) * u[1])
        w = torch.sqrt(target * aspect).round()
        h = torch.sqrt(target / aspect).round()
        ok = (w > 0) & (w <= width) & (h > 0) & (h <= height)
        first = ok.to(torch.uint8).argmax(dim=1, keepdim=True)  # first successful try
        w, h, found = w.gather(1, first).squeeze(1), h.gather(1, first).squeeze(1), ok.any(dim=1)
        fb_h, fb_w = _central_crop(height, width, self.ratio)
        w = torch.where(found, w, torch.full_like(w, fb_w))
        h = torch.where(found, h, torch.full_like(h, fb_h))
        u = torch.rand(2, batch_size, dtype=torch.float64, generator=self.generator)
        top = torch.where(found, torch.floor(u[0] * (height - h + 1)), torch.floor((height - h) / 2))
        left = torch.where(found, torch.floor(u[1] * (width - w + 1)), torch.floor((width - w) / 2))
        return torch.stack([top, left, h, w], dim=1).long()

    @override
    def __call__(self, images: torch.Tensor, labels: Labels = None) -> tuple[torch.Tensor, Labels]:
        check_images(images)
        n, c, height, width = images.shape
        boxes = self.get_params(height, width, n).double()
        work = torch.float64 if images.dtype == torch.float64 else torch.float32
        params = to_device(_boxes_to_grid_params(boxes, height, width).to(work), images.device)
        grid = F.affine_grid(params[:, :6].reshape(n, 2, 3), [n, c, *self.size], align_corners=False)
        grid = grid.clamp_(params[:, 6:8].reshape(n, 1, 1, 2), params[:, 8:].reshape(n, 1, 1, 2))
        out = F.grid_sample(images.to(work), grid, mode="bilinear", padding_mode="border", align_corners=False)
        if images.dtype == torch.uint8:
            return out.div_(255.0), labels
        return out.to(images.dtype), labels

    @override
    def extra_repr(self) -> str:
        return (
            f"size={self.size}, scale={self.scale}, ratio={tuple(round(r, 4) for r in self.ratio)}, "
            f"antialias=False{gen_repr(self.generator)}"
        )


def _central_crop(height: int, width: int, ratio: tuple[float, float]) -> tuple[int, int]:
    """Torchvision's fallback box size ``(h, w)`` when no random try fits."""
    in_ratio = width / height
    if in_ratio < ratio[0]:
        return int(round(width / ratio[0])), width
    if in_ratio > ratio[1]:
        return height, int(round(height * ratio[1]))
    return height, width


def _boxes_to_grid_params(boxes: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """``[N, 10]``: affine theta (6) and the normalized pixel-centre bounds of each box (lo xy, hi xy)."""
    top, left, h, w = boxes.unbind(1)
    zero = torch.zeros_like(top)
    theta = [w / width, zero, (2 * left + w) / width - 1, zero, h / height, (2 * top + h) / height - 1]
    lo = [(2 * left + 1) / width - 1, (2 * top + 1) / height - 1]
    hi = [(2 * (left + w) - 1) / width - 1, (2 * (top + h) - 1) / height - 1]
    return torch.stack(theta + lo + hi, dim=1)
