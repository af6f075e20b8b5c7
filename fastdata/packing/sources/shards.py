"""Existing shards as a source.

A fastdata pack (converted to another format or layout), or
third-party TFRecords with the standard ``image/encoded`` and ``image/class/label`` features.

Fields come along: a pack's per-sample fields (all of them, or those ``--fields`` names) keep the types
its manifest records; a TFRecord's extra features named by ``--fields`` are read as lists (``int64_list``,
``float_list``, ``bytes_list`` as UTF-8 text), a feature with exactly one value in every record as that
value, and typed like any other source's columns. A named field that a record lacks skips the record
with the reason; one that no record has, or that a pack does not hold, is refused in one line.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from typing_extensions import override

from fastdata.formats.manifest_entries import SkippedFile
from fastdata.packing.sources.base import Labels, Row, Source


class PackSource(Source):
    """The samples of a finished fastdata pack, in its order, with its classes, labels and fields.

    A locator is ``shard:record``; images and fields are read (and CRC-checked) by the pack's own readers.

    Args:
        root: the pack's folder.
        fields: the fields to carry (default: every field the pack holds), with the manifest's types.

    Raises:
        ValueError: a field in ``fields`` that the pack does not hold (the message lists those it has).
    """

    name = "pack"
    field_types: dict[str, dict]  # never None here: the pack's manifest records its fields' types

    def __init__(self, root: str | os.PathLike, *, fields: tuple[str, ...] = ()) -> None:
        from fastdata.formats.fields import field_types
        from fastdata.formats.packed import open_pack

        super().__init__(str(Path(root).resolve()))
        self.pack = open_pack(root)
        self.classes = list(self.pack.manifest.classes)
        self._readers: dict[int, Any] = {}
        self._positions: tuple[int, Any, Any] | None = None  # (shard, positions, sizes) of the shard last read
        held = (self.pack.manifest.options or {}).get("field_types") or {}
        self.fields, self.field_types = field_types(self.pack.manifest, tuple(fields) or tuple(held))

    @override
    def scan(self) -> Iterator[Row]:
        from fastdata.formats.errors import CorruptRecordError
        from fastdata.formats.fields import decode_values

        self.skipped = []
        number = 0
        for shard, info in enumerate(self.pack.manifest.shards):
            for j in range(info.num_samples):
                locator = f"{info.path}:{j}"
                values: dict[str, Any] = {}
                if self.fields:
                    located = self._located(shard, j)  # a damaged or missing .idx fails the source, as at open
                    try:
                        feature = self._reader(shard).read_fields(*located)
                        missing = [f for f in self.fields if f not in feature]
                        if missing:
                            raise ValueError(f"the record has no field {', '.join(map(repr, missing))}")
                        values = {
                            k: _plain(v) for k, v in decode_values(self.field_types, self.fields, feature).items()
                        }
                    except (CorruptRecordError, ValueError) as exc:
                        self.skipped.append(SkippedFile(f"{locator} (record {number + 1})", str(exc)))
                        number += 1
                        continue
                yield Row(locator, int(self.pack.targets[number]), values)
                number += 1

    def _reader(self, shard: int) -> Any:
        from fastdata.formats import get_format

        if shard not in self._readers:
            info = self.pack.manifest.shards[shard]
            self._readers[shard] = get_format(self.pack.manifest.format).reader(
                Path(self.pack.shard_paths[shard]), expected=info, index=self.pack.index_path(shard)
            )
        return self._readers[shard]

    @override
    def open(self, locator: str) -> bytes:
        path, j = locator.rsplit(":", 1)
        shard = next(i for i, s in enumerate(self.pack.manifest.shards) if s.path == path)
        return self._reader(shard).read(*self._located(shard, int(j)))[0]

    def _located(self, shard: int, j: int) -> tuple[int, int]:
        """Where record ``j`` of ``shard`` lies (the shard's index read once while its records are read in order)."""
        if self._positions is None or self._positions[0] != shard:
            self._positions = (shard, *self.pack.locate(shard))
        return int(self._positions[1][j]), int(self._positions[2][j])

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__, _readers={}, _positions=None)


def tfrecord_files(src: str | os.PathLike) -> list[Path]:
    """The TFRecord files of ``src``: one file, a glob, or a folder's files (index files left out), sorted."""
    text = os.fspath(src)
    if any(c in text for c in "*?["):
        files = sorted(Path(p) for p in glob.glob(text))
    elif Path(text).is_dir():
        files = sorted(
            p
            for p in Path(text).iterdir()
            if p.is_file()
            and not p.name.startswith(".")
            and p.suffix not in (".idx", ".loc", ".json", ".npy", ".txt", ".lock")
        )
    else:
        files = [Path(text)] if Path(text).is_file() else []
    if not files:
        raise FileNotFoundError(f"no TFRecord files in {text!r}: pass a .tfrecord file, a glob or a folder of them")
    return files


class TFRecordSource(Source):
    """Records of TFRecord files holding ``tf.train.Example`` images (``image/encoded``, ``image/class/label``).

    Labels are kept as the records hold them (TensorFlow's ImageNet records count from 1); a locator is
    ``file:offset:size``. ``fields`` names further features to carry (see the module's docstring).

    Raises:
        ValueError: (on the first scan) a field in ``fields`` that no record has, or one in ``image/...``.
    """

    name = "tfrecord"

    def __init__(self, src: str | os.PathLike, *, fields: tuple[str, ...] = ()) -> None:
        self.files = tfrecord_files(src)
        super().__init__(os.fspath(src) if "*" in os.fspath(src) else str(Path(src).resolve()))
        self.fields = tuple(fields)
        reserved = [f for f in self.fields if f.startswith("image/")]
        if reserved:
            raise ValueError(f"--fields {', '.join(reserved)}: the image/... features are the image's own, not fields")
        self._found: list[tuple[str, Any, str, dict[str, Any]]] | None = None
        self._file_skips: list[SkippedFile] = []

    def _records(self) -> Iterator[tuple[str, Any, str, dict[str, Any]]]:
        """``(locator, raw label, error or "", {field: list of values})`` of every record."""
        from fastdata.formats.errors import CorruptRecordError
        from fastdata.formats.example import decode_example, parse_features
        from fastdata.formats.tfrecord_framing import build_index

        for path in self.files:
            try:
                index = build_index(path)
            except (CorruptRecordError, OSError) as exc:
                self._file_skips.append(SkippedFile(path.name, f"not a sound TFRecord file ({exc})"))
                continue
            with open(path, "rb") as f:
                for offset, size in index.tolist():
                    f.seek(offset)
                    locator = f"{path.name}:{offset}:{size}"
                    try:
                        payload = _payload(f.read(size), path, offset)
                        record = decode_example(payload)
                        values = _feature_lists(parse_features(payload), self.fields) if self.fields else {}
                    except (CorruptRecordError, ValueError) as exc:
                        yield locator, None, str(exc), {}
                        continue
                    yield locator, record.label, "", values

    @override
    def scan(self) -> Iterator[Row]:
        if self._found is None:  # every record is read once, however often the rows are scanned
            self._found = list(self._records())
            self._scalar = self._check_fields(self._found)
        self.skipped = list(self._file_skips)
        records = self._found
        labels = Labels(
            (f"{locator} (record {n})", label) for n, (locator, label, error, _) in enumerate(records, 1) if not error
        )
        self.classes = labels.classes
        for number, (locator, label, error, values) in enumerate(records, 1):
            missing = [f for f in self.fields if f not in values]
            if not error and missing:
                error = f"the record has no feature {', '.join(map(repr, missing))} (named by --fields)"
            if error:
                self.skipped.append(SkippedFile(f"{locator} (record {number})", error))
                continue
            try:
                fields = {f: v[0] if self._scalar[f] else v for f, v in values.items()}
                yield Row(locator, labels.index(label), fields, row=number)
            except ValueError as exc:
                self.skipped.append(SkippedFile(f"{locator} (record {number})", str(exc)))

    def _check_fields(self, records: list[tuple[str, Any, str, dict[str, Any]]]) -> dict[str, bool]:
        """For each field, whether every record holding it has exactly one value (then it is that value).

        Raises:
            ValueError: a field that no record has.
        """
        absent = [f for f in self.fields if not any(f in r[3] for r in records)]
        if absent and any(not r[2] for r in records):
            raise ValueError(
                f"no record of {self.src} has the feature {', '.join(map(repr, absent))} named by "
                "--fields: name features the records hold"
            )
        return {f: all(len(r[3][f]) == 1 for r in records if f in r[3]) for f in self.fields}

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__, _found=None)

    @override
    def open(self, locator: str) -> bytes:
        from fastdata.formats.errors import CorruptRecordError
        from fastdata.formats.example import decode_example

        name, offset, size = locator.rsplit(":", 2)
        path = next(p for p in self.files if p.name == name)
        with open(path, "rb") as f:
            f.seek(int(offset))
            try:
                return decode_example(_payload(f.read(int(size)), path, int(offset))).image
            except (CorruptRecordError, ValueError) as exc:
                raise OSError(str(exc)) from exc


def _feature_lists(feature: Any, names: tuple[str, ...]) -> dict[str, list]:
    """The features ``names`` that a record has, each as the list of its values (bytes as UTF-8 text).

    Raises:
        ValueError: a bytes feature that is not UTF-8 text.
    """
    out: dict[str, list] = {}
    for name in names:
        if name not in feature:
            continue
        entry = feature[name]
        kind = entry.WhichOneof("kind")
        if kind == "int64_list":
            out[name] = [int(v) for v in entry.int64_list.value]
        elif kind == "float_list":
            out[name] = [float(v) for v in entry.float_list.value]
        elif kind == "bytes_list":
            try:
                out[name] = [v.decode("utf-8") for v in entry.bytes_list.value]
            except UnicodeDecodeError:
                raise ValueError(f"feature {name!r} holds bytes that are not UTF-8 text") from None
        else:
            out[name] = []
    return out


def _plain(value: Any) -> Any:
    """A decoded field value as plain Python (arrays as nested lists), as other sources give them."""
    return value.tolist() if hasattr(value, "tolist") else value


def _payload(buf: bytes, path: Path, offset: int) -> bytes:
    from fastdata.formats.tfrecord_framing import unframe

    return unframe(buf, shard=path, offset=offset)
