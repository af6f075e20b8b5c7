"""MosaicML Streaming as a benchmark peer.

MosaicML Streaming: MDS shards written by ``streaming.MDSWriter``, read by ``StreamingDataset`` in DataLoader
workers.

Per sample the workers do what ``torch-cv2`` does (``cv2.imdecode``, RandomResizedCrop box, ``cv2.resize``, 50%
flip), collated to uint8 batches.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

LIBRARY = "streaming"
INSTALL = "pip install mosaicml-streaming"


def import_library() -> Any:
    """``import streaming``, stepping around the parts that need torchvision.

    ``import streaming``; its package imports its vision/text/multimodal datasets (torchvision, transformers)
    eagerly, which the MDS reader and writer do not use, so a missing or broken torchvision is stepped around.
    """
    try:
        return importlib.import_module("streaming")
    except (ImportError, RuntimeError):
        for key in [k for k in sys.modules if k == "streaming" or k.startswith("streaming.")]:
            del sys.modules[key]
        for sub in ("vision", "text", "multimodal"):
            sys.modules[f"streaming.{sub}"] = types.ModuleType(f"streaming.{sub}")
        return importlib.import_module("streaming")


def convert(images: Sequence[str], labels: Sequence[int], out_dir: Path) -> dict[str, Any]:
    """Write ``{"image": original bytes, "label": int}`` rows with ``MDSWriter`` (64 MiB shards, no compression)."""
    streaming = import_library()
    with streaming.MDSWriter(
        out=str(out_dir), columns={"image": "bytes", "label": "int"}, size_limit=64 << 20
    ) as writer:
        for path, label in zip(images, labels, strict=False):
            writer.write({"image": Path(path).read_bytes(), "label": int(label)})
    return {"note": "MDS shards of the original bytes"}


class _Decoded(torch.utils.data.IterableDataset):
    """Iterates a ``StreamingDataset`` (its own shuffle and split across workers) and decodes each sample."""

    def __init__(self, dataset: Any, size: int) -> None:
        from fastdata.bench.baselines import CV2RandomResizedCropFlip

        self.dataset, self.crop = dataset, CV2RandomResizedCropFlip(size)

    def __len__(self) -> int:
        return len(self.dataset)

    def __iter__(self):
        from fastdata.bench.baselines import cv2_decode_bgr

        for sample in self.dataset:
            yield self.crop(cv2_decode_bgr(sample["image"])), int(sample["label"])


def loader(out_dir: Path, batch_size: int, workers: int, size: int = 224) -> Any:
    """``DataLoader(StreamingDataset(local=out_dir, shuffle=True))`` with uint8 batches."""
    streaming = import_library()
    from streaming.base.util import clean_stale_shared_memory

    from fastdata.bench.baselines import cv2_worker_init, uint8_collate

    clean_stale_shared_memory()
    dataset = streaming.StreamingDataset(local=str(out_dir), shuffle=True, batch_size=batch_size)
    return torch.utils.data.DataLoader(
        _Decoded(dataset, size),
        batch_size=batch_size,
        num_workers=workers,
        collate_fn=uint8_collate,
        worker_init_fn=cv2_worker_init,
        persistent_workers=workers > 0,
    )
