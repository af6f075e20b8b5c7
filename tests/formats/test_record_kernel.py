"""The GIL-free batch reads (``formats/_records.c`` through ``formats/record_kernel.py``): the same records, labels
and errors as the plain reads, record by record, and the kernel really takes the sound plain ones."""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path

import google_crc32c
import numpy as np
import pytest

from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.formats import record_kernel
from fastdata.formats.base import CorruptRecordError
from fastdata.formats.manifest import Manifest
from fastdata.formats.tfrecord_read import read_image_record, read_image_records
from tests.formats.test_tfrecord_read import IMAGE, ODD, framed, ours
from tests.packs import make_distinct_folder, pack_quietly

_records = pytest.importorskip("fastdata.formats._records", reason="the records kernel is built with the package")


def outcome(call):
    try:
        return call()
    except CorruptRecordError as exc:
        return type(exc), str(exc)


def shard_of(tmp_path: Path, bufs: list[bytes]) -> tuple[Path, list[int], list[int]]:
    path = tmp_path / "batch.tfrecord"
    path.write_bytes(b"".join(bufs))
    positions = np.cumsum([0] + [len(b) for b in bufs])[:-1].tolist()
    return path, positions, [len(b) for b in bufs]


def test_crc32c_is_google_crc32c():
    rng = random.Random(0)
    for n in [0, 1, 3, 7, 8, 9, 15, 16, 63, 64, 65, 1000, 4097, 100_003]:
        for skip in range(9):  # every alignment of the start
            data = rng.randbytes(n + skip)[skip:]
            for table in (False, True):  # this CPU's instruction (where it has one), and the table everywhere
                assert _records.crc32c(data, 0, table) == google_crc32c.value(data), (n, skip, table)
                assert _records.crc32c(data, 0xDEADBEEF, table) == google_crc32c.extend(0xDEADBEEF, data), (n, skip)


@pytest.mark.parametrize("name", sorted(ODD))
def test_odd_records_in_a_batch_give_the_plain_reads_answer_or_error(tmp_path, name):
    """Each odd record between two sound ones: the batch read says what the record-by-record read says, and where
    the kernel takes a record itself, its answer is the plain read's (protobuf's)."""
    good = framed(ours())
    path, positions, sizes = shard_of(tmp_path, [good, framed(ODD[name]), good])
    fd = os.open(path, os.O_RDONLY)
    try:
        for offset in (0, -1):
            one_by_one = outcome(
                lambda offset=offset: [
                    read_image_record(fd, p, n, shard="s", label_offset=offset)
                    for p, n in zip(positions, sizes, strict=True)
                ]
            )
            batch = outcome(
                lambda offset=offset: read_image_records(fd, positions, sizes, shard="s", label_offset=offset)
            )
            assert batch == one_by_one
        taken = _records.read_tfrecords(fd, positions[1:2], sizes[1:2], True)[0]
        if taken is not None:
            image, label = taken
            assert (image, 0 if label is None else label) == read_image_record(fd, positions[1], sizes[1], shard="s")
    finally:
        os.close(fd)


def test_the_kernel_takes_sound_plain_records(tmp_path):
    """Records as fastdata and TensorFlow write them are read by the kernel itself (not passed back), with labels."""
    bufs = [
        framed(ours(image=IMAGE * k, label=k, colour=("bytes", [b"red"]), score=("float", [0.5]))) for k in range(1, 6)
    ]
    bufs.append(framed(ODD["plain, built by hand"]))
    bufs.append(framed(ODD["no label"]))
    bufs.append(framed(ODD["big field before the image"]))  # past the Python walk's prefix: the kernel takes it
    path, positions, sizes = shard_of(tmp_path, bufs)
    fd = os.open(path, os.O_RDONLY)
    try:
        taken = _records.read_tfrecords(fd, positions, sizes, True)
    finally:
        os.close(fd)
    assert [t[1] for t in taken] == [1, 2, 3, 4, 5, 3, None, None]
    assert [t[0] for t in taken[:5]] == [IMAGE * k for k in range(1, 6)]
    assert all(t[0] == IMAGE for t in taken[5:])


def test_every_byte_of_a_batch_is_checked(tmp_path):
    """Any one byte of the middle record changed: the batch read raises the record-by-record read's error."""
    good = framed(ours(image=b"\xff\xd8\xff" + bytes(500)))
    for k in range(len(good)):
        damaged = bytearray(good)
        damaged[k] ^= 0x40
        path, positions, sizes = shard_of(tmp_path, [good, bytes(damaged), good])
        fd = os.open(path, os.O_RDONLY)
        try:
            expected = outcome(lambda fd=fd, p=positions[1], n=sizes[1]: read_image_record(fd, p, n, shard="s"))
            assert expected[0] is CorruptRecordError, k
            assert outcome(lambda fd=fd, p=positions, n=sizes: read_image_records(fd, p, n, shard="s")) == expected, k
            assert _records.read_tfrecords(fd, positions, sizes, True)[1] is None, k
        finally:
            os.close(fd)


def test_short_files_sizes_and_positions_are_the_plain_reads_business(tmp_path):
    good = framed(ours())
    path, positions, sizes = shard_of(tmp_path, [good, good])
    path.write_bytes(path.read_bytes()[:-10])  # the second record cut short
    fd = os.open(path, os.O_RDONLY)
    try:
        assert _records.read_tfrecords(fd, [0, positions[1], -5, 0], [sizes[0], sizes[1], 40, 3], True)[1:] == [
            None,
            None,
            None,
        ]
        with pytest.raises(CorruptRecordError, match=r"short read"):
            read_image_records(fd, positions, sizes, shard=path)
    finally:
        os.close(fd)
    with pytest.raises(TypeError):
        _records.read_tfrecords(0, [0], [1])
    with pytest.raises(ValueError, match="positions and sizes differ in length"):
        _records.read_tfrecords(0, [0], [1, 2], True)
    with pytest.raises(TypeError, match="sizes must be a sequence of ints, not int"):
        _records.read_tfrecords(0, [0], 1, True)
    with pytest.raises(ValueError, match="offsets and crcs differ in length"):
        _records.read_values(0, [16], [1], [-1], 4096, [], True)


def test_without_the_kernel_the_plain_reads_give_the_same(tmp_path, monkeypatch):
    bufs = [framed(ours(image=IMAGE * k, label=k)) for k in range(1, 4)]
    path, positions, sizes = shard_of(tmp_path, bufs)
    fd = os.open(path, os.O_RDONLY)
    try:
        fast = read_image_records(fd, positions, sizes, shard="s", label_offset=10)
        monkeypatch.setenv("FASTDATA_NATIVE", "0")
        assert not record_kernel.native_reads()
        assert read_image_records(fd, positions, sizes, shard="s", label_offset=10) == fast
    finally:
        os.close(fd)
    assert [label for _, label in fast] == [11, 12, 13]


@pytest.fixture(scope="module")
def lmdb_pack(tmp_path_factory):
    """Photo-sized JPEGs (values in overflow pages) and small ones (values inside their leaf) in LMDB shards."""
    src = tmp_path_factory.mktemp("mixed")
    make_distinct_folder(src, per_class=4, size=(160, 240))
    make_distinct_folder(src, per_class=3, size=(8, 8), classes=("cat", "dog"), seed=2)
    out = tmp_path_factory.mktemp("lmdb")
    pack_quietly(src, out, "lmdb", samples_per_shard=7)
    return out


def test_lmdb_batch_reads_are_the_record_reads(lmdb_pack):
    ds = ShardDataset(lmdb_pack)
    everything = list(range(len(ds)))
    assert ds.read_batch(everything)[0] == [ds.read(i)[0] for i in everything]
    kinds = []
    for shard in range(len(Manifest.load(lmdb_pack).shards)):
        reader = ds._reader(shard)
        numbers = list(range(reader.held_records))
        values = record_kernel.read_lmdb_values(reader._index, reader._fd, 0, numbers + [-1, 10**6], reader._crc, True)
        assert None not in values[:-2] and values[-2:] == [None, None]  # every sound value taken; no key: not taken
        located = reader._index.located[0]
        kinds.extend(located.overflow.tolist())
    assert True in kinds and False in kinds  # values in overflow runs and inside their leaf were both read
    probe = np.array([-3, 0, 1, len(located) - 1, len(located), 10**9], dtype=np.int64)
    assert located.slots(probe).tolist() == [located.slot(int(k)) for k in probe]


def test_lmdb_damage_gives_the_record_reads_error(lmdb_pack, tmp_path):
    """A changed byte in an image and in an overflow run's header: the batch read raises what ``read`` raises."""
    import shutil

    for what in ("value", "header"):
        root = tmp_path / what
        shutil.copytree(lmdb_pack, root)
        ds = ShardDataset(root)
        reader = ds._reader(0)
        located = reader._index.located[0]
        k = int(np.flatnonzero(located.overflow)[0])
        at = int(located.offsets[k]) + (100 if what == "value" else -16 + 10)  # the run header's flags
        path = root / Manifest.load(root).shards[0].path
        ds.close()
        with open(path, "r+b") as f:
            f.seek(at)
            byte = f.read(1)[0]
            f.seek(at)
            f.write(bytes([byte ^ (0x40 if what == "value" else 0x04)]))
        ds = ShardDataset(root)
        number = int(located.numbers[k]) if located.numbers is not None else k
        expected = outcome(lambda ds=ds, n=number: ds._reader(0).read(n, 0))
        assert expected[0] is CorruptRecordError
        reader = ds._reader(0)
        numbers = list(range(reader.held_records))
        assert outcome(lambda reader=reader, numbers=numbers: reader.read_many(numbers, [0] * len(numbers))) == expected
        ds.close()


def test_reads_on_many_threads_are_the_reads_on_one(lmdb_pack, tmp_path):
    """The kernel keeps nothing between calls: eight threads reading at once read what one does."""
    bufs = [framed(ours(image=IMAGE * k, label=k)) for k in range(1, 40)]
    path, positions, sizes = shard_of(tmp_path, bufs)
    fd = os.open(path, os.O_RDONLY)
    expected = read_image_records(fd, positions, sizes, shard="s")
    results: list[object] = []

    def reader() -> None:
        results.extend(read_image_records(fd, positions, sizes, shard="s") == expected for _ in range(50))

    threads = [threading.Thread(target=reader) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    os.close(fd)
    assert results == [True] * 400


def test_mutated_records_with_good_crcs_give_the_plain_reads_answer_or_error(tmp_path):
    """Structure bytes changed, then framed again (CRCs good): every record the kernel takes is protobuf's answer,
    and the batch read always says what the plain read says."""
    rng = random.Random(1)
    payload = ours(image=b"\xff\xd8\xff" + bytes(300), colour=("bytes", [b"red"]), score=("float", [0.5]))
    image_at = payload.index(b"\xff\xd8\xff")
    structure = [k for k in range(len(payload)) if not image_at <= k < image_at + 303]
    bufs = []
    for _ in range(600):
        mutated = bytearray(payload)
        for _ in range(rng.choice((1, 1, 2))):
            mutated[rng.choice(structure)] = rng.randrange(256)
        bufs.append(framed(bytes(mutated)))
    path, positions, sizes = shard_of(tmp_path, bufs)
    fd = os.open(path, os.O_RDONLY)
    try:
        taken = _records.read_tfrecords(fd, positions, sizes, True)
        for k, (p, n) in enumerate(zip(positions, sizes, strict=True)):
            plain = outcome(lambda p=p, n=n: read_image_record(fd, p, n, shard="s"))
            assert outcome(lambda p=p, n=n: read_image_records(fd, [p], [n], shard="s")[0]) == plain, k
            if taken[k] is not None:
                image, label = taken[k]
                assert (image, 0 if label is None else label) == plain, k
        assert sum(t is not None for t in taken) > 100  # many mutations leave a sound plain record
    finally:
        os.close(fd)


def test_without_crc_checks_the_batch_read_is_the_plain_read(tmp_path):
    """``check_crc=False``: a record whose image bytes changed is served as the plain read serves it, CRCs unread."""
    good = framed(ours(image=b"\xff\xd8\xff" + bytes(500)))
    damaged = bytearray(good)
    damaged[good.index(b"\xff\xd8\xff") + 100] ^= 0x40
    path, positions, sizes = shard_of(tmp_path, [good, bytes(damaged)])
    fd = os.open(path, os.O_RDONLY)
    try:
        plain = [read_image_record(fd, p, n, shard="s", check_crc=False) for p, n in zip(positions, sizes, strict=True)]
        assert read_image_records(fd, positions, sizes, shard="s", check_crc=False) == plain
        assert None not in _records.read_tfrecords(fd, positions, sizes, False)  # the kernel took both
        assert plain[1][0] != plain[0][0]  # the changed byte is there: nothing checked it
    finally:
        os.close(fd)
