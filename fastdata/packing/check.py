"""``describe`` and ``verify``: what a packed dataset holds, and whether every record is sound."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from fastdata._fs import file_crc32c
from fastdata.decode import DecodeError, get_decoder
from fastdata.formats import get_format
from fastdata.formats.manifest import Manifest
from fastdata.storage.transfer import CheckSource


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
    targets = np.load(root / manifest.targets, allow_pickle=False)
    counts = np.bincount(targets, minlength=len(manifest.classes))
    total_bytes = sum(s.nbytes for s in manifest.shards)
    lines = [
        f"dataset   {source.name}",
        f"format    {manifest.format} (manifest v{manifest.version}, {manifest.created_by})",
        f"samples   {manifest.num_samples}",
        f"classes   {len(manifest.classes)}",
    ]
    width = max((len(c) for c in manifest.classes), default=0)
    lines += [f"  {i:>5}  {name:<{width}}  {counts[i]}" for i, name in enumerate(manifest.classes)]
    lines.append(f"shards    {len(manifest.shards)}, {_human(total_bytes)} in all")
    lines += [f"  {s.path}  {s.num_samples} samples  {_human(s.nbytes)}" for s in manifest.shards]
    lines.append(f"skipped   {len(manifest.skipped)}")
    lines += [f"  {s.path}: {s.reason}" for s in manifest.skipped]
    options = ", ".join(f"{k}={v}" for k, v in sorted(manifest.options.items()) if v is not None)
    lines.append(f"options   {options}")
    return "\n".join(lines)


def verify(
    root: str | os.PathLike, *, decode: bool = True, progress: Callable[[int], None] | None = None
) -> VerifyReport:
    """Check every shard and record: file checksums, framing/CRCs, index files, counts, and that each image decodes.

    Args:
        root: a folder written by ``fastdata pack``, or its URL (each shard is then downloaded to a
            temporary folder, checked and deleted, one at a time).
        decode: also decode every image (slower, catches damage inside image bytes of formats
            without per-record checksums).
        progress: called with the number of records checked after each shard.

    Returns:
        A report whose ``problems`` name the shard and record of every damage found.
    """
    source = CheckSource(root)
    root = source.root
    manifest = Manifest.load(root)
    storage = get_format(manifest.format)
    report = VerifyReport()
    decoder = get_decoder("auto") if decode else None
    for shard in manifest.shards:
        path = root / shard.path
        if not source.fetch(shard):
            report.problems.append(f"{shard.path}: missing")
            continue
        actual = file_crc32c(path)
        if actual != shard.crc32c:
            report.problems.append(f"{shard.path}: file CRC32C {actual} != {shard.crc32c} in the manifest")
        undecodable: list[str] = []
        on_image = None if decoder is None else _decode_check(decoder, shard.path, undecodable)
        shard_problems = storage.verify(root, shard, on_image)  # one read of each record serves both checks
        report.problems += [f"{shard.path}: {p}" if not p.startswith(shard.path) else p for p in shard_problems]
        report.problems += undecodable
        source.drop(shard)
        report.records += shard.num_samples
        if progress is not None:
            progress(report.records)
    targets = root / manifest.targets
    if not targets.is_file() or len(np.load(targets, allow_pickle=False)) != manifest.num_samples:
        report.problems.append(f"{manifest.targets}: missing or not one label per sample")
    return report


def _decode_check(decoder, shard_path: str, problems: list[str]) -> Callable[[int, bytes], None]:
    """A per-record callback that records images which do not decode."""

    def check(number: int, data: bytes) -> None:
        try:
            decoder.validate(data)
        except DecodeError as exc:
            problems.append(f"{shard_path}: record {number}: image does not decode ({exc})")

    return check


def _human(nbytes: float) -> str:
    for unit in ("B", "KB", "MB"):
        if nbytes < 1000:
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1000
    return f"{nbytes:.1f} GB"
