"""The shard cache's byte budget.

The shard cache's byte budget (:class:`CacheBudget`, a part of :class:`~fastdata.storage.cache.ShardCache`):
``shards/`` summed under ``budget.lock``, room reserved for a download as a full-size ``.tmp`` before it starts,
stale ``.tmp`` files of dead downloaders removed, and eviction of unheld shards furthest-next-use first, by every
planning process's published plan (a strict prefetch only evicts shards needed later than the one it brings).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fastdata.storage import trace
from fastdata.storage.locks import FileLock
from fastdata.storage.plans import publish_plan, read_plans

logger = logging.getLogger(__name__)

TMP = ".tmp"


class CacheBudget:
    """The budget half of ``ShardCache``, which it is mixed into.

    The budget half of :class:`~fastdata.storage.cache.ShardCache`, which it is mixed into: it uses the cache's
    ``root``, ``shards``, ``limit``, ``_index``, ``_warned``, ``_lock()`` and ``_tmp()``, and sets ``live_plans``.
    """

    # What the cache it is mixed into provides (``shards`` holds its ``CachedShard`` entries: ``name``, ``nbytes``).
    root: Path
    shards: list[Any]
    limit: int | None
    _index: dict[str, int]
    _warned: bool
    live_plans: int

    if TYPE_CHECKING:  # the cache's

        def _lock(self, name: str) -> FileLock: ...
        def _tmp(self, shard: int) -> Path: ...

    def used_bytes(self) -> int:
        """Bytes in ``shards/`` (cached shards and downloads in progress)."""
        total = 0
        with os.scandir(self.root / "shards") as it:
            for entry in it:
                with contextlib.suppress(FileNotFoundError):
                    total += entry.stat().st_size
        return total

    def _reserve(self, shard: int, next_use: float, strict: bool, exceed: bool) -> bool:
        """Make room for the shard (evicting) and create its ``.tmp`` at full size; False when there is no room."""
        need = self.shards[shard].nbytes
        tmp = self._tmp(shard)
        with self._budget_lock():
            files = self._scan(exclude=self.shards[shard].name)
            used = sum(size for _, size, _ in files)
            if self.limit is not None and used + need > self.limit:
                used = self._evict(files, used, need, next_use, strict, self.limit)
                if used + need > self.limit:
                    if not exceed:
                        return False
                    trace.event("over", shard, 0, used + need)
                    if not self._warned:
                        logger.warning(
                            "shard cache %s is over its budget (%d + %d > %d bytes): every cached shard "
                            "is in use; raise cache_limit",
                            self.root,
                            used,
                            need,
                            self.limit,
                        )
                        self._warned = True
            with open(tmp, "wb") as f:
                f.truncate(need)
        return True

    @contextlib.contextmanager
    def _budget_lock(self) -> Iterator[None]:
        """Held while the folder is summed, space is reserved, shards are evicted or renamed into place."""
        with FileLock(self.root / "budget.lock") as lock:
            lock.acquire(exclusive=True)
            yield

    def _scan(self, exclude: str) -> list[tuple[str, int, bool]]:
        """``(name, size, is_tmp)`` of every file in ``shards/``; stale ``.tmp`` files (no downloader) are removed."""
        files = []
        with os.scandir(self.root / "shards") as it:
            for entry in it:
                name = entry.name
                is_tmp = name.endswith(TMP)
                base = name[: -len(TMP)] if is_tmp else name
                if base == exclude:
                    continue
                try:
                    size = entry.stat().st_size
                except FileNotFoundError:
                    continue
                if is_tmp:
                    lock = self._lock(base)
                    if lock.acquire(exclusive=True, blocking=False):  # its downloader died
                        Path(entry.path).unlink(missing_ok=True)
                        lock.release()
                        continue
                    lock.release()
                files.append((name, size, is_tmp))
        return files

    def _evict(
        self, files: list[tuple[str, int, bool]], used: int, need: int, next_use: float, strict: bool, limit: int
    ) -> int:
        """Delete unheld shards, furthest next use first, until ``need`` more bytes fit; return the bytes left."""
        distance = self.next_uses()
        candidates = []
        for name, size, is_tmp in files:
            if is_tmp:
                continue
            number = self._index.get(name)
            far = math.inf if number is None else distance[number]
            if not strict or far > next_use:
                candidates.append((far, size, name, number))
        candidates.sort(key=lambda c: (c[0], c[1]), reverse=True)
        chosen: list[tuple[FileLock, str, int, int | None]] = []  # locked, not yet deleted
        freed = 0
        for _, size, name, number in candidates:
            if used - freed + need <= limit:
                break
            lock = self._lock(name)
            if lock.acquire(exclusive=True, blocking=False):
                chosen.append((lock, name, size, number))
                freed += size
            else:
                lock.release()  # someone reads it
        if strict and used - freed + need > limit:
            freed = 0  # not enough: a prefetch evicts nothing rather than something in vain
        for lock, name, size, number in chosen:
            try:
                if freed:
                    path = self.root / "shards" / name
                    try:
                        inode = os.stat(path).st_ino
                    except FileNotFoundError:
                        continue
                    trace.event("evict", -1 if number is None else number, inode, used - size)
                    path.unlink()
                    used -= size
            finally:
                lock.release()
        return used

    def next_uses(self) -> np.ndarray:
        """Per shard, the nearest next use (in samples) over every live plan of the node; ``inf`` where none plans it.

        :attr:`live_plans` is set to the number of live plans read.
        """
        best, self.live_plans = read_plans(self.root / "plans", len(self.shards))
        return best

    def publish_plan(self, distances: np.ndarray | None) -> None:
        """Write (None: remove) this process's next use of every shard, -1 for none."""
        publish_plan(self.root / "plans", distances)
