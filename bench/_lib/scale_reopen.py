"""What re-opening an LMDB shard costs, with its ``.loc`` sidecar and without (the walk of its B-tree + ``__meta__``).

Two measurements on one core, both paths alternating in one run, over tiny JPEGs (so the open, not the decode,
shows):

1. re-open: ``LMDBShardReader`` of a 1,000-record shard opened and closed, through the sidecar and through the walk
   (what every pack without sidecars, and every pack before them, does), median of rounds;
2. a full-shuffle pass: ``ds[i]`` over every sample of a pack of 16 shards of 500 records in a random order with
   ``max_open_shards=4`` (so about three reads in four re-open a shard), images/s, with the manifest naming the
   sidecars and with a copy whose manifest names none.

Usage: ``python bench/scale.py reopen [--rounds 3] [--json out.json]`` (about 30 s).
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import fastdata
from fastdata.formats.lmdb_shards import LMDBShardReader
from fastdata.formats.manifest import Manifest


def tiny_jpegs(count: int, seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(buf, "JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def write_pack(out: Path, images: list[bytes], per_shard: int) -> Manifest:
    samples = ((data, k % 10) for k, data in enumerate(images))
    return fastdata.write(
        samples,
        out,
        format="lmdb",
        classes=[str(c) for c in range(10)],
        samples_per_shard=per_shard,
        transcode=False,
        workers=0,
        progress=False,
    )


def without_sidecars(src: Path, dst: Path) -> None:
    """A copy of the pack as packs before sidecars were (no ``.loc``, no index fields in the manifest)."""
    shutil.copytree(src, dst)
    data = json.loads((dst / "manifest.json").read_text())
    for shard in data["shards"]:
        (dst / shard.pop("index")).unlink()
        shard.pop("index_nbytes"), shard.pop("index_crc32c")
    (dst / "manifest.json").write_text(json.dumps(data))


def reopen_ms(root: Path, sidecar: bool, opens: int) -> float:
    info = Manifest.load(root).shards[0]
    index = root / info.index if sidecar else None
    start = time.perf_counter()
    for _ in range(opens):
        LMDBShardReader(root / info.path, expected=info, index=index).close()
    return (time.perf_counter() - start) / opens * 1e3


def shuffle_pass(root: Path, seed: int) -> float:
    ds = fastdata.ShardDataset(root, max_open_shards=4)
    order = np.random.default_rng(seed).permutation(len(ds)).tolist()
    start = time.perf_counter()
    for i in order:
        ds[i]
    elapsed = time.perf_counter() - start
    ds.close()
    return len(order) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write_pack(tmp / "one", tiny_jpegs(1000), 1000)
        write_pack(tmp / "pack", tiny_jpegs(8000, seed=1), 500)
        without_sidecars(tmp / "one", tmp / "one-walk")
        without_sidecars(tmp / "pack", tmp / "pack-walk")
        walk, side, walk_pass, side_pass = [], [], [], []
        for r in range(args.rounds):
            walk.append(reopen_ms(tmp / "one-walk", False, 100))
            side.append(reopen_ms(tmp / "one", True, 1000))
            walk_pass.append(shuffle_pass(tmp / "pack-walk", r))
            side_pass.append(shuffle_pass(tmp / "pack", r))
    result = {
        "reopen_ms_walk": statistics.median(walk),
        "reopen_ms_sidecar": statistics.median(side),
        "shuffle_images_per_s_walk": statistics.median(walk_pass),
        "shuffle_images_per_s_sidecar": statistics.median(side_pass),
    }
    print(
        f"re-open of a 1,000-record LMDB shard: walk {result['reopen_ms_walk']:.3f} ms, sidecar "
        f"{result['reopen_ms_sidecar']:.3f} ms ({result['reopen_ms_walk'] / result['reopen_ms_sidecar']:.1f}x)"
    )
    print(
        f"full shuffle, 16 shards x 500, max_open_shards=4: walk {result['shuffle_images_per_s_walk']:.0f} "
        f"images/s, sidecar {result['shuffle_images_per_s_sidecar']:.0f} images/s "
        f"({result['shuffle_images_per_s_sidecar'] / result['shuffle_images_per_s_walk']:.2f}x)"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
