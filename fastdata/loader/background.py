"""The background side of ``DataLoaderX``: a stoppable prefetch thread and the pass iterator that owns it."""

from __future__ import annotations

import logging
import os
import queue
import threading
import warnings
import weakref
from collections.abc import Iterator
from typing import Any

from prefetch_generator import BackgroundGenerator
from typing_extensions import override

from fastdata._util.stage_clock import marker
from fastdata.decode.shared_ring import Releaser
from fastdata.loader.lost_batches import lost_batch
from fastdata.loader.resume import PassState

__all__ = ["LoaderIter", "StoppableBackgroundGenerator", "close_all", "shutdown_persistent"]

logger = logging.getLogger(__name__)

_POLL_S = 0.05  # how often a blocked producer re-checks its stop flag
_ALIVE_S = 1.0  # how often a waiting consumer checks that the producer still runs
_BATCH, _ERROR, _END = "batch", "error", "end"  # what the producer queues


def _position(torch_iter: Any) -> int | None:
    """Batch positions of the pass torch's iterator has settled (None when it does not say).

    A worker iterator's ``_rcvd_idx`` moves past a batch whose worker raised, not past a timeout; in a
    single-process iterator a raising batch has always drawn its indices, so it takes one position.
    """
    position = getattr(torch_iter, "_rcvd_idx", None)
    return position if isinstance(position, int) else None


class StoppableBackgroundGenerator(BackgroundGenerator):
    """A ``BackgroundGenerator`` whose producer can be stopped and never blocks forever on a full queue.

    As with torch's iterator, a batch that raises does not end the pass: its ``Exception`` is queued in
    the batch's place (with the batch positions it took, see :func:`_position`) and the producer goes on
    with the next batch. An error that lost a batch on its way from a worker (see
    :mod:`fastdata.loader.lost_batches`) and any other ``BaseException`` end it. :meth:`take` hands out what
    was queued; the exception is the very object raised, so the consumer sees the original type and traceback.
    """

    # set by prefetch_generator's (untyped) constructor; `generator` is dropped when the thread ends
    generator: Iterator[Any] | None
    queue: queue.Queue[Any]
    Continue: bool

    def __init__(self, generator: Iterator[Any], max_prefetch: int, releaser: Releaser | None = None) -> None:
        self._stop_event = threading.Event()  # set before super().__init__, which starts the thread
        self._releaser = releaser
        super().__init__(generator, max_prefetch=max_prefetch)

    @override
    def run(self) -> None:
        source = self.generator
        if source is None:  # run() was called again after the pass ended
            return
        mark = marker()  # per-stage CPU time for `fastdata bench --breakdown`; a no-op otherwise
        try:
            while not self._stop_event.is_set():
                before = _position(source)
                mark("fetch")
                try:
                    item = next(source)
                except StopIteration:
                    self._put((_END, StopIteration, 0))
                    return
                except Exception as exc:  # noqa: BLE001 - this batch's error: handed over, the pass goes on
                    lost = lost_batch(source, exc)
                    if lost is not None:  # the batch will never come: torch's iterator would wait for it forever
                        self._put((_END, lost, 0))
                        return
                    after = _position(source)
                    positions = after - before if before is not None and after is not None else 1
                    if not self._put((_ERROR, exc, positions)):
                        return
                    continue
                mark("releaser")
                if self._releaser is not None:
                    self._releaser.track(item)  # and hands back the workers' buffers no batch uses any more
                mark("queue")
                if not self._put((_BATCH, item, 1)):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, who re-raises it
            self._put((_END, exc, 0))
        finally:
            self.generator = None  # drop the torch iterator as soon as we are done with it

    def take(self) -> tuple[str, Any, int]:
        """The next queued ``(kind, payload, positions)``: a batch, a batch's exception, or the end."""
        if not self.Continue:
            return _END, StopIteration, 0
        while True:
            try:
                entry = self.queue.get(timeout=_ALIVE_S)
                break
            except queue.Empty:
                if not self.is_alive() and self.queue.empty():  # it ended without a word: never wait for it
                    self.Continue = False
                    return (
                        _END,
                        RuntimeError(
                            "DataLoaderX: the prefetch thread ended without handing over a "
                            "batch, an error or the end of the pass"
                        ),
                        0,
                    )
        if entry[0] == _END:
            self.Continue = False
        return entry

    def _put(self, item: tuple[str, Any, int]) -> bool:
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


class LoaderIter:
    """The iterator of a :class:`DataLoaderX` pass; ``close()`` stops everything it started."""

    def __init__(
        self,
        torch_iter: Any,  # torch's _BaseDataLoaderIter (private, so not named in the signature)
        pass_state: PassState,
        *,
        max_prefetch: int,
        owns_workers: bool,
        join_timeout: float,
        releaser: Releaser | None = None,
    ) -> None:
        self._pass = pass_state
        self._torch_iter = torch_iter
        self._owns_workers = [owns_workers]  # a persistent loader that dies first hands its workers over
        self._releaser = releaser
        self._yielded = 0  # batches handed out (a batch's exception takes a position but yields nothing)
        # torch warns when an IterableDataset yields more than the len() it reported; it would do so in the
        # background thread, batches ahead of the loop, so the warning is given here, by the batch that passes it
        self._reported_len = getattr(torch_iter, "_IterableDataset_len_called", None)
        if self._reported_len is not None:
            torch_iter._IterableDataset_len_called = None
        bg = StoppableBackgroundGenerator(torch_iter, max_prefetch, releaser)
        bg.name = f"DataLoaderX-prefetch-{bg.ident}"
        # The finalizer holds no reference to self: it runs on close(), on garbage collection and at exit, and
        # does nothing but disarm torch's iterator in a forked copy of this process (see _shutdown).
        self._finalizer = weakref.finalize(
            self, _shutdown, bg, torch_iter, self._owns_workers, pass_state, join_timeout, os.getpid()
        )
        self._bg = bg

    def __iter__(self) -> LoaderIter:
        return self

    def __getattr__(self, name: str) -> Any:
        """Other attributes (e.g. ``_workers``) are torch's iterator's, for code written against it."""
        torch_iter = self.__dict__.get("_torch_iter")
        if torch_iter is None or name.startswith("__"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(torch_iter, name)

    def __len__(self) -> int:
        """Batches this iterator yields in all (fewer than ``len(loader)`` in a resumed pass)."""
        return max(len(self._torch_iter) - self._pass.skip, 0)

    def __next__(self) -> Any:
        if not self._finalizer.alive:
            raise StopIteration
        mark = marker()  # per-stage CPU time for `fastdata bench --breakdown`; a no-op otherwise
        mark("releaser")
        if self._releaser is not None:
            self._releaser.poll()
        mark("take")
        try:
            kind, payload, positions = self._bg.take()
        except BaseException:  # a Ctrl-C while waiting
            self.close()
            raise
        if kind == _ERROR:  # this batch raised; like torch's iterator, the next next() goes on with the pass
            self._pass.consumed += positions
            del self  # the traceback keeps this frame: it must not keep the iterator, and so its workers, alive
            raise payload
        if kind == _END:
            if payload is StopIteration:
                self._pass.finished = True
            self.close()
            raise payload
        self._pass.consumed += 1
        self._yielded += 1
        if self._reported_len is not None and self._pass.skip + self._yielded > self._reported_len:
            _warn_past_reported_len(self._torch_iter, self._reported_len, self._pass.skip + self._yielded)
        mark("consumer")  # the training loop's own work until the next batch
        return payload

    def close(self) -> None:
        """Stop the background thread, drain its queue and shut non-persistent workers down."""
        self._finalizer()

    def unfinished(self) -> bool:
        """Whether this iterator is open and its pass has batches left."""
        if not self._finalizer.alive or self._pass.finished:
            return False
        try:
            return self._pass.consumed < len(self._torch_iter)
        except TypeError:  # an IterableDataset without __len__
            return True

    def __del__(self) -> None:
        finalizer = getattr(self, "_finalizer", None)  # absent if __init__ failed
        if finalizer is not None:
            finalizer()


def _warn_past_reported_len(torch_iter: Any, reported: int, yielded: int) -> None:
    """Torch's own warning for an IterableDataset that yields more than its reported length."""
    message = (
        f"Length of IterableDataset {torch_iter._dataset} was reported to be {reported}(when accessing "
        f"len(dataloader)), but {yielded} samples have been fetched. "
    )
    if torch_iter._num_workers > 0:
        message += (
            "For multiprocessing data-loading, this could be caused by not properly configuring the "
            "IterableDataset replica at each worker. Please see "
            "https://pytorch.org/docs/stable/data.html#torch.utils.data.IterableDataset for examples."
        )
    warnings.warn(message, UserWarning, stacklevel=3)


def _disarm(torch_iter: Any) -> None:
    """In a forked copy of the owning process: make torch's iterator a no-op here (its ``__del__`` included).

    The workers, their queues and events belong to the process that started them; shutting them down from a
    fork would stop the owner's workers (and ``multiprocessing`` asserts "can only test a child process").
    """
    if hasattr(torch_iter, "_shutdown"):
        torch_iter._shutdown = True


def _shutdown(
    bg: StoppableBackgroundGenerator,
    torch_iter: Any,
    owns_workers: list[bool],
    pass_state: PassState,
    timeout: float,
    owner: int,
) -> None:
    if os.getpid() != owner:
        _disarm(torch_iter)
        return
    if not bg.stop(timeout):
        return  # the producer still runs inside torch's iterator; torch's own __del__ cleans up later
    pass_state.close_index_iters()
    shutdown_workers = getattr(torch_iter, "_shutdown_workers", None)
    if owns_workers[0] and shutdown_workers is not None:
        shutdown_workers()


def close_all(iterators: weakref.WeakSet[LoaderIter]) -> bool:
    """Close every iterator; return whether one of them was unfinished (:meth:`LoaderIter.unfinished`)."""
    unfinished = False
    for it in list(iterators):
        unfinished = it.unfinished() or unfinished
        it.close()
    return unfinished


def shutdown_persistent(active: weakref.WeakSet[LoaderIter], torch_iter: Any, owner: int) -> None:
    """The loader is gone: its persistent workers go now, or with the iterator still running on them.

    Only in the process that started them (``owner``); a forked copy of it only disarms its copy of the iterator.
    """
    if os.getpid() != owner:
        _disarm(torch_iter)
        return
    for it in list(active):
        if it._finalizer.alive:
            it._owns_workers[0] = True
            return
    torch_iter._shutdown_workers()
