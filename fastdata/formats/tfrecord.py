"""TFRecord shards: the shard writer, the positioned reader and the ``tfrecord`` storage format.

Records are ``tf.train.Example`` payloads in TensorFlow's framing (:mod:`~fastdata.formats.tfrecord_framing`),
each shard with a DALI-compatible ``.idx`` index beside it (:mod:`~fastdata.formats.tfrecord_index`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import google_crc32c
import numpy as np
from typing_extensions import override

from fastdata._util.fs import publish, tmp_path
from fastdata.formats.base import CorruptRecordError, ShardReaderBase, ShardWriterBase, StorageFormat
from fastdata.formats.errors import DatasetChangedError
from fastdata.formats.example import ImageRecord, decode_example, encode_example, parse_features
from fastdata.formats.files import FileIdentity, crc32c_hex, open_regular, resolve_inside
from fastdata.formats.manifest_entries import ShardInfo
from fastdata.formats.tfrecord_framing import FOOTER_SIZE, HEADER_SIZE, build_index, frame
from fastdata.formats.tfrecord_index import MIN_INDEX_LINE, index_bytes, index_path_for, max_index_bytes, read_index
from fastdata.formats.tfrecord_read import read_image_records, read_payload


class TFRecordShardWriter(ShardWriterBase):
    """Writes one TFRecord shard and its index under temporary names."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._tmp = tmp_path(self.path)
        self._file = open(self._tmp, "wb")  # noqa: SIM115 (open until finish() or abort(), across calls)
        self._offsets: list[tuple[int, int]] = []
        self._crc = google_crc32c.Checksum()
        self._size = 0

    @override
    def write(self, record: ImageRecord) -> int:
        payload = encode_example(record)
        header, footer = frame(payload)
        for part in (header, payload, footer):
            self._file.write(part)
            self._crc.update(part)
        size = len(header) + len(payload) + len(footer)
        self._offsets.append((self._size, size))
        self._size += size
        self.num_samples += 1
        return size

    @override
    def close(self, root: Path) -> ShardInfo:
        self._file.close()
        index = index_path_for(self.path)
        index_tmp = tmp_path(index)
        index_data = index_bytes(np.asarray(self._offsets, dtype=np.int64).reshape(-1, 2))
        with open(index_tmp, "wb") as f:
            f.write(index_data)
        publish(index_tmp, index)
        publish(self._tmp, self.path)
        return ShardInfo(
            path=self.path.relative_to(root).as_posix(),
            num_samples=self.num_samples,
            nbytes=self._size,
            crc32c=self._crc.hexdigest().decode(),
            index=index.relative_to(root).as_posix(),
            index_nbytes=len(index_data),
            index_crc32c=crc32c_hex(index_data),
        )

    @override
    def abort(self) -> None:
        with contextlib.suppress(OSError):  # close flushes, which fails again on a full disk: the file goes anyway
            self._file.close()
        for p in (self._tmp, tmp_path(index_path_for(self.path))):
            p.unlink(missing_ok=True)


class TFRecordShardReader(ShardReaderBase):
    """Positioned reads (``os.pread``) of single records; safe to share across threads.

    Args:
        path: the shard; it must be a regular file (checked on the open descriptor).
        label_offset: added to each record's ``image/class/label``.
        check_crc: check each record's framing CRCs (on by default).
        nbytes: the size the manifest says the shard has; another size is refused.

    Raises:
        FileNotFoundError: no file at ``path``.
        CorruptRecordError: not a regular file, or not of ``nbytes`` bytes.
    """

    def __init__(self, path: Path, *, label_offset: int = 0, check_crc: bool = True, nbytes: int | None = None) -> None:
        self._fd = -1  # set first: __del__ runs even when the open below fails
        self.path = Path(path)
        self.label_offset = label_offset
        self.check_crc = check_crc
        self._fd, st = open_regular(self.path, nbytes=nbytes)
        self.identity = FileIdentity.of(st)
        self._stamp = (st.st_size, st.st_mtime_ns)

    def read_payload(self, position: int, size: int) -> bytes:
        """The raw Example bytes of the record at ``position`` (CRC-checked)."""
        payload = read_payload(self._fd, position, size, shard=self.path, check_crc=self.check_crc)
        self._check_stamp()
        return payload

    def _check_stamp(self) -> None:
        """Raise if the file was rewritten in place since the open.

        A record's own CRCs cannot tell a record of
        another image, the file's size and times can (checked after the reads it vouches for).
        """
        st = os.fstat(self._fd)
        if (st.st_size, st.st_mtime_ns) != self._stamp:
            raise DatasetChangedError(
                f"{self.path} was rewritten in place after this reader opened it (same file, new contents); "
                "create a new ShardDataset (and DataLoader) to read the new files"
            )

    def read(self, position: int, size: int) -> tuple[bytes, int | None]:
        """The image bytes and the label of a record, every byte checked.

        The image bytes (a ``bytes`` of their own, read straight from the file) and the label of a record,
        every byte checked (:mod:`~fastdata.formats.tfrecord_read`).
        """
        return self.read_many((position,), (size,))[0]

    def read_many(self, positions: Sequence[int], sizes: Sequence[int]) -> list[tuple[bytes, int | None]]:
        """:meth:`read` of each record in turn, the file's stamp checked once after the last read."""
        fd, path, check, offset = self._fd, self.path, self.check_crc, self.label_offset
        records: list[tuple[bytes, int | None]] = list(
            read_image_records(fd, positions, sizes, shard=path, check_crc=check, label_offset=offset)
        )
        self._check_stamp()
        return records

    @override
    def read_fields(self, position: int, size: int) -> Any:
        try:
            return parse_features(self.read_payload(position, size))
        except ValueError as exc:
            raise CorruptRecordError(self.path, position, str(exc)) from exc


class TFRecordFormat(StorageFormat):
    """TFRecord shards with ``tf.train.Example`` records and ``.idx`` index files."""

    name = "tfrecord"
    suffix = ".tfrecord"

    @override
    def writer(self, path: Path) -> TFRecordShardWriter:
        return TFRecordShardWriter(path)

    @override
    def reader(
        self, path: Path, *, expected: ShardInfo | None = None, index: Path | None = None
    ) -> TFRecordShardReader:
        return TFRecordShardReader(path, nbytes=None if expected is None else expected.nbytes)

    def check_declared(self, root: Path, shard: ShardInfo) -> None:
        """An index of the size the manifest records can list the shard's records (read nothing).

        Raises:
            CorruptRecordError: the recorded index size is too small for the records the manifest claims.
        """
        if shard.index and shard.index_nbytes is not None and shard.num_samples > shard.index_nbytes // MIN_INDEX_LINE:
            raise CorruptRecordError(
                root / shard.index,
                None,
                f"lists at most {shard.index_nbytes // MIN_INDEX_LINE} records by the size "
                f"the manifest records for it ({shard.index_nbytes} bytes), but the manifest says {shard.num_samples}",
            )

    def positions(self, root: Path, shard: ShardInfo) -> tuple[np.ndarray, np.ndarray]:
        """Offsets and sizes from the shard's index (bounded read, checked against the manifest and the shard).

        Raises:
            FileNotFoundError: the index file is missing.
            CorruptRecordError: the index is not the manifest's (size, checksum, count) or lists
                records outside the shard.
        """
        if shard.index:
            path = resolve_inside(root, shard.index)
            index = read_index(
                path, max_bytes=max_index_bytes(shard.nbytes), nbytes=shard.index_nbytes, crc32c=shard.index_crc32c
            )
        else:
            path = resolve_inside(root, shard.path)
            index = build_index(path)
        if len(index) != shard.num_samples:
            raise CorruptRecordError(
                path, None, f"lists {len(index)} records but the manifest says {shard.num_samples}"
            )
        offsets, sizes = index[:, 0].copy(), index[:, 1].copy()
        if len(index) and (sizes.min() < HEADER_SIZE + FOOTER_SIZE or (offsets + sizes).max() > shard.nbytes):
            raise CorruptRecordError(path, None, f"lists records outside the {shard.nbytes} bytes of {shard.path}")
        return offsets, sizes

    @override
    def verify(
        self, root: Path, shard: ShardInfo, on_record: Callable[[int, ImageRecord], None] | None = None
    ) -> list[str]:
        try:
            path = resolve_inside(root, shard.path)
            actual = build_index(path)
        except CorruptRecordError as exc:
            return [str(exc)]
        except OSError as exc:
            return [f"{shard.path}: {'missing' if isinstance(exc, FileNotFoundError) else 'unreadable'}"]
        problems = self._verify_index(root, shard, actual)
        if len(actual) != shard.num_samples:
            problems.append(f"{shard.path} holds {len(actual)} records, the manifest says {shard.num_samples}")
        reader = self.reader(path)
        try:
            for number, (offset, size) in enumerate(actual.tolist()):
                try:
                    record = decode_example(reader.read_payload(offset, size))
                except CorruptRecordError as exc:
                    problems.append(f"record {number}: {exc}")
                    continue
                except ValueError as exc:
                    problems.append(f"record {number}: {CorruptRecordError(path, offset, str(exc))}")
                    continue
                if on_record is not None:
                    on_record(number, record)
        finally:
            reader.close()
        return problems

    @staticmethod
    def _verify_index(root: Path, shard: ShardInfo, actual: np.ndarray) -> list[str]:
        """The index file against the manifest (size, checksum) and against the shard's real records."""
        if not shard.index:
            return []
        try:
            listed = read_index(
                resolve_inside(root, shard.index),
                max_bytes=max_index_bytes(shard.nbytes),
                nbytes=shard.index_nbytes,
                crc32c=shard.index_crc32c,
            )
        except FileNotFoundError:
            return [f"{shard.index}: missing (the index of {shard.path})"]
        except CorruptRecordError as exc:
            return [f"{shard.index}: {exc.reason}"]
        if listed.shape != actual.shape or not np.array_equal(listed, actual):
            return [f"{shard.index} does not match the records of {shard.path}"]
        return []
