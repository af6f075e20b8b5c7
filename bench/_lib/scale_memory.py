#!/usr/bin/env python
"""Memory growth of DataLoaderX + ShardDataset over many passes (the copy-on-read check).

Loads a packed dataset (default: the benchmark's TFRecord cache of ``data/imagenet-like-10k``, packed
if missing) through ``DataLoaderX(ShardDataset(root, transform=RandomResizedCrop(224)), batch_size=256,
num_workers=2, persistent_workers=True, collate_fn=fast_collate)`` for 10 passes, samples RSS, PSS
and USS (psutil ``memory_full_info``) of the main process and of each worker at the end of every
pass (after ``gc.collect()`` in the main process), prints a table and the growth after the first pass (last pass vs pass
1), and says PASS when every process's PSS and the total PSS grew less than 5 % (FAIL otherwise; exit status 1). The
worst later pass and a least-squares trend (MB per pass) are printed too: PSS moves between the main
process and the workers with the shared-memory batches in flight, so single samples jitter.

Usage::

    python bench/scale.py memory [--root PACKED] [--passes 10] [--workers 2] [--limit-pct 5]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

MB = 2**20


def _sample(proc) -> dict[str, float]:
    info = proc.memory_full_info()
    return {"rss": info.rss / MB, "pss": getattr(info, "pss", info.rss) / MB, "uss": info.uss / MB}


def _packed_root(args: argparse.Namespace) -> Path:
    if args.root is not None:
        return args.root
    from fastdata.bench.pack_cache import default_cache, prepare_cache

    return prepare_cache(args.data, default_cache(args.data), formats=(args.format,))[args.format]


def _growth(series: list[float]) -> tuple[float, float, float]:
    """(last pass vs pass 1 in %, worst later pass vs pass 1 in %, least-squares slope in MB per pass)."""
    base = series[0]
    n = len(series)
    mean_x, mean_y = (n - 1) / 2, sum(series) / n
    slope = sum((i - mean_x) * (v - mean_y) for i, v in enumerate(series)) / sum((i - mean_x) ** 2 for i in range(n))
    return 100 * (series[-1] - base) / base, 100 * (max(series[1:]) - base) / base, slope


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=None, help="packed dataset (default: the benchmark cache)")
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "imagenet-like-10k", help="image folder to pack")
    parser.add_argument("--format", default="tfrecord", choices=["tfrecord", "lmdb"])
    parser.add_argument("--passes", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--limit-pct", type=float, default=5.0, help="allowed growth after pass 1 (default 5)")
    args = parser.parse_args(argv)
    if args.passes < 2 or args.workers < 1:
        parser.error("need --passes >= 2 and --workers >= 1 to measure growth in workers")

    import psutil

    from fastdata.datasets.shard_dataset import ShardDataset
    from fastdata.loader.collate import fast_collate
    from fastdata.loader.dataloader import DataLoaderX
    from fastdata.transforms import RandomResizedCrop

    root = _packed_root(args)
    dataset = ShardDataset(root, transform=RandomResizedCrop(224))
    loader = DataLoaderX(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        persistent_workers=True,
        collate_fn=fast_collate,
    )
    main_proc = psutil.Process()
    rows, worker_pids = [], None
    print(f"{len(dataset)} images from {root}, batch {args.batch_size}, {args.workers} persistent workers")
    for epoch in range(1, args.passes + 1):
        start, images = time.perf_counter(), 0
        for batch_images, _ in loader:
            images += batch_images.shape[0]
        del batch_images
        gc.collect()  # batches caught in reference cycles are garbage, not growth: free them before sampling
        workers = sorted(main_proc.children(recursive=True), key=lambda p: p.pid)
        pids = [p.pid for p in workers]
        if worker_pids is None:
            worker_pids = pids
        elif pids != worker_pids:
            print(f"note: worker pids changed after pass {epoch}: {worker_pids} -> {pids}")
        rows.append(
            {
                "pass": epoch,
                "main": _sample(main_proc),
                "workers": [_sample(p) for p in workers],
                "seconds": time.perf_counter() - start,
                "images": images,
            }
        )
    _shutdown(loader)
    return _report(rows, args.limit_pct)


def _shutdown(loader) -> None:
    it = getattr(loader, "_iterator", None)
    if it is not None and hasattr(it, "_shutdown_workers"):
        it._shutdown_workers()


def _report(rows: list[dict], limit: float) -> int:
    n_workers = len(rows[0]["workers"])
    head = f"{'pass':>4} {'img/s':>7} {'main RSS':>9} {'main PSS':>9} {'main USS':>9}"
    head += "".join(f" {f'w{i} RSS':>8} {f'w{i} PSS':>8} {f'w{i} USS':>8}" for i in range(n_workers))
    head += f" {'total PSS':>10}   (MB)"
    print(head)
    totals = []
    for row in rows:
        total = row["main"]["pss"] + sum(w["pss"] for w in row["workers"])
        totals.append(total)
        line = f"{row['pass']:>4} {row['images'] / row['seconds']:7.0f} "
        line += f"{row['main']['rss']:9.1f} {row['main']['pss']:9.1f} {row['main']['uss']:9.1f}"
        line += "".join(f" {w['rss']:8.1f} {w['pss']:8.1f} {w['uss']:8.1f}" for w in row["workers"])
        print(line + f" {total:10.1f}")
    series = {"main PSS": [r["main"]["pss"] for r in rows], "main USS": [r["main"]["uss"] for r in rows]}
    for i in range(n_workers):
        series[f"worker {i} PSS"] = [r["workers"][i]["pss"] for r in rows if len(r["workers"]) > i]
        series[f"worker {i} USS"] = [r["workers"][i]["uss"] for r in rows if len(r["workers"]) > i]
    series["total PSS"] = totals
    print(
        f"growth after pass 1 (last pass vs pass 1; limit {limit:.1f}% on each PSS and the total PSS),"
        " worst later pass and trend:"
    )
    ok = True
    for name, values in series.items():
        final, worst, slope = _growth(values)
        judged = "PSS" in name
        ok = ok and (final < limit or not judged)
        print(
            f"  {name:<14} {values[0]:8.1f} -> {values[-1]:8.1f} MB  {final:+7.2f}%  (worst {worst:+6.2f}%, "
            f"trend {slope:+.2f} MB/pass)" + ("" if judged else "  informational")
        )
    verdict = "stays under" if ok else "exceeds"
    print("PASS" if ok else "FAIL", f"- memory growth after the first pass {verdict} {limit:.1f}%")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
