"""The files ``verify`` and ``inspect`` check around the records, in memory that does not grow with the samples.

- :func:`sparse_shard`: a shard whose bytes on disk cannot hold the records its manifest entry declares (a sparse
  file: a few KB of data declaring fifty million samples) is refused in one line before anything of that size is
  read or allocated;
- :func:`check_shard_file`: a shard is a regular file inside the folder, of the manifest's size and CRC32C;
- :class:`TargetsFile`: ``targets.npy`` checked as :func:`~fastdata.formats.targets.load_targets` checks it (size,
  CRC32C, header, shape, every label inside the class table) but streamed, then read a shard's labels at a time.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import google_crc32c
import numpy as np

from fastdata._util.fs import data_bytes, file_crc32c
from fastdata.formats.errors import CorruptRecordError
from fastdata.formats.files import open_regular, resolve_inside
from fastdata.formats.manifest import Manifest
from fastdata.formats.manifest_entries import ShardInfo
from fastdata.formats.packed import MIN_RECORD_BYTES

__all__ = ["TargetsFile", "check_shard_file", "sparse_shard"]

_MAX_HEADER = 1 << 16  # as load_targets: a 1-D .npy header is < 200 bytes
_CHUNK = 1 << 22  # bytes streamed at a time


def sparse_shard(root: Path, manifest: Manifest) -> str | None:
    """The first shard whose data cannot hold the records declared for it, or None.

    One line naming the first shard whose data on disk cannot hold the records the manifest declares for it
    (``MIN_RECORD_BYTES`` each), else None. Missing and non-regular files are left to the checks that name them.
    """
    for shard in manifest.shards:
        enough = shard.num_samples * MIN_RECORD_BYTES
        if not enough:
            continue
        try:
            found = data_bytes(resolve_inside(root, shard.path), enough)
        except (OSError, CorruptRecordError):
            continue
        if found < enough:
            return (
                f"{shard.path}: holds {found} bytes of data on disk, too few for the {shard.num_samples} records "
                "the manifest declares (a sparse or damaged file); refusing to read it"
            )
    return None


def check_shard_file(root: Path, shard: ShardInfo, problems: list[str]) -> bool:
    """Where, what and how big a shard file is, and its CRC32C; False when its records cannot be read safely."""
    try:
        fd, _ = open_regular(resolve_inside(root, shard.path), nbytes=shard.nbytes)
    except FileNotFoundError:
        problems.append(f"{shard.path}: missing")
        return False
    except CorruptRecordError as exc:
        problems.append(f"{shard.path}: {exc.reason}")
        return False
    actual = file_crc32c(fd)  # the descriptor that was checked, not the path again
    if actual != shard.crc32c:
        problems.append(f"{shard.path}: file CRC32C {actual} != {shard.crc32c} in the manifest")
    return True


class TargetsFile:
    """``targets.npy`` of a pack, checked whole in bounded memory, then read a slice at a time.

    Raises:
        FileNotFoundError: the file is missing.
        CorruptRecordError: what :func:`~fastdata.formats.targets.load_targets` refuses, with its messages.
    """

    def __init__(self, root: Path, manifest: Manifest) -> None:
        n, classes = manifest.num_samples, len(manifest.classes)
        self.path = path = resolve_inside(root, manifest.targets)
        self._fd, st = open_regular(path, nbytes=manifest.targets_nbytes)
        try:
            if st.st_size > _MAX_HEADER + 8 * n:
                raise CorruptRecordError(
                    path, None, f"is {st.st_size} bytes, more than the {_MAX_HEADER + 8 * n} it can hold"
                )
            if manifest.targets_crc32c is not None:
                crc = self._crc32c(st.st_size)
                if crc != manifest.targets_crc32c:
                    raise CorruptRecordError(
                        path, None, f"CRC32C {crc} does not match {manifest.targets_crc32c} in the manifest"
                    )
            self.dtype, self.offset = self._header(n)
            if st.st_size - self.offset != n * self.dtype.itemsize:
                raise CorruptRecordError(
                    path, None, f"is {st.st_size} bytes, not what its header declares (truncated?)"
                )
            self._check_range(n, classes)
        except BaseException:
            self.close()
            raise

    def _crc32c(self, size: int) -> str:
        crc, position = google_crc32c.Checksum(), 0
        while position < size:
            block = os.pread(self._fd, min(_CHUNK, size - position), position)
            if not block:
                break
            crc.update(block)
            position += len(block)
        return crc.hexdigest().decode()

    def _header(self, n: int) -> tuple[np.dtype, int]:
        f = io.BytesIO(os.pread(self._fd, _MAX_HEADER + 16, 0))
        try:
            version = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran_order, dtype = read(f, max_header_size=_MAX_HEADER)
        except (ValueError, SyntaxError, TypeError, OverflowError, MemoryError, RecursionError):
            raise CorruptRecordError(self.path, None, "is not a .npy file with a valid header") from None
        if dtype.kind not in "iu" or dtype.hasobject or shape != (n,) or fortran_order:
            shown = str(shape) if len(str(shape)) <= 40 else str(shape)[:37] + "..."
            raise CorruptRecordError(
                self.path,
                None,
                f"must hold {n} integer labels (shape ({n},)) but its header says dtype {dtype.str}, shape {shown}",
            )
        return dtype, f.tell()

    def _check_range(self, n: int, classes: int) -> None:
        step = _CHUNK // self.dtype.itemsize
        for start in range(0, n if classes else 0, step):
            labels = self.labels(start, min(n, start + step))
            bad = np.flatnonzero((labels < 0) | (labels >= classes))
            if len(bad):
                raise CorruptRecordError(
                    self.path, None, f"label of sample {start + int(bad[0])} is outside the {classes} classes"
                )

    def labels(self, start: int, stop: int) -> np.ndarray:
        """The int64 labels of samples ``[start, stop)``."""
        size = self.dtype.itemsize
        data = os.pread(self._fd, (stop - start) * size, self.offset + start * size)
        return np.frombuffer(data, self.dtype).astype(np.int64)

    def counts(self, classes: int) -> np.ndarray:
        """Samples per class (``classes`` of them)."""
        n = (os.fstat(self._fd).st_size - self.offset) // self.dtype.itemsize
        step = _CHUNK // self.dtype.itemsize
        total = np.zeros(classes, np.int64)
        for start in range(0, n, step):
            labels = self.labels(start, min(n, start + step))
            total += np.bincount(labels[labels >= 0], minlength=classes)[:classes]  # -1: an unlabelled sample
        return total

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> TargetsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
