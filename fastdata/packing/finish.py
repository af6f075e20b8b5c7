"""The end of every pack: labels and manifest written (manifest last) from the finished shards' entries."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from fastdata import __version__
from fastdata._util.fs import atomic_write_bytes
from fastdata._util.text import escaped
from fastdata.formats.files import crc32c_hex
from fastdata.formats.manifest import Manifest
from fastdata.formats.manifest_entries import SkippedFile
from fastdata.formats.targets import encode_targets
from fastdata.packing.journal import JournalEntry, PackJournal
from fastdata.packing.transcode import to_ranges

__all__ = ["TARGETS_NAME", "NothingPackedError", "finalize", "transcoded_ranges"]

logger = logging.getLogger(__name__)

TARGETS_NAME = "targets.npy"


class NothingPackedError(ValueError):
    """Every source image was skipped and ``allow_empty`` was not set.

    Attributes:
        skipped: every file, with the reason it was skipped.
    """

    def __init__(self, skipped: list[SkippedFile] | str) -> None:
        if isinstance(skipped, str):  # rebuilt from its message (torch's ExceptionWrapper, pickling)
            self.skipped: list[SkippedFile] = []
            super().__init__(skipped)
            return
        self.skipped = skipped
        shown = "; ".join(f"{s.path}: {s.reason}" for s in skipped[:3]) + ("; ..." if len(skipped) > 3 else "")
        super().__init__(
            f"nothing was packed: all {len(skipped)} image(s) were skipped ({shown}); fix or remove them, "
            "or pass --allow-empty (allow_empty=True) to write an empty dataset"
        )


def finalize(out: Path, format: str, classes: list[str], entries: list[JournalEntry], options: dict,
             journal: PackJournal | None = None) -> Manifest:
    """Write ``targets.npy`` and then ``manifest.json`` for the shards of ``entries``; remove the journal."""
    shards = [e.shard for e in entries if e.shard is not None]
    skipped = [s for e in entries for s in e.skipped]
    warned = [w for e in entries for w in e.warnings]
    targets = np.asarray([label for e in entries for label in e.labels], dtype=np.int64)
    targets_data = _save_npy(out / TARGETS_NAME, targets)
    manifest = Manifest(
        format=format,
        classes=list(classes),
        shards=shards,
        skipped=skipped,
        warnings=warned,
        targets=TARGETS_NAME,
        options=options,
        created_by=f"fastdata {__version__}",
        targets_nbytes=len(targets_data),
        targets_crc32c=crc32c_hex(targets_data),
        transcoded=transcoded_ranges(entries),
    )
    manifest.save(out)
    if journal is not None:
        journal.remove()
    for bad in skipped:
        logger.info("skipped %s: %s", escaped(bad.path), escaped(bad.reason))
    return manifest


def transcoded_ranges(entries: list[JournalEntry], first: int = 0) -> list[list[int]]:
    """The transcoded records of ``entries`` as ``[start, stop)`` sample ranges (from ``first``), from each shard's positions."""
    indices = []
    for entry in entries:
        indices += [first + j for j in entry.transcoded]
        first += len(entry.labels)
    return to_ranges(indices)


def _save_npy(path: Path, array: np.ndarray) -> bytes:
    """Write ``array`` as ``.npy`` atomically; return the bytes written (the manifest records their size and CRC32C)."""
    data = encode_targets(array)
    atomic_write_bytes(path, data)
    return data
