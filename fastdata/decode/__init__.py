"""Bytes to pixels: every decoder returns RGB ``uint8`` ``(H, W, 3)`` arrays as ``PIL.Image.convert("RGB")`` would.

- :mod:`~fastdata.decode.base`: the :class:`Decoder` interface, DCT scales, header parsing, :class:`DecodeError`.
- :mod:`~fastdata.decode.turbo`: libjpeg-turbo through PyTurboJPEG (SIMD DCT scaling).
- :mod:`~fastdata.decode.opencv`: OpenCV, for other formats and as the fallback.
- :mod:`~fastdata.decode.registry`: :func:`get_decoder` (``"auto"`` picks the fastest available).
"""

from fastdata.decode.base import (
    DECODER_NAMES, SIMD_SCALES, TURBOJPEG_SCALES, DecodeError, Decoder, choose_scale, is_jpeg, scaled_size,
)
from fastdata.decode.opencv import OpenCVDecoder
from fastdata.decode.registry import get_decoder
from fastdata.decode.turbo import TurboJpegDecoder

__all__ = [
    "DECODER_NAMES", "SIMD_SCALES", "TURBOJPEG_SCALES", "DecodeError", "Decoder", "OpenCVDecoder",
    "TurboJpegDecoder", "choose_scale", "get_decoder", "is_jpeg", "scaled_size",
]
