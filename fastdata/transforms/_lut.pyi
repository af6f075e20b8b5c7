"""Type stub of the C extension ``fastdata.transforms._lut`` (built from ``_lut.c``)."""

import numpy as np

KERNELS: tuple[str, ...]
"""The kernels this CPU runs; the last, the fastest, is the default."""

def apply(image: np.ndarray, table: np.ndarray, *, kernel: str | None = None) -> None:
    """``image[...] = table[image]``, in place; ``table`` is uint8 ``(256,)``, or ``(3, 256)`` for an RGB image.

    Raises:
        TypeError: a non-array or a dtype other than uint8.
        ValueError: a bad shape, layout or kernel, or ``table`` overlapping ``image``.
    """
