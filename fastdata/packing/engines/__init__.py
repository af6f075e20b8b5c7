"""Engines that run a pack's range tasks: ``local`` (this machine's process pool), ``ray``, and ``--part I/N``.

:func:`run_plan` is the driver every engine shares: from the pack's
:class:`~fastdata.packing.identity.PackIdentity` (its range plan, :mod:`fastdata.packing.plan`, and the
header every record holds) it makes one :class:`~fastdata.packing.ranges.RangeTask` per range
still to do, hands them to an engine (an object whose ``run(tasks)`` yields each range's record as
it is published), and writes the manifest last from the records (:func:`fastdata.packing.merge.combine`),
or, for ``part=(I, N)``, the part's partial manifest for ``fastdata merge``. The bytes written
never depend on the engine or on the split.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from fastdata.formats.fields import encode_values
from fastdata.formats.manifest import MANIFEST_NAME, Manifest
from fastdata.formats.manifest_entries import ShardInfo
from fastdata.packing.finish import NothingPackedError
from fastdata.packing.identity import PackIdentity
from fastdata.packing.lock import OutputLock
from fastdata.packing.merge import combine, part_name, write_part
from fastdata.packing.options import ENGINES, PackOptions
from fastdata.packing.output import create_output, prepare_output, remove_own_files
from fastdata.packing.pipeline import Job
from fastdata.packing.plan import RangePlan, ordered_rows
from fastdata.packing.ranges import RangeTask, load_record, record_entries, record_name
from fastdata.packing.sources import Source
from fastdata.storage.urls import is_url

__all__ = ["ENGINES", "PartResult", "get_engine", "run_plan"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartResult:
    """What ``pack(..., part=(I, N))`` did: its ranges, of which ``packed`` were packed by this run."""

    part: int
    parts: int
    ranges: list[int]
    packed: int
    num_samples: int
    shards: list[ShardInfo]
    path: Path


def get_engine(name: str, *, workers: int = 0, ray_address: str | None = None) -> Any:
    """The engine called ``name`` (:data:`ENGINES`)."""
    if name == "local":
        from fastdata.packing.engines.local import LocalEngine

        return LocalEngine(workers)
    if name == "ray":
        from fastdata.packing.engines.ray import RayEngine

        return RayEngine(ray_address)
    raise ValueError(f"unknown engine {name!r}: use one of {', '.join(ENGINES)}")


def run_plan(
    source: Source,
    identity: PackIdentity,
    out: str | os.PathLike,
    options: PackOptions,
    *,
    on_shard: Callable[[ShardInfo], None] | None = None,
) -> Manifest | PartResult:
    """Pack the rows of ``source`` into ``out`` range by range with ``options.engine``.

    ``identity``: the pack's recorded facts (:meth:`PackIdentity.of`): its plan, the kept fields' types and the
    header every range record holds. The rows are streamed from the source, one range at a time (all of them
    only for a shuffled pack); see :func:`fastdata.pack` for the rest.
    """
    plan, types, header = identity.plan, identity.field_types, identity.range_header
    resume, overwrite, progress, allow_empty, part = (
        options.resume,
        options.overwrite,
        options.progress,
        options.allow_empty,
        options.part,
    )

    def tasks(todo: list[int], folder: Path | None, url: str | None) -> Iterator[RangeTask]:
        """The tasks of the ranges ``todo``, made as they are needed: one range's rows held at a time."""
        wanted_now, rows = set(todo), ordered_rows(source, options.shuffle_seed)
        for r in range(max(todo, default=-1) + 1):
            start, stop = plan.bounds(r)
            chunk = list(itertools.islice(rows, stop - start))
            if r not in wanted_now:
                continue
            jobs = tuple(
                Job(
                    i,
                    row.locator,
                    row.label,
                    source,
                    options,
                    encode_values(types, row.fields, text=source.text),
                    row.data,
                    row.where,
                )
                for i, row in enumerate(chunk, start)
            )
            yield RangeTask(
                None if folder is None else str(folder),
                url,
                options,
                r,
                start,
                stop,
                plan.shard_prefix(r),
                jobs,
                tuple(source.classes),
                header,
                tuple(source.skipped) if r == 0 else (),
            )

    runner = get_engine(options.engine, workers=options.workers or 0, ray_address=options.ray_address)
    wanted = list(plan.part(*part)) if part else list(range(len(plan)))
    if is_url(out):
        if resume or part:
            raise ValueError(
                f"--resume and --part need OUT to be a folder (shared by all tasks), not {out}: pack "
                "into a shared folder and upload it, or pack to the URL again with --overwrite"
            )
        return _to_url(
            str(out),
            header,
            _Tasks(tasks(wanted, None, str(out)), plan, wanted),
            runner,
            progress,
            overwrite,
            allow_empty,
        )
    out = create_output(Path(out))
    if part:
        return _part(out, identity, part, wanted, tasks, runner, resume, overwrite, progress)
    with OutputLock(out):
        prepare_output(out, resume=resume, overwrite=overwrite)
        if (out / MANIFEST_NAME).is_file():  # resume of a pack that had already finished
            manifest = Manifest.load(out)
            identity.check_finished(out, manifest)
            return manifest
        records = _done(out, identity, wanted) if resume else {}
        if records:
            logger.info(
                "resuming: %d of %d ranges are complete, packing the other %d",
                len(records),
                len(plan),
                len(plan) - len(records),
            )
        todo = [r for r in wanted if r not in records]
        for record in _run(runner, _Tasks(tasks(todo, out, None), plan, todo), progress):
            records[record["range"]] = record
            for entry in record_entries(record):
                if entry.shard is not None and on_shard is not None:
                    on_shard(entry.shard)
        try:
            manifest = combine(out, header, list(records.values()), allow_empty=allow_empty)
        except NothingPackedError:
            remove_own_files(out)
            raise
        for r in records:
            (out / record_name(r)).unlink(missing_ok=True)
        return manifest


def _done(out: Path, identity: PackIdentity, wanted: list[int]) -> dict[int, dict[str, Any]]:
    """The complete ranges in ``out`` of this pack; raises if ``out`` holds ranges of another pack."""
    records = {}
    for r in wanted:
        record = load_record(out, r)
        if record is None:
            continue
        identity.check_ranges(out, record["header"])
        records[r] = record  # load_record checked its shards (size and CRC32C) already
    return records


def _part(
    out: Path,
    identity: PackIdentity,
    part: tuple[int, int],
    wanted: list[int],
    tasks: Callable[[list[int], Path | None, str | None], Iterator[RangeTask]],
    runner: Any,
    resume: bool,
    overwrite: bool,
    progress: bool,
) -> PartResult:
    """Pack the ranges ``wanted`` of part ``part`` into ``out`` (kept where complete) and write its part file."""
    index, parts = part
    if overwrite:
        raise ValueError(
            "--overwrite cannot be used with --part (the other parts share OUT): empty OUT yourself, "
            "or pass --resume to finish this part"
        )
    if (out / MANIFEST_NAME).is_file():
        raise FileExistsError(
            f"{str(out)!r} already holds a finished dataset (manifest.json): pack the parts into an empty folder"
        )
    if (out / part_name(index, parts)).is_file() and not resume:
        raise FileExistsError(
            f"part {index}/{parts} is already packed in {str(out)!r}: pass --resume to check and "
            "keep it, or remove its part file to pack it again"
        )
    records = _done(out, identity, wanted)
    if records and not resume:
        raise FileExistsError(
            f"range {min(records)} of part {index}/{parts} is already packed in {str(out)!r}: "
            "pass --resume to finish the part"
        )
    todo = [r for r in wanted if r not in records]
    for record in _run(runner, _Tasks(tasks(todo, out, None), identity.plan, todo), progress):
        records[record["range"]] = record
    path = write_part(out, index, parts, identity.range_header, list(records.values()))
    entries = [e for rec in records.values() for e in record_entries(rec)]
    return PartResult(
        index,
        parts,
        wanted,
        len(todo),
        sum(len(e.labels) for e in entries),
        [e.shard for e in entries if e.shard is not None],
        path,
    )


def _to_url(url, header, tasks, runner, progress, overwrite, allow_empty) -> Manifest:
    """Tasks upload their shards and records; the driver writes the labels and the manifest, last."""
    from fastdata.storage.remote import get_store
    from fastdata.storage.transfer import _delete_unused, _take_down

    store = get_store(url)
    old = _take_down(store, overwrite)
    records = list(_run(runner, tasks, progress))
    staging = Path(tempfile.mkdtemp(prefix="fastdata-pack-"))
    try:
        manifest = combine(staging, header, records, allow_empty=allow_empty)
        for rel in manifest.side_files:
            store.upload(rel, staging / rel)
        store.upload(MANIFEST_NAME, staging / MANIFEST_NAME)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for record in records:
        store.delete(record_name(record["range"]))
    if old is not None:
        _delete_unused(store, old, manifest)
    return manifest


class _Tasks:
    """The range tasks still to run (an iterator that makes them as needed) and the samples they cover."""

    def __init__(self, tasks: Iterator[RangeTask], plan: RangePlan, todo: list[int]) -> None:
        self.tasks = tasks
        self.samples = sum(plan.bounds(r)[1] - plan.bounds(r)[0] for r in todo)

    def __iter__(self) -> Iterator[RangeTask]:
        return self.tasks


def _run(runner, tasks: _Tasks, progress: bool) -> Iterator[dict[str, Any]]:
    """The records of ``tasks`` from ``runner``, with a progress bar of images (updated as ranges finish)."""
    with tqdm(total=tasks.samples, unit="img", desc=f"pack ({runner.name})", disable=not progress) as bar:
        for record in runner.run(iter(tasks)):
            bar.update(record["stop"] - record["start"])
            yield record
