"""WebDataset tars: ``shard-{000000..000099}.tar`` (brace expansion as WebDataset writes it), a folder or a glob.

Members are grouped into samples by key (the member name up to the first dot of its base name,
as WebDataset groups them); a sample's image is its member with an image extension, its label
the integer (or class name) in ``.cls``, or the label column of its ``.json``, whose keys also
provide fields. The scan reads the tar headers and the small ``.cls``/``.json`` members only;
an image is read later, by offset, in a worker.

Tars may be at URLs (``s3://bucket/shard-{000..009}.tar``, ``https://...``): the scan then streams each
tar once through :mod:`fastdata.storage` (one GET, never whole in memory), and each image is one ranged read.

Damage never ends the scan with a traceback. A file that is not a tar at all (garbage, empty, compressed) is
refused in one line. Inside a tar, a sample whose member declares bytes past the end of the tar (a truncated
tar, or a pax header declaring a huge size) is skipped and listed, as is a ``.cls``/``.json`` of more than
16 MiB; a header that is not one (damage after some good members, which ``tarfile`` would take for the end of
the archive) is listed with its offset, and the members from there on are not read.
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

from typing_extensions import override

from fastdata.formats.manifest_entries import SkippedFile
from fastdata.packing.sources.base import NO_LABEL, Labels, Row, Source, unlabelled_refused
from fastdata.storage.urls import is_url

IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "bmp", "tif", "tiff", "ppm", "pgm")
_BRACE = re.compile(r"\{([^{}]*)\}")
SMALL_MEMBER_BYTES = 16 << 20  # the most a .cls or .json member (read by the scan), or an extended header, may hold
_EXTENDED = (
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
)
_TRUNCATED_HEADER = tarfile.TruncatedHeaderError  # type: ignore[attr-defined]  # tarfile has it; typeshed does not
_INVALID_HEADER = tarfile.InvalidHeaderError  # type: ignore[attr-defined]  # likewise

# one scanned sample: (locator, or "" without an image; raw label; fields; how a skip names it; what is wrong, or "")
_Sample = tuple[str, Any, dict[str, Any], str, str]


class DamagedTarError(ValueError):
    """A tar header that is not one (bad checksum, cut short), or an extended header declaring more than 16 MiB."""


class _CheckedTarInfo(tarfile.TarInfo):
    """``tarfile``'s member header, with damage an error.

    ``tarfile``'s member header, but a damaged header is an error rather than the end of the archive (tarfile
    stops silently at one found after the first member), and an extended header is bounded before it is read.
    """

    @classmethod
    def frombuf(cls, buf: bytes | bytearray, encoding: str, errors: str) -> _CheckedTarInfo:
        try:
            info = super().frombuf(buf, encoding, errors)
        except (_TRUNCATED_HEADER, _INVALID_HEADER) as exc:
            raise DamagedTarError(str(exc)) from None
        if info.type in _EXTENDED and info.size > SMALL_MEMBER_BYTES:
            raise DamagedTarError(f"an extended (pax or long name) header declares {info.size} bytes")
        return info


def expand_braces(pattern: str) -> list[str]:
    """``"a-{000..002}.tar"`` → ``["a-000.tar", "a-001.tar", "a-002.tar"]``; ``"{a,b}"`` lists too (nested allowed)."""
    match = _BRACE.search(pattern)
    if match is None:
        return [pattern]
    body, head, tail = match.group(1), pattern[: match.start()], pattern[match.end() :]
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
    """The tars of ``src``.

    A brace pattern, a glob, a folder (its ``*.tar``, sorted) or one tar; or the URLs of
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
        raise FileNotFoundError(
            f"no WebDataset tars in {text!r}: pass a .tar, a brace pattern such as "
            "shard-{000000..000009}.tar, a glob or a folder of .tar files"
        )
    return files


def split_key(name: str) -> tuple[str, str]:
    """``"dir/abc.seg.jpg"`` → ``("dir/abc", "seg.jpg")``: WebDataset's key and extension."""
    folder, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), ext


class WebDatasetSource(Source):
    """Samples of WebDataset tars, in tar then member order; a locator is ``tar:offset:size:member``.

    Args:
        src: a tar, a brace pattern, a glob, a folder of tars, or URLs of them.
        label_column: the ``.json`` key with the label when a sample has no ``.cls`` (default ``label``).
        fields: ``.json`` keys to keep with each sample.
        names: every label is a class name (``--labels names``); by default labels that mix integers and class
            names are refused, naming the first sample of the other kind.
        unlabelled: pack without labels; without it, tars in which no sample has a label are refused.
    """

    name = "webdataset"

    def __init__(
        self,
        src: str | os.PathLike,
        *,
        label_column: str | None = None,
        fields: tuple[str, ...] = (),
        names: bool = False,
        unlabelled: bool = False,
    ) -> None:
        self.tars = tar_files(src)
        text = os.fspath(src)
        super().__init__(text if "{" in text or "*" in text or is_url(text) else str(Path(src).resolve()))
        self.label_column = label_column or "label"
        self.fields = tuple(fields)
        self.names, self.unlabelled = names, unlabelled
        self._samples: list[_Sample] | None = None
        self._tar_skips: list[SkippedFile] = []
        self._seen: set[str] = set()  # the member extensions the scan found

    def _scan_tars(self) -> list[_Sample]:
        """One :meth:`_sample` per sample; small members are read, images are only located.

        Raises:
            ValueError: a file that is not a tar at all (the message names it).
        """
        samples: list[_Sample] = []
        self._tar_skips, self._seen = [], set()
        for tar in self.tars:
            size = _size(tar)
            with _open_tar(tar) as archive:
                key, members, small, problem = None, {}, {}, ""
                for member in _members(archive, tar, size, self._tar_skips):
                    if not member.isfile():
                        continue
                    this, ext = split_key(member.name)
                    if this != key and key is not None:
                        samples.append(self._sample(_name(tar), key, members, small, problem))
                        members, small, problem = {}, {}, ""
                    key = this
                    members[ext.lower()] = member
                    self._seen.add(f".{ext.lower()}")
                    if member.offset_data + member.size > size:
                        problem = (
                            f"{member.name} declares {member.size} bytes at offset {member.offset_data}, past "
                            f"the end of the tar ({size} bytes): a truncated or damaged tar"
                        )
                    elif ext.lower() in ("cls", "json") and member.size > SMALL_MEMBER_BYTES:
                        problem = f"{member.name} holds {member.size} bytes, more than a .{ext.lower()} may (16 MiB)"
                    elif ext.lower() in ("cls", "json"):  # read now: a streamed tar cannot go back for it
                        small[ext.lower()] = archive.extractfile(member).read()  # type: ignore[union-attr]
                if key is not None:
                    samples.append(self._sample(_name(tar), key, members, small, problem))
        return samples

    def _sample(
        self, tar: str, key: str, members: dict[str, tarfile.TarInfo], small: dict[str, bytes], problem: str
    ) -> _Sample:
        """``(locator or "" without an image, raw label, fields, how a skip names it, what is wrong)`` of a sample."""
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
            return "", label, fields, f"{tar}:{key}", problem
        locator = f"{tar}:{image.offset_data}:{image.size}:{image.name}"
        return locator, label, fields, locator, problem

    @override
    def scan(self) -> Iterator[Row]:
        if self._samples is None:  # the tar headers are read once, however often the rows are scanned
            self._samples = self._scan_tars()
        self.skipped = list(self._tar_skips)
        samples = self._samples
        raw = [
            (f"sample {n} ({s[3]})", s[1]) for n, s in enumerate(samples, 1) if s[0] and not s[4] and s[1] is not None
        ]
        if not raw and not self.unlabelled and any(s[0] and not s[4] for s in samples):
            kinds = sorted(self._seen)
            raise unlabelled_refused(
                f"the WebDataset tars {self.src!r}",
                "no sample has a .cls member or a "
                f"{self.label_column!r} key in its .json; members seen: {', '.join(kinds)}",
                self.label_column,
            )
        labels = Labels(raw, text=True, names=self.names) if raw and not self.unlabelled else None
        self.classes = labels.classes if labels else []
        for number, (locator, label, fields, where, problem) in enumerate(samples, 1):
            if problem or not locator:
                self.skipped.append(
                    SkippedFile(
                        f"{where} (sample {number})", problem or f"no image member ({', '.join(IMAGE_EXTENSIONS)})"
                    )
                )
                continue
            try:
                index = labels.index(label) if labels else NO_LABEL
            except ValueError as exc:
                self.skipped.append(SkippedFile(f"{where} (sample {number})", str(exc)))
                continue
            yield Row(locator, index, fields, row=number)

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__, _samples=None)

    @override
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


def _size(tar: Path | str) -> int:
    """A tar's size in bytes: what its members may not reach past."""
    if isinstance(tar, Path):
        return tar.stat().st_size
    from fastdata.storage.fileobj import url_size

    size = url_size(tar)
    if size is None:
        raise FileNotFoundError(f"WebDataset tar {tar} is gone")
    return size


def _members(
    archive: tarfile.TarFile, tar: Path | str, size: int, skipped: list[SkippedFile]
) -> Iterator[tarfile.TarInfo]:
    """The members of ``archive``, up to the first damaged one.

    The members of ``archive``, up to the first one that reaches past its ``size`` bytes (nothing after it can be
    read) or the first damaged header, which is recorded in ``skipped`` with its offset.
    """
    while True:
        offset = archive.offset
        try:
            member = archive.next()
        except (tarfile.TarError, DamagedTarError) as exc:  # an I/O error (a disk, a connection) is raised, not listed
            skipped.append(
                SkippedFile(
                    f"{_name(tar)} (offset {offset})",
                    f"{exc or type(exc).__name__}: the tar is damaged or truncated here; "
                    "its members from this offset on are not read",
                )
            )
            return
        if member is None:
            return
        yield member
        if member.offset_data + member.size > size:
            return


@contextlib.contextmanager
def _open_tar(tar: Path | str) -> Iterator[tarfile.TarFile]:
    """A local tar opened for random access, or a tar at a URL streamed front to back (``r|``).

    Raises:
        ValueError: the file is not a tar (garbage, empty, compressed), in one line naming it.
    """
    try:
        if isinstance(tar, Path):
            archive = tarfile.open(tar, "r:", tarinfo=_CheckedTarInfo)  # noqa: SIM115 (closed by the with below)
            stream = None
        else:
            from fastdata.storage.fileobj import open_stream

            stream = open_stream(tar)
            try:
                archive = tarfile.open(fileobj=stream, mode="r|", tarinfo=_CheckedTarInfo)  # noqa: SIM115 (as above)
            except BaseException:
                stream.close()
                raise
    except (tarfile.TarError, DamagedTarError) as exc:
        raise ValueError(f"{tar} is not a tar file ({exc}): pass uncompressed WebDataset .tar files") from None
    try:
        with archive:
            yield archive
    finally:
        if stream is not None:
            stream.close()
