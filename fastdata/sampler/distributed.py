"""A resumable ``DistributedSampler`` whose one pass covers ``ratio`` passes over the data.

Iteration-based training with a plain ``DataLoader`` ends its iterator, and so tears down and
re-creates its workers, once per epoch. :class:`DistributedSampler` makes one ``iter()`` (one pass
of the loader) cover ``ratio`` consecutive *virtual passes*, so the workers live ``ratio`` times longer.

Virtual pass ``p`` of epoch ``e`` is seeded with ``seed + e * ratio + p`` and ordered by
``torch.randperm`` (``shuffle=True``: torch's pass at epoch ``e * ratio + p``, identical output at
``ratio=1``), ``range(N)`` (``False``) or block by block (``"blocks"``, see
:mod:`fastdata.sampler.blocks`: a few shards at a time); or keyed by ``(seed, e * ratio + p)``, each index
computed on demand in O(1) memory (``"index"`` and its block variant ``"index-blocks"``, see
:mod:`fastdata.sampler.index_shuffle`: for 10M+ samples). That permutation never depends on the world
size; padded by wrapping around or truncated to ``total_size`` as torch does, rank ``r`` takes its
positions ``r, r + num_replicas, ...``, so the ranks read each global batch together and a state
carries over to another number of ranks (:mod:`fastdata.sampler.elastic`). Passes are generated lazily,
one at a time, as a numpy array; ``ratio * N`` indices are never materialized.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence, Sized
from typing import Any

import torch.distributed as dist
from torch.utils.data import Sampler

from fastdata.sampler.blocks import BLOCKS, DEFAULT_BLOCK_SHARDS, layout_id, shard_offsets
from fastdata.sampler.elastic import adapt_loader_state, as_int, parse_origin, per_rank, rescale_state
from fastdata.sampler.index_shuffle import INDEX, INDEX_BLOCKS
from fastdata.sampler.pass_order import PassOrder
from fastdata.sampler.repeats import check_repeats, check_state_repeats

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_BLOCK_SHARDS", "DistributedSampler", "adapt_loader_state"]

#: Keys of :meth:`DistributedSampler.state_dict` that must match the sampler on load (when present).
_MATCHED_KEYS = (
    "num_replicas",
    "ratio",
    "seed",
    "shuffle",
    "drop_last",
    "dataset_length",
    "block_shards",
    "shard_layout",
)
_REQUIRED_KEYS = ("epoch", "seed", "ratio", "num_replicas", "shuffle", "drop_last", "start_index")
_ADAPT_HINT = (
    "to resume on another number of ranks, load sampler.adapt_state(state) instead (a DataLoaderX "
    "state: loader.load_state_dict(fastdata.sampler.adapt_loader_state(state, loader)))"
)


def _check_world(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    """The given world size and rank, defaulting to the process group's, or ``(1, 0)`` without one."""
    in_group = dist.is_available() and dist.is_initialized()
    world_size, world_rank = (dist.get_world_size(), dist.get_rank()) if in_group else (1, 0)
    num_replicas = world_size if num_replicas is None else num_replicas
    rank = world_rank if rank is None else rank
    num_replicas = as_int(num_replicas, "num_replicas", "pass the number of processes (>= 1)")
    if num_replicas < 1:
        raise ValueError(f"num_replicas must be >= 1, got {num_replicas}; pass the number of processes")
    rank = as_int(rank, "rank", f"pass this process's rank in [0, {num_replicas - 1}]")
    if not 0 <= rank < num_replicas:
        raise ValueError(
            f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}] "
            f"(num_replicas={num_replicas}); pass this process's rank"
        )
    return num_replicas, rank


class DistributedSampler(PassOrder, Sampler[int]):
    """Drop-in for :class:`torch.utils.data.DistributedSampler` with ``ratio`` passes per ``iter()``.

    Args:
        dataset: a sized dataset (``len(dataset)``, and ``dataset.shard_offsets`` for the blocks orders).
        num_replicas: number of processes in the job. Default: the world size of the
            initialized default process group, or 1 when there is none (where torch raises).
        rank: rank of this process in ``[0, num_replicas - 1]``. Default: the rank in the
            initialized default process group, or 0 when there is none.
        shuffle: ``True``: a fresh ``randperm`` per virtual pass (as torch does per epoch);
            ``False``: ``range(N)``; ``"blocks"``: shards permuted, grouped ``block_shards`` at a
            time, samples permuted within each block (pack with ``--shuffle-seed``: a block of a
            class-sorted dataset holds few classes); ``"index"``: a keyed Feistel permutation per virtual
            pass, each index computed when read: ``iter()`` in O(1) time and memory at any N (torch's
            ``randperm`` costs O(N) per pass), a different order from torch's; ``"index-blocks"``:
            ``"blocks"`` done that way, O(shards) memory per pass.
        seed: base seed, identical on all ranks.
        drop_last: drop the tail of each pass so it divides evenly across replicas,
            instead of padding it by wrapping around (torch's semantics).
        ratio: virtual passes per ``iter()`` (an int >= 1). ``len(sampler)`` is
            ``ratio * num_samples``.
        block_shards: shards per block with ``"blocks"``/``"index-blocks"``: all ranks read one block
            (``block_shards`` shards) at a time, two where a global batch straddles blocks.
        shard_sizes: samples in each shard, in dataset order, for the blocks orders over a
            dataset without ``shard_offsets`` (a :class:`~fastdata.ShardDataset` has them).
        repeats: repeated augmentation (DeiT's ``RASampler``): each index ``repeats`` times in a row in
            every pass, the copies on different ranks, pass length unchanged (:mod:`fastdata.sampler.repeats`).

    Attributes:
        dataset: as given; so are ``num_replicas``, ``rank``, ``seed``, ``shuffle``, ``drop_last``, ``ratio`` and
            ``block_shards``.
        epoch: the epoch :meth:`set_epoch` set.
        num_samples: indices per rank in ONE virtual pass (torch's ``num_samples``).
        total_size: indices over all ranks in one virtual pass (torch's ``total_size``).

    Raises:
        TypeError: ``num_replicas``, ``rank``, ``seed``, ``ratio``, ``block_shards`` or
            ``shard_sizes`` is not an int (sequence of ints).
        ValueError: ``num_replicas < 1``, ``rank`` outside ``[0, num_replicas - 1]``, ``ratio < 1``,
            ``block_shards < 1``, ``shuffle`` not one of ``True``/``False``/``"blocks"``/``"index"``/
            ``"index-blocks"``, or a blocks order without a shard layout that adds up to ``len(dataset)``.

    Example:
        >>> sampler = DistributedSampler(dataset, ratio=100)  # one loader pass = 100 epochs
        >>> loader = DataLoader(dataset, batch_size=8, sampler=sampler, num_workers=2)
        >>> sampler.set_epoch(0)
        >>> state = sampler.state_dict()          # at the start of the pass
        >>> for step, batch in enumerate(loader):
        ...     train_step(batch)
        ...     if step == 2:                      # stopped here, say
        ...         break
        >>> # to checkpoint after `step + 1` batches of 8 (drop_last=False loader):
        >>> state["start_index"] += (step + 1) * 8
        >>> # after a restart, in a fresh process (same number of ranks):
        >>> sampler.load_state_dict(state)        # next iter() yields the rest of the pass
        >>> # or on another number of ranks (here rank 0 of 2):
        >>> rank0 = DistributedSampler(dataset, num_replicas=2, rank=0, ratio=100)
        >>> rank0.load_state_dict(rank0.adapt_state(state))
    """

    def __init__(
        self,
        dataset: Sized,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool | str = True,
        seed: int = 0,
        drop_last: bool = False,
        *,
        ratio: int = 1,
        block_shards: int = DEFAULT_BLOCK_SHARDS,
        shard_sizes: Sequence[int] | None = None,
        repeats: int = 1,
    ) -> None:
        num_replicas, rank = _check_world(num_replicas, rank)
        self.ratio = as_int(ratio, "ratio", "pass a whole number of passes per iter(), e.g. ratio=100")
        if self.ratio < 1:
            raise ValueError(f"ratio must be >= 1, got {self.ratio}; use ratio=1 for torch's behaviour")
        self.seed = as_int(seed, "seed", "pass an int seed, identical on every rank")
        if isinstance(shuffle, str) and shuffle not in (BLOCKS, INDEX, INDEX_BLOCKS):
            raise ValueError(f"shuffle must be True, False, {BLOCKS!r}, {INDEX!r} or {INDEX_BLOCKS!r}, got {shuffle!r}")
        self.block_shards = as_int(block_shards, "block_shards", "pass the number of shards per block, e.g. 8")
        if self.block_shards < 1:
            raise ValueError(f"block_shards must be >= 1, got {self.block_shards}; e.g. block_shards=8")
        self.repeats = check_repeats(repeats)
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.epoch = 0
        self._length = len(dataset)
        self._blocks = shuffle in (BLOCKS, INDEX_BLOCKS) if isinstance(shuffle, str) else False
        self._offsets = shard_offsets(dataset, shard_sizes, self._length) if self._blocks else None
        self.num_samples = per_rank(self._length, 0, num_replicas, drop_last)
        self.total_size = self.num_samples * num_replicas
        self._start_index = 0  # where the NEXT iter() starts (this rank's positions from _origin)
        self._origin = (0, 0)  # (virtual pass, global position) that start_index counts from
        self._active: tuple[int, tuple[int, int]] | None = None  # (start, origin) of the pass in progress
        self._pass_token = 0  # tells the current iterator from superseded ones

    def __len__(self) -> int:
        """Indices this rank yields per ``iter()`` (a full pass): ``ratio * num_samples``."""
        return self.ratio * self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch; virtual pass ``p`` of it uses seed ``seed + epoch * ratio + p``.

        Setting a *different* epoch drops a pending resume position (the next
        ``iter()`` is a full pass); setting the epoch already loaded by
        :meth:`load_state_dict` keeps it, so the usual ``for epoch in range(start, n):
        sampler.set_epoch(epoch)`` loop resumes correctly.

        Args:
            epoch: epoch number (the outer epoch, one per ``iter()``).

        Raises:
            TypeError: ``epoch`` is not an int.
        """
        epoch = as_int(epoch, "epoch", "pass the epoch number")
        if epoch != self.epoch:
            self._start_index, self._origin = 0, (0, 0)
            self._active = None
        self.epoch = epoch

    def set_start_index(self, start_index: int) -> None:
        """Make the next ``iter()`` start ``start_index`` indices into this rank's pass.

        The pass after that one is a full pass again.

        Args:
            start_index: number of this rank's indices of the current pass already
                consumed, in ``[0, len(self)]`` (``len(self)``: nothing is left).

        Raises:
            TypeError: ``start_index`` is not an int.
            ValueError: ``start_index`` is outside ``[0, len(self)]``.
        """
        start_index = as_int(start_index, "start_index", "pass the number of indices already consumed")
        if not 0 <= start_index <= len(self):
            raise ValueError(
                f"start_index must be in [0, {len(self)}] (ratio={self.ratio} x num_samples="
                f"{self.num_samples}), got {start_index}; pass the number of this rank's "
                "indices already consumed in the current pass"
            )
        self._start_index, self._origin = start_index, (0, 0)
        self._active = None

    def state_dict(self) -> dict[str, Any]:
        """Return a small, picklable description of where the sampler stands.

        It describes the pass in progress (from ``iter()`` until that iterator is
        exhausted, closed or superseded) or, when none is, the pass the next ``iter()``
        will produce. ``start_index`` is where that pass starts for this rank (0 for a
        full pass). To checkpoint mid-pass, add the number of indices your loop has
        consumed since that pass started: the sampler cannot know it, because a
        ``DataLoader`` reads indices ahead of the batches it hands out. All ranks' states are equal.

        Returns:
            ``{"epoch", "seed", "ratio", "num_replicas", "shuffle", "drop_last", "start_index",
            "dataset_length"}``, plus ``"block_shards"``, ``"shard_layout"`` with a blocks order and
            ``"origin"`` (``[virtual pass, global position]`` that ``start_index`` counts from)
            after an uneven :meth:`adapt_state`. Cheap: no index is generated.
        """
        start, origin = (self._start_index, self._origin) if self._active is None else self._active
        state: dict[str, Any] = {
            "epoch": self.epoch,
            "seed": self.seed,
            "ratio": self.ratio,
            "num_replicas": self.num_replicas,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "start_index": start,
            "dataset_length": self._length,
        }
        if self._blocks:
            state.update(block_shards=self.block_shards, shard_layout=layout_id(self._shard_offsets()))
        if origin != (0, 0):
            state["origin"] = list(origin)
        if self.repeats != 1:
            state["repeats"] = self.repeats
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`: the next ``iter()`` yields the rest of that pass.

        The next ``iter()`` yields this rank's indices of epoch ``state["epoch"]`` from position
        ``state["start_index"]`` on (only the virtual passes from the one that position falls in
        are generated); every later ``iter()`` is a full pass. A state saved on another number
        of ranks goes through :meth:`adapt_state` first.

        Args:
            state: a mapping from :meth:`state_dict`, possibly with ``start_index`` advanced by the
                number of indices consumed. ``dataset_length`` is optional (checked when present).

        Raises:
            TypeError: ``state`` is not a mapping or a field has the wrong type.
            ValueError: a key is missing; ``num_replicas``, ``ratio``, ``seed``, ``shuffle``,
                ``drop_last``, ``dataset_length`` or the block layout differs from this
                sampler's; or ``start_index`` is outside ``[0, len(self)]``.
        """
        self._check_state(state, same_world=True)
        epoch = as_int(state["epoch"], "state['epoch']", "pass a dict returned by state_dict()")
        origin = parse_origin(state, self.ratio, self._length)
        self.set_start_index(state["start_index"])
        self._origin = origin
        self.epoch = epoch

    def adapt_state(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """Re-express a state saved on any number of ranks for this sampler's ranks (elastic resume).

        The saving ranks together consumed the first ``start_index * num_replicas`` positions of
        the pass's world-independent global stream; with the returned state, this sampler's ranks
        deliver every other sample of that pass exactly once, then the later passes, in the order
        of an uninterrupted run. Where the new number of ranks does not divide that position (at
        ``ratio > 1`` after a pass boundary), the rest of the pass is padded by wrapping around (or
        truncated with ``drop_last``) to a multiple of it, as torch does at the end of a pass.

        Args:
            state: a :meth:`state_dict` (``start_index`` advanced as for :meth:`load_state_dict`)
                of a sampler with the same dataset and settings and any ``num_replicas``.

        Returns:
            A state for :meth:`load_state_dict` (the same state if the world size is the same).

        Raises:
            TypeError: ``state`` is not a mapping or a field has the wrong type.
            ValueError: a key is missing, a setting other than ``num_replicas`` differs, or
                ``start_index`` is out of range for the saving world.
        """
        self._check_state(state, same_world=False)
        return rescale_state(state, self._length, self.ratio, self.drop_last, self.num_replicas)

    def _check_state(self, state: Any, *, same_world: bool) -> None:
        if not isinstance(state, Mapping):
            raise TypeError(f"state must be a mapping from state_dict(), got {type(state).__name__}")
        missing = [key for key in _REQUIRED_KEYS if key not in state]
        if missing:
            raise ValueError(f"state is missing {missing}; pass a dict returned by DistributedSampler.state_dict()")
        check_state_repeats(state, self.repeats)
        current = self.state_dict()
        for key in _MATCHED_KEYS:
            if key == "num_replicas" and not same_world:
                continue
            if key in state and state[key] != current.get(key):
                hint = _ADAPT_HINT if key == "num_replicas" else ""
                raise ValueError(
                    f"state has {key}={state[key]!r} but this sampler has {key}={current.get(key)!r}; "
                    f"construct the sampler with the same {key} as the one that saved the state{hint and '; '}{hint}"
                )

    def __iter__(self) -> Iterator[int]:
        """Yield this rank's indices for ``ratio`` virtual passes (or the rest of them after a resume)."""
        start, origin = self._start_index, self._origin
        self._start_index, self._origin = 0, (0, 0)
        self._active = (start, origin)
        self._pass_token += 1
        return self._generate(start, origin, self.epoch, self._pass_token)

    def __repr__(self) -> str:
        blocks = f", block_shards={self.block_shards}" if self._blocks else ""
        return (
            f"{type(self).__name__}(num_replicas={self.num_replicas}, rank={self.rank}, "
            f"shuffle={self.shuffle!r}{blocks}, seed={self.seed}, drop_last={self.drop_last}, "
            f"ratio={self.ratio}, epoch={self.epoch}, num_samples={self.num_samples}"
            f"{f', repeats={self.repeats}' if self.repeats != 1 else ''})"
        )
