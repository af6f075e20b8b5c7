"""RandomErasing as timm does it, with a box (or several) drawn per image and applied to the batch at once."""

from __future__ import annotations

import math

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

__all__ = ["RandomErasing"]

_MODES = ("const", "rand", "pixel")


class RandomErasing(BatchTransform):
    """Erase random boxes, per image with probability ``p``, filled as timm's ``RandomErasing``.

    Each erased image gets ``count`` boxes (uniform in ``[min_count, max_count]``); each box takes the first of 10
    tries whose area (``scale`` of the image area, divided by ``count``) and aspect ratio (log-uniform in
    ``ratio``) fit strictly inside the image, at a uniform position; when no try fits, that box is skipped.
    ``mode="const"`` fills with 0, ``"rand"`` with one normal colour per box, ``"pixel"`` with normal noise per
    pixel; like timm, use it after ``Normalize`` (0 is then the mean colour). uint8 batches take ``"const"`` only.

    Args:
        p: Probability of erasing in an image.
        scale: Bounds of the erased area as a fraction of the image, ``0 < lo <= hi <= 1``.
        ratio: Bounds of the box aspect ratio; a number ``r`` means ``(r, 1 / r)`` (timm's ``min_aspect``).
        mode: ``"const"``, ``"rand"`` or ``"pixel"``.
        min_count: Fewest boxes in an erased image.
        max_count: Most boxes (None: ``min_count``).
        generator: CPU generator for the boxes and the fill seed (None: torch's default).

    Example:
        >>> erase = RandomErasing(0.25, mode="pixel", generator=torch.Generator().manual_seed(0))
        >>> images, labels = erase(torch.randn(8, 3, 32, 32), None)
    """

    def __init__(
        self,
        p: float = 0.5,
        scale: tuple[float, float] = (0.02, 1 / 3),
        ratio: float | tuple[float, float] = 0.3,
        mode: str = "const",
        min_count: int = 1,
        max_count: int | None = None,
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        self.p = check_prob("p", p)
        lo, hi = (float(s) for s in scale)
        if not 0 < lo <= hi <= 1:
            raise ValueError(f"scale must satisfy 0 < low <= high <= 1, got {scale!r}")
        r = (float(ratio), 1 / float(ratio)) if isinstance(ratio, (int, float)) else tuple(float(v) for v in ratio)
        if len(r) != 2 or not min(r) > 0:
            raise ValueError(f"ratio must be a number > 0 or a (low, high) pair of them, got {ratio!r}")
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
        max_count = min_count if max_count is None else max_count
        if not (isinstance(min_count, int) and isinstance(max_count, int) and 1 <= min_count <= max_count):
            raise ValueError(f"counts must be ints with 1 <= min_count <= max_count, got {min_count!r}, {max_count!r}")
        self.scale, self.ratio, self.mode = (lo, hi), (min(r), max(r)), mode
        self.min_count, self.max_count = min_count, max_count
        self.generator = check_generator(generator)

    def get_params(self, batch_size: int, height: int, width: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Draw the boxes, their mask and a seed for the fill noise.

        Draw the boxes: CPU int64 ``[batch_size, max_count, 4]`` ``(top, left, h, w)``, a bool mask of the
        boxes used ``[batch_size, max_count]``, and a seed for the fill noise.
        """
        g, n, k = self.generator, batch_size, self.max_count
        erase = torch.rand(n, dtype=torch.float64, generator=g) < self.p
        count = torch.randint(self.min_count, self.max_count + 1, (n, 1), generator=g)
        u = torch.rand(2, n, k, 10, dtype=torch.float64, generator=g)
        target = (self.scale[0] + (self.scale[1] - self.scale[0]) * u[0]) * (height * width) / count.unsqueeze(-1)
        log_lo, log_hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        aspect = torch.exp(log_lo + (log_hi - log_lo) * u[1])
        h = torch.round(torch.sqrt(target * aspect))
        w = torch.round(torch.sqrt(target / aspect))
        ok = (h < height) & (w < width)
        first = ok.to(torch.uint8).argmax(dim=-1, keepdim=True)
        h, w, found = h.gather(-1, first).squeeze(-1), w.gather(-1, first).squeeze(-1), ok.any(dim=-1)
        pos = torch.rand(2, n, k, dtype=torch.float64, generator=g)
        top, left = torch.floor(pos[0] * (height - h + 1)), torch.floor(pos[1] * (width - w + 1))
        used = found & erase.unsqueeze(1) & (torch.arange(k).unsqueeze(0) < count)
        seed = int(torch.randint(0, 2**62, (), generator=g))
        return torch.stack([top, left, h, w], dim=-1).long(), used, seed

    @override
    def __call__(self, images: torch.Tensor, labels: Labels = None) -> tuple[torch.Tensor, Labels]:
        check_images(images)
        if self.mode != "const" and not images.is_floating_point():
            raise ValueError(
                f"mode={self.mode!r} fills with normal noise and needs a float batch; apply "
                "RandomErasing after Normalize (as timm does), or use mode='const'"
            )
        n, c, height, width = images.shape
        boxes, used, seed = self.get_params(n, height, width)
        if not bool(used.any()):
            return images, labels
        device = images.device
        chosen = used.any(dim=1).nonzero().flatten()  # host-known: only the erased images are touched
        m = len(chosen)
        chosen_d = to_device(chosen, device)
        boxes_d, used_d = to_device(boxes[chosen], device), to_device(used[chosen], device)
        rows = torch.arange(height, device=device).view(1, 1, height)
        cols = torch.arange(width, device=device).view(1, 1, width)
        top, left, h, w = (v.unsqueeze(-1) for v in boxes_d.unbind(-1))
        in_rows = (rows >= top) & (rows < top + h) & used_d.unsqueeze(-1)  # [m, k, H]
        in_cols = (cols >= left) & (cols < left + w)  # [m, k, W]
        noise_gen = torch.Generator(device=device).manual_seed(seed) if self.mode != "const" else None
        sub = images.index_select(0, chosen_d)
        for j in range(self.max_count):  # a few box slots, not the images; a later box is drawn over an earlier one
            mask = (in_rows[:, j, :, None] & in_cols[:, j, None, :]).unsqueeze(1)  # [m, 1, H, W]
            if self.mode == "const":
                fill = torch.zeros((), dtype=images.dtype, device=device)
            elif self.mode == "rand":
                fill = torch.randn(m, c, 1, 1, generator=noise_gen, device=device, dtype=images.dtype)
            else:
                fill = torch.randn(m, c, height, width, generator=noise_gen, device=device, dtype=images.dtype)
            sub = torch.where(mask, fill, sub)
        return images.index_copy(0, chosen_d, sub), labels

    @override
    def extra_repr(self) -> str:
        return (
            f"p={self.p}, scale={self.scale}, ratio={tuple(round(r, 4) for r in self.ratio)}, mode={self.mode!r}, "
            f"count=({self.min_count}, {self.max_count}){gen_repr(self.generator)}"
        )
