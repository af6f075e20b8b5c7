"""At the scale users train: nothing per sample is copied into a process, read at open, or kept per record read.

- an LMDB reader keeps compact arrays per open shard, no Python object per record;
- a pickled ``ShardDataset`` (what every spawn/forkserver worker receives) does not grow with the samples;
- ``targets.npy`` is mapped, so workers share its pages (spawn and forkserver included) and read the right samples;
- opening a pack reads no ``.idx``: an index is read, and checked, where its shard is first read;
- packs written before the manifest recorded checksums still open and read.
"""

from __future__ import annotations

import pickle
import shutil
import tracemalloc

import pytest
from torch.utils.data import DataLoader

from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.formats.base import CorruptRecordError, DatasetChangedError
from fastdata.formats.manifest import Manifest
from tests.packs import edit_manifest, make_distinct_folder, pack_quietly, tiny_jpegs, write_pack


def test_an_lmdb_reader_keeps_a_few_bytes_a_record_not_an_object_per_record(tmp_path):
    """Reading every record of 4 shards of 2,000 leaves ~28 bytes a record held by their open readers (offsets,
    lengths, CRC32Cs, labels as arrays); a dict with a tuple per record held ~220."""
    per_shard = 2000
    ds = ShardDataset(write_pack(tmp_path / "lmdb", "lmdb", 5, per_shard))
    ds.read(4 * per_shard)  # one shard open first: the one-off costs of a first read are not counted
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(4 * per_shard):
            ds.read(i)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 48 * 4 * per_shard, f"{held / (4 * per_shard):.0f} bytes a record"


@pytest.mark.parametrize("fmt", ["tfrecord", "lmdb"])
def test_the_pickled_dataset_does_not_grow_with_the_samples(tmp_path, fmt):
    small = ShardDataset(write_pack(tmp_path / "small", fmt, 4, 250))
    large = ShardDataset(write_pack(tmp_path / "large", fmt, 4, 5000))
    sizes = []
    for ds in (small, large):
        assert ds.read(len(ds) - 1)[1] == (len(ds) - 1) % 10  # a shard open and located: not pickled either
        sizes.append(len(pickle.dumps(ds)))
        clone = pickle.loads(pickle.dumps(ds))
        assert clone.read(len(ds) - 2) == ds.read(len(ds) - 2) and clone.targets.tolist() == ds.targets.tolist()
    assert abs(sizes[1] - sizes[0]) < 300, sizes  # 1,000 vs 20,000 samples (24 bytes a sample before)
    assert not large.targets.flags.writeable  # the mapped file, never a copy


@pytest.fixture(scope="module")
def distinct_pack(tmp_path_factory):
    src = tmp_path_factory.mktemp("distinct")
    truth = make_distinct_folder(src, per_class=6, classes=("ant", "bee", "cat"))
    out = tmp_path_factory.mktemp("distinct_tfrecord")
    pack_quietly(src, out, "tfrecord", samples_per_shard=4)
    return out, truth


class LabelsCheck(ShardDataset):
    """(image bytes, label, whether this process maps targets.npy, labels this process holds, its shard list's type)."""

    def __getitem__(self, index):
        data, label = self.read(index)
        with open("/proc/self/maps") as f:
            mapped = any(line.rstrip().endswith("/" + self.manifest.targets) for line in f)
        held = sum(len(labels) for (labels,) in self._labels._entries.values())
        return data, label, mapped, held, type(self.manifest.shards).__name__


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_spawn_and_forkserver_workers_read_the_right_samples_holding_only_the_labels_of_their_shards(
    distinct_pack, context
):
    """A worker takes the labels of each shard it reads with one read of targets.npy: it neither maps the file nor
    holds a label of a shard it has not read (18 samples, 5 shards of at most 4)."""
    root, truth = distinct_pack
    ds = LabelsCheck(root)
    ds.read(0)
    loader = DataLoader(ds, batch_size=None, shuffle=True, num_workers=2, multiprocessing_context=context)
    seen = [(truth[data] == label, mapped, held, table) for data, label, mapped, held, table in loader]
    assert len(seen) == len(truth) and all(ok for ok, *_ in seen)
    assert not any(mapped for _, mapped, _, _ in seen)
    first = [held for *_, held, _ in seen][:2]  # each worker's first read: the labels of that one shard (4, or 2)
    assert all(held in (2, 4) for held in first), first
    assert {table for *_, table in seen} == {"ShardTable"}  # the unpickled pack's shard list, as columns


def test_the_pickled_dataset_does_not_grow_with_the_shards(tmp_path):
    """A spawn/forkserver worker's dataset is a few KB whatever the number of shards: the manifest's shard list is
    read again by the worker, checked against the identities the parent saw (190 bytes a shard were pickled before)."""
    sizes = []
    for shards in (2, 400):
        ds = ShardDataset(write_pack(tmp_path / f"tf{shards}", "tfrecord", shards, 2))
        blob = pickle.dumps(ds)
        sizes.append(len(blob))
        clone = pickle.loads(blob)
        assert len(clone) == len(ds) and [clone.read(i) for i in range(len(ds))] == [ds.read(i) for i in range(len(ds))]
        assert clone.manifest == ds.manifest and list(clone._shard_paths) == list(ds._shard_paths)
    assert abs(sizes[1] - sizes[0]) < 100, sizes


def test_an_unpickled_dataset_refuses_a_replaced_shard_or_manifest(tmp_path):
    root = write_pack(tmp_path / "tf", "tfrecord", 3, 2)
    ds = ShardDataset(root)
    blob = pickle.dumps(ds)
    shard = root / ds.manifest.shards[2].path
    data = shard.read_bytes()
    shard.unlink()
    shard.write_bytes(data)  # the same bytes in another file: not the file the parent checked
    clone = pickle.loads(blob)  # never raises (a worker would die unpickling it)
    for use in (lambda: clone.read(0), lambda: clone.read_batch([0, 1]), lambda: clone.targets):
        with pytest.raises(DatasetChangedError, match="a shard was replaced"):
            use()
    assert ds.read(0) == pickle.loads(pickle.dumps(ShardDataset(root))).read(0)
    manifest = root / "manifest.json"
    manifest.write_bytes(manifest.read_bytes())  # rewritten: another modification time
    with pytest.raises(DatasetChangedError, match="manifest.json was replaced"):
        pickle.loads(blob).read(0)
    assert "manifest.json" in repr(pytest.raises(DatasetChangedError, pickle.loads(blob).read_batch, [0]).value)


def test_a_changed_targets_file_is_refused_by_an_unpickled_dataset(distinct_pack, tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(distinct_pack[0], root)
    ds = ShardDataset(root)
    blob = pickle.dumps(ds)
    path = root / ds.manifest.targets
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data)  # the same labels in another file: not the file this dataset checked
    clone = pickle.loads(blob)  # unpickling never raises (a worker would die unpickling it): using it does
    for use in (lambda: clone.read(0), lambda: clone.targets):
        with pytest.raises(DatasetChangedError, match="re-packed"):
            use()
    assert ds.read(0) == ShardDataset(root).read(0)  # the open dataset keeps reading the file it mapped


def test_opening_reads_no_index_and_a_missing_one_is_reported_where_its_shard_is_read(tmp_path, monkeypatch):
    import fastdata.formats.tfrecord as tfrecord

    root = write_pack(tmp_path / "tf", "tfrecord", 4, 10)
    reads = []
    real = tfrecord.read_index
    monkeypatch.setattr(tfrecord, "read_index", lambda path, **kw: (reads.append(path), real(path, **kw))[1])
    index = root / Manifest.load(root).shards[2].index
    index.unlink()
    ds = ShardDataset(root)
    assert reads == [] and len(ds) == 40
    images = tiny_jpegs()
    assert [ds.read(i) for i in (0, 5, 9, 10)] == [(images[n % 7], n % 10) for n in (0, 5, 9, 10)]
    assert [p.name for p in reads] == ["shard-00000.idx", "shard-00001.idx"]  # once per shard, when first read
    with pytest.raises(FileNotFoundError, match="shard-00002.idx") as info:
        ds.read(20)
    assert "\n" not in str(info.value) and "fastdata verify" in str(info.value)
    index.write_bytes(b"0 16\n")  # not the index the manifest records: refused as damage, naming it
    with pytest.raises(CorruptRecordError, match="shard-00002.idx.*the manifest says"):
        ds.read(25)
    assert ds.read(39) == (images[39 % 7], 39 % 10)


@pytest.mark.parametrize("fmt", ["tfrecord", "lmdb"])
def test_a_pack_written_before_checksums_were_recorded_still_reads(tmp_path, fmt):
    root = write_pack(tmp_path / fmt, fmt, 3, 7)
    optional = ("targets_nbytes", "targets_crc32c", "index_nbytes", "index_crc32c", "meta_crc32c")
    edit_manifest(root, lambda m: [entry.pop(k, None) for entry in [m] + m["shards"] for k in optional])
    ds = ShardDataset(root)
    images = tiny_jpegs()
    assert [ds.read(i) for i in range(len(ds))] == [(images[n % 7], n % 10) for n in range(21)]
    assert ds.targets.tolist() == [n % 10 for n in range(21)]
    assert pickle.loads(pickle.dumps(ds)).read(20) == (images[20 % 7], 0)


def test_a_shuffle_over_hundreds_of_shards_reads_each_index_once(tmp_path, monkeypatch):
    """A process keeps as many shard indexes as it keeps shards open (1,024 by default): a full shuffle over 300
    shards reads each ``.idx`` once, not on nearly every read (64 were kept before: ImageNet's ~500-1,300 shards
    re-read and re-parsed an index on most reads)."""
    import random

    import fastdata.formats.tfrecord as tfrecord
    from tests.packs import write_tiny_shards

    root = write_tiny_shards(tmp_path / "tf", 300, per_shard=2)
    reads = []
    real = tfrecord.read_index
    monkeypatch.setattr(tfrecord, "read_index", lambda path, **kw: (reads.append(path.name), real(path, **kw))[1])
    ds = ShardDataset(root)
    order = list(range(len(ds))) * 2
    random.Random(0).shuffle(order)
    for start in range(0, len(order), 64):
        ds.read_batch(order[start : start + 64])
    assert len(reads) == 300 and len(set(reads)) == 300


def test_an_index_parses_the_same_on_the_fast_path_and_the_strict_one():
    """numpy's C text parse for plain ``offset size`` lines; the strict ``split`` parse (and its errors) otherwise."""
    import numpy as np

    from fastdata.formats.tfrecord_index import _parse_index

    rng = np.random.default_rng(0)
    numbers = rng.integers(0, 1 << 40, size=(500, 2))
    text = "".join(f"{a} {b}\n" for a, b in numbers).encode()
    assert np.array_equal(_parse_index(text), numbers.ravel())
    assert np.array_equal(_parse_index(text, chunk=100), numbers.ravel())  # cut into chunks of whole lines
    for odd in (b"1 2", b"\n", b"1  2\n\n3 4\n", b" 1 2\n", b"1 2 3\n4\n"):
        assert np.array_equal(_parse_index(odd), np.array(odd.split(), dtype=np.int64)), odd
    for bad, error in ((b"99999999999999999999 1\n", OverflowError), (b"1.5 2\n", ValueError), (b"1 x\n", ValueError)):
        with pytest.raises(error):
            _parse_index(bad)


def test_a_labels_file_truncated_under_a_reader_is_an_error_where_a_shard_is_next_read(tmp_path):
    """Labels are read a shard at a time from the open file: one cut short in place (fastdata never does that) is a
    CorruptRecordError naming it, never a SIGBUS from a mapping."""
    root = write_pack(tmp_path / "lmdb", "lmdb", 3, 4)
    ds = ShardDataset(root)
    assert ds.read(0)[1] == 0
    path = root / ds.manifest.targets
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 8 * 6)  # the last shard's labels and two of the middle one's
    assert ds.read(1)[1] == 1  # shard 0's labels were read with its first sample
    with pytest.raises(CorruptRecordError, match="targets.npy.*shorter"):
        ds.read(5)
