"""The dataset manifest: the one file that says a pack is complete and what it holds.

``manifest.json`` is written last and atomically by the packer; a folder without it
holds no finished dataset. No code is ever executed to read it (plain JSON).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from fastdata._fs import atomic_write_bytes

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1


@dataclass(frozen=True)
class ShardInfo:
    """One shard of a packed dataset.

    Attributes:
        path: shard file, relative to the dataset root.
        num_samples: records in the shard.
        nbytes: size of the shard file in bytes.
        crc32c: CRC32C of the whole shard file, 8 hex digits.
        index: for TFRecord, the DALI-compatible index file relative to the root; else None.
    """

    path: str
    num_samples: int
    nbytes: int
    crc32c: str
    index: str | None = None


@dataclass(frozen=True)
class SkippedFile:
    """A source file the packer could not use, and why."""

    path: str
    reason: str


@dataclass
class Manifest:
    """What a packed dataset holds.

    Attributes:
        format: storage format name (``"lmdb"`` or ``"tfrecord"``).
        classes: class names; a label is an index into this list.
        shards: the shards in sample order.
        skipped: bad source files that were left out.
        targets: ``.npy`` file (relative) with every sample's int64 label in dataset order.
        options: the pack options that produced the dataset.
        version: manifest schema version.
        created_by: the fastdata version that wrote it.
    """

    format: str
    classes: list[str]
    shards: list[ShardInfo]
    skipped: list[SkippedFile] = field(default_factory=list)
    targets: str = "targets.npy"
    options: dict[str, Any] = field(default_factory=dict)
    version: int = MANIFEST_VERSION
    created_by: str = ""

    @property
    def num_samples(self) -> int:
        """Total number of samples over all shards."""
        return sum(shard.num_samples for shard in self.shards)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (with ``num_samples`` spelled out for plain readers)."""
        data = asdict(self)
        data["num_samples"] = self.num_samples
        for shard in data["shards"]:
            if shard["index"] is None:
                del shard["index"]
        return data

    def save(self, root: str | os.PathLike) -> Path:
        """Write ``root/manifest.json`` atomically (deterministic bytes: sorted keys, no timestamps)."""
        path = Path(root) / MANIFEST_NAME
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        atomic_write_bytes(path, text.encode("utf-8"))
        return path

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "manifest") -> Manifest:
        """Build and validate a manifest from its JSON dict.

        Raises:
            ValueError: a field is missing, of the wrong type, or a path escapes the dataset root.
        """
        try:
            version = int(data["version"])
            if version > MANIFEST_VERSION:
                raise ValueError(
                    f"{source} has version {version}, newer than this fastdata understands "
                    f"({MANIFEST_VERSION}): upgrade fastdata"
                )
            shards = [ShardInfo(**_known(ShardInfo, s)) for s in data["shards"]]
            manifest = cls(
                format=str(data["format"]),
                classes=[str(c) for c in data["classes"]],
                shards=shards,
                skipped=[SkippedFile(**_known(SkippedFile, s)) for s in data.get("skipped", [])],
                targets=str(data.get("targets", "targets.npy")),
                options=dict(data.get("options", {})),
                version=version,
                created_by=str(data.get("created_by", "")),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{source} is malformed ({exc!r}): re-create it with `fastdata pack`") from exc
        for rel in [manifest.targets] + [s.path for s in shards] + [s.index for s in shards if s.index]:
            _check_relative(rel, source)
        declared = data.get("num_samples")
        if declared is not None and int(declared) != manifest.num_samples:
            raise ValueError(
                f"{source} says num_samples={declared} but its shards hold {manifest.num_samples}: "
                "the manifest was edited or damaged; re-create it with `fastdata pack`"
            )
        return manifest

    @classmethod
    def load(cls, root: str | os.PathLike) -> Manifest:
        """Read ``root/manifest.json`` (``root`` may also be the manifest file itself).

        Raises:
            FileNotFoundError: no manifest there (the folder holds no finished pack).
            ValueError: the manifest is not valid JSON or not a fastdata manifest.
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
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path} is not valid JSON ({exc}): re-create it with `fastdata pack`") from exc
        if not isinstance(data, dict):
            raise ValueError(f"{path} is not a fastdata manifest (top level is not an object)")
        return cls.from_dict(data, source=str(path))


def _known(kind: type, data: dict[str, Any]) -> dict[str, Any]:
    """Keep only the fields ``kind`` knows, so newer optional fields do not break older readers."""
    names = kind.__dataclass_fields__.keys()  # type: ignore[attr-defined]
    return {k: v for k, v in data.items() if k in names}


def _check_relative(rel: str, source: str) -> None:
    path = PurePosixPath(rel)
    if path.is_absolute() or ".." in path.parts or not rel:
        raise ValueError(f"{source} names the path {rel!r}, which is not inside the dataset folder; refusing to read it")
