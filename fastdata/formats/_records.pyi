"""Type stub of the C kernel ``_records.c`` (a batch of records read and checked with the GIL released)."""

from collections.abc import Sequence

from _typeshed import ReadableBuffer

CRC32C_PATH: str

def read_tfrecords(
    fd: int, positions: Sequence[int], sizes: Sequence[int], check_crc: bool, /
) -> list[tuple[bytes, int | None] | None]:
    """Each record's ``(image bytes, label or None)`` when sound and plain, else None (read it the plain way)."""

def read_values(
    fd: int,
    offsets: Sequence[int],
    sizes: Sequence[int],
    pages: Sequence[int],
    page_size: int,
    crcs: Sequence[int],
    check_crc: bool,
    /,
) -> list[bytes | None]:
    """Each LMDB value when it reads whole with its CRC32C, else None (read it the plain way)."""

def crc32c(data: ReadableBuffer, crc: int = 0, table: bool = False, /) -> int:
    """CRC32C of ``data`` continued from ``crc``, as ``google_crc32c.extend(crc, data)`` (``table``: the table's)."""
