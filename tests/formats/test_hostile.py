"""Hostile datasets are refused with one line: symlinks out of the folder, FIFOs, /dev/zero, malformed
manifests and targets, counts that do not match the files. Nothing is read outside the folder, nothing
blocks, nothing large is allocated, and no message quotes a file's contents."""

from __future__ import annotations

import json
import os
import shutil
import threading
import tracemalloc

import numpy as np
import pytest

from fastdata.cli import main
from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.formats.base import CorruptRecordError
from fastdata.formats.manifest import Manifest
from tests.packs import edit_manifest

SECRET = "TOP-SECRET-TOKEN-0123456789"


@pytest.fixture
def dataset(packed, tmp_path):
    """A private copy of a packed dataset (TFRecord and LMDB) to damage, and a folder outside it."""
    root = tmp_path / "ds"
    shutil.copytree(packed[0], root)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET * 10)
    return root, outside


def one_line_error(capsys, *argv) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def finishes(fn, seconds: float = 30.0):
    """Run ``fn`` in a thread; fail (instead of hanging) if it has not returned within ``seconds``."""
    result: dict = {}

    def run():
        try:
            result["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{fn} blocked for {seconds} s"
    if "error" in result:
        raise result["error"]
    return result.get("value")


def test_symlinked_shard_pointing_outside_is_refused(dataset, capsys):
    root, outside = dataset
    shard = Manifest.load(root).shards[1].path
    shutil.move(root / shard, outside / shard)
    os.symlink(outside / shard, root / shard)  # the very same bytes, but outside the folder
    with pytest.raises(CorruptRecordError, match="outside the dataset folder") as info:
        ShardDataset(root)
    assert "\n" not in str(info.value)
    code, text = one_line_error(capsys, "verify", str(root))
    assert code == 1 and f"DAMAGED {shard}" in text and "outside the dataset folder" in text


def test_symlinked_subfolder_outside_is_refused_inside_is_followed(dataset):
    root, outside = dataset
    manifest = Manifest.load(root)
    for rel in [s.path for s in manifest.shards] + [s.index for s in manifest.shards if s.index]:
        (outside / "real").mkdir(exist_ok=True)
        shutil.move(root / rel, outside / "real" / rel)
    os.symlink(outside / "real", root / "sub")
    edit_manifest(
        root,
        lambda m: [
            s.update(path="sub/" + s["path"], **({"index": "sub/" + s["index"]} if "index" in s else {}))
            for s in m["shards"]
        ],
    )
    with pytest.raises(CorruptRecordError, match="outside the dataset folder"):
        ShardDataset(root)
    os.unlink(root / "sub")
    shutil.move(outside / "real", root / "real")
    os.symlink(root / "real", root / "sub")  # a symlink that stays inside: fine
    ds = ShardDataset(root)
    assert len(ds) == manifest.num_samples and ds[len(ds) - 1][0].ndim == 3


@pytest.mark.parametrize("packed", ["tfrecord"], indirect=True)
@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "outside_text", "inside_text"])
def test_hostile_index_file_is_refused_without_reading_it(dataset, capsys, kind):
    root, outside = dataset
    index = root / Manifest.load(root).shards[0].index
    index.unlink()
    if kind == "fifo":
        os.mkfifo(index)  # opening it for reading would block forever
    elif kind == "dev_zero":
        os.symlink("/dev/zero", index)  # reading it never ends
    elif kind == "outside_text":
        os.symlink(outside / "secret.txt", index)
    else:
        index.write_text(SECRET)
        edit_manifest(root, lambda m: [s.pop(k, None) for s in m["shards"] for k in ("index_nbytes", "index_crc32c")])
    dataset = finishes(lambda: ShardDataset(root))  # opening reads no index: the shard's first read does
    with pytest.raises((CorruptRecordError, FileNotFoundError)) as info:
        finishes(lambda: dataset.read(0))
    message = str(info.value)
    assert "\n" not in message and SECRET not in message and "shard-00000.idx" in message
    code, text = finishes(lambda: one_line_error(capsys, "verify", str(root)))
    assert code == 1 and "DAMAGED shard-00000.idx" in text and SECRET not in text


def _raw(root, text_change) -> None:
    """Rewrite the manifest's JSON text (for literals json.dumps cannot write: 1e999, NaN, huge nesting)."""
    path = root / "manifest.json"
    path.write_text(text_change(path.read_text()))


MALFORMED = {
    "num_samples as a string": (lambda m: m.update(num_samples="13"), "num_samples"),
    "a negative nbytes": (lambda m: m["shards"][0].update(nbytes=-1), "shards[0].nbytes"),
    "a float count": (lambda m: m["shards"][0].update(num_samples=5.0), "shards[0].num_samples"),
    "a bool version": (lambda m: m.update(version=True), "version"),
    "a checksum that is a number": (lambda m: m["shards"][1].update(crc32c=12345678), "shards[1].crc32c"),
    "a checksum that is not hex": (lambda m: m["shards"][1].update(crc32c="zzzzzzzz"), "shards[1].crc32c"),
    "classes as a string": (lambda m: m.update(classes="ant,bee"), "classes"),
    "a class that is a number": (lambda m: m["classes"].__setitem__(0, 7), "classes[0]"),
    "shards as an object": (lambda m: m.update(shards={}), "shards"),
    "a shard as a list": (lambda m: m["shards"].__setitem__(0, []), "shards[0]"),
    "no shards": (lambda m: m.pop("shards"), "shards"),
    "targets outside": (lambda m: m.update(targets="../targets.npy"), "targets"),
    "an absolute shard path": (lambda m: m["shards"][0].update(path="/etc/passwd"), "shards[0].path"),
    "a count of 31 digits": (lambda m: m.update(num_samples=10**30), "num_samples"),
    "a top level list": (lambda m: m.clear(), "manifest"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_manifest_field_is_a_one_line_value_error_naming_it(dataset, capsys, name):
    root, _ = dataset
    change, field = MALFORMED[name]
    if name == "a top level list":
        (root / "manifest.json").write_text("[1, 2]")
    else:
        edit_manifest(root, change)
    with pytest.raises(ValueError) as info:
        ShardDataset(root)
    message = str(info.value)
    assert "\n" not in message and (f"field {field} " in message), message
    code, text = one_line_error(capsys, "inspect", str(root))
    assert code == 2 and text.startswith("fastdata: error:") and text.count("\n") == 1 and "Traceback" not in text


@pytest.mark.parametrize(
    "literal,expected",
    [
        ("1e999", "overflows"),
        ("NaN", "NaN"),
        ("-Infinity", "Infinity"),
        ("9" * 5000, "not valid JSON"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ],
    ids=["1e999", "NaN", "-Infinity", "5000 digits", "nested 100000 deep"],
)
def test_numbers_json_should_not_hold_and_deep_nesting_are_one_line_errors(dataset, literal, expected):
    root, _ = dataset
    _raw(root, lambda text: text.replace('"num_samples": ', f'"num_samples": {literal}, "was": ', 1))
    with pytest.raises(ValueError, match=expected) as info:
        ShardDataset(root)
    assert "\n" not in str(info.value) and len(str(info.value)) < 400 and "manifest.json" in str(info.value)


def _drop_targets_checksum(root) -> None:
    edit_manifest(root, lambda m: [m.pop(k, None) for k in ("targets_nbytes", "targets_crc32c")])


def _npy(header: dict, body: bytes = b"") -> bytes:
    text = repr(header).encode("latin1")
    text += b" " * ((64 - (10 + len(text) + 1) % 64) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text + body


BOGUS_TARGETS = {
    "a trillion labels declared": _npy({"descr": "<i8", "fortran_order": False, "shape": (10**12,)}, bytes(8 * 13)),
    "object dtype (pickle)": _npy({"descr": "|O", "fortran_order": False, "shape": (13,)}, bytes(8 * 13)),
    "two dimensions": _npy({"descr": "<i8", "fortran_order": False, "shape": (13, 1)}, bytes(8 * 13)),
    "floats": _npy({"descr": "<f8", "fortran_order": False, "shape": (13,)}, bytes(8 * 13)),
    "truncated body": _npy({"descr": "<i8", "fortran_order": False, "shape": (13,)}, bytes(8 * 12)),
    "a label outside the classes": _npy(
        {"descr": "<i8", "fortran_order": False, "shape": (13,)}, np.full(13, 7, np.int64).tobytes()
    ),
    "not npy at all": SECRET.encode() * 4,
}


@pytest.mark.parametrize("name", sorted(BOGUS_TARGETS))
def test_bogus_targets_header_is_refused_before_anything_is_allocated(dataset, name):
    root, _ = dataset
    _drop_targets_checksum(root)  # as in a manifest written before targets had a checksum: the header is all there is
    (root / "targets.npy").write_bytes(BOGUS_TARGETS[name])
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRecordError, match="targets.npy") as info:
            ShardDataset(root)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20
    assert "\n" not in str(info.value) and SECRET not in str(info.value)


def test_a_count_the_files_cannot_hold_is_refused_before_arrays_are_built(dataset):
    """A manifest claiming a trillion samples (consistently with itself) allocates nothing for them."""
    root, _ = dataset
    n = 10**12
    edit_manifest(
        root, lambda m: (m["shards"][0].update(num_samples=n), m.update(num_samples=m["num_samples"] + n - 5))
    )
    for drop in (False, True):
        if drop:
            _drop_targets_checksum(root)
        tracemalloc.start()
        try:
            with pytest.raises(
                CorruptRecordError, match="cannot hold the 1000000000000 records"
            ) as info:  # shards first
                ShardDataset(root)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 20 * 2**20 and "\n" not in str(info.value)


@pytest.mark.parametrize("packed", ["tfrecord"], indirect=True)  # LMDB's counts: checked against __meta__ (test_lmdb)
def test_a_shard_claiming_more_records_than_its_index_lists_is_refused(dataset):
    root, _ = dataset
    assert json.loads((root / "manifest.json").read_text())["format"] == "tfrecord"
    edit_manifest(root, lambda m: (m["shards"][0].update(num_samples=4), m["shards"][1].update(num_samples=6)))
    dataset = ShardDataset(root)  # the index is read where its shard is first read
    with pytest.raises(CorruptRecordError, match="lists 5 records but the manifest says 4") as info:
        dataset.read(0)
    assert "shard-00000.idx" in str(info.value) and "\n" not in str(info.value)
