"""Where a ``ShardDataset``'s records come from, and the readers that read them.

Where a ``ShardDataset``'s records come from: a pack (its manifest and labels checked, every shard's size) or
third-party TFRecord files (counted by their indexes, built where missing) opened at construction; each shard's
record positions (a TFRecord ``.idx``) where a process first reads the shard, and a pack's labels of that shard (one
``pread`` of ``targets.npy``), both in a bounded per-process LRU (:mod:`~fastdata.datasets.record_index`); and the shard
readers each process opens lazily (never a parent's after a fork, none pickled, at most ``max_open_shards`` at once, the
least recently used closed first; a pack's shard only while it is the file the pack was opened with, on every re-open).
Nothing per sample is held beyond the shards being read, and nothing per shard is pickled: an unpickled pack reads its
manifest again (:mod:`fastdata.formats.packed`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

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
    """The opening and reading half of ``ShardDataset``.

    The opening and reading half of :class:`~fastdata.datasets.shard_dataset.ShardDataset`, which sets the
    attributes below before calling :meth:`_init_packed` or :meth:`_init_tfrecords`.
    """

    label_offset: int
    _readers: OpenReaders
    _remote: RemoteShards | None
    # set here, by _init_packed / _adopt or _init_tfrecords
    manifest: Manifest | None
    classes: list[str]
    format: str
    _pack: OpenedPack | None
    _root: Path | None
    _targets: np.ndarray | None
    _shard_paths: Sequence[str]
    _starts: np.ndarray
    _length: int  # an unpickled pack's length, while its pack cannot be read again

    if TYPE_CHECKING:  # the dataset's

        def __len__(self) -> int: ...
        def read(self, index: int) -> tuple[bytes, int]:
            """The encoded image and label of sample ``index``."""

        def _verify_hint(self, index: int) -> str: ...
        def _checked_label(self, shard: int, position: int, label: int | None, packed: int) -> int: ...

    # -- construction -------------------------------------------------------------------------
    def _init_packed(self, root: Path, *, shards_here: bool = True) -> None:
        try:
            pack = open_pack(root, shards_here=shards_here, compact=True)
        except CorruptRecordError as exc:
            raise exc.with_hint(f"run `fastdata verify {root}`") from None
        self._pack = pack  # nothing per sample: labels are read a shard at a time
        self._root = pack.root
        self._targets = None  # third-party TFRecords only
        self._adopt(pack)

    def _adopt(self, pack: OpenedPack) -> None:
        """Take what a pack says (on opening, and again in an unpickled copy: see :meth:`__setstate__`)."""
        self._located = RecordIndex()  # TFRecord: each shard's .idx, read where the shard is first read
        self._labels = RecordIndex()  # a pack's labels of each shard being read
        if pack.error is not None:  # unpickled after the pack changed: every read raises DatasetChangedError
            self._starts = np.array([0, self._length], dtype=np.int64)
            self.manifest, self.classes = None, []
            return
        self.manifest = pack.manifest
        self.format = pack.manifest.format
        self._storage = get_format(self.format)
        self._shard_paths = pack.shard_paths
        self._starts = pack.starts
        self.classes = list(pack.manifest.classes)

    def __getstate__(self) -> dict:
        """The pickled state: a pack's dataset leaves its shard list out.

        A pack's dataset pickles without its shard list (the pack reads it again), so a spawn or forkserver worker
        gets a few KB whatever the number of shards.
        """
        state = dict(self.__dict__)
        if self._pack is not None:
            state["_length"] = int(self._starts[-1])
            for name in ("manifest", "_shard_paths", "_starts", "classes", "_located", "_labels"):
                state.pop(name, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if self._pack is not None:
            self._adopt(self._pack)

    def _init_tfrecords(self, paths: list[Path]) -> None:
        self._pack = None
        self.manifest = None
        self.format = "tfrecord"
        self._storage = get_format("tfrecord")
        self._root = None
        self._shard_paths = [str(p) for p in paths]
        self._set_index([len(load_or_build_index(p)) for p in paths])  # the counts; positions again at first use
        self._targets = None
        self.classes = []

    def _set_index(self, counts: Sequence[int]) -> None:
        self._starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)
        self._located = RecordIndex()
        self._labels = RecordIndex()

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
            raise CorruptRecordError(
                path,
                None,
                f"lists {len(index)} records by its index, {expected} when this dataset opened it (changed since?)",
            )
        return index[:, 0].copy(), index[:, 1].copy()

    def _shard_labels(self, shard: int) -> np.ndarray:
        """A pack's labels (``targets.npy``) of shard ``shard``'s samples: read once where a process reads the shard."""
        return self._labels.get(shard, self._load_labels)[0]

    def _load_labels(self, shard: int) -> tuple[np.ndarray]:
        assert self._pack is not None  # labels are read a shard at a time for packs only
        return (self._pack.shard_labels(shard, int(self._starts[shard]), int(self._starts[shard + 1])),)

    def read_batch(self, indices: Sequence[int]) -> tuple[list[bytes], np.ndarray]:
        """The encoded images and int64 labels of samples ``indices``.

        ``read(i)`` of each, in order, located in
        one vectorized step and read shard by shard through the reader's ``read_many`` (a TFRecord shard's stamp
        checked once per batch, not per record). A remote dataset reads record by record.

        Raises:
            IndexError, CorruptRecordError, DatasetChangedError, FileNotFoundError: as ``read``; a damaged record
                is named (shard, record, sample and the ``fastdata verify`` to run) as ``read(i)`` names it.
        """
        if self._remote is not None:
            remote = [self.read(index) for index in indices]
            return [data for data, _ in remote], np.array([label for _, label in remote], dtype=np.int64)
        n = len(self)
        wanted = np.array([int(index) for index in indices], dtype=np.int64).reshape(-1)
        bad = np.flatnonzero((wanted < -n) | (wanted >= n))
        if bad.size:
            raise IndexError(f"index {int(wanted[bad[0]])} is out of range for a dataset of {n} samples")
        wanted %= max(n, 1)
        shards = np.searchsorted(self._starts, wanted, side="right") - 1
        numbers = wanted - self._starts[shards]
        datas: list[bytes] = [b""] * len(wanted)
        labels = np.zeros(len(wanted), dtype=np.int64)
        own: list[int | None] = [None] * len(wanted)  # each record's own label (None: it holds none)
        for shard in sorted(set(shards.tolist())):  # not np.unique: its first call imports numpy.ma (~15 ms)
            where = np.flatnonzero(shards == shard)
            at = numbers[where]  # record numbers, then (indexed formats) byte positions
            try:
                reader = self._reader(shard)  # first: a shard replaced since the open says so before its index
                if self._storage.indexed:
                    positions, sizes = self._located.get(shard, self._load_positions)
                    at, size = positions[at], sizes[at]
                else:
                    size = np.zeros(len(where), dtype=np.int64)
                records = reader.read_many(at.tolist(), size.tolist())
            except CorruptRecordError as exc:  # named as read(i) names it: the sample whose record failed
                hits = np.flatnonzero(at == exc.offset) if exc.offset is not None else np.empty(0, np.int64)
                index = int(wanted[where[hits[0]]]) if len(hits) else int(wanted[where[0]])
                raise exc.with_hint(self._verify_hint(index)) from None
            for k, (data, label) in zip(where.tolist(), records, strict=False):
                datas[k], own[k] = data, label
            if self._pack is not None:
                labels[where] = self._shard_labels(shard)[numbers[where]]
        if self._pack is None:
            labels[:] = own  # type: ignore[assignment]  # a third-party record always holds its label
            return datas, labels
        for k, label in enumerate(own):
            if label is not None and label != labels[k]:
                index, shard = int(wanted[k]), int(shards[k])
                position = (
                    int(self._located.get(shard, self._load_positions)[0][numbers[k]])
                    if self._storage.indexed
                    else int(numbers[k])
                )
                try:
                    self._checked_label(shard, position, label, int(labels[k]))
                except CorruptRecordError as exc:
                    raise exc.with_hint(self._verify_hint(index)) from None
        labels += self.label_offset
        return datas, labels

    # -- per-process readers ----------------------------------------------------------------------
    def _reader(self, shard: int) -> ShardReaderBase:
        """The open reader of ``shard`` in this process (at most ``max_open_shards`` open; the least recent closed)."""
        if not len(self._readers):
            pin_mmap_threshold()  # first read in this process: keep decode buffers off the heap
        return self._readers.get(shard, self._open_reader)

    def _open_reader(self, shard: int) -> ShardReaderBase:
        """Open shard ``shard`` in this process, checked on every (re-)open.

        For a pack, only if it is still the
        file the pack was opened with; for third-party TFRecords, only if it is the file this dataset first opened.
        """
        if self._pack is not None:
            self._pack.check_current(shard)  # replaced since the dataset was opened: say so, before any size check
        path = Path(self._shard_paths[shard])
        if self._pack is None:
            tfrecord = TFRecordShardReader(path, label_offset=self.label_offset)
            if tfrecord.identity is None:
                raise RuntimeError(f"{path}: its reader recorded no file identity")  # every TFRecord reader does
            first = self._readers.identities.setdefault(shard, tfrecord.identity)
            if tfrecord.identity != first:
                tfrecord.close()
                raise DatasetChangedError(
                    f"{path} was replaced or rewritten since this dataset first read it; create a new ShardDataset "
                    "(and DataLoader) to read the new files"
                )
            return tfrecord
        expected = self._pack.manifest.shards[shard]
        reader = self._storage.reader(path, expected=expected, index=self._pack.index_path(shard))
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
