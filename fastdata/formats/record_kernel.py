"""The GIL-free batch reads of ``fastdata.formats._records``, for the readers that take them.

A shard reader's ``read_many`` hands a batch of records to the C kernel, which reads each one straight into its
``bytes`` and checks every byte with the GIL released (``_records.c``'s docstring says what it checks). A record the
kernel does not take comes back as None, and the reader reads that one the plain way, which gives its exact answer
or error; so the kernel changes how fast a batch is read, never what it reads. Where the kernel is not built, or
``FASTDATA_NATIVE=0``, every record takes the plain way.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fastdata._util.optional import native_disabled
from fastdata.formats.lmdb_pages import PAGE_HEADER, LMDBIndex

try:
    from fastdata.formats import _records
except ImportError:  # not built: no C compiler at install time
    _records = None  # type: ignore[assignment]  # None stands for the kernel not built: every use checks it

__all__ = ["native_reads", "read_lmdb_values", "read_tfrecords"]


def native_reads() -> bool:
    """True when batch reads run in C (``fastdata.formats._records`` built, ``FASTDATA_NATIVE`` not ``0``)."""
    return _records is not None and not native_disabled()


def read_tfrecords(
    fd: int, positions: Sequence[int], sizes: Sequence[int], check_crc: bool
) -> list[tuple[bytes, int | None] | None] | None:
    """Each record's ``(image bytes, label or None)``, None for one the kernel did not take; None: no kernel."""
    return _records.read_tfrecords(fd, positions, sizes, check_crc) if native_reads() else None


def read_lmdb_values(
    index: LMDBIndex, fd: int, kind: int, numbers: Sequence[int], crcs: np.ndarray, check_crc: bool
) -> list[bytes | None] | None:
    """The values of keys ``numbers`` of ``kind``, None for one the kernel did not take; None: no kernel.

    ``crcs[number]`` is the CRC32C each value must have (checked with ``check_crc``); a number outside ``crcs`` or
    without a key is not taken.
    """
    if not native_reads():
        return None
    located = index.located[kind]
    wanted = np.asarray(numbers, dtype=np.int64).reshape(-1)
    slots = located.slots(wanted)
    found = (slots >= 0) & (wanted >= 0) & (wanted < len(crcs))
    offsets, expected = np.zeros(len(wanted), np.int64), np.zeros(len(wanted), np.int64)
    lengths, pages = np.full(len(wanted), -1, np.int64), np.full(len(wanted), -1, np.int64)  # -1: not read
    at = slots[found]
    offsets[found], lengths[found], expected[found] = located.offsets[at], located.lengths[at], crcs[wanted[found]]
    runs = (located.offsets[at] - PAGE_HEADER) // max(index.page_size, 1)
    pages[found] = np.where(located.overflow[at], runs, -1)
    return _records.read_values(
        fd, offsets.tolist(), lengths.tolist(), pages.tolist(), index.page_size, expected.tolist(), check_crc
    )
