"""Every image as PIL sees it: the files other decoders get wrong give PIL's ``convert("RGB")`` pixels."""

from __future__ import annotations

import io
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fastdata._util.optional import has_turbojpeg
from fastdata.decode import DecodeError, DecodeWarning, get_decoder

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import odd_images  # noqa: E402

DECODERS = [
    pytest.param("turbojpeg", marks=pytest.mark.skipif(not has_turbojpeg(), reason="no libturbojpeg")),
    "opencv",
]
MAX_MEAN_ABS_DIFF = 1.0


def _cases() -> dict[str, bytes]:
    rgb = odd_images.picture(41, 57, seed=1)
    gray = odd_images.picture(41, 57, 1, seed=2)[..., 0]
    rgba = np.dstack([rgb, odd_images.picture(41, 57, 1, seed=3)])
    premultiplied = rgba.copy()
    premultiplied[..., :3] = (rgba[..., :3].astype(np.uint16) * rgba[..., 3:] // 255).astype(np.uint8)
    tiff = odd_images.tiff
    jpeg = _encode(Image.fromarray(rgb), "JPEG", quality=90)
    return {
        "apng_default_image_not_frame_0": odd_images.apng_with_separate_default(41, 57),
        "png_16bit_gray": _encode(Image.fromarray(gray.astype(np.uint16) * 3), "PNG"),
        "tiff_16bit_gray": _encode(Image.fromarray(gray.astype(np.uint16) * 3), "TIFF"),
        "tiff_16bit_gray_full_range": tiff((gray.astype("<u2") * 257).tobytes(), 57, 41, bits=(16,), photometric=1),
        "bmp_bitfields_565": odd_images.bitfield_bmp(rgb, 16, (0xF800, 0x07E0, 0x001F)),
        "bmp_bitfields_xbgr": odd_images.bitfield_bmp(rgb, 32, (0xFF000000, 0x00FF0000, 0x0000FF00)),
        "tiff_rgba_associated": tiff(premultiplied.tobytes(), 57, 41, bits=(8,) * 4, photometric=2, extra_samples=(1,)),
        "tiff_rgba_unassociated": tiff(rgba.tobytes(), 57, 41, bits=(8,) * 4, photometric=2, extra_samples=(2,)),
        "tiff_2bit_gray": tiff(odd_images._pack_bits(gray >> 6, 2), 57, 41, bits=(2,), photometric=1),
        "tiff_4bit_gray": tiff(odd_images._pack_bits(gray >> 4, 4), 57, 41, bits=(4,), photometric=1),
        "tiff_float": tiff(
            (gray.astype("<f4") * 1.2 - 10).tobytes(), 57, 41, bits=(32,), photometric=1, sample_format=3
        ),
        "jpeg_junk_before_marker": odd_images.jpeg_with_junk(jpeg, 0xC0),
        "jpeg_cmyk": _encode(Image.fromarray(rgb).convert("CMYK"), "JPEG", quality=90),
        "gif_animated": _encode(
            Image.fromarray(rgb).convert("P"),
            "GIF",
            save_all=True,
            transparency=2,
            append_images=[Image.fromarray(odd_images.picture(41, 57, seed=9)).convert("P")],
        ),
        "pgm_16bit": _encode(Image.fromarray(gray.astype(np.uint16) * 200), "PPM"),
    }


def _encode(image: Image.Image, fmt: str, **options) -> bytes:
    buf = io.BytesIO()
    image.save(buf, fmt, **options)
    return buf.getvalue()


CASES = _cases()


def _pil(data: bytes) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def _mad(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("decoder_name", DECODERS)
def test_decode_equals_pil(decoder_name, name):
    data = CASES[name]
    ref = _pil(data)
    decoder = get_decoder(decoder_name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = decoder.decode(data)
        size = decoder.validate(data)  # packed, not skipped
    assert size == ref.shape[:2]
    assert out.shape == ref.shape and out.dtype == np.uint8 and out.flags.c_contiguous and out.flags.writeable
    assert _mad(out, ref) <= MAX_MEAN_ABS_DIFF, name


def test_the_cases_are_what_they_claim():
    """Guard the generators: each file has the property the case is about, per PIL."""
    apng = Image.open(io.BytesIO(CASES["apng_default_image_not_frame_0"]))
    assert apng.format == "PNG" and apng.n_frames == 3 and apng.default_image
    first = np.asarray(apng.convert("RGB"))
    apng.seek(1)
    assert _mad(first, np.asarray(apng.convert("RGB"))) > 20  # the animation's first frame is another picture
    assert Image.open(io.BytesIO(CASES["png_16bit_gray"])).mode.startswith("I;16")
    assert Image.open(io.BytesIO(CASES["tiff_16bit_gray"])).mode.startswith("I;16")
    assert Image.open(io.BytesIO(CASES["tiff_float"])).mode == "F"
    assert Image.open(io.BytesIO(CASES["tiff_2bit_gray"])).mode == "L"
    assert Image.open(io.BytesIO(CASES["tiff_rgba_associated"])).mode == "RGBA"
    assert Image.open(io.BytesIO(CASES["jpeg_cmyk"])).mode == "CMYK"
    for name in ("bmp_bitfields_565", "bmp_bitfields_xbgr"):
        assert CASES[name][30:34] == b"\x03\x00\x00\x00"  # biCompression = BI_BITFIELDS
    clipped = _pil(CASES["png_16bit_gray"])
    assert clipped.max() == 255 and (clipped == 255).mean() > 0.3  # values above 255 are clipped, not scaled


@pytest.mark.parametrize("decoder_name", DECODERS)
def test_extraneous_bytes_jpeg_is_accepted_with_a_warning(decoder_name):
    data = CASES["jpeg_junk_before_marker"]
    decoder = get_decoder(decoder_name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert decoder.validate(data) == (41, 57)
    if decoder_name == "turbojpeg":
        assert any(issubclass(w.category, DecodeWarning) and "extraneous bytes" in str(w.message) for w in caught)


@pytest.mark.parametrize("decoder_name", DECODERS)
@pytest.mark.parametrize("cut", [1, 2, 10, 500])
def test_truncated_jpeg_is_refused_as_pil_refuses_it(decoder_name, cut):
    whole = _encode(Image.fromarray(odd_images.picture(64, 80, seed=4)), "JPEG", quality=90)
    data = whole[:-cut]
    with pytest.raises(OSError, match="image file is truncated"):  # PIL's default (LOAD_TRUNCATED_IMAGES off)
        Image.open(io.BytesIO(data)).load()
    with pytest.raises(DecodeError, match="truncated JPEG"):
        get_decoder(decoder_name).validate(data)


@pytest.mark.parametrize("fmt", ["PNG", "GIF", "BMP", "TIFF", "WEBP", "PPM"])
def test_damaged_files_of_every_format_raise_only_decode_error(fmt):
    rng = np.random.default_rng(5)
    whole = _encode(Image.fromarray(odd_images.picture(23, 31, seed=6)), fmt)
    decoder = get_decoder("auto")
    outcomes = {"image": 0, "DecodeError": 0}
    for _ in range(150):
        data = bytearray(whole)
        for _ in range(int(rng.integers(1, 4))):
            at = int(rng.integers(0, len(data)))
            if rng.random() < 0.3:
                del data[at:]
            else:
                data[at] = int(rng.integers(0, 256))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for call in (decoder.decode, decoder.validate):
                try:
                    call(bytes(data))
                    outcomes["image"] += 1
                except DecodeError:
                    outcomes["DecodeError"] += 1
    assert outcomes["DecodeError"] > 0 and outcomes["image"] > 0
