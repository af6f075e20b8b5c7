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
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from fastdata.formats.manifest import SkippedFile


@dataclass(frozen=True)
class Row:
    """One sample of a source.

    Attributes:
        locator: what :meth:`Source.open` takes to read the image; also the name the pack records
            for the sample (``image/filename``, skipped-file lists).
        label: the class index.
        fields: extra per-sample values (column name -> value) kept with ``--fields``.
        data: the image bytes, when the scan already holds them (tar members, Parquet cells); then
            :meth:`Source.open` is not called for this row.
    """

    locator: str
    label: int
    fields: dict[str, Any] = field(default_factory=dict)
    data: bytes | None = None


class Source(abc.ABC):
    """Where samples come from.

    Attributes:
        name: the source kind (``"imagefolder"``, ``"list"``, ...).
        src: SRC as the journal records it (a resolved path or a URL), so a resume of another SRC is refused.
        classes: the class names, a label indexing them; complete once :meth:`scan` is exhausted.
        skipped: rows or files the scan left out, with the reason; complete once :meth:`scan` is exhausted.
    """

    name: str = ""

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


def source_digest(classes: list[str], rows: list[Row], skipped: list[SkippedFile]) -> str:
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
