"""The per-process LRU of per-shard arrays (record positions, a pack's labels): bounded by shards and by records."""

from __future__ import annotations

import pickle

import numpy as np

from fastdata.datasets.record_index import RecordIndex


def test_it_drops_the_least_recently_used_shard_beyond_its_bounds_for_any_tuple_of_arrays():
    loads = []

    def labels(shard):
        loads.append(shard)
        return (np.full(10, shard, dtype=np.int64),)  # a pack's (labels,): one array per entry

    cache = RecordIndex(max_shards=3, max_records=1000)
    for shard in (0, 1, 2, 0, 3):  # 0 used again: 1 is the least recently used when 3 arrives
        assert cache.get(shard, labels)[0].tolist() == [shard] * 10
    assert len(cache) == 3 and loads == [0, 1, 2, 3]
    cache.get(1, labels)
    assert loads[-1] == 1 and len(cache) == 3  # dropped, so read again

    small = RecordIndex(max_shards=100, max_records=25)  # 10 records a shard: two fit, the third pushes one out
    for shard in range(3):
        small.get(shard, lambda s: (np.zeros(10), np.zeros(10)))
    assert len(small) == 2
    assert len(pickle.loads(pickle.dumps(small))) == 0  # a worker starts empty
