#!/usr/bin/env python
"""Threads in one process against worker processes: images/s, time to first batch and summed PSS, N = 1..16.

An ImageNet-like folder (made if missing) is packed as TFRecord with pack's defaults (JPEGs re-coded with restart
intervals; ``--keep-bytes`` stores the originals). Then, for each N in ``--parallel``, loaders of the same dataset
(``RandomResizedCrop(224)`` + a flip at decode time, ``--resample`` its resample, batch 256, ``fast_collate`` uint8,
or ``--float``: ``NormalizeCollate(hflip_p=0.5)``) read full passes:

- ``thread-N``: ``DataLoaderX(worker_mode="thread", num_workers=N)``: N loader threads in the training process;
- ``fork-N`` / ``forkserver-N``: ``num_workers=N`` worker processes started by that context (persistent workers);
- ``inline-N`` (``--inline``): the older path, ``ShardDataset(decode_threads=N)`` with ``num_workers=0``.

Each measurement runs in a fresh spawned process, on a warm page cache (the packed files are read just before it):
the time from ``iter()`` to the first batch of the first pass (workers started, torch imported in them), then
``--passes`` timed passes after it; images/s is the last pass's, and CPU is the time the process and its workers
spent per image in that pass (equal per-image CPU with both cores busy: a tie is the machine's, not the mode's).
PSS: the peak over the whole measurement of the process and all its children, summed (psutil, every 0.1 s).
The loaders alternate, ``--repeats`` rounds; the table gives medians (range for images/s) and each mode's ratios to
``fork-N``. N above the usable CPUs still runs (memory is the question there; its images/s is oversubscribed: *).

Usage::

    python bench/loaders.py threads                                  # 1,000 images, N = 1,2,4,8,16: ~10 min (2 cores)
    python bench/loaders.py threads --images 3000 --parallel 2 --repeats 5 --modes thread,fork
    python bench/loaders.py threads --images 200 --parallel 1,2 --repeats 1 --passes 1   # a smoke test, seconds
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from imagenet_like import make_images  # noqa: E402 (a neighbour in bench/_lib, on sys.path)

from fastdata.bench.measure import MemorySampler, run_isolated, set_page_cache  # noqa: E402
from fastdata.datasets.shard_dataset import ShardDataset  # noqa: E402
from fastdata.loader.collate import NormalizeCollate, fast_collate  # noqa: E402
from fastdata.loader.dataloader import DataLoaderX  # noqa: E402
from fastdata.packing.packer import pack  # noqa: E402
from fastdata.transforms import DecodeCompose, RandomHorizontalFlip, RandomResizedCrop  # noqa: E402

MODES = ("thread", "fork", "forkserver", "inline")


def _prepare(data_dir: Path, images: int, keep_bytes: bool, folder: Path | None = None) -> Path:
    """Pack ``folder`` (default: the ImageNet-like set of ``images``, made if missing) once, as TFRecord."""
    if folder is None:
        folder = data_dir / f"imagenet-like-{images}"
        if not (folder.is_dir() and any(folder.iterdir())):
            make_images(folder, images, "imagenet", min(100, images))
    packed = data_dir / f"{folder.name}-{'keep-bytes' if keep_bytes else 'default'}-tfrecord"
    if not (packed / "manifest.json").is_file():
        pack(folder, packed, format="tfrecord", progress=False, overwrite=True, keep_bytes=keep_bytes)
    return packed


def _relative(value: object) -> object:
    """A path inside the repository as a relative one (results files are committed); anything else as it is."""
    if isinstance(value, Path) and value.resolve().is_relative_to(ROOT):
        return str(value.resolve().relative_to(ROOT))
    return value


def _loader(root: Path, mode: str, n: int, batch: int, size: int, normalize: bool, resample: str) -> DataLoaderX:
    # uint8: crop + flip at decode time; float: the flip is NormalizeCollate's
    crop = RandomResizedCrop(size, resample=resample)
    transform = crop if normalize else DecodeCompose([crop, RandomHorizontalFlip()])
    dataset = ShardDataset(root, transform=transform, decode_threads=n if mode == "inline" else 1)
    collate = NormalizeCollate(hflip_p=0.5) if normalize else fast_collate
    if mode == "thread":
        return DataLoaderX(dataset, batch, shuffle=True, num_workers=n, collate_fn=collate, worker_mode="thread")
    if mode == "inline":
        return DataLoaderX(dataset, batch, shuffle=True, num_workers=0, collate_fn=collate)
    return DataLoaderX(
        dataset,
        batch,
        shuffle=True,
        num_workers=n,
        collate_fn=collate,
        persistent_workers=True,
        multiprocessing_context=mode,
    )


def _tree_cpu_s() -> float:
    """CPU seconds (user + system) of this process and its live children so far."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def _measure(root: Path, mode: str, n: int, batch: int, size: int, normalize: bool, resample: str, passes: int) -> dict:
    """In a fresh process: first-batch time, then the last of ``passes`` passes' images/s and the CPU time it took
    per image (the process and its workers: the sampler's own thread included), and peak PSS."""
    with MemorySampler(interval=0.1) as memory:
        start = time.perf_counter()
        loader = _loader(root, mode, n, batch, size, normalize, resample)
        it = iter(loader)
        next(it)
        first = time.perf_counter() - start
        for _ in it:  # the rest of the first pass (start-up) is not timed
            pass
        rate = cpu_ms = 0.0
        for _ in range(passes):
            start, cpu, count = time.perf_counter(), _tree_cpu_s(), 0
            for images, _ in loader:
                count += images.shape[0]
            rate = count / (time.perf_counter() - start)
            cpu_ms = (_tree_cpu_s() - cpu) / count * 1e3
    return {"images_per_s": rate, "cpu_ms_per_image": cpu_ms, "first_batch_s": first, "peak_pss_mb": memory.peak_pss_mb}


def _row(n: int, mode: str, runs: list[dict], base: list[dict] | None, usable: int) -> str:
    rates = [r["images_per_s"] for r in runs]
    rate, first = statistics.median(rates), statistics.median(r["first_batch_s"] for r in runs)
    pss = max((r["peak_pss_mb"] or 0.0) for r in runs)
    cpu = statistics.median(r.get("cpu_ms_per_image", float("nan")) for r in runs)
    text = (
        f"{n:>3}{'*' if n > usable else ' '} {mode:<11} {rate:>7.0f} ({min(rates):>5.0f}-{max(rates):>5.0f}) "
        f"{cpu:>6.2f} {first:>7.2f} {pss:>8.0f}"
    )
    if base:
        base_rate = statistics.median(r["images_per_s"] for r in base)
        base_pss = max((r["peak_pss_mb"] or 0.0) for r in base)
        text += f" {rate / base_rate:>8.2f} {pss / base_pss if base_pss else float('nan'):>7.2f}"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data")
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument(
        "--data",
        type=Path,
        help="an image folder to use instead of the ImageNet-like set (e.g. tools/make_real_photos.py)",
    )
    parser.add_argument("--parallel", default="1,2,4,8,16", help="comma-separated N (threads or worker processes)")
    parser.add_argument("--modes", default="thread,fork,forkserver", help=f"comma-separated, of {','.join(MODES)}")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--passes", type=int, default=1, help="timed passes after the first (start-up) pass")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--float", action="store_true", help="NormalizeCollate(hflip_p=0.5) float batches")
    parser.add_argument(
        "--resample",
        default=RandomResizedCrop(1).resample,
        help="the crop's resample (default: RandomResizedCrop's; fastdata bench pins 'fast')",
    )
    parser.add_argument("--keep-bytes", action="store_true", help="pack the source JPEGs unchanged")
    parser.add_argument("--json", type=Path, help="write every run here")
    args = parser.parse_args(argv)
    modes = args.modes.split(",")
    if not set(modes) <= set(MODES):
        parser.error(f"--modes must be of {MODES}, got {args.modes!r}")
    root = _prepare(args.data_dir, args.images, args.keep_bytes, args.data)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    counts = [int(v) for v in args.parallel.split(",")]
    runs: dict[str, list[dict]] = {f"{mode}-{n}": [] for n in counts for mode in modes}
    packed_files = sorted(p for p in root.rglob("*") if p.is_file())
    for _ in range(args.repeats):
        for name in runs:
            mode, n = name.rsplit("-", 1)
            set_page_cache(packed_files, warm=True)  # unread pages leave the cache in about 30 s
            runs[name].append(
                run_isolated(
                    _measure, root, mode, int(n), args.batch_size, args.size, args.float, args.resample, args.passes
                )
            )
    output = "NormalizeCollate float" if args.float else "uint8"
    print(
        f"{args.data or f'{args.images} ImageNet-like images'} "
        f"({'keep-bytes' if args.keep_bytes else 'default'} pack, TFRecord), "
        f"RandomResizedCrop({args.size}, resample={args.resample!r}), batch {args.batch_size}, {output}, "
        f"median of {args.repeats} rounds; "
        f"{usable} usable CPUs"
    )
    print(
        f"{'N':>4} {'mode':<11} {'img/s (range)':>21} {'cpu ms':>6} {'first s':>7} {'PSS MB':>8} "
        f"{'img/s/fork':>8} {'PSS/fork':>7}"
    )
    for n in counts:
        base = runs.get(f"fork-{n}")
        for mode in modes:
            print(_row(n, mode, runs[f"{mode}-{n}"], base if mode != "fork" else None, usable))
    print(
        "cpu ms: CPU time of the process and its workers per image in the timed pass; first s: iter() of a new "
        "loader to its first batch; PSS: peak of the process and its workers, summed"
    )
    if args.json:
        from fastdata.bench.machine import machine_info

        config = {k: _relative(v) for k, v in vars(args).items()}  # the repository's own paths, not this clone's
        result = {"machine": machine_info(), "config": config, "runs": runs}  # the machine and the day
        args.json.write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
