"""The resume journal of an unfinished pack.

``OUT/.pack-journal.jsonl`` starts with a header line that records the input (SRC, the number
of files, a digest of the file list and labels), the options and a fingerprint of them all,
then gets one line per published shard: the shard's manifest entry, where the next
shard starts in the source order, the files skipped so far and the shard's labels. A pack
that is interrupted (Ctrl-C, kill -9, power loss) resumes after the last complete line whose
shard is still on disk, and because packing is deterministic the result is byte-identical to
an uninterrupted run. A resume whose SRC, format or options differ from the header's is
refused with the differences named (:func:`differences`). The journal is deleted once
``manifest.json`` is written.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fastdata._util.fs import atomic_write_bytes, file_crc32c
from fastdata.formats.manifest import Manifest
from fastdata.formats.manifest_entries import FileWarnings, ShardInfo, SkippedFile

JOURNAL_NAME = ".pack-journal.jsonl"


@dataclass
class JournalEntry:
    """One published shard as recorded in the journal."""

    shard: ShardInfo | None
    next_source: int
    skipped: list[SkippedFile]
    labels: list[int]
    warnings: list[FileWarnings] = field(default_factory=list)
    transcoded: list[int] = field(default_factory=list)  # positions in the shard of the transcoded records


def fingerprint(options: dict[str, Any]) -> str:
    """A hash of the recorded pack options, ``source_files`` (the digest of the source's rows) included; a resume
    must match it."""
    return hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()


def journal_header(src: str | os.PathLike, options: dict[str, Any], files: int, print_: str) -> dict[str, Any]:
    """The journal's first line, which a ``--resume`` must match.

    Args:
        src: the source as :attr:`Source.src <fastdata.packing.sources.base.Source>` names it (a resolved
            path, so another spelling of the same folder matches, or a URL).
        options: the recorded pack options (:meth:`PackOptions.recorded`), ``source_files`` included.
        files: the number of source files (images found plus items the scan left out).
        print_: :func:`fingerprint` of the options (and so of the source's rows).

    Returns:
        ``{"fingerprint", "src", "options", "files"}``.
    """
    return {"fingerprint": print_, "src": str(src), "options": dict(options), "files": int(files)}


def differences(recorded: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """What differs between a recorded pack (journal header or manifest) and this run, in words.

    Only what ``recorded`` holds is compared (an older journal or manifest may lack ``src`` or
    some options).

    Args:
        recorded: ``{"src", "options", "files"}`` of the earlier run (any may be missing).
        expected: :func:`journal_header` of this run.

    Returns:
        One phrase per difference, e.g. ``"--format is 'tfrecord' (the pack used 'lmdb')"``.
    """
    found = []
    if "src" in recorded and recorded["src"] != expected["src"]:
        found.append(f"SRC is {expected['src']!r} (the pack was made from {recorded['src']!r})")
    then, now = recorded.get("options") or {}, expected["options"]
    for key in sorted(k for k in then if k != "source_files"):
        if then[key] != now.get(key):
            found.append(f"--{key.replace('_', '-')} is {_shown(now.get(key))} (the pack used {_shown(then[key])})")
    if "source_files" in then and then["source_files"] != now.get("source_files"):
        count = f"{recorded['files']} then, {expected['files']} now" if "files" in recorded else f"{expected['files']} now"
        found.append(f"the image files or class folders in SRC are not those the pack was made from ({count})")
    return found


def check_finished(out: Path, manifest: Manifest, header: dict[str, Any]) -> None:
    """Refuse a ``--resume`` of the finished pack in ``out`` when this run's input or options differ.

    The manifest keeps the options and the digest of the source files (not SRC's path), so
    another SRC is recognised by its files.

    Raises:
        ValueError: naming each difference.
    """
    recorded = {"options": manifest.options, "files": manifest.num_samples + len(manifest.skipped)}
    found = differences(recorded, header)
    if found:
        raise ValueError(
            f"--resume refused: {str(out)!r} holds a finished pack of other input or with other options: "
            f"{'; '.join(found)}. Pass the same SRC and options, or --overwrite to pack again"
        )


def _shown(value: Any) -> str:
    return "not set" if value is None else repr(value)


class PackJournal:
    """Append-only record of the shards an in-progress pack has published."""

    def __init__(self, out: str | os.PathLike) -> None:
        self.path = Path(out) / JOURNAL_NAME

    def exists(self) -> bool:
        """True when an unfinished (or unfinalized) pack left a journal."""
        return self.path.is_file()

    def start(self, header: dict[str, Any]) -> None:
        """Begin a new journal whose first line is ``header`` (see :func:`journal_header`)."""
        atomic_write_bytes(self.path, (json.dumps(header, sort_keys=True) + "\n").encode("utf-8"))

    def load(self, header: dict[str, Any], root: Path) -> list[JournalEntry]:
        """Entries of a previous run whose shards are still intact on disk.

        Args:
            header: this run's :func:`journal_header`; the journal's must match it.
            root: the output folder.

        Raises:
            ValueError: the journal was written for another SRC, other files or other options;
                the message names each difference.
        """
        lines = self.path.read_text(encoding="utf-8").splitlines()
        recorded = (_parse(lines[0]) if lines else None) or {}
        if "fingerprint" not in recorded:
            raise ValueError(
                f"--resume refused: the journal in {self.path.parent} has no valid first line (it was not written "
                "by this version of fastdata, or was damaged): pass --overwrite to start over"
            )
        found = differences(recorded, header)
        if found or recorded.get("fingerprint") != header["fingerprint"]:
            raise ValueError(
                f"--resume refused: {self.path.parent} holds an unfinished pack of a different input or with "
                f"different options: {'; '.join(found) or 'its journal records another input'}. "
                "Resume with the same SRC and options, or pass --overwrite to start over"
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
                transcoded=[int(x) for x in data.get("transcoded", [])],
            )
            if not shard_intact(root, entry.shard):
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
