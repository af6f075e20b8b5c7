"""``DataLoaderX``: torch's ``DataLoader`` with a background thread, clean shutdown and exact resume.

Iterating the loader runs torch's iterator in a background thread (a stoppable
``prefetch_generator.BackgroundGenerator``) that keeps up to ``max_prefetch`` batches ready.

Resume: :meth:`DataLoaderX.state_dict` records the batches the *training loop* consumed in the
current pass and what decides the pass's index order (the sampler's ``state_dict()``, the state
of the seeded ``torch.Generator`` objects, snapshotted before torch draws from them). After
:meth:`DataLoaderX.load_state_dict` the next ``iter()`` yields exactly the batches an
uninterrupted run would have yielded next; the consumed batches are skipped at the index level,
so their samples are never loaded.
"""

from __future__ import annotations

import base64
import copy
import inspect
import logging
import queue
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch
from prefetch_generator import BackgroundGenerator
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset, Sampler, SequentialSampler
from torch.utils.data.distributed import DistributedSampler as _TorchDistributedSampler

__all__ = ["DataLoaderX"]

logger = logging.getLogger(__name__)

_TORCH_PARAMS = inspect.signature(DataLoader.__init__).parameters
_STATE_VERSION = 1
_STATE_KEYS = ("version", "num_batches", "in_pass", "batches_consumed", "rng_pass_start", "rng_sampler_draw", "sampler")
_POLL_S = 0.05  # how often a blocked producer re-checks its stop flag
_MIN_JOIN_S = 30.0  # how long close() waits for the producer before giving up with a warning
_END = object()


class _StoppableBackgroundGenerator(BackgroundGenerator):
    """A ``BackgroundGenerator`` whose producer can be stopped and never blocks forever on a full queue.

    Any exception of the producer (``BaseException`` included) is put in the queue and re-raised
    by ``next()`` as the same object, so the consumer sees the original type and traceback.
    """

    def __init__(self, generator: Iterator[Any], max_prefetch: int) -> None:
        self._stop_event = threading.Event()  # set before super().__init__, which starts the thread
        super().__init__(generator, max_prefetch=max_prefetch)

    def run(self) -> None:
        try:
            for item in self.generator:
                if not self._put((True, item)) or self._stop_event.is_set():
                    return
            self._put((False, StopIteration))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, who re-raises it
            self._put((False, exc))
        finally:
            self.generator = None  # drop the torch iterator as soon as we are done with it

    def _put(self, item: tuple[bool, Any]) -> bool:
        while not self._stop_event.is_set():
            try:
                self.queue.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def stop(self, timeout: float) -> bool:
        """Stop the producer, drain the queue and join; return whether the thread has ended."""
        self._stop_event.set()
        if threading.current_thread() is self:
            return False
        for _ in range(int(timeout / _POLL_S)):
            self._drain()  # unblocks a producer waiting on a full queue
            self.join(_POLL_S)
            if not self.is_alive():
                break
        self._drain()
        if self.is_alive():
            logger.warning("DataLoaderX: the prefetch thread did not stop within %.0f s (a worker may hang)", timeout)
            return False
        return True

    def _drain(self) -> None:
        try:
            while True:
                self.queue.get_nowait()
        except queue.Empty:
            pass


class _PassState:
    """What one pass needs for ``state_dict``: the order snapshot, skip and batches consumed."""

    def __init__(self, rngs: dict[str, torch.Generator], sampler_state: Any, skip: int, index_skip: int,
                 planned_draw: dict[str, str] | None) -> None:
        self.rngs = rngs
        self.rng_start = _get_rng_states(rngs)
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
        """Called right before the sampler first draws: apply the planned RNG states, record them."""
        with self._lock:
            if self.rng_draw is None:
                if self._planned_draw is not None:
                    _set_rng_states(self.rngs, self._planned_draw)
                self.rng_draw = _get_rng_states(self.rngs)

    def index_iter(self, inner: Iterable[Any]) -> Iterator[Any]:
        gen = _skip_batches(inner, self)
        self._index_iters.append(gen)
        return gen

    def close_index_iters(self) -> None:
        """Close the index generators (and so the sampler's): its "pass in progress" ends now."""
        for gen in self._index_iters:
            try:
                gen.close()
            except Exception:  # noqa: BLE001 - a sampler's cleanup must not break shutdown
                logger.exception("DataLoaderX: closing the sampler's iterator failed")
        self._index_iters.clear()


def _skip_batches(inner: Iterable[Any], pass_state: _PassState) -> Iterator[Any]:
    pass_state.at_draw_point()
    it = iter(inner)
    for _ in range(pass_state.index_skip):
        if next(it, _END) is _END:
            return
    yield from it


class _PassIndexSampler:
    """The loader's index sampler, seen through the pass being set up (skip + RNG snapshot)."""

    def __init__(self, loader: DataLoaderX) -> None:
        self._loader = weakref.ref(loader)

    def __len__(self) -> int:
        return len(DataLoader._index_sampler.fget(self._loader()))

    def __iter__(self) -> Iterator[Any]:
        loader = self._loader()
        if loader is None:
            return iter(())
        inner = DataLoader._index_sampler.fget(loader)
        pass_state = loader._setup_pass
        return iter(inner) if pass_state is None else pass_state.index_iter(inner)


class _LoaderIter:
    """The iterator of a :class:`DataLoaderX` pass; ``close()`` stops everything it started."""

    def __init__(self, torch_iter: Iterator[Any], pass_state: _PassState, *, max_prefetch: int,
                 owns_workers: bool, join_timeout: float) -> None:
        self._pass = pass_state
        self._torch_iter = torch_iter
        self._owns_workers = [owns_workers]  # a persistent loader that dies first hands its workers over
        bg = _StoppableBackgroundGenerator(torch_iter, max_prefetch)
        bg.name = f"DataLoaderX-prefetch-{bg.ident}"
        # The finalizer holds no reference to self: it runs on close(), on garbage collection and at exit.
        self._finalizer = weakref.finalize(self, _shutdown, bg, torch_iter, self._owns_workers, pass_state,
                                           join_timeout)
        self._bg = bg

    def __iter__(self) -> _LoaderIter:
        return self

    def __len__(self) -> int:
        """Batches this iterator yields in all (fewer than ``len(loader)`` in a resumed pass)."""
        return max(len(self._torch_iter) - self._pass.skip, 0)

    def __next__(self) -> Any:
        if not self._finalizer.alive:
            raise StopIteration
        try:
            batch = next(self._bg)
        except StopIteration:
            self._pass.finished = True
            self.close()
            raise
        except BaseException:
            self.close()
            raise
        self._pass.consumed += 1
        return batch

    def close(self) -> None:
        """Stop the background thread, drain its queue and shut non-persistent workers down."""
        self._finalizer()

    def __del__(self) -> None:
        finalizer = getattr(self, "_finalizer", None)  # absent if __init__ failed
        if finalizer is not None:
            finalizer()


def _shutdown(bg: _StoppableBackgroundGenerator, torch_iter: Any, owns_workers: list[bool], pass_state: _PassState,
              timeout: float) -> None:
    if not bg.stop(timeout):
        return  # the producer still runs inside torch's iterator; torch's own __del__ cleans up later
    pass_state.close_index_iters()
    shutdown_workers = getattr(torch_iter, "_shutdown_workers", None)
    if owns_workers[0] and shutdown_workers is not None:
        shutdown_workers()


def _close_all(iterators: weakref.WeakSet[_LoaderIter]) -> None:
    for it in list(iterators):
        it.close()


def _shutdown_persistent(active: weakref.WeakSet[_LoaderIter], torch_iter: Any) -> None:
    """The loader is gone: its persistent workers go now, or with the iterator still running on them."""
    for it in list(active):
        if it._finalizer.alive:
            it._owns_workers[0] = True
            return
    torch_iter._shutdown_workers()


class DataLoaderX(DataLoader):
    """Drop-in :class:`torch.utils.data.DataLoader` with a background thread and exact mid-pass resume.

    Same arguments, order and defaults as torch's ``DataLoader`` except:

    Args:
        pin_memory: ``None`` (default) pins when CUDA is available.
        persistent_workers: ``None`` (default) keeps workers alive across passes when
            ``num_workers > 0``.
        max_prefetch: Batches the background thread keeps ready (>= 1).

    Breaking out of a loop, an exception, ``del`` of the iterator or garbage collection stops the
    thread and shuts non-persistent workers down (call ``iterator.close()`` to do it at once).
    Exceptions (a worker's included) reach the training loop as the original exception object.

    Resume: :meth:`state_dict` counts the batches the training loop received in the latest pass
    (a pass left early by ``break`` still counts as in progress; the next ``iter()`` starts a new
    one). It needs a reproducible order: a sampler with ``state_dict()`` (``fastdata.DistributedSampler``),
    a seeded ``generator`` for shuffling, or a sequential order.

    Raises:
        TypeError: ``max_prefetch`` is not an int.
        ValueError: ``max_prefetch < 1``, or an argument torch rejects.

    Example::

        >>> loader = DataLoaderX(dataset, batch_size=256, shuffle=True, num_workers=8,
        ...                      collate_fn=fast_collate, generator=torch.Generator().manual_seed(0))
        >>> for step, (images, labels) in enumerate(loader):
        ...     if step == 100:
        ...         torch.save({"loader": loader.state_dict()}, "ckpt.pt")
        >>> loader.load_state_dict(torch.load("ckpt.pt")["loader"])  # next iter() starts at batch 101 (0-based)
    """

    def __init__(
        self,
        dataset: Dataset[Any],
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Sampler | Iterable | None = None,
        batch_sampler: Sampler[list] | Iterable[list] | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[list], Any] | None = None,
        pin_memory: bool | None = None,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context=None,
        generator=None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool | None = None,
        pin_memory_device: str = "",
        in_order: bool = True,
        max_prefetch: int = 4,
    ) -> None:
        if isinstance(max_prefetch, bool) or not isinstance(max_prefetch, int):
            raise TypeError(f"max_prefetch must be an int >= 1, got {max_prefetch!r}; e.g. max_prefetch=4")
        if max_prefetch < 1:
            raise ValueError(f"max_prefetch must be >= 1, got {max_prefetch}; e.g. max_prefetch=4")
        self.max_prefetch = max_prefetch
        self._setup_pass: _PassState | None = None  # the pass whose torch iterator is being built
        self._pass: _PassState | None = None  # the latest pass
        self._pending: dict[str, Any] | None = None  # a loaded state, applied by the next iter()
        self._active: weakref.WeakSet[_LoaderIter] = weakref.WeakSet()  # the latest pass's iterator
        self._workers_finalizer: weakref.finalize | None = None
        self._pass_index_sampler = _PassIndexSampler(self)
        if pin_memory is None:
            pin_memory = torch.cuda.is_available()
        if persistent_workers is None:
            persistent_workers = isinstance(num_workers, int) and num_workers > 0
        keywords = {"prefetch_factor": prefetch_factor, "persistent_workers": persistent_workers,
                    "pin_memory_device": pin_memory_device, "in_order": in_order}
        for name in [n for n in keywords if n not in _TORCH_PARAMS]:  # an older torch
            if keywords.pop(name) != inspect.signature(DataLoaderX.__init__).parameters[name].default:
                raise ValueError(f"{name} needs a newer torch than {torch.__version__}; leave it at its default")
        super().__init__(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory,
                         drop_last, timeout, worker_init_fn, multiprocessing_context, generator, **keywords)

    @property
    def _index_sampler(self) -> Any:
        return self._pass_index_sampler

    def __iter__(self) -> _LoaderIter:
        persistent = bool(self.persistent_workers) and self.num_workers > 0
        if persistent:
            _close_all(self._active)  # torch resets the one persistent iterator: our thread must be off it
        pass_state = self._begin_pass()
        self._setup_pass = pass_state
        try:
            torch_iter = super().__iter__()
        finally:
            self._setup_pass = None
        pass_state.at_draw_point()  # without workers the sampler has not drawn yet: do it here
        self._pending = None
        self._pass = pass_state
        it = _LoaderIter(
            torch_iter, pass_state, max_prefetch=self.max_prefetch, owns_workers=not persistent,
            join_timeout=max(_MIN_JOIN_S, 2.0 * self.timeout),
        )
        self._active.clear()
        self._active.add(it)
        if persistent and self._workers_finalizer is None and self._iterator is not None:
            # Shut persistent workers down when the loader goes away, while torch's queues are intact
            # (torch's own __del__ may only run later, from a garbage-collected cycle, and then hang).
            self._workers_finalizer = weakref.finalize(self, _shutdown_persistent, self._active, self._iterator)
        return it

    def _begin_pass(self) -> _PassState:
        """Restore a loaded state (if any) and snapshot the order of the pass about to start."""
        rngs = self._rng_slots()
        source = self._order_source()
        plan = self._pending
        if plan is None:
            return _PassState(rngs, _snapshot_sampler(source), 0, 0, None)
        _set_rng_states(rngs, plan["rng_pass_start"])
        skip = plan["batches_consumed"] if plan["in_pass"] else 0
        sampler_state, index_skip = plan["sampler"], skip
        if plan["in_pass"] and sampler_state is not None:
            to_load, index_skip = self._fast_forward(source, sampler_state, skip)
            _restore_sampler(source, to_load)
        elif sampler_state is not None:
            sampler_state = _snapshot_sampler(source)
        return _PassState(rngs, sampler_state, skip, index_skip, plan["rng_sampler_draw"])

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

    def _check_resumable(self) -> None:
        """Raise ValueError when the index order of this setup cannot be restored exactly."""
        if isinstance(self.dataset, IterableDataset):
            raise ValueError("DataLoaderX.state_dict() needs a map-style dataset; an IterableDataset decides its "
                             "own order and cannot be resumed by the loader (use a map-style dataset)")
        source = self._order_source()
        if _has_state_methods(source) or isinstance(source, (SequentialSampler, _TorchDistributedSampler,
                                                             range, list, tuple)):
            return
        own = getattr(source, "generator", _END)
        if isinstance(own, torch.Generator):
            return
        if own is None:
            raise ValueError(
                f"cannot resume exactly: the {type(source).__name__} has generator=None, so it draws from torch's "
                "global RNG; pass generator=torch.Generator().manual_seed(seed) to DataLoaderX (with shuffle=True) "
                "or to the sampler")
        raise ValueError(
            f"cannot resume exactly: {type(source).__name__} has neither state_dict()/load_state_dict() nor a "
            "torch.Generator; add those two methods to it, or use fastdata.DistributedSampler, SequentialSampler "
            "or RandomSampler(generator=torch.Generator().manual_seed(seed))")

    def state_dict(self) -> dict[str, Any]:
        """Where the loader stands: batches consumed in the current pass plus its order snapshot.

        Returns:
            A dict of plain Python values (JSON-able when the sampler's state is), also
            ``torch.save``-able. Taken between passes it describes the start of the next pass.

        Raises:
            ValueError: The setup cannot be resumed exactly (an IterableDataset, a sampler drawing
                from the global RNG, e.g. ``shuffle=True`` without ``generator``, or a sampler
                without ``state_dict``/``generator``).
        """
        self._check_resumable()
        if self._pending is not None:
            return copy.deepcopy(self._pending)
        p = self._pass
        if p is not None and not p.finished:
            return {"version": _STATE_VERSION, "num_batches": len(self), "in_pass": True,
                    "batches_consumed": p.skip + p.consumed, "rng_pass_start": dict(p.rng_start),
                    "rng_sampler_draw": dict(p.rng_draw or p.rng_start), "sampler": copy.deepcopy(p.sampler_state)}
        rngs = self._rng_slots()
        now = _get_rng_states(rngs)
        draw = dict(now)
        persistent_alive = self.persistent_workers and self.num_workers > 0 and self._iterator is not None
        if "loader" in rngs and not persistent_alive:  # a new torch iterator first draws its _base_seed
            draw["loader"] = _after_base_seed(rngs["loader"])
        return {"version": _STATE_VERSION, "num_batches": len(self), "in_pass": False, "batches_consumed": 0,
                "rng_pass_start": now, "rng_sampler_draw": draw, "sampler": _snapshot_sampler(self._order_source())}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Make the next ``iter()`` continue where ``state`` was taken (see :meth:`state_dict`).

        Args:
            state: A dict from :meth:`state_dict` of a loader built the same way (dataset size,
                batch size, sampler, generators).

        Raises:
            TypeError: ``state`` is not a mapping.
            ValueError: ``state`` is malformed or was taken from a differently built loader, or
                this setup cannot be resumed exactly.
        """
        if not isinstance(state, Mapping):
            raise TypeError(f"state must be a dict from DataLoaderX.state_dict(), got {type(state).__name__}")
        self._check_resumable()
        state = copy.deepcopy(dict(state))
        _validate_state(state, len(self), set(self._rng_slots()), _snapshot_sampler(self._order_source()))
        if state["sampler"] is not None:  # now (it validates, and precedes the user's set_epoch())
            _restore_sampler(self._order_source(), state["sampler"])  # and again at iter() if in a pass
        self._pending = state


def _validate_state(state: dict[str, Any], num_batches: int, slots: set[str], sampler_now: Any) -> None:
    missing = [k for k in _STATE_KEYS if k not in state]
    if missing:
        raise ValueError(f"state is missing {missing}; pass a dict returned by DataLoaderX.state_dict()")
    if state["version"] != _STATE_VERSION:
        raise ValueError(f"state has version={state['version']!r}, this fastdata reads version {_STATE_VERSION}")
    if state["num_batches"] != num_batches:
        raise ValueError(f"state was taken from a loader with {state['num_batches']} batches per pass, this one has "
                         f"{num_batches}; build it with the same dataset, batch_size, drop_last and sampler")
    consumed = state["batches_consumed"]
    if isinstance(consumed, bool) or not isinstance(consumed, int) or not 0 <= consumed <= num_batches:
        raise ValueError(f"state has batches_consumed={consumed!r}; expected an int in [0, {num_batches}]")
    for key in ("rng_pass_start", "rng_sampler_draw"):
        if set(state[key]) != slots:
            raise ValueError(f"state has seeded generators {sorted(state[key])} but this loader has {sorted(slots)}; "
                             "pass the same generator= arguments (to DataLoaderX and the sampler) as when it was saved")
    if (state["sampler"] is None) != (sampler_now is None):
        raise ValueError("state and loader disagree on whether the sampler has a state_dict(); "
                         "build the loader with the same sampler type as when the state was saved")


def _has_state_methods(obj: Any) -> bool:
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


def _snapshot_sampler(source: Any) -> Any:
    if _has_state_methods(source):
        return copy.deepcopy(source.state_dict())
    if isinstance(source, _TorchDistributedSampler):
        return {"epoch": source.epoch}
    return None


def _restore_sampler(source: Any, state: Any) -> None:
    if _has_state_methods(source):
        source.load_state_dict(copy.deepcopy(state))
    elif isinstance(source, _TorchDistributedSampler):
        source.set_epoch(state["epoch"])


def _get_rng_states(rngs: dict[str, torch.Generator]) -> dict[str, str]:
    return {name: base64.b64encode(g.get_state().numpy().tobytes()).decode("ascii") for name, g in rngs.items()}


def _set_rng_states(rngs: dict[str, torch.Generator], states: Mapping[str, str]) -> None:
    for name, g in rngs.items():
        g.set_state(torch.frombuffer(bytearray(base64.b64decode(states[name])), dtype=torch.uint8))


def _after_base_seed(generator: torch.Generator) -> str:
    """The state of ``generator`` after torch's ``_BaseDataLoaderIter`` draws its ``_base_seed``."""
    clone = torch.Generator(device=generator.device)
    clone.set_state(generator.get_state())
    torch.empty((), dtype=torch.int64).random_(generator=clone)
    return _get_rng_states({"g": clone})["g"]
