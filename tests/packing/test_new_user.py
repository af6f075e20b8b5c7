"""Nothing surprising for a new user (issue 28): labels are never silently renumbered or made up, a pack still being
written is never read as a dataset, damaged tars are listed rather than a traceback, and ``--append`` fills in what
it can and refuses what it already holds."""

from __future__ import annotations

import csv
import io
import json
import shutil
import tarfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from fastdata import ShardDataset
from fastdata.cli import main
from fastdata.formats.manifest import Manifest
from tests.images import encode, natural_image
from tests.packing.slow_pack import make_small_images, start_pack, wait_for


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code: int, err: str) -> None:
    assert code == 2, err
    assert err.startswith("fastdata: error:") and err.count("\n") == 1 and "Traceback" not in err, err


def jpegs(count: int, seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [encode(natural_image(rng, 16 + k % 5, 20), "JPEG") for k in range(count)]


def write_list(root: Path, labels: list, *, kind: str = "csv", header: tuple[str, str] = ("path", "label")) -> Path:
    """A list of ``len(labels)`` images with these labels (CSV cells, or JSON values)."""
    root.mkdir(parents=True, exist_ok=True)
    for k, data in enumerate(jpegs(len(labels))):
        (root / f"{k}.jpg").write_bytes(data)
    if kind == "csv":
        with open(root / "list.csv", "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(header)
            out.writerows([f"{k}.jpg", label] for k, label in enumerate(labels))
        return root / "list.csv"
    with open(root / "list.jsonl", "w") as f:
        for k, label in enumerate(labels):
            f.write(json.dumps({header[0]: f"{k}.jpg", header[1]: label}) + "\n")
    return root / "list.jsonl"


def write_tar(path: Path, members: list[tuple[str, bytes]], pax: dict[str, dict[str, str]] | None = None) -> Path:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.pax_headers = (pax or {}).get(name, {})
            tar.addfile(info, io.BytesIO(data))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buf.getvalue())
    return path


def members(path: Path) -> list[tarfile.TarInfo]:
    with tarfile.open(path) as tar:
        return tar.getmembers()


def labelled_tar(path: Path, labels: list[str]) -> Path:
    images = jpegs(len(labels))
    return write_tar(
        path, [m for k, label in enumerate(labels) for m in ((f"s{k}.jpg", images[k]), (f"s{k}.cls", label.encode()))]
    )


# -- item 2: labels that mix integers and names ---------------------------------------------------------------------
@pytest.mark.parametrize("kind,labels", [("csv", ["3", "cat", "4"]), ("jsonl", [3, "cat", 4])])
def test_labels_mixing_integers_and_names_are_refused(capsys, tmp_path, kind, labels):
    src = write_list(tmp_path / "src", labels, kind=kind)
    code, _, err = run(capsys, "pack", src, tmp_path / "out", "--format", "tfrecord", "--no-progress")
    one_line_error(code, err)
    assert "row 2" in err and "'cat'" in err and "--labels names" in err
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.parametrize("kind,labels", [("csv", ["3", str(2**40), "4"]), ("jsonl", [3, 2**40, 4])])
def test_an_integer_label_too_large_for_a_class_table_is_refused(capsys, tmp_path, kind, labels):
    """Round four: a label of 2**40 in a list made the scan build 2**40 class names ("0" .. "max") until memory ran
    out (``fastdata.write`` refused it already). Now one line names the row; --labels names still reads it."""
    src = write_list(tmp_path / "src", labels, kind=kind)
    code, _, err = run(capsys, "pack", src, tmp_path / "out", "--format", "tfrecord", "--no-progress")
    one_line_error(code, err)
    assert "row 2" in err and str(2**40) in err and "16777215" in err and "--labels names" in err
    code, _, err = run(capsys, "pack", src, tmp_path / "out", "--format", "lmdb", "--no-progress", "--labels", "names")
    assert code == 0, err
    assert Manifest.load(tmp_path / "out").classes == sorted(str(v) for v in labels)


def test_labels_names_reads_every_label_as_a_class_name(capsys, tmp_path):
    src = write_list(tmp_path / "src", ["3", "cat", "10", "2"])
    code, _, err = run(capsys, "pack", src, tmp_path / "out", "--format", "lmdb", "--no-progress", "--labels", "names")
    assert code == 0, err
    manifest = Manifest.load(tmp_path / "out")
    assert manifest.classes == ["10", "2", "3", "cat"]  # as text, as asked
    assert np.load(tmp_path / "out" / manifest.targets).tolist() == [2, 3, 0, 1]
    assert manifest.options["labels"] == "names"


def test_integer_labels_stay_integers(capsys, tmp_path):
    src = write_list(tmp_path / "src", ["3", "10", "2"])
    assert run(capsys, "pack", src, tmp_path / "out", "--format", "tfrecord", "--no-progress")[0] == 0
    manifest = Manifest.load(tmp_path / "out")
    assert np.load(tmp_path / "out" / manifest.targets).tolist() == [3, 10, 2] and len(manifest.classes) == 11


def test_webdataset_cls_mixing_integers_and_names_is_refused(capsys, tmp_path):
    tar = labelled_tar(tmp_path / "wds" / "a.tar", ["1", "2", "dog", "0"])
    code, _, err = run(capsys, "pack", tar, tmp_path / "out", "--format", "tfrecord", "--no-progress")
    one_line_error(code, err)
    assert "sample 3" in err and "'dog'" in err
    assert (
        run(capsys, "pack", tar, tmp_path / "out", "--format", "tfrecord", "--no-progress", "--labels", "names")[0] == 0
    )
    assert Manifest.load(tmp_path / "out").classes == ["0", "1", "2", "dog"]


# -- item 3: no label column ------------------------------------------------------------------------------------------
def test_a_list_without_labels_is_refused_naming_its_columns(capsys, tmp_path):
    src = write_list(tmp_path / "src", ["a", "b", "c"], header=("path", "caption"))
    code, _, err = run(capsys, "pack", src, tmp_path / "out", "--format", "tfrecord", "--no-progress")
    one_line_error(code, err)
    assert "path, caption" in err and "--unlabelled" in err


@pytest.mark.parametrize("fmt", ["tfrecord", "lmdb"])
def test_an_unlabelled_pack_verifies(capsys, tmp_path, fmt):
    src = write_list(tmp_path / "src", ["a", "b", "c"], kind="jsonl", header=("path", "caption"))
    out = tmp_path / "out"
    code, text, err = run(capsys, "pack", src, out, "--format", fmt, "--no-progress", "--unlabelled")
    assert code == 0 and "without labels" in text, err
    manifest = Manifest.load(out)
    assert manifest.classes == [] and manifest.options["unlabelled"] is True
    assert np.load(out / manifest.targets).tolist() == [-1, -1, -1]
    code, text, err = run(capsys, "verify", out)
    assert code == 0 and "OK: 3 records" in text, text + err
    code, text, _ = run(capsys, "inspect", out)
    assert code == 0 and "unlabelled: every label is -1" in text
    ds = ShardDataset(out)
    assert [ds[i][1] for i in range(3)] == [-1, -1, -1] and ds.classes == []


def test_webdataset_without_labels_is_refused_unless_unlabelled(capsys, tmp_path):
    tar = write_tar(tmp_path / "a.tar", [(f"s{k}.jpg", data) for k, data in enumerate(jpegs(3))])
    code, _, err = run(capsys, "pack", tar, tmp_path / "out", "--format", "lmdb", "--no-progress")
    one_line_error(code, err)
    assert ".jpg" in err and "--unlabelled" in err
    assert run(capsys, "pack", tar, tmp_path / "out", "--format", "lmdb", "--no-progress", "--unlabelled")[0] == 0
    assert run(capsys, "verify", tmp_path / "out")[0] == 0


# -- item 4: a pack still being written -------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["tfrecord", "lmdb"])
def test_a_pack_being_written_does_not_open_as_a_dataset(tmp_path, fmt):
    from fastdata.formats.unfinished import UnfinishedPackError

    src = make_small_images(tmp_path / "src", 200)
    out = tmp_path / "out"
    proc = start_pack(src, out, "--format", fmt, "--samples-per-shard", "10", "--workers", "1", delay=0.02)
    try:
        wait_for(out / ".pack-journal.jsonl", proc)
        deadline = time.monotonic() + 60
        while not list(out.glob("shard-*")) and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(UnfinishedPackError, match=f"pid {proc.pid} on .*started .*manifest.json"):
            ShardDataset(out)
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 30  # the killed pack's workers let go of the lock as they exit
    while time.monotonic() < deadline:
        try:
            ShardDataset(out)
        except UnfinishedPackError as exc:
            if "interrupted" in str(exc):
                assert "--resume" in str(exc) and ".pack-journal.jsonl" in str(exc)
                break
        time.sleep(0.1)
    else:
        pytest.fail("the interrupted pack was not named as such")


def test_third_party_tfrecords_still_open(tmp_path, capsys):
    src = make_small_images(tmp_path / "src", 12)
    assert run(capsys, "pack", src, tmp_path / "pack", "--format", "tfrecord", "--no-progress")[0] == 0
    (tmp_path / "records").mkdir()
    for shard in (tmp_path / "pack").glob("shard-*.tfrecord"):
        shutil.copy(shard, tmp_path / "records" / f"train-{shard.name}")
    assert len(ShardDataset(tmp_path / "records")) == 12


def test_a_readers_probe_does_not_refuse_a_writer(tmp_path):
    import fcntl

    from fastdata.packing.lock import LOCK_NAME, OutputLock

    (tmp_path / LOCK_NAME).write_text("")
    with open(tmp_path / LOCK_NAME) as probe:
        fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)  # a reader asking whether a pack runs, at the writer's start
        timer = threading.Timer(0.2, fcntl.flock, (probe, fcntl.LOCK_UN))
        timer.start()
        try:
            with OutputLock(tmp_path):
                pass
        finally:
            timer.join()


# -- item 12: damaged tars --------------------------------------------------------------------------------------------
def test_a_file_that_is_no_tar_is_one_line(capsys, tmp_path):
    (tmp_path / "bad.tar").write_bytes(b"not a tar at all " * 64)
    code, _, err = run(capsys, "pack", tmp_path / "bad.tar", tmp_path / "out", "--format", "tfrecord", "--no-progress")
    one_line_error(code, err)
    assert "bad.tar is not a tar file" in err


def test_a_truncated_tar_lists_the_member_past_its_end(capsys, tmp_path):
    tar = labelled_tar(tmp_path / "full.tar", ["0", "1", "0", "1"])
    third = members(tar)[4]  # s2.jpg
    cut = tmp_path / "cut.tar"
    cut.write_bytes(tar.read_bytes()[: third.offset_data + 50])
    code, text, err = run(capsys, "pack", cut, tmp_path / "out", "--format", "tfrecord", "--no-progress")
    assert code == 0, err
    assert "packed 2 images" in text and "s2.jpg" in text and "past the end of the tar" in text
    where = f"cut.tar:{third.offset_data}:{third.size}:s2.jpg (sample 3)"
    assert [s.path for s in Manifest.load(tmp_path / "out").skipped] == [where]


def test_a_tar_cut_inside_a_header_is_listed(capsys, tmp_path):
    tar = labelled_tar(tmp_path / "full.tar", ["0", "1", "0", "1"])
    third = members(tar)[4]
    cut = tmp_path / "cut.tar"
    cut.write_bytes(tar.read_bytes()[: third.offset + 200])  # tarfile alone takes this for the end of the archive
    code, text, err = run(capsys, "pack", cut, tmp_path / "out", "--format", "tfrecord", "--no-progress")
    assert code == 0, err
    assert f"cut.tar (offset {third.offset})" in text and "not read" in text


@pytest.mark.parametrize("where", ["member size", "extended header size"])
def test_a_pax_header_declaring_a_huge_size_is_listed(capsys, tmp_path, where):
    images = jpegs(2)
    content = [("s0.jpg", images[0]), ("s0.cls", b"0"), ("s1.jpg", images[1]), ("s1.cls", b"1")]
    if where == "member size":
        tar = write_tar(tmp_path / "pax.tar", content, pax={"s1.jpg": {"size": str(10**15)}})
    else:  # a pax header whose own size field declares 1 PB before the second sample
        whole = write_tar(tmp_path / "whole.tar", content).read_bytes()
        header = tarfile.TarInfo("PaxHeader")
        header.type, header.size = tarfile.XHDTYPE, 10**15
        at = members(tmp_path / "whole.tar")[2].offset
        tar = tmp_path / "pax.tar"
        tar.write_bytes(whole[:at] + header.tobuf(format=tarfile.GNU_FORMAT)[:512] + whole[at:])
    code, text, err = run(capsys, "pack", tar, tmp_path / "out", "--format", "lmdb", "--no-progress")
    assert code == 0, err
    assert "packed 1 images" in text and "1000000000000000" in text and "skipped 1" in text


# -- item 15: --append ------------------------------------------------------------------------------------------------
def test_append_takes_the_packs_format_and_refuses_what_it_holds(capsys, tmp_path):
    first = write_list(tmp_path / "a", ["cat", "dog", "cat"])
    second = write_list(tmp_path / "b", ["dog", "eel"])
    out = tmp_path / "out"
    assert run(capsys, "pack", first, out, "--format", "lmdb", "--no-progress")[0] == 0
    code, text, err = run(capsys, "pack", second, out, "--append", "--no-progress")  # no --format
    assert code == 0, err
    assert "added 2 (now 5)" in text
    assert Manifest.load(out).format == "lmdb"
    for again in (first, second):  # the pack's own source, then an earlier append's
        code, _, err = run(capsys, "pack", again, out, "--append", "--no-progress")
        one_line_error(code, err)
        assert "already holds these samples" in err and "--allow-duplicates" in err
    assert Manifest.load(out).num_samples == 5
    code, text, err = run(capsys, "pack", second, out, "--append", "--no-progress", "--allow-duplicates")
    assert code == 0 and "added 2 (now 7)" in text, err


def test_format_is_still_required_without_append(capsys, tmp_path):
    src = write_list(tmp_path / "src", ["a"])
    code, _, err = run(capsys, "pack", src, tmp_path / "out", "--no-progress")
    one_line_error(code, err)
    assert "--format is required" in err


def test_an_unlabelled_append_to_a_labelled_pack_is_refused(capsys, tmp_path):
    out = tmp_path / "out"
    assert run(capsys, "pack", write_list(tmp_path / "a", ["cat"]), out, "--format", "lmdb", "--no-progress")[0] == 0
    src = write_list(tmp_path / "b", ["x"], header=("path", "caption"))
    code, _, err = run(capsys, "pack", src, out, "--append", "--no-progress", "--unlabelled")
    one_line_error(code, err)
    assert "labelled pack" in err


def test_an_interrupted_duplicate_append_is_finished_by_resume(tmp_path):
    """An --allow-duplicates append of the samples of the pack's last append, interrupted, is resumed; not taken
    for that earlier append, finished."""
    from fastdata.packing.packer import pack

    first, second = make_small_images(tmp_path / "a", 12), make_small_images(tmp_path / "b", 20, seed=9)
    out = tmp_path / "out"
    opts = {"format": "lmdb", "samples_per_shard": 4, "workers": 0, "progress": False}
    pack(first, out, **opts)
    assert pack(second, out, append=True, **opts).num_samples == 32  # shards 3..7
    proc = start_pack(
        second,
        out,
        "--format",
        "lmdb",
        "--append",
        "--allow-duplicates",
        "--samples-per-shard",
        "4",
        "--workers",
        "0",
        delay=0.2,
    )
    try:
        wait_for(out / "shard-00009.lmdb", proc)
    finally:
        proc.kill()
        proc.wait()
    assert Manifest.load(out).num_samples == 32
    manifest = pack(second, out, append=True, resume=True, allow_duplicates=True, **opts)
    assert manifest.num_samples == 52 and len(manifest.options["appended"]) == 2
