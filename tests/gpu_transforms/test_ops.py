"""Each batched op, with one parameter per image, equals torchvision's v2 op on that image alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image, ImageFilter
from torchvision.transforms.v2 import functional as TF  # the test set-up installs it (tools/setup.sh test)

from fastdata.gpu_transforms import ops


def batch(dtype: torch.dtype, n: int = 6, c: int = 3, h: int = 23, w: int = 31) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    # smooth content plus noise: realistic histograms and edges, not uniform noise only
    base = torch.linspace(0, 255, h * w).view(1, 1, h, w) * torch.rand(n, c, 1, 1, generator=g)
    x = (base + 60 * torch.rand(n, c, h, w, generator=g)).clamp(0, 255).to(torch.uint8)
    return x if dtype == torch.uint8 else x.float() / 255


def compare(out: torch.Tensor, ref: torch.Tensor, exact: bool) -> None:
    assert out.shape == ref.shape and out.dtype == ref.dtype
    scale = 255.0 if out.dtype == torch.uint8 else 1 / 255
    diff = (out.double() - ref.double()).abs()
    if exact and out.dtype == torch.uint8:
        assert torch.equal(out, ref), f"{int((diff > 0).sum())} values differ, by up to {diff.max()}"
    elif exact:
        assert diff.max() <= 1e-5 * 255 * scale
    else:
        assert diff.mean() <= 1.0 * (1 if out.dtype == torch.uint8 else 1 / 255), diff.mean()


def per_image(x, params, fn):
    return torch.stack([fn(img, p) for img, p in zip(x, params, strict=False)])


DTYPES = [torch.uint8, torch.float32]
FACTORS = torch.tensor([0.0, 0.1, 0.5, 1.0, 1.5, 1.9])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["brightness", "saturation", "contrast", "sharpness"])
def test_factor_ops(dtype, name):
    x = batch(dtype)
    out = getattr(ops, f"adjust_{name}")(x, FACTORS)
    ref = per_image(x, FACTORS.tolist(), getattr(TF, f"adjust_{name}"))
    compare(out, ref, exact=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_posterize(dtype):
    x = batch(dtype)
    bits = torch.tensor([0, 1, 2, 4, 6, 8])
    compare(ops.posterize(x, bits), per_image(x, bits.tolist(), TF.posterize), exact=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_solarize_and_invert(dtype):
    x = batch(dtype)
    thr = torch.tensor([0, 64, 128, 200, 255, 256]) * (1 if dtype == torch.uint8 else 1 / 255)
    unit_thr = [min(t, 255 if dtype == torch.uint8 else 1.0) if t < thr.max() else t for t in thr.tolist()]
    ref = torch.stack(
        [TF.solarize(img, t) if t <= ops.max_value(x) else img for img, t in zip(x, unit_thr, strict=False)]
    )
    compare(ops.solarize(x, thr), ref, exact=True)
    compare(ops.invert(x), TF.invert(x), exact=True)


def test_solarize_add_follows_timms_lookup_table():
    x = batch(torch.uint8)
    add = torch.tensor([0, 10, 50, 110, 128, 3])

    def lut(a):
        return torch.tensor([min(255, i + a) if i < 128 else i for i in range(256)], dtype=torch.uint8)

    ref = torch.stack([lut(a)[img.long()] for img, a in zip(x, add.tolist(), strict=False)])
    assert torch.equal(ops.solarize_add(x, add), ref)
    xf = x.float() / 255
    assert (ops.solarize_add(xf, add / 255, 128 / 255) * 255 - ref).abs().max() < 1e-3


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["equalize", "autocontrast"])
def test_histogram_ops(dtype, name):
    x = batch(dtype)
    x[2] = x[2, :, :1, :1]  # a flat image: both ops keep it
    out = getattr(ops, name)(x)
    compare(out, torch.stack([getattr(TF, name)(img) for img in x]), exact=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_grayscale(dtype):
    x = batch(dtype)
    compare(ops.grayscale(x), torch.stack([TF.rgb_to_grayscale(img, 3) for img in x]), exact=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gaussian_blur(dtype):
    x = batch(dtype)
    sigma = torch.tensor([0.1, 0.5, 1.0, 1.5, 2.0, 3.0])
    ref = per_image(x, sigma.tolist(), lambda img, s: TF.gaussian_blur(img, [7, 7], [s, s]))
    compare(ops.gaussian_blur(x, sigma, 7), ref, exact=False)
    assert (ops.gaussian_blur(x, sigma, 7).double() - ref.double()).abs().max() <= (1 if dtype == torch.uint8 else 1e-5)


def _pil_blur(img: torch.Tensor, radius: float) -> torch.Tensor:
    """DeiT III's blur: PIL's ``ImageFilter.GaussianBlur(radius)`` on the uint8 image."""
    pil = Image.fromarray(img.permute(1, 2, 0).numpy().copy()).filter(ImageFilter.GaussianBlur(radius))
    return torch.from_numpy(np.array(pil)).permute(2, 0, 1)


@pytest.mark.parametrize("size", [(23, 31), (1, 5), (4, 1), (64, 48)])
def test_pil_gaussian_blur_is_pils_gaussian_blur(size):
    g = torch.Generator().manual_seed(3)
    x = batch(torch.uint8, n=40, h=size[0], w=size[1])
    radius = torch.cat(
        [
            torch.tensor([0.0, 0.1, 0.5, 1.0, 2.0, 4.5, 9.0, 30.0], dtype=torch.float64),
            0.1 + 1.9 * torch.rand(32, generator=g, dtype=torch.float64),
        ]
    )  # DeiT III's range
    ref = per_image(x, radius.tolist(), _pil_blur)
    compare(ops.pil_gaussian_blur(x, radius), ref, exact=True)  # Pillow's bytes
    # float: the same filter and roundings in uint8 units
    out = ops.pil_gaussian_blur(x.float() / 255, radius)
    assert out.dtype == torch.float32 and (out.double() * 255 - ref.double()).abs().max() < 1e-3


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
@pytest.mark.parametrize("fill", [None, (124.0, 116.0, 104.0)])
def test_affine_ops(dtype, interpolation, fill):
    x = batch(dtype)
    n, _, h, w = x.shape
    unit = 1.0 if dtype == torch.uint8 else 1 / 255
    fill_t = None if fill is None else torch.tensor(fill) * unit
    fill_l = None if fill is None else [f * unit for f in fill]
    zero = torch.zeros(n)
    # rotate (about the centre), shear x/y (about the top-left corner, as timm/PIL), translate x/y
    angle = torch.tensor([-30.0, -13.5, 0.0, 7.0, 21.0, 30.0])
    shear = torch.tensor([-16.7, -9.0, -1.0, 0.0, 5.0, 16.7])
    shift = torch.tensor([-13.0, -4.0, 0.0, 2.0, 6.0, 11.0])
    cases = [
        (
            ops.affine_matrix(angle, zero, zero, zero, zero),
            [dict(angle=a, translate=[0, 0], shear=[0, 0]) for a in angle.tolist()],
            None,
        ),
        (
            ops.affine_matrix(zero, zero, zero, shear, zero, -w / 2, -h / 2),
            [dict(angle=0.0, translate=[0, 0], shear=[s, 0.0]) for s in shear.tolist()],
            [0, 0],
        ),
        (
            ops.affine_matrix(zero, zero, zero, zero, shear, -w / 2, -h / 2),
            [dict(angle=0.0, translate=[0, 0], shear=[0.0, s]) for s in shear.tolist()],
            [0, 0],
        ),
        (
            ops.affine_matrix(zero, shift, zero, zero, zero),
            [dict(angle=0.0, translate=[t, 0], shear=[0, 0]) for t in shift.tolist()],
            None,
        ),
        (
            ops.affine_matrix(zero, zero, shift, zero, zero),
            [dict(angle=0.0, translate=[0, t], shear=[0, 0]) for t in shift.tolist()],
            None,
        ),
    ]
    for matrix, kwargs, center in cases:
        out = ops.warp_affine(x, matrix, fill_t, interpolation)
        ref = torch.stack(
            [
                TF.affine(
                    img, scale=1.0, interpolation=TF.InterpolationMode(interpolation), fill=fill_l, center=center, **kw
                )
                for img, kw in zip(x, kwargs, strict=False)
            ]
        )
        compare(out, ref, exact=False)


def test_ops_keep_the_device_and_do_not_loop(monkeypatch):
    x = batch(torch.uint8)
    calls = []
    monkeypatch.setattr(torch.Tensor, "item", lambda self: calls.append(1))
    for out in (
        ops.equalize(x),
        ops.posterize(x, torch.full((6,), 3)),
        ops.gaussian_blur(x, torch.ones(6), 5),
        ops.pil_gaussian_blur(x, torch.ones(6)),
        ops.warp_affine(x, ops.affine_matrix(*(torch.ones(6),) * 5), torch.zeros(3)),
    ):
        assert out.shape == x.shape and out.device == x.device
    assert not calls
