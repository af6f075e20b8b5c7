"""``get_decoder(name)``: the decoder registry and the ``"auto"`` choice."""

from __future__ import annotations

import warnings

from fastdata._optional import TURBOJPEG_HINT, has_turbojpeg, turbojpeg_handle
from fastdata.decode.base import DECODER_NAMES, Decoder
from fastdata.decode.opencv import OpenCVDecoder
from fastdata.decode.turbo import TurboJpegDecoder

__all__ = ["get_decoder"]

_fallback_warned = False


def get_decoder(name: str = "auto") -> Decoder:
    """Build a decoder by name.

    Args:
        name: ``"auto"`` (libjpeg-turbo when available, else OpenCV with one warning
            per process), ``"turbojpeg"`` or ``"opencv"``. Every decoder reads formats other
            than JPEG with Pillow.

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
                f"validates with a full Pillow decode. {TURBOJPEG_HINT}",
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
