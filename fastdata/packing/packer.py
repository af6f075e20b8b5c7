"""``pack``: an image folder in, shards + index files + ``manifest.json`` out.

Images are read and validated (decoded) in a process pool, in ImageFolder order (or a
seeded shuffle of it); the main process writes them in that order, so the output is
deterministic. Shards are published atomically, a journal records each one, and
``manifest.json`` is written last: a folder without it holds no finished dataset.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from fastdata import __version__
from fastdata._fs import atomic_write_bytes
from fastdata.decode import DEFAULT_MAX_PIXELS
from fastdata.decode.limits import as_limit
from fastdata.formats import get_format
from fastdata.formats.files import crc32c_hex
from fastdata.formats.manifest import MANIFEST_NAME, Manifest, ShardInfo, SkippedFile
from fastdata.formats.targets import encode_targets
from fastdata.packing.journal import (
    JournalEntry, PackJournal, check_finished, fingerprint, journal_header, source_digest,
)
from fastdata.packing.lock import OutputLock
from fastdata.packing.output import create_output, prepare_output, remove_own_files
from fastdata.decode.base import image_format  # noqa: F401 - re-exported: fastdata.packing.packer.image_format
from fastdata.packing.pipeline import BadImageError, Job, write_shards
from fastdata.packing.pool import cap_workers
from fastdata.packing.scan import ImageFolderScan, scan_image_folder
from fastdata.packing.space import OutOfSpaceError, is_out_of_space, out_of_space_error
from fastdata.packing.transcode import to_ranges
from fastdata.packing.writer import DEFAULT_SHARD_SIZE, ShardWriter
from fastdata.storage.urls import is_url

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
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    allow_empty: bool = False,
    on_shard: Callable[[ShardInfo], None] | None = None,
    keep_bytes: bool = False,
) -> Manifest:
    """Pack the ImageFolder tree ``src`` into ``format`` shards in ``out`` (a folder or a URL).

    Only one pack at a time may write to ``out`` (an exclusive lock on ``out/.fastdata.lock``),
    and a pack never deletes or replaces a file it did not write (see :mod:`fastdata.packing.output`).

    Args:
        src: folder with one subfolder per class (torchvision ImageFolder semantics).
        out: output folder (created if missing); must be empty, or hold a fastdata dataset or
            unfinished pack, unless ``overwrite`` is set. Or a URL such as ``s3://bucket/dataset``:
            shards are then written to a local staging folder and uploaded as they complete,
            ``manifest.json`` last (see :func:`fastdata.storage.transfer.pack_to_url`).
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
        max_pixels: skip images whose header declares more than this many pixels, before
            decoding them, with the reason "WxH = N pixels exceeds the limit of M
            (--max-pixels)". The default is PIL's ``DecompressionBombError`` threshold;
            0 or None packs images of any size.
        allow_empty: write a dataset even when every image was skipped (``len(ds) == 0``);
            by default that raises :class:`NothingPackedError`.
        on_shard: called with each shard's manifest entry as soon as the shard is published.
        keep_bytes: store every source file byte for byte. By default each JPEG is re-coded
            losslessly (same DCT coefficients, so the same pixels as the original file in PIL and
            every decoder) as an optimized baseline JPEG with restart intervals that tile its MCU
            rows, so a crop decodes from only the intervals that cover it; EXIF, ICC and comments
            are dropped. A JPEG that cannot be re-coded, and any other format, is stored unchanged;
            the manifest's ``transcoded`` lists the records that were (see README "What pack stores").

    Images are accepted as PIL accepts them: a JPEG with libjpeg warnings ("extraneous bytes
    before marker") is packed, and the codec messages of every such file are recorded in the
    manifest (``warnings``; ``fastdata inspect`` lists them) instead of being printed; a file
    that does not decode is skipped with the decoder's reason.

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
        NothingPackedError: every image was skipped and ``allow_empty`` is not set (no dataset is left in ``out``).
    """
    if is_url(out):
        from fastdata.storage.transfer import pack_to_url

        return pack_to_url(src, out, format=format, shard_size=shard_size, samples_per_shard=samples_per_shard,
                           max_side=max_side, quality=quality, shuffle_seed=shuffle_seed, workers=workers,
                           strict=strict, resume=resume, overwrite=overwrite, progress=progress,
                           max_pixels=max_pixels, allow_empty=allow_empty, keep_bytes=keep_bytes)
    storage = get_format(format)
    options = _check_options(format, shard_size, samples_per_shard, max_side, quality, shuffle_seed, workers)
    options["max_pixels"] = as_limit(max_pixels)
    if not isinstance(keep_bytes, bool):
        raise ValueError(f"keep_bytes must be True or False, got {keep_bytes!r}")
    options["keep_bytes"] = keep_bytes
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
                                resume, progress, allow_empty, on_shard)
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
    workers: int, strict: bool, resume: bool, progress: bool, allow_empty: bool,
    on_shard: Callable[[ShardInfo], None] | None,
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
        Job(i, str(scan.root / paths[i]), paths[i], labels[i], options["max_side"], options["quality"] or 0,
            options["max_pixels"], not options["keep_bytes"])
        for i in range(start, len(paths))
    ]
    writer = ShardWriter(
        out, format=format, shard_size=shard_size, samples_per_shard=samples_per_shard, first_shard=len(entries),
        on_shard=on_shard,
    )
    found = list(scan.skipped) if start == 0 else []  # recorded with the first shard, so a resume has them too
    entries += write_shards(jobs, writer, journal, scan.classes, workers, strict, progress, len(paths), start, found)
    if not allow_empty and not any(e.shard is not None for e in entries):
        remove_own_files(out)
        raise NothingPackedError([s for e in entries for s in e.skipped])
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


def _finalize(out, format, classes, entries, options, journal) -> Manifest:
    shards = [e.shard for e in entries if e.shard is not None]
    skipped = [s for e in entries for s in e.skipped]
    warned = [w for e in entries for w in e.warnings]
    targets = np.asarray([label for e in entries for label in e.labels], dtype=np.int64)
    targets_data = _save_npy(out / TARGETS_NAME, targets)
    manifest = Manifest(
        transcoded=transcoded_ranges(entries),
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
    )
    manifest.save(out)
    journal.remove()
    for bad in skipped:
        logger.info("skipped %s: %s", bad.path, bad.reason)
    return manifest


def transcoded_ranges(entries: list[JournalEntry]) -> list[list[int]]:
    """The dataset's transcoded records as ``[start, stop)`` sample ranges, from each shard's positions."""
    indices, first = [], 0
    for entry in entries:
        indices += [first + j for j in entry.transcoded]
        first += len(entry.labels)
    return to_ranges(indices)


def _save_npy(path: Path, array: np.ndarray) -> bytes:
    """Write ``array`` as ``.npy`` atomically; return the bytes written (the manifest records their size and CRC32C)."""
    data = encode_targets(array)
    atomic_write_bytes(path, data)
    return data
