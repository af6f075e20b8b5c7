"""``targets.npy``: every sample's label in dataset order, written by the packer and read without trust.

The file is a plain ``.npy`` (int64, one dimension) that ``np.load`` reads. fastdata reads it
through :func:`load_targets` instead: the size and CRC32C the manifest records for it are checked,
the header is parsed without allocating anything it declares, its shape must be the manifest's
``num_samples`` and every label must index the class table.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np

from fastdata.formats.base import CorruptRecordError
from fastdata.formats.files import check_crc32c, read_regular
from fastdata.formats.manifest import Manifest

__all__ = ["decode_targets", "encode_targets", "load_targets"]

_MAX_HEADER = 1 << 16  # a .npy header of a 1-D array is < 200 bytes; numpy itself refuses > 10000


def encode_targets(labels: np.ndarray | list[int]) -> bytes:
    """The ``.npy`` bytes of ``labels`` as int64 (what the packer writes)."""
    buf = io.BytesIO()
    np.save(buf, np.asarray(labels, dtype=np.int64).reshape(-1), allow_pickle=False)
    return buf.getvalue()


def decode_targets(data: bytes, *, path: str | os.PathLike, num_samples: int, num_classes: int) -> np.ndarray:
    """Parse ``.npy`` bytes holding ``num_samples`` integer labels in ``[0, num_classes)``.

    Args:
        data: the file's bytes.
        path: the file, for error messages.
        num_samples: how many labels the manifest says the dataset has.
        num_classes: the size of the class table (0: no range check).

    Returns:
        An int64 array of ``num_samples`` labels.

    Raises:
        CorruptRecordError: not a ``.npy`` file of integers, another shape than ``(num_samples,)``,
            a size that does not match its header, or a label outside the class table.
    """
    f = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran_order, dtype = read_header(f, max_header_size=_MAX_HEADER)
    except (ValueError, SyntaxError, TypeError, OverflowError, MemoryError, RecursionError):
        raise CorruptRecordError(path, None, "is not a .npy file with a valid header") from None
    if dtype.kind not in "iu" or dtype.hasobject or shape != (num_samples,) or fortran_order:
        raise CorruptRecordError(
            path, None, f"must hold {num_samples} integer labels (shape ({num_samples},)) but its header says "
            f"dtype {dtype.str}, shape {_short(shape)}"
        )
    offset = f.tell()
    if len(data) - offset != num_samples * dtype.itemsize:
        raise CorruptRecordError(path, None, f"is {len(data)} bytes, not what its header declares (truncated?)")
    labels = np.frombuffer(data, dtype=dtype, count=num_samples, offset=offset).astype(np.int64)
    if num_samples and num_classes and (labels.min() < 0 or labels.max() >= num_classes):
        bad = int(np.flatnonzero((labels < 0) | (labels >= num_classes))[0])
        raise CorruptRecordError(path, None, f"label of sample {bad} is outside the {num_classes} classes")
    return labels


def load_targets(root: Path, manifest: Manifest, path: Path) -> np.ndarray:
    """Read and check the labels file of a packed dataset (``path``: already resolved inside ``root``).

    Raises:
        FileNotFoundError: the file is missing.
        CorruptRecordError: see :func:`decode_targets`; also a size or CRC32C other than the manifest's.
    """
    n = manifest.num_samples
    data = read_regular(path, max_bytes=_MAX_HEADER + 8 * n, nbytes=manifest.targets_nbytes)
    check_crc32c(data, manifest.targets_crc32c, path)
    return decode_targets(data, path=path, num_samples=n, num_classes=len(manifest.classes))


def _short(shape: tuple) -> str:
    text = str(shape)
    return text if len(text) <= 40 else text[:37] + "..."
