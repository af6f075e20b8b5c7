"""Per-file ``flock`` locks that every process on a node shares, safe across ``fork``.

A lock is an open file description with a ``flock`` on it: shared (``LOCK_SH``) for readers of a
cached shard, exclusive (``LOCK_EX``) for the one process downloading or evicting it. Lock files
are never deleted (deleting them would let two processes lock two different files of one name).

A forked child inherits its parent's descriptors, and with them the parent's locks; the child
closes them at once (without unlocking, which would release the parent's lock) and a lock object
only ever unlocks in the process that took it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from pathlib import Path

_OPEN: set[int] = set()  # lock descriptors this process opened
_OPEN_GUARD = threading.Lock()


def _close_inherited() -> None:
    for fd in list(_OPEN):
        with contextlib.suppress(OSError):
            os.close(fd)
    _OPEN.clear()


def _after_fork_in_child() -> None:
    _OPEN_GUARD.release()
    _close_inherited()


os.register_at_fork(
    before=_OPEN_GUARD.acquire, after_in_parent=_OPEN_GUARD.release, after_in_child=_after_fork_in_child
)


class FileLock:
    """One ``flock`` on ``path`` (created if missing); take it with :meth:`acquire`, drop it with :meth:`release`."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        self._pid = os.getpid()
        self.mode = 0
        with _OPEN_GUARD:
            _OPEN.add(self._fd)

    def acquire(self, exclusive: bool, *, blocking: bool = True) -> bool:
        """Take the lock (a held lock of the other kind is dropped first); False when ``blocking=False`` and busy."""
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        if self.mode and self.mode != mode:
            self._unlock()
        try:
            fcntl.flock(self._fd, mode | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            return False
        self.mode = mode
        return True

    def _unlock(self) -> None:
        if self.mode and self._pid == os.getpid():
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self.mode = 0

    def release(self) -> None:
        """Unlock and close (only in the process that opened it; a forked copy just forgets it)."""
        if self._fd < 0:
            return
        if self._pid == os.getpid():
            self._unlock()
            with _OPEN_GUARD:
                _OPEN.discard(self._fd)
            os.close(self._fd)
        self._fd = -1

    def __enter__(self) -> FileLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        with contextlib.suppress(OSError):
            self.release()
