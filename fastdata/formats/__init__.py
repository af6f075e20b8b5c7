"""Storage formats: a name → format registry."""

from __future__ import annotations

from fastdata.formats.base import CorruptRecordError, StorageFormat
from fastdata.formats.lmdb_shards import LMDBFormat
from fastdata.formats.tfrecord import TFRecordFormat

FORMATS: dict[str, StorageFormat] = {"lmdb": LMDBFormat(), "tfrecord": TFRecordFormat()}


def get_format(name: str) -> StorageFormat:
    """The storage format called ``name``.

    Raises:
        ValueError: unknown name; the message lists the valid ones.
    """
    try:
        return FORMATS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown format {name!r}: choose one of {', '.join(sorted(FORMATS))}") from None


__all__ = ["FORMATS", "CorruptRecordError", "StorageFormat", "get_format"]
