"""TFRecord framing, exactly as TensorFlow writes it.

TFRecord framing: ``uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)``
(little-endian) around each record, exactly as TensorFlow writes it; :func:`frame` and :func:`unframe` wrap and check
one record, and :func:`build_index` walks a whole file's framing (payloads unread) into the ``(offset, size)`` rows
a DALI ``.idx`` file lists (:mod:`~fastdata.formats.tfrecord_index`).
"""

from __future__ import annotations

import os
import struct

import google_crc32c
import numpy as np

from fastdata.formats.base import CorruptRecordError
from fastdata.formats.files import open_regular

_LEN = struct.Struct("<Q")
_CRC = struct.Struct("<I")
HEADER_SIZE = 12  # length + its crc
FOOTER_SIZE = 4
_MASK_DELTA = 0xA282EAD8


def mask(crc: int) -> int:
    """TFRecord's mask of a CRC32C: rotate right by 15 and add a constant."""
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def masked_crc32c(data: bytes | memoryview) -> int:
    """TFRecord's masked CRC32C of ``data``."""
    return mask(google_crc32c.value(bytes(data)) if isinstance(data, memoryview) else google_crc32c.value(data))


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
