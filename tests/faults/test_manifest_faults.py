"""Round four: hostile manifests (the compact ``ShardTable`` and its names blob), ``.loc`` sidecars, ``transcoded.bits``
and per-shard ``transcoded`` counts, ``targets.npy`` read a shard at a time. Each case ends in a one-line error (the
reader's, ``verify``'s, ``inspect``'s) or in the right bytes: never a traceback, a hang or a silent wrong record."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest

from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.formats.errors import CorruptRecordError, DatasetChangedError
from fastdata.formats.files import crc32c_hex
from fastdata.formats.manifest import Manifest
from fastdata.formats.manifest_entries import ShardInfo
from fastdata.formats.shard_table import ShardTable
from tests.faults.conftest import cli
from tests.packs import edit_manifest

READ_ERRORS = (ValueError, CorruptRecordError, FileNotFoundError)


def read_all(root) -> list[tuple[bytes, int]]:
    ds = ShardDataset(root)
    return [ds.read(i) for i in range(len(ds))]


def refused(root, capsys, match: str) -> None:
    """Every way in refuses ``root`` in one line matching ``match``: the reader, ``verify`` (damage, exit 1) and
    ``inspect`` (exit 2 for a manifest it cannot read, else its summary)."""
    with pytest.raises(READ_ERRORS, match=match) as info:
        read_all(root)
    assert "\n" not in str(info.value)
    code, text = cli(capsys, "verify", str(root))
    assert code == 1 and "DAMAGED" in text, text
    code, text = cli(capsys, "inspect", str(root))
    assert code in (0, 2), text


# --- the manifest --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda m: m["shards"].__setitem__(1, dict(m["shards"][0])), r"shards\[1\].path names the same file as"),
        (lambda m: m["shards"][1].update(path="./" + m["shards"][0]["path"]), "names the same file"),
        (lambda m: m["shards"][1].update(path=m["shards"][0]["path"] + "/"), "names the same file"),
        (lambda m: m["shards"][1].update(path="." + "//" + m["shards"][0]["path"]), "names the same file"),
        (lambda m: m["shards"][1].update(index=m["shards"][0]["index"]), r"shards\[1\].index names the same file"),
        (lambda m: m["shards"][1].update(index=m["shards"][0]["path"]), "names the same file as shards"),
        (lambda m: m.update(targets=m["shards"][0]["path"]), "field targets names the same file"),
        (lambda m: m.update(transcoded_file="targets.npy"), "transcoded_file names the same file as targets"),
        (lambda m: m["shards"][0].update(path="manifest.json"), "names the same file as the manifest itself"),
    ],
    ids=[
        "same-entry",
        "dot-slash",
        "trailing-slash",
        "dot-double-slash",
        "index",
        "index-is-shard",
        "targets",
        "bits",
        "manifest",
    ],
)
def test_a_file_named_twice_is_refused(lmdb_pack, capsys, change, match):
    """Round four found: two entries naming one shard read (and verified) clean, shard 0's records served as shard
    1's whenever their labels agreed."""
    edit_manifest(lmdb_pack, change)
    refused(lmdb_pack, capsys, match)


@pytest.mark.parametrize(
    "path",
    ["../pack/shard-00001.lmdb", "a/../shard-00001.lmdb", "/etc/passwd", "shard-00001.lmdb\x00.txt", "", "a\\b"],
    ids=["dotdot", "inner-dotdot", "absolute", "nul", "empty", "backslash"],
)
@pytest.mark.parametrize("field", ["path", "index"])
def test_paths_outside_the_folder_are_refused(lmdb_pack, capsys, path, field):
    edit_manifest(lmdb_pack, lambda m: m["shards"][1].update({field: path}))
    refused(lmdb_pack, capsys, "not inside the dataset folder")


@pytest.mark.parametrize("where", ["path", "index", "class", "skipped"])
def test_a_lone_surrogate_escape_is_refused_in_one_line(lmdb_pack, capsys, where):
    """Round four found: a shard or index name escaping a lone surrogate (``"\\udcff"``, no UTF-8 text) crashed the
    reader with a bare UnicodeEncodeError and ``fastdata verify`` with a traceback."""

    def change(m):
        if where == "class":
            m["classes"][0] = "x\udcff"
        elif where == "skipped":
            m["skipped"] = [{"path": "a\ud800.jpg", "reason": "bad"}]
        else:
            m["shards"][1][where] = "shard-\udcff.lmdb"

    edit_manifest(lmdb_pack, change)  # json.dumps escapes it: "\udcff"
    assert "\\udcff" in (lmdb_pack / "manifest.json").read_text() or where == "skipped"
    with pytest.raises(ValueError, match="lone surrogate") as info:
        read_all(lmdb_pack)
    assert "\n" not in str(info.value)
    code, text = cli(capsys, "verify", str(lmdb_pack))
    assert code == 1 and "lone surrogate" in text
    assert cli(capsys, "inspect", str(lmdb_pack))[0] == 2


def test_an_escaped_surrogate_pair_is_text_and_reads(lmdb_pack, capsys):
    """A whole pair (how ASCII-only JSON writers spell a character past U+FFFF) is UTF-8 text: accepted."""
    edit_manifest(lmdb_pack, lambda m: m["classes"].__setitem__(0, "cat \U0001f408"))
    assert "\\ud83d\\udc08" in (lmdb_pack / "manifest.json").read_text()
    assert Manifest.load(lmdb_pack).classes[0] == "cat \U0001f408"


def test_raw_bytes_that_are_not_utf8_are_refused(lmdb_pack, capsys):
    path = lmdb_pack / "manifest.json"
    path.write_bytes(path.read_bytes().replace(b"shard-00001", b"shard-\xff\xfe001", 1))
    refused(lmdb_pack, capsys, "not UTF-8 text")


def _manifest_of(shards: int, duplicate_last: bool) -> bytes:
    entries = [
        {"path": f"s{k}.tfrecord", "num_samples": 1, "nbytes": 64, "crc32c": "00000000", "index": f"s{k}.idx"}
        for k in range(shards)
    ]
    if duplicate_last:
        entries[-1]["path"] = entries[0]["path"]
    data = {"version": 1, "format": "tfrecord", "classes": ["a"], "shards": entries, "num_samples": shards}
    return json.dumps(data).encode()


@pytest.mark.slow
def test_many_shards_one_named_twice_is_refused_and_the_table_stays_compact(tmp_path):
    """100,000 shards, the last naming the first's file: one line naming both fields, not a dataset."""
    (tmp_path / "manifest.json").write_bytes(_manifest_of(100_000, duplicate_last=True))
    with pytest.raises(ValueError, match=r"shards\[99999\].path names the same file as shards\[0\].path") as info:
        Manifest.load(tmp_path, compact=True)
    assert "\n" not in str(info.value)
    (tmp_path / "manifest.json").write_bytes(_manifest_of(100_000, duplicate_last=False))
    assert len(Manifest.load(tmp_path, compact=True).shards) == 100_000


def test_a_million_shard_table_holds_under_160_bytes_a_shard():
    """The compact table a reader keeps (and pickles to its workers) of a million shards: columns and one names blob,
    never a Python object per shard."""
    table = ShardTable(
        ShardInfo(f"shard-{k:07d}.tfrecord", 1, 64, "0000abcd", f"shard-{k:07d}.idx", 8, "00000001")
        for k in range(1_000_000)
    )
    held = len(pickle.dumps(table, protocol=5))
    assert held < 160 * 1_000_000, held
    assert table[999_999].path == "shard-0999999.tfrecord" and table[5].index_crc32c == "00000001"
    assert table.total_samples == 1_000_000


# --- .loc sidecars -------------------------------------------------------------------------------------------------


def _sidecar(root, k=1):
    shard = Manifest.load(root).shards[k]
    return root / shard.index, shard


def _rewrite_sidecar(root, k, data: bytes) -> None:
    (root / Manifest.load(root).shards[k].index).write_bytes(data)
    edit_manifest(root, lambda m: m["shards"][k].update(index_crc32c=crc32c_hex(data), index_nbytes=len(data)))


@pytest.mark.parametrize("damage", ["missing", "dev-zero", "fifo", "folder", "truncated", "flipped"])
def test_a_damaged_sidecar_is_named_in_one_line(lmdb_pack, capsys, damage):
    path, _ = _sidecar(lmdb_pack)
    if damage == "truncated":
        os.truncate(path, 20)
    elif damage == "flipped":
        data = bytearray(path.read_bytes())
        data[-1] ^= 1
        path.write_bytes(bytes(data))
    else:
        path.unlink()
        if damage == "dev-zero":
            os.symlink("/dev/zero", path)
        elif damage == "fifo":
            os.mkfifo(path)
        elif damage == "folder":
            path.mkdir()
    refused(lmdb_pack, capsys, path.name)


@pytest.mark.parametrize("field", ["offset", "length", "label", "crc", "overflow", "swap"])
def test_a_consistent_but_wrong_sidecar_never_yields_a_wrong_record(lmdb_pack, capsys, field):
    """A sidecar edited with its manifest checksum updated: every read is the right record or a one-line error, and
    ``verify`` compares it with the walk of its shard."""
    truth = read_all(lmdb_pack)
    path, shard = _sidecar(lmdb_pack)
    n = shard.num_samples
    data = bytearray(path.read_bytes())
    at = {"offset": 32, "label": 32 + 8 * n, "length": 32 + 16 * n, "crc": 32 + 20 * n, "overflow": 32 + 24 * n}
    if field == "swap":
        other, _ = _sidecar(lmdb_pack, 0)
        data = bytearray(other.read_bytes())
    else:
        data[at[field]] ^= 0x10 if field == "offset" else 1
    _rewrite_sidecar(lmdb_pack, 1, bytes(data))
    ds = ShardDataset(lmdb_pack)
    for i in range(len(ds)):
        try:
            assert ds.read(i) == truth[i]
        except CorruptRecordError as exc:
            assert "\n" not in str(exc)
    code, text = cli(capsys, "verify", str(lmdb_pack))
    assert code == 1 and f"DAMAGED {path.name}" in text, text


# --- transcoded.bits and the per-shard counts ------------------------------------------------------------------------


def _bits(root):
    return root / Manifest.load(root).transcoded_file


@pytest.mark.parametrize(
    "damage, match",
    [
        ("missing", "missing"),
        ("dev-zero", "outside the dataset folder"),
        ("truncated", "bytes but the manifest says"),
        ("flipped-crc-kept", "CRC32C"),
        ("flipped-crc-updated", "transcoded"),
        ("count-above-records", "more than its"),
        ("counts-swapped", "transcoded"),
        ("sum-off", "transcoded_records"),
        ("count-missing", "transcoded_records"),
        ("no-file", "names no transcoded_file"),
        ("ranges-too", "both as ranges and as counts"),
        ("nbytes-off", "a bit per sample"),
    ],
)
def test_damaged_transcoded_records_are_damage_in_one_line(lmdb_pack, capsys, damage, match):
    """The reader never needs the bits (decoding does not trust them): it reads on; ``verify`` names the damage, and
    ``--append`` (which carries the bits on) refuses before writing anything."""
    manifest = json.loads((lmdb_pack / "manifest.json").read_text())
    partial = [k for k, s in enumerate(manifest["shards"]) if 0 < s["transcoded"] < s["num_samples"]]
    assert partial, "the fixture needs a partly re-coded shard"
    k = partial[0]
    bits = _bits(lmdb_pack)
    if damage == "missing":
        bits.unlink()
    elif damage == "dev-zero":
        bits.unlink()
        os.symlink("/dev/zero", bits)
    elif damage == "truncated":
        os.truncate(bits, 0)
    elif damage.startswith("flipped"):
        data = bytearray(bits.read_bytes())
        start = sum(s["num_samples"] for s in manifest["shards"][:k])
        data[start // 8] ^= 1 << (start % 8)  # the shard's first record: the count no longer adds up, or a PNG marked
        bits.write_bytes(bytes(data))
        if damage.endswith("updated"):
            edit_manifest(lmdb_pack, lambda m: m.update(transcoded_crc32c=crc32c_hex(bytes(data))))
    else:
        edits = {
            "count-above-records": lambda m: m["shards"][k].update(transcoded=m["shards"][k]["num_samples"] + 1),
            "counts-swapped": lambda m: (
                m["shards"][k].update(transcoded=m["shards"][k]["transcoded"] - 1),
                m["shards"][k - 1 if k else k + 1].update(
                    transcoded=m["shards"][k - 1 if k else k + 1]["transcoded"] + 1
                ),
            ),
            "sum-off": lambda m: m.update(transcoded_records=m["transcoded_records"] + 1),
            "count-missing": lambda m: m["shards"][k].pop("transcoded"),
            "no-file": lambda m: [m.pop(f) for f in ("transcoded_file", "transcoded_nbytes", "transcoded_crc32c")],
            "ranges-too": lambda m: m.update(transcoded=[[0, 1]]),
            "nbytes-off": lambda m: m.update(transcoded_nbytes=m["transcoded_nbytes"] + 1),
        }
        edit_manifest(lmdb_pack, edits[damage])
    assert len(read_all(lmdb_pack)) == manifest["num_samples"]
    code, text = cli(capsys, "verify", str(lmdb_pack))
    assert code == 1 and "DAMAGED" in text and match in text, text


# --- targets.npy, a shard at a time ----------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["truncated", "same-size-other-labels", "dev-zero", "fifo", "grown"])
def test_damaged_targets_are_refused_when_opened(lmdb_pack, capsys, damage):
    path = lmdb_pack / "targets.npy"
    data = path.read_bytes()
    if damage == "truncated":
        os.truncate(path, len(data) - 8)
    elif damage == "same-size-other-labels":
        labels = np.load(path)
        labels[-1] = (labels[-1] + 1) % len(Manifest.load(lmdb_pack).classes)
        np.save(path, labels)
        assert path.stat().st_size == len(data)
    elif damage == "grown":
        path.write_bytes(data + bytes(8))
    else:
        path.unlink()
        if damage == "dev-zero":
            os.symlink("/dev/zero", path)
        else:
            os.mkfifo(path)
    refused(lmdb_pack, capsys, "targets.npy")


@pytest.mark.parametrize("how", ["in-place", "renamed-over", "truncated", "unlinked"])
def test_targets_changed_while_a_dataset_reads_give_right_labels_or_one_line(lmdb_pack, how):
    """The labels are read a shard at a time from the file checked at open: a same-size file written over it, a new
    file renamed over it, a truncation or an unlink while a dataset reads give each record its own label or a one-line
    error, in this process and in a copy unpickled after the change (a DataLoader worker)."""
    truth = read_all(lmdb_pack)
    ds = ShardDataset(lmdb_pack, max_open_shards=1)
    assert ds.read(0) == truth[0]
    path = lmdb_pack / "targets.npy"
    labels = np.load(path)
    flipped = labels.copy()
    flipped[1:] = (labels[1:] + 1) % len(ds.classes)
    if how == "in-place":
        with open(path, "r+b") as f:
            f.seek(len(path.read_bytes()) - 8 * len(labels))
            f.write(flipped.astype("<i8").tobytes())
    elif how == "renamed-over":
        np.save(lmdb_pack / "new.npy", flipped)
        os.replace(lmdb_pack / "new.npy", path)
    elif how == "truncated":
        os.truncate(path, 100)
    else:
        path.unlink()
    for reader in (ds, pickle.loads(pickle.dumps(ds))):
        for i in range(len(truth)):
            try:
                assert reader.read(i) == truth[i]
            except (CorruptRecordError, DatasetChangedError, OSError) as exc:
                assert "\n" not in str(exc) and str(exc)
