"""Type stub of the C kernel ``_jpegcrop.c`` (crop-region JPEG decoding with libjpeg); see its module docstring."""

from collections.abc import Sequence

import numpy as np
from _typeshed import ReadableBuffer, WriteableBuffer

_In = ReadableBuffer | np.ndarray  # numpy's stubs declare the buffer protocol for Python 3.12+ only
_Out = WriteableBuffer | np.ndarray

LIBJPEG_TURBO_VERSION_NUMBER: int

class JpegError(ValueError):
    """libjpeg refused the data; the message is libjpeg's (or 'empty file')."""

class Decompressor:
    """A reusable libjpeg decompressor; one per thread."""

    splice: bool
    @property
    def spliced(self) -> int:
        """How many decode_region calls decoded only the box's restart intervals."""
    @property
    def last_warning(self) -> str | None:
        """The first libjpeg warning of the last call, or None."""
    def __init__(
        self, max_pixels: int = ..., max_memory: int = ..., max_scans: int = ..., splice: bool = ...
    ) -> None: ...
    def header(self, data: _In, /) -> tuple[int, int, int, int]:
        """``(height, width, num_components, jpeg_color_space)`` from the header only."""
    def decode_region(
        self,
        data: _In,
        scale: tuple[int, int] | int,
        y0: int,
        y1: int,
        x0: int,
        x1: int,
        out: _Out,
        /,
    ) -> tuple[int, int, int]:
        """Decode rows [y0, y1) and columns [x0, x1) at DCT ``scale`` into ``out``: ``(rows, cols, warnings)``."""

def decode_batch(
    decompressors: Sequence[Decompressor],
    jobs: Sequence[tuple[_In, tuple[int, int] | int, int, int, int, int, _Out]],
    /,
) -> list[tuple[int, int, str]]:
    """``decode_region`` of every job, the GIL released once: ``(status, warnings, message)`` per job."""

def philox_uniforms(keys: _In, positions: _In, indices: _In, out: _Out, /) -> None:
    """Fill row i of ``out`` (d values) with numpy's Philox draws for ``(keys[i], positions[i], indices[i])``.

    That is ``Generator(Philox(key=keys[i], counter=[0, 0, positions[i], indices[i]])).random(d)``.
    """
