"""libjpeg-turbo through PyTurboJPEG: JPEG with SIMD DCT scaling; other formats go to OpenCV."""

from __future__ import annotations

import warnings
from collections.abc import Iterable

import numpy as np

from fastdata._optional import turbojpeg_handle
from fastdata.decode.base import (
    SIMD_SCALES, TURBOJPEG_SCALES, DecodeError, Decoder, Scale, check_not_empty, is_jpeg,
)
from fastdata.decode.opencv import opencv_decode, opencv_validate

__all__ = ["TurboJpegDecoder"]

# PyTurboJPEG constants, copied so that importing this module never needs turbojpeg.
_TJPF_RGB = 0
_TJPF_GRAY = 6
_TJPF_CMYK = 11
_TJFLAG_STOPONWARNING = 8192
_CMYK_COLORSPACES = (3, 4)  # TJCS_CMYK, TJCS_YCCK


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
        check_not_empty(data)
        if not is_jpeg(data):
            return opencv_decode(data, scale)
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
                return opencv_decode(data, scale)
            raise DecodeError(f"corrupt JPEG ({exc})") from exc

    def validate(self, data: bytes) -> tuple[int, int]:  # noqa: D102
        check_not_empty(data)
        if not is_jpeg(data):
            return opencv_validate(data)
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
