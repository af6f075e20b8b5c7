"""TFRecord shards: standard framing, tf.train.Example payloads and DALI-compatible indexes.

A record is ``uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)``
(little-endian), exactly as TensorFlow writes it. The index file beside each shard has one
``"offset size"`` line per record, ``size`` covering the whole framed record, which is the
format DALI's ``tfrecord2idx`` writes and ``fn.readers.tfrecord`` reads.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import google_crc32c
import numpy as np

from fastdata._util.fs import publish, tmp_path
from fastdata.formats.base import CorruptRecordError, ShardReaderBase, ShardWriterBase, StorageFormat
from fastdata.formats.errors import DatasetChangedError
from fastdata.formats.files import FileIdentity, check_crc32c, crc32c_hex, open_regular, read_regular, resolve_inside
from fastdata.formats.example import ImageRecord, decode_example, encode_example, parse_features
from fastdata.formats.manifest import ShardInfo

_LEN = struct.Struct("<Q")
_CRC = struct.Struct("<I")
HEADER_SIZE = 12  # length + its crc
FOOTER_SIZE = 4
MAX_INDEX_LINE = 42  # two 20-digit integers, a space and a newline
_MASK_DELTA = 0xA282EAD8


def masked_crc32c(data: bytes | memoryview) -> int:
    """TFRecord's masked CRC32C: rotate right by 15 and add a constant."""
    crc = google_crc32c.value(bytes(data)) if isinstance(data, memoryview) else google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(payload: bytes) -> tuple[bytes, bytes]:
    """Header and footer that frame ``payload`` as one TFRecord record."""
    length = _LEN.pack(len(payload))
    return length + _CRC.pack(masked_crc32c(length)), _CRC.pack(masked_crc32c(payload))


def unframe(buf: bytes, *, shard: str | os.PathLike = "?", offset: int = 0, check_crc: bool = True) -> bytes:
    """Validate one framed record held whole in ``buf`` and return its payload.

    Raises:
        CorruptRecordError: bad length, bad CRC or a size that does not match the framing.
    """
    if len(buf) < HEADER_SIZE + FOOTER_SIZE:
        raise CorruptRecordError(shard, offset, f"record is {len(buf)} bytes, shorter than its framing")
    (length,) = _LEN.unpack_from(buf, 0)
    if check_crc and _CRC.unpack_from(buf, 8)[0] != masked_crc32c(buf[:8]):
        raise CorruptRecordError(shard, offset, "length CRC mismatch")
    if HEADER_SIZE + length + FOOTER_SIZE != len(buf):
        raise CorruptRecordError(shard, offset, f"length field says {length} bytes but the index says {len(buf) - 16}")
    payload = buf[HEADER_SIZE : HEADER_SIZE + length]
    if check_crc and _CRC.unpack_from(buf, HEADER_SIZE + length)[0] != masked_crc32c(payload):
        raise CorruptRecordError(shard, offset, "data CRC mismatch")
    return payload


def build_index(path: str | os.PathLike) -> np.ndarray:
    """Scan a TFRecord file's framing (without reading payloads) into an ``[n, 2]`` (offset, size) array.

    Raises:
        CorruptRecordError: a length CRC fails or the file ends inside a record.
    """
    rows: list[tuple[int, int]] = []
    fd, st = open_regular(path)  # a FIFO or device is refused, never read
    file_size = st.st_size
    with open(fd, "rb", buffering=0) as f:
        offset = 0
        while offset < file_size:
            header = f.read(HEADER_SIZE)
            if len(header) < HEADER_SIZE:
                raise CorruptRecordError(path, offset, "file ends inside a record header (truncated file)")
            (length,) = _LEN.unpack_from(header, 0)
            if _CRC.unpack_from(header, 8)[0] != masked_crc32c(header[:8]):
                raise CorruptRecordError(path, offset, "length CRC mismatch")
            size = HEADER_SIZE + length + FOOTER_SIZE
            if offset + size > file_size:
                raise CorruptRecordError(path, offset, "file ends inside a record (truncated file)")
            rows.append((offset, size))
            offset += size
            f.seek(offset)
    return np.asarray(rows, dtype=np.int64).reshape(-1, 2)


def index_bytes(index: np.ndarray) -> bytes:
    """A DALI-compatible text index (one ``"offset size"`` line per record) as bytes."""
    return "".join(f"{offset} {size}\n" for offset, size in index.tolist()).encode("ascii")


def write_index(path: str | os.PathLike, index: np.ndarray) -> None:
    """Write a DALI-compatible text index (one ``"offset size"`` line per record)."""
    with open(path, "wb") as f:
        f.write(index_bytes(index))


def max_index_bytes(shard_bytes: int) -> int:
    """The largest index a TFRecord file of ``shard_bytes`` bytes can have (records are >= 16 bytes)."""
    return MAX_INDEX_LINE * (shard_bytes // (HEADER_SIZE + FOOTER_SIZE)) + 1


def read_index(
    path: str | os.PathLike, *, max_bytes: int = 1 << 32, nbytes: int | None = None, crc32c: str | None = None
) -> np.ndarray:
    """Read a text index into an ``[n, 2]`` int64 array, bounded and checked.

    Args:
        path: the index file; it must be a regular file.
        max_bytes: refuse a larger file without reading it (see :func:`max_index_bytes`).
        nbytes: the size the manifest records for it, if any.
        crc32c: the CRC32C the manifest records for it, if any.

    Raises:
        FileNotFoundError: no index file.
        CorruptRecordError: not a regular file, another size or checksum than the manifest's, or
            not lines of two non-negative integers.
    """
    data = read_regular(path, max_bytes=max_bytes, nbytes=nbytes)
    check_crc32c(data, crc32c, path)
    try:
        flat = _parse_index(data)
    except (ValueError, OverflowError):
        raise CorruptRecordError(path, None, "is not a TFRecord index (expected 'offset size' lines of integers)") from None
    if flat.size % 2 or (flat.size and flat.min() < 0):
        raise CorruptRecordError(path, None, "is not a TFRecord index (an odd number of fields, or a negative one)")
    return flat.reshape(-1, 2)


def _parse_index(data: bytes, chunk: int = 1 << 22) -> np.ndarray:
    """The integers of an index's text, parsed a few MB at a time: memory stays a small multiple of the file
    (one ``bytes`` object per number for the whole file would be about 20 times its size)."""
    parts, start = [], 0
    while start < len(data):
        stop = data.find(b"\n", min(start + chunk, len(data)))  # cut after a whole line
        stop = len(data) if stop < 0 else stop + 1
        parts.append(np.array(data[start:stop].split(), dtype=np.int64))
        start = stop
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def index_path_for(path: str | os.PathLike) -> Path:
    """Where fastdata keeps the index of a shard: ``shard-00000.tfrecord`` → ``shard-00000.idx``."""
    return Path(path).with_suffix(".idx")


class TFRecordShardWriter(ShardWriterBase):
    """Writes one TFRecord shard and its index under temporary names."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._tmp = tmp_path(self.path)
        self._file = open(self._tmp, "wb")
        self._offsets: list[tuple[int, int]] = []
        self._crc = google_crc32c.Checksum()
        self._size = 0

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

    def abort(self) -> None:
        try:
            self._file.close()  # flushes the buffer, which fails again on a full disk: the file goes anyway
        except OSError:
            pass
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
        buf = os.pread(self._fd, size, position)
        if len(buf) != size:
            raise CorruptRecordError(self.path, position, f"short read ({len(buf)} of {size} bytes): truncated shard")
        payload = unframe(buf, shard=self.path, offset=position, check_crc=self.check_crc)
        st = os.fstat(self._fd)  # a record's own CRCs cannot tell a record of another image: the file's times can
        if (st.st_size, st.st_mtime_ns) != self._stamp:
            raise DatasetChangedError(
                f"{self.path} was rewritten in place after this reader opened it (same file, new contents); "
                "create a new ShardDataset (and DataLoader) to read the new files"
            )
        return payload

    def read(self, position: int, size: int) -> tuple[bytes, int | None]:
        payload = self.read_payload(position, size)
        try:
            record = decode_example(payload, label_offset=self.label_offset)
        except ValueError as exc:
            raise CorruptRecordError(self.path, position, str(exc)) from exc
        return record.image, record.label

    def read_fields(self, position: int, size: int) -> Any:
        try:
            return parse_features(self.read_payload(position, size))
        except ValueError as exc:
            raise CorruptRecordError(self.path, position, str(exc)) from exc


class TFRecordFormat(StorageFormat):
    """TFRecord shards with ``tf.train.Example`` records and ``.idx`` index files."""

    name = "tfrecord"
    suffix = ".tfrecord"

    def writer(self, path: Path) -> TFRecordShardWriter:
        return TFRecordShardWriter(path)

    def reader(self, path: Path, *, expected: ShardInfo | None = None) -> TFRecordShardReader:
        return TFRecordShardReader(path, nbytes=None if expected is None else expected.nbytes)

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
            raise CorruptRecordError(path, None, f"lists {len(index)} records but the manifest says {shard.num_samples}")
        offsets, sizes = index[:, 0].copy(), index[:, 1].copy()
        if len(index) and (sizes.min() < HEADER_SIZE + FOOTER_SIZE or (offsets + sizes).max() > shard.nbytes):
            raise CorruptRecordError(path, None, f"lists records outside the {shard.nbytes} bytes of {shard.path}")
        return offsets, sizes

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
                resolve_inside(root, shard.index), max_bytes=max_index_bytes(shard.nbytes),
                nbytes=shard.index_nbytes, crc32c=shard.index_crc32c,
            )
        except FileNotFoundError:
            return [f"{shard.index}: missing (the index of {shard.path})"]
        except CorruptRecordError as exc:
            return [f"{shard.index}: {exc.reason}"]
        if listed.shape != actual.shape or not np.array_equal(listed, actual):
            return [f"{shard.index} does not match the records of {shard.path}"]
        return []
