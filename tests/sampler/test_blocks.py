"""DistributedSampler(shuffle="blocks") and its O(shards)-memory twin "index-blocks": exact permutations per pass,
read a block of shards at a time."""

from __future__ import annotations

import itertools
import json
import logging
from types import SimpleNamespace

import numpy as np
import pytest

from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.sampler import DistributedSampler
from fastdata.sampler.blocks import DEFAULT_BLOCK_SHARDS

SHARDS = [5, 0, 9, 1, 7, 3, 12, 2, 6, 4, 8]  # uneven, with an empty shard: 57 samples
N = sum(SHARDS)
OFFSETS = np.concatenate([[0], np.cumsum(SHARDS)])
SHARD_OF = np.repeat(np.arange(len(SHARDS)), SHARDS)  # sample -> shard


def blocks(world=1, rank=0, sizes=SHARDS, **kwargs):
    kwargs.setdefault("shuffle", "blocks")
    return DistributedSampler(range(sum(sizes)), num_replicas=world, rank=rank, shard_sizes=sizes, **kwargs)


def global_passes(world, **kwargs):
    """Each virtual pass's global stream, rebuilt from every rank's output (rank r has positions r, r+W, ...)."""
    samplers = [blocks(world, r, **kwargs) for r in range(world)]
    streams = [list(s) for s in samplers]
    per_pass = samplers[0].num_samples
    assert all(len(s) == len(samplers[0]) == samplers[0].ratio * per_pass for s in streams)
    return [
        [streams[j % world][p * per_pass + j // world] for j in range(per_pass * world)]
        for p in range(samplers[0].ratio)
    ]


BLOCK_ORDERS = ["blocks", "index-blocks"]


@pytest.mark.parametrize("shuffle", BLOCK_ORDERS)
@pytest.mark.parametrize("block_shards", [1, 3, 100])
@pytest.mark.parametrize("ratio", [1, 3])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("world", [1, 2, 3, 4, 5, 7])
def test_every_sample_once_per_pass_across_ranks(world, drop_last, ratio, block_shards, shuffle):
    kw = dict(drop_last=drop_last, ratio=ratio, block_shards=block_shards, seed=4, shuffle=shuffle)
    passes = global_passes(world, **kw)
    reference = global_passes(1, **kw)  # the order one rank reads: no padding, nothing dropped
    for stream, whole in zip(passes, reference, strict=False):
        assert sorted(whole) == list(range(N))
        if drop_last:
            assert len(stream) == N // world * world and len(set(stream)) == len(stream)
        else:
            assert len(stream) == -(-N // world) * world
            assert sorted(stream[:N]) == list(range(N))
            assert stream[N:] == stream[: len(stream) - N]  # torch's padding: wrap around
        assert stream[:N] == whole[: len(stream)]  # the global order does not depend on the world size
    assert len({tuple(p) for p in passes}) == ratio  # each virtual pass is a fresh order


@pytest.mark.parametrize("shuffle", BLOCK_ORDERS)
@pytest.mark.parametrize("block_shards", [1, 2, 4])
def test_the_stream_reads_one_block_after_another(block_shards, shuffle):
    sampler = blocks(ratio=3, block_shards=block_shards, seed=9, shuffle=shuffle)
    sampler.set_epoch(2)
    stream = list(sampler)
    for p in range(3):
        shard_blocks = sampler.shard_blocks(p)
        assert sorted(np.concatenate(shard_blocks).tolist()) == list(range(len(SHARDS)))
        assert all(len(b) == block_shards for b in shard_blocks[:-1]) and 0 < len(shard_blocks[-1]) <= block_shards
        rest = stream[p * N : (p + 1) * N]
        for block in shard_blocks:
            size = sum(SHARDS[s] for s in block)
            taken, rest = rest[:size], rest[size:]
            assert set(SHARD_OF[taken]) <= set(block.tolist())
            members = itertools.chain.from_iterable(range(OFFSETS[s], OFFSETS[s + 1]) for s in block)
            assert sorted(taken) == sorted(members)
        assert rest == []
    assert len({tuple(sampler.shard_blocks(p)[0]) for p in range(3)}) > 1  # the shards are permuted per pass


@pytest.mark.parametrize("shuffle", BLOCK_ORDERS)
def test_samples_are_shuffled_within_a_block(shuffle):
    sizes = [50] * 8
    stream = list(blocks(sizes=sizes, block_shards=4, seed=1, shuffle=shuffle))
    first = stream[:200]
    assert first != sorted(first)
    # the block's shards are interleaved: the first 20 samples already come from several shards
    assert len(set(np.array(first[:20]) // 50)) >= 3


@pytest.mark.parametrize("shuffle", BLOCK_ORDERS)
def test_each_rank_batch_touches_one_or_two_blocks_only(shuffle):
    sizes = [10] * 40
    world, batch, block_shards = 4, 5, 2
    for rank in range(world):
        sampler = blocks(world, rank, sizes=sizes, block_shards=block_shards, seed=2, shuffle=shuffle)
        order = np.concatenate(sampler.shard_blocks(0))
        block_of_shard = np.empty(40, np.int64)
        block_of_shard[order] = np.arange(40) // block_shards
        stream = np.array(list(sampler))
        for k in range(0, len(stream), batch):
            touched = np.unique(block_of_shard[stream[k : k + batch] // 10])
            assert len(touched) <= 2 and touched[-1] - touched[0] <= 1, (rank, k, touched)
    full = np.array(list(DistributedSampler(range(400), num_replicas=world, rank=0, seed=2)))
    assert max(len(np.unique(full[k : k + batch] // 10)) for k in range(0, 100, batch)) > 2 * block_shards


def test_shard_dataset_layout_is_read_from_shard_offsets(packed):
    root, _ = packed
    dataset = ShardDataset(root)
    offsets = dataset.shard_offsets
    assert offsets.dtype == np.int64 and offsets[0] == 0 and offsets[-1] == len(dataset)
    assert len(offsets) == len(dataset.manifest.shards) + 1
    assert np.diff(offsets).tolist() == [s.num_samples for s in dataset.manifest.shards]
    with pytest.raises(ValueError):
        offsets[0] = 1  # read-only
    sampler = DistributedSampler(dataset, num_replicas=2, rank=1, shuffle="blocks", block_shards=2, seed=3)
    explicit = DistributedSampler(
        range(len(dataset)),
        num_replicas=2,
        rank=1,
        shuffle="blocks",
        block_shards=2,
        seed=3,
        shard_sizes=np.diff(offsets).tolist(),
    )
    assert list(sampler) == list(explicit)
    assert sampler.state_dict() == explicit.state_dict()


def test_class_ordered_pack_is_warned_about(caplog):
    class Packed(list):
        def __init__(self, seed):
            super().__init__(range(10))
            self.manifest = SimpleNamespace(options={"shuffle_seed": seed})
            self.shard_offsets = np.array([0, 5, 10])

    with caplog.at_level(logging.WARNING, logger="fastdata.sampler.blocks"):
        DistributedSampler(Packed(0), shuffle="blocks")
        assert not caplog.records
        DistributedSampler(Packed(None), shuffle=True)
        assert not caplog.records
        DistributedSampler(Packed(None), shuffle="blocks")
    assert "--shuffle-seed" in caplog.text


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (
            dict(shuffle="block"),
            ValueError,
            "shuffle must be True, False, 'blocks', 'index' or 'index-blocks', got 'block'",
        ),
        (dict(shuffle="blocks"), ValueError, "shard_sizes="),  # range() has no shard_offsets
        (dict(shuffle="blocks", shard_sizes=[3, 3]), ValueError, "covers 6 samples but the dataset has 10"),
        (dict(shuffle="blocks", shard_sizes=[12, -2]), ValueError, "shard_sizes must be counts >= 0"),
        (dict(shuffle="blocks", shard_sizes=[5.0, 5.0]), TypeError, "shard_sizes must be a sequence of ints"),
        (dict(shuffle="blocks", shard_sizes=[10], block_shards=0), ValueError, "block_shards must be >= 1"),
        (dict(shuffle="blocks", shard_sizes=[10], block_shards=2.0), TypeError, "block_shards"),
    ],
)
def test_argument_validation(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        DistributedSampler(range(10), **kwargs)


def test_dataset_offsets_that_do_not_add_up_are_refused():
    class Bad(list):
        shard_offsets = np.array([0, 4, 8])

    with pytest.raises(ValueError, match=r"dataset.shard_offsets covers 8 samples but the dataset has 10"):
        DistributedSampler(Bad(range(10)), shuffle="blocks")


def test_defaults_and_shard_blocks_guards():
    sampler = blocks()
    assert sampler.block_shards == DEFAULT_BLOCK_SHARDS == 8
    assert "block_shards=8" in repr(sampler) and "'blocks'" in repr(sampler)
    with pytest.raises(ValueError, match="virtual_pass must be in"):
        sampler.shard_blocks(1)
    with pytest.raises(ValueError, match="shard_blocks\\(\\) needs shuffle='blocks'"):
        DistributedSampler(range(5)).shard_blocks()
    assert list(DistributedSampler(range(0), shuffle="blocks", shard_sizes=[])) == []


@pytest.mark.parametrize("shuffle", BLOCK_ORDERS)
@pytest.mark.parametrize("world,rank,ratio,drop_last", [(1, 0, 3, False), (3, 2, 4, False), (4, 1, 2, True)])
def test_mid_pass_resume_on_the_same_world(world, rank, ratio, drop_last, shuffle):
    kw = dict(ratio=ratio, drop_last=drop_last, seed=11, block_shards=3, shuffle=shuffle)
    reference = blocks(world, rank, **kw)
    reference.set_epoch(2)
    full = list(reference)
    for cut in sorted({0, 1, reference.num_samples, reference.num_samples + 2, len(full) - 1, len(full)}):
        saver = blocks(world, rank, **kw)
        saver.set_epoch(2)
        state = saver.state_dict()
        assert (state["block_shards"], state["shard_layout"].split(",")[0]) == (3, "11 shards")
        state["start_index"] += cut
        resumed = blocks(world, rank, **kw)
        resumed.load_state_dict(json.loads(json.dumps(state)))
        assert list(resumed) == full[cut:], cut
        assert list(resumed) == full, cut


@pytest.mark.parametrize(
    "change,match",
    [
        (dict(block_shards=4), "block_shards=3 but this sampler has block_shards=4"),
        (dict(sizes=SHARDS[::-1]), "shard_layout="),
        (dict(shuffle=True), "shuffle='blocks' but this sampler has shuffle=True"),
        (dict(shuffle="index-blocks"), "shuffle='blocks' but this sampler has shuffle='index-blocks'"),
    ],
)
def test_load_refuses_another_block_setup(change, match):
    state = blocks(2, 0, block_shards=3).state_dict()
    kw = dict(block_shards=3)
    kw.update(change)
    with pytest.raises(ValueError, match=match):
        blocks(2, 0, **kw).load_state_dict(state)
