"""Pack sources: every kind of SRC behind one interface (:class:`~fastdata.packing.sources.base.Source`).

- :mod:`~fastdata.packing.sources.base`: :class:`Row` ``(locator, label, fields)`` and :class:`Source` (``scan``,
  ``open``).
- :mod:`~fastdata.packing.sources.image_folder`: an ImageFolder tree (torchvision's layout).
- :mod:`~fastdata.packing.sources.table`: a ``.csv``/``.jsonl``/``.parquet`` file list (paths or URLs, labels, columns).
- :mod:`~fastdata.packing.sources.parquet`: Hugging Face-style Parquet datasets (an image column of ``{bytes, path}``).
- :mod:`~fastdata.packing.sources.webdataset`: WebDataset tars (brace patterns, samples grouped by key).
- :mod:`~fastdata.packing.sources.shards`: a fastdata pack, or third-party TFRecords of ``tf.train.Example`` images.

:func:`open_source` picks the source by what SRC is, or by ``options.source``.
"""

from __future__ import annotations

import os
from pathlib import Path

from fastdata.formats.manifest import MANIFEST_NAME
from fastdata.packing.options import PackOptions
from fastdata.packing.sources.base import Row, Source, max_file_bytes, source_digest
from fastdata.packing.sources.image_folder import ImageFolderSource
from fastdata.packing.sources.parquet import ParquetSource, image_column_of, parquet_files
from fastdata.packing.sources.shards import PackSource, TFRecordSource
from fastdata.packing.sources.table import FileListSource
from fastdata.packing.sources.webdataset import WebDatasetSource
from fastdata.storage.urls import is_url

__all__ = [
    "FileListSource",
    "ImageFolderSource",
    "PackSource",
    "ParquetSource",
    "Row",
    "Source",
    "TFRecordSource",
    "WebDatasetSource",
    "open_source",
    "source_digest",
    "source_kind",
]


def open_source(src: str | os.PathLike, options: PackOptions) -> Source:
    """The source for ``src``.

    Chosen by ``options.source``, or (``"auto"``) by what ``src`` is (:func:`source_kind`);
    it reads no source file larger than the pixel limit allows (:func:`~fastdata.packing.sources.base.max_file_bytes`).

    Raises:
        FileNotFoundError: ``src`` does not exist or holds no sample.
        ValueError: ``src`` is of no known kind, or a column named by the options is missing.
    """
    source = _open(src, options)
    source.max_bytes = max_file_bytes(options.max_pixels)
    return source


def _open(src: str | os.PathLike, options: PackOptions) -> Source:
    kind = options.source if options.source != "auto" else source_kind(src)
    names, unlabelled, fields = options.labels == "names", options.unlabelled, options.fields
    image_column, label_column = options.image_column, options.label_column
    if kind == "imagefolder":
        _no_columns(kind, options)
        if os.path.isfile(src):
            raise ValueError(
                f"{os.fspath(src)!r} is a file of no kind fastdata packs: pass a .csv, .jsonl or "
                ".parquet file list, a WebDataset .tar (or a brace pattern of them), .tfrecord files, or "
                "a folder (an ImageFolder tree, Parquet files, tars, TFRecords or a fastdata pack)"
            )
        return ImageFolderSource(src)
    if kind == "list":
        return FileListSource(
            src, image_column=image_column, label_column=label_column, fields=fields, names=names, unlabelled=unlabelled
        )
    if kind == "parquet":
        return ParquetSource(
            src, image_column=image_column, label_column=label_column, fields=fields, names=names, unlabelled=unlabelled
        )
    if kind == "webdataset":
        return WebDatasetSource(src, label_column=label_column, fields=fields, names=names, unlabelled=unlabelled)
    _no_columns(kind, options, fields=False)
    return PackSource(src, fields=fields) if kind == "pack" else TFRecordSource(src, fields=fields)


def source_kind(src: str | os.PathLike) -> str:
    """What ``src`` is: its source kind.

    What ``src`` is: ``"pack"`` (a folder with ``manifest.json``), ``"webdataset"`` (``.tar``, a brace pattern
    or a folder of tars), ``"tfrecord"``, ``"parquet"`` (files with an image column of ``{bytes, path}``),
    ``"list"`` (``.csv``, ``.jsonl``, or ``.parquet`` of paths) or ``"imagefolder"``.
    """
    text = os.fspath(src)
    path = Path(text)
    name = text.lower().rstrip("/")
    if "{" in text or name.endswith(".tar"):
        return "webdataset"
    if name.endswith((".csv", ".jsonl")):
        return "list"
    if name.endswith((".tfrecord", ".tfrecords")):
        return "tfrecord"
    if name.endswith(".parquet") and is_url(text):
        return "list"  # a Parquet list at a URL (Parquet datasets are read from local files)
    if name.endswith(".parquet") or (path.is_dir() and any(path.rglob("*.parquet"))):
        return _parquet_kind(src)
    if path.is_dir():
        if (path / MANIFEST_NAME).is_file():
            return "pack"
        files = [p.name.lower() for p in path.iterdir() if p.is_file()]
        if files and all(f.endswith(".tar") for f in files):
            return "webdataset"
        if any(f.endswith((".tfrecord", ".tfrecords")) for f in files) and not any(p.is_dir() for p in path.iterdir()):
            return "tfrecord"
    return "imagefolder"


def _parquet_kind(src: str | os.PathLike) -> str:
    """``"parquet"`` when the first file has an image column of structs, else ``"list"`` (a single file of paths)."""
    import pyarrow.parquet as pq

    _, files = parquet_files(src)
    if image_column_of(pq.ParquetFile(files[0]).schema_arrow) is not None or len(files) > 1:
        return "parquet"
    return "list"


def _no_columns(kind: str, options: PackOptions, *, fields: bool = True) -> None:
    if options.image_column or options.label_column or (fields and options.fields):
        names = (
            "--image-column, --label-column and --fields apply" if fields else "--image-column and --label-column apply"
        )
        raise ValueError(f"{names} to lists, Parquet and WebDataset sources, not to a {kind} source")
    if options.labels != "auto" or options.unlabelled:
        raise ValueError(
            f"--labels and --unlabelled apply to lists, Parquet and WebDataset sources, not to a {kind} "
            "source (its labels are its own)"
        )
