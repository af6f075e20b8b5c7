"""SRC is read safely: a FIFO, a symlink to /dev/zero and a sparse 8 GB file named *.jpg are skipped with a
reason in well under a second each (never read, never a hang); a foreign manifest.json in OUT is never taken
for fastdata's, so --overwrite and a refused --resume delete nothing of the user's."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest

from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.packing.output import is_fastdata_manifest
from tests.packs import make_distinct_folder, pack_quietly


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "sparse_8gb"])
def test_special_files_in_src_are_skipped_quickly(tmp_path, kind):
    src = tmp_path / "src"
    truth = make_distinct_folder(src, per_class=2)
    odd = src / "ant" / "x.jpg"
    if kind == "fifo":
        os.mkfifo(odd)
    elif kind == "dev_zero":
        odd.symlink_to("/dev/zero")
    else:
        with open(odd, "wb") as f:
            f.truncate(8 << 30)  # sparse: no disk used, 8 GB to read
    start = time.monotonic()
    manifest = pack_quietly(src, tmp_path / "out", "tfrecord")
    elapsed = time.monotonic() - start
    assert elapsed < 20, elapsed  # generous for a loaded CI machine; a hang or an 8 GB read never finishes this fast
    skipped = {s.path: s.reason for s in manifest.skipped}
    assert list(skipped) == ["ant/x.jpg"], skipped
    expected = "more than the" if kind == "sparse_8gb" else "not a regular file"
    assert expected in skipped["ant/x.jpg"], skipped
    assert len(ShardDataset(tmp_path / "out")) == len(truth)


def test_a_large_file_bound_follows_the_pixel_limit(tmp_path):
    src = tmp_path / "src"
    make_distinct_folder(src, per_class=2)
    big = src / "bee" / "big.jpg"
    big.write_bytes((src / "bee" / "000.jpg").read_bytes() + b"\0" * (2 << 20))  # a valid JPEG with 2 MiB of trailer
    huge = src / "bee" / "huge.jpg"
    with open(huge, "wb") as f:
        f.write((src / "bee" / "000.jpg").read_bytes())
        f.truncate(17 << 20)  # 17 MiB, sparse
    manifest = pack_quietly(src, tmp_path / "a", "tfrecord", max_pixels=5000)  # bound: 40 KB + 16 MiB
    skipped = {s.path: s.reason for s in manifest.skipped}
    assert list(skipped) == ["bee/huge.jpg"] and "more than the" in skipped["bee/huge.jpg"], skipped
    manifest = pack_quietly(src, tmp_path / "b", "tfrecord", max_pixels=0)  # no limit: both read (and decode)
    assert not manifest.skipped


FOREIGN = {"name": "my-web-app", "version": "3.1.0", "icons": []}


@pytest.mark.parametrize("flag", ["overwrite", "resume"])
def test_a_foreign_manifest_and_targets_survive(tmp_path, flag):
    src = tmp_path / "src"
    make_distinct_folder(src, per_class=2)
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps(FOREIGN))
    np.save(out / "targets.npy", np.arange(5))
    (out / "targets.npy.tmp").write_bytes(b"the user's own file")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert not is_fastdata_manifest(out / "manifest.json")
    with pytest.raises(FileExistsError, match="fastdata did not write it"):
        pack_quietly(src, out, "tfrecord", **{flag: True})
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_fastdata_manifests_are_recognised(tmp_path):
    src = tmp_path / "src"
    make_distinct_folder(src, per_class=2)
    pack_quietly(src, tmp_path / "out", "lmdb")
    assert is_fastdata_manifest(tmp_path / "out" / "manifest.json")
    pack_quietly(src, tmp_path / "out", "lmdb", overwrite=True)  # its own dataset is still replaced as before
    for text in ("[]", "{", json.dumps({**FOREIGN, "created_by": "other 1.0", "format": "lmdb", "shards": []})):
        (tmp_path / "m.json").write_text(text)
        assert not is_fastdata_manifest(tmp_path / "m.json")


@pytest.mark.parametrize("piece", [b"", b'{"fingerprint": "sha2', b'{"repack": "old", "format": "lmdb"}\n'])
@pytest.mark.parametrize("command", ["pack", "repack"])
def test_a_run_killed_while_writing_its_journal_is_started_over(tmp_path, command, piece):
    """Round four's kill campaign (a fresh-clone CI run): a run killed inside its first write, the journal's first
    line, left only ``.pack-journal.jsonl.tmp``, and the rerun refused the folder as files "fastdata did not write".
    That piece, and only it, is now removed: the rerun gives the uninterrupted run's bytes."""
    from fastdata.packing.repack import repack
    from tests.packing.slow_pack import all_files

    src = tmp_path / "src"
    make_distinct_folder(src, per_class=2)
    old = tmp_path / "old"
    pack_quietly(src, old, "tfrecord")

    def run(out):
        if command == "pack":
            return pack_quietly(src, out, "lmdb")
        return repack(old, out, format="lmdb", workers=0, progress=False)

    run(tmp_path / "reference")
    out = tmp_path / "out"
    out.mkdir()
    (out / ".pack-journal.jsonl.tmp").write_bytes(piece)
    run(out)
    assert all_files(out) == all_files(tmp_path / "reference")


def test_a_journal_piece_that_is_not_one_is_left_alone(tmp_path):
    src = tmp_path / "src"
    make_distinct_folder(src, per_class=2)
    out = tmp_path / "out"
    out.mkdir()
    (out / ".pack-journal.jsonl.tmp").write_bytes(b"the user's own notes\nline two\n")
    with pytest.raises(FileExistsError, match="fastdata did not write it"):
        pack_quietly(src, out, "tfrecord", overwrite=True)
    assert (out / ".pack-journal.jsonl.tmp").read_bytes() == b"the user's own notes\nline two\n"
