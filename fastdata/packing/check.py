"""``verify``: whether every byte and label of a packed dataset is sound.

``verify`` (``fastdata verify``): whether every byte and label of a packed dataset is sound, shard by shard in a
process pool, in memory that grows with the shards, not with the samples.

Each shard is checked in one worker (file size and CRC32C, framing, per-record checksums, index file, each
record's label and class text, the transcoded layout, and with ``decode`` that each image decodes); a worker
returns the shard's problems and its records' labels, which the parent compares with a slice of ``targets.npy``
and drops. The findings and their order are the same for any number of workers. ``describe`` (``fastdata
inspect``) lives in :mod:`fastdata.packing.summary` and is re-exported here.
"""

from __future__ import annotations

import os
import sys
from array import array
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from fastdata.decode import DEFAULT_MAX_PIXELS, DecodeError, get_decoder, pixel_limit
from fastdata.decode.capture import codec_messages
from fastdata.formats import get_format
from fastdata.formats.errors import CorruptRecordError
from fastdata.formats.example import ImageRecord
from fastdata.formats.manifest import Manifest
from fastdata.formats.manifest_transcoded import TranscodedRecords
from fastdata.packing.check_files import TargetsFile, check_shard_file, sparse_shard
from fastdata.packing.pool import OrderedProcessMap, cap_workers
from fastdata.packing.summary import describe, summary
from fastdata.packing.transcode import restart_interval
from fastdata.storage.transfer import CheckSource

__all__ = ["VerifyReport", "describe", "summary", "verify"]

_SHOWN = 5  # label mismatches listed one by one per shard; the rest are counted


@dataclass
class VerifyReport:
    """Problems found by :func:`verify` (empty when the dataset is sound)."""

    records: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems


def verify(
    root: str | os.PathLike,
    *,
    decode: bool = True,
    progress: bool | Callable[[int], None] | None = None,
    workers: int | None = None,
) -> VerifyReport:
    """Check every file, record and label of a packed dataset.

    Files: each one the manifest names stays inside the folder (symlinks resolved), is a regular
    file of the size and CRC32C the manifest records (shards, index files, ``targets.npy``, ``transcoded.bits``),
    and a shard's data on disk can hold the records it declares (a sparse file is refused before anything is
    read). Records: framing and CRCs (TFRecord), per-record CRC32C (LMDB), counts, index files, and that
    each image decodes. Labels: ``targets.npy`` must hold the label each record carries, and the
    class text a record carries must be the manifest's name of its class.

    Args:
        root: a folder written by ``fastdata pack``, or its URL (each shard is then downloaded to a
            temporary folder by the worker that checks it, and deleted).
        decode: also decode every image (slower, catches damage inside image bytes of formats
            without per-record checksums), under the pixel limit the dataset was packed with;
            the codecs' own messages are not printed (pack recorded them in the manifest).
        progress: True: a progress bar of records on stderr; a callable: called with the number of records
            checked after each shard; None or False: nothing.
        workers: processes that check shards side by side (default, and at most: the CPUs this process may
            use; 0 or 1: in this process). Never more than the shards.

    Returns:
        A report whose ``problems`` name the file and record of every damage found (a malformed or
        hostile manifest, or a sparse shard, is one problem, and nothing else is checked).

    Raises:
        FileNotFoundError: ``root`` holds no manifest.
    """
    source = CheckSource(root)
    report = VerifyReport()
    try:
        manifest = Manifest.load(source.root)
        get_format(manifest.format)
    except ValueError as exc:  # a manifest that is there but damaged (CorruptRecordError included) is damage too
        report.problems.append(f"manifest.json: {exc}")
        return report
    base = source.root.resolve()
    refused = sparse_shard(base, manifest) if source.store is None else None
    if refused:
        report.problems.append(refused)
        return report
    late: list[str] = []  # the side files' and labels' findings, reported after the shards'
    recoded = _transcoded(base, manifest, late)
    targets = _targets(base, manifest, late)
    context = _Context(source, base, manifest, decode, recoded)
    tasks, first = [], 0
    for k, shard in enumerate(manifest.shards):
        tasks.append((context, k, first))
        first += shard.num_samples
    count = min(cap_workers(workers), len(tasks))
    with ExitStack() as stack:
        stack.callback(lambda: targets.close() if targets is not None else None)
        if count > 1:  # the workers are forked before the progress bar's thread starts
            results = stack.enter_context(OrderedProcessMap(_check_shard, tasks, workers=count, chunksize=1))
        else:
            results = map(_check_shard, tasks)
        bar = stack.enter_context(
            tqdm(
                total=manifest.num_samples,
                unit="rec",
                desc="verify",
                file=sys.stderr,
                disable=progress is not True,
                smoothing=0.05,
            )
        )
        for (_, k, start), (problems, labels) in zip(tasks, results, strict=False):
            shard = manifest.shards[k]
            report.problems += problems
            if labels is not None:
                report.records += shard.num_samples
                if targets is not None:
                    late += _compare(manifest, targets, shard.path, start, labels)
            bar.update(shard.num_samples)
            if callable(progress):
                progress(report.records)
    report.problems += late
    return report


@dataclass
class _Context:
    """What every shard's check needs; inherited by the forked workers (never pickled)."""

    source: CheckSource
    root: Path
    manifest: Manifest
    decode: bool
    recoded: TranscodedRecords | None


def _check_shard(task: tuple[_Context, int, int]) -> tuple[list[str], np.ndarray | None]:
    """One shard's problems and its records' labels.

    One shard's problems, and its records' labels (-1 for a record that could not be read; None when the
    shard's records could not be read at all). Runs in a worker.
    """
    context, k, _ = task
    manifest = context.manifest
    shard = manifest.shards[k]
    if not context.source.fetch(shard):  # a no-op for a local folder; a download from a URL
        return [f"{shard.path}: missing"], None
    try:
        problems: list[str] = []
        if not check_shard_file(context.root, shard, problems):
            return problems, None
        decoder = get_decoder("auto") if context.decode else None
        mask = context.recoded.shard_mask(k) if context.recoded is not None else None
        seen = _RecordCheck(shard.path, manifest.classes, decoder, mask, unlabelled=manifest.unlabelled)
        with pixel_limit(manifest.options.get("max_pixels", DEFAULT_MAX_PIXELS)):  # the limit the pack applied
            found = get_format(manifest.format).verify(context.root, shard, seen)  # one read serves every check
        named = tuple(name for name in (shard.path, shard.index) if name)
        problems += [p if p.startswith(named) else f"{shard.path}: {p}" for p in found]
        return problems + seen.problems, np.frombuffer(seen.labels, np.int64)
    finally:
        context.source.drop(shard)


class _RecordCheck:
    """The per-record callback of a shard: keeps each record's label, checks its class text and decodes it."""

    def __init__(
        self,
        shard_path: str,
        classes: list[str],
        decoder,
        recoded: np.ndarray | None = None,
        *,
        unlabelled: bool = False,
    ) -> None:
        self.shard_path = shard_path
        self.unlabelled = unlabelled  # a pack made with --unlabelled: every label must be -1, there is no class
        self.recoded = recoded  # a bool per record: pack re-coded it, so its restart intervals must tile MCU rows
        self.classes = classes
        self.decoder = decoder
        self.labels = array("q")
        self.problems: list[str] = []
        self._named: set[int] = set()

    def __call__(self, number: int, record: ImageRecord) -> None:
        if number > len(self.labels):  # records before this one were damaged: no label from them
            self.labels.extend([-1] * (number - len(self.labels)))
        self.labels.append(record.label if record.label >= 0 else -1)
        where = f"{self.shard_path}: record {number}"
        if self.unlabelled:
            if record.label != -1:
                self.problems.append(f"{where}: its label {record.label} is not -1, in a pack without labels")
        elif not 0 <= record.label < len(self.classes):
            self.problems.append(f"{where}: its label {record.label} is outside the {len(self.classes)} classes")
        elif record.class_name and record.class_name != self.classes[record.label] and record.label not in self._named:
            self._named.add(record.label)  # once per class: an edited class name shows up on every record
            self.problems.append(
                f"{where}: its class text is not {self.classes[record.label]!r}, the manifest's name of class "
                f"{record.label} (an edited class table?)"
            )
        if self.recoded is not None and number < len(self.recoded) and self.recoded[number]:
            layout = restart_interval(record.image)
            if layout is None or not layout[0] or layout[1] % layout[0]:
                self.problems.append(
                    f"{where}: the manifest lists it as transcoded, but it is not a JPEG whose "
                    "restart intervals tile its MCU rows"
                )
        if self.decoder is not None:
            with codec_messages():  # the codecs' own warnings were recorded at pack time; keep them off the terminal
                try:
                    self.decoder.validate(record.image)
                except DecodeError as exc:
                    self.problems.append(f"{where}: image does not decode ({exc})")


def _transcoded(root: Path, manifest: Manifest, problems: list[str]) -> TranscodedRecords | None:
    """The manifest's transcoded records (its side file checked); None, with the problem, when they cannot be read."""
    try:
        return TranscodedRecords.load(root, manifest)
    except FileNotFoundError:
        problems.append(f"{manifest.transcoded_file}: missing")
    except CorruptRecordError as exc:
        problems.append(f"{manifest.transcoded_file}: {exc.reason}")
    except ValueError as exc:
        problems.append(str(exc))
    return None


def _targets(root: Path, manifest: Manifest, problems: list[str]) -> TargetsFile | None:
    """``targets.npy`` checked against the manifest (size, CRC32C, header, labels); None, with the problem, if bad."""
    try:
        return TargetsFile(root, manifest)
    except FileNotFoundError:
        problems.append(f"{manifest.targets}: missing")
    except CorruptRecordError as exc:
        problems.append(f"{manifest.targets}: {exc.reason}")
    return None


def _compare(manifest: Manifest, targets: TargetsFile, shard: str, start: int, own: np.ndarray) -> list[str]:
    """The samples of a shard whose ``targets.npy`` label is not the label their record carries (-1: unread)."""
    own = own[: max(0, min(len(own), manifest.num_samples - start))]
    expected = targets.labels(start, start + len(own))
    wrong = np.flatnonzero((own >= 0) & (expected != own))
    problems = [
        f"{manifest.targets}: sample {start + j} has label {expected[j]} but its record ({shard} record {j}) "
        f"says {own[j]}"
        for j in wrong[:_SHOWN].tolist()
    ]
    if len(wrong) > _SHOWN:
        problems.append(f"{manifest.targets}: {len(wrong) - _SHOWN} more labels differ from {shard}'s records")
    return problems
