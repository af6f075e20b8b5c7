#!/usr/bin/env python
"""What opening a pack costs at scale: open time, pickled size, memory added by the open, reader memory.

Writes synthetic packs straight through the format's shard writers (no image folder, no pack pipeline: a few
distinct tiny JPEGs repeated; labels cycling through 10 classes) into ``--cache`` (kept between runs), then, in a
fresh process per format and measurement round:

- ``open s``: wall time of ``ShardDataset(root)`` (warm page cache: the files were just written or read);
- ``pickle B``: ``len(pickle.dumps(dataset))`` (what every spawn/forkserver worker receives);
- ``open MB``: RSS added by the open (``VmRSS`` after minus before, after the imports);
- ``reader B/rec``: for ``--read-shards K``, Python-heap bytes (tracemalloc) still held after reading every record of
  K shards, per record read (the per-shard readers and indexes a worker keeps while those shards are open);
- ``first batch s`` and ``worker PSS MB``: ``DataLoaderX(ShardDataset(root, transform=RandomResizedCrop(32)),
  batch_size=256, shuffle=True, num_workers=2, multiprocessing_context=--context)``: time from ``iter()`` to the
  first batch, and the mean PSS of a worker after ``--batches`` batches (random samples: every shard is opened).

Usage::

    python bench/scale.py open [--shards 1000] [--per-shard 1000] [--formats tfrecord lmdb] [--read-shards 20]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

MEASURE = textwrap.dedent("""
    import json, pickle, sys, time, tracemalloc
    import numpy as np
    from fastdata.datasets.shard_dataset import ShardDataset

    def rss_kb():
        return int(next(line for line in open("/proc/self/status") if line.startswith("VmRSS:")).split()[1])

    root, read_shards = sys.argv[1], int(sys.argv[2])
    base = rss_kb()
    t0 = time.perf_counter()
    ds = ShardDataset(root)
    opened = time.perf_counter() - t0
    added = (rss_kb() - base) / 1024
    size = len(pickle.dumps(ds))
    per_record = None
    if read_shards:
        offsets = ds.shard_offsets
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        records = 0
        for shard in range(min(read_shards, len(offsets) - 1)):
            for i in range(int(offsets[shard]), int(offsets[shard + 1])):
                ds.read(i)
                records += 1
        per_record = (tracemalloc.get_traced_memory()[0] - before) / max(records, 1)
        tracemalloc.stop()
    first = pss = None
    batches, context = int(sys.argv[3]), sys.argv[4]
    if batches:
        import psutil
        from fastdata.loader.collate import fast_collate
        from fastdata.loader.dataloader import DataLoaderX
        from fastdata.transforms import RandomResizedCrop

        loader = DataLoaderX(ShardDataset(root, transform=RandomResizedCrop(32)), batch_size=256, shuffle=True,
                             num_workers=2, collate_fn=fast_collate, multiprocessing_context=context, pin_memory=False)
        t0 = time.perf_counter()
        it = iter(loader)
        next(it)
        first = time.perf_counter() - t0
        for _ in range(batches - 1):
            next(it)
        workers = psutil.Process().children(recursive=True)
        pss = sum(w.memory_full_info().pss for w in workers) / max(len(workers), 1) / 2**20
        del it
    print(json.dumps({"open_s": opened, "pickle_bytes": size, "open_rss_mb": added,
                      "reader_bytes_per_record": per_record, "samples": len(ds), "first_batch_s": first,
                      "worker_pss_mb": pss}))
""")


def build(out: Path, fmt: str, shards: int, per_shard: int) -> Path:
    """A pack of ``shards`` x ``per_shard`` tiny JPEG records in ``out`` (reused when its manifest is there)."""
    from fastdata.formats import get_format
    from fastdata.formats.example import ImageRecord
    from fastdata.formats.files import crc32c_hex
    from fastdata.formats.manifest import Manifest
    from fastdata.formats.targets import encode_targets

    if (out / "manifest.json").is_file():
        return out
    import io

    import numpy as np
    from PIL import Image

    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    jpegs = []
    for _ in range(7):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(buf, format="JPEG", quality=80)
        jpegs.append(buf.getvalue())
    storage = get_format(fmt)
    infos, labels = [], []
    for k in range(shards):
        writer = storage.writer(out / f"shard-{k:05d}{storage.suffix}")
        for j in range(per_shard):
            n = k * per_shard + j
            writer.write(ImageRecord(jpegs[n % 7], n % 10, f"c{n % 10}", f"c{n % 10}/{n}.jpg", "JPEG", 8, 8))
            labels.append(n % 10)
        infos.append(writer.close(out))
    data = encode_targets(np.asarray(labels, dtype=np.int64))
    (out / "targets.npy").write_bytes(data)
    Manifest(
        format=fmt,
        classes=[f"c{c}" for c in range(10)],
        shards=infos,
        targets="targets.npy",
        targets_nbytes=len(data),
        targets_crc32c=crc32c_hex(data),
    ).save(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=1000)
    parser.add_argument("--per-shard", type=int, default=1000)
    parser.add_argument("--formats", nargs="+", default=["tfrecord", "lmdb"], choices=["tfrecord", "lmdb"])
    parser.add_argument(
        "--read-shards", type=int, default=20, help="shards read to the end for reader memory (0: none)"
    )
    parser.add_argument("--batches", type=int, default=0, help="loader batches for first-batch time and PSS (0: none)")
    parser.add_argument(
        "--context", default="fork", choices=["fork", "spawn", "forkserver"], help="workers' start method"
    )
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes per format (the median is shown)")
    parser.add_argument("--cache", type=Path, default=ROOT / "data" / "open-scale", help="where the packs are kept")
    parser.add_argument("--json", type=Path, default=None, help="write the results here too")
    args = parser.parse_args(argv)
    results = {}
    for fmt in args.formats:
        t0 = time.perf_counter()
        root = build(args.cache / f"{fmt}-{args.shards}x{args.per_shard}", fmt, args.shards, args.per_shard)
        built = time.perf_counter() - t0
        runs = []
        for _ in range(args.rounds):
            done = subprocess.run(
                [sys.executable, "-c", MEASURE, str(root), str(args.read_shards), str(args.batches), args.context],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=True,
            )
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        median = {k: sorted(r[k] for r in runs)[len(runs) // 2] if runs[0][k] is not None else None for k in runs[0]}
        results[fmt] = median
        print(
            f"{fmt:9s} {median['samples']:>9d} samples, {args.shards} shards (built in {built:.0f} s): "
            f"open {median['open_s']:.2f} s, pickle {median['pickle_bytes']:,} B, "
            f"open RSS +{median['open_rss_mb']:.1f} MB"
            + (f", reader {median['reader_bytes_per_record']:.0f} B/record" if args.read_shards else "")
            + (
                f", first batch {median['first_batch_s']:.2f} s, worker PSS {median['worker_pss_mb']:.0f} MB after "
                f"{args.batches} batches ({args.context})"
                if args.batches
                else ""
            )
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
