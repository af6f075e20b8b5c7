"""Per-stage CPU-time counters for ``fastdata bench --breakdown``; nothing at all unless switched on.

Off unless the environment variable ``FASTDATA_BREAKDOWN`` names a folder (the benchmark sets it for one run). Then
every process that loads data (the loader's main process and each DataLoader worker) keeps one small file there,
``<pid>.stages``: int64 nanoseconds of CPU time per stage, memory-mapped, so the benchmark reads every process's
counters while the run goes on.

The data path asks :func:`marker` once per batch. Off, it gets a function that does nothing; on, ``mark(stage)``
says "from now on this thread works on ``stage``": the thread's CPU time since its previous mark is added to the
stage it named then. A thread's stages are thus consecutive pieces of its timeline and add up to its CPU time. A
DataLoader worker's file also holds the thread that marks (its data thread), the stage in progress and the clock
at its mark, so :func:`read_counters` charges the piece in progress up to the moment it reads, and names the CPU
time of the worker's other threads (torch's file-descriptor sharer; ``decode_threads``' threads) apart.
"""

from __future__ import annotations

import mmap
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import numpy as np

__all__ = ["ENV", "STAGES", "charged", "marker", "process_cpu_ns", "read_counters"]

ENV = "FASTDATA_BREAKDOWN"
T = TypeVar("T")

#: The stages, in timeline order (the benchmark's report labels them).
STAGES: tuple[str, ...] = (
    # a DataLoader worker, per batch
    "alloc",
    "read",
    "sample_rng",
    "header",
    "crop",
    "setup",
    "kernel",
    "resize",
    "hand_back",
    "fallback",
    "wrap",
    "collate",
    "worker_loop",
    # the loader's main process
    "sampler",
    "fetch",
    "releaser",
    "queue",
    "take",
    "consumer",
)
_INDEX = {name: k for k, name in enumerate(STAGES)}
# after the stages: the stage in progress and the clock at its mark (the marking thread's), 1 in a worker, its tid
_CURRENT, _SINCE, _WORKER, _TID = range(len(STAGES), len(STAGES) + 4)
_SLOTS = len(STAGES) + 4


def _noop(stage: str) -> None:
    """What :func:`marker` returns when the counters are off."""


class _Clock:
    """This process's counters (a memory-mapped file) and each thread's last mark."""

    def __init__(self, path: Path, worker: bool) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, _SLOTS * 8)
            self.map = mmap.mmap(fd, _SLOTS * 8)
        finally:
            os.close(fd)
        self.counts = np.frombuffer(self.map, dtype=np.int64)  # a plain array over the shared file (fast items)
        self.counts[_CURRENT] = -1
        self.counts[_WORKER] = int(worker)
        self.local = threading.local()

    def mark(self, stage: str) -> None:
        now = time.thread_time_ns()
        local = self.local
        previous = getattr(local, "stage", None)
        if previous is not None:
            self.counts[previous] += now - local.since
        local.stage, local.since = _INDEX[stage], now
        self.counts[_CURRENT], self.counts[_SINCE] = local.stage, now
        self.counts[_TID] = threading.get_native_id()


_state: tuple[int, str | None, Callable[[str], None]] | None = None  # (pid, folder, its marker)


def marker() -> Callable[[str], None]:
    """This process's ``mark(stage)`` function: a no-op unless ``FASTDATA_BREAKDOWN`` names a folder.

    Asked once per batch: it costs a look at the environment. A forked worker opens its own file; a new folder (the
    benchmark's next run in the same process) a new one.
    """
    global _state
    state = _state
    pid, folder = os.getpid(), os.environ.get(ENV) or None
    if state is not None and state[0] == pid and state[1] == folder:
        return state[2]
    mark: Callable[[str], None] = _noop
    if folder:
        try:
            from torch.utils.data import get_worker_info

            worker = get_worker_info() is not None
        except ImportError:
            worker = False
        mark = _Clock(Path(folder) / f"{pid}.stages", worker).mark
    _state = (pid, folder, mark)
    return mark


def charged(iterator: Iterator[T], stage: str, then: str) -> Iterator[T]:
    """``iterator`` with each ``next()`` charged to ``stage`` when the counters are on.

    ``iterator`` itself when the counters are off; else its items, each ``next()`` charged to ``stage``, and the
    thread back in ``then`` after it (the loader's sampler, drawn inside torch's fetch).
    """
    mark = marker()
    if mark is _noop:
        return iterator
    return _charged(iterator, stage, then, mark)


def _charged(it: Iterator[T], stage: str, then: str, mark: Callable[[str], None]) -> Iterator[T]:
    while True:
        mark(stage)
        try:
            item = next(it)
        except StopIteration:
            return
        finally:
            mark(then)
        yield item


def process_cpu_ns(pid: int) -> int | None:
    """Another process's CPU time in nanoseconds, all its threads (Linux's process CPU clock); None when gone."""
    try:
        return time.clock_gettime_ns(((~pid) << 3) | 2)  # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)
    except (OSError, OverflowError):
        return None


def _thread_sched_ns(pid: int, tid: int) -> tuple[int, int] | None:
    """Another process's thread's CPU time and its time waiting for a CPU, in nanoseconds.

    Another process's thread's CPU time (the clock ``thread_time_ns`` reads there) and its time spent runnable
    but waiting for a CPU, in nanoseconds (``/proc/<pid>/task/<tid>/schedstat``).
    """
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
            run, wait = f.read().split()[:2]
        return int(run), int(wait)
    except (OSError, ValueError):
        return None


def read_counters(folder: str | os.PathLike) -> dict[int, dict[str, int]]:
    """Every process's stage counters in ``folder``.

    Every process's counters in ``folder``: ``{pid: {stage: ns, ..., "worker_threads": ns, "worker_wait": ns,
    "worker": 0 or 1}}``.

    In a worker, the stage in progress is charged up to now (its data thread's CPU clock read now),
    ``worker_threads`` is the CPU time of its other threads so far and ``worker_wait`` the time its data thread was
    runnable but not running (waiting for a CPU); so two readings taken a while apart differ by exactly the CPU time
    the worker spent in between. 0 where the worker has gone.
    """
    out: dict[int, dict[str, int]] = {}
    for path in Path(folder).glob("*.stages"):
        try:
            pid = int(path.stem)
            counts = np.fromfile(path, dtype=np.int64)
        except (OSError, ValueError):
            continue
        if counts.size != _SLOTS:
            continue
        others = wait = 0
        if counts[_WORKER]:
            sched = _thread_sched_ns(pid, int(counts[_TID]))  # read after the file: at most a mark late
            process = process_cpu_ns(pid)
            current, since = int(counts[_CURRENT]), int(counts[_SINCE])
            if sched is not None and process is not None and 0 <= current < len(STAGES):
                counts[current] += max(sched[0] - since, 0)
                others, wait = max(process - sched[0], 0), sched[1]
        out[pid] = {name: int(counts[k]) for k, name in enumerate(STAGES)} | {
            "worker_threads": others,
            "worker_wait": wait,
            "worker": int(counts[_WORKER]),
        }
    return out
