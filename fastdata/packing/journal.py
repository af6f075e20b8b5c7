"""The resume journal of an unfinished pack.

``OUT/.pack-journal.jsonl`` starts with a header line that records the input (SRC, the number
of files, a digest of the file list and labels), the options and a fingerprint of them all,
then gets one line per published shard: the shard's manifest entry, where the next
shard starts in the source order, the files skipped so far and the shard's labels. A pack
that is interrupted (Ctrl-C, kill -9, power loss) resumes after the last complete line whose
shard is still on disk, and because packing is deterministic the result is byte-identical to
an uninterrupted run. The header is this run's
:attr:`~fastdata.packing.identity.PackIdentity.journal_header`, and a resume whose SRC, format or
options differ from the journal's is refused with the differences named
(:func:`fastdata.packing.identity.check_journal`): this module only writes and reads the lines. The
journal is deleted once ``manifest.json`` is written.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fastdata._util.fs import atomic_write_bytes, file_crc32c
from fastdata.formats.manifest_entries import FileWarnings, ShardInfo, SkippedFile
from fastdata.formats.unfinished import JOURNAL_NAME  # readers refuse a folder that holds one (an unfinished pack)


@dataclass
class JournalEntry:
    """One published shard as recorded in the journal."""

    shard: ShardInfo | None
    next_source: int
    skipped: list[SkippedFile]
    labels: list[int]
    warnings: list[FileWarnings] = field(default_factory=list)
    transcoded: list[int] = field(default_factory=list)  # positions in the shard of the transcoded records


class PackJournal:
    """Append-only record of the shards an in-progress pack has published."""

    def __init__(self, out: str | os.PathLike) -> None:
        self.path = Path(out) / JOURNAL_NAME

    def exists(self) -> bool:
        """True when an unfinished (or unfinalized) pack left a journal."""
        return self.path.is_file()

    def start(self, header: dict[str, Any]) -> None:
        """Begin a new journal whose first line is ``header``.

        Begin a new journal whose first line is ``header`` (:attr:`PackIdentity.journal_header
        <fastdata.packing.identity.PackIdentity.journal_header>`, or an append's header).
        """
        atomic_write_bytes(self.path, (json.dumps(header, sort_keys=True) + "\n").encode("utf-8"))

    def first_line(self) -> dict[str, Any] | None:
        """The journal's first line as written, or None when there is no journal or no readable first line."""
        try:
            with self.path.open(encoding="utf-8") as lines:
                return _parse(lines.readline())
        except (OSError, UnicodeDecodeError):
            return None

    def header(self) -> dict[str, Any]:
        """The journal's first line.

        What the run that wrote it recorded (compare it with
        :func:`fastdata.packing.identity.check_journal` before :meth:`load`).

        Raises:
            ValueError: the first line is missing or not a header written by fastdata.
        """
        lines = self.path.read_text(encoding="utf-8").splitlines()
        recorded = (_parse(lines[0]) if lines else None) or {}
        if "fingerprint" not in recorded:
            raise ValueError(
                f"--resume refused: the journal in {self.path.parent} has no valid first line (it was not written "
                "by this version of fastdata, or was damaged): pass --overwrite to start over"
            )
        return recorded

    def load(self, root: Path) -> list[JournalEntry]:
        """Entries of a previous run whose shards are still intact on disk.

        The journal is rewritten to hold
        just those (after its first line, kept as it is).

        Args:
            root: the output folder.
        """
        lines = self.path.read_text(encoding="utf-8").splitlines()
        entries = []
        for line in lines[1:]:
            data = _parse(line)
            if data is None:  # a line cut short by a crash: everything from here is redone
                break
            shard = ShardInfo(**data["shard"])
            entry = JournalEntry(
                shard=shard,
                next_source=int(data["next_source"]),
                skipped=[SkippedFile(**s) for s in data["skipped"]],
                labels=[int(x) for x in data["labels"]],
                warnings=[FileWarnings(**w) for w in data.get("warnings", [])],
                transcoded=[int(x) for x in data.get("transcoded", [])],
            )
            if not shard_intact(root, shard):
                break
            entries.append(entry)
        self._rewrite(lines[0], entries)
        return entries

    def append(self, entry: JournalEntry) -> None:
        """Record a published shard durably."""
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(asdict(entry), sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def progress(self) -> int:
        """Source images done in the journal's complete lines (0 without a journal); nothing is checked or rewritten."""
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except OSError:
            return 0
        done = 0
        for line in lines[1:]:
            data = _parse(line)
            if data is None:
                break
            done = int(data.get("next_source", done))
        return done

    def remove(self) -> None:
        """Delete the journal (after the manifest is written)."""
        self.path.unlink(missing_ok=True)

    def _rewrite(self, header: str, entries: list[JournalEntry]) -> None:
        text = header + "\n" + "".join(json.dumps(asdict(e), sort_keys=True) + "\n" for e in entries)
        atomic_write_bytes(self.path, text.encode("utf-8"))  # an interrupt here leaves the old journal whole


def _parse(line: str) -> dict | None:
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def shard_intact(root: Path, shard: ShardInfo) -> bool:
    """Whether a kept shard (and its index file) still holds the bytes recorded for it: size, then CRC32C.

    A ``--resume`` reads each kept shard once: a shard of the right size whose bytes changed (a
    flipped bit, a torn write that kept the length) is redone rather than trusted.
    """
    path = root / shard.path
    try:
        if not path.is_file() or path.stat().st_size != shard.nbytes or file_crc32c(path) != shard.crc32c:
            return False
        if shard.index is None:
            return True
        index = root / shard.index
        return index.is_file() and (shard.index_crc32c is None or file_crc32c(index) == shard.index_crc32c)
    except OSError:
        return False
