"""Loader throughput benchmark: fastdata against the pipelines users write, side by side.

``fastdata bench DATA`` packs the image folder DATA once into LMDB and TFRecord shards (cached next
to it), then measures every pipeline in round-robin order (p1, p2, ..., p1, p2, ...) so that a
drifting machine hurts all of them alike, and reports the median, min and max images/s of each,
the ratio to ``torch-pil``, the fraction of the machine's decode bound, first-batch latency, peak
memory of the process tree, a measured per-stage breakdown and, with CUDA, the GPU idle time of a
small training loop. See :func:`run_benchmark`. The pipelines are built in :mod:`fastdata.bench.pipelines`
and the packs kept in :mod:`fastdata.bench.pack_cache`.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from fastdata.bench import report
from fastdata.bench.decode_bound import measure_decode_bound
from fastdata.bench.gpu_training import measure_gpu_training
from fastdata.bench.loader_breakdown import BreakdownWindow
from fastdata.bench.measure import (
    BatchCheck,
    MemorySampler,
    measure_run,
    run_isolated,
    set_page_cache,
    usable_cores,
)
from fastdata.bench.pack_cache import STAMP, default_cache, folder_fingerprint, prepare_cache
from fastdata.bench.peers import harness
from fastdata.bench.pipelines import (
    BREAKDOWN_PIPELINES,
    DESCRIPTIONS,
    FLOAT_OUTPUT,
    PIPELINES,
    Context,
    build,
    inputs,
    unavailable,
)
from fastdata.bench.stages import measure_breakdown
from fastdata.packing.scan import scan_image_folder

logger = logging.getLogger(__name__)

__all__ = ["run_benchmark", "schedule"]

_BOUNDS = {"decode-bound": "fastdata", "decode-bound-cv2": "cv2"}


def schedule(pipelines: Sequence[str], repeats: int) -> list[tuple[int, str]]:
    """Round-robin order of the runs: ``[(0, p1), (0, p2), ..., (1, p1), (1, p2), ...]``.

    Raises:
        ValueError: ``repeats < 1``.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}; use 3 or more for a median")
    return [(r, name) for r in range(repeats) for name in pipelines]


# -- the comparison --------------------------------------------------------------------------------
def _one_run(
    name: str,
    ctx: Context,
    *,
    warm: bool,
    epochs: int,
    batches: int | None,
    progress: bool,
    label: str,
    breakdown: bool = False,
    warmup: int | None = None,
) -> dict[str, Any]:
    """Measure one run of pipeline ``name`` after setting the page cache.

    Set the page cache, then measure one run of ``name`` with the memory sampler on (and the loader's stage
    counters with ``breakdown``, for fastdata's loaders).
    """
    cache_s = set_page_cache(inputs(name, ctx), warm=warm)
    with MemorySampler() as mem:
        if name in _BOUNDS:
            limit = None if batches is None else (batches + _warmup(warmup, ctx)) * ctx.batch_size
            run = measure_decode_bound(ctx.roots["tfrecord"], size=ctx.size, limit=limit, method=_BOUNDS[name])
        else:
            counted = breakdown and name in BREAKDOWN_PIPELINES
            window = BreakdownWindow(usable_cores(), lambda: mem.cpu_ns) if counted else None
            with window if window is not None else contextlib.nullcontext():
                iterable, close = build(name, ctx)
                try:
                    check = BatchCheck(ctx.size, ctx.batch_size, torch.float32 if name in FLOAT_OUTPUT else torch.uint8)
                    device = ctx.device if name in FLOAT_OUTPUT else torch.device("cpu")
                    run = measure_run(
                        iterable,
                        check=check,
                        epochs=epochs,
                        batches=batches,
                        warmup=_warmup(warmup, ctx),
                        device=device,
                        desc=label,
                        progress=progress,
                        on_window=window.event if window is not None else None,
                    )
                    run["output"] = check.result()
                finally:
                    close()
                if window is not None:
                    run["loader_breakdown"] = window.result(run["images"], run["seconds"])
    run.update(peak_rss_mb=mem.peak_rss_mb, peak_pss_mb=mem.peak_pss_mb, page_cache_s=cache_s)
    return run


def _warmup(warmup: int | None, ctx: Context) -> int:
    """Batches left out of each run's timed window: ``warmup``, by default one per worker."""
    return max(1, ctx.workers) if warmup is None else warmup


def _check_args(
    pipelines: Sequence[str] | None,
    batch_size: int,
    workers: int | None,
    batches: int | None,
    epochs: int,
    repeats: int,
    size: int,
    warmup: int | None = None,
) -> list[str]:
    names = list(PIPELINES if pipelines is None else pipelines)
    unknown = [n for n in names if n not in PIPELINES]
    if unknown or not names or len(set(names)) != len(names):
        raise ValueError(f"pipelines must be distinct names from {list(PIPELINES)}, got {names!r}")
    for arg, value, low in (
        ("batch_size", batch_size, 1),
        ("epochs", epochs, 1),
        ("repeats", repeats, 1),
        ("size", size, 1),
        ("workers", workers, 0),
        ("batches", batches, 1),
        ("warmup", warmup, 0),
    ):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
            raise ValueError(f"{arg} must be an int >= {low}, got {value!r}")
    return names


def _gpu_training(names: list[str], entries: dict[str, Any], ctx: Context, classes: int, warm: bool) -> dict[str, Any]:
    out = {}
    for name in [n for n in names if n in FLOAT_OUTPUT and entries[n]["status"] == "ok"]:
        set_page_cache(inputs(name, ctx), warm=warm)
        iterable, close = build(name, ctx)
        try:
            out[name] = measure_gpu_training(iterable, num_classes=classes, batch_size=ctx.batch_size, size=ctx.size)
        except Exception as exc:  # noqa: BLE001 - reported, the other pipelines still run
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            close()
    return out


def run_benchmark(
    data: str | os.PathLike,
    *,
    pipelines: Sequence[str] | None = None,
    batch_size: int = 256,
    workers: int | None = None,
    batches: int | None = None,
    epochs: int = 1,
    repeats: int = 3,
    cache: str | os.PathLike | None = None,
    warm: bool = True,
    size: int = 224,
    breakdown_samples: int = 500,
    isolate: bool = True,
    progress: bool = True,
    peers: Sequence[str] = (),
    breakdown: bool = False,
    warmup: int | None = None,
) -> dict[str, Any]:
    """Measure the pipelines on the image folder ``data`` in round-robin order and return all results.

    Args:
        data: image folder (one subfolder per class).
        pipelines: names from :data:`PIPELINES` (default: all); unavailable ones are skipped with a note.
        batch_size: images per batch.
        workers: DataLoader workers (default: the usable cores).
        batches: timed batches per run instead of whole passes (overrides ``epochs``).
        epochs: whole passes per run.
        repeats: runs per pipeline (the order is p1, p2, ..., p1, p2, ...).
        cache: folder for the packed shards (default ``DATA.parent / (DATA.name + ".fastdata-cache")``).
        warm: read each pipeline's input files right before its run; False drops them from the
            page cache instead (``posix_fadvise(DONTNEED)``), a cold-cache measurement.
        size: output crop size.
        breakdown_samples: images timed stage by stage for the breakdown (0: no breakdown).
        isolate: run every measurement in a fresh spawned process (fair memory numbers, no state
            carried from one pipeline to the next); False runs them in this process.
        progress: show progress bars and a line per finished run.
        peers: other loaders to measure in the same rounds (names from ``fastdata.bench.peers.PEERS``), each
            converted first by its own writer (``cache/peers/<name>``); one that is not installed or fails is
            reported with the reason.
        warmup: batches of each run left out of its timed window (default: one per worker). Over more than one
            pass (``epochs``), a whole pass of warm-up measures the steady state of training: workers started,
            fastdata's shared-memory buffers reused rather than fresh (a fresh page costs a fault and a zeroing).
        breakdown: count the CPU time of every stage inside fastdata's loader runs (workers and main process,
            :mod:`fastdata.bench.loader_breakdown`), summing to each run's measured time per image.

    Returns:
        A JSON-ready dict: ``config``, ``machine``, ``dataset``, ``pipelines`` (per name: status,
        runs, images/s statistics, ratios, first-batch latency, peak memory, output check),
        ``breakdown``, ``gpu_training`` (None without CUDA). No goals: the user's report holds measurements
        (the project's goals are checked by ``bench/loaders.py throughput``).

    Raises:
        FileNotFoundError: ``data`` is not an image folder.
        ValueError: an unknown pipeline name or a bad number.
    """
    names = _check_args(pipelines, batch_size, workers, batches, epochs, repeats, size, warmup)
    peers = harness.check_names(peers)
    data = Path(data)
    scan = scan_image_folder(data)
    workers = usable_cores() if workers is None else workers
    cache = Path(cache) if cache is not None else default_cache(data)
    roots = prepare_cache(data, cache, workers=workers, progress=progress)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ctx = Context(data, roots, batch_size, workers, size, device, [data / p for p in scan.paths])
    entries: dict[str, dict[str, Any]] = {}
    for name in names:
        note = unavailable(name)
        entries[name] = {"status": "skipped" if note else "ok", "description": DESCRIPTIONS[name], "runs": []}
        if note:
            entries[name]["note"] = note
            _say(f"{name}: {note}", progress)
    if peers:  # converted first by their own writers, then measured in the same rounds
        ready = harness.prepare_peers(
            [str(p) for p in ctx.folder_files],
            scan.labels,
            cache,
            peers,
            isolate=isolate,
            fingerprint=folder_fingerprint(data, scan.paths, scan.classes),
            say=lambda line: _say(line, progress),
        )
        entries.update(ready)
        if "fastdata-uint8" in entries:  # fastdata's own conversion: the TFRecord pack
            entries["fastdata-uint8"]["conversion"] = harness.pack_stats(roots["tfrecord"], cache / f"tfrecord{STAMP}")
        ctx.peer_dirs.update({n: e["dir"] for n, e in ready.items() if e["status"] == "ok"})
        names += list(peers)
    order = schedule([n for n in names if entries[n]["status"] == "ok"], repeats)
    for k, (rep, name) in enumerate(order, 1):
        if entries[name]["status"] != "ok":
            continue
        label = f"[{k}/{len(order)}] {name}"
        try:
            kwargs: dict[str, Any] = {
                "warm": warm,
                "epochs": epochs,
                "batches": batches,
                "progress": progress,
                "label": label,
                "breakdown": breakdown,
                "warmup": warmup,
            }
            run = run_isolated(_one_run, name, ctx, **kwargs) if isolate else _one_run(name, ctx, **kwargs)
        except Exception as exc:  # noqa: BLE001 - one broken pipeline must not hide the others' numbers
            logger.debug("%s failed", name, exc_info=True)
            entries[name].update(status="failed", note=f"failed: {type(exc).__name__}: {exc}")
            _say(f"{label} FAILED: {type(exc).__name__}: {exc}", progress)
            continue
        entries[name]["runs"].append({"repeat": rep, **run})
        first = "" if run["first_batch_s"] is None else f"  first batch {run['first_batch_s']:.2f} s"
        _say(
            f"{label:<28} {run['images_per_s']:9.1f} images/s{first}  "
            f"peak {run['peak_pss_mb'] or run['peak_rss_mb'] or 0:.0f} MB",
            progress,
        )
    report.summarize_pipelines(entries, batch_size)
    files = [str(p) for p in ctx.folder_files]
    stage_breakdown = (
        measure_breakdown(roots, files, size=size, samples=breakdown_samples, batch_size=batch_size)
        if breakdown_samples > 0
        else {}
    )
    gpu = _gpu_training(names, entries, ctx, len(scan.classes), warm) if device.type == "cuda" else None
    window = f"{batches} batches" if batches else f"{epochs} epoch(s)"
    left_out = _warmup(warmup, ctx)
    return {
        "config": {
            "data": str(data),
            "cache": str(cache),
            "batch_size": batch_size,
            "workers": workers,
            "epochs": None if batches else epochs,
            "batches": batches,
            "repeats": repeats,
            "size": size,
            "mode": "warm" if warm else "cold",
            "isolated": isolate,
            "device": str(device),
            "dataset_count": len(scan.paths),
            "warmup": left_out,
            "window": f"{window} per run, first {left_out} batch(es) not timed",
            "order": [f"{name}#{rep}" for rep, name in order],
        },
        "machine": report.machine_info(),
        "dataset": report.dataset_stats(data, scan.paths),
        "pipelines": entries,
        "breakdown": stage_breakdown,
        "gpu_training": gpu,
        "gpu_note": None if gpu is not None else "no CUDA device: the GPU path was not measured",
        **({"peers": {"names": list(peers), "baseline": "fastdata-uint8"}} if peers else {}),
    }


def _say(line: str, progress: bool) -> None:
    if progress:
        from tqdm import tqdm

        tqdm.write(line)
    else:
        logger.info(line)
