"""The small interface every storage format implements (and, re-exported, the errors readers raise)."""

from __future__ import annotations

import abc
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastdata.formats.errors import CorruptRecordError, DatasetChangedError
from fastdata.formats.example import ImageRecord
from fastdata.formats.files import FileIdentity
from fastdata.formats.manifest_entries import ShardInfo

__all__ = ["CorruptRecordError", "DatasetChangedError", "ShardReaderBase", "ShardWriterBase", "StorageFormat"]


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
    """Random access to the records of one shard; opened lazily, once per process.

    Attributes:
        identity: the :class:`~fastdata.formats.files.FileIdentity` of the file the reader opened
            (None where unknown), so a caller can tell whether it is the file it expects.
        held_records: records whose per-record arrays the reader keeps in memory while open (0: none; an LMDB
            reader keeps its shard's), what :class:`~fastdata.formats.open_readers.OpenReaders` bounds.
    """

    identity: FileIdentity | None = None
    held_records: int = 0

    @abc.abstractmethod
    def read(self, position: int, size: int) -> tuple[bytes, int | None]:
        """Return the image bytes and, when the record holds one, its label.

        Raises:
            CorruptRecordError: the record fails its checksum, framing or parse.
        """

    def read_many(self, positions: Sequence[int], sizes: Sequence[int]) -> list[tuple[bytes, int | None]]:
        """:meth:`read` of each ``(position, size)`` in turn (a format may read a batch faster).

        Raises:
            CorruptRecordError: as :meth:`read`, for the first record that fails (the error names it).
        """
        return [self.read(position, size) for position, size in zip(positions, sizes, strict=False)]

    def read_fields(self, position: int, size: int) -> Any:
        """The feature map (``tf.train.Example`` features) holding the record's fields, CRC-checked.

        Raises:
            CorruptRecordError: the record fails its checksum, framing or parse.
        """
        raise NotImplementedError(f"{type(self).__name__} stores no fields")

    _fd: int = -1  # the shard's descriptor, for readers that read with pread

    def close(self) -> None:
        """Release the file handle (a reader holding others overrides this)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        if getattr(self, "_fd", -1) >= 0:
            self.close()


class StorageFormat(abc.ABC):
    """A storage format: how to write, index, read and verify its shards."""

    name: str = ""
    suffix: str = ""
    indexed: bool = True  # record j of a shard is at positions()[j]; False: read(j, 0), no per-record arrays at all

    @abc.abstractmethod
    def writer(self, path: Path) -> ShardWriterBase:
        """A writer for a new shard at ``path`` (the final name)."""

    @abc.abstractmethod
    def reader(self, path: Path, *, expected: ShardInfo | None = None, index: Path | None = None) -> ShardReaderBase:
        """A reader for the shard at ``path``.

        Given its manifest entry, a file that does not match
        it (size; what else the format can check cheaply on open) is refused with CorruptRecordError.

        ``index`` is the shard's index file (the manifest's ``index``, resolved inside the pack) for a format whose
        reader reads it when it opens (LMDB's ``.loc`` sidecar; a TFRecord reader is handed positions instead).
        """

    @abc.abstractmethod
    def positions(self, root: Path, shard: ShardInfo) -> tuple[np.ndarray, np.ndarray]:
        """Per-record (position, size) int64 arrays used by :meth:`ShardReaderBase.read`.

        ``root`` is the resolved dataset folder; any file read must stay inside it and be read
        with a bound (the caller has already checked that the shard file has ``shard.nbytes``).
        Readers call it when they first read the shard (never for every shard at open); a format
        whose ``indexed`` is False returns ``arange(n), zeros(n)`` and is not asked.
        """

    def check_declared(self, root: Path, shard: ShardInfo) -> None:
        """Check, without reading anything, that what the manifest records for ``shard`` can be true.

        Check, without reading anything, that what the manifest records for ``shard`` can be true (e.g. that an
        index of the recorded size can list its records); called for every shard when a pack is opened, so it
        must cost O(1). The shard's own count is checked where it is first read (its reader, :meth:`positions`).

        The default checks nothing.

        Raises:
            CorruptRecordError: the manifest's numbers contradict each other.
        """
        return None  # a format that records nothing checkable up front

    @abc.abstractmethod
    def verify(
        self, root: Path, shard: ShardInfo, on_record: Callable[[int, ImageRecord], None] | None = None
    ) -> list[str]:
        """Check every record of ``shard``; return human-readable problems (empty when sound).

        Only the storage layer is checked here (framing, checksums, counts, index files). ``on_record``
        is called with ``(record_number, record)`` for every record that passed (its image bytes, and
        the label and class text the record itself holds), so a caller can decode the images and
        compare the labels in the same pass instead of reading the shard again.
        """
