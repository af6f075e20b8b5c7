"""The DALI backend: decode and augment packed TFRecord shards with NVIDIA DALI.

``DALILoader`` reads a dataset packed with ``fastdata pack SRC OUT --format tfrecord`` through
``fn.readers.tfrecord`` and our DALI-compatible index files, decodes on the GPU (``"mixed"``) or
the CPU, crops, resizes, flips and normalizes inside DALI, and hands out batches with the same
contract as :class:`fastdata.DataPrefetcher`: ``images`` a normalized float ``[N, 3, H, W]`` tensor
on the target device (optionally half, optionally ``channels_last``), ``labels`` int64 ``[N]``.

Epochs: every ``iter()`` is one epoch over this process's shard, run by a pipeline built for it:
shard files in a seeded per-epoch order (the same on every shard; training only) and a reader and
augmentation seed from ``(seed, epoch, shard_id)``. An epoch's content is thus a function of its
number, so ``set_epoch``/``state_dict`` resume exactly, at epoch granularity (DALI's reader cannot
resume mid-epoch). The rebuild costs one pipeline build and one shuffle-buffer fill per epoch.
Shuffling mixes only locally (the buffer holds ``initial_fill`` samples), so pack training data
with ``--shuffle-seed``; without it the packer writes ImageFolder order, sorted by class.

Decoding: ``nvidia.dali``'s image decoder handles every format the packer stores: baseline and
progressive JPEG (including grayscale and CMYK), PNG (RGB, RGBA, palette), BMP and WebP; all come
out as 3-channel RGB (alpha dropped).

``nvidia.dali`` is imported only when a pipeline is built, so ``import fastdata.dali`` works
without it; the first use raises ImportError with the install hint.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from fastdata._util.cpus import available_cpus
from fastdata._util.optional import import_dali
from fastdata.dali.pipeline import (
    DEFAULT_INITIAL_FILL,
    READER_NAME,
    PipelineOptions,
    build_pipeline,
    shard_bounds,
)
from fastdata.formats.manifest import Manifest
from fastdata.gpu_transforms import IMAGENET_MEAN, IMAGENET_STD

__all__ = ["DALILoader"]

logger = logging.getLogger(__name__)


def _default_num_threads() -> int:
    """This process's share of the CPU cores (``LOCAL_WORLD_SIZE`` processes per node)."""
    cpus = available_cpus()
    return max(1, cpus // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))


def _resolve_shard(shard_id: int | None, num_shards: int | None) -> tuple[int, int]:
    """Fill unset shard arguments from ``torch.distributed`` (rank, world size), else 0 and 1."""
    dist = torch.distributed
    distributed = dist.is_available() and dist.is_initialized()
    if num_shards is None:
        num_shards = dist.get_world_size() if distributed else 1
    if shard_id is None:
        shard_id = dist.get_rank() if distributed else 0
    if not isinstance(num_shards, int) or num_shards < 1:
        raise ValueError(f"num_shards must be a positive integer, got {num_shards!r}")
    if not isinstance(shard_id, int) or not 0 <= shard_id < num_shards:
        raise ValueError(f"shard_id must be an integer in [0, num_shards={num_shards}), got {shard_id!r}")
    return shard_id, num_shards


def _load_tfrecord_manifest(root: Path) -> Manifest:
    hint = f"pack it with `fastdata pack SRC {root} --format tfrecord`"
    try:
        manifest = Manifest.load(root)
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"root={str(root)!r} holds no fastdata manifest: {hint}") from exc
    if manifest.format != "tfrecord" or any(s.index is None for s in manifest.shards):
        raise ValueError(
            f"root={str(root)!r} holds a {manifest.format!r} pack but DALILoader reads TFRecord shards "
            f"with index files: {hint}, or use ShardDataset + DataLoaderX for this pack"
        )
    return manifest


def _channel_triple(name: str, value: Any) -> tuple[float, float, float]:
    try:
        triple = tuple(float(v) for v in value)
    except (TypeError, ValueError):
        triple = ()
    if len(triple) != 3 or (name == "std" and min(triple) <= 0):
        raise ValueError(f"{name} must be 3 numbers in 0..1 units (e.g. IMAGENET_{name.upper()}), got {value!r}")
    return triple


def _check_args(batch_size: Any, device: Any, size: Any, dtype: Any, resize_size: Any, num_threads: Any) -> None:
    for name, value in (("batch_size", batch_size), ("size", size), ("num_threads", num_threads or 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if device not in ("gpu", "cpu"):
        raise ValueError(f"device must be 'gpu' or 'cpu', got {device!r}")
    if device == "gpu" and not torch.cuda.is_available():
        raise ValueError("device='gpu' but CUDA is not available: pass device='cpu' for a CPU-only DALI pipeline")
    if dtype not in (torch.float32, torch.float16):
        raise TypeError(f"dtype must be torch.float32 or torch.float16 (DALI's outputs), got {dtype!r}")
    if resize_size is not None and (not isinstance(resize_size, int) or resize_size < size):
        raise ValueError(f"resize_size must be an integer >= size={size} (the eval center crop), got {resize_size!r}")


class DALILoader:
    """Batches of a TFRecord pack decoded and augmented by NVIDIA DALI, ``DataPrefetcher``'s contract.

    Args:
        root: a dataset packed with ``--format tfrecord``.
        batch_size: samples per batch (the last batch of an epoch may be smaller).
        device: ``"gpu"`` (decode with nvJPEG, tensors on the current CUDA device) or ``"cpu"``.
        size: output height and width.
        train: RandomResizedCrop(size, scale=(0.08, 1), ratio=(3/4, 4/3)) + horizontal flip if
            True; resize shorter side to ``resize_size`` + center crop ``size`` if False.
        shuffle: shuffle samples (default: ``train``).
        seed: base seed of shuffling and augmentation; each epoch and shard derives its own.
            Pass the same seed on every shard: the per-epoch shard-file order derives from it.
        shard_id: this process's shard (default: ``torch.distributed`` rank, else 0).
        num_shards: number of shards (default: ``torch.distributed`` world size, else 1).
        num_threads: DALI CPU threads (default: the CPU cores divided by ``LOCAL_WORLD_SIZE``).
        mean: per-channel mean in 0..1 units.
        std: per-channel standard deviation in 0..1 units.
        dtype: ``torch.float32`` or ``torch.float16`` images.
        channels_last: hand images out in ``torch.channels_last`` memory format.
        resize_size: eval shorter-side resize (default ``round(size / 0.875)``, 256 for 224).

    Every sample is handed out exactly once per epoch across the ``num_shards`` shards (the
    padding of the last batch is dropped); ``len()`` counts this shard's batches. ``epoch``
    advances when an ``iter()`` is exhausted; an abandoned epoch restarts from its beginning.

    Raises:
        ImportError: DALI is not installed.
        FileNotFoundError: ``root`` holds no manifest.
        ValueError: ``root`` is not a TFRecord pack, or an argument is out of range.
        TypeError: ``dtype`` is not float32/float16.

    Attributes:
        initial_fill: the reader's shuffle buffer in samples (a class attribute; assign it on an
            instance before ``iter()`` to trade host memory for shuffle quality).
        epoch: the epoch the next ``iter()`` runs.

    Example:
        Not run by the documentation build, which has neither NVIDIA DALI nor a CUDA device.

        >>> loader = DALILoader("/data/imagenet-tfr/train", 256, device="gpu", dtype=torch.float16)  # doctest: +SKIP
        >>> for epoch in range(start_epoch, 90):  # doctest: +SKIP
        ...     loader.set_epoch(epoch)
        ...     for images, labels in loader:  # cuda float16 [256, 3, 224, 224], int64 [256]
        ...         loss = criterion(model(images), labels)
        >>> torch.save({"loader": loader.state_dict()}, "ckpt.pt")  # doctest: +SKIP
    """

    initial_fill: int = DEFAULT_INITIAL_FILL

    def __init__(
        self,
        root: str | os.PathLike,
        batch_size: int,
        *,
        device: str = "gpu",
        size: int = 224,
        train: bool = True,
        shuffle: bool | None = None,
        seed: int = 0,
        shard_id: int | None = None,
        num_shards: int | None = None,
        num_threads: int | None = None,
        mean: Sequence[float] = IMAGENET_MEAN,
        std: Sequence[float] = IMAGENET_STD,
        dtype: torch.dtype = torch.float32,
        channels_last: bool = False,
        resize_size: int | None = None,
    ) -> None:
        import_dali()
        _check_args(batch_size, device, size, dtype, resize_size, num_threads)
        self.root, self.batch_size, self.device, self.size = root, batch_size, device, size
        self.train, self.shuffle, self.seed = bool(train), bool(train if shuffle is None else shuffle), int(seed)
        self.shard_id, self.num_shards = _resolve_shard(shard_id, num_shards)
        self.num_threads = num_threads or _default_num_threads()
        self.mean, self.std, self.dtype = _channel_triple("mean", mean), _channel_triple("std", std), dtype
        self.channels_last, self.resize_size = bool(channels_last), resize_size
        self.manifest = _load_tfrecord_manifest(Path(root))
        if self.num_shards > self.manifest.num_samples:
            raise ValueError(f"num_shards={self.num_shards} exceeds the {self.manifest.num_samples} samples in {root}")
        if self.shuffle and self.manifest.options.get("shuffle_seed", 0) is None:
            logger.warning("%s was packed in class order: DALI shuffles only locally; repack with --shuffle-seed", root)
        self.device_id = torch.cuda.current_device() if device == "gpu" else None
        self.epoch = 0

    @property
    def num_samples(self) -> int:
        """Samples this shard hands out per epoch."""
        begin, end = shard_bounds(self.manifest.num_samples, self.shard_id, self.num_shards)
        return end - begin

    def __len__(self) -> int:
        return math.ceil(self.num_samples / self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        iterator = DALIGenericIterator(
            self._pipeline(self.epoch),
            ["images", "labels"],
            reader_name=READER_NAME,
            last_batch_policy=LastBatchPolicy.PARTIAL,
            auto_reset=False,
        )
        for (outputs,) in iterator:
            yield self._to_contract(outputs["images"], outputs["labels"])
        self.epoch += 1

    def _pipeline(self, epoch: int) -> Any:
        """A fresh pipeline for ``epoch``: seeded shard-file order and reader/augmentation seed."""
        order = np.arange(len(self.manifest.shards))
        if self.shuffle:  # the same file order on every shard, so the sample ranges still partition
            order = np.random.default_rng([self.seed, epoch]).permutation(order)
        shards = [self.manifest.shards[int(i)] for i in order]
        root = Path(self.root)
        options = PipelineOptions(
            size=self.size,
            train=self.train,
            shuffle=self.shuffle,
            mean=self.mean,
            std=self.std,
            half=self.dtype == torch.float16,
            channels_last=self.channels_last,
            resize_size=self.resize_size,
            initial_fill=self.initial_fill,
        )
        seed = int(np.random.SeedSequence([self.seed, epoch, self.shard_id]).generate_state(1)[0] & 0x7FFFFFFF)
        return build_pipeline(
            [str(root / s.path) for s in shards],
            [str(root / cast(str, s.index)) for s in shards],  # every shard has one: the open refused packs without
            options,
            batch_size=self.batch_size,
            num_threads=self.num_threads,
            device_id=self.device_id,
            seed=seed,
            shard_id=self.shard_id,
            num_shards=self.num_shards,
        )

    def _to_contract(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """NCHW view of the images (a free permute for HWC output) and flat int64 labels."""
        if self.channels_last:
            images = images.permute(0, 3, 1, 2)  # NHWC storage seen as NCHW == channels_last
        return images, labels.reshape(-1).to(torch.int64)

    def set_epoch(self, epoch: int) -> None:
        """Make the next ``iter()`` run epoch ``epoch`` (its shuffle and augmentation)."""
        if not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch must be a non-negative integer, got {epoch!r}")
        self.epoch = epoch

    def state_dict(self) -> dict[str, int]:
        """The resumable state: the epoch counter (mid-epoch positions are not resumable in DALI)."""
        return {"epoch": self.epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; the next ``iter()`` starts that epoch from its beginning."""
        if not isinstance(state, dict) or "epoch" not in state:
            raise ValueError(f"state must be a dict from DALILoader.state_dict() with an 'epoch' key, got {state!r}")
        self.set_epoch(state["epoch"])

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(root={str(self.root)!r}, batch_size={self.batch_size}, device={self.device!r}, "
            f"train={self.train}, shard_id={self.shard_id}, num_shards={self.num_shards}, epoch={self.epoch})"
        )
