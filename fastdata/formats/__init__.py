"""What is on disk: the manifest, the shard Writer/Reader interface, TFRecord and LMDB, and a name registry.

- :mod:`~fastdata.formats.manifest`: ``manifest.json`` (written last: the sign that a pack completed), strictly
  validated.
- :mod:`~fastdata.formats.manifest_entries`: the shard, skipped-file and file-warning entries a manifest lists.
- :mod:`~fastdata.formats.manifest_transcoded`: which records pack re-coded: per-shard counts and a
  checked bitmap side file.
- :mod:`~fastdata.formats.manifest_validation`: strict JSON and typed, one-line-error checks of every manifest field.
- :mod:`~fastdata.formats.errors`: :class:`CorruptRecordError`, :class:`DatasetChangedError` (rebuildable from a
  message).
- :mod:`~fastdata.formats.files`: opening the files a manifest names without trusting them (inside the folder,
  regular, sized, bounded).
- :mod:`~fastdata.formats.targets`: ``targets.npy``, written by the packer, read with its header checked first.
- :mod:`~fastdata.formats.packed`: a packed folder opened and checked for reading (what ``ShardDataset`` holds).
- :mod:`~fastdata.formats.base`: the :class:`StorageFormat` / shard reader and writer interface.
- :mod:`~fastdata.formats.example`: one image record and its ``tf.train.Example`` encoding.
- :mod:`~fastdata.formats.tfrecord`: TFRecord shards: writer, positioned reader, the ``tfrecord`` format.
- :mod:`~fastdata.formats.tfrecord_framing`: TFRecord framing, its masked crc32c, a file's framing scanned.
- :mod:`~fastdata.formats.tfrecord_index`: DALI-compatible ``.idx`` files, written and read back bounded and checked.
- :mod:`~fastdata.formats.lmdb_shards`: one single-file LMDB environment per shard, each record CRC-checked on read.
- :mod:`~fastdata.formats.lmdb_sidecar`: an LMDB shard's ``.loc`` sidecar: every value's place, CRC32C and label in
  one read.
- :mod:`~fastdata.formats.lmdb_meta`: a walked LMDB shard (no sidecar, or verify): its values located,
  ``__meta__`` parsed.
"""

from __future__ import annotations

from fastdata.formats.base import CorruptRecordError, DatasetChangedError, StorageFormat
from fastdata.formats.lmdb_shards import LMDBFormat
from fastdata.formats.manifest import MANIFEST_NAME, Manifest
from fastdata.formats.manifest_entries import ShardInfo, SkippedFile
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


__all__ = [
    "FORMATS",
    "MANIFEST_NAME",
    "CorruptRecordError",
    "DatasetChangedError",
    "Manifest",
    "ShardInfo",
    "SkippedFile",
    "StorageFormat",
    "get_format",
]
