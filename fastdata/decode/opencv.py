"""OpenCV decoding of JPEGs (``IMREAD_REDUCED_*`` DCT scaling), the fallback when libturbojpeg is missing.

Every other format, and CMYK/YCCK JPEGs, go to Pillow (:mod:`fastdata.decode.pil`), whose pixels
are PIL's by construction; OpenCV gives other pixels for several of them.

Importing this module silences OpenCV's own log (``[ WARN:0@...]`` lines on stderr) in this
process unless ``OPENCV_LOG_LEVEL`` is set: fastdata reports what went wrong with an image through
:class:`~fastdata.decode.DecodeError` and the pack manifest instead.
"""

from __future__ import annotations

import os

import cv2
import numpy as np

from fastdata.decode.base import DecodeError, Decoder, check_not_empty
from fastdata.decode.headers import is_jpeg, jpeg_components, jpeg_header
from fastdata.decode.limits import check_pixels
from fastdata.decode.pil import pil_decode, pil_validate
from fastdata.decode.scaling import SIMD_SCALES, Scale, resize_to, scaled_size

__all__ = ["OpenCVDecoder", "opencv_decode", "opencv_validate"]

# OpenCV's thread pool does not survive fork: a DataLoader (or pack) worker forked after this
# process ran a parallel OpenCV call deadlocks in its next one. fastdata's parallelism is one
# process per core, so OpenCV's own threading is switched off here, in the parent, before any fork.
cv2.setNumThreads(0)
if "OPENCV_LOG_LEVEL" not in os.environ:
    cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_SILENT)

_CV2_COLOR = cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION
_CV2_REDUCED = {
    (1, 2): cv2.IMREAD_REDUCED_COLOR_2 | cv2.IMREAD_IGNORE_ORIENTATION,
    (1, 4): cv2.IMREAD_REDUCED_COLOR_4 | cv2.IMREAD_IGNORE_ORIENTATION,
    (1, 8): cv2.IMREAD_REDUCED_COLOR_8 | cv2.IMREAD_IGNORE_ORIENTATION,
}


def _cv2_imdecode(data: bytes, flags: int) -> np.ndarray | None:
    """cv2.imdecode to RGB; None when OpenCV cannot decode it."""
    try:
        bgr = cv2.imdecode(np.frombuffer(data, np.uint8), flags)
    except cv2.error:
        return None
    if bgr is None or bgr.ndim != 3 or 0 in bgr.shape:
        return None
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """The JPEG's size with the pixel limit checked; None when Pillow should decode it instead."""
    size = jpeg_header(data)[0]
    if size is None or jpeg_components(data) == 4:  # no size found / CMYK: Pillow (which checks the limit)
        return None
    check_pixels(*size)
    return size


def opencv_decode(data: bytes, scale: Scale) -> np.ndarray:
    """Decode a JPEG with OpenCV (DCT scaling for 1/2, 1/4 and 1/8, else resize); other formats with Pillow."""
    check_not_empty(data)
    full = _jpeg_size(data) if is_jpeg(data) else None
    if full is None:
        return pil_decode(data, scale)
    flags = _CV2_REDUCED.get(scale, _CV2_COLOR)
    image = _cv2_imdecode(data, flags)
    if image is None:
        try:
            return pil_decode(data, scale)
        except DecodeError as exc:
            raise DecodeError(f"corrupt JPEG ({exc})") from exc
    return resize_to(image, *scaled_size(*full, scale))  # no-op unless OpenCV rounded differently


def opencv_validate(data: bytes) -> tuple[int, int]:
    """PIL's own verdict (Pillow decodes the file; the pixel limit is checked from the header); ``(height, width)``.

    OpenCV's libjpeg reports no warnings to the caller, so it cannot tell a JPEG PIL accepts
    from one it refuses; a full Pillow decode costs about what a full OpenCV decode does.
    """
    return pil_validate(data)


class OpenCVDecoder(Decoder):
    """``cv2.imdecode`` for JPEG (DCT scaling via ``IMREAD_REDUCED_COLOR_*``), Pillow for the rest.

    The fallback when libturbojpeg is missing. ``validate`` is Pillow's decode, so it accepts
    and refuses exactly the files PIL does; OpenCV's libjpeg prints its corrupt-data warnings
    to stderr instead of reporting them (``fastdata pack`` collects them per file).

    Example::

        decoder = OpenCVDecoder()
        half = decoder.decode(jpeg_bytes, scale=(1, 2))
    """

    name = "opencv"
    scales = SIMD_SCALES

    def decode(self, data: bytes, *, scale: Scale = (1, 1)) -> np.ndarray:  # noqa: D102
        check_not_empty(data)
        return opencv_decode(data, self._check_scale(scale))

    def validate(self, data: bytes) -> tuple[int, int]:  # noqa: D102
        return opencv_validate(data)
