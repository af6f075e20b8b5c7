"""Small filesystem helpers for atomic, durable writes."""

from __future__ import annotations

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
    """fsync ``tmp``, rename it to ``final`` atomically and flush the directory entry."""
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
