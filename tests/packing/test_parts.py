"""Packing by range plan: --part I/N in separate processes then merge, merge's refusals, kill + resume by range."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fastdata.formats.manifest import Manifest
from fastdata.packing.lock import OutputLock, OutputLockedError
from fastdata.packing.merge import merge
from fastdata.packing.packer import pack
from fastdata.packing.ranges import record_name
from tests.storage.conftest import make_many_images

OPTS = {"samples_per_shard": 3, "range_size": 6}  # 37 source items: 7 ranges (the last of 1), shards of 3
FLAGS = ["--samples-per-shard", "3", "--range-size", "6", "--no-progress"]

SLOW_CLI = """
import importlib, sys, time
p = importlib.import_module("fastdata.packing.pipeline")  # where each image is loaded
real = p._load
def slow(job):
    time.sleep(0.05)
    return real(job)
p._load = slow
from fastdata.cli import main
sys.exit(main(sys.argv[1:]))
"""


def files(root: Path) -> dict[str, bytes]:
    """Every file of a finished pack, by name (nothing else may be left over)."""
    return {p.name: p.read_bytes() for p in sorted(root.iterdir())}


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    root = make_many_images(tmp_path_factory.mktemp("src"), count=36, classes=3)
    (root / "class01" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    return root


@pytest.fixture(scope="module")
def reference(src, tmp_path_factory):
    refs = {}
    for fmt in ("tfrecord", "lmdb"):
        out = tmp_path_factory.mktemp(f"ref-{fmt}")
        manifest = pack(src, out, format=fmt, workers=2, progress=False, **OPTS)
        assert len(manifest.shards) == 13 and manifest.options["range_size"] == 6
        assert manifest.shards[2].path == f"shard-00001-00000.{fmt}"  # shards never cross a range end
        refs[fmt] = files(out)
    return refs


def _cli(*args: str, slow: bool = False) -> subprocess.Popen:
    code = SLOW_CLI if slow else "import sys; from fastdata.cli import main; sys.exit(main(sys.argv[1:]))"
    from tests.packing.slow_pack import terminal_signals

    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=terminal_signals,
    )


@pytest.mark.slow
# one part, an odd split, more parts than cores
@pytest.mark.parametrize("fmt,parts", [("tfrecord", 1), ("lmdb", 3), ("tfrecord", 7)])
def test_parts_in_separate_processes_then_merge_byte_identical(src, reference, tmp_path, fmt, parts):
    out = tmp_path / "out"
    order = list(range(parts))
    random.Random(parts).shuffle(order)
    procs = [
        _cli("pack", str(src), str(out), "--format", fmt, "--workers", "0", "--part", f"{i}/{parts}", *FLAGS)
        for i in order
    ]  # all at once, started in a shuffled order
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    assert not (out / "manifest.json").exists()
    assert sorted(p.name for p in out.glob("part-*")) == [f"part-{i:05d}-of-{parts:05d}.json" for i in range(parts)]
    proc = _cli("merge", str(out))
    text, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "merged 36 images" in text
    assert files(out) == reference[fmt]


def test_merge_refuses_a_missing_part(src, tmp_path):
    for i in (0, 2):
        pack(src, tmp_path, format="tfrecord", workers=0, progress=False, part=(i, 3), **OPTS)
    with pytest.raises(FileNotFoundError) as info:
        merge(tmp_path)
    message = str(info.value)
    assert "\n" not in message and "part 1/3 is missing" in message and "--part 1/3" in message
    assert not (tmp_path / "manifest.json").exists()
    pack(src, tmp_path, format="tfrecord", workers=0, progress=False, part=(1, 3), **OPTS)
    assert merge(tmp_path).num_samples == 36


def test_merge_refuses_a_part_with_other_options(src, tmp_path):
    pack(src, tmp_path, format="tfrecord", workers=0, progress=False, part=(0, 2), **OPTS)
    pack(src, tmp_path, format="tfrecord", workers=0, progress=False, part=(1, 2), max_side=32, **OPTS)
    proc = _cli("merge", str(tmp_path))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert err.count("\n") == 1 and "part 1/2" in err and "other options" in err and "--max-side is 32" in err


def test_merge_refuses_a_part_from_another_source(src, tmp_path):
    other = make_many_images(tmp_path / "other", count=36, classes=3, seed=9)
    for name in ("class00/img0000.jpg",):  # same names, one other file list
        (other / name).rename(other / "class00" / "renamed.jpg")
    out = tmp_path / "out"
    pack(src, out, format="tfrecord", workers=0, progress=False, part=(0, 2), **OPTS)
    pack(other, out, format="tfrecord", workers=0, progress=False, part=(1, 2), **OPTS)
    with pytest.raises(ValueError) as info:
        merge(out)
    message = str(info.value)
    assert "\n" not in message and "part 1/2" in message and "another source" in message


def test_two_tasks_cannot_write_one_range(src, tmp_path):
    """A range is written under its own lock: a second task of the same range is refused while the first runs."""
    with OutputLock(tmp_path, ".range-00002.lock"), pytest.raises(OutputLockedError, match="range-00002"):
        pack(src, tmp_path, format="tfrecord", workers=0, progress=False, part=(1, 3), **OPTS)
    assert not list(tmp_path.glob("shard-00002-*"))


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["tfrecord", "lmdb"])
def test_killed_task_then_resume_redoes_only_missing_ranges(src, reference, tmp_path, fmt, monkeypatch):
    out = tmp_path / "out"
    proc = _cli("pack", str(src), str(out), "--format", fmt, "--workers", "0", *FLAGS, slow=True)
    deadline = time.monotonic() + 120
    while len(list(out.glob(".range-*.json"))) < 3:  # 3 ranges published, then kill mid-range
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the pack did not publish 3 ranges: rc={proc.poll()} {proc.communicate()}")
        time.sleep(0.005)
    time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL and not (out / "manifest.json").exists()
    done = sorted(int(p.name[7:12]) for p in out.glob(".range-*.json"))
    assert 3 <= len(done) < 7
    published = {p.name: os.stat(p).st_ino for p in out.glob("shard-*")}
    ranges_seen = {int(name[6:11]) for name in published}
    assert ranges_seen == set(done)  # the killed task left no visible shard
    records = {r: json.loads((out / record_name(r)).read_text()) for r in done}

    import fastdata.packing.engines.local as local

    ran, real = [], local.run_range
    monkeypatch.setattr(local, "run_range", lambda task: ran.append(task.index) or real(task))
    manifest = pack(src, out, format=fmt, workers=0, progress=False, resume=True, **OPTS)
    assert sorted(ran) == sorted(set(range(7)) - set(done))  # only the missing ranges were redone
    assert all(os.stat(out / name).st_ino == ino for name, ino in published.items())  # the others were kept
    assert isinstance(manifest, Manifest) and files(out) == reference[fmt]
    assert all(records[r]["range"] == r for r in done)


def test_plan_ranges_and_parts():
    from fastdata.packing.plan import make_plan, parse_part

    plan = make_plan(37, 7, samples_per_shard=3)  # rounded up to 9: count-bounded shards are not cut short
    assert plan.range_size == 9 and len(plan) == 5 and plan.bounds(4) == (36, 37)
    assert plan.shard_prefix(2) == "shard-00002-" and make_plan(5).shard_prefix(0) == "shard-"
    for parts in (1, 2, 3, 7):
        blocks = [list(plan.part(i, parts)) for i in range(parts)]
        assert sum(blocks, []) == list(range(len(plan)))  # every range once, in order, whatever N
    assert parse_part("2/7") == (2, 7)
    for bad in ("7/7", "1/0", "a/b", "-1/3"):
        with pytest.raises(ValueError, match="I/N"):
            parse_part(bad)


@pytest.mark.parametrize("kind", ["csv", "parquet", "webdataset"])
def test_parts_of_any_source_merge_to_the_local_pack(kind, tmp_path):
    """The plan cuts any source's sample list: a CSV list with fields, Hugging Face Parquet, WebDataset tars."""
    from tests.packing.sources_data import make_samples, write_csv, write_hf_parquet, write_webdataset

    samples = make_samples(count=20)
    src = {
        "csv": lambda: str(write_csv(tmp_path / "csv", samples)),
        "parquet": lambda: str(write_hf_parquet(tmp_path / "hf", samples)),
        "webdataset": lambda: write_webdataset(tmp_path / "wds", samples),
    }[kind]()
    extra = {"fields": ("caption", "count")} if kind == "csv" else {}
    opts = {"format": "lmdb", "samples_per_shard": 3, "range_size": 6, "workers": 0, "progress": False, **extra}
    local = pack(src, tmp_path / "local", **opts)
    assert len(local.shards) == 7  # ranges of 6, 6, 6 and 2 samples: 2 + 2 + 2 + 1 shards
    for i in (2, 0, 1):
        pack(src, tmp_path / "parts", part=(i, 3), **opts)
    assert merge(tmp_path / "parts") == local
    assert files(tmp_path / "parts") == files(tmp_path / "local")


def test_part_resume_redoes_only_its_missing_range(src, reference, tmp_path, monkeypatch):
    import fastdata.packing.engines.local as local

    out = tmp_path / "out"
    pack(src, out, format="tfrecord", workers=0, progress=False, part=(0, 2), **OPTS)  # ranges 0, 1, 2
    (out / "part-00000-of-00002.json").unlink()
    (out / record_name(1)).unlink()  # as a task that died before its record leaves range 1
    with pytest.raises(FileExistsError, match="--resume"):
        pack(src, out, format="tfrecord", workers=0, progress=False, part=(0, 2), **OPTS)
    ran, real = [], local.run_range
    monkeypatch.setattr(local, "run_range", lambda task: ran.append(task.index) or real(task))
    result = pack(src, out, format="tfrecord", workers=0, progress=False, part=(0, 2), resume=True, **OPTS)
    assert ran == [1] and result.packed == 1 and result.ranges == [0, 1, 2]
    pack(src, out, format="tfrecord", workers=0, progress=False, part=(1, 2), **OPTS)
    merge(out)
    assert files(out) == reference["tfrecord"]


@pytest.mark.parametrize("left", ["every part and record", "one record"])
def test_a_merge_stopped_after_publishing_is_finished_by_a_rerun(src, reference, tmp_path, left):
    """Round four's kill campaign: killed after ``manifest.json`` was written but before the parts and range
    records were removed, a rerun said "nothing to merge" and left them; it now removes them (the manifest lists
    every shard they record), and the folder is the single-machine pack's, byte for byte."""
    for i in range(3):
        pack(src, tmp_path, format="lmdb", workers=0, progress=False, part=(i, 3), **OPTS)
    kept = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith(("part-", ".range-"))}
    merge(tmp_path)
    assert files(tmp_path) == reference["lmdb"]
    for name, data in kept.items():  # what a kill between the manifest and the clean-up leaves
        if left == "every part and record" or name == record_name(1):
            (tmp_path / name).write_bytes(data)
    assert merge(tmp_path).num_samples == 36
    assert files(tmp_path) == reference["lmdb"]
    with pytest.raises(FileExistsError, match="nothing to merge"):
        merge(tmp_path)


def test_a_finished_pack_beside_a_stale_part_is_refused_in_one_line(src, reference, tmp_path):
    pack(src, tmp_path, format="lmdb", workers=0, progress=False, **OPTS)
    other = tmp_path.parent / "other"
    pack(src, other, format="lmdb", workers=0, progress=False, part=(0, 2), max_side=32, **OPTS)
    stale = next(other.glob("part-*.json"))
    (tmp_path / stale.name).write_bytes(stale.read_bytes())
    with pytest.raises(FileExistsError) as info:
        merge(tmp_path)
    message = str(info.value)
    assert "\n" not in message and stale.name in message and "not of it" in message
    assert (tmp_path / stale.name).exists()  # nothing removed
