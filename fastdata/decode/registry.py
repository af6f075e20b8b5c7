"""``get_decoder(name)``: the decoder registry and the ``"auto"`` choice."""

from __future__ import annotations

import warnings

from fastdata._util.optional import native_disabled, turbojpeg_handle
from fastdata.decode import native
from fastdata.decode.base import DECODER_NAMES, Decoder
from fastdata.decode.fallback import fallback_decoder
from fastdata.decode.native import NativeJpegDecoder
from fastdata.decode.opencv import OpenCVDecoder
from fastdata.decode.turbo import TurboJpegDecoder

__all__ = ["fallback_decoder", "get_decoder"]

_native_warned = False


def get_decoder(name: str = "auto") -> Decoder:
    """Build a decoder by name.

    Args:
        name: ``"auto"`` (fastdata's native crop-region kernel when built, else libjpeg-turbo
            through PyTurboJPEG, else OpenCV; a fallback warns once per process how to get the
            faster one), ``"native"``, ``"turbojpeg"`` or ``"opencv"``. The environment variable
            ``FASTDATA_NATIVE=0`` makes ``"auto"`` skip the native kernel (silently). Every decoder
            reads formats other than JPEG with Pillow.

    Returns:
        A new decoder.

    Raises:
        ImportError: ``"native"`` or ``"turbojpeg"`` was asked for and is not installed (the
            message says how to install it).
        ValueError: an unknown name.
        TypeError: ``name`` is not a string.
    """
    global _native_warned
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, one of {DECODER_NAMES}, got {type(name).__name__}")
    if name == "auto":
        if native.available():
            return NativeJpegDecoder()
        if not native_disabled() and not _native_warned:
            _native_warned = True
            warnings.warn(
                f"fastdata's native crop-region JPEG kernel is not built, so JPEGs decode whole and "
                f"more slowly: {native.BUILD_HINT}",
                RuntimeWarning,
                stacklevel=2,
            )
        return fallback_decoder()
    if name == "native":
        return NativeJpegDecoder()
    if name == "turbojpeg":
        turbojpeg_handle()  # ImportError with the install hint
        return TurboJpegDecoder()
    if name == "opencv":
        return OpenCVDecoder()
    raise ValueError(f"name must be one of {DECODER_NAMES}, got {name!r}")
