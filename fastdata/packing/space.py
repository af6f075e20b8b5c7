"""Full disks: "no space left" told apart from damage, with what to do next.

A write that fails with ``ENOSPC`` (or ``EDQUOT``) means the disk is full. LMDB does not pass
the errno on: a page write that fails for lack of space surfaces as ``lmdb.Error``
("Input/output error", or a map-full error), so an LMDB error counts as "no space" when the
output's file system has less free space than the shard being written needed. Either way the
pack stops with :class:`OutOfSpaceError`: the complete shards stay on disk and in the journal,
the unfinished one is removed, and ``--resume`` (after freeing space) finishes the pack with
the same bytes an uninterrupted run writes. The command line exits with :data:`EXIT_NO_SPACE`.
"""

from __future__ import annotations

import errno
import os

import lmdb

EXIT_NO_SPACE = 3
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_SLACK = 1 << 20  # bytes of free space below which a failed LMDB write is taken for a full disk


class OutOfSpaceError(OSError):
    """The output folder's file system is full; what was packed is kept and ``--resume`` finishes the pack."""


def free_bytes(folder: str | os.PathLike) -> int:
    """Bytes an unprivileged writer may still use on the file system that holds ``folder``."""
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize


def is_out_of_space(exc: BaseException, folder: str | os.PathLike, pending: int = 0) -> bool:
    """True when ``exc``, raised while writing into ``folder``, means that its disk is full.

    Args:
        exc: the exception (its ``__cause__``/``__context__`` chain is searched too).
        folder: the folder that was being written.
        pending: bytes of the shard being written when it failed (an LMDB error with at
            least this much free space, plus 1 MiB, is not a full disk).

    Returns:
        Whether to report the failure as "no space left".
    """
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, OutOfSpaceError):
            return True
        if isinstance(link, OSError) and link.errno in NO_SPACE_ERRNOS:
            return True
        if isinstance(link, lmdb.Error):
            try:
                return free_bytes(folder) < pending + _SLACK
            except OSError:
                return False
        link = link.__cause__ or link.__context__
    return False


def out_of_space_error(folder: str | os.PathLike, done: int, total: int) -> OutOfSpaceError:
    """The error to raise when packing into ``folder`` ran out of space after ``done`` of ``total`` images."""
    return OutOfSpaceError(
        f"no space left on the device that holds {str(folder)!r}: nothing was lost ({done} of {total} source "
        "images are in complete shards, which are kept; only the unfinished shard was removed). "
        "Free some space, then run the same command with --resume to finish"
    )
