"""One writer at a time: an exclusive lock on a pack's output folder.

``pack`` holds ``OUT/.fastdata.lock`` locked (``fcntl.flock``) for its whole run. The file
holds the holder's pid, host and start time as text, so a second writer is refused at once
with a message that names the holder. The kernel drops the lock when the holder exits, even
by ``kill -9``, so a stale lock file never blocks a later pack; the file is deleted when the
lock is released normally.

The lock keeps fastdata writers apart; it does not stop other programs (or readers) from
touching the folder. A reader asks whether a pack is writing a folder by taking a shared lock on the file
for a moment (:func:`fastdata.formats.unfinished.lock_holder`), so a writer that finds the file locked
retries for a while when only such probes hold it, and is refused only by another writer. It needs a local file system
with ``flock`` support (Linux, macOS); where ``fcntl`` is missing the folder is not locked and a warning says so.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from pathlib import Path
from types import TracebackType

from fastdata.formats.unfinished import LOCK_NAME, read_holder

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

__all__ = ["LOCK_NAME", "OutputLock", "OutputLockedError"]

_PROBE_WAIT_S = 2.0  # how long a writer waits for readers' momentary shared locks to go


class OutputLockedError(ValueError):
    """Another ``pack`` is writing to the output folder."""


class OutputLock:
    """Exclusive, non-blocking lock on a pack's output folder.

    Args:
        folder: the output folder (must exist).
        name: the lock file's name (``.range-00003.lock`` locks one range of a plan, see
            :mod:`fastdata.packing.ranges`).

    Example::

        with OutputLock(out):
            ...  # write shards, journal and manifest

    Raises:
        OutputLockedError: (on enter) another process holds the lock; the message names it.
    """

    def __init__(self, folder: str | os.PathLike, name: str = LOCK_NAME) -> None:
        self.folder = Path(folder)
        self.path = self.folder / name
        self.what = "output folder" if name == LOCK_NAME else f"{name} in output folder"
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock now or raise :class:`OutputLockedError` naming the holder."""
        if fcntl is None:  # pragma: no cover - Windows
            logger.warning("cannot lock %s on this platform: make sure no other pack writes to it", self.folder)
            return
        while self._fd is None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                _lock_exclusive(fd)
            except BlockingIOError:
                holder = read_holder(fd)
                os.close(fd)
                raise OutputLockedError(
                    f"{self.what} {str(self.folder)!r} is being written by another fastdata pack ({holder}): "
                    "wait for it to finish, or stop it and run your command with --resume or --overwrite"
                ) from None
            if not _same_file(fd, self.path):  # the holder deleted the file as we opened it: lock the new one
                os.close(fd)
                continue
            self._fd = fd
            try:
                os.ftruncate(fd, 0)
                os.write(fd, _holder_text().encode("utf-8"))
            except OSError:  # a full disk: the lock holds all the same, only its note is missing
                pass

    def release(self) -> None:
        """Delete the lock file and drop the lock (in that order, so no one can lock a deleted file)."""
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> OutputLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def _holder_text() -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S %z", time.localtime())
    return f"pid {os.getpid()} on {socket.gethostname()}, started {started}\n"


def _lock_exclusive(fd: int) -> None:
    """``flock(fd, LOCK_EX)`` without blocking on a writer.

    Shared locks (readers probing for a running pack) are
    waited out for up to :data:`_PROBE_WAIT_S`.

    Raises:
        BlockingIOError: another writer holds the lock.
    """
    deadline = time.monotonic() + _PROBE_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # granted: only shared holders, i.e. readers' probes
            except BlockingIOError:
                raise BlockingIOError("held by another writer") from None
            fcntl.flock(fd, fcntl.LOCK_UN)
            if time.monotonic() > deadline:
                raise
            time.sleep(0.005)


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (own.st_dev, own.st_ino) == (st.st_dev, st.st_ino)
