"""The dataset manifest: the one file that says a pack is complete and what it holds.

``manifest.json`` is written last and atomically by the packer; a folder without it
holds no finished dataset. No code is ever executed to read it (plain JSON).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from fastdata._util.fs import atomic_write_bytes
from fastdata.formats.files import read_regular, resolve_inside
from fastdata.formats.manifest_columns import shard_columns
from fastdata.formats.manifest_entries import FileWarnings, ShardInfo, SkippedFile
from fastdata.formats.manifest_validation import _Fields, parse_json
from fastdata.formats.shard_table import ShardTable

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1


@dataclass
class Manifest:
    """What a packed dataset holds.

    Attributes:
        format: storage format name (``"lmdb"`` or ``"tfrecord"``).
        classes: class names; a label is an index into this list.
        shards: the shards in sample order: a list, or a reader's :class:`~fastdata.formats.shard_table.ShardTable`.
        skipped: bad source files that were left out.
        warnings: packed files that decoded with codec warnings (PIL decodes them too).
        targets: ``.npy`` file (relative) with every sample's int64 label in dataset order.
        options: the pack options that produced the dataset.
        version: manifest schema version.
        created_by: the fastdata version that wrote it.
        targets_nbytes: size of the targets file in bytes (None in older manifests).
        targets_crc32c: CRC32C of the targets file, 8 hex digits (None in older manifests).
        transcoded: in manifests written before ``transcoded_records``: ``[start, stop)`` ranges of the
            samples whose record pack re-coded losslessly (a baseline JPEG with restart intervals tiling
            its MCU rows, see docs/concepts/format.md); the others hold their source bytes. Still read;
            never written now (scattered records made it grow with the samples).
        transcoded_records: how many records pack re-coded; each shard's count is its
            ``ShardInfo.transcoded`` (None in older manifests).
        transcoded_file: the side file (``transcoded.bits``, one bit per sample) that says which records
            were re-coded, written only when some shard holds both kinds; None otherwise (see
            :mod:`fastdata.formats.manifest_transcoded`).
        transcoded_nbytes: its size in bytes.
        transcoded_crc32c: its CRC32C, 8 hex digits.
    """

    format: str
    classes: list[str]
    shards: Sequence[ShardInfo]  # a list, or the compact ShardTable
    skipped: list[SkippedFile] = field(default_factory=list)
    warnings: list[FileWarnings] = field(default_factory=list)
    targets: str = "targets.npy"
    options: dict[str, Any] = field(default_factory=dict)
    version: int = MANIFEST_VERSION
    created_by: str = ""
    targets_nbytes: int | None = None
    targets_crc32c: str | None = None
    transcoded: list[list[int]] | None = None
    transcoded_records: int | None = None
    transcoded_file: str | None = None
    transcoded_nbytes: int | None = None
    transcoded_crc32c: str | None = None

    @property
    def transcoded_count(self) -> int | None:
        """How many records pack re-coded losslessly; None when the manifest predates the record of it."""
        if self.transcoded_records is not None:
            return self.transcoded_records
        if self.transcoded is not None:
            return sum(stop - start for start, stop in self.transcoded)
        return None

    @property
    def side_files(self) -> list[str]:
        """The files besides the shards and their indexes that this manifest names.

        The labels, and the transcoded
        side file when there is one (uploaded, mirrored and verified with the shards).
        """
        return [self.targets] + ([self.transcoded_file] if self.transcoded_file else [])

    @property
    def unlabelled(self) -> bool:
        """A pack made with ``--unlabelled``: no classes, every label -1."""
        return not self.classes and bool((self.options or {}).get("unlabelled"))

    @property
    def num_samples(self) -> int:
        """Total number of samples over all shards."""
        if isinstance(self.shards, ShardTable):  # a reader's manifest: one column sum
            return self.shards.total_samples
        return sum(shard.num_samples for shard in self.shards)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (with ``num_samples`` spelled out for plain readers)."""
        data = asdict(replace(self, shards=[]))
        data["shards"] = [asdict(shard) for shard in self.shards]  # a list or a ShardTable
        data["num_samples"] = self.num_samples
        for entry in [data] + data["shards"]:  # optional fields are left out rather than written as null
            for key in [k for k in _OPTIONAL if entry.get(k, 0) is None]:
                del entry[key]
        return data

    def save(self, root: str | os.PathLike) -> Path:
        """Write ``root/manifest.json`` atomically (deterministic bytes: sorted keys, no timestamps)."""
        path = Path(root) / MANIFEST_NAME
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        atomic_write_bytes(path, text.encode("utf-8"))
        return path

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "manifest", compact: bool = False) -> Manifest:
        """Build and validate a manifest from its JSON dict.

        Every field is checked for its type and range (integers must be JSON integers in
        ``[0, 2**63)``, checksums 8 hex digits) before anything is built from it.

        Raises:
            ValueError: one line naming ``source`` and the field that is missing, of the wrong type,
                out of range, or a path that is not relative to the dataset folder.

        ``compact=True`` keeps the shards as a :class:`~fastdata.formats.shard_table.ShardTable` (what readers hold).
        """
        f = _Fields(source)
        root = f.mapping(data, "manifest")
        version = f.integer(root, "version", required=True)
        if version > MANIFEST_VERSION or version < 1:
            raise ValueError(
                f"{source} has version {version}, which this fastdata does not read (it reads 1..{MANIFEST_VERSION}): "
                "upgrade fastdata, or re-create the dataset with `fastdata pack`"
            )
        listed = f.array(root, "shards", required=True)
        columns = shard_columns(listed, f)  # every shard checked a column at a time
        if columns is None:  # some entry is bad: the walk one entry at a time names its field in one line
            entries = (f.shard(entry, f"shards[{i}]") for i, entry in enumerate(listed))
            shards: Sequence[ShardInfo] = ShardTable(entries) if compact else list(entries)
        else:
            table = ShardTable.from_columns(columns.paths, columns.indexes, columns.numbers, columns.sums)
            shards = table if compact else list(table)
        manifest = cls(
            format=f.string(root, "format", required=True),
            classes=[
                f.check(c, f"classes[{i}]", str, "a string")
                for i, c in enumerate(f.array(root, "classes", required=True))
            ],
            shards=shards,
            skipped=[f.skipped(entry, f"skipped[{i}]") for i, entry in enumerate(f.array(root, "skipped") or [])],
            warnings=[
                f.file_warnings(entry, f"warnings[{i}]") for i, entry in enumerate(f.array(root, "warnings") or [])
            ],
            targets=f.unique(f.path(root, "targets") or "targets.npy", "targets"),
            options=f.options(root),
            version=version,
            created_by=f.string(root, "created_by") or "",
            targets_nbytes=f.integer(root, "targets_nbytes"),
            targets_crc32c=f.checksum(root, "targets_crc32c"),
            transcoded_records=f.integer(root, "transcoded_records"),
            transcoded_file=f.unique(f.path(root, "transcoded_file"), "transcoded_file"),
            transcoded_nbytes=f.integer(root, "transcoded_nbytes"),
            transcoded_crc32c=f.checksum(root, "transcoded_crc32c"),
        )
        manifest.transcoded = f.ranges(root, "transcoded", manifest.num_samples)
        declared = f.integer(root, "num_samples")
        if declared is not None and declared != manifest.num_samples:
            raise ValueError(
                f"{source} says num_samples={declared} but its shards hold {manifest.num_samples}: "
                "the manifest was edited or damaged; re-create it with `fastdata pack`"
            )
        return manifest

    @classmethod
    def load(cls, root: str | os.PathLike, *, compact: bool = False) -> Manifest:
        """Read ``root/manifest.json``.

        Read ``root/manifest.json`` (``root`` may also be the manifest file itself); ``compact`` as
        :meth:`from_dict`.

        The file must be a regular file inside ``root`` (no symlink out of it) of at most
        ``MAX_MANIFEST_BYTES``; it is parsed as plain JSON (no NaN, no infinity) and validated.

        Raises:
            FileNotFoundError: no manifest there (the folder holds no finished pack).
            ValueError: one line: the manifest is not valid JSON, not a fastdata manifest, or a field is bad.
            CorruptRecordError: the manifest is not a regular file inside the folder, or is too large.
        """
        path = Path(root)
        if not path.exists():
            raise FileNotFoundError(f"{str(path)!r} does not exist: pass a folder written by `fastdata pack`")
        if path.is_dir():
            path = path / MANIFEST_NAME
        if not path.is_file():
            raise FileNotFoundError(
                f"no {MANIFEST_NAME} in {str(path.parent)!r}: not a finished fastdata pack "
                "(run `fastdata pack SRC OUT`, or `--resume` an interrupted one)"
            )
        data = read_regular(resolve_inside(path.parent, path.name), max_bytes=MAX_MANIFEST_BYTES)
        return cls.from_dict(parse_json(data, str(path)), source=str(path), compact=compact)


#: The largest manifest read: about 3.7M shards with every field (a million LMDB shards with sidecars write 288 MB;
#: parsing it peaks near 2.5 GB of memory, the JSON objects, before the reader keeps its compact ShardTable).
MAX_MANIFEST_BYTES = 1 << 30
_OPTIONAL = (
    "index",
    "index_nbytes",
    "index_crc32c",
    "meta_crc32c",
    "targets_nbytes",
    "targets_crc32c",
    "transcoded",
    "transcoded_records",
    "transcoded_file",
    "transcoded_nbytes",
    "transcoded_crc32c",
)
