"""Which indices a ``DistributedSampler`` pass yields on this rank.

Each virtual pass's order from its seed
(``randperm``, ``range(N)``, block by block, or value by value from a keyed bijection with ``"index"`` and
``"index-blocks"``), padded or truncated for all ranks alike, generated lazily from a resume position; and the
shard blocks of a pass.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized

import numpy as np
import torch

from fastdata.sampler.blocks import BLOCKS, block_permutation, shard_order
from fastdata.sampler.elastic import as_int, per_rank
from fastdata.sampler.index_shuffle import INDEX_BLOCKS, INDEX_ORDERS, IndexOrder, rank_chunks
from fastdata.sampler.repeats import take_repeated

__all__ = ["PassOrder"]

#: Indices are turned into Python ints this many at a time (keeps memory flat).
_CHUNK = 8192


class PassOrder:
    """The pass-order half of ``DistributedSampler``.

    The pass-order half of :class:`~fastdata.sampler.distributed.DistributedSampler`, which sets the attributes
    below; the sampler's ``__iter__`` hands :meth:`_generate` where the pass starts.
    """

    dataset: Sized
    num_replicas: int
    rank: int
    shuffle: bool | str
    seed: int
    drop_last: bool
    ratio: int
    block_shards: int
    repeats: int
    epoch: int
    num_samples: int
    _length: int
    _blocks: bool
    _offsets: np.ndarray | None
    _active: tuple[int, tuple[int, int]] | None
    _pass_token: int

    def _shard_offsets(self) -> np.ndarray:
        """The shards' first sample indices (``_offsets``), which every block-reading sampler has."""
        if self._offsets is None:
            raise RuntimeError(f"{type(self).__name__} reads no blocks: it has no shard offsets")
        return self._offsets

    def shard_blocks(self, virtual_pass: int = 0) -> list[np.ndarray]:
        """The shards of each block, in reading order, of virtual pass ``virtual_pass`` of the current epoch.

        The same on every rank and for every world size (a cache can plan its downloads and
        evictions with it): the global stream reads block 0's samples first, then block 1's, ...

        Args:
            virtual_pass: in ``[0, ratio - 1]``.

        Returns:
            A list of int64 arrays of shard indices (``block_shards`` each, the last one maybe fewer).

        Raises:
            ValueError: the sampler does not use ``shuffle="blocks"`` or ``"index-blocks"``, or ``virtual_pass`` is
                out of range.
        """
        if not self._blocks:
            raise ValueError(
                f"shard_blocks() needs shuffle={BLOCKS!r} or {INDEX_BLOCKS!r}, this sampler has "
                f"shuffle={self.shuffle!r}"
            )
        virtual_pass = as_int(virtual_pass, "virtual_pass", f"pass a pass number in [0, {self.ratio - 1}]")
        if not 0 <= virtual_pass < self.ratio:
            raise ValueError(f"virtual_pass must be in [0, {self.ratio - 1}], got {virtual_pass}")
        virtual_epoch = self.epoch * self.ratio + virtual_pass
        if self.shuffle == INDEX_BLOCKS:
            order = self._index_order(virtual_epoch).shard_order
        else:
            order = shard_order(self._shard_offsets(), self._generator(virtual_epoch))
        return [order[i : i + self.block_shards] for i in range(0, len(order), self.block_shards)]

    def _generate(self, start: int, origin: tuple[int, int], epoch: int, token: int) -> Iterator[int]:
        try:
            if self.num_samples == 0:
                return
            virtual_pass, position = origin
            first = per_rank(self._length, position, self.num_replicas, self.drop_last)
            if start >= first:  # past the pass the origin is in: whole passes from here
                skipped, start = divmod(start - first, self.num_samples)
                virtual_pass, position = virtual_pass + 1 + skipped, 0
            for this_pass in range(virtual_pass, self.ratio):
                for chunk in self._chunks(epoch * self.ratio + this_pass, position, start):
                    for begin in range(0, len(chunk), _CHUNK):
                        yield from chunk[begin : begin + _CHUNK].tolist()
                start = position = 0
        finally:
            if token == self._pass_token:
                self._active = None

    def _chunks(self, virtual_epoch: int, position: int, start: int) -> Iterator[np.ndarray]:
        """This rank's indices of a pass counted from global ``position``, from its ``start``-th on, in arrays."""
        if isinstance(self.shuffle, str) and self.shuffle in INDEX_ORDERS:  # computed a chunk at a time
            self._check_length()
            count = per_rank(self._length, position, self.num_replicas, self.drop_last)
            yield from rank_chunks(
                self._index_order(virtual_epoch), position + self.rank, self.num_replicas, start, count, self.repeats
            )
            return
        indices = self._pass_indices(virtual_epoch) if position == 0 else self._indices(virtual_epoch, position)
        for begin in range(start, len(indices), _CHUNK):
            yield indices[begin : begin + _CHUNK]

    def _index_order(self, virtual_epoch: int) -> IndexOrder:
        offsets = self._offsets if self.shuffle == INDEX_BLOCKS else None
        return IndexOrder(self._length, self.seed, virtual_epoch, offsets, self.block_shards)

    def _pass_indices(self, virtual_epoch: int) -> np.ndarray:
        """This rank's indices of one whole pass (torch's sampler at ``virtual_epoch`` for True/False)."""
        return self._indices(virtual_epoch, 0)

    def _indices(self, virtual_epoch: int, position: int) -> np.ndarray:
        """This rank's indices of a pass from global ``position`` on, padded or truncated to all ranks alike."""
        if isinstance(self.shuffle, str) and self.shuffle in INDEX_ORDERS:  # the whole pass at once (O(N/world))
            return np.concatenate([np.zeros(0, np.int64), *self._chunks(virtual_epoch, position, 0)])
        self._check_length()
        if self._blocks:
            order = block_permutation(self._shard_offsets(), self.block_shards, self._generator(virtual_epoch))
        elif self.shuffle:
            order = torch.randperm(self._length, generator=self._generator(virtual_epoch)).numpy()
        else:
            order = np.arange(self._length, dtype=np.int64)
        # torch pads by repeating the permutation from its start (as often as needed) and
        # truncates with drop_last; both are "position j takes order[j % N]".
        end = position + per_rank(self._length, position, self.num_replicas, self.drop_last) * self.num_replicas
        positions = np.arange(position + self.rank, end, self.num_replicas, dtype=np.int64)
        return take_repeated(order, positions, self.repeats)

    def _check_length(self) -> None:
        if self._length != len(self.dataset):
            raise RuntimeError(
                f"the dataset changed size from {self._length} to {len(self.dataset)} after the "
                "sampler was built; build a new DistributedSampler for the new dataset"
            )

    def _generator(self, virtual_epoch: int) -> torch.Generator:
        generator = torch.Generator()
        generator.manual_seed(self.seed + virtual_epoch)
        return generator
