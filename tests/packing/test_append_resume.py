"""``--append`` refuses options that differ from the pack's, and an append killed mid-way is finished by
``--append --resume`` (or started over by a plain ``--append``), byte-identical to an uninterrupted one."""

from __future__ import annotations

import os
import shutil
import signal

import pytest

from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.formats.manifest import Manifest
from fastdata.packing.check import verify
from fastdata.packing.packer import pack
from tests.packing.slow_pack import all_files, make_small_images, start_pack, wait_for

OPTS = dict(samples_per_shard=4, workers=0, progress=False)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("append-resume")
    return make_small_images(root / "a", 12), make_small_images(root / "b", 60, seed=9)


def _base(sources, out, fmt):
    return pack(sources[0], out, format=fmt, **OPTS)


@pytest.mark.parametrize(
    "change,flag",
    [
        ({"keep_bytes": True}, "--keep-bytes"),
        ({"samples_per_shard": 5}, "--samples-per-shard"),
        ({"max_side": 16}, "--max-side"),
        ({"shard_size": 1 << 20}, "--shard-size"),
    ],
)
def test_append_refuses_options_that_differ_from_the_pack(sources, tmp_path, change, flag):
    out = tmp_path / "out"
    _base(sources, out, "lmdb")
    before = all_files(out)
    with pytest.raises(ValueError, match=f"--append refused: .*{flag} .*the pack has") as info:
        pack(sources[1], out, format="lmdb", append=True, **{**OPTS, **change})
    assert "\n" not in str(info.value)
    assert all_files(out) == before


@pytest.mark.parametrize("fmt", ["lmdb", "tfrecord"])
def test_an_append_killed_mid_way_resumes_or_reruns_byte_identical(sources, tmp_path, fmt):
    whole = tmp_path / "whole"
    base = _base(sources, whole, fmt)
    out = tmp_path / "out"
    shutil.copytree(whole, out)
    pack(sources[1], whole, format=fmt, append=True, **OPTS)
    expected = all_files(whole)
    first_new = len(base.shards)
    suffix = "tfrecord" if fmt == "tfrecord" else "lmdb"
    for how in ("resume", "rerun"):
        proc = start_pack(
            sources[1], out, "--format", fmt, "--append", "--samples-per-shard", "4", "--workers", "0", delay=0.01
        )
        wait_for(out / f"shard-{first_new + 3:05d}.{suffix}", proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        assert proc.returncode == -signal.SIGKILL
        # readers see the old dataset, whole: its manifest is untouched and the new shards are not in it
        assert Manifest.load(out) == base and len(ShardDataset(out)) == base.num_samples
        assert verify(out).ok
        published = {p.name: os.stat(p).st_ino for p in out.glob(f"shard-*.{suffix}")}
        assert len(published) > first_new + 3
        if how == "resume":
            pack(sources[1], out, format=fmt, append=True, resume=True, **OPTS)
            kept = [n for n, ino in published.items() if (out / n).exists() and os.stat(out / n).st_ino == ino]
            assert len(kept) >= first_new + 3  # the new shards already complete were not written again
        else:
            pack(sources[1], out, format=fmt, append=True, **OPTS)
        assert all_files(out) == expected, how
        if how == "resume":  # a resume of the append that has finished changes nothing
            pack(sources[1], out, format=fmt, append=True, resume=True, **OPTS)
            assert all_files(out) == expected
        shutil.rmtree(out)
        shutil.copytree(_fresh(sources, tmp_path, fmt), out)


def _fresh(sources, tmp_path, fmt):
    fresh = tmp_path / "fresh"
    if fresh.exists():
        shutil.rmtree(fresh)
    _base(sources, fresh, fmt)
    return fresh


def test_append_resume_of_another_source_is_refused_in_one_line(sources, tmp_path):
    out = tmp_path / "out"
    _base(sources, out, "lmdb")
    proc = start_pack(
        sources[1], out, "--format", "lmdb", "--append", "--samples-per-shard", "4", "--workers", "0", delay=0.01
    )
    wait_for(out / "shard-00005.lmdb", proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    with pytest.raises(ValueError, match="--resume refused") as info:
        pack(sources[0], out, format="lmdb", append=True, resume=True, **OPTS)
    assert "\n" not in str(info.value)
