"""``fastdata.write``: a pack from a Python iterable, with pack's guarantees (validation, atomic shards, manifest last,
the lock, lossless re-coding), read back exactly by ShardDataset and passed by verify."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

import fastdata
from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.formats.manifest import Manifest
from fastdata.packing.check import verify
from fastdata.packing.lock import OutputLock, OutputLockedError
from fastdata.packing.pipeline import BadImageError
from tests.images import encode, natural_image


def pixels(data: bytes) -> np.ndarray:
    import io

    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


@pytest.fixture(scope="module")
def images() -> list[bytes]:
    rng = np.random.default_rng(3)
    return [encode(natural_image(rng, 24 + i, 40 - i), "PNG" if i % 4 == 3 else "JPEG", quality=90) for i in range(12)]


@pytest.mark.parametrize("fmt", ["tfrecord", "lmdb"])
@pytest.mark.parametrize("transcode", [True, False])
def test_a_written_pack_reads_back_exactly_and_verifies(tmp_path, images, fmt, transcode):
    samples = [
        (data, ["cat", "dog", "eel"][i % 3], {"score": i / 4, "box": [i, i + 1, i + 2, i + 3], "tag": f"t{i}"})
        for i, data in enumerate(images)
    ]
    manifest = fastdata.write(
        iter(samples),
        tmp_path,
        format=fmt,
        classes=["cat", "dog", "eel"],
        samples_per_shard=5,
        transcode=transcode,
        fields={"score": "float", "box": {"kind": "int_list", "shape": [4]}, "tag": "string"},
        progress=False,
        workers=2,
    )
    assert (
        manifest == Manifest.load(tmp_path) and len(manifest.shards) == 3 and manifest.classes == ["cat", "dog", "eel"]
    )
    assert verify(tmp_path).ok
    jpegs = sum(data[:2] == b"\xff\xd8" for data in images)
    assert manifest.transcoded_count == (jpegs if transcode else 0)
    ds = ShardDataset(tmp_path, fields=["score", "box", "tag"])
    assert len(ds) == len(images) and ds.targets.tolist() == [i % 3 for i in range(len(images))]
    for i, data in enumerate(images):
        stored, label = ds.read(i)
        if transcode and data[:2] == b"\xff\xd8":
            assert stored != data
            np.testing.assert_array_equal(pixels(stored), pixels(data))  # re-coded losslessly
        else:
            assert stored == data
        values = ds.read_fields(i)
        assert label == i % 3 and values["score"] == i / 4 and values["tag"] == f"t{i}"
        assert values["box"].tolist() == [i, i + 1, i + 2, i + 3]


def test_integer_labels_without_classes_and_types_from_the_first_sample(tmp_path, images):
    manifest = fastdata.write(
        ((data, 2 * (i % 2), {"n": i}) for i, data in enumerate(images)),
        tmp_path,
        format="lmdb",
        progress=False,
        workers=0,
    )
    assert manifest.classes == ["0", "1", "2"] and manifest.options["field_types"] == {
        "n": {"kind": "int", "shape": []}
    }
    assert ShardDataset(tmp_path, fields=["n"]).read_fields(5) == {"n": 5} and verify(tmp_path).ok


def test_a_bad_image_is_skipped_as_pack_skips_it_or_refused_with_strict(tmp_path, images):
    samples = [(images[0], 0), (b"\xff\xd8\xff not a jpeg", 1), (images[1], 1), (b"", 0)]
    manifest = fastdata.write(samples, tmp_path / "lax", progress=False, workers=0)
    assert manifest.num_samples == 2 and [s.path for s in manifest.skipped] == ["sample 1", "sample 3"]
    assert "empty file" in manifest.skipped[1].reason and verify(tmp_path / "lax").ok
    with pytest.raises(BadImageError, match="bad image sample 1"):
        fastdata.write(samples, tmp_path / "strict", strict=True, progress=False, workers=0)
    assert list((tmp_path / "strict").iterdir()) == []


def _failing(images, at: int):
    for i, data in enumerate(images * 3):
        if i == at:
            raise RuntimeError("the source broke")
        yield data, 0


@pytest.mark.parametrize("where", ["iterable", "label", "field", "type"])
def test_an_exception_midway_leaves_no_pack(tmp_path, images, where, monkeypatch):
    """Shards already published are removed with the journal: no manifest, no shard, nothing of this call."""
    import fastdata.packing.pipeline as pipeline

    monkeypatch.setattr(pipeline, "WINDOW", 4)  # samples are drawn 4 at a time: shards are written before the failure
    if where == "iterable":
        samples, error = _failing(images, 24), RuntimeError
    elif where == "label":
        samples, error = [(d, 0) for d in images] * 2 + [(images[0], 7)], ValueError
    elif where == "field":
        samples, error = [(d, 0, {"n": 1}) for d in images] * 2 + [(images[0], 0, {"n": 1.5})], ValueError
    else:
        samples, error = [(d, 0) for d in images] * 2 + [(pixels(images[0]), 0)], TypeError
    published = []
    with pytest.raises(error, match="broke|sample 24"):
        fastdata.write(
            samples,
            tmp_path,
            classes=["a", "b"],
            samples_per_shard=4,
            progress=False,
            workers=0,
            on_shard=published.append,
        )
    assert len(published) >= 5 and [p.name for p in tmp_path.iterdir() if p.name != ".fastdata.lock"] == []


def test_one_writer_at_a_time_and_no_silent_replacement(tmp_path, images):
    samples = [(d, 0) for d in images]
    with OutputLock(tmp_path), pytest.raises(OutputLockedError):
        fastdata.write(samples, tmp_path, progress=False, workers=0)
    fastdata.write(samples, tmp_path, progress=False, workers=0)
    with pytest.raises(FileExistsError, match="already holds a dataset"):
        fastdata.write(samples, tmp_path, progress=False, workers=0)
    assert fastdata.write(samples[:3], tmp_path, overwrite=True, progress=False, workers=0).num_samples == 3
    assert len(ShardDataset(tmp_path)) == 3


def test_bad_arguments_are_refused_in_one_line(tmp_path, images):
    with pytest.raises(ValueError, match="unknown format|format"):
        fastdata.write([], tmp_path, format="zip")
    with pytest.raises(TypeError, match="transcode must be True or False"):
        fastdata.write([], tmp_path, transcode="yes")
    with pytest.raises(ValueError, match="kind 'float64'"):
        fastdata.write([], tmp_path, fields={"x": "float64"})
    with pytest.raises(ValueError, match="s3://bucket/x"):
        fastdata.write([], "s3://bucket/x")
    with pytest.raises(TypeError, match="sample 0 must be"):
        fastdata.write([images[0]], tmp_path, progress=False)
