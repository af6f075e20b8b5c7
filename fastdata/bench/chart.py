"""The benchmark's chart: images/s per pipeline as horizontal bars, with a legend that says what is what."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.artist import Artist

logger = logging.getLogger(__name__)

__all__ = ["MATPLOTLIB_HINT", "plot_results"]

MATPLOTLIB_HINT = "matplotlib is not installed, so no chart was drawn: `pip install 'fastdata[plot]'` (or matplotlib)"

#: Bar colours by kind, named in the chart's legend.
_KINDS = (
    ("torch", "#9e9e9e", "torch DataLoader (PIL or OpenCV), written by hand"),
    ("fastdata", "#1f77b4", "fastdata (ShardDataset + DataLoaderX)"),
    ("dali", "#2ca02c", "DALI"),
    ("bound", "#c5b0d5", "a kernel bound: the per-image work alone, one process per core"),
    ("peer", "#ff7f0e", "another loader (--peers)"),
)


def _kind(name: str) -> str:
    if name.startswith("decode-bound"):
        return "bound"
    head = name.split("-")[0]
    return head if head in ("torch", "fastdata", "dali") else "peer"


def plot_results(results: dict[str, Any], path: str | os.PathLike) -> Path | None:
    """Horizontal bars of images/s, one per pipeline.

    Horizontal bars of images/s (median, min-max whiskers, ratio labels, fastdata's kernel bound as a line), with
    a legend naming the colours, the line and the whiskers.

    Returns:
        The PNG's path, or None (with a logged note) when matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
    except ImportError:
        logger.warning(MATPLOTLIB_HINT)
        return None
    entries = [(n, e) for n, e in results["pipelines"].items() if e["status"] == "ok" and n != "decode-bound"]
    fig, ax = plt.subplots(figsize=(9, 2.2 + 0.55 * max(len(entries), 1)))
    names = [n for n, _ in entries][::-1]
    med = np.array([e["images_per_s"]["median"] for _, e in entries][::-1])
    low = med - np.array([e["images_per_s"]["min"] for _, e in entries][::-1])
    high = np.array([e["images_per_s"]["max"] for _, e in entries][::-1]) - med
    colours = dict((kind, colour) for kind, colour, _ in _KINDS)
    ax.barh(names, med, xerr=[low, high], color=[colours[_kind(n)] for n in names], capsize=4, ecolor="black")
    peak = max(med.max() if len(med) else 0.0, 1.0)
    handles: list[Artist] = [
        Patch(color=colour, label=label) for kind, colour, label in _KINDS if any(_kind(n) == kind for n in names)
    ]
    handles.append(Line2D([], [], color="black", marker="|", linestyle="-", label="whiskers: min-max of the repeats"))
    bound = results["pipelines"].get("decode-bound", {})
    if bound.get("status") == "ok":
        value = bound["images_per_s"]["median"]
        ax.axvline(value, color="#d62728", linestyle="--")
        handles.append(
            Line2D(
                [],
                [],
                color="#d62728",
                linestyle="--",
                label=f"fastdata's kernel bound (decode-bound): {value:.0f} img/s",
            )
        )
        peak = max(peak, value)
    pipelines = results["pipelines"]
    for y, (name, value) in enumerate(zip(names, med, strict=False)):
        uint8 = "uint8" in pipelines[name].get("output_summary", "")
        base = pipelines.get("torch-cv2" if uint8 else "torch-pil", {}).get("images_per_s", {}).get("median")
        shown = base and _kind(name) != "bound"
        ratio = f"  ({value / base:.2f}x {'torch-cv2' if uint8 else 'torch-pil'})" if shown else ""
        x = pipelines[name]["images_per_s"]["max"] + 0.01 * peak
        ax.text(x, y, f"{value:.0f}{ratio}", va="center", fontsize=9)
    labels = [
        n
        + (" [uint8]" if "uint8" in pipelines[n].get("output_summary", "") else "")
        + (" (!)" if pipelines[n].get("flags") else "")
        for n in names
    ]
    ax.set_yticks(range(len(names)), labels)
    if any(pipelines[n].get("flags") for n in names):
        handles.append(
            Patch(color="none", label="(!) not to be trusted: too few timed batches or a wide spread (see the report)")
        )
    ax.set_xlim(0, peak * 1.35)
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.16 - 0.02 * len(handles) / 2),
        ncol=2,
        fontsize=8,
        framealpha=0.9,
    )
    m, c = results["machine"], results["config"]
    ax.set_xlabel("images/s (median of round-robin repeats; [uint8]: uint8 batches, the others normalized float)")
    ax.set_title(
        f"{c['dataset_count']} images, batch {c['batch_size']}, {c['workers']} workers, "
        f"{c['mode']} cache - {m['usable_cores']} cores {m['cpu'][:40]}",
        fontsize=9,
    )
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path
