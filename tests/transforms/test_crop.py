"""Tests for fastdata.transforms: crop sampling, DCT-scale choice, PIL parity, pickling."""

from __future__ import annotations

import io
import math
import pickle

import cv2
import numpy as np
import pytest
import torch
from PIL import Image

from fastdata._util.optional import has_turbojpeg
from fastdata.decode import SIMD_SCALES, TURBOJPEG_SCALES, Decoder, OpenCVDecoder, TurboJpegDecoder, scaled_size
from fastdata.decode.scaling import ANTIALIAS_HEADROOM, KERNEL_SCALES
from fastdata.decode.scaling import scaled_box as _scaled_box
from fastdata.transforms import Decode, DecodeTransform, RandomResizedCrop, ResizeCenterCrop
from tests.images import encode, encode_cmyk, natural_image

needs_turbojpeg = pytest.mark.skipif(not has_turbojpeg(), reason="libturbojpeg is not installed")
DECODER_PARAMS = [pytest.param("turbojpeg", marks=needs_turbojpeg), "opencv"]


def _smooth(seed: int, height: int, width: int) -> np.ndarray:
    return cv2.GaussianBlur(natural_image(np.random.default_rng(seed), height, width), (0, 0), 1.5)


def _pil(data: bytes) -> Image.Image:
    return Image.open(io.BytesIO(data)).convert("RGB")


def _mad(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


IMG = _smooth(0, 300, 410)
JPEG = encode(IMG, "JPEG", quality=92)
BIG_JPEG = encode(_smooth(1, 900, 1200), "JPEG", quality=90)
KINDS = {
    "jpeg": JPEG,
    "portrait_jpeg": encode(_smooth(2, 410, 300), "JPEG", quality=90),
    "gray_jpeg": encode(IMG[..., 0], "JPEG"),
    "cmyk_jpeg": encode_cmyk(IMG),
    "png": encode(IMG, "PNG"),
    "webp": encode(IMG, "WEBP", quality=90),  # no cheap header size: full-decode path
    "tiny_1x1": encode(IMG[:1, :1], "JPEG"),
    "tiny_3x5": encode(IMG[:3, :5], "JPEG"),
}


class SpyDecoder(Decoder):
    """Delegates to a real decoder and records every ``scale`` it is asked for."""

    name = "spy"

    def __init__(self, inner: Decoder) -> None:
        self.inner, self.scales, self.calls = inner, inner.scales, []

    def read_size(self, data):
        return self.inner.read_size(data)

    def decode(self, data, *, scale=(1, 1)):
        self.calls.append(scale)
        return self.inner.decode(data, scale=scale)

    def validate(self, data):
        return self.inner.validate(data)


@pytest.mark.parametrize("decoder", DECODER_PARAMS)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_output_shape_and_dtype(decoder, kind):
    data = KINDS[kind]
    torch.manual_seed(0)
    for transform, shape in [
        (RandomResizedCrop(32, decoder=decoder), (32, 32, 3)),
        (RandomResizedCrop((24, 40), decoder=decoder), (24, 40, 3)),
        (ResizeCenterCrop(48, 40, decoder=decoder), (40, 40, 3)),
        (ResizeCenterCrop((50, 70), (20, 30), decoder=decoder), (20, 30, 3)),
    ]:
        for _ in range(3):
            out = transform(data)
            assert out.shape == shape and out.dtype == np.uint8 and out.flags.c_contiguous, transform
    full = Decode(decoder=decoder)(data)
    assert full.shape == np.asarray(_pil(data)).shape


def test_get_params_stays_in_bounds_and_limits():
    height, width, scale, ratio = 300, 410, (0.08, 1.0), (3 / 4, 4 / 3)
    torch.manual_seed(0)
    areas, ratios = [], []
    for _ in range(3000):
        top, left, h, w = RandomResizedCrop.get_params(height, width, scale, ratio)
        assert top >= 0 and left >= 0 and h >= 1 and w >= 1
        assert top + h <= height and left + w <= width
        areas.append(h * w / (height * width))
        ratios.append(w / h)
    areas, ratios = np.array(areas), np.array(ratios)
    # rounding h and w to whole pixels moves the ratio and area by well under 2% at this size
    assert areas.min() >= 0.08 * 0.97 and areas.max() <= 1.0
    assert ratios.min() >= 0.75 * 0.98 and ratios.max() <= 4 / 3 * 1.02
    assert areas.min() < 0.1 and areas.max() > 0.9 and ratios.min() < 0.76 and ratios.max() > 1.31


def test_get_params_samples_area_uniformly_and_ratio_log_uniformly():
    # on a square image with small areas no draw is rejected, so the laws show unbiased
    torch.manual_seed(1)
    draws = [RandomResizedCrop.get_params(400, 400, (0.08, 0.3), (3 / 4, 4 / 3)) for _ in range(4000)]
    areas = np.array([h * w / 400**2 for _, _, h, w in draws])
    log_ratios = np.log([w / h for _, _, h, w in draws])
    half = math.log(4 / 3)
    assert np.quantile(areas, [0.25, 0.5, 0.75]) == pytest.approx([0.135, 0.19, 0.245], abs=0.01)
    assert np.quantile(log_ratios, [0.25, 0.5, 0.75]) == pytest.approx([-half / 2, 0.0, half / 2], abs=0.02)
    tops = np.array([top / (400 - h) for top, _, h, _ in draws])  # position uniform over the free room
    assert tops.mean() == pytest.approx(0.5, abs=0.02)


def test_get_params_fallback_is_a_central_crop_clamped_to_the_ratio():
    # areas above the image's never fit, so the 10 tries fail and the fallback applies
    assert RandomResizedCrop.get_params(100, 400, (2.0, 3.0), (3 / 4, 4 / 3)) == (0, 133, 100, 133)
    assert RandomResizedCrop.get_params(400, 100, (2.0, 3.0), (3 / 4, 4 / 3)) == (133, 0, 133, 100)
    assert RandomResizedCrop.get_params(300, 300, (2.0, 3.0), (3 / 4, 4 / 3)) == (0, 0, 300, 300)
    assert RandomResizedCrop.get_params(1, 1, (2.0, 3.0), (0.1, 0.2)) == (0, 0, 1, 1)


def test_get_params_is_reproducible_under_manual_seed():
    def draws(seed):
        torch.manual_seed(seed)
        return [RandomResizedCrop.get_params(300, 410, (0.08, 1.0), (0.75, 4 / 3)) for _ in range(20)]

    assert draws(7) == draws(7)
    assert draws(7) != draws(8)


def test_get_params_matches_torchvision():
    tv = pytest.importorskip("torchvision.transforms")
    image = torch.zeros(3, 300, 410)
    for seed in range(20):
        torch.manual_seed(seed)
        expected = tv.RandomResizedCrop.get_params(image, [0.08, 1.0], [3 / 4, 4 / 3])
        torch.manual_seed(seed)
        assert RandomResizedCrop.get_params(300, 410, (0.08, 1.0), (3 / 4, 4 / 3)) == tuple(expected)


@pytest.mark.parametrize("scales", [SIMD_SCALES, pytest.param(TURBOJPEG_SCALES, marks=needs_turbojpeg)])
@pytest.mark.parametrize("resample, room", [("fast", 1), ("antialias", ANTIALIAS_HEADROOM)])
def test_random_resized_crop_decodes_at_the_smallest_sufficient_scale(scales, resample, room, monkeypatch):
    spy = SpyDecoder(TurboJpegDecoder(scales=scales) if scales is TURBOJPEG_SCALES else OpenCVDecoder())
    transform = RandomResizedCrop(100 if resample == "fast" else 45, resample=resample, decoder=spy)
    least = transform.size[0] * room  # the crop at the chosen scale keeps at least this, counted exactly
    boxes = []
    real_get_params = RandomResizedCrop.get_params

    def recording(*args):
        boxes.append(real_get_params(*args))
        return boxes[-1]

    monkeypatch.setattr(RandomResizedCrop, "get_params", staticmethod(recording))
    torch.manual_seed(0)
    for _ in range(40):
        assert transform(BIG_JPEG).shape == (*transform.size, 3)
    # "antialias" decodes at the native kernel's scales only, so that both paths give the same picture
    usable = scales if resample == "fast" else tuple(s for s in scales if s in KERNEL_SCALES)
    for (_, _, h, w), scale in zip(boxes, spy.calls, strict=False):
        assert scale in usable
        assert min(h, w) * scale[0] >= least * scale[1] or scale == (1, 1)
        for smaller in (s for s in usable if s[0] / s[1] < scale[0] / scale[1]):
            assert min(h, w) * smaller[0] < least * smaller[1], (h, w, scale, smaller)
    assert len(set(spy.calls)) >= 3  # the test exercised several scales


def test_resize_center_crop_decodes_at_the_smallest_sufficient_scale():
    spy = SpyDecoder(OpenCVDecoder())
    ResizeCenterCrop(225, 224, resample="fast", decoder=spy)(BIG_JPEG)  # 900 / 4 = 225 >= 225
    ResizeCenterCrop(226, 224, resample="fast", decoder=spy)(BIG_JPEG)  # 225 < 226: needs 1/2
    ResizeCenterCrop(112, 100, resample="fast", decoder=spy)(BIG_JPEG)  # 900 / 8 = 112.5 >= 112
    ResizeCenterCrop(1000, 224, resample="fast", decoder=spy)(BIG_JPEG)  # enlarging: full size
    ResizeCenterCrop(112, 100, decoder=spy)(BIG_JPEG)  # antialias keeps 4x: 900 / 2 = 450 >= 448, 900 / 4 < 448
    ResizeCenterCrop(226, 224, decoder=spy)(BIG_JPEG)  # 678 rows needed: full size
    assert spy.calls == [(1, 4), (1, 2), (1, 8), (1, 1), (1, 2), (1, 1)]


def test_scaled_box_covers_the_crop_and_stays_in_bounds():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        height, width = rng.integers(1, 700, size=2)
        h, w = rng.integers(1, height + 1), rng.integers(1, width + 1)
        top, left = rng.integers(0, height - h + 1), rng.integers(0, width - w + 1)
        scale = TURBOJPEG_SCALES[rng.integers(len(TURBOJPEG_SCALES))]
        shape = (*scaled_size(height, width, scale), 3)
        y0, y1, x0, x1 = _scaled_box((top, left, h, w), scale, shape)
        s = scale[0] / scale[1]
        assert 0 <= y0 < y1 <= shape[0] and 0 <= x0 < x1 <= shape[1]
        assert y0 <= top * s < y0 + 1 and y1 - 1 < (top + h) * s <= y1  # grown by < 1 pixel per side
        assert x0 <= left * s < x0 + 1 and x1 - 1 < (left + w) * s <= x1
        rows, cols = scaled_size(h, w, scale)
        assert y1 - y0 >= rows and x1 - x0 >= cols  # never smaller than the scaled crop


@pytest.mark.parametrize("decoder", DECODER_PARAMS)
def test_full_image_crop_equals_a_plain_resize(decoder):
    height, width = 900, 1200
    transform = RandomResizedCrop((120, 160), scale=(1.0, 1.0), ratio=(width / height, width / height), decoder=decoder)
    assert RandomResizedCrop.get_params(height, width, transform.scale, transform.ratio) == (0, 0, height, width)
    out = transform(BIG_JPEG)
    ref = np.asarray(_pil(BIG_JPEG).resize((160, 120), Image.BILINEAR))
    assert _mad(out, ref) < 2.0


@pytest.mark.parametrize("decoder", DECODER_PARAMS)
def test_random_resized_crop_matches_pil_crop_and_resize(decoder):
    pil = _pil(BIG_JPEG)
    for seed in range(6):
        for transform in [RandomResizedCrop(300, decoder=decoder), RandomResizedCrop(80, decoder=decoder)]:
            torch.manual_seed(seed)
            top, left, h, w = transform.get_params(900, 1200, transform.scale, transform.ratio)
            scale = transform.resolve_decoder().scales
            torch.manual_seed(seed)
            out = transform(BIG_JPEG)
            # torchvision's RandomResizedCrop on the PIL image: crop, then PIL's antialiased bilinear
            chosen = next(s for s in scale if s == (1, 1) or min(h, w) * s[0] >= 3 * transform.size[0] * s[1])
            ref = np.asarray(pil.crop((left, top, left + w, top + h)).resize(transform.size[::-1], Image.BILINEAR))
            assert _mad(out, ref) < (0.5 if chosen == (1, 1) else 1.5), (seed, chosen)


@pytest.mark.parametrize("decoder", DECODER_PARAMS)
@pytest.mark.parametrize("kind", ["jpeg", "portrait_jpeg", "png", "gray_jpeg"])
def test_resize_center_crop_matches_pil(decoder, kind):
    data = KINDS[kind]
    pil = _pil(data)
    out = ResizeCenterCrop(256, 224, decoder=decoder)(data)
    width, height = pil.size
    new = (256, int(256 * height / width)) if width <= height else (int(256 * width / height), 256)
    resized = pil.resize(new, Image.BILINEAR)
    left, top = int(round((new[0] - 224) / 2)), int(round((new[1] - 224) / 2))
    ref = np.asarray(resized.crop((left, top, left + 224, top + 224)))
    assert out.shape == (224, 224, 3)
    assert _mad(out, ref) < 3.0


def test_resized_size_follows_torchvision():
    transform = ResizeCenterCrop(256, 224)
    assert transform.resized_size(375, 500) == (256, 341)
    assert transform.resized_size(500, 375) == (341, 256)
    assert transform.resized_size(333, 333) == (256, 256)
    assert transform.resized_size(300, 410) == (256, 349)  # 349.87 truncated, like torchvision
    assert ResizeCenterCrop((300, 200), (100, 100)).resized_size(375, 500) == (300, 200)


@pytest.mark.parametrize(
    "make, error",
    [
        (lambda: RandomResizedCrop(0), "size"),
        (lambda: RandomResizedCrop(-3), "size"),
        (lambda: RandomResizedCrop(True), "size"),
        (lambda: RandomResizedCrop((1, 2, 3)), "size"),
        (lambda: RandomResizedCrop(2.5), "size"),
        (lambda: RandomResizedCrop(8, scale=(0.9, 0.1)), "scale"),
        (lambda: RandomResizedCrop(8, scale=(0.0, 1.0)), "scale"),
        (lambda: RandomResizedCrop(8, ratio=(2.0,)), "ratio"),
        (lambda: RandomResizedCrop(8, ratio=(-1.0, 1.0)), "ratio"),
        (lambda: RandomResizedCrop(8, decoder="pil"), "decoder"),
        (lambda: ResizeCenterCrop(200, 224), "size"),
        (lambda: ResizeCenterCrop((300, 200), (100, 224)), "size"),
        (lambda: ResizeCenterCrop(0, 0), "resize"),
    ],
)
def test_bad_arguments_raise_value_error_naming_the_argument(make, error):
    with pytest.raises(ValueError, match=error):
        make()


def test_bad_decoder_type_raises_type_error():
    with pytest.raises(TypeError, match="decoder"):
        Decode(decoder=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        DecodeTransform()  # type: ignore[abstract]


def test_size_forms():
    assert RandomResizedCrop(7).size == (7, 7)
    assert RandomResizedCrop([7]).size == (7, 7)
    assert RandomResizedCrop((7, 9)).size == (7, 9)
    assert RandomResizedCrop(7, scale=[0.5, 1]).scale == (0.5, 1.0)


@pytest.mark.parametrize("decoder", ["auto", "opencv", OpenCVDecoder()])
def test_transforms_pickle(decoder):
    for transform in [
        Decode(decoder=decoder),
        RandomResizedCrop((32, 48), decoder=decoder),
        ResizeCenterCrop(64, 56, decoder=decoder),
    ]:
        torch.manual_seed(3)
        expected = transform(JPEG)  # resolves the decoder
        blob = pickle.dumps(transform)
        assert len(blob) < 600
        clone = pickle.loads(blob)
        assert repr(clone) == repr(transform)
        assert (clone._resolved is None) == isinstance(decoder, str)  # names re-resolve per process
        torch.manual_seed(3)
        np.testing.assert_array_equal(clone(JPEG), expected)


def test_repr():
    assert repr(RandomResizedCrop(224)) == (
        "RandomResizedCrop(size=(224, 224), scale=(0.08, 1.0), ratio=(0.75, 1.3333), resample='antialias', "
        "decoder='auto')"
    )
    assert repr(ResizeCenterCrop(antialias=False)) == (
        "ResizeCenterCrop(resize=256, size=(224, 224), resample='linear', decoder='auto')"
    )
    assert RandomResizedCrop(8, resample="fast").resample == "fast"
    with pytest.raises(ValueError, match="resample must be one of"):
        RandomResizedCrop(8, resample="bicubic")
    with pytest.raises(ValueError, match="not both"):
        RandomResizedCrop(8, resample="fast", antialias=True)
    assert repr(Decode(decoder="opencv")) == "Decode(decoder='opencv')"
    assert math.isclose(RandomResizedCrop(8).ratio[1], 4 / 3)


@pytest.mark.parametrize("antialias, interpolation", [(True, cv2.INTER_AREA), (False, cv2.INTER_LINEAR)])
def test_antialias_picks_the_opencv_interpolation(antialias, interpolation):
    full = OpenCVDecoder().decode(JPEG)  # 300 x 410: resize 256 needs the full-size decode
    resized = cv2.resize(full, (349, 256), interpolation=interpolation)
    expected = resized[16:240, 62:286]
    out = ResizeCenterCrop(256, 224, antialias=antialias, decoder="opencv")(JPEG)
    np.testing.assert_array_equal(out, expected)
    transform = RandomResizedCrop(
        100, scale=(1, 1), ratio=(410 / 300, 410 / 300), antialias=antialias, decoder="opencv"
    )
    expected = cv2.resize(OpenCVDecoder().decode(JPEG, scale=(1, 2)), (100, 100), interpolation=interpolation)
    np.testing.assert_array_equal(transform(JPEG), expected)


def test_auto_antialias_uses_area_only_for_large_shrinks(monkeypatch):
    """resample="fast": INTER_LINEAR below a 2x shrink (what is left after a DCT-scaled decode), INTER_AREA from 2x."""
    from fastdata.decode.scaling import resize_into

    used = []
    real = cv2.resize
    monkeypatch.setattr(
        cv2,
        "resize",
        lambda img, dsize, dst, interpolation: (
            used.append(interpolation),
            real(img, dsize, dst=dst, interpolation=interpolation),
        )[1],
    )
    image = np.zeros((300, 300, 3), np.uint8)
    resize_into(image, np.empty((200, 200, 3), np.uint8), "fast")  # 1.5x
    resize_into(image, np.empty((150, 150, 3), np.uint8), "fast")  # 2x
    resize_into(image, np.empty((200, 200, 3), np.uint8), "area")
    resize_into(image, np.empty((150, 150, 3), np.uint8), "linear")
    resize_into(image, np.empty((400, 400, 3), np.uint8), "fast")  # enlarging
    assert used == [cv2.INTER_LINEAR, cv2.INTER_AREA, cv2.INTER_AREA, cv2.INTER_LINEAR, cv2.INTER_LINEAR]


def test_get_params_from_a_generator_is_reproducible_and_follows_torchvision_ranges():
    def draws(seed):
        rng = np.random.default_rng(seed)
        return [RandomResizedCrop.get_params(300, 410, (0.08, 1.0), (0.75, 4 / 3), rng=rng) for _ in range(400)]

    assert draws(7) == draws(7) and draws(7) != draws(8)
    boxes = draws(1)
    for top, left, h, w in boxes:
        assert 0 <= top <= 300 - h and 0 <= left <= 410 - w and h >= 1 and w >= 1
    torch.manual_seed(1)
    reference = [RandomResizedCrop.get_params(300, 410, (0.08, 1.0), (0.75, 4 / 3)) for _ in range(2000)]

    def stats(found):
        areas = np.array([h * w / (300 * 410) for _, _, h, w in found])
        log_aspects = np.log([w / h for _, _, h, w in found])
        return areas.min(), areas.max(), areas.mean(), log_aspects.min(), log_aspects.max(), log_aspects.mean()

    ours, theirs = stats(draws(1) + draws(2) + draws(3) + draws(4) + draws(5)), stats(reference)  # same algorithm
    assert ours == pytest.approx(theirs, abs=0.03)
    torch.manual_seed(5)
    before = torch.get_rng_state()
    RandomResizedCrop.get_params(300, 410, (0.08, 1.0), (0.75, 4 / 3), rng=np.random.default_rng(0))
    assert torch.equal(torch.get_rng_state(), before)  # a generator-driven draw leaves torch's RNG alone


def test_random_resized_crop_with_rng_gives_the_same_pixels_for_the_same_generator():
    transform = RandomResizedCrop(32)
    assert transform.uses_rng and not ResizeCenterCrop(40, 32).uses_rng
    one = transform(BIG_JPEG, rng=np.random.default_rng(3))
    torch.manual_seed(0)
    assert np.array_equal(one, transform(BIG_JPEG, rng=np.random.default_rng(3)))
    assert not np.array_equal(one, transform(BIG_JPEG, rng=np.random.default_rng(4)))


def _torchvision_get_params(height, width, scale, ratio):
    """torchvision's RandomResizedCrop.get_params, verbatim in its torch calls (the reference for the fast draws)."""
    import math

    area = height * width
    log_ratio = torch.log(torch.tensor(ratio))
    for _ in range(10):
        target_area = area * torch.empty(1).uniform_(scale[0], scale[1]).item()
        aspect_ratio = torch.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1])).item()
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            i = torch.randint(0, height - h + 1, size=(1,)).item()
            j = torch.randint(0, width - w + 1, size=(1,)).item()
            return i, j, h, w
    return None


def test_get_params_draws_what_torchvision_draws():
    """The reused tensor and cached log bounds draw the same numbers from torch's RNG as torchvision's calls."""
    for seed in range(300):
        shape = (1 + seed % 97 * 7, 1 + seed * 13 % 503)
        scale, ratio = ((0.08, 1.0), (3 / 4, 4 / 3)) if seed % 3 else ((0.5, 0.9), (0.2, 5.0))
        torch.manual_seed(seed)
        expected = _torchvision_get_params(*shape, scale, ratio)
        torch.manual_seed(seed)
        got = RandomResizedCrop.get_params(*shape, scale, ratio)
        if expected is not None:
            assert got == expected, (seed, shape)
        assert (
            torch.rand(1).item()
            == (torch.manual_seed(seed), _torchvision_get_params(*shape, scale, ratio), torch.rand(1).item())[2]
        )  # the RNG advanced the same way
