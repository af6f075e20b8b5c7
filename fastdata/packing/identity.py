"""What a pack is made of, computed once, and every check that another run's record matches it.

:func:`fastdata.packing.packer.pack` builds one :class:`PackIdentity` from its
:class:`~fastdata.packing.options.PackOptions` and the source, right after the census pass, and hands
it down as a value: the manifest records its :attr:`~PackIdentity.recorded` options, the resume
journal starts with its :attr:`~PackIdentity.journal_header`, range records and part files hold its
:attr:`~PackIdentity.range_header`, and an append's journal the header of
:meth:`~PackIdentity.append_header`. No lower module works these out again.

The checks live here too, each naming every difference in one line: a ``--resume`` against a journal
(:func:`check_journal`), a finished manifest (:meth:`PackIdentity.check_finished`) or the range
records in OUT (:meth:`PackIdentity.check_ranges`); an ``--append`` against the pack's options
(:meth:`PackIdentity.append_header`); ``fastdata merge``'s parts against each other
(:func:`check_part`). All of them compare with one function, :func:`changed`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastdata.formats.manifest import Manifest
from fastdata.packing.options import PackOptions
from fastdata.packing.plan import RangePlan
from fastdata.packing.sources.base import Source, source_digest

__all__ = ["SAME_OPTIONS", "PackIdentity", "changed", "check_journal", "check_part", "differences", "fingerprint"]

#: The options an append must share with the pack it adds to (mixing them would be wrong).
SAME_OPTIONS = ("format", "keep_bytes", "samples_per_shard", "shard_size", "max_side", "quality", "max_pixels")


def fingerprint(recorded: Mapping[str, Any]) -> str:
    """A hash of the recorded pack options.

    ``source_files`` (the digest of the source's rows) included; a resume
    must match it.
    """
    return hashlib.sha256(json.dumps(recorded, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class PackIdentity:
    """One pack's recorded facts: what its output depends on, in the forms the manifest, journal and records keep.

    Built once per pack by :meth:`of`; treat its dicts as read-only (they are written as they are).

    Attributes:
        src: SRC as the journal records it (:attr:`Source.src <fastdata.packing.sources.base.Source>`).
        settings: :meth:`PackOptions.recorded` (the options the output depends on).
        source_files: :func:`~fastdata.packing.sources.base.source_digest` of the source's rows.
        field_types: the kept fields' types (from the census pass; empty without fields).
        samples: the rows to pack.
        files: ``samples`` plus the items the scan left out.
        classes: the class names.
        plan: the range plan of ``samples`` samples.
        recorded: ``settings`` with ``source_files`` (and ``field_types``): the manifest's ``options``.
        fingerprint: :func:`fingerprint` of ``recorded``.
        journal_header: the resume journal's first line: ``{"fingerprint", "src", "options", "files"}``.
        range_header: what every range record and part file holds:
            ``{"fingerprint", "options", "files", "classes", "ranges"}``.
    """

    src: str
    settings: dict[str, Any]
    source_files: str
    field_types: dict[str, dict]
    samples: int
    files: int
    classes: tuple[str, ...]
    plan: RangePlan
    recorded: dict[str, Any]
    fingerprint: str
    journal_header: dict[str, Any]
    range_header: dict[str, Any]

    @classmethod
    def of(cls, options: PackOptions, source: Source, samples: int, types: dict[str, dict]) -> PackIdentity:
        """The identity of a pack of ``samples`` rows of ``source``.

        The identity of a pack of ``samples`` rows of ``source`` (scanned once more, for its digest) with
        ``options``; ``types``: the kept fields' types.
        """
        settings = options.recorded()
        digest = source_digest(source.classes, source.scan(), source.skipped)
        recorded = {**settings, "source_files": digest}
        if types:
            recorded["field_types"] = types
        plan = RangePlan(samples, settings["range_size"])  # the recorded range size is the plan's, rounded up
        files = samples + len(source.skipped)
        print_ = fingerprint(recorded)
        journal_header = {"fingerprint": print_, "src": str(source.src), "options": dict(recorded), "files": int(files)}
        range_header = {
            "fingerprint": print_,
            "options": recorded,
            "files": files,
            "classes": list(source.classes),
            "ranges": len(plan),
        }
        return cls(
            str(source.src),
            settings,
            digest,
            dict(types),
            samples,
            files,
            tuple(source.classes),
            plan,
            recorded,
            print_,
            journal_header,
            range_header,
        )

    def append_header(self, out: Path, pack: Manifest) -> dict[str, Any]:
        """The journal's first line for an append.

        The journal's first line for an append of these samples to ``pack`` (the manifest in ``out``): the
        settings with the source's digest as ``append`` (not ``source_files``), and what it goes ``onto``.

        Raises:
            ValueError: the pack has another format, other options (:data:`SAME_OPTIONS`) or other field types
                than this append would write; each difference is named.
        """
        if pack.format != self.settings["format"]:
            raise ValueError(
                f"--append refused: {out} holds a {pack.format} pack, not {self.settings['format']}: "
                f"pass --format {pack.format}"
            )
        _check_same_options(out, pack.options or {}, self)
        before = pack.options.get("field_types") or {}
        if self.field_types != before:
            raise ValueError(
                f"--append refused: the new samples' fields {self.field_types or 'none'} differ from "
                f"the pack's {before or 'none'}: pass the same --fields, with values of the same types"
            )
        onto = [pack.num_samples, len(pack.shards), pack.targets]
        recorded = {**self.settings, "append": self.source_files, "onto": onto}
        return {
            "fingerprint": fingerprint(recorded),
            "src": self.src,
            "options": dict(recorded),
            "files": int(self.samples),
        }

    def check_finished(self, out: Path, manifest: Manifest) -> None:
        """Refuse a ``--resume`` of the finished pack in ``out`` when this run's input or options differ.

        The manifest keeps the options and the digest of the source files (not SRC's path), so
        another SRC is recognised by its files.

        Raises:
            ValueError: naming each difference.
        """
        recorded = {"options": manifest.options, "files": manifest.num_samples + len(manifest.skipped)}
        found = differences(recorded, self.journal_header)
        if found:
            raise ValueError(
                f"--resume refused: {str(out)!r} holds a finished pack of other input or with other options: "
                f"{'; '.join(found)}. Pass the same SRC and options, or --overwrite to pack again"
            )

    def check_ranges(self, out: Path, record_header: dict[str, Any]) -> None:
        """Refuse the range records in ``out`` when one was written by another pack (``record_header``: its header).

        Raises:
            ValueError: naming each difference.
        """
        if record_header != self.range_header:
            found = differences(record_header, self.range_header) or ["its ranges record another input"]
            raise ValueError(
                f"refused: {str(out)!r} holds ranges of a pack of other input or with other options: "
                f"{'; '.join(found)}. Pack with the same SRC and options, or into an empty folder"
            )


def changed(then: Mapping[str, Any], now: Mapping[str, Any], keys: Iterable[str]) -> list[str]:
    """The recorded options among ``keys`` whose values differ.

    The recorded options among ``keys`` whose values differ between ``then`` and ``now`` (a missing one is None),
    in the order of ``keys``: the one comparison every check here makes.
    """
    return [key for key in keys if then.get(key) != now.get(key)]


def differences(recorded: Mapping[str, Any], expected: Mapping[str, Any]) -> list[str]:
    """What differs between a recorded pack (journal header, manifest or range record) and this run, in words.

    Only what ``recorded`` holds is compared (an older journal or manifest may lack ``src`` or
    some options).

    Args:
        recorded: ``{"src", "options", "files"}`` of the earlier run (any may be missing).
        expected: this run's header (:attr:`PackIdentity.journal_header` or ``range_header``).

    Returns:
        One phrase per difference, e.g. ``"--format is 'tfrecord' (the pack used 'lmdb')"``.
    """
    found = []
    if "src" in recorded and recorded["src"] != expected["src"]:
        found.append(f"SRC is {expected['src']!r} (the pack was made from {recorded['src']!r})")
    then, now = recorded.get("options") or {}, expected["options"]
    for key in changed(then, now, sorted(k for k in then if k != "source_files")):
        found.append(f"{_flag(key)} is {_shown(now.get(key))} (the pack used {_shown(then[key])})")
    if "source_files" in then and changed(then, now, ["source_files"]):
        count = f"{expected['files']} now"
        if "files" in recorded:
            count = f"{recorded['files']} then, {count}"
        found.append(f"the image files or class folders in SRC are not those the pack was made from ({count})")
    return found


def check_journal(folder: Path, recorded: Mapping[str, Any], expected: Mapping[str, Any]) -> None:
    """Refuse a ``--resume`` of a pack started with other settings.

    Refuse a ``--resume`` of the unfinished pack in ``folder`` whose journal starts with ``recorded`` when this
    run's first line would be ``expected``.

    Raises:
        ValueError: the journal was written for another SRC, other files or other options; the message names
            each difference.
    """
    found = differences(recorded, expected)
    if found or recorded.get("fingerprint") != expected["fingerprint"]:
        raise ValueError(
            f"--resume refused: {folder} holds an unfinished pack of a different input or with "
            f"different options: {'; '.join(found) or 'its journal records another input'}. "
            "Resume with the same SRC and options, or pass --overwrite to start over"
        )


def _check_same_options(out: Path, then: Mapping[str, Any], identity: PackIdentity) -> None:
    """Refuse, in one line, an append whose options differ from the pack's.

    Refuse, in one line, an append whose options differ from the pack's (``then``: its manifest's options)
    where mixing them would be wrong (:data:`SAME_OPTIONS`).

    Raises:
        ValueError: naming each difference.
    """
    now = identity.settings
    found = [
        f"{_flag(key)} {_shown(now.get(key))} (the pack has {_shown(then[key])})"
        for key in changed(then, now, [k for k in SAME_OPTIONS if k in then])
    ]
    if found:
        raise ValueError(
            f"--append refused: {out} was packed with other options: {'; '.join(found)}: "
            "append with the pack's own options"
        )


def check_part(index: int, parts: int, first: Mapping[str, Any], header: Mapping[str, Any], out: str) -> None:
    """Refuse part ``index``/``parts`` of a split whose header differs from part 0's (``first``).

    Raises:
        ValueError: other options (each difference named), or another source.
    """
    then = {k: v for k, v in first["options"].items() if k != "source_files"}
    now = {k: v for k, v in header["options"].items() if k != "source_files"}
    if then != now:
        keys = changed(then, now, sorted(set(then) | set(now)))
        shown = "; ".join(f"{_flag(k)} is {now.get(k)!r} (part 0/{parts} used {then.get(k)!r})" for k in keys)
        raise ValueError(
            f"part {index}/{parts} in {out!r} was packed with other options than part 0/{parts}:"
            f" {shown}; pack it again with the same options"
        )
    if header != first:
        raise ValueError(
            f"part {index}/{parts} in {out!r} was packed from another source than part "
            f"0/{parts} (other image files, class folders or order): pack it again from the "
            "same SRC"
        )


def _flag(key: str) -> str:
    return f"--{key.replace('_', '-')}"


def _shown(value: Any) -> str:
    return "not set" if value is None else repr(value)
