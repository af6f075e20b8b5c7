"""The entries a manifest lists, as plain frozen values.

The entries a manifest lists: each shard (:class:`ShardInfo`), each source file left out (:class:`SkippedFile`) and
each packed file whose codec reported damage it worked around (:class:`FileWarnings`), as plain frozen values.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ShardInfo:
    """One shard of a packed dataset.

    Attributes:
        path: shard file, relative to the dataset root.
        num_samples: records in the shard.
        nbytes: size of the shard file in bytes.
        crc32c: CRC32C of the whole shard file, 8 hex digits.
        index: the shard's index file relative to the root: for TFRecord the DALI-compatible ``.idx``, for LMDB the
            ``.loc`` location sidecar (:mod:`fastdata.formats.lmdb_sidecar`; None in packs written before it, which
            are read by walking each shard); it travels with the shard wherever the shard goes.
        index_nbytes: size of the index file in bytes (None in manifests written before it was recorded).
        index_crc32c: CRC32C of the index file, 8 hex digits (likewise optional; an LMDB sidecar is read only
            where it is recorded).
        meta_crc32c: for LMDB, CRC32C of the shard's ``__meta__`` record (every record's label and
            checksum), checked whenever a reader opens the shard; else None.
        transcoded: how many of the shard's records pack re-coded losslessly (None in manifests written
            before it was recorded); which ones, when not all or none, is in the manifest's side file
            (:mod:`fastdata.formats.manifest_transcoded`).
    """

    path: str
    num_samples: int
    nbytes: int
    crc32c: str
    index: str | None = None
    index_nbytes: int | None = None
    index_crc32c: str | None = None
    meta_crc32c: str | None = None
    transcoded: int | None = None


@dataclass(frozen=True)
class SkippedFile:
    """A source file the packer could not use, and why."""

    path: str
    reason: str


@dataclass(frozen=True)
class FileWarnings:
    """A packed file whose codec reported damage it worked around, and what it said.

    Attributes:
        path: the source file, relative to the packed folder.
        messages: the codec's messages (libjpeg's "Corrupt JPEG data: 3 extraneous bytes
            before marker 0xc0", a line libtiff printed, a PIL warning, ...).
    """

    path: str
    messages: list[str]
