"""``DataLoaderX``'s resume glue.

:meth:`~LoaderState.state_dict` and :meth:`~LoaderState.load_state_dict`, the
check that a setup's index order can be restored exactly, and where that order comes from (the order source, its
seeded generators, a sampler that skips whole batches itself). What a state holds is :mod:`fastdata.loader.resume`'s.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import BatchSampler, Dataset, IterableDataset, SequentialSampler
from torch.utils.data.distributed import DistributedSampler as _TorchDistributedSampler

from fastdata.loader.pass_seed import needs_pass_seed
from fastdata.loader.resume import (
    STATE_VERSION,
    PassState,
    after_base_seed,
    get_rng_states,
    has_state_methods,
    restore_sampler,
    snapshot_sampler,
    validate_state,
)
from fastdata.transforms.resolution import check_size

__all__ = ["LoaderState"]

_NO_ATTRIBUTE = object()


class LoaderState:
    """The ``state_dict`` half of ``DataLoaderX``.

    The ``state_dict`` half of :class:`~fastdata.loader.dataloader.DataLoaderX`, which sets the attributes below
    (torch's ``DataLoader`` the public ones).
    """

    dataset: Dataset[Any]
    sampler: Any
    batch_sampler: Any
    generator: Any
    num_workers: int
    persistent_workers: bool
    _iterator: Any

    if TYPE_CHECKING:  # DataLoader's, which DataLoaderX inherits after this class

        def __len__(self) -> int: ...

    _pass: PassState | None
    _pending: dict[str, Any] | None
    _passes_begun: int
    _resolution: tuple[int, int] | None

    def _fast_forward(self, source: Any, sampler_state: Any, skip: int) -> tuple[Any, int]:
        """Let a sampler with a ``start_index`` (fastdata's) skip whole batches itself: no index is made."""
        start = sampler_state.get("start_index") if isinstance(sampler_state, Mapping) else None
        if skip == 0 or type(self.batch_sampler) is not BatchSampler or not isinstance(start, int):
            return sampler_state, skip
        if not callable(getattr(source, "set_start_index", None)):
            return sampler_state, skip
        state = dict(sampler_state)
        state["start_index"] = min(start + skip * self.batch_sampler.batch_size, len(source))
        return state, 0

    def _order_source(self) -> Any:
        """The object whose iteration decides the index order."""
        if isinstance(self.batch_sampler, BatchSampler):
            return self.batch_sampler.sampler
        return self.sampler if self.batch_sampler is None else self.batch_sampler

    def _rng_slots(self) -> dict[str, torch.Generator]:
        slots = {}
        if isinstance(self.generator, torch.Generator):
            slots["loader"] = self.generator
        own = getattr(self._order_source(), "generator", None)
        if isinstance(own, torch.Generator) and own is not self.generator:
            slots["sampler"] = own
        return slots

    def _inexact_reason(self) -> str | None:
        """Why the index order of this setup cannot be restored mid-pass (None: it can), with the fix."""
        if isinstance(self.dataset, IterableDataset):
            return (
                "an IterableDataset decides its own order, which the loader cannot replay; use a map-style "
                "dataset to resume mid-pass"
            )
        source = self._order_source()
        if has_state_methods(source) or isinstance(
            source, (SequentialSampler, _TorchDistributedSampler, range, list, tuple)
        ):
            return None
        if isinstance(getattr(source, "generator", None), torch.Generator) or needs_pass_seed(source):
            return None
        if getattr(source, "generator", _NO_ATTRIBUTE) is None:
            return (
                f"the {type(source).__name__} has generator=None and its own __iter__, so fastdata cannot "
                "capture what it draws from torch's global RNG; pass it generator=torch.Generator().manual_seed(s)"
            )
        return (
            f"{type(source).__name__} has neither state_dict()/load_state_dict() nor a torch.Generator; add "
            "those two methods to it, or use fastdata.DistributedSampler, SequentialSampler or RandomSampler"
        )

    def _seeds_passes(self) -> bool:
        """Whether each pass draws its own seed from torch's global RNG (:mod:`fastdata.loader.pass_seed`)."""
        return not isinstance(self.dataset, IterableDataset) and needs_pass_seed(self._order_source())

    def state_dict(self) -> dict[str, Any]:
        """Where the loader stands: batches consumed in the current pass plus its order snapshot.

        Never raises for a setup torch's ``DataLoader`` accepts. Where the order cannot be replayed (an
        ``IterableDataset``, a sampler with neither ``state_dict()`` nor a ``torch.Generator``) it warns, and the
        state (``exact=False``) resumes at the start of the next pass.

        Returns:
            A dict of plain Python values (JSON-able when the sampler's state is), also
            ``torch.save``-able. Taken between passes it describes the start of the next pass.
        """
        reason = self._inexact_reason()
        if reason is not None:
            warnings.warn(
                f"DataLoaderX.state_dict() cannot resume this loader mid-pass: {reason}. A run resumed "
                "from this state starts at the next pass",
                UserWarning,
                stacklevel=2,
            )
        if self._pending is not None:
            return copy.deepcopy(self._pending)
        if reason is not None:
            return self._boundary_state(exact=False)
        p = self._pass
        if p is not None and not p.finished:
            return {
                "version": STATE_VERSION,
                "num_batches": len(self),
                "in_pass": True,
                "batches_consumed": p.skip + p.consumed,
                "rng_pass_start": dict(p.rng_start),
                "rng_sampler_draw": dict(p.rng_draw or p.rng_start),
                "sampler": copy.deepcopy(p.sampler_state),
                "sampler_seed": p.sampler_seed,
                "pass_number": p.number,
                "resolution": _listed(getattr(p, "resolution", None)),
            }
        return self._boundary_state(exact=True)

    def _boundary_state(self, exact: bool) -> dict[str, Any]:
        """The state of the start of the next pass."""
        rngs = self._rng_slots()
        now = get_rng_states(rngs)
        draw = dict(now)
        persistent_alive = self.persistent_workers and self.num_workers > 0 and self._iterator is not None
        if "loader" in rngs and not persistent_alive:  # a new torch iterator first draws its _base_seed
            draw["loader"] = after_base_seed(rngs["loader"])
        try:
            num_batches: int | None = len(self)
        except TypeError:  # an IterableDataset without __len__
            num_batches = None
        return {
            "version": STATE_VERSION,
            "num_batches": num_batches,
            "in_pass": False,
            "batches_consumed": 0,
            "rng_pass_start": now,
            "rng_sampler_draw": draw,
            "sampler": snapshot_sampler(self._order_source()),
            "sampler_seed": None,
            "pass_number": self._passes_begun,
            "resolution": _listed(self._resolution),
            "exact": exact,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Make the next ``iter()`` continue where ``state`` was taken (see :meth:`state_dict`).

        A state taken where the order could not be replayed (``exact=False``), or loaded into such a loader,
        warns and resumes at the start of the next pass.

        Args:
            state: A dict from :meth:`state_dict` of a loader built the same way (dataset size,
                batch size, sampler, generators).

        Raises:
            TypeError: ``state`` is not a mapping.
            ValueError: ``state`` is malformed or was taken from a differently built loader.
        """
        if not isinstance(state, Mapping):
            raise TypeError(f"state must be a dict from DataLoaderX.state_dict(), got {type(state).__name__}")
        state = dict(copy.deepcopy(dict(state)))
        reason = self._inexact_reason()
        if reason is not None or state.get("exact") is False:
            state.update(in_pass=False, batches_consumed=0, exact=False, sampler_seed=None)
            if reason is not None:
                state["sampler"] = None
            warnings.warn(
                "DataLoaderX.load_state_dict(): this state resumes at the start of the next pass, not "
                f"mid-pass ({reason or 'it was taken from a loader that could not resume mid-pass'})",
                UserWarning,
                stacklevel=2,
            )
        try:
            num_batches: int | None = len(self)
        except TypeError:
            num_batches = None
        validate_state(
            state, num_batches, set(self._rng_slots()), snapshot_sampler(self._order_source()), self._seeds_passes()
        )
        self._resolution = check_size(state.get("resolution"))  # the size the saved pass was decoded at
        if state["sampler"] is not None:  # now (it validates, and precedes the user's set_epoch())
            restore_sampler(self._order_source(), state["sampler"])  # and again at iter() if in a pass
        self._pending = state


def _listed(size: tuple[int, int] | None) -> list[int] | None:
    return None if size is None else list(size)
