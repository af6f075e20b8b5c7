"""Packing as PIL sees images: decompression bombs refused from the header, lenient JPEGs packed with their
warnings recorded, codec logs kept off the terminal, and the empty dataset."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fastdata.cli import main
from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.decode import DEFAULT_MAX_PIXELS, DecodeError, pixel_limit
from fastdata.formats.example import ImageRecord
from fastdata.formats.manifest import Manifest
from fastdata.packing.check import describe, verify
from fastdata.packing.packer import NothingPackedError, pack
from fastdata.packing.writer import ShardWriter

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import odd_images  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GB = 1_000_000_000


def _jpeg(seed: int = 0, height: int = 48, width: int = 64) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(odd_images.picture(height, width, seed=seed)).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def _write(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def _corrupt_deflate_tiff() -> bytes:
    """A deflate TIFF whose zlib checksum is wrong: PIL refuses it, and libtiff prints why on stderr."""
    buf = io.BytesIO()
    Image.fromarray(odd_images.picture(30, 40)).save(buf, "TIFF", compression="tiff_deflate")
    image = Image.open(io.BytesIO(buf.getvalue()))
    end = image.tag_v2[273][0] + image.tag_v2[279][0]
    data = bytearray(buf.getvalue())
    data[end - 1] ^= 0xFF
    return bytes(data)


_BOMB_SCRIPT = textwrap.dedent("""
    import json, resource, sys
    from fastdata.datasets.shard_dataset import ShardDataset
    from fastdata.decode import DecodeError
    from fastdata.packing.packer import pack
    from fastdata.transforms import RandomResizedCrop

    src, out, lenient = sys.argv[1:4]
    manifest = pack(src, out, format="tfrecord", workers=0, progress=False)
    report = {"skipped": {s.path: s.reason for s in manifest.skipped}, "packed": manifest.num_samples}
    # A stored bomb must be refused by every reader before it allocates (with and without a manifest).
    report["reads"] = []
    for dataset in (ShardDataset(lenient), ShardDataset(lenient + "/shard-00000.tfrecord"),
                    ShardDataset(lenient, transform=RandomResizedCrop(224))):
        try:
            dataset[0]
            report["reads"].append("decoded")
        except DecodeError as exc:
            report["reads"].append(str(exc))
    # This process's own peak is VmHWM: getrusage(RUSAGE_SELF) also counts the peak of the process that started
    # us (Linux carries it across exec), i.e. the whole pytest session.
    own = int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1])
    peak_kb = max(own, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    report["peak_bytes"] = peak_kb * 1024
    print(json.dumps(report))
""")


def test_bombs_are_skipped_from_their_header_and_refused_by_readers_in_little_memory(tmp_path):
    png, jpeg = odd_images.png_bomb(30000, 30000), odd_images.jpeg_bomb(20000, 20000)
    assert len(png) < 1_000_000 and len(jpeg) < 1_000_000
    for bomb in (png, jpeg):
        with pytest.raises(Image.DecompressionBombError):  # PIL refuses them too
            Image.open(io.BytesIO(bomb))
    src = _write(tmp_path / "src", {"a/png_bomb.png": png, "a/jpeg_bomb.jpg": jpeg, "a/ok.jpg": _jpeg()})
    _store_unchecked(tmp_path / "lenient", jpeg)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run(
        [sys.executable, "-c", _BOMB_SCRIPT, str(src), str(tmp_path / "out"), str(tmp_path / "lenient")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    limit = DEFAULT_MAX_PIXELS
    assert report["packed"] == 1
    assert report["skipped"] == {
        "a/png_bomb.png": f"30000×30000 = 900000000 pixels exceeds the limit of {limit} (--max-pixels)",
        "a/jpeg_bomb.jpg": f"20000×20000 = 400000000 pixels exceeds the limit of {limit} (--max-pixels)",
    }
    assert report["reads"] == [f"20000×20000 = 400000000 pixels exceeds the limit of {limit} (--max-pixels)"] * 3
    assert report["peak_bytes"] < GB, f"peak RSS {report['peak_bytes'] / 1e6:.0f} MB"


def _store_unchecked(root: Path, image: bytes) -> None:
    """A one-image TFRecord dataset written without decoding its image (as a third party might)."""
    root.mkdir()
    with ShardWriter(root, format="tfrecord") as writer:
        writer.write(ImageRecord(image, 0, "a", "a/bomb.jpg", "JPEG"))
    Manifest(format="tfrecord", classes=["a"], shards=writer.shards).save(root)
    np.save(root / "targets.npy", np.zeros(1, np.int64))


def test_the_bomb_generators_make_valid_images():
    for data, size in ((odd_images.png_bomb(300, 200), (300, 200)), (odd_images.jpeg_bomb(300, 200), (300, 200))):
        image = Image.open(io.BytesIO(data))
        assert image.size == size
        pixels = np.asarray(image.convert("RGB"))
        assert pixels.shape == (200, 300, 3) and len(np.unique(pixels)) == 1


def test_max_pixels_option(image_folder, tmp_path):
    small = pack(image_folder.root, tmp_path / "small", format="lmdb", workers=0, progress=False, max_pixels=5000)
    reasons = {s.path: s.reason for s in small.skipped}
    assert reasons["cat/b_large.jpg"] == "410×300 = 123000 pixels exceeds the limit of 5000 (--max-pixels)"
    assert "bee/a_rgb.png" not in reasons and "cat/c.bmp" not in reasons  # 70x50 and 29x31 pixels
    assert small.options["max_pixels"] == 5000
    for off in (0, None):
        manifest = pack(
            image_folder.root, tmp_path / f"off{off}", format="lmdb", workers=0, progress=False, max_pixels=off
        )
        assert manifest.options["max_pixels"] is None
        assert not any("pixels exceeds" in s.reason for s in manifest.skipped)
    assert verify(tmp_path / "small").ok
    for bad in (-1, 2.5, "many"):
        with pytest.raises(ValueError, match="max_pixels must be a non-negative number of pixels"):
            pack(image_folder.root, tmp_path / "bad", format="lmdb", max_pixels=bad)


def test_cli_max_pixels(capsys, image_folder, tmp_path):
    code = main(
        [
            "pack",
            str(image_folder.root),
            str(tmp_path / "o"),
            "--format",
            "tfrecord",
            "--no-progress",
            "--max-pixels",
            "10000",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and "cat/b_large.jpg: 410×300 = 123000 pixels exceeds the limit of 10000 (--max-pixels)" in out


def test_readers_apply_the_process_limit_before_decoding(packed):
    root, info = packed
    dataset = ShardDataset(root)
    large = next(i for i, (rel, _) in enumerate(info.good) if rel == "cat/b_large.jpg")
    with pixel_limit(100_000):
        with pytest.raises(DecodeError, match="410×300 = 123000 pixels exceeds the limit of 100000"):
            dataset[large]
        assert dataset[0][0].shape == (97, 131, 3)
    assert dataset[large][0].shape == (300, 410, 3)


def test_lenient_jpeg_is_packed_and_codec_messages_are_recorded_not_printed(capfd, tmp_path):
    junk = odd_images.jpeg_with_junk(_jpeg(1), 0xC0)
    src = _write(
        tmp_path / "src",
        {
            "a/junk.jpg": junk,
            "a/ok.jpg": _jpeg(2),
            "b/bad.tif": _corrupt_deflate_tiff(),
            "b/ok.png": odd_images.apng_with_separate_default(),
        },
    )
    capfd.readouterr()
    code = main(["pack", str(src), str(tmp_path / "out"), "--format", "lmdb", "--no-progress", "--workers", "2"])
    out, err = capfd.readouterr()
    assert code == 0, err
    assert "Corrupt JPEG" not in out + err and "ZIPDecode" not in err  # nothing printed by libjpeg or libtiff
    assert "1 file(s) packed with codec warnings" in out
    manifest = Manifest.load(tmp_path / "out")
    assert manifest.num_samples == 3
    assert [(w.path, w.messages) for w in manifest.warnings] == [
        ("a/junk.jpg", ["Corrupt JPEG data: 3 extraneous bytes before marker 0xc0"])
    ]
    [skipped] = manifest.skipped
    assert skipped.path == "b/bad.tif"
    assert skipped.reason.startswith("corrupt TIFF") and "ZIPDecode: Decoding error" in skipped.reason
    text = describe(tmp_path / "out")
    assert "warnings  1 file(s) packed with codec warnings" in text and "a/junk.jpg: Corrupt JPEG data" in text
    assert verify(tmp_path / "out").ok
    assert "Corrupt JPEG" not in "".join(capfd.readouterr())  # verify keeps them quiet too
    with pytest.warns(UserWarning, match="extraneous bytes"):  # reading stays lenient, with libjpeg's warning
        image = ShardDataset(tmp_path / "out")[0][0]
    np.testing.assert_array_equal(image, np.asarray(Image.open(io.BytesIO(junk))))


@pytest.mark.parametrize("fmt", ["tfrecord", "lmdb"])
def test_empty_dataset(capsys, tmp_path, fmt):
    src = _write(tmp_path / "src", {"a/empty.jpg": b"", "b/garbage.png": b"not an image" * 5})
    with pytest.raises(NothingPackedError, match="nothing was packed: all 2 image"):
        pack(src, tmp_path / "refused", format=fmt, workers=0, progress=False)
    assert not any((tmp_path / "refused").iterdir())  # no dataset, no journal left behind
    code = main(["pack", str(src), str(tmp_path / "cli"), "--format", fmt, "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "nothing was packed" in err and "a/empty.jpg: empty file" in err and "--allow-empty" in err
    manifest = pack(src, tmp_path / "empty", format=fmt, workers=0, progress=False, allow_empty=True)
    assert manifest.num_samples == 0 and manifest.shards == [] and len(manifest.skipped) == 2
    dataset = ShardDataset(tmp_path / "empty")
    assert len(dataset) == 0 and dataset.classes == ["a", "b"] and dataset.targets.tolist() == []
    with pytest.raises(IndexError):
        dataset[0]
    assert verify(tmp_path / "empty").ok
    assert "samples   0" in describe(tmp_path / "empty")
    assert main(["pack", str(src), str(tmp_path / "cli2"), "--format", fmt, "--no-progress", "--allow-empty"]) == 0
    assert "the dataset is empty" in capsys.readouterr().out


def test_warnings_survive_a_resume_once(tmp_path, monkeypatch):
    junk = [odd_images.jpeg_with_junk(_jpeg(s), 0xC0, b"\x01" * (s + 1)) for s in range(3)]
    src = _write(tmp_path / "src", {"a/0.jpg": junk[0], "a/1.jpg": _jpeg(5), "a/2.jpg": junk[1], "a/3.jpg": junk[2]})
    reference = pack(src, tmp_path / "reference", format="tfrecord", samples_per_shard=1, workers=0, progress=False)
    assert [w.path for w in reference.warnings] == ["a/0.jpg", "a/2.jpg", "a/3.jpg"]
    real_write, calls = ShardWriter.write, []

    def interrupted(self, record):
        calls.append(record.filename)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real_write(self, record)

    monkeypatch.setattr(ShardWriter, "write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        pack(src, tmp_path / "out", format="tfrecord", samples_per_shard=1, workers=0, progress=False)
    monkeypatch.setattr(ShardWriter, "write", real_write)
    resumed = pack(
        src, tmp_path / "out", format="tfrecord", samples_per_shard=1, workers=0, progress=False, resume=True
    )
    assert resumed.warnings == reference.warnings
    assert (tmp_path / "out" / "manifest.json").read_bytes() == (tmp_path / "reference" / "manifest.json").read_bytes()
