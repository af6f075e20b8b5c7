"""Round four: ``kill -9`` at seeded random points of ``repack``, ``merge`` and ``pack --append`` (20 kills each).

After each kill the plain rerun (in this process) gives the uninterrupted run's bytes, file for file, or raises one
line that says how to recover, and the recovery it names then gives those bytes. The kill points are drawn uniformly
over one timed uninterrupted run of the same command, forked from a process that imported fastdata once (the
interpreter's start-up and the torch import, about 2 s a run under load, write nothing: the kills land where the
command works)."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fastdata.packing.merge import merge
from fastdata.packing.packer import pack
from fastdata.packing.repack import repack
from tests.packing.slow_pack import PackZygote, all_files, make_small_images

KILLS = int(os.environ.get("FASTDATA_TEST_KILLS", "20"))
OPTS = dict(samples_per_shard=3, workers=0, progress=False)


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("kill-sources")
    return make_small_images(root / "a", 24), make_small_images(root / "b", 30, seed=11)


def campaign(
    seed: int,
    argv: list[str],
    reset: Callable[[], None],
    rerun: Callable[[], object],
    recover: Callable[[], object],
    out: Path,
    expected: dict[str, bytes],
    log: Path,
) -> dict[str, int]:
    """``KILLS`` runs of ``fastdata ARGV``, each SIGKILLed at a seeded random point of a timed whole run, each then
    ``rerun`` here: the expected bytes, or one line that names the way out (then ``recover``: the expected bytes)."""
    zygote = PackZygote(delay=0.0)  # each run forked from one process that imported fastdata once
    try:
        for _ in range(2):  # the second run is timed: the first reads the sources into the page cache
            reset()
            started = time.monotonic()
            zygote.start(log, *argv)
            assert zygote.wait(timeout=300) == 0, log.read_text()
            whole = time.monotonic() - started
            assert all_files(out) == expected
        rng = random.Random(seed)
        outcomes = {"finished": 0, "rerun": 0, "recovered": 0}
        for _ in range(KILLS):
            reset()
            pid = zygote.start(log, *argv)
            time.sleep(rng.uniform(0.0, whole))
            with contextlib.suppress(ProcessLookupError):  # not yet reaped: the zygote waits for it
                os.kill(pid, signal.SIGKILL)
            code = zygote.wait(timeout=60)
            if code == 0:  # it finished before the kill: nothing to recover
                outcomes["finished"] += 1
                assert all_files(out) == expected
                continue
            assert code == -signal.SIGKILL, (code, log.read_text())
            try:
                rerun()
                outcomes["rerun"] += 1
            except Exception as exc:  # noqa: BLE001 - the message is what is checked
                message = str(exc)
                if "already holds these samples" in message or "nothing to merge" in message:  # it was done
                    outcomes["finished"] += 1
                    assert all_files(out) == expected
                    continue
                assert "\n" not in message and ("overwrite" in message or "--resume" in message), message
                recover()
                outcomes["recovered"] += 1
            assert all_files(out) == expected
        return outcomes
    finally:
        zygote.close()


def test_repack_killed_anywhere_reruns_byte_identical(sources, tmp_path):
    old = tmp_path / "old"
    pack(sources[0], old, format="tfrecord", **OPTS)
    reference = tmp_path / "reference"
    repack(old, reference, format="lmdb", workers=0, progress=False)
    expected = all_files(reference)
    new = tmp_path / "new"
    outcomes = campaign(
        41,
        ["repack", str(old), str(new), "--format", "lmdb", "--workers", "0", "--no-progress"],
        lambda: shutil.rmtree(new, ignore_errors=True),
        lambda: repack(old, new, format="lmdb", workers=0, progress=False),
        lambda: repack(old, new, format="lmdb", workers=0, progress=False, overwrite=True),
        new,
        expected,
        tmp_path / "run.log",
    )
    print(outcomes)
    assert sum(outcomes.values()) == KILLS


def test_merge_killed_anywhere_reruns_byte_identical(sources, tmp_path):
    parts = tmp_path / "parts"
    for i in range(3):
        pack(sources[0], parts, format="lmdb", part=(i, 3), range_size=6, **OPTS)
    reference = tmp_path / "reference"
    shutil.copytree(parts, reference)
    merge(str(reference))
    expected = all_files(reference)
    out = tmp_path / "out"

    def reset() -> None:
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(parts, out)

    rerun = lambda: merge(str(out))  # noqa: E731 - a merge stopped after publishing is finished by the rerun
    outcomes = campaign(43, ["merge", str(out)], reset, rerun, rerun, out, expected, tmp_path / "run.log")
    print(outcomes)
    assert sum(outcomes.values()) == KILLS


@pytest.mark.parametrize("resume", [True, False], ids=["append-resume", "append-again"])
def test_append_killed_anywhere_reruns_byte_identical(sources, tmp_path, resume):
    base = tmp_path / "base"
    pack(sources[0], base, format="lmdb", **OPTS)
    reference = tmp_path / "reference"
    shutil.copytree(base, reference)
    pack(sources[1], reference, format="lmdb", append=True, **OPTS)
    expected = all_files(reference)
    out = tmp_path / "out"

    def reset() -> None:
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(base, out)

    argv = ["pack", str(sources[1]), str(out), "--append", "--format", "lmdb", "--samples-per-shard", "3"]
    outcomes = campaign(
        47 + resume,
        [*argv, "--workers", "0", "--no-progress"],
        reset,
        lambda: pack(sources[1], out, format="lmdb", append=True, resume=resume, **OPTS),
        lambda: pack(sources[1], out, format="lmdb", append=True, resume=not resume, **OPTS),
        out,
        expected,
        tmp_path / "run.log",
    )
    print(outcomes)
    assert sum(outcomes.values()) == KILLS
