"""``PackOptions``: every option of a pack as one frozen, checked value.

:func:`fastdata.packing.packer.pack` builds one from its keywords (the command line builds one from its
flags) and hands it, as one thing, to the source, the engines and the pipeline. What the output depends
on (:meth:`PackOptions.recorded`) is read once, into the pack's
:class:`~fastdata.packing.identity.PackIdentity`, which the manifest, the resume journal, the range
records and the part files record; how the pack runs (workers, progress, resume, overwrite) is not.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from fastdata.decode import DEFAULT_MAX_PIXELS
from fastdata.decode.limits import as_limit
from fastdata.formats import get_format
from fastdata.packing.plan import RangePlan, check_part, make_plan
from fastdata.packing.writer import DEFAULT_SHARD_SIZE

ENGINES = ("local", "ray")
SOURCES = ("auto", "imagefolder", "list", "parquet", "webdataset", "pack", "tfrecord")
LABELS = ("auto", "names")


@dataclass(frozen=True)
class PackOptions:
    """The options of one pack (see :func:`fastdata.pack` for each one's meaning).

    Construction checks every value and raises ``ValueError`` with one line naming the bad one;
    ``quality`` is kept only when ``max_side`` is set (it has no effect otherwise), ``max_pixels``
    0 becomes None (no limit).
    """

    format: str
    shard_size: int = DEFAULT_SHARD_SIZE
    samples_per_shard: int | None = None
    max_side: int | None = None
    quality: int | None = 90
    shuffle_seed: int | None = None
    workers: int | None = None
    strict: bool = False
    resume: bool = False
    overwrite: bool = False
    progress: bool = True
    max_pixels: int | None = DEFAULT_MAX_PIXELS
    allow_empty: bool = False
    source: str = "auto"
    label_column: str | None = None
    image_column: str | None = None
    fields: tuple[str, ...] = field(default_factory=tuple)
    append: bool = False
    range_size: int | None = None
    engine: str = "local"
    part: tuple[int, int] | None = None
    ray_address: str | None = None
    keep_bytes: bool = False
    labels: str = "auto"
    unlabelled: bool = False
    allow_duplicates: bool = False

    def __post_init__(self) -> None:
        get_format(self.format)  # unknown names are refused first, listing the valid ones
        _check(
            isinstance(self.shard_size, int) and self.shard_size > 0,
            f"shard_size must be a positive number of bytes, got {self.shard_size!r}",
        )
        _check(
            self.samples_per_shard is None or (isinstance(self.samples_per_shard, int) and self.samples_per_shard > 0),
            f"samples_per_shard must be a positive integer, got {self.samples_per_shard!r}",
        )
        _check(
            self.max_side is None or (isinstance(self.max_side, int) and self.max_side >= 8),
            f"max_side must be an integer >= 8 (pixels), got {self.max_side!r}",
        )
        _check(
            isinstance(self.quality, int) and 1 <= self.quality <= 100 or (self.quality is None and not self.max_side),
            f"quality must be an integer JPEG quality in 1..100, got {self.quality!r}",
        )
        _check(
            self.shuffle_seed is None
            or (
                isinstance(self.shuffle_seed, int)
                and not isinstance(self.shuffle_seed, bool)
                and self.shuffle_seed >= 0
            ),
            f"shuffle_seed must be a non-negative integer (numpy's seeds are), got {self.shuffle_seed!r}",
        )
        _check(
            self.workers is None or (isinstance(self.workers, int) and self.workers >= 0),
            f"workers must be a non-negative integer (0: no pool), got {self.workers!r}",
        )
        _check(
            not (self.resume and self.overwrite),
            "resume and overwrite exclude each other: resume finishes a pack, overwrite starts over",
        )
        _check(not (self.append and self.overwrite), "append excludes overwrite: append adds shards to a finished pack")
        _check(self.source in SOURCES, f"unknown source {self.source!r}: choose one of {', '.join(SOURCES)}")
        if isinstance(self.fields, str):
            object.__setattr__(self, "fields", tuple(f for f in self.fields.split(",") if f))
        object.__setattr__(self, "fields", tuple(self.fields))
        _check(all(isinstance(f, str) and f for f in self.fields), f"fields must be column names, got {self.fields!r}")
        _check(len(set(self.fields)) == len(self.fields), f"fields names a column twice: {', '.join(self.fields)}")
        _check(
            self.range_size is None or (isinstance(self.range_size, int) and self.range_size > 0),
            f"range_size must be a positive number of samples, got {self.range_size!r}",
        )
        _check(self.engine in ENGINES, f"unknown engine {self.engine!r}: choose one of {', '.join(ENGINES)}")
        if self.part is not None:
            object.__setattr__(self, "part", tuple(self.part))
            check_part(*self.part)
        _check(isinstance(self.keep_bytes, bool), f"keep_bytes must be True or False, got {self.keep_bytes!r}")
        _check(self.labels in LABELS, f"labels must be one of {', '.join(LABELS)}, got {self.labels!r}")
        _check(
            not (self.unlabelled and (self.label_column is not None or self.labels != "auto")),
            "unlabelled excludes label_column and labels: an unlabelled pack reads no label",
        )
        object.__setattr__(self, "max_pixels", as_limit(self.max_pixels))
        if not self.max_side:
            object.__setattr__(self, "quality", None)

    @classmethod
    def of(cls, **keywords: Any) -> PackOptions:
        """``PackOptions(**keywords)``, with an unknown keyword refused as a ``ValueError`` naming the known ones."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(keywords) - known)
        if unknown:
            raise ValueError(f"unknown pack option(s) {', '.join(unknown)}: the options are {', '.join(sorted(known))}")
        if "format" not in keywords:
            raise ValueError("format is required: 'tfrecord' or 'lmdb'")
        return cls(**keywords)

    def with_(self, **changes: Any) -> PackOptions:
        """A copy with ``changes`` (checked again)."""
        return replace(self, **changes)

    def plan(self, samples: int) -> RangePlan:
        """The range plan of a pack of ``samples`` samples with these options."""
        return make_plan(samples, self.range_size, self.samples_per_shard)

    def recorded(self) -> dict[str, Any]:
        """The options the output depends on, as the manifest and the resume journal record them.

        The options every pack has are always present; the source options only when they differ from
        their defaults, so an ImageFolder pack records exactly what it recorded before they existed.
        """
        data: dict[str, Any] = {
            "format": self.format,
            "shard_size": self.shard_size,
            "samples_per_shard": self.samples_per_shard,
            "max_side": self.max_side,
            "quality": self.quality,
            "shuffle_seed": self.shuffle_seed,
            "max_pixels": self.max_pixels,
            "range_size": self.plan(0).range_size,
            "keep_bytes": self.keep_bytes,
        }
        for name in ("label_column", "image_column"):
            if getattr(self, name) is not None:
                data[name] = getattr(self, name)
        if self.labels != "auto":
            data["labels"] = self.labels
        if self.unlabelled:
            data["unlabelled"] = True
        if self.fields:
            data["fields"] = list(self.fields)
        return data


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)
