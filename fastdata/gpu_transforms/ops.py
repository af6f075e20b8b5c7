"""Batched image ops with one parameter per image, the building blocks of the augmentation policies.

Every op takes a batch ``x`` ``[n, C, H, W]`` (uint8 in 0..255, or float in [0, 1]) and per-image
parameters as tensors of shape ``[n]`` on ``x``'s device, and returns a batch of the same dtype,
shape and device. Each image's result equals torchvision's ``transforms.v2.functional`` op applied
to that image alone with its parameter (same formulas, roundings and truncations). No op reads a
device tensor back to the host or loops over the images.

Geometric ops go through :func:`affine_matrix` (an inverse matrix per image, torchvision's
convention: pixel coordinates with the origin at the image centre) and one :func:`warp_affine`.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from fastdata.gpu_transforms.base import to_device

__all__ = [
    "adjust_brightness",
    "adjust_contrast",
    "adjust_saturation",
    "adjust_sharpness",
    "affine_matrix",
    "autocontrast",
    "equalize",
    "gaussian_blur",
    "grayscale",
    "invert",
    "max_value",
    "pil_gaussian_blur",
    "pil_grayscale",
    "posterize",
    "solarize",
    "solarize_add",
    "warp_affine",
]

_GRAY = (0.2989, 0.587, 0.114)  # torchvision's rgb_to_grayscale weights


def _to(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` on ``device``: as it is when already there, else copied without blocking (pinned) from the CPU."""
    return t if t.device == device else to_device(t, device)


def max_value(x: torch.Tensor) -> float:
    """The value of white: 255 for uint8, 1 for float."""
    return 255.0 if x.dtype == torch.uint8 else 1.0


def _per_image(v: torch.Tensor, x: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``[n]`` parameters as ``[n, 1, 1, 1]`` on ``x``'s device (float32 for uint8 input, else x's dtype)."""
    work = dtype or (torch.float32 if x.dtype == torch.uint8 else x.dtype)
    return _to(v.to(work), x.device).view(-1, 1, 1, 1)


def _finish(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Clamp to the value range; uint8 is truncated back like torchvision's colour kernels."""
    out = out.clamp_(0.0, max_value(x))
    return out if x.is_floating_point() else out.to(x.dtype)


def _gray(x: torch.Tensor) -> torch.Tensor:
    """Float luma ``[n, 1, H, W]`` (floored for uint8 like torchvision), the image itself for 1 channel."""
    if x.shape[1] == 1:
        return x if x.is_floating_point() else x.float()
    r, g, b = x.unbind(1)  # uint8 * float promotes to float32 inside each kernel: no converted copy
    gray = r.mul(_GRAY[0]).add_(g, alpha=_GRAY[1]).add_(b, alpha=_GRAY[2]).unsqueeze(1)
    return gray if x.is_floating_point() else gray.floor_()


def _blend(x: torch.Tensor, other: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    f = _per_image(factor, x)
    one_minus = _per_image(1.0 - factor.double(), x)  # 1 - factor rounded once, as torchvision's alpha
    return _finish(torch.addcmul(x * f, other, one_minus), x)


def adjust_brightness(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """``x * factor`` per image (factor >= 0)."""
    return _finish(x * _per_image(factor, x), x)


def adjust_saturation(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Blend each image with its grayscale version (1 channel: unchanged)."""
    return x.clone() if x.shape[1] == 1 else _blend(x, _gray(x), factor)


def adjust_contrast(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Blend each image with the mean of its grayscale version."""
    return _blend(x, _gray(x).mean(dim=(-3, -2, -1), keepdim=True), factor)


def adjust_sharpness(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Blend the inner pixels with a 3x3 smoothed image (PIL's SMOOTH kernel); the border is kept."""
    n, c, h, w = x.shape
    if h <= 2 or w <= 2:
        return x.clone()
    work = x.dtype if x.is_floating_point() else torch.float32
    out = x.to(work, copy=True)
    # PIL's SMOOTH kernel (1s around a 5, / 13) as a separable 3x3 box sum plus 4x the centre: sums of integers
    # are exact, and their / 13 never lands near a .5, so uint8 rounds exactly as torchvision's conv2d does
    rows = out[:, :, :-2] + out[:, :, 1:-1] + out[:, :, 2:]
    box = rows[..., :-2] + rows[..., 1:-1] + rows[..., 2:]
    blurred = box.add_(out[..., 1:-1, 1:-1], alpha=4.0).div_(13.0)
    if not x.is_floating_point():
        blurred = blurred.round_()
    inner = out[..., 1:-1, 1:-1]
    inner.add_((blurred - inner) * (1.0 - _per_image(factor, x, work)))
    return _finish(out, x)


def posterize(x: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """Keep the ``bits`` (0..8, int tensor) most significant bits of each value."""
    if x.is_floating_point():
        levels = torch.pow(2.0, _per_image(bits, x))
        return torch.minimum(torch.floor(x * levels), levels - 1).clamp_(min=0).div_(levels)
    shift = (8 - _to(bits, x.device).long()).clamp(0, 8)
    mask = ((255 << shift) & 255).to(torch.uint8).view(-1, 1, 1, 1)
    return x & mask


def invert(x: torch.Tensor) -> torch.Tensor:
    """``white - x``."""
    return torch.bitwise_not(x) if x.dtype == torch.uint8 else 1.0 - x


def solarize(x: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """Invert the values ``>= threshold`` (in the image's units: 0..255 for uint8, 0..1 for float)."""
    if x.dtype == torch.uint8:  # integer compare: a uint8 value v >= t exactly when v >= ceil(t); t > 255: none
        t = _to(threshold, x.device).float().double().ceil()  # torchvision compares in float32
        mask = (x >= t.clamp(0, 255).to(torch.uint8).view(-1, 1, 1, 1)) & (t <= 255).view(-1, 1, 1, 1)
        return torch.where(mask, invert(x), x)
    return torch.where(x >= _per_image(threshold, x), invert(x), x)


def solarize_add(x: torch.Tensor, add: torch.Tensor, threshold: float = 128.0) -> torch.Tensor:
    """Add ``add`` to the values below ``threshold`` (clipped to white), as timm's SolarizeAdd (image units)."""
    if x.dtype == torch.uint8:  # saturating uint8 add: x + min(add, 255 - x)
        a = _to(add, x.device).round().clamp(0, 255).to(torch.uint8).view(-1, 1, 1, 1)
        return torch.where(x < threshold, x + torch.minimum(a, 255 - x), x)
    added = (x + _per_image(add, x)).clamp_(max=1.0)
    return torch.where(x < threshold, added, x)


def autocontrast(x: torch.Tensor) -> torch.Tensor:
    """Stretch each channel to the full range (a flat channel is kept)."""
    bound = max_value(x)
    xf = x if x.is_floating_point() else x.float()
    lo = xf.amin(dim=(-2, -1), keepdim=True)
    hi = xf.amax(dim=(-2, -1), keepdim=True)
    flat = hi == lo
    scale = torch.where(flat, torch.ones_like(hi), (hi - lo).mul_(1.0 / bound))
    lo = torch.where(flat, torch.zeros_like(lo), lo)
    return ((xf - lo) / scale).clamp_(0, bound).to(x.dtype)


def equalize(x: torch.Tensor) -> torch.Tensor:
    """Histogram-equalize each channel with PIL's lookup table (float input is binned to 256 levels)."""
    u8 = x if x.dtype == torch.uint8 else x.mul(256.0 - 1e-3).to(torch.uint8)
    n, c, h, w = u8.shape
    flat = u8.reshape(n, c, h * w).long()
    hist = torch.zeros(n, c, 256, dtype=torch.int32, device=x.device)
    hist.scatter_add_(2, flat, torch.ones(1, dtype=torch.int32, device=x.device).expand_as(flat))
    cum = hist.cumsum(dim=2)
    last = hist.gather(2, cum.argmax(dim=2, keepdim=True))  # count of the brightest value present
    step = torch.div(h * w - last, 255, rounding_mode="floor")
    lut = torch.div(cum[..., :-1] + step // 2, step.clamp(min=1), rounding_mode="floor").clamp_(0, 255)
    lut = torch.cat([torch.zeros_like(lut[..., :1]), lut], dim=2).to(torch.uint8)
    out = torch.where(step.ne(0).view(n, c, 1, 1), lut.gather(2, flat).view(n, c, h, w), u8)
    return out if x.dtype == torch.uint8 else out.to(x.dtype).mul_(1.0 / 255.0)


def grayscale(x: torch.Tensor) -> torch.Tensor:
    """The luma copied to every channel (torchvision's ``rgb_to_grayscale(..., 3)``; uint8 truncated)."""
    if x.shape[1] == 1:
        return x.clone()
    xf = x if x.is_floating_point() else x.float()
    r, g, b = xf.unbind(1)
    gray = r.mul(_GRAY[0]).add_(g, alpha=_GRAY[1]).add_(b, alpha=_GRAY[2]).unsqueeze(1).to(x.dtype)
    return gray.expand_as(x).contiguous()


def pil_grayscale(x: torch.Tensor) -> torch.Tensor:
    """PIL's ``convert("L")`` copied to every channel: DeiT III's grayscale (``RandomGrayscale`` on PIL images).

    Pillow's integer luma, ``(19595 R + 38470 G + 7471 B + 0x8000) >> 16`` (ITU-R 601 weights in 16-bit fixed point,
    rounded): uint8 input gets Pillow's bytes exactly. Float input (in [0, 1]) is converted as Pillow converts
    ``round(255 * x)``, / 255. (:func:`grayscale` is torchvision's tensor kernel, 0.2989 weights, truncated.)
    """
    if x.shape[1] == 1:
        return x.clone()
    u8 = x if x.dtype == torch.uint8 else x.mul(255.0).round_().clamp_(0.0, 255.0).to(torch.uint8)
    r, g, b = u8.to(torch.int32).unbind(1)
    luma = (r.mul_(19595).add_(g, alpha=38470).add_(b, alpha=7471).add_(0x8000) >> 16).to(torch.uint8).unsqueeze(1)
    out = luma if x.dtype == torch.uint8 else luma.to(x.dtype).div_(255.0)
    return out.expand_as(x).contiguous()


def gaussian_blur(x: torch.Tensor, sigma: torch.Tensor, kernel_size: int) -> torch.Tensor:
    """Gaussian blur with a per-image ``sigma`` (> 0) and an odd ``kernel_size``, reflect padding, separable."""
    if kernel_size % 2 == 0 or kernel_size < 1:
        raise ValueError(f"kernel_size must be a positive odd int, got {kernel_size}")
    n, c, h, w = x.shape
    work = x.dtype if x.is_floating_point() else torch.float32
    lim = (kernel_size - 1) / (2.0 * math.sqrt(2.0))
    pos = torch.linspace(-lim, lim, kernel_size, dtype=work, device=x.device)
    s = _to(sigma, x.device).to(work).view(-1, 1)
    k1 = torch.softmax(-(pos / s).pow(2), dim=1).repeat_interleave(c, dim=0)  # [n*c, k]
    pad = kernel_size // 2
    y = F.pad(x.to(work).reshape(1, n * c, h, w), [pad, pad, pad, pad], mode="reflect")
    y = F.conv2d(y, k1.view(n * c, 1, 1, kernel_size), groups=n * c)
    y = F.conv2d(y, k1.view(n * c, 1, kernel_size, 1), groups=n * c).view(n, c, h, w)
    return y if x.is_floating_point() else y.round_().to(x.dtype)


def _pil_box_radius(radius: np.ndarray, passes: int) -> np.ndarray:
    """Pillow's ``_gaussian_blur_radius``: the extended box radius of each pass, in its float32 arithmetic."""
    f32 = np.float32
    sigma2 = radius * radius / f32(passes)
    big_l = np.sqrt(12.0 * sigma2.astype(np.float64) + 1.0).astype(f32)  # box length (Gwosdek et al., eq. 7)
    low = np.floor((big_l.astype(np.float64) - 1.0) / 2.0).astype(f32)  # its integer radius
    frac = (f32(2) * low + f32(1)) * (low * (low + f32(1)) - f32(3) * sigma2)
    return low + frac / (f32(6) * (sigma2 - (low + f32(1)) * (low + f32(1))))


def _pil_box_taps(radius: torch.Tensor, passes: int) -> torch.Tensor:
    """Each image's box as int64 taps ``[n, 2 * reach + 1]`` in Pillow's 8.24 fixed point (they sum to <= 2**24)."""
    box = _pil_box_radius(radius.detach().cpu().double().numpy().astype(np.float32), passes)
    whole = box.astype(np.int64)  # (int)floatRadius
    inner = (np.float32(1 << 24) / (box * np.float32(2) + np.float32(1))).astype(np.int64)
    far = ((1 << 24) - (2 * whole + 1) * inner) // 2
    reach = int(whole.max(initial=0)) + 1
    offsets = np.abs(np.arange(-reach, reach + 1))[None, :]
    taps = np.where(offsets <= whole[:, None], inner[:, None], np.where(offsets == whole[:, None] + 1, far[:, None], 0))
    return torch.from_numpy(taps)


def _box_pass(y: torch.Tensor, taps: torch.Tensor, dim: int) -> torch.Tensor:
    """One box pass along ``dim``, rounded as Pillow's.

    One box pass along ``dim``, edges repeated, rounded half up as Pillow's ``SAVE`` (float64 holds the 8.24
    fixed-point sums of whole values exactly, and is faster than int64 on the CPU).
    """
    reach, size = taps.shape[1] // 2, y.shape[dim]
    edge = list(y.shape)
    edge[dim] = reach
    padded = torch.cat([y.narrow(dim, 0, 1).expand(edge), y, y.narrow(dim, size - 1, 1).expand(edge)], dim)
    acc = padded.narrow(dim, 0, size) * taps[:, 0].view(-1, 1, 1, 1)
    for d in range(1, taps.shape[1]):
        acc.addcmul_(padded.narrow(dim, d, size), taps[:, d].view(-1, 1, 1, 1))
    return acc.add_(1 << 23).mul_(2.0**-24).floor_()


def pil_gaussian_blur(x: torch.Tensor, radius: torch.Tensor, passes: int = 3) -> torch.Tensor:
    """PIL's ``ImageFilter.GaussianBlur(radius)`` per image (DeiT III's blur), ``radius`` (>= 0) being its sigma.

    Pillow approximates the Gaussian by ``passes`` extended box blurs along the rows, then along the columns
    (``BoxBlur.c``): each box has the fractional radius of Gwosdek et al.'s formula, 8.24 fixed-point weights, edge
    pixels repeated, and every pass rounds to whole uint8 values. uint8 input gets Pillow's bytes exactly (float64
    arithmetic, exact on these whole-valued sums). Float input (in [0, 1]) is blurred as Pillow blurs its uint8 version
    ``round(255 * x)``: the result is Pillow's / 255, in steps of 1/255 as Pillow's are. ``radius`` is read on the host
    (the weights are integers derived there, as Pillow does): pass a CPU tensor to keep a CUDA batch free of host syncs.
    """
    if not (torch.is_tensor(radius) and bool((radius.detach().cpu() >= 0).all())):
        raise ValueError(f"radius must be a tensor of values >= 0 (PIL's sigma), got {radius!r}")
    taps = _to(_pil_box_taps(radius, passes).double(), x.device)
    y = x.double() if x.dtype == torch.uint8 else x.double().mul_(255.0).round_().clamp_(0.0, 255.0)
    for dim in (-1, -2):  # along the rows, then along the columns
        for _ in range(passes):
            y = _box_pass(y, taps, dim)
    return y.to(torch.uint8) if x.dtype == torch.uint8 else y.to(x.dtype).div_(255.0)


def affine_matrix(
    angle: torch.Tensor,
    translate_x: torch.Tensor,
    translate_y: torch.Tensor,
    shear_x: torch.Tensor,
    shear_y: torch.Tensor,
    center_x: torch.Tensor | float = 0.0,
    center_y: torch.Tensor | float = 0.0,
) -> torch.Tensor:
    """Inverse affine matrices ``[n, 6]`` (float64) as torchvision's ``affine``: degrees, pixels, centre offsets.

    ``angle`` turns clockwise like ``F.affine`` (``F.rotate``'s counter-clockwise angle is ``-angle``); shears are
    in degrees; ``center_*`` are pixel offsets from the image centre (``-w/2, -h/2`` is the top-left corner).
    """
    rot, sx, sy = (torch.deg2rad(t.double()) for t in (angle, shear_x, shear_y))
    cx = torch.as_tensor(center_x, dtype=torch.float64).expand_as(rot)
    cy = torch.as_tensor(center_y, dtype=torch.float64).expand_as(rot)
    a = torch.cos(rot - sy) / torch.cos(sy)
    b = -(a * torch.tan(sx) + torch.sin(rot))
    c = torch.sin(rot - sy) / torch.cos(sy)
    d = torch.cos(rot) - c * torch.tan(sx)
    ctx, cty = cx + translate_x.double(), cy + translate_y.double()
    m0, m1, m3, m4 = d, -b, -c, a
    return torch.stack([m0, m1, cx - m0 * ctx - m1 * cty, m3, m4, cy - m3 * ctx - m4 * cty], dim=1)


def warp_affine(
    x: torch.Tensor, matrix: torch.Tensor, fill: torch.Tensor | None = None, interpolation: str = "bilinear"
) -> torch.Tensor:
    """Resample each image through its inverse ``matrix`` ``[n, 6]`` in one ``grid_sample``.

    Pixels that map outside the image get ``fill`` (a ``[C]`` tensor in image units; None: 0).
    """
    if interpolation not in ("nearest", "bilinear"):
        raise ValueError(f"interpolation must be 'nearest' or 'bilinear', got {interpolation!r}")
    n, c, h, w = x.shape
    work = x.dtype if x.is_floating_point() else torch.float32
    theta = _to(matrix.to(work), x.device).view(n, 2, 3)  # pinned, non-blocking from the CPU
    xs = torch.linspace((1.0 - w) * 0.5, (w - 1.0) * 0.5, w, dtype=work, device=x.device)
    ys = torch.linspace((1.0 - h) * 0.5, (h - 1.0) * 0.5, h, dtype=work, device=x.device)
    base = torch.stack(
        [xs.expand(h, w), ys.view(h, 1).expand(h, w), torch.ones(h, w, dtype=work, device=x.device)], dim=-1
    ).view(1, h * w, 3)
    rescaled = theta.transpose(1, 2).clone()  # [n, 3, 2]: x by w / 2, y by h / 2 (no host tensor to copy)
    rescaled[..., 0] /= 0.5 * w
    rescaled[..., 1] /= 0.5 * h
    grid = torch.matmul(base, rescaled).view(n, h, w, 2)
    src = x.to(work)
    if fill is not None:
        src = torch.cat([src, torch.ones(n, 1, h, w, dtype=work, device=x.device)], dim=1)
    out = F.grid_sample(src, grid, mode=interpolation, padding_mode="zeros", align_corners=False)
    if fill is not None:
        out, mask = out[:, :c], out[:, c:]
        fill_img = _to(fill.to(work), x.device).view(1, -1, 1, 1)
        if interpolation == "nearest":
            out = torch.where(mask < 0.5, fill_img.expand_as(out), out)
        else:
            out = (out - fill_img).mul_(mask).add_(fill_img)
    return out if x.is_floating_point() else out.round_().to(x.dtype)
