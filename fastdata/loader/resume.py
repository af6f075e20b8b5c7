"""Exact mid-pass resume for ``DataLoaderX``: the per-pass state and the ``state_dict`` format.

A pass is decided by the sampler's state and the seeded ``torch.Generator`` objects, snapshotted
before torch draws from them; resuming skips the consumed batches at the index level. The same
snapshot keys the pass for reproducible augmentation (:func:`pass_key_for`): indices are handed out
as :class:`fastdata.sampler.seeding.SampleIndex` with their position counted from the pass's start, skipped
batches included. ``pass_number`` (optional in a state, for states saved before it existed) counts
the loader's passes.
"""

from __future__ import annotations

import base64
import copy
import logging
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
from torch.utils.data.distributed import DistributedSampler as _TorchDistributedSampler

from fastdata.loader.pass_seed import draw_seed
from fastdata.sampler.seeding import derive_pass_key, keyed_indices

__all__ = [
    "STATE_KEYS",
    "STATE_VERSION",
    "PassState",
    "after_base_seed",
    "encode_state",
    "get_rng_states",
    "has_state_methods",
    "pass_key_for",
    "restore_sampler",
    "set_rng_states",
    "snapshot_sampler",
    "validate_state",
]

logger = logging.getLogger(__name__)

STATE_VERSION = 1
STATE_KEYS = ("version", "num_batches", "in_pass", "batches_consumed", "rng_pass_start", "rng_sampler_draw", "sampler")
_END = object()


class PassState:
    """What one pass needs for ``state_dict``: the order snapshot, skip and batches consumed.

    ``number`` counts the loader's passes; ``pass_key`` (None: indices stay plain ints) and
    ``position_base`` (where the first index the sampler yields stands in the pass) key each index
    for reproducible augmentation (:mod:`fastdata.sampler.seeding`); with ``keyed`` the key is derived at
    the draw point. ``seed_generator`` is the pass's own generator for a sampler that would draw from the
    global RNG (:mod:`fastdata.loader.pass_seed`): seeded at the draw point with a fresh seed, or with
    ``planned_seed`` when the pass is resumed; ``sampler_seed`` is the seed it got.
    """

    def __init__(
        self,
        rngs: dict[str, torch.Generator],
        sampler_state: Any,
        skip: int,
        index_skip: int,
        planned_draw: dict[str, str] | None,
        *,
        number: int = 0,
        pass_key: int | None = None,
        position_base: int = 0,
        batched: bool = True,
        seed_generator: torch.Generator | None = None,
        planned_seed: int | None = None,
    ) -> None:
        self.number = number
        self.pass_key = pass_key
        self.keyed = False
        self.index_sampler: Any = None  # the loader's index sampler for this pass, when it differs (a seeded copy)
        self.seed_generator = seed_generator
        self.sampler_seed: int | None = None
        self._planned_seed = planned_seed
        self.position_base = position_base
        self.batched = batched
        self.rngs = rngs
        self.rng_start = get_rng_states(rngs)
        self.rng_draw: dict[str, str] | None = None
        self.sampler_state = sampler_state
        self.skip = skip  # batches of this pass consumed before it started (a resume)
        self.index_skip = index_skip  # of those, how many the index wrapper drops itself
        self.consumed = 0  # batches handed to the training loop by this pass's iterator
        self.finished = False
        self._planned_draw = planned_draw
        self._lock = threading.Lock()
        self._index_iters: list[Any] = []

    def at_draw_point(self) -> None:
        """Called right before the sampler first draws: apply the planned RNG states, record them, seed the pass."""
        with self._lock:
            if self.rng_draw is not None:
                return
            if self._planned_draw is not None:
                set_rng_states(self.rngs, self._planned_draw)
            self.rng_draw = get_rng_states(self.rngs)
            if self.seed_generator is not None:
                drawn = draw_seed()  # drawn even when resuming: the global RNG advances as with torch
                self.sampler_seed = drawn if self._planned_seed is None else self._planned_seed
                self.seed_generator.manual_seed(self.sampler_seed)
            if self.keyed:
                try:
                    self.pass_key = pass_key_for(self.rng_start, self.sampler_state, self.number, self.sampler_seed)
                except TypeError as exc:  # a sampler state that is not plain data: augmentation draws as before
                    logger.warning("DataLoaderX: no reproducible augmentation for this loader (%s)", exc)

    def index_iter(self, inner: Iterable[Any]) -> Iterator[Any]:
        """``inner`` (the sampler's iterator) with the batches this pass resumes past skipped."""
        gen = _skip_batches(inner, self)
        self._index_iters.append(gen)
        return gen

    def track(self, it: Iterator[Any]) -> None:
        """Close ``it`` (a generator wrapping the index iterator) with the index iterators."""
        self._index_iters.append(it)

    def close_index_iters(self) -> None:
        """Close the index generators (and so the sampler's): its "pass in progress" ends now."""
        for gen in self._index_iters:
            try:
                gen.close()
            except Exception:  # noqa: BLE001 - a sampler's cleanup must not break shutdown
                logger.exception("DataLoaderX: closing the sampler's iterator failed")
        self._index_iters.clear()


def _skip_batches(inner: Iterable[Any], pass_state: PassState) -> Iterator[Any]:
    pass_state.at_draw_point()
    if pass_state.pass_key is not None:
        yield from keyed_indices(
            inner, pass_state.pass_key, pass_state.position_base, batched=pass_state.batched, skip=pass_state.index_skip
        )
        return
    it = iter(inner)
    for _ in range(pass_state.index_skip):
        if next(it, _END) is _END:
            return
    yield from it


def validate_state(
    state: dict[str, Any], num_batches: int | None, slots: set[str], sampler_now: Any, seeded: bool
) -> None:
    """Raise ValueError unless ``state`` is a well-formed state of a loader built like this one.

    ``seeded``: this loader's passes are seeded from the global RNG (:mod:`fastdata.loader.pass_seed`). A state
    with ``exact=False`` resumes at a pass boundary, so only what that needs is checked.
    """
    missing = [k for k in STATE_KEYS if k not in state]
    if missing:
        raise ValueError(f"state is missing {missing}; pass a dict returned by DataLoaderX.state_dict()")
    if state["version"] != STATE_VERSION:
        raise ValueError(f"state has version={state['version']!r}, this fastdata reads version {STATE_VERSION}")
    exact = state.get("exact", True)  # optional: states saved before it was recorded are exact
    if not isinstance(exact, bool):
        raise ValueError(f"state has exact={exact!r}; expected True or False (from DataLoaderX.state_dict())")
    for key in ("rng_pass_start", "rng_sampler_draw"):
        if set(state[key]) != slots:
            raise ValueError(
                f"state has seeded generators {sorted(state[key])} but this loader has {sorted(slots)}; "
                "pass the same generator= arguments (to DataLoaderX and the sampler) as when it was saved"
            )
    number = state.get("pass_number", 0)  # optional: states saved before it was recorded have none
    if isinstance(number, bool) or not isinstance(number, int) or number < 0:
        raise ValueError(f"state has pass_number={number!r}; expected an int >= 0 (from DataLoaderX.state_dict())")
    if not exact:
        return
    if state["num_batches"] != num_batches:
        raise ValueError(
            f"state was taken from a loader with {state['num_batches']} batches per pass, this one has "
            f"{num_batches}; build it with the same dataset, batch_size, drop_last and sampler"
        )
    consumed = state["batches_consumed"]
    limit = num_batches if num_batches is not None else float("inf")  # a loader without len(): no upper bound
    if isinstance(consumed, bool) or not isinstance(consumed, int) or not 0 <= consumed <= limit:
        expected = f"an int in [0, {num_batches}]" if num_batches is not None else "an int >= 0"
        raise ValueError(f"state has batches_consumed={consumed!r}; expected {expected}")
    if (state["sampler"] is None) != (sampler_now is None):
        raise ValueError(
            "state and loader disagree on whether the sampler has a state_dict(); "
            "build the loader with the same sampler type as when the state was saved"
        )
    seed = state.get("sampler_seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ValueError(f"state has sampler_seed={seed!r}; expected an int or None (from DataLoaderX.state_dict())")
    if state["in_pass"] and (seed is not None) != seeded:
        has, does = ("has a", "does not seed") if seed is not None else ("has no", "seeds")
        raise ValueError(
            f"state {has} sampler_seed but this loader {does} its passes from torch's global RNG "
            "(shuffle=True without generator); build it with the same shuffle, sampler and generator"
        )


def has_state_methods(obj: Any) -> bool:
    """Whether ``obj`` has both ``state_dict()`` and ``load_state_dict()``."""
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


def snapshot_sampler(source: Any) -> Any:
    """A copy of ``source``'s resumable state (torch's DistributedSampler: its epoch and seed), or None."""
    if has_state_methods(source):
        return copy.deepcopy(source.state_dict())
    if isinstance(source, _TorchDistributedSampler):
        return {"epoch": source.epoch, "seed": source.seed}  # its order is a function of these two alone
    return None


def restore_sampler(source: Any, state: Any) -> None:
    """Put back a state taken by :func:`snapshot_sampler`."""
    if has_state_methods(source):
        source.load_state_dict(copy.deepcopy(state))
    elif isinstance(source, _TorchDistributedSampler):
        source.set_epoch(state["epoch"])


def pass_key_for(rng_states: dict[str, str], sampler_state: Any, number: int, sampler_seed: int | None = None) -> int:
    """The augmentation key of a pass (:mod:`fastdata.sampler.seeding`): a hash of what decides its order.

    That is the seeded generators' states and the sampler's state at the pass's start, both
    restored exactly by a resume (and the sampler's epoch alone suffices for fastdata's
    ``DistributedSampler``). A sampler that seeds itself (a state with a ``seed``: fastdata's and
    torch's ``DistributedSampler``) decides the pass alone, so the crops of a resumed or restarted
    run do not depend on the process's global torch seed. Otherwise, without seeded generators,
    torch's ``initial_seed()`` stands in for them (as torch's workers derive their seeds from it);
    when the order has no state at all (a ``SequentialSampler``), the loader's pass number tells
    passes apart. A pass seeded from the global RNG (``sampler_seed``, :mod:`fastdata.loader.pass_seed`) is
    decided by that seed, which a resume restores.
    """
    parts: dict[str, Any] = {"rngs": rng_states, "sampler": sampler_state}
    self_seeded = isinstance(sampler_state, Mapping) and "seed" in sampler_state
    if sampler_seed is not None:
        parts["sampler_seed"] = sampler_seed
    elif not rng_states and not self_seeded:
        parts["torch_initial_seed"] = torch.initial_seed()
        if sampler_state is None:
            parts["pass_number"] = number
    return derive_pass_key(parts)


def encode_state(state: torch.Tensor) -> str:
    """A generator state (``Generator.get_state()``) as a plain string."""
    return base64.b64encode(state.numpy().tobytes()).decode("ascii")


def get_rng_states(rngs: dict[str, torch.Generator]) -> dict[str, str]:
    """Each generator's state as text (base64), for a JSON-able ``state_dict``."""
    return {name: encode_state(g.get_state()) for name, g in rngs.items()}


def set_rng_states(rngs: dict[str, torch.Generator], states: Mapping[str, str]) -> None:
    """Restore the generators from :func:`get_rng_states`'s text."""
    for name, g in rngs.items():
        g.set_state(torch.frombuffer(bytearray(base64.b64decode(states[name])), dtype=torch.uint8))


def after_base_seed(generator: torch.Generator) -> str:
    """The state of ``generator`` after torch's ``_BaseDataLoaderIter`` draws its ``_base_seed``."""
    clone = torch.Generator(device=generator.device)
    clone.set_state(generator.get_state())
    torch.empty((), dtype=torch.int64).random_(generator=clone)
    return get_rng_states({"g": clone})["g"]
