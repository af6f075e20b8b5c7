"""How many shard files one process keeps open, and which: an LRU of open readers, closed on eviction.

Every open shard reader holds a file descriptor, and a process may hold only ``RLIMIT_NOFILE`` of
them (often 1024). A full shuffle over thousands of shards would otherwise open every shard in every
DataLoader worker and die with ``EMFILE`` (or worse, make torch's queues fail while passing a batch).

The default bound (:func:`default_max_open_shards`) is a quarter of the process's soft
``RLIMIT_NOFILE``, at most :data:`CEILING`: the other three quarters stay free for what a loader
process needs besides shards (torch's ``file_descriptor`` sharing strategy gives every tensor in flight
a descriptor, the buffer ring, queue pipes, the sockets of a remote store, the user's own files). The
limit is per process and every DataLoader worker is its own process, so the worker count does not
divide it: each worker may hold the bound. It is read in each process when it first reads, so a
``worker_init_fn`` that raises the limit is honoured.

A reader may also keep per-record arrays (an LMDB shard's sidecar: 24 bytes a record), so readers are bounded by
records too (:data:`MAX_HELD_RECORDS`, about 1M records): with 10,000-sample shards a process holds ~100 readers, not
1,024, and its memory stays that of a 1M-sample pack read whole, whatever the shard size or the dataset's.

A process that nears its limit anyway (``max_open_shards`` set above it) closes its own least recently
used readers rather than go within :func:`reserve` descriptors of the limit; only when it holds none to
close does it refuse the shard, with an ``OSError`` (``EMFILE``) that says so, before a batch in transit
can be the one that fails.
"""

from __future__ import annotations

import collections
import errno
import os
import sys
import threading
from collections.abc import Callable, Hashable
from typing import Any

from fastdata.formats.base import ShardReaderBase
from fastdata.formats.files import FileIdentity

__all__ = [
    "CEILING",
    "MAX_HELD_RECORDS",
    "OpenReaders",
    "check_max_open_shards",
    "default_max_open_shards",
    "nofile_limit",
    "reserve",
]

CEILING = 1024  # readers one process keeps open at most by default (each may also hold a little index memory)
SHARE = 4  # by default shards may take a quarter of the descriptor limit
RESERVE_MAX = 64  # descriptors kept free for everything else, at most (a quarter of the limit below 256)


def nofile_limit() -> int | None:
    """This process's soft ``RLIMIT_NOFILE`` (None: unlimited, or no such limit on this platform)."""
    try:
        import resource
    except ImportError:  # not POSIX
        return None
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY or soft < 0 else int(soft)


def default_max_open_shards(per_shard: int = 1) -> int:
    """The default bound on open shards in this process: ``soft RLIMIT_NOFILE // (4 * per_shard)``, 1 to 1024.

    Args:
        per_shard: descriptors one open shard holds (2 for a remote dataset's cached shard: its reader and its lock).
    """
    limit = nofile_limit()
    if limit is None:
        return CEILING
    return max(1, min(CEILING, limit // (SHARE * per_shard)))


def reserve(limit: int) -> int:
    """Descriptors a process keeps free of shard readers: a quarter of ``limit``, at most :data:`RESERVE_MAX`."""
    return min(RESERVE_MAX, limit // SHARE)


def check_max_open_shards(value: Any) -> int | None:
    """``max_open_shards`` checked: an int >= 1, or None for the default.

    Raises:
        TypeError: not an int or None.
        ValueError: below 1.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"max_open_shards must be an int >= 1 or None (derived from `ulimit -n`), got {value!r}; "
            "e.g. max_open_shards=256"
        )
    if value < 1:
        raise ValueError(
            f"max_open_shards must be >= 1, got {value}; e.g. max_open_shards=256, or None for the default"
        )
    return int(value)


MAX_HELD_RECORDS = 1 << 20  # records the open readers of one process may keep arrays for, together (the newest is
# always kept): 24 MB of LMDB sidecars; 1,024 shards of 1,000 records fit


class OpenReaders:
    """The shard readers one process holds open, bounded.

    The shard readers one process holds open: at most ``limit`` (and :data:`MAX_HELD_RECORDS` records kept in
    memory by them together), the least recently used closed first.

    :meth:`get` returns the open reader of a shard, or opens it (with the opener given, which makes
    its own identity checks each time it opens, so a shard evicted and re-opened is checked again).
    After a fork the child forgets the parent's readers; a pickled copy holds none. A reader still in
    use by another thread when evicted is closed when that thread lets go of it, never under it.

    Args:
        limit: readers open at once (None: :func:`default_max_open_shards`, read in each process).

    Attributes:
        identities: per shard, the identity of the file first opened, for openers that require the
            same file on every re-open (kept across fork and pickling).
    """

    def __init__(self, limit: int | None = None, max_records: int = MAX_HELD_RECORDS) -> None:
        self.limit = check_max_open_shards(limit)
        self.max_records = int(max_records)
        self.identities: dict[Hashable, FileIdentity] = {}
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._open: collections.OrderedDict[Hashable, ShardReaderBase] = collections.OrderedDict()
        self._records = 0  # held_records of the open readers
        self._cap: int | None = None

    @property
    def cap(self) -> int:
        """The bound in this process (``limit``, or the default derived from its ``RLIMIT_NOFILE``)."""
        if self._cap is None:
            self._cap = self.limit if self.limit is not None else default_max_open_shards()
        return self._cap

    def get(self, key: Hashable, opener: Callable[[Any], ShardReaderBase]) -> ShardReaderBase:
        """The open reader of ``key``, opened by ``opener(key)`` if this process holds none.

        Raises:
            OSError: ``EMFILE``, naming the limit and ``max_open_shards``, when opening would leave
                fewer than :func:`reserve` descriptors free; any error of ``opener``.
        """
        if self._pid != os.getpid():  # forked: never use the parent's descriptors
            self._reset()
        with self._lock:
            reader = self._open.get(key)
            if reader is not None:
                self._open.move_to_end(key)
                return reader
            while len(self._open) >= self.cap:
                self._evict()
            try:
                reader = opener(key)
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    raise self._too_many(exc.errno, exc.filename, nofile_limit(), refused=False) from exc
                raise
            self._refuse_near_limit(reader)
            self._open[key] = reader
            self._records += reader.held_records
            while self._records > self.max_records and len(self._open) > 1:
                self._evict()
            return reader

    def _evict(self) -> None:
        _, reader = self._open.popitem(last=False)
        self._records -= reader.held_records
        if sys.getrefcount(reader) <= 2:  # this frame and the call: nobody else reads it, close it now
            reader.close()
        # else a thread still reading it holds it; its __del__ closes the descriptor when that thread is done

    def _refuse_near_limit(self, reader: ShardReaderBase) -> None:
        """Make room for ``reader`` when its descriptor is within :func:`reserve` of the limit, else close it and raise.

        Near the limit the least recently used readers are closed (they re-open on their next read, checked again),
        one for each descriptor ``reader`` stands inside the reserve; only when none is left to close is ``reader``
        closed and ``EMFILE`` raised.

        Descriptors are numbered lowest-free first, so a new one numbered ``fd`` means at least ``fd``
        others are open: a free check, made on every open.
        """
        limit = nofile_limit()
        fd = getattr(reader, "_fd", -1)
        if limit is None or fd < limit - reserve(limit):
            return
        # near the limit: this process's own least recently used readers are closed first, one descriptor for each
        # number ``fd`` stands inside the reserve (the lowest free numbers go to the next opens)
        excess = fd - (limit - reserve(limit)) + 1
        while excess > 0 and self._open:
            self._evict()
            excess -= 1
        if excess <= 0:
            return
        reader.close()
        raise self._too_many(errno.EMFILE, getattr(reader, "path", None), limit, refused=True)

    def _too_many(self, code: int, path: Any, limit: int | None, *, refused: bool) -> OSError:
        """The ``OSError`` (same errno) that says how many shards are open, the limit, and what to change."""
        where = f"this process may open {limit} files (`ulimit -n`)" if limit is not None else "no limit is set here"
        message = (
            f"{os.strerror(code)} ({errno.errorcode[code]}): {where}; {len(self._open)} shard files are open "
            f"with max_open_shards={self.cap}"
        )
        if refused and limit is not None:  # refused: only where a limit is known
            message += f", and no shard is opened while fewer than {reserve(limit)} descriptors would be left"
        if self._open or not refused:
            message += "; lower max_open_shards (default: a quarter of the limit) or raise `ulimit -n`"
        else:  # no shard of this process holds one: its other files (torch's worker pipes, ...) take the rest
            message += "; the process's other files take the rest: raise `ulimit -n` or use fewer DataLoader workers"
        return OSError(code, message, None if path is None else os.fspath(path))

    def close(self) -> None:
        """Close every reader this process holds (they re-open on next use)."""
        if self._pid != os.getpid():
            self._reset()
            return
        with self._lock:
            readers = list(self._open.values())
            self._open.clear()
            self._records = 0
        for reader in readers:
            reader.close()

    def __len__(self) -> int:
        """Readers open in this process."""
        return len(self._open) if self._pid == os.getpid() else 0

    def __contains__(self, key: Hashable) -> bool:
        return self._pid == os.getpid() and key in self._open

    def __getstate__(self) -> dict[str, Any]:
        return {"limit": self.limit, "max_records": self.max_records, "identities": dict(self.identities)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.limit, self.identities = state["limit"], state["identities"]
        self.max_records = state.get("max_records", MAX_HELD_RECORDS)
        self._reset()
