"""The workers' ring of reused shared-memory batch buffers: a buffer is reused only once nothing in the main
process refers to it (tensor, view or array), batches are never overwritten under the training loop, and a
loader that never hands buffers back gets a fresh one per batch."""

from __future__ import annotations

import os

import pytest
import torch
from torch.utils.data import DataLoader

from fastdata import DataLoaderX, ShardDataset, fast_collate
from fastdata.decode import shared_ring
from fastdata.loader.collate import NormalizeCollate
from fastdata.transforms import ResizeCenterCrop
from tests.packs import pack_quietly

BATCH = 8  # 8 x 224 x 224 x 3: 1.2 MB as uint8, 4.8 MB as float, both above RING_MIN_BYTES
REPEATS = 24


@pytest.fixture(scope="module")
def dataset(clean_image_folder, tmp_path_factory) -> ShardDataset:
    out = tmp_path_factory.mktemp("ring_pack")
    pack_quietly(clean_image_folder.root, out, "tfrecord")
    return ShardDataset(out, transform=ResizeCenterCrop(256, 224))


def _order(dataset) -> list[int]:
    return list(range(len(dataset))) * REPEATS


def _segment(tensor: torch.Tensor) -> int:
    """The shared-memory file behind a batch received from a worker (its inode)."""
    fd, _ = tensor.untyped_storage()._share_fd_cpu_()
    return os.fstat(fd).st_ino


def _reference(dataset, collate) -> list[torch.Tensor]:
    loader = DataLoaderX(dataset, batch_size=BATCH, sampler=_order(dataset), num_workers=0, collate_fn=collate)
    return [images.clone() for images, _ in loader]


@pytest.mark.parametrize("collate", [fast_collate, NormalizeCollate()], ids=["uint8", "float"])
def test_buffers_are_reused_only_when_no_view_is_left(dataset, collate):
    expected = _reference(dataset, collate)
    loader = DataLoaderX(
        dataset,
        batch_size=BATCH,
        sampler=_order(dataset),
        num_workers=2,
        collate_fn=collate,
        multiprocessing_context="fork",
        persistent_workers=False,
        prefetch_factor=1,
        max_prefetch=1,
    )
    views, copies, segments = [], [], set()
    for step, (images, _) in enumerate(loader):
        assert images.is_shared()
        segments.add(_segment(images))
        copies.append(images.clone())
        if step % 3 == 0:
            views.append((step, images[1:3]))  # a view keeps its batch's buffer from being reused
            if step % 2 == 0:
                views.append((step, images[0].numpy()))  # so does a numpy array of one image
    assert len(copies) == len(expected)
    for step, (got, want) in enumerate(zip(copies, expected, strict=False)):
        assert torch.equal(got, want), f"batch {step} differs from the single-process pass"
    for step, view in views:
        want = expected[step][1:3] if isinstance(view, torch.Tensor) else expected[step][0].numpy()
        assert (view == want).all(), f"batch {step} was overwritten while the training loop still held a view of it"
    assert len(segments) < len(expected) - 4, f"{len(segments)} buffers for {len(expected)} batches: no reuse"


def test_a_loader_that_never_hands_buffers_back_gets_fresh_ones(dataset):
    collate = NormalizeCollate()
    expected = _reference(dataset, collate)
    loader = DataLoader(
        dataset,
        batch_size=BATCH,
        sampler=_order(dataset),
        num_workers=2,
        collate_fn=collate,
        multiprocessing_context="fork",
    )
    got, segments = [], []
    for images, _ in loader:  # torch's own loader: nobody tells the workers a batch is done
        segments.append(_segment(images))
        got.append(images.clone())
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=False)) and len(got) == len(expected)
    assert len(set(segments)) == len(segments)


def test_ring_takes_a_segment_only_when_free_and_unreferenced():
    nbytes = shared_ring.RING_MIN_BYTES
    first, in_ring = shared_ring.acquire(nbytes)
    assert in_ring and first.nbytes() == nbytes + shared_ring.TRAILER
    address = first.data_ptr()
    tensor = torch.empty(0, dtype=torch.uint8).set_(first, 0, (nbytes,))
    shared_ring.free_in_worker(tensor)  # free, but this process still holds it
    second, second_in_ring = shared_ring.acquire(nbytes)
    assert second.data_ptr() != address and not second_in_ring  # the ring stays at one until one comes back
    del first, tensor, second
    third, _ = shared_ring.acquire(nbytes)
    assert third.data_ptr() == address  # free and unreferenced: reused
    third_again, _ = shared_ring.acquire(nbytes)
    assert third_again.data_ptr() != address  # taken again: the next batch gets another


def test_small_buffers_the_switch_and_a_torch_without_use_counts_skip_the_ring(monkeypatch):
    small, in_ring = shared_ring.acquire(shared_ring.RING_MIN_BYTES - 1)
    assert not in_ring and small.nbytes() == shared_ring.RING_MIN_BYTES - 1
    monkeypatch.setenv(shared_ring.ENV, "0")
    plain, in_ring = shared_ring.acquire(shared_ring.RING_MIN_BYTES)
    assert not in_ring and plain.nbytes() == shared_ring.RING_MIN_BYTES
    monkeypatch.delenv(shared_ring.ENV)
    monkeypatch.setattr(shared_ring, "_use_count", None)
    plain, in_ring = shared_ring.acquire(shared_ring.RING_MIN_BYTES)
    assert not in_ring and plain.nbytes() == shared_ring.RING_MIN_BYTES


def test_releaser_watches_a_bounded_number_of_batches(monkeypatch):
    monkeypatch.setattr(shared_ring, "MAX_PENDING", 3)
    releaser = shared_ring.Releaser()
    kept = []
    for _ in range(5):  # batches the loop keeps: watched, never freed, the oldest forgotten
        segment = shared_ring._new_segment(shared_ring.RING_MIN_BYTES)
        kept.append(torch.empty(0, dtype=torch.uint8).set_(segment, 0, (shared_ring.RING_MIN_BYTES,)))
        releaser.track((kept[-1],))
    assert len(releaser) == 3
    assert all(shared_ring._state(t.untyped_storage()) == shared_ring.TAKEN for t in kept)


def test_a_size_no_longer_made_loses_its_ring(monkeypatch):
    monkeypatch.setattr(shared_ring, "STALE_AFTER", 3)
    old, new = shared_ring.RING_MIN_BYTES + 4096, shared_ring.RING_MIN_BYTES + 8192  # a resolution change
    shared_ring.acquire(old)
    assert old in shared_ring._rings
    for _ in range(3):
        shared_ring.acquire(new)
    assert old in shared_ring._rings  # still within the window (a float and a uint8 batch alternate)
    shared_ring.acquire(new)
    assert old not in shared_ring._rings and new in shared_ring._rings


def test_a_fresh_segment_is_faulted_in_at_once():
    """A new ring segment's pages are made resident by one madvise(MADV_POPULATE_WRITE) where the kernel has it."""
    import resource

    from fastdata.decode import shared_ring

    def resident_kb() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize() // 1024

    storage = torch.UntypedStorage._new_shared(16 << 20)
    before = resident_kb()
    assert shared_ring._populate(storage) is storage
    if shared_ring._madvise:  # Linux >= 5.14
        assert resident_kb() - before >= 15 << 10
    torch.empty(0, dtype=torch.uint8).set_(storage, 0, (16 << 20,)).fill_(3)  # still an ordinary segment


def test_the_thread_pool_keeps_a_size_across_a_shorter_last_batch(monkeypatch):
    """A pass's shorter last batch leaves the full batches' buffers in the pool: the next pass faults none in."""
    monkeypatch.setattr(shared_ring, "STALE_AFTER", 3)
    pool = shared_ring.BufferPool(2)
    full, last = shared_ring.RING_MIN_BYTES + 4096, shared_ring.RING_MIN_BYTES + 2048
    first = pool.empty(full)
    first_ptr = first.data_ptr()
    del first
    pool.empty(last)  # the end of a pass: every full-size buffer is unreferenced now
    again = pool.empty(full)
    assert again.data_ptr() == first_ptr  # the same buffer, not a fresh one (was dropped by the last batch)
    del again
    for _ in range(4):
        pool.empty(last)  # a new resolution: the old size, unused for more than STALE_AFTER calls, goes
    assert full not in pool._rings and last in pool._rings


def test_a_thread_mode_pass_keeps_its_full_batch_buffers(dataset, monkeypatch):
    """uint8 and float batches with a shorter last batch: the full batches' buffers stay in the loader's pool.

    Before, the last batch's allocation dropped them, so every pass faulted 2 x (uint8 + float) batches in anew
    (45 page faults per image at batch 256, 10% of the thread mode's CPU time with ``NormalizeCollate``).
    """
    made: list[int] = []
    populate = shared_ring._populate
    monkeypatch.setattr(shared_ring, "_populate", lambda storage: made.append(storage.nbytes()) or populate(storage))
    order = list(range(len(dataset))) * 3 + [0, 1, 2]  # a last batch of 3 after full batches of 8
    loader = DataLoaderX(
        dataset, batch_size=BATCH, sampler=order, num_workers=2, collate_fn=NormalizeCollate(), worker_mode="thread"
    )
    full = {BATCH * 224 * 224 * 3, BATCH * 224 * 224 * 3 * 4}  # the uint8 batch and its float output
    batches = len(loader)
    for _ in range(3):
        made.clear()
        for _ in loader:
            pass
        assert full <= set(loader._thread_buffers._rings)
        assert len(made) < batches  # a pass's buffers are the ring's, not one fresh per batch
    assert sum(1 for n in made if n in full) <= 2  # the third pass: at most the ring's growth
