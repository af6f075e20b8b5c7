"""Bytes to pixels: every decoder returns RGB ``uint8`` ``(H, W, 3)`` arrays as ``PIL.Image.convert("RGB")`` would.

- :mod:`~fastdata.decode.base`: the :class:`Decoder` interface, :class:`DecodeError` and :class:`DecodeWarning`.
- :mod:`~fastdata.decode.scaling`: DCT scales (:func:`choose_scale`, :func:`scaled_size`) and the resize helpers.
- :mod:`~fastdata.decode.headers`: the format, size and components read from an image's header.
- :mod:`~fastdata.decode.turbo`: libjpeg-turbo through PyTurboJPEG (SIMD DCT scaling) for JPEG.
- :mod:`~fastdata.decode.pil`: Pillow, for PNG, GIF, BMP, TIFF, WebP, PPM/PGM/PBM and CMYK JPEGs.
- :mod:`~fastdata.decode.opencv`: OpenCV for JPEG when libturbojpeg is missing.
- :mod:`~fastdata.decode.limits`: the pixel limit (:func:`set_max_pixels`), PIL's by default.
- :mod:`~fastdata.decode.registry`: :func:`get_decoder` (``"auto"`` picks the fastest available).
"""

from fastdata.decode.base import DECODER_NAMES, DecodeError, Decoder, DecodeWarning
from fastdata.decode.headers import is_jpeg
from fastdata.decode.limits import DEFAULT_MAX_PIXELS, get_max_pixels, pixel_limit, set_max_pixels
from fastdata.decode.opencv import OpenCVDecoder
from fastdata.decode.registry import get_decoder
from fastdata.decode.scaling import SIMD_SCALES, TURBOJPEG_SCALES, choose_scale, scaled_size
from fastdata.decode.turbo import TurboJpegDecoder

__all__ = [
    "DECODER_NAMES",
    "DEFAULT_MAX_PIXELS",
    "SIMD_SCALES",
    "TURBOJPEG_SCALES",
    "DecodeError",
    "DecodeWarning",
    "Decoder",
    "OpenCVDecoder",
    "TurboJpegDecoder",
    "choose_scale",
    "get_decoder",
    "get_max_pixels",
    "is_jpeg",
    "pixel_limit",
    "scaled_size",
    "set_max_pixels",
]
