"""WebDataset tars: ``shard-{000000..000099}.tar`` (brace expansion as WebDataset writes it), a folder or a glob.

Members are grouped into samples by key (the member name up to the first dot of its base name,
as WebDataset groups them); a sample's image is its member with an image extension, its label
the integer (or class name) in ``.cls``, or the label column of its ``.json``, whose keys also
provide fields. The scan reads the tar headers and the small ``.cls``/``.json`` members only;
an image is read later, by offset, in a worker.

Tars may be at URLs (``s3://bucket/shard-{000..009}.tar``, ``https://...``): the scan then streams each
tar once through :mod:`fastdata.storage` (one GET, never whole in memory), and each image is one ranged read.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastdata.formats.manifest_entries import SkippedFile
from fastdata.packing.sources.base import Labels, Row, Source
from fastdata.storage.urls import is_url

IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "bmp", "tif", "tiff", "ppm", "pgm")
_BRACE = re.compile(r"\{([^{}]*)\}")


def expand_braces(pattern: str) -> list[str]:
    """``"a-{000..002}.tar"`` → ``["a-000.tar", "a-001.tar", "a-002.tar"]``; ``"{a,b}"`` lists too (nested allowed)."""
    match = _BRACE.search(pattern)
    if match is None:
        return [pattern]
    body, head, tail = match.group(1), pattern[: match.start()], pattern[match.end():]
    ranged = re.fullmatch(r"(\d+)\.\.(\d+)", body)
    if ranged:
        first, last = ranged.groups()
        width = len(first) if first.startswith("0") or len(first) == len(last) else 0
        step = 1 if int(last) >= int(first) else -1
        choices = [str(n).zfill(width) for n in range(int(first), int(last) + step, step)]
    else:
        choices = body.split(",")
    return [name for choice in choices for name in expand_braces(head + choice + tail)]


def tar_files(src: str | os.PathLike) -> list[Path] | list[str]:
    """The tars of ``src``: a brace pattern, a glob, a folder (its ``*.tar``, sorted) or one tar; or the URLs of
    a brace pattern or one tar at a URL.

    Raises:
        FileNotFoundError: no tar there, or a tar the pattern names is missing.
    """
    text = os.fspath(src)
    if is_url(text):
        from fastdata.storage.fileobj import url_size

        urls = expand_braces(text)
        missing = [u for u in urls if url_size(u) is None]
        if missing:
            raise FileNotFoundError(f"{len(missing)} tar(s) of {text!r} are missing, e.g. {missing[0]}")
        return urls
    if "{" in text:
        files = [Path(p) for p in expand_braces(text)]
        missing = [str(p) for p in files if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"{len(missing)} tar(s) of {text!r} are missing, e.g. {missing[0]}")
    elif any(c in text for c in "*?["):
        files = sorted(Path(p) for p in glob.glob(text))
    elif Path(text).is_dir():
        files = sorted(Path(text).glob("*.tar"))
    else:
        files = [Path(text)] if Path(text).is_file() else []
    if not files:
        raise FileNotFoundError(f"no WebDataset tars in {text!r}: pass a .tar, a brace pattern such as "
                                "shard-{000000..000009}.tar, a glob or a folder of .tar files")
    return files


def split_key(name: str) -> tuple[str, str]:
    """``"dir/abc.seg.jpg"`` → ``("dir/abc", "seg.jpg")``: WebDataset's key and extension."""
    folder, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), ext


class WebDatasetSource(Source):
    """Samples of WebDataset tars, in tar then member order; a locator is ``tar:offset:size:member``."""

    name = "webdataset"

    def __init__(self, src: str | os.PathLike, *, label_column: str | None = None, fields: tuple[str, ...] = ()) -> None:
        self.tars = tar_files(src)
        text = os.fspath(src)
        super().__init__(text if "{" in text or "*" in text or is_url(text) else str(Path(src).resolve()))
        self.label_column = label_column or "label"
        self.fields = tuple(fields)
        self._samples: list[tuple[str, Any, dict[str, Any], str]] | None = None

    def _scan_tars(self) -> list[tuple[str, Any, dict[str, Any], str]]:
        """One :meth:`_sample` per sample; small members are read, images are only located."""
        samples: list[tuple[str, Any, dict[str, Any], str]] = []
        for tar in self.tars:
            with _open_tar(tar) as archive:
                key, members, small = None, {}, {}
                for member in archive:
                    if not member.isfile():
                        continue
                    this, ext = split_key(member.name)
                    if this != key and key is not None:
                        samples.append(self._sample(_name(tar), key, members, small))
                        members, small = {}, {}
                    key = this
                    members[ext.lower()] = member
                    if ext.lower() in ("cls", "json"):  # read now: a streamed tar cannot go back for it
                        small[ext.lower()] = archive.extractfile(member).read()  # type: ignore[union-attr]
                if key is not None:
                    samples.append(self._sample(_name(tar), key, members, small))
        return samples

    def _sample(self, tar: str, key: str, members: dict[str, tarfile.TarInfo],
                small: dict[str, bytes]) -> tuple[str, Any, dict[str, Any], str]:
        """``(locator or "" without an image, raw label, fields, how a skip names it)`` of one sample."""
        image = next((members[e] for e in IMAGE_EXTENSIONS if e in members), None)
        meta: dict[str, Any] = {}
        if "json" in small:
            try:
                meta = json.loads(small["json"])
            except ValueError:
                meta = {}
            meta = meta if isinstance(meta, dict) else {}
        label: Any = meta.get(self.label_column) if "json" in small else None
        if "cls" in small:
            label = small["cls"].decode("utf-8", "replace").strip()
        fields = {f: meta.get(f) for f in self.fields}
        if image is None:
            return "", label, fields, f"{tar}:{key}"
        locator = f"{tar}:{image.offset_data}:{image.size}:{image.name}"
        return locator, label, fields, locator

    def scan(self) -> Iterator[Row]:
        self.skipped = []
        if self._samples is None:  # the tar headers are read once, however often the rows are scanned
            self._samples = self._scan_tars()
        samples = self._samples
        raw = [s[1] for s in samples if s[0] and s[1] is not None]
        labels = Labels(raw, text=True) if raw else None
        self.classes = labels.classes if labels else []
        for number, (locator, label, fields, where) in enumerate(samples, 1):
            if not locator:
                self.skipped.append(SkippedFile(f"{where} (sample {number})",
                                                f"no image member ({', '.join(IMAGE_EXTENSIONS)})"))
                continue
            try:
                index = labels.index(label) if labels else 0
            except ValueError as exc:
                self.skipped.append(SkippedFile(f"{where} (sample {number})", str(exc)))
                continue
            yield Row(locator, index, fields, row=number)

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__, _samples=None)

    def open(self, locator: str) -> bytes:
        name, offset, size, _ = locator.split(":", 3)
        tar = next(t for t in self.tars if _name(t) == name)
        if isinstance(tar, str):  # a tar at a URL: one ranged read
            from fastdata.storage.fileobj import split_url

            store, rel = split_url(tar)
            try:
                data = store.read(rel, int(offset), int(size))
            except ConnectionError as exc:
                raise OSError(str(exc)) from exc
        else:
            with open(tar, "rb") as f:
                f.seek(int(offset))
                data = f.read(int(size))
        if len(data) != int(size):
            raise OSError(f"{name} ends inside the member (truncated tar)")
        return data


def _name(tar: Path | str) -> str:
    """A tar's name in locators: its file name (the last part of its URL)."""
    return tar.name if isinstance(tar, Path) else tar.rstrip("/").rpartition("/")[2]


@contextlib.contextmanager
def _open_tar(tar: Path | str) -> Iterator[tarfile.TarFile]:
    """A local tar opened for random access, or a tar at a URL streamed front to back (``r|``)."""
    if isinstance(tar, Path):
        with tarfile.open(tar, "r:") as archive:
            yield archive
        return
    from fastdata.storage.fileobj import open_stream

    with open_stream(tar) as stream, tarfile.open(fileobj=stream, mode="r|") as archive:
        yield archive
