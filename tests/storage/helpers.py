"""Small picklable pieces for the storage tests (spawned processes import this module, so it stays light)."""

from __future__ import annotations

import time

import google_crc32c
import numpy as np
from torch.utils.data import Sampler

from fastdata.storage.trace import read_events
from fastdata.transforms import DecodeTransform


class Crc(DecodeTransform):
    """Returns the CRC32C of the encoded image bytes instead of decoding them (compares bytes cheaply).

    ``seconds``: time each sample takes, like a decode would (0: none).
    """

    def __init__(self, seconds: float = 0.0) -> None:
        super().__init__()
        self.seconds = seconds

    def __call__(self, data: bytes) -> int:
        if self.seconds:
            time.sleep(self.seconds)
        return google_crc32c.value(data)


class ShardBlockOrder(Sampler):
    """Each ``iter()`` is a new pass: shards in a seeded random order, the samples of each shard shuffled
    (``blocks=True``), or a plain seeded shuffle of all samples (``blocks=False``)."""

    def __init__(self, starts: np.ndarray, *, blocks: bool, seed: int = 0) -> None:
        self.starts = np.asarray(starts)
        self.blocks = blocks
        self.seed = seed
        self.passes = 0

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __iter__(self):
        rng = np.random.default_rng((self.seed, self.passes))
        self.passes += 1
        if not self.blocks:
            return iter(rng.permutation(len(self)).tolist())
        order = []
        for shard in rng.permutation(len(self.starts) - 1):
            order += rng.permutation(np.arange(self.starts[shard], self.starts[shard + 1])).tolist()
        return iter(order)


def check_trace(path) -> dict[str, int]:
    """Replay a cache trace: every read must hit the live copy of its shard (never one already evicted).

    Returns:
        ``peak`` (largest cache size seen at a download), ``reads``, ``evictions``, ``downloads``.

    Raises:
        AssertionError: a read of a shard after its deletion, or an eviction of a file that is not the live copy.
    """
    live: dict[int, int] = {}
    stats = {"peak": 0, "reads": 0, "evictions": 0, "downloads": 0}
    for ns, pid, event, shard, inode, nbytes in read_events(path):
        if event == "ready":
            live[shard] = inode
            stats["peak"] = max(stats["peak"], nbytes)
            stats["downloads"] += 1
        elif event == "evict":
            assert live.get(shard) == inode, f"shard {shard} evicted twice or unknown file (t={ns})"
            live[shard] = None
            stats["evictions"] += 1
        elif event == "read":
            assert live.get(shard) == inode, f"pid {pid} read shard {shard} after its deletion (t={ns})"
            stats["reads"] += 1
    return stats
