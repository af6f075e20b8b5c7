"""One batch decoded straight into its tensors, a range of its samples at a time.

What ``ShardDataset.__getitems__`` does in one go, and what ``DataLoaderX(worker_mode="thread")`` splits among its
threads.

A :class:`BatchPlan` holds a batch's output tensors (allocated where :func:`~fastdata.decode.batch.empty_tensor`
allocates in the calling thread: a worker's shared ring, a loader thread's pinned or reused buffers). Its
:meth:`~BatchPlan.fill` reads samples ``[lo, hi)`` and decodes them into their slots; ranges may be filled in any
order and by different threads at once (each writes only its own slots, and a sample's random crop comes from its
own :class:`~fastdata.sampler.seeding.SampleIndex` generator), so the pixels are those of one ``fill(0, len)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from fastdata._util.stage_clock import marker
from fastdata.datasets.batch_decode import decode_all_into, sample_generators
from fastdata.decode.batch import DecodedBatch, empty_tensor

__all__ = ["BatchPlan"]


class BatchPlan:
    """A batch of ``indices`` decoded by ``transform`` into uint8 ``[N, H, W, 3]`` images and int64 labels.

    The transform has a fixed ``output_size``; the records are read through ``source.read_batch``.

    Args:
        source: the dataset (its ``read_batch(indices) -> (datas, labels)``).
        transform: a fixed-size decode-time transform, already at the batch's resolution.
        indices: the batch's indices (ints or ``SampleIndex`` keys).
    """

    def __init__(self, source: Any, transform: Any, indices: Sequence[Any]) -> None:
        size = transform.output_size
        self.source, self.transform, self.indices = source, transform, list(indices)
        self.images = empty_tensor((len(self.indices), size[0], size[1], 3), torch.uint8)
        self.labels = empty_tensor((len(self.indices),), torch.int64)
        self._slots, self._labels = self.images.numpy(), self.labels.numpy()

    def __len__(self) -> int:
        return len(self.indices)

    def fill(self, lo: int, hi: int, *, threads: int = 1) -> None:
        """Read samples ``[lo, hi)`` of the batch and decode them into their slots.

        ``threads``: decoding threads inside the one native call. Raises what ``read_batch`` and the decode raise
        (the sample is named).
        """
        mark = marker()  # per-stage CPU time for `fastdata bench --breakdown`; a no-op otherwise
        part = self.indices[lo:hi]
        mark("read")
        datas, self._labels[lo:hi] = self.source.read_batch(part)
        mark("sample_rng")
        rngs = sample_generators(part) if self.transform.uses_rng else [None] * len(part)  # made lazily
        decode_all_into(self.transform, datas, self._slots[lo:hi], rngs, threads=threads)
        mark("wrap")

    def batch(self) -> DecodedBatch:
        """The filled batch, as ``__getitems__`` returns it (:func:`fastdata.fast_collate` passes it on as it is)."""
        return DecodedBatch(self.images, self.labels)
