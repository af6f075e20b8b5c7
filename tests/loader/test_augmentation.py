"""Reproducible augmentation: the same pixels whatever num_workers is, and exactly the same pixels after a resume."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.loader.collate import fast_collate
from fastdata.loader.dataloader import DataLoaderX
from fastdata.sampler import DistributedSampler
from fastdata.sampler.seeding import SampleIndex, sample_generator
from fastdata.transforms import RandomResizedCrop


def loader_for(root, *, num_workers: int, seed: int = 0, **kwargs) -> DataLoaderX:
    dataset = ShardDataset(root, transform=RandomResizedCrop(24, scale=(0.05, 1.0)))
    kwargs.setdefault("shuffle", True)
    if kwargs["shuffle"] and "sampler" not in kwargs:
        kwargs["generator"] = torch.Generator().manual_seed(seed)
    return DataLoaderX(
        dataset, batch_size=4, num_workers=num_workers, collate_fn=fast_collate, pin_memory=False, **kwargs
    )


def batches(loader, passes: int = 1, *, limit: int | None = None) -> list[tuple[np.ndarray, list[int]]]:
    out = []
    for _ in range(passes):
        for k, (images, labels) in enumerate(loader):
            out.append((images.numpy().copy(), labels.tolist()))
            if limit is not None and k + 1 == limit:
                break
    return out


def same(a, b) -> bool:
    return len(a) == len(b) and all(np.array_equal(x[0], y[0]) and x[1] == y[1] for x, y in zip(a, b, strict=False))


@pytest.mark.parametrize("packed", ["lmdb"], indirect=True)
def test_same_pixels_with_0_and_2_workers(packed):
    """Shuffled by the loader's seeded generator. Persistent workers draw torch's base seed from that generator
    once instead of once per pass, which changes the order of later passes (torch's behaviour): compare
    non-persistent workers here, and persistent ones with fastdata's sampler below."""
    root, _ = packed
    torch.manual_seed(1)  # the workers' own seeds differ with num_workers; the crops must not
    inline = batches(loader_for(root, num_workers=0), passes=2)
    torch.manual_seed(2)
    workers = batches(loader_for(root, num_workers=2, persistent_workers=False), passes=2)
    assert same(inline, workers)
    half = len(inline) // 2
    assert not same(inline[:half], inline[half:])  # the second pass draws other crops (and another order)
    assert not same(inline, batches(loader_for(root, num_workers=0, seed=1), passes=2))  # the seed matters


@pytest.mark.parametrize("packed", ["tfrecord"], indirect=True)
def test_same_pixels_with_0_and_2_persistent_workers_and_fastdata_sampler(packed):
    root, _ = packed

    def run(num_workers):
        dataset = ShardDataset(root, transform=RandomResizedCrop(24))
        sampler = DistributedSampler(dataset, num_replicas=1, rank=0, seed=4, ratio=3)  # one pass, 3 virtual epochs
        loader = DataLoaderX(
            dataset,
            batch_size=4,
            sampler=sampler,
            num_workers=num_workers,
            collate_fn=fast_collate,
            pin_memory=False,
            persistent_workers=num_workers > 0,
        )
        return batches(loader, passes=2)

    inline = run(0)
    assert same(inline, run(2))
    n = len(inline) // 6  # later batches (other virtual epochs) are not repeats of earlier ones
    assert not same(inline[:n], inline[n : 2 * n])


@pytest.mark.parametrize("packed", ["tfrecord"], indirect=True)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_mid_pass_gives_the_pixels_of_an_uninterrupted_run(packed, num_workers):
    root, _ = packed
    uninterrupted = batches(loader_for(root, num_workers=num_workers), passes=2)
    first = loader_for(root, num_workers=num_workers)
    before = batches(first, limit=2)  # 2 of 4 batches of pass 0, then a checkpoint
    state = pickle.loads(pickle.dumps(first.state_dict()))
    del first
    resumed = loader_for(root, num_workers=num_workers, seed=123)  # a fresh process would build it anew
    resumed.load_state_dict(state)
    after = batches(resumed, passes=2)  # the rest of pass 0, then pass 1
    assert same(before + after, uninterrupted)


@pytest.mark.parametrize("packed", ["lmdb"], indirect=True)
def test_fastdata_sampler_restart_from_its_epoch_alone_gives_the_same_pixels(packed):
    """With fastdata's DistributedSampler the pass key is its state: set_epoch after a restart is enough."""
    root, _ = packed

    def epoch(loader, e):
        loader.sampler.set_epoch(e)
        return batches(loader)

    def build():
        dataset = ShardDataset(root, transform=RandomResizedCrop(24))
        sampler = DistributedSampler(dataset, num_replicas=1, rank=0, seed=5, ratio=2)
        return DataLoaderX(
            dataset, batch_size=4, sampler=sampler, num_workers=0, collate_fn=fast_collate, pin_memory=False
        )

    run = build()
    expected = [epoch(run, 0), epoch(run, 1)]
    restarted = build()
    assert same(epoch(restarted, 1), expected[1])
    assert not same(expected[0], expected[1])


@pytest.mark.parametrize("packed", ["lmdb"], indirect=True)
def test_sequential_passes_differ_and_resume_between_passes(packed):
    root, _ = packed
    run = loader_for(root, num_workers=0, shuffle=False)
    one, two = batches(run), batches(run)
    assert [b[1] for b in one] == [b[1] for b in two] and not same(one, two)  # same order, other crops
    state = run.state_dict()
    again = loader_for(root, num_workers=0, shuffle=False)
    again.load_state_dict(state)
    third = batches(run)
    assert same(batches(again), third)


def test_the_sample_generator_depends_on_pass_position_and_index_only():
    draw = lambda index: sample_generator(index).random(4).tolist()  # noqa: E731
    assert draw(SampleIndex(5, 9, 2)) == draw(pickle.loads(pickle.dumps(SampleIndex(5, 9, 2))))
    others = [draw(SampleIndex(6, 9, 2)), draw(SampleIndex(5, 8, 2)), draw(SampleIndex(5, 9, 3))]
    assert all(o != draw(SampleIndex(5, 9, 2)) for o in others)
    assert sample_generator(5) is None and SampleIndex(5, 9, 2) == 5 and f"{SampleIndex(5, 9, 2)}" == "5"


@pytest.mark.parametrize("packed", ["lmdb"], indirect=True)
def test_a_plain_index_still_draws_from_torch(packed):
    root, _ = packed
    ds = ShardDataset(root, transform=RandomResizedCrop(24))
    torch.manual_seed(3)
    a = ds[2][0]
    torch.manual_seed(3)
    assert np.array_equal(ds[2][0], a)
    assert np.array_equal(ds[SampleIndex(2, 1, 0)][0], ds[SampleIndex(2, 1, 0)][0])


@pytest.mark.parametrize("packed", ["lmdb"], indirect=True)
def test_resume_with_fastdata_sampler_skipping_batches_itself_gives_the_same_pixels(packed):
    """fastdata's sampler fast-forwards (start_index): the positions of the indices it still yields count on."""
    root, _ = packed

    def build():
        dataset = ShardDataset(root, transform=RandomResizedCrop(24))
        sampler = DistributedSampler(dataset, num_replicas=1, rank=0, seed=9, ratio=2)
        return DataLoaderX(
            dataset, batch_size=4, sampler=sampler, num_workers=2, collate_fn=fast_collate, pin_memory=False
        )

    uninterrupted = batches(build())
    first = build()
    before = batches(first, limit=3)
    state = first.state_dict()
    del first
    resumed = build()
    resumed.load_state_dict(state)
    assert resumed._fast_forward(resumed.sampler, state["sampler"], 3)[1] == 0  # the sampler skips, not the loader
    assert same(before + batches(resumed), uninterrupted)
