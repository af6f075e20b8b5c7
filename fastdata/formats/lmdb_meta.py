"""What a walked LMDB shard holds.

What a walked LMDB shard holds (the path of packs without ``.loc`` sidecars, and of ``fastdata verify``): every
value located by the checked walk of :mod:`~fastdata.formats.lmdb_pages`, and the ``__meta__`` record read and parsed
(a UTF-8 JSON object: ``num_samples`` and a list per record of ``labels``, ``filenames``, ``heights``, ``widths``,
``formats``, ``crc32c``, ``class_names``, and ``fields_crc32c`` where the shard stores fields).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from fastdata.formats.errors import CorruptRecordError
from fastdata.formats.lmdb_keys import META, classify
from fastdata.formats.lmdb_pages import LMDBIndex, index_values

__all__ = ["PER_RECORD", "int_array", "locate_values", "meta_from", "parse_meta"]

PER_RECORD = ("labels", "filenames", "heights", "widths", "formats", "crc32c", "class_names")


def parse_meta(raw: bytes, path: str | os.PathLike) -> dict:
    """Parse a ``__meta__`` record: ``num_samples`` a count, each per-record list of that length.

    Raises:
        CorruptRecordError: not such a JSON object (the message never quotes it).
    """
    try:
        meta = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise CorruptRecordError(path, None, "its __meta__ record is not a JSON object") from None
    n = meta.get("num_samples") if isinstance(meta, dict) else None
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise CorruptRecordError(path, None, "its __meta__ record has no valid num_samples")
    for key in ("labels", "crc32c") + tuple(k for k in PER_RECORD + ("fields_crc32c",) if k in meta):
        if not isinstance(meta.get(key), list) or len(meta[key]) != n:
            raise CorruptRecordError(path, None, f"its __meta__ record's {key} is not a list of {n} entries")
    return meta


def int_array(values: list, dtype: type, path: str | os.PathLike, key: str) -> np.ndarray:
    """The integers of a ``__meta__`` list as a numpy array; each must be an int that fits ``dtype``."""
    if not set(map(type, values)) <= {int}:  # bool is an int too, but not a label or a checksum
        raise CorruptRecordError(path, None, f"its __meta__ record's {key} are not all integers")
    info = np.iinfo(dtype)
    if values and (min(values) < info.min or max(values) > info.max):
        raise CorruptRecordError(path, None, f"its __meta__ record's {key} are out of range")
    return np.asarray(values, dtype=dtype)


def locate_values(fd: int, file_size: int, path: str | os.PathLike) -> LMDBIndex:
    """Where each record, fields record and ``__meta__`` of a shard lies.

    Where each record, fields record and ``__meta__`` lies: compact arrays by record number, from the checked walk
    of :mod:`~fastdata.formats.lmdb_pages` (which raises CorruptRecordError for a damaged or foreign file).
    """
    return index_values(fd, file_size, path, classify, 3)


def meta_from(index: LMDBIndex, fd: int, path: Path) -> bytes:
    """The raw ``__meta__`` record of a walked shard.

    Raises:
        CorruptRecordError: there is none.
    """
    raw = index.value(fd, META, 0, path)
    if raw is None:
        raise CorruptRecordError(path, None, "no __meta__ entry (not a fastdata LMDB shard, or an unfinished one)")
    return raw
