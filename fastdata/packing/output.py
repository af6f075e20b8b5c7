"""A pack's output folder: created, checked, and cleaned of fastdata's own files only.

fastdata never deletes or replaces a file it did not write. Its own files are recognised by
name, and only in a folder that holds a ``manifest.json`` fastdata wrote (:func:`is_fastdata_manifest`:
its ``created_by``, ``format``, ``version`` and ``shards``) or a resume journal:
``shard-NNNNN.tfrecord``, ``shard-NNNNN.idx``, ``shard-NNNNN.lmdb``, ``shard-NNNNN.loc``, ``targets.npy``,
``transcoded.bits``, ``manifest.json``, ``.pack-journal.jsonl``, a range plan's ``shard-RRRRR-JJJJJ.*``, range records
``.range-RRRRR.json`` and part manifests ``part-IIIII-of-NNNNN.json``, the ``.tmp`` pieces of each, and
a range task's staging folder ``.range-RRRRR.tmp/`` (plus the lock files ``.fastdata.lock`` and
``.range-RRRRR.lock`` while a pack runs). A non-empty folder without a manifest or journal
is refused unless ``overwrite`` is set, and even then a file there with one of those names is
refused rather than replaced, because fastdata did not write it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path

from fastdata._util.fs import tmp_path
from fastdata.formats import FORMATS
from fastdata.formats.errors import CorruptRecordError
from fastdata.formats.files import read_regular
from fastdata.formats.manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES
from fastdata.formats.unfinished import JOURNAL_NAME
from fastdata.packing.journal import PackJournal
from fastdata.packing.lock import LOCK_NAME
from fastdata.packing.scan import printable_name

logger = logging.getLogger(__name__)

RANGE_STAGING = re.compile(r"\.range-\d{5,}\.tmp")  # a range task's unpublished shards (a folder)
RANGE_LOCK = re.compile(r"\.range-\d{5,}\.lock")
RANGE_RECORD = re.compile(r"\.range-\d{5,}\.json")  # a range task's published record (ranges.record_name)
OWN_NAME = re.compile(
    r"(?:shard-\d{5,}(?:-\d{5,})?\.(?:tfrecord|idx|lmdb|loc)|targets(?:-\d+)?\.npy|transcoded(?:-\d+)?\.bits"
    r"|manifest\.json|\.pack-journal\.jsonl|\.range-\d{5,}\.json|part-\d{5,}-of-\d{5,}\.json)(?:\.tmp)?"
)


def is_own_name(name: str) -> bool:
    """True when ``name`` is one that a pack writes (shards, indexes, targets, manifest, journal, their ``.tmp``)."""
    return OWN_NAME.fullmatch(name) is not None


def is_fastdata_manifest(path: Path) -> bool:
    """True when ``path`` is a ``manifest.json`` that fastdata wrote.

    A regular file of at most ``MAX_MANIFEST_BYTES`` holding a
    JSON object whose ``created_by`` is ``"fastdata ..."``, with a known ``format``, an integer ``version`` and a
    list of ``shards``. Anyone's ``manifest.json`` (a web app's, another tool's) is not, and is never deleted.
    """
    try:
        data = read_regular(path, max_bytes=MAX_MANIFEST_BYTES)
        manifest = json.loads(data.decode("utf-8"))
    except (OSError, CorruptRecordError, UnicodeDecodeError, ValueError, RecursionError):
        return False
    return (
        isinstance(manifest, dict)
        and isinstance(manifest.get("created_by"), str)
        and manifest["created_by"].startswith("fastdata ")
        and manifest.get("format") in FORMATS
        and type(manifest.get("version")) is int
        and isinstance(manifest.get("shards"), list)
    )


def holds_pack(out: Path) -> bool:
    """True when ``out`` holds a fastdata dataset or an unfinished pack (journal, range records or parts)."""
    if is_fastdata_manifest(out / MANIFEST_NAME) or PackJournal(out).exists():
        return True
    with os.scandir(out) as entries:
        return any(OWN_NAME.fullmatch(e.name) and e.name.endswith(".json") and e.name != MANIFEST_NAME for e in entries)


def create_output(out: Path) -> Path:
    """Create ``out`` if missing and check that it is a writable folder.

    Raises:
        FileExistsError: ``out`` is a file.
        PermissionError: ``out`` cannot be created or is not writable.
    """
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"output {str(out)!r} is a file: pass a folder (it is created if missing)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except PermissionError:
        raise PermissionError(f"cannot create output folder {str(out)!r}: choose a writable location") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise PermissionError(
            f"output folder {str(out)!r} is not writable: choose a writable location or fix its permissions"
        )
    return out


def prepare_output(out: Path, *, resume: bool, overwrite: bool) -> None:
    """Check what ``out`` holds against ``resume``/``overwrite`` and clear what must go; call with the lock held.

    A folder with a fastdata dataset (or an unfinished pack) needs ``resume`` or ``overwrite``;
    ``overwrite`` deletes fastdata's own files there, and every run deletes the ``.tmp`` pieces
    an interrupted run left. A folder without one must be empty unless ``overwrite`` is set; a journal's unpublished
    first line (a run killed as it began) is removed there too.

    Raises:
        FileExistsError: the folder holds a dataset and neither flag is set, holds files that
            fastdata did not write and ``overwrite`` is not set, or holds a file with a name
            fastdata would write although fastdata did not write it.
    """
    if holds_pack(out):
        if not (resume or overwrite):
            raise FileExistsError(
                f"{str(out)!r} already holds a dataset (or an interrupted pack): "
                "pass --resume to finish it, --append to add SRC's samples to it, or --overwrite to replace it"
            )
        remove_own_files(out, only_tmp=not overwrite)
        return
    foreign = sorted(
        printable_name(e.name) for e in os.scandir(out) if e.name != LOCK_NAME and not RANGE_LOCK.fullmatch(e.name)
    )
    clashing = [name for name in foreign if is_own_name(name)]
    if clashing == [tmp_path(JOURNAL_NAME).name] and _unpublished_journal(out / clashing[0]):
        (out / clashing[0]).unlink(missing_ok=True)  # a run killed as it began: it wrote nothing else
        foreign, clashing = [name for name in foreign if name != clashing[0]], []
    if clashing:
        raise FileExistsError(
            f"output folder {str(out)!r} holds {clashing[0]!r}{_more(clashing)} but no fastdata manifest.json "
            "or journal, so fastdata did not write it; refusing to replace it: move it away or choose another folder"
        )
    if foreign and not overwrite:
        raise FileExistsError(
            f"output folder {str(out)!r} is not empty ({foreign[0]!r}{_more(foreign)}) and holds no fastdata dataset: "
            "choose an empty or new folder, or pass --overwrite to pack into it anyway "
            "(files that fastdata did not write are never removed)"
        )
    if foreign:
        logger.info("packing into %s next to %d file(s) that fastdata leaves alone", out, len(foreign))


def _unpublished_journal(piece: Path) -> bool:
    """True when ``piece`` reads as the start of a journal's first line (empty, or one JSON line begun).

    Every pack writes its journal's first line before anything else; a run killed while writing it leaves only this
    piece, which the rerun removes. A file of that name with other content is left alone (and refused).
    """
    try:
        data = read_regular(piece, max_bytes=1 << 20)
    except (OSError, CorruptRecordError):
        return False
    return not data or (data.startswith(b"{") and b"\n" not in data[:-1])


def remove_own_files(out: Path, *, only_tmp: bool = False) -> list[str]:
    """Delete the files a pack writes (see :data:`OWN_NAME`) from ``out``, and nothing else.

    Args:
        out: a folder that holds a fastdata manifest or journal.
        only_tmp: delete only the ``.tmp`` pieces (what an interrupted run was writing).

    Returns:
        The names deleted.
    """
    removed = []
    with os.scandir(out) as entries:
        staging = [e.path for e in entries if RANGE_STAGING.fullmatch(e.name) and e.is_dir(follow_symlinks=False)]
    for folder in staging:
        shutil.rmtree(folder, ignore_errors=True)
    with os.scandir(out) as entries:
        names = sorted(e.name for e in entries if e.is_file(follow_symlinks=False) or e.is_symlink())
    names.sort(key=lambda name: name != MANIFEST_NAME)  # the manifest first: never one that names deleted shards
    for name in names:
        if is_own_name(name) and (name.endswith(".tmp") or not only_tmp):
            (out / name).unlink(missing_ok=True)
            removed.append(name)
    return removed


def _more(names: list[str]) -> str:
    return f" and {len(names) - 1} more" if len(names) > 1 else ""
