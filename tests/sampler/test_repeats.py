"""DistributedSampler(..., repeats=k): repeated augmentation as DeiT's / torchvision's RASampler."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from fastdata.sampler import DistributedSampler


def ra_sampler(n: int, world: int, rank: int, repeats: int, epoch: int, truncate_256: bool) -> list[int]:
    """The RASampler of DeiT / torchvision's reference scripts, written from its definition."""
    num_samples = int(math.ceil(n * repeats / world))
    total_size = num_samples * world
    selected = n // 256 * 256 // world if truncate_256 else int(math.ceil(n / world))
    g = torch.Generator()
    g.manual_seed(epoch)
    indices = [i for i in torch.randperm(n, generator=g).tolist() for _ in range(repeats)]
    indices += indices[: total_size - len(indices)]
    return indices[rank:total_size:world][:selected]


def ranks(n, world, **kwargs):
    return [DistributedSampler(range(n), num_replicas=world, rank=r, **kwargs) for r in range(world)]


@pytest.mark.parametrize("n, world, repeats", [(512, 4, 3), (1024, 8, 4), (768, 2, 2)])
def test_equals_ra_sampler_with_its_256_truncation_where_it_truncates_nothing(n, world, repeats):
    for epoch in (0, 1, 5):
        for sampler in ranks(n, world, repeats=repeats):
            sampler.set_epoch(epoch)
            assert list(sampler) == ra_sampler(n, world, sampler.rank, repeats, epoch, truncate_256=True)


@pytest.mark.parametrize("n, world, repeats", [(1000, 4, 3), (1001, 3, 3), (37, 4, 2)])
def test_equals_ra_sampler_without_truncation_otherwise(n, world, repeats):
    for sampler in ranks(n, world, repeats=repeats):
        sampler.set_epoch(2)
        assert list(sampler) == ra_sampler(n, world, sampler.rank, repeats, 2, truncate_256=False)


@pytest.mark.parametrize("shuffle", [True, False, "blocks", "index", "index-blocks"])
@pytest.mark.parametrize("ratio", [1, 3])
@pytest.mark.parametrize("drop_last", [False, True])
def test_copies_go_to_different_ranks_and_the_pass_length_is_unchanged(shuffle, ratio, drop_last):
    n, world, k = 203, 4, 3
    extra = {"shard_sizes": [20] * 10 + [3]} if shuffle in ("blocks", "index-blocks") else {}
    samplers = ranks(n, world, repeats=k, shuffle=shuffle, ratio=ratio, drop_last=drop_last, **extra)
    plain = ranks(n, world, shuffle=shuffle, ratio=ratio, drop_last=drop_last, **extra)
    streams = [list(s) for s in samplers]
    assert [len(s) for s in streams] == [len(s) for s in samplers] == [len(p) for p in plain]
    per_pass = samplers[0].num_samples
    for p in range(ratio):
        passes = [stream[p * per_pass : (p + 1) * per_pass] for stream in streams]
        for one in passes:  # never twice on one rank in a pass
            assert len(set(one)) == len(one)
        copies = Counter(i for one in passes for i in one)
        assert set(copies.values()) <= set(range(1, k + 1))
        assert sum(c == k for c in copies.values()) >= len(copies) - 2  # only the pass's two ends are cut
        total = per_pass * world  # positions in a pass, as without repeats
        assert total // k <= len(copies) <= math.ceil(total / k) + 1
    if ratio > 1 and shuffle is not False:
        assert streams[0][:per_pass] != streams[0][per_pass : 2 * per_pass]


@pytest.mark.parametrize("shuffle", [True, "index"])
@pytest.mark.parametrize("ratio", [1, 2])
def test_mid_pass_resume_and_resume_on_another_world(ratio, shuffle):
    n, k = 480, 3
    full = [list(s) for s in ranks(n, 4, repeats=k, ratio=ratio, seed=7, shuffle=shuffle)]
    state = ranks(n, 4, repeats=k, ratio=ratio, seed=7, shuffle=shuffle)[0].state_dict()
    consumed = 30
    state["start_index"] += consumed
    assert state["repeats"] == k
    for r, sampler in enumerate(ranks(n, 4, repeats=k, ratio=ratio, seed=7, shuffle=shuffle)):
        sampler.load_state_dict(state)
        assert list(sampler) == full[r][consumed:]
    done = Counter(i for stream in full for i in stream[:consumed])
    rest = Counter()
    for sampler in ranks(n, 3, repeats=k, ratio=ratio, seed=7, shuffle=shuffle):
        sampler.load_state_dict(sampler.adapt_state(state))
        rest.update(sampler)
    assert done + rest == Counter(i for stream in full for i in stream)


def test_state_of_another_repeats_is_refused_and_arguments_checked():
    state = DistributedSampler(range(10), num_replicas=2, rank=0).state_dict()
    with pytest.raises(ValueError, match="repeats=1 but this sampler has repeats=2"):
        DistributedSampler(range(10), num_replicas=2, rank=0, repeats=2).load_state_dict(state)
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        DistributedSampler(range(10), num_replicas=2, rank=0, repeats=0)
    assert "repeats=2" in repr(DistributedSampler(range(10), num_replicas=2, rank=0, repeats=2))
