"""Loader throughput benchmark: fastdata against the pipelines users write, side by side.

``fastdata bench DATA`` packs the image folder DATA once into LMDB and TFRecord shards (cached next
to it), then measures every pipeline in round-robin order (p1, p2, ..., p1, p2, ...) so that a
drifting machine hurts all of them alike, and reports the median, min and max images/s of each,
the ratio to ``torch-pil``, the fraction of the machine's decode bound, first-batch latency, peak
memory of the process tree, a measured per-stage breakdown and, with CUDA, the GPU idle time of a
small training loop. See :func:`run_benchmark`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from fastdata._util import optional as _optional
from fastdata.bench import report
from fastdata.bench.measure import (
    BatchCheck, MemorySampler, measure_decode_bound, measure_run, run_isolated, set_page_cache, usable_cores,
)
from fastdata.bench.peers import harness
from fastdata.bench.stages import measure_breakdown, measure_gpu_training
from fastdata.bench.baselines import (
    IMAGENET_MEAN, IMAGENET_STD, CV2RandomResizedCropFlip, FolderDataset, cv2_loader, cv2_worker_init,
    pil_train_transform, uint8_collate,
)
from fastdata.packing.scan import scan_image_folder

logger = logging.getLogger(__name__)

__all__ = ["PIPELINES", "default_cache", "prepare_cache", "run_benchmark", "schedule"]

#: Every pipeline the benchmark knows, in the default order.
PIPELINES: tuple[str, ...] = (
    "torch-pil", "torch-cv2", "fastdata-lmdb", "fastdata-tfrecord", "fastdata-uint8", "dali", "decode-bound",
    "decode-bound-cv2",
)
_DESCRIPTIONS = {
    "torch-pil": "ImageFolder + PIL RandomResizedCrop/flip/ToTensor/Normalize in workers, DataLoader",
    "torch-cv2": "ImageFolder + cv2.imdecode/resize/numpy flip, uint8 collate, DataLoader",
    "fastdata-lmdb": "ShardDataset(lmdb, RandomResizedCrop, batch decoded in place) > DataLoaderX > float: "
                     "NormalizeCollate in the workers (CPU) or DataPrefetcher (CUDA)",
    "fastdata-tfrecord": "the same over the TFRecord shards",
    "fastdata-uint8": "ShardDataset(tfrecord) > DataLoaderX(fast_collate): uint8 batches, no prefetcher",
    "dali": "fastdata.dali.DALILoader over the TFRecord shards",
    "decode-bound": "fastdata's RandomResizedCrop decode alone on pre-read bytes, one process per core (the limit)",
    "decode-bound-cv2": "cv2.imdecode + the same crop + cv2.resize alone on pre-read bytes, one process per core",
}
_FLOAT_OUTPUT = {"torch-pil", "fastdata-lmdb", "fastdata-tfrecord", "dali"}
_TARGETS = (("fastdata-tfrecord", "torch-pil", 2.4), ("fastdata-lmdb", "torch-pil", 2.4),
            ("fastdata-uint8", "torch-cv2", 1.5), ("fastdata-uint8", "decode-bound", 0.9))
_BOUNDS = {"decode-bound": "fastdata", "decode-bound-cv2": "cv2"}
_STAMP = ".source.json"
_PACK_SEED = 0  # shuffled packs: DALI's reader only shuffles within a buffer


def schedule(pipelines: Sequence[str], repeats: int) -> list[tuple[int, str]]:
    """Round-robin order of the runs: ``[(0, p1), (0, p2), ..., (1, p1), (1, p2), ...]``.

    Raises:
        ValueError: ``repeats < 1``.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}; use 3 or more for a median")
    return [(r, name) for r in range(repeats) for name in pipelines]


def default_cache(data: str | os.PathLike) -> Path:
    """``DATA.parent / (DATA.name + ".fastdata-cache")``."""
    data = Path(data).resolve()
    return data.parent / (data.name + ".fastdata-cache")


def _fingerprint(data: Path, paths: Sequence[str], classes: Sequence[str]) -> str:
    digest = hashlib.sha256(json.dumps(list(classes)).encode())
    for rel in paths:
        st = os.stat(data / rel)
        digest.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def prepare_cache(data: str | os.PathLike, cache: str | os.PathLike, *, formats: Sequence[str] = ("tfrecord", "lmdb"),
                  workers: int | None = None, progress: bool = True) -> dict[str, Path]:
    """Pack ``data`` into ``cache/<format>`` unless a pack of the same files is already there.

    The shards are packed in a seeded shuffled order (``shuffle_seed=0``), as one packs for
    training (DALI's reader only shuffles within a buffer). A pack is reused when its manifest
    exists and the fingerprint of the folder (paths, sizes, mtimes, classes) recorded next to it
    matches; otherwise it is rebuilt.

    Args:
        data: the image folder.
        cache: the folder that holds one packed folder per format.
        formats: the formats to pack.
        workers: packing processes (None: all cores; 0: in this process).
        progress: show the packer's progress bar.

    Returns:
        ``{format: packed folder}``.
    """
    from fastdata.formats.manifest import MANIFEST_NAME
    from fastdata.packing.packer import pack

    data, cache = Path(data), Path(cache)
    scan = scan_image_folder(data)
    # "records=transcoded": packs cached before pack re-coded JPEGs (keep-bytes records) are packed again
    stamp = _fingerprint(data, scan.paths, scan.classes + [f"shuffle_seed={_PACK_SEED}", "records=transcoded"])
    roots = {}
    for fmt in formats:
        out, stamp_file = cache / fmt, cache / f"{fmt}{_STAMP}"
        fresh = (out / MANIFEST_NAME).is_file() and stamp_file.is_file() and \
            json.loads(stamp_file.read_text()).get("fingerprint") == stamp
        if not fresh:
            logger.info("packing %s into %s", data, out)
            start = time.perf_counter()
            pack(data, out, format=fmt, shuffle_seed=_PACK_SEED, workers=workers, overwrite=True, progress=progress)
            stamp_file.write_text(json.dumps({"fingerprint": stamp, "source": str(data),
                                              "pack_s": time.perf_counter() - start, "workers": workers}))
        roots[fmt] = out
    return roots


# -- pipelines -----------------------------------------------------------------------------------
@dataclass
class _Context:
    data: Path
    roots: dict[str, Path]
    batch_size: int
    workers: int
    size: int
    device: torch.device
    folder_files: list[Path] = field(default_factory=list)
    peer_dirs: dict[str, str] = field(default_factory=dict)


class _ToDevice:
    """Move ``(images, labels)`` batches to ``device`` (what a training loop does with torch's loader)."""

    def __init__(self, loader: Iterable, device: torch.device) -> None:
        self.loader, self.device = loader, device

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __iter__(self):
        for images, labels in self.loader:
            yield images.to(self.device, non_blocking=True), labels.to(self.device, non_blocking=True)


def _shutdown(loader: Any) -> None:
    """Stop the persistent workers of a DataLoader (fastdata's or torch's)."""
    it = getattr(loader, "_iterator", None)
    if it is not None and hasattr(it, "_shutdown_workers"):
        it._shutdown_workers()
    if it is not None:
        loader._iterator = None


def _shard_files(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_file())


def _build(name: str, ctx: _Context) -> tuple[Iterable, Callable[[], None]]:
    """Build the iterable for one run of ``name`` and its closer."""
    from fastdata.datasets.shard_dataset import ShardDataset
    from fastdata.loader.collate import NormalizeCollate, fast_collate
    from fastdata.gpu_transforms import Compose, Normalize, RandomHorizontalFlip
    from fastdata.loader.dataloader import DataLoaderX
    from fastdata.loader.prefetcher import DataPrefetcher
    from fastdata.transforms import RandomResizedCrop

    cuda = ctx.device.type == "cuda"
    if name in ctx.peer_dirs:
        return harness.build(name, ctx.peer_dirs[name], ctx.batch_size, ctx.workers, ctx.size)
    if name == "torch-pil":
        ds = FolderDataset(ctx.data, transform=pil_train_transform(ctx.size))
        loader = DataLoader(ds, ctx.batch_size, shuffle=True, num_workers=ctx.workers, pin_memory=cuda)
        return (_ToDevice(loader, ctx.device) if cuda else loader), lambda: _shutdown(loader)
    if name == "torch-cv2":
        ds = FolderDataset(ctx.data, transform=CV2RandomResizedCropFlip(ctx.size), loader=cv2_loader)
        loader = DataLoader(ds, ctx.batch_size, shuffle=True, num_workers=ctx.workers, collate_fn=uint8_collate,
                            worker_init_fn=cv2_worker_init)
        return loader, lambda: _shutdown(loader)
    if name == "dali":
        from fastdata.dali import DALILoader

        dali = DALILoader(ctx.roots["tfrecord"], ctx.batch_size, device="gpu" if cuda else "cpu", size=ctx.size,
                          train=True, num_threads=max(1, ctx.workers))
        return dali, getattr(dali, "close", lambda: None)
    fmt = "lmdb" if name == "fastdata-lmdb" else "tfrecord"
    ds = ShardDataset(ctx.roots[fmt], transform=RandomResizedCrop(ctx.size))
    if name != "fastdata-uint8" and not cuda:  # CPU training: normalized float made in the workers
        collate = NormalizeCollate(IMAGENET_MEAN, IMAGENET_STD, hflip_p=0.5)
        loader = DataLoaderX(ds, ctx.batch_size, shuffle=True, num_workers=ctx.workers, collate_fn=collate,
                             persistent_workers=ctx.workers > 0)
        return loader, lambda: _shutdown(loader)
    loader = DataLoaderX(ds, ctx.batch_size, shuffle=True, num_workers=ctx.workers, collate_fn=fast_collate,
                         persistent_workers=ctx.workers > 0)
    if name == "fastdata-uint8":
        return loader, lambda: _shutdown(loader)
    augment = Compose([RandomHorizontalFlip(), Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    prefetcher = DataPrefetcher(loader, transform=augment)

    def close() -> None:
        prefetcher.close()
        _shutdown(loader)

    return prefetcher, close


def _inputs(name: str, ctx: _Context) -> list[Path]:
    if name in ctx.peer_dirs:
        return harness.inputs(ctx.peer_dirs[name])
    if name in ("torch-pil", "torch-cv2"):
        return ctx.folder_files
    return _shard_files(ctx.roots["lmdb" if name == "fastdata-lmdb" else "tfrecord"])


def _unavailable(name: str) -> str | None:
    """Why ``name`` cannot run here (None when it can)."""
    if name != "dali":
        return None
    if not _optional.has_dali():
        return f"skipped: {_optional.DALI_HINT}"
    try:
        from fastdata.dali import DALILoader  # noqa: F401
    except ImportError as exc:
        return f"skipped: the fastdata.dali backend is unavailable ({exc})"
    return None


# -- the comparison --------------------------------------------------------------------------------
def _one_run(name: str, ctx: _Context, *, warm: bool, epochs: int, batches: int | None, progress: bool,
             label: str) -> dict[str, Any]:
    """Set the page cache, then measure one run of ``name`` with the memory sampler on."""
    cache_s = set_page_cache(_inputs(name, ctx), warm=warm)
    with MemorySampler() as mem:
        if name in _BOUNDS:
            limit = None if batches is None else (batches + max(1, ctx.workers)) * ctx.batch_size
            run = measure_decode_bound(ctx.roots["tfrecord"], size=ctx.size, limit=limit, method=_BOUNDS[name])
        else:
            iterable, close = _build(name, ctx)
            try:
                check = BatchCheck(ctx.size, ctx.batch_size, torch.float32 if name in _FLOAT_OUTPUT else torch.uint8)
                device = ctx.device if name in _FLOAT_OUTPUT else torch.device("cpu")
                run = measure_run(iterable, check=check, epochs=epochs, batches=batches, warmup=max(1, ctx.workers),
                                  device=device, desc=label, progress=progress)
                run["output"] = check.result()
            finally:
                close()
    run.update(peak_rss_mb=mem.peak_rss_mb, peak_pss_mb=mem.peak_pss_mb, page_cache_s=cache_s)
    return run


def _check_args(pipelines: Sequence[str] | None, batch_size: int, workers: int | None, batches: int | None,
                epochs: int, repeats: int, size: int) -> list[str]:
    names = list(PIPELINES if pipelines is None else pipelines)
    unknown = [n for n in names if n not in PIPELINES]
    if unknown or not names or len(set(names)) != len(names):
        raise ValueError(f"pipelines must be distinct names from {list(PIPELINES)}, got {names!r}")
    for arg, value, low in (("batch_size", batch_size, 1), ("epochs", epochs, 1), ("repeats", repeats, 1),
                            ("size", size, 1), ("workers", workers, 0), ("batches", batches, 1)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
            raise ValueError(f"{arg} must be an int >= {low}, got {value!r}")
    return names


def _gpu_training(names: list[str], entries: dict[str, Any], ctx: _Context, classes: int, warm: bool) -> dict[str, Any]:
    out = {}
    for name in [n for n in names if n in _FLOAT_OUTPUT and entries[n]["status"] == "ok"]:
        set_page_cache(_inputs(name, ctx), warm=warm)
        iterable, close = _build(name, ctx)
        try:
            out[name] = measure_gpu_training(iterable, num_classes=classes, batch_size=ctx.batch_size, size=ctx.size)
        except Exception as exc:  # noqa: BLE001 - reported, the other pipelines still run
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            close()
    return out


def run_benchmark(data: str | os.PathLike, *, pipelines: Sequence[str] | None = None, batch_size: int = 256,
                  workers: int | None = None, batches: int | None = None, epochs: int = 1, repeats: int = 3,
                  cache: str | os.PathLike | None = None, warm: bool = True, size: int = 224,
                  breakdown_samples: int = 500, isolate: bool = True, progress: bool = True,
                  peers: Sequence[str] = ()) -> dict[str, Any]:
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

    Returns:
        A JSON-ready dict: ``config``, ``machine``, ``dataset``, ``pipelines`` (per name: status,
        runs, images/s statistics, ratios, first-batch latency, peak memory, output check),
        ``breakdown``, ``gpu_training`` (None without CUDA) and ``targets``.

    Raises:
        FileNotFoundError: ``data`` is not an image folder.
        ValueError: an unknown pipeline name or a bad number.
    """
    names = _check_args(pipelines, batch_size, workers, batches, epochs, repeats, size)
    peers = harness.check_names(peers)
    data = Path(data)
    scan = scan_image_folder(data)
    workers = usable_cores() if workers is None else workers
    cache = Path(cache) if cache is not None else default_cache(data)
    roots = prepare_cache(data, cache, workers=workers, progress=progress)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ctx = _Context(data, roots, batch_size, workers, size, device, [data / p for p in scan.paths])
    entries: dict[str, dict[str, Any]] = {}
    for name in names:
        note = _unavailable(name)
        entries[name] = {"status": "skipped" if note else "ok", "description": _DESCRIPTIONS[name], "runs": []}
        if note:
            entries[name]["note"] = note
            _say(f"{name}: {note}", progress)
    if peers:  # converted first by their own writers, then measured in the same rounds
        ready = harness.prepare_peers([str(p) for p in ctx.folder_files], scan.labels, cache, peers, isolate=isolate,
                                      fingerprint=_fingerprint(data, scan.paths, scan.classes),
                                      say=lambda line: _say(line, progress))
        entries.update(ready)
        if "fastdata-uint8" in entries:  # fastdata's own conversion: the TFRecord pack
            entries["fastdata-uint8"]["conversion"] = harness.pack_stats(roots["tfrecord"], cache / f"tfrecord{_STAMP}")
        ctx.peer_dirs.update({n: e["dir"] for n, e in ready.items() if e["status"] == "ok"})
        names += list(peers)
    order = schedule([n for n in names if entries[n]["status"] == "ok"], repeats)
    for k, (rep, name) in enumerate(order, 1):
        if entries[name]["status"] != "ok":
            continue
        label = f"[{k}/{len(order)}] {name}"
        try:
            kwargs = {"warm": warm, "epochs": epochs, "batches": batches, "progress": progress, "label": label}
            run = run_isolated(_one_run, name, ctx, **kwargs) if isolate else _one_run(name, ctx, **kwargs)
        except Exception as exc:  # noqa: BLE001 - one broken pipeline must not hide the others' numbers
            logger.debug("%s failed", name, exc_info=True)
            entries[name].update(status="failed", note=f"failed: {type(exc).__name__}: {exc}")
            _say(f"{label} FAILED: {type(exc).__name__}: {exc}", progress)
            continue
        entries[name]["runs"].append({"repeat": rep, **run})
        first = "" if run["first_batch_s"] is None else f"  first batch {run['first_batch_s']:.2f} s"
        _say(f"{label:<28} {run['images_per_s']:9.1f} images/s{first}  "
             f"peak {run['peak_pss_mb'] or run['peak_rss_mb'] or 0:.0f} MB", progress)
    report.summarize_pipelines(entries)
    files = [str(p) for p in ctx.folder_files]
    breakdown = measure_breakdown(roots, files, size=size, samples=breakdown_samples,
                                  batch_size=batch_size) if breakdown_samples > 0 else {}
    gpu = _gpu_training(names, entries, ctx, len(scan.classes), warm) if device.type == "cuda" else None
    window = f"{batches} batches" if batches else f"{epochs} epoch(s)"
    return {
        "config": {"data": str(data), "cache": str(cache), "batch_size": batch_size, "workers": workers,
                   "epochs": None if batches else epochs, "batches": batches, "repeats": repeats, "size": size,
                   "mode": "warm" if warm else "cold", "isolated": isolate, "device": str(device),
                   "dataset_count": len(scan.paths),
                   "window": f"{window} per run, first {max(1, workers)} batch(es) not timed",
                   "order": [f"{name}#{rep}" for rep, name in order]},
        "machine": report.machine_info(), "dataset": report.dataset_stats(data, scan.paths),
        "pipelines": entries, "breakdown": breakdown,
        "gpu_training": gpu, "gpu_note": None if gpu is not None else "no CUDA device: the GPU path was not measured",
        "targets": report.check_targets(entries, _TARGETS),
        **({"peers": {"names": list(peers), "baseline": "fastdata-uint8"}} if peers else {}),
    }



def _say(line: str, progress: bool) -> None:
    if progress:
        from tqdm import tqdm

        tqdm.write(line)
    else:
        logger.info(line)
