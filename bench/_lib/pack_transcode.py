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
  on average (pack's rule), against the originals (crop decode speed per K is bench/kernel.py crop's);
- the size fit (pack's default): the rule alone against the rule + fit (a re-code larger than its baseline source
  written again with a larger K, else the source kept): bytes, how many images grew, got a larger K or were kept,
  the transcode's speed on one core with and without the fit, and the crop kernel (``RandomResizedCrop(224)``
  boxes, torch seed 0, ``native.decode_crop_into``) on one core over both sets of records, alternating.

Usage::

    python bench/pack.py transcode                          # 3000 images in data/imagenet-like, table on stdout
    python bench/pack.py transcode --num-images 500 --repeats 1 --json bench/results/pack-transcode.json
    python bench/pack.py transcode --profile photos --num-images 300 --repeats 1     # camera-sized photos
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from imagenet_like import make_images  # noqa: E402 (a neighbour in bench/_lib, on sys.path)

from fastdata.decode import is_jpeg  # noqa: E402
from fastdata.packing import _jpegtranscode, pack  # noqa: E402
from fastdata.packing.pool import available_cpus  # noqa: E402
from fastdata.packing.transcode import MIN_INTERVAL_BYTES, transcode_jpeg  # noqa: E402


def _ensure(folder: Path, count: int, profile: str = "imagenet") -> None:
    if folder.is_dir() and any(folder.iterdir()):
        return
    make_images(folder, count, profile, 100)


def _pack_once(src: Path, keep_bytes: bool, workers: int) -> tuple[float, int]:
    out = Path(tempfile.mkdtemp(prefix="fastdata-bench-pack-"))
    try:
        start = time.perf_counter()
        manifest = pack(
            src, out, format="tfrecord", workers=workers, progress=False, keep_bytes=keep_bytes, overwrite=True
        )
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
        start = time.process_time()  # CPU time: robust on a busy machine
        recoded = [transcode_jpeg(d) for d in jpegs]  # what pack does
        alone = time.process_time() - start
        start = time.process_time()
        rule_only = [transcode_jpeg(d, fit=False) for d in jpegs]
        alone_rule = time.process_time() - start
        fit = _fit_stats(jpegs, rule_only, recoded)
        fit["transcode_images_per_s"] = {"rule": len(jpegs) / alone_rule, "rule+fit": len(jpegs) / alone}
        fit["crop_images_per_s"] = _crop_speed(
            [r or d for r, d in zip(rule_only, jpegs, strict=False)],
            [r or d for r, d in zip(recoded, jpegs, strict=False)],
            repeats,
        )
        by_k, raised = {}, {}
        for label, k, floor in (
            ("K=1", 1, 0),
            ("K>=2", 2, 0),
            ("K>=4", 4, 0),
            ("K=row", 1 << 16, 0),
            ("K=1,16B", 1, 16),
            ("K=1,32B", 1, 32),
            ("K=1,64B", 1, 64),
        ):
            outs = [_jpegtranscode.transcode(d, k, floor, 1 << 62, False) for d in jpegs]  # the rule alone
            by_k[label] = sum(len(r or d) for r, d in zip(outs, jpegs, strict=False))
            raised[label] = (
                sum(r is not None and _jpegtranscode.restart_interval(r)[0] > max(1, min(k, 2)) for r in outs)
                if floor
                else None
            )
    finally:
        if affinity is not None:
            os.sched_setaffinity(0, affinity)
    medians = {name: statistics.median(t) for name, t in times.items()}
    return {
        "images": len(datas),
        "jpegs": len(jpegs),
        "workers": workers,
        "repeats": repeats,
        "source_bytes": source_bytes,
        "jpeg_bytes": sum(map(len, jpegs)),
        "pack": {
            name: {
                "seconds": medians[name],
                "min": min(t),
                "max": max(t),
                "images_per_s": len(datas) / medians[name],
                "mb_per_s": source_bytes / 1e6 / medians[name],
                "shard_bytes": sizes[name],
            }
            for name, t in times.items()
        },
        "throughput_ratio": medians["keep-bytes"] / medians["transcode"],
        "transcode_share": max(0.0, (medians["transcode"] - medians["keep-bytes"]) / medians["transcode"]),
        "transcode_alone_images_per_s": len(jpegs) / alone,
        "transcode_failed": sum(r is None for r in recoded),
        "jpeg_bytes_by_k": by_k,
        "images_with_k_raised": raised,
        "min_interval_bytes": MIN_INTERVAL_BYTES,
        "fit": fit,
    }


def _fit_stats(jpegs: list[bytes], rule: list, fitted: list) -> dict:
    """What the size fit changed: bytes, images that grew under the rule alone, got a larger K, were kept."""

    def k(data):
        return _jpegtranscode.restart_interval(data)[0]

    return {
        "bytes": {
            "source": sum(map(len, jpegs)),
            "rule": sum(len(r or d) for r, d in zip(rule, jpegs, strict=False)),
            "rule+fit": sum(len(r or d) for r, d in zip(fitted, jpegs, strict=False)),
        },
        "grew_under_rule": sum(r is not None and len(r) > len(d) for r, d in zip(rule, jpegs, strict=False)),
        "larger_k": sum(f is not None and r is not None and k(f) > k(r) for r, f in zip(rule, fitted, strict=False)),
        "whole_rows": sum(f is not None and k(f) == _jpegtranscode.restart_interval(f)[1] > 1 for f in fitted),
        "kept": sum(f is None and r is not None for r, f in zip(rule, fitted, strict=False)),
        "grew_after_fit": sum(f is not None and len(f) > len(d) for f, d in zip(fitted, jpegs, strict=False)),
    }


def _crop_speed(rule: list[bytes], fitted: list[bytes], repeats: int) -> dict:
    """Crop kernel images/s (one core, the same boxes) on the records of the rule alone and of the rule + fit."""
    import numpy as np
    import torch

    from fastdata.decode import native
    from fastdata.transforms import RandomResizedCrop

    torch.manual_seed(0)
    boxes = [RandomResizedCrop.get_params(*native.read_header(d)[:2], (0.08, 1.0), (3 / 4, 4 / 3)) for d in rule]
    out = np.empty((224, 224, 3), np.uint8)
    rates: dict[str, list[float]] = {"rule": [], "rule+fit": []}
    for _ in range(max(repeats, 3)):
        for name, datas in (("rule", rule), ("rule+fit", fitted)):
            start = time.process_time()
            for data, box in zip(datas, boxes, strict=False):
                native.decode_crop_into(data, box, out)
            rates[name].append(len(datas) / (time.process_time() - start))
    return {name: statistics.median(r) for name, r in rates.items()}


def table(r: dict) -> str:
    lines = [
        f"pack of {r['images']} images ({r['jpegs']} JPEG, {r['source_bytes'] / 1e6:.1f} MB), "
        f"{r['workers']} worker(s), TFRecord, median of {r['repeats']}",
        f"{'mode':<12} {'img/s':>8} {'MB/s':>8} {'range s':>14} {'shards MB':>10} {'vs source':>10}",
    ]
    for name, p in r["pack"].items():
        lines.append(
            f"{name:<12} {p['images_per_s']:>8.1f} {p['mb_per_s']:>8.2f} {p['min']:>6.2f}-{p['max']:<7.2f}"
            f"{p['shard_bytes'] / 1e6:>10.1f} {p['shard_bytes'] / r['source_bytes']:>10.3f}"
        )
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
        lines.append(
            f"  {k:<8} {v / 1e6:>9.2f} MB  {v / r['jpeg_bytes']:.4f}"
            + (f"  ({raised} of {r['jpegs']} images get K > 1)" if raised is not None else "")
        )
    f = r["fit"]
    b = f["bytes"]
    lines += [
        f"size fit (pack's default) on {r['jpegs']} JPEGs: rule alone {b['rule'] / b['source']:.4f} of the source "
        f"bytes ({f['grew_under_rule']} images larger), rule + fit {b['rule+fit'] / b['source']:.4f}: "
        f"{f['larger_k']} got a larger K ({f['whole_rows']} whole rows), {f['kept']} kept as they were, "
        f"{f['grew_after_fit']} still larger (progressive/arithmetic sources)",
        f"  transcode alone, one core (CPU): rule {f['transcode_images_per_s']['rule']:.0f} JPEGs/s, rule + fit "
        f"{f['transcode_images_per_s']['rule+fit']:.0f} "
        f"({f['transcode_images_per_s']['rule+fit'] / f['transcode_images_per_s']['rule']:.2f}x)",
        f"  crop kernel, one core (CPU time, same boxes): rule {f['crop_images_per_s']['rule']:.0f} img/s, rule + fit "
        f"{f['crop_images_per_s']['rule+fit']:.0f} "
        f"({f['crop_images_per_s']['rule+fit'] / f['crop_images_per_s']['rule']:.3f}x)",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT / "data", help="where the image folder is (or is made)")
    parser.add_argument("--num-images", type=int, default=3000, help="images to generate if the folder is missing")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None, help="pack workers (default: all usable CPUs)")
    parser.add_argument(
        "--profile",
        choices=("imagenet", "photos"),
        default="imagenet",
        help="image sizes of the generated set (tools/make_imagenet_like.py --profile)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args(argv)
    stem = "imagenet-like" if args.profile == "imagenet" else "photos"
    src = args.data_dir / (stem if args.num_images == 3000 else f"{stem}-{args.num_images}")
    _ensure(src, args.num_images, args.profile)
    result = measure(src, args.repeats, args.workers or available_cpus())
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
