"""A full disk: "no space left" named (no traceback), nothing lost, exit code 3, and --resume ends byte-identical."""

import errno
import os
import shutil
import subprocess
import uuid

import lmdb
import pytest

from fastdata.cli import main
from fastdata.packing.journal import JOURNAL_NAME
from fastdata.packing.packer import pack
from tests.packing.slow_pack import all_files, make_small_images

OPTIONS = {"samples_per_shard": 6, "workers": 0, "progress": False}


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_small_images(tmp_path_factory.mktemp("space_src") / "src", 60)


@pytest.fixture(scope="module")
def references(src, tmp_path_factory):
    root = tmp_path_factory.mktemp("space_ref")
    for fmt in ("tfrecord", "lmdb"):
        pack(src, root / fmt, format=fmt, **OPTIONS)
    return root


def fill_disk_after(monkeypatch, fmt, records):
    """Make the shard writer fail the way a full disk does once ``records`` records are written.

    TFRecord gets ``OSError(ENOSPC)`` from a write. LMDB gets what it really raises on a full
    disk, ``lmdb.Error("mdb_txn_commit: Input/output error")`` when the shard is committed, and
    the file system reports almost no free space (as it does at that moment).
    """
    from fastdata.formats.lmdb_shards import LMDBShardWriter
    from fastdata.formats.tfrecord import TFRecordShardWriter

    written = []
    if fmt == "tfrecord":
        real_write = TFRecordShardWriter.write

        def write(self, record):
            written.append(1)
            if len(written) > records:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real_write(self, record)

        monkeypatch.setattr(TFRecordShardWriter, "write", write)
    else:
        import fastdata.packing.space as space

        real_write, real_close = LMDBShardWriter.write, LMDBShardWriter.close

        def count(self, record):
            written.append(1)
            return real_write(self, record)

        def close(self, root):
            if len(written) > records:
                raise lmdb.Error("mdb_txn_commit: Input/output error")
            return real_close(self, root)

        monkeypatch.setattr(LMDBShardWriter, "write", count)
        monkeypatch.setattr(LMDBShardWriter, "close", close)
        monkeypatch.setattr(space, "free_bytes", lambda folder: 4096)


@pytest.mark.parametrize("fmt", ["tfrecord", "lmdb"])
def test_simulated_full_disk_then_resume_byte_identical(src, references, tmp_path, monkeypatch, fmt):
    from fastdata.packing.space import OutOfSpaceError

    out = tmp_path / "out"
    fill_disk_after(monkeypatch, fmt, records=20)
    with pytest.raises(OutOfSpaceError) as info:
        pack(src, out, format=fmt, **OPTIONS)
    message = str(info.value)
    assert f"no space left on the device that holds {str(out)!r}: nothing was lost" in message
    assert "18 of 61 source images are in complete shards" in message and "--resume" in message
    assert isinstance(info.value, OSError) and not list(out.glob("*.tmp"))
    assert (out / JOURNAL_NAME).exists() and not (out / "manifest.json").exists()
    monkeypatch.undo()
    pack(src, out, format=fmt, resume=True, **OPTIONS)
    assert all_files(out) == all_files(references / fmt)


def test_lmdb_error_with_free_space_is_not_called_a_full_disk(src, tmp_path, monkeypatch):
    import fastdata.packing.space as space

    fill_disk_after(monkeypatch, "lmdb", records=3)
    monkeypatch.setattr(space, "free_bytes", lambda folder: 10 << 30)  # plenty: some other LMDB failure
    with pytest.raises(lmdb.Error, match="Input/output error"):
        pack(src, tmp_path / "out", format="lmdb", **OPTIONS)


def test_cli_full_disk_exits_3_with_one_line(src, tmp_path, monkeypatch, capsys):
    fill_disk_after(monkeypatch, "tfrecord", records=10)
    out = tmp_path / "out"
    code = main(
        [
            "pack",
            str(src),
            str(out),
            "--format",
            "tfrecord",
            "--samples-per-shard",
            "6",
            "--workers",
            "0",
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err
    assert code == 3
    assert (
        err.startswith(f"fastdata: error: no space left on the device that holds {str(out)!r}") and err.count("\n") == 1
    )
    assert "run the same command with --resume" in err and "Traceback" not in err


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 2 MiB tmpfs (needs root and mount rights; skipped where it cannot be mounted)."""
    mount = tmp_path / f"tmpfs-{uuid.uuid4().hex[:8]}"
    mount.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


@pytest.mark.parametrize("fmt", ["tfrecord", "lmdb"])
def test_real_full_disk_on_a_tmpfs_then_resume_byte_identical(tmp_path, tiny_tmpfs, fmt):
    from fastdata.packing.space import OutOfSpaceError

    src = make_small_images(tmp_path / "big", 400, seed=3, size=(100, 120))  # 3.4 MB: more than the 2 MiB disk holds
    reference = tmp_path / "reference"
    pack(src, reference, format=fmt, samples_per_shard=50, workers=2, progress=False)
    out = tiny_tmpfs / "out"
    with pytest.raises(OutOfSpaceError, match="no space left on the device that holds .* nothing was lost"):
        pack(src, out, format=fmt, samples_per_shard=50, workers=2, progress=False)
    assert not list(out.glob("*.tmp")) and (out / JOURNAL_NAME).exists()
    kept = {name: data for name, data in all_files(out).items() if name.startswith("shard-")}
    assert kept and all(data == all_files(reference)[name] for name, data in kept.items())
    subprocess.run(["mount", "-o", "remount,size=64m", str(tiny_tmpfs)], check=True)  # "free some space"
    pack(src, out, format=fmt, samples_per_shard=50, workers=2, resume=True, progress=False)
    assert all_files(out) == all_files(reference)
    assert os.statvfs(out).f_bavail > 0
