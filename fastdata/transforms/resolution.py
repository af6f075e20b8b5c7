"""Progressive resolution: the decode-time crop size of a pass, set between passes without new workers.

:meth:`fastdata.DataLoaderX.set_resolution` fixes the output size of the next passes. The loader
tags each batch of indices it sends to the workers with that size (a :class:`SizedBatch`: a list
of indices with a ``size``), so persistent workers follow it at once, batch by batch, and a resumed
pass is decoded at the size it was started with (the loader's ``state_dict`` records it). In the
worker, :func:`transform_for` gives the dataset's decode-time transform at the batch's size:
``RandomResizedCrop`` draws the same box whatever the size (its draw depends on the image, not on the
output), so a batch at 192 is the one a loader built with ``RandomResizedCrop(192)`` gives, pixel for
pixel; ``ResizeCenterCrop`` keeps its resize/crop ratio (256/224 at 224 is 219/192 at 192). Batch
buffers come from the worker's ring of the new size (:mod:`fastdata.decode.shared_ring`).

:func:`ramp` is ffcv-imagenet's schedule: a linear ramp between two epochs, rounded to a multiple of 32.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from fastdata.transforms.base import DecodeTransform, _pair
from fastdata.transforms.compose import DecodeCompose
from fastdata.transforms.crop import RandomResizedCrop, ResizeCenterCrop

__all__ = ["SizedBatch", "check_size", "ramp", "tag_batches", "transform_at", "transform_for"]


class SizedBatch(list):
    """The indices of one batch and the ``(height, width)`` the loader wants them decoded at."""

    def __init__(self, indices: Iterable[Any], size: tuple[int, int]) -> None:
        super().__init__(indices)
        self.size = size

    def __reduce__(self) -> tuple:
        return SizedBatch, (list(self), self.size)


def check_size(size: int | Sequence[int] | None) -> tuple[int, int] | None:
    """``None``, or the size as a ``(height, width)`` of positive ints (ValueError otherwise)."""
    return None if size is None else _pair(size if isinstance(size, int) else tuple(size), "resolution")


def tag_batches(batches: Iterable[Any], size: tuple[int, int]) -> Iterator[Any]:
    """Each list or tuple batch of ``batches`` as a :class:`SizedBatch` of ``size`` (anything else unchanged)."""
    for batch in batches:
        yield SizedBatch(batch, size) if isinstance(batch, (list, tuple)) else batch


def transform_at(transform: DecodeTransform, size: tuple[int, int]) -> DecodeTransform:
    """A copy of a fixed-size decode-time transform at another output size (itself at its own size).

    Raises:
        TypeError: the transform has no size to change (only ``RandomResizedCrop`` and
            ``ResizeCenterCrop`` and their subclasses do, and a ``DecodeCompose`` that starts with one).
    """
    if getattr(transform, "output_size", None) == size:
        return transform
    cache = transform.__dict__.setdefault("_at_sizes", {})
    if size in cache:
        return cache[size]
    if isinstance(transform, DecodeCompose):  # the crop at that size, the same augmentations after it
        cache[size] = DecodeCompose([transform_at(transform.crop, size), *transform.augments])
        return cache[size]
    if not isinstance(transform, (RandomResizedCrop, ResizeCenterCrop)):
        raise TypeError(
            f"{type(transform).__name__} has no crop size to change; set_resolution works with "
            "RandomResizedCrop and ResizeCenterCrop (decode-time transforms)"
        )
    other = copy.copy(transform)
    other.__dict__.pop("_at_sizes", None)
    if isinstance(other, ResizeCenterCrop):
        old, resize = other.size, other.resize  # still the transform's own
        if isinstance(resize, int):  # the shorter side: scale it as the crop's shorter side scales
            other.resize = max(int(round(resize * min(size) / min(old))), *size)
        else:  # (h, w), or (s,) for (s, s)
            pair = _pair(resize, "resize")
            other.resize = tuple(max(s, int(round(r * s / o))) for r, s, o in zip(pair, size, old, strict=True))
    other.size = size
    cache[size] = other
    return other


def transform_for(transform: Any, indices: Any) -> Any:
    """The dataset's transform at the size ``indices`` were tagged with (the transform itself when untagged)."""
    size = getattr(indices, "size", None)
    if size is None or not isinstance(transform, DecodeTransform):
        return transform
    return transform_at(transform, size)


def ramp(
    epoch: float, start: int = 160, end: int = 192, start_epoch: float = 0, end_epoch: float = 76, multiple: int = 32
) -> int:
    """ffcv-imagenet's progressive resolution: ``start`` until ``start_epoch``, ``end`` from ``end_epoch``.

    In between, linear in the epoch, rounded to a multiple of ``multiple`` (ffcv's rn50 configs: 160
    to 192 from epoch 11 to 13 of 16-epoch runs; 65 to 76 of 88).

    Example::

        for epoch in range(epochs):
            loader.set_resolution(ramp(epoch, 160, 192, start_epoch=11, end_epoch=13))
    """
    if epoch <= start_epoch:
        return int(start)
    if epoch >= end_epoch:
        return int(end)
    value = float(np.interp(epoch, [start_epoch, end_epoch], [start, end]))
    return int(round(value / multiple)) * multiple
