"""A budget of a quarter of the dataset: furthest-next-use eviction, never a read of a deleted shard, no
shard downloaded twice in a pass when the order allows it, the budget never exceeded.

Downloads are counted twice: by this test's own cache (its trace's ``get`` events, written only by the processes of
this test) and by the S3 proxy. The proxy and its bucket are shared by the whole session, so its count also holds
any GET of these objects by anything else while a pass runs (another test's process, or botocore retrying a request
the proxy had already counted); the second-download check is on the cache's own count, and the proxy's is shown
beside it when it fails.
"""

from __future__ import annotations

import time

import pytest

from fastdata import DataLoaderX, ShardDataset
from fastdata.storage import trace
from tests.storage.conftest import whole_gets
from tests.storage.helpers import Crc, ShardBlockOrder, check_trace, read_events


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
    per_pass, ranged, started = [], [], []
    request.addfinalizer(remote.close)  # stops this dataset's prefetcher before the next test
    for _ in range(2):
        s3.proxy.reset()
        started.append(time.monotonic_ns())  # the trace's clock
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
        own = _cache_downloads(tmp_path / "trace.log", started, remote_pack.num_shards)
        assert all(max(p) <= 1 for p in own), f"this cache's downloads per shard {own}; the proxy's GETs {per_pass}"


def _cache_downloads(path, started: list[int], shards: int) -> list[list[int]]:
    """Per pass (from each start time on), the download attempts this test's cache made of each shard."""
    counts = [[0] * shards for _ in started]
    for ns, _, event, shard, _, _ in read_events(path):
        if event == "get":
            passes = [k for k, t in enumerate(started) if ns >= t]
            if passes:
                counts[passes[-1]][shard] += 1
    return counts
