"""The native crop-region JPEG kernel (fastdata.decode._jpegcrop) and its wrapper (fastdata.decode.native)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import random
import shutil
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from tests.images import encode, natural_image

_jpegcrop = pytest.importorskip(
    "fastdata.decode._jpegcrop", reason="native JPEG kernel not built (python setup.py build_ext --inplace)"
)

from fastdata.decode import DecodeError, native  # noqa: E402 (after the skip)
from fastdata.decode.scaling import ANTIALIAS_HEADROOM  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


# ---- images -----------------------------------------------------------------------------


def _jpeg(array: np.ndarray, mode: str | None = None, **kwargs) -> bytes:
    return encode(array, "JPEG", mode, **kwargs)


def _cjpeg(array: np.ndarray, *args: str) -> bytes:
    cjpeg = shutil.which("cjpeg")
    if cjpeg is None:
        pytest.skip("cjpeg (apt-get install libjpeg-turbo-progs) is needed to make this JPEG")
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="PPM")
    return subprocess.run([cjpeg, *args], input=buf.getvalue(), capture_output=True, check=True).stdout


def _ycck(array: np.ndarray) -> bytes:
    turbojpeg = pytest.importorskip("turbojpeg")
    try:
        encoder = turbojpeg.TurboJPEG()
    except (OSError, RuntimeError):
        pytest.skip("libturbojpeg is needed to make a YCCK JPEG")
    cmyk = np.ascontiguousarray(np.asarray(Image.fromarray(array).convert("CMYK")))
    return encoder.encode(cmyk, quality=90, pixel_format=turbojpeg.TJPF_CMYK)  # TurboJPEG writes CMYK as YCCK


_RNG = np.random.default_rng(7)
_MID, _ODD, _TINY = natural_image(_RNG, 150, 203), natural_image(_RNG, 97, 131), natural_image(_RNG, 3, 5)

# name -> encoder; every kind of JPEG the kernel must decode like Pillow does.
KINDS = {
    "baseline420": lambda: _jpeg(_MID, quality=90),
    "baseline422": lambda: _jpeg(_MID, quality=90, subsampling=1),
    "baseline444": lambda: _jpeg(_MID, quality=90, subsampling=0),
    "progressive": lambda: _jpeg(_MID, quality=90, progressive=True),
    "restart": lambda: _jpeg(_MID, quality=90, restart_marker_blocks=3),
    "restart_rows_progressive": lambda: _jpeg(_ODD, quality=90, restart_marker_rows=1, progressive=True),
    "gray": lambda: _jpeg(_MID[..., 0], quality=90),
    "cmyk": lambda: _jpeg(_ODD, "CMYK", quality=92),
    "ycck": lambda: _ycck(_ODD),
    "odd_97x131": lambda: _jpeg(_ODD, quality=90),
    "odd_3x5": lambda: _jpeg(_TINY, quality=90),
    "arithmetic": lambda: _cjpeg(_MID, "-arithmetic", "-quality", "90"),
    "sample411": lambda: _cjpeg(_ODD, "-sample", "4x1", "-quality", "90"),
    "sample440": lambda: _cjpeg(_ODD, "-sample", "1x2", "-quality", "90"),
}


@pytest.fixture(scope="module", params=sorted(KINDS))
def kind(request) -> tuple[str, bytes]:
    return request.param, KINDS[request.param]()


def _full(data: bytes, scale=1) -> np.ndarray:
    """The whole image at DCT ``scale``: an int d for 1/d, or ``(num, denom)`` = M/8."""
    from fastdata.decode.scaling import scaled_size

    height, width = scaled_size(*native.read_header(data)[:2], (1, scale) if isinstance(scale, int) else scale)
    out = np.empty((height, width, 3), np.uint8)
    rows, cols, warned = _jpegcrop.Decompressor().decode_region(data, scale, 0, height, 0, width, out)
    assert (rows, cols, warned) == (height, width, 0)
    return out


def _boxes(rng: random.Random, height: int, width: int, n: int = 25) -> list[tuple[int, int, int, int]]:
    """Random boxes plus the edges and corners, in (y0, y1, x0, x1)."""
    boxes = [
        (0, height, 0, width),
        (0, 1, 0, width),
        (height - 1, height, 0, width),
        (0, height, width - 1, width),
        (0, min(height, 9), 0, min(width, 9)),
        (max(0, height - 9), height, max(0, width - 9), width),
        (height // 2, height, width // 3, width),
        (0, height // 2 + 1, 0, width // 2 + 1),
    ]
    for _ in range(n):
        y0, x0 = rng.randrange(height), rng.randrange(width)
        boxes.append((y0, rng.randint(y0 + 1, height), x0, rng.randint(x0 + 1, width)))
    return boxes


# ---- fidelity -----------------------------------------------------------------------------


def test_full_decode_equals_pillow(kind):
    name, data = kind
    ours = native.decode_full(data)
    pillow = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    assert ours.shape == pillow.shape
    # Pillow bundles its own libjpeg-turbo (3.x); the kernel uses the system one. Both use the
    # accurate integer IDCT and fancy upsampling, and the CMYK conversion is Pillow's formula.
    assert np.abs(ours.astype(np.int16) - pillow).max() <= 1, name


@pytest.mark.parametrize("denom", [1, 2, 4, 8, (3, 8), (5, 8), (3, 4), (7, 8)])
def test_region_equals_full_decode_crop(kind, denom):
    name, data = kind
    full = _full(data, denom)
    height, width = full.shape[:2]
    decompressor = _jpegcrop.Decompressor()
    rng = random.Random(f"{name}{denom}")
    for y0, y1, x0, x1 in _boxes(rng, height, width):
        out = np.full((y1 - y0, x1 - x0, 3), 17, np.uint8)
        assert decompressor.decode_region(data, denom, y0, y1, x0, x1, out) == (y1 - y0, x1 - x0, 0)
        expected = full[y0:y1, x0:x1]
        diff = np.abs(out.astype(np.int16) - expected)
        # The contract: exact inside, and at most a faint difference on the box's border.
        assert not diff[2:-2, 2:-2].any(), (name, denom, (y0, y1, x0, x1))
        assert diff.mean() <= 0.1, (name, denom, (y0, y1, x0, x1))
        # In fact exact everywhere: the kernel asks jpeg_crop_scanline for one extra column on
        # each side, so fancy upsampling's treatment of the crop edge never reaches the box.
        assert not diff.any(), (name, denom, (y0, y1, x0, x1))


def test_m8_decode_equals_libjpeg_turbo_scaled_decode():
    """Between the powers of two there is no PIL reference (``draft`` offers 1/2, 1/4 and 1/8 only), so the M/8
    decode of every kind TurboJPEG converts to RGB (all but CMYK/YCCK, whose M/8 decodes are checked against the
    full decode above) is checked against libjpeg-turbo's own TurboJPEG API at the same scaling factor (PyTurboJPEG),
    within the tolerance the full decode has against PIL."""
    from fastdata.decode.scaling import scaled_size

    turbojpeg = pytest.importorskip("turbojpeg")
    try:
        decoder = turbojpeg.TurboJPEG()
    except (OSError, RuntimeError):
        pytest.skip("libturbojpeg is not installed")
    compared = 0
    for name in sorted(set(KINDS) - {"cmyk", "ycck"}):
        data = KINDS[name]()
        full = native.read_header(data)[:2]
        for scale in ((3, 8), (5, 8), (3, 4), (7, 8)):
            size = scaled_size(*full, scale)
            if any(scaled_size(*full, (m, 8)) == size for m in range(scale[0] * 8 // scale[1] + 1, 9)):
                continue  # TurboJPEG takes the largest factor of an output size: here a larger one than asked for
            ours = native.decode_full(data, scale)
            theirs = decoder.decode(data, pixel_format=turbojpeg.TJPF_RGB, scaling_factor=scale)
            assert ours.shape == theirs.shape
            assert np.abs(ours.astype(np.int16) - theirs).max() <= 1, (name, scale)
            compared += 1
    assert compared >= 4 * (len(KINDS) - 3)  # every scale of every kind but the 3x5 image's collisions


def test_header(kind):
    name, data = kind
    image = Image.open(io.BytesIO(data))
    height, width, components, colorspace = native.read_header(data)
    assert (width, height) == image.size
    expected = {"gray": (1, 1), "cmyk": (4, 4), "ycck": (4, 5)}.get(name, (3, 3))
    assert (components, colorspace) == expected


def test_rgb_colorspace_jpeg():
    data = _cjpeg(_ODD, "-rgb", "-quality", "95")  # a JPEG stored as RGB (no YCbCr transform)
    assert native.read_header(data)[3] == 2
    pillow = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    assert np.abs(native.decode_full(data).astype(np.int16) - pillow).max() <= 1


# ---- decode_crop_into ---------------------------------------------------------------------


def _reference_crop(data: bytes, box, size, antialias=None, resample=None) -> np.ndarray:
    """Full decode at the chosen scale, numpy crop, resize: what decode_crop_into promises.

    ``"antialias"`` (antialias None): PIL's bilinear of the box (4x the output kept by the scale); else cv2.resize.
    """
    from fastdata.decode.scaling import choose_scale, headroom, scaled_box, scaled_size

    mode = resample or {None: "antialias", True: "area", False: "linear"}[antialias]
    room = headroom(mode)
    height, width = native.read_header(data)[:2]
    scale = choose_scale(native.NATIVE_SCALES, box[2], box[3], size[0] * room, size[1] * room)
    image = _full(data, scale)
    assert image.shape[:2] == scaled_size(height, width, scale)
    y0, y1, x0, x1 = scaled_box(box, scale, image.shape[:2])
    region = image[y0:y1, x0:x1]
    if mode == "antialias":
        f = scale[0] / scale[1]
        pil_box = (box[1] * f - x0, box[0] * f - y0, (box[1] + box[3]) * f - x0, (box[0] + box[2]) * f - y0)
        return np.asarray(Image.fromarray(region).resize(size[::-1], Image.BILINEAR, box=pil_box))
    if region.shape[:2] == size:
        return region.copy()
    shrink = size[0] <= region.shape[0] and size[1] <= region.shape[1]
    if mode == "fast":
        shrink = shrink and max(region.shape[0] / size[0], region.shape[1] / size[1]) >= 2.0
    interpolation = cv2.INTER_AREA if shrink and mode != "linear" else cv2.INTER_LINEAR
    return cv2.resize(region, (size[1], size[0]), interpolation=interpolation)


@pytest.mark.parametrize("antialias", [None, True, False])
def test_decode_crop_into_writes_the_batch_slot(antialias):
    rng = np.random.default_rng(3)
    photo = natural_image(rng, 375, 500)
    data = _jpeg(photo, quality=90)
    batch = np.zeros((4, 64, 48, 3), np.uint8)
    before = batch.__array_interface__["data"][0]
    boxes = [(0, 0, 375, 500), (10, 20, 300, 200), (374, 499, 1, 1), (100, 100, 64, 48), (0, 0, 130, 97)]
    for i, box in enumerate(boxes):
        slot = batch[i % 4]
        native.decode_crop_into(data, box, slot, antialias=antialias)
        assert slot.base is batch and batch.__array_interface__["data"][0] == before
        np.testing.assert_array_equal(batch[i % 4], _reference_crop(data, box, (64, 48), antialias))
    assert not np.array_equal(batch[1], np.zeros_like(batch[1]))


def test_decode_crop_into_same_size_and_whole_image():
    data = _jpeg(_MID, quality=90)
    out = np.empty((20, 30, 3), np.uint8)
    native.decode_crop_into(data, (5, 7, 20, 30), out)  # scale 1, region == out: decoded in place
    np.testing.assert_array_equal(out, _full(data)[5:25, 7:37])
    out = np.empty(_MID.shape, np.uint8)
    native.decode_crop_into(data, None, out)
    np.testing.assert_array_equal(out, _full(data))
    small = np.empty((19, 26, 3), np.uint8)  # 150x203 / 8 is 18.75 x 25.4 < 19x26: 1/4, resized (never enlarged)
    native.decode_crop_into(data, None, small, resample="fast")
    np.testing.assert_array_equal(small, cv2.resize(_full(data, 4), (26, 19), interpolation=cv2.INTER_AREA))
    square = _jpeg(_MID[:144, :200], quality=90)  # 144x200 / 8 is 18x25 exactly: the 1/8 decode itself
    small = np.empty((18, 25, 3), np.uint8)
    native.decode_crop_into(square, None, small, resample="fast")
    np.testing.assert_array_equal(small, _full(square, 8))
    native.decode_crop_into(square, None, small)  # antialias keeps 4x the output: 1/2, PIL's resize of it
    np.testing.assert_array_equal(small, np.asarray(Image.fromarray(_full(square, 2)).resize((25, 18), Image.BILINEAR)))


@pytest.mark.parametrize("resample, room", [("antialias", ANTIALIAS_HEADROOM), ("fast", 1)])
def test_decode_crop_into_matches_turbojpeg_path(resample, room):
    """Same pixels as RandomResizedCrop's path so far: PyTurboJPEG full decode at the scale, crop, resize."""
    from fastdata.decode import get_decoder
    from fastdata.decode.scaling import choose_scale, region_box, resize_into, scaled_box

    try:
        decoder = get_decoder("turbojpeg")
    except ImportError:
        pytest.skip("libturbojpeg is not installed")
    data = _jpeg(natural_image(np.random.default_rng(5), 375, 500), quality=90)
    rng = random.Random(11)
    for _ in range(20):
        h, w = rng.randint(20, 375), rng.randint(20, 500)
        box = (rng.randint(0, 375 - h), rng.randint(0, 500 - w), h, w)
        scale = choose_scale(decoder.scales, h, w, 56 * room, 56 * room)
        if scale != choose_scale(native.NATIVE_SCALES, h, w, 56 * room, 56 * room):
            continue  # 5/8: the kernel's own scale, not one of PyTurboJPEG's (SIMD) scales
        image = decoder.decode(data, scale=scale)
        y0, y1, x0, x1 = scaled_box(box, scale, image.shape)
        expected = np.empty((56, 56, 3), np.uint8)
        resize_into(np.ascontiguousarray(image[y0:y1, x0:x1]), expected, resample, region_box(box, scale, y0, x0))
        out = np.empty((56, 56, 3), np.uint8)
        native.decode_crop_into(data, box, out, resample=resample)
        assert np.abs(out.astype(np.int16) - expected).max() <= 1


def test_decode_crop_into_rejects_bad_arguments():
    data = _jpeg(_ODD, quality=90)
    with pytest.raises(ValueError, match="outside"):
        native.decode_crop_into(data, (90, 0, 10, 10), np.empty((8, 8, 3), np.uint8))
    with pytest.raises(ValueError, match="outside"):
        native.decode_crop_into(data, (0, 0, 0, 10), np.empty((8, 8, 3), np.uint8))
    with pytest.raises(ValueError, match="contiguous"):
        native.decode_crop_into(data, None, np.empty((8, 16, 3), np.uint8)[:, ::2])
    with pytest.raises(ValueError, match="uint8"):
        native.decode_crop_into(data, None, np.empty((8, 8, 3), np.float32))
    with pytest.raises(ValueError, match="scale"):
        native.decode_full(data, (3, 7))
    with pytest.raises(ValueError, match="scale"):
        native.decode_full(data, (9, 8))


def test_kernel_rejects_bad_boxes_and_buffers():
    data = _jpeg(_ODD, quality=90)  # 97 x 131; at 1/2: 49 x 66
    decompressor = _jpegcrop.Decompressor()
    for box in ((0, 50, 0, 66), (0, 49, 0, 67), (5, 5, 0, 1), (0, 1, 3, 2), (-1, 1, 0, 1)):
        with pytest.raises(ValueError, match="empty or outside"):
            decompressor.decode_region(data, 2, *box, bytearray(49 * 66 * 3))
    with pytest.raises(ValueError, match="needs 18"):
        decompressor.decode_region(data, 2, 0, 2, 0, 3, bytearray(17))
    for bad in (3, 16, 0, (9, 8), (1, 3), (0, 8)):
        with pytest.raises(ValueError, match="M/8"):
            decompressor.decode_region(data, bad, 0, 1, 0, 1, bytearray(3))
    assert decompressor.decode_region(data, (5, 8), 0, 61, 0, 82, bytearray(61 * 82 * 3)) == (61, 82, 0)
    with pytest.raises((TypeError, BufferError)):
        decompressor.decode_region(data, 1, 0, 1, 0, 1, b"read-only")
    assert decompressor.decode_region(data, 2, 0, 49, 0, 66, bytearray(49 * 66 * 3)) == (49, 66, 0)


# ---- errors -------------------------------------------------------------------------------


def test_errors_are_decode_errors():
    data = _jpeg(_MID, quality=90)
    out = np.empty((8, 8, 3), np.uint8)
    png = io.BytesIO()
    Image.fromarray(_TINY).save(png, format="PNG")
    cases = {
        b"": "empty file",
        b"this is not an image at all" * 10: "not a JPEG",
        png.getvalue(): "not a JPEG",
        data[:20]: "corrupt JPEG",
        data[:2] + b"\xff\xc0\x00\x11" + b"\x00" * 40: "corrupt JPEG",
    }
    for bad, message in cases.items():
        for call in (native.read_header, native.decode_full, lambda d: native.decode_crop_into(d, None, out)):
            with pytest.raises(DecodeError, match=message):
                call(bad)
    assert issubclass(_jpegcrop.JpegError, ValueError) and issubclass(DecodeError, ValueError)


def test_truncated_scan_decodes_with_warnings():
    data = _jpeg(_MID, quality=90)
    truncated = data[: len(data) * 6 // 10]
    height, width = _MID.shape[:2]
    decompressor = _jpegcrop.Decompressor()
    out = np.empty((height, width, 3), np.uint8)
    rows, cols, warned = decompressor.decode_region(truncated, 1, 0, height, 0, width, out)
    assert (rows, cols) == (height, width) and warned > 0
    assert "Premature end" in decompressor.last_warning
    np.testing.assert_array_equal(out[:40], _full(data)[:40])  # the rows before the cut are intact
    with pytest.warns(UserWarning, match="Premature end"):
        native.decode_crop_into(truncated, (10, 10, 100, 100), np.empty((50, 50, 3), np.uint8))
    decompressor.decode_region(data, 1, 0, 1, 0, 1, out)
    assert decompressor.last_warning is None


def test_decompressor_is_reusable_after_errors():
    good = _jpeg(_MID, quality=90, progressive=True)
    expected = _full(good)
    decompressor = _jpegcrop.Decompressor()
    out = np.empty_like(expected)
    height, width = expected.shape[:2]
    for bad in (b"", b"\xff\xd8\xff\xe0garbage", good[:30], good[:2] + b"\x00" * 100):
        with pytest.raises(_jpegcrop.JpegError):
            decompressor.decode_region(bad, 1, 0, height, 0, width, out)
        with pytest.raises(ValueError):  # a bad box after a header error, then a good decode
            decompressor.decode_region(good, 1, 0, height + 1, 0, width, out)
        out[:] = 0
        assert decompressor.decode_region(good, 1, 0, height, 0, width, out) == (height, width, 0)
        np.testing.assert_array_equal(out, expected)


def test_limits():
    data = _jpeg(_MID, quality=90, progressive=True)
    with pytest.raises(_jpegcrop.JpegError, match="too large"):
        _jpegcrop.Decompressor(max_pixels=100).header(data)
    with pytest.raises(_jpegcrop.JpegError, match="memory"):  # the progressive coefficient buffer
        _jpegcrop.Decompressor(max_memory=10_000).decode_region(data, 1, 0, 1, 0, 1, bytearray(3))
    with pytest.raises(_jpegcrop.JpegError, match="too many scans"):
        _jpegcrop.Decompressor(max_scans=3).decode_region(data, 1, 0, 1, 0, 1, bytearray(3))
    assert _jpegcrop.Decompressor(max_scans=100).decode_region(data, 1, 0, 1, 0, 1, bytearray(3)) == (1, 1, 0)


# ---- threads, switch ----------------------------------------------------------------------


def test_threads_match_sequential():
    rng = np.random.default_rng(9)
    images = [
        _jpeg(natural_image(rng, 120 + 13 * i, 160 - 7 * i), quality=88, progressive=i % 2 == 1) for i in range(6)
    ]
    boxes = [(i * 3, i * 5, 90, 100) for i in range(6)]

    def run(results: np.ndarray) -> None:
        for _ in range(10):
            for i, (data, box) in enumerate(zip(images, boxes, strict=False)):
                native.decode_crop_into(data, box, results[i])

    sequential = np.empty((6, 40, 44, 3), np.uint8)
    run(sequential)
    parallel = [np.zeros_like(sequential) for _ in range(2)]
    threads = [threading.Thread(target=run, args=(p,)) for p in parallel]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for result in parallel:
        np.testing.assert_array_equal(result, sequential)


def test_fastdata_native_switch(monkeypatch):
    monkeypatch.delenv("FASTDATA_NATIVE", raising=False)
    assert native.available()
    monkeypatch.setenv("FASTDATA_NATIVE", "0")
    assert not native.available()
    monkeypatch.setenv("FASTDATA_NATIVE", "1")
    assert native.available()


def test_without_the_extension():
    """An install without the kernel: available() is False and the decode functions raise ImportError."""
    code = (
        "import sys; sys.modules['fastdata.decode._jpegcrop'] = None\n"  # makes the import fail
        "from fastdata.decode import native\n"
        "assert not native.available()\n"
        "try:\n    native.read_header(b'x')\nexcept ImportError as exc:\n    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    assert "not built" in done.stdout


# ---- fuzz ---------------------------------------------------------------------------------


def _fuzz_tool():
    spec = importlib.util.spec_from_file_location("fuzz_jpeg", ROOT / "tools" / "fuzz_jpeg.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fuzz_damaged_jpegs_give_an_image_or_a_decode_error():
    """500 damaged JPEGs (tools/fuzz_jpeg.py runs 10,000, under ASan or valgrind)."""
    fuzz = _fuzz_tool()
    corpus = fuzz.build_corpus(small=True)
    decompressor = _jpegcrop.Decompressor(max_pixels=fuzz.DECOMPRESSOR_MAX_PIXELS)
    outcomes: dict[str, int] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for index in range(500):
            name, data, rng = fuzz.make_case(corpus, 99, index)
            outcome = fuzz.run_case(_jpegcrop, decompressor, data, rng)  # raises on anything but JpegError
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            if index % 50 == 0:  # and the wrapper turns every failure into DecodeError
                with contextlib.suppress(DecodeError):
                    native.decode_crop_into(data, None, np.empty((16, 16, 3), np.uint8))
    assert outcomes.get("error", 0) > 0 and outcomes.get("warn", 0) > 0 and outcomes.get("ok", 0) > 0, outcomes
