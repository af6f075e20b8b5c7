"""``targets.npy``: every sample's label in dataset order, written by the packer and read without trust.

The file is a plain ``.npy`` (int64, one dimension) that ``np.load`` reads. fastdata reads it
through :func:`load_targets` (into memory: ``fastdata verify``) or :func:`map_targets` (a dataset)
instead: the size and CRC32C the manifest records for it are checked, the header is parsed without
allocating anything it declares, its shape must be the manifest's ``num_samples`` and every label
must index the class table.

A dataset checks all of it in one bounded pass (a few MB at a time) and keeps it open
(:class:`MappedTargets`): a reader takes the labels of one shard at a time with one ``pread``
(:meth:`MappedTargets.read`), so a process holds only the labels of the shards it is reading, whatever the number of
samples; the whole array is mapped read-only only where someone asks for it (``ShardDataset.targets``: a sampler),
and then shares the page cache's pages instead of holding a copy of 8 bytes a sample. Pickled, it is its path,
identity and layout, opened again only if the file is still the one checked.
"""

from __future__ import annotations

import io
import mmap
import os
import weakref
from pathlib import Path
from typing import Any

import google_crc32c
import numpy as np

from fastdata.formats.base import CorruptRecordError
from fastdata.formats.errors import DatasetChangedError
from fastdata.formats.files import FileIdentity, check_crc32c, open_regular, read_regular
from fastdata.formats.manifest import Manifest

__all__ = ["MappedTargets", "decode_targets", "encode_targets", "load_targets", "map_targets"]

_CHUNK = 1 << 22  # bytes checked at a time (a multiple of every integer itemsize)

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
    dtype, offset = _header(data, path=path, num_samples=num_samples, file_size=len(data))
    labels = np.frombuffer(data, dtype=dtype, count=num_samples, offset=offset).astype(np.int64)
    bad = _first_outside(labels, num_classes)
    if bad is not None:
        raise CorruptRecordError(path, None, f"label of sample {bad} is outside the {num_classes} classes")
    return labels


def _header(head: bytes, *, path: str | os.PathLike, num_samples: int, file_size: int) -> tuple[np.dtype, int]:
    """The dtype and body offset of a ``.npy`` file whose first bytes are ``head`` (the file is ``file_size`` bytes).

    Raises:
        CorruptRecordError: see :func:`decode_targets`.
    """
    f = io.BytesIO(head)
    try:
        version = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran_order, dtype = read_header(f, max_header_size=_MAX_HEADER)
    except (ValueError, SyntaxError, TypeError, OverflowError, MemoryError, RecursionError):
        raise CorruptRecordError(path, None, "is not a .npy file with a valid header") from None
    if dtype.kind not in "iu" or dtype.hasobject or shape != (num_samples,) or fortran_order:
        raise CorruptRecordError(
            path,
            None,
            f"must hold {num_samples} integer labels (shape ({num_samples},)) but its header says "
            f"dtype {dtype.str}, shape {_short(shape)}",
        )
    offset = f.tell()
    if file_size - offset != num_samples * dtype.itemsize:
        raise CorruptRecordError(path, None, f"is {file_size} bytes, not what its header declares (truncated?)")
    return dtype, offset


def _first_outside(labels: np.ndarray, num_classes: int) -> int | None:
    """The position of the first label outside ``[0, num_classes)`` (None: all inside, or no class table)."""
    if not len(labels) or not num_classes or (labels.min() >= 0 and labels.max() < num_classes):
        return None
    return int(np.flatnonzero((labels < 0) | (labels >= num_classes))[0])


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


def map_targets(manifest: Manifest, path: Path) -> MappedTargets:
    """Check the labels file of a packed dataset and map it read-only.

    Check the labels file of a packed dataset as :func:`load_targets` does, in one pass of bounded memory, and
    map it read-only (``path``: already resolved inside the dataset folder).

    Raises:
        FileNotFoundError: the file is missing.
        CorruptRecordError: see :func:`load_targets`; also a file that changed while it was checked.
    """
    n = manifest.num_samples
    fd, st = open_regular(path, nbytes=manifest.targets_nbytes)
    try:
        if st.st_size > _MAX_HEADER + 8 * n:
            raise CorruptRecordError(
                path, None, f"is {st.st_size} bytes, more than the {_MAX_HEADER + 8 * n} it can hold"
            )
        head = os.pread(fd, min(st.st_size, _MAX_HEADER + 16), 0)
        try:
            layout: tuple[np.dtype, int] | CorruptRecordError = _header(
                head, path=path, num_samples=n, file_size=st.st_size
            )
        except CorruptRecordError as exc:
            layout = exc  # reported after the checksum, as load_targets does
        checksum, bad = _scan(
            fd, st.st_size, None if isinstance(layout, CorruptRecordError) else layout, len(manifest.classes), path
        )
        if manifest.targets_crc32c is not None and checksum != manifest.targets_crc32c:
            raise CorruptRecordError(
                path, None, f"CRC32C {checksum} does not match {manifest.targets_crc32c} in the manifest"
            )
        if isinstance(layout, CorruptRecordError):
            raise layout
        if bad is not None:
            raise CorruptRecordError(
                path, None, f"label of sample {bad} is outside the {len(manifest.classes)} classes"
            )
        if FileIdentity.of(os.fstat(fd)) != FileIdentity.of(st):
            raise CorruptRecordError(path, None, "changed while it was being checked")
        mapped = MappedTargets(str(path), FileIdentity.of(st), layout[0].str, layout[1], n)
    except BaseException:
        os.close(fd)
        raise
    mapped._keep(fd)  # the checked file stays open: a re-pack that replaces it does not change what this reads
    return mapped


def _scan(
    fd: int, size: int, layout: tuple[np.dtype, int] | None, num_classes: int, path: Path
) -> tuple[str, int | None]:
    """The file's CRC32C (hex) and, given its layout, the first label outside the classes: read a chunk at a time.

    Raises:
        CorruptRecordError: the file changed size while it was read.
    """
    checksum = google_crc32c.Checksum()
    dtype, first = layout if layout is not None else (None, 0)
    position = first
    if position:
        checksum.update(os.pread(fd, position, 0))
    bad = None
    while True:
        chunk = os.pread(fd, min(_CHUNK, size - position + 1), position)  # one byte more at the end: growth is noticed
        if not chunk:
            break
        checksum.update(chunk)
        if dtype is not None and bad is None and position + len(chunk) <= size:
            found = _first_outside(np.frombuffer(chunk, dtype=dtype), num_classes)
            if found is not None:
                bad = (position - first) // dtype.itemsize + found
        position += len(chunk)
    if position != size:
        raise CorruptRecordError(path, None, f"changed size while being read ({size} bytes, then {position})")
    return checksum.hexdigest().decode(), bad


def _mapped(fd: int, targets: MappedTargets) -> np.ndarray:
    """The labels of the checked file open at ``fd``, as a read-only view of its pages."""
    if targets.count == 0:
        empty = np.zeros(0, dtype=targets.dtype)
        empty.flags.writeable = False
        return empty
    pages = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    return np.frombuffer(pages, dtype=np.dtype(targets.dtype), count=targets.count, offset=targets.offset)


class MappedTargets:
    """A checked ``targets.npy``, kept open; built by :func:`map_targets`.

    :meth:`read` takes a range of labels with one ``pread`` (what a reader does once per shard it opens); :attr:`array`
    maps the whole file read-only, once, where it is asked for. Pickled, it is its path, identity, dtype, offset and
    count (a few hundred bytes whatever the number of samples); unpickling opens the file again if it is still the
    file that was checked (same device, inode, size and modification time), else :meth:`read` and :attr:`array`
    raise :class:`DatasetChangedError` (so a DataLoader worker reports it on its first read instead of dying while it
    unpickles its dataset). The descriptor is closed when the object is collected.

    Attributes:
        path: the file, resolved.
        identity: the file as it was checked.
        dtype: the stored dtype (``"<i8"`` as the packer writes it).
        offset: where the labels start.
        count: how many labels.
    """

    def __init__(self, path: str, identity: FileIdentity, dtype: str, offset: int, count: int) -> None:
        self.path, self.identity, self.dtype, self.offset, self.count = path, identity, dtype, offset, count
        self._reset()

    def _reset(self) -> None:
        self._fd: int | None = None
        self._array: np.ndarray | None = None
        self._error: DatasetChangedError | None = None
        self._closer: weakref.finalize | None = None

    def _keep(self, fd: int) -> None:
        self._fd = fd
        self._closer = weakref.finalize(self, os.close, fd)

    def _checked_fd(self) -> int:
        if self._error is not None:
            raise DatasetChangedError(str(self._error))
        assert self._fd is not None, "a MappedTargets is used before map_targets() kept its descriptor"
        return self._fd

    def read(self, start: int, stop: int) -> np.ndarray:
        """Labels ``start`` to ``stop - 1`` as a new int64 array (one ``pread``; nothing mapped, nothing kept).

        Raises:
            DatasetChangedError: unpickled after the file was replaced or changed.
            CorruptRecordError: the file is shorter than when it was checked.
        """
        fd = self._checked_fd()
        start, stop = max(0, int(start)), min(self.count, int(stop))
        if stop <= start:
            return np.zeros(0, dtype=np.int64)
        itemsize = np.dtype(self.dtype).itemsize
        data = os.pread(fd, (stop - start) * itemsize, self.offset + start * itemsize)
        if len(data) != (stop - start) * itemsize:
            raise CorruptRecordError(self.path, None, "is shorter than when this dataset checked it (truncated?)")
        return np.frombuffer(data, dtype=self.dtype).astype(np.int64)

    @property
    def array(self) -> np.ndarray:
        """The labels, read-only, in the stored dtype (the file mapped on first use; its pages are the page cache's).

        Raises:
            DatasetChangedError: unpickled after the file was replaced or changed.
        """
        if self._array is None:
            self._array = _mapped(self._checked_fd(), self)
        return self._array

    def __getstate__(self) -> dict[str, Any]:
        return {k: self.__dict__[k] for k in ("path", "identity", "dtype", "offset", "count")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()
        try:
            fd, st = open_regular(self.path)
        except (OSError, CorruptRecordError):
            self._error = DatasetChangedError(
                f"{self.path} is gone or unreadable since this dataset opened it "
                "(re-packed?): create a new ShardDataset (and DataLoader)"
            )
            return
        if FileIdentity.of(st) != self.identity:
            os.close(fd)
            self._error = DatasetChangedError(
                f"{self.path} was replaced or changed after this dataset opened it "
                "(re-packed?): create a new ShardDataset (and DataLoader)"
            )
            return
        self._keep(fd)


def _short(shape: tuple) -> str:
    text = str(shape)
    return text if len(text) <= 40 else text[:37] + "..."
