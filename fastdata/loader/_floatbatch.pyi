"""Type stub of the C kernel ``_floatbatch.c``: uint8 NHWC batches to normalized float32, one pass."""

from collections.abc import Sequence

import numpy as np
from _typeshed import ReadableBuffer, WriteableBuffer

_In = ReadableBuffer | np.ndarray  # numpy's stubs declare the buffer protocol for Python 3.12+ only
_Out = WriteableBuffer | np.ndarray

def normalize(
    src: _In,
    dst: _Out,
    n: int,
    height: int,
    width: int,
    scale: Sequence[float],  # 3 floats
    offset: Sequence[float],  # 3 floats
    flips: _In,
    /,
) -> None:
    """Normalize ``n`` RGB images of ``src`` into ``dst`` (``x * scale + offset`` per channel), flipping where set."""
