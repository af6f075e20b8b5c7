#!/usr/bin/env python
"""The measurements of ``bench/scale.py sweep``, each run in a fresh process so one never counts against another.

``python bench/_lib/scale_probe.py KIND ROOT [...]`` prints one JSON line:

- ``open``: ``ShardDataset(ROOT)``'s seconds and the RSS it adds, its pickled size (what each DataLoader worker
  receives under spawn/forkserver), and the seconds from ``iter(loader)`` to the first batch (2 workers);
- ``pass --context fork|forkserver [--samples K]``: one shuffled pass with 2 workers (``persistent_workers``, so
  they are still there to measure), whole or its first ``K`` samples (drawn from the whole set by the shuffle, so
  every shard is opened once ``K`` is a few dozen times the shard count): images/s, each worker's PSS
  (``/proc/PID/smaps_rollup``) and open files (``/proc/PID/fd``) at the end;
- ``sampler --shuffle True|index``: ``DistributedSampler``'s ``iter()`` and first-index seconds, its
  tracemalloc peak and RSS rise, and the pickled size of a ``DataLoaderX.state_dict()`` taken after one batch;
- ``verify``: ``fastdata.verify(ROOT, decode=False)``'s seconds (shards in a pool of all CPUs) and the rise of
  the calling process's peak RSS (its workers are not counted).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pickle
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fastdata import DataLoaderX, DistributedSampler, ShardDataset, fast_collate, verify  # noqa: E402
from fastdata.transforms import RandomResizedCrop  # noqa: E402

BATCH = 256
WORKERS = 2


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def peak_reset() -> int:
    """Forget this process's RSS high-water mark (Linux ``clear_refs``); return its RSS now."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return rss()


def peak_rss() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


def dataset(root: str) -> ShardDataset:
    return ShardDataset(root, transform=RandomResizedCrop(16))


def probe_open(root: str) -> dict:
    before = rss()
    start = time.perf_counter()
    ds = dataset(root)
    open_s = time.perf_counter() - start
    added = rss() - before
    pickled = len(pickle.dumps(ds))
    loader = DataLoaderX(ds, batch_size=BATCH, num_workers=WORKERS, collate_fn=fast_collate)
    start = time.perf_counter()
    it = iter(loader)
    next(it)
    first = time.perf_counter() - start
    del it, loader
    return {
        "open_s": open_s,
        "open_rss_bytes": added,
        "pickled_bytes": pickled,
        "first_batch_s": first,
        "samples": len(ds),
    }


def record_pid(folder: str, worker_id: int) -> None:
    """``worker_init_fn``: leave the worker's pid where the parent finds it (under forkserver workers are not
    the parent's children)."""
    Path(folder, str(os.getpid())).touch()


def _pss(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:"))


def probe_pass(root: str, context: str, samples: int = 0) -> dict:
    ds = dataset(root)
    pids = tempfile.mkdtemp(prefix="fastdata-scale-pids-")
    sampler = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True, seed=0)
    loader = DataLoaderX(
        ds,
        batch_size=BATCH,
        sampler=sampler,
        num_workers=WORKERS,
        collate_fn=fast_collate,
        persistent_workers=True,
        multiprocessing_context=context,
        worker_init_fn=functools.partial(record_pid, pids),
    )
    start = time.perf_counter()
    images = 0
    for batch in loader:
        images += len(batch[1])
        if samples and images >= samples:
            break
    seconds = time.perf_counter() - start
    workers = [int(p.name) for p in Path(pids).iterdir()]
    pss = [_pss(pid) for pid in workers]
    fds = [len(os.listdir(f"/proc/{pid}/fd")) for pid in workers]
    del loader
    for p in Path(pids).iterdir():
        p.unlink()
    os.rmdir(pids)
    return {
        "context": context,
        "pass_s": seconds,
        "images_per_s": images / seconds,
        "images": images,
        "whole_pass": images == len(ds),
        "worker_pss_bytes": pss,
        "worker_open_files": fds,
        "main_rss_bytes": rss(),
    }


def probe_sampler(root: str, shuffle: bool | str) -> dict:
    ds = ShardDataset(root)
    sampler = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=shuffle, seed=0)
    before = rss()
    start = time.perf_counter()
    it = iter(sampler)
    iter_s = time.perf_counter() - start
    next(it)
    first = time.perf_counter() - start
    added = rss() - before
    del it
    sampler.set_epoch(1)
    tracemalloc.start()
    next(iter(sampler))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    sampler.set_epoch(0)
    loader = DataLoaderX(ds, batch_size=BATCH, sampler=sampler, num_workers=0, collate_fn=lambda batch: len(batch))
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    del it
    return {
        "shuffle": shuffle,
        "iter_s": iter_s,
        "first_index_s": first,
        "rss_delta_bytes": added,
        "tracemalloc_peak_bytes": peak,
        "state_dict_bytes": len(pickle.dumps(state)),
    }


def probe_verify(root: str) -> dict:
    before = peak_reset()
    start = time.perf_counter()
    report = verify(root, decode=False, progress=False)
    return {
        "verify_s": time.perf_counter() - start,
        "verify_ok": report.ok,
        "records": report.records,
        "verify_peak_rss_delta_bytes": peak_rss() - before,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=["open", "pass", "sampler", "verify"])
    parser.add_argument("root")
    parser.add_argument("--context", default="fork", choices=["fork", "forkserver", "spawn"])
    parser.add_argument("--shuffle", default="True")
    parser.add_argument("--samples", type=int, default=0, help="pass: stop after this many samples (0: all)")
    args = parser.parse_args(argv)
    if args.kind == "open":
        result = probe_open(args.root)
    elif args.kind == "pass":
        result = probe_pass(args.root, args.context, args.samples)
    elif args.kind == "sampler":
        result = probe_sampler(args.root, {"True": True, "False": False}.get(args.shuffle, args.shuffle))
    else:
        result = probe_verify(args.root)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
