"""A batch decoded in place: one uint8 ``[N, H, W, 3]`` buffer that every image of the batch is written into.

:meth:`fastdata.ShardDataset.__getitems__` (which torch's fetcher calls with a batch's indices)
allocates one such buffer per batch, in shared memory inside a DataLoader worker, and has the
decode-time transform resize each image straight into its slot: no per-image array, no second copy
in the collate function. :func:`fastdata.fast_collate` hands the buffer on as it is.

A :class:`DecodedBatch` is also a plain ``list`` of ``(image, label)`` pairs (the images are views of
the slots), so ``torch.utils.data.default_collate`` and user collate functions keep working.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import torch
from torch.utils.data import get_worker_info

from fastdata.decode.shared_ring import BufferPool, acquire

__all__ = ["DecodedBatch", "MultiDecodedBatch", "empty_tensor", "thread_buffers"]

_thread = threading.local()  # .pin, .pool: where this thread's batch buffers come from (a thread-mode loader's)


def thread_buffers(*, pin: bool = False, pool: BufferPool | None = None) -> None:
    """Where :func:`empty_tensor` allocates in the calling thread (outside a worker process); no arguments: torch.

    ``DataLoaderX(worker_mode="thread")`` sets it in its loader threads: with ``pin`` (``pin_memory=True``; only
    where CUDA is available) batches are decoded straight into pinned memory and reach the training loop without
    the copy ``pin_memory()`` would make; else large buffers come from ``pool``, reused without page faults.
    """
    _thread.pin, _thread.pool = bool(pin), pool


def empty_tensor(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialized tensor, in shared memory when called inside a DataLoader worker (else :func:`thread_buffers`).

    A worker's result reaches the main process through shared memory; allocating there in the first
    place saves torch the copy into a shared segment when it sends the batch. Large buffers come from
    the worker's ring of reused segments (:mod:`fastdata.decode.shared_ring`) when the main process has let
    one go, which saves the page faults of fresh memory.
    """
    if get_worker_info() is None:
        pool = getattr(_thread, "pool", None)
        if pool is None or getattr(_thread, "pin", False):
            return torch.empty(tuple(shape), dtype=dtype, pin_memory=getattr(_thread, "pin", False))
        storage = pool.empty(_nbytes(shape, dtype))  # exactly that many bytes
        return torch.empty(0, dtype=dtype).set_(storage).view(tuple(shape))
    storage, _ = acquire(_nbytes(shape, dtype))  # a segment of the worker's ring when one is free
    return torch.empty(0, dtype=dtype).set_(storage, 0, *_contiguous(shape))


def _nbytes(shape: Sequence[int], dtype: torch.dtype) -> int:
    numel = 1
    for s in shape:
        numel *= int(s)
    return numel * dtype.itemsize


def _contiguous(shape: Sequence[int]) -> tuple[list[int], list[int]]:
    """``shape`` and its C-order strides (in elements), as ``Tensor.set_`` takes them."""
    sizes = [int(s) for s in shape]
    strides = [1] * len(sizes)
    for i in range(len(sizes) - 2, -1, -1):
        strides[i] = strides[i + 1] * sizes[i + 1]
    return sizes, strides


class DecodedBatch(list):
    """``(image, label)`` pairs whose images are slots of one uint8 NHWC tensor.

    Attributes:
        images: uint8 tensor ``[N, H, W, 3]`` (the memory the images were decoded into).
        labels: int64 tensor ``[N]``.

    Example::

        images = empty_tensor((len(datas), 224, 224, 3), torch.uint8)
        for slot, data in zip(images.numpy(), datas):
            transform.decode_into(data, slot)           # each image written in place
        batch = DecodedBatch(images, torch.as_tensor(labels))
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        arrays = images.numpy()
        super().__init__((arrays[i], int(labels[i])) for i in range(len(labels)))
        self.images = images
        self.labels = labels

    def nchw(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(images [N, 3, H, W], labels [N])``: the NHWC memory seen as NCHW (``channels_last``), no copy."""
        return self.images.permute(0, 3, 1, 2), self.labels


class MultiDecodedBatch(list):
    """``([crop_0, ..., crop_k-1], label)`` pairs whose crops are slots of k uint8 NHWC tensors (multi-crop).

    Attributes:
        images: k uint8 tensors ``[N, H_j, W_j, 3]``, one per crop position.
        labels: int64 tensor ``[N]``.
    """

    def __init__(self, images: Sequence[torch.Tensor], labels: torch.Tensor) -> None:
        arrays = [i.numpy() for i in images]
        super().__init__(([a[n] for a in arrays], int(labels[n])) for n in range(len(labels)))
        self.images = list(images)
        self.labels = labels

    def nchw(self) -> tuple[list[torch.Tensor], torch.Tensor]:
        """``([images_j [N, 3, H_j, W_j], ...], labels)``: each NHWC buffer seen as NCHW, no copy."""
        return [i.permute(0, 3, 1, 2) for i in self.images], self.labels
