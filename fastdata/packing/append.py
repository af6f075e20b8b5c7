"""``pack --append``: new samples added to a finished pack as new shards, the new manifest written last.

The shards already there are never touched: the new ones get the next shard numbers, the labels
of old and new samples go to a new ``targets-N.npy``, and ``manifest.json`` is replaced
atomically at the end. A reader of the old manifest keeps reading the shards it opened, and
gets :class:`~fastdata.formats.errors.DatasetChangedError` for any other (the manifest it
opened was replaced), never a mixture of the two. New class names are added to the end of the
class table (sorted), so every old label keeps its meaning. An interrupted append leaves the
old dataset as it was; run the same append again.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from fastdata import __version__
from fastdata._fs import atomic_write_bytes
from fastdata.formats.files import crc32c_hex
from fastdata.formats.manifest import Manifest, ShardInfo
from fastdata.formats.packed import open_pack
from fastdata.formats.targets import encode_targets
from fastdata.packing.finish import transcoded_ranges
from fastdata.packing.journal import PackJournal, journal_header
from fastdata.packing.options import PackOptions
from fastdata.packing.pipeline import make_jobs, write_shards
from fastdata.packing.sources.base import Source, source_digest
from fastdata.packing.writer import ShardWriter

_NUMBER = re.compile(r"shard-(\d+)\.")
_TARGETS = re.compile(r"targets(?:-(\d+))?\.npy")


def append_locked(source: Source, count: int, types: dict[str, dict], out: Path, options: PackOptions,
                  on_shard: Callable[[ShardInfo], None] | None) -> Manifest:
    """Append the ``count`` rows of ``source`` (fields of ``types``) to the finished pack in ``out`` (locked by the caller).

    Raises:
        FileNotFoundError: ``out`` holds no finished pack.
        ValueError: the pack has another format or other field types than this append would write.
    """
    old = open_pack(out)
    if old.manifest.format != options.format:
        raise ValueError(f"--append refused: {out} holds a {old.manifest.format} pack, not {options.format}: "
                         f"pass --format {old.manifest.format}")
    classes = list(old.manifest.classes)
    new_names = sorted(set(source.classes) - set(classes))
    classes += new_names
    remap = [classes.index(name) for name in source.classes]
    before = old.manifest.options.get("field_types") or {}
    if types != before:
        raise ValueError(f"--append refused: the new samples' fields {types or 'none'} differ from the pack's "
                         f"{before or 'none'}: pass the same --fields, with values of the same types")
    journal = PackJournal(out)
    journal.remove()  # what an interrupted append left: its shards are rewritten under the same numbers
    digest = source_digest(source.classes, source.scan(), source.skipped)
    journal.start(journal_header(source.src, {"append": digest}, count, digest))
    numbers = [int(m.group(1)) for s in old.manifest.shards if (m := _NUMBER.match(Path(s.path).name))]
    writer = ShardWriter(out, format=options.format, shard_size=options.shard_size,
                         samples_per_shard=options.samples_per_shard,
                         first_shard=max(numbers, default=-1) + 1, on_shard=on_shard)
    jobs = make_jobs(source, source.scan(), types, options, relabel=remap)
    entries = write_shards(jobs, writer, journal, classes, options, options.workers, count, 0, list(source.skipped))
    targets = np.concatenate([old.targets, np.asarray([x for e in entries for x in e.labels], dtype=np.int64)])
    name = _next_targets(old.manifest.targets)
    data = encode_targets(targets)
    atomic_write_bytes(out / name, data)
    recorded = dict(old.manifest.options)
    recorded["appended"] = list(recorded.get("appended", [])) + [digest]
    manifest = replace(
        old.manifest, classes=classes, shards=old.manifest.shards + [e.shard for e in entries if e.shard is not None],
        skipped=old.manifest.skipped + [s for e in entries for s in e.skipped],
        warnings=old.manifest.warnings + [w for e in entries for w in e.warnings], targets=name, options=recorded,
        created_by=f"fastdata {__version__}", targets_nbytes=len(data), targets_crc32c=crc32c_hex(data),
        transcoded=_joined(old.manifest.transcoded or [], transcoded_ranges(entries, old.manifest.num_samples)),
    )
    manifest.save(out)  # the one step that makes the new samples visible
    journal.remove()
    if old.manifest.targets != name:
        (out / old.manifest.targets).unlink(missing_ok=True)
    return manifest


def _joined(old: list[list[int]], new: list[list[int]]) -> list[list[int]]:
    """Two sorted lists of ``[start, stop)`` ranges, the second after the first, as one (touching ranges joined)."""
    if old and new and old[-1][1] == new[0][0]:
        return old[:-1] + [[old[-1][0], new[0][1]]] + new[1:]
    return old + new


def _next_targets(current: str) -> str:
    match = _TARGETS.fullmatch(Path(current).name)
    number = int(match.group(1) or 0) + 1 if match else 1
    return f"targets-{number}.npy"
