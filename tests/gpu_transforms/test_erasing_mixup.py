"""RandomErasing and MixupCutmix behave as timm's RandomErasing and Mixup."""

from __future__ import annotations

import numpy as np
import pytest
import timm.data.mixup as timm_mixup  # the test set-up installs timm (tools/setup.sh test)
import timm.data.random_erasing as timm_re
import torch
from scipy import stats

from fastdata.gpu_transforms import MixupCutmix, RandomErasing

ALPHA = 1e-4


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ----------------------------------------------------------------------------- RandomErasing


def erased_fraction(out: torch.Tensor, x: torch.Tensor) -> np.ndarray:
    return (out != x).any(dim=1).flatten(1).double().mean(1).numpy()


@pytest.mark.parametrize("counts", [(1, None), (1, 3)])
def test_erasing_areas_follow_timm(counts):
    n, size = 3000, 40
    x = torch.rand(n, 3, size, size) + 1.0  # never 0, so erased pixels show
    ours, _ = RandomErasing(0.6, min_count=counts[0], max_count=counts[1], generator=gen())(x, None)
    ref = x.clone()
    timm_eraser = timm_re.RandomErasing(0.6, mode="const", min_count=counts[0], max_count=counts[1], device="cpu")
    import random

    random.seed(0)
    for img in ref:
        timm_eraser(img.unsqueeze(0))
    a, b = erased_fraction(ours, x), erased_fraction(ref, x)
    assert stats.binomtest(int((a > 0).sum()), n, 0.6).pvalue > ALPHA
    assert stats.ks_2samp(a, b).pvalue > ALPHA
    assert a.max() <= 1 / 3 * 1.1  # the rounded box sides can exceed the largest area a little, as in timm


@pytest.mark.parametrize("mode", ["const", "rand", "pixel"])
def test_erasing_fills_only_inside_the_boxes(mode):
    x = torch.full((64, 3, 24, 24), 5.0)
    eraser = RandomErasing(1.0, mode=mode, max_count=2, generator=gen())
    boxes, used, _ = RandomErasing(1.0, mode=mode, max_count=2, generator=gen()).get_params(64, 24, 24)
    out, labels = eraser(x, torch.arange(64))
    inside = torch.zeros(64, 24, 24, dtype=torch.bool)
    for i, j in used.nonzero().tolist():
        top, left, h, w = boxes[i, j].tolist()
        inside[i, top : top + h, left : left + w] = True
    changed = (out != 5.0).any(dim=1)
    assert torch.equal(changed, inside) and labels is not None
    if mode == "const":
        assert (out[inside.unsqueeze(1).expand_as(out)] == 0).all()
    if mode == "pixel":
        assert out[inside.unsqueeze(1).expand_as(out)].std() > 0.5


def test_erasing_uint8_const_only_and_reproducible():
    x = torch.full((8, 3, 16, 16), 200, dtype=torch.uint8)
    out, _ = RandomErasing(1.0, generator=gen())(x, None)
    assert out.dtype == torch.uint8 and (out == 0).any()
    with pytest.raises(ValueError, match="after Normalize"):
        RandomErasing(1.0, mode="pixel")(x, None)
    xf = torch.rand(8, 3, 16, 16)
    a, b = RandomErasing(0.5, mode="pixel", generator=gen(3)), RandomErasing(0.5, mode="pixel", generator=gen(3))
    assert all(torch.equal(a(xf)[0], b(xf)[0]) for _ in range(3))


# ----------------------------------------------------------------------------- MixupCutmix

MODES = ["batch", "pair", "elem"]
ALPHAS = [(0.8, 0.0), (0.0, 1.0), (0.8, 1.0)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("alphas", ALPHAS)
def test_soft_targets_sum_to_one(mode, alphas):
    mix = MixupCutmix(*alphas, prob=0.9, mode=mode, label_smoothing=0.1, num_classes=7, generator=gen())
    for _ in range(5):
        out, targets = mix(torch.rand(16, 3, 12, 12), torch.randint(0, 7, (16,)))
        assert targets.shape == (16, 7) and torch.allclose(targets.sum(1), torch.ones(16))
        assert (targets >= 0.1 / 7 - 1e-6).all()
    _, soft = mix(torch.rand(16, 3, 12, 12), torch.softmax(torch.randn(16, 7), 1))
    assert torch.allclose(soft.sum(1), torch.ones(16))


class ScriptedNumpyRandom:
    """Stands in for ``numpy.random`` inside timm's mixup module, returning our drawn values in timm's call order."""

    def __init__(self, raw: dict, mode: str, both: bool, prob: float, switch_prob: float) -> None:
        mixed, cutmix, lam = raw["mixed"].numpy(), raw["cutmix"].numpy(), raw["lam"].numpy()
        yes_no = lambda flags, p: np.where(flags, 0.0, min(p + (1 - p) / 2, 0.999999))  # noqa: E731
        self.rand_queue, self.beta_queue = [], []
        if mode == "batch":
            self.rand_queue.append(float(yes_no(mixed, prob)[0]))
            if both and mixed[0]:
                self.rand_queue.append(float(yes_no(cutmix, switch_prob)[0]))
            if mixed[0]:
                self.beta_queue.append(float(lam[0]))
        else:
            if both:
                self.rand_queue.append(yes_no(cutmix, switch_prob))
            self.beta_queue += [lam] * (2 if both else 1)
            self.rand_queue.append(yes_no(mixed, prob))
        self.randint_queue = []
        for i in np.flatnonzero(cutmix & (lam < 1)):
            self.randint_queue += [int(raw["cy"][i]), int(raw["cx"][i])]

    def rand(self, *size):
        return self.rand_queue.pop(0)

    def beta(self, a, b, size=None):
        return self.beta_queue.pop(0)

    def randint(self, low, high, size=None):
        return self.randint_queue.pop(0)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("alphas", ALPHAS)
def test_equal_to_timms_mixup_for_the_same_draws(mode, alphas, monkeypatch):
    n, h, w = 16, 20, 24
    for seed in range(6):
        mix = MixupCutmix(
            *alphas, prob=0.8, switch_prob=0.5, mode=mode, label_smoothing=0.1, num_classes=5, generator=gen(seed)
        )
        x, labels = torch.rand(n, 3, h, w), torch.randint(0, 5, (n,))
        raw = mix.draw(n, h, w)
        ours, our_targets = mix.apply(x, labels, mix.params_from(raw, n, h, w))
        fake = ScriptedNumpyRandom(raw, mode, all(alphas), 0.8, 0.5)
        monkeypatch.setattr(timm_mixup.np, "random", fake)
        reference = timm_mixup.Mixup(
            mixup_alpha=alphas[0],
            cutmix_alpha=alphas[1],
            prob=0.8,
            switch_prob=0.5,
            mode=mode,
            label_smoothing=0.1,
            num_classes=5,
        )
        ref_x = x.clone()
        ref_x, ref_targets = reference(ref_x, labels)
        monkeypatch.undo()
        assert not (fake.rand_queue or fake.beta_queue or fake.randint_queue), "timm drew a different sequence"
        assert torch.allclose(ours, ref_x, atol=1e-5)
        assert torch.allclose(our_targets, ref_targets, atol=1e-5)


def test_pairs_share_their_draw_and_lambda_follows_beta():
    mix = MixupCutmix(0.8, 0.0, mode="elem", num_classes=3, generator=gen())
    lam = mix.get_params(20000, 8, 8).lam.numpy()
    assert stats.kstest(lam, stats.beta(0.8, 0.8).cdf).pvalue > ALPHA
    pair = MixupCutmix(0.8, 1.0, mode="pair", num_classes=3, generator=gen()).get_params(10, 8, 8)
    assert torch.equal(pair.lam, pair.lam.flip(0)) and torch.equal(pair.cutmix, pair.cutmix.flip(0))
    with pytest.raises(ValueError, match="even batch"):
        MixupCutmix(mode="pair", num_classes=3)(torch.rand(5, 3, 8, 8), torch.arange(5))


def test_uint8_images_stay_uint8_and_identical_pairs_differ_per_element():
    x = torch.randint(0, 256, (8, 3, 16, 16), dtype=torch.uint8)
    out, _ = MixupCutmix(0.8, 1.0, mode="elem", num_classes=4, generator=gen())(x, torch.arange(8) % 4)
    assert out.dtype == torch.uint8
    params = MixupCutmix(0.8, 1.0, mode="elem", num_classes=4, generator=gen()).get_params(64, 16, 16)
    assert len(set(params.lam.tolist())) > 32
