"""Image decoding: libjpeg-turbo with DCT scaling for JPEG, OpenCV for the rest.

Every decoder returns RGB ``uint8`` arrays of shape ``(H, W, 3)``, C-contiguous, the
way ``PIL.Image.open(f).convert("RGB")`` would (grayscale, CMYK, palette and RGBA
images included; EXIF orientation is never applied). A JPEG can be decoded at a
reduced size through libjpeg's DCT scaling: with ``scale=(1, 4)`` the IDCT emits
2x2 pixels per 8x8 block, so the output is ``ceil(h / 4) x ceil(w / 4)`` and the
IDCT, upsampling and colour conversion shrink with it (entropy decoding does not).

Decoders hold no library handles, so they pickle in a few bytes and can be sent to
spawned DataLoader workers; the libturbojpeg handle is fetched per process through
:func:`fastdata._optional.turbojpeg_handle`.
"""

from __future__ import annotations

import abc
import logging
import warnings
from collections.abc import Iterable

import cv2
import numpy as np

from fastdata._optional import TURBOJPEG_HINT, has_turbojpeg, turbojpeg_handle

logger = logging.getLogger(__name__)

# OpenCV's thread pool does not survive fork: a DataLoader (or pack) worker forked after this
# process ran a parallel OpenCV call deadlocks in its next one. fastdata's parallelism is one
# process per core, so OpenCV's own threading is switched off here, in the parent, before any fork.
cv2.setNumThreads(0)

__all__ = [
    "DECODER_NAMES", "SIMD_SCALES", "TURBOJPEG_SCALES", "DecodeError", "Decoder", "OpenCVDecoder",
    "TurboJpegDecoder", "choose_scale", "get_decoder", "is_jpeg", "scaled_size",
]

Scale = tuple[int, int]

#: DCT scale factors with SIMD IDCTs in libjpeg-turbo (1/8 is DC-only, 1/4 and 1/2 have
#: dedicated reduced IDCTs); the default for :class:`TurboJpegDecoder`.
SIMD_SCALES: tuple[Scale, ...] = ((1, 8), (1, 4), (1, 2), (1, 1))
#: Every factor <= 1 that libjpeg-turbo offers; 3/8, 5/8, 3/4 and 7/8 use plain C IDCTs.
TURBOJPEG_SCALES: tuple[Scale, ...] = ((1, 8), (1, 4), (3, 8), (1, 2), (5, 8), (3, 4), (7, 8), (1, 1))
#: Names accepted by :func:`get_decoder`.
DECODER_NAMES: tuple[str, ...] = ("auto", "turbojpeg", "opencv")

_JPEG_SOI = b"\xff\xd8\xff"
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CV2_COLOR = cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION
_CV2_REDUCED = {
    (1, 2): cv2.IMREAD_REDUCED_COLOR_2 | cv2.IMREAD_IGNORE_ORIENTATION,
    (1, 4): cv2.IMREAD_REDUCED_COLOR_4 | cv2.IMREAD_IGNORE_ORIENTATION,
    (1, 8): cv2.IMREAD_REDUCED_COLOR_8 | cv2.IMREAD_IGNORE_ORIENTATION,
}
# SOF0..SOF15 except DHT (C4), JPG (C8) and DAC (CC) carry the frame size.
_SIGNATURES = (
    ("JPEG", _JPEG_SOI), ("PNG", _PNG_SIGNATURE), ("GIF", (b"GIF87a", b"GIF89a")), ("BMP", b"BM"),
    ("TIFF", (b"II*\x00", b"MM\x00*")),
)
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_STANDALONE_MARKERS = frozenset(range(0xD0, 0xD8)) | {0x01}
# PyTurboJPEG constants, copied so that importing this module never needs turbojpeg.
_TJPF_RGB = 0
_TJPF_GRAY = 6
_TJPF_CMYK = 11
_TJFLAG_STOPONWARNING = 8192
_CMYK_COLORSPACES = (3, 4)  # TJCS_CMYK, TJCS_YCCK
_fallback_warned = False


class DecodeError(ValueError):
    """An image could not be decoded; the message says why."""


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


def _image_kind(data: bytes) -> str | None:
    """The format named by the file signature, for error messages."""
    head = bytes(data[:16])
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WebP"
    return next((kind for kind, magic in _SIGNATURES if head.startswith(magic)), None)


def _jpeg_header(data: bytes) -> tuple[tuple[int, int] | None, int | None]:
    """Walk the JPEG markers: ``((height, width) or None, offset of the first SOS or None)``."""
    size, pos, end = None, 2, len(data)
    while pos + 4 <= end:
        if data[pos] != 0xFF:
            return size, None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in _STANDALONE_MARKERS:
            pos += 2
            continue
        length = (data[pos + 2] << 8) | data[pos + 3]
        if marker == 0xDA:
            return size, pos
        if marker in _SOF_MARKERS and pos + 9 <= end:
            height = (data[pos + 5] << 8) | data[pos + 6]
            width = (data[pos + 7] << 8) | data[pos + 8]
            size = (height, width) if height and width else None
        pos += 2 + length
    return size, None


def _png_size(data: bytes) -> tuple[int, int] | None:
    if len(data) < 24 or bytes(data[12:16]) != b"IHDR":
        return None
    width = int.from_bytes(data[16:20], "big")
    height = int.from_bytes(data[20:24], "big")
    return (height, width) if height and width else None


def _check_not_empty(data: bytes) -> None:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data must be bytes-like, got {type(data).__name__}")
    if len(data) == 0:
        raise DecodeError("empty file")


def _resize_to(image: np.ndarray, height: int, width: int) -> np.ndarray:
    if image.shape[:2] == (height, width):
        return image
    shrink = height <= image.shape[0] and width <= image.shape[1]
    interpolation = cv2.INTER_AREA if shrink else cv2.INTER_LINEAR
    return cv2.resize(image, (width, height), interpolation=interpolation)


def _cv2_imdecode(data: bytes, flags: int) -> np.ndarray:
    """cv2.imdecode to RGB, or DecodeError naming the format."""
    _check_not_empty(data)
    try:
        bgr = cv2.imdecode(np.frombuffer(data, np.uint8), flags)
    except cv2.error as exc:
        raise DecodeError(f"OpenCV could not decode the image ({exc})") from exc
    if bgr is None:
        kind = _image_kind(data)
        raise DecodeError("not an image" if kind is None else f"corrupt or truncated {kind}")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def _opencv_decode(data: bytes, scale: Scale) -> np.ndarray:
    """Decode any format with OpenCV; JPEG DCT scaling for 1/2, 1/4 and 1/8, else resize."""
    if scale == (1, 1):
        return _cv2_imdecode(data, _CV2_COLOR)
    if scale in _CV2_REDUCED and is_jpeg(data):
        full = _jpeg_header(data)[0]
        image = _cv2_imdecode(data, _CV2_REDUCED[scale])
        if full is None:
            return image
        return _resize_to(image, *scaled_size(*full, scale))  # no-op unless OpenCV rounded differently
    image = _cv2_imdecode(data, _CV2_COLOR)
    return _resize_to(image, *scaled_size(image.shape[0], image.shape[1], scale))


def _opencv_validate(data: bytes) -> tuple[int, int]:
    _check_not_empty(data)
    if is_jpeg(data):
        size, sos = _jpeg_header(data)
        if size is None or sos is None:
            raise DecodeError("truncated or corrupt JPEG header")
        if bytes(data).find(b"\xff\xd9", sos) < 0:  # entropy-coded data never contains FF D9
            raise DecodeError("truncated JPEG")
    image = _cv2_imdecode(data, _CV2_COLOR)
    return image.shape[0], image.shape[1]


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
            header (decode the image to learn its size then).
        """
        if is_jpeg(data):
            return _jpeg_header(data)[0]
        if bytes(data[:8]) == _PNG_SIGNATURE:
            return _png_size(data)
        return None

    @abc.abstractmethod
    def decode(self, data: bytes, *, scale: Scale = (1, 1)) -> np.ndarray:
        """Decode to RGB ``uint8`` ``(H, W, 3)``, C-contiguous.

        Args:
            data: the encoded image (JPEG, PNG, WebP, BMP, ... anything OpenCV reads).
            scale: one of :attr:`scales`; the output is ``scaled_size(h, w, scale)``.
                JPEGs are DCT-scaled; other formats are decoded fully and resized
                with ``INTER_AREA``.

        Returns:
            The image, like ``PIL.Image.open(f).convert("RGB")`` (16-bit input is
            reduced to its high byte; EXIF orientation is not applied).

        Raises:
            DecodeError: the data is empty, not an image, or cannot be decoded. Damage
                libjpeg-turbo recovers from (a few corrupt bytes, a missing end marker)
                decodes with a Python warning instead; :meth:`validate` is the strict check.
            ValueError: ``scale`` is not one of :attr:`scales`.
        """

    @abc.abstractmethod
    def validate(self, data: bytes) -> tuple[int, int]:
        """Strictly check that ``data`` decodes cleanly; used by the packer on every image.

        Args:
            data: the encoded image.

        Returns:
            The full ``(height, width)``.

        Raises:
            DecodeError: with a short reason ("empty file", "not an image",
                "truncated JPEG", ...).
        """

    def _check_scale(self, scale: Scale) -> Scale:
        scale = tuple(scale)  # type: ignore[assignment]
        if scale not in self.scales:
            raise ValueError(f"scale must be one of {self.scales} for {type(self).__name__}, got {scale!r}")
        return scale

    def __repr__(self) -> str:
        return f"{type(self).__name__}(scales={self.scales!r})"


class TurboJpegDecoder(Decoder):
    """libjpeg-turbo (through PyTurboJPEG) for JPEG, OpenCV for everything else.

    CMYK/YCCK JPEGs, which libjpeg-turbo cannot convert to RGB, also go to OpenCV.

    Args:
        scales: the DCT factors ``decode`` may be asked for. The default, the
            SIMD-accelerated 1/8, 1/4, 1/2 and 1, avoids libjpeg-turbo's odd factors
            (3/8, 5/8, 3/4, 7/8), whose plain C IDCTs make 5/8, 3/4 and 7/8 slower
            than a full-size decode (measured on 500x375 photos); pass
            ``TURBOJPEG_SCALES`` to allow them all. ``(1, 1)`` is always added.

    Raises:
        ImportError: libturbojpeg or PyTurboJPEG is missing (the message says how to
            install them).
        ValueError: a factor is not one libjpeg-turbo offers or is above 1.

    Example::

        decoder = TurboJpegDecoder(scales=TURBOJPEG_SCALES)
        thumb = decoder.decode(jpeg_bytes, scale=(1, 8))
    """

    name = "turbojpeg"

    def __init__(self, *, scales: Iterable[Scale] = SIMD_SCALES) -> None:
        supported = turbojpeg_handle().scaling_factors
        checked = set()
        for scale in scales:
            pair = tuple(scale)
            if pair not in supported or pair[0] > pair[1]:
                raise ValueError(
                    f"scales must hold libjpeg-turbo factors <= 1 from {TURBOJPEG_SCALES}, got {scale!r}"
                )
            checked.add(pair)
        checked.add((1, 1))
        self.scales = tuple(sorted(checked, key=lambda s: s[0] / s[1]))

    def read_size(self, data: bytes) -> tuple[int, int] | None:  # noqa: D102 (documented on Decoder)
        if not is_jpeg(data):
            return super().read_size(data)
        try:
            width, height, _, _ = turbojpeg_handle().decode_header(data)
        except OSError:
            return None
        return (height, width) if height and width else None

    def decode(self, data: bytes, *, scale: Scale = (1, 1)) -> np.ndarray:  # noqa: D102
        scale = self._check_scale(scale)
        _check_not_empty(data)
        if not is_jpeg(data):
            return _opencv_decode(data, scale)
        turbojpeg = turbojpeg_handle()
        try:
            return turbojpeg.decode(
                data, pixel_format=_TJPF_RGB, scaling_factor=None if scale == (1, 1) else scale
            )
        except (OSError, UserWarning) as exc:  # UserWarning: libjpeg warnings under `-W error`
            try:
                cmyk = turbojpeg.decode_header(data)[3] in _CMYK_COLORSPACES
            except OSError:
                cmyk = False
            if cmyk:  # libjpeg-turbo has no CMYK -> RGB conversion
                return _opencv_decode(data, scale)
            raise DecodeError(f"corrupt JPEG ({exc})") from exc

    def validate(self, data: bytes) -> tuple[int, int]:  # noqa: D102
        _check_not_empty(data)
        if not is_jpeg(data):
            return _opencv_validate(data)
        # The smallest DCT scale still entropy-decodes every coefficient of every scan,
        # so the whole stream is checked; GRAY output skips the chroma IDCTs and colour
        # conversion. CMYK/YCCK cannot be converted to gray, so they decode as CMYK.
        # catch_warnings is process-global: the packer validates in worker processes.
        turbojpeg = turbojpeg_handle()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                width, height, _, colorspace = turbojpeg.decode_header(data)
                pixel_format = _TJPF_CMYK if colorspace in _CMYK_COLORSPACES else _TJPF_GRAY
                turbojpeg.decode(
                    data, pixel_format=pixel_format, scaling_factor=(1, 8), flags=_TJFLAG_STOPONWARNING
                )
            except OSError as exc:
                raise DecodeError(f"corrupt JPEG ({exc})") from exc
        messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
        if messages:
            truncated = "premature end" in messages[0].lower()
            raise DecodeError("truncated JPEG" if truncated else f"corrupt JPEG ({messages[0]})")
        return height, width


class OpenCVDecoder(Decoder):
    """``cv2.imdecode`` for every format; JPEG DCT scaling via ``IMREAD_REDUCED_COLOR_*``.

    The fallback when libturbojpeg is missing. ``validate`` is less strict than
    :class:`TurboJpegDecoder`'s: it rejects truncated JPEGs (no end-of-image marker
    after the scan data) and anything OpenCV refuses, but OpenCV does not report
    libjpeg's "corrupt data" warnings.

    Example::

        decoder = OpenCVDecoder()
        half = decoder.decode(jpeg_bytes, scale=(1, 2))
    """

    name = "opencv"
    scales = SIMD_SCALES

    def decode(self, data: bytes, *, scale: Scale = (1, 1)) -> np.ndarray:  # noqa: D102
        _check_not_empty(data)
        return _opencv_decode(data, self._check_scale(scale))

    def validate(self, data: bytes) -> tuple[int, int]:  # noqa: D102
        return _opencv_validate(data)


def get_decoder(name: str = "auto") -> Decoder:
    """Build a decoder by name.

    Args:
        name: ``"auto"`` (libjpeg-turbo when available, else OpenCV with one warning
            per process), ``"turbojpeg"`` or ``"opencv"``.

    Returns:
        A new decoder.

    Raises:
        ImportError: ``"turbojpeg"`` was asked for and libturbojpeg is missing.
        ValueError: an unknown name.
        TypeError: ``name`` is not a string.
    """
    global _fallback_warned
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, one of {DECODER_NAMES}, got {type(name).__name__}")
    if name == "auto":
        if has_turbojpeg():
            return TurboJpegDecoder()
        if not _fallback_warned:
            _fallback_warned = True
            warnings.warn(
                "fastdata falls back to OpenCV for JPEG decoding: it can be slower (it depends on "
                "the libjpeg OpenCV was built with), offers only the 1/2, 1/4 and 1/8 DCT scales, and "
                f"its validate() cannot flag libjpeg's corrupt-data warnings. {TURBOJPEG_HINT}",
                RuntimeWarning,
                stacklevel=2,
            )
        return OpenCVDecoder()
    if name == "turbojpeg":
        turbojpeg_handle()  # ImportError with the install hint
        return TurboJpegDecoder()
    if name == "opencv":
        return OpenCVDecoder()
    raise ValueError(f"name must be one of {DECODER_NAMES}, got {name!r}")
