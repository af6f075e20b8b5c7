"""Charts of the benchmark results: one matplotlib PNG next to each results JSON (``bench/results/NAME.png``).

Every entry point calls :func:`chart_new_results` after its script ran (``bench/_lib/dispatch.py``), so a benchmark
run leaves its chart beside its JSON; ``python bench/charts.py`` redraws them all from the JSON files already there
(``--out DIR`` writes the PNGs elsewhere, e.g. ``docs/_static/bench``). A file this module has no chart for is
named and left alone. Loader comparisons (``fastdata bench --json``) are drawn by ``fastdata.bench.chart``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "results"


def _bars(title: str, xlabel: str, rows: list[tuple[str, float, float, float]], path: Path) -> Path:
    """Horizontal bars: (label, median, min, max) per row, top to bottom, value printed at each bar's end."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 1.4 + 0.42 * len(rows)))
    labels = [r[0] for r in rows][::-1]
    med = [r[1] for r in rows][::-1]
    err = [[r[1] - r[2] for r in rows][::-1], [r[3] - r[1] for r in rows][::-1]]
    ax.barh(labels, med, xerr=err, color="#1f77b4", capsize=3, ecolor="black")
    peak = max([r[3] for r in rows] + [1e-9])
    for y, r in enumerate(rows[::-1]):
        ax.text(r[3] + 0.01 * peak, y, f"{r[1]:.3g}", va="center", fontsize=8)
    ax.set_xlim(0, peak * 1.2)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _spread(values: Iterable[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    return ordered[len(ordered) // 2], ordered[0], ordered[-1]


def _stat(entry: dict[str, float]) -> tuple[float, float, float]:
    return entry["median"], entry["min"], entry["max"]


def _kernel(data: dict[str, Any], path: Path) -> Path:
    rows = [
        (f"{profile}: {name}", *_stat(stats[name]))
        for profile, stats in data.items()
        for name in ("cv2", "turbojpeg", "native")
        if name in stats
    ]
    return _bars("crop kernel, one core: decode + crop + resize to 224", "images/s (median, min-max)", rows, path)


def _kernel_intervals(data: dict[str, Any], path: Path) -> Path:
    rows = [(name, *_stat(stats)) for name, stats in data["methods"].items()]
    title = f"crop decode by method, {data['images']} images, {data['repeats']} repeats"
    return _bars(title, "images/s (median, min-max)", rows, path)


def _kernel_rates(data: dict[str, Any], path: Path) -> Path:
    rows = [(name, *_spread(values)) for name, values in data["rates"].items()]
    count = data.get("images", data.get("records"))
    return _bars(f"{count} images, {data['repeats']} repeats, {data['clock']} clock", "images/s", rows, path)


def _pack_engines(data: dict[str, Any], path: Path) -> Path:
    rows = [
        (f"{config}: {engine}", *_spread(values))
        for config, entry in data["configs"].items()
        for engine, values in entry["rates"].items()
    ]
    title = f"pack engines, {data['images']} images of {data['size']}, {data['cpus']} CPUs"
    return _bars(title, "images/s (median, min-max of the repeats)", rows, path)


def _remote(data: dict[str, Any], path: Path) -> Path:
    rows = [
        (f"{run['source']}, {run['order']}, pass {p['pass']}", p["images_per_s"], p["images_per_s"], p["images_per_s"])
        for run in data["runs"]
        for p in run["passes"]
    ]
    title = f"{data['shards']} TFRecord shards, batch {data['batch_size']}, {data['workers']} workers"
    return _bars(title, "images/s", rows, path)


def _shuffle_quality(data: list[dict[str, Any]], path: Path) -> Path:
    rows = [
        (f"{r['order']} / {r['packing'][:24]}", r["classes/batch"], r["classes/batch"], r["classes/batch"])
        for r in data
    ]
    return _bars("sampler orders: distinct classes per batch (higher is better mixed)", "classes per batch", rows, path)


def _scale_final(data: dict[str, Any], path: Path) -> Path:
    grouped: dict[str, list[float]] = {}
    for row in data["rows"]:
        if row["probe"] == "open":
            grouped.setdefault(f"open {row['format']}, N={row['n']:,}", []).append(row["open_s"])
    rows = [(label, *_spread(values)) for label, values in grouped.items()]
    return _bars(f"ShardDataset(root) open time, {data['date']}", "seconds", rows, path)


def _loaders(data: dict[str, Any], path: Path) -> Path | None:
    from fastdata.bench.chart import plot_results

    return plot_results(data, path)


#: Chart makers by results file name (without ``.json``); loader comparisons are recognised by their keys.
CHARTS: dict[str, Callable[[Any, Path], Path | None]] = {
    "kernel": _kernel,
    "kernel-intervals": _kernel_intervals,
    "kernel-per-sample": _kernel_rates,
    "kernel-scales": _kernel_rates,
    "pack-engines": _pack_engines,
    "remote": _remote,
    "shuffle-quality": _shuffle_quality,
    "scale-final": _scale_final,
}


def chart(json_path: str | os.PathLike, out_dir: str | os.PathLike | None = None) -> Path | None:
    """Draw the chart of one results file.

    Args:
        json_path: A results JSON written by a benchmark.
        out_dir: Folder for the PNG (default: beside the JSON); the PNG has the JSON's name.

    Returns:
        The PNG's path, or None when there is no chart for this file (or matplotlib is missing).
    """
    source = Path(json_path)
    data = json.loads(source.read_text(encoding="utf-8"))
    target = Path(out_dir or source.parent) / (source.stem + ".png")
    if isinstance(data, dict) and "pipelines" in data and "machine" in data:
        return _loaders(data, target)
    maker = CHARTS.get(source.stem) or _by_shape(data)
    return maker(data, target) if maker else None


def _by_shape(data: Any) -> Callable[[Any, Path], Path | None] | None:
    """The chart maker for a results file saved under another name (``--json PATH``), told by its keys."""
    if isinstance(data, list):
        return _shuffle_quality if data and isinstance(data[0], dict) and "classes/batch" in data[0] else None
    if not isinstance(data, dict):
        return None
    keys = set(data)
    shapes: list[tuple[set[str], Callable[[Any, Path], Path | None]]] = [
        ({"methods", "ratios"}, _kernel_intervals),
        ({"rates", "repeats", "clock"}, _kernel_rates),
        ({"configs", "images"}, _pack_engines),
        ({"runs", "shards"}, _remote),
        ({"rows", "date"}, _scale_final),
    ]
    for needed, maker in shapes:
        if needed <= keys:
            return maker
    if data and all(isinstance(v, dict) and "native" in v for v in data.values()):
        return _kernel
    return None


def chart_new_results(since: float, results: Path = RESULTS, argv: list[str] | None = None) -> list[Path]:
    """Chart every results JSON modified at or after ``since`` (a ``time.time()``).

    The files looked at are those in ``results`` and the one a ``--json PATH`` in ``argv`` (the script's arguments)
    names, wherever it is.
    """
    made = []
    named = [Path(argv[k + 1]) for k, arg in enumerate(argv or []) if arg == "--json" and k + 1 < len(argv or [])]
    named += [Path(arg.split("=", 1)[1]) for arg in argv or [] if arg.startswith("--json=")]
    candidates = sorted(set(results.glob("*.json")) | {p.resolve() for p in named if p.suffix == ".json"})
    for source in candidates:
        if source.is_file() and source.stat().st_mtime >= since:
            try:
                png = chart(source)
            except ImportError:
                print("matplotlib is not installed, so no chart was drawn: pip install 'fastdata[plot]'")
                return made
            if png is not None:
                print(f"chart written to {png}")
                made.append(png)
    return made
