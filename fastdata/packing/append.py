"""``pack --append``: new samples added to a finished pack as new shards, the new manifest written last.

The shards already there are never touched: the new ones get the next shard numbers, the labels
of old and new samples go to a new ``targets-N.npy`` (which records were re-coded, when a side file is needed, to
``transcoded-N.bits``; an old manifest's ``transcoded`` ranges become per-shard counts), and ``manifest.json`` is
replaced atomically at the end. A reader of the old manifest keeps reading the shards it opened, and
gets :class:`~fastdata.formats.errors.DatasetChangedError` for any other (the manifest it
opened was replaced), never a mixture of the two. New class names are added to the end of the
class table (sorted), so every old label keeps its meaning.

An append must match the options the pack was made with wherever mixing would be wrong (format,
``--keep-bytes``, shard bounds, resizing, the pixel limit:
:data:`~fastdata.packing.identity.SAME_OPTIONS`); a difference is refused in one line naming it
(:meth:`~fastdata.packing.identity.PackIdentity.append_header`). The append's journal header comes from the pack's
:class:`~fastdata.packing.identity.PackIdentity`, handed down by :func:`~fastdata.packing.packer.pack`.
An interrupted append (Ctrl-C, ``kill -9``) leaves the old dataset as it was for every reader (its
manifest is untouched; the new shards are not in it): ``--append --resume`` finishes it after its last
complete shard, byte-identical to an uninterrupted append (and changes nothing once that append has
finished), and a plain ``--append`` starts it over, removing the shards it had written.

Without ``format`` an append takes the pack's own (:func:`pack_format`). An append of samples the pack already
holds (a source whose digest, :func:`~fastdata.packing.sources.base.source_digest`: the same files, labels and
order, is the pack's own ``source_files`` or that of an earlier append) is refused unless ``allow_duplicates``;
so is an unlabelled append to a labelled pack, and the reverse.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from fastdata._util.fs import atomic_write_bytes
from fastdata._util.version import __version__
from fastdata.formats.files import crc32c_hex
from fastdata.formats.manifest import MANIFEST_NAME, Manifest
from fastdata.formats.manifest_entries import ShardInfo
from fastdata.formats.manifest_transcoded import TranscodedRecords
from fastdata.formats.packed import open_pack
from fastdata.formats.targets import encode_targets
from fastdata.packing.finish import transcoded_bits
from fastdata.packing.identity import SAME_OPTIONS, PackIdentity, check_journal
from fastdata.packing.journal import JournalEntry, PackJournal
from fastdata.packing.options import PackOptions
from fastdata.packing.pipeline import make_jobs, write_shards
from fastdata.packing.sources.base import Source
from fastdata.packing.writer import ShardWriter
from fastdata.storage.urls import is_url

__all__ = ["SAME_OPTIONS", "append_locked", "pack_format"]

logger = logging.getLogger(__name__)
_NUMBER = re.compile(r"shard-(\d+)\.")
_TARGETS = re.compile(r"targets(?:-(\d+))?\.npy")


def append_locked(
    source: Source,
    identity: PackIdentity,
    out: Path,
    options: PackOptions,
    on_shard: Callable[[ShardInfo], None] | None,
) -> Manifest:
    """Append the rows of ``source`` to the finished pack in ``out``.

    Append the rows of ``source`` (``identity``: their count, field types and digest) to the finished pack in
    ``out`` (locked by the caller).

    Raises:
        FileNotFoundError: ``out`` holds no finished pack.
        ValueError: the pack has another format, other options (:data:`SAME_OPTIONS`) or other field types than
            this append would write; or ``options.resume`` finds the journal of another append; or the pack already
            holds these samples (unless ``options.allow_duplicates``); or one of the two is unlabelled and the
            other is not.
    """
    old = open_pack(out)
    recoded = TranscodedRecords.load(out, old.manifest)  # checked before anything is written
    header = identity.append_header(out, old.manifest)  # refuses other options or fields, naming them
    _check_labelled(out, old.manifest, options)
    count, types, digest = identity.samples, identity.field_types, identity.source_files
    classes = list(old.manifest.classes)
    new_names = sorted(set(source.classes) - set(classes))
    classes += new_names
    remap = [classes.index(name) for name in source.classes]
    numbers = [int(m.group(1)) for s in old.manifest.shards if (m := _NUMBER.match(Path(s.path).name))]
    first = max(numbers, default=-1) + 1
    journal = PackJournal(out)
    if (
        options.resume
        and (old.manifest.options.get("appended") or [None])[-1] == digest
        and not _onto_this(journal, header)
    ):  # (a journal onto this very manifest: an --allow-duplicates append)
        journal.remove()  # this append had finished (its journal may have outlived the manifest by a moment)
        return old.manifest
    entries: list[JournalEntry] = []
    if options.resume and journal.exists():
        check_journal(out, journal.header(), header)
        entries = journal.load(out)
    if not options.allow_duplicates:
        _check_new(out, old.manifest, digest)
    if not entries:
        if journal.exists():
            logger.warning("an interrupted append in %s is started over (--resume finishes one instead)", out)
        _remove_leftovers(out, old.manifest, first)
        journal.start(header)
    start = entries[-1].next_source if entries else 0
    writer = ShardWriter(
        out,
        format=options.format,
        shard_size=options.shard_size,
        samples_per_shard=options.samples_per_shard,
        first_shard=first + len(entries),
        on_shard=on_shard,
    )
    jobs = make_jobs(source, source.scan(), types, options, start, relabel=remap)
    found = list(source.skipped) if start == 0 else []
    entries += write_shards(jobs, writer, journal, classes, options, options.workers, count, start, found)
    targets = np.concatenate([old.targets, np.asarray([x for e in entries for x in e.labels], dtype=np.int64)])
    name = _next_targets(old.manifest.targets)
    data = encode_targets(targets)
    atomic_write_bytes(out / name, data)
    bits = transcoded_bits(entries, recoded)  # the old shards' counts (and bits) first, then the new ones'
    side = bits.write(out, name)
    recorded = dict(old.manifest.options)
    recorded["appended"] = list(recorded.get("appended", [])) + [digest]
    manifest = replace(
        old.manifest,
        classes=classes,
        shards=bits.shards,
        skipped=old.manifest.skipped + [s for e in entries for s in e.skipped],
        warnings=old.manifest.warnings + [w for e in entries for w in e.warnings],
        targets=name,
        options=recorded,
        created_by=f"fastdata {__version__}",
        targets_nbytes=len(data),
        targets_crc32c=crc32c_hex(data),
        **{"transcoded": None, "transcoded_file": None, "transcoded_nbytes": None, "transcoded_crc32c": None, **side},
    )
    manifest.save(out)  # the one step that makes the new samples visible
    journal.remove()
    if old.manifest.targets != name:
        (out / old.manifest.targets).unlink(missing_ok=True)
    if old.manifest.transcoded_file not in (None, manifest.transcoded_file):
        (out / old.manifest.transcoded_file).unlink(missing_ok=True)
    return manifest


def pack_format(out: str | os.PathLike) -> str:
    """The format of the finished pack in ``out``: what ``--append`` uses when ``--format`` is left out.

    Raises:
        FileNotFoundError: ``out`` holds no finished pack.
        ValueError: ``out`` is a URL, or its manifest is damaged.
    """
    if is_url(out):
        raise ValueError(f"--append to {out} needs --format: the format is read from a local pack only")
    if not (Path(out) / MANIFEST_NAME).is_file():
        raise FileNotFoundError(
            f"--append: {str(out)!r} holds no finished pack (no {MANIFEST_NAME}): pack into it "
            "first (with --format), or name the pack to append to"
        )
    return Manifest.load(out).format


def _onto_this(journal: PackJournal, header: dict) -> bool:
    """Whether ``journal`` is that of an unfinished append of these samples onto the manifest there now."""
    try:
        return journal.exists() and journal.header() == header
    except (OSError, ValueError):
        return False


def _check_labelled(out: Path, manifest: Manifest, options: PackOptions) -> None:
    """Refuse an unlabelled append to a labelled pack, and a labelled append to an unlabelled one."""
    unlabelled = manifest.unlabelled
    if unlabelled != options.unlabelled:
        raise ValueError(
            f"--append refused: {out} is an unlabelled pack: append with --unlabelled"
            if unlabelled
            else f"--append refused: {out} is a labelled pack: append labelled samples, without --unlabelled"
        )


def _check_new(out: Path, manifest: Manifest, digest: str) -> None:
    """Refuse an append whose source ``digest`` is that of the pack or of one of its appends (the same samples)."""
    recorded = manifest.options or {}
    if recorded.get("source_files") == digest:
        what = "the source the pack was made of"
    elif digest in (recorded.get("appended") or []):
        what = f"the pack's append number {list(recorded['appended']).index(digest) + 1}"
    else:
        return
    raise ValueError(
        f"--append refused: {out} already holds these samples: SRC has the same files, labels and order "
        f"as {what}; pass --allow-duplicates to add them again"
    )


def _remove_leftovers(out: Path, manifest: Manifest, first: int) -> None:
    """Remove the shards (and their pieces) an interrupted append left: numbered from ``first``, not in the manifest."""
    kept = {Path(s.path).name for s in manifest.shards} | {Path(s.index).name for s in manifest.shards if s.index}
    for path in out.glob("shard-*"):
        match = _NUMBER.match(path.name)
        if match and int(match.group(1)) >= first and path.name not in kept and path.is_file():
            path.unlink()


def _next_targets(current: str) -> str:
    match = _TARGETS.fullmatch(Path(current).name)
    number = int(match.group(1) or 0) + 1 if match else 1
    return f"targets-{number}.npy"
