"""``worker_mode="thread"``: a pass's batches made by threads of the training process instead of worker processes.

:class:`ThreadWorkersIter` is a torch ``_BaseDataLoaderIter``, so everything that decides a pass is torch's own: the
base seed drawn from the loader's ``generator``, the index sampler (with :class:`~fastdata.DataLoaderX`'s resume skip
and :class:`~fastdata.sampler.seeding.SampleIndex` keys), the fetcher (``__getitems__`` where the dataset has it)
and the collate function. What differs from torch's worker processes is where a batch is made:

* ``num_workers`` threads each take whole batches from one task queue, fetch (read, decode straight into the batch
  buffer: the native kernel releases the GIL), collate and pin them; the thread that hands batches to the training
  loop only draws indices and puts tasks. Up to ``num_workers * prefetch_factor`` batches are in flight (the bounded
  set of batch slots); a new one starts only when the loop has taken the oldest, and batches come out in order.
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

import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any

from torch.utils.data import IterableDataset, _utils
from torch.utils.data.dataloader import _BaseDataLoaderIter, _DatasetKind

from fastdata.datasets.batch_decode import release_thread_resources
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


class _Shared:
    """What the worker threads and the iterator share (the threads hold no reference to the iterator)."""

    def __init__(
        self, fetch: Callable[[Any], Any], pin_device: str | None, init_fn: Any, pool: BufferPool | None = None
    ) -> None:
        self.fetch = fetch
        self.pool = pool
        self.pin_device = pin_device  # None: no pinning
        self.init_fn = init_fn
        self.tasks: queue.SimpleQueue[tuple[int, Any] | None] = queue.SimpleQueue()
        self.done = threading.Condition()
        self.results: dict[int, tuple[bool, Any]] = {}
        self.stopping = False

    def put(self, idx: int, result: tuple[bool, Any]) -> None:
        with self.done:
            if not self.stopping:
                self.results[idx] = result
            self.done.notify_all()


def _work(shared: _Shared, worker_id: int) -> None:
    """One worker thread: fetch, collate and pin whole batches until told to stop."""
    init_error: BaseException | None = None
    thread_buffers(pin=shared.pin_device is not None, pool=shared.pool)
    try:
        if shared.init_fn is not None:
            try:
                shared.init_fn(worker_id)
            except BaseException as exc:  # noqa: BLE001 - as torch does: the thread's first batch raises it
                init_error = exc
        while True:
            task = shared.tasks.get()
            if task is None or shared.stopping:
                return
            idx, index = task
            if init_error is not None:
                result, init_error = (False, init_error), None
            else:
                try:
                    data = shared.fetch(index)
                    if shared.pin_device is not None:
                        data = _utils.pin_memory.pin_memory(data, shared.pin_device)
                    result = (True, data)
                except BaseException as exc:  # noqa: BLE001 - this batch's error, raised in its place
                    result = (False, exc)
            shared.put(idx, result)
            del result, task, index
    finally:
        thread_buffers()
        release_thread_resources()  # this thread's decode pool and scratch go with it


def _stop(shared: _Shared, threads: list[threading.Thread]) -> None:
    """Stop and join the worker threads, dropping every batch still queued or made."""
    with shared.done:
        shared.stopping = True
        shared.results.clear()
        shared.done.notify_all()
    for _ in threads:
        shared.tasks.put(None)
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
        self._in_flight = loader.num_workers * (loader.prefetch_factor or 2)
        # the loader's ring of batch buffers, kept across passes: in flight, queued for the loop, the one it holds
        pool = loader.__dict__.setdefault("_thread_buffers", BufferPool(1))
        pool.per_size = self._in_flight + getattr(loader, "max_prefetch", 4) + 2
        self._shared = shared = _Shared(fetcher.fetch, pin_device, loader.worker_init_fn, pool)
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
        for _ in range(self._in_flight):  # the sampler draws here, as it does when torch primes its workers
            self._try_put_index()

    def _try_put_index(self) -> None:
        if self._sampler_done or self._shared.stopping:
            return
        try:
            index = self._next_index()
        except StopIteration:
            self._sampler_done = True
            return
        self._shared.tasks.put((self._send_idx, index))
        self._send_idx += 1

    def _next_data(self) -> Any:
        shared = self._shared
        waited = 0.0
        with shared.done:
            while self._rcvd_idx not in shared.results:
                if shared.stopping or self._rcvd_idx >= self._send_idx:
                    self._shutdown_workers()
                    raise StopIteration
                if not all(t.is_alive() for t in self._threads):
                    self._shutdown_workers()
                    raise RuntimeError("DataLoaderX: a loader thread ended without handing its batch over")
                if self._timeout > 0 and waited >= self._timeout:
                    raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds")
                step = _WAIT_S if self._timeout <= 0 else min(_WAIT_S, self._timeout - waited)
                shared.done.wait(step)
                waited += step
            ok, data = shared.results.pop(self._rcvd_idx)
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
