"""One TFRecord image record read into its image ``bytes`` and label with one copy of its bytes: the kernel's.

The plain read (``pread`` the record, slice its payload out, parse it with protobuf, take the image out of the
message) copies the image three times after the kernel does. :func:`read_image_record` reads a record in three
``pread`` calls instead: the framing header with the payload's first :data:`PREFIX` bytes, where the walk of
:mod:`~fastdata.formats.example_wire` finds the image; the image itself, into a ``bytes`` of its own (what the
reader returns: no copy, no view into a shared buffer); and the rest of the payload with the framing footer. Every
byte is still checked: the length CRC on the header, the data CRC (``google_crc32c``, extended over the three
pieces) over the whole payload, and the walk over the whole payload but the image. A record whose image does not
start within the prefix, or that is not of the plain shape, takes the plain read (same results, same errors).

:func:`read_image_records` reads a batch of records in one call into ``fastdata.formats._records`` (built with the
package): the same reads and checks in C with the GIL released, so a loader's threads read while others decode.
Any record it does not take as sound and plain (and every record, where the kernel is not built or
``FASTDATA_NATIVE=0``) goes through :func:`read_image_record`, which gives its answer or its error.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import google_crc32c

from fastdata.formats.errors import CorruptRecordError
from fastdata.formats.example import decode_image_label
from fastdata.formats.example_wire import NotPlain, walk
from fastdata.formats.record_kernel import read_tfrecords
from fastdata.formats.tfrecord_framing import FOOTER_SIZE, HEADER_SIZE, mask, masked_crc32c, unframe

__all__ = ["PREFIX", "read_image_record", "read_image_records", "read_payload"]

#: Payload bytes read with the framing header: where a plain record's image starts (ours: about 100 bytes in).
PREFIX = 1024


class _Short(Exception):
    """A read came back short (a truncated shard): the plain read names it."""


def _pread(fd: int, size: int, offset: int) -> bytes:
    data = os.pread(fd, size, offset)
    if len(data) != size:
        raise _Short
    return data


def read_image_record(
    fd: int, position: int, size: int, *, shard: os.PathLike | str, check_crc: bool = True, label_offset: int = 0
) -> tuple[bytes, int]:
    """``(image bytes, label)`` of one record of an open shard.

    ``(image bytes, label)`` of the record of ``size`` bytes at ``position`` of the open shard ``fd``, as
    ``decode_image_label(unframe(pread(fd, size, position)), label_offset=label_offset)`` gives them.

    Raises:
        CorruptRecordError: a short read, the framing (length, CRCs) or the Example is bad; the message names
            ``shard`` and ``position`` (the plain read's messages).
    """
    length = size - HEADER_SIZE - FOOTER_SIZE
    try:
        head = _pread(fd, min(size, HEADER_SIZE + PREFIX), position)
        if length < 0 or int.from_bytes(head[:8], "little") != length:  # the plain read says which check fails
            raise NotPlain
        if check_crc and int.from_bytes(head[8:12], "little") != masked_crc32c(head[:8]):
            raise CorruptRecordError(shard, position, "length CRC mismatch")
        steps = walk(head[HEADER_SIZE:], length)
        start, nbytes = next(steps)
        image = _pread(fd, nbytes, position + HEADER_SIZE + start)
        rest = _pread(fd, length - start - nbytes + FOOTER_SIZE, position + HEADER_SIZE + start + nbytes)
    except (NotPlain, _Short):
        return _plain(fd, position, size, shard, check_crc, label_offset)
    before, after = head[HEADER_SIZE : HEADER_SIZE + start], rest[:-FOOTER_SIZE]
    if check_crc:
        crc = google_crc32c.extend(google_crc32c.extend(google_crc32c.value(before), image), after)
        if int.from_bytes(rest[-FOOTER_SIZE:], "little") != mask(crc):
            raise CorruptRecordError(shard, position, "data CRC mismatch")
    try:
        steps.send(before + after)
    except StopIteration as done:  # the walk's end: the whole payload but the image checked
        label = done.value
    except NotPlain:
        return _plain(fd, position, size, shard, check_crc, label_offset)
    else:  # pragma: no cover - the walk stops after the image
        raise AssertionError("the Example walk yielded twice")
    return image, (0 if label is None else label + label_offset)


def read_image_records(
    fd: int,
    positions: Sequence[int],
    sizes: Sequence[int],
    *,
    shard: os.PathLike | str,
    check_crc: bool = True,
    label_offset: int = 0,
) -> list[tuple[bytes, int]]:
    """:func:`read_image_record` of each record in turn, the sound plain ones read and checked in one GIL-free call.

    Raises:
        CorruptRecordError: the first damaged record's error, as :func:`read_image_record` raises it.
    """
    taken = read_tfrecords(fd, positions, sizes, check_crc)
    return [
        read_image_record(fd, p, n, shard=shard, check_crc=check_crc, label_offset=label_offset)
        if record is None  # not taken (or no kernel): the plain read decides, answer or error
        else (record[0], 0 if record[1] is None else record[1] + label_offset)
        for p, n, record in zip(positions, sizes, taken or [None] * len(positions), strict=False)
    ]


def read_payload(fd: int, position: int, size: int, *, shard: os.PathLike | str, check_crc: bool = True) -> bytes:
    """The Example bytes of the record of ``size`` bytes at ``position``: one ``pread``, :func:`unframe` (CRC-checked).

    Raises:
        CorruptRecordError: a short read (a truncated shard) or bad framing, naming ``shard`` and ``position``.
    """
    buf = os.pread(fd, size, position)
    if len(buf) != size:
        raise CorruptRecordError(shard, position, f"short read ({len(buf)} of {size} bytes): truncated shard")
    return unframe(buf, shard=shard, offset=position, check_crc=check_crc)


def _plain(
    fd: int, position: int, size: int, shard: os.PathLike | str, check_crc: bool, label_offset: int
) -> tuple[bytes, int]:
    """The plain read: the whole record, :func:`unframe`, then protobuf."""
    payload = read_payload(fd, position, size, shard=shard, check_crc=check_crc)
    try:
        return decode_image_label(payload, label_offset=label_offset)
    except ValueError as exc:
        raise CorruptRecordError(shard, position, str(exc)) from exc
