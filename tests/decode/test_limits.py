"""The pixel limit: PIL's by default, one setting per process, checked from the header by every decoder."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import fastdata.decode.pil as pil_mod
from fastdata._util.optional import has_turbojpeg
from fastdata.decode import DEFAULT_MAX_PIXELS, DecodeError, get_decoder, get_max_pixels, pixel_limit, set_max_pixels

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import odd_images  # noqa: E402

DECODERS = [
    pytest.param("turbojpeg", marks=pytest.mark.skipif(not has_turbojpeg(), reason="no libturbojpeg")),
    "opencv",
]


def _encode(array: np.ndarray, fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, fmt)
    return buf.getvalue()


def test_default_is_pils_decompression_bomb_threshold():
    assert DEFAULT_MAX_PIXELS == 2 * Image.MAX_IMAGE_PIXELS == 178_956_970
    assert get_max_pixels() == DEFAULT_MAX_PIXELS


def test_set_max_pixels_returns_the_previous_limit_and_checks_its_argument():
    previous = set_max_pixels(1000)
    try:
        assert previous == DEFAULT_MAX_PIXELS and get_max_pixels() == 1000
        assert set_max_pixels(0) == 1000 and get_max_pixels() is None
        assert set_max_pixels(None) is None and get_max_pixels() is None
        for bad in (-1, 1.5, "10", True):
            with pytest.raises(ValueError, match="limit must be a non-negative number of pixels"):
                set_max_pixels(bad)
    finally:
        set_max_pixels(previous)
    with pixel_limit(10):
        assert get_max_pixels() == 10
    assert get_max_pixels() == DEFAULT_MAX_PIXELS


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "GIF", "BMP", "TIFF", "WEBP", "PPM"])
@pytest.mark.parametrize("decoder_name", DECODERS)
def test_every_format_is_refused_above_the_limit(monkeypatch, decoder_name, fmt):
    data = _encode(odd_images.picture(30, 40), fmt)
    decoder = get_decoder(decoder_name)
    with pixel_limit(30 * 40):
        assert decoder.decode(data).shape == (30, 40, 3)
    loads = []
    monkeypatch.setattr(pil_mod.ImageFile.ImageFile, "load", lambda self: loads.append(self) or None)
    with pixel_limit(30 * 40 - 1):
        for call in (decoder.decode, decoder.validate):
            with pytest.raises(DecodeError, match=r"^40×30 = 1200 pixels exceeds the limit of 1199 \(--max-pixels\)$"):
                call(data)
    assert loads == []  # refused from the header: Pillow never started decoding pixels


def test_the_limit_can_be_switched_off_for_sizes_pil_refuses():
    data = odd_images.jpeg_bomb(12000, 15000, progressive=False)  # 180 Mpx, just above PIL's threshold
    with pytest.raises(Image.DecompressionBombError):
        Image.open(io.BytesIO(data))
    for name in ("auto", "opencv"):
        decoder = get_decoder(name)
        with pytest.raises(DecodeError, match="12000×15000 = 180000000 pixels exceeds the limit of 178956970"):
            decoder.decode(data, scale=(1, 8))
        with pixel_limit(None):
            out = decoder.decode(data, scale=(1, 8))
            assert out.shape == (1875, 1500, 3) and (out == 128).all()
            assert decoder.read_size(data) == (15000, 12000)


def test_png_header_size_is_checked_before_pillow_decodes(monkeypatch):
    bomb = odd_images.png_bomb(30000, 30000)
    for name in ("auto", "opencv"):
        with pytest.raises(DecodeError, match="30000×30000 = 900000000 pixels exceeds the limit of 178956970"):
            get_decoder(name).decode(bomb)
