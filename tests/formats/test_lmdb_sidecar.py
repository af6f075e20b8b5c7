"""LMDB ``.loc`` sidecars: a re-opened shard is read through its sidecar (no B-tree walk), a damaged or lying sidecar
is a clean error naming it, verify compares it with the walk, and packs without sidecars keep the walk."""

from __future__ import annotations

import shutil
import struct

import google_crc32c
import numpy as np
import pytest

from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.formats import lmdb_pages
from fastdata.formats.base import CorruptRecordError
from fastdata.formats.manifest import Manifest
from fastdata.packing.check import verify
from fastdata.packing.merge import merge
from fastdata.packing.packer import pack
from fastdata.packing.repack import repack
from tests.packs import edit_manifest, make_distinct_folder, pack_quietly


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """30 distinct JPEGs (some in overflow pages, as photos are) and {image bytes: label}."""
    src = tmp_path_factory.mktemp("src")
    truth = make_distinct_folder(src, per_class=10, size=(120, 160))
    make_distinct_folder(src, per_class=10, classes=("dot",), size=(8, 8), seed=2)  # small: inside leaf pages
    truth.update({p.read_bytes(): 2 for p in (src / "dot").iterdir()})
    return src, truth


@pytest.fixture(scope="module")
def lmdb_pack(source, tmp_path_factory):
    out = tmp_path_factory.mktemp("lmdb")
    pack_quietly(source[0], out, "lmdb", samples_per_shard=7)
    return out


def no_walk(monkeypatch) -> None:
    """Any walk of an LMDB B-tree from here on fails the test (packs are written before: the writer walks once)."""

    def walk(*args, **kwargs):
        raise AssertionError("an LMDB shard's B-tree was walked")

    monkeypatch.setattr(lmdb_pages._Walker, "run", walk)


def _read_all_reopening(root, truth, **kwargs) -> None:
    """Every record twice in a shuffled order with one shard open at a time (so nearly every read re-opens)."""
    ds = ShardDataset(root, max_open_shards=1, **kwargs)
    order = np.random.default_rng(3).permutation(np.tile(np.arange(len(ds)), 2))
    assert len(ds) == len(truth)
    for i in order.tolist():
        data, label = ds.read(int(i))
        assert truth[data] == label == int(ds.targets[i])


def _rewrite_sidecar(root, shard: int, change) -> str:
    """Apply ``change(bytearray)`` to shard ``shard``'s sidecar and record its new size and CRC32C in the manifest
    (a sidecar that lies, not a damaged one); return its name."""
    info = Manifest.load(root).shards[shard]
    data = bytearray((root / info.index).read_bytes())
    change(data)
    (root / info.index).write_bytes(bytes(data))

    def record(m):
        m["shards"][shard].update(index_nbytes=len(data), index_crc32c=f"{google_crc32c.value(bytes(data)):08x}")

    edit_manifest(root, record)
    return info.index


def test_reopened_shards_are_read_through_their_sidecars_without_a_walk(lmdb_pack, source, monkeypatch):
    no_walk(monkeypatch)
    assert all(s.index == s.path.replace(".lmdb", ".loc") for s in Manifest.load(lmdb_pack).shards)
    _read_all_reopening(lmdb_pack, source[1])


def test_a_flipped_byte_in_a_sidecar_is_a_clean_error_naming_it(lmdb_pack, tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(lmdb_pack, root)
    name = Manifest.load(root).shards[1].index
    data = bytearray((root / name).read_bytes())
    data[len(data) // 2] ^= 0x10
    (root / name).write_bytes(bytes(data))
    ds = ShardDataset(root)
    ds.read(0)  # shard 0 is sound
    with pytest.raises(CorruptRecordError, match=r"shard-00001\.loc.*CRC32C") as info:
        ds.read(7)
    assert "\n" not in str(info.value)
    (root / name).unlink()
    with pytest.raises(CorruptRecordError, match=r"shard-00001\.loc: is missing"):
        ShardDataset(root).read(8)


_HEADER = 32  # magic, version, page size, records, fields records


@pytest.mark.parametrize("offset", ["end", "huge", "negative", "in_meta_pages", "across_pages"])
def test_a_sidecar_placing_a_value_outside_its_shard_is_refused_never_followed(lmdb_pack, tmp_path, offset):
    root = tmp_path / "ds"
    shutil.copytree(lmdb_pack, root)
    info = Manifest.load(root).shards[2]
    n = info.num_samples
    size = (root / info.path).stat().st_size
    small = n - 1  # the shard's last record is a small image: its value lies inside a leaf page, not an overflow run

    def place(data: bytearray) -> None:
        page = struct.unpack_from("<I", data, 12)[0]
        assert data[_HEADER + 25 * n - 1 - (n - 1 - small)] == 0  # not an overflow value
        value = {
            "end": size - 4,
            "huge": 1 << 62,
            "negative": -1,
            "in_meta_pages": page + 100,
            "across_pages": 3 * page - 8,
        }[offset]
        struct.pack_into("<q", data, _HEADER + 8 * small, value)

    name = _rewrite_sidecar(root, 2, place)
    with pytest.raises(CorruptRecordError, match=rf"{name}: places a record .* outside"):
        ShardDataset(root).read(14)
    assert any(p.startswith(f"{name}: places a record") for p in verify(root, decode=False).problems)


def test_verify_reports_a_sidecar_that_disagrees_with_the_walk(lmdb_pack, tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(lmdb_pack, root)
    n = Manifest.load(root).shards[0].num_samples

    def relabel(data: bytearray) -> None:
        struct.pack_into("<q", data, _HEADER + 8 * n, 1)  # record 0's label: it is 0 in the shard

    name = _rewrite_sidecar(root, 0, relabel)
    report = verify(root, decode=False)
    assert not report.ok
    assert report.problems == [f"{name}: does not match shard-00000.lmdb (its labels differ from the shard's)"]
    with pytest.raises(CorruptRecordError, match="label 1 differs from 0 in targets.npy"):
        ShardDataset(root).read(0)  # a reader takes the sidecar's label, and checks it against targets.npy


def test_a_pack_without_sidecars_keeps_the_walk(lmdb_pack, source, tmp_path):
    root = tmp_path / "old"
    shutil.copytree(lmdb_pack, root)
    for shard in Manifest.load(root).shards:
        (root / shard.index).unlink()  # a pack written before sidecars: no .loc, no index fields in its manifest
    edit_manifest(root, lambda m: [s.pop(k) for s in m["shards"] for k in ("index", "index_nbytes", "index_crc32c")])
    assert all(s.index is None for s in Manifest.load(root).shards)
    _read_all_reopening(root, source[1])
    assert verify(root, decode=False).ok


def test_parts_merge_repack_and_append_write_sidecars(source, tmp_path, monkeypatch):
    src, truth = source
    opts = {
        "format": "lmdb",
        "samples_per_shard": 4,
        "range_size": 8,
        "workers": 0,
        "progress": False,
        "keep_bytes": True,
    }
    for i in (1, 0, 2, 3):
        pack(src, tmp_path / "parts", part=(i, 4), **opts)
    merged = merge(str(tmp_path / "parts"))
    recoded = repack(tmp_path / "parts", tmp_path / "repacked", workers=0, progress=False)
    shutil.copytree(tmp_path / "parts", tmp_path / "appended")
    added = make_distinct_folder(tmp_path / "more", per_class=3, classes=("ant",), seed=9)  # new images of class 0
    grown = pack(
        tmp_path / "more",
        tmp_path / "appended",
        format="lmdb",
        append=True,
        samples_per_shard=4,
        workers=0,
        progress=False,
        keep_bytes=True,
    )
    assert len(grown.shards) > len(merged.shards)
    for folder, manifest in (("parts", merged), ("repacked", recoded), ("appended", grown)):
        assert all(s.index and (tmp_path / folder / s.index).is_file() for s in manifest.shards), folder

    no_walk(monkeypatch)
    _read_all_reopening(tmp_path / "parts", truth)
    _read_all_reopening(tmp_path / "appended", {**truth, **added})
    ds, parts = ShardDataset(tmp_path / "repacked", max_open_shards=1), ShardDataset(tmp_path / "parts")
    assert [ds.read(i)[1] for i in range(len(ds))] == [truth[parts.read(i)[0]] for i in range(len(parts))]
