#!/usr/bin/env python
"""Pack with lossless JPEG transcoding (the default) against ``--keep-bytes``: throughput, the transcode's share, sizes.

On one generated ImageNet-like image folder (``tools/make_imagenet_like.py``, made under ``--data-dir`` if missing):

- ``pack`` throughput, default (every JPEG re-coded: optimized Huffman, a restart marker every MCU) against
  ``keep_bytes=True``, alternating, ``--repeats`` rounds, same workers, TFRecord, no progress bar: images/s and
  source MB/s (median, with the range);
- the transcode's share of pack time: (default - keep-bytes) / default wall time, and the transcode alone on one
  core, bytes in memory (images/s);
- sizes: records of the default pack and of the keep-bytes pack against the source bytes;
- the restart interval K (MCUs) against size: total bytes of the JPEGs re-coded with K = 1, 2, 4, one interval
  per MCU row (K = MCUs per row), and K = 1 raised where an interval would hold fewer than N bytes of the input
  on average (pack's rule), against the originals (crop decode speed per K is bench/decode_kernel.py's).

Usage::

    python bench/pack_transcode.py                          # 3000 images in data/imagenet-like, table on stdout
    python bench/pack_transcode.py --num-images 500 --repeats 1 --json bench/results-pack-transcode.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fastdata.decode import is_jpeg  # noqa: E402
from fastdata.packing import _jpegtranscode, pack  # noqa: E402
from fastdata.packing.pool import available_cpus  # noqa: E402
from fastdata.packing.transcode import MIN_INTERVAL_BYTES, transcode_jpeg  # noqa: E402


def _ensure(folder: Path, count: int) -> None:
    if folder.is_dir() and any(folder.iterdir()):
        return
    subprocess.run([sys.executable, str(ROOT / "tools" / "make_imagenet_like.py"), str(folder), "--num-images",
                    str(count), "--num-classes", "100", "--quiet"], check=True)


def _pack_once(src: Path, keep_bytes: bool, workers: int) -> tuple[float, int]:
    out = Path(tempfile.mkdtemp(prefix="fastdata-bench-pack-"))
    try:
        start = time.perf_counter()
        manifest = pack(src, out, format="tfrecord", workers=workers, progress=False, keep_bytes=keep_bytes,
                        overwrite=True)
        seconds = time.perf_counter() - start
        return seconds, sum(s.nbytes for s in manifest.shards)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _one_core() -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})


def measure(src: Path, repeats: int, workers: int) -> dict:
    files = sorted(p for p in src.rglob("*") if p.is_file())
    datas = [p.read_bytes() for p in files]
    jpegs = [d for d in datas if is_jpeg(d)]
    source_bytes = sum(map(len, datas))
    _pack_once(src, True, workers)  # warm-up: page cache, imports
    times: dict[str, list[float]] = {"transcode": [], "keep-bytes": []}
    sizes: dict[str, int] = {}
    for _ in range(repeats):
        for name, keep in (("transcode", False), ("keep-bytes", True)):
            seconds, sizes[name] = _pack_once(src, keep, workers)
            times[name].append(seconds)
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    _one_core()
    try:
        start = time.perf_counter()
        recoded = [transcode_jpeg(d) for d in jpegs]  # what pack does
        alone = time.perf_counter() - start
        by_k, raised = {}, {}
        for label, k, floor in (("K=1", 1, 0), ("K>=2", 2, 0), ("K>=4", 4, 0), ("K=row", 1 << 16, 0),
                                ("K=1,16B", 1, 16), ("K=1,32B", 1, 32), ("K=1,64B", 1, 64)):
            outs = [_jpegtranscode.transcode(d, k, floor) for d in jpegs]
            by_k[label] = sum(len(r or d) for r, d in zip(outs, jpegs))
            raised[label] = sum(r is not None and _jpegtranscode.restart_interval(r)[0] > max(1, min(k, 2))
                                for r in outs) if floor else None
    finally:
        if affinity is not None:
            os.sched_setaffinity(0, affinity)
    medians = {name: statistics.median(t) for name, t in times.items()}
    return {
        "images": len(datas), "jpegs": len(jpegs), "workers": workers, "repeats": repeats,
        "source_bytes": source_bytes, "jpeg_bytes": sum(map(len, jpegs)),
        "pack": {name: {"seconds": medians[name], "min": min(t), "max": max(t), "images_per_s": len(datas) / medians[name],
                        "mb_per_s": source_bytes / 1e6 / medians[name], "shard_bytes": sizes[name]}
                 for name, t in times.items()},
        "throughput_ratio": medians["keep-bytes"] / medians["transcode"],
        "transcode_share": max(0.0, (medians["transcode"] - medians["keep-bytes"]) / medians["transcode"]),
        "transcode_alone_images_per_s": len(jpegs) / alone,
        "transcode_failed": sum(r is None for r in recoded),
        "jpeg_bytes_by_k": by_k,
        "images_with_k_raised": raised,
        "min_interval_bytes": MIN_INTERVAL_BYTES,
    }


def table(r: dict) -> str:
    lines = [f"pack of {r['images']} images ({r['jpegs']} JPEG, {r['source_bytes'] / 1e6:.1f} MB), "
             f"{r['workers']} worker(s), TFRecord, median of {r['repeats']}",
             f"{'mode':<12} {'img/s':>8} {'MB/s':>8} {'range s':>14} {'shards MB':>10} {'vs source':>10}"]
    for name, p in r["pack"].items():
        lines.append(f"{name:<12} {p['images_per_s']:>8.1f} {p['mb_per_s']:>8.2f} {p['min']:>6.2f}-{p['max']:<7.2f}"
                     f"{p['shard_bytes'] / 1e6:>10.1f} {p['shard_bytes'] / r['source_bytes']:>10.3f}")
    lines += [
        f"throughput transcode / keep-bytes: {r['throughput_ratio']:.3f}x; transcode's share of pack time: "
        f"{100 * r['transcode_share']:.1f}%",
        f"transcode alone, one core: {r['transcode_alone_images_per_s']:.0f} JPEGs/s ({r['transcode_failed']} kept "
        "unchanged)",
        "JPEG bytes by restart interval (K: MCUs, the divisor of the MCUs per row nearest above the number; NB: raised "
        "so an interval holds N bytes of the input on average) vs the originals; pack uses "
        f"K=1,{r['min_interval_bytes']}B:",
    ]
    for k, v in r["jpeg_bytes_by_k"].items():
        raised = r["images_with_k_raised"].get(k)
        lines.append(f"  {k:<8} {v / 1e6:>9.2f} MB  {v / r['jpeg_bytes']:.4f}"
                     + (f"  ({raised} of {r['jpegs']} images get K > 1)" if raised is not None else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data", help="where the image folder is (or is made)")
    parser.add_argument("--num-images", type=int, default=3000, help="images to generate if the folder is missing")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None, help="pack workers (default: all usable CPUs)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    src = args.data_dir / ("imagenet-like" if args.num_images == 3000 else f"imagenet-like-{args.num_images}")
    _ensure(src, args.num_images)
    result = measure(src, args.repeats, args.workers or available_cpus())
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
