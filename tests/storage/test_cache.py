"""The shard cache: checked downloads (retried, never served corrupt), the budget, furthest-next-use eviction,
held shards, stale downloads, and one download per shard when several processes want it at once."""

from __future__ import annotations

import multiprocessing
import random

import numpy as np
import pytest

from fastdata._util.fs import file_crc32c
from fastdata.storage import trace
from fastdata.storage.cache import DownloadError, Fetch, Hold, minimum_budget
from fastdata.storage.shards import RemoteShards
from tests.storage.conftest import whole_gets
from tests.storage.servers import Fault


def open_remote(remote_pack, tmp_path, **kwargs) -> RemoteShards:
    options = {"cache_dir": tmp_path / "cache", "cache_limit": None, "prefetch": 1} | kwargs
    return RemoteShards(remote_pack.url, **options)


def shard_gets(s3, remote_pack, shard: int) -> int:
    """Whole (not ranged) GETs of the shard file."""
    return whole_gets(s3.proxy, remote_pack)[shard]


def shard_file(remote_pack, shard: int) -> str:
    return f"shard-{shard:05d}.{remote_pack.format}"


@pytest.mark.parametrize("kind", ["corrupt", "truncate", "short", "error"])
def test_bad_download_is_detected_and_retried(kind, s3, remote_pack, tmp_path, monkeypatch):
    monkeypatch.setenv(trace.ENV, str(tmp_path / "trace.log"))
    remote = open_remote(remote_pack, tmp_path)
    s3.proxy.faults.append(Fault("shard-00003.", kind, times=1, ranged=False))
    assert remote.cache.fetch(3) is Fetch.DONE
    assert shard_gets(s3, remote_pack, 3) == 2  # the spoiled GET and its retry
    assert file_crc32c(remote.cache.path(3)) == remote.manifest.shards[3].crc32c
    events = [e[2] for e in trace.read_events(tmp_path / "trace.log") if e[3] == 3]
    assert events[-1] == "ready" and ("corrupt" in events or "error" in events or kind == "error")


def test_persistently_corrupt_shard_is_never_served(s3, remote_pack, tmp_path):
    remote = open_remote(remote_pack, tmp_path)
    s3.proxy.faults.append(Fault("shard-00002.", "corrupt", times=100, ranged=False))
    with pytest.raises(DownloadError, match="could not be downloaded intact"):
        remote.cache.hold(2)
    assert shard_gets(s3, remote_pack, 2) == remote.cache.retries
    assert list((remote.cache.root / "shards").iterdir()) == []  # neither the shard nor its .tmp


def test_too_small_budget_is_refused_naming_the_minimum(s3, remote_pack, tmp_path):
    from fastdata import ShardDataset

    largest = max(s.nbytes for s in open_remote(remote_pack, tmp_path).manifest.shards)
    minimum = minimum_budget([largest], 2)
    assert minimum == 3 * largest
    with pytest.raises(ValueError, match=f"the minimum is {minimum} bytes"):
        ShardDataset(remote_pack.url, cache_dir=tmp_path / "cache", cache_limit=minimum - 1, prefetch=2)
    ShardDataset(remote_pack.url, cache_dir=tmp_path / "cache", cache_limit=minimum, prefetch=2)
    with pytest.raises(ValueError, match="cache_limit="):
        ShardDataset(remote_pack.url, cache_dir=tmp_path / "cache", cache_limit="lots")


def cached(remote) -> set[int]:
    return {i for i in range(len(remote.manifest.shards)) if remote.cache.present(i)}


def test_eviction_takes_the_shard_needed_furthest_in_the_future(s3, remote_pack, tmp_path):
    remote = open_remote(remote_pack, tmp_path)
    sizes = [s.nbytes for s in remote.manifest.shards]
    remote.cache.limit = 3 * max(sizes[:7])  # room for 3 shards only
    assert 4 * min(sizes[:7]) > remote.cache.limit
    for shard in (0, 1, 2):
        assert remote.cache.fetch(shard) is Fetch.DONE
    plan = np.full(len(sizes), -1)
    plan[[0, 1, 3, 4, 5]] = [5, 100, 10, 50, 200]  # shard 2: not planned at all
    remote.cache.publish_plan(plan)
    assert remote.cache.fetch(3, next_use=10, strict=True) is Fetch.DONE and cached(remote) == {0, 1, 3}
    assert remote.cache.fetch(4, next_use=50, strict=True) is Fetch.DONE and cached(remote) == {0, 3, 4}
    # a prefetch never evicts a shard needed sooner than the one it brings
    assert remote.cache.fetch(5, next_use=200, strict=True) is Fetch.NO_ROOM and cached(remote) == {0, 3, 4}
    assert remote.cache.fetch(5, next_use=0, strict=False) is Fetch.DONE and cached(remote) == {0, 3, 5}
    hold = remote.cache.try_hold(5)  # a reader holds the furthest one: it is skipped
    assert isinstance(hold, Hold)
    assert remote.cache.fetch(6, next_use=0, strict=False) is Fetch.DONE and cached(remote) == {0, 5, 6}
    hold.release()
    remote.cache.publish_plan(None)


def test_stale_download_of_a_dead_process_is_removed(s3, remote_pack, tmp_path):
    remote = open_remote(remote_pack, tmp_path)
    sizes = [s.nbytes for s in remote.manifest.shards]
    remote.cache.limit = 3 * max(sizes)
    stale = remote.cache.path(1).with_name(remote.cache.shards[1].name + ".tmp")
    with open(stale, "wb") as f:
        f.truncate(10 * max(sizes))  # a crashed download: no lock held
    assert remote.cache.fetch(0, strict=True) is Fetch.DONE
    assert not stale.exists() and cached(remote) == {0}


def _hold_all(url, cache_dir, order, queue):
    remote = RemoteShards(url, cache_dir=cache_dir, cache_limit=None, prefetch=1)
    for shard in order:
        hold = remote.cache.hold(shard)
        queue.put((shard, file_crc32c(hold.path)))
        hold.release()


def test_processes_racing_for_shards_download_each_once(s3, remote_pack, tmp_path):
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    n = remote_pack.num_shards
    s3.proxy.faults.append(Fault("shard-", "slow", times=10**6, delay=0.02, ranged=False))  # widen the races
    orders = [random.Random(seed).sample(range(n), n) for seed in range(4)]
    workers = [ctx.Process(target=_hold_all, args=(remote_pack.url, tmp_path / "cache", o, queue)) for o in orders]
    for w in workers:
        w.start()
    results = [queue.get(timeout=120) for _ in range(4 * n)]
    for w in workers:
        w.join(60)
    crcs = {s.path: s.crc32c for s in open_remote(remote_pack, tmp_path).manifest.shards}
    assert all(crc == crcs[shard_file(remote_pack, shard)] for shard, crc in results)
    assert [shard_gets(s3, remote_pack, i) for i in range(n)] == [1] * n


@pytest.mark.parametrize("remote_pack", ["lmdb"], indirect=True)
def test_a_download_is_stamped_and_the_stamp_outlives_eviction(s3, remote_pack, tmp_path):
    import time

    remote = open_remote(remote_pack, tmp_path)
    assert remote.cache.last_download_ns(2) == 0  # never downloaded (no lock file yet)
    hold = remote.cache.try_hold(2)  # a look creates the lock file: still no stamp
    assert hold is None and remote.cache.last_download_ns(2) == 0
    before = time.time_ns()
    assert remote.cache.fetch(2) is Fetch.DONE
    stamp = remote.cache.last_download_ns(2)
    assert before <= stamp <= time.time_ns()
    remote.cache.path(2).unlink()  # evicted
    assert remote.cache.last_download_ns(2) == stamp and remote.cache.last_download_ns(1) == 0
    assert remote.cache.try_hold(2) is None  # the stamp does not look like a shard, and the lock still works
    assert remote.cache.fetch(2) is Fetch.DONE and remote.cache.last_download_ns(2) > stamp
