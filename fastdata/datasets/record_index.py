"""Where the records of a shard lie, loaded when a process first reads the shard, kept in a small bounded LRU.

A TFRecord shard's records are found through its ``.idx`` (``(position, size)`` of each record); reading and checking
every index when a dataset opens would cost time in the number of shards on every rank, and keeping them all would
cost 16 bytes a sample in every process. :class:`RecordIndex` holds the arrays of the shards a process is reading
now (at most :data:`MAX_SHARDS` shards, as many as it keeps open, and :data:`MAX_RECORDS` records, the least recently
used dropped first; a dropped shard's index is read again if it is needed again). It pickles empty, so a worker starts
with nothing and loads what it reads; a forked worker keeps what its parent had loaded (numpy arrays, shared until
written).
"""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from fastdata.formats.open_readers import CEILING

__all__ = ["MAX_RECORDS", "MAX_SHARDS", "RecordIndex"]

MAX_SHARDS = CEILING  # shard indexes one process keeps: as many as it keeps shards open (a full shuffle over more
# shards than this re-reads an index on most reads: a 1,000-line .idx costs ~70 us to read, check and parse)
MAX_RECORDS = 1 << 20  # records they may hold together (16 MB of int64 pairs; 1,024 shards of 1,000 records
# fit); the newest shard is always kept

Located = tuple[np.ndarray, ...]  # per record of the shard: (positions, sizes), or a pack's (labels,)


class RecordIndex:
    """A per-process LRU of each shard's per-record arrays.

    A per-process LRU of shard → a tuple of per-record int64 arrays (``(positions, sizes)``, or a pack's
    ``(labels,)``: :class:`~fastdata.datasets.shard_source.ShardSource` keeps one of each).

    Args:
        max_shards: shards kept at most.
        max_records: records kept at most over all shards (the shard just loaded is kept whatever its size).
    """

    def __init__(self, max_shards: int = MAX_SHARDS, max_records: int = MAX_RECORDS) -> None:
        self.max_shards = int(max_shards)
        self.max_records = int(max_records)
        self._reset()

    def _reset(self) -> None:
        self._entries: collections.OrderedDict[int, Located] = collections.OrderedDict()
        self._records = 0
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def get(self, shard: int, load: Callable[[int], Located]) -> Located:
        """The arrays of ``shard``, cached or from ``load(shard)`` (called outside the lock; its errors pass)."""
        if self._pid != os.getpid():  # forked: the arrays are still good, a lock held by another thread is not
            self._lock = threading.Lock()
            self._pid = os.getpid()
        with self._lock:
            entry = self._entries.get(shard)
            if entry is not None:
                self._entries.move_to_end(shard)
                return entry
        entry = load(shard)
        with self._lock:
            if shard not in self._entries:
                self._entries[shard] = entry
                self._records += len(entry[0])
            while len(self._entries) > 1 and (len(self._entries) > self.max_shards or self._records > self.max_records):
                _, dropped = self._entries.popitem(last=False)
                self._records -= len(dropped[0])
        return entry

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Drop every shard's arrays."""
        with self._lock:
            self._entries.clear()
            self._records = 0

    def __getstate__(self) -> dict[str, Any]:
        return {"max_shards": self.max_shards, "max_records": self.max_records}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()
