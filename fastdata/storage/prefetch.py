"""Prefetch in sampler order: the shards the next batches need are downloaded ahead, a few at a time.

:func:`planned` wraps a pass's index stream (in the main process, where the sampler runs): it reads
up to :data:`PLAN_HORIZON` indices ahead of what it hands out, so the pass's
:class:`~fastdata.storage.pass_plan.PassPlan` knows which shard each upcoming sample needs and when.
A :class:`Prefetcher` thread then claims the shards of the batches in flight (unless downloaded and evicted in
this pass already: their reads may be over) plus the next ``window`` distinct ones, strictly in order of first
use (a shard needed later never takes the room one needed sooner waits for), and downloads up to ``window`` at
once. It publishes the plan (each shard's next use) to the cache folder, where eviction in any process of the
node reads it: the shard needed furthest in the future goes first.

Under a budget, a TFRecord shard is downloaded only if reads of at least half its samples come
while it would still be cached (:meth:`PassPlan.usage`); the others are served record by record
by ranged GETs, so a full shuffle on a small cache does not thrash.

Distances are in samples of this process's stream, counted from the sample presumed being read:
an index handed to the loader counts as read only ``lag`` items later (the batches the workers
hold), so shards of dispatched batches are never "in the past".
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Generator, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from fastdata.storage import trace
from fastdata.storage.cache import Claim, DownloadError, Fetch, ShardCache
from fastdata.storage.pass_plan import PassPlan

logger = logging.getLogger(__name__)

#: How many indices of a pass are read ahead of the loader to plan downloads and eviction.
PLAN_HORIZON = 65536
_POLL_S = 0.05  # the prefetcher re-checks at least this often (a shard freed, a budget freed)
_MIN_STEP_S = 0.01  # at least this long between planning steps (each is a np.unique over the horizon)
_IDLE_EXIT_S = 5.0  # a prefetcher without a pass stops its thread after this long
_BUSY_TRIES = 5  # claims of a shard whose lock a reader holds for a moment (it looks whether the shard is cached)
_BUSY_WAIT_S = 0.001
_END = object()


class Prefetcher:
    """Keeps the shards in use and the next ``window`` ones of the current pass coming (``window`` downloads at once).

    Args:
        cache: the node's shard cache.
        window: distinct shards ahead to download (and concurrent downloads).
        near: samples the cache holds about (None: no budget); shards whose reads are spread wider
            are left to ranged reads when ``bypass`` (see :meth:`PassPlan.usage`).
        bypass: readers can serve single records without the shard (TFRecord's ranged reads).
    """

    def __init__(self, cache: ShardCache, window: int, *, near: int | None = None, bypass: bool = False) -> None:
        self.cache = cache
        self.window = int(window)
        self.near = near if bypass else None
        self._plan: PassPlan | None = None
        self._cond = threading.Condition()
        self._dirty = False  # something changed since the last step
        self._inflight: set[int] = set()
        self._failed: set[int] = set()
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._stop = False
        self._pass_started_ns = 0  # wall clock (as the cache's download stamps) when the current pass started
        # One planning step at a time (start_pass steps on the caller's thread, _run on its own), and only for the
        # current pass: a step of the pass just replaced must not publish its plan over the new one.
        self._step_lock = threading.Lock()

    def start_pass(self, plan: PassPlan) -> None:
        """Make ``plan`` the current pass: publish it and start its first downloads now."""
        with self._cond:
            self._plan = plan
            self._pass_started_ns = time.time_ns()
            self._failed.clear()
            if self._thread is None or not self._thread.is_alive():
                self._stop = False
                self._pool = self._pool or ThreadPoolExecutor(max(1, self.window), thread_name_prefix="fastdata-fetch")
                self._thread = threading.Thread(target=self._run, name="fastdata-prefetch", daemon=True)
                self._thread.start()
        self._step(plan)

    def end_pass(self, plan: PassPlan) -> None:
        """The pass was abandoned: stop planning for it."""
        with self._step_lock, self._cond:
            if self._plan is plan:
                self._plan = None
                self.cache.publish_plan(None)
            self._cond.notify_all()

    def notify(self) -> None:
        """The cursor moved: look again."""
        with self._cond:
            self._dirty = True
            self._cond.notify_all()

    def close(self) -> None:
        """Stop the thread and remove the plan (downloads in progress finish)."""
        with self._cond:
            self._stop = True
            self._plan = None
            self._cond.notify_all()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        with self._step_lock:
            self.cache.publish_plan(None)

    def _run(self) -> None:
        idle_since = last_step = time.monotonic()
        while True:
            with self._cond:
                self._cond.wait(_POLL_S)
                plan, stop, dirty = self._plan, self._stop, self._dirty or bool(self._inflight)
                if stop or (not dirty and time.monotonic() - idle_since > _IDLE_EXIT_S):
                    self._thread = None  # the plan file stays: the last items may still be read
                    return
            if plan is None or not dirty:
                continue
            pause = _MIN_STEP_S - (time.monotonic() - last_step)
            if pause > 0:
                time.sleep(pause)
            idle_since = last_step = time.monotonic()
            try:
                self._step(plan)
            except Exception:  # noqa: BLE001 - a failed look-ahead must not kill the thread; readers fall back
                logger.exception("fastdata prefetch: planning step failed")

    def _step(self, plan: PassPlan) -> None:
        """Claim the upcoming shards in order of need (room is taken in that order), download them in the pool."""
        with self._step_lock:
            with self._cond:
                if plan is not self._plan:
                    return  # replaced or ended while this step waited: its plan is stale
                self._dirty = False
            self._plan_step(plan)

    def _plan_step(self, plan: PassPlan) -> None:
        distances, worth = plan.usage(self.near)
        self.cache.publish_plan(distances)  # eviction compares these with the distances given to claim()
        for shard, distance in PassPlan.upcoming(distances, self.window, worth, plan.in_flight):
            with self._cond:
                if self._stop or self._pool is None:
                    return
                if shard in self._inflight or shard in self._failed or self.cache.present(shard):
                    continue
            if distance < plan.in_flight and self.cache.last_download_ns(shard) >= self._pass_started_ns:
                # A dispatched batch's shard, downloaded in this pass and evicted since: the cursor lags the workers
                # (it counts dispatched batches as unread), so its reads may be over. A reader that still needs it
                # brings it back itself; downloading it here could be a second download of a shard already read.
                continue
            claim = self._claim(shard, distance)
            if claim is Fetch.BUSY and self.cache.downloading(shard):
                self._retry_soon()  # another process brings it (its room is taken): look again soon
                continue
            if claim is Fetch.NO_ROOM or claim is Fetch.BUSY:
                self._retry_soon()
                return  # no shard needed later may take the room this one waits for
            if claim is Fetch.DONE:
                continue
            with self._cond:
                try:
                    self._pool.submit(self._download, claim)
                except RuntimeError:  # the pool is shut down (close() or interpreter exit)
                    claim.lock.release()
                    return
                self._inflight.add(shard)
            trace.event("prefetch", shard, distance)

    def _claim(self, shard: int, distance: int) -> Claim | Fetch:
        """Claim the shard for download; a lock taken only for a moment (a reader looking) is tried again."""
        for attempt in range(_BUSY_TRIES):
            if attempt:
                time.sleep(_BUSY_WAIT_S)
            claim = self.cache.claim(shard, next_use=distance, strict=True)
            if claim is not Fetch.BUSY or self.cache.downloading(shard):
                return claim
        return Fetch.BUSY

    def _retry_soon(self) -> None:
        with self._cond:
            self._dirty = True  # the next poll steps again

    def _download(self, claim: Claim) -> None:
        try:
            self.cache.complete(claim)
        except DownloadError as exc:
            logger.error("prefetch gave up on shard %d: %s", claim.shard, exc)
            with self._cond:
                self._failed.add(claim.shard)  # readers will try (and report) it themselves
        except Exception:  # noqa: BLE001 - readers fall back to their own download
            logger.exception("prefetch of shard %d failed", claim.shard)
            with self._cond:
                self._failed.add(claim.shard)
        finally:
            with self._cond:
                self._inflight.discard(claim.shard)
                self._dirty = True
                self._cond.notify_all()


def _indices(item: Any) -> np.ndarray:
    if isinstance(item, (int, np.integer)):
        return np.asarray([item], dtype=np.int64)
    return np.asarray(list(item), dtype=np.int64).reshape(-1)


class PlannedPass(Iterator[Any]):
    """The items of one pass, planned ahead (see :func:`planned`). :meth:`close` says the pass is over."""

    def __init__(self, items: Generator[Any, None, None], plan: PassPlan, prefetcher: Prefetcher) -> None:
        self._items, self._plan, self._prefetcher = items, plan, prefetcher

    def __next__(self) -> Any:
        return next(self._items)

    def close(self) -> None:
        """The loader is done with this pass, read to its end or abandoned: stop planning (and downloading) for it.

        Without this, a finished pass's last ``lag`` items would count as unread until the next pass starts,
        and shards already read would be downloaded for them.
        """
        self._items.close()
        self._prefetcher.end_pass(self._plan)


def planned(
    order: Iterable[Any], plan: PassPlan, prefetcher: Prefetcher, *, lag: int = 0, horizon: int = PLAN_HORIZON
) -> PlannedPass:
    """The items of ``order`` (indices or index batches) unchanged, planning downloads ahead of them.

    Args:
        order: the pass's indices, or batches of indices.
        plan: the pass's plan (fed here).
        prefetcher: started on the plan before the first item is handed out. When the items run out
            the plan stays current (its last ``lag`` items are still being read) until :meth:`PlannedPass.close`
            (the loader's pass is over), the next pass starts or the prefetcher is closed; an iterator closed or
            dropped before its end ends the plan at once.
        lag: items handed out that are presumed not read yet (the loader's batches in flight).
        horizon: indices to read ahead of the loader.
    """
    return PlannedPass(_planned_items(order, plan, prefetcher, lag, horizon), plan, prefetcher)


def _planned_items(
    order: Iterable[Any], plan: PassPlan, prefetcher: Prefetcher, lag: int, horizon: int
) -> Generator[Any, None, None]:
    source = iter(order)
    ahead: collections.deque[tuple[Any, int]] = collections.deque()
    in_flight: collections.deque[int] = collections.deque()
    planned_count = 0
    started = completed = False
    try:
        while True:
            while not plan.exhausted and planned_count < horizon:
                item = next(source, _END)
                if item is _END:
                    plan.exhausted = True
                    break
                indices = _indices(item)
                plan.push(indices)
                ahead.append((item, len(indices)))
                planned_count += len(indices)
            if not started:
                prefetcher.start_pass(plan)
                started = True
            if not ahead:
                completed = True  # the plan stays: the loader is still reading the last `lag` items
                return
            item, n = ahead.popleft()
            planned_count -= n
            plan.dispatch(n)
            in_flight.append(n)
            while len(in_flight) > lag:
                plan.advance(in_flight.popleft())
            prefetcher.notify()
            yield item
    finally:
        if not completed:  # abandoned (closed early): stop planning for it now
            prefetcher.end_pass(plan)
