"""The kernel's restart-interval splice: a crop of a JPEG whose restart intervals tile its MCU rows is decoded from
only the intervals that cover it, with exactly the pixels of PIL's decode of the same file."""

from __future__ import annotations

import contextlib
import io
import random
import shutil
import subprocess
import warnings

import numpy as np
import pytest
from PIL import Image

from tests.decode.test_native import _cjpeg, _fuzz_tool, _jpeg, _reference_crop, _ycck
from tests.images import natural_image

_jpegcrop = pytest.importorskip(
    "fastdata.decode._jpegcrop", reason="native JPEG kernel not built (python setup.py build_ext --inplace)"
)

from fastdata.decode import DecodeError, native  # noqa: E402 (after the skip)
from fastdata.decode.scaling import scaled_size  # noqa: E402


def _jpegtran(data: bytes, restart: str) -> bytes:
    """``jpegtran -optimize -restart`` (lossless): ``NB`` puts a marker every N MCUs, ``N`` every N MCU rows."""
    jpegtran = shutil.which("jpegtran")
    if jpegtran is None:
        pytest.fail("jpegtran is missing: apt-get install libjpeg-turbo-progs (tools/setup.sh installs it)")
    return subprocess.run(
        [jpegtran, "-optimize", "-restart", restart], input=data, capture_output=True, check=True
    ).stdout


# name -> encoder of an RGB array; every sampling and colour space the kernel decodes.
KINDS = {
    "420": lambda a: _cjpeg(a, "-sample", "2x2", "-quality", "90"),
    "422": lambda a: _cjpeg(a, "-sample", "2x1", "-quality", "90"),
    "444": lambda a: _cjpeg(a, "-sample", "1x1", "-quality", "90"),
    "411": lambda a: _cjpeg(a, "-sample", "4x1", "-quality", "90"),
    "440": lambda a: _cjpeg(a, "-sample", "1x2", "-quality", "90"),
    "gray": lambda a: _cjpeg(a, "-grayscale", "-quality", "90"),
    "cmyk": lambda a: _jpeg(a, "CMYK", quality=92),
    "ycck": _ycck,
}
# 123 pixels wide is 4, 8 or 16 MCUs (none a whole MCU at the edge): intervals of 1, 2, 4 MCUs and a row all tile.
RESTARTS = ("1B", "2B", "4B", "1")
_IMAGE = natural_image(np.random.default_rng(21), 77, 123)
TINY_SIZES = ((1, 1), (3, 5), (8, 8), (9, 16), (16, 9), (17, 17), (5, 17))


def _boxes(rng: random.Random, height: int, width: int, n: int = 20) -> list[tuple[int, int, int, int]]:
    """``n`` boxes (y0, y1, x0, x1): one on each edge, the four corners, the whole image, then random ones."""
    h2, w2 = max(1, height // 3), max(1, width // 3)
    boxes = [
        (0, h2, w2 // 2, width - w2 // 2),
        (height - h2, height, 1 % width, width),  # top, bottom
        (h2 // 2, height - h2 // 2, 0, w2),
        (0, height, width - w2, width),  # left, right
        (0, h2, 0, w2),
        (0, h2, width - w2, width),
        (height - h2, height, 0, w2),
        (height - h2, height, width - w2, width),
        (0, height, 0, width),
    ]
    while len(boxes) < n:
        y0, x0 = rng.randrange(height), rng.randrange(width)
        boxes.append((y0, rng.randint(y0 + 1, height), x0, rng.randint(x0 + 1, width)))
    return boxes


def _pil(data: bytes, denom: int) -> np.ndarray:
    """PIL's decode at DCT scale 1/denom (``draft``), or None where PIL cannot scale that far."""
    image = Image.open(io.BytesIO(data))
    width, height = image.size
    target = (-(-height // denom), -(-width // denom))
    if denom > 1:
        image.draft("RGB", (max(1, width // denom), max(1, height // denom)))
    pixels = np.asarray(image.convert("RGB"))
    return pixels if pixels.shape[:2] == target else None


def _check(data: bytes, label: str) -> int:
    """Every scale (M/8 too), 20 boxes: the splice equals the ordinary region decode (and PIL at the powers of two,
    where PIL can scale); returns how many spliced."""
    spliced, plain = _jpegcrop.Decompressor(), _jpegcrop.Decompressor(splice=False)
    height, width = native.read_header(data)[:2]
    rng = random.Random(label)
    for denom in (1, 2, 4, 8, (3, 8), (5, 8), (3, 4), (7, 8)):
        pil = _pil(data, denom) if isinstance(denom, int) else None
        sh, sw = scaled_size(height, width, (1, denom) if isinstance(denom, int) else denom)
        full = np.empty((sh, sw, 3), np.uint8)
        plain.decode_region(data, denom, 0, sh, 0, sw, full)
        if pil is not None:
            assert np.array_equal(full, pil), (label, denom)
        for y0, y1, x0, x1 in _boxes(rng, sh, sw):
            out = np.full((y1 - y0, x1 - x0, 3), 7, np.uint8)
            assert spliced.decode_region(data, denom, y0, y1, x0, x1, out) == (y1 - y0, x1 - x0, 0)
            diff = np.abs(out.astype(np.int16) - full[y0:y1, x0:x1]).max()
            assert diff == 0, (label, denom, (y0, y1, x0, x1), diff)
    assert plain.spliced == 0
    return spliced.spliced


@pytest.mark.parametrize("restart", RESTARTS)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_splice_equals_pil(kind, restart):
    data = _jpegtran(KINDS[kind](_IMAGE), restart)
    assert _check(data, f"{kind}/{restart}") > 0, "the splice path was never taken"


@pytest.mark.parametrize("kind", ["420", "422", "444", "gray", "411", "440"])
def test_splice_tiny_images(kind):
    taken = 0
    for height, width in TINY_SIZES:
        image = natural_image(np.random.default_rng(height * 100 + width), height, width)
        for restart in ("1B", "1"):
            taken += _check(_jpegtran(KINDS[kind](image), restart), f"{kind}/{height}x{width}/{restart}")
    assert taken > 0 or kind == "411"  # 4:1:1 MCUs are 32 pixels wide: one per row at these sizes


def test_non_tiling_intervals_take_the_ordinary_path():
    """Intervals of 3 MCUs across 8-MCU rows, progressive and no-DRI files are decoded from the top, unchanged."""
    image = natural_image(np.random.default_rng(4), 64, 123)  # 4:2:0: 8 MCUs per row
    for data in (
        _jpeg(image, quality=90, restart_marker_blocks=3),
        _jpeg(image, quality=90),
        _jpeg(image, quality=90, progressive=True, restart_marker_blocks=1),
    ):
        assert _check(data, "ordinary") == 0


def test_decode_crop_into_counts_and_matches_the_reference():
    """The public path: RandomResizedCrop-like boxes on a 375x500 transcode, every DCT scale, counted as spliced."""
    photo = natural_image(np.random.default_rng(8), 375, 500)
    original = _jpeg(photo, quality=90)
    rng = random.Random(2)
    for restart in ("1B", "2B", "1"):
        data = _jpegtran(original, restart)
        before = native.spliced_count()
        calls = 0
        for size in ((224, 224), (96, 96), (40, 40), (20, 20)):  # scale 1, 1/2, 1/4, 1/8 for most boxes
            for _ in range(5):
                h, w = rng.randint(60, 375), rng.randint(60, 500)
                box = (rng.randint(0, 375 - h), rng.randint(0, 500 - w), h, w)
                out = np.empty((*size, 3), np.uint8)
                native.decode_crop_into(data, box, out)
                np.testing.assert_array_equal(out, _reference_crop(data, box, size))
                # transcoding is lossless: the original file gives the same crop
                np.testing.assert_array_equal(out, _reference_crop(original, box, size))
                calls += 1
        # a box whose intervals (with a pixel of margin) are all of them is decoded the ordinary way
        assert native.spliced_count() - before >= calls * 3 // 4, restart


def test_fuzzed_restart_records_give_an_image_or_a_decode_error():
    """500 damaged restart transcodes (bit flips, truncations, renumbered/dropped/stray RST markers); the 10,000-case
    AddressSanitizer run is ``python tools/fuzz_jpeg.py --asan --restart``."""
    fuzz = _fuzz_tool()
    corpus = fuzz.build_corpus(small=True, restart_only=True)
    decompressor = _jpegcrop.Decompressor(max_pixels=fuzz.DECOMPRESSOR_MAX_PIXELS)
    outcomes: dict[str, int] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for index in range(500):
            name, data, rng = fuzz.make_case(corpus, 5, index)
            outcome = fuzz.run_case(_jpegcrop, decompressor, data, rng)  # raises on anything but JpegError
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            if index % 25 == 0:
                with contextlib.suppress(DecodeError):
                    native.decode_crop_into(data, None, np.empty((16, 16, 3), np.uint8))
    assert outcomes.get("error", 0) > 0 and outcomes.get("ok", 0) > 0, outcomes
    assert decompressor.spliced > 0, "no fuzz case reached the splice"


def test_read_header_parses_the_same_bytes_once(monkeypatch):
    """The per-sample path asks for the header twice (read_size, then the decode): libjpeg parses it once."""
    data, other = _jpeg(_IMAGE, quality=90), _jpeg(_IMAGE[:40], quality=90)
    calls = []
    decompressor = native._decompressor()

    class Counting:
        def header(self, buf):
            calls.append(1)
            return decompressor.header(buf)

    monkeypatch.setattr(native, "_decompressor", lambda: Counting())
    assert native.read_header(data) == native.read_header(data) and len(calls) == 1
    assert native.read_header(other)[0] == 40 and native.read_header(data)[0] == 77 and len(calls) == 3
    mutable = bytearray(data)  # a buffer that may change is parsed every time
    native.read_header(mutable)
    native.read_header(mutable)
    assert len(calls) == 5
