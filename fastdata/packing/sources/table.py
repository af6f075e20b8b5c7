"""File-list sources: a ``.csv``, ``.jsonl`` or ``.parquet`` list with one row per sample.

Each row names an image by path or URL (a relative path resolves against the list's folder;
``s3://``, ``gs://``, ``https://`` are read through :mod:`fastdata.storage`), a label and any
other columns. The list is read twice, streamed (once for the class table, once for the rows),
never held whole in memory. The list itself may be at a URL: a CSV or JSONL list is then streamed
in one GET per pass, a Parquet list read by ranges (footer, then row groups), and relative paths in
it resolve against the list's URL folder (:mod:`fastdata.storage.fileobj`).
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from typing_extensions import override

from fastdata.formats.manifest_entries import SkippedFile
from fastdata.packing.sources.base import NO_LABEL, Labels, Row, Source, read_location, unlabelled_refused
from fastdata.storage.urls import is_url

PATH_COLUMNS = ("path", "image_path", "file", "filename", "file_name", "image", "url")
LIST_SUFFIXES = (".csv", ".jsonl", ".parquet")


class FileListSource(Source):
    """A list file of (path, label, fields) rows.

    Args:
        path: the ``.csv`` (with a header line), ``.jsonl`` (one JSON object a line) or ``.parquet`` list.
        image_column: the column with the path or URL (default: the first of :data:`PATH_COLUMNS` present).
        label_column: the column with the label (default ``label``).
        fields: further columns to keep with each sample.
        names: every label is a class name, integers included (``--labels names``); by default a list whose labels
            mix integers and class names is refused, naming the first row of the other kind.
        unlabelled: pack without labels (every label :data:`~fastdata.packing.sources.base.NO_LABEL`, no classes);
            without it a list with no label column is refused, naming the columns it has.
    """

    name = "list"

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        image_column: str | None = None,
        label_column: str | None = None,
        fields: tuple[str, ...] = (),
        names: bool = False,
        unlabelled: bool = False,
    ) -> None:
        self.url = os.fspath(path) if is_url(path) else None
        self.path = Path(path) if self.url is None else Path(self.url.rpartition("/")[2])
        super().__init__(self.url or str(self.path.resolve()))
        if not self._exists():
            raise FileNotFoundError(f"file list {str(path)!r} does not exist: pass a .csv, .jsonl or .parquet list")
        self.kind = self.path.suffix.lower()
        if self.kind not in LIST_SUFFIXES:
            raise ValueError(f"{str(path)!r} is not a file list: expected a .csv, .jsonl or .parquet file")
        self.base: Path | str = self.path.parent if self.url is None else self.url.rpartition("/")[0]
        self.text = self.kind == ".csv"
        columns = self._columns()
        image = image_column or next((c for c in PATH_COLUMNS if c in columns), None)
        if image is None or (columns and image not in columns):
            raise ValueError(
                f"{str(path)!r} has no {image_column or 'path'} column (its columns: {', '.join(columns)}): "
                "name the column with the image paths with --image-column"
            )
        self.image_column = image
        if label_column is not None and columns and label_column not in columns:
            raise ValueError(f"{str(path)!r} has no label column {label_column!r} (its columns: {', '.join(columns)})")
        self.label_column = label_column or "label"
        missing = [f for f in fields if columns and f not in columns]
        if missing:
            raise ValueError(f"{str(path)!r} has no column {', '.join(missing)} (its columns: {', '.join(columns)})")
        self.fields = tuple(fields)
        self.labelled = not unlabelled
        if self.labelled and columns and self.label_column not in columns:
            raise unlabelled_refused(repr(str(path)), f"its columns: {', '.join(columns)}", self.label_column)
        where = f"of {self.path.name}"
        self.labels = (
            Labels(
                ((f"row {n} {where}", r.get(self.label_column)) for n, r in self._records([self.label_column]) if r),
                text=self.kind == ".csv",
                names=names,
            )
            if self.labelled
            else None
        )
        self.classes = self.labels.classes if self.labels else []

    @override
    def scan(self) -> Iterator[Row]:
        self.skipped = []
        wanted = [self.image_column, self.label_column, *self.fields]
        for number, record in self._records(wanted):
            if record is None:
                self.skipped.append(SkippedFile(f"row {number}", "not a JSON object"))
                continue
            location = record.get(self.image_column)
            if not isinstance(location, str) or not location:
                self.skipped.append(SkippedFile(f"row {number}", f"no image path in column {self.image_column!r}"))
                continue
            try:
                label = self.labels.index(record.get(self.label_column)) if self.labels else NO_LABEL
            except ValueError as exc:
                self.skipped.append(SkippedFile(f"{location} (row {number})", str(exc)))
                continue
            yield Row(location, label, {f: record.get(f) for f in self.fields}, row=number)

    @override
    def open(self, locator: str) -> bytes:
        if is_url(locator) or os.path.isabs(locator):
            return read_location(locator, self.max_bytes)
        if isinstance(self.base, str):  # a list at a URL: its relative paths are URLs beside it
            return read_location(f"{self.base}/{locator.lstrip('/')}", self.max_bytes)
        return read_location(str(self.base / locator), self.max_bytes)

    def _exists(self) -> bool:
        if self.url is None:
            return self.path.is_file()
        from fastdata.storage.fileobj import url_size

        return url_size(self.url) is not None

    def _open_binary(self, *, seekable: bool = False) -> io.BufferedReader:
        """The list as a binary file: local, or at a URL (streamed; by ranges when ``seekable``)."""
        if self.url is None:
            return open(self.path, "rb")
        from fastdata.storage.fileobj import open_ranged, open_stream

        return open_ranged(self.url) if seekable else open_stream(self.url)

    def _open_text(self) -> io.TextIOWrapper:
        return io.TextIOWrapper(self._open_binary(), encoding="utf-8", newline="" if self.kind == ".csv" else None)

    def _columns(self) -> list[str]:
        """The list's column names (for JSONL: the keys of its first row)."""
        if self.kind == ".csv":
            with self._open_text() as f:
                return next(csv.reader(f), [])
        if self.kind == ".parquet":
            import pyarrow.parquet as pq

            with self._open_binary(seekable=True) as f:
                return list(pq.ParquetFile(f).schema_arrow.names)
        first = next((record for _, record in self._records([]) if record is not None), None)
        return list(first) if first else []

    def _records(self, columns: list[str]) -> Iterator[tuple[int, dict[str, Any] | None]]:
        """``(row number, {column: value})`` for every row, streamed (1-based numbers).

        The value is None for a JSONL line that is not a JSON object.
        """
        if self.kind == ".csv":
            with self._open_text() as f:
                yield from enumerate(csv.DictReader(f), 1)
        elif self.kind == ".jsonl":
            with self._open_text() as f:
                number = 0
                for line in f:
                    if not line.strip():
                        continue
                    number += 1
                    try:
                        record = json.loads(line)
                    except ValueError:
                        record = None
                    yield number, record if isinstance(record, dict) else None
        else:
            import pyarrow.parquet as pq

            with self._open_binary(seekable=True) as f:
                table = pq.ParquetFile(f)
                present = [c for c in dict.fromkeys(columns) if c in table.schema_arrow.names]
                number = 0
                for batch in table.iter_batches(batch_size=8192, columns=present):
                    for record in batch.to_pylist():
                        number += 1
                        yield number, record
