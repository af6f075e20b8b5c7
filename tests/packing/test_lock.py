"""One writer at a time: the output folder's lock."""

import time

import pytest

from fastdata.cli import main
from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.packing.check import verify
from fastdata.packing.journal import JOURNAL_NAME
from fastdata.packing.packer import pack
from fastdata.packing.scan import scan_image_folder
from tests.packing.slow_pack import all_files, make_small_images, start_pack, wait_for


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_small_images(tmp_path_factory.mktemp("lock_src"), 150)


@pytest.mark.slow
def test_second_pack_is_refused_at_once_and_the_first_is_intact(src, tmp_path, capsys):
    reference = tmp_path / "reference"
    pack(src, reference, format="lmdb", samples_per_shard=10, workers=0, progress=False)
    out = tmp_path / "out"
    first = start_pack(src, out, "--format", "lmdb", "--samples-per-shard", "10", "--workers", "2", delay=0.02)
    try:
        wait_for(out / JOURNAL_NAME, first)
        started = time.monotonic()
        with pytest.raises(ValueError, match=f"being written by another fastdata pack \\(pid {first.pid} on ") as info:
            pack(src, out, format="tfrecord", overwrite=True, workers=0, progress=False)
        assert type(info.value).__name__ == "OutputLockedError"
        code = main(["pack", str(src), str(out), "--format", "lmdb", "--overwrite", "--no-progress"])
        err = capsys.readouterr().err
        assert time.monotonic() - started < 2.0, "the second writer must be refused at once, not wait"
        assert first.poll() is None, "the first pack should still be running (make it slower)"
        assert code == 2 and f"pid {first.pid}" in err and err.count("\n") == 1
    finally:
        _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert verify(out).ok
    scan = scan_image_folder(src)
    ds = ShardDataset(out)
    assert ds.targets.tolist() == [
        label for path, label in zip(scan.paths, scan.labels, strict=False) if "broken" not in path
    ]
    assert all_files(out) == all_files(reference)  # byte for byte what an undisturbed pack writes; no lock file left


def test_lock_names_its_holder_and_is_released(tmp_path):
    from fastdata.packing.lock import LOCK_NAME, OutputLock, OutputLockedError

    with OutputLock(tmp_path) as held:
        text = (tmp_path / LOCK_NAME).read_text()
        assert text.startswith(f"pid {__import__('os').getpid()} on ") and "started" in text
        with pytest.raises(OutputLockedError, match="another fastdata pack"):
            OutputLock(tmp_path).acquire()  # a second open file in the same process conflicts too
        assert held.path.exists()
    assert not (tmp_path / LOCK_NAME).exists()
    with OutputLock(tmp_path):
        pass


def test_stale_lock_file_of_a_dead_pack_does_not_block(src, tmp_path):
    """After kill -9 the kernel has dropped the lock; the file it leaves must not stop the next pack."""
    from fastdata.packing.lock import LOCK_NAME

    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_NAME).write_text("pid 999999 on elsewhere, started long ago\n")
    manifest = pack(src, out, format="tfrecord", workers=0, progress=False)
    assert manifest.num_samples == 150 and not (out / LOCK_NAME).exists()
