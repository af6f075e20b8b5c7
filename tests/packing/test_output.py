"""The output folder: fastdata never deletes or replaces a file it did not write; --resume must match."""

import json
import shutil

import pytest

from fastdata.cli import main
from fastdata.formats.manifest import Manifest
from fastdata.packing.check import verify
from fastdata.packing.journal import JOURNAL_NAME
from fastdata.packing.packer import pack
from tests.packing.slow_pack import all_files, make_small_images


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_small_images(tmp_path_factory.mktemp("out_src") / "src", 30)


def foreign_files(out):
    files = {
        "notes.txt": b"my notes",
        "download.tmp": b"half a download",
        "shard-plan.tmp": b"not a shard",
        "sub/shard-00000.lmdb": b"someone else's",
    }
    for rel, data in files.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)
    return files


def test_non_fastdata_folder_refused_and_overwrite_keeps_its_files(src, tmp_path):
    out = tmp_path / "out"
    files = foreign_files(out)
    with pytest.raises(FileExistsError, match="is not empty .* holds no fastdata dataset.*--overwrite"):
        pack(src, out, format="lmdb", workers=0, progress=False)
    assert all_files(out) == files and not (out / JOURNAL_NAME).exists()
    manifest = pack(src, out, format="lmdb", overwrite=True, workers=0, progress=False)
    assert manifest.num_samples == 30 and verify(out).ok
    assert {rel: (out / rel).read_bytes() for rel in files} == files  # every foreign file survived, unchanged
    again = pack(src, out, format="tfrecord", overwrite=True, workers=0, progress=False)  # now it holds a dataset
    assert again.format == "tfrecord" and not list(out.glob("*.lmdb"))
    assert {rel: (out / rel).read_bytes() for rel in files} == files


@pytest.mark.parametrize("name", ["shard-00000.lmdb", "shard-00001.tfrecord.tmp", "targets.npy"])
def test_file_with_a_fastdata_name_that_fastdata_did_not_write_is_never_replaced(src, tmp_path, name):
    out = tmp_path / "out"
    out.mkdir()
    (out / name).write_bytes(b"precious")
    for overwrite in (False, True):
        with pytest.raises(FileExistsError, match=f"holds '{name}' but no fastdata manifest.json.*refusing"):
            pack(src, out, format="lmdb", overwrite=overwrite, workers=0, progress=False)
    assert (out / name).read_bytes() == b"precious" and sorted(p.name for p in out.iterdir()) == [name]


def test_overwrite_of_a_dataset_deletes_only_fastdata_files(src, tmp_path):
    out = tmp_path / "out"
    pack(src, out, format="lmdb", samples_per_shard=7, workers=0, progress=False)
    (out / "keep.tmp").write_bytes(b"mine")
    (out / "shard-notes.txt").write_bytes(b"also mine")
    (out / "shard-00099.idx.tmp").write_bytes(b"stale piece of a shard")  # fastdata's name in its own folder
    pack(src, out, format="tfrecord", samples_per_shard=7, overwrite=True, workers=0, progress=False)
    assert (out / "keep.tmp").read_bytes() == b"mine" and (out / "shard-notes.txt").read_bytes() == b"also mine"
    assert not (out / "shard-00099.idx.tmp").exists() and not list(out.glob("*.lmdb"))


def interrupted_pack(src, out, monkeypatch, **options):
    """Leave an unfinished pack in ``out``: interrupted after 10 images (so some shards are complete)."""
    import fastdata.packing.pipeline as packer

    real, calls = packer._load, []

    def load(job):
        calls.append(job)
        if len(calls) > 10:
            raise KeyboardInterrupt
        return real(job)

    monkeypatch.setattr(packer, "_load", load)
    with pytest.raises(KeyboardInterrupt):
        pack(src, out, workers=0, progress=False, **options)
    monkeypatch.setattr(packer, "_load", real)
    assert (out / JOURNAL_NAME).is_file() and not (out / "manifest.json").exists()


@pytest.mark.parametrize(
    "change,message",
    [
        ({"src": "copy"}, "SRC is '{copy}' \\(the pack was made from '{src}'\\)"),
        ({"format": "tfrecord"}, "--format is 'tfrecord' \\(the pack used 'lmdb'\\)"),
        ({"samples_per_shard": 4}, "--samples-per-shard is 4 \\(the pack used 3\\)"),
        ({"shuffle_seed": 1}, "--shuffle-seed is 1 \\(the pack used not set\\)"),
        (
            {"src": "more"},
            "image files or class folders in SRC are not those the pack was made from \\(31 then, 32 now\\)",
        ),
    ],
)
def test_resume_of_an_unfinished_pack_with_other_input_is_refused_naming_it(
    src, tmp_path, monkeypatch, change, message
):
    out = tmp_path / "out"
    copy, more = tmp_path / "copy", tmp_path / "more"
    shutil.copytree(src, copy)
    shutil.copytree(src, more)
    (more / "c0" / "extra.jpg").write_bytes((src / "c0" / "0000.jpg").read_bytes())
    options = {"format": "lmdb", "samples_per_shard": 3}
    interrupted_pack(src, out, monkeypatch, **options)
    journal = (out / JOURNAL_NAME).read_bytes()
    other = {"copy": copy, "more": more}.get(change.get("src"), src)
    asked = {**options, **{k: v for k, v in change.items() if k != "src"}}
    expected = message.format(copy=copy.resolve(), src=src.resolve())
    with pytest.raises(ValueError, match=f"--resume refused: .*{expected}"):
        pack(other, out, resume=True, workers=0, progress=False, **asked)
    assert (out / JOURNAL_NAME).read_bytes() == journal  # nothing was touched
    pack(src, out, resume=True, workers=0, progress=False, **options)  # the right command still finishes it
    assert verify(out).ok


@pytest.mark.parametrize(
    "change,message",
    [
        ({"format": "tfrecord"}, "--format is 'tfrecord' \\(the pack used 'lmdb'\\)"),
        ({"max_side": 64}, "--max-side is 64 \\(the pack used not set\\)"),
        (
            {"src": "other"},
            "image files or class folders in SRC are not those the pack was made from \\(31 then, 4 now\\)",
        ),
    ],
)
def test_resume_of_a_finished_pack_with_other_input_is_refused_naming_it(src, tmp_path, change, message):
    out = tmp_path / "out"
    other = make_small_images(tmp_path / "other", 3, seed=9)
    pack(src, out, format="lmdb", workers=0, progress=False)
    before = all_files(out)
    asked = {"format": "lmdb", **{k: v for k, v in change.items() if k != "src"}}
    with pytest.raises(ValueError, match=f"--resume refused: .*finished pack.*{message}"):
        pack(other if "src" in change else src, out, resume=True, workers=0, progress=False, **asked)
    assert all_files(out) == before
    assert pack(src, out, format="lmdb", resume=True, workers=0, progress=False) == Manifest.load(out)


def test_cli_resume_mismatch_is_a_one_line_error(src, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["pack", str(src), str(out), "--format", "lmdb", "--no-progress"]) == 0
    capsys.readouterr()
    code = main(["pack", str(src), str(out), "--format", "tfrecord", "--resume", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--format is 'tfrecord' (the pack used 'lmdb')" in err
    assert json.loads((out / "manifest.json").read_text())["format"] == "lmdb"
