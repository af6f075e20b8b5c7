"""A budget of a quarter of the dataset: furthest-next-use eviction, never a read of a deleted shard, no
shard downloaded twice in a pass when the order allows it (counted GETs), the budget never exceeded."""

from __future__ import annotations

import pytest

from fastdata import DataLoaderX, ShardDataset
from fastdata.storage import trace
from tests.storage.conftest import whole_gets
from tests.storage.helpers import Crc, ShardBlockOrder, check_trace


def _collate(batch):
    return batch


@pytest.mark.parametrize("blocks", [True, False], ids=["shard-blocks", "full-shuffle"])
def test_quarter_budget_two_passes(blocks, s3, remote_pack, tmp_path, monkeypatch, request):
    monkeypatch.setenv(trace.ENV, str(tmp_path / "trace.log"))
    reference = ShardDataset(remote_pack.local, transform=Crc())
    total = sum(p.stat().st_size for p in remote_pack.local.glob(f"shard-*.{remote_pack.format}"))
    limit = total // 4
    remote = ShardDataset(
        remote_pack.url, transform=Crc(seconds=0.005), cache_dir=tmp_path / "cache", cache_limit=limit, prefetch=1
    )  # 5 ms per sample, as a decode would take
    order = ShardBlockOrder(remote._starts, blocks=blocks, seed=3)
    loader = DataLoaderX(
        remote,
        batch_size=4,
        sampler=order,
        num_workers=2,
        prefetch_factor=1,
        collate_fn=_collate,
        multiprocessing_context="fork",
    )
    per_pass, ranged = [], []
    request.addfinalizer(remote.close)  # stops this dataset's prefetcher before the next test
    for _ in range(2):
        s3.proxy.reset()
        expected = (
            [reference[i] for i in ShardBlockOrder(remote._starts, blocks=blocks, seed=3).__iter__()]
            if order.passes == 0
            else None
        )
        got = [sample for batch in loader for sample in batch]
        if expected is not None:
            assert got == expected  # same bytes, same order
        assert sorted(got) == sorted(reference[i] for i in range(len(reference)))
        per_pass.append(whole_gets(s3.proxy, remote_pack))
        ranged.append(sum(s3.proxy.gets(remote_pack.url[len("s3://") :] + "/shard-", ranged=True).values()))
    stats = check_trace(tmp_path / "trace.log")  # raises on a read after deletion
    assert stats["peak"] <= limit, f"the cache grew to {stats['peak']} bytes, over its budget of {limit}"
    assert stats["evictions"] > 0
    downloads = [sum(p) for p in per_pass]
    print(
        f"\n{remote_pack.format} {'blocks' if blocks else 'shuffle'}: whole-shard GETs per pass {downloads} "
        f"(ranged record GETs {ranged}) of {remote_pack.num_shards} shards, evictions {stats['evictions']}, "
        f"peak {stats['peak']} of a budget of {limit} ({total} bytes in all)"
    )
    if blocks:  # each shard is read in one stretch per pass: the budget forces no second download in a pass
        assert all(max(p) <= 1 for p in per_pass), per_pass
