"""A reader's shard list as columns: the same ShardInfo values back, for every optional field present or missing."""

from __future__ import annotations

import pickle

from fastdata.formats.manifest import Manifest
from fastdata.formats.manifest_entries import ShardInfo
from fastdata.formats.shard_table import ShardTable

SHARDS = [
    ShardInfo("shard-00000.tfrecord", 3, 4096, "0000abcd", "shard-00000.idx", 30, "ffffffff", None, 3),
    ShardInfo("sub/shard-00001.lmdb", 0, 16, "00000000", None, None, None, "12345678", None),
    ShardInfo("shard-00002.lmdb", 7, 1 << 40, "deadbeef", "shard-00002.loc", 0, "00000001", "80000000", 0),
]


def test_it_gives_back_every_shard_as_it_was_given():
    table = ShardTable(iter(SHARDS))
    assert list(table) == SHARDS and table == SHARDS and table[-1] == SHARDS[-1] and table[1:] == SHARDS[1:]
    assert table.num_samples.tolist() == [3, 0, 7] and table.total_samples == 10
    assert pickle.loads(pickle.dumps(table)) == SHARDS


def test_a_compact_manifest_reads_and_writes_as_a_plain_one(tmp_path):
    plain = Manifest(format="lmdb", classes=["a"], shards=list(SHARDS))
    plain.save(tmp_path)
    compact = Manifest.load(tmp_path, compact=True)
    assert isinstance(compact.shards, ShardTable) and compact == Manifest.load(tmp_path) == plain
    assert compact.num_samples == 10 and compact.to_dict() == plain.to_dict()
