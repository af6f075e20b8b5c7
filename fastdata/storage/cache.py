"""The node-local shard cache: one download per shard per node, a byte budget, furthest-next-use eviction.

Layout of one dataset's cache folder (``cache_dir/<name>-<hash of the URL>/``)::

    meta/               manifest, labels and index files (small; outside the budget)
    shards/<crc>-<name> whole, checked shards (the crc in the name: a re-pack never serves stale bytes)
    shards/<...>.tmp    downloads in progress, created at their full size (so they count in the budget)
    locks/<...>.lock    one lock file per shard (never deleted)
    plans/<pid>.npy     each planning process's next use of every shard (see prefetch.py)
    budget.lock         taken while space is made and reserved

Protocol: readers hold a *shared* lock on a shard while they use it. Downloading and evicting
take the *exclusive* lock without waiting, and re-check the file after taking it (another process
may have finished the work in between). A download goes to ``.tmp``, is checked against the
manifest's size and CRC32C, and only then renamed into place; a failed check is retried, never served.

Eviction (under ``budget.lock``): among shards no one holds, the one whose next use is furthest
in the future (from every planning process's plan; a shard in no plan is furthest) goes first.
A prefetch (``strict``) only evicts shards needed later than the one it brings (Belady's rule), so
prefetching never evicts what is read sooner. A read that needs its shard now evicts any shard
no one holds; when every cached shard is held it waits for one to be let go, and only after
:data:`OVER_BUDGET_WAIT_S` exceeds the budget (with a warning) rather than stall training.
The budget and eviction live in :mod:`~fastdata.storage.budget`.
"""

from __future__ import annotations

import enum
import logging
import os
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import google_crc32c

from fastdata.storage import trace
from fastdata.storage.budget import TMP, CacheBudget
from fastdata.storage.locks import FileLock
from fastdata.storage.store import RemoteIOError, Store

logger = logging.getLogger(__name__)

RETRY_DELAYS_S = (0.05, 0.2, 1.0)  # attempt 2, 3, 4 wait this long first
OVER_BUDGET_WAIT_S = 10.0  # a reader waits this long for room before it exceeds the budget


class DownloadError(RemoteIOError):
    """A shard could not be downloaded intact (every attempt failed or was corrupt)."""


class Fetch(enum.Enum):
    """What :meth:`ShardCache.fetch` did."""

    DONE = "done"  # the shard is in the cache
    BUSY = "busy"  # another process holds the shard (downloading, evicting or reading it)
    NO_ROOM = "no_room"  # a strict fetch found no shard it may evict


@dataclass(frozen=True)
class CachedShard:
    """What the cache needs to know of one shard (from the manifest)."""

    rel: str
    nbytes: int
    crc32c: str

    @property
    def name(self) -> str:
        """The cached copy's file name: its CRC32C and its path in the pack, so a changed shard never matches."""
        return f"{self.crc32c}-{self.rel.replace('/', '__')}"


class Hold:
    """A shared lock on a cached shard: it is not evicted while held. Call :meth:`release` when done."""

    def __init__(self, shard: int, path: Path, lock: FileLock) -> None:
        self.shard = shard
        self.path = path
        self.lock = lock
        self.inode = os.stat(path).st_ino

    def release(self) -> None:
        """Release the shared lock: the shard may be evicted again."""
        self.lock.release()


@dataclass
class Claim:
    """A shard whose download this process took (:meth:`ShardCache.claim`): its exclusive lock and reserved room."""

    shard: int
    lock: FileLock


def minimum_budget(sizes: Sequence[int], prefetch: int) -> int:
    """The smallest workable ``cache_limit``: the prefetch window plus the shard being read, at the largest shard."""
    return (int(prefetch) + 1) * max(sizes, default=0)


class ShardCache(CacheBudget):
    """The cached copies of one dataset's shards, shared by every process of the node.

    Args:
        root: this dataset's cache folder (created if missing).
        store: where the shards are downloaded from.
        shards: the manifest's shards, in order.
        limit: byte budget for ``shards/`` (None: unlimited).
        retries: download attempts per shard before :class:`DownloadError`.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        store: Store,
        shards: Sequence[CachedShard],
        limit: int | None,
        *,
        retries: int = 4,
    ) -> None:
        self.root = Path(root)
        self.store = store
        self.adopt(shards)
        self.limit = limit
        self.retries = retries
        for sub in ("shards", "locks", "plans"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self._warned = False
        self.live_plans = 0

    def __getstate__(self) -> dict:
        """Pickles without its shard list (O(shards)): the owner hands it back with :meth:`adopt`."""
        state = dict(self.__dict__)
        state.update(shards=None, _index=None)
        return state

    def adopt(self, shards: Sequence[CachedShard]) -> None:
        """Take the shard list, in the manifest's order (at construction, and again in an unpickled copy)."""
        self.shards = list(shards)
        self._index = {s.name: i for i, s in enumerate(self.shards)}

    # -- paths -----------------------------------------------------------------------------------
    def path(self, shard: int) -> Path:
        """Where the cached copy of shard number ``shard`` lives (whether it is there or not)."""
        return self.root / "shards" / self.shards[shard].name

    def _tmp(self, shard: int) -> Path:
        return self.path(shard).with_name(self.shards[shard].name + TMP)

    def _lock(self, name: str) -> FileLock:
        return FileLock(self.root / "locks" / (name + ".lock"))

    def present(self, shard: int) -> bool:
        """True when the whole shard is in the cache (no lock taken: it may be evicted right after)."""
        try:
            return os.stat(self.path(shard)).st_size == self.shards[shard].nbytes
        except FileNotFoundError:
            return False

    def downloading(self, shard: int) -> bool:
        """True while some process of the node downloads the shard (its ``.tmp`` exists; no lock taken)."""
        return self._tmp(shard).exists()

    def last_download_ns(self, shard: int) -> int:
        """When the shard was last downloaded into this cache by any process of the node (``time.time_ns()``; 0: never).

        Kept in the first 8 bytes of the shard's lock file (lock files are never deleted and hold nothing else), so
        it outlives the shard's eviction: the prefetcher asks it before bringing back a shard of a batch in flight.
        """
        try:
            with open(self.root / "locks" / (self.shards[shard].name + ".lock"), "rb") as f:
                stamp = f.read(8)
        except FileNotFoundError:
            return 0
        return struct.unpack("<q", stamp)[0] if len(stamp) == 8 else 0

    def _stamp(self, shard: int) -> None:
        fd = os.open(self.root / "locks" / (self.shards[shard].name + ".lock"), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC)
        try:
            os.pwrite(fd, struct.pack("<q", time.time_ns()), 0)
        finally:
            os.close(fd)

    # -- readers ---------------------------------------------------------------------------------
    def try_hold(self, shard: int) -> Hold | Fetch | None:
        """Hold the shard if cached; ``Fetch.BUSY`` while another process downloads or evicts it; None if absent."""
        lock = self._lock(self.shards[shard].name)
        if not lock.acquire(exclusive=False, blocking=False):
            lock.release()
            return Fetch.BUSY
        if self.present(shard):
            return Hold(shard, self.path(shard), lock)
        lock.release()
        return None

    def hold(self, shard: int) -> Hold:
        """Hold the shard, waiting for another process's download or downloading it here.

        Raises:
            DownloadError: the shard could not be downloaded intact.
        """
        deadline = time.monotonic() + OVER_BUDGET_WAIT_S
        while True:
            lock = self._lock(self.shards[shard].name)
            lock.acquire(exclusive=False)  # waits while someone downloads or evicts it
            if self.present(shard):
                return Hold(shard, self.path(shard), lock)
            lock.release()
            result = self.fetch(shard, next_use=0, strict=False, exceed=time.monotonic() > deadline)
            if result is Fetch.BUSY:
                time.sleep(0.001)  # another process is at it: wait for it on the shared lock
            elif result is Fetch.NO_ROOM:
                time.sleep(0.02)  # every cached shard is in use: wait for a reader to let one go

    # -- downloads -------------------------------------------------------------------------------
    def fetch(self, shard: int, *, next_use: float = 0, strict: bool = False, exceed: bool = False) -> Fetch:
        """Bring the shard into the cache unless another process is at it (:meth:`claim`, then :meth:`complete`).

        Raises:
            DownloadError: every attempt failed or was corrupt.
        """
        claim = self.claim(shard, next_use=next_use, strict=strict, exceed=exceed)
        if isinstance(claim, Fetch):
            return claim
        self.complete(claim)
        return Fetch.DONE

    def claim(self, shard: int, *, next_use: float = 0, strict: bool = False, exceed: bool = False) -> Claim | Fetch:
        """Take the shard's download: its exclusive lock and its room in the budget (a full-size ``.tmp``).

        Args:
            shard: shard number.
            next_use: how far ahead (in samples) the shard is needed; eviction keeps shards needed sooner.
            strict: a prefetch: evict only shards needed later than ``next_use``.
            exceed: when no unheld shard is left to evict, exceed the budget (with a warning) instead
                of returning ``NO_ROOM``.

        Returns:
            A :class:`Claim` to pass to :meth:`complete` (any thread), or what happened instead:
            ``DONE`` (already cached), ``BUSY`` (another process is at it), ``NO_ROOM``.
        """
        lock = self._lock(self.shards[shard].name)
        if not lock.acquire(exclusive=True, blocking=False):
            lock.release()
            return Fetch.BUSY
        try:
            if self.present(shard):
                lock.release()
                return Fetch.DONE
            if not self._reserve(shard, next_use, strict, exceed and not strict):
                lock.release()
                return Fetch.NO_ROOM
        except BaseException:
            lock.release()
            raise
        return Claim(shard, lock)

    def complete(self, claim: Claim) -> None:
        """Download a claimed shard (checked, retried), publish it and release the claim.

        Raises:
            DownloadError: every attempt failed or was corrupt (nothing is left in the cache).
        """
        try:
            self._download(claim.shard)
        finally:
            claim.lock.release()

    def _download(self, shard: int) -> None:
        info = self.shards[shard]
        tmp = self._tmp(shard)
        last = ""
        try:
            for attempt in range(self.retries):
                if attempt:
                    time.sleep(RETRY_DELAYS_S[min(attempt, len(RETRY_DELAYS_S)) - 1])
                try:
                    problem = self._download_once(info, tmp)
                except RemoteIOError as exc:
                    problem = str(exc)
                    trace.event("error", shard)
                else:
                    if not problem:
                        with self._budget_lock():  # a rename while another process sums the folder could hide a file
                            os.replace(tmp, self.path(shard))
                            self._stamp(shard)
                            if trace.enabled():
                                trace.event("ready", shard, os.stat(self.path(shard)).st_ino, self.used_bytes())
                        return
                    trace.event("corrupt", shard)
                last = problem
                logger.warning(
                    "download %d/%d of %s failed: %s",
                    attempt + 1,
                    self.retries,
                    self.store.location.child(info.rel),
                    problem,
                )
        finally:
            tmp.unlink(missing_ok=True)
        raise DownloadError(
            f"{self.store.location.child(info.rel)} could not be downloaded intact in {self.retries} "
            f"attempts (last: {last}); if this persists, check the network or run "
            f"`fastdata verify {self.store.url}`"
        )

    def _download_once(self, info: CachedShard, tmp: Path) -> str:
        """One GET into ``tmp``; returns what was wrong with it ('' when size and CRC32C match)."""
        crc = google_crc32c.Checksum()
        received = 0
        trace.event("get", self._index[info.name])
        with open(tmp, "r+b" if tmp.exists() else "wb") as f:
            for chunk in self.store.stream(info.rel):
                received += len(chunk)
                if received > info.nbytes:
                    return f"body is longer than the {info.nbytes} bytes the manifest says"
                f.write(chunk)
                crc.update(chunk)
        if received != info.nbytes:
            return f"received {received} of {info.nbytes} bytes (truncated body)"
        actual = crc.hexdigest().decode()
        if actual != info.crc32c:
            return f"CRC32C {actual} != {info.crc32c} in the manifest (corrupted body)"
        return ""
