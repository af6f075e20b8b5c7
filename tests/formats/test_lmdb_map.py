"""LMDB shards are written with a map that grows with the data, so packing works under `ulimit -v`."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import lmdb
import numpy as np
import pytest

from fastdata.formats.example import ImageRecord
from fastdata.formats.lmdb_shards import META_KEY, LMDBFormat, LMDBShardWriter, sample_key

ROOT = Path(__file__).resolve().parents[2]
ADDRESS_SPACE_LIMIT = 4 << 30  # importing torch and fastdata reserves about 0.95 GiB of address space (measured)


@pytest.mark.parametrize("sizes", [[3_000_000] * 12, [100, 2_000, 40_000] * 400, [50_000_000]])
def test_map_grows_past_its_initial_size_and_keeps_every_record(tmp_path, sizes):
    rng = np.random.default_rng(len(sizes))
    images = [rng.integers(0, 256, n, np.uint8).tobytes() for n in sizes]
    writer = LMDBShardWriter(tmp_path / "shard-00000.lmdb")
    for j, image in enumerate(images):
        writer.write(ImageRecord(image, j % 7, filename=f"{j}.jpg", image_format="JPEG", height=1, width=1))
    info = writer.close(tmp_path)
    assert info.num_samples == len(images)
    assert LMDBFormat().verify(tmp_path, info) == []
    # py-lmdb itself, not fastdata's page walk, reads the file back.
    env = lmdb.open(str(tmp_path / info.path), subdir=False, readonly=True, lock=False)
    with env.begin() as txn:
        assert all(txn.get(sample_key(j)) == image for j, image in enumerate(images))
        assert json.loads(txn.get(META_KEY))["labels"] == [j % 7 for j in range(len(images))]
    env.close()
    # The map size the writer left in the file (map_size=0 reads it back) follows the data, not 1 TiB.
    written = subprocess.run(
        [
            sys.executable,
            "-c",
            "import lmdb, sys; print(lmdb.open(sys.argv[1], subdir=False, readonly=True, "
            "lock=False, map_size=0).info()['map_size'])",
            str(tmp_path / info.path),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert int(written.stdout) <= max(64 << 20, 4 * sum(sizes))


_SCRIPT = textwrap.dedent("""
    import sys
    from fastdata.datasets.shard_dataset import ShardDataset
    from fastdata.packing.check import verify
    from fastdata.packing.packer import pack

    manifest = pack(sys.argv[1], sys.argv[2], format="lmdb", workers=0, progress=False, samples_per_shard=5)
    dataset = ShardDataset(sys.argv[2])
    assert [dataset[i][0].ndim for i in range(len(dataset))] == [3] * len(dataset)
    assert verify(sys.argv[2]).ok
    print("packed", manifest.num_samples)
""")


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))


def test_pack_lmdb_under_an_address_space_limit(image_folder, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(image_folder.root), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        preexec_fn=_limit_address_space,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"packed {len(image_folder.good)}" in result.stdout
