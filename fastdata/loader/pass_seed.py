"""``shuffle=True`` without a ``generator``: one seed per pass, drawn from torch's global RNG and recorded.

torch's ``RandomSampler(generator=None)`` draws one int64 from the global RNG when a pass begins and
shuffles with a fresh generator seeded with it. :class:`~fastdata.DataLoaderX` makes that draw itself, at
the same moment (right after the iterator's base seed, where the sampler would have drawn), gives the pass a
shallow copy of the sampler whose ``generator`` is seeded with it, and records the seed: the order is the
one torch's ``DataLoader`` gives, the global RNG advances as it does with torch, and ``state_dict()``
resumes the pass from the recorded seed. A resumed pass still draws (and discards) its seed, so every
``iter()`` takes from the global RNG what torch's takes and the passes after it see the same global RNG.

The same holds for ``SubsetRandomSampler`` and ``WeightedRandomSampler`` without a generator (their order
then comes from the pass seed rather than straight from the global RNG). Subclasses that override
``__iter__`` are not touched: fastdata cannot know what they draw.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch.utils.data import BatchSampler, RandomSampler, SubsetRandomSampler, WeightedRandomSampler

__all__ = ["draw_seed", "needs_pass_seed", "seeded_index_sampler"]

_SEEDABLE = (RandomSampler, SubsetRandomSampler, WeightedRandomSampler)


def needs_pass_seed(source: Any) -> bool:
    """Whether ``source`` is one of torch's random samplers drawing from the global RNG (``generator=None``)."""
    if not isinstance(source, _SEEDABLE) or getattr(source, "generator", False) is not None:
        return False
    return any(type(source).__iter__ is cls.__iter__ for cls in _SEEDABLE)


def draw_seed() -> int:
    """One int64 from torch's global RNG, drawn exactly as ``RandomSampler`` draws its seed."""
    return int(torch.empty((), dtype=torch.int64).random_().item())


def seeded_index_sampler(index_sampler: Any, source: Any, generator: torch.Generator) -> Any:
    """The loader's index sampler for one pass, its order source drawing from ``generator``.

    Args:
        index_sampler: what the loader iterates (a ``BatchSampler`` over ``source``, or ``source`` itself).
        source: the random sampler (see :func:`needs_pass_seed`); it is not modified.
        generator: the pass's generator, seeded when the pass draws (:func:`draw_seed`).
    """
    seeded = copy.copy(source)
    seeded.generator = generator
    if index_sampler is source:
        return seeded
    if not isinstance(index_sampler, BatchSampler) or index_sampler.sampler is not source:
        raise TypeError(
            f"cannot seed the pass of {type(index_sampler).__name__}: its order source is not {type(source).__name__}"
        )
    batches = copy.copy(index_sampler)
    batches.sampler = seeded
    return batches
