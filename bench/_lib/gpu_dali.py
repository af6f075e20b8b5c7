#!/usr/bin/env python
"""The DALI backend's GPU decode against its CPU decode, over one small TFRecord pack it makes.

``--images`` camera-like JPEGs (gradients and noise, 500x375, quality 90) are packed with ``fastdata.pack``
(``--format tfrecord``), then read by ``fastdata.dali.DALILoader`` with ``device="gpu"`` (nvJPEG, ``decoder="mixed"``)
and with ``device="cpu"``, taking turns ``--repeats`` times: images/s of whole epochs after one warm-up epoch.
Without CUDA it says so and exits 0.

Usage::

    python bench/gpu.py dali [--images 1024] [--batch 128] [--repeats 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fastdata.packing import pack  # noqa: E402


def make_pack(root: Path, count: int) -> Path:
    from PIL import Image

    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:375, 0:500]
    for i in range(count):
        folder = root / "images" / f"class{i % 10}"
        folder.mkdir(parents=True, exist_ok=True)
        base = np.stack([(x + 7 * i) % 256, (y + 3 * i) % 256, (x + y) % 256], axis=-1)
        pixels = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(folder / f"{i:05d}.jpg", quality=90)
    out = root / "pack"
    pack(root / "images", out, format="tfrecord", progress=False)
    return out


def epoch(loader) -> tuple[float, int]:
    start, seen = time.perf_counter(), 0
    for _images, labels in loader:
        seen += len(labels)
    torch.cuda.synchronize()
    return time.perf_counter() - start, seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="also write the result as JSON here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench/gpu.py dali: no CUDA device here; nothing measured")
        return
    from fastdata._util.optional import has_dali

    if not has_dali():
        reason = "nvidia-dali is not installed (the `dali` extra)"
        print(f"bench/gpu.py dali: {reason}; nothing measured")
        if args.out:
            args.out.write_text(json.dumps({"skipped": reason}) + "\n")
        return
    from fastdata.dali import DALILoader

    with tempfile.TemporaryDirectory() as tmp:
        root = make_pack(Path(tmp), args.images)
        loaders = {device: DALILoader(root, args.batch, device=device) for device in ("gpu", "cpu")}
        for loader in loaders.values():
            epoch(loader)  # warm-up: the pipeline build, nvJPEG's buffers
        rates: dict[str, list[float]] = {device: [] for device in loaders}
        for _ in range(args.repeats):
            for device, loader in loaders.items():
                seconds, seen = epoch(loader)
                rates[device].append(seen / seconds)
    result = {
        "images": args.images,
        "batch": args.batch,
        "images_per_s": rates,
        "gpu_over_cpu": statistics.median(rates["gpu"]) / statistics.median(rates["cpu"]),
    }
    print(json.dumps(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
