"""The pipelines the benchmark measures: their names, how one run of each is built, and the files it reads.

:func:`build` makes the iterable of one run (and its closer) from a :class:`Context`: torch's
DataLoader over the image folder with PIL or OpenCV, fastdata's loaders over the packed shards,
DALI, or a peer loader through :mod:`fastdata.bench.peers.harness`. :func:`inputs` names the
files a run reads (for the page cache) and :func:`unavailable` says why a pipeline cannot run here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from fastdata._util import optional as _optional
from fastdata.bench.baselines import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    CV2RandomResizedCropFlip,
    FolderDataset,
    cv2_bgr_loader,
    cv2_worker_init,
    pil_train_transform,
    uint8_collate,
)
from fastdata.bench.measure import RESAMPLE
from fastdata.bench.peers import harness

__all__ = [
    "BREAKDOWN_PIPELINES",
    "DESCRIPTIONS",
    "FLOAT_OUTPUT",
    "PIPELINES",
    "Context",
    "build",
    "inputs",
    "unavailable",
]

#: Every pipeline the benchmark knows, in the default order.
PIPELINES: tuple[str, ...] = (
    "torch-pil",
    "torch-cv2",
    "fastdata-lmdb",
    "fastdata-tfrecord",
    "fastdata-uint8",
    "fastdata-thread",
    "fastdata-uint8-thread",
    "dali",
    "decode-bound",
    "decode-bound-cv2",
)

#: What each pipeline does, for the report.
DESCRIPTIONS = {
    "torch-pil": "ImageFolder + PIL RandomResizedCrop/flip/ToTensor/Normalize in workers, DataLoader",
    "torch-cv2": "ImageFolder + cv2.imdecode/resize/cvtColor/flip, contiguous uint8 collate, DataLoader",
    "fastdata-lmdb": "ShardDataset(lmdb, RandomResizedCrop, batch decoded in place) > DataLoaderX > float: "
    "NormalizeCollate in the workers (CPU) or DataPrefetcher (CUDA)",
    "fastdata-tfrecord": "the same over the TFRecord shards",
    "fastdata-uint8": "ShardDataset(tfrecord, RandomResizedCrop + flip at decode time) > DataLoaderX(fast_collate): "
    "uint8 batches, no prefetcher",
    "fastdata-thread": "fastdata-tfrecord with worker_mode='thread': --workers threads of the training process",
    "fastdata-uint8-thread": "fastdata-uint8 with worker_mode='thread': --workers threads of the training process",
    "dali": "fastdata.dali.DALILoader over the TFRecord shards",
    "decode-bound": "fastdata's RandomResizedCrop decode alone on pre-read bytes, one process per core (the limit)",
    "decode-bound-cv2": "cv2.imdecode + the same crop + cv2.resize alone on pre-read bytes, one process per core",
}
#: fastdata's loaders: the pipelines ``--breakdown`` counts stage by stage inside the run.
BREAKDOWN_PIPELINES = (
    "fastdata-lmdb",
    "fastdata-tfrecord",
    "fastdata-uint8",
    "fastdata-thread",
    "fastdata-uint8-thread",
)
#: The pipelines whose batches are normalized float (on the device with CUDA); the others give uint8.
FLOAT_OUTPUT = {"torch-pil", "fastdata-lmdb", "fastdata-tfrecord", "fastdata-thread", "dali"}


@dataclass
class Context:
    """What every pipeline is built from: the folder, its packs, the batch size, workers, crop size, device."""

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


def build(name: str, ctx: Context) -> tuple[Iterable, Callable[[], None]]:
    """Build the iterable for one run of ``name`` and its closer."""
    from fastdata.datasets.shard_dataset import ShardDataset
    from fastdata.gpu_transforms import Compose, Normalize, RandomHorizontalFlip
    from fastdata.loader.collate import NormalizeCollate, fast_collate
    from fastdata.loader.dataloader import DataLoaderX
    from fastdata.loader.prefetcher import DataPrefetcher
    from fastdata.transforms import DecodeCompose, RandomResizedCrop
    from fastdata.transforms import RandomHorizontalFlip as DecodeTimeFlip

    cuda = ctx.device.type == "cuda"
    if name in ctx.peer_dirs:
        return harness.build(name, ctx.peer_dirs[name], ctx.batch_size, ctx.workers, ctx.size)
    if name == "torch-pil":
        ds = FolderDataset(ctx.data, transform=pil_train_transform(ctx.size))
        loader = DataLoader(
            ds,
            ctx.batch_size,
            shuffle=True,
            num_workers=ctx.workers,
            pin_memory=cuda,
            persistent_workers=ctx.workers > 0,
        )
        return (_ToDevice(loader, ctx.device) if cuda else loader), lambda: _shutdown(loader)
    if name == "torch-cv2":
        ds = FolderDataset(ctx.data, transform=CV2RandomResizedCropFlip(ctx.size), loader=cv2_bgr_loader)
        loader = DataLoader(
            ds,
            ctx.batch_size,
            shuffle=True,
            num_workers=ctx.workers,
            collate_fn=uint8_collate,
            worker_init_fn=cv2_worker_init,
            persistent_workers=ctx.workers > 0,
        )
        return loader, lambda: _shutdown(loader)
    if name == "dali":
        from fastdata.dali import DALILoader

        dali = DALILoader(
            ctx.roots["tfrecord"],
            ctx.batch_size,
            device="gpu" if cuda else "cpu",
            size=ctx.size,
            train=True,
            num_threads=max(1, ctx.workers),
        )
        return dali, getattr(dali, "close", lambda: None)
    fmt = "lmdb" if name == "fastdata-lmdb" else "tfrecord"
    threads = name.endswith("-thread") or name == "fastdata-thread"
    uint8 = name.startswith("fastdata-uint8")
    # uint8 output is what a GPU trains from: the flip is made at decode time, as torch-cv2 makes it per image;
    # the float pipelines flip in NormalizeCollate (CPU) or on the GPU (DataPrefetcher)
    crop = RandomResizedCrop(ctx.size, resample=RESAMPLE)
    shards = ShardDataset(ctx.roots[fmt], transform=DecodeCompose([crop, DecodeTimeFlip()]) if uint8 else crop)
    # the thread mode needs a thread at least; the process mode's persistent workers are its steady state
    mode: dict[str, Any] = {"worker_mode": "thread", "num_workers": max(1, ctx.workers)} if threads else {}
    mode.setdefault("num_workers", ctx.workers)
    mode.setdefault("persistent_workers", ctx.workers > 0)
    if not uint8 and not cuda:  # CPU training: normalized float made in the workers
        collate = NormalizeCollate(IMAGENET_MEAN, IMAGENET_STD, hflip_p=0.5)
        loader = DataLoaderX(shards, ctx.batch_size, shuffle=True, collate_fn=collate, **mode)
        return loader, lambda: _shutdown(loader)
    loader = DataLoaderX(shards, ctx.batch_size, shuffle=True, collate_fn=fast_collate, **mode)
    if uint8:
        return loader, lambda: _shutdown(loader)
    augment = Compose([RandomHorizontalFlip(), Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    prefetcher = DataPrefetcher(loader, transform=augment)

    def close() -> None:
        prefetcher.close()
        _shutdown(loader)

    return prefetcher, close


def inputs(name: str, ctx: Context) -> list[Path]:
    """The files pipeline ``name`` reads (pre-read before a warm run, dropped from the cache before a cold one)."""
    if name in ctx.peer_dirs:
        return harness.inputs(ctx.peer_dirs[name])
    if name in ("torch-pil", "torch-cv2"):
        return ctx.folder_files
    return _shard_files(ctx.roots["lmdb" if name == "fastdata-lmdb" else "tfrecord"])


def unavailable(name: str) -> str | None:
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
