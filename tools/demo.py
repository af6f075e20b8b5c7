#!/usr/bin/env python
"""The README's demo: generate a small ImageNet-like folder, pack it both ways, read it back, say what happened."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_imagenet_like  # noqa: E402

import fastdata  # noqa: E402
from fastdata import gpu_transforms as T  # noqa: E402
from fastdata.packing.check import describe, verify  # noqa: E402
from fastdata.transforms import RandomResizedCrop  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="sample", help="working folder (default ./sample)")
    parser.add_argument("--num-images", type=int, default=300)
    parser.add_argument("--num-classes", type=int, default=10)
    args = parser.parse_args(argv)
    out = Path(args.out)
    images = out / "images"

    print(f"1. generating {args.num_images} ImageNet-like images of {args.num_classes} classes in {images}")
    stats = make_imagenet_like.generate(
        images, num_images=args.num_images, num_classes=args.num_classes, seed=0, overwrite=True, progress=True
    )
    print("   " + make_imagenet_like.format_stats(stats))

    for step, fmt in zip("ab", ("tfrecord", "lmdb"), strict=False):
        target = out / fmt
        print(f"\n2{step}. packing into {fmt} shards in {target}")
        start = time.perf_counter()
        manifest = fastdata.pack(images, target, format=fmt, samples_per_shard=100, overwrite=True)
        seconds = time.perf_counter() - start
        size = sum(s.nbytes for s in manifest.shards)
        print(
            f"   {manifest.num_samples} images -> {len(manifest.shards)} shards, {size / 1e6:.1f} MB, "
            f"{manifest.num_samples / seconds:.0f} images/s, skipped {len(manifest.skipped)}"
        )
        report = verify(target)
        print(f"   verify: {'OK' if report.ok else report.problems}, {report.records} records checked")

    print("\n3. summary of the TFRecord dataset (`fastdata inspect`):")
    print("   " + "\n   ".join(describe(out / "tfrecord").splitlines()[:8]) + "\n   ...")

    print(
        "\n4. reading back: ShardDataset -> DataLoaderX -> DataPrefetcher (normalize on the "
        f"{'GPU' if torch.cuda.is_available() else 'CPU, no CUDA here'})"
    )
    for fmt in ("tfrecord", "lmdb"):
        dataset = fastdata.ShardDataset(out / fmt, transform=RandomResizedCrop(224))
        loader = fastdata.DataLoaderX(
            dataset, batch_size=64, shuffle=True, num_workers=2, collate_fn=fastdata.fast_collate
        )
        prefetcher = fastdata.DataPrefetcher(
            loader, transform=T.Compose([T.RandomHorizontalFlip(), T.Normalize(T.IMAGENET_MEAN, T.IMAGENET_STD)])
        )
        start = time.perf_counter()
        seen = 0
        for images_batch, labels in prefetcher:  # noqa: B007 (the last batch is shown below)
            seen += len(labels)
        seconds = time.perf_counter() - start
        print(
            f"   {fmt:8s}: {seen} samples in {len(prefetcher)} batches, last batch {tuple(images_batch.shape)} "
            f"{images_batch.dtype} on {images_batch.device}, mean {images_batch.mean():+.3f}, "
            f"{seen / seconds:.0f} images/s (first pass, includes worker start-up)"
        )
    print(f"\ndone: everything is in {out}/ (delete it when you are done)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
