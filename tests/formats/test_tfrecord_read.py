"""The three-``pread`` record read (``formats/tfrecord_read.py``, ``formats/example_wire.py``): the same image and
label as the plain read (whole record, ``unframe``, protobuf) on every record, plain or odd, and the same error on
every damaged one; every byte of a record still checked."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from fastdata.formats.base import CorruptRecordError
from fastdata.formats.example import ImageRecord, decode_image_label, encode_example
from fastdata.formats.tfrecord_framing import frame, unframe
from fastdata.formats.tfrecord_read import PREFIX, read_image_record

DATA = Path(__file__).resolve().parents[1] / "data"
IMAGE = bytes(range(256)) * 3 + b"\xff\xd9"  # 770 bytes: a 2-byte length, as real images have


def plain(buf: bytes, label_offset: int = 0):
    """The plain read of one framed record held in ``buf``, or the error it raises (type and message)."""
    try:
        payload = unframe(buf, shard="s", offset=0)
        try:
            return decode_image_label(payload, label_offset=label_offset)
        except ValueError as exc:
            raise CorruptRecordError("s", 0, str(exc)) from exc
    except CorruptRecordError as exc:
        return type(exc), str(exc)


def fast(tmp_path: Path, buf: bytes, label_offset: int = 0):
    path = tmp_path / "one.tfrecord"
    path.write_bytes(buf)
    fd = os.open(path, os.O_RDONLY)
    try:
        return read_image_record(fd, 0, len(buf), shard="s", label_offset=label_offset)
    except CorruptRecordError as exc:
        return type(exc), str(exc)
    finally:
        os.close(fd)


def framed(payload: bytes) -> bytes:
    header, footer = frame(payload)
    return header + payload + footer


def ours(image: bytes = IMAGE, label: int = 7, **fields) -> bytes:
    return encode_example(ImageRecord(image, label, "zebra", "zebra/1.jpg", "JPEG", 10, 20, fields=fields))


def ld(tag: int, content: bytes) -> bytes:
    """One length-delimited field: ``tag``, the varint length, ``content``."""
    n, varint = len(content), b""
    while n >= 0x80:
        varint, n = varint + bytes([n & 0x7F | 0x80]), n >> 7
    return bytes([tag]) + varint + bytes([n]) + content


def entry(key: bytes, feature: bytes) -> bytes:
    return ld(0x0A, ld(0x0A, key) + ld(0x12, feature))


def example(*entries: bytes) -> bytes:
    return ld(0x0A, b"".join(entries))


def images(*values: bytes) -> bytes:  # a Feature holding a BytesList
    return ld(0x0A, b"".join(ld(0x0A, v) for v in values))


def ints(packed: bytes) -> bytes:  # a Feature holding one packed Int64List chunk
    return ld(0x1A, ld(0x0A, packed))


IMG, LABEL = b"image/encoded", b"image/class/label"
ODD = {  # Examples the walk may not take as plain (or that are not Examples): protobuf decides, answer or error
    "plain, built by hand": example(entry(IMG, images(IMAGE)), entry(LABEL, ints(b"\x03"))),
    "label first": example(entry(LABEL, ints(b"\x03")), entry(IMG, images(IMAGE))),
    "image first of two values": example(entry(IMG, images(IMAGE, b"x")), entry(LABEL, ints(b"\x03"))),
    "no label": example(entry(IMG, images(IMAGE))),
    "label as floats": example(entry(IMG, images(IMAGE)), entry(LABEL, ld(0x12, ld(0x0A, b"\0\0\x80?")))),
    "floats not of 4 bytes": example(entry(IMG, images(IMAGE)), entry(b"f", ld(0x12, ld(0x0A, b"\0\0\0")))),
    "empty label list": example(entry(IMG, images(IMAGE)), entry(LABEL, ld(0x1A, b""))),
    "unpacked label": example(entry(IMG, images(IMAGE)), entry(LABEL, ld(0x1A, b"\x08\x05"))),
    "two label chunks": example(
        entry(IMG, images(IMAGE)), entry(LABEL, ld(0x1A, ld(0x0A, b"\x04") + ld(0x0A, b"\x09")))
    ),
    "label varint of 11 bytes": example(entry(IMG, images(IMAGE)), entry(LABEL, ints(b"\xff" * 10 + b"\x01"))),
    "packed ints cut": example(entry(IMG, images(IMAGE)), entry(LABEL, ints(b"\x03\x80"))),
    "image as ints": example(entry(IMG, ints(b"\x01")), entry(LABEL, ints(b"\x03"))),
    "image with two kinds": example(entry(IMG, images(IMAGE) + ints(b"\x01"))),
    "no image": example(entry(LABEL, ints(b"\x03"))),
    "empty image list": example(entry(IMG, ld(0x0A, b"")), entry(LABEL, ints(b"\x03"))),
    "empty Feature": example(entry(IMG, b""), entry(LABEL, ints(b"\x03"))),
    "empty image": example(entry(IMG, images(b"")), entry(LABEL, ints(b"\x03"))),
    "image key twice": example(entry(IMG, images(b"old")), entry(IMG, images(IMAGE))),
    "label key twice": example(entry(IMG, images(IMAGE)), entry(LABEL, ints(b"\x03")), entry(LABEL, ints(b"\x04"))),
    "value before key": example(ld(0x0A, ld(0x12, images(IMAGE)) + ld(0x0A, IMG))),
    "entry without value": example(entry(IMG, images(IMAGE)), ld(0x0A, ld(0x0A, b"k"))),
    "bad UTF-8 key": example(entry(IMG, images(IMAGE)), entry(b"k\xff", ints(b"\x01"))),
    "bad UTF-8 key, empty Feature": example(entry(IMG, images(IMAGE)), entry(b"k\xff", b"")),
    "UTF-8 key": example(entry(IMG, images(IMAGE)), entry("clé".encode(), ints(b"\x01"))),
    "key length not canonical": example(ld(0x0A, b"\x0a\x8d\x00" + IMG + ld(0x12, images(IMAGE)))),
    "big field before the image": example(entry(b"a", images(b"z" * (2 * PREFIX))), entry(IMG, images(IMAGE))),
    "unknown top field": example(entry(IMG, images(IMAGE))) + b"\x10\x05",
    "features twice": example(entry(IMG, images(b"old"))) + example(entry(IMG, images(IMAGE))),
    "image runs past its list": example(entry(IMG, ld(0x0A, b"\x0a\x90\x06" + IMAGE[:100]))),
    "empty": b"",
    "garbage": b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
    "truncated": ours()[:-5],
}


@pytest.mark.parametrize("name", sorted(ODD))
def test_odd_records_give_the_plain_reads_answer_or_error(tmp_path, name):
    buf = framed(ODD[name])
    assert fast(tmp_path, buf) == plain(buf)
    assert fast(tmp_path, buf, -1) == plain(buf, -1)


def test_mutated_records_with_good_crcs_give_the_plain_reads_answer_or_error(tmp_path):
    """A payload whose bytes were changed and then framed again (CRCs good): the walk sees every kind of bad tag,
    length and varint; whatever protobuf says (a record, or not an Example), the fast read says the same."""
    rng = random.Random(0)
    payload = ours(image=b"\xff\xd8\xff" + bytes(300), colour=("bytes", [b"red"]), score=("float", [0.5]))
    image_at = payload.index(b"\xff\xd8\xff")
    structure = [k for k in range(len(payload)) if not image_at <= k < image_at + 303]
    for _ in range(600):
        mutated = bytearray(payload)
        for _ in range(rng.choice((1, 1, 2))):
            mutated[rng.choice(structure)] = rng.randrange(256)
        buf = framed(bytes(mutated))
        assert fast(tmp_path, buf) == plain(buf), bytes(mutated)


def test_every_byte_of_a_record_is_checked(tmp_path):
    """Any one byte changed anywhere (header, payload before, inside and after the image, footer): an error."""
    buf = framed(ours(image=b"\xff\xd8\xff" + bytes(2000)))
    for k in range(len(buf)):
        damaged = bytearray(buf)
        damaged[k] ^= 0x40
        result = fast(tmp_path, bytes(damaged))
        assert result[0] is CorruptRecordError and result == plain(bytes(damaged)), k


def test_short_file_and_wrong_size_name_the_record(tmp_path):
    buf = framed(ours())
    path = tmp_path / "short.tfrecord"
    path.write_bytes(buf[:-10])
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(CorruptRecordError, match=r"at 0: short read \(\d+ of \d+ bytes\)"):
            read_image_record(fd, 0, len(buf), shard=path)
        with pytest.raises(CorruptRecordError, match="length field says"):
            read_image_record(fd, 0, len(buf) - 20, shard=path)
    finally:
        os.close(fd)
