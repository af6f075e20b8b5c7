"""Existing shards as a source: a fastdata pack (converted to another format or layout), or
third-party TFRecords with the standard ``image/encoded`` and ``image/class/label`` features."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastdata.formats.manifest import SkippedFile
from fastdata.packing.sources.base import Labels, Row, Source


class PackSource(Source):
    """The samples of a finished fastdata pack, in its order, with its classes and labels.

    A locator is ``shard:record``; images are read (and CRC-checked) by the pack's own readers.
    """

    name = "pack"

    def __init__(self, root: str | os.PathLike) -> None:
        from fastdata.formats.packed import open_pack

        super().__init__(str(Path(root).resolve()))
        self.pack = open_pack(root)
        self.classes = list(self.pack.manifest.classes)
        self._readers: dict[int, Any] = {}

    def scan(self) -> Iterator[Row]:
        number = 0
        for shard, info in enumerate(self.pack.manifest.shards):
            for j in range(info.num_samples):
                yield Row(f"{info.path}:{j}", int(self.pack.targets[number]))
                number += 1

    def open(self, locator: str) -> bytes:
        from fastdata.formats import get_format

        path, j = locator.rsplit(":", 1)
        shard = next(i for i, s in enumerate(self.pack.manifest.shards) if s.path == path)
        first = int(self.pack.counts[:shard].sum())
        if shard not in self._readers:
            info = self.pack.manifest.shards[shard]
            self._readers[shard] = get_format(self.pack.manifest.format).reader(Path(self.pack.shard_paths[shard]),
                                                                                expected=info)
        k = first + int(j)
        return self._readers[shard].read(int(self.pack.positions[k]), int(self.pack.sizes[k]))[0]

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__, _readers={})


def tfrecord_files(src: str | os.PathLike) -> list[Path]:
    """The TFRecord files of ``src``: one file, a glob, or a folder's files (index files left out), sorted."""
    text = os.fspath(src)
    if any(c in text for c in "*?["):
        files = sorted(Path(p) for p in glob.glob(text))
    elif Path(text).is_dir():
        files = sorted(p for p in Path(text).iterdir() if p.is_file() and not p.name.startswith(".")
                       and p.suffix not in (".idx", ".json", ".npy", ".txt", ".lock"))
    else:
        files = [Path(text)] if Path(text).is_file() else []
    if not files:
        raise FileNotFoundError(f"no TFRecord files in {text!r}: pass a .tfrecord file, a glob or a folder of them")
    return files


class TFRecordSource(Source):
    """Records of TFRecord files holding ``tf.train.Example`` images (``image/encoded``, ``image/class/label``).

    Labels are kept as the records hold them (TensorFlow's ImageNet records count from 1); a locator is
    ``file:offset:size``.
    """

    name = "tfrecord"

    def __init__(self, src: str | os.PathLike) -> None:
        self.files = tfrecord_files(src)
        super().__init__(os.fspath(src) if "*" in os.fspath(src) else str(Path(src).resolve()))
        self._found: list[tuple[str, Any, str]] | None = None
        self._file_skips: list[SkippedFile] = []

    def _records(self) -> Iterator[tuple[str, Any, str]]:
        from fastdata.formats.errors import CorruptRecordError
        from fastdata.formats.example import decode_example
        from fastdata.formats.tfrecord import build_index

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
                        record = decode_example(_payload(f.read(size), path, offset))
                    except (CorruptRecordError, ValueError) as exc:
                        yield locator, None, str(exc)
                        continue
                    yield locator, record.label, ""

    def scan(self) -> Iterator[Row]:
        if self._found is None:  # every record is read once, however often the rows are scanned
            self._found = list(self._records())
        self.skipped = list(self._file_skips)
        records = self._found
        labels = Labels(label for _, label, error in records if not error)
        self.classes = labels.classes
        for number, (locator, label, error) in enumerate(records, 1):
            if error:
                self.skipped.append(SkippedFile(f"{locator} (record {number})", error))
                continue
            try:
                yield Row(locator, labels.index(label), row=number)
            except ValueError as exc:
                self.skipped.append(SkippedFile(f"{locator} (record {number})", str(exc)))

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__, _found=None)

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


def _payload(buf: bytes, path: Path, offset: int) -> bytes:
    from fastdata.formats.tfrecord import unframe

    return unframe(buf, shard=path, offset=offset)
