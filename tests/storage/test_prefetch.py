"""Prefetch: the plan of a pass, downloads in the order the loader will read (bounded concurrency), and
records served by ranged GETs while their shard is still downloading (the first batch waits for no shard)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from fastdata import DataLoaderX, ShardDataset
from fastdata.storage import plans, trace
from fastdata.storage.cache import Fetch
from fastdata.storage.locks import FileLock
from fastdata.storage.pass_plan import PassPlan
from fastdata.storage.prefetch import Prefetcher
from tests.storage.conftest import whole_gets
from tests.storage.helpers import Crc, ShardBlockOrder
from tests.storage.servers import Fault


def test_pass_plan_distances_and_what_is_worth_downloading():
    starts = np.array([0, 4, 8, 12, 16])  # 4 shards of 4 samples
    blocks = PassPlan(starts)
    blocks.push(np.array([9, 8, 11, 10, 1, 0, 3, 2, 15, 12, 13, 14, 5, 4, 6, 7]))
    blocks.advance(2)
    distances, worth = blocks.usage(near=6)
    assert distances.tolist() == [2, 10, 0, 6]
    assert worth.tolist() == [True, False, True, False]  # shards read in one stretch within the next 6 samples
    assert PassPlan.upcoming(distances, 1) == [(2, 0), (0, 2)]
    assert PassPlan.upcoming(distances, 1, in_flight=3) == [(2, 0), (0, 2), (3, 6)]
    spread = PassPlan(starts)
    spread.push(np.array([0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15]))
    assert not spread.usage(near=4)[1].any()  # one sample per shard now and then: ranged reads serve those
    assert spread.usage(near=None)[1].all()  # no budget: everything is worth keeping


def _collate(batch):
    return batch


def test_a_shard_a_reader_looks_at_is_not_skipped_for_a_later_one(s3, remote_pack, tmp_path):
    """A reader's shared lock (it looks whether the shard is cached) must not let the next shard take its turn:
    claimed out of order, the later shard could take the room the sooner one needs and be evicted for it."""
    remote = ShardDataset(remote_pack.url, transform=Crc(), cache_dir=tmp_path / "cache", prefetch=1)
    cache = remote._remote.cache
    plan = PassPlan(remote._starts)
    plan.push(np.arange(remote._starts[0], remote._starts[2]))  # shard 0, then shard 1
    plan.exhausted = True
    reader = FileLock(cache.root / "locks" / (cache.shards[0].name + ".lock"))
    assert reader.acquire(exclusive=False)
    prefetcher = Prefetcher(cache, window=1)
    try:
        prefetcher.start_pass(plan)
        time.sleep(0.3)
        assert not cache.present(1) and whole_gets(s3.proxy, remote_pack)[1] == 0  # shard 1 waits its turn
        reader.release()
        deadline = time.monotonic() + 10
        while not (cache.present(0) and cache.present(1)) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert cache.present(0) and cache.present(1)
    finally:
        reader.release()
        prefetcher.close()
        remote.close()


@pytest.mark.parametrize("remote_pack", ["tfrecord"], indirect=True)  # the order does not depend on the format
def test_downloads_follow_the_loaders_order_with_bounded_concurrency(s3, remote_pack, tmp_path, monkeypatch):
    monkeypatch.setenv(trace.ENV, str(tmp_path / "trace.log"))
    s3.proxy.faults.append(Fault("/shard-", "slow", times=10**6, delay=0.05, ranged=False))
    remote = ShardDataset(remote_pack.url, transform=Crc(), cache_dir=tmp_path / "cache", prefetch=2)
    order = ShardBlockOrder(remote._starts, blocks=True, seed=5)
    expected_shards = list(
        dict.fromkeys(
            int(np.searchsorted(remote._starts, i, side="right")) - 1
            for i in ShardBlockOrder(remote._starts, blocks=True, seed=5)
        )
    )
    loader = DataLoaderX(remote, batch_size=4, sampler=order, num_workers=0, collate_fn=_collate)
    reference = ShardDataset(remote_pack.local, transform=Crc())
    got = [crc for batch in loader for crc, _ in batch]
    remote.close()
    assert got == [reference[i][0] for i in ShardBlockOrder(remote._starts, blocks=True, seed=5)]
    log = trace.read_events(tmp_path / "trace.log")
    queued = list(dict.fromkeys(shard for _, _, name, shard, _, _ in log if name == "prefetch"))  # retries dropped
    assert queued == [s for s in expected_shards if s in queued]  # queued in the order the loader reads them
    assert len(queued) >= remote_pack.num_shards // 2
    events = [e for e in log if e[2] in ("get", "ready")]
    running, most = 0, 0
    for _, _, name, _, _, _ in events:
        running += 1 if name == "get" else -1
        most = max(most, running)
    assert most <= 2  # prefetch=2: at most two downloads at once


@pytest.mark.parametrize("remote_pack", ["tfrecord"], indirect=True)  # LMDB readers wait for the whole shard
def test_record_is_served_by_a_ranged_get_while_its_shard_downloads(s3, remote_pack, tmp_path):
    remote = ShardDataset(remote_pack.url, cache_dir=tmp_path / "cache")
    reference = ShardDataset(remote_pack.local)
    s3.proxy.faults.append(Fault("/shard-00000.", "slow", times=1, delay=3.0, ranged=False))
    download = threading.Thread(target=remote._remote.cache.fetch, args=(0,))
    download.start()
    time.sleep(0.3)  # the download holds the shard's lock and waits for the slow server
    begin = time.monotonic()
    assert remote.read(1) == reference.read(1)
    assert time.monotonic() - begin < 2.0  # did not wait for the whole shard
    assert download.is_alive()
    download.join()
    path = "/" + remote_pack.url[len("s3://") :] + "/shard-00000.tfrecord"
    assert s3.proxy.gets(path, ranged=True) == {path: 1}
    assert remote.read(2) == reference.read(2) and s3.proxy.gets(path, ranged=True) == {path: 1}  # now local


class _PlanOnlyCache:
    """A cache where every shard is present: a planning step only publishes its plan (slowly on the prefetch
    thread, so a new pass starts while the old pass's step is still publishing)."""

    def __init__(self, folder) -> None:
        self.folder = folder

    def present(self, shard: int) -> bool:
        return True

    def publish_plan(self, distances) -> None:
        if threading.current_thread().name == "fastdata-prefetch" and distances is not None:
            time.sleep(0.3)
        plans.publish_plan(self.folder, distances)


def test_a_new_pass_is_never_overwritten_by_the_old_pass_s_step(tmp_path):
    """start_pass plans on the caller's thread while the prefetch thread may be planning the pass it replaces: the
    two steps must not write this process's plan file at once, and the old pass's plan must not land last."""
    starts = np.array([0, 4, 8])
    old, new = PassPlan(starts), PassPlan(starts)
    old.push(np.arange(8))  # shard 0 now, shard 1 in 4 samples
    new.push(np.array([4, 5, 6, 7, 0, 1, 2, 3]))  # shard 1 now, shard 0 in 4 samples
    prefetcher = Prefetcher(_PlanOnlyCache(tmp_path), window=1)
    try:
        prefetcher.start_pass(old)
        prefetcher.notify()  # the prefetch thread steps on the old pass (and publishes it slowly)
        time.sleep(0.1)
        prefetcher.start_pass(new)
        time.sleep(0.5)  # whatever the old step was doing is over
        published, live = plans.read_plans(tmp_path, 2)
        assert live == 1 and published.tolist() == [4, 0], published
    finally:
        prefetcher.close()


@pytest.mark.parametrize("remote_pack", ["tfrecord"], indirect=True)
def test_a_finished_pass_plans_nothing_more(s3, remote_pack, tmp_path, monkeypatch):
    """Once the loader has read a pass to its end, its plan is gone: its last batches do not count as unread until
    the next pass starts, and no shard is downloaded for them (seen as a second download of a shard in a pass)."""
    monkeypatch.setenv(trace.ENV, str(tmp_path / "trace.log"))
    remote = ShardDataset(remote_pack.url, transform=Crc(), cache_dir=tmp_path / "cache", prefetch=1)
    loader = DataLoaderX(
        remote,
        batch_size=4,
        sampler=ShardBlockOrder(remote._starts, blocks=True, seed=1),
        num_workers=2,
        prefetch_factor=1,
        collate_fn=_collate,
        multiprocessing_context="fork",
    )
    try:
        assert sum(len(batch) for batch in loader) == len(remote)
        cache = remote._remote.cache
        assert not np.isfinite(cache.next_uses()).any() and cache.live_plans == 0, cache.next_uses()
        gets = len([e for e in trace.read_events(tmp_path / "trace.log") if e[2] == "get"])
        time.sleep(0.5)  # the prefetcher would act on a plan left behind within its poll
        assert len([e for e in trace.read_events(tmp_path / "trace.log") if e[2] == "get"]) == gets
    finally:
        remote.close()


class _StampedCache:
    """No shard present; records what the prefetcher claims; shard 0 was downloaded at ``stamp`` (and evicted)."""

    def __init__(self, folder, stamp: int) -> None:
        self.folder, self.stamp, self.claimed = folder, stamp, []

    def present(self, shard: int) -> bool:
        return False

    def downloading(self, shard: int) -> bool:
        return False

    def last_download_ns(self, shard: int) -> int:
        return self.stamp if shard == 0 else 0

    def claim(self, shard: int, *, next_use: float = 0, strict: bool = False):
        self.claimed.append(shard)
        return Fetch.DONE

    def publish_plan(self, distances) -> None:
        plans.publish_plan(self.folder, distances)


@pytest.mark.parametrize("this_pass", [True, False])
def test_a_dispatched_shard_evicted_in_this_pass_is_not_downloaded_again(tmp_path, this_pass):
    """The cursor counts dispatched batches as unread, but the workers may have read them already: a shard of a
    batch in flight that was downloaded in this pass and evicted since is left to the readers (a prefetch of it
    was the second download of a shard in one pass under a tight budget and a loaded CPU). One downloaded in an
    earlier pass is brought as before."""
    plan = PassPlan(np.array([0, 4, 8, 12]))
    plan.push(np.arange(12))  # shard 0, 1, 2 in turn
    plan.dispatch(8)  # the batches of shards 0 and 1 are in flight
    cache = _StampedCache(tmp_path, time.time_ns() + 10**9 if this_pass else 1)
    prefetcher = Prefetcher(cache, window=1)
    try:
        prefetcher.start_pass(plan)
    finally:
        prefetcher.close()
    assert cache.claimed == ([1, 2] if this_pass else [0, 1, 2])
