"""DistributedSampler(shuffle="index"): a keyed bijection per pass, each index computed on demand (feistel.py,
index_shuffle.py). Resume on another world and repeats are also checked in test_elastic.py and test_repeats.py,
the "index-blocks" order in test_blocks.py."""

from __future__ import annotations

import itertools
import json
import tracemalloc

import numpy as np
import pytest
from torch.utils.data import Dataset

from fastdata.loader.dataloader import DataLoaderX
from fastdata.sampler import DistributedSampler
from fastdata.sampler.feistel import domain_bits, permute, round_keys


class Sized:
    """A dataset of ``n`` samples that holds nothing (the sampler only needs ``len``)."""

    def __init__(self, n: int, shard_sizes: list[int] | None = None) -> None:
        self.n = n
        if shard_sizes is not None:
            self.shard_offsets = np.concatenate([[0], np.cumsum(shard_sizes)])

    def __len__(self) -> int:
        return self.n


def stream(n, world=1, rank=0, **kwargs):
    kwargs.setdefault("shuffle", "index")
    sampler = DistributedSampler(Sized(n), num_replicas=world, rank=rank, **kwargs)
    return np.fromiter(iter(sampler), np.int64, count=len(sampler))


@pytest.mark.parametrize("n", [1, 2, 7, 1000, 10**6 + 3])
def test_each_pass_is_a_permutation(n):
    order = stream(n, seed=3)
    assert np.array_equal(np.sort(order), np.arange(n))
    if n >= 7:
        assert not np.array_equal(order, np.arange(n))


@pytest.mark.parametrize("n,world,drop_last", [(1000, 3, False), (1000, 7, True), (5, 8, False), (10**5 + 1, 4, False)])
def test_ranks_split_the_world_independent_order_with_torchs_padding(n, world, drop_last):
    whole = stream(n, seed=5)  # what one rank reads: the global order
    ranks = [stream(n, world, r, seed=5, drop_last=drop_last) for r in range(world)]
    assert len({len(r) for r in ranks}) == 1
    interleaved = np.stack(ranks, axis=1).reshape(-1)  # position j is rank j % world's (j // world)-th
    expected = np.resize(whole, len(interleaved))  # padding wraps around, drop_last truncates
    assert np.array_equal(interleaved, expected)


def test_order_differs_per_epoch_per_virtual_pass_and_per_seed_and_is_reproducible():
    n = 1000
    sampler = DistributedSampler(Sized(n), num_replicas=1, rank=0, shuffle="index", seed=0, ratio=3)
    passes = {}
    for epoch in range(2):
        sampler.set_epoch(epoch)
        out = np.array(list(sampler))
        for p in range(3):
            one = out[p * n : (p + 1) * n]
            assert np.array_equal(np.sort(one), np.arange(n))
            passes[epoch, p] = tuple(one)
    assert len(set(passes.values())) == 6  # every virtual pass its own key
    assert tuple(stream(n, seed=1)) != tuple(stream(n, seed=0)) == passes[0, 0]
    assert tuple(stream(n, seed=-1)) not in {tuple(stream(n, seed=s)) for s in (0, 1)}  # negative seeds are keys too
    again = DistributedSampler(Sized(n), num_replicas=1, rank=0, shuffle="index", seed=0, ratio=3)
    again.set_epoch(1)
    assert tuple(list(again)[n : 2 * n]) == passes[1, 1]


def test_statistical_quality_of_a_million():
    n = 10**6
    order = stream(n, seed=0)
    where = np.empty(n, np.int64)
    where[order] = np.arange(n)  # the position of each index
    # the first 1000 outputs are spread over the range: chi-square over 10 bins below the 0.1% point (27.9)
    counts = np.bincount(order[:1000] * 10 // n, minlength=10)
    assert ((counts - 100) ** 2 / 100).sum() < 27.9
    # no linear trace of the input: position vs value, consecutive outputs, positions of consecutive indices
    for a, b in ((np.arange(n), order), (order[:-1], order[1:]), (where[:-1], where[1:])):
        assert abs(np.corrcoef(a, b)[0, 1]) < 0.01
    # consecutive indices land |gap| ~ n/3 apart as in a uniform permutation (not near each other)
    assert abs(np.abs(np.diff(where)).mean() / n - 1 / 3) < 0.01
    # two passes are unrelated
    other = DistributedSampler(Sized(n), num_replicas=1, rank=0, shuffle="index", seed=0)
    other.set_epoch(1)
    assert abs(np.corrcoef(order, np.fromiter(iter(other), np.int64, count=n))[0, 1]) < 0.01
    assert (order == np.arange(n)).sum() < 10  # about one fixed point, as a uniform permutation has


@pytest.mark.parametrize("shuffle,kwargs", [("index", {}), ("index-blocks", {"shard_sizes": [10**7] * 100})])
def test_iter_and_a_resume_deep_into_a_billion_samples_need_constant_memory(shuffle, kwargs):
    n = 10**9
    sampler = DistributedSampler(Sized(n), num_replicas=8, rank=3, shuffle=shuffle, ratio=4, **kwargs)
    tracemalloc.start()
    try:
        first = list(itertools.islice(iter(sampler), 10))
        sampler.set_start_index(3 * sampler.num_samples + 12345)  # a resume in the last virtual pass
        resumed = list(itertools.islice(iter(sampler), 10))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20  # a permutation of 10^9 would be 8 GB; shuffle=True needs 8 GB for randperm
    assert len(set(first + resumed)) == 20 and all(0 <= i < n for i in first + resumed)


@pytest.mark.parametrize("shuffle", ["index", "index-blocks"])
@pytest.mark.parametrize(
    "n,world,rank,ratio,drop_last",
    [(10, 1, 0, 3, False), (101, 3, 2, 4, False), (101, 4, 1, 2, True), (7, 5, 4, 3, False)],
)
def test_mid_pass_resume_equals_uninterrupted_stream(shuffle, n, world, rank, ratio, drop_last):
    kw = dict(num_replicas=world, rank=rank, shuffle=shuffle, ratio=ratio, drop_last=drop_last, seed=11)
    if shuffle == "index-blocks":
        kw.update(shard_sizes=[n // 3, 0, n - n // 3 - 1, 1], block_shards=2)
    reference = DistributedSampler(range(n), **kw)
    reference.set_epoch(2)
    full = list(reference)
    per_pass = reference.num_samples
    for cut in sorted({0, 1, per_pass // 2, per_pass, per_pass + 1, len(full) - 1, len(full)}):
        saver = DistributedSampler(range(n), **kw)
        saver.set_epoch(2)
        state = saver.state_dict()
        state["start_index"] += cut
        resumed = DistributedSampler(range(n), **kw)
        resumed.load_state_dict(json.loads(json.dumps(state)))
        resumed.set_epoch(2)
        assert list(resumed) == full[cut:], cut
        assert list(resumed) == full, cut  # the iter after a resumed one is a full pass


class Numbers(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        return int(i)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_dataloaderx_state_dict_round_trip(num_workers):
    data = Numbers(1003)

    def make():
        sampler = DistributedSampler(data, num_replicas=2, rank=1, shuffle="index", seed=5, ratio=3)
        return DataLoaderX(data, batch_size=16, sampler=sampler, num_workers=num_workers)

    whole = [b.tolist() for b in make()]
    assert len(whole) == -(-3 * 502 // 16)
    loader = make()
    it = iter(loader)
    seen = [next(it).tolist() for _ in range(40)]  # into the second virtual pass (32 batches each)
    state = json.loads(json.dumps(loader.state_dict()))
    it.close()
    assert state["sampler"]["shuffle"] == "index" and seen == whole[:40]
    resumed = make()
    resumed.load_state_dict(state)
    assert [b.tolist() for b in resumed] == whole[40:]


def test_argument_checks_and_settings_that_must_match():
    with pytest.raises(ValueError, match="shuffle must be True, False, 'blocks', 'index' or 'index-blocks'"):
        DistributedSampler(range(10), shuffle="Index")
    with pytest.raises(ValueError, match="shard_sizes="):  # range() has no shard_offsets
        DistributedSampler(range(10), shuffle="index-blocks")
    with pytest.raises(ValueError, match="shard_blocks\\(\\) needs shuffle='blocks' or 'index-blocks'"):
        DistributedSampler(range(10), shuffle="index").shard_blocks()
    state = DistributedSampler(range(10), num_replicas=2, rank=0, shuffle="index").state_dict()
    with pytest.raises(ValueError, match="shuffle='index' but this sampler has shuffle=True"):
        DistributedSampler(range(10), num_replicas=2, rank=0).load_state_dict(state)
    assert "shuffle='index'" in repr(DistributedSampler(range(10), shuffle="index"))
    assert list(DistributedSampler(range(0), shuffle="index")) == []
    assert list(DistributedSampler(range(0), shuffle="index-blocks", shard_sizes=[0, 0])) == []


def test_index_blocks_with_only_empty_shards_but_one():
    sampler = DistributedSampler(range(3), shuffle="index-blocks", shard_sizes=[0, 0, 3, 0, 0], block_shards=2, ratio=4)
    out = list(sampler)
    assert [sorted(out[p * 3 : (p + 1) * 3]) for p in range(4)] == [[0, 1, 2]] * 4


def test_the_bijection_at_every_domain_size():
    keys = round_keys(1, 2, 3)
    for n in range(1, 130):  # every domain from 4 to 256 values, cycle walking from a fraction of it
        assert np.array_equal(np.sort(permute(np.arange(n), n, keys)), np.arange(n)), n
    assert [domain_bits(n) for n in (1, 2, 4, 5, 8, 9, 2**40 + 1)] == [2, 2, 2, 3, 3, 4, 41]
    sizes = np.array([0, 1, 2, 4, 5, 8, 9, 2**40 + 1])
    assert domain_bits(sizes).tolist() == [2, 2, 2, 2, 3, 3, 4, 41]
    # one permutation per value: positions of several sizes and keys at once equal each one alone
    n = np.array([5, 1000, 5, 1000])
    per_value = np.stack([round_keys(0, i) for i in range(4)], axis=1)
    together = permute(np.array([4, 999, 4, 999]), n, per_value)
    alone = [
        int(permute(np.array([p]), int(s), round_keys(0, i))[0])
        for i, (p, s) in enumerate(zip([4, 999, 4, 999], n, strict=False))
    ]
    assert together.tolist() == alone
