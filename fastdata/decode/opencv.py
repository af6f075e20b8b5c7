"""OpenCV decoding: every format ``cv2.imdecode`` reads; JPEG DCT scaling through ``IMREAD_REDUCED_*``."""

from __future__ import annotations

import cv2
import numpy as np

from fastdata.decode.base import (
    SIMD_SCALES, DecodeError, Decoder, Scale, check_not_empty, image_kind, is_jpeg, jpeg_header, scaled_size,
)

__all__ = ["OpenCVDecoder", "opencv_decode", "opencv_validate"]

# OpenCV's thread pool does not survive fork: a DataLoader (or pack) worker forked after this
# process ran a parallel OpenCV call deadlocks in its next one. fastdata's parallelism is one
# process per core, so OpenCV's own threading is switched off here, in the parent, before any fork.
cv2.setNumThreads(0)

_CV2_COLOR = cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION
_CV2_REDUCED = {
    (1, 2): cv2.IMREAD_REDUCED_COLOR_2 | cv2.IMREAD_IGNORE_ORIENTATION,
    (1, 4): cv2.IMREAD_REDUCED_COLOR_4 | cv2.IMREAD_IGNORE_ORIENTATION,
    (1, 8): cv2.IMREAD_REDUCED_COLOR_8 | cv2.IMREAD_IGNORE_ORIENTATION,
}


def _resize_to(image: np.ndarray, height: int, width: int) -> np.ndarray:
    if image.shape[:2] == (height, width):
        return image
    shrink = height <= image.shape[0] and width <= image.shape[1]
    interpolation = cv2.INTER_AREA if shrink else cv2.INTER_LINEAR
    return cv2.resize(image, (width, height), interpolation=interpolation)


def _cv2_imdecode(data: bytes, flags: int) -> np.ndarray:
    """cv2.imdecode to RGB, or DecodeError naming the format."""
    check_not_empty(data)
    try:
        bgr = cv2.imdecode(np.frombuffer(data, np.uint8), flags)
    except cv2.error as exc:
        raise DecodeError(f"OpenCV could not decode the image ({exc})") from exc
    if bgr is None:
        kind = image_kind(data)
        raise DecodeError("not an image" if kind is None else f"corrupt or truncated {kind}")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def opencv_decode(data: bytes, scale: Scale) -> np.ndarray:
    """Decode any format with OpenCV; JPEG DCT scaling for 1/2, 1/4 and 1/8, else resize."""
    if scale == (1, 1):
        return _cv2_imdecode(data, _CV2_COLOR)
    if scale in _CV2_REDUCED and is_jpeg(data):
        full = jpeg_header(data)[0]
        image = _cv2_imdecode(data, _CV2_REDUCED[scale])
        if full is None:
            return image
        return _resize_to(image, *scaled_size(*full, scale))  # no-op unless OpenCV rounded differently
    image = _cv2_imdecode(data, _CV2_COLOR)
    return _resize_to(image, *scaled_size(image.shape[0], image.shape[1], scale))


def opencv_validate(data: bytes) -> tuple[int, int]:
    check_not_empty(data)
    if is_jpeg(data):
        size, sos = jpeg_header(data)
        if size is None or sos is None:
            raise DecodeError("truncated or corrupt JPEG header")
        if bytes(data).find(b"\xff\xd9", sos) < 0:  # entropy-coded data never contains FF D9
            raise DecodeError("truncated JPEG")
    image = _cv2_imdecode(data, _CV2_COLOR)
    return image.shape[0], image.shape[1]


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
        check_not_empty(data)
        return opencv_decode(data, self._check_scale(scale))

    def validate(self, data: bytes) -> tuple[int, int]:  # noqa: D102
        return opencv_validate(data)
