"""The ``shuffle="blocks"`` order of :class:`fastdata.DistributedSampler`: shard-local shuffling.

Per virtual pass, with one seeded ``torch.Generator``: permute the shards (``randperm`` over the
shard count), group them ``block_shards`` at a time into blocks, then permute the samples of each
block (one ``randperm`` per block, in block order). The result is a permutation of
``range(len(dataset))`` in which the samples of block 0 come first, then those of block 1, and so
on, so a reader touches one block (a few shards) at a time. It depends on the seed, the shard
layout and ``block_shards`` only, never on the number of ranks.

A block's samples are as well mixed as the shards they come from: shards packed with ``fastdata
pack --shuffle-seed`` hold every class in proportion, so a block does too; shards packed in
ImageFolder (class) order hold one or two classes each, and a block of them a handful.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

logger = logging.getLogger(__name__)

__all__ = ["BLOCKS", "DEFAULT_BLOCK_SHARDS", "block_permutation", "layout_id", "shard_offsets", "shard_order"]

BLOCKS = "blocks"
#: Shards per block by default: with 256 MiB shards a block is 2 GiB, about 19,000 ImageNet images.
DEFAULT_BLOCK_SHARDS = 8


def shard_offsets(dataset: Any, shard_sizes: Sequence[int] | None, length: int) -> np.ndarray:
    """The first sample of each shard, then ``length``: from ``shard_sizes``, else ``dataset.shard_offsets``.

    Args:
        dataset: the sampler's dataset; its ``shard_offsets`` is read when ``shard_sizes`` is None.
        shard_sizes: samples per shard, in dataset order, or None.
        length: ``len(dataset)``.

    Returns:
        A read-only int64 array of ``num_shards + 1`` non-decreasing entries from 0 to ``length``.

    Raises:
        TypeError: ``shard_sizes`` is not a sequence of ints.
        ValueError: no layout is available, a size is negative, or the sizes do not add up to ``length``.
    """
    if shard_sizes is None:
        offsets = getattr(dataset, "shard_offsets", None)
        if offsets is None:
            raise ValueError(
                f"shuffle={BLOCKS!r} needs the dataset's shard layout, but {type(dataset).__name__} has no "
                "shard_offsets; pass shard_sizes=[samples in shard 0, samples in shard 1, ...] or use a ShardDataset"
            )
        offsets, name = np.asarray(offsets), "dataset.shard_offsets"
    else:
        sizes = np.asarray(shard_sizes)
        if sizes.size == 0:
            sizes = sizes.astype(np.int64)
        if sizes.ndim != 1 or sizes.dtype.kind not in "iu":
            raise TypeError(f"shard_sizes must be a sequence of ints (samples per shard), got {shard_sizes!r}")
        if (sizes < 0).any():
            raise ValueError(f"shard_sizes must be counts >= 0, got {shard_sizes!r}")
        offsets, name = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]), "shard_sizes"
    offsets = offsets.astype(np.int64)
    if offsets.ndim != 1 or len(offsets) < 1 or offsets[0] != 0 or (np.diff(offsets) < 0).any():
        raise ValueError(f"{name} must describe consecutive shards (offsets from 0, non-decreasing), got {offsets!r}")
    if offsets[-1] != length:
        raise ValueError(
            f"{name} covers {int(offsets[-1])} samples but the dataset has {length}; "
            "pass the sample counts of the dataset's shards, in order"
        )
    offsets.flags.writeable = False
    _warn_if_class_ordered(dataset)
    return offsets


def _warn_if_class_ordered(dataset: Any) -> None:
    options = getattr(getattr(dataset, "manifest", None), "options", None)
    if isinstance(options, Mapping) and "shuffle_seed" in options and options["shuffle_seed"] is None:
        logger.warning(
            "%r was packed in class order (no --shuffle-seed): with shuffle=%r each batch holds only the "
            "few classes of one block of shards; repack with `fastdata pack --shuffle-seed 0`",
            dataset,
            BLOCKS,
        )


def shard_order(offsets: np.ndarray, generator: torch.Generator) -> np.ndarray:
    """The shards in reading order: the first draw of ``generator`` (a ``randperm`` of the shard count)."""
    return torch.randperm(len(offsets) - 1, generator=generator).numpy()


def block_permutation(offsets: np.ndarray, block_shards: int, generator: torch.Generator) -> np.ndarray:
    """A permutation of ``range(offsets[-1])``, read block by block (see the module docstring).

    Args:
        offsets: the shard layout from :func:`shard_offsets`.
        block_shards: shards per block (>= 1).
        generator: seeded generator for this pass; drawn from in a fixed sequence.

    Returns:
        An int64 array of every sample index exactly once.
    """
    order = shard_order(offsets, generator)
    sizes = np.diff(offsets)[order]
    ends = np.cumsum(sizes, dtype=np.int64)
    # the samples of the shards in reading order, shard after shard, each shard in storage order
    samples = np.arange(offsets[-1], dtype=np.int64) + np.repeat(offsets[:-1][order] - (ends - sizes), sizes)
    bounds = np.concatenate([[0], ends])
    for first in range(0, len(order), block_shards):
        low, high = bounds[first], bounds[min(first + block_shards, len(order))]
        block = samples[low:high]
        samples[low:high] = block[torch.randperm(high - low, generator=generator).numpy()]
    return samples


def layout_id(offsets: np.ndarray) -> str:
    """A short fingerprint of a shard layout (saved in the sampler's state and checked on load)."""
    data = np.ascontiguousarray(offsets, dtype="<i8").tobytes()
    return f"{len(offsets) - 1} shards, crc32 {zlib.crc32(data):08x}"
