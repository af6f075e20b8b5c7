"""``--resume`` checks each kept shard's CRC32C: a kept shard whose bytes changed (same size) is redone."""

from pathlib import Path

import pytest

from fastdata.packing.journal import PackJournal
from fastdata.packing.packer import pack
from tests.packing.test_parts import OPTS, files, reference, src  # noqa: F401 - fixtures


def _flip_middle_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("fmt", ["tfrecord", "lmdb"])
def test_resume_redoes_a_kept_shard_whose_bytes_changed(src, reference, tmp_path, fmt, monkeypatch):  # noqa: F811
    out = tmp_path / "out"
    real, calls = PackJournal.append, []

    def interrupted(journal, entry):
        if len(calls) == 4:
            raise KeyboardInterrupt  # Ctrl-C after 4 shards are durable
        calls.append(entry)
        real(journal, entry)

    opts = {"format": fmt, "samples_per_shard": OPTS["samples_per_shard"], "workers": 0, "progress": False}
    with monkeypatch.context() as m:
        m.setattr(PackJournal, "append", interrupted)
        with pytest.raises(KeyboardInterrupt):
            pack(src, out, **opts)
    assert not (out / "manifest.json").exists()
    kept = out / calls[1].shard.path
    size = kept.stat().st_size
    _flip_middle_byte(kept)  # same size, other bytes: a size check alone keeps it
    assert kept.stat().st_size == size
    pack(src, out, resume=True, **opts)
    whole = tmp_path / "whole"
    pack(src, whole, **opts)
    assert files(out) == files(whole)


@pytest.mark.parametrize("fmt", ["tfrecord", "lmdb"])
def test_resume_of_parts_redoes_a_range_whose_shard_changed(src, reference, tmp_path, fmt):  # noqa: F811
    out = tmp_path / "out"
    pack(src, out, format=fmt, workers=0, progress=False, part=(0, 2), **OPTS)  # ranges 0, 1, 2 published
    _flip_middle_byte(out / f"shard-00001-00000.{fmt}")
    pack(src, out, format=fmt, workers=0, progress=False, part=(0, 2), resume=True, **OPTS)
    pack(src, out, format=fmt, workers=0, progress=False, part=(1, 2), **OPTS)
    from fastdata.packing.merge import merge

    merge(out)
    assert files(out) == reference[fmt]
