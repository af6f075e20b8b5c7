"""The pixel limit: images larger than this are refused from their header, before any pixel is decoded.

A few hundred KB of PNG or JPEG can declare a 30000x30000 image (a "decompression bomb"):
decoding it costs gigabytes on every read, in every DataLoader worker. PIL refuses such files
at ``Image.open`` (``DecompressionBombError`` above ``2 * Image.MAX_IMAGE_PIXELS``, 178,956,970
pixels); fastdata refuses them at the same threshold by default, for every format and every
decoder, with :class:`~fastdata.decode.DecodeError`. ``fastdata pack`` skips them (its
``--max-pixels`` option), and readers raise before allocating, third-party TFRecords included.

The reader-side limit is one setting per process (:func:`set_max_pixels`); DataLoader workers
inherit it through fork, and a spawned worker starts from the default unless the dataset's
transform sets it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from fastdata.decode.base import DecodeError

__all__ = ["DEFAULT_MAX_PIXELS", "as_limit", "check_pixels", "get_max_pixels", "pixel_limit", "set_max_pixels"]

#: PIL's ``DecompressionBombError`` threshold: ``2 * PIL.Image.MAX_IMAGE_PIXELS`` with PIL's
#: default ``MAX_IMAGE_PIXELS = 1024 * 1024 * 1024 // 4 // 3`` (89,478,485).
DEFAULT_MAX_PIXELS: int = 2 * (1024 * 1024 * 1024 // 4 // 3)

_max_pixels: int | None = DEFAULT_MAX_PIXELS


def as_limit(limit: int | None, name: str = "max_pixels") -> int | None:
    """``limit`` as a positive int, or None for "no limit" (0 and None both switch it off).

    Raises:
        ValueError: ``limit`` is negative or not an integer; the message names ``name``.
    """
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(
            f"{name} must be a non-negative number of pixels (0 or None: no limit), got {limit!r}; "
            f"the default is {DEFAULT_MAX_PIXELS} (PIL's DecompressionBombError threshold)"
        )
    return limit or None


def get_max_pixels() -> int | None:
    """The pixel limit in force in this process (None: no limit)."""
    return _max_pixels


def set_max_pixels(limit: int | None) -> int | None:
    """Set this process's pixel limit for every fastdata decoder.

    Args:
        limit: the largest ``width * height`` a decoder accepts; 0 or None switches the
            limit off. The default, :data:`DEFAULT_MAX_PIXELS`, is PIL's.

    Returns:
        The previous limit, so it can be restored.

    Raises:
        ValueError: ``limit`` is negative or not an integer.

    Example::

        from fastdata.decode import set_max_pixels
        set_max_pixels(400_000_000)  # accept images up to 400 Mpx (about 1.2 GB decoded)
    """
    global _max_pixels
    previous, _max_pixels = _max_pixels, as_limit(limit, "limit")
    return previous


@contextlib.contextmanager
def pixel_limit(limit: int | None) -> Iterator[None]:
    """Apply ``limit`` (0/None: none) for the duration of a ``with`` block, then restore the previous one."""
    previous = set_max_pixels(limit)
    try:
        yield
    finally:
        set_max_pixels(previous)


def check_pixels(height: int, width: int) -> None:
    """Refuse an image whose header declares more pixels than the limit allows.

    Args:
        height: the image height from its header.
        width: the image width from its header.

    Raises:
        DecodeError: ``"WxH = N pixels exceeds the limit of M (--max-pixels)"``, or a
            zero-sized image (a damaged header).
    """
    if height <= 0 or width <= 0:
        raise DecodeError(f"damaged header: the image size is {width}×{height}")
    limit = _max_pixels
    if limit is not None and height * width > limit:
        raise DecodeError(f"{width}×{height} = {width * height} pixels exceeds the limit of {limit} (--max-pixels)")
