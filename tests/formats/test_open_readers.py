"""Open shard readers per process: an LRU of at most ``max_open_shards``, closed on eviction, checked on re-open."""

from __future__ import annotations

import errno
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

import fastdata.formats.open_readers as open_readers
from fastdata import ShardDataset
from fastdata.formats.base import DatasetChangedError
from fastdata.formats.open_readers import default_max_open_shards
from tests.packs import open_shard_files, write_tiny_shards


@pytest.fixture(scope="module", params=["tfrecord", "lmdb"])
def twelve(request, tmp_path_factory) -> Path:
    """12 shards of one tiny JPEG each."""
    return write_tiny_shards(tmp_path_factory.mktemp(f"twelve_{request.param}"), 12, fmt=request.param)


def test_the_default_is_a_quarter_of_the_soft_limit_between_1_and_1024(monkeypatch):
    for limit, expected, remote in [
        (256, 64, 32),
        (1024, 256, 128),
        (1 << 20, 1024, 1024),
        (None, 1024, 1024),
        (3, 1, 1),
    ]:
        monkeypatch.setattr(open_readers, "nofile_limit", lambda limit=limit: limit)
        assert default_max_open_shards() == expected
        assert default_max_open_shards(per_shard=2) == remote


@pytest.mark.parametrize(
    "bad, error", [(0, ValueError), (-3, ValueError), (True, TypeError), ("8", TypeError), (2.0, TypeError)]
)
def test_max_open_shards_is_checked(twelve, bad, error):
    with pytest.raises(error, match="max_open_shards"):
        ShardDataset(twelve, max_open_shards=bad)


def test_at_most_max_open_shards_are_open_and_evicted_ones_are_closed(twelve):
    ds = ShardDataset(twelve, max_open_shards=3)
    assert ds.max_open_shards == 3 and ShardDataset(twelve).max_open_shards is None
    reference = [ShardDataset(twelve).read(i) for i in range(len(ds))]
    ds.read(0)
    fd = ds._reader(0)._fd
    assert open_shard_files(twelve)[fd].startswith("shard-00000.")
    ds.read(1), ds.read(2), ds.read(3)  # shard 0 is the least recently used of four
    assert 0 not in ds._readers and not open_shard_files(twelve).get(fd, "").startswith("shard-00000.")  # closed
    order = np.random.default_rng(0).permutation(np.tile(np.arange(len(ds)), 3))
    for step, i in enumerate(order):
        assert ds.read(int(i)) == reference[i]
        assert len(ds._readers) <= 3 and len(open_shard_files(twelve)) <= 3, f"step {step}"
    ds.close()
    assert open_shard_files(twelve) == {}


def test_a_reader_in_use_is_closed_when_its_user_is_done_not_under_it(twelve):
    ds = ShardDataset(twelve, max_open_shards=1)
    position, size = ds._locate(0, 0)
    held = ds._reader(0)  # another thread in the middle of a read holds it like this
    ds.read(1)  # evicts shard 0
    assert 0 not in ds._readers
    assert held.read(position, size) == ds.read(0)  # still open for its user
    fd = held._fd
    assert open_shard_files(twelve)[fd].startswith("shard-00000.")
    del held
    assert not open_shard_files(twelve).get(fd, "").startswith("shard-00000.")


def test_a_shard_replaced_after_its_eviction_is_refused_on_reopen(twelve, tmp_path):
    root = tmp_path / "pack"
    shutil.copytree(twelve, root)
    ds = ShardDataset(root, max_open_shards=1)
    first = ds.read(0)
    ds.read(1)  # shard 0 is closed now
    name = ds.manifest.shards[0].path
    shutil.copy(root / name, root / (name + ".new"))
    os.replace(root / (name + ".new"), root / name)  # the same bytes, another file: what a re-pack does
    assert ds.read(1) == ShardDataset(twelve).read(1)  # shards still open keep reading
    with pytest.raises(DatasetChangedError, match="replaced"):
        ds.read(0)
    assert first == ShardDataset(root).read(0)  # a new dataset reads the new file


def test_a_third_party_tfrecord_replaced_after_its_eviction_is_refused_on_reopen(tmp_path):
    pack = write_tiny_shards(tmp_path / "pack", 3, fmt="tfrecord")
    files = [tmp_path / f"train-{k:05d}" for k in range(3)]
    for k, path in enumerate(files):
        shutil.copy(pack / f"shard-{k:05d}.tfrecord", path)
    ds = ShardDataset(files, max_open_shards=1)
    first = ds.read(0)
    ds.read(1)  # the first file is closed now
    shutil.copy(tmp_path / "train-00000", tmp_path / "new")
    os.replace(tmp_path / "new", tmp_path / "train-00000")
    with pytest.raises(DatasetChangedError, match="replaced or rewritten"):
        ds.read(0)
    clone = pickle.loads(pickle.dumps(ds))  # a pickled copy (a spawn worker) knows the first file too
    with pytest.raises(DatasetChangedError):
        clone.read(0)
    assert ShardDataset(files).read(0) == first


def test_pickled_copies_hold_no_readers_and_keep_the_bound(twelve):
    ds = ShardDataset(twelve, max_open_shards=2)
    ds.read(0), ds.read(5)
    clone = pickle.loads(pickle.dumps(ds))
    assert len(ds._readers) == 2 and len(clone._readers) == 0 and clone.max_open_shards == 2
    for i in range(len(clone)):
        clone.read(i)
    assert len(clone._readers) == 2


def test_near_the_limit_own_readers_are_closed_first_then_a_shard_is_refused_by_name(twelve, monkeypatch):
    """Within the reserve of the descriptor limit the process's own least recently used readers are closed (and
    re-open, checked, when read again); only with none left to close is the shard refused, in one line."""
    ds = ShardDataset(twelve, max_open_shards=10_000)
    first, second = ds.read(0), ds.read(1)
    fd = os.dup(0)  # the lowest free descriptor number: the next shard opened gets it
    os.close(fd)
    limit = fd + 8  # as if `ulimit -n` left fewer than the reserve (8 here) from it on
    monkeypatch.setattr(open_readers, "nofile_limit", lambda: limit)
    monkeypatch.setattr(open_readers, "reserve", lambda limit: 8)
    third = ds.read(2)  # shard 2: one descriptor inside the reserve, so shard 0 (least recently used) is closed
    assert len(ds._readers) == 2 and 0 not in ds._readers and 2 in ds._readers
    monkeypatch.setattr(open_readers, "nofile_limit", lambda: 0)  # now every descriptor is inside the reserve
    monkeypatch.setattr(open_readers, "reserve", lambda limit: 0)
    with pytest.raises(OSError) as caught:
        ds.read(3)
    assert caught.value.errno == errno.EMFILE and "Too many open files" in str(caught.value)
    assert "may open 0 files" in str(caught.value) and "0 shard files are open" in str(caught.value)
    assert "raise `ulimit -n` or use fewer DataLoader workers" in str(caught.value) and "\n" not in str(caught.value)
    assert caught.value.filename.endswith("shard-00003." + ds.format)
    assert not open_shard_files(twelve) and len(ds._readers) == 0  # every reader closed, the refused one too
    monkeypatch.undo()
    assert (ds.read(0), ds.read(1), ds.read(2)) == (first, second, third)  # and reading goes on, byte for byte


def test_readers_that_keep_per_record_arrays_are_bounded_by_records_too(tmp_path):
    """An LMDB reader keeps its shard's sidecar (24 bytes a record): with large shards the readers open are bounded
    by the records they hold together, not only by their number (1,024 readers of 10,000-record shards would be
    245 MB in every worker); a TFRecord reader holds no per-record arrays and counts nothing."""
    from tests.packs import write_pack

    lmdb, tfrecord = (ShardDataset(write_pack(tmp_path / fmt, fmt, 12, 50)) for fmt in ("lmdb", "tfrecord"))
    reference = [lmdb.read(i) for i in range(len(lmdb))]
    for ds in (lmdb, tfrecord):
        ds.close()
        ds._readers.max_records = 120  # two shards of 50 records, and a third only while it is the newest
    order = np.random.default_rng(1).permutation(len(lmdb))
    for step, i in enumerate(order):
        assert lmdb.read(int(i)) == reference[i] and tfrecord.read(int(i)) == reference[i]
        held = [r.held_records for r in lmdb._readers._open.values()]
        assert held and all(h == 50 for h in held) and sum(held) <= 120, f"step {step}: {held}"
        assert lmdb._readers._records == sum(held)
    assert len(tfrecord._readers) == 12  # TFRecord readers keep nothing per record: only max_open_shards bounds them
    lmdb.close()
    assert lmdb._readers._records == 0
