"""The image bytes and label of a ``tf.train.Example`` found by walking its wire format, without a protobuf parse.

A reader that wants only ``image/encoded``'s first value and ``image/class/label``'s first value does not need the
protobuf package to copy the whole record twice (the payload into the message, the image out of it). This walk
reads the record's structure (tags and lengths, a few hundred bytes) and never the image: so the reader can read the
image with its own ``pread`` into a ``bytes`` of its own (:mod:`~fastdata.formats.tfrecord_read`), and hand the rest
here as a *skeleton*: the payload with the image's bytes cut out.

Exact by construction: the walk takes only the plain shape every writer of Examples produces (one ``features``
field; each map entry a key then a value; each ``Feature`` one list; packed numeric lists) and checks every tag,
length and varint of it, every key's UTF-8 and that every field ends where its parent says. Anything else, valid
protobuf or not (a repeated key it reads, merged messages, unknown fields, unpacked lists, an empty Example), raises
:class:`NotPlain`, and the caller parses the record with protobuf
(:func:`~fastdata.formats.example.decode_image_label`), which gives the answer or the error. On the plain shape both
give the same ``(image, label)``; a test compares them on damaged and odd records.

Example::

    steps = walk(payload[:1024], len(payload))
    start, size = next(steps)                          # where the image lies (or NotPlain)
    try:
        steps.send(payload[:start] + payload[start + size:])   # the rest checked
    except StopIteration as stop:
        label = stop.value                             # image/class/label's first value, None if absent
"""

from __future__ import annotations

from collections.abc import Generator

__all__ = ["NotPlain", "walk"]

_IMAGE = b"image/encoded"
_LABEL = b"image/class/label"
_FIRST = 0x0A  # field 1, length-delimited: Example.features, Features.feature, entry key, BytesList/packed values
_VALUE = 0x12  # field 2, length-delimited: the map entry's value
_BYTES, _FLOATS, _INTS = 0x0A, 0x12, 0x1A  # Feature's kinds: bytes_list, float_list, int64_list


class NotPlain(Exception):
    """The record is not of the plain shape this walk reads (or is damaged): parse it with protobuf instead."""


def _varint(buf: bytes, i: int, end: int) -> tuple[int, int]:
    """The varint at ``buf[i]`` (at most 10 bytes, 64 bits, before ``end``) and the position after it."""
    if i >= end:
        raise NotPlain
    b = buf[i]
    if b < 0x80:
        return b, i + 1
    value, shift = b & 0x7F, 7
    while True:
        i += 1
        if i >= end:
            raise NotPlain
        b = buf[i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            if shift == 63 and b > 1:
                raise NotPlain
            return value, i + 1
        shift += 7
        if shift > 63:
            raise NotPlain


def _lists(buf: bytes, i: int, end: int, kind: int) -> int | None:
    """Walk the values of one ``Feature``'s list, checking every one.

    Walk the values of one ``Feature``'s list (its content ``buf[i:end]``): every leaf inside ``end``, packed
    floats a multiple of 4 bytes, packed int64s whole varints. The first int64 (None: none, or not an int list).
    """
    first = None
    while i < end:
        if buf[i] != _FIRST:  # unpacked numbers (or anything else): not plain
            raise NotPlain
        length = buf[i + 1]  # past `end` only where the checks below then fail
        length, i = (length, i + 2) if length < 0x80 else _varint(buf, i + 1, end)
        stop = i + length
        if stop > end or (kind == _FLOATS and length % 4):
            raise NotPlain
        if kind == _INTS:
            while i < stop:
                value = buf[i]
                value, i = (value, i + 1) if value < 0x80 else _varint(buf, i, stop)
                if first is None:
                    first = value - (1 << 64) if value >= 1 << 63 else value
        i = stop
    return first


def walk(prefix: bytes, length: int) -> Generator[tuple[int, int], bytes, int | None]:
    """Walk a payload of ``length`` bytes in two steps: a generator.

    ``next()`` walks ``prefix`` (the payload's first bytes) up to the image and yields its ``(start, size)``;
    ``send(skeleton)`` (the payload without those ``size`` bytes at ``start``) walks the rest and stops with the
    first value of ``image/class/label`` (None: no such key) as its ``StopIteration.value``.

    Raises:
        NotPlain: not the plain shape, damaged, or (first step) the image does not start within ``prefix``.
    """
    buf = prefix
    try:
        if not length or buf[0] != _FIRST:  # Example.features: the only field
            raise NotPlain
        size, i = _varint(buf, 1, length)
        end = i + size
        if end != length:
            raise NotPlain
        image = label = None
        while i < end:  # Features.feature: map entries, each exactly a key then a value (a Feature)
            # Lengths below 128 (every one but the image's and its fields') inline; longer ones through _varint.
            if buf[i] != _FIRST:
                raise NotPlain
            size = buf[i + 1]
            size, i = (size, i + 2) if size < 0x80 else _varint(buf, i + 1, end)
            stop = i + size
            if stop > end or buf[i] != _FIRST:
                raise NotPlain
            size = buf[i + 1]
            size, i = (size, i + 2) if size < 0x80 else _varint(buf, i + 1, stop)
            key = buf[i : i + size]
            i += size
            if i >= stop or buf[i] != _VALUE:
                raise NotPlain
            size = buf[i + 1]
            size, i = (size, i + 2) if size < 0x80 else _varint(buf, i + 1, stop)
            if i + size != stop:
                raise NotPlain
            if not key.isascii():
                try:
                    key.decode("utf-8")  # a proto3 string: protobuf refuses bad UTF-8, whatever the Feature holds
                except UnicodeDecodeError:
                    raise NotPlain from None
            if i == stop:  # a Feature with no list
                if key in (_IMAGE, _LABEL):
                    raise NotPlain
                continue
            kind = buf[i]
            if kind != _BYTES and kind != _FLOATS and kind != _INTS:
                raise NotPlain
            size = buf[i + 1]
            size, i = (size, i + 2) if size < 0x80 else _varint(buf, i + 1, stop)
            if i + size != stop:
                raise NotPlain
            if key == _IMAGE:
                if image is not None or kind != _BYTES or i >= stop or buf[i] != _FIRST:
                    raise NotPlain  # a repeated key (protobuf keeps the last), another list, no value
                size, i = _varint(buf, i + 1, stop)
                if i + size > stop:
                    raise NotPlain
                image = (i, size)
                buf = yield image  # the caller reads the image and the rest; the image's bytes are cut out
                end, stop = end - size, stop - size  # the open fields end `size` bytes earlier in the skeleton
                if end != len(buf):
                    raise NotPlain
            elif key == _LABEL:
                if label is not None or kind != _INTS:
                    raise NotPlain
                label = _lists(buf, i, stop, kind)
                if label is None:
                    raise NotPlain
                i = stop
            _lists(buf, i, stop, kind)
            i = stop
    except IndexError:  # the first step ran past the prefix
        raise NotPlain from None
    if image is None:
        raise NotPlain
    return label
