"""The order of a :class:`fastdata.MixedDataset`: a fixed number of samples per source in every pass.

Pass ``v`` (virtual pass ``p`` of epoch ``e`` is ``v = e * ratio + p``, as in
:class:`~fastdata.DistributedSampler`) takes ``c = counts[k]`` samples from source ``k`` (``n`` samples): positions
``[v * c, (v + 1) * c)`` of that source's endless stream. The stream is a sequence of cycles, each a seeded
permutation of the source's ``n`` samples, continuing across passes: no sample is read twice before every sample
has been read once in its cycle. A pass that begins inside one cycle and ends inside a later one reads a tail ``T``
of the first and a head ``H`` of the last (and whole cycles between); the last cycle then begins with the samples
not in ``T`` (in its own seeded order), and the samples of ``T`` come after them. So in every pass each sample of
the source is read ``c // n`` or ``c // n + 1`` times: a source read less than once per pass (``c <= n``) never
repeats a sample within a pass, and one read at least once per pass (``c >= n``) reads every sample in every pass
(MosaicML Streaming's per-epoch counts for ``proportion``/``repeat``: whole repeats plus a remainder drawn without
replacement), while the remainders, unlike Streaming's fresh draw per epoch, continue through the cycles, so a
source read at 0.3 of its size per pass reads one whole permutation of it every 3⅓ passes.

The selected samples are then shuffled together with the pass's own seed. Nothing depends on the number of
ranks: rank ``r`` takes positions ``r, r + W, ...`` of that order, padded or truncated as ``DistributedSampler``
does, and resume, ``ratio`` and resume on another number of ranks (``adapt_state``,
:func:`fastdata.sampler.adapt_loader_state`) are ``DistributedSampler``'s. A cycle's order depends on the one
before it (through ``T``) when the source is read more than half of its size per pass; the sampler keeps the last
few cycles of each source, so reading pass after pass costs one permutation per cycle, and the first pass after a
resume computes that chain of cycles once (about 60 ms per pass before it for a source of 1.28M samples).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fastdata.sampler.distributed import DistributedSampler
from fastdata.sampler.elastic import per_rank

__all__ = ["MixedSampler"]

_MASK64 = (1 << 64) - 1
_SOURCE, _PASS = 1, 2  # stream tags of the seeds (a source's permutations, a pass's shuffle)
_CYCLES_KEPT = 4  # cycles kept per source: the chain of the next pass starts from the last one


class _PassLength:
    """What the base sampler sees as its dataset: ``len()`` is the samples per pass; ``mixed`` is the dataset."""

    def __init__(self, mixed: Any, length: int) -> None:
        self.mixed = mixed
        self._length = length

    def __len__(self) -> int:
        return self._length


class MixedSampler(DistributedSampler):
    """A resumable, distributed sampler over a :class:`fastdata.MixedDataset` (see the module docstring).

    Args:
        dataset: a :class:`fastdata.MixedDataset` (anything with ``source_lengths``, ``pass_counts``
            and ``source_offsets``).
        num_replicas, rank, seed, drop_last, ratio: as for :class:`fastdata.DistributedSampler`.
        shuffle: True: each source's stream is a fresh permutation per round and the pass is shuffled;
            False: sources are read in storage order and the pass keeps source order (for inspection).

    Attributes:
        mixed: the dataset; ``len(sampler.dataset)`` is the samples per pass (the base sampler's view).

    Raises:
        TypeError: ``dataset`` is not a mixture.
        ValueError: as for ``DistributedSampler``; ``shuffle="blocks"`` is not supported.

    Example::

        mixed = MixedDataset([(imagenet, 0.8), (domain, 0.2)])
        sampler = MixedSampler(mixed, seed=0, ratio=10)
        loader = DataLoaderX(mixed, batch_size=256, sampler=sampler, collate_fn=fast_collate)
    """

    def __init__(
        self,
        dataset: Any,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        *,
        ratio: int = 1,
    ) -> None:
        counts = getattr(dataset, "pass_counts", None)
        lengths = getattr(dataset, "source_lengths", None)
        offsets = getattr(dataset, "source_offsets", None)
        if counts is None or lengths is None or offsets is None:
            raise TypeError(f"MixedSampler needs a fastdata.MixedDataset, got {type(dataset).__name__}")
        if not isinstance(shuffle, bool):
            raise ValueError(f"MixedSampler's shuffle must be True or False, got {shuffle!r}")
        self.mixed = dataset
        self._counts = [int(c) for c in counts]
        self._lengths = [int(n) for n in lengths]
        self._source_offsets = [int(o) for o in offsets]
        self._cycles: dict[tuple[int, int, bool | str], dict[int, np.ndarray]] = {}
        super().__init__(
            _PassLength(dataset, sum(self._counts)), num_replicas, rank, shuffle, seed, drop_last, ratio=ratio
        )

    def _mixture(self) -> list[list[int]]:
        return [[n, c] for n, c in zip(self._lengths, self._counts, strict=False)]

    def state_dict(self) -> dict[str, Any]:
        """``DistributedSampler.state_dict()`` plus ``"mixture"``: ``[source length, samples per pass]`` per source."""
        state = super().state_dict()
        state["mixture"] = self._mixture()
        return state

    def _check_state(self, state: Any, *, same_world: bool) -> None:
        super()._check_state(state, same_world=same_world)
        saved = state.get("mixture") if isinstance(state, Mapping) else None
        if saved is not None and [list(map(int, s)) for s in saved] != self._mixture():
            raise ValueError(
                f"state has mixture={saved!r} but this sampler has {self._mixture()!r} ([source length, "
                "samples per pass] per source); build the MixedDataset with the same sources and weights"
            )

    def source_stream(self, source: int, start: int, stop: int) -> np.ndarray:
        """Positions ``[start, stop)`` of source ``source``'s endless stream, as indices into that source."""
        length = self._lengths[source]
        if stop <= start:
            return np.zeros(0, np.int64)
        parts = []
        for rnd in range(start // length, (stop - 1) // length + 1):
            perm = self._cycle(source, rnd)
            parts.append(perm[max(start, rnd * length) - rnd * length : min(stop, (rnd + 1) * length) - rnd * length])
        return np.concatenate(parts)

    def _permutation(self, source: int, rnd: int) -> np.ndarray:
        """Cycle ``rnd``'s own seeded permutation, before it is made to begin with what its pass has not read."""
        if not self.shuffle:
            return np.arange(self._lengths[source], dtype=np.int64)
        rng = np.random.default_rng([self.seed & _MASK64, _SOURCE, source, rnd])
        return rng.permutation(self._lengths[source]).astype(np.int64)

    def _leading_tail(self, source: int, rnd: int) -> tuple[int, int, int] | None:
        """Where a pass that ends inside cycle ``rnd`` began.

        ``(cycle j, offset, head)`` when cycle ``rnd`` ends inside a pass that began at ``offset`` inside an
        earlier cycle ``j`` (the pass reads ``j[offset:]`` and the first ``head`` of cycle ``rnd``); else None.
        """
        n, c = self._lengths[source], self._counts[source]
        if not self.shuffle or c == 0:  # storage order already puts the unread samples first
            return None
        begin = rnd * n
        start = begin // c * c  # the pass that reads position `begin`
        if start == begin or start % n == 0 or start + c >= begin + n:
            return None
        return start // n, start % n, start + c - begin

    def _tail_unmoved(self, source: int, rnd: int, offset: int) -> bool:
        """Whether cycle ``rnd`` from ``offset`` on is its own permutation's.

        Its head took its samples from before
        ``offset`` (a source read at most half of its size per pass is always so, which keeps its chain short).
        """
        link = self._leading_tail(source, rnd)
        return link is None or offset >= link[2] + self._lengths[source] - link[1]

    def _cycle(self, source: int, rnd: int) -> np.ndarray:
        """Cycle ``rnd`` of source ``source``'s stream (see the module docstring), computed through its chain."""
        cache = self._cycles.setdefault((source, self.seed, self.shuffle), {})
        chain: list[tuple[int, tuple[int, int, int] | None]] = []
        k = rnd
        while k not in cache:
            link = self._leading_tail(source, k)
            chain.append((k, link))
            if link is None or link[0] in cache or self._tail_unmoved(source, link[0], link[1]):
                break
            k = link[0]
        if not chain:
            return cache[rnd]
        known: dict[int, np.ndarray] = {}
        for k, link in reversed(chain):
            perm = self._permutation(source, k)
            if link is not None:
                j, offset, head = link
                before = known[j] if j in known else cache[j] if j in cache else self._permutation(source, j)
                perm = _lead_with_unread(perm, before[offset:], head)
            known[k] = cache[k] = perm
            while len(cache) > _CYCLES_KEPT:
                del cache[next(iter(cache))]  # the oldest
        return known[rnd]

    def pass_order(self, virtual_epoch: int) -> np.ndarray:
        """The whole pass ``virtual_epoch`` (``epoch * ratio + virtual pass``) over all ranks, as dataset indices."""
        parts = [
            self._source_offsets[k] + self.source_stream(k, virtual_epoch * c, (virtual_epoch + 1) * c)
            for k, c in enumerate(self._counts)
        ]
        order = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        if self.shuffle:
            order = order[np.random.default_rng([self.seed & _MASK64, _PASS, virtual_epoch]).permutation(len(order))]
        return order

    def _indices(self, virtual_epoch: int, position: int) -> np.ndarray:
        order = self.pass_order(virtual_epoch)
        end = position + per_rank(self._length, position, self.num_replicas, self.drop_last) * self.num_replicas
        positions = np.arange(position + self.rank, end, self.num_replicas, dtype=np.int64)
        return order[positions % self._length] if self._length else order[:0]

    def __repr__(self) -> str:
        return (
            f"MixedSampler(num_replicas={self.num_replicas}, rank={self.rank}, shuffle={self.shuffle}, "
            f"seed={self.seed}, ratio={self.ratio}, epoch={self.epoch}, per_pass={self._counts})"
        )


def _lead_with_unread(perm: np.ndarray, tail: np.ndarray, head: int) -> np.ndarray:
    """``perm`` reordered so that its first ``head`` samples are those not in ``tail``.

    ``perm`` reordered so that its first ``head`` samples are, in ``perm``'s order, those not in ``tail`` (then,
    when ``head`` is longer than those, the first of ``tail``); the rest keep ``perm``'s order.
    """
    n = len(perm)
    in_tail = np.zeros(n, bool)
    in_tail[tail] = True
    read_late = in_tail[perm]
    first = np.concatenate([perm[~read_late], perm[read_late]])[:head]
    in_first = np.zeros(n, bool)
    in_first[first] = True
    return np.concatenate([first, perm[~in_first[perm]]])
