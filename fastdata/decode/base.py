"""The decoder interface and what every decoder shares: DCT scales, header parsing, DecodeError.

Every decoder returns RGB ``uint8`` arrays of shape ``(H, W, 3)``, C-contiguous, the
way ``PIL.Image.open(f).convert("RGB")`` would (grayscale, CMYK, palette and RGBA
images included; EXIF orientation is never applied). A JPEG can be decoded at a
reduced size through libjpeg's DCT scaling: with ``scale=(1, 4)`` the IDCT emits
2x2 pixels per 8x8 block, so the output is ``ceil(h / 4) x ceil(w / 4)`` and the
IDCT, upsampling and colour conversion shrink with it (entropy decoding does not).

Decoders hold no library handles, so they pickle in a few bytes and can be sent to
spawned DataLoader workers; the libturbojpeg handle is fetched per process through
:func:`fastdata._util.optional.turbojpeg_handle`.

Every failure, whatever the input, is a :class:`DecodeError` naming the reason; damage a
codec works around (libjpeg's "extraneous bytes before marker") is a :class:`DecodeWarning`
from :meth:`Decoder.validate`, and the image is accepted, as PIL accepts it.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator

import cv2
import numpy as np

__all__ = [
    "DECODER_NAMES", "SIMD_SCALES", "TURBOJPEG_SCALES", "Box", "DecodeError", "DecodeWarning", "Decoder",
    "check_not_empty", "check_out", "choose_scale", "image_format", "image_kind", "is_jpeg", "jpeg_components",
    "jpeg_header", "png_size", "resize_into", "resize_to", "scaled_box", "scaled_size",
]

Scale = tuple[int, int]

#: DCT scale factors with SIMD IDCTs in libjpeg-turbo (1/8 is DC-only, 1/4 and 1/2 have
#: dedicated reduced IDCTs); the default for :class:`TurboJpegDecoder`.
SIMD_SCALES: tuple[Scale, ...] = ((1, 8), (1, 4), (1, 2), (1, 1))
#: Every factor <= 1 that libjpeg-turbo offers; 3/8, 5/8, 3/4 and 7/8 use plain C IDCTs.
TURBOJPEG_SCALES: tuple[Scale, ...] = ((1, 8), (1, 4), (3, 8), (1, 2), (5, 8), (3, 4), (7, 8), (1, 1))
#: Names accepted by :func:`get_decoder`.
DECODER_NAMES: tuple[str, ...] = ("auto", "native", "turbojpeg", "opencv")

_JPEG_SOI = b"\xff\xd8\xff"
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_SIGNATURES = (
    (_JPEG_SOI, "JPEG"), (_PNG_SIGNATURE, "PNG"), (b"GIF87a", "GIF"), (b"GIF89a", "GIF"), (b"BM", "BMP"),
    (b"II*\x00", "TIFF"), (b"MM\x00*", "TIFF"), (b"P5", "PGM"), (b"P2", "PGM"), (b"P6", "PPM"), (b"P3", "PPM"),
    (b"P4", "PBM"), (b"P1", "PBM"), (b"Pf", "PFM"), (b"PF", "PFM"),
)
# SOF0..SOF15 except DHT (C4), JPG (C8) and DAC (CC) carry the frame size.
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_STANDALONE_MARKERS = frozenset(range(0xD0, 0xD8)) | {0x01}


class DecodeError(ValueError):
    """An image could not be decoded; the message says why."""


Box = tuple[int, int, int, int]


def scaled_box(box: Box, scale: Scale, shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """Map a full-resolution ``(top, left, h, w)`` into a DCT-scaled image's pixels.

    The box grows outwards (floor the start, ceil the end) so it never loses content
    and keeps at least ``ceil(h * scale)`` rows; it is clamped to the scaled image.

    Returns:
        ``(y0, y1, x0, x1)``: rows ``y0:y1`` and columns ``x0:x1`` of the scaled image.
    """
    top, left, height, width = box
    num, den = scale
    y0, x0 = top * num // den, left * num // den
    y1, x1 = -(-(top + height) * num // den), -(-(left + width) * num // den)
    y1, x1 = min(max(y1, y0 + 1), shape[0]), min(max(x1, x0 + 1), shape[1])
    return min(y0, y1 - 1), y1, min(x0, x1 - 1), x1


def check_out(out: np.ndarray) -> None:
    """Raise ValueError unless ``out`` is a writable, C-contiguous uint8 ``(H, W, 3)`` array."""
    if not (isinstance(out, np.ndarray) and out.dtype == np.uint8 and out.ndim == 3 and out.shape[2] == 3
            and out.flags.c_contiguous and out.flags.writeable):
        raise ValueError(f"out must be a writable C-contiguous uint8 (H, W, 3) array, got "
                         f"{getattr(out, 'dtype', type(out).__name__)} {getattr(out, 'shape', '')}")


def resize_into(image: np.ndarray, out: np.ndarray, antialias: bool | None) -> None:
    """Resize ``image`` into ``out`` (OpenCV writes straight into it; the GIL is released).

    ``antialias=True``: INTER_AREA whenever shrinking; False: always INTER_LINEAR; None (auto):
    INTER_AREA only when shrinking by 2x or more, else INTER_LINEAR. After a DCT-scaled decode
    the remaining shrink is below 2x, where bilinear aliases little and is several times faster.
    """
    height, width = out.shape[:2]
    if image.shape[:2] == (height, width):
        np.copyto(out, image)
        return
    shrink = height <= image.shape[0] and width <= image.shape[1]
    if antialias is None:
        shrink = shrink and max(image.shape[0] / height, image.shape[1] / width) >= 2.0
    interpolation = cv2.INTER_AREA if shrink and antialias is not False else cv2.INTER_LINEAR
    result = cv2.resize(image, (width, height), dst=out, interpolation=interpolation)
    if result is not out:  # OpenCV allocated instead (never for a matching uint8 dst): keep the contract
        np.copyto(out, result)


class DecodeWarning(UserWarning):
    """An image decoded, but its codec reported damage it worked around (the message says which).

    PIL decodes such files (libjpeg's "Corrupt JPEG data: 3 extraneous bytes before marker
    0xc0", say) and so does fastdata; ``fastdata pack`` records the messages per file in the
    manifest instead of printing them.
    """


def is_jpeg(data: bytes) -> bool:
    """True when ``data`` starts with the JPEG start-of-image marker ``FF D8 FF``."""
    return bytes(data[:3]) == _JPEG_SOI


def scaled_size(height: int, width: int, scale: Scale) -> tuple[int, int]:
    """The ``(height, width)`` libjpeg produces at DCT ``scale``: ``ceil(dim * num / den)``."""
    num, den = scale
    return -(-height * num // den), -(-width * num // den)


def choose_scale(
    scales: Iterable[Scale], height: int, width: int, min_height: int, min_width: int
) -> Scale:
    """The smallest scale whose ceil-scaled size is still at least the minimum.

    Args:
        scales: candidate ``(num, den)`` factors, e.g. ``decoder.scales``.
        height: full image (or crop) height in pixels.
        width: full image (or crop) width in pixels.
        min_height: the scaled height must stay ``>=`` this.
        min_width: the scaled width must stay ``>=`` this.

    Returns:
        The chosen ``(num, den)``; ``(1, 1)`` when no smaller factor is big enough.
    """
    for scale in sorted(scales, key=lambda s: s[0] / s[1]):
        if scale[0] >= scale[1]:
            break
        scaled_h, scaled_w = scaled_size(height, width, scale)
        if scaled_h >= min_height and scaled_w >= min_width:
            return scale
    return (1, 1)


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


def resize_to(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """Resize an RGB image to ``(height, width)`` in a new array: ``INTER_AREA`` when shrinking, else ``INTER_LINEAR``."""
    if image.shape[:2] == (height, width):
        return image
    out = np.empty((height, width, 3), np.uint8)
    resize_into(image, out, antialias=True)
    return out


def check_not_empty(data: bytes) -> None:
    """Raise TypeError for non-bytes input and DecodeError for empty input."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data must be bytes-like, got {type(data).__name__}")
    if len(data) == 0:
        raise DecodeError("empty file")


class Decoder(abc.ABC):
    """Decodes encoded image bytes to RGB ``uint8`` ``(H, W, 3)`` arrays.

    Attributes:
        name: the name :func:`get_decoder` knows this decoder by.
        scales: the DCT scale factors ``(num, den)`` applied to JPEGs, ascending,
            always ending with ``(1, 1)``.

    Example::

        decoder = get_decoder("auto")
        height, width = decoder.read_size(data)
        scale = choose_scale(decoder.scales, height, width, 224, 224)
        image = decoder.decode(data, scale=scale)  # at least 224 x 224
    """

    name: str = ""
    scales: tuple[Scale, ...] = ((1, 1),)

    def read_size(self, data: bytes) -> tuple[int, int] | None:
        """``(height, width)`` from the header without decoding pixels.

        Args:
            data: the encoded image.

        Returns:
            The full size for JPEG and PNG; None for other formats or an unreadable
            (or zero-sized) header: decode the image to learn its size then.
        """
        if is_jpeg(data):
            return jpeg_header(data)[0]
        if bytes(data[:8]) == _PNG_SIGNATURE:
            return png_size(data)
        return None

    @abc.abstractmethod
    def decode(self, data: bytes, *, scale: Scale = (1, 1)) -> np.ndarray:
        """Decode to RGB ``uint8`` ``(H, W, 3)``, C-contiguous.

        Args:
            data: the encoded image: JPEG, PNG, GIF, BMP, TIFF, WebP or PPM/PGM/PBM.
            scale: one of :attr:`scales`; the output is ``scaled_size(h, w, scale)``.
                JPEGs are DCT-scaled; other formats are decoded fully and resized
                with ``INTER_AREA``.

        Returns:
            The image, as ``PIL.Image.open(f).convert("RGB")`` gives it (the default
            image of an animation; 16-bit and float input clipped as PIL clips it; EXIF
            orientation is not applied).

        Raises:
            DecodeError: the data is empty, not an image, damaged beyond decoding, or
                declares more pixels than the limit (:func:`~fastdata.decode.set_max_pixels`;
                checked from the header, before anything is allocated). Nothing else
                escapes for bad data. Damage libjpeg-turbo recovers from (a few corrupt
                bytes, a missing end marker) decodes with a Python ``UserWarning``;
                :meth:`validate` applies PIL's rules.
            ValueError: ``scale`` is not one of :attr:`scales`.
        """

    @abc.abstractmethod
    def validate(self, data: bytes) -> tuple[int, int]:
        """Check that ``data`` decodes the way PIL would accept it; used by the packer on every image.

        A file is accepted when PIL's ``Image.open(f).convert("RGB")`` would succeed:
        damage the codec works around (libjpeg's "extraneous bytes before marker", a
        corrupt-data warning) is reported as a :class:`DecodeWarning` per message, and
        a JPEG that ends early is refused ("truncated JPEG"), as PIL refuses it unless
        ``ImageFile.LOAD_TRUNCATED_IMAGES`` is set.

        Args:
            data: the encoded image.

        Returns:
            The full ``(height, width)``.

        Raises:
            DecodeError: with a short reason ("empty file", "not an image",
                "truncated JPEG", the pixel-limit message, the codec's own words, ...).
        """

    def decode_crop_into(
        self, data: bytes, box: Box | None, out: np.ndarray, *, antialias: bool | None = None
    ) -> None:
        """Decode the ``box`` of an image and resize it into ``out`` (e.g. one slot of a batch).

        The image is decoded at the smallest of :attr:`scales` that keeps the box at least
        ``out``'s size, the box is mapped into the scaled pixels (:func:`scaled_box`) and resized
        into ``out`` (:func:`resize_into`). Decoders that can decode only a region override this.

        Args:
            data: the encoded image.
            box: ``(top, left, height, width)`` in full-resolution pixels, inside the image;
                None for the whole image.
            out: writable, C-contiguous ``uint8`` array ``(H, W, 3)``; receives the RGB result.
            antialias: the resize rule of :func:`resize_into`.

        Raises:
            DecodeError: the image cannot be decoded.
            ValueError: ``box`` lies outside the image, or ``out`` is not a uint8 ``(H, W, 3)`` array.
        """
        check_out(out)
        if box is None:
            image = self.decode(data, scale=choose_scale(self.scales, *self._size_or_decode(data), *out.shape[:2]))
            resize_into(image, out, antialias)
            return
        scale = choose_scale(self.scales, box[2], box[3], *out.shape[:2])
        image = self.decode(data, scale=scale)
        y0, y1, x0, x1 = scaled_box(box, scale, image.shape[:2])
        resize_into(image[y0:y1, x0:x1], out, antialias)

    def _size_or_decode(self, data: bytes) -> tuple[int, int]:
        size = self.read_size(data)
        return size if size is not None else self.decode(data).shape[:2]

    def _check_scale(self, scale: Scale) -> Scale:
        scale = tuple(scale)  # type: ignore[assignment]
        if scale not in self.scales:
            raise ValueError(f"scale must be one of {self.scales} for {type(self).__name__}, got {scale!r}")
        return scale

    def __repr__(self) -> str:
        return f"{type(self).__name__}(scales={self.scales!r})"
