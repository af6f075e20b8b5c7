"""The per-image policies: their draws follow their definitions (chi-square), each image's result is
torchvision's op with the drawn argument, and draws are per image, seeded and resumable."""

from __future__ import annotations

import math

import numpy as np
import pytest
import timm.data.auto_augment as timm_aa  # the test set-up installs torchvision and timm (tools/setup.sh test)
import torch
from PIL import Image, ImageFilter
from scipy import stats
from torchvision.transforms.v2 import functional as TF

from fastdata.gpu_transforms import (
    AutoAugment,
    RandAugment,
    ThreeAugment,
    TimmRandAugment,
    TrivialAugmentWide,
    rand_augment,
)
from fastdata.gpu_transforms.plan import OP_NAMES, op_index

N = 10_000
ALPHA = 1e-4  # a correct sampler fails a test with this probability


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def chi_square_ok(observed: torch.Tensor, expected_p: torch.Tensor) -> bool:
    observed = observed.double()
    keep = expected_p > 0
    assert observed[~keep].sum() == 0, "a category with probability 0 was drawn"
    expected = expected_p[keep].double() / expected_p[keep].double().sum() * observed.sum()
    return stats.chisquare(observed[keep].numpy(), expected.numpy()).pvalue > ALPHA


def counts(op: torch.Tensor) -> torch.Tensor:
    """Counts of -1 (none) then each op of OP_NAMES."""
    return torch.bincount(op.flatten() + 1, minlength=len(OP_NAMES) + 1)


def images(n: int = 8, dtype: torch.dtype = torch.uint8, size: int = 20) -> torch.Tensor:
    g = gen(1)
    base = torch.linspace(0, 255, size * size).view(1, 1, size, size) * torch.rand(n, 3, 1, 1, generator=g)
    x = (base + 50 * torch.rand(n, 3, size, size, generator=g)).clamp(0, 255).to(torch.uint8)
    return x if dtype == torch.uint8 else x.float() / 255


POLICIES = {
    "rand": lambda g: RandAugment.from_config("rand-m9-mstd0.5-inc1", generator=g),
    "rand-tv": lambda g: RandAugment(2, 9, generator=g),
    "trivial": lambda g: TrivialAugmentWide(generator=g),
    "auto": lambda g: AutoAugment(generator=g),
    "three": lambda g: ThreeAugment(generator=g),
}


# ----------------------------------------------------------------------------- draws follow the definitions


def test_rand_augment_config_and_op_choice():
    ra = rand_augment("rand-m9-mstd0.5-inc1-n3-p0.7", generator=gen())
    assert isinstance(ra, TimmRandAugment) and isinstance(RandAugment.from_config("rand-m9"), TimmRandAugment)
    assert (ra.num_ops, ra.magnitude, ra.magnitude_std, ra.increasing, ra.prob) == (3, 9.0, 0.5, True, 0.7)
    assert RandAugment.from_config("rand-m7-mstd101").magnitude_std == math.inf
    with pytest.raises(ValueError, match="cannot read section"):
        RandAugment.from_config("rand-m9-x1")
    op, _ = ra.get_plan(N, 32, 32)
    expected = torch.zeros(len(OP_NAMES) + 1)
    expected[0] = 1 - ra.prob
    for name in (
        "autocontrast",
        "equalize",
        "invert",
        "rotate",
        "posterize",
        "solarize",
        "solarize_add",
        "color",
        "contrast",
        "brightness",
        "sharpness",
        "shear_x",
        "shear_y",
        "translate_x",
        "translate_y",
    ):
        expected[op_index(name) + 1] = ra.prob / 15
    for slot in op:
        assert chi_square_ok(counts(slot), expected)


def test_rand_augment_magnitudes_follow_the_clipped_normal():
    ra = TimmRandAugment(2, 9, 0.5, True, prob=1.0, generator=gen())
    op, arg = ra.get_plan(N, 32, 32)
    m = (arg[op == op_index("rotate")].abs() / 3.0).float()  # rotate: m / 10 * 30 degrees
    edges = torch.tensor([-math.inf, 8.0, 8.5, 8.75, 9.0, 9.25, 9.5, 10.0 - 1e-9, math.inf])
    observed = torch.histogram(m, bins=torch.tensor([0.0, 8.0, 8.5, 8.75, 9.0, 9.25, 9.5, 10.0 - 1e-9, 10.1]))[0]
    cdf = torch.tensor(stats.norm.cdf(edges.numpy(), 9, 0.5))
    assert chi_square_ok(observed, cdf[1:] - cdf[:-1])
    signs = (arg[op == op_index("rotate")] < 0).sum()
    assert abs(int(signs) / int((op == op_index("rotate")).sum()) - 0.5) < 0.05


@pytest.mark.parametrize("increasing", [False, True])
def test_rand_augment_arguments_equal_timms_level_functions(increasing, monkeypatch):
    aa = timm_aa
    for magnitude in (0, 3, 5.5, 9, 10):
        ra = TimmRandAugment(1, magnitude, 0.0, increasing, prob=1.0, generator=gen())
        op, arg = ra.get_plan(2000, 40, 50)
        for name in ra.op_names:
            level = aa.LEVEL_TO_ARG[name]
            expected = set()
            for coin in (0.0, 1.0):  # timm's _randomly_negate: keep, then negate
                monkeypatch.setattr(aa.random, "random", lambda: coin)  # noqa: B023 (called within this iteration)
                value = 0.0 if level is None else level(magnitude, {"translate_pct": 0.45})[0]
                value *= {"TranslateXRel": 50, "TranslateYRel": 40}.get(name, 1)
                expected.add(round(float(value), 9))
            chosen = op == op_index(_plan_name(name))
            got = {round(v, 9) for v in arg[chosen].tolist()}
            assert got == expected or (got <= expected and len(got) == 1 and magnitude == 0), (name, magnitude, got)


def _plan_name(timm_name: str) -> str:
    from fastdata.gpu_transforms.policy_tables import _TIMM_OPS

    return _TIMM_OPS[timm_name][0]


def test_trivial_augment_op_and_bin_are_uniform():
    ta = TrivialAugmentWide(generator=gen())
    op, arg = ta.get_plan(N, 32, 32)
    expected = torch.zeros(len(OP_NAMES) + 1)
    for name in ta.OPS:
        expected[op_index(name) + 1] = 1
    assert chi_square_ok(counts(op), expected)
    rotate = arg[op == op_index("rotate")]
    bins = (rotate.abs() / (135.0 / 30)).round().long()
    assert chi_square_ok(torch.bincount(bins, minlength=31), torch.ones(31))
    assert stats.binomtest(int((rotate < 0).sum()), rotate.numel()).pvalue > ALPHA
    # every posterize / solarize argument is one of torchvision's bins
    assert set(arg[op == op_index("posterize")].tolist()) <= {8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0}
    assert set(arg[op == op_index("solarize")].tolist()) <= set((torch.linspace(1, 0, 31).double() * 255).tolist())


def test_auto_augment_follows_the_imagenet_policy_table():
    aa = AutoAugment(generator=gen())
    op, arg = aa.get_plan(N, 32, 32)
    for slot in range(2):
        expected = torch.zeros(len(OP_NAMES) + 1)
        for pair in aa.POLICY:
            name, p, _ = pair[slot]
            expected[op_index(name) + 1] += p / len(aa.POLICY)
            expected[0] += (1 - p) / len(aa.POLICY)
        assert chi_square_ok(counts(op[slot]), expected)
    rotate = arg[op == op_index("rotate")].abs()
    assert set(rotate.tolist()) <= {float(torch.linspace(0, 30, 10)[b]) for b in (3, 8, 9)}


def test_three_augment_picks_one_of_three():
    op, arg = ThreeAugment(generator=gen()).get_plan(N, 32, 32)
    expected = torch.zeros(len(OP_NAMES) + 1)
    for name in ThreeAugment.OPS:
        expected[op_index(name) + 1] = 1
    assert chi_square_ok(counts(op[0]), expected)
    jitter = torch.zeros(len(OP_NAMES) + 1)
    for name in ("brightness", "contrast", "color"):
        jitter[op_index(name) + 1] = 1
    for slot in (1, 2, 3):  # the colour jitter, in a random order per image, factors uniform in [0.7, 1.3]
        assert chi_square_ok(counts(op[slot]), jitter)
        assert chi_square_ok(torch.histogram(arg[slot].float(), bins=6, range=(0.7, 1.3))[0], torch.ones(6))
    assert (op[1:].sort(dim=0).values == op[1:, :1].sort(dim=0).values).all()  # each op once per image
    sigma = arg[0][op[0] == op_index("pil_gaussian_blur")]
    assert chi_square_ok(torch.histogram(sigma.float(), bins=10, range=(0.1, 2.0))[0], torch.ones(10))


# ----------------------------------------------------------------------------- each image is torchvision's op


def _torchvision_op(img: torch.Tensor, name: str, arg: float, interpolation, fill):
    if name in ("identity",) or name is None:
        return img
    geometric = dict(interpolation=interpolation, fill=fill)
    if name == "rotate":
        return TF.rotate(img, arg, **geometric)
    if name in ("shear_x", "shear_y"):
        shear = [math.degrees(math.atan(arg)), 0.0] if name == "shear_x" else [0.0, math.degrees(math.atan(arg))]
        return TF.affine(img, angle=0.0, translate=[0, 0], scale=1.0, shear=shear, center=[0, 0], **geometric)
    if name in ("translate_x", "translate_y"):
        t = [arg, 0.0] if name == "translate_x" else [0.0, arg]  # TrivialAugment/AutoAugment draw whole pixels
        return TF.affine(img, angle=0.0, translate=t, scale=1.0, shear=[0.0, 0.0], **geometric)
    unit = 255.0 if img.dtype == torch.uint8 else 1.0
    simple = {
        "brightness": TF.adjust_brightness,
        "color": TF.adjust_saturation,
        "contrast": TF.adjust_contrast,
        "sharpness": TF.adjust_sharpness,
    }
    if name in simple:
        return simple[name](img, arg)
    if name == "posterize":
        return TF.posterize(img, int(arg))
    if name == "solarize":
        return TF.solarize(img, arg / 255 * unit) if arg / 255 * unit <= unit else img
    if name == "grayscale":
        return TF.rgb_to_grayscale(img, 3)
    if name == "pil_grayscale":  # DeiT III's grayscale: PIL's convert("L"), back to 3 channels
        u8 = img if img.dtype == torch.uint8 else (img * 255).round().to(torch.uint8)
        luma = np.array(Image.fromarray(u8.permute(1, 2, 0).numpy().copy()).convert("L"))
        out = torch.from_numpy(np.repeat(luma[None], 3, axis=0))
        return out if img.dtype == torch.uint8 else out.float() / 255
    if name == "gaussian_blur":
        return TF.gaussian_blur(img, [9, 9], [arg, arg])
    if name == "pil_gaussian_blur":  # DeiT III's blur: PIL's GaussianBlur(radius)
        u8 = img if img.dtype == torch.uint8 else (img * 255).round().to(torch.uint8)
        out = torch.from_numpy(
            np.array(Image.fromarray(u8.permute(1, 2, 0).numpy().copy()).filter(ImageFilter.GaussianBlur(arg)))
        ).permute(2, 0, 1)
        return out if img.dtype == torch.uint8 else out.float() / 255
    return getattr(TF, name)(img)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("policy", ["trivial", "auto", "three", "rand", "rand-tv"])
def test_each_image_is_torchvisions_ops_with_its_draw(policy, dtype):
    make = POLICIES[policy]
    x = images(64, dtype)
    out, _ = make(gen(3))(x, None)
    op, arg = make(gen(3)).get_plan(*x.shape[:1], *x.shape[2:])
    t = make(gen(0))
    interpolation = TF.InterpolationMode(t.interpolation)
    fill = None if t.fill is None else [f * (1 if dtype == torch.uint8 else 1 / 255) for f in t.fill]
    ref = []
    for i, img in enumerate(x):
        for slot in range(op.shape[0]):
            k = int(op[slot, i])
            if k >= 0 and OP_NAMES[k] == "solarize_add":
                lut = torch.tensor([min(255, v + int(arg[slot, i])) if v < 128 else v for v in range(256)])
                img = lut[(img * (1 if dtype == torch.uint8 else 255)).round().long()].to(dtype)
                img = img if dtype == torch.uint8 else img / 255
            elif k >= 0:
                img = _torchvision_op(img, OP_NAMES[k], float(arg[slot, i]), interpolation, fill)
        ref.append(img)
    ref = torch.stack(ref)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    diff = (out.double() - ref.double()).abs() * (1 if dtype == torch.uint8 else 255)
    per_image = diff.flatten(1).mean(1)
    assert per_image.max() <= 1.0, per_image.max()


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_three_augments_grayscale_is_pils_convert_l(dtype):
    """DeiT III converts with PIL (``RandomGrayscale`` on PIL images): every pixel is Pillow's luma, not
    torchvision's tensor kernel (0.2989 weights, truncated: one level off on most pixels)."""
    from fastdata.gpu_transforms import ops

    x = images(16, dtype)
    got = ops.pil_grayscale(x)
    for i in range(len(x)):
        u8 = x[i] if dtype == torch.uint8 else (x[i] * 255).round().to(torch.uint8)
        luma = torch.from_numpy(np.array(Image.fromarray(u8.permute(1, 2, 0).numpy().copy()).convert("L")))
        want = luma.expand(3, -1, -1)
        assert torch.equal(got[i], want if dtype == torch.uint8 else want.float() / 255), i
    torchvision_kernel = ops.grayscale(x)
    assert not torch.equal(torchvision_kernel, got)  # the two kernels do differ on these images
    assert torch.equal(ops.pil_grayscale(x[:, :1]), x[:, :1])  # one channel: unchanged


def test_three_augment_blurs_as_deit_iii():
    # DeiT III's GaussianBlur is PIL's ImageFilter.GaussianBlur(radius ~ U(0.1, 2)): each blurred image is PIL's bytes
    three = ThreeAugment(color_jitter=0.0, generator=gen(7))
    x = images(48, size=40)
    op, arg = ThreeAugment(color_jitter=0.0, generator=gen(7)).get_plan(48, 40, 40)
    out, _ = three(x, None)
    blurred = (op[0] == op_index("pil_gaussian_blur")).nonzero().flatten().tolist()
    assert len(blurred) >= 8
    for i in blurred:
        ref = _torchvision_op(x[i], "pil_gaussian_blur", float(arg[0, i]), None, None)
        assert torch.equal(out[i], ref), (i, float(arg[0, i]), int((out[i].int() - ref.int()).abs().max()))


# ----------------------------------------------------------------------------- per image, seeded, resumable


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_identical_images_come_out_differently(policy):
    x = images(1).expand(32, -1, -1, -1).contiguous()
    out, _ = POLICIES[policy](gen())(x, None)
    assert len({bytes(img.numpy()) for img in out}) >= 8


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_same_seed_same_batch_and_resume_mid_pass(policy):
    x = images(16)
    a, b = POLICIES[policy](gen(5)), POLICIES[policy](gen(5))
    run = [a(x, None)[0] for _ in range(5)]
    assert all(torch.equal(p, q) for p, q in zip(run, [b(x, None)[0] for _ in range(5)], strict=False))
    assert not torch.equal(run[0], POLICIES[policy](gen(6))(x, None)[0])
    # resume after batch 2: a fresh policy whose generator is restored from the state saved then
    g = gen(5)
    first = POLICIES[policy](g)
    for _ in range(2):
        first(x, None)
    state = g.get_state()
    g2 = torch.Generator()
    g2.set_state(state)
    resumed = POLICIES[policy](g2)
    assert all(torch.equal(resumed(x, None)[0], expected) for expected in run[2:])


def test_labels_pass_through_and_float_stays_in_range():
    x = images(16, torch.float32)
    labels = torch.arange(16)
    for make in POLICIES.values():
        out, same = make(gen())(x, labels)
        assert same is labels and out.dtype == torch.float32 and out.min() >= 0 and out.max() <= 1


@pytest.mark.cuda
def test_cuda_matches_cpu_with_the_same_seed():
    x = images(16)
    for make in POLICIES.values():
        cpu, _ = make(gen())(x, None)
        cuda, _ = make(gen())(x.cuda(), None)
        assert (cuda.cpu().double() - cpu.double()).abs().mean() <= 0.5


@pytest.mark.cuda
def test_cuda_policies_do_not_sync_with_the_host():
    from fastdata.gpu_transforms import Compose, MixupCutmix, RandomErasing, ToFloat

    x, labels = images(16).cuda(), torch.arange(16).cuda()
    for make in POLICIES.values():
        t = Compose(
            [
                make(gen()),
                ToFloat(),
                RandomErasing(0.5, mode="pixel", generator=gen()),
                MixupCutmix(0.8, 1.0, mode="elem", num_classes=16, generator=gen()),
            ]
        )
        t(x, labels)  # warm-up
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            out, targets = t(x, labels)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert out.shape == x.shape and tuple(targets.shape) == (16, 16)
