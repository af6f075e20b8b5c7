"""Resume on another number of ranks: every remaining sample of the pass exactly once across the new ranks."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset

from fastdata.loader.collate import fast_collate
from fastdata.loader.dataloader import DataLoaderX
from fastdata.sampler import DistributedSampler
from fastdata.sampler.elastic import adapt_loader_state

SHARDS = [5, 0, 9, 1, 7, 3, 12, 2, 6, 4, 8]  # 57 samples: no world size here divides a pass
N = sum(SHARDS)
GLOBAL_BATCH = 12  # 4 ranks x 3, 3 ranks x 4, 2 ranks x 6, 6 ranks x 2


def make(world, rank, shuffle, **kwargs):
    return DistributedSampler(
        range(N), num_replicas=world, rank=rank, shuffle=shuffle, seed=7, shard_sizes=SHARDS, block_shards=3, **kwargs
    )


def whole_order(shuffle, virtual_pass, epoch=1, **kwargs):
    """Virtual pass ``virtual_pass``'s permutation, as one rank reads it."""
    one = make(1, 0, shuffle, **kwargs)
    one.set_epoch(epoch)
    stream = list(one)
    return stream[virtual_pass * N : (virtual_pass + 1) * N]


def run_then_resume(shuffle, drop_last, ratio, old_world, new_world, steps, epoch=1):
    """``old_world`` ranks take ``steps`` batches each; rank 0's state resumes on ``new_world`` ranks."""
    kw = dict(drop_last=drop_last, ratio=ratio)
    old = [make(old_world, r, shuffle, **kw) for r in range(old_world)]
    took = []
    for sampler in old:
        sampler.set_epoch(epoch)
        state = sampler.state_dict()
        took.append(list(itertools.islice(iter(sampler), steps * GLOBAL_BATCH // old_world)))
    state["start_index"] += len(took[0])
    state = json.loads(json.dumps(state))
    rest = []
    for r in range(new_world):
        sampler = make(new_world, r, shuffle, **kw)
        sampler.load_state_dict(sampler.adapt_state(state))
        sampler.set_epoch(epoch)  # the usual loop sets the loaded epoch again: keeps the position
        rest.append(list(sampler))
    return old, took, rest


def check_pass_accounting(old, took, rest, shuffle, drop_last, ratio, new_world, epoch=1):
    """The cut's pass: consumed + rest = that pass once (torch's padding / drop_last aside); later passes intact."""
    per_old = old[0].num_samples
    new = make(new_world, 0, shuffle, drop_last=drop_last, ratio=ratio)
    cut_pass = (len(took[0]) - 1) // per_old if took[0] else 0  # a cut at a pass's end is in that pass
    later = (ratio - 1 - cut_pass) * new.num_samples
    assert len({len(r) for r in rest}) == 1, "every new rank yields the same number of indices"
    head = [r[: len(r) - later] for r in rest]  # the rest of the cut's pass
    consumed = [t[cut_pass * per_old :] for t in took]
    # later passes: exactly what the new world would have read without the interruption
    for r in range(new_world):
        uninterrupted = make(new_world, r, shuffle, drop_last=drop_last, ratio=ratio)
        uninterrupted.set_epoch(epoch)
        assert rest[r][len(head[r]) :] == list(uninterrupted)[(cut_pass + 1) * new.num_samples :]
    # the new ranks, interleaved, continue the pass's global stream at the position the old ranks reached
    position = sum(map(len, consumed))
    interleaved = [head[j % new_world][j // new_world] for j in range(len(head[0]) * new_world)]
    real, padding = interleaved[: max(0, N - position)], interleaved[max(0, N - position) :]
    remaining = set(range(N)) - set(itertools.chain(*consumed))
    assert len(real) == len(set(real)) and set(real) <= remaining, "nothing repeated"
    if drop_last:
        assert padding == [] and len(remaining) - len(real) < new_world, "only drop_last's tail is left out"
    else:
        assert set(real) == remaining, "every remaining sample exactly once, nothing lost"
        assert len(padding) < new_world, "repeats only as torch's padding"
    order = whole_order(shuffle, cut_pass, epoch, drop_last=drop_last, ratio=ratio)
    assert real == order[position : position + len(real)]  # the global order is kept


@pytest.mark.parametrize("new_world", [2, 3, 1, 6])
@pytest.mark.parametrize("ratio", [1, 3])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("shuffle", ["blocks", True, False, "index", "index-blocks"])
def test_resume_from_4_ranks_on_another_world(shuffle, drop_last, ratio, new_world):
    per_rank = make(4, 0, shuffle, drop_last=drop_last, ratio=ratio).__len__()
    steps_in_run = -(-per_rank // (GLOBAL_BATCH // 4))
    for steps in range(steps_in_run + 1):  # every checkpoint a 4-rank run with 3 per rank can take
        old, took, rest = run_then_resume(shuffle, drop_last, ratio, 4, new_world, steps)
        check_pass_accounting(old, took, rest, shuffle, drop_last, ratio, new_world)


def test_resume_at_ratio_1_on_a_dividing_world_is_the_uninterrupted_stream():
    for shuffle, new_world in itertools.product(["blocks", True, "index", "index-blocks"], [2, 3]):
        _, took, rest = run_then_resume(shuffle, False, 1, 4, new_world, steps=2)
        for r, sampler_rest in enumerate(rest):
            uninterrupted = make(new_world, r, shuffle)
            uninterrupted.set_epoch(1)
            stream = list(uninterrupted)
            assert sampler_rest == stream[24 // new_world :]  # 24 positions consumed: exactly the new ranks' tail


def test_adapting_twice_4_to_3_to_2_still_delivers_each_sample_once():
    kw = dict(ratio=2, drop_last=True)  # 4 ranks read 14 of 57 per pass: 56 positions, not a multiple of 3
    old = [make(4, r, "blocks", **kw) for r in range(4)]
    state = old[0].state_dict()
    took = [list(itertools.islice(iter(s), 18)) for s in old]  # 6 global batches: 16 positions into pass 1
    state["start_index"] += 18
    middle = [make(3, r, "blocks", **kw) for r in range(3)]
    middle_took = []
    for sampler in middle:
        sampler.load_state_dict(sampler.adapt_state(state))
        mid_state = sampler.state_dict()  # what the pass about to start resumes from
        middle_took.append(list(itertools.islice(iter(sampler), 4)))  # one global batch
    assert mid_state["origin"] == [1, 16]  # 3 ranks cannot start there evenly: counted from that point
    mid_state["start_index"] += 4
    last = [make(2, r, "blocks", **kw) for r in range(2)]
    rest = []
    for sampler in last:
        sampler.load_state_dict(sampler.adapt_state(json.loads(json.dumps(mid_state))))
        rest.append(list(sampler))
    second_pass = list(itertools.chain(*(t[14:] for t in took), *middle_took, *rest))
    assert len(second_pass) == len(set(second_pass)) == N - 1  # once each; drop_last's tail of 1 left out
    assert second_pass != sorted(second_pass)


def test_adapt_state_on_the_same_world_changes_nothing():
    sampler = make(3, 1, "blocks", ratio=2)
    state = sampler.state_dict()
    state["start_index"] = 13
    assert sampler.adapt_state(state) == state


def test_uneven_position_is_padded_like_torch_pads_a_pass():
    # 4 ranks read 15 per pass (60 positions, 3 of them padding): after one pass plus one global
    # batch, pass 1 is 12 positions in and the tail of pass 0 held 3 repeats. 5 ranks continue from 12.
    old = make(4, 0, True, ratio=2)
    state = old.state_dict()
    state["start_index"] = 15 + 3
    new = [make(5, r, True, ratio=2) for r in range(5)]
    adapted = new[0].adapt_state(state)
    assert adapted["origin"] == [1, 12] and adapted["start_index"] == 0
    lengths = set()
    for sampler in new:
        sampler.load_state_dict(adapted)
        lengths.add(len(list(sampler)))
    assert lengths == {-(-(N - 12) // 5)}  # 45 left: 9 each


def test_load_state_dict_refuses_another_world_and_says_how():
    state = make(4, 0, "blocks").state_dict()
    with pytest.raises(ValueError, match=r"num_replicas=4 but this sampler has num_replicas=2.*adapt_state"):
        make(2, 0, "blocks").load_state_dict(state)


@pytest.mark.parametrize(
    "field,value",
    [("seed", 1), ("ratio", 2), ("shuffle", True), ("drop_last", True), ("dataset_length", 56), ("block_shards", 4)],
)
def test_adapt_refuses_other_settings(field, value):
    state = make(4, 0, "blocks").state_dict()
    state[field] = value
    with pytest.raises(ValueError, match=field):
        make(2, 0, "blocks").adapt_state(state)


@pytest.mark.parametrize("start", [-1, 16])
def test_adapt_refuses_out_of_range_start_index(start):
    state = make(4, 0, "blocks").state_dict()
    state["start_index"] = start
    with pytest.raises(ValueError, match=r"start_index'\] must be in \[0, 15\] for 4 ranks"):
        make(2, 0, "blocks").adapt_state(state)


def test_malformed_origin_is_refused():
    state = make(3, 0, "blocks", ratio=2).state_dict()
    for origin, exc in (([2, 0], ValueError), ([0, N + 1], ValueError), ([1], TypeError), ("01", TypeError)):
        state["origin"] = origin
        with pytest.raises(exc, match="origin"):
            make(3, 0, "blocks", ratio=2).load_state_dict(state)


# ----------------------------------------------------------------------------- DataLoaderX


class Numbers(Dataset):
    """Sample i is a 1x1 image holding i (its label is i too)."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, i):
        return np.full((1, 1, 1), i, np.uint8), i


def loader(
    world, rank, num_workers=0, *, ratio=2, drop_last=False, collate_fn=fast_collate, shuffle="blocks", **kwargs
):
    """A DataLoaderX over ``Numbers`` with a DistributedSampler (``shuffle="blocks"`` unless told)."""
    data = Numbers()
    sampler = DistributedSampler(
        data,
        num_replicas=world,
        rank=rank,
        shuffle=shuffle,
        seed=3,
        ratio=ratio,
        drop_last=drop_last,
        shard_sizes=SHARDS,
        block_shards=2,
    )
    return DataLoaderX(
        data,
        batch_size=GLOBAL_BATCH // world,
        sampler=sampler,
        num_workers=num_workers,
        collate_fn=collate_fn,
        **kwargs,
    )


def labels(it, limit=None):
    return [batch[1].tolist() for batch in itertools.islice(it, limit)]


def checkpoint_after(ld, steps):
    """Read ``steps`` batches of a new pass, then checkpoint (the state as a JSON file holds it): (labels, state)."""
    it = iter(ld)
    seen = labels(it, steps)
    state = json.loads(json.dumps(ld.state_dict()))
    it.close()
    return seen, state


@pytest.mark.parametrize(
    "new_world,num_workers,shuffle",
    [(2, 0, "blocks"), (3, 0, "blocks"), (3, 2, "blocks"), (3, 0, "index"), (2, 2, "index"), (3, 0, "index-blocks")],
)
def test_dataloaderx_state_from_4_ranks_resumes_on_another_world(new_world, num_workers, shuffle):
    steps = 7  # of the 4-rank run's 10 batches of 3 per rank: 84 positions, 24 into virtual pass 1 (60 a pass)
    old_batches, states = [], []
    for rank in range(4):
        seen, state = checkpoint_after(loader(4, rank, shuffle=shuffle), steps)
        old_batches.append(list(itertools.chain(*seen)))
        states.append(state)
    state = states[0]
    assert state["batches_consumed"] == steps and all(s == state for s in states)  # one checkpoint for all ranks
    # a plain load on another world is refused, never misplaced (here both worlds have 10 batches a pass)
    with pytest.raises(ValueError, match="num_replicas=4 but this sampler has num_replicas"):
        loader(new_world, 0, shuffle=shuffle).load_state_dict(state)
    new_batches = []
    for rank in range(new_world):
        ld = loader(new_world, rank, num_workers=num_workers, shuffle=shuffle)
        ld.load_state_dict(adapt_loader_state(state, ld))
        new_batches.append(labels(iter(ld)))
    assert len({len(b) for b in new_batches}) == 1, "every rank gets the same number of batches"
    assert {len(b) for b in new_batches[0][:-1]} == {GLOBAL_BATCH // new_world}  # the same global batch
    consumed = set(itertools.chain(*(b[15:] for b in old_batches)))  # pass 1: from the 16th index of each rank
    new_stream = [list(itertools.chain(*b)) for b in new_batches]
    interleaved = [new_stream[j % new_world][j // new_world] for j in range(sum(map(len, new_stream)))]
    real, padding = interleaved[: N - 24], interleaved[N - 24 :]
    assert len(real) == len(set(real)) and set(real) | consumed == set(range(N)) and not set(real) & consumed
    assert len(padding) < new_world
    whole = list(itertools.chain(*labels(iter(loader(1, 0, shuffle=shuffle)))))  # the 1-rank order: the global stream
    assert real == whole[N + 24 : 2 * N]  # the global order continues where the 4 ranks stopped


def test_dataloaderx_resume_inside_an_adapted_pass():
    # sampler drop_last: 4 ranks read 14 a pass (56 positions); 6 steps = 16 into pass 1, which 3 ranks cannot
    # split evenly, so the 3-rank state counts from an origin; a checkpoint inside that pass must resume exactly.
    def make_loader(world, rank):
        return loader(world, rank, drop_last=True)

    _, state = checkpoint_after(make_loader(4, 0), 6)
    uninterrupted = []
    for rank in range(3):
        l3 = make_loader(3, rank)
        l3.load_state_dict(adapt_loader_state(state, l3))
        uninterrupted.append(labels(iter(l3)))
    l3 = make_loader(3, 0)
    l3.load_state_dict(adapt_loader_state(state, l3))
    seen, inner = checkpoint_after(l3, 2)
    assert seen == uninterrupted[0][:2]
    assert inner["sampler"]["origin"] == [1, 16] and inner["batches_consumed"] == 2
    for rank in range(3):
        again = make_loader(3, rank)
        again.load_state_dict(inner)  # same world: a plain load
        assert labels(iter(again)) == uninterrupted[rank][2:], rank


def test_each_new_rank_keeps_its_own_loader_generator():
    def seeded(world, rank, base):
        return loader(world, rank, ratio=1, collate_fn=None, generator=torch.Generator().manual_seed(base + rank))

    _, state = checkpoint_after(seeded(4, 0, 100), 2)
    new_states = []
    for rank in range(2):
        ld = seeded(2, rank, 200)
        own = ld.state_dict()["rng_pass_start"]
        new_states.append(adapt_loader_state(state, ld))
        assert new_states[-1]["rng_pass_start"] == own != state["rng_pass_start"]
    assert new_states[0]["rng_pass_start"] != new_states[1]["rng_pass_start"]
    same_world = seeded(4, 1, 100)
    assert adapt_loader_state(state, same_world)["rng_pass_start"] == state["rng_pass_start"]  # exact resume


def test_adapt_loader_state_argument_checks():
    state = loader(4, 0).state_dict()
    with pytest.raises(TypeError, match="fastdata.DistributedSampler"):
        adapt_loader_state(state, DataLoaderX(Numbers(), batch_size=4))
    with pytest.raises(ValueError, match="global batch of 10 .* not a multiple of the 4 ranks"):
        data = Numbers()
        sampler = DistributedSampler(
            data, num_replicas=2, rank=0, shuffle="blocks", seed=3, ratio=2, shard_sizes=SHARDS, block_shards=2
        )
        adapt_loader_state(state, DataLoaderX(data, batch_size=5, sampler=sampler))
    with pytest.raises(ValueError, match="DataLoaderX.state_dict"):
        adapt_loader_state({"sampler": None}, loader(2, 0))


# ----------------------------------------------------------------------------- two real gloo ranks

GLOO_WORLD, GLOO_STEPS = 2, 5  # 2 ranks x batch 2: 5 steps = 20 positions, 6 into virtual pass 1 (14 a pass)


def _gloo_rank(rank: int, root: str, port: int, out: str) -> None:
    import os

    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=GLOO_WORLD)
    try:
        from fastdata import ShardDataset

        dataset = ShardDataset(root)
        sampler = DistributedSampler(dataset, shuffle="blocks", block_shards=2, seed=1, ratio=2)  # world from the group
        loader = DataLoaderX(dataset, batch_size=2, sampler=sampler, collate_fn=lambda b: [label for _, label in b])
        it = iter(loader)
        seen = list(itertools.chain(*itertools.islice(it, GLOO_STEPS)))
        state = loader.state_dict()
        it.close()
        gathered = [None] * GLOO_WORLD
        dist.all_gather_object(gathered, {"labels": seen, "state": state})
        if rank == 0:
            torch.save(gathered, out)
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def fourteen_samples(tmp_path_factory):
    """14 classes of one image each (a label identifies its sample), 3 per shard: shards of 3, 3, 3, 3, 2."""
    from tests.images import pack_one_image_per_class

    return pack_one_image_per_class(tmp_path_factory, 14, samples_per_shard=3, shuffle_seed=0)


@pytest.mark.parametrize("new_world", [1, 4])
def test_checkpoint_of_two_gloo_ranks_resumes_on_another_world(fourteen_samples, tmp_path, new_world):
    import socket

    import torch.multiprocessing as mp

    from fastdata import ShardDataset

    out = tmp_path / "gathered.pt"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(_gloo_rank, args=(str(fourteen_samples), port, str(out)), nprocs=GLOO_WORLD, start_method="fork")
    gathered = torch.load(out, weights_only=False)
    state = gathered[0]["state"]
    assert gathered[1]["state"] == state and state["sampler"]["shuffle"] == "blocks"
    dataset = ShardDataset(fourteen_samples)
    one = DistributedSampler(dataset, num_replicas=1, rank=0, shuffle="blocks", block_shards=2, seed=1, ratio=2)
    order = dataset.targets[list(one)].tolist()  # labels in the 1-rank global order
    interleaved = [gathered[j % 2]["labels"][j // 2] for j in range(2 * GLOO_STEPS * 2)]
    assert interleaved == order[:20]  # the 2 ranks read the 1-rank global order (14 a pass: no padding)
    rest = []
    for rank in range(new_world):
        sampler = DistributedSampler(
            dataset, num_replicas=new_world, rank=rank, shuffle="blocks", block_shards=2, seed=1, ratio=2
        )
        loader = DataLoaderX(
            dataset, batch_size=4 // new_world, sampler=sampler, collate_fn=lambda b: [label for _, label in b]
        )
        loader.load_state_dict(adapt_loader_state(state, loader))
        rest.append(list(itertools.chain(*loader)))
    resumed = [rest[j % new_world][j // new_world] for j in range(sum(map(len, rest)))]
    assert resumed == order[20:]  # exactly the rest of virtual pass 1: each remaining sample once, in order
