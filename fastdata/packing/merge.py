"""Partial manifests (``--part I/N``) and ``fastdata merge``: the parts' ranges checked, the manifest written last.

A part writes ``OUT/part-IIIII-of-NNNNN.json`` once all its ranges are published: the pack's header
(options, source fingerprint, classes, file count, number of ranges) and each range's record (its shards
with sizes and CRC32Cs, labels, skipped files). :func:`merge` checks that every part of the split is
there and that all were made from the same source with the same options
(:func:`fastdata.packing.identity.check_part`), that their ranges tile the plan and their counts add up,
and that every shard on disk has the size and CRC32C its part recorded; then it writes ``targets.npy``
and ``manifest.json`` exactly as a single-machine pack does (:func:`combine`), so the result is
byte-identical to one. Each refusal is one line that says what is wrong and what to do.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import google_crc32c

from fastdata._util.fs import atomic_write_bytes
from fastdata.formats.manifest import MANIFEST_NAME, Manifest
from fastdata.packing.finish import NothingPackedError, finalize
from fastdata.packing.identity import check_part
from fastdata.packing.journal import JournalEntry
from fastdata.packing.lock import OutputLock
from fastdata.packing.output import RANGE_RECORD
from fastdata.packing.ranges import record_entries, record_name

__all__ = ["combine", "merge", "part_name", "write_part"]

PART_NAME = re.compile(r"part-(\d{5,})-of-(\d{5,})\.json")


def part_name(index: int, parts: int) -> str:
    """File name of part ``index`` of ``parts``: ``part-00002-of-00007.json``."""
    return f"part-{index:05d}-of-{parts:05d}.json"


def write_part(out: Path, index: int, parts: int, header: dict[str, Any], records: list[dict[str, Any]]) -> Path:
    """Write part ``index``/``parts``'s partial manifest (its ranges' records) into ``out``; return its path."""
    data = {"part": index, "parts": parts, "header": header, "records": sorted(records, key=lambda r: r["range"])}
    path = out / part_name(index, parts)
    atomic_write_bytes(path, (json.dumps(data, sort_keys=True) + "\n").encode("utf-8"))
    return path


def combine(out: Path, header: dict[str, Any], records: list[dict[str, Any]], *, allow_empty: bool = False) -> Manifest:
    """Write ``targets.npy`` and ``manifest.json`` from the range records of a whole plan (in any order).

    Raises:
        ValueError: the records do not tile the plan's ``header["files"]`` samples.
        NothingPackedError: no shard at all and not ``allow_empty``.
    """
    entries: list[JournalEntry] = []
    stop = 0
    for record in sorted(records, key=lambda r: r["range"]):
        if record["start"] != stop:
            raise ValueError(
                f"range {record['range']} starts at sample {record['start']}, not {stop}: a range is "
                "missing or belongs to another plan; pack the missing ranges with --resume"
            )
        stop = record["stop"]
        entries += record_entries(record)
    options = header["options"]
    if not allow_empty and not any(e.shard is not None for e in entries):
        raise NothingPackedError([s for e in entries for s in e.skipped])
    return finalize(out, options["format"], header["classes"], entries, options)


def merge(out: str, *, check_crc: bool = True, allow_empty: bool = False) -> Manifest:
    """Check the parts in ``out`` and write its ``manifest.json`` (last); remove the parts and range records.

    Args:
        out: the folder that ``fastdata pack SRC OUT --part I/N`` wrote into, for every I.
        check_crc: read every shard and compare its CRC32C with its part's record (sizes are always checked).
        allow_empty: write a dataset even when every image was skipped.

    Returns:
        The manifest written.

    Raises:
        FileNotFoundError: no part, or a part or shard is missing.
        FileExistsError: ``out`` already holds a finished dataset (with nothing left of its merge: a merge
            stopped after it published the manifest is finished by removing its parts and range records).
        ValueError: parts of different splits, options or sources; a shard of the wrong size or CRC.
    """
    root = Path(out)
    if not root.is_dir():
        raise FileNotFoundError(f"{out!r} is not a folder: pass the OUT that the --part runs packed into")
    with OutputLock(root):
        if (root / MANIFEST_NAME).is_file():
            return _clean_after_publish(root, out)
        parts = _load_parts(root, out)
        first = parts[0]
        records = [rec for part in parts for rec in part["records"]]
        _check_ranges(records, first, out)
        for record in records:
            _check_shards(root, record, check_crc)
        manifest = combine(root, first["header"], records, allow_empty=allow_empty)
        for part in parts:
            (root / part_name(part["part"], part["parts"])).unlink(missing_ok=True)
        for record in records:
            (root / record_name(record["range"])).unlink(missing_ok=True)
        return manifest


def _clean_after_publish(root: Path, out: str) -> Manifest:
    """Finish a merge stopped (killed) after it published ``manifest.json``; refuse leftovers of another pack.

    Its parts and range records are removed when the manifest lists every shard they record, and the manifest is
    returned, as the finished merge would have.
    """
    leftovers = sorted(p for p in root.iterdir() if PART_NAME.fullmatch(p.name) or RANGE_RECORD.fullmatch(p.name))
    if not leftovers:
        raise FileExistsError(f"{out!r} already holds a finished dataset (manifest.json): nothing to merge")
    manifest = Manifest.load(root)
    listed = {(s.path, s.nbytes, s.crc32c) for s in manifest.shards}
    for path in leftovers:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            records = data["records"] if PART_NAME.fullmatch(path.name) else [data]
            shards = [e.shard for record in records for e in record_entries(record) if e.shard is not None]
        except (OSError, ValueError, KeyError, TypeError):
            shards = None
        if shards is None or any((s.path, s.nbytes, s.crc32c) not in listed for s in shards):
            raise FileExistsError(
                f"{out!r} already holds a finished dataset (manifest.json) and {path.name}, which is not of it: "
                "merge parts into an empty folder (or remove the stale part files)"
            )
    for path in leftovers:
        path.unlink(missing_ok=True)
    return manifest


def _load_parts(root: Path, out: str) -> list[dict[str, Any]]:
    found = sorted((int(m.group(2)), int(m.group(1)), p) for p in root.iterdir() if (m := PART_NAME.fullmatch(p.name)))
    if not found:
        raise FileNotFoundError(
            f"no part manifest in {out!r}: run `fastdata pack SRC {out} --part I/N` for every "
            "I in 0..N-1 first, then merge"
        )
    splits = sorted({n for n, _, _ in found})
    if len(splits) > 1:
        raise ValueError(
            f"{out!r} holds parts of different splits (of {' and of '.join(map(str, splits))}): "
            "remove the part-*.json files of the stale split and merge again"
        )
    parts_n = splits[0]
    have = {i: p for _, i, p in found}
    missing = [i for i in range(parts_n) if i not in have]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise FileNotFoundError(
            f"part {missing[0]}/{parts_n}{more} is missing in {out!r}: run `fastdata pack SRC "
            f"{out} --part {missing[0]}/{parts_n}` with the same options, then merge again"
        )
    parts = []
    for i in range(parts_n):
        try:
            parts.append(json.loads(have[i].read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            raise ValueError(
                f"part {i}/{parts_n} in {out!r} cannot be read ({exc}): pack it again with --part {i}/{parts_n}"
            ) from None
    for i, part in enumerate(parts[1:], 1):
        check_part(i, len(parts), parts[0]["header"], part["header"], out)
    return parts


def _check_ranges(records: list[dict[str, Any]], part: dict[str, Any], out: str) -> None:
    header = part["header"]
    ranges = sorted(r["range"] for r in records)
    if ranges != list(range(header["ranges"])):
        missing = sorted(set(range(header["ranges"])) - set(ranges))
        raise ValueError(
            f"the parts in {out!r} do not hold every range of the plan once (missing {missing[:5]}, "
            f"{len(ranges)} of {header['ranges']} held): pack the parts again with --resume"
        )
    for record in records:
        if record["header"] != header:
            raise ValueError(
                f"range {record['range']} in {out!r} was packed from another source or with other "
                "options than its part: pack its part again with --resume"
            )
        if any(e.shard is not None and e.shard.num_samples != len(e.labels) for e in record_entries(record)):
            raise ValueError(
                f"range {record['range']} in {out!r} records shards whose sample counts do not match "
                "its labels: pack its part again"
            )
    total = sum(len(e.labels) + len(e.skipped) for rec in records for e in record_entries(rec))
    if total != header["files"]:
        raise ValueError(
            f"the parts in {out!r} account for {total} files, the source has {header['files']}: "
            "a part is incomplete; pack it again with --resume"
        )


def _check_shards(root: Path, record: dict[str, Any], check_crc: bool) -> None:
    for entry in record_entries(record):
        shard = entry.shard
        if shard is None:
            continue
        for rel, nbytes, crc in (
            (shard.path, shard.nbytes, shard.crc32c),
            (shard.index, shard.index_nbytes, shard.index_crc32c),
        ):
            if rel is None:
                continue
            path = root / rel
            if not path.is_file():
                raise FileNotFoundError(
                    f"{rel} of range {record['range']} is missing in {str(root)!r}: pack its part again with --resume"
                )
            if nbytes is not None and path.stat().st_size != nbytes:
                raise ValueError(
                    f"{rel} of range {record['range']} has {path.stat().st_size} bytes, its part "
                    f"recorded {nbytes}: pack its part again with --resume"
                )
            if check_crc and crc is not None and _crc(path) != crc:
                raise ValueError(
                    f"{rel} of range {record['range']} does not have the CRC32C its part recorded: "
                    "pack its part again with --resume"
                )


def _crc(path: Path) -> str:
    crc = google_crc32c.Checksum()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            crc.update(chunk)
    return crc.hexdigest().decode()
