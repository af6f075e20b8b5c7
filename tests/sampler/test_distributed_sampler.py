"""Tests for fastdata.sampler.DistributedSampler against torch's DistributedSampler."""

from __future__ import annotations

import itertools
import pickle
from collections import Counter

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler as TorchSampler

from fastdata.sampler import DistributedSampler

SIZES = (0, 1, 7, 10, 100, 101)


def torch_stream(n, replicas, rank, epochs, **kwargs):
    """Concatenation of torch's passes over ``range(n)`` for the given epochs."""
    ref = TorchSampler(range(n), num_replicas=replicas, rank=rank, **kwargs)
    out = []
    for epoch in epochs:
        ref.set_epoch(epoch)
        out.extend(ref)
    return out


def ours(n, replicas=1, rank=0, **kwargs):
    return DistributedSampler(range(n), num_replicas=replicas, rank=rank, **kwargs)


def test_equals_torch_at_ratio_1():
    grid = itertools.product(SIZES, range(1, 6), (True, False), (True, False), (0, 7), range(4))
    checked = 0
    for n, replicas, shuffle, drop_last, seed, epoch in grid:
        for rank in range(replicas):
            kw = dict(shuffle=shuffle, drop_last=drop_last, seed=seed)
            ref = TorchSampler(range(n), num_replicas=replicas, rank=rank, **kw)
            mine = ours(n, replicas, rank, **kw)
            ref.set_epoch(epoch)
            mine.set_epoch(epoch)
            got = list(mine)
            assert got == list(ref), (n, replicas, rank, kw, epoch)
            assert all(type(i) is int for i in got)
            assert len(mine) == len(ref) == len(got)
            assert (mine.num_samples, mine.total_size) == (ref.num_samples, ref.total_size)
            checked += 1
    assert checked > 2000


@pytest.mark.parametrize("ratio", [2, 3, 5])
def test_ratio_is_concatenation_of_torch_epochs(ratio):
    for n, replicas, shuffle, drop_last, epoch in itertools.product(
        (1, 7, 10, 101), (1, 2, 3), (True, False), (True, False), (0, 1, 3)
    ):
        for rank in range(replicas):
            kw = dict(shuffle=shuffle, drop_last=drop_last, seed=5)
            mine = ours(n, replicas, rank, ratio=ratio, **kw)
            mine.set_epoch(epoch)
            expected = torch_stream(n, replicas, rank, range(epoch * ratio, epoch * ratio + ratio), **kw)
            assert list(mine) == expected, (n, replicas, rank, kw, epoch)
            assert len(mine) == len(expected) == ratio * mine.num_samples


def test_each_virtual_pass_is_reshuffled():
    sampler = ours(50, ratio=4, seed=1)
    stream = list(sampler)
    passes = [tuple(stream[i * 50 : (i + 1) * 50]) for i in range(4)]
    assert all(sorted(p) == list(range(50)) for p in passes)
    assert len(set(passes)) == 4


@pytest.mark.parametrize("n,replicas,ratio", [(12, 3, 4), (100, 4, 3), (10, 5, 7), (9, 1, 2)])
@pytest.mark.parametrize("drop_last", [True, False])
def test_each_sample_appears_ratio_times_and_ranks_are_disjoint(n, replicas, ratio, drop_last):
    per_rank = [list(ours(n, replicas, r, ratio=ratio, drop_last=drop_last, seed=3)) for r in range(replicas)]
    counts = Counter(itertools.chain.from_iterable(per_rank))
    assert counts == {i: ratio for i in range(n)}
    per_pass = n // replicas
    for p in range(ratio):
        chunks = [set(stream[p * per_pass : (p + 1) * per_pass]) for stream in per_rank]
        assert set().union(*chunks) == set(range(n))
        assert sum(map(len, chunks)) == n  # disjoint


def test_len_and_attributes():
    sampler = DistributedSampler(range(101), num_replicas=4, rank=3, shuffle=False, seed=9, drop_last=True, ratio=6)
    assert (sampler.num_replicas, sampler.rank, sampler.shuffle, sampler.seed) == (4, 3, False, 9)
    assert (sampler.drop_last, sampler.ratio, sampler.epoch) == (True, 6, 0)
    assert (sampler.num_samples, sampler.total_size, len(sampler)) == (25, 100, 150)
    assert len(list(sampler)) == 150
    assert "ratio=6" in repr(sampler)
    loader = DataLoader(range(101), batch_size=10, sampler=sampler)
    assert len(loader) == 15


def test_default_single_replica_without_process_group():
    assert not (dist.is_available() and dist.is_initialized())
    sampler = DistributedSampler(range(10), seed=2)
    assert (sampler.num_replicas, sampler.rank) == (1, 0)
    assert list(sampler) == list(TorchSampler(range(10), num_replicas=1, rank=0, seed=2))
    assert DistributedSampler(range(10), num_replicas=3).rank == 0


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(num_replicas=2, rank=2), ValueError, "rank"),
        (dict(num_replicas=2, rank=-1), ValueError, "rank"),
        (dict(num_replicas=0, rank=0), ValueError, "num_replicas"),
        (dict(num_replicas=2.0, rank=0), TypeError, "num_replicas"),
        (dict(ratio=0), ValueError, "ratio"),
        (dict(ratio=-3), ValueError, "ratio"),
        (dict(ratio=2.5), TypeError, "ratio"),
        (dict(ratio=True), TypeError, "ratio"),
        (dict(seed="0"), TypeError, "seed"),
    ],
)
def test_argument_validation(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        DistributedSampler(range(10), **kwargs)


def resume_cases():
    # (n, replicas, rank, ratio, drop_last); num_samples per pass differs across cases
    return [(10, 1, 0, 3, False), (101, 3, 2, 4, False), (101, 4, 1, 2, True), (7, 5, 4, 3, False)]


@pytest.mark.parametrize("n,replicas,rank,ratio,drop_last", resume_cases())
def test_mid_pass_resume_equals_uninterrupted_stream(n, replicas, rank, ratio, drop_last):
    kw = dict(ratio=ratio, drop_last=drop_last, seed=11)
    reference = ours(n, replicas, rank, **kw)
    reference.set_epoch(2)
    full = list(reference)
    next_full = list(reference)  # same epoch again: a full pass, identical
    assert next_full == full
    per_pass = reference.num_samples
    cuts = {0, 1, per_pass // 2, per_pass, per_pass + 1, 2 * per_pass - 1, len(full) - 1, len(full)}
    for cut in sorted(cuts):
        saver = ours(n, replicas, rank, **kw)
        saver.set_epoch(2)
        state = saver.state_dict()
        assert state["start_index"] == 0 and state["epoch"] == 2
        state["start_index"] += cut
        state = pickle.loads(pickle.dumps(state))
        resumed = ours(n, replicas, rank, **kw)
        resumed.load_state_dict(state)
        resumed.set_epoch(2)  # the usual loop sets the loaded epoch again: must keep the position
        assert list(resumed) == full[cut:], cut
        assert list(resumed) == full, cut  # the iter after a resumed one is a full pass
        resumed.set_epoch(3)
        reference.set_epoch(3)
        assert list(resumed) == list(reference)


def test_resume_does_not_generate_skipped_passes(monkeypatch):
    sampler = ours(20, ratio=50, seed=1)
    sampler.set_epoch(4)
    seen = []
    original = DistributedSampler._pass_indices
    monkeypatch.setattr(DistributedSampler, "_pass_indices", lambda self, ve: seen.append(ve) or original(self, ve))
    sampler.set_start_index(20 * 47 + 3)
    assert len(list(sampler)) == 20 * 3 - 3
    assert seen == [4 * 50 + 47, 4 * 50 + 48, 4 * 50 + 49]


def test_state_dict_during_a_pass_describes_that_pass():
    sampler = ours(30, ratio=2, seed=4)
    sampler.set_start_index(5)
    it = iter(sampler)
    next(it)
    state = sampler.state_dict()
    assert state["start_index"] == 5  # the pass in progress started at 5
    rest = list(it)
    assert sampler.state_dict()["start_index"] == 0  # exhausted: the next pass is full
    again = ours(30, ratio=2, seed=4)
    again.load_state_dict(state)
    assert list(again)[1:] == rest


def test_abandoned_pass_does_not_leak_its_start_index():
    sampler = ours(30, ratio=2, seed=4)
    sampler.set_start_index(7)
    it = iter(sampler)
    next(it)
    del it  # a loop that breaks early closes its iterator
    assert sampler.state_dict()["start_index"] == 0


def test_set_epoch_to_a_new_epoch_drops_the_pending_position():
    sampler = ours(30, ratio=2, seed=4)
    sampler.set_start_index(7)
    sampler.set_epoch(1)
    assert sampler.state_dict()["start_index"] == 0
    assert len(list(sampler)) == 60


def test_state_dict_is_complete_and_cheap():
    sampler = ours(10**7, 2, 1, ratio=100, seed=3)  # building or saving state generates nothing
    state = sampler.state_dict()
    assert state == {
        "epoch": 0,
        "seed": 3,
        "ratio": 100,
        "num_replicas": 2,
        "shuffle": True,
        "drop_last": False,
        "start_index": 0,
        "dataset_length": 10**7,
    }


@pytest.mark.parametrize(
    "field,value",
    [
        ("num_replicas", 3),
        ("ratio", 5),
        ("seed", 1),
        ("shuffle", False),
        ("drop_last", True),
        ("dataset_length", 99),
    ],
)
def test_load_refuses_mismatched_state(field, value):
    state = ours(100, 2, 0, ratio=4).state_dict()
    state[field] = value
    target = ours(100, 2, 0, ratio=4)
    with pytest.raises(ValueError, match=rf"{field}={value!r}.*{field}="):
        target.load_state_dict(state)


@pytest.mark.parametrize("start", [-1, 201])
def test_load_refuses_out_of_range_start_index(start):
    sampler = ours(100, 2, 0, ratio=4)
    state = sampler.state_dict()
    state["start_index"] = start
    with pytest.raises(ValueError, match=r"start_index.*\[0, 200\]"):
        sampler.load_state_dict(state)
    assert sampler.state_dict()["start_index"] == 0  # a refused state changes nothing


def test_load_refuses_malformed_state():
    sampler = ours(10)
    with pytest.raises(TypeError, match="mapping"):
        sampler.load_state_dict([("epoch", 0)])
    state = sampler.state_dict()
    del state["start_index"]
    with pytest.raises(ValueError, match="start_index"):
        sampler.load_state_dict(state)
    with pytest.raises(TypeError, match="start_index"):
        sampler.set_start_index(1.5)
    with pytest.raises(TypeError, match="epoch"):
        sampler.set_epoch("1")


def test_dataset_resized_after_construction_is_reported():
    data = list(range(10))
    sampler = DistributedSampler(data)
    data.append(10)
    with pytest.raises(RuntimeError, match="changed size"):
        list(sampler)


def test_pickle_roundtrip_keeps_stream_and_state():
    sampler = ours(50, 3, 1, ratio=3, seed=8)
    sampler.set_epoch(5)
    sampler.set_start_index(17)
    clone = pickle.loads(pickle.dumps(sampler))
    assert clone.state_dict() == sampler.state_dict()
    assert list(clone) == list(sampler)


def test_dataloader_with_spawned_workers():
    data = TensorDataset(torch.arange(23))
    sampler = DistributedSampler(data, num_replicas=2, rank=1, seed=6, ratio=2)
    sampler.set_epoch(1)
    loader = DataLoader(
        data,
        batch_size=4,
        sampler=sampler,
        num_workers=1,
        multiprocessing_context="spawn",
        persistent_workers=False,
    )
    got = torch.cat([batch[0] for batch in loader]).tolist()
    assert got == torch_stream(23, 2, 1, range(2, 4), seed=6)
