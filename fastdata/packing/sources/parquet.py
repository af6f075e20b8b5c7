"""Parquet datasets as the Hugging Face Hub stores them.

``.parquet`` files with an image column of
``{bytes, path}`` structs and label columns.

The scan reads only the label and field columns, one row group at a time; a worker reads a row
group's image column when it first needs one of its images (and keeps that one row group), so no
file is ever held whole in memory. A ``ClassLabel`` column's names (the ``huggingface`` schema
metadata ``datasets`` writes) become the class table; otherwise labels map as in a file list.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from typing_extensions import override

from fastdata.formats.manifest_entries import SkippedFile
from fastdata.packing.sources.base import NO_LABEL, Labels, Row, Source, read_location, unlabelled_refused


def parquet_files(src: str | os.PathLike) -> tuple[Path, list[Path]]:
    """The base folder and the sorted ``.parquet`` files of ``src`` (a file, a folder searched recursively, or a glob).

    Raises:
        FileNotFoundError: no ``.parquet`` file there.
    """
    text = os.fspath(src)
    if any(c in text for c in "*?["):
        files = sorted(Path(p) for p in glob.glob(text, recursive=True) if p.endswith(".parquet"))
        base = Path(text.split("*")[0].split("?")[0].split("[")[0])
        base = base if base.is_dir() else base.parent
    elif Path(text).is_dir():
        base, files = Path(text), sorted(Path(text).rglob("*.parquet"))
    else:
        base, files = Path(text).parent, [Path(text)] if Path(text).is_file() else []
    if not files:
        raise FileNotFoundError(f"no .parquet files in {text!r}: pass a .parquet file, a folder of them or a glob")
    return base, files


def image_column_of(schema: Any) -> str | None:
    """The first column of ``{bytes, path}`` structs (the Hub's image feature), or None."""
    import pyarrow as pa

    for field in schema:
        if pa.types.is_struct(field.type) and field.type.get_field_index("bytes") >= 0:
            return field.name
    return None


class ParquetSource(Source):
    """Rows of Hugging Face-style Parquet files, in file (sorted path) then row order.

    Args:
        src: a ``.parquet`` file, a folder (searched recursively) or a glob.
        image_column: the image column (default: the first column of ``{bytes, path}`` structs).
        label_column: the label column (default ``label``).
        fields: further columns to keep with each sample.
        names: every label is a class name (``--labels names``); see
            :class:`~fastdata.packing.sources.table.FileListSource`.
        unlabelled: pack without labels; without it, files with no label column are refused.
    """

    name = "parquet"

    def __init__(
        self,
        src: str | os.PathLike,
        *,
        image_column: str | None = None,
        label_column: str | None = None,
        fields: tuple[str, ...] = (),
        names: bool = False,
        unlabelled: bool = False,
    ) -> None:
        import pyarrow.parquet as pq

        self.base, files = parquet_files(src)
        super().__init__(str(Path(os.fspath(src)).resolve()) if "*" not in os.fspath(src) else os.fspath(src))
        self.files = [f.relative_to(self.base).as_posix() if f.is_relative_to(self.base) else str(f) for f in files]
        schema = pq.ParquetFile(files[0]).schema_arrow
        self.image_column = image_column or image_column_of(schema)
        if self.image_column is None or self.image_column not in schema.names:
            raise ValueError(
                f"{files[0]} has no image column {image_column or '(of {bytes, path} structs)'} "
                f"(its columns: {', '.join(schema.names)}): name it with --image-column"
            )
        self.label_column = label_column or "label"
        if label_column is not None and label_column not in schema.names:
            raise ValueError(
                f"{files[0]} has no label column {label_column!r} (its columns: {', '.join(schema.names)})"
            )
        missing = [f for f in fields if f not in schema.names]
        if missing:
            raise ValueError(f"{files[0]} has no column {', '.join(missing)} (its columns: {', '.join(schema.names)})")
        self.fields = tuple(fields)
        self.labelled = not unlabelled
        if self.labelled and self.label_column not in schema.names:
            raise unlabelled_refused(str(files[0]), f"its columns: {', '.join(schema.names)}", self.label_column)
        table = _class_names(schema, self.label_column) if self.labelled else None
        self.labels = None
        if table is not None:
            self.classes = table
        elif self.labelled:
            rows = enumerate(self._records([self.label_column]), 1)
            self.labels = Labels(
                ((f"row {n} ({rel})", r.get(self.label_column)) for n, (rel, _, _, r) in rows), names=names
            )
            self.classes = self.labels.classes
        self._cached: tuple[tuple[str, int], Any] | None = None

    @override
    def scan(self) -> Iterator[Row]:
        self.skipped = []
        columns = [c for c in dict.fromkeys([self.label_column, *self.fields]) if c != self.image_column]
        number = 0
        for rel, group, i, record in self._records(columns):
            number += 1
            locator = f"{rel}:{group}:{i}"
            label = NO_LABEL
            if self.labelled:
                value = record.get(self.label_column)
                try:
                    label = self.labels.index(value) if self.labels else _class_index(value, len(self.classes))
                except ValueError as exc:
                    self.skipped.append(SkippedFile(f"{locator} (row {number})", str(exc)))
                    continue
            yield Row(locator, label, {f: record.get(f) for f in self.fields}, row=number)

    @override
    def open(self, locator: str) -> bytes:
        rel, group, i = locator.rsplit(":", 2)
        key = (rel, int(group))
        if self._cached is None or self._cached[0] != key:
            import pyarrow.parquet as pq

            self._cached = None  # the old row group goes before the next is read
            table = pq.ParquetFile(self.base / rel).read_row_group(key[1], columns=[self.image_column])
            self._cached = (key, table.column(0))
        cell = self._cached[1][int(i)].as_py()
        if isinstance(cell, dict):
            if cell.get("bytes"):
                return cell["bytes"]
            if cell.get("path"):
                return read_location(str((self.base / rel).parent / cell["path"]))
            raise OSError(f"image cell of row {i} has neither bytes nor a path")
        if isinstance(cell, bytes):
            return cell
        raise OSError(f"image cell of row {i} is not a {{bytes, path}} struct")

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__, _cached=None)

    def _records(self, columns: list[str]) -> Iterator[tuple[str, int, int, dict[str, Any]]]:
        import pyarrow.parquet as pq

        for rel in self.files:
            pf = pq.ParquetFile(self.base / rel)
            present = [c for c in columns if c in pf.schema_arrow.names]
            for group in range(pf.num_row_groups):
                if present:
                    records = pf.read_row_group(group, columns=present).to_pylist()
                else:
                    records = [{}] * pf.metadata.row_group(group).num_rows
                for i, record in enumerate(records):
                    yield rel, group, i, record


def _class_names(schema: Any, column: str) -> list[str] | None:
    """The names of a ``ClassLabel`` column, from the ``huggingface`` metadata ``datasets`` writes, or None."""
    raw = (schema.metadata or {}).get(b"huggingface")
    if raw is None:
        return None
    try:
        feature = json.loads(raw)["info"]["features"][column]
    except (TypeError, ValueError, KeyError):
        return None
    names = feature.get("names") if isinstance(feature, dict) and feature.get("_type") == "ClassLabel" else None
    return [str(n) for n in names] if isinstance(names, list) else None


def _class_index(value: Any, count: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < count:
        raise ValueError(f"label {value!r} is not a class index in 0..{count - 1}")
    return value
