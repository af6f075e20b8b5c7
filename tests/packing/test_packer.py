"""Packing: round trips, bad files, determinism, shard bounds, atomic output and resume."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import lmdb
import numpy as np
import pytest

from fastdata.formats.manifest import Manifest
from fastdata.formats.tfrecord_framing import build_index
from fastdata.formats.tfrecord_index import read_index
from fastdata.packing.journal import JOURNAL_NAME
from fastdata.packing.packer import BadImageError, image_format, pack
from tests.images import make_image_folder, natural_image


def pil_rgb(data: bytes) -> np.ndarray:
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


def all_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("fmt", ["tfrecord", "lmdb"])
@pytest.mark.parametrize("keep_bytes", [True, False])
def test_round_trip_bytes_and_labels(image_folder, tmp_path, fmt, keep_bytes):
    from fastdata.datasets.shard_dataset import ShardDataset

    manifest = pack(
        image_folder.root, tmp_path, format=fmt, samples_per_shard=4, workers=2, progress=False, keep_bytes=keep_bytes
    )
    assert manifest.num_samples == len(image_folder.good)
    assert manifest.classes == image_folder.classes
    assert [s.num_samples for s in manifest.shards] == [4, 4, 4, 1]
    ds = ShardDataset(tmp_path)
    for i, (rel, label) in enumerate(image_folder.good):
        data, got_label = ds.read(i)
        source = (image_folder.root / rel).read_bytes()
        if keep_bytes or not source.startswith(b"\xff\xd8"):
            assert data == source, rel  # stored unchanged
        else:  # re-coded losslessly: PIL gives the original file's pixels
            assert data != source and np.array_equal(pil_rgb(data), pil_rgb(source)), rel
        assert got_label == label
    assert ds.targets.tolist() == [label for _, label in image_folder.good]


def test_manifest_fields(image_folder, tmp_path):
    pack(image_folder.root, tmp_path, format="tfrecord", samples_per_shard=5, workers=0, progress=False)
    data = json.loads((tmp_path / "manifest.json").read_text())
    assert data["format"] == "tfrecord" and data["version"] == 1
    assert data["num_samples"] == len(image_folder.good) and data["classes"] == image_folder.classes
    for shard in data["shards"]:
        assert (tmp_path / shard["path"]).is_file() and (tmp_path / shard["index"]).is_file()
        assert len(read_index(tmp_path / shard["index"])) == shard["num_samples"]
        assert np.array_equal(read_index(tmp_path / shard["index"]), build_index(tmp_path / shard["path"]))
    assert sorted(s["path"] for s in data["skipped"]) == image_folder.bad
    assert all(s["reason"] for s in data["skipped"])


def test_plain_lmdb_reader_gets_every_image(image_folder, tmp_path):
    """No fastdata and no pickle needed: lmdb + manifest + the JSON __meta__ key."""
    pack(image_folder.root, tmp_path, format="lmdb", samples_per_shard=5, workers=0, progress=False, keep_bytes=True)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    got = []
    for shard in manifest["shards"]:
        env = lmdb.open(str(tmp_path / shard["path"]), subdir=False, readonly=True, lock=False)
        with env.begin() as txn:
            meta = json.loads(txn.get(b"__meta__"))
            for j in range(shard["num_samples"]):
                got.append((meta["filenames"][j], meta["labels"][j], txn.get(f"{j:08d}".encode())))
        env.close()
    assert [(f, lab) for f, lab, _ in got] == image_folder.good
    assert all(data == (image_folder.root / f).read_bytes() for f, _, data in got)


def test_deterministic_and_independent_of_workers(image_folder, tmp_path):
    for fmt in ("tfrecord", "lmdb"):
        pack(image_folder.root, tmp_path / f"a{fmt}", format=fmt, samples_per_shard=3, workers=0, progress=False)
        pack(image_folder.root, tmp_path / f"b{fmt}", format=fmt, samples_per_shard=3, workers=2, progress=False)
        assert all_files(tmp_path / f"a{fmt}") == all_files(tmp_path / f"b{fmt}")


def test_shuffle_seed(image_folder, tmp_path):
    from fastdata.datasets.shard_dataset import ShardDataset

    same = {"format": "tfrecord", "workers": 0, "progress": False, "keep_bytes": True}
    pack(image_folder.root, tmp_path / "s1", shuffle_seed=3, **same)
    pack(image_folder.root, tmp_path / "s2", shuffle_seed=3, **same)
    pack(image_folder.root, tmp_path / "s3", shuffle_seed=4, **same)
    assert all_files(tmp_path / "s1") == all_files(tmp_path / "s2")
    order = [ShardDataset(tmp_path / "s1").read(i)[0] for i in range(len(image_folder.good))]
    sources = [(image_folder.root / rel).read_bytes() for rel, _ in image_folder.good]
    assert sorted(order) == sorted(sources) and order != sources
    assert all_files(tmp_path / "s1") != all_files(tmp_path / "s3")


def test_shard_size_bound(tmp_path):
    src = tmp_path / "src"
    info = make_image_folder(src, with_bad=False)
    manifest = pack(src, tmp_path / "out", format="tfrecord", shard_size=20_000, workers=0, progress=False)
    assert len(manifest.shards) > 2
    largest = max((src / rel).stat().st_size for rel, _ in info.good)
    for shard in manifest.shards:  # a shard only goes over the bound when one record alone is larger
        assert shard.nbytes <= 20_000 or shard.num_samples == 1 or shard.nbytes <= 20_000 + largest


def test_bad_files_skipped_and_strict_refuses(image_folder, tmp_path):
    manifest = pack(image_folder.root, tmp_path / "ok", format="lmdb", workers=2, progress=False)
    reasons = {s.path: s.reason for s in manifest.skipped}
    assert sorted(reasons) == image_folder.bad
    assert reasons["cat/z_empty.png"] == "empty file"
    assert "truncated" in reasons["bee/z_truncated.jpg"]
    with pytest.raises(BadImageError, match="z_truncated"):
        pack(image_folder.root, tmp_path / "strict", format="tfrecord", strict=True, workers=0, progress=False)
    assert not (tmp_path / "strict" / "manifest.json").exists()
    assert not list((tmp_path / "strict").glob("*.tmp"))


def test_max_side_reencodes(tmp_path):
    import cv2

    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    rgb = natural_image(np.random.default_rng(0), 300, 200)
    cv2.imwrite(str(src / "a" / "big.png"), rgb)
    cv2.imwrite(str(src / "a" / "small.jpg"), rgb[:50, :40])
    from fastdata.datasets.shard_dataset import ShardDataset

    pack(src, tmp_path / "out", format="tfrecord", max_side=128, quality=80, workers=0, progress=False, keep_bytes=True)
    ds = ShardDataset(tmp_path / "out")
    big, small = ds.read(0)[0], ds.read(1)[0]
    assert image_format(big) == "JPEG" and ds[0][0].shape == (128, 85, 3)
    assert small == (src / "a" / "small.jpg").read_bytes()  # already small: stored unchanged


def test_refuses_existing_dataset_unless_overwrite(image_folder, tmp_path):
    pack(image_folder.root, tmp_path, format="lmdb", workers=0, progress=False)
    with pytest.raises(FileExistsError, match="--resume.*--overwrite"):
        pack(image_folder.root, tmp_path, format="lmdb", workers=0, progress=False)
    (tmp_path / "keep.txt").write_text("user file")
    m = pack(image_folder.root, tmp_path, format="tfrecord", overwrite=True, workers=0, progress=False)
    assert m.format == "tfrecord" and not list(tmp_path.glob("*.lmdb")) and (tmp_path / "keep.txt").exists()
    again = pack(image_folder.root, tmp_path, format="tfrecord", resume=True, workers=0, progress=False)
    assert again.to_dict() == m.to_dict()  # resuming a finished pack changes nothing


def test_option_errors(image_folder, tmp_path):
    with pytest.raises(ValueError, match="unknown format 'zip'.*lmdb, tfrecord"):
        pack(image_folder.root, tmp_path, format="zip")
    with pytest.raises(ValueError, match="quality"):
        pack(image_folder.root, tmp_path, format="lmdb", max_side=64, quality=0)
    with pytest.raises(ValueError, match="exclude"):
        pack(image_folder.root, tmp_path, format="lmdb", resume=True, overwrite=True)
    with pytest.raises(FileNotFoundError):
        pack(tmp_path / "missing", tmp_path / "o", format="lmdb")


def test_resume_with_other_options_is_refused(image_folder, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / JOURNAL_NAME).write_text(json.dumps({"fingerprint": "something else"}) + "\n")
    with pytest.raises(ValueError, match="different input or with different options"):
        pack(image_folder.root, out, format="lmdb", resume=True, workers=0, progress=False)


SLOW_PACK = """
import importlib, sys, time
p = importlib.import_module("fastdata.packing.pipeline")  # where each image is loaded
real = p._load
def slow(job):
    time.sleep(0.02)
    return real(job)
p._load = slow
from fastdata.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def many_images(tmp_path_factory):
    import cv2

    root = tmp_path_factory.mktemp("many")
    rng = np.random.default_rng(5)
    for k in range(120):
        d = root / f"c{k % 3}"
        d.mkdir(exist_ok=True)
        cv2.imwrite(str(d / f"{k:04d}.jpg"), natural_image(rng, 40 + k % 7, 50))
    (root / "c1" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 nope")
    return root


def _run_pack(src, out, fmt, *extra):
    cmd = [
        sys.executable,
        "-c",
        SLOW_PACK,
        "pack",
        str(src),
        str(out),
        "--format",
        fmt,
        "--samples-per-shard",
        "7",
        "--workers",
        "0",
        "--no-progress",
        *extra,
    ]
    from tests.packing.slow_pack import terminal_signals

    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=terminal_signals)


@pytest.mark.slow
@pytest.mark.parametrize("fmt,sig", [("tfrecord", signal.SIGKILL), ("lmdb", signal.SIGKILL), ("lmdb", signal.SIGINT)])
def test_interrupted_pack_resumes_byte_identical(many_images, tmp_path, fmt, sig):
    reference = tmp_path / "reference"
    pack(many_images, reference, format=fmt, samples_per_shard=7, workers=0, progress=False)

    out = tmp_path / "out"
    proc = _run_pack(many_images, out, fmt)
    journal = out / JOURNAL_NAME
    deadline = time.monotonic() + 120
    while True:  # wait until 3 shards are durable, then interrupt mid-shard
        if journal.exists() and len(journal.read_text().splitlines()) >= 4:
            break
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the pack did not get 3 shards in: rc={proc.poll()} {proc.communicate()}")
        time.sleep(0.005)
    time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0, "the pack finished before it could be interrupted"
    assert not (out / "manifest.json").exists()
    if sig == signal.SIGINT:
        assert proc.returncode == 130 and "--resume" in err and "Traceback" not in err
    complete = {p.name: p.stat().st_mtime_ns for p in out.glob("shard-*") if not p.name.endswith(".tmp")}
    assert len(complete) >= 3

    refused = _run_pack(many_images, out, fmt)
    assert refused.wait(timeout=60) == 2  # an interrupted pack is not silently overwritten

    proc = _run_pack(many_images, out, fmt, "--resume")
    out_text, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    for name, mtime in complete.items():  # complete shards were not redone
        if (out / name).exists() and name.endswith((".tfrecord", ".lmdb")):
            assert (out / name).stat().st_mtime_ns == mtime, name
    assert all_files(out) == all_files(reference)
    assert Manifest.load(out).skipped[0].path == "c1/broken.jpg"


def test_output_not_writable(image_folder, tmp_path):
    if os.geteuid() == 0:
        blocker = tmp_path / "file"
        blocker.write_text("x")
        with pytest.raises(FileExistsError, match="is a file"):
            pack(image_folder.root, blocker, format="lmdb", progress=False)
        return
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    with pytest.raises(PermissionError, match="not writable"):
        pack(image_folder.root, ro, format="lmdb", progress=False)
