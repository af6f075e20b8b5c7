#!/usr/bin/env python
"""How much of the host-to-device copy DataPrefetcher hides: a training-like loop on CUDA, same batches, same work.

Pinned uint8 batches (``--batch`` x 3 x 224 x 224) are held in memory, so the loader is never the bottleneck, and each
step runs a fixed amount of GPU work (a small convolution stack, forward and backward, in float16). Two loops, taking
turns ``--repeats`` times:

- ``plain``: ``images.to("cuda", non_blocking=True)`` on the default stream, then the work (the copy waits for the
  previous step and the step waits for the copy);
- ``prefetcher``: ``DataPrefetcher(batches, "cuda")``, which copies the next batch on its side stream while the
  current step runs.

Also timed alone with CUDA events: one batch's copy and one step's work. The copy hidden per step is
``(plain - prefetcher) / steps``; a prefetcher that hides all of it gets ``copy_ms``. Without CUDA it says so and
exits 0.

Usage::

    python bench/gpu.py prefetcher [--batch 256] [--steps 40] [--repeats 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fastdata.loader.prefetcher import DataPrefetcher  # noqa: E402


def work_model() -> torch.nn.Module:
    """A fixed amount of GPU work per step: a few convolutions, as a small network's first stages."""
    layers: list[torch.nn.Module] = [torch.nn.Conv2d(3, 32, 3, stride=2, padding=1), torch.nn.ReLU()]
    for _ in range(3):
        layers += [torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU()]
    layers += [torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10)]
    return torch.nn.Sequential(*layers).cuda().half()


def step(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor) -> None:
    """One training-like step: uint8 images (the plain loop) are scaled as the prefetcher scales them."""
    x = images.half().div_(255) if images.dtype == torch.uint8 else images
    torch.nn.functional.cross_entropy(model(x), labels).backward()


def plain(model, batches) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for images, labels in batches:
        step(model, images.to("cuda", non_blocking=True), labels.to("cuda", non_blocking=True))
    torch.cuda.synchronize()
    return time.perf_counter() - start


def prefetched(model, batches) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for images, labels in DataPrefetcher(batches, "cuda", dtype=torch.float16):
        step(model, images, labels)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def event_ms(fn, repeats: int = 10) -> float:
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        begin.record()
        fn()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="also write the result as JSON here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench/gpu.py prefetcher: no CUDA device here; nothing measured")
        return
    gen = torch.Generator().manual_seed(0)
    shape = (args.batch, 3, args.size, args.size)
    batches = []
    for _ in range(args.steps):
        images = torch.randint(0, 256, shape, dtype=torch.uint8, generator=gen).pin_memory()
        batches.append((images, torch.randint(0, 10, (args.batch,), generator=gen).pin_memory()))
    model = work_model()
    plain(model, batches[:3]), prefetched(model, batches[:3])  # warm-up: kernels, allocator, the side stream
    rounds = {"plain": [], "prefetcher": []}
    for _ in range(args.repeats):
        rounds["plain"].append(plain(model, batches))
        rounds["prefetcher"].append(prefetched(model, batches))
    images, labels = batches[0]
    on_device = images.cuda(), labels.cuda()
    result = {
        "batch": args.batch,
        "steps": args.steps,
        "copy_ms": event_ms(lambda: images.to("cuda", non_blocking=True)),
        "work_ms": event_ms(lambda: step(model, *on_device)),
        "plain_s": rounds["plain"],
        "prefetcher_s": rounds["prefetcher"],
    }
    plain_s, pref_s = statistics.median(rounds["plain"]), statistics.median(rounds["prefetcher"])
    result["images_per_s"] = {
        "plain": args.batch * args.steps / plain_s,
        "prefetcher": args.batch * args.steps / pref_s,
    }
    result["hidden_copy_ms_per_step"] = 1000 * (plain_s - pref_s) / args.steps
    print(json.dumps(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
