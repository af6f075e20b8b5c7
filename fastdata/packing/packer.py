"""``pack``: an image folder in, shards + index files + ``manifest.json`` out.

Images are read and validated (decoded) in a process pool, in ImageFolder order (or a
seeded shuffle of it); the main process writes them in that order, so the output is
deterministic. Shards are published atomically, a journal records each one, and
``manifest.json`` is written last: a folder without it holds no finished dataset.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
from tqdm import tqdm

from fastdata import __version__
from fastdata._fs import atomic_write_bytes
from fastdata.decode import DecodeError, get_decoder
from fastdata.formats import get_format
from fastdata.formats.example import ImageRecord
from fastdata.packing.journal import (
    JournalEntry, PackJournal, check_finished, fingerprint, journal_header, source_digest,
)
from fastdata.formats.manifest import MANIFEST_NAME, Manifest, SkippedFile
from fastdata.packing.lock import OutputLock
from fastdata.packing.output import create_output, prepare_output, remove_own_files
from fastdata.packing.pool import OrderedProcessMap, cap_workers
from fastdata.packing.scan import ImageFolderScan, scan_image_folder
from fastdata.packing.space import OutOfSpaceError, is_out_of_space, out_of_space_error
from fastdata.packing.writer import DEFAULT_SHARD_SIZE, ShardWriter

logger = logging.getLogger(__name__)

TARGETS_NAME = "targets.npy"


class BadImageError(ValueError):
    """A source image is unreadable and ``strict`` packing was asked for."""


@dataclass(frozen=True)
class _Job:
    number: int
    path: str
    rel: str
    label: int
    max_side: int | None
    quality: int


@dataclass(frozen=True)
class _Loaded:
    number: int
    data: bytes | None
    height: int = 0
    width: int = 0
    image_format: str = ""
    error: str = ""


def pack(
    src: str | os.PathLike,
    out: str | os.PathLike,
    *,
    format: str,
    shard_size: int = DEFAULT_SHARD_SIZE,
    samples_per_shard: int | None = None,
    max_side: int | None = None,
    quality: int = 90,
    shuffle_seed: int | None = None,
    workers: int | None = None,
    strict: bool = False,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
) -> Manifest:
    """Pack the ImageFolder tree ``src`` into ``format`` shards in ``out``.

    Only one pack at a time may write to ``out`` (an exclusive lock on ``out/.fastdata.lock``),
    and a pack never deletes or replaces a file it did not write (see :mod:`fastdata.packing.output`).

    Args:
        src: folder with one subfolder per class (torchvision ImageFolder semantics).
        out: output folder (created if missing); must be empty, or hold a fastdata dataset or
            unfinished pack, unless ``overwrite`` is set.
        format: ``"tfrecord"`` or ``"lmdb"``.
        shard_size: upper bound on a shard's size in bytes (default 256 MiB).
        samples_per_shard: upper bound on records per shard (default: none).
        max_side: if set, images whose longer side exceeds it are downscaled to it and
            re-encoded as JPEG at ``quality``; by default the source bytes are stored unchanged.
        quality: JPEG quality for re-encoded images (1-100).
        shuffle_seed: if set, the sample order is a seeded shuffle of ImageFolder order.
        workers: reader/validator processes (default, and at most: the CPUs this process may
            use; a larger number is capped with a warning; 0: in this process).
        strict: fail on the first bad image, unreadable folder, symlink loop or non-UTF-8 file
            name instead of skipping and reporting it.
        resume: finish an interrupted pack in ``out`` without redoing its complete shards; it
            must have the same SRC, format and options (the differences are named otherwise).
        overwrite: replace a dataset that ``out`` already holds (only fastdata's own files are
            deleted), or pack into a folder that holds other files (which are left alone).
        progress: show a progress bar.

    Returns:
        The manifest that was written to ``out/manifest.json``.

    Raises:
        FileNotFoundError: ``src`` is missing, has no class folder or no image.
        FileExistsError: ``out`` already holds a dataset and neither ``resume`` nor ``overwrite`` is
            set; or it holds other files and ``overwrite`` is not set; or it holds a file with
            a fastdata name that fastdata did not write.
        PermissionError: ``out`` is not writable.
        OutputLockedError: another pack is writing to ``out`` (the message names it).
        ValueError: an option is invalid, or ``resume`` finds a pack of another SRC, other files
            or other options (the message names the differences).
        BadImageError: ``strict`` and a source image is bad or a folder/file was left out.
        OutOfSpaceError: the disk that holds ``out`` is full; complete shards are kept and a
            ``resume`` after freeing space finishes the pack.
    """
    storage = get_format(format)
    options = _check_options(format, shard_size, samples_per_shard, max_side, quality, shuffle_seed, workers)
    if resume and overwrite:
        raise ValueError("resume and overwrite exclude each other: resume finishes a pack, overwrite starts over")
    scan = scan_image_folder(src)
    if strict and scan.skipped:
        first = scan.skipped[0]
        raise BadImageError(
            f"{len(scan.skipped)} item(s) in SRC cannot be packed, e.g. {first.path}: {first.reason} "
            "(fix them, or pack without --strict to skip and report them)"
        )
    options["source_files"] = source_digest(scan.classes, scan.paths, scan.labels, scan.skipped)
    workers = cap_workers(workers)
    out = create_output(Path(out))
    with OutputLock(out):
        prepare_output(out, resume=resume, overwrite=overwrite)
        try:
            return _pack_locked(scan, out, storage.name, options, shard_size, samples_per_shard, workers, strict,
                                resume, progress)
        except BaseException as exc:
            _remove_pieces(out)  # whatever stopped the pack (Ctrl-C, SIGTERM, a full disk), leave no .tmp behind
            if isinstance(exc, OSError) and not isinstance(exc, OutOfSpaceError) and is_out_of_space(exc, out):
                raise out_of_space_error(out, PackJournal(out).progress(), len(scan.paths)) from exc
            raise


def _remove_pieces(out: Path) -> None:
    try:
        remove_own_files(out, only_tmp=True)
    except OSError as exc:  # pragma: no cover - the next run removes them
        logger.warning("could not remove unfinished pieces in %s: %s", out, exc)


def _pack_locked(
    scan: ImageFolderScan, out: Path, format: str, options: dict, shard_size: int, samples_per_shard: int | None,
    workers: int, strict: bool, resume: bool, progress: bool,
) -> Manifest:
    """The pack itself, with ``out`` locked and checked."""
    order = _source_order(len(scan.paths), options["shuffle_seed"])
    paths = [scan.paths[i] for i in order]
    labels = [scan.labels[i] for i in order]
    journal = PackJournal(out)
    header = journal_header(scan.root, options, len(paths) + len(scan.skipped), fingerprint(paths, labels, options))
    if (out / MANIFEST_NAME).is_file():  # resume of a pack that had already finished
        manifest = Manifest.load(out)
        check_finished(out, manifest, header)
        journal.remove()
        return manifest
    entries = journal.load(header, out) if resume and journal.exists() else []
    if not entries:
        journal.start(header)
    start = entries[-1].next_source if entries else 0
    if entries:
        logger.info("resuming after %d complete shards (%d of %d images done)", len(entries), start, len(paths))
    jobs = [
        _Job(i, str(scan.root / paths[i]), paths[i], labels[i], options["max_side"], options["quality"] or 0)
        for i in range(start, len(paths))
    ]
    writer = ShardWriter(
        out, format=format, shard_size=shard_size, samples_per_shard=samples_per_shard, first_shard=len(entries)
    )
    found = list(scan.skipped) if start == 0 else []  # recorded with the first shard, so a resume has them too
    entries += _write_shards(jobs, writer, journal, scan.classes, workers, strict, progress, len(paths), start, found)
    return _finalize(out, format, scan.classes, entries, options, journal)


def _check_options(format, shard_size, samples_per_shard, max_side, quality, shuffle_seed, workers) -> dict:
    if not isinstance(shard_size, int) or shard_size <= 0:
        raise ValueError(f"shard_size must be a positive number of bytes, got {shard_size!r}")
    if samples_per_shard is not None and (not isinstance(samples_per_shard, int) or samples_per_shard <= 0):
        raise ValueError(f"samples_per_shard must be a positive integer, got {samples_per_shard!r}")
    if max_side is not None and (not isinstance(max_side, int) or max_side < 8):
        raise ValueError(f"max_side must be an integer >= 8 (pixels), got {max_side!r}")
    if not isinstance(quality, int) or not 1 <= quality <= 100:
        raise ValueError(f"quality must be an integer JPEG quality in 1..100, got {quality!r}")
    if workers is not None and (not isinstance(workers, int) or workers < 0):
        raise ValueError(f"workers must be a non-negative integer (0: no pool), got {workers!r}")
    return {
        "format": format,
        "shard_size": shard_size,
        "samples_per_shard": samples_per_shard,
        "max_side": max_side,
        "quality": quality if max_side else None,
        "shuffle_seed": shuffle_seed,
    }


def _source_order(n: int, shuffle_seed: int | None) -> np.ndarray:
    if shuffle_seed is None:
        return np.arange(n)
    return np.random.default_rng(shuffle_seed).permutation(n)


def _write_shards(jobs, writer, journal, classes, workers, strict, progress, total, start, found) -> list[JournalEntry]:
    entries: list[JournalEntry] = []
    pending_skipped: list[SkippedFile] = list(found)
    pending_labels: list[int] = []
    bar = tqdm(total=total, initial=start, unit="img", desc="pack", disable=not progress, smoothing=0.05)
    written_bytes, last_postfix, started = 0, 0.0, time.monotonic()
    try:
        with _results(jobs, workers) as results:
            for job, loaded in zip(jobs, results):
                if loaded.error:
                    pending_skipped.append(SkippedFile(job.rel, loaded.error))
                    if strict:
                        raise BadImageError(
                            f"bad image {job.rel}: {loaded.error} (fix or remove it, or pack without --strict "
                            "to skip and report bad files)"
                        )
                else:
                    record = ImageRecord(
                        loaded.data, job.label, classes[job.label], job.rel, loaded.image_format, loaded.height, loaded.width
                    )
                    if writer.is_full_for(record):
                        entries.append(_journal_shard(writer, journal, job.number, pending_skipped, pending_labels))
                    writer.write(record)
                    pending_labels.append(job.label)
                    written_bytes += len(loaded.data)
                bar.update(1)
                if time.monotonic() - last_postfix > 1.0:
                    last_postfix = time.monotonic()
                    bar.set_postfix_str(f"{written_bytes / 1e6 / (last_postfix - started):.1f} MB/s", refresh=False)
        entries.append(_journal_shard(writer, journal, start + len(jobs), pending_skipped, pending_labels))
    except BaseException as exc:
        full = is_out_of_space(exc, writer.out, writer.pending_bytes)  # before the abort frees the space
        _abort(writer)
        if full:
            done = max([start] + [e.next_source for e in entries if e is not None and e.shard is not None])
            raise out_of_space_error(writer.out, done, total) from exc
        raise
    finally:
        bar.close()
    return [e for e in entries if e is not None]


def _abort(writer: ShardWriter) -> None:
    """Drop the unfinished shard; a failure to clean up (e.g. on a full disk) must not hide the first error."""
    try:
        writer.abort()
    except Exception as exc:  # noqa: BLE001 - the error being handled matters more
        logger.warning("could not remove the unfinished shard in %s: %s", writer.out, exc)


def _journal_shard(writer, journal, next_source, skipped, labels) -> JournalEntry | None:
    """Publish the open shard and journal it; an entry without a shard only carries trailing bad files."""
    info = writer.finish_shard()
    if info is None and not skipped:
        return None
    entry = JournalEntry(shard=info, next_source=next_source, skipped=list(skipped), labels=list(labels))
    if info is not None:
        journal.append(entry)
    skipped.clear()
    labels.clear()
    return entry


class _results:
    """Ordered results of ``_load`` over the jobs, from worker processes (or inline for workers=0)."""

    def __init__(self, jobs: list[_Job], workers: int) -> None:
        self.jobs = jobs
        self.workers = workers
        self.pool: OrderedProcessMap | None = None

    def __enter__(self):
        if self.workers == 0 or len(self.jobs) < 2:
            return map(_load, self.jobs)
        chunk = max(1, min(32, len(self.jobs) // (self.workers * 8)))
        self.pool = OrderedProcessMap(_load, self.jobs, workers=min(self.workers, len(self.jobs)), chunksize=chunk)
        return self.pool.__enter__()

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.pool is not None:
            self.pool.__exit__(exc_type, exc, tb)


def _load(job: _Job) -> _Loaded:
    """Read, validate and (optionally) downscale one image; runs in a pool worker."""
    try:
        with open(job.path, "rb") as f:
            data = f.read()
    except OSError as exc:
        return _Loaded(job.number, None, error=f"unreadable ({exc.strerror or exc})")
    if not data:
        return _Loaded(job.number, None, error="empty file")
    decoder = get_decoder("auto")
    try:
        height, width = decoder.validate(data)
        if job.max_side and max(height, width) > job.max_side:
            data, height, width = _downscale(decoder.decode(data), job.max_side, job.quality)
    except DecodeError as exc:
        return _Loaded(job.number, None, error=str(exc) or "cannot be decoded")
    return _Loaded(job.number, data, height, width, image_format(data))


def _downscale(rgb: np.ndarray, max_side: int, quality: int) -> tuple[bytes, int, int]:
    height, width = rgb.shape[:2]
    factor = max_side / max(height, width)
    size = (max(1, round(width * factor)), max(1, round(height * factor)))
    small = cv2.resize(rgb, size, interpolation=cv2.INTER_AREA)
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(small, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise DecodeError("re-encoding as JPEG failed")
    return buf.tobytes(), small.shape[0], small.shape[1]


_MAGIC = [
    (b"\xff\xd8\xff", "JPEG"),
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
    (b"P5", "PGM"),
    (b"P2", "PGM"),
    (b"P6", "PPM"),
    (b"P3", "PPM"),
]


def image_format(data: bytes) -> str:
    """The container format of encoded image bytes, from their magic number (``"JPEG"``, ``"PNG"``, ...)."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    for magic, name in _MAGIC:
        if data.startswith(magic):
            return name
    return "UNKNOWN"


def _finalize(out, format, classes, entries, options, journal) -> Manifest:
    shards = [e.shard for e in entries if e.shard is not None]
    skipped = [s for e in entries for s in e.skipped]
    targets = np.asarray([label for e in entries for label in e.labels], dtype=np.int64)
    _save_npy(out / TARGETS_NAME, targets)
    manifest = Manifest(
        format=format,
        classes=list(classes),
        shards=shards,
        skipped=skipped,
        targets=TARGETS_NAME,
        options=options,
        created_by=f"fastdata {__version__}",
    )
    manifest.save(out)
    journal.remove()
    for bad in skipped:
        logger.info("skipped %s: %s", bad.path, bad.reason)
    return manifest


def _save_npy(path: Path, array: np.ndarray) -> None:
    import io

    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    atomic_write_bytes(path, buf.getvalue())
