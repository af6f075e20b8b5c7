"""One pass's plan: which shard each upcoming sample needs, and when.

One pass's plan (:class:`PassPlan`): which shard each upcoming sample of the pass needs and when, fed by the
loader's index stream and read by the prefetcher: each shard's distance to its next use (in samples, from the sample
presumed being read), whether downloading it pays off under a budget, and the shards to bring next in order of need.
"""

from __future__ import annotations

import threading

import numpy as np


class PassPlan:
    """Which shard each upcoming sample of one pass needs. Thread-safe: fed by the loader, read by the prefetcher.

    Args:
        starts: first sample of each shard plus the total (the dataset's shard offsets).
    """

    def __init__(self, starts: np.ndarray) -> None:
        self._starts = np.asarray(starts, dtype=np.int64)
        self._chunks: list[np.ndarray] = []
        self._array = np.zeros(0, np.int64)  # shards of positions [_base, fed)
        self._base = 0
        self.fed = 0  # samples planned (read from the sampler)
        self.dispatched = 0  # samples handed to the loader
        self.cursor = 0  # samples presumed read
        self.exhausted = False
        self._lock = threading.Lock()

    @property
    def num_shards(self) -> int:
        """The number of shards in the pack."""
        return len(self._starts) - 1

    def push(self, indices: np.ndarray) -> None:
        """Append the next samples of the pass."""
        shards = np.searchsorted(self._starts, indices, side="right") - 1
        with self._lock:
            self._chunks.append(shards.astype(np.int64, copy=False))
            self.fed += len(shards)

    def dispatch(self, n: int) -> None:
        """``n`` more samples were handed to the loader (its workers read them soon)."""
        with self._lock:
            self.dispatched += n

    def advance(self, n: int) -> None:
        """``n`` more samples were read."""
        with self._lock:
            self.cursor += n

    @property
    def in_flight(self) -> int:
        """Samples handed to the loader but presumed not read yet."""
        return self.dispatched - self.cursor

    def _view(self) -> tuple[np.ndarray, int]:
        with self._lock:
            if self._chunks:
                self._array = np.concatenate([self._array, *self._chunks])
                self._chunks = []
            drop = self.cursor - self._base
            if drop > 0:
                self._array = self._array[drop:]
                self._base = self.cursor
            return self._array, self._base

    def distances(self) -> np.ndarray:
        """Per shard, samples until its next use (0: in use now), -1 when it is not planned."""
        return self.usage(None)[0]

    def usage(self, near: int | None) -> tuple[np.ndarray, np.ndarray]:
        """Per shard: samples until its next use (-1: not planned), and whether a download of it pays off.

        A download pays off when reads of at least half of the shard's samples fall within the next
        ``near`` samples (about what the cache can hold, so the shard is still cached when they come);
        ``near=None`` (no budget): always. A shard read in one stretch (a blocks order) always pays off;
        one sample of it now and then (a full shuffle on a small cache) does not: ranged reads serve it.
        """
        array, base = self._view()
        distances = np.full(self.num_shards, -1, dtype=np.int64)
        if len(array):
            shards, first = np.unique(array, return_index=True)
            distances[shards] = first + (base - self.cursor)
        if near is None:
            return distances, distances >= 0
        soon = np.bincount(array[: max(self.cursor - base, 0) + near], minlength=self.num_shards)
        return distances, (distances >= 0) & (2 * soon >= self._sizes)

    @property
    def _sizes(self) -> np.ndarray:
        return np.diff(self._starts)

    @staticmethod
    def upcoming(
        distances: np.ndarray, count: int, worth: np.ndarray | None = None, in_flight: int = 0
    ) -> list[tuple[int, int]]:
        """The shards in use now (the samples in flight) and the next ``count`` distinct ones, by first use.

        ``worth`` (optional mask): only those shards are considered.
        """
        planned = np.flatnonzero((distances >= 0) if worth is None else worth)
        order = planned[np.argsort(distances[planned], kind="stable")]
        now = int(np.count_nonzero(distances[order] < max(in_flight, 1)))
        return [(int(s), int(distances[s])) for s in order[: now + count]]
