"""Colour and value transforms: uint8 to float, normalization, colour jitter."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch
from typing_extensions import override

from fastdata.gpu_transforms.base import (
    BatchTransform,
    Labels,
    check_float_dtype,
    check_generator,
    check_images,
    gen_repr,
    to_device,
)

logger = logging.getLogger(__name__)

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "ColorJitter", "Normalize", "ToFloat"]

IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
"""ImageNet's per-channel mean, in 0..1 units (torchvision's values)."""
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)
"""ImageNet's per-channel standard deviation, in 0..1 units."""

_GRAY_WEIGHTS = (0.299, 0.587, 0.114)  # ITU-R 601, as torchvision's rgb_to_grayscale
_GRAY_CACHE: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}


class ToFloat(BatchTransform):
    """Convert images to float: uint8 is divided by 255 (if ``scale``), float is only cast.

    Args:
        dtype: A floating output dtype.
        scale: Divide uint8 input by 255 so it lands in [0, 1].

    Example:
        >>> images, _ = ToFloat()(torch.full((1, 3, 2, 2), 255, dtype=torch.uint8))
        >>> images.max().item()
        1.0
    """

    def __init__(self, dtype: torch.dtype = torch.float32, scale: bool = True) -> None:
        self.dtype = check_float_dtype("dtype", dtype)
        self.scale = bool(scale)

    @override
    def __call__(self, images: torch.Tensor, labels: Labels = None) -> tuple[torch.Tensor, Labels]:
        check_images(images)
        if images.dtype == torch.uint8 and self.scale:
            return images.to(self.dtype).div_(255.0), labels
        return images.to(self.dtype), labels

    @override
    def extra_repr(self) -> str:
        return f"dtype={self.dtype}, scale={self.scale}"


class Normalize(BatchTransform):
    """``(x - mean) / std`` per channel, with mean/std given for the [0, 1] range like torchvision.

    uint8 input is normalized as ``x / 255`` in one fused ``addcmul`` with per-(device, dtype)
    constants cached on first use; float input is assumed to be in [0, 1].

    Args:
        mean: Per-channel means (1 or C entries).
        std: Per-channel standard deviations, all > 0 (same length as ``mean``).
        dtype: Output dtype (float32, float16 or bfloat16); math is done in float32.

    Raises:
        ValueError: On empty or mismatched ``mean``/``std``, a non-positive std, or (at call time)
            a channel count that does not match.

    Example:
        >>> norm = Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
        >>> images, _ = norm(torch.zeros(2, 3, 8, 8, dtype=torch.uint8))
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float], *, dtype: torch.dtype = torch.float32) -> None:
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)
        if not self.mean or len(self.mean) != len(self.std):
            raise ValueError(f"mean and std must be non-empty and equally long, got {self.mean} and {self.std}")
        if any(not s > 0 for s in self.std):
            raise ValueError(f"std must be > 0 in every channel, got {self.std}; pass positive values")
        self.dtype = check_float_dtype("dtype", dtype)
        self._cache: dict[tuple[torch.device, bool], tuple[torch.Tensor, torch.Tensor]] = {}

    def _constants(self, device: torch.device, from_uint8: bool) -> tuple[torch.Tensor, torch.Tensor]:
        key = (device, from_uint8)
        if key not in self._cache:  # one blocking copy per device: the constants are then safe on any stream
            unit = 255.0 if from_uint8 else 1.0
            scale = torch.tensor([1.0 / (unit * s) for s in self.std], dtype=torch.float64)
            shift = torch.tensor([-m / s for m, s in zip(self.mean, self.std, strict=False)], dtype=torch.float64)
            self._cache[key] = (shift.view(-1, 1, 1).float().to(device), scale.view(-1, 1, 1).float().to(device))
            logger.debug("Normalize constants cached for %s (uint8=%s)", device, from_uint8)
        return self._cache[key]

    @override
    def __call__(self, images: torch.Tensor, labels: Labels = None) -> tuple[torch.Tensor, Labels]:
        check_images(images)
        if len(self.mean) not in (1, images.shape[1]):
            raise ValueError(
                f"Normalize has {len(self.mean)} mean/std entries but images have {images.shape[1]} channels; "
                "pass one entry per channel"
            )
        shift, scale = self._constants(images.device, images.dtype == torch.uint8)
        out = torch.empty_like(images, dtype=self.dtype)
        if images.is_cuda or images.dtype != torch.uint8 or self.dtype != torch.float32:
            return torch.addcmul(shift, images, scale, out=out), labels
        # On the CPU a mixed uint8*float addcmul is not vectorized: a plain cast first, then the
        # fused multiply-add in place, is twice as fast (measured on a 256x3x224x224 batch).
        out.copy_(images)
        return torch.addcmul(shift, out, scale, out=out), labels

    @override
    def extra_repr(self) -> str:
        return f"mean={self.mean}, std={self.std}, dtype={self.dtype}"


class ColorJitter(BatchTransform):
    """Per-image random brightness, contrast and saturation, applied in that fixed order.

    Each factor is uniform in ``[max(0, 1 - x), 1 + x]`` (or a given ``(lo, hi)``). Brightness
    multiplies; contrast blends with the mean of the image's grayscale; saturation blends with the
    grayscale image (0.299/0.587/0.114 weights). The result is clamped after each step to [0, 1]
    for float input or [0, 255] for uint8 input (computed in float32, rounded back to uint8 once).
    Unlike torchvision, the order is fixed and there is no hue jitter.

    Args:
        brightness: Jitter strength ``x >= 0`` or ``(lo, hi)`` factor bounds.
        contrast: As ``brightness``; needs 1 or 3 channels.
        saturation: As ``brightness``; needs 1 or 3 channels (1 channel is left unchanged).
        generator: CPU generator for the factors (None: torch's default).

    Example:
        >>> jitter = ColorJitter(0.4, 0.4, 0.4, generator=torch.Generator().manual_seed(0))
        >>> images, _ = jitter(torch.rand(8, 3, 32, 32), None)
    """

    def __init__(
        self,
        brightness: float | tuple[float, float] = 0,
        contrast: float | tuple[float, float] = 0,
        saturation: float | tuple[float, float] = 0,
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        self.brightness = _jitter_range("brightness", brightness)
        self.contrast = _jitter_range("contrast", contrast)
        self.saturation = _jitter_range("saturation", saturation)
        self.generator = check_generator(generator)

    def get_params(self, batch_size: int) -> torch.Tensor:
        """Draw CPU float32 factors ``[3, batch_size]`` (brightness, contrast, saturation; 1 if off)."""
        ranges = (self.brightness, self.contrast, self.saturation)
        on = [r for r in ranges if r is not None]
        factors = torch.ones(3, batch_size)
        if on:
            lo, hi = torch.tensor([r[0] for r in on]), torch.tensor([r[1] for r in on])
            u = torch.rand(len(on), batch_size, generator=self.generator)
            factors[[i for i, r in enumerate(ranges) if r is not None]] = lo[:, None] + (hi - lo)[:, None] * u
        return factors

    @override
    def __call__(self, images: torch.Tensor, labels: Labels = None) -> tuple[torch.Tensor, Labels]:
        check_images(images)
        if self.brightness is None and self.contrast is None and self.saturation is None:
            return images, labels
        c = images.shape[1]
        if (self.contrast or self.saturation) and c not in (1, 3):
            raise ValueError(f"contrast/saturation jitter needs 1 or 3 channels, got images with {c}")
        is_uint8 = images.dtype == torch.uint8
        x = images.float() if is_uint8 else images
        bound = 255.0 if is_uint8 else 1.0
        f = to_device(self.get_params(images.shape[0]), images.device).to(x.dtype).view(3, -1, 1, 1, 1)
        if self.brightness is not None:
            x = (x * f[0]).clamp_(0.0, bound)
        if self.contrast is not None:
            mean = _grayscale(x.mean(dim=(-2, -1), keepdim=True))  # mean of gray == gray of means
            x = torch.lerp(mean, x, f[1]).clamp_(0.0, bound)
        if self.saturation is not None and c == 3:
            x = torch.lerp(_grayscale(x), x, f[2]).clamp_(0.0, bound)
        return (x.round_().to(torch.uint8) if is_uint8 else x), labels

    @override
    def extra_repr(self) -> str:
        return (
            f"brightness={self.brightness}, contrast={self.contrast}, saturation={self.saturation}"
            f"{gen_repr(self.generator)}"
        )


def _grayscale(x: torch.Tensor) -> torch.Tensor:
    """ITU-R 601 luma ``[N, 1, H, W]`` of ``[N, 3, H, W]`` (or the image itself for 1 channel)."""
    if x.shape[1] == 1:
        return x
    key = (x.device, x.dtype)
    if key not in _GRAY_CACHE:  # one blocking copy per (device, dtype): safe on any stream afterwards
        _GRAY_CACHE[key] = torch.tensor(_GRAY_WEIGHTS, dtype=x.dtype).view(1, 3, 1, 1).to(x.device)
    return (x * _GRAY_CACHE[key]).sum(dim=1, keepdim=True)


def _jitter_range(name: str, value: object) -> tuple[float, float] | None:
    """``x`` → ``(max(0, 1 - x), 1 + x)``; ``(lo, hi)`` kept; ``None`` when it is the identity."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"{name} must be >= 0 (or a (low, high) pair), got {value!r}")
        lo, hi = max(0.0, 1.0 - value), 1.0 + value
    elif isinstance(value, Sequence) and len(value) == 2:
        lo, hi = float(value[0]), float(value[1])
        if not 0 <= lo <= hi:
            raise ValueError(f"{name} bounds must satisfy 0 <= low <= high, got {value!r}")
    else:
        raise ValueError(f"{name} must be a number >= 0 or a (low, high) pair, got {value!r}")
    return None if lo == hi == 1.0 else (lo, hi)
