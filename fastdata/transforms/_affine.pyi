"""Type stub of the C extension ``fastdata.transforms._affine`` (built from ``_affine.c``)."""

from collections.abc import Sequence

import numpy as np

KERNELS: tuple[str, ...]
"""The kernels this CPU runs; the last, the fastest, is the default."""

def bicubic(
    image: np.ndarray,
    out: np.ndarray,
    coeffs: Sequence[float],
    fill: Sequence[int],
    *,
    kernel: str | None = None,
) -> None:
    """``out[...]`` = PIL's ``image.transform((W, H), AFFINE, coeffs, BICUBIC, fillcolor=fill)``, RGB uint8.

    ``coeffs``: 6 finite floats ``(a, b, c, d, e, f)``, PIL's output-to-input map; ``fill``: 3 ints in 0..255;
    ``out``: a writable C-contiguous uint8 array of ``image``'s shape, not overlapping it.

    Raises:
        TypeError: a non-array or a dtype other than uint8.
        ValueError: a bad shape, layout, coefficient, fill or kernel, or ``out`` overlapping ``image``.
    """
