"""``pack``: an image folder in, shards + index files + ``manifest.json`` out.

Images are read and validated (decoded) in a process pool, in ImageFolder order (or a
seeded shuffle of it); the main process writes them in that order, so the output is
deterministic. Shards are published atomically, a journal records each one, and
``manifest.json`` is written last: a folder without it holds no finished dataset.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
from tqdm import tqdm

from fastdata import __version__
from fastdata._fs import TMP_SUFFIX, atomic_write_bytes
from fastdata.decode import DecodeError, get_decoder
from fastdata.formats import get_format
from fastdata.formats.example import ImageRecord
from fastdata.packing.journal import JournalEntry, PackJournal, fingerprint
from fastdata.formats.manifest import MANIFEST_NAME, Manifest, ShardInfo, SkippedFile
from fastdata.packing.scan import scan_image_folder
from fastdata.packing.writer import DEFAULT_SHARD_SIZE, ShardWriter
from fastdata.storage.urls import is_url

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
    on_shard: Callable[[ShardInfo], None] | None = None,
) -> Manifest:
    """Pack the ImageFolder tree ``src`` into ``format`` shards in ``out`` (a folder or a URL).

    Args:
        src: folder with one subfolder per class (torchvision ImageFolder semantics).
        out: output folder (created if missing), or a URL such as ``s3://bucket/dataset``: shards are
            then written to a local staging folder and uploaded as they complete, ``manifest.json``
            last (see :func:`fastdata.storage.transfer.pack_to_url`).
        format: ``"tfrecord"`` or ``"lmdb"``.
        shard_size: upper bound on a shard's size in bytes (default 256 MiB).
        samples_per_shard: upper bound on records per shard (default: none).
        max_side: if set, images whose longer side exceeds it are downscaled to it and
            re-encoded as JPEG at ``quality``; by default the source bytes are stored unchanged.
        quality: JPEG quality for re-encoded images (1-100).
        shuffle_seed: if set, the sample order is a seeded shuffle of ImageFolder order.
        workers: reader/validator processes (default: all cores; 0: in this process).
        strict: fail on the first bad image instead of skipping and reporting it.
        resume: finish an interrupted pack in ``out`` without redoing its complete shards.
        overwrite: replace a dataset that ``out`` already holds.
        progress: show a progress bar.
        on_shard: called with each shard's manifest entry as soon as the shard is published.

    Returns:
        The manifest that was written to ``out/manifest.json``.

    Raises:
        FileNotFoundError: ``src`` is missing, has no class folder or no image.
        FileExistsError: ``out`` already holds a dataset and neither ``resume`` nor ``overwrite`` is set.
        PermissionError: ``out`` is not writable.
        ValueError: an option is invalid, or ``resume`` finds an unfinished pack of other input/options.
        BadImageError: ``strict`` and a source image is bad.
    """
    if is_url(out):
        from fastdata.storage.transfer import pack_to_url

        return pack_to_url(src, out, format=format, shard_size=shard_size, samples_per_shard=samples_per_shard,
                           max_side=max_side, quality=quality, shuffle_seed=shuffle_seed, workers=workers,
                           strict=strict, resume=resume, overwrite=overwrite, progress=progress)
    storage = get_format(format)
    options = _check_options(format, shard_size, samples_per_shard, max_side, quality, shuffle_seed, workers)
    if resume and overwrite:
        raise ValueError("resume and overwrite exclude each other: resume finishes a pack, overwrite starts over")
    scan = scan_image_folder(src)
    order = _source_order(len(scan.paths), shuffle_seed)
    paths = [scan.paths[i] for i in order]
    labels = [scan.labels[i] for i in order]
    out = _prepare_output(Path(out), resume=resume, overwrite=overwrite)
    journal = PackJournal(out)
    print_ = fingerprint(paths, labels, options)
    if (out / MANIFEST_NAME).is_file():  # resume of a pack that had already finished
        journal.remove()
        return Manifest.load(out)
    entries = journal.load(print_, out) if resume and journal.exists() else []
    if not entries:
        journal.start(print_)
    start = entries[-1].next_source if entries else 0
    if entries:
        logger.info("resuming after %d complete shards (%d of %d images done)", len(entries), start, len(paths))
    jobs = [
        _Job(i, str(scan.root / paths[i]), paths[i], labels[i], max_side, quality) for i in range(start, len(paths))
    ]
    writer = ShardWriter(
        out, format=storage.name, shard_size=shard_size, samples_per_shard=samples_per_shard, first_shard=len(entries),
        on_shard=on_shard,
    )
    entries += _write_shards(jobs, writer, journal, scan.classes, workers, strict, progress, len(paths), start)
    return _finalize(out, storage.name, scan.classes, entries, options, journal)


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


def _prepare_output(out: Path, *, resume: bool, overwrite: bool) -> Path:
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"output {str(out)!r} is a file: pass a folder (it is created if missing)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except PermissionError:
        raise PermissionError(f"cannot create output folder {str(out)!r}: choose a writable location") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise PermissionError(f"output folder {str(out)!r} is not writable: choose a writable location or fix its permissions")
    holds_dataset = (out / MANIFEST_NAME).is_file() or PackJournal(out).exists()
    if holds_dataset and overwrite:
        _remove_dataset_files(out)
    elif holds_dataset and not resume:
        raise FileExistsError(
            f"{str(out)!r} already holds a dataset (or an interrupted pack): "
            "pass --resume to finish it or --overwrite to replace it"
        )
    for stale in out.glob(f"*{TMP_SUFFIX}"):  # pieces of a shard that was being written when the last run died
        stale.unlink()
    return out


def _remove_dataset_files(out: Path) -> None:
    """Delete what a pack writes (shards, indexes, targets, journal, manifest) and nothing else."""
    PackJournal(out).remove()
    (out / MANIFEST_NAME).unlink(missing_ok=True)
    patterns = ["shard-*.tfrecord", "shard-*.idx", "shard-*.lmdb", TARGETS_NAME, f"*{TMP_SUFFIX}"]
    for pattern in patterns:
        for path in out.glob(pattern):
            path.unlink()


def _write_shards(jobs, writer, journal, classes, workers, strict, progress, total, start) -> list[JournalEntry]:
    entries: list[JournalEntry] = []
    pending_skipped: list[SkippedFile] = []
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
    except BaseException:
        writer.abort()
        raise
    finally:
        bar.close()
    return [e for e in entries if e is not None]


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
    """Ordered results of ``_load`` over the jobs, from a process pool (or inline for workers=0)."""

    def __init__(self, jobs: list[_Job], workers: int | None) -> None:
        self.jobs = jobs
        self.workers = os.cpu_count() or 1 if workers is None else workers
        self.pool = None

    def __enter__(self):
        if self.workers == 0 or len(self.jobs) < 2:
            return map(_load, self.jobs)
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        self.pool = multiprocessing.get_context(method).Pool(min(self.workers, len(self.jobs)))
        chunk = max(1, min(32, len(self.jobs) // (self.workers * 8)))
        return self.pool.imap(_load, self.jobs, chunksize=chunk)

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.pool is not None:
            if exc_type is None:
                self.pool.close()
            else:
                self.pool.terminate()
            self.pool.join()


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
