"""Where a ``ShardDataset``'s records come from: a pack (its manifest and labels checked, every shard's size) or
third-party TFRecord files (counted by their indexes, built where missing) opened at construction; each shard's
record positions (a TFRecord ``.idx``) where a process first reads the shard (:mod:`~fastdata.datasets.record_index`);
and the shard readers each process opens lazily (never a parent's after a fork, none pickled, at most
``max_open_shards`` at once, the least recently used closed first; a pack's shard only while it is the file the pack
was opened with, on every re-open). Nothing per sample is held or pickled but the mapped ``targets.npy``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fastdata._util.malloc import pin_mmap_threshold
from fastdata.datasets.record_index import RecordIndex
from fastdata.datasets.tfrecord_folder import load_or_build_index
from fastdata.formats import get_format
from fastdata.formats.base import CorruptRecordError, DatasetChangedError, ShardReaderBase
from fastdata.formats.manifest import Manifest
from fastdata.formats.open_readers import OpenReaders
from fastdata.formats.packed import OpenedPack, open_pack
from fastdata.formats.tfrecord import TFRecordShardReader
from fastdata.storage.shards import RemoteShards

__all__ = ["ShardSource"]


class ShardSource:
    """The opening and reading half of :class:`~fastdata.datasets.shard_dataset.ShardDataset`, which sets the
    attributes below before calling :meth:`_init_packed` or :meth:`_init_tfrecords`."""

    label_offset: int
    _readers: OpenReaders
    _remote: RemoteShards | None

    # -- construction -------------------------------------------------------------------------
    def _init_packed(self, root: Path, *, shards_here: bool = True) -> None:
        try:
            pack = open_pack(root, shards_here=shards_here)
        except CorruptRecordError as exc:
            raise exc.with_hint(f"run `fastdata verify {root}`") from None
        self._pack: OpenedPack | None = pack  # labels mapped, not copied; nothing per sample besides
        self.manifest: Manifest | None = pack.manifest
        self.format = pack.manifest.format
        self._storage = get_format(self.format)
        self._root = pack.root
        self._shard_paths = pack.shard_paths
        self._starts = pack.starts
        self._located = RecordIndex()  # TFRecord: each shard's .idx, read where the shard is first read
        self._targets: np.ndarray | None = None  # third-party TFRecords only (packs: the mapped targets.npy)
        self.classes: list[str] = list(pack.manifest.classes)

    def _init_tfrecords(self, paths: list[Path]) -> None:
        self._pack = None
        self.manifest = None
        self.format = "tfrecord"
        self._storage = get_format("tfrecord")
        self._root = None
        self._shard_paths = np.array([str(p) for p in paths])
        self._set_index([len(load_or_build_index(p)) for p in paths])  # the counts; positions again at first use
        self._targets = None
        self.classes = []

    def _set_index(self, counts: Sequence[int]) -> None:
        self._starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)
        self._located = RecordIndex()

    def _locate(self, shard: int, record: int) -> tuple[int, int]:
        """The (position, size) that shard ``shard``'s reader reads record ``record`` of the shard with."""
        if not self._storage.indexed:
            return record, 0  # LMDB: the record's number; its reader keeps where each value lies
        positions, sizes = self._located.get(shard, self._load_positions)
        return int(positions[record]), int(sizes[record])

    def _load_positions(self, shard: int) -> tuple[np.ndarray, np.ndarray]:
        if self._pack is not None:
            return self._pack.locate(shard)  # the .idx, checked against the manifest (errors name it)
        path = Path(self._shard_paths[shard])
        index = load_or_build_index(path)
        expected = int(self._starts[shard + 1] - self._starts[shard])
        if len(index) != expected:
            raise CorruptRecordError(path, None, f"lists {len(index)} records by its index, {expected} when this "
                                                 "dataset opened it (changed since?)")
        return index[:, 0].copy(), index[:, 1].copy()

    # -- per-process readers ----------------------------------------------------------------------
    def _reader(self, shard: int) -> ShardReaderBase:
        """The open reader of ``shard`` in this process (at most ``max_open_shards`` open, least recently used closed)."""
        if not len(self._readers):
            pin_mmap_threshold()  # first read in this process: keep decode buffers off the heap
        return self._readers.get(shard, self._open_reader)

    def _open_reader(self, shard: int) -> ShardReaderBase:
        """Open shard ``shard`` in this process, checked on every (re-)open: for a pack, only if it is still the
        file the pack was opened with; for third-party TFRecords, only if it is the file this dataset first opened."""
        path = Path(self._shard_paths[shard])
        if self._pack is None:
            reader = TFRecordShardReader(path, label_offset=self.label_offset)
            first = self._readers.identities.setdefault(shard, reader.identity)
            if reader.identity != first:
                reader.close()
                raise DatasetChangedError(
                    f"{path} was replaced or rewritten since this dataset first read it; create a new ShardDataset "
                    "(and DataLoader) to read the new files")
            return reader
        self._pack.check_current(shard)  # replaced since the dataset was opened: say so, before any size check
        reader = self._storage.reader(path, expected=self.manifest.shards[shard], index=self._pack.index_path(shard))
        try:
            self._pack.check_current(shard, reader.identity)  # the file opened is the file checked
        except DatasetChangedError:
            reader.close()
            raise
        return reader

    def close(self) -> None:
        """Close the shard readers this process opened (they reopen on next access)."""
        if self._remote is not None:
            self._remote.close()
        self._readers.close()
