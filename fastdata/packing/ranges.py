"""One range of a plan packed as one task: its shards published together, then its record.

:func:`run_range` is what every engine runs (in this process, in a Ray worker, in a scheduler's
job). A task writes its range's shards into a hidden staging folder ``OUT/.range-RRRRR.tmp/``,
moves them into ``OUT`` when the range is complete, and writes the range record
``OUT/.range-RRRRR.json`` last; a task that dies leaves only the staging folder (removed by the
next task of that range), so no shard of an unfinished range is ever published under a name that a
record vouches for, and ``--resume`` redoes exactly the ranges without a record. A task holds
``OUT/.range-RRRRR.lock`` while it runs, so two tasks of one range cannot both write it (the
second is refused, or, if the first finished, returns the first one's record).

With ``url`` set, the task stages in a temporary folder of its own and uploads the shards (index
first) and then the record to the store: the same bytes, for an output no task can lock.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fastdata._util.fs import atomic_write_bytes
from fastdata.formats.manifest_entries import FileWarnings, ShardInfo, SkippedFile
from fastdata.packing.journal import JournalEntry, shard_intact
from fastdata.packing.lock import OutputLock
from fastdata.packing.options import PackOptions
from fastdata.packing.pipeline import Job, write_shards
from fastdata.packing.writer import ShardWriter

__all__ = ["RangeTask", "load_record", "record_entries", "record_name", "run_range"]


def record_name(r: int) -> str:
    """File name of range ``r``'s record: ``.range-00003.json``."""
    return f".range-{r:05d}.json"


@dataclass(frozen=True)
class RangeTask:
    """Everything a task needs to pack range ``index`` (picklable: it travels to Ray workers).

    Attributes:
        out: the output folder (shared by all tasks), or None with ``url``.
        url: an object-store URL to upload to, or None.
        options: the pack's options (shard bounds, strict, and what the jobs need).
        index: the range's number in the plan; ``start``/``stop``: its samples.
        prefix: its shards' name prefix (:meth:`~fastdata.packing.plan.RangePlan.shard_prefix`).
        jobs: its samples, in order.
        classes: the class names.
        header: the pack's header (fingerprint, options, files, classes, ranges: :attr:`PackIdentity.range_header
            <fastdata.packing.identity.PackIdentity.range_header>`), stored in the record as it is.
        found: items the scan left out (range 0 records them).
        workers: reader processes for this task (0: in the task's process).
    """

    out: str | None
    url: str | None
    options: PackOptions
    index: int
    start: int
    stop: int
    prefix: str
    jobs: tuple[Job, ...]
    classes: tuple[str, ...]
    header: dict[str, Any]
    found: tuple[SkippedFile, ...] = ()
    workers: int = 0


class _NoJournal:
    """The range record replaces the per-shard journal: a range is done whole or redone."""

    def append(self, entry: JournalEntry) -> None:
        pass


def run_range(task: RangeTask) -> dict[str, Any]:
    """Pack ``task``'s range and publish it; return its record (``{"header", "range", "start", "stop", "entries"}``).

    A range already complete in ``out`` (same header, shards intact) is not packed again.

    Raises:
        OutputLockedError: another task is writing this range.
        BadImageError: ``strict`` and a bad image.
    """
    if task.url is not None:
        return _run_to_url(task, task.url)
    if task.out is None:
        raise ValueError(f"range task {task.index} has neither out= nor url=: give it where to write")
    out = Path(task.out)
    with OutputLock(out, f".range-{task.index:05d}.lock"):
        done = load_record(out, task.index, task.header)
        if done is not None:
            return done
        (out / record_name(task.index)).unlink(missing_ok=True)
        staging = out / f".range-{task.index:05d}.tmp"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        record = _pack(task, staging)
        for shard in _shards(record):
            if shard.index:
                os.replace(staging / shard.index, out / shard.index)
            os.replace(staging / shard.path, out / shard.path)
        atomic_write_bytes(out / record_name(task.index), _dumps(record))
        shutil.rmtree(staging, ignore_errors=True)
        return record


def _run_to_url(task: RangeTask, url: str) -> dict[str, Any]:
    from fastdata.storage.remote import get_store

    store = get_store(url)
    staging = Path(tempfile.mkdtemp(prefix=f"fastdata-range-{task.index:05d}-"))
    try:
        record = _pack(task, staging)
        for shard in _shards(record):
            if shard.index:  # the index first: a reader never finds a shard without its index
                store.upload(shard.index, staging / shard.index)
            store.upload(shard.path, staging / shard.path)
        (staging / record_name(task.index)).write_bytes(_dumps(record))
        store.upload(record_name(task.index), staging / record_name(task.index))
        return record
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _pack(task: RangeTask, staging: Path) -> dict[str, Any]:
    options = task.options
    writer = ShardWriter(
        staging,
        format=options.format,
        shard_size=options.shard_size,
        samples_per_shard=options.samples_per_shard,
        prefix=task.prefix,
    )
    entries = write_shards(
        list(task.jobs),
        writer,
        _NoJournal(),
        list(task.classes),
        options,
        task.workers,
        task.stop,
        task.start,
        list(task.found),
        progress=False,
    )  # the driver shows one bar
    if not entries or entries[-1].next_source != task.stop:  # an empty range still says where it ends
        entries.append(JournalEntry(None, task.stop, [], []))
    return {
        "header": task.header,
        "range": task.index,
        "start": task.start,
        "stop": task.stop,
        "entries": [asdict(e) for e in entries],
    }


def _dumps(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, sort_keys=True) + "\n").encode("utf-8")


def _shards(record: dict[str, Any]) -> list[ShardInfo]:
    return [e.shard for e in record_entries(record) if e.shard is not None]


def record_entries(record: dict[str, Any]) -> list[JournalEntry]:
    """The journal entries (shards, skipped files, labels, warnings, transcoded positions) of a range record."""
    return [
        JournalEntry(
            shard=ShardInfo(**e["shard"]) if e.get("shard") else None,
            next_source=int(e["next_source"]),
            skipped=[SkippedFile(**s) for s in e["skipped"]],
            labels=[int(x) for x in e["labels"]],
            warnings=[FileWarnings(**w) for w in e.get("warnings", [])],
            transcoded=[int(x) for x in e.get("transcoded", [])],
        )
        for e in record["entries"]
    ]


def load_record(out: Path, r: int, header: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Range ``r``'s record in ``out`` if it is complete: readable, of ``header`` (when given), shards intact."""
    try:
        record = json.loads((out / record_name(r)).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if (
        not isinstance(record, dict)
        or record.get("range") != r
        or (header is not None and record.get("header") != header)
    ):
        return None
    try:
        shards = _shards(record)
    except (KeyError, TypeError, ValueError):
        return None
    if not all(shard_intact(out, shard) for shard in shards):  # size and CRC32C of each shard and index
        return None
    return record
