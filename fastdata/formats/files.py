"""Opening the files a manifest names without trusting them.

A packed dataset may come from anywhere, so every file it names is checked before a byte of it is
read or mapped: the path, symlinks resolved, must stay inside the dataset folder; the file must be a
regular file (a FIFO would block, ``/dev/zero`` never ends) of the size the manifest says (a
truncated LMDB file would be mapped and kill the process with SIGBUS); reads are bounded by that
size. Checks run on the open descriptor (``fstat``), so the file checked is the file read. Error
messages name the file and the problem, never its contents.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import google_crc32c

from fastdata.formats.errors import CorruptRecordError

__all__ = [
    "FileIdentity",
    "check_crc32c",
    "crc32c_hex",
    "inside",
    "open_regular",
    "read_regular",
    "resolve_inside",
    "stat_regular",
]

_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)  # a FIFO opens without blocking


@dataclass(frozen=True)
class FileIdentity:
    """Which file a path named when it was checked: device, inode, size and modification time.

    A file replaced by a rename (how ``fastdata pack`` publishes files) gets another inode, so two
    identities differ whenever the file at a path was replaced or changed in between.
    """

    device: int
    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileIdentity:
        """The identity of a ``stat``/``fstat`` result."""
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def resolve_inside(root: str | os.PathLike, rel: str) -> Path:
    """``root / rel`` with every symlink resolved; it must stay inside ``root`` (itself resolved).

    The file need not exist (a missing file is reported where it is opened).

    Raises:
        CorruptRecordError: the path leads outside the dataset folder (``..``, an absolute path or
            a symlink to elsewhere); nothing is read from it.
    """
    base = Path(root).resolve()
    path = (base / rel).resolve()
    if path != base and base not in path.parents:
        raise CorruptRecordError(
            base / rel,
            None,
            "leads outside the dataset folder (a symlink or an absolute path?); refusing to read it",
            hint="copy the real file into the dataset folder",
        )
    return path


def inside(root: str | os.PathLike, rel: str) -> Path:
    """:func:`resolve_inside` at the cost of one ``lstat`` for a plain file name.

    :func:`resolve_inside` at the cost of one ``lstat`` for a plain file name that is no symlink (what the packer
    writes): ``root / rel`` as it is; anything else (a sub-folder, a symlink) resolved and checked.

    Raises:
        CorruptRecordError: the path leads outside the dataset folder.
    """
    if "/" in rel or rel in ("", ".", ".."):
        return resolve_inside(root, rel)
    path = Path(root) / rel
    try:
        if not stat.S_ISLNK(os.lstat(path).st_mode):
            return path
    except FileNotFoundError:
        return path  # reported where it is opened
    return resolve_inside(root, rel)


def _check_stat(st: os.stat_result, path: str | os.PathLike, nbytes: int | None) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise CorruptRecordError(path, None, "is not a regular file (a FIFO, device or folder?); refusing to read it")
    if nbytes is not None and st.st_size != nbytes:
        raise CorruptRecordError(
            path, None, f"is {st.st_size} bytes but the manifest says {nbytes} (truncated, extended or replaced)"
        )


def stat_regular(path: str | os.PathLike, *, nbytes: int | None = None) -> os.stat_result:
    """``os.stat(path)``, checked: a regular file of ``nbytes`` bytes (when given).

    Raises:
        FileNotFoundError: no file at ``path``.
        CorruptRecordError: not a regular file, or of another size.
    """
    st = os.stat(path)
    _check_stat(st, path, nbytes)
    return st


def open_regular(path: str | os.PathLike, *, nbytes: int | None = None) -> tuple[int, os.stat_result]:
    """Open ``path`` read-only and check the open file: regular, ``nbytes`` bytes (when given).

    Returns:
        The file descriptor (the caller closes it) and its ``fstat``.

    Raises:
        FileNotFoundError: no file at ``path``.
        CorruptRecordError: not a regular file, or of another size; the descriptor is closed.
    """
    fd = os.open(path, _OPEN_FLAGS)
    try:
        st = os.fstat(fd)
        _check_stat(st, path, nbytes)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_regular(path: str | os.PathLike, *, max_bytes: int, nbytes: int | None = None) -> bytes:
    """The whole of a regular file of at most ``max_bytes`` bytes (exactly ``nbytes`` when given).

    Raises:
        FileNotFoundError: no file at ``path``.
        CorruptRecordError: not a regular file, of another size, larger than ``max_bytes``, or it
            changed size while being read.
    """
    fd, st = open_regular(path, nbytes=nbytes)
    try:
        if st.st_size > max_bytes:
            raise CorruptRecordError(path, None, f"is {st.st_size} bytes, more than the {max_bytes} it can hold")
        chunks, left = [], st.st_size + 1  # one byte more: a file that grew is noticed, never read on
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) != st.st_size:
        raise CorruptRecordError(path, None, f"changed size while being read ({st.st_size} bytes, then {len(data)})")
    return data


def crc32c_hex(data: bytes | memoryview) -> str:
    """CRC32C of ``data`` as 8 hex digits (how the manifest spells checksums)."""
    return f"{google_crc32c.value(bytes(data)):08x}"


def check_crc32c(data: bytes, expected: str | None, path: str | os.PathLike) -> None:
    """Compare the CRC32C of a file's bytes with the manifest's (no-op when it names none).

    Raises:
        CorruptRecordError: the checksums differ.
    """
    if expected is not None and crc32c_hex(data) != expected:
        raise CorruptRecordError(path, None, f"CRC32C {crc32c_hex(data)} does not match {expected} in the manifest")
