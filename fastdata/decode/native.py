"""Crop-region JPEG decoding through fastdata's own C kernel (:mod:`fastdata.decode._jpegcrop`).

PyTurboJPEG can only decode whole images. The kernel drives libjpeg directly: it decodes
at the smallest sufficient DCT scale, crops the columns with ``jpeg_crop_scanline``,
skips the rows above the crop with ``jpeg_skip_scanlines`` and stops after the crop's
last row, so a ``RandomResizedCrop`` pays only for (most of) the pixels it keeps. A JPEG with restart
intervals that tile its MCU rows is cut down, in C, to the intervals covering the crop before decoding
(:func:`spliced_count`), so it pays for the crop's MCUs only. The
pixels equal those of a full decode at the same scale, and a full decode equals
``PIL.Image.open(f).convert("RGB")`` (grayscale, CMYK and YCCK included). libjpeg works
with the GIL released, and so does the OpenCV resize that follows.

The extension is optional (``pip install -e .`` builds it where libjpeg-turbo's headers
and a C compiler are present); :func:`available` says whether it can be used. Setting
the environment variable ``FASTDATA_NATIVE=0`` forces the fallback paths.

Each thread gets its own libjpeg decompressor and its own grow-only scratch buffer, so
steady-state decoding allocates no pixel buffers.

Example::

    from fastdata.decode import native

    if native.available():
        batch = np.empty((256, 224, 224, 3), np.uint8)
        native.decode_crop_into(jpeg_bytes, (top, left, h, w), batch[i])
"""

from __future__ import annotations

import math
import threading
import warnings

import numpy as np
from typing_extensions import override

from fastdata._util.optional import native_disabled
from fastdata.decode.base import DecodeError, Decoder, DecodeWarning, check_not_empty
from fastdata.decode.headers import image_kind, is_jpeg
from fastdata.decode.limits import check_pixels
from fastdata.decode.scaling import (
    KERNEL_SCALES,
    TURBOJPEG_SCALES,
    Box,
    check_out,
    headroom,
    plan_region,
    region_box,
    resample_mode,
    resize_into,
    resize_to,
    scaled_size,
)

try:
    from fastdata.decode import _jpegcrop
except ImportError:  # not built: no compiler or no jpeglib.h at install time
    _jpegcrop = None  # type: ignore[assignment]  # None stands for the kernel not built: every use checks it
_JpegError = _jpegcrop.JpegError if _jpegcrop is not None else ()  # () catches nothing

__all__ = [
    "BUILD_HINT",
    "NATIVE_SCALES",
    "NativeJpegDecoder",
    "RecoveredDamage",
    "available",
    "decode_crop_into",
    "decode_full",
    "read_header",
    "spliced_count",
]

Scale = tuple[int, int]

#: The DCT scales the kernel decodes a crop at (:data:`~fastdata.decode.scaling.KERNEL_SCALES`): libjpeg-turbo's
#: SIMD ones and 5/8. The kernel decodes at any M/8; 3/8, 3/4 and 7/8 (plain C IDCTs) lost to the next power of
#: two on one core, 5/8 won (``bench/kernel.py scales``).
NATIVE_SCALES: tuple[Scale, ...] = KERNEL_SCALES

_local = threading.local()


#: How to get the kernel where it was not built.
BUILD_HINT = (
    "install a C compiler and libjpeg-turbo's headers (Debian/Ubuntu: apt-get install gcc libjpeg-dev), "
    "then reinstall fastdata (pip install -e .)"
)


def available() -> bool:
    """True when the C kernel was built and ``FASTDATA_NATIVE`` is not ``"0"`` (read each call)."""
    return _jpegcrop is not None and not native_disabled()


def _decompressor():
    decompressor = getattr(_local, "decompressor", None)
    if decompressor is None:
        if _jpegcrop is None:
            raise ImportError(f"fastdata's native JPEG kernel is not built; {BUILD_HINT}")
        decompressor = _local.decompressor = _jpegcrop.Decompressor()
    return decompressor


def spliced_count() -> int:
    """How many decodes on this thread read only the restart intervals covering their crop.

    A baseline JPEG whose restart intervals tile its MCU rows (``jpegtran -restart 1B`` writes one per MCU) is not
    decoded from the top: the kernel splices the header and just the intervals that cover the crop into a smaller
    JPEG and decodes that, with the same pixels. Other JPEGs take the ordinary region decode.
    """
    return _decompressor().spliced


def _scratch(nbytes: int) -> np.ndarray:
    """This thread's scratch buffer, at least ``nbytes`` long (grown, never shrunk)."""
    buffer = getattr(_local, "scratch", None)
    if buffer is None or buffer.size < nbytes:
        buffer = _local.scratch = np.empty(max(nbytes + nbytes // 4, 1 << 20), np.uint8)
    return buffer


def _decode_error(exc: Exception, data) -> DecodeError:
    message = str(exc)
    if message == "empty file":
        return DecodeError(message)
    if message.startswith("Not a JPEG file"):  # libjpeg: "Not a JPEG file: starts with 0x89 0x50"
        kind = image_kind(data)
        return DecodeError(f"not a JPEG file ({kind} data)" if kind else "not a JPEG file" + message[15:])
    return DecodeError(f"corrupt JPEG ({message})")


class RecoveredDamage(DecodeError):
    """libjpeg decoded the image but reported damage it worked around (raised only with ``strict=True``)."""


def _region(data, scale: Scale | int, y0: int, y1: int, x0: int, x1: int, out, strict: bool = False) -> None:
    """Run the kernel at DCT ``scale``.

    Run the kernel at DCT ``scale`` (``(num, denom)`` equal to M/8, or an int d for 1/d); libjpeg errors become
    DecodeError, its warnings a DecodeWarning (a UserWarning).

    With ``strict``, a warning raises :class:`RecoveredDamage` instead, so that the caller can hand
    the (rare) damaged file to a decoder that reproduces PIL's recovery exactly.
    """
    decompressor = _decompressor()
    try:
        _, _, warned = decompressor.decode_region(data, scale, y0, y1, x0, x1, out)
    except _JpegError as exc:
        raise _decode_error(exc, data) from None
    if warned and strict:
        raise RecoveredDamage(f"corrupt JPEG decoded anyway: {decompressor.last_warning}")
    if warned:
        # Like PyTurboJPEG (the turbojpeg decoder): damage libjpeg recovered from decodes
        # with a warning; under `-W error` it raises instead.
        warnings.warn(f"corrupt JPEG decoded anyway: {decompressor.last_warning}", DecodeWarning, stacklevel=3)


def read_header(data) -> tuple[int, int, int, int]:
    """``(height, width, num_components, colorspace)`` from a JPEG header.

    Args:
        data: the encoded JPEG (any bytes-like object).

    Returns:
        The full size, the number of components (1, 3 or 4) and libjpeg's
        ``J_COLOR_SPACE`` of the file (1 gray, 2 RGB, 3 YCbCr, 4 CMYK, 5 YCCK).

    Raises:
        DecodeError: empty, not a JPEG, a header libjpeg refuses, or more pixels than the limit
            (:func:`fastdata.decode.limits.set_max_pixels`).
    """
    last = getattr(_local, "header", None)
    if last is not None and last[0] is data:  # the same immutable bytes as the last call (read_size, then decode)
        header = last[1]
    else:
        try:
            header = _decompressor().header(data)
        except _JpegError as exc:
            raise _decode_error(exc, data) from None
        _local.header = (data, header) if type(data) is bytes else None
    check_pixels(header[0], header[1])  # the pixel limit, before anything is allocated
    return header


def decode_crop_into(
    data,
    box: Box | None,
    out: np.ndarray,
    *,
    resample: str | None = None,
    antialias: bool | None = None,
    strict: bool = False,
) -> None:
    """Decode the ``box`` of a JPEG and resize it into ``out``.

    The JPEG is decoded at the smallest DCT scale of :data:`NATIVE_SCALES` (1/8, 1/4, 1/2, 5/8 or 1) that keeps
    the crop at least ``out``'s size (``resample="antialias"``: :data:`~fastdata.decode.scaling.ANTIALIAS_HEADROOM`
    times it), only the crop's pixels (widened to whole scaled pixels by
    :func:`~fastdata.decode.scaling.scaled_box`) are decoded, and they are resized into ``out``
    (:func:`~fastdata.decode.scaling.resize_into`). A crop that already has the output size is decoded into
    ``out`` with no resize: PIL's exact pixels.

    Args:
        data: the encoded JPEG (bytes-like).
        box: ``(top, left, height, width)`` in full-resolution pixels, inside the image;
            None for the whole image.
        out: C-contiguous, writable ``uint8`` array of shape ``(H, W, 3)``, e.g. one slot
            of a batch array; receives the RGB result.
        resample: one of :data:`~fastdata.decode.scaling.RESAMPLES` (see :mod:`fastdata.decode.scaling`); None:
            ``"antialias"``, PIL's antialiased bilinear (torchvision's pictures).
        antialias: 0.2.0's switch, instead of ``resample``: True is ``"area"``, False ``"linear"``.
        strict: raise :class:`RecoveredDamage` where libjpeg only warns (recoverable damage).

    Raises:
        DecodeError: the data is empty, not a JPEG, or too damaged to decode (recoverable
            damage decodes with a ``DecodeWarning``, a ``UserWarning``).
        ValueError: a box outside the image or a bad ``out``.
        ImportError: the extension is not built.
    """
    check_out(out)
    out_h, out_w = out.shape[0], out.shape[1]
    if out_h == 0 or out_w == 0:
        raise ValueError(f"out must not be empty, got shape {out.shape}")
    height, width, _, _ = read_header(data)
    if box is None:
        box = (0, 0, height, width)
    top, left, box_h, box_w = (int(v) for v in box)
    if box_h < 1 or box_w < 1 or top < 0 or left < 0 or top + box_h > height or left + box_w > width:
        raise ValueError(f"box {tuple(box)} (top, left, height, width) is empty or outside the {height}x{width} image")
    mode = resample_mode(resample, antialias)
    room = headroom(mode)
    box = (top, left, box_h, box_w)
    scale, y0, y1, x0, x1 = plan_region(box, height, width, out_h * room, out_w * room, NATIVE_SCALES)
    region_h, region_w = y1 - y0, x1 - x0
    if (region_h, region_w) == (out_h, out_w) and (mode != "antialias" or (box_h, box_w) == (out_h, out_w)):
        _region(data, scale, y0, y1, x0, x1, out, strict)
        return
    region = _scratch(region_h * region_w * 3)[: region_h * region_w * 3].reshape(region_h, region_w, 3)
    _region(data, scale, y0, y1, x0, x1, region, strict)
    resize_into(region, out, mode, region_box(box, scale, y0, x0))  # the GIL released


def decode_full(data, scale: Scale = (1, 1), *, strict: bool = False) -> np.ndarray:
    """Decode a whole JPEG at a DCT ``scale`` into a new RGB ``uint8`` ``(h, w, 3)`` array.

    Args:
        data: the encoded JPEG (bytes-like).
        scale: M/8 for M = 1..8, as ``(num, denom)`` (``(5, 8)``, ``(3, 4)``, ``(1, 2)``, ...); the output is
            ``scaled_size(h, w, scale)``.
        strict: raise :class:`RecoveredDamage` where libjpeg only warns (recoverable damage).

    Returns:
        The image, equal to ``PIL.Image.open(f).convert("RGB")`` at scale 1.

    Raises:
        DecodeError: as :func:`decode_crop_into`.
        ValueError: an unsupported scale.
    """
    divisor = math.gcd(int(scale[0]), int(scale[1])) or 1
    scale = (int(scale[0]) // divisor, int(scale[1]) // divisor)  # (6, 8) is (3, 4)
    if scale not in TURBOJPEG_SCALES:
        raise ValueError(f"scale must be one of {TURBOJPEG_SCALES} (M/8, M = 1..8), got {scale!r}")
    height, width = scaled_size(*read_header(data)[:2], scale)
    image = np.empty((height, width, 3), np.uint8)
    _region(data, scale, 0, height, 0, width, image, strict)
    return image


class NativeJpegDecoder(Decoder):
    """JPEG through fastdata's crop-region kernel; every other format through ``fallback``.

    ``decode_crop_into`` decodes only the crop's region at the smallest sufficient DCT scale,
    straight into the caller's slot; ``decode`` decodes whole images with the same kernel.
    ``validate`` (the packer's strict check) is the fallback decoder's, and so is the decode of a
    damaged JPEG that libjpeg decodes only with warnings (the fallback gives PIL's exact verdict and
    pixels for those, at full cost; undamaged files never take that path).

    Args:
        fallback: the decoder for non-JPEG data and for ``validate``; by default libjpeg-turbo
            through PyTurboJPEG when present, else OpenCV.

    Raises:
        ImportError: the kernel is not built (see :func:`available`).

    Example::

        decoder = NativeJpegDecoder()
        batch = np.empty((256, 224, 224, 3), np.uint8)
        decoder.decode_crop_into(jpeg_bytes, (top, left, h, w), batch[0])
    """

    name = "native"
    scales = NATIVE_SCALES

    def __init__(self, *, fallback: Decoder | None = None) -> None:
        if _jpegcrop is None:
            raise ImportError(f"fastdata's native JPEG kernel is not built; {BUILD_HINT}")
        if fallback is None:
            from fastdata.decode.fallback import fallback_decoder

            fallback = fallback_decoder()
        self.fallback = fallback

    def read_size(self, data: bytes) -> tuple[int, int] | None:  # noqa: D102 (documented on Decoder)
        if not is_jpeg(data):
            return self.fallback.read_size(data)
        try:
            height, width, _, _ = read_header(data)
        except DecodeError:
            return None
        return height, width

    def decode(self, data: bytes, *, scale: Scale = (1, 1)) -> np.ndarray:  # noqa: D102
        scale = self._check_scale(scale)
        check_not_empty(data)
        if not is_jpeg(data):
            return self._fallback_decode(data, scale)
        try:
            return decode_full(data, scale, strict=True)
        except RecoveredDamage:  # a damaged file: the fallback reproduces PIL's verdict and pixels
            return self._fallback_decode(data, scale)

    def _fallback_decode(self, data: bytes, scale: Scale) -> np.ndarray:
        """The fallback's decode; at a scale it lacks (5/8), its full decode resized to the scaled size."""
        if tuple(scale) in tuple(self.fallback.scales):
            return self.fallback.decode(data, scale=scale)
        image = self.fallback.decode(data)
        return resize_to(image, *scaled_size(image.shape[0], image.shape[1], scale))

    @override
    def decode_crop_into(
        self,
        data: bytes,
        box: Box | None,
        out: np.ndarray,
        *,  # noqa: D102
        resample: str | None = None,
        antialias: bool | None = None,
    ) -> None:
        mode = resample_mode(resample, antialias)
        if not is_jpeg(data):
            self.fallback.decode_crop_into(data, box, out, resample=mode)
            return
        try:
            decode_crop_into(data, box, out, resample=mode, strict=True)
        except RecoveredDamage:  # a damaged file: decode it whole the fallback's way (PIL's pixels)
            self.fallback.decode_crop_into(data, box, out, resample=mode)

    def validate(self, data: bytes) -> tuple[int, int]:  # noqa: D102
        return self.fallback.validate(data)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(fallback={self.fallback!r})"
