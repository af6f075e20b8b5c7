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

from fastdata._util.fs import atomic_write_bytes
from fastdata.formats.files import read_regular, resolve_inside

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
        index_nbytes: size of the index file in bytes (None in manifests written before it was recorded).
        index_crc32c: CRC32C of the index file, 8 hex digits (likewise optional).
        meta_crc32c: for LMDB, CRC32C of the shard's ``__meta__`` record (every record's label and
            checksum), checked whenever a reader opens the shard; else None.
    """

    path: str
    num_samples: int
    nbytes: int
    crc32c: str
    index: str | None = None
    index_nbytes: int | None = None
    index_crc32c: str | None = None
    meta_crc32c: str | None = None


@dataclass(frozen=True)
class SkippedFile:
    """A source file the packer could not use, and why."""

    path: str
    reason: str


@dataclass(frozen=True)
class FileWarnings:
    """A packed file whose codec reported damage it worked around, and what it said.

    Attributes:
        path: the source file, relative to the packed folder.
        messages: the codec's messages (libjpeg's "Corrupt JPEG data: 3 extraneous bytes
            before marker 0xc0", a line libtiff printed, a PIL warning, ...).
    """

    path: str
    messages: list[str]


@dataclass
class Manifest:
    """What a packed dataset holds.

    Attributes:
        format: storage format name (``"lmdb"`` or ``"tfrecord"``).
        classes: class names; a label is an index into this list.
        shards: the shards in sample order.
        skipped: bad source files that were left out.
        warnings: packed files that decoded with codec warnings (PIL decodes them too).
        targets: ``.npy`` file (relative) with every sample's int64 label in dataset order.
        options: the pack options that produced the dataset.
        version: manifest schema version.
        created_by: the fastdata version that wrote it.
        targets_nbytes: size of the targets file in bytes (None in older manifests).
        targets_crc32c: CRC32C of the targets file, 8 hex digits (None in older manifests).
        transcoded: ``[start, stop)`` ranges of the samples whose record pack re-coded losslessly
            (a baseline JPEG with restart intervals tiling its MCU rows, see README "What pack
            stores"); the others hold their source bytes. None in older manifests.
    """

    format: str
    classes: list[str]
    shards: list[ShardInfo]
    skipped: list[SkippedFile] = field(default_factory=list)
    warnings: list[FileWarnings] = field(default_factory=list)
    targets: str = "targets.npy"
    options: dict[str, Any] = field(default_factory=dict)
    version: int = MANIFEST_VERSION
    created_by: str = ""
    targets_nbytes: int | None = None
    targets_crc32c: str | None = None
    transcoded: list[list[int]] | None = None

    @property
    def num_samples(self) -> int:
        """Total number of samples over all shards."""
        return sum(shard.num_samples for shard in self.shards)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (with ``num_samples`` spelled out for plain readers)."""
        data = asdict(self)
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
    def from_dict(cls, data: Any, *, source: str = "manifest") -> Manifest:
        """Build and validate a manifest from its JSON dict.

        Every field is checked for its type and range (integers must be JSON integers in
        ``[0, 2**63)``, checksums 8 hex digits) before anything is built from it.

        Raises:
            ValueError: one line naming ``source`` and the field that is missing, of the wrong type,
                out of range, or a path that is not relative to the dataset folder.
        """
        f = _Fields(source)
        root = f.mapping(data, "manifest")
        version = f.integer(root, "version", required=True)
        if version > MANIFEST_VERSION or version < 1:
            raise ValueError(
                f"{source} has version {version}, which this fastdata does not read (it reads 1..{MANIFEST_VERSION}): "
                "upgrade fastdata, or re-create the dataset with `fastdata pack`"
            )
        shards = [f.shard(entry, f"shards[{i}]") for i, entry in enumerate(f.array(root, "shards", required=True))]
        manifest = cls(
            format=f.string(root, "format", required=True),
            classes=[f.check(c, f"classes[{i}]", str, "a string") for i, c in enumerate(f.array(root, "classes", required=True))],
            shards=shards,
            skipped=[f.skipped(entry, f"skipped[{i}]") for i, entry in enumerate(f.array(root, "skipped") or [])],
            warnings=[f.file_warnings(entry, f"warnings[{i}]") for i, entry in enumerate(f.array(root, "warnings") or [])],
            targets=f.path(root, "targets") or "targets.npy",
            options=f.options(root),
            version=version,
            created_by=f.string(root, "created_by") or "",
            targets_nbytes=f.integer(root, "targets_nbytes"),
            targets_crc32c=f.checksum(root, "targets_crc32c"),
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
    def load(cls, root: str | os.PathLike) -> Manifest:
        """Read ``root/manifest.json`` (``root`` may also be the manifest file itself).

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
        return cls.from_dict(parse_json(data, str(path)), source=str(path))


MAX_MANIFEST_BYTES = 256 << 20
_OPTIONAL = ("index", "index_nbytes", "index_crc32c", "meta_crc32c", "targets_nbytes", "targets_crc32c", "transcoded")
_MAX_INT = 2**63
_HEX = frozenset("0123456789abcdef")


def parse_json(data: bytes, source: str) -> Any:
    """Strict JSON: UTF-8, no NaN/Infinity, no number that overflows a float or exceeds Python's digit limit.

    Raises:
        ValueError: one line naming ``source`` (never echoing its contents).
    """
    try:
        return json.loads(data.decode("utf-8"), parse_constant=_no_constant, parse_float=_finite_float)
    except UnicodeDecodeError:
        raise ValueError(f"{source} is not UTF-8 text: re-create it with `fastdata pack`") from None
    except RecursionError:
        raise ValueError(f"{source} is nested too deeply to be a fastdata manifest: re-create it with `fastdata pack`") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source} is not valid JSON ({exc.msg} at line {exc.lineno}): re-create it with `fastdata pack`") from None
    except ValueError as exc:  # NaN, infinity, a 1e999 or an integer of thousands of digits
        raise ValueError(f"{source} is not valid JSON ({exc}): re-create it with `fastdata pack`") from None


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError("a number overflows a float")
    return value


class _Fields:
    """Typed access to the fields of a parsed manifest; every error is one line naming the field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, name: str, expected: str, value: Any) -> ValueError:
        return ValueError(
            f"{self.source}: field {name} must be {expected}, got {_kind(value)}; re-create it with `fastdata pack`"
        )

    def check(self, value: Any, name: str, kind: type, expected: str) -> Any:
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise self.fail(name, expected, value)
        return value

    def get(self, data: dict, key: str, name: str, required: bool) -> Any:
        if key not in data and required:
            raise ValueError(f"{self.source}: field {name} is missing; re-create it with `fastdata pack`")
        return data.get(key)

    def mapping(self, value: Any, name: str) -> dict:
        return self.check(value, name, dict, "an object")

    def array(self, data: dict, key: str, *, required: bool = False, name: str | None = None) -> list | None:
        value = self.get(data, key, name or key, required)
        return None if value is None and not required else self.check(value, name or key, list, "a list")

    def string(self, data: dict, key: str, *, required: bool = False, name: str | None = None) -> str | None:
        value = self.get(data, key, name or key, required)
        return None if value is None and not required else self.check(value, name or key, str, "a string")

    def integer(self, data: dict, key: str, *, required: bool = False, name: str | None = None) -> int | None:
        value = self.get(data, key, name or key, required)
        if value is None and not required:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < _MAX_INT:
            raise self.fail(name or key, "an integer in [0, 2**63)", value)
        return value

    def checksum(self, data: dict, key: str, *, required: bool = False, name: str | None = None) -> str | None:
        value = self.string(data, key, required=required, name=name)
        if value is not None and (len(value) != 8 or not set(value) <= _HEX):
            raise self.fail(name or key, "a CRC32C of 8 lowercase hex digits", value)
        return value

    def path(self, data: dict, key: str, *, required: bool = False, name: str | None = None) -> str | None:
        value = self.string(data, key, required=required, name=name)
        if value is not None:
            _check_relative(value, self.source, name or key)
        return value

    def shard(self, value: Any, name: str) -> ShardInfo:
        entry = self.mapping(value, name)
        return ShardInfo(
            path=self.path(entry, "path", required=True, name=f"{name}.path"),
            num_samples=self.integer(entry, "num_samples", required=True, name=f"{name}.num_samples"),
            nbytes=self.integer(entry, "nbytes", required=True, name=f"{name}.nbytes"),
            crc32c=self.checksum(entry, "crc32c", required=True, name=f"{name}.crc32c"),
            index=self.path(entry, "index", name=f"{name}.index"),
            index_nbytes=self.integer(entry, "index_nbytes", name=f"{name}.index_nbytes"),
            index_crc32c=self.checksum(entry, "index_crc32c", name=f"{name}.index_crc32c"),
            meta_crc32c=self.checksum(entry, "meta_crc32c", name=f"{name}.meta_crc32c"),
        )

    def skipped(self, value: Any, name: str) -> SkippedFile:
        entry = self.mapping(value, name)
        return SkippedFile(
            path=self.string(entry, "path", required=True, name=f"{name}.path"),
            reason=self.string(entry, "reason", required=True, name=f"{name}.reason"),
        )

    def file_warnings(self, value: Any, name: str) -> FileWarnings:
        entry = self.mapping(value, name)
        messages = self.array(entry, "messages", required=True, name=f"{name}.messages")
        return FileWarnings(
            path=self.string(entry, "path", required=True, name=f"{name}.path"),
            messages=[self.check(m, f"{name}.messages[{i}]", str, "a string") for i, m in enumerate(messages)],
        )

    def ranges(self, data: dict, key: str, samples: int) -> list[list[int]] | None:
        """Sorted, disjoint ``[start, stop)`` ranges of sample indices below ``samples``."""
        value = self.array(data, key)
        if value is None:
            return None
        ranges, end = [], 0
        for i, item in enumerate(value):
            pair = self.check(item, f"{key}[{i}]", list, "a [start, stop) pair")
            if len(pair) != 2:
                raise self.fail(f"{key}[{i}]", "a [start, stop) pair", pair)
            start, stop = (self.integer({"v": v}, "v", required=True, name=f"{key}[{i}]") for v in pair)
            if not end <= start < stop <= samples:
                raise ValueError(f"{self.source}: field {key}[{i}] is not a sorted range of the {samples} samples; "
                                 "re-create it with `fastdata pack`")
            ranges.append([start, stop])
            end = stop
        return ranges

    def options(self, data: dict) -> dict[str, Any]:
        return dict(self.mapping(data.get("options", {}), "options"))


def _kind(value: Any) -> str:
    """What a bad value is, without echoing text from the file (numbers are shown, strings are not)."""
    if isinstance(value, bool) or value is None:
        return "null" if value is None else "a bool"
    if isinstance(value, int):
        return str(value) if abs(value) < 10**20 else "an integer of more than 20 digits"
    if isinstance(value, float):
        return f"the float {value!r}"
    return {str: "a string", list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def _check_relative(rel: str, source: str, name: str) -> None:
    path = PurePosixPath(rel)
    if path.is_absolute() or ".." in path.parts or not rel or "\x00" in rel or "\\" in rel:
        raise ValueError(
            f"{source}: field {name} names a path that is not inside the dataset folder "
            "(absolute, empty or with '..'); refusing to read it"
        )
