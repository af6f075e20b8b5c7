"""LMDB page damage: a flipped bit in a page header, a node (value length, key size, child or
overflow page number) or a meta page gives a clean error or correct data, never a signal, in
``ShardDataset``, in DataLoader workers and in ``fastdata verify``.

py-lmdb follows such numbers blindly (a bus error in 4 of 32 targeted cases when this test was
written); fastdata's readers walk the pages themselves with every number checked. Each run damages
copies of a pack in 240 ways (160 targeted at value lengths, overflow page numbers and page
headers, 80 random anywhere) in a subprocess, so a
crash fails the test instead of killing pytest.
"""

from __future__ import annotations

import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from fastdata.formats.manifest import Manifest
from tests.packs import make_distinct_folder, pack_quietly

TARGETED, RANDOM = 160, 80


@pytest.fixture(scope="module")
def pack(tmp_path_factory):
    """14 distinct JPEGs, some small enough to live inside leaf pages, most in overflow pages; shards of 6."""
    src = tmp_path_factory.mktemp("src")
    make_distinct_folder(src, per_class=4, classes=("ant", "bee"), size=(120, 160))
    make_distinct_folder(src, per_class=6, classes=("dot",), size=(8, 8), seed=2)
    out = tmp_path_factory.mktemp("lmdb")
    pack_quietly(src, out, "lmdb", samples_per_shard=6)
    return out


def _structure_bits(data: bytes, page_size: int = 4096) -> dict[str, list[int]]:
    """Bit offsets of the numbers LMDB follows, by kind: ``header`` (meta pages, page headers, node
    pointers, key sizes and flags), ``length`` (value lengths, child page numbers) and ``overflow``
    (the page number of each big value)."""
    bits: dict[str, list[int]] = {"header": [], "length": [], "overflow": []}
    for pgno in range(len(data) // page_size):
        base = pgno * page_size
        number, _pad, flags, lower, upper = struct.unpack_from("<QHHHH", data, base)
        if number != pgno:
            continue  # the inside of an overflow run
        if flags & 0x08:  # meta page: header, magic, version, the two databases, last page, txnid
            bits["header"] += range(base * 8, (base + 152) * 8)
        elif flags & 0x04:  # overflow run: its header (page number, flags, page count)
            bits["header"] += range(base * 8, (base + 16) * 8)
        elif flags & 0x03 and 16 <= lower <= upper <= page_size:  # branch or leaf: header and pointers
            bits["header"] += range(base * 8, (base + lower) * 8)
            for (offset,) in struct.iter_unpack("<H", data[base + 16 : base + lower]):
                node = base + offset
                bits["length"] += range(node * 8, (node + 4) * 8)  # lo, hi: value length or child page
                bits["header"] += range((node + 4) * 8, (node + 8) * 8)  # flags, key size
                node_flags, key_size = struct.unpack_from("<HH", data, node + 4)
                if flags & 0x02 and node_flags & 0x01:  # the overflow page number of a big value
                    bits["overflow"] += range((node + 8 + key_size) * 8, (node + 16 + key_size) * 8)
    return bits


SCRIPT = textwrap.dedent(
    """
    import hashlib, json, shutil, sys
    from pathlib import Path
    from fastdata.datasets.shard_dataset import ShardDataset
    from fastdata.formats.errors import CorruptRecordError, DatasetChangedError
    from fastdata.loader.dataloader import DataLoaderX
    from fastdata.packing.check import verify

    pristine, work, cases_file, truth_file = map(Path, sys.argv[1:5])
    truth = json.loads(truth_file.read_text())
    cases = json.loads(cases_file.read_text())
    clean = (CorruptRecordError, DatasetChangedError, FileNotFoundError, ValueError)
    counts = {"correct": 0, "refused": 0, "verify_damaged": 0, "verify_ok": 0, "loader": 0}

    def read_all(ds):
        for i in range(len(ds)):
            try:
                data, label = ds.read(i)
            except clean:
                counts["refused"] += 1
                continue
            assert truth[hashlib.sha1(data).hexdigest()] == label, f"sample {i}: wrong label"
            counts["correct"] += 1

    for n, (shard, bit, with_workers) in enumerate(cases):
        if work.exists():
            shutil.rmtree(work)
        shutil.copytree(pristine, work)
        path = work / shard
        raw = bytearray(path.read_bytes())
        raw[bit // 8] ^= 1 << (bit % 8)
        path.write_bytes(bytes(raw))
        try:
            ds = ShardDataset(work)
        except clean:
            counts["refused"] += 1
        else:
            read_all(ds)
            if with_workers:
                loader = DataLoaderX(ds, batch_size=None, num_workers=2, collate_fn=lambda x: x, pin_memory=False)
                try:
                    for _ in loader:
                        pass
                except clean:
                    pass
                counts["loader"] += 1
        report = verify(work, decode=False)
        counts["verify_ok" if report.ok else "verify_damaged"] += 1
        for problem in report.problems:
            assert "\\n" not in problem
    print(json.dumps(counts))
    """
)


def test_240_flips_in_lmdb_structure_never_crash(pack, tmp_path):
    import hashlib
    import json

    from fastdata.datasets.shard_dataset import ShardDataset

    ds = ShardDataset(pack)
    truth = {}
    for i in range(len(ds)):
        data, label = ds.read(i)
        truth[hashlib.sha1(data).hexdigest()] = label
    rng = np.random.default_rng(22)
    shards = [s.path for s in Manifest.load(pack).shards]
    cases = []
    kinds = ["length", "overflow", "header"]
    for k in range(TARGETED + RANDOM):
        shard = shards[k % len(shards)]
        data = (pack / shard).read_bytes()
        pool = _structure_bits(data)[kinds[k % 3]] if k < TARGETED else range(len(data) * 8)
        cases.append((shard, int(pool[int(rng.integers(len(pool)))]), k % 12 == 0))
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    (tmp_path / "truth.json").write_text(json.dumps(truth))
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            SCRIPT,
            str(pack),
            str(tmp_path / "work"),
            str(tmp_path / "cases.json"),
            str(tmp_path / "truth.json"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, f"exit {run.returncode}: {run.stderr[-3000:]}"
    counts = json.loads(run.stdout.strip().splitlines()[-1])
    assert counts["verify_damaged"] + counts["verify_ok"] == TARGETED + RANDOM
    assert counts["refused"] > 0 and counts["verify_damaged"] > 0, counts  # the damage was seen, not missed
    assert counts["loader"] == len([c for c in cases if c[2]])


def test_verify_reports_structural_damage_in_one_line_and_exit_1(pack, tmp_path):
    import shutil

    work = tmp_path / "ds"
    shutil.copytree(pack, work)
    shard = work / Manifest.load(work).shards[0].path
    raw = bytearray(shard.read_bytes())
    raw[4096 * 1 + 16 + 8 + 8 + 48 + 40] ^= 0x40  # the main database's root page number in meta page 1
    raw[16 + 8 + 8 + 48 + 40] ^= 0x40  # and in meta page 0
    shard.write_bytes(bytes(raw))
    run = subprocess.run(
        [sys.executable, "-m", "fastdata.cli", "verify", str(work), "--no-decode"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1, run.stderr
    damaged = [line for line in run.stdout.splitlines() if line.startswith("DAMAGED")]
    assert any("LMDB structure is damaged" in line for line in damaged), run.stdout
