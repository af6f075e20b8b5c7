"""An ordered process map that always stops at once (the packer's reader/validator processes).

``multiprocessing.Pool`` can hang in ``terminate()`` after a Ctrl-C: workers hit by the same
SIGINT (it goes to the whole terminal process group) or blocked writing a large result into the
shared result pipe hold the pool's queue locks, which ``terminate()`` then waits for. Measured
on this project's ``pack``: 2 of 20 Ctrl-Cs hung. :class:`OrderedProcessMap` shares no lock
between processes instead:

- each worker has its own result pipe and a fixed share of the items (chunk ``k`` goes to
  worker ``k % workers``), so the parent reads chunk ``k`` from worker ``k % workers`` and the
  results come back in order; a worker that runs ahead blocks on its pipe (bounded memory);
- workers ignore SIGINT and SIGTERM, which a terminal or a service manager sends to the whole
  process group: the parent decides (SIGINT/SIGTERM are blocked while workers start, so none
  dies half-started). Workers hold nothing worth saving; the parent writes every byte;
- on any exception in the parent (KeyboardInterrupt included), and at interpreter exit, every
  worker is killed with SIGKILL and reaped: nothing is waited for that a dead or busy worker
  would have to give. A worker whose parent died gets EPIPE on its next send and exits.

A worker that dies (killed, out of memory, crashed decoder) is reported as a ``RuntimeError``
with its exit code instead of hanging the pack.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import os
import signal
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import wait
from types import TracebackType
from typing import Any

from fastdata._util.cpus import available_cpus

logger = logging.getLogger(__name__)

_JOIN_TIMEOUT = 5.0
_AHEAD = 2  # result chunks read ahead from each worker while the parent waits for another


def cap_workers(workers: int | None) -> int:
    """``workers`` capped at :func:`available_cpus` (which is also the default), with a warning when capped.

    More processes than CPUs only add memory and switching: each one decodes flat out.
    """
    cpus = available_cpus()
    if workers is None:
        return cpus
    if workers > cpus:
        logger.warning("workers=%d capped at %d, the number of CPUs this process may use", workers, cpus)
        return cpus
    return workers


class _Failed:
    """An exception in a worker, carried to the parent as text."""

    def __init__(self, text: str) -> None:
        self.text = text


class OrderedProcessMap:
    """``map(fn, items)`` in ``workers`` processes, results in order, stopped at once on any exception.

    Args:
        fn: a picklable function of one item (a module-level function).
        items: the items (with the ``fork`` start method they are not pickled).
        workers: number of processes (at least 1).
        chunksize: items per message.

    Example::

        with OrderedProcessMap(load, jobs, workers=4, chunksize=8) as results:
            for job, result in zip(jobs, results):
                ...
    """

    def __init__(self, fn: Callable[[Any], Any], items: Sequence[Any], *, workers: int, chunksize: int = 1) -> None:
        if workers < 1 or chunksize < 1:
            raise ValueError(f"workers and chunksize must be >= 1, got workers={workers!r}, chunksize={chunksize!r}")
        self.fn = fn
        self.items = items
        self.workers = workers
        self.chunksize = chunksize
        self._procs: list[Any] = []
        self._conns: list[Any] = []
        self._finished = False

    def __enter__(self) -> Iterator[Any]:
        self._finished = False
        # Registered first: a Ctrl-C can land anywhere, and multiprocessing's own exit handler (which
        # runs after this one) would wait for workers that ignore its SIGTERM.
        atexit.register(self.close, kill=True)
        try:
            self._start()
            return self._results()
        except BaseException:
            self.close(kill=True)
            raise

    def _start(self) -> None:
        forks = "fork" in multiprocessing.get_all_start_methods()
        ctx = multiprocessing.get_context("fork") if forks else multiprocessing.get_context("spawn")
        method = "fork" if forks else "spawn"
        with _signals_blocked():
            for w in range(self.workers):
                reader, writer = ctx.Pipe(duplex=False)
                share = [
                    self.items[k : k + self.chunksize]
                    for k in range(w * self.chunksize, len(self.items), self.workers * self.chunksize)
                ]
                inherited = self._conns + [reader] if method == "fork" else []  # read ends a forked child holds
                proc = ctx.Process(
                    target=_serve, args=(self.fn, share, writer, inherited), daemon=True, name=f"fastdata-pack-{w}"
                )
                self._procs.append(proc)  # before start(): an interrupt raised inside it must not orphan the child
                self._conns.append(reader)
                try:
                    proc.start()
                finally:
                    writer.close()

    def _results(self) -> Iterator[Any]:
        chunks = -(-len(self.items) // self.chunksize)
        unread = [len(range(w, chunks, self.workers)) for w in range(self.workers)]  # chunks still to receive
        buffered: list[deque[Any]] = [deque() for _ in self._conns]
        for k in range(chunks):
            w = k % self.workers
            while not buffered[w]:  # read whatever is ready (up to _AHEAD chunks a worker), so no worker idles
                room = {self._conns[v]: v for v in range(self.workers) if unread[v] and len(buffered[v]) < _AHEAD}
                for conn in wait(list(room)):
                    buffered[room[conn]].append(self._receive(room[conn]))
                    unread[room[conn]] -= 1
            chunk = buffered[w].popleft()
            if isinstance(chunk, _Failed):
                raise RuntimeError(f"pack worker {w} failed:\n{chunk.text}")
            yield from chunk
        self._finished = True

    def _receive(self, w: int) -> Any:
        try:
            return self._conns[w].recv()
        except EOFError:
            self._procs[w].join(_JOIN_TIMEOUT)
            raise RuntimeError(
                f"pack worker {w} (pid {self._procs[w].pid}) died with exit code {self._procs[w].exitcode}: "
                "out of memory, killed, or a crash in an image library; run again with --resume"
            ) from None

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close(kill=exc_type is not None or not self._finished)

    def close(self, *, kill: bool = False) -> None:
        """Reap the workers; with ``kill`` (or if one does not exit in time) SIGKILL them first."""
        atexit.unregister(self.close)
        started = [proc for proc in self._procs if proc.pid is not None]
        for proc in started:
            if kill and proc.is_alive():
                proc.kill()
        for proc in started:
            proc.join(None if kill else _JOIN_TIMEOUT)
            if proc.is_alive():  # pragma: no cover - a worker that outlived its work
                proc.kill()
                proc.join()
        for conn in self._conns:
            conn.close()
        self._procs, self._conns = [], []


def _serve(fn: Callable[[Any], Any], share: list[Sequence[Any]], conn: Any, inherited: list[Any]) -> None:
    """Worker: compute each chunk of its share and send the results; SIGINT and SIGTERM are the parent's to handle.

    The read ends of the result pipes that a forked worker inherited are closed first: only the
    parent may hold them, so that a send after the parent died fails (EPIPE) instead of blocking.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    for reader in inherited:
        reader.close()
    parent = os.getppid()
    try:
        for chunk in share:
            results = []
            for item in chunk:
                if os.getppid() != parent:  # orphaned (the parent died before it could reap us): stop now
                    return
                try:
                    results.append(fn(item))
                except Exception:
                    conn.send(_Failed(traceback.format_exc()))
                    return
            conn.send(results)
    except (BrokenPipeError, EOFError):  # the parent is gone
        pass
    finally:
        conn.close()


class _signals_blocked:
    """Block SIGINT and SIGTERM in this thread (so in processes started meanwhile); pending ones arrive on exit."""

    def __enter__(self) -> None:
        self._old = None
        if hasattr(signal, "pthread_sigmask"):
            self._old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})

    def __exit__(self, *exc: object) -> None:
        if self._old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._old)
