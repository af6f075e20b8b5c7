"""Repeated augmentation (``DistributedSampler(..., repeats=k)``), as DeiT's and torchvision's ``RASampler``.

Each pass's world-independent order becomes its permutation with every index repeated ``k`` times in a row:
global position ``j`` takes ``order[(j mod k*N) // k]``. Rank ``r`` still takes positions ``r, r + world, ...``,
so the ``k`` copies of a sample sit at ``k`` consecutive positions and go to ``k`` different ranks (when
``k <= world``; a rank never sees a sample twice in a pass then), each augmented by its own rank. The number of
positions per pass is unchanged (``num_samples`` per rank, as without repeats), so a pass covers about ``1/k`` of
the distinct samples, each ``k`` times. Unlike ``RASampler``, the pass is not truncated to a multiple of 256
samples: with ``drop_last=False`` every rank reads ``ceil(N / world)`` indices per pass, with ``drop_last=True``
``floor(N / world)``, as without repeats. Resume (also on another number of ranks) works on positions, so it is
unaffected.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fastdata.sampler.elastic import as_int

__all__ = ["check_repeats", "check_state_repeats", "take_repeated"]


def check_repeats(repeats: object) -> int:
    """``repeats`` as an int >= 1, or a one-line error."""
    value = as_int(repeats, "repeats", "pass how many copies of each sample a pass holds, e.g. repeats=3")
    if value < 1:
        raise ValueError(f"repeats must be >= 1, got {value}; use repeats=1 for no repeated augmentation")
    return value


def check_state_repeats(state: Mapping[str, Any], repeats: int) -> None:
    """Refuse a state saved with another ``repeats`` (a state without the key was saved with 1)."""
    saved = state.get("repeats", 1)
    if saved != repeats:
        raise ValueError(
            f"state has repeats={saved!r} but this sampler has repeats={repeats}; construct the "
            "sampler with the same repeats as the one that saved the state"
        )


def take_repeated(order: np.ndarray, positions: np.ndarray, repeats: int) -> np.ndarray:
    """The indices at global ``positions`` of ``order``, each repeated.

    The indices at global ``positions`` of ``order`` with each entry repeated ``repeats`` times in a row
    (positions past the end wrap around, as torch pads a pass).
    """
    if len(order) == 0:
        return order[:0]
    return order[(positions % (len(order) * repeats)) // repeats]
