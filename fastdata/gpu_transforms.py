"""Batched tensor augmentations that run on the GPU (inside ``DataPrefetcher``) or on the CPU.

Every transform takes and returns ``(images, labels)``: ``images`` is a ``[N, C, H, W]`` tensor on
any device, ``labels`` an int64 ``[N]`` tensor, soft targets ``[N, K]`` or ``None``. The same code
runs on CPU and CUDA tensors.

Value ranges follow torchvision: uint8 images hold 0..255, float images are assumed to hold [0, 1].
``ToFloat`` and ``RandomResizedCrop`` turn uint8 into float in [0, 1]; ``RandomHorizontalFlip``,
``ColorJitter``, ``Mixup`` and ``CutMix`` keep the dtype (uint8 results are rounded);
``Normalize`` turns either into normalized float, folding the /255 into one fused op for uint8.

Randomness: per-sample parameters are drawn on the CPU from ``generator`` (a CPU
``torch.Generator``; ``None`` uses torch's default CPU RNG) and moved to the images' device with
``non_blocking=True``, so CPU and CUDA runs with the same seed use identical parameters and no
transform reads a device tensor back to the host.
"""

from __future__ import annotations

import abc
import logging
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "BatchTransform", "CutMix", "ColorJitter", "Compose", "MixUp", "Mixup", "Normalize",
    "RandomHorizontalFlip", "RandomResizedCrop", "ToFloat",
]

logger = logging.getLogger(__name__)

IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
"""ImageNet's per-channel mean, in 0..1 units (torchvision's values)."""
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)
"""ImageNet's per-channel standard deviation, in 0..1 units."""

Labels = torch.Tensor | None
_GRAY_WEIGHTS = (0.299, 0.587, 0.114)  # ITU-R 601, as torchvision's rgb_to_grayscale
_GRAY_CACHE: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}


class BatchTransform(abc.ABC):
    """Base of every batch transform: ``images, labels = transform(images, labels)``.

    Subclasses implement ``__call__`` and may override ``extra_repr`` for ``__repr__``.

    Example::

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

    Example::

        >>> t = Compose([RandomHorizontalFlip(), Normalize((0.5,) * 3, (0.5,) * 3)])
        >>> images, labels = t(torch.zeros(2, 3, 8, 8, dtype=torch.uint8), torch.tensor([0, 1]))
    """

    def __init__(self, transforms: Sequence[BatchTransform]) -> None:
        for t in transforms:
            if not callable(t):
                raise TypeError(f"transforms must hold callables, got {t!r}; pass transform objects")
        self.transforms = list(transforms)

    def __call__(self, images: torch.Tensor, labels: Labels = None) -> tuple[torch.Tensor, Labels]:
        for t in self.transforms:
            images, labels = t(images, labels)
        return images, labels

    def __repr__(self) -> str:
        body = "".join(f"\n    {t!r}," for t in self.transforms)
        return f"Compose([{body}\n])" if body else "Compose([])"


class ToFloat(BatchTransform):
    """Convert images to float: uint8 is divided by 255 (if ``scale``), float is only cast.

    Args:
        dtype: A floating output dtype.
        scale: Divide uint8 input by 255 so it lands in [0, 1].

    Example::

        >>> images, _ = ToFloat()(torch.full((1, 3, 2, 2), 255, dtype=torch.uint8))
        >>> images.max().item()
        1.0
    """

    def __init__(self, dtype: torch.dtype = torch.float32, scale: bool = True) -> None:
        self.dtype = _check_float_dtype("dtype", dtype)
        self.scale = bool(scale)

    def __call__(self, images: torch.Tensor, labels: Labels = None) -> tuple[torch.Tensor, Labels]:
        _check_images(images)
        if images.dtype == torch.uint8 and self.scale:
            return images.to(self.dtype).div_(255.0), labels
        return images.to(self.dtype), labels

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

    Example::

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
        self.dtype = _check_float_dtype("dtype", dtype)
        self._cache: dict[tuple[torch.device, bool], tuple[torch.Tensor, torch.Tensor]] = {}

    def _constants(self, device: torch.device, from_uint8: bool) -> tuple[torch.Tensor, torch.Tensor]:
        key = (device, from_uint8)
        if key not in self._cache:  # one blocking copy per device: the constants are then safe on any stream
            unit = 255.0 if from_uint8 else 1.0
            scale = torch.tensor([1.0 / (unit * s) for s in self.std], dtype=torch.float64)
            shift = torch.tensor([-m / s for m, s in zip(self.mean, self.std)], dtype=torch.float64)
            self._cache[key] = (shift.view(-1, 1, 1).float().to(device), scale.view(-1, 1, 1).float().to(device))
            logger.debug("Normalize constants cached for %s (uint8=%s)", device, from_uint8)
        return self._cache[key]

    def __call__(self, images: torch.Tensor, labels: Labels = None) -> tuple[torch.Tensor, Labels]:
        _check_images(images)
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

    def extra_repr(self) -> str:
        return f"mean={self.mean}, std={self.std}, dtype={self.dtype}"


class RandomHorizontalFlip(BatchTransform):
    """Flip each image left-right independently with probability ``p``.

    Args:
        p: Probability of flipping one image, in [0, 1].
        generator: CPU generator for the per-sample coin flips (None: torch's default).

    Example::

        >>> flip = RandomHorizontalFlip(0.5, generator=torch.Generator().manual_seed(0))
        >>> images, labels = flip(torch.rand(8, 3, 32, 32), None)
    """

    def __init__(self, p: float = 0.5, *, generator: torch.Generator | None = None) -> None:
        self.p = _check_prob("p", p)
        self.generator = _check_generator(generator)

    def get_params(self, batch_size: int) -> torch.Tensor:
        """Draw the CPU bool mask ``[batch_size]`` of images to flip."""
        return torch.rand(batch_size, generator=self.generator) < self.p

    def __call__(self, images: torch.Tensor, labels: Labels = None) -> tuple[torch.Tensor, Labels]:
        _check_images(images)
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
        mask = _to_device(mask, images.device).view(-1, 1, 1, 1)
        return torch.where(mask, images.flip(-1), images), labels

    def extra_repr(self) -> str:
        return f"p={self.p}{_gen_repr(self.generator)}"


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

    Example::

        >>> rrc = RandomResizedCrop(224, generator=torch.Generator().manual_seed(0))
        >>> images, _ = rrc(torch.zeros(4, 3, 300, 400, dtype=torch.uint8))
        >>> tuple(images.shape)
        (4, 3, 224, 224)
    """

    def __init__(self, size: int | Sequence[int], scale: tuple[float, float] = (0.08, 1.0),
                 ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0), *, antialias: bool = False,
                 generator: torch.Generator | None = None) -> None:
        self.size = _check_size(size)
        self.scale = _check_bounds("scale", scale)
        self.ratio = _check_bounds("ratio", ratio)
        if antialias:
            raise ValueError("antialias=True is not supported by the batched grid_sample crop; pass antialias=False "
                             "(or downscale at decode time with fastdata.transforms)")
        self.antialias = False
        self.generator = _check_generator(generator)

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

    def __call__(self, images: torch.Tensor, labels: Labels = None) -> tuple[torch.Tensor, Labels]:
        _check_images(images)
        n, c, height, width = images.shape
        boxes = self.get_params(height, width, n).double()
        work = torch.float64 if images.dtype == torch.float64 else torch.float32
        params = _to_device(_boxes_to_grid_params(boxes, height, width).to(work), images.device)
        grid = F.affine_grid(params[:, :6].reshape(n, 2, 3), [n, c, *self.size], align_corners=False)
        grid = grid.clamp_(params[:, 6:8].reshape(n, 1, 1, 2), params[:, 8:].reshape(n, 1, 1, 2))
        out = F.grid_sample(images.to(work), grid, mode="bilinear", padding_mode="border", align_corners=False)
        if images.dtype == torch.uint8:
            return out.div_(255.0), labels
        return out.to(images.dtype), labels

    def extra_repr(self) -> str:
        return (f"size={self.size}, scale={self.scale}, ratio={tuple(round(r, 4) for r in self.ratio)}, "
                f"antialias=False{_gen_repr(self.generator)}")


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

    Example::

        >>> jitter = ColorJitter(0.4, 0.4, 0.4, generator=torch.Generator().manual_seed(0))
        >>> images, _ = jitter(torch.rand(8, 3, 32, 32), None)
    """

    def __init__(self, brightness: float | tuple[float, float] = 0, contrast: float | tuple[float, float] = 0,
                 saturation: float | tuple[float, float] = 0, *, generator: torch.Generator | None = None) -> None:
        self.brightness = _jitter_range("brightness", brightness)
        self.contrast = _jitter_range("contrast", contrast)
        self.saturation = _jitter_range("saturation", saturation)
        self.generator = _check_generator(generator)

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

    def __call__(self, images: torch.Tensor, labels: Labels = None) -> tuple[torch.Tensor, Labels]:
        _check_images(images)
        if self.brightness is None and self.contrast is None and self.saturation is None:
            return images, labels
        c = images.shape[1]
        if (self.contrast or self.saturation) and c not in (1, 3):
            raise ValueError(f"contrast/saturation jitter needs 1 or 3 channels, got images with {c}")
        is_uint8 = images.dtype == torch.uint8
        x = images.float() if is_uint8 else images
        bound = 255.0 if is_uint8 else 1.0
        f = _to_device(self.get_params(images.shape[0]), images.device).to(x.dtype).view(3, -1, 1, 1, 1)
        if self.brightness is not None:
            x = (x * f[0]).clamp_(0.0, bound)
        if self.contrast is not None:
            mean = _grayscale(x.mean(dim=(-2, -1), keepdim=True))  # mean of gray == gray of means
            x = torch.lerp(mean, x, f[1]).clamp_(0.0, bound)
        if self.saturation is not None and c == 3:
            x = torch.lerp(_grayscale(x), x, f[2]).clamp_(0.0, bound)
        return (x.round_().to(torch.uint8) if is_uint8 else x), labels

    def extra_repr(self) -> str:
        return (f"brightness={self.brightness}, contrast={self.contrast}, saturation={self.saturation}"
                f"{_gen_repr(self.generator)}")


class _BatchMix(BatchTransform):
    """Shared arguments and label handling of ``Mixup`` and ``CutMix``."""

    def __init__(self, *, alpha: float, num_classes: int, generator: torch.Generator | None) -> None:
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < math.inf:
            raise ValueError(f"alpha must be a finite number > 0, got {alpha!r}")
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"num_classes must be an int >= 1, got {num_classes!r}")
        self.alpha = float(alpha)
        self.num_classes = num_classes
        self.generator = _check_generator(generator)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, num_classes={self.num_classes}{_gen_repr(self.generator)}"


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
        _check_images(images)
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
        _check_images(images)
        targets = _soft_targets(labels, images.shape[0], self.num_classes, images.device)
        lam, (y1, y2, x1, x2) = self.get_params(images.shape[-2], images.shape[-1])
        out = images.clone()
        if y2 > y1 and x2 > x1:
            out[..., y1:y2, x1:x2] = images[..., y1:y2, x1:x2].flip(0)
        return out, torch.lerp(targets.flip(0), targets, lam)


# ----------------------------------------------------------------------------- helpers


def _to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Move a small CPU tensor to ``device`` without blocking the host (pinned staging on CUDA)."""
    if device.type == "cpu":
        return t
    if device.type == "cuda":
        t = t.pin_memory()
    return t.to(device, non_blocking=True)


def _grayscale(x: torch.Tensor) -> torch.Tensor:
    """ITU-R 601 luma ``[N, 1, H, W]`` of ``[N, 3, H, W]`` (or the image itself for 1 channel)."""
    if x.shape[1] == 1:
        return x
    key = (x.device, x.dtype)
    if key not in _GRAY_CACHE:  # one blocking copy per (device, dtype): safe on any stream afterwards
        _GRAY_CACHE[key] = torch.tensor(_GRAY_WEIGHTS, dtype=x.dtype).view(1, 3, 1, 1).to(x.device)
    return (x * _GRAY_CACHE[key]).sum(dim=1, keepdim=True)


def _central_crop(height: int, width: int, ratio: tuple[float, float]) -> tuple[int, int]:
    """torchvision's fallback box size ``(h, w)`` when no random try fits."""
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


def _check_images(images: object) -> None:
    if not isinstance(images, torch.Tensor):
        raise TypeError(f"images must be a torch.Tensor [N, C, H, W], got {type(images).__name__}")
    if images.dim() != 4:
        raise ValueError(f"images must be a batch [N, C, H, W], got shape {tuple(images.shape)}; "
                         "add a batch dimension with images.unsqueeze(0)")
    if images.dtype != torch.uint8 and not images.is_floating_point():
        raise TypeError(f"images must be uint8 or floating point, got {images.dtype}")


def _check_float_dtype(name: str, dtype: object) -> torch.dtype:
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"{name} must be a floating torch.dtype such as torch.float32, got {dtype!r}")
    return dtype


def _check_prob(name: str, p: object) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {p!r}")
    return float(p)


def _check_generator(generator: object) -> torch.Generator | None:
    if generator is None:
        return None
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    if generator.device.type != "cpu":
        raise ValueError(f"generator must be a CPU torch.Generator (parameters are drawn on the CPU), "
                         f"got one on {generator.device}; use torch.Generator()")
    return generator


def _check_size(size: object) -> tuple[int, int]:
    values = (size,) if isinstance(size, int) else tuple(size) if isinstance(size, Sequence) else ()
    if len(values) == 1:
        values = values * 2
    if len(values) != 2 or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
        raise ValueError(f"size must be a positive int or a (height, width) pair of positive ints, got {size!r}")
    return values  # type: ignore[return-value]


def _check_bounds(name: str, bounds: object) -> tuple[float, float]:
    try:
        lo, hi = (float(b) for b in bounds)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a (low, high) pair of numbers, got {bounds!r}") from None
    if not (0 < lo <= hi and math.isfinite(hi)):
        raise ValueError(f"{name} must satisfy 0 < low <= high, got {bounds!r}; swap or fix the bounds")
    return lo, hi


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


def _gen_repr(generator: torch.Generator | None) -> str:
    return "" if generator is None else ", generator=torch.Generator"
