#!/usr/bin/env python
"""Shuffle quality and shard locality of DistributedSampler's orders: none, full shuffle, blocks, index, index-blocks.

Measures, for each order, on the labels of an ImageNet-sized dataset (default: 1000 classes x 1281
images in shards of 2400 samples, about 256 MiB of 110 KB JPEGs each) laid out two ways, the way
``fastdata pack`` writes it without ``--shuffle-seed`` (ImageFolder order: class after class) and
with ``--shuffle-seed 0`` (the packer's own seeded permutation):

- ``classes/batch``: distinct labels in a rank's batch (a full shuffle gives ``C(1-(1-1/C)^B)``);
- ``TV``: total variation distance between a batch's label histogram and the dataset's (0: the
  batch is the dataset in miniature; 1: nothing in common);
- ``lag-1 corr``: Pearson correlation of the class histograms of consecutive batches of a rank (the
  label autocorrelation; about 0 for a full shuffle, near 1 when consecutive batches share classes);
- ``repeat mates``: of the sample pairs in one global batch of a pass, the fraction that meet in a
  global batch again in the next pass (how much batch composition repeats across epochs: about
  ``global batch / N`` for a full shuffle, 1 without shuffling);
- ``shards/global batch``: distinct shards one global batch (all ranks' batches of a step) reads,
  and ``shards/window``: distinct shards the job reads in a window of 16 consecutive steps, what a
  node cache must hold to read each shard once per pass.

Every number comes from the sampler itself (``DistributedSampler(..., shard_sizes=...)`` over the
sample indices; rank 0 for the per-rank metrics, the 1-rank order for the global ones). ``--root``
measures a real packed dataset instead (its labels and ``shard_offsets``).

Usage::

    python bench/shuffle.py quality [--classes 1000] [--per-class 1281] [--samples-per-shard 2400]
        [--world 8] [--batch-size 256] [--block-shards 1 2 4 8 16 32] [--root PACKED] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fastdata.packing.plan import source_order as _source_order  # noqa: E402  (`pack --shuffle-seed`'s order)
from fastdata.sampler import DistributedSampler  # noqa: E402

WINDOW = 16  # steps per locality window


def _layouts(args: argparse.Namespace) -> dict[str, tuple[np.ndarray, list[int]]]:
    """Packing name -> (label of each sample in dataset order, samples per shard)."""
    if args.root is not None:
        from fastdata import ShardDataset

        dataset = ShardDataset(args.root)
        return {str(args.root): (np.asarray(dataset.targets), np.diff(dataset.shard_offsets).tolist())}
    class_order = np.repeat(np.arange(args.classes), args.per_class)
    n = len(class_order)
    full, tail = divmod(n, args.samples_per_shard)
    sizes = [args.samples_per_shard] * full + ([tail] if tail else [])
    return {
        "class order (no --shuffle-seed)": (class_order, sizes),
        "--shuffle-seed 0": (class_order[_source_order(n, 0)], sizes),
    }


def _rank_metrics(labels: np.ndarray, order: np.ndarray, batch: int, classes: int) -> dict[str, float]:
    nb = len(order) // batch
    batches = labels[order[: nb * batch]].reshape(nb, batch)
    hist = np.zeros((nb, classes), np.float64)
    np.add.at(hist, (np.repeat(np.arange(nb), batch), batches.ravel()), 1.0)
    dataset = np.bincount(labels, minlength=classes) / len(labels)
    tv = 0.5 * np.abs(hist / batch - dataset).sum(axis=1)
    centered = hist - hist.mean(axis=1, keepdims=True)
    norms = np.linalg.norm(centered, axis=1)
    corr = (centered[:-1] * centered[1:]).sum(axis=1) / (norms[:-1] * norms[1:])
    return {
        "classes/batch": float((hist > 0).sum(axis=1).mean()),
        "TV": float(tv.mean()),
        "lag-1 corr": float(corr.mean()),
    }


def _global_metrics(shard_of: np.ndarray, order: np.ndarray, global_batch: int) -> dict[str, float]:
    steps = len(order) // global_batch
    per_step = shard_of[order[: steps * global_batch]].reshape(steps, global_batch)
    windows = [len(np.unique(per_step[s : s + WINDOW])) for s in range(0, steps - WINDOW + 1, WINDOW)]
    return {
        "shards/global batch": float(np.mean([len(np.unique(row)) for row in per_step])),
        "shards/window": float(np.mean(windows)),
    }


def _repeat_mates(first: np.ndarray, second: np.ndarray, global_batch: int) -> float:
    """Of the sample pairs that share a global batch in one pass, the fraction that share one again in the next."""
    steps = len(first) // global_batch
    batch_of = np.full((2, len(first)), -1, np.int64)
    for row, order in enumerate((first, second)):
        batch_of[row, order[: steps * global_batch]] = np.arange(steps * global_batch) // global_batch
    both = batch_of[:, (batch_of >= 0).all(axis=0)]
    _, counts = np.unique(both[0] * steps + both[1], return_counts=True)
    return float((counts * (counts - 1)).sum() / (steps * global_batch * (global_batch - 1)))


def _measure(labels: np.ndarray, sizes: list[int], shuffle, block_shards: int, args) -> dict[str, float]:
    n, classes = len(labels), int(labels.max()) + 1
    common = dict(shuffle=shuffle, seed=args.seed, shard_sizes=sizes, block_shards=block_shards)
    started = time.perf_counter()
    two = np.fromiter(iter(DistributedSampler(range(n), num_replicas=1, rank=0, ratio=2, **common)), np.int64, 2 * n)
    seconds = (time.perf_counter() - started) / 2
    whole = two[:n]
    rank0 = np.fromiter(iter(DistributedSampler(range(n), num_replicas=args.world, rank=0, **common)), np.int64)
    shard_of = np.repeat(np.arange(len(sizes)), sizes)
    result = _rank_metrics(labels, rank0, args.batch_size, classes)
    result.update(_global_metrics(shard_of, whole, args.batch_size * args.world))
    result["repeat mates"] = _repeat_mates(whole, two[n:], args.batch_size * args.world)
    result["s/pass (1 rank)"] = seconds
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--per-class", type=int, default=1281)
    parser.add_argument("--samples-per-shard", type=int, default=2400)
    parser.add_argument("--world", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=256, help="per rank")
    parser.add_argument("--block-shards", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--root", type=Path, default=None, help="a packed dataset to measure instead")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    orders = [("none (shuffle=False)", False, 1), ("full (shuffle=True)", True, 1)]
    orders += [(f"blocks of {k} shards", "blocks", k) for k in args.block_shards]
    orders += [("index (shuffle='index')", "index", 1)]
    orders += [(f"index-blocks of {k} shards", "index-blocks", k) for k in args.block_shards]
    results = []
    for packing, (labels, sizes) in _layouts(args).items():
        print(
            f"\n### {packing}: {len(labels)} samples, {int(labels.max()) + 1} classes, {len(sizes)} shards; "
            f"{args.world} ranks x batch {args.batch_size}\n"
        )
        keys = None
        for name, shuffle, block_shards in orders:
            row = _measure(labels, sizes, shuffle, block_shards, args)
            if keys is None:
                keys = list(row)
                print("| order | " + " | ".join(keys) + " |")
                print("|---" * (len(keys) + 1) + "|")
            print(f"| {name} | " + " | ".join(f"{row[k]:.3f}" if row[k] < 10 else f"{row[k]:.1f}" for k in keys) + " |")
            results.append({"packing": packing, "order": name, **row})
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
