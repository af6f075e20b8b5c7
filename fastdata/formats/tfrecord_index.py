"""DALI-compatible ``.idx`` files of TFRecord shards.

One ``"offset size"`` line per record, ``size`` covering the
whole framed record (the format DALI's ``tfrecord2idx`` writes and ``fn.readers.tfrecord`` reads), written beside
each shard, and read back bounded by what the shard can hold and checked against the manifest's size and CRC32C.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from fastdata.formats.base import CorruptRecordError
from fastdata.formats.files import check_crc32c, read_regular
from fastdata.formats.tfrecord_framing import FOOTER_SIZE, HEADER_SIZE

MAX_INDEX_LINE = 42  # two 20-digit integers, a space and a newline
MIN_INDEX_LINE = 5  # "0 16\n": a one-digit offset and the smallest record (16 bytes of framing)


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
        raise CorruptRecordError(
            path, None, "is not a TFRecord index (expected 'offset size' lines of integers)"
        ) from None
    if flat.size % 2 or (flat.size and flat.min() < 0):
        raise CorruptRecordError(path, None, "is not a TFRecord index (an odd number of fields, or a negative one)")
    return flat.reshape(-1, 2)


def _parse_index(data: bytes, chunk: int = 1 << 22) -> np.ndarray:
    """The integers of an index's text, parsed a few MB at a time.

    Memory stays a small multiple of the file
    (one ``bytes`` object per number for the whole file would be about 20 times its size).
    """
    parts, start = [], 0
    while start < len(data):
        stop = data.find(b"\n", min(start + chunk, len(data)))  # cut after a whole line
        stop = len(data) if stop < 0 else stop + 1
        parts.append(_parse_lines(data[start:stop]))
        start = stop
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


_LARGEST = 1 << 62  # no offset or size of a real shard comes near it; numpy's text parse saturates at 2**63 - 1


def _parse_lines(text: bytes) -> np.ndarray:
    """The integers of whole ``offset size`` lines.

    numpy's C parser (4x faster than ``split``: an index is parsed again each time its shard is read after its arrays
    were dropped) when the text is plainly two numbers a line; anything else (a blank line, no final newline, a huge
    number) goes to the strict ``split`` parse.
    """
    lines = text.count(b"\n")
    if lines and text.endswith(b"\n"):
        try:
            flat = np.fromstring(text, dtype=np.int64, sep=" ")
        except ValueError:
            flat = None
        if flat is not None and flat.size == 2 * lines and (flat.max() < _LARGEST):
            return flat
    return np.array(text.split(), dtype=np.int64)


def index_path_for(path: str | os.PathLike) -> Path:
    """Where fastdata keeps the index of a shard: ``shard-00000.tfrecord`` → ``shard-00000.idx``."""
    return Path(path).with_suffix(".idx")
