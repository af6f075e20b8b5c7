"""``DataLoaderX``: torch's ``DataLoader`` with a background thread, clean shutdown and exact resume.

Iterating the loader runs torch's iterator in a background thread (a stoppable
``prefetch_generator.BackgroundGenerator``) that keeps up to ``max_prefetch`` batches ready.

Resume: :meth:`DataLoaderX.state_dict` records the batches the *training loop* consumed in the
current pass and what decides the pass's index order (the sampler's ``state_dict()``, the state
of the seeded ``torch.Generator`` objects, snapshotted before torch draws from them, or the seed the
pass drew from the global RNG for ``shuffle=True`` without a generator). After
:meth:`DataLoaderX.load_state_dict` the next ``iter()`` yields exactly the batches an
uninterrupted run would have yielded next; the consumed batches are skipped at the index level,
so their samples are never loaded.

Augmentation: a dataset that asks for it (``wants_sample_index``) gets each index as a
:class:`fastdata.sampler.seeding.SampleIndex` (an int that also carries a key of its pass and its position in
the pass), from which ``ShardDataset`` seeds random decode-time transforms, so a batch's pixels depend neither
on ``num_workers`` nor on whether the run was resumed; any other dataset gets plain ints, as from torch.
"""

from __future__ import annotations

import inspect
import os
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, Sampler

from fastdata._util.stage_clock import charged
from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.decode.shared_ring import Releaser
from fastdata.loader.accelerate_hook import keep_for_accelerate
from fastdata.loader.background import LoaderIter, close_all, shutdown_persistent
from fastdata.loader.helper_process import HelperProcessIter
from fastdata.loader.loader_state import LoaderState
from fastdata.loader.lost_batches import watch_receives
from fastdata.loader.pass_seed import seeded_index_sampler
from fastdata.loader.resume import PassState, restore_sampler, set_rng_states, snapshot_sampler
from fastdata.loader.thread_workers import ThreadWorkersIter, check_worker_mode
from fastdata.loader.worker_errors import keep_worker_exception_types
from fastdata.loader.worker_init import WorkerInit
from fastdata.sampler.seeding import wants_sample_index
from fastdata.transforms.resolution import check_size, tag_batches

__all__ = ["DataLoaderX"]

_TORCH_PARAMS = inspect.signature(DataLoader.__init__).parameters
_MIN_JOIN_S = 30.0  # how long close() waits for the producer before giving up with a warning
T_co = TypeVar("T_co", covariant=True)  # what a batch is: DataLoaderX[T] annotates like torch's DataLoader[T]


def _torch_index_sampler(loader: DataLoaderX) -> Any:
    """Torch's own index sampler of ``loader`` (the ``_index_sampler`` property that DataLoaderX overrides)."""
    return super(DataLoaderX, loader)._index_sampler


class _PassIndexSampler:
    """The loader's index sampler, seen through the pass being set up (skip + RNG snapshot)."""

    def __init__(self, loader: DataLoaderX) -> None:
        self._loader = weakref.ref(loader)

    def __len__(self) -> int:
        loader = self._loader()
        if loader is None:  # the loader was garbage-collected: an empty sampler, as __iter__ says
            return 0
        return len(_torch_index_sampler(loader))

    def __iter__(self) -> Iterator[Any]:
        loader = self._loader()
        if loader is None:
            return iter(())
        pass_state = loader._setup_pass
        inner = getattr(pass_state, "index_sampler", None) or _torch_index_sampler(loader)
        it = iter(inner) if pass_state is None else pass_state.index_iter(inner)
        size = getattr(pass_state, "resolution", None)
        if (
            pass_state is not None
            and size is not None
            and loader._auto_collation
            and wants_sample_index(loader.dataset)
        ):
            # the workers decode this pass at the loader's resolution
            it = tag_batches(it, size)
            pass_state.track(it)
        if isinstance(loader.dataset, ShardDataset) and loader.dataset.remote:  # downloads in this pass's order
            in_flight = loader.num_workers * (loader.prefetch_factor or 2) if loader.num_workers > 0 else 1
            it = iter(loader.dataset.plan(it, lag=in_flight))
            if pass_state is not None:
                pass_state.track(it)
        return charged(it, "sampler", "fetch")  # `it` itself unless FASTDATA_BREAKDOWN is set (fastdata bench)


class DataLoaderX(LoaderState, DataLoader[T_co]):
    """Drop-in :class:`torch.utils.data.DataLoader` with a background thread and exact mid-pass resume.

    Same arguments, order and defaults as torch's ``DataLoader``, and the same batches, handed out by a background
    thread that keeps ``max_prefetch`` of them ready. :meth:`state_dict` / :meth:`load_state_dict` resume a pass
    at the next batch an uninterrupted run would have given; a dataset that asks for it (``ShardDataset``,
    ``MixedDataset``) gets indices that seed its random crops, so the pixels do not depend on ``num_workers`` or on
    a resume. :doc:`/concepts/loader` explains the thread, the shared-memory batches, shutdown, resume and seeding.

    Args:
        pin_memory: ``None`` (default) pins when CUDA is available.
        persistent_workers: ``False`` (torch's default): each ``iter()`` has its own workers, and two live
            iterators are independent. ``True`` keeps the workers across passes; they serve one pass at a
            time, so an ``iter()`` while an earlier iterator is unfinished ends that one (with a warning).
        max_prefetch: Batches the background thread keeps ready (>= 1).
        worker_mode: ``"process"`` (default): ``num_workers`` worker processes, as torch. ``"thread"``:
            ``num_workers`` threads of this process make whole batches, ``num_workers * prefetch_factor`` in
            flight, with the process mode's pixels, order and ``state_dict`` (a state loads in either mode);
            map-style datasets only, never persistent (threads start fast): :mod:`fastdata.loader.thread_workers`.
            ``"thread-process"``: those threads in one helper process, batches over shared memory, pinned here
            (:mod:`fastdata.loader.helper_process`): out of a GPU training loop's way, one process instead of many.

    Raises:
        TypeError: ``max_prefetch`` is not an int.
        ValueError: ``max_prefetch < 1``, an unknown ``worker_mode``, ``worker_mode="thread"`` with
            ``num_workers=0`` or an ``IterableDataset``, or an argument torch rejects.

    Example:
        >>> loader = DataLoaderX(dataset, batch_size=8, shuffle=True, num_workers=2,
        ...                      collate_fn=fast_collate, generator=torch.Generator().manual_seed(0))
        >>> for step, (images, labels) in enumerate(loader):
        ...     if step == 3:
        ...         torch.save({"loader": loader.state_dict()}, "ckpt.pt")
        >>> loader.load_state_dict(torch.load("ckpt.pt")["loader"])  # next iter() starts at batch 4 (0-based)
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
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        max_prefetch: int = 4,
        worker_mode: str = "process",
    ) -> None:
        if isinstance(max_prefetch, bool) or not isinstance(max_prefetch, int):
            raise TypeError(f"max_prefetch must be an int >= 1, got {max_prefetch!r}; e.g. max_prefetch=4")
        if max_prefetch < 1:
            raise ValueError(f"max_prefetch must be >= 1, got {max_prefetch}; e.g. max_prefetch=4")
        self.max_prefetch = max_prefetch
        self.worker_mode = check_worker_mode(worker_mode, num_workers, dataset)
        self._setup_pass: PassState | None = None  # the pass whose torch iterator is being built
        self._passes_begun = 0  # passes started so far (restored by load_state_dict)
        self._pass: PassState | None = None  # the latest pass
        self._pending: dict[str, Any] | None = None  # a loaded state, applied by the next iter()
        self._active: weakref.WeakSet[LoaderIter] = weakref.WeakSet()  # the latest pass's iterator
        self._workers_finalizer: weakref.finalize | None = None
        self._warned_shared = False  # an iter() ended an unfinished iterator (persistent workers): warned once
        self._pass_index_sampler = _PassIndexSampler(self)
        self._releaser = Releaser()  # hands the workers' batch buffers back once no batch uses them
        self._resolution: tuple[int, int] | None = None  # decode-time crop size of the next passes
        if pin_memory is None:
            pin_memory = torch.cuda.is_available()
        if persistent_workers is None:  # accepted for loaders built by older fastdata: torch's default
            persistent_workers = False
        keywords: dict[str, Any] = {
            "prefetch_factor": prefetch_factor,
            "persistent_workers": persistent_workers,
            "pin_memory_device": pin_memory_device,
            "in_order": in_order,
        }
        for name in [n for n in keywords if n not in _TORCH_PARAMS]:  # an older torch
            if keywords.pop(name) != inspect.signature(DataLoaderX.__init__).parameters[name].default:
                raise ValueError(f"{name} needs a newer torch than {torch.__version__}; leave it at its default")
        super().__init__(
            dataset,
            batch_size,
            shuffle,
            sampler,
            batch_sampler,
            num_workers,
            collate_fn,
            pin_memory,
            drop_last,
            timeout,
            worker_init_fn,
            multiprocessing_context,
            generator,
            **keywords,
        )

    def _get_iterator(self) -> Any:
        """Torch's iterator, its workers started with :class:`WorkerInit` around ``worker_init_fn`` (or threads)."""
        mode = getattr(self, "worker_mode", "process")  # loaders pickled before worker_mode: processes
        if mode != "process":
            return ThreadWorkersIter(self) if mode == "thread" else HelperProcessIter(self, self.max_prefetch)
        if self.num_workers == 0 or isinstance(self.worker_init_fn, WorkerInit):
            return super()._get_iterator()
        user = self.worker_init_fn
        self.worker_init_fn = WorkerInit(user)
        try:
            return super()._get_iterator()
        finally:
            self.worker_init_fn = user

    def check_worker_number_rationality(self) -> None:
        """Torch's warning when there are more worker processes than CPUs (none for threads)."""
        if getattr(self, "worker_mode", "process") == "process":
            super().check_worker_number_rationality()

    @property
    def _is_accelerate_prepared(self) -> bool:
        """Hugging Face Accelerate's "leave this loader alone" flag (see :mod:`fastdata.loader.accelerate_hook`)."""
        return keep_for_accelerate(self, self.__dict__.get("_accelerate_marked", False))

    @_is_accelerate_prepared.setter
    def _is_accelerate_prepared(self, value: bool) -> None:
        self.__dict__["_accelerate_marked"] = bool(value)

    @property
    def _index_sampler(self) -> Any:
        return self._pass_index_sampler

    def __iter__(self) -> LoaderIter:  # type: ignore[override]  # LoaderIter wraps torch's iterator, not a subclass
        mode = getattr(self, "worker_mode", "process")
        threads = mode != "process"
        persistent = bool(self.persistent_workers) and self.num_workers > 0 and not threads
        # torch resets the one persistent iterator: our thread must be off it
        if persistent and close_all(self._active) and not self._warned_shared:
            self._warned_shared = True
            warnings.warn(
                "DataLoaderX: iter() while an earlier iterator of this loader is unfinished ends that "
                "iterator: with persistent_workers=True the workers serve one pass at a time; "
                "use persistent_workers=False for independent iterators",
                UserWarning,
                stacklevel=2,
            )
        pass_state = self._begin_pass()
        self._setup_pass = pass_state
        try:
            torch_iter = self._get_iterator() if threads else super().__iter__()
            keep_worker_exception_types(torch_iter)
            watch_receives(torch_iter)
        finally:
            self._setup_pass = None
        pass_state.at_draw_point()  # without workers the sampler has not drawn yet: do it here
        self._pending = None
        self._pass = pass_state
        it = LoaderIter(
            torch_iter,
            pass_state,
            max_prefetch=self.max_prefetch,
            owns_workers=not persistent,
            join_timeout=max(_MIN_JOIN_S, 2.0 * self.timeout),
            releaser=self._releaser if self.num_workers and mode != "thread" else None,
        )
        self._active.clear()
        self._active.add(it)
        if persistent and self._workers_finalizer is None and self._iterator is not None:
            # Shut persistent workers down when the loader goes away, while torch's queues are intact
            # (torch's own __del__ may only run later, from a garbage-collected cycle, and then hang).
            self._workers_finalizer = weakref.finalize(
                self, shutdown_persistent, self._active, self._iterator, os.getpid()
            )
        return it

    def _begin_pass(self) -> PassState:
        """Restore a loaded state (if any) and snapshot the order of the pass about to start."""
        rngs = self._rng_slots()
        source = self._order_source()
        plan = self._pending
        seed_generator = torch.Generator() if self._seeds_passes() else None
        if plan is None:
            pass_state = PassState(
                rngs, snapshot_sampler(source), 0, 0, None, number=self._passes_begun, seed_generator=seed_generator
            )
        else:
            set_rng_states(rngs, plan["rng_pass_start"])
            skip = plan["batches_consumed"] if plan["in_pass"] else 0
            sampler_state, index_skip = plan["sampler"], skip
            if plan["in_pass"] and sampler_state is not None:
                to_load, index_skip = self._fast_forward(source, sampler_state, skip)
                restore_sampler(source, to_load)
            elif sampler_state is not None:
                sampler_state = snapshot_sampler(source)
            position_base = (skip - index_skip) * self.batch_sampler.batch_size if skip != index_skip else 0
            pass_state = PassState(
                rngs,
                sampler_state,
                skip,
                index_skip,
                plan["rng_sampler_draw"],
                number=plan.get("pass_number", 0),
                position_base=position_base,
                seed_generator=seed_generator,
                planned_seed=plan.get("sampler_seed") if plan["in_pass"] else None,
            )
        if seed_generator is not None:
            pass_state.index_sampler = seeded_index_sampler(_torch_index_sampler(self), source, seed_generator)
        self._passes_begun = pass_state.number + 1
        pass_state.resolution = self._resolution  # type: ignore[attr-defined]
        self._key_pass(pass_state)
        return pass_state

    def _key_pass(self, pass_state: PassState) -> None:
        """Key the pass's indices (:mod:`fastdata.sampler.seeding`) for a map-style dataset that wants them."""
        if isinstance(self.dataset, IterableDataset) or not wants_sample_index(self.dataset):
            return  # plain datasets get plain ints, as from torch's DataLoader
        pass_state.batched = self._auto_collation
        pass_state.keyed = True  # the key is derived at the draw point, once the pass's seed (if any) is known

    @property
    def resolution(self) -> tuple[int, int] | None:
        """The decode-time crop size of the next passes, or None for each transform's own (:meth:`set_resolution`)."""
        return self._resolution

    def set_resolution(self, size: int | tuple[int, int] | None) -> None:
        """Decode the next passes at ``size`` (progressive resolution), with the same workers.

        The dataset's decode-time ``RandomResizedCrop`` / ``ResizeCenterCrop`` output that size from the
        next ``iter()`` on (a pass keeps the size it started with); persistent workers follow without a
        restart, and batch buffers come from a ring of the new size. ``state_dict()`` records the size, so a
        resumed pass is decoded as it began. Crops are the ones a loader built at that size gives. See
        :mod:`fastdata.transforms.resolution` (and :func:`fastdata.transforms.resolution.ramp` for ffcv's schedule).

        Args:
            size: an int (square), ``(height, width)``, or None for the transform's own size.

        Raises:
            ValueError: ``size`` is not a positive int or pair of them.
        """
        self._resolution = check_size(size)
