"""The small interface every storage format implements."""

from __future__ import annotations

import abc
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from fastdata.formats.example import ImageRecord
from fastdata.formats.manifest import ShardInfo


class CorruptRecordError(ValueError):
    """A record in a shard is damaged (bad CRC, bad framing, unparsable payload).

    Attributes:
        shard: the shard file.
        offset: byte offset (TFRecord) or record number (LMDB) of the damaged record.
    """

    def __init__(self, shard: str | os.PathLike, offset: int, reason: str) -> None:
        self.shard = str(shard)
        self.offset = int(offset)
        self.reason = reason
        super().__init__(f"corrupt record in {self.shard} at {self.offset}: {reason}")


class ShardWriterBase(abc.ABC):
    """Writes one shard under a temporary name; ``close`` makes it visible atomically."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.num_samples = 0

    @abc.abstractmethod
    def write(self, record: ImageRecord) -> int:
        """Append ``record``; return the bytes it added to the shard."""

    @abc.abstractmethod
    def close(self, root: Path) -> ShardInfo:
        """Flush, fsync and rename into place; return the shard's manifest entry (paths relative to ``root``)."""

    @abc.abstractmethod
    def abort(self) -> None:
        """Remove the temporary files of an unfinished shard."""


class ShardReaderBase(abc.ABC):
    """Random access to the records of one shard; opened lazily, once per process."""

    @abc.abstractmethod
    def read(self, position: int, size: int) -> tuple[bytes, int | None]:
        """Return the image bytes and, when the record holds one, its label."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release file handles."""


class StorageFormat(abc.ABC):
    """A storage format: how to write, index, read and verify its shards."""

    name: str = ""
    suffix: str = ""

    @abc.abstractmethod
    def writer(self, path: Path) -> ShardWriterBase:
        """A writer for a new shard at ``path`` (the final name)."""

    @abc.abstractmethod
    def reader(self, path: Path) -> ShardReaderBase:
        """A reader for the shard at ``path``."""

    @abc.abstractmethod
    def positions(self, root: Path, shard: ShardInfo) -> tuple[np.ndarray, np.ndarray]:
        """Per-record (position, size) int64 arrays used by :meth:`ShardReaderBase.read`."""

    @abc.abstractmethod
    def verify(self, root: Path, shard: ShardInfo, on_image: Callable[[int, bytes], None] | None = None) -> list[str]:
        """Check every record of ``shard``; return human-readable problems (empty when sound).

        Only the storage layer is checked here (framing, checksums, counts). ``on_image`` is called
        with ``(record_number, image_bytes)`` for every record that passed, so a caller can decode
        the images in the same pass instead of reading the shard again.
        """
