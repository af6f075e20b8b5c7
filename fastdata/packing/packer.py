"""``pack``: an image folder in, shards + index files + ``manifest.json`` out.

Images are read and validated (decoded) in a process pool, in ImageFolder order (or a
seeded shuffle of it); the main process writes them in that order, so the output is
deterministic. Shards are published atomically, a journal records each one, and
``manifest.json`` is written last: a folder without it holds no finished dataset.

What the output depends on (the recorded options, the source's digest, the fingerprint, the range
plan) is worked out once, as a :class:`~fastdata.packing.identity.PackIdentity`, right after the
census pass, and handed down to the journal, the engines, the range tasks and the append.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from fastdata.decode.headers import image_format  # noqa: F401 - re-exported: fastdata.packing.packer.image_format
from fastdata.formats.fields import infer_types
from fastdata.formats.manifest import MANIFEST_NAME, Manifest
from fastdata.formats.manifest_entries import ShardInfo
from fastdata.packing.append import append_locked, pack_format
from fastdata.packing.finish import TARGETS_NAME, NothingPackedError, finalize  # noqa: F401 - re-exported
from fastdata.packing.identity import PackIdentity, check_journal
from fastdata.packing.journal import JournalEntry, PackJournal
from fastdata.packing.lock import OutputLock
from fastdata.packing.options import PackOptions
from fastdata.packing.output import create_output, prepare_output, remove_own_files
from fastdata.packing.pipeline import BadImageError, make_jobs, write_shards
from fastdata.packing.plan import ordered_rows
from fastdata.packing.pool import cap_workers
from fastdata.packing.sources import Source, open_source
from fastdata.packing.space import OutOfSpaceError, is_out_of_space, out_of_space_error
from fastdata.packing.writer import ShardWriter
from fastdata.storage.urls import is_url

if TYPE_CHECKING:
    from fastdata.packing.engines import PartResult

logger = logging.getLogger(__name__)


def pack(
    src: str | os.PathLike,
    out: str | os.PathLike,
    *,
    options: PackOptions | None = None,
    on_shard: Callable[[ShardInfo], None] | None = None,
    **keywords: Any,
) -> Manifest | PartResult:
    """Pack ``src`` into shards in ``out`` (a folder or a URL).

    Pack ``src`` (an ImageFolder tree, a file list, Parquet, WebDataset tars, a pack or TFRecords) into
    ``format`` shards in ``out`` (a folder or a URL).

    The options are given as keywords (below), or as one :class:`~fastdata.packing.options.PackOptions`
    (``options=``), not both.

    Only one pack at a time may write to ``out`` (an exclusive lock on ``out/.fastdata.lock``),
    and a pack never deletes or replaces a file it did not write (see :mod:`fastdata.packing.output`).

    Args:
        src: a folder with one subfolder per class (torchvision ImageFolder semantics), or any source of
            :mod:`fastdata.packing.sources` (told from what ``src`` is unless ``source`` says).
        out: output folder (created if missing); must be empty, or hold a fastdata dataset or
            unfinished pack, unless ``overwrite`` is set. Or a URL such as ``s3://bucket/dataset``:
            shards are then written to a local staging folder and uploaded as they complete,
            ``manifest.json`` last (see :mod:`fastdata.storage.transfer`).
        **keywords: the fields of :class:`~fastdata.packing.options.PackOptions`, by name, described below.
        format: ``"tfrecord"`` or ``"lmdb"`` (with ``append``, the pack's own when left out).
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
        source: ``"auto"`` (default), ``"imagefolder"``, ``"list"``, ``"parquet"``, ``"webdataset"``, ``"pack"`` or
            ``"tfrecord"``.
        label_column: the label column or ``.json`` key (default ``label``): class names map to indices in
            sorted order, integers are kept; labels that mix the two are refused (naming the first row of the other
            kind), and so is a list, Parquet or tars without a label, unless ``unlabelled``.
        labels: ``"auto"`` (above) or ``"names"``: every label is a class name, integers included, sorted as text.
        unlabelled: pack a list, Parquet or tars without labels: every label is -1, the class list empty.
        image_column: the image path/URL column of a list, or the ``{bytes, path}`` column of Parquet.
        fields: columns (``.json`` keys, TFRecord features) kept with each sample, types inferred
            (:mod:`fastdata.formats.fields`); a pack source keeps all its fields, typed as its manifest says,
            unless ``fields`` names some.
        append: add the samples to the finished pack in ``out`` as new shards (:mod:`fastdata.packing.append`).
        allow_duplicates: with ``append``, add samples the pack already holds (a source with the same files, labels
            and order as the pack's own or an earlier append's; refused by default).
        options: all of the above as one :class:`~fastdata.packing.options.PackOptions` instead of keywords.
        on_shard: called with each shard's manifest entry as soon as the shard is published.
        range_size: samples per range of the plan (default 10000, rounded up to a multiple of
            ``samples_per_shard``): a shard never crosses a range boundary, and each range is one
            task of the engine (see :mod:`fastdata.packing.plan`). Recorded with the options: every
            engine and every split writes the same bytes for the same value.
        engine: ``"local"`` (this machine's process pool) or ``"ray"`` (one Ray task per range; the
            cluster at ``ray_address``, else ``RAY_ADDRESS``, else a local one).
        part: ``(I, N)``: pack only the ranges of the 0-based part ``I`` of ``N`` and write its
            partial manifest; :func:`fastdata.packing.merge.merge` (``fastdata merge OUT``) writes
            the manifest once every part is there. Returns a :class:`PartResult` instead of a manifest.
        ray_address: the Ray cluster for ``engine="ray"``.
        keep_bytes: store every source file byte for byte. By default each JPEG is re-coded
            losslessly (same DCT coefficients, so the same pixels as the original file in PIL and
            every decoder) as an optimized baseline JPEG with restart intervals that tile its MCU
            rows, so a crop decodes from only the intervals that cover it; EXIF, ICC and comments
            are dropped. A JPEG that cannot be re-coded, and any other format, is stored unchanged;
            the manifest counts the records that were, per shard (``ShardInfo.transcoded``; which ones, where a shard
            holds both kinds, in ``transcoded.bits``: see docs/concepts/format.md).

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
    if options is None:
        if keywords.get("append") and "format" not in keywords:
            keywords["format"] = pack_format(out)  # an append takes the pack's own format
        options = PackOptions.of(**keywords)
    elif keywords:
        raise ValueError(
            f"pass the options as keywords or as options=PackOptions(...), not both ({', '.join(keywords)})"
        )
    if isinstance(out, str) and is_url(out) and options.engine == "local" and options.part is None:
        from fastdata.storage.transfer import pack_to_url

        return pack_to_url(
            src,
            out,
            pack_local=cast("Callable[..., Manifest]", pack),  # part is None: pack() gives the Manifest
            resume=options.resume,
            overwrite=options.overwrite,
            options=options.with_(resume=False, overwrite=False),
        )
    source = open_source(src, options)
    count, types = _census(source, options)
    if options.strict and source.skipped:
        first = source.skipped[0]
        raise BadImageError(
            f"{len(source.skipped)} item(s) in SRC cannot be packed, e.g. {first.path}: {first.reason} "
            "(fix them, or pack without --strict to skip and report them)"
        )
    if not count and not source.skipped:
        raise FileNotFoundError(f"no samples in {src}: it holds no image or row to pack")
    options = options.with_(workers=cap_workers(options.workers))
    identity = PackIdentity.of(options, source, count, types)
    if not options.append and (
        options.engine != "local" or options.part is not None or is_url(out) or len(identity.plan) > 1
    ):
        from fastdata.packing.engines import run_plan

        return run_plan(source, identity, out, options, on_shard=on_shard)
    out = create_output(Path(out))
    with OutputLock(out):
        prepare_output(out, resume=options.resume or options.append, overwrite=options.overwrite)
        try:
            if options.append:
                return append_locked(source, identity, out, options, on_shard)
            return _pack_locked(source, identity, out, options, on_shard)
        except BaseException as exc:
            _remove_pieces(out)  # whatever stopped the pack (Ctrl-C, SIGTERM, a full disk), leave no .tmp behind
            if isinstance(exc, OSError) and not isinstance(exc, OutOfSpaceError) and is_out_of_space(exc, out):
                raise out_of_space_error(out, PackJournal(out).progress(), count) from exc
            raise


def _census(source: Source, options: PackOptions) -> tuple[int, dict[str, dict]]:
    """One streamed pass over the source: its number of rows and the types of the fields kept.

    Afterwards the source's classes and skipped rows are complete.
    """
    counted = [0]

    def rows() -> Iterator[dict]:
        for row in source.scan():
            counted[0] += 1
            yield row.fields

    if source.field_types is not None:  # a pack's own fields keep the types its manifest records
        types = dict(source.field_types)
        for _ in rows():
            pass
    elif options.fields:
        types = infer_types(options.fields, rows(), text=source.text)
    else:
        types = {}
        for _ in rows():
            pass
    return counted[0], types


def _remove_pieces(out: Path) -> None:
    try:
        remove_own_files(out, only_tmp=True)
    except OSError as exc:  # pragma: no cover - the next run removes them
        logger.warning("could not remove unfinished pieces in %s: %s", out, exc)


def _pack_locked(
    source: Source,
    identity: PackIdentity,
    out: Path,
    options: PackOptions,
    on_shard: Callable[[ShardInfo], None] | None,
) -> Manifest:
    """The pack itself, with ``out`` locked and checked.

    The rows are streamed from the source (held in
    memory only for a shuffled pack).
    """
    count, types = identity.samples, identity.field_types
    journal = PackJournal(out)
    if (out / MANIFEST_NAME).is_file():  # resume of a pack that had already finished
        manifest = Manifest.load(out)
        identity.check_finished(out, manifest)
        journal.remove()
        return manifest
    entries: list[JournalEntry] = []
    if options.resume and journal.exists():
        check_journal(out, journal.header(), identity.journal_header)
        entries = journal.load(out)
    if not entries:
        journal.start(identity.journal_header)
    start = entries[-1].next_source if entries else 0
    if entries:
        logger.info("resuming after %d complete shards (%d of %d images done)", len(entries), start, count)
    writer = ShardWriter(
        out,
        format=options.format,
        shard_size=options.shard_size,
        samples_per_shard=options.samples_per_shard,
        first_shard=len(entries),
        on_shard=on_shard,
    )
    found = list(source.skipped) if start == 0 else []  # recorded with the first shard, so a resume has them too
    jobs = make_jobs(source, ordered_rows(source, options.shuffle_seed), types, options, start)
    entries += write_shards(jobs, writer, journal, source.classes, options, options.workers, count, start, found)
    if not options.allow_empty and not any(e.shard is not None for e in entries):
        remove_own_files(out)
        raise NothingPackedError([s for e in entries for s in e.skipped])
    return finalize(out, options.format, source.classes, entries, identity.recorded, journal)
