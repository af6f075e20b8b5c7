"""Tests for fastdata.decode: PIL parity, DCT-scaled sizes, strict validation, fallback, pickling."""

from __future__ import annotations

import io
import multiprocessing
import pickle
import warnings
from concurrent.futures import ProcessPoolExecutor

import cv2
import numpy as np
import pytest
from PIL import Image

import fastdata.decode.fallback as fallback_mod
import fastdata.decode.opencv as opencv_mod
import fastdata.decode.registry as registry_mod
import fastdata.decode.turbo as turbo_mod
from fastdata._util.optional import TURBOJPEG_HINT, has_turbojpeg
from fastdata.decode import (
    SIMD_SCALES,
    TURBOJPEG_SCALES,
    DecodeError,
    Decoder,
    DecodeWarning,
    OpenCVDecoder,
    TurboJpegDecoder,
    choose_scale,
    get_decoder,
    is_jpeg,
    scaled_size,
)
from tests.images import encode, encode_cmyk, natural_image

needs_turbojpeg = pytest.mark.skipif(not has_turbojpeg(), reason="libturbojpeg is not installed")
DECODER_PARAMS = [pytest.param("turbojpeg", marks=needs_turbojpeg), "opencv"]
MAX_MEAN_ABS_DIFF = 3.0  # grey levels; measured: 0.0 for every kind but CMYK (1.0)


def _rgb(seed: int, height: int, width: int) -> np.ndarray:
    return natural_image(np.random.default_rng(seed), height, width)


def _palette_png(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).convert("P", palette=Image.ADAPTIVE, colors=64).save(buf, format="PNG")
    return buf.getvalue()


def _png16(array: np.ndarray) -> bytes:
    ok, buf = cv2.imencode(".png", array.astype(np.uint16) * 257)
    assert ok
    return buf.tobytes()


def _make_samples() -> dict[str, bytes]:
    img = _rgb(1, 97, 131)
    alpha = np.random.default_rng(2).integers(0, 255, img.shape[:2], np.uint8)
    return {
        "baseline": encode(img, "JPEG", quality=90),
        "progressive": encode(img, "JPEG", quality=85, progressive=True),
        "444": encode(img, "JPEG", quality=95, subsampling=0),
        "gray_jpeg": encode(img[..., 0], "JPEG", quality=90),
        "cmyk_jpeg": encode_cmyk(img),
        "rgb_png": encode(img, "PNG"),
        "rgba_png": encode(np.dstack([img, alpha]), "PNG"),
        "palette_png": _palette_png(img),
        "rgb16_png": _png16(img[..., ::-1]),  # cv2 writes BGR
        "tiny_1x1_jpeg": encode(img[:1, :1], "JPEG", quality=90),
        "tiny_3x5_jpeg": encode(img[:3, :5], "JPEG", quality=90),
        "tiny_1x1_png": encode(img[:1, :1], "PNG"),
        "webp": encode(img, "WEBP", quality=90),
        "bmp": encode(img, "BMP"),
    }


SAMPLES = _make_samples()


def _pil_rgb(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def _mad(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


@pytest.fixture(params=DECODER_PARAMS)
def decoder(request) -> Decoder:
    return get_decoder(request.param)


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_decode_matches_pil(decoder, kind):
    data = SAMPLES[kind]
    out = decoder.decode(data)
    ref = _pil_rgb(data)
    assert out.dtype == np.uint8 and out.ndim == 3 and out.flags.c_contiguous
    assert out.shape == ref.shape
    assert _mad(out, ref) < MAX_MEAN_ABS_DIFF


def test_16bit_gray_png_is_clipped_as_pil_clips_it(decoder):
    gray = _rgb(3, 20, 30)[..., 0].astype(np.uint16)
    buf = io.BytesIO()
    Image.fromarray(gray * 2).save(buf, format="PNG")  # I;16, values up to 510
    out = decoder.decode(buf.getvalue())
    # PIL's I;16 -> RGB conversion clips at 255 (OpenCV and libpng keep the high byte instead).
    np.testing.assert_array_equal(out, np.repeat(np.minimum(gray * 2, 255).astype(np.uint8)[..., None], 3, axis=2))


def test_exif_orientation_is_not_applied(decoder):
    img = _rgb(4, 40, 64)
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 CW to display"
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="JPEG", quality=95, exif=exif.tobytes())
    out = decoder.decode(buf.getvalue())
    assert out.shape == (40, 64, 3)
    assert _mad(out, _pil_rgb(buf.getvalue())) < 1.0


@pytest.mark.parametrize("size", [(1, 1), (3, 5), (8, 8), (9, 17), (37, 53), (64, 200), (97, 131)])
def test_scaled_sizes_follow_the_ceil_rule(size):
    img = _rgb(5, *size)
    kinds = [
        encode(img, "JPEG", quality=90),
        encode(img, "JPEG", quality=90, subsampling=0),
        encode(img[..., 1], "JPEG"),
        encode_cmyk(img),
        encode(img, "PNG"),
    ]
    decoders = [OpenCVDecoder()] + ([TurboJpegDecoder(scales=TURBOJPEG_SCALES)] if has_turbojpeg() else [])
    for dec in decoders:
        for data in kinds:
            for scale in dec.scales:
                out = dec.decode(data, scale=scale)
                assert out.shape == (*scaled_size(*size, scale), 3), (dec, scale)
                assert out.flags.c_contiguous and out.dtype == np.uint8


def test_scaled_size_and_choose_scale():
    assert scaled_size(375, 500, (1, 8)) == (47, 63)
    assert scaled_size(1, 1, (1, 8)) == (1, 1)
    assert scaled_size(375, 500, (3, 8)) == (141, 188)
    assert choose_scale(SIMD_SCALES, 375, 500, 46, 62) == (1, 8)
    assert choose_scale(SIMD_SCALES, 375, 500, 47, 63) == (1, 4)  # 46.875 rows at 1/8: counted exactly, not rounded up
    assert choose_scale(SIMD_SCALES, 375, 500, 48, 10) == (1, 4)
    assert choose_scale(SIMD_SCALES, 375, 500, 187, 250) == (1, 2)
    assert choose_scale(SIMD_SCALES, 375, 500, 188, 250) == (1, 1)
    assert choose_scale(SIMD_SCALES, 2, 2, 2, 2) == (1, 1)  # a crop decoded at its own size stays at full scale
    assert choose_scale(SIMD_SCALES, 375, 500, 400, 600) == (1, 1)  # nothing fits: full size
    assert choose_scale(TURBOJPEG_SCALES, 375, 500, 140, 100) == (3, 8)  # 140.6 rows at 3/8
    assert choose_scale(reversed(TURBOJPEG_SCALES), 375, 500, 142, 100) == (1, 2)  # order of input irrelevant
    assert choose_scale([(1, 1)], 1000, 1000, 1, 1) == (1, 1)


SAMPLES_BIG = {
    "baseline": lambda a: encode(a, "JPEG", quality=90),
    "progressive": lambda a: encode(a, "JPEG", quality=90, progressive=True),
    "gray_jpeg": lambda a: encode(a[..., 2], "JPEG", quality=90),
    "cmyk_jpeg": encode_cmyk,
    "rgb_png": lambda a: encode(a, "PNG"),
}


@pytest.mark.parametrize("kind", sorted(SAMPLES_BIG))
def test_scaled_decode_is_close_to_pil_downscale(kind):
    big = cv2.GaussianBlur(_rgb(6, 200, 264), (0, 0), 1.5)
    data = SAMPLES_BIG[kind](big)
    full = Image.fromarray(_pil_rgb(data))
    decoders = [OpenCVDecoder()] + ([TurboJpegDecoder(scales=TURBOJPEG_SCALES)] if has_turbojpeg() else [])
    for dec in decoders:
        for scale in dec.scales[:-1]:
            out = dec.decode(data, scale=scale)
            ref = np.asarray(full.resize((out.shape[1], out.shape[0]), Image.BILINEAR))
            assert _mad(out, ref) < MAX_MEAN_ABS_DIFF, (dec, scale)


def test_decode_rejects_unknown_scale(decoder):
    with pytest.raises(ValueError, match="scale must be one of"):
        decoder.decode(SAMPLES["baseline"], scale=(1, 3))


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_validate_accepts_every_good_kind(decoder, kind):
    ref = _pil_rgb(SAMPLES[kind])
    assert decoder.validate(SAMPLES[kind]) == ref.shape[:2]


def _truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


BAD = {
    "truncated_jpeg": (_truncated(SAMPLES["baseline"]), "truncated JPEG"),
    "truncated_progressive": (SAMPLES["progressive"][: len(SAMPLES["progressive"]) * 3 // 4], "truncated JPEG"),
    "jpeg_without_eoi": (SAMPLES["baseline"][:-2], "truncated JPEG"),
    "truncated_png": (_truncated(SAMPLES["rgb_png"]), "PNG"),
    "empty": (b"", "empty file"),
    "garbage": (b"this is not an image at all" * 10, "not an image"),
    "jpeg_soi_then_garbage": (b"\xff\xd8\xff" + b"x" * 40, "JPEG"),
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_validate_rejects_bad_data(decoder, kind):
    data, reason = BAD[kind]
    with pytest.raises(DecodeError, match=reason):
        decoder.validate(data)


@pytest.mark.parametrize("kind", ["truncated_png", "empty", "garbage", "jpeg_soi_then_garbage"])
def test_decode_raises_decode_error(decoder, kind):
    with pytest.raises(DecodeError):
        decoder.decode(BAD[kind][0])


@needs_turbojpeg
def test_turbojpeg_validate_accepts_corrupt_data_warnings_as_pil_does():
    data = SAMPLES["baseline"]
    sof = data.find(b"\xff\xc0")
    corrupt = data[:sof] + b"\x01\x02\x03" + data[sof:]  # libjpeg: "3 extraneous bytes before marker"
    dec = TurboJpegDecoder()
    with pytest.warns(DecodeWarning, match="3 extraneous bytes before marker 0xc0") as record:
        assert dec.validate(corrupt) == (97, 131)
    assert len(record) == 1
    with pytest.warns(UserWarning, match="extraneous bytes"):
        out = dec.decode(corrupt)
    np.testing.assert_array_equal(out, _pil_rgb(corrupt))
    np.testing.assert_array_equal(out, dec.decode(data))


@needs_turbojpeg
def test_validate_warnings_do_not_leak_and_decode_warnings_raise_under_w_error():
    dec = TurboJpegDecoder()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(DecodeError):
            dec.validate(BAD["truncated_jpeg"][0])
    assert caught == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(DecodeError, match="Premature end"):
            dec.decode(BAD["truncated_jpeg"][0])


def test_read_size(decoder):
    assert decoder.read_size(SAMPLES["baseline"]) == (97, 131)
    assert decoder.read_size(SAMPLES["progressive"]) == (97, 131)
    assert decoder.read_size(SAMPLES["cmyk_jpeg"]) == (97, 131)
    assert decoder.read_size(SAMPLES["tiny_3x5_jpeg"]) == (3, 5)
    assert decoder.read_size(SAMPLES["rgba_png"]) == (97, 131)
    assert decoder.read_size(SAMPLES["webp"]) is None
    assert decoder.read_size(b"garbage" * 5) is None
    assert decoder.read_size(b"\xff\xd8\xff") is None


def test_accepts_memoryview(decoder):
    data = memoryview(SAMPLES["baseline"])
    assert decoder.read_size(data) == (97, 131)
    assert decoder.decode(data, scale=(1, 2)).shape == (49, 66, 3)
    assert decoder.validate(data) == (97, 131)
    with pytest.raises(TypeError, match="bytes-like"):
        decoder.decode("not bytes")  # type: ignore[arg-type]


def test_opencv_validate_is_pils_verdict(monkeypatch):
    # OpenCV 5 refuses truncated JPEGs but 4.x returns a grey-filled image, and neither reports
    # libjpeg's warnings: OpenCVDecoder.validate leaves the verdict to Pillow.
    monkeypatch.setattr(opencv_mod, "_cv2_imdecode", lambda data, flags: np.zeros((97, 131, 3), np.uint8))
    assert OpenCVDecoder().validate(SAMPLES["baseline"]) == (97, 131)
    for kind in ["truncated_jpeg", "truncated_progressive", "jpeg_without_eoi"]:
        with pytest.raises(DecodeError, match="truncated JPEG"):
            OpenCVDecoder().validate(BAD[kind][0])


def test_decode_error_is_a_value_error():
    assert issubclass(DecodeError, ValueError)


def test_is_jpeg():
    assert is_jpeg(SAMPLES["baseline"]) and is_jpeg(SAMPLES["cmyk_jpeg"])
    assert not is_jpeg(SAMPLES["rgb_png"]) and not is_jpeg(b"") and not is_jpeg(b"\xff\xd8")


def test_get_decoder_names(monkeypatch):
    from fastdata.decode import native

    assert isinstance(get_decoder("opencv"), OpenCVDecoder)
    fallback = TurboJpegDecoder if has_turbojpeg() else OpenCVDecoder
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert type(get_decoder()) is (native.NativeJpegDecoder if native.available() else fallback)
        monkeypatch.setenv("FASTDATA_NATIVE", "0")  # the forced fallback
        assert type(get_decoder()) is fallback
    with pytest.raises(ValueError, match="'auto', 'native', 'turbojpeg', 'opencv'.*'pil'"):
        get_decoder("pil")
    with pytest.raises(TypeError, match="name must be a str"):
        get_decoder(OpenCVDecoder())  # type: ignore[arg-type]


def test_fallback_warns_once_per_process_when_turbojpeg_is_missing(monkeypatch):
    def missing():
        raise ImportError(TURBOJPEG_HINT)

    monkeypatch.setenv("FASTDATA_NATIVE", "0")
    monkeypatch.setattr(fallback_mod, "has_turbojpeg", lambda: False)
    monkeypatch.setattr(registry_mod, "turbojpeg_handle", missing)
    monkeypatch.setattr(turbo_mod, "turbojpeg_handle", missing)
    monkeypatch.setattr(fallback_mod, "_fallback_warned", False)
    with pytest.warns(RuntimeWarning, match="libturbojpeg") as record:
        assert isinstance(get_decoder("auto"), OpenCVDecoder)
    assert len(record) == 1 and "slower" in str(record[0].message)
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        assert isinstance(get_decoder("auto"), OpenCVDecoder)
        assert isinstance(get_decoder(), OpenCVDecoder)
    assert again == []
    with pytest.raises(ImportError, match="apt-get install"):
        get_decoder("turbojpeg")
    with pytest.raises(ImportError, match="libturbojpeg"):
        TurboJpegDecoder()


@needs_turbojpeg
def test_turbojpeg_scales():
    assert TurboJpegDecoder().scales == SIMD_SCALES
    assert TurboJpegDecoder(scales=[(3, 8), (1, 8)]).scales == ((1, 8), (3, 8), (1, 1))
    assert TurboJpegDecoder(scales=TURBOJPEG_SCALES).scales == TURBOJPEG_SCALES
    for bad in [(2, 1), (1, 3), (3, 2)]:
        with pytest.raises(ValueError, match="libjpeg-turbo factors"):
            TurboJpegDecoder(scales=[bad])
    assert OpenCVDecoder().scales == SIMD_SCALES


def test_decoders_pickle_small_and_work_after(decoder):
    blob = pickle.dumps(decoder)
    assert len(blob) < 300
    clone = pickle.loads(blob)
    assert type(clone) is type(decoder) and clone.scales == decoder.scales and repr(clone) == repr(decoder)
    np.testing.assert_array_equal(clone.decode(SAMPLES["baseline"]), decoder.decode(SAMPLES["baseline"]))


def test_decoder_works_in_a_spawned_process(decoder):
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=ctx) as pool:
        out = pool.submit(decoder.decode, SAMPLES["progressive"], scale=(1, 2)).result(timeout=60)
    np.testing.assert_array_equal(out, decoder.decode(SAMPLES["progressive"], scale=(1, 2)))


def test_decoder_is_abstract():
    with pytest.raises(TypeError):
        Decoder()  # type: ignore[abstract]


def test_auto_warns_once_how_to_get_the_native_kernel_when_it_is_not_built(monkeypatch):
    from fastdata.decode import native

    monkeypatch.setattr(native, "_jpegcrop", None)
    monkeypatch.setattr(registry_mod, "_native_warned", False)
    with pytest.warns(RuntimeWarning, match="native crop-region JPEG kernel is not built.*libjpeg-dev"):
        first = get_decoder("auto")
    assert not isinstance(first, native.NativeJpegDecoder)
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        get_decoder("auto")
    assert [w for w in again if "native" in str(w.message)] == []
    with pytest.raises(ImportError, match="libjpeg-dev"):
        get_decoder("native")
