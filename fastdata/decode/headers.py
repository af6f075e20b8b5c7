"""Reading encoded image headers without decoding.

The container format from its signature, a JPEG's size and
colour components from its markers, a PNG's size from its IHDR chunk.
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["image_format", "image_kind", "is_jpeg", "jpeg_components", "jpeg_header", "png_size"]

_JPEG_SOI = b"\xff\xd8\xff"
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_SIGNATURES = (
    (_JPEG_SOI, "JPEG"),
    (_PNG_SIGNATURE, "PNG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
    (b"P5", "PGM"),
    (b"P2", "PGM"),
    (b"P6", "PPM"),
    (b"P3", "PPM"),
    (b"P4", "PBM"),
    (b"P1", "PBM"),
    (b"Pf", "PFM"),
    (b"PF", "PFM"),
)
# SOF0..SOF15 except DHT (C4), JPG (C8) and DAC (CC) carry the frame size.
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_STANDALONE_MARKERS = frozenset(range(0xD0, 0xD8)) | {0x01}


def is_jpeg(data: bytes) -> bool:
    """True when ``data`` starts with the JPEG start-of-image marker ``FF D8 FF``."""
    return bytes(data[:3]) == _JPEG_SOI


def image_format(data: bytes) -> str:
    """The container format of encoded image bytes from their signature: ``"JPEG"``, ``"PNG"``, ``"WEBP"``, ...

    Returns:
        One of JPEG, PNG, GIF, BMP, TIFF, PGM, PPM, PBM, PFM, WEBP; ``"UNKNOWN"`` for anything else.
    """
    head = bytes(data[:16])
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WEBP"
    return next((name for magic, name in _SIGNATURES if head.startswith(magic)), "UNKNOWN")


def image_kind(data: bytes) -> str | None:
    """The format named by the file signature (as :func:`image_format`), or None; for error messages."""
    kind = image_format(data)
    return None if kind == "UNKNOWN" else kind


def _jpeg_markers(data: bytes) -> Iterator[tuple[int, int]]:
    """``(marker, offset)`` of each header marker up to the first SOS; junk between segments is skipped like libjpeg."""
    data = data if isinstance(data, (bytes, bytearray)) else bytes(data)  # memoryview has no find()
    pos, end = 2, len(data)
    while pos + 4 <= end:
        if data[pos] != 0xFF:  # libjpeg skips it ("Corrupt JPEG data: N extraneous bytes before marker")
            pos = data.find(b"\xff", pos)
            if pos < 0:
                return
            continue
        marker = data[pos + 1]
        if marker in (0xFF, 0x00):  # a fill byte, or a stuffed zero outside entropy-coded data
            pos += 1 if marker == 0xFF else 2
            continue
        yield marker, pos
        if marker == 0xDA:
            return
        pos += 2 if marker in _STANDALONE_MARKERS else 2 + ((data[pos + 2] << 8) | data[pos + 3])


def jpeg_header(data: bytes) -> tuple[tuple[int, int] | None, int | None]:
    """Walk the JPEG markers: ``((height, width) or None, offset of the first SOS or None)``."""
    size = None
    for marker, pos in _jpeg_markers(data):
        if marker == 0xDA:
            return size, pos
        if marker in _SOF_MARKERS and pos + 9 <= len(data):
            height = (data[pos + 5] << 8) | data[pos + 6]
            width = (data[pos + 7] << 8) | data[pos + 8]
            size = (height, width) if height and width else None
    return size, None


def jpeg_components(data: bytes) -> int | None:
    """The number of colour components in a JPEG's frame header (4: CMYK or YCCK), or None."""
    for marker, pos in _jpeg_markers(data):
        if marker in _SOF_MARKERS and pos + 10 <= len(data):
            return data[pos + 9]
    return None


def png_size(data: bytes) -> tuple[int, int] | None:
    """``(height, width)`` from a PNG's IHDR chunk, or None when it is missing or zero."""
    if len(data) < 24 or bytes(data[12:16]) != b"IHDR":
        return None
    width = int.from_bytes(data[16:20], "big")
    height = int.from_bytes(data[20:24], "big")
    return (height, width) if height and width else None
