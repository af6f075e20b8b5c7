"""The ``shuffle="index"`` and ``shuffle="index-blocks"`` orders of :class:`fastdata.DistributedSampler`.

Both compute each index of a pass on demand from a keyed bijection (:mod:`fastdata.sampler.feistel`)
instead of drawing a permutation of the whole dataset when the pass starts, so ``iter()`` costs O(1) time
and memory at any ``N`` and the pass is produced a chunk at a time (4,096 positions, doubling up to 65,536).

- ``"index"``: virtual pass ``v`` (``epoch * ratio + p``) reads position ``j`` of a permutation of ``[0, N)``
  keyed by ``(seed, v)``. Memory: O(1) per pass.
- ``"index-blocks"``: the same structure as ``"blocks"`` (:mod:`fastdata.sampler.blocks`): the shards are
  permuted (a keyed bijection of ``[0, shards)``), grouped ``block_shards`` at a time in that order into
  blocks, and the samples of each block are permuted by a bijection of ``[0, block size)`` keyed by
  ``(seed, v, block)``. Position ``j`` of the pass finds its block from the blocks' first positions,
  is permuted within the block, and lands in one of the block's shards, whatever their sizes (an empty
  shard just adds nothing). Memory: O(shards) per pass (the shard order and its cumulative sizes), never O(N).

As with every order of the sampler, the permutation depends on neither the number of ranks nor the resume
position: rank ``r`` takes global positions ``r, r + W, ...`` (padded by wrapping around or truncated as torch
does; ``repeats`` maps position ``j`` to ``(j mod k*N) // k``), which is what makes exact and elastic resume work.
The orders differ from torch's ``randperm`` (and from ``"blocks"``) for the same seed.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from fastdata.sampler.feistel import domain_bits, mix, permute, round_keys

__all__ = ["INDEX", "INDEX_BLOCKS", "INDEX_ORDERS", "IndexOrder", "rank_chunks"]

INDEX = "index"
INDEX_BLOCKS = "index-blocks"
INDEX_ORDERS = (INDEX, INDEX_BLOCKS)
_TAG_SAMPLES, _TAG_SHARDS, _TAG_BLOCKS = 1, 2, 3  # what a key permutes (its first word after the seed)
_FIRST_CHUNK, _MAX_CHUNK = 4096, 65536


class IndexOrder:
    """One virtual pass's permutation of ``[0, length)``, value by value (see the module docstring).

    Args:
        length: samples in the dataset.
        seed: the sampler's seed.
        virtual_epoch: ``epoch * ratio + virtual pass``.
        offsets: for ``"index-blocks"``, the shard layout (:func:`fastdata.sampler.blocks.shard_offsets`); None
            for ``"index"``.
        block_shards: shards per block (``"index-blocks"``).
    """

    def __init__(
        self, length: int, seed: int, virtual_epoch: int, offsets: np.ndarray | None = None, block_shards: int = 1
    ) -> None:
        self.length = length
        self._offsets = offsets
        if offsets is None:
            self._keys = round_keys(seed, _TAG_SAMPLES, virtual_epoch)
            self._bits = domain_bits(length)
            return
        shards = len(offsets) - 1
        self.shard_order = permute(np.arange(shards), shards, round_keys(seed, _TAG_SHARDS, virtual_epoch))
        sizes = np.diff(offsets)[self.shard_order]
        # reading position of each shard's first sample (shards in reading order), and of each block's
        self._shard_starts = np.concatenate([[0], np.cumsum(sizes[:-1], dtype=np.int64)]).astype(np.int64)
        self._block_starts = self._shard_starts[::block_shards]
        self._block_sizes = np.diff(np.append(self._block_starts, length))
        self._block_bits = np.asarray(domain_bits(self._block_sizes))
        blocks = np.arange(len(self._block_starts), dtype=np.uint64)
        base = round_keys(seed, _TAG_BLOCKS, virtual_epoch)
        self._block_keys = mix(base[:, None] ^ mix(blocks + np.uint64(1))[None, :])  # (ROUNDS, blocks)

    def at(self, positions: np.ndarray) -> np.ndarray:
        """The sample indices (int64) at ``positions`` (each in ``[0, length)``) of this pass."""
        if self._offsets is None:
            return permute(positions, self.length, self._keys, self._bits)
        block = np.searchsorted(self._block_starts, positions, side="right") - 1  # skips empty blocks
        first = self._block_starts[block]
        inside = permute(
            positions - first, self._block_sizes[block], self._block_keys[:, block], self._block_bits[block]
        )
        reading = first + inside
        slot = np.searchsorted(self._shard_starts, reading, side="right") - 1  # skips empty shards
        return self._offsets[:-1][self.shard_order[slot]] + (reading - self._shard_starts[slot])


def rank_chunks(
    order: IndexOrder, first: int, stride: int, start: int, count: int, repeats: int
) -> Iterator[np.ndarray]:
    """This rank's indices ``start .. count - 1`` of a pass, as int64 arrays of at most 65,536.

    Index ``k`` is at global position ``first + k * stride`` (``first``: the pass's resume position plus
    the rank; ``stride``: the number of ranks), wrapped around past the pass's end and repeated ``repeats``
    times in a row, as :func:`fastdata.sampler.repeats.take_repeated` does.
    """
    period = order.length * repeats
    size = _FIRST_CHUNK
    while start < count:
        stop = min(count, start + size)
        positions = first + stride * np.arange(start, stop, dtype=np.int64)
        yield order.at((positions % period) // repeats)
        start, size = stop, min(2 * size, _MAX_CHUNK)
