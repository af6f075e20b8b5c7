#!/usr/bin/env python
"""At the scale users train: what grows with the number of samples N (issue 26).

For each N, format and shard size, a synthetic pack is written with ``fastdata.write`` (tiny 16x16 JPEGs, a
few hundred distinct ones reused, re-coded losslessly as pack does; 1,000 classes), then measured, each
measurement in a fresh process (``bench/_lib/scale_probe.py``):

- ``pack s/100k``: seconds per 100,000 samples of ``fastdata.write`` (all CPUs);
- ``manifest``, ``transcoded.bits``, ``targets.npy``, ``.idx``: bytes on disk (the side file exists only when a
  shard is partly re-coded: never here, every record is a JPEG);
- ``open s``, ``open RSS +``: ``ShardDataset(root)``; ``pickled``: the dataset as a spawn/forkserver worker gets it;
  ``first batch s``: ``iter(loader)`` to the first batch of 256, 2 workers;
- ``pass img/s``, ``worker PSS`` (max of 2), ``worker fds`` (max of 2): one shuffled pass with 2 workers, fork and
  forkserver, measured at its end; with ``--pass-samples K`` only its first K samples (a full shuffle spreads them
  over every shard, so every shard has been opened: what a reader holds per shard is what a whole pass leaves;
  ``pass samples`` says how many were read);
- ``sampler iter/first s``, ``tracemalloc``, ``RSS +``, ``state_dict``: ``DistributedSampler`` with
  ``shuffle=True`` and ``shuffle="index"``, and the pickled ``DataLoaderX.state_dict()`` after one batch;
- ``verify s``: ``fastdata verify --no-decode`` (shards in a pool of all CPUs), and its peak RSS rise.

It prints one markdown table per format and shard size, metrics down, N across ("what grows with N"), and writes
every number to ``--json``. Free disk space is checked first (a pack of N tiny samples takes about 700 bytes a
sample); each pack is deleted after it is measured unless ``--keep``.

Usage::

    python bench/scale.py sweep [--n 1000000 4000000 16000000] [--samples-per-shard 1000 10000]
                          [--formats tfrecord lmdb] [--out DIR] [--json bench/results/scale.json] [--keep]
                          [--pass-samples K] [--reuse]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import cv2  # noqa: E402
import numpy as np  # noqa: E402

import fastdata  # noqa: E402

PROBE = Path(__file__).resolve().parent / "scale_probe.py"
DISTINCT = 300
CLASSES = 1000
BYTES_PER_SAMPLE = 700  # a 16x16 JPEG record with its framing and index line, rounded up
CONTEXTS = ("fork", "forkserver")


class Synthetic:
    """``n`` samples ``(jpeg, label)``: a few hundred distinct tiny JPEGs, reused; sized, so the bar knows the total."""

    def __init__(self, n: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        yy, xx = np.mgrid[0:16, 0:16].astype(np.float32)
        self.jpegs = []
        for _ in range(DISTINCT):
            a, b, c = rng.uniform(-8, 8, 3), rng.uniform(-8, 8, 3), rng.uniform(40, 215, 3)
            image = np.clip(c + a * xx[..., None] + b * yy[..., None] + rng.normal(0, 3, (16, 16, 3)), 0, 255)
            self.jpegs.append(cv2.imencode(".jpg", image.astype(np.uint8), [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes())
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        for i in range(self.n):
            yield self.jpegs[(i * 7919) % DISTINCT], i % CLASSES


def probe(kind: str, root: Path, *options: str) -> dict:
    done = subprocess.run(
        [sys.executable, str(PROBE), kind, str(root), *options], capture_output=True, text=True, cwd=ROOT
    )
    if done.returncode:
        raise RuntimeError(f"{kind} probe failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def sizes(root: Path, manifest: fastdata.Manifest) -> dict:
    side = root / manifest.transcoded_file if manifest.transcoded_file else None
    return {
        "manifest_bytes": (root / "manifest.json").stat().st_size,
        "transcoded_bits_bytes": side.stat().st_size if side else 0,
        "targets_bytes": (root / manifest.targets).stat().st_size,
        "index_bytes": sum((root / s.index).stat().st_size for s in manifest.shards if s.index),
        "shard_bytes": sum(s.nbytes for s in manifest.shards),
        "shards": len(manifest.shards),
    }


def measure(
    n: int,
    fmt: str,
    per_shard: int,
    out: Path,
    contexts: list[str],
    keep: bool,
    progress: bool,
    pass_samples: int = 0,
    reuse: bool = False,
) -> dict:
    root = out / f"{fmt}-{n}-{per_shard}"
    manifest = _finished(root, n, fmt, per_shard) if reuse else None
    start = time.perf_counter()
    if manifest is None:
        print(f"--- N={n:,} {fmt} {per_shard}/shard: writing {root}", file=sys.stderr, flush=True)
        manifest = fastdata.write(
            Synthetic(n), root, format=fmt, samples_per_shard=per_shard, overwrite=True, progress=progress
        )
        pack_s = (time.perf_counter() - start) / n * 1e5
    else:
        print(f"--- N={n:,} {fmt} {per_shard}/shard: measuring the pack already in {root}", file=sys.stderr, flush=True)
        pack_s = None  # not written by this run
    row: dict = {
        "n": n,
        "format": fmt,
        "samples_per_shard": per_shard,
        "pack_s_per_100k": pack_s,
        **sizes(root, manifest),
    }
    try:
        row.update(probe("open", root))
        for context in contexts:
            row[f"pass_{context}"] = probe("pass", root, "--context", context, "--samples", str(pass_samples))
        for shuffle in ("True", "index"):
            row[f"sampler_{shuffle}"] = probe("sampler", root, "--shuffle", shuffle)
        row.update(probe("verify", root))
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def _finished(root: Path, n: int, fmt: str, per_shard: int) -> fastdata.Manifest | None:
    """The manifest of a finished pack of this shape already in ``root`` (``--reuse``), else None."""
    try:
        manifest = fastdata.Manifest.load(root)
    except (OSError, ValueError):
        return None
    same = manifest.format == fmt and manifest.num_samples == n and manifest.shards[0].num_samples == per_shard
    return manifest if same else None


def _mb(value: float) -> str:
    return f"{value / 2**20:.2f} MB" if value >= 2**20 else f"{value / 1024:.1f} KB"


METRICS = [  # (label, how a row gives it)
    ("shards", lambda r: f"{r['shards']:,}"),
    ("pack s/100k", lambda r: "(reused)" if r["pack_s_per_100k"] is None else f"{r['pack_s_per_100k']:.1f}"),
    ("manifest.json", lambda r: _mb(r["manifest_bytes"])),
    ("transcoded.bits", lambda r: _mb(r["transcoded_bits_bytes"])),
    ("targets.npy", lambda r: _mb(r["targets_bytes"])),
    (".idx (all)", lambda r: _mb(r["index_bytes"])),
    ("open s", lambda r: f"{r['open_s']:.2f}"),
    ("open RSS +", lambda r: _mb(r["open_rss_bytes"])),
    ("pickled dataset", lambda r: _mb(r["pickled_bytes"])),
    ("first batch s", lambda r: f"{r['first_batch_s']:.2f}"),
    *[(f"pass samples ({c})", lambda r, c=c: f"{r[f'pass_{c}']['images']:,}") for c in CONTEXTS],
    *[(f"pass img/s ({c})", lambda r, c=c: f"{r[f'pass_{c}']['images_per_s']:,.0f}") for c in CONTEXTS],
    *[(f"worker PSS ({c})", lambda r, c=c: _mb(max(r[f"pass_{c}"]["worker_pss_bytes"]))) for c in CONTEXTS],
    *[(f"worker fds ({c})", lambda r, c=c: str(max(r[f"pass_{c}"]["worker_open_files"]))) for c in CONTEXTS],
    *[
        (
            f"sampler {s} iter / first s",
            lambda r, s=s: f"{r[f'sampler_{s}']['iter_s']:.4f} / {r[f'sampler_{s}']['first_index_s']:.3f}",
        )
        for s in ("True", "index")
    ],
    *[
        (
            f"sampler {s} tracemalloc / RSS +",
            lambda r, s=s: (
                f"{_mb(r[f'sampler_{s}']['tracemalloc_peak_bytes'])} / {_mb(r[f'sampler_{s}']['rss_delta_bytes'])}"
            ),
        )
        for s in ("True", "index")
    ],
    *[(f"state_dict ({s})", lambda r, s=s: _mb(r[f"sampler_{s}"]["state_dict_bytes"])) for s in ("True", "index")],
    ("verify --no-decode s", lambda r: f"{r['verify_s']:.1f}"),
    ("verify peak RSS +", lambda r: _mb(r["verify_peak_rss_delta_bytes"])),
]


def table(rows: list[dict]) -> str:
    """One markdown table per (format, shard size): metrics down, N across."""
    out = []
    for fmt, per_shard in dict.fromkeys((r["format"], r["samples_per_shard"]) for r in rows):
        group = [r for r in rows if (r["format"], r["samples_per_shard"]) == (fmt, per_shard)]
        out.append(f"\n**What grows with N**: {fmt}, {per_shard:,} samples per shard\n")
        out.append("| metric | " + " | ".join(f"N = {r['n']:,}" for r in group) + " |")
        out.append("|---|" + "---:|" * len(group))
        for label, get in METRICS:
            try:
                cells = [get(r) for r in group]
            except (KeyError, ValueError):  # a context or order that was not measured
                continue
            out.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def check_space(out: Path, need: int) -> None:
    free = shutil.disk_usage(out).free
    print(
        f"free space in {out}: {free / 1e9:.1f} GB; the largest pack needs about {need / 1e9:.1f} GB", file=sys.stderr
    )
    if free < 1.2 * need:
        raise SystemExit(
            f"not enough free space in {out} ({free / 1e9:.1f} GB) for a pack of about "
            f"{need / 1e9:.1f} GB: pass --out on a larger disk, or smaller --n"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1_000_000, 4_000_000, 16_000_000])
    parser.add_argument("--samples-per-shard", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--formats", nargs="+", default=["tfrecord", "lmdb"], choices=["tfrecord", "lmdb"])
    parser.add_argument("--contexts", nargs="+", default=list(CONTEXTS), choices=CONTEXTS)
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(tempfile.gettempdir()) / "fastdata-scale",
        help="where the packs are written (default: a folder in the temporary directory)",
    )
    parser.add_argument("--json", type=Path, default=Path(__file__).resolve().parents[2] / "results" / "scale.json")
    parser.add_argument("--keep", action="store_true", help="keep each pack after measuring it")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="measure a finished pack of the same shape already in --out instead of writing it again "
        "(its pack time is not measured); implies --keep",
    )
    parser.add_argument(
        "--pass-samples",
        type=int,
        default=0,
        help="read only the first K samples of each shuffled pass (0: the whole pass)",
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    largest = max(args.n) * BYTES_PER_SAMPLE
    check_space(args.out, largest * (len(args.n) * len(args.formats) * len(args.samples_per_shard) if args.keep else 1))
    rows = []
    for n in sorted(args.n):
        for fmt in args.formats:
            for per_shard in args.samples_per_shard:
                rows.append(
                    measure(
                        n,
                        fmt,
                        per_shard,
                        args.out,
                        args.contexts,
                        args.keep or args.reuse,
                        sys.stderr.isatty(),
                        args.pass_samples,
                        args.reuse,
                    )
                )
                args.json.write_text(json.dumps(rows, indent=2) + "\n")  # kept as it goes: a long sweep may stop
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
