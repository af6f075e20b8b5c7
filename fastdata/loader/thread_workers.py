"""``worker_mode="thread"``: a pass's batches made by threads of the training process instead of worker processes.

:class:`ThreadWorkersIter` is a torch ``_BaseDataLoaderIter``, so everything that decides a pass is torch's own: the
base seed drawn from the loader's ``generator``, the index sampler (with :class:`~fastdata.DataLoaderX`'s resume skip
and :class:`~fastdata.sampler.seeding.SampleIndex` keys), the fetcher (``__getitems__`` where the dataset has it)
and the collate function. What differs from torch's worker processes is where a batch is made:

* a :class:`~fastdata.ShardDataset` batch (its own ``__getitems__``, a fixed-size decode-time transform) is made by
  all ``num_workers`` threads together: the first thread to take it allocates its tensors
  (:meth:`~fastdata.ShardDataset.batch_plan`), and every thread claims ranges of its samples (``2 * num_workers``
  ranges a batch), reading and decoding them straight into their slots (the native kernel releases the GIL); the
  thread that fills the last range collates and pins it. A new batch is started only once every range of the older
  ones is claimed, so the first batch comes at the speed of all the threads, and only ``max(2, prefetch_factor)``
  batches are in flight however many threads there are: memory follows the batch, not the thread count.
* any other dataset's batches are made whole, one per thread (fetch, collate, pin), ``num_workers *
  prefetch_factor`` in flight, as torch's workers. Either way the thread that hands batches to the training loop
  only draws indices and puts tasks, a new batch starts only when the loop has taken one, and batches come out in
  order.
* buffers are allocated by the thread that fills them, pinned where the loader pins (``empty_tensor`` asks
  :func:`fastdata.decode.batch.thread_buffers`), so a batch decoded in place reaches the loop without a copy; else
  large buffers come from the loader's ring (:class:`~fastdata.decode.shared_ring.BufferPool`), reused once unused.
* the pixels are the process mode's: a sample's random crops and decode-time augmentations draw from its
  ``SampleIndex`` (pass, position, index), not from the worker that decodes it. Draws from torch's *global* RNG
  (a plain-int dataset, ``NormalizeCollate(hflip_p>0)``) are not per-worker streams here, so they differ.
* an exception is that batch's, raised in its place (the very object, its traceback intact); as with processes
  the pass goes on after an ``Exception``, and any other ``BaseException`` (``KeyboardInterrupt``) ends it.
* ``worker_init_fn(worker_id)`` runs at the start of each thread (``get_worker_info()`` is None there).

A map-style dataset is required (an ``IterableDataset`` would need a copy per worker: use processes).
"""

from __future__ import annotations

import collections
import itertools
import threading
import weakref
from collections.abc import Callable
from typing import Any

from torch.utils.data import IterableDataset, _utils
from torch.utils.data.dataloader import _BaseDataLoaderIter, _DatasetKind

from fastdata.datasets.batch_decode import release_thread_resources
from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.decode.batch import thread_buffers
from fastdata.decode.shared_ring import BufferPool

__all__ = ["WORKER_MODES", "ThreadWorkersIter", "check_worker_mode"]

#: Where ``DataLoaderX`` makes batches: torch's worker processes, threads of this process, threads of one helper.
WORKER_MODES = ("process", "thread", "thread-process")

_WAIT_S = 1.0  # how often a waiting consumer checks that the worker threads still run
_JOIN_S = 30.0  # how long shutdown waits for a thread that is still inside a batch


def check_worker_mode(mode: str, num_workers: int, dataset: Any) -> str:
    """``mode`` if ``DataLoaderX`` can run it with ``num_workers`` over ``dataset``, else ValueError saying why."""
    if mode not in WORKER_MODES:
        raise ValueError(f"worker_mode must be one of {WORKER_MODES}, got {mode!r}")
    if mode != "process" and (num_workers < 1 or isinstance(dataset, IterableDataset)):
        raise ValueError(
            f"worker_mode={mode!r} needs num_workers >= 1 (its threads) and a map-style dataset; "
            f"got num_workers={num_workers} and a {type(dataset).__name__}: use worker_mode='process'"
        )
    return mode


class _Batch:
    """A batch made by several threads together: its plan, its sample ranges, the next one to claim, those left."""

    __slots__ = ("error", "idx", "left", "next", "plan", "ranges")

    def __init__(self, idx: int, plan: Any, ranges: list[tuple[int, int]]) -> None:
        self.idx, self.plan, self.ranges = idx, plan, ranges
        self.next = 1  # range 0 is the planning thread's
        self.left = len(ranges)
        self.error: tuple[int, BaseException] | None = None  # the first range (in batch order) that raised, and how


class _Shared:
    """What the worker threads and the iterator share (the threads hold no reference to the iterator)."""

    def __init__(
        self,
        fetch: Callable[[Any], Any],
        pin_device: str | None,
        init_fn: Any,
        pool: BufferPool | None = None,
        *,
        plan: Callable[[Any], Any] | None = None,
        collate: Callable[[Any], Any] | None = None,
        parts: int = 1,
    ) -> None:
        self.fetch = fetch
        self.plan, self.collate, self.parts = plan, collate, parts  # plan: the dataset's batch_plan (shared batches)
        self.pool, self.pin_device, self.init_fn = pool, pin_device, init_fn  # pin_device None: no pinning
        self.tasks: collections.deque[tuple[int, Any]] = collections.deque()
        self.active: list[_Batch] = []  # shared batches with ranges left to claim, oldest first
        self.done = threading.Condition()  # guards all of the above; notified on every task, range and result
        self.results: dict[int, tuple[bool, Any]] = {}
        self.stopping = False
        self.whole_batches = False  # a batch came without a plan: every thread makes whole batches
        self.planning = False  # a thread is planning a shared batch: the others wait for its ranges

    def put(self, idx: int, result: tuple[bool, Any]) -> None:
        with self.done:
            if not self.stopping:
                self.results[idx] = result
            self.done.notify_all()

    def add(self, idx: int, index: Any) -> None:
        with self.done:
            self.tasks.append((idx, index))
            self.done.notify_all()

    def claim(self) -> tuple[Any, ...] | None:
        """The next job, waiting for one: a range of the oldest shared batch first, else a new batch; None: stop."""
        with self.done:
            while not self.stopping:
                for batch in self.active:
                    k = batch.next
                    batch.next += 1
                    if batch.next == len(batch.ranges):
                        self.active.remove(batch)
                    return ("range", batch, k)
                if self.tasks and not self.planning:  # an older batch being planned gets its ranges claimed first
                    self.planning = self.plan is not None and not self.whole_batches
                    return ("batch", *self.tasks.popleft())
                self.done.wait()
            return None


def _planner(dataset: Any) -> Callable[[Any], Any] | None:
    """The dataset's ``batch_plan`` where its batches are :class:`~fastdata.ShardDataset`'s own.

    A subclass's own ``__getitems__`` is called as it is, whole batch by whole batch.
    """
    plan = getattr(dataset, "batch_plan", None)
    if callable(plan) and getattr(type(dataset), "__getitems__", None) is ShardDataset.__getitems__:
        return plan
    return None


def _ranges(n: int, parts: int) -> list[tuple[int, int]]:
    """``[0, n)`` cut into ``min(n, parts)`` consecutive ranges of nearly equal length."""
    parts = max(1, min(n, parts))
    cuts = [n * k // parts for k in range(parts + 1)]
    return list(itertools.pairwise(cuts))


def _pinned(shared: _Shared, data: Any) -> Any:
    return data if shared.pin_device is None else _utils.pin_memory.pin_memory(data, shared.pin_device)


def _fill(shared: _Shared, batch: _Batch, k: int) -> None:
    """Fill range ``k`` of ``batch``; the thread that fills its last range collates, pins and hands it over."""
    error: BaseException | None = None
    try:
        batch.plan.fill(*batch.ranges[k])
    except BaseException as exc:  # noqa: BLE001 - this batch's error, raised in its place
        error = exc
    with shared.done:
        if error is not None and (batch.error is None or k < batch.error[0]):
            batch.error = (k, error)
        batch.left -= 1
        last = batch.left == 0
    del error
    if not last:
        return
    if batch.error is not None:
        result: tuple[bool, Any] = (False, batch.error[1])
    else:
        try:
            result = (True, _pinned(shared, shared.collate(batch.plan.batch())))  # type: ignore[misc]
        except BaseException as exc:  # noqa: BLE001 - as above
            result = (False, exc)
    batch.plan = batch.error = None
    shared.put(batch.idx, result)


def _make(shared: _Shared, idx: int, index: Any) -> None:
    """Start batch ``idx``: shared among the threads when the dataset plans it, else fetched here whole."""
    batch: _Batch | None = None
    error: BaseException | None = None
    try:
        if shared.plan is not None and not shared.whole_batches:
            plan = shared.plan(index)
            if plan is not None:
                batch = _Batch(idx, plan, _ranges(len(plan), shared.parts))
            else:  # this dataset makes its batches otherwise: every thread makes whole ones from now on
                shared.whole_batches = True
    except BaseException as exc:  # noqa: BLE001 - this batch's error, raised in its place
        error = exc
    with shared.done:  # its ranges are claimable (or it is made whole here): the others may start the next batch
        if batch is not None and len(batch.ranges) > 1:
            shared.active.append(batch)
        shared.planning = False
        shared.done.notify_all()
    if batch is not None:
        _fill(shared, batch, 0)
        return
    if error is not None:  # the plan raised: that is this batch's error
        shared.put(idx, (False, error))
        return
    try:
        result: tuple[bool, Any] = (True, _pinned(shared, shared.fetch(index)))
    except BaseException as exc:  # noqa: BLE001 - as above
        result = (False, exc)
    shared.put(idx, result)


def _work(shared: _Shared, worker_id: int) -> None:
    """One worker thread: ranges of shared batches, or whole batches, until told to stop."""
    init_error: BaseException | None = None
    thread_buffers(pin=shared.pin_device is not None, pool=shared.pool)
    try:
        if shared.init_fn is not None:
            try:
                shared.init_fn(worker_id)
            except BaseException as exc:  # noqa: BLE001 - as torch does: the thread's first batch raises it
                init_error = exc
        while (job := shared.claim()) is not None:
            if job[0] == "range":
                _fill(shared, job[1], job[2])
            elif init_error is not None:
                shared.put(job[1], (False, init_error))
                init_error = None
            else:
                _make(shared, job[1], job[2])
            del job
    finally:
        thread_buffers()
        release_thread_resources()  # this thread's decode pool and scratch go with it


def _stop(shared: _Shared, threads: list[threading.Thread]) -> None:
    """Stop and join the worker threads, dropping every batch still queued or made."""
    with shared.done:
        shared.stopping = True
        shared.results.clear()
        shared.tasks.clear()
        shared.active.clear()
        shared.done.notify_all()
    current = threading.current_thread()
    for thread in threads:
        if thread is not current:
            thread.join(_JOIN_S)
    with shared.done:
        shared.results.clear()


class ThreadWorkersIter(_BaseDataLoaderIter):
    """torch's iterator protocol over batches made by ``loader.num_workers`` threads (see the module docstring).

    Args:
        loader: a ``DataLoader`` over a map-style dataset with ``num_workers >= 1``.

    Raises:
        ValueError: ``loader.num_workers < 1`` or an ``IterableDataset``.
    """

    def __init__(self, loader: Any) -> None:
        if loader.num_workers < 1:
            raise ValueError(f"worker_mode='thread' needs num_workers >= 1 threads, got {loader.num_workers}")
        if loader._dataset_kind != _DatasetKind.Map:
            raise ValueError(
                "worker_mode='thread' needs a map-style dataset (an IterableDataset needs a copy per worker); "
                "use worker_mode='process' or num_workers=0"
            )
        super().__init__(loader)
        fetcher = _DatasetKind.create_fetcher(
            self._dataset_kind, self._dataset, self._auto_collation, self._collate_fn, self._drop_last
        )
        pin_device = (self._pin_memory_device or "cuda") if self._pin_memory else None
        prefetch = loader.prefetch_factor or 2
        plan = _planner(self._dataset) if self._auto_collation else None
        # shared batches: prefetch_factor in flight (at least 2), each made by all the threads; else whole batches,
        # prefetch_factor per thread, as torch's workers
        self._whole_limit = loader.num_workers * prefetch
        self._in_flight = max(2, prefetch) if plan is not None else self._whole_limit
        # the loader's ring of batch buffers, kept across passes: in flight, queued for the loop, the one it holds
        self._pool = pool = loader.__dict__.setdefault("_thread_buffers", BufferPool(1))
        self._extra = getattr(loader, "max_prefetch", 4) + 2
        pool.per_size = self._in_flight + self._extra
        self._shared = shared = _Shared(
            fetcher.fetch,
            pin_device,
            loader.worker_init_fn,
            pool,
            plan=plan,
            collate=self._collate_fn,
            parts=2 * loader.num_workers,
        )
        self._send_idx = 0  # tasks put so far
        self._rcvd_idx = 0  # batch positions settled (handed out, or raised in their place)
        self._sampler_done = False
        self._threads = [
            threading.Thread(target=_work, args=(shared, i), name=f"fastdata-loader-thread-{i}", daemon=True)
            for i in range(loader.num_workers)
        ]
        self._finalizer = weakref.finalize(self, _stop, shared, self._threads)
        for thread in self._threads:
            thread.start()
        self._try_put_index()  # the sampler draws here, as it does when torch primes its workers

    def _try_put_index(self) -> None:
        if self._shared.whole_batches and self._in_flight < self._whole_limit:  # no plan: a batch per thread
            self._in_flight = self._whole_limit
            self._pool.per_size = self._in_flight + self._extra
        while not (self._sampler_done or self._shared.stopping) and self._send_idx - self._rcvd_idx < self._in_flight:
            try:
                index = self._next_index()
            except StopIteration:
                self._sampler_done = True
                return
            self._shared.add(self._send_idx, index)
            self._send_idx += 1

    def _next_data(self) -> Any:
        shared = self._shared
        waited = 0.0
        end: BaseException | None = None  # raised once the lock is let go: the threads need it to stop
        with shared.done:
            while self._rcvd_idx not in shared.results:
                if shared.stopping or self._rcvd_idx >= self._send_idx:
                    end = StopIteration()
                    break
                if not all(t.is_alive() for t in self._threads):
                    end = RuntimeError("DataLoaderX: a loader thread ended without handing its batch over")
                    break
                if self._timeout > 0 and waited >= self._timeout:
                    raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds")
                step = _WAIT_S if self._timeout <= 0 else min(_WAIT_S, self._timeout - waited)
                shared.done.wait(step)
                waited += step
            else:
                ok, data = shared.results.pop(self._rcvd_idx)
        if end is not None:
            self._shutdown_workers()
            raise end
        self._rcvd_idx += 1
        self._try_put_index()
        if not ok:
            try:
                raise data
            finally:
                del data
        return data

    def _shutdown_workers(self) -> None:
        """Stop the threads now (``DataLoaderX`` calls this when its iterator closes)."""
        self._finalizer()

    def __len__(self) -> int:
        return len(self._index_sampler)

    def __getstate__(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} cannot be pickled")
