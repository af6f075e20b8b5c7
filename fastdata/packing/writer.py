"""``ShardWriter``: records in, size/count-bounded shards out, each one published atomically."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from fastdata.formats import get_format
from fastdata.formats.base import ShardWriterBase
from fastdata.formats.example import ImageRecord
from fastdata.formats.manifest_entries import ShardInfo

DEFAULT_SHARD_SIZE = 256 * 1024 * 1024
RECORD_OVERHEAD = 256  # framing + metadata bytes per record, for the size bound


def shard_name(number: int, suffix: str, prefix: str = "shard-") -> str:
    """File name of shard ``number``: ``shard-00000.tfrecord`` (``prefix`` ``"shard-00003-"``: a range's shard)."""
    return f"{prefix}{number:05d}{suffix}"


class ShardWriter:
    """Write records into shards of at most ``shard_size`` bytes and/or ``samples_per_shard`` records.

    Each shard is written under a temporary name and renamed when complete, so a shard file
    with its final name is always whole. A record larger than the bound gets a shard of its own.

    Args:
        out: output folder (must exist).
        format: storage format name (``"lmdb"`` or ``"tfrecord"``).
        shard_size: upper bound on a shard's size in bytes.
        samples_per_shard: upper bound on records per shard (None: no count bound).
        first_shard: number of the first shard to write (for resuming).
        on_shard: called with each shard's manifest entry once the shard is published (e.g. to upload it).
        prefix: shard file names start with it (see ``RangePlan.shard_prefix`` in :mod:`fastdata.packing.plan`).

    Example::

        with ShardWriter(out, format="tfrecord", samples_per_shard=1000) as writer:
            for record in records:
                writer.write(record)
        print(writer.shards)
    """

    def __init__(
        self,
        out: str | os.PathLike,
        *,
        format: str,
        shard_size: int = DEFAULT_SHARD_SIZE,
        samples_per_shard: int | None = None,
        first_shard: int = 0,
        on_shard: Callable[[ShardInfo], None] | None = None,
        prefix: str = "shard-",
    ) -> None:
        if int(shard_size) <= 0:
            raise ValueError(f"shard_size must be a positive number of bytes, got {shard_size!r}")
        if samples_per_shard is not None and int(samples_per_shard) <= 0:
            raise ValueError(f"samples_per_shard must be a positive count or None, got {samples_per_shard!r}")
        self.out = Path(out)
        self.format = get_format(format)
        self.shard_size = int(shard_size)
        self.samples_per_shard = samples_per_shard
        self.next_shard = int(first_shard)
        self.shards: list[ShardInfo] = []
        self._current: ShardWriterBase | None = None
        self._current_bytes = 0
        self.written_bytes = 0  # every record's bytes written by this writer, all shards together
        self.on_shard = on_shard
        self.prefix = prefix

    def is_full_for(self, record: ImageRecord) -> bool:
        """True when the open shard must be finished before ``record`` can be written."""
        if self._current is None or self._current.num_samples == 0:
            return False
        if self.samples_per_shard is not None and self._current.num_samples >= self.samples_per_shard:
            return True
        return self._current_bytes + len(record.image) + RECORD_OVERHEAD > self.shard_size

    def write(self, record: ImageRecord) -> ShardInfo | None:
        """Append ``record``; return the shard it finished first, if it had to start a new one."""
        finished = self.finish_shard() if self.is_full_for(record) else None
        if self._current is None:
            path = self.out / shard_name(self.next_shard, self.format.suffix, self.prefix)
            self._current = self.format.writer(path)
            self._current_bytes = 0
            self.next_shard += 1
        nbytes = self._current.write(record)
        self._current_bytes += nbytes
        self.written_bytes += nbytes
        return finished

    def finish_shard(self) -> ShardInfo | None:
        """Publish the open shard (if any) and return its manifest entry."""
        if self._current is None:
            return None
        info = self._current.close(self.out)
        self._current = None
        self.shards.append(info)
        if self.on_shard is not None:
            self.on_shard(info)
        return info

    @property
    def pending_bytes(self) -> int:
        """Bytes written to the open, unfinished shard so far (0 when none is open)."""
        return self._current_bytes if self._current is not None else 0

    def abort(self) -> None:
        """Drop the open, unfinished shard (its temporary files are removed)."""
        if self._current is not None:
            self._current.abort()
            self._current = None

    def close(self) -> list[ShardInfo]:
        """Publish the last shard; return every shard this writer finished."""
        self.finish_shard()
        return self.shards

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
