"""LMDB shards: one single-file LMDB environment per shard.

Sample ``j`` of a shard is stored under the key ``f"{j:08d}".encode()`` with the encoded image
bytes as value. The key ``__meta__`` holds a UTF-8 JSON object with the shard's per-sample
``labels``, ``filenames``, ``heights``, ``widths``, ``formats``, ``crc32c`` (of each image's bytes),
``class_names`` (packs written since it was added) and ``num_samples``, so a plain ``lmdb`` reader
can get every image and label without fastdata and without pickle.

Beside each shard the writer puts its ``.loc`` location sidecar (:mod:`fastdata.formats.lmdb_sidecar`): where
every value lies, each record's CRC32C and label, checked by the CRC32C the manifest records for it (the shard's
``index``, as a TFRecord shard's ``.idx``). A reader given it opens the shard with one read of the sidecar instead
of a walk of the B-tree and a parse of ``__meta__`` (what a shard re-opened after eviction from a process's open
readers costs); packs without sidecars (older ones) keep the walk, and ``fastdata verify`` walks and compares.

Readers never hand the file to LMDB: they locate every value from the sidecar (every place checked against the
file) or with a bounds-checked walk of the B-tree (:mod:`fastdata.formats.lmdb_pages`), so damaged pages raise
:class:`CorruptRecordError` instead of killing the process, read each record with ``pread``, check it against its
CRC32C and return the label recorded for it. The CRC32Cs are read when the shard is opened, so a record whose bytes
change later (damage, or the shard rewritten in place) fails its check. An open reader keeps about 25 bytes a
record in numpy arrays (offset, length, CRC32C, label), no Python object per record; its count is checked against
the manifest's there, when the shard is first read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import google_crc32c
import lmdb
import numpy as np
from typing_extensions import override

from fastdata._util.fs import atomic_write_bytes, file_crc32c, publish, tmp_path
from fastdata.formats.base import (
    CorruptRecordError,
    DatasetChangedError,
    ShardReaderBase,
    ShardWriterBase,
    StorageFormat,
)
from fastdata.formats.example import ImageRecord, encode_fields, parse_features
from fastdata.formats.files import FileIdentity, crc32c_hex, open_regular, resolve_inside
from fastdata.formats.lmdb_keys import FIELDS, FIELDS_SUFFIX, META_KEY, RECORD, sample_key
from fastdata.formats.lmdb_meta import PER_RECORD, int_array, locate_values, meta_from, parse_meta
from fastdata.formats.lmdb_pages import LMDBIndex
from fastdata.formats.lmdb_sidecar import read_sidecar, sidecar_bytes, sidecar_path_for, sidecar_problems
from fastdata.formats.manifest_entries import ShardInfo
from fastdata.formats.record_kernel import read_lmdb_values

__all__ = ["LMDBFormat", "LMDBShardReader", "LMDBShardWriter", "META_KEY", "parse_meta", "sample_key"]

# The writer's memory map starts small and grows with the data (reserving 1 TiB up front fails
# under an address-space limit, `ulimit -v`, common on clusters). Growing means committing the
# open transaction, so the map is doubled whenever a worst-case estimate of the bytes written
# would no longer fit.
_INITIAL_MAP_SIZE = 16 << 20
_MAP_SLACK = 1 << 20


class LMDBShardWriter(ShardWriterBase):
    """Appends records to a new single-file LMDB environment under a temporary name."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._tmp = tmp_path(self.path)
        self._map_size = _INITIAL_MAP_SIZE
        self._env = lmdb.open(
            str(self._tmp), subdir=False, map_size=self._map_size, lock=False, sync=False, meminit=True
        )
        self._page = self._env.stat()["psize"]
        self._worst_case = 4 * self._page  # meta pages and the root
        self._txn = self._env.begin(write=True)
        self._meta: dict[str, list] = {k: [] for k in PER_RECORD}

    def _make_room(self, key: bytes, value: bytes) -> None:
        """Grow the map (commit, double, reopen the transaction) unless it surely holds ``key: value`` too."""
        node = 16 + len(key)  # node header + key + the value itself or its overflow page number
        if node + len(value) > self._page // 2 - 16:  # stored in overflow pages of its own
            self._worst_case += -(-(len(value) + 16) // self._page) * self._page + 4 * node
        else:  # inside leaf pages, which may be half full after splits (4x covers branch pages)
            self._worst_case += 4 * (node + len(value))
        needed = self._worst_case + self._worst_case // 8 + _MAP_SLACK
        if needed <= self._map_size:
            return
        self._txn.commit()
        self._map_size = max(2 * self._map_size, 2 * needed)
        self._env.set_mapsize(self._map_size)
        self._txn = self._env.begin(write=True)

    @override
    def write(self, record: ImageRecord) -> int:
        self._make_room(sample_key(self.num_samples), record.image)
        if not self._txn.put(sample_key(self.num_samples), record.image, append=True):
            raise RuntimeError(f"could not append sample {self.num_samples} to {self._tmp}")
        values = {
            "labels": record.label,
            "filenames": record.filename,
            "heights": record.height,
            "widths": record.width,
            "formats": record.image_format,
            "crc32c": google_crc32c.value(record.image),
            "class_names": record.class_name,
        }
        for key, value in values.items():
            self._meta[key].append(value)
        added = 0
        if record.fields:  # the fields as an Example under their own key, checked by their own CRC32C
            raw = encode_fields(record.fields)
            fields_key = sample_key(self.num_samples) + FIELDS_SUFFIX
            self._make_room(fields_key, raw)
            if not self._txn.put(fields_key, raw, append=True):
                raise RuntimeError(f"could not append the fields of sample {self.num_samples} to {self._tmp}")
            self._meta.setdefault("fields_crc32c", []).append(google_crc32c.value(raw))
            added = len(raw) + 16
        self.num_samples += 1
        return len(record.image) + 8 + added

    @override
    def close(self, root: Path) -> ShardInfo:
        meta = dict(self._meta, num_samples=self.num_samples)
        raw = json.dumps(meta, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        self._make_room(META_KEY, raw)
        self._txn.put(META_KEY, raw)
        self._txn.commit()
        self._env.sync(True)
        self._env.close()
        sidecar, located = sidecar_path_for(self.path), self._sidecar()
        atomic_write_bytes(sidecar, located)  # the sidecar first: a reader never finds a shard without it
        publish(self._tmp, self.path)
        return ShardInfo(
            path=self.path.relative_to(root).as_posix(),
            num_samples=self.num_samples,
            nbytes=self.path.stat().st_size,
            crc32c=file_crc32c(self.path),
            index=sidecar.relative_to(root).as_posix(),
            index_nbytes=len(located),
            index_crc32c=crc32c_hex(located),
            meta_crc32c=crc32c_hex(raw),
        )

    def _sidecar(self) -> bytes:
        """The finished shard walked once, as its ``.loc`` sidecar (what each reader would otherwise walk)."""
        fd, st = open_regular(self._tmp)
        try:
            index = locate_values(fd, st.st_size, self._tmp)
        finally:
            os.close(fd)
        fields = self._meta.get("fields_crc32c")
        return sidecar_bytes(
            index,
            np.asarray(self._meta["crc32c"], np.uint32),
            np.asarray(self._meta["labels"], np.int64),
            None if fields is None else np.asarray(fields, np.uint32),
        )

    @override
    def abort(self) -> None:
        try:
            self._txn.abort()
            self._env.close()
        finally:
            self._tmp.unlink(missing_ok=True)
            tmp_path(sidecar_path_for(self.path)).unlink(missing_ok=True)


class LMDBShardReader(ShardReaderBase):
    """Reads of one shard by record number, without trusting its page structure.

    Given the manifest's entry and the sidecar it names, opening reads the sidecar (checked by the manifest's
    CRC32C and count, every place checked against the file's size: :mod:`fastdata.formats.lmdb_sidecar`); else it
    walks the shard's B-tree with every page number and length checked (see :mod:`fastdata.formats.lmdb_pages`)
    and reads ``__meta__``, checked by the manifest's checksum. Either way the file's size and the record count
    are the manifest's, so a truncated, damaged or foreign shard is refused. Every read is checked against the
    CRC32C recorded for it and returns the label recorded with it.

    Args:
        path: the shard file.
        expected: its manifest entry, or None (no size, checksum or count check).
        check_crc: check each record's CRC32C on read (on by default; a few microseconds per
            ~100 KB image with a hardware CRC32C).
        index: the shard's sidecar (the manifest's ``index``, resolved inside the pack), read instead of walking
            the shard when ``expected`` records its CRC32C; None: the walk.

    Raises:
        FileNotFoundError: no shard at ``path``.
        CorruptRecordError: the file is not a sound shard, or not the one the manifest describes.
    """

    def __init__(
        self, path: Path, *, expected: ShardInfo | None = None, check_crc: bool = True, index: Path | None = None
    ) -> None:
        self._fd = -1  # set first: __del__ runs even when opening fails
        self.path = Path(path)
        self.check_crc = check_crc
        self._fd, st = open_regular(self.path, nbytes=None if expected is None else expected.nbytes)
        self.identity = FileIdentity.of(st)
        if index is not None and expected is not None and expected.index_crc32c is not None:
            found = read_sidecar(index, expected, st.st_size)  # one read: no walk, no JSON
            self._index, self._crc, self._labels = found.index, found.crc32c, found.labels
            self._fields_crc = found.fields_crc32c
            self.held_records = len(self._crc)
            return
        self._index = locate_values(self._fd, st.st_size, self.path)
        raw = meta_from(self._index, self._fd, self.path)
        if expected is not None and expected.meta_crc32c is not None and crc32c_hex(raw) != expected.meta_crc32c:
            raise CorruptRecordError(
                self.path, None, "its __meta__ record does not match the manifest (a shard of another pack, or damaged)"
            )
        meta = parse_meta(raw, self.path)
        if expected is not None and meta["num_samples"] != expected.num_samples:
            raise CorruptRecordError(
                self.path, None, f"holds {meta['num_samples']} records, the manifest says {expected.num_samples}"
            )
        self._crc = int_array(meta["crc32c"], np.uint32, self.path, "crc32c")
        self._labels = int_array(meta["labels"], np.int64, self.path, "labels")
        fields_crc = meta.get("fields_crc32c")
        self._fields_crc = int_array(fields_crc, np.uint32, self.path, "fields_crc32c") if fields_crc else None
        self.held_records = len(self._crc)

    @override
    def read(self, position: int, size: int) -> tuple[bytes, int | None]:
        if not 0 <= position < len(self._crc):
            raise CorruptRecordError(self.path, position, f"no such record (the shard holds {len(self._crc)})")
        value = self._index.value(self._fd, RECORD, position, self.path)
        if value is None:
            raise CorruptRecordError(self.path, position, f"key {sample_key(position).decode()} is missing")
        if self.check_crc and google_crc32c.value(value) != self._crc[position]:
            raise CorruptRecordError(self.path, position, "image bytes CRC32C mismatch")
        return value, int(self._labels[position])

    @override
    def read_many(self, positions: Sequence[int], sizes: Sequence[int]) -> list[tuple[bytes, int | None]]:
        """:meth:`read` of each record; the sound ones are read and CRC-checked in one GIL-free call."""
        values = read_lmdb_values(self._index, self._fd, RECORD, positions, self._crc, self.check_crc)
        if values is None:
            return super().read_many(positions, sizes)
        return [
            self.read(p, n) if value is None else (value, int(self._labels[p]))
            for value, p, n in zip(values, positions, sizes, strict=False)
        ]

    @override
    def read_fields(self, position: int, size: int) -> Any:
        if self._fields_crc is None or not 0 <= position < len(self._fields_crc):
            raise CorruptRecordError(self.path, position, "the shard stores no fields for this record")
        value = self._index.value(self._fd, FIELDS, position, self.path)
        if value is None or (self.check_crc and google_crc32c.value(value) != self._fields_crc[position]):
            raise CorruptRecordError(self.path, position, "fields missing or CRC32C mismatch")
        try:
            return parse_features(value)
        except ValueError as exc:
            raise CorruptRecordError(self.path, position, str(exc)) from None


def _check_records(
    index: LMDBIndex, fd: int, path: Path, meta: dict, on_record: Callable[[int, ImageRecord], None] | None
) -> list[str]:
    """Compare each record's bytes with the CRC32C stored for it in ``__meta__``; pass sound ones to ``on_record``."""
    problems = []
    n = meta["num_samples"]
    texts, names = meta.get("class_names") or [""] * n, meta.get("filenames") or [""] * n
    fields_crc = meta.get("fields_crc32c")
    for j, (expected, label) in enumerate(zip(meta["crc32c"], meta["labels"], strict=False)):
        try:
            value = index.value(fd, RECORD, j, path)
            fields = index.value(fd, FIELDS, j, path) if fields_crc else None
        except CorruptRecordError as exc:
            problems.append(f"record {j}: {exc}")
            continue
        if value is None:
            problems.append(f"record {j}: {CorruptRecordError(path, j, 'key is missing')}")
        elif google_crc32c.value(value) != expected:
            problems.append(f"record {j}: {CorruptRecordError(path, j, 'image bytes CRC32C mismatch')}")
        elif fields_crc and google_crc32c.value(fields or b"") != fields_crc[j]:
            problems.append(f"record {j}: {CorruptRecordError(path, j, 'fields missing or CRC32C mismatch')}")
        elif on_record is not None:
            on_record(j, ImageRecord(value, label, _text(texts[j]), _text(names[j])))
    return problems


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


class LMDBFormat(StorageFormat):
    """Single-file LMDB environments, one per shard."""

    name = "lmdb"
    suffix = ".lmdb"
    indexed = False  # record j is read as read(j, 0): nothing per record is kept outside an open reader

    @override
    def writer(self, path: Path) -> LMDBShardWriter:
        return LMDBShardWriter(path)

    @override
    def reader(self, path: Path, *, expected: ShardInfo | None = None, index: Path | None = None) -> LMDBShardReader:
        return LMDBShardReader(path, expected=expected, index=index)

    @override
    def positions(self, root: Path, shard: ShardInfo) -> tuple[np.ndarray, np.ndarray]:
        n = shard.num_samples
        return np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int64)

    @override
    def verify(
        self, root: Path, shard: ShardInfo, on_record: Callable[[int, ImageRecord], None] | None = None
    ) -> list[str]:
        fd = -1
        try:
            path = resolve_inside(root, shard.path)
            fd, st = open_regular(path, nbytes=shard.nbytes)
            index = locate_values(fd, st.st_size, path)  # the structure is checked before any pointer is followed
            raw = meta_from(index, fd, path)
            meta = parse_meta(raw, path)
            problems: list[str] = []
            if shard.meta_crc32c is not None and crc32c_hex(raw) != shard.meta_crc32c:
                problems.append(f"{shard.path}: its __meta__ record does not match the manifest's checksum")
            count = len(index.located[RECORD])
            if meta["num_samples"] != shard.num_samples or count != shard.num_samples:
                problems.append(f"{shard.path}: holds {count} records, the manifest says {shard.num_samples}")
            problems += _sidecar_check(root, shard, index, meta, st.st_size)  # the walk against the sidecar
            return problems + [f"{shard.path}: {p}" for p in _check_records(index, fd, path, meta, on_record)]
        except (OSError, CorruptRecordError, DatasetChangedError) as exc:
            return [f"{shard.path}: {_short_error(exc)}"]
        finally:
            if fd >= 0:
                os.close(fd)


def _sidecar_check(root: Path, shard: ShardInfo, walked: LMDBIndex, meta: dict, file_size: int) -> list[str]:
    """What is wrong with the shard's sidecar: missing, damaged, or not what the walk and ``__meta__`` say."""
    try:
        crc, labels = (int_array(meta[k], t, shard.path, k) for k, t in (("crc32c", np.uint32), ("labels", np.int64)))
        fields = meta.get("fields_crc32c")
        fields = int_array(fields, np.uint32, shard.path, "fields_crc32c") if fields else None
    except CorruptRecordError:
        return []  # a __meta__ with entries of no type is the records' problem, reported with them
    return sidecar_problems(root, shard, walked, crc, labels, fields, file_size)


def _short_error(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        return "missing"
    if isinstance(exc, OSError):
        return f"unreadable ({exc.strerror or type(exc).__name__})"
    return str(exc)
