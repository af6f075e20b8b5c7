"""Small filesystem helpers: atomic, durable writes; a file's CRC32C; how much of a (sparse) file holds data."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import google_crc32c

TMP_SUFFIX = ".tmp"


def fsync_dir(path: str | os.PathLike) -> None:
    """Flush a directory entry (a rename inside it) to disk; a no-op where unsupported."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def tmp_path(path: str | os.PathLike) -> Path:
    """The temporary name a file is written under before it is renamed into place."""
    path = Path(path)
    return path.with_name(path.name + TMP_SUFFIX)


def publish(tmp: str | os.PathLike, final: str | os.PathLike) -> None:
    """Fsync ``tmp``, rename it to ``final`` atomically and flush the directory entry."""
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, final)
    fsync_dir(Path(final).parent)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see either the old file or the whole new one."""
    tmp = tmp_path(path)
    with open(tmp, "wb") as f:
        f.write(data)
    publish(tmp, path)


def file_crc32c(path: str | os.PathLike | int, chunk: int = 1 << 22) -> str:
    """CRC32C of a whole file as 8 hex digits; ``path`` may be an open descriptor (it is read and closed)."""
    crc = google_crc32c.Checksum()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            crc.update(block)
    return crc.hexdigest().decode()


def data_bytes(path: str | os.PathLike, enough: int) -> int:
    """How many bytes of ``path`` hold data rather than holes, counted up to ``enough``.

    How many bytes of ``path`` hold data rather than holes (a sparse file's unwritten ranges), counted until
    ``enough`` are found (so a result of at least ``enough`` means "enough"; a smaller one is exact).

    ``st_blocks`` answers at once when the blocks on disk already hold ``enough``; else the file's data ranges are
    walked with ``SEEK_DATA``/``SEEK_HOLE``, which a compressing file system (ZFS, btrfs) reports as data even where
    its blocks are fewer. Where holes cannot be asked about (an old kernel, some FUSE mounts) every byte counts.

    Raises:
        OSError: the file cannot be opened.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if st.st_blocks * 512 >= enough:
            return st.st_blocks * 512
        if not hasattr(os, "SEEK_DATA"):  # pragma: no cover - not Linux, BSD or macOS
            return st.st_size
        found, position = 0, 0
        while position < st.st_size and found < enough:
            try:
                start = os.lseek(fd, position, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # nothing but holes from here to the end
                    break
                return st.st_size  # holes cannot be asked about here
            position = os.lseek(fd, start, os.SEEK_HOLE)
            found += position - start
        return found
    finally:
        os.close(fd)
