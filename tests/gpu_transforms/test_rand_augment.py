"""``RandAugment(num_ops, magnitude)`` is torchvision's RandAugment: the same 14 ops (Identity included), the same
magnitude bins and signs, ``num_ops`` ops on every image, each op's output torchvision's; compared op by op with
``torchvision.transforms.v2.RandAugment`` itself and, for the draws, by chi-square on the same inputs."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from scipy import stats
from torchvision.transforms import v2  # the test set-up installs torchvision (tools/setup.sh test)

from fastdata.gpu_transforms import RandAugment, TimmRandAugment
from fastdata.gpu_transforms.plan import GEOMETRIC, OP_NAMES

ALPHA = 1e-4
# torchvision's op names -> fastdata's plan ops
TV_OPS = {
    "Identity": "identity",
    "ShearX": "shear_x",
    "ShearY": "shear_y",
    "TranslateX": "translate_x",
    "TranslateY": "translate_y",
    "Rotate": "rotate",
    "Brightness": "brightness",
    "Color": "color",
    "Contrast": "contrast",
    "Sharpness": "sharpness",
    "Posterize": "posterize",
    "Solarize": "solarize",
    "AutoContrast": "autocontrast",
    "Equalize": "equalize",
}


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def images(n: int, size: int = 20) -> torch.Tensor:
    g = gen(1)
    base = torch.linspace(0, 255, size * size).view(1, 1, size, size) * torch.rand(n, 3, 1, 1, generator=g)
    return (base + 50 * torch.rand(n, 3, size, size, generator=g)).clamp(0, 255).to(torch.uint8)


def plan_arg(tv_name: str, magnitude: float) -> float:
    """torchvision's magnitude of op ``tv_name`` as the plan's argument (what its _apply_image_or_video_transform
    hands to the functional op)."""
    if tv_name in ("Brightness", "Color", "Contrast", "Sharpness"):
        return 1.0 + magnitude
    if tv_name in ("TranslateX", "TranslateY", "Posterize"):
        return float(int(magnitude))
    if tv_name == "Solarize":
        return 255 * magnitude
    return magnitude


def tv_magnitudes(num_bins: int, magnitude: int, height: int, width: int) -> dict[str, set[float]]:
    """Every (signed) magnitude torchvision's RandAugment can give each op, read from its own table."""
    out = {}
    for name, (fn, is_signed) in v2.RandAugment._AUGMENTATION_SPACE.items():
        bins = fn(num_bins, height, width)
        m = 0.0 if bins is None else float(bins[magnitude])
        out[name] = {m, -m} if is_signed and bins is not None else {m}
    return out


@pytest.mark.parametrize("num_ops,magnitude,num_bins", [(2, 9, 31), (3, 0, 31), (1, 30, 31), (2, 5, 11)])
def test_op_set_and_magnitudes_are_torchvisions(num_ops, magnitude, num_bins):
    h, w = 37, 53
    ra = RandAugment(num_ops, magnitude, num_bins, generator=gen())
    op, arg = ra.get_plan(20_000, h, w)
    assert op.shape == (num_ops, 20_000) and bool((op >= 0).all())  # num_ops ops on every image, none skipped
    assert set(TV_OPS) == set(v2.RandAugment._AUGMENTATION_SPACE)
    expected = {
        (TV_OPS[name], round(plan_arg(name, m), 9))
        for name, ms in tv_magnitudes(num_bins, magnitude, h, w).items()
        for m in ms
    }
    got = {(OP_NAMES[int(o)], round(float(a), 9)) for o, a in zip(op.flatten(), arg.flatten(), strict=False)}
    assert got == expected
    if (num_ops, magnitude) == (2, 9):  # the numbers the docstring gives
        rotate = {a for name, a in got if name == "rotate"}
        assert rotate == {9.0, -9.0}


def _tv_apply(img: torch.Tensor, name: str, magnitude: float, interpolation: str, fill) -> torch.Tensor:
    tv = v2.RandAugment(interpolation=v2.InterpolationMode(interpolation), fill=fill)
    return tv._apply_image_or_video_transform(img, name, magnitude, interpolation=tv.interpolation, fill=tv._fill)


@pytest.mark.parametrize("interpolation,fill", [("nearest", None), ("bilinear", [124, 116, 104])])
def test_each_op_is_torchvisions_op_with_its_magnitude(interpolation, fill):
    # one op per image so each op is compared alone: colour and histogram ops bit-exact on uint8, the geometric
    # ops within one grey level on average (the tolerances of tests/gpu_transforms/test_ops.py)
    x = images(400)
    ra = RandAugment(1, 9, interpolation=interpolation, fill=fill, generator=gen(3))
    out, _ = ra(x, None)
    op, arg = RandAugment(1, 9, interpolation=interpolation, fill=fill, generator=gen(3)).get_plan(400, 20, 20)
    signed = {name: ms for name, ms in tv_magnitudes(31, 9, 20, 20).items()}
    back = {plan: tv for tv, plan in TV_OPS.items()}
    seen = Counter()
    for i, img in enumerate(x):
        name = back[OP_NAMES[int(op[0, i])]]
        magnitude = next(m for m in signed[name] if round(plan_arg(name, m), 9) == round(float(arg[0, i]), 9))
        ref = _tv_apply(img, name, magnitude, interpolation, fill)
        seen[name] += 1
        if TV_OPS[name] in GEOMETRIC:
            assert (out[i].double() - ref.double()).abs().mean() <= 1.0, (name, magnitude)
        else:
            assert torch.equal(out[i], ref), (name, magnitude)
    assert set(seen) == set(TV_OPS)


def test_ops_per_image_follow_torchvisions_draws_by_chi_square(monkeypatch):
    # torchvision's RandAugment(2, 9) run on the same inputs, each op it applies recorded (name and sign); the
    # counts of fastdata's draws and of torchvision's come from one distribution, and both apply 2 ops to each image
    n = 3000
    x = images(n, size=8)
    tv = v2.RandAugment(2, 9)
    calls = []
    real = tv._apply_image_or_video_transform
    monkeypatch.setattr(
        tv,
        "_apply_image_or_video_transform",
        lambda img, name, m, **kw: (calls.append((name, math.copysign(1.0, m))), real(img, name, m, **kw))[1],
    )
    torch.manual_seed(0)
    per_image = []
    for img in x:
        before = len(calls)
        tv(img)
        per_image.append(len(calls) - before)
    assert set(per_image) == {2}
    tv_counts = Counter((TV_OPS[name], sign) for name, sign in calls)

    op, arg = RandAugment(2, 9, generator=gen(5)).get_plan(n, 8, 8)
    assert bool((op >= 0).all())  # 2 applied ops per image: no slot left empty
    ours = Counter()
    for o, a in zip(op.flatten().tolist(), arg.flatten().tolist(), strict=False):
        name = OP_NAMES[o]
        neutral = 1.0 if name in ("brightness", "color", "contrast", "sharpness") else 0.0
        ours[(name, math.copysign(1.0, a - neutral) if a != neutral else 1.0)] += 1
    categories = sorted(set(tv_counts) | set(ours))
    table = [[ours[c] for c in categories], [tv_counts[c] for c in categories]]
    assert len(categories) == 14 + 9  # 9 signed ops drawn with both signs
    assert stats.chi2_contingency(table).pvalue > ALPHA


def test_timm_behaviour_stays_behind_its_config():
    timm = RandAugment.from_config("rand-m9-mstd0.5-inc1", generator=gen())
    assert isinstance(timm, TimmRandAugment) and timm.prob == 0.5 and {"Invert", "SolarizeAdd"} <= set(timm.op_names)
    op, _ = timm.get_plan(10_000, 8, 8)
    applied = (op >= 0).sum(0).double().mean()
    assert 0.9 < applied < 1.1  # timm: about one op per image at p=0.5


def test_bad_arguments_name_the_fix():
    with pytest.raises(ValueError, match="magnitude must be an int bin in 0..30"):
        RandAugment(2, 31)
    with pytest.raises(ValueError, match="TimmRandAugment"):
        RandAugment(2, 9, 0.5)  # timm's magnitude_std where torchvision has num_magnitude_bins
    with pytest.raises(ValueError, match="num_ops"):
        RandAugment(-1)
    assert RandAugment(0, generator=gen())(images(2), None)[0].equal(images(2))  # num_ops=0: unchanged, as torchvision
