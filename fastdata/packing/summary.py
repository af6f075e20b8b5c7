"""``fastdata inspect``: what a packed dataset holds.

As text (:func:`describe`) or one JSON-ready dict
(:func:`summary`, ``fastdata inspect --json``), read from the manifest and the labels alone, in memory that grows
with the shards and classes, not with the samples.
"""

from __future__ import annotations

import os
from typing import Any

from fastdata._util.text import escaped
from fastdata.formats.errors import CorruptRecordError
from fastdata.formats.fields import fields_table
from fastdata.formats.manifest import Manifest
from fastdata.packing.check_files import TargetsFile, sparse_shard
from fastdata.storage.transfer import CheckSource

__all__ = ["describe", "summary"]


def summary(root: str | os.PathLike) -> dict[str, Any]:
    """What the pack in ``root`` holds, as plain JSON values.

    Keys: ``dataset``, ``format``, ``version``, ``created_by``, ``num_samples``, ``nbytes`` (all shards),
    ``classes`` (``[{"index", "name", "count"}]``; ``count`` None when ``targets.npy`` cannot be read: ``fastdata
    verify`` says why), ``fields`` (name → ``{"kind", "shape"}``), ``shards`` (``[{"path", "num_samples",
    "nbytes", "transcoded"}]``), ``skipped`` (``[{"path", "reason"}]``), ``warnings`` (``[{"path", "messages"}]``),
    ``transcoded`` (records re-coded losslessly; None in manifests that predate it) and ``options``.

    ``root`` may be a URL (``s3://bucket/x``): only the manifest and labels are downloaded.

    Raises:
        FileNotFoundError: ``root`` holds no manifest.
        ValueError: the manifest is malformed (one line naming the field).
        CorruptRecordError: a shard's data on disk cannot hold the records it declares (a sparse file).
    """
    source = CheckSource(root)
    manifest = Manifest.load(source.root)
    base = source.root.resolve()
    refused = sparse_shard(base, manifest) if source.store is None else None
    if refused:
        raise CorruptRecordError(refused)
    try:
        with TargetsFile(base, manifest) as targets:
            counts: list[int | None] = targets.counts(len(manifest.classes)).tolist()
    except (OSError, CorruptRecordError):
        counts = [None] * len(manifest.classes)  # the per-class counts come from targets.npy; verify says what is wrong
    return {
        "dataset": source.name,
        "format": manifest.format,
        "version": manifest.version,
        "created_by": manifest.created_by,
        "num_samples": manifest.num_samples,
        "nbytes": sum(s.nbytes for s in manifest.shards),
        "classes": [{"index": i, "name": name, "count": counts[i]} for i, name in enumerate(manifest.classes)],
        "fields": dict((manifest.options or {}).get("field_types") or {}),
        "shards": [
            {"path": s.path, "num_samples": s.num_samples, "nbytes": s.nbytes, "transcoded": s.transcoded}
            for s in manifest.shards
        ],
        "skipped": [{"path": s.path, "reason": s.reason} for s in manifest.skipped],
        "warnings": [{"path": w.path, "messages": list(w.messages)} for w in manifest.warnings],
        "transcoded": manifest.transcoded_count,
        "options": {k: v for k, v in sorted((manifest.options or {}).items()) if k != "field_types"},
    }


def describe(root: str | os.PathLike) -> str:
    """A human-readable summary: samples, classes with counts, shards with sizes, skipped files (see :func:`summary`).

    ``root`` may be a URL (``s3://bucket/x``): only the manifest and labels are downloaded.
    """
    info = summary(root)
    names = [escaped(c["name"]) for c in info["classes"]]
    lines = [
        f"dataset   {escaped(info['dataset'])}",
        f"format    {info['format']} (manifest v{info['version']}, {escaped(info['created_by'])})",
        f"samples   {info['num_samples']}",
        f"classes   {len(names)}" + (" (unlabelled: every label is -1)" if info["options"].get("unlabelled") else ""),
    ]
    width = max((len(c) for c in names), default=0)
    lines += [
        f"  {c['index']:>5}  {name:<{width}}  {'?' if c['count'] is None else c['count']}"
        for c, name in zip(info["classes"], names, strict=False)
    ]
    types = info["fields"]
    lines.append(f"fields    {len(types)}" + ("" if types else " (pack with --fields to keep columns)"))
    lines += [escaped(line) for line in fields_table(types)] if types else []
    lines.append(f"shards    {len(info['shards'])}, {_human(info['nbytes'])} in all")
    lines += [f"  {escaped(s['path'])}  {s['num_samples']} samples  {_human(s['nbytes'])}" for s in info["shards"]]
    lines.append(f"skipped   {len(info['skipped'])}")
    lines += [f"  {escaped(s['path'])}: {escaped(s['reason'])}" for s in info["skipped"]]
    lines.append(f"warnings  {len(info['warnings'])} file(s) packed with codec warnings")
    lines += [f"  {escaped(w['path'])}: {escaped('; '.join(w['messages']))}" for w in info["warnings"]]
    if info["transcoded"] is not None:
        lines.append(
            f"transcoded {info['transcoded']} of {info['num_samples']} records (lossless JPEGs with restart intervals)"
        )
    options = ", ".join(f"{escaped(k)}={escaped(v)}" for k, v in info["options"].items() if v is not None)
    lines.append(f"options   {options}")
    return "\n".join(lines)


def _human(nbytes: float) -> str:
    for unit in ("B", "KB", "MB"):
        if nbytes < 1000:
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1000
    return f"{nbytes:.1f} GB"
