"""Pack's lossless JPEG transcoding (fastdata.packing.transcode): same pixels as the original, restart intervals
tiling the MCU rows, baseline optimized Huffman, and how pack, --keep-bytes and --resume use it."""

from __future__ import annotations

import io
import shutil
import struct
import subprocess

import numpy as np
import pytest
from PIL import Image

from fastdata.decode import get_decoder
from fastdata.formats.manifest import Manifest
from fastdata.packing import transcode
from fastdata.packing.packer import pack
from tests.images import encode, natural_image

_RNG = np.random.default_rng(11)
_MID, _ODD = natural_image(_RNG, 150, 203), natural_image(_RNG, 97, 131)


def _cjpeg(array: np.ndarray, *args: str) -> bytes:
    """A JPEG written by libjpeg-turbo's cjpeg (tools/setup.sh installs libjpeg-turbo-progs with the test extra)."""
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="PPM")
    return subprocess.run(
        [shutil.which("cjpeg") or "cjpeg", *args], input=buf.getvalue(), capture_output=True, check=True
    ).stdout


def _jpegtran(data: bytes, *args: str) -> bytes:
    return subprocess.run(
        [shutil.which("jpegtran") or "jpegtran", *args], input=data, capture_output=True, check=True
    ).stdout


def _ycck(array: np.ndarray) -> bytes:
    import turbojpeg

    cmyk = np.ascontiguousarray(np.asarray(Image.fromarray(array).convert("CMYK")))
    return turbojpeg.TurboJPEG().encode(cmyk, quality=90, pixel_format=turbojpeg.TJPF_CMYK)  # written as YCCK


def _with_metadata(array: np.ndarray) -> bytes:
    """A JPEG with EXIF (orientation 6), an ICC profile and a comment: none of them change convert('RGB')."""
    from PIL import ImageCms

    exif = Image.Exif()
    exif[0x0112] = 6
    icc = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    return encode(array, "JPEG", quality=90, exif=exif.tobytes(), icc_profile=icc, comment=b"hello")


KINDS = {
    "baseline420": lambda: encode(_MID, "JPEG", quality=90),
    "baseline422": lambda: encode(_MID, "JPEG", quality=90, subsampling=1),
    "baseline444": lambda: encode(_ODD, "JPEG", quality=90, subsampling=0),
    "progressive": lambda: encode(_MID, "JPEG", quality=90, progressive=True),
    "restart_blocks": lambda: encode(_MID, "JPEG", quality=90, restart_marker_blocks=3),
    "restart_rows_progressive": lambda: encode(_ODD, "JPEG", quality=90, restart_marker_rows=1, progressive=True),
    "gray": lambda: encode(_MID[..., 0], "JPEG", quality=90),
    "gray_odd": lambda: encode(_ODD[..., 1], "JPEG", quality=85),
    "cmyk": lambda: encode(_ODD, "JPEG", "CMYK", quality=92),
    "ycck": lambda: _ycck(_ODD),
    "rgb_colorspace": lambda: _cjpeg(_ODD, "-rgb", "-quality", "95"),
    "arithmetic": lambda: _cjpeg(_MID, "-arithmetic", "-quality", "90"),
    "arithmetic_progressive": lambda: _cjpeg(_ODD, "-arithmetic", "-progressive", "-quality", "90"),
    "sample411": lambda: _cjpeg(_ODD, "-sample", "4x1", "-quality", "90"),
    "sample440": lambda: _cjpeg(_ODD, "-sample", "1x2", "-quality", "90"),
    "restart_cjpeg_rows": lambda: _cjpeg(_MID, "-restart", "2", "-quality", "90"),
    "restart_jpegtran_blocks": lambda: _jpegtran(encode(_ODD, "JPEG", quality=90), "-restart", "5B"),
    "metadata": lambda: _with_metadata(_ODD),
}
SIZES = [(h, w) for h in (1, 2, 7, 8, 9, 15, 16, 17) for w in (1, 3, 8, 13, 16, 17)]


def pil_rgb(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


def markers(data: bytes) -> list[tuple[int, bytes]]:
    """(marker code, payload) of every segment up to and including the first SOS (parsed here, not by libjpeg)."""
    assert data[:2] == b"\xff\xd8"
    found, at = [], 2
    while True:
        while data[at] == 0xFF and data[at + 1] == 0xFF:
            at += 1
        assert data[at] == 0xFF, at
        code, length = data[at + 1], struct.unpack(">H", data[at + 2 : at + 4])[0]
        found.append((code, data[at + 4 : at + 2 + length]))
        at += 2 + length
        if code == 0xDA:
            return found


def layout(data: bytes) -> dict:
    """What the header says: frame type, restart interval, MCUs per row and in all, and the RST markers in the data."""
    segs = markers(data)
    frames = [(code, p) for code, p in segs if code in (0xC0, 0xC1, 0xC2, 0xC9, 0xCA)]
    assert len(frames) == 1
    code, sof = frames[0]
    height, width, ncomp = struct.unpack(">HHB", sof[1:6])
    samp = [(sof[7 + 3 * c] >> 4, sof[7 + 3 * c] & 15) for c in range(ncomp)]
    hmax, vmax = max(h for h, _ in samp), max(v for _, v in samp)
    if ncomp == 1:
        per_row, rows = -(-width // 8), -(-height // 8)
    else:
        per_row, rows = -(-width // (8 * hmax)), -(-height // (8 * vmax))
    dri = [struct.unpack(">H", p)[0] for c, p in segs if c == 0xDD]
    body = data[sum(4 + len(p) for _, p in segs) + 2 :]
    rst = sum(body.count(bytes([0xFF, 0xD0 + k])) for k in range(8))
    return {
        "frame": code,
        "interval": dri[-1] if dri else 0,
        "per_row": per_row,
        "mcus": per_row * rows,
        "rst": rst,
        "scans": data.count(b"\xff\xda"),
        "codes": [c for c, _ in segs],
    }


def expected_interval(original: bytes, got: dict) -> int:
    """Pack's rule: K = 1 MCU, raised to hold MIN_INTERVAL_BYTES of the original on average, then to the divisor of the
    MCUs per row just above (just below where that is more than twice as many: a prime number of MCUs)."""
    wanted = max(transcode.RESTART_MCUS, -(-transcode.MIN_INTERVAL_BYTES * got["mcus"] // len(original)))
    divisors = [k for k in range(1, got["per_row"] + 1) if got["per_row"] % k == 0]
    up = min([k for k in divisors if k >= wanted], default=got["per_row"])
    return up if up <= 2 * wanted else max(k for k in divisors if k <= wanted)


@pytest.fixture(scope="module", params=sorted(KINDS))
def kind(request) -> tuple[str, bytes, bytes]:
    original = KINDS[request.param]()
    recoded = transcode.transcode_jpeg(original, fit=False)  # pack's K rule before the size fit (tested below)
    assert recoded is not None, request.param
    return request.param, original, recoded


def test_pixels_equal_pil_on_the_original(kind):
    name, original, recoded = kind
    expected = pil_rgb(original)
    np.testing.assert_array_equal(pil_rgb(recoded), expected, err_msg=name)
    np.testing.assert_array_equal(get_decoder("auto").decode(recoded), expected, err_msg=name)
    with Image.open(io.BytesIO(original)) as a, Image.open(io.BytesIO(recoded)) as b:
        assert (a.mode, a.size) == (b.mode, b.size)


def test_crops_of_the_recoded_file_equal_pil_crops(kind):
    from fastdata.decode import native

    name, original, recoded = kind
    if not native.available():
        pytest.skip("the native crop kernel is not built")
    expected = pil_rgb(original)
    height, width = expected.shape[:2]
    rng = np.random.default_rng(len(name))
    boxes = [(0, 1, 0, width), (height - 1, height, 0, width), (0, height, width - 1, width), (0, height, 0, 1)]
    for _ in range(20):
        y0, x0 = int(rng.integers(height)), int(rng.integers(width))
        boxes.append((y0, int(rng.integers(y0 + 1, height + 1)), x0, int(rng.integers(x0 + 1, width + 1))))
    from fastdata.decode import _jpegcrop

    for y0, y1, x0, x1 in boxes:
        out = np.empty((y1 - y0, x1 - x0, 3), np.uint8)
        _jpegcrop.Decompressor().decode_region(recoded, 1, y0, y1, x0, x1, out)
        np.testing.assert_array_equal(out, expected[y0:y1, x0:x1], err_msg=f"{name} {(y0, y1, x0, x1)}")


def test_restart_intervals_tile_mcu_rows_baseline_optimized(kind):
    name, original, recoded = kind
    got = layout(recoded)
    assert got["frame"] == 0xC0 and got["scans"] == 1, name  # baseline sequential Huffman, one scan
    assert got["interval"] == expected_interval(original, got), (name, got)
    assert got["rst"] == got["mcus"] // got["interval"] - 1, (name, got)  # every interval ends with its RST
    assert transcode.restart_interval(recoded) == (got["interval"], got["per_row"])
    assert 0xE1 not in got["codes"] and 0xE2 not in got["codes"] and 0xFE not in got["codes"]  # no EXIF, ICC, COM
    if name in ("cmyk", "ycck", "rgb_colorspace"):
        assert 0xEE in got["codes"], name  # Adobe APP14: the colour transform (none, YCCK) the decoder must apply
    else:
        assert 0xE0 in got["codes"], name  # JFIF: YCbCr (or grayscale)


@pytest.mark.parametrize("subsampling", [0, 1, 2])
def test_tiny_and_odd_sizes(subsampling):
    rng = np.random.default_rng(subsampling)
    for height, width in SIZES:
        original = encode(natural_image(rng, height, width), "JPEG", quality=90, subsampling=subsampling)
        recoded = transcode.transcode_jpeg(original, fit=False)
        assert recoded is not None
        np.testing.assert_array_equal(pil_rgb(recoded), pil_rgb(original), err_msg=f"{height}x{width}")
        got = layout(recoded)
        assert got["interval"] == expected_interval(original, got)
        assert got["per_row"] % got["interval"] == 0 and got["rst"] == got["mcus"] // got["interval"] - 1
        check_fit(original)


def check_fit(original: bytes) -> bytes:
    """Pack's re-code of a baseline JPEG: None (stored unchanged) or no larger, the same pixels, K raised from the
    rule's to a divisor of the MCUs per row only where the rule's K made it larger. Returns what pack stores."""
    fitted = transcode.transcode_jpeg(original)
    if fitted is None:
        return original
    assert len(fitted) <= len(original)
    np.testing.assert_array_equal(pil_rgb(fitted), pil_rgb(original))
    got, rule = layout(fitted), layout(transcode.transcode_jpeg(original, fit=False))
    assert got["per_row"] % got["interval"] == 0 and got["rst"] == got["mcus"] // got["interval"] - 1
    assert (
        got["interval"] == rule["interval"]
        if fitted == transcode.transcode_jpeg(original, fit=False)
        else (got["interval"] > rule["interval"])
    )
    return fitted


@pytest.mark.parametrize("name", ["progressive", "arithmetic"])
def test_fit_keeps_progressive_and_arithmetic_recoded(name):
    """The size fit raises K for them too, but never gives up the re-code: as they are they decode slowly."""
    original = KINDS[name]()
    fitted = transcode.transcode_jpeg(original)
    assert fitted is not None and layout(fitted)["frame"] == 0xC0
    np.testing.assert_array_equal(pil_rgb(fitted), pil_rgb(original))


def test_fit_raises_k_then_gives_up():
    """A baseline JPEG whose re-code is larger at the rule's K gets a larger K; larger at any K: None."""
    rng = np.random.default_rng(9)
    image = natural_image(rng, 240, 320)
    optimized = encode(image, "JPEG", quality=95, optimize=True)  # tables already optimal: markers are pure cost
    rule = transcode.transcode_jpeg(optimized, fit=False)
    assert len(rule) > len(optimized)
    fitted = transcode.transcode_jpeg(optimized)
    if fitted is not None:
        assert len(fitted) <= len(optimized) and layout(fitted)["interval"] > layout(rule)["interval"]
        np.testing.assert_array_equal(pil_rgb(fitted), pil_rgb(optimized))
    whole_rows = transcode._jpegtranscode.transcode(optimized, 1 << 16, 0, 1 << 62, False)
    assert (fitted is None) == (len(whole_rows) > len(optimized))


def test_photos_get_smaller():
    """Optimized Huffman tables pay for the restart markers on photo-like JPEGs (PIL's default tables, q90)."""
    rng = np.random.default_rng(5)
    originals = [encode(natural_image(rng, 375, 500), "JPEG", quality=90) for _ in range(6)]
    recoded = [transcode.transcode_jpeg(o, fit=False) for o in originals]
    assert sum(map(len, recoded)) < sum(map(len, originals))


def test_flat_images_do_not_grow():
    """One marker per MCU would make a flat image's tiny MCUs several times larger: K is raised instead."""
    flat = encode(np.full((1000, 1000, 3), 128, np.uint8), "JPEG", quality=90, subsampling=0, optimize=True)
    recoded = transcode.transcode_jpeg(flat, fit=False)
    got = layout(recoded)
    assert got["interval"] > 1 and got["per_row"] % got["interval"] == 0 and len(recoded) < 1.1 * len(flat)
    np.testing.assert_array_equal(pil_rgb(recoded), pil_rgb(flat))
    assert check_fit(flat) is flat  # an optimized flat file is larger re-coded at any K: pack keeps it
    photo = encode(natural_image(np.random.default_rng(2), 375, 500), "JPEG", quality=90)
    assert layout(transcode.transcode_jpeg(photo, fit=False))["interval"] == 1  # photos keep one MCU per interval


def test_files_it_cannot_recode_losslessly_give_none():
    good = encode(_MID, "JPEG", quality=90)
    assert transcode.transcode_jpeg(b"") is None
    assert transcode.transcode_jpeg(b"not a jpeg") is None
    assert transcode.transcode_jpeg(good[: len(good) // 2]) is None  # libjpeg warns (premature end): keep the bytes
    assert transcode.transcode_jpeg(encode(_MID, "PNG")) is None
    assert transcode.transcode_jpeg(good, max_pixels=100) is None
    assert transcode.transcode_jpeg(good) is not None
    at = good.find(b"\xff\xc0")
    assert transcode.transcode_jpeg(good[:at] + b"\x01\x02\x03" + good[at:]) is None  # a libjpeg warning


# ---- pack -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("transcode_src")
    for name, make in sorted(KINDS.items()):
        (root / "jpegs").mkdir(exist_ok=True)
        (root / "jpegs" / f"{name}.jpg").write_bytes(make())
    (root / "other").mkdir()
    (root / "other" / "a.png").write_bytes(encode(_ODD, "PNG"))
    good = encode(_ODD, "JPEG", quality=90)
    at = good.find(b"\xff\xc0")  # 3 extraneous bytes before the SOF: libjpeg warns, PIL decodes: stored unchanged
    (root / "other" / "b_damaged.jpg").write_bytes(good[:at] + b"\x01\x02\x03" + good[at:])
    return root


def _sources(root):
    return sorted(p for p in root.rglob("*") if p.is_file())


def _recoded(root) -> list[list[int]]:
    """The pack's re-coded samples as ``[start, stop)`` ranges, read from its manifest (and side file), checked."""
    from fastdata.formats.manifest_transcoded import TranscodedRecords

    return TranscodedRecords.load(root, Manifest.load(root)).ranges()


@pytest.mark.parametrize("fmt", ["tfrecord", "lmdb"])
def test_pack_default_transcodes_jpegs_and_keep_bytes_does_not(source, tmp_path, fmt):
    from fastdata.datasets.shard_dataset import ShardDataset

    files = _sources(source)
    default = pack(source, tmp_path / "t", format=fmt, samples_per_shard=4, workers=2, progress=False)
    kept = pack(source, tmp_path / "k", format=fmt, samples_per_shard=4, workers=0, progress=False, keep_bytes=True)
    assert default.options["keep_bytes"] is False and kept.options["keep_bytes"] is True
    assert kept.transcoded_count == 0 and _recoded(tmp_path / "k") == []
    jpegs = [i for i, p in enumerate(files) if p.suffix == ".jpg" and "damaged" not in p.name]
    assert default.transcoded_count == len(jpegs) and _recoded(tmp_path / "t") == transcode.to_ranges(jpegs)
    ds_t, ds_k = ShardDataset(tmp_path / "t"), ShardDataset(tmp_path / "k")
    assert sum(len(ds_t.read(i)[0]) for i in jpegs) < sum(len(files[i].read_bytes()) for i in jpegs)
    for i, path in enumerate(files):
        original = path.read_bytes()
        assert ds_k.read(i)[0] == original
        record = ds_t.read(i)[0]
        assert (record != original) == (i in jpegs), path.name
        np.testing.assert_array_equal(pil_rgb(record), pil_rgb(original), err_msg=path.name)
        if i in jpegs:
            np.testing.assert_array_equal(get_decoder("auto").decode(record), pil_rgb(original), err_msg=path.name)


def test_resume_refuses_another_keep_bytes(source, tmp_path):
    out = tmp_path / "out"

    def stop_after_first(shard):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pack(source, out, format="tfrecord", samples_per_shard=4, workers=0, progress=False, on_shard=stop_after_first)
    with pytest.raises(ValueError, match=r"--keep-bytes is True \(the pack used False\)"):
        pack(
            source, out, format="tfrecord", samples_per_shard=4, workers=0, progress=False, resume=True, keep_bytes=True
        )
    resumed = pack(source, out, format="tfrecord", samples_per_shard=4, workers=0, progress=False, resume=True)
    whole = pack(source, tmp_path / "whole", format="tfrecord", samples_per_shard=4, workers=0, progress=False)
    assert resumed.to_dict() == whole.to_dict() and _recoded(out) == _recoded(tmp_path / "whole")
    with pytest.raises(ValueError, match="--keep-bytes"):  # the finished pack refuses too
        pack(
            source, out, format="tfrecord", samples_per_shard=4, workers=0, progress=False, resume=True, keep_bytes=True
        )


def test_manifest_transcoded_ranges_are_checked(tmp_path):
    base = {
        "version": 1,
        "format": "tfrecord",
        "classes": ["a"],
        "shards": [{"path": "s", "num_samples": 5, "nbytes": 100, "crc32c": "00000000"}],
    }
    assert Manifest.from_dict({**base, "transcoded": [[0, 2], [3, 5]]}).transcoded == [[0, 2], [3, 5]]
    assert Manifest.from_dict(base).transcoded is None
    for bad in ([[0, 6]], [[2, 2]], [[3, 5], [0, 1]], [[0]], [["0", 1]], "all"):
        with pytest.raises(ValueError, match="transcoded"):
            Manifest.from_dict({**base, "transcoded": bad})


def test_without_the_extension_pack_keeps_bytes(source, tmp_path, monkeypatch):
    monkeypatch.setattr(transcode, "_jpegtranscode", None)
    monkeypatch.setattr(transcode, "_warned", False)
    with pytest.warns(RuntimeWarning, match="stores JPEG bytes unchanged"):
        manifest = pack(source, tmp_path / "o", format="tfrecord", workers=0, progress=False)
    assert manifest.transcoded_count == 0 and manifest.options["keep_bytes"] is False


# ---- repack ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("old_fmt", "new_fmt"), [("tfrecord", None), ("lmdb", "tfrecord")])
def test_repack_round_trip(source, tmp_path, old_fmt, new_fmt):
    from fastdata.cli import main
    from fastdata.datasets.shard_dataset import ShardDataset
    from fastdata.packing.check import verify
    from fastdata.packing.repack import repack

    old = tmp_path / "old"
    kept = pack(
        source, old, format=old_fmt, samples_per_shard=4, workers=0, progress=False, keep_bytes=True, shuffle_seed=2
    )
    pack(
        source,
        tmp_path / "direct",
        format=new_fmt or old_fmt,
        samples_per_shard=4,
        workers=0,
        progress=False,
        shuffle_seed=2,
    )
    before = {p.name: p.read_bytes() for p in old.iterdir()}
    manifest = repack(old, tmp_path / "new", format=new_fmt, workers=2, progress=False)
    assert {p.name: p.read_bytes() for p in old.iterdir()} == before  # OLD untouched
    assert manifest.format == (new_fmt or old_fmt) and manifest.classes == kept.classes
    assert manifest.skipped == kept.skipped and manifest.warnings == kept.warnings
    assert _recoded(tmp_path / "new") == _recoded(tmp_path / "direct") and manifest.transcoded_count
    assert [s.num_samples for s in manifest.shards] == [s.num_samples for s in kept.shards]
    assert manifest.options["keep_bytes"] is False
    assert verify(tmp_path / "new").ok
    ds_old, ds_new, ds_direct = (ShardDataset(tmp_path / d) for d in ("old", "new", "direct"))
    assert ds_new.targets.tolist() == ds_old.targets.tolist()
    for i in range(len(ds_old)):
        (a, la), (b, lb) = ds_old.read(i), ds_new.read(i)
        assert la == lb and b == ds_direct.read(i)[0]  # what pack itself would have stored
        np.testing.assert_array_equal(pil_rgb(b), pil_rgb(a))
    assert main(["repack", str(old), str(tmp_path / "cli"), "--no-progress", "--workers", "0"]) == 0
    assert main(["repack", str(old), str(tmp_path / "cli"), "--no-progress"]) == 2  # NEW holds a dataset
    assert main(["repack", str(old), str(old), "--no-progress"]) == 2


def test_repack_refuses_a_damaged_pack(source, tmp_path):
    from fastdata.packing.repack import repack
    from tests.packs import flip_bit

    old = tmp_path / "old"
    manifest = pack(source, old, format="tfrecord", samples_per_shard=4, workers=0, progress=False)
    flip_bit(old / manifest.shards[1].path, 8 * 200)
    with pytest.raises(ValueError, match="fastdata verify"):
        repack(old, tmp_path / "new", workers=0, progress=False)
    assert not (tmp_path / "new" / "manifest.json").exists() and not list((tmp_path / "new").glob("shard-*"))


def _repack_killed_after(old, new, shards: int) -> None:  # in a forked child: SIGKILL once `shards` are published
    import os
    import signal

    from fastdata.packing import writer
    from fastdata.packing.repack import repack

    real, published = writer.ShardWriter.finish_shard, []

    def finish(self, *args, **kwargs):
        if len(published) == shards:
            os.kill(os.getpid(), signal.SIGKILL)
        published.append(real(self, *args, **kwargs))

    writer.ShardWriter.finish_shard = finish
    repack(old, new, format="lmdb", workers=0, progress=False)


@pytest.mark.parametrize("shards", [0, 2])
def test_a_repack_killed_midway_is_started_over_by_a_rerun(source, tmp_path, shards):
    """Round four's kill campaign: a repack killed after publishing some shards left them with no journal, and a
    rerun refused the folder as files "fastdata did not write". The repack now marks the folder first; a rerun of
    the same repack starts over and gives the uninterrupted run's bytes."""
    import multiprocessing

    from fastdata.packing.repack import repack
    from tests.packing.slow_pack import all_files

    old = tmp_path / "old"
    pack(source, old, format="tfrecord", samples_per_shard=3, workers=0, progress=False)
    repack(old, tmp_path / "reference", format="lmdb", workers=0, progress=False)
    fork = multiprocessing.get_context("fork")
    child = fork.Process(target=_repack_killed_after, args=(old, tmp_path / "new", shards))
    child.start()
    child.join(60)
    assert child.exitcode == -9
    assert len(list((tmp_path / "new").glob("shard-*.lmdb"))) == shards
    repack(old, tmp_path / "new", format="lmdb", workers=0, progress=False)
    assert all_files(tmp_path / "new") == all_files(tmp_path / "reference")
    with pytest.raises(FileExistsError, match="already holds a dataset"):  # a finished one is never replaced silently
        repack(old, tmp_path / "new", format="lmdb", workers=0, progress=False)


def _claim_all_as_ranges(m: dict) -> None:
    """An old-style manifest (before the per-shard counts) that lists every record as transcoded."""
    for key in ("transcoded_records", "transcoded_file", "transcoded_nbytes", "transcoded_crc32c"):
        m.pop(key, None)
    for shard in m["shards"]:
        shard.pop("transcoded", None)
    m["transcoded"] = [[0, m["num_samples"]]]


def _claim_all_as_counts(m: dict) -> None:
    for key in ("transcoded_file", "transcoded_nbytes", "transcoded_crc32c"):
        m.pop(key, None)
    for shard in m["shards"]:
        shard["transcoded"] = shard["num_samples"]
    m["transcoded_records"] = m["num_samples"]


@pytest.mark.parametrize("claim", [_claim_all_as_ranges, _claim_all_as_counts])
def test_verify_and_inspect_know_the_transcoded_records(source, tmp_path, claim):
    from fastdata.packing.check import describe, verify
    from tests.packs import edit_manifest

    manifest = pack(source, tmp_path, format="lmdb", samples_per_shard=4, workers=0, progress=False)
    recoded = manifest.transcoded_count
    assert f"transcoded {recoded} of {manifest.num_samples} records" in describe(tmp_path)
    assert verify(tmp_path).ok
    png = [i for i, p in enumerate(_sources(source)) if p.suffix == ".png"]
    edit_manifest(tmp_path, claim)  # claims every record
    assert f"transcoded {manifest.num_samples} of {manifest.num_samples} records" in describe(tmp_path)
    problems = verify(tmp_path).problems
    assert problems and all("lists it as transcoded" in p for p in problems)
    assert len(problems) == len(png) + 1  # the PNG has no JPEG header; the damaged JPEG has no restart interval


def test_damaged_jpegs_give_none_or_the_same_pixels():
    """Random damage (header edits, bit flips, cuts): None (stored unchanged), or a JPEG PIL decodes as the input."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    import odd_images

    rng = np.random.default_rng(16)
    sources = list(odd_images.jpeg_variants().values())
    recoded = 0
    for i in range(600):
        data = odd_images.corrupt(sources[i % len(sources)], rng)
        out = transcode.transcode_jpeg(data)
        if out is None:
            continue
        recoded += 1
        try:
            expected = pil_rgb(data)
        except Exception:  # noqa: BLE001 - PIL refuses what libjpeg re-coded silently (e.g. a cut file it pads)
            continue
        np.testing.assert_array_equal(pil_rgb(out), expected, err_msg=f"corruption {i}")
    assert recoded > 20  # some damage is harmless (a changed table value, a cut after the last scan)


def test_cli_keep_bytes(source, tmp_path, capsys):
    from fastdata.cli import main

    assert (
        main(
            [
                "pack",
                str(source),
                str(tmp_path / "k"),
                "--format",
                "lmdb",
                "--keep-bytes",
                "--no-progress",
                "--workers",
                "0",
            ]
        )
        == 0
    )
    assert main(["pack", str(source), str(tmp_path / "t"), "--format", "lmdb", "--no-progress", "--workers", "0"]) == 0
    assert (
        Manifest.load(tmp_path / "k").options["keep_bytes"] is True
        and Manifest.load(tmp_path / "k").transcoded_count == 0
    )
    assert (
        Manifest.load(tmp_path / "t").options["keep_bytes"] is False and Manifest.load(tmp_path / "t").transcoded_count
    )
    assert main(["pack", str(source), str(tmp_path / "k"), "--format", "lmdb", "--no-progress", "--resume"]) == 2
    assert "--keep-bytes is False (the pack used True)" in capsys.readouterr().err


@pytest.mark.parametrize(("profile", "count"), [("imagenet", 40), ("photos", 4)])
def test_generated_sets_keep_their_pixels_and_packs_are_no_larger(tmp_path, profile, count):
    """Every JPEG of a generated ImageNet-like set (and of the large-photo profile) re-codes to PIL's same pixels,
    and pack stores each baseline image in no more bytes than its source file (the size fit), the set in no more
    bytes than its sources."""
    import sys
    from pathlib import Path

    from fastdata.datasets.shard_dataset import ShardDataset

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    import make_imagenet_like

    src = tmp_path / "src"
    make_imagenet_like.generate(
        src, num_images=count, num_classes=2, seed=16, workers=1, progress=False, profile=profile, gray_fraction=0.2
    )
    files = sorted(p for p in src.rglob("*") if p.is_file())
    jpegs = [p.read_bytes() for p in files if p.read_bytes()[:2] == b"\xff\xd8"]
    assert len(jpegs) >= count * 3 // 4
    for data in jpegs:
        recoded = transcode.transcode_jpeg(data, fit=False)
        assert recoded is not None
        np.testing.assert_array_equal(pil_rgb(recoded), pil_rgb(data))
        got = layout(recoded)
        assert got["interval"] == expected_interval(data, got) and got["rst"] == got["mcus"] // got["interval"] - 1
    pack(src, tmp_path / "pack", format="tfrecord", workers=0, progress=False)
    dataset = ShardDataset(tmp_path / "pack")
    stored = [dataset.read(i)[0] for i in range(len(dataset))]
    sources = sorted((p.read_bytes() for p in files), key=pil_rgb_key)
    assert sum(map(len, stored)) <= sum(map(len, sources))
    for data, original in zip(sorted(stored, key=pil_rgb_key), sources, strict=False):  # paired by their pixels
        np.testing.assert_array_equal(pil_rgb(data), pil_rgb(original))
        progressive = original[:2] == b"\xff\xd8" and any(c in (0xC2, 0xC9, 0xCA) for c, _ in markers(original))
        assert len(data) <= len(original) or progressive  # those stay re-coded (they decode several times faster)


def pil_rgb_key(data: bytes) -> bytes:
    """A sort key that pairs a stored record with its source: a digest of PIL's pixels."""
    import hashlib

    return hashlib.sha1(pil_rgb(data).tobytes()).digest()


def test_every_engine_records_the_same_transcoded_records(source, tmp_path):
    from fastdata.packing.merge import merge

    opts = dict(format="lmdb", samples_per_shard=2, range_size=4, workers=0, progress=False)
    whole = pack(source, tmp_path / "whole", **opts)
    for i in range(3):
        pack(source, tmp_path / "parts", part=(i, 3), **opts)
    merged = merge(str(tmp_path / "parts"))
    assert len(whole.shards) > 2 and whole.transcoded_count and merged.to_dict() == whole.to_dict()
    for name in ["manifest.json"] + [s.path for s in whole.shards]:
        assert (tmp_path / "parts" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name
    for i in range(2):  # parts packed in the two modes are not merged
        pack(source, tmp_path / "mixed", part=(i, 2), keep_bytes=bool(i), **opts)
    with pytest.raises(ValueError, match=r"--keep-bytes is True \(part 0/2 used False\)"):
        merge(str(tmp_path / "mixed"))


def test_append_adds_its_transcoded_records_after_the_old(source, tmp_path):
    from fastdata.packing import verify

    out = tmp_path / "out"
    first = pack(source, out, format="tfrecord", samples_per_shard=3, workers=0, progress=False)
    shutil.copytree(out, tmp_path / "first")
    n = first.num_samples
    both = pack(
        source,
        out,
        format="tfrecord",
        samples_per_shard=3,
        workers=0,
        progress=False,
        append=True,
        allow_duplicates=True,
    )  # the same source again, on purpose
    ranges = _recoded(tmp_path / "first")
    assert first.transcoded_count and both.num_samples == 2 * n and both.transcoded_count == 2 * first.transcoded_count
    assert _recoded(out) == ranges + [[a + n, b + n] for a, b in ranges] and verify(out).ok
