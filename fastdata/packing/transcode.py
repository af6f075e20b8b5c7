"""What pack stores for a JPEG: the same coefficients, re-coded for random access (docs/concepts/crop-decoding.md).

:func:`transcode_jpeg` rewrites a JPEG losslessly with fastdata's C extension
(:mod:`fastdata.packing._jpegtranscode`): the DCT coefficients are copied, so every decoder gives
the pixels it gives for the original file; the entropy coding becomes baseline Huffman with
optimized tables (progressive and arithmetic-coded files too) and a restart marker every
:data:`RESTART_MCUS` MCUs (more in flat images, :data:`MIN_INTERVAL_BYTES`; more again where a baseline file
would otherwise grow, or the file is kept), which tile the MCU rows, so that a crop can be decoded from only the
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
    _jpegtranscode = None  # type: ignore[assignment]  # None stands for the kernel not built: every use checks it

__all__ = ["MIN_INTERVAL_BYTES", "RESTART_MCUS", "available", "restart_interval", "to_ranges", "transcode_jpeg"]

RESTART_MCUS = 1
"""MCUs per restart interval: K = 1 (measured for issue 16: crops decode 1.31x faster than without restart
intervals at K = 1, 1.21x at K = 2, for +2.7% of marker bytes, which optimized Huffman tables' -4% pay for)."""

MIN_INTERVAL_BYTES = 64
"""...unless an interval would then hold fewer bytes than this on average (the file's size over its MCUs): K is
raised to the divisor of the MCUs per row just above (or just below, where that is more than twice as many). A
marker costs about 3 bytes, so a flat image of tiny MCUs would otherwise grow several-fold (a uniform 1000x1000
4:4:4 JPEG: 12 KB -> 47 KB at K = 1, 12.3 KB with this rule). Measured (bench/pack.py transcode): ImageNet-like
JPEGs (about 140 bytes per MCU) keep K = 1 but 3%, and end 1.2% smaller than the originals; camera-sized photos
(about 55 bytes per MCU, `--profile photos`) are 3.0% larger at K = 1 and 2.0% with this rule (a row of a prime
number of MCUs keeps K = 1: one interval per row would lose the random access). Then the size fit
(:func:`transcode_jpeg`'s ``fit``, pack's default) raises K further wherever a baseline file would still grow."""

_warned = False


def available() -> bool:
    """True when the C extension is built (else pack stores JPEG bytes unchanged)."""
    return _jpegtranscode is not None


def transcode_jpeg(data: bytes, *, max_pixels: int | None = None, fit: bool = True) -> bytes | None:
    """``data`` losslessly re-coded with restart intervals, or None to store it unchanged.

    Args:
        data: a JPEG file's bytes.
        max_pixels: leave larger images unchanged (None or 0: no limit).
        fit: never larger than a baseline Huffman ``data`` (what pack does): a re-code that comes out
            larger is written again with a larger K (the next divisor of the MCUs per row that should
            drop enough markers, up to one interval per row), else None. Progressive and arithmetic-coded
            input gets the larger K too but stays re-coded (as it is, it decodes several times slower).

    Returns:
        The new JPEG, or None when the extension is missing, libjpeg refuses or warns about the
        file, the image is larger than ``max_pixels``, or ``fit`` cannot be met.
    """
    global _warned
    if _jpegtranscode is None:
        if not _warned:
            _warned = True
            warnings.warn(
                "fastdata.packing._jpegtranscode is not built: pack stores JPEG bytes unchanged "
                "(install a C compiler and libjpeg-dev, then reinstall fastdata)",
                RuntimeWarning,
                stacklevel=2,
            )
        return None
    return _jpegtranscode.transcode(data, RESTART_MCUS, MIN_INTERVAL_BYTES, max_pixels or (1 << 62), fit)


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
