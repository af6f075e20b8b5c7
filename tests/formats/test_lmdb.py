"""LMDB shards: every read checked, truncated files refused (never SIGBUS), one environment per file and process."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.formats.base import CorruptRecordError
from fastdata.formats.manifest import Manifest
from fastdata.loader.dataloader import DataLoaderX
from tests.packs import flip_bit, make_distinct_folder, pack_quietly


@pytest.fixture(scope="module")
def lmdb_pack(tmp_path_factory):
    """30 distinct JPEGs in LMDB shards of 10, and {image bytes: label}."""
    src = tmp_path_factory.mktemp("distinct")
    truth = make_distinct_folder(src)
    out = tmp_path_factory.mktemp("lmdb")
    pack_quietly(src, out, "lmdb", samples_per_shard=10)
    return out, truth


@pytest.fixture(scope="module")
def big_lmdb_pack(tmp_path_factory):
    """10 photo-sized JPEGs (tens of KB: LMDB overflow pages, as in real data) in LMDB shards of 5."""
    src = tmp_path_factory.mktemp("big")
    make_distinct_folder(src, per_class=5, size=(200, 300))
    out = tmp_path_factory.mktemp("big_lmdb")
    pack_quietly(src, out, "lmdb", samples_per_shard=5)
    return out


class OneIndex:
    """A sampler whose single index the test changes between passes (persistent workers see the change)."""

    index = 0

    def __iter__(self):
        yield self.index

    def __len__(self) -> int:
        return 1


def _image_bits(root, truth) -> list[tuple[int, int, int]]:
    """(shard number, sample index, bit offset in the shard file) of every bit of every stored image."""
    ds = ShardDataset(root)
    spans = []
    for number, shard in enumerate(Manifest.load(root).shards):
        data = (root / shard.path).read_bytes()
        for j in range(shard.num_samples):
            index = number * 10 + j
            image = ds.read(index)[0]
            at = data.find(image)
            assert at >= 0 and data.find(image, at + 1) < 0
            spans.append((number, index, at * 8, (at + len(image)) * 8))
    return spans


def test_25_random_bit_flips_in_image_bytes_each_raise_on_read(lmdb_pack):
    root, truth = lmdb_pack
    spans = _image_bits(root, truth)
    rng = np.random.default_rng(11)
    sampler = OneIndex()
    loader = DataLoaderX(
        ShardDataset(root), batch_size=None, sampler=sampler, num_workers=2, persistent_workers=True, pin_memory=False
    )
    try:
        for _ in range(25):
            shard, index, begin, end = spans[rng.integers(len(spans))]
            bit = int(rng.integers(begin, end))
            path = root / Manifest.load(root).shards[shard].path
            flip_bit(path, bit)
            try:
                with pytest.raises(CorruptRecordError, match="CRC32C mismatch") as info:
                    ShardDataset(root)[index]
                assert info.value.shard == str(path) and info.value.offset == index % 10
                assert "fastdata verify" in str(info.value) and f"sample {index}" in str(info.value)
                sampler.index = index
                with pytest.raises(CorruptRecordError, match="CRC32C mismatch"):  # the type survives the workers
                    next(iter(loader))
            finally:
                flip_bit(path, bit)
        sampler.index = 3
        image, label = next(iter(loader))  # restored: the workers read it again
        assert truth[ShardDataset(root).read(3)[0]] == int(label)
    finally:
        del loader


TRUNCATED_READ = """
import sys
from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.formats.base import CorruptRecordError
ds = ShardDataset(sys.argv[1]) if sys.argv[2] == "before" else None
if ds is not None:
    ds[0]
    with open(sys.argv[3], "r+b") as f:
        f.truncate(int(sys.argv[4]))
try:
    ds = ds or ShardDataset(sys.argv[1])
    [ds[i] for i in range(len(ds))]
except CorruptRecordError as exc:
    print("CorruptRecordError:", exc)
    sys.exit(3)
"""


@pytest.mark.parametrize("when", ["before", "after"])
def test_truncated_shard_is_an_exception_never_a_signal(big_lmdb_pack, tmp_path, when):
    """Truncated before the dataset is opened, or after (between opening and the first read of the shard).

    Mapping a truncated LMDB file and reading past its end used to kill the process with SIGBUS.
    """
    import shutil

    root = tmp_path / "copy"
    shutil.copytree(big_lmdb_pack, root)
    shard = root / Manifest.load(root).shards[1].path
    keep = shard.stat().st_size // 2
    if when == "after":
        args = [str(root), "before", str(shard), str(keep)]
    else:
        with open(shard, "r+b") as f:
            f.truncate(keep)
        args = [str(root), "open", str(shard), str(keep)]
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    result = subprocess.run(
        [sys.executable, "-c", TRUNCATED_READ, *args], capture_output=True, text=True, timeout=120, env=env
    )
    assert result.returncode == 3, (result.returncode, result.stderr[-2000:])  # not -7 (SIGBUS)
    assert "shard-00001.lmdb" in result.stdout and "truncated" in result.stdout
    if when == "after":
        verify = subprocess.run(
            [sys.executable, "-m", "fastdata.cli", "verify", str(root)],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert verify.returncode == 1, (verify.returncode, verify.stderr[-2000:])
        assert "DAMAGED shard-00001.lmdb" in verify.stdout and "truncated" in verify.stdout
