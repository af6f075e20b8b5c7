#!/usr/bin/env python
"""Pack speed per source kind, on the same images: images/s of ``fastdata pack`` from an ImageFolder tree,
a CSV list, a JSONL list, Hugging Face-style Parquet, WebDataset tars, a fastdata pack and TFRecords; then
a pack and TFRecords carrying six fields, and a CSV list and tars served over HTTP from this machine.

Each source holds the same ``--images`` JPEGs (``--side`` px, photo-like); each is packed into a fresh
TFRecord folder ``--repeats`` times with ``--workers`` processes and the best run is kept (the least
disturbed by other work on the machine). Scans are included (they are part of a pack). Prints a table
and each source's ratio to the ImageFolder source.

Usage: ``python bench/pack.py sources [--images 2000] [--side 160] [--workers 2] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fastdata.packing.packer import pack  # noqa: E402
from tests.images import encode, natural_image  # noqa: E402
from tests.packing.sources_data import (  # noqa: E402
    write_csv,
    write_hf_parquet,
    write_image_folder,
    write_jsonl,
    write_webdataset,
)
from tests.storage.servers import LoopbackServer, RangeFileHandler  # noqa: E402

FIELDS = ("caption", "count", "score", "tags", "boxes", "center")


def make_samples(count: int, side: int) -> list[tuple[bytes, int, dict]]:
    rng = np.random.default_rng(0)
    return [
        (
            encode(natural_image(rng, side, side * 4 // 3), "JPEG", quality=90),
            k % 3,
            {"caption": f"image {k}", "count": k, "score": 0.5, "tags": [k % 5], "boxes": [], "center": [1.0, 2.0]},
        )
        for k in range(count)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--side", type=int, default=160)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="fastdata-pack-sources-"))
    try:
        samples = make_samples(args.images, args.side)
        folder = write_image_folder(root / "folder", samples)
        pack(folder, root / "pack", format="lmdb", workers=args.workers, progress=False)
        pack(folder, root / "tf", format="tfrecord", workers=args.workers, progress=False)
        jsonl = write_jsonl(root / "jsonl", samples)
        pack(jsonl, root / "pack-fields", format="lmdb", workers=args.workers, progress=False, fields=FIELDS)
        pack(jsonl, root / "tf-fields", format="tfrecord", workers=args.workers, progress=False, fields=FIELDS)
        server = LoopbackServer(RangeFileHandler, directory=str(root))
        sources = {
            "imagefolder": (str(folder), {}),
            "csv list": (str(write_csv(root / "csv", samples)), {}),
            "jsonl list": (str(jsonl), {}),
            "parquet (HF)": (str(write_hf_parquet(root / "hf", samples, files=4, row_group_size=100)), {}),
            "webdataset": (write_webdataset(root / "wds", samples, shards=4), {}),
            "fastdata pack": (str(root / "pack"), {}),
            "tfrecord": (str(root / "tf" / "*.tfrecord"), {}),
            "pack + 6 fields": (str(root / "pack-fields"), {}),
            "tfrec + 6 fields": (str(root / "tf-fields" / "*.tfrecord"), {"fields": FIELDS}),
            "csv list, http": (f"{server.url}/csv/list.csv", {}),
            "tars, http": (f"{server.url}/wds/shard-{{000000..000003}}.tar", {}),
        }
        size = sum(len(d) for d, _, _ in samples) / len(samples) / 1e3
        print(
            f"{args.images} JPEGs of {args.side}x{args.side * 4 // 3} ({size:.1f} KB), {args.workers} workers, "
            f"best of {args.repeats}"
        )
        print(f"{'source':<16}{'seconds':>10}{'images/s':>12}{'vs imagefolder':>16}")
        base = None
        for name, (src, extra) in sources.items():
            best = float("inf")
            for _ in range(args.repeats):
                out = root / "out"
                shutil.rmtree(out, ignore_errors=True)
                started = time.perf_counter()
                manifest = pack(src, out, format="tfrecord", workers=args.workers, progress=False, **extra)
                best = min(best, time.perf_counter() - started)
                assert manifest.num_samples == args.images, (name, manifest.num_samples)
            rate = args.images / best
            base = base or rate
            print(f"{name:<16}{best:>10.2f}{rate:>12.0f}{rate / base:>15.2f}x")
        server.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
