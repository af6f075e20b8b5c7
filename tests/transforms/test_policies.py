"""The decode-time policies: every entry at every magnitude gives the reference's op (torchvision v2 on a uint8 tensor,
timm's PIL op) within one level on the same crop, and the per-image draws follow the references' own draws
(chi-square and Kolmogorov-Smirnov two-sample tests against draws recorded from torchvision and timm)."""

from __future__ import annotations

import collections
import math
import random

import numpy as np
import pytest
import timm.data.auto_augment as timm_aa  # the test set-up installs torchvision and timm (tools/setup.sh test)
import torch
from PIL import Image
from scipy import stats
from torchvision.transforms import v2

from fastdata.transforms import (
    AutoAugment,
    ColorJitter,
    RandAugment,
    RandomErasing,
    RandomHorizontalFlip,
    ThreeAugment,
    TimmRandAugment,
    TrivialAugmentWide,
)
from fastdata.transforms.policy_tables import (
    GEOMETRIC,
    TIMM_OPS,
    TV_AUTOAUGMENT,
    TV_RANDAUGMENT,
    TV_TRIVIAL_WIDE,
    apply_op,
    tv_arg,
)
from tests.transforms.test_uint8_ops import IMAGES, diff, interior, rotation, ties

ALPHA = 1e-4  # a correct sampler fails a test with this probability
FILL = (124, 116, 104)


def coefficients(op: str, arg: float, height: int, width: int) -> tuple:
    """PIL's affine coefficients of a geometric op (for the interior and tie masks)."""
    return {
        "shear_x": (1, arg, 0, 0, 1, 0),
        "shear_y": (1, 0, 0, arg, 1, 0),
        "translate_x": (1, 0, arg, 0, 1, 0),
        "translate_y": (1, 0, 0, 0, 1, arg),
    }.get(op) or rotation(arg, width, height)


def agree(ours: np.ndarray, ref: np.ndarray, op: str, arg: float, interpolation: str) -> bool:
    """Within one level: everywhere for colour ops; inside the image (ties aside for nearest) for geometric ones."""
    d = diff(ours, ref).max(axis=2)
    if op in GEOMETRIC:
        h, w = ours.shape[:2]
        coeffs = coefficients(op, arg, h, w)
        mask = interior(coeffs, h, w) & (~ties(coeffs, h, w) if interpolation == "nearest" else True)
        d = d[mask]
    return d.size == 0 or int(d.max()) <= 1


# ------------------------------------------------------------------------- each entry and magnitude, same crop


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
@pytest.mark.parametrize("space", ["randaugment", "trivialaugmentwide", "autoaugment"])
def test_torchvision_entries_match_torchvisions_op_at_every_magnitude(space, interpolation):
    table, reference, bins = {
        "randaugment": (TV_RANDAUGMENT, v2.RandAugment, 31),
        "trivialaugmentwide": (TV_TRIVIAL_WIDE, v2.TrivialAugmentWide, 31),
        "autoaugment": (TV_AUTOAUGMENT, v2.AutoAugment, 10),
    }[space]
    ref = reference(interpolation=interpolation, fill=list(FILL))
    for name, (op, magnitudes, signed) in table.items():
        for k, image in enumerate(IMAGES[:3]):  # every bin on one crop, the first, middle and last on two more
            h, w = image.shape[:2]
            values = [0.0] if magnitudes is None else magnitudes(bins, h, w)
            for magnitude in sorted(set(values if k == 0 else (values[0], values[len(values) // 2], values[-1]))):
                for sign in (1, -1) if signed else (1,):
                    m = sign * float(magnitude)
                    tensor = torch.from_numpy(image).permute(2, 0, 1).contiguous()
                    expected = (
                        ref._apply_image_or_video_transform(
                            tensor, name, m, interpolation=interpolation, fill=ref._fill
                        )
                        .permute(1, 2, 0)
                        .numpy()
                    )
                    arg = tv_arg(op, m)
                    ours = apply_op(image.copy(), op, arg, flavour="tv", interpolation=interpolation, fill=FILL)
                    assert agree(ours, expected, op, arg, interpolation), (name, m)


def timm_level(name: str, magnitude: float, negate: bool, monkeypatch) -> tuple:
    """timm's own level arguments for ``name`` at ``magnitude``, its sign coin forced."""
    monkeypatch.setattr(timm_aa.random, "random", lambda: 0.9 if negate else 0.1)
    level = timm_aa.LEVEL_TO_ARG[name]
    return () if level is None else level(magnitude, {"translate_const": 100, "translate_pct": 0.45})


TIMM_CASES = [
    (name, resample)
    for name in sorted(TIMM_OPS)
    if name != "GaussianBlurRand"
    for resample in (("nearest", "bilinear", "bicubic") if TIMM_OPS[name][0] in GEOMETRIC else ("bilinear",))
]


@pytest.mark.parametrize("name, resample", TIMM_CASES)
def test_timm_ops_match_timms_pil_op_at_every_magnitude(name, resample, monkeypatch):
    op, level = TIMM_OPS[name]
    hparams = {"translate_const": 100, "translate_pct": 0.45}
    pil_resample = {"nearest": Image.NEAREST, "bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}[resample]
    for magnitude in (0.0, 2.5, 5.0, 7.3, 9.0, 10.0):
        for negate in (False, True):
            args = timm_level(name, magnitude, negate, monkeypatch)
            arg = 0.0 if level is None else float(level(magnitude, hparams, negate))
            for image in IMAGES[:3]:
                h, w = image.shape[:2]
                ours_arg = arg * (w if name == "TranslateXRel" else h if name == "TranslateYRel" else 1)
                if op == "posterize" and ours_arg <= 0:  # Pillow >= 10 refuses 0 bits; older Pillow (and we) give black
                    assert not apply_op(
                        image.copy(), op, ours_arg, flavour="pil", interpolation=resample, fill=FILL
                    ).any()
                    continue
                expected = np.asarray(
                    timm_aa.NAME_TO_OP[name](Image.fromarray(image), *args, fillcolor=FILL, resample=pil_resample)
                )
                ours = apply_op(image.copy(), op, ours_arg, flavour="pil", interpolation=resample, fill=FILL)
                assert agree(ours, expected, op, ours_arg, resample), (name, magnitude, negate)


# ---------------------------------------------------------------------------------------- draw distributions


def same_distribution(a: list, b: list) -> bool:
    """Two samples of a categorical variable: chi-square test of homogeneity."""
    keys = sorted(set(a) | set(b), key=repr)
    ca, cb = collections.Counter(a), collections.Counter(b)
    table = np.array([[ca[k] for k in keys], [cb[k] for k in keys]])
    if table.shape[1] < 2:
        return True
    return stats.chi2_contingency(table).pvalue > ALPHA


def same_continuous(a: list[float], b: list[float]) -> bool:
    return stats.ks_2samp(a, b).pvalue > ALPHA


def record_torchvision(policy, n: int, size=(3, 12, 16)) -> list[list[tuple[str, float]]]:
    """The (entry, signed magnitude) lists torchvision's own policy draws, image by image."""
    drawn: list[list[tuple[str, float]]] = []
    image = torch.zeros(size, dtype=torch.uint8)

    def record(img, transform_id, magnitude, **_):
        drawn[-1].append((transform_id, round(magnitude, 4)))
        return img

    policy._apply_image_or_video_transform = record
    torch.manual_seed(0)
    for _ in range(n):
        drawn.append([])
        policy(image)
    return drawn


def record_ours(policy, n: int, height: int = 12, width: int = 16) -> list[list[tuple[str, float]]]:
    rng = np.random.Generator(np.random.Philox(key=3))
    return [[(name, round(m, 4)) for name, m in policy.draw(rng, height, width)] for _ in range(n)]


@pytest.mark.parametrize(
    "make",
    [
        lambda: (RandAugment(2, 9), v2.RandAugment(2, 9)),
        lambda: (RandAugment(3, 30, num_magnitude_bins=31), v2.RandAugment(3, 30)),
        lambda: (TrivialAugmentWide(), v2.TrivialAugmentWide()),
        lambda: (AutoAugment(), v2.AutoAugment()),
    ],
    ids=["ra-2-9", "ra-3-30", "trivial", "auto"],
)
def test_torchvision_policies_draw_what_torchvision_draws(make):
    ours, theirs = make()
    n = 6000
    a, b = record_ours(ours, n), record_torchvision(theirs, n)
    assert same_distribution([len(x) for x in a], [len(x) for x in b])  # ops per image (AutoAugment's coins)
    assert same_distribution([e for x in a for e in x], [e for x in b for e in x])  # entry and signed magnitude
    assert same_distribution([tuple(e[0] for e in x) for x in a], [tuple(e[0] for e in x) for x in b])


def record_timm(config: str, n: int, size=(16, 12)) -> list[list[tuple[str, float, str]]]:
    """(op, argument, interpolation) lists timm's own RandAugment draws, image by image (ops recorded, not run)."""
    drawn: list[list[tuple]] = []

    effective = {
        "Desaturate": lambda a: min(1.0, max(0.0, 1.0 - a)),  # what timm's op does with its argument
        "GaussianBlurRand": lambda a: random.uniform(0.1, 2.0 * a),
    }

    def recorder(name):
        op = TIMM_OPS[name][0]

        def fn(img, *args, **kwargs):
            resample = timm_aa._interpolation(dict(kwargs)) if op in GEOMETRIC else None  # timm's draw, per op
            interpolation = {Image.BILINEAR: "bilinear", Image.BICUBIC: "bicubic"}.get(resample, "-")
            arg = effective.get(name, float)(float(args[0])) if args else 0.0
            drawn[-1].append((op, arg, interpolation))
            return img

        return fn

    ops = {name: recorder(name) for name in timm_aa.NAME_TO_OP}
    saved = dict(timm_aa.NAME_TO_OP)
    try:
        timm_aa.NAME_TO_OP.update(ops)
        policy = timm_aa.rand_augment_transform(config, dict(translate_const=100, img_mean=FILL))
    finally:
        timm_aa.NAME_TO_OP.update(saved)
    random.seed(0)
    np.random.seed(0)
    image = Image.new("RGB", size)
    for _ in range(n):
        drawn.append([])
        policy(image)
    for ops_ in drawn:  # timm's TranslateXRel/YRel record the fraction: ours records pixels
        ops_[:] = [
            (op, arg * (size[0] if op == "translate_x" else size[1]) if op.startswith("translate") else arg, interp)
            for op, arg, interp in ops_
        ]
    return drawn


@pytest.mark.parametrize(
    "config",
    ["rand-m9-mstd0.5-inc1", "rand-m7-n3-mstd101", "rand-m10-p0.8-mmax15", "rand-m9-n3-tweights", "rand-m9-n2-t3a"],
)
def test_timm_rand_augment_draws_what_timm_draws(config):
    n = 6000
    ours = TimmRandAugment.from_config(config)
    rng = np.random.Generator(np.random.Philox(key=5))
    a = [ours.draw(rng, 12, 16) for _ in range(n)]
    b = record_timm(config, n)
    assert same_distribution([len(x) for x in a], [len(x) for x in b])  # applied ops per image (the p coin)
    assert same_distribution([e[0] for x in a for e in x], [e[0] for x in b for e in x])  # which op
    assert same_distribution(
        [(e[0], e[2]) for x in a for e in x if e[0] in GEOMETRIC],
        [(e[0], e[2]) for x in b for e in x if e[0] in GEOMETRIC],
    )  # random interpolation
    for op in {e[0] for x in b for e in x}:  # each op's argument (magnitude noise, clip, sign coin, level map)
        arg_a = [e[1] for x in a for e in x if e[0] == op]
        arg_b = [e[1] for x in b for e in x if e[0] == op]
        discrete = op in ("posterize", "solarize", "solarize_add") or len(set(arg_b)) < 10
        assert same_distribution(arg_a, arg_b) if discrete else same_continuous(arg_a, arg_b), op


def test_timm_config_sections_and_errors():
    ra = RandAugment.from_config("rand-m9-mstd0.5-inc1-n3-p0.7-mmax12")
    assert isinstance(ra, TimmRandAugment)
    assert (ra.num_ops, ra.magnitude, ra.magnitude_std, ra.increasing, ra.prob, ra.magnitude_max) == (
        3,
        9.0,
        0.5,
        True,
        0.7,
        12.0,
    )
    assert "PosterizeIncreasing" in ra.op_names and "Posterize" not in ra.op_names
    assert RandAugment.from_config("rand-m7-mstd101").magnitude_std == math.inf
    assert RandAugment.from_config("rand-m9-tweights").weights is not None
    for bad in ("rand-m9-x1", "auto-m9", "rand-mx", "rand-m9-tnope"):
        with pytest.raises(ValueError):
            RandAugment.from_config(bad)


def test_random_erasing_draws_timms_boxes():
    from timm.data.random_erasing import RandomErasing as TimmErasing

    n, (h, w) = 4000, (40, 56)
    ours = RandomErasing(0.6, max_count=3, min_aspect=0.4)
    rng = np.random.Generator(np.random.Philox(key=9))
    a = [ours.boxes(h, w, rng) for _ in range(n)]
    theirs = TimmErasing(0.6, max_count=3, min_aspect=0.4, device="cpu")
    random.seed(0)
    b = []
    for _ in range(n):
        image = torch.ones(3, h, w) + torch.arange(h * w, dtype=torch.float32).view(1, h, w)  # distinct values
        before = image.clone()
        theirs(image)
        erased = (image != before).any(dim=0).numpy()
        ys, xs = np.nonzero(erased)
        b.append([] if not len(ys) else [(ys.min(), xs.min(), ys.max() - ys.min() + 1, xs.max() - xs.min() + 1)])
    assert same_distribution([len(x) > 0 for x in a], [len(x) > 0 for x in b])  # erased or not
    single_a = [x[0] for x in a if len(x) == 1]  # a lone box (timm's union of overlapping boxes is not one box)
    single_b = [x[0] for x in b if len(x) == 1]
    one_box = RandomErasing(1.0)
    lone = [one_box.boxes(h, w, rng)[0] for _ in range(n)]
    timm_one = TimmErasing(1.0, device="cpu")
    lone_b = []
    for _ in range(n):
        image = torch.zeros(3, h, w) + 5
        timm_one(image)
        ys, xs = np.nonzero((image != 5).any(dim=0).numpy())
        lone_b.append((ys.min(), xs.min(), ys.max() - ys.min() + 1, xs.max() - xs.min() + 1))
    for k in range(4):  # top, left, height, width of single boxes
        assert same_continuous([x[k] for x in lone], [x[k] for x in lone_b]), k
    assert single_a and single_b


def test_random_erasing_modes_normalize_to_timms_values():
    image = np.full((32, 32, 3), 50, np.uint8)
    const = RandomErasing(1.0, mode="const").apply(image.copy(), np.random.default_rng(0))
    assert {tuple(v) for v in const.reshape(-1, 3)} >= {(124, 116, 104)}
    pixel = RandomErasing(1.0, mode="pixel", min_area=0.5, max_area=0.9)
    rng = np.random.Generator(np.random.Philox(key=1))
    values = []
    for _ in range(50):
        out = pixel.apply(image.copy(), rng)
        changed = (out != 50).any(axis=2)
        values.append(out[changed].astype(np.float64))
    z = (np.concatenate(values) / 255 - np.array(pixel.mean)) / np.array(pixel.std)
    for c in range(3):  # inside the uint8 range of every channel (|z| < 1.7) the draws are N(0, 1)
        zc = z[:, c][np.abs(z[:, c]) < 1.7][:5000]
        assert abs(zc.mean()) < 0.05 and stats.kstest(zc, stats.truncnorm(-1.7, 1.7).cdf).pvalue > ALPHA
    rand = RandomErasing(1.0, mode="rand").apply(image.copy(), rng)
    changed = (rand != 50).any(axis=2)
    assert len({tuple(v) for v in rand[changed]}) == 1  # one colour per box


def test_color_jitter_draws_torchvisions_order_and_factors():
    ours = ColorJitter(0.4, 0.3, 0.2, 0.1)
    rng = np.random.Generator(np.random.Philox(key=2))
    image = np.zeros((2, 2, 3), np.uint8)
    calls = []
    import fastdata.transforms.augment as augment_module

    real = augment_module.colour
    fake = type(
        "Fake",
        (),
        {
            name: staticmethod(lambda img, f, *a, _n=name: calls.append((_n, f)) or img)
            for name in ("brightness", "contrast", "saturation", "hue")
        },
    )
    augment_module.colour = fake
    try:
        for _ in range(3000):
            ours.apply(image, rng)
    finally:
        augment_module.colour = real
    orders = [tuple(c[0] for c in calls[k : k + 4]) for k in range(0, len(calls), 4)]
    assert stats.chisquare(list(collections.Counter(orders).values())).pvalue > ALPHA and len(set(orders)) == 24
    for name, (low, high) in (
        ("brightness", (0.6, 1.4)),
        ("contrast", (0.7, 1.3)),
        ("saturation", (0.8, 1.2)),
        ("hue", (-0.1, 0.1)),
    ):
        values = [f for n_, f in calls if n_ == name]
        assert stats.kstest(values, stats.uniform(low, high - low).cdf).pvalue > ALPHA


def test_three_augment_chooses_uniformly_and_blurs_with_deits_radii(monkeypatch):
    import fastdata.transforms.policies as policies

    seen = []
    monkeypatch.setattr(policies.colour, "grayscale", lambda img, fl: seen.append(("gray", 0.0)) or img)
    monkeypatch.setattr(policies.colour, "gaussian_blur", lambda img, r: seen.append(("blur", r)) or img)
    monkeypatch.setattr(policies.colour, "apply_lut", lambda img, lut: seen.append(("solarize", 0.0)) or img)
    three, rng = ThreeAugment(color_jitter=0), np.random.Generator(np.random.Philox(key=4))
    for _ in range(3000):
        three.apply(np.zeros((2, 2, 3), np.uint8), rng)
    assert stats.chisquare(list(collections.Counter(k for k, _ in seen).values())).pvalue > ALPHA
    assert stats.kstest([r for k, r in seen if k == "blur"], stats.uniform(0.1, 1.9).cdf).pvalue > ALPHA


def test_flip_probability():
    flip, rng = RandomHorizontalFlip(0.3), np.random.Generator(np.random.Philox(key=8))
    image = np.arange(12, dtype=np.uint8).reshape(1, 4, 3)
    flips = sum(not np.array_equal(flip.apply(image.copy(), rng), image) for _ in range(4000))
    assert stats.binomtest(flips, 4000, 0.3).pvalue > ALPHA


@pytest.mark.parametrize(
    "make, error",
    [
        (lambda: RandAugment(2, 31), "magnitude"),
        (lambda: RandAugment(-1), "num_ops"),
        (lambda: RandAugment(interpolation="bicubic"), "interpolation"),
        (lambda: RandAugment(fill=(1, 2)), "fill"),
        (lambda: AutoAugment("cifar10"), "policy"),
        (lambda: TrivialAugmentWide(1), "num_magnitude_bins"),
        (lambda: ColorJitter(hue=0.7), "hue"),
        (lambda: ColorJitter(-0.1), "brightness"),
        (lambda: RandomErasing(1.5), "probability"),
        (lambda: RandomErasing(mode="noise"), "mode"),
        (lambda: RandomHorizontalFlip(2), "p"),
        (lambda: ThreeAugment(blur_radius=(2, 1)), "blur_radius"),
        (lambda: TimmRandAugment(transforms=["Nope"]), "op names"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(make, error):
    with pytest.raises(ValueError, match=error):
        make()


def test_policies_called_on_an_image_keep_the_input_and_check_it():
    image = IMAGES[0]
    before = image.copy()
    for policy in (
        RandAugment(),
        TrivialAugmentWide(),
        AutoAugment(),
        ThreeAugment(),
        RandomErasing(1.0),
        ColorJitter(0.4, 0.4, 0.4),
        RandomHorizontalFlip(1.0),
        RandAugment.from_config("rand-m9"),
    ):
        out = policy(image, rng=np.random.default_rng(0))
        assert out.shape == image.shape and out.dtype == np.uint8
        assert np.array_equal(image, before)
    with pytest.raises(ValueError, match="uint8"):
        RandAugment()(image.astype(np.float32))
    with pytest.raises(TypeError, match="numpy"):
        RandAugment()(torch.zeros(3, 4, 4, dtype=torch.uint8))


def test_from_config_interpolates_as_create_transform():
    """``RandAugment.from_config`` is what ``timm.data.create_transform(auto_augment=...)`` builds: bilinear geometric
    ops (its ``interpolation="bilinear"``); ``train.py``'s ``random`` is asked for by name."""
    from fastdata.transforms import RandAugment

    assert RandAugment.from_config("rand-m9-mstd0.5-inc1").interpolation == "bilinear"
    assert RandAugment.from_config("rand-m9-mstd0.5-inc1", interpolation="random").interpolation == "random"
