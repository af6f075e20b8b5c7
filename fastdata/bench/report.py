"""What the benchmark reports: statistics, the dataset, text tables and JSON.

The chart is drawn by ``chart.py``, the machine described by ``machine.py``.

The user's table holds measurements only: no goals. A row whose numbers are not to be trusted says so: too few
timed batches per run (:data:`MIN_TIMED_BATCHES`), or repeats that spread over :data:`MAX_SPREAD_PCT` of the median.
"""

from __future__ import annotations

import json
import logging
import math
import os
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastdata.bench.chart import MATPLOTLIB_HINT, plot_results
from fastdata.bench.loader_breakdown import combine, format_loader_breakdown
from fastdata.bench.machine import machine_info

logger = logging.getLogger(__name__)

__all__ = [
    "MATPLOTLIB_HINT",
    "MAX_SPREAD_PCT",
    "MIN_TIMED_BATCHES",
    "OWN_BOUND",
    "dataset_stats",
    "format_report",
    "machine_info",
    "plot_results",
    "summarize",
    "summarize_pipelines",
    "write_json",
]

#: Fewer timed batches per run than this and the run is mostly start-up and pass tail: its row is flagged.
MIN_TIMED_BATCHES = 10
#: Repeats spread wider than this (max - min, percent of the median) are flagged as noise.
MAX_SPREAD_PCT = 25.0
#: Each pipeline's kernel bound: its per-image work alone, one process per core.
OWN_BOUND = {
    "fastdata-lmdb": "decode-bound",
    "fastdata-tfrecord": "decode-bound",
    "fastdata-uint8": "decode-bound",
    "fastdata-thread": "decode-bound",
    "fastdata-uint8-thread": "decode-bound",
    "torch-cv2": "decode-bound-cv2",
}


def summarize(values: Sequence[float]) -> dict[str, float]:
    """Median, min, max, mean and spread of repeated measurements.

    Args:
        values: one value per run (at least one).

    Returns:
        ``{"median", "min", "max", "mean", "stdev", "spread_pct", "n"}``; ``spread_pct`` is
        ``(max - min) / median`` in percent and ``stdev`` is 0 for a single run.

    Raises:
        ValueError: ``values`` is empty.
    """
    values = [float(v) for v in values]
    if not values:
        raise ValueError("summarize needs at least one value, got an empty sequence")
    median = statistics.median(values)
    return {
        "median": median,
        "min": min(values),
        "max": max(values),
        "mean": statistics.fmean(values),
        "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
        "spread_pct": 100.0 * (max(values) - min(values)) / median if median else 0.0,
        "n": len(values),
    }


def summarize_pipelines(entries: dict[str, dict[str, Any]], batch_size: int | None = None) -> None:
    """Add statistics, ratios and flags to each pipeline's entry (in place).

    Add statistics, ratios to ``torch-pil``, each pipeline's fraction of its kernel bound, the output check and the
    flags of untrustworthy rows to each entry (in place).

    Args:
        entries: ``{pipeline: {"status", "runs": [...]}}`` as built by the benchmark.
        batch_size: the run's batch size (a kernel bound over fewer than ``MIN_TIMED_BATCHES`` batches' worth of
            images is flagged).
    """
    for entry in entries.values():
        runs = entry.get("runs") or []
        if entry["status"] != "ok" or not runs:
            continue
        entry["images_per_s"] = summarize([r["images_per_s"] for r in runs])
        firsts = [r["first_batch_s"] for r in runs if r["first_batch_s"] is not None]
        entry["first_batch_s"] = statistics.median(firsts) if firsts else None
        pss = [r["peak_pss_mb"] for r in runs if r["peak_pss_mb"] is not None]
        rss = [r["peak_rss_mb"] for r in runs if r["peak_rss_mb"] is not None]
        kind, values = ("PSS", pss) if pss else ("RSS", rss)
        entry["peak_mem_mb"], entry["peak_mem_kind"] = (max(values), kind) if values else (None, None)
        outputs = [r["output"] for r in runs if "output" in r]
        if outputs:
            ok = all(o["ok"] for o in outputs)
            entry["output"] = {
                **outputs[0],
                "ok": ok,
                "mismatches": sum(o["mismatches"] for o in outputs),
                "batches_checked": sum(o["batches_checked"] for o in outputs),
                "first_mismatch": next((o["first_mismatch"] for o in outputs if o["first_mismatch"]), None),
            }
            kind = "float32" if "float32" in outputs[0]["expected"] else "uint8"
            entry["output_summary"] = f"{kind} {'ok' if ok else 'MISMATCH'}"
        else:
            entry["output_summary"] = "decode only"
        counted = combine([r.get("loader_breakdown") for r in runs])
        if counted is not None:
            entry["loader_breakdown"] = counted
    base = entries.get("torch-pil", {}).get("images_per_s", {}).get("median")
    bound = entries.get("decode-bound", {}).get("images_per_s", {}).get("median")
    for name, entry in entries.items():
        median = entry.get("images_per_s", {}).get("median")
        entry["ratio_to_torch_pil"] = median / base if median is not None and base else None
        entry["fraction_of_decode_bound"] = median / bound if median is not None and bound else None
        own = entries.get(OWN_BOUND.get(name, ""), {}).get("images_per_s", {}).get("median")
        entry["fraction_of_own_bound"] = median / own if median is not None and own else None
        if median is not None:
            entry["flags"] = _flags(entry, batch_size)


def _flags(entry: dict[str, Any], batch_size: int | None) -> list[str]:
    """Why a row's numbers are not to be trusted (empty when they are)."""
    flags = []
    runs = entry["runs"]
    timed = [r["batches"] - (r.get("warmup") or 0) for r in runs if r.get("batches") is not None]
    if timed and min(timed) < MIN_TIMED_BATCHES:
        flags.append(
            f"too few timed batches ({min(timed)} < {MIN_TIMED_BATCHES} per run): start-up and the pass's "
            "tail weigh in; use a larger folder, --epochs or --batches"
        )
    images = [r["images"] for r in runs if r.get("batches") is None and r.get("images") is not None]
    if images and batch_size and min(images) < MIN_TIMED_BATCHES * batch_size:
        flags.append(
            f"a bound over {min(images)} images (< {MIN_TIMED_BATCHES} batches of {batch_size}): too short "
            "to be stable; use a larger folder"
        )
    spread = entry["images_per_s"]["spread_pct"]
    if len(runs) > 1 and spread > MAX_SPREAD_PCT:
        flags.append(f"repeats spread {spread:.0f}% of the median (> {MAX_SPREAD_PCT:.0f}%): a noisy measurement")
    return flags


def dataset_stats(root: str | os.PathLike, paths: Sequence[str], *, max_headers: int = 20000) -> dict[str, Any]:
    """Count, classes-independent size statistics and file kinds of an image folder.

    Args:
        root: the image folder.
        paths: image paths relative to ``root`` (e.g. ``scan_image_folder(root).paths``).
        max_headers: at most this many (evenly spaced) headers are read for the pixel sizes.

    Returns:
        ``count``, ``total_mb``, ``mean_file_kb``, ``mean_height``, ``mean_width``,
        ``mean_megapixels`` and ``extensions`` (count per lower-case extension).
    """
    from PIL import Image

    root = Path(root)
    sizes = np.array([os.stat(root / p).st_size for p in paths], dtype=np.float64)
    picks = np.unique(np.linspace(0, len(paths) - 1, min(len(paths), max_headers)).astype(int))
    dims = []
    for i in picks:
        try:
            with Image.open(root / paths[i]) as img:
                dims.append((img.height, img.width))
        except Exception:  # noqa: BLE001 - a corrupt file does not stop the statistics
            continue
    dims_arr = np.array(dims, dtype=np.float64).reshape(-1, 2)
    extensions: dict[str, int] = {}
    for p in paths:
        ext = os.path.splitext(p)[1].lower()
        extensions[ext] = extensions.get(ext, 0) + 1
    return {
        "count": len(paths),
        "total_mb": round(sizes.sum() / 1e6, 1),
        "mean_file_kb": round(sizes.mean() / 1e3, 1) if len(sizes) else 0.0,
        "mean_height": round(dims_arr[:, 0].mean(), 1) if len(dims_arr) else None,
        "mean_width": round(dims_arr[:, 1].mean(), 1) if len(dims_arr) else None,
        "mean_megapixels": round((dims_arr[:, 0] * dims_arr[:, 1]).mean() / 1e6, 3) if len(dims_arr) else None,
        "extensions": dict(sorted(extensions.items())),
    }


def _fmt(value: float | None, spec: str, missing: str = "-") -> str:
    return missing if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def format_results_table(results: dict[str, Any]) -> str:
    """The main table: one line per pipeline; a flagged row is marked ``!`` and its reasons listed below."""
    header = (
        f"{'pipeline':<18} {'output':<22} {'images/s median [min-max]':<28} {'x torch-pil':>11} "
        f"{'of its bound':>12} {'1st batch s':>11} {'peak mem MB':>12}"
    )
    lines, notes = [header, "-" * len(header)], []
    for name, entry in results["pipelines"].items():
        if entry["status"] != "ok":
            lines.append(f"{name:<18} {entry['status'].upper()}: {entry.get('note', '')}")
            continue
        ips = entry["images_per_s"]
        mark = "!" if entry.get("flags") else " "
        spread = f"{ips['median']:8.1f} [{ips['min']:.1f}-{ips['max']:.1f}]{mark}"
        ratio = _fmt(entry.get("ratio_to_torch_pil"), ".2f") + ("x" if entry.get("ratio_to_torch_pil") else "")
        frac = entry.get("fraction_of_own_bound")
        frac_s = _fmt(None if frac is None else 100 * frac, ".0f") + ("%" if frac is not None else "")
        mem = entry.get("peak_mem_mb")
        lines.append(
            f"{name:<18} {entry.get('output_summary', ''):<22} {spread:<28} {ratio:>11} {frac_s:>12} "
            f"{_fmt(entry.get('first_batch_s'), '.2f'):>11} {_fmt(mem, '.0f'):>12}"
        )
        notes += [f"! {name}: {flag}" for flag in entry.get("flags", [])]
    kinds = {e.get("peak_mem_kind") for e in results["pipelines"].values() if e.get("peak_mem_kind")}
    bounds = sorted({b for n, b in OWN_BOUND.items() if n in results["pipelines"]})
    lines.append(
        "of its bound: images/s over the same per-image work alone, one process per core ("
        + "; ".join(f"{b} for {', '.join(n for n, o in OWN_BOUND.items() if o == b)}" for b in bounds)
        + ")"
    )
    lines.append(
        f"peak mem: {'/'.join(sorted(kinds)) or 'n/a (pip install psutil)'} summed over the main process "
        "and its children, sampled every 0.25 s; 1st batch: from iter() to the first batch"
    )
    return "\n".join(lines + notes)


def format_breakdown(breakdown: dict[str, Any]) -> str:
    """The per-stage table of each measured pipeline (CPU ms per image, one thread)."""
    lines = []
    for name, part in breakdown.items():
        if not isinstance(part, dict) or "stages" not in part:
            continue
        total = part["total_ms"]
        lines.append(
            f"{name}: {part['samples']} samples, {total:.2f} ms/image on one core "
            f"(= {1000 / total if total else 0:.0f} images/s/core); {part.get('note', '')}"
        )
        for stage in part["stages"]:
            share = 100 * stage["ms_per_image"] / total if total else 0.0
            lines.append(f"  {stage['stage']:<34} {stage['ms_per_image']:8.3f} ms  {share:5.1f}%")
    return "\n".join(lines)


def format_report(results: dict[str, Any]) -> str:
    """Everything a person reads after a run: machine, dataset, table (with its flags), breakdowns, GPU."""
    m, d, c = results["machine"], results["dataset"], results["config"]
    out = [
        f"machine: {m['cpu']}, {m['usable_cores']} usable cores, {m['ram_gb']} GB RAM, GPU: {m['gpu'] or 'none'}",
        f"versions: torch {m['torch']}, numpy {m['numpy']}, cv2 {m['cv2']}, pillow {m['pillow']}, "
        f"PyTurboJPEG {m['turbojpeg']}, DALI {m['dali'] or 'not installed'}",
        f"dataset: {d['count']} images, mean {d['mean_width']}x{d['mean_height']} px, {d['mean_file_kb']} KB/file "
        f"({d['total_mb']} MB), {c['data']}",
        f"config: batch {c['batch_size']}, {c['workers']} workers, {c['window']}, {c['repeats']} repeats "
        f"(round-robin), page cache {c['mode']}, output {c['size']}x{c['size']}",
        "",
        format_results_table(results),
        "",
        "breakdown (measured in-process, one thread):",
        format_breakdown(results.get("breakdown", {})),
    ]
    counted = [(n, e["loader_breakdown"]) for n, e in results["pipelines"].items() if e.get("loader_breakdown")]
    if counted:
        out += [
            "",
            "loader breakdown (--breakdown: CPU time of each stage inside the runs above, in core-microseconds "
            "per image; the lines add up to cores / (images/s)):",
        ]
        out += [format_loader_breakdown(name, part) for name, part in counted]
    gpu = results.get("gpu_training")
    if gpu:
        out += ["", "GPU training with a dummy model (images/s, GPU idle fraction):"]
        for name, g in gpu.items():
            if "error" in g or "note" in g:
                out.append(f"  {name:<18} {g.get('error') or g.get('note')}")
            else:
                out.append(
                    f"  {name:<18} {g['images_per_s']:8.1f} img/s, "
                    f"model alone {g['model_only_images_per_s']:.1f}"
                    f" img/s, GPU idle {100 * g['gpu_idle_fraction']:.1f}%"
                )
    return "\n".join(out)


def write_json(results: dict[str, Any], path: str | os.PathLike) -> Path:
    """Write ``results`` as indented JSON (parent folders created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, sort_keys=False, default=str) + "\n", encoding="utf-8")
    return path
