"""A resumable ``DistributedSampler`` whose one pass covers ``ratio`` passes over the data.

Iteration-based training with a plain ``DataLoader`` ends its iterator, and so tears
down and re-creates its workers, once per epoch. :class:`DistributedSampler` makes one
``iter()`` of the sampler (one pass of the loader) cover ``ratio`` consecutive
*virtual passes*, each one exactly what :class:`torch.utils.data.DistributedSampler`
yields for a later epoch, so the workers live ``ratio`` times longer while the index
stream stays the one torch would produce.

Index stream: virtual pass ``p`` (``0 <= p < ratio``) of epoch ``e`` is torch's pass at
epoch ``e * ratio + p``: a permutation from ``torch.Generator().manual_seed(seed + e *
ratio + p)`` (or ``range(N)`` without shuffling), padded by wrapping around or truncated
to ``total_size``, then split ``rank::num_replicas``. At ``ratio=1`` the output is
identical to torch's sampler. Passes are generated lazily, one at a time, as a numpy
array; ``ratio * N`` indices are never materialized.
"""

from __future__ import annotations

import logging
import math
import operator
from collections.abc import Iterator, Mapping, Sized
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import Sampler

logger = logging.getLogger(__name__)

__all__ = ["DistributedSampler"]

#: Keys of :meth:`DistributedSampler.state_dict` that must match the sampler on load.
_MATCHED_KEYS = ("num_replicas", "ratio", "seed", "shuffle", "drop_last", "dataset_length")
_REQUIRED_KEYS = ("epoch", "seed", "ratio", "num_replicas", "shuffle", "drop_last", "start_index")
#: Indices are turned into Python ints this many at a time (keeps memory flat).
_CHUNK = 8192


def _as_int(value: Any, name: str, fix: str) -> int:
    """Return ``value`` as an ``int``, accepting numpy integers but not bools or floats."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got the bool {value!r}; {fix}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}; {fix}") from None


def _default_world() -> tuple[int, int]:
    """World size and rank of the default process group, or ``(1, 0)`` without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


class DistributedSampler(Sampler[int]):
    """Drop-in for :class:`torch.utils.data.DistributedSampler` with ``ratio`` passes per ``iter()``.

    Args:
        dataset: a sized dataset (only ``len(dataset)`` is used).
        num_replicas: number of processes in the job. Default: the world size of the
            initialized default process group, or 1 when there is none (where torch raises).
        rank: rank of this process in ``[0, num_replicas - 1]``. Default: the rank in the
            initialized default process group, or 0 when there is none.
        shuffle: shuffle each virtual pass with its own seed (as torch does per epoch).
        seed: base seed, identical on all ranks.
        drop_last: drop the tail of each pass so it divides evenly across replicas,
            instead of padding it by wrapping around (torch's semantics).
        ratio: virtual passes per ``iter()`` (an int >= 1). ``len(sampler)`` is
            ``ratio * num_samples``.

    Attributes:
        dataset, num_replicas, rank, epoch, seed, shuffle, drop_last, ratio: as given
            (``epoch`` set by :meth:`set_epoch`).
        num_samples: indices per rank in ONE virtual pass (torch's ``num_samples``).
        total_size: indices over all ranks in one virtual pass (torch's ``total_size``).

    Raises:
        TypeError: ``num_replicas``, ``rank``, ``seed`` or ``ratio`` is not an int.
        ValueError: ``num_replicas < 1``, ``rank`` outside ``[0, num_replicas - 1]`` or
            ``ratio < 1``.

    Example::

        >>> sampler = DistributedSampler(dataset, ratio=100)  # one loader pass = 100 epochs
        >>> loader = DataLoader(dataset, batch_size=256, sampler=sampler, num_workers=8)
        >>> sampler.set_epoch(0)
        >>> state = sampler.state_dict()          # at the start of the pass
        >>> for step, batch in enumerate(loader):
        ...     train_step(batch)
        >>> # to checkpoint after `step + 1` batches of 256 (drop_last=False loader):
        >>> state["start_index"] += (step + 1) * 256
        >>> # after a restart, in a fresh process:
        >>> sampler.load_state_dict(state)        # next iter() yields the rest of the pass
    """

    def __init__(
        self,
        dataset: Sized,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        *,
        ratio: int = 1,
    ) -> None:
        world_size, world_rank = _default_world()
        num_replicas = world_size if num_replicas is None else num_replicas
        rank = world_rank if rank is None else rank
        num_replicas = _as_int(num_replicas, "num_replicas", "pass the number of processes (>= 1)")
        if num_replicas < 1:
            raise ValueError(f"num_replicas must be >= 1, got {num_replicas}; pass the number of processes")
        rank = _as_int(rank, "rank", f"pass this process's rank in [0, {num_replicas - 1}]")
        if not 0 <= rank < num_replicas:
            raise ValueError(
                f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}] "
                f"(num_replicas={num_replicas}); pass this process's rank"
            )
        self.ratio = _as_int(ratio, "ratio", "pass a whole number of passes per iter(), e.g. ratio=100")
        if self.ratio < 1:
            raise ValueError(f"ratio must be >= 1, got {self.ratio}; use ratio=1 for torch's behaviour")
        self.seed = _as_int(seed, "seed", "pass an int seed, identical on every rank")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.epoch = 0
        self._length = len(dataset)
        if drop_last and self._length % num_replicas != 0:
            self.num_samples = math.ceil((self._length - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(self._length / num_replicas)
        self.total_size = self.num_samples * num_replicas
        self._start_index = 0  # where the NEXT iter() starts (this rank's positions)
        self._active_start: int | None = None  # where the pass in progress started
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
        epoch = _as_int(epoch, "epoch", "pass the epoch number")
        if epoch != self.epoch:
            self._start_index = 0
            self._active_start = None
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
        start_index = _as_int(start_index, "start_index", "pass the number of indices already consumed")
        if not 0 <= start_index <= len(self):
            raise ValueError(
                f"start_index must be in [0, {len(self)}] (ratio={self.ratio} x num_samples="
                f"{self.num_samples}), got {start_index}; pass the number of this rank's "
                "indices already consumed in the current pass"
            )
        self._start_index = start_index
        self._active_start = None

    def state_dict(self) -> dict[str, Any]:
        """Return a small, picklable description of where the sampler stands.

        It describes the pass in progress (from ``iter()`` until that iterator is
        exhausted, closed or superseded) or, when none is, the pass the next ``iter()``
        will produce. ``start_index`` is where that pass starts for this rank (0 for a
        full pass). To checkpoint mid-pass, add the number of indices your loop has
        consumed since that pass started: the sampler cannot know it, because a
        ``DataLoader`` reads indices ahead of the batches it hands out.

        Returns:
            ``{"epoch", "seed", "ratio", "num_replicas", "shuffle", "drop_last",
            "start_index", "dataset_length"}``; cheap (no index is generated).
        """
        start = self._start_index if self._active_start is None else self._active_start
        return {
            "epoch": self.epoch,
            "seed": self.seed,
            "ratio": self.ratio,
            "num_replicas": self.num_replicas,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
            "start_index": start,
            "dataset_length": self._length,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`: the next ``iter()`` yields the rest of that pass.

        The next ``iter()`` yields this rank's indices of epoch ``state["epoch"]`` from
        position ``state["start_index"]`` on (only the virtual passes from the one that
        position falls in are generated); every later ``iter()`` is a full pass.

        Args:
            state: a mapping from :meth:`state_dict`, possibly with ``start_index``
                advanced by the number of indices consumed. ``dataset_length`` is
                optional (checked when present).

        Raises:
            TypeError: ``state`` is not a mapping or a field has the wrong type.
            ValueError: a key is missing; ``num_replicas``, ``ratio``, ``seed``,
                ``shuffle``, ``drop_last`` or ``dataset_length`` differs from this
                sampler's; or ``start_index`` is outside ``[0, len(self)]``.
        """
        if not isinstance(state, Mapping):
            raise TypeError(f"state must be a mapping from state_dict(), got {type(state).__name__}")
        missing = [key for key in _REQUIRED_KEYS if key not in state]
        if missing:
            raise ValueError(f"state is missing {missing}; pass a dict returned by DistributedSampler.state_dict()")
        current = self.state_dict()
        for key in _MATCHED_KEYS:
            if key in state and state[key] != current[key]:
                raise ValueError(
                    f"state has {key}={state[key]!r} but this sampler has {key}={current[key]!r}; "
                    f"construct the sampler with the same {key} as the one that saved the state"
                )
        epoch = _as_int(state["epoch"], "state['epoch']", "pass a dict returned by state_dict()")
        self.set_start_index(state["start_index"])
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        """Yield this rank's indices for ``ratio`` virtual passes (or the rest of them after a resume)."""
        start = self._start_index
        self._start_index = 0
        self._active_start = start
        self._pass_token += 1
        return self._generate(start, self.epoch, self._pass_token)

    def _generate(self, start: int, epoch: int, token: int) -> Iterator[int]:
        try:
            if self.num_samples == 0:
                return
            first_pass, offset = divmod(start, self.num_samples)
            for virtual_pass in range(first_pass, self.ratio):
                indices = self._pass_indices(epoch * self.ratio + virtual_pass)
                for begin in range(offset, len(indices), _CHUNK):
                    yield from indices[begin : begin + _CHUNK].tolist()
                offset = 0
        finally:
            if token == self._pass_token:
                self._active_start = None

    def _pass_indices(self, virtual_epoch: int) -> np.ndarray:
        """This rank's indices of one pass, as torch's sampler makes them at ``virtual_epoch``."""
        if self._length != len(self.dataset):
            raise RuntimeError(
                f"the dataset changed size from {self._length} to {len(self.dataset)} after the "
                "sampler was built; build a new DistributedSampler for the new dataset"
            )
        if self.shuffle:
            generator = torch.Generator()
            generator.manual_seed(self.seed + virtual_epoch)
            order = torch.randperm(self._length, generator=generator).numpy()
        else:
            order = np.arange(self._length, dtype=np.int64)
        # torch pads by repeating the permutation from its start (as often as needed) and
        # truncates with drop_last; both are "position j takes order[j % N]".
        positions = np.arange(self.rank, self.total_size, self.num_replicas, dtype=np.int64)
        return order[positions % self._length] if self._length else order[:0]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_replicas={self.num_replicas}, rank={self.rank}, "
            f"shuffle={self.shuffle}, seed={self.seed}, drop_last={self.drop_last}, "
            f"ratio={self.ratio}, epoch={self.epoch}, num_samples={self.num_samples})"
        )
