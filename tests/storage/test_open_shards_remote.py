"""A remote dataset's cached shards go through the same bound: at most ``max_open_shards`` held per process."""

from __future__ import annotations

import numpy as np

import fastdata.formats.open_readers as open_readers
from fastdata import ShardDataset
from tests.packs import open_shard_files


def local_reads(root) -> list:
    reference = ShardDataset(root)
    return [reference.read(i) for i in range(len(reference))]


def read_shuffled_twice(remote: ShardDataset, expected: list, cache) -> int:
    """Read every sample twice in a shuffled order, checking bytes and the bound; return the most shards held."""
    most = 0
    for i in np.random.default_rng(0).permutation(np.tile(np.arange(len(expected)), 2)):
        assert remote.read(int(i)) == expected[i]
        held = len(remote._remote._held)
        assert len(open_shard_files(cache)) <= held  # every open shard file is a held one
        most = max(most, held)
    return most


def test_a_remote_dataset_holds_at_most_max_open_shards(s3, remote_pack, tmp_path):
    cache = tmp_path / "cache"
    remote = ShardDataset(remote_pack.url, cache_dir=cache, max_open_shards=3)
    assert remote.max_open_shards == 3 and remote._remote.max_open_shards == 3
    assert read_shuffled_twice(remote, local_reads(remote_pack.local), cache) == 3
    remote.close()
    assert open_shard_files(cache) == {}


def test_by_default_a_remote_dataset_holds_an_eighth_of_the_descriptor_limit(s3, remote_pack, tmp_path, monkeypatch):
    expected = local_reads(remote_pack.local)
    monkeypatch.setattr(open_readers, "nofile_limit", lambda: 64)  # `ulimit -n 64`: 8 shards, 2 descriptors each
    cache = tmp_path / "cache"
    remote = ShardDataset(remote_pack.url, cache_dir=cache)
    assert remote_pack.num_shards > 8
    assert read_shuffled_twice(remote, expected, cache) == 8
