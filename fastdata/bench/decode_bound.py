"""The machine's limit for a pipeline: its per-image decode + crop + resize alone, one process per core.

What :func:`measure_decode_bound` measures is the bound a loader's images/s is compared with (its efficiency).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from typing import Any

import numpy as np
import torch

from fastdata.bench.measure import RESAMPLE, usable_cores

__all__ = ["measure_decode_bound"]

_WORKER: dict[str, Any] = {}


def _decode_init(root: str, size: int, barrier: Any, method: str) -> None:
    import cv2

    from fastdata.bench.baselines import CV2RandomResizedCropFlip, cv2_decode_bgr
    from fastdata.datasets.shard_dataset import ShardDataset
    from fastdata.transforms import RandomResizedCrop

    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    torch.manual_seed(os.getpid())
    if method == "cv2":  # what the torch-cv2 pipeline's workers do per image, without the loader around it
        crop = CV2RandomResizedCropFlip(size)
        transform = lambda data: crop(cv2_decode_bgr(data))  # noqa: E731
    else:
        transform = RandomResizedCrop(size, resample=RESAMPLE)
    _WORKER.update(dataset=ShardDataset(root), transform=transform, barrier=barrier)


def _decode_chunk(indices: list[int]) -> tuple[int, float, float, int]:
    dataset, transform = _WORKER["dataset"], _WORKER["transform"]
    payloads = [dataset.read(i)[0] for i in indices]  # read before the clock starts: decode only
    _WORKER["barrier"].wait(timeout=300)
    start, cpu = time.monotonic(), time.process_time_ns()
    for data in payloads:
        transform(data)
    return len(payloads), start, time.monotonic(), time.process_time_ns() - cpu


def measure_decode_bound(
    root: str | os.PathLike,
    *,
    size: int = 224,
    processes: int | None = None,
    limit: int | None = None,
    method: str = "fastdata",
) -> dict[str, Any]:
    """The machine's limit: the per-image decode + crop + resize alone, one process per core.

    Every process reads its share of the records of the packed dataset ``root`` into memory, waits
    for the others, then decodes them: with ``method="fastdata"``, ``fastdata.transforms.RandomResizedCrop(size)``
    (the crop-region decode the fastdata pipelines use); with ``"cv2"``, ``cv2.imdecode`` of the whole
    image + the same crop sampling + ``cv2.resize`` (the torch-cv2 pipeline's per-image work).

    Args:
        root: a packed dataset (``fastdata pack`` output).
        size: crop size.
        processes: worker processes (default: the usable cores).
        limit: use only the first ``limit`` records (all of them when there are fewer).
        method: ``"fastdata"`` or ``"cv2"``.

    Returns:
        ``images``, ``seconds`` (wall time of the slowest process), ``images_per_s`` (the sum of
        the per-process rates), ``wall_images_per_s`` (images / wall time), ``processes`` and ``cpu_us_per_image``
        (the processes' CPU time per image: what one image costs the kernel, whatever else runs on the machine).
    """
    from fastdata.datasets.shard_dataset import ShardDataset

    processes = processes or usable_cores()
    count = len(ShardDataset(root)) if limit is None else min(limit, len(ShardDataset(root)))
    chunks = [c.tolist() for c in np.array_split(np.arange(count), processes) if len(c)]
    ctx = multiprocessing.get_context()
    barrier = ctx.Barrier(len(chunks))
    with ctx.Pool(len(chunks), initializer=_decode_init, initargs=(str(root), size, barrier, method)) as pool:
        parts = pool.map(_decode_chunk, chunks, chunksize=1)
    images = sum(n for n, _, _, _ in parts)
    wall = max(end for _, _, end, _ in parts) - min(start for _, start, _, _ in parts)
    rate = sum(n / (end - start) for n, start, end, _ in parts if end > start)
    cpu_us = sum(cpu for _, _, _, cpu in parts) / images / 1e3 if images else None
    return {
        "images": images,
        "seconds": wall,
        "images_per_s": rate,
        "wall_images_per_s": images / wall if wall else 0.0,
        "processes": len(chunks),
        "cpu_us_per_image": cpu_us,
        "first_batch_s": None,
        "batches": None,
        "warmup_excluded": False,
    }
