"""``describe`` and ``verify``: what a packed dataset holds, and whether every byte and label is sound."""

from __future__ import annotations

import bisect
import os
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fastdata._util.fs import file_crc32c
from fastdata._util.text import escaped
from fastdata.decode import DEFAULT_MAX_PIXELS, DecodeError, get_decoder, pixel_limit
from fastdata.decode.capture import codec_messages
from fastdata.formats import get_format
from fastdata.formats.errors import CorruptRecordError
from fastdata.formats.example import ImageRecord
from fastdata.formats.fields import fields_table
from fastdata.formats.files import open_regular, resolve_inside
from fastdata.formats.manifest import Manifest
from fastdata.formats.manifest_entries import ShardInfo
from fastdata.formats.targets import load_targets
from fastdata.packing.transcode import restart_interval
from fastdata.storage.transfer import CheckSource

_SHOWN = 5  # label mismatches listed one by one per shard; the rest are counted


@dataclass
class VerifyReport:
    """Problems found by :func:`verify` (empty when the dataset is sound)."""

    records: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def describe(root: str | os.PathLike) -> str:
    """A human-readable summary: samples, classes with counts, shards with sizes, skipped files.

    ``root`` may be a URL (``s3://bucket/x``): only the manifest and labels are downloaded.
    """
    source = CheckSource(root)
    root = source.root
    manifest = Manifest.load(root)
    try:
        targets = load_targets(root.resolve(), manifest, resolve_inside(root, manifest.targets))
        counts = [str(c) for c in np.bincount(targets[targets >= 0], minlength=len(manifest.classes))]
    except (OSError, CorruptRecordError):
        counts = ["?"] * len(manifest.classes)  # the per-class counts come from targets.npy; verify says what is wrong
    total_bytes = sum(s.nbytes for s in manifest.shards)
    names = [escaped(c) for c in manifest.classes]
    lines = [
        f"dataset   {escaped(source.name)}",
        f"format    {manifest.format} (manifest v{manifest.version}, {escaped(manifest.created_by)})",
        f"samples   {manifest.num_samples}",
        f"classes   {len(manifest.classes)}" + (" (unlabelled: every label is -1)" if _unlabelled(manifest) else ""),
    ]
    width = max((len(c) for c in names), default=0)
    lines += [f"  {i:>5}  {name:<{width}}  {counts[i]}" for i, name in enumerate(names)]
    types = (manifest.options or {}).get("field_types") or {}
    lines.append(f"fields    {len(types)}" + ("" if types else " (pack with --fields to keep columns)"))
    lines += [escaped(line) for line in fields_table(types)] if types else []
    lines.append(f"shards    {len(manifest.shards)}, {_human(total_bytes)} in all")
    lines += [f"  {escaped(s.path)}  {s.num_samples} samples  {_human(s.nbytes)}" for s in manifest.shards]
    lines.append(f"skipped   {len(manifest.skipped)}")
    lines += [f"  {escaped(s.path)}: {escaped(s.reason)}" for s in manifest.skipped]
    lines.append(f"warnings  {len(manifest.warnings)} file(s) packed with codec warnings")
    lines += [f"  {escaped(w.path)}: {escaped('; '.join(w.messages))}" for w in manifest.warnings]
    if manifest.transcoded is not None:
        recoded = sum(stop - start for start, stop in manifest.transcoded)
        lines.append(f"transcoded {recoded} of {manifest.num_samples} records (lossless JPEGs with restart intervals)")
    options = ", ".join(f"{escaped(k)}={escaped(v)}" for k, v in sorted(manifest.options.items())
                        if v is not None and k != "field_types")
    lines.append(f"options   {options}")
    return "\n".join(lines)


def verify(
    root: str | os.PathLike, *, decode: bool = True, progress: Callable[[int], None] | None = None
) -> VerifyReport:
    """Check every file, record and label of a packed dataset.

    Files: each one the manifest names stays inside the folder (symlinks resolved), is a regular
    file of the size and CRC32C the manifest records (shards, index files, ``targets.npy``).
    Records: framing and CRCs (TFRecord), per-record CRC32C (LMDB), counts, index files, and that
    each image decodes. Labels: ``targets.npy`` must hold the label each record carries, and the
    class text a record carries must be the manifest's name of its class; in an unlabelled pack (no
    classes, ``pack --unlabelled``) every label must be -1.

    Args:
        root: a folder written by ``fastdata pack``, or its URL (each shard is then downloaded to a
            temporary folder, checked and deleted, one at a time).
        decode: also decode every image (slower, catches damage inside image bytes of formats
            without per-record checksums), under the pixel limit the dataset was packed with;
            the codecs' own messages are not printed (pack recorded them in the manifest).
        progress: called with the number of records checked after each shard.

    Returns:
        A report whose ``problems`` name the file and record of every damage found (a malformed or
        hostile manifest is one problem, and nothing else is checked).

    Raises:
        FileNotFoundError: ``root`` holds no manifest.
    """
    source = CheckSource(root)
    root = source.root
    report = VerifyReport()
    try:
        manifest = Manifest.load(root)
        storage = get_format(manifest.format)
    except ValueError as exc:  # a manifest that is there but damaged (CorruptRecordError included) is damage too
        report.problems.append(f"manifest.json: {exc}")
        return report
    base = root.resolve()
    decoder = get_decoder("auto") if decode else None
    labels: list[array | None] = []
    first = 0
    for shard in manifest.shards:
        first += shard.num_samples
        if not source.fetch(shard):  # a no-op for a local folder; one shard at a time from a URL
            report.problems.append(f"{shard.path}: missing")
            labels.append(None)
            continue
        if not _check_file(base, shard, report.problems):
            labels.append(None)
            continue
        seen = _RecordCheck(shard.path, manifest.classes, decoder,
                            _Positions(manifest.transcoded or [], first - shard.num_samples, first),
                            unlabelled=_unlabelled(manifest))
        with pixel_limit(manifest.options.get("max_pixels", DEFAULT_MAX_PIXELS)):  # the limit the pack applied
            shard_problems = storage.verify(base, shard, seen)  # one read of each record serves every check
        named = tuple(name for name in (shard.path, shard.index) if name)
        report.problems += [p if p.startswith(named) else f"{shard.path}: {p}" for p in shard_problems]
        report.problems += seen.problems
        labels.append(seen.labels)
        source.drop(shard)
        report.records += shard.num_samples
        if progress is not None:
            progress(report.records)
    report.problems += _check_targets(base, manifest, labels)
    return report


def _check_file(root: Path, shard: ShardInfo, problems: list[str]) -> bool:
    """Where, what and how big a shard file is, and its CRC32C; False when its records cannot be read safely."""
    try:
        fd, _ = open_regular(resolve_inside(root, shard.path), nbytes=shard.nbytes)
    except FileNotFoundError:
        problems.append(f"{shard.path}: missing")
        return False
    except CorruptRecordError as exc:
        problems.append(f"{shard.path}: {exc.reason}")
        return False
    actual = file_crc32c(fd)  # the descriptor that was checked, not the path again
    if actual != shard.crc32c:
        problems.append(f"{shard.path}: file CRC32C {actual} != {shard.crc32c} in the manifest")
    return True


class _RecordCheck:
    """The per-record callback of a shard: keeps each record's label, checks its class text and decodes it."""

    def __init__(self, shard_path: str, classes: list[str], decoder, recoded: _Positions | frozenset = frozenset(),
                 *, unlabelled: bool = False) -> None:
        self.shard_path = shard_path
        self.unlabelled = unlabelled  # every label must be -1 (and there is no class)
        self.recoded = recoded  # records the manifest says pack re-coded: their restart intervals must tile MCU rows
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
        if number in self.recoded:
            layout = restart_interval(record.image)
            if layout is None or not layout[0] or layout[1] % layout[0]:
                self.problems.append(f"{where}: the manifest lists it as transcoded, but it is not a JPEG whose "
                                     "restart intervals tile its MCU rows")
        if self.decoder is not None:
            with codec_messages():  # the codecs' own warnings were recorded at pack time; keep them off the terminal
                try:
                    self.decoder.validate(record.image)
                except DecodeError as exc:
                    self.problems.append(f"{where}: image does not decode ({exc})")


class _Positions:
    """Positions in a shard of samples ``[start, stop)`` that ``ranges`` (sample ranges) cover, held as ranges.

    Memory follows the manifest's ranges, not the counts they declare (a hostile ``[[0, 10**9]]`` is one pair).
    """

    def __init__(self, ranges: list[list[int]], start: int, stop: int) -> None:
        self._starts: list[int] = []
        self._stops: list[int] = []
        for a, b in sorted((max(a, start) - start, min(b, stop) - start) for a, b in ranges if a < stop and b > start):
            if self._stops and a <= self._stops[-1]:  # overlapping or touching: one range
                self._stops[-1] = max(self._stops[-1], b)
            else:
                self._starts.append(a)
                self._stops.append(b)

    def __contains__(self, position: int) -> bool:
        k = bisect.bisect_right(self._starts, position) - 1
        return k >= 0 and position < self._stops[k]


def _check_targets(root: Path, manifest: Manifest, labels: list[array | None]) -> list[str]:
    """``targets.npy`` against the manifest (size, CRC32C, header) and against every record's own label."""
    try:
        targets = load_targets(root, manifest, resolve_inside(root, manifest.targets))
    except FileNotFoundError:
        return [f"{manifest.targets}: missing"]
    except CorruptRecordError as exc:
        return [f"{manifest.targets}: {exc.reason}"]
    problems, start = [], 0
    if _unlabelled(manifest) and (targets != -1).any():
        j = int(np.flatnonzero(targets != -1)[0])
        problems.append(f"{manifest.targets}: sample {j} has label {targets[j]}, in a pack without labels (-1)")
    for shard, seen in zip(manifest.shards, labels):
        if seen is not None:
            own = np.frombuffer(seen, np.int64)[: shard.num_samples]  # -1: no readable record
            wrong = np.flatnonzero((own >= 0) & (targets[start:start + len(own)] != own))
            problems += [
                f"{manifest.targets}: sample {start + j} has label {targets[start + j]} but its record "
                f"({shard.path} record {j}) says {seen[j]}" for j in wrong[:_SHOWN].tolist()
            ]
            if len(wrong) > _SHOWN:
                problems.append(f"{manifest.targets}: {len(wrong) - _SHOWN} more labels differ from {shard.path}'s records")
        start += shard.num_samples
    return problems


def _unlabelled(manifest: Manifest) -> bool:
    """A pack made with ``--unlabelled``: no classes, every label -1."""
    return not manifest.classes and bool((manifest.options or {}).get("unlabelled"))


def _human(nbytes: float) -> str:
    for unit in ("B", "KB", "MB"):
        if nbytes < 1000:
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1000
    return f"{nbytes:.1f} GB"
