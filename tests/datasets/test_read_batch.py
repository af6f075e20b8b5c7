"""``ShardDataset.read_batch`` (what ``__getitems__`` reads a batch with): ``read(i)`` of every index, byte for byte;
a damaged record, a label that disagrees with ``targets.npy`` and a rewritten shard refused as ``read`` refuses
them, naming the record and its sample; records of one batch untouched by the next."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.formats.base import CorruptRecordError, DatasetChangedError
from fastdata.sampler.seeding import SampleIndex


def test_same_records_as_read_in_batch_order(packed):
    ds = ShardDataset(packed[0])
    n = len(ds)
    order = np.random.default_rng(0).permutation(n).tolist()
    batch = order + [0, n - 1, -1, -n, order[0]]  # every sample, both ends, negative indices, a repeat
    batch += [SampleIndex(3, pass_key=1, position=0)]
    datas, labels = ds.read_batch(batch)
    assert labels.dtype == np.int64 and len(datas) == len(labels) == len(batch)
    for k, index in enumerate(batch):
        data, label = ds.read(index)
        assert type(datas[k]) is bytes and datas[k] == data and labels[k] == label, index
    empty_datas, empty_labels = ds.read_batch([])
    assert empty_datas == [] and empty_labels.shape == (0,)


def test_out_of_range_index(packed):
    ds = ShardDataset(packed[0])
    with pytest.raises(IndexError, match=f"index {len(ds)} is out of range for a dataset of {len(ds)} samples"):
        ds.read_batch([0, len(ds), 1])


def test_records_of_a_batch_are_not_changed_by_the_next(packed):
    ds = ShardDataset(packed[0])
    first, _ = ds.read_batch(list(range(6)))
    kept = [bytes(data) for data in first]
    ds.read_batch(list(range(6, len(ds))))
    ds.read_batch(list(range(6)))
    assert first == kept
    assert len({id(data) for data in first}) == len(first)  # one object per record, no shared buffer


@pytest.fixture(scope="module")
def tfrecord_pack(image_folder, tmp_path_factory):
    from fastdata.packing.packer import pack

    out = tmp_path_factory.mktemp("read_batch_tfrecord")
    pack(image_folder.root, out, format="tfrecord", samples_per_shard=5, workers=0, progress=False)
    return out


def _record(ds: ShardDataset, index: int) -> tuple[str, int, bytes]:
    """(shard path, position, the framed record's bytes) of sample ``index``."""
    shard = int(np.searchsorted(ds._starts, index, side="right")) - 1
    position, size = ds._locate(shard, index - int(ds._starts[shard]))
    path = ds._shard_paths[shard]
    with open(path, "rb") as f:
        f.seek(position)
        return path, position, f.read(size)


@pytest.mark.parametrize("where", ["length", "before the image", "image", "after the image", "footer"])
def test_damage_in_one_record_names_that_record(tfrecord_pack, tmp_path, where):
    root = tmp_path / "copy"
    shutil.copytree(tfrecord_pack, root)
    ds = ShardDataset(root)
    path, position, record = _record(ds, 7)
    image_at = record.index(ds.read(7)[0][:64])
    offset = {
        "length": 2,
        "before the image": image_at - 20,
        "image": image_at + 40,
        "after the image": len(record) - 10,
        "footer": len(record) - 2,
    }[where]
    with open(path, "r+b") as f:
        f.seek(position + offset)
        f.write(bytes([record[offset] ^ 0x10]))
    ds = ShardDataset(root)  # opened after the damage
    assert len(ds.read_batch([1, 2, 3])[0]) == 3
    with pytest.raises(CorruptRecordError) as info:
        ds.read_batch([1, 2, 7, 3])
    message = str(info.value)
    assert f"at {position}:" in message and "CRC mismatch" in message, message
    assert "sample 7" in message and "fastdata verify" in message, message


def test_label_that_disagrees_with_targets_is_refused(packed, tmp_path):
    from tests.packs import copy_with_wrong_target

    root = tmp_path / "copy"
    labels = copy_with_wrong_target(packed[0], root, 4)
    ds = ShardDataset(root)
    assert ds.read_batch([3, 5])[1].tolist() == [labels[3], labels[5]]
    with pytest.raises(CorruptRecordError, match="own label") as info:
        ds.read_batch([3, 4, 5])
    assert "sample 4" in str(info.value) and "fastdata verify" in str(info.value)


def test_shard_rewritten_in_place_is_refused(tfrecord_pack, tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(tfrecord_pack, root)
    ds = ShardDataset(root)
    ds.read_batch([0, 1])  # the shard is open
    path = ds._shard_paths[0]
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # written again (same bytes, new time)
    with pytest.raises(DatasetChangedError, match="rewritten in place"):
        ds.read_batch([0, 1])
