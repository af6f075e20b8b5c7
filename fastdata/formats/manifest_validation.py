"""Reading a manifest without trusting it.

Strict JSON (:func:`parse_json`: UTF-8, no NaN, no overflow) and typed,
range-checked access to every field (integers in ``[0, 2**63)``, 8-hex-digit checksums, paths inside the dataset
folder, sorted ``transcoded`` ranges), each error one line naming the file and the field, never echoing its text.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal, overload

from fastdata.formats.manifest_entries import FileWarnings, ShardInfo, SkippedFile

_MAX_INT = 2**63
_HEX = frozenset("0123456789abcdef")
_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
_KINDS: dict[type, str] = {str: "a string", list: "a list", dict: "an object"}


def parse_json(data: bytes, source: str) -> Any:
    """Strict JSON: UTF-8, no NaN/Infinity, no number that overflows a float or exceeds Python's digit limit.

    Raises:
        ValueError: one line naming ``source`` (never echoing its contents).
    """
    try:
        text = data.decode("utf-8")
        parsed = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
        if _SURROGATE.search(text):  # escaped surrogates: only whole pairs spell text (a lone one is no character)
            json.dumps(parsed, ensure_ascii=False).encode("utf-8")
        return parsed
    except UnicodeEncodeError:
        raise ValueError(
            f"{source} escapes a lone surrogate (\\udXXX), which is no UTF-8 text: re-create it with `fastdata pack`"
        ) from None
    except UnicodeDecodeError:
        raise ValueError(f"{source} is not UTF-8 text: re-create it with `fastdata pack`") from None
    except RecursionError:
        raise ValueError(
            f"{source} is nested too deeply to be a fastdata manifest: re-create it with `fastdata pack`"
        ) from None
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{source} is not valid JSON ({exc.msg} at line {exc.lineno}): re-create it with `fastdata pack`"
        ) from None
    except ValueError as exc:  # NaN, infinity, a 1e999 or an integer of thousands of digits
        raise ValueError(f"{source} is not valid JSON ({exc}): re-create it with `fastdata pack`") from None


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError("a number overflows a float")
    return value


class _Fields:
    """Typed access to the fields of a parsed manifest; every error is one line naming the field."""

    def __init__(self, source: str) -> None:
        self.source = source
        self._files: dict[str, str | int] = {"manifest.json": "the manifest itself"}  # each file named, and by which
        self._paths = 0  # field: its name, or a position in the names claim_shards took (an int: not GC-tracked)
        self._index_shards: list[int] = []

    @property
    def claimed(self) -> dict[str, str | int]:
        """The files named so far (normalised relative paths), each with the field that named it."""
        return self._files

    def claim_shards(self, names: list[str], paths: int, index_shards: list[int]) -> None:
        """Claim ``names`` (checked, plain, distinct and unclaimed) for the shards' fields.

        ``names`` holds every shard's path, then the indexes of the shards ``index_shards`` lists: ``names[paths + j]``
        is the index of shard ``index_shards[j]``.
        """
        self._paths, self._index_shards = paths, index_shards
        self._files.update(zip(names, range(len(names)), strict=True))

    def _field_of(self, claim: str | int) -> str:
        if isinstance(claim, str):
            return claim
        if claim < self._paths:
            return f"shards[{claim}].path"
        return f"shards[{self._index_shards[claim - self._paths]}].index"

    @overload
    def unique(self, rel: str, name: str) -> str: ...
    @overload
    def unique(self, rel: str | None, name: str) -> str | None: ...
    def unique(self, rel: str | None, name: str) -> str | None:
        """``rel`` (a checked relative path, or None), refused when an earlier field named the same file."""
        if rel is None:
            return None
        key = rel if plain_path(rel) else _normal(rel)
        other = self._files.setdefault(key, name)
        if other is not name:
            named = self._field_of(other)
            raise ValueError(
                f"{self.source}: field {name} names the same file as {named}; a file holds one thing of a pack: "
                "re-create it with `fastdata pack`"
            )
        return rel

    def fail(self, name: str, expected: str, value: Any) -> ValueError:
        return ValueError(
            f"{self.source}: field {name} must be {expected}, got {_kind(value)}; re-create it with `fastdata pack`"
        )

    def check(self, value: Any, name: str, kind: type, expected: str) -> Any:
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise self.fail(name, expected, value)
        return value

    def get(self, data: dict, key: str, name: str, required: bool) -> Any:
        if key not in data and required:
            raise ValueError(f"{self.source}: field {name} is missing; re-create it with `fastdata pack`")
        return data.get(key)

    def mapping(self, value: Any, name: str) -> dict:
        return self.check(value, name, dict, "an object")

    @overload
    def array(self, data: dict, key: str, *, required: Literal[True], name: str | None = None) -> list: ...
    @overload
    def array(self, data: dict, key: str, *, required: bool = False, name: str | None = None) -> list | None: ...
    def array(self, data: dict, key: str, *, required: bool = False, name: str | None = None) -> list | None:
        value = self.get(data, key, name or key, required)
        return None if value is None and not required else self.check(value, name or key, list, "a list")

    @overload
    def string(self, data: dict, key: str, *, required: Literal[True], name: str | None = None) -> str: ...
    @overload
    def string(self, data: dict, key: str, *, required: bool = False, name: str | None = None) -> str | None: ...
    def string(self, data: dict, key: str, *, required: bool = False, name: str | None = None) -> str | None:
        value = self.get(data, key, name or key, required)
        return None if value is None and not required else self.check(value, name or key, str, "a string")

    @overload
    def integer(self, data: dict, key: str, *, required: Literal[True], name: str | None = None) -> int: ...
    @overload
    def integer(self, data: dict, key: str, *, required: bool = False, name: str | None = None) -> int | None: ...
    def integer(self, data: dict, key: str, *, required: bool = False, name: str | None = None) -> int | None:
        value = self.get(data, key, name or key, required)
        if value is None and not required:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < _MAX_INT:
            raise self.fail(name or key, "an integer in [0, 2**63)", value)
        return value

    @overload
    def checksum(self, data: dict, key: str, *, required: Literal[True], name: str | None = None) -> str: ...
    @overload
    def checksum(self, data: dict, key: str, *, required: bool = False, name: str | None = None) -> str | None: ...
    def checksum(self, data: dict, key: str, *, required: bool = False, name: str | None = None) -> str | None:
        value = self.string(data, key, required=required, name=name)
        if value is not None and (len(value) != 8 or not set(value) <= _HEX):
            raise self.fail(name or key, "a CRC32C of 8 lowercase hex digits", value)
        return value

    @overload
    def path(self, data: dict, key: str, *, required: Literal[True], name: str | None = None) -> str: ...
    @overload
    def path(self, data: dict, key: str, *, required: bool = False, name: str | None = None) -> str | None: ...
    def path(self, data: dict, key: str, *, required: bool = False, name: str | None = None) -> str | None:
        value = self.string(data, key, required=required, name=name)
        if value is not None:
            _check_relative(value, self.source, name or key)
        return value

    def shard(self, value: Any, name: str) -> ShardInfo:
        entry = self.mapping(value, name)
        info = ShardInfo(
            path=self.unique(self.path(entry, "path", required=True, name=f"{name}.path"), f"{name}.path"),
            num_samples=self.integer(entry, "num_samples", required=True, name=f"{name}.num_samples"),
            nbytes=self.integer(entry, "nbytes", required=True, name=f"{name}.nbytes"),
            crc32c=self.checksum(entry, "crc32c", required=True, name=f"{name}.crc32c"),
            index=self.unique(self.path(entry, "index", name=f"{name}.index"), f"{name}.index"),
            index_nbytes=self.integer(entry, "index_nbytes", name=f"{name}.index_nbytes"),
            index_crc32c=self.checksum(entry, "index_crc32c", name=f"{name}.index_crc32c"),
            meta_crc32c=self.checksum(entry, "meta_crc32c", name=f"{name}.meta_crc32c"),
            transcoded=self.integer(entry, "transcoded", name=f"{name}.transcoded"),
        )
        return info  # a transcoded count above num_samples is the transcoded records' problem, not a reader's

    def skipped(self, value: Any, name: str) -> SkippedFile:
        entry = self.mapping(value, name)
        return SkippedFile(
            path=self.string(entry, "path", required=True, name=f"{name}.path"),
            reason=self.string(entry, "reason", required=True, name=f"{name}.reason"),
        )

    def file_warnings(self, value: Any, name: str) -> FileWarnings:
        entry = self.mapping(value, name)
        messages = self.array(entry, "messages", required=True, name=f"{name}.messages")
        return FileWarnings(
            path=self.string(entry, "path", required=True, name=f"{name}.path"),
            messages=[self.check(m, f"{name}.messages[{i}]", str, "a string") for i, m in enumerate(messages)],
        )

    def ranges(self, data: dict, key: str, samples: int) -> list[list[int]] | None:
        """Sorted, disjoint ``[start, stop)`` ranges of sample indices below ``samples``."""
        value = self.array(data, key)
        if value is None:
            return None
        ranges, end = [], 0
        for i, item in enumerate(value):
            pair = self.check(item, f"{key}[{i}]", list, "a [start, stop) pair")
            if len(pair) != 2:
                raise self.fail(f"{key}[{i}]", "a [start, stop) pair", pair)
            start, stop = (self.integer({"v": v}, "v", required=True, name=f"{key}[{i}]") for v in pair)
            if not end <= start < stop <= samples:
                raise ValueError(
                    f"{self.source}: field {key}[{i}] is not a sorted range of the {samples} samples; "
                    "re-create it with `fastdata pack`"
                )
            ranges.append([start, stop])
            end = stop
        return ranges

    def options(self, data: dict) -> dict[str, Any]:
        return dict(self.mapping(data.get("options", {}), "options"))


def _kind(value: Any) -> str:
    """What a bad value is, without echoing text from the file (numbers are shown, strings are not)."""
    if isinstance(value, bool) or value is None:
        return "null" if value is None else "a bool"
    if isinstance(value, int):
        return str(value) if abs(value) < 10**20 else "an integer of more than 20 digits"
    if isinstance(value, float):
        return f"the float {value!r}"
    return _KINDS.get(type(value), type(value).__name__)


def _check_relative(rel: str, source: str, name: str) -> None:
    # plain string tests, not PurePosixPath: pathlib interns every name it parses, for good (32k at 16k shards)
    if rel.startswith("/") or ".." in rel.split("/") or not rel or "\x00" in rel or "\\" in rel:
        raise ValueError(
            f"{source}: field {name} names a path that is not inside the dataset folder "
            "(absolute, empty or with '..'); refusing to read it"
        )


def plain_path(rel: str) -> bool:
    """A relative path spelled as the file system reads it back (no ``./``, ``//`` or trailing ``/``)."""
    return not (rel.startswith("./") or "/./" in rel or "//" in rel or rel.endswith(("/", "/.")) or rel == ".")


def _normal(rel: str) -> str:
    """A checked relative path as the file system reads it: ``./a//b/`` is ``a/b``."""
    return "/".join(part for part in rel.split("/") if part not in ("", "."))
