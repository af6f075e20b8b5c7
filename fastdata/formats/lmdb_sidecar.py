"""``.loc`` sidecars of LMDB shards: where every value lies, read in one go instead of walking the B-tree.

The LMDB analogue of a TFRecord shard's ``.idx``. Opening an LMDB shard without one means a checked walk of its whole
B-tree (:func:`~fastdata.formats.lmdb_pages.index_values`) and reading and parsing its ``__meta__`` JSON: a few
milliseconds for a shard of 1,000 records, paid on every re-open of a shard evicted from a process's open readers
(:mod:`~fastdata.formats.open_readers`), which under a full shuffle of a large pack is nearly every read.
``LMDBShardWriter.close`` therefore walks the finished shard once and writes ``shard-NNNNN.loc`` beside it (under a
temporary name, published before the shard); the manifest records its name, size and CRC32C in the shard's
``index``, ``index_nbytes`` and ``index_crc32c``, as for a TFRecord ``.idx``, so everything that carries a shard's
index file (the node's cache, part ranges, ``merge``, ``--append``, uploads to a store) carries the sidecar.

Layout, little-endian: a 32-byte header (magic ``FDLMDLOC``, version u32, the shard's page size u32, records ``n``
u64, fields records ``m`` u64, 0 or ``n``), then the arrays, each aligned: value offsets i64[n], labels i64[n],
fields offsets i64[m], value lengths u32[n], CRC32Cs u32[n], fields lengths u32[m], fields CRC32Cs u32[m], overflow
flags u8[n], fields overflow flags u8[m]: 25 bytes a record (42 with fields).

:func:`read_sidecar` reads it with one bounded read, checks its CRC32C against the manifest's before anything else,
its header against the manifest's count, and every value's place against the shard's size and page layout in a few
numpy operations; the arrays are views of the bytes read (no Python object per record). A sidecar the manifest names
that is missing, damaged or points outside the shard is a :class:`CorruptRecordError` naming it, never a crash.
Reads through it keep every check of a walked shard: an overflow value's page header read in the same ``pread`` as
the value, and the value's CRC32C.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from fastdata.formats.errors import CorruptRecordError
from fastdata.formats.files import check_crc32c, read_regular, resolve_inside
from fastdata.formats.lmdb_keys import FIELDS, META, RECORD
from fastdata.formats.lmdb_pages import PAGE_HEADER, PAGE_SIZES, LMDBIndex, Located
from fastdata.formats.manifest_entries import ShardInfo

__all__ = [
    "SUFFIX",
    "Sidecar",
    "max_sidecar_bytes",
    "parse_sidecar",
    "read_sidecar",
    "sidecar_bytes",
    "sidecar_path_for",
    "sidecar_problems",
]

SUFFIX = ".loc"
_MAGIC = b"FDLMDLOC"
_VERSION = 1
_HEADER = struct.Struct("<8sIIQQ")  # magic, version, page size, records, fields records
_PER_RECORD, _PER_FIELDS = 25, 17  # bytes of the arrays per record, and per fields record


@dataclass(frozen=True)
class Sidecar:
    """What a shard's reader keeps: where each value lies, and each record's CRC32C and label (views of one buffer).

    Attributes:
        index: the values' places, as the walk gives them (``__meta__`` is not located: a reader never needs it).
        crc32c: uint32 CRC32C of each record's image bytes.
        labels: int64 label of each record.
        fields_crc32c: uint32 CRC32C of each record's fields, or None when the shard stores none.
    """

    index: LMDBIndex
    crc32c: np.ndarray
    labels: np.ndarray
    fields_crc32c: np.ndarray | None


def sidecar_path_for(path: str | os.PathLike) -> Path:
    """Where a shard's sidecar lies: ``shard-00000.lmdb`` → ``shard-00000.loc``."""
    return Path(path).with_suffix(SUFFIX)


def max_sidecar_bytes(num_samples: int) -> int:
    """The size of the sidecar of a shard of ``num_samples`` records that store fields (the largest it can be)."""
    return _HEADER.size + (_PER_RECORD + _PER_FIELDS) * num_samples


def sidecar_bytes(index: LMDBIndex, crc32c: np.ndarray, labels: np.ndarray, fields_crc32c: np.ndarray | None) -> bytes:
    """The sidecar of a walked shard, given the CRC32C and label of each of its records.

    Raises:
        ValueError: the walk's records (or fields records) are not numbered ``0 .. n - 1`` with one CRC32C and label
            each, or fields are stored for some records only (a shard fastdata's writer does not make).
    """
    records, fields = index.located[RECORD], index.located[FIELDS]
    n, m = len(records), len(fields)
    if records.numbers is not None or fields.numbers is not None or len(crc32c) != n or len(labels) != n:
        raise ValueError(f"a shard of {n} records numbered other than 0 .. n - 1, or not one CRC32C and label each")
    if (
        m not in (0, n)
        or (fields_crc32c is None) != (m == 0)
        or (fields_crc32c is not None and len(fields_crc32c) != m)
    ):
        raise ValueError(f"fields stored for {m} of {n} records (a fastdata shard stores them for all or none)")
    parts: list[bytes | np.ndarray] = [
        _HEADER.pack(_MAGIC, _VERSION, index.page_size, n, m),
        records.offsets.astype("<i8"),
        np.asarray(labels).astype("<i8"),
        fields.offsets.astype("<i8"),
        records.lengths.astype("<u4"),
        np.asarray(crc32c).astype("<u4"),
        fields.lengths.astype("<u4"),
        np.asarray(fields_crc32c if m else [], dtype=np.uint32).astype("<u4"),
        records.overflow.astype(np.uint8),
        fields.overflow.astype(np.uint8),
    ]
    return b"".join(p if isinstance(p, bytes) else p.tobytes() for p in parts)


def read_sidecar(path: str | os.PathLike, shard: ShardInfo, file_size: int) -> Sidecar:
    """Read and check the sidecar the manifest names for ``shard`` (see the module docstring).

    Args:
        path: the sidecar (resolved inside the pack).
        shard: the shard's manifest entry (its count, and the sidecar's size and CRC32C).
        file_size: the size of the shard file opened (checked to be ``shard.nbytes`` by its opener).

    Raises:
        CorruptRecordError: the sidecar is missing, not a regular file, not the manifest's (size, CRC32C), not a
            sidecar of this shard, or places a value outside the shard; the message names it.
    """
    try:
        data = read_regular(path, max_bytes=max_sidecar_bytes(shard.num_samples), nbytes=shard.index_nbytes)
    except FileNotFoundError:
        raise CorruptRecordError(
            path,
            None,
            f"is missing (the location sidecar the manifest names for {shard.path})",
            hint="run `fastdata verify` on the pack",
        ) from None
    check_crc32c(data, shard.index_crc32c, path)
    return parse_sidecar(data, path, num_samples=shard.num_samples, file_size=file_size)


def parse_sidecar(data: bytes, path: str | os.PathLike, *, num_samples: int, file_size: int) -> Sidecar:
    """The arrays of a sidecar's bytes (views, no copy), every value's place checked against the shard's layout.

    Raises:
        CorruptRecordError: not a sidecar, another count than ``num_samples``, or a value outside the shard.
    """
    if len(data) < _HEADER.size:
        raise CorruptRecordError(path, None, f"is {len(data)} bytes, too short for an LMDB location sidecar")
    magic, version, page_size, n, m = _HEADER.unpack_from(data)
    if magic != _MAGIC or version != _VERSION:
        raise CorruptRecordError(path, None, "is not an LMDB location sidecar of a version this fastdata reads")
    if n != num_samples or m not in (0, n):
        raise CorruptRecordError(path, None, f"lists {n} records ({m} with fields), the manifest says {num_samples}")
    if page_size not in PAGE_SIZES or len(data) != _HEADER.size + _PER_RECORD * n + _PER_FIELDS * m:
        raise CorruptRecordError(
            path, None, f"is {len(data)} bytes, not what its header declares (page size {page_size}, {n} records)"
        )
    at = _HEADER.size

    def take(dtype: str, count: int) -> np.ndarray:
        nonlocal at
        array = np.frombuffer(data, dtype=dtype, count=count, offset=at)
        at += array.nbytes
        return array

    offsets, labels, fields_offsets = take("<i8", n), take("<i8", n), take("<i8", m)
    lengths, crc, fields_lengths, fields_crc = take("<u4", n), take("<u4", n), take("<u4", m), take("<u4", m)
    overflow, fields_overflow = take("u1", n), take("u1", m)
    records = _located(offsets, lengths, overflow, page_size, file_size, path, "a record")
    fields = _located(fields_offsets, fields_lengths, fields_overflow, page_size, file_size, path, "a fields record")
    nothing = Located(None, np.zeros(0, np.int64), np.zeros(0, np.uint32), np.zeros(0, np.bool_))
    located = tuple({RECORD: records, FIELDS: fields, META: nothing}[kind] for kind in range(3))
    index = LMDBIndex(page_size, file_size, located, n + m + 1, 0)
    return Sidecar(index, crc, labels, fields_crc if m else None)


def _located(
    offsets: np.ndarray,
    lengths: np.ndarray,
    flags: np.ndarray,
    page_size: int,
    file_size: int,
    path: str | os.PathLike,
    what: str,
) -> Located:
    """The values of one kind, each checked to lie where the file can hold it.

    The values of one kind, each checked to lie where an LMDB file of ``file_size`` bytes can hold it: past the two
    meta pages and inside the file; an overflow value right after its run's page header; any other inside one page.
    """
    if not len(offsets):
        return Located(None, offsets, lengths, flags.view(np.bool_))
    if int(flags.max()) > 1:
        raise CorruptRecordError(path, None, f"places {what} with an overflow flag that is neither 0 nor 1")
    big = flags.view(np.bool_)
    inside = (offsets >= 2 * page_size) & (offsets <= file_size)  # before adding: no int64 overflow
    ends = np.where(inside, offsets, 0) + lengths.astype(np.int64)
    within = offsets % page_size
    sound = inside & (ends <= file_size) & np.where(big, within == PAGE_HEADER, within + lengths <= page_size)
    if not bool(sound.all()):
        k = int(np.flatnonzero(~sound)[0])
        raise CorruptRecordError(
            path,
            None,
            f"places {what} ({int(lengths[k])} bytes at {int(offsets[k])}) outside "
            f"the {file_size} bytes or the pages of its shard",
        )
    return Located(None, offsets, lengths, big)


def sidecar_problems(
    root: Path,
    shard: ShardInfo,
    walked: LMDBIndex,
    crc32c: np.ndarray,
    labels: np.ndarray,
    fields_crc32c: np.ndarray | None,
    file_size: int,
) -> list[str]:
    """What ``fastdata verify`` finds wrong with a shard's sidecar.

    What ``fastdata verify`` finds wrong with the sidecar the manifest names for ``shard`` (none: ``[]``): missing,
    damaged, or disagreeing with the walk of the shard and its ``__meta__`` (each problem names the sidecar).
    """
    if not shard.index:
        return []
    try:
        found = read_sidecar(resolve_inside(root, shard.index), shard, file_size)
    except CorruptRecordError as exc:
        return [f"{shard.index}: {exc.reason}"]
    except OSError as exc:
        return [f"{shard.index}: unreadable ({exc.strerror or type(exc).__name__})"]
    pairs: list[tuple[str, npt.ArrayLike, npt.ArrayLike]] = [
        ("page size", walked.page_size, found.index.page_size),
        ("CRC32Cs", crc32c, found.crc32c),
        ("labels", labels, found.labels),
        (
            "fields CRC32Cs",
            np.zeros(0) if fields_crc32c is None else fields_crc32c,
            np.zeros(0) if found.fields_crc32c is None else found.fields_crc32c,
        ),
    ]
    for kind, name in ((RECORD, "records'"), (FIELDS, "fields'")):
        mine, theirs = walked.located[kind], found.index.located[kind]
        pairs += [
            (f"{name} numbering", mine.numbers is None, True),
            (f"{name} offsets", mine.offsets, theirs.offsets),
            (f"{name} lengths", mine.lengths, theirs.lengths),
            (f"{name} overflow", mine.overflow, theirs.overflow),
        ]
    differ = [name for name, a, b in pairs if not np.array_equal(a, b)]
    if differ:
        return [f"{shard.index}: does not match {shard.path} (its {', '.join(differ)} differ from the shard's)"]
    return []
