"""The ImageFolder source: torchvision's layout, scanned by :mod:`fastdata.packing.scan`."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from typing_extensions import override

from fastdata.packing.scan import scan_image_folder
from fastdata.packing.sources.base import Row, Source, read_local


class ImageFolderSource(Source):
    """One subfolder per class; a row's locator is the image's path relative to the root (POSIX)."""

    name = "imagefolder"

    def __init__(self, root: str | os.PathLike) -> None:
        super().__init__(str(Path(root).resolve()))
        self.root = Path(root)
        self._scan = scan_image_folder(self.root)  # raises at once for a missing or empty folder
        self.classes = self._scan.classes
        self.skipped = self._scan.skipped

    @override
    def scan(self) -> Iterator[Row]:
        for path, label in zip(self._scan.paths, self._scan.labels, strict=False):
            yield Row(path, label)

    def __getstate__(self) -> dict:
        """A pickled copy (sent to a pool worker or a Ray task) opens images but does not carry the file list."""
        return {**self.__dict__, "_scan": None}

    @override
    def open(self, locator: str) -> bytes:
        return read_local(self.root / locator, self.max_bytes)
