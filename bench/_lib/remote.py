#!/usr/bin/env python
"""Remote shards against local shards: first-batch latency and images/s, cold and warm cache.

Serves one TFRecord pack from moto's S3 server (its own process, on loopback) and reads it with
``ShardDataset("s3://...", cache_dir=..., cache_limit=...)`` → ``DataLoaderX`` (2 workers,
decode-time ``RandomResizedCrop(224)``, ``fast_collate``), two passes per configuration: pass 1 with
an empty cache (cold), pass 2 warm. The same shards read from the local disk are the baseline.
Configurations: ``cache_limit`` = the dataset, and = a quarter of it, each with a full shuffle
(fastdata's ``DistributedSampler``) and with a shard-blocks order (shards shuffled, samples shuffled
within each shard: the order ``shuffle="blocks"`` gives), which a quarter-size cache needs.

Usage::

    python bench/remote.py throughput                      # 2,500 images, 8 MB shards
    python bench/remote.py throughput --num-images 500 --json /tmp/r.json   # a quick check

Not a test: it takes a few minutes and wants the machine to itself.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # works from a plain checkout too

BUCKET = "fastdata-bench"


def _serve_moto(queue) -> None:  # runs in its own process: the server's work does not share our GIL
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    queue.put(server.get_host_and_port())
    while True:
        time.sleep(3600)


def start_moto() -> tuple[multiprocessing.Process, str]:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    process = ctx.Process(target=_serve_moto, args=(queue,), daemon=True)
    process.start()
    host, port = queue.get(timeout=120)
    return process, f"http://{host}:{port}"


class ShardBlocks:
    """Shards in a seeded random order, the samples of each shard shuffled; a new order per ``iter()``."""

    def __init__(self, starts, seed: int = 0) -> None:
        self.starts, self.seed, self.passes = starts, seed, 0

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __iter__(self):
        import numpy as np

        rng = np.random.default_rng((self.seed, self.passes))
        self.passes += 1
        order = [
            rng.permutation(np.arange(self.starts[s], self.starts[s + 1]))
            for s in rng.permutation(len(self.starts) - 1)
        ]
        return iter(np.concatenate(order).tolist())


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc``); 0 when unknown."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def count_events(path: Path) -> dict[str, int]:
    from fastdata.storage.trace import read_events

    counts: dict[str, int] = {}
    if path.is_file():
        for event in read_events(path):
            counts[event[2]] = counts.get(event[2], 0) + 1
        os.truncate(path, 0)  # processes keep appending to it (O_APPEND): do not replace the file
    return counts


def run_passes(
    root: str, order: str, args, cache_dir: Path | None, limit: int | None, trace: Path, server_pid: int | None
) -> list[dict]:
    """Two passes over ``root``; per pass: first-batch latency, images/s, cache events, the S3 server's CPU time."""
    from fastdata import DataLoaderX, DistributedSampler, ShardDataset, fast_collate
    from fastdata.transforms import RandomResizedCrop

    options = {} if cache_dir is None else {"cache_dir": cache_dir, "cache_limit": limit, "prefetch": args.prefetch}
    dataset = ShardDataset(root, transform=RandomResizedCrop(224), **options)
    sampler = (
        ShardBlocks(dataset._starts)
        if order == "blocks"
        else DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=True, seed=0)
    )
    loader = DataLoaderX(
        dataset, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers, collate_fn=fast_collate
    )
    results = []
    for epoch in range(2):
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        count_events(trace)
        server_cpu = cpu_seconds(server_pid)
        start = time.perf_counter()
        first, images = None, 0
        for batch, _ in loader:
            images += len(batch)
            if first is None:
                first = time.perf_counter() - start
        seconds = time.perf_counter() - start
        results.append(
            {
                "pass": epoch + 1,
                "first_batch_s": round(first, 3),
                "images": images,
                "seconds": round(seconds, 2),
                "images_per_s": round(images / seconds, 1),
                "server_cpu_s": round(cpu_seconds(server_pid) - server_cpu, 2),
                "cache_events": count_events(trace),
            }
        )
    dataset.close()
    del loader
    return results


def prepare(args) -> tuple[Path, Path]:
    data = args.data
    if not data.is_dir() or not any(data.iterdir()):
        print(f"generating {args.num_images} ImageNet-like images in {data} ...", flush=True)
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "tools" / "make_imagenet_like.py"),
                str(data),
                "--num-images",
                str(args.num_images),
                "--num-classes",
                str(args.num_classes),
            ],
            check=True,
        )
    local = data.parent / (data.name + f".tfrecord-{args.shard_mb}mb")
    if not (local / "manifest.json").is_file():
        from fastdata.packing.packer import pack

        print(f"packing {data} into {local} ...", flush=True)
        pack(
            data,
            local,
            format="tfrecord",
            shard_size=args.shard_mb * 2**20,
            shuffle_seed=0,
            overwrite=True,
            progress=False,
        )
    return data, local


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "imagenet-like-2500", help="image folder")
    parser.add_argument("--num-images", type=int, default=2500, help="images to generate if --data is missing")
    parser.add_argument("--num-classes", type=int, default=50, help="classes to generate if --data is missing")
    parser.add_argument("--shard-mb", type=int, default=8, help="shard size in MiB")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--prefetch", type=int, default=4, help="shards downloaded ahead")
    parser.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "remote.json")
    args = parser.parse_args(argv)
    _, local = prepare(args)
    moto, endpoint = start_moto()
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=endpoint,
    )
    work = Path(tempfile.mkdtemp(prefix="fastdata-remote-bench-"))
    trace = work / "trace.log"
    os.environ["FASTDATA_CACHE_TRACE"] = str(trace)
    try:
        import boto3

        from fastdata.storage.transfer import upload

        boto3.client("s3").create_bucket(Bucket=BUCKET)
        url = f"s3://{BUCKET}/bench"
        upload(local, url)
        total = sum(p.stat().st_size for p in local.glob("shard-*.tfrecord"))
        runs = [("local", "shuffle", None, None)]
        for limit_name, limit in (("dataset", total), ("quarter", total // 4)):
            for order in ("shuffle", "blocks"):
                runs.append((f"s3, cache_limit={limit_name}", order, limit, work / f"cache-{limit_name}-{order}"))
        runs.insert(1, ("local", "blocks", None, None))
        report = {
            "machine": f"{os.cpu_count()} cores",
            "shards": len(list(local.glob("shard-*.tfrecord"))),
            "dataset_bytes": total,
            "batch_size": args.batch_size,
            "workers": args.workers,
            "prefetch": args.prefetch,
            "runs": [],
        }
        for name, order, limit, cache in runs:
            passes = run_passes(str(local) if cache is None else url, order, args, cache, limit, trace, moto.pid)
            report["runs"].append({"source": name, "order": order, "cache_limit": limit, "passes": passes})
            for p in passes:
                print(
                    f"{name:28s} {order:8s} pass {p['pass']}: first batch {p['first_batch_s']:5.2f} s "
                    f"{p['images_per_s']:6.1f} img/s in {p['seconds']:5.2f} s, S3 server CPU {p['server_cpu_s']:5.2f} s"
                    f"  {p['cache_events']}",
                    flush=True,
                )
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}")
    finally:
        moto.terminate()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
