"""``fastdata.write``: a pack written from Python.

From any iterable of ``(image bytes, label)`` or ``(image bytes,
label, fields)``, in one pass and with what ``pack`` guarantees.

The samples become the pipeline's jobs as they are drawn (:func:`~fastdata.packing.pipeline.write_shards`: each
image validated in a worker by pack's rules and re-coded losslessly, bounded shards published atomically by
:class:`~fastdata.packing.writer.ShardWriter`, each journaled), and :func:`~fastdata.packing.finish.finalize` writes
the labels, the transcoded side file and the manifest last, under the output folder's lock. The iterable is read
once (a generator is fine); a bad label or field value, or an exception from the iterable, stops the write and
removes what it wrote: a folder is either a finished pack or holds nothing of this call.
"""

from __future__ import annotations

import json
import operator
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastdata.decode import DEFAULT_MAX_PIXELS
from fastdata.formats.fields import KINDS, encode_values, fits, infer_types
from fastdata.formats.manifest import Manifest
from fastdata.formats.manifest_entries import ShardInfo
from fastdata.packing.finish import NothingPackedError, finalize
from fastdata.packing.journal import PackJournal
from fastdata.packing.lock import OutputLock
from fastdata.packing.options import PackOptions
from fastdata.packing.output import create_output, prepare_output, remove_own_files
from fastdata.packing.pipeline import Job, write_shards
from fastdata.packing.pool import cap_workers
from fastdata.packing.sources.base import MAX_LABEL
from fastdata.packing.writer import DEFAULT_SHARD_SIZE, ShardWriter
from fastdata.storage.urls import is_url

__all__ = ["write"]

_ARRAYS = ("int_list", "float_array")


def write(
    samples: Iterable[tuple[bytes, int | str] | tuple[bytes, int | str, Mapping[str, Any]]],
    out: str | os.PathLike,
    *,
    format: str = "tfrecord",
    classes: Sequence[str] | None = None,
    fields: Mapping[str, str | Mapping[str, Any]] | None = None,
    shard_size: int = DEFAULT_SHARD_SIZE,
    samples_per_shard: int | None = None,
    transcode: bool = True,
    max_side: int | None = None,
    quality: int = 90,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    strict: bool = False,
    allow_empty: bool = False,
    overwrite: bool = False,
    workers: int | None = None,
    progress: bool = True,
    on_shard: Callable[[ShardInfo], None] | None = None,
) -> Manifest:
    """Write ``samples`` as a pack in ``out`` (what ``fastdata pack`` writes, read by :class:`~fastdata.ShardDataset`).

    Example::

        fastdata.write(((jpeg, label) for jpeg, label in my_records()), "shards", classes=["cat", "dog"])

    Args:
        samples: ``(image, label)`` or ``(image, label, fields)`` tuples, read once, in order. ``image``: the
            encoded file's bytes (JPEG, PNG, any format pack reads). ``label``: an int (an index into
            ``classes`` when given), or one of ``classes``' names. ``fields``: a dict of per-sample values kept
            with the image (read back with ``ShardDataset(fields=...)``).
        out: the output folder (created if missing; must be empty, or hold a fastdata dataset and ``overwrite``).
        format: ``"tfrecord"`` or ``"lmdb"``.
        classes: the class names (label ``i`` is ``classes[i]``; records carry the name). None: labels are
            integers and the classes are ``"0"`` .. ``str(max label)``.
        fields: each field's type, ``{name: kind}`` or ``{name: {"kind": kind, "shape": [...]}}`` with the kinds of
            :mod:`fastdata.formats.fields` (``int``, ``float``, ``string``, ``int_list``, ``float_array``,
            ``json``; arrays default to a variable length). None: taken from the first sample's dict. Every
            sample's value must fit its field's type (a float in an ``int`` field is refused, never cut).
        shard_size: upper bound on a shard's bytes (default 256 MiB).
        samples_per_shard: upper bound on records per shard (default: none).
        transcode: re-code each JPEG losslessly with restart intervals, as pack does (same pixels, faster
            crops); False stores every image byte for byte (pack's ``--keep-bytes``).
        max_side: downscale images with a longer side than this and re-encode them as JPEG (pack's
            ``--max-side``; None: never).
        quality: the JPEG quality of those re-encoded images (pack's ``--quality``).
        max_pixels: skip images whose header declares more pixels (pack's ``--max-pixels``; 0/None: no limit).
        strict: raise :class:`~fastdata.packing.pipeline.BadImageError` on the first bad image instead of
            skipping it (a skipped image is listed in the manifest as ``"sample N"`` with the reason).
        allow_empty: write a dataset even when every image was skipped.
        overwrite: replace the dataset ``out`` holds (only fastdata's own files are deleted).
        workers: validating and re-coding processes (default, and at most: the CPUs this process may use; 0: in
            this process).
        progress: show a progress bar (the total when ``samples`` has a length).
        on_shard: called with each shard's manifest entry once it is published.

    Returns:
        The manifest written to ``out/manifest.json``.

    Raises:
        TypeError: a sample is not such a tuple, its image is not bytes, or its label is not an int or a name.
        ValueError: a bad option, a label outside ``classes``, or a field value that does not fit its type
            (each names the sample); ``out`` is a URL (write a folder, then ``fastdata.storage.transfer.upload``).
        FileExistsError, OutputLockedError: as :func:`fastdata.pack` (``out`` not empty, or being written).
        BadImageError: ``strict`` and an image is bad.
        NothingPackedError: every image was skipped and ``allow_empty`` is not set.
    """
    if is_url(out):
        raise ValueError(
            f"write() writes a local folder, not {out}: write one, then upload it with "
            "fastdata.storage.transfer.upload(folder, url)"
        )
    if not isinstance(transcode, bool):
        raise TypeError(f"transcode must be True or False, got {transcode!r}")
    options = PackOptions(
        format=format,
        shard_size=shard_size,
        samples_per_shard=samples_per_shard,
        max_side=max_side,
        quality=quality,
        workers=cap_workers(workers),
        strict=strict,
        overwrite=overwrite,
        progress=progress,
        max_pixels=max_pixels,
        allow_empty=allow_empty,
        keep_bytes=not transcode,
    )
    stream = _Samples(samples, _classes(classes), _field_types(fields), options)
    try:
        total: int | None = len(samples)  # type: ignore[arg-type]
    except TypeError:
        total = None
    out = create_output(Path(out))
    with OutputLock(out):
        prepare_output(out, resume=False, overwrite=overwrite)
        journal = PackJournal(out)
        journal.start({"fingerprint": "fastdata.write", "options": options.recorded()})
        writer = ShardWriter(
            out,
            format=format,
            shard_size=options.shard_size,
            samples_per_shard=options.samples_per_shard,
            on_shard=on_shard,
        )
        try:
            entries = write_shards(
                stream.jobs(), writer, journal, stream.classes or [], options, options.workers, total, 0, []
            )
            if not allow_empty and not any(e.shard is not None for e in entries):
                raise NothingPackedError([s for e in entries for s in e.skipped])
            return finalize(out, format, stream.final_classes(), entries, stream.recorded(), journal)
        except BaseException:
            remove_own_files(out)  # this call wrote every fastdata file there: a folder with no pack is left
            raise


class _Samples:
    """The samples as the pipeline's jobs, each one's label and fields checked as it is drawn."""

    def __init__(
        self, samples: Iterable[Any], classes: list[str] | None, types: dict[str, dict] | None, options: PackOptions
    ) -> None:
        self.samples = samples
        self.classes = classes
        self.types = types
        self.options = options
        self._index = {name: i for i, name in enumerate(classes or [])}
        self._top = -1  # the largest label seen

    def jobs(self) -> Iterator[Job]:
        for number, sample in enumerate(self.samples):
            if not isinstance(sample, (tuple, list)) or len(sample) not in (2, 3):
                raise TypeError(
                    f"sample {number} must be (image bytes, label) or (image bytes, label, fields dict), "
                    f"got {_kind(sample)}"
                )
            image, label, values = sample[0], sample[1], (sample[2] if len(sample) == 3 else None)
            if not isinstance(image, (bytes, bytearray, memoryview)):
                raise TypeError(
                    f"sample {number}: the image must be the encoded file's bytes (a JPEG's, a PNG's), got "
                    f"{_kind(image)}: encode decoded pixels first (cv2.imencode, PIL's Image.save)"
                )
            yield Job(
                number,
                f"sample {number}",
                self._label(number, label),
                None,  # type: ignore[arg-type]
                self.options,
                self._fields(number, values),
                bytes(image),
            )

    def _label(self, number: int, label: Any) -> int:
        if isinstance(label, str) and self.classes is not None:
            if label not in self._index:
                raise ValueError(f"sample {number}: label {label!r} is not one of the {len(self.classes)} classes")
            return self._index[label]
        try:
            if isinstance(label, bool):
                raise TypeError
            value = operator.index(label)
        except TypeError:
            raise TypeError(
                f"sample {number}: label must be an int{' or a class name' if self.classes else ''}, got {_kind(label)}"
            ) from None
        if self.classes is None and value > MAX_LABEL:
            raise ValueError(
                f"sample {number}: label {value} is larger than {MAX_LABEL}, the most a class table '0' .. 'max' "
                "may name; number the classes from 0 (or pass classes=[...] and their names as labels)"
            )
        if value < 0 or (self.classes is not None and value >= len(self.classes)):
            raise ValueError(
                f"sample {number}: label {value} is outside "
                + ("the labels (>= 0)" if self.classes is None else f"the {len(self.classes)} classes")
            )
        self._top = max(self._top, value)
        return value

    def _fields(self, number: int, values: Any) -> dict[str, tuple[str, list]]:
        if values is not None and not isinstance(values, Mapping):
            raise TypeError(f"sample {number}: fields must be a dict of name -> value, got {_kind(values)}")
        if values is not None:
            names = [name for name in values if not isinstance(name, str)]
            if names:
                raise TypeError(f"sample {number}: field names must be str, got {_kind(names[0])}")
            values = {name: _plain(value) for name, value in values.items()}
            _check_text(values, f"sample {number}: its fields")
        if self.types is None:  # the first sample says which fields there are, and their types
            self.types = infer_types(values or {}, [values or {}])
        if set(values or {}) != set(self.types):
            raise ValueError(
                f"sample {number} has fields {sorted(values or {})}, the samples before it "
                f"{sorted(self.types)}: give every sample the same fields (or declare fields=...)"
            )
        for name, spec in self.types.items():
            if not fits(spec, values[name]):
                raise ValueError(
                    f"sample {number}: field {name!r} is {_kind(values[name])}, which does not fit "
                    f"its type {spec} (declare fields={{{name!r}: ...}} to store it)"
                )
        try:
            return encode_values(self.types, values or {})
        except TypeError as exc:  # a json field holding what JSON cannot spell (an object, a set)
            raise TypeError(f"sample {number}: a field value cannot be stored as JSON ({exc})") from None

    def final_classes(self) -> list[str]:
        return list(self.classes) if self.classes is not None else [str(i) for i in range(self._top + 1)]

    def recorded(self) -> dict[str, Any]:
        """The manifest's options: pack's recorded options, with the fields and their types."""
        recorded = self.options.with_(fields=tuple(self.types or ())).recorded()
        if self.types:
            recorded["field_types"] = self.types
        return recorded


def _classes(classes: Sequence[str] | None) -> list[str] | None:
    if classes is None:
        return None
    if isinstance(classes, str) or not all(isinstance(c, str) for c in classes):
        raise TypeError(f"classes must be a list of class names (str), got {_kind(classes)}")
    names = list(classes)
    _check_text(names, "classes")
    if len(set(names)) != len(names):
        raise ValueError(f"classes names a class twice: {sorted(n for n in set(names) if names.count(n) > 1)[:3]}")
    return names


def _field_types(fields: Mapping[str, Any] | None) -> dict[str, dict] | None:
    if fields is None:
        return None
    if not isinstance(fields, Mapping):
        raise TypeError(f"fields must be a dict of name -> kind, got {_kind(fields)}")
    infer_types(fields, [])  # refuses reserved names
    types = {}
    for name, spec in fields.items():
        spec = {"kind": spec} if isinstance(spec, str) else dict(spec)
        if spec.get("kind") not in KINDS:
            raise ValueError(f"fields[{name!r}] has kind {spec.get('kind')!r}: use one of {', '.join(KINDS)}")
        spec.setdefault("shape", [-1] if spec["kind"] in _ARRAYS else [])
        types[str(name)] = {"kind": spec["kind"], "shape": list(spec["shape"])}
    return types


def _plain(value: Any) -> Any:
    """``value`` with numpy's scalars and arrays as the Python numbers and lists they hold (in lists and dicts too)."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _check_text(value: Any, what: str) -> None:
    """Refuse a string (in lists and dicts too) that is no UTF-8 text (a lone surrogate, as ``os.fsdecode`` makes)."""
    try:
        json.dumps(value, ensure_ascii=False, default=str).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"{what}: a string holds a lone surrogate (undecodable bytes of a file name?), which is no UTF-8 text; "
            "decode it with errors='replace' or store the bytes"
        ) from None


def _kind(value: Any) -> str:
    return (
        f"a {type(value).__name__}" if not isinstance(value, (int, float)) or isinstance(value, bool) else repr(value)
    )
