"""An optional event log of the shard cache, for debugging and for the tests.

Set ``FASTDATA_CACHE_TRACE=/some/file`` and every process appends one line per event::

    <monotonic ns> <pid> <event> <shard> <inode> <cache bytes>

Events: ``prefetch`` (the prefetcher queues a shard; the inode field holds its distance in samples),
``get`` (a whole-shard download starts), ``ready`` (a download was published), ``evict`` (logged while the evicting
process holds the shard's exclusive lock, before the unlink), ``read`` (a record read from a cached file, while
the reader holds the shared lock), ``range`` (a record served by a ranged GET), ``corrupt`` (a
download failed its size or CRC32C check and is retried), ``error`` (a download request failed),
``over`` (a reader that needs a shard now found every cached shard in use and exceeds the budget).
Lines are short single ``write`` calls on an ``O_APPEND`` file, so processes do not interleave them.
``time.monotonic_ns`` is one clock for every process of a machine, so lines sort across processes.
"""

from __future__ import annotations

import os
import time

ENV = "FASTDATA_CACHE_TRACE"
_FD: dict[tuple[int, str], int] = {}


def enabled() -> bool:
    """True when ``FASTDATA_CACHE_TRACE`` names a file."""
    return bool(os.environ.get(ENV))


def event(name: str, shard: int, inode: int = 0, nbytes: int = 0) -> None:
    """Append one event line (no-op unless tracing is enabled)."""
    path = os.environ.get(ENV)
    if not path:
        return
    pid = os.getpid()
    fd = _FD.get((pid, path))
    if fd is None:
        fd = _FD[(pid, path)] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    os.write(fd, f"{time.monotonic_ns()} {pid} {name} {shard} {inode} {nbytes}\n".encode("ascii"))


def read_events(path: str | os.PathLike) -> list[tuple[int, int, str, int, int, int]]:
    """The events of a trace file, in time order: ``(ns, pid, event, shard, inode, cache_bytes)``."""
    rows = []
    with open(path, encoding="ascii") as f:
        for line in f:
            ns, pid, name, shard, inode, nbytes = line.split()
            rows.append((int(ns), int(pid), name, int(shard), int(inode), int(nbytes)))
    rows.sort()
    return rows
