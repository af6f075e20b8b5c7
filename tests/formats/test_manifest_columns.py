"""The column-at-a-time check of a manifest's shards accepts exactly what the entry-at-a-time walk accepts, builds
the same shards, and fails with the walk's one-line message (round four's F3: a million shards took 126 s)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from fastdata.formats import manifest as manifest_module
from fastdata.formats.manifest import Manifest
from fastdata.formats.manifest_columns import shard_columns
from fastdata.formats.manifest_validation import _Fields


def _valid(shards: int = 12) -> dict[str, Any]:
    entries: list[dict[str, Any]] = []
    for k in range(shards):
        entry: dict[str, Any] = {"path": f"part/s{k}.lmdb", "num_samples": k, "nbytes": 100 + k, "crc32c": f"{k:08x}"}
        if k % 2:
            entry.update(index=f"part/s{k}.loc", index_nbytes=8 * k, index_crc32c="abcdef01")
        if k % 3:
            entry.update(meta_crc32c="ffffffff", transcoded=k // 2)
        entries.append(entry)
    return {"version": 1, "format": "lmdb", "classes": ["a"], "shards": entries, "num_samples": sum(range(shards))}


def _shard(k: int, **fields: Any):
    def change(data: dict[str, Any]) -> None:
        data["shards"][k].update(fields)

    return change


def _drop(k: int, key: str):
    return lambda data: data["shards"][k].pop(key)


MUTATIONS = {
    "valid": lambda data: None,
    "path an int": _shard(3, path=7),
    "path None": _shard(3, path=None),
    "path a list": _shard(3, path=["a"]),
    "absolute path": _shard(3, path="/etc/passwd"),
    "dot-dot": _shard(3, path="part/../../x.lmdb"),
    "dot-slash spelling": _shard(3, path="./part/other.lmdb"),
    "dot-slash naming another": _shard(3, path="./part/s4.lmdb"),
    "double slash naming another": _shard(3, path="part//s4.lmdb"),
    "trailing slash": _shard(3, path="part/dir/"),
    "hidden file": _shard(3, path=".hidden.lmdb"),
    "hidden folder": _shard(3, path="part/.cache/s3.lmdb"),
    "backslash": _shard(3, path="part\\s3.lmdb"),
    "NUL": _shard(3, path="part/s3\x00.lmdb"),
    "empty": _shard(3, path=""),
    "duplicate path": _shard(7, path="part/s2.lmdb"),
    "index names a shard": _shard(5, index="part/s2.lmdb"),
    "index names itself": _shard(5, index="part/s5.lmdb"),
    "names the manifest": _shard(4, path="manifest.json"),
    "index None": _shard(5, index=None),
    "missing num_samples": _drop(6, "num_samples"),
    "missing crc32c": _drop(6, "crc32c"),
    "missing path": _drop(0, "path"),
    "bool count": _shard(6, num_samples=True),
    "negative size": _shard(6, nbytes=-1),
    "2**63": _shard(6, nbytes=2**63),
    "float count": _shard(6, num_samples=1.0),
    "optional None": _shard(5, index_nbytes=None),
    "optional negative": _shard(5, index_nbytes=-1),
    "optional string": _shard(5, transcoded="3"),
    "upper-case checksum": _shard(6, crc32c="ABCDEF01"),
    "short checksum": _shard(6, crc32c="abcdef0"),
    "non-hex checksum": _shard(6, crc32c="abcdefgh"),
    "checksum an int": _shard(6, crc32c=12345678),
    "optional checksum bad": _shard(5, index_crc32c="0x123456"),
    "unknown key": _shard(2, comment="hello"),
    "entry a list": lambda data: data["shards"].__setitem__(2, ["part/s2.lmdb"]),
    "entry None": lambda data: data["shards"].__setitem__(2, None),
    "no shards": lambda data: data.update(shards=[], num_samples=0),
    "targets names a shard": lambda data: data.update(targets="part/s3.lmdb"),
    "targets names an index": lambda data: data.update(targets="part/s5.loc"),
    "transcoded file names a shard": lambda data: data.update(transcoded_file="part//s9.loc"),
}


def _outcome(data: dict[str, Any], compact: bool) -> tuple[str, object]:
    try:
        manifest = Manifest.from_dict(data, source="m.json", compact=compact)
    except ValueError as exc:
        return "error", str(exc)
    return "manifest", (list(manifest.shards), manifest.num_samples, manifest.targets, manifest.transcoded_file)


@pytest.mark.parametrize("compact", [True, False], ids=["table", "list"])
@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_columns_and_the_walk_agree(mutation, compact, monkeypatch):
    data = _valid()
    MUTATIONS[mutation](data)
    if mutation not in ("optional None", "optional negative", "bool count", "float count", "negative size"):
        data["num_samples"] = sum(e.get("num_samples", 0) for e in data["shards"] if isinstance(e, dict))
    fast = _outcome(copy.deepcopy(data), compact)
    monkeypatch.setattr(manifest_module, "shard_columns", lambda entries, fields: None)
    walked = _outcome(copy.deepcopy(data), compact)
    assert fast == walked
    if fast[0] == "error":
        assert "\n" not in fast[1] and "m.json" in fast[1]


def test_a_valid_manifest_takes_the_column_path_and_a_bad_one_the_walk():
    assert shard_columns(_valid()["shards"], _Fields("m.json")) is not None
    for mutation in ("dot-slash spelling", "hidden file", "duplicate path", "short checksum", "2**63"):
        data = _valid()
        MUTATIONS[mutation](data)
        fields = _Fields("m.json")
        assert shard_columns(data["shards"], fields) is None
        assert set(fields.claimed) == {"manifest.json"}  # nothing claimed when it answers None


def test_a_later_field_naming_a_shard_names_that_shard_in_its_message():
    data = _valid()
    data["targets"] = "part/s11.loc"
    with pytest.raises(ValueError, match=r"field targets names the same file as shards\[11\]\.index;"):
        Manifest.from_dict(data, source="m.json", compact=True)
