"""The one interface every pack source implements: ``scan()`` rows, ``open(locator)`` bytes.

A source turns whatever SRC is (an ImageFolder tree, a CSV/JSONL/Parquet list, Parquet
datasets, WebDataset tars, existing shards) into rows ``(locator, label, fields)`` in a
deterministic order; the pipeline asks it for each row's image bytes with :meth:`Source.open`
(in a worker process) and never learns where a sample came from.
"""

from __future__ import annotations

import abc
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from fastdata.decode.limits import DEFAULT_MAX_PIXELS
from fastdata.formats.errors import CorruptRecordError
from fastdata.formats.files import read_regular
from fastdata.formats.manifest_entries import SkippedFile

_NO_LIMIT_BYTES = 1 << 40

#: The label of every sample of an unlabelled pack (``--unlabelled``); its class table is empty.
NO_LABEL = -1


def max_file_bytes(max_pixels: int | None) -> int:
    """The largest source file a pack reads under a pixel limit.

    8 bytes per allowed pixel (more than any
    image format needs, uncompressed 16-bit RGBA included) plus 16 MiB of metadata; 1 TiB without a limit.
    """
    return _NO_LIMIT_BYTES if not max_pixels else 8 * int(max_pixels) + (16 << 20)


class SourceFileError(OSError):
    """A source file that is not read.

    Not a regular file (a FIFO, a device, ``/dev/zero`` behind a symlink), or larger
    than the pack's byte bound. The pack skips it with this reason.
    """


@dataclass(frozen=True)
class Row:
    """One sample of a source.

    Attributes:
        locator: what :meth:`Source.open` takes to read the image; also the name the pack records
            for the sample (``image/filename``, skipped-file lists).
        label: the class index (:data:`NO_LABEL` in an unlabelled pack).
        fields: extra per-sample values (column name -> value) kept with ``--fields``.
        data: the image bytes, when the scan already holds them; then :meth:`Source.open` is not
            called for this row.
        row: the row's number in a list or table source (1-based), named when the row is skipped.
    """

    locator: str
    label: int
    fields: dict[str, Any] = field(default_factory=dict)
    data: bytes | None = None
    row: int | None = None

    @property
    def where(self) -> str:
        """How a skipped-row entry names this row: its locator, and its row number when it has one."""
        return self.locator if self.row is None else f"{self.locator} (row {self.row})"


class Source(abc.ABC):
    """Where samples come from.

    Attributes:
        name: the source kind (``"imagefolder"``, ``"list"``, ...).
        src: SRC as the journal records it (a resolved path or a URL), so a resume of another SRC is refused.
        classes: the class names, a label indexing them; complete once :meth:`scan` is exhausted.
        skipped: rows or files the scan left out, with the reason; complete once :meth:`scan` is exhausted.
    """

    name: str = ""
    text: bool = False  # True when every value is text (CSV): types are inferred from what the text spells
    field_types: dict[str, dict] | None = None  # the fields' types when the source records them (a pack), else inferred
    max_bytes: int = max_file_bytes(DEFAULT_MAX_PIXELS)  # the pack sets it from its pixel limit (see read_location)

    def __init__(self, src: str) -> None:
        self.src = src
        self.classes: list[str] = []
        self.skipped: list[SkippedFile] = []

    @abc.abstractmethod
    def scan(self) -> Iterator[Row]:
        """The rows, in the source's deterministic order."""

    @abc.abstractmethod
    def open(self, locator: str) -> bytes:
        """The image bytes of the row with ``locator``.

        Raises:
            OSError: the image cannot be read (the pack skips the row with the reason).
        """


def unlabelled_refused(what: str, seen: str, label_column: str) -> ValueError:
    """The one-line refusal of a source without labels.

    ``what`` (the list, tars, Parquet) has no
    ``label_column``; ``seen`` says what it has instead (its columns, the members of its samples).
    """
    return ValueError(
        f"{what} has no label column {label_column!r} ({seen}): name it with --label-column, or pass "
        "--unlabelled to pack without labels (every label -1, no classes)"
    )


def source_digest(classes: list[str], rows: Iterable[Row], skipped: list[SkippedFile]) -> str:
    """``"sha256:..."`` of the class table, the (label, locator) list and what the scan left out.

    It names *which* samples a pack was made of (not their bytes): the packer keeps it in the
    manifest's options as ``source_files``, so a ``--resume`` of a finished pack can tell that
    SRC changed or is another source.
    """
    digest = hashlib.sha256(json.dumps([classes, [[s.path, s.reason] for s in skipped]], ensure_ascii=True).encode())
    for row in rows:
        digest.update(f"{row.label}\t{row.locator}\n".encode())
        if row.fields:
            digest.update(json.dumps(row.fields, sort_keys=True, default=repr).encode() + b"\n")
    return "sha256:" + digest.hexdigest()


#: The largest integer label without class names: the class table "0" .. str(max) (16.7M names) still loads.
MAX_LABEL = (1 << 24) - 1


class Labels:
    """Raw label values (ints, or class names) to indices, as ImageFolder maps folder names.

    Class names become indices in sorted order; when every value is an integer (or, from text
    such as CSV, spells one) the integers are kept and the class table is ``"0".."max"``. A mix of
    the two is refused (it would renumber every integer as a class name, ``"10"`` before ``"2"``),
    unless ``names`` says every label is a class name.

    Args:
        values: ``(where, value)`` of every row: how an error names the row (``"row 2 of train.csv"``), its raw label.
        text: the values are text (CSV, ``.cls``): a value that spells an integer is one.
        names: every label is a class name (``--labels names``), integers included, sorted as text.

    Raises:
        ValueError: (without ``names``) the labels mix integers and class names; the message names the first row
            whose label is of the other kind than the first row's, and its value. Or an integer label is above
            ``MAX_LABEL`` (its class table would not fit in memory): the message names its row.
    """

    def __init__(self, values: Iterable[tuple[str, Any]], *, text: bool = False, names: bool = False) -> None:
        seen: set[Any] = set()
        first: tuple[str, Any, bool] | None = None  # where, value, whether it is an integer
        largest: tuple[str, int] = ("", -1)  # where, the largest integer label
        for where, value in values:
            if not is_label(value):
                continue
            number = _as_int(value, text)
            integer = number is not None
            if number is not None and number > largest[1]:
                largest = (where, number)
            if first is None:
                first = (where, value, integer)
            elif integer != first[2] and not names:
                raise ValueError(
                    f"{where}: label {value!r} is {_kind(integer)}, but {first[0]} has {_kind(first[2])} label "
                    f"{first[1]!r}: the labels mix integers and class names; pass --labels names to read every "
                    "label as a class name (sorted as text), or fix the labels"
                )
            seen.add(value)
        if seen and not names and first is not None and first[2]:
            self.integers = True
            if largest[1] > MAX_LABEL:
                raise ValueError(
                    f"{largest[0]}: label {largest[1]} is larger than {MAX_LABEL}, the most a class table "
                    "'0' .. 'max' may name; number the classes from 0, or pass --labels names to read every label "
                    "as a class name"
                )
            self.classes = [str(i) for i in range(largest[1] + 1)]
            self._index: dict[Any, int] = {}
        else:
            self.integers = False
            self.classes = sorted({str(v) for v in seen})
            self._index = {name: i for i, name in enumerate(self.classes)}
        self.text = text

    def index(self, value: Any) -> int:
        """The label of ``value``.

        Raises:
            ValueError: the value is not a label (a float, a list, missing), or not of the kind the others are.
        """
        if not is_label(value):
            raise ValueError(f"label {value!r} is not an integer or a class name")
        if self.integers:
            number = _as_int(value, self.text)
            if number is None:
                raise ValueError(f"label {value!r} is not an integer, as the other labels are")
            return number
        if str(value) not in self._index:
            raise ValueError(f"label {value!r} is not one of the class names the scan found")
        return self._index[str(value)]


def _kind(integer: bool) -> str:
    return "an integer" if integer else "a class name"


def is_label(value: Any) -> bool:
    """True for a value that can be a label: a non-negative int, or a non-empty string."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= 0
    return isinstance(value, str) and value != ""


def _as_int(value: Any, text: bool) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if text and isinstance(value, str) and value.isdigit() and value.isascii():
        return int(value)
    return None


def read_location(location: str, max_bytes: int = _NO_LIMIT_BYTES) -> bytes:
    """The bytes of a local path or a URL (``s3://``, ``gs://``, ``https://``: through :mod:`fastdata.storage`).

    A local file is opened without blocking (a FIFO cannot hang the pack), must be a regular file once open, and
    is refused without being read when it is larger than ``max_bytes`` (a sparse 8 GB file costs nothing).

    Raises:
        OSError: the file or object cannot be read (:class:`SourceFileError`: not a regular file, or too large).
    """
    from fastdata.storage.urls import is_url

    if is_url(location):
        from fastdata.storage.remote import get_store

        parent, _, name = location.rstrip("/").rpartition("/")
        try:
            return get_store(parent).read(name)
        except ConnectionError as exc:
            raise OSError(str(exc)) from exc
    return read_local(location, max_bytes)


def read_local(path: str | os.PathLike, max_bytes: int) -> bytes:
    """The bytes of a regular local file of at most ``max_bytes`` bytes (see :func:`read_location`)."""
    try:
        return read_regular(path, max_bytes=max_bytes)
    except CorruptRecordError as exc:
        reason = (exc.reason or str(exc)).replace("refusing to read it", "not read")
        if "more than the" in reason:
            reason = (
                f"{reason.split(' bytes,')[0]} bytes, more than the {max_bytes} a source file may have under the "
                "pixel limit (--max-pixels)"
            )
        raise SourceFileError(reason) from None
