"""``worker_mode="thread"``: the process mode's batches, byte for byte, and a state that resumes in either mode."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.loader.collate import NormalizeCollate, fast_collate
from fastdata.loader.dataloader import DataLoaderX
from fastdata.sampler import DistributedSampler
from fastdata.transforms import DecodeCompose, RandAugment, RandomHorizontalFlip, RandomResizedCrop
from tests.packs import make_distinct_folder, pack_quietly


@pytest.fixture(scope="module")
def pack(tmp_path_factory):
    """26 small distinct JPEGs in 6 LMDB shards."""
    root = tmp_path_factory.mktemp("thread_mode")
    make_distinct_folder(root / "src", per_class=13)
    pack_quietly(root / "src", root / "packed", "lmdb")
    return root / "packed"


def policies() -> DecodeCompose:
    return DecodeCompose([RandomResizedCrop(24, scale=(0.1, 1.0)), RandomHorizontalFlip(), RandAugment()])


class Numbers(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(range(4))


def make(pack, mode: str, *, order: str, transform=None, workers: int = 2, **kwargs) -> DataLoaderX:
    dataset = ShardDataset(pack, transform=transform or RandomResizedCrop(24, scale=(0.1, 1.0)))
    if order == "generator":
        kwargs.update(shuffle=True, generator=torch.Generator().manual_seed(7))
    elif order == "global":  # shuffle=True without a generator: each pass draws its seed from torch's RNG
        kwargs.update(shuffle=True)
    else:  # "ranks-shuffle-rank" for fastdata's DistributedSampler
        _, ranks, shuffle, rank = order.split("-")
        shuffle_arg: bool | str = True if shuffle == "true" else shuffle
        kwargs["sampler"] = DistributedSampler(
            dataset,
            num_replicas=int(ranks),
            rank=int(rank),
            shuffle=shuffle_arg,
            seed=3,
            ratio=2 if ranks == "3" else 1,
        )
    kwargs.setdefault("collate_fn", fast_collate)
    return DataLoaderX(dataset, batch_size=3, num_workers=workers, pin_memory=False, worker_mode=mode, **kwargs)


def run(loader: DataLoaderX, passes: int = 2, limit: int | None = None) -> list[tuple[bytes, list[int]]]:
    out = []
    for epoch in range(passes):
        if hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epoch)
        for k, (images, labels) in enumerate(loader):
            out.append((images.numpy().tobytes(), labels.tolist()))
            if limit is not None and k + 1 == limit:
                break
    return out


ORDERS = ["generator", "global", "ranks-1-true-0", "ranks-3-blocks-1", "ranks-3-index-2"]


@pytest.mark.parametrize(
    ("mode", "order"),
    [("thread", order) for order in ORDERS] + [("thread-process", "generator"), ("thread-process", "ranks-3-index-2")],
)
def test_thread_mode_gives_the_process_modes_batches(pack, mode, order):
    torch.manual_seed(11)
    processes = run(make(pack, "process", order=order, workers=2))
    torch.manual_seed(11)
    threads = run(make(pack, mode, order=order, workers=3))  # another count: the pixels do not depend on it
    assert len(threads) == len(processes) > 4
    assert threads == processes
    assert threads[: len(threads) // 2] != threads[len(threads) // 2 :]  # the second pass is another pass


@pytest.mark.parametrize(
    ("mode", "order"), [("thread", "generator"), ("thread", "ranks-3-blocks-0"), ("thread-process", "generator")]
)
def test_thread_mode_gives_the_process_modes_batches_with_decode_time_policies(pack, mode, order):
    processes = run(make(pack, "process", order=order, transform=policies()))
    threads = run(make(pack, mode, order=order, transform=policies(), workers=1))
    assert threads == processes
    plain = run(make(pack, "thread", order=order))
    assert [b[0] for b in plain] != [b[0] for b in threads]  # the policies did change the pixels


@pytest.mark.parametrize("mode", ["thread", "thread-process"])
def test_thread_mode_normalize_collate_matches_processes(pack, mode):
    """A float collate (no flip: a flip draws from torch's per-worker RNG, which threads do not have)."""
    processes = run(make(pack, "process", order="generator", collate_fn=NormalizeCollate()), passes=1)
    threads = run(make(pack, mode, order="generator", collate_fn=NormalizeCollate()), passes=1)
    assert threads == processes


def test_the_seed_matters_in_thread_mode(pack):
    a = run(make(pack, "thread", order="generator"), passes=1)
    loader = make(pack, "thread", order="generator")
    loader.generator.manual_seed(8)
    assert run(loader, passes=1) != a


@pytest.mark.parametrize(
    ("saved", "loaded"),
    [
        ("thread", "process"),
        ("process", "thread"),
        ("thread", "thread"),
        ("thread-process", "thread"),
        ("process", "thread-process"),
    ],
)
@pytest.mark.parametrize("order", ["generator", "global", "ranks-3-index-1"])
def test_a_mid_pass_state_resumes_exactly_in_either_mode(pack, order, saved, loaded):
    torch.manual_seed(5)
    whole = run(make(pack, loaded, order=order), passes=1)
    torch.manual_seed(5)
    first = make(pack, saved, order=order)
    head = run(first, passes=1, limit=3)
    state = json.loads(json.dumps(first.state_dict()))  # plain data
    assert state["batches_consumed"] == 3 and state["in_pass"]
    torch.manual_seed(99)  # the resumed run's own global RNG must not matter
    second = make(pack, loaded, order=order)
    second.load_state_dict(state)
    if hasattr(second.sampler, "set_epoch"):
        second.sampler.set_epoch(0)
    it = iter(second)
    tail = [(images.numpy().tobytes(), labels.tolist()) for images, labels in it]
    assert head + tail == whole
    assert len(tail) == len(whole) - 3


def test_set_resolution_in_thread_mode(pack):
    loaders = {mode: make(pack, mode, order="generator") for mode in ("thread", "process", "thread-process")}
    for loader in loaders.values():
        loader.set_resolution(16)
    images = {mode: next(iter(loader))[0] for mode, loader in loaders.items()}
    assert images["thread"].shape[-2:] == (16, 16)
    assert np.array_equal(images["thread"].numpy(), images["process"].numpy())
    assert np.array_equal(images["thread-process"].numpy(), images["process"].numpy())


def test_thread_mode_rejects_what_it_cannot_do(pack):
    dataset = ShardDataset(pack)
    with pytest.raises(ValueError, match="num_workers >= 1"):
        DataLoaderX(dataset, batch_size=2, worker_mode="thread")
    with pytest.raises(ValueError, match="worker_mode must be one of"):
        DataLoaderX(dataset, batch_size=2, num_workers=1, worker_mode="threads")
    iterable = Numbers()
    with pytest.raises(ValueError, match="map-style"):
        DataLoaderX(iterable, batch_size=2, num_workers=1, worker_mode="thread")


def test_thread_mode_without_batches_runs_getitem_per_sample(pack):
    """batch_size=None (no auto-collation): one sample per task, through ``dataset[i]``."""
    dataset = ShardDataset(pack, transform=RandomResizedCrop(24))
    loaders = [
        DataLoaderX(dataset, batch_size=None, shuffle=False, num_workers=2, worker_mode=mode, pin_memory=False)
        for mode in ("thread", "process", "thread-process")
    ]
    thread, process, helper = ([(np.asarray(x).tobytes(), int(y)) for x, y in loader] for loader in loaders)
    assert thread == process == helper and len(thread) == len(dataset)


def test_thread_mode_reuses_batch_buffers_no_batch_still_held(pack):
    """Batches over 1 MiB come from the loader's ring: reused once dropped, never while the loop holds them."""
    loader = make(pack, "thread", order="generator", transform=RandomResizedCrop(320))  # 3 x 320 x 320 x 3: 0.9 MiB
    loader.batch_sampler.batch_size = 4  # 1.2 MiB a batch
    held, copies, buffers = [], [], set()
    for epoch in range(3):
        for k, (images, _) in enumerate(loader):
            buffers.add(images.untyped_storage().data_ptr())
            if epoch == 0 and k % 3 == 0:  # kept by the loop: their memory must not be handed out again
                held.append(images)
                copies.append(images.clone())
    assert all(torch.equal(a, b) for a, b in zip(held, copies, strict=True))
    assert len(buffers) <= len(held) + loader._thread_buffers.per_size  # reused, not one per batch
    assert 3 * len(loader) > len(buffers)


@pytest.mark.cuda
@pytest.mark.parametrize("mode", ["thread", "thread-process"])
def test_pinned_batches_in_thread_modes(pack, mode):
    """pin_memory=True: thread batches are decoded into pinned memory (helper batches pinned here); same pixels."""
    loaders = {m: make(pack, m, order="generator", transform=RandomResizedCrop(320)) for m in ("process", mode)}
    for loader in loaders.values():
        loader.pin_memory = True
    got = {m: [(images, labels) for images, labels in loader] for m, loader in loaders.items()}
    assert all(images.is_pinned() and labels.is_pinned() for images, labels in got[mode])
    assert all(
        torch.equal(a, b) and torch.equal(la, lb) for (a, la), (b, lb) in zip(got[mode], got["process"], strict=True)
    )
    device = torch.device("cuda")
    assert torch.equal(got[mode][0][0].to(device, non_blocking=True).cpu(), got["process"][0][0])


def _batches_of_8(pack, mode: str) -> DataLoaderX:
    dataset = ShardDataset(pack, transform=RandomResizedCrop(24, scale=(0.1, 1.0)))
    generator = torch.Generator().manual_seed(7)
    return DataLoaderX(dataset, batch_size=8, shuffle=True, generator=generator, num_workers=2, worker_mode=mode)


def test_a_batch_is_made_by_the_threads_together(pack, monkeypatch):
    """The shared path: each batch's sample ranges tile it, filled by more than one thread (the first batch comes at
    the speed of all of them), and the batches are the process mode's."""
    import threading
    import time

    from fastdata.datasets import batch_plan

    real, filled = batch_plan.BatchPlan.fill, []

    def fill(self, lo, hi, **kwargs):
        time.sleep(0.01)  # long enough for every thread to claim a range
        filled.append((self, lo, hi, threading.current_thread().name))  # the plan kept: ids are not reused
        return real(self, lo, hi, **kwargs)

    processes = run(_batches_of_8(pack, "process"), passes=1)
    monkeypatch.setattr(batch_plan.BatchPlan, "fill", fill)
    threads = run(_batches_of_8(pack, "thread"), passes=1)
    assert threads == processes
    by_batch: dict[int, list] = {}
    for plan, lo, hi, name in filled:
        by_batch.setdefault(id(plan), []).append((lo, hi, name))
    assert len(by_batch) == len(threads) == 4  # 26 samples in batches of 8
    for ranges in by_batch.values():
        spans = sorted((lo, hi) for lo, hi, _ in ranges)
        assert spans[0][0] == 0 and all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
    assert any(len({name for _, _, name in ranges}) > 1 for ranges in by_batch.values())


def test_an_error_in_a_shared_batch_is_its_first_samples_as_in_the_process_mode(pack, monkeypatch):
    """Two ranges of one batch fail: the error raised in the batch's place is the earlier range's, as one process
    reading the batch in order meets it first; the pass goes on."""
    from fastdata.datasets import batch_plan

    real, made = batch_plan.BatchPlan.fill, batch_plan.BatchPlan.__init__
    plans: list = []

    def init(self, *args, **kwargs):
        made(self, *args, **kwargs)
        plans.append(self)

    monkeypatch.setattr(batch_plan.BatchPlan, "__init__", init)

    def fill(self, lo, hi, **kwargs):
        if len(plans) > 1 and self is plans[1] and lo > 0:  # the second batch's ranges at 2, 4 and 6
            raise ValueError(f"range at {lo} is bad")
        return real(self, lo, hi, **kwargs)

    monkeypatch.setattr(batch_plan.BatchPlan, "fill", fill)
    loader = _batches_of_8(pack, "thread")  # 4 ranges of 2 samples a batch
    seen: list = []
    it = iter(loader)
    while True:
        try:
            images, _ = next(it)
            seen.append(images.shape[0])
        except StopIteration:
            break
        except ValueError as exc:
            seen.append(str(exc))
    assert seen == [8, "range at 2 is bad", 8, 2]
