"""libjpeg-turbo through PyTurboJPEG: JPEG with SIMD DCT scaling; other formats go to Pillow."""

from __future__ import annotations

import functools
import logging
import warnings
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import numpy as np

from fastdata._util.optional import turbojpeg_handle
from fastdata.decode.base import DecodeError, Decoder, DecodeWarning, check_not_empty
from fastdata.decode.headers import is_jpeg
from fastdata.decode.limits import check_pixels
from fastdata.decode.pil import pil_decode, pil_validate
from fastdata.decode.scaling import SIMD_SCALES, TURBOJPEG_SCALES, Scale

__all__ = ["TurboJpegDecoder"]

logger = logging.getLogger(__name__)

# PyTurboJPEG constants, copied so that importing this module never needs turbojpeg.
_TJPF_RGB = 0
_CMYK_COLORSPACES = (3, 4)  # TJCS_CMYK, TJCS_YCCK
# libjpeg's JWRN_JPEG_EOF: the data ended before the image did. PIL refuses such a file ("image
# file is truncated") unless ImageFile.LOAD_TRUNCATED_IMAGES is set; libjpeg's other warnings
# ("Corrupt JPEG data: N extraneous bytes before marker", ...) PIL ignores.
_EOF_WARNING = "Premature end of JPEG file"
# libjpeg's warning messages (its JWRN_* codes); anything else it reports is a fatal error.
_LIBJPEG_WARNINGS = (
    _EOF_WARNING,
    "Corrupt JPEG data",
    "Inconsistent progression sequence",
    "Invalid SOS parameters for sequential",
    "Unknown Adobe color transform code",
    "Warning: unknown JFIF revision",
    "Application transferred too many scanlines",
)
_T = TypeVar("_T")


class TurboJpegDecoder(Decoder):
    """libjpeg-turbo (through PyTurboJPEG) for JPEG, Pillow for everything else.

    CMYK/YCCK JPEGs, which libjpeg-turbo's API cannot convert to RGB, are decoded by Pillow
    (PIL's CMYK conversion, exactly), and so is any JPEG libjpeg-turbo refuses but Pillow
    reads. Baseline and progressive YCbCr and grayscale JPEGs give PIL's pixels exactly:
    both use libjpeg-turbo with the same (default) IDCT and upsampling.

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
            pair = (int(scale[0]), int(scale[1]))
            if pair not in supported or pair[0] > pair[1]:
                raise ValueError(f"scales must hold libjpeg-turbo factors <= 1 from {TURBOJPEG_SCALES}, got {scale!r}")
            checked.add(pair)
        checked.add((1, 1))
        self.scales = tuple(sorted(checked, key=lambda s: s[0] / s[1]))

    def read_size(self, data: bytes) -> tuple[int, int] | None:  # noqa: D102 (documented on Decoder)
        if not is_jpeg(data):
            return super().read_size(data)
        try:
            width, height, _, _ = _turbojpeg().decode_header(data)
        except OSError:
            return None
        return (height, width) if height > 0 and width > 0 else None

    def decode(self, data: bytes, *, scale: Scale = (1, 1)) -> np.ndarray:  # noqa: D102
        scale = self._check_scale(scale)
        check_not_empty(data)
        if not is_jpeg(data):
            return pil_decode(data, scale)
        header = _header(data)
        if isinstance(header, str):
            return _pillow_or_raise(lambda: pil_decode(data, scale), header)
        if header[2] in _CMYK_COLORSPACES:  # libjpeg-turbo has no CMYK -> RGB conversion
            return pil_decode(data, scale)
        try:
            image = _turbojpeg().decode(data, pixel_format=_TJPF_RGB, scaling_factor=None if scale == (1, 1) else scale)
        except (OSError, UserWarning) as exc:  # UserWarning: libjpeg warnings under `-W error`
            return _pillow_or_raise(lambda: pil_decode(data, scale), str(exc))
        return image

    def validate(self, data: bytes) -> tuple[int, int]:  # noqa: D102
        check_not_empty(data)
        if not is_jpeg(data):
            return pil_validate(data)
        refused: str | None = None  # libjpeg-turbo's reason to leave the file to Pillow
        size = (0, 0)
        # catch_warnings is process-global: the packer validates in worker processes.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            header = _header(data)
            if isinstance(header, str):
                refused = header
            elif header[2] in _CMYK_COLORSPACES:
                refused = ""
            else:
                size = (header[0], header[1])
                # The smallest DCT scale still entropy-decodes every coefficient of every scan, so the
                # whole stream is checked, through the same colour conversion as decode().
                try:
                    _turbojpeg().decode(data, pixel_format=_TJPF_RGB, scaling_factor=(1, 8))
                except OSError as exc:
                    refused = str(exc)
        if refused is not None:
            return _pillow_or_raise(lambda: pil_validate(data), refused) if refused else pil_validate(data)
        messages = list(dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, UserWarning)))
        if messages:
            _pil_verdict(data, messages)
        for message in messages:
            warnings.warn(message, DecodeWarning, stacklevel=2)
        return size


@functools.cache
def _turbojpeg() -> Any:
    """PyTurboJPEG, except that a fatal libjpeg error after a warning raises instead of passing for a warning.

    libjpeg-turbo's ``tjGetErrorCode()`` says TJERR_WARNING whenever a warning was emitted during
    the call, even when a fatal error stopped it afterwards ("extraneous bytes" then "Unsupported
    color conversion request"); PyTurboJPEG then only warns and returns an uninitialised array.
    The message itself tells a warning from an error.

    Raises:
        ImportError: libturbojpeg or PyTurboJPEG is missing.
    """
    base = type(turbojpeg_handle())
    if not hasattr(base, "_TurboJPEG__report_error"):  # pragma: no cover - a PyTurboJPEG without the hook
        logger.debug("PyTurboJPEG has no _TurboJPEG__report_error; libjpeg errors after warnings pass as warnings")
        return turbojpeg_handle()

    class StrictTurboJPEG(base):  # type: ignore[misc, valid-type]
        def _TurboJPEG__report_error(self, handle: Any) -> None:
            message = self._TurboJPEG__get_error_string(handle)
            if not message.startswith(_LIBJPEG_WARNINGS):
                raise OSError(message)
            warnings.warn(message, stacklevel=3)

    return StrictTurboJPEG()


def _header(data: bytes) -> tuple[int, int, int] | str:
    """``(height, width, colorspace)``, pixel limit checked; or why libjpeg-turbo cannot read the header."""
    try:
        width, height, _, colorspace = _turbojpeg().decode_header(data)
    except OSError as exc:
        return str(exc) or "unreadable header"
    if height <= 0 or width <= 0:
        return f"no image size in the header ({width}×{height})"
    check_pixels(height, width)
    return height, width, colorspace


def _pil_verdict(data: bytes, messages: list[str]) -> None:
    """For a JPEG libjpeg-turbo decoded with warnings: raise DecodeError unless PIL decodes it too.

    PIL feeds libjpeg incrementally and stops once the last scanline is out, so whether it
    accepts a damaged file depends on where the damage is ("image file is truncated" when
    libjpeg needs data past the end before the image is complete, but not when only the end
    marker is missing after it). Asking Pillow gives its exact verdict; files without
    warnings, nearly all of them, never get here.
    """
    try:
        pil_validate(data)
    except DecodeError as exc:
        if any(m.startswith(_EOF_WARNING) for m in messages):
            raise DecodeError("truncated JPEG") from exc
        raise DecodeError(f"{exc} (libjpeg: {messages[0]})") from exc


def _pillow_or_raise(pillow: Callable[[], _T], reason: str) -> _T:
    """Pillow's result for a JPEG libjpeg-turbo refused, or DecodeError with libjpeg-turbo's reason."""
    try:
        return pillow()
    except DecodeError as exc:
        raise DecodeError(f"corrupt JPEG ({reason})") from exc
