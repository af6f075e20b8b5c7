"""Type stub of the C kernel ``_bilinear.c``: PIL's antialiased bilinear resize of RGB, into the caller's buffer."""

import numpy as np
from _typeshed import ReadableBuffer, WriteableBuffer

_In = ReadableBuffer | np.ndarray  # numpy's stubs declare the buffer protocol for Python 3.12+ only
_Out = WriteableBuffer | np.ndarray

def resize(
    src: _In, out: _Out, box: tuple[float, float, float, float], pillow13: bool, /
) -> None: ...  # uint8 (H, W, 3) C-contiguous in and out
