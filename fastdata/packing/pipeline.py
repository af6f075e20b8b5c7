"""The pack pipeline: read and validate images in worker processes, write them into shards, journal each shard.

:func:`fastdata.packing.packer.pack` sets up the output, the options and the journal; this module runs the
loop in between. Each image is read and validated in a worker (:func:`_load`: PIL's acceptance rules, the
pixel limit, codec messages captured rather than printed), in source order; bad images are skipped with the
reason, and every finished shard is journaled with the files it skipped or warned about, so that a resume
continues exactly where the last complete shard ended.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import cast

import cv2
import numpy as np
from tqdm import tqdm

from fastdata.decode import DecodeError, get_decoder, pixel_limit
from fastdata.decode.capture import codec_messages
from fastdata.decode.headers import image_format
from fastdata.formats.example import ImageRecord
from fastdata.formats.fields import encode_values
from fastdata.formats.manifest_entries import FileWarnings, SkippedFile
from fastdata.packing.journal import JournalEntry
from fastdata.packing.options import PackOptions
from fastdata.packing.pool import OrderedProcessMap
from fastdata.packing.sources.base import Row, Source
from fastdata.packing.space import is_out_of_space, out_of_space_error
from fastdata.packing.transcode import transcode_jpeg
from fastdata.packing.writer import ShardWriter

__all__ = ["BadImageError", "Job", "make_jobs", "throughput", "write_shards"]

logger = logging.getLogger(__name__)
_clock = time.monotonic  # the progress figure's clock (a test replaces it)
_FIGURE_EVERY = 1.0  # seconds between two throughput figures on the progress bar


class BadImageError(ValueError):
    """A source image is unreadable and ``strict`` packing was asked for."""


@dataclass(frozen=True)
class Job:
    """One source row to read, validate and (optionally) downscale.

    Attributes:
        number: the row's place in the pack order.
        rel: the row's locator (what ``source.open`` takes, and the name recorded for it).
        label: its class index.
        source: where its bytes come from (``source.open(rel)``, unless ``data`` holds them).
        options: the pack's options (``max_side``, ``quality``, ``max_pixels``, ``keep_bytes`` apply here).
        fields: the row's fields as feature lists (:func:`fastdata.formats.fields.encode_values`).
        data: the image bytes when the scan already had them.
        where: how a skipped-file entry names the row (its locator, and its row number in a list).
    """

    number: int
    rel: str
    label: int
    source: Source
    options: PackOptions
    fields: dict = field(default_factory=dict)
    data: bytes | None = None
    where: str = ""


@dataclass(frozen=True)
class _Loaded:
    number: int
    data: bytes | None
    height: int = 0
    width: int = 0
    image_format: str = ""
    error: str = ""
    warnings: tuple[str, ...] = ()
    transcoded: bool = False


def make_jobs(
    source: Source,
    rows: Iterable[Row],
    types: dict[str, dict],
    options: PackOptions,
    start: int = 0,
    relabel: list[int] | None = None,
) -> Iterator[Job]:
    """The pipeline's jobs for ``rows`` from number ``start`` on, made as they are needed."""
    for i, r in enumerate(itertools.islice(rows, start, None), start):
        label = relabel[r.label] if relabel else r.label
        yield Job(
            i, r.locator, label, source, options, encode_values(types, r.fields, text=source.text), r.data, r.where
        )


def write_shards(
    jobs, writer, journal, classes, options, workers, total, start, found, *, progress: bool | None = None
) -> list[JournalEntry]:
    """Load ``jobs`` in ``workers`` processes, in order, into ``writer``'s shards; journal each finished shard.

    ``options.strict`` stops at the first bad row; ``progress`` (default ``options.progress``) shows a bar.

    Returns the journal entries of the shards written (plus one for trailing skipped files); ``found`` are the
    items the scan already skipped, recorded with the first shard. On any exception the open shard is dropped,
    and a full disk becomes an :class:`~fastdata.packing.space.OutOfSpaceError` naming what is kept.
    """
    entries: list[JournalEntry | None] = []  # None: a shard boundary with nothing to journal
    pending_skipped: list[SkippedFile] = list(found)
    pending_warnings: list[FileWarnings] = []
    pending_labels: list[int] = []
    pending_transcoded: list[int] = []  # positions in the open shard of the records that were transcoded
    shown = options.progress if progress is None else progress
    bar = tqdm(total=total, initial=start, unit="img", desc="pack", disable=not shown, smoothing=0.05)
    started = last_postfix = _clock()
    first_bytes, processed = writer.written_bytes, 0
    try:
        results = _loaded(jobs, workers)
        try:
            for job, loaded in results:
                processed += 1
                if loaded.error:
                    pending_skipped.append(SkippedFile(job.where or job.rel, loaded.error))
                    if options.strict:
                        raise BadImageError(
                            f"bad image {job.where or job.rel}: {loaded.error} (fix or remove it, or pack without "
                            "--strict to skip and report bad files)"
                        )
                else:
                    name = classes[job.label] if 0 <= job.label < len(classes) else ""
                    record = ImageRecord(
                        cast(bytes, loaded.data),  # a load without an error has its bytes
                        job.label,
                        name,
                        job.rel,
                        loaded.image_format,
                        loaded.height,
                        loaded.width,
                        job.fields,
                    )
                    if writer.is_full_for(record):
                        entries.append(
                            _journal_shard(
                                writer,
                                journal,
                                job.number,
                                pending_skipped,
                                pending_labels,
                                pending_warnings,
                                pending_transcoded,
                            )
                        )
                    if loaded.transcoded:
                        pending_transcoded.append(len(pending_labels))
                    writer.write(record)
                    pending_labels.append(job.label)
                    if loaded.warnings:  # journaled with the shard that holds the file
                        pending_warnings.append(FileWarnings(job.rel, list(loaded.warnings)))
                bar.update(1)
                if _clock() - last_postfix > _FIGURE_EVERY:
                    last_postfix = _clock()
                    bar.set_postfix_str(
                        throughput(writer.written_bytes - first_bytes, last_postfix - started), refresh=False
                    )
        finally:
            results.close()  # stops the workers of an unfinished window at once
        entries.append(
            _journal_shard(
                writer,
                journal,
                start + processed,
                pending_skipped,
                pending_labels,
                pending_warnings,
                pending_transcoded,
            )
        )
        bar.set_postfix_str(throughput(writer.written_bytes - first_bytes, _clock() - started))  # the final figure
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


def throughput(nbytes: int, seconds: float) -> str:
    """The progress bar's figure: bytes actually written over the time actually spent, e.g. ``"81.3 MB/s"``."""
    return f"{nbytes / 1e6 / max(seconds, 1e-9):.1f} MB/s"


def _abort(writer: ShardWriter) -> None:
    """Drop the unfinished shard; a failure to clean up (e.g. on a full disk) must not hide the first error."""
    try:
        writer.abort()
    except Exception as exc:  # noqa: BLE001 - the error being handled matters more
        logger.warning("could not remove the unfinished shard in %s: %s", writer.out, exc)


def _journal_shard(writer, journal, next_source, skipped, labels, warned, transcoded) -> JournalEntry | None:
    """Publish the open shard and journal it; an entry without a shard only carries trailing bad files."""
    info = writer.finish_shard()
    if info is None and not skipped:
        return None
    entry = JournalEntry(
        shard=info,
        next_source=next_source,
        skipped=list(skipped),
        labels=list(labels),
        warnings=list(warned),
        transcoded=list(transcoded),
    )
    if info is not None:
        journal.append(entry)
    for pending in (skipped, labels, warned, transcoded):
        pending.clear()
    return entry


WINDOW = 8192  # jobs held at a time: a source of any length is packed in bounded memory


def _loaded(jobs: Iterable[Job], workers: int) -> Generator[tuple[Job, _Loaded], None, None]:
    """``(job, _load(job))`` in order, from worker processes (or inline for workers=0), a window of jobs at a time."""
    pending = iter(jobs)
    while True:
        window = list(itertools.islice(pending, WINDOW))
        if not window:
            return
        if workers == 0 or len(window) < 2:
            for job in window:
                yield job, _load(job)
            continue
        chunk = max(1, min(32, len(window) // (workers * 8)))
        with OrderedProcessMap(_load, window, workers=min(workers, len(window)), chunksize=chunk) as results:
            yield from zip(window, results, strict=False)


def _load(job: Job) -> _Loaded:
    """Read, validate and (optionally) downscale one image; runs in a pool worker.

    Validation follows PIL's rules (see :meth:`Decoder.validate`); what the codecs say on the
    way (Python warnings, lines libtiff or libjpeg print) is returned with the result, to be
    recorded in the manifest, instead of reaching the terminal.
    """
    try:
        data = job.data if job.data is not None else job.source.open(job.rel)
    except OSError as exc:
        return _Loaded(job.number, None, error=f"unreadable ({exc.strerror or exc})")
    if not data:
        return _Loaded(job.number, None, error="empty file")
    decoder = get_decoder("auto")
    error = ""
    max_side = job.options.max_side
    with pixel_limit(job.options.max_pixels), codec_messages() as messages:
        try:
            height, width = decoder.validate(data)
            if max_side and max(height, width) > max_side:
                data, height, width = _downscale(decoder.decode(data), max_side, job.options.quality or 0)
        except DecodeError as exc:
            error = str(exc) or "cannot be decoded"
    if error:
        said = [m for m in messages if m not in error]
        return _Loaded(job.number, None, error=error + (f" [{'; '.join(said[:3])}]" if said else ""))
    kind = image_format(data)
    recoded = None
    if kind == "JPEG" and not job.options.keep_bytes:  # see fastdata.packing.transcode
        recoded = transcode_jpeg(data, max_pixels=job.options.max_pixels)
    return _Loaded(
        job.number, recoded or data, height, width, kind, warnings=tuple(messages), transcoded=recoded is not None
    )


def _downscale(rgb: np.ndarray, max_side: int, quality: int) -> tuple[bytes, int, int]:
    height, width = rgb.shape[:2]
    factor = max_side / max(height, width)
    size = (max(1, round(width * factor)), max(1, round(height * factor)))
    small = cv2.resize(rgb, size, interpolation=cv2.INTER_AREA)
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(small, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise DecodeError("re-encoding as JPEG failed")
    return buf.tobytes(), small.shape[0], small.shape[1]
