"""Per-sample fields beyond the image and its class.

Types inferred at pack time, stored as
``tf.train.Example`` features, decoded back by name.

Kinds (recorded in the manifest as ``options.field_types``, ``{name: {"kind", "shape"}}``):

========== ============================ ================================== ===================================
kind       source values                stored as (feature list)           read back as
========== ============================ ================================== ===================================
int        integers                     ``int64_list`` of 1                ``int``
float      numbers (some not integers)  ``float_list`` of 1 (float32)      ``float`` (float32 precision)
string     text                         ``bytes_list`` of 1 (UTF-8)        ``str``
int_list   lists of integers            ``int64_list``                     ``np.int64`` array ``[n]``
float_array lists of numbers, or lists  ``float_list`` (flattened)          ``np.float32`` array of ``shape``
           of equal-length number lists                                    (``-1``: variable leading dim)
json       anything else (objects,      ``bytes_list`` of 1 (JSON)         the JSON value
           mixed lists, null)
========== ============================ ================================== ===================================

A field is fixed-size when its shape has no ``-1`` (int, float and fixed-length arrays): such
fields collate into tensors; the others into lists, or padded tensors with a mask.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

KINDS = ("int", "float", "string", "int_list", "float_array", "json")
RESERVED_PREFIX = "image/"


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and (not isinstance(v, float) or math.isfinite(v))


def _from_text(value: str) -> Any:
    """A CSV cell as the value it spells: an int, a float, a JSON list/object, or the text itself."""
    text = value.strip()
    for parse in (int, float):
        try:
            number = parse(text)
        except ValueError:
            continue
        return number if _number(number) else value
    if text[:1] in "[{":
        try:
            return json.loads(text)
        except ValueError:
            return value
    return value


def kind_of(value: Any, *, text: bool = False) -> tuple[str, list[int]]:
    """``(kind, shape)`` of one value (``shape`` is ``[]`` for scalars, ``[n]``/``[n, m]`` for arrays)."""
    if text and isinstance(value, str):
        value = _from_text(value)
    if isinstance(value, bool) or value is None:
        return "json", []
    if isinstance(value, int):
        return "int", []
    if _number(value):
        return "float", []
    if isinstance(value, str):
        return "string", []
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return ("int_list" if value else "empty"), [len(value)]
        if all(_number(v) for v in value):
            return "float_array", [len(value)]
        rows = [len(v) for v in value if isinstance(v, (list, tuple)) and all(_number(x) for x in v)]
        if len(rows) == len(value) and len(set(rows)) == 1:
            return "float_array", [len(value), rows[0]]
    return "json", []


def _join(a: tuple[str, list[int]], b: tuple[str, list[int]]) -> tuple[str, list[int]]:
    (ka, sa), (kb, sb) = a, b
    if ka == "empty" or kb == "empty":
        other = b if ka == "empty" else a
        if other[0] == "empty":
            return "empty", [0]
        if other[0] in ("int_list", "float_array"):
            return other[0], [-1] + other[1][1:]
        return "json", []
    if {ka, kb} == {"int", "float"}:
        return "float", []
    if {ka, kb} == {"int_list", "float_array"} and len(sa) == len(sb) == 1:
        ka = kb = "float_array"
    if ka != kb or len(sa) != len(sb) or sa[1:] != sb[1:]:
        return "json", []
    return ka, ([sa[0] if sa[0] == sb[0] else -1] + sa[1:]) if sa else []


def infer_types(names: Iterable[str], rows: Iterable[Mapping[str, Any]], *, text: bool = False) -> dict[str, dict]:
    """The type of each field over all ``rows``: ``{name: {"kind": ..., "shape": [...]}}``.

    Raises:
        ValueError: a field name is reserved (``image/...``).
    """
    names = list(names)
    for name in names:
        if name.startswith(RESERVED_PREFIX):
            raise ValueError(f"field {name!r} is reserved for the image's own features: rename the column")
    found: dict[str, tuple[str, list[int]] | None] = {name: None for name in names}
    for row in rows:
        for name in names:
            kind = kind_of(row.get(name), text=text)
            seen = found[name]
            found[name] = kind if seen is None else _join(seen, kind)
    types = {}
    for name, joined in found.items():
        k, shape = joined or ("json", [])
        if k == "empty":
            k, shape = "int_list", [-1]
        types[name] = {"kind": k, "shape": shape}
    return types


def fits(spec: Mapping[str, Any], value: Any) -> bool:
    """True when ``value`` is stored unchanged as a field of type ``spec``.

    True when ``value`` is stored unchanged as a field of type ``spec`` (``{"kind", "shape"}``): an int in a
    float field fits, a float in an int field does not (it would be cut), a list of 3 in a ``[-1]`` array does.
    """
    declared = (spec["kind"], list(spec.get("shape") or []))
    return _join(declared, kind_of(value)) == declared


def encode_values(
    types: Mapping[str, dict], values: Mapping[str, Any], *, text: bool = False
) -> dict[str, tuple[str, list]]:
    """A row's fields as feature lists: ``{name: ("int64" | "float" | "bytes", [values])}``.

    Raises:
        ValueError: a value does not fit its field's type (the message names the field).
    """
    out: dict[str, tuple[str, list]] = {}
    for name, spec in types.items():
        value: Any = values.get(name)  # any value a row holds (None: none); converted by its kind below
        if text and isinstance(value, str) and spec["kind"] != "string":
            value = _from_text(value)
        kind = spec["kind"]
        if kind == "int":
            out[name] = ("int64", [int(value)])
        elif kind == "float":
            out[name] = ("float", [float(value)])
        elif kind == "string":
            out[name] = ("bytes", [str(value).encode("utf-8")])
        elif kind == "int_list":
            out[name] = ("int64", [int(v) for v in value])
        elif kind == "float_array":
            flat = np.asarray(value, dtype=np.float64).reshape(-1)
            out[name] = ("float", flat.tolist())
        else:
            out[name] = ("bytes", [json.dumps(value, sort_keys=True, ensure_ascii=False).encode("utf-8")])
    return out


def decode_values(types: Mapping[str, dict], names: Iterable[str], feature: Any) -> dict[str, Any]:
    """The fields ``names`` of a parsed Example's feature map, typed as :data:`KINDS` says."""
    out: dict[str, Any] = {}
    for name in names:
        spec = types[name]
        kind = spec["kind"]
        entry = feature.get(name, None)
        if kind in ("int", "int_list"):
            values = list(entry.int64_list.value) if entry is not None else []
            out[name] = (int(values[0]) if values else 0) if kind == "int" else np.asarray(values, dtype=np.int64)
        elif kind in ("float", "float_array"):
            floats = np.asarray(entry.float_list.value if entry is not None else [], dtype=np.float32)
            out[name] = (
                (float(floats[0]) if len(floats) else 0.0) if kind == "float" else floats.reshape(spec["shape"] or [-1])
            )
        else:
            raw = entry.bytes_list.value[0] if entry is not None and entry.bytes_list.value else b""
            out[name] = raw.decode("utf-8") if kind == "string" else (json.loads(raw) if raw else None)
    return out


def fixed_size(spec: Mapping[str, Any]) -> bool:
    """True when every sample's value of this field has the same shape (it collates into one tensor)."""
    return spec["kind"] in ("int", "float") or (spec["kind"] in ("int_list", "float_array") and -1 not in spec["shape"])


def field_types(manifest: Any, names: Iterable[str] | None) -> tuple[tuple[str, ...], dict[str, dict]]:
    """The fields ``names`` a reader asked for, checked against those the manifest records, and their types.

    Raises:
        ValueError: a name the pack has no field of (the message lists the fields it has).
    """
    names = tuple(names or ())
    types = dict(((manifest.options if manifest is not None else {}) or {}).get("field_types") or {})
    missing = [
        n for n in names if n not in types or not isinstance(types[n], dict) or types[n].get("kind") not in KINDS
    ]
    if missing:
        raise ValueError(
            f"the dataset has no field {', '.join(map(repr, missing))} (its fields: "
            f"{', '.join(sorted(types)) or 'none'}; pack with --fields to keep columns)"
        )
    return names, {n: types[n] for n in names}


_READ_AS = {
    "int": "int",
    "float": "float (float32)",
    "string": "str",
    "int_list": "int64 array",
    "float_array": "float32 array",
    "json": "JSON value",
}


def fields_table(types: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """``fastdata inspect``'s table of a pack's fields: name, kind, shape, what a read returns and how it collates."""
    rows = [("name", "kind", "shape", "read as", "collates as")]
    for name, spec in sorted(types.items()):
        kind = str(spec.get("kind", "?"))
        shape = list(spec.get("shape") or [])
        shown = "scalar" if not shape else "[" + ", ".join("n" if d == -1 else str(d) for d in shape) + "]"
        if kind in ("string", "json") or kind not in KINDS:
            collate = "list"
        elif fixed_size(spec):
            collate = "tensor [N" + "".join(f", {d}" for d in shape) + "]"
        else:
            collate = "list of tensors (pad_fields: padded + mask)"
        rows.append((name, kind, shown, _READ_AS.get(kind, "?"), collate))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1] for r in rows]
