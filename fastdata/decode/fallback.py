"""The decoder to use without fastdata's native kernel: PyTurboJPEG, else OpenCV (said once per process).

The native decoder hands non-JPEG and odd JPEGs to it, and ``get_decoder("auto")`` returns it when the kernel is
not built; it sits below both, so neither imports the other back.
"""

from __future__ import annotations

import warnings

from fastdata._util.optional import TURBOJPEG_HINT, has_turbojpeg
from fastdata.decode.base import Decoder
from fastdata.decode.opencv import OpenCVDecoder
from fastdata.decode.scaling import KERNEL_SCALES
from fastdata.decode.turbo import TurboJpegDecoder

__all__ = ["fallback_decoder"]

_fallback_warned = False


def fallback_decoder() -> Decoder:
    """The best decoder without fastdata's native kernel: PyTurboJPEG, else OpenCV (warning once)."""
    global _fallback_warned
    if has_turbojpeg():  # at the kernel's scales (5/8 too): the kernel's pixels, at the same speed (measured 1.00x)
        return TurboJpegDecoder(scales=KERNEL_SCALES)
    if not _fallback_warned:
        _fallback_warned = True
        warnings.warn(
            "fastdata falls back to OpenCV for JPEG decoding: it can be slower (it depends on "
            "the libjpeg OpenCV was built with), offers only the 1/2, 1/4 and 1/8 DCT scales, and "
            f"validates with a full Pillow decode. {TURBOJPEG_HINT}",
            RuntimeWarning,
            stacklevel=3,
        )
    return OpenCVDecoder()
