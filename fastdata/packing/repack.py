"""``fastdata repack OLD NEW``: an existing pack rewritten with every JPEG re-coded for random access.

The records of OLD are read shard by shard through its storage format (every framing, CRC and
count checked on the way: a damaged OLD is refused, nothing is guessed), each JPEG is re-coded
losslessly in a process pool (:func:`fastdata.packing.transcode.transcode_jpeg`: the same pixels,
restart intervals tiling the MCU rows) and the records are written to NEW in the same order, with
the same labels, class table, skipped-file list and codec warnings, and OLD's shard bounds. A record
that cannot be re-coded (not a JPEG, or one libjpeg warns about) is copied unchanged; the new
manifest counts the records that were in each shard (and, where a shard holds both kinds, its
``transcoded.bits`` says which). OLD is never modified.
"""

from __future__ import annotations

import io
import logging
import os
from pathlib import Path

from PIL import Image
from tqdm import tqdm

from fastdata.decode.headers import image_format
from fastdata.formats import get_format
from fastdata.formats.errors import CorruptRecordError
from fastdata.formats.example import ImageRecord
from fastdata.formats.manifest import Manifest
from fastdata.formats.packed import open_pack
from fastdata.packing.finish import finalize
from fastdata.packing.journal import JournalEntry, PackJournal
from fastdata.packing.lock import OutputLock
from fastdata.packing.output import create_output, holds_pack, prepare_output, remove_own_files
from fastdata.packing.pool import OrderedProcessMap, cap_workers
from fastdata.packing.transcode import transcode_jpeg
from fastdata.packing.writer import DEFAULT_SHARD_SIZE, ShardWriter

__all__ = ["repack"]

logger = logging.getLogger(__name__)


def repack(
    old: str | os.PathLike,
    new: str | os.PathLike,
    *,
    format: str | None = None,
    workers: int | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> Manifest:
    """Write the pack in ``old`` to ``new`` with every JPEG re-coded losslessly for random access.

    Args:
        old: a folder written by ``fastdata pack`` (read only).
        new: the output folder (created if missing; must be empty unless ``overwrite``).
        format: storage format of ``new`` (default: ``old``'s).
        workers: re-coding processes (default and at most: the CPUs this process may use; 0: in this process).
        overwrite: replace a dataset ``new`` already holds (only fastdata's own files are deleted). Not needed to
            run a repack of the same ``old`` again after it was stopped (even by ``kill -9``): it starts over.
        progress: show a progress bar.

    Returns:
        The manifest written to ``new/manifest.json``.

    Raises:
        FileNotFoundError: ``old`` holds no finished pack.
        ValueError: ``old`` and ``new`` are the same folder, or ``old`` is damaged (the message names
            the first problem; ``fastdata verify OLD`` lists them all).
        FileExistsError: ``new`` holds a dataset or other files and ``overwrite`` is not set.
    """
    pack = open_pack(old)
    source = get_format(pack.manifest.format)
    format = format or pack.manifest.format
    get_format(format)  # an unknown name is refused before anything is written
    out = create_output(Path(new))
    if out.resolve() == pack.root:
        raise ValueError(f"repack writes a new folder: NEW ({new}) is OLD; pass another folder")
    options = dict(pack.manifest.options, format=format, keep_bytes=False)
    workers = cap_workers(workers)
    with OutputLock(out):
        journal = PackJournal(out)
        mark = {"repack": str(pack.root), "format": format}  # no resume: the journal only says who writes here
        again = journal.first_line() == mark  # a repack of the same OLD stopped (killed): start it over
        if not (overwrite or again) and holds_pack(out):
            raise FileExistsError(
                f"{str(new)!r} already holds a dataset: pass --overwrite (overwrite=True) to replace it with this "
                "repack, or choose another folder"
            )
        prepare_output(out, resume=False, overwrite=overwrite or again)
        journal.start(mark)  # before the first shard: a killed run's shards are known as this repack's
        writer = ShardWriter(
            out,
            format=format,
            shard_size=options.get("shard_size") or DEFAULT_SHARD_SIZE,
            samples_per_shard=options.get("samples_per_shard"),
        )
        bar = tqdm(total=pack.manifest.num_samples, unit="img", desc="repack", disable=not progress)
        try:
            entries = _write(pack, source, writer, workers, bar)
        except BaseException:
            writer.abort()
            remove_own_files(out)  # no resume: shards already published go too
            raise
        finally:
            bar.close()
        entries[0].skipped = list(pack.manifest.skipped)
        entries[0].warnings = list(pack.manifest.warnings)
        return finalize(out, format, pack.manifest.classes, entries, options, journal)


def _write(pack, source, writer: ShardWriter, workers: int, bar) -> list[JournalEntry]:
    """Every shard of ``pack`` read, re-coded and written; one entry per new shard (one empty one for an empty pack)."""
    entries: list[JournalEntry] = []
    labels: list[int] = []
    recoded: list[int] = []
    sample = 0
    for _number, shard in enumerate(pack.manifest.shards):
        records: list[ImageRecord] = []
        problems = source.verify(pack.root, shard, lambda j, record: records.append(record))  # noqa: B023 (called within this iteration)
        if problems or len(records) != shard.num_samples:
            first = problems[0] if problems else f"{len(records)} records, the manifest says {shard.num_samples}"
            raise CorruptRecordError(shard.path, None, f"{first}; run `fastdata verify` on it")
        for record, (data, was_recoded, height, width) in zip(records, _recode_all(records, workers), strict=False):
            label = int(pack.targets[sample])
            new = ImageRecord(
                data,
                label,
                pack.manifest.classes[label],
                record.filename,
                image_format(data),
                record.height or height,
                record.width or width,
            )
            if writer.is_full_for(new):
                entries.append(_entry(writer, labels, recoded))
            if was_recoded:
                recoded.append(len(labels))
            writer.write(new)
            labels.append(label)
            sample += 1
            bar.update(1)
    entries.append(_entry(writer, labels, recoded))
    return entries


def _entry(writer: ShardWriter, labels: list[int], recoded: list[int]) -> JournalEntry:
    entry = JournalEntry(
        shard=writer.finish_shard(), next_source=0, skipped=[], labels=list(labels), transcoded=list(recoded)
    )
    labels.clear()
    recoded.clear()
    return entry


def _recode_all(records: list[ImageRecord], workers: int):
    if workers == 0 or len(records) < 2:
        return map(_recode, records)
    chunk = max(1, min(32, len(records) // (workers * 8)))
    return _Pooled(records, workers, chunk)


class _Pooled:
    """The pool's ordered results, its worker processes stopped when iteration ends or fails."""

    def __init__(self, records: list[ImageRecord], workers: int, chunk: int) -> None:
        self.pool = OrderedProcessMap(_recode, records, workers=min(workers, len(records)), chunksize=chunk)

    def __iter__(self):
        with self.pool as results:
            yield from results


def _recode(record: ImageRecord) -> tuple[bytes, bool, int, int]:
    """(bytes to store, whether they were re-coded, height, width); runs in a pool worker."""
    recoded = transcode_jpeg(record.image) if image_format(record.image) == "JPEG" else None
    height, width = record.height, record.width
    if not (height and width):
        try:
            with Image.open(io.BytesIO(record.image)) as image:
                width, height = image.size
        except Exception:  # noqa: BLE001 - the size is informative only; pack validated the image
            height = width = 0
    return recoded or record.image, recoded is not None, height, width
