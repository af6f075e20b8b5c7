"""Resume on a different number of ranks: global positions of :class:`fastdata.DistributedSampler`.

Every order of the sampler is a world-size-independent permutation per virtual pass, split
across ranks by position (rank ``r`` takes ``r, r + W, r + 2W, ...``). After each of ``W`` ranks
took ``k`` indices of a pass, the job has consumed exactly its first ``k * W`` positions: the
*global position*. A state saved on ``W`` ranks is carried to ``M`` ranks by turning its
per-rank ``start_index`` into (virtual pass, global position) and back (see
``DistributedSampler.adapt_state``); :func:`adapt_loader_state` does the same for a
``DataLoaderX`` state, whose consumed batches are counted per rank.

When ``M`` does not divide the global position (at ``ratio > 1`` after a pass boundary, where each
pass was padded to a multiple of ``W``), the rest of that pass is padded by wrapping around (or
truncated with ``drop_last``) to a multiple of ``M``, exactly as torch pads a whole pass, and the
state records that resume point as ``origin``.
"""

from __future__ import annotations

import copy
import math
import operator
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["adapt_loader_state", "global_point", "local_point", "parse_origin", "per_rank", "rescale_state"]


def per_rank(length: int, position: int, replicas: int, drop_last: bool) -> int:
    """Indices per rank from global ``position`` to the end of a pass (torch's ``num_samples`` at 0)."""
    left = max(0, length - position)
    return left // replicas if drop_last else math.ceil(left / replicas)


def global_point(
    length: int, replicas: int, drop_last: bool, ratio: int, origin: tuple[int, int], start: int
) -> tuple[int, int]:
    """(virtual pass, global position) once each of ``replicas`` ranks took ``start`` indices from ``origin``.

    A rank at the very end of a pass is at that pass's end, not at the next pass's start (with
    ``drop_last`` a world with another number of ranks may still have to read that pass's tail).
    ``(ratio, 0)`` means the whole ``iter()`` is consumed.
    """
    virtual_pass, position = origin
    first = per_rank(length, position, replicas, drop_last)
    if start <= first:
        return virtual_pass, position + start * replicas
    whole = per_rank(length, 0, replicas, drop_last)
    extra, offset = divmod(start - first - 1, whole) if whole else (ratio, 0)
    if virtual_pass + 1 + extra >= ratio:
        return ratio, 0
    return virtual_pass + 1 + extra, (offset + 1) * replicas


def local_point(
    length: int, replicas: int, drop_last: bool, ratio: int, virtual_pass: int, position: int
) -> tuple[int, tuple[int, int]]:
    """(start_index, origin) that make ``replicas`` ranks resume at a global point; origin ``(0, 0)`` if possible."""
    if virtual_pass < ratio and per_rank(length, position, replicas, drop_last) == 0:
        virtual_pass, position = virtual_pass + 1, 0  # only padding (or the dropped tail) is left
    if virtual_pass >= ratio:
        return ratio * per_rank(length, 0, replicas, drop_last), (0, 0)
    if position % replicas == 0:
        return virtual_pass * per_rank(length, 0, replicas, drop_last) + position // replicas, (0, 0)
    return 0, (virtual_pass, position)


def parse_origin(state: Mapping[str, Any], ratio: int, length: int) -> tuple[int, int]:
    """The ``origin`` of a sampler state (``(0, 0)`` when absent), checked."""
    origin = state.get("origin", (0, 0))
    fix = "pass a dict returned by state_dict() or adapt_state()"
    if not isinstance(origin, Sequence) or len(origin) != 2:
        raise TypeError(f"state['origin'] must be [virtual pass, global position], got {origin!r}; {fix}")
    virtual_pass, position = (as_int(v, "state['origin']", fix) for v in origin)
    if not (0 <= virtual_pass < ratio and 0 <= position <= length):
        raise ValueError(f"state['origin'] must be in [0, {ratio - 1}] x [0, {length}], got {list(origin)}; {fix}")
    return virtual_pass, position


def rescale_state(state: Mapping[str, Any], length: int, ratio: int, drop_last: bool, replicas: int) -> dict[str, Any]:
    """A sampler state saved on ``state["num_replicas"]`` ranks, re-expressed for ``replicas`` ranks.

    The other settings are the caller's to check (``DistributedSampler.adapt_state`` does).
    """
    fix = "pass a dict returned by state_dict()"
    saved = as_int(state["num_replicas"], "state['num_replicas']", fix)
    if saved < 1:
        raise ValueError(f"state has num_replicas={saved}; {fix}")
    start = as_int(state["start_index"], "state['start_index']", fix)
    saved_len = ratio * per_rank(length, 0, saved, drop_last)
    if not 0 <= start <= saved_len:
        raise ValueError(
            f"state['start_index'] must be in [0, {saved_len}] for {saved} ranks, got {start}; "
            "pass this rank's consumed indices in the pass"
        )
    point = global_point(length, saved, drop_last, ratio, parse_origin(state, ratio, length), start)
    start, origin = local_point(length, replicas, drop_last, ratio, *point)
    adapted = {key: copy.deepcopy(value) for key, value in state.items() if key != "origin"}
    adapted.update(num_replicas=replicas, start_index=start)
    if origin != (0, 0):
        adapted["origin"] = list(origin)
    return adapted


def adapt_loader_state(state: Mapping[str, Any], loader: Any) -> dict[str, Any]:
    """Re-express a ``DataLoaderX.state_dict()`` saved on another number of ranks for ``loader``.

    The saving run's ranks each consumed ``batches_consumed`` batches, of the same global batch
    size as ``loader``'s run (``batch_size * num_replicas``), so the job consumed that many global
    batches of the pass; the returned state makes this rank's loader go on from there, every
    remaining sample of the pass once across the new ranks. Use it on every rank, with the one
    checkpointed state (the ranks' sampler positions are identical). On another number of ranks
    the loader's seeded generators keep their current state (the saved ones were one rank's).

    Args:
        state: ``DataLoaderX.state_dict()`` of a loader over a ``fastdata.DistributedSampler``,
            saved on any number of ranks.
        loader: this rank's ``DataLoaderX``, built with ``batch_size=`` and this run's
            ``DistributedSampler`` (same dataset, seed, ratio, shuffle, drop_last and blocks).

    Returns:
        A state for ``loader.load_state_dict`` (the same position if the world did not change).

    Raises:
        TypeError: ``loader``'s sampler cannot adapt a state, or ``state`` is not a mapping.
        ValueError: ``state`` is not such a state, ``loader`` has no ``batch_size``, the global batch
            size is not a multiple of the saving world size, or the sampler refuses the state.
    """
    sampler: Any = getattr(loader, "sampler", None)  # a fastdata.DistributedSampler, checked below
    if not callable(getattr(sampler, "adapt_state", None)):
        raise TypeError(f"loader must sample with fastdata.DistributedSampler, it has {type(sampler).__name__}")
    batch_size = getattr(loader, "batch_size", None)
    if not isinstance(batch_size, int):
        raise ValueError("loader must be built with batch_size= (not batch_sampler=) to adapt a state to it")
    if not isinstance(state, Mapping):
        raise TypeError(f"state must be a dict from DataLoaderX.state_dict(), got {type(state).__name__}")
    saved = state.get("sampler")
    if (
        any(key not in state for key in ("in_pass", "batches_consumed"))
        or not isinstance(saved, Mapping)
        or any(key not in saved for key in ("num_replicas", "start_index"))
    ):
        raise ValueError("state must be a DataLoaderX.state_dict() taken with a fastdata.DistributedSampler")
    saved_world = as_int(saved["num_replicas"], "state['sampler']['num_replicas']")
    global_batch = batch_size * sampler.num_replicas
    if saved_world < 1 or global_batch % saved_world:
        raise ValueError(
            f"the global batch of {global_batch} (batch_size={batch_size} x {sampler.num_replicas} ranks) is not a "
            f"multiple of the {saved_world} ranks that saved the state; keep the global batch size when changing "
            "the number of ranks"
        )
    advanced = dict(saved)
    if state["in_pass"]:
        consumed = as_int(state["batches_consumed"], "state['batches_consumed']")
        saved_len = sampler.ratio * per_rank(len(sampler.dataset), 0, saved_world, sampler.drop_last)
        start = as_int(saved["start_index"], "state['sampler']['start_index']")
        advanced["start_index"] = min(start + consumed * (global_batch // saved_world), saved_len)
    adapted = copy.deepcopy(dict(state))
    adapted.update(num_batches=len(loader), batches_consumed=0, sampler=sampler.adapt_state(advanced))
    if saved_world != sampler.num_replicas:  # keep this rank's own generators (e.g. seeded per rank)
        own = loader.state_dict()
        adapted.update(rng_pass_start=own["rng_pass_start"], rng_sampler_draw=own["rng_sampler_draw"])
    return adapted


def as_int(value: Any, name: str, fix: str = "pass a DataLoaderX.state_dict()") -> int:
    """Return ``value`` as an ``int``, accepting numpy integers but not bools or floats (TypeError naming ``fix``)."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got the bool {value!r}; {fix}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}; {fix}") from None
