"""The resume journal of an unfinished pack.

``OUT/.pack-journal.jsonl`` starts with a header line that fingerprints the input and the
options, then gets one line per published shard: the shard's manifest entry, where the next
shard starts in the source order, the files skipped so far and the shard's labels. A pack
that is interrupted (Ctrl-C, kill -9, power loss) resumes after the last complete line whose
shard is still on disk, and because packing is deterministic the result is byte-identical to
an uninterrupted run. The journal is deleted once ``manifest.json`` is written.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fastdata.formats.manifest import FileWarnings, ShardInfo, SkippedFile

JOURNAL_NAME = ".pack-journal.jsonl"


@dataclass
class JournalEntry:
    """One published shard as recorded in the journal."""

    shard: ShardInfo | None
    next_source: int
    skipped: list[SkippedFile]
    labels: list[int]
    warnings: list[FileWarnings] = field(default_factory=list)


def fingerprint(paths: list[str], labels: list[int], options: dict[str, Any]) -> str:
    """A hash of the source list, labels and pack options; a resume must match it."""
    digest = hashlib.sha256(json.dumps(options, sort_keys=True).encode())
    for path, label in zip(paths, labels):
        digest.update(f"{label}\t{path}\n".encode())
    return digest.hexdigest()


class PackJournal:
    """Append-only record of the shards an in-progress pack has published."""

    def __init__(self, out: str | os.PathLike) -> None:
        self.path = Path(out) / JOURNAL_NAME

    def exists(self) -> bool:
        """True when an unfinished (or unfinalized) pack left a journal."""
        return self.path.is_file()

    def start(self, print_: str) -> None:
        """Begin a new journal for the pack whose fingerprint is ``print_``."""
        self.path.write_text(json.dumps({"fingerprint": print_}) + "\n", encoding="utf-8")
        self._sync()

    def load(self, print_: str, root: Path) -> list[JournalEntry]:
        """Entries of a previous run whose shards are still intact on disk.

        Raises:
            ValueError: the journal was written for another input or other options.
        """
        lines = self.path.read_text(encoding="utf-8").splitlines()
        header = _parse(lines[0]) if lines else None
        if not header or header.get("fingerprint") != print_:
            raise ValueError(
                f"{self.path.parent} holds an unfinished pack of a different input or with different options: "
                "resume with the same SRC and options, or pass --overwrite to start over"
            )
        entries = []
        for line in lines[1:]:
            data = _parse(line)
            if data is None:  # a line cut short by a crash: everything from here is redone
                break
            entry = JournalEntry(
                shard=ShardInfo(**data["shard"]),
                next_source=int(data["next_source"]),
                skipped=[SkippedFile(**s) for s in data["skipped"]],
                labels=[int(x) for x in data["labels"]],
                warnings=[FileWarnings(**w) for w in data.get("warnings", [])],
            )
            if not _shard_intact(root, entry.shard):
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

    def remove(self) -> None:
        """Delete the journal (after the manifest is written)."""
        self.path.unlink(missing_ok=True)

    def _rewrite(self, header: str, entries: list[JournalEntry]) -> None:
        text = header + "\n" + "".join(json.dumps(asdict(e), sort_keys=True) + "\n" for e in entries)
        self.path.write_text(text, encoding="utf-8")
        self._sync()

    def _sync(self) -> None:
        with open(self.path, "rb") as f:
            os.fsync(f.fileno())


def _parse(line: str) -> dict | None:
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def _shard_intact(root: Path, shard: ShardInfo) -> bool:
    path = root / shard.path
    if not path.is_file() or path.stat().st_size != shard.nbytes:
        return False
    return shard.index is None or (root / shard.index).is_file()
