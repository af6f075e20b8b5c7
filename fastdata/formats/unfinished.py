"""A folder that is not (yet) a finished pack: one that ``fastdata pack`` is writing, or one it left unfinished.

A pack is finished once ``manifest.json`` is there (written last). Before that, its output folder holds what the
pack writes as it goes: the lock ``OUT/.fastdata.lock`` (held with ``flock`` by the writing process and naming
it: pid, host, start), the resume journal ``OUT/.pack-journal.jsonl``, range records and staging folders
(``.range-RRRRR.*``) and part files (``part-IIIII-of-NNNNN.json``). Shards are there too, and a reader that took
the folder for third-party TFRecords would open some of them as a dataset without labels or classes.
:func:`unfinished_pack` says which of these a folder holds; :func:`refuse_unfinished` turns that into one
:class:`UnfinishedPackError` naming the writer.

Whether the lock is held is asked with a shared ``flock`` taken and dropped at once (nothing is written); the
writer (:class:`fastdata.packing.lock.OutputLock`) retries when only such probes hold the file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

from fastdata.formats.manifest import MANIFEST_NAME

__all__ = [
    "JOURNAL_NAME",
    "LOCK_NAME",
    "UnfinishedPackError",
    "lock_holder",
    "read_holder",
    "refuse_unfinished",
    "unfinished_pack",
]

LOCK_NAME = ".fastdata.lock"
JOURNAL_NAME = ".pack-journal.jsonl"
_PIECES = re.compile(r"\.range-\d+\.(json|tmp|lock)|part-\d+-of-\d+\.json")  # the range engine's records and parts


class UnfinishedPackError(ValueError):
    """The folder holds a pack that is still being written, or was interrupted: no ``manifest.json`` yet."""


def read_holder(fd: int) -> str:
    """The holder a lock file names (``pid 12 on host, started 2025-01-01 12:00:00 +0000``), printable."""
    try:
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text or "holder not known yet"


def lock_holder(folder: str | os.PathLike) -> str | None:
    """Who holds ``folder/.fastdata.lock`` (as :func:`read_holder` says), or None when no process holds it."""
    if fcntl is None:  # pragma: no cover - Windows: the lock is not taken there either
        return None
    try:
        fd = os.open(Path(folder) / LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return read_holder(fd)
        except OSError:  # no flock here (some network file systems): not a pack this process can see writing
            return None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def unfinished_pack(folder: str | os.PathLike) -> str | None:
    """What says that ``folder`` holds an unfinished pack, in words; None otherwise.

    What says that ``folder`` is a pack being written or left unfinished, in words; None for a finished pack
    (``manifest.json`` there) and for a folder no pack wrote into.
    """
    path = Path(folder)
    if not path.is_dir() or (path / MANIFEST_NAME).is_file():
        return None
    holder = lock_holder(path)
    try:
        pieces = sorted(e.name for e in os.scandir(path) if e.name == JOURNAL_NAME or _PIECES.fullmatch(e.name))
    except OSError:
        pieces = []
    if holder is None and not pieces:
        return None
    found = ", ".join(pieces[:3]) + (f" and {len(pieces) - 3} more" if len(pieces) > 3 else "")
    if holder is not None:
        return f"a fastdata pack is writing it ({holder}, holding {LOCK_NAME}" + (f"; {found})" if found else ")")
    return f"it holds an interrupted fastdata pack ({found}; no process holds {LOCK_NAME})"


def refuse_unfinished(folder: str | os.PathLike) -> None:
    """Refuse to read a folder that holds a pack still without its manifest.

    Refuse to read ``folder``, found without ``manifest.json``, as anything but a pack while it holds one that
    has no ``manifest.json`` yet; nothing happens for a folder no pack wrote into.

    Raises:
        UnfinishedPackError: naming the writer (pid, host, start) or the pieces an interrupted pack left; or, when
            the pack wrote its manifest in the meantime, saying to open the folder again.
    """
    found = unfinished_pack(folder)
    if found is None:
        if Path(folder).is_dir() and (Path(folder) / MANIFEST_NAME).is_file():
            raise UnfinishedPackError(f"{str(folder)!r}: its pack finished while it was being opened: open it again")
        return
    if found.startswith("a fastdata pack"):
        raise UnfinishedPackError(
            f"{str(folder)!r} is not a finished pack yet: {found}: open it once the pack has written {MANIFEST_NAME}"
        )
    raise UnfinishedPackError(
        f"{str(folder)!r} is not a finished pack: {found}: finish it with `fastdata pack SRC "
        f"{folder} --resume` (the same SRC and options), or start over with --overwrite"
    )
