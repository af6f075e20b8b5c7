"""Helpers of the fault campaign (round four): a private copy of a pack to damage, and outcomes that may only be a
one-line error or the right bytes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fastdata.cli import main


@pytest.fixture(scope="session")
def lmdb_packed(image_folder, tmp_path_factory) -> Path:
    """``image_folder`` packed as LMDB, 5 samples a shard: ``.loc`` sidecars, and a partly re-coded shard (its PNG and
    grayscale files kept as they are) so ``transcoded.bits`` is written."""
    from fastdata.packing.packer import pack

    out = tmp_path_factory.mktemp("faults_lmdb")
    pack(image_folder.root, out, format="lmdb", samples_per_shard=5, workers=0, progress=False)
    return out


@pytest.fixture
def lmdb_pack(lmdb_packed, tmp_path) -> Path:
    """A private copy of ``lmdb_packed`` to damage."""
    copy = tmp_path / "pack"
    shutil.copytree(lmdb_packed, copy)
    return copy


def cli(capsys, *argv: str) -> tuple[int, str]:
    """``fastdata ARGV`` in this process: its exit status and everything it printed (no traceback may appear)."""
    code = main(list(argv))
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "Traceback" not in text, text
    return code, text
