"""The end of every pack: labels, the transcoded side file, and the manifest last.

The end of every pack: labels, the transcoded side file when one is needed, and the manifest last, from the
finished shards' entries (the manifest grows with the shards, never with the samples).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from fastdata._util.fs import atomic_write_bytes
from fastdata._util.text import escaped
from fastdata._util.version import __version__
from fastdata.formats.files import crc32c_hex
from fastdata.formats.manifest import Manifest
from fastdata.formats.manifest_entries import SkippedFile
from fastdata.formats.manifest_transcoded import TranscodedBits, TranscodedRecords
from fastdata.formats.targets import encode_targets
from fastdata.packing.journal import JournalEntry, PackJournal

__all__ = ["TARGETS_NAME", "NothingPackedError", "finalize", "transcoded_bits"]

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


def finalize(
    out: Path,
    format: str,
    classes: list[str],
    entries: list[JournalEntry],
    options: dict,
    journal: PackJournal | None = None,
) -> Manifest:
    """Write the labels, the transcoded side file and the manifest; remove the journal.

    Write ``targets.npy``, ``transcoded.bits`` (when some shard is partly re-coded) and then ``manifest.json`` for
    the shards of ``entries``; remove the journal.
    """
    bits = transcoded_bits(entries)
    skipped = [s for e in entries for s in e.skipped]
    warned = [w for e in entries for w in e.warnings]
    targets = np.asarray([label for e in entries for label in e.labels], dtype=np.int64)
    targets_data = _save_npy(out / TARGETS_NAME, targets)
    recoded = bits.write(out, TARGETS_NAME)
    manifest = Manifest(
        format=format,
        classes=list(classes),
        shards=bits.shards,
        skipped=skipped,
        warnings=warned,
        targets=TARGETS_NAME,
        options=options,
        created_by=f"fastdata {__version__}",
        targets_nbytes=len(targets_data),
        targets_crc32c=crc32c_hex(targets_data),
        **recoded,
    )
    manifest.save(out)
    if journal is not None:
        journal.remove()
    for bad in skipped:
        logger.info("skipped %s: %s", escaped(bad.path), escaped(bad.reason))
    return manifest


def transcoded_bits(entries: list[JournalEntry], old: TranscodedRecords | None = None) -> TranscodedBits:
    """The transcoded records of ``entries``, after those of ``old``.

    The transcoded records of ``entries`` (each shard's positions), after those of ``old`` (the pack an append
    adds to) if given; its ``shards`` are the old shards and the entries' shards, each with its count.
    """
    before = old.manifest.shards if old is not None else []
    bits = TranscodedBits(sum(s.num_samples for s in before) + sum(len(e.labels) for e in entries))
    for k, shard in enumerate(before):
        mask = old.shard_mask(k)  # type: ignore[union-attr]
        bits.add(shard, shard.num_samples, mask if mask is not None else [])  # unknown: a pack before re-coding
    for entry in entries:
        bits.add(entry.shard, len(entry.labels), entry.transcoded)
    return bits


def _save_npy(path: Path, array: np.ndarray) -> bytes:
    """Write ``array`` as ``.npy`` atomically; return the bytes written (the manifest records their size and CRC32C)."""
    data = encode_targets(array)
    atomic_write_bytes(path, data)
    return data
