"""``pack --append``: new shards, a new manifest last; readers of the old manifest never see a mixture."""

from __future__ import annotations

import pytest

from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.formats.errors import DatasetChangedError
from fastdata.packing.check import verify
from fastdata.packing.packer import pack
from tests.packing.sources_data import make_samples, read_back, write_csv, write_image_folder


@pytest.mark.parametrize("fmt", ["tfrecord", "lmdb"])
def test_append_adds_shards_under_a_live_reader(fmt, tmp_path):
    samples = make_samples(20)
    first, second = samples[:12], samples[12:]
    out = tmp_path / "out"
    old = pack(
        write_image_folder(tmp_path / "a", first),
        out,
        format=fmt,
        samples_per_shard=4,
        workers=0,
        progress=False,
        keep_bytes=True,
    )
    reader = ShardDataset(out)
    before = [reader.read(i) for i in range(2)]  # opens shard 0 only
    manifest = pack(
        write_csv(tmp_path / "b", second),
        out,
        format=fmt,
        append=True,
        samples_per_shard=4,
        workers=0,
        progress=False,
        keep_bytes=True,
    )
    assert manifest.num_samples == 20 and manifest.shards[: len(old.shards)] == old.shards
    assert verify(out).ok
    # the old reader keeps reading the shard it opened, consistently, and is told about the others
    assert [reader.read(i) for i in range(2)] == before and len(reader) == 12
    with pytest.raises(DatasetChangedError):
        reader.read(11)
    _, records = read_back(out)
    old_records = records[:12]
    assert [r[:2] for r in records[12:]] == [(d, label) for d, label, _ in second]  # class names -> the old labels
    assert [r[:2] for r in old_records] == sorted(((d, label) for d, label, _ in first), key=lambda x: x[1])
    fresh = ShardDataset(out)
    assert len(fresh) == 20 and fresh.classes == old.classes


def test_append_adds_new_class_names_at_the_end(tmp_path):
    samples = make_samples(6)
    out = tmp_path / "out"
    pack(write_image_folder(tmp_path / "a", samples[:3]), out, format="lmdb", workers=0, progress=False)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x.jpg").write_bytes(samples[3][0])
    (tmp_path / "b" / "list.csv").write_text("path,label\nx.jpg,zebra\n")
    manifest = pack(tmp_path / "b" / "list.csv", out, format="lmdb", append=True, workers=0, progress=False)
    assert manifest.classes == ["ant", "bee", "cat", "zebra"]
    assert read_back(out)[1][-1][1:] == (3, "zebra")


def test_append_needs_a_finished_pack_of_the_same_format(tmp_path):
    samples = make_samples(3)
    src = write_image_folder(tmp_path / "a", samples)
    with pytest.raises(FileNotFoundError):
        pack(src, tmp_path / "empty", format="lmdb", append=True, workers=0, progress=False)
    pack(src, tmp_path / "out", format="lmdb", workers=0, progress=False)
    with pytest.raises(ValueError, match="--format lmdb"):
        pack(src, tmp_path / "out", format="tfrecord", append=True, workers=0, progress=False)
