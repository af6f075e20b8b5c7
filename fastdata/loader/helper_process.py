"""``worker_mode="thread-process"``: the thread pipeline in one helper process, out of the training process's way.

Loader threads inside the training process compete with it for the GIL and the cores (SPDL measured a GPU step
rate halved by them); worker processes cost an interpreter, a torch import and its memory each. This mode runs
:mod:`fastdata.loader.thread_workers`' pipeline in **one** helper process: ``num_workers`` threads there fetch,
decode and collate whole batches, and hand them over shared memory.

* The order is decided here, in the training process, as in the other modes: this iterator draws the batches'
  indices (torch's base seed, the sampler, the resume skip, the :class:`~fastdata.sampler.seeding.SampleIndex`
  keys) and sends them to the helper; so pixels, labels, ``state_dict`` and resume are the other modes'.
* Batches are written by the helper's threads straight into its ring of shared-memory batch slots
  (:mod:`fastdata.decode.shared_ring`: the helper runs as torch's worker 0, so ``empty_tensor`` allocates there);
  ``DataLoaderX``'s :class:`~fastdata.decode.shared_ring.Releaser` hands a slot back once the training loop has
  dropped every tensor of its batch. Where the loader pins (CUDA), the batch is pinned here, on the trainer's side.
* An exception is that batch's, re-raised here as the process mode re-raises a worker's (its type kept, the helper's
  traceback as a note); ``KeyboardInterrupt`` and any other ``BaseException`` end the pass. The helper ignores
  Ctrl-C (the training process handles it), and exits by itself if the training process dies.
* Closing the iterator (``close()``, ``break``, garbage collection) stops the helper's threads, joins the helper
  (terminated after ``_JOIN_S``) and closes the queues: no thread, process or descriptor is left.

The helper is started with ``multiprocessing_context`` (torch's default when None), like torch's workers.
"""

from __future__ import annotations

import os
import queue
import random
import signal
import threading
import weakref
from typing import Any

import numpy as np
import torch
import torch.multiprocessing
from torch.utils.data import _utils
from torch.utils.data._utils import worker as torch_worker
from torch.utils.data.dataloader import _BaseDataLoaderIter, _DatasetKind

from fastdata.decode.shared_ring import set_ring_size
from fastdata.loader.thread_workers import _Shared, _work
from fastdata.loader.worker_errors import TypedExceptionWrapper

__all__ = ["HelperProcessIter"]

_WAIT_S = 1.0  # how often a waiting consumer checks that the helper still runs (and the helper its parent)
_JOIN_S = 30.0  # how long shutdown waits for the helper before terminating it


class _Relay(_Shared):
    """The helper's side of :class:`_Shared`: results go to the training process as they are made."""

    def __init__(self, fetch: Any, init_fn: Any, tasks: Any, results: Any) -> None:
        super().__init__(fetch, None, init_fn)
        self.task_queue = tasks
        self.results_queue = results

    def claim(self) -> tuple[Any, ...] | None:
        """The next whole batch from the training process's queue (None: stop)."""
        task = self.task_queue.get()
        return None if task is None or self.stopping else ("batch", *task)

    def put(self, idx: int, result: tuple[bool, Any]) -> None:
        ok, payload = result
        if not ok:
            exc = payload
            payload = TypedExceptionWrapper((type(exc), exc, exc.__traceback__), "in DataLoaderX's loader process")
        self.results_queue.put((idx, ok, payload))


def _helper_main(
    dataset: Any,
    kind: Any,
    auto_collation: bool,
    collate_fn: Any,
    drop_last: bool,
    threads: int,
    init_fn: Any,
    base_seed: int,
    ring_size: int,
    tasks: Any,
    results: Any,
    parent: int,
) -> None:
    """The helper process: ``threads`` loader threads until told to stop, or until the training process is gone.

    Nothing is left to deliver once the training process is gone, and a process killed while it held a queue's
    lock would make a clean exit wait for that lock forever: the helper then ends with ``os._exit``.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the training process's to handle
    torch.set_num_threads(1)
    random.seed(base_seed)
    torch.manual_seed(base_seed)
    np.random.seed(base_seed % 2**32)
    # worker 0 of 1 to the dataset and to empty_tensor: batch buffers come from this process's shared-memory ring
    torch_worker._worker_info = torch_worker.WorkerInfo(id=0, num_workers=1, seed=base_seed, dataset=dataset)
    set_ring_size(ring_size)
    results.cancel_join_thread()  # at exit, undelivered batches are dropped, never waited for
    fetcher = _DatasetKind.create_fetcher(kind, dataset, auto_collation, collate_fn, drop_last)
    relay = _Relay(fetcher.fetch, init_fn, tasks, results)
    workers = [
        threading.Thread(target=_work, args=(relay, i), name=f"fastdata-loader-thread-{i}", daemon=True)
        for i in range(threads)
    ]
    for thread in workers:
        thread.start()
    while alive := [thread for thread in workers if thread.is_alive()]:
        alive[0].join(_WAIT_S)
        if os.getppid() != parent:  # the training process is gone (killed: it may hold a queue's lock): go now
            os._exit(0)


def _stop(proc: Any, tasks: Any, results: Any, threads: int, owner: int) -> None:
    """Stop the helper (its threads first), then close both queues."""
    if os.getpid() != owner:
        return
    try:
        for _ in range(threads):
            tasks.put(None)
    except (OSError, ValueError):  # a queue already closed
        pass
    proc.join(_JOIN_S)
    if proc.is_alive():
        proc.terminate()
        proc.join(_JOIN_S)
    for q in (tasks, results):
        q.cancel_join_thread()
        q.close()
    proc.close()


class HelperProcessIter(_BaseDataLoaderIter):
    """torch's iterator protocol over batches made by ``loader.num_workers`` threads of one helper process.

    Args:
        loader: a ``DataLoader`` over a map-style dataset with ``num_workers >= 1``.
        max_prefetch: batches the consumer keeps beyond those in flight (sizes the helper's ring).
    """

    def __init__(self, loader: Any, max_prefetch: int = 4) -> None:
        super().__init__(loader)
        self._in_flight = loader.num_workers * (loader.prefetch_factor or 2)
        context = loader.multiprocessing_context or torch.multiprocessing
        self._tasks, self._results = context.Queue(), context.Queue()
        self._proc = context.Process(
            target=_helper_main,
            args=(
                self._dataset,
                self._dataset_kind,
                self._auto_collation,
                self._collate_fn,
                self._drop_last,
                loader.num_workers,
                loader.worker_init_fn,
                self._base_seed,
                self._in_flight + max_prefetch + 2,  # in flight, queued for the loop, and the one it holds
                self._tasks,
                self._results,
                os.getpid(),
            ),
            name="fastdata-loader-process",
            daemon=True,
        )
        self._proc.start()
        self._finalizer = weakref.finalize(
            self, _stop, self._proc, self._tasks, self._results, loader.num_workers, os.getpid()
        )
        self._received: dict[int, tuple[bool, Any]] = {}
        self._send_idx = 0
        self._rcvd_idx = 0
        self._sampler_done = False
        for _ in range(self._in_flight):  # the sampler draws here, as it does when torch primes its workers
            self._try_put_index()

    def _try_put_index(self) -> None:
        if self._sampler_done or not self._finalizer.alive:
            return
        try:
            index = self._next_index()
        except StopIteration:
            self._sampler_done = True
            return
        self._tasks.put((self._send_idx, index))
        self._send_idx += 1

    def _next_data(self) -> Any:
        waited = 0.0
        while self._rcvd_idx not in self._received:
            if not self._finalizer.alive or self._rcvd_idx >= self._send_idx:
                self._shutdown_workers()
                raise StopIteration
            if self._timeout > 0 and waited >= self._timeout:
                raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds")
            step = _WAIT_S if self._timeout <= 0 else min(_WAIT_S, self._timeout - waited)
            try:
                idx, ok, payload = self._results.get(timeout=step)
            except queue.Empty:
                waited += step
                if not self._proc.is_alive():
                    code = self._proc.exitcode
                    self._shutdown_workers()
                    raise RuntimeError(
                        f"DataLoaderX: the loader process exited unexpectedly (exit code {code}); "
                        "its error output says why (out of memory is the usual cause)"
                    ) from None
                continue
            self._received[idx] = (ok, payload)
        ok, data = self._received.pop(self._rcvd_idx)
        self._rcvd_idx += 1
        self._try_put_index()
        if not ok:
            data.reraise()
        if self._pin_memory:
            data = _utils.pin_memory.pin_memory(data, self._pin_memory_device)
        return data

    def _shutdown_workers(self) -> None:
        """Stop the helper now (``DataLoaderX`` calls this when its iterator closes)."""
        self._received.clear()
        self._finalizer()

    def __len__(self) -> int:
        return len(self._index_sampler)

    def __getstate__(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} cannot be pickled")
