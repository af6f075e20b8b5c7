"""``RemoteShards``: what ``ShardDataset`` uses to read a dataset at a URL through the node's cache.

Construction mirrors the small files (manifest, labels, index files: TFRecord ``.idx``, LMDB ``.loc``) into the
cache folder, so ``ShardDataset`` builds its index exactly as for a local pack. A read then:

1. uses a shard this process already holds (a shared lock; up to :data:`MAX_HELD` shards, fewer
   under a tight budget or a lower ``max_open_shards``; idle ones and those no plan needs any more are
   released so that eviction can reclaim them, the least recently used when one more must be held), else
2. holds the shard if it is cached, else
3. for TFRecord, serves the one record by a ranged GET (CRC-checked) while the shard is being
   downloaded or is planned by a prefetcher on this node, so nobody waits for whole shards, else
4. waits for the shard's download by another process, or downloads it here (once per node).
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from fastdata._util.fs import atomic_write_bytes
from fastdata._util.sizes import parse_size
from fastdata.formats import get_format
from fastdata.formats.base import CorruptRecordError, DatasetChangedError, ShardReaderBase
from fastdata.formats.files import inside
from fastdata.formats.manifest import MANIFEST_NAME, Manifest
from fastdata.formats.open_readers import check_max_open_shards, default_max_open_shards
from fastdata.storage import trace
from fastdata.storage.cache import CachedShard, Fetch, Hold, ShardCache, minimum_budget
from fastdata.storage.locks import FileLock
from fastdata.storage.pass_plan import PassPlan
from fastdata.storage.prefetch import Prefetcher, planned
from fastdata.storage.remote import get_store
from fastdata.storage.store import Store
from fastdata.storage.urls import default_cache_dir, url_id

logger = logging.getLogger(__name__)

MAX_HELD = 64  # shards one process keeps open (and locked) at most; fewer under a budget (see _max_held)
BUDGET_SHARE_HELD = 32  # under a budget, one process holds at most 1/32 of the shards it fits (at least 1)
HELD_IDLE_S = 0.5  # a held shard unused this long is released
_PLAN_REFRESH_S = 0.1  # how long a process trusts its view of the node's plans
_RANGE_ATTEMPTS = 3


def fetch_manifest(store: Store, *, compact: bool = False) -> tuple[Manifest, bytes]:
    """The dataset's manifest and its raw bytes.

    The dataset's manifest (always read afresh) and its raw bytes; ``compact`` as
    :meth:`~fastdata.formats.manifest.Manifest.from_dict`.

    Raises:
        FileNotFoundError: no manifest at the URL (not a finished fastdata pack).
    """
    try:
        raw = store.read(MANIFEST_NAME)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"no {MANIFEST_NAME} at {store.url}: not a finished fastdata pack (pack one with "
            f"`fastdata pack SRC {store.url} --format tfrecord|lmdb`)"
        ) from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(
            f"{store.url}/{MANIFEST_NAME} is not valid JSON ({exc}): re-create it with `fastdata pack`"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"{store.url}/{MANIFEST_NAME} is not a fastdata manifest (top level is not an object)")
    return Manifest.from_dict(data, source=f"{store.url}/{MANIFEST_NAME}", compact=compact), raw


def mirror_metadata(store: Store, dest: Path) -> tuple[Manifest, Path]:
    """Download the manifest, labels and index files of a remote dataset.

    Download the manifest, labels and index files into ``dest/meta/<manifest hash>/``; return the manifest and that
    folder.

    The folder is keyed by the manifest's bytes, so a re-pack at the same URL never reuses stale
    index files; files already there are not downloaded again (one process of the node does it).
    """
    manifest, raw = fetch_manifest(store, compact=True)
    meta = dest / "meta" / _manifest_key(raw)
    meta.mkdir(parents=True, exist_ok=True)
    wanted = manifest.side_files + [s.index for s in manifest.shards if s.index]
    with FileLock(meta / ".lock") as lock:
        lock.acquire(exclusive=True)
        missing = [rel for rel in wanted if not (meta / rel).is_file()]
        with ThreadPoolExecutor(min(16, max(1, len(missing)))) as pool:
            for rel, data in zip(missing, pool.map(store.read, missing), strict=False):
                (meta / rel).parent.mkdir(parents=True, exist_ok=True)
                atomic_write_bytes(meta / rel, data)
        if not (meta / MANIFEST_NAME).is_file():
            atomic_write_bytes(meta / MANIFEST_NAME, raw)
    return manifest, meta


def _manifest_key(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()[:16]


def _mirrored_manifest(meta: Path) -> Manifest:
    """The manifest mirrored in ``meta`` (an unpickled :class:`RemoteShards`), checked against the folder's key.

    Raises:
        DatasetChangedError: the file is gone or is not the manifest the folder was made for.
    """
    try:
        raw = (meta / MANIFEST_NAME).read_bytes()
    except OSError as exc:
        raise DatasetChangedError(
            f"{meta / MANIFEST_NAME} was removed after this dataset was opened ({exc}); open the dataset again"
        ) from None
    if _manifest_key(raw) != meta.name:
        raise DatasetChangedError(
            f"{meta / MANIFEST_NAME} changed after this dataset was opened (not the manifest "
            f"its folder {meta.name} was made for); clear the cache folder and open it again"
        )
    return Manifest.from_dict(json.loads(raw.decode("utf-8")), source=str(meta / MANIFEST_NAME), compact=True)


def parse_limit(cache_limit: int | str | None) -> int | None:
    """``cache_limit`` in bytes: an int, a size such as ``"200GB"`` / ``"512MiB"``, or None (no limit).

    Raises:
        ValueError: not a positive size.
    """
    if cache_limit is None:
        return None
    if isinstance(cache_limit, str):
        try:
            cache_limit = parse_size(cache_limit)
        except ValueError as exc:
            raise ValueError(f"cache_limit={cache_limit!r} is not a size: pass bytes or e.g. '200GB'") from exc
    if isinstance(cache_limit, bool) or not isinstance(cache_limit, (int, np.integer)) or cache_limit <= 0:
        raise ValueError(
            f"cache_limit={cache_limit!r} must be a positive number of bytes, a size such as '200GB', "
            "or None for no limit"
        )
    return int(cache_limit)


class RemoteShards:
    """The shards of a dataset at a URL, read through the node-local cache (see the module docstring).

    Args:
        url: the dataset URL.
        cache_dir: the node's cache folder (default :func:`~fastdata.storage.urls.default_cache_dir`).
        cache_limit: byte budget of this dataset's cached shards (None: no limit).
        prefetch: shards downloaded ahead of the reader (and at once).
        max_open_shards: shards one process holds open at most (None: the per-process default of
            :func:`~fastdata.formats.open_readers.default_max_open_shards`, each held shard counting two
            descriptors: its reader and its lock).

    Raises:
        ValueError: ``cache_limit`` is below :func:`~fastdata.storage.cache.minimum_budget`, ``prefetch < 1``
            or ``max_open_shards < 1``.
        TypeError: ``max_open_shards`` is not an int or None.
        FileNotFoundError: no manifest at ``url``.
    """

    def __init__(
        self,
        url: str,
        *,
        cache_dir: str | os.PathLike | None,
        cache_limit: int | str | None,
        prefetch: int,
        max_open_shards: int | None = None,
    ) -> None:
        self.max_open_shards = check_max_open_shards(max_open_shards)
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1:
            raise ValueError(f"prefetch={prefetch!r} must be an int >= 1 (shards downloaded ahead), e.g. prefetch=4")
        self.store = get_store(url)
        self.url = self.store.url
        self.root = Path(cache_dir if cache_dir is not None else default_cache_dir()) / url_id(self.url)
        self.manifest, self.meta_root = mirror_metadata(self.store, self.root)
        limit = parse_limit(cache_limit)
        sizes = [s.nbytes for s in self.manifest.shards]
        needed = minimum_budget(sizes, prefetch)
        if limit is not None and limit < needed:
            raise ValueError(
                f"cache_limit={limit} bytes is too small for {self.url}: the minimum is {needed} bytes "
                f"({prefetch} shards prefetched + 1 being read, x the largest shard of {max(sizes)} bytes); "
                f"raise cache_limit to at least {needed} or lower prefetch"
            )
        self.cache = ShardCache(self.root, self.store, _cached(self.manifest), limit)
        self.prefetch = prefetch
        # Held shards cannot be evicted; each reopen costs ~30 us (TFRecord) to ~110 us (LMDB) per sample.
        fits = MAX_HELD * BUDGET_SHARE_HELD if limit is None else limit // max(max(sizes, default=1), 1)
        self._budget_held = max(1, min(MAX_HELD, fits // BUDGET_SHARE_HELD))
        self.format = get_format(self.manifest.format)
        self.ranged = self.manifest.format == "tfrecord"
        self._changed: DatasetChangedError | None = None  # an unpickled copy whose mirrored manifest changed
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        # read in each process: a worker_init_fn may have changed this process's descriptor limit
        cap = self.max_open_shards if self.max_open_shards is not None else default_max_open_shards(per_shard=2)
        self._max_held = min(self._budget_held, cap)
        self._held: collections.OrderedDict[int, tuple[Hold, ShardReaderBase, float]] = collections.OrderedDict()
        self._prefetcher: Prefetcher | None = None
        self._plans: tuple[float, np.ndarray, int] | None = None  # (read at, next uses, live plans)
        self._last_sweep = 0.0

    # -- reads -------------------------------------------------------------------------------------
    def read(self, shard: int, position: int, size: int) -> tuple[bytes, int | None]:
        """The record at ``position`` (``size`` bytes) of ``shard``: image bytes and its stored label, if any.

        Raises:
            CorruptRecordError: the record is damaged.
            DownloadError: the shard could not be downloaded intact.
            DatasetChangedError: an unpickled copy found the mirrored manifest changed.
        """
        if self._changed is not None:
            raise self._changed
        if self._pid != os.getpid():
            self._reset()  # forked: the parent's locks and readers are not ours
        now = time.monotonic()
        if now - self._last_sweep > _PLAN_REFRESH_S:
            self._release_idle(now)
        entry = self._held.get(shard)
        if entry is None:
            got = self.cache.try_hold(shard)
            if not isinstance(got, Hold):
                if self.ranged and (got is Fetch.BUSY or self._planned(shard)):
                    return self._read_range(shard, position, size)
                for held in list(self._held):  # let others (and eviction) have them while this one arrives
                    self._release(held)
                got = self.cache.hold(shard)
            while len(self._held) >= self._max_held:  # the least recently used goes first: never more readers open
                self._release(next(iter(self._held)))
            try:
                info = self.manifest.shards[shard]  # an LMDB shard's .loc sidecar lies in the mirrored metadata
                index = inside(self.meta_root, info.index) if info.index else None
                entry = (got, self.format.reader(got.path, expected=info, index=index), now)
            except BaseException:
                got.release()
                raise
            self._held[shard] = entry
        hold, reader, _ = entry
        self._held[shard] = (hold, reader, now)
        self._held.move_to_end(shard)
        if trace.enabled():
            trace.event("read", shard, hold.inode)
        return reader.read(position, size)

    def _read_range(self, shard: int, position: int, size: int) -> tuple[bytes, int | None]:
        from fastdata.formats.example import decode_example
        from fastdata.formats.tfrecord_framing import unframe

        rel = self.manifest.shards[shard].path
        where = self.store.location.child(rel)
        problem: Exception | None = None
        for _ in range(_RANGE_ATTEMPTS):
            buf = self.store.read(rel, position, size)
            trace.event("range", shard)
            try:
                record = decode_example(unframe(buf, shard=where, offset=position))
                return record.image, record.label
            except (CorruptRecordError, ValueError) as exc:  # a damaged transfer: read it again
                problem = exc
                logger.warning("ranged read of %s at %d was damaged (%s); retrying", where, position, exc)
        raise CorruptRecordError(where, position, f"{_RANGE_ATTEMPTS} ranged reads were damaged (last: {problem})")

    def _planned(self, shard: int) -> bool:
        """True when a prefetcher on this node plans to download the shard (so a ranged read beats waiting).

        A "yes" is trusted for a short while; a "no" is always checked against the plans as they are now
        (a new pass may have just started).
        """
        plans = self._plan_view(time.monotonic())
        if not np.isfinite(plans[shard]):
            plans = self._plan_view(time.monotonic(), fresh=True)
        return bool(np.isfinite(plans[shard]))

    def _plan_view(self, now: float, *, fresh: bool = False) -> np.ndarray:
        """The node's plans (next use per shard), re-read at most every :data:`_PLAN_REFRESH_S` unless ``fresh``."""
        if fresh or self._plans is None or now - self._plans[0] > _PLAN_REFRESH_S:
            self._plans = (now, self.cache.next_uses(), self.cache.live_plans)
        return self._plans[1]

    def _release(self, shard: int) -> None:
        hold, reader, _ = self._held.pop(shard)
        reader.close()
        hold.release()

    def _release_idle(self, now: float) -> None:
        """Let go of held shards unused for :data:`HELD_IDLE_S`, or that no plan on the node needs any more."""
        self._last_sweep = now
        plans = self._plan_view(now) if self._held else None
        planning = self._plans is not None and self._plans[2] > 0
        for shard, (_, _, used) in list(self._held.items()):
            if now - used > HELD_IDLE_S or (planning and plans is not None and not np.isfinite(plans[shard])):
                self._release(shard)

    # -- planning ----------------------------------------------------------------------------------
    def plan(self, order: Any, starts: np.ndarray, *, lag: int = 0) -> Any:
        """Wrap a pass's index stream so the shards it needs are downloaded ahead (see :func:`planned`)."""
        if self._changed is not None:
            return order  # nothing to plan: every read raises
        if self._pid != os.getpid():
            self._reset()
        if self._prefetcher is None:
            near = None
            if self.cache.limit is not None:  # about how many samples the budget holds
                total = sum(s.nbytes for s in self.manifest.shards)
                near = int(self.cache.limit * self.manifest.num_samples / max(total, 1))
            self._prefetcher = Prefetcher(self.cache, self.prefetch, near=near, bypass=self.ranged)
        return planned(order, PassPlan(starts), self._prefetcher, lag=lag)

    def close(self) -> None:
        """Release every held shard and stop the prefetcher."""
        if self._pid != os.getpid():
            self._reset()
            return
        for shard in list(self._held):
            self._release(shard)
        if self._prefetcher is not None:
            self._prefetcher.close()
            self._prefetcher = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickles in a few KB whatever the shards: the manifest is read again from the mirrored copy."""
        state = self.__dict__.copy()
        state.update(_held=collections.OrderedDict(), _prefetcher=None, _plans=None, _pid=-1, manifest=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        try:
            self.manifest = _mirrored_manifest(self.meta_root)
        except DatasetChangedError as exc:  # raised by the first read, not in a worker's start-up
            self._changed = exc
        self.cache.adopt(_cached(self.manifest) if self._changed is None else [])
        self._reset()


def _cached(manifest: Manifest) -> list[CachedShard]:
    return [CachedShard(s.path, s.nbytes, s.crc32c) for s in manifest.shards]
