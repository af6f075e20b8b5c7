#!/usr/bin/env python
"""What a pass boundary of DistributedSampler costs at 10^8 samples: ``shuffle=True`` against ``shuffle="index"``.

The sampler alone (the dataset is a sized object with ``__len__``, no data). ``iter()`` is lazy in every
order; the work of a pass boundary happens at the first ``next()`` (``shuffle=True`` draws
``torch.randperm(N)`` there and takes this rank's share), so the table reports both:

- ``iter()``: the call alone; ``first index``: ``iter()`` plus the first ``next()``, the pass-boundary cost, at the
  process's first pass and (``later``) at a later one;
- ``tracemalloc peak``: the peak of Python-traced memory (numpy arrays, lists) from ``iter()`` to the first
  index (torch's own allocations, e.g. ``randperm``'s tensor, are not traced: see the RSS columns);
- ``RSS +``: the process's resident memory after the first index, less before ``iter()``; ``peak RSS +``:
  the rise of its high-water mark (``ru_maxrss``);
- ``first 1M``: seconds from ``iter()`` to the millionth index, and the indices per second that makes.

Each order runs in a fresh process, so one order's memory never counts against another's.

Usage::

    python bench/shuffle.py pass-boundary [--n 100000000] [--world 8] [--shuffle True index index-blocks] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fastdata.sampler import DistributedSampler  # noqa: E402

SAMPLES_PER_SHARD = 2400  # for "index-blocks": about 256 MiB of ImageNet-sized JPEGs per shard


class Sized:
    """``len()`` of ``n`` and, for the blocks orders, a shard layout; holds no data."""

    def __init__(self, n: int) -> None:
        import numpy as np

        self.n = n
        self.shard_offsets = np.append(np.arange(0, n, SAMPLES_PER_SHARD, dtype=np.int64), n)

    def __len__(self) -> int:
        return self.n


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def _max_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure(n: int, world: int, shuffle: bool | str) -> dict:
    """One order, in this process: times and memory of a pass boundary and of the first million indices."""
    sampler = DistributedSampler(Sized(n), num_replicas=world, rank=0, shuffle=shuffle, seed=0)
    rss, max_rss = _rss(), _max_rss()  # first, so the high-water mark is this pass's
    start = time.perf_counter()
    it = iter(sampler)
    t_iter = time.perf_counter() - start
    next(it)
    t_first = time.perf_counter() - start
    rss_delta, max_rss_delta = _rss() - rss, _max_rss() - max_rss
    count = min(10**6, len(sampler)) - 1
    for _ in range(count):
        next(it)
    t_million = time.perf_counter() - start
    it.close()
    del it
    sampler.set_epoch(1)  # a new pass: nothing kept from the one above
    tracemalloc.start()  # memory traced over iter() + first next() (tracing slows Python: not timed)
    it = iter(sampler)
    next(it)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    it.close()
    del it
    sampler.set_epoch(2)  # a later pass boundary, in a process that has drawn passes before
    start = time.perf_counter()
    next(iter(sampler))
    t_again = time.perf_counter() - start
    return {
        "shuffle": shuffle,
        "n": n,
        "world": world,
        "iter_s": t_iter,
        "first_index_s": t_first,
        "later_first_index_s": t_again,
        "tracemalloc_peak_bytes": peak,
        "rss_delta_bytes": rss_delta,
        "peak_rss_delta_bytes": max_rss_delta,
        "first_1m_s": t_million,
        "first_1m_per_s": (count + 1) / t_million,
    }


def _parse_shuffle(text: str) -> bool | str:
    return {"True": True, "False": False}.get(text, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10**8)
    parser.add_argument("--world", type=int, default=8, help="ranks; rank 0 is measured")
    parser.add_argument("--shuffle", nargs="+", default=["True", "index", "index-blocks"])
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # run one order here, print JSON
    args = parser.parse_args(argv)
    if args.one is not None:
        print(json.dumps(measure(args.n, args.world, _parse_shuffle(args.one))))
        return 0
    rows = []
    for shuffle in args.shuffle:
        out = subprocess.run(
            [sys.executable, __file__, "--n", str(args.n), "--world", str(args.world), "--one", shuffle],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        rows.append(json.loads(out.splitlines()[-1]))
    mb = 2**20
    print(f"DistributedSampler at N = {args.n:,}, rank 0 of {args.world}")
    print(
        f"{'shuffle':>14} | {'iter()':>8} | {'first index':>11} | {'later':>9} | {'tracemalloc peak':>16} | "
        f"{'RSS +':>9} | {'peak RSS +':>10} | {'first 1M':>8} | {'indices/s':>10}"
    )
    for r in rows:
        print(
            f"{r['shuffle']!r:>14} | {r['iter_s'] * 1e3:6.3f}ms | {r['first_index_s'] * 1e3:9.2f}ms | "
            f"{r['later_first_index_s'] * 1e3:7.2f}ms | "
            f"{r['tracemalloc_peak_bytes'] / mb:13.2f} MB | {r['rss_delta_bytes'] / mb:6.1f} MB | "
            f"{r['peak_rss_delta_bytes'] / mb:7.1f} MB | {r['first_1m_s']:7.3f}s | {r['first_1m_per_s']:10,.0f}"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
