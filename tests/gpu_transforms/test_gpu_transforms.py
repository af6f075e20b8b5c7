"""Tests for fastdata.gpu_transforms: batched augmentations on CPU tensors (CUDA where present)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from fastdata.gpu_transforms import (
    ColorJitter,
    Compose,
    CutMix,
    Mixup,
    Normalize,
    RandomHorizontalFlip,
    RandomResizedCrop,
    ToFloat,
)

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def batch_u8(n: int = 8, h: int = 32, w: int = 32, seed: int = 0) -> torch.Tensor:
    """Smooth-ish uint8 images (a gradient plus noise) so resampling differences stay small."""
    g = gen(seed)
    yy, xx = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    base = (xx * 200 / max(w - 1, 1) + yy * 50 / max(h - 1, 1))[None, None]
    noise = torch.randint(0, 50, (n, 3, h, w), generator=g)
    return (base + noise).clamp(0, 255).to(torch.uint8)


def batch_f(n: int = 8, h: int = 32, w: int = 32, seed: int = 0) -> torch.Tensor:
    return batch_u8(n, h, w, seed).float() / 255


def gray(x: torch.Tensor) -> torch.Tensor:
    return 0.299 * x[:, 0:1] + 0.587 * x[:, 1:2] + 0.114 * x[:, 2:3]


# ----------------------------------------------------------------------------- shapes, dtypes, ToFloat


@pytest.mark.parametrize("in_dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize(
    "make, shape, out_dtype",
    [
        (lambda: ToFloat(), (8, 3, 32, 32), torch.float32),
        (lambda: Normalize(MEAN, STD), (8, 3, 32, 32), torch.float32),
        (lambda: Normalize(MEAN, STD, dtype=torch.float16), (8, 3, 32, 32), torch.float16),
        (lambda: RandomHorizontalFlip(generator=gen()), (8, 3, 32, 32), None),
        (lambda: RandomResizedCrop(16, generator=gen()), (8, 3, 16, 16), torch.float32),
        (lambda: RandomResizedCrop((12, 20), generator=gen()), (8, 3, 12, 20), torch.float32),
        (lambda: ColorJitter(0.4, 0.4, 0.4, generator=gen()), (8, 3, 32, 32), None),
        (lambda: Mixup(num_classes=5, generator=gen()), (8, 3, 32, 32), None),
        (lambda: CutMix(num_classes=5, generator=gen()), (8, 3, 32, 32), None),
    ],
)
def test_output_shape_and_dtype(make, shape, out_dtype, in_dtype):
    images = batch_u8() if in_dtype == torch.uint8 else batch_f()
    labels = torch.arange(8) % 5
    out, out_labels = make()(images, labels)
    assert tuple(out.shape) == shape
    assert out.dtype == (out_dtype or in_dtype)
    assert out.device == images.device


def test_to_float_scales_uint8_and_casts_float():
    x = batch_u8()
    assert torch.equal(ToFloat()(x, None)[0], x.float() / 255)
    assert torch.equal(ToFloat(scale=False)(x, None)[0], x.float())
    assert ToFloat(torch.float16)(x, None)[0].dtype == torch.float16
    f = batch_f()
    assert torch.equal(ToFloat(torch.float64)(f, None)[0], f.double())  # float input is never rescaled


# ----------------------------------------------------------------------------- Normalize


def test_normalize_uint8_matches_hand_formula():
    x = batch_u8()
    out, labels = Normalize(MEAN, STD)(x, torch.arange(8))
    ref = (x.float() / 255 - torch.tensor(MEAN).view(3, 1, 1)) / torch.tensor(STD).view(3, 1, 1)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    assert torch.equal(labels, torch.arange(8))


def test_normalize_float_input_assumes_unit_range_and_half_output():
    x = batch_f()
    ref = (x - torch.tensor(MEAN).view(3, 1, 1)) / torch.tensor(STD).view(3, 1, 1)
    torch.testing.assert_close(Normalize(MEAN, STD)(x, None)[0], ref, atol=1e-5, rtol=1e-5)
    half = Normalize(MEAN, STD, dtype=torch.bfloat16)(batch_u8(), None)[0]
    assert half.dtype == torch.bfloat16
    torch.testing.assert_close(half.float(), ref, atol=3e-2, rtol=1e-2)


def test_normalize_single_entry_broadcasts_and_keeps_channels_last():
    x = batch_u8().contiguous(memory_format=torch.channels_last)
    out = Normalize((0.5,), (0.25,))(x, None)[0]
    torch.testing.assert_close(out, (x.float() / 255 - 0.5) / 0.25, atol=1e-5, rtol=1e-5)
    assert out.is_contiguous(memory_format=torch.channels_last)


def test_normalize_channel_mismatch_is_a_clear_error():
    with pytest.raises(ValueError, match="3 mean/std entries but images have 4 channels"):
        Normalize(MEAN, STD)(torch.zeros(2, 4, 8, 8, dtype=torch.uint8), None)


# ----------------------------------------------------------------------------- RandomHorizontalFlip


@pytest.mark.parametrize("x", [batch_u8(), batch_f()], ids=["uint8", "float"])
def test_flip_flips_exactly_the_drawn_samples(x):
    mask = RandomHorizontalFlip(0.5, generator=gen(3)).get_params(8)
    assert 0 < int(mask.sum()) < 8  # this seed draws a mix, so the test can tell both cases apart
    out, _ = RandomHorizontalFlip(0.5, generator=gen(3))(x, None)
    for i in range(8):
        assert torch.equal(out[i], x[i].flip(-1) if mask[i] else x[i])


def test_flip_extremes():
    x = batch_f()
    assert RandomHorizontalFlip(0.0)(x, None)[0] is x
    assert torch.equal(RandomHorizontalFlip(1.0)(x, None)[0], x.flip(-1))


# ----------------------------------------------------------------------------- RandomResizedCrop


@pytest.mark.parametrize("x", [batch_u8(), batch_f()], ids=["uint8", "float"])
def test_crop_full_square_is_identity(x):
    out, _ = RandomResizedCrop(32, scale=(1.0, 1.0), ratio=(1.0, 1.0), generator=gen())(x, None)
    ref = x.float() / 255 if x.dtype == torch.uint8 else x
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=0)


def test_crop_boxes_inside_image_and_within_bounds():
    height, width, n = 480, 640, 4000
    boxes = RandomResizedCrop(224, generator=gen()).get_params(height, width, n)
    top, left, h, w = boxes.T.double()
    assert boxes.dtype == torch.int64 and tuple(boxes.shape) == (n, 4)
    assert bool((top >= 0).all() and (left >= 0).all() and (h >= 1).all() and (w >= 1).all())
    assert bool((top + h <= height).all() and (left + w <= width).all())
    area = h * w / (height * width)
    assert area.min() >= 0.08 - 2e-3 and area.max() <= 1.0 + 1e-9
    assert area.min() < 0.1 and area.max() > 0.9  # the whole range is used
    ratio = w / h
    # w and h are rounded to whole pixels, so the ratio may leave the bounds by about 1/h
    assert bool((ratio >= 0.75 * (1 - 1 / h) - 1e-9).all() and (ratio <= 4 / 3 * (1 + 1 / h) + 1e-9).all())
    assert len(set(map(tuple, boxes.tolist()))) > n * 0.9  # per-sample boxes, not one per batch


def test_crop_falls_back_to_central_crop_like_torchvision():
    # a 10x1000 strip cannot hold a square of 90% of its area: every try fails
    boxes = RandomResizedCrop(8, scale=(0.9, 1.0), ratio=(1.0, 1.0), generator=gen()).get_params(10, 1000, 5)
    assert boxes.tolist() == [[0, 495, 10, 10]] * 5


@pytest.mark.parametrize("size", [16, 48, (20, 28)])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.float64])
def test_crop_matches_per_sample_crop_and_interpolate(size, dtype):
    x = batch_u8(6, 37, 45)
    x = x if dtype == torch.uint8 else (x.to(dtype) / 255)
    boxes = RandomResizedCrop(size, scale=(0.05, 1.0), generator=gen(7)).get_params(37, 45, 6)
    out, _ = RandomResizedCrop(size, scale=(0.05, 1.0), generator=gen(7))(x, None)
    out_hw = (size, size) if isinstance(size, int) else size
    src = x.double() / 255 if dtype == torch.uint8 else x.double()
    for i, (top, left, h, w) in enumerate(boxes.tolist()):
        box = src[i : i + 1, :, top : top + h, left : left + w]
        ref = F.interpolate(box, size=out_hw, mode="bilinear", align_corners=False)
        torch.testing.assert_close(out[i : i + 1].double(), ref, atol=2e-5, rtol=0)


def test_crop_keeps_half_dtype():
    out, _ = RandomResizedCrop(8, generator=gen())(batch_f().to(torch.bfloat16), None)
    assert out.dtype == torch.bfloat16


# ----------------------------------------------------------------------------- ColorJitter


def test_color_jitter_zero_is_identity():
    x = batch_f()
    assert ColorJitter()(x, None)[0] is x
    assert ColorJitter(0, (1, 1), 0)(x, None)[0] is x


def test_color_jitter_fixed_factors_follow_the_formulas():
    x = batch_f()
    torch.testing.assert_close(ColorJitter(brightness=(1.5, 1.5))(x, None)[0], (x * 1.5).clamp(0, 1))
    mean = gray(x).mean(dim=(1, 2, 3), keepdim=True)
    torch.testing.assert_close(ColorJitter(contrast=(0.3, 0.3))(x, None)[0], (0.3 * x + 0.7 * mean).clamp(0, 1))
    torch.testing.assert_close(ColorJitter(saturation=(0.0, 0.0))(x, None)[0], gray(x).expand_as(x))
    torch.testing.assert_close(ColorJitter(saturation=(2.0, 2.0))(x, None)[0], (2 * x - gray(x)).clamp(0, 1))


def test_color_jitter_random_factors_per_sample_in_order():
    x = batch_f()
    f = ColorJitter(0.4, 0.5, 0.6, generator=gen(1)).get_params(8).view(3, 8, 1, 1, 1)
    lo, hi = torch.tensor([0.6, 0.5, 0.4]).view(3, 1, 1, 1, 1), torch.tensor([1.4, 1.5, 1.6]).view(3, 1, 1, 1, 1)
    assert bool(((f >= lo) & (f <= hi)).all()) and len(set(f[0].flatten().tolist())) == 8
    ref = (x * f[0]).clamp(0, 1)
    ref = (f[1] * ref + (1 - f[1]) * gray(ref).mean(dim=(1, 2, 3), keepdim=True)).clamp(0, 1)
    ref = (f[2] * ref + (1 - f[2]) * gray(ref)).clamp(0, 1)
    torch.testing.assert_close(ColorJitter(0.4, 0.5, 0.6, generator=gen(1))(x, None)[0], ref)


def test_color_jitter_uint8_clamps_to_255_and_stays_uint8():
    x = batch_u8()
    out, _ = ColorJitter(brightness=(1.3, 1.3))(x, None)
    assert out.dtype == torch.uint8
    ref = (x.float() * 1.3).clamp(0, 255)
    assert torch.equal(out, ref.round().to(torch.uint8))  # rounded once, not truncated
    assert int(out.max()) == 255 and not torch.equal(ref.round(), ref.floor())


def test_color_jitter_grayscale_images():
    x = batch_f()[:, :1]
    out, _ = ColorJitter(0.2, 0.3, 0.4, generator=gen())(x, None)
    assert out.shape == x.shape
    with pytest.raises(ValueError, match="1 or 3 channels"):
        ColorJitter(contrast=0.2)(torch.zeros(2, 4, 8, 8), None)


# ----------------------------------------------------------------------------- Mixup / CutMix


@pytest.mark.parametrize("x", [batch_u8(), batch_f()], ids=["uint8", "float"])
def test_mixup_mixes_images_and_labels_with_one_lambda(x):
    labels = torch.tensor([0, 1, 2, 3, 4, 0, 1, 2])
    lam = Mixup(alpha=0.4, num_classes=5, generator=gen(2)).get_params()
    assert 0.0 < lam < 1.0
    out, targets = Mixup(alpha=0.4, num_classes=5, generator=gen(2))(x, labels)
    ref = lam * x.double() + (1 - lam) * x.flip(0).double()
    atol = 0.5 + 1e-6 if x.dtype == torch.uint8 else 1e-6
    torch.testing.assert_close(out.double(), ref, atol=atol, rtol=0)
    one_hot = F.one_hot(labels, 5).float()
    torch.testing.assert_close(targets, lam * one_hot + (1 - lam) * one_hot.flip(0))
    torch.testing.assert_close(targets.sum(1), torch.ones(8))


def test_mixup_accepts_soft_targets_and_rejects_missing_labels():
    soft = torch.softmax(torch.randn(8, 5, generator=gen()), dim=1)
    _, targets = Mixup(num_classes=5, generator=gen())(batch_f(), soft)
    torch.testing.assert_close(targets.sum(1), torch.ones(8))
    for mix in (Mixup(num_classes=5), CutMix(num_classes=5)):
        with pytest.raises(ValueError, match="need labels"):
            mix(batch_f(), None)
        with pytest.raises(ValueError, match="labels must be int"):
            mix(batch_f(), torch.arange(7))


@pytest.mark.parametrize("alpha", [0.2, 1.0, 4.0])
def test_mixup_lambda_follows_beta(alpha):
    mix = Mixup(alpha=alpha, num_classes=2, generator=gen(5))
    lams = torch.tensor([mix.get_params() for _ in range(3000)], dtype=torch.float64)
    assert bool(((lams >= 0) & (lams <= 1)).all())
    assert abs(lams.mean().item() - 0.5) < 0.03
    assert abs(lams.var().item() - 1 / (4 * (2 * alpha + 1))) < 0.015


@pytest.mark.parametrize("x", [batch_u8(), batch_f()], ids=["uint8", "float"])
def test_cutmix_pastes_the_box_and_corrects_lambda(x):
    labels = torch.tensor([0, 1, 2, 3, 4, 0, 1, 2])
    lam, (y1, y2, x1, x2) = CutMix(num_classes=5, generator=gen(4)).get_params(32, 32)
    assert y2 > y1 and x2 > x1 and (y2 - y1) * (x2 - x1) < 32 * 32
    out, targets = CutMix(num_classes=5, generator=gen(4))(x, labels)
    assert out.dtype == x.dtype
    inside = torch.zeros(32, 32, dtype=torch.bool)
    inside[y1:y2, x1:x2] = True
    assert torch.equal(out[..., inside], x.flip(0)[..., inside])
    assert torch.equal(out[..., ~inside], x[..., ~inside])
    assert lam == pytest.approx(1 - (y2 - y1) * (x2 - x1) / 1024)
    one_hot = F.one_hot(labels, 5).float()
    torch.testing.assert_close(targets, lam * one_hot + (1 - lam) * one_hot.flip(0))
    torch.testing.assert_close(targets.sum(1), torch.ones(8))


# ----------------------------------------------------------------------------- Compose, reproducibility


def pipeline(seed: int) -> Compose:
    g = gen(seed)
    return Compose(
        [
            RandomResizedCrop(24, generator=g),
            RandomHorizontalFlip(generator=g),
            ColorJitter(0.4, 0.4, 0.4, generator=g),
            Normalize(MEAN, STD),
            Mixup(alpha=0.2, num_classes=10, generator=g),
        ]
    )


def test_seeded_pipeline_is_reproducible():
    x, labels = batch_u8(), torch.arange(8)
    a, la = pipeline(0)(x, labels)
    b, lb = pipeline(0)(x, labels)
    c, _ = pipeline(1)(x, labels)
    assert torch.equal(a, b) and torch.equal(la, lb)
    assert not torch.allclose(a, c)


def test_default_generator_follows_torch_manual_seed():
    x = batch_f()
    torch.manual_seed(123)
    a, _ = RandomResizedCrop(16)(x, None)
    torch.manual_seed(123)
    b, _ = RandomResizedCrop(16)(x, None)
    assert torch.equal(a, b)


def test_compose_threads_labels_through():
    x, labels = batch_u8(), torch.arange(8) % 3
    out, targets = Compose([RandomHorizontalFlip(generator=gen()), Mixup(num_classes=3, generator=gen())])(x, labels)
    assert tuple(targets.shape) == (8, 3) and targets.dtype == torch.float32
    out, same = Compose([ToFloat(), RandomHorizontalFlip(1.0)])(x, labels)
    assert same is labels and torch.equal(out, x.flip(-1).float() / 255)
    empty = Compose([])
    assert empty(x, labels)[0] is x and repr(empty) == "Compose([])"


def test_reprs_show_arguments():
    text = repr(pipeline(0))
    for part in (
        "RandomResizedCrop(size=(24, 24)",
        "scale=(0.08, 1.0)",
        "RandomHorizontalFlip(p=0.5",
        "ColorJitter(brightness=(0.6, 1.4)",
        "Normalize(mean=(0.485",
        "Mixup(alpha=0.2, num_classes=10",
    ):
        assert part in text
    assert repr(CutMix(num_classes=3)) == "CutMix(alpha=1.0, num_classes=3)"
    assert repr(ToFloat()) == "ToFloat(dtype=torch.float32, scale=True)"


# ----------------------------------------------------------------------------- argument validation


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: RandomHorizontalFlip(1.5), "probability"),
        (lambda: RandomHorizontalFlip(-0.1), "probability"),
        (lambda: RandomResizedCrop(0), "size"),
        (lambda: RandomResizedCrop((10, 20, 30)), "size"),
        (lambda: RandomResizedCrop(8, scale=(0.5, 0.1)), "scale"),
        (lambda: RandomResizedCrop(8, ratio=(0.0, 1.0)), "ratio"),
        (lambda: RandomResizedCrop(8, antialias=True), "antialias"),
        (lambda: Normalize((0.5, 0.5), (0.5,)), "equally long"),
        (lambda: Normalize((0.5,), (0.0,)), "std must be > 0"),
        (lambda: Normalize((0.5,), (0.5,), dtype=torch.int32), "floating"),
        (lambda: ToFloat(torch.uint8), "floating"),
        (lambda: ColorJitter(brightness=-0.1), "brightness"),
        (lambda: ColorJitter(contrast=(1.5, 0.5)), "contrast"),
        (lambda: Mixup(alpha=0.0, num_classes=3), "alpha"),
        (lambda: CutMix(num_classes=0), "num_classes"),
    ],
)
def test_bad_arguments_raise_value_error(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match=r"\[N, C, H, W\]"):
        RandomHorizontalFlip()(torch.zeros(3, 8, 8), None)
    with pytest.raises(TypeError, match="uint8 or floating"):
        Normalize(MEAN, STD)(torch.zeros(1, 3, 8, 8, dtype=torch.int32), None)
    with pytest.raises(TypeError, match="generator"):
        RandomHorizontalFlip(generator=123)
    with pytest.raises(TypeError, match="callables"):
        Compose([RandomHorizontalFlip(), "flip"])


# ----------------------------------------------------------------------------- CUDA


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_cpu_and_cuda_agree_with_the_same_seed(dtype):
    x = batch_u8(8, 40, 48) if dtype == torch.uint8 else batch_f(8, 40, 48)
    labels = torch.arange(8)
    cpu, cpu_t = pipeline(0)(x, labels)
    gpu, gpu_t = pipeline(0)(x.cuda(), labels.cuda())
    torch.testing.assert_close(gpu.cpu(), cpu, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(gpu_t.cpu(), cpu_t)
    cut_cpu, _ = CutMix(num_classes=8, generator=gen(1))(x, labels)
    cut_gpu, _ = CutMix(num_classes=8, generator=gen(1))(x.cuda(), labels.cuda())
    assert torch.equal(cut_gpu.cpu(), cut_cpu)


@pytest.mark.cuda
def test_cuda_pipeline_does_not_sync_with_the_host():
    x, labels = batch_u8().cuda(), torch.arange(8).cuda()
    t = Compose([pipeline(0), CutMix(num_classes=10, generator=gen())])
    t(x, labels)  # warm-up: per-device constants are cached with one blocking copy
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.cuda.stream(stream):
            out, targets = t(x, labels)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    stream.synchronize()
    assert math.isfinite(out.float().sum().item()) and tuple(targets.shape) == (8, 10)
