"""What pack stores for a JPEG: the same coefficients, re-coded for random access (see README "What pack stores").

:func:`transcode_jpeg` rewrites a JPEG losslessly with fastdata's C extension
(:mod:`fastdata.packing._jpegtranscode`): the DCT coefficients are copied, so every decoder gives
the pixels it gives for the original file; the entropy coding becomes baseline Huffman with
optimized tables (progressive and arithmetic-coded files too) and a restart marker every
:data:`RESTART_MCUS` MCUs, which tile the MCU rows, so that a crop can be decoded from only the
restart intervals that cover it. EXIF, ICC profiles and comments are dropped (``convert("RGB")``
does not use them); the JFIF or Adobe marker that sets the colour transform is kept.

A file libjpeg refuses or warns about is stored unchanged (the caller keeps its bytes). Without
the extension (no C compiler or ``jpeglib.h`` at install time) every file is stored unchanged,
with one warning per process.
"""

from __future__ import annotations

import warnings

try:
    from fastdata.packing import _jpegtranscode
except ImportError:  # pragma: no cover - the extension is optional
    _jpegtranscode = None

__all__ = ["RESTART_MCUS", "available", "restart_interval", "to_ranges", "transcode_jpeg"]

RESTART_MCUS = 1
"""MCUs per restart interval wanted (the largest divisor of the MCUs per row up to it is used).

Measured (bench/pack_transcode.py, issue 16): K = 1 makes crops 1.31x faster to decode than K = 2's 1.21x,
for +2.7% of marker bytes, which optimized Huffman tables (-4%) more than pay for."""

_warned = False


def available() -> bool:
    """True when the C extension is built (else pack stores JPEG bytes unchanged)."""
    return _jpegtranscode is not None


def transcode_jpeg(data: bytes, *, max_pixels: int | None = None) -> bytes | None:
    """``data`` losslessly re-coded with restart intervals, or None to store it unchanged.

    Args:
        data: a JPEG file's bytes.
        max_pixels: leave larger images unchanged (None or 0: no limit).

    Returns:
        The new JPEG, or None when the extension is missing, libjpeg refuses or warns about the
        file, or the image is larger than ``max_pixels``.
    """
    global _warned
    if _jpegtranscode is None:
        if not _warned:
            _warned = True
            warnings.warn("fastdata.packing._jpegtranscode is not built: pack stores JPEG bytes unchanged "
                          "(install a C compiler and libjpeg-dev, then reinstall fastdata)", RuntimeWarning,
                          stacklevel=2)
        return None
    return _jpegtranscode.transcode(data, RESTART_MCUS, max_pixels or (1 << 62))


def restart_interval(data: bytes) -> tuple[int, int] | None:
    """``(restart interval in MCUs, MCUs per row)`` from a JPEG's header; None if it does not parse or no extension."""
    return None if _jpegtranscode is None else _jpegtranscode.restart_interval(data)


def to_ranges(indices: list[int]) -> list[list[int]]:
    """Sorted sample indices as ``[start, stop)`` ranges: ``[0, 1, 2, 5]`` -> ``[[0, 3], [5, 6]]``."""
    ranges: list[list[int]] = []
    for i in indices:
        if ranges and ranges[-1][1] == i:
            ranges[-1][1] = i + 1
        else:
            ranges.append([i, i + 1])
    return ranges
